//! Broadcast: every packet on every usable path; the receiver drops the copies.
use crate::sched::{Choice, PathState, Scheduler};
use crate::Instant;

/// bonding's `broadcast` mode.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Broadcast;

impl Scheduler for Broadcast {
    fn name(&self) -> &'static str {
        "broadcast"
    }
    fn choose(&mut self, _now: Instant, _packet: &[u8], paths: &[PathState]) -> Choice {
        if paths.iter().any(|p| p.usable) {
            Choice::All
        } else {
            Choice::Drop
        }
    }
}
