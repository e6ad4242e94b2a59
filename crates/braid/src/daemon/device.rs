//! The bond's interface as the loop sees it: a packet device it reads IP packets from and
//! writes IP packets to. The TUN in `braid up`; in the tests, one end of a datagram
//! socket pair ([`PacketPipe`]), so the whole loop runs without root.

use std::fmt::Debug;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;

use crate::config::BondSettings;
use crate::sys::tap::Tap;
use crate::sys::tun::Tun;

/// A packet device: one IP packet per read or write, non-blocking, pollable.
pub trait Device: Debug {
    /// Read one packet into `buf` (WouldBlock when there is none).
    fn read(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Write one packet.
    fn write(&self, packet: &[u8]) -> io::Result<usize>;
    /// The fd to poll for reading.
    fn fd(&self) -> RawFd;
    /// Whether reads and writes carry a virtio header (`IFF_VNET_HDR`), and whether the
    /// device takes UDP superframes (USO).
    fn vnet(&self) -> (bool, bool) {
        (false, false)
    }
}

impl Device for Tun {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        Tun::read(self, buf)
    }

    fn write(&self, packet: &[u8]) -> io::Result<usize> {
        Tun::write(self, packet)
    }

    fn fd(&self) -> RawFd {
        self.as_raw_fd()
    }

    fn vnet(&self) -> (bool, bool) {
        let o = self.offloads();
        (o.vnet_hdr, o.uso)
    }
}

/// A TAP (`layer = "ethernet"` over UDP or serial paths): Ethernet frames, one per read
/// or write, no virtio header (the core's offload code cuts IP packets, not frames).
impl Device for Tap {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        Tap::read(self, buf)
    }

    fn write(&self, frame: &[u8]) -> io::Result<usize> {
        Tap::write(self, frame)
    }

    fn fd(&self) -> RawFd {
        self.as_raw_fd()
    }
}

/// The TAP of an Ethernet bond over paths: `bond.mac` (or one derived from the interface
/// and address, the same at every start), `bond.mtu`, and the bond's addresses.
pub fn open_tap(b: &BondSettings) -> anyhow::Result<Tap> {
    let address = b.address.to_string();
    let mac = b
        .mac
        .unwrap_or_else(|| crate::config::derived_mac(&b.interface, &address));
    let tap = Tap::open(&b.interface, mac, b.mtu, false)
        .map_err(|e| anyhow::anyhow!("cannot create the TAP interface {}: {e}", b.interface))?;
    let six = b.address6.map(|a| a.to_string());
    for cidr in std::iter::once(&address).chain(six.as_ref()) {
        super::hooks::ip(&["addr", "replace", cidr, "dev", &b.interface])
            .map_err(|e| anyhow::anyhow!("cannot put {cidr} on {}: {e}", b.interface))?;
    }
    Ok(tap)
}

/// One end of a pair of connected datagram sockets standing in for a TUN: what is
/// written to one end is read, packet by packet, from the other.
#[derive(Debug)]
pub struct PacketPipe {
    sock: UnixDatagram,
}

impl PacketPipe {
    /// Two connected ends, non-blocking.
    pub fn pair() -> io::Result<(PacketPipe, PacketPipe)> {
        let (a, b) = UnixDatagram::pair()?;
        a.set_nonblocking(true)?;
        b.set_nonblocking(true)?;
        Ok((PacketPipe { sock: a }, PacketPipe { sock: b }))
    }
}

impl Device for PacketPipe {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.recv(buf)
    }

    fn write(&self, packet: &[u8]) -> io::Result<usize> {
        self.sock.send(packet)
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}
