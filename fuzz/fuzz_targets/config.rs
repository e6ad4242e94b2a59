//! The config file: TOML text → validated `Config` (`braid::config::Config::parse`).
//!
//! The file is named `/nonexistent/braid-fuzz/braid.toml`, so relative `shape.script` and
//! key-file paths resolve to nothing. Checks: a config that validates also builds its bond
//! (`Config::build_bond`), so `braid check` never accepts what `braid up` refuses; an
//! error names the file, has a message, and its position (when given) lies inside the
//! text.
#![no_main]

use braid::config::Config;
use braid_core::Instant;
use libfuzzer_sys::fuzz_target;

const FILE: &str = "/nonexistent/braid-fuzz/braid.toml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text, FILE) {
        Ok(config) => {
            let (_endpoint, ids) = config
                .build_endpoint(Instant::ZERO)
                .expect("a validated config builds its bond");
            assert_eq!(ids.len(), config.paths.len());
        }
        Err(e) => {
            assert_eq!(e.file, FILE);
            assert!(!e.message.is_empty());
            if let Some((line, col)) = e.position {
                let lines = text.split('\n').count();
                assert!(line >= 1 && line <= lines, "line {line} of {lines}");
                assert!(col >= 1);
            }
        }
    }
});
