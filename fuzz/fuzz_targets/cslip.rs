//! The CSLIP decompressor (`serial::cslip::Decompressor`), on its own and behind the SLIP
//! deframer in a CSLIP `LineDecoder` with line noise.
//!
//! Input: a config byte (bit 0: a 20-byte opaque prefix per frame, as braid sends its data
//! header; bit 1: line errors after 0x00 bytes; bits 2..: slot count), a chunk length,
//! then line bytes. The same bytes, cut at every SLIP `END`, are also fed to a bare
//! decompressor as packets.
//!
//! Checks, per packet: the type reported is the one the first byte names; on error
//! nothing is appended and the decompressor tosses (except for `Tossed` itself); a plain
//! IP packet comes out unchanged; an uncompressed TCP packet comes out with its version
//! and protocol bytes restored and a valid IP header checksum; a rebuilt compressed
//! packet has a valid IP header checksum and a total length equal to its size (at most
//! 65535). For the line decoder: chunking does not change the packets or the counters,
//! and every packet is longer than the prefix.
#![no_main]

use braid_core::serial::cslip::{ip_checksum, CslipError, Decompressor, PacketType};
use braid_core::serial::{Framing, LineDecoder};
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

fn line(prefix: usize, bytes: &[u8], chunk: usize, errors: bool) -> (Vec<Vec<u8>>, String) {
    let mut ld = LineDecoder::new(Framing::Cslip, 296).with_prefix_len(prefix);
    let mut got = Vec::new();
    for piece in bytes.split_inclusive(|&b| b == 0) {
        for part in piece.chunks(chunk.max(1)) {
            ld.decode(part, &mut |p| got.push(p.to_vec()));
        }
        if errors && piece.last() == Some(&0) {
            ld.line_error();
        }
    }
    let summary = format!(
        "{:?} {:?} {:?}",
        ld.stats(),
        ld.frame_stats(),
        ld.decompressor().map(Decompressor::stats)
    );
    (got, summary)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let prefix = if data[0] & 1 != 0 { 20 } else { 0 };
    let errors = data[0] & 2 != 0;
    let slots = data[0] >> 2;
    let chunk = usize::from(data[1]);
    let bytes = &data[2..];

    let mut d = Decompressor::new(slots);
    for frame in bytes.split(|&b| b == 0xC0) {
        check_packet(&mut d, frame);
    }

    let (whole, s1) = line(prefix, bytes, usize::MAX, errors);
    let (chunked, s2) = line(prefix, bytes, chunk, errors);
    assert_eq!(whole, chunked, "chunking changed the packets");
    assert_eq!(s1, s2, "chunking changed the counters");
    for p in &whole {
        assert!(
            p.len() > prefix,
            "a packet is its prefix and a non-empty body"
        );
    }
});
