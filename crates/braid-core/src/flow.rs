//! Zero-allocation header peek: the parts of Linux's flow dissection that the bonding
//! transmit hashes ([`crate::hash`]) depend on.
//!
//! Two dissectors are mirrored, because bonding uses two:
//!
//! * [`bond_dissect`] is `bond_flow_dissect` + `bond_flow_ip` (drivers/net/bonding/bond_main.c,
//!   6.x), used by `layer2+3` and `layer3+4`. It reads one IPv4/IPv6 header and, for
//!   layer3+4, the 32-bit ports word right behind it. It does **not** walk IPv6 extension
//!   headers (an IPv6 packet whose next header is not TCP/UDP/... has no ports) and does not
//!   check the IPv4 IHL. An ICMP/ICMPv6 *error* is re-dissected on the quoted header behind
//!   the 8-byte ICMP header, so the error hashes like the flow that caused it.
//! * [`dissect`] is `__skb_flow_dissect` with the bonding key set (`flow_keys_bonding`) and
//!   flags 0 (net/core/flow_dissector.c, 6.x), used by `encap2+3` and `encap3+4`. It walks
//!   VLAN tags, PPPoE, IPv6 extension and fragment headers, and goes through IP-in-IP (4),
//!   IPv6-in-IP (41) and GRE (47, incl. transparent Ethernet bridging and PPTP) to the
//!   innermost header; the addresses and ports it reports are the innermost ones.
//!
//! Both work on a byte slice that starts at the Ethernet header (or at the IP header for a
//! TUN packet, with `nhoff = 0`); every read is bounds-checked, so malformed or truncated
//! input never panics: it yields what the kernel would have parsed, or `None` where the
//! kernel's dissection fails (the caller then falls back to the layer2 hash).
//!
//! Byte order: `ports` and the addresses are kept as the raw header bytes. The kernel
//! `memcpy`s them into host integers; [`FlowKeys::ports_word`], [`FlowKeys::u32_src`] and
//! [`FlowKeys::u32_dst`] reproduce that on a little-endian host (x86-64, arm64), which is
//! where the kernel values quoted in `docs/hashes.md` come from.

/// EtherType IPv4.
pub(crate) const ETH_P_IP: u16 = 0x0800;
/// EtherType IPv6.
pub(crate) const ETH_P_IPV6: u16 = 0x86DD;
/// EtherType ARP.
pub(crate) const ETH_P_ARP: u16 = 0x0806;
/// EtherType RARP.
pub(crate) const ETH_P_RARP: u16 = 0x8035;
/// EtherType 802.1Q VLAN tag.
pub(crate) const ETH_P_8021Q: u16 = 0x8100;
/// EtherType 802.1ad (QinQ service) VLAN tag.
pub(crate) const ETH_P_8021AD: u16 = 0x88A8;
/// EtherType MPLS unicast.
pub(crate) const ETH_P_MPLS_UC: u16 = 0x8847;
/// EtherType MPLS multicast.
pub(crate) const ETH_P_MPLS_MC: u16 = 0x8848;
/// EtherType PPPoE session.
pub(crate) const ETH_P_PPP_SES: u16 = 0x8864;
/// EtherType TIPC.
pub(crate) const ETH_P_TIPC: u16 = 0x88CA;
/// EtherType FCoE.
pub(crate) const ETH_P_FCOE: u16 = 0x8906;
/// EtherType transparent Ethernet bridging (inside GRE).
pub(crate) const ETH_P_TEB: u16 = 0x6558;

/// IP protocol numbers the dissectors look at.
pub(crate) mod proto {
    /// IPv6 hop-by-hop options.
    pub(crate) const HOPOPTS: u8 = 0;
    /// ICMP.
    pub(crate) const ICMP: u8 = 1;
    /// IP-in-IP.
    pub(crate) const IPIP: u8 = 4;
    /// TCP.
    pub(crate) const TCP: u8 = 6;
    /// UDP.
    pub(crate) const UDP: u8 = 17;
    /// DCCP.
    pub(crate) const DCCP: u8 = 33;
    /// IPv6-in-IP.
    pub(crate) const IPV6: u8 = 41;
    /// IPv6 routing header.
    pub(crate) const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub(crate) const FRAGMENT: u8 = 44;
    /// GRE.
    pub(crate) const GRE: u8 = 47;
    /// ESP.
    pub(crate) const ESP: u8 = 50;
    /// AH.
    pub(crate) const AH: u8 = 51;
    /// ICMPv6.
    pub(crate) const ICMPV6: u8 = 58;
    /// IPv6 destination options.
    pub(crate) const DSTOPTS: u8 = 60;
    /// SCTP.
    pub(crate) const SCTP: u8 = 132;
    /// UDP-Lite.
    pub(crate) const UDPLITE: u8 = 136;
    /// MPLS in IP.
    pub(crate) const MPLS: u8 = 137;
}

/// Length of an Ethernet header.
pub(crate) const ETH_HLEN: usize = 14;

/// The Ethernet header as the bonding driver sees it.
///
/// For an Ethernet frame the outermost 802.1Q/802.1ad tag, if any, is taken as the
/// hardware-accelerated tag (`skb->vlan_tci`), as it is for traffic sent through a VLAN
/// device on a bond (the bond offers VLAN TX offload) and for any frame received by Linux
/// (`skb_vlan_untag`); `proto` is then the EtherType behind that tag and further tags stay
/// in the data. For an IP packet read from a TUN there is no header: both MACs count as
/// zero, there is no tag and `proto` comes from the IP version nibble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct L2Header {
    /// `h_dest`.
    pub dst: [u8; 6],
    /// `h_source`.
    pub src: [u8; 6],
    /// `h_proto` / `skb->protocol` (host order).
    pub proto: u16,
    /// The hardware-accelerated VLAN tag (full TCI: priority, DEI and VID).
    pub vlan_tci: Option<u16>,
    /// Offset of the network header in the buffer.
    pub nhoff: usize,
    /// False when the frame is shorter than an Ethernet header (the kernel's
    /// `bond_eth_hash` then returns 0).
    pub present: bool,
}

impl L2Header {
    /// The pseudo header of an IP packet read from a TUN: zero MACs, EtherType from the
    /// version nibble (4 → 0x0800, 6 → 0x86DD, anything else or an empty packet → 0, which
    /// no dissector accepts; the kernel's TUN driver would have dropped such a packet).
    pub fn from_ip(packet: &[u8]) -> Self {
        let proto = match packet.first().map(|b| b >> 4) {
            Some(4) => ETH_P_IP,
            Some(6) => ETH_P_IPV6,
            _ => 0,
        };
        L2Header {
            dst: [0; 6],
            src: [0; 6],
            proto,
            vlan_tci: None,
            nhoff: 0,
            present: true,
        }
    }

    /// Parse an Ethernet frame (see the type's documentation for VLAN tags).
    pub fn from_frame(frame: &[u8]) -> Self {
        let (Some(dst), Some(src), Some(ethertype)) =
            (arr6(frame, 0), arr6(frame, 6), be16(frame, 12))
        else {
            return L2Header::default();
        };
        let mut h = L2Header {
            dst,
            src,
            proto: ethertype,
            vlan_tci: None,
            nhoff: ETH_HLEN,
            present: true,
        };
        if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
            if let (Some(tci), Some(inner)) = (be16(frame, 14), be16(frame, 16)) {
                h.vlan_tci = Some(tci);
                h.proto = inner;
                h.nhoff = ETH_HLEN + 4;
            }
        }
        h
    }
}

/// The addresses found by a dissector (`flow_keys.addrs` with `control.addr_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Addrs {
    /// No network addresses (ARP, MPLS, FCoE, ...).
    #[default]
    None,
    /// IPv4 source and destination, as in the header.
    V4 {
        /// Source address bytes.
        src: [u8; 4],
        /// Destination address bytes.
        dst: [u8; 4],
    },
    /// IPv6 source and destination, as in the header.
    V6 {
        /// Source address bytes.
        src: [u8; 16],
        /// Destination address bytes.
        dst: [u8; 16],
    },
    /// TIPC: the source node identity word (`tipc_hdr_rps_key`).
    Tipc {
        /// Key bytes as in the header.
        key: [u8; 4],
    },
}

/// `flow_dissector_key_icmp`: type, code and identifier (0 = no identifier).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IcmpKey {
    /// ICMP type.
    pub kind: u8,
    /// ICMP code.
    pub code: u8,
    /// Echo/timestamp identifier in host order; 1 when the header's is 0; 0 when the type
    /// carries none.
    pub id: u16,
}

impl IcmpKey {
    /// The key `memcpy`'d into a host `u32` as `__bond_xmit_hash` does (little-endian host:
    /// `type | code << 8 | id << 16`).
    pub fn word(&self) -> u32 {
        u32::from(self.kind) | u32::from(self.code) << 8 | u32::from(self.id) << 16
    }
}

/// The first VLAN tag a dissector met (`flow_dissector_key_vlan`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct VlanKey {
    /// VLAN id (12 bits).
    pub id: u16,
    /// Priority (3 bits).
    pub prio: u8,
    /// The tag's TPID (0x8100 or 0x88A8).
    pub tpid: u16,
}

/// What a dissector extracted from one packet. Small and `Copy`; built without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FlowKeys {
    /// Network addresses (the innermost ones for [`dissect`]).
    pub addrs: Addrs,
    /// The 4 bytes at the transport header's port offset (source port then destination
    /// port for TCP/UDP/SCTP/DCCP/UDP-Lite, the SPI for ESP/AH), as in the header; zero when
    /// none were read.
    pub ports: [u8; 4],
    /// ICMP type, code and identifier.
    pub icmp: IcmpKey,
    /// The last IP protocol / next header seen (`basic.ip_proto`); `None` when none was
    /// taken (an IPv4 fragment in [`bond_dissect`], or a non-IP frame).
    pub ip_proto: Option<u8>,
    /// The last network protocol (EtherType) seen (`basic.n_proto`).
    pub n_proto: u16,
    /// The packet is an IPv4 fragment (MF set or offset != 0) or carries an IPv6 fragment
    /// header.
    pub is_fragment: bool,
    /// ... and it is the first fragment (offset 0).
    pub first_frag: bool,
    /// An encapsulation (IP-in-IP, IPv6-in-IP, GRE) was gone through.
    pub encapsulated: bool,
    /// The first VLAN tag met, if any.
    pub vlan: Option<VlanKey>,
}

impl FlowKeys {
    /// The ports word `memcpy`'d into a host `u32` (little-endian host), as
    /// `__bond_xmit_hash` does.
    pub fn ports_word(&self) -> u32 {
        u32::from_le_bytes(self.ports)
    }

    /// Source port (host order), if the ports word holds TCP/UDP-style ports.
    pub fn sport(&self) -> u16 {
        u16::from_be_bytes([self.ports[0], self.ports[1]])
    }

    /// Destination port (host order).
    pub fn dport(&self) -> u16 {
        u16::from_be_bytes([self.ports[2], self.ports[3]])
    }

    /// `flow_get_u32_src`: the IPv4 source as a host `u32` of its header bytes
    /// (little-endian host), `ipv6_addr_hash` of an IPv6 source, the TIPC key, or 0.
    pub fn u32_src(&self) -> u32 {
        match self.addrs {
            Addrs::None => 0,
            Addrs::V4 { src, .. } => u32::from_le_bytes(src),
            Addrs::V6 { src, .. } => ipv6_addr_hash(&src),
            Addrs::Tipc { key } => u32::from_le_bytes(key),
        }
    }

    /// `flow_get_u32_dst`: as [`FlowKeys::u32_src`] for the destination (0 for TIPC, which
    /// has no destination key).
    pub fn u32_dst(&self) -> u32 {
        match self.addrs {
            Addrs::None | Addrs::Tipc { .. } => 0,
            Addrs::V4 { dst, .. } => u32::from_le_bytes(dst),
            Addrs::V6 { dst, .. } => ipv6_addr_hash(&dst),
        }
    }

    /// True when IPv4 or IPv6 addresses were found.
    pub fn is_ip(&self) -> bool {
        matches!(self.addrs, Addrs::V4 { .. } | Addrs::V6 { .. })
    }
}

/// `ipv6_addr_hash` (include/net/ipv6.h): the XOR of the address's four 32-bit words as
/// they sit in memory, read as host integers (little-endian host). The 64-bit variant
/// (`ul[0] ^ ul[1]` folded) gives the same value.
pub(crate) fn ipv6_addr_hash(a: &[u8; 16]) -> u32 {
    let w = |i: usize| u32::from_le_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
    w(0) ^ w(4) ^ w(8) ^ w(12)
}

/// `proto_ports_offset` (include/linux/in.h).
fn proto_ports_offset(ip_proto: u8) -> Option<usize> {
    match ip_proto {
        proto::TCP | proto::UDP | proto::DCCP | proto::ESP | proto::SCTP | proto::UDPLITE => {
            Some(0)
        }
        proto::AH => Some(4),
        _ => None,
    }
}

/// `skb_flow_get_ports`: the 4 bytes at `thoff + proto_ports_offset`, or zero.
fn get_ports(data: &[u8], thoff: usize, ip_proto: u8) -> [u8; 4] {
    proto_ports_offset(ip_proto)
        .and_then(|poff| arr4(data, thoff.checked_add(poff)?))
        .unwrap_or([0; 4])
}

/// `icmp_has_id`.
fn icmp_has_id(kind: u8) -> bool {
    // ICMP_ECHOREPLY, ICMP_ECHO, ICMP_TIMESTAMP, ICMP_TIMESTAMPREPLY,
    // ICMPV6_ECHO_REQUEST, ICMPV6_ECHO_REPLY (checked whatever the IP version).
    matches!(kind, 0 | 8 | 13 | 14 | 128 | 129)
}

/// `skb_flow_get_icmp_tci`: leaves `key` untouched when the 8-byte header is not there.
fn get_icmp_tci(data: &[u8], thoff: usize, key: &mut IcmpKey) {
    let Some(h) = get(data, thoff, 8) else {
        return;
    };
    let (kind, code) = (h[0], h[1]);
    key.kind = kind;
    key.code = code;
    key.id = if icmp_has_id(kind) {
        match u16::from_be_bytes([h[4], h[5]]) {
            0 => 1,
            id => id,
        }
    } else {
        0
    };
}

/// `icmp_is_err`.
fn icmp_is_err(kind: u8) -> bool {
    // DEST_UNREACH, SOURCE_QUENCH, REDIRECT, TIME_EXCEEDED, PARAMETERPROB
    matches!(kind, 3 | 4 | 5 | 11 | 12)
}

/// `icmpv6_is_err`.
fn icmpv6_is_err(kind: u8) -> bool {
    // DEST_UNREACH, PKT_TOOBIG, TIME_EXCEED, PARAMPROB
    matches!(kind, 1..=4)
}

/// `bond_flow_ip`: one IP header at `*nhoff`, then (layer3+4) the ports word.
fn bond_flow_ip(
    data: &[u8],
    fk: &mut FlowKeys,
    l2_proto: u16,
    nhoff: &mut usize,
    ip_proto: &mut Option<u8>,
    l34: bool,
) -> bool {
    match l2_proto {
        ETH_P_IP => {
            let Some(iph) = get(data, *nhoff, 20) else {
                return false;
            };
            fk.addrs = Addrs::V4 {
                src: [iph[12], iph[13], iph[14], iph[15]],
                dst: [iph[16], iph[17], iph[18], iph[19]],
            };
            fk.n_proto = ETH_P_IP;
            // No IHL check here (the full dissector has one): nhoff += ihl << 2.
            *nhoff = nhoff.saturating_add(usize::from(iph[0] & 0x0f) << 2);
            let frag_off = u16::from_be_bytes([iph[6], iph[7]]);
            // ip_is_fragment: MF or a non-zero offset.
            if frag_off & 0x3fff != 0 {
                fk.is_fragment = true;
                fk.first_frag = frag_off & 0x1fff == 0;
            } else {
                *ip_proto = Some(iph[9]);
            }
        }
        ETH_P_IPV6 => {
            let Some(iph) = get(data, *nhoff, 40) else {
                return false;
            };
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src.copy_from_slice(&iph[8..24]);
            dst.copy_from_slice(&iph[24..40]);
            fk.addrs = Addrs::V6 { src, dst };
            fk.n_proto = ETH_P_IPV6;
            *nhoff = nhoff.saturating_add(40);
            // The next header, whatever it is: extension headers are not walked.
            *ip_proto = Some(iph[6]);
        }
        _ => return false,
    }
    fk.ip_proto = *ip_proto;
    if l34 {
        if let Some(p) = *ip_proto {
            fk.ports = get_ports(data, *nhoff, p);
        }
    }
    true
}

/// `bond_flow_dissect` for `layer2+3` (`l34 = false`) and `layer3+4` (`l34 = true`).
///
/// `data` starts at the Ethernet header (or the IP header of a TUN packet), `l2_proto` is
/// `skb->protocol` and `nhoff` the network header's offset. `None` when the kernel's
/// dissection fails (not IPv4/IPv6, truncated IP header, truncated header quoted in an
/// ICMP error): the hash then falls back to layer2.
pub fn bond_dissect(data: &[u8], l2_proto: u16, nhoff: usize, l34: bool) -> Option<FlowKeys> {
    let mut fk = FlowKeys::default();
    let mut nhoff = nhoff;
    let mut ip_proto = None;
    if !bond_flow_ip(data, &mut fk, l2_proto, &mut nhoff, &mut ip_proto, l34) {
        return None;
    }
    if let Some(p @ (proto::ICMP | proto::ICMPV6)) = ip_proto {
        get_icmp_tci(data, nhoff, &mut fk.icmp);
        let err = if p == proto::ICMP {
            icmp_is_err(fk.icmp.kind)
        } else {
            icmpv6_is_err(fk.icmp.kind)
        };
        if !err {
            return Some(fk);
        }
        // sizeof(struct icmphdr) == sizeof(struct icmp6hdr) == 8. The quoted header is
        // parsed as the outer packet's family (l2_proto); if it is a fragment, ip_proto
        // keeps the ICMP value and no ports are found.
        nhoff = nhoff.saturating_add(8);
        if !bond_flow_ip(data, &mut fk, l2_proto, &mut nhoff, &mut ip_proto, l34) {
            return None;
        }
    }
    Some(fk)
}

/// Options of [`dissect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DissectOpts {
    /// The TCI of the skb's hardware-accelerated VLAN tag ([`L2Header::vlan_tci`]). When
    /// set, the kernel resolves the first 802.1Q/802.1ad EtherType it meets to
    /// `skb->protocol` without reading a tag from the data.
    pub hw_vlan_tci: Option<u16>,
    /// `FLOW_DISSECTOR_F_STOP_BEFORE_ENCAP`: stop at IP-in-IP/IPv6-in-IP/GRE and keep the
    /// outer addresses (braid's Gabler hash; bonding's encap policies pass flags 0).
    pub stop_before_encap: bool,
}

/// `MAX_FLOW_DISSECT_HDRS`.
const MAX_FLOW_DISSECT_HDRS: u32 = 15;

enum Ret {
    OutGood,
    OutBad,
    ProtoAgain,
    IpProtoAgain,
    Continue,
}

/// `__skb_flow_dissect` with the bonding key set and flags 0, as used by `encap2+3` and
/// `encap3+4`; see the module documentation.
///
/// `data` starts at the Ethernet header (or at the IP header of a TUN packet), `proto` is
/// `skb->protocol`, `nhoff` the network header's offset. Returns `None` where the kernel
/// returns false (unknown EtherType, truncated header, IPv4 IHL < 5, GRE/PPTP carrying
/// something else than IP, ...), so that the caller falls back to layer2.
///
/// Not followed (treated as a failed dissection, i.e. layer2 fallback): batman-adv,
/// PTP (1588), HSR/PRP and CFM EtherTypes. A TIPC keepalive hashes a random number in the
/// kernel; here it uses the same word as other TIPC messages.
pub fn dissect(data: &[u8], l2_proto: u16, nhoff: usize, opts: DissectOpts) -> Option<FlowKeys> {
    let mut fk = FlowKeys::default();
    let mut proto = l2_proto;
    let mut nhoff = nhoff;
    let mut ip_proto: u8 = 0;
    let mut num_hdrs: u32 = 0;
    // dissector_vlan: 0 = none seen (KEY_MAX), 1 = VLAN, 2 = CVLAN.
    let mut vlan_level: u8 = 0;
    let allowed = |n: &mut u32| {
        *n += 1;
        *n <= MAX_FLOW_DISSECT_HDRS
    };

    let good = 'outer: loop {
        // proto_again:
        let ret = match proto {
            ETH_P_IP => match get(data, nhoff, 20) {
                Some(iph) if iph[0] & 0x0f >= 5 => {
                    nhoff = nhoff.saturating_add(usize::from(iph[0] & 0x0f) * 4);
                    ip_proto = iph[9];
                    fk.addrs = Addrs::V4 {
                        src: [iph[12], iph[13], iph[14], iph[15]],
                        dst: [iph[16], iph[17], iph[18], iph[19]],
                    };
                    let frag_off = u16::from_be_bytes([iph[6], iph[7]]);
                    if frag_off & 0x3fff != 0 {
                        fk.is_fragment = true;
                        if frag_off & 0x1fff == 0 {
                            fk.first_frag = true;
                        }
                        // No FLOW_DISSECTOR_F_PARSE_1ST_FRAG: stop here, no ports.
                        Ret::OutGood
                    } else {
                        Ret::Continue
                    }
                }
                _ => Ret::OutBad,
            },
            ETH_P_IPV6 => match get(data, nhoff, 40) {
                Some(iph) => {
                    ip_proto = iph[6];
                    nhoff = nhoff.saturating_add(40);
                    let mut src = [0u8; 16];
                    let mut dst = [0u8; 16];
                    src.copy_from_slice(&iph[8..24]);
                    dst.copy_from_slice(&iph[24..40]);
                    fk.addrs = Addrs::V6 { src, dst };
                    Ret::Continue
                }
                None => Ret::OutBad,
            },
            ETH_P_8021Q | ETH_P_8021AD => 'vlan: {
                let tpid = proto;
                let tci = if let (0, Some(hw)) = (vlan_level, opts.hw_vlan_tci) {
                    // The skb's own tag: proto becomes skb->protocol, nothing is read.
                    proto = l2_proto;
                    hw
                } else {
                    let Some(v) = get(data, nhoff, 4) else {
                        break 'vlan Ret::OutBad;
                    };
                    proto = u16::from_be_bytes([v[2], v[3]]);
                    nhoff = nhoff.saturating_add(4);
                    u16::from_be_bytes([v[0], v[1]])
                };
                match vlan_level {
                    0 => {
                        vlan_level = 1;
                        fk.vlan = Some(VlanKey {
                            id: tci & 0x0fff,
                            prio: (tci >> 13) as u8,
                            tpid,
                        });
                    }
                    1 => vlan_level = 2,
                    _ => {}
                }
                Ret::ProtoAgain
            }
            ETH_P_PPP_SES => match get(data, nhoff, 8) {
                // struct pppoe_hdr (ver 1, type 1, code 0) + the PPP protocol.
                Some(h) if h[0] == 0x11 && h[1] == 0 => {
                    let mut ppp = u16::from_be_bytes([h[6], h[7]]);
                    if ppp & 0x0100 != 0 {
                        // Compressed (1-byte) protocol field.
                        ppp >>= 8;
                        nhoff = nhoff.saturating_add(7);
                    } else {
                        nhoff = nhoff.saturating_add(8);
                    }
                    match ppp {
                        0x0021 => {
                            proto = ETH_P_IP;
                            Ret::ProtoAgain
                        }
                        0x0057 => {
                            proto = ETH_P_IPV6;
                            Ret::ProtoAgain
                        }
                        0x0281 => {
                            proto = ETH_P_MPLS_UC;
                            Ret::ProtoAgain
                        }
                        0x0283 => {
                            proto = ETH_P_MPLS_MC;
                            Ret::ProtoAgain
                        }
                        p if p & 0x0101 == 0x0001 => Ret::OutGood,
                        _ => Ret::OutBad,
                    }
                }
                _ => Ret::OutBad,
            },
            ETH_P_TIPC => match get(data, nhoff, 16) {
                Some(h) => {
                    fk.addrs = Addrs::Tipc {
                        key: [h[12], h[13], h[14], h[15]],
                    };
                    Ret::OutGood
                }
                None => Ret::OutBad,
            },
            // No MPLS key in the bonding key set: nothing is read.
            ETH_P_MPLS_UC | ETH_P_MPLS_MC => Ret::OutGood,
            ETH_P_FCOE => {
                if data.len().saturating_sub(nhoff) < 38 {
                    Ret::OutBad
                } else {
                    Ret::OutGood
                }
            }
            // No ARP key in the bonding key set: good, nothing read.
            ETH_P_ARP | ETH_P_RARP => Ret::OutGood,
            _ => Ret::OutBad,
        };
        match ret {
            Ret::OutGood => break true,
            Ret::OutBad => break false,
            Ret::ProtoAgain => {
                if allowed(&mut num_hdrs) {
                    continue;
                }
                break true;
            }
            Ret::Continue | Ret::IpProtoAgain => {}
        }

        loop {
            // ip_proto_again:
            let ret = match ip_proto {
                proto::GRE if opts.stop_before_encap => Ret::OutGood,
                proto::GRE => gre(data, &mut proto, &mut nhoff, &mut fk),
                proto::HOPOPTS | proto::ROUTING | proto::DSTOPTS if proto == ETH_P_IPV6 => {
                    match get(data, nhoff, 2) {
                        Some(h) => {
                            ip_proto = h[0];
                            nhoff = nhoff.saturating_add((usize::from(h[1]) + 1) << 3);
                            Ret::IpProtoAgain
                        }
                        None => Ret::OutBad,
                    }
                }
                proto::FRAGMENT if proto == ETH_P_IPV6 => match get(data, nhoff, 8) {
                    Some(fh) => {
                        fk.is_fragment = true;
                        nhoff = nhoff.saturating_add(8);
                        ip_proto = fh[0];
                        if u16::from_be_bytes([fh[2], fh[3]]) & 0xfff8 == 0 {
                            fk.first_frag = true;
                        }
                        Ret::OutGood
                    }
                    None => Ret::OutBad,
                },
                proto::IPIP | proto::IPV6 if opts.stop_before_encap => Ret::OutGood,
                proto::IPIP => {
                    proto = ETH_P_IP;
                    fk.encapsulated = true;
                    Ret::ProtoAgain
                }
                proto::IPV6 => {
                    proto = ETH_P_IPV6;
                    fk.encapsulated = true;
                    Ret::ProtoAgain
                }
                proto::MPLS => {
                    proto = ETH_P_MPLS_UC;
                    Ret::ProtoAgain
                }
                proto::ICMP | proto::ICMPV6 => {
                    get_icmp_tci(data, nhoff, &mut fk.icmp);
                    Ret::Continue
                }
                _ => Ret::Continue,
            };
            if !fk.is_fragment {
                fk.ports = get_ports(data, nhoff, ip_proto);
            }
            match ret {
                Ret::ProtoAgain => {
                    if allowed(&mut num_hdrs) {
                        continue 'outer;
                    }
                    break 'outer true;
                }
                Ret::IpProtoAgain => {
                    if allowed(&mut num_hdrs) {
                        continue;
                    }
                    break 'outer true;
                }
                Ret::OutGood | Ret::Continue => break 'outer true,
                Ret::OutBad => break 'outer false,
            }
        }
    };
    fk.n_proto = proto;
    fk.ip_proto = Some(ip_proto);
    good.then_some(fk)
}

/// `__skb_flow_dissect_gre`.
fn gre(data: &[u8], proto: &mut u16, nhoff: &mut usize, fk: &mut FlowKeys) -> Ret {
    const CSUM: u16 = 0x8000;
    const ROUTING: u16 = 0x4000;
    const KEY: u16 = 0x2000;
    const SEQ: u16 = 0x1000;
    const ACK: u16 = 0x0080;
    const VERSION: u16 = 0x0007;
    const PROTO_PPP: u16 = 0x880b;

    let Some(h) = get(data, *nhoff, 4) else {
        return Ret::OutBad;
    };
    let flags = u16::from_be_bytes([h[0], h[1]]);
    if flags & ROUTING != 0 {
        return Ret::OutGood;
    }
    let ver = flags & VERSION;
    if ver > 1 {
        return Ret::OutGood;
    }
    *proto = u16::from_be_bytes([h[2], h[3]]);
    if ver == 1 && !(*proto == PROTO_PPP && flags & KEY != 0) {
        return Ret::OutGood;
    }
    let mut offset = 4usize;
    if flags & CSUM != 0 {
        offset += 4;
    }
    if flags & KEY != 0 {
        if get(data, nhoff.saturating_add(offset), 4).is_none() {
            return Ret::OutBad;
        }
        offset += 4;
    }
    if flags & SEQ != 0 {
        offset += 4;
    }
    if ver == 0 {
        if *proto == ETH_P_TEB {
            let Some(eth) = get(data, nhoff.saturating_add(offset), ETH_HLEN) else {
                return Ret::OutBad;
            };
            *proto = u16::from_be_bytes([eth[12], eth[13]]);
            offset += ETH_HLEN;
        }
    } else {
        if flags & ACK != 0 {
            offset += 4;
        }
        let Some(ppp) = get(data, nhoff.saturating_add(offset), 4) else {
            return Ret::OutBad;
        };
        match u16::from_be_bytes([ppp[2], ppp[3]]) {
            0x0021 => *proto = ETH_P_IP,
            0x0057 => *proto = ETH_P_IPV6,
            _ => {}
        }
        offset += 4;
    }
    *nhoff = nhoff.saturating_add(offset);
    fk.encapsulated = true;
    Ret::ProtoAgain
}

/// Convenience peek of a TUN packet with the full dissector (`encap*` semantics);
/// `FlowKeys::default()` (no addresses) when it fails.
pub fn peek_ip(packet: &[u8]) -> FlowKeys {
    let l2 = L2Header::from_ip(packet);
    dissect(packet, l2.proto, l2.nhoff, DissectOpts::default()).unwrap_or_default()
}

/// Convenience peek of an Ethernet frame: its bond-visible header and the full
/// dissector's keys (`FlowKeys::default()` when it fails).
pub fn peek_frame(frame: &[u8]) -> (L2Header, FlowKeys) {
    let l2 = L2Header::from_frame(frame);
    let opts = DissectOpts {
        hw_vlan_tci: l2.vlan_tci,
        stop_before_encap: false,
    };
    let fk = if l2.present {
        dissect(frame, l2.proto, l2.nhoff, opts).unwrap_or_default()
    } else {
        FlowKeys::default()
    };
    (l2, fk)
}

fn get(data: &[u8], off: usize, len: usize) -> Option<&[u8]> {
    data.get(off..off.checked_add(len)?)
}

fn be16(data: &[u8], off: usize) -> Option<u16> {
    get(data, off, 2).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

fn arr4(data: &[u8], off: usize) -> Option<[u8; 4]> {
    get(data, off, 4).map(|b| [b[0], b[1], b[2], b[3]])
}

fn arr6(data: &[u8], off: usize) -> Option<[u8; 6]> {
    get(data, off, 6).map(|b| [b[0], b[1], b[2], b[3], b[4], b[5]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip4(src: [u8; 4], dst: [u8; 4], ip_proto: u8, frag: u16, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 0, 0, 0];
        p.extend_from_slice(&frag.to_be_bytes());
        p.extend_from_slice(&[64, ip_proto, 0, 0]);
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(payload);
        p
    }

    fn ip6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, 0, next, 64];
        let mut a = [0u8; 16];
        a[0] = 0x20;
        a[1] = 0x01;
        a[15] = 1;
        p.extend_from_slice(&a);
        a[15] = 2;
        p.extend_from_slice(&a);
        p.extend_from_slice(payload);
        p
    }

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];
    const TCP: [u8; 8] = [0x9c, 0x40, 0x00, 0x50, 0, 0, 0, 1];

    #[test]
    fn tun_pseudo_header() {
        let l2 = L2Header::from_ip(&[0x45]);
        assert_eq!(
            (l2.proto, l2.dst, l2.src, l2.nhoff),
            (ETH_P_IP, [0; 6], [0; 6], 0)
        );
        assert_eq!(L2Header::from_ip(&[0x60]).proto, ETH_P_IPV6);
        assert_eq!(L2Header::from_ip(&[0x70]).proto, 0);
        assert_eq!(L2Header::from_ip(&[]).proto, 0);
    }

    #[test]
    fn frame_header_and_outer_tag() {
        let mut f = vec![
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x81, 0x00, 0x60, 0x64, 0x08, 0x00,
        ];
        let l2 = L2Header::from_frame(&f);
        assert_eq!(l2.vlan_tci, Some(0x6064));
        assert_eq!(
            (l2.proto, l2.nhoff, l2.src[5], l2.dst[5]),
            (ETH_P_IP, 18, 12, 6)
        );
        // A tag cut short stays in the data.
        f.truncate(16);
        let l2 = L2Header::from_frame(&f);
        assert_eq!((l2.vlan_tci, l2.proto, l2.nhoff), (None, ETH_P_8021Q, 14));
        assert!(!L2Header::from_frame(&f[..13]).present);
    }

    #[test]
    fn bond_dissect_v4_tcp() {
        let p = ip4(A, B, proto::TCP, 0, &TCP);
        let fk = bond_dissect(&p, ETH_P_IP, 0, true);
        let Some(fk) = fk else { panic!("no keys") };
        assert_eq!(fk.addrs, Addrs::V4 { src: A, dst: B });
        assert_eq!((fk.sport(), fk.dport()), (40000, 80));
        assert_eq!(fk.ports_word(), 0x5000_409c);
        assert_eq!((fk.u32_src(), fk.u32_dst()), (0x0100_000a, 0x0200_000a));
        assert_eq!(fk.ip_proto, Some(proto::TCP));
        // layer2+3 does not read the ports.
        assert_eq!(
            bond_dissect(&p, ETH_P_IP, 0, false).map(|k| k.ports),
            Some([0; 4])
        );
        // Wrong l2 proto, truncated header: the kernel's dissection fails.
        assert_eq!(bond_dissect(&p, ETH_P_ARP, 0, true), None);
        assert_eq!(bond_dissect(&p[..19], ETH_P_IP, 0, true), None);
        // Truncated ports: still IP, ports zero.
        assert_eq!(
            bond_dissect(&p[..23], ETH_P_IP, 0, true).map(|k| k.ports),
            Some([0; 4])
        );
    }

    #[test]
    fn ihl_checked_only_by_the_full_dissector() {
        // IHL 4: __skb_flow_dissect refuses it, bond_flow_ip takes it (ports read at 16).
        let mut p = ip4(A, B, proto::TCP, 0, &TCP);
        p[0] = 0x44;
        assert_eq!(dissect(&p, ETH_P_IP, 0, DissectOpts::default()), None);
        let fk = bond_dissect(&p, ETH_P_IP, 0, true);
        assert_eq!(fk.map(|k| k.ports), Some(B));
    }

    #[test]
    fn fragments_have_no_ports() {
        for frag in [0x2000, 0x00b9, 0x20b9] {
            let p = ip4(A, B, proto::TCP, frag, &TCP);
            let bond = bond_dissect(&p, ETH_P_IP, 0, true);
            assert_eq!(
                bond.map(|k| (k.ports, k.ip_proto, k.is_fragment)),
                Some(([0; 4], None, true))
            );
            let full = dissect(&p, ETH_P_IP, 0, DissectOpts::default());
            assert_eq!(full.map(|k| (k.ports, k.is_fragment)), Some(([0; 4], true)));
            assert_eq!(full.map(|k| k.first_frag), Some(frag & 0x1fff == 0));
        }
        // DF alone is not a fragment.
        let p = ip4(A, B, proto::TCP, 0x4000, &TCP);
        assert_eq!(
            bond_dissect(&p, ETH_P_IP, 0, true).map(|k| k.sport()),
            Some(40000)
        );
    }

    #[test]
    fn icmp_keys() {
        let echo = ip4(A, B, proto::ICMP, 0, &[8, 0, 0, 0, 0x12, 0x34, 0, 1]);
        let want = IcmpKey {
            kind: 8,
            code: 0,
            id: 0x1234,
        };
        assert_eq!(
            bond_dissect(&echo, ETH_P_IP, 0, true).map(|k| k.icmp),
            Some(want)
        );
        assert_eq!(want.word(), 0x1234_0008);
        let full = dissect(&echo, ETH_P_IP, 0, DissectOpts::default());
        assert_eq!(full.map(|k| k.icmp), Some(want));
        // Destination unreachable quoting a UDP header: re-dissected on the inner header.
        let inner = ip4(A, B, proto::UDP, 0, &[0x9c, 0x40, 0, 53, 0, 8, 0, 0]);
        let mut body = vec![3, 3, 0, 0, 0, 0, 0, 0];
        body.extend_from_slice(&inner);
        let err = ip4(B, A, proto::ICMP, 0, &body);
        let fk = bond_dissect(&err, ETH_P_IP, 0, true);
        assert_eq!(fk.map(|k| k.addrs), Some(Addrs::V4 { src: A, dst: B }));
        assert_eq!(fk.map(|k| (k.sport(), k.dport())), Some((40000, 53)));
        assert_eq!(fk.map(|k| k.icmp.id), Some(0));
        // The quoted header cut short: the whole dissection fails.
        assert_eq!(bond_dissect(&err[..40], ETH_P_IP, 0, true), None);
        // ICMPv6 echo reply (129) has an id.
        let v6 = ip6(proto::ICMPV6, &[129, 0, 0, 0, 0, 0, 0, 9]);
        assert_eq!(
            bond_dissect(&v6, ETH_P_IPV6, 0, true).map(|k| k.icmp.id),
            Some(1)
        );
    }

    #[test]
    fn full_dissector_walks_encapsulation() {
        let inner = ip4(A, B, proto::TCP, 0, &TCP);
        let ipip = ip4([172, 16, 0, 1], [172, 16, 0, 2], proto::IPIP, 0, &inner);
        let fk = dissect(&ipip, ETH_P_IP, 0, DissectOpts::default());
        assert_eq!(
            fk.map(|k| (k.addrs, k.sport(), k.encapsulated)),
            Some((Addrs::V4 { src: A, dst: B }, 40000, true))
        );
        // Stopping before the encapsulation keeps the outer header.
        let opts = DissectOpts {
            stop_before_encap: true,
            ..DissectOpts::default()
        };
        let outer = dissect(&ipip, ETH_P_IP, 0, opts);
        assert_eq!(
            outer.map(|k| (k.ports, k.encapsulated)),
            Some(([0; 4], false))
        );
        // GRE with checksum, key and sequence number (4 + 4 + 4 + 4 bytes).
        let mut gre = vec![0xb0, 0x00, 0x08, 0x00, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 7];
        gre.extend_from_slice(&inner);
        let p = ip4([172, 16, 0, 1], [172, 16, 0, 2], proto::GRE, 0, &gre);
        let fk = dissect(&p, ETH_P_IP, 0, DissectOpts::default());
        assert_eq!(
            fk.map(|k| (k.addrs, k.dport())),
            Some((Addrs::V4 { src: A, dst: B }, 80))
        );
        // GRE with routing is not looked into.
        let mut routed = gre.clone();
        routed[0] |= 0x40;
        let p = ip4([172, 16, 0, 1], [172, 16, 0, 2], proto::GRE, 0, &routed);
        let fk = dissect(&p, ETH_P_IP, 0, DissectOpts::default());
        assert_eq!(
            fk.map(|k| k.addrs),
            Some(Addrs::V4 {
                src: [172, 16, 0, 1],
                dst: [172, 16, 0, 2]
            })
        );
        // Transparent Ethernet bridging: an inner Ethernet header, then IPv4.
        let mut teb = vec![0x00, 0x00, 0x65, 0x58];
        teb.extend_from_slice(&[0; 12]);
        teb.extend_from_slice(&[0x08, 0x00]);
        teb.extend_from_slice(&inner);
        let p = ip4([172, 16, 0, 1], [172, 16, 0, 2], proto::GRE, 0, &teb);
        let fk = dissect(&p, ETH_P_IP, 0, DissectOpts::default());
        assert_eq!(fk.map(|k| k.addrs), Some(Addrs::V4 { src: A, dst: B }));
    }

    #[test]
    fn full_dissector_ipv6_extension_headers() {
        // Hop-by-hop (8 bytes), destination options (16 bytes), then TCP.
        let mut body = vec![proto::DSTOPTS, 0, 0, 0, 0, 0, 0, 0, proto::TCP, 1];
        body.extend_from_slice(&[0; 14]);
        body.extend_from_slice(&TCP);
        let p = ip6(proto::HOPOPTS, &body);
        let fk = dissect(&p, ETH_P_IPV6, 0, DissectOpts::default());
        assert_eq!(
            fk.map(|k| (k.sport(), k.ip_proto)),
            Some((40000, Some(proto::TCP)))
        );
        // bond_flow_ip takes next header 0 as the protocol: no ports.
        assert_eq!(
            bond_dissect(&p, ETH_P_IPV6, 0, true).map(|k| k.ports),
            Some([0; 4])
        );
        // Truncated extension header: dissection fails.
        assert_eq!(
            dissect(&p[..41], ETH_P_IPV6, 0, DissectOpts::default()),
            None
        );
    }

    #[test]
    fn header_limit_stops_endless_tags() {
        // 20 stacked 802.1Q tags then IPv4: the kernel gives up after 15 headers and
        // reports success with what it has (no addresses).
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x81, 0x00]);
        for _ in 0..20 {
            f.extend_from_slice(&[0, 1, 0x81, 0x00]);
        }
        let fk = dissect(&f, ETH_P_8021Q, 14, DissectOpts::default());
        assert_eq!(fk.map(|k| k.addrs), Some(Addrs::None));
        assert_eq!(fk.and_then(|k| k.vlan).map(|v| v.id), Some(1));
    }

    #[test]
    fn pppoe_and_misc_ethertypes() {
        let inner = ip4(A, B, proto::TCP, 0, &TCP);
        let mut p = vec![0x11, 0, 0, 1, 0, 0, 0x00, 0x21];
        p.extend_from_slice(&inner);
        let fk = dissect(&p, ETH_P_PPP_SES, 0, DissectOpts::default());
        assert_eq!(fk.map(|k| k.addrs), Some(Addrs::V4 { src: A, dst: B }));
        // Bad PPPoE version/type: fails.
        p[0] = 0x12;
        assert_eq!(dissect(&p, ETH_P_PPP_SES, 0, DissectOpts::default()), None);
        // MPLS, ARP: accepted, no addresses. Unknown EtherType: fails.
        for et in [ETH_P_MPLS_UC, ETH_P_ARP, ETH_P_RARP] {
            assert_eq!(
                dissect(&[], et, 0, DissectOpts::default()).map(|k| k.addrs),
                Some(Addrs::None)
            );
        }
        assert_eq!(dissect(&inner, 0x1234, 0, DissectOpts::default()), None);
        // TIPC: the source node word is the "source address", no destination.
        let tipc = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4];
        let fk = dissect(&tipc, ETH_P_TIPC, 0, DissectOpts::default());
        assert_eq!(
            fk.map(|k| (k.u32_src(), k.u32_dst())),
            Some((0x0403_0201, 0))
        );
    }

    proptest! {
        #[test]
        fn no_panic(
            data in proptest::collection::vec(any::<u8>(), 0..200),
            l2 in prop_oneof![
                Just(ETH_P_IP), Just(ETH_P_IPV6), Just(ETH_P_8021Q), Just(ETH_P_8021AD),
                Just(ETH_P_PPP_SES), Just(ETH_P_TIPC), Just(ETH_P_FCOE), any::<u16>()
            ],
            nhoff in 0usize..300,
            l34 in any::<bool>(),
            hw in proptest::option::of(any::<u16>()),
            stop in any::<bool>(),
        ) {
            let _ = bond_dissect(&data, l2, nhoff, l34);
            let opts = DissectOpts { hw_vlan_tci: hw, stop_before_encap: stop };
            let _ = dissect(&data, l2, nhoff, opts);
            let _ = dissect(&data, l2, usize::MAX - 3, opts);
            let _ = peek_ip(&data);
            let _ = peek_frame(&data);
        }

        #[test]
        fn bond_and_full_agree_on_plain_tcp(
            src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), ports in any::<[u8; 4]>(),
        ) {
            let mut tcp = ports.to_vec();
            tcp.extend_from_slice(&[0; 16]);
            let p = ip4(src, dst, proto::TCP, 0, &tcp);
            let a = bond_dissect(&p, ETH_P_IP, 0, true);
            let b = dissect(&p, ETH_P_IP, 0, DissectOpts::default());
            prop_assert_eq!(a.map(|k| (k.addrs, k.ports)), Some((Addrs::V4 { src, dst }, ports)));
            prop_assert_eq!(b.map(|k| (k.addrs, k.ports)), Some((Addrs::V4 { src, dst }, ports)));
        }
    }
}
