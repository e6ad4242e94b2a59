//! The offload read and write paths allocate nothing per packet: after setup, cutting
//! superframes and coalescing their segments runs with a counting allocator at zero.

use braid_core::offload::checksum;
use braid_core::offload::coalesce::{Coalescer, PushError};
use braid_core::offload::split::{read_frame, Frame};
use braid_core::offload::vnet::{self, VnetHdr};
use braid_core::offload::MAX_FRAME;

#[path = "support/counting.rs"]
mod counting;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

/// A TSO superframe of TCP over IPv4: `segments` of 1448 bytes starting at `seq`.
fn superframe(buf: &mut [u8], seq: u32, segments: usize, id: u16) -> usize {
    let payload = 1448 * segments;
    let total = 40 + payload;
    let hdr = VnetHdr {
        flags: vnet::F_NEEDS_CSUM,
        gso_type: vnet::GSO_TCPV4,
        hdr_len: 40,
        gso_size: 1448,
        csum_start: 20,
        csum_offset: 16,
    };
    hdr.emit(buf).expect("room");
    let ip = &mut buf[vnet::LEN..vnet::LEN + total];
    ip.fill(0);
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    ip[20..24].copy_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
    ip[24..28].copy_from_slice(&seq.to_be_bytes());
    ip[32] = 5 << 4;
    ip[33] = 0x10;
    ip[34] = 0x01;
    for (i, b) in ip[40..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let ps = checksum::pseudo_v4(&[10, 0, 0, 1], &[10, 0, 0, 2], 6, (20 + payload) as u16);
    ip[36..38].copy_from_slice(&ps.to_be_bytes());
    vnet::LEN + total
}

#[test]
fn split_and_coalesce_do_not_allocate() {
    let mut buf = vec![0u8; MAX_FRAME];
    let mut seg = vec![0u8; 1500];
    let mut gro = Coalescer::new(64, MAX_FRAME);
    counting::on(true);
    let before = counting::allocations();
    let (mut seq, mut id) = (0u32, 0u16);
    let (mut segments, mut frames, mut written) = (0u64, 0u64, 0usize);
    for round in 0..200 {
        let n = superframe(&mut buf, seq, 1 + round % 44, id);
        let Ok(Frame::Segments(mut s)) = read_frame(&mut buf[..n]) else {
            panic!("a superframe");
        };
        while let Some(len) = s.next_into(&mut seg).expect("segment") {
            segments += 1;
            match gro.push(&seg[..len]) {
                Ok(_) => {}
                Err(PushError::Full) => {
                    frames += gro.len() as u64;
                    written += gro.frames().map(<[u8]>::len).sum::<usize>();
                    gro.clear();
                    gro.push(&seg[..len]).expect("room after clear");
                }
                Err(PushError::TooLarge) => panic!("fits"),
            }
        }
        seq = seq.wrapping_add((1448 * (1 + round % 44)) as u32);
        id = id.wrapping_add((1 + round % 44) as u16);
    }
    frames += gro.len() as u64;
    let after = counting::allocations();
    counting::on(false);
    assert!(segments > 4000 && frames > 0 && written > 0);
    assert!(
        frames < segments / 10,
        "{frames} frames from {segments} segments"
    );
    assert_eq!(
        after - before,
        0,
        "allocations while splitting and coalescing"
    );
}
