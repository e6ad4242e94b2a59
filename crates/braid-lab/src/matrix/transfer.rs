//! A TCP transfer through the bond, checked byte for byte: namespace a sends a seeded
//! pseudo-random stream of a given length to namespace b, which compares every byte with
//! the stream it expects and reports the first one that differs. Progress is shared
//! (bytes verified, time of the last progress), so the caller can see a stall, and
//! [`Transfer::abort`] ends both sides at once (by shutting their sockets down).
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::case::mix;
use crate::netns::{self, now, Topology};

/// Side b's bond address (the transfer's destination).
pub const BOND_B: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);

/// Byte `i` of stream `seed`: SplitMix64 of the 8-byte word's index, so the stream is not
/// periodic and a lost, repeated or reordered chunk anywhere shows as a mismatch.
pub fn stream_byte(seed: u64, i: u64) -> u8 {
    mix(seed ^ (i / 8).wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_le_bytes()[(i % 8) as usize]
}

/// Fill `buf` with the stream of `seed` from offset `off`.
pub fn fill(seed: u64, off: u64, buf: &mut [u8]) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = stream_byte(seed, off + k as u64);
    }
}

/// The offset of the first byte of `got` (starting at stream offset `off`) that differs
/// from stream `seed`, if any.
pub fn first_mismatch(seed: u64, off: u64, got: &[u8]) -> Option<u64> {
    got.iter()
        .enumerate()
        .find(|(k, &b)| b != stream_byte(seed, off + *k as u64))
        .map(|(k, _)| off + k as u64)
}

/// How a transfer ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every byte arrived, in order, and the receiver saw the end.
    Complete,
    /// The received stream differs from the sent one at this offset (never acceptable).
    Corrupt(u64),
    /// The connection failed (reset, timeout, could not connect) after `verified` bytes.
    Died(String),
}

/// What both ends share while the transfer runs.
#[derive(Debug, Default)]
struct Shared {
    /// Bytes received and verified.
    verified: AtomicU64,
    /// Milliseconds since the start at the last progress (connect, or bytes verified).
    last_progress_ms: AtomicU64,
    aborted: AtomicBool,
    /// The receiver accepted the connection.
    connected: AtomicBool,
    /// The sender ends the stream at its next chunk (a transfer run for a time).
    stop_sending: AtomicBool,
    /// Clones of the sockets, to shut them down on abort.
    sockets: Mutex<Vec<TcpStream>>,
}

/// A running transfer.
pub struct Transfer {
    /// Bytes it sends.
    pub size: u64,
    started: Instant,
    shared: Arc<Shared>,
    tx: Option<JoinHandle<Result<u64>>>,
    rx: Option<JoinHandle<Result<u64>>>,
}

impl Transfer {
    /// Start sending `size` bytes of stream `seed` from a to b's port `port`; the sender
    /// keeps trying to connect for `connect_within`.
    pub fn start(
        topo: &Topology,
        port: u16,
        seed: u64,
        size: u64,
        connect_within: Duration,
    ) -> Result<Self> {
        let shared = Arc::new(Shared::default());
        let started = now();
        let addr = SocketAddr::V4(SocketAddrV4::new(BOND_B, port));
        let bind = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
        let (sh, wait) = (Arc::clone(&shared), connect_within + Duration::from_secs(2));
        let rx = netns::spawn_in_netns(&topo.ns_b, move || {
            receive(bind, seed, size, &sh, started, wait)
        })?;
        // The listener is bound before the sender's first try.
        std::thread::sleep(Duration::from_millis(50));
        let sh = Arc::clone(&shared);
        let tx = netns::spawn_in_netns(&topo.ns_a, move || {
            send(addr, seed, size, &sh, connect_within)
        })?;
        Ok(Self {
            size,
            started,
            shared,
            tx: Some(tx),
            rx: Some(rx),
        })
    }

    /// Bytes verified so far.
    pub fn verified(&self) -> u64 {
        self.shared.verified.load(Ordering::Relaxed)
    }

    /// True once the connection was made.
    pub fn connected(&self) -> bool {
        self.shared.connected.load(Ordering::SeqCst)
    }

    /// Time since the last progress.
    pub fn idle(&self) -> Duration {
        let last = self.shared.last_progress_ms.load(Ordering::Relaxed);
        now()
            .duration_since(self.started)
            .saturating_sub(Duration::from_millis(last))
    }

    /// True when both ends have finished (either way).
    pub fn finished(&self) -> bool {
        self.tx.as_ref().is_none_or(JoinHandle::is_finished)
            && self.rx.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// True once the receiver has finished (it ends the transfer: EOF, mismatch, error).
    pub fn receiver_finished(&self) -> bool {
        self.rx.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Make the sender end the stream cleanly at its next chunk: the transfer then
    /// completes with what was sent so far (for transfers that run for a time).
    pub fn stop_sending(&self) {
        self.shared.stop_sending.store(true, Ordering::SeqCst);
    }

    /// End both sides now.
    pub fn abort(&self) {
        self.shared.aborted.store(true, Ordering::SeqCst);
        if let Ok(socks) = self.shared.sockets.lock() {
            for s in socks.iter() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }

    /// Wait for both threads (bounded by their own timeouts) and say how it ended.
    pub fn finish(mut self) -> Outcome {
        let join = |h: Option<JoinHandle<Result<u64>>>| -> Result<u64> {
            h.ok_or_else(|| anyhow!("no thread"))?
                .join()
                .map_err(|_| anyhow!("thread panicked"))?
        };
        let got = join(self.rx.take());
        if let Some(tx) = &self.tx {
            if !tx.is_finished() {
                self.abort();
            }
        }
        let sent = join(self.tx.take());
        match got {
            Err(e) => match e.downcast_ref::<Mismatch>() {
                Some(m) => Outcome::Corrupt(m.0),
                None => Outcome::Died(format!(
                    "after {} of {} bytes: {e:#}",
                    self.verified(),
                    self.size
                )),
            },
            Ok(n) if n == self.size || self.stopped(&sent, n) => match sent {
                Ok(_) => Outcome::Complete,
                // The receiver has it all; the sender's wait for the close is not part
                // of the check.
                Err(_) => Outcome::Complete,
            },
            Ok(n) => Outcome::Died(format!(
                "the stream ended after {n} of {} bytes (sender: {})",
                self.size,
                match sent {
                    Ok(s) => format!("sent {s}"),
                    Err(e) => format!("{e:#}"),
                }
            )),
        }
    }
}

impl Transfer {
    /// True when the sender was told to stop and sent exactly what arrived.
    fn stopped(&self, sent: &Result<u64>, got: u64) -> bool {
        self.shared.stop_sending.load(Ordering::SeqCst) && sent.as_ref().is_ok_and(|&s| s == got)
    }
}

impl Drop for Transfer {
    fn drop(&mut self) {
        self.abort();
    }
}

/// The receiver saw a byte that is not the stream's.
#[derive(Debug)]
struct Mismatch(u64);

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "byte {} differs from the stream sent", self.0)
    }
}

impl std::error::Error for Mismatch {}

fn progress(sh: &Shared, started: Instant) {
    let ms = u64::try_from(now().duration_since(started).as_millis()).unwrap_or(u64::MAX);
    sh.last_progress_ms.store(ms, Ordering::Relaxed);
}

fn keep(sh: &Shared, s: &TcpStream) {
    if let (Ok(c), Ok(mut v)) = (s.try_clone(), sh.sockets.lock()) {
        v.push(c);
    }
}

fn receive(
    bind: SocketAddr,
    seed: u64,
    size: u64,
    sh: &Shared,
    started: Instant,
    wait: Duration,
) -> Result<u64> {
    let listener = TcpListener::bind(bind).with_context(|| format!("binding {bind} in b"))?;
    listener.set_nonblocking(true)?;
    let end = now() + wait;
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if now() >= end || sh.aborted.load(Ordering::SeqCst) {
                    bail!("no connection arrived within {wait:?}");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => bail!("accept: {e}"),
        }
    };
    drop(listener);
    sh.connected.store(true, Ordering::SeqCst);
    keep(sh, &s);
    progress(sh, started);
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    let mut buf = vec![0u8; 65536];
    let mut off = 0u64;
    loop {
        if sh.aborted.load(Ordering::SeqCst) {
            bail!("aborted");
        }
        let n = match s.read(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => return Err(e).context("reading in b"),
        };
        if n == 0 {
            // Closing tells the sender everything arrived.
            let _ = s.shutdown(Shutdown::Both);
            return Ok(off);
        }
        if let Some(at) = first_mismatch(seed, off, &buf[..n]) {
            return Err(Mismatch(at).into());
        }
        if off + n as u64 > size {
            return Err(Mismatch(size).into());
        }
        off += n as u64;
        sh.verified.store(off, Ordering::Relaxed);
        progress(sh, started);
    }
}

fn send(
    addr: SocketAddr,
    seed: u64,
    size: u64,
    sh: &Shared,
    connect_within: Duration,
) -> Result<u64> {
    let end = now() + connect_within;
    let mut s = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => break s,
            Err(e) => {
                if now() >= end || sh.aborted.load(Ordering::SeqCst) {
                    return Err(e).context(format!(
                        "connecting to {addr} (tried for {connect_within:?})"
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    keep(sh, &s);
    s.set_write_timeout(Some(Duration::from_millis(500)))?;
    let mut buf = vec![0u8; 65536];
    let mut off = 0u64;
    while off < size && !sh.stop_sending.load(Ordering::SeqCst) {
        let n = (size - off).min(buf.len() as u64) as usize;
        fill(seed, off, &mut buf[..n]);
        let mut done = 0;
        while done < n {
            if sh.aborted.load(Ordering::SeqCst) {
                bail!("aborted");
            }
            match s.write(&buf[done..n]) {
                Ok(0) => bail!("the connection closed while sending"),
                Ok(k) => done += k,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("writing in a"),
            }
        }
        off += n as u64;
    }
    s.shutdown(Shutdown::Write)?;
    // Wait for the receiver's close: then every byte has been read.
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    loop {
        if sh.aborted.load(Ordering::SeqCst) {
            bail!("aborted");
        }
        match s.read(&mut [0u8; 1]) {
            Ok(_) => return Ok(off),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e).context("waiting for b to close"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_is_seeded_and_mismatches_are_found() {
        let mut a = vec![0u8; 1000];
        fill(5, 100, &mut a);
        assert_eq!(first_mismatch(5, 100, &a), None);
        assert!(first_mismatch(6, 100, &a).is_some(), "another seed differs");
        // A chunk delivered twice or skipped shows.
        assert_eq!(first_mismatch(5, 108, &a), Some(108));
        let mut b = a.clone();
        b[517] ^= 1;
        assert_eq!(first_mismatch(5, 100, &b), Some(617));
        // Not periodic over 8-byte words.
        assert_ne!(a[..8], a[8..16]);
    }
}
