//! A paced UDP sender and a binning receiver, for the link-sharing scenarios.
//!
//! iperf3 reports per second and from each server's own start; the shaping scenarios
//! need every user's rate on one clock, in 10 ms bins (to check the ceil over any
//! 100 ms window), and a sender whose rate changes on a schedule. Both run as threads
//! inside the lab's namespaces ([`super::netns::spawn_in_netns`]) and count IP bytes
//! (UDP payload + 28), the unit HTB shapes.
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::capture::{realtime_ns, timestamp_ns};
use super::netns::now;

/// Bytes of IPv4 + UDP header on each datagram.
pub const IP_UDP_HEADER: usize = 28;
/// Width of a receiver bin.
pub const BIN: Duration = Duration::from_millis(10);

/// One sender: from `src` to `dst:port`, at the rate the schedule gives at each moment.
#[derive(Clone, Debug)]
pub struct Sender {
    /// Source address (must be local in the sender's namespace).
    pub src: Ipv4Addr,
    /// Destination.
    pub dst: SocketAddrV4,
    /// UDP payload bytes per datagram.
    pub payload: usize,
    /// `(from_s, mbit)`: from `from_s` seconds after the start, send `mbit` Mbit/s of IP
    /// packets (0 = silent), until the next entry.
    pub schedule: Vec<(f64, f64)>,
    /// Stop at this many seconds after the start.
    pub stop_s: f64,
}

impl Sender {
    /// The rate at `t` seconds, Mbit/s.
    pub fn rate_at(&self, t: f64) -> f64 {
        if t >= self.stop_s {
            return 0.0;
        }
        self.schedule
            .iter()
            .rev()
            .find(|(from, _)| *from <= t)
            .map_or(0.0, |(_, r)| *r)
    }

    /// Send from `start` until `stop_s`. Returns (datagrams sent, send errors). Send
    /// errors (a full qdisc answering ENOBUFS) are counted, not fatal.
    pub fn run(&self, start: Instant) -> Result<(u64, u64)> {
        let sock = UdpSocket::bind(SocketAddrV4::new(self.src, 0))
            .with_context(|| format!("binding a UDP socket to {}", self.src))?;
        sock.connect(self.dst)
            .with_context(|| format!("connecting to {}", self.dst))?;
        let buf = vec![0x5a_u8; self.payload];
        let wire_bits = ((self.payload + IP_UDP_HEADER) * 8) as f64;
        let (mut sent, mut errors) = (0u64, 0u64);
        let mut credit = 0.0_f64; // datagrams owed
        let mut last = 0.0_f64;
        while let Some(wait) = start.checked_duration_since(now()) {
            std::thread::sleep(wait);
        }
        loop {
            let t = start.elapsed().as_secs_f64();
            if t >= self.stop_s || super::netns::interrupted() {
                break;
            }
            credit += self.rate_at(t) * 1e6 * (t - last) / wire_bits;
            credit = credit.min(16.0); // a late wake-up does not turn into a burst
            last = t;
            while credit >= 1.0 {
                match sock.send(&buf) {
                    Ok(_) => sent += 1,
                    Err(_) => errors += 1,
                }
                credit -= 1.0;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok((sent, errors))
    }
}

/// Receive on `bind` until `until_s` after `start`; IP bytes per [`BIN`] from `start`.
///
/// Each datagram is binned by the time the kernel received it (`SO_TIMESTAMPNS`), not by
/// when this thread got round to reading it: on a busy machine a reader that wakes late
/// would otherwise bunch packets into one bin and see bursts that were never on the link.
pub fn receive(bind: SocketAddrV4, start: Instant, until_s: f64) -> Result<Vec<u64>> {
    let sock = UdpSocket::bind(bind).with_context(|| format!("binding {bind}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let stamps = arrival_stamps(&sock);
    let bins = (until_s / BIN.as_secs_f64()).ceil() as usize + 1;
    let mut out = vec![0u64; bins];
    let mut buf = vec![0u8; 65536];
    // Wall clock at `start`, to place kernel timestamps (CLOCK_REALTIME) on our clock.
    let real_at_start = realtime_ns() - i128::try_from((now() - start).as_nanos()).unwrap_or(0);
    loop {
        let t = start.elapsed();
        if t.as_secs_f64() >= until_s || super::netns::interrupted() {
            break;
        }
        match recv_stamped(&sock, &mut buf, stamps) {
            Ok((n, arrived_ns)) => {
                let since_start_ns = match arrived_ns {
                    Some(ns) => ns - real_at_start,
                    None => i128::try_from(start.elapsed().as_nanos()).unwrap_or(0),
                };
                let i = usize::try_from(since_start_ns / BIN.as_nanos() as i128).unwrap_or(0);
                if let Some(b) = out.get_mut(i) {
                    *b += (n + IP_UDP_HEADER) as u64;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("receiving"),
        }
    }
    Ok(out)
}

/// Ask the kernel for receive timestamps; false if it refuses (then reads are timed here).
pub(super) fn arrival_stamps(sock: &UdpSocket) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt on our own socket with a pointer to a live c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

/// One datagram and, when `stamps`, the kernel's receive time (CLOCK_REALTIME, ns).
pub(super) fn recv_stamped(
    sock: &UdpSocket,
    buf: &mut [u8],
    stamps: bool,
) -> std::io::Result<(usize, Option<i128>)> {
    if !stamps {
        return sock.recv(buf).map(|n| (n, None));
    }
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16]; // 128 bytes, aligned for cmsghdr
                                  // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg on our socket with a msghdr whose buffers are live and sized.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((usize::try_from(n).unwrap_or(0), timestamp_ns(&msg)))
}

/// Mbit/s over bins `[from, to)` of a bin series.
pub fn mbit(bins: &[u64], from: usize, to: usize) -> f64 {
    let to = to.min(bins.len());
    if to <= from {
        return 0.0;
    }
    let bytes: u64 = bins[from..to].iter().sum();
    bytes as f64 * 8.0 / ((to - from) as f64 * BIN.as_secs_f64()) / 1e6
}

/// The highest rate over any window of `width` consecutive bins, Mbit/s, and the
/// second at which that window starts.
pub fn max_window_mbit(bins: &[u64], width: usize) -> (f64, f64) {
    if width == 0 || bins.len() < width {
        return (0.0, 0.0);
    }
    let mut sum: u64 = bins[..width].iter().sum();
    let (mut best, mut at) = (sum, 0);
    for i in width..bins.len() {
        sum = sum + bins[i] - bins[i - width];
        if sum > best {
            (best, at) = (sum, i + 1 - width);
        }
    }
    let secs = BIN.as_secs_f64();
    (
        best as f64 * 8.0 / (width as f64 * secs) / 1e6,
        at as f64 * secs,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_steps() {
        let s = Sender {
            src: Ipv4Addr::LOCALHOST,
            dst: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9),
            payload: 1372,
            schedule: vec![(0.0, 10.0), (5.0, 2.5), (10.0, 0.0)],
            stop_s: 8.0,
        };
        assert_eq!(s.rate_at(0.0), 10.0);
        assert_eq!(s.rate_at(4.99), 10.0);
        assert_eq!(s.rate_at(5.0), 2.5);
        assert_eq!(s.rate_at(8.0), 0.0, "stopped");
    }

    #[test]
    fn window_rates() {
        // 12500 bytes per 10 ms bin = 10 Mbit/s.
        let mut bins = vec![12_500u64; 100];
        assert!((mbit(&bins, 0, 100) - 10.0).abs() < 1e-9);
        bins[50] += 1250; // +1 Mbit/s over one 100 ms window
        let (rate, at) = max_window_mbit(&bins, 10);
        assert!((rate - 10.1).abs() < 1e-9);
        assert!((at - 0.41).abs() < 1e-9, "first window holding bin 50");
        assert_eq!(mbit(&bins, 5, 5), 0.0);
        assert_eq!(max_window_mbit(&bins[..5], 10), (0.0, 0.0));
    }

    #[test]
    fn loopback_send_and_receive() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = rx.local_addr().unwrap().port();
        drop(rx);
        let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        let start = now() + Duration::from_millis(100);
        let r = std::thread::spawn(move || receive(dst, start, 0.7));
        std::thread::sleep(Duration::from_millis(50));
        let s = Sender {
            src: Ipv4Addr::LOCALHOST,
            dst,
            payload: 972,
            schedule: vec![(0.0, 8.0)], // 1000 datagrams/s of 1000 IP bytes
            stop_s: 0.5,
        };
        let (sent, _) = s.run(start).unwrap();
        let bins = r.join().unwrap().unwrap();
        let got: u64 = bins.iter().sum();
        assert!((400..=600).contains(&sent), "sent {sent}");
        assert_eq!(got, sent * 1000, "every datagram counted at IP size");
    }
}
