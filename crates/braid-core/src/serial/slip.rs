//! SLIP (RFC 1055) framing, byte for byte as Linux `slip_esc` / `slip_unesc`.
//!
//! A frame on the wire is `END, escaped bytes, END`. Inside the frame `END` (0xC0) is sent
//! as `ESC ESC_END` (0xDB 0xDC) and `ESC` (0xDB) as `ESC ESC_ESC` (0xDB 0xDD).
//!
//! The decoder follows the kernel's quirks exactly:
//! - a frame is delivered at `END` only if no error was seen and it holds more than 2 bytes;
//! - after `ESC`, `ESC_END`/`ESC_ESC` are translated; any other byte is stored as it is
//!   and the escape flag *stays set* (so `ESC 0x41 ESC_END` yields `0x41 0xC0`);
//!   `ESC_END`/`ESC_ESC` without a preceding `ESC` are stored as themselves;
//! - when the buffer is full, the frame is marked bad and dropped at the next `END`.

use super::{DropReason, Event, RxBuf};

/// Frame delimiter.
pub const END: u8 = 0xC0;
/// Escape byte.
pub const ESC: u8 = 0xDB;
/// `ESC ESC_END` stands for a data `END`.
pub const ESC_END: u8 = 0xDC;
/// `ESC ESC_ESC` stands for a data `ESC`.
pub const ESC_ESC: u8 = 0xDD;

/// Appends the SLIP frame for `packet` to `out`: a leading `END` (it flushes whatever line
/// noise the receiver has collected), the escaped bytes and a trailing `END`.
pub fn encode(packet: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(packet));
    out.push(END);
    for &b in packet {
        match b {
            END => out.extend_from_slice(&[ESC, ESC_END]),
            ESC => out.extend_from_slice(&[ESC, ESC_ESC]),
            _ => out.push(b),
        }
    }
    out.push(END);
}

/// The exact number of bytes [`encode`] appends for `packet`.
pub fn encoded_len(packet: &[u8]) -> usize {
    2 + packet.len() + packet.iter().filter(|&&b| b == END || b == ESC).count()
}

/// Counters of a streaming decoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// Frames delivered.
    pub frames: u64,
    /// Frames dropped because they did not fit in the buffer (kernel `rx_over_errors`).
    pub overruns: u64,
    /// Frames of 1 or 2 bytes dropped at `END` (the kernel drops them silently).
    pub runts: u64,
    /// Frames dropped because the line layer reported an error ([`Decoder::line_error`]),
    /// counted once per frame (kernel `rx_errors`).
    pub line_errors: u64,
    /// Frame tails dropped after [`Decoder::hunt`] (not in the kernel, which takes them
    /// as a frame).
    pub partial: u64,
}

/// Streaming SLIP decoder (kernel `slip_unesc`). Feed it any chunks of line bytes.
#[derive(Clone, Debug)]
pub struct Decoder {
    rx: RxBuf,
    escape: bool,
}

impl Decoder {
    /// A decoder for a line of this MTU. The frame buffer holds `max(2·mtu, 1152)` bytes,
    /// as the kernel's `sl_alloc_bufs` (`buffsize`; its 4 spare bytes are never filled).
    pub fn new(mtu: usize) -> Self {
        Self::with_max_frame(super::max_frame_for_mtu(mtu))
    }

    /// A decoder that accepts frames of up to `max_frame` decoded bytes.
    pub fn with_max_frame(max_frame: usize) -> Self {
        Decoder {
            rx: RxBuf::new(max_frame),
            escape: false,
        }
    }

    /// The largest frame this decoder delivers.
    pub fn max_frame(&self) -> usize {
        self.rx.max
    }

    /// Counters so far.
    pub fn stats(&self) -> DecoderStats {
        self.rx.stats
    }

    /// The tty reported a framing/parity/overrun error on a byte: the current frame is
    /// dropped at the next `END` (kernel `slip_receive_buf` with a flag byte).
    pub fn line_error(&mut self) {
        self.rx.set_error(DropReason::LineError);
    }

    /// The line was (re)opened with bytes perhaps already under way: drop what comes
    /// before the first `END`, the tail of a frame whose start was not seen. A sender
    /// that starts its frames with `END` (braid, the kernel, RFC 1055's sample) loses
    /// nothing. The kernel has no such state: it takes the tail as a frame.
    pub fn hunt(&mut self) {
        self.escape = false;
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
        for &b in input {
            let s = match b {
                END => {
                    self.escape = false;
                    self.rx.end(on_event);
                    continue;
                }
                ESC => {
                    self.escape = true;
                    continue;
                }
                ESC_ESC if self.escape => {
                    self.escape = false;
                    ESC
                }
                ESC_END if self.escape => {
                    self.escape = false;
                    END
                }
                // Any other byte after ESC is stored as is; the escape flag stays set.
                other => other,
            };
            self.rx.push(s);
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
        let mut out = vec![0xAA]; // appends after what is there
        encode(&[0x01, 0xC0, 0x02, 0xDB, 0xDC, 0xDD], &mut out);
        assert_eq!(
            out,
            [0xAA, 0xC0, 0x01, 0xDB, 0xDC, 0x02, 0xDB, 0xDD, 0xDC, 0xDD, 0xC0]
        );
        assert_eq!(
            encoded_len(&[0x01, 0xC0, 0x02, 0xDB, 0xDC, 0xDD]),
            out.len() - 1
        );
        let mut e = Vec::new();
        encode(&[], &mut e);
        assert_eq!(e, [0xC0, 0xC0]);
    }

    #[test]
    fn decode_exact_and_split_anywhere() {
        let wire = [0xC0, 0x01, 0xDB, 0xDC, 0x02, 0xDB, 0xDD, 0xC0];
        for cut in 0..=wire.len() {
            let mut d = Decoder::new(296);
            let mut got = frames(&mut d, &wire[..cut]);
            got.extend(frames(&mut d, &wire[cut..]));
            assert_eq!(got, vec![vec![0x01, 0xC0, 0x02, 0xDB]], "cut at {cut}");
        }
    }

    #[test]
    fn hunting_drops_a_tail_and_only_a_tail() {
        // Opened mid-frame: the tail (escapes and all) is dropped and counted once.
        let mut d = Decoder::new(296);
        d.hunt();
        let mut ev = Vec::new();
        d.decode_events(&[0x9F, 0xDB, 0xDC, 7, 0xC0, 1, 2, 3, 0xC0], &mut |e| {
            ev.push(match e {
                Event::Frame(f) => Ok(f.to_vec()),
                Event::Dropped(why) => Err(why),
            })
        });
        assert_eq!(ev, [Err(DropReason::Partial), Ok(vec![1, 2, 3])]);
        assert_eq!(d.stats().partial, 1);
        assert_eq!(d.stats().frames, 1);
        // Opened between frames (the sender's leading END comes first): nothing lost,
        // nothing counted, also when the END comes in a chunk of its own.
        let mut d = Decoder::new(296);
        d.hunt();
        assert!(frames(&mut d, &[0xC0]).is_empty());
        assert_eq!(frames(&mut d, &[4, 5, 6, 0xC0]), vec![vec![4, 5, 6]]);
        assert_eq!(d.stats().partial, 0);
        // Without hunt the decoder is the kernel's: the tail is a frame.
        let mut d = Decoder::new(296);
        assert_eq!(frames(&mut d, &[9, 9, 9, 0xC0]), vec![vec![9, 9, 9]]);
    }

    #[test]
    fn runts_are_dropped_and_counted() {
        let mut d = Decoder::new(296);
        let got = frames(
            &mut d,
            &[0xC0, 0xC0, 1, 0xC0, 1, 2, 0xC0, 1, 2, 3, 0xC0, 0xC0],
        );
        assert_eq!(got, vec![vec![1, 2, 3]]);
        assert_eq!(
            d.stats(),
            DecoderStats {
                frames: 1,
                runts: 2,
                ..Default::default()
            }
        );
    }

    #[test]
    fn escape_followed_by_other_byte_keeps_flag() {
        let mut d = Decoder::new(296);
        // ESC 'A' -> 'A' stored, escape still set, so the next ESC_END becomes END.
        let got = frames(&mut d, &[0xC0, 0xDB, 0x41, 0xDC, 0x42, 0xC0]);
        assert_eq!(got, vec![vec![0x41, 0xC0, 0x42]]);
        // Without a preceding ESC, ESC_END and ESC_ESC are plain data.
        let got = frames(&mut d, &[0xDC, 0xDD, 0x43, 0xC0]);
        assert_eq!(got, vec![vec![0xDC, 0xDD, 0x43]]);
        // END clears the escape flag.
        let got = frames(&mut d, &[0xDB, 0xC0, 0xDC, 0xDC, 0xDC, 0xC0]);
        assert_eq!(got, vec![vec![0xDC, 0xDC, 0xDC]]);
        // ESC ESC ESC_ESC -> one ESC.
        let got = frames(&mut d, &[1, 0xDB, 0xDB, 0xDD, 2, 0xC0]);
        assert_eq!(got, vec![vec![1, 0xDB, 2]]);
    }

    #[test]
    fn overrun_drops_frame_at_next_end() {
        let mut d = Decoder::new(296);
        assert_eq!(d.max_frame(), 1152);
        let mut wire = vec![0xC0];
        wire.extend(std::iter::repeat_n(7u8, 1152));
        wire.push(0xC0);
        assert_eq!(frames(&mut d, &wire), vec![vec![7u8; 1152]]);
        let mut wire = vec![0xC0];
        wire.extend(std::iter::repeat_n(7u8, 1153));
        wire.extend([0xC0, 1, 2, 3, 0xC0]);
        assert_eq!(frames(&mut d, &wire), vec![vec![1, 2, 3]]);
        assert_eq!(d.stats().overruns, 1);
        assert_eq!(Decoder::new(1500).max_frame(), 3000);
    }

    #[test]
    fn line_error_drops_current_frame_only() {
        let mut d = Decoder::new(296);
        let mut evs = Vec::new();
        let rec = |d: &mut Decoder, b: &[u8], evs: &mut Vec<String>| {
            d.decode_events(b, &mut |e| evs.push(format!("{e:?}")));
        };
        rec(&mut d, &[0xC0, 1, 2, 3], &mut evs);
        d.line_error();
        d.line_error();
        rec(&mut d, &[4, 0xC0, 5, 6, 7, 0xC0], &mut evs);
        assert_eq!(evs, ["Dropped(LineError)", "Frame([5, 6, 7])"]);
        assert_eq!(d.stats().line_errors, 1);
    }
}
