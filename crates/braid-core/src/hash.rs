//! The bonding transmit hashes, bit-exact with Linux `__bond_xmit_hash`
//! (drivers/net/bonding/bond_main.c, 6.x) on a little-endian host, plus braid's `gabler`.
//!
//! See `docs/hashes.md` for each formula. In short, with `eth = h_dest[5] ^ h_source[5] ^
//! h_proto` and `ip(h) = fold(h ^ dst32 ^ src32)` where `fold(x) = x ^= x >> 16; x ^= x >> 8`:
//!
//! | policy | hash |
//! | --- | --- |
//! | `layer2` | `eth` |
//! | `layer2+3`, `encap2+3` | `ip(eth)` |
//! | `layer3+4`, `encap3+4` | `ip(icmp id word or ports word) >> 1` |
//! | `vlan+srcmac` | `vlan_tci ^ src[0..3] ^ src[3..6]` |
//! | `gabler` | `(sport ^ dport) ^ (sip ^ dip)` |
//!
//! Any policy but `vlan+srcmac` whose dissection fails (not IP, truncated) uses `eth`.
//!
//! [`hash_ip`] hashes an IP packet read from a TUN: there is no Ethernet header, so both
//! MACs count as zero and `h_proto` is 0x0800 or 0x86DD from the IP version nibble (0 for
//! any other version). Consequently `layer2` and `vlan+srcmac` give one constant per IP
//! version, so every flow of a TUN lands on the same path under them.

use crate::flow::{self, DissectOpts, FlowKeys, L2Header};

/// A transmit hash policy (`hash = ...` in the config).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HashPolicy {
    /// `layer2`: `h_dest[5] ^ h_source[5] ^ h_proto`.
    #[default]
    Layer2,
    /// `layer2+3`.
    Layer23,
    /// `layer3+4`.
    Layer34,
    /// `encap2+3`: like layer2+3 on the innermost headers.
    Encap23,
    /// `encap3+4`: like layer3+4 on the innermost headers.
    Encap34,
    /// `vlan+srcmac`.
    VlanSrcMac,
    /// The seed's original formula: `((sport ^ dport) ^ (sip ^ dip)) mod n`.
    Gabler,
}

impl HashPolicy {
    /// Every policy, in config-name order.
    pub const ALL: [HashPolicy; 7] = [
        HashPolicy::Layer2,
        HashPolicy::Layer23,
        HashPolicy::Layer34,
        HashPolicy::Encap23,
        HashPolicy::Encap34,
        HashPolicy::VlanSrcMac,
        HashPolicy::Gabler,
    ];

    /// The config name: `layer2`, `layer2+3`, `layer3+4`, `encap2+3`, `encap3+4`,
    /// `vlan+srcmac` or `gabler`.
    pub fn name(self) -> &'static str {
        match self {
            HashPolicy::Layer2 => "layer2",
            HashPolicy::Layer23 => "layer2+3",
            HashPolicy::Layer34 => "layer3+4",
            HashPolicy::Encap23 => "encap2+3",
            HashPolicy::Encap34 => "encap3+4",
            HashPolicy::VlanSrcMac => "vlan+srcmac",
            HashPolicy::Gabler => "gabler",
        }
    }
}

impl core::fmt::Display for HashPolicy {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parse a config name (exact, lower case, as [`HashPolicy::name`] prints it).
pub fn parse_policy(s: &str) -> Option<HashPolicy> {
    HashPolicy::ALL.into_iter().find(|p| p.name() == s)
}

/// Hash an IP packet as read from a TUN (no Ethernet header: the MACs count as zero and
/// the EtherType comes from the IP version).
pub fn hash_ip(policy: HashPolicy, packet: &[u8]) -> u32 {
    xmit_hash(policy, packet, &L2Header::from_ip(packet))
}

/// Hash an Ethernet frame (starting at the destination MAC, no FCS). The outermost VLAN
/// tag, if any, plays the kernel's hardware-accelerated tag (see [`L2Header`]).
pub fn hash_frame(policy: HashPolicy, frame: &[u8]) -> u32 {
    xmit_hash(policy, frame, &L2Header::from_frame(frame))
}

/// `__bond_xmit_hash` over `data` whose bond-visible Ethernet header is `l2`.
fn xmit_hash(policy: HashPolicy, data: &[u8], l2: &L2Header) -> u32 {
    let flow = match policy {
        HashPolicy::VlanSrcMac => return vlan_srcmac_hash(l2),
        HashPolicy::Layer2 => return eth_hash(l2),
        HashPolicy::Gabler => return gabler_hash(data, l2),
        HashPolicy::Layer23 => flow::bond_dissect(data, l2.proto, l2.nhoff, false),
        HashPolicy::Layer34 => flow::bond_dissect(data, l2.proto, l2.nhoff, true),
        HashPolicy::Encap23 | HashPolicy::Encap34 => {
            // encap3+4 would return skb->hash when skb->l4_hash is set; a packet braid
            // reads from its TUN carries no such hash.
            let opts = DissectOpts {
                hw_vlan_tci: l2.vlan_tci,
                stop_before_encap: false,
            };
            flow::dissect(data, l2.proto, l2.nhoff, opts)
        }
    };
    // Where the kernel's data would not even hold an Ethernet header, nothing parses.
    let Some(flow) = flow.filter(|_| l2.present) else {
        return eth_hash(l2);
    };
    let hash = match policy {
        HashPolicy::Layer23 | HashPolicy::Encap23 => eth_hash(l2),
        _ if flow.icmp.id != 0 => flow.icmp.word(),
        _ => flow.ports_word(),
    };
    bond_ip_hash(hash, &flow, policy)
}

/// `bond_eth_hash`: `h_dest[5] ^ h_source[5] ^ be16_to_cpu(h_proto)`; 0 when the data is
/// shorter than an Ethernet header.
pub fn eth_hash(l2: &L2Header) -> u32 {
    if !l2.present {
        return 0;
    }
    u32::from(l2.dst[5] ^ l2.src[5]) ^ u32::from(l2.proto)
}

/// `bond_ip_hash`: fold the addresses into `hash`; `>> 1` for layer3+4 and encap3+4
/// ("discard lowest hash bit to deal with the common even ports pattern").
pub fn bond_ip_hash(hash: u32, flow: &FlowKeys, policy: HashPolicy) -> u32 {
    let mut hash = hash ^ flow.u32_dst() ^ flow.u32_src();
    hash ^= hash >> 16;
    hash ^= hash >> 8;
    match policy {
        HashPolicy::Layer34 | HashPolicy::Encap34 => hash >> 1,
        _ => hash,
    }
}

/// `bond_vlan_srcmac_hash`: `vlan ^ srcmac_vendor ^ srcmac_dev`, the vendor and device
/// halves of the source MAC packed big-endian; `vlan` is the full TCI of the
/// hardware-accelerated tag (0 without one).
pub fn vlan_srcmac_hash(l2: &L2Header) -> u32 {
    if !l2.present {
        return 0;
    }
    let s = l2.src;
    let vendor = u32::from_be_bytes([0, s[0], s[1], s[2]]);
    let dev = u32::from_be_bytes([0, s[3], s[4], s[5]]);
    u32::from(l2.vlan_tci.unwrap_or(0)) ^ vendor ^ dev
}

/// braid's reading of the seed (Gabler, "Better Bonded Ethernet Load Balancing", 2006):
/// `(sport ^ dport) ^ (sip ^ dip)` with ports and IPv4 addresses as numbers (host order);
/// an IPv6 address counts as the XOR of its four big-endian 32-bit words. Ports only for
/// unfragmented TCP and UDP ("not designed to handle non-TCP or non-UDP traffic"); ICMP
/// and fragments hash on the addresses alone; the outer header of a tunnel is used; non-IP
/// falls back to the layer2 hash ("the original Layer 2 method is mimicked").
pub fn gabler_hash(data: &[u8], l2: &L2Header) -> u32 {
    let opts = DissectOpts {
        hw_vlan_tci: l2.vlan_tci,
        stop_before_encap: true,
    };
    let flow = match flow::dissect(data, l2.proto, l2.nhoff, opts) {
        Some(f) if l2.present && f.is_ip() => f,
        _ => return eth_hash(l2),
    };
    let (sip, dip) = match flow.addrs {
        flow::Addrs::V4 { src, dst } => (u32::from_be_bytes(src), u32::from_be_bytes(dst)),
        flow::Addrs::V6 { src, dst } => (fold_be(&src), fold_be(&dst)),
        _ => (0, 0),
    };
    let l4 = match flow.ip_proto {
        Some(flow::proto::TCP | flow::proto::UDP) if !flow.is_fragment => {
            u32::from(flow.sport() ^ flow.dport())
        }
        _ => 0,
    };
    l4 ^ (sip ^ dip)
}

fn fold_be(a: &[u8; 16]) -> u32 {
    let w = |i: usize| u32::from_be_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
    w(0) ^ w(4) ^ w(8) ^ w(12)
}
