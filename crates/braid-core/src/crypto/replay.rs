//! The anti-replay window: an RFC 6479 ring bitmap, WireGuard's `counter_validate` split
//! in two so the (cheap) check runs before decryption and the mark only after the tag
//! verifies. A forged datagram with a huge counter therefore cannot move the window.
//!
//! A window of `bits` bits accepts any counter not yet seen that is at most
//! `bits - 64` below the highest counter marked so far (one 64-bit block is the ring's
//! slack, as in WireGuard: 8192 bits give the familiar 8128). Because one counter spans
//! every path of a bond, the window must cover the paths' delay spread times the packet
//! rate; [`ReplayWindow::bits_for`] sizes it.

use core::time::Duration;

/// Counters at or above this are never accepted (WireGuard's `REJECT_AFTER_MESSAGES`,
/// 2^64 − 2^13 − 1): a sender stops well before the nonce could wrap.
pub(super) const REJECT_AFTER_MESSAGES: u64 = u64::MAX - (1 << 13);

/// Smallest window [`ReplayWindow::bits_for`] returns (WireGuard's 8192).
pub(super) const MIN_WINDOW_BITS: usize = 8192;
/// Largest window [`ReplayWindow::bits_for`] returns: 2^22 bits (512 KiB), 4.2 million
/// packets, i.e. 47 s at 1 Gbit/s of 1400-byte packets.
pub const MAX_WINDOW_BITS: usize = 1 << 22;

/// Why a counter was refused by [`ReplayWindow::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayVerdict {
    /// Not seen and inside the window (or ahead of it).
    Fresh,
    /// Seen before.
    Duplicate,
    /// Too far behind the highest counter: cannot be told from a duplicate.
    TooOld,
    /// At or beyond [`REJECT_AFTER_MESSAGES`].
    Exhausted,
}

/// The sliding window. Allocated once at construction.
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    /// Highest counter marked, plus one (0: nothing marked yet).
    top: u64,
    blocks: Box<[u64]>,
    /// Accepted counters may be this far behind `top - 1`.
    window: u64,
    /// Counters refused as duplicates.
    pub duplicates: u64,
    /// Counters refused as too old.
    pub too_old: u64,
}

impl ReplayWindow {
    /// A window of `bits` bits, rounded up to a power of two and to at least 128; it
    /// accepts counters up to `bits - 64` behind the highest seen.
    pub fn new(bits: usize) -> Self {
        let bits = bits.clamp(128, MAX_WINDOW_BITS).next_power_of_two();
        Self {
            top: 0,
            blocks: vec![0u64; bits / 64].into_boxed_slice(),
            window: (bits - 64) as u64,
            duplicates: 0,
            too_old: 0,
        }
    }

    /// The window size in bits for a bond sending `packets_per_second` whose paths'
    /// one-way delays differ by up to `delay_spread`: `rate × spread`, plus the 64-bit
    /// slack, rounded up to a power of two and clamped to
    /// [`MIN_WINDOW_BITS`]..=[`MAX_WINDOW_BITS`].
    pub fn bits_for(packets_per_second: u64, delay_spread: Duration) -> usize {
        let packets =
            (u128::from(packets_per_second) * delay_spread.as_micros()).div_ceil(1_000_000);
        let bits = packets.saturating_add(64);
        let bits = usize::try_from(bits).unwrap_or(MAX_WINDOW_BITS);
        bits.clamp(MIN_WINDOW_BITS, MAX_WINDOW_BITS)
            .next_power_of_two()
            .min(MAX_WINDOW_BITS)
    }

    /// Packets per second of a link of `bits_per_second` carrying `packet_bytes` datagrams.
    pub fn packet_rate(bits_per_second: u64, packet_bytes: u64) -> u64 {
        bits_per_second / (8 * packet_bytes.max(1))
    }

    /// The highest counter marked, plus one (0 before the first): the reference from
    /// which a counter's low 32 bits are expanded ([`super::envelope::expand_counter`]).
    pub fn top(&self) -> u64 {
        self.top
    }

    /// How far behind the highest counter a packet may be and still be accepted.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// May `counter` be accepted? Read-only: call before decrypting, then [`mark`] after
    /// the tag verified.
    ///
    /// [`mark`]: ReplayWindow::mark
    pub fn check(&self, counter: u64) -> ReplayVerdict {
        if counter >= REJECT_AFTER_MESSAGES {
            return ReplayVerdict::Exhausted;
        }
        let c = counter + 1;
        if self.window.saturating_add(c) < self.top {
            return ReplayVerdict::TooOld;
        }
        if c > self.top {
            return ReplayVerdict::Fresh;
        }
        if self.bit(c) {
            ReplayVerdict::Duplicate
        } else {
            ReplayVerdict::Fresh
        }
    }

    /// [`check`] and count a refusal.
    ///
    /// [`check`]: ReplayWindow::check
    pub fn check_counted(&mut self, counter: u64) -> bool {
        match self.check(counter) {
            ReplayVerdict::Fresh => true,
            ReplayVerdict::Duplicate => {
                self.duplicates += 1;
                false
            }
            ReplayVerdict::TooOld | ReplayVerdict::Exhausted => {
                self.too_old += 1;
                false
            }
        }
    }

    fn mask(&self) -> u64 {
        self.blocks.len() as u64 - 1
    }

    fn bit(&self, c: u64) -> bool {
        let idx = ((c >> 6) & self.mask()) as usize;
        self.blocks
            .get(idx)
            .is_some_and(|b| b & (1u64 << (c & 63)) != 0)
    }

    /// Record `counter` as received (after its tag verified). Returns `false`, changing
    /// nothing, if [`check`] would have refused it.
    ///
    /// [`check`]: ReplayWindow::check
    pub fn mark(&mut self, counter: u64) -> bool {
        if self.check(counter) != ReplayVerdict::Fresh {
            return false;
        }
        let c = counter + 1;
        let mask = self.mask();
        let index = c >> 6;
        if c > self.top {
            let current = self.top >> 6;
            let clear = (index - current).min(self.blocks.len() as u64);
            for i in 1..=clear {
                if let Some(b) = self.blocks.get_mut(((current + i) & mask) as usize) {
                    *b = 0;
                }
            }
            self.top = c;
        }
        if let Some(b) = self.blocks.get_mut((index & mask) as usize) {
            *b |= 1u64 << (c & 63);
        }
        true
    }

    /// Forget everything (a new session).
    pub fn reset(&mut self) {
        self.top = 0;
        self.blocks.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// WireGuard's `counter_validate`: check and mark in one.
    fn t(w: &mut ReplayWindow, n: u64) -> bool {
        w.check(n) == ReplayVerdict::Fresh && w.mark(n)
    }

    /// drivers/net/wireguard/selftest/counter.c, verbatim, on the 8192-bit window.
    #[test]
    fn wireguard_selftest_vectors() {
        const WS: u64 = 8192 - 64;
        const T_LIM: u64 = WS + 1;
        const R: u64 = REJECT_AFTER_MESSAGES;
        let mut w = ReplayWindow::new(8192);
        assert_eq!(w.window(), WS);
        let cases: &[(u64, bool)] = &[
            (0, true),
            (1, true),
            (1, false),
            (9, true),
            (8, true),
            (7, true),
            (7, false),
            (T_LIM, true),
            (T_LIM - 1, true),
            (T_LIM - 1, false),
            (T_LIM - 2, true),
            (2, true),
            (2, false),
            (T_LIM + 16, true),
            (3, false),
            (T_LIM + 16, false),
            (T_LIM * 4, true),
            (T_LIM * 4 - (T_LIM - 1), true),
            (10, false),
            (T_LIM * 4 - T_LIM, false),
            (T_LIM * 4 - (T_LIM + 1), false),
            (T_LIM * 4 - (T_LIM - 2), true),
            (T_LIM * 4 + 1 - T_LIM, false),
            (0, false),
            (R, false),
            (R - 1, true),
            (R, false),
            (R - 1, false),
            (R - 2, true),
            (R + 1, false),
            (R + 2, false),
            (R - 2, false),
            (R - 3, true),
            (0, false),
        ];
        for (i, &(n, want)) in cases.iter().enumerate() {
            assert_eq!(t(&mut w, n), want, "vector {} (counter {n})", i + 1);
        }

        let mut w = ReplayWindow::new(8192);
        for i in 1..=WS {
            assert!(t(&mut w, i), "{i}");
        }
        assert!(t(&mut w, 0));
        assert!(!t(&mut w, 0));

        let mut w = ReplayWindow::new(8192);
        for i in 2..=WS + 1 {
            assert!(t(&mut w, i), "{i}");
        }
        assert!(t(&mut w, 1));
        assert!(!t(&mut w, 0));

        let mut w = ReplayWindow::new(8192);
        for i in (0..=WS).rev() {
            assert!(t(&mut w, i), "{i}");
        }

        let mut w = ReplayWindow::new(8192);
        for i in (1..=WS + 1).rev() {
            assert!(t(&mut w, i), "{i}");
        }
        assert!(!t(&mut w, 0));

        let mut w = ReplayWindow::new(8192);
        for i in (1..=WS).rev() {
            assert!(t(&mut w, i), "{i}");
        }
        assert!(t(&mut w, WS + 1));
        assert!(!t(&mut w, 0));

        let mut w = ReplayWindow::new(8192);
        for i in (1..=WS).rev() {
            assert!(t(&mut w, i), "{i}");
        }
        assert!(t(&mut w, 0));
        assert!(t(&mut w, WS + 1));
    }

    #[test]
    fn check_does_not_move_the_window() {
        let mut w = ReplayWindow::new(8192);
        assert!(w.mark(5));
        // A forged huge counter passes check but, never marked, changes nothing.
        assert_eq!(w.check(1_000_000), ReplayVerdict::Fresh);
        assert_eq!(w.check(4), ReplayVerdict::Fresh);
        assert_eq!(w.check(5), ReplayVerdict::Duplicate);
        assert!(!w.mark(5));
        assert_eq!(w.check(R_MINUS), ReplayVerdict::Exhausted);
        assert!(w.check_counted(6));
        assert!(!w.check_counted(5));
        assert!(w.mark(100_000));
        assert!(!w.check_counted(6));
        assert_eq!((w.duplicates, w.too_old), (1, 1));
        w.reset();
        assert_eq!(w.check(5), ReplayVerdict::Fresh);
    }
    const R_MINUS: u64 = REJECT_AFTER_MESSAGES;

    #[test]
    fn window_edges_for_other_sizes() {
        for bits in [128usize, 1024, 65536] {
            let mut w = ReplayWindow::new(bits);
            let ws = (bits - 64) as u64;
            assert_eq!(w.window(), ws);
            assert!(w.mark(ws + 1000));
            // Exactly `window` behind the top is still accepted; one more is too old.
            assert_eq!(w.check(1000), ReplayVerdict::Fresh);
            assert_eq!(w.check(999), ReplayVerdict::TooOld);
            assert!(w.mark(1000));
            assert!(!w.mark(1000));
            // A jump of more than a whole window clears everything behind it.
            let far = ws + 1000 + 10 * ws;
            assert!(w.mark(far));
            assert_eq!(w.check(far - ws), ReplayVerdict::Fresh);
            assert_eq!(w.check(far - ws - 1), ReplayVerdict::TooOld);
            assert_eq!(w.check(ws + 1000), ReplayVerdict::TooOld);
            assert_eq!(w.check(far - 1), ReplayVerdict::Fresh);
        }
        // Sizes round up to powers of two.
        assert_eq!(ReplayWindow::new(8193).window(), 16384 - 64);
        assert_eq!(ReplayWindow::new(0).window(), 64);
    }

    /// The sizing formula, pinned: 1 Gbit/s of 1400-byte datagrams is 89 285 packets/s;
    /// a 0.7 s spread needs 62 500 slots, which a 65 536-bit window holds (65 472
    /// usable). WireGuard's 8128 covers 91 ms of that, boringtun's 1024 about 11 ms.
    #[test]
    fn sizing_formula() {
        let rate = ReplayWindow::packet_rate(1_000_000_000, 1400);
        assert_eq!(rate, 89_285);
        assert_eq!(
            ReplayWindow::bits_for(rate, Duration::from_millis(700)),
            65536
        );
        assert!(ReplayWindow::new(65536).window() >= 62_500);
        assert_eq!(
            ReplayWindow::bits_for(rate, Duration::from_millis(91)),
            8192
        );
        assert_eq!(
            ReplayWindow::bits_for(rate, Duration::from_millis(92)),
            16384
        );
        // Floor and cap.
        assert_eq!(ReplayWindow::bits_for(0, Duration::ZERO), MIN_WINDOW_BITS);
        assert_eq!(
            ReplayWindow::bits_for(u64::MAX, Duration::from_secs(1000)),
            MAX_WINDOW_BITS
        );
        // 10 Gbit/s × 1 s still fits under the cap.
        let r10 = ReplayWindow::packet_rate(10_000_000_000, 1400);
        assert_eq!(ReplayWindow::bits_for(r10, Duration::from_secs(1)), 1 << 20);
    }

    proptest! {
        /// Against a naive model: a set of seen counters and the highest one.
        #[test]
        fn matches_hashset_model(
            bits in prop::sample::select(vec![128usize, 256, 1024]),
            ops in prop::collection::vec((0u64..3000, any::<bool>()), 1..600),
        ) {
            let mut w = ReplayWindow::new(bits);
            let ws = w.window();
            let mut seen = HashSet::new();
            let mut top: Option<u64> = None;
            for (n, tag_ok) in ops {
                let model_fresh = !seen.contains(&n) && top.is_none_or(|t| n + ws >= t);
                let fresh = w.check(n) == ReplayVerdict::Fresh;
                prop_assert_eq!(fresh, model_fresh, "counter {} top {:?}", n, top);
                // Only authenticated packets are marked.
                if fresh && tag_ok {
                    prop_assert!(w.mark(n));
                    seen.insert(n);
                    top = Some(top.map_or(n, |t| t.max(n)));
                }
            }
        }
    }
}
