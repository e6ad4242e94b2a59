//! The serial frame codec the daemon runs (`braid_core::serial::FrameCodec`: SLIP, SLIP6 or
//! CSLIP framing, the short data header, bond or `raw-ip` mode).
//!
//! Input: a config byte (framing, mode, CRC, chunk length), then line bytes. Checks:
//! - decoding any line bytes, in chunks, never panics, every datagram fits the frame
//!   limit (CSLIP may grow a frame by the header it rebuilds) and the counters add up;
//! - for SLIP and SLIP6, datagrams cut from the same bytes (a braid data header in front
//!   in bond mode) come out of a fresh codec exactly as they went into another.
#![no_main]

use braid_core::serial::{FrameCodec, Framing};
use braid_core::wire::{self, Header, MessageType, DATA_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

const MTU: usize = 600;

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, rest)) = data.split_first() else {
        return;
    };
    let framing = match cfg % 3 {
        0 => Framing::Slip,
        1 => Framing::Slip6,
        _ => Framing::Cslip,
    };
    let raw_ip = cfg & 0x04 != 0;
    // A bond line without keys: frames end in a CRC-32.
    let crc = !raw_ip && cfg & 0x80 != 0;
    let chunk = usize::from(cfg >> 3) + 1;
    let fresh = || {
        if raw_ip {
            FrameCodec::raw_ip(framing, MTU)
        } else if crc {
            FrameCodec::new(framing, MTU).with_crc()
        } else {
            FrameCodec::new(framing, MTU)
        }
    };

    // Any line bytes.
    let mut rx = fresh();
    let mut got = 0u64;
    for piece in rest.chunks(chunk) {
        rx.decode(piece, &mut |d: &[u8]| {
            assert!(d.len() <= 2 * MTU + 128, "datagram of {} bytes", d.len());
            got += 1;
        });
    }
    assert_eq!(
        got,
        rx.counters().rx_frames,
        "every datagram handed on is counted"
    );

    // A round trip of datagrams cut from the same bytes.
    if framing == Framing::Cslip {
        return;
    }
    let mut tx = fresh();
    let mut line = Vec::new();
    let mut sent = Vec::new();
    for (k, body) in rest.chunks(97).enumerate() {
        let datagram = if raw_ip {
            body.to_vec()
        } else {
            let mut d = vec![0u8; DATA_HEADER_LEN + body.len()];
            let h = Header {
                path: 1,
                timestamp: k as u32,
            };
            wire::emit_data_header_as(&h, MessageType::Data, k as u64, k as u32, &mut d)
                .expect("room for the header");
            d[DATA_HEADER_LEN..].copy_from_slice(body);
            d
        };
        if datagram.is_empty() {
            continue;
        }
        tx.encode(&datagram, &mut line);
        sent.push(datagram);
    }
    let mut rx = fresh();
    let mut back = Vec::new();
    for piece in line.chunks(chunk) {
        rx.decode(piece, &mut |d: &[u8]| back.push(d.to_vec()));
    }
    // SLIP drops runts (fewer than 3 bytes), as the kernel's slip.c does.
    let expected: Vec<Vec<u8>> = sent.into_iter().filter(|d| d.len() >= 3).collect();
    assert_eq!(back, expected);
});
