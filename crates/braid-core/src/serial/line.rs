//! One serial line's sending and receiving end, without IO: the [`FrameCodec`], two
//! lanes of frames waiting for the line, the line clock that paces what is handed to the
//! tty, the rate the line carries, and the 8N1 arithmetic all of braid uses.
//!
//! **Pacing.** A pty takes ~20 KB before it blocks and TIOCOUTQ on it is always 0, and a
//! UART's buffer would hide a queue from braid's scheduler just as well: so the line
//! keeps its own clock (`line_free`: when the line will have sent everything handed over
//! so far, at `baud / 10` bytes per second) and offers bytes ([`Line::poll_write`]) only
//! while that is less than [`AHEAD`] in the future. Frames waiting for the line stay in
//! its buffer, which is bounded ([`Line::send`] refuses a frame beyond it, counted); the
//! bond's pacer is held to the line's datagram rate ([`Line::rate_update`]) so that
//! buffer stays short.
//!
//! **Lanes.** Control frames (probes, answers, acks, handshakes) wait in a lane of their
//! own and go before waiting data frames, but never into the middle of a data frame: a
//! probe's or an ack's delay is at most one frame time, not the whole data backlog.
//!
//! A driver (the daemon's tty, a simulator's wire) calls, with its own `now`:
//! [`Line::send`] to queue a datagram, [`Line::poll_write`] for the bytes it may hand
//! over now and [`Line::wrote`] with how many it did, [`Line::receive`] with the bytes
//! it read, [`Line::next_write`] for when to come back, and [`Line::open`] /
//! [`Line::close`] when the tty comes and goes.

use std::collections::VecDeque;
use std::time::Duration;

use super::codec::{is_compressible, FrameCodec};
use super::cslip::{CompressorStats, DecompressorStats};
use super::Framing;
use crate::time::Instant;

/// Bits a byte takes on an 8N1 line: a start bit, 8 data bits, a stop bit.
pub(super) const BITS_PER_BYTE: u32 = 10;

/// How far ahead of the line the writer may be: bytes handed to the tty that the line
/// has not sent yet (by the line's own clock).
pub const AHEAD: Duration = Duration::from_millis(10);
/// How often the line's rate is recomputed from what it carried.
pub(super) const RATE_EVERY: Duration = Duration::from_millis(100);
/// Backlog (line time of what is written ahead or waiting) above which the rate is
/// lowered, on top of one full frame's line time ([`Line::backlog_target`]): a frame
/// just handed over is a frame time of backlog by itself (120 ms for 1400 bytes at
/// 115200 bd), which is the line being busy, not a queue.
pub(super) const BACKLOG_TARGET: Duration = Duration::from_millis(30);

const NS_PER_S: u128 = 1_000_000_000;

/// Bytes per second an 8N1 line of `baud` carries.
pub fn bytes_per_sec(baud: u32) -> u32 {
    baud / BITS_PER_BYTE
}

/// Data bits per second an 8N1 line of `baud` carries (8 of every 10 bits).
pub(super) fn data_bits_per_sec(baud: u32) -> f64 {
    f64::from(baud) * (8.0 / f64::from(BITS_PER_BYTE))
}

#[cfg(test)]
/// Line time of one byte at `baud` (whole ns).
pub(super) fn byte_time(baud: u32) -> Duration {
    line_time(1, baud)
}

#[cfg(test)]
/// Line time of `bytes` at `baud` (whole ns).
pub(super) fn line_time(bytes: u64, baud: u32) -> Duration {
    Duration::from_nanos(u64::try_from(line_ns(u128::from(bytes), baud)).unwrap_or(u64::MAX))
}

/// Line time of `bytes` at `baud`, whole µs.
pub(super) fn line_micros(bytes: u64, baud: u32) -> u64 {
    bytes * u64::from(BITS_PER_BYTE) * 1_000_000 / u64::from(baud.max(1))
}

/// Line time of `bytes` at `baud`, ns (exact in bits, rounded down).
fn line_ns(bytes: u128, baud: u32) -> u128 {
    bytes * u128::from(BITS_PER_BYTE) * NS_PER_S / u128::from(baud.max(1))
}

/// Whole bytes the line sends in `ns` at `baud`.
fn bytes_in(ns: u128, baud: u32) -> u128 {
    ns * u128::from(baud) / (u128::from(BITS_PER_BYTE) * NS_PER_S)
}

/// A line's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineConfig {
    /// The line's rate (8N1: `baud / 10` bytes per second).
    pub baud: u32,
    /// SLIP, SLIP6 or CSLIP.
    pub framing: Framing,
    /// The largest datagram sent on the line.
    pub mtu: usize,
    /// `raw-ip`: frames carry IP packets for a classic peer, not braid datagrams.
    pub raw_ip: bool,
    /// Frames end in a CRC-32 (a bond line without keys).
    pub crc: bool,
    /// The rate follows what the line measurably carries ([`Line::rate_update`]).
    pub auto_bps: bool,
}

impl LineConfig {
    /// The codec these settings call for.
    fn codec(&self) -> FrameCodec {
        if self.raw_ip {
            FrameCodec::raw_ip(self.framing, self.mtu)
        } else if self.crc {
            FrameCodec::new(self.framing, self.mtu).with_crc()
        } else {
            FrameCodec::new(self.framing, self.mtu)
        }
    }

    /// Line bytes of one full frame of `mtu` bytes, with a typical share of escapes.
    fn frame_bytes(&self) -> usize {
        self.framing.max_encoded_len(self.mtu) / 2 + self.mtu / 64
    }
}

/// Counters of a line (the names `braid status --json` shows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LineCounters {
    /// Frames queued for the line.
    pub tx_frames: u64,
    /// Line bytes handed to the tty.
    pub tx_line_bytes: u64,
    /// Datagrams not sent: the line's buffer was full.
    pub tx_overflow: u64,
    /// Datagrams not sent: the line was closed.
    pub tx_closed: u64,
    /// Writes the tty refused (EAGAIN) although the line clock allowed them.
    pub tx_would_block: u64,
    /// Line bytes read.
    pub rx_line_bytes: u64,
    /// Frames read and handed on.
    pub rx_frames: u64,
    /// Frames the deframer dropped (overrun, runt, line error, the tail of a frame under
    /// way when the tty was opened).
    pub rx_bad_frames: u64,
    /// Data frames the CSLIP decompressor refused (including tossed ones).
    pub rx_cslip_errors: u64,
    /// Frames whose CRC-32 did not match (line noise), on a line without keys.
    pub rx_crc_errors: u64,
    /// Short-header data frames dropped: no full header seen on the line yet.
    pub rx_short_dropped: u64,
}

/// What the CSLIP compressor of a line sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CslipTxStatus {
    /// Packets that were not TCP.
    pub nontcp: u64,
    /// TCP packets sent as plain IP.
    pub tcp: u64,
    /// Sent as UNCOMPRESSED_TCP.
    pub uncompressed: u64,
    /// Sent as COMPRESSED_TCP.
    pub compressed: u64,
}

impl From<CompressorStats> for CslipTxStatus {
    fn from(s: CompressorStats) -> Self {
        CslipTxStatus {
            nontcp: s.nontcp,
            tcp: s.tcp,
            uncompressed: s.uncompressed,
            compressed: s.compressed,
        }
    }
}

/// What the CSLIP decompressor of a line received (slhc's `sls_i_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CslipRxStatus {
    /// UNCOMPRESSED_TCP packets accepted.
    pub uncompressed: u64,
    /// COMPRESSED_TCP packets seen, accepted or not.
    pub compressed: u64,
    /// Plain IP packets passed through.
    pub ip: u64,
    /// Compressed packets with an implicit connection id dropped while waiting for an
    /// explicit one (after a lost or bad frame, or before the first one).
    pub tossed: u64,
    /// Compressed packets refused: truncated, or naming a connection not set up.
    pub errors: u64,
    /// Packets too short to be what their type says.
    pub runts: u64,
    /// UNCOMPRESSED_TCP packets with a bad IP header checksum.
    pub badcheck: u64,
}

impl From<DecompressorStats> for CslipRxStatus {
    fn from(s: DecompressorStats) -> Self {
        CslipRxStatus {
            uncompressed: s.uncompressed,
            compressed: s.compressed,
            ip: s.ip,
            tossed: s.tossed,
            errors: s.errors,
            runts: s.runts,
            badcheck: s.badcheck,
        }
    }
}

/// A line's state for `status`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LineStatus {
    /// Line time of what is handed over but not yet sent, and of what waits, ms.
    pub backlog_ms: f64,
    /// Smoothed data datagram bytes per line byte (framing, escapes, compression, and the
    /// line time control frames take).
    pub datagram_per_line_byte: f64,
    /// The CSLIP compressor's counts (CSLIP only).
    pub cslip_tx: Option<CslipTxStatus>,
    /// The CSLIP decompressor's counts (CSLIP only).
    pub cslip_rx: Option<CslipRxStatus>,
    /// The counters.
    pub counters: LineCounters,
}

/// The lane a [`Line::poll_write`] offer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    Control,
    Data,
}

/// One serial line's end: codec, lanes, line clock, rate. See the module docs.
#[derive(Clone, Debug)]
pub struct Line {
    cfg: LineConfig,
    open: bool,
    codec: FrameCodec,
    /// Line bytes of data frames waiting for the line (`out[out_start..]`).
    out: Vec<u8>,
    out_start: usize,
    /// Line length of each data frame in `out` not yet started.
    frame_lens: VecDeque<usize>,
    /// Bytes left of the data frame being written (a control frame waits for its end).
    frame_left: usize,
    /// Control frames waiting (`ctl[ctl_start..]`): they go before the next data frame.
    ctl: Vec<u8>,
    ctl_start: usize,
    /// The last offer of [`Line::poll_write`] not yet answered by [`Line::wrote`].
    offered: Option<(Lane, usize)>,
    /// Line clock: when everything handed over so far will have left, ns since start.
    line_free_ns: u128,
    /// Bound on the data lane's pending bytes (the control lane has half of it).
    max_pending: usize,
    /// Rate measurement: data datagram bytes and all line bytes since the last update.
    win_data: u64,
    win_line: u64,
    /// Smoothed data datagram bytes per line byte.
    ratio: f64,
    next_rate_update: Instant,
    counters: LineCounters,
}

impl Line {
    /// A closed line ([`Line::open`] opens it); `initial_bps` is the path's datagram rate
    /// before the line has measured one.
    pub fn new(cfg: LineConfig, initial_bps: u64) -> Line {
        let bytes_per_s = bytes_per_sec(cfg.baud).max(1) as usize;
        let line_bps = data_bits_per_sec(cfg.baud);
        Line {
            codec: cfg.codec(),
            open: false,
            max_pending: (2 * cfg.frame_bytes()).max(bytes_per_s / 2),
            out: Vec::with_capacity(4096),
            out_start: 0,
            frame_lens: VecDeque::new(),
            frame_left: 0,
            ctl: Vec::with_capacity(256),
            ctl_start: 0,
            offered: None,
            line_free_ns: 0,
            win_data: 0,
            win_line: 0,
            ratio: if line_bps > 0.0 {
                (initial_bps as f64 / line_bps).clamp(0.1, 10.0)
            } else {
                1.0
            },
            next_rate_update: Instant::ZERO,
            counters: LineCounters::default(),
            cfg,
        }
    }

    /// The settings.
    pub fn config(&self) -> &LineConfig {
        &self.cfg
    }

    /// The codec (its compressor and decompressor state, its counters).
    pub fn codec(&self) -> &FrameCodec {
        &self.codec
    }

    /// The tty is open (again): the codec starts afresh (CSLIP: the peer's decompressor
    /// resynchronises on the next uncompressed packet), nothing is pending.
    pub fn open(&mut self) {
        self.reset();
        self.open = true;
    }

    /// The tty is gone: pending bytes are discarded and [`Line::send`] refuses (counted
    /// as `tx_closed`) until [`Line::open`].
    pub fn close(&mut self) {
        self.reset();
        self.open = false;
    }

    /// True while open.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Discard what is pending and start the codec afresh. The line clock and the rate
    /// measurement go on (the line may still be sending what it was handed).
    pub fn reset(&mut self) {
        self.codec.reset();
        self.out.clear();
        self.out_start = 0;
        self.frame_lens.clear();
        self.frame_left = 0;
        self.ctl.clear();
        self.ctl_start = 0;
        self.offered = None;
    }

    /// Line bytes waiting in both lanes (not yet handed over).
    pub fn pending(&self) -> usize {
        self.out.len() - self.out_start + self.ctl.len() - self.ctl_start
    }

    /// Frame one datagram for the line; a `control` one (probe, probe answer, ack,
    /// handshake) goes before the data frames that wait (after the one being written).
    /// False (counted) when the line is closed or that lane's buffer is full.
    pub fn send(&mut self, datagram: &[u8], control: bool) -> bool {
        if !self.open {
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
        // An offer not answered yet stays valid: compact only an unoffered lane.
        let offered = self.offered.map(|(lane, _)| lane);
        let (buf, start) = if control {
            (&mut self.ctl, &mut self.ctl_start)
        } else {
            (&mut self.out, &mut self.out_start)
        };
        let lane = if control { Lane::Control } else { Lane::Data };
        if *start > 0 && *start * 2 >= buf.len() && offered != Some(lane) {
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

    /// The bytes the line clock allows to hand to the tty at `now`: up to [`AHEAD`]
    /// ahead of the line, control frames first except into the middle of a data frame.
    /// `None` when closed, when nothing waits, or when the line is far enough ahead. Tell
    /// the line how many the tty took with [`Line::wrote`] (or [`Line::would_block`]),
    /// then ask again until this is `None` or the tty takes fewer than offered.
    pub fn poll_write(&mut self, now: Instant) -> Option<&[u8]> {
        self.offered = None;
        if !self.open {
            return None;
        }
        let now_ns = u128::from(now.as_micros()) * 1000;
        // An idle line banks no credit.
        self.line_free_ns = self.line_free_ns.max(now_ns);
        let control = self.frame_left == 0 && self.ctl_start < self.ctl.len();
        if !control && self.frame_left == 0 {
            self.frame_left = self.frame_lens.pop_front()?;
        }
        let (lane, buf, start, left) = if control {
            let left = self.ctl.len() - self.ctl_start;
            (Lane::Control, &self.ctl, self.ctl_start, left)
        } else {
            (Lane::Data, &self.out, self.out_start, self.frame_left)
        };
        let room = (now_ns + AHEAD.as_nanos()).saturating_sub(self.line_free_ns);
        let n = usize::try_from(bytes_in(room, self.cfg.baud))
            .unwrap_or(usize::MAX)
            .min(left);
        if n == 0 {
            return None;
        }
        let chunk = buf.get(start..start + n)?;
        self.offered = Some((lane, n));
        Some(chunk)
    }

    /// The tty took the first `n` bytes of the last [`Line::poll_write`] offer: they are
    /// on their way, and the line clock moves on by their line time, exact in bits.
    pub fn wrote(&mut self, n: usize) {
        let Some((lane, offered)) = self.offered.take() else {
            return;
        };
        let w = n.min(offered);
        match lane {
            Lane::Control => self.ctl_start += w,
            Lane::Data => {
                self.out_start += w;
                self.frame_left -= w.min(self.frame_left);
            }
        }
        self.counters.tx_line_bytes += w as u64;
        self.line_free_ns += line_ns(w as u128, self.cfg.baud);
        if self.out_start == self.out.len() {
            self.out.clear();
            self.out_start = 0;
        }
        if self.ctl_start == self.ctl.len() {
            self.ctl.clear();
            self.ctl_start = 0;
        }
    }

    /// The tty refused the last offer (EAGAIN) although the line clock allowed it
    /// (counted); the bytes wait.
    pub fn would_block(&mut self) {
        self.offered = None;
        self.counters.tx_would_block += 1;
    }

    /// When [`Line::poll_write`] next has bytes to offer (if any wait).
    pub fn next_write(&self) -> Option<Instant> {
        if !self.open || self.pending() == 0 {
            return None;
        }
        let ahead = AHEAD.as_nanos();
        let byte_ns = line_ns(1, self.cfg.baud);
        let at = (self.line_free_ns + (ahead / 2).max(byte_ns)).saturating_sub(ahead);
        Some(Instant::from_micros(
            u64::try_from(at.div_ceil(1000)).unwrap_or(u64::MAX / 4),
        ))
    }

    /// Line bytes read from the tty: each datagram (`raw-ip`: IP packet) they complete
    /// goes to `on_datagram`; drops are counted.
    pub fn receive(&mut self, bytes: &[u8], on_datagram: &mut impl FnMut(&[u8])) {
        self.counters.rx_line_bytes += bytes.len() as u64;
        self.codec.decode(bytes, on_datagram);
    }

    /// The data datagram rate (bit/s) the line can carry now, when it is time to
    /// recompute it (every [`RATE_EVERY`]) and the rate is automatic (not in `raw-ip`
    /// mode): the line's `baud / 10` bytes per second times the measured datagram bytes
    /// per line byte (framing, escapes, compression, and the line time control frames
    /// take), lowered while the backlog is above [`Line::backlog_target`].
    pub fn rate_update(&mut self, now: Instant) -> Option<u64> {
        if !self.cfg.auto_bps || self.cfg.raw_ip || now < self.next_rate_update {
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
        let bps = data_bits_per_sec(self.cfg.baud) * self.ratio * factor;
        Some((bps as u64).max(1))
    }

    /// When [`Line::rate_update`] next has something to say.
    pub fn next_rate_update(&self) -> Instant {
        self.next_rate_update
    }

    /// [`BACKLOG_TARGET`] plus the line time of one frame of `mtu` bytes.
    pub fn backlog_target(&self) -> Duration {
        let frame = self.cfg.frame_bytes() as u128 * line_ns(1, self.cfg.baud);
        BACKLOG_TARGET + Duration::from_nanos(u64::try_from(frame).unwrap_or(u64::MAX))
    }

    /// Line time of everything handed over but not yet sent, plus what waits.
    pub fn backlog(&self, now: Instant) -> Duration {
        let now_ns = u128::from(now.as_micros()) * 1000;
        let ns = self.line_free_ns.saturating_sub(now_ns)
            + self.pending() as u128 * line_ns(1, self.cfg.baud);
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Smoothed data datagram bytes per line byte.
    pub fn datagram_per_line_byte(&self) -> f64 {
        self.ratio
    }

    /// The counters (the codec's receive counters included).
    pub fn counters(&self) -> LineCounters {
        let c = self.codec.counters();
        LineCounters {
            rx_frames: c.rx_frames,
            rx_bad_frames: c.rx_bad_frames,
            rx_cslip_errors: c.rx_cslip_errors,
            rx_crc_errors: c.rx_crc_errors,
            rx_short_dropped: c.rx_short_dropped,
            ..self.counters
        }
    }

    /// The line's state at `now`, for `status`.
    pub fn status(&self, now: Instant) -> LineStatus {
        LineStatus {
            backlog_ms: self.backlog(now).as_secs_f64() * 1000.0,
            datagram_per_line_byte: self.ratio,
            cslip_tx: self
                .codec
                .compressor()
                .map(|c| CslipTxStatus::from(c.stats())),
            cslip_rx: self
                .codec
                .decompressor()
                .map(|d| CslipRxStatus::from(d.stats())),
            counters: self.counters(),
        }
    }
}

#[cfg(test)]
mod tests;
