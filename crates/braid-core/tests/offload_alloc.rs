//! The offload read and write paths allocate nothing per packet: after setup, cutting
//! superframes and coalescing their segments runs with a counting allocator at zero.

use braid_core::offload::coalesce::{Coalescer, PushError};
use braid_core::offload::split::{read_frame, Frame};
use braid_core::offload::MAX_FRAME;

#[path = "support/counting.rs"]
mod counting;
#[path = "support/superframe.rs"]
mod superframe;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

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
        let n = superframe::tso_v4(&mut buf, seq, 1 + round % 44, id, &[], 0x10);
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
