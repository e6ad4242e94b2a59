//! The plaintext (version 1) tunnel datagram: `wire::parse` / `Packet::new_checked`.
//!
//! Checks: the two entry points agree; errors follow the documented order; an accepted
//! datagram re-emits (`wire::emit`) to exactly the bytes it was read from (all of them
//! for data and data parts, the fixed part for control messages, whose trailing bytes are
//! ignored; a probe's epoch when it is there), and
//! the re-emitted bytes parse to the same message; `emit` into a buffer one byte short
//! fails without writing.
//!
//! The folded form (`wire::folded`, the sealed version 4): any bytes unfolded as any
//! type never panic, and what unfolds parses and ends where the folded bytes ended; an
//! accepted datagram folds to its documented length and unfolds back to itself (with the
//! wire path id in the path id's place), `seq` rebuilt from its low 32 bits.
#![no_main]

use braid_core::wire::folded::{self, SeqRef};
use braid_core::wire::{self, Message, MessageType, Packet, WireError, HEADER_LEN, VERSION};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = wire::parse(data);
    let checked = Packet::new_checked(data);

    match (&parsed, &checked) {
        (Ok((h, m)), Ok(p)) => {
            assert_eq!(*h, p.header());
            assert_eq!(*m, p.message());
            assert_eq!(p.version(), VERSION);
            assert_eq!(m.message_type(), p.message_type());
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("parse and new_checked disagree: {parsed:?} vs {checked:?}"),
    }

    // The documented order of checks.
    let expected_err = match data.first() {
        None => Some(WireError::Truncated),
        Some(&v) if v != VERSION => Some(WireError::UnknownVersion(v)),
        Some(_) if data.len() < HEADER_LEN => Some(WireError::Truncated),
        Some(_) => match MessageType::try_from(data[1]) {
            Err(e) => Some(e),
            Ok(ty) if data.len() < ty.min_len() => Some(WireError::Truncated),
            // A part's packet kind: Data (0) or PinnedData (4).
            Ok(MessageType::DataPart) => match data[22] {
                0 | 4 => None,
                k => Some(WireError::UnknownType(k)),
            },
            Ok(_) => None,
        },
    };
    match (&parsed, expected_err) {
        (Err(e), Some(x)) => assert_eq!(*e, x),
        (Ok(_), None) => {}
        (r, x) => panic!("parse gave {r:?}, the documented checks say {x:?}"),
    }

    // The same bytes as a folded plaintext of any type (8 bytes of envelope header in
    // front, as the sealer has them).
    if let Some(&t) = data.first() {
        let mut buf = vec![0u8; 8 + data.len()];
        buf[8..].copy_from_slice(data);
        let mut r = SeqRef::default();
        if let Ok(range) = folded::unfold(t % 16, &mut buf, 8, data.len(), &mut r) {
            assert_eq!(range.end, 8 + data.len());
            let (_, m) = wire::parse(&buf[range]).expect("an unfolded datagram parses");
            assert_eq!(m.message_type() as u8, t % 16);
        } else {
            assert_eq!(r, SeqRef::default(), "a refused one moves no reference");
        }
    }

    let Ok((header, msg)) = parsed else { return };

    // Folding in place (behind 8 bytes, as the sealer lays it out) and back.
    let wire_path = (header.path as u8) ^ 0x5a;
    let mut folded_buf = vec![0u8; 8 + data.len()];
    folded_buf[1..1 + data.len()].copy_from_slice(data);
    let (ty, start) =
        folded::fold_in_place(&mut folded_buf, 1, data.len(), wire_path).expect("folds");
    assert_eq!(ty, msg.message_type());
    let n = 1 + data.len() - start;
    assert_eq!(n, folded::folded_len(ty, data.len()));
    folded_buf.copy_within(start..start + n, 8);
    let seq = match msg {
        Message::Data { seq, .. }
        | Message::PinnedData { seq, .. }
        | Message::DataPart { seq, .. } => Some(seq),
        _ => None,
    };
    let mut r = SeqRef::default();
    if let Some(seq) = seq {
        // A reference up to 2^31 - 1 away rebuilds the same number.
        r.accept(seq.wrapping_sub(u64::from(data[data.len() - 1]) << 23));
    }
    let range = folded::unfold(ty as u8, &mut folded_buf, 8, n, &mut r).expect("unfolds");
    let mut want = data.to_vec();
    want[2] = 0;
    want[3] = wire_path;
    assert_eq!(
        &folded_buf[range],
        &want[..],
        "fold then unfold gives the datagram back"
    );
    let len = msg.wire_len();
    assert!(len <= data.len());
    match msg {
        Message::Data { .. } | Message::PinnedData { .. } | Message::DataPart { .. } => {
            assert_eq!(
                len,
                data.len(),
                "a data payload is everything after its header"
            );
        }
        // A probe carries the sender's epoch when there are bytes for it.
        Message::Probe { epoch, .. } => {
            assert_eq!(
                len,
                if epoch.is_some() {
                    wire::PROBE_EPOCH_LEN
                } else {
                    wire::PROBE_LEN
                }
            );
            assert_eq!(epoch.is_some(), data.len() >= wire::PROBE_EPOCH_LEN);
        }
        _ => assert_eq!(len, msg.message_type().min_len()),
    }

    let mut out = vec![0u8; len];
    assert_eq!(wire::emit(&header, &msg, &mut out), Ok(len));
    assert_eq!(
        &out[..],
        &data[..len],
        "re-emit must give back the bytes read"
    );
    let (h2, m2) = wire::parse(&out).expect("re-emitted datagram parses");
    assert_eq!(h2, header);
    assert_eq!(m2, msg);

    let mut short = vec![0xA5u8; len - 1];
    assert_eq!(
        wire::emit(&header, &msg, &mut short),
        Err(WireError::BufferTooSmall)
    );
    assert!(short.iter().all(|&b| b == 0xA5), "nothing written on error");
});
