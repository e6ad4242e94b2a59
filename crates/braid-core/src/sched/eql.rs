//! STUB: being written.
use crate::sched::{Choice, PathState, Scheduler};
use crate::Instant;

/// STUB.
#[derive(Debug, Default)]
pub struct Eql {}

impl Scheduler for Eql {
    fn name(&self) -> &'static str {
        "eql"
    }
    fn choose(&mut self, _now: Instant, _packet: &[u8], paths: &[PathState]) -> Choice {
        paths.iter().find(|p| p.usable).map_or(Choice::Drop, |p| Choice::One(p.id))
    }
}
impl Eql {
    /// STUB.
    pub fn new() -> Self {
        Self {}
    }
}
