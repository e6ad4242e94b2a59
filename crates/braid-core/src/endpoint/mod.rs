//! The endpoint: the one composition every driver runs.
//!
//! ```text
//!  TUN ─handle_tun_packet─▶ Bond ─▶ [emulator] ─▶ Sealer ─poll_transmit─▶ UDP sockets
//!                                                        ╰──────────────▶ serial lines
//!  TUN ◀──poll_deliver──── Bond ◀── Sealer ◀──handle_udp / handle_line── carriers
//! ```
//!
//! An [`Endpoint`] owns the [`Bond`] (scheduling, pacing, reordering), the [`Sealer`]
//! (sessions, the handshake budget, roaming, plain mode's verification tags) and each
//! path's side of the carrier: a UDP path's peer address and roaming state, a serial
//! path's [`Line`] (framing, the control lane, the line clock, the measured rate), and an
//! optional emulator ([`crate::emu`], the lab's `[path.emulate]`). The daemon, the
//! simulator and the tests drive this one type; each says `now`, hands in what arrived
//! and sends what [`Endpoint::poll_transmit`] (UDP) and [`Endpoint::poll_line_write`]
//! (a line's bytes, at the line's pace) return. A [`Transmit`]'s [`TransmitKind`] says what it
//! carries, so no driver peeks at braid's own bytes.
//!
//! A `raw-ip` line (a classic SLIP peer; the bond's only path) carries the TUN's packets
//! as they are: the endpoint hands them between the TUN and the line, and nothing of the
//! bond goes on it.

mod seal;

use std::collections::VecDeque;
use std::net::SocketAddr;

pub use self::seal::{
    opened_seq, udp_overhead, Incoming, Roaming, SealConfig, SealCounters, Sealer, Sealing,
};
use crate::bond::{self, Bond, BondConfig, BondError, PathConfig};
use crate::crypto::{OpenKeys, PendingSeal, Preopen};
use crate::emu::{EmuConfig, Emulator};
use crate::serial::{Line, LineConfig};
use crate::wire::MessageType;
use crate::{Instant, PathId};

/// Largest datagram the endpoint reads or writes (a UDP datagram's limit).
pub const MAX_DATAGRAM: usize = 65536;

/// Handshake answers and hints waiting to be sent; more are dropped (they are repeated by
/// their sender's timers).
const REPLIES_MAX: usize = 64;

/// Packets from a `raw-ip` line waiting for the TUN; more are dropped (counted).
const RAW_IP_MAX: usize = 256;

/// What an [`Endpoint`] is made from.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// The bond's settings.
    pub bond: BondConfig,
    /// Sealing.
    pub seal: SealConfig,
}

/// How a path reaches the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    /// A UDP socket; the peer's address, if known (else learned from its sealed
    /// datagrams, see [`Roaming`]).
    Udp {
        /// Where the peer is.
        remote: Option<SocketAddr>,
    },
    /// A serial line: no addresses, one peer at the other end; the endpoint frames and
    /// paces what goes on it.
    Line(LineConfig),
}

/// What a [`Transmit`] carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransmitKind {
    /// One of the bond's data datagrams (a packet from the TUN, or part of one).
    Data,
    /// One of the bond's control messages (probe, probe answer, ack, parts' control).
    Control,
    /// The sealer's own: an initiation, a response, a keepalive, a cookie or a plain
    /// mode's tag hint.
    Handshake,
}

impl TransmitKind {
    /// Whether it goes ahead of waiting data on a line (everything but data).
    pub fn is_control(self) -> bool {
        self != TransmitKind::Data
    }
}

/// A datagram to send: `len` bytes of the caller's buffer on `path`, to `to` on a UDP
/// path (`None` on a serial line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Transmit {
    /// The path to send on.
    pub path: PathId,
    /// The peer's address on a UDP path.
    pub to: Option<SocketAddr>,
    /// Bytes of the buffer to send.
    pub len: usize,
    /// What it is.
    pub kind: TransmitKind,
}

/// Something the driver may want to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A path came up.
    PathUp(PathId),
    /// A path went down.
    PathDown(PathId),
    /// The peer announced a new epoch: it restarted.
    PeerRestarted,
    /// A UDP path's peer address changed to follow the peer's sealed datagrams (`from`:
    /// `None` when it was not known).
    PeerMoved {
        /// The path.
        path: PathId,
        /// Where the peer was.
        from: Option<SocketAddr>,
        /// Where it is now.
        to: SocketAddr,
    },
}

/// One path's side of the carrier.
#[derive(Debug)]
struct Side {
    id: PathId,
    /// The number sealed datagrams name this path by (`wire::folded`): the smallest not
    /// taken by another live path (at most [`bond::MAX_PATHS`] of them, so it fits a byte).
    wire: u8,
    kind: SideKind,
    emu: Option<Emulator>,
    emu_dropped: u64,
}

impl Side {
    /// A serial line in `raw-ip` mode (plain SLIP/CSLIP, no bond).
    fn is_raw_ip(&self) -> bool {
        matches!(&self.kind, SideKind::Line(l) if l.config().raw_ip)
    }

    /// Its serial line, if it is one.
    fn line_mut(&mut self) -> Option<&mut Line> {
        match &mut self.kind {
            SideKind::Line(l) => Some(l),
            SideKind::Udp { .. } => None,
        }
    }
}

#[derive(Debug)]
enum SideKind {
    Udp {
        remote: Option<SocketAddr>,
        roam: Roaming,
    },
    Line(Box<Line>),
}

/// A datagram to send back where one came from.
#[derive(Debug)]
struct Reply {
    path: PathId,
    to: Option<SocketAddr>,
    bytes: Vec<u8>,
}

/// Where the packets a datagram lets out go at once ([`Endpoint::handle_udp_preopened`]).
type Deliver<'a> = &'a mut dyn FnMut(&[u8]);

/// The bond, its sealing and its paths' carriers' state. See the module documentation.
#[derive(Debug)]
pub struct Endpoint {
    bond: Bond,
    sealer: Sealer,
    paths: Vec<Side>,
    replies: VecDeque<Reply>,
    /// The sealer's handshake datagram going out on every path (`handshake[..handshake_len]`;
    /// the buffer keeps its size, so asking the sealer costs nothing when it has nothing),
    /// and the next path's index.
    handshake: Vec<u8>,
    handshake_len: usize,
    handshake_next: usize,
    events: VecDeque<Event>,
    /// A sealed datagram for a line (lines take it by copy into their lanes).
    sealed: Vec<u8>,
    /// A line's datagram being opened (in place).
    opening: Vec<u8>,
    /// `raw-ip`: packets from the line for the TUN, and their buffers once delivered
    /// (reused: no allocation per packet once warm).
    raw_ip_rx: VecDeque<Vec<u8>>,
    raw_ip_free: Vec<Vec<u8>>,
    /// The raw IP packet [`Endpoint::poll_deliver_ref`] lent last.
    raw_ip_lent: Vec<u8>,
    raw_ip_counters: RawIpCounters,
}

/// A `raw-ip` line's drops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RawIpCounters {
    /// Frames from the line that were not IPv4 or IPv6 packets.
    pub rx_not_ip: u64,
    /// Packets from the line dropped because the TUN was not taking them fast enough.
    pub rx_dropped: u64,
}

impl Endpoint {
    /// An endpoint with no paths; the first handshake (with keys) is due at once.
    pub fn new(cfg: EndpointConfig, now: Instant) -> Endpoint {
        Endpoint {
            bond: Bond::new(cfg.bond, now),
            sealer: Sealer::new(cfg.seal, now),
            paths: Vec::new(),
            replies: VecDeque::new(),
            handshake: vec![0; MAX_DATAGRAM],
            handshake_len: 0,
            handshake_next: usize::MAX,
            events: VecDeque::new(),
            sealed: vec![0; MAX_DATAGRAM + 64],
            opening: Vec::with_capacity(MAX_DATAGRAM),
            raw_ip_rx: VecDeque::new(),
            raw_ip_free: Vec::new(),
            raw_ip_lent: Vec::new(),
            raw_ip_counters: RawIpCounters::default(),
        }
    }

    /// Add a path reached by `kind`, emulated by `emu` if given.
    pub fn add_path(
        &mut self,
        now: Instant,
        cfg: PathConfig,
        kind: PathKind,
        emu: Option<EmuConfig>,
    ) -> Result<PathId, BondError> {
        let bps = cfg.bps;
        let wire = (0..=u8::MAX)
            .find(|w| self.paths.iter().all(|s| s.wire != *w))
            .ok_or(BondError::TooManyPaths)?;
        let id = self.bond.add_path(now, cfg)?;
        self.paths.push(Side {
            id,
            wire,
            kind: match kind {
                PathKind::Udp { remote } => SideKind::Udp {
                    remote,
                    roam: Roaming::default(),
                },
                PathKind::Line(c) => SideKind::Line(Box::new(Line::new(c, bps))),
            },
            emu: emu.map(|c| Emulator::new(c, now)),
            emu_dropped: 0,
        });
        Ok(id)
    }

    /// Remove a path (what it queued goes to the others).
    pub fn remove_path(&mut self, now: Instant, id: PathId) -> Result<(), BondError> {
        self.bond.remove_path(now, id)?;
        self.paths.retain(|s| s.id != id);
        self.replies.retain(|r| r.path != id);
        Ok(())
    }

    /// The bond, for its status and settings.
    pub fn bond(&self) -> &Bond {
        &self.bond
    }

    /// The bond, to change its settings (paths are added and removed here, not there).
    pub fn bond_mut(&mut self) -> &mut Bond {
        &mut self.bond
    }

    /// The sealer, for its status.
    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// Why the sealer refused the datagram it last dropped, once.
    pub fn take_rejected(&mut self) -> Option<crate::crypto::Rejected> {
        self.sealer.take_rejected()
    }

    fn side(&self, id: PathId) -> Option<&Side> {
        self.paths.iter().find(|s| s.id == id)
    }

    fn side_mut(&mut self, id: PathId) -> Option<&mut Side> {
        self.paths.iter_mut().find(|s| s.id == id)
    }

    /// A UDP path's peer address, if known.
    pub fn remote(&self, id: PathId) -> Option<SocketAddr> {
        match self.side(id)?.kind {
            SideKind::Udp { remote, .. } => remote,
            SideKind::Line(_) => None,
        }
    }

    /// A serial path's line (its status and counters).
    pub fn line(&self, id: PathId) -> Option<&Line> {
        match &self.side(id)?.kind {
            SideKind::Line(l) => Some(l),
            SideKind::Udp { .. } => None,
        }
    }

    fn line_mut(&mut self, id: PathId) -> Option<&mut Line> {
        self.side_mut(id)?.line_mut()
    }

    /// The `raw-ip` line, if this endpoint's path is one.
    fn raw_ip_line(&mut self) -> Option<&mut Line> {
        self.paths.iter_mut().find(|s| s.is_raw_ip())?.line_mut()
    }

    /// A `raw-ip` line's drops.
    pub fn raw_ip_counters(&self) -> RawIpCounters {
        self.raw_ip_counters
    }

    /// A serial path's tty was opened (or opened again): its line starts afresh (CSLIP:
    /// the peer's decompressor resynchronises on the next uncompressed packet).
    pub fn line_opened(&mut self, id: PathId) {
        if let Some(l) = self.line_mut(id) {
            l.open();
        }
    }

    /// A serial path's tty is gone: what waits for it is discarded, and what the bond
    /// sends it is refused (counted) until it opens again.
    pub fn line_closed(&mut self, id: PathId) {
        if let Some(l) = self.line_mut(id) {
            l.close();
        }
    }

    /// The bytes serial path `id`'s line clock allows to write to its tty now (up to
    /// [`crate::serial::line::AHEAD`] ahead of the line). Say how many the tty took with
    /// [`Endpoint::line_wrote`] (or [`Endpoint::line_would_block`]), then ask again
    /// until `None` or the tty takes fewer than offered.
    pub fn poll_line_write(&mut self, now: Instant, id: PathId) -> Option<&[u8]> {
        self.line_mut(id)?.poll_write(now)
    }

    /// The tty took `n` bytes of the last [`Endpoint::poll_line_write`] offer.
    pub fn line_wrote(&mut self, id: PathId, n: usize) {
        if let Some(l) = self.line_mut(id) {
            l.wrote(n);
        }
    }

    /// The tty refused the last offer (EAGAIN): counted, the bytes wait.
    pub fn line_would_block(&mut self, id: PathId) {
        if let Some(l) = self.line_mut(id) {
            l.would_block();
        }
    }

    /// Set a UDP path's peer address (configured, resolved, or `None`: to be learned);
    /// its roaming state starts afresh.
    pub fn set_remote(&mut self, id: PathId, to: Option<SocketAddr>) {
        if let Some(Side {
            kind: SideKind::Udp { remote, roam },
            ..
        }) = self.side_mut(id)
        {
            *remote = to;
            *roam = Roaming::default();
        }
    }

    /// Put an emulator on path `id` (its outage schedule counts from `now`), or take it
    /// off; what the old one held is lost.
    pub fn set_emulator(&mut self, now: Instant, id: PathId, emu: Option<EmuConfig>) {
        if let Some(side) = self.side_mut(id) {
            side.emu = emu.map(|c| Emulator::new(c, now));
        }
    }

    /// Whether path `id` is emulated, and the datagrams its emulator dropped.
    pub fn emulated(&self, id: PathId) -> Option<u64> {
        let side = self.side(id)?;
        side.emu.as_ref().map(|_| side.emu_dropped)
    }

    /// A packet read from the TUN, or a frame read from the TAP when the bond carries
    /// [`crate::Frames::Ethernet`] (on a `raw-ip` line: framed for it as it is).
    pub fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]) {
        if let Some(line) = self.raw_ip_line() {
            // Refused (buffer full, tty closed): counted by the line.
            let _ = line.send(packet, false);
            return;
        }
        self.bond.handle_tun_packet(now, packet);
    }

    /// [`Endpoint::handle_tun_packet`] without a copy into the bond: it keeps the buffer
    /// the packet is in and leaves a spare of its own in its place (length and bytes
    /// unspecified), to read the next packet into. A raw IP line's packet is copied into
    /// the line and the buffer stays.
    pub fn handle_tun_vec(&mut self, now: Instant, packet: &mut Vec<u8>) {
        if let Some(line) = self.raw_ip_line() {
            // Refused (buffer full, tty closed): counted by the line.
            let _ = line.send(packet, false);
            return;
        }
        self.bond.handle_tun_vec(now, packet);
    }

    /// Whether the bond takes packets from the TUN now ([`Bond::wants_packets`]): when it
    /// says no, leave them in the device until a later turn.
    pub fn wants_tun_packets(&self) -> bool {
        self.paths.iter().any(Side::is_raw_ip) || self.bond.wants_packets()
    }

    /// A datagram read from UDP path `path`'s socket, from `src` (opened in place).
    pub fn handle_udp(&mut self, now: Instant, path: PathId, src: SocketAddr, bytes: &mut [u8]) {
        self.udp(now, path, src, bytes, Preopen::Untouched, None);
    }

    /// The receive keys, so that other threads can open datagrams before they come to
    /// [`Endpoint::handle_udp_preopened`] ([`OpenKeys::open`]). Take them afresh for each
    /// batch: they follow the sessions (a datagram of a session newer than the keys is
    /// left untouched, and opened here).
    pub fn open_keys(&self) -> OpenKeys {
        self.sealer.open_keys()
    }

    /// [`Endpoint::handle_udp`] for a datagram that went through [`OpenKeys::open`] (or
    /// not: [`Preopen::Untouched`]), with what it found: the AEAD is not run again. Call
    /// in the order the path's datagrams arrived.
    ///
    /// The packets it lets out go to `deliver` at once, in order
    /// ([`Bond::handle_datagram_passing`]): the one it brought if it is the next in
    /// sequence (a part of `bytes`, never copied), then those held behind the gap it
    /// filled. Later ones come from [`Endpoint::poll_deliver`] as before.
    pub fn handle_udp_preopened(
        &mut self,
        now: Instant,
        path: PathId,
        src: SocketAddr,
        bytes: &mut [u8],
        pre: Preopen,
        mut deliver: impl FnMut(&[u8]),
    ) {
        self.udp(now, path, src, bytes, pre, Some(&mut deliver));
    }

    /// A datagram to the sealer, then to the bond (which hands what it lets out to
    /// `deliver` if there is one, else keeps it to be polled).
    fn udp(
        &mut self,
        now: Instant,
        path: PathId,
        src: SocketAddr,
        bytes: &mut [u8],
        pre: Preopen,
        deliver: Option<Deliver<'_>>,
    ) {
        let Some(side) = self.paths.iter_mut().find(|s| s.id == path) else {
            return;
        };
        let SideKind::Udp { remote, roam } = &mut side.kind else {
            return;
        };
        let was = *remote;
        match self
            .sealer
            .incoming_preopened(now, remote, roam, src, bytes, pre)
        {
            Incoming::Deliver(d) => match deliver {
                Some(deliver) => self.bond.handle_datagram_passing(now, path, d, deliver),
                None => self.bond.handle_datagram(now, path, d),
            },
            Incoming::Reply(r) => push_reply(&mut self.replies, path, Some(src), r),
            Incoming::Drop => {}
        }
        if let Some(to) = remote.filter(|to| Some(*to) != was) {
            self.events.push_back(Event::PeerMoved {
                path,
                from: was,
                to,
            });
        }
    }

    /// Bytes read from serial path `path`'s tty: each frame they complete is opened and
    /// goes to the bond (on a `raw-ip` line: each IP packet to the TUN).
    pub fn handle_line_bytes(&mut self, now: Instant, path: PathId, bytes: &[u8]) {
        let Endpoint {
            paths,
            sealer,
            bond,
            replies,
            opening,
            raw_ip_rx,
            raw_ip_free,
            raw_ip_counters,
            ..
        } = self;
        let Some(SideKind::Line(line)) =
            paths.iter_mut().find(|s| s.id == path).map(|s| &mut s.kind)
        else {
            return;
        };
        if line.config().raw_ip {
            line.receive(bytes, &mut |pkt| {
                if !matches!(pkt.first().map(|b| b >> 4), Some(4 | 6)) {
                    raw_ip_counters.rx_not_ip += 1;
                } else if raw_ip_rx.len() >= RAW_IP_MAX {
                    raw_ip_counters.rx_dropped += 1;
                } else {
                    let mut b = raw_ip_free.pop().unwrap_or_default();
                    b.clear();
                    b.extend_from_slice(pkt);
                    raw_ip_rx.push_back(b);
                }
            });
            return;
        }
        line.receive(bytes, &mut |d| {
            opening.clear();
            opening.extend_from_slice(d);
            match sealer.incoming_line(now, opening) {
                Incoming::Deliver(d) => bond.handle_datagram(now, path, d),
                Incoming::Reply(r) => push_reply(replies, path, None, r),
                Incoming::Drop => {}
            }
        });
    }

    /// Path `path`'s carrier failed (a send or receive error that says the path is
    /// broken): the bond treats it as down at once.
    pub fn handle_path_error(&mut self, now: Instant, path: PathId) {
        self.bond.handle_path_error(now, path);
    }

    /// The next datagram to send, written into `buf` (at least [`MAX_DATAGRAM`] bytes
    /// plus the sealing overhead): handshake answers first, then the sealer's handshake
    /// datagrams on every path, then what the emulators release, then the bond's
    /// datagrams, sealed. Call until `None` after every other call.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.next_transmit(now, buf, false).map(|(t, _)| t)
    }

    /// [`Endpoint::poll_transmit`] with the AEAD left to the caller, so that it can run on
    /// other threads: a datagram that comes with a [`PendingSeal`] is numbered and laid
    /// out in `buf` but still plaintext, and must be sealed with it before it is sent.
    /// Datagrams may be sealed in any order, but each path's must go out in the order
    /// they came: the receiver takes a gap that a path has passed for a loss. Handshakes,
    /// plain mode's datagrams and everything for serial lines come ready, without one.
    pub fn poll_transmit_deferred(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<PendingSeal>)> {
        self.next_transmit(now, buf, true)
    }

    fn next_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        defer: bool,
    ) -> Option<(Transmit, Option<PendingSeal>)> {
        if let Some(t) = self.handshake_transmit(now, buf) {
            return Some((t, None));
        }
        if let Some(t) = self.release(now, buf, defer) {
            return Some(t);
        }
        // The bond writes each datagram where the sealer wants it (see `seal`).
        let at = self.sealer.datagram_offset();
        while let Some(t) = self.bond.poll_transmit(now, buf.get_mut(at..)?) {
            let Some(i) = self.paths.iter().position(|s| s.id == t.path) else {
                continue;
            };
            let side = &mut self.paths[i];
            if let Some(emu) = &mut side.emu {
                let pushed = buf.get(at..at + t.len).is_some_and(|d| emu.push(now, d));
                if !pushed {
                    side.emu_dropped += 1;
                }
                continue;
            }
            if let Some(t) = self.seal(now, i, t.len, buf, defer) {
                return Some(t);
            }
        }
        // What the bond just handed an emulator with no delay.
        self.release(now, buf, defer)
    }

    /// What the emulators release now, sealed.
    fn release(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        defer: bool,
    ) -> Option<(Transmit, Option<PendingSeal>)> {
        let at = self.sealer.datagram_offset();
        for i in 0..self.paths.len() {
            while let Some(n) = self.paths[i]
                .emu
                .as_mut()
                .and_then(|e| e.poll(now, buf.get_mut(at..)?))
            {
                if let Some(t) = self.seal(now, i, n, buf, defer) {
                    return Some(t);
                }
            }
        }
        None
    }

    /// Replies, then the current handshake datagram on each path in turn.
    fn handshake_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(r) = self.replies.pop_front() {
            if let Some(line) = self.line_mut(r.path) {
                let _ = line.send(&r.bytes, true);
                continue;
            }
            if let Some(dst) = buf.get_mut(..r.bytes.len()) {
                dst.copy_from_slice(&r.bytes);
                return Some(Transmit {
                    path: r.path,
                    to: r.to,
                    len: r.bytes.len(),
                    kind: TransmitKind::Handshake,
                });
            }
        }
        loop {
            while let Some(side) = self.paths.get_mut(self.handshake_next) {
                self.handshake_next += 1;
                let datagram = self.handshake.get(..self.handshake_len)?;
                let to = match &mut side.kind {
                    SideKind::Udp { remote: None, .. } => continue,
                    SideKind::Udp { remote, .. } => *remote,
                    SideKind::Line(line) => {
                        if !line.config().raw_ip {
                            let _ = line.send(datagram, true);
                        }
                        continue;
                    }
                };
                buf.get_mut(..datagram.len())?.copy_from_slice(datagram);
                return Some(Transmit {
                    path: side.id,
                    to,
                    len: datagram.len(),
                    kind: TransmitKind::Handshake,
                });
            }
            // Nothing (more) to send: the loop above has nothing to go over.
            self.handshake_next = usize::MAX;
            self.handshake_len = self.sealer.poll_transmit(now, &mut self.handshake)?;
            self.handshake_next = 0;
        }
    }

    /// Seal the version-1 datagram of `n` bytes at the sealer's
    /// [`Sealer::datagram_offset`] in `buf`, for path index `i`: in place for a UDP path
    /// (returned; with `defer`, its AEAD left to the caller), into its lane for a serial
    /// line.
    fn seal(
        &mut self,
        now: Instant,
        i: usize,
        n: usize,
        buf: &mut [u8],
        defer: bool,
    ) -> Option<(Transmit, Option<PendingSeal>)> {
        let side = self.paths.get_mut(i)?;
        let at = self.sealer.datagram_offset();
        let datagram = buf.get(at..at + n)?;
        let kind = match datagram.get(1).copied().map(MessageType::try_from) {
            Some(Ok(MessageType::Data | MessageType::PinnedData)) => TransmitKind::Data,
            _ => TransmitKind::Control,
        };
        let to = match &mut side.kind {
            // Nowhere to send yet (a name not resolved, or a peer not heard from).
            SideKind::Udp { remote: None, .. } => return None,
            SideKind::Udp { remote, .. } => *remote,
            // Nothing of the bond goes on a raw-ip line.
            SideKind::Line(line) if line.config().raw_ip => return None,
            SideKind::Line(line) => {
                let len = self
                    .sealer
                    .outgoing_line(now, datagram, side.wire, &mut self.sealed)?;
                // Refused (lane full, tty closed): counted by the line.
                let _ = line.send(self.sealed.get(..len)?, kind.is_control());
                return None;
            }
        };
        let (len, job) = self.sealer.outgoing_in_place(now, buf, n, side.wire)?;
        let job = match job {
            Some(job) if !defer => {
                seal::seal_now(&job, buf);
                None
            }
            job => job,
        };
        let t = Transmit {
            path: side.id,
            to,
            len,
            kind,
        };
        Some((t, job))
    }

    /// The next packet for the TUN (a frame for the TAP, as the bond's
    /// [`crate::Frames`] says), written into `buf`: at least [`crate::Frames::max_len`] of
    /// the bond's MTU bytes (a larger packet is dropped and counted).
    pub fn poll_deliver(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        while let Some(p) = self.raw_ip_rx.pop_front() {
            let n = p.len();
            let copied = buf.get_mut(..n).map(|dst| dst.copy_from_slice(&p));
            self.raw_ip_free.push(p);
            if copied.is_some() {
                return Some(n);
            }
        }
        self.bond.poll_deliver(now, buf)
    }

    /// [`Endpoint::poll_deliver`] without the copy: the packet is lent until the next call
    /// that takes the endpoint (the daemon's way: it merges packets into TUN frames).
    pub fn poll_deliver_ref(&mut self, now: Instant) -> Option<&[u8]> {
        if let Some(p) = self.raw_ip_rx.pop_front() {
            let old = core::mem::replace(&mut self.raw_ip_lent, p);
            if old.capacity() > 0 {
                self.raw_ip_free.push(old);
            }
            return Some(&self.raw_ip_lent);
        }
        self.bond.poll_deliver_ref(now)
    }

    /// When [`Endpoint::handle_timeout`] (then [`Endpoint::poll_transmit`]) is next due.
    /// (A line's next write is [`Endpoint::poll_line_write`]'s, included here.)
    pub fn poll_timeout(&self) -> Option<Instant> {
        let sides = self.paths.iter().flat_map(|s| {
            let line = match &s.kind {
                SideKind::Line(l) => [
                    l.next_write(),
                    (l.config().auto_bps && !l.config().raw_ip).then(|| l.next_rate_update()),
                ],
                SideKind::Udp { .. } => [None, None],
            };
            line.into_iter()
                .chain([s.emu.as_ref().and_then(Emulator::poll_timeout)])
                .flatten()
        });
        [self.bond.poll_timeout(), self.sealer.poll_timeout()]
            .into_iter()
            .flatten()
            .chain(sides)
            .min()
    }

    /// Run the timers that are due: the bond's, the sealer's, and each line's rate (the
    /// bond paces a line at what it measurably carries).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.bond.poll_timeout().is_some_and(|t| t <= now) {
            self.bond.handle_timeout(now);
        }
        if self.sealer.poll_timeout().is_some_and(|t| t <= now) {
            self.sealer.handle_timeout(now);
        }
        for s in &mut self.paths {
            if let SideKind::Line(l) = &mut s.kind {
                if let Some(bps) = l.rate_update(now) {
                    // The path exists: it was added with the line.
                    let _ = self.bond.set_path_bps(s.id, bps);
                }
            }
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        Some(match self.bond.poll_event()? {
            bond::Event::PathUp(id) => Event::PathUp(id),
            bond::Event::PathDown(id) => Event::PathDown(id),
            bond::Event::PeerRestarted => Event::PeerRestarted,
        })
    }
}

fn push_reply(replies: &mut VecDeque<Reply>, path: PathId, to: Option<SocketAddr>, r: &[u8]) {
    if replies.len() < REPLIES_MAX {
        replies.push_back(Reply {
            path,
            to,
            bytes: r.to_vec(),
        });
    }
}

#[cfg(test)]
mod frames_tests;
#[cfg(test)]
mod tests;
