//! One path's congestion control and pacing. STUB: contract fixed, body being written.
use core::time::Duration;

use crate::{wire::Ack, Instant};

/// Congestion-control settings for one path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CcConfig {
    /// Pacing rate before any measurement, bit/s (configured `bps` if set, else 1 Mbit/s).
    pub initial_rate_bps: u64,
    /// Never pace below this, bit/s.
    pub min_rate_bps: u64,
    /// Never pace above this (0 = no cap), bit/s.
    pub max_rate_bps: u64,
}

impl Default for CcConfig {
    fn default() -> Self {
        Self { initial_rate_bps: 1_000_000, min_rate_bps: 64_000, max_rate_bps: 0 }
    }
}

/// A path's capacity and delay model, and its pacer.
#[derive(Debug)]
pub struct PathCc {}

impl PathCc {
    /// A fresh model.
    pub fn new(_cfg: CcConfig, _now: Instant) -> Self {
        Self {}
    }
    /// A data datagram of `len` bytes with `path_seq` left for the network.
    /// `app_limited` is true when braid had nothing else queued for this path.
    pub fn on_send(&mut self, _now: Instant, _path_seq: u32, _len: usize, _app_limited: bool) {}
    /// Receiver feedback arrived.
    pub fn on_ack(&mut self, _now: Instant, _ack: &Ack) {}
    /// Earliest time a datagram of `len` bytes may be sent (pacing and cwnd);
    /// `None` while the congestion window is full (wait for an ack).
    pub fn next_send_time(&self, now: Instant, _len: usize) -> Option<Instant> {
        Some(now)
    }
    /// The path went down or came back: forget inflight and restart estimation, keeping
    /// the last capacity estimate as a starting point.
    pub fn reset(&mut self, _now: Instant) {}
    /// Current pacing rate, bit/s.
    pub fn pacing_rate_bps(&self) -> u64 {
        0
    }
    /// Estimated bottleneck capacity (max recent delivery rate), bit/s; 0 when unknown.
    pub fn capacity_bps(&self) -> u64 {
        0
    }
    /// Bytes sent and not yet acknowledged or declared lost.
    pub fn inflight_bytes(&self) -> u64 {
        0
    }
    /// Minimum RTT seen recently.
    pub fn min_rtt(&self) -> Option<Duration> {
        None
    }
    /// Smoothed RTT from data acks.
    pub fn srtt(&self) -> Option<Duration> {
        None
    }
    /// Fraction of data datagrams lost recently (0.0-1.0).
    pub fn loss_ratio(&self) -> f64 {
        0.0
    }
}
