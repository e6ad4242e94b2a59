//! Delay equalisation: the receiver holds each data packet until it is as old as a packet
//! on the slowest path would be, so that every packet of the bond sees the same delay.
//!
//! Why: a TCP sender's slow start ends at the first sign of a rising RTT (Linux CUBIC's
//! HyStart). Over paths of very different delay (5, 20, 60 ms), a growing flow first fills
//! the quickest path, then the next one, and its RTT climbs from the fastest path's to the
//! slowest's as it grows: slow start ends at a window far below what the bond carries,
//! and CUBIC then takes many seconds to grow into it. With equalisation the RTT is the
//! slowest path's from the first packet on, so slow start runs until the bond is full.
//! The price is latency: every packet takes as long as on the slowest equalised path.
//! Paths more than `max_spread` slower than the fastest are not waited for (their packets
//! are reordered as usual), so one satellite path does not slow everything down.
//!
//! How: every datagram from the peer carries the peer's clock. `arrival - sent` is the
//! one-way delay plus a clock offset that is the same on every path, so differences are
//! true delay differences (see `deadline.rs`). Each path keeps the minimum of that value
//! over two 10 s windows, from data and control datagrams alike (control datagrams leave at
//! once, so they see the network's delay without braid's queue; idle paths stay measured
//! by their probes). The target is the largest such base among the up paths within
//! `max_spread` of the smallest, and a data packet numbered at `sent` is released at
//! `sent + target` in the receiver's clock, at once if that has passed.

use core::time::Duration;

use crate::Instant;

/// The base (minimum) delay is tracked over two windows of this length.
const BASE_WINDOW: Duration = Duration::from_secs(10);

/// One path's base one-way delay, relative to the bond's reference (µs, may be negative).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BaseDelay {
    min_cur: i64,
    min_prev: i64,
    window_start: Instant,
    seen: bool,
}

impl BaseDelay {
    /// A datagram whose relative delay was `rel` µs arrived at `now`.
    pub(crate) fn sample(&mut self, now: Instant, rel: i64) {
        if !self.seen {
            *self = Self {
                min_cur: rel,
                min_prev: rel,
                window_start: now,
                seen: true,
            };
            return;
        }
        if now.saturating_since(self.window_start) > BASE_WINDOW {
            self.min_prev = self.min_cur;
            self.min_cur = rel;
            self.window_start = now;
        }
        self.min_cur = self.min_cur.min(rel);
    }

    /// The smallest relative delay seen in the last 10-20 s; `None` before any.
    pub(crate) fn get(&self) -> Option<i64> {
        self.seen.then(|| self.min_cur.min(self.min_prev))
    }

    /// Forget everything (the path went down: its delay may differ when it returns).
    pub(crate) fn reset(&mut self) {
        self.seen = false;
    }
}

/// The relative delay every packet is held to: the largest base among `bases` that lies
/// within `max_spread` of the smallest. `None` when there is nothing to equalise (no base
/// known, or `max_spread` zero).
pub(crate) fn target(
    bases: impl Iterator<Item = i64> + Clone,
    max_spread: Duration,
) -> Option<i64> {
    if max_spread.is_zero() {
        return None;
    }
    let lo = bases.clone().min()?;
    let cap = lo.saturating_add(i64::try_from(max_spread.as_micros()).unwrap_or(i64::MAX));
    bases.filter(|&b| b <= cap).max()
}

/// How long to hold a packet whose relative delay was `rel` when the target is `target`.
pub(crate) fn hold(target: Option<i64>, rel: i64) -> Duration {
    match target {
        Some(t) if t > rel => Duration::from_micros(u64::try_from(t - rel).unwrap_or(0)),
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Instant {
        Instant::from_micros(v * 1000)
    }

    #[test]
    fn base_is_the_windowed_minimum() {
        let mut b = BaseDelay::default();
        assert_eq!(b.get(), None);
        b.sample(ms(0), 5_000);
        b.sample(ms(100), 3_000);
        b.sample(ms(200), 9_000);
        assert_eq!(b.get(), Some(3_000));
        // After one window the old minimum is still remembered...
        b.sample(ms(10_300), 7_000);
        assert_eq!(b.get(), Some(3_000));
        // ...after two it is gone: the path got slower.
        b.sample(ms(20_400), 8_000);
        assert_eq!(b.get(), Some(7_000));
        b.reset();
        assert_eq!(b.get(), None);
        b.sample(ms(20_500), -4_000);
        assert_eq!(b.get(), Some(-4_000));
    }

    #[test]
    fn target_is_the_slowest_within_the_spread() {
        let spread = Duration::from_millis(100);
        // 5, 20 and 60 ms one-way (plus any common offset): hold to 60.
        let bases = [105_000i64, 120_000, 160_000];
        assert_eq!(target(bases.iter().copied(), spread), Some(160_000));
        // A 600 ms satellite path is beyond the spread: hold to the 60 ms one.
        let bases = [105_000i64, 120_000, 160_000, 700_000];
        assert_eq!(target(bases.iter().copied(), spread), Some(160_000));
        // Off, or nothing known.
        assert_eq!(target(bases.iter().copied(), Duration::ZERO), None);
        assert_eq!(target([].iter().copied(), spread), None);
    }

    #[test]
    fn hold_brings_a_packet_up_to_the_target() {
        assert_eq!(hold(Some(60_000), 5_000), Duration::from_millis(55));
        assert_eq!(hold(Some(60_000), 60_000), Duration::ZERO);
        // Already later than the target (queued, jittered): out at once.
        assert_eq!(hold(Some(60_000), 75_000), Duration::ZERO);
        assert_eq!(hold(None, 5_000), Duration::ZERO);
        // Negative relative delays (the reference came from a slow packet) work too.
        assert_eq!(hold(Some(-1_000), -9_000), Duration::from_millis(8));
    }
}
