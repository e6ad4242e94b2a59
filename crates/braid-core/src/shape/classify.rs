//! The classifier: filters by prefix, protocol, port and TOS in priority order; the first
//! match wins; otherwise the default class.
//!
//! Packets are raw IP (what the TUN device gives): IPv4 or IPv6, told apart by the
//! version nibble. An Ethernet frame (a TAP's) is classified by the IP packet it carries
//! ([`Classifier::classify_frame`]), and one that carries none goes to the default class.
//! A filter matches when every field it sets matches:
//!
//! - `src` / `dst`: the address is of the prefix's family and inside it (an IPv4 prefix
//!   never matches an IPv6 packet and the other way round; `0.0.0.0/0` is "any IPv4");
//! - `protocol`: the IPv4 protocol field, or for IPv6 the upper-layer header found after
//!   the hop-by-hop, routing, destination-options and fragment extension headers;
//! - `sport` / `dport`: only TCP, UDP, UDP-Lite and SCTP carry ports, and only in the first
//!   fragment; a packet whose ports cannot be read (other protocol, later fragment,
//!   truncated) does not match a filter that asks for ports;
//! - `tos`: the IPv4 TOS byte or the IPv6 traffic class, `tos & mask == value & mask`.
//!
//! Differences from the kernel's u32 (documented in `docs/shaping.md`): u32 reads ports at
//! fixed offsets 20/22 (wrong for IPv4 headers with options, and for non-port protocols);
//! braid reads them after the real header length and only for protocols that have them.
//!
//! Cost: filters are tried in order, except that a run of at least [`MIN_EXACT_RUN`]
//! consecutive filters that each match one whole address (a `/32` or `/128` source, or
//! destination, and nothing else: the usual per-host or per-subscriber filter) is looked
//! up in a hash table keyed by that address, as the kernel's u32 hash tables do. The first
//! match is the same either way: the table keeps, per address, the run's first filter.
//!
//! Never panics on any bytes, and allocates nothing per packet.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;

use super::spec::{ClassId, FilterSpec, PortRange, Prefix};
#[cfg(test)]
use crate::flow::proto::{SCTP, TCP, UDP, UDPLITE};
use crate::wire::ip::{has_ports, IpPacket, Ports};
use crate::Frames;

/// A prefix in matching form: family, network bits and mask, as one u128.
#[derive(Clone, Copy, Debug)]
struct Net {
    v6: bool,
    net: u128,
    mask: u128,
}

impl Net {
    fn new(p: &Prefix) -> Net {
        match p.addr {
            IpAddr::V4(a) => {
                let mask = u128::from(
                    u32::MAX
                        .checked_shl(32 - u32::from(p.len.min(32)))
                        .unwrap_or(0),
                );
                Net {
                    v6: false,
                    net: u128::from(u32::from(a)) & mask,
                    mask,
                }
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(p.len.min(128)))
                    .unwrap_or(0);
                Net {
                    v6: true,
                    net: u128::from(a) & mask,
                    mask,
                }
            }
        }
    }

    fn matches(&self, v6: bool, addr: u128) -> bool {
        self.v6 == v6 && addr & self.mask == self.net
    }
}

/// One filter in matching form.
#[derive(Clone, Debug)]
struct Rule {
    src: Option<Net>,
    dst: Option<Net>,
    protocol: Option<u8>,
    sport: Option<PortRange>,
    dport: Option<PortRange>,
    tos: Option<(u8, u8)>,
    class: ClassId,
}

/// What a filter can look at, read once per packet.
#[derive(Clone, Copy, Debug)]
struct Fields {
    v6: bool,
    src: u128,
    dst: u128,
    protocol: u8,
    tos: u8,
    /// (source, destination) when the packet has readable ports.
    ports: Option<(u16, u16)>,
}

/// The shortest run of whole-address filters that is looked up by hash instead of tried
/// one by one (below it a scan is as fast).
pub(super) const MIN_EXACT_RUN: usize = 8;

/// Which address of the packet a run of whole-address filters matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Src,
    Dst,
}

/// A multiplicative hash of an address (the table's keys are addresses the config chose;
/// a hash-flooding attacker controls packets, not keys, and a lookup is one probe chain).
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u128(&mut self, n: u128) {
        let x = (n as u64) ^ ((n >> 64) as u64).rotate_left(29);
        let h = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

/// The filters in matching order, as stages.
#[derive(Clone, Debug)]
enum Stage {
    /// These rules, tried one by one.
    Scan(core::ops::Range<usize>),
    /// A run of whole-address rules on `field` of family `v6`: per address, the class of
    /// the run's first rule for it.
    Exact {
        field: Field,
        v6: bool,
        first: HashMap<u128, ClassId, BuildHasherDefault<AddrHasher>>,
    },
}

/// Filters sorted for matching.
#[derive(Clone, Debug, Default)]
pub struct Classifier {
    rules: Vec<Rule>,
    /// The rules as scans and hashed runs; empty when no run is long enough to hash
    /// (then every rule is tried in order).
    stages: Vec<Stage>,
    default_class: ClassId,
}

/// The field, family and address of a rule that matches one whole address and nothing
/// else.
fn exact_key(r: &Rule) -> Option<(Field, bool, u128)> {
    if r.protocol.is_some() || r.sport.is_some() || r.dport.is_some() || r.tos.is_some() {
        return None;
    }
    let (field, net) = match (&r.src, &r.dst) {
        (Some(n), None) => (Field::Src, n),
        (None, Some(n)) => (Field::Dst, n),
        _ => return None,
    };
    let whole = if net.v6 {
        u128::MAX
    } else {
        u128::from(u32::MAX)
    };
    (net.mask == whole).then_some((field, net.v6, net.net))
}

/// Splits the rules into scans and hashed runs of [`MIN_EXACT_RUN`] or more (nothing when
/// there is no such run).
fn stages(rules: &[Rule]) -> Vec<Stage> {
    let keys: Vec<_> = rules.iter().map(exact_key).collect();
    let mut stages = Vec::new();
    let mut scan_from = 0;
    let mut k = 0;
    while k < rules.len() {
        let Some(Some((field, v6, _))) = keys.get(k).copied() else {
            k += 1;
            continue;
        };
        let end = keys
            .iter()
            .skip(k)
            .position(|key| !matches!(key, Some((f, v, _)) if *f == field && *v == v6))
            .map_or(rules.len(), |n| k + n);
        if end - k < MIN_EXACT_RUN {
            k = end;
            continue;
        }
        if scan_from < k {
            stages.push(Stage::Scan(scan_from..k));
        }
        let mut first = HashMap::default();
        for (key, r) in keys.iter().zip(rules).take(end).skip(k) {
            if let Some((_, _, addr)) = key {
                first.entry(*addr).or_insert(r.class);
            }
        }
        stages.push(Stage::Exact { field, v6, first });
        scan_from = end;
        k = end;
    }
    if stages.is_empty() {
        // Nothing hashed: `classify` scans every rule without stages.
        return stages;
    }
    if scan_from < rules.len() {
        stages.push(Stage::Scan(scan_from..rules.len()));
    }
    stages
}

impl Classifier {
    /// Sorts `filters` by priority (stable) and remembers the default class.
    pub fn new(filters: &[FilterSpec], default_class: ClassId) -> Self {
        let mut sorted: Vec<&FilterSpec> = filters.iter().collect();
        sorted.sort_by_key(|f| f.prio); // stable: equal prios keep their order
        let rules = sorted
            .into_iter()
            .map(|f| Rule {
                src: f.src.as_ref().map(Net::new),
                dst: f.dst.as_ref().map(Net::new),
                protocol: f.protocol,
                sport: f.sport,
                dport: f.dport,
                tos: f.tos,
                class: f.class,
            })
            .collect::<Vec<_>>();
        Self {
            stages: stages(&rules),
            rules,
            default_class,
        }
    }

    /// The class for an IP packet (IPv4 or IPv6; anything unparsable goes to the default).
    pub fn classify(&self, packet: &[u8]) -> ClassId {
        let Some(f) = parse(packet) else {
            return self.default_class;
        };
        if self.stages.is_empty() {
            // No hashed run: one scan, as tight as it can be.
            return self
                .rules
                .iter()
                .find(|r| rule_matches(r, &f))
                .map_or(self.default_class, |r| r.class);
        }
        for stage in &self.stages {
            match stage {
                Stage::Scan(range) => {
                    let rules = self
                        .rules
                        .get(range.clone())
                        .expect("stages() builds scan ranges within the rules");
                    if let Some(r) = rules.iter().find(|r| rule_matches(r, &f)) {
                        return r.class;
                    }
                }
                Stage::Exact { field, v6, first } => {
                    if f.v6 != *v6 {
                        continue;
                    }
                    let addr = match field {
                        Field::Src => f.src,
                        Field::Dst => f.dst,
                    };
                    if let Some(&class) = first.get(&addr) {
                        return class;
                    }
                }
            }
        }
        self.default_class
    }

    /// The class for a packet that is an IP packet or an Ethernet frame, as `frames` says:
    /// a frame is classified by the IP packet it carries (after its header and one VLAN
    /// tag); one that carries none (ARP, LLDP, ...) goes to the default class.
    pub fn classify_frame(&self, frames: Frames, packet: &[u8]) -> ClassId {
        frames
            .ip_packet(packet)
            .map_or(self.default_class, |ip| self.classify(ip))
    }

    /// Test oracle: every rule tried in order (what the stages replace).
    #[cfg(test)]
    fn classify_by_scan(&self, packet: &[u8]) -> ClassId {
        let Some(f) = parse(packet) else {
            return self.default_class;
        };
        self.rules
            .iter()
            .find(|r| rule_matches(r, &f))
            .map_or(self.default_class, |r| r.class)
    }

    /// The default class.
    pub fn default_class(&self) -> ClassId {
        self.default_class
    }
}

fn rule_matches(r: &Rule, f: &Fields) -> bool {
    if let Some(n) = &r.src {
        if !n.matches(f.v6, f.src) {
            return false;
        }
    }
    if let Some(n) = &r.dst {
        if !n.matches(f.v6, f.dst) {
            return false;
        }
    }
    if r.protocol.is_some_and(|p| p != f.protocol) {
        return false;
    }
    if let Some((v, m)) = r.tos {
        if f.tos & m != v & m {
            return false;
        }
    }
    if r.sport.is_some() || r.dport.is_some() {
        let Some((sp, dp)) = f.ports else {
            return false;
        };
        if r.sport.is_some_and(|p| sp < p.lo || sp > p.hi) {
            return false;
        }
        if r.dport.is_some_and(|p| dp < p.lo || dp > p.hi) {
            return false;
        }
    }
    true
}

fn ports(protocol: u8, l4: &[u8]) -> Option<(u16, u16)> {
    if !has_ports(protocol) {
        return None;
    }
    let p = Ports::new_checked(l4).ok()?;
    Some((p.src_port(), p.dst_port()))
}

/// The fields of a packet, or `None` for anything that is not an IPv4 or IPv6 header
/// (or an IPv6 extension header chain that ends early). Ports are read after the IPv4
/// header's real length, or after the IPv6 extension headers, in a first fragment only.
fn parse(b: &[u8]) -> Option<Fields> {
    match IpPacket::new_checked(b).ok()? {
        IpPacket::V4(ip) => Some(Fields {
            v6: false,
            src: u128::from(u32::from_be_bytes(ip.src_addr())),
            dst: u128::from(u32::from_be_bytes(ip.dst_addr())),
            protocol: ip.protocol(),
            tos: ip.tos(),
            ports: if ip.frag_offset() == 0 {
                ports(ip.protocol(), ip.payload())
            } else {
                None
            },
        }),
        IpPacket::V6(ip) => {
            let upper = ip.upper_layer().ok()?;
            Some(Fields {
                v6: true,
                src: u128::from_be_bytes(ip.src_addr()),
                dst: u128::from_be_bytes(ip.dst_addr()),
                protocol: upper.protocol,
                tos: ip.traffic_class(),
                ports: if upper.has_header() {
                    b.get(upper.offset..)
                        .and_then(|l4| ports(upper.protocol, l4))
                } else {
                    None
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(src: [u8; 4], dst: [u8; 4], proto: u8, tos: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[1] = tos;
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    fn v6(src: u128, dst: u128, next: u8, tclass: u8, l4: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60 | (tclass >> 4);
        p[1] = tclass << 4;
        p[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
        p[6] = next;
        p[7] = 64;
        p[8..24].copy_from_slice(&src.to_be_bytes());
        p[24..40].copy_from_slice(&dst.to_be_bytes());
        p.extend_from_slice(l4);
        p
    }

    fn id(minor: u16) -> ClassId {
        ClassId::new(1, minor)
    }

    fn pfx(s: &str) -> Option<Prefix> {
        Some(Prefix::parse(s).unwrap())
    }

    /// The seed's filters: three /32 at prio 1, the catch-all at tc's auto prio 49152.
    fn seed() -> Classifier {
        let f = |prio, src: &str, c| FilterSpec {
            prio,
            src: pfx(src),
            class: id(c),
            ..FilterSpec::default()
        };
        // Given in script order: the catch-all comes last but its prio sorts it last too.
        Classifier::new(
            &[
                f(1, "192.168.1.110", 0x10),
                f(1, "192.168.1.111", 0x11),
                f(1, "192.168.1.112", 0x12),
                f(49152, "0.0.0.0/0", 0x13),
            ],
            id(0x13),
        )
    }

    #[test]
    fn long_runs_of_whole_address_filters_are_hashed() {
        let filters: Vec<FilterSpec> = (0..20u8)
            .map(|k| FilterSpec {
                prio: 1,
                dst: pfx(&format!("10.0.0.{k}/32")),
                class: id(u16::from(k) + 1),
                ..FilterSpec::default()
            })
            .chain([FilterSpec {
                prio: 2,
                dst: pfx("10.0.0.5/32"),
                class: id(0x99),
                ..FilterSpec::default()
            }])
            .collect();
        let c = Classifier::new(&filters, id(0xff));
        assert_eq!(c.stages.len(), 1, "{:?}", c.stages);
        assert!(matches!(
            c.stages[0],
            Stage::Exact {
                field: Field::Dst,
                v6: false,
                ..
            }
        ));
        let to = |d: u8| v4([1, 1, 1, 1], [10, 0, 0, d], 6, 0, 1, 2);
        assert_eq!(
            c.classify(&to(5)),
            id(6),
            "the first filter for 10.0.0.5 wins"
        );
        assert_eq!(c.classify(&to(19)), id(20));
        assert_eq!(c.classify(&to(20)), id(0xff));
        // Three whole-address filters stay a scan (no stages: every rule in order).
        assert!(seed().stages.is_empty());
    }

    #[test]
    fn seed_users() {
        let c = seed();
        let pkt = |last| v4([192, 168, 1, last], [184, 66, 159, 205], UDP, 0, 5000, 1010);
        assert_eq!(c.classify(&pkt(110)), id(0x10));
        assert_eq!(c.classify(&pkt(111)), id(0x11));
        assert_eq!(c.classify(&pkt(112)), id(0x12));
        assert_eq!(c.classify(&pkt(113)), id(0x13));
        // IPv6 is not matched by 0.0.0.0/0; it goes to the default (here the same class).
        let c2 = Classifier::new(
            &[FilterSpec {
                src: pfx("0.0.0.0/0"),
                class: id(0x10),
                ..FilterSpec::default()
            }],
            id(0x13),
        );
        assert_eq!(c2.classify(&v6(1, 2, UDP, 0, &[0; 8])), id(0x13));
        assert_eq!(c2.classify(&pkt(1)), id(0x10));
    }

    /// A frame is classified by its IP packet, with or without a tag; a frame that
    /// carries none (ARP, or one whose bytes read as IPv4 from its first byte) goes to the
    /// default class, even past a catch-all IPv4 filter.
    #[test]
    fn frames_are_classified_by_their_ip_packet() {
        use crate::frames::test_frames::{arp, ip_frame, lookalike};
        let c = Classifier::new(
            &[
                FilterSpec {
                    dst: pfx("10.0.0.2/32"),
                    dport: Some(PortRange { lo: 5201, hi: 5201 }),
                    class: id(0x10),
                    ..FilterSpec::default()
                },
                FilterSpec {
                    dst: pfx("::2/128"),
                    class: id(0x11),
                    ..FilterSpec::default()
                },
                FilterSpec {
                    prio: 9,
                    src: pfx("0.0.0.0/0"),
                    class: id(0x12),
                    ..FilterSpec::default()
                },
            ],
            id(0xff),
        );
        let p4 = v4([10, 0, 0, 1], [10, 0, 0, 2], TCP, 0, 40000, 5201);
        let p6 = v6(1, 2, UDP, 0, &[0; 8]);
        assert_eq!(c.classify_frame(Frames::Ip, &p4), id(0x10));
        for vlan in [false, true] {
            assert_eq!(
                c.classify_frame(Frames::Ethernet, &ip_frame(&p4, vlan)),
                id(0x10)
            );
            assert_eq!(
                c.classify_frame(Frames::Ethernet, &ip_frame(&p6, vlan)),
                id(0x11)
            );
            assert_eq!(c.classify_frame(Frames::Ethernet, &arp(vlan)), id(0xff));
        }
        // As a TUN packet the lookalike is that IPv4 packet; as a frame it carries no IP.
        let like = lookalike(&p4);
        assert_eq!(c.classify_frame(Frames::Ip, &like), id(0x10));
        assert_eq!(c.classify_frame(Frames::Ethernet, &like), id(0xff));
        assert_eq!(c.classify_frame(Frames::Ethernet, &[]), id(0xff));
    }

    #[test]
    fn prio_then_order() {
        let f = |prio, c| FilterSpec {
            prio,
            class: id(c),
            ..FilterSpec::default()
        };
        let pkt = v4([1, 1, 1, 1], [2, 2, 2, 2], TCP, 0, 1, 2);
        // Lowest prio wins even when given last.
        assert_eq!(
            Classifier::new(&[f(5, 1), f(2, 2)], id(9)).classify(&pkt),
            id(2)
        );
        // Equal prios: the first given wins (stable sort).
        assert_eq!(
            Classifier::new(&[f(3, 1), f(3, 2)], id(9)).classify(&pkt),
            id(1)
        );
        assert_eq!(
            Classifier::new(&[f(3, 2), f(3, 1)], id(9)).classify(&pkt),
            id(2)
        );
        // No filters: default.
        assert_eq!(Classifier::new(&[], id(9)).classify(&pkt), id(9));
    }

    #[test]
    fn ports_protocol_tos() {
        let filters = [
            FilterSpec {
                prio: 1,
                protocol: Some(UDP),
                dport: Some(PortRange { lo: 1000, hi: 2000 }),
                class: id(1),
                ..FilterSpec::default()
            },
            FilterSpec {
                prio: 2,
                sport: Some(PortRange { lo: 22, hi: 22 }),
                class: id(2),
                ..FilterSpec::default()
            },
            FilterSpec {
                prio: 3,
                tos: Some((46 << 2, 0xfc)),
                class: id(3),
                ..FilterSpec::default()
            },
            FilterSpec {
                prio: 4,
                dst: pfx("10.0.0.0/8"),
                class: id(4),
                ..FilterSpec::default()
            },
        ];
        let c = Classifier::new(&filters, id(9));
        let a = [1, 2, 3, 4];
        let b = [5, 6, 7, 8];
        assert_eq!(c.classify(&v4(a, b, UDP, 0, 5, 1000)), id(1));
        assert_eq!(c.classify(&v4(a, b, UDP, 0, 5, 2000)), id(1));
        assert_eq!(c.classify(&v4(a, b, UDP, 0, 5, 2001)), id(9));
        assert_eq!(c.classify(&v4(a, b, TCP, 0, 5, 1500)), id(9)); // protocol mismatch
        assert_eq!(c.classify(&v4(a, b, TCP, 0, 22, 80)), id(2));
        assert_eq!(c.classify(&v4(a, b, SCTP, 0, 22, 80)), id(2));
        assert_eq!(c.classify(&v4(a, b, UDPLITE, 0, 22, 80)), id(2));
        // ICMP has no ports: bytes 20..22 happen to be 22 but must not match.
        assert_eq!(c.classify(&v4(a, b, 1, 0, 22, 80)), id(9));
        // DSCP EF (46) with ECN bits set still matches under mask 0xfc.
        assert_eq!(c.classify(&v4(a, b, 1, (46 << 2) | 3, 0, 0)), id(3));
        assert_eq!(c.classify(&v4(a, b, 1, 45 << 2, 0, 0)), id(9));
        assert_eq!(c.classify(&v4(a, [10, 9, 9, 9], 1, 0, 0, 0)), id(4));
        assert_eq!(c.classify(&v4(a, [11, 9, 9, 9], 1, 0, 0, 0)), id(9));
    }

    #[test]
    fn ipv4_options_and_fragments() {
        let c = Classifier::new(
            &[FilterSpec {
                dport: Some(PortRange { lo: 80, hi: 80 }),
                class: id(1),
                ..FilterSpec::default()
            }],
            id(9),
        );
        // IHL 6 (4 bytes of options): the ports move to offset 24.
        let mut p = v4([1, 1, 1, 1], [2, 2, 2, 2], TCP, 0, 0, 0);
        p[0] = 0x46;
        p.splice(20..20, [1, 1, 1, 1]);
        p[24..26].copy_from_slice(&1234u16.to_be_bytes());
        p[26..28].copy_from_slice(&80u16.to_be_bytes());
        assert_eq!(c.classify(&p), id(1));
        // Where u32 would look (offset 22) there is nothing useful.
        let mut q = v4([1, 1, 1, 1], [2, 2, 2, 2], TCP, 0, 1234, 80);
        assert_eq!(c.classify(&q), id(1));
        // A later fragment has no ports.
        q[6..8].copy_from_slice(&0x0001u16.to_be_bytes());
        assert_eq!(c.classify(&q), id(9));
        // The first fragment (MF set, offset 0) has them.
        q[6..8].copy_from_slice(&0x2000u16.to_be_bytes());
        assert_eq!(c.classify(&q), id(1));
        // Truncated before the ports: no match, no panic.
        assert_eq!(c.classify(&q[..22]), id(9));
        // Header longer than the packet: unparsable -> default.
        let mut r = q.clone();
        r[0] = 0x4f;
        assert_eq!(c.classify(&r), id(9));
    }

    #[test]
    fn ipv6_fields_and_extension_headers() {
        let src: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
        let filters = [
            FilterSpec {
                prio: 1,
                src: pfx("2001:db8::/32"),
                protocol: Some(UDP),
                dport: Some(PortRange { lo: 53, hi: 53 }),
                class: id(1),
                ..FilterSpec::default()
            },
            FilterSpec {
                prio: 2,
                tos: Some((0xb8, 0xfc)),
                class: id(2),
                ..FilterSpec::default()
            },
        ];
        let c = Classifier::new(&filters, id(9));
        let udp = [0, 1, 0, 53, 0, 8, 0, 0];
        assert_eq!(c.classify(&v6(src, 2, UDP, 0, &udp)), id(1));
        assert_eq!(c.classify(&v6(src << 64, 2, UDP, 0, &udp)), id(9));
        // Hop-by-hop (8 bytes) then UDP.
        let mut hbh = vec![UDP, 0, 0, 0, 0, 0, 0, 0];
        hbh.extend_from_slice(&udp);
        assert_eq!(c.classify(&v6(src, 2, 0, 0, &hbh)), id(1));
        // First fragment then UDP: ports readable.
        let mut frag = vec![UDP, 0, 0, 1, 0, 0, 0, 7];
        frag.extend_from_slice(&udp);
        assert_eq!(c.classify(&v6(src, 2, 44, 0, &frag)), id(1));
        // Later fragment: no ports.
        frag[2..4].copy_from_slice(&(185u16 << 3).to_be_bytes());
        assert_eq!(c.classify(&v6(src, 2, 44, 0, &frag)), id(9));
        // Traffic class 0xb8 (EF) spans the first two bytes.
        assert_eq!(c.classify(&v6(7, 2, 58, 0xb8, &[0; 8])), id(2));
        assert_eq!(c.classify(&v6(7, 2, 58, 0xb4, &[0; 8])), id(9));
        // An IPv6 prefix never matches IPv4.
        let only6 = Classifier::new(
            &[FilterSpec {
                src: pfx("::/0"),
                class: id(1),
                ..FilterSpec::default()
            }],
            id(9),
        );
        assert_eq!(
            only6.classify(&v4([1, 1, 1, 1], [2, 2, 2, 2], UDP, 0, 1, 2)),
            id(9)
        );
        assert_eq!(only6.classify(&v6(1, 2, UDP, 0, &udp)), id(1));
    }

    #[test]
    fn garbage_goes_to_default() {
        let c = seed();
        for p in [&[][..], &[0x45], &[0x60; 39], &[0x00; 60], &[0xff; 60]] {
            assert_eq!(c.classify(p), id(0x13));
        }
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120),
                        first in prop_oneof![Just(0x45u8), Just(0x46), Just(0x4f), Just(0x60), any::<u8>()],
                        next in prop_oneof![Just(0u8), Just(43), Just(44), Just(60), Just(6), Just(17), any::<u8>()]) {
            let mut p = bytes;
            if let Some(b) = p.first_mut() { *b = first; }
            if let Some(b) = p.get_mut(6) { if first >> 4 == 6 { *b = next; } }
            let filters = [
                FilterSpec { prio: 1, sport: Some(PortRange { lo: 0, hi: 100 }), class: id(1), ..FilterSpec::default() },
                FilterSpec { prio: 2, src: pfx("::/1"), dport: Some(PortRange { lo: 5, hi: 5 }), class: id(2), ..FilterSpec::default() },
                FilterSpec { prio: 3, src: pfx("128.0.0.0/1"), protocol: Some(17), tos: Some((1, 1)), class: id(3), ..FilterSpec::default() },
                // A hand-built prefix with an impossible length must not panic either.
                FilterSpec { prio: 4, dst: Some(Prefix { addr: "1.2.3.4".parse().unwrap(), len: 200 }), class: id(4), ..FilterSpec::default() },
            ];
            let c = Classifier::new(&filters, id(9));
            let got = c.classify(&p);
            prop_assert!([1, 2, 3, 4, 9].contains(&got.minor()));
        }

        /// Hashed runs of whole-address filters pick the same first match as trying every
        /// filter in order: runs of both fields and families, repeated addresses, runs
        /// broken by other filters, short runs left to the scan.
        #[test]
        fn hashed_runs_match_like_the_scan(
            blocks in proptest::collection::vec(
                (0u8..6, 1usize..14, 0u32..3, proptest::collection::vec(0u8..24, 14)), 0..8),
            packets in proptest::collection::vec((0u8..24, 0u8..24, any::<bool>()), 1..40),
        ) {
            let addr4 = |a: u8| IpAddr::V4([10, 0, 0, a].into());
            let addr6 = |a: u8| IpAddr::V6([0xfd00, 0, 0, 0, 0, 0, 0, u16::from(a)].into());
            let whole = |addr: IpAddr| Some(Prefix::new(addr, if addr.is_ipv4() { 32 } else { 128 }));
            let mut filters = Vec::new();
            for (kind, len, prio, addrs) in blocks {
                for &a in addrs.iter().take(len) {
                    let class = id(filters.len() as u16 + 1);
                    filters.push(match kind {
                        0 | 1 => FilterSpec { prio, dst: whole(addr4(a)), class, ..FilterSpec::default() },
                        2 => FilterSpec { prio, src: whole(addr4(a)), class, ..FilterSpec::default() },
                        3 => FilterSpec { prio, dst: whole(addr6(a)), class, ..FilterSpec::default() },
                        4 => FilterSpec { prio, dst: Some(Prefix::new(addr4(a), 30)), class, ..FilterSpec::default() },
                        _ => FilterSpec { prio, dst: whole(addr4(a)), protocol: Some(17), class, ..FilterSpec::default() },
                    });
                }
            }
            let c = Classifier::new(&filters, id(0xffff));
            for (s, d, six) in packets {
                let p = if six {
                    v6(u128::from(s), 0xfd00_u128 << 112 | u128::from(d), 17, 0, &[0; 8])
                } else {
                    v4([10, 0, 0, s], [10, 0, 0, d], 17, 0, 1, 2)
                };
                prop_assert_eq!(c.classify(&p), c.classify_by_scan(&p));
            }
        }

        /// A /len prefix matches exactly the addresses that share the top len bits.
        #[test]
        fn prefix_semantics(net in any::<u32>(), addr in any::<u32>(), len in 0u8..=32) {
            let p = Prefix::new(IpAddr::V4(net.into()), len);
            let c = Classifier::new(&[FilterSpec { src: Some(p), class: id(1), ..FilterSpec::default() }], id(9));
            let pkt = v4(addr.to_be_bytes(), [0; 4], 1, 0, 0, 0);
            let shift = 32 - u32::from(len);
            let same = u64::from(net) >> shift == u64::from(addr) >> shift;
            prop_assert_eq!(c.classify(&pkt) == id(1), same);
        }
    }
}
