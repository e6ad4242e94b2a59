//! Split and coalesce together: round trips, exact headers, malformed input.

use super::checksum::{self, sum};
use super::coalesce::{Coalescer, PushError, Pushed, MAX_SEGMENTS};
use super::split::{read_frame, split_into, Frame, SplitError};
use super::vnet::{self, VnetError, VnetHdr};
use super::{MAX_FRAME, PROTO_TCP, PROTO_UDP};

const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;
const CWR: u8 = 0x80;

/// Timestamps option (NOP, NOP, TS 10 bytes).
const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9];

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn ip_header(v6: bool, proto: u8, l4_len: usize, id: u16) -> Vec<u8> {
    if v6 {
        let mut h = vec![0u8; 40];
        h[0] = 0x60;
        h[1] = 0x01; // a flow label
        h[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        h[6] = proto;
        h[7] = 64;
        h[8] = 0xfd;
        h[23] = 1;
        h[24] = 0xfd;
        h[39] = 2;
        h
    } else {
        let mut h = vec![0u8; 20];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        h[4..6].copy_from_slice(&id.to_be_bytes());
        h[6] = 0x40;
        h[8] = 64;
        h[9] = proto;
        h[12..16].copy_from_slice(&[10, 0, 0, 1]);
        h[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let c = checksum::checksum(&h, 0);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }
}

/// A TCP packet with valid checksums.
fn tcp(v6: bool, seq: u32, flags: u8, opts: &[u8], data: &[u8], id: u16) -> Vec<u8> {
    let tl = 20 + opts.len();
    let mut p = ip_header(v6, PROTO_TCP, tl + data.len(), id);
    let t = p.len();
    p.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    p.push(((tl / 4) as u8) << 4);
    p.push(flags);
    p.extend_from_slice(&[0x01, 0xf5, 0, 0, 0, 0]);
    p.extend_from_slice(opts);
    p.extend_from_slice(data);
    let ps = super::split::pseudo_sum(&p, v6, PROTO_TCP, p.len() - t);
    let c = checksum::checksum(&p[t..], ps);
    p[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
    p
}

fn udp(v6: bool, data: &[u8]) -> Vec<u8> {
    let mut p = ip_header(v6, PROTO_UDP, 8 + data.len(), 7);
    let t = p.len();
    p.extend_from_slice(&[0x30, 0x39, 0x00, 0x35]);
    p.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(data);
    let ps = super::split::pseudo_sum(&p, v6, PROTO_UDP, p.len() - t);
    let c = checksum::checksum(&p[t..], ps);
    p[t + 6..t + 8].copy_from_slice(&c.to_be_bytes());
    p
}

/// What the kernel hands out: `packet` as a superframe, its IP length set, its
/// transport checksum the pseudo-header sum, a virtio header in front.
fn superframe(packet: &[u8], gso_type: u8, gso_size: u16) -> Vec<u8> {
    let v6 = packet[0] >> 4 == 6;
    let t = if v6 { 40 } else { 20 };
    let mut p = packet.to_vec();
    let (proto, off, hl) = if p[if v6 { 6 } else { 9 }] == PROTO_UDP {
        (PROTO_UDP, 6, t + 8)
    } else {
        (PROTO_TCP, 16, t + usize::from(p[t + 12] >> 4) * 4)
    };
    let ps = super::split::pseudo_sum(&p, v6, proto, p.len() - t);
    p[t + off..t + off + 2].copy_from_slice(&ps.to_be_bytes());
    let hdr = VnetHdr {
        flags: vnet::F_NEEDS_CSUM,
        gso_type,
        hdr_len: hl as u16,
        gso_size,
        csum_start: t as u16,
        csum_offset: off as u16,
    };
    let mut f = vec![0u8; vnet::LEN];
    hdr.emit(&mut f).unwrap();
    f.extend_from_slice(&p);
    f
}

/// The IPv4 header and transport checksums of `p` verify.
fn valid(p: &[u8]) -> bool {
    let v6 = p[0] >> 4 == 6;
    let t = if v6 { 40 } else { 20 };
    let proto = if v6 { p[6] } else { p[9] };
    (v6 || sum(&p[..20], 0) == 0xffff)
        && sum(&p[t..], super::split::pseudo_sum(p, v6, proto, p.len() - t)) == 0xffff
}

fn split_all(frame: &[u8]) -> Result<Vec<Vec<u8>>, SplitError> {
    let mut buf = frame.to_vec();
    let mut bufs = vec![vec![0u8; 65535]; 64];
    let mut sizes = [0usize; 64];
    let n = split_into(&mut buf, &mut bufs, &mut sizes)?;
    Ok((0..n).map(|i| bufs[i][..sizes[i]].to_vec()).collect())
}

#[test]
fn tso4_split_sets_each_segment() {
    let data = payload(10_000);
    let p = tcp(
        false,
        0xffff_f000,
        ACK | PSH | FIN | CWR,
        &TS,
        &data,
        0xfffe,
    );
    let segs = split_all(&superframe(&p, vnet::GSO_TCPV4, 1448)).unwrap();
    assert_eq!(segs.len(), 7);
    let mut joined = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        assert!(valid(s), "segment {i} checksums");
        let len = if i < 6 { 1448 } else { 10_000 - 6 * 1448 };
        assert_eq!(s.len(), 20 + 32 + len);
        assert_eq!(u16::from_be_bytes([s[2], s[3]]) as usize, s.len());
        assert_eq!(
            u16::from_be_bytes([s[4], s[5]]),
            0xfffeu16.wrapping_add(i as u16)
        );
        let seq = u32::from_be_bytes([s[24], s[25], s[26], s[27]]);
        assert_eq!(seq, 0xffff_f000u32.wrapping_add(1448 * i as u32));
        let flags = s[33];
        assert_eq!(flags & (FIN | PSH) != 0, i == 6, "FIN/PSH on the last only");
        assert_eq!(flags & CWR != 0, i == 0, "CWR on the first only");
        assert_eq!(flags & ACK, ACK);
        assert_eq!(&s[40..52], &TS, "options copied");
        joined.extend_from_slice(&s[52..]);
    }
    assert_eq!(joined, data);
}

#[test]
fn tso_round_trip_v4_and_v6() {
    for v6 in [false, true] {
        let data = payload(20_000);
        let p = tcp(v6, 1000, ACK | PSH, &TS, &data, 300);
        let frame = superframe(&p, if v6 { vnet::GSO_TCPV6 } else { vnet::GSO_TCPV4 }, 1400);
        let segs = split_all(&frame).unwrap();
        assert_eq!(segs.len(), 15);
        let mut c = Coalescer::new(4, MAX_FRAME);
        for (i, s) in segs.iter().enumerate() {
            assert!(valid(s));
            let pushed = c.push(s).unwrap();
            assert_eq!(
                pushed,
                Pushed {
                    frame: 0,
                    merged: i > 0
                }
            );
        }
        assert_eq!(c.len(), 1);
        // The kernel's superframe comes back byte for byte.
        assert_eq!(c.frame(0).unwrap(), &frame[..], "v6 {v6}");
        // And its checksum, completed, verifies.
        let mut again = c.frame(0).unwrap().to_vec();
        let h = VnetHdr::parse(&again).unwrap();
        super::split::complete_checksum(&mut again[vnet::LEN..], h.csum_start, h.csum_offset)
            .unwrap();
        assert!(valid(&again[vnet::LEN..]));
        assert_eq!(split_all(c.frame(0).unwrap()).unwrap(), segs);
    }
}

#[test]
fn uso_split_v4_and_v6() {
    for v6 in [false, true] {
        let data = payload(5000);
        let p = udp(v6, &data);
        let segs = split_all(&superframe(&p, vnet::GSO_UDP_L4, 1200)).unwrap();
        assert_eq!(segs.len(), 5);
        let t = if v6 { 40 } else { 20 };
        for (i, s) in segs.iter().enumerate() {
            assert!(valid(s));
            let len = if i < 4 { 1200 } else { 200 };
            assert_eq!(u16::from_be_bytes([s[t + 4], s[t + 5]]) as usize, 8 + len);
            assert_eq!(&s[t + 8..], &data[i * 1200..i * 1200 + len]);
            // Each is what a UDP socket would have sent alone (IPv4 IDs step).
            let mut alone = udp(v6, &data[i * 1200..i * 1200 + len]);
            if !v6 {
                alone[4..6].copy_from_slice(&(7 + i as u16).to_be_bytes());
                alone[10..12].fill(0);
                let c = checksum::checksum(&alone[..20], 0);
                alone[10..12].copy_from_slice(&c.to_be_bytes());
            }
            assert_eq!(s, &alone);
        }
    }
}

#[test]
fn needs_csum_without_gso_is_completed() {
    for v6 in [false, true] {
        let good = udp(v6, b"hello, checksum");
        let mut f = superframe(&good, vnet::GSO_NONE, 0);
        let t = if v6 { 40 } else { 20 };
        assert_ne!(&f[vnet::LEN..], &good[..]);
        match read_frame(&mut f).unwrap() {
            Frame::Packet(p) => assert_eq!(p, &good[..]),
            Frame::Segments(_) => panic!("one packet"),
        }
        // Pinned: the UDP checksum of this packet (worked out by hand in Python).
        let c = u16::from_be_bytes([good[t + 6], good[t + 7]]);
        assert_eq!(c, if v6 { 0xc4a5 } else { 0xaaa7 }, "v6 {v6}");
    }
}

#[test]
fn icmp_and_others_pass_through() {
    let mut icmp = ip_header(false, 1, 12, 5);
    icmp.extend_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1, b'p', b'i', b'n', b'g']);
    let syn = tcp(false, 1, 0x02, &TS, &[], 1);
    let ack_only = tcp(true, 1, ACK, &[], &[], 1);
    let u = udp(true, b"x");
    let mut c = Coalescer::new(8, 2000);
    for p in [&icmp, &syn, &ack_only, &u, &vec![0x45; 3], &vec![]] {
        let r = c.push(p).unwrap();
        assert!(!r.merged);
        let f = c.frame(r.frame).unwrap();
        assert_eq!(&f[..vnet::LEN], &[0; vnet::LEN]);
        assert_eq!(&f[vnet::LEN..], &p[..]);
        let mut f = f.to_vec();
        match read_frame(&mut f).unwrap() {
            Frame::Packet(q) => assert_eq!(q, &p[..]),
            Frame::Segments(_) => panic!("one packet"),
        }
    }
    assert_eq!(c.len(), 6);
    assert_eq!(c.push(&[0u8; 1991]), Err(PushError::TooLarge));
    c.clear();
    assert!(c.is_empty());
}

#[test]
fn coalesce_keeps_flows_apart_and_in_order() {
    let d = payload(1000);
    let a = |seq: u32, id: u16| tcp(false, seq, ACK, &[], &d, id);
    let b = |seq: u32, id: u16| {
        let mut p = tcp(false, seq, ACK, &[], &d, id);
        // Another source port: another flow.
        p[20] = 0x11;
        let ps = super::split::pseudo_sum(&p, false, PROTO_TCP, p.len() - 20);
        p[36..38].fill(0);
        let c = checksum::checksum(&p[20..], ps);
        p[36..38].copy_from_slice(&c.to_be_bytes());
        p
    };
    let mut c = Coalescer::new(8, MAX_FRAME);
    assert_eq!(
        c.push(&a(0, 1)).unwrap(),
        Pushed {
            frame: 0,
            merged: false
        }
    );
    assert_eq!(
        c.push(&b(0, 1)).unwrap(),
        Pushed {
            frame: 1,
            merged: false
        }
    );
    assert_eq!(
        c.push(&a(1000, 2)).unwrap(),
        Pushed {
            frame: 0,
            merged: true
        }
    );
    assert_eq!(
        c.push(&b(1000, 2)).unwrap(),
        Pushed {
            frame: 1,
            merged: true
        }
    );
    // A gap: a new frame; the old one is no longer appended to.
    assert_eq!(
        c.push(&a(3000, 3)).unwrap(),
        Pushed {
            frame: 2,
            merged: false
        }
    );
    assert_eq!(
        c.push(&a(2000, 4)).unwrap(),
        Pushed {
            frame: 3,
            merged: false
        }
    );
    // IPv4 ID not stepping: not merged.
    assert_eq!(
        c.push(&a(3000, 9)).unwrap(),
        Pushed {
            frame: 4,
            merged: false
        }
    );
    assert_eq!(
        split_all(c.frame(0).unwrap()).unwrap(),
        vec![a(0, 1), a(1000, 2)]
    );
    assert_eq!(
        c.push(&a(4000, 10)).unwrap(),
        Pushed {
            frame: 4,
            merged: true
        }
    );
    assert_eq!(c.len(), 5);
}

#[test]
fn coalesce_refuses_what_would_change_the_packets() {
    let d = payload(1000);
    let first = tcp(true, 0, ACK, &TS, &d, 0);
    let next = tcp(true, 1000, ACK, &TS, &d, 0);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "other options",
            tcp(
                true,
                1000,
                ACK,
                &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
                &d,
                0,
            ),
        ),
        ("longer", tcp(true, 1000, ACK, &TS, &payload(1001), 0)),
        ("FIN", tcp(true, 1000, ACK | FIN, &TS, &d, 0)),
        ("no options", tcp(true, 1000, ACK, &[], &d, 0)),
        ("bad checksum", {
            let mut p = next.clone();
            p[100] ^= 1;
            p
        }),
        ("hop limit", {
            let mut p = next.clone();
            p[7] = 3;
            p
        }),
        ("window", {
            let mut p = next.clone();
            p[54] ^= 1;
            p[56] ^= 1;
            p
        }),
    ];
    for (what, p) in cases {
        let mut c = Coalescer::new(4, MAX_FRAME);
        c.push(&first).unwrap();
        assert!(!c.push(&p).unwrap().merged, "{what}");
        assert!(!c.push(&next).unwrap().merged, "{what}: frame 0 was left");
    }
    // A shorter segment, or PSH, ends the frame.
    for end in [
        tcp(true, 1000, ACK, &TS, &d[..10], 0),
        tcp(true, 1000, ACK | PSH, &TS, &d, 0),
    ] {
        let mut c = Coalescer::new(4, MAX_FRAME);
        c.push(&first).unwrap();
        assert!(c.push(&end).unwrap().merged);
        let seq = 1000 + (end.len() - 72) as u32;
        assert!(!c.push(&tcp(true, seq, ACK, &TS, &d, 0)).unwrap().merged);
    }
    // A frame full at 64 KB or MAX_SEGMENTS; a batch full.
    let mut c = Coalescer::new(2, MAX_FRAME);
    let mut seq = 0u32;
    let mut frames = Vec::new();
    for _ in 0..70 {
        frames.push(c.push(&tcp(true, seq, ACK, &TS, &d, 0)).unwrap().frame);
        seq += 1000;
    }
    assert_eq!(
        frames.iter().filter(|&&f| f == 0).count(),
        MAX_SEGMENTS as usize
    );
    assert_eq!(c.push(&tcp(false, 0, 2, &[], &[], 0)), Err(PushError::Full));
    let big = payload(1400);
    let mut c = Coalescer::new(2, MAX_FRAME);
    let mut frames = Vec::new();
    for i in 0..50u32 {
        frames.push(
            c.push(&tcp(true, i * 1400, ACK, &TS, &big, 0))
                .unwrap()
                .frame,
        );
    }
    // 46 * 1400 + 72 fits in 65535 bytes of IP packet, 47 do not.
    assert_eq!(frames.iter().filter(|&&f| f == 0).count(), 46);
    assert_eq!(c.frame(0).unwrap().len(), vnet::LEN + 46 * 1400 + 72);
    let small = payload(100);
    let mut c = Coalescer::new(1, MAX_FRAME);
    for i in 0..MAX_SEGMENTS as u32 {
        c.push(&tcp(false, i * 100, ACK, &[], &small, i as u16))
            .unwrap();
    }
    assert_eq!(
        c.push(&tcp(false, 6400, ACK, &[], &small, 64)),
        Err(PushError::Full)
    );
}

/// A segment whose checksum fails (in its TCP header or its payload) is neither merged
/// nor merged into, and comes out as it came; what the summing copy of a refused one
/// left behind a frame's end never shows.
#[test]
fn a_segment_that_fails_its_checksum_is_written_as_it_came() {
    let d = payload(1000);
    let seg = |seq: u32, id: u16| tcp(false, seq, ACK, &TS, &d, id);
    // 20 + 16: the TCP checksum field; 500: the payload.
    for at in [36, 500] {
        let mut bad = seg(1000, 1);
        bad[at] ^= 1;
        let mut c = Coalescer::new(4, MAX_FRAME);
        c.push(&seg(0, 0)).unwrap();
        assert_eq!(c.push(&bad).unwrap().frame, 1, "byte {at}: not merged");
        // What comes after it does not go before it.
        assert_eq!(c.push(&seg(2000, 2)).unwrap().frame, 2, "byte {at}");
        assert_eq!(
            &c.frame(0).unwrap()[vnet::LEN..],
            &seg(0, 0)[..],
            "byte {at}"
        );
        assert_eq!(&c.frame(1).unwrap()[vnet::LEN..], &bad[..], "byte {at}");
        // A first segment that fails starts a frame nothing joins.
        let mut c = Coalescer::new(4, MAX_FRAME);
        let mut first = seg(0, 0);
        first[at] ^= 1;
        c.push(&first).unwrap();
        assert!(!c.push(&seg(1000, 1)).unwrap().merged, "byte {at}");
        assert_eq!(&c.frame(0).unwrap()[vnet::LEN..], &first[..], "byte {at}");
    }
}

#[test]
fn malformed_reads_are_typed_errors() {
    let data = payload(3000);
    let good = superframe(&tcp(false, 0, ACK, &TS, &data, 0), vnet::GSO_TCPV4, 1000);
    let good6 = superframe(&udp(true, &data), vnet::GSO_UDP_L4, 1000);
    let edit = |f: &[u8], e: &dyn Fn(&mut Vec<u8>)| {
        let mut f = f.to_vec();
        e(&mut f);
        split_all(&f)
    };
    let set = |f: &mut Vec<u8>, at: usize, v: u16| f[at..at + 2].copy_from_slice(&v.to_le_bytes());
    assert_eq!(
        split_all(&good[..9]),
        Err(SplitError::Vnet(VnetError::Short))
    );
    assert_eq!(
        edit(&good, &|f| f[1] = 2),
        Err(SplitError::Vnet(VnetError::UnknownGso(2)))
    );
    assert_eq!(
        edit(&good, &|f| f[1] = vnet::GSO_TCPV6),
        Err(SplitError::IpVersion(4))
    );
    assert_eq!(
        edit(&good6, &|f| f[10] = 0x50),
        Err(SplitError::IpVersion(5))
    );
    assert_eq!(edit(&good, &|f| set(f, 4, 0)), Err(SplitError::ZeroGsoSize));
    assert_eq!(edit(&good, &|f| set(f, 6, 24)), Err(SplitError::BadHeaders));
    assert_eq!(
        edit(&good, &|f| set(f, 6, 60000)),
        Err(SplitError::BadHeaders)
    );
    assert_eq!(
        edit(&good6, &|f| set(f, 6, 20)),
        Err(SplitError::BadHeaders)
    );
    assert_eq!(
        edit(&good, &|f| f[19] = PROTO_UDP),
        Err(SplitError::BadHeaders)
    );
    assert_eq!(
        edit(&good, &|f| set(f, 8, 6)),
        Err(SplitError::BadChecksumOffset)
    );
    assert_eq!(
        edit(&good6, &|f| set(f, 8, 16)),
        Err(SplitError::BadChecksumOffset)
    );
    assert_eq!(
        edit(&good, &|f| f[42] = 0x40),
        Err(SplitError::BadTcpHeaderLen)
    );
    assert_eq!(
        split_all(&good[..10 + 20 + 12]),
        Err(SplitError::BadTcpHeaderLen)
    );
    assert_eq!(
        split_all(&good[..10 + 20 + 30]),
        Err(SplitError::BadTcpHeaderLen)
    );
    assert_eq!(split_all(&good[..10 + 20 + 32]), Err(SplitError::NoPayload));
    assert_eq!(
        split_all(&good6[..10 + 40 + 4]),
        Err(SplitError::ChecksumOutside)
    );
    assert_eq!(split_all(&good[..10 + 10]), Err(SplitError::BadHeaders));
    // Checksum position outside a plain packet.
    let mut plain = superframe(&udp(false, b"abc"), vnet::GSO_NONE, 0);
    set(&mut plain, 6, 30);
    assert_eq!(split_all(&plain), Err(SplitError::ChecksumOutside));
    // Too many segments for the buffers, a buffer too small.
    let mut f = good.clone();
    let mut bufs = vec![vec![0u8; 1500]; 2];
    assert_eq!(
        split_into(&mut f, &mut bufs, &mut [0; 2]),
        Err(SplitError::TooManySegments)
    );
    let mut bufs = vec![vec![0u8; 1000]; 3];
    assert_eq!(
        split_into(&mut f, &mut bufs, &mut [0; 3]),
        Err(SplitError::BufferTooSmall)
    );
    let mut none: [Vec<u8>; 0] = [];
    let mut plain = superframe(&udp(false, b"abc"), vnet::GSO_NONE, 0);
    assert_eq!(
        split_into(&mut plain, &mut none, &mut []),
        Err(SplitError::TooManySegments)
    );
}

#[test]
fn uso_round_trip_with_udp_gro() {
    for v6 in [false, true] {
        let data = payload(7000);
        let frame = superframe(&udp(v6, &data), vnet::GSO_UDP_L4, 1200);
        let segs = split_all(&frame).unwrap();
        assert_eq!(segs.len(), 6);
        // Without UDP GRO each datagram is a frame of its own.
        let mut plain = Coalescer::new(8, MAX_FRAME);
        for s in &segs {
            assert!(!plain.push(s).unwrap().merged);
        }
        let mut c = Coalescer::new(8, MAX_FRAME).with_udp(true);
        for (i, s) in segs.iter().enumerate() {
            assert_eq!(
                c.push(s).unwrap(),
                Pushed {
                    frame: 0,
                    merged: i > 0
                }
            );
        }
        assert_eq!(c.frame(0).unwrap(), &frame[..], "v6 {v6}");
        assert_eq!(split_all(c.frame(0).unwrap()).unwrap(), segs);
        // After the shorter last datagram, nothing more joins; a TCP segment with the
        // same ports is another flow.
        assert!(!c.push(&segs[0]).unwrap().merged);
        // A zero (absent) UDP checksum is not merged.
        let mut none = segs[1].clone();
        let t = if v6 { 40 } else { 20 };
        none[t + 6..t + 8].fill(0);
        let mut c = Coalescer::new(8, MAX_FRAME).with_udp(true);
        c.push(&segs[0]).unwrap();
        assert!(!c.push(&none).unwrap().merged);
        assert!(
            !c.push(&segs[1]).unwrap().merged,
            "not past the unmerged one"
        );
    }
}
