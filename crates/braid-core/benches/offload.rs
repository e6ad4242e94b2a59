//! CPU cost of the TUN offloads per packet: the Internet checksum of a 1500-byte packet,
//! cutting a 64 KB TCP superframe (45 segments of 1448 bytes, IPv4, timestamps) into
//! packets, and merging those 45 packets back into one frame. Divide the split and
//! coalesce figures by 45 for ns per segment.
//!
//! Run: `cargo bench -p braid-core --bench offload`

use braid_core::offload::checksum;
use braid_core::offload::coalesce::Coalescer;
use braid_core::offload::split::{read_frame, Frame};
use braid_core::offload::vnet::{self, VnetHdr};
use braid_core::offload::MAX_FRAME;

fn main() {
    divan::main();
}

const MSS: usize = 1448;
const SEGMENTS: usize = 45;

/// A TSO superframe as the kernel hands it out: virtio header, IPv4, TCP with
/// timestamps, 45 * 1448 bytes of payload, the TCP checksum field the pseudo-header sum.
fn superframe() -> Vec<u8> {
    let payload = MSS * SEGMENTS;
    let total = 20 + 32 + payload;
    let mut p = vec![0u8; vnet::LEN + total];
    let hdr = VnetHdr {
        flags: vnet::F_NEEDS_CSUM,
        gso_type: vnet::GSO_TCPV4,
        hdr_len: 52,
        gso_size: MSS as u16,
        csum_start: 20,
        csum_offset: 16,
    };
    hdr.emit(&mut p).expect("room for the header");
    let ip = &mut p[vnet::LEN..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    ip[20..24].copy_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
    ip[32] = 8 << 4;
    ip[33] = 0x18;
    ip[34] = 0x01;
    ip[40..52].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9]);
    for (i, b) in ip[52..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let ps = checksum::pseudo_v4(&[10, 0, 0, 1], &[10, 0, 0, 2], 6, (32 + payload) as u16);
    ip[36..38].copy_from_slice(&ps.to_be_bytes());
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
