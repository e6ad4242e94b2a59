//! Verification tags for `encryption = "none"` over UDP: a blind spoofer cannot inject.
//!
//! Without keys nothing proves who sent a datagram, but a spoofer who cannot see a path's
//! traffic (the common attacker: anyone on the internet who knows or guesses the path's
//! addresses and ports) can be kept out without a cipher, as SCTP's verification tag does
//! (RFC 9260 sec. 8.5). Each run of braid draws a random 64-bit tag, and every datagram
//! carries two tags in an envelope of its own ([`TAGGED_VERSION`], 17 bytes, before the
//! plaintext braid datagram):
//!
//! ```text
//! +-------+--------------------------+--------------------------+-------------------
//! |   3   |  sender's tag (8 bytes)  | receiver's tag (8 bytes) | braid datagram ...
//! +-------+--------------------------+--------------------------+-------------------
//! ```
//!
//! - A datagram is **accepted** only when its receiver's tag is this run's own tag: its
//!   sender has seen one of our datagrams, which went only to the peer. An accepted
//!   datagram's sender tag becomes the peer's tag (a restarted peer has a new one), and
//!   goes into the receiver's-tag field of everything sent from then on.
//! - Any other datagram is **refused** and never reaches the bond. It may come from a peer
//!   that does not know our tag yet (both ends just started, or either one restarted), so
//!   it is answered with a **hint**: an envelope with no datagram inside, carrying our tag
//!   as sender and the refused datagram's sender tag as receiver. A real peer accepts the
//!   hint (it carries its own tag) and so learns ours; a spoofer never sees it. Hints are
//!   sent back to the path's configured remote only, never to another address (the
//!   caller's source filter), are no larger than what caused them, and are limited to
//!   [`HINTS_PER_SECOND`] (burst [`HINT_BURST`]); an accepted datagram is never answered,
//!   so two ends cannot bounce hints back and forth.
//!
//! What it does not do: an attacker who sees a path's traffic (on the path, or a copy of
//! it) can read both tags and forge datagrams, as with any plaintext protocol; use keys
//! against that. A blind flood forged from the peer's own address while the peer restarts
//! competes with the peer for hints, so the bond's recovery from that restart can take
//! longer; the running bond is never affected.

use crate::Instant;

/// First byte of a tagged plaintext datagram (1 is the plaintext format itself, 2 the
/// sealed envelope).
pub const TAGGED_VERSION: u8 = 3;
/// Bytes of the envelope before the braid datagram.
pub const TAG_HEADER_LEN: usize = 17;
/// Sustained hints per second.
pub(crate) const HINTS_PER_SECOND: u64 = 20;
/// Hints that may go at once.
pub(crate) const HINT_BURST: u64 = 5;

const HINT_COST_US: u64 = 1_000_000 / HINTS_PER_SECOND;

/// What became of a received datagram.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened<'a> {
    /// Accepted: the braid datagram inside (empty for a hint).
    Deliver(&'a [u8]),
    /// Refused; send this hint back to the source.
    Hint([u8; TAG_HEADER_LEN]),
    /// Refused, nothing to send (malformed, or hints used up).
    Drop,
}

/// Counters of a [`PlainTags`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TagCounters {
    /// Datagrams refused: their receiver's tag was not ours.
    pub wrong_tag: u64,
    /// Datagrams refused: not a tagged envelope (too short, another version, a zero tag).
    pub malformed: u64,
    /// Hints sent.
    pub hints_sent: u64,
    /// Hints not sent: over the rate limit.
    pub hints_limited: u64,
    /// Times the peer's tag changed (its first tag, then once per restart of the peer).
    pub peer_tag_changes: u64,
}

/// One bond's tags. See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct PlainTags {
    own: u64,
    /// The peer's tag; 0 while unknown.
    peer: u64,
    /// Hint tokens, in µs of [`HINT_COST_US`] each.
    tokens: u64,
    refilled: Option<Instant>,
    counters: TagCounters,
}

impl PlainTags {
    /// Tags for a run whose own tag is `own` (random, drawn by the caller; 0 is taken as 1,
    /// since 0 means "unknown" on the wire).
    pub(crate) fn new(own: u64) -> PlainTags {
        PlainTags {
            own: own.max(1),
            peer: 0,
            tokens: HINT_COST_US * HINT_BURST,
            refilled: None,
            counters: TagCounters::default(),
        }
    }

    #[cfg(test)]
    /// This run's tag.
    pub(crate) fn own(&self) -> u64 {
        self.own
    }

    #[cfg(test)]
    /// The peer's tag, once a datagram from it was accepted.
    pub(crate) fn peer(&self) -> Option<u64> {
        (self.peer != 0).then_some(self.peer)
    }

    /// The counters.
    pub(crate) fn counters(&self) -> TagCounters {
        self.counters
    }

    #[cfg(test)]
    /// The envelope for one datagram: `out` is cleared and gets the header and `datagram`.
    pub(crate) fn wrap(&self, datagram: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.outgoing_header());
        out.extend_from_slice(datagram);
    }

    /// The header of the envelope for a datagram to the peer (the datagram follows it).
    pub(crate) fn outgoing_header(&self) -> [u8; TAG_HEADER_LEN] {
        self.header(self.peer)
    }

    fn header(&self, receiver: u64) -> [u8; TAG_HEADER_LEN] {
        let mut h = [0u8; TAG_HEADER_LEN];
        h[0] = TAGGED_VERSION;
        h[1..9].copy_from_slice(&self.own.to_be_bytes());
        h[9..17].copy_from_slice(&receiver.to_be_bytes());
        h
    }

    /// Check a received envelope. See the module documentation.
    pub(crate) fn open<'a>(&mut self, now: Instant, bytes: &'a [u8]) -> Opened<'a> {
        let Some((sender, receiver, inner)) = parse(bytes) else {
            self.counters.malformed += 1;
            return Opened::Drop;
        };
        if receiver == self.own {
            if sender != self.peer {
                self.peer = sender;
                self.counters.peer_tag_changes += 1;
            }
            return Opened::Deliver(inner);
        }
        self.counters.wrong_tag += 1;
        if !self.take_hint_token(now) {
            self.counters.hints_limited += 1;
            return Opened::Drop;
        }
        self.counters.hints_sent += 1;
        Opened::Hint(self.header(sender))
    }

    fn take_hint_token(&mut self, now: Instant) -> bool {
        let max = HINT_COST_US * HINT_BURST;
        if let Some(last) = self.refilled {
            let us = u64::try_from(now.saturating_since(last).as_micros()).unwrap_or(u64::MAX);
            self.tokens = self.tokens.saturating_add(us).min(max);
        }
        self.refilled = Some(now);
        if self.tokens < HINT_COST_US {
            return false;
        }
        self.tokens -= HINT_COST_US;
        true
    }
}

/// Sender's tag, receiver's tag and the datagram inside, or `None` when `bytes` is not a
/// tagged envelope (or names a zero sender tag, which no run has).
fn parse(bytes: &[u8]) -> Option<(u64, u64, &[u8])> {
    let (head, inner) = bytes.split_first_chunk::<TAG_HEADER_LEN>()?;
    if head[0] != TAGGED_VERSION {
        return None;
    }
    let sender = u64::from_be_bytes(head[1..9].try_into().ok()?);
    let receiver = u64::from_be_bytes(head[9..17].try_into().ok()?);
    (sender != 0).then_some((sender, receiver, inner))
}

#[cfg(test)]
mod tests;
