//! Carrier watch for Ethernet members: a `NETLINK_ROUTE` socket in the `RTMGRP_LINK`
//! group, read by [`LinkWatch::drain`], and [`carrier`] for a device's state now.
//!
//! Each `RTM_NEWLINK` says a device's flags: its carrier is `IFF_UP && IFF_LOWER_UP`;
//! `RTM_DELLINK` is a device gone (carrier down). Messages are parsed by hand
//! ([`parse`], fed any bytes: a truncated or odd message is counted, never a panic).
//! When the socket's buffer overflowed (`ENOBUFS`: notices were lost) the watch asks the
//! kernel for a dump of every link, whose answers come through `drain` like notices.
//!
//! Timing: the kernel sends these notices from its `linkwatch` work. A carrier change of
//! a device stacked on another (veth, VLAN) is sent at once; for a plain NIC the kernel
//! may hold it up to one second (`linkwatch_fire_event`'s rate limit). [`carrier`] reads
//! `IFF_LOWER_UP` through an `RTM_GETLINK` request, which reflects the driver's carrier
//! at once; [`LinkWatch::request`] asks the same on the watch's own socket, the answer
//! coming through [`LinkWatch::drain`] like a notice: requesting each member every 100 ms
//! is bonding's `miimon=100`, and meets a 100 ms failover whatever the kernel's delay
//! (the notices alone took 988 ms in `tests/ether_sys.rs` when another link had changed
//! just before).
use std::io;
use std::mem::size_of_val;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, netdev};

const NLMSG_HDRLEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
/// Datagrams read per [`LinkWatch::drain`] at most (the socket stays readable past it).
const DRAIN_MAX: usize = 1024;

/// What [`parse`] found in one datagram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Link messages reported (`RTM_NEWLINK`, `RTM_DELLINK`).
    pub links: u64,
    /// Messages too short, with a bad length or a bad index (the rest of the datagram
    /// after a bad length is skipped).
    pub malformed: u64,
    /// An `NLMSG_ERROR` with a non-zero error: its (negative) errno.
    pub error: Option<i32>,
}

/// The watch's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkWatchStats {
    /// Datagrams read.
    pub datagrams: u64,
    /// Link messages reported.
    pub links: u64,
    /// Malformed messages and truncated datagrams.
    pub malformed: u64,
    /// Times the socket's buffer overflowed (and a dump was asked for).
    pub overruns: u64,
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    b.get(i..i + 2).map(|s| u16::from_ne_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    b.get(i..i + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

/// Parse one netlink datagram (host byte order): `f(ifindex, carrier)` for each link
/// message of family `AF_UNSPEC` (bridge port notices, `AF_BRIDGE`, are skipped: their
/// `RTM_DELLINK` is a port leaving a bridge, not a device going away).
pub fn parse(bytes: &[u8], f: &mut dyn FnMut(u32, bool)) -> Parsed {
    let mut out = Parsed::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (Some(len), Some(kind)) = (u32_at(rest, 0), u16_at(rest, 4)) else {
            out.malformed += 1;
            break;
        };
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len < NLMSG_HDRLEN || len > rest.len() {
            out.malformed += 1;
            break;
        }
        let msg = rest.get(NLMSG_HDRLEN..len).unwrap_or_default();
        match kind {
            libc::RTM_NEWLINK | libc::RTM_DELLINK => {
                let family = msg.first().copied();
                let index = u32_at(msg, 4).and_then(|i| i32::try_from(i).ok());
                let flags = u32_at(msg, 8);
                match (family, index, flags) {
                    (Some(fam), Some(i), Some(fl)) if msg.len() >= IFINFOMSG_LEN && i > 0 => {
                        if i32::from(fam) == libc::AF_UNSPEC {
                            let up = libc::IFF_UP as u32 | libc::IFF_LOWER_UP as u32;
                            let carrier = kind == libc::RTM_NEWLINK && fl & up == up;
                            f(i.unsigned_abs(), carrier);
                            out.links += 1;
                        }
                    }
                    _ => out.malformed += 1,
                }
            }
            NLMSG_ERROR => match u32_at(msg, 0).map(|e| e as i32) {
                Some(0) => {}
                Some(e) => out.error = Some(e),
                None => out.malformed += 1,
            },
            _ => {}
        }
        let step = len.saturating_add(3) & !3;
        rest = rest.get(step..).unwrap_or_default();
    }
    out
}

/// A netlink route socket (`O_NONBLOCK` if `nonblocking`), in `groups`.
fn route_socket(groups: u32, nonblocking: bool) -> io::Result<OwnedFd> {
    let nb = if nonblocking { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain socket(2); the fd is owned at once.
    let fd = unsafe {
        OwnedFd::from_raw_fd(cvt(libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | nb,
            libc::NETLINK_ROUTE,
        ))?)
    };
    // SAFETY: plain data; all-zero is valid.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = groups;
    let len = libc::socklen_t::try_from(size_of_val(&sa)).expect("sockaddr_nl size");
    // SAFETY: sa is a valid sockaddr_nl of `len` bytes.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast(),
            len,
        )
    })?;
    Ok(fd)
}

/// Send an `RTM_GETLINK` request: for `index`, or a dump of every link when 0.
fn request_links(fd: &OwnedFd, index: u32, seq: u32) -> io::Result<()> {
    let mut req = [0u8; NLMSG_HDRLEN + IFINFOMSG_LEN];
    let flags = if index == 0 {
        libc::NLM_F_REQUEST | libc::NLM_F_DUMP
    } else {
        libc::NLM_F_REQUEST
    };
    let len = (NLMSG_HDRLEN + IFINFOMSG_LEN) as u32;
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    req[4..6].copy_from_slice(&libc::RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&(flags as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&seq.to_ne_bytes());
    req[16] = libc::AF_UNSPEC as u8;
    req[20..24].copy_from_slice(&index.to_ne_bytes());
    // SAFETY: plain data; all-zero is valid: the kernel (pid 0).
    let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    let len = libc::socklen_t::try_from(size_of_val(&to)).expect("sockaddr_nl size");
    // SAFETY: req and `to` are valid for their lengths.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&to as *const libc::sockaddr_nl).cast(),
            len,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One datagram from the kernel into `buf`: its length (`Ok(None)` for a datagram from
/// another sender, dropped), truncated to `buf` (the second value: it was).
fn recv_kernel(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<(usize, bool)>> {
    // SAFETY: plain data; all-zero is valid.
    let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    let mut flen = libc::socklen_t::try_from(size_of_val(&from)).expect("sockaddr_nl size");
    // SAFETY: buf and `from` are valid for writes of their lengths.
    let n = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_TRUNC,
            (&mut from as *mut libc::sockaddr_nl).cast(),
            &mut flen,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if from.nl_pid != 0 {
        return Ok(None);
    }
    let n = n.unsigned_abs();
    Ok(Some((n.min(buf.len()), n > buf.len())))
}

/// Link notices from the kernel.
#[derive(Debug)]
pub struct LinkWatch {
    fd: OwnedFd,
    buf: Vec<u8>,
    seq: u32,
    stats: LinkWatchStats,
}

impl LinkWatch {
    /// A non-blocking socket in the kernel's link group.
    pub fn open() -> io::Result<LinkWatch> {
        let fd = route_socket(libc::RTMGRP_LINK as u32, true)
            .map_err(|e| netdev::with_context(e, "netlink link watch"))?;
        Ok(LinkWatch {
            fd,
            buf: vec![0u8; 65536],
            seq: 0,
            stats: LinkWatchStats::default(),
        })
    }

    /// Read what waits: `f(ifindex, carrier)` for each link notice, in order (the same
    /// state may be repeated: any change of a device is a notice). `Ok` once the socket
    /// is empty (or after a bounded number of datagrams).
    pub fn drain(&mut self, f: &mut dyn FnMut(u32, bool)) -> io::Result<()> {
        for _ in 0..DRAIN_MAX {
            match recv_kernel(&self.fd, &mut self.buf) {
                Ok(None) => {}
                Ok(Some((n, truncated))) => {
                    self.stats.datagrams += 1;
                    self.stats.malformed += u64::from(truncated);
                    let p = parse(self.buf.get(..n).unwrap_or_default(), f);
                    self.stats.links += p.links;
                    self.stats.malformed += p.malformed;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // Notices were lost: ask for every link's state again.
                    self.stats.overruns += 1;
                    self.seq = self.seq.wrapping_add(1);
                    request_links(&self.fd, 0, self.seq)?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Ask the kernel for device `ifindex`'s state now: the answer comes through
    /// [`LinkWatch::drain`] (as `f(ifindex, carrier)`), without the kernel's notice delay.
    /// A device that is gone answers with an error, which `drain` skips.
    pub fn request(&mut self, ifindex: u32) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        request_links(&self.fd, ifindex, self.seq)
    }

    /// The counters.
    pub fn stats(&self) -> LinkWatchStats {
        self.stats
    }
}

impl AsRawFd for LinkWatch {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// `dev`'s carrier now: `IFF_UP && IFF_LOWER_UP`, asked of the kernel (`RTM_GETLINK`).
pub fn carrier(dev: &str) -> io::Result<bool> {
    let index = netdev::ifindex(dev)?;
    let fd = route_socket(0, false)?;
    let tv = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    let tlen = libc::socklen_t::try_from(size_of_val(&tv)).expect("timeval size");
    // SAFETY: tv is a valid timeval of `tlen` bytes.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            tlen,
        )
    })?;
    request_links(&fd, index, 1)?;
    let mut buf = vec![0u8; 32768];
    for _ in 0..16 {
        let Some((n, _)) = recv_kernel(&fd, &mut buf)? else {
            continue;
        };
        let mut found = None;
        let p = parse(buf.get(..n).unwrap_or_default(), &mut |i, c| {
            if i == index {
                found = Some(c);
            }
        });
        if let Some(c) = found {
            return Ok(c);
        }
        if let Some(e) = p.error {
            return Err(io::Error::from_raw_os_error(-e));
        }
    }
    Err(io::Error::other(format!(
        "{dev}: no link state from the kernel"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link_msg(kind: u16, family: u8, index: i32, flags: u32, attrs: usize) -> Vec<u8> {
        let len = NLMSG_HDRLEN + IFINFOMSG_LEN + attrs;
        let mut m = vec![0u8; len];
        m[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        m[16] = family;
        m[20..24].copy_from_slice(&index.to_ne_bytes());
        m[24..28].copy_from_slice(&flags.to_ne_bytes());
        while !m.len().is_multiple_of(4) {
            m.push(0);
        }
        m
    }

    fn collect(b: &[u8]) -> (Vec<(u32, bool)>, Parsed) {
        let mut v = Vec::new();
        let p = parse(b, &mut |i, c| v.push((i, c)));
        (v, p)
    }

    const UP: u32 = libc::IFF_UP as u32;
    const LOWER: u32 = libc::IFF_LOWER_UP as u32;

    #[test]
    fn newlink_and_dellink() {
        let mut d = link_msg(libc::RTM_NEWLINK, 0, 3, UP | LOWER, 5);
        d.extend(link_msg(libc::RTM_NEWLINK, 0, 4, UP, 0));
        d.extend(link_msg(libc::RTM_NEWLINK, 0, 5, LOWER, 8));
        d.extend(link_msg(libc::RTM_DELLINK, 0, 3, UP | LOWER, 0));
        let (v, p) = collect(&d);
        assert_eq!(v, [(3, true), (4, false), (5, false), (3, false)]);
        assert_eq!(p.links, 4);
        assert_eq!(p.malformed, 0);
    }

    #[test]
    fn bridge_notices_are_skipped() {
        let d = link_msg(libc::RTM_DELLINK, libc::AF_BRIDGE as u8, 3, 0, 0);
        let (v, p) = collect(&d);
        assert!(v.is_empty());
        assert_eq!(p, Parsed::default());
    }

    #[test]
    fn odd_messages_are_counted() {
        // A header whose length runs past the datagram.
        let mut d = link_msg(libc::RTM_NEWLINK, 0, 3, UP | LOWER, 0);
        d.truncate(20);
        assert_eq!(collect(&d).1.malformed, 1);
        // Shorter than a header.
        assert_eq!(collect(&[1, 2, 3]).1.malformed, 1);
        // A length below the header's.
        let mut d = link_msg(libc::RTM_NEWLINK, 0, 3, UP | LOWER, 0);
        d[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert_eq!(collect(&d).1.malformed, 1);
        // A link message without its ifinfomsg, then a good one.
        let mut d = vec![0u8; NLMSG_HDRLEN + 4];
        d[0..4].copy_from_slice(&((NLMSG_HDRLEN + 4) as u32).to_ne_bytes());
        d[4..6].copy_from_slice(&libc::RTM_NEWLINK.to_ne_bytes());
        d.extend(link_msg(libc::RTM_NEWLINK, 0, 7, UP | LOWER, 0));
        let (v, p) = collect(&d);
        assert_eq!((v, p.malformed), (vec![(7, true)], 1));
        // A negative index.
        let d = link_msg(libc::RTM_NEWLINK, 0, -1, UP | LOWER, 0);
        assert_eq!(collect(&d).1.malformed, 1);
        // Other types pass; an error is reported.
        let mut d = vec![0u8; NLMSG_HDRLEN + 4];
        d[0..4].copy_from_slice(&((NLMSG_HDRLEN + 4) as u32).to_ne_bytes());
        d[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        d[16..20].copy_from_slice(&(-19i32).to_ne_bytes());
        assert_eq!(collect(&d).1.error, Some(-19));
    }

    #[test]
    fn any_bytes_parse_without_panic() {
        // A small deterministic sweep: every prefix of a valid datagram, and bytes
        // flipped one at a time.
        let mut d = link_msg(libc::RTM_NEWLINK, 0, 3, UP | LOWER, 6);
        d.extend(link_msg(libc::RTM_DELLINK, 0, 3, 0, 0));
        for n in 0..=d.len() {
            let _ = collect(&d[..n]);
        }
        for i in 0..d.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut e = d.clone();
                e[i] ^= x;
                let _ = collect(&e);
            }
        }
    }
}
