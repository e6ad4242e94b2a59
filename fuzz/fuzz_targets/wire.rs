//! The plaintext (version 1) tunnel datagram: `wire::parse` / `Packet::new_checked`.
//!
//! Checks: the two entry points agree; errors follow the documented order; an accepted
//! datagram re-emits (`wire::emit`) to exactly the bytes it was read from (all of them
//! for data and data parts, the fixed part for control messages, whose trailing bytes are
//! ignored; a probe's epoch when it is there), and
//! the re-emitted bytes parse to the same message; `emit` into a buffer one byte short
//! fails without writing.
#![no_main]

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

    let Ok((header, msg)) = parsed else { return };
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
