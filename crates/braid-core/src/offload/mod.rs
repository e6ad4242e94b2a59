//! TUN offloads, sans-IO: the virtio header, checksums, cutting the kernel's superframes
//! into packets (TSO/USO, read direction) and merging TCP segments into superframes
//! (GRO, write direction).
//!
//! A TUN opened with `IFF_VNET_HDR` and `TUNSETOFFLOAD` (`TUN_F_CSUM | TUN_F_TSO4 |
//! TUN_F_TSO6 | TUN_F_USO4 | TUN_F_USO6`) hands out, per read, a [`vnet::VnetHdr`] and up
//! to 64 KB of packet, and takes the same on writes. The read loop:
//!
//! ```
//! # use braid_core::offload::{split::{read_frame, Frame}, MAX_FRAME, MAX_SEGMENT};
//! # fn tun_read(_: &mut [u8]) -> usize { 0 }
//! let mut buf = vec![0u8; MAX_FRAME]; // one TUN read
//! let mut seg = vec![0u8; MAX_SEGMENT]; // one packet
//! let n = tun_read(&mut buf);
//! # if n > 0 {
//! match read_frame(&mut buf[..n]) {
//!     Ok(Frame::Packet(p)) => { /* one IP packet */ }
//!     Ok(Frame::Segments(mut s)) => {
//!         while let Ok(Some(len)) = s.next_into(&mut seg) { /* &seg[..len] */ }
//!     }
//!     Err(e) => { /* count a drop */ }
//! }
//! # }
//! ```
//!
//! and the write loop pushes each packet into a [`coalesce::Coalescer`] and writes its
//! frames (virtio header included) when the batch ends or is full.

pub mod checksum;
pub mod coalesce;
pub mod split;
pub mod vnet;

#[cfg(test)]
mod tests;

/// The largest TUN read or write with offloads on: the virtio header and an IPv6 packet
/// with 65535 bytes of payload.
pub const MAX_FRAME: usize = vnet::LEN + 40 + 65535;

/// The largest segment [`split::Segments::next_into`] can produce (a 65535-byte IP
/// packet). Segments are the TUN's MTU in practice: use
/// [`split::Segments::segment_len`] to size a smaller buffer.
pub const MAX_SEGMENT: usize = 65535;

pub(crate) const PROTO_TCP: u8 = 6;
pub(crate) const PROTO_UDP: u8 = 17;
