//! The streaming SLIP6 decoder (`serial::slip6::Decoder`) and a SLIP6 `FrameCodec` (raw-ip).
//!
//! The checks of the `slip` target (chunking, frame sizes, counters, line decoder), and:
//! bytes that are neither the delimiter nor a 6-bit digit are ignored, so removing them
//! from the line changes nothing.
#![no_main]

#[path = "common/deframe.rs"]
mod deframe;

use braid_core::serial::slip6::{Decoder, BASE, DELIM};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((events, max_frame, errors)) = deframe::check::<Decoder>(data) else {
        return;
    };
    if errors {
        // Line errors are placed after 0x00 bytes, which the filter below removes.
        return;
    }
    let clean: Vec<u8> = data[2..]
        .iter()
        .copied()
        .filter(|&b| b == DELIM || (BASE..DELIM).contains(&b))
        .collect();
    let (again, _) = deframe::run::<Decoder>(max_frame, &clean, usize::MAX, false);
    assert_eq!(events, again, "foreign bytes changed the result");
});
