//! Path emulator for the lab. STUB: contract fixed, body being written.
use core::time::Duration;

use crate::Instant;

/// What the emulated path does to packets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EmuConfig {
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Uniform random extra delay in `0..=jitter` (order kept, like a real link).
    pub jitter: Duration,
    /// Loss probability, 0.0-1.0.
    pub loss: f64,
    /// Rate limit in bit/s (0 = none), with a drop-tail queue of `queue_bytes`.
    pub rate_bps: u64,
    /// Queue size for the rate limit in bytes (0 = 100 ms at `rate_bps`).
    pub queue_bytes: u64,
    /// Outages as (start, length) after the emulator is created: everything is dropped.
    pub outages: Vec<(Duration, Duration)>,
    /// RNG seed.
    pub seed: u64,
}

/// A sans-IO emulated path: push packets in, poll them out when they arrive.
#[derive(Debug)]
pub struct Emulator {}

impl Emulator {
    /// A new emulator; outage times count from `now`.
    pub fn new(_cfg: EmuConfig, _now: Instant) -> Self {
        Self {}
    }
    /// Offer a packet; false if it was dropped (loss, outage, queue full).
    pub fn push(&mut self, _now: Instant, _packet: &[u8]) -> bool {
        false
    }
    /// A packet whose time has come, copied into `buf`; its length.
    pub fn poll(&mut self, _now: Instant, _buf: &mut [u8]) -> Option<usize> {
        None
    }
    /// When the next packet is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}
