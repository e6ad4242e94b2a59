//! A serial line emulator for the lab: two pseudo-terminals joined by a relay thread that
//! carries bytes both ways at the configured baud rate with 8N1 framing (10 bits per byte
//! on the wire), optionally flipping a random bit of some bytes (seeded, deterministic),
//! dropping bytes during an outage schedule, and adding a one-way latency.
//!
//! ```text
//!  daemon A ── /dev/pts/N (slave) ═ master ─┐ relay thread ┌─ master ═ /dev/pts/M (slave) ── daemon B
//! ```
//!
//! The wire model: each direction has a transmitter. A byte the sender has written starts
//! when the transmitter is free (at once if it was idle) and arrives at the far end when
//! its last bit does, `10 / baud` s later, plus the latency. Time is kept in whole bit
//! times since [`Line::start`], so the rate is exact over any interval; bytes are handed
//! over in batches every millisecond or so. An idle line banks no credit.
//!
//! Ptys have no UART: the daemon's writes go straight into the pty's buffers (about 20 KB
//! before a write blocks), and TIOCOUTQ on the slave is always 0. A daemon that wants its
//! queue to stay in braid must pace its writes by its own clock, as on a real line.
//!
//! The emulator holds both slaves open itself (raw 8N1), so a daemon can close and reopen
//! its end without the relay seeing a hang-up. Bytes arriving at an end nobody reads pile
//! up in the pty, then in the relay (64 KiB), then are lost (counted as overrun), as a
//! UART's receiver would lose them.
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use braid::sys::poll;
use braid::sys::tty::{self, Tty};

/// How an emulated line behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct LineConfig {
    /// Bits per second on the wire; a byte takes 10 bit times (8N1). Any rate from 50 bd
    /// up to 10 Mbd (the pty's own termios speed is cosmetic).
    pub baud: u32,
    /// Probability that a byte arrives with one random bit flipped (0 = never).
    pub byte_error_rate: f64,
    /// Seed of the error generator: the same seed corrupts the same byte positions.
    pub seed: u64,
    /// Outages as `(start_ms, len_ms)` after [`Line::start`]: bytes whose last bit would
    /// arrive inside one are lost (they still take their time on the wire). Both ways.
    pub outages_ms: Vec<(u64, u64)>,
    /// One-way latency added to every byte.
    pub latency: Duration,
}

impl LineConfig {
    /// A clean line at `baud`: no errors, no outages, no latency.
    pub fn new(baud: u32) -> LineConfig {
        LineConfig {
            baud,
            byte_error_rate: 0.0,
            seed: 1,
            outages_ms: Vec::new(),
            latency: Duration::ZERO,
        }
    }

    fn validate(&self) -> io::Result<()> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        if !(50..=10_000_000).contains(&self.baud) {
            return bad(format!(
                "line baud {} out of range (50..10000000)",
                self.baud
            ));
        }
        if !(0.0..=1.0).contains(&self.byte_error_rate) {
            return bad(format!(
                "line byte_error_rate {} is not a probability",
                self.byte_error_rate
            ));
        }
        Ok(())
    }
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirStats {
    /// Bytes that went over the wire (took their line time), lost ones included.
    pub sent: u64,
    /// Bytes handed to the far end (corrupted ones included).
    pub relayed: u64,
    /// Bytes delivered with a bit flipped.
    pub corrupted: u64,
    /// Bytes lost in an outage.
    pub dropped: u64,
    /// Bytes lost because the far end was not reading and the buffers were full.
    pub overrun: u64,
}

/// Counters of both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineStats {
    /// From the first path's slave to the second's.
    pub a_to_b: DirStats,
    /// From the second path's slave to the first's.
    pub b_to_a: DirStats,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    relayed: AtomicU64,
    corrupted: AtomicU64,
    dropped: AtomicU64,
    overrun: AtomicU64,
}

impl Counters {
    fn publish(&self, s: &DirStats) {
        self.sent.store(s.sent, Ordering::Relaxed);
        self.relayed.store(s.relayed, Ordering::Relaxed);
        self.corrupted.store(s.corrupted, Ordering::Relaxed);
        self.dropped.store(s.dropped, Ordering::Relaxed);
        self.overrun.store(s.overrun, Ordering::Relaxed);
    }

    fn get(&self) -> DirStats {
        DirStats {
            sent: self.sent.load(Ordering::Relaxed),
            relayed: self.relayed.load(Ordering::Relaxed),
            corrupted: self.corrupted.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            overrun: self.overrun.load(Ordering::Relaxed),
        }
    }
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    dirs: [Counters; 2],
    error: Mutex<Option<String>>,
}

/// A running emulated line. Dropping it stops the relay and closes the ptys.
pub struct Line {
    cfg: LineConfig,
    paths: (PathBuf, PathBuf),
    started: Instant,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    // Held open so the masters never see a hang-up; dropped after the relay stops.
    _slaves: (Tty, Tty),
}

impl std::fmt::Debug for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Line")
            .field("cfg", &self.cfg)
            .field("paths", &self.paths)
            .finish()
    }
}

impl Line {
    /// Create the two ptys and start the relay. The outage schedule counts from here.
    pub fn start(cfg: LineConfig) -> io::Result<Line> {
        cfg.validate()?;
        let (master_a, slave_a) = tty::open_pty(cfg.baud)?;
        let (master_b, slave_b) = tty::open_pty(cfg.baud)?;
        let paths = (slave_a.path().to_owned(), slave_b.path().to_owned());
        let shared = Arc::new(Shared::default());
        let started = clock();
        let relay = Relay {
            masters: [master_a, master_b],
            wires: [Wire::new(&cfg, 0), Wire::new(&cfg, 1)],
            out: [Vec::new(), Vec::new()],
            dead: [false, false],
            started,
            shared: Arc::clone(&shared),
        };
        let thread = std::thread::Builder::new()
            .name("braid-line".into())
            .spawn(move || relay.run())?;
        Ok(Line {
            cfg,
            paths,
            started,
            shared,
            thread: Some(thread),
            _slaves: (slave_a, slave_b),
        })
    }

    /// The two slave ttys (`/dev/pts/N`): give one to each daemon as `device = ...`.
    pub fn paths(&self) -> (PathBuf, PathBuf) {
        self.paths.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &LineConfig {
        &self.cfg
    }

    /// When the line started (the origin of the outage schedule).
    pub fn started_at(&self) -> Instant {
        self.started
    }

    /// The counters so far.
    pub fn stats(&self) -> LineStats {
        LineStats {
            a_to_b: self.shared.dirs[0].get(),
            b_to_a: self.shared.dirs[1].get(),
        }
    }

    /// The error that stopped the relay, if one did.
    pub fn relay_error(&self) -> Option<String> {
        self.shared.error.lock().ok().and_then(|e| e.clone())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The relay's clock (the lab measures real time).
#[expect(
    clippy::disallowed_methods,
    reason = "the line emulator runs in real time"
)]
fn clock() -> Instant {
    Instant::now()
}

/// Bytes read from a master and not yet on the wire, at most (the rest waits in the pty).
const PENDING_MAX: usize = 4096;
/// Bytes due at a master that it has not taken yet, at most; beyond that they are overrun.
const OUT_MAX: usize = 64 * 1024;
/// The relay wakes at most this often while bytes are in transit.
const TICK: Duration = Duration::from_millis(1);
/// The relay wakes at least this often (to notice the stop flag).
const IDLE_WAIT: Duration = Duration::from_millis(25);
const NS: u128 = 1_000_000_000;

/// One direction of the line, without I/O: bytes offered by the sender, the transmitter's
/// clock, the errors and outages, the bytes in flight (latency).
#[derive(Debug)]
struct Wire {
    baud: u64,
    error_rate: f64,
    latency_ns: u64,
    /// Outages as `[start, end)` in ns since start.
    outages: Vec<(u64, u64)>,
    rng: XorShift,
    pending: VecDeque<u8>,
    /// The bit time (since start) at which the transmitter is free.
    bit_clock: u64,
    /// (arrival ns, byte)
    in_flight: VecDeque<(u64, u8)>,
    stats: DirStats,
}

impl Wire {
    fn new(cfg: &LineConfig, dir: u64) -> Wire {
        Wire {
            baud: u64::from(cfg.baud.max(1)),
            error_rate: cfg.byte_error_rate,
            latency_ns: u64::try_from(cfg.latency.as_nanos()).unwrap_or(u64::MAX / 4),
            outages: cfg
                .outages_ms
                .iter()
                .map(|&(s, l)| {
                    let s = s.saturating_mul(1_000_000);
                    (s, s.saturating_add(l.saturating_mul(1_000_000)))
                })
                .collect(),
            rng: XorShift::new(cfg.seed ^ dir.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            pending: VecDeque::new(),
            bit_clock: 0,
            in_flight: VecDeque::new(),
            stats: DirStats::default(),
        }
    }

    fn bits_at(&self, ns: u64) -> u64 {
        u64::try_from(u128::from(ns) * u128::from(self.baud) / NS).unwrap_or(u64::MAX)
    }

    /// The first ns at which bit time `bits` has passed.
    fn ns_at(&self, bits: u64) -> u64 {
        let b = u128::from(self.baud);
        u64::try_from((u128::from(bits) * NS).div_ceil(b)).unwrap_or(u64::MAX)
    }

    fn room(&self) -> usize {
        PENDING_MAX.saturating_sub(self.pending.len())
    }

    /// The sender wrote `bytes` (by `now` ns). An idle transmitter starts at `now`.
    fn offer(&mut self, now: u64, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.pending.is_empty() {
            self.bit_clock = self.bit_clock.max(self.bits_at(now));
        }
        self.pending.extend(bytes);
    }

    /// Put on the wire every byte whose last bit has gone out by `now`.
    fn transmit(&mut self, now: u64) {
        let now_bits = self.bits_at(now);
        while self.bit_clock.saturating_add(10) <= now_bits {
            let Some(mut byte) = self.pending.pop_front() else {
                break;
            };
            self.bit_clock += 10;
            self.stats.sent += 1;
            let done = self.ns_at(self.bit_clock);
            // One draw per byte whatever happens to it: the error pattern depends only on
            // the byte's position in the stream.
            let r = self.rng.next();
            if self.outages.iter().any(|&(s, e)| s <= done && done < e) {
                self.stats.dropped += 1;
                continue;
            }
            if self.error_rate > 0.0 && unit(r) < self.error_rate {
                byte ^= 1 << (r & 7);
                self.stats.corrupted += 1;
            }
            self.in_flight
                .push_back((done.saturating_add(self.latency_ns), byte));
        }
    }

    /// Move the bytes that have arrived by `now` to `out`; those that would make it longer
    /// than `cap` are overrun.
    fn deliver(&mut self, now: u64, out: &mut Vec<u8>, cap: usize) {
        while let Some(&(at, byte)) = self.in_flight.front() {
            if at > now {
                break;
            }
            self.in_flight.pop_front();
            if out.len() < cap {
                out.push(byte);
            } else {
                self.stats.overrun += 1;
            }
        }
    }

    /// When something next happens on this wire (a byte finishes or arrives), if anything.
    fn next_event(&self) -> Option<u64> {
        let tx = (!self.pending.is_empty()).then(|| self.ns_at(self.bit_clock + 10));
        let rx = self.in_flight.front().map(|&(at, _)| at);
        match (tx, rx) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `r`'s top 53 bits as a number in [0, 1).
fn unit(r: u64) -> f64 {
    (r >> 11) as f64 / (1u64 << 53) as f64
}

/// xorshift64*: small, fast, deterministic; plenty for line noise.
#[derive(Debug, Clone)]
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        // splitmix64 of the seed, so that 0 and nearby seeds are fine.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        XorShift(if z == 0 { 1 } else { z })
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The relay thread's state: wire 0 carries master 0's input to master 1, wire 1 the other
/// way.
struct Relay {
    masters: [File; 2],
    wires: [Wire; 2],
    /// Bytes due at master `i` not yet written to it.
    out: [Vec<u8>; 2],
    /// A master that failed (should not happen while the slaves are held open).
    dead: [bool; 2],
    started: Instant,
    shared: Arc<Shared>,
}

impl Relay {
    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn fail(&mut self, i: usize, what: &str, e: io::Error) {
        self.dead[i] = true;
        if let Ok(mut err) = self.shared.error.lock() {
            err.get_or_insert_with(|| format!("line relay: {what} master {i}: {e}"));
        }
    }

    fn run(mut self) {
        let mut buf = vec![0u8; PENDING_MAX];
        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = self.now();
            for i in 0..2 {
                self.read_master(i, now, &mut buf);
            }
            for i in 0..2 {
                self.wires[i].transmit(now);
                // wire i delivers to the other master
                self.wires[i].deliver(now, &mut self.out[1 - i], OUT_MAX);
            }
            for i in 0..2 {
                self.write_master(i);
            }
            for i in 0..2 {
                self.shared.dirs[i].publish(&self.wires[i].stats);
            }
            let timeout = self.timeout(self.now());
            let mut fds = [0, 1].map(|i| {
                let fd = if self.dead[i] || self.wires[i].room() == 0 {
                    -1
                } else {
                    self.masters[i].as_raw_fd()
                };
                poll::readable(fd)
            });
            if let Err(e) = poll::wait(&mut fds, Some(timeout)) {
                if let Ok(mut err) = self.shared.error.lock() {
                    err.get_or_insert_with(|| format!("line relay: poll: {e}"));
                }
                return;
            }
        }
    }

    /// Read what master `i` has (bounded by the wire's room) and offer it to wire `i`.
    fn read_master(&mut self, i: usize, now: u64, buf: &mut [u8]) {
        if self.dead[i] {
            return;
        }
        let room = self.wires[i].room().min(buf.len());
        if room == 0 {
            return;
        }
        let Some(chunk) = buf.get_mut(..room) else {
            return;
        };
        match self.masters[i].read(chunk) {
            Ok(0) => self.fail(i, "read", io::Error::other("hung up")),
            Ok(n) => {
                if let Some(got) = chunk.get(..n) {
                    self.wires[i].offer(now, got);
                }
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => self.fail(i, "read", e),
        }
    }

    /// Write what is due at master `i` (what it takes; the rest waits for the next tick).
    fn write_master(&mut self, i: usize) {
        if self.out[i].is_empty() {
            return;
        }
        // wire (1 - i) delivers to master i
        let dir = 1 - i;
        if self.dead[i] {
            self.wires[dir].stats.overrun += self.out[i].len() as u64;
            self.out[i].clear();
            return;
        }
        let mut written = 0;
        while written < self.out[i].len() {
            let Some(rest) = self.out[i].get(written..) else {
                break;
            };
            match self.masters[i].write(rest) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    self.fail(i, "write", e);
                    break;
                }
            }
        }
        self.wires[dir].stats.relayed += written as u64;
        self.out[i].drain(..written);
    }

    /// How long to sleep: until the next byte is due, but at least [`TICK`] (bytes are
    /// handed over in batches) and at most [`IDLE_WAIT`]; a tick while a master is not
    /// taking what is due.
    fn timeout(&self, now: u64) -> Duration {
        let mut next: Option<u64> = None;
        for w in &self.wires {
            if let Some(t) = w.next_event() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        let mut wait = next.map_or(IDLE_WAIT, |t| Duration::from_nanos(t.saturating_sub(now)));
        if self.out.iter().any(|o| !o.is_empty()) {
            wait = TICK;
        }
        wait.clamp(TICK, IDLE_WAIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn wire(cfg: &LineConfig) -> Wire {
        Wire::new(cfg, 0)
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 256) as u8).collect()
    }

    /// Offer `data` at `t0`, step every `step` ns until `t1`, return what arrived.
    fn run(w: &mut Wire, data: &[u8], t0: u64, step: u64, t1: u64) -> Vec<u8> {
        w.offer(t0, data);
        let mut out = Vec::new();
        let mut t = t0;
        while t < t1 {
            t = (t + step).min(t1);
            w.transmit(t);
            w.deliver(t, &mut out, usize::MAX);
        }
        out
    }

    #[test]
    fn a_second_carries_baud_over_ten_bytes_exactly() {
        for (baud, step) in [
            (2400, MS),
            (9600, 3 * MS),
            (115_200, 7 * MS + 13),
            (1_000_000, MS),
        ] {
            let mut w = wire(&LineConfig::new(baud));
            let data = pattern(200_000);
            let out = run(&mut w, &data, 0, step, SEC);
            assert_eq!(out.len() as u64, u64::from(baud) / 10, "{baud} bd");
            assert_eq!(out[..], data[..out.len()]);
            assert_eq!(w.stats.sent, u64::from(baud) / 10);
        }
    }

    #[test]
    fn a_byte_arrives_after_its_ten_bit_times() {
        let mut w = wire(&LineConfig::new(9600));
        w.offer(5 * MS, &[0x55]);
        let done = 5 * MS + (10 * SEC).div_ceil(9600);
        w.transmit(done - 1);
        assert_eq!(w.stats.sent, 0);
        assert_eq!(w.next_event(), Some(done));
        w.transmit(done);
        let mut out = Vec::new();
        w.deliver(done, &mut out, usize::MAX);
        assert_eq!(out, [0x55]);
        assert_eq!(w.next_event(), None);
    }

    #[test]
    fn an_idle_line_banks_no_credit() {
        let mut w = wire(&LineConfig::new(9600));
        let first = run(&mut w, &[1; 10], 0, MS, 10 * SEC);
        assert_eq!(first.len(), 10);
        // Idle for 10 s: the next second still carries only 960 bytes.
        let out = run(&mut w, &pattern(5000), 10 * SEC, MS, 11 * SEC);
        assert_eq!(out.len(), 960);
    }

    #[test]
    fn back_to_back_offers_keep_the_transmitter_busy() {
        // A byte offered while the previous one is still going out starts when it ends.
        let mut w = wire(&LineConfig::new(10_000)); // 1 ms per byte
        w.offer(0, &[1]);
        w.transmit(MS / 2);
        w.offer(MS / 2, &[2]);
        let mut out = Vec::new();
        w.transmit(2 * MS - 1);
        w.deliver(2 * MS - 1, &mut out, usize::MAX);
        assert_eq!(out, [1]);
        w.transmit(2 * MS);
        w.deliver(2 * MS, &mut out, usize::MAX);
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn latency_delays_arrival_not_rate() {
        let mut cfg = LineConfig::new(10_000);
        cfg.latency = Duration::from_millis(50);
        let mut w = wire(&cfg);
        let out = run(&mut w, &pattern(1000), 0, MS, 50 * MS);
        assert!(out.is_empty());
        assert_eq!(w.stats.sent, 50);
        let mut out2 = Vec::new();
        w.transmit(51 * MS);
        w.deliver(51 * MS, &mut out2, usize::MAX);
        assert_eq!(out2, pattern(1000)[..1]);
        let out3 = run(&mut w, &[], 51 * MS, MS, SEC + 50 * MS);
        assert_eq!(1 + out3.len(), 1000);
    }

    #[test]
    fn outage_drops_exactly_the_bytes_ending_inside_it() {
        let mut cfg = LineConfig::new(10_000); // byte k (1-based) ends at k ms
        cfg.outages_ms = vec![(100, 50), (500, 1)];
        let mut w = wire(&cfg);
        let data = pattern(1000);
        let out = run(&mut w, &data, 0, MS, 2 * SEC);
        assert_eq!(w.stats.dropped, 51);
        assert_eq!(w.stats.sent, 1000);
        // bytes ending at 100..=149 ms are indices 99..=148; at 500 ms index 499.
        let mut want = data[..99].to_vec();
        want.extend_from_slice(&data[149..499]);
        want.extend_from_slice(&data[500..]);
        assert_eq!(out, want);
    }

    fn corrupt_run(p: f64, seed: u64, n: usize) -> (Vec<u8>, Vec<u8>, u64) {
        let mut cfg = LineConfig::new(1_000_000);
        cfg.byte_error_rate = p;
        cfg.seed = seed;
        let mut w = wire(&cfg);
        let data = pattern(n);
        let mut out = Vec::new();
        // in chunks, like the relay does
        let mut t = 0;
        for chunk in data.chunks(PENDING_MAX) {
            w.offer(t, chunk);
            t += SEC;
            w.transmit(t);
            w.deliver(t, &mut out, usize::MAX);
        }
        (data, out, w.stats.corrupted)
    }

    #[test]
    fn errors_flip_one_bit_in_about_p_of_the_bytes_deterministically() {
        let (data, out, corrupted) = corrupt_run(0.01, 42, 100_000);
        assert_eq!(out.len(), data.len());
        let bad: Vec<usize> = (0..data.len()).filter(|&i| data[i] != out[i]).collect();
        assert_eq!(bad.len() as u64, corrupted);
        for &i in &bad {
            assert_eq!((data[i] ^ out[i]).count_ones(), 1, "byte {i}");
        }
        // 1% of 100000 = 1000, sd ~31
        assert!((880..=1120).contains(&bad.len()), "{}", bad.len());
        let (_, again, c2) = corrupt_run(0.01, 42, 100_000);
        assert_eq!((again, c2), (out.clone(), corrupted));
        let (_, other, _) = corrupt_run(0.01, 43, 100_000);
        assert_ne!(other, out);
        // every bit position gets hit
        let mut bits = 0u8;
        for &i in &bad {
            bits |= data[i] ^ out[i];
        }
        assert_eq!(bits, 0xff);
    }

    #[test]
    fn error_rate_zero_and_one() {
        let (data, out, c) = corrupt_run(0.0, 1, 10_000);
        assert_eq!((out, c), (data, 0));
        let (data, out, c) = corrupt_run(1.0, 1, 10_000);
        assert_eq!(c, 10_000);
        assert!(data.iter().zip(&out).all(|(a, b)| a != b));
    }

    #[test]
    fn the_two_directions_have_different_noise() {
        let mut cfg = LineConfig::new(1_000_000);
        cfg.byte_error_rate = 0.5;
        let (mut a, mut b) = (Wire::new(&cfg, 0), Wire::new(&cfg, 1));
        let (ra, rb) = (a.rng.next(), b.rng.next());
        assert_ne!(ra, rb);
    }

    #[test]
    fn bad_configs_are_refused() {
        let mut cfg = LineConfig::new(10);
        assert!(cfg.validate().is_err());
        cfg.baud = 9600;
        cfg.byte_error_rate = 1.5;
        let e = cfg.validate().unwrap_err();
        assert!(e.to_string().contains("byte_error_rate"), "{e}");
        cfg.byte_error_rate = f64::NAN;
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn timeout_is_bounded() {
        // An idle relay sleeps IDLE_WAIT; a busy one a tick at least.
        let cfg = LineConfig::new(1_000_000);
        let (m0, s0) = tty::open_pty(9600).unwrap();
        let (m1, s1) = tty::open_pty(9600).unwrap();
        let mut r = Relay {
            masters: [m0, m1],
            wires: [Wire::new(&cfg, 0), Wire::new(&cfg, 1)],
            out: [Vec::new(), Vec::new()],
            dead: [false, false],
            started: clock(),
            shared: Arc::new(Shared::default()),
        };
        assert_eq!(r.timeout(0), IDLE_WAIT);
        r.wires[0].offer(0, &[1, 2, 3]);
        assert_eq!(r.timeout(0), TICK);
        let mut cfg = LineConfig::new(50);
        cfg.latency = Duration::from_secs(5);
        r.wires[1] = Wire::new(&cfg, 1);
        r.wires[0] = Wire::new(&cfg, 0);
        r.wires[0].offer(0, &[1]);
        assert_eq!(r.timeout(0), IDLE_WAIT);
        drop((s0, s1));
    }
}
