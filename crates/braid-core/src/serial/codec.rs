//! The frame codec of a serial line, both ways, without IO: braid datagrams (or, in
//! `raw-ip` mode, IP packets) to line bytes and line bytes back. It is the codec the
//! daemon runs, the fuzz targets exercise and the interop tests check against Linux's
//! slip driver.
//!
//! **Frames.** Every frame holds one braid datagram. A data datagram (version 1, type
//! Data or PinnedData, longer than its 20-byte header) travels with the 7-byte short
//! header when it can ([`super::short`]) and, with CSLIP, its IP packet compressed behind
//! it; every other datagram (probes, acks, sealed datagrams) travels as it is. The
//! receiver tells them apart by the first bytes, which compression never touches
//! (`docs/serial.md`). With [`FrameCodec::with_crc`] (a line without keys) every frame
//! ends in a CRC-32 of the bytes before it (as sent: short header, compressed packet),
//! big-endian, so line noise is a counted drop (`rx_crc_errors`) rather than a wrong
//! header or packet; a sealed datagram's tag does that job on a sealed line. In `raw-ip`
//! mode ([`FrameCodec::raw_ip`]) a frame is one IP packet, nothing else, byte for byte
//! what Linux's slip driver sends and expects.

use super::short::{ShortRx, ShortTx, SHORT_HEADER_LEN};
use super::{slip, slip6, Compressor, Decompressor, Event, Framing, PacketType};
use crate::wire::{MessageType, DATA_HEADER_LEN, VERSION};

/// What a [`FrameCodec`] counted while decoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CodecCounters {
    /// Frames decoded and handed on.
    pub rx_frames: u64,
    /// Frames the deframer dropped (overrun, runt, line error, the tail of a frame under
    /// way when the line was opened).
    pub rx_bad_frames: u64,
    /// Data frames the CSLIP decompressor refused (including tossed ones).
    pub rx_cslip_errors: u64,
    /// Frames whose CRC-32 did not match (line noise), on a line with the CRC.
    pub rx_crc_errors: u64,
    /// Short-header data frames dropped: no full header seen on the line yet.
    pub rx_short_dropped: u64,
}

#[derive(Clone, Debug)]
enum Deframer {
    Slip(slip::Decoder),
    Slip6(slip6::Decoder),
}

impl Deframer {
    /// A fresh deframer hunts: the line may be mid-frame when this end starts to listen
    /// (the far end was open first, or a flush at open took a frame's start), and that
    /// frame's tail must not be taken for a frame.
    fn new(framing: Framing, mtu: usize) -> Self {
        match framing {
            Framing::Slip | Framing::Cslip => {
                let mut d = slip::Decoder::new(mtu);
                d.hunt();
                Deframer::Slip(d)
            }
            Framing::Slip6 => {
                let mut d = slip6::Decoder::new(mtu);
                d.hunt();
                Deframer::Slip6(d)
            }
        }
    }
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
    mtu: usize,
    /// `raw-ip`: frames hold IP packets (CSLIP compresses all of each), not braid datagrams.
    raw_ip: bool,
    /// Frames end in a CRC-32.
    crc: bool,
    compressor: Option<Compressor>,
    deframer: Deframer,
    decompressor: Option<Decompressor>,
    scratch: Vec<u8>,
    short_tx: ShortTx,
    short_rx: ShortRx,
    counters: CodecCounters,
}

impl FrameCodec {
    /// Fresh state for a bond line of `framing` whose largest datagram is `mtu` bytes.
    pub fn new(framing: Framing, mtu: usize) -> Self {
        FrameCodec {
            framing,
            mtu,
            raw_ip: false,
            crc: false,
            compressor: (framing == Framing::Cslip).then(Compressor::default),
            deframer: Deframer::new(framing, mtu),
            decompressor: (framing == Framing::Cslip).then(Decompressor::default),
            scratch: Vec::with_capacity(mtu + 64),
            short_tx: ShortTx::default(),
            short_rx: ShortRx::default(),
            counters: CodecCounters::default(),
        }
    }

    /// Fresh state for a `raw-ip` line: every frame is one IP packet of at most `mtu`
    /// bytes, as a classic SLIP/CSLIP/SLIP6 peer (Linux's slip driver) sends and expects.
    pub fn raw_ip(framing: Framing, mtu: usize) -> Self {
        FrameCodec {
            raw_ip: true,
            ..FrameCodec::new(framing, mtu)
        }
    }

    /// The same codec with a CRC-32 at the end of every frame (a bond line without keys).
    pub fn with_crc(self) -> Self {
        FrameCodec { crc: true, ..self }
    }

    /// Fresh framing state (the line was reopened: CSLIP slots, short-header references
    /// and a half-read frame are forgotten), the same settings; the counters go on.
    pub fn reset(&mut self) {
        let fresh = FrameCodec::new(self.framing, self.mtu);
        *self = FrameCodec {
            raw_ip: self.raw_ip,
            crc: self.crc,
            counters: self.counters,
            ..fresh
        };
    }

    /// The framing.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// True in `raw-ip` mode.
    pub fn is_raw_ip(&self) -> bool {
        self.raw_ip
    }

    /// True when frames end in a CRC-32.
    pub fn has_crc(&self) -> bool {
        self.crc
    }

    /// What decoding counted.
    pub fn counters(&self) -> CodecCounters {
        self.counters
    }

    /// The CSLIP compressor (sending side), if any.
    pub fn compressor(&self) -> Option<&Compressor> {
        self.compressor.as_ref()
    }

    /// The CSLIP decompressor (receiving side), if any.
    pub fn decompressor(&self) -> Option<&Decompressor> {
        self.decompressor.as_ref()
    }

    /// The deframer's counters.
    pub fn frame_stats(&self) -> slip::DecoderStats {
        match &self.deframer {
            Deframer::Slip(d) => d.stats(),
            Deframer::Slip6(d) => d.stats(),
        }
    }

    /// The tty reported an error on a byte (parity, framing): the frame being read is
    /// dropped at its end.
    pub fn line_error(&mut self) {
        match &mut self.deframer {
            Deframer::Slip(d) => d.line_error(),
            Deframer::Slip6(d) => d.line_error(),
        }
    }

    /// Append the line bytes of one datagram (`raw-ip`: one IP packet) to `out`. A
    /// plaintext data datagram goes with the short header when it can
    /// ([`super::short`]), its IP packet compressed with CSLIP. Returns what CSLIP made of
    /// the IP packet (`None` when nothing was compressed: SLIP, SLIP6, a control or
    /// sealed datagram).
    pub fn encode(&mut self, datagram: &[u8], out: &mut Vec<u8>) -> Option<PacketType> {
        if self.raw_ip {
            return self.frame(&[], datagram, out);
        }
        if !is_compressible(datagram) {
            // Control and sealed datagrams: as they are (a prefix is never compressed).
            return self.frame(datagram, &[], out);
        }
        let (head, ip) = datagram.split_at(DATA_HEADER_LEN);
        let mut short = [0u8; SHORT_HEADER_LEN];
        let head = match self.short_tx.shorten(head, &mut short) {
            Some(n) => short.get(..n).unwrap_or(head),
            None => head,
        };
        self.frame(head, ip, out)
    }

    /// One frame: `prefix` as it is, then `ip` (compressed with CSLIP), then the CRC.
    fn frame(&mut self, prefix: &[u8], ip: &[u8], out: &mut Vec<u8>) -> Option<PacketType> {
        let f = &mut self.scratch;
        f.clear();
        f.extend_from_slice(prefix);
        let ty = match &mut self.compressor {
            Some(c) if !ip.is_empty() => Some(c.compress(ip, f)),
            _ => {
                f.extend_from_slice(ip);
                None
            }
        };
        if self.crc {
            let crc = crc32fast::hash(f);
            f.extend_from_slice(&crc.to_be_bytes());
        }
        match self.framing {
            Framing::Slip | Framing::Cslip => slip::encode(f, out),
            Framing::Slip6 => slip6::encode(f, out),
        }
        ty
    }

    /// Decode line bytes; `on_datagram` gets each datagram (valid during the call).
    /// Drops are counted ([`FrameCodec::counters`]).
    pub fn decode(&mut self, input: &[u8], on_datagram: &mut impl FnMut(&[u8])) {
        let decomp = &mut self.decompressor;
        let scratch = &mut self.scratch;
        let raw_ip = self.raw_ip;
        let crc = self.crc;
        let short_rx = &mut self.short_rx;
        let c = &mut self.counters;
        let mut on_event = |ev: Event<'_>| match ev {
            Event::Dropped(_) => {
                c.rx_bad_frames += 1;
                if let Some(d) = decomp.as_mut() {
                    d.toss();
                }
            }
            Event::Frame(f) => {
                let f = if crc {
                    match checked(f) {
                        Some(f) => f,
                        None => {
                            // As a lost frame: CSLIP waits for an explicit connection id.
                            c.rx_crc_errors += 1;
                            if let Some(d) = decomp.as_mut() {
                                d.toss();
                            }
                            return;
                        }
                    }
                } else {
                    f
                };
                // A data frame: its 20-byte header (as sent, or rebuilt from the short
                // one) and the IP packet after it (CSLIP: decompressed).
                let mut full = [0u8; DATA_HEADER_LEN];
                let (head, body): (&[u8], &[u8]) = if raw_ip {
                    (&[], f)
                } else if ShortRx::is_short(f) {
                    if short_rx.expand(f, &mut full).is_none() {
                        c.rx_short_dropped += 1;
                        return;
                    }
                    (&full, f.get(SHORT_HEADER_LEN..).unwrap_or(&[]))
                } else if is_compressible(f) {
                    let (head, body) = f.split_at(DATA_HEADER_LEN);
                    short_rx.observe_full(head);
                    (head, body)
                } else {
                    // Control, sealed: as it is.
                    c.rx_frames += 1;
                    on_datagram(f);
                    return;
                };
                scratch.clear();
                scratch.extend_from_slice(head);
                match decomp.as_mut() {
                    Some(d) => {
                        if d.decompress(body, scratch).is_err() {
                            c.rx_cslip_errors += 1;
                            return;
                        }
                    }
                    None => scratch.extend_from_slice(body),
                }
                c.rx_frames += 1;
                on_datagram(scratch);
            }
        };
        match &mut self.deframer {
            Deframer::Slip(d) => d.decode_events(input, &mut on_event),
            Deframer::Slip6(d) => d.decode_events(input, &mut on_event),
        }
    }
}

/// A frame's bytes before its CRC-32, if the CRC matches them.
fn checked(frame: &[u8]) -> Option<&[u8]> {
    let (body, crc) = frame.split_last_chunk::<4>()?;
    (crc32fast::hash(body) == u32::from_be_bytes(*crc)).then_some(body)
}

#[cfg(test)]
mod tests;
