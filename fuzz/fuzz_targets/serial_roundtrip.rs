//! Encode → decode round trips over a serial line through the frame codec the daemon
//! runs (`braid_core::serial::FrameCodec`), in both of its modes.
//!
//! SLIP and SLIP6 carry arbitrary packets; CSLIP carries well-formed IPv4 packets built
//! from the input (TCP on up to 20 connections, so slots get reused, with options,
//! flags, urgent data and arbitrary sequence/ack/window/id changes; some UDP and some
//! fragments). In `raw-ip` mode each frame is the packet; in bond mode each frame is a
//! braid data datagram carrying the packet (the 7-byte short header most of the time,
//! the IP packet after it compressed with CSLIP), with or without the CRC-32 of a line
//! without keys. Frames may be lost: the frame is not delivered and the line reports an
//! error, as a UART does.
//!
//! Checks: without losses every packet comes out exactly as it went in (SLIP/SLIP6: every
//! packet longer than 2 bytes). With losses, nothing wrong is delivered: a delivered
//! packet equals the one sent, unless it belongs to a TCP connection whose compression
//! state a loss, or a compressed packet the decompressor tossed after one, has put out of
//! step (RFC 1144 leaves those to the TCP checksum) and that has not been resynchronised
//! by an uncompressed packet since.
#![no_main]

use std::collections::HashSet;

use arbitrary::Arbitrary;
use braid_core::serial::cslip::{ip_checksum, PacketType};
use braid_core::serial::{FrameCodec, Framing};
use braid_core::wire::{self, Header, MessageType, DATA_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Tcp {
    conn: u8,
    seq_delta: u32,
    ack_delta: u32,
    window: u16,
    flags: u8,
    urgent: u16,
    id_delta: u16,
    tos: u8,
    ip_opt_words: u8,
    tcp_opt_words: u8,
    payload: u16,
    fill: u8,
}

#[derive(Arbitrary, Debug)]
enum Pkt {
    Tcp(Tcp),
    /// UDP (sent as plain IP).
    Udp {
        conn: u8,
        payload: u16,
        fill: u8,
    },
    /// A TCP fragment (sent as plain IP).
    Fragment {
        conn: u8,
        offset: u16,
        payload: u16,
    },
    /// Any bytes (SLIP and SLIP6 only).
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// `% 3`: the framing; bit 7: the CRC (bond mode only).
    framing: u8,
    /// Bond mode (braid data datagrams), else `raw-ip` (IP packets alone).
    prefix: bool,
    /// Lose the frame of packet `i` when bit `i % 64` is set.
    losses: u64,
    packets: Vec<Pkt>,
}

#[derive(Clone, Copy, Default)]
struct Conn {
    seq: u32,
    ack: u32,
    id: u16,
}

fn addrs(conn: u8) -> ([u8; 4], [u8; 4], u16, u16) {
    let c = conn % 20;
    (
        [10, 0, 0, 1 + c % 3],
        [10, 1, 0, 1],
        1000 + u16::from(c),
        80,
    )
}

fn ipv4(
    proto: u8,
    conn: u8,
    id: u16,
    tos: u8,
    frag: u16,
    opt_words: usize,
    body: &[u8],
) -> Vec<u8> {
    let (src, dst, _, _) = addrs(conn);
    let hlen = 20 + opt_words * 4;
    let total = hlen + body.len();
    let mut p = vec![0u8; hlen];
    p[0] = 0x40 | (hlen / 4) as u8;
    p[1] = tos;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&id.to_be_bytes());
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    p[8] = 64;
    p[9] = proto;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    for (i, b) in p[20..].iter_mut().enumerate() {
        *b = if i % 4 == 3 { 0 } else { 1 }; // NOPs and EOLs
    }
    let sum = ip_checksum(&p);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(body);
    p
}

fn build(pkt: &Pkt, conns: &mut [Conn; 20], cslip: bool) -> Option<(Vec<u8>, Option<u8>)> {
    Some(match pkt {
        Pkt::Tcp(t) => {
            let c = &mut conns[usize::from(t.conn % 20)];
            c.seq = c.seq.wrapping_add(t.seq_delta);
            c.ack = c.ack.wrapping_add(t.ack_delta);
            c.id = c.id.wrapping_add(t.id_delta);
            let (_, _, sport, dport) = addrs(t.conn);
            let opt = usize::from(t.tcp_opt_words % 11);
            let mut th = vec![0u8; 20 + opt * 4];
            th[0..2].copy_from_slice(&sport.to_be_bytes());
            th[2..4].copy_from_slice(&dport.to_be_bytes());
            th[4..8].copy_from_slice(&c.seq.to_be_bytes());
            th[8..12].copy_from_slice(&c.ack.to_be_bytes());
            th[12] = ((5 + opt) as u8) << 4;
            th[13] = t.flags & 0x3F;
            th[14..16].copy_from_slice(&t.window.to_be_bytes());
            th[16..18].copy_from_slice(&[t.fill, t.fill ^ 0x5A]);
            th[18..20].copy_from_slice(&t.urgent.to_be_bytes());
            for b in th[20..].iter_mut() {
                *b = 1;
            }
            th.extend(std::iter::repeat_n(t.fill, usize::from(t.payload % 1400)));
            let ip_opt = usize::from(t.ip_opt_words % 11);
            let id = c.id;
            (
                ipv4(6, t.conn, id, t.tos, 0x4000, ip_opt, &th),
                Some(t.conn % 20),
            )
        }
        Pkt::Udp {
            conn,
            payload,
            fill,
        } => {
            let body = vec![*fill; 8 + usize::from(payload % 1400)];
            (ipv4(17, *conn, 7, 0, 0, 0, &body), None)
        }
        Pkt::Fragment {
            conn,
            offset,
            payload,
        } => {
            let body = vec![0x33; 20 + usize::from(payload % 1400)];
            let frag = 0x2000 | (offset & 0x1FFF);
            (ipv4(6, *conn, 9, 0, frag, 0, &body), None)
        }
        Pkt::Raw(bytes) => {
            if cslip {
                return None;
            }
            (bytes[..bytes.len().min(1500)].to_vec(), None)
        }
    })
}

fuzz_target!(|input: Input| {
    let framing = match input.framing % 3 {
        0 => Framing::Slip,
        1 => Framing::Slip6,
        _ => Framing::Cslip,
    };
    let cslip = framing == Framing::Cslip;
    let bond = input.prefix;
    let crc = bond && input.framing & 0x80 != 0;
    let fresh = || {
        if !bond {
            FrameCodec::raw_ip(framing, 1600)
        } else if crc {
            FrameCodec::new(framing, 1600).with_crc()
        } else {
            FrameCodec::new(framing, 1600)
        }
    };
    let (mut enc, mut dec) = (fresh(), fresh());
    let mut conns = [Conn::default(); 20];
    let mut desynced: HashSet<u8> = HashSet::new();
    let mut line = Vec::new();

    for (i, pkt) in input.packets.iter().take(128).enumerate() {
        let Some((packet, conn)) = build(pkt, &mut conns, cslip) else {
            continue;
        };
        // Bond mode: a data datagram (seq, path_seq and timestamp counting up, as a
        // path's do) with the packet after its header.
        let want = if bond {
            let mut d = vec![0u8; DATA_HEADER_LEN + packet.len()];
            let h = Header {
                path: 1,
                timestamp: i as u32 * 1000,
            };
            wire::emit_data_header_as(&h, MessageType::Data, i as u64, i as u32, &mut d)
                .expect("room for the header");
            d[DATA_HEADER_LEN..].copy_from_slice(&packet);
            d
        } else {
            packet
        };
        line.clear();
        let ty = enc.encode(&want, &mut line);
        let lost = input.losses & (1 << (i % 64)) != 0;
        if lost {
            dec.line_error();
            if let (Some(c), Some(PacketType::CompressedTcp | PacketType::UncompressedTcp)) =
                (conn, ty)
            {
                desynced.insert(c);
            }
            continue;
        }
        let mut got: Vec<Vec<u8>> = Vec::new();
        dec.decode(&line, &mut |p| got.push(p.to_vec()));
        if input.losses == 0 {
            if want.len() > 2 {
                assert_eq!(got, vec![want], "packet {i} ({ty:?}) did not round-trip");
            } else {
                assert!(got.is_empty());
            }
            continue;
        }
        assert!(got.len() <= 1);
        let Some(p) = got.first() else {
            // Not lost but not delivered either: after a line error the decompressor
            // tosses compressed packets until one names its connection (RFC 1144's
            // toss-until-explicit-id), and in bond mode a short-header frame is dropped
            // while the receiver has no full header to rebuild it from (the full one was
            // lost). The encoder applied that packet and the decoder did not, so the
            // connection is out of step until an uncompressed packet, as after a loss.
            if let (Some(c), Some(PacketType::CompressedTcp | PacketType::UncompressedTcp)) =
                (conn, ty)
            {
                desynced.insert(c);
            }
            continue;
        };
        let c = conn.filter(|c| desynced.contains(c));
        if c.is_none() {
            assert_eq!(*p, want, "packet {i} ({ty:?}) delivered wrong after a loss");
        }
        if let (Some(c), Some(PacketType::UncompressedTcp)) = (conn, ty) {
            desynced.remove(&c);
        }
    }
});
