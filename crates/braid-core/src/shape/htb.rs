//! The HTB shaper: Linux `sch_htb` semantics in a sans-IO state machine.
//!
//! The decisions are the kernel's (`net/sched/sch_htb.c`): token and ctoken accounting in
//! nanoseconds of transmit time, the three class modes, borrowing level by level, lower
//! prio first, deficit round robin among equal prio, ceil charged on every ancestor. So
//! are the data structures, in cheaper forms: cached modes with a wait queue of mode
//! changes (`wait_pq`), rows and feeds kept up to date by `htb_activate_prios` and
//! friends, as bitsets over id-sorted classes instead of rb-trees. What differs on
//! purpose is listed in `docs/shaping.md`.
//!
//! | submodule | what it is |
//! | --- | --- |
//! | `class` | one class: parameters, token buckets, mode; the link bucket |
//! | `queue` | leaf FIFOs through one slab of reusable buffers, the 1 s rate meter |
//! | `sets` | rows and feeds as bitsets, the wait queue as an indexed heap, ids to indices |

use core::fmt;

use super::classify::Classifier;
use super::spec::{ClassId, ClassSpec, ShapeSpec};
use crate::fragments::{self, FragmentGroups, Verdict};
use crate::{Frames, Instant};

mod class;
mod queue;
mod sets;
#[cfg(test)]
mod tests;

use self::class::{
    accnt, Class, Costs, Counters, Cursor, Leaf, LinkBucket, Mode, Params, MAXDEPTH, NUMPRIO,
};
use self::queue::{Fifo, Slab};
use self::sets::{Bits, IdTable, WaitQueue};

/// Why a spec cannot be built into a shaper (or a change applied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeError(pub String);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ShapeError {}

/// What happened to a packet offered to [`Shaper::enqueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued in this leaf class.
    Queued(ClassId),
    /// Dropped: the leaf's queue was full (counted in its stats).
    Dropped(ClassId),
}

/// One class's live figures, as `tc -s class show` prints them.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ClassStats {
    /// The class.
    pub id: ClassId,
    /// Its parent, `None` at the top.
    pub parent: Option<ClassId>,
    /// Its name, if the config gave one.
    pub name: Option<String>,
    /// True for a leaf (has a queue).
    pub leaf: bool,
    /// Configured rate and ceil, bit/s.
    pub rate_bps: u64,
    /// Configured ceil, bit/s.
    pub ceil_bps: u64,
    /// Configured (or defaulted) burst and cburst, bytes.
    pub burst: u32,
    /// Configured (or defaulted) cburst, bytes.
    pub cburst: u32,
    /// Priority and quantum in use.
    pub prio: u8,
    /// DRR quantum in use, bytes.
    pub quantum: u32,
    /// Mode now: "can-send", "may-borrow" or "cant-send".
    pub mode: &'static str,
    /// Measured over the last second: bit/s and packets/s sent.
    pub rate_measured_bps: u64,
    /// Packets per second sent over the last second.
    pub pps_measured: u64,
    /// Totals since start.
    pub sent_bytes: u64,
    /// Packets sent since start.
    pub sent_packets: u64,
    /// Packets dropped at this leaf's queue.
    pub dropped: u64,
    /// Times this class sent beyond its rate on tokens lent by an ancestor (kernel `borrows`).
    pub borrows: u64,
    /// Times this class lent its own tokens to a descendant (kernel `lends`).
    pub lends: u64,
    /// Token balances in nanoseconds of transmit time at rate / ceil (may be negative).
    pub tokens_ns: i64,
    /// As `tokens_ns`, at ceil.
    pub ctokens_ns: i64,
    /// Queued now (leaves only).
    pub backlog_packets: u32,
    /// Bytes queued now (leaves only).
    pub backlog_bytes: u64,
}

/// The shaper: classify, queue per leaf, release packets as HTB allows.
#[derive(Debug)]
pub struct Shaper {
    /// The tree in pre-order (parents before children, siblings by id).
    classes: Vec<Class>,
    /// Every class's index by id.
    by_id: IdTable,
    default_leaf: usize,
    classifier: Classifier,
    r2q: u32,
    mtu: usize,
    /// The spec fixed the link rate (`set_link_bps` is ignored).
    link_fixed: bool,
    link: LinkBucket,
    /// Row DRR pointers, `[level][prio]` (`hlevel[level].hprio[prio].ptr`).
    row_ptr: [[Cursor; NUMPRIO]; MAXDEPTH],
    /// Per level, its classes sorted by id: the universe a row's positions index.
    level_members: [Vec<usize>; MAXDEPTH],
    /// The rows, `[level][prio]` (`hlevel[level].hprio[prio].row`): classes in CAN_SEND
    /// with a backlogged leaf of that prio below them.
    rows: [[Bits; NUMPRIO]; MAXDEPTH],
    /// The non-empty rows, bit `8 * level + prio` (`q->row_mask[level]` for every level
    /// in one word): the lowest set bit is the row `htb_dequeue` serves first.
    row_bits: u64,
    /// Classes not in CAN_SEND by the time their mode improves (`wait_pq`).
    wait: WaitQueue,
    /// The `now` of the last event processing: an earlier `now` rebuilds the modes.
    events_at: i64,
    /// Backlogged leaves (the kernel's "active" classes), in no particular order.
    active: Vec<usize>,
    /// Every queued packet (the leaves' FIFOs are lists through it).
    slab: Slab,
    backlog: usize,
    wakeup: Option<Instant>,
    /// The classes' time, ns: where HTB resumes at the next dequeue (see
    /// [`Shaper::dequeue`]).
    clock: i64,
    /// How far `clock` was behind the caller's at the last dequeue (a late driver's time
    /// not yet made up), at most [`CATCH_UP`].
    lag: i64,
    /// The watchdog the last `None` from dequeue asked for, ns: a later call is late by
    /// the difference. `None` after a packet went (the caller was told to come back at
    /// once, and a caller that does not is busy elsewhere, not late).
    due: Option<i64>,
    /// Fragment groups: queued whole or dropped whole (`fragments`).
    groups: FragmentGroups,
    /// What the packets are (IP packets, or frames whose IP packet is classified).
    frames: Frames,
}

/// How late a driver may call [`Shaper::dequeue`] and still get what HTB would have let go
/// on time: a user-space daemon is paused now and then (a busy CPU, a VM's steal), and
/// every pause longer than a class's burst would otherwise cost that class its rate.
pub const CATCH_UP: core::time::Duration = core::time::Duration::from_millis(20);

/// Nanoseconds since zero.
fn ns(now: Instant) -> i64 {
    i64::try_from(now.as_micros())
        .unwrap_or(i64::MAX)
        .saturating_mul(1000)
}

/// The prios set in a `prio_activity`-style mask, lowest first.
fn prios(mask: u8) -> impl Iterator<Item = usize> {
    let mut m = mask;
    core::iter::from_fn(move || {
        let prio = m.trailing_zeros() as usize;
        m &= m.wrapping_sub(1);
        (prio < NUMPRIO).then_some(prio)
    })
}

/// The first microsecond at or after `t` ns.
fn instant_at(t: i64) -> Instant {
    let t = u64::try_from(t).unwrap_or(0);
    Instant::from_micros(t.div_ceil(1000))
}

impl Shaper {
    /// Builds the class tree. Returns the shaper and the warnings the kernel would print
    /// (e.g. `quantum of class 10010 is big. Consider r2q change.`).
    /// `link_bps` is the link rate used when `spec.link_bps` is `None` (auto); 0 means
    /// "not known yet": then the classes' own rates and ceils alone limit.
    pub fn new(
        spec: &ShapeSpec,
        link_bps: u64,
        mtu: usize,
        now: Instant,
    ) -> Result<(Self, Vec<String>), ShapeError> {
        let mtu = if mtu == 0 { 1500 } else { mtu };
        let r2q = spec.r2q.max(1);
        let t = ns(now);
        let mut warnings = Vec::new();

        // Ids, duplicates, parents.
        let mut sorted: Vec<(ClassId, usize)> = spec
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id, i))
            .collect();
        sorted.sort();
        for w in sorted.windows(2) {
            if let [a, b] = w {
                if a.0 == b.0 {
                    return Err(ShapeError(format!("class {} is defined twice", a.0)));
                }
            }
        }
        let spec_index = |id: ClassId| {
            sorted
                .binary_search_by_key(&id, |&(i, _)| i)
                .ok()
                .and_then(|k| sorted.get(k))
                .map(|&(_, i)| i)
        };
        let mut parent_of = Vec::with_capacity(spec.classes.len());
        for c in &spec.classes {
            let parent = match c.parent {
                None => None,
                Some(p) if p == c.id => {
                    return Err(ShapeError(format!("class {}: parent is itself", c.id)));
                }
                Some(p) => Some(spec_index(p).ok_or_else(|| {
                    ShapeError(format!("class {}: parent {p} does not exist", c.id))
                })?),
            };
            parent_of.push(parent);
        }
        // Depth (rejecting cycles and trees deeper than TC_HTB_MAXDEPTH).
        let mut depth = vec![0usize; spec.classes.len()];
        for (i, c) in spec.classes.iter().enumerate() {
            let mut d = 0;
            let mut p = parent_of.get(i).copied().flatten();
            while let Some(k) = p {
                d += 1;
                if d > spec.classes.len() {
                    return Err(ShapeError(format!(
                        "class {}: its parents form a loop",
                        c.id
                    )));
                }
                p = parent_of.get(k).copied().flatten();
            }
            if d >= MAXDEPTH {
                return Err(ShapeError(format!(
                    "class {}: tree is too deep (at most {MAXDEPTH} levels)",
                    c.id
                )));
            }
            if let Some(slot) = depth.get_mut(i) {
                *slot = d;
            }
        }
        // Pre-order: top-level classes by id, then each one's children by id.
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); spec.classes.len()];
        let mut tops = Vec::new();
        for &(_, i) in &sorted {
            match parent_of.get(i).copied().flatten() {
                Some(p) => {
                    if let Some(list) = children.get_mut(p) {
                        list.push(i);
                    }
                }
                None => tops.push(i),
            }
        }
        let mut order = Vec::with_capacity(spec.classes.len());
        let mut todo: Vec<usize> = tops.iter().rev().copied().collect();
        while let Some(i) = todo.pop() {
            order.push(i);
            if let Some(list) = children.get(i) {
                todo.extend(list.iter().rev());
            }
        }
        let mut new_index = vec![0usize; spec.classes.len()];
        for (k, &i) in order.iter().enumerate() {
            if let Some(slot) = new_index.get_mut(i) {
                *slot = k;
            }
        }

        let mut classes = Vec::with_capacity(order.len());
        for &i in &order {
            let Some(c) = spec.classes.get(i) else {
                continue;
            };
            let p = Params::from_spec(c, r2q, mtu, &mut warnings)?;
            let kids: Vec<usize> = children
                .get(i)
                .map(|l| {
                    l.iter()
                        .filter_map(|&k| new_index.get(k).copied())
                        .collect()
                })
                .unwrap_or_default();
            let d = depth.get(i).copied().unwrap_or(0);
            let level = if kids.is_empty() {
                0
            } else {
                (MAXDEPTH - 1 - d) as u8
            };
            classes.push(Class {
                id: c.id,
                parent: parent_of
                    .get(i)
                    .copied()
                    .flatten()
                    .and_then(|p| new_index.get(p).copied()),
                children: kids.clone(),
                name: c.name.clone(),
                level,
                tokens: p.buffer_ns,
                ctokens: p.cbuffer_ns,
                t_c: t,
                leaf: kids.is_empty().then(|| Leaf {
                    queue: Fifo::default(),
                    deficit: [0; MAXDEPTH],
                    dropped: 0,
                    active_slot: 0,
                }),
                feed_ptr: [Cursor::End; NUMPRIO],
                mode: Mode::CanSend,
                prio_activity: 0,
                feeds: if kids.is_empty() {
                    Vec::new()
                } else {
                    vec![Bits::with_len(kids.len()); NUMPRIO]
                },
                row_pos: 0,
                feed_pos: 0,
                counters: Counters::default(),
                p,
                spec: c.clone(),
                costs: Costs::NONE,
            });
        }
        let mut sorted_ids: Vec<(ClassId, usize)> =
            classes.iter().enumerate().map(|(k, c)| (c.id, k)).collect();
        sorted_ids.sort();
        // Row and feed positions: by id within a level, and within a parent's children.
        let mut level_members: [Vec<usize>; MAXDEPTH] = Default::default();
        for &(_, k) in &sorted_ids {
            let Some(cl) = classes.get_mut(k) else {
                continue;
            };
            if let Some(members) = level_members.get_mut(usize::from(cl.level)) {
                cl.row_pos = members.len();
                members.push(k);
            }
        }
        for k in 0..classes.len() {
            let kids = classes
                .get(k)
                .map(|c| c.children.clone())
                .unwrap_or_default();
            for (pos, kid) in kids.into_iter().enumerate() {
                if let Some(c) = classes.get_mut(kid) {
                    c.feed_pos = pos;
                }
            }
        }
        let rows = core::array::from_fn(|level| {
            let len = level_members.get(level).map_or(0, Vec::len);
            core::array::from_fn(|_| Bits::with_len(len))
        });

        let leaf_index = |id: ClassId| -> Option<usize> {
            let k = sorted_ids.binary_search_by_key(&id, |&(i, _)| i).ok()?;
            let &(_, idx) = sorted_ids.get(k)?;
            classes.get(idx)?.leaf.as_ref().map(|_| idx)
        };
        let default_id = spec.default_class.ok_or_else(|| {
            ShapeError("no default class: unclassified traffic needs a leaf class".into())
        })?;
        let default_leaf = leaf_index(default_id).ok_or_else(|| {
            ShapeError(format!(
                "default class {default_id} is missing or not a leaf (the kernel would send \
                 unclassified traffic unshaped)"
            ))
        })?;
        for f in &spec.filters {
            if leaf_index(f.class).is_none() {
                return Err(ShapeError(format!(
                    "a filter sends traffic to {}, which is missing or not a leaf",
                    f.class
                )));
            }
        }

        let n = classes.len();
        let link_fixed = spec.link_bps.is_some();
        let link = LinkBucket::new(spec.link_bps.unwrap_or(link_bps), mtu, t);
        let by_id = IdTable::new(sorted_ids.iter().map(|&(id, k)| (id.0, k)));
        let mut shaper = Self {
            classes,
            by_id,
            default_leaf,
            classifier: Classifier::new(&spec.filters, default_id),
            r2q,
            mtu,
            link_fixed,
            link,
            row_ptr: [[Cursor::End; NUMPRIO]; MAXDEPTH],
            level_members,
            rows,
            row_bits: 0,
            wait: WaitQueue::new(n),
            events_at: t,
            active: Vec::with_capacity(n),
            slab: Slab::default(),
            backlog: 0,
            wakeup: None,
            clock: t,
            lag: 0,
            due: None,
            groups: FragmentGroups::default(),
            frames: Frames::Ip,
        };
        shaper.rebuild(t);
        Ok((shaper, warnings))
    }

    fn index_of(&self, id: ClassId) -> Option<usize> {
        self.by_id.get(id.0)
    }

    /// What the packets are: IP packets (the default) or Ethernet frames, classified by
    /// the IP packet they carry (a frame without one goes to the default class). The bond
    /// sets it from its own [`Frames`]; fragment groups seen so far are forgotten.
    pub fn set_frames(&mut self, frames: Frames) {
        self.frames = frames;
        self.groups = FragmentGroups::new(frames);
    }

    /// Classifies a packet (see [`Shaper::set_frames`]) and queues a copy in its leaf. A
    /// classifier answer that is not a leaf of this tree goes to the default class.
    pub fn enqueue(&mut self, now: Instant, packet: &[u8]) -> Enqueued {
        let id = self.classifier.classify_frame(self.frames, packet);
        let idx = match self.index_of(id) {
            Some(i) if self.classes.get(i).is_some_and(|c| c.leaf.is_some()) => i,
            _ => self.default_leaf,
        };
        self.enqueue_at(now, idx, packet)
    }

    /// Queues a copy of `packet` in leaf `class`, bypassing the classifier (for the lab and
    /// tests). A class that is missing or not a leaf gives `Dropped(class)`, counted
    /// nowhere.
    pub fn enqueue_to(&mut self, now: Instant, class: ClassId, packet: &[u8]) -> Enqueued {
        match self.index_of(class) {
            Some(i) if self.classes.get(i).is_some_and(|c| c.leaf.is_some()) => {
                self.enqueue_at(now, i, packet)
            }
            _ => Enqueued::Dropped(class),
        }
    }

    fn enqueue_at(&mut self, now: Instant, idx: usize, packet: &[u8]) -> Enqueued {
        let Some(cl) = self.classes.get_mut(idx) else {
            return Enqueued::Dropped(ClassId(0));
        };
        let id = cl.id;
        let limit = cl.p.limit as usize;
        let Some(leaf) = cl.leaf.as_mut() else {
            return Enqueued::Dropped(id);
        };
        // A datagram's fragments are queued whole or dropped whole (`fragments`).
        let limit = match self.groups.verdict(now, packet) {
            Some(Verdict::Doomed) => {
                leaf.dropped += 1;
                return Enqueued::Dropped(id);
            }
            Some(Verdict::Admitted) => limit + fragments::OVERSHOOT,
            None => limit,
        };
        if leaf.queue.len() >= limit {
            leaf.dropped += 1;
            self.groups.dropped(now, packet);
            return Enqueued::Dropped(id);
        }
        let was_idle = leaf.queue.is_empty();
        if was_idle {
            leaf.active_slot = self.active.len();
        }
        if !leaf.queue.push(&mut self.slab, packet) {
            leaf.dropped += 1;
            self.groups.dropped(now, packet);
            return Enqueued::Dropped(id);
        }
        self.groups.queued(now, packet);
        if self.backlog == 0 {
            self.clock = ns(now);
            self.lag = 0;
            self.due = None;
        }
        self.backlog += 1;
        if was_idle {
            self.activate(idx);
        }
        self.wakeup = Some(self.wakeup.map_or(now, |w| w.min(now)));
        Enqueued::Queued(id)
    }

    /// The next packet HTB lets go at `now`, copied into `buf` (length returned), with
    /// the leaf it came from. `None` when nothing may go now. A packet longer than `buf`
    /// is dropped (counted at its leaf) and the next one is tried.
    ///
    /// A call later than [`Shaper::poll_timeout`] asked for is served as if it had come on
    /// time, for up to [`CATCH_UP`]: the classes' clock stays behind `now` by the driver's
    /// lateness and steps from event to event towards `now` whenever no class may send, so
    /// the packets they would have let go meanwhile leave back to back and no class loses
    /// the tokens of the driver's lateness. The link bucket stays on `now`: the link was
    /// idle meanwhile, and it never carries more than its rate. A driver on time sees the
    /// kernel's HTB.
    pub fn dequeue(&mut self, now: Instant, buf: &mut [u8]) -> Option<(usize, ClassId)> {
        let real = ns(now);
        let late = self.due.map_or(0, |d| real.saturating_sub(d).max(0));
        let behind = self
            .lag
            .saturating_add(late)
            .min(CATCH_UP.as_nanos() as i64);
        let mut t = self.clock.max(real.saturating_sub(behind)).min(real);
        loop {
            self.clock = t;
            self.lag = real - t;
            if self.active.is_empty() {
                self.wakeup = None;
                return None;
            }
            if !self.link.open(real) {
                let reopens = self.link.ready_at(real).max(real.saturating_add(1));
                self.due = Some(reopens);
                self.wakeup = Some(instant_at(reopens));
                return None;
            }
            self.do_events(t);
            #[cfg(test)]
            self.check_rows(t);
            let Some((level, prio)) = self.best_row() else {
                // Behind `now`: on to the next mode change (any class's, as the kernel's
                // watchdog; a cheap step when it frees nothing).
                if let Some(next) = self.wait.first_key().filter(|&k| k > t && k <= real) {
                    t = next;
                    continue;
                }
                // Nothing changes before `now`: the classes are up to date.
                self.clock = real;
                self.lag = 0;
                let next = self
                    .classes_ready(real)
                    .max(self.link.ready_at(real))
                    .max(real.saturating_add(1));
                self.due = Some(next);
                self.wakeup = Some(instant_at(next));
                return None;
            };
            let leaf = self.lookup_leaf(level, prio)?;
            let cl = self.classes.get_mut(leaf)?;
            let id = cl.id;
            let quantum = i64::from(cl.p.quantum);
            let parent = cl.parent;
            let (row_pos, feed_pos) = (cl.row_pos, cl.feed_pos);
            let lf = cl.leaf.as_mut()?;
            let slot = lf.queue.pop(&self.slab)?;
            self.backlog -= 1;
            let pkt = self.slab.get(slot);
            let len = pkt.len();
            // Too long for `buf`, or a fragment of a doomed group: dropped, not charged.
            let fits = buf.len() >= len && self.groups.verdict(now, pkt) != Some(Verdict::Doomed);
            match buf.get_mut(..len) {
                Some(dst) if fits => dst.copy_from_slice(pkt),
                _ => lf.dropped += 1,
            }
            self.slab.put(slot);
            // `htb_dequeue_tree`: DRR with a per-level deficit.
            let lvl = usize::from(level);
            let mut advance = false;
            if fits {
                if let Some(d) = lf.deficit.get_mut(lvl) {
                    *d -= len as i64;
                    if *d < 0 {
                        *d += quantum;
                        advance = true;
                    }
                }
            }
            if lf.queue.is_empty() {
                self.deactivate(leaf);
            }
            if !fits {
                continue;
            }
            if advance {
                let p = usize::from(prio);
                let cursor = match (level, parent) {
                    (0, _) | (_, None) => self.row_ptr[0].get_mut(p).map(|c| (c, row_pos)),
                    (_, Some(par)) => self
                        .classes
                        .get_mut(par)
                        .and_then(|pc| pc.feed_ptr.get_mut(p))
                        .map(|c| (c, feed_pos)),
                };
                if let Some((c, pos)) = cursor {
                    *c = Cursor::At(pos + 1);
                }
            }
            self.charge(t, now, leaf, level, len as u64);
            self.link.charge(real, len as u64);
            self.due = None;
            self.wakeup = (self.backlog > 0).then_some(now);
            return Some((len, id));
        }
    }

    /// `htb_do_events`: every class whose mode improves by `t` gets its new mode (and, if
    /// it still is not CAN_SEND, its next event). A `t` earlier than the last one (a clock
    /// that went back) recomputes every mode instead: modes only improve with time.
    fn do_events(&mut self, t: i64) {
        if t < self.events_at {
            self.rebuild(t);
        }
        self.events_at = t;
        while let Some(i) = self.wait.pop_due(t) {
            self.update_mode(i, t);
        }
    }

    /// Brings class `i`'s mode to `t` and files its next event (`htb_change_class_mode`
    /// plus `htb_add_to_wait_tree`).
    fn update_mode(&mut self, i: usize, t: i64) {
        let Some(cl) = self.classes.get(i) else {
            return;
        };
        let (mode, event) = cl.mode_and_event(t);
        // Never due again at `t` (the arithmetic says so; this keeps the loop finite).
        let event = event.map(|e| e.max(t.saturating_add(1)));
        self.change_mode(i, mode);
        self.wait.set(i, event);
    }

    /// Recomputes every mode at `t` and relinks every backlogged leaf from scratch (at
    /// build time, after a class change, and when the clock went back). The DRR pointers
    /// and deficits are kept.
    fn rebuild(&mut self, t: i64) {
        for row in self.rows.iter_mut().flatten() {
            row.clear();
        }
        self.row_bits = 0;
        self.wait.clear();
        for i in 0..self.classes.len() {
            if let Some(cl) = self.classes.get_mut(i) {
                cl.prio_activity = 0;
                cl.feeds.iter_mut().for_each(Bits::clear);
                cl.mode = cl.mode(t);
                let event = cl.next_event(t).map(|e| e.max(t.saturating_add(1)));
                self.wait.set(i, event);
            }
        }
        for k in 0..self.active.len() {
            if let Some(&leaf) = self.active.get(k) {
                self.link_leaf(leaf);
            }
        }
        self.events_at = t;
    }

    /// `htb_activate`: a leaf's queue became non-empty.
    fn activate(&mut self, leaf: usize) {
        self.active.push(leaf);
        self.link_leaf(leaf);
    }

    /// Sets a backlogged leaf's own prio active and links it (`htb_activate` minus the
    /// list of active classes).
    fn link_leaf(&mut self, leaf: usize) {
        if let Some(cl) = self.classes.get_mut(leaf) {
            cl.prio_activity = 1 << cl.p.prio;
            self.activate_prios(leaf);
        }
    }

    /// `htb_deactivate`: a leaf's queue became empty.
    fn deactivate(&mut self, leaf: usize) {
        self.deactivate_prios(leaf);
        let Some(slot) = self.classes.get_mut(leaf).and_then(|cl| {
            cl.prio_activity = 0;
            cl.leaf.as_ref().map(|l| l.active_slot)
        }) else {
            return;
        };
        if self.active.get(slot) != Some(&leaf) {
            return;
        }
        self.active.swap_remove(slot);
        if let Some(&moved) = self.active.get(slot) {
            if let Some(l) = self.classes.get_mut(moved).and_then(|c| c.leaf.as_mut()) {
                l.active_slot = slot;
            }
        }
    }

    /// `htb_change_class_mode`: unlink with the old mode, relink with the new one.
    fn change_mode(&mut self, i: usize, mode: Mode) {
        let Some(cl) = self.classes.get_mut(i) else {
            return;
        };
        if cl.mode == mode {
            return;
        }
        if cl.prio_activity == 0 {
            cl.mode = mode;
            return;
        }
        if cl.mode != Mode::CantSend {
            self.deactivate_prios(i);
        }
        if let Some(cl) = self.classes.get_mut(i) {
            cl.mode = mode;
        }
        if mode != Mode::CantSend {
            self.activate_prios(i);
        }
    }

    /// `htb_activate_prios`: class `i`'s active prios enter its parent's feeds while it
    /// may borrow (and so on up while the parent may borrow too and did not feed those
    /// prios already), or its row when the walk ends at a class in CAN_SEND.
    fn activate_prios(&mut self, i: usize) {
        let mut c = i;
        let Some(mut mask) = self.classes.get(c).map(|cl| cl.prio_activity) else {
            return;
        };
        while mask != 0 {
            let Some(cl) = self.classes.get(c) else {
                return;
            };
            let (Mode::MayBorrow, Some(p)) = (cl.mode, cl.parent) else {
                break;
            };
            let pos = cl.feed_pos;
            let Some(pc) = self.classes.get_mut(p) else {
                return;
            };
            for prio in prios(mask) {
                let Some(feed) = pc.feeds.get_mut(prio) else {
                    continue;
                };
                if !feed.is_empty() {
                    // The parent feeds this prio already: it is linked as it should be.
                    mask &= !(1 << prio);
                }
                feed.insert(pos);
            }
            pc.prio_activity |= mask;
            c = p;
        }
        if mask != 0
            && self
                .classes
                .get(c)
                .is_some_and(|cl| cl.mode == Mode::CanSend)
        {
            self.row_update(c, mask, true);
        }
    }

    /// `htb_deactivate_prios`: the reverse of `activate_prios`, with class `i`'s current
    /// mode; a parent whose feed empties stops being active for that prio.
    fn deactivate_prios(&mut self, i: usize) {
        let mut c = i;
        let Some(mut mask) = self.classes.get(c).map(|cl| cl.prio_activity) else {
            return;
        };
        while mask != 0 {
            let Some(cl) = self.classes.get(c) else {
                return;
            };
            let (Mode::MayBorrow, Some(p)) = (cl.mode, cl.parent) else {
                break;
            };
            let pos = cl.feed_pos;
            let Some(pc) = self.classes.get_mut(p) else {
                return;
            };
            let m = mask;
            mask = 0;
            for prio in prios(m) {
                let Some(feed) = pc.feeds.get_mut(prio) else {
                    continue;
                };
                feed.remove(pos);
                if feed.is_empty() {
                    mask |= 1 << prio;
                }
            }
            pc.prio_activity &= !mask;
            c = p;
        }
        if mask != 0
            && self
                .classes
                .get(c)
                .is_some_and(|cl| cl.mode == Mode::CanSend)
        {
            self.row_update(c, mask, false);
        }
    }

    /// `htb_add_class_to_row` / `htb_remove_class_from_row`.
    fn row_update(&mut self, c: usize, mask: u8, add: bool) {
        let Some(cl) = self.classes.get(c) else {
            return;
        };
        let (level, pos) = (usize::from(cl.level), cl.row_pos);
        let Some(rows) = self.rows.get_mut(level) else {
            return;
        };
        for prio in prios(mask) {
            let Some(row) = rows.get_mut(prio) else {
                continue;
            };
            let bit = 1u64 << (level * NUMPRIO + prio);
            if add {
                row.insert(pos);
                self.row_bits |= bit;
            } else {
                row.remove(pos);
                if row.is_empty() {
                    self.row_bits &= !bit;
                }
            }
        }
    }

    /// The first non-empty row in `htb_dequeue`'s order: lowest level, then lowest prio.
    fn best_row(&self) -> Option<(u8, u8)> {
        if self.row_bits == 0 {
            return None;
        }
        let k = self.row_bits.trailing_zeros() as usize;
        Some(((k / NUMPRIO) as u8, (k % NUMPRIO) as u8))
    }

    /// The first member of row `(level, prio)` (`node == None`) or of class `node`'s
    /// feed at position `from` or later: its position and its class.
    fn member_from(
        &self,
        node: Option<usize>,
        level: usize,
        prio: usize,
        from: usize,
    ) -> Option<(usize, usize)> {
        match node {
            None => {
                let pos = self.rows.get(level)?.get(prio)?.first_from(from)?;
                Some((pos, *self.level_members.get(level)?.get(pos)?))
            }
            Some(c) => {
                let cl = self.classes.get(c)?;
                let pos = cl.feeds.get(prio)?.first_from(from)?;
                Some((pos, *cl.children.get(pos)?))
            }
        }
    }

    fn cursor_mut(
        &mut self,
        node: Option<usize>,
        level: usize,
        prio: usize,
    ) -> Option<&mut Cursor> {
        match node {
            None => self.row_ptr.get_mut(level)?.get_mut(prio),
            Some(c) => self.classes.get_mut(c)?.feed_ptr.get_mut(prio),
        }
    }

    /// `htb_lookup_leaf`: from the row's pointer down the feeds' pointers to a leaf. A
    /// pointer past its end rewinds to the first member and advances its parent's.
    fn lookup_leaf(&mut self, level: u8, prio: u8) -> Option<usize> {
        let (l, p) = (usize::from(level), usize::from(prio));
        // The inner classes descended into (the kernel's `stk`), each with its position in
        // the row or feed above it; the node read is the row while it is empty, else the
        // feed of the last one.
        let mut path = [(0usize, 0usize); MAXDEPTH];
        let mut depth = 0;
        for _ in 0..65535 {
            let node = match depth {
                0 => None,
                d => Some(path.get(d - 1)?.0),
            };
            let hit = match *self.cursor_mut(node, l, p)? {
                Cursor::End => None,
                Cursor::At(from) => self.member_from(node, l, p, from),
            };
            match hit {
                Some((pos, m)) => {
                    *self.cursor_mut(node, l, p)? = Cursor::At(pos);
                    if self.classes.get(m)?.level == 0 {
                        return Some(m);
                    }
                    *path.get_mut(depth)? = (m, pos);
                    depth += 1;
                }
                None => {
                    let (first, _) = self.member_from(node, l, p, 0)?;
                    *self.cursor_mut(node, l, p)? = Cursor::At(first);
                    if depth > 0 {
                        depth -= 1;
                        let (_, pos) = *path.get(depth)?;
                        let parent = match depth {
                            0 => None,
                            d => Some(path.get(d - 1)?.0),
                        };
                        *self.cursor_mut(parent, l, p)? = Cursor::At(pos + 1);
                    }
                }
            }
        }
        None
    }

    /// `htb_charge_class`: from the leaf up; classes at or above the lending level pay
    /// rate tokens (the lender counts a lend), those below only move their checkpoint
    /// (and count a borrow); every class pays ctokens, then takes its new mode.
    /// Balances are charged at `t` (HTB's time), the rate meter at `now`.
    fn charge(&mut self, t: i64, now: Instant, leaf: usize, level: u8, bytes: u64) {
        let now_us = now.as_micros();
        let mut c = Some(leaf);
        while let Some(i) = c {
            let Some(cl) = self.classes.get_mut(i) else {
                break;
            };
            let diff = cl.diff(t);
            let (rate_cost, ceil_cost) = cl.costs(bytes);
            if cl.level >= level {
                if cl.level == level {
                    cl.counters.lends += 1;
                }
                cl.tokens = accnt(cl.tokens, cl.p.buffer_ns, diff, rate_cost);
            } else {
                cl.counters.borrows += 1;
                cl.tokens = cl.tokens.saturating_add(diff);
            }
            cl.ctokens = accnt(cl.ctokens, cl.p.cbuffer_ns, diff, ceil_cost);
            cl.t_c = t;
            cl.counters.sent_bytes += bytes;
            cl.counters.sent_packets += 1;
            cl.counters.meter.add(now_us, bytes);
            c = cl.parent;
            // `update_mode` with the checkpoint at `t` (no time to bring forward).
            let (mode, event) = cl.mode_and_event(t);
            if mode != cl.mode {
                self.change_mode(i, mode);
            }
            self.wait.set(i, event.map(|e| e.max(t.saturating_add(1))));
        }
    }

    /// Test oracle: the rows and feeds are what the modes at `t` and the backlogged
    /// leaves make them (the derivation the structures replace), and every cached mode is
    /// the mode at `t`.
    #[cfg(test)]
    fn check_rows(&self, t: i64) {
        let mut rows = vec![[[false; NUMPRIO]; MAXDEPTH]; self.classes.len()];
        let mut feeds = vec![[false; NUMPRIO]; self.classes.len()];
        for (i, cl) in self.classes.iter().enumerate() {
            assert_eq!(cl.mode, cl.mode(t), "class {} cached mode", cl.id);
            let backlogged = cl.leaf.as_ref().is_some_and(|l| !l.queue.is_empty());
            assert_eq!(
                backlogged,
                self.active.contains(&i),
                "class {} active",
                cl.id
            );
            if !backlogged {
                continue;
            }
            let prio = usize::from(cl.p.prio);
            let mut c = i;
            loop {
                let x = &self.classes[c];
                match (x.mode(t), x.parent) {
                    (Mode::MayBorrow, Some(p)) => {
                        feeds[c][prio] = true;
                        c = p;
                    }
                    (Mode::CanSend, _) => {
                        rows[c][usize::from(x.level)][prio] = true;
                        break;
                    }
                    _ => break,
                }
            }
        }
        for (i, cl) in self.classes.iter().enumerate() {
            for prio in 0..NUMPRIO {
                let in_row = self.rows[usize::from(cl.level)][prio].contains(cl.row_pos);
                assert_eq!(
                    in_row,
                    rows[i][usize::from(cl.level)][prio],
                    "row {}",
                    cl.id
                );
                if let Some(p) = cl.parent {
                    let in_feed = self.classes[p].feeds[prio].contains(cl.feed_pos);
                    assert_eq!(in_feed, feeds[i][prio], "feed {} prio {prio}", cl.id);
                }
            }
        }
        for level in 0..MAXDEPTH {
            for prio in 0..NUMPRIO {
                let nonempty = !self.rows[level][prio].is_empty();
                assert_eq!(
                    self.row_bits & (1 << (level * NUMPRIO + prio)) != 0,
                    nonempty
                );
            }
        }
    }

    /// The watchdog's half for the classes after a dequeue found nothing at `t`: the
    /// earliest moment a backlogged leaf could be linked into a row (a mode change on its
    /// path), in the classes' time.
    fn classes_ready(&self, t: i64) -> i64 {
        let mut class_ready = i64::MAX;
        for &leaf in &self.active {
            let mut c = Some(leaf);
            while let Some(i) = c {
                let Some(cl) = self.classes.get(i) else {
                    break;
                };
                match cl.mode(t) {
                    Mode::CanSend => {
                        class_ready = class_ready.min(t);
                        break;
                    }
                    Mode::CantSend => {
                        if let Some(e) = cl.next_event(t) {
                            class_ready = class_ready.min(e);
                        }
                        break;
                    }
                    Mode::MayBorrow => {
                        if let Some(e) = cl.next_event(t) {
                            class_ready = class_ready.min(e);
                        }
                        c = cl.parent;
                    }
                }
            }
        }
        class_ready
    }

    /// When a queued packet may next go (the HTB watchdog), or `None` when all queues are
    /// empty.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.backlog == 0 {
            None
        } else {
            self.wakeup
        }
    }

    /// Sets the link rate in auto mode (no effect when the spec fixed `link_bps`).
    pub fn set_link_bps(&mut self, now: Instant, bps: u64) {
        if self.link_fixed {
            return;
        }
        self.link.set_bps(ns(now), bps, self.mtu);
        if self.backlog > 0 {
            self.wakeup = Some(now);
        }
    }

    /// The link rate in force, bit/s (0 = unknown, no outer limit).
    pub fn link_bps(&self) -> u64 {
        self.link.bps
    }

    /// Changes one class's parameters at run time (`braid class change`); its queue and
    /// statistics are kept. The parent cannot change.
    pub fn change_class(
        &mut self,
        now: Instant,
        spec: &ClassSpec,
    ) -> Result<Vec<String>, ShapeError> {
        let idx = self
            .index_of(spec.id)
            .ok_or_else(|| ShapeError(format!("class {} does not exist", spec.id)))?;
        let parent_id = self
            .classes
            .get(idx)
            .and_then(|c| c.parent)
            .and_then(|p| self.classes.get(p))
            .map(|p| p.id);
        if spec.parent != parent_id {
            return Err(ShapeError(format!(
                "class {}: the parent cannot change",
                spec.id
            )));
        }
        let mut warnings = Vec::new();
        let p = Params::from_spec(spec, self.r2q, self.mtu, &mut warnings)?;
        if let Some(cl) = self.classes.get_mut(idx) {
            // As the kernel: balances are kept (and capped by the next accounting).
            cl.p = p;
            cl.costs = Costs::NONE;
            if spec.name.is_some() {
                cl.name = spec.name.clone();
            }
            cl.spec = spec.clone();
        }
        // A new prio moves a backlogged leaf to other rows and feeds.
        self.rebuild(ns(now));
        if self.backlog > 0 {
            self.wakeup = Some(now);
        }
        Ok(warnings)
    }

    /// A class's current settings (for `braid class change`).
    /// Settings the config gave are kept as given (a quantum left to `r2q` stays
    /// derived, so a new rate gives a new quantum, as `tc class change` does).
    pub fn class_spec(&self, id: ClassId) -> Option<ClassSpec> {
        let idx = self.index_of(id)?;
        self.classes.get(idx).map(|c| c.spec.clone())
    }

    /// Every class's figures, parents before children.
    pub fn stats(&self, now: Instant) -> Vec<ClassStats> {
        let t = ns(now);
        self.classes
            .iter()
            .map(|cl| {
                let (tokens_ns, ctokens_ns) = cl.tokens_at(t);
                let (rate_measured_bps, pps_measured) = cl.counters.meter.rate(now.as_micros());
                ClassStats {
                    id: cl.id,
                    parent: cl.parent.and_then(|p| self.classes.get(p)).map(|p| p.id),
                    name: cl.name.clone(),
                    leaf: cl.leaf.is_some(),
                    rate_bps: cl.p.rate_bps,
                    ceil_bps: cl.p.ceil_bps,
                    burst: cl.p.burst,
                    cburst: cl.p.cburst,
                    prio: cl.p.prio,
                    quantum: cl.p.quantum,
                    mode: cl.mode(t).name(),
                    rate_measured_bps,
                    pps_measured,
                    sent_bytes: cl.counters.sent_bytes,
                    sent_packets: cl.counters.sent_packets,
                    dropped: cl.leaf.as_ref().map_or(0, |l| l.dropped),
                    borrows: cl.counters.borrows,
                    lends: cl.counters.lends,
                    tokens_ns,
                    ctokens_ns,
                    backlog_packets: u32::try_from(cl.backlog_packets()).unwrap_or(u32::MAX),
                    backlog_bytes: cl.leaf.as_ref().map_or(0, |l| l.queue.bytes()),
                }
            })
            .collect()
    }

    /// Packets queued in all leaves.
    pub fn backlog_packets(&self) -> usize {
        self.backlog
    }

    /// Test oracle: true when the link bucket lets a packet go at `now`.
    #[cfg(test)]
    fn link_open(&self, now: Instant) -> bool {
        self.link.open(ns(now))
    }
}
