//! Receive-side reorder buffer and duplicate suppression.
//!
//! Packets carry the bond's 64-bit sequence number. The buffer delivers them in sequence
//! order, waits for a missing one (a *gap*) at most a deadline, then moves on; it drops
//! duplicates and counts everything it does. The rules (see also `docs/wire.md`):
//!
//! - **Start.** The first packet seen sets the expected sequence number (`next`).
//! - **In order.** A packet for `next` (or one that extends the run of held packets that
//!   starts at `next`) comes out of [`ReorderBuffer::poll`] at once.
//! - **Gap.** A packet beyond a gap is held. The gap is given up when the deadline of the
//!   first packet held behind it passes: that packet's arrival time plus the `deadline`
//!   passed with it. Then every missing sequence number up to the next held packet is
//!   *skipped* (counted) and delivery resumes. If held packets remain behind another gap,
//!   that gap's timer is again the earliest-arrived packet still held, so no packet waits
//!   much longer than its own deadline.
//! - **Late.** A packet whose sequence number was skipped is delivered at once, out of
//!   order ([`Inserted::Late`]), before anything else.
//! - **Duplicates.** Delivered and skipped sequence numbers are remembered in a bitmap of
//!   the last `history` numbers (at least 65536 and 4 × capacity): a second copy of a
//!   delivered (or late-delivered) packet is dropped ([`Inserted::Duplicate`]). A packet
//!   older than the history is dropped too (counted as `stale`), since it cannot be told
//!   apart from a duplicate.
//! - **Overflow.** A packet more than `capacity` ahead of `next` forces the window
//!   forward: held packets that fall out of it are delivered (in order), missing ones are
//!   skipped ([`Inserted::Overflow`]).
//! - **Resync.** A packet more than `history` ahead means the peer restarted (or a very
//!   long outage): held packets are flushed out in order and the window jumps to it. A peer
//!   restarting to a number more than `history` *behind* is believed only after
//!   [`RESYNC_CONFIRM`] such packets in a row, each near the previous one, with no packet
//!   inside the window between them; a single very late straggler is dropped as stale.
//!   For restarts to be recognised, a sender should start its sequence at a random value.
//! - **Wrap.** Sequence arithmetic is modulo 2^64, so a stream crossing `u64::MAX` keeps
//!   working (a sender starting at a random value could get there in theory).
//!
//! Storage: a packet's bytes live in a `Vec<u8>` taken from a pool of spare buffers when it
//! is stored and given back when it is delivered, so the buffers made are as many as the
//! packets ever held at once (at most 2 × capacity: slots and ready entries), each grown
//! to the largest packet it carried; once traffic has reached its usual depth nothing is
//! allocated. (A buffer per slot position instead made every one of 2 × capacity
//! positions allocate the first time a packet passed it, however shallow the traffic.)
use core::time::Duration;
use std::collections::VecDeque;

use crate::Instant;

/// What [`ReorderBuffer::insert`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// Stored; will come out of [`ReorderBuffer::poll`] in order.
    Buffered,
    /// Already seen (or already delivered): dropped.
    Duplicate,
    /// Its gap was already given up on; it comes out of `poll` next, out of order.
    Late,
    /// Too far ahead of the window; buffer flushed forward to make room.
    Overflow,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReorderStats {
    /// Packets delivered in order without waiting.
    pub in_order: u64,
    /// Of those, packets that went out the moment they came, never stored
    /// ([`ReorderBuffer::pass`]).
    #[cfg_attr(feature = "serde", serde(default))]
    pub passed: u64,
    /// Packets that waited for a gap to fill.
    pub reordered: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
    /// Packets that arrived after their gap was skipped (delivered out of order).
    pub late: u64,
    /// Sequence numbers given up on after the deadline.
    pub skipped: u64,
    /// Times the window overflowed.
    pub overflows: u64,
    /// Total µs packets waited in the buffer.
    pub wait_micros_total: u64,
    /// Longest wait, µs.
    pub wait_micros_max: u64,
    /// Times the window jumped to a far-away sequence number (peer restart).
    #[cfg_attr(feature = "serde", serde(default))]
    pub resyncs: u64,
    /// Packets dropped because they were older than the duplicate history (or far behind
    /// and not confirmed as a restart).
    #[cfg_attr(feature = "serde", serde(default))]
    pub stale: u64,
    /// Packets dropped because the caller's buffer was too small for them (or, never in
    /// practice, the out-of-order queue was full).
    #[cfg_attr(feature = "serde", serde(default))]
    pub dropped: u64,
    /// Packets held for delay equalisation ([`ReorderBuffer::insert_held`]).
    #[cfg_attr(feature = "serde", serde(default))]
    pub equalized: u64,
    /// Total µs those packets were held for equalisation (not counted in `wait_*`).
    #[cfg_attr(feature = "serde", serde(default))]
    pub equalize_micros_total: u64,
    /// Deliveries by how long they waited in the buffer: `wait_hist[i]` counts waits of at
    /// most [`WAIT_BUCKETS_US`]`[i]` µs (and above the one before); the last entry counts
    /// longer waits. Its sum is every delivery; the waits' total is `wait_micros_total`.
    #[cfg_attr(feature = "serde", serde(default))]
    pub wait_hist: [u64; WAIT_BUCKETS_US.len() + 1],
}

/// Upper bounds (µs) of the reorder-wait histogram's buckets ([`ReorderStats::wait_hist`]).
pub const WAIT_BUCKETS_US: [u64; 10] = [
    100, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
];

/// Far-behind packets in a row needed to believe the peer restarted below the window.
pub(crate) const RESYNC_CONFIRM: u32 = 4;

/// Smallest duplicate history, in sequence numbers.
const MIN_HISTORY: u64 = 1 << 16;
/// Largest capacity accepted (more is clamped).
const MAX_CAPACITY: usize = 1 << 20;
/// Half the sequence space: differences below it are "ahead", above it "behind".
const HALF: u64 = 1 << 63;

/// How a packet will be counted when it comes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Arrived extending the in-order run: no wait for a gap.
    InOrder,
    /// Arrived behind a gap.
    Waiting,
    /// Arrived after its gap was skipped.
    Late,
}

#[derive(Debug)]
struct Slot {
    held: bool,
    seq: u64,
    kind: Kind,
    arrived: Instant,
    expiry: Instant,
    /// Not delivered before this (delay equalisation); `arrived` when not held.
    release: Instant,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Ready {
    kind: Kind,
    arrived: Instant,
    release: Instant,
    data: Vec<u8>,
}

/// Reorders by bond sequence number.
#[derive(Debug)]
pub struct ReorderBuffer {
    /// `capacity` slots, indexed by `seq & mask`; held slots are in `[next, next + cap)`.
    slots: Vec<Slot>,
    mask: u64,
    /// Packets ready to go out before the window (late ones, flushed ones), oldest first.
    /// A fixed ring of `capacity` entries.
    ready: Vec<Ready>,
    ready_head: usize,
    ready_len: usize,
    /// Sequence numbers of `Waiting` packets, in arrival order (entries go stale lazily).
    arrivals: VecDeque<u64>,
    /// Buffers of delivered packets, for the next ones (room for 2 × capacity reserved).
    spare: Vec<Vec<u8>>,
    /// The packet [`ReorderBuffer::poll_ref`] lent last; back to `spare` at the next poll or
    /// insert.
    lent: Vec<u8>,
    /// Bit `s & history_mask` = 1 if `s` (behind `next`) was delivered, 0 if skipped.
    history: Vec<u64>,
    history_mask: u64,
    /// Expected sequence number; `None` before the first packet.
    next: Option<u64>,
    /// First sequence number at or after `next` that is not held.
    contiguous_end: u64,
    held: usize,
    /// Expiry of the gap at the head: the earliest-arrived waiting packet's deadline.
    gap_expiry: Option<Instant>,
    far_streak: u32,
    far_last: u64,
    stats: ReorderStats,
}

impl ReorderBuffer {
    /// A buffer holding up to `capacity` packets (rounded up to a power of two, at least 1
    /// and at most 2^20).
    pub fn new(capacity: usize) -> Self {
        let cap = capacity.clamp(1, MAX_CAPACITY).next_power_of_two();
        let history_len = (cap as u64 * 4).max(MIN_HISTORY);
        Self {
            slots: (0..cap)
                .map(|_| Slot {
                    held: false,
                    seq: 0,
                    kind: Kind::InOrder,
                    arrived: Instant::ZERO,
                    expiry: Instant::ZERO,
                    release: Instant::ZERO,
                    data: Vec::new(),
                })
                .collect(),
            mask: cap as u64 - 1,
            ready: (0..cap)
                .map(|_| Ready {
                    kind: Kind::Late,
                    arrived: Instant::ZERO,
                    release: Instant::ZERO,
                    data: Vec::new(),
                })
                .collect(),
            ready_head: 0,
            ready_len: 0,
            arrivals: VecDeque::with_capacity(2 * cap),
            spare: Vec::with_capacity(2 * cap),
            lent: Vec::new(),
            history: vec![0; (history_len / 64) as usize],
            history_mask: history_len - 1,
            next: None,
            contiguous_end: 0,
            held: 0,
            gap_expiry: None,
            far_streak: 0,
            far_last: 0,
            stats: ReorderStats::default(),
        }
    }

    /// Slots (the capacity after rounding).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Sequence numbers remembered for duplicate suppression.
    pub fn history(&self) -> u64 {
        self.history_mask + 1
    }

    /// The sequence number expected next; `None` before the first packet.
    pub fn next_expected(&self) -> Option<u64> {
        self.next
    }

    fn cap(&self) -> u64 {
        self.mask + 1
    }

    fn idx(&self, seq: u64) -> usize {
        (seq & self.mask) as usize
    }

    fn slot(&self, seq: u64) -> Option<&Slot> {
        self.slots.get(self.idx(seq))
    }

    fn is_held(&self, seq: u64) -> bool {
        self.slot(seq).is_some_and(|s| s.held && s.seq == seq)
    }

    fn set_history(&mut self, seq: u64, delivered: bool) {
        let bit = seq & self.history_mask;
        if let Some(word) = self.history.get_mut((bit / 64) as usize) {
            if delivered {
                *word |= 1 << (bit % 64);
            } else {
                *word &= !(1 << (bit % 64));
            }
        }
    }

    fn in_history(&self, seq: u64) -> bool {
        let bit = seq & self.history_mask;
        self.history
            .get((bit / 64) as usize)
            .is_some_and(|w| w & (1 << (bit % 64)) != 0)
    }

    /// Offer a packet. `deadline` is how long a gap in front of it may be waited for.
    pub fn insert(&mut self, now: Instant, seq: u64, deadline: Duration, data: &[u8]) -> Inserted {
        self.insert_held(now, seq, deadline, now, data)
    }

    /// Offer a packet that must not come out before `release` (delay equalisation: the
    /// packets behind it in sequence wait too). A late packet, whose gap was already
    /// given up, still goes out at once.
    pub fn insert_held(
        &mut self,
        now: Instant,
        seq: u64,
        deadline: Duration,
        release: Instant,
        data: &[u8],
    ) -> Inserted {
        // Whatever `poll_ref` lent is no longer borrowed: its buffer may take this packet.
        give_back(&mut self.spare, &mut self.lent);
        let release = release.max(now);
        let next = match self.next {
            Some(n) => n,
            None => {
                self.next = Some(seq);
                self.contiguous_end = seq;
                seq
            }
        };
        let ahead = seq.wrapping_sub(next);
        if ahead < HALF {
            self.far_streak = 0;
            if ahead > self.history_mask {
                self.resync(seq);
                self.store(now, seq, deadline, release, data);
                return Inserted::Buffered;
            }
            let mut result = Inserted::Buffered;
            if ahead >= self.cap() {
                self.stats.overflows += 1;
                self.advance_to(seq.wrapping_sub(self.mask));
                result = Inserted::Overflow;
            }
            if self.is_held(seq) {
                self.stats.duplicates += 1;
                return Inserted::Duplicate;
            }
            self.store(now, seq, deadline, release, data);
            return result;
        }
        let behind = next.wrapping_sub(seq);
        if behind <= self.history_mask {
            self.far_streak = 0;
            if self.in_history(seq) {
                self.stats.duplicates += 1;
                return Inserted::Duplicate;
            }
            self.set_history(seq, true);
            if self.push_ready(Kind::Late, now, data) {
                Inserted::Late
            } else {
                self.stats.dropped += 1;
                Inserted::Late
            }
        } else {
            // Far behind: a straggler, or a peer that restarted lower down.
            let near_last = {
                let d = seq.wrapping_sub(self.far_last);
                d <= self.cap() || d.wrapping_neg() <= self.cap()
            };
            self.far_streak = if self.far_streak > 0 && near_last {
                self.far_streak + 1
            } else {
                1
            };
            self.far_last = seq;
            if self.far_streak >= RESYNC_CONFIRM {
                self.far_streak = 0;
                self.resync(seq);
                self.store(now, seq, deadline, release, data);
                Inserted::Buffered
            } else {
                self.stats.stale += 1;
                Inserted::Duplicate
            }
        }
    }

    /// Let a packet go out at once without storing it, where storing it and polling at
    /// once would give it straight back: `seq` is the next one expected (the gap at the
    /// head, if packets behind it are held), nothing is waiting to go out before the
    /// window (late or flushed packets), and `release` is not after `now`. Counted as an
    /// in-order delivery. The caller delivers it before anything polled after this call
    /// (the packets held behind it come out at the next poll, as they would have). False
    /// (nothing done) otherwise: insert it.
    pub fn pass(&mut self, now: Instant, seq: u64, release: Instant) -> bool {
        if self.next != Some(seq) || self.ready_len > 0 || self.is_held(seq) || release > now {
            return false;
        }
        debug_assert_eq!(
            self.contiguous_end, seq,
            "next is not held: the run ends there"
        );
        give_back(&mut self.spare, &mut self.lent);
        self.far_streak = 0;
        self.delivered_next(seq);
        self.count_delivery(Kind::InOrder, now, now, now);
        self.stats.passed += 1;
        true
    }

    /// `seq`, the next one expected, went out: into the history, and the window on.
    fn delivered_next(&mut self, seq: u64) {
        self.set_history(seq, true);
        self.next = Some(seq.wrapping_add(1));
        self.advance_contiguous();
    }

    /// Put a packet for `seq` (in `[next, next + cap)`, not held) into its slot.
    fn store(&mut self, now: Instant, seq: u64, deadline: Duration, release: Instant, data: &[u8]) {
        let in_order = seq == self.contiguous_end;
        let idx = self.idx(seq);
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        slot.held = true;
        slot.seq = seq;
        slot.kind = if in_order {
            Kind::InOrder
        } else {
            Kind::Waiting
        };
        slot.arrived = now;
        slot.expiry = now + deadline;
        slot.release = release;
        fill(&mut self.spare, &mut slot.data, data);
        self.held += 1;
        if in_order {
            self.advance_contiguous();
        } else {
            if self.arrivals.len() >= self.arrivals.capacity() {
                self.pop_stale_arrivals();
                if self.arrivals.len() >= self.arrivals.capacity() {
                    // Cannot happen (at most 2 × capacity waiting entries are live); lose
                    // the oldest timer rather than allocate.
                    self.arrivals.pop_front();
                }
            }
            self.arrivals.push_back(seq);
            self.refresh_gap();
        }
    }

    fn advance_contiguous(&mut self) {
        let Some(next) = self.next else { return };
        if self.contiguous_end.wrapping_sub(next) >= HALF {
            self.contiguous_end = next;
        }
        while self.contiguous_end.wrapping_sub(next) < self.cap()
            && self.is_held(self.contiguous_end)
        {
            self.contiguous_end = self.contiguous_end.wrapping_add(1);
        }
    }

    fn pop_stale_arrivals(&mut self) {
        let Some(next) = self.next else { return };
        while let Some(&front) = self.arrivals.front() {
            let live = front.wrapping_sub(next) < self.cap()
                && self
                    .slot(front)
                    .is_some_and(|s| s.held && s.seq == front && s.kind == Kind::Waiting);
            if live {
                break;
            }
            self.arrivals.pop_front();
        }
    }

    /// Recompute the head gap's expiry from the earliest-arrived waiting packet.
    fn refresh_gap(&mut self) {
        self.pop_stale_arrivals();
        self.gap_expiry = self
            .arrivals
            .front()
            .and_then(|&s| self.slot(s))
            .map(|s| s.expiry);
    }

    fn push_ready(&mut self, kind: Kind, arrived: Instant, data: &[u8]) -> bool {
        if self.ready_len >= self.ready.len() {
            return false;
        }
        let i = (self.ready_head + self.ready_len) % self.ready.len();
        match self.ready.get_mut(i) {
            Some(r) => {
                r.kind = kind;
                r.arrived = arrived;
                r.release = arrived;
                fill(&mut self.spare, &mut r.data, data);
                self.ready_len += 1;
                true
            }
            None => false,
        }
    }

    /// Move the held packet at `seq` (if any) to the ready queue; returns whether one was.
    fn flush_slot(&mut self, seq: u64) -> bool {
        if !self.is_held(seq) {
            return false;
        }
        let idx = self.idx(seq);
        let full = self.ready_len >= self.ready.len();
        let tail = (self.ready_head + self.ready_len) % self.ready.len().max(1);
        self.held = self.held.saturating_sub(1);
        let Some(slot) = self.slots.get_mut(idx) else {
            return false;
        };
        slot.held = false;
        if full {
            self.stats.dropped += 1;
            return true;
        }
        if let Some(r) = self.ready.get_mut(tail) {
            core::mem::swap(&mut r.data, &mut slot.data);
            r.kind = if slot.kind == Kind::InOrder {
                Kind::InOrder
            } else {
                Kind::Waiting
            };
            r.arrived = slot.arrived;
            r.release = slot.release;
            self.ready_len += 1;
        }
        true
    }

    /// Move `next` forward to `target` (within `history` of it): held packets before it go
    /// out in order, missing ones are skipped.
    fn advance_to(&mut self, target: u64) {
        let Some(mut next) = self.next else { return };
        while next != target {
            if self.held > 0 && self.flush_slot(next) {
                self.set_history(next, true);
            } else {
                self.set_history(next, false);
                self.stats.skipped += 1;
            }
            next = next.wrapping_add(1);
        }
        self.next = Some(next);
        self.advance_contiguous();
        self.refresh_gap();
    }

    /// The sender restarted (it said so): flush everything held, in order, forget the
    /// history, and let the next packet set the window, wherever its number is.
    pub fn restart(&mut self) {
        let next = self.next.unwrap_or(0);
        self.resync(next);
        self.next = None;
    }

    /// Jump to `seq`: flush everything held, in order, and forget the history.
    fn resync(&mut self, seq: u64) {
        self.stats.resyncs += 1;
        if let Some(mut next) = self.next {
            let mut left = self.cap();
            while self.held > 0 && left > 0 {
                self.flush_slot(next);
                next = next.wrapping_add(1);
                left -= 1;
            }
        }
        self.held = 0;
        for s in &mut self.slots {
            s.held = false;
        }
        self.history.fill(0);
        self.arrivals.clear();
        self.gap_expiry = None;
        self.next = Some(seq);
        self.contiguous_end = seq;
    }

    /// The next packet to deliver, copied into `buf`; its length.
    ///
    /// A packet longer than `buf` is dropped (counted in `dropped`) and the next one is
    /// tried.
    pub fn poll(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        loop {
            let (kind, arrived, release) = self.take_next(now, true)?;
            let n = self.lent.len();
            if let Some(dst) = buf.get_mut(..n) {
                dst.copy_from_slice(&self.lent);
                self.count_delivery(kind, now, arrived, release);
                return Some(n);
            }
            self.stats.dropped += 1;
        }
    }

    /// The next packet to deliver, lent until the next call (its buffer then goes back to
    /// the pool): what [`ReorderBuffer::poll`] does without copying it out.
    pub fn poll_ref(&mut self, now: Instant) -> Option<&[u8]> {
        self.lend_next(now, true)
    }

    /// [`ReorderBuffer::poll_ref`], except that a gap is never given up: only what is
    /// due with no gap in front of it comes out. For draining the buffer while input is
    /// still being read: a gap whose deadline passed is given up only once everything
    /// read by then is in, so that a packet already waiting in another path's socket
    /// still fills it.
    pub fn poll_ready_ref(&mut self, now: Instant) -> Option<&[u8]> {
        self.lend_next(now, false)
    }

    /// The next packet due, counted and lent ([`ReorderBuffer::take_next`]).
    fn lend_next(&mut self, now: Instant, give_up: bool) -> Option<&[u8]> {
        let (kind, arrived, release) = self.take_next(now, give_up)?;
        self.count_delivery(kind, now, arrived, release);
        Some(&self.lent)
    }

    /// Move the next packet due into `lent` (the one lent before goes back to the pool):
    /// its kind, arrival and release, for [`ReorderBuffer::count_delivery`]. A gap at
    /// the head whose deadline passed is given up if `give_up`, else nothing comes out.
    fn take_next(&mut self, now: Instant, give_up: bool) -> Option<(Kind, Instant, Instant)> {
        give_back(&mut self.spare, &mut self.lent);
        if self.ready_len > 0 {
            if self
                .ready
                .get(self.ready_head)
                .is_some_and(|r| r.release > now)
            {
                return None;
            }
            let head = self.ready_head;
            self.ready_head = (self.ready_head + 1) % self.ready.len();
            self.ready_len -= 1;
            let r = self.ready.get_mut(head)?;
            core::mem::swap(&mut self.lent, &mut r.data);
            return Some((r.kind, r.arrived, r.release));
        }
        if self.held == 0 {
            return None;
        }
        let next = self.next?;
        if !self.is_held(next) {
            // Without a timer (never in practice) the gap is given up at once.
            if !give_up || self.gap_expiry.is_some_and(|t| t > now) {
                return None;
            }
            self.skip_gap();
        }
        let next = self.next?;
        let idx = self.idx(next);
        let slot = self.slots.get_mut(idx)?;
        if !(slot.held && slot.seq == next) {
            // Cannot happen: `skip_gap` stops at a held packet.
            return None;
        }
        if slot.release > now {
            return None;
        }
        slot.held = false;
        let taken = (slot.kind, slot.arrived, slot.release);
        core::mem::swap(&mut self.lent, &mut slot.data);
        self.held -= 1;
        self.delivered_next(next);
        if taken.0 == Kind::Waiting {
            self.refresh_gap();
        }
        Some(taken)
    }

    /// Give up the gap at the head: skip up to the first held packet.
    fn skip_gap(&mut self) {
        let Some(mut next) = self.next else { return };
        let mut left = self.cap();
        while left > 0 && !self.is_held(next) {
            self.set_history(next, false);
            self.stats.skipped += 1;
            next = next.wrapping_add(1);
            left -= 1;
        }
        self.next = Some(next);
        self.advance_contiguous();
        self.refresh_gap();
    }

    /// Give up at once on the missing sequence numbers in front of the buffer that are
    /// below `seq`: the caller knows they can no longer arrive (every path that could
    /// carry them has delivered something later, and paths are FIFO). Counted as
    /// skipped; one arriving after all is late, as after a deadline.
    pub fn give_up_before(&mut self, seq: u64) {
        let Some(mut next) = self.next else { return };
        if self.held == 0 {
            return;
        }
        let mut left = self.cap();
        let mut moved = false;
        while left > 0 && (seq.wrapping_sub(next) as i64) > 0 && !self.is_held(next) {
            self.set_history(next, false);
            self.stats.skipped += 1;
            next = next.wrapping_add(1);
            left -= 1;
            moved = true;
        }
        if moved {
            self.next = Some(next);
            self.advance_contiguous();
            self.refresh_gap();
        }
    }

    /// Count a delivery: its wait for gaps is from `release` (or arrival) to now; the
    /// equalisation hold from arrival to `release` is counted apart.
    fn count_delivery(&mut self, kind: Kind, now: Instant, arrived: Instant, release: Instant) {
        match kind {
            Kind::InOrder => self.stats.in_order += 1,
            Kind::Waiting => self.stats.reordered += 1,
            Kind::Late => self.stats.late += 1,
        }
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        if release > arrived {
            self.stats.equalized += 1;
            let hold = micros(release.saturating_since(arrived));
            self.stats.equalize_micros_total =
                self.stats.equalize_micros_total.saturating_add(hold);
        }
        let wait = micros(now.saturating_since(release.max(arrived)));
        self.stats.wait_micros_total = self.stats.wait_micros_total.saturating_add(wait);
        self.stats.wait_micros_max = self.stats.wait_micros_max.max(wait);
        let bucket = WAIT_BUCKETS_US.partition_point(|&b| b < wait);
        if let Some(n) = self.stats.wait_hist.get_mut(bucket) {
            *n += 1;
        }
    }

    /// When `poll` should next be called: when the waited-for gap expires, or (a time not
    /// after now) when a packet is ready. `None` when nothing is held.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.ready_len > 0 {
            return self.ready.get(self.ready_head).map(|r| r.release);
        }
        if self.held == 0 {
            return None;
        }
        let next = self.next?;
        if self.is_held(next) {
            return self.slot(next).map(|s| s.release);
        }
        // Without a timer (never in practice) give the gap up at once.
        Some(self.gap_expiry.unwrap_or(Instant::ZERO))
    }

    /// Counters.
    pub fn stats(&self) -> ReorderStats {
        self.stats
    }

    /// Packets held now (waiting in the window or ready to go out).
    pub fn len(&self) -> usize {
        self.held + self.ready_len
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Put `data` into `dst`, which takes a spare buffer first if it has none.
fn fill(spare: &mut Vec<Vec<u8>>, dst: &mut Vec<u8>, data: &[u8]) {
    if dst.capacity() == 0 {
        if let Some(b) = spare.pop() {
            *dst = b;
        }
    }
    dst.clear();
    dst.extend_from_slice(data);
}

/// A delivered packet's buffer back to the spares (dropped if they are full, which the
/// 2 × capacity bound on live buffers rules out).
fn give_back(spare: &mut Vec<Vec<u8>>, data: &mut Vec<u8>) {
    if data.capacity() > 0 && spare.len() < spare.capacity() {
        spare.push(core::mem::take(data));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    const MS: Duration = Duration::from_millis(1);

    fn t(micros: u64) -> Instant {
        Instant::from_micros(micros)
    }

    fn payload(seq: u64) -> [u8; 8] {
        seq.to_be_bytes()
    }

    fn ins(rb: &mut ReorderBuffer, now: u64, seq: u64, deadline: Duration) -> Inserted {
        rb.insert(t(now), seq, deadline, &payload(seq))
    }

    /// Everything `poll` gives at `now`, as sequence numbers.
    fn drain(rb: &mut ReorderBuffer, now: Instant) -> Vec<u64> {
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        while let Some(n) = rb.poll(now, &mut buf) {
            assert_eq!(n, 8);
            out.push(u64::from_be_bytes(buf[..8].try_into().expect("8 bytes")));
        }
        out
    }

    fn held(rb: &mut ReorderBuffer, now: u64, seq: u64, release: u64) -> Inserted {
        rb.insert_held(t(now), seq, 100 * MS, t(release), &payload(seq))
    }

    /// The next packet passes, even with packets held behind it; one behind a gap, a
    /// held one's copy, a late one waiting to go out or a hold stops it. Counted as an
    /// in-order delivery.
    #[test]
    fn the_next_packet_passes_unless_something_must_go_first() {
        let mut rb = ReorderBuffer::new(16);
        // Nothing seen yet: the first packet sets the start, stored as ever.
        assert!(!rb.pass(t(0), 0, t(0)));
        assert_eq!(ins(&mut rb, 0, 0, 10 * MS), Inserted::Buffered);
        assert!(!rb.pass(t(0), 1, t(0)), "0 is waiting to be polled");
        assert_eq!(drain(&mut rb, t(0)), vec![0]);
        assert!(rb.pass(t(1), 1, t(1)));
        assert!(!rb.pass(t(2), 1, t(2)), "1 again: not the next one");
        assert!(!rb.pass(t(2), 3, t(2)), "3 is behind a gap");
        assert_eq!(ins(&mut rb, 2, 3, 10 * MS), Inserted::Buffered);
        assert!(!rb.pass(t(3), 3, t(3)), "3 again: held already");
        // 2 fills the gap in front of 3: it goes, and 3 comes out at the next poll.
        assert!(rb.pass(t(3), 2, t(3)));
        assert_eq!(drain(&mut rb, t(3)), vec![3]);
        assert!(!rb.pass(t(4), 4, t(5)), "held back until 5");
        assert!(rb.pass(t(4), 4, t(4)));
        // Passed ones are in the duplicate history.
        assert_eq!(ins(&mut rb, 5, 4, 10 * MS), Inserted::Duplicate);
        // 5 is given up (6 came and its deadline passed); 5 then comes late and waits
        // to go out: 7 does not pass it.
        assert_eq!(ins(&mut rb, 5, 6, Duration::ZERO), Inserted::Buffered);
        assert_eq!(drain(&mut rb, t(5)), vec![6]);
        assert_eq!(ins(&mut rb, 6, 5, 10 * MS), Inserted::Late);
        assert!(!rb.pass(t(6), 7, t(6)), "5 is ready to go out first");
        assert_eq!(drain(&mut rb, t(6)), vec![5]);
        assert!(rb.pass(t(6), 7, t(6)));
        let s = rb.stats();
        assert_eq!(
            (s.in_order, s.passed, s.reordered, s.duplicates),
            (5, 4, 2, 1)
        );
        assert_eq!((s.skipped, s.late), (1, 1));
        assert!(rb.is_empty());
    }

    #[test]
    fn polling_what_is_ready_never_gives_a_gap_up() {
        let mut rb = ReorderBuffer::new(16);
        let ready = |rb: &mut ReorderBuffer, now| {
            core::iter::from_fn(|| rb.poll_ready_ref(now).map(|p| p.to_vec()))
                .map(|p| u64::from_be_bytes(p[..8].try_into().expect("8 bytes")))
                .collect::<Vec<_>>()
        };
        assert_eq!(ins(&mut rb, 0, 0, 10 * MS), Inserted::Buffered);
        assert_eq!(ins(&mut rb, 0, 2, 10 * MS), Inserted::Buffered);
        assert_eq!(ready(&mut rb, t(0)), vec![0]);
        // Long past 2's deadline, the gap at 1 stays until a poll gives it up.
        assert!(ready(&mut rb, t(50_000)).is_empty());
        assert_eq!(rb.stats().skipped, 0);
        assert_eq!(ins(&mut rb, 50_000, 1, 10 * MS), Inserted::Buffered);
        assert_eq!(ready(&mut rb, t(50_000)), vec![1, 2]);
        assert_eq!(ins(&mut rb, 50_000, 4, 10 * MS), Inserted::Buffered);
        assert!(ready(&mut rb, t(90_000)).is_empty());
        assert_eq!(drain(&mut rb, t(90_000)), vec![4]);
        assert_eq!((rb.stats().skipped, rb.stats().late), (1, 0));
    }

    #[test]
    fn held_packets_wait_for_their_release_and_keep_order() {
        let mut rb = ReorderBuffer::new(16);
        // 0 held until 55 ms; 1 (not held) arrives behind it and waits with it.
        assert_eq!(held(&mut rb, 0, 0, 55_000), Inserted::Buffered);
        assert_eq!(ins(&mut rb, 1_000, 1, 100 * MS), Inserted::Buffered);
        assert_eq!(rb.poll_timeout(), Some(t(55_000)));
        assert!(drain(&mut rb, t(54_999)).is_empty());
        assert_eq!(drain(&mut rb, t(55_000)), vec![0, 1]);
        // A release in the past counts as now.
        assert_eq!(held(&mut rb, 60_000, 2, 10), Inserted::Buffered);
        assert_eq!(rb.poll_timeout(), Some(t(60_000)));
        assert_eq!(drain(&mut rb, t(60_000)), vec![2]);
        let st = rb.stats();
        assert_eq!(st.equalized, 1);
        assert_eq!(st.equalize_micros_total, 55_000);
        // The hold is not counted as waiting for a gap; packet 1 waited 54 ms behind 0.
        assert_eq!(st.wait_micros_max, 54_000);
    }

    #[test]
    fn a_gap_is_skipped_on_time_and_the_held_packet_behind_it_still_waits() {
        let mut rb = ReorderBuffer::new(16);
        assert_eq!(held(&mut rb, 0, 0, 0), Inserted::Buffered);
        assert_eq!(drain(&mut rb, t(0)), vec![0]);
        // 1 is missing; 2 arrives at 1 ms held until 80 ms, gap deadline 100 ms.
        assert_eq!(held(&mut rb, 1_000, 2, 80_000), Inserted::Buffered);
        assert_eq!(rb.poll_timeout(), Some(t(101_000)));
        assert!(drain(&mut rb, t(100_000)).is_empty());
        assert_eq!(drain(&mut rb, t(101_000)), vec![2]);
        assert_eq!(rb.stats().skipped, 1);
        // 1 turns up late: out at once, never held.
        assert_eq!(held(&mut rb, 102_000, 1, 500_000), Inserted::Late);
        assert_eq!(drain(&mut rb, t(102_000)), vec![1]);
    }

    #[test]
    fn give_up_before_skips_only_the_missing_head() {
        let mut rb = ReorderBuffer::new(16);
        let long = Duration::from_secs(10);
        ins(&mut rb, 0, 10, long);
        assert_eq!(drain(&mut rb, t(0)), vec![10]);
        // 11 and 12 missing, 13 and 15 held (14 missing too).
        ins(&mut rb, 1, 13, long);
        ins(&mut rb, 1, 15, long);
        assert!(drain(&mut rb, t(2)).is_empty());
        // Nothing below 11 to give up: no change.
        rb.give_up_before(11);
        assert!(drain(&mut rb, t(3)).is_empty());
        // 11 and 12 are known lost: 13 comes out at once; 14 is still waited for.
        rb.give_up_before(13);
        assert_eq!(drain(&mut rb, t(4)), vec![13]);
        assert_eq!(rb.stats().skipped, 2);
        // A lost one arriving after all is late, not a duplicate and not lost.
        assert_eq!(ins(&mut rb, 5, 12, long), Inserted::Late);
        rb.give_up_before(16);
        assert_eq!(drain(&mut rb, t(6)), vec![12, 15]);
        assert_eq!(rb.stats().skipped, 3);
    }

    #[test]
    fn capacity_rounds_up() {
        assert_eq!(ReorderBuffer::new(0).capacity(), 1);
        assert_eq!(ReorderBuffer::new(5).capacity(), 8);
        assert_eq!(ReorderBuffer::new(4096).capacity(), 4096);
        assert_eq!(ReorderBuffer::new(usize::MAX).capacity(), 1 << 20);
        assert_eq!(ReorderBuffer::new(8).history(), 1 << 16);
        assert_eq!(ReorderBuffer::new(1 << 15).history(), 1 << 17);
    }

    #[test]
    fn in_order_comes_out_at_once() {
        let mut rb = ReorderBuffer::new(16);
        assert!(rb.is_empty());
        assert_eq!(rb.poll_timeout(), None);
        for (i, seq) in (1000..1010).enumerate() {
            assert_eq!(
                ins(&mut rb, i as u64 * 10, seq, 10 * MS),
                Inserted::Buffered
            );
            assert_eq!(rb.len(), 1);
            assert_eq!(rb.poll_timeout(), Some(t(i as u64 * 10)));
            assert_eq!(drain(&mut rb, t(i as u64 * 10)), [seq]);
            assert!(rb.is_empty());
        }
        let s = rb.stats();
        assert_eq!(
            (s.in_order, s.reordered, s.skipped, s.wait_micros_max),
            (10, 0, 0, 0)
        );
        assert_eq!(rb.next_expected(), Some(1010));
    }

    #[test]
    fn gap_filled_before_deadline() {
        let mut rb = ReorderBuffer::new(16);
        ins(&mut rb, 0, 1, 10 * MS);
        assert_eq!(drain(&mut rb, t(0)), [1]);
        assert_eq!(ins(&mut rb, 0, 3, 10 * MS), Inserted::Buffered);
        assert_eq!(ins(&mut rb, 100, 4, 10 * MS), Inserted::Buffered);
        assert_eq!(drain(&mut rb, t(9_999)), Vec::<u64>::new());
        assert_eq!(rb.poll_timeout(), Some(t(10_000)));
        assert_eq!(rb.len(), 2);
        assert_eq!(ins(&mut rb, 5_000, 2, 10 * MS), Inserted::Buffered);
        assert_eq!(drain(&mut rb, t(5_000)), [2, 3, 4]);
        assert_eq!(rb.poll_timeout(), None);
        let s = rb.stats();
        assert_eq!((s.in_order, s.reordered, s.skipped), (2, 2, 0));
        assert_eq!(s.wait_micros_max, 5_000);
        assert_eq!(s.wait_micros_total, 5_000 + 4_900);
        // Waits 0 (1 and 2), 5000 (3) and 4900 (4): two in the first bucket, two in the
        // one up to 5 ms.
        let five_ms = WAIT_BUCKETS_US.iter().position(|&b| b == 5_000).unwrap();
        let mut want = [0; WAIT_BUCKETS_US.len() + 1];
        want[0] = 2;
        want[five_ms] = 2;
        assert_eq!(s.wait_hist, want);
    }

    #[test]
    fn gap_given_up_at_deadline_then_late_then_duplicate() {
        let mut rb = ReorderBuffer::new(16);
        ins(&mut rb, 0, 1, 10 * MS);
        drain(&mut rb, t(0));
        ins(&mut rb, 0, 3, 10 * MS);
        ins(&mut rb, 0, 4, 10 * MS);
        assert_eq!(drain(&mut rb, t(10_000)), [3, 4]);
        assert_eq!(rb.stats().skipped, 1);
        assert_eq!(ins(&mut rb, 20_000, 2, 10 * MS), Inserted::Late);
        assert_eq!(rb.poll_timeout(), Some(t(20_000)));
        assert_eq!(drain(&mut rb, t(20_000)), [2]);
        for seq in [1, 2, 3, 4] {
            assert_eq!(ins(&mut rb, 30_000, seq, 10 * MS), Inserted::Duplicate);
        }
        assert!(rb.is_empty());
        let s = rb.stats();
        assert_eq!(
            (s.late, s.duplicates, s.reordered, s.in_order),
            (1, 4, 2, 1)
        );
    }

    #[test]
    fn late_packet_goes_out_before_held_ones() {
        let mut rb = ReorderBuffer::new(16);
        ins(&mut rb, 0, 1, MS);
        ins(&mut rb, 0, 3, MS);
        assert_eq!(drain(&mut rb, t(1_000)), [1, 3]);
        ins(&mut rb, 1_000, 5, MS);
        assert_eq!(ins(&mut rb, 1_100, 2, MS), Inserted::Late);
        assert_eq!(drain(&mut rb, t(1_100)), [2]);
        assert_eq!(drain(&mut rb, t(2_000)), [5]);
    }

    #[test]
    fn next_gap_timed_from_earliest_waiting_packet() {
        // 6 arrives first, then 3: when gap 2 is given up, gap 4-5 has already been waited
        // for since 6 arrived, so it goes at once.
        let mut rb = ReorderBuffer::new(16);
        ins(&mut rb, 0, 1, 10 * MS);
        drain(&mut rb, t(0));
        ins(&mut rb, 0, 6, 10 * MS);
        ins(&mut rb, 4_000, 3, 10 * MS);
        assert_eq!(rb.poll_timeout(), Some(t(10_000)));
        assert_eq!(drain(&mut rb, t(10_000)), [3, 6]);
        assert_eq!(rb.stats().skipped, 3);

        // 3 arrives first, then 6: gap 4-5 gets until 6's deadline.
        let mut rb = ReorderBuffer::new(16);
        ins(&mut rb, 0, 1, 10 * MS);
        drain(&mut rb, t(0));
        ins(&mut rb, 0, 3, 10 * MS);
        ins(&mut rb, 4_000, 6, 10 * MS);
        assert_eq!(drain(&mut rb, t(10_000)), [3]);
        assert_eq!(rb.poll_timeout(), Some(t(14_000)));
        assert_eq!(drain(&mut rb, t(13_999)), Vec::<u64>::new());
        assert_eq!(drain(&mut rb, t(14_000)), [6]);
        assert_eq!(rb.stats().skipped, 3);
        assert_eq!(rb.stats().wait_micros_max, 10_000);
    }

    #[test]
    fn duplicate_while_held_and_zero_deadline() {
        let mut rb = ReorderBuffer::new(16);
        ins(&mut rb, 0, 10, Duration::ZERO);
        assert_eq!(ins(&mut rb, 0, 10, Duration::ZERO), Inserted::Duplicate);
        ins(&mut rb, 0, 12, Duration::ZERO);
        assert_eq!(ins(&mut rb, 0, 12, Duration::ZERO), Inserted::Duplicate);
        // A zero deadline gives a gap up at the first poll.
        assert_eq!(drain(&mut rb, t(0)), [10, 12]);
        assert_eq!(rb.stats().duplicates, 2);
    }

    #[test]
    fn first_packet_sets_start_earlier_ones_are_late() {
        let mut rb = ReorderBuffer::new(16);
        ins(&mut rb, 0, 100, MS);
        assert_eq!(ins(&mut rb, 0, 99, MS), Inserted::Late);
        // Late packets go out before anything held in the window.
        assert_eq!(drain(&mut rb, t(0)), [99, 100]);
        assert_eq!(ins(&mut rb, 0, 99, MS), Inserted::Duplicate);
    }

    #[test]
    fn overflow_flushes_in_order_and_skips() {
        let mut rb = ReorderBuffer::new(8);
        ins(&mut rb, 0, 0, 50 * MS);
        drain(&mut rb, t(0));
        for seq in 2..=8 {
            assert_eq!(ins(&mut rb, 0, seq, 50 * MS), Inserted::Buffered);
        }
        assert_eq!(rb.len(), 7);
        // 8 slots: window is [1, 9); 20 needs next = 13.
        assert_eq!(ins(&mut rb, 1_000, 20, 50 * MS), Inserted::Overflow);
        assert_eq!(rb.next_expected(), Some(13));
        let s = rb.stats();
        assert_eq!((s.overflows, s.skipped), (1, 1 + 4)); // 1, and 9..=12
        assert_eq!(drain(&mut rb, t(1_000)), [2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(ins(&mut rb, 1_000, 8, 50 * MS), Inserted::Duplicate);
        assert_eq!(ins(&mut rb, 1_000, 10, 50 * MS), Inserted::Late);
        assert_eq!(drain(&mut rb, t(1_000)), [10]);
        // 20 waits for 13..19 until its own deadline.
        assert_eq!(rb.poll_timeout(), Some(t(51_000)));
        assert_eq!(drain(&mut rb, t(51_000)), [20]);
        assert_eq!(rb.stats().skipped, 5 + 7);
    }

    #[test]
    fn far_ahead_resyncs_at_once() {
        let mut rb = ReorderBuffer::new(16);
        ins(&mut rb, 0, 5, MS);
        ins(&mut rb, 0, 7, MS);
        let far = 5 + rb.history() + 1;
        assert_eq!(ins(&mut rb, 10, far, MS), Inserted::Buffered);
        assert_eq!(rb.stats().resyncs, 1);
        assert_eq!(rb.stats().skipped, 0);
        // Old packets first, in order, then the new incarnation.
        assert_eq!(drain(&mut rb, t(10)), [5, 7, far]);
        ins(&mut rb, 10, far + 1, MS);
        assert_eq!(drain(&mut rb, t(10)), [far + 1]);
    }

    #[test]
    fn far_behind_needs_confirmation() {
        let mut rb = ReorderBuffer::new(16);
        let start = 1u64 << 40;
        for seq in start..start + 10 {
            ins(&mut rb, 0, seq, MS);
        }
        assert_eq!(drain(&mut rb, t(0)).len(), 10);
        // A straggler from long ago, then normal traffic: ignored.
        assert_eq!(ins(&mut rb, 1, 7, MS), Inserted::Duplicate);
        assert_eq!(ins(&mut rb, 1, 8, MS), Inserted::Duplicate);
        assert_eq!(ins(&mut rb, 1, start + 10, MS), Inserted::Buffered);
        assert_eq!(ins(&mut rb, 1, 9, MS), Inserted::Duplicate);
        assert_eq!(ins(&mut rb, 1, start + 11, MS), Inserted::Buffered);
        assert_eq!(rb.stats().stale, 3);
        assert_eq!(rb.stats().resyncs, 0);
        // The peer restarted at 0: believed on the RESYNC_CONFIRM-th packet.
        for seq in 0..u64::from(RESYNC_CONFIRM) - 1 {
            assert_eq!(ins(&mut rb, 2, seq, MS), Inserted::Duplicate);
        }
        let confirm = u64::from(RESYNC_CONFIRM) - 1;
        assert_eq!(ins(&mut rb, 2, confirm, MS), Inserted::Buffered);
        assert_eq!(rb.stats().resyncs, 1);
        assert_eq!(drain(&mut rb, t(2)), [start + 10, start + 11, confirm]);
        ins(&mut rb, 3, confirm + 1, MS);
        assert_eq!(drain(&mut rb, t(3)), [confirm + 1]);
        // The unconfirmed first packets, arriving again, are late (not duplicates).
        assert_eq!(ins(&mut rb, 3, 0, MS), Inserted::Late);
        assert_eq!(drain(&mut rb, t(3)), [0]);
    }

    #[test]
    fn beyond_history_behind_is_stale() {
        let mut rb = ReorderBuffer::new(16);
        let start = 1_000_000u64;
        ins(&mut rb, 0, start, MS);
        drain(&mut rb, t(0));
        // next is start + 1; the history covers the `history - 1` numbers behind it.
        let old = start + 1 - rb.history();
        assert_eq!(ins(&mut rb, 0, old, MS), Inserted::Duplicate);
        assert_eq!(rb.stats().stale, 1);
        assert_eq!(ins(&mut rb, 0, old + 1, MS), Inserted::Late);
        assert_eq!(rb.len(), 1);
    }

    #[test]
    fn wraps_past_u64_max() {
        let mut rb = ReorderBuffer::new(16);
        let base = u64::MAX - 3;
        let order = [0u64, 2, 1, 5, 3, 4, 7, 6];
        let mut out = Vec::new();
        for (i, off) in order.iter().enumerate() {
            let seq = base.wrapping_add(*off);
            assert_eq!(ins(&mut rb, i as u64, seq, MS), Inserted::Buffered);
            out.extend(drain(&mut rb, t(i as u64)));
        }
        let want: Vec<u64> = (0..8).map(|o| base.wrapping_add(o)).collect();
        assert_eq!(out, want);
        assert_eq!(ins(&mut rb, 9, u64::MAX, MS), Inserted::Duplicate);
        assert_eq!(ins(&mut rb, 9, 1, MS), Inserted::Duplicate);
    }

    #[test]
    fn small_buffer_drops_and_counts() {
        let mut rb = ReorderBuffer::new(16);
        rb.insert(t(0), 1, MS, &[1; 100]);
        rb.insert(t(0), 2, MS, &[2; 10]);
        let mut buf = [0u8; 50];
        assert_eq!(rb.poll(t(0), &mut buf), Some(10));
        assert_eq!(buf[..10], [2; 10]);
        assert_eq!(rb.stats().dropped, 1);
        assert_eq!(rb.stats().in_order, 1);
        assert!(rb.is_empty());
        assert_eq!(rb.insert(t(0), 1, MS, &[1; 100]), Inserted::Duplicate);
        // A late one that does not fit.
        rb.insert(t(0), 4, Duration::ZERO, &[4; 10]);
        assert_eq!(rb.poll(t(0), &mut buf), Some(10));
        assert_eq!(rb.insert(t(0), 3, MS, &[3; 60]), Inserted::Late);
        assert_eq!(rb.poll(t(0), &mut buf), None);
        assert_eq!(rb.stats().dropped, 2);
    }

    /// Every buffer the ring holds (slots, ready entries, spares).
    fn buffers(rb: &ReorderBuffer) -> std::collections::BTreeSet<*const u8> {
        let slots = rb.slots.iter().map(|s| &s.data);
        let ready = rb.ready.iter().map(|r| &r.data);
        slots
            .chain(ready)
            .chain(rb.spare.iter())
            .chain([&rb.lent])
            .filter(|d| d.capacity() > 0)
            .map(|d| d.as_ptr())
            .collect()
    }

    /// `poll_ref` lends what `poll` would copy, in the same order and with the same counts,
    /// and the lent buffer goes back to the pool: in-order traffic still uses one buffer.
    #[test]
    fn poll_ref_lends_what_poll_copies() {
        let (mut a, mut b) = (ReorderBuffer::new(64), ReorderBuffer::new(64));
        let mut buf = [0u8; 1500];
        for base in (0..3000u64).step_by(3) {
            // Backwards in threes: two held, then all three go.
            for seq in [base + 2, base + 1, base] {
                let data = [seq as u8; 700];
                a.insert(t(base), seq, MS, &data);
                b.insert(t(base), seq, MS, &data);
            }
            loop {
                let copied = a.poll(t(base), &mut buf).map(|n| buf[..n].to_vec());
                let lent = b.poll_ref(t(base)).map(<[u8]>::to_vec);
                assert_eq!(copied, lent);
                if lent.is_none() {
                    break;
                }
            }
        }
        assert_eq!(a.stats().in_order, b.stats().in_order);
        assert_eq!(a.stats().reordered, b.stats().reordered);
        assert!(buffers(&b).len() <= 3, "{} buffers", buffers(&b).len());
        let mut c = ReorderBuffer::new(64);
        for seq in 0..1000u64 {
            c.insert(t(seq), seq, MS, &[seq as u8; 1400]);
            assert_eq!(c.poll_ref(t(seq)), Some(&[seq as u8; 1400][..]));
        }
        assert_eq!(buffers(&c).len(), 1);
    }

    /// Buffers come from the spares and go back to them: in-order traffic through a ring of
    /// 64 uses one buffer, and traffic held three deep uses the same few, however many
    /// positions it passes.
    #[test]
    fn buffers_are_as_many_as_packets_held_at_once() {
        let mut rb = ReorderBuffer::new(64);
        let mut buf = [0u8; 1500];
        for seq in 0..1000u64 {
            rb.insert(t(seq), seq, MS, &[seq as u8; 1400]);
            assert_eq!(rb.poll(t(seq), &mut buf), Some(1400));
        }
        assert_eq!(buffers(&rb).len(), 1);
        // Three arrive backwards, then go out together.
        let mut order = Vec::new();
        for base in (1000..2000u64).step_by(3) {
            for seq in [base + 2, base + 1, base] {
                rb.insert(t(base), seq, 100 * MS, &[seq as u8; 1000]);
            }
            while let Some(n) = rb.poll(t(base), &mut buf) {
                assert_eq!(n, 1000);
                order.push(buf[0]);
            }
            if base == 1000 {
                assert!(buffers(&rb).len() <= 3, "{}", buffers(&rb).len());
            }
        }
        let last = (1000..2000u64).step_by(3).last().expect("a base") + 2;
        let expect: Vec<u8> = (1000..=last).map(|s| s as u8).collect();
        assert_eq!(order, expect);
        assert!(buffers(&rb).len() <= 3, "{} buffers", buffers(&rb).len());
    }

    /// A schedule: the primer `base`, then a permutation of `base+1 ..= base+n`, with extra
    /// copies inserted at random places.
    fn schedule() -> impl Strategy<Value = (u64, usize, Vec<u64>)> {
        (
            prop_oneof![any::<u64>(), Just(u64::MAX - 20), Just(0u64)],
            prop_oneof![Just(4usize), Just(16), Just(64)],
        )
            .prop_flat_map(|(base, cap)| {
                (1..=cap as u64).prop_flat_map(move |n| {
                    let perm = Just((1..=n).collect::<Vec<u64>>()).prop_shuffle();
                    let dups =
                        proptest::collection::vec((any::<prop::sample::Index>(), 1..=n), 0..20);
                    (perm, dups).prop_map(move |(mut order, dups)| {
                        for (at, off) in dups {
                            let i = at.index(order.len() + 1);
                            order.insert(i, off);
                        }
                        (base, cap, order)
                    })
                })
            })
    }

    proptest! {
        /// Any permutation (with duplicates) within the deadline comes out in order,
        /// exactly once.
        #[test]
        fn permutation_within_deadline_in_order_exactly_once((base, cap, order) in schedule(),
                                                             step in 0u64..100) {
            let deadline = Duration::from_micros(step * order.len() as u64 + 1);
            let mut rb = ReorderBuffer::new(cap);
            prop_assert_eq!(ins(&mut rb, 0, base, deadline), Inserted::Buffered);
            let mut out = drain(&mut rb, t(0));
            let mut seen = HashSet::new();
            let mut dups = 0;
            for (i, off) in order.iter().enumerate() {
                let now = i as u64 * step;
                let seq = base.wrapping_add(*off);
                let r = ins(&mut rb, now, seq, deadline);
                if seen.insert(off) {
                    prop_assert_eq!(r, Inserted::Buffered);
                } else {
                    prop_assert_eq!(r, Inserted::Duplicate);
                    dups += 1;
                }
                out.extend(drain(&mut rb, t(now)));
            }
            prop_assert!(rb.is_empty());
            let n = seen.len() as u64;
            let want: Vec<u64> = (0..=n).map(|o| base.wrapping_add(o)).collect();
            prop_assert_eq!(out, want);
            let s = rb.stats();
            prop_assert_eq!(s.duplicates, dups);
            prop_assert_eq!(s.in_order + s.reordered, n + 1);
            prop_assert_eq!((s.skipped, s.late, s.overflows, s.stale), (0, 0, 0, 0));
            prop_assert!(s.wait_micros_max < deadline.as_micros() as u64);
        }

        /// Packets sent at a steady pace over lossy paths with random delays and copies:
        /// every packet received comes out exactly once, in increasing order except the
        /// late ones, and none waits longer than the deadline.
        #[test]
        fn drops_delays_and_copies(
            base in any::<u64>(),
            cap in prop_oneof![Just(8usize), Just(32), Just(256)],
            deadline_us in 0u64..5_000,
            // (dropped if 0, path delay µs, delay of a second copy µs)
            pkts in proptest::collection::vec(
                (0u8..10, 0u64..8_000, proptest::option::of(0u64..8_000)),
                1..300,
            ),
        ) {
            let deadline = Duration::from_micros(deadline_us);
            // (arrival, seq offset)
            let mut arrivals = Vec::new();
            for (i, (drop, delay, copy)) in pkts.iter().enumerate() {
                let sent = i as u64 * 100;
                if *drop == 0 {
                    continue;
                }
                arrivals.push((sent + delay, i as u64));
                if let Some(d) = copy {
                    arrivals.push((sent + d, i as u64));
                }
            }
            arrivals.sort();
            let mut rb = ReorderBuffer::new(cap);
            let mut out: Vec<(u64, bool)> = Vec::new(); // (offset, was late)
            let mut late_set = HashSet::new();
            let (mut n_late, mut n_dup) = (0u64, 0u64);
            // Poll at every timeout up to `now`, as a driver would.
            let poll_until = |rb: &mut ReorderBuffer,
                              now: u64,
                              out: &mut Vec<(u64, bool)>,
                              late: &HashSet<u64>| {
                let mut turns = 0;
                while let Some(at) = rb.poll_timeout() {
                    if at > t(now) { break; }
                    turns += 1;
                    assert!(turns < 10_000, "poll_timeout {at:?} is not honoured by poll");
                    for s in drain(rb, at) {
                        let off = s.wrapping_sub(base);
                        out.push((off, late.contains(&off)));
                    }
                }
            };
            for &(at, off) in &arrivals {
                poll_until(&mut rb, at, &mut out, &late_set);
                match ins(&mut rb, at, base.wrapping_add(off), deadline) {
                    Inserted::Late => { n_late += 1; late_set.insert(off); }
                    Inserted::Duplicate => n_dup += 1,
                    Inserted::Buffered | Inserted::Overflow => {}
                }
                for s in drain(&mut rb, t(at)) {
                    let off = s.wrapping_sub(base);
                    out.push((off, late_set.contains(&off)));
                }
            }
            poll_until(&mut rb, u64::MAX / 4, &mut out, &late_set);
            prop_assert!(rb.is_empty());

            let received: HashSet<u64> = arrivals.iter().map(|a| a.1).collect();
            let delivered: Vec<u64> = out.iter().map(|o| o.0).collect();
            let unique: HashSet<u64> = delivered.iter().copied().collect();
            prop_assert_eq!(unique.len(), delivered.len(), "a packet came out twice");
            prop_assert_eq!(&unique, &received, "a received packet was lost");
            let in_seq: Vec<u64> = out.iter().filter(|o| !o.1).map(|o| o.0).collect();
            prop_assert!(in_seq.windows(2).all(|w| w[0] < w[1]), "out of order: {:?}", in_seq);

            let s = rb.stats();
            prop_assert_eq!(s.late, n_late);
            prop_assert_eq!(s.duplicates + s.stale, n_dup);
            prop_assert_eq!(s.in_order + s.reordered + s.late, delivered.len() as u64);
            // Late ones were skipped, or came before the first packet seen.
            let first = arrivals.first().map_or(0, |a| a.1);
            prop_assert!(s.late <= s.skipped + first);
            prop_assert!(s.wait_micros_max <= deadline_us, "waited {}", s.wait_micros_max);
            prop_assert_eq!(s.resyncs, 0);
        }

        /// Passing a packet at once where [`ReorderBuffer::pass`] allows it and inserting
        /// the rest: every packet received comes out once (or is counted as dropped),
        /// the ones not late in increasing order. Polled after every arrival, the packets
        /// come out in the same order, with the same counters, as when every one is
        /// inserted. (Polled after a batch, a passed packet goes out before a late one of
        /// the same batch, which would otherwise go first, and a passed one moves the
        /// window on at once.) Random losses, delays, copies and holds.
        #[test]
        fn passing_changes_nothing_but_the_copy(
            base in any::<u64>(),
            cap in prop_oneof![Just(8usize), Just(64)],
            deadline_us in 0u64..5_000,
            every in any::<bool>(),
            // (dropped if 0, path delay µs, delay of a second copy µs, hold µs, polled
            // after it arrives: a driver takes a batch of datagrams, then polls)
            pkts in proptest::collection::vec(
                (0u8..10, 0u64..3_000, proptest::option::of(0u64..3_000),
                 prop_oneof![Just(0u64), 0u64..2_000], any::<bool>()),
                1..300,
            ),
        ) {
            let deadline = Duration::from_micros(deadline_us);
            // (arrival, seq offset, hold, polled after)
            let mut arrivals = Vec::new();
            for (i, (drop, delay, copy, hold, poll)) in pkts.iter().enumerate() {
                let sent = i as u64 * 100;
                if *drop == 0 {
                    continue;
                }
                arrivals.push((sent + delay, i as u64, *hold, *poll || every));
                if let Some(d) = copy {
                    arrivals.push((sent + d, i as u64, *hold, *poll || every));
                }
            }
            arrivals.sort();
            let run = |passing: bool| {
                let mut rb = ReorderBuffer::new(cap);
                let (mut out, mut late) = (Vec::new(), HashSet::new());
                let poll_until = |rb: &mut ReorderBuffer, now: u64, out: &mut Vec<u64>| {
                    let mut turns = 0;
                    while let Some(at) = rb.poll_timeout().filter(|&at| at <= t(now)) {
                        turns += 1;
                        assert!(turns < 10_000, "poll_timeout {at:?} is not honoured by poll");
                        out.extend(drain(rb, at));
                    }
                };
                for &(at, off, hold, poll) in &arrivals {
                    if poll {
                        poll_until(&mut rb, at, &mut out);
                    }
                    let seq = base.wrapping_add(off);
                    if passing && rb.pass(t(at), seq, t(at + hold)) {
                        out.push(seq);
                    } else if rb.insert_held(t(at), seq, deadline, t(at + hold), &payload(seq))
                        == Inserted::Late
                    {
                        late.insert(seq);
                    }
                    if poll {
                        out.extend(drain(&mut rb, t(at)));
                    }
                }
                poll_until(&mut rb, u64::MAX / 4, &mut out);
                (out, late, rb.stats())
            };
            let (out, late, stats) = run(true);
            let (want, _, want_stats) = run(false);
            prop_assert_eq!(want_stats.passed, 0);
            prop_assert!(stats.passed <= stats.in_order);
            let received: HashSet<u64> = arrivals.iter().map(|a| base.wrapping_add(a.1)).collect();
            let unique: HashSet<u64> = out.iter().copied().collect();
            prop_assert_eq!(unique.len(), out.len(), "a packet came out twice");
            // Not polled for a while, a small buffer's ready ring may fill: counted drops.
            prop_assert!(unique.is_subset(&received));
            prop_assert_eq!(
                received.len() as u64,
                out.len() as u64 + stats.dropped,
                "a packet was lost"
            );
            let in_seq: Vec<u64> = out
                .iter()
                .filter(|s| !late.contains(s))
                .map(|s| s.wrapping_sub(base))
                .collect();
            prop_assert!(in_seq.windows(2).all(|w| w[0] < w[1]), "out of order: {:?}", in_seq);
            if every {
                prop_assert_eq!(out, want);
                prop_assert_eq!(ReorderStats { passed: 0, ..stats }, want_stats);
            }
        }

        /// Arbitrary operations never panic, and once time runs far enough everything
        /// held comes out.
        #[test]
        fn arbitrary_ops_never_panic(
            cap in 1usize..40,
            ops in proptest::collection::vec(
                (
                    0u8..4,
                    prop_oneof![0u64..100, any::<u64>(), Just(u64::MAX)],
                    0usize..40,
                    0u64..3_000,
                ),
                0..200,
            ),
        ) {
            let mut rb = ReorderBuffer::new(cap);
            let mut now = 0u64;
            let mut buf = vec![0u8; 64];
            for (op, seq, len, dt) in ops {
                now += dt;
                match op {
                    0 | 1 => { rb.insert(t(now), seq, Duration::from_micros(dt), &vec![7u8; len]); }
                    2 => { let _ = rb.poll(t(now), &mut buf[..len]); }
                    _ => {
                        if let Some(at) = rb.poll_timeout() {
                            let _ = rb.poll(at.max(t(now)), &mut buf);
                        }
                    }
                }
                prop_assert!(rb.len() <= 2 * rb.capacity());
            }
            while rb.poll(Instant::FAR_FUTURE, &mut buf).is_some() {}
            prop_assert!(rb.is_empty());
            prop_assert_eq!(rb.poll_timeout(), None);
        }
    }
}
