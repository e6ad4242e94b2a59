//! The shaper's configuration, as read from braid's TOML (`[shape]`) or from a tc script.
//!
//! Rates are bits per second and sizes bytes, whatever unit the user wrote them in.

use core::fmt;
use std::net::IpAddr;

/// A class handle as tc writes it, `major:minor` with both parts hexadecimal: `1:10` is
/// major 1, minor 0x10. Stored as `major << 16 | minor`, as the kernel's `u32` handle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClassId(pub u32);

impl ClassId {
    /// The handle `major:minor`.
    pub const fn new(major: u16, minor: u16) -> Self {
        Self(((major as u32) << 16) | minor as u32)
    }
    /// The major part (the qdisc's handle).
    pub const fn major(self) -> u16 {
        (self.0 >> 16) as u16
    }
    /// The minor part.
    pub const fn minor(self) -> u16 {
        self.0 as u16
    }
}

impl fmt::Display for ClassId {
    /// As tc prints it: `1:10`, hexadecimal, no leading zeros.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}:{:x}", self.major(), self.minor())
    }
}

/// The whole shaper: what `tc qdisc add ... htb` plus its classes and filters describe.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeSpec {
    /// The link's rate in bit/s: the most the shaper ever sends, above every class.
    /// `None` means "auto": the sum of the bond's measured path capacities, followed as
    /// paths come and go.
    pub link_bps: Option<u64>,
    /// The class that unclassified traffic goes to. Must name a leaf; braid refuses a
    /// missing or inner default class (the kernel sends such traffic unshaped).
    pub default_class: Option<ClassId>,
    /// Rate-to-quantum divisor (tc's `r2q`, default 10).
    pub r2q: u32,
    /// Every class, parents before children or in any order (the shaper sorts them out).
    pub classes: Vec<ClassSpec>,
    /// Filters; evaluated by ascending `prio`, then in the order given.
    pub filters: Vec<FilterSpec>,
}

/// One HTB class (`tc class add ... htb ...`).
#[derive(Clone, Debug, PartialEq)]
pub struct ClassSpec {
    /// This class's handle.
    pub id: ClassId,
    /// The parent class, or `None` for a class attached directly to the qdisc.
    pub parent: Option<ClassId>,
    /// A name for status output ("alex"); tc scripts have none.
    pub name: Option<String>,
    /// Guaranteed rate, bit/s (non-zero).
    pub rate_bps: u64,
    /// Most this class may use when borrowing, bit/s; `None` = `rate_bps`.
    pub ceil_bps: Option<u64>,
    /// Bytes that may go at once above `rate`; `None` = braid's default (time-sized).
    pub burst: Option<u32>,
    /// Bytes that may go at once above `ceil`; `None` = braid's default (time-sized).
    pub cburst: Option<u32>,
    /// Priority for spare capacity, 0 (first) to 7.
    pub prio: u8,
    /// DRR quantum in bytes; `None` = rate / r2q clamped to 1000..=200000 as the kernel.
    pub quantum: Option<u32>,
    /// Leaf queue limit in packets; `None` = the default (1000).
    pub limit: Option<u32>,
}

impl ClassSpec {
    /// A class with only the required fields set.
    pub fn new(id: ClassId, parent: Option<ClassId>, rate_bps: u64) -> Self {
        Self {
            id,
            parent,
            name: None,
            rate_bps,
            ceil_bps: None,
            burst: None,
            cburst: None,
            prio: 0,
            quantum: None,
            limit: None,
        }
    }
}

/// An IP prefix such as `192.168.1.0/24` or `0.0.0.0/0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// Network address (host bits are ignored when matching).
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub len: u8,
}

/// An inclusive port range; a single port is `lo == hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port matched.
    pub lo: u16,
    /// Highest port matched.
    pub hi: u16,
}

/// One filter: every field that is set must match; the first matching filter wins.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FilterSpec {
    /// Lower is evaluated first; equal priorities keep their order.
    pub prio: u32,
    /// Source prefix.
    pub src: Option<Prefix>,
    /// Destination prefix.
    pub dst: Option<Prefix>,
    /// IP protocol number (6 TCP, 17 UDP, ...).
    pub protocol: Option<u8>,
    /// Source port range (TCP/UDP/SCTP/UDP-Lite only).
    pub sport: Option<PortRange>,
    /// Destination port range.
    pub dport: Option<PortRange>,
    /// TOS byte (IPv4) / traffic class (IPv6) `value` under `mask`: matches when
    /// `tos & mask == value & mask`. DSCP `d` is value `d << 2`, mask `0xfc`.
    pub tos: Option<(u8, u8)>,
    /// Where matching packets go.
    pub class: ClassId,
}

impl Default for ShapeSpec {
    fn default() -> Self {
        Self {
            link_bps: None,
            default_class: None,
            r2q: 10,
            classes: Vec::new(),
            filters: Vec::new(),
        }
    }
}
