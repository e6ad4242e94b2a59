//! One path's liveness. STUB: contract fixed, body being written.
use core::time::Duration;

use crate::Instant;

/// Probe and liveness settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HealthConfig {
    /// Time between probes (default 100 ms).
    pub probe_interval: Duration,
    /// Missed probes before the path is declared down (default 3).
    pub down_after: u32,
    /// Answered probes in a row before a down path is declared up (default 2).
    pub up_after: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self { probe_interval: Duration::from_millis(100), down_after: 3, up_after: 2 }
    }
}

/// Liveness state of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Carries traffic.
    Up,
    /// Does not carry traffic; probed until it answers.
    Down,
}

/// A change of liveness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The path came up.
    Up,
    /// The path went down.
    Down,
}

/// One path's liveness state machine.
#[derive(Debug)]
pub struct PathHealth {
    state: LinkState,
}

impl PathHealth {
    /// A new path, down until `up_after` probes are answered.
    pub fn new(_cfg: HealthConfig, _now: Instant) -> Self {
        Self { state: LinkState::Down }
    }
    /// Current state.
    pub fn state(&self) -> LinkState {
        self.state
    }
    /// If a probe is due, record it as sent and return its number.
    pub fn poll_probe(&mut self, _now: Instant) -> Option<u32> {
        None
    }
    /// A probe ack arrived; `hold` is the peer's delay before answering.
    pub fn on_probe_ack(&mut self, _now: Instant, _probe_seq: u32, _hold: Duration) -> Option<Transition> {
        None
    }
    /// Any authenticated datagram arrived from the peer on this path.
    pub fn on_peer_alive(&mut self, _now: Instant) -> Option<Transition> {
        None
    }
    /// The socket reported an error (interface gone, unreachable): down at once.
    pub fn on_io_error(&mut self, _now: Instant) -> Option<Transition> {
        None
    }
    /// Missed-probe accounting.
    pub fn handle_timeout(&mut self, _now: Instant) -> Option<Transition> {
        None
    }
    /// Next time [`PathHealth::handle_timeout`] or [`PathHealth::poll_probe`] has work.
    pub fn poll_timeout(&self) -> Instant {
        Instant::FAR_FUTURE
    }
    /// Smoothed RTT from probes, if any.
    pub fn srtt(&self) -> Option<Duration> {
        None
    }
    /// Fraction of probes lost over the recent window (0.0-1.0).
    pub fn probe_loss(&self) -> f64 {
        0.0
    }
}
