//! The folded header: how a version-1 datagram travels inside a sealed (version 4)
//! transport datagram (`docs/wire.md`, "Sealed datagrams").
//!
//! The sealed envelope's header already says "braid" (its version) and carries a kind
//! byte, so the version-1 header is folded into it rather than carried whole:
//!
//! - the version-1 `version` and `type` bytes go: the envelope's kind byte is
//!   `0x10 + type`, authenticated as associated data;
//! - the path id shrinks to one byte: the sender's *wire path id*, a number from 0 to 255
//!   it gives each of its live paths (at most 64), which the receiver only compares;
//! - `seq` shrinks to its low 32 bits: the receiver rebuilds the 64-bit value nearest to
//!   the highest `seq` it accepted from the peer ([`SeqRef`]);
//! - everything else (timestamp, `path_seq`, the parts' fields, control bodies, payload)
//!   is carried as it is.
//!
//! ```text
//! folded Data / PinnedData (13 bytes + payload; version 1: 20)
//!   0      wire path id
//!   1..5   timestamp (u32)
//!   5..9   seq, low 32 bits
//!   9..13  path_seq (u32)
//!   13..   payload
//! folded DataPart (16 bytes + part; version 1: 23): as Data, then part, parts, kind
//! folded Probe / ProbeAck / Ack (version-1 length - 3):
//!   0      wire path id
//!   1..5   timestamp
//!   5..    the version-1 body (bytes 8.. of the version-1 datagram)
//! ```
//!
//! The receiver rebuilds the version-1 datagram in place, in the bytes the envelope's
//! header and the folded header occupied ([`unfold`]), so the bond parses, reorders and
//! counts exactly what it would have without sealing.

use core::ops::Range;

use super::{nearest, MessageType, Packet, WireError, DATA_HEADER_LEN, HEADER_LEN, VERSION};

/// Bytes of the folded common header: wire path id, timestamp.
pub const FOLDED_HEADER_LEN: usize = 5;
/// Bytes of a folded data header (Data, PinnedData).
pub const FOLDED_DATA_HEADER_LEN: usize = 13;
/// Bytes folding takes off a data datagram (Data, PinnedData, DataPart): 7.
pub const DATA_SAVING: usize = DATA_HEADER_LEN - FOLDED_DATA_HEADER_LEN;
/// Bytes folding takes off a control datagram (Probe, ProbeAck, Ack): 3.
pub const CONTROL_SAVING: usize = HEADER_LEN - FOLDED_HEADER_LEN;

/// Whether a type carries `seq` (and so loses 7 bytes, not 3).
fn is_data(ty: MessageType) -> bool {
    matches!(
        ty,
        MessageType::Data | MessageType::PinnedData | MessageType::DataPart
    )
}

fn saving(ty: MessageType) -> usize {
    if is_data(ty) {
        DATA_SAVING
    } else {
        CONTROL_SAVING
    }
}

/// Bytes of the folded form of a version-1 datagram of type `ty` and `len` bytes.
pub fn folded_len(ty: MessageType, len: usize) -> usize {
    len.saturating_sub(saving(ty))
}

/// Fold, in place, the version-1 datagram `buf[at..at + len]`, with `wire_path` as its
/// path id. The folded form ends where the datagram ends and starts 7 bytes in for data,
/// 3 for control messages: its body (the payload and, for data, `seq`'s low half and
/// `path_seq`) is already where it belongs, and only the path id and the timestamp are
/// written. Returns the type (the envelope's kind byte carries it) and where the folded
/// form starts. Errors: the datagram does not parse (its [`WireError`]; nothing
/// written) or does not fit in `buf` (`BufferTooSmall`).
pub fn fold_in_place(
    buf: &mut [u8],
    at: usize,
    len: usize,
    wire_path: u8,
) -> Result<(MessageType, usize), WireError> {
    let end = at.checked_add(len).ok_or(WireError::BufferTooSmall)?;
    let v1 = buf.get_mut(at..end).ok_or(WireError::BufferTooSmall)?;
    let ty = Packet::new_checked(&*v1)?.message_type();
    let s = saving(ty);
    // Data: the timestamp moves over `seq`'s high half, which the folded form drops.
    // Control: it is already in place.
    v1.copy_within(4..8, s + 1);
    v1[s] = wire_path;
    Ok((ty, at + s))
}

/// The receiver's reference for rebuilding `seq`: the highest it accepted from the peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqRef(Option<u64>);

impl SeqRef {
    /// The 64-bit `seq` with low 32 bits `low`: the one nearest to the reference (the low
    /// bits themselves before the first).
    pub fn expand(&self, low: u32) -> u64 {
        match self.0 {
            Some(r) => nearest(r, u64::from(low), 32),
            None => u64::from(low),
        }
    }

    /// `seq` was accepted: the reference moves to it if it is ahead (modulo 2^64).
    pub fn accept(&mut self, seq: u64) {
        if self.0.is_none_or(|r| seq.wrapping_sub(r) as i64 > 0) {
            self.0 = Some(seq);
        }
    }

    /// The highest `seq` accepted.
    pub fn get(&self) -> Option<u64> {
        self.0
    }
}

/// The low 32 bits of `seq` that the folded form `folded` of a datagram of type `ty`
/// carries: `None` for a type without one (control messages, an unknown type) or a form
/// too short to hold it. Reads only; what [`unfold`] would rebuild `seq` from.
pub fn folded_seq(ty: u8, folded: &[u8]) -> Option<u32> {
    let ty = MessageType::try_from(ty).ok()?;
    if !is_data(ty) {
        return None;
    }
    let b = folded.get(5..9)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Rebuild, in place, the version-1 datagram whose folded form of type `ty` is
/// `buf[at..at + len]` (authenticated: call only after the tag verified). It is written
/// to end where the folded form ends and starts 3 or 7 bytes before `at` (so `at` must
/// be at least 7: the envelope's header is in front). Returns where it is in `buf`; a
/// rebuilt `seq` moves `seq_ref`. Errors: unknown type, too short for its type, a part
/// of an unknown kind (nothing in `seq_ref` changes then; `buf` may be).
pub fn unfold(
    ty: u8,
    buf: &mut [u8],
    at: usize,
    len: usize,
    seq_ref: &mut SeqRef,
) -> Result<Range<usize>, WireError> {
    let ty = MessageType::try_from(ty)?;
    let grow = saving(ty);
    if len + grow < ty.min_len() {
        return Err(WireError::Truncated);
    }
    let start = at.checked_sub(grow).ok_or(WireError::BufferTooSmall)?;
    let end = at.checked_add(len).ok_or(WireError::BufferTooSmall)?;
    let b = buf.get_mut(start..end).ok_or(WireError::BufferTooSmall)?;
    // The folded fields, read before the rebuilt header overwrites them.
    let f = grow; // where the folded form starts in `b`
    let path = b[f];
    let mut ts = [0u8; 4];
    ts.copy_from_slice(&b[f + 1..f + 5]);
    let seq = is_data(ty)
        .then(|| seq_ref.expand(u32::from_be_bytes([b[f + 5], b[f + 6], b[f + 7], b[f + 8]])));
    b[0] = VERSION;
    b[1] = ty as u8;
    b[2] = 0;
    b[3] = path;
    b[4..8].copy_from_slice(&ts);
    if let Some(seq) = seq {
        b[8..16].copy_from_slice(&seq.to_be_bytes());
    }
    Packet::new_checked(&*b)?;
    if let Some(seq) = seq {
        seq_ref.accept(seq);
    }
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{emit, parse, Ack, Header, Message};
    use core::time::Duration;

    const HDR: Header = Header {
        path: 0x0102,
        timestamp: 0x0304_0506,
    };

    fn messages() -> Vec<Message<'static>> {
        vec![
            Message::Data {
                seq: 0x1011_1213_1415_1617,
                path_seq: 0x2021_2223,
                payload: &[0xde, 0xad, 0xbe, 0xef, 0x45],
            },
            Message::PinnedData {
                seq: 0x1011_1213_1415_1617,
                path_seq: 0x2021_2223,
                payload: &[],
            },
            Message::DataPart {
                seq: 0x1011_1213_1415_1617,
                path_seq: 0x2021_2223,
                part: 1,
                parts: 3,
                kind: MessageType::PinnedData,
                payload: &[9, 8, 7],
            },
            Message::Probe {
                probe_seq: 0xa0a1_a2a3,
                epoch: Some(0xe0e1_e2e3_e4e5_e6e7),
            },
            Message::Probe {
                probe_seq: 0xa0a1_a2a3,
                epoch: None,
            },
            Message::ProbeAck {
                probe_seq: 1,
                echo_timestamp: 2,
                hold: Duration::from_micros(3),
            },
            Message::Ack(Ack {
                highest_path_seq: 0xc0c1_c2c3,
                rx_bytes: 1 << 33,
                rx_packets: 1000,
                echo_timestamp: 0xd0d1_d2d3,
                hold: Duration::from_secs(1),
            }),
        ]
    }

    fn v1(msg: &Message<'_>) -> Vec<u8> {
        let mut b = vec![0u8; msg.wire_len()];
        emit(&HDR, msg, &mut b).expect("fits");
        b
    }

    /// The folded form of `v1` (folded in place in a copy).
    fn fold(v1: &[u8], wire_path: u8) -> Result<(MessageType, Vec<u8>), WireError> {
        let mut buf = v1.to_vec();
        let (ty, start) = fold_in_place(&mut buf, 0, v1.len(), wire_path)?;
        Ok((ty, buf.split_off(start)))
    }

    /// Fold in place behind 8 bytes (where the envelope's header goes, as the sealer
    /// has it), move the folded form up to them, unfold.
    fn round_trip(v1: &[u8], seq_ref: &mut SeqRef) -> Result<Vec<u8>, WireError> {
        let mut buf = vec![0xaau8; 8 + v1.len()];
        buf[1..1 + v1.len()].copy_from_slice(v1);
        let (ty, start) = fold_in_place(&mut buf, 1, v1.len(), 0x02)?;
        let n = v1.len() + 1 - start;
        buf.copy_within(start..start + n, 8);
        let r = unfold(ty as u8, &mut buf, 8, n, seq_ref)?;
        Ok(buf[r].to_vec())
    }

    /// `folded_seq` reads what folding wrote for every data type, and nothing from the
    /// others or from a form cut short of it.
    #[test]
    fn the_folded_seq_is_read_where_folding_put_it() {
        for msg in messages() {
            let (ty, out) = fold(&v1(&msg), 7).expect("folds");
            let want = match msg {
                Message::Data { seq, .. }
                | Message::PinnedData { seq, .. }
                | Message::DataPart { seq, .. } => Some(seq as u32),
                _ => None,
            };
            assert_eq!(folded_seq(ty as u8, &out), want, "{ty:?}");
            assert_eq!(folded_seq(ty as u8, &out[..8]), None, "{ty:?} cut short");
        }
        assert_eq!(folded_seq(0x0f, &[0; 20]), None, "an unknown type");
    }

    #[test]
    fn folded_data_bytes_are_pinned() {
        let d = v1(&messages()[0]);
        let (ty, out) = fold(&d, 7).expect("folds");
        assert_eq!(ty, MessageType::Data);
        assert_eq!(out.len(), FOLDED_DATA_HEADER_LEN + 5);
        assert_eq!(
            out,
            &[
                7, // wire path id
                0x03, 0x04, 0x05, 0x06, // timestamp
                0x14, 0x15, 0x16, 0x17, // seq, low 32 bits
                0x20, 0x21, 0x22, 0x23, // path_seq
                0xde, 0xad, 0xbe, 0xef, 0x45, // payload
            ]
        );
        let part = v1(&messages()[2]);
        let (ty, out) = fold(&part, 7).expect("folds");
        assert_eq!(ty, MessageType::DataPart);
        assert_eq!(
            out,
            &[7, 3, 4, 5, 6, 0x14, 0x15, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 1, 3, 4, 9, 8, 7]
        );
        let probe = v1(&messages()[3]);
        let (ty, out) = fold(&probe, 7).expect("folds");
        assert_eq!(ty, MessageType::Probe);
        assert_eq!(out, [&[7, 3, 4, 5, 6][..], &probe[8..]].concat());
    }

    #[test]
    fn every_type_unfolds_to_the_version_1_datagram() {
        for msg in messages() {
            let d = v1(&msg);
            // The sender's seq high bits are unknown to a fresh receiver: with the
            // reference near the sender's own numbers every field comes back.
            let mut r = SeqRef(Some(0x1011_1213_0000_0000));
            let mut back = round_trip(&d, &mut r).expect("unfolds");
            // The path id is the wire path id (2), not the sender's PathId.
            assert_eq!(back[3], 0x02);
            back[2..4].copy_from_slice(&[0x01, 0x02]);
            assert_eq!(back, d, "{msg:?}");
            assert_eq!(parse(&back).map(|(_, m)| m), Ok(msg));
            assert_eq!(
                folded_len(msg.message_type(), d.len()),
                d.len() - saving(msg.message_type())
            );
        }
    }

    #[test]
    fn seq_is_rebuilt_nearest_to_the_highest_accepted() {
        let data = |seq: u64| {
            v1(&Message::Data {
                seq,
                path_seq: 1,
                payload: &[1],
            })
        };
        let seq_of = |b: &[u8]| match parse(b) {
            Ok((_, Message::Data { seq, .. })) => seq,
            other => panic!("{other:?}"),
        };
        let mut r = SeqRef::default();
        // The first one: its low 32 bits.
        let b = round_trip(&data(0x0000_0007_ffff_fffe), &mut r).expect("ok");
        assert_eq!(seq_of(&b), 0xffff_fffe);
        // Across the 2^32 boundary, ahead and behind.
        let b = round_trip(&data(0x0000_0008_0000_0003), &mut r).expect("ok");
        assert_eq!(seq_of(&b), 0x1_0000_0003);
        assert_eq!(r.get(), Some(0x1_0000_0003));
        let b = round_trip(&data(0x0000_0007_ffff_fff0), &mut r).expect("ok");
        assert_eq!(seq_of(&b), 0xffff_fff0);
        assert_eq!(r.get(), Some(0x1_0000_0003), "a late one does not move it");
        // Across 2^64.
        let mut r = SeqRef(Some(u64::MAX - 1));
        let b = round_trip(&data(5), &mut r).expect("ok");
        assert_eq!(seq_of(&b), 5);
        assert_eq!(r.get(), Some(5));
        // Differences between received numbers are kept exactly up to 2^31 either way.
        let mut r = SeqRef(Some(1 << 40));
        let b = round_trip(&data((1 << 40) + (1 << 31) - 1), &mut r).expect("ok");
        assert_eq!(seq_of(&b), (1 << 40) + (1 << 31) - 1);
    }

    #[test]
    fn bad_folded_forms_are_errors_and_leave_the_reference() {
        let mut r = SeqRef(Some(42));
        let mut buf = [0u8; 64];
        for ty in [6u8, 7, 0x0f] {
            assert_eq!(
                unfold(ty, &mut buf, 8, 20, &mut r),
                Err(WireError::UnknownType(ty))
            );
        }
        // Too short for each type.
        for (ty, min) in [(0u8, 13), (4, 13), (5, 16), (1, 9), (2, 17), (3, 33)] {
            assert_eq!(
                unfold(ty, &mut buf, 8, min - 1, &mut r),
                Err(WireError::Truncated),
                "type {ty}"
            );
            assert!(unfold(ty, &mut [0u8; 64], 8, min, &mut SeqRef::default()).is_ok());
        }
        // A part of an unknown kind.
        let mut part = [0u8; 40];
        part[8 + 15] = 9;
        assert_eq!(
            unfold(5, &mut part, 8, 16, &mut r),
            Err(WireError::UnknownType(9))
        );
        // No room in front, or beyond the buffer.
        assert_eq!(
            unfold(0, &mut buf, 6, 13, &mut r),
            Err(WireError::BufferTooSmall)
        );
        assert_eq!(
            unfold(0, &mut buf, 8, 57, &mut r),
            Err(WireError::BufferTooSmall)
        );
        assert_eq!(r.get(), Some(42));
        // Folding: what does not parse, and a buffer too short.
        let mut bad = [2u8, 0, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa];
        assert_eq!(
            fold_in_place(&mut bad, 0, 8, 0),
            Err(WireError::UnknownVersion(2))
        );
        assert_eq!(bad, [2, 0, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa]);
        let d = v1(&messages()[0]);
        let mut short = d.clone();
        assert_eq!(
            fold_in_place(&mut short, 1, d.len(), 0),
            Err(WireError::BufferTooSmall)
        );
        assert_eq!(short, d);
    }
}
