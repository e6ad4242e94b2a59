//! STUB: being written.
use crate::sched::{Choice, PathState, Scheduler};
use crate::Instant;

/// STUB.
#[derive(Debug, Default)]
pub struct Weighted {}

impl Scheduler for Weighted {
    fn name(&self) -> &'static str {
        "weighted"
    }
    fn choose(&mut self, _now: Instant, _packet: &[u8], paths: &[PathState]) -> Choice {
        paths.iter().find(|p| p.usable).map_or(Choice::Drop, |p| Choice::One(p.id))
    }
}
impl Weighted {
    /// STUB.
    pub fn new() -> Self {
        Self {}
    }
}
