//! The bond: the one API every driver uses. (Being written; the API below is fixed.)
use core::time::Duration;

use crate::cc::CcConfig;
use crate::path::{HealthConfig, LinkState};
use crate::reorder::ReorderStats;
use crate::sched::SchedulerConfig;
use crate::{Instant, PathId};

/// Bond-wide settings.
#[derive(Clone, Debug, PartialEq)]
pub struct BondConfig {
    /// Transmit policy.
    pub scheduler: SchedulerConfig,
    /// Probing and liveness.
    pub health: HealthConfig,
    /// Longest a gap in the sequence is waited for at the receiver (default 200 ms).
    pub reorder_max: Duration,
    /// Packets the reorder buffer holds (default 4096).
    pub reorder_capacity: usize,
    /// Longest a packet may wait in braid's queue for its path before it is dropped
    /// (default 100 ms).
    pub queue_max_delay: Duration,
    /// Largest IP packet carried (the TUN MTU).
    pub mtu: usize,
    /// Seed for randomised policies.
    pub seed: u64,
}

impl Default for BondConfig {
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            health: HealthConfig::default(),
            reorder_max: Duration::from_millis(200),
            reorder_capacity: 4096,
            queue_max_delay: Duration::from_millis(100),
            mtu: 1400,
            seed: 0,
        }
    }
}

/// One path's settings.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PathConfig {
    /// Name, unique in the bond (the same on both ends).
    pub name: String,
    /// Configured speed, bit/s (0 = measure).
    pub bps: u64,
    /// Active-backup priority.
    pub prio: i32,
    /// Congestion control.
    pub cc: CcConfig,
}

/// Why a bond operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BondError {
    /// A path of that name exists.
    DuplicatePath(String),
    /// No such path.
    NoSuchPath,
    /// The bond has the maximum number of paths.
    TooManyPaths,
}

/// A datagram to send: `len` bytes of the caller's buffer, on `path`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Transmit {
    /// The path to send on.
    pub path: PathId,
    /// Bytes of the buffer to send.
    pub len: usize,
}

/// Something the driver may want to know or log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A path came up.
    PathUp(PathId),
    /// A path went down.
    PathDown(PathId),
}

/// A path's figures, for `braid status`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PathStatus {
    /// Path id.
    pub id: u16,
    /// Name.
    pub name: String,
    /// "up" or "down".
    pub state: &'static str,
    /// Configured bit/s.
    pub bps: u64,
    /// Estimated capacity, bit/s.
    pub capacity_bps: u64,
    /// Pacing rate, bit/s.
    pub pacing_bps: u64,
    /// Smoothed RTT, µs (0 = unknown).
    pub srtt_us: u64,
    /// Loss ratio 0-1.
    pub loss: f64,
    /// Bytes queued in braid for this path.
    pub queued_bytes: u64,
    /// Bytes in flight.
    pub inflight_bytes: u64,
    /// Data datagrams sent.
    pub tx_packets: u64,
    /// Data bytes sent.
    pub tx_bytes: u64,
    /// Data datagrams received.
    pub rx_packets: u64,
    /// Data bytes received.
    pub rx_bytes: u64,
    /// Times the path went down.
    pub downs: u64,
}

/// Bond-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BondCounters {
    /// Packets read from the TUN.
    pub tun_rx: u64,
    /// Packets delivered to the TUN.
    pub tun_tx: u64,
    /// Dropped: no usable path.
    pub drop_no_path: u64,
    /// Dropped: waited too long in braid's queue.
    pub drop_queue: u64,
    /// Dropped: too large for the MTU.
    pub drop_too_big: u64,
    /// Datagrams from a path that failed to parse.
    pub bad_datagram: u64,
    /// Packets moved off a path that went down onto live ones.
    pub rescheduled: u64,
}

/// The whole bond's figures.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BondStatus {
    /// Scheduler name.
    pub scheduler: &'static str,
    /// Paths, in the order added.
    pub paths: Vec<PathStatus>,
    /// Bond counters.
    pub counters: BondCounters,
    /// Reorder buffer counters.
    pub reorder: ReorderStats,
    /// Current reorder deadline, µs.
    pub reorder_deadline_us: u64,
}

/// The bond state machine.
#[derive(Debug)]
pub struct Bond {
    _cfg: BondConfig,
}

impl Bond {
    /// A bond with no paths.
    pub fn new(cfg: BondConfig, _now: Instant) -> Self {
        Self { _cfg: cfg }
    }
    /// Add (enslave) a path.
    pub fn add_path(&mut self, _now: Instant, _cfg: PathConfig) -> Result<PathId, BondError> {
        Err(BondError::TooManyPaths)
    }
    /// Remove (emancipate) a path; its queued packets are rescheduled.
    pub fn remove_path(&mut self, _now: Instant, _id: PathId) -> Result<(), BondError> {
        Err(BondError::NoSuchPath)
    }
    /// Look a path up by name.
    pub fn path_by_name(&self, _name: &str) -> Option<PathId> {
        None
    }
    /// Change a path's configured speed.
    pub fn set_path_bps(&mut self, _id: PathId, _bps: u64) -> Result<(), BondError> {
        Err(BondError::NoSuchPath)
    }
    /// A packet read from the TUN.
    pub fn handle_tun_packet(&mut self, _now: Instant, _packet: &[u8]) {}
    /// A datagram received on a path.
    pub fn handle_datagram(&mut self, _now: Instant, _path: PathId, _bytes: &[u8]) {}
    /// A path's socket failed (interface gone, unreachable).
    pub fn handle_path_error(&mut self, _now: Instant, _path: PathId) {}
    /// The next datagram to send, written into `buf`.
    pub fn poll_transmit(&mut self, _now: Instant, _buf: &mut [u8]) -> Option<Transmit> {
        None
    }
    /// The next in-order packet for the TUN, written into `buf`.
    pub fn poll_deliver(&mut self, _now: Instant, _buf: &mut [u8]) -> Option<usize> {
        None
    }
    /// Returns the next time at which `handle_timeout` should be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// Timers.
    pub fn handle_timeout(&mut self, _now: Instant) {}
    /// Path up/down and other news.
    pub fn poll_event(&mut self) -> Option<Event> {
        None
    }
    /// Figures for `braid status`.
    pub fn status(&self) -> BondStatus {
        BondStatus {
            scheduler: "",
            paths: Vec::new(),
            counters: BondCounters::default(),
            reorder: ReorderStats::default(),
            reorder_deadline_us: 0,
        }
    }
    /// Link state of a path.
    pub fn path_state(&self, _id: PathId) -> Option<LinkState> {
        None
    }
}
