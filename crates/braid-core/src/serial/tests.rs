//! Property tests across the framings and the line glue.

use super::testutil::{data_datagram, Tcp, ACK, PSH, URG};
use super::*;
use proptest::prelude::*;

fn decode_chunks<F: FnMut(&[u8], &mut dyn FnMut(&[u8]))>(
    wire: &[u8],
    chunk: usize,
    mut feed: F,
) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    for c in wire.chunks(chunk.max(1)) {
        feed(c, &mut |f: &[u8]| got.push(f.to_vec()));
    }
    got
}

/// One step of a generated TCP conversation.
#[derive(Clone, Debug)]
struct Step {
    conn: u8,
    reverse: bool,
    len: u16,
    kind: u8,
    r: u16,
}

fn steps(max_conns: u8, n: usize) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            0..max_conns,
            any::<bool>(),
            0u16..400,
            any::<u8>(),
            any::<u16>(),
        )
            .prop_map(|(conn, reverse, len, kind, r)| Step {
                conn,
                reverse,
                len,
                kind,
                r,
            }),
        1..n,
    )
}

/// Turns steps into packets: each connection has two directions with their own seq,
/// ack, window and options; each host has its own IP id counter. Mostly ordinary traffic
/// (data, acks, echoes), sometimes retransmissions, URG, PSH, TTL/TOS/option changes,
/// SYN/FIN, big jumps.
fn conversation(steps: &[Step]) -> Vec<(bool, Vec<u8>)> {
    #[derive(Clone)]
    struct Dir {
        seq: u32,
        win: u16,
        urg: u16,
        ttl: u8,
        tos: u8,
        tcpopt: Vec<u8>,
        last_len: u32,
    }
    let mut dirs: std::collections::HashMap<(u8, bool), Dir> = Default::default();
    let mut ids = [0u16; 2];
    let mut out = Vec::new();
    for s in steps {
        let key = (s.conn, s.reverse);
        let peer_seq = dirs.get(&(s.conn, !s.reverse)).map_or(0, |d| d.seq);
        let d = dirs.entry(key).or_insert_with(|| Dir {
            seq: u32::from(s.r) << 8,
            win: 16384,
            urg: 0,
            ttl: 64,
            tos: 0,
            tcpopt: Vec::new(),
            last_len: 0,
        });
        let host = usize::from(s.reverse);
        let (a, b) = ([10, 0, 0, 1], [10, 0, s.conn, 2]);
        let (src, dst, sport, dport) = if s.reverse {
            (b, a, 80, 1000 + u16::from(s.conn))
        } else {
            (a, b, 1000 + u16::from(s.conn), 80)
        };
        let mut p = Tcp::new(src, sport, dst, dport);
        p.flags = ACK;
        let mut len = u32::from(s.len);
        match s.kind % 32 {
            0 => p.flags |= URG,
            1 => d.seq = d.seq.wrapping_sub(d.last_len), // retransmission
            2 => d.ttl = d.ttl.wrapping_sub(1),
            3 => d.tos ^= 0x10,
            4 => d.tcpopt = vec![1, 1, 8, 10, 0, 0, (s.r >> 8) as u8, s.r as u8, 0, 0, 0, 7],
            5 => d.tcpopt.clear(),
            6 => d.seq = d.seq.wrapping_add(0x12345), // big jump
            7 => p.flags |= 0x02,                     // SYN
            8 => p.flags |= 0x01,                     // FIN
            9 => d.win = s.r,
            10 => ids[host] = ids[host].wrapping_add(s.r),
            11 => d.urg = s.r,           // pointer changes without URG
            12..=19 => len = 0,          // pure acks
            20..=23 => len = len.min(8), // interactive
            _ => {}
        }
        if s.kind & 0x80 != 0 {
            p.flags |= PSH;
        }
        if p.flags & URG != 0 {
            d.urg = s.r % 64;
        }
        ids[host] = ids[host].wrapping_add(1);
        p.id = ids[host];
        p.seq = d.seq;
        p.ack = peer_seq;
        p.win = d.win;
        p.urg = d.urg;
        p.ttl = d.ttl;
        p.tos = d.tos;
        p.tcpopt = d.tcpopt.clone();
        p.payload = (0..len).map(|i| (i as u8) ^ s.conn).collect();
        d.seq = d.seq.wrapping_add(len);
        d.last_len = len;
        if s.kind & 0x40 != 0 {
            d.win = d.win.wrapping_sub(u16::from(s.kind));
        }
        out.push((s.reverse, p.build()));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn slip_any_packets_round_trip(
        pkts in prop::collection::vec(prop::collection::vec(any::<u8>(), 3..300), 0..20),
        chunk in 1usize..64,
    ) {
        let mut wire = Vec::new();
        for p in &pkts {
            slip::encode(p, &mut wire);
        }
        let mut d = slip::Decoder::new(SL_MTU);
        let got = decode_chunks(&wire, chunk, |c, f| d.decode(c, &mut |x| f(x)));
        prop_assert_eq!(got, pkts);
    }

    #[test]
    fn slip6_any_packets_round_trip(
        pkts in prop::collection::vec(prop::collection::vec(any::<u8>(), 3..300), 0..20),
        chunk in 1usize..64,
    ) {
        let mut wire = Vec::new();
        for p in &pkts {
            slip6::encode(p, &mut wire);
        }
        prop_assert!(wire.iter().all(|b| (0x30..=0x70).contains(b)));
        let mut d = slip6::Decoder::new(SL_MTU);
        let got = decode_chunks(&wire, chunk, |c, f| d.decode(c, &mut |x| f(x)));
        prop_assert_eq!(got, pkts);
    }

    #[test]
    fn noise_never_panics_and_decoders_resynchronise(
        noise in prop::collection::vec(any::<u8>(), 0..2000),
        frame in prop::collection::vec(any::<u8>(), 3..200),
        chunk in 1usize..97,
    ) {
        // SLIP: noise, then a frame (its leading END ends whatever the noise started).
        let mut wire = noise.clone();
        slip::encode(&frame, &mut wire);
        let mut d = slip::Decoder::with_max_frame(256);
        let got = decode_chunks(&wire, chunk, |c, f| d.decode(c, &mut |x| f(x)));
        prop_assert_eq!(got.last(), Some(&frame));

        let mut wire = noise.clone();
        slip6::encode(&frame, &mut wire);
        let mut d = slip6::Decoder::with_max_frame(256);
        let got = decode_chunks(&wire, chunk, |c, f| d.decode(c, &mut |x| f(x)));
        prop_assert_eq!(got.last(), Some(&frame));

        // Noise straight into the decompressor never panics.
        let mut dc = Decompressor::default();
        let mut out = Vec::new();
        for piece in noise.chunks(chunk) {
            let _ = dc.decompress(piece, &mut out);
        }
    }

    #[test]
    fn cslip_line_resynchronises_after_noise(
        noise in prop::collection::vec(any::<u8>(), 0..2000),
        steps in steps(3, 12),
        chunk in 1usize..97,
    ) {
        let pkts: Vec<Vec<u8>> = conversation(&steps).into_iter().map(|(_, p)| p).collect();
        let mut enc = FrameCodec::raw_ip(Framing::Cslip, 1500);
        let mut wire = noise.clone();
        for p in &pkts {
            enc.encode(p, &mut wire);
        }
        let mut dec = FrameCodec::raw_ip(Framing::Cslip, 1500);
        let got = decode_chunks(&wire, chunk, |c, f| dec.decode(c, &mut |x| f(x)));
        prop_assert!(got.len() >= pkts.len());
        prop_assert_eq!(&got[got.len() - pkts.len()..], &pkts[..]);
    }

    /// RFC 1144 round trip: a generated conversation over many connections (more than the
    /// 16 slots), both directions, each direction with its own compressor/decompressor,
    /// comes back byte-identical; through the frame codec as the IP packets of braid data
    /// datagrams (bond mode: the 20-byte data header, short most of the time, in front).
    #[test]
    fn cslip_conversation_round_trips(steps in steps(24, 300), compress_cid in any::<bool>()) {
        let pkts = conversation(&steps);
        let mut comp = [Compressor::default(), Compressor::default()];
        let mut dec = [Decompressor::default(), Decompressor::default()];
        for c in &mut comp {
            c.set_compress_cid(compress_cid);
        }
        let mut line = [FrameCodec::new(Framing::Cslip, 1500), FrameCodec::new(Framing::Cslip, 1500)];
        let mut rx = [FrameCodec::new(Framing::Cslip, 1500), FrameCodec::new(Framing::Cslip, 1500)];
        let (mut cbuf, mut dbuf, mut wire) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (rev, p)) in pkts.iter().enumerate() {
            let k = usize::from(*rev);
            cbuf.clear();
            dbuf.clear();
            comp[k].compress(p, &mut cbuf);
            let r = dec[k].decompress(&cbuf, &mut dbuf);
            prop_assert!(r.is_ok(), "packet {} refused: {:?}", i, r);
            prop_assert_eq!(&dbuf, p, "packet {} differs", i);

            let datagram = data_datagram(i as u64, p);
            wire.clear();
            line[k].encode(&datagram, &mut wire);
            let mut got = Vec::new();
            rx[k].decode(&wire, &mut |x| got.push(x.to_vec()));
            prop_assert_eq!(got.len(), 1);
            prop_assert_eq!(&got[0], &datagram);
        }
    }

    /// One conversation spread over three lines at random, each line with its own CSLIP
    /// state (as braid does): every packet comes back byte-identical.
    #[test]
    fn cslip_flow_split_over_lines_round_trips(
        steps in steps(4, 200),
        lines in prop::collection::vec(0usize..3, 200),
    ) {
        let pkts = conversation(&steps);
        let mut tx: Vec<FrameCodec> =
            (0..6).map(|_| FrameCodec::raw_ip(Framing::Cslip, 1500)).collect();
        let mut rx: Vec<FrameCodec> =
            (0..6).map(|_| FrameCodec::raw_ip(Framing::Cslip, 1500)).collect();
        let mut wire = Vec::new();
        for (i, (rev, p)) in pkts.iter().enumerate() {
            let k = lines[i] * 2 + usize::from(*rev);
            wire.clear();
            tx[k].encode(p, &mut wire);
            let mut got = Vec::new();
            rx[k].decode(&wire, &mut |x| got.push(x.to_vec()));
            prop_assert_eq!(got.len(), 1, "packet {} lost", i);
            prop_assert_eq!(&got[0], p, "packet {} differs", i);
        }
    }

    /// A compressed packet lost on the line (a byte error inside its frame): the
    /// decompressor drops everything with an implicit id until a packet names its
    /// connection; nothing wrong is ever delivered (one connection, so no stale slot).
    #[test]
    fn lost_compressed_packet_tosses_until_explicit_id(
        n in 4usize..40, lose in 1usize..40, resend_after in 1usize..10,
    ) {
        let lose = lose % (n - 1) + 1;
        let mut enc = FrameCodec::raw_ip(Framing::Cslip, 1500);
        let mut dec = FrameCodec::raw_ip(Framing::Cslip, 1500);
        let mut p = Tcp::new([1, 2, 3, 4], 99, [5, 6, 7, 8], 22);
        p.payload = vec![7; 10];
        let mut delivered = Vec::new();
        let mut tossed_from = None;
        let mut seq = 0u32;
        for i in 0..n + resend_after + 3 {
            p.id = i as u16;
            // After the loss the sender's TCP times out and retransmits from there.
            if tossed_from.is_some() && i == lose + resend_after {
                seq = 10 * lose as u32;
            }
            p.seq = seq;
            seq += 10;
            let pkt = p.build();
            let mut wire = Vec::new();
            let ty = enc.encode(&pkt, &mut wire);
            if i == lose {
                prop_assert_eq!(ty, Some(PacketType::CompressedTcp));
                // A parity error inside the frame.
                dec.decode(&wire[..3], &mut |_| {});
                dec.line_error();
                dec.decode(&wire[3..], &mut |_| {});
                tossed_from = Some(i);
                continue;
            }
            let mut got = Vec::new();
            dec.decode(&wire, &mut |x| got.push(x.to_vec()));
            let tossing = tossed_from.is_some() && ty == Some(PacketType::CompressedTcp);
            if tossing {
                prop_assert!(got.is_empty(), "packet {} delivered while tossing", i);
            } else {
                prop_assert_eq!(got.len(), 1, "packet {} not delivered", i);
                prop_assert_eq!(&got[0], &pkt);
                delivered.push(i);
                if ty == Some(PacketType::UncompressedTcp) {
                    tossed_from = None;
                }
            }
        }
        prop_assert!(dec.decompressor().is_some_and(|d| !d.is_tossing()));
        prop_assert!(delivered.len() > lose);
    }
}

#[test]
fn conversation_generator_exercises_all_types() {
    // Sanity check on the generator behind the property tests: a fixed run compresses
    // most packets, sends some uncompressed and some as plain IP, uses the specials.
    let steps: Vec<Step> = (0..600u32)
        .map(|i| Step {
            conn: (i * 7 % 20) as u8,
            reverse: i % 3 == 0,
            len: (i * 37 % 300) as u16,
            kind: (i * 13 % 256) as u8,
            r: (i.wrapping_mul(2654435761) >> 16) as u16,
        })
        .collect();
    let mut comp = [Compressor::default(), Compressor::default()];
    let mut dec = [Decompressor::default(), Decompressor::default()];
    let mut specials = 0;
    let (mut cbuf, mut dbuf) = (Vec::new(), Vec::new());
    for (rev, p) in conversation(&steps) {
        let k = usize::from(rev);
        cbuf.clear();
        dbuf.clear();
        if comp[k].compress(&p, &mut cbuf) == PacketType::CompressedTcp
            && (cbuf[0] & 0x0F == cslip::SPECIAL_D || cbuf[0] & 0x0F == cslip::SPECIAL_I)
        {
            specials += 1;
        }
        dec[k].decompress(&cbuf, &mut dbuf).expect("decompresses");
        assert_eq!(dbuf, p);
    }
    let s0 = comp[0].stats();
    assert!(s0.compressed > 100, "{s0:?}");
    assert!(s0.uncompressed > 20, "{s0:?}");
    assert!(s0.tcp > 5, "{s0:?}");
    assert!(s0.misses > 16, "{s0:?}");
    assert!(specials > 10, "{specials}");
}

#[test]
fn framing_names() {
    for f in [Framing::Slip, Framing::Slip6, Framing::Cslip] {
        assert_eq!(f.as_str().parse::<Framing>(), Ok(f));
        assert_eq!(f.to_string(), f.as_str());
    }
    assert!("ppp".parse::<Framing>().is_err());
    assert_eq!(Framing::Slip.max_encoded_len(10), 22);
    assert_eq!(Framing::Slip6.max_encoded_len(3), 6);
}

#[test]
fn frame_codec_tosses_on_framing_errors() {
    let mut enc = FrameCodec::raw_ip(Framing::Cslip, SL_MTU);
    let mut dec = FrameCodec::raw_ip(Framing::Cslip, SL_MTU);
    let mut p = Tcp::new([1, 1, 1, 1], 1, [2, 2, 2, 2], 2);
    p.payload = vec![1; 5];
    let mut wire = Vec::new();
    enc.encode(&p.build(), &mut wire);
    let mut n = 0;
    dec.decode(&wire, &mut |_| n += 1);
    assert_eq!(n, 1);
    // An overrun (a frame longer than the buffer) makes it toss.
    let mut junk = vec![0xC0];
    junk.extend([0x41; 1200]);
    dec.decode(&junk, &mut |_| n += 1);
    assert!(!dec.decompressor().is_some_and(|d| d.is_tossing()));
    dec.decode(&[0xC0], &mut |_| n += 1);
    assert!(dec.decompressor().is_some_and(|d| d.is_tossing()));
    assert_eq!(dec.frame_stats().overruns, 1);
    p.seq = 5;
    p.id = 1;
    wire.clear();
    assert_eq!(
        enc.encode(&p.build(), &mut wire),
        Some(PacketType::CompressedTcp)
    );
    dec.decode(&wire, &mut |_| n += 1);
    assert_eq!(n, 1);
    assert_eq!(dec.counters().rx_cslip_errors, 1);
}
