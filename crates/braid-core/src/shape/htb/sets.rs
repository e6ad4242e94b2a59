//! The kernel's ordered containers, over fixed universes: the rows and feeds (rb-trees
//! of classes keyed by classid) as bitsets over an id-sorted list of candidates, and the
//! wait queue (`wait_pq`, an rb-tree keyed by `pq_key`) as an indexed binary heap.
//! Both are sized when the tree is built and never allocate afterwards. Also the table
//! from class ids to indices.

/// A set of positions `0..len` in an id-sorted universe (a row's classes of one level, or
/// a class's children). Iterating positions in order is iterating the kernel's rb-tree
/// in classid order.
#[derive(Clone, Debug, Default)]
pub(super) struct Bits {
    words: Vec<u64>,
    count: usize,
}

impl Bits {
    /// An empty set able to hold positions `0..len`.
    pub(super) fn with_len(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(64)],
            count: 0,
        }
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.count == 0
    }

    #[inline]
    pub(super) fn insert(&mut self, pos: usize) {
        if let Some(w) = self.words.get_mut(pos / 64) {
            let bit = 1u64 << (pos % 64);
            if *w & bit == 0 {
                *w |= bit;
                self.count += 1;
            }
        }
    }

    #[inline]
    pub(super) fn remove(&mut self, pos: usize) {
        if let Some(w) = self.words.get_mut(pos / 64) {
            let bit = 1u64 << (pos % 64);
            if *w & bit != 0 {
                *w &= !bit;
                self.count -= 1;
            }
        }
    }

    #[cfg(test)]
    pub(super) fn contains(&self, pos: usize) -> bool {
        self.words
            .get(pos / 64)
            .is_some_and(|w| w & (1u64 << (pos % 64)) != 0)
    }

    pub(super) fn clear(&mut self) {
        self.words.fill(0);
        self.count = 0;
    }

    /// The first member at or after `from`.
    #[inline]
    pub(super) fn first_from(&self, from: usize) -> Option<usize> {
        if self.count == 0 {
            return None;
        }
        let mut k = from / 64;
        let mut w = self.words.get(k)? & (!0u64 << (from % 64));
        loop {
            if w != 0 {
                return Some(k * 64 + w.trailing_zeros() as usize);
            }
            k += 1;
            w = *self.words.get(k)?;
        }
    }
}

/// Class ids to indices in O(1): open addressing with linear probing over a power-of-two
/// table at most half full, keyed by a multiplicative hash of the handle (the
/// classifier's answer, or the caller's class, is looked up once per packet; a binary
/// search over 1000 ids took about ten dependent, mispredicted steps).
#[derive(Clone, Debug, Default)]
pub(super) struct IdTable {
    /// `(id, index)`; index `u32::MAX` marks an empty slot.
    slots: Vec<(u32, u32)>,
    shift: u32,
}

impl IdTable {
    pub(super) fn new(entries: impl ExactSizeIterator<Item = (u32, usize)>) -> Self {
        let size = (entries.len() * 2).next_power_of_two().max(2);
        let mut t = Self {
            slots: vec![(0, u32::MAX); size],
            shift: 64 - size.trailing_zeros(),
        };
        for (id, index) in entries {
            let Ok(index) = u32::try_from(index) else {
                continue;
            };
            let mask = t.slots.len() - 1;
            let mut k = t.home(id);
            while let Some(slot) = t.slots.get_mut(k) {
                if slot.1 == u32::MAX || slot.0 == id {
                    *slot = (id, index);
                    break;
                }
                k = (k + 1) & mask;
            }
        }
        t
    }

    fn home(&self, id: u32) -> usize {
        (u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline]
    pub(super) fn get(&self, id: u32) -> Option<usize> {
        let mask = self.slots.len().wrapping_sub(1);
        let mut k = self.home(id);
        loop {
            let &(key, index) = self.slots.get(k)?;
            if index == u32::MAX {
                return None;
            }
            if key == id {
                return Some(index as usize);
            }
            k = (k + 1) & mask;
        }
    }
}

const ABSENT: usize = usize::MAX;

/// The classes not in CAN_SEND, by the time their mode next improves (the kernel's
/// per-level `wait_pq` keyed by `pq_key`, merged into one queue: braid processes every
/// due event before it reads any row, as the kernel does before it reads each level's).
#[derive(Clone, Debug, Default)]
pub(super) struct WaitQueue {
    /// Min-heap of `(pq_key ns, class)`.
    heap: Vec<(i64, usize)>,
    /// Per class, its index in `heap` (`ABSENT` when it waits for nothing).
    slot: Vec<usize>,
}

impl WaitQueue {
    pub(super) fn new(classes: usize) -> Self {
        Self {
            heap: Vec::with_capacity(classes),
            slot: vec![ABSENT; classes],
        }
    }

    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.slot.fill(ABSENT);
    }

    /// Class `class` next changes mode at `key` (`None`: it is in CAN_SEND, no event).
    #[inline]
    pub(super) fn set(&mut self, class: usize, key: Option<i64>) {
        let Some(&k) = self.slot.get(class) else {
            return;
        };
        match (key, k) {
            (None, ABSENT) => {}
            (None, _) => self.remove_at(k),
            (Some(key), ABSENT) => {
                self.heap.push((key, class));
                let last = self.heap.len() - 1;
                if let Some(s) = self.slot.get_mut(class) {
                    *s = last;
                }
                self.sift_up(last);
            }
            (Some(key), _) => {
                match self.heap.get_mut(k) {
                    Some(e) if e.0 != key => e.0 = key,
                    _ => return,
                }
                let k = self.sift_up(k);
                self.sift_down(k);
            }
        }
    }

    /// The earliest event, if any.
    #[inline]
    pub(super) fn first_key(&self) -> Option<i64> {
        self.heap.first().map(|&(key, _)| key)
    }

    /// Takes out a class whose event is due at `t` (`htb_do_events`), if any.
    #[inline]
    pub(super) fn pop_due(&mut self, t: i64) -> Option<usize> {
        let &(key, class) = self.heap.first()?;
        if key > t {
            return None;
        }
        self.remove_at(0);
        Some(class)
    }

    fn remove_at(&mut self, k: usize) {
        let Some(last) = self.heap.len().checked_sub(1) else {
            return;
        };
        self.swap(k, last);
        if let Some((_, class)) = self.heap.pop() {
            if let Some(s) = self.slot.get_mut(class) {
                *s = ABSENT;
            }
        }
        if k < self.heap.len() {
            let k = self.sift_up(k);
            self.sift_down(k);
        }
    }

    fn key(&self, k: usize) -> i64 {
        self.heap.get(k).map_or(i64::MAX, |e| e.0)
    }

    fn swap(&mut self, a: usize, b: usize) {
        if a == b || a >= self.heap.len() || b >= self.heap.len() {
            return;
        }
        self.heap.swap(a, b);
        for k in [a, b] {
            if let Some(&(_, class)) = self.heap.get(k) {
                if let Some(s) = self.slot.get_mut(class) {
                    *s = k;
                }
            }
        }
    }

    /// Moves entry `k` up while it is earlier than its parent; returns where it ends.
    fn sift_up(&mut self, mut k: usize) -> usize {
        while k > 0 {
            let parent = (k - 1) / 2;
            if self.key(k) >= self.key(parent) {
                break;
            }
            self.swap(k, parent);
            k = parent;
        }
        k
    }

    fn sift_down(&mut self, mut k: usize) {
        loop {
            let (l, r) = (2 * k + 1, 2 * k + 2);
            let mut min = k;
            if l < self.heap.len() && self.key(l) < self.key(min) {
                min = l;
            }
            if r < self.heap.len() && self.key(r) < self.key(min) {
                min = r;
            }
            if min == k {
                return;
            }
            self.swap(k, min);
            k = min;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_find_the_next_member_across_words() {
        let mut b = Bits::with_len(200);
        assert_eq!(b.first_from(0), None);
        b.insert(3);
        b.insert(130);
        b.insert(130);
        assert_eq!(b.first_from(0), Some(3));
        assert_eq!(b.first_from(3), Some(3));
        assert_eq!(b.first_from(4), Some(130));
        assert_eq!(b.first_from(131), None);
        assert_eq!(b.first_from(500), None);
        b.remove(3);
        assert_eq!(b.first_from(0), Some(130));
        b.remove(130);
        assert!(b.is_empty());
    }

    #[test]
    fn id_table_finds_every_id_and_nothing_else() {
        let ids: Vec<u32> = (0..1000u32).map(|k| 0x1_0000 | (k * 7 + 3)).collect();
        let t = IdTable::new(ids.iter().enumerate().map(|(k, &id)| (id, k)));
        for (k, &id) in ids.iter().enumerate() {
            assert_eq!(t.get(id), Some(k));
        }
        for miss in [0, 1, 0x1_0000, 0x2_0003, u32::MAX] {
            assert_eq!(t.get(miss), None, "{miss:x}");
        }
        assert_eq!(IdTable::new(core::iter::empty()).get(5), None);
    }

    #[test]
    fn wait_queue_pops_due_classes_in_key_order() {
        let mut q = WaitQueue::new(6);
        for (c, key) in [(0, 50), (1, 10), (2, 40), (3, 30), (4, 20), (5, 60)] {
            q.set(c, Some(key));
        }
        q.set(5, None);
        q.set(2, Some(5)); // moved earlier
        q.set(1, Some(45)); // moved later
        let mut got = Vec::new();
        while let Some(c) = q.pop_due(100) {
            got.push(c);
        }
        assert_eq!(got, vec![2, 4, 3, 1, 0]);
        q.set(0, Some(7));
        assert_eq!(q.pop_due(6), None);
        assert_eq!(q.pop_due(7), Some(0));
    }
}
