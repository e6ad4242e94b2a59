//! STUB: being written.
use crate::sched::{Choice, PathState, Scheduler};
use crate::Instant;

/// STUB.
#[derive(Debug, Default)]
pub struct RoundRobin {}

impl Scheduler for RoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }
    fn choose(&mut self, _now: Instant, _packet: &[u8], paths: &[PathState]) -> Choice {
        paths.iter().find(|p| p.usable).map_or(Choice::Drop, |p| Choice::One(p.id))
    }
}
impl RoundRobin {
    /// STUB.
    pub fn new(_packets_per_path: u32, _seed: u64) -> Self {
        Self {}
    }
}
