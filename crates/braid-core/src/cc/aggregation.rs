//! Ack aggregation: how much more the acks delivered than the path's rate explains (Linux
//! BBR's `extra_acked`, `bbr_update_ack_aggregation`).
//!
//! An epoch starts at an ack; each later ack adds what it delivered, and the excess over
//! `btl_bw × epoch length` is a sample. When the acks fall back to the rate (the excess is
//! gone) or the epoch has delivered 1 MiB, a new epoch starts. The window covers the
//! excess, so a path keeps sending through the gap before such a burst of acks.
//!
//! What makes the bursts here is seldom the network: it is a receiving daemon the host
//! paused (a busy CPU, a VM's steal), which then reads what queued meanwhile and acks it
//! at once. On a path of a few hundred µs RTT the rest of braid's window (2 × BDP, the
//! receiver's 8-datagram hold, 4 datagrams) is gone in 5-10 ms at 10 Mbit/s, and a pause
//! longer than that stalled the path until the acks came. So unlike Linux, whose maximum
//! spans 5-10 round trips, each window here lasts at least [`WINDOW`] as well: pauses
//! recur on the host's time scale, not the path's.

use core::time::Duration;

use crate::Instant;

/// An epoch ends once it has delivered this much (Linux's
/// `bbr_ack_epoch_acked_reset_thresh`).
const EPOCH_RESET_BYTES: u64 = 1 << 20;
/// The maximum is over two windows, each at least this long...
const WINDOW: Duration = Duration::from_secs(1);
/// ...and at least this many round trips (Linux's `bbr_extra_acked_win_rtts`).
const WINDOW_ROUNDS: u64 = 5;

/// The windowed maximum of the acks' excess over the path's rate, bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct AckAggregation {
    epoch_start: Instant,
    epoch_acked: u64,
    max: [u64; 2],
    cur: usize,
    window_start: Instant,
    window_round: u64,
}

impl AckAggregation {
    /// An ack at `now` (round `round`) delivered `acked` bytes; the path's rate is
    /// `bw` bytes/s and its window `cwnd` bytes (a sample never exceeds it).
    pub(super) fn on_ack(&mut self, now: Instant, round: u64, bw: u64, acked: u64, cwnd: u64) {
        if round >= self.window_round + WINDOW_ROUNDS
            && now.saturating_since(self.window_start) >= WINDOW
        {
            self.cur ^= 1;
            if let Some(m) = self.max.get_mut(self.cur) {
                *m = 0;
            }
            self.window_start = now;
            self.window_round = round;
        }
        let epoch_us = now.saturating_since(self.epoch_start).as_micros();
        let mut expected = u64::try_from(u128::from(bw) * epoch_us / 1_000_000).unwrap_or(u64::MAX);
        if self.epoch_acked <= expected || self.epoch_acked + acked >= EPOCH_RESET_BYTES {
            self.epoch_acked = 0;
            self.epoch_start = now;
            expected = 0;
        }
        self.epoch_acked = (self.epoch_acked + acked).min(EPOCH_RESET_BYTES);
        let extra = self.epoch_acked.saturating_sub(expected).min(cwnd);
        if let Some(m) = self.max.get_mut(self.cur) {
            *m = (*m).max(extra);
        }
    }

    /// The largest excess of the last two windows, bytes.
    pub(super) fn get(&self) -> u64 {
        self.max[0].max(self.max[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Instant {
        Instant::from_millis(x)
    }

    #[test]
    fn acks_at_the_rate_leave_no_excess_beyond_one_ack() {
        // 1 MB/s, an ack of 1000 B every ms: each epoch is one ack long.
        let mut a = AckAggregation::default();
        for k in 1..=100 {
            a.on_ack(ms(k), k, 1_000_000, 1000, 1 << 20);
        }
        assert_eq!(a.get(), 1000);
    }

    #[test]
    fn a_paused_receiver_shows_its_pause() {
        // At 1 MB/s, 10 ms of nothing and then 10 kB acked in one go (ten acks at once).
        let mut a = AckAggregation::default();
        for k in 1..=50 {
            a.on_ack(ms(k), k, 1_000_000, 1000, 1 << 20);
        }
        for _ in 0..10 {
            a.on_ack(ms(60), 51, 1_000_000, 1000, 1 << 20);
        }
        // A new epoch starts at the burst's first ack (the acks before it were at the
        // rate): all of the burst exceeds the rate, as much as 10 ms at the rate carries.
        assert_eq!(a.get(), 10_000);
        // Capped by the window.
        let mut b = AckAggregation::default();
        for _ in 0..10 {
            b.on_ack(ms(60), 1, 1_000_000, 1000, 4000);
        }
        assert_eq!(b.get(), 4000);
    }

    #[test]
    fn the_maximum_is_kept_one_to_two_windows_and_five_rounds() {
        let mut a = AckAggregation::default();
        for _ in 0..10 {
            a.on_ack(ms(10), 1, 1_000_000, 1000, 1 << 20);
        }
        let burst = a.get();
        assert!(burst >= 9000, "{burst}");
        // Acks at the rate for 1.5 s, many rounds: still remembered (one window rolled).
        for k in 1..=1500 {
            a.on_ack(ms(10 + k), 1 + k, 1_000_000, 1000, 1 << 20);
        }
        assert_eq!(a.get(), burst);
        // The acks at the rate continued the burst's epoch (its excess stayed) until it
        // had delivered 1 MiB, about 1.05 s in; two windows past that, it is forgotten.
        for k in 1501..=3100 {
            a.on_ack(ms(10 + k), 1 + k, 1_000_000, 1000, 1 << 20);
        }
        assert_eq!(a.get(), 1000);
        // Long round trips: 3 s of acks but only 4 rounds keeps the maximum.
        let mut b = AckAggregation::default();
        for _ in 0..10 {
            b.on_ack(ms(10), 1, 1_000_000, 1000, 1 << 20);
        }
        for k in 1..=3000 {
            b.on_ack(ms(10 + k), 1 + k / 1000, 1_000_000, 1000, 1 << 20);
        }
        assert_eq!(b.get(), burst);
    }
}
