//! TUN offloads (`braid_core::offload`): cutting what a TUN read holds into packets, and
//! merging packets into frames for a TUN write.
//!
//! Input: a mode byte, then either one TUN read (virtio header and packet), or packets
//! for the coalescer (with UDP GRO or without, as the mode says): raw (a length byte
//! before each), or a TCP/UDP stream (a template packet, then per segment a payload
//! length and a byte that may spoil it), with the IPv4 header and TCP/UDP checksums made
//! right where the mode says so.
//!
//! Checks: nothing panics; every segment cut from a read fits the announced segment
//! length, and its IPv4 header and transport checksums verify; `count()` segments come
//! out. Every frame the coalescer builds reads back (`read_frame`) as exactly the packets
//! pushed into it, in order (a merged frame's segments up to the form of their
//! checksums, which verify).
#![no_main]

use braid_core::offload::checksum;
use braid_core::offload::coalesce::{Coalescer, PushError};
use braid_core::offload::split::{read_frame, Frame};
use braid_core::offload::vnet;
use libfuzzer_sys::fuzz_target;

fn ip_hdr_len(p: &[u8]) -> Option<(bool, usize, u8)> {
    match p.first()? >> 4 {
        4 if p.len() >= 20 => Some((false, usize::from(p[0] & 0x0f) * 4, p[9])),
        6 if p.len() >= 40 => Some((true, 40, p[6])),
        _ => None,
    }
}

fn pseudo(p: &[u8], v6: bool, proto: u8, len: usize) -> u16 {
    if v6 {
        let s: [u8; 16] = p[8..24].try_into().expect("16 bytes");
        let d: [u8; 16] = p[24..40].try_into().expect("16 bytes");
        checksum::pseudo_v6(&s, &d, proto, len as u32)
    } else {
        let s: [u8; 4] = p[12..16].try_into().expect("4 bytes");
        let d: [u8; 4] = p[16..20].try_into().expect("4 bytes");
        checksum::pseudo_v4(&s, &d, proto, len as u16)
    }
}

/// The IPv4 header checksum and the TCP/UDP checksum of `p` verify.
fn valid(p: &[u8]) -> bool {
    let Some((v6, t, proto)) = ip_hdr_len(p) else {
        return false;
    };
    (v6 || checksum::sum(&p[..t], 0) == 0xffff)
        && checksum::sum(&p[t..], pseudo(p, v6, proto, p.len() - t)) == 0xffff
}

/// Make the IPv4 header and TCP or UDP checksums of `p` right, if it looks like TCP/UDP.
fn fix(p: &mut [u8]) {
    let Some((v6, t, proto)) = ip_hdr_len(p) else {
        return;
    };
    if !v6 && t >= 20 && t <= p.len() {
        p[10..12].fill(0);
        let c = checksum::checksum(&p[..t], 0);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    }
    if proto == 6 && p.len() >= t + 20 {
        p[t + 16..t + 18].fill(0);
        let c = checksum::checksum(&p[t..], pseudo(p, v6, 6, p.len() - t));
        p[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
    }
    if proto == 17 && p.len() >= t + 8 {
        p[t + 6..t + 8].fill(0);
        let c = checksum::checksum(&p[t..], pseudo(p, v6, 17, p.len() - t));
        let c = if c == 0 { 0xffff } else { c };
        p[t + 6..t + 8].copy_from_slice(&c.to_be_bytes());
    }
}

/// Cut one TUN read; check each segment.
fn split(read: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut buf = read.to_vec();
    match read_frame(&mut buf) {
        Ok(Frame::Packet(p)) => Some(vec![p.to_vec()]),
        Ok(Frame::Segments(mut s)) => {
            let (count, max) = (s.count(), s.segment_len());
            let mut seg = vec![0u8; max];
            let mut out = Vec::new();
            loop {
                match s.next_into(&mut seg) {
                    Ok(Some(n)) => {
                        assert!(n <= max);
                        assert!(valid(&seg[..n]), "a segment's checksums verify");
                        out.push(seg[..n].to_vec());
                    }
                    Ok(None) => break,
                    Err(_) => return None,
                }
            }
            assert_eq!(out.len(), count);
            Some(out)
        }
        Err(_) => None,
    }
}

/// `p` with its IPv4 header checksum and transport checksum fields zeroed.
fn sans_checksums(p: &[u8]) -> Vec<u8> {
    let mut p = p.to_vec();
    if let Some((v6, t, proto)) = ip_hdr_len(&p) {
        if !v6 {
            p[10..12].fill(0);
        }
        let at = if proto == 17 { t + 6 } else { t + 16 };
        if p.len() >= at + 2 {
            p[at..at + 2].fill(0);
        }
    }
    p
}

/// Build frames from `packets` and check that each reads back as what went in.
fn coalesce(packets: &[Vec<u8>], frame_cap: usize, udp: bool) {
    let mut c = Coalescer::new(4, frame_cap).with_udp(udp);
    let mut pushed: Vec<Vec<Vec<u8>>> = Vec::new();
    let check = |c: &mut Coalescer, pushed: &[Vec<Vec<u8>>]| {
        assert_eq!(c.len(), pushed.len());
        for (f, ins) in c.frames().zip(pushed) {
            let merged = vnet::VnetHdr::parse(f).expect("header").gso_type != vnet::GSO_NONE;
            let outs = split(f).expect("a frame reads back");
            assert_eq!(outs.len(), ins.len());
            if merged {
                for (o, i) in outs.iter().zip(ins) {
                    assert!(valid(i));
                    assert_eq!(sans_checksums(o), sans_checksums(i));
                }
            } else {
                assert_eq!(&outs, ins);
            }
        }
    };
    for p in packets {
        let r = match c.push(p) {
            Err(PushError::Full) => {
                check(&mut c, &pushed);
                c.clear();
                pushed.clear();
                c.push(p)
            }
            r => r,
        };
        match r {
            Ok(r) => {
                if r.merged {
                    pushed[r.frame].push(p.clone());
                } else {
                    assert_eq!(r.frame, pushed.len());
                    pushed.push(vec![p.clone()]);
                }
            }
            Err(PushError::TooLarge) => assert!(p.len() + vnet::LEN > frame_cap),
            Err(PushError::Full) => panic!("full right after clear"),
        }
    }
    check(&mut c, &pushed);
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let frame_cap =
        [vnet::LEN + 1500, 9000, braid_core::offload::MAX_FRAME][usize::from(mode >> 6) % 3];
    match mode & 3 {
        0 => {
            let _ = split(rest);
        }
        1 | 2 => {
            let mut packets = Vec::new();
            let mut r = rest;
            while let Some((&n, tail)) = r.split_first() {
                let n = usize::from(n).min(tail.len());
                let mut p = tail[..n].to_vec();
                if mode & 3 == 2 {
                    fix(&mut p);
                }
                packets.push(p);
                r = &tail[n..];
            }
            coalesce(&packets, frame_cap, mode & 4 != 0);
        }
        _ => {
            // A template packet (length byte first), then (payload length, spoil) pairs.
            let Some((&n, tail)) = rest.split_first() else {
                return;
            };
            let n = usize::from(n).min(tail.len());
            let (template, mut steps) = tail.split_at(n);
            let Some((v6, t, proto)) = ip_hdr_len(template) else {
                return;
            };
            if template.len() < t + 20 {
                return;
            }
            let udp = proto == 17;
            let th = if udp {
                8
            } else {
                (usize::from(template[t + 12] >> 4) * 4).clamp(20, 60)
            };
            let Some(head) = template.get(..t + th) else {
                return;
            };
            let mut seq = u32::from_be_bytes([head[t + 4], head[t + 5], head[t + 6], head[t + 7]]);
            let mut packets = Vec::new();
            let mut i = 0u16;
            while let [len, spoil, tail @ ..] = steps {
                let payload = usize::from(*len) * 8;
                let mut p = head.to_vec();
                p.extend((0..payload).map(|k| (k as u8) ^ *len));
                let total = p.len();
                if v6 {
                    p[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
                } else {
                    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
                    let id = u16::from_be_bytes([head[4], head[5]]).wrapping_add(i);
                    p[4..6].copy_from_slice(&id.to_be_bytes());
                }
                if udp {
                    p[t + 4..t + 6].copy_from_slice(&((total - t) as u16).to_be_bytes());
                } else {
                    p[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
                }
                fix(&mut p);
                if *spoil & 0x80 != 0 {
                    let at = usize::from(*spoil & 0x7f) % p.len();
                    p[at] ^= 1 << (spoil & 7);
                }
                seq = seq.wrapping_add(payload as u32);
                i = i.wrapping_add(1);
                packets.push(p);
                steps = tail;
            }
            coalesce(&packets, frame_cap, mode & 4 != 0);
        }
    }
});
