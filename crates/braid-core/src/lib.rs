//! The sans-IO core of braid.
//!
//! Nothing in this crate opens a socket, reads a clock or starts a thread. Every entry
//! point takes `now` and bytes and returns decisions; the `braid` program, the tests and
//! the lab drive the same code.
//!
//! The daemon's entry point is [`Endpoint`]: a bond, its sealing and each path's carrier
//! state (a UDP peer address, or a serial line's framing and clock). Its configuration
//! types are re-exported here; the subsystems with vocabularies of their own keep a
//! namespace:
//!
//! | module | what it is |
//! | --- | --- |
//! | [`bond`] | the bond alone: scheduling, reordering, path health, without carriers |
//! | [`crypto`] | keys, the Noise IK handshake, sealed datagrams, replay window |
//! | [`serial`] | SLIP, SLIP6 and CSLIP framing and the serial line model |
//! | [`shape`] | HTB link sharing: classes, classifier, rate units |
//! | [`wire`] | the tunnel datagram: checked views over bytes and parsed forms |
//! | [`emu`] | a path emulator (delay, jitter, loss, rate, outages) for the lab |
//! | [`sim`] | a deterministic two-endpoint simulator over emulated paths |
//! | [`hash`] | the bonding transmit hashes, bit-exact with Linux |
//! | [`offload`] | TUN offloads: virtio header, checksums, TSO/USO split, TCP GRO |
//! | [`lacp`] | an IEEE 802.1AX LACP actor: LACPDUs, port state machines, selection |
//!
//! Everything else (the flow dissector, path state machines, congestion control, the
//! schedulers, the reorder buffer, fragment groups, plain mode's tags) is private: its
//! behaviour is reached through [`Endpoint`] and [`bond::Bond`], and its tests live beside
//! it. The fuzz targets reach a few internals through a hidden `fuzzing` module, which is
//! not part of the interface.

#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod bond;
mod cc;
pub mod crypto;
pub mod emu;
mod endpoint;
pub mod ether;
mod flow;
mod fragments;
mod frames;
pub mod hash;
pub mod lacp;
pub mod offload;
mod path;
mod plain;
mod reorder;
mod rtt;
mod sched;
pub mod serial;
pub mod shape;
pub mod sim;
mod time;
pub mod wire;

#[doc(hidden)]
pub mod fuzzing;

pub use cc::{CcConfig, CcMode};
pub use endpoint::{
    opened_seq, udp_overhead, Endpoint, EndpointConfig, Event, Incoming, PathKind, RawIpCounters,
    Roaming, SealConfig, SealCounters, Sealer, Sealing, Transmit, TransmitKind, MAX_DATAGRAM,
};
pub use frames::Frames;
pub use path::{HealthConfig, LinkState};
pub use reorder::WAIT_BUCKETS_US;
pub use sched::{ActiveBackupOptions, Reselect, SchedulerConfig};
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
