//! Serial lines in the lab: an emulated [`Line`] per serial path of a scenario, a timed
//! TCP transfer of N bytes through the bond (optionally with a clamped MSS, which is how the
//! lab gives TCP the MTU of a 1995 SLIP line), and ping RTTs.
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::line::{Line, LineConfig};
use super::netns::{self, now, Topology};
use super::scenario::Scenario;

/// The emulated lines of a scenario's serial paths (`None` for UDP paths). Dropping it
/// stops them: keep it until both daemons have stopped.
pub struct SerialLines {
    lines: Vec<Option<Line>>,
}

impl SerialLines {
    /// Start a line for every serial path of `sc` (its `baud`, `byte_error_rate`,
    /// `outages`, `latency_ms`; seeded by the path's index).
    pub fn start(sc: &Scenario) -> Result<SerialLines> {
        let mut lines = Vec::with_capacity(sc.paths.len());
        for (i, p) in sc.paths.iter().enumerate() {
            if !p.is_serial() {
                lines.push(None);
                continue;
            }
            let cfg = LineConfig {
                baud: p.baud.unwrap_or(9600),
                byte_error_rate: p.byte_error_rate,
                seed: 1 + i as u64,
                outages_ms: p.outages.iter().map(|o| (o[0], o[1])).collect(),
                latency: Duration::from_secs_f64(p.latency_ms.max(0.0) / 1000.0),
            };
            let line = Line::start(cfg)
                .with_context(|| format!("starting the line of serial path {}", p.name))?;
            lines.push(Some(line));
        }
        Ok(SerialLines { lines })
    }

    /// `n` clean lines at `baud`.
    pub fn clean(n: usize, baud: u32) -> Result<SerialLines> {
        let mut lines = Vec::with_capacity(n);
        for _ in 0..n {
            lines.push(Some(
                Line::start(LineConfig::new(baud)).context("starting a line")?,
            ));
        }
        Ok(SerialLines { lines })
    }

    /// Each path's two devices (side a's, side b's), for
    /// [`Scenario::daemon_config_with`].
    pub fn devices(&self) -> Vec<Option<(PathBuf, PathBuf)>> {
        self.lines
            .iter()
            .map(|l| l.as_ref().map(Line::paths))
            .collect()
    }

    /// The lines (for their counters).
    pub fn lines(&self) -> impl Iterator<Item = &Line> {
        self.lines.iter().flatten()
    }

    /// The first relay error, if a relay stopped.
    pub fn relay_error(&self) -> Option<String> {
        self.lines().find_map(Line::relay_error)
    }
}

/// The byte at offset `i` of a transfer: not periodic, so reordering, loss or duplication
/// anywhere shows as a mismatch.
pub fn pattern(i: u64) -> u8 {
    let mut z = (i / 8).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)).to_le_bytes()[(i % 8) as usize]
}

/// What a [`tcp_transfer`] measured.
#[derive(Clone, Copy, Debug)]
pub struct Transfer {
    /// Bytes the receiver got, each checked against [`pattern`].
    pub bytes: u64,
    /// From the connection's establishment until the receiver had every byte (its
    /// one-byte answer to the sender's FIN arrived), seconds.
    pub seconds: f64,
}

/// Socket waits in [`tcp_transfer`] are cut into slices this long, so that an interrupt
/// (Ctrl-C) ends a transfer at once rather than after the row.
const SLICE: Duration = Duration::from_millis(200);

/// Retry `op` (a read or write on a socket with [`SLICE`] timeouts) until it gets through;
/// an error after `idle` without progress, on an interrupt, or on a real error.
fn patiently<T>(idle: Duration, what: &str, op: impl FnMut() -> std::io::Result<T>) -> Result<T> {
    patiently_while(idle, what, || 0, op)
}

/// [`patiently`], where a change in `progress()` also counts as progress.
fn patiently_while<T>(
    idle: Duration,
    what: &str,
    mut progress: impl FnMut() -> u64,
    mut op: impl FnMut() -> std::io::Result<T>,
) -> Result<T> {
    use std::io::ErrorKind::{Interrupted, TimedOut, WouldBlock};
    let mut end = now() + idle;
    let mut seen = progress();
    loop {
        match op() {
            Ok(v) => return Ok(v),
            Err(e) if matches!(e.kind(), WouldBlock | TimedOut | Interrupted) => {
                netns::check_interrupted()?;
                let p = progress();
                if p != seen {
                    (seen, end) = (p, now() + idle);
                }
                if now() >= end {
                    bail!("{what}: nothing for {} s", idle.as_secs());
                }
            }
            Err(e) => {
                // The other end stopped for an interrupt (a broken pipe here): say so.
                netns::check_interrupted()?;
                return Err(e).context(what.to_owned());
            }
        }
    }
}

/// One TCP connection from namespace a to `dst:port` in namespace b, sending `bytes`
/// bytes of [`pattern`] with the MSS clamped to `mss` (None: the route's), over CUBIC.
/// The receiver checks every byte. `idle` bounds every wait without progress (accept,
/// read, write, the final answer).
pub fn tcp_transfer(
    topo: &Topology,
    dst: Ipv4Addr,
    port: u16,
    bytes: u64,
    mss: Option<u32>,
    idle: Duration,
) -> Result<Transfer> {
    use socket2::{Domain, Protocol, Socket, Type};
    let addr = SocketAddr::V4(SocketAddrV4::new(dst, port));
    let rx = netns::spawn_in_netns(&topo.ns_b, move || -> Result<u64> {
        let listener = TcpListener::bind(addr).context("bind in b")?;
        listener.set_nonblocking(true)?;
        let end = now() + idle;
        let mut s = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && now() < end => {
                    netns::check_interrupted()?;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => bail!("accept: {e}"),
            }
        };
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(SLICE))?;
        let mut buf = vec![0u8; 65536];
        let mut off = 0u64;
        loop {
            let n = patiently(idle, "read in b", || s.read(&mut buf))?;
            if n == 0 {
                break;
            }
            for (k, &b) in buf.iter().take(n).enumerate() {
                if b != pattern(off + k as u64) {
                    bail!(
                        "byte {} differs: stream corrupted or out of order",
                        off + k as u64
                    );
                }
            }
            off += n as u64;
        }
        // Tell the sender everything arrived.
        let _ = s.write_all(&[1]);
        Ok(off)
    })?;
    std::thread::sleep(Duration::from_millis(100));
    let tx = netns::spawn_in_netns(&topo.ns_a, move || -> Result<f64> {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
        if let Some(m) = mss {
            s.set_tcp_mss(m).context("TCP_MAXSEG")?;
        }
        // CUBIC, as the UDP scenarios' iperf3 and a fresh Debian: not whatever this
        // machine's default is (BBR's window, from a SYN's 11 ms RTT, could not fill four
        // lines).
        s.set_tcp_congestion(b"cubic")
            .context("TCP_CONGESTION cubic")?;
        s.connect_timeout(&addr.into(), idle)
            .context("connect from a")?;
        let mut s: std::net::TcpStream = s.into();
        s.set_write_timeout(Some(SLICE))?;
        s.set_read_timeout(Some(SLICE))?;
        let t0 = now();
        let mut buf = vec![0u8; 65536];
        let mut off = 0u64;
        while off < bytes {
            let n = usize::try_from((bytes - off).min(buf.len() as u64)).unwrap_or(buf.len());
            for (k, b) in buf.iter_mut().take(n).enumerate() {
                *b = pattern(off + k as u64);
            }
            let mut rest = buf.get(..n).unwrap_or(&[]);
            while !rest.is_empty() {
                match patiently(idle, "write from a", || s.write(rest))? {
                    0 => bail!("write from a: connection closed"),
                    w => rest = rest.get(w..).unwrap_or(&[]),
                }
            }
            off += n as u64;
        }
        s.shutdown(std::net::Shutdown::Write)?;
        let mut ack = [0u8; 1];
        // The answer comes once everything sent has crossed the lines, which at 19200 bd
        // can take longer than `idle` after the last write (the socket buffer grows with
        // the window): the wait goes on while the unacknowledged bytes go down.
        let fd = std::os::fd::AsRawFd::as_raw_fd(&s);
        let unacked = || {
            let mut n: libc::c_int = 0;
            // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int to `n`; `fd` is our open socket.
            #[allow(unsafe_code)]
            let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
            if rc == 0 {
                u64::try_from(n).unwrap_or(0)
            } else {
                0
            }
        };
        if patiently_while(idle, "waiting for the receiver's answer", unacked, || {
            s.read(&mut ack)
        })? == 0
        {
            bail!("the receiver closed without its answer");
        }
        Ok((now() - t0).as_secs_f64())
    })?;
    let seconds = tx
        .join()
        .map_err(|_| anyhow::anyhow!("sender panicked"))??;
    let got = rx
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    if got != bytes {
        bail!("sent {bytes} bytes, the receiver got {got}");
    }
    Ok(Transfer {
        bytes: got,
        seconds,
    })
}

/// `ping -c count -i interval -s size dst` in namespace `ns`: (replies, average RTT ms).
pub fn ping(
    ns: &str,
    dst: Ipv4Addr,
    count: u32,
    interval: Duration,
    size: u32,
) -> Result<(u32, Option<f64>)> {
    let wait = Duration::from_secs_f64(interval.as_secs_f64() * f64::from(count) + 10.0);
    let out = netns::run_timeout(
        netns::ns_command(ns, "ping").args([
            "-n",
            "-q",
            "-c",
            &count.to_string(),
            "-i",
            &format!("{:.3}", interval.as_secs_f64()),
            "-s",
            &size.to_string(),
            "-W",
            "5",
            &dst.to_string(),
        ]),
        wait,
    )?;
    Ok(parse_ping(&out.stdout))
}

/// Replies and average RTT from `ping -q`'s summary.
pub fn parse_ping(text: &str) -> (u32, Option<f64>) {
    let replies = text
        .lines()
        .find(|l| l.contains("received"))
        .and_then(|l| l.split(',').nth(1))
        .and_then(|f| f.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let avg = text
        .lines()
        .find(|l| l.starts_with("rtt") || l.starts_with("round-trip"))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|v| v.trim().split('/').nth(1))
        .and_then(|a| a.parse().ok());
    (replies, avg)
}

/// True when the `ping` program is there.
pub fn have_ping() -> bool {
    netns::which("ping").is_some() || Command::new("ping").arg("-V").output().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_summary_parses() {
        let text = "PING 10.200.0.2 (10.200.0.2) 56(84) bytes of data.\n\n--- 10.200.0.2 ping statistics ---\n10 packets transmitted, 9 received, 10% packet loss, time 1804ms\nrtt min/avg/max/mdev = 16.894/17.702/18.911/0.520 ms\n";
        assert_eq!(parse_ping(text), (9, Some(17.702)));
        assert_eq!(parse_ping("garbage"), (0, None));
    }

    #[test]
    fn pattern_is_not_periodic_in_small_steps() {
        let a: Vec<u8> = (0..64).map(pattern).collect();
        let b: Vec<u8> = (64..128).map(pattern).collect();
        assert_ne!(a, b);
    }
}
