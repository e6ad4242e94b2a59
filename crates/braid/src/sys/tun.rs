//! The TUN device: `/dev/net/tun` with `TUNSETIFF` (IFF_TUN | IFF_NO_PI), configured with
//! ioctls (MTU, IPv4 address and netmask, optional IPv6 address, up). The device is not
//! persistent: closing the fd (dropping [`Tun`]) removes it. [`Tun::open_with`] adds
//! `IFF_VNET_HDR` and `TUNSETOFFLOAD` (checksum, TSO, USO); the 10-byte header on each
//! read and write is then the caller's (`braid_core::offload`).
use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, RawFd};

use super::netdev::{self, ctl_socket, ifreq, ioctl, with_context};
use crate::config::{Ipv4Cidr, Ipv6Cidr};

/// An open TUN device.
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
    offloads: Offloads,
}

/// TUN offloads: asked for in [`Tun::open_with`], and which the kernel took.
///
/// With `vnet_hdr` every read and write starts with a 10-byte `virtio_net_hdr`
/// (little-endian; see `braid_core::offload::vnet`), even when no offload is on. `csum`:
/// the kernel may hand out packets whose TCP/UDP checksum is left to do (`F_NEEDS_CSUM`).
/// `tso`: reads may be TCP superframes of up to 64 KB (IPv4 and IPv6), and writes may be
/// too. `uso`: the same for UDP (Linux 6.2 and later).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offloads {
    /// `IFF_VNET_HDR`: the virtio header in front of every packet.
    pub vnet_hdr: bool,
    /// `TUN_F_CSUM`.
    pub csum: bool,
    /// `TUN_F_TSO4 | TUN_F_TSO6`.
    pub tso: bool,
    /// `TUN_F_USO4 | TUN_F_USO6`.
    pub uso: bool,
}

impl Offloads {
    /// Everything: the header, checksum, TSO and USO.
    pub const ALL: Offloads = Offloads {
        vnet_hdr: true,
        csum: true,
        tso: true,
        uso: true,
    };

    fn flags(self) -> libc::c_uint {
        let mut f = 0;
        if self.csum {
            f |= libc::TUN_F_CSUM;
        }
        if self.tso {
            f |= libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
        }
        if self.uso {
            f |= libc::TUN_F_USO4 | libc::TUN_F_USO6;
        }
        f
    }
}

pub use super::netdev::NEED_ROOT;

fn sockaddr_in(a: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(a).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size on Linux; both plain data.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// Turn on as many of the `wanted` offloads as the kernel takes on the `IFF_VNET_HDR`
/// device `file` (named `name`): all of them, else without USO, else without TSO, else
/// none (the header stays on). The header is little-endian. An error only if even "none"
/// is refused.
pub(crate) fn negotiate_offloads(
    file: &File,
    name: &str,
    wanted: Offloads,
) -> io::Result<Offloads> {
    // The header's byte order: little-endian whatever the host (the default on
    // little-endian hosts already).
    let mut le: libc::c_int = 1;
    // SAFETY: TUNSETVNETLE takes a pointer to an int.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETVNETLE, &mut le) };
    if r == -1 && cfg!(target_endian = "big") {
        return Err(with_context(
            io::Error::last_os_error(),
            &format!("{name}: TUNSETVNETLE"),
        ));
    }
    // TSO and USO need the checksum offload (the kernel refuses them without).
    let base = Offloads {
        vnet_hdr: true,
        csum: wanted.csum,
        tso: wanted.csum && wanted.tso,
        uso: wanted.csum && wanted.uso,
    };
    let none = Offloads {
        vnet_hdr: true,
        ..Offloads::default()
    };
    let tries = [
        base,
        Offloads { uso: false, ..base },
        Offloads {
            tso: false,
            uso: false,
            ..base
        },
        none,
    ];
    for t in tries {
        // SAFETY: TUNSETOFFLOAD takes the flags as the argument itself.
        let r = unsafe {
            libc::ioctl(
                file.as_raw_fd(),
                libc::TUNSETOFFLOAD,
                libc::c_ulong::from(t.flags()),
            )
        };
        if r == 0 {
            return Ok(t);
        }
    }
    Err(with_context(
        io::Error::last_os_error(),
        &format!("{name}: TUNSETOFFLOAD"),
    ))
}

impl Tun {
    /// Create the TUN device `name` (non-blocking). It is down and unconfigured.
    pub fn create(name: &str) -> io::Result<Tun> {
        Tun::create_flags(name, false)
    }

    /// Create the TUN device `name` (non-blocking), with `IFF_VNET_HDR` if `vnet_hdr`.
    fn create_flags(name: &str, vnet_hdr: bool) -> io::Result<Tun> {
        let vnet = if vnet_hdr { libc::IFF_VNET_HDR } else { 0 };
        let file = netdev::clone_device(name, libc::IFF_TUN | libc::IFF_NO_PI | vnet, "TUN")?;
        Ok(Tun {
            file,
            name: name.to_owned(),
            offloads: Offloads {
                vnet_hdr,
                ..Offloads::default()
            },
        })
    }

    /// Create the device with the virtio header and as many of the `wanted` offloads as
    /// the kernel takes: all of them, else without USO, else checksum only, else none
    /// (the header stays on; an error only if even that is refused). Without `wanted.vnet_hdr`, or when the kernel refuses the
    /// header, the device is the plain one [`Tun::create`] makes. [`Tun::offloads`] says
    /// what is on.
    pub fn create_with(name: &str, wanted: Offloads) -> io::Result<Tun> {
        if !wanted.vnet_hdr {
            return Tun::create(name);
        }
        let mut tun = match Tun::create_flags(name, true) {
            Ok(t) => t,
            // The error's text is ours by now; its kind is still EINVAL's.
            Err(e) if netdev::refused_flags(&e) => return Tun::create(name),
            Err(e) => return Err(e),
        };
        tun.offloads = negotiate_offloads(&tun.file, name, wanted)?;
        Ok(tun)
    }

    /// Which offloads are on.
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    /// Create, configure and bring up the device: MTU, IPv4 address/prefix, optional IPv6.
    pub fn open(name: &str, mtu: u32, v4: Ipv4Cidr, v6: Option<Ipv6Cidr>) -> io::Result<Tun> {
        let tun = Tun::create(name)?;
        tun.set_mtu(mtu)?;
        tun.set_ipv4(v4)?;
        tun.set_up()?;
        if let Some(v6) = v6 {
            tun.add_ipv6(v6)?;
        }
        Ok(tun)
    }

    /// As [`Tun::open`], with the offloads [`Tun::create_with`] can turn on (the result
    /// in [`Tun::offloads`]). Reads and writes then carry the virtio header.
    pub fn open_with(
        name: &str,
        mtu: u32,
        v4: Ipv4Cidr,
        v6: Option<Ipv6Cidr>,
        wanted: Offloads,
    ) -> io::Result<Tun> {
        let tun = Tun::create_with(name, wanted)?;
        tun.set_mtu(mtu)?;
        tun.set_ipv4(v4)?;
        tun.set_up()?;
        if let Some(v6) = v6 {
            tun.add_ipv6(v6)?;
        }
        Ok(tun)
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Set the MTU (SIOCSIFMTU).
    pub fn set_mtu(&self, mtu: u32) -> io::Result<()> {
        netdev::set_mtu(&self.name, mtu)
    }

    /// Set the IPv4 address and netmask (SIOCSIFADDR, SIOCSIFNETMASK); the kernel adds the
    /// prefix route.
    pub fn set_ipv4(&self, a: Ipv4Cidr) -> io::Result<()> {
        let s = ctl_socket(libc::AF_INET)?;
        let mut req = ifreq(&self.name)?;
        req.ifr_ifru.ifru_addr = sockaddr_in(a.addr);
        ioctl(&s, libc::SIOCSIFADDR, (&mut req as *mut libc::ifreq).cast())
            .map_err(|e| with_context(e, &format!("{}: set address {a}", self.name)))?;
        let mut req = ifreq(&self.name)?;
        req.ifr_ifru.ifru_netmask = sockaddr_in(a.netmask());
        ioctl(
            &s,
            libc::SIOCSIFNETMASK,
            (&mut req as *mut libc::ifreq).cast(),
        )
        .map_err(|e| with_context(e, &format!("{}: set netmask {}", self.name, a.netmask())))
    }

    /// Add an IPv6 address (SIOCSIFADDR on an AF_INET6 socket with `in6_ifreq`).
    pub fn add_ipv6(&self, a: Ipv6Cidr) -> io::Result<()> {
        let s = ctl_socket(libc::AF_INET6)
            .map_err(|e| with_context(e, "IPv6 socket (is IPv6 disabled?)"))?;
        let mut req = ifreq(&self.name)?;
        ioctl(
            &s,
            libc::SIOCGIFINDEX,
            (&mut req as *mut libc::ifreq).cast(),
        )?;
        // SAFETY: SIOCGIFINDEX filled the ifindex member of the union.
        let ifindex = unsafe { req.ifr_ifru.ifru_ifindex };
        let mut r6 = libc::in6_ifreq {
            ifr6_addr: libc::in6_addr {
                s6_addr: a.addr.octets(),
            },
            ifr6_prefixlen: u32::from(a.prefix),
            ifr6_ifindex: ifindex,
        };
        ioctl(
            &s,
            libc::SIOCSIFADDR,
            (&mut r6 as *mut libc::in6_ifreq).cast(),
        )
        .map_err(|e| with_context(e, &format!("{}: add address {a}", self.name)))
    }

    /// Bring the interface up (SIOCGIFFLAGS | IFF_UP, SIOCSIFFLAGS).
    pub fn set_up(&self) -> io::Result<()> {
        netdev::set_up(&self.name)
    }

    /// Read one packet; `WouldBlock` when none is waiting.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        netdev::read_fd(&self.file, buf)
    }

    /// Write one packet.
    pub fn write(&self, packet: &[u8]) -> io::Result<usize> {
        netdev::write_fd(&self.file, packet)
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
