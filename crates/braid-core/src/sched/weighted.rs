//! Weighted: nginx's smooth weighted round robin, counted in bytes.
//!
//! nginx's SWRR (`ngx_http_upstream_get_peer`) adds each peer's weight to its
//! `current_weight`, picks the peer with the largest, and takes the total weight off the
//! winner. That makes *packet* counts follow the weights. Packets are not all the same
//! size, so braid scales both steps by the packet's length: every usable path earns
//! `weight * len` credit, the richest path wins and pays `total_weight * len`. The
//! credits of the usable paths always sum to what they summed to before, and each path's
//! *byte* count stays within a few packets of its weight share.
//!
//! The weight of a path is [`PathState::speed_bps`] (measured if known, else configured).
//! A usable path whose weight is 0 (nothing configured, nothing measured yet) gets the
//! smallest weight among the others, so it still carries some traffic and can be
//! measured; if every weight is 0 the paths share equally. An unusable path earns nothing
//! and its credit is reset, so it comes back even.

use crate::sched::{Choice, PathState, Scheduler};
use crate::{Instant, PathId};

#[derive(Clone, Copy, Debug)]
struct Credit {
    id: PathId,
    credit: i128,
}

/// Smooth weighted round robin over bytes. See the module docs.
#[derive(Debug, Default)]
pub(super) struct Weighted {
    credits: Vec<Credit>,
}

impl Weighted {
    /// A scheduler with no history.
    pub(super) fn new() -> Self {
        Self::default()
    }

    fn slot(&mut self, id: PathId) -> usize {
        match self.credits.iter().position(|c| c.id == id) {
            Some(i) => i,
            None => {
                self.credits.push(Credit { id, credit: 0 });
                self.credits.len() - 1
            }
        }
    }
}

/// The weights used for `paths`: `speed_bps`, with zeros raised to the smallest non-zero
/// usable weight (or all 1 when none is known). Unusable paths weigh 0.
pub(super) fn effective_weight(p: &PathState, paths: &[PathState]) -> u64 {
    if !p.usable {
        return 0;
    }
    let w = p.speed_bps();
    if w > 0 {
        return w;
    }
    paths
        .iter()
        .filter(|q| q.usable)
        .map(PathState::speed_bps)
        .filter(|&w| w > 0)
        .min()
        .unwrap_or(1)
}

impl Scheduler for Weighted {
    fn name(&self) -> &'static str {
        "weighted"
    }

    fn choose(&mut self, _now: Instant, packet: &[u8], paths: &[PathState]) -> Choice {
        let len = i128::try_from(packet.len()).unwrap_or(i128::MAX).max(1);
        let mut total: i128 = 0;
        let mut best: Option<(usize, i128)> = None;
        for p in paths {
            let i = self.slot(p.id);
            let w = i128::from(effective_weight(p, paths));
            let Some(c) = self.credits.get_mut(i) else {
                continue;
            };
            if w == 0 {
                c.credit = 0;
                continue;
            }
            c.credit = c.credit.saturating_add(w.saturating_mul(len));
            total = total.saturating_add(w);
            if best.is_none_or(|(_, b)| c.credit > b) {
                best = Some((i, c.credit));
            }
        }
        let Some((i, _)) = best else {
            return Choice::Drop;
        };
        match self.credits.get_mut(i) {
            Some(c) => {
                c.credit = c.credit.saturating_sub(total.saturating_mul(len));
                Choice::One(c.id)
            }
            None => Choice::Drop,
        }
    }

    fn path_removed(&mut self, path: PathId) {
        self.credits.retain(|c| c.id != path);
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::*;
    use proptest::prelude::*;

    fn path(id: u16, bps: u64, rate_bps: u64) -> PathState {
        PathState {
            id: PathId(id),
            usable: true,
            bps,
            rate_bps,
            queued_bytes: 0,
            inflight_bytes: 0,
            one_way_delay: Duration::ZERO,
            base_delay: Duration::ZERO,
            prio: 0,
        }
    }

    fn pick(c: Choice) -> usize {
        match c {
            Choice::One(id) => usize::from(id.0),
            other => panic!("{other:?}"),
        }
    }

    /// A small deterministic generator for packet sizes in tests.
    fn sizes(seed: u64, n: usize) -> Vec<usize> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // A realistic mix: ACKs, mid-size and full-size packets.
                match x % 4 {
                    0 => 40,
                    1 => 1400,
                    2 => 576,
                    _ => 40 + (x >> 8) as usize % 1361,
                }
            })
            .collect()
    }

    fn byte_shares(ps: &[PathState], lens: &[usize]) -> Vec<f64> {
        let mut w = Weighted::new();
        let mut bytes = vec![0usize; ps.len()];
        let buf = vec![0u8; 1500];
        for &len in lens {
            let p = pick(w.choose(Instant::ZERO, &buf[..len], ps));
            bytes[p] += len;
        }
        let total: usize = bytes.iter().sum();
        bytes.iter().map(|&b| b as f64 / total as f64).collect()
    }

    #[test]
    fn nginx_sequence_for_equal_sizes() {
        // nginx's documented example: weights 5,1,1 give a a b a c a a.
        let ps = [path(0, 5, 0), path(1, 1, 0), path(2, 1, 0)];
        let mut w = Weighted::new();
        let seq: Vec<usize> = (0..7)
            .map(|_| pick(w.choose(Instant::ZERO, &[0; 100], &ps)))
            .collect();
        assert_eq!(seq, vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn byte_shares_match_weights_over_10k_mixed_packets() {
        let ps = [
            path(0, 10_000_000, 0),
            path(1, 20_000_000, 0),
            path(2, 40_000_000, 0),
        ];
        let shares = byte_shares(&ps, &sizes(7, 10_000));
        for (s, want) in shares.iter().zip([1.0 / 7.0, 2.0 / 7.0, 4.0 / 7.0]) {
            assert!((s - want).abs() < 0.01 * want, "{shares:?}");
        }
    }

    #[test]
    fn measured_rate_beats_configured_and_zero_weights_share() {
        // Measured 30 Mbit/s on path 0 overrides its configured 10.
        let ps = [path(0, 10_000_000, 30_000_000), path(1, 10_000_000, 0)];
        let shares = byte_shares(&ps, &sizes(3, 10_000));
        assert!((shares[0] - 0.75).abs() < 0.0075, "{shares:?}");
        // Nothing known: equal.
        let ps = [path(0, 0, 0), path(1, 0, 0), path(2, 0, 0)];
        let shares = byte_shares(&ps, &sizes(5, 9_000));
        assert!(
            shares.iter().all(|s| (s - 1.0 / 3.0).abs() < 0.0033),
            "{shares:?}"
        );
        // One unknown among known: it gets the smallest known weight, not nothing.
        let ps = [path(0, 30, 0), path(1, 10, 0), path(2, 0, 0)];
        let shares = byte_shares(&ps, &sizes(9, 10_000));
        assert!((shares[2] - 0.2).abs() < 0.002, "{shares:?}");
    }

    #[test]
    fn usable_changes_are_respected() {
        let mut ps = [path(0, 1, 0), path(1, 1, 0), path(2, 2, 0)];
        let mut w = Weighted::new();
        let lens = sizes(11, 4000);
        let mut bytes = [0usize; 3];
        let buf = [0u8; 1500];
        for (k, &len) in lens.iter().enumerate() {
            ps[2].usable = !(1000..3000).contains(&k);
            let p = pick(w.choose(Instant::ZERO, &buf[..len], &ps));
            assert!(ps[p].usable);
            if (1000..3000).contains(&k) {
                bytes[p] += len;
            }
        }
        // While path 2 was out, 0 and 1 split evenly.
        let share0 = bytes[0] as f64 / (bytes[0] + bytes[1]) as f64;
        assert!((share0 - 0.5).abs() < 0.01, "{bytes:?}");
        for p in &mut ps {
            p.usable = false;
        }
        assert_eq!(w.choose(Instant::ZERO, &[0; 10], &ps), Choice::Drop);
        assert_eq!(w.choose(Instant::ZERO, &[0; 10], &[]), Choice::Drop);
    }

    proptest! {
        /// For any weights and sizes, each path's bytes stay within (n paths) * max packet
        /// of its exact weight share (the SWRR bound), and only usable paths are chosen.
        #[test]
        fn bytes_track_weights(
            weights in proptest::collection::vec(1u64..100_000_000_000, 1..6),
            lens in proptest::collection::vec(1usize..1500, 1..2000),
        ) {
            let ps: Vec<PathState> =
                weights.iter().enumerate().map(|(i, &w)| path(i as u16, w, 0)).collect();
            let mut w = Weighted::new();
            let buf = [0u8; 1500];
            let mut bytes = vec![0f64; ps.len()];
            let mut total = 0f64;
            for &len in &lens {
                let p = pick(w.choose(Instant::ZERO, &buf[..len], &ps));
                bytes[p] += len as f64;
                total += len as f64;
            }
            let wsum: f64 = weights.iter().map(|&w| w as f64).sum();
            let bound = (ps.len() * 1500) as f64;
            for (b, &wt) in bytes.iter().zip(&weights) {
                let want = total * wt as f64 / wsum;
                prop_assert!((b - want).abs() <= bound, "got {} want {} bound {}", b, want, bound);
            }
        }
    }
}
