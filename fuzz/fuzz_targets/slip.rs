//! The streaming SLIP decoder (`serial::slip::Decoder`) and a SLIP `FrameCodec` (raw-ip).
//!
//! Input: a config byte (frame limit; line errors on or off), a chunk length, then line
//! bytes. Checks: feeding the bytes in chunks gives the same events as feeding them all
//! at once (line errors reported at the same byte positions); frames are 3..=limit bytes;
//! the counters match the events; the frame codec in raw-ip mode delivers exactly the
//! deframer's frames.
#![no_main]

#[path = "common/deframe.rs"]
mod deframe;

use braid_core::serial::slip::Decoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = deframe::check::<Decoder>(data);
});
