//! Authenticated encryption for paths: keys, the Noise IKpsk2 handshake, the sealed
//! (version 4) datagram envelope, replay protection and handshake rate limiting.
//!
//! The protocol is WireGuard's, fitted to a bond: one session per bond (per pair of
//! peers) spans every path, so any path can carry the handshake and a datagram sealed
//! for one path can arrive on another. The full description, with the threat model, is
//! `docs/security.md`; byte layouts are in [`envelope`].
//!
//! # Driving a [`Tunnel`]
//!
//! Sans-IO like the rest of the core: every call takes `now`, nothing reads a clock or
//! touches a socket, and nothing allocates per datagram.
//!
//! - **Send**: write the plaintext at `buf[HEADER_LEN..]` (reserve
//!   [`envelope::HEADER_LEN`] bytes before it and [`envelope::TAG_LEN`] after; for braid,
//!   a folded version-1 datagram, `wire::folded::fold`), call [`Tunnel::seal`] with its
//!   user type (braid's message type), send the returned length on the path of your
//!   choice.
//!   [`SealError::NoSession`] means no session yet (or it expired): a handshake was
//!   requested.
//! - **Receive**: pass every datagram of the bond's sockets to [`Tunnel::open`] with its
//!   source address. [`Opened::Data`] is authenticated: unfold `plaintext` with its user
//!   type (`wire::folded::unfold`) and hand the version-1 datagram to `wire::parse`
//!   (ignore an empty plaintext: a keepalive), and only now update the path's
//!   peer address if it changed (roaming follows authenticated datagrams only).
//!   [`Opened::Reply`] goes back to the source on the same path. Every `Err` was counted
//!   under its [`Rejected::name`]; drop the datagram.
//! - **After every call**, drain [`Tunnel::poll_transmit`]: initiations and keepalives,
//!   for any live path (an initiation may be copied to several).
//! - **Timers**: call [`Tunnel::handle_timeout`] at [`Tunnel::poll_timeout`], then drain
//!   `poll_transmit` again.
//!
//! # Timers (WireGuard's constants)
//!
//! | constant | value | meaning |
//! | --- | --- | --- |
//! | [`REKEY_AFTER_TIME`] | 120 s | the initiator of the current session starts a new handshake when it sends |
//! | [`REKEY_AFTER_TIME_RESPONDER`] | 150 s | the responder does, if the initiator has not |
//! | [`REKEY_AFTER_MESSAGES`] | 2^60 | either side, by messages sent |
//! | [`REJECT_AFTER_TIME`] | 180 s | a session neither seals nor opens any more |
//! | [`REKEY_TIMEOUT`] + jitter | 5 s + ≤ 333 ms | an unanswered initiation is retried |
//! | [`REKEY_ATTEMPT_TIME`] | 90 s | retries stop (until the next send asks again) |
//! | [`ERASE_KEYS_AFTER`] | 540 s | session keys are erased |

mod cipher;
pub(crate) mod cookie;
pub mod envelope;
mod handshake;
mod keys;
mod opener;
mod ratelimit;
mod replay;
mod rng;
mod session;
mod tunnel;

pub use cipher::Cipher;
pub use envelope::PendingSeal;
pub use keys::{KeyError, PresharedKey, PrivateKey, PublicKey};
pub use opener::{OpenKeys, Preopen, Preopened};
pub use rand_core::OsRng;
pub use replay::{ReplayVerdict, ReplayWindow, MAX_WINDOW_BITS};
pub use session::SessionId;
pub use tunnel::{
    Counters, Opened, Rejected, SealError, Transmit, TransmitKind, Tunnel, TunnelConfig,
};

use core::time::Duration;

/// The initiator of a session starts a new handshake when it sends on a session this old.
pub const REKEY_AFTER_TIME: Duration = Duration::from_secs(120);
/// The responder of a session starts a new handshake when it sends on a session this old
/// (later than the initiator, so the two rarely cross).
pub const REKEY_AFTER_TIME_RESPONDER: Duration = Duration::from_secs(150);
/// Either side starts a new handshake after sending this many datagrams on a session.
pub const REKEY_AFTER_MESSAGES: u64 = 1 << 60;
/// A session this old neither seals nor opens.
pub const REJECT_AFTER_TIME: Duration = Duration::from_secs(180);
/// An unanswered initiation is retried after this plus a random jitter.
pub const REKEY_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest retry jitter.
pub const REKEY_TIMEOUT_JITTER: Duration = Duration::from_millis(333);
/// Retrying stops this long after a handshake was first wanted.
pub const REKEY_ATTEMPT_TIME: Duration = Duration::from_secs(90);
/// A session's keys are erased this long after it was made.
pub const ERASE_KEYS_AFTER: Duration = Duration::from_secs(540);

#[cfg(test)]
mod tests;
