//! One HTB class: its parameters, its token buckets and its mode (`htb_class_mode`), and
//! the parameter rules of `htb_change_class` (quantum from r2q, prio cap, non-zero rates).

use super::queue::{Fifo, Meter};
use super::sets::Bits;
use super::ShapeError;
use crate::shape::spec::{ClassId, ClassSpec};

/// `TC_HTB_NUMPRIO`: prios 0..=7.
pub(super) const NUMPRIO: usize = 8;
/// `TC_HTB_MAXDEPTH`: levels 0..=7.
pub(super) const MAXDEPTH: usize = 8;
/// How long a negative balance is remembered (`cl->mbuffer`, 60 s), in ns.
pub(super) const MBUFFER_NS: i64 = 60 * 1_000_000_000;
/// The leaf queue limit when the spec gives none.
pub(super) const DEFAULT_LIMIT: u32 = 1000;

/// `enum htb_cmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Over ceil: may not send at all.
    CantSend,
    /// Over rate, under ceil: may send on tokens lent by an ancestor.
    MayBorrow,
    /// Under rate: sends on its own tokens.
    CanSend,
}

impl Mode {
    /// As `ClassStats::mode` spells it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::CantSend => "cant-send",
            Mode::MayBorrow => "may-borrow",
            Mode::CanSend => "can-send",
        }
    }
}

/// A DRR pointer into a sorted set of classes (a row or a parent's feed), modelled on the
/// kernel's `ptr` + `last_ptr_id` pair: `At(pos)` selects the first member at position
/// `pos` or later of the set's id-sorted universe (the node itself while it is there, its
/// successor once it left); `End` is the kernel's NULL pointer: "at the right end; rewind
/// and advance the parent".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cursor {
    /// Past the last member.
    End,
    /// The first member at this position or later.
    At(usize),
}

/// Nanoseconds to send `len` bytes at `bps` bit/s (`psched_l2t_ns`, computed exactly).
pub(super) fn l2t_ns(bps: u64, len: u64) -> i64 {
    if bps == 0 {
        return 0;
    }
    // The same quotient in 64 bits when the product fits (any packet): a 128-bit
    // division is a slow library call.
    if let Some(bits_ns) = len.checked_mul(8_000_000_000) {
        return i64::try_from(bits_ns / bps).unwrap_or(i64::MAX / 4);
    }
    let ns = u128::from(len) * 8_000_000_000 / u128::from(bps);
    i64::try_from(ns).unwrap_or(i64::MAX / 4)
}

/// braid's default burst: 1.5 ms at `bps`, never below two MTUs.
pub(super) fn default_burst(bps: u64, mtu: usize) -> u32 {
    let by_time = u128::from(bps) * 3 / 16_000;
    let floor = 2 * mtu as u128;
    u32::try_from(by_time.max(floor)).unwrap_or(u32::MAX)
}

/// `htb_accnt_tokens` / `htb_accnt_ctokens`.
#[inline]
pub(super) fn accnt(tokens: i64, buffer: i64, diff: i64, cost: i64) -> i64 {
    let toks = diff.saturating_add(tokens).min(buffer).saturating_sub(cost);
    if toks <= -MBUFFER_NS {
        1 - MBUFFER_NS
    } else {
        toks
    }
}

/// A class's configured figures after the kernel's rules and braid's defaults.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Params {
    pub rate_bps: u64,
    pub ceil_bps: u64,
    pub burst: u32,
    pub cburst: u32,
    /// `cl->buffer`: burst as ns at rate.
    pub buffer_ns: i64,
    /// `cl->cbuffer`: cburst as ns at ceil.
    pub cbuffer_ns: i64,
    pub prio: u8,
    pub quantum: u32,
    pub limit: u32,
}

impl Params {
    /// Applies `htb_change_class`'s rules to a spec; kernel warnings go to `warnings`.
    pub(super) fn from_spec(
        spec: &ClassSpec,
        r2q: u32,
        mtu: usize,
        warnings: &mut Vec<String>,
    ) -> Result<Self, ShapeError> {
        let id = spec.id;
        let rate_bps = spec.rate_bps;
        let ceil_bps = spec.ceil_bps.unwrap_or(rate_bps);
        if rate_bps == 0 || ceil_bps == 0 {
            return Err(ShapeError(format!(
                "class {id}: rate and ceil must be non-zero"
            )));
        }
        if ceil_bps < rate_bps {
            warnings.push(format!(
                "class {id}: ceil is below rate; the class never sends faster than ceil"
            ));
        }
        let prio = if usize::from(spec.prio) >= NUMPRIO {
            warnings.push(format!(
                "class {id}: prio {} capped to {}",
                spec.prio,
                NUMPRIO - 1
            ));
            (NUMPRIO - 1) as u8
        } else {
            spec.prio
        };
        let quantum = match spec.quantum {
            Some(q) if q > 0 => q,
            _ => quantum_from_rate(id, rate_bps, r2q, warnings),
        };
        let burst = spec.burst.unwrap_or_else(|| default_burst(rate_bps, mtu));
        let cburst = spec.cburst.unwrap_or_else(|| default_burst(ceil_bps, mtu));
        Ok(Self {
            rate_bps,
            ceil_bps,
            burst,
            cburst,
            buffer_ns: l2t_ns(rate_bps, u64::from(burst)),
            cbuffer_ns: l2t_ns(ceil_bps, u64::from(cburst)),
            prio,
            quantum,
            limit: spec.limit.unwrap_or(DEFAULT_LIMIT),
        })
    }
}

/// `quantum = rate_bytes_ps / r2q`, clamped to 1000..=200000 with the kernel's warning.
fn quantum_from_rate(id: ClassId, rate_bps: u64, r2q: u32, warnings: &mut Vec<String>) -> u32 {
    let q = rate_bps / 8 / u64::from(r2q.max(1));
    let q = q.min(i32::MAX as u64);
    let (q, warn) = if q < 1000 {
        (1000, Some("small"))
    } else if q > 200_000 {
        (200_000, Some("big"))
    } else {
        (q, None)
    };
    if let Some(word) = warn {
        warnings.push(format!(
            "quantum of class {:X} is {word}. Consider r2q change.",
            id.0
        ));
    }
    u32::try_from(q).unwrap_or(200_000)
}

/// Per-class counters, as `tc -s class show` reports them.
#[derive(Clone, Debug, Default)]
pub(super) struct Counters {
    pub sent_bytes: u64,
    pub sent_packets: u64,
    pub lends: u64,
    pub borrows: u64,
    pub meter: Meter,
}

/// A leaf's own state: its queue and its per-level DRR deficits.
#[derive(Debug)]
pub(super) struct Leaf {
    pub queue: Fifo,
    pub deficit: [i64; MAXDEPTH],
    pub dropped: u64,
    /// Its index in `Shaper::active` while backlogged.
    pub active_slot: usize,
}

/// One class of the tree.
#[derive(Debug)]
pub(super) struct Class {
    pub id: ClassId,
    pub parent: Option<usize>,
    /// Children, sorted by id (the kernel's feed trees are ordered by classid).
    pub children: Vec<usize>,
    pub name: Option<String>,
    /// 0 for a leaf; `7 - depth` for an inner class (`TC_HTB_MAXDEPTH - 1` at the top).
    pub level: u8,
    pub p: Params,
    /// Balance at rate, ns (`cl->tokens`), as of `t_c`.
    pub tokens: i64,
    /// Balance at ceil, ns (`cl->ctokens`), as of `t_c`.
    pub ctokens: i64,
    /// Last checkpoint, ns.
    pub t_c: i64,
    /// `Some` for a leaf.
    pub leaf: Option<Leaf>,
    /// DRR pointers into this class's feed, one per prio (`inner.clprio[prio].ptr`).
    pub feed_ptr: [Cursor; NUMPRIO],
    /// The mode as of the last charge or due event (`cl->cmode`).
    pub mode: Mode,
    /// Prios with a backlogged leaf reaching this class through MAY_BORROW classes
    /// (`cl->prio_activity`).
    pub prio_activity: u8,
    /// Children in this class's feed, per prio (`inner.clprio[prio].feed`), as positions
    /// in `children`; empty for a leaf.
    pub feeds: Vec<Bits>,
    /// Position among the classes of its level sorted by id (its slot in a row).
    pub row_pos: usize,
    /// Position in its parent's `children` (its slot in the parent's feeds).
    pub feed_pos: usize,
    pub counters: Counters,
    /// The settings as configured (or last changed), for `class_spec`.
    pub spec: ClassSpec,
    /// The last packet length charged and its cost at rate and ceil.
    pub costs: Costs,
}

/// A packet length and its transmit times at a class's rate and ceil (`l2t_ns`), kept
/// because most packets are as long as the one before and a division costs tens of
/// cycles. Reset whenever the rates change.
#[derive(Clone, Copy, Debug)]
pub(super) struct Costs {
    len: u64,
    rate_ns: i64,
    ceil_ns: i64,
}

impl Costs {
    /// Nothing cached.
    pub(super) const NONE: Costs = Costs {
        len: u64::MAX,
        rate_ns: 0,
        ceil_ns: 0,
    };
}

impl Class {
    /// Time since the checkpoint, capped at `mbuffer` (never negative).
    #[inline]
    pub(super) fn diff(&self, t: i64) -> i64 {
        t.saturating_sub(self.t_c).clamp(0, MBUFFER_NS)
    }

    /// `htb_class_mode` with hysteresis off.
    #[inline]
    pub(super) fn mode(&self, t: i64) -> Mode {
        let diff = self.diff(t);
        if self.ctokens.saturating_add(diff) < 0 {
            Mode::CantSend
        } else if self.tokens.saturating_add(diff) >= 0 {
            Mode::CanSend
        } else {
            Mode::MayBorrow
        }
    }

    /// When the mode next improves (the kernel's `pq_key`), in ns; `None` in CAN_SEND.
    #[inline]
    pub(super) fn next_event(&self, t: i64) -> Option<i64> {
        self.mode_and_event(t).1
    }

    /// `mode(t)` and `next_event(t)` in one pass.
    #[inline]
    pub(super) fn mode_and_event(&self, t: i64) -> (Mode, Option<i64>) {
        match self.mode(t) {
            Mode::CanSend => (Mode::CanSend, None),
            Mode::CantSend => (Mode::CantSend, Some(self.t_c.saturating_sub(self.ctokens))),
            Mode::MayBorrow => (Mode::MayBorrow, Some(self.t_c.saturating_sub(self.tokens))),
        }
    }

    /// Balances brought forward to `t`, as they would be charged (for stats).
    pub(super) fn tokens_at(&self, t: i64) -> (i64, i64) {
        let diff = self.diff(t);
        (
            accnt(self.tokens, self.p.buffer_ns, diff, 0),
            accnt(self.ctokens, self.p.cbuffer_ns, diff, 0),
        )
    }

    /// `len` bytes' transmit times at rate and at ceil.
    #[inline]
    pub(super) fn costs(&mut self, len: u64) -> (i64, i64) {
        if self.costs.len != len {
            self.costs = Costs {
                len,
                rate_ns: l2t_ns(self.p.rate_bps, len),
                ceil_ns: l2t_ns(self.p.ceil_bps, len),
            };
        }
        (self.costs.rate_ns, self.costs.ceil_ns)
    }

    pub(super) fn backlog_packets(&self) -> usize {
        self.leaf.as_ref().map_or(0, |l| l.queue.len())
    }
}

/// The link's own bucket (braid's addition above all top-level classes): rate = ceil =
/// link rate. It never lends; nothing is sent unless it holds a full MTU's worth of
/// tokens (`gate_ns`), so, unlike an HTB class (which may send on any non-negative
/// balance and go one packet into debt), it never overshoots: over any window T the link
/// carries at most rate × T + its buffer, max(1.5 ms at rate, one MTU).
#[derive(Clone, Debug)]
pub(super) struct LinkBucket {
    pub bps: u64,
    pub buffer_ns: i64,
    /// Tokens needed before anything may go: one MTU at the link rate.
    pub gate_ns: i64,
    pub tokens: i64,
    pub t_c: i64,
    /// The last packet length charged and its cost (`len`, ns).
    last_cost: (u64, i64),
}

impl LinkBucket {
    pub(super) fn new(bps: u64, mtu: usize, t: i64) -> Self {
        let gate_ns = l2t_ns(bps, mtu as u64);
        let by_time = l2t_ns(
            bps,
            u64::try_from(u128::from(bps) * 3 / 16_000).unwrap_or(u64::MAX),
        );
        let buffer_ns = by_time.max(gate_ns);
        Self {
            bps,
            buffer_ns,
            gate_ns,
            tokens: buffer_ns,
            t_c: t,
            last_cost: (u64::MAX, 0),
        }
    }

    #[inline]
    fn diff(&self, t: i64) -> i64 {
        t.saturating_sub(self.t_c).clamp(0, MBUFFER_NS)
    }

    /// True when the link may send at `t` (always, at unknown rate 0).
    #[inline]
    pub(super) fn open(&self, t: i64) -> bool {
        self.bps == 0
            || self.tokens.saturating_add(self.diff(t)).min(self.buffer_ns) >= self.gate_ns
    }

    /// When it opens, ns (`t` when open).
    #[inline]
    pub(super) fn ready_at(&self, t: i64) -> i64 {
        if self.open(t) {
            t
        } else {
            self.t_c
                .saturating_add(self.gate_ns.saturating_sub(self.tokens))
        }
    }

    #[inline]
    pub(super) fn charge(&mut self, t: i64, len: u64) {
        if self.bps == 0 {
            return;
        }
        let diff = self.diff(t);
        if self.last_cost.0 != len {
            self.last_cost = (len, l2t_ns(self.bps, len));
        }
        self.tokens = accnt(self.tokens, self.buffer_ns, diff, self.last_cost.1);
        self.t_c = t;
    }

    /// A new rate (auto mode); the balance is carried over, capped at the new buffer;
    /// from unknown (0) the bucket starts full.
    pub(super) fn set_bps(&mut self, t: i64, bps: u64, mtu: usize) {
        if bps == self.bps {
            return;
        }
        let was_unknown = self.bps == 0;
        let old = accnt(self.tokens, self.buffer_ns, self.diff(t), 0);
        *self = Self::new(bps, mtu, t);
        if !was_unknown {
            self.tokens = old.min(self.buffer_ns);
        }
    }
}
