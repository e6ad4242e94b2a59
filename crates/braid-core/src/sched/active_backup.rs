//! bonding's active-backup: one active path carries everything.
//!
//! Each path has bonding's link state machine (`bond_miimon_inspect`), driven by
//! [`PathState::usable`] instead of the carrier and by time instead of miimon ticks:
//!
//! ```text
//! Up   --unusable--> Fail (downdelay running) --downdelay over--> Down
//! Fail --usable----> Up
//! Down --usable----> Back (updelay running)   --updelay over----> Up
//! Back --unusable--> Down
//! ```
//!
//! with a zero delay skipping the middle state, and `updelay` ignored for the first path
//! that comes back while there is no active path (`ignore_updelay`).
//!
//! The active path is chosen again only on the events bonding reselects on
//! (`bond_miimon_commit`, `bond_enslave`, `bond_release`): a path is added; the active
//! path goes Down or is removed; a path comes Up while there is no active path, or it is
//! the primary, or its `prio` is higher than the active one's. The choice is
//! `bond_find_best_slave`:
//!
//! 1. `bond_choose_primary_or_current`: if the primary is up, it is the candidate (taken
//!    unconditionally the first time after it was added, bonding's `force_primary`);
//!    otherwise the up path with the highest `prio` (first in order on a tie) is the
//!    candidate if it is not already active; if there is no such candidate, keep the
//!    active path if it is up. With a candidate and an active path that is up,
//!    `primary_reselect` decides: `always` takes the candidate, `better` takes it only if
//!    its [`PathState::speed_bps`] is higher, `failure` keeps the active path.
//! 2. else the first path that is up;
//! 3. else the path in updelay (Back) with the least updelay left, made up at once.
//!
//! While the active path is in its downdelay it stays active, so packets chosen for it are
//! lost (as bonding's are) unless the path comes back in time.

use core::time::Duration;

use crate::sched::{Choice, PathState, Scheduler};
use crate::{Instant, PathId};

/// bonding's `primary_reselect`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Reselect {
    /// Take the primary back whenever it is up (default).
    #[default]
    Always,
    /// Take the primary back only if it is faster than the current path.
    Better,
    /// Take the primary back only when the current path fails.
    Failure,
}

/// active-backup options.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Options {
    /// The preferred path, if any.
    pub primary: Option<PathId>,
    /// When to go back to the primary.
    pub reselect: Reselect,
    /// How long a path must stay usable before it counts as up.
    pub updelay: Duration,
    /// How long a path may be unusable before it counts as down.
    pub downdelay: Duration,
}

/// bonding's per-slave link state (`BOND_LINK_*`), with the time the delay started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LinkState {
    /// Up and eligible.
    Up,
    /// Unusable, still counted up until `downdelay` after `since`.
    Fail {
        /// When it turned unusable.
        since: Instant,
    },
    /// Down.
    Down,
    /// Usable again, counted up `updelay` after `since`.
    Back {
        /// When it turned usable.
        since: Instant,
    },
}

#[derive(Clone, Copy, Debug)]
struct Slave {
    id: PathId,
    link: LinkState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Up(PathId),
    Down(PathId),
}

/// bonding's active-backup. See the module docs.
#[derive(Debug, Default)]
pub(super) struct ActiveBackup {
    opts: Options,
    slaves: Vec<Slave>,
    active: Option<PathId>,
    force_primary: bool,
    select_pending: bool,
    /// Scratch space for one inspection's events (kept to avoid allocating per packet).
    events: Vec<Event>,
}

impl ActiveBackup {
    /// An active-backup scheduler with these options.
    pub(super) fn new(opts: Options) -> Self {
        Self {
            opts,
            ..Self::default()
        }
    }

    #[cfg(test)]
    /// The options it runs with.
    pub(super) fn options(&self) -> &Options {
        &self.opts
    }

    #[cfg(test)]
    /// The active path (bonding's `curr_active_slave`).
    pub(super) fn active(&self) -> Option<PathId> {
        self.active
    }

    /// A path's link state, if the scheduler knows the path.
    pub(super) fn link_state(&self, id: PathId) -> Option<LinkState> {
        self.slave(id).map(|s| s.link)
    }

    fn slave(&self, id: PathId) -> Option<&Slave> {
        self.slaves.iter().find(|s| s.id == id)
    }

    fn is_up(&self, id: PathId) -> bool {
        self.slave(id).is_some_and(|s| s.link == LinkState::Up)
    }

    /// `bond_enslave`: the path starts Down (its first inspection moves it on), the
    /// primary gets `force_primary`, and a reselection follows.
    fn enslave(&mut self, id: PathId) {
        self.slaves.retain(|s| s.id != id);
        self.slaves.push(Slave {
            id,
            link: LinkState::Down,
        });
        if self.opts.primary == Some(id) {
            self.force_primary = true;
        }
        self.select_pending = true;
    }

    /// `bond_miimon_inspect` + `bond_miimon_commit` at `now`.
    fn inspect(&mut self, now: Instant, paths: &[PathState]) {
        for p in paths {
            if self.slave(p.id).is_none() {
                self.enslave(p.id);
            }
        }
        let (up_d, down_d) = (self.opts.updelay, self.opts.downdelay);
        let mut ignore_updelay = self.active.is_none();
        self.events.clear();
        for p in paths {
            let Some(s) = self.slaves.iter_mut().find(|s| s.id == p.id) else {
                continue;
            };
            let mut link = s.link;
            if link == LinkState::Up && !p.usable {
                link = LinkState::Fail { since: now };
            }
            if let LinkState::Fail { since } = link {
                if p.usable {
                    link = LinkState::Up;
                    self.events.push(Event::Up(p.id));
                } else if now.saturating_since(since) >= down_d {
                    link = LinkState::Down;
                    self.events.push(Event::Down(p.id));
                }
            }
            if link == LinkState::Down && p.usable {
                link = LinkState::Back { since: now };
            }
            if let LinkState::Back { since } = link {
                if !p.usable {
                    link = LinkState::Down;
                    self.events.push(Event::Down(p.id));
                } else if ignore_updelay || now.saturating_since(since) >= up_d {
                    link = LinkState::Up;
                    ignore_updelay = false;
                    self.events.push(Event::Up(p.id));
                }
            }
            s.link = link;
        }
        for i in 0..self.events.len() {
            let Some(&ev) = self.events.get(i) else { break };
            let failover = match ev {
                Event::Up(id) => match self.active {
                    None => true,
                    Some(act) => {
                        self.opts.primary == Some(id) || prio(paths, id) > prio(paths, act)
                    }
                },
                Event::Down(id) => self.active == Some(id),
            };
            if failover {
                self.select(now, paths);
            }
        }
        if self.select_pending {
            self.select(now, paths);
        }
    }

    /// `bond_select_active_slave`.
    fn select(&mut self, now: Instant, paths: &[PathState]) {
        self.select_pending = false;
        let best = self.find_best(now, paths);
        if best != self.active {
            if let Some(s) = best.and_then(|id| self.slaves.iter_mut().find(|s| s.id == id)) {
                // bond_change_active_slave: a Back slave is made up "earlier".
                s.link = LinkState::Up;
            }
            self.active = best;
        }
    }

    /// `bond_find_best_slave`.
    fn find_best(&mut self, now: Instant, paths: &[PathState]) -> Option<PathId> {
        if let Some(id) = self.choose_primary_or_current(paths) {
            return Some(id);
        }
        if let Some(p) = paths.iter().find(|p| self.is_up(p.id)) {
            return Some(p.id);
        }
        let mut best: Option<(Duration, PathId)> = None;
        for p in paths.iter().filter(|p| p.usable) {
            if let Some(LinkState::Back { since }) = self.link_state(p.id) {
                let left = self
                    .opts
                    .updelay
                    .saturating_sub(now.saturating_since(since));
                if best.is_none_or(|(b, _)| left < b) {
                    best = Some((left, p.id));
                }
            }
        }
        best.map(|(_, id)| id)
    }

    /// `bond_choose_primary_or_current` (Linux 6.x, with slave `prio`).
    fn choose_primary_or_current(&mut self, paths: &[PathState]) -> Option<PathId> {
        let prim = self
            .opts
            .primary
            .filter(|&id| self.is_up(id) && state(paths, id).is_some());
        let curr = self.active;
        let curr_up = curr.is_some_and(|id| self.is_up(id));
        let candidate = match prim {
            None => {
                let mut hprio: Option<&PathState> = None;
                for p in paths.iter().filter(|p| self.is_up(p.id)) {
                    if hprio.is_none_or(|h| p.prio > h.prio) {
                        hprio = Some(p);
                    }
                }
                match hprio {
                    Some(h) if Some(h.id) != curr => h.id,
                    _ => return if curr_up { curr } else { None },
                }
            }
            Some(prim) => {
                if self.force_primary {
                    self.force_primary = false;
                    return Some(prim);
                }
                prim
            }
        };
        let Some(curr) = curr.filter(|_| curr_up) else {
            return Some(candidate);
        };
        match self.opts.reselect {
            Reselect::Always => Some(candidate),
            Reselect::Better => {
                let speed = |id| state(paths, id).map_or(0, PathState::speed_bps);
                if speed(candidate) > speed(curr) {
                    Some(candidate)
                } else {
                    Some(curr)
                }
            }
            Reselect::Failure => Some(curr),
        }
    }

    /// The next time a running updelay or downdelay ends.
    fn next_deadline(&self) -> Option<Instant> {
        self.slaves
            .iter()
            .filter_map(|s| match s.link {
                LinkState::Fail { since } => Some(since + self.opts.downdelay),
                LinkState::Back { since } => Some(since + self.opts.updelay),
                _ => None,
            })
            .min()
    }
}

fn state(paths: &[PathState], id: PathId) -> Option<&PathState> {
    paths.iter().find(|p| p.id == id)
}

fn prio(paths: &[PathState], id: PathId) -> i32 {
    state(paths, id).map_or(i32::MIN, |p| p.prio)
}

impl Scheduler for ActiveBackup {
    fn name(&self) -> &'static str {
        "active-backup"
    }

    fn pins_flows(&self) -> bool {
        true
    }

    fn choose(&mut self, now: Instant, _packet: &[u8], paths: &[PathState]) -> Choice {
        self.inspect(now, paths);
        match self.active {
            Some(id) if state(paths, id).is_some() => Choice::One(id),
            _ => Choice::Drop,
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next_deadline()
    }

    fn handle_timeout(&mut self, now: Instant, paths: &[PathState]) {
        self.inspect(now, paths);
    }

    fn path_added(&mut self, _now: Instant, path: PathId) {
        self.enslave(path);
    }

    fn path_removed(&mut self, path: PathId) {
        self.slaves.retain(|s| s.id != path);
        if self.active == Some(path) {
            self.active = None;
            self.select_pending = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn paths(n: u16) -> Vec<PathState> {
        crate::sched::test_paths(n)
    }

    fn ms(m: u64) -> Instant {
        Instant::from_millis(m)
    }

    fn setup(opts: Options, ps: &[PathState]) -> ActiveBackup {
        let mut ab = ActiveBackup::new(opts);
        for p in ps {
            ab.path_added(Instant::ZERO, p.id);
        }
        ab
    }

    fn at(ab: &mut ActiveBackup, t: u64, ps: &[PathState]) -> Option<u16> {
        match ab.choose(ms(t), &[0; 60], ps) {
            Choice::One(id) => Some(id.0),
            Choice::Drop => None,
            Choice::All => panic!("all"),
        }
    }

    fn primary(id: u16, reselect: Reselect) -> Options {
        Options {
            primary: Some(PathId(id)),
            reselect,
            ..Options::default()
        }
    }

    #[test]
    fn first_path_without_primary_and_no_failback() {
        let mut ps = paths(3);
        let mut ab = setup(Options::default(), &ps);
        assert_eq!(at(&mut ab, 0, &ps), Some(0));
        ps[0].usable = false;
        assert_eq!(at(&mut ab, 1, &ps), Some(1));
        // Path 0 returns: same prio, not primary -> no failback.
        ps[0].usable = true;
        assert_eq!(at(&mut ab, 2, &ps), Some(1));
        assert_eq!(ab.link_state(PathId(0)), Some(LinkState::Up));
        assert_eq!(ab.name(), "active-backup");
    }

    #[test]
    fn reselect_always_takes_primary_back() {
        let mut ps = paths(2);
        let mut ab = setup(primary(1, Reselect::Always), &ps);
        assert_eq!(at(&mut ab, 0, &ps), Some(1));
        ps[1].usable = false;
        assert_eq!(at(&mut ab, 10, &ps), Some(0));
        ps[1].usable = true;
        assert_eq!(at(&mut ab, 20, &ps), Some(1));
    }

    #[test]
    fn reselect_better_compares_speed() {
        let mut ps = paths(2);
        ps[0].bps = 100;
        ps[1].bps = 50; // primary slower
        let mut ab = setup(primary(1, Reselect::Better), &ps);
        // force_primary: the first time it is up the primary is taken anyway.
        assert_eq!(at(&mut ab, 0, &ps), Some(1));
        ps[1].usable = false;
        assert_eq!(at(&mut ab, 10, &ps), Some(0));
        ps[1].usable = true;
        assert_eq!(
            at(&mut ab, 20, &ps),
            Some(0),
            "slower primary not taken back"
        );
        // Equal speed is not better either.
        ps[1].rate_bps = 100;
        ps[1].usable = false;
        at(&mut ab, 30, &ps);
        ps[1].usable = true;
        assert_eq!(at(&mut ab, 40, &ps), Some(0));
        // Faster (measured) primary is.
        ps[1].rate_bps = 101;
        ps[1].usable = false;
        at(&mut ab, 50, &ps);
        ps[1].usable = true;
        assert_eq!(at(&mut ab, 60, &ps), Some(1));
    }

    #[test]
    fn reselect_failure_keeps_current_until_it_fails() {
        let mut ps = paths(3);
        let mut ab = setup(primary(0, Reselect::Failure), &ps);
        assert_eq!(at(&mut ab, 0, &ps), Some(0));
        ps[0].usable = false;
        assert_eq!(at(&mut ab, 10, &ps), Some(1));
        ps[0].usable = true;
        assert_eq!(at(&mut ab, 20, &ps), Some(1));
        ps[1].usable = false;
        // The current fails: the primary is up, so it is taken.
        assert_eq!(at(&mut ab, 30, &ps), Some(0));
    }

    #[test]
    fn failover_prefers_highest_prio_then_order() {
        let mut ps = paths(4);
        ps[2].prio = 5;
        ps[3].prio = 5;
        let mut ab = setup(primary(0, Reselect::Always), &ps);
        assert_eq!(at(&mut ab, 0, &ps), Some(0));
        ps[0].usable = false;
        assert_eq!(
            at(&mut ab, 1, &ps),
            Some(2),
            "highest prio, first of equals"
        );
        ps[2].usable = false;
        assert_eq!(at(&mut ab, 2, &ps), Some(3));
        ps[3].usable = false;
        assert_eq!(at(&mut ab, 3, &ps), Some(1));
        // A higher-prio path coming back takes over (its prio beats the active one's).
        ps[3].usable = true;
        assert_eq!(at(&mut ab, 4, &ps), Some(3));
        // The primary coming back takes over from anything (always).
        ps[0].usable = true;
        assert_eq!(at(&mut ab, 5, &ps), Some(0));
        for p in &mut ps {
            p.usable = false;
        }
        assert_eq!(at(&mut ab, 6, &ps), None);
        assert_eq!(ab.active(), None);
    }

    #[test]
    fn downdelay_keeps_the_failing_path_active() {
        let mut ps = paths(2);
        let opts = Options {
            downdelay: Duration::from_millis(200),
            ..Options::default()
        };
        let mut ab = setup(opts, &ps);
        assert_eq!(at(&mut ab, 0, &ps), Some(0));
        ps[0].usable = false;
        assert_eq!(at(&mut ab, 1000, &ps), Some(0));
        assert_eq!(
            ab.link_state(PathId(0)),
            Some(LinkState::Fail { since: ms(1000) })
        );
        assert_eq!(ab.poll_timeout(), Some(ms(1200)));
        assert_eq!(at(&mut ab, 1199, &ps), Some(0));
        // Back before the downdelay is over: nothing happened.
        ps[0].usable = true;
        assert_eq!(at(&mut ab, 1150 + 50, &ps), Some(0));
        assert_eq!(ab.link_state(PathId(0)), Some(LinkState::Up));
        // Fails again and stays failed: down exactly downdelay later, via the timer.
        ps[0].usable = false;
        assert_eq!(at(&mut ab, 2000, &ps), Some(0));
        ab.handle_timeout(ms(2200), &ps);
        assert_eq!(ab.active(), Some(PathId(1)));
        assert_eq!(ab.link_state(PathId(0)), Some(LinkState::Down));
    }

    #[test]
    fn updelay_delays_return_but_not_when_nothing_is_active() {
        let mut ps = paths(2);
        let opts = Options {
            primary: Some(PathId(0)),
            updelay: Duration::from_millis(500),
            ..Options::default()
        };
        let mut ab = setup(opts, &ps);
        // No active path at start: updelay is ignored for the first one (ignore_updelay)...
        assert_eq!(at(&mut ab, 0, &ps), Some(0));
        // ...but only for the first: path 1 serves its updelay.
        assert_eq!(
            ab.link_state(PathId(1)),
            Some(LinkState::Back { since: ms(0) })
        );
        assert_eq!(ab.poll_timeout(), Some(ms(500)));
        ab.handle_timeout(ms(500), &ps);
        assert_eq!(ab.link_state(PathId(1)), Some(LinkState::Up));
        ps[0].usable = false;
        assert_eq!(at(&mut ab, 1000, &ps), Some(1));
        ps[0].usable = true;
        assert_eq!(at(&mut ab, 2000, &ps), Some(1));
        assert_eq!(at(&mut ab, 2499, &ps), Some(1));
        assert_eq!(
            at(&mut ab, 2500, &ps),
            Some(0),
            "primary back after its updelay"
        );
        // A flap during updelay restarts it.
        ps[0].usable = false;
        at(&mut ab, 3000, &ps);
        ps[0].usable = true;
        at(&mut ab, 3100, &ps);
        ps[0].usable = false;
        at(&mut ab, 3200, &ps);
        ps[0].usable = true;
        assert_eq!(at(&mut ab, 3300, &ps), Some(1));
        assert_eq!(at(&mut ab, 3799, &ps), Some(1));
        assert_eq!(at(&mut ab, 3800, &ps), Some(0));
    }

    #[test]
    fn back_path_made_active_early_when_nothing_is_up() {
        let mut ps = paths(2);
        let opts = Options {
            updelay: Duration::from_millis(500),
            ..Options::default()
        };
        let mut ab = setup(opts, &ps);
        ps[1].usable = false;
        assert_eq!(at(&mut ab, 0, &ps), Some(0));
        ps[1].usable = true;
        at(&mut ab, 100, &ps); // path 1 in Back since 100
        ps[0].usable = false;
        // The active goes down; nothing else is up; the Back path is taken at once.
        assert_eq!(at(&mut ab, 200, &ps), Some(1));
        assert_eq!(ab.link_state(PathId(1)), Some(LinkState::Up));
    }

    #[test]
    fn removal_and_late_paths() {
        let ps = paths(3);
        let mut ab = setup(primary(2, Reselect::Failure), &ps[..2]);
        assert_eq!(at(&mut ab, 0, &ps[..2]), Some(0));
        // The primary is added later: force_primary takes it even with `failure`.
        ab.path_added(ms(1), PathId(2));
        assert_eq!(at(&mut ab, 1, &ps), Some(2));
        ab.path_removed(PathId(2));
        assert_eq!(at(&mut ab, 2, &ps[..2]), Some(0));
        // A path never announced is adopted.
        let mut ab = ActiveBackup::new(Options::default());
        assert_eq!(at(&mut ab, 0, &ps), Some(0));
        assert_eq!(ab.options(), &Options::default());
    }

    proptest! {
        /// Whatever the flapping, with zero delays the active path is usable whenever any
        /// path is, and it is the primary whenever the primary is usable (always).
        #[test]
        fn zero_delay_invariants(flips in proptest::collection::vec((0u16..4, any::<bool>()), 1..200)) {
            let mut ps = paths(4);
            let mut ab = setup(primary(1, Reselect::Always), &ps);
            for (t, (i, u)) in flips.into_iter().enumerate() {
                ps[usize::from(i)].usable = u;
                let got = at(&mut ab, t as u64, &ps);
                if ps[1].usable {
                    prop_assert_eq!(got, Some(1));
                } else if ps.iter().any(|p| p.usable) {
                    let g = got.map(usize::from);
                    prop_assert!(g.is_some_and(|g| ps[g].usable), "{:?}", got);
                } else {
                    prop_assert_eq!(got, None);
                }
            }
        }
    }
}
