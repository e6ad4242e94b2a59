//! Interface ioctls shared by the TUN, the TAP and packet sockets: `ifreq` by name, a
//! control socket to issue them on, `/dev/net/tun` cloning, MTU, flags, hardware address
//! and index.
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use super::cvt;

/// The hint printed when we lack the privilege to create or configure a device.
pub const NEED_ROOT: &str = "braid up needs CAP_NET_ADMIN (run as root, or give the binary the capability: setcap cap_net_admin+ep braid)";

/// An `ifreq` naming `name` (checked: not empty, shorter than `IFNAMSIZ`).
pub(crate) fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', '\0', ' ']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name `{}`", name.escape_default()),
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

/// A datagram socket of `family` to issue interface ioctls on.
pub(crate) fn ctl_socket(family: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned at once.
    unsafe {
        Ok(OwnedFd::from_raw_fd(cvt(libc::socket(
            family,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?))
    }
}

/// `ioctl(fd, req, arg)`.
pub(crate) fn ioctl(fd: &OwnedFd, req: libc::Ioctl, arg: *mut libc::c_void) -> io::Result<()> {
    // SAFETY: callers pass a pointer to the struct the request expects (ifreq/in6_ifreq).
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) }).map(|_| ())
}

/// `e` with `what` in front, and the privilege hint when it is EPERM/EACCES.
pub(crate) fn with_context(e: io::Error, what: &str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => format!(": {NEED_ROOT}"),
        _ => String::new(),
    };
    io::Error::new(e.kind(), format!("{what}: {e}{hint}"))
}

/// `ioctl(SIOC..., ifreq)` on an AF_INET control socket for `name`; the ifreq after.
fn if_ioctl(
    name: &str,
    req: libc::Ioctl,
    fill: impl FnOnce(&mut libc::ifreq),
) -> io::Result<libc::ifreq> {
    let s = ctl_socket(libc::AF_INET)?;
    let mut r = ifreq(name)?;
    fill(&mut r);
    ioctl(&s, req, (&mut r as *mut libc::ifreq).cast())?;
    Ok(r)
}

/// Open `/dev/net/tun` (non-blocking) and attach it to the device `name` with `flags`
/// (`IFF_TUN`/`IFF_TAP`, `IFF_NO_PI`, `IFF_VNET_HDR`); `kind` ("TUN", "TAP") is for the
/// messages.
pub(crate) fn clone_device(name: &str, flags: libc::c_int, kind: &str) -> io::Result<File> {
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
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: TUNSETIFF takes a pointer to an ifreq.
    let r = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::TUNSETIFF,
            &mut req as *mut libc::ifreq,
        )
    };
    if r == -1 {
        return Err(tunsetiff_error(io::Error::last_os_error(), name, kind));
    }
    Ok(file)
}

/// What a refused `TUNSETIFF` tells the user. The kind stays the OS error's (EINVAL:
/// `InvalidInput`), which is how [`refused_flags`] knows it.
pub(crate) fn tunsetiff_error(e: io::Error, name: &str, kind: &str) -> io::Error {
    match e.raw_os_error() {
        Some(libc::EBUSY) => io::Error::new(
            e.kind(),
            format!("interface {name} is in use (is another braid running on it?)"),
        ),
        Some(libc::EINVAL) => io::Error::new(
            e.kind(),
            format!("cannot create {kind} {name}: {e} (does another kind of interface of that name exist?)"),
        ),
        _ => with_context(e, &format!("cannot create {kind} {name}")),
    }
}

/// Whether [`clone_device`] failed because the kernel refused the flags (EINVAL): a
/// kernel without `IFF_VNET_HDR`, or another kind of interface of that name.
pub(crate) fn refused_flags(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::InvalidInput
}

/// Set `name`'s MTU (SIOCSIFMTU).
pub(crate) fn set_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let mtu_c = libc::c_int::try_from(mtu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("MTU {mtu} too large")))?;
    if_ioctl(name, libc::SIOCSIFMTU, |r| r.ifr_ifru.ifru_mtu = mtu_c)
        .map(|_| ())
        .map_err(|e| with_context(e, &format!("{name}: set MTU {mtu}")))
}

/// `name`'s flags (SIOCGIFFLAGS: the low 16 bits, `IFF_UP`, `IFF_RUNNING`, ...).
pub(crate) fn flags(name: &str) -> io::Result<libc::c_int> {
    let r = if_ioctl(name, libc::SIOCGIFFLAGS, |_| {})?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let f = unsafe { r.ifr_ifru.ifru_flags };
    Ok(libc::c_int::from(f) & 0xffff)
}

/// Bring `name` up (SIOCGIFFLAGS | IFF_UP, SIOCSIFFLAGS).
pub(crate) fn set_up(name: &str) -> io::Result<()> {
    let f = flags(name).map_err(|e| with_context(e, &format!("{name}: read flags")))?;
    let up = (f | libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    if_ioctl(name, libc::SIOCSIFFLAGS, |r| r.ifr_ifru.ifru_flags = up)
        .map(|_| ())
        .map_err(|e| with_context(e, &format!("{name}: bring up")))
}

/// Set `name`'s Ethernet address (SIOCSIFHWADDR).
pub(crate) fn set_hwaddr(name: &str, mac: [u8; 6]) -> io::Result<()> {
    if_ioctl(name, libc::SIOCSIFHWADDR, |r| {
        // SAFETY: writing the hwaddr member of the union, plain data.
        let sa = unsafe { &mut r.ifr_ifru.ifru_hwaddr };
        sa.sa_family = libc::ARPHRD_ETHER;
        for (d, s) in sa.sa_data.iter_mut().zip(mac) {
            *d = s as libc::c_char;
        }
    })
    .map(|_| ())
    .map_err(|e| {
        with_context(
            e,
            &format!("{name}: set MAC {}", crate::config::format_mac(mac)),
        )
    })
}

/// `name`'s Ethernet address (SIOCGIFHWADDR).
pub(crate) fn hwaddr(name: &str) -> io::Result<[u8; 6]> {
    let r = if_ioctl(name, libc::SIOCGIFHWADDR, |_| {})
        .map_err(|e| with_context(e, &format!("{name}: read MAC")))?;
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member of the union.
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data) {
        *d = s as u8;
    }
    Ok(mac)
}

/// `name`'s index (SIOCGIFINDEX).
pub(crate) fn ifindex(name: &str) -> io::Result<u32> {
    let r = if_ioctl(name, libc::SIOCGIFINDEX, |_| {}).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENODEV) {
            io::Error::new(e.kind(), format!("no interface named {name}"))
        } else {
            with_context(e, &format!("{name}: read index"))
        }
    })?;
    // SAFETY: SIOCGIFINDEX filled the ifindex member of the union.
    let i = unsafe { r.ifr_ifru.ifru_ifindex };
    u32::try_from(i).map_err(|_| io::Error::other(format!("{name}: bad index {i}")))
}

/// `read(2)` on `fd`; `WouldBlock` when nothing waits on a non-blocking fd.
pub(crate) fn read_fd(fd: &impl AsRawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of its length.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n.unsigned_abs())
}

/// `write(2)` on `fd`.
pub(crate) fn write_fd(fd: &impl AsRawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: data is valid for reads of its length.
    let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n.unsigned_abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(ifreq("eth0").is_ok());
        assert!(ifreq("").is_err());
        assert!(ifreq("0123456789abcdef").is_err());
        assert!(ifreq("a/b").is_err());
    }

    /// `Tun::create_with` falls back to a plain TUN when the kernel refuses
    /// `IFF_VNET_HDR` (EINVAL): the error it sees is the one made here, with our text and
    /// no errno, and must still say so. (It did not: the fallback looked for the errno.)
    #[test]
    fn a_refused_flag_is_known_after_the_message_is_ours() {
        let e = tunsetiff_error(io::Error::from_raw_os_error(libc::EINVAL), "b0", "TUN");
        assert!(refused_flags(&e), "{e}");
        assert!(e.to_string().contains("cannot create TUN b0"), "{e}");
        for other in [libc::EBUSY, libc::EPERM, libc::ENOMEM] {
            let e = tunsetiff_error(io::Error::from_raw_os_error(other), "b0", "TUN");
            assert!(!refused_flags(&e), "{e}");
        }
    }
}
