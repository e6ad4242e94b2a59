//! Leaf queues (a packet FIFO over pooled buffers) and the per-class rate meter.

use std::collections::VecDeque;

/// Spare packet buffers, shared by all leaves: in steady state every queued packet reuses
/// a buffer an earlier packet left behind, so the data path does not allocate.
#[derive(Debug, Default)]
pub(super) struct Pool {
    free: Vec<Vec<u8>>,
}

impl Pool {
    /// A buffer holding a copy of `bytes`.
    pub(super) fn filled(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(bytes);
        buf
    }

    /// Takes a buffer back.
    pub(super) fn put(&mut self, buf: Vec<u8>) {
        self.free.push(buf);
    }
}

/// A drop-tail FIFO of packets (the kernel's default `pfifo` leaf qdisc).
#[derive(Debug, Default)]
pub(super) struct Fifo {
    packets: VecDeque<Vec<u8>>,
    bytes: u64,
}

impl Fifo {
    pub(super) fn len(&self) -> usize {
        self.packets.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(super) fn push(&mut self, buf: Vec<u8>) {
        self.bytes += buf.len() as u64;
        self.packets.push_back(buf);
    }

    pub(super) fn pop(&mut self) -> Option<Vec<u8>> {
        let buf = self.packets.pop_front()?;
        self.bytes -= buf.len() as u64;
        Some(buf)
    }
}

/// Slots of the rate meter.
const SLOTS: usize = 10;
/// One slot, µs.
const SLOT_US: u64 = 100_000;

/// Bytes and packets sent in 100 ms slots; the rate is the sum of the last ten complete
/// slots, i.e. the last second.
#[derive(Clone, Debug, Default)]
pub(super) struct Meter {
    /// Index (µs / 100 ms) of the newest slot written.
    newest: u64,
    /// Where the newest slot starts, µs, and its place in the arrays (so that a packet in
    /// the newest slot, nearly every packet, costs no division).
    newest_start_us: u64,
    newest_at: usize,
    bytes: [u64; SLOTS],
    packets: [u64; SLOTS],
}

impl Meter {
    pub(super) fn add(&mut self, now_us: u64, bytes: u64) {
        if now_us.wrapping_sub(self.newest_start_us) < SLOT_US {
            if let (Some(b), Some(p)) = (
                self.bytes.get_mut(self.newest_at),
                self.packets.get_mut(self.newest_at),
            ) {
                *b += bytes;
                *p += 1;
                return;
            }
        }
        self.add_slow(now_us, bytes);
    }

    fn add_slow(&mut self, now_us: u64, bytes: u64) {
        let slot = now_us / SLOT_US;
        if slot > self.newest {
            let stale = (slot - self.newest).min(SLOTS as u64);
            for k in 0..stale {
                let i = ((slot - k) % SLOTS as u64) as usize;
                self.bytes[i] = 0;
                self.packets[i] = 0;
            }
            self.newest = slot;
        }
        // A `now` older than the newest slot is counted in the newest one.
        let i = (self.newest % SLOTS as u64) as usize;
        self.newest_at = i;
        self.newest_start_us = self.newest * SLOT_US;
        self.bytes[i] += bytes;
        self.packets[i] += 1;
    }

    /// (bit/s, packets/s) over the ten complete slots before `now_us`'s slot.
    pub(super) fn rate(&self, now_us: u64) -> (u64, u64) {
        let current = now_us / SLOT_US;
        let (mut bytes, mut packets) = (0, 0);
        for back in 1..=SLOTS as u64 {
            let Some(slot) = current.checked_sub(back) else {
                break;
            };
            if slot > self.newest || self.newest - slot >= SLOTS as u64 {
                continue;
            }
            let i = (slot % SLOTS as u64) as usize;
            bytes += self.bytes[i];
            packets += self.packets[i];
        }
        (bytes * 8, packets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meter_sums_the_last_complete_second() {
        let mut m = Meter::default();
        // 100 packets of 1000 B spread over [0 s, 1 s).
        for k in 0..100 {
            m.add(k * 10_000, 1000);
        }
        assert_eq!(
            m.rate(999_999),
            (8 * 1000 * 90, 90),
            "slot 9 is not complete yet"
        );
        assert_eq!(m.rate(1_000_000), (800_000, 100));
        assert_eq!(m.rate(1_500_000), (8 * 1000 * 50, 50));
        assert_eq!(m.rate(2_000_000), (0, 0));
        // A write long after clears every stale slot.
        m.add(5_000_000, 10);
        assert_eq!(m.rate(5_100_000), (80, 1));
    }

    #[test]
    fn fifo_tracks_bytes_and_pool_reuses_buffers() {
        let mut pool = Pool::default();
        let mut q = Fifo::default();
        q.push(pool.filled(&[1, 2, 3]));
        q.push(pool.filled(&[4]));
        assert_eq!((q.len(), q.bytes()), (2, 4));
        let a = q.pop().unwrap_or_default();
        assert_eq!(a, vec![1, 2, 3]);
        let ptr = a.as_ptr();
        pool.put(a);
        let b = pool.filled(&[9, 9]);
        assert_eq!(b.as_ptr(), ptr, "the returned buffer is reused");
        assert_eq!((q.len(), q.bytes()), (1, 1));
    }
}
