//! Control-socket requests: one JSON line → `Request` (`braid::control::parse_request`),
//! then the checks the daemon makes on a parsed request before acting on it (path name,
//! endpoints and device of `enslave`; `class-change` applied to a bond with a shaper;
//! `set` and `emancipate` on a bond with paths), without opening sockets.
//!
//! Checks: surrounding whitespace does not change the result; every `class-change`
//! answer is an object with a boolean `ok`, and an `error` string when `ok` is false.
#![no_main]

use braid::config::{self, Config};
use braid::control::{parse_request, Request};
use braid_core::Instant;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::sync::OnceLock;

/// A bond with two paths and a small shaper, as the daemon would run it.
const BOND: &str = r#"
[bond]
interface = "braid0"
address = "10.200.0.1/30"
encryption = "none"

[shape]
rate = "10mbit"
default = "1:20"

[[shape.class]]
id = "1:1"
rate = "10mbit"

[[shape.class]]
id = "1:10"
parent = "1:1"
rate = "6mbit"
ceil = "10mbit"

[[shape.class]]
id = "1:20"
parent = "1:1"
rate = "4mbit"

[[path]]
name = "a"
local = "127.0.0.1:7000"
remote = "127.0.0.1:7001"

[[path]]
name = "b"
local = "127.0.0.1:7002"
remote = "127.0.0.1:7003"
"#;

fuzz_target!(|data: &[u8]| {
    let parsed = parse_request(data);
    let mut padded = b" \t".to_vec();
    padded.extend_from_slice(data);
    padded.extend_from_slice(b" \r\n");
    if std::str::from_utf8(data).is_ok() {
        assert_eq!(
            parse_request(&padded),
            parsed,
            "whitespace changed the result"
        );
    }
    let Ok(req) = parsed else { return };

    let now = Instant::ZERO;
    static CONFIG: OnceLock<Config> = OnceLock::new();
    let cfg = CONFIG.get_or_init(|| {
        Config::parse(BOND, "control-fuzz.toml").expect("the fixed config is valid")
    });
    let (mut ep, _) = cfg.build_endpoint(now).expect("the fixed endpoint builds");
    if let Some(shape) = &cfg.shape {
        let shaper = braid_core::shape::Shaper::new(&shape.spec, 0, cfg.bond.core.mtu, now)
            .expect("the fixed shaper builds")
            .0;
        ep.bond_mut().set_shaper(now, Some(shaper), false);
    }

    match req {
        Request::Status | Request::ClassShow | Request::Reload | Request::Down => {}
        Request::Enslave {
            name,
            local,
            remote,
            dev,
            ..
        } => {
            let _ = config::check_path_name(&name);
            if let Ok((l, r)) = config::check_endpoints(&local, &remote) {
                assert_eq!(l.is_ipv4(), r.is_ipv4(), "mixed address families accepted");
            }
            if let Some(d) = dev {
                let _ = config::check_ifname(&d);
            }
        }
        Request::Emancipate { name } => {
            if let Some(id) = ep.bond().path_by_name(&name) {
                ep.remove_path(now, id).expect("removing an existing path");
                assert!(ep.bond().path_by_name(&name).is_none());
            }
        }
        Request::Set { name, bps } => {
            if let Some(id) = ep.bond().path_by_name(&name) {
                let _ = ep.bond_mut().set_path_bps(id, bps);
            }
        }
        Request::ClassChange { id, set } => {
            let v = braid::classes::change(now, ep.bond_mut(), &id, &set);
            match v.get("ok") {
                Some(Value::Bool(true)) => {}
                Some(Value::Bool(false)) => {
                    assert!(v.get("error").and_then(Value::as_str).is_some(), "{v}")
                }
                _ => panic!("answer without a boolean ok: {v}"),
            }
        }
    }
});
