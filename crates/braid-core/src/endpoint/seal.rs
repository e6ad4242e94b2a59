//! Path encryption between the bond and the carriers: a [`Sealer`] owns the bond's
//! [`crate::crypto::Tunnel`] (or, without keys, its verification tags).
//!
//! - **Out**: every datagram the bond emits is folded (its version-1 header into the
//!   envelope's, [`folded`]) and sealed before it goes on a path. While no
//!   session exists (the first handshake, or after one expired) the datagram is dropped
//!   and counted (`no_session_dropped`): the bond's probes and TCP's retransmissions repeat
//!   what matters, and holding packets would only delay the first handshake's completion.
//! - **In**: every datagram read from a path is opened first. Only authenticated transport
//!   plaintext, unfolded back into the version-1 datagram ([`Incoming::Deliver`]),
//!   reaches the bond; handshake answers
//!   ([`Incoming::Reply`]) go back to the source on the same path; everything else is
//!   dropped and counted under its [`Rejected::name`].
//! - **Roaming**: a path's peer address follows authenticated datagrams only, and only
//!   once the old address has gone quiet: see [`Roaming`].
//! - **Handshakes**: initiations and keepalives from [`Sealer::poll_transmit`] go out on
//!   every path (an initiation is 148 bytes; the peer answers every copy, on its own path,
//!   with the same response). The first handshake starts at once.
//! - `encryption = "none"`: only datagrams from a UDP path's peer address are accepted
//!   (`unknown_source`), and each carries verification tags ([`crate::plain`]) so that a
//!   spoofer who cannot see the path cannot inject: datagrams without our tag are refused
//!   (`tags.wrong_tag`) and answered with a hint that lets a restarted peer learn our tag.
//!   Serial lines have no addresses to spoof; their datagrams pass as they are (the frame
//!   codec checks a CRC-32 on plain lines).

use core::time::Duration;
use std::net::SocketAddr;

use crate::crypto::envelope::{HEADER_LEN, MAX_USER_TYPE, OVERHEAD};
use crate::crypto::{
    OpenKeys, Opened, PendingSeal, Preopen, Rejected, SealError, SessionId, Tunnel, TunnelConfig,
};
use crate::plain::{self, PlainTags, TagCounters, TAG_HEADER_LEN};
use crate::wire::folded::{self, SeqRef, DATA_SAVING};
use crate::Instant;

/// How a bond's datagrams are protected on its paths.
#[derive(Clone, Debug)]
pub enum Sealing {
    /// `encryption = "none"`: verification tags only.
    None,
    /// Noise IK sessions and ChaCha20-Poly1305.
    Keys {
        /// The tunnel's keys, window and clock base.
        tunnel: Box<TunnelConfig>,
        /// Testing: start a handshake this often.
        rekey_every: Option<Duration>,
    },
}

/// What a [`Sealer`] is made from.
#[derive(Clone, Debug)]
pub struct SealConfig {
    /// Keys or none.
    pub sealing: Sealing,
    /// This run's verification tag (random, from the caller) for `encryption = "none"`.
    pub plain_tag: u64,
    /// How long a path's peer address must be silent before it may move ([`Roaming`]):
    /// the bond's dead time, `down_after x probe_interval`.
    pub roam_quiet: Duration,
}

/// The shortest silence of a path's peer address before the path may move.
pub(super) const MIN_ROAM_QUIET: Duration = Duration::from_millis(100);

/// One path's roaming state, kept next to the path's peer address.
///
/// An authenticated datagram proves only that the peer sealed it, not that it came the
/// way it says: one session spans every path, so someone who sees one path can deliver a
/// copy of a datagram to another path's socket from any address before the original
/// arrives (review M1). So a path's peer address moves to a new address only when all of
/// these hold:
///
/// 1. the datagram was sent on this path: its inner header names the same sender path id
///    as the datagrams from the current peer address on the same session (learned from
///    them; a copy from another path names that path, and a keepalive names none, so
///    neither counts);
/// 2. it is the second such datagram from that same new address (one is not enough);
/// 3. nothing authenticated has come from the current peer address for the path's dead
///    time, `down_after x probe_interval` (300 ms by default): the peer sends probes and
///    acks on every path every probe interval, so a peer address that still works is
///    heard from more often than that.
///
/// NAT rebinding, where the peer's address changes and its old one falls silent, moves
/// the path on the first datagram from the new address after the dead time. In the
/// spirit of RFC 9000 sec. 9.3 (validate a new address before moving to it), without a
/// new message: the peer proves it lives at the new address by going on sending this
/// path's datagrams from it while the old one is silent. A path whose peer address is
/// not known yet takes the source of its second authenticated datagram.
#[derive(Clone, Debug, Default)]
pub struct Roaming {
    /// When an authenticated datagram last came from the peer address.
    heard: Option<Instant>,
    /// The sender path id in the peer address's datagrams, and the session they came on.
    path_id: Option<(SessionId, u16)>,
    /// Another address this path's datagrams came from: address and how many.
    candidate: Option<(SocketAddr, u32)>,
}

/// What became of a received datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming<'a> {
    /// Authenticated plaintext for the bond.
    Deliver(&'a [u8]),
    /// Send these bytes back to the source on the same path.
    Reply(&'a [u8]),
    /// Nothing for the bond (counted, or a handshake step that needs no answer).
    Drop,
}

/// The sealer's own counters (the tunnel's are in [`Tunnel::counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SealCounters {
    /// Outgoing datagrams dropped because no session existed yet (or it expired).
    pub no_session_dropped: u64,
    /// Received datagrams refused whose source was not the path's peer address (with
    /// `encryption = "none"`: every datagram from another address; with keys: those the
    /// tunnel also refused).
    pub unknown_source: u64,
    /// Paths whose peer address changed to follow authenticated datagrams.
    pub roamed: u64,
    /// Authenticated datagrams from another address than the path's peer that did not
    /// (yet) move it: the peer address was still heard from, or the new one was new.
    pub roam_held: u64,
    /// Empty authenticated datagrams (keepalives) received.
    pub keepalives_received: u64,
    /// Initiations dropped unread beyond the tunnel's handshake budget
    /// ([`TunnelConfig::handshake_budget`]; the tunnel's `handshake_flood_dropped`).
    pub handshake_flood_dropped: u64,
    /// Authenticated datagrams whose folded header did not unfold (an unknown message
    /// type, too short for its type: only a faulty peer sends them).
    pub malformed: u64,
}

/// The address a serial line's datagrams are said to come from (the tunnel keys its
/// per-source state by address).
pub(super) const LINE_PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

/// Bytes sealing adds to a data datagram of the bond (Data, PinnedData, DataPart): the
/// 24-byte envelope less the 7 bytes folding takes off its header, 17 (`docs/wire.md`,
/// "Overhead"). A control datagram (probe, ack) grows by 21.
pub(super) const SEALED_DATA_OVERHEAD: usize = OVERHEAD - DATA_SAVING;

/// Where a version-1 datagram is laid out to be sealed: its folded data header then
/// starts right after the envelope's header, and its payload never moves.
const FOLD_AT: usize = HEADER_LEN - DATA_SAVING;

/// Bytes the sealer adds to a data datagram on a UDP path: the AEAD envelope less
/// folding with keys ([`SEALED_DATA_OVERHEAD`]), the verification tags without (both 17).
pub const fn udp_overhead(sealed: bool) -> usize {
    if sealed {
        SEALED_DATA_OVERHEAD
    } else {
        TAG_HEADER_LEN
    }
}

/// The low 32 bits of the bond's `seq` that a sealed data datagram carries, once
/// [`OpenKeys::open`] has opened it in place (`pre`): a receiver holding several paths'
/// datagrams may give them to the bond in this order. `None` for one not opened, not
/// data, or too short. (It is what the peer's sealer wrote under the tag, nothing yet
/// checked against the replay window: an order to try, not a fact to act on.)
pub fn opened_seq(datagram: &[u8], pre: Preopen) -> Option<u32> {
    if !matches!(pre, Preopen::Opened(_)) {
        return None;
    }
    let kind = *datagram.get(1)?;
    folded::folded_seq(kind & MAX_USER_TYPE, datagram.get(HEADER_LEN..)?)
}

/// The crypto between a bond and its paths. See the module documentation.
pub struct Sealer {
    tunnel: Option<Tunnel>,
    /// Without keys: the verification tags of UDP paths.
    tags: PlainTags,
    counters: SealCounters,
    /// Testing: start a handshake this often.
    rekey_every: Option<Duration>,
    next_rekey: Instant,
    /// Why the tunnel refused the last datagram (for the daemon's log).
    last_rejected: Option<Rejected>,
    /// How long a path's peer address must be silent before it may move ([`Roaming`]).
    roam_quiet: Duration,
    /// The highest `seq` received: the reference for rebuilding folded ones.
    seq_ref: SeqRef,
}

impl core::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sealer")
            .field("tunnel", &self.tunnel)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer from `cfg`, with the first handshake requested at `now`.
    pub fn new(cfg: SealConfig, now: Instant) -> Sealer {
        let (tunnel, rekey_every) = match cfg.sealing {
            Sealing::None => (None, None),
            Sealing::Keys {
                tunnel,
                rekey_every,
            } => {
                let mut t = Tunnel::new(*tunnel);
                t.start_handshake(now);
                (Some(t), rekey_every)
            }
        };
        Sealer {
            roam_quiet: cfg.roam_quiet.max(MIN_ROAM_QUIET),
            tunnel,
            tags: PlainTags::new(cfg.plain_tag),
            counters: SealCounters::default(),
            rekey_every,
            next_rekey: rekey_every.map_or(Instant::FAR_FUTURE, |d| now + d),
            last_rejected: None,
            seq_ref: SeqRef::default(),
        }
    }

    /// Whether datagrams are sealed.
    pub fn enabled(&self) -> bool {
        self.tunnel.is_some()
    }

    /// The tunnel, with keys.
    pub fn tunnel(&self) -> Option<&Tunnel> {
        self.tunnel.as_ref()
    }

    /// The verification tags' counters (without keys).
    pub fn tag_counters(&self) -> TagCounters {
        self.tags.counters()
    }

    /// Where in its output buffer a version-1 datagram for a UDP path goes, so that
    /// [`Sealer::outgoing_in_place`] seals it without moving its payload: 1 with keys
    /// (the folded data header then starts right after the envelope's 8-byte header), 17
    /// without (the verification tags' header).
    pub fn datagram_offset(&self) -> usize {
        if self.tunnel.is_some() {
            FOLD_AT
        } else {
            TAG_HEADER_LEN
        }
    }

    /// Seal one (version-1) datagram of the bond for a UDP path into `out`: with keys
    /// folded and sealed, naming the sending path by `wire_path` (a number the endpoint
    /// gives each live path, see [`folded`]), else the datagram in its tag envelope.
    /// `None`: dropped (no session yet, counted; or not a datagram of the bond).
    pub fn outgoing(
        &mut self,
        now: Instant,
        datagram: &[u8],
        wire_path: u8,
        out: &mut [u8],
    ) -> Option<usize> {
        let at = self.datagram_offset();
        out.get_mut(at..at + datagram.len())?
            .copy_from_slice(datagram);
        let (n, job) = self.outgoing_in_place(now, out, datagram.len(), wire_path)?;
        match job {
            Some(job) => seal_now(&job, out),
            None => Some(n),
        }
    }

    /// [`Sealer::outgoing`] for the version-1 datagram of `len` bytes the caller wrote
    /// into `out` at [`Sealer::datagram_offset`], with the AEAD left to the caller: with
    /// keys, `out` then holds the folded datagram, numbered but plaintext, and the
    /// [`PendingSeal`] seals it (on any thread) before it may be sent; without keys, the
    /// datagram is ready (`None`).
    pub fn outgoing_in_place(
        &mut self,
        now: Instant,
        out: &mut [u8],
        len: usize,
        wire_path: u8,
    ) -> Option<(usize, Option<PendingSeal>)> {
        if self.tunnel.is_none() {
            let head = self.tags.outgoing_header();
            out.get_mut(..TAG_HEADER_LEN)?.copy_from_slice(&head);
            return Some((TAG_HEADER_LEN + len, None));
        }
        let job = self.fold_and_number(now, out, len, wire_path)?;
        Some((job.datagram_len(), Some(job)))
    }

    /// Seal one datagram of the bond for a serial line into `out`: with keys folded and
    /// sealed (as [`Sealer::outgoing`]), else the datagram itself. `None`: dropped.
    pub fn outgoing_line(
        &mut self,
        now: Instant,
        datagram: &[u8],
        wire_path: u8,
        out: &mut [u8],
    ) -> Option<usize> {
        if self.tunnel.is_some() {
            return self.outgoing(now, datagram, wire_path, out);
        }
        out.get_mut(..datagram.len())?.copy_from_slice(datagram);
        Some(datagram.len())
    }

    /// Fold the version-1 datagram `out[FOLD_AT..FOLD_AT + len]` in place, behind the
    /// envelope's header, and give it the session's next counter (with keys).
    fn fold_and_number(
        &mut self,
        now: Instant,
        out: &mut [u8],
        len: usize,
        wire_path: u8,
    ) -> Option<PendingSeal> {
        let t = self.tunnel.as_mut()?;
        // The bond only emits datagrams that parse; an output buffer too short is the
        // caller's (it is sized for the largest datagram).
        let (ty, start) = folded::fold_in_place(out, FOLD_AT, len, wire_path).ok()?;
        let n = FOLD_AT + len - start;
        if start != HEADER_LEN {
            // A control message folds by 3 bytes, not 7: it moves up to the header.
            out.copy_within(start..start + n, HEADER_LEN);
        }
        match t.seal_deferred(now, ty as u8, out, n) {
            Ok(job) => Some(job),
            Err(SealError::NoSession | SealError::BufferTooSmall) => {
                self.counters.no_session_dropped += 1;
                None
            }
        }
    }

    /// Process a datagram read from a serial line, in place (a line has no addresses:
    /// its peer is whoever is at the other end).
    pub fn incoming_line<'a>(&mut self, now: Instant, bytes: &'a mut [u8]) -> Incoming<'a> {
        if self.tunnel.is_none() {
            return Incoming::Deliver(bytes);
        }
        let mut peer = Some(LINE_PEER);
        self.incoming(now, &mut peer, &mut Roaming::default(), LINE_PEER, bytes)
    }

    /// Process a datagram from `src` on a path whose peer address is `*remote` (`None`:
    /// not known yet) with roaming state `roam`, in place. Moves `*remote` to a new
    /// address when the rules of [`Roaming`] say so.
    pub fn incoming<'a>(
        &mut self,
        now: Instant,
        remote: &mut Option<SocketAddr>,
        roam: &mut Roaming,
        src: SocketAddr,
        bytes: &'a mut [u8],
    ) -> Incoming<'a> {
        self.incoming_preopened(now, remote, roam, src, bytes, Preopen::Untouched)
    }

    /// The receive keys, to open datagrams on other threads ([`OpenKeys::open`]; none
    /// without keys).
    pub fn open_keys(&self) -> OpenKeys {
        self.tunnel
            .as_ref()
            .map_or_else(OpenKeys::default, Tunnel::open_keys)
    }

    /// [`Sealer::incoming`] for a datagram that went through [`OpenKeys::open`]
    /// ([`Tunnel::open_preopened`]).
    pub fn incoming_preopened<'a>(
        &mut self,
        now: Instant,
        remote: &mut Option<SocketAddr>,
        roam: &mut Roaming,
        src: SocketAddr,
        bytes: &'a mut [u8],
        pre: Preopen,
    ) -> Incoming<'a> {
        let Some(t) = &mut self.tunnel else {
            if Some(src) != *remote {
                self.counters.unknown_source += 1;
                return Incoming::Drop;
            }
            return match self.tags.open(now, bytes) {
                plain::Opened::Deliver([]) | plain::Opened::Drop => Incoming::Drop,
                plain::Opened::Deliver(inner) => {
                    let n = inner.len();
                    // The inner datagram is the tail of `bytes` (see `PlainTags::open`).
                    let at = bytes.len() - n;
                    Incoming::Deliver(&bytes[at..])
                }
                plain::Opened::Hint(h) => {
                    let out = bytes
                        .get_mut(..TAG_HEADER_LEN)
                        .expect("a hint answers an envelope at least a header long");
                    out.copy_from_slice(&h);
                    Incoming::Reply(out)
                }
            };
        };
        let (user_type, len, session) = match t.open_preopened(now, src, bytes, pre) {
            Ok(Opened::Data {
                user_type,
                plaintext,
                session,
                ..
            }) => (user_type, plaintext.len(), session),
            Ok(Opened::Reply(r)) => {
                // The tunnel writes its answer over the start of the datagram.
                let n = r.len();
                return Incoming::Reply(&bytes[..n]);
            }
            Ok(Opened::Established(_) | Opened::CookieStored) => return Incoming::Drop,
            Err(reason) => {
                self.last_rejected = Some(reason);
                if Some(src) != *remote {
                    self.counters.unknown_source += 1;
                }
                return Incoming::Drop;
            }
        };
        // Authenticated: the plaintext is `bytes[HEADER_LEN..HEADER_LEN + len]`.
        if len == 0 {
            self.roam(now, remote, roam, src, (session, None));
            self.counters.keepalives_received += 1;
            return Incoming::Drop;
        }
        match folded::unfold(user_type, bytes, HEADER_LEN, len, &mut self.seq_ref) {
            Ok(r) => {
                let datagram = &bytes[r];
                let path_id = datagram.get(2..4).map(|p| u16::from_be_bytes([p[0], p[1]]));
                self.roam(now, remote, roam, src, (session, path_id));
                Incoming::Deliver(datagram)
            }
            Err(_) => {
                self.counters.malformed += 1;
                Incoming::Drop
            }
        }
    }

    /// An authenticated datagram of `session` naming sender path `id` came from `src` on
    /// a path: the rules of [`Roaming`].
    fn roam(
        &mut self,
        now: Instant,
        remote: &mut Option<SocketAddr>,
        roam: &mut Roaming,
        src: SocketAddr,
        (session, id): (SessionId, Option<u16>),
    ) {
        if Some(src) == *remote {
            roam.heard = Some(now);
            if let Some(id) = id {
                roam.path_id = Some((session, id));
            }
            return;
        }
        let this_path = match (roam.path_id, id) {
            (_, None) => false,
            (Some((s, learned)), Some(id)) if s == session => id == learned,
            (_, Some(_)) => true,
        };
        if !this_path {
            self.counters.roam_held += 1;
            return;
        }
        let seen = match roam.candidate {
            Some((a, n)) if a == src => n.saturating_add(1),
            _ => 1,
        };
        let quiet = roam
            .heard
            .is_none_or(|h| now.saturating_since(h) >= self.roam_quiet);
        if seen >= 2 && quiet {
            *remote = Some(src);
            roam.heard = Some(now);
            roam.candidate = None;
            self.counters.roamed += 1;
        } else {
            roam.candidate = Some((src, seen));
            self.counters.roam_held += 1;
        }
    }

    /// A handshake datagram (initiation or keepalive), written into `buf`, to send on
    /// every path. Call until `None` after every other call.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let t = self.tunnel.as_mut()?;
        t.poll_transmit(now, buf).map(|tx| tx.len)
    }

    /// When [`Sealer::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.tunnel.as_ref()?.poll_timeout();
        match self.rekey_every {
            Some(_) => Some(t.map_or(self.next_rekey, |t| t.min(self.next_rekey))),
            None => t,
        }
    }

    /// Run the tunnel's timers (then drain [`Sealer::poll_transmit`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(t) = &mut self.tunnel else { return };
        t.handle_timeout(now);
        if let Some(every) = self.rekey_every {
            if now >= self.next_rekey {
                t.start_handshake(now);
                self.next_rekey = now + every;
            }
        }
    }

    /// Why the tunnel refused the datagram [`Sealer::incoming`] last dropped, once.
    pub fn take_rejected(&mut self) -> Option<Rejected> {
        self.last_rejected.take()
    }

    /// Sessions created so far and, of them, handshakes we completed as initiator.
    pub fn session_counts(&self) -> (u64, u64) {
        self.tunnel.as_ref().map_or((0, 0), |t| {
            let c = t.counters();
            (c.sessions_created, c.handshakes_completed)
        })
    }

    /// Whether a session can send now.
    pub fn established(&self, now: Instant) -> bool {
        self.tunnel.as_ref().is_some_and(|t| t.is_established(now))
    }

    /// Our public key (base64), with keys.
    pub fn public_key(&self) -> Option<String> {
        self.tunnel
            .as_ref()
            .map(|t| t.local_public_key().to_base64())
    }

    /// The sealer's counters (`handshake_flood_dropped` is the tunnel's).
    pub fn counters(&self) -> SealCounters {
        let mut c = self.counters;
        if let Some(t) = &self.tunnel {
            c.handshake_flood_dropped = t.counters().handshake_flood_dropped;
        }
        c
    }

    /// The tunnel's counter named `name` (a [`Rejected::name`] or an event counter).
    pub fn tunnel_counter(&self, name: &str) -> Option<u64> {
        let t = self.tunnel.as_ref()?;
        t.counters()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}

/// Seal a datagram laid out in `out` at once: its length.
pub(super) fn seal_now(job: &PendingSeal, out: &mut [u8]) -> Option<usize> {
    job.seal(out)
        .expect("the datagram was laid out in this very buffer");
    Some(job.datagram_len())
}

#[cfg(test)]
#[path = "seal_tests.rs"]
mod tests;
