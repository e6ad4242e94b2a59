//! The link watch's netlink parser (`braid::sys::link_watch::parse`) on any bytes: the
//! kernel's datagrams, truncated or odd. No panic; one report per link message counted,
//! each for a positive index; never more reports and malformed messages than 16-byte
//! headers fit in the input; and messages are independent: cut at the end of its first
//! message, a datagram gives the reports and counts of its two parts, in order.
#![no_main]

use braid::sys::link_watch::{parse, Parsed};
use libfuzzer_sys::fuzz_target;

fn run(data: &[u8]) -> (Vec<(u32, bool)>, Parsed) {
    let mut reports = Vec::new();
    let p = parse(data, &mut |i, c| reports.push((i, c)));
    (reports, p)
}

fuzz_target!(|data: &[u8]| {
    let (reports, p) = run(data);
    assert_eq!(p.links as usize, reports.len());
    assert!(reports.iter().all(|&(i, _)| i > 0 && i <= i32::MAX as u32));
    assert!(reports.len() + p.malformed as usize <= data.len() / 16 + 1);

    // The first message's length, rounded up to 4 as netlink aligns.
    let Some(len) = data.get(0..4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])) else {
        return;
    };
    let step = (len as usize).saturating_add(3) & !3;
    if len < 16 || step > data.len() {
        return;
    }
    let (first, p1) = run(&data[..step]);
    let (rest, p2) = run(&data[step..]);
    let joined: Vec<(u32, bool)> = first.into_iter().chain(rest).collect();
    assert_eq!(joined, reports);
    assert_eq!(p1.links + p2.links, p.links);
    assert_eq!(p1.malformed + p2.malformed, p.malformed);
});
