//! A peer that restarts: in simulated time, one side of a running bond is replaced by a
//! fresh one (a daemon stopped and started again) while traffic flows.

use core::time::Duration;
use std::collections::HashSet;

use super::*;
use crate::emu::EmuConfig;
use crate::sim::{packet_seq, udp_packet, Pair, Side};

const MBIT: u64 = 1_000_000;
const SIZE: usize = 1200;

fn two_paths(cfg: BondConfig) -> Pair {
    let mut pair = Pair::new(cfg);
    for (i, delay) in [5u64, 15].into_iter().enumerate() {
        let emu = EmuConfig {
            rate_bps: 40 * MBIT,
            delay: Duration::from_millis(delay),
            seed: i as u64 + 1,
            ..EmuConfig::default()
        };
        let path = PathConfig {
            name: format!("p{i}"),
            ..PathConfig::default()
        };
        pair.add_path(path, emu);
    }
    pair
}

/// Feeds A's TUN (whichever bond is A now) with numbered UDP packets at `rate_mbit`,
/// remembering when each was sent.
struct Feed {
    rate_mbit: u64,
    start: Instant,
    stop: Option<Instant>,
    sent: Vec<Instant>,
}

impl Feed {
    fn new(rate_mbit: u64, start: Instant) -> Self {
        Self {
            rate_mbit,
            start,
            stop: None,
            sent: Vec::new(),
        }
    }

    fn feed(&mut self, pair: &mut Pair) {
        let now = self.stop.map_or(pair.now, |s| pair.now.min(s));
        if now < self.start {
            return;
        }
        let due = (now - self.start).as_micros() as u64 * self.rate_mbit / (SIZE as u64 * 8);
        while (self.sent.len() as u64) < due {
            let p = udp_packet(self.sent.len() as u64, SIZE, 40000, 5001);
            pair.a.handle_tun_packet(pair.now, &p);
            self.sent.push(pair.now);
        }
    }

    /// Packets sent from `from` on that B has delivered, and the time from `from` to the
    /// first of them being delivered (None: nothing came).
    fn delivered_since(&self, pair: &Pair, from: Instant) -> (usize, usize) {
        let got: HashSet<u64> = pair
            .delivered_b
            .iter()
            .filter_map(|p| packet_seq(p))
            .collect();
        let since: Vec<u64> = (0..self.sent.len() as u64)
            .filter(|&k| self.sent[k as usize] >= from)
            .collect();
        (
            since.iter().filter(|k| got.contains(k)).count(),
            since.len(),
        )
    }
}

fn restarted(cfg: &BondConfig, epoch: u64) -> BondConfig {
    BondConfig {
        epoch,
        ..cfg.clone()
    }
}

/// Run with a restart of `side` after about `packets` packets; returns (delivered, sent)
/// for the packets sent from one second after the restart on, how long after the
/// restart B first delivered a packet sent after it, and B's counters.
fn restart_run(
    side: Side,
    packets: u64,
    new_epoch: bool,
) -> (usize, usize, Duration, BondStatus, BondStatus) {
    let cfg = BondConfig {
        epoch: 11,
        ..BondConfig::default()
    };
    let mut pair = two_paths(cfg.clone());
    let rate = 20;
    let start = Instant::from_millis(1000);
    let mut feed = Feed::new(rate, start);
    let restart_at =
        start + Duration::from_micros(packets * SIZE as u64 * 8 / rate) + Duration::from_millis(1);
    pair.run_until(restart_at, |p| feed.feed(p));
    assert!(feed.sent.len() as u64 >= packets);
    let old_epoch = match side {
        Side::A => cfg.epoch,
        Side::B => !cfg.epoch,
    };
    let epoch = if new_epoch {
        old_epoch ^ 0xdead_beef
    } else {
        old_epoch
    };
    pair.restart(side, restarted(&cfg, epoch));
    let mut first_after = None;
    let end = restart_at + Duration::from_secs(3);
    let mut seen = pair.delivered_b.len();
    pair.run_until(end, |p| {
        feed.feed(p);
        if first_after.is_none() {
            let fresh = p
                .delivered_b
                .iter()
                .skip(seen)
                .filter_map(|d| packet_seq(d))
                .any(|k| feed.sent.get(k as usize).is_some_and(|&t| t >= restart_at));
            if fresh {
                first_after = Some(p.now - restart_at);
            }
            seen = p.delivered_b.len();
        }
    });
    let (got, sent) = feed.delivered_since(&pair, restart_at + Duration::from_secs(1));
    let first = first_after.unwrap_or(Duration::MAX);
    eprintln!(
        "{side:?} restarted after {packets}: {got} of {sent}, first after {first:?}; A {:?}; B {:?} {:?}",
        pair.a.status().counters,
        pair.b.status().counters,
        pair.b.status().reorder
    );
    (got, sent, first, pair.a.status(), pair.b.status())
}

#[test]
fn a_restarted_receiver_gets_traffic_within_a_second() {
    for packets in [1000, 70_000] {
        let (got, sent, first, _, b) = restart_run(Side::B, packets, true);
        assert!(
            first < Duration::from_secs(1),
            "after {packets}: first {first:?}"
        );
        assert!(got * 100 >= sent * 99, "after {packets}: {got} of {sent}");
        assert_eq!(b.reorder.duplicates, 0, "after {packets}");
    }
}

#[test]
fn a_restarted_sender_is_recognised_and_nothing_is_taken_for_a_duplicate() {
    for packets in [1000, 70_000] {
        let (got, sent, first, a, b) = restart_run(Side::A, packets, true);
        assert_eq!(
            (b.reorder.duplicates, b.reorder.stale),
            (0, 0),
            "after {packets}"
        );
        assert!(
            first < Duration::from_secs(1),
            "after {packets}: first {first:?}"
        );
        assert!(got * 100 >= sent * 99, "after {packets}: {got} of {sent}");
        assert_eq!(b.counters.peer_restarts, 1, "after {packets}");
        // B forgot the old run's acks, so the new A's paths never wait for them.
        assert_eq!(a.counters.stall_recoveries, 0, "after {packets}");
    }
}

#[test]
fn a_restart_that_is_not_announced_leaves_no_path_stalled() {
    // A sender that restarts without a new epoch (as an older braid would) numbers its
    // paths' datagrams from scratch: the receiver's acks then name datagrams it never
    // sent, and its paths stall. Probe answers prove the paths work, so the stall ends.
    let cfg = BondConfig {
        epoch: 11,
        ..BondConfig::default()
    };
    let mut pair = two_paths(cfg.clone());
    let mut feed = Feed::new(20, Instant::from_millis(1000));
    pair.run_until(Instant::from_millis(2000), |p| feed.feed(p));
    pair.restart(Side::A, cfg);
    let mut stalled_ms = 0u64;
    let mut t = pair.now;
    for _ in 0..2000 {
        t += Duration::from_millis(1);
        pair.run_until(t, |p| feed.feed(p));
        let st = pair.a.status();
        if st.paths.iter().any(|p| p.state == "stalled") {
            stalled_ms += 1;
        }
    }
    assert!(
        stalled_ms < 600,
        "a path was stalled {stalled_ms} of 2000 ms"
    );
    assert!(pair.a.status().counters.stall_recoveries > 0);
}

#[test]
fn sequence_numbers_that_wrap_lose_nothing() {
    let mut pair = two_paths(BondConfig::default());
    pair.a.next_seq = u64::MAX - 2000;
    let mut feed = Feed::new(30, Instant::from_millis(1000));
    feed.stop = Some(Instant::from_millis(3000));
    pair.run_until(Instant::from_millis(3500), |p| feed.feed(p));
    let (got, sent) = feed.delivered_since(&pair, Instant::from_millis(1000));
    assert!(sent > 5000, "{sent}: the run must cross the wrap");
    assert_eq!(got, sent);
    let r = pair.b.status().reorder;
    assert_eq!((r.late, r.skipped, r.resyncs), (0, 0, 0), "{r:?}");
}

#[test]
fn a_payload_larger_than_the_mtu_is_dropped_and_counted() {
    let mut b = Bond::new(BondConfig::default(), Instant::ZERO);
    let id = b
        .add_path(
            Instant::ZERO,
            PathConfig {
                name: "p0".into(),
                ..PathConfig::default()
            },
        )
        .expect("first path");
    let mtu = BondConfig::default().mtu;
    let mut buf = vec![0u8; DATA_HEADER_LEN + mtu + 1];
    let h = Header {
        path: 0,
        timestamp: 1,
    };
    for (len, delivered) in [(mtu + 1, false), (mtu, true)] {
        wire::emit_data_header_as(&h, MessageType::Data, 7, 7, &mut buf).expect("room");
        b.handle_datagram(Instant::from_millis(1), id, &buf[..DATA_HEADER_LEN + len]);
        let mut out = vec![0u8; 65536];
        assert_eq!(
            b.poll_deliver(Instant::from_millis(1), &mut out).is_some(),
            delivered,
            "{len}"
        );
    }
    assert_eq!(b.status().counters.drop_rx_too_big, 1);
}

#[test]
fn status_names_a_stalled_path_and_how_long_ago_it_heard_the_peer() {
    let mut pair = two_paths(BondConfig::default());
    let mut feed = Feed::new(20, Instant::from_millis(1000));
    pair.run_until(Instant::from_millis(2000), |p| feed.feed(p));
    let st = pair.a.status();
    assert!(st.paths.iter().all(|p| p.state == "up"), "{st:?}");
    assert!(st
        .paths
        .iter()
        .all(|p| p.last_rx_us.is_some_and(|us| us < 100_000)));
    // Acks stop coming but the path is not yet declared down: stalled.
    pair.set_cut(0, true);
    pair.run_until(Instant::from_millis(2060), |p| feed.feed(p));
    let st = pair.a.status();
    assert_eq!(st.paths[0].state, "stalled", "{:?}", st.paths[0]);
    assert!(st.paths[0].last_rx_us.is_some_and(|us| us >= 50_000));
}
