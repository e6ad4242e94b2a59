//! The CSLIP decompressor (`serial::cslip::Decompressor`), on its own and inside the
//! frame codec the daemon runs (`serial::FrameCodec`, CSLIP) with line noise.
//!
//! Input: a config byte (bit 0: bond mode, frames are braid datagrams whose data header,
//! full or short, comes before the compressed packet; else `raw-ip`, frames are the
//! compressed packets; bit 1: line errors after 0x00 bytes; bits 2..: slot count), a
//! chunk length, then line bytes. The same bytes, cut at every SLIP `END`, are also fed to a bare
//! decompressor as packets.
//!
//! Checks, per packet: the type reported is the one the first byte names; on error
//! nothing is appended and the decompressor tosses (except for `Tossed` itself); a plain
//! IP packet comes out unchanged; an uncompressed TCP packet comes out with its version
//! and protocol bytes restored and a valid IP header checksum; a rebuilt compressed
//! packet has a valid IP header checksum and a total length equal to its size (at most
//! 65535). For the frame codec: chunking does not change the datagrams or the counters,
//! every datagram has at least 3 bytes, and one `rx_frames` is counted per datagram.
#![no_main]

use braid_core::serial::cslip::{ip_checksum, CslipError, Decompressor, PacketType};
use braid_core::serial::{FrameCodec, Framing};
use libfuzzer_sys::fuzz_target;

fn check_packet(d: &mut Decompressor, frame: &[u8]) {
    let mut out = vec![0xAB, 0xCD];
    let was_tossing = d.is_tossing();
    let r = d.decompress(frame, &mut out);
    match r {
        Err(e) => {
            assert_eq!(out, [0xAB, 0xCD], "appended on error {e:?}");
            assert!(d.is_tossing(), "no toss after {e:?}");
            if e == CslipError::Tossed {
                assert!(was_tossing);
            }
        }
        Ok(ty) => {
            assert_eq!(
                Some(ty),
                frame.first().map(|&b| PacketType::from_first_byte(b))
            );
            let p = &out[2..];
            match ty {
                PacketType::Ip => assert_eq!(p, frame),
                PacketType::UncompressedTcp => {
                    assert_eq!(p.len(), frame.len());
                    assert_eq!(p[0], frame[0] & 0x4F);
                    assert_eq!(p[9], 6);
                    assert_eq!(&p[1..9], &frame[1..9]);
                    assert_eq!(&p[10..], &frame[10..]);
                    let ihl = usize::from(p[0] & 0x0F) * 4;
                    assert_eq!(ip_checksum(&p[..ihl]), 0, "bad IP checksum");
                    assert!(!d.is_tossing());
                }
                PacketType::CompressedTcp => {
                    assert!(p.len() <= 65535);
                    assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len());
                    assert_eq!(p[0] >> 4, 4);
                    let ihl = usize::from(p[0] & 0x0F) * 4;
                    assert!(ihl >= 20 && ihl <= p.len());
                    assert_eq!(ip_checksum(&p[..ihl]), 0, "bad rebuilt IP checksum");
                    assert!(!d.is_tossing());
                }
            }
        }
    }
}

fn line(bond: bool, bytes: &[u8], chunk: usize, errors: bool) -> (Vec<Vec<u8>>, String) {
    let mut codec = if bond {
        FrameCodec::new(Framing::Cslip, 296)
    } else {
        FrameCodec::raw_ip(Framing::Cslip, 296)
    };
    let mut got = Vec::new();
    for piece in bytes.split_inclusive(|&b| b == 0) {
        for part in piece.chunks(chunk.max(1)) {
            codec.decode(part, &mut |p| got.push(p.to_vec()));
        }
        if errors && piece.last() == Some(&0) {
            codec.line_error();
        }
    }
    assert_eq!(codec.counters().rx_frames, got.len() as u64);
    let summary = format!(
        "{:?} {:?} {:?}",
        codec.counters(),
        codec.frame_stats(),
        codec.decompressor().map(Decompressor::stats)
    );
    (got, summary)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let bond = data[0] & 1 != 0;
    let errors = data[0] & 2 != 0;
    let slots = data[0] >> 2;
    let chunk = usize::from(data[1]);
    let bytes = &data[2..];

    let mut d = Decompressor::new(slots);
    for frame in bytes.split(|&b| b == 0xC0) {
        check_packet(&mut d, frame);
    }

    let (whole, s1) = line(bond, bytes, usize::MAX, errors);
    let (chunked, s2) = line(bond, bytes, chunk, errors);
    assert_eq!(whole, chunked, "chunking changed the datagrams");
    assert_eq!(s1, s2, "chunking changed the counters");
    for p in &whole {
        assert!(p.len() >= 3, "a datagram of {} bytes", p.len());
    }
});
