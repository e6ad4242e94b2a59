//! STUB: being written.
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

/// STUB.
#[derive(Debug, Default)]
pub struct ActiveBackup {}

impl ActiveBackup {
    /// STUB.
    pub fn new(_opts: Options) -> Self {
        Self {}
    }
}

impl Scheduler for ActiveBackup {
    fn name(&self) -> &'static str {
        "active-backup"
    }
    fn choose(&mut self, _now: Instant, _packet: &[u8], paths: &[PathState]) -> Choice {
        paths.iter().find(|p| p.usable).map_or(Choice::Drop, |p| Choice::One(p.id))
    }
}
