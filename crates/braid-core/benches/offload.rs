//! CPU cost of the TUN offloads per packet: the Internet checksum of a 1500-byte packet,
//! cutting a 64 KB TCP superframe (45 segments of 1448 bytes, IPv4, timestamps) into
//! packets, and merging those 45 packets back into one frame. Divide the split and
//! coalesce figures by 45 for ns per segment.
//!
//! Run: `cargo bench -p braid-core --bench offload`

use braid_core::offload::checksum;
use braid_core::offload::coalesce::Coalescer;
use braid_core::offload::split::{read_frame, Frame};
use braid_core::offload::MAX_FRAME;

fn main() {
    divan::main();
}

#[path = "../tests/support/superframe.rs"]
mod support;

const SEGMENTS: usize = 45;

/// A TSO superframe as the kernel hands it out: IPv4, TCP with timestamps (ACK|PSH),
/// 45 × 1448 bytes of payload.
fn superframe() -> Vec<u8> {
    let mut p = vec![0u8; MAX_FRAME];
    let ts = [1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9];
    let n = support::tso_v4(&mut p, 0, SEGMENTS, 0, &ts, 0x18);
    p.truncate(n);
    p
}

fn segments() -> Vec<Vec<u8>> {
    let mut f = superframe();
    let mut out = Vec::new();
    let mut seg = vec![0u8; 1500];
    if let Ok(Frame::Segments(mut s)) = read_frame(&mut f) {
        while let Ok(Some(n)) = s.next_into(&mut seg) {
            out.push(seg[..n].to_vec());
        }
    }
    assert_eq!(out.len(), SEGMENTS);
    out
}

#[divan::bench]
fn checksum_1500(b: divan::Bencher) {
    let data = vec![0xa5u8; 1500];
    b.bench(|| checksum::checksum(divan::black_box(&data), 0));
}

#[divan::bench]
fn split_64k_superframe(b: divan::Bencher) {
    // A superframe is only read (a plain packet's checksum is completed in place), so
    // the same buffer serves every iteration.
    let mut buf = superframe();
    let mut seg = vec![0u8; 1500];
    b.bench_local(|| {
        let mut n = 0;
        if let Ok(Frame::Segments(mut s)) = read_frame(&mut buf) {
            while let Ok(Some(len)) = s.next_into(&mut seg) {
                n += len;
            }
        }
        n
    });
}

#[divan::bench]
fn coalesce_45_segments(b: divan::Bencher) {
    let segs = segments();
    let mut c = Coalescer::new(4, MAX_FRAME);
    b.bench_local(|| {
        c.clear();
        for s in &segs {
            let _ = c.push(s);
        }
        c.len()
    });
}
