//! The reorder buffer (`reorder::ReorderBuffer`) under arbitrary sequences of inserts,
//! packets let through at once (`pass`), clock steps, polls and give-ups, with a
//! simulated clock.
//!
//! Each packet carries its sequence number and a tag; the harness remembers what it
//! inserted. Checks, between two resyncs (a resync is the buffer believing the peer
//! restarted, after which sequence numbers may legitimately repeat):
//! - every delivered packet is one that was inserted and accepted, with its bytes;
//! - each sequence number is delivered at most once;
//! - packets are delivered in increasing sequence order, except those the buffer
//!   reported as `Late` (their gap had been given up), which come out of order once;
//! - nothing is lost silently: accepted = delivered + counted drops + still held;
//! - a packet inserted with a hold (delay equalisation) never comes out before its
//!   release time, unless it was `Late`;
//! - `poll_timeout` is honest: at or after it, `poll` delivers something, or (a gap given
//!   up in front of a held packet) the next timeout is later;
//! - at the end, with the clock far ahead, everything held comes out.
#![no_main]

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use arbitrary::Arbitrary;
use braid_core::fuzzing::{Inserted, ReorderBuffer};
use braid_core::Instant;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Insert `base + offset` (near the window).
    Insert {
        offset: i16,
        deadline_ms: u16,
        len: u8,
    },
    /// Insert `base + offset`, not to come out before `hold_ms` from now (delay
    /// equalisation).
    InsertHeld {
        offset: i16,
        deadline_ms: u16,
        hold_ms: u8,
        len: u8,
    },
    /// Insert any sequence number (resyncs, stragglers, wrap-around).
    InsertAny { seq: u64, deadline_ms: u16 },
    /// Advance the clock.
    Advance { micros: u32 },
    /// Advance the clock to `poll_timeout` if there is one.
    ToTimeout,
    /// Poll up to `n` packets.
    Poll { n: u8 },
    /// `give_up_before(base + offset)`.
    GiveUp { offset: i16 },
    /// Move `base` (where `Insert` aims).
    Rebase { by: i32 },
    /// Let `base + offset` go out at once if it may (`pass`: the daemon's way for a
    /// packet that comes in order), else insert it as `InsertHeld` would.
    Pass {
        offset: i16,
        deadline_ms: u16,
        hold_ms: u8,
        len: u8,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    capacity: u8,
    start: u64,
    ops: Vec<Op>,
}

const BUF: usize = 64;

/// A packet accepted by the buffer and not delivered yet.
struct Pending {
    data: Vec<u8>,
    epoch: u64,
    late: bool,
    /// Not to be delivered before this (unless late).
    release: Instant,
}

struct Model {
    rb: ReorderBuffer,
    now: Instant,
    /// seq → accepted copies not yet delivered (several only across resyncs).
    pending: HashMap<u64, Vec<Pending>>,
    /// (epoch, seq) delivered. The epoch counts resyncs at acceptance.
    delivered: HashSet<(u64, u64)>,
    /// Last in-order delivery of each epoch.
    last_in_order: HashMap<u64, u64>,
    accepted: u64,
    out: u64,
    tag: u8,
}

fn ahead(a: u64, b: u64) -> bool {
    // a after b, modulo 2^64.
    let d = a.wrapping_sub(b);
    d != 0 && d < 1 << 63
}

impl Model {
    fn insert(&mut self, seq: u64, deadline_ms: u16, hold_ms: u8, len: u8) {
        self.tag = self.tag.wrapping_add(1);
        let mut data = seq.to_le_bytes().to_vec();
        data.push(self.tag);
        data.resize(9 + usize::from(len % 48), self.tag);
        let deadline = Duration::from_millis(u64::from(deadline_ms));
        let release = self.now + Duration::from_millis(u64::from(hold_ms));
        let r = if hold_ms == 0 {
            self.rb.insert(self.now, seq, deadline, &data)
        } else {
            self.rb.insert_held(self.now, seq, deadline, release, &data)
        };
        let epoch = self.rb.stats().resyncs;
        match r {
            Inserted::Duplicate => {}
            Inserted::Buffered | Inserted::Overflow | Inserted::Late => {
                self.accepted += 1;
                let copies = self.pending.entry(seq).or_default();
                assert!(
                    copies.iter().all(|c| c.epoch != epoch),
                    "seq {seq} accepted twice in one epoch"
                );
                copies.push(Pending {
                    data,
                    epoch,
                    late: r == Inserted::Late,
                    release,
                });
            }
        }
    }

    fn pass(&mut self, seq: u64, deadline_ms: u16, hold_ms: u8, len: u8) {
        let release = self.now + Duration::from_millis(u64::from(hold_ms));
        if !self.rb.pass(self.now, seq, release) {
            self.insert(seq, deadline_ms, hold_ms, len);
            return;
        }
        assert_eq!(hold_ms, 0, "seq {seq} passed before its release");
        let epoch = self.rb.stats().resyncs;
        assert!(
            self.pending
                .get(&seq)
                .is_none_or(|c| c.iter().all(|c| c.epoch != epoch)),
            "seq {seq} passed while a copy is held"
        );
        self.accepted += 1;
        self.out += 1;
        self.came_out(epoch, seq, true);
    }

    /// `seq` of `epoch` came out: never twice, and (`in_order`) after the last one in
    /// order.
    fn came_out(&mut self, epoch: u64, seq: u64, in_order: bool) {
        assert!(self.delivered.insert((epoch, seq)), "seq {seq} delivered twice");
        if in_order {
            if let Some(&last) = self.last_in_order.get(&epoch) {
                assert!(ahead(seq, last), "seq {seq} delivered after {last}");
            }
            self.last_in_order.insert(epoch, seq);
        }
    }

    /// Poll once; returns whether a packet came out.
    fn poll(&mut self) -> bool {
        let mut buf = [0u8; BUF];
        let Some(n) = self.rb.poll(self.now, &mut buf) else {
            return false;
        };
        self.out += 1;
        let p = &buf[..n];
        assert!(n >= 9, "delivered {n} bytes, not a harness packet");
        let seq = u64::from_le_bytes(p[..8].try_into().expect("8 bytes"));
        let copies = self.pending.entry(seq).or_default();
        let i = copies
            .iter()
            .position(|c| c.data == p)
            .unwrap_or_else(|| panic!("delivered seq {seq} that was not pending (or altered)"));
        let c = copies.swap_remove(i);
        if !c.late {
            assert!(
                self.now >= c.release,
                "seq {seq} delivered at {:?}, held until {:?}",
                self.now,
                c.release
            );
        }
        self.came_out(c.epoch, seq, !c.late);
        true
    }

    fn conservation(&self) {
        let s = self.rb.stats();
        assert_eq!(
            self.accepted,
            self.out + s.dropped + self.rb.len() as u64,
            "accepted = delivered + dropped + held ({s:?})"
        );
    }
}

fuzz_target!(|input: Input| {
    let mut m = Model {
        rb: ReorderBuffer::new(usize::from(input.capacity % 64) + 1),
        now: Instant::ZERO,
        pending: HashMap::new(),
        delivered: HashSet::new(),
        last_in_order: HashMap::new(),
        accepted: 0,
        out: 0,
        tag: 0,
    };
    let mut base = input.start;
    for op in input.ops.into_iter().take(512) {
        match op {
            Op::Insert {
                offset,
                deadline_ms,
                len,
            } => m.insert(base.wrapping_add(offset as i64 as u64), deadline_ms, 0, len),
            Op::InsertHeld {
                offset,
                deadline_ms,
                hold_ms,
                len,
            } => m.insert(base.wrapping_add(offset as i64 as u64), deadline_ms, hold_ms, len),
            Op::InsertAny { seq, deadline_ms } => m.insert(seq, deadline_ms, 0, 0),
            Op::Advance { micros } => m.now = m.now + Duration::from_micros(u64::from(micros)),
            Op::ToTimeout => {
                if let Some(t) = m.rb.poll_timeout() {
                    if t > m.now {
                        m.now = t;
                    }
                    // At poll_timeout something happens: a packet comes out, or (a gap
                    // given up in front of a held packet) the timeout moves later.
                    let progressed =
                        m.poll() || m.rb.poll_timeout().is_none_or(|t2| t2 > t);
                    assert!(progressed, "nothing happened at poll_timeout {t:?}");
                }
            }
            Op::Poll { n } => {
                for _ in 0..n % 8 {
                    if !m.poll() {
                        break;
                    }
                }
            }
            Op::GiveUp { offset } => {
                m.rb.give_up_before(base.wrapping_add(offset as i64 as u64));
            }
            Op::Rebase { by } => base = base.wrapping_add(by as i64 as u64),
            Op::Pass {
                offset,
                deadline_ms,
                hold_ms,
                len,
            } => m.pass(base.wrapping_add(offset as i64 as u64), deadline_ms, hold_ms, len),
        }
        m.conservation();
    }
    // Drain: with the clock far ahead everything held comes out.
    m.now = m.now + Duration::from_secs(3600);
    while m.poll() {}
    m.conservation();
    assert!(m.rb.is_empty(), "{} packets stuck", m.rb.len());
});
