//! [`Tunnel`]: the per-bond crypto state machine the daemon drives. See the module
//! documentation of [`crate::crypto`] for the driving rules and `docs/security.md` for
//! the protocol.

use super::cookie::{CookieChecker, MacKeys};
use super::envelope::{
    self, Kind, PendingSeal, COOKIE_REPLY_LEN, HEADER_LEN, INITIATION_LEN, MAC_LEN, OVERHEAD,
    RESPONSE_LEN, TAG_LEN,
};
use super::handshake::{self, HandshakeError};
use super::keys::{PresharedKey, PrivateKey, PublicKey};
use super::opener::{self, OpenKeys, Preopen, Preopened};
use super::ratelimit::{Budget, LoadMeter, RateLimiter, DEFAULT_TABLE_SIZE};
use super::replay::{ReplayVerdict, REJECT_AFTER_MESSAGES};
use super::rng::Rng;
use super::session::{Session, SessionId};
use super::*;
use crate::Instant;
use core::time::Duration;
use snow::HandshakeState;
use std::net::SocketAddr;

/// Settings of one [`Tunnel`]. `Debug` shows neither the private key nor the seed.
#[derive(Clone)]
pub struct TunnelConfig {
    /// Our static key.
    pub private_key: PrivateKey,
    /// The peer's static key: the only key a session is made with.
    pub peer_public_key: PublicKey,
    /// Optional symmetric key mixed into the handshake.
    pub preshared_key: Option<PresharedKey>,
    /// The AEAD this end seals transport datagrams with (it opens both). Default
    /// ChaCha20-Poly1305, which every version of braid's sealed format opens; the daemon
    /// sets it from `[bond] encryption` (`auto`: [`Cipher::preferred`]).
    pub cipher: Cipher,
    /// Size of each session's replay window; see [`ReplayWindow::bits_for`]. Default
    /// 65 536 (0.7 s at 1 Gbit/s of 1400-byte datagrams).
    pub replay_window_bits: usize,
    /// Unix time in microseconds at `Instant::ZERO`: handshake timestamps are
    /// `unix_micros_at_zero + now`, and must grow across restarts of the daemon, so the
    /// driver sets this from the wall clock when it picks its zero.
    pub unix_micros_at_zero: u64,
    /// Seed of the internal RNG (session indexes, jitter, cookie secrets). The daemon
    /// fills it from `getrandom`; tests use constants.
    pub seed: [u8; 32],
    /// Initiations with a valid mac1 per second above which the responder is under load
    /// and answers with cookies. Default 100 (boringtun's figure).
    pub under_load_threshold: u32,
    /// Sources the per-source rate limiter tracks at most. Default 4096.
    pub rate_limit_table_size: usize,
    /// Initiations without a valid mac2 (from any number of sources) the responder works
    /// on per second, burst a tenth of that; more are dropped after the mac1 check
    /// (`handshake_flood_dropped`). This bounds the work a flood takes from the data
    /// path, as WireGuard's bounded handshake queue does. Default 1000.
    pub handshake_budget: u32,
}

impl TunnelConfig {
    /// Defaults for everything but the keys and the seed.
    pub fn new(private_key: PrivateKey, peer_public_key: PublicKey, seed: [u8; 32]) -> Self {
        Self {
            private_key,
            peer_public_key,
            preshared_key: None,
            cipher: Cipher::ChaCha20Poly1305,
            replay_window_bits: 65536,
            unix_micros_at_zero: 0,
            seed,
            under_load_threshold: 100,
            rate_limit_table_size: DEFAULT_TABLE_SIZE,
            handshake_budget: 1000,
        }
    }
}

impl core::fmt::Debug for TunnelConfig {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TunnelConfig")
            .field("public_key", &self.private_key.public_key())
            .field("peer_public_key", &self.peer_public_key)
            .field("preshared_key", &self.preshared_key.as_ref().map(|_| ".."))
            .field("cipher", &self.cipher)
            .field("replay_window_bits", &self.replay_window_bits)
            .field("unix_micros_at_zero", &self.unix_micros_at_zero)
            .field("under_load_threshold", &self.under_load_threshold)
            .field("rate_limit_table_size", &self.rate_limit_table_size)
            .field("handshake_budget", &self.handshake_budget)
            .finish_non_exhaustive()
    }
}

/// Why `seal` produced nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealError {
    /// No confirmed session that may send (none yet, or expired). A handshake has been
    /// requested: call [`Tunnel::poll_transmit`]. The datagram is not sent (drop it or
    /// hold it, as WireGuard holds a few).
    NoSession,
    /// `buf` is shorter than `plaintext_len + OVERHEAD`.
    BufferTooSmall,
}

impl core::fmt::Display for SealError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SealError::NoSession => f.write_str("no session to send with (handshake pending)"),
            SealError::BufferTooSmall => f.write_str("buffer too small for the sealed datagram"),
        }
    }
}

impl std::error::Error for SealError {}

/// What an accepted datagram was.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened<'a> {
    /// An authenticated transport datagram: the user type its kind byte carried and the
    /// plaintext (for braid, a folded version-1 datagram of that type, `wire::folded`;
    /// empty for a keepalive, which the driver ignores). Only now may the driver treat the
    /// source address as the peer's (roaming).
    Data {
        /// The user type (0..=15) from the authenticated header.
        user_type: u8,
        /// The decrypted bytes, inside the caller's buffer.
        plaintext: &'a [u8],
        /// The session it came on.
        session: SessionId,
        /// Its counter.
        counter: u64,
    },
    /// A handshake message that needs an answer: send these bytes back to the source
    /// address on the path the datagram came in on. Never longer than what came in.
    Reply(&'a [u8]),
    /// A response completed our handshake: the new session sends from now on. A
    /// keepalive is waiting in [`Tunnel::poll_transmit`].
    Established(SessionId),
    /// A cookie reply was stored; the next initiation (on the retry timer) carries mac2.
    CookieStored,
}

/// A datagram the tunnel wants sent, written by [`Tunnel::poll_transmit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written at the start of the buffer.
    pub len: usize,
    /// What it is.
    pub kind: TransmitKind,
}

/// What [`Transmit`] carries. Either may go on any live path; an initiation may be sent
/// on several at once (the responder answers the first copy and sends the same response
/// again, without a DH, for each other copy, on that copy's path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransmitKind {
    /// A handshake initiation ([`envelope::INITIATION_LEN`] bytes).
    Initiation,
    /// An empty transport datagram that confirms a session we just completed as
    /// initiator ([`envelope::KEEPALIVE_LEN`] bytes).
    Keepalive,
}

macro_rules! rejects {
    ($($(#[$doc:meta])* $variant:ident => $field:ident,)*) => {
        /// Why a datagram was dropped. Each reason has a counter of the same name in
        /// [`Counters`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Rejected {
            $($(#[$doc])* $variant,)*
        }

        impl Rejected {
            /// Every reason.
            pub const ALL: &'static [Rejected] = &[$(Rejected::$variant,)*];

            /// The counter name (snake_case).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Rejected::$variant => stringify!($field),)*
                }
            }
        }

        /// Drop counters, one per [`Rejected`] reason, and event counters.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[$doc])* pub $field: u64,)*
            /// Transport datagrams sealed.
            pub sealed: u64,
            /// Transport datagrams authenticated (keepalives included).
            pub opened: u64,
            /// Initiations sent.
            pub initiations_sent: u64,
            /// Responses sent (initiations accepted).
            pub responses_sent: u64,
            /// Handshakes we completed as initiator.
            pub handshakes_completed: u64,
            /// Sessions created by either role (the first, then one per rekey).
            pub sessions_created: u64,
            /// Cookie replies sent while under load.
            pub cookie_replies_sent: u64,
            /// Cookie replies received and stored.
            pub cookies_received: u64,
            /// Handshake attempts abandoned after [`REKEY_ATTEMPT_TIME`].
            pub handshake_timeouts: u64,
            /// Responses sent again for another copy of an initiation already answered.
            pub responses_resent: u64,
            /// Initiations stamped before we started (a replay recorded before our
            /// restart, or a peer whose clock is behind): answered, but they neither end
            /// our own handshake nor delay it.
            pub stale_initiations: u64,
            /// Peer initiations that arrived while ours was unanswered (both answered;
            /// see `on_initiation`).
            pub handshake_collisions: u64,
        }

        impl Counters {
            /// The drop counter of `reason`.
            pub fn rejected(&self, reason: Rejected) -> u64 {
                match reason {
                    $(Rejected::$variant => self.$field,)*
                }
            }

            fn bump(&mut self, reason: Rejected) {
                match reason {
                    $(Rejected::$variant => self.$field += 1,)*
                }
            }

            /// Every counter with its name, drops first.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [
                    $((stringify!($field), self.$field),)*
                    ("sealed", self.sealed),
                    ("opened", self.opened),
                    ("initiations_sent", self.initiations_sent),
                    ("responses_sent", self.responses_sent),
                    ("handshakes_completed", self.handshakes_completed),
                    ("sessions_created", self.sessions_created),
                    ("cookie_replies_sent", self.cookie_replies_sent),
                    ("cookies_received", self.cookies_received),
                    ("handshake_timeouts", self.handshake_timeouts),
                    ("responses_resent", self.responses_resent),
                    ("stale_initiations", self.stale_initiations),
                    ("handshake_collisions", self.handshake_collisions),
                ]
                .into_iter()
            }

            /// All drops together.
            pub fn rejected_total(&self) -> u64 {
                0 $(+ self.$field)*
            }
        }
    };
}

rejects! {
    /// First byte is not 2 (a plaintext version-1 datagram, or garbage).
    BadVersion => bad_version,
    /// Shorter than its kind needs.
    Truncated => truncated,
    /// Unknown kind, non-zero reserved bytes, or a handshake message of the wrong length.
    Malformed => malformed,
    /// Transport, response or cookie reply naming an index we do not have.
    UnknownReceiverIndex => unknown_receiver_index,
    /// Transport counter already seen (or at the end of the counter space).
    Replayed => replayed,
    /// Transport counter further behind the newest than the replay window reaches: a
    /// replay, or a path whose delay exceeds the window (then enlarge it).
    ReplayTooOld => replay_too_old,
    /// Transport tag did not verify: forged, altered or sealed with another key.
    BadTag => bad_tag,
    /// Transport datagram on a session older than [`REJECT_AFTER_TIME`].
    Expired => expired,
    /// Handshake message whose mac1 is wrong: sender does not know our public key.
    BadMac1 => bad_mac1,
    /// Initiation refused by the per-source token bucket (or a full source table).
    RateLimited => rate_limited,
    /// Noise could not read the handshake message (wrong keys, altered bytes).
    HandshakeFailed => handshake_failed,
    /// Valid initiation from a static key other than our peer's.
    UnknownPeer => unknown_peer,
    /// Initiation whose timestamp is not newer than the last accepted one (a replay).
    HandshakeTooOld => handshake_too_old,
    /// Cookie reply that did not decrypt.
    BadCookie => bad_cookie,
    /// Initiation (valid mac1, no valid mac2) beyond [`TunnelConfig::handshake_budget`]:
    /// dropped without a DH or a cookie reply.
    FloodDropped => handshake_flood_dropped,
    /// The response that completed our last handshake, again: the answer to another copy
    /// of our initiation (sent on another path). Harmless.
    DuplicateResponse => duplicate_response,
}

impl core::fmt::Display for Rejected {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for Rejected {}

/// How far before our start an initiation's timestamp may be and still count as sent
/// after it (clocks of the two peers may differ by this much).
const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// Copies of one initiation answered again, at most (a bond has at most 64 paths).
const MAX_RESENDS: u8 = 64;

/// The last initiation we answered (up to and with mac1: mac2 depends on the source),
/// and our response, to send again for each copy that arrives on another path.
struct Answered {
    initiation: [u8; INITIATION_LEN - MAC_LEN],
    response: [u8; RESPONSE_LEN],
    at: Instant,
    resent: u8,
}

/// Our handshake in flight.
struct Pending {
    state: HandshakeState,
    sender_index: u32,
    mac1: [u8; MAC_LEN],
}

/// The crypto state of one bond with one peer: handshakes, up to three sessions
/// (current, previous, next), cookies and rate limits. Sans-IO: see [`crate::crypto`].
pub struct Tunnel {
    config: TunnelConfig,
    local_public: PublicKey,
    rng: Rng,
    /// Checks mac1 of messages to us; makes cookies.
    checker: CookieChecker,
    /// Stamps mac1 on messages to the peer; opens its cookies.
    peer_macs: MacKeys,
    limiter: RateLimiter,
    load: LoadMeter,
    budget: Budget,

    /// Confirmed; sends and receives.
    current: Option<Session>,
    /// The one before `current`; receives only, until it expires.
    previous: Option<Session>,
    /// Made as responder; receives, and becomes `current` on its first authenticated
    /// datagram (if newer than `current`).
    next: Option<Session>,

    pending: Option<Pending>,
    /// No initiation before this (the retry timer of the last one sent).
    retry_at: Instant,
    /// A handshake is wanted (no session, rekey due, or asked for) until this deadline.
    wanted_until: Option<Instant>,
    keepalive_due: bool,
    /// Cookie from the peer's cookie reply, with when it arrived.
    cookie: Option<([u8; MAC_LEN], Instant)>,
    /// Newest initiation timestamp accepted from the peer.
    last_timestamp: [u8; envelope::TIMESTAMP_LEN],
    /// Initiations stamped before this are stale: our start less [`CLOCK_SKEW`].
    stale_before: [u8; envelope::TIMESTAMP_LEN],
    /// We answered a (fresh) initiation: no handshake of our own until then, unless
    /// its session is confirmed first.
    hold_until: Option<Instant>,
    /// Our answer to the last accepted initiation, until the session it made is
    /// confirmed or [`REKEY_TIMEOUT`] has passed.
    answered: Option<Answered>,
    /// The response that completed our last handshake as initiator.
    completed: Option<[u8; RESPONSE_LEN]>,
    /// The cipher of the peer's latest authenticated transport datagram.
    peer_cipher: Option<Cipher>,

    counters: Counters,
}

impl core::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tunnel")
            .field("local", &self.local_public)
            .field("peer", &self.config.peer_public_key)
            .field("current", &self.current.as_ref().map(Session::id))
            .field("previous", &self.previous.as_ref().map(Session::id))
            .field("next", &self.next.as_ref().map(Session::id))
            .field("pending", &self.pending.as_ref().map(|p| p.sender_index))
            .field("counters", &self.counters)
            .finish()
    }
}

impl Tunnel {
    /// A tunnel with no session yet. Nothing is sent until [`Tunnel::start_handshake`],
    /// a [`Tunnel::seal`] or the peer's initiation.
    pub fn new(config: TunnelConfig) -> Self {
        let local_public = config.private_key.public_key();
        Self {
            rng: Rng::new(config.seed),
            checker: CookieChecker::new(&local_public),
            peer_macs: MacKeys::new(&config.peer_public_key),
            limiter: RateLimiter::new(config.rate_limit_table_size),
            load: LoadMeter::new(config.under_load_threshold),
            budget: Budget::new(config.handshake_budget, config.handshake_budget / 10),
            local_public,
            current: None,
            previous: None,
            next: None,
            pending: None,
            retry_at: Instant::ZERO,
            wanted_until: None,
            keepalive_due: false,
            cookie: None,
            last_timestamp: [0; envelope::TIMESTAMP_LEN],
            stale_before: handshake::tai64n(
                config
                    .unix_micros_at_zero
                    .saturating_sub(CLOCK_SKEW.as_micros() as u64),
            ),
            hold_until: None,
            answered: None,
            completed: None,
            peer_cipher: None,
            counters: Counters::default(),
            config,
        }
    }

    /// Our public key.
    pub fn local_public_key(&self) -> PublicKey {
        self.local_public
    }

    /// The peer's public key.
    pub fn peer_public_key(&self) -> PublicKey {
        self.config.peer_public_key
    }

    /// The cipher we seal with.
    pub fn cipher(&self) -> Cipher {
        self.config.cipher
    }

    /// The cipher the peer sealed its latest authenticated transport datagram with (None
    /// before the first).
    pub fn peer_cipher(&self) -> Option<Cipher> {
        self.peer_cipher
    }

    /// The replay window's size, in packets.
    pub fn replay_window_bits(&self) -> usize {
        self.config.replay_window_bits
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The session [`Tunnel::seal`] uses now, if any.
    pub fn current_session(&self, now: Instant) -> Option<SessionId> {
        self.current
            .as_ref()
            .filter(|s| Self::can_send(s, now))
            .map(Session::id)
    }

    /// The sender index of our handshake in flight (the initiation sent last and not yet
    /// answered, abandoned or timed out), if any.
    pub fn pending_handshake(&self) -> Option<u32> {
        self.pending.as_ref().map(|p| p.sender_index)
    }

    /// Whether a session can send at `now`.
    pub fn is_established(&self, now: Instant) -> bool {
        self.current_session(now).is_some()
    }

    /// Ask for a handshake now (at start, or when the driver wants new keys). Call
    /// [`Tunnel::poll_transmit`] next.
    pub fn start_handshake(&mut self, now: Instant) {
        self.want_handshake(now);
    }

    fn want_handshake(&mut self, now: Instant) {
        if self.wanted_until.is_none() {
            self.wanted_until = Some(now + REKEY_ATTEMPT_TIME);
        }
    }

    fn can_send(s: &Session, now: Instant) -> bool {
        now.saturating_since(s.created) < REJECT_AFTER_TIME
            && s.send_counter < REJECT_AFTER_MESSAGES
    }

    /// Seal the plaintext at `buf[HEADER_LEN..HEADER_LEN + plaintext_len]` (write it
    /// there first: the driver reserves [`envelope::HEADER_LEN`] bytes in front and
    /// [`envelope::TAG_LEN`] behind), in place, with `user_type` (its low 4 bits: for braid
    /// the folded datagram's message type) in the authenticated header. Returns the sealed
    /// length, `plaintext_len + OVERHEAD`, to send on any path. No allocation.
    ///
    /// May request a handshake (rekey due, or no session): call
    /// [`Tunnel::poll_transmit`] afterwards.
    pub fn seal(
        &mut self,
        now: Instant,
        user_type: u8,
        buf: &mut [u8],
        plaintext_len: usize,
    ) -> Result<usize, SealError> {
        let job = self.seal_deferred(now, user_type, buf, plaintext_len)?;
        job.seal(buf).map_err(|_| SealError::BufferTooSmall)?;
        Ok(job.datagram_len())
    }

    /// [`Tunnel::seal`] without the AEAD: the datagram gets its header and counter in
    /// `buf` (plaintext until sealed), and the returned [`PendingSeal`] encrypts and tags
    /// it, on whatever thread the caller likes, before it is sent. Datagrams may be
    /// sealed and sent in any order (the receiver's replay window takes them so).
    pub fn seal_deferred(
        &mut self,
        now: Instant,
        user_type: u8,
        buf: &mut [u8],
        plaintext_len: usize,
    ) -> Result<PendingSeal, SealError> {
        if buf.len() < plaintext_len.saturating_add(OVERHEAD) {
            return Err(SealError::BufferTooSmall);
        }
        let Some(s) = self.current.as_mut().filter(|s| Self::can_send(s, now)) else {
            // A responder session made for a fresh initiation means the peer's
            // confirmation is on its way (a stale one's may never come: review L3).
            let confirming = self.next.is_some() && self.hold_until.is_some_and(|t| now < t);
            if !confirming {
                self.want_handshake(now);
            }
            return Err(SealError::NoSession);
        };
        let age = now.saturating_since(s.created);
        let rekey_age = if s.initiator {
            REKEY_AFTER_TIME
        } else {
            REKEY_AFTER_TIME_RESPONDER
        };
        let rekey = age >= rekey_age || s.send_counter >= REKEY_AFTER_MESSAGES;
        let job = s
            .seal_deferred(user_type, buf, plaintext_len)
            .map_err(|_| SealError::BufferTooSmall)?;
        self.counters.sealed += 1;
        if rekey {
            self.want_handshake(now);
        }
        Ok(job)
    }

    /// Copying form of [`Tunnel::seal`]: seal `plaintext` into `out`.
    pub fn seal_from(
        &mut self,
        now: Instant,
        user_type: u8,
        plaintext: &[u8],
        out: &mut [u8],
    ) -> Result<usize, SealError> {
        let dst = out
            .get_mut(HEADER_LEN..HEADER_LEN + plaintext.len())
            .ok_or(SealError::BufferTooSmall)?;
        dst.copy_from_slice(plaintext);
        self.seal(now, user_type, out, plaintext.len())
    }

    /// Process one datagram that arrived from `src`, in place. Every refusal is counted
    /// under [`Rejected::name`]. Transport datagrams are checked, in order: version,
    /// length, kind, receiver index, expiry, replay window (before decrypting), tag; only
    /// then is the counter marked. Handshake messages: length, then mac1 (initiations,
    /// before any state, allocation, budget token or DH) or the pending handshake's index
    /// (responses, cookie replies); for initiations then the budget (unless mac2 is
    /// valid), load/cookie, per-source rate limit, then Noise.
    pub fn open<'a>(
        &mut self,
        now: Instant,
        src: SocketAddr,
        datagram: &'a mut [u8],
    ) -> Result<Opened<'a>, Rejected> {
        let r = self.open_inner(now, src, datagram);
        if let Err(reason) = r {
            self.counters.bump(reason);
        }
        r
    }

    /// The receive keys of the live sessions, to open datagrams on other threads
    /// ([`OpenKeys::open`]); pass what it found to [`Tunnel::open_preopened`].
    pub fn open_keys(&self) -> OpenKeys {
        OpenKeys::new(
            [&self.current, &self.next, &self.previous]
                .into_iter()
                .flatten()
                .map(|s| (s.local_index as u16, s.recv_key(), s.replay.top())),
        )
    }

    /// [`Tunnel::open`] for a datagram that went through [`OpenKeys::open`] first:
    /// untouched, it is opened here; opened, everything but the AEAD is checked here, in
    /// the same order; failed, it is counted as a bad tag. Call in the order the datagrams
    /// arrived.
    pub fn open_preopened<'a>(
        &mut self,
        now: Instant,
        src: SocketAddr,
        datagram: &'a mut [u8],
        pre: Preopen,
    ) -> Result<Opened<'a>, Rejected> {
        let r = match pre {
            Preopen::Untouched => return self.open(now, src, datagram),
            Preopen::Opened(p) => self.open_transport(now, datagram, Some(&p)),
            Preopen::Failed => Err(Rejected::BadTag),
        };
        if let Err(reason) = r {
            self.counters.bump(reason);
        }
        r
    }

    fn open_inner<'a>(
        &mut self,
        now: Instant,
        src: SocketAddr,
        datagram: &'a mut [u8],
    ) -> Result<Opened<'a>, Rejected> {
        match datagram.first() {
            None => return Err(Rejected::Truncated),
            Some(&envelope::VERSION) => {}
            Some(_) => return Err(Rejected::BadVersion),
        }
        if datagram.len() < 2 {
            return Err(Rejected::Truncated);
        }
        let kind = datagram
            .get(1)
            .and_then(|&k| Kind::from_byte(k))
            .ok_or(Rejected::Malformed)?;
        if kind != Kind::Transport {
            // Handshake messages: `4, kind, 0, 0`.
            if datagram.len() < 4 {
                return Err(Rejected::Truncated);
            }
            if datagram.get(2..4) != Some(&[0, 0][..]) {
                return Err(Rejected::Malformed);
            }
        }
        match kind {
            Kind::Transport => self.open_transport(now, datagram, None),
            Kind::Initiation => self.on_initiation(now, src, datagram),
            Kind::Response => self.on_response(now, datagram),
            Kind::CookieReply => self.on_cookie(now, datagram),
        }
    }

    /// The session a transport datagram names by the low 16 bits of our index.
    fn slot_of(&self, index: u16) -> Option<u8> {
        let is = |s: &Option<Session>| s.as_ref().is_some_and(|s| s.named_by(index));
        if is(&self.current) {
            Some(0)
        } else if is(&self.next) {
            Some(2)
        } else if is(&self.previous) {
            Some(1)
        } else {
            None
        }
    }

    fn slot_mut(&mut self, slot: u8) -> Option<&mut Session> {
        match slot {
            0 => self.current.as_mut(),
            1 => self.previous.as_mut(),
            _ => self.next.as_mut(),
        }
    }

    fn open_transport<'a>(
        &mut self,
        now: Instant,
        datagram: &'a mut [u8],
        pre: Option<&Preopened>,
    ) -> Result<Opened<'a>, Rejected> {
        if datagram.len() < OVERHEAD {
            return Err(Rejected::Truncated);
        }
        let (user_type, index, low) =
            envelope::read_transport_header(datagram).ok_or(Rejected::Malformed)?;
        let slot = self.slot_of(index).ok_or(Rejected::UnknownReceiverIndex)?;
        let s = self.slot_mut(slot).ok_or(Rejected::UnknownReceiverIndex)?;
        if now.saturating_since(s.created) >= REJECT_AFTER_TIME {
            return Err(Rejected::Expired);
        }
        // Opened elsewhere: by this session's key (an index is reused only after the
        // session it named is gone), with the counter it was opened with.
        let counter = match pre {
            Some(p) if p.index != index || p.key != opener::key_id(s.recv_key()) => {
                return Err(Rejected::BadTag)
            }
            Some(p) => p.counter,
            None => envelope::expand_counter(s.replay.top(), low),
        };
        match s.replay.check(counter) {
            ReplayVerdict::Fresh => {}
            ReplayVerdict::TooOld => return Err(Rejected::ReplayTooOld),
            ReplayVerdict::Duplicate | ReplayVerdict::Exhausted => return Err(Rejected::Replayed),
        }
        if pre.is_none() {
            s.open(counter, datagram).map_err(|_| Rejected::BadTag)?;
        }
        s.replay.mark(counter);
        let id = s.id();
        self.counters.opened += 1;
        self.peer_cipher = datagram.get(1).copied().and_then(Cipher::from_kind);
        if slot == 2 {
            self.confirm_next();
        }
        let len = datagram.len();
        let d: &'a [u8] = datagram;
        Ok(Opened::Data {
            user_type,
            plaintext: d
                .get(HEADER_LEN..len - TAG_LEN)
                .expect("the length was checked against OVERHEAD (header and tag) above"),
            session: id,
            counter,
        })
    }

    /// The peer used the responder session: it has the keys, so we may send with it.
    fn confirm_next(&mut self) {
        let newer = match (&self.next, &self.current) {
            (Some(n), Some(c)) => n.created >= c.created,
            (Some(_), None) => true,
            _ => false,
        };
        if newer {
            let old = self.current.take();
            self.current = self.next.take();
            if old.is_some() {
                self.previous = old;
            }
            // A handshake we started meanwhile is no longer needed.
            self.pending = None;
            self.wanted_until = None;
            self.answered = None;
        }
    }

    fn fresh_index(&mut self) -> u32 {
        loop {
            // Transport datagrams name a session by the low 16 bits of its index: those
            // differ between our live sessions and the handshake in flight.
            let i = self.rng.next_u32();
            let low = i as u16;
            let used = |s: &Option<Session>| s.as_ref().is_some_and(|s| s.named_by(low));
            let pending = self
                .pending
                .as_ref()
                .is_some_and(|p| p.sender_index as u16 == low);
            if low != 0
                && !used(&self.current)
                && !used(&self.previous)
                && !used(&self.next)
                && !pending
            {
                return i;
            }
        }
    }

    fn on_initiation<'a>(
        &mut self,
        now: Instant,
        src: SocketAddr,
        datagram: &'a mut [u8],
    ) -> Result<Opened<'a>, Rejected> {
        if datagram.len() < INITIATION_LEN {
            return Err(Rejected::Truncated);
        }
        if datagram.len() > INITIATION_LEN {
            return Err(Rejected::Malformed);
        }
        if self.resend(now, datagram) {
            let d: &'a [u8] = datagram;
            let reply = d
                .get(..RESPONSE_LEN)
                .expect("a response is shorter than the initiation it was written over");
            return Ok(Opened::Reply(reply));
        }
        if !self.checker.keys().check_mac1(datagram) {
            return Err(Rejected::BadMac1);
        }
        let under_load = self.load.record(now);
        // A valid mac2 proves the source receives at its address (it holds our cookie):
        // such an initiation is not dropped for the budget. Without a cookie mac2 is zeros.
        let proven = datagram.get(INITIATION_LEN - MAC_LEN..) != Some(&[0u8; MAC_LEN][..])
            && self.checker.check_mac2(now, src, datagram, &mut self.rng);
        if !proven && !self.budget.take(now) {
            return Err(Rejected::FloodDropped);
        }
        // As WireGuard: cookies and the per-source limit only under load. Always on, the
        // limit let a spoofer who knows our public key starve the peer's address at 90
        // initiations a second, below the load threshold (review L1).
        if under_load {
            if !proven {
                let n = self.checker.write_reply(now, src, datagram, &mut self.rng);
                if n != COOKIE_REPLY_LEN {
                    return Err(Rejected::Malformed);
                }
                self.counters.cookie_replies_sent += 1;
                let d: &'a [u8] = datagram;
                let reply = d
                    .get(..n)
                    .expect("a cookie reply is shorter than the initiation it was written over");
                return Ok(Opened::Reply(reply));
            }
            if !self.limiter.allow(now, src.ip()) {
                return Err(Rejected::RateLimited);
            }
        }
        let read = handshake::read_initiation(
            &self.config.private_key,
            &self.config.peer_public_key,
            self.config.preshared_key.as_ref(),
            datagram,
        )
        .map_err(|e| match e {
            HandshakeError::Failed => Rejected::HandshakeFailed,
            HandshakeError::UnknownPeer => Rejected::UnknownPeer,
        })?;
        if read.timestamp <= self.last_timestamp {
            return Err(Rejected::HandshakeTooOld);
        }
        // Stamped before we started: a replay of an initiation recorded before our
        // restart (our memory of timestamps went with it), or a peer whose clock is
        // behind ours. Answered, since the peer may be real, but it neither ends our own
        // handshake nor holds it back (review L3).
        let stale = read.timestamp < self.stale_before;
        if self.pending.is_some() {
            // Both sides initiated (both ends started at once, say). Both answer, so
            // whichever initiation got through completes in one round trip; the higher
            // public key also abandons its own, so that when both got through only the
            // lower key's makes a session (its answer to ours names a handshake we no
            // longer have). The lower key keeps its own: it may have been lost (the peer
            // was not up yet), and then our answer is what completes.
            self.counters.handshake_collisions += 1;
            if self.local_public > self.config.peer_public_key && !stale {
                self.pending = None;
                self.wanted_until = None;
            }
        }
        if stale {
            self.counters.stale_initiations += 1;
        } else {
            self.hold_until = Some(now + REKEY_TIMEOUT);
        }
        self.last_timestamp = read.timestamp;
        let local_index = self.fresh_index();
        let mut out = [0u8; RESPONSE_LEN];
        let keys = handshake::write_response(
            read.state,
            &self.peer_macs,
            read.sender_index,
            local_index,
            &mut out,
        )
        .ok_or(Rejected::HandshakeFailed)?;
        self.next = Some(Session::new(
            local_index,
            read.sender_index,
            keys,
            self.config.cipher,
            self.config.replay_window_bits,
            now,
            false,
        ));
        self.counters.sessions_created += 1;
        self.counters.responses_sent += 1;
        let mut initiation = [0u8; INITIATION_LEN - MAC_LEN];
        initiation.copy_from_slice(
            datagram
                .get(..INITIATION_LEN - MAC_LEN)
                .unwrap_or(&[0u8; INITIATION_LEN - MAC_LEN]),
        );
        self.answered = Some(Answered {
            initiation,
            response: out,
            at: now,
            resent: 0,
        });
        let reply = datagram
            .get_mut(..RESPONSE_LEN)
            .ok_or(Rejected::Truncated)?;
        reply.copy_from_slice(&out);
        let d: &'a [u8] = reply;
        Ok(Opened::Reply(d))
    }

    /// Another copy of the initiation we answered last (the initiator sends one on every
    /// path): our response again, written over it, with no DH, so that a path that works
    /// in one direction only cannot keep the handshake from completing (review L2). Equal
    /// bytes up to mac1 mean mac1 is valid too. Bounded in time and count. Returns
    /// whether the response was written at the start of `datagram`.
    fn resend(&mut self, now: Instant, datagram: &mut [u8]) -> bool {
        let Some(a) = self.answered.as_mut() else {
            return false;
        };
        if datagram.get(..INITIATION_LEN - MAC_LEN) != Some(&a.initiation[..])
            || now.saturating_since(a.at) >= REKEY_TIMEOUT
            || a.resent >= MAX_RESENDS
        {
            return false;
        }
        let Some(reply) = datagram.get_mut(..RESPONSE_LEN) else {
            return false;
        };
        reply.copy_from_slice(&a.response);
        a.resent += 1;
        self.counters.responses_resent += 1;
        true
    }

    fn on_response<'a>(
        &mut self,
        now: Instant,
        datagram: &'a mut [u8],
    ) -> Result<Opened<'a>, Rejected> {
        if datagram.len() < RESPONSE_LEN {
            return Err(Rejected::Truncated);
        }
        if datagram.len() > RESPONSE_LEN {
            return Err(Rejected::Malformed);
        }
        let receiver = envelope::read_u32(datagram, 4);
        if self.pending.as_ref().map(|p| p.sender_index) != Some(receiver) {
            if self.completed.is_some_and(|c| c[..] == datagram[..]) {
                return Err(Rejected::DuplicateResponse);
            }
            return Err(Rejected::UnknownReceiverIndex);
        }
        if !self.checker.keys().check_mac1(datagram) {
            return Err(Rejected::BadMac1);
        }
        let Some(p) = self.pending.as_mut() else {
            return Err(Rejected::UnknownReceiverIndex);
        };
        // A response that fails (forged by someone who saw our initiation, or sealed with
        // another preshared key) leaves the pending handshake as it was: the real
        // response may still come. The retry timer is not touched either.
        let keys = match handshake::read_response(&mut p.state, datagram) {
            Ok(k) => k,
            Err(_) => {
                if p.state.is_handshake_finished() {
                    // Noise accepted it but it carried a payload: the state is spent.
                    self.pending = None;
                }
                return Err(Rejected::HandshakeFailed);
            }
        };
        let sender_index = p.sender_index;
        self.pending = None;
        self.completed = datagram.get(..RESPONSE_LEN).and_then(|d| d.try_into().ok());
        let remote_index = envelope::read_u32(datagram, 8);
        let session = Session::new(
            sender_index,
            remote_index,
            keys,
            self.config.cipher,
            self.config.replay_window_bits,
            now,
            true,
        );
        let id = session.id();
        let old = self.current.replace(session);
        if old.is_some() {
            self.previous = old;
        }
        self.wanted_until = None;
        self.keepalive_due = true;
        self.counters.handshakes_completed += 1;
        self.counters.sessions_created += 1;
        Ok(Opened::Established(id))
    }

    fn on_cookie<'a>(
        &mut self,
        now: Instant,
        datagram: &'a mut [u8],
    ) -> Result<Opened<'a>, Rejected> {
        if datagram.len() < COOKIE_REPLY_LEN {
            return Err(Rejected::Truncated);
        }
        if datagram.len() > COOKIE_REPLY_LEN {
            return Err(Rejected::Malformed);
        }
        let receiver = envelope::read_u32(datagram, 4);
        let Some(p) = self.pending.as_ref().filter(|p| p.sender_index == receiver) else {
            return Err(Rejected::UnknownReceiverIndex);
        };
        let cookie = self
            .peer_macs
            .open_cookie(datagram, &p.mac1)
            .ok_or(Rejected::BadCookie)?;
        self.cookie = Some((cookie, now));
        self.counters.cookies_received += 1;
        Ok(Opened::CookieStored)
    }

    /// A datagram the tunnel wants sent now, written into `buf` (at least
    /// [`envelope::INITIATION_LEN`] bytes). Call after every other call until it returns
    /// `None`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.keepalive_due {
            self.keepalive_due = false;
            if let Ok(len) = self.seal(now, 0, buf, 0) {
                return Some(Transmit {
                    len,
                    kind: TransmitKind::Keepalive,
                });
            }
        }
        let until = self.wanted_until?;
        if now >= until {
            self.wanted_until = None;
            self.pending = None;
            self.counters.handshake_timeouts += 1;
            return None;
        }
        if now < self.retry_at {
            return None;
        }
        let out: &mut [u8; INITIATION_LEN] = buf.get_mut(..INITIATION_LEN)?.try_into().ok()?;
        let sender_index = self.fresh_index();
        let ts = handshake::tai64n(
            self.config
                .unix_micros_at_zero
                .saturating_add(now.as_micros()),
        );
        let cookie = self
            .cookie
            .as_ref()
            .filter(|(_, at)| now.saturating_since(*at) < super::cookie::COOKIE_SECRET_LIFETIME)
            .map(|(c, _)| c);
        let state = handshake::write_initiation(
            &self.config.private_key,
            &self.config.peer_public_key,
            self.config.preshared_key.as_ref(),
            &self.peer_macs,
            sender_index,
            &ts,
            cookie,
            out,
        )?;
        let mut mac1 = [0u8; MAC_LEN];
        let cut = INITIATION_LEN - 2 * MAC_LEN;
        mac1.copy_from_slice(out.get(cut..cut + MAC_LEN)?);
        let jitter =
            Duration::from_micros(self.rng.below(REKEY_TIMEOUT_JITTER.as_micros() as u64 + 1));
        self.pending = Some(Pending {
            state,
            sender_index,
            mac1,
        });
        self.retry_at = now + REKEY_TIMEOUT + jitter;
        self.counters.initiations_sent += 1;
        Some(Transmit {
            len: INITIATION_LEN,
            kind: TransmitKind::Initiation,
        })
    }

    /// When [`Tunnel::handle_timeout`] next has something to do (retry or give up a
    /// handshake, erase old keys). `None`: nothing scheduled.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        if let Some(until) = self.wanted_until {
            consider(until);
            consider(self.retry_at);
        }
        if self.keepalive_due {
            consider(Instant::ZERO);
        }
        for s in [&self.current, &self.previous, &self.next]
            .into_iter()
            .flatten()
        {
            consider(s.created + ERASE_KEYS_AFTER);
        }
        t
    }

    /// Run the timers: erase keys of sessions older than [`ERASE_KEYS_AFTER`], sweep the
    /// rate limiter. Then call [`Tunnel::poll_transmit`] (retries and give-ups happen
    /// there).
    pub fn handle_timeout(&mut self, now: Instant) {
        for slot in [&mut self.current, &mut self.previous, &mut self.next] {
            if slot
                .as_ref()
                .is_some_and(|s| now.saturating_since(s.created) >= ERASE_KEYS_AFTER)
            {
                *slot = None;
            }
        }
        self.limiter.maybe_sweep(now);
    }
}
