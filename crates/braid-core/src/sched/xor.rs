//! STUB: being written.
use crate::sched::{Choice, PathState, Scheduler};
use crate::Instant;

/// STUB.
#[derive(Debug, Default)]
pub struct Xor {}

impl Scheduler for Xor {
    fn name(&self) -> &'static str {
        "xor"
    }
    fn choose(&mut self, _now: Instant, _packet: &[u8], paths: &[PathState]) -> Choice {
        paths.iter().find(|p| p.usable).map_or(Choice::Drop, |p| Choice::One(p.id))
    }
}
impl Xor {
    /// STUB.
    pub fn new(_hash: crate::hash::HashPolicy) -> Self {
        Self {}
    }
}
