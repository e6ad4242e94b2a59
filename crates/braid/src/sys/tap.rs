//! The TAP device of an Ethernet bond: `/dev/net/tun` with `TUNSETIFF` (IFF_TAP |
//! IFF_NO_PI, and IFF_VNET_HDR when asked), non-blocking, with the bond's MAC and MTU, up.
//! Not persistent: dropping [`Tap`] removes the interface (and the addresses and routes
//! on it).
//!
//! With the virtio header, every read and write starts with the 10-byte little-endian
//! `virtio_net_hdr` (`braid_core::offload::vnet`) in front of the Ethernet frame, and the
//! device is asked for `TUNSETOFFLOAD` checksum + TSO4 + TSO6 (what the kernel refuses is
//! left off; [`Tap::offloads`] says what it took): reads may then be TCP superframes of up
//! to 64 KB whose checksum is left to do, as the kernel's bonding hands GSO skbs to its
//! slaves.
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

use super::netdev;
use super::tun::{negotiate_offloads, Offloads};

/// An open TAP device.
#[derive(Debug)]
pub struct Tap {
    file: File,
    name: String,
    offloads: Offloads,
}

impl Tap {
    /// Create the TAP `name` with Ethernet address `mac` and `mtu`, bring it up.
    /// `vnet_hdr`: the virtio header on every frame and the offloads the kernel takes
    /// (checksum, TSO); an error if the kernel refuses the header itself.
    pub fn open(name: &str, mac: [u8; 6], mtu: u32, vnet_hdr: bool) -> io::Result<Tap> {
        let vnet = if vnet_hdr { libc::IFF_VNET_HDR } else { 0 };
        let file = netdev::clone_device(name, libc::IFF_TAP | libc::IFF_NO_PI | vnet, "TAP")?;
        let offloads = if vnet_hdr {
            let wanted = Offloads {
                vnet_hdr: true,
                csum: true,
                tso: true,
                uso: false,
            };
            negotiate_offloads(&file, name, wanted)?
        } else {
            Offloads::default()
        };
        netdev::set_hwaddr(name, mac)?;
        netdev::set_mtu(name, mtu)?;
        netdev::set_up(name)?;
        Ok(Tap {
            file,
            name: name.to_owned(),
            offloads,
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True when reads and writes carry the 10-byte virtio header.
    pub fn vnet_hdr(&self) -> bool {
        self.offloads.vnet_hdr
    }

    /// The offloads the kernel took (`uso` is never asked for on a TAP).
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    /// Read one frame (with its virtio header when [`Tap::vnet_hdr`]); `WouldBlock` when
    /// none is waiting.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        netdev::read_fd(&self.file, buf)
    }

    /// Write one frame (with its virtio header when [`Tap::vnet_hdr`]).
    pub fn write(&self, frame: &[u8]) -> io::Result<usize> {
        netdev::write_fd(&self.file, frame)
    }
}

impl AsRawFd for Tap {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
