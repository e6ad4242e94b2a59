//! Serial line framing: SLIP (RFC 1055), SLIP6 and CSLIP (RFC 1144 Van Jacobson TCP/IP
//! header compression), byte for byte as Linux drivers/net/slip.
//!
//! - [`slip`]: `encode` and a streaming [`slip::Decoder`];
//! - [`slip6`]: the 6-bit printable variant;
//! - [`cslip`]: the VJ [`cslip::Compressor`] and [`cslip::Decompressor`];
//! - [`short`]: the 7-byte short data header of bond lines;
//! - [`codec`]: the [`FrameCodec`], one line's framing both ways (chosen by [`Framing`],
//!   CSLIP and short-header state per line, an optional CRC-32, bond or `raw-ip` mode):
//!   the one codec the daemon runs, the fuzz targets exercise and the interop tests check;
//! - [`line`]: a serial line's end without IO ([`Line`]: codec, lanes, line clock, rate)
//!   and the 8N1 arithmetic;
//! - [`policy`]: what braid derives from a line's speed (its datagram rate, the ack delay,
//!   the `[bond]` defaults for serial bonds).
//!
//! Everything writes into caller-provided buffers; nothing panics on any input. See
//! `docs/serial.md` for the byte layouts.

mod codec;
pub mod cslip;
mod line;
mod policy;
mod short;
pub mod slip;
pub mod slip6;

use core::fmt;
use core::str::FromStr;

pub use codec::{is_compressible, CodecCounters, FrameCodec};
pub use cslip::{Compressor, CslipError, Decompressor, PacketType};
pub use line::{bytes_per_sec, Line, LineConfig, LineCounters, LineStatus, AHEAD};
pub use policy::{serial_ack_delay, serial_bps, SerialDefaults};

/// Linux's default SLIP MTU (`SL_MTU`).
pub const SL_MTU: usize = 296;

/// The decoded-frame limit the kernel uses for a line of this MTU: `max(2·mtu, 1152)`
/// (`sl_alloc_bufs`' `buffsize`; the buffer has 4 more bytes that are never filled).
pub fn max_frame_for_mtu(mtu: usize) -> usize {
    mtu.saturating_mul(2).max(576 * 2)
}

/// Why a decoder dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The frame did not fit in the buffer.
    Overrun,
    /// The frame had 1 or 2 bytes.
    Runt,
    /// The line layer reported an error during the frame.
    LineError,
    /// The bytes before the first delimiter after [`slip::Decoder::hunt`]: the tail of a
    /// frame whose start this end did not see.
    Partial,
}

/// What a streaming decoder found, in line order.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A complete good frame (valid only during the callback).
    Frame(&'a [u8]),
    /// A frame was dropped.
    Dropped(DropReason),
}

/// The receive buffer and error state shared by the SLIP and SLIP6 decoders.
#[derive(Clone, Debug)]
struct RxBuf {
    buf: Vec<u8>,
    max: usize,
    error: Option<DropReason>,
    /// Hunting ([`DropReason::Partial`]) and a byte has come since.
    tail_seen: bool,
    stats: slip::DecoderStats,
}

impl RxBuf {
    fn new(max: usize) -> Self {
        RxBuf {
            // Allocated once, up to a sane bound; it grows only up to `max`.
            buf: Vec::with_capacity(max.min(1 << 16)),
            max,
            error: None,
            tail_seen: false,
            stats: slip::DecoderStats::default(),
        }
    }

    fn push(&mut self, b: u8) {
        match self.error {
            None if self.buf.len() < self.max => self.buf.push(b),
            None => {
                self.stats.overruns += 1;
                self.error = Some(DropReason::Overrun);
            }
            Some(DropReason::Partial) => self.tail_seen = true,
            Some(_) => {}
        }
    }

    /// Drop what comes before the next delimiter: a frame's tail (counted when there is
    /// one; a line that starts with a delimiter loses nothing).
    fn hunt(&mut self) {
        self.buf.clear();
        self.error = Some(DropReason::Partial);
        self.tail_seen = false;
    }

    fn set_error(&mut self, why: DropReason) {
        if self.error.is_none() {
            if why == DropReason::LineError {
                self.stats.line_errors += 1;
            }
            self.error = Some(why);
        }
    }

    fn end(&mut self, on_event: &mut impl FnMut(Event<'_>)) {
        if let Some(why) = self.error.take() {
            let tail = std::mem::take(&mut self.tail_seen);
            match why {
                // Hunting and nothing came before the delimiter: nothing was lost.
                DropReason::Partial if !tail => {}
                DropReason::Partial => {
                    self.stats.partial += 1;
                    on_event(Event::Dropped(why));
                }
                _ => on_event(Event::Dropped(why)),
            }
        } else if self.buf.len() > 2 {
            self.stats.frames += 1;
            on_event(Event::Frame(&self.buf));
        } else if !self.buf.is_empty() {
            self.stats.runts += 1;
            on_event(Event::Dropped(DropReason::Runt));
        }
        self.buf.clear();
    }
}

/// The framing of a serial line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Framing {
    /// RFC 1055 SLIP.
    #[default]
    Slip,
    /// 6-bit printable SLIP.
    Slip6,
    /// SLIP with RFC 1144 TCP/IP header compression.
    Cslip,
}

impl Framing {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Framing::Slip => "slip",
            Framing::Slip6 => "slip6",
            Framing::Cslip => "cslip",
        }
    }

    /// Line bytes for one packet of `len` bytes in the worst case (CSLIP and SLIP: every
    /// byte escaped; SLIP6: 4 per 3). Useful to size buffers and to pace.
    pub fn max_encoded_len(self, len: usize) -> usize {
        match self {
            Framing::Slip | Framing::Cslip => 2 + 2 * len,
            Framing::Slip6 => 2 + (len * 8).div_ceil(6),
        }
    }
}

impl fmt::Display for Framing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown framing name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownFraming(pub String);

impl fmt::Display for UnknownFraming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown framing {:?} (expected slip, slip6 or cslip)",
            self.0
        )
    }
}

impl std::error::Error for UnknownFraming {}

impl FromStr for Framing {
    type Err = UnknownFraming;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "slip" => Ok(Framing::Slip),
            "slip6" => Ok(Framing::Slip6),
            "cslip" => Ok(Framing::Cslip),
            other => Err(UnknownFraming(other.to_string())),
        }
    }
}

#[cfg(test)]
mod testutil;

#[cfg(test)]
mod tests;
