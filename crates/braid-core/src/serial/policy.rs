//! What braid derives from a serial line's speed: the datagram rate it carries, how long
//! its receiver holds an ack, and the `[bond]` defaults of a bond with serial lines. Line
//! arithmetic only (8N1, [`super::line`]); the config reader applies it.

use std::time::Duration;

use super::line::{line_micros, BITS_PER_BYTE};
use super::Framing;

/// Line bytes of a probe and its answer, about.
const PROBE_ROUND_BYTES: u64 = 36;

/// The datagram rate (bit/s) a serial line of `baud` carries with `framing` when every
/// datagram is `datagram_len` bytes: 8N1 takes 10 bits per byte, SLIP adds two `END`s per
/// frame and about one escape per 128 bytes, SLIP6 sends 4 characters per 3 bytes. CSLIP is
/// counted as SLIP (the daemon measures what compression saves and raises the rate).
pub fn serial_bps(baud: u32, framing: Framing, datagram_len: usize) -> u64 {
    let d = datagram_len.max(1) as f64;
    let line_bytes = match framing {
        Framing::Slip | Framing::Cslip => d + 2.0 + d / 128.0,
        Framing::Slip6 => (d * 4.0 / 3.0).ceil() + 2.0,
    };
    (f64::from(baud) / f64::from(BITS_PER_BYTE) * 8.0 * d / line_bytes) as u64
}

/// How long a serial line's receiver holds its ack: two full frames' line time, and at
/// least the time the line takes for 4000 bytes, so that acks (about 40 line bytes each)
/// take at most 1 % of the line whatever the packets are (an ack per two 1400-byte
/// frames at 115200 bd took 1.6 %, and the acks for the small packets of the other
/// direction, TCP's own acks, go on the data's line); within 2..=500 ms.
pub fn serial_ack_delay(baud: u32, mtu: usize) -> Duration {
    let frame_us = line_micros(mtu as u64 + 2, baud);
    let budget_us = line_micros(4000, baud);
    Duration::from_micros((2 * frame_us).max(budget_us))
        .clamp(Duration::from_millis(2), Duration::from_millis(500))
}

/// `[bond]` defaults for a bond with serial lines in bond mode, from the slowest one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SerialDefaults {
    /// `probe_interval_ms`: a probe and its answer (about 36 line bytes) take 1 % of the
    /// slowest line, `36000000 / baud` ms, within 100..=10000 ms.
    pub probe_interval: Duration,
    /// `reorder_max_ms`: 20 full frames' line time of the slowest line (the queue, and
    /// the line's own buffer, control frames and the frame on the wire besides), within
    /// 200..=10000 ms. A packet on one line may arrive as much later than the next one on
    /// another as the lines' queues differ; a shorter wait gives up on packets that are
    /// only late and TCP retransmits them (waits of 1.49 s were seen with an 8-frame
    /// queue at 115200 bd, MTU 900). Lost packets do not wait this long: once every line
    /// has delivered a later one, a gap is given up.
    pub reorder_max: Duration,
    /// `queue_max_delay_ms`: 8 full frames' line time, within 100..=10000 ms. With 16,
    /// CUBIC kept every line's queue full and the spread between lines beyond any
    /// reorder wait (`docs/serial.md`); a drop costs a retransmission but no line time.
    pub queue_max_delay: Duration,
}

impl SerialDefaults {
    /// The defaults for lines of `baud` carrying frames of `frame_bytes` line bytes (the
    /// lab's tables, whose TCP segments are smaller than the line's MTU, use this).
    pub fn for_line(baud: u32, frame_bytes: u64) -> Self {
        Self::from_frame(baud, line_micros(frame_bytes, baud))
    }

    /// The defaults for a bond whose serial lines (in bond mode) have these `(baud, mtu)`:
    /// the slowest baud, and the longest full frame; `None` without a line.
    pub fn for_lines(lines: impl Iterator<Item = (u32, usize)> + Clone) -> Option<Self> {
        let slowest_frame_us = lines
            .clone()
            .map(|(baud, mtu)| line_micros(mtu as u64 + 2, baud))
            .max()?;
        let min_baud = lines.map(|(baud, _)| baud).min()?;
        Some(Self::from_frame(min_baud, slowest_frame_us))
    }

    fn from_frame(min_baud: u32, frame_us: u64) -> Self {
        let ms = |x: u64, lo: u64| Duration::from_millis(x.clamp(lo, 10_000));
        // 1 % of the line: the probe round's line time times 100, in ms.
        let probe_ms = line_micros(PROBE_ROUND_BYTES * 100, min_baud) / 1000;
        SerialDefaults {
            probe_interval: ms(probe_ms, 100),
            reorder_max: ms(20 * frame_us / 1000, 200),
            queue_max_delay: ms(8 * frame_us / 1000, 100),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_interval_is_one_percent_of_the_slowest_line() {
        for baud in [300, 1200, 9600, 19_200, 57_600, 115_200, 460_800, 4_000_000] {
            let d = SerialDefaults::for_line(baud, 1422);
            let old = Duration::from_millis((36_000_000 / u64::from(baud)).clamp(100, 10_000));
            assert_eq!(d.probe_interval, old, "{baud}");
        }
        let d = SerialDefaults::for_lines([(115_200, 1420), (9600, 576)].into_iter());
        assert_eq!(
            d,
            Some(SerialDefaults::from_frame(
                9600,
                line_micros(1422, 115_200).max(line_micros(578, 9600))
            ))
        );
        assert_eq!(SerialDefaults::for_lines(std::iter::empty()), None);
    }
}
