//! Adaptive (braid's default): send each packet where it is expected to arrive first.
//!
//! For every usable path the scheduler estimates when this packet would reach the peer:
//!
//! ```text
//! arrival = (queued_bytes + len) * 8 / rate + one_way_delay
//! ```
//!
//! where `queued_bytes` is what already waits in braid for that path (braid paces each
//! path at its measured rate, so this queue drains at `rate`), `rate` is
//! [`PathState::speed_bps`] and `one_way_delay` the smoothed delay including queueing in
//! the network. It takes the smallest; ties go to the lowest delay, then to the first path.
//!
//! Why this works for one TCP flow:
//! - Each packet's arrival estimate is the minimum over the paths, and every path's
//!   estimate only grows as packets are added (and stays put as time passes while its
//!   queue drains), so successive packets arrive in the order sent: the receiver's
//!   reorder buffer hardly waits, and TCP sees no reordering to slow down for.
//! - With equal delays the queues stay proportional to the rates and the paths fill in
//!   proportion to their capacity (10/20/40 Mbit/s get 1/7, 2/7, 4/7).
//! - With very different delays (5/20/60 ms) a slow-to-arrive path is used exactly when
//!   the others' queues are long enough that it is no longer slower; a sender with a
//!   window larger than the fast paths' delay-bandwidth product therefore fills every
//!   path, and a small window (a ping, an interactive session) stays on the quickest.
//!   No path is used "because it is there" at the cost of holding up the ones behind it.
//! - Bytes already in flight are not counted: their effect is in the measured delay
//!   (which includes network queueing), and braid's pacer keeps that queue short.
//!
//! Paths whose rate is unknown (0: nothing configured, not measured yet) must still get
//! traffic, or they will never be measured. Such a path is costed at
//! [`DEFAULT_RATE_BPS`] (1 Mbit/s, deliberately low), and when its queue is empty its
//! estimate is just its delay, so it takes a packet whenever it has drained the last one
//! and is not slower to arrive than the alternatives. Its own pacer then limits how much
//! it gets until its rate is known.

use core::time::Duration;

use crate::flow::proto::TCP;
use crate::sched::{Choice, PathState, Scheduler};
use crate::wire::ip::{IpPacket, TcpPacket};
use crate::{Frames, Instant};

/// The rate assumed for a path whose speed is unknown: low, so that such a path gets a
/// probing share of the traffic rather than a large one.
pub(crate) const DEFAULT_RATE_BPS: u64 = 1_000_000;

/// Packets of at most this many bytes (pure TCP acks, pings, DNS queries) are never
/// held for delay equalisation, and the scheduler sends them where they arrive first.
/// For a TCP flow, this keeps the ack direction on the quickest path: its RTT is the
/// equalised delay one way and the quickest path's the other.
pub(crate) const SMALL_PACKET: usize = 128;

/// True for a packet that delay equalisation leaves alone: a TCP segment without payload
/// and without SYN (a pure ack), or any other packet of at most [`SMALL_PACKET`] bytes
/// (pings, DNS). TCP segments that carry data, or SYN, are held like the rest: a
/// connection's first RTT samples (its handshake, a short first message) must be no
/// shorter than its bulk data's, since TCP's slow start ends when the RTT grows.
/// `packet` is an IP packet or a frame, as `frames` says: a frame's IP packet is looked
/// at (its size too), and a frame that carries none goes by its own size.
pub fn skips_equalization(frames: Frames, packet: &[u8]) -> bool {
    let Some(packet) = frames.ip_packet(packet) else {
        return packet.len() <= SMALL_PACKET;
    };
    if packet.len() > SMALL_PACKET {
        return false;
    }
    let ip = IpPacket::new_checked(packet);
    let tcp = match &ip {
        Ok(IpPacket::V4(ip)) if ip.protocol() == TCP => ip.payload(),
        Ok(IpPacket::V6(ip)) if ip.next_header() == TCP => ip.payload(),
        _ => return true,
    };
    // A TCP header that does not check out is left alone too, as any small packet.
    let Ok(tcp) = TcpPacket::new_checked(tcp) else {
        return true;
    };
    !tcp.syn() && tcp.payload().is_empty()
}

/// When equalising, arrivals up to this much (or an eighth of the equalised delay) after
/// the equalised delay count as on time.
pub(crate) const EQUALIZE_SLACK: Duration = Duration::from_millis(5);

/// The one-way delay a receiver equalising up to `spread` holds packets to, as the sender
/// sees it: the largest base delay among the usable paths within `spread` of the
/// smallest. Zero when `spread` is zero, nothing is usable, or the paths' delays differ
/// by less than [`EQUALIZE_SLACK`]: then there is nothing worth scheduling for, and plain
/// earliest arrival keeps every path's queue shortest (with a shaper in front, a
/// few milliseconds more queue on one path showed as a 100 ms window 1 % over the link).
pub(crate) fn equalized_delay(paths: &[PathState], spread: Duration) -> Duration {
    if spread.is_zero() {
        return Duration::ZERO;
    }
    let usable = || paths.iter().filter(|p| p.usable).map(|p| p.base_delay);
    let Some(lo) = usable().min() else {
        return Duration::ZERO;
    };
    let hi = usable()
        .filter(|&d| d <= lo + spread)
        .max()
        .unwrap_or(Duration::ZERO);
    if hi.saturating_sub(lo) < EQUALIZE_SLACK {
        return Duration::ZERO;
    }
    hi
}

/// Earliest expected arrival. See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Adaptive {
    default_rate_bps: u64,
    /// The receiver equalises delays up to this spread (zero: it does not).
    equalize: Duration,
    frames: Frames,
}

impl Default for Adaptive {
    fn default() -> Self {
        Self::new()
    }
}

impl Adaptive {
    /// The scheduler with [`DEFAULT_RATE_BPS`] for paths of unknown speed.
    pub(crate) fn new() -> Self {
        Self {
            default_rate_bps: DEFAULT_RATE_BPS,
            equalize: Duration::ZERO,
            frames: Frames::Ip,
        }
    }

    /// The same, for packets that are `frames`.
    pub(crate) fn with_frames(self, frames: Frames) -> Self {
        Self { frames, ..self }
    }

    #[cfg(test)]
    /// The same with another rate assumed for paths of unknown speed (0 is taken as 1).
    pub(crate) fn with_default_rate(default_rate_bps: u64) -> Self {
        Self {
            default_rate_bps: default_rate_bps.max(1),
            ..Self::new()
        }
    }

    /// The scheduler for a bond whose receiver holds packets to the delay of the slowest
    /// path within `spread` of the fastest (`equalize_ms`): a packet arriving before that
    /// delay gains nothing, so among paths that all make it the least loaded is taken.
    pub(crate) fn with_equalize(spread: Duration) -> Self {
        Self {
            equalize: spread,
            ..Self::new()
        }
    }

    /// The one-way delay the receiver holds packets to ([`equalized_delay`]).
    pub(crate) fn equalized_delay(&self, paths: &[PathState]) -> Duration {
        equalized_delay(paths, self.equalize)
    }

    /// When a packet of `len` bytes sent now on `path` is expected to arrive, counted from
    /// now. This is the quantity [`Scheduler::choose`] minimises.
    pub(crate) fn arrival_estimate(&self, path: &PathState, len: usize) -> Duration {
        let speed = path.speed_bps();
        let transmit = if speed == 0 && path.queued_bytes == 0 {
            // Unknown rate and nothing waiting: let it have the packet (probe).
            Duration::ZERO
        } else {
            let rate = if speed == 0 {
                self.default_rate_bps
            } else {
                speed
            };
            let bytes = u128::from(path.queued_bytes)
                .saturating_add(u128::try_from(len).unwrap_or(u128::MAX));
            let nanos = bytes.saturating_mul(8_000_000_000) / u128::from(rate.max(1));
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
        };
        transmit.saturating_add(path.one_way_delay)
    }
}

impl Scheduler for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn weighs_queues(&self) -> bool {
        true
    }

    fn choose(&mut self, _now: Instant, packet: &[u8], paths: &[PathState]) -> Choice {
        // Arrivals before the equalised delay (give or take a slack for the estimates'
        // noise) all count as arriving at it; among those the path whose queue frees
        // soonest wins, so load spreads by capacity.
        let floor = if skips_equalization(self.frames, packet) {
            Duration::ZERO
        } else {
            self.equalized_delay(paths)
        };
        let floor = if floor.is_zero() {
            floor
        } else {
            floor + (floor / 8).max(EQUALIZE_SLACK)
        };
        let mut best: Option<((Duration, Duration, Duration), &PathState)> = None;
        for p in paths.iter().filter(|p| p.usable) {
            let arrival = self.arrival_estimate(p, packet.len());
            let drains = if floor.is_zero() {
                Duration::ZERO
            } else {
                arrival.saturating_sub(p.one_way_delay)
            };
            let key = (arrival.max(floor), drains, p.one_way_delay);
            if best.is_none_or(|(k, _)| key < k) {
                best = Some((key, p));
            }
        }
        best.map_or(Choice::Drop, |(_, p)| Choice::One(p.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PathId;
    use proptest::prelude::*;

    fn path(id: u16, rate_bps: u64, owd_ms: u64) -> PathState {
        PathState {
            id: PathId(id),
            usable: true,
            bps: 0,
            rate_bps,
            queued_bytes: 0,
            inflight_bytes: 0,
            one_way_delay: Duration::from_millis(owd_ms),
            base_delay: Duration::from_millis(owd_ms),
            prio: 0,
        }
    }

    fn pick(c: Choice) -> usize {
        match c {
            Choice::One(id) => usize::from(id.0),
            other => panic!("{other:?}"),
        }
    }

    /// A fluid model of braid: each path's queue drains at its rate; packets of `len`
    /// bytes arrive at `offered_bps`. Returns bytes per path from `count_from` on and the
    /// largest amount by which a packet arrived before one sent earlier (reordering).
    fn simulate(
        mut a: Adaptive,
        specs: &[(u64, u64)],
        offered_bps: f64,
        len: usize,
        packets: usize,
        count_from: usize,
    ) -> (Vec<f64>, f64) {
        let mut ps: Vec<PathState> = specs
            .iter()
            .enumerate()
            .map(|(i, &(r, d))| path(i as u16, r, d))
            .collect();
        let mut queue = vec![0f64; ps.len()];
        let mut bytes = vec![0f64; ps.len()];
        let dt = len as f64 * 8.0 / offered_bps;
        let mut latest = f64::MIN;
        let mut reorder = 0f64;
        let pkt = vec![0u8; len];
        for k in 0..packets {
            let now = k as f64 * dt;
            for (i, p) in ps.iter_mut().enumerate() {
                if k > 0 {
                    queue[i] = (queue[i] - p.rate_bps as f64 * dt / 8.0).max(0.0);
                }
                p.queued_bytes = queue[i].ceil() as u64;
            }
            let i = pick(a.choose(Instant::ZERO, &pkt, &ps));
            let p = &ps[i];
            queue[i] += len as f64;
            let arrival = now + queue[i] * 8.0 / p.rate_bps as f64 + p.one_way_delay.as_secs_f64();
            reorder = reorder.max(latest - arrival);
            latest = latest.max(arrival);
            if k >= count_from {
                bytes[i] += len as f64;
            }
        }
        let total: f64 = bytes.iter().sum();
        (bytes.iter().map(|b| b / total).collect(), reorder)
    }

    #[test]
    fn equal_delays_split_by_rate_in_order() {
        let specs = [(10_000_000, 20), (20_000_000, 20), (40_000_000, 20)];
        let (shares, reorder) = simulate(Adaptive::new(), &specs, 70e6, 1400, 20_000, 0);
        for (s, want) in shares.iter().zip([1.0 / 7.0, 2.0 / 7.0, 4.0 / 7.0]) {
            assert!((s - want).abs() < 0.01, "{shares:?}");
        }
        assert!(reorder < 10e-6, "reordered by {reorder} s");
    }

    #[test]
    fn very_different_delays_fill_all_paths_in_order() {
        // 40 Mbit/s at 5 ms, 20 at 20 ms, 10 at 60 ms; offered a little over the sum so
        // queues build as they do under a TCP flow with a large window.
        let specs = [(40_000_000, 5), (20_000_000, 20), (10_000_000, 60)];
        let (shares, reorder) = simulate(Adaptive::new(), &specs, 72e6, 1400, 40_000, 20_000);
        for (s, want) in shares.iter().zip([4.0 / 7.0, 2.0 / 7.0, 1.0 / 7.0]) {
            assert!((s - want).abs() < 0.02, "{shares:?}");
        }
        assert!(reorder < 10e-6, "reordered by {reorder} s");
        // A light load (well under the fast path) stays on the fast path alone.
        let (shares, _) = simulate(Adaptive::new(), &specs, 20e6, 1400, 5_000, 0);
        assert_eq!(shares[0], 1.0, "{shares:?}");
    }

    #[test]
    fn equalizing_spreads_by_capacity_and_ignores_delay() {
        // The receiver holds everything to the 60 ms path's delay, so arriving earlier
        // gains nothing: the path whose queue frees soonest takes each packet. Under a
        // saturating load that spreads by capacity; under a light one the 40 Mbit/s path
        // takes all, though it is the slowest to arrive.
        let specs = [(10_000_000, 5), (20_000_000, 20), (40_000_000, 60)];
        let eq = || Adaptive::with_equalize(Duration::from_millis(100));
        let (shares, _) = simulate(eq(), &specs, 72e6, 1400, 40_000, 20_000);
        for (s, want) in shares.iter().zip([1.0 / 7.0, 2.0 / 7.0, 4.0 / 7.0]) {
            assert!((s - want).abs() < 0.02, "{shares:?}");
        }
        let (shares, _) = simulate(eq(), &specs, 20e6, 1400, 5_000, 0);
        assert_eq!(shares[2], 1.0, "{shares:?}");
        // Without equalisation the light load stays on the quickest path.
        let (shares, _) = simulate(Adaptive::new(), &specs, 5e6, 1400, 5_000, 0);
        assert_eq!(shares[0], 1.0, "{shares:?}");
    }

    #[test]
    fn equalized_delay_leaves_out_paths_beyond_the_spread() {
        let mut ps = [
            path(0, 40_000_000, 5),
            path(1, 10_000_000, 60),
            path(2, 5_000_000, 600),
        ];
        let spread = Duration::from_millis(100);
        assert_eq!(equalized_delay(&ps, spread), Duration::from_millis(60));
        assert_eq!(equalized_delay(&ps, Duration::ZERO), Duration::ZERO);
        ps[1].usable = false;
        // Only the 5 ms path within the spread: nothing to equalise.
        assert_eq!(equalized_delay(&ps, spread), Duration::ZERO);
        ps[0].base_delay = Duration::from_millis(57);
        assert_eq!(equalized_delay(&ps, spread), Duration::ZERO, "3 ms apart");
        ps[0].base_delay = Duration::from_millis(5);
        // A 1400-byte packet with every queue empty: all arrive by 60 ms + slack, so the
        // path that sends it soonest (40 Mbit/s) takes it; a pure ack goes where it
        // arrives first, which is the same path here.
        ps[1].usable = true;
        let mut a = Adaptive::with_equalize(spread);
        assert_eq!(pick(a.choose(Instant::ZERO, &[0x45; 1400], &ps)), 0);
        ps[0].queued_bytes = 20_000; // 4 ms at 40 Mbit/s: the 10 Mbit/s path frees sooner
        assert_eq!(pick(a.choose(Instant::ZERO, &[0x45; 1400], &ps)), 1);
        assert_eq!(pick(a.choose(Instant::ZERO, &tcp4(0x10, 0), &ps)), 0);
    }

    /// An IPv4 TCP segment with `flags` and `payload` bytes of data.
    fn tcp4(flags: u8, payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + payload];
        p[0] = 0x45;
        p[9] = 6;
        p[32] = 5 << 4;
        p[33] = flags;
        p
    }

    #[test]
    fn only_pure_acks_and_small_non_tcp_skip_equalization() {
        assert!(skips_equalization(Frames::Ip, &tcp4(0x10, 0)), "pure ack");
        assert!(!skips_equalization(Frames::Ip, &tcp4(0x02, 0)), "SYN");
        assert!(!skips_equalization(Frames::Ip, &tcp4(0x12, 0)), "SYN-ACK");
        assert!(
            !skips_equalization(Frames::Ip, &tcp4(0x18, 36)),
            "a short first message"
        );
        assert!(!skips_equalization(Frames::Ip, &[0x45; 1400]), "bulk");
        let mut ping = vec![0u8; 84];
        ping[0] = 0x45;
        ping[9] = 1;
        assert!(skips_equalization(Frames::Ip, &ping));
        let mut ack6 = vec![0u8; 60];
        ack6[0] = 0x60;
        ack6[6] = 6;
        ack6[52] = 5 << 4;
        ack6[53] = 0x10;
        assert!(skips_equalization(Frames::Ip, &ack6));
        ack6[53] = 0x02;
        assert!(!skips_equalization(Frames::Ip, &ack6));
        // Truncated headers are not worth holding: never a panic.
        assert!(skips_equalization(
            Frames::Ip,
            &[0x45, 0, 0, 0, 0, 0, 0, 0, 0, 6]
        ));
        assert!(skips_equalization(Frames::Ip, &[]));
    }

    /// In a frame the IP packet decides, as it would from a TUN: a pure ack or a ping
    /// skips, a SYN or data does not, with or without a tag. A frame without IP goes by
    /// its size: a small ARP skips; bytes that read as a SYN from the frame's first byte
    /// are no SYN.
    #[test]
    fn frames_skip_equalization_by_their_ip_packet() {
        use crate::frames::test_frames::{arp, frame, ip_frame, lookalike};
        let mut syn = tcp4(0x02, 0);
        syn[12] = 10;
        for vlan in [false, true] {
            let skips = |p: &[u8]| skips_equalization(Frames::Ethernet, &ip_frame(p, vlan));
            assert!(skips(&tcp4(0x10, 0)), "pure ack");
            assert!(!skips(&syn), "SYN");
            assert!(!skips(&tcp4(0x18, 36)), "data");
            // 128 bytes of IP packet are small, whatever the frame's header adds.
            let mut ping = vec![0u8; SMALL_PACKET];
            ping[0] = 0x45;
            ping[9] = 1;
            assert!(skips(&ping));
            assert!(skips_equalization(Frames::Ethernet, &arp(vlan)));
        }
        assert!(skips_equalization(Frames::Ethernet, &lookalike(&syn)));
        assert!(!skips_equalization(Frames::Ip, &syn));
        let big = frame(0x88b5, false, &[0; 200]);
        assert!(!skips_equalization(Frames::Ethernet, &big), "large, not IP");
    }

    #[test]
    fn slow_path_only_when_fast_queue_makes_it_no_later() {
        // 40 Mbit/s at 5 ms against 10 Mbit/s at 60 ms, 1400-byte packet:
        // slow arrives at 60 + 1.12 = 61.12 ms; fast at 5 + (q + 1400) / 5e6 B/s.
        // Equal when q + 1400 = 280_600 bytes.
        let mut fast = path(0, 40_000_000, 5);
        let slow = path(1, 10_000_000, 60);
        let mut a = Adaptive::new();
        for (q, want) in [
            (0, 0),
            (200_000, 0),
            (279_199, 0),
            (279_200, 0),
            (279_201, 1),
            (400_000, 1),
        ] {
            fast.queued_bytes = q;
            let got = pick(a.choose(Instant::ZERO, &[0; 1400], &[fast, slow]));
            assert_eq!(got, want, "fast queue {q}");
        }
        // At the exact tie the lower delay wins.
        fast.queued_bytes = 279_200;
        assert_eq!(
            a.arrival_estimate(&fast, 1400),
            a.arrival_estimate(&slow, 1400)
        );
    }

    #[test]
    fn unknown_rate_path_is_probed_when_empty() {
        let known = PathState {
            queued_bytes: 50_000,
            ..path(0, 40_000_000, 20)
        };
        let mut unknown = path(1, 0, 20);
        let mut a = Adaptive::new();
        // Empty queue: its estimate is its delay alone, so it takes the packet.
        assert_eq!(
            pick(a.choose(Instant::ZERO, &[0; 1400], &[known, unknown])),
            1
        );
        // With something queued it is costed at 1 Mbit/s: 1400 + 1400 bytes = 22.4 ms.
        unknown.queued_bytes = 1400;
        assert_eq!(
            a.arrival_estimate(&unknown, 1400),
            Duration::from_micros(20_000 + 22_400)
        );
        assert_eq!(
            pick(a.choose(Instant::ZERO, &[0; 1400], &[known, unknown])),
            0
        );
        // Configured bps counts when nothing is measured.
        let configured = PathState {
            bps: 8_000_000,
            ..unknown
        };
        assert_eq!(
            a.arrival_estimate(&configured, 1400),
            Duration::from_micros(20_000 + 2_800)
        );
        let slower = Adaptive::with_default_rate(100_000);
        assert_eq!(
            slower.arrival_estimate(&unknown, 1400),
            Duration::from_micros(20_000 + 224_000)
        );
    }

    #[test]
    fn unusable_never_chosen() {
        let mut ps = [path(0, 100_000_000, 1), path(1, 1_000_000, 100)];
        ps[0].usable = false;
        let mut a = Adaptive::new();
        assert_eq!(
            a.choose(Instant::ZERO, &[0; 100], &ps),
            Choice::One(PathId(1))
        );
        ps[1].usable = false;
        assert_eq!(a.choose(Instant::ZERO, &[0; 100], &ps), Choice::Drop);
        assert_eq!(a.choose(Instant::ZERO, &[0; 100], &[]), Choice::Drop);
        assert_eq!(a.name(), "adaptive");
    }

    #[test]
    fn ties_go_to_lower_delay_then_order() {
        // 1000 bytes: 8 ms at 1 Mbit/s + 12 ms = 20 ms; 4 ms at 2 Mbit/s + 16 ms = 20 ms.
        let a_path = path(0, 1_000_000, 12);
        let mut a = Adaptive::new();
        let b_path = path(1, 2_000_000, 16);
        let c_path = path(2, 2_000_000, 16);
        assert_eq!(
            a.arrival_estimate(&a_path, 1000),
            a.arrival_estimate(&b_path, 1000)
        );
        assert_eq!(
            pick(a.choose(Instant::ZERO, &[0; 1000], &[b_path, a_path, c_path])),
            0
        );
        assert_eq!(
            pick(a.choose(Instant::ZERO, &[0; 1000], &[c_path, b_path])),
            2
        );
    }

    fn arb_path(id: u16) -> impl Strategy<Value = PathState> {
        (
            any::<bool>(),
            prop_oneof![Just(0u64), 1u64..10_000_000_000],
            prop_oneof![Just(0u64), 1u64..10_000_000_000],
            0u64..10_000_000,
            0u64..1_000_000,
        )
            .prop_map(
                move |(usable, bps, rate_bps, queued_bytes, owd)| PathState {
                    id: PathId(id),
                    usable,
                    bps,
                    rate_bps,
                    queued_bytes,
                    inflight_bytes: 0,
                    one_way_delay: Duration::from_micros(owd),
                    base_delay: Duration::from_micros(owd),
                    prio: 0,
                },
            )
    }

    proptest! {
        /// The chosen path is usable and minimises (arrival estimate, delay) among usable
        /// paths, the first such in order; Drop only when nothing is usable.
        #[test]
        fn chosen_minimises_arrival(
            ps in (arb_path(0), arb_path(1), arb_path(2), arb_path(3)),
            n in 1usize..=4,
            len in 0usize..65_536,
        ) {
            let all = [ps.0, ps.1, ps.2, ps.3];
            let paths = &all[..n];
            let mut a = Adaptive::new();
            let pkt = vec![0u8; len];
            match a.choose(Instant::ZERO, &pkt, paths) {
                Choice::One(id) => {
                    let i = paths.iter().position(|p| p.id == id).unwrap_or(usize::MAX);
                    let chosen = paths[i];
                    prop_assert!(chosen.usable);
                    let key = |p: &PathState| (a.arrival_estimate(p, len), p.one_way_delay);
                    for (j, p) in paths.iter().enumerate().filter(|(_, p)| p.usable) {
                        prop_assert!(key(&chosen) <= key(p));
                        if j < i {
                            prop_assert!(key(&chosen) < key(p));
                        }
                    }
                }
                Choice::Drop => prop_assert!(paths.iter().all(|p| !p.usable)),
                Choice::All => prop_assert!(false, "adaptive never broadcasts"),
            }
        }
    }
}
