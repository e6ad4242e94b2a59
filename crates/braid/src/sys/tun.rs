//! The TUN device: `/dev/net/tun` with `TUNSETIFF` (IFF_TUN | IFF_NO_PI), configured with
//! ioctls (MTU, IPv4 address and netmask, optional IPv6 address, up). The device is not
//! persistent: closing the fd (dropping [`Tun`]) removes it. [`Tun::open_with`] adds
//! `IFF_VNET_HDR` and `TUNSETOFFLOAD` (checksum, TSO, USO); the 10-byte header on each
//! read and write is then the caller's (`braid_core::offload`).
use std::fs::{File, OpenOptions};
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use super::cvt;
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

/// The hint printed when we lack the privilege to create or configure the device.
pub const NEED_ROOT: &str = "braid up needs CAP_NET_ADMIN (run as root, or give the binary the capability: setcap cap_net_admin+ep braid)";

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

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

/// A datagram socket of `family` to issue interface ioctls on.
fn ctl_socket(family: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned at once.
    unsafe {
        Ok(OwnedFd::from_raw_fd(cvt(libc::socket(
            family,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?))
    }
}

fn ioctl(fd: &OwnedFd, req: libc::Ioctl, arg: *mut libc::c_void) -> io::Result<()> {
    // SAFETY: callers pass a pointer to the struct the request expects (ifreq/in6_ifreq).
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) }).map(|_| ())
}

fn with_context(e: io::Error, what: &str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => format!(": {NEED_ROOT}"),
        _ => String::new(),
    };
    io::Error::new(e.kind(), format!("{what}: {e}{hint}"))
}

impl Tun {
    /// Create the TUN device `name` (non-blocking). It is down and unconfigured.
    pub fn create(name: &str) -> io::Result<Tun> {
        Tun::create_flags(name, false)
    }

    /// Create the TUN device `name` (non-blocking), with `IFF_VNET_HDR` if `vnet_hdr`.
    fn create_flags(name: &str, vnet_hdr: bool) -> io::Result<Tun> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => io::Error::new(
                    e.kind(),
                    format!("cannot open /dev/net/tun: {e} (load the tun module: modprobe tun; in a container, pass the device in)"),
                ),
                _ => with_context(e, "cannot open /dev/net/tun"),
            })?;
        let mut req = ifreq(name)?;
        let vnet = if vnet_hdr { libc::IFF_VNET_HDR } else { 0 };
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI | vnet) as libc::c_short;
        // SAFETY: TUNSETIFF takes a pointer to an ifreq.
        let r = unsafe {
            libc::ioctl(
                file.as_raw_fd(),
                libc::TUNSETIFF,
                &mut req as *mut libc::ifreq,
            )
        };
        if r == -1 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EBUSY) => io::Error::new(e.kind(), format!("interface {name} is in use (is another braid running on it?)")),
                Some(libc::EINVAL) => {
                    io::Error::new(e.kind(), format!("cannot create TUN {name}: {e} (does a non-TUN interface of that name exist?)"))
                }
                _ => with_context(e, &format!("cannot create TUN {name}")),
            });
        }
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
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Tun::create(name),
            Err(e) => return Err(e),
        };
        // The header's byte order: little-endian whatever the host (the default on
        // little-endian hosts already).
        let mut le: libc::c_int = 1;
        // SAFETY: TUNSETVNETLE takes a pointer to an int.
        let r = unsafe { libc::ioctl(tun.file.as_raw_fd(), libc::TUNSETVNETLE, &mut le) };
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
                    tun.file.as_raw_fd(),
                    libc::TUNSETOFFLOAD,
                    libc::c_ulong::from(t.flags()),
                )
            };
            if r == 0 {
                tun.offloads = t;
                return Ok(tun);
            }
        }
        Err(with_context(
            io::Error::last_os_error(),
            &format!("{name}: TUNSETOFFLOAD"),
        ))
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
        let s = ctl_socket(libc::AF_INET)?;
        let mut req = ifreq(&self.name)?;
        req.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu).unwrap_or(1400);
        ioctl(&s, libc::SIOCSIFMTU, (&mut req as *mut libc::ifreq).cast())
            .map_err(|e| with_context(e, &format!("{}: set MTU {mtu}", self.name)))
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
        let s = ctl_socket(libc::AF_INET)?;
        let mut req = ifreq(&self.name)?;
        ioctl(
            &s,
            libc::SIOCGIFFLAGS,
            (&mut req as *mut libc::ifreq).cast(),
        )?;
        // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
        let flags = unsafe { req.ifr_ifru.ifru_flags };
        req.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        ioctl(
            &s,
            libc::SIOCSIFFLAGS,
            (&mut req as *mut libc::ifreq).cast(),
        )
        .map_err(|e| with_context(e, &format!("{}: bring up", self.name)))
    }

    /// Read one packet; `WouldBlock` when none is waiting.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for writes of its length.
        let n = unsafe { libc::read(self.file.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n.unsigned_abs())
    }

    /// Write one packet.
    pub fn write(&self, packet: &[u8]) -> io::Result<usize> {
        // SAFETY: packet is valid for reads of its length.
        let n = unsafe { libc::write(self.file.as_raw_fd(), packet.as_ptr().cast(), packet.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n.unsigned_abs())
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
