//! A bond carrying Ethernet frames ([`Frames::Ethernet`]): what it reads as IP it finds
//! inside the frame, and frames without IP pass untouched.

use super::*;
use crate::frames::test_frames::{arp, ip_frame, lookalike};
use crate::shape::{ClassId, ClassSpec, FilterSpec, Prefix, ShapeSpec, Shaper};
use crate::sim::{tcp_packet, udp_packet, Pair};

const MBIT: u64 = 1_000_000;

fn frames_bond() -> Bond {
    Bond::new(
        BondConfig {
            frames: Frames::Ethernet,
            ..BondConfig::default()
        },
        Instant::ZERO,
    )
}

/// The shaper on a frame bond classifies a frame by its IP packet (with or without a
/// tag), and puts a frame without IP in the default class, also one whose bytes read as
/// a matching IPv4 packet from its first byte (the same bytes from a TUN would match).
#[test]
fn the_shaper_classifies_frames_by_their_ip_packet() {
    let id = |minor| ClassId::new(1, minor);
    let mut root = ClassSpec::new(id(1), None, 10 * MBIT);
    root.ceil_bps = Some(10 * MBIT);
    let spec = ShapeSpec {
        link_bps: Some(10 * MBIT),
        default_class: Some(id(0x13)),
        r2q: 10,
        classes: vec![
            root,
            ClassSpec::new(id(0x10), Some(id(1)), 5 * MBIT),
            ClassSpec::new(id(0x13), Some(id(1)), 5 * MBIT),
        ],
        filters: vec![FilterSpec {
            dst: Prefix::parse("10.200.0.2/32").ok(),
            class: id(0x10),
            ..FilterSpec::default()
        }],
    };
    let backlog = |b: &Bond, minor| {
        let stats = b.shaper().expect("a shaper").stats(Instant::ZERO);
        stats
            .iter()
            .find(|c| c.id == id(minor))
            .map(|c| c.backlog_packets)
    };
    let ip = udp_packet(1, 200, 1, 2);
    for (frames, packets, want) in [
        (
            Frames::Ethernet,
            vec![
                ip_frame(&ip, false),
                ip_frame(&ip, true),
                arp(false),
                lookalike(&ip),
            ],
            (2, 2),
        ),
        (Frames::Ip, vec![ip.clone(), lookalike(&ip)], (2, 0)),
    ] {
        let mut b = Bond::new(
            BondConfig {
                frames,
                ..BondConfig::default()
            },
            Instant::ZERO,
        );
        let (shaper, _) = Shaper::new(&spec, 0, 1500, Instant::ZERO).expect("the spec");
        b.set_shaper(Instant::ZERO, Some(shaper), false);
        // No path is up: the shaper keeps what it classified.
        for p in &packets {
            b.handle_tun_packet(Instant::ZERO, p);
        }
        assert_eq!(
            (backlog(&b, 0x10), backlog(&b, 0x13)),
            (Some(want.0), Some(want.1)),
            "{frames:?}"
        );
    }
}

/// The bond's size limits for frames: the MTU plus a header and one tag, and at least a
/// header; what is outside them is a counted drop.
#[test]
fn frame_lengths() {
    let mut b = frames_bond();
    let mtu = b.config().mtu;
    for len in [0, 1, 13, mtu + 19, mtu + 100] {
        b.handle_tun_packet(Instant::ZERO, &vec![0; len]);
    }
    assert_eq!(b.status().counters.drop_too_big, 5);
    // No path: the rest reach the scheduler and are dropped there.
    for len in [14, 60, mtu + 14, mtu + 18] {
        b.handle_tun_packet(Instant::ZERO, &vec![0; len]);
    }
    assert_eq!(b.status().counters.drop_too_big, 5);
    assert_eq!(b.status().counters.drop_no_path, 4);
}

/// A TCP segment sent again in a frame while the first copy waits in a path's queue is
/// dropped, as from a TUN; ARP frames repeated are all sent.
#[test]
fn retransmitted_segments_in_frames_are_dropped_once_queued() {
    let mut pair = Pair::<Bond>::new(BondConfig {
        frames: Frames::Ethernet,
        ..BondConfig::default()
    });
    pair.add_path(
        PathConfig {
            name: "slow".into(),
            bps: 100_000,
            ..PathConfig::default()
        },
        crate::emu::EmuConfig {
            rate_bps: 100_000,
            ..Default::default()
        },
    );
    pair.run_until(Instant::from_millis(1000), |_| {});
    let seg = tcp_packet(1000, 1000, 40000, 0x10);
    let t = pair.now;
    for vlan in [false, true] {
        for _ in 0..2 {
            pair.a.handle_tun_packet(t, &ip_frame(&seg, vlan));
            pair.a.handle_tun_packet(t, &arp(vlan));
        }
    }
    // The first copy (untagged) is still queued: the three others are the same segment.
    assert_eq!(pair.a.status().counters.drop_redundant_retransmit, 3);
    pair.run_until(t + core::time::Duration::from_secs(2), |_| {});
    assert_eq!(pair.delivered_b.len(), 5, "one segment, four ARP frames");
}
