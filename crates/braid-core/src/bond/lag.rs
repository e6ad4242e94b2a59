//! How late the driver's loop comes to send: the pacer's burst allowance follows it.
//!
//! Each path's pacer releases a datagram every `len / rate`; a loop that wakes late sends
//! what the pacer banked meanwhile, up to a burst allowance. With the allowance fixed at
//! 1 ms, a daemon that a busy host wakes 1-4 ms late (a 2-CPU VM with both ends, iperf3
//! and the kernel's shaping on it) lost the rest of each late wake: every path sent
//! below its pace, its delivery-rate samples fell with what it sent, the capacity
//! estimate followed them down and the pace with it, until all paths of a 10/20/40 Mbit/s
//! bond sent about the same few Mbit/s (what one datagram per path per late wake
//! carries). The whole bond then runs at a third of its capacity for seconds, in the
//! lab's runs on an idle machine as much as on a loaded one.
//!
//! So the bond measures the lag: a datagram could leave from the latest of its pacer's
//! release time, its arrival in the queue and its window's last opening; leaving at `now`
//! it left the difference late (a burst after a full window or an idle spell is no lag,
//! nor is one the allowance itself let out: counting those, the lag would feed on
//! itself). The allowance is
//! the largest lag of the last 1-2 s (two windows, as the base delay's), at least
//! [`PACING_BURST`] and at most [`MAX_BURST`]: a loop that keeps time bursts no more than
//! before, a late one catches up what it was late.

use core::time::Duration;

use crate::cc::PACING_BURST;
use crate::Instant;

/// The most a late loop may catch up in one burst: beyond it a stall is not made good
/// (that would only fill the bottleneck's queue).
const MAX_BURST: Duration = Duration::from_millis(10);

/// The lag is the maximum over two windows of this length.
const WINDOW: Duration = Duration::from_secs(1);

/// The loop's recent lag.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Lag {
    max_cur: Duration,
    max_prev: Duration,
    window_start: Instant,
}

impl Lag {
    /// A datagram that could have left at `release` leaves at `now`.
    pub(crate) fn sample(&mut self, now: Instant, release: Instant) {
        self.roll(now);
        self.max_cur = self.max_cur.max(now.saturating_since(release));
    }

    /// The largest lag of the last 1-2 s.
    pub(crate) fn get(&self, now: Instant) -> Duration {
        let age = now.saturating_since(self.window_start);
        if age > 2 * WINDOW {
            Duration::ZERO
        } else if age > WINDOW {
            self.max_cur
        } else {
            self.max_cur.max(self.max_prev)
        }
    }

    /// The pacers' burst allowance: the lag, within [`PACING_BURST`]..=[`MAX_BURST`].
    pub(crate) fn burst(&self, now: Instant) -> Duration {
        self.get(now).clamp(PACING_BURST, MAX_BURST)
    }

    fn roll(&mut self, now: Instant) {
        let age = now.saturating_since(self.window_start);
        if age > WINDOW {
            self.max_prev = if age > 2 * WINDOW {
                Duration::ZERO
            } else {
                self.max_cur
            };
            self.max_cur = Duration::ZERO;
            self.window_start = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_burst_follows_the_largest_recent_lag_within_bounds() {
        let mut l = Lag::default();
        let t = |v: u64| Instant::from_millis(10_000 + v);
        assert_eq!(l.burst(t(0)), PACING_BURST);
        l.sample(t(0), t(0) - ms(3));
        l.sample(t(100), t(100) - ms(1));
        assert_eq!(l.get(t(100)), ms(3));
        assert_eq!(l.burst(t(100)), ms(3));
        // Kept through the next window, forgotten after it.
        l.sample(t(1_500), t(1_500) - ms(2));
        assert_eq!(l.get(t(1_600)), ms(3));
        assert_eq!(l.get(t(2_600)), ms(2));
        assert_eq!(l.get(t(5_000)), Duration::ZERO);
        assert_eq!(l.burst(t(5_000)), PACING_BURST);
        // Bounded: a 100 ms stall is not made good.
        l.sample(t(6_000), t(6_000) - ms(100));
        assert_eq!(l.burst(t(6_000)), MAX_BURST);
        // A release still ahead is no lag.
        let mut l = Lag::default();
        l.sample(t(0), t(5));
        assert_eq!(l.get(t(0)), Duration::ZERO);
    }
}
