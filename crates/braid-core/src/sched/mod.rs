//! Schedulers: which path carries the next packet.
//!
//! A scheduler sees a snapshot of every path ([`PathState`]) and the packet's bytes and
//! returns a [`Choice`]. It keeps whatever state its policy needs (EQL's queue estimate,
//! the round-robin counter, the active slave) keyed by [`PathId`]. The bond calls
//! [`Scheduler::choose`] once per packet read from the TUN, in the order read.
//!
//! One file per policy, named for it. See `docs/schedulers.md` for how each matches (or
//! deliberately departs from) the Linux driver it is named after.

use core::time::Duration;

use crate::{Frames, Instant, PathId};

mod active_backup;
pub use self::active_backup::{Options as ActiveBackupOptions, Reselect};
pub(crate) mod adaptive;
mod broadcast;
mod eql;
mod round_robin;
mod weighted;
mod xor;

/// What a scheduler may see of one path at the moment it chooses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathState {
    /// The path.
    pub id: PathId,
    /// The path is up and may carry traffic (the kernel's "can transmit").
    pub usable: bool,
    /// Configured speed in bit/s (EQL's priority, `bps` in the config); 0 when unset.
    pub bps: u64,
    /// Measured capacity in bit/s from the path's congestion controller; 0 when unknown.
    pub rate_bps: u64,
    /// Bytes waiting in braid for this path (assigned but not yet sent).
    pub queued_bytes: u64,
    /// Bytes sent on this path and not yet acknowledged by the peer.
    pub inflight_bytes: u64,
    /// Estimated one-way delay to the peer on this path (smoothed, includes queueing).
    pub one_way_delay: Duration,
    /// The path's one-way delay without queueing (half its minimum RTT); zero when unknown.
    pub base_delay: Duration,
    /// Active-backup priority: higher is preferred when the primary is down.
    pub prio: i32,
}

impl PathState {
    /// A usable path about which nothing is known yet.
    pub fn unknown(id: PathId) -> Self {
        Self {
            id,
            usable: true,
            bps: 0,
            rate_bps: 0,
            queued_bytes: 0,
            inflight_bytes: 0,
            one_way_delay: Duration::ZERO,
            base_delay: Duration::ZERO,
            prio: 0,
        }
    }

    /// The best speed known for the path in bit/s: measured if known, else configured,
    /// else 0.
    pub fn speed_bps(&self) -> u64 {
        if self.rate_bps > 0 {
            self.rate_bps
        } else {
            self.bps
        }
    }
}

/// A scheduler's decision for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Send on this path.
    One(PathId),
    /// Send a copy on every usable path (broadcast).
    All,
    /// No path can take it: drop and count.
    Drop,
}

/// A transmit policy.
pub trait Scheduler: Send + core::fmt::Debug {
    /// The policy's config name (`eql`, `round-robin`, ...).
    fn name(&self) -> &'static str;

    /// Choose the path(s) for one packet. `packet` is the IP packet as read from the TUN,
    /// or the Ethernet frame as read from a TAP (the [`crate::Frames`] the scheduler was
    /// built for; policies that hash or look at headers read them). `paths` lists every path of the bond in the
    /// order they were added; unusable paths are included with `usable == false`.
    fn choose(&mut self, now: Instant, packet: &[u8], paths: &[PathState]) -> Choice;

    /// True when the policy keeps every flow on one path (xor, active-backup): the path
    /// keeps the flow in order, so the receiver need not wait for gaps left by other
    /// paths. Data then goes as [`crate::wire::Message::PinnedData`].
    fn pins_flows(&self) -> bool {
        false
    }

    /// True when the policy already weighs each path's queue (adaptive): the bond then
    /// does not pass packets on from a full path to the policy's next choice.
    fn weighs_queues(&self) -> bool {
        false
    }

    /// Returns the next time at which [`Scheduler::handle_timeout`] should be called.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Periodic work (EQL's once-a-second drain).
    fn handle_timeout(&mut self, _now: Instant, _paths: &[PathState]) {}

    /// A path was added to the bond.
    fn path_added(&mut self, _now: Instant, _path: PathId) {}

    /// A path was removed from the bond.
    fn path_removed(&mut self, _path: PathId) {}
}

/// Which scheduler a bond runs, with its options. Built from the config file.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum SchedulerConfig {
    /// The EQL driver's choice: lowest `2^63 - bps/8 + 8*bytes_queued`, drained each second.
    Eql,
    /// bonding's balance-rr.
    RoundRobin {
        /// Packets sent on one path before moving on (0 = random path, as bonding).
        packets_per_path: u32,
    },
    /// Smooth weighted round robin by bytes, weighted by speed (measured, else configured `bps`).
    Weighted,
    /// bonding's active-backup.
    ActiveBackup(active_backup::Options),
    /// bonding's balance-xor with a transmit hash policy.
    Xor {
        /// The transmit hash.
        hash: crate::hash::HashPolicy,
    },
    /// Every packet on every usable path.
    Broadcast,
    /// Earliest expected arrival, from measured delay, rate and queue (the default).
    #[default]
    Adaptive,
}

impl SchedulerConfig {
    /// Build the scheduler. `seed` feeds policies that need randomness (round-robin with
    /// `packets_per_path = 0`); `equalize` is the bond's delay-equalisation spread
    /// (`adaptive` schedules for it); `frames` says what the packets are.
    pub fn build(&self, seed: u64, equalize: Duration, frames: Frames) -> Box<dyn Scheduler> {
        match self {
            SchedulerConfig::Eql => Box::new(eql::Eql::new()),
            SchedulerConfig::RoundRobin { packets_per_path } => {
                Box::new(round_robin::RoundRobin::new(*packets_per_path, seed).with_frames(frames))
            }
            SchedulerConfig::Weighted => Box::new(weighted::Weighted::new()),
            SchedulerConfig::ActiveBackup(opts) => {
                Box::new(active_backup::ActiveBackup::new(opts.clone()))
            }
            SchedulerConfig::Xor { hash } => Box::new(xor::Xor::new(*hash).with_frames(frames)),
            SchedulerConfig::Broadcast => Box::new(broadcast::Broadcast),
            SchedulerConfig::Adaptive => {
                Box::new(adaptive::Adaptive::with_equalize(equalize).with_frames(frames))
            }
        }
    }

    /// The config name of the policy.
    pub fn name(&self) -> &'static str {
        match self {
            SchedulerConfig::Eql => "eql",
            SchedulerConfig::RoundRobin { .. } => "round-robin",
            SchedulerConfig::Weighted => "weighted",
            SchedulerConfig::ActiveBackup(_) => "active-backup",
            SchedulerConfig::Xor { .. } => "xor",
            SchedulerConfig::Broadcast => "broadcast",
            SchedulerConfig::Adaptive => "adaptive",
        }
    }
}

/// `n` usable paths with ids `0..n` and nothing known about them (for tests).
#[cfg(test)]
pub(crate) fn test_paths(n: u16) -> Vec<PathState> {
    (0..n).map(|i| PathState::unknown(PathId(i))).collect()
}
