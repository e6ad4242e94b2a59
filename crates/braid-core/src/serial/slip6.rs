//! SLIP6: the 6-bit printable SLIP of Linux (`slip_esc6` / `slip_unesc6`).
//!
//! A frame is `0x70` (`'p'`), the packet's bit stream cut into 6-bit groups MSB first,
//! each sent as `0x30 + v` (`'0'..='o'`), a last partial group padded with zero bits,
//! and a closing `0x70`. Every 3 packet bytes become 4 line bytes.
//!
//! The decoder ignores every byte that is neither `0x70` nor in `0x30..=0x6F` (so CR/LF or
//! spaces inserted by a terminal do no harm). It emits a byte each time 8 bits have
//! gathered; at `0x70` the leftover pad bits (always fewer than 6) are thrown away and the
//! frame is delivered if it had no error and more than 2 bytes.

use super::{DropReason, Event, RxBuf};

/// Frame delimiter (`'p'`).
pub const DELIM: u8 = 0x70;
/// The line byte for the 6-bit value 0.
pub const BASE: u8 = 0x30;

/// Appends the SLIP6 frame for `packet` to `out`.
pub fn encode(packet: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(packet));
    out.push(DELIM);
    let mut v: u16 = 0;
    let mut bits: u32 = 0;
    for &b in packet {
        v = (v << 8) | u16::from(b);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(BASE + ((v >> bits) & 0x3F) as u8);
        }
    }
    if bits > 0 {
        out.push(BASE + ((v << (6 - bits)) & 0x3F) as u8);
    }
    out.push(DELIM);
}

/// The exact number of bytes [`encode`] appends for `packet`: `2 + ceil(8·len/6)`.
pub fn encoded_len(packet: &[u8]) -> usize {
    2 + (packet.len() * 8).div_ceil(6)
}

/// Streaming SLIP6 decoder. Counters are the same as SLIP's.
#[derive(Clone, Debug)]
pub struct Decoder {
    rx: RxBuf,
    xdata: u32,
    xbits: u32,
}

impl Decoder {
    /// A decoder for a line of this MTU; the buffer is sized as for SLIP
    /// (`max(2·mtu, 1152)` decoded bytes).
    pub fn new(mtu: usize) -> Self {
        Self::with_max_frame(super::max_frame_for_mtu(mtu))
    }

    /// A decoder that accepts frames of up to `max_frame` decoded bytes.
    pub fn with_max_frame(max_frame: usize) -> Self {
        Decoder {
            rx: RxBuf::new(max_frame),
            xdata: 0,
            xbits: 0,
        }
    }

    /// The largest frame this decoder delivers.
    pub fn max_frame(&self) -> usize {
        self.rx.max
    }

    /// Counters so far.
    pub fn stats(&self) -> super::slip::DecoderStats {
        self.rx.stats
    }

    /// The tty reported an error on a byte: drop the current frame at the next delimiter.
    pub fn line_error(&mut self) {
        self.rx.set_error(DropReason::LineError);
    }

    /// Drop what comes before the first delimiter (as [`super::slip::Decoder::hunt`]).
    pub fn hunt(&mut self) {
        self.xbits = 0;
        self.xdata = 0;
        self.rx.hunt();
    }

    /// Decodes `input`, calling `on_frame` with each complete good frame.
    pub fn decode(&mut self, input: &[u8], on_frame: &mut impl FnMut(&[u8])) {
        self.decode_events(input, &mut |ev| {
            if let Event::Frame(f) = ev {
                on_frame(f)
            }
        });
    }

    /// Decodes `input`, reporting good frames and dropped ones in line order.
    pub fn decode_events(&mut self, input: &[u8], on_event: &mut impl FnMut(Event<'_>)) {
        for &s in input {
            if s == DELIM {
                self.rx.end(on_event);
                self.xbits = 0;
                self.xdata = 0;
            } else if (BASE..DELIM).contains(&s) {
                // Only the low 14 bits ever matter; masking keeps the shift defined.
                self.xdata = ((self.xdata << 6) | u32::from(s - BASE)) & 0x3FFF;
                self.xbits += 6;
                if self.xbits >= 8 {
                    self.xbits -= 8;
                    self.rx.push((self.xdata >> self.xbits) as u8);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(d: &mut Decoder, input: &[u8]) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        d.decode(input, &mut |f| v.push(f.to_vec()));
        v
    }

    #[test]
    fn encode_exact_bytes() {
        // 0x01 0x02 0x03 = 000000 010000 001000 000011 -> '0' '@' '8' '3'
        let mut out = Vec::new();
        encode(&[0x01, 0x02, 0x03], &mut out);
        assert_eq!(out, b"p0@83p");
        // 0xFF = 111111 11(0000) -> 'o' '`'   (0x30+63 = 0x6F, 0x30+48 = 0x60)
        out.clear();
        encode(&[0xFF], &mut out);
        assert_eq!(out, [0x70, 0x6F, 0x60, 0x70]);
        // 0xC0 0xDB: 110000 001101 1011(00) -> 0x60 0x3D 0x5C
        out.clear();
        encode(&[0xC0, 0xDB], &mut out);
        assert_eq!(out, [0x70, 0x60, 0x3D, 0x5C, 0x70]);
        assert_eq!(encoded_len(&[0xC0, 0xDB]), out.len());
        out.clear();
        encode(&[], &mut out);
        assert_eq!(out, b"pp");
    }

    #[test]
    fn hunting_drops_a_tail() {
        let mut d = Decoder::new(296);
        d.hunt();
        let mut wire = b"@83".to_vec(); // the end of "p0@83p"
        wire.extend_from_slice(b"p");
        encode(&[4, 5, 6], &mut wire);
        assert_eq!(frames(&mut d, &wire), vec![vec![4, 5, 6]]);
        assert_eq!(d.stats().partial, 1);
    }

    #[test]
    fn decode_ignores_foreign_bytes_and_pad_bits() {
        let mut d = Decoder::new(296);
        // CR/LF, spaces and high bytes in the middle are ignored.
        let got = frames(&mut d, b"p0\r\n@ 8\xff3p");
        assert_eq!(got, vec![vec![1, 2, 3]]);
        // Four bytes: 32 bits -> 6 chars (36 bits), 4 pad bits dropped.
        let mut wire = Vec::new();
        encode(&[9, 8, 7, 6], &mut wire);
        assert_eq!(wire.len(), 8);
        assert_eq!(frames(&mut d, &wire), vec![vec![9, 8, 7, 6]]);
        // Nonzero pad bits are ignored too (`'o'` as the last char of 0xFF 0xFF 0xFF 0xFF).
        let mut wire = Vec::new();
        encode(&[0xFF; 4], &mut wire);
        // 32 bits: five full groups of 111111, then 11 + 0000 pad = 110000 -> 0x60.
        assert_eq!(wire, [0x70, 0x6F, 0x6F, 0x6F, 0x6F, 0x6F, 0x60, 0x70]);
        wire[6] = 0x6F; // pad bits set to 1111
        assert_eq!(frames(&mut d, &wire), vec![vec![0xFF; 4]]);
        // Runts (<= 2 bytes) are dropped.
        let mut wire = Vec::new();
        encode(&[1, 2], &mut wire);
        assert!(frames(&mut d, &wire).is_empty());
        assert_eq!(d.stats().runts, 1);
    }
}
