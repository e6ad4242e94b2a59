//! Receive-side reorder buffer. STUB: contract fixed, body being written.
use core::time::Duration;

use crate::Instant;

/// What [`ReorderBuffer::insert`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// Stored; will come out of [`ReorderBuffer::poll`] in order.
    Buffered,
    /// Already seen (or already delivered): dropped.
    Duplicate,
    /// Its gap was already given up on; it comes out of `poll` next, out of order.
    Late,
    /// Too far ahead of the window; buffer flushed forward to make room.
    Overflow,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReorderStats {
    /// Packets delivered in order without waiting.
    pub in_order: u64,
    /// Packets that waited for a gap to fill.
    pub reordered: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
    /// Packets that arrived after their gap was skipped (delivered out of order).
    pub late: u64,
    /// Sequence numbers given up on after the deadline.
    pub skipped: u64,
    /// Times the window overflowed.
    pub overflows: u64,
    /// Total µs packets waited in the buffer.
    pub wait_micros_total: u64,
    /// Longest wait, µs.
    pub wait_micros_max: u64,
}

/// Reorders by bond sequence number.
#[derive(Debug)]
pub struct ReorderBuffer {}

impl ReorderBuffer {
    /// A buffer holding up to `capacity` packets (rounded up to a power of two).
    pub fn new(_capacity: usize) -> Self {
        Self {}
    }
    /// Offer a packet. `deadline` is how long a gap in front of it may be waited for.
    pub fn insert(
        &mut self,
        _now: Instant,
        _seq: u64,
        _deadline: Duration,
        _data: &[u8],
    ) -> Inserted {
        Inserted::Duplicate
    }
    /// The next packet to deliver, copied into `buf`; its length.
    pub fn poll(&mut self, _now: Instant, _buf: &mut [u8]) -> Option<usize> {
        None
    }
    /// When a waited-for gap expires.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// Counters.
    pub fn stats(&self) -> ReorderStats {
        ReorderStats::default()
    }
    /// Packets held now.
    pub fn len(&self) -> usize {
        0
    }
    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        true
    }
}
