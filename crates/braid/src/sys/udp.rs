//! One non-blocking UDP socket per path: bound to the path's `local` address, optionally
//! bound to a device (SO_BINDTODEVICE). Not connected: the daemon sends with `send_to` the
//! path's current peer address and reads with `recv_from`, so that the peer address can
//! follow authenticated datagrams from a new source (roaming, NAT rebinding). Datagrams
//! from other sources are filtered by the endpoint's sealer (`braid_core::Sealer`), not by the kernel.
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, Socket, Type};

/// Socket buffer size asked for (the kernel caps it at net.core.{r,w}mem_max).
const SOCKET_BUFFER: usize = 4 << 20;

/// A socket that could not be opened: which step failed, and the OS error.
#[derive(Debug)]
pub struct OpenError {
    /// The step (`bind 10.0.0.1:7000`, `SO_BINDTODEVICE eth1`...).
    pub step: String,
    /// The OS error.
    pub err: io::Error,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.err)?;
        if self.err.raw_os_error() == Some(libc::EPERM) {
            write!(f, " (needs root)")?;
        }
        Ok(())
    }
}

impl std::error::Error for OpenError {}

/// Open the path socket, bound to `local` and, if given, to device `dev`, with
/// `SO_MARK = mark` if given (so that policy routing sends it by the main table, not into
/// the bond). Errors say which step failed. The socket is not connected.
pub fn open(
    local: SocketAddr,
    dev: Option<&str>,
    mark: Option<u32>,
) -> Result<UdpSocket, OpenError> {
    let step = |what: String| move |err: io::Error| OpenError { step: what, err };
    let sock = Socket::new(
        Domain::for_address(local),
        Type::DGRAM.nonblocking().cloexec(),
        Some(Protocol::UDP),
    )
    .map_err(step("socket".into()))?;
    if local.is_ipv6() {
        sock.set_only_v6(true).map_err(step("IPV6_V6ONLY".into()))?;
    }
    if let Some(dev) = dev {
        sock.bind_device(Some(dev.as_bytes()))
            .map_err(step(format!("SO_BINDTODEVICE {dev}")))?;
    }
    if let Some(mark) = mark {
        sock.set_mark(mark)
            .map_err(step(format!("SO_MARK {mark}")))?;
    }
    // Bigger buffers absorb bursts between event-loop turns; failures are harmless.
    let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
    let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
    if local.is_ipv4() {
        let_kernel_fragment(&sock);
    }
    sock.bind(&local.into())
        .map_err(step(format!("bind {local}")))?;
    Ok(sock.into())
}

/// Let the kernel fragment an IPv4 datagram larger than the route's MTU rather than fail
/// the send (`IP_PMTUDISC_DONT`).
pub fn let_kernel_fragment(sock: &impl AsRawFd) {
    set_int_option(
        sock,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DONT,
    );
}

/// `setsockopt` of an int option; a failure leaves the socket as it was (the options set
/// this way are tunings, not requirements).
pub fn set_int_option(sock: &impl AsRawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) {
    // SAFETY: setsockopt with a pointer to a c_int of the right size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// What a send or receive error means for the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Nothing more now (EAGAIN/EINTR): try later.
    WouldBlock,
    /// This datagram only (EMSGSIZE, ENOBUFS): drop it.
    Datagram,
    /// The path failed but the socket is fine (ECONNREFUSED, EHOSTUNREACH, ENETUNREACH: no
    /// route to the peer while the uplink is down): tell the bond; probes go on, so the
    /// path comes back as soon as its route does.
    Path,
    /// The socket is unusable (address or device gone): tell the bond, re-create it later.
    Socket,
}

/// Classify an IO error from a path socket.
pub fn classify(e: &io::Error) -> ErrorKind {
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => ErrorKind::WouldBlock,
        Some(libc::EMSGSIZE) | Some(libc::ENOBUFS) => ErrorKind::Datagram,
        Some(libc::ECONNREFUSED)
        | Some(libc::EHOSTUNREACH)
        | Some(libc::ENETUNREACH)
        | Some(libc::EHOSTDOWN)
        | Some(libc::ENETDOWN)
        | Some(libc::ETIMEDOUT) => ErrorKind::Path,
        _ if e.kind() == io::ErrorKind::WouldBlock => ErrorKind::WouldBlock,
        _ => ErrorKind::Socket,
    }
}

/// [`classify`] for an error on `sock`: ENETUNREACH is a path failure while the socket's
/// own address is still the host's (a link that went down took its route), but a socket
/// failure once that address is gone (removed, or moved by DHCP): the socket is then
/// re-created, which says so in the log and waits for the address.
pub fn classify_on(sock: &UdpSocket, e: &io::Error) -> ErrorKind {
    let kind = classify(e);
    if kind != ErrorKind::Path || e.raw_os_error() != Some(libc::ENETUNREACH) {
        return kind;
    }
    let gone = sock
        .local_addr()
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_unspecified())
        .is_some_and(|ip| matches!(super::ifaddr::is_local(ip), Ok(false)));
    if gone {
        ErrorKind::Socket
    } else {
        kind
    }
}

/// The fd of an optional socket, for polling.
pub fn raw_fd(s: &UdpSocket) -> RawFd {
    s.as_raw_fd()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_errors() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(classify(&e(libc::EAGAIN)), ErrorKind::WouldBlock);
        assert_eq!(classify(&e(libc::EMSGSIZE)), ErrorKind::Datagram);
        assert_eq!(classify(&e(libc::ECONNREFUSED)), ErrorKind::Path);
        // A link that goes down takes its route along: the socket is fine (re-creating it
        // cost up to a second after the link came back: fault-matrix seed 28).
        assert_eq!(classify(&e(libc::ENETUNREACH)), ErrorKind::Path);
        assert_eq!(classify(&e(libc::EADDRNOTAVAIL)), ErrorKind::Socket);
        assert_eq!(classify(&e(libc::ENODEV)), ErrorKind::Socket);
    }

    #[test]
    fn loopback_pair_exchanges_datagrams() {
        // Two sockets on loopback, ports picked by binding port-0 probes first.
        let a0 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b0 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (a_addr, b_addr) = (a0.local_addr().unwrap(), b0.local_addr().unwrap());
        drop((a0, b0));
        let a = open(a_addr, None, None).unwrap();
        let b = open(b_addr, None, None).unwrap();
        a.send_to(b"hello", b_addr).unwrap();
        let mut buf = [0u8; 16];
        let mut got = None;
        for _ in 0..1000 {
            match b.recv_from(&mut buf) {
                Ok((n, from)) => {
                    assert_eq!(from, a_addr);
                    got = Some(n);
                    break;
                }
                Err(e) if classify(&e) == ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got.map(|n| &buf[..n]), Some(&b"hello"[..]));
        // Non-blocking: nothing more waits.
        assert_eq!(
            classify(&b.recv(&mut buf).unwrap_err()),
            ErrorKind::WouldBlock
        );
    }

    #[test]
    fn bind_to_foreign_address_fails_clearly() {
        let e = open("192.0.2.77:7000".parse().unwrap(), None, None).unwrap_err();
        assert!(e.to_string().starts_with("bind 192.0.2.77:7000: "), "{e}");
        assert_eq!(e.err.raw_os_error(), Some(libc::EADDRNOTAVAIL));
    }
}
