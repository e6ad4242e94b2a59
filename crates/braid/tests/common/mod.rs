//! Helpers shared by the integration tests. The tests that need the lab's fixtures
//! (namespace topologies, transfers) are in `crates/braid-lab/tests`.
#![allow(dead_code)]

mod gates;
pub use gates::*;

use std::path::PathBuf;

/// The braid binary under test.
pub fn braid() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_braid"))
}

/// The lock that runs a test binary's namespace tests one at a time, or None (with a
/// message, see [`runs`]) when namespaces cannot be used here.
pub fn netns_or_skip(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if !runs(
        test,
        "network namespaces and a TUN device",
        netns_unusable(),
    ) {
        return None;
    }
    Some(ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner()))
}
