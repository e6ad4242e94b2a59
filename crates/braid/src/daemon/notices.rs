//! What the daemon says about its peer's handshakes, once and plainly: a handshake refused
//! because the keys do not match (with what to check), a session made, renewed (debug) or
//! lost, no session at all after start. The sealer counts; this module words the counts
//! for the log, rate-limited so that a flood of bad handshakes writes one line a minute.
//! (A peer that restarted is said by the bond, which sees its new epoch.)
use std::net::SocketAddr;
use std::time::Duration;

use braid_core::crypto::Rejected;
use braid_core::Instant;

use crate::log::{self, ddebug, dlog, Level};
use braid_core::{Endpoint, Sealer};

/// Without a session this long after start, the log says so and what to check: two
/// handshake retries (5 s apart) went unanswered.
const NO_SESSION_WARNING: Duration = Duration::from_secs(12);

/// The daemon's view of the peer's sessions, for the log and `status`.
#[derive(Debug, Default)]
pub struct Notices {
    /// The sealer's session counts last seen ([`Sealer::session_counts`]).
    counts: (u64, u64),
    /// When the last session was made.
    last_handshake: Option<Instant>,
    /// Whether a session could send at the last turn.
    established: bool,
    /// When the last session was lost (no session since).
    lost_at: Option<Instant>,
    /// Since when there has been no session at start, until it is said.
    waiting_since: Option<Instant>,
}

/// What a refused handshake means and what to check, or `None` for refusals the counters
/// are enough for (replays, floods, datagrams of old sessions).
pub fn rejection_hint(reason: Rejected, public_key: Option<&str>) -> Option<String> {
    let ours = public_key.unwrap_or("?");
    match reason {
        Rejected::UnknownPeer => Some(
            "rejected: not the configured peer_public_key (the sender knows this host's public key, but its own key is another: check bond.peer_public_key here against `braid pubkey` of the peer's private key)"
                .to_owned(),
        ),
        Rejected::BadMac1 => Some(format!(
            "rejected: not made for this host's public key {ours} (the sender's bond.peer_public_key is another key: set it to {ours})"
        )),
        Rejected::HandshakeFailed => Some(
            "failed: the keys do not agree (check that both ends have the same bond.preshared_key, or none)"
                .to_owned(),
        ),
        _ => None,
    }
}

/// Where a datagram came from, for a log line.
fn origin(path: &str, src: Option<SocketAddr>) -> String {
    match src {
        Some(a) => format!("from {a} on path {path}"),
        None => format!("on path {path}"),
    }
}

impl Notices {
    /// Start watching `sealer` (no session yet) at `now`.
    pub fn new(sealer: &Sealer, now: Instant) -> Notices {
        Notices {
            counts: sealer.session_counts(),
            waiting_since: sealer.enabled().then_some(now),
            ..Notices::default()
        }
    }

    /// After the endpoint took a datagram that came `src` (`None` on a serial line) on
    /// `path`: say why a handshake was refused, or that one made a session.
    pub fn after_incoming(
        &mut self,
        now: Instant,
        path: &str,
        src: Option<SocketAddr>,
        ep: &mut Endpoint,
    ) {
        let said = |r: &Rejected| {
            matches!(
                r,
                Rejected::UnknownPeer | Rejected::BadMac1 | Rejected::HandshakeFailed
            )
        };
        // Only the refusals worth a line get worded (replays and the like are counted).
        if let Some(reason) = ep.take_rejected().filter(said) {
            let sealer = ep.sealer();
            if let Some(hint) = rejection_hint(reason, sealer.public_key().as_deref()) {
                log::limited(
                    now,
                    Level::Warn,
                    &format!("handshake {}", reason.name()),
                    format!("handshake {} {hint}", origin(path, src)),
                );
            }
        }
        let sealer = ep.sealer();
        let counts = sealer.session_counts();
        if counts.0 != self.counts.0 {
            self.new_session(now, &origin(path, src));
        }
        self.counts = counts;
        if sealer.established(now) {
            self.established = true;
        }
    }

    fn new_session(&mut self, now: Instant, from: &str) {
        self.waiting_since = None;
        let previous = self.last_handshake.replace(now);
        let Some(previous) = previous else {
            dlog!(now, "session with the peer established (handshake {from})");
            return;
        };
        if let Some(lost) = self.lost_at.take() {
            dlog!(
                now,
                "session with the peer established again after {} s without one (handshake {from})",
                now.saturating_since(lost).as_secs()
            );
            return;
        }
        ddebug!(
            now,
            "session renewed after {} s (handshake {from})",
            now.saturating_since(previous).as_secs()
        );
    }

    /// Once a loop turn: notice a session that ended without a new one.
    pub fn tick(&mut self, now: Instant, sealer: &Sealer) {
        let up = sealer.established(now);
        if let Some(since) = self.waiting_since.filter(|_| !up) {
            if now.saturating_since(since) >= NO_SESSION_WARNING {
                self.waiting_since = None;
                log::limited(
                    now,
                    Level::Warn,
                    "no session",
                    format!(
                        "no session with the peer after {} s: this host's handshakes went unanswered (is the peer running and reachable on a path? is its bond.peer_public_key this host's public key {}, and this host's bond.peer_public_key its key?)",
                        now.saturating_since(since).as_secs(),
                        sealer.public_key().unwrap_or_default()
                    ),
                );
            }
        }
        if self.established && !up {
            self.lost_at = Some(now);
            log::limited(
                now,
                Level::Warn,
                "session lost",
                format!(
                    "session with the peer expired (last handshake {} s ago) and no new handshake was answered: is the peer running, with its paths up?",
                    self.handshake_age(now).map_or(0, |d| d.as_secs())
                ),
            );
        }
        self.established = up;
    }

    /// How long ago the last session was made (`latest handshake` of `wg show`).
    pub fn handshake_age(&self, now: Instant) -> Option<Duration> {
        self.last_handshake.map(|t| now.saturating_since(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_mismatches_say_what_to_check() {
        let h = rejection_hint(Rejected::UnknownPeer, Some("PUB")).unwrap();
        assert!(
            h.starts_with("rejected: not the configured peer_public_key"),
            "{h}"
        );
        let h = rejection_hint(Rejected::BadMac1, Some("PUB")).unwrap();
        assert!(
            h.contains("this host's public key PUB") && h.contains("set it to PUB"),
            "{h}"
        );
        let h = rejection_hint(Rejected::HandshakeFailed, None).unwrap();
        assert!(h.contains("preshared_key"), "{h}");
        assert_eq!(rejection_hint(Rejected::Replayed, None), None);
        assert_eq!(rejection_hint(Rejected::RateLimited, None), None);
        assert_eq!(
            origin("p0", Some("10.0.0.2:7000".parse().unwrap())),
            "from 10.0.0.2:7000 on path p0"
        );
        assert_eq!(origin("s0", None), "on path s0");
    }
}
