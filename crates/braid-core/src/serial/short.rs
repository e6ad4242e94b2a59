//! The short data header of serial lines (`docs/wire.md`, "Short data header").
//!
//! On a serial line in bond mode the 20-byte data header of a plaintext `Data` or
//! `PinnedData` datagram is replaced by 7 bytes, per line and lossless:
//!
//! ```text
//! byte 0     0x10 (Data) or 0x11 (PinnedData)
//! bytes 1-2  seq, low 16 bits
//! byte 3     path_seq, low 8 bits
//! bytes 4-6  timestamp, low 24 bits (µs)
//! ```
//!
//! The path id is the one of the last full header received on the line. The receiver
//! rebuilds each field as the value with those low bits nearest to the last data header
//! of the line (seq within ±2^15, path_seq within ±2^7 of the last + 1, timestamp within
//! ±2^23 µs). The sender ([`ShortTx`]) sends the full header whenever that could be
//! ambiguous (a jump of 2^14 or more in seq, a path_seq that is not 1..=64 ahead, a
//! timestamp 2^22 µs or more ahead or any behind), for the first data datagram of the
//! line, and every [`FULL_EVERY`]th datagram, so frames lost to line noise only ever
//! leave the receiver a recent reference. A receiver without a reference (fresh, or its
//! peer restarted and this one did not) drops short frames until a full one arrives
//! ([`ShortRx::expand`] returns `None`, counted by the caller).
//!
//! First bytes 0x10 and 0x11 are no wire version (1 plain, 2 sealed), so short and full
//! frames are told apart by their first byte. Sealed datagrams are never shortened.

use crate::wire::{nearest, MessageType, DATA_HEADER_LEN, VERSION};

/// Bytes of a short data header.
pub(super) const SHORT_HEADER_LEN: usize = 7;
/// First byte of a short `Data` header.
pub(super) const SHORT_DATA: u8 = 0x10;
/// First byte of a short `PinnedData` header.
pub(super) const SHORT_PINNED: u8 = 0x11;
/// A full header at least this often (in data datagrams of the line).
pub(super) const FULL_EVERY: u32 = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fields {
    seq: u64,
    path_seq: u32,
    ts: u32,
}

fn full_fields(h: &[u8]) -> Option<(u8, u16, Fields)> {
    if h.len() < DATA_HEADER_LEN || h.first() != Some(&VERSION) {
        return None;
    }
    let ty = *h.get(1)?;
    if ty != MessageType::Data as u8 && ty != MessageType::PinnedData as u8 {
        return None;
    }
    let path = u16::from_be_bytes([h[2], h[3]]);
    let ts = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    let mut s = [0u8; 8];
    s.copy_from_slice(&h[8..16]);
    let path_seq = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
    Some((
        ty,
        path,
        Fields {
            seq: u64::from_be_bytes(s),
            path_seq,
            ts,
        },
    ))
}

/// The sending side of one line.
#[derive(Clone, Debug, Default)]
pub(super) struct ShortTx {
    last: Option<Fields>,
    since_full: u32,
}

impl ShortTx {
    /// The header to send for a data datagram whose full header is `header` (its first
    /// 20 bytes): the 7-byte short form written into `out` (returns `Some(7)`), or
    /// `None` when the full header must go as it is. Anything that is not a plaintext
    /// data header returns `None` and leaves the state alone.
    pub(super) fn shorten(
        &mut self,
        header: &[u8],
        out: &mut [u8; SHORT_HEADER_LEN],
    ) -> Option<usize> {
        let (ty, _path, f) = full_fields(header)?;
        let short = match self.last {
            Some(l) if self.since_full + 1 < FULL_EVERY => {
                let dseq = f.seq.wrapping_sub(l.seq) as i64;
                let dps = f.path_seq.wrapping_sub(l.path_seq);
                let dts = f.ts.wrapping_sub(l.ts);
                (-(1 << 14)..(1 << 14)).contains(&dseq)
                    && (1..=64).contains(&dps)
                    && dts < (1 << 22)
            }
            _ => false,
        };
        self.last = Some(f);
        if !short {
            self.since_full = 0;
            return None;
        }
        self.since_full += 1;
        out[0] = if ty == MessageType::PinnedData as u8 {
            SHORT_PINNED
        } else {
            SHORT_DATA
        };
        out[1..3].copy_from_slice(&(f.seq as u16).to_be_bytes());
        out[3] = f.path_seq as u8;
        out[4..7].copy_from_slice(&f.ts.to_be_bytes()[1..4]);
        Some(SHORT_HEADER_LEN)
    }
}

/// The receiving side of one line.
#[derive(Clone, Debug, Default)]
pub(super) struct ShortRx {
    path: u16,
    last: Option<Fields>,
}

impl ShortRx {
    /// True when `frame` starts with a short data header.
    pub(super) fn is_short(frame: &[u8]) -> bool {
        frame.len() >= SHORT_HEADER_LEN && matches!(frame[0], SHORT_DATA | SHORT_PINNED)
    }

    /// A full data header received on the line: the new reference. Anything else is
    /// ignored.
    pub(super) fn observe_full(&mut self, header: &[u8]) {
        if let Some((_, path, f)) = full_fields(header) {
            self.path = path;
            self.last = Some(f);
        }
    }

    /// Rebuild the 20-byte header of a short frame (`frame` starts with the 7 short
    /// bytes) into `out`. `None` without a reference or when `frame` is not short.
    pub(super) fn expand(&mut self, frame: &[u8], out: &mut [u8; DATA_HEADER_LEN]) -> Option<()> {
        if !Self::is_short(frame) {
            return None;
        }
        let l = self.last?;
        let seq = nearest(
            l.seq,
            u64::from(u16::from_be_bytes([frame[1], frame[2]])),
            16,
        );
        let path_seq = nearest(
            u64::from(l.path_seq.wrapping_add(1)),
            u64::from(frame[3]),
            8,
        ) as u32;
        let ts = nearest(
            u64::from(l.ts),
            u64::from(u32::from_be_bytes([0, frame[4], frame[5], frame[6]])),
            24,
        ) as u32;
        let ty = if frame[0] == SHORT_PINNED {
            MessageType::PinnedData
        } else {
            MessageType::Data
        };
        out[0] = VERSION;
        out[1] = ty as u8;
        out[2..4].copy_from_slice(&self.path.to_be_bytes());
        out[4..8].copy_from_slice(&ts.to_be_bytes());
        out[8..16].copy_from_slice(&seq.to_be_bytes());
        out[16..20].copy_from_slice(&path_seq.to_be_bytes());
        self.last = Some(Fields { seq, path_seq, ts });
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{emit_data_header_as, Header};
    use proptest::prelude::*;

    fn header(seq: u64, path_seq: u32, ts: u32, pinned: bool) -> [u8; DATA_HEADER_LEN] {
        let mut b = [0u8; DATA_HEADER_LEN];
        let ty = if pinned {
            MessageType::PinnedData
        } else {
            MessageType::Data
        };
        emit_data_header_as(
            &Header {
                path: 7,
                timestamp: ts,
            },
            ty,
            seq,
            path_seq,
            &mut b,
        )
        .unwrap();
        b
    }

    /// Send `hs` through a ShortTx and a ShortRx, dropping the frames in `lost`.
    fn run(hs: &[[u8; DATA_HEADER_LEN]], lost: &[usize]) -> (Vec<[u8; DATA_HEADER_LEN]>, usize) {
        let (mut tx, mut rx) = (ShortTx::default(), ShortRx::default());
        let mut got = Vec::new();
        let mut shorts = 0;
        for (i, h) in hs.iter().enumerate() {
            let mut s = [0u8; SHORT_HEADER_LEN];
            let frame: Vec<u8> = match tx.shorten(h, &mut s) {
                Some(n) => {
                    shorts += 1;
                    s[..n].to_vec()
                }
                None => h.to_vec(),
            };
            if lost.contains(&i) {
                continue;
            }
            if ShortRx::is_short(&frame) {
                let mut out = [0u8; DATA_HEADER_LEN];
                if rx.expand(&frame, &mut out).is_some() {
                    got.push(out);
                }
            } else {
                rx.observe_full(&frame);
                got.push(h.to_owned());
            }
        }
        (got, shorts)
    }

    #[test]
    fn a_line_of_a_bundle_round_trips_short() {
        // seq advances by 1-3 (the other lines take the rest), path_seq by 1, 120 ms a
        // frame, across the 16-bit seq and 24-bit timestamp wraps.
        let mut hs = Vec::new();
        let (mut seq, mut ts) = (65_500u64, 0x00FF_0000u32);
        for k in 0..300u32 {
            hs.push(header(seq, 1000 + k, ts, k % 7 == 0));
            seq += u64::from(1 + k % 3);
            ts = ts.wrapping_add(120_000);
        }
        let (got, shorts) = run(&hs, &[]);
        assert_eq!(got, hs);
        // The first, and one in FULL_EVERY, go full.
        assert_eq!(shorts, 300 - 300usize.div_ceil(FULL_EVERY as usize));
        let mut s = [0u8; SHORT_HEADER_LEN];
        let mut tx = ShortTx::default();
        assert_eq!(tx.shorten(&hs[0], &mut s), None);
        assert_eq!(tx.shorten(&hs[1], &mut s), Some(7));
        // 65501 -> low 16 bits 0xFFDD; path_seq 1001 -> 0xE9; ts low 24 bits.
        let ts1 = 0x00FF_0000u32 + 120_000;
        assert_eq!(
            s,
            [
                0x10,
                0xFF,
                0xDD,
                0xE9,
                (ts1 >> 16) as u8,
                (ts1 >> 8) as u8,
                ts1 as u8
            ]
        );
    }

    #[test]
    fn long_gaps_and_jumps_go_full() {
        let mut tx = ShortTx::default();
        let mut s = [0u8; SHORT_HEADER_LEN];
        assert_eq!(tx.shorten(&header(10, 1, 0, false), &mut s), None);
        assert!(tx.shorten(&header(11, 2, 1000, false), &mut s).is_some());
        // An idle line: 5 s later.
        assert_eq!(tx.shorten(&header(12, 3, 5_001_000, false), &mut s), None);
        // seq jumped (another line carried 20000 packets meanwhile).
        assert_eq!(
            tx.shorten(&header(20_012, 4, 5_002_000, false), &mut s),
            None
        );
        // path_seq skipped 100 (datagrams dropped before the line).
        assert_eq!(
            tx.shorten(&header(20_013, 104, 5_003_000, false), &mut s),
            None
        );
        // Not a plaintext data header: left alone.
        let mut probe = header(1, 1, 1, false);
        probe[1] = MessageType::Probe as u8;
        assert_eq!(tx.shorten(&probe, &mut s), None);
        let mut sealed = header(1, 1, 1, false);
        sealed[0] = crate::wire::SEALED_VERSION;
        assert_eq!(tx.shorten(&sealed, &mut s), None);
        assert!(tx
            .shorten(&header(20_014, 105, 5_004_000, false), &mut s)
            .is_some());
    }

    #[test]
    fn a_receiver_without_reference_drops_short_frames() {
        let mut rx = ShortRx::default();
        let mut out = [0u8; DATA_HEADER_LEN];
        assert_eq!(rx.expand(&[0x10, 0, 1, 2, 0, 0, 5], &mut out), None);
        assert_eq!(rx.expand(&[0x10, 0, 1], &mut out), None, "short of 7 bytes");
        rx.observe_full(&header(1, 1, 1, false));
        assert!(rx.expand(&[0x10, 0, 2, 2, 0, 0, 5], &mut out).is_some());
        assert_eq!(out, header(2, 2, 5, false));
    }

    proptest! {
        #[test]
        fn any_line_round_trips_with_losses(
            steps in proptest::collection::vec((0u64..5, 1u32..3, 0u32..500_000, any::<bool>()), 1..200),
            lost in proptest::collection::vec(0usize..200, 0..10),
            start in any::<(u64, u32, u32)>(),
        ) {
            let (mut seq, mut ps, mut ts) = (start.0 >> 1, start.1, start.2);
            let mut hs = Vec::new();
            for (ds, dps, dts, pin) in steps {
                hs.push(header(seq, ps, ts, pin));
                seq = seq.wrapping_add(ds);
                ps = ps.wrapping_add(dps);
                ts = ts.wrapping_add(dts);
            }
            let (got, _) = run(&hs, &lost);
            // Every frame that arrives and can be rebuilt is rebuilt exactly; only frames
            // before the first full one that arrives may be dropped.
            let kept: Vec<_> = hs.iter().enumerate().filter(|(i, _)| !lost.contains(i)).map(|(_, h)| *h).collect();
            prop_assert!(kept.ends_with(&got));
            if !lost.contains(&0) {
                prop_assert_eq!(got, kept);
            }
        }
    }
}
