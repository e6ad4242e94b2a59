//! The core's [`EtherConfig`] from the validated config.
use braid_core::ether::{Announce, ArpMonitor, EtherConfig, LacpSettings, MemberId, Mode};
use braid_core::lacp;
use std::net::{IpAddr, Ipv6Addr};

use crate::config::{Config, EtherScheduler, EtherSettings};

/// The LACP system priority: bonding's default `ad_actor_sys_prio`.
const SYSTEM_PRIORITY: u16 = 65_535;
/// The operational key of every member (one aggregator; see docs/lacp.md).
const KEY: u16 = 1;

/// `e`'s bond with the MAC `mac`; failover announcements for the bond's own addresses
/// and those `moved` onto it from the members.
pub(super) fn core_config(
    cfg: &Config,
    e: &EtherSettings,
    mac: [u8; 6],
    moved: impl Iterator<Item = IpAddr>,
) -> EtherConfig {
    let b = &cfg.bond;
    let mut ipv4 = vec![b.address.addr];
    let mut ipv6: Vec<Ipv6Addr> = b.address6.iter().map(|a| a.addr).collect();
    for a in moved {
        match a {
            IpAddr::V4(a) if !ipv4.contains(&a) => ipv4.push(a),
            IpAddr::V6(a) if !ipv6.contains(&a) => ipv6.push(a),
            _ => {}
        }
    }
    EtherConfig {
        mac,
        mode: match e.scheduler {
            EtherScheduler::RoundRobin => Mode::RoundRobin,
            EtherScheduler::ActiveBackup => Mode::ActiveBackup,
            EtherScheduler::Xor => Mode::Xor,
            EtherScheduler::Broadcast => Mode::Broadcast,
            EtherScheduler::Lacp => Mode::Lacp,
        },
        hash: e.hash,
        lacp: LacpSettings {
            rate: if e.lacp_fast {
                lacp::Rate::Fast
            } else {
                lacp::Rate::Slow
            },
            mode: if e.lacp_active {
                lacp::Mode::Active
            } else {
                lacp::Mode::Passive
            },
            key: KEY,
            system_priority: SYSTEM_PRIORITY,
            fallback_ab: e.lacp_fallback,
        },
        min_links: e.min_links,
        primary: e.primary.and_then(|i| u16::try_from(i).ok()).map(MemberId),
        announce: Announce {
            ipv4,
            ipv6,
            count: 1,
        },
        arp_monitor: (!e.arp_interval.is_zero()).then(|| ArpMonitor {
            interval: e.arp_interval,
            targets: e.arp_targets.clone(),
            source: b.address.addr,
        }),
    }
}
