//! Ethernet frames over UDP paths (a TAP bond across the internet): two endpoints
//! configured with [`Frames::Ethernet`] exchange frames sealed over two emulated paths in
//! virtual time, as they exchange IP packets from a TUN.

use core::time::Duration;

use super::tests::configs;
use super::*;
use crate::frames::test_frames::{arp, frame, ip_frame, lookalike};
use crate::hash::HashPolicy;
use crate::sim::{tcp_packet, udp_packet, Pair};
use crate::{Frames, SchedulerConfig};

const MBIT: u64 = 1_000_000;
/// Each path's datagram limit: a full frame goes in two parts, and SYNs are clamped.
const MAX_DATAGRAM: usize = 1200;

/// A sealed pair carrying frames over two paths (5 and 20 ms), up.
fn pair() -> Pair<Endpoint> {
    pair_with(SchedulerConfig::default())
}

fn pair_with(scheduler: SchedulerConfig) -> Pair<Endpoint> {
    let (mut a, mut b) = configs(true);
    for c in [&mut a, &mut b] {
        c.bond.frames = Frames::Ethernet;
        c.bond.scheduler = scheduler.clone();
    }
    let mut pair = Pair::of(
        Endpoint::new(a, Instant::ZERO),
        Endpoint::new(b, Instant::ZERO),
    );
    for (i, delay) in [5, 20].into_iter().enumerate() {
        let emu = EmuConfig {
            rate_bps: 20 * MBIT,
            delay: Duration::from_millis(delay),
            seed: i as u64 + 1,
            ..EmuConfig::default()
        };
        let path = PathConfig {
            name: format!("p{i}"),
            max_datagram: MAX_DATAGRAM,
            ..PathConfig::default()
        };
        pair.add_path(path, emu);
    }
    pair.run_until(Instant::from_millis(1000), |_| {});
    assert!(pair.a.sealer().established(pair.now));
    assert!(pair.a.bond().status().paths.iter().all(|p| p.state == "up"));
    pair
}

/// An IPv6/UDP packet of `len` bytes (at least 56) from ::1 to ::2 whose payload starts
/// with `seq`.
fn udp6(seq: u64, len: usize) -> Vec<u8> {
    let len = len.max(56);
    let mut p = vec![0u8; len];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[23] = 1;
    p[39] = 2;
    p[48..56].copy_from_slice(&seq.to_be_bytes());
    p
}

/// The `n`th frame of the test's mix: untagged and tagged IPv4, IPv6, ARP, and frames as
/// long as the bond allows (the MTU plus a header and a tag).
fn nth_frame(n: u64, mtu: usize) -> Vec<u8> {
    match n % 6 {
        0 => ip_frame(&udp_packet(n, 1200, 40000, 5001), false),
        1 => ip_frame(&udp_packet(n, 1000, 40001, 5001), true),
        2 => ip_frame(&udp6(n, 900), n % 12 == 2),
        3 => {
            let mut a = arp(n % 12 == 3);
            a[38..42].copy_from_slice(&(n as u32).to_be_bytes());
            a
        }
        4 => ip_frame(&udp_packet(n, mtu, 40002, 5001), true),
        _ => ip_frame(&udp_packet(n, mtu, 40003, 5001), false),
    }
}

/// Two seconds of frames at 8 Mbit/s over two paths: every frame arrives whole (bytes
/// equal), once, and in the order sent; both paths carried them; they were sealed; and
/// frames the bond may not carry (one byte over the MTU with a header and a tag, a runt
/// shorter than an Ethernet header) are counted drops.
#[test]
fn frames_cross_two_sealed_paths_whole_and_in_order() {
    let mut pair = pair();
    let mtu = pair.a.bond().config().mtu;
    let t0 = pair.now;
    let end = t0 + Duration::from_secs(2);
    let mut sent = Vec::new();
    let mut bytes = 0u64;
    pair.run_until(end, |p| {
        let due = (p.now - t0).as_micros() as u64 * 8 * MBIT / 8_000_000;
        while bytes < due {
            let f = nth_frame(sent.len() as u64, mtu);
            p.a.handle_tun_packet(p.now, &f);
            bytes += f.len() as u64;
            sent.push(f);
        }
    });
    pair.run_until(end + Duration::from_secs(1), |_| {});
    assert!(sent.len() > 1000, "{}", sent.len());
    assert_eq!(sent[4].len(), mtu + 18, "a full tagged frame");
    let got: Vec<Vec<u8>> = pair.delivered_b.iter().cloned().collect();
    assert_eq!(got.len(), sent.len(), "every frame, once");
    assert!(got == sent, "whole and in order");
    let status = pair.a.bond().status();
    assert!(
        status.paths.iter().all(|p| p.tx_packets > 100),
        "both paths"
    );
    let sealed = pair.a.sealer().tunnel_counter("sealed").expect("keys");
    assert!(sealed >= sent.len() as u64, "{sealed} sealed");
    // Too long by one byte, and shorter than a header: dropped and counted, not sent.
    let before = pair.a.bond().status().counters.drop_too_big;
    let mut long = nth_frame(4, mtu);
    long.push(0);
    let t = pair.now;
    pair.a.handle_tun_packet(t, &long);
    pair.a.handle_tun_packet(t, &long[..13]);
    pair.a.handle_tun_packet(t, &long[..14]);
    pair.run_until(t + Duration::from_secs(1), |_| {});
    assert_eq!(pair.a.bond().status().counters.drop_too_big, before + 2);
    assert_eq!(
        pair.delivered_b.len(),
        sent.len() + 1,
        "the bare header goes"
    );
}

/// An IPv4 SYN with an MSS option (1460) and its TCP checksum right.
fn syn() -> Vec<u8> {
    let mut p = tcp_packet(1, 4, 40000, 0x02);
    p[32] = 6 << 4;
    p[40..44].copy_from_slice(&[2, 4, 0x05, 0xb4]);
    let sum = tcp_sum(&p);
    p[36..38].copy_from_slice(&(!sum).to_be_bytes());
    assert_eq!(tcp_sum(&p), 0xffff);
    p
}

/// The one's-complement sum of an IPv4 TCP segment with its pseudo-header (0xffff when
/// its checksum is right).
fn tcp_sum(p: &[u8]) -> u16 {
    let tcp = &p[20..];
    let mut sum: u32 = 6 + tcp.len() as u32;
    for c in p[12..20].chunks(2).chain(tcp.chunks(2)) {
        sum += u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// A SYN in a frame is clamped in its IP packet (at offset 14, or 18 behind a tag) to
/// what fits one datagram with the frame's header, and stays valid; the frame's header is
/// untouched; a frame that carries no IP but whose bytes read as that SYN from its first
/// byte arrives unchanged.
#[test]
fn syns_in_frames_are_clamped_and_nothing_else_is_touched() {
    let mut pair = pair();
    let syn = syn();
    let sent = [
        ip_frame(&syn, false),
        ip_frame(&syn, true),
        lookalike(&syn),
        frame(0x88cc, false, &syn),
    ];
    let t = pair.now;
    for f in &sent {
        pair.a.handle_tun_packet(t, f);
    }
    pair.run_until(t + Duration::from_secs(1), |_| {});
    let got: Vec<Vec<u8>> = pair.delivered_b.iter().cloned().collect();
    assert_eq!(got.len(), 4);
    assert_eq!(pair.a.bond().status().counters.mss_clamped, 2);
    let room = MAX_DATAGRAM - crate::wire::DATA_HEADER_LEN;
    for (at, f, g) in [(14, &sent[0], &got[0]), (18, &sent[1], &got[1])] {
        assert_eq!(g[..at], f[..at], "header untouched");
        let ip = &g[at..];
        let mss = u16::from_be_bytes([ip[42], ip[43]]);
        assert_eq!(usize::from(mss), room - at - 40);
        assert_eq!(tcp_sum(ip), 0xffff, "checksum fixed");
        // The rest as it was: IP header, ports, numbers, flags, the option's kind.
        assert_eq!(ip[..36], f[at..at + 36]);
        assert_eq!(ip[38..42], f[at + 38..at + 42]);
    }
    assert_eq!(got[2], sent[2], "no IP: unchanged");
    assert_eq!(got[3], sent[3], "LLDP: unchanged");
}

/// `xor` with the `layer2` hash over frames: the source MACs spread four hosts over both
/// paths (over a TUN every packet would take one path), and each flow's frames (a host's
/// IP frames, its ARP frames: bonding's layer2 hash counts the EtherType and destination
/// too) arrive whole and in order (pinned: no waiting for the other path).
#[test]
fn xor_layer2_spreads_frames_by_their_macs() {
    let mut pair = pair_with(SchedulerConfig::Xor {
        hash: HashPolicy::Layer2,
    });
    let flow_frame = |host: u8, is_arp: bool, n: u64| {
        let mut f = if is_arp {
            arp(host.is_multiple_of(2))
        } else {
            ip_frame(&udp_packet(n, 800, 40000, 5001), host.is_multiple_of(2))
        };
        f[11] = host;
        let end = f.len();
        f[end - 8..].copy_from_slice(&n.to_be_bytes());
        f
    };
    let flows: Vec<(u8, bool)> = (0..4).flat_map(|h| [(h, false), (h, true)]).collect();
    let mut sent: Vec<Vec<Vec<u8>>> = vec![Vec::new(); flows.len()];
    for n in 0..200u64 {
        for (k, &(host, is_arp)) in flows.iter().enumerate() {
            let f = flow_frame(host, is_arp, n);
            let now = pair.now;
            pair.a.handle_tun_packet(now, &f);
            sent[k].push(f);
        }
        pair.run_until(pair.now + Duration::from_millis(2), |_| {});
    }
    pair.run_until(pair.now + Duration::from_secs(1), |_| {});
    for (k, &(host, is_arp)) in flows.iter().enumerate() {
        let got: Vec<&Vec<u8>> = pair
            .delivered_b
            .iter()
            .filter(|f| f[11] == host && (f[0] == 0xff) == is_arp)
            .collect();
        assert_eq!(got.len(), sent[k].len(), "host {host}, ARP {is_arp}");
        assert!(
            got.iter().zip(&sent[k]).all(|(g, s)| *g == s),
            "host {host}, ARP {is_arp}: in order"
        );
    }
    let status = pair.a.bond().status();
    assert!(
        status.paths.iter().all(|p| p.tx_packets >= 400),
        "both paths"
    );
}
