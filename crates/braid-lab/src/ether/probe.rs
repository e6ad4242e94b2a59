//! Failover gaps: a UDP stream of numbered datagrams at a fixed interval (1 ms in the
//! lab) from one namespace to another, received with the kernel's receive timestamps
//! (`SO_TIMESTAMPNS`, as [`crate::udpgen`] does), and the longest silence around a cut.
//! The cut's moment is taken on the same clock (CLOCK_REALTIME) just before the command
//! that cuts, so the gap is measured from the datagrams alone, not from a sampled status.
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::capture::realtime_ns;
use crate::netns::{interrupted, now, spawn_in_netns};
use crate::udpgen::{arrival_stamps, recv_stamped};

/// Bytes of a probe datagram's payload: sequence number (8) and padding.
const PAYLOAD: usize = 64;

/// A stream being sent and received.
pub struct Stream {
    sender: JoinHandle<Result<u64>>,
    receiver: JoinHandle<Result<Vec<(u64, i128)>>>,
    /// The interval between datagrams.
    pub interval: Duration,
}

/// Start a stream from `src` (an address of `src_ns`) to `dst` (in `dst_ns`): one
/// datagram every `interval` for `secs` seconds, starting 300 ms from now (the receiver
/// binds first). The receiver stops 1 s after the sender.
pub fn start(
    src_ns: &str,
    src: Ipv4Addr,
    dst_ns: &str,
    dst: SocketAddrV4,
    interval: Duration,
    secs: f64,
) -> Result<Stream> {
    let begin = now() + Duration::from_millis(300);
    let until = begin + Duration::from_secs_f64(secs + 1.0);
    let receiver = spawn_in_netns(dst_ns, move || receive(dst, until))?;
    let sender = spawn_in_netns(src_ns, move || send(src, dst, begin, interval, secs))?;
    Ok(Stream {
        sender,
        receiver,
        interval,
    })
}

impl Stream {
    /// Wait for both ends; what was sent and what arrived when.
    pub fn finish(self) -> Result<Arrivals> {
        let sent = self
            .sender
            .join()
            .map_err(|_| anyhow::anyhow!("probe sender panicked"))??;
        let got = self
            .receiver
            .join()
            .map_err(|_| anyhow::anyhow!("probe receiver panicked"))??;
        Ok(Arrivals {
            sent,
            got,
            interval: self.interval,
        })
    }
}

fn send(
    src: Ipv4Addr,
    dst: SocketAddrV4,
    begin: Instant,
    interval: Duration,
    secs: f64,
) -> Result<u64> {
    let sock = UdpSocket::bind(SocketAddrV4::new(src, 0))
        .with_context(|| format!("binding a UDP socket to {src}"))?;
    sock.connect(dst)
        .with_context(|| format!("connecting to {dst}"))?;
    let mut buf = [0u8; PAYLOAD];
    let count = (secs / interval.as_secs_f64()).floor() as u64;
    let mut sent = 0;
    for seq in 0..count {
        if interrupted() {
            break;
        }
        let due = begin + interval.mul_f64(seq as f64);
        if let Some(wait) = due.checked_duration_since(now()) {
            std::thread::sleep(wait);
        }
        buf[..8].copy_from_slice(&seq.to_be_bytes());
        // A send error (no route while a member is down, a full queue) is a lost datagram.
        let _ = sock.send(&buf);
        sent += 1;
    }
    Ok(sent)
}

fn receive(bind: SocketAddrV4, until: Instant) -> Result<Vec<(u64, i128)>> {
    let sock = UdpSocket::bind(bind).with_context(|| format!("binding {bind}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let stamps = arrival_stamps(&sock);
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while now() < until && !interrupted() {
        match recv_stamped(&sock, &mut buf, stamps) {
            Ok((n, at)) if n >= 8 => {
                let mut seq = [0u8; 8];
                seq.copy_from_slice(&buf[..8]);
                got.push((u64::from_be_bytes(seq), at.unwrap_or_else(realtime_ns)));
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e).context("receiving probes"),
        }
    }
    Ok(got)
}

/// What a stream delivered: (sequence number, arrival in ns of CLOCK_REALTIME).
#[derive(Clone, Debug, Default)]
pub struct Arrivals {
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams received, in arrival order.
    pub got: Vec<(u64, i128)>,
    /// The sending interval.
    pub interval: Duration,
}

/// The stream's longest silence in a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Gap {
    /// The longest time between two consecutive arrivals that span a moment of the
    /// window, ms (one interval when nothing was lost).
    pub gap_ms: f64,
    /// Where that silence started, ms after the window's start (negative: before it).
    pub at_ms: f64,
    /// Datagrams lost (sent, never received) whose neighbours arrived in the window.
    pub lost: u64,
    /// Datagrams received after the window's start: 0 means the stream never came back.
    pub after: u64,
}

impl Arrivals {
    /// The longest silence in `[from_ns, to_ns]` (CLOCK_REALTIME): the largest
    /// difference between consecutive arrivals where the later one comes after `from_ns`
    /// and the earlier one before `to_ns`; a stream that never resumed counts to `to_ns`.
    pub fn gap(&self, from_ns: i128, to_ns: i128) -> Gap {
        let mut g = Gap::default();
        let mut prev: Option<(u64, i128)> = None;
        for &(seq, at) in &self.got {
            if at >= from_ns {
                g.after += 1;
            }
            if let Some((pseq, pat)) = prev {
                if at >= from_ns && pat <= to_ns {
                    let d = (at - pat) as f64 / 1e6;
                    if d > g.gap_ms {
                        g.gap_ms = d;
                        g.at_ms = (pat - from_ns) as f64 / 1e6;
                    }
                    g.lost += seq.saturating_sub(pseq + 1);
                }
            }
            prev = Some((seq, at));
        }
        if let Some((_, last)) = prev {
            if last < to_ns {
                let d = (to_ns - last.max(from_ns)) as f64 / 1e6;
                if d > g.gap_ms {
                    g.gap_ms = d;
                    g.at_ms = (last - from_ns) as f64 / 1e6;
                }
            }
        }
        g
    }

    /// Datagrams never received (each sequence number counted once).
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.unique())
    }

    /// Datagrams received more than once.
    pub fn duplicates(&self) -> u64 {
        (self.got.len() as u64).saturating_sub(self.unique())
    }

    fn unique(&self) -> u64 {
        let mut seqs: Vec<u64> = self.got.iter().map(|g| g.0).collect();
        seqs.sort_unstable();
        seqs.dedup();
        seqs.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrivals(seqs: &[(u64, i128)]) -> Arrivals {
        Arrivals {
            sent: 100,
            got: seqs.iter().map(|&(s, ms)| (s, ms * 1_000_000)).collect(),
            interval: Duration::from_millis(1),
        }
    }

    #[test]
    fn gap_around_a_cut() {
        // 1 ms apart, 0..=9, then 10..=39 lost, then 40.. arrive 31 ms late.
        let mut v: Vec<(u64, i128)> = (0..10).map(|s| (s, s as i128)).collect();
        v.extend((40..50).map(|s| (s, s as i128)));
        let a = arrivals(&v);
        let g = a.gap(8_000_000, 45_000_000);
        assert_eq!(g.gap_ms, 31.0);
        assert_eq!(g.at_ms, 1.0);
        assert_eq!(g.lost, 30);
        assert_eq!(g.after, 12);
        // A window after the gap sees only 1 ms spacing.
        assert_eq!(a.gap(41_000_000, 45_000_000).gap_ms, 1.0);
        assert_eq!(a.lost(), 80);
        let mut dup = a.clone();
        dup.got.push((5, 60_000_000));
        assert_eq!((dup.lost(), dup.duplicates()), (80, 1));
    }

    #[test]
    fn a_stream_that_never_returns_counts_to_the_end() {
        let v: Vec<(u64, i128)> = (0..10).map(|s| (s, s as i128)).collect();
        let g = arrivals(&v).gap(5_000_000, 1_000_000_000);
        assert_eq!(g.gap_ms, 991.0);
        assert_eq!(g.after, 5);
        assert_eq!(arrivals(&[]).gap(0, 10).gap_ms, 0.0);
    }

    #[test]
    fn loopback_stream_arrives_in_order() {
        // A real stream over loopback in this namespace: 200 datagrams at 1 ms.
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = rx.local_addr().unwrap().port();
        drop(rx);
        let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        let until = now() + Duration::from_millis(800);
        let r = std::thread::spawn(move || receive(dst, until));
        std::thread::sleep(Duration::from_millis(50));
        let sent = send(
            Ipv4Addr::LOCALHOST,
            dst,
            now(),
            Duration::from_millis(1),
            0.2,
        )
        .unwrap();
        let got = r.join().unwrap().unwrap();
        assert_eq!(sent, 200);
        assert_eq!(got.len(), 200);
        assert!(got
            .windows(2)
            .all(|w| w[0].0 + 1 == w[1].0 && w[0].1 <= w[1].1));
    }
}
