//! The bond's vocabulary: its configuration, member ids, and what its calls return.

use core::fmt;
use core::time::Duration;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::hash::HashPolicy;
use crate::lacp;

#[cfg(doc)]
use super::{EtherBond, EtherStatus};

/// Identifies one member of an [`EtherBond`]: 0, 1, 2... in the order they were added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MemberId(pub u16);

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "member#{}", self.0)
    }
}

/// The bonding mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// balance-rr: each frame on the next member.
    RoundRobin,
    /// active-backup: one member carries everything; the others wait.
    ActiveBackup,
    /// balance-xor: a flow hash picks the member.
    Xor,
    /// broadcast: every frame on every member.
    Broadcast,
    /// 802.3ad: LACP aggregates the members; a flow hash picks among the distributing.
    Lacp,
}

impl Mode {
    /// Bonding's name of the mode.
    pub fn name(self) -> &'static str {
        match self {
            Mode::RoundRobin => "balance-rr",
            Mode::ActiveBackup => "active-backup",
            Mode::Xor => "balance-xor",
            Mode::Broadcast => "broadcast",
            Mode::Lacp => "802.3ad",
        }
    }
}

/// LACP settings (802.3ad mode only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LacpSettings {
    /// Fast (1 s) or slow (30 s) LACPDUs from the partner.
    pub rate: lacp::Rate,
    /// Active or passive.
    pub mode: lacp::Mode,
    /// The operational key.
    pub key: u16,
    /// System priority.
    pub system_priority: u16,
    /// Active-backup on one member when no partner speaks LACP (OVS's lacp-fallback-ab).
    pub fallback_ab: bool,
}

impl Default for LacpSettings {
    /// Bonding's defaults: slow rate, active, key 1, system priority 65535, no fallback.
    fn default() -> Self {
        Self {
            rate: lacp::Rate::Slow,
            mode: lacp::Mode::Active,
            key: 1,
            system_priority: 65535,
            fallback_ab: false,
        }
    }
}

/// What the bond announces when its active member changes (active-backup).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announce {
    /// A gratuitous ARP for each.
    pub ipv4: Vec<Ipv4Addr>,
    /// An unsolicited Neighbour Advertisement for each.
    pub ipv6: Vec<Ipv6Addr>,
    /// How many of each (bonding's num_grat_arp / num_unsol_na; 0 = none).
    pub count: u8,
}

impl Default for Announce {
    fn default() -> Self {
        Self {
            ipv4: Vec::new(),
            ipv6: Vec::new(),
            count: 1,
        }
    }
}

/// Bonding's ARP monitor (`arp_interval`, `arp_ip_target`, with `arp_validate=none`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArpMonitor {
    /// How often requests go out and the members are judged.
    pub interval: Duration,
    /// The addresses asked (1 to 16).
    pub targets: Vec<Ipv4Addr>,
    /// The requests' sender address (the bond's own, or 0.0.0.0).
    pub source: Ipv4Addr,
}

/// Most ARP targets, as bonding's `BOND_MAX_ARP_TARGETS`.
pub const MAX_ARP_TARGETS: usize = 16;

/// The bond's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtherConfig {
    /// The bond's MAC: the source of what it announces and probes; frames received with
    /// it as their source are our own come back, and dropped.
    pub mac: [u8; 6],
    /// The mode.
    pub mode: Mode,
    /// Transmit hash (balance-xor and 802.3ad).
    pub hash: HashPolicy,
    /// LACP (802.3ad only).
    pub lacp: LacpSettings,
    /// 802.3ad: members that must be distributing before the bond carries traffic
    /// (0 means 1), as bonding's `min_links`.
    pub min_links: u16,
    /// active-backup: the preferred member, active whenever its link is up.
    pub primary: Option<MemberId>,
    /// What is announced on failover (active-backup).
    pub announce: Announce,
    /// The ARP monitor (not with 802.3ad, as bonding).
    pub arp_monitor: Option<ArpMonitor>,
}

impl EtherConfig {
    /// A configuration with bonding's defaults for everything but the MAC and mode.
    pub fn new(mac: [u8; 6], mode: Mode) -> Self {
        Self {
            mac,
            mode,
            hash: HashPolicy::Layer2,
            lacp: LacpSettings::default(),
            min_links: 0,
            primary: None,
            announce: Announce::default(),
            arp_monitor: None,
        }
    }
}

/// Why a configuration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtherConfigError {
    /// `arp_interval` of zero: leave the monitor out instead.
    ArpIntervalZero,
    /// The ARP monitor has no target.
    ArpNoTargets,
    /// More than [`MAX_ARP_TARGETS`] targets.
    ArpTooManyTargets(usize),
    /// The ARP monitor is not available in 802.3ad mode (as bonding).
    ArpMonitorWithLacp,
}

impl fmt::Display for EtherConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ArpIntervalZero => write!(f, "arp_interval must be more than 0 ms"),
            Self::ArpNoTargets => write!(f, "arp_interval needs at least one arp_ip_target"),
            Self::ArpTooManyTargets(n) => {
                write!(f, "{n} arp_ip_target addresses (at most {MAX_ARP_TARGETS})")
            }
            Self::ArpMonitorWithLacp => {
                write!(f, "the ARP monitor is not available with 802.3ad")
            }
        }
    }
}

impl std::error::Error for EtherConfigError {}

/// One member port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberConfig {
    /// The NIC's own MAC (the source of its LACPDUs).
    pub mac: [u8; 6],
    /// Its carrier now.
    pub link_up: bool,
}

/// Where a frame from the host goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Egress {
    /// On this member.
    One(MemberId),
    /// On every member of [`EtherBond::usable`] (broadcast mode).
    All,
    /// Nowhere.
    Drop(DropReason),
}

/// What becomes of a frame a member received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ingress {
    /// Give it to the host.
    Deliver,
    /// The bond took it (a LACPDU, a marker, an ARP monitor reply on a backup member).
    Consumed,
    /// Drop it.
    Drop(DropReason),
}

/// Why a frame was dropped (each is counted in [`EtherStatus`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// No member can carry it.
    NoMember,
    /// Received on a backup (active-backup) or non-collecting (802.3ad) member.
    Inactive,
    /// Its source is the bond's own MAC: our own frame come back.
    Looped,
    /// A Slow Protocols frame LACP refused.
    LacpBad,
    /// Shorter than an Ethernet header.
    Short,
    /// Received on a member the bond does not have.
    UnknownMember,
}

/// Something the driver may want to log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtherEvent {
    /// A member's link is up (carrier, and the ARP monitor when on).
    MemberUp(MemberId),
    /// A member's link is down.
    MemberDown(MemberId),
    /// active-backup: the active member changed.
    ActiveChanged {
        /// The member active before.
        from: Option<MemberId>,
        /// The member active now.
        to: Option<MemberId>,
    },
    /// The bond has a usable member again.
    CarrierUp,
    /// The bond has no usable member (or fewer than `min_links`).
    CarrierDown,
    /// From the LACP actor.
    Lacp(lacp::Event),
}
