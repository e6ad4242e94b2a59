//! A serial path's IO: braid datagrams framed with SLIP, SLIP6 or CSLIP on a tty, written
//! at the line's pace by the daemon's clock, and frames read back into datagrams.
//!
//! **Frames.** Every frame holds one braid datagram. With CSLIP, a data datagram (version
//! 1, type Data or PinnedData, longer than its 20-byte header) has its IP packet
//! compressed behind the header, which travels as it is; every other datagram (probes,
//! acks, sealed datagrams) travels uncompressed. The receiver tells them apart by the
//! same two header bytes, which compression never touches (`docs/serial.md`).
//!
//! **Pacing.** A pty takes ~20 KB before it blocks and TIOCOUTQ on it is always 0, and a
//! UART's buffer would hide a queue from braid's scheduler just as well: so the writer
//! keeps its own line clock (`line_free`: when the line will have sent everything written
//! so far, at `baud / 10` bytes per second) and writes only while that is less than
//! [`AHEAD`] in the future. Frames waiting for the line stay in this path's buffer, which
//! is bounded ([`SerialPath::send`] refuses a frame beyond it, counted); the bond's pacer
//! is held to the line's datagram rate ([`SerialPath::rate_update`]) so that buffer stays
//! short.
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use braid_core::serial::{slip, slip6, Decompressor, Event, Framing, LineEncoder};
use braid_core::wire::{MessageType, DATA_HEADER_LEN, VERSION};
use braid_core::Instant;
use serde_json::{json, Value};

use crate::config::{termios_baud, SerialSettings};
use crate::sys::tty::Tty;

/// How far ahead of the line the writer may be: bytes handed to the kernel that the line
/// has not sent yet (by the writer's own clock).
pub const AHEAD: Duration = Duration::from_millis(10);
/// How often the path's rate is recomputed from what the line carried.
pub const RATE_EVERY: Duration = Duration::from_millis(100);
/// Backlog (line time of what is written ahead or waiting) above which the rate is lowered.
pub const BACKLOG_TARGET: Duration = Duration::from_millis(30);

const NS_PER_S: u128 = 1_000_000_000;

/// Counters of a serial path.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct SerialCounters {
    /// Frames queued for the line.
    pub tx_frames: u64,
    /// Line bytes written to the tty.
    pub tx_line_bytes: u64,
    /// Datagrams not sent: the path's buffer was full.
    pub tx_overflow: u64,
    /// Datagrams not sent: the tty was closed.
    pub tx_closed: u64,
    /// Writes the tty refused (EAGAIN) although the line clock allowed them.
    pub tx_would_block: u64,
    /// Line bytes read.
    pub rx_line_bytes: u64,
    /// Frames read and handed to the bond.
    pub rx_frames: u64,
    /// Frames the deframer dropped (overrun, runt).
    pub rx_bad_frames: u64,
    /// Data frames the CSLIP decompressor refused (including tossed ones).
    pub rx_cslip_errors: u64,
}

#[derive(Clone, Debug)]
enum Deframer {
    Slip(slip::Decoder),
    Slip6(slip6::Decoder),
}

/// True when `datagram` is a braid data datagram with an IP packet after its header: the
/// part CSLIP compresses.
pub fn is_compressible(datagram: &[u8]) -> bool {
    datagram.len() > DATA_HEADER_LEN
        && datagram.first() == Some(&VERSION)
        && matches!(
            datagram.get(1).copied().map(MessageType::try_from),
            Some(Ok(MessageType::Data | MessageType::PinnedData))
        )
}

/// The framing state of one line, both ways, without IO: datagrams to line bytes and line
/// bytes to datagrams.
#[derive(Clone, Debug)]
pub struct FrameCodec {
    framing: Framing,
    encoder: LineEncoder,
    deframer: Deframer,
    decompressor: Option<Decompressor>,
    scratch: Vec<u8>,
}

impl FrameCodec {
    /// Fresh state for a line of `framing` whose largest datagram is `mtu` bytes.
    pub fn new(framing: Framing, mtu: usize) -> Self {
        FrameCodec {
            framing,
            encoder: LineEncoder::new(framing),
            deframer: match framing {
                Framing::Slip | Framing::Cslip => Deframer::Slip(slip::Decoder::new(mtu)),
                Framing::Slip6 => Deframer::Slip6(slip6::Decoder::new(mtu)),
            },
            decompressor: (framing == Framing::Cslip).then(Decompressor::default),
            scratch: Vec::with_capacity(mtu + 64),
        }
    }

    /// Append the line bytes of one datagram to `out`.
    pub fn encode(&mut self, datagram: &[u8], out: &mut Vec<u8>) {
        match self.framing {
            Framing::Cslip if is_compressible(datagram) => {
                let (head, ip) = datagram.split_at(DATA_HEADER_LEN);
                self.encoder.encode_prefixed(head, ip, out);
            }
            Framing::Slip | Framing::Cslip => slip::encode(datagram, out),
            Framing::Slip6 => slip6::encode(datagram, out),
        }
    }

    /// Decode line bytes; `on_datagram` gets each datagram. Counts drops in `c`.
    pub fn decode(
        &mut self,
        input: &[u8],
        c: &mut SerialCounters,
        on_datagram: &mut impl FnMut(&[u8]),
    ) {
        let decomp = &mut self.decompressor;
        let scratch = &mut self.scratch;
        let mut on_event = |ev: Event<'_>| match ev {
            Event::Dropped(_) => {
                c.rx_bad_frames += 1;
                if let Some(d) = decomp.as_mut() {
                    d.toss();
                }
            }
            Event::Frame(f) => match decomp.as_mut() {
                Some(d) if is_compressible(f) => {
                    let (head, body) = f.split_at(DATA_HEADER_LEN);
                    scratch.clear();
                    scratch.extend_from_slice(head);
                    match d.decompress(body, scratch) {
                        Ok(_) => {
                            c.rx_frames += 1;
                            on_datagram(scratch);
                        }
                        Err(_) => c.rx_cslip_errors += 1,
                    }
                }
                _ => {
                    c.rx_frames += 1;
                    on_datagram(f);
                }
            },
        };
        match &mut self.deframer {
            Deframer::Slip(d) => d.decode_events(input, &mut on_event),
            Deframer::Slip6(d) => d.decode_events(input, &mut on_event),
        }
    }
}

/// One serial path: the tty (re-opened when it fails), the codec, the paced writer.
#[derive(Debug)]
pub struct SerialPath {
    /// The configured line.
    pub cfg: SerialSettings,
    tty: Option<Tty>,
    codec: FrameCodec,
    /// Line bytes waiting for the line (`out[out_start..]`).
    out: Vec<u8>,
    out_start: usize,
    /// Line clock: when everything written so far will have left, ns since start.
    line_free_ns: u128,
    /// Bound on `out`'s pending bytes.
    max_pending: usize,
    /// Rate measurement: data datagram bytes and all line bytes since the last update.
    win_data: u64,
    win_line: u64,
    /// Smoothed data datagram bytes per line byte.
    ratio: f64,
    next_rate_update: Instant,
    /// Counters.
    pub counters: SerialCounters,
}

impl SerialPath {
    /// A serial path; the tty is opened by [`SerialPath::open`].
    pub fn new(cfg: SerialSettings, initial_bps: u64) -> SerialPath {
        let bytes_per_s = (cfg.baud / 10).max(1) as usize;
        let frame = cfg.framing.max_encoded_len(cfg.mtu) / 2 + cfg.mtu / 64;
        let line_bps = f64::from(cfg.baud) * 0.8;
        SerialPath {
            codec: FrameCodec::new(cfg.framing, cfg.mtu),
            max_pending: (2 * frame).max(bytes_per_s / 2),
            tty: None,
            out: Vec::with_capacity(4096),
            out_start: 0,
            line_free_ns: 0,
            win_data: 0,
            win_line: 0,
            ratio: if line_bps > 0.0 {
                (initial_bps as f64 / line_bps).clamp(0.1, 10.0)
            } else {
                1.0
            },
            next_rate_update: Instant::ZERO,
            counters: SerialCounters::default(),
            cfg,
        }
    }

    /// Open the tty (raw 8N1 at [`termios_baud`]); the codec starts afresh (CSLIP: the
    /// peer's decompressor resynchronises on the next uncompressed packet).
    pub fn open(&mut self) -> io::Result<()> {
        self.tty = None;
        let tty = Tty::open(&self.cfg.device, termios_baud(self.cfg.baud))?;
        self.codec = FrameCodec::new(self.cfg.framing, self.cfg.mtu);
        self.out.clear();
        self.out_start = 0;
        self.tty = Some(tty);
        Ok(())
    }

    /// Close the tty (after an error); pending bytes are discarded.
    pub fn close(&mut self) {
        self.tty = None;
        self.out.clear();
        self.out_start = 0;
    }

    /// True while the tty is open.
    pub fn is_open(&self) -> bool {
        self.tty.is_some()
    }

    /// The tty's fd, for poll.
    pub fn fd(&self) -> Option<RawFd> {
        self.tty.as_ref().map(AsRawFd::as_raw_fd)
    }

    fn pending(&self) -> usize {
        self.out.len() - self.out_start
    }

    /// ns one byte takes on the line (10 bits).
    fn byte_ns(&self) -> u128 {
        10 * NS_PER_S / u128::from(self.cfg.baud.max(1))
    }

    /// Frame one datagram for the line. False (counted) when the tty is closed or the
    /// path's buffer is full.
    pub fn send(&mut self, datagram: &[u8]) -> bool {
        if self.tty.is_none() {
            self.counters.tx_closed += 1;
            return false;
        }
        if self.pending() + self.cfg.framing.max_encoded_len(datagram.len()) / 2
            > self.max_pending
        {
            self.counters.tx_overflow += 1;
            return false;
        }
        if self.out_start > 0 && self.out_start * 2 >= self.out.len() {
            self.out.drain(..self.out_start);
            self.out_start = 0;
        }
        let before = self.out.len();
        self.codec.encode(datagram, &mut self.out);
        let line = (self.out.len() - before) as u64;
        self.win_line += line;
        if is_compressible(datagram) {
            self.win_data += datagram.len() as u64;
        }
        self.counters.tx_frames += 1;
        true
    }

    /// Write what the line clock allows. An error means the tty failed (closed already).
    pub fn flush(&mut self, now: Instant) -> io::Result<()> {
        let Some(tty) = &mut self.tty else {
            return Ok(());
        };
        let now_ns = u128::from(now.as_micros()) * 1000;
        // An idle line banks no credit.
        self.line_free_ns = self.line_free_ns.max(now_ns);
        let ahead = AHEAD.as_nanos();
        while self.out_start < self.out.len() {
            let room = (now_ns + ahead).saturating_sub(self.line_free_ns);
            let n = usize::try_from(room * u128::from(self.cfg.baud) / (10 * NS_PER_S))
                .unwrap_or(usize::MAX)
                .min(self.out.len() - self.out_start);
            if n == 0 {
                break;
            }
            let chunk = self.out.get(self.out_start..self.out_start + n).unwrap_or(&[]);
            match tty.write(chunk) {
                Ok(w) => {
                    self.out_start += w;
                    self.counters.tx_line_bytes += w as u64;
                    // Exact in bits: w bytes take w·10/baud s.
                    self.line_free_ns += w as u128 * 10 * NS_PER_S / u128::from(self.cfg.baud);
                    if w < n {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.counters.tx_would_block += 1;
                    break;
                }
                Err(e) => {
                    self.close();
                    return Err(e);
                }
            }
        }
        if self.out_start == self.out.len() {
            self.out.clear();
            self.out_start = 0;
        }
        Ok(())
    }

    /// When the writer next has room (if it has bytes waiting).
    pub fn next_write(&self) -> Option<Instant> {
        if self.tty.is_none() || self.pending() == 0 {
            return None;
        }
        let ahead = AHEAD.as_nanos();
        let at = (self.line_free_ns + (ahead / 2).max(self.byte_ns())).saturating_sub(ahead);
        Some(Instant::from_micros(
            u64::try_from(at.div_ceil(1000)).unwrap_or(u64::MAX / 4),
        ))
    }

    /// Read what the tty has (at most `batch` reads into `buf`) and hand each datagram to
    /// `on_datagram`. An error other than WouldBlock means the tty failed (closed already).
    pub fn read(
        &mut self,
        buf: &mut [u8],
        batch: usize,
        on_datagram: &mut impl FnMut(&[u8]),
    ) -> io::Result<()> {
        for _ in 0..batch {
            let Some(tty) = &mut self.tty else {
                return Ok(());
            };
            match tty.read(buf) {
                Ok(n) => {
                    self.counters.rx_line_bytes += n as u64;
                    if let Some(bytes) = buf.get(..n) {
                        self.codec.decode(bytes, &mut self.counters, on_datagram);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    self.close();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The data datagram rate (bit/s) the line can carry now, when it is time to
    /// recompute it (every [`RATE_EVERY`]) and the path's `bps` is automatic: the line's
    /// `baud / 10` bytes per second times the measured datagram bytes per line byte
    /// (framing, escapes, compression, and the line time control frames take), lowered
    /// while the backlog is above [`BACKLOG_TARGET`].
    pub fn rate_update(&mut self, now: Instant) -> Option<u64> {
        if !self.cfg.auto_bps || now < self.next_rate_update {
            return None;
        }
        self.next_rate_update = now + RATE_EVERY;
        if self.win_data > 0 && self.win_line > 0 {
            let sample = self.win_data as f64 / self.win_line as f64;
            self.ratio = 0.75 * self.ratio + 0.25 * sample;
            self.win_data = 0;
            self.win_line = 0;
        } else if self.win_line > 4096 {
            self.win_line = 0;
        }
        let backlog = self.backlog(now);
        let over = backlog.saturating_sub(BACKLOG_TARGET).as_secs_f64();
        let factor = (1.0 - over * 2.0).clamp(0.5, 1.0);
        let bps = f64::from(self.cfg.baud) * 0.8 * self.ratio * factor;
        Some((bps as u64).max(1))
    }

    /// When [`SerialPath::rate_update`] next has something to say.
    pub fn next_rate_update(&self) -> Instant {
        self.next_rate_update
    }

    /// Line time of everything written but not yet sent, plus what waits in the buffer.
    pub fn backlog(&self, now: Instant) -> Duration {
        let now_ns = u128::from(now.as_micros()) * 1000;
        let ns = self.line_free_ns.saturating_sub(now_ns) + self.pending() as u128 * self.byte_ns();
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// For `status`.
    pub fn json(&self, now: Instant) -> Value {
        json!({
            "device": self.cfg.device.display().to_string(),
            "baud": self.cfg.baud,
            "termios_baud": termios_baud(self.cfg.baud),
            "framing": self.cfg.framing.as_str(),
            "mtu": self.cfg.mtu,
            "tty": if self.tty.is_some() { "open" } else { "closed" },
            "backlog_ms": self.backlog(now).as_secs_f64() * 1000.0,
            "datagram_per_line_byte": self.ratio,
            "counters": self.counters,
        })
    }
}
