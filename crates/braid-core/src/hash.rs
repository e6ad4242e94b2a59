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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0))
            .collect()
    }

    // Test packets. Byte for byte the ones built by an independent Python transcription of
    // the kernel C (bond_main.c bond_flow_ip/bond_flow_dissect/bond_ip_hash/__bond_xmit_hash,
    // flow_dissector.c __skb_flow_dissect), run with python3; the expected values in
    // `VECTORS` are its output, pasted. Hand arithmetic for some of them is in the tests below.
    /// 10.0.0.1:40000 -> 10.0.0.2:80 TCP.
    const V4_TCP: &str =
        "450000281c460000400600000a0000010a0000029c40005000000001000000005002ffff00000000";
    /// 192.168.1.10:5353 -> 8.8.8.8:53 UDP.
    const V4_UDP: &str = "450000201c46000040110000c0a8010a0808080814e90035000c000000000000";
    /// [2001:db8::1]:443 -> [2001:db8::2]:51000 TCP.
    const V6_TCP: &str = "600000000014064020010db800000000000000000000000120010db800000000000000000000000201bbc73800000001000000005002ffff00000000";
    /// V4_TCP with MF set (first fragment).
    const V4_FRAG_FIRST: &str =
        "450000281c462000400600000a0000010a0000029c40005000000001000000005002ffff00000000";
    /// V4_TCP at fragment offset 185 (later fragment; the "ports" are payload).
    const V4_FRAG_LATER: &str =
        "450000281c4600b9400600000a0000010a0000029c40005000000001000000005002ffff00000000";
    /// ICMP echo request 10.0.0.1 -> 10.0.0.2, id 0x1234, seq 1.
    const V4_ICMP_ECHO: &str = "4500001c1c460000400100000a0000010a0000020800000012340001";
    /// ICMP echo request with id 0 (the kernel records id 1).
    const V4_ICMP_ECHO_ID0: &str = "4500001c1c460000400100000a0000010a0000020800000000000007";
    /// ICMP port unreachable 10.0.0.2 -> 10.0.0.1 quoting UDP 10.0.0.1:40000 -> 10.0.0.2:53.
    const V4_ICMP_ERR: &str = "450000381c460000400100000a0000020a00000103030000000000004500001c1c460000401100000a0000010a0000029c40003500080000";
    /// ICMP time exceeded whose quoted IP header is cut after 12 bytes.
    const V4_ICMP_ERR_TRUNC: &str =
        "450000281c460000400100000a0000020a0000010b000000000000004500001c1c46000040110000";
    /// ICMPv6 echo request, id 0xbeef.
    const V6_ICMP_ECHO: &str = "6000000000083a4020010db800000000000000000000000120010db800000000000000000000000280000000beef0001";
    /// V6_TCP behind an 8-byte hop-by-hop header.
    const V6_HBH_TCP: &str = "60000000001c004020010db800000000000000000000000120010db8000000000000000000000002060001040000000001bbc73800000001000000005002ffff00000000";
    /// V6_TCP behind a fragment header (first fragment, M set).
    const V6_FRAG: &str = "60000000001c2c4020010db800000000000000000000000120010db8000000000000000000000002060000010000002a01bbc73800000001000000005002ffff00000000";
    /// 172.16.0.1 -> 172.16.0.2 IP-in-IP carrying V4_TCP.
    const V4_IPIP: &str = "4500003c1c46000040040000ac100001ac100002450000281c460000400600000a0000010a0000029c40005000000001000000005002ffff00000000";
    /// 172.16.0.1 -> 172.16.0.2 IPv6-in-IP (41) carrying V6_TCP.
    const V4_6IN4: &str = "450000501c46000040290000ac100001ac100002600000000014064020010db800000000000000000000000120010db800000000000000000000000201bbc73800000001000000005002ffff00000000";
    /// 172.16.0.1 -> 172.16.0.2 plain GRE (proto 0x0800) carrying V4_TCP.
    const V4_GRE: &str = "450000401c460000402f0000ac100001ac10000200000800450000281c460000400600000a0000010a0000029c40005000000001000000005002ffff00000000";
    /// GRE with a key (0xdeadbeef) carrying V4_UDP.
    const V4_GRE_KEY: &str = "4500003c1c460000402f0000ac100001ac10000220000800deadbeef450000201c46000040110000c0a8010a0808080814e90035000c000000000000";
    /// GRE whose inner IPv4 header is cut after 16 bytes.
    const V4_GRE_TRUNC: &str =
        "450000281c460000402f0000ac100001ac10000200000800450000281c460000400600000a000001";
    /// V4_TCP with version nibble 5 (not IP).
    const BAD_VERSION: &str =
        "500000281c460000400600000a0000010a0000029c40005000000001000000005002ffff00000000";

    /// 02:00:00:00:00:0a -> 52:54:00:12:34:56, IPv4, V4_TCP.
    const ETH_V4_TCP: &str = "52540012345602000000000a0800450000281c460000400600000a0000010a0000029c40005000000001000000005002ffff00000000";
    /// ARP request from 02:00:00:00:00:0a to broadcast.
    const ETH_ARP: &str =
        "ffffffffffff02000000000a0806000108000604000102000000000a0a0000010000000000000a000002";
    /// ETH_V4_TCP with an 802.1Q tag: PCP 3, VID 100 (TCI 0x6064).
    const ETH_VLAN: &str = "52540012345602000000000a810060640800450000281c460000400600000a0000010a0000029c40005000000001000000005002ffff00000000";
    /// QinQ: 802.1ad TCI 200 outside, 802.1Q TCI 100 inside, V4_TCP.
    const ETH_QINQ: &str = "52540012345602000000000a88a800c8810000640800450000281c460000400600000a0000010a0000029c40005000000001000000005002ffff00000000";
    /// IPv6 frame carrying V6_TCP.
    const ETH_V6_TCP: &str = "52540012345602000000000a86dd600000000014064020010db800000000000000000000000120010db800000000000000000000000201bbc73800000001000000005002ffff00000000";

    /// (name, bytes, is a frame, [layer2, layer2+3, layer3+4, encap2+3, encap3+4,
    /// vlan+srcmac, gabler]).
    #[rustfmt::skip]
    const VECTORS: &[(&str, &str, bool, [u32; 7])] = &[
        ("v4_tcp", V4_TCP, false, [2048, 50531083, 698976711, 50531083, 698976711, 0, 39955]),
        ("v4_udp", V4_UDP, false, [2048, 34317163, 463420373, 34317163, 463420373, 0, 3365936606]),
        ("v6_tcp", V6_TCP, false, [34525, 50562392, 503194531, 50562392, 503194531, 0, 50816]),
        ("v4_frag_first", V4_FRAG_FIRST, false, [2048, 50531083, 25264513, 50531083, 25264513, 0, 3]),
        ("v4_frag_later", V4_FRAG_LATER, false, [2048, 50531083, 25264513, 50531083, 25264513, 0, 3]),
        ("v4_icmp_echo", V4_ICMP_ECHO, false, [2048, 50531083, 143823510, 50531083, 143823510, 0, 3]),
        ("v4_icmp_echo_id0", V4_ICMP_ECHO_ID0, false, [2048, 50531083, 25231621, 50531083, 25231621, 0, 3]),
        ("v4_icmp_err", V4_ICMP_ERR, false, [2048, 50531083, 454769525, 50531083, 25264513, 0, 3]),
        ("v4_icmp_err_trunc", V4_ICMP_ERR_TRUNC, false, [2048, 2048, 2048, 50531083, 25264513, 0, 3]),
        ("v6_icmp_echo", V6_ICMP_ECHO, false, [34525, 50562392, 1588144489, 50562392, 1588144489, 0, 3]),
        ("v6_hbh_tcp", V6_HBH_TCP, false, [34525, 50562392, 25264513, 50562392, 503194531, 0, 50816]),
        ("v6_frag", V6_FRAG, false, [34525, 50562392, 25264513, 50562392, 25264513, 0, 3]),
        ("v4_ipip", V4_IPIP, false, [2048, 50531083, 25264513, 50531083, 698976711, 0, 3]),
        ("v4_6in4", V4_6IN4, false, [2048, 50531083, 25264513, 50531083, 503194531, 0, 3]),
        ("v4_gre", V4_GRE, false, [2048, 50531083, 25264513, 50531083, 698976711, 0, 3]),
        ("v4_gre_key", V4_GRE_KEY, false, [2048, 50531083, 25264513, 34317163, 463420373, 0, 3]),
        ("v4_gre_trunc", V4_GRE_TRUNC, false, [2048, 50531083, 25264513, 2048, 2048, 0, 3]),
        ("bad_version", BAD_VERSION, false, [0, 0, 0, 0, 0, 0, 0]),
        ("eth_v4_tcp", ETH_V4_TCP, true, [2140, 50531159, 698976711, 50531159, 698976711, 131082, 39955]),
        ("eth_arp", ETH_ARP, true, [2291, 2291, 2291, 2299, 0, 131082, 2291]),
        ("eth_vlan", ETH_VLAN, true, [2140, 50531159, 698976711, 50531159, 698976711, 155758, 39955]),
        ("eth_qinq", ETH_QINQ, true, [33116, 33116, 33116, 50561758, 698976711, 131266, 39955]),
        ("eth_v6_tcp", ETH_V6_TCP, true, [34433, 50562308, 503194531, 50562308, 503194531, 131082, 50816]),
    ];

    #[test]
    fn vectors_match_the_kernel_formulas() {
        for (name, bytes, is_frame, want) in VECTORS {
            let data = hex(bytes);
            for (policy, want) in HashPolicy::ALL.iter().zip(want) {
                let got = if *is_frame {
                    hash_frame(*policy, &data)
                } else {
                    hash_ip(*policy, &data)
                };
                assert_eq!(got, *want, "{name} under {policy}");
            }
        }
    }

    #[test]
    fn v4_tcp_by_hand() {
        let p = hex(V4_TCP);
        // layer2 (TUN): 0 ^ 0 ^ 0x0800 = 2048.
        assert_eq!(hash_ip(HashPolicy::Layer2, &p), 0x0800);
        // Addresses as host (LE) u32 of their bytes: src 0a000001 -> 0x0100000a,
        // dst 0a000002 -> 0x0200000a; src ^ dst = 0x03000000.
        // layer2+3: h = 0x0800 ^ 0x03000000 = 0x03000800
        //   h ^= h >> 16 -> 0x03000800 ^ 0x00000300 = 0x03000b00
        //   h ^= h >> 8  -> 0x03000b00 ^ 0x0003000b = 0x03030b0b = 50531083
        assert_eq!(hash_ip(HashPolicy::Layer23, &p), 0x0303_0b0b);
        // layer3+4: ports bytes 9c 40 00 50 -> LE u32 0x5000409c
        //   h = 0x5000409c ^ 0x03000000 = 0x5300409c
        //   h ^= h >> 16 -> 0x5300409c ^ 0x00005300 = 0x5300139c
        //   h ^= h >> 8  -> 0x5300139c ^ 0x00530013 = 0x5353138f
        //   h >> 1 = 0x29a989c7 = 698976711
        assert_eq!(hash_ip(HashPolicy::Layer34, &p), 0x29a9_89c7);
        // gabler: (40000 ^ 80) ^ (0x0a000001 ^ 0x0a000002) = 0x9c10 ^ 3 = 0x9c13.
        assert_eq!(hash_ip(HashPolicy::Gabler, &p), 0x9c13);
    }

    #[test]
    fn fragments_hash_on_addresses_only_under_l34() {
        // Addresses only: h = 0x03000000 -> 0x03000300 -> 0x03030303, >> 1 = 0x01818181.
        for f in [V4_FRAG_FIRST, V4_FRAG_LATER] {
            assert_eq!(hash_ip(HashPolicy::Layer34, &hex(f)), 0x0181_8181);
        }
        // The unfragmented packet of the same flow hashes differently: this is the
        // documented "not fully 802.3ad compliant" striping.
        assert_ne!(hash_ip(HashPolicy::Layer34, &hex(V4_TCP)), 0x0181_8181);
    }

    #[test]
    fn icmp_echo_id_by_hand() {
        // icmp key word: type 8 | code 0 << 8 | id 0x1234 << 16 = 0x12340008
        //   ^ 0x03000000 = 0x11340008; ^ >>16 -> 0x1134113c; ^ >>8 -> 0x1125252d
        //   >> 1 = 0x08929296
        assert_eq!(
            hash_ip(HashPolicy::Layer34, &hex(V4_ICMP_ECHO)),
            0x0892_9296
        );
        // id 0 is recorded as 1: word 0x00010008 ^ 0x03000000 = 0x03010008
        //   ^ >>16 -> 0x03010309; ^ >>8 -> 0x0302020a; >> 1 = 0x01810105
        assert_eq!(
            hash_ip(HashPolicy::Layer34, &hex(V4_ICMP_ECHO_ID0)),
            0x0181_0105
        );
    }

    #[test]
    fn icmp_error_hashes_like_the_quoted_flow() {
        // The quoted header is UDP 10.0.0.1:40000 -> 10.0.0.2:53; under layer3+4 the error
        // hashes on the inner addresses and ports: ports 9c 40 00 35 -> 0x3500409c
        //   ^ 0x03000000 = 0x3600409c; ^ >>16 -> 0x3600769c; ^ >>8 -> 0x363676ea;
        //   >> 1 = 0x1b1b3b75
        let err = hex(V4_ICMP_ERR);
        assert_eq!(hash_ip(HashPolicy::Layer34, &err), 0x1b1b_3b75);
        // The same UDP flow sent directly: 10.0.0.1 -> 10.0.0.2 UDP 40000 -> 53.
        let udp = hex("4500001c1c460000401100000a0000010a0000029c40003500080000");
        assert_eq!(hash_ip(HashPolicy::Layer34, &udp), 0x1b1b_3b75);
        // encap3+4 uses the full dissector, which does not look inside the error.
        assert_eq!(hash_ip(HashPolicy::Encap34, &err), 0x0181_8181);
    }

    #[test]
    fn non_ip_falls_back_to_layer2() {
        let arp = hex(ETH_ARP);
        // layer2: ff ^ 0a ^ 0x0806 = 0x08f3 = 2291.
        let l2 = hash_frame(HashPolicy::Layer2, &arp);
        assert_eq!(l2, 0x08f3);
        assert_eq!(hash_frame(HashPolicy::Layer23, &arp), l2);
        assert_eq!(hash_frame(HashPolicy::Layer34, &arp), l2);
        assert_eq!(hash_frame(HashPolicy::Gabler, &arp), l2);
        // The full dissector accepts ARP (no ARP key in the bonding set) with no address:
        // encap2+3 folds the layer2 value (0x8f3 ^ 0x8 = 0x8fb), encap3+4 hashes 0.
        assert_eq!(hash_frame(HashPolicy::Encap23, &arp), 0x08fb);
        assert_eq!(hash_frame(HashPolicy::Encap34, &arp), 0);
        // Shorter than an Ethernet header: bond_eth_hash gives 0.
        for p in HashPolicy::ALL {
            assert_eq!(hash_frame(p, &arp[..13]), 0);
        }
    }

    #[test]
    fn vlan_tags() {
        let tagged = hex(ETH_VLAN);
        let plain = hex(ETH_V4_TCP);
        // The outer tag is the accelerated tag: every policy but vlan+srcmac hashes as
        // the untagged frame.
        for p in HashPolicy::ALL {
            if p != HashPolicy::VlanSrcMac {
                assert_eq!(hash_frame(p, &tagged), hash_frame(p, &plain), "{p}");
            }
        }
        // vlan+srcmac: TCI 0x6064 ^ 0x020000 ^ 0x00000a = 0x2606e = 155758.
        assert_eq!(hash_frame(HashPolicy::VlanSrcMac, &tagged), 0x0002_606e);
        assert_eq!(hash_frame(HashPolicy::VlanSrcMac, &plain), 0x0002_000a);
        // QinQ: the inner tag stays in the data, skb->protocol is 0x8100, so
        // bond_flow_ip fails and layer2+3/3+4 use layer2: 0x56 ^ 0x0a ^ 0x8100 = 0x815c.
        let qinq = hex(ETH_QINQ);
        assert_eq!(hash_frame(HashPolicy::Layer34, &qinq), 0x815c);
        // ... while encap3+4's dissector walks the inner tag to the TCP flow.
        assert_eq!(hash_frame(HashPolicy::Encap34, &qinq), 0x29a9_89c7);
    }

    #[test]
    fn encap_goes_to_the_inner_flow() {
        let inner = hash_ip(HashPolicy::Encap34, &hex(V4_TCP));
        for t in [V4_IPIP, V4_GRE] {
            assert_eq!(hash_ip(HashPolicy::Encap34, &hex(t)), inner);
            // layer3+4 sees the outer addresses (172.16.0.1 ^ .2 -> 0x03000000) only.
            assert_eq!(hash_ip(HashPolicy::Layer34, &hex(t)), 0x0181_8181);
        }
        assert_eq!(
            hash_ip(HashPolicy::Encap34, &hex(V4_6IN4)),
            hash_ip(HashPolicy::Encap34, &hex(V6_TCP))
        );
        assert_eq!(
            hash_ip(HashPolicy::Encap23, &hex(V4_GRE_KEY)),
            hash_ip(HashPolicy::Encap23, &hex(V4_UDP))
        );
        // A truncated inner header makes the whole dissection fail: layer2 fallback.
        assert_eq!(hash_ip(HashPolicy::Encap34, &hex(V4_GRE_TRUNC)), 0x0800);
    }

    #[test]
    fn ipv6_addr_hash_by_hand() {
        // 2001:db8::1 as LE words: 0xb80d0120 ^ 0 ^ 0 ^ 0x01000000 = 0xb90d0120.
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        a[15] = 1;
        assert_eq!(flow::ipv6_addr_hash(&a), 0xb90d_0120);
        // v6_tcp layer2+3: src ^ dst hashes = 0x01000000 ^ 0x02000000 = 0x03000000;
        // h = 0x86dd ^ 0x03000000 = 0x030086dd; ^ >>16 -> 0x030085dd; ^ >>8 -> 0x03038558
        assert_eq!(hash_ip(HashPolicy::Layer23, &hex(V6_TCP)), 0x0303_8558);
    }

    #[test]
    fn ipv6_extension_headers() {
        // bond_flow_ip does not walk extension headers: no ports under layer3+4.
        assert_eq!(hash_ip(HashPolicy::Layer34, &hex(V6_HBH_TCP)), 0x0181_8181);
        // The full dissector does: encap3+4 sees the TCP ports.
        assert_eq!(
            hash_ip(HashPolicy::Encap34, &hex(V6_HBH_TCP)),
            hash_ip(HashPolicy::Encap34, &hex(V6_TCP))
        );
        // A fragment header hides the ports from both.
        assert_eq!(hash_ip(HashPolicy::Encap34, &hex(V6_FRAG)), 0x0181_8181);
    }

    #[test]
    fn tun_layer2_is_one_value_per_ip_version() {
        for p in [V4_TCP, V4_UDP, V4_ICMP_ECHO, V4_GRE] {
            assert_eq!(hash_ip(HashPolicy::Layer2, &hex(p)), 0x0800);
            assert_eq!(hash_ip(HashPolicy::VlanSrcMac, &hex(p)), 0);
        }
        assert_eq!(hash_ip(HashPolicy::Layer2, &hex(V6_TCP)), 0x86dd);
        assert_eq!(hash_ip(HashPolicy::Layer2, &[]), 0);
    }

    #[test]
    fn policy_names_round_trip() {
        let names = [
            "layer2",
            "layer2+3",
            "layer3+4",
            "encap2+3",
            "encap3+4",
            "vlan+srcmac",
            "gabler",
        ];
        for (p, n) in HashPolicy::ALL.iter().zip(names) {
            assert_eq!(p.name(), n);
            assert_eq!(parse_policy(n), Some(*p));
        }
        assert_eq!(parse_policy("layer34"), None);
        assert_eq!(parse_policy("Layer2"), None);
        assert_eq!(parse_policy(""), None);
    }

    proptest! {
        #[test]
        fn no_panic_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            for p in HashPolicy::ALL {
                let _ = hash_ip(p, &data);
                let _ = hash_frame(p, &data);
            }
        }

        #[test]
        fn no_panic_on_mutated_valid_packets(
            which in 0usize..VECTORS.len(),
            cut in 0usize..200,
            flips in proptest::collection::vec((0usize..200, any::<u8>()), 0..4),
        ) {
            let mut data = hex(VECTORS[which].1);
            for (i, b) in flips {
                if let Some(x) = data.get_mut(i) {
                    *x = b;
                }
            }
            data.truncate(cut);
            for p in HashPolicy::ALL {
                let _ = hash_ip(p, &data);
                let _ = hash_frame(p, &data);
            }
        }

        #[test]
        fn l34_reads_nothing_past_the_ports(extra in proptest::collection::vec(any::<u8>(), 0..64)) {
            // Payload bytes after the ports word never change the hash.
            let mut p = hex(V4_TCP);
            p.truncate(24);
            let base = hash_ip(HashPolicy::Layer34, &p);
            p.extend_from_slice(&extra);
            prop_assert_eq!(hash_ip(HashPolicy::Layer34, &p), base);
        }
    }
}
