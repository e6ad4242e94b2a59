//! Serial line framing: SLIP (RFC 1055), SLIP6 and CSLIP (RFC 1144 Van Jacobson TCP/IP
//! header compression), byte for byte as Linux drivers/net/slip.
//!
//! - [`slip`]: `encode` and a streaming [`slip::Decoder`];
//! - [`slip6`]: the 6-bit printable variant;
//! - [`cslip`]: the VJ [`cslip::Compressor`] and [`cslip::Decompressor`];
//! - [`LineEncoder`] / [`LineDecoder`]: one line's framing chosen by [`Framing`], with
//!   CSLIP state per line. Both can keep an opaque prefix (braid's data header) in front
//!   of the IP packet: only the IP packet after it is compressed.
//!
//! Everything writes into caller-provided buffers; nothing panics on any input. See
//! `docs/serial.md` for the byte layouts.

pub mod codec;
pub mod cslip;
pub mod short;
pub mod slip;
pub mod slip6;

use core::fmt;
use core::str::FromStr;

pub use codec::{is_compressible, CodecCounters, FrameCodec};
pub use cslip::{Compressor, CslipError, Decompressor, PacketType};

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
    stats: slip::DecoderStats,
}

impl RxBuf {
    fn new(max: usize) -> Self {
        RxBuf {
            // Allocated once, up to a sane bound; it grows only up to `max`.
            buf: Vec::with_capacity(max.min(1 << 16)),
            max,
            error: None,
            stats: slip::DecoderStats::default(),
        }
    }

    fn push(&mut self, b: u8) {
        if self.error.is_none() {
            if self.buf.len() < self.max {
                self.buf.push(b);
            } else {
                self.stats.overruns += 1;
                self.error = Some(DropReason::Overrun);
            }
        }
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
            on_event(Event::Dropped(why));
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

/// The sending side of one line: (for CSLIP) compress, then frame.
#[derive(Clone, Debug)]
pub struct LineEncoder {
    framing: Framing,
    compressor: Option<Compressor>,
    scratch: Vec<u8>,
}

impl LineEncoder {
    /// An encoder for `framing`; CSLIP gets 16 slots as slip.c.
    pub fn new(framing: Framing) -> Self {
        LineEncoder {
            framing,
            compressor: (framing == Framing::Cslip).then(Compressor::default),
            scratch: Vec::new(),
        }
    }

    /// The framing.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The CSLIP compressor, if any.
    pub fn compressor(&self) -> Option<&Compressor> {
        self.compressor.as_ref()
    }

    /// Appends the line bytes for one packet to `out` (for CSLIP the packet is an IPv4
    /// packet, compressed if it can be). Returns the CSLIP type, `None` for SLIP/SLIP6.
    pub fn encode(&mut self, packet: &[u8], out: &mut Vec<u8>) -> Option<PacketType> {
        self.encode_prefixed(&[], packet, out)
    }

    /// Appends the line bytes for one frame holding `prefix` (opaque, sent as it is) and
    /// then `ip_packet` (compressed for CSLIP).
    pub fn encode_prefixed(
        &mut self,
        prefix: &[u8],
        ip_packet: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<PacketType> {
        self.scratch.clear();
        self.scratch.extend_from_slice(prefix);
        let ty = match &mut self.compressor {
            Some(c) => Some(c.compress(ip_packet, &mut self.scratch)),
            None => {
                self.scratch.extend_from_slice(ip_packet);
                None
            }
        };
        match self.framing {
            Framing::Slip | Framing::Cslip => slip::encode(&self.scratch, out),
            Framing::Slip6 => slip6::encode(&self.scratch, out),
        }
        ty
    }
}

#[derive(Clone, Debug)]
enum Deframer {
    Slip(slip::Decoder),
    Slip6(slip6::Decoder),
}

/// Counters of a [`LineDecoder`] beyond its deframer's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineStats {
    /// Packets delivered.
    pub packets: u64,
    /// Frames shorter than the prefix.
    pub short_frames: u64,
    /// Frames the decompressor refused (including tossed ones).
    pub cslip_errors: u64,
}

/// The receiving side of one line: deframe, then (for CSLIP) decompress. A dropped frame
/// makes the decompressor toss until an explicit connection id arrives.
#[derive(Clone, Debug)]
pub struct LineDecoder {
    deframer: Deframer,
    decompressor: Option<Decompressor>,
    prefix_len: usize,
    scratch: Vec<u8>,
    stats: LineStats,
}

impl LineDecoder {
    /// A decoder for `framing` on a line of this MTU (the frame limit is
    /// [`max_frame_for_mtu`]).
    pub fn new(framing: Framing, mtu: usize) -> Self {
        let deframer = match framing {
            Framing::Slip | Framing::Cslip => Deframer::Slip(slip::Decoder::new(mtu)),
            Framing::Slip6 => Deframer::Slip6(slip6::Decoder::new(mtu)),
        };
        LineDecoder {
            deframer,
            decompressor: (framing == Framing::Cslip).then(Decompressor::default),
            prefix_len: 0,
            scratch: Vec::new(),
            stats: LineStats::default(),
        }
    }

    /// Frames start with `n` opaque bytes that are passed through; only what follows is
    /// decompressed. Frames shorter than `n` are dropped.
    pub fn with_prefix_len(mut self, n: usize) -> Self {
        self.prefix_len = n;
        self
    }

    /// Deframer counters.
    pub fn frame_stats(&self) -> slip::DecoderStats {
        match &self.deframer {
            Deframer::Slip(d) => d.stats(),
            Deframer::Slip6(d) => d.stats(),
        }
    }

    /// Line-level counters.
    pub fn stats(&self) -> LineStats {
        self.stats
    }

    /// The CSLIP decompressor, if any.
    pub fn decompressor(&self) -> Option<&Decompressor> {
        self.decompressor.as_ref()
    }

    /// The tty reported an error on a byte: the current frame will be dropped.
    pub fn line_error(&mut self) {
        match &mut self.deframer {
            Deframer::Slip(d) => d.line_error(),
            Deframer::Slip6(d) => d.line_error(),
        }
    }

    /// Decodes line bytes, calling `on_packet` with each packet (prefix included).
    pub fn decode(&mut self, input: &[u8], on_packet: &mut impl FnMut(&[u8])) {
        let decomp = &mut self.decompressor;
        let scratch = &mut self.scratch;
        let stats = &mut self.stats;
        let prefix_len = self.prefix_len;
        let mut on_event = |ev: Event<'_>| match ev {
            Event::Dropped(_) => {
                if let Some(d) = decomp.as_mut() {
                    d.toss();
                }
            }
            Event::Frame(f) => {
                let Some(d) = decomp.as_mut() else {
                    if f.len() < prefix_len {
                        stats.short_frames += 1;
                    } else {
                        stats.packets += 1;
                        on_packet(f);
                    }
                    return;
                };
                let (Some(prefix), Some(body)) = (f.get(..prefix_len), f.get(prefix_len..)) else {
                    stats.short_frames += 1;
                    d.toss();
                    return;
                };
                scratch.clear();
                scratch.extend_from_slice(prefix);
                match d.decompress(body, scratch) {
                    Ok(_) => {
                        stats.packets += 1;
                        on_packet(scratch);
                    }
                    Err(_) => stats.cslip_errors += 1,
                }
            }
        };
        match &mut self.deframer {
            Deframer::Slip(d) => d.decode_events(input, &mut on_event),
            Deframer::Slip6(d) => d.decode_events(input, &mut on_event),
        }
    }
}

#[cfg(test)]
mod testutil;

#[cfg(test)]
mod tests;
