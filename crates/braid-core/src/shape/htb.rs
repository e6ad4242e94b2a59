//! The HTB shaper: Linux `sch_htb` semantics in a sans-IO state machine.
//!
//! STUB: contract only; the implementation is being written.

use core::fmt;

use super::spec::{ClassId, ClassSpec, ShapeSpec};
use crate::Instant;

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
    _private: (),
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
        let _ = (spec, link_bps, mtu, now);
        Err(ShapeError("not implemented".into()))
    }

    /// Classifies an IP packet and queues a copy in its leaf.
    pub fn enqueue(&mut self, now: Instant, packet: &[u8]) -> Enqueued {
        let _ = (now, packet);
        Enqueued::Dropped(ClassId(0))
    }

    /// The next packet HTB lets go at `now`, copied into `buf` (length returned), with
    /// the leaf it came from. `None` when nothing may go now.
    pub fn dequeue(&mut self, now: Instant, buf: &mut [u8]) -> Option<(usize, ClassId)> {
        let _ = (now, buf);
        None
    }

    /// When a queued packet may next go (the HTB watchdog), or `None` when all queues are
    /// empty.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Sets the link rate in auto mode (no effect when the spec fixed `link_bps`).
    pub fn set_link_bps(&mut self, now: Instant, bps: u64) {
        let _ = (now, bps);
    }

    /// Changes one class's parameters at run time (`braid class change`); its queue and
    /// statistics are kept. The parent cannot change.
    pub fn change_class(
        &mut self,
        now: Instant,
        spec: &ClassSpec,
    ) -> Result<Vec<String>, ShapeError> {
        let _ = (now, spec);
        Err(ShapeError("not implemented".into()))
    }

    /// A class's current settings (for `braid class change`).
    pub fn class_spec(&self, id: ClassId) -> Option<ClassSpec> {
        let _ = id;
        None
    }

    /// Every class's figures, parents before children.
    pub fn stats(&self, now: Instant) -> Vec<ClassStats> {
        let _ = now;
        Vec::new()
    }

    /// Packets queued in all leaves.
    pub fn backlog_packets(&self) -> usize {
        0
    }
}
