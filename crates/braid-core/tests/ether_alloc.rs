//! After setup, the Ethernet bond allocates nothing per frame: bonds of every mode carry
//! frames both ways, run their timers (LACP, the ARP monitor), fail over and announce,
//! while a counting allocator watches.
//!
//! The counter counts only while this test's thread turns it on.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use braid_core::ether::{ArpMonitor, EtherBond, EtherConfig, MemberConfig, MemberId, Mode};
use braid_core::lacp::Rate;
use braid_core::Instant;

#[path = "support/counting.rs"]
mod counting;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

fn bond(node: u8, mode: Mode) -> EtherBond {
    let mut cfg = EtherConfig::new([2, 0, 0, 0, node, 0], mode);
    cfg.lacp.rate = Rate::Fast;
    cfg.announce.ipv4 = vec![Ipv4Addr::new(10, 0, 0, node)];
    cfg.announce.ipv6 = vec![Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(node))];
    cfg.announce.count = 2;
    if mode != Mode::Lacp {
        cfg.arp_monitor = Some(ArpMonitor {
            interval: Duration::from_millis(100),
            targets: vec![Ipv4Addr::new(10, 0, 0, 9)],
            source: Ipv4Addr::new(10, 0, 0, node),
        });
    }
    let mut b = EtherBond::new(cfg).expect("config");
    for i in 0..3 {
        b.add_member(
            Instant::ZERO,
            MemberConfig {
                mac: [2, 0, 0, 1, node, i],
                link_up: true,
            },
        );
    }
    b
}

fn frame(i: usize, src: u8) -> [u8; 80] {
    let mut f = [0u8; 80];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 9, 9]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, src, 0]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..34].copy_from_slice(&[
        0x45, 0, 0, 66, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    f[34..36].copy_from_slice(&(40000 + (i % 512) as u16).to_be_bytes());
    f
}

/// One 1 ms step of a pair: a frame each way, timers, control frames carried across
/// (member i to member i), events drained. Every 500 ms member 0 goes down or comes back (active-backup fails over and announces).
fn step(pair: &mut [EtherBond; 2], now: Instant, i: usize, buf: &mut [u8; 1518]) {
    for (node, b) in pair.iter_mut().enumerate() {
        let _ = b.transmit(now, &frame(i, node as u8 + 1));
        let _ = b.receive(now, MemberId((i % 3) as u16), &frame(i, 2 - node as u8 + 1));
        b.handle_timeout(now);
    }
    if i % 500 == 250 {
        for b in pair.iter_mut() {
            b.set_link(now, MemberId(0), i % 1000 != 250);
        }
    }
    for node in 0..2 {
        while let Some((m, n)) = pair[node].poll_transmit(now, buf) {
            let other = &mut pair[1 - node];
            let _ = other.receive(now, m, &buf[..n]);
        }
    }
    for b in pair.iter_mut() {
        while b.poll_event().is_some() {}
    }
}

#[test]
fn carrying_a_frame_allocates_nothing_after_setup() {
    for mode in [
        Mode::RoundRobin,
        Mode::ActiveBackup,
        Mode::Xor,
        Mode::Broadcast,
        Mode::Lacp,
    ] {
        let mut pair = [bond(1, mode), bond(2, mode)];
        let mut buf = [0u8; 1518];
        let mut now = Instant::ZERO;
        // Warm-up: 3 s (LACP aggregates in about 2).
        for i in 0..3000 {
            now += Duration::from_millis(1);
            step(&mut pair, now, i, &mut buf);
        }
        let before = counting::allocations();
        counting::on(true);
        for i in 3000..8000 {
            now += Duration::from_millis(1);
            step(&mut pair, now, i, &mut buf);
        }
        counting::on(false);
        let allocs = counting::allocations() - before;
        let s = pair[0].status();
        assert!(
            s.members.iter().map(|m| m.tx_frames).sum::<u64>() > 1000,
            "{mode:?}: traffic was carried"
        );
        assert!(
            s.members.iter().map(|m| m.rx_frames).sum::<u64>() > 1000,
            "{mode:?}: frames were delivered"
        );
        assert_eq!(allocs, 0, "{mode:?}: {allocs} allocations in 5000 steps");
    }
}
