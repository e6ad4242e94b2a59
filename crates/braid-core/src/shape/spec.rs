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

    /// Parses a handle in tc's syntax (`get_tc_classid`): `MAJ:MIN` or `MAJ:` (minor 0,
    /// the qdisc itself), both parts hexadecimal (an optional `0x` is accepted, as
    /// `strtoul(..., 16)` does), each below 0x10000: `1:10` is `0x0001_0010`, `1:ff` is
    /// minor 255. Stricter than tc in two ways, because both are always mistakes in a
    /// braid config: a bare number (`10`, which tc reads as `0:10`) and a zero major
    /// (`:10`) are refused.
    pub fn parse(s: &str) -> Result<ClassId, ClassIdError> {
        let hex = |t: &str| -> Option<u32> {
            let t = t
                .strip_prefix("0x")
                .or_else(|| t.strip_prefix("0X"))
                .unwrap_or(t);
            if t.is_empty() || t.len() > 8 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(t, 16).ok().filter(|&v| v < 0x1_0000)
        };
        let Some((maj, min)) = s.split_once(':') else {
            return Err(ClassIdError::NoColon(s.to_owned()));
        };
        let major = hex(maj).ok_or_else(|| ClassIdError::BadMajor {
            input: s.to_owned(),
            major: maj.to_owned(),
        })?;
        if major == 0 {
            return Err(ClassIdError::ZeroMajor(s.to_owned()));
        }
        let minor = if min.is_empty() {
            0
        } else {
            hex(min).ok_or_else(|| ClassIdError::BadMinor {
                input: s.to_owned(),
                minor: min.to_owned(),
            })?
        };
        Ok(ClassId(major << 16 | minor))
    }
}

/// Why a class id does not read ([`ClassId::parse`]); each carries the text as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassIdError {
    /// No `:` between major and minor.
    NoColon(String),
    /// The major is not a hexadecimal number below 0x10000.
    BadMajor {
        /// The whole id.
        input: String,
        /// The major part.
        major: String,
    },
    /// A zero major.
    ZeroMajor(String),
    /// The minor is not a hexadecimal number below 0x10000.
    BadMinor {
        /// The whole id.
        input: String,
        /// The minor part.
        minor: String,
    },
}

impl fmt::Display for ClassIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClassIdError::NoColon(s) => write!(
                f,
                "bad class id {s:?}: write MAJOR:MINOR in hexadecimal, such as \"1:10\""
            ),
            ClassIdError::BadMajor { input, major } => write!(
                f,
                "bad class id {input:?}: major {major:?} is not a hexadecimal number below 10000"
            ),
            ClassIdError::ZeroMajor(s) => write!(
                f,
                "bad class id {s:?}: the major (the qdisc's handle, such as 1:) cannot be 0"
            ),
            ClassIdError::BadMinor { input, minor } => write!(
                f,
                "bad class id {input:?}: minor {minor:?} is not a hexadecimal number below 10000"
            ),
        }
    }
}

impl std::error::Error for ClassIdError {}

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

impl Prefix {
    /// Parses `ADDR` (a host: /32 or /128) or `ADDR/LEN`, IPv4 or IPv6: `192.168.1.110`,
    /// `0.0.0.0/0`, `10.1.0.0/16`, `2001:db8::/32`. Host bits beyond the length are
    /// cleared (`10.1.2.3/16` becomes `10.1.0.0/16`), as u32's `key &= mask` does.
    pub fn parse(s: &str) -> Result<Prefix, PrefixError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| PrefixError::BadAddress {
            input: s.to_owned(),
            addr: a.to_owned(),
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max && !l.starts_with('+'))
                .ok_or_else(|| PrefixError::BadLength {
                    input: s.to_owned(),
                    len: l.to_owned(),
                    max,
                })?,
        };
        Ok(Prefix::new(addr, len))
    }

    /// The prefix with its host bits cleared (`len` is capped at the family's width).
    pub fn new(addr: IpAddr, len: u8) -> Prefix {
        match addr {
            IpAddr::V4(a) => {
                let len = len.min(32);
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                Prefix {
                    addr: IpAddr::V4((u32::from(a) & mask).into()),
                    len,
                }
            }
            IpAddr::V6(a) => {
                let len = len.min(128);
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                Prefix {
                    addr: IpAddr::V6((u128::from(a) & mask).into()),
                    len,
                }
            }
        }
    }
}

/// Why a prefix does not read ([`Prefix::parse`]); each carries the text as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefixError {
    /// The address part is not an IPv4 or IPv6 address.
    BadAddress {
        /// The whole prefix.
        input: String,
        /// The address part.
        addr: String,
    },
    /// The length is not a number from 0 to the family's width.
    BadLength {
        /// The whole prefix.
        input: String,
        /// The length part.
        len: String,
        /// The family's width (32 or 128).
        max: u8,
    },
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefixError::BadAddress { input, addr } => write!(
                f,
                "bad prefix {input:?}: {addr:?} is not an IPv4 or IPv6 address"
            ),
            PrefixError::BadLength { input, len, max } => {
                write!(f, "bad prefix {input:?}: length {len:?} is not 0 to {max}")
            }
        }
    }
}

impl std::error::Error for PrefixError {}

impl fmt::Display for Prefix {
    /// `ADDR/LEN`, always with the length: `192.168.1.110/32`, `2001:db8::/32`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Why a port or port range does not read ([`PortRange::parse`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortRangeError {
    /// A port that is not a decimal number from 0 to 65535.
    BadPort {
        /// The whole range as given.
        input: String,
        /// The port, trimmed.
        port: String,
    },
    /// `LO-HI` with `LO` above `HI`.
    Reversed {
        /// The whole range as given.
        input: String,
        /// The first port.
        lo: u16,
        /// The second port.
        hi: u16,
    },
}

impl fmt::Display for PortRangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortRangeError::BadPort { input, port } => {
                write!(f, "bad port {port:?} in {input:?}: a number 0 to 65535")
            }
            PortRangeError::Reversed { input, lo, hi } => {
                write!(f, "bad port range {input:?}: {lo} is above {hi}")
            }
        }
    }
}

impl std::error::Error for PortRangeError {}

/// An inclusive port range; a single port is `lo == hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port matched.
    pub lo: u16,
    /// Highest port matched.
    pub hi: u16,
}

impl PortRange {
    /// Parses `PORT` or `LO-HI` (inclusive, `LO <= HI`), decimal: `1010`, `1000-2000`.
    pub fn parse(s: &str) -> Result<PortRange, PortRangeError> {
        let port = |t: &str| -> Result<u16, PortRangeError> {
            let t = t.trim();
            let bad = || PortRangeError::BadPort {
                input: s.to_owned(),
                port: t.to_owned(),
            };
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            t.parse().map_err(|_| bad())
        };
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => {
                let p = port(s)?;
                (p, p)
            }
        };
        if lo > hi {
            return Err(PortRangeError::Reversed {
                input: s.to_owned(),
                lo,
                hi,
            });
        }
        Ok(PortRange { lo, hi })
    }
}

impl fmt::Display for PortRange {
    /// `1010` for one port, `1000-2000` for a range.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
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

/// A structural mistake in a [`ShapeSpec`], naming the class or filter
/// ([`ShapeSpec::validate_basic`]). Filters are numbered from 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// A class id with a zero major or minor.
    ZeroId(ClassId),
    /// A class whose major differs from the first class's.
    MixedMajor {
        /// The class.
        class: ClassId,
        /// The first class's major.
        major: u16,
    },
    /// A class id used twice.
    Duplicate(ClassId),
    /// A zero rate or ceil.
    ZeroRate(ClassId),
    /// A prio above 7.
    Prio(ClassId, u8),
    /// A parent that does not exist.
    NoParent(ClassId, ClassId),
    /// More than 8 levels, or a cycle.
    TooDeep(ClassId),
    /// No default class.
    NoDefault,
    /// A default class that does not exist.
    DefaultMissing(ClassId),
    /// A default class with children.
    DefaultNotLeaf(ClassId),
    /// A filter (number, prio) naming a class that does not exist.
    FilterClassMissing(usize, u32, ClassId),
    /// A filter (number, prio) naming a class with children.
    FilterClassNotLeaf(usize, u32, ClassId),
    /// A filter (number, prio) whose src and dst are of different IP versions.
    FilterMixedVersions(usize, u32),
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroId(c) => write!(f, "class {c}: minor and major must be non-zero"),
            Self::MixedMajor { class, major } => {
                write!(
                    f,
                    "class {class}: major differs from the other classes' ({major:x}:)"
                )
            }
            Self::Duplicate(c) => write!(f, "class {c}: defined twice"),
            Self::ZeroRate(c) => write!(f, "class {c}: rate and ceil must be non-zero"),
            Self::Prio(c, p) => write!(f, "class {c}: prio {p} is above 7"),
            Self::NoParent(c, p) => write!(f, "class {c}: parent {p} does not exist"),
            Self::TooDeep(c) => {
                write!(
                    f,
                    "class {c}: tree is too deep (more than 8 levels) or has a cycle"
                )
            }
            Self::NoDefault => {
                f.write_str("no default class: name the leaf that unclassified traffic goes to")
            }
            Self::DefaultMissing(d) => write!(f, "default class {d} does not exist"),
            Self::DefaultNotLeaf(d) => {
                write!(f, "default class {d} is not a leaf (it has children)")
            }
            Self::FilterClassMissing(i, p, c) => {
                write!(f, "filter {i} (prio {p}): class {c} does not exist")
            }
            Self::FilterClassNotLeaf(i, p, c) => {
                write!(
                    f,
                    "filter {i} (prio {p}): class {c} is not a leaf (it has children)"
                )
            }
            Self::FilterMixedVersions(i, p) => {
                write!(
                    f,
                    "filter {i} (prio {p}): src and dst are of different IP versions"
                )
            }
        }
    }
}

impl std::error::Error for SpecError {}

impl ShapeSpec {
    /// Cheap structural checks, each error naming the class or filter: class ids unique,
    /// non-zero minor, one major for all; every parent exists with the same major and
    /// the tree has no cycle and is at most 8 levels deep (`TC_HTB_MAXDEPTH`); rates
    /// non-zero; prio 0-7; the default class is set and is a leaf (braid never sends
    /// unclassified traffic unshaped); every filter's class exists and is a leaf (the
    /// kernel would silently fall through to the default).
    pub fn validate_basic(&self) -> Result<(), SpecError> {
        use std::collections::HashMap;
        let mut by_id: HashMap<ClassId, &ClassSpec> = HashMap::new();
        let major = self.classes.first().map(|c| c.id.major());
        for c in &self.classes {
            if c.id.minor() == 0 || c.id.major() == 0 {
                return Err(SpecError::ZeroId(c.id));
            }
            if Some(c.id.major()) != major {
                return Err(SpecError::MixedMajor {
                    class: c.id,
                    major: major.expect("the first class set it"),
                });
            }
            if by_id.insert(c.id, c).is_some() {
                return Err(SpecError::Duplicate(c.id));
            }
            if c.rate_bps == 0 || c.ceil_bps == Some(0) {
                return Err(SpecError::ZeroRate(c.id));
            }
            if c.prio > 7 {
                return Err(SpecError::Prio(c.id, c.prio));
            }
        }
        let mut has_child: HashMap<ClassId, ()> = HashMap::new();
        for c in &self.classes {
            let mut depth = 1;
            let mut p = c.parent;
            while let Some(pid) = p {
                let Some(parent) = by_id.get(&pid) else {
                    return Err(SpecError::NoParent(c.id, pid));
                };
                depth += 1;
                if depth > 8 {
                    return Err(SpecError::TooDeep(c.id));
                }
                p = parent.parent;
            }
            if let Some(pid) = c.parent {
                has_child.insert(pid, ());
            }
        }
        let leaf = |id: ClassId| by_id.contains_key(&id) && !has_child.contains_key(&id);
        match self.default_class {
            None => return Err(SpecError::NoDefault),
            Some(d) if !by_id.contains_key(&d) => return Err(SpecError::DefaultMissing(d)),
            Some(d) if !leaf(d) => return Err(SpecError::DefaultNotLeaf(d)),
            Some(_) => {}
        }
        for (i, f) in self.filters.iter().enumerate() {
            if !by_id.contains_key(&f.class) {
                return Err(SpecError::FilterClassMissing(i + 1, f.prio, f.class));
            }
            if !leaf(f.class) {
                return Err(SpecError::FilterClassNotLeaf(i + 1, f.prio, f.class));
            }
            if let (Some(s), Some(d)) = (f.src, f.dst) {
                if s.addr.is_ipv4() != d.addr.is_ipv4() {
                    return Err(SpecError::FilterMixedVersions(i + 1, f.prio));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_ids_as_tc() {
        assert_eq!(ClassId::parse("1:10"), Ok(ClassId(0x1_0010)));
        assert_eq!(ClassId::parse("1:"), Ok(ClassId(0x1_0000)));
        assert_eq!(ClassId::parse("1:ff"), Ok(ClassId::new(1, 255)));
        assert_eq!(ClassId::parse("0x1:0x13"), Ok(ClassId(0x1_0013)));
        assert_eq!(ClassId::parse("ffff:FFFF"), Ok(ClassId(0xffff_ffff)));
        for bad in [
            "10", ":10", "0:10", "1:10000", "10000:1", "1:g", "", ":", "1:-1", "root", "1:1:1",
        ] {
            assert!(ClassId::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(ClassId(0x1_0013).to_string(), "1:13");
        assert_eq!(ClassId(0x1_0000).to_string(), "1:0");
    }

    #[test]
    fn prefixes() {
        let p = Prefix::parse("192.168.1.110").unwrap();
        assert_eq!(p.to_string(), "192.168.1.110/32");
        assert_eq!(Prefix::parse("0.0.0.0/0").unwrap().len, 0);
        assert_eq!(
            Prefix::parse("10.1.2.3/16").unwrap().to_string(),
            "10.1.0.0/16"
        );
        assert_eq!(
            Prefix::parse("2001:db8::1/32").unwrap().to_string(),
            "2001:db8::/32"
        );
        assert_eq!(Prefix::parse("::1").unwrap().len, 128);
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "x",
            "1.2.3.4/-1",
        ] {
            assert!(Prefix::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn port_ranges() {
        assert_eq!(
            PortRange::parse("1010"),
            Ok(PortRange { lo: 1010, hi: 1010 })
        );
        assert_eq!(
            PortRange::parse("1000-2000"),
            Ok(PortRange { lo: 1000, hi: 2000 })
        );
        assert_eq!(
            PortRange::parse("1000-2000").unwrap().to_string(),
            "1000-2000"
        );
        assert_eq!(PortRange::parse("80").unwrap().to_string(), "80");
        for bad in ["2000-1000", "65536", "-1", "a", "", "1-", "+5"] {
            assert!(PortRange::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    fn two_level() -> ShapeSpec {
        let root = ClassId::new(1, 1);
        let mut a = ClassSpec::new(ClassId::new(1, 0x10), Some(root), 1_000_000);
        a.prio = 1;
        ShapeSpec {
            default_class: Some(ClassId::new(1, 0x10)),
            classes: vec![ClassSpec::new(root, None, 10_000_000), a],
            filters: vec![FilterSpec {
                class: ClassId::new(1, 0x10),
                ..FilterSpec::default()
            }],
            ..ShapeSpec::default()
        }
    }

    type Mutation = Box<dyn Fn(&mut ShapeSpec)>;

    #[test]
    fn validate_basic_catches_each_mistake() {
        assert_eq!(two_level().validate_basic(), Ok(()));
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|s| s.default_class = None), "no default class"),
            (
                Box::new(|s| s.default_class = Some(ClassId::new(1, 1))),
                "not a leaf",
            ),
            (
                Box::new(|s| s.default_class = Some(ClassId::new(1, 9))),
                "does not exist",
            ),
            (
                Box::new(|s| s.filters[0].class = ClassId::new(1, 1)),
                "filter 1 (prio 0): class 1:1 is not a leaf",
            ),
            (
                Box::new(|s| s.classes[1].parent = Some(ClassId::new(1, 5))),
                "parent 1:5 does not exist",
            ),
            (Box::new(|s| s.classes[1].rate_bps = 0), "non-zero"),
            (Box::new(|s| s.classes[1].prio = 8), "prio 8"),
            (
                Box::new(|s| s.classes[1].id = ClassId::new(2, 0x10)),
                "major differs",
            ),
            (
                Box::new(|s| s.classes[1].id = ClassId::new(1, 1)),
                "defined twice",
            ),
            (
                Box::new(|s| s.classes[0].parent = Some(ClassId::new(1, 0x10))),
                "too deep",
            ),
        ];
        for (mutate, want) in cases {
            let mut s = two_level();
            mutate(&mut s);
            let err = s.validate_basic().unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} lacks {want:?}");
        }
    }

    /// The typed errors print the text the String errors printed (config errors show it).
    #[test]
    fn parse_error_texts() {
        let text = |e: &dyn std::error::Error| e.to_string();
        assert_eq!(
            text(&ClassId::parse("10").unwrap_err()),
            r#"bad class id "10": write MAJOR:MINOR in hexadecimal, such as "1:10""#
        );
        assert_eq!(
            text(&ClassId::parse("x:1").unwrap_err()),
            r#"bad class id "x:1": major "x" is not a hexadecimal number below 10000"#
        );
        assert_eq!(
            text(&ClassId::parse("0:1").unwrap_err()),
            r#"bad class id "0:1": the major (the qdisc's handle, such as 1:) cannot be 0"#
        );
        assert_eq!(
            text(&ClassId::parse("1:10000").unwrap_err()),
            r#"bad class id "1:10000": minor "10000" is not a hexadecimal number below 10000"#
        );
        assert_eq!(
            text(&Prefix::parse("1.2.3/8").unwrap_err()),
            r#"bad prefix "1.2.3/8": "1.2.3" is not an IPv4 or IPv6 address"#
        );
        assert_eq!(
            text(&Prefix::parse("::/129").unwrap_err()),
            r#"bad prefix "::/129": length "129" is not 0 to 128"#
        );
        assert_eq!(
            text(&PortRange::parse("1-x").unwrap_err()),
            r#"bad port "x" in "1-x": a number 0 to 65535"#
        );
        assert_eq!(
            text(&PortRange::parse(" 70000").unwrap_err()),
            r#"bad port "70000" in " 70000": a number 0 to 65535"#
        );
        assert_eq!(
            text(&PortRange::parse("9-3").unwrap_err()),
            "bad port range \"9-3\": 9 is above 3"
        );
    }
}
