//! The few Ethernet frames the bond reads or makes itself: ARP requests (gratuitous and
//! monitor probes), IPv6 unsolicited Neighbour Advertisements, and the header fields the
//! receive and transmit paths look at. Nothing here allocates.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Ethernet header: destination, source, EtherType.
pub(crate) const ETH_HLEN: usize = 14;
/// EtherType of ARP.
pub(crate) const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv4.
pub(crate) const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub(crate) const ETHERTYPE_IPV6: u16 = 0x86DD;
/// An ARP request for IPv4 over Ethernet: 14 + 28 bytes (the NIC pads it to 60).
pub(crate) const ARP_FRAME_LEN: usize = ETH_HLEN + 28;
/// An unsolicited NA with a target link-layer address option: 14 + 40 + 32 bytes.
pub(crate) const NA_FRAME_LEN: usize = ETH_HLEN + 40 + 32;

const BROADCAST: [u8; 6] = [0xff; 6];
/// 33:33:00:00:00:01, the Ethernet address of ff02::1.
const ALL_NODES_MAC: [u8; 6] = [0x33, 0x33, 0, 0, 0, 1];
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const ARPOP_REQUEST: u16 = 1;
const ARPOP_REPLY: u16 = 2;
/// RARP's "request reverse" (RFC 903), what Open vSwitch's learning frames carry.
const ARPOP_RREQUEST: u16 = 3;
/// Reverse ARP.
const ETHERTYPE_RARP: u16 = 0x8035;
const IPPROTO_IGMP: u8 = 2;
const NEXTHDR_ICMPV6: u8 = 58;
const NDISC_NEIGHBOUR_ADVERTISEMENT: u8 = 136;
/// The NA's Override flag (RFC 4861 §4.4), the top byte's third bit.
const NA_OVERRIDE: u8 = 0x20;
/// ND option type 2: target link-layer address.
const ND_OPT_TARGET_LL_ADDR: u8 = 2;

/// The EtherType of a frame of at least [`ETH_HLEN`] bytes (0 when shorter).
pub(crate) fn ethertype(frame: &[u8]) -> u16 {
    match frame.get(12..14) {
        Some(&[a, b]) => u16::from_be_bytes([a, b]),
        _ => 0,
    }
}

/// The source MAC of a frame (`None` when shorter than a header).
pub(crate) fn src_mac(frame: &[u8]) -> Option<[u8; 6]> {
    frame.get(6..12)?.try_into().ok()
}

/// Whether an untagged IPv4 frame carries IGMP (round-robin sends those on one member).
pub(crate) fn is_igmp(frame: &[u8]) -> bool {
    ethertype(frame) == ETHERTYPE_IPV4 && frame.get(ETH_HLEN + 9) == Some(&IPPROTO_IGMP)
}

/// An ARP request from `mac` for `target_ip`, as the kernel's `arp_create(ARPOP_REQUEST,
/// ETH_P_ARP, target_ip, dev, sender_ip, NULL, mac, NULL)` makes it: broadcast, the
/// sender's hardware address `mac`, the target hardware address zero. With `sender_ip ==
/// target_ip` it is the gratuitous ARP of `bond_send_gratuitous_arp` / the stack's
/// `inet_gratuitous_arp`. Returns the length written ([`ARP_FRAME_LEN`]); `buf` must hold
/// that many bytes.
pub(crate) fn emit_arp_request(
    buf: &mut [u8],
    mac: [u8; 6],
    sender_ip: Ipv4Addr,
    target_ip: Ipv4Addr,
) -> usize {
    let Some(f) = buf.get_mut(..ARP_FRAME_LEN) else {
        return 0;
    };
    f[0..6].copy_from_slice(&BROADCAST);
    f[6..12].copy_from_slice(&mac);
    f[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    f[14..16].copy_from_slice(&1u16.to_be_bytes()); // ARPHRD_ETHER
    f[16..18].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    f[18] = 6;
    f[19] = 4;
    f[20..22].copy_from_slice(&ARPOP_REQUEST.to_be_bytes());
    f[22..28].copy_from_slice(&mac);
    f[28..32].copy_from_slice(&sender_ip.octets());
    f[32..38].fill(0);
    f[38..42].copy_from_slice(&target_ip.octets());
    ARP_FRAME_LEN
}

/// The sender and target IPv4 addresses of an ARP reply (IPv4 over Ethernet), if the
/// frame is one.
pub(crate) fn arp_reply(frame: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr)> {
    if ethertype(frame) != ETHERTYPE_ARP {
        return None;
    }
    let a = frame.get(ETH_HLEN..ARP_FRAME_LEN)?;
    let ok = a[0..2] == [0, 1]
        && a[2..4] == ETHERTYPE_IPV4.to_be_bytes()
        && a[4] == 6
        && a[5] == 4
        && a[6..8] == ARPOP_REPLY.to_be_bytes();
    if !ok {
        return None;
    }
    let ip = |s: &[u8]| -> Option<Ipv4Addr> {
        let o: [u8; 4] = s.try_into().ok()?;
        Some(Ipv4Addr::from(o))
    };
    Some((ip(&a[14..18])?, ip(&a[24..28])?))
}

/// A MAC learning frame for `mac`, as Open vSwitch sends one for each MAC it learned
/// behind a bond when the bond's active member changes (`compose_rarp`): a broadcast
/// RARP request (EtherType 0x8035, operation 3) from `mac` with sender and target
/// hardware address `mac` and zero protocol addresses, so that the switches learn `mac`
/// on the new member. Returns [`ARP_FRAME_LEN`].
pub(crate) fn emit_learning(buf: &mut [u8], mac: [u8; 6]) -> usize {
    let Some(f) = buf.get_mut(..ARP_FRAME_LEN) else {
        return 0;
    };
    f[0..6].copy_from_slice(&BROADCAST);
    f[6..12].copy_from_slice(&mac);
    f[12..14].copy_from_slice(&ETHERTYPE_RARP.to_be_bytes());
    let a = &mut f[ETH_HLEN..];
    a[0..2].copy_from_slice(&1u16.to_be_bytes());
    a[2..4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    a[4] = 6;
    a[5] = 4;
    a[6..8].copy_from_slice(&ARPOP_RREQUEST.to_be_bytes());
    a[8..14].copy_from_slice(&mac);
    a[14..18].fill(0);
    a[18..24].copy_from_slice(&mac);
    a[24..28].fill(0);
    ARP_FRAME_LEN
}

/// An unsolicited Neighbour Advertisement for `addr` from `mac`, as the kernel's
/// `ndisc_send_unsol_na` sends it (`ndisc_send_na(dev, &in6addr_linklocal_allnodes,
/// addr, router = false, solicited = false, override = true, inc_opt = true)`): from
/// `addr` itself to ff02::1, hop limit 255, the Override flag set, a target link-layer
/// address option carrying `mac`. Returns the length written ([`NA_FRAME_LEN`]); `buf`
/// must hold that many bytes.
pub(crate) fn emit_unsolicited_na(buf: &mut [u8], mac: [u8; 6], addr: Ipv6Addr) -> usize {
    let Some(f) = buf.get_mut(..NA_FRAME_LEN) else {
        return 0;
    };
    f[0..6].copy_from_slice(&ALL_NODES_MAC);
    f[6..12].copy_from_slice(&mac);
    f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    // IPv6 header.
    let ip = &mut f[ETH_HLEN..ETH_HLEN + 40];
    ip[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
    ip[4..6].copy_from_slice(&32u16.to_be_bytes());
    ip[6] = NEXTHDR_ICMPV6;
    ip[7] = 255;
    ip[8..24].copy_from_slice(&addr.octets());
    ip[24..40].copy_from_slice(&ALL_NODES.octets());
    // ICMPv6 NA.
    let m = &mut f[ETH_HLEN + 40..NA_FRAME_LEN];
    m[0] = NDISC_NEIGHBOUR_ADVERTISEMENT;
    m[1] = 0;
    m[2..4].fill(0);
    m[4] = NA_OVERRIDE;
    m[5..8].fill(0);
    m[8..24].copy_from_slice(&addr.octets());
    m[24] = ND_OPT_TARGET_LL_ADDR;
    m[25] = 1; // in units of 8 bytes
    m[26..32].copy_from_slice(&mac);
    let sum = icmpv6_checksum(&addr, &ALL_NODES, m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    NA_FRAME_LEN
}

/// The ICMPv6 checksum (RFC 4443 §2.3) of `msg` (its checksum field zero) between `src`
/// and `dst`: the one's complement of the one's complement sum of the pseudo-header
/// (RFC 8200 §8.1) and the message.
pub(crate) fn icmpv6_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, msg: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            let hi = u64::from(pair[0]);
            let lo = pair.get(1).copied().map_or(0, u64::from);
            sum += (hi << 8) | lo;
        }
    };
    add(&src.octets());
    add(&dst.octets());
    let len = u32::try_from(msg.len()).unwrap_or(u32::MAX);
    add(&len.to_be_bytes());
    add(&[0, 0, 0, NEXTHDR_ICMPV6]);
    add(msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
