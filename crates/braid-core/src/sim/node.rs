//! What the simulator drives: a bare [`Bond`] (the bond's own tests) or an [`Endpoint`]
//! (the bond with its sealing, as the daemon runs it).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use super::Side;
use crate::bond::{Bond, PathConfig};
use crate::crypto::Preopen;
use crate::endpoint::{Endpoint, PathKind};
use crate::serial::LineConfig;
use crate::{Instant, PathId};

/// One end of a simulated pair.
pub trait Node {
    /// Add simulated path `i` on side `side` with `cfg`.
    fn add_path(&mut self, now: Instant, cfg: PathConfig, i: usize, side: Side) -> PathId;
    /// A datagram arrived on `path` (simulated path `i`) from side `from`. The packets it
    /// lets out for the TUN go to `deliver` at once, as they do in the daemon
    /// ([`Endpoint::handle_udp_preopened`]).
    fn receive(
        &mut self,
        now: Instant,
        path: PathId,
        i: usize,
        from: Side,
        bytes: &mut [u8],
        deliver: &mut dyn FnMut(&[u8]),
    );
    /// The next datagram to send: its path and length in `buf`.
    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(PathId, usize)>;
    /// A packet from the TUN.
    fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]);
    /// The next packet for the TUN.
    fn poll_deliver(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize>;
    /// The next packet for the TUN, lent (the daemon's way).
    fn poll_deliver_ref(&mut self, now: Instant) -> Option<&[u8]>;
    /// When the node's timers are next due.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Run the node's timers.
    fn handle_timeout(&mut self, now: Instant);
    /// Add a serial line (a node that has none says so and stops the test).
    fn add_line(&mut self, now: Instant, cfg: PathConfig, line: LineConfig) -> PathId {
        let _ = (now, cfg, line);
        panic!("sim: this node has no serial lines");
    }
    /// The bytes line `path` writes now, taken as written, into `buf` (false: none).
    fn line_write(&mut self, now: Instant, path: PathId, buf: &mut Vec<u8>) -> bool {
        let _ = (now, path, buf);
        false
    }
    /// Bytes arrived on line `path`.
    fn line_receive(&mut self, now: Instant, path: PathId, bytes: &[u8]) {
        let _ = (now, path, bytes);
    }
}

impl Node for Bond {
    fn add_path(&mut self, now: Instant, cfg: PathConfig, _: usize, _: Side) -> PathId {
        Bond::add_path(self, now, cfg).expect("sim: add a path to a bond")
    }

    fn receive(
        &mut self,
        now: Instant,
        path: PathId,
        _: usize,
        _: Side,
        bytes: &mut [u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) {
        self.handle_datagram_passing(now, path, bytes, deliver);
    }

    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(PathId, usize)> {
        self.poll_transmit(now, buf).map(|t| (t.path, t.len))
    }

    fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]) {
        Bond::handle_tun_packet(self, now, packet);
    }

    fn poll_deliver(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        Bond::poll_deliver(self, now, buf)
    }

    fn poll_deliver_ref(&mut self, now: Instant) -> Option<&[u8]> {
        Bond::poll_deliver_ref(self, now)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Bond::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        Bond::handle_timeout(self, now);
    }
}

/// The address side `side` sends simulated path `i` from (documentation addresses,
/// RFC 5737).
pub fn address(i: usize, side: Side) -> SocketAddr {
    let host = match side {
        Side::A => 1,
        Side::B => 2,
    };
    let port = 7000 + u16::try_from(i).expect("sim: fewer than 58 536 paths");
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, host), port))
}

/// An endpoint's paths are UDP paths whose peer is the other side's [`address`].
impl Node for Endpoint {
    fn add_path(&mut self, now: Instant, cfg: PathConfig, i: usize, side: Side) -> PathId {
        let other = match side {
            Side::A => Side::B,
            Side::B => Side::A,
        };
        let kind = PathKind::Udp {
            remote: Some(address(i, other)),
        };
        Endpoint::add_path(self, now, cfg, kind, None).expect("sim: add a path to an endpoint")
    }

    fn receive(
        &mut self,
        now: Instant,
        path: PathId,
        i: usize,
        from: Side,
        bytes: &mut [u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) {
        let src = address(i, from);
        self.handle_udp_preopened(now, path, src, bytes, Preopen::Untouched, deliver);
    }

    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(PathId, usize)> {
        self.poll_transmit(now, buf).map(|t| (t.path, t.len))
    }

    fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]) {
        Endpoint::handle_tun_packet(self, now, packet);
    }

    fn poll_deliver(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        Endpoint::poll_deliver(self, now, buf)
    }

    fn poll_deliver_ref(&mut self, now: Instant) -> Option<&[u8]> {
        Endpoint::poll_deliver_ref(self, now)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Endpoint::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        Endpoint::handle_timeout(self, now);
    }

    fn add_line(&mut self, now: Instant, cfg: PathConfig, line: LineConfig) -> PathId {
        let id = Endpoint::add_path(self, now, cfg, PathKind::Line(line), None)
            .expect("sim: add a line to an endpoint");
        // The tty is there from the start.
        self.line_opened(id);
        id
    }

    fn line_write(&mut self, now: Instant, path: PathId, buf: &mut Vec<u8>) -> bool {
        let Some(chunk) = self.poll_line_write(now, path) else {
            return false;
        };
        buf.clear();
        buf.extend_from_slice(chunk);
        self.line_wrote(path, buf.len());
        true
    }

    fn line_receive(&mut self, now: Instant, path: PathId, bytes: &[u8]) {
        self.handle_line_bytes(now, path, bytes);
    }
}
