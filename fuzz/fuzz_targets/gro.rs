//! What a path's `recvmmsg` hands the loop (`braid::sys::udp_batch::RecvBatch`): messages
//! whose length and UDP GRO stride are the kernel's word. Whatever they say (a length
//! beyond the slot, a stride of 0, 1 or longer than the message), the batch yields slices
//! of its own buffer, none longer than the stride, together exactly the bytes of each
//! message that fit its slot; nothing panics.
#![no_main]

use std::net::SocketAddr;

use braid::sys::udp_batch::{RecvBatch, SLOT_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    // Up to four messages: a 3-byte length (up to 16 M) and a 2-byte stride each, then
    // the bytes shared out.
    let mut msgs = Vec::new();
    let mut rest = data;
    while msgs.len() < 4 && rest.len() >= 5 {
        let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        let stride = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        rest = &rest[5..];
        msgs.push((len, stride));
    }
    let mut batch = RecvBatch::default();
    // All messages in one batch: together exactly what fits the slots.
    let messages: Vec<(SocketAddr, &[u8], usize, usize)> = msgs
        .iter()
        .map(|&(len, stride)| (addr, rest, len, stride))
        .collect();
    batch.fill(&messages);
    let total: usize = batch.datagrams().map(|(_, d)| d.len()).sum();
    let want: usize = msgs.iter().map(|&(len, _)| len.min(SLOT_BYTES)).sum();
    assert_eq!(total, want);
    // One at a time: no datagram longer than its stride (a stride of 0 means one).
    for &(len, stride) in &msgs {
        batch.fill(&[(addr, rest, len, stride)]);
        for (_, d) in batch.datagrams() {
            assert!(stride == 0 || d.len() <= stride, "{} > {stride}", d.len());
        }
    }
});
