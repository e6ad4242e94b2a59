//! The sans-IO core of braid.
//!
//! Nothing in this crate opens a socket, reads a clock or starts a thread. Every entry
//! point takes `now` and bytes and returns decisions; the `braid` program, the tests and
//! the lab drive the same code. The main entry point is [`bond::Bond`].
//!
//! | module | what it is |
//! | --- | --- |
//! | [`wire`] | the tunnel datagram: checked views over bytes and parsed forms |
//! | [`flow`] | peeks IP/TCP/UDP (and Ethernet) headers into a flow key |
//! | [`hash`] | the bonding transmit hashes, bit-exact with Linux |
//! | [`lacp`] | an IEEE 802.1AX LACP actor: LACPDUs, port state machines, selection |
//! | [`path`] | one path's liveness state machine and RTT |
//! | [`cc`] | one path's capacity and delay model and its pacer |
//! | [`crypto`] | keys, handshake, sealed datagrams, replay window |
//! | [`sched`] | the [`sched::Scheduler`] trait and one file per policy |
//! | [`serial`] | SLIP, SLIP6 and CSLIP framing |
//! | [`shape`] | HTB link sharing: classes, classifier |
//! | [`reorder`] | receive-side reorder buffer and duplicate suppression |
//! | [`emu`] | a path emulator (delay, jitter, loss, rate, outages) for the lab |
//! | [`bond`] | the state machine tying them together |
//! | [`sim`] | a deterministic two-bond simulator over emulated paths |

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bond;
pub mod cc;
pub mod crypto;
pub mod emu;
pub mod endpoint;
pub mod flow;
pub mod fragments;
pub mod hash;
pub mod lacp;
pub mod path;
pub mod plain;
pub mod reorder;
pub mod rtt;
pub mod sched;
pub mod serial;
pub mod shape;
pub mod sim;
pub mod time;
pub mod wire;

pub use time::Instant;

use core::fmt;

/// Identifies one path of a bond. Assigned by the bond when the path is added and never
/// reused while the bond runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PathId(pub u16);

impl fmt::Display for PathId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "path#{}", self.0)
    }
}
