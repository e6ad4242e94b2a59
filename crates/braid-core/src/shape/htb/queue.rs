//! Leaf queues (packet FIFOs threaded through one slab of reusable buffers) and the
//! per-class rate meter.

/// No slot: the end of a list.
const NIL: u32 = u32::MAX;

/// Every queued packet of every leaf, in one slab of buffers: each leaf's FIFO is a
/// singly linked list through it, and so are the free slots. A slot keeps its buffer's
/// capacity when it is freed, so in steady state queuing does not allocate, and a push or
/// pop moves a 4-byte index instead of a `Vec` through a per-leaf `VecDeque`.
#[derive(Debug, Default)]
pub(super) struct Slab {
    bufs: Vec<Vec<u8>>,
    /// Per slot, the next slot of its list (`NIL` at the end).
    next: Vec<u32>,
    /// The first free slot.
    free: Option<u32>,
}

impl Slab {
    /// A slot holding a copy of `bytes`, not yet in any list.
    #[inline]
    fn take(&mut self, bytes: &[u8]) -> Option<u32> {
        let k = match self.free {
            Some(k) => {
                let next = self.next.get_mut(k as usize)?;
                self.free = (*next != NIL).then_some(*next);
                *next = NIL;
                k
            }
            None => {
                let k = u32::try_from(self.bufs.len()).ok().filter(|&k| k != NIL)?;
                self.bufs.push(Vec::new());
                self.next.push(NIL);
                k
            }
        };
        let buf = self.bufs.get_mut(k as usize)?;
        buf.clear();
        buf.extend_from_slice(bytes);
        Some(k)
    }

    /// The packet in slot `k`.
    #[inline]
    pub(super) fn get(&self, k: u32) -> &[u8] {
        self.bufs.get(k as usize).map_or(&[], Vec::as_slice)
    }

    /// Gives slot `k` back (after its packet was read).
    #[inline]
    pub(super) fn put(&mut self, k: u32) {
        if let Some(n) = self.next.get_mut(k as usize) {
            *n = self.free.unwrap_or(NIL);
            self.free = Some(k);
        }
    }
}

/// A drop-tail FIFO of packets (the kernel's default `pfifo` leaf qdisc), as a list
/// through the shared [`Slab`].
#[derive(Debug)]
pub(super) struct Fifo {
    head: u32,
    tail: u32,
    len: usize,
    bytes: u64,
}

impl Default for Fifo {
    fn default() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            len: 0,
            bytes: 0,
        }
    }
}

impl Fifo {
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Queues a copy of `bytes` at the tail; false if the slab is out of slot numbers.
    #[inline]
    pub(super) fn push(&mut self, slab: &mut Slab, bytes: &[u8]) -> bool {
        let Some(k) = slab.take(bytes) else {
            return false;
        };
        if let Some(n) = slab.next.get_mut(self.tail as usize) {
            *n = k;
        } else {
            self.head = k;
        }
        self.tail = k;
        self.len += 1;
        self.bytes += bytes.len() as u64;
        true
    }

    /// Unlinks the head packet and returns its slot: read it with [`Slab::get`], then
    /// [`Slab::put`] it back.
    #[inline]
    pub(super) fn pop(&mut self, slab: &Slab) -> Option<u32> {
        let k = self.head;
        let next = *slab.next.get(k as usize)?;
        self.head = next;
        if next == NIL {
            self.tail = NIL;
        }
        self.len -= 1;
        self.bytes -= slab.get(k).len() as u64;
        Some(k)
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
    #[inline]
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

    #[cold]
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
    fn fifos_share_the_slab_and_reuse_its_buffers() {
        let mut slab = Slab::default();
        let (mut q, mut r) = (Fifo::default(), Fifo::default());
        assert!(q.push(&mut slab, &[1, 2, 3]));
        assert!(r.push(&mut slab, &[7]));
        assert!(q.push(&mut slab, &[4]));
        assert_eq!((q.len(), q.bytes(), r.len(), r.bytes()), (2, 4, 1, 1));
        let a = q.pop(&slab).unwrap_or(NIL);
        assert_eq!(slab.get(a), &[1, 2, 3]);
        let ptr = slab.get(a).as_ptr();
        slab.put(a);
        assert!(r.push(&mut slab, &[9, 9]));
        assert_eq!(r.bytes(), 3);
        // The freed slot (and its buffer) holds the new packet.
        let b = r.pop(&slab).unwrap_or(NIL);
        assert_eq!(slab.get(b), &[7]);
        let c = r.pop(&slab).unwrap_or(NIL);
        assert_eq!((c, slab.get(c)), (a, &[9u8, 9][..]));
        assert_eq!(slab.get(c).as_ptr(), ptr, "the returned buffer is reused");
        assert_eq!(r.pop(&slab), None);
        assert!(r.is_empty());
        let d = q.pop(&slab).unwrap_or(NIL);
        assert_eq!(slab.get(d), &[4]);
        assert_eq!((q.len(), q.bytes(), q.pop(&slab)), (0, 0, None));
    }
}
