//! The tc script reader (`braid::config::tc::parse_script`) and `braid tc-import`'s output.
//!
//! Checks: an error names a line of the script; a script that reads is turned into
//! native `[shape]` TOML (`braid::config::tc::to_toml`), and that TOML, in a config file, is
//! accepted exactly when the shaper accepts the spec, and then gives back the same spec.
#![no_main]

use braid::config::tc::{parse_script, to_toml};
use braid::config::Config;
use braid_core::shape::Shaper;
use braid_core::Instant;
use libfuzzer_sys::fuzz_target;

const BOND: &str = r#"[bond]
interface = "braid0"
address = "10.200.0.1/30"
encryption = "none"

[[path]]
name = "a"
local = "127.0.0.1:7000"
remote = "127.0.0.1:7001"

"#;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let script = match parse_script(text) {
        Ok(s) => s,
        Err(e) => {
            let lines = text.split('\n').count();
            assert!(
                e.line >= 1 && e.line <= lines.max(1),
                "line {} of {lines}",
                e.line
            );
            assert!(!e.message.is_empty());
            return;
        }
    };
    let toml = format!("{BOND}{}", to_toml(&script.spec));
    let shaper_ok = Shaper::new(&script.spec, 0, 1400, Instant::ZERO).is_ok();
    match Config::parse(&toml, "tc-import.toml") {
        Ok(cfg) => {
            assert!(shaper_ok, "the config accepted a spec the shaper refuses");
            let shape = cfg.shape.expect("the [shape] table is read");
            assert_eq!(
                shape.spec, script.spec,
                "tc-import output reads back differently:\n{toml}"
            );
        }
        Err(e) => assert!(!shaper_ok, "tc-import output refused: {e}\n{toml}"),
    }
});
