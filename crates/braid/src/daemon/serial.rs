//! A serial path's IO: braid datagrams framed with SLIP, SLIP6 or CSLIP on a tty, written
//! at the line's pace by the daemon's clock, and frames read back into datagrams.
//!
//! **Frames.** Every frame holds one braid datagram. A data datagram (version 1, type
//! Data or PinnedData, longer than its 20-byte header) travels with the 7-byte short
//! header when it can (`braid_core::serial::short`) and, with CSLIP, its IP packet
//! compressed behind it; every other datagram (probes, acks, sealed datagrams) travels as
//! it is. The receiver tells them apart by the first bytes, which compression never
//! touches (`docs/serial.md`). On a line without keys every frame ends in a CRC-32 of
//! the bytes before it (as sent: short header, compressed packet), big-endian, so line
//! noise is a counted drop (`rx_crc_errors`) rather than a wrong header or packet; a
//! sealed datagram's tag does that job on a sealed line. In `raw-ip` mode a frame is one
//! IP packet, nothing else.
//! Control frames wait in a lane of their own and go before waiting data frames.
//!
//! **Pacing.** A pty takes ~20 KB before it blocks and TIOCOUTQ on it is always 0, and a
//! UART's buffer would hide a queue from braid's scheduler just as well: so the writer
//! keeps its own line clock (`line_free`: when the line will have sent everything written
//! so far, at `baud / 10` bytes per second) and writes only while that is less than
//! [`AHEAD`] in the future. Frames waiting for the line stay in this path's buffer, which
//! is bounded ([`SerialPath::send`] refuses a frame beyond it, counted); the bond's pacer
//! is held to the line's datagram rate ([`SerialPath::rate_update`]) so that buffer stays
//! short.
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use braid_core::serial::{is_compressible, FrameCodec};
use braid_core::Instant;
use serde_json::{json, Value};

use crate::config::{termios_baud, SerialMode, SerialSettings};
use crate::sys::tty::Tty;

/// How far ahead of the line the writer may be: bytes handed to the kernel that the line
/// has not sent yet (by the writer's own clock).
pub const AHEAD: Duration = Duration::from_millis(10);
/// How often the path's rate is recomputed from what the line carried.
pub const RATE_EVERY: Duration = Duration::from_millis(100);
/// Backlog (line time of what is written ahead or waiting) above which the rate is
/// lowered, on top of one full frame's line time ([`SerialPath::backlog_target`]): a
/// frame just handed over is a frame time of backlog by itself (120 ms for 1400 bytes at
/// 115200 bd), which is the line being busy, not a queue.
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
    /// Frames whose CRC-32 did not match (line noise), on a line without keys.
    pub rx_crc_errors: u64,
    /// Short-header data frames dropped: no full header seen on the line yet.
    pub rx_short_dropped: u64,
}

/// The codec a line's settings call for.
fn codec_for(cfg: &SerialSettings) -> FrameCodec {
    match cfg.mode {
        SerialMode::Bond if cfg.crc => FrameCodec::new(cfg.framing, cfg.mtu).with_crc(),
        SerialMode::Bond => FrameCodec::new(cfg.framing, cfg.mtu),
        SerialMode::RawIp => FrameCodec::raw_ip(cfg.framing, cfg.mtu),
    }
}

/// One serial path: the tty (re-opened when it fails), the codec, the paced writer.
#[derive(Debug)]
pub struct SerialPath {
    /// The configured line.
    pub cfg: SerialSettings,
    tty: Option<Tty>,
    codec: FrameCodec,
    /// Line bytes of data frames waiting for the line (`out[out_start..]`).
    out: Vec<u8>,
    out_start: usize,
    /// Line length of each data frame in `out` not yet started.
    frame_lens: VecDeque<usize>,
    /// Bytes left of the data frame being written (a control frame waits for its end).
    frame_left: usize,
    /// Control frames (probes, answers, acks, handshakes) waiting: they go before the
    /// next data frame, so a probe's or an ack's delay is at most one frame time, not
    /// the whole data backlog.
    ctl: Vec<u8>,
    ctl_start: usize,
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
            codec: codec_for(&cfg),
            max_pending: (2 * frame).max(bytes_per_s / 2),
            tty: None,
            out: Vec::with_capacity(4096),
            out_start: 0,
            frame_lens: VecDeque::new(),
            frame_left: 0,
            ctl: Vec::with_capacity(256),
            ctl_start: 0,
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
        self.codec.reset();
        self.clear_pending();
        self.tty = Some(tty);
        Ok(())
    }

    /// Close the tty (after an error); pending bytes are discarded.
    pub fn close(&mut self) {
        self.tty = None;
        self.clear_pending();
    }

    fn clear_pending(&mut self) {
        self.out.clear();
        self.out_start = 0;
        self.frame_lens.clear();
        self.frame_left = 0;
        self.ctl.clear();
        self.ctl_start = 0;
    }

    /// True for `mode = "raw-ip"`: frames carry the TUN's IP packets, not braid datagrams.
    pub fn is_raw_ip(&self) -> bool {
        self.cfg.mode == SerialMode::RawIp
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
        self.out.len() - self.out_start + self.ctl.len() - self.ctl_start
    }

    /// ns one byte takes on the line (10 bits).
    fn byte_ns(&self) -> u128 {
        10 * NS_PER_S / u128::from(self.cfg.baud.max(1))
    }

    /// Frame one datagram for the line, behind the other data frames. False (counted)
    /// when the tty is closed or the path's buffer is full.
    pub fn send(&mut self, datagram: &[u8]) -> bool {
        self.send_as(datagram, false)
    }

    /// Frame one datagram; a `control` one (probe, probe answer, ack, handshake) goes
    /// on the line before the data frames that wait (after the one being written).
    pub fn send_as(&mut self, datagram: &[u8], control: bool) -> bool {
        if self.tty.is_none() {
            self.counters.tx_closed += 1;
            return false;
        }
        let need = self.cfg.framing.max_encoded_len(datagram.len()) / 2;
        let limit = if control {
            // Control frames are small; a bounded lane of their own.
            self.max_pending / 2
        } else {
            self.max_pending
        };
        let queued = if control {
            self.ctl.len() - self.ctl_start
        } else {
            self.out.len() - self.out_start
        };
        if queued + need > limit {
            self.counters.tx_overflow += 1;
            return false;
        }
        let (buf, start) = if control {
            (&mut self.ctl, &mut self.ctl_start)
        } else {
            (&mut self.out, &mut self.out_start)
        };
        if *start > 0 && *start * 2 >= buf.len() {
            buf.drain(..*start);
            *start = 0;
        }
        let before = buf.len();
        self.codec.encode(datagram, buf);
        let line = buf.len() - before;
        if !control {
            self.frame_lens.push_back(line);
        }
        self.win_line += line as u64;
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
        loop {
            // Control frames go first, except into the middle of a data frame.
            let control = self.frame_left == 0 && self.ctl_start < self.ctl.len();
            if !control && self.frame_left == 0 {
                match self.frame_lens.pop_front() {
                    Some(n) => self.frame_left = n,
                    None => break,
                }
            }
            let (buf, start, left) = if control {
                (&self.ctl, self.ctl_start, self.ctl.len() - self.ctl_start)
            } else {
                (&self.out, self.out_start, self.frame_left)
            };
            let room = (now_ns + ahead).saturating_sub(self.line_free_ns);
            let n = usize::try_from(room * u128::from(self.cfg.baud) / (10 * NS_PER_S))
                .unwrap_or(usize::MAX)
                .min(left);
            if n == 0 {
                break;
            }
            let chunk = buf.get(start..start + n).unwrap_or(&[]);
            match tty.write(chunk) {
                Ok(w) => {
                    if control {
                        self.ctl_start += w;
                    } else {
                        self.out_start += w;
                        self.frame_left -= w.min(self.frame_left);
                    }
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
        if self.ctl_start == self.ctl.len() {
            self.ctl.clear();
            self.ctl_start = 0;
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
                        self.codec.decode(bytes, on_datagram);
                        let c = self.codec.counters();
                        self.counters.rx_frames = c.rx_frames;
                        self.counters.rx_bad_frames = c.rx_bad_frames;
                        self.counters.rx_cslip_errors = c.rx_cslip_errors;
                        self.counters.rx_crc_errors = c.rx_crc_errors;
                        self.counters.rx_short_dropped = c.rx_short_dropped;
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
    /// while the backlog is above [`SerialPath::backlog_target`].
    pub fn rate_update(&mut self, now: Instant) -> Option<u64> {
        if !self.cfg.auto_bps || self.is_raw_ip() || now < self.next_rate_update {
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
        let over = backlog.saturating_sub(self.backlog_target()).as_secs_f64();
        let factor = (1.0 - over * 2.0).clamp(0.5, 1.0);
        let bps = f64::from(self.cfg.baud) * 0.8 * self.ratio * factor;
        Some((bps as u64).max(1))
    }

    /// [`BACKLOG_TARGET`] plus the line time of one frame of `mtu` bytes.
    pub fn backlog_target(&self) -> Duration {
        let frame = self.cfg.framing.max_encoded_len(self.cfg.mtu) / 2 + self.cfg.mtu / 64;
        BACKLOG_TARGET
            + Duration::from_nanos(
                u64::try_from(frame as u128 * self.byte_ns()).unwrap_or(u64::MAX),
            )
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
            "mode": self.cfg.mode.as_str(),
            "mtu": self.cfg.mtu,
            "tty": if self.tty.is_some() { "open" } else { "closed" },
            "backlog_ms": self.backlog(now).as_secs_f64() * 1000.0,
            "datagram_per_line_byte": self.ratio,
            "cslip_tx": self.codec.compressor().map(|c| {
                let s = c.stats();
                json!({
                    "nontcp": s.nontcp,
                    "tcp": s.tcp,
                    "uncompressed": s.uncompressed,
                    "compressed": s.compressed,
                })
            }),
            "counters": self.counters,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use braid_core::serial::cslip::ip_checksum;
    use braid_core::serial::Framing;
    use braid_core::wire::{self, Header, Message, MessageType, DATA_HEADER_LEN};

    use super::*;
    use crate::sys::tty::open_pty;

    /// An IPv4/TCP packet with ACK set, `data` bytes of payload, seq `seq`.
    fn tcp(seq: u32, data: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + data];
        let len = u16::try_from(p.len()).unwrap();
        p[0] = 0x45;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        p[4..6].copy_from_slice(&(seq as u16).to_be_bytes()); // id
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 200, 0, 1]);
        p[16..20].copy_from_slice(&[10, 200, 0, 2]);
        let c = ip_checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p[20..22].copy_from_slice(&5000u16.to_be_bytes());
        p[22..24].copy_from_slice(&5201u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..32].copy_from_slice(&7u32.to_be_bytes());
        p[32] = 0x50;
        p[33] = 0x10;
        p[34..36].copy_from_slice(&1000u16.to_be_bytes());
        for (i, b) in p[40..].iter_mut().enumerate() {
            *b = (i * 7 + seq as usize) as u8; // includes 0xC0 and 0xDB now and then
        }
        p
    }

    fn data(seq: u64, ip: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; DATA_HEADER_LEN + ip.len()];
        let h = Header {
            path: 3,
            timestamp: 77,
        };
        wire::emit_data_header_as(&h, MessageType::Data, seq, seq as u32, &mut d).unwrap();
        d[DATA_HEADER_LEN..].copy_from_slice(ip);
        d
    }

    fn probe() -> Vec<u8> {
        let mut d = vec![0u8; 64];
        let h = Header {
            path: 1,
            timestamp: 5,
        };
        let n = wire::emit(
            &h,
            &Message::Probe {
                probe_seq: 9,
                epoch: Some(1),
            },
            &mut d,
        )
        .unwrap();
        d.truncate(n);
        d
    }

    fn settings(device: &std::path::Path, baud: u32) -> SerialSettings {
        SerialSettings {
            device: device.to_owned(),
            baud,
            framing: Framing::Slip,
            mtu: 1420,
            auto_bps: true,
            mode: SerialMode::Bond,
            crc: false,
        }
    }

    fn at_ms(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    /// Everything the pty passes on (a pty hands bytes over through a work queue: wait
    /// until it has been quiet for 50 ms).
    fn drain(master: &mut std::fs::File) -> usize {
        let mut buf = [0u8; 65536];
        let mut n = 0;
        loop {
            let mut fds = [crate::sys::poll::readable(master.as_raw_fd())];
            match crate::sys::poll::wait(&mut fds, Some(Duration::from_millis(50))) {
                Ok(r) if r > 0 => {}
                _ => return n,
            }
            match master.read(&mut buf) {
                Ok(k) if k > 0 => n += k,
                _ => return n,
            }
        }
    }

    /// Flush every ms from `from` to `to` (inclusive).
    fn step(p: &mut SerialPath, from: u64, to: u64) {
        for ms in from..=to {
            p.flush(at_ms(ms)).unwrap();
        }
    }

    #[test]
    fn writer_keeps_to_the_line_clock() {
        let (mut master, slave) = open_pty(9600).unwrap();
        let mut p = SerialPath::new(settings(slave.path(), 9600), 7000);
        p.open().unwrap();
        assert!(p.is_open());
        // 960 bytes/s: 10 ms is 9.6 bytes.
        assert!(p.send(&vec![0x11; 1000]));
        p.flush(at_ms(1000)).unwrap();
        assert_eq!(drain(&mut master), 9, "AHEAD = 10 ms at 960 B/s");
        // Nothing more until the line has sent some.
        p.flush(at_ms(1000)).unwrap();
        assert_eq!(drain(&mut master), 0);
        let next = p.next_write().unwrap();
        assert!(next > at_ms(1000) && next <= at_ms(1006), "{next:?}");
        // A late flush still writes only AHEAD: the line sent nothing meanwhile.
        p.flush(at_ms(1200)).unwrap();
        assert_eq!(drain(&mut master), 9);
        // Flushing every ms for 300 ms: 288 more bytes.
        step(&mut p, 1201, 1500);
        let n = drain(&mut master);
        assert!((287..=289).contains(&n), "{n}");
        step(&mut p, 1501, 3000);
        assert_eq!(
            drain(&mut master),
            1002 - 18 - n,
            "the rest, END bytes included"
        );
        assert_eq!(p.counters.tx_line_bytes, 1002);
        assert_eq!(p.next_write(), None);
        // Idle: the next frame starts from now, not from the past.
        assert!(p.send(&[1, 2, 3]));
        p.flush(at_ms(10_000)).unwrap();
        assert_eq!(drain(&mut master), 5);
        // The buffer holds two full frames (more than 0.5 s at this rate).
        assert!(p.send(&vec![0x11; 1400]));
        assert!(p.send(&vec![0x11; 1400]));
        assert!(!p.send(&vec![0x11; 1400]));
        assert_eq!(p.counters.tx_overflow, 1);
    }

    /// Everything the pty passes on, as bytes.
    fn drain_bytes(master: &mut std::fs::File) -> Vec<u8> {
        let mut buf = [0u8; 65536];
        let mut out = Vec::new();
        loop {
            let mut fds = [crate::sys::poll::readable(master.as_raw_fd())];
            match crate::sys::poll::wait(&mut fds, Some(Duration::from_millis(50))) {
                Ok(r) if r > 0 => {}
                _ => return out,
            }
            match master.read(&mut buf) {
                Ok(k) if k > 0 => out.extend_from_slice(&buf[..k]),
                _ => return out,
            }
        }
    }

    #[test]
    fn control_frames_go_before_waiting_data_but_never_inside_a_frame() {
        let (mut master, slave) = open_pty(9600).unwrap();
        let mut p = SerialPath::new(settings(slave.path(), 9600), 7000);
        p.open().unwrap();
        let d1 = data(1, &tcp(1, 100));
        let d2 = data(2, &tcp(2, 100));
        assert!(p.send(&d1));
        assert!(p.send(&d2));
        // The first frame starts now; the probe comes while it is on the line.
        p.flush(at_ms(1000)).unwrap();
        assert!(p.send_as(&probe(), true));
        step(&mut p, 1001, 1600);
        let line = drain_bytes(&mut master);
        let mut rx = FrameCodec::new(Framing::Slip, 1420);
        let mut got = Vec::new();
        rx.decode(&line, &mut |d| got.push(d.to_vec()));
        assert_eq!(got, vec![d1, probe(), d2]);
        assert_eq!(rx.counters().rx_bad_frames, 0);
        // The control lane is bounded on its own: a full data buffer does not stop it.
        let big = vec![0x11; 1400];
        while p.send(&big) {}
        assert!(p.send_as(&probe(), true));
    }

    #[test]
    fn rate_follows_the_measured_line_bytes_and_the_backlog() {
        let (mut master, slave) = open_pty(115200).unwrap();
        let cfg = settings(slave.path(), 115200);
        let initial = crate::config::serial_bps(115200, Framing::Cslip, 1420);
        let mut p = SerialPath::new(
            SerialSettings {
                framing: Framing::Cslip,
                ..cfg
            },
            initial,
        );
        p.open().unwrap();
        assert!(p
            .rate_update(at_ms(0))
            .is_some_and(|b| b.abs_diff(initial) < 100));
        // Compressed TCP: fewer line bytes than datagram bytes, so the rate goes up.
        for round in 1..=20u64 {
            for k in 0..4u32 {
                let seq = (round as u32) * 4 + k;
                assert!(
                    p.send(&data(u64::from(seq), &tcp(seq * 1000, 1000))),
                    "{round} {k} {:?} {}",
                    p.counters,
                    p.pending()
                );
            }
            // Let the line take it all (no backlog).
            step(&mut p, round * 1000, round * 1000 + 900);
            drain(&mut master);
            let _ = p.rate_update(at_ms(round * 1000 + 950));
        }
        let bps = p.rate_update(at_ms(30_000)).unwrap();
        assert!(
            bps > 92_160,
            "{bps} above 80% of 115200: headers compressed"
        );
        // A backlog lowers it.
        for k in 0..4u32 {
            assert!(p.send(&data(u64::from(k), &tcp(k * 1000, 1000))));
        }
        let slow = p.rate_update(at_ms(31_000)).unwrap();
        assert!(slow < bps * 9 / 10, "{slow} {bps}");
        // A fixed bps is left alone.
        let mut fixed = SerialPath::new(
            SerialSettings {
                auto_bps: false,
                ..settings(slave.path(), 115200)
            },
            5000,
        );
        assert_eq!(fixed.rate_update(at_ms(0)), None);
    }

    #[test]
    fn a_vanished_device_is_an_error_that_names_it() {
        let mut p = SerialPath::new(
            settings(std::path::Path::new("/dev/braid-no-tty"), 9600),
            7000,
        );
        let e = p.open().unwrap_err();
        assert!(e.to_string().contains("/dev/braid-no-tty"), "{e}");
        assert!(!p.is_open());
        assert!(!p.send(&[1, 2, 3]));
        assert_eq!(p.counters.tx_closed, 1);
    }
}
