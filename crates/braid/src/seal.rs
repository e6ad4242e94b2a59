//! The daemon's side of path encryption: a [`Sealer`] owns the bond's
//! [`braid_core::crypto::Tunnel`] and sits between the bond and the path sockets.
//!
//! - **Out**: every datagram the bond emits goes through [`Sealer::outgoing`] before it
//!   goes on a path. While no session exists (the first handshake, or after one expired)
//!   the datagram is dropped and counted (`no_session_dropped`): the bond's probes and
//!   TCP's retransmissions repeat what matters, and holding packets would only delay the
//!   first handshake's completion.
//! - **In**: every datagram read from a path socket goes through [`Sealer::incoming`]
//!   first. Only authenticated transport plaintext ([`Incoming::Deliver`]) reaches the
//!   bond; handshake answers ([`Incoming::Reply`]) go back to the source on the same path;
//!   everything else is dropped and counted under its [`Rejected::name`].
//! - **Roaming**: a path's peer address follows authenticated datagrams only, and only
//!   once the old address has gone quiet: see [`Roaming`].
//! - **Handshakes**: initiations and keepalives from [`Sealer::poll_transmit`] go out on
//!   every path with an open socket (an initiation is 148 bytes; the peer answers every
//!   copy, on its own path, with the same response). The first handshake starts at once.
//! - `encryption = "none"`: only datagrams from a UDP path's configured remote address
//!   are accepted (`unknown_source`), and each carries verification tags
//!   ([`braid_core::plain`]) so that a spoofer who cannot see the path cannot inject:
//!   datagrams without our tag are refused (`tags.wrong_tag`) and answered with a hint
//!   that lets a restarted peer learn our tag. Serial lines have no addresses to spoof;
//!   their datagrams pass as they are (the frame codec checks a CRC-32 on plain lines).

use std::net::SocketAddr;
use std::time::Duration;

use braid_core::crypto::envelope::OVERHEAD;
use braid_core::crypto::{
    Opened, Rejected, ReplayWindow, SealError, SessionId, Tunnel, TunnelConfig,
};
use braid_core::crypto::{OsRng, PrivateKey};
use braid_core::plain::{self, PlainTags, TAG_HEADER_LEN};
use braid_core::Instant;
use serde_json::{json, Map, Value};

use crate::config::{Config, Encryption};

/// Largest datagram the sealer handles (the daemon's read size).
pub const MAX_DATAGRAM: usize = 65536;

/// Smallest replay window, in packets: 65 536 (0.7 s at 1 Gbit/s of 1400-byte datagrams).
pub const MIN_REPLAY_WINDOW: usize = 65536;

/// The packet size the window is sized for: small packets make the most packets per
/// second at a given rate.
const SIZING_PACKET_BYTES: u64 = 256;

/// The rate the window is sized for when no path has a configured `bps`.
const DEFAULT_SIZING_BPS: u64 = 1_000_000_000;

/// One path's roaming state, kept by the caller next to the path's peer address.
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
/// path's datagrams from it while the old one is silent.
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
    /// Authenticated plaintext for the bond (`bond.handle_datagram`).
    Deliver(&'a [u8]),
    /// Send these bytes back to the source on the same path.
    Reply(&'a [u8]),
    /// Nothing for the bond (counted, or a handshake step that needs no answer).
    Drop,
}

/// The daemon's own counters (the tunnel's are in [`Tunnel::counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
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
}

/// The address a serial line's datagrams are said to come from (the tunnel keys its
/// per-source state by address).
pub const LINE_PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

/// Bytes the sealer adds to a datagram on a UDP path: the AEAD envelope with keys, the
/// verification tags without.
pub fn udp_overhead(sealed: bool) -> usize {
    if sealed {
        OVERHEAD
    } else {
        TAG_HEADER_LEN
    }
}

/// The shortest silence of a path's peer address before the path may move.
const MIN_ROAM_QUIET: Duration = Duration::from_millis(100);

/// The replay window for a bond: the packets that can arrive in `max(reorder_max, 200 ms)`
/// at the sum of the paths' configured rates (1 Gbit/s when none is configured) in
/// 256-byte packets, and at least [`MIN_REPLAY_WINDOW`]. A datagram further behind than
/// the reorder buffer waits is useless anyway; the 200 ms floor covers paths whose delays
/// differ more than the reorder buffer's default allows.
pub fn replay_window_bits(cfg: &Config) -> usize {
    let bps: u64 = cfg.paths.iter().map(|p| p.bps).sum();
    let bps = if bps == 0 { DEFAULT_SIZING_BPS } else { bps };
    let spread = cfg.bond.core.reorder_max.max(Duration::from_millis(200));
    let pps = ReplayWindow::packet_rate(bps, SIZING_PACKET_BYTES);
    ReplayWindow::bits_for(pps, spread).max(MIN_REPLAY_WINDOW)
}

/// The crypto between a bond and its path sockets. See the module documentation.
pub struct Sealer {
    tunnel: Option<Tunnel>,
    /// Without keys: the verification tags of UDP paths.
    tags: PlainTags,
    /// Scratch for sealing and for the tunnel's own transmits.
    buf: Vec<u8>,
    /// Without keys: one datagram in its tag envelope.
    tagged: Vec<u8>,
    counters: SealCounters,
    /// Testing: start a handshake this often.
    rekey_every: Option<Duration>,
    next_rekey: Instant,
    window_bits: usize,
    /// Why the tunnel refused the last datagram (for the daemon's log).
    last_rejected: Option<Rejected>,
    /// How long a path's peer address must be silent before it may move ([`Roaming`]).
    roam_quiet: Duration,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("tunnel", &self.tunnel)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// The sealer of `cfg`'s bond, with the first handshake requested at `now`.
    pub fn new(cfg: &Config, now: Instant) -> Sealer {
        let window_bits = replay_window_bits(cfg);
        let mut rekey_every = None;
        let tags = PlainTags::new(rand_core::RngCore::next_u64(&mut OsRng));
        let tunnel = match &cfg.bond.encryption {
            Encryption::None => None,
            Encryption::Keys(k) => {
                // 32 random bytes from the OS (a fresh key is exactly that, clamped).
                let seed = *PrivateKey::generate(&mut OsRng).as_bytes();
                let mut tc = TunnelConfig::new(k.private_key.clone(), k.peer_public_key, seed);
                tc.preshared_key = k.preshared_key.clone();
                tc.replay_window_bits = window_bits;
                tc.unix_micros_at_zero = unix_micros().saturating_sub(now.as_micros());
                let mut t = Tunnel::new(tc);
                t.start_handshake(now);
                rekey_every = k.rekey_after;
                Some(t)
            }
        };
        let h = &cfg.bond.core.health;
        let roam_quiet = h
            .probe_interval
            .saturating_mul(h.down_after.max(1))
            .max(MIN_ROAM_QUIET);
        Sealer {
            roam_quiet,
            tunnel,
            tags,
            buf: vec![0; MAX_DATAGRAM + OVERHEAD],
            tagged: Vec::new(),
            counters: SealCounters::default(),
            rekey_every,
            next_rekey: rekey_every.map_or(Instant::FAR_FUTURE, |d| now + d),
            window_bits,
            last_rejected: None,
        }
    }

    /// Whether datagrams are sealed.
    pub fn enabled(&self) -> bool {
        self.tunnel.is_some()
    }

    /// Bytes sealing adds to a datagram on a UDP path.
    pub fn overhead(&self) -> usize {
        udp_overhead(self.enabled())
    }

    /// The bytes to send for one datagram of the bond on a UDP path: with keys the sealed
    /// copy, else the datagram in its tag envelope. `None`: dropped (no session yet;
    /// counted).
    pub fn outgoing<'a>(&'a mut self, now: Instant, datagram: &'a [u8]) -> Option<&'a [u8]> {
        if self.tunnel.is_none() {
            self.tags.wrap(datagram, &mut self.tagged);
            return Some(&self.tagged);
        }
        self.outgoing_line(now, datagram)
    }

    /// The bytes to send for one datagram of the bond on a serial line: with keys the
    /// sealed copy, else `datagram` itself. `None`: dropped (no session yet; counted).
    pub fn outgoing_line<'a>(&'a mut self, now: Instant, datagram: &'a [u8]) -> Option<&'a [u8]> {
        let Some(t) = &mut self.tunnel else {
            return Some(datagram);
        };
        match t.seal_from(now, datagram, &mut self.buf) {
            Ok(n) => self.buf.get(..n),
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
        let mut peer = LINE_PEER;
        self.incoming(now, &mut peer, &mut Roaming::default(), LINE_PEER, bytes)
    }

    /// Process a datagram from `src` on a path whose peer address is `*remote` (and
    /// roaming state `roam`), in place. Moves `*remote` to a new address when the rules
    /// of [`Roaming`] say so.
    pub fn incoming<'a>(
        &mut self,
        now: Instant,
        remote: &mut SocketAddr,
        roam: &mut Roaming,
        src: SocketAddr,
        bytes: &'a mut [u8],
    ) -> Incoming<'a> {
        let Some(t) = &mut self.tunnel else {
            if src != *remote {
                self.counters.unknown_source += 1;
                return Incoming::Drop;
            }
            return match self.tags.open(now, bytes) {
                plain::Opened::Deliver([]) => Incoming::Drop,
                plain::Opened::Deliver(_) => {
                    Incoming::Deliver(bytes.get(TAG_HEADER_LEN..).unwrap_or_default())
                }
                plain::Opened::Hint(h) => match bytes.get_mut(..TAG_HEADER_LEN) {
                    Some(out) => {
                        out.copy_from_slice(&h);
                        Incoming::Reply(out)
                    }
                    None => Incoming::Drop,
                },
                plain::Opened::Drop => Incoming::Drop,
            };
        };
        match t.open(now, src, bytes) {
            Ok(Opened::Data {
                plaintext, session, ..
            }) => {
                let path_id = braid_core::wire::parse(plaintext).ok().map(|(h, _)| h.path);
                self.roam(now, remote, roam, src, (session, path_id));
                if plaintext.is_empty() {
                    self.counters.keepalives_received += 1;
                    Incoming::Drop
                } else {
                    Incoming::Deliver(plaintext)
                }
            }
            Ok(Opened::Reply(r)) => Incoming::Reply(r),
            Ok(Opened::Established(_) | Opened::CookieStored) => Incoming::Drop,
            Err(reason) => {
                self.last_rejected = Some(reason);
                if src != *remote {
                    self.counters.unknown_source += 1;
                }
                Incoming::Drop
            }
        }
    }

    /// An authenticated datagram of `session` naming sender path `id` came from `src` on
    /// a path: the rules of [`Roaming`].
    fn roam(
        &mut self,
        now: Instant,
        remote: &mut SocketAddr,
        roam: &mut Roaming,
        src: SocketAddr,
        (session, id): (SessionId, Option<u16>),
    ) {
        if src == *remote {
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
            *remote = src;
            roam.heard = Some(now);
            roam.candidate = None;
            self.counters.roamed += 1;
        } else {
            roam.candidate = Some((src, seen));
            self.counters.roam_held += 1;
        }
    }

    /// A handshake datagram (initiation or keepalive) to send on every path with an open
    /// socket. Call until `None` after every other call.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<&[u8]> {
        let t = self.tunnel.as_mut()?;
        let tx = t.poll_transmit(now, &mut self.buf)?;
        self.buf.get(..tx.len)
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

    /// The daemon's counters (`handshake_flood_dropped` is the tunnel's).
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

    /// The `encryption` object of `braid status --json`: whether sealing is on, the
    /// session, the replay window, and every counter by name (each [`Rejected`] reason in
    /// `rejected`).
    pub fn status_json(&self, now: Instant) -> Value {
        let Some(t) = &self.tunnel else {
            return json!({
                "enabled": false,
                "counters": self.counters(),
                "tags": self.tags.counters(),
            });
        };
        let c = t.counters();
        let rejected: Map<String, Value> = Rejected::ALL
            .iter()
            .map(|r| (r.name().to_string(), json!(c.rejected(*r))))
            .collect();
        let events: Map<String, Value> = c
            .iter()
            .skip(Rejected::ALL.len())
            .map(|(n, v)| (n.to_string(), json!(v)))
            .collect();
        json!({
            "enabled": true,
            "public_key": t.local_public_key().to_base64(),
            "peer_public_key": t.peer_public_key().to_base64(),
            "established": t.is_established(now),
            "session": t.current_session(now).map(|s| s.0),
            "replay_window": self.window_bits,
            "rejected": rejected,
            "rejected_total": c.rejected_total(),
            "events": events,
            "counters": self.counters(),
        })
    }
}

/// The text status line(s) of the `encryption` object of [`Sealer::status_json`]: the
/// session state, and every non-zero drop counter by name.
pub fn render_status(e: &Value) -> String {
    let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let c = e.get("counters").unwrap_or(&Value::Null);
    if e.get("enabled") != Some(&Value::Bool(true)) {
        let t = e.get("tags").unwrap_or(&Value::Null);
        return format!(
            "encryption: NONE; dropped: unknown source {}, wrong tag {}, malformed {}; tag hints sent {}, peer tag changes {}\n",
            n(c, "unknown_source"),
            n(t, "wrong_tag"),
            n(t, "malformed"),
            n(t, "hints_sent"),
            n(t, "peer_tag_changes"),
        );
    }
    let ev = e.get("events").unwrap_or(&Value::Null);
    let drops: Vec<String> = e
        .get("rejected")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                // Shown as "handshake flood" below.
                .filter(|(k, v)| v.as_u64().unwrap_or(0) > 0 && *k != "handshake_flood_dropped")
                .map(|(k, v)| format!("{k} {v}"))
                .collect()
        })
        .unwrap_or_default();
    let handshake = match e.get("latest_handshake_age_us").and_then(Value::as_u64) {
        Some(us) => format!(", latest handshake {}", age(us)),
        None if e.get("latest_handshake_age_us").is_some() => ", no handshake yet".to_owned(),
        None => String::new(),
    };
    format!(
        "encryption: {}{handshake}, window {}; sealed {}, opened {}, sessions {}, roamed {}, no session {}, unknown source {}, handshake flood {}; rejected: {}\n",
        if e.get("established") == Some(&Value::Bool(true)) {
            "session up"
        } else {
            "NO SESSION (handshaking)"
        },
        n(e, "replay_window"),
        n(ev, "sealed"),
        n(ev, "opened"),
        n(ev, "sessions_created"),
        n(c, "roamed"),
        n(c, "no_session_dropped"),
        n(c, "unknown_source"),
        n(c, "handshake_flood_dropped"),
        if drops.is_empty() {
            "none".to_string()
        } else {
            drops.join(", ")
        }
    )
}

/// `12 s ago`, `3 min 5 s ago`, `2 h 10 min ago`, as `wg show`'s "latest handshake".
pub fn age(us: u64) -> String {
    let s = us / 1_000_000;
    match s {
        0..120 => format!("{s} s ago"),
        120..7200 => format!("{} min {} s ago", s / 60, s % 60),
        _ => format!("{} h {} min ago", s / 3600, (s / 60) % 60),
    }
}

/// Wall-clock time in µs since 1970 (handshake timestamps must grow across restarts).
fn unix_micros() -> u64 {
    #[expect(clippy::disallowed_methods, reason = "the handshake's wall-clock base")]
    let t = std::time::SystemTime::now();
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_core::crypto::PublicKey;

    fn config(enc: &str) -> Config {
        let text = format!(
            "[bond]\naddress = \"10.200.0.1/30\"\n{enc}\n[[path]]\nname = \"p0\"\nlocal = \"127.0.0.1:7000\"\nremote = \"127.0.0.1:7001\"\n"
        );
        Config::parse(&text, "t.toml").unwrap()
    }

    fn keyed(mine: &PrivateKey, peer: PublicKey) -> Config {
        config(&format!(
            "private_key = \"{}\"\npeer_public_key = \"{}\"",
            mine.to_base64(),
            peer.to_base64()
        ))
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// `d` from the configured remote `src` of a plain path.
    fn recv<'a>(s: &mut Sealer, src: &str, d: &'a mut [u8]) -> Incoming<'a> {
        let mut remote = addr(src);
        s.incoming(
            Instant::ZERO,
            &mut remote,
            &mut Roaming::default(),
            addr(src),
            d,
        )
    }

    /// Two plain sealers that know each other's tags: `a`'s first datagram is answered
    /// with a hint, which `a` accepts.
    fn plain_pair(now: Instant) -> (Sealer, Sealer) {
        let c = config("encryption = \"none\"");
        let (mut a, mut b) = (Sealer::new(&c, now), Sealer::new(&c, now));
        let mut d = a.outgoing(now, b"hello").expect("plain").to_vec();
        let Incoming::Reply(hint) = recv(&mut b, "127.0.0.1:7000", &mut d) else {
            panic!("b did not hint");
        };
        let mut hint = hint.to_vec();
        let r = recv(&mut a, "127.0.0.1:7001", &mut hint);
        assert_eq!(r, Incoming::Drop, "a hint is nothing for the bond");
        (a, b)
    }

    #[test]
    fn plain_datagrams_need_the_receivers_tag() {
        let now = Instant::ZERO;
        let (mut a, mut b) = plain_pair(now);
        let mut d = a.outgoing(now, b"data").unwrap().to_vec();
        assert_eq!(d.len(), 4 + TAG_HEADER_LEN);
        assert_eq!(
            recv(&mut b, "127.0.0.1:7000", &mut d),
            Incoming::Deliver(&b"data"[..])
        );
        // Review M4/M3: a spoofed data datagram from the configured remote, with a far
        // sequence number, without B's tag (bare, or in an envelope with a guessed tag):
        // refused, never delivered; B's view of A is unchanged.
        let mut far = vec![0u8; braid_core::wire::DATA_HEADER_LEN + 20];
        let h = braid_core::wire::Header {
            path: 0,
            timestamp: 0,
        };
        braid_core::wire::emit_data_header(&h, 1 << 40, 1, &mut far).unwrap();
        let mut guessed = vec![plain::TAGGED_VERSION];
        guessed.extend_from_slice(&7u64.to_be_bytes());
        guessed.extend_from_slice(&8u64.to_be_bytes());
        guessed.extend_from_slice(&far);
        for forged in [&mut far, &mut guessed] {
            let r = recv(&mut b, "127.0.0.1:7000", forged);
            assert!(!matches!(r, Incoming::Deliver(_)));
        }
        let t = b.tags.counters();
        assert_eq!((t.malformed, t.wrong_tag, t.peer_tag_changes), (1, 2, 1));
        let mut d = a.outgoing(now, b"still").unwrap().to_vec();
        assert_eq!(
            recv(&mut b, "127.0.0.1:7000", &mut d),
            Incoming::Deliver(&b"still"[..])
        );
    }

    #[test]
    fn a_restarted_plain_peer_is_heard_after_one_hint() {
        let now = Instant::ZERO;
        let (_a, mut b) = plain_pair(now);
        let mut a2 = Sealer::new(&config("encryption = \"none\""), now);
        // B goes on naming the old run's tag: A2 refuses it and hints.
        let mut d = b.outgoing(now, b"to old a").unwrap().to_vec();
        let Incoming::Reply(hint) = recv(&mut a2, "127.0.0.1:7001", &mut d) else {
            panic!("a2 did not hint");
        };
        let mut hint = hint.to_vec();
        assert_eq!(recv(&mut b, "127.0.0.1:7000", &mut hint), Incoming::Drop);
        // B now names A2's tag: A2 accepts and learns B's.
        let mut d = b.outgoing(now, b"to a2").unwrap().to_vec();
        assert_eq!(
            recv(&mut a2, "127.0.0.1:7001", &mut d),
            Incoming::Deliver(&b"to a2"[..])
        );
        let mut d = a2.outgoing(now, b"back").unwrap().to_vec();
        assert_eq!(
            recv(&mut b, "127.0.0.1:7000", &mut d),
            Incoming::Deliver(&b"back"[..])
        );
        assert_eq!(b.tags.peer(), Some(a2.tags.own()));
    }

    #[test]
    fn none_passes_lines_and_filters_sources() {
        let now = Instant::ZERO;
        let mut s = Sealer::new(&config("encryption = \"none\""), now);
        assert!(!s.enabled());
        assert_eq!(s.outgoing_line(now, b"abc"), Some(&b"abc"[..]));
        let mut line = *b"abc";
        assert_eq!(
            s.incoming_line(now, &mut line),
            Incoming::Deliver(&b"abc"[..])
        );
        assert_eq!(s.poll_transmit(now), None);
        let mut remote = addr("127.0.0.1:7001");
        let mut d = s.outgoing(now, b"xyz").unwrap().to_vec();
        // Its own datagram names no receiver's tag it knows: refused (and hinted).
        let r = s.incoming(
            now,
            &mut remote,
            &mut Roaming::default(),
            addr("127.0.0.1:7001"),
            &mut d,
        );
        assert!(matches!(r, Incoming::Reply(_)));
        assert_eq!(
            s.incoming(
                now,
                &mut remote,
                &mut Roaming::default(),
                addr("127.0.0.1:9999"),
                &mut d
            ),
            Incoming::Drop
        );
        assert_eq!(s.counters().unknown_source, 1);
        assert_eq!(remote, addr("127.0.0.1:7001"), "no roaming without keys");
    }

    /// Two sealers talk; the handshake completes, data flows, a forgery and a replay are
    /// refused and counted, and an authenticated datagram from a new address roams.
    #[test]
    fn handshake_data_replay_roaming() {
        let (ka, kb) = (
            PrivateKey::generate(&mut OsRng),
            PrivateKey::generate(&mut OsRng),
        );
        let mut now = Instant::ZERO;
        let mut a = Sealer::new(&keyed(&ka, kb.public_key()), now);
        let mut b = Sealer::new(&keyed(&kb, ka.public_key()), now);
        let (aa, ba) = (addr("127.0.0.1:7000"), addr("127.0.0.1:7001"));
        let (mut a_remote, mut b_remote) = (ba, aa);
        // Nothing to send before the handshake.
        assert_eq!(a.outgoing(now, b"early"), None);
        assert_eq!(a.counters().no_session_dropped, 1);
        // Shuttle handshake datagrams until both can send.
        for _ in 0..10 {
            now += Duration::from_millis(1);
            let mut to_b = Vec::new();
            while let Some(d) = a.poll_transmit(now) {
                to_b.push(d.to_vec());
            }
            let mut to_a = Vec::new();
            while let Some(d) = b.poll_transmit(now) {
                to_a.push(d.to_vec());
            }
            for mut d in to_b {
                if let Incoming::Reply(r) =
                    b.incoming(now, &mut b_remote, &mut Roaming::default(), aa, &mut d)
                {
                    to_a.push(r.to_vec());
                }
            }
            for mut d in to_a {
                if let Incoming::Reply(r) =
                    a.incoming(now, &mut a_remote, &mut Roaming::default(), ba, &mut d)
                {
                    let mut r = r.to_vec();
                    let _ = b.incoming(now, &mut b_remote, &mut Roaming::default(), aa, &mut r);
                }
            }
        }
        let mut sealed = a.outgoing(now, b"hello").expect("session").to_vec();
        assert_eq!(sealed.len(), 5 + OVERHEAD);
        let copy = sealed.clone();
        let mut b_roam = Roaming::default();
        assert_eq!(
            b.incoming(now, &mut b_remote, &mut b_roam, aa, &mut sealed),
            Incoming::Deliver(&b"hello"[..])
        );
        // Replayed.
        let mut again = copy.clone();
        assert_eq!(
            b.incoming(now, &mut b_remote, &mut Roaming::default(), aa, &mut again),
            Incoming::Drop
        );
        assert_eq!(b.tunnel_counter("replayed"), Some(1));
        // Forged (one bit flipped in the ciphertext), from an unknown address.
        let mut forged = a.outgoing(now, b"world").unwrap().to_vec();
        forged[HEADER_BYTE] ^= 1;
        let stranger = addr("127.0.0.1:9");
        assert_eq!(
            b.incoming(
                now,
                &mut b_remote,
                &mut Roaming::default(),
                stranger,
                &mut forged
            ),
            Incoming::Drop
        );
        assert_eq!(b.tunnel_counter("bad_tag"), Some(1));
        assert_eq!(b.counters().unknown_source, 1);
        assert_eq!(b_remote, aa, "a forgery does not move the peer");
        // Authenticated from a new port (a NAT rebinding): delivered at once, but the
        // path moves only on a second datagram from there once the old address has been
        // silent for the dead time (3 x 100 ms by default).
        let moved = addr("127.0.0.1:7777");
        let mut from_moved = |b: &mut Sealer, at: Instant, remote: &mut SocketAddr| {
            let mut d = a.outgoing(at, &probe(0)).unwrap().to_vec();
            assert!(matches!(
                b.incoming(at, remote, &mut b_roam, moved, &mut d),
                Incoming::Deliver(_)
            ));
        };
        from_moved(&mut b, now, &mut b_remote);
        from_moved(&mut b, now + Duration::from_millis(100), &mut b_remote);
        assert_eq!(b_remote, aa);
        assert_eq!(b.counters().roam_held, 2);
        now += Duration::from_millis(300);
        from_moved(&mut b, now, &mut b_remote);
        assert_eq!(b_remote, moved);
        assert_eq!(b.counters().roamed, 1);
        let mut st = b.status_json(now);
        assert!(st["session"].is_u64(), "a number, not Rust text: {st}");
        assert_eq!(st["rejected"]["replayed"], 1);
        assert_eq!(st["rejected"]["bad_tag"], 1);
        assert_eq!(st["established"], true);
        assert_eq!(st["counters"]["roamed"], 1);
        let line = render_status(&st);
        assert!(line.starts_with("encryption: session up, window"), "{line}");
        st["latest_handshake_age_us"] = 12_300_000.into();
        let line = render_status(&st);
        assert!(
            line.starts_with("encryption: session up, latest handshake 12 s ago, window"),
            "{line}"
        );
        assert!(
            line.contains("bad_tag 1") && line.contains("replayed 1"),
            "{line}"
        );
    }

    /// Two sealers with a session, talking over two paths `p` and `q` (one sealer per
    /// end spans every path); `b`'s view of each path.
    struct TwoPaths {
        a: Sealer,
        b: Sealer,
        /// b's peer address and roaming state for p and q.
        remote: [SocketAddr; 2],
        roam: [Roaming; 2],
        now: Instant,
    }

    /// a's source addresses on p and q.
    const A_P: &str = "192.0.2.1:7000";
    const A_Q: &str = "198.51.100.1:7000";

    impl TwoPaths {
        fn new() -> TwoPaths {
            let (ka, kb) = (
                PrivateKey::generate(&mut OsRng),
                PrivateKey::generate(&mut OsRng),
            );
            let now = Instant::from_millis(1000);
            let mut a = Sealer::new(&keyed(&ka, kb.public_key()), now);
            let mut b = Sealer::new(&keyed(&kb, ka.public_key()), now);
            let init = a.poll_transmit(now).expect("initiation").to_vec();
            let _ = b.poll_transmit(now);
            let mut init = init;
            let mut roam = Roaming::default();
            let mut r = addr(A_P);
            let Incoming::Reply(resp) = b.incoming(now, &mut r, &mut roam, addr(A_P), &mut init)
            else {
                panic!("no response");
            };
            let mut resp = resp.to_vec();
            let _ = a.incoming(
                now,
                &mut addr("10.0.0.2:1"),
                &mut roam,
                addr("10.0.0.2:1"),
                &mut resp,
            );
            let ka = a.poll_transmit(now).expect("keepalive").to_vec();
            let mut t = TwoPaths {
                a,
                b,
                remote: [addr(A_P), addr(A_Q)],
                roam: [Roaming::default(), Roaming::default()],
                now,
            };
            let _ = t.deliver_b(0, A_P, ka);
            t
        }

        /// A probe a seals now on path `i` (its inner header names a's path id `i`).
        fn sealed(&mut self, i: u16) -> Vec<u8> {
            self.a
                .outgoing(self.now, &probe(i))
                .expect("session")
                .to_vec()
        }

        /// `d` reaches b's socket of path `i` from `src`: delivered?
        fn deliver_b(&mut self, i: usize, src: &str, mut d: Vec<u8>) -> bool {
            let r = self.b.incoming(
                self.now,
                &mut self.remote[i],
                &mut self.roam[i],
                addr(src),
                &mut d,
            );
            matches!(r, Incoming::Deliver(_))
        }
    }

    /// A version-1 probe sent on the sender's path `path`.
    fn probe(path: u16) -> Vec<u8> {
        let msg = braid_core::wire::Message::Probe {
            probe_seq: 7,
            epoch: Some(1),
        };
        let mut buf = vec![0u8; msg.wire_len()];
        let h = braid_core::wire::Header { path, timestamp: 1 };
        let n = braid_core::wire::emit(&h, &msg, &mut buf).expect("a probe fits");
        buf.truncate(n);
        buf
    }

    /// Review M1: someone who sees path p copies a's datagrams on p and delivers them to
    /// b's socket of path q from a third address, before the originals. They are
    /// authenticated (and, arriving first, fresh), but q's peer address stays where it
    /// is, as long as a is still heard from there (every probe interval), for a single
    /// copy and for a stream of them.
    #[test]
    fn datagrams_copied_from_another_path_do_not_move_a_path() {
        let mut t = TwoPaths::new();
        let third = "203.0.113.66:4444";
        // Both paths carry a's probes from a's address on each.
        for _ in 0..3 {
            let (dp, dq) = (t.sealed(0), t.sealed(1));
            assert!(t.deliver_b(0, A_P, dp) && t.deliver_b(1, A_Q, dq));
            t.now += Duration::from_millis(100);
        }
        // One copy of a datagram a sent on p, delivered on q from the third address first.
        let on_p = t.sealed(0);
        assert!(
            t.deliver_b(1, third, on_p.clone()),
            "authenticated and fresh"
        );
        assert_eq!(t.remote[1], addr(A_Q), "moved by one copied datagram");
        assert!(!t.deliver_b(0, A_P, on_p), "the original is now a replay");
        // A stream of copies, 10 a probe interval for 3 s: first while a goes on probing
        // on q, then while q is silent (its inbound direction broken, say).
        for n in 0..600 {
            let d = t.sealed(0);
            assert!(t.deliver_b(1, third, d));
            if n < 300 && n % 10 == 0 {
                let d = t.sealed(1);
                assert!(t.deliver_b(1, A_Q, d));
            }
            t.now += Duration::from_millis(10);
        }
        assert_eq!(t.remote[1], addr(A_Q), "moved by a stream of copies");
        assert_eq!(t.remote[0], addr(A_P));
        assert_eq!(t.b.counters().roamed, 0);
        assert!(t.b.counters().roam_held >= 601);
    }

    /// A NAT rebinding still moves the path: a's address on q changes and the old one
    /// falls silent; a's probes from the new address move q after the dead time (300 ms
    /// by default), and copies of p's datagrams from elsewhere meanwhile change nothing.
    #[test]
    fn nat_rebinding_moves_the_path_after_the_dead_time() {
        let mut t = TwoPaths::new();
        let d = t.sealed(1);
        assert!(t.deliver_b(1, A_Q, d));
        let rebound = "198.51.100.1:40001";
        let start = t.now;
        let mut moved_at = None;
        for n in 0..20 {
            t.now = start + Duration::from_millis(100 * (n + 1));
            let d = t.sealed(1);
            assert!(t.deliver_b(1, rebound, d));
            if t.remote[1] == addr(rebound) {
                moved_at = Some(t.now.saturating_since(start));
                break;
            }
            let copy = t.sealed(0);
            assert!(t.deliver_b(1, "203.0.113.66:4444", copy));
        }
        assert_eq!(t.remote[1], addr(rebound));
        let moved_at = moved_at.expect("moved");
        assert!(
            moved_at >= Duration::from_millis(300) && moved_at <= Duration::from_millis(400),
            "{moved_at:?}"
        );
        assert_eq!(t.b.counters().roamed, 1);
    }

    /// A peer whose configured `remote` is wrong (a NATed client) is found on its second
    /// authenticated datagram: the configured address was never heard from.
    #[test]
    fn a_path_never_heard_from_its_configured_address_moves_on_the_second_datagram() {
        let mut t = TwoPaths::new();
        let natted = "198.51.100.9:61000";
        let d = t.sealed(1);
        assert!(t.deliver_b(1, natted, d));
        assert_eq!(t.remote[1], addr(A_Q));
        t.now += Duration::from_millis(100);
        let d = t.sealed(1);
        assert!(t.deliver_b(1, natted, d));
        assert_eq!(t.remote[1], addr(natted));
    }

    /// Initiations from keys the sealer does not know (valid mac1: the sender knows its
    /// public key) at one instant: the budget's burst reaches the tunnel (a DH each, then
    /// `unknown_peer`), the rest are dropped after the mac1 check. Junk of any length
    /// takes no token, nor do data datagrams.
    #[test]
    fn handshake_budget_bounds_a_flood() {
        let k = PrivateKey::generate(&mut OsRng);
        let now = Instant::ZERO;
        let mut s = Sealer::new(
            &keyed(&k, PrivateKey::generate(&mut OsRng).public_key()),
            now,
        );
        let mut remote = addr("127.0.0.1:7001");
        for _ in 0..500 {
            let mut d = [2u8, 1, 0, 0, 9, 9, 9, 9];
            assert_eq!(
                s.incoming(
                    now,
                    &mut remote,
                    &mut Roaming::default(),
                    addr("127.0.0.1:5"),
                    &mut d
                ),
                Incoming::Drop
            );
        }
        assert_eq!(s.tunnel_counter("truncated"), Some(500));
        assert_eq!(s.counters().handshake_flood_dropped, 0);
        // From many addresses, so that the per-source limit is not what stops them.
        let init = stranger_initiation(k.public_key());
        for i in 0..500u32 {
            let mut d = init.clone();
            let src = SocketAddr::from(([10, 9, (i / 250) as u8, (i % 250) as u8], 5));
            let _ = s.incoming(now, &mut remote, &mut Roaming::default(), src, &mut d);
        }
        assert_eq!(s.tunnel_counter("unknown_peer"), Some(100));
        assert_eq!(s.counters().handshake_flood_dropped, 400);
        // A second later the budget is full again; data datagrams never use it.
        let later = now + Duration::from_secs(1);
        let mut d = init.clone();
        // (Still under load from the last second: answered with a cookie, no DH.)
        assert!(matches!(
            s.incoming(later, &mut remote, &mut Roaming::default(), addr("10.9.9.9:5"), &mut d),
            Incoming::Reply(r) if r.len() == 64
        ));
        assert_eq!(s.tunnel_counter("cookie_replies_sent"), Some(1));
        let mut t = [2u8, 0, 0, 0];
        let _ = s.incoming(
            later,
            &mut remote,
            &mut Roaming::default(),
            addr("127.0.0.1:5"),
            &mut t,
        );
        assert_eq!(s.counters().handshake_flood_dropped, 400);
    }

    #[test]
    fn handshake_ages_read_as_wg_show() {
        assert_eq!(age(0), "0 s ago");
        assert_eq!(age(119_999_999), "119 s ago");
        assert_eq!(age(185_000_000), "3 min 5 s ago");
        assert_eq!(age(7_800_000_000), "2 h 10 min ago");
    }

    /// An initiation to `to` from a fresh key: valid mac1, unknown static key.
    fn stranger_initiation(to: PublicKey) -> Vec<u8> {
        let mut t = braid_core::crypto::Tunnel::new(TunnelConfig::new(
            PrivateKey::generate(&mut OsRng),
            to,
            [5; 32],
        ));
        let now = Instant::from_micros(1);
        t.start_handshake(now);
        let mut buf = vec![0u8; 256];
        let n = t.poll_transmit(now, &mut buf).expect("an initiation").len;
        buf.truncate(n);
        buf
    }

    /// Two sealers over one path with `delay` each way, stepped 1 ms at a time from
    /// their creation; `junk(now, n)` gives the junk datagrams each end receives in the
    /// millisecond `n` besides. Returns the first time both ends can send, if any within
    /// `limit`.
    fn run_pair(
        delay: Duration,
        limit: Duration,
        junk: &mut dyn FnMut(u64) -> Vec<Vec<u8>>,
    ) -> (Option<Duration>, Sealer, Sealer) {
        let (ka, kb) = (
            PrivateKey::generate(&mut OsRng),
            PrivateKey::generate(&mut OsRng),
        );
        let t0 = Instant::from_millis(1000);
        let mut a = Sealer::new(&keyed(&ka, kb.public_key()), t0);
        let mut b = Sealer::new(&keyed(&kb, ka.public_key()), t0);
        let (aa, ba) = (addr("127.0.0.1:7000"), addr("127.0.0.1:7001"));
        let (mut a_remote, mut b_remote) = (ba, aa);
        // (arrival, to b?, bytes)
        let mut wire: Vec<(Instant, bool, Vec<u8>)> = Vec::new();
        let stranger = addr("192.0.2.99:4444");
        let steps = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        for n in 0..steps {
            let now = t0 + Duration::from_millis(n);
            for s in [&mut a, &mut b] {
                if s.poll_timeout().is_some_and(|t| t <= now) {
                    s.handle_timeout(now);
                }
            }
            while let Some(d) = a.poll_transmit(now) {
                wire.push((now + delay, true, d.to_vec()));
            }
            while let Some(d) = b.poll_transmit(now) {
                wire.push((now + delay, false, d.to_vec()));
            }
            for j in junk(n) {
                let (mut x, mut y) = (j.clone(), j);
                let _ = a.incoming(
                    now,
                    &mut a_remote,
                    &mut Roaming::default(),
                    stranger,
                    &mut x,
                );
                let _ = b.incoming(
                    now,
                    &mut b_remote,
                    &mut Roaming::default(),
                    stranger,
                    &mut y,
                );
            }
            let due: Vec<_> = wire.iter().filter(|w| w.0 <= now).cloned().collect();
            wire.retain(|w| w.0 > now);
            for (_, to_b, mut d) in due {
                let (s, remote, src) = if to_b {
                    (&mut b, &mut b_remote, aa)
                } else {
                    (&mut a, &mut a_remote, ba)
                };
                if let Incoming::Reply(r) =
                    s.incoming(now, remote, &mut Roaming::default(), src, &mut d)
                {
                    wire.push((now + delay, !to_b, r.to_vec()));
                }
            }
            // Both ends send (as the bond's probes do); a keepalive or data confirms.
            for (s, to_b) in [(&mut a, true), (&mut b, false)] {
                if let Some(d) = s.outgoing(now, b"probe") {
                    wire.push((now + delay, to_b, d.to_vec()));
                }
            }
            let st = |s: &Sealer| s.status_json(now)["established"] == true;
            if st(&a) && st(&b) {
                return (Some(now.saturating_since(t0)), a, b);
            }
        }
        (None, a, b)
    }

    /// Junk handshake datagrams (`2, 1` and `2, 2`, of the right lengths and not), 50 per
    /// ms at each end, from before the first initiation: the handshake still completes in
    /// one round trip, and none of the junk took a budget token (review H1).
    #[test]
    fn junk_handshake_flood_does_not_stop_the_handshake() {
        let mut junk = |n: u64| -> Vec<Vec<u8>> {
            (0..50u64)
                .map(|k| {
                    let x = n * 50 + k;
                    let len = match x % 4 {
                        0 => 2,
                        1 => 148,
                        2 => 92,
                        _ => 64,
                    };
                    let mut d: Vec<u8> = (0..len).map(|i| (x as u8) ^ (i as u8)).collect();
                    d[0] = 2;
                    d[1] = if (x / 4).is_multiple_of(2) { 1 } else { 2 };
                    if len > 4 {
                        d[2] = 0;
                        d[3] = 0;
                    }
                    d
                })
                .collect()
        };
        let delay = Duration::from_millis(10);
        let (up, a, b) = run_pair(delay, Duration::from_secs(3), &mut junk);
        let up = up.expect("the handshake completed under the flood");
        assert!(up <= Duration::from_millis(50), "{up:?}");
        for s in [&a, &b] {
            assert_eq!(s.counters().handshake_flood_dropped, 0);
            let seen = |n| s.tunnel_counter(n).unwrap_or(0);
            assert!(seen("bad_mac1") > 100 && seen("unknown_receiver_index") > 100);
        }
    }

    /// First byte after the 16-byte header: inside the ciphertext.
    const HEADER_BYTE: usize = 16;

    #[test]
    fn window_is_sized_from_the_bond() {
        let c = config("encryption = \"none\"");
        // 1 Gbit/s, 256-byte packets, 200 ms: 97 656 packets -> 131 072.
        assert_eq!(replay_window_bits(&c), 131_072);
        let mut slow = c.clone();
        slow.paths[0].bps = 10_000_000;
        assert_eq!(replay_window_bits(&slow), MIN_REPLAY_WINDOW);
        let mut fast = c;
        fast.paths[0].bps = 10_000_000_000;
        fast.bond.core.reorder_max = Duration::from_millis(500);
        // 4.88 M packets/s × 0.5 s: clamped to the core's maximum.
        assert_eq!(
            replay_window_bits(&fast),
            braid_core::crypto::replay::MAX_WINDOW_BITS
        );
    }
}
