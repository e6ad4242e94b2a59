//! How long the receiver waits for a gap: from the spread of one-way delays.
//!
//! Every data datagram carries the sender's clock (µs, low 32 bits). `arrival - sent` is
//! the one-way delay plus an unknown clock offset; the offset is the same for every path
//! from one peer, so differences between paths are true delay differences. A packet sent
//! on the slowest path can arrive at most `max(avg + 4·dev) - min(avg - 4·dev)` after a
//! later one on the fastest (each path's low end never below its 10 s minimum): that
//! spread, plus a quarter, is the reorder deadline.
//!
//! The deadline also learns from its mistakes: a packet that arrives after its gap was
//! given up ("late") widens it, and the widening decays again over a few seconds.

use core::time::Duration;

use crate::Instant;

/// Paths whose last data is older than this do not count towards the spread.
const ACTIVE_WINDOW: Duration = Duration::from_secs(1);
/// The base (minimum) delay is tracked over two windows of this length.
const BASE_WINDOW: Duration = Duration::from_secs(10);
/// Smallest deadline: scheduling and batching noise.
const FLOOR: Duration = Duration::from_millis(2);
/// Half-life of a path's delay peak.
const PEAK_DECAY: Duration = Duration::from_millis(250);
/// Half-life of the widening learned from late packets.
const LATE_DECAY: Duration = Duration::from_secs(2);

/// What is left of something halved every `half_life` after `age`: 1 at no age (no
/// `powf`: a receiver's datagrams come in batches, many at one instant).
fn halved(age: Duration, half_life: Duration) -> f64 {
    if age.is_zero() {
        return 1.0;
    }
    0.5f64.powf(age.as_secs_f64() / half_life.as_secs_f64())
}

/// `d` in µs (a `u128` would take a slow conversion; no delay here is near 2^64 µs).
fn micros(d: Duration) -> f64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX) as f64
}

/// One path's one-way delay, relative to the bond's reference.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OwdTrack {
    /// Smoothed relative delay, µs.
    avg: f64,
    /// Smoothed mean deviation, µs.
    dev: f64,
    /// Minimum in the current and the previous window, µs.
    min_cur: i64,
    min_prev: i64,
    /// Recent peak, µs: follows a rising delay at once, decays by half every PEAK_DECAY.
    peak: f64,
    window_start: Instant,
    last: Option<Instant>,
}

impl OwdTrack {
    /// A data datagram with relative delay `rel` ([`Deadline::relative`]) arrived at `now`.
    pub(crate) fn sample(&mut self, now: Instant, rel: i64) {
        let x = rel as f64;
        match self.last {
            None => {
                self.avg = x;
                self.peak = x;
                self.dev = 0.0;
                self.min_cur = rel;
                self.min_prev = rel;
                self.window_start = now;
            }
            Some(last) => {
                // Decay the peak towards the average, then take the sample if higher.
                self.peak = self.avg
                    + (self.peak - self.avg) * halved(now.saturating_since(last), PEAK_DECAY);
                self.peak = self.peak.max(x);
                self.dev += ((x - self.avg).abs() - self.dev) / 4.0;
                self.avg += (x - self.avg) / 8.0;
                if now.saturating_since(self.window_start) > BASE_WINDOW {
                    self.min_prev = self.min_cur;
                    self.min_cur = rel;
                    self.window_start = now;
                }
                self.min_cur = self.min_cur.min(rel);
            }
        }
        self.last = Some(now);
    }

    fn base(&self) -> i64 {
        self.min_cur.min(self.min_prev)
    }

    /// The path's lowest relative delay of the last 10-20 s, µs, once it carried data.
    pub(crate) fn known_base(&self) -> Option<i64> {
        self.last.map(|_| self.base())
    }

    fn high(&self) -> f64 {
        (self.avg + 4.0 * self.dev).max(self.peak)
    }

    /// The low end of this path's delay *now*: what a packet numbered now and sent on it
    /// could take at the least. Not the windowed minimum: when every path carries the
    /// same queueing delay, nothing is reordered by it.
    fn low(&self) -> f64 {
        (self.avg - 4.0 * self.dev).max(self.base() as f64)
    }

    fn active(&self, now: Instant) -> bool {
        self.last
            .is_some_and(|t| now.saturating_since(t) <= ACTIVE_WINDOW)
    }
}

/// The bond-wide deadline estimator.
#[derive(Debug)]
pub(crate) struct Deadline {
    reference: Option<u32>,
    max: Duration,
    late_bonus_us: f64,
    late_at: Instant,
}

impl Deadline {
    pub(crate) fn new(max: Duration) -> Self {
        Self {
            reference: None,
            max,
            late_bonus_us: 0.0,
            late_at: Instant::ZERO,
        }
    }

    /// A new longest wait (a config reload); what was learned is kept.
    pub(crate) fn set_max(&mut self, max: Duration) {
        self.max = max;
        self.late_bonus_us = self.late_bonus_us.min(micros(max));
    }

    /// The one-way delay of a datagram sent at `sent` (peer clock) and arriving at `now`,
    /// relative to the bond's reference (the first datagram's), µs.
    pub(crate) fn relative(&mut self, now: Instant, sent: u32) -> i64 {
        let raw = now.wire_micros().wrapping_sub(sent);
        let reference = *self.reference.get_or_insert(raw);
        // Wrapping difference to the reference: exact while paths differ by < 35 min.
        i64::from(raw.wrapping_sub(reference) as i32)
    }

    /// The peer restarted: its clock has a new origin, so the reference goes.
    pub(crate) fn forget_peer_clock(&mut self) {
        self.reference = None;
    }

    /// A packet arrived after its gap had been given up on: widen the deadline. Every
    /// late packet widens it again, so a run of them held up together drives it towards
    /// `max` (in the lab, a run of 25 took it from 9 ms to 200 ms), where the gaps wait
    /// until every path has passed them. Widening once per run was tried: four pairs of
    /// `striped-unshaped` had 164 and 718 late packets a run (1 / 8 flows) against 52
    /// and 110, so it stays.
    pub(crate) fn on_late(&mut self, now: Instant, current: Duration) {
        let bonus = self.bonus_at(now) + (micros(current) / 2.0).max(1000.0);
        self.late_bonus_us = bonus.min(micros(self.max));
        self.late_at = now;
    }

    fn bonus_at(&self, now: Instant) -> f64 {
        if self.late_bonus_us == 0.0 {
            return 0.0;
        }
        self.late_bonus_us * halved(now.saturating_since(self.late_at), LATE_DECAY)
    }

    /// The deadline for a gap, given every path's delay track and `rtt_spread`: the
    /// spread of half the probe RTTs of the live paths, known before any data flows.
    pub(crate) fn current<'a>(
        &self,
        now: Instant,
        tracks: impl Iterator<Item = &'a OwdTrack>,
        rtt_spread: Duration,
    ) -> Duration {
        let mut lo = f64::MAX;
        let mut hi = f64::MIN;
        for t in tracks.filter(|t| t.active(now)) {
            lo = lo.min(t.low());
            hi = hi.max(t.high());
        }
        let owd_spread = if lo == f64::MAX {
            0.0
        } else {
            (hi - lo).max(0.0)
        };
        let spread_us = owd_spread.max(micros(rtt_spread));
        // A quarter on top of the spread for what the averages smooth away.
        let us = (spread_us * 1.25).max(micros(FLOOR)) + self.bonus_at(now);
        Duration::from_micros(us as u64).min(self.max.max(FLOOR))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Instant {
        Instant::from_millis(v)
    }

    #[test]
    fn halving_and_micros() {
        let s = Duration::from_secs;
        assert_eq!(halved(Duration::ZERO, s(2)), 1.0);
        assert_eq!(halved(s(2), s(2)), 0.5);
        assert_eq!(halved(s(6), s(2)), 0.125);
        assert_eq!(micros(Duration::from_millis(9)), 9000.0);
        assert_eq!(micros(Duration::MAX), u64::MAX as f64);
    }

    #[test]
    fn spread_of_two_paths_sets_the_deadline() {
        let mut d = Deadline::new(Duration::from_millis(500));
        let (mut fast, mut slow) = (OwdTrack::default(), OwdTrack::default());
        // Peer clock is 1 000 000 µs ahead of ours; fast path 5 ms, slow path 60 ms.
        for i in 0..200u64 {
            let now = ms(1000 + i);
            let sent_fast = (now.as_micros() + 1_000_000 - 5_000) as u32;
            let sent_slow = (now.as_micros() + 1_000_000 - 60_000) as u32;
            fast.sample(now, d.relative(now, sent_fast));
            slow.sample(now, d.relative(now, sent_slow));
        }
        let dl = d.current(ms(1200), [fast, slow].iter(), Duration::ZERO);
        // 55 ms spread, no jitter, times 1.25.
        assert_eq!(dl, Duration::from_micros(68_750));
    }

    #[test]
    fn idle_paths_do_not_count_and_floor_applies() {
        let mut d = Deadline::new(Duration::from_millis(500));
        let (mut a, mut b) = (OwdTrack::default(), OwdTrack::default());
        a.sample(ms(0), d.relative(ms(0), 0));
        b.sample(ms(0), d.relative(ms(0), 0u32.wrapping_sub(50_000)));
        // Three seconds later only `a` is active.
        a.sample(
            ms(3000),
            d.relative(ms(3000), (3_000_000u32).wrapping_sub(0)),
        );
        assert_eq!(d.current(ms(3000), [a, b].iter(), Duration::ZERO), FLOOR);
    }

    #[test]
    fn late_packets_widen_then_decay() {
        let mut d = Deadline::new(Duration::from_millis(200));
        let none: [OwdTrack; 0] = [];
        let before = d.current(ms(0), none.iter(), Duration::ZERO);
        d.on_late(ms(0), before);
        let widened = d.current(ms(0), none.iter(), Duration::ZERO);
        assert!(widened > before, "{widened:?} > {before:?}");
        let later = d.current(ms(20_000), none.iter(), Duration::ZERO);
        assert!(later < FLOOR + Duration::from_micros(5), "{later:?}");
    }

    #[test]
    fn equal_queueing_on_every_path_is_not_spread() {
        let mut d = Deadline::new(Duration::from_millis(500));
        let (mut a, mut b) = (OwdTrack::default(), OwdTrack::default());
        // Both paths 5 ms base; then both carry 80 ms of queue for a while.
        for i in 0..100u64 {
            let now = ms(i);
            let sent = (now.as_micros() - 5_000.min(now.as_micros())) as u32;
            a.sample(now, d.relative(now, sent));
            b.sample(now, d.relative(now, sent));
        }
        for i in 100..300u64 {
            let now = ms(i);
            a.sample(now, d.relative(now, (now.as_micros() - 85_000) as u32));
            b.sample(now, d.relative(now, (now.as_micros() - 85_000) as u32));
        }
        let dl = d.current(ms(300), [a, b].iter(), Duration::ZERO);
        assert!(dl < Duration::from_millis(5), "{dl:?}");
    }

    #[test]
    fn probe_rtt_spread_is_a_floor() {
        let d = Deadline::new(Duration::from_millis(500));
        let none: [OwdTrack; 0] = [];
        let dl = d.current(ms(0), none.iter(), Duration::from_millis(40));
        assert_eq!(dl, Duration::from_millis(50));
    }

    #[test]
    fn clamped_to_max() {
        let mut d = Deadline::new(Duration::from_millis(50));
        let (mut a, mut b) = (OwdTrack::default(), OwdTrack::default());
        a.sample(ms(0), d.relative(ms(0), 0));
        b.sample(ms(0), d.relative(ms(0), 0u32.wrapping_sub(400_000)));
        assert_eq!(
            d.current(ms(0), [a, b].iter(), Duration::ZERO),
            Duration::from_millis(50)
        );
    }
}
