//! The bond's own frames byte for byte, against frames written out by hand from the
//! layouts (RFC 826 for ARP, RFC 4861 §4.4 and RFC 8200 for the NA).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::frames::*;

const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

#[test]
fn gratuitous_arp_is_a_broadcast_request_with_sender_and_target_the_address() {
    let mut buf = [0u8; 1518];
    let ip = Ipv4Addr::new(10, 210, 0, 1);
    let n = emit_arp_request(&mut buf, MAC, ip, ip);
    #[rustfmt::skip]
    let want: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // broadcast
        0x02, 0, 0, 0, 0, 0x01,             // the bond's MAC
        0x08, 0x06,                         // ARP
        0x00, 0x01, 0x08, 0x00, 6, 4,       // Ethernet, IPv4, lengths
        0x00, 0x01,                         // request
        0x02, 0, 0, 0, 0, 0x01, 10, 210, 0, 1, // sender
        0, 0, 0, 0, 0, 0, 10, 210, 0, 1,    // target: zero MAC, the same address
    ];
    assert_eq!(&buf[..n], &want[..]);
}

#[test]
fn arp_probe_asks_the_target_from_the_source() {
    let mut buf = [0u8; 64];
    let n = emit_arp_request(
        &mut buf,
        MAC,
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 9),
    );
    assert_eq!(n, 42);
    assert_eq!(&buf[28..32], &[10, 0, 0, 1]);
    assert_eq!(&buf[32..38], &[0; 6]);
    assert_eq!(&buf[38..42], &[10, 0, 0, 9]);
    // Not a reply: the monitor does not take our own request for an answer.
    assert_eq!(arp_reply(&buf[..n]), None);
}

#[test]
fn arp_reply_reads_sender_and_target() {
    let mut f = [0u8; 42];
    emit_arp_request(
        &mut f,
        [2, 0, 0, 0, 0, 9],
        Ipv4Addr::new(10, 0, 0, 9),
        Ipv4Addr::new(10, 0, 0, 1),
    );
    f[21] = 2;
    assert_eq!(
        arp_reply(&f),
        Some((Ipv4Addr::new(10, 0, 0, 9), Ipv4Addr::new(10, 0, 0, 1)))
    );
    assert_eq!(arp_reply(&f[..41]), None, "truncated");
    f[16] = 0x86;
    assert_eq!(arp_reply(&f), None, "not IPv4");
}

#[test]
fn unsolicited_na_is_an_override_advertisement_to_all_nodes_with_our_mac() {
    let mut buf = [0u8; 1518];
    let ip: Ipv6Addr = "2001:db8::1".parse().expect("address");
    let n = emit_unsolicited_na(&mut buf, MAC, ip);
    let a = ip.octets();
    let mut want = Vec::new();
    want.extend_from_slice(&[0x33, 0x33, 0, 0, 0, 1]); // ff02::1's MAC
    want.extend_from_slice(&MAC);
    want.extend_from_slice(&[0x86, 0xdd]);
    // IPv6: version 6, payload 32, ICMPv6, hop limit 255, from the address to ff02::1.
    want.extend_from_slice(&[0x60, 0, 0, 0, 0, 32, 58, 255]);
    want.extend_from_slice(&a);
    want.extend_from_slice(&[0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    // NA: type 136, code 0, checksum (computed apart, in Python, over the RFC 8200
    // pseudo-header), flags R=0 S=0 O=1, target, option 2 (target link-layer) len 1.
    want.extend_from_slice(&[136, 0, 0xf9, 0x2a, 0x20, 0, 0, 0]);
    want.extend_from_slice(&a);
    want.extend_from_slice(&[2, 1]);
    want.extend_from_slice(&MAC);
    assert_eq!(n, want.len());
    assert_eq!(&buf[..n], &want[..]);
}

#[test]
fn na_checksum_verifies_for_any_address() {
    for seed in 0u8..32 {
        let mut o = [0u8; 16];
        for (k, b) in o.iter_mut().enumerate() {
            *b = seed.wrapping_mul(37).wrapping_add(k as u8 * 11);
        }
        let ip = Ipv6Addr::from(o);
        let mut buf = [0u8; 128];
        let n = emit_unsolicited_na(&mut buf, MAC, ip);
        // A receiver sums pseudo-header and message, checksum included: all ones.
        let msg = &buf[54..n];
        let dst: Ipv6Addr = "ff02::1".parse().expect("address");
        let mut sum: u32 = 0;
        let mut words = Vec::new();
        words.extend_from_slice(&o);
        words.extend_from_slice(&dst.octets());
        words.extend_from_slice(&32u32.to_be_bytes());
        words.extend_from_slice(&[0, 0, 0, 58]);
        words.extend_from_slice(msg);
        for w in words.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff, "{ip}");
    }
}

#[test]
fn header_fields() {
    let mut f = [0u8; 60];
    f[12] = 0x08;
    f[23] = 2;
    assert!(is_igmp(&f));
    assert!(!is_igmp(&f[..23]));
    f[23] = 6;
    assert!(!is_igmp(&f));
    assert_eq!(ethertype(&f[..13]), 0);
    assert_eq!(src_mac(&f[..11]), None);
}
