use super::*;
use proptest::prelude::*;

/// An IPv4 packet: `options` bytes of options (a multiple of 4), then `l4`.
fn v4(protocol: u8, options: usize, l4: &[u8]) -> Vec<u8> {
    let hl = 20 + options;
    let mut p = vec![0u8; hl];
    p[0] = 0x40 | (hl / 4) as u8;
    p[1] = 0xb8;
    p[2..4].copy_from_slice(&((hl + l4.len()) as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    p[8] = 64;
    p[9] = protocol;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    p.extend_from_slice(l4);
    p
}

/// An IPv6 packet whose fixed header says `next`, followed by `rest`.
fn v6(next: u8, rest: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x6b; // traffic class 0xb8
    p[1] = 0x80;
    p[4..6].copy_from_slice(&(rest.len() as u16).to_be_bytes());
    p[6] = next;
    p[7] = 64;
    p[8] = 0x20;
    p[23] = 1;
    p[24] = 0x20;
    p[39] = 2;
    p.extend_from_slice(rest);
    p
}

/// A TCP header with `options` bytes of options and `flags`, then `data`.
fn tcp(options: usize, flags: u8, data: &[u8]) -> Vec<u8> {
    let hl = 20 + options;
    let mut t = vec![0u8; hl];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&80u16.to_be_bytes());
    t[4..8].copy_from_slice(&0xdead_beefu32.to_be_bytes());
    t[12] = ((hl / 4) as u8) << 4;
    t[13] = flags;
    t.extend_from_slice(data);
    t
}

/// An extension header (hop-by-hop, routing, destination options) of `8 * (units + 1)`
/// bytes whose next header is `next`.
fn ext(next: u8, units: u8) -> Vec<u8> {
    let mut e = vec![0u8; (usize::from(units) + 1) * 8];
    e[0] = next;
    e[1] = units;
    e
}

/// A Fragment header: next header, offset in 8-byte units, more-fragments flag.
fn frag(next: u8, offset: u16, more: bool) -> Vec<u8> {
    let mut f = vec![0u8; 8];
    f[0] = next;
    f[2..4].copy_from_slice(&((offset << 3) | u16::from(more)).to_be_bytes());
    f[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes());
    f
}

#[test]
fn ipv4_fields() {
    let p = v4(proto::UDP, 4, &[0x13, 0x88, 0x03, 0xf2, 0, 0, 0, 0]);
    let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
    assert_eq!(ip.header_len(), 24);
    assert_eq!(ip.tos(), 0xb8);
    assert_eq!(ip.total_len(), 32);
    assert_eq!(ip.ident(), 0x1234);
    assert_eq!(ip.protocol(), proto::UDP);
    assert_eq!(ip.src_addr(), [10, 0, 0, 1]);
    assert_eq!(ip.dst_addr(), [10, 0, 0, 2]);
    assert_eq!(ip.addr_bytes(), &[10, 0, 0, 1, 10, 0, 0, 2]);
    assert!(!ip.is_fragment());
    let ports = Ports::new_checked(ip.payload()).unwrap();
    assert_eq!((ports.src_port(), ports.dst_port()), (5000, 1010));
}

#[test]
fn ipv4_truncated_and_bad_ihl() {
    let p = v4(proto::TCP, 8, &[]);
    // Every cut inside the header, options included, is Truncated.
    for n in 0..p.len() {
        assert_eq!(
            Ipv4Packet::new_checked(&p[..n]).err(),
            Some(IpError::Truncated),
            "{n} bytes"
        );
    }
    assert!(Ipv4Packet::new_checked(&p[..]).is_ok());
    // IHL below 5: the header would overlap its own fixed fields.
    for ihl in 0..5u8 {
        let mut q = v4(proto::TCP, 0, &[0; 20]);
        q[0] = 0x40 | ihl;
        assert_eq!(
            Ipv4Packet::new_checked(&q[..]).err(),
            Some(IpError::HeaderLen),
            "IHL {ihl}"
        );
    }
    let mut q = v4(proto::TCP, 0, &[]);
    q[0] = 0x65;
    assert_eq!(
        Ipv4Packet::new_checked(&q[..]).err(),
        Some(IpError::Version(6))
    );
}

#[test]
fn ipv4_fragments() {
    let mut p = v4(proto::UDP, 0, &[0; 8]);
    p[6] = 0x20; // more fragments, offset 0: the first fragment
    let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
    assert!(ip.is_fragment() && ip.more_frags());
    assert_eq!(ip.frag_offset(), 0);
    p[6] = 0x00;
    p[7] = 0xb9; // offset 185 (1480 bytes), last fragment
    let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
    assert!(ip.is_fragment() && !ip.more_frags());
    assert_eq!(ip.frag_offset(), 185);
    p[6] = 0x40; // don't fragment only: a whole datagram
    p[7] = 0;
    assert!(!Ipv4Packet::new_checked(&p[..]).unwrap().is_fragment());
}

#[test]
fn ip_packet_dispatches_on_the_version() {
    assert_eq!(
        IpPacket::new_checked(&[][..]).err(),
        Some(IpError::Truncated)
    );
    assert!(matches!(
        IpPacket::new_checked(&v4(proto::TCP, 0, &[])[..]),
        Ok(IpPacket::V4(_))
    ));
    assert!(matches!(
        IpPacket::new_checked(&v6(proto::TCP, &[])[..]),
        Ok(IpPacket::V6(_))
    ));
    assert_eq!(
        IpPacket::new_checked(&[0x50u8; 60][..]).err(),
        Some(IpError::Version(5))
    );
    // An IPv6 header cut short is Truncated, not some other version's view.
    assert_eq!(
        IpPacket::new_checked(&v6(proto::TCP, &[])[..39]).err(),
        Some(IpError::Truncated)
    );
}

#[test]
fn ipv6_fields() {
    let p = v6(proto::TCP, &tcp(0, 0x10, b"hi"));
    let ip = Ipv6Packet::new_checked(&p[..]).unwrap();
    assert_eq!(ip.traffic_class(), 0xb8);
    assert_eq!(ip.payload_len(), 22);
    assert_eq!(ip.next_header(), proto::TCP);
    assert_eq!(ip.src_addr()[0], 0x20);
    assert_eq!(ip.src_addr()[15], 1);
    assert_eq!(ip.dst_addr()[15], 2);
    assert_eq!(ip.addr_bytes().len(), 32);
    assert_eq!(ip.payload().len(), 22);
    let up = ip.upper_layer().unwrap();
    assert_eq!(
        up,
        UpperLayer {
            protocol: proto::TCP,
            offset: 40,
            first_fragment: true,
            ended: true
        }
    );
    assert!(ip.fragment_header().is_none());
}

#[test]
fn ipv6_extension_chain() {
    let mut rest = ext(proto::ROUTING, 0);
    rest.extend(ext(proto::DSTOPTS, 1));
    rest.extend(ext(proto::UDP, 0));
    rest.extend([0x13, 0x88, 0x03, 0xf2, 0, 8, 0, 0]);
    let p = v6(proto::HOPOPTS, &rest);
    let ip = Ipv6Packet::new_checked(&p[..]).unwrap();
    let up = ip.upper_layer().unwrap();
    assert_eq!((up.protocol, up.offset), (proto::UDP, 40 + 8 + 16 + 8));
    assert!(up.has_header());
    let ports = Ports::new_checked(&p[up.offset..]).unwrap();
    assert_eq!((ports.src_port(), ports.dst_port()), (5000, 1010));

    // Cut inside an extension header's next-header/length bytes: Truncated.
    assert_eq!(
        Ipv6Packet::new_checked(&p[..40 + 8 + 1])
            .unwrap()
            .upper_layer(),
        Err(IpError::Truncated)
    );
    // Cut after the chain, inside the upper-layer header: the walk ends, the ports
    // are not there.
    let cut = &p[..up.offset + 2];
    let up = Ipv6Packet::new_checked(cut).unwrap().upper_layer().unwrap();
    assert_eq!(up.protocol, proto::UDP);
    assert!(Ports::new_checked(&cut[up.offset..]).is_err());
}

#[test]
fn ipv6_chain_longer_than_the_walk() {
    let mut rest = Vec::new();
    for _ in 0..MAX_EXTENSION_HEADERS {
        rest.extend(ext(proto::DSTOPTS, 0));
    }
    rest.extend(ext(proto::TCP, 0));
    let p = v6(proto::DSTOPTS, &rest);
    let up = Ipv6Packet::new_checked(&p[..])
        .unwrap()
        .upper_layer()
        .unwrap();
    assert_eq!(up.protocol, proto::DSTOPTS);
    assert!(!up.ended && !up.has_header());
    // One fewer and the walk reaches the upper layer.
    let p = v6(proto::DSTOPTS, &rest[8..]);
    let up = Ipv6Packet::new_checked(&p[..])
        .unwrap()
        .upper_layer()
        .unwrap();
    assert_eq!(up.protocol, proto::TCP);
    assert!(up.has_header());
}

#[test]
fn ipv6_fragments_first_has_ports_later_do_not() {
    let mut first = frag(proto::UDP, 0, true);
    first.extend([0x13, 0x88, 0x03, 0xf2, 0, 8, 0, 0]);
    let p = v6(proto::FRAGMENT, &first);
    let ip = Ipv6Packet::new_checked(&p[..]).unwrap();
    let up = ip.upper_layer().unwrap();
    assert_eq!((up.protocol, up.offset), (proto::UDP, 48));
    assert!(up.first_fragment && up.has_header());
    let fh = ip.fragment_header().unwrap();
    assert_eq!(fh.next_header(), proto::UDP);
    assert_eq!(fh.frag_offset(), 0);
    assert!(fh.more_frags());
    assert_eq!(fh.ident(), 0x0102_0304);

    let mut later = frag(proto::UDP, 185, false);
    later.extend([0x13, 0x88, 0x03, 0xf2, 0, 8, 0, 0]);
    let p = v6(proto::FRAGMENT, &later);
    let ip = Ipv6Packet::new_checked(&p[..]).unwrap();
    let up = ip.upper_layer().unwrap();
    assert_eq!(up.protocol, proto::UDP);
    assert!(!up.first_fragment && !up.has_header());
    let fh = ip.fragment_header().unwrap();
    assert_eq!(fh.frag_offset(), 185);
    assert!(!fh.more_frags());

    // A Fragment header cut before its offset field.
    assert_eq!(
        Ipv6Packet::new_checked(&p[..43]).unwrap().upper_layer(),
        Err(IpError::Truncated)
    );
    assert!(Ipv6Packet::new_checked(&p[..47])
        .unwrap()
        .fragment_header()
        .is_none());
}

#[test]
fn tcp_fields_and_checks() {
    let t = tcp(12, tcp_flags::SYN | tcp_flags::ACK, b"data");
    let s = TcpPacket::new_checked(&t[..]).unwrap();
    assert_eq!((s.src_port(), s.dst_port()), (40000, 80));
    assert_eq!(s.seq_number(), 0xdead_beef);
    assert_eq!(s.header_len(), 32);
    assert_eq!(s.options().len(), 12);
    assert_eq!(s.payload(), b"data");
    assert!(s.syn() && !s.fin() && !s.rst());
    assert_eq!(s.flags(), 0x12);

    // Cut anywhere inside the header (options included): Truncated.
    for n in 0..32 {
        assert_eq!(
            TcpPacket::new_checked(&t[..n]).err(),
            Some(IpError::Truncated),
            "{n} bytes"
        );
    }
    for doff in 0..5u8 {
        let mut u = tcp(0, 0, &[0; 20]);
        u[12] = doff << 4;
        assert_eq!(
            TcpPacket::new_checked(&u[..]).err(),
            Some(IpError::HeaderLen),
            "data offset {doff}"
        );
    }
}

#[test]
fn ports_need_four_bytes() {
    assert_eq!(
        Ports::new_checked(&[0u8, 1, 2][..]).err(),
        Some(IpError::Truncated)
    );
    let p = Ports::new_checked(&[0u8, 53, 0x80, 0][..]).unwrap();
    assert_eq!((p.src_port(), p.dst_port()), (53, 0x8000));
    assert!(has_ports(proto::TCP) && has_ports(proto::SCTP) && !has_ports(proto::ICMP));
}

/// Touches every accessor of every view `bytes` passes, with the invariants the checks
/// promise.
fn exercise(bytes: &[u8]) {
    match IpPacket::new_checked(bytes) {
        Ok(IpPacket::V4(ip)) => {
            assert!(ip.header_len() >= 20 && ip.header_len() <= bytes.len());
            let _ = (ip.tos(), ip.total_len(), ip.ident(), ip.is_fragment());
            let _ = (ip.protocol(), ip.src_addr(), ip.dst_addr(), ip.addr_bytes());
            assert_eq!(ip.payload().len(), bytes.len() - ip.header_len());
            if ip.frag_offset() != 0 {
                assert!(ip.is_fragment());
            }
            transport(ip.payload());
        }
        Ok(IpPacket::V6(ip)) => {
            let _ = (
                ip.traffic_class(),
                ip.payload_len(),
                ip.src_addr(),
                ip.dst_addr(),
            );
            assert_eq!(ip.payload().len(), bytes.len() - 40);
            if let Some(f) = ip.fragment_header() {
                let _ = (f.next_header(), f.frag_offset(), f.more_frags(), f.ident());
            }
            if let Ok(up) = ip.upper_layer() {
                assert!(up.offset >= 40);
                assert_eq!(up.ended, !is_extension_header(up.protocol));
                if let Some(l4) = bytes.get(up.offset..) {
                    transport(l4);
                }
            }
        }
        Err(_) => {}
    }
}

fn transport(l4: &[u8]) {
    if let Ok(p) = Ports::new_checked(l4) {
        let _ = (p.src_port(), p.dst_port());
    }
    if let Ok(t) = TcpPacket::new_checked(l4) {
        assert!(t.header_len() >= 20 && t.header_len() <= l4.len());
        let _ = (t.src_port(), t.dst_port(), t.seq_number(), t.flags());
        assert_eq!(t.options().len() + 20 + t.payload().len(), l4.len());
    }
}

proptest! {
    /// No bytes make a view panic, whatever their first byte says.
    #[test]
    fn views_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..200),
                         first in prop_oneof![Just(0x45u8), Just(0x4f), Just(0x41), Just(0x60), any::<u8>()],
                         next in prop_oneof![Just(0u8), Just(43), Just(44), Just(60), Just(6), any::<u8>()]) {
        if let Some(b) = bytes.get_mut(0) {
            *b = first;
        }
        if first >> 4 == 6 {
            if let Some(b) = bytes.get_mut(6) {
                *b = next;
            }
        }
        exercise(&bytes);
    }
}
