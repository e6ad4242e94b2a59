//! STUB: being written.
use crate::sched::{Choice, PathState, Scheduler};
use crate::Instant;

/// STUB.
#[derive(Debug, Default)]
pub struct Adaptive {}

impl Scheduler for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }
    fn choose(&mut self, _now: Instant, _packet: &[u8], paths: &[PathState]) -> Choice {
        paths.iter().find(|p| p.usable).map_or(Choice::Drop, |p| Choice::One(p.id))
    }
}
impl Adaptive {
    /// STUB.
    pub fn new() -> Self {
        Self {}
    }
}
