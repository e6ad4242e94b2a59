//! The EQL driver's scheduler (`drivers/net/eql.c`), faithful to the C.
//!
//! For every packet the driver walks its slave list and computes, in `unsigned long`
//! (wrapping 64-bit) arithmetic,
//!
//! ```text
//! load = (~0UL - (~0UL / 2)) - priority_Bps + bytes_queued * 8     // 2^63 - B/s + 8*bytes
//! ```
//!
//! and takes the slave with the strictly lowest load, so on a tie the first slave in the
//! list wins. Slaves are added at the *head* of the list (`list_add`), so the most
//! recently enslaved slave comes first. After the choice `bytes_queued += skb->len`. Once a
//! second `eql_timer` does `bytes_queued -= priority_Bps` (not below 0) for every slave
//! that is up.
//!
//! `priority_Bps = priority / 8`, where `priority` is the `bps` given at enslave time
//! ([`PathState::bps`] here; 0 means [`EQL_DEFAULT_SLAVE_PRIORITY`], the value the
//! `eql_enslave` tool used when none was given). It is read again on every call, so
//! `braid set NAME bps=N` acts like `EQL_SETSLAVECFG`: the new priority applies at once and
//! the queue estimate is kept.
//!
//! The units do not match: a rate in bytes/s is compared with a queue in *bits*. So the
//! rate only gives a fixed head start of `(Bps_a - Bps_b) / 8` bytes; past it the slaves
//! take packets in turn, and only the once-a-second drain makes the faster line carry
//! more. This is reproduced on purpose (see the tests and `docs/schedulers.md`).
//!
//! Where braid differs: the kernel *kills* (unlinks) a slave it finds down. braid keeps the
//! path in its place in the list, skips it while it is unusable and forgets its queue
//! estimate (its real queue is rescheduled by the bond), so it comes back like a fresh
//! slave but in its old position.

use core::time::Duration;

use crate::sched::{Choice, PathState, Scheduler};
use crate::{Instant, PathId};

/// `EQL_DEFAULT_SLAVE_PRIORITY` from `if_eql.h`: the priority (bit/s) of a slave whose
/// `bps` is not configured.
pub(super) const EQL_DEFAULT_SLAVE_PRIORITY: u64 = 28_800;

/// `EQL_DEFAULT_RESCHED_IVAL` (HZ): the drain timer's period.
pub(super) const EQL_RESCHED_INTERVAL: Duration = Duration::from_secs(1);

/// The EQL load of one slave: `2^63 - priority_Bps + bytes_queued * 8`, wrapping like the
/// C's `unsigned long`. Lower is better.
pub(super) fn eql_load(priority_bytes_per_s: u64, bytes_queued: u64) -> u64 {
    (u64::MAX - u64::MAX / 2)
        .wrapping_sub(priority_bytes_per_s)
        .wrapping_add(bytes_queued.wrapping_mul(8))
}

/// `priority_Bps` for a configured `bps` (0 = the EQL default).
pub(super) fn priority_bytes_per_s(bps: u64) -> u64 {
    let priority = if bps == 0 {
        EQL_DEFAULT_SLAVE_PRIORITY
    } else {
        bps
    };
    priority / 8
}

#[derive(Clone, Copy, Debug)]
struct Slave {
    id: PathId,
    /// `priority_Bps` as last seen (used by the timer for paths it is not shown).
    priority_bps8: u64,
    bytes_queued: u64,
}

/// The EQL scheduler. See the module docs.
#[derive(Debug, Default)]
pub(super) struct Eql {
    /// EQL's slave list, head (most recently enslaved) first.
    slaves: Vec<Slave>,
    /// When the drain timer fires next; `None` until the first call that gives a time.
    next_tick: Option<Instant>,
}

impl Eql {
    /// A scheduler with no slaves yet.
    pub(super) fn new() -> Self {
        Self::default()
    }

    #[cfg(test)]
    /// The current queue estimate (`bytes_queued`) of a path, if the scheduler knows it.
    pub(super) fn bytes_queued(&self, id: PathId) -> Option<u64> {
        self.slaves
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.bytes_queued)
    }

    #[cfg(test)]
    /// The path ids in EQL's list order (the order ties are broken in).
    pub(super) fn list_order(&self) -> impl Iterator<Item = PathId> + '_ {
        self.slaves.iter().map(|s| s.id)
    }

    fn start_timer(&mut self, now: Instant) {
        if self.next_tick.is_none() {
            self.next_tick = Some(now + EQL_RESCHED_INTERVAL);
        }
    }

    /// `eql_enslave` for a path: a duplicate is killed, then the slave goes to the head.
    fn enslave(&mut self, id: PathId) {
        self.slaves.retain(|s| s.id != id);
        self.slaves.insert(
            0,
            Slave {
                id,
                priority_bps8: priority_bytes_per_s(0),
                bytes_queued: 0,
            },
        );
    }

    /// Put paths we were never told about into the list where the kernel would have them
    /// had they been enslaved in the order `paths` lists them: an unknown path goes just
    /// after (nearer the tail than) the next known path that follows it in `paths`, or at
    /// the head if none follows.
    fn adopt_unknown(&mut self, paths: &[PathState]) {
        for (i, p) in paths.iter().enumerate() {
            if self.slaves.iter().any(|s| s.id == p.id) {
                continue;
            }
            let newer_known = paths
                .iter()
                .skip(i + 1)
                .filter_map(|q| self.slaves.iter().position(|s| s.id == q.id))
                .max();
            let at = newer_known.map_or(0, |pos| pos + 1);
            self.slaves.insert(
                at,
                Slave {
                    id: p.id,
                    priority_bps8: priority_bytes_per_s(p.bps),
                    bytes_queued: 0,
                },
            );
        }
    }
}

fn state_of(paths: &[PathState], id: PathId) -> Option<&PathState> {
    paths.iter().find(|p| p.id == id)
}

impl Scheduler for Eql {
    fn name(&self) -> &'static str {
        "eql"
    }

    fn choose(&mut self, now: Instant, packet: &[u8], paths: &[PathState]) -> Choice {
        self.start_timer(now);
        if paths
            .iter()
            .any(|p| !self.slaves.iter().any(|s| s.id == p.id))
        {
            self.adopt_unknown(paths);
        }
        // `__eql_schedule_slaves`: one pass, strictly lower load wins.
        let mut best_load = u64::MAX;
        let mut best: Option<usize> = None;
        for (i, slave) in self.slaves.iter_mut().enumerate() {
            let Some(state) = state_of(paths, slave.id) else {
                continue;
            };
            slave.priority_bps8 = priority_bytes_per_s(state.bps);
            if !state.usable {
                // The kernel kills a down slave; braid skips it and forgets its estimate.
                slave.bytes_queued = 0;
                continue;
            }
            let load = eql_load(slave.priority_bps8, slave.bytes_queued);
            if load < best_load {
                best_load = load;
                best = Some(i);
            }
        }
        match best.and_then(|i| self.slaves.get_mut(i)) {
            Some(slave) => {
                let len = u64::try_from(packet.len()).unwrap_or(u64::MAX);
                slave.bytes_queued = slave.bytes_queued.saturating_add(len);
                Choice::One(slave.id)
            }
            None => Choice::Drop,
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next_tick
    }

    fn handle_timeout(&mut self, now: Instant, paths: &[PathState]) {
        let Some(due) = self.next_tick else {
            self.start_timer(now);
            return;
        };
        if now < due {
            return;
        }
        // `eql_timer`: one drain per firing, re-armed a period after it ran.
        for slave in &mut self.slaves {
            let usable = state_of(paths, slave.id).map(|p| {
                slave.priority_bps8 = priority_bytes_per_s(p.bps);
                p.usable
            });
            match usable {
                Some(true) | None => {
                    slave.bytes_queued = slave.bytes_queued.saturating_sub(slave.priority_bps8);
                }
                Some(false) => slave.bytes_queued = 0,
            }
        }
        self.next_tick = Some(now + EQL_RESCHED_INTERVAL);
    }

    fn path_added(&mut self, now: Instant, path: PathId) {
        self.start_timer(now);
        self.enslave(path);
    }

    fn path_removed(&mut self, path: PathId) {
        self.slaves.retain(|s| s.id != path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn st(id: u16, bps: u64) -> PathState {
        PathState {
            id: PathId(id),
            usable: true,
            bps,
            rate_bps: 0,
            queued_bytes: 0,
            inflight_bytes: 0,
            one_way_delay: Duration::ZERO,
            base_delay: Duration::ZERO,
            prio: 0,
        }
    }

    fn pick(c: Choice) -> u16 {
        match c {
            Choice::One(id) => id.0,
            other => panic!("expected one path, got {other:?}"),
        }
    }

    /// Enslave `bps` in order (path i gets id i) and return the scheduler.
    fn bond(bps: &[u64]) -> (Eql, Vec<PathState>) {
        let mut e = Eql::new();
        let paths: Vec<_> = bps
            .iter()
            .enumerate()
            .map(|(i, &b)| st(i as u16, b))
            .collect();
        for p in &paths {
            e.path_added(Instant::ZERO, p.id);
        }
        (e, paths)
    }

    fn run(e: &mut Eql, paths: &[PathState], len: usize, n: usize) -> Vec<u16> {
        let pkt = vec![0u8; len];
        (0..n)
            .map(|_| pick(e.choose(Instant::ZERO, &pkt, paths)))
            .collect()
    }

    #[test]
    fn load_formula_wraps_like_unsigned_long() {
        assert_eq!(eql_load(0, 0), 1 << 63);
        assert_eq!(eql_load(7200, 0), (1 << 63) - 7200);
        assert_eq!(eql_load(7200, 296), (1 << 63) - 7200 + 8 * 296);
        // A queue estimate so large that 8*bytes wraps round: the C result, not a panic.
        assert_eq!(eql_load(0, 1 << 60), 0);
        assert_eq!(priority_bytes_per_s(57_600), 7200);
        assert_eq!(priority_bytes_per_s(14_400), 1800);
        assert_eq!(priority_bytes_per_s(0), 3600);
        assert_eq!(priority_bytes_per_s(9), 1);
    }

    /// Hand-computed from the C: A = 57600 bps (7200 B/s), B = 14400 bps (1800 B/s), 296-byte
    /// packets. Loads relative to 2^63: A starts at -7200, B at -1800, each packet adds
    /// 8*296 = 2368.
    ///   1: A -7200 < B -1800 -> A (A: -4832)     2: A -4832 -> A (A: -2464)
    ///   3: A -2464 -> A (A: -96)                 4: B -1800 < A -96 -> B (B: 568)
    ///   5: A -96 -> A (A: 2272)                  6: B 568 -> B (B: 2936)
    /// ... and from then on strict alternation: the 4:1 rate ratio is only a head start of
    /// (7200-1800)/8 = 675 bytes, because bytes/s are compared with bits queued.
    #[test]
    fn matches_driver_sequence_57600_14400() {
        let (mut e, paths) = bond(&[57_600, 14_400]);
        let seq = run(&mut e, &paths, 296, 12);
        assert_eq!(seq, vec![0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1]);
        assert_eq!(e.bytes_queued(PathId(0)), Some(7 * 296));
        assert_eq!(e.bytes_queued(PathId(1)), Some(5 * 296));
    }

    /// The unit mismatch: without the timer the packet shares tend to 1:1 whatever the
    /// rates, and the byte lead of the faster slave stays below (Bps_a - Bps_b)/8 + len.
    #[test]
    fn unit_mismatch_gives_head_start_not_ratio() {
        let (mut e, paths) = bond(&[57_600, 14_400]);
        let seq = run(&mut e, &paths, 296, 1000);
        let a = seq.iter().filter(|&&p| p == 0).count();
        assert_eq!(
            a, 501,
            "4:1 rates give 1:1 packets plus a 675-byte head start"
        );
        let qa = e.bytes_queued(PathId(0)).unwrap_or(0);
        let qb = e.bytes_queued(PathId(1)).unwrap_or(0);
        assert!(qa - qb <= 675 + 296, "lead {}", qa - qb);
        // Had the units matched (bits/s against bits queued), the head start would have
        // been 43200 bits = 5400 bytes = 18 packets, not 3.
        let lead_packets = seq.iter().take_while(|&&p| p == 0).count();
        assert_eq!(lead_packets, 3);
    }

    /// With the once-a-second drain and a load that just fills the lines, the shares
    /// follow the rates once the start-up transient (plain alternation, nothing drained
    /// yet) has worked off: each drain opens a gap that the fast line fills first.
    #[test]
    fn timer_drain_sequence() {
        let (mut e, paths) = bond(&[57_600, 14_400]);
        let pkt = [0u8; 296];
        let mut now = Instant::ZERO;
        let mut counts = [0usize; 2];
        // 9000 B/s offered = 57600/8 + 14400/8; about 30 packets of 296 per second.
        for sec in 0..100u64 {
            for i in 0..30u64 {
                now = Instant::from_micros(sec * 1_000_000 + i * 33_000 + 1);
                let p = usize::from(pick(e.choose(now, &pkt, &paths)));
                // The first seconds alternate (nothing drained yet); count the steady state.
                if sec >= 50 {
                    counts[p] += 1;
                }
            }
            let due = e.poll_timeout().unwrap_or(Instant::FAR_FUTURE);
            assert!(due > now);
            e.handle_timeout(due, &paths);
        }
        // 4:1 within a couple of packets over 600.
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((3.6..4.4).contains(&ratio), "{counts:?}");
    }

    #[test]
    fn timer_drains_by_priority_bytes_and_not_below_zero() {
        let (mut e, paths) = bond(&[57_600, 14_400]);
        run(&mut e, &paths, 296, 40); // A: 3 + 18 packets, B: 19
        let qa = e.bytes_queued(PathId(0)).unwrap_or(0);
        let qb = e.bytes_queued(PathId(1)).unwrap_or(0);
        assert_eq!(qa + qb, 40 * 296);
        assert_eq!(e.poll_timeout(), Some(Instant::from_millis(1000)));
        // Early call: nothing happens.
        e.handle_timeout(Instant::from_millis(999), &paths);
        assert_eq!(e.bytes_queued(PathId(0)), Some(qa));
        e.handle_timeout(Instant::from_millis(1000), &paths);
        assert_eq!(e.bytes_queued(PathId(0)), Some(qa.saturating_sub(7200)));
        assert_eq!(e.bytes_queued(PathId(1)), Some(qb - 1800));
        assert_eq!(e.poll_timeout(), Some(Instant::from_millis(2000)));
        // Re-armed relative to when it ran, like add_timer(jiffies + HZ).
        e.handle_timeout(Instant::from_millis(2500), &paths);
        assert_eq!(e.poll_timeout(), Some(Instant::from_millis(3500)));
        assert_eq!(e.bytes_queued(PathId(0)), Some(0));
    }

    /// Equal priorities: the most recently enslaved slave (list head) wins ties.
    #[test]
    fn tie_goes_to_most_recently_enslaved() {
        let (mut e, paths) = bond(&[0, 0, 0]);
        assert_eq!(
            e.list_order().map(|p| p.0).collect::<Vec<_>>(),
            vec![2, 1, 0]
        );
        assert_eq!(run(&mut e, &paths, 100, 7), vec![2, 1, 0, 2, 1, 0, 2]);
    }

    #[test]
    fn unknown_paths_are_adopted_in_kernel_order() {
        // Never told about any path: as if enslaved in the given order.
        let mut e = Eql::new();
        let paths = vec![st(0, 0), st(1, 0), st(2, 0)];
        assert_eq!(pick(e.choose(Instant::ZERO, &[0; 10], &paths)), 2);
        assert_eq!(
            e.list_order().map(|p| p.0).collect::<Vec<_>>(),
            vec![2, 1, 0]
        );
        // Told about 0 and 2 only: 1 sits between them.
        let mut e = Eql::new();
        e.path_added(Instant::ZERO, PathId(0));
        e.path_added(Instant::ZERO, PathId(2));
        e.choose(Instant::ZERO, &[0; 10], &paths);
        assert_eq!(
            e.list_order().map(|p| p.0).collect::<Vec<_>>(),
            vec![2, 1, 0]
        );
        // A path added at run time goes to the head; re-adding moves it there afresh.
        e.path_added(Instant::ZERO, PathId(7));
        e.path_added(Instant::ZERO, PathId(0));
        assert_eq!(
            e.list_order().map(|p| p.0).collect::<Vec<_>>(),
            vec![0, 7, 2, 1]
        );
        e.path_removed(PathId(7));
        assert_eq!(
            e.list_order().map(|p| p.0).collect::<Vec<_>>(),
            vec![0, 2, 1]
        );
    }

    #[test]
    fn unusable_paths_skipped_and_forgotten() {
        let (mut e, mut paths) = bond(&[57_600, 14_400]);
        run(&mut e, &paths, 296, 10);
        paths[0].usable = false;
        assert_eq!(run(&mut e, &paths, 296, 5), vec![1; 5]);
        assert_eq!(e.bytes_queued(PathId(0)), Some(0));
        paths[1].usable = false;
        assert_eq!(e.choose(Instant::ZERO, &[0; 296], &paths), Choice::Drop);
        // Unusable paths are not drained by the timer either (their estimate is 0).
        e.handle_timeout(Instant::from_millis(1000), &paths);
        assert_eq!(e.bytes_queued(PathId(1)), Some(0));
        assert_eq!(Eql::new().choose(Instant::ZERO, &[], &[]), Choice::Drop);
    }

    #[test]
    fn priority_change_keeps_queue_estimate() {
        let (mut e, mut paths) = bond(&[0, 0]);
        run(&mut e, &paths, 500, 4);
        assert_eq!(e.bytes_queued(PathId(0)), Some(1000));
        paths[0].bps = 8_000_000; // EQL_SETSLAVECFG: 1 MB/s
        assert_eq!(e.bytes_queued(PathId(0)), Some(1000));
        // Path 0 wins while -1_000_000 + 8*q0 < -3600 + 8*1000, i.e. q0 < 125550: for
        // q0 = 1000, 1500, ..., 125500, that is 250 packets, then path 1 gets one.
        let seq = run(&mut e, &paths, 500, 251);
        assert_eq!(seq.iter().filter(|&&p| p == 0).count(), 250);
        assert_eq!(seq.last(), Some(&1));
    }

    // ---- reference model: a line-by-line transcription of eql.c's list and arithmetic ----

    #[derive(Clone, Debug)]
    enum Op {
        Enslave(u16, u64),
        Emancipate(u16),
        SetCfg(u16, u64),
        Xmit(usize),
        Tick,
    }

    #[derive(Default)]
    struct CModel {
        // struct list_head all_slaves; list_add() inserts at the head.
        list: Vec<(u16, i64, i64)>, // (dev, priority_Bps, bytes_queued) as C `long`
    }

    impl CModel {
        fn enslave(&mut self, dev: u16, priority: u64) {
            self.list.retain(|s| s.0 != dev);
            let priority = if priority == 0 { 28_800 } else { priority } as i64;
            self.list.insert(0, (dev, priority / 8, 0));
        }
        fn xmit(&mut self, len: usize) -> Option<u16> {
            let mut best_load = !0u64;
            let mut best = None;
            for (i, s) in self.list.iter().enumerate() {
                let slave_load = (!0u64 - (!0u64 / 2))
                    .wrapping_sub(s.1 as u64)
                    .wrapping_add((s.2 as u64).wrapping_mul(8));
                if slave_load < best_load {
                    best_load = slave_load;
                    best = Some(i);
                }
            }
            let i = best?;
            self.list[i].2 += len as i64;
            Some(self.list[i].0)
        }
        fn tick(&mut self) {
            for s in &mut self.list {
                s.2 -= s.1;
                if s.2 < 0 {
                    s.2 = 0;
                }
            }
        }
    }

    fn op() -> impl Strategy<Value = Op> {
        let bps = prop_oneof![
            Just(0u64),
            Just(9600),
            Just(14_400),
            Just(57_600),
            1u64..200_000
        ];
        prop_oneof![
            1 => (0u16..5, bps.clone()).prop_map(|(d, b)| Op::Enslave(d, b)),
            1 => (0u16..5).prop_map(Op::Emancipate),
            1 => (0u16..5, bps).prop_map(|(d, b)| Op::SetCfg(d, b)),
            12 => (1usize..1500).prop_map(Op::Xmit),
            2 => Just(Op::Tick),
        ]
    }

    proptest! {
        /// braid's Eql makes the driver's choice for any sequence of enslave, emancipate,
        /// set-config, transmit and timer ticks (all slaves up).
        #[test]
        fn same_choices_as_driver(ops in proptest::collection::vec(op(), 1..300)) {
            let mut c = CModel::default();
            let mut e = Eql::new();
            // Braid passes paths in the order added; the bps lives in the PathState.
            let mut paths: Vec<PathState> = Vec::new();
            let mut now = Instant::ZERO;
            for op in ops {
                match op {
                    Op::Enslave(d, b) => {
                        c.enslave(d, b);
                        paths.retain(|p| p.id.0 != d);
                        paths.push(st(d, b));
                        e.path_added(now, PathId(d));
                    }
                    Op::Emancipate(d) => {
                        c.list.retain(|s| s.0 != d);
                        paths.retain(|p| p.id.0 != d);
                        e.path_removed(PathId(d));
                    }
                    Op::SetCfg(d, b) => {
                        if let Some(s) = c.list.iter_mut().find(|s| s.0 == d) {
                            let prio = if b == 0 { 28_800 } else { b } as i64;
                            s.1 = prio / 8;
                        }
                        if let Some(p) = paths.iter_mut().find(|p| p.id.0 == d) {
                            p.bps = b;
                        }
                    }
                    Op::Xmit(len) => {
                        let want = c.xmit(len).map_or(Choice::Drop, |d| Choice::One(PathId(d)));
                        prop_assert_eq!(e.choose(now, &vec![0u8; len], &paths), want);
                    }
                    Op::Tick => {
                        now = e.poll_timeout().unwrap_or(now);
                        c.tick();
                        e.handle_timeout(now, &paths);
                    }
                }
                for (dev, _, q) in &c.list {
                    prop_assert_eq!(e.bytes_queued(PathId(*dev)), Some(*q as u64));
                }
            }
        }
    }
}
