//! What HTB should give each class in a fluid model, for the lab's "HTB theory" column
//! and for tests.
//!
//! The model follows `sch_htb`'s rules with packets shrunk to nothing:
//!
//! 1. every leaf first sends on its own tokens: its demand, up to its rate;
//! 2. then, nearest ancestor first (level 1, then 2, ...), each inner class lends what is
//!    left of its rate once everything below it has been charged to it (`htb_charge_class`
//!    charges the lender and every class above it);
//! 3. a lender offers its spare to the leaves below it that still want more, lowest
//!    `prio` number first; leaves of equal prio share it in proportion to their quanta
//!    (DRR), each up to its demand and to the headroom under every ceil on its way up;
//! 4. the link rate is a ceil above everything; it lends nothing.
//!
//! This is what the seed's Conclusions compute by hand ("0.19 / 0.48 of the free 5.2
//! Mbit/s"), generalised to any tree.

use std::collections::HashMap;

use braid_core::shape::{ClassId, ShapeSpec};

/// Each leaf's expected throughput in bit/s, given each leaf's offered load in bit/s
/// (leaves not in `demand` offer nothing) and the link rate (0 = no link limit).
/// Returns one entry per leaf of the spec, in the spec's order. Unknown classes in
/// `demand` are ignored.
pub fn shares(spec: &ShapeSpec, link_bps: u64, demand: &[(ClassId, u64)]) -> Vec<(ClassId, u64)> {
    let tree = Tree::new(spec);
    let n = spec.classes.len();
    let mut want = vec![0.0_f64; n];
    for &(id, bps) in demand {
        if let Some(&i) = tree.index.get(&id) {
            if tree.leaf[i] {
                want[i] += bps as f64;
            }
        }
    }
    let link = if link_bps == 0 {
        f64::INFINITY
    } else {
        link_bps as f64
    };
    let mut got = vec![0.0_f64; n];

    // 1. Own rate, under every ceil and the link.
    for i in (0..n).filter(|&i| tree.leaf[i]) {
        let own = want[i].min(tree.rate[i]);
        let room = tree.headroom(i, &got, link);
        let a = own.min(room).max(0.0);
        got[i] = a;
    }

    // 2.-3. Lenders by level, nearest first.
    let max_level = tree.level.iter().copied().max().unwrap_or(0);
    for level in 1..=max_level {
        for p in (0..n).filter(|&p| tree.level[p] == level && !tree.leaf[p]) {
            let used: f64 = tree.leaves_under(p).iter().map(|&l| got[l]).sum();
            let mut spare = (tree.rate[p] - used).max(0.0);
            let mut prios: Vec<u8> = tree.leaves_under(p).iter().map(|&l| tree.prio[l]).collect();
            prios.sort_unstable();
            prios.dedup();
            for prio in prios {
                let group: Vec<usize> = tree
                    .leaves_under(p)
                    .into_iter()
                    .filter(|&l| tree.prio[l] == prio)
                    .collect();
                spare -= tree.water_fill(&group, p, spare, &want, &mut got, link);
                if spare <= 1e-6 {
                    break;
                }
            }
        }
    }

    (0..n)
        .filter(|&i| tree.leaf[i])
        .map(|i| (spec.classes[i].id, got[i].round() as u64))
        .collect()
}

struct Tree {
    index: HashMap<ClassId, usize>,
    parent: Vec<Option<usize>>,
    leaf: Vec<bool>,
    level: Vec<usize>,
    rate: Vec<f64>,
    ceil: Vec<f64>,
    prio: Vec<u8>,
    quantum: Vec<f64>,
}

impl Tree {
    fn new(spec: &ShapeSpec) -> Self {
        let n = spec.classes.len();
        let index: HashMap<ClassId, usize> = spec
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id, i))
            .collect();
        let parent: Vec<Option<usize>> = spec
            .classes
            .iter()
            .map(|c| c.parent.and_then(|p| index.get(&p).copied()))
            .collect();
        let mut leaf = vec![true; n];
        for p in parent.iter().flatten() {
            leaf[*p] = false;
        }
        // Level = height above the leaves, as HTB numbers them.
        let mut level = vec![0usize; n];
        for i in 0..n {
            let (mut c, mut h, mut hops) = (i, 0, 0);
            while let Some(p) = parent[c] {
                h += 1;
                level[p] = level[p].max(h);
                c = p;
                hops += 1;
                if hops > n {
                    break; // a cycle: the shaper refuses such specs anyway
                }
            }
        }
        let r2q = f64::from(spec.r2q.max(1));
        Self {
            index,
            leaf,
            level,
            rate: spec.classes.iter().map(|c| c.rate_bps as f64).collect(),
            ceil: spec
                .classes
                .iter()
                .map(|c| c.ceil_bps.unwrap_or(c.rate_bps) as f64)
                .collect(),
            prio: spec.classes.iter().map(|c| c.prio.min(7)).collect(),
            quantum: spec
                .classes
                .iter()
                .map(|c| match c.quantum {
                    Some(q) => f64::from(q),
                    None => (c.rate_bps as f64 / 8.0 / r2q).clamp(1000.0, 200_000.0),
                })
                .collect(),
            parent,
        }
    }

    fn ancestors(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let mut c = Some(i);
        let mut hops = 0;
        std::iter::from_fn(move || {
            let cur = c?;
            hops += 1;
            if hops > self.parent.len() + 1 {
                return None;
            }
            c = self.parent[cur];
            Some(cur)
        })
    }

    fn leaves_under(&self, p: usize) -> Vec<usize> {
        (0..self.leaf.len())
            .filter(|&l| self.leaf[l] && self.ancestors(l).skip(1).any(|a| a == p))
            .collect()
    }

    fn used(&self, c: usize, got: &[f64]) -> f64 {
        if self.leaf[c] {
            got[c]
        } else {
            self.leaves_under(c).iter().map(|&l| got[l]).sum()
        }
    }

    /// How much more leaf `i` may get under its own ceil, every ancestor's and the link's.
    fn headroom(&self, i: usize, got: &[f64], link: f64) -> f64 {
        let total: f64 = (0..got.len())
            .filter(|&l| self.leaf[l])
            .map(|l| got[l])
            .sum();
        self.ancestors(i)
            .map(|c| self.ceil[c] - self.used(c, got))
            .fold(link - total, f64::min)
    }

    /// Shares up to `spare` among `group` (leaves under lender `p`) by quantum, each up
    /// to its demand and ceils. Returns what was handed out.
    fn water_fill(
        &self,
        group: &[usize],
        p: usize,
        spare: f64,
        want: &[f64],
        got: &mut [f64],
        link: f64,
    ) -> f64 {
        let mut left = spare;
        let mut active: Vec<usize> = group
            .iter()
            .copied()
            .filter(|&l| want[l] - got[l] > 1e-6)
            .collect();
        for _ in 0..=group.len() * 4 {
            active.retain(|&l| want[l] - got[l] > 1e-6 && self.headroom(l, got, link) > 1e-6);
            if active.is_empty() || left <= 1e-6 {
                break;
            }
            let wsum: f64 = active.iter().map(|&l| self.quantum[l]).sum();
            // The largest step t (each leaf gets t * quantum) before something binds.
            let mut t = left / wsum;
            for &l in &active {
                t = t.min((want[l] - got[l]) / self.quantum[l]);
            }
            // Shared limits: every class on the way up (below the lender) and the link.
            let mut limits: Vec<(Vec<usize>, f64)> = Vec::new();
            for &l in &active {
                for c in self.ancestors(l).take_while(|&c| c != p) {
                    if !limits.iter().any(|(m, _)| m.first() == Some(&c)) {
                        limits.push((vec![c], self.ceil[c] - self.used(c, got)));
                    }
                }
            }
            for (m, room) in &limits {
                let c = m[0];
                let w: f64 = active
                    .iter()
                    .filter(|&&l| self.ancestors(l).any(|a| a == c))
                    .map(|&l| self.quantum[l])
                    .sum();
                if w > 0.0 {
                    t = t.min(room.max(0.0) / w);
                }
            }
            let total: f64 = (0..got.len())
                .filter(|&l| self.leaf[l])
                .map(|l| got[l])
                .sum();
            t = t.min((link - total).max(0.0) / wsum);
            for &l in &active {
                got[l] += t * self.quantum[l];
            }
            left -= t * wsum;
            if t <= 0.0 {
                break;
            }
        }
        spare - left
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_core::shape::ClassSpec;

    const MBIT: u64 = 1_000_000;

    /// The seed's tree: 1:1 at 10 Mbit/s; Alex 1:10, Betty 1:11, Carl 1:12 (prio 1) and
    /// the guest 1:13 (prio 0), all with ceil 10 Mbit/s.
    fn seed() -> ShapeSpec {
        let top = ClassId::new(1, 1);
        let mut classes = vec![{
            let mut c = ClassSpec::new(top, None, 10 * MBIT);
            c.ceil_bps = Some(10 * MBIT);
            c
        }];
        for (minor, rate, prio) in [
            (0x10, 1_900_000, 1),
            (0x11, 2_900_000, 1),
            (0x12, 4_900_000, 1),
            (0x13, 300_000, 0),
        ] {
            let mut c = ClassSpec::new(ClassId::new(1, minor), Some(top), rate);
            c.ceil_bps = Some(10 * MBIT);
            c.prio = prio;
            classes.push(c);
        }
        ShapeSpec {
            default_class: Some(ClassId::new(1, 0x13)),
            classes,
            ..ShapeSpec::default()
        }
    }

    fn run(demand: &[(u16, u64)]) -> Vec<u64> {
        let d: Vec<_> = demand
            .iter()
            .map(|&(m, b)| (ClassId::new(1, m), b))
            .collect();
        let out = shares(&seed(), 10 * MBIT, &d);
        [0x10, 0x11, 0x12, 0x13]
            .iter()
            .map(|&m| {
                out.iter()
                    .find(|(id, _)| *id == ClassId::new(1, m))
                    .map_or(0, |x| x.1)
            })
            .collect()
    }

    fn close(got: &[u64], want: &[f64]) {
        for (g, w) in got.iter().zip(want) {
            assert!(
                (*g as f64 - w * 1e6).abs() < 2_000.0,
                "got {got:?}, want {want:?} Mbit/s"
            );
        }
    }

    #[test]
    fn seed_test_1_everyone_gets_their_rate() {
        let all = [
            (0x10, 10 * MBIT),
            (0x11, 10 * MBIT),
            (0x12, 10 * MBIT),
            (0x13, 10 * MBIT),
        ];
        close(&run(&all), &[1.9, 2.9, 4.9, 0.3]);
    }

    #[test]
    fn seed_test_2_guest_takes_the_spare_by_priority() {
        close(&run(&[(0x10, 10 * MBIT)]), &[10.0, 0.0, 0.0, 0.0]);
        close(
            &run(&[(0x10, 10 * MBIT), (0x13, 10 * MBIT)]),
            &[1.9, 0.0, 0.0, 8.1],
        );
    }

    #[test]
    fn seed_test_3_spare_splits_by_quantum() {
        // Quanta 23750 : 36250 bytes share the free 5.2 Mbit/s.
        let q = 23750.0 / 60000.0;
        close(
            &run(&[(0x10, 10 * MBIT), (0x11, 10 * MBIT)]),
            &[1.9 + 5.2 * q, 2.9 + 5.2 * (1.0 - q), 0.0, 0.0],
        );
        close(
            &run(&[(0x10, 10 * MBIT), (0x11, 10 * MBIT), (0x12, 2_500_000)]),
            &[1.9 + 2.7 * q, 2.9 + 2.7 * (1.0 - q), 2.5, 0.0],
        );
        let (qa, qb, qc) = (23750.0, 36250.0, 61250.0);
        let s = qa + qb + qc;
        close(
            &run(&[(0x10, 10 * MBIT), (0x11, 10 * MBIT), (0x12, 10 * MBIT)]),
            &[
                1.9 + 0.3 * qa / s,
                2.9 + 0.3 * qb / s,
                4.9 + 0.3 * qc / s,
                0.0,
            ],
        );
    }

    #[test]
    fn ceil_and_link_bound_the_shares() {
        let mut spec = seed();
        spec.classes[1].ceil_bps = Some(3 * MBIT); // Alex may borrow up to 3 Mbit/s only
        let out = shares(&spec, 10 * MBIT, &[(ClassId::new(1, 0x10), 10 * MBIT)]);
        assert_eq!(out[0], (ClassId::new(1, 0x10), 3 * MBIT));
        // A link slower than the tree caps the total.
        let out = shares(&seed(), 5 * MBIT, &[(ClassId::new(1, 0x10), 10 * MBIT)]);
        assert_eq!(out[0].1, 5 * MBIT);
    }

    #[test]
    fn nearest_lender_first_in_a_deeper_tree() {
        // root 10 Mbit/s -> A (4, ceil 10) -> a1, a2 (2 each); B (6, ceil 10) -> b1 (6).
        let root = ClassId::new(1, 1);
        let (a, b) = (ClassId::new(1, 2), ClassId::new(1, 3));
        let mk = |id, parent, rate: u64, prio| {
            let mut c = ClassSpec::new(id, Some(parent), rate);
            c.ceil_bps = Some(10 * MBIT);
            c.prio = prio;
            c
        };
        let spec = ShapeSpec {
            classes: vec![
                ClassSpec::new(root, None, 10 * MBIT),
                mk(a, root, 4 * MBIT, 0),
                mk(b, root, 6 * MBIT, 0),
                mk(ClassId::new(1, 0x21), a, 2 * MBIT, 0),
                mk(ClassId::new(1, 0x22), a, 2 * MBIT, 0),
                mk(ClassId::new(1, 0x31), b, 6 * MBIT, 0),
            ],
            ..ShapeSpec::default()
        };
        // a1 idle: a2 borrows a1's share from A (nearest), then nothing from the root
        // while b1 uses all of B's 6 Mbit/s.
        let out = shares(
            &spec,
            0,
            &[
                (ClassId::new(1, 0x22), 10 * MBIT),
                (ClassId::new(1, 0x31), 10 * MBIT),
            ],
        );
        let get = |m| {
            out.iter()
                .find(|x| x.0 == ClassId::new(1, m))
                .map_or(0, |x| x.1)
        };
        assert_eq!(get(0x22), 4 * MBIT);
        assert_eq!(get(0x31), 6 * MBIT);
        assert_eq!(get(0x21), 0);
    }
}
