//! What the bond reports about itself, for `braid status`.

use super::{EtherBond, Mode};
use crate::lacp::{mac_string, LacpStatus};

/// Frames dropped, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DropCounts {
    /// Transmit: no member could carry the frame.
    pub no_member: u64,
    /// Receive: on a backup or non-collecting member.
    pub inactive: u64,
    /// Receive: our own source MAC came back.
    pub looped: u64,
    /// Receive: a Slow Protocols frame LACP refused.
    pub lacp_bad: u64,
    /// Shorter than an Ethernet header.
    pub short: u64,
    /// Receive: on a member the bond does not have.
    pub unknown_member: u64,
}

impl DropCounts {
    fn add(&mut self, o: &DropCounts) {
        self.no_member += o.no_member;
        self.inactive += o.inactive;
        self.looped += o.looped;
        self.lacp_bad += o.lacp_bad;
        self.short += o.short;
        self.unknown_member += o.unknown_member;
    }
}

/// The bond.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct EtherStatus {
    /// Bonding's mode name: `balance-rr`, `active-backup`, `balance-xor`, `broadcast`,
    /// `802.3ad`.
    pub mode: &'static str,
    /// The bond's MAC, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// The transmit hash (used by balance-xor and 802.3ad).
    pub hash: &'static str,
    /// Whether the bond has a usable member.
    pub carrier: bool,
    /// active-backup: the active member.
    pub active: Option<u16>,
    /// The ARP monitor's interval in ms (0: off).
    pub arp_interval_ms: u64,
    /// Drops of the whole bond (transmit, and every member's receive).
    pub drops: DropCounts,
    /// Control frames (announcements, probes) not sent: nobody polled them, or their
    /// member lost carrier first.
    pub control_dropped: u64,
    /// Events dropped because nobody polled them.
    pub events_dropped: u64,
    /// The members, in the order they were added.
    pub members: Vec<MemberStatus>,
    /// The LACP actor (802.3ad).
    pub lacp: Option<LacpStatus>,
}

/// One member.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MemberStatus {
    /// Member id.
    pub id: u16,
    /// The NIC's MAC.
    pub mac: String,
    /// Carrier.
    pub link: bool,
    /// The ARP monitor's verdict (absent when it is off).
    pub arp_up: Option<bool>,
    /// `active`, `backup` (active-backup); `distributing`, `collecting`, `waiting`
    /// (802.3ad); `up` (the other modes); `down` (no link).
    pub state: &'static str,
    /// Whether traffic goes on it now.
    pub usable: bool,
    /// Frames the bond sent on it (as `transmit` decided).
    pub tx_frames: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Frames delivered from it.
    pub rx_frames: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// The bond's own frames sent on it (LACPDUs, announcements, probes).
    pub control_tx: u64,
    /// Its receive drops.
    pub drops: DropCounts,
}

pub(super) fn build(bond: &EtherBond) -> EtherStatus {
    let mut drops = bond.tx_drops;
    drops.unknown_member += bond.unknown_member_rx;
    let members = bond
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            drops.add(&m.counters.drops);
            let link = bond.link_ok(i);
            let state = match bond.config.mode {
                _ if !link => "down",
                Mode::ActiveBackup if bond.active == Some(i) => "active",
                Mode::ActiveBackup => "backup",
                Mode::Lacp if m.usable => "distributing",
                Mode::Lacp if m.collecting => "collecting",
                Mode::Lacp => "waiting",
                Mode::RoundRobin | Mode::Xor | Mode::Broadcast => "up",
            };
            MemberStatus {
                id: m.id.0,
                mac: mac_string(m.mac),
                link: m.carrier,
                arp_up: bond.config.arp_monitor.as_ref().map(|_| m.arp.up),
                state,
                usable: m.usable,
                tx_frames: m.counters.tx_frames,
                tx_bytes: m.counters.tx_bytes,
                rx_frames: m.counters.rx_frames,
                rx_bytes: m.counters.rx_bytes,
                control_tx: m.counters.control_tx,
                drops: m.counters.drops,
            }
        })
        .collect();
    EtherStatus {
        mode: bond.config.mode.name(),
        mac: mac_string(bond.config.mac),
        hash: bond.config.hash.name(),
        carrier: bond.carrier,
        active: bond.active().map(|m| m.0),
        arp_interval_ms: bond.config.arp_monitor.as_ref().map_or(0, |a| {
            u64::try_from(a.interval.as_millis()).unwrap_or(u64::MAX)
        }),
        drops,
        control_dropped: bond.control_dropped,
        events_dropped: bond.events_dropped,
        members,
        lacp: bond.lacp.as_ref().map(|l| l.status()),
    }
}
