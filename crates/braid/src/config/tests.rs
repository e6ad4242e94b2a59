use super::*;
use braid_core::crypto::Cipher;

const FULL: &str = r#"
[bond]
interface = "braid7"
address = "10.200.0.1/30"
address6 = "fd00:b::1/64"
mtu = 1300
scheduler = "active-backup"
primary = "p1"
primary_reselect = "better"
updelay_ms = 50
downdelay_ms = 20
probe_interval_ms = 50
down_after = 4
up_after = 3
reorder_max_ms = 150
queue_max_delay_ms = 80
equalize_ms = 40
seed = 9
mss_clamp = false
offload = false
workers = 2
private_key = "4AQJJwpUReIFFoMiigEEhG9NryCTnFjPBTxirKNv6nY="
peer_public_key = "nmFYF6ZKngdcryo53e+fo7ZbW4nP3CZ47oLl9sHfCRM="
preshared_key = "FHE6N0Qpr+EJiwJnc7UfJ7m1t43yt7fUYOqO9Xn7hAE="

[[path]]
name = "p0"
local = "10.201.0.1:7000"
remote = "10.201.0.2:7000"
bps = 10000000
dev = "eth1"
prio = 5

[[path]]
name = "p1"
local = "[fd00::1]:7001"
remote = "[fd00::2]:7001"
[path.emulate]
delay_ms = 20.5
jitter_ms = 1
loss = 0.01
rate_bps = 10000000
queue_bytes = 50000
outages = [[5000, 2000], [9000, 100]]
seed = 3
"#;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, "t.toml")
}

/// The error's display form.
fn err(text: &str) -> String {
    match parse(text) {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e.to_string(),
    }
}

const MIN_BOND: &str = "[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n";
const P0: &str =
    "[[path]]\nname = \"p0\"\nlocal = \"10.201.0.1:7000\"\nremote = \"10.201.0.2:7000\"\n";

fn with_bond(extra: &str) -> String {
    format!("{MIN_BOND}{extra}\n{P0}")
}

#[test]
fn full_config_maps_every_key() {
    let c = parse(FULL).unwrap();
    let b = &c.bond;
    assert_eq!(b.interface, "braid7");
    assert_eq!(
        b.address,
        Ipv4Cidr {
            addr: Ipv4Addr::new(10, 200, 0, 1),
            prefix: 30
        }
    );
    assert_eq!(b.address.netmask(), Ipv4Addr::new(255, 255, 255, 252));
    assert_eq!(b.address6.unwrap().to_string(), "fd00:b::1/64");
    assert_eq!(b.mtu, 1300);
    assert_eq!(b.core.mtu, 1300);
    assert_eq!(b.primary.as_deref(), Some("p1"));
    assert_eq!(
        b.core.scheduler,
        SchedulerConfig::ActiveBackup(Options {
            primary: Some(PathId(1)),
            reselect: Reselect::Better,
            updelay: Duration::from_millis(50),
            downdelay: Duration::from_millis(20),
        })
    );
    assert_eq!(
        b.core.health,
        HealthConfig {
            probe_interval: Duration::from_millis(50),
            down_after: 4,
            up_after: 3
        }
    );
    assert_eq!(b.core.reorder_max, Duration::from_millis(150));
    assert_eq!(b.core.queue_max_delay, Duration::from_millis(80));
    assert_eq!(b.core.equalize_max, Duration::from_millis(40));
    assert_eq!(b.core.seed, 9);
    assert!(!b.core.mss_clamp);
    assert!(!b.offload);
    assert_eq!(b.workers, Some(2));

    assert_eq!(c.paths.len(), 2);
    let p0 = &c.paths[0];
    assert_eq!(p0.name, "p0");
    assert_eq!(p0.udp().unwrap().local, "10.201.0.1:7000".parse().unwrap());
    assert_eq!(
        p0.udp().unwrap().remote,
        Remote::Addr("10.201.0.2:7000".parse().unwrap())
    );
    assert_eq!(
        (p0.bps, p0.prio, p0.udp().unwrap().dev.as_deref()),
        (10_000_000, 5, Some("eth1"))
    );
    assert!(p0.emulate.is_none());
    let pc = p0.path_config(true);
    assert_eq!(
        (pc.name.as_str(), pc.bps, pc.prio, pc.cc.initial_rate_bps),
        ("p0", 10_000_000, 5, 10_000_000)
    );

    let p1 = &c.paths[1];
    assert_eq!(p1.udp().unwrap().local, "[fd00::1]:7001".parse().unwrap());
    assert_eq!(p1.path_config(true).cc, CcConfig::default());
    // IPv6 headers are 20 bytes longer.
    assert_eq!(p1.path_config(true).max_datagram, 1500 - 48 - 17);
    let e = p1.emulate.as_ref().unwrap();
    assert_eq!(e.delay, Duration::from_micros(20_500));
    assert_eq!(e.jitter, Duration::from_millis(1));
    assert_eq!(e.loss, 0.01);
    assert_eq!((e.rate_bps, e.queue_bytes, e.seed), (10_000_000, 50_000, 3));
    assert_eq!(
        e.outages,
        vec![
            (Duration::from_millis(5000), Duration::from_millis(2000)),
            (Duration::from_millis(9000), Duration::from_millis(100))
        ]
    );
}

#[test]
fn defaults() {
    let c = parse(&with_bond("")).unwrap();
    assert_eq!(c.bond.interface, "braid0");
    assert_eq!(c.bond.mtu, 1500, "a standard Ethernet packet");
    assert!(c.bond.offload, "batched, offloaded IO by default");
    assert_eq!(
        c.bond.workers, None,
        "sending threads as the machine allows"
    );
    let e = parse(&with_bond("workers = 17")).unwrap_err().to_string();
    assert!(
        e.contains("bond.workers: 17 is out of range (0..=16)"),
        "{e}"
    );
    assert_eq!(
        parse(&with_bond("workers = 0")).unwrap().bond.workers,
        Some(0)
    );
    assert_eq!(c.bond.address6, None);
    assert_eq!(c.bond.primary, None);
    let d = BondConfig::default();
    assert_eq!(d.equalize_max, Duration::from_millis(100));
    assert_eq!(
        c.bond.core,
        BondConfig {
            scheduler: SchedulerConfig::Adaptive,
            mtu: 1500,
            ..d
        }
    );
    // A path's datagram: its link's MTU less IPv4 and UDP headers and what sealing adds to
    // a data datagram (the 24-byte envelope less the 7 bytes folding saves), or the
    // verification tags (plain).
    assert_eq!(c.paths[0].path_config(true).max_datagram, 1500 - 28 - 17);
    assert_eq!(c.paths[0].path_config(false).max_datagram, 1500 - 28 - 17);
    assert_eq!(
        (
            c.paths[0].bps,
            c.paths[0].prio,
            c.paths[0].udp().unwrap().dev.clone()
        ),
        (0, 0, None)
    );
}

#[test]
fn scheduler_names_map() {
    let cases: &[(&str, SchedulerConfig)] = &[
        ("scheduler = \"eql\"", SchedulerConfig::Eql),
        (
            "scheduler = \"round-robin\"",
            SchedulerConfig::RoundRobin {
                packets_per_path: 1,
            },
        ),
        (
            "scheduler = \"round-robin\"\npackets_per_path = 4",
            SchedulerConfig::RoundRobin {
                packets_per_path: 4,
            },
        ),
        ("scheduler = \"weighted\"", SchedulerConfig::Weighted),
        ("scheduler = \"broadcast\"", SchedulerConfig::Broadcast),
        ("scheduler = \"adaptive\"", SchedulerConfig::Adaptive),
        (
            "scheduler = \"xor\"",
            SchedulerConfig::Xor {
                hash: HashPolicy::Layer2,
            },
        ),
        (
            "scheduler = \"xor\"\nhash = \"layer3+4\"",
            SchedulerConfig::Xor {
                hash: HashPolicy::Layer34,
            },
        ),
        (
            "scheduler = \"xor\"\nhash = \"gabler\"",
            SchedulerConfig::Xor {
                hash: HashPolicy::Gabler,
            },
        ),
        (
            "scheduler = \"active-backup\"",
            SchedulerConfig::ActiveBackup(Options::default()),
        ),
    ];
    for (extra, want) in cases {
        let c = parse(&with_bond(extra)).unwrap();
        assert_eq!(&c.bond.core.scheduler, want, "{extra}");
        assert_eq!(c.bond.core.scheduler.name(), want.name());
    }
}

#[test]
fn hash_names() {
    for (s, h) in [
        ("layer2", HashPolicy::Layer2),
        ("layer2+3", HashPolicy::Layer23),
        ("layer3+4", HashPolicy::Layer34),
        ("encap2+3", HashPolicy::Encap23),
        ("encap3+4", HashPolicy::Encap34),
        ("vlan+srcmac", HashPolicy::VlanSrcMac),
        ("gabler", HashPolicy::Gabler),
    ] {
        assert_eq!(parse_hash(s), Some(h));
    }
    assert_eq!(parse_hash("layer34"), None);
}

#[test]
fn zero_paths_allowed() {
    let c = parse(MIN_BOND).unwrap();
    assert!(c.paths.is_empty());
}

#[test]
fn build_endpoint_assigns_ids_in_file_order() {
    let c = parse(FULL).unwrap();
    let (ep, ids) = c.build_endpoint(braid_core::Instant::ZERO).unwrap();
    let bond = ep.bond();
    assert_eq!(ids, vec![PathId(0), PathId(1)]);
    assert_eq!(bond.path_by_name("p1"), Some(PathId(1)));
}

#[test]
fn line_col_counts_chars() {
    let t = "ab\ncdé\nx";
    assert_eq!(line_col(t, 0), (1, 1));
    assert_eq!(line_col(t, 3), (2, 1));
    assert_eq!(line_col(t, t.find('x').unwrap()), (3, 1));
    assert_eq!(line_col(t, 7), (2, 4)); // just after é (2 bytes)
    assert_eq!(line_col(t, 999), (3, 2));
}

// ---- every error message ----

#[test]
fn syntax_error_has_position() {
    let e = err("[bond\n");
    assert!(e.starts_with("t.toml:1:"), "{e}");
}

#[test]
fn unknown_keys_are_named_with_line() {
    let e = err(&with_bond("colour = \"red\""));
    assert!(e.starts_with("t.toml:4:1: bond.colour: unknown key"), "{e}");
    let e = err(&format!("{MIN_BOND}{P0}speed = 3\n"));
    assert!(
        e.starts_with("t.toml:8:1: path[0].speed: unknown key"),
        "{e}"
    );
    let e = err(&format!("{MIN_BOND}{P0}[path.emulate]\ndelay = 3\n"));
    assert!(
        e.starts_with("t.toml:9:1: path[0].emulate.delay: unknown key"),
        "{e}"
    );
    let e = err(&format!("{MIN_BOND}[links]\n"));
    assert!(
        e.starts_with("t.toml:4:") && e.contains("links: unknown key"),
        "{e}"
    );
}

#[test]
fn wrong_types_are_named() {
    let e = err(&with_bond("mtu = \"big\""));
    assert!(
        e.starts_with("t.toml:4:7: bond.mtu: expected a whole number"),
        "{e}"
    );
}

#[test]
fn missing_bond_and_address() {
    assert_eq!(
        err(P0),
        "t.toml: missing [bond] table (it needs at least `address`)"
    );
    let e = err("[bond]\nmtu = 1400\n");
    assert!(e.starts_with("t.toml:1:1: bond.address: missing"), "{e}");
}

#[test]
fn bad_address() {
    for a in [
        "10.200.0.1",
        "10.200.0.1/33",
        "10.200.0.300/30",
        "fd00::1/64",
        "0.0.0.0/8",
        "10.0.0.1/+3",
        "224.0.0.1/4",
    ] {
        let e = err(&format!("[bond]\naddress = \"{a}\"\n"));
        assert!(
            e.starts_with("t.toml:2:11: bond.address: ")
                && e.contains("is not an IPv4 address with prefix"),
            "{a}: {e}"
        );
    }
    let e = err(&with_bond("address6 = \"10.0.0.1/24\""));
    assert!(e.starts_with("t.toml:4:12: bond.address6: "), "{e}");
}

#[test]
fn bad_interface() {
    for (name, what) in [
        ("", "must not be empty"),
        ("averyveryverylongname", "longer than 15"),
        ("a/b", "not a valid interface name"),
        ("br%d", "not a valid interface name"),
    ] {
        let e = err(&format!(
            "[bond]\naddress = \"10.0.0.1/24\"\ninterface = \"{name}\"\n"
        ));
        assert!(
            e.starts_with("t.toml:3:13: bond.interface: ") && e.contains(what),
            "{name}: {e}"
        );
    }
}

#[test]
fn mtu_range() {
    let e = err(&with_bond("mtu = 575"));
    assert_eq!(
        e,
        format!("t.toml:4:7: bond.mtu: 575 is out of range (576..={MTU_MAX})")
    );
    let e = err(&with_bond("mtu = 65535"));
    assert!(e.contains("bond.mtu: 65535 is out of range"), "{e}");
    assert!(parse(&with_bond(&format!("mtu = {MTU_MAX}"))).is_ok());
    assert!(parse(&with_bond("mtu = 576")).is_ok());
}

#[test]
fn unknown_scheduler() {
    let e = err(&with_bond("scheduler = \"fastest\""));
    assert!(
        e.starts_with("t.toml:4:13: bond.scheduler: unknown scheduler \"fastest\" (one of: eql, "),
        "{e}"
    );
}

#[test]
fn mode_specific_keys_need_their_scheduler() {
    let e = err(&with_bond("hash = \"layer3+4\""));
    assert_eq!(
        e,
        "t.toml:4:8: bond.hash: only used with scheduler = \"xor\" (scheduler is \"adaptive\")"
    );
    let e = err(&with_bond("scheduler = \"eql\"\nhash = \"layer2\""));
    assert!(
        e.starts_with(
            "t.toml:5:8: bond.hash: only used with scheduler = \"xor\" (scheduler is \"eql\")"
        ),
        "{e}"
    );
    let e = err(&with_bond("packets_per_path = 2"));
    assert!(
        e.contains("bond.packets_per_path: only used with scheduler = \"round-robin\""),
        "{e}"
    );
    for k in [
        "primary = \"p0\"",
        "primary_reselect = \"always\"",
        "updelay_ms = 1",
        "downdelay_ms = 1",
    ] {
        let e = err(&with_bond(k));
        assert!(
            e.contains("only used with scheduler = \"active-backup\""),
            "{k}: {e}"
        );
    }
}

#[test]
fn bad_hash_and_reselect() {
    let e = err(&with_bond("scheduler = \"xor\"\nhash = \"layer3\""));
    assert!(
        e.starts_with("t.toml:5:8: bond.hash: unknown hash policy \"layer3\""),
        "{e}"
    );
    let e = err(&with_bond(
        "scheduler = \"active-backup\"\nprimary_reselect = \"never\"",
    ));
    assert!(
        e.starts_with(
            "t.toml:5:20: bond.primary_reselect: \"never\" is not one of always, better, failure"
        ),
        "{e}"
    );
}

#[test]
fn primary_must_name_a_path() {
    let e = err(&with_bond(
        "scheduler = \"active-backup\"\nprimary = \"p9\"",
    ));
    assert_eq!(e, "t.toml:5:11: bond.primary: no path named \"p9\"");
}

#[test]
fn numeric_ranges() {
    for (k, msg) in [
        (
            "probe_interval_ms = 0",
            "bond.probe_interval_ms: 0 is out of range (1..=60000)",
        ),
        (
            "down_after = 0",
            "bond.down_after: 0 is out of range (1..=1000)",
        ),
        (
            "up_after = -1",
            "bond.up_after: -1 is out of range (1..=1000)",
        ),
        (
            "reorder_max_ms = 10001",
            "bond.reorder_max_ms: 10001 is out of range (0..=10000)",
        ),
        (
            "queue_max_delay_ms = 0",
            "bond.queue_max_delay_ms: 0 is out of range (1..=10000)",
        ),
        (
            "equalize_ms = 10001",
            "bond.equalize_ms: 10001 is out of range (0..=10000)",
        ),
        ("seed = -2", "bond.seed: -2 is out of range"),
    ] {
        let e = err(&with_bond(k));
        assert!(e.starts_with("t.toml:4:") && e.contains(msg), "{k}: {e}");
    }
    let e = err(&with_bond(
        "scheduler = \"round-robin\"\npackets_per_path = -1",
    ));
    assert!(
        e.contains("bond.packets_per_path: -1 is out of range (0..=65535)"),
        "{e}"
    );
    let e = err(&with_bond("scheduler = \"active-backup\"\nupdelay_ms = -5"));
    assert!(e.contains("bond.updelay_ms: -5 is out of range"), "{e}");
}

#[test]
fn path_names() {
    let e = err(&format!(
        "{MIN_BOND}[[path]]\nlocal = \"10.0.0.1:1\"\nremote = \"10.0.0.2:1\"\n"
    ));
    assert!(e.starts_with("t.toml:4:1: path[0].name: missing"), "{e}");
    let e = err(&format!(
        "{MIN_BOND}[[path]]\nname = \"\"\nlocal = \"10.0.0.1:1\"\nremote = \"10.0.0.2:1\"\n"
    ));
    assert_eq!(e, "t.toml:5:8: path[0].name: must not be empty");
    let e = err(&format!(
        "{MIN_BOND}[[path]]\nname = \"a b\"\nlocal = \"10.0.0.1:1\"\nremote = \"10.0.0.2:1\"\n"
    ));
    assert!(
        e.contains("path[0].name: \"a b\" may only hold printable ASCII"),
        "{e}"
    );
    let dup = format!("{MIN_BOND}{P0}[[path]]\nname = \"p0\"\nlocal = \"10.201.0.5:7000\"\nremote = \"10.201.0.6:7000\"\n");
    assert_eq!(
        err(&dup),
        "t.toml:9:8: path[1].name: duplicate path name \"p0\""
    );
}

#[test]
fn path_endpoints() {
    let path = |local: &str, remote: &str| {
        format!("{MIN_BOND}[[path]]\nname = \"a\"\nlocal = \"{local}\"\nremote = \"{remote}\"\n")
    };
    let e = err(&path("10.0.0.1:0", "10.0.0.2:7000"));
    assert_eq!(
        e,
        "t.toml:6:9: path[0].local: \"10.0.0.1:0\": port 0 is not allowed"
    );
    let e = err(&path("10.0.0.1:7000", "10.0.0.2:0"));
    assert_eq!(
        e,
        "t.toml:7:10: path[0].remote: \"10.0.0.2:0\": port 0 is not allowed"
    );
    let e = err(&path("10.0.0.1", "10.0.0.2:7000"));
    assert!(
        e.starts_with("t.toml:6:9: path[0].local: \"10.0.0.1\" is not an ADDR:PORT"),
        "{e}"
    );
    let e = err(&path("0.0.0.0:7000", "10.0.0.2:7000"));
    assert!(
        e.contains("path[0].local: \"0.0.0.0:7000\": an unspecified address needs `dev`"),
        "{e}"
    );
    let e = err(&path("224.0.0.1:7000", "10.0.0.2:7000"));
    assert!(
        e.contains("path[0].local: \"224.0.0.1:7000\": needs a unicast address"),
        "{e}"
    );
    let e = err(&path("10.0.0.1:7000", "[fd00::2]:7000"));
    assert!(e.starts_with("t.toml:7:10: path[0].remote: [fd00::2]:7000 and local 10.0.0.1:7000 are of different address families"), "{e}");
    let e = err(&format!(
        "{MIN_BOND}[[path]]\nname = \"a\"\nlocal = \"10.0.0.1:1\"\n"
    ));
    assert!(e.starts_with("t.toml:4:1: path[0].remote: missing; it may be left out (learned from the peer's datagrams) only on a sealed bond"), "{e}");
    let dup = format!("{MIN_BOND}{P0}[[path]]\nname = \"p1\"\nlocal = \"10.201.0.1:7000\"\nremote = \"10.201.0.6:7000\"\n");
    assert_eq!(
        err(&dup),
        "t.toml:10:9: path[1].local: 10.201.0.1:7000 is already used by another path"
    );
}

#[test]
fn path_numbers_and_dev() {
    let e = err(&format!("{MIN_BOND}{P0}bps = -1\n"));
    assert_eq!(
        e,
        "t.toml:8:7: path[0].bps: expected a number or a rate like \"20mbit\", found -1"
    );
    let e = err(&format!("{MIN_BOND}{P0}prio = 3000000000\n"));
    assert!(
        e.contains("path[0].prio: 3000000000 is out of range"),
        "{e}"
    );
    let e = err(&format!("{MIN_BOND}{P0}dev = \"\"\n"));
    assert_eq!(e, "t.toml:8:7: path[0].dev: must not be empty");
}

#[test]
fn emulate_ranges() {
    for (k, msg) in [
        (
            "loss = 1.5",
            "path[0].emulate.loss: 1.5 is out of range (a probability, 0..=1)",
        ),
        ("loss = -0.1", "path[0].emulate.loss: -0.1 is out of range"),
        (
            "delay_ms = -1",
            "path[0].emulate.delay_ms: -1 is out of range (0..=60000 ms)",
        ),
        (
            "jitter_ms = nan",
            "path[0].emulate.jitter_ms: NaN is out of range",
        ),
        (
            "rate_bps = -3",
            "path[0].emulate.rate_bps: -3 is out of range",
        ),
        (
            "queue_bytes = -3",
            "path[0].emulate.queue_bytes: -3 is out of range",
        ),
        (
            "outages = [[-1, 5]]",
            "path[0].emulate.outages: [-1, 5] has a negative time",
        ),
    ] {
        let e = err(&format!("{MIN_BOND}{P0}[path.emulate]\n{k}\n"));
        assert!(e.starts_with("t.toml:9:") && e.contains(msg), "{k}: {e}");
    }
    let e = err(&format!(
        "{MIN_BOND}{P0}[path.emulate]\noutages = [[1, 2, 3]]\n"
    ));
    assert_eq!(
        e,
        "t.toml:9:11: path[0].emulate.outages: [1, 2, 3] is not a [start_ms, length_ms] pair"
    );
}

#[test]
fn missing_file() {
    let e = Config::load(Path::new("/nonexistent/braid.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("/nonexistent/braid.toml: cannot read config file: "),
        "{e}"
    );
}

/// A copy of `examples/` in a scratch directory with the `private.key` the examples name
/// (mode 0600), as a user who follows their comments has it.
fn examples_with_key(tag: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let dir = std::env::temp_dir().join(format!("braid-examples-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml" || e == "tc") {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    crate::files::write_private(&dir.join("private.key"), &crate::keys::genkey()).unwrap();
    dir
}

#[test]
fn every_example_parses() {
    let dir = examples_with_key("parse");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            if let Err(e) = Config::load(&path) {
                panic!("{e}");
            }
            n += 1;
        }
    }
    assert!(
        n >= 4,
        "expected at least 4 examples in {}, found {n}",
        dir.display()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn endpoint_helpers() {
    assert!(check_endpoints("10.0.0.1:5", "10.0.0.2:5").is_ok());
    assert_eq!(
        check_endpoints("10.0.0.1:5", "[::2]:5").unwrap_err(),
        "remote: [::2]:5 and local 10.0.0.1:5 are of different address families"
    );
    assert_eq!(
        check_endpoints("x", "10.0.0.2:5").unwrap_err(),
        "local: \"x\" is not an ADDR:PORT (IPv6 as [ADDR]:PORT)"
    );
}

const SHAPED: &str = r#"
[bond]
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
name = "voice"
rate = "1mbit"
ceil = "10mbit"
burst = "15k"
prio = 0
[[shape.class]]
id = "1:20"
parent = "1:"
rate = "9mbit"
[[shape.filter]]
protocol = "udp"
dport = "5060-5061"
dscp = 46
class = "1:10"
"#;

#[test]
fn shape_native_form() {
    let c = Config::parse(SHAPED, "s.toml").unwrap();
    let s = c.shape.expect("[shape]").spec;
    assert_eq!(s.link_bps, Some(10_000_000));
    assert_eq!(
        s.default_class.map(|c| c.to_string()).as_deref(),
        Some("1:20")
    );
    assert_eq!(s.classes.len(), 3);
    assert_eq!(s.classes[1].burst, Some(15 * 1024));
    assert_eq!(s.classes[1].name.as_deref(), Some("voice"));
    assert_eq!(
        s.classes[2].parent, None,
        "\"1:\" is the qdisc: a top-level class"
    );
    let f = &s.filters[0];
    assert_eq!(f.protocol, Some(17));
    assert_eq!(f.dport.map(|p| (p.lo, p.hi)), Some((5060, 5061)));
    assert_eq!(f.tos, Some((46 << 2, 0xfc)));
    assert!(Config::parse(
        "[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n",
        "x"
    )
    .unwrap()
    .shape
    .is_none());
}

#[test]
fn shape_errors_name_key_and_line() {
    let cases = [
        (
            SHAPED.replace("rate = \"10mbit\"\ndefault", "rate = \"fast\"\ndefault"),
            "6:8: shape.rate: \"fast\" is not a rate",
        ),
        (
            SHAPED.replace("default = \"1:20\"\n", ""),
            "shape.default: missing",
        ),
        (
            SHAPED.replace("default = \"1:20\"", "default = \"1:1\""),
            "shape: ",
        ),
        (
            SHAPED.replace("prio = 0", "prio = 9"),
            "prio: must be 0 (first) to 7",
        ),
        (
            SHAPED.replace("dscp = 46", "dscp = 46\ntos = \"0x10\""),
            "give tos or dscp, not both",
        ),
        (
            SHAPED.replace("dport = \"5060-5061\"", "dport = \"5061-5060\""),
            "shape.filter.dport",
        ),
        (
            SHAPED.replace("[shape]\n", "[shape]\nscript = \"x.tc\"\n"),
            "shape.script: give either a tc script",
        ),
        (
            SHAPED.replace("parent = \"1:1\"", "parent = \"1:7\""),
            "shape: ",
        ),
    ];
    for (text, want) in cases {
        let e = Config::parse(&text, "s.toml").unwrap_err().to_string();
        assert!(e.contains(want), "want {want:?} in: {e}");
    }
}

#[test]
fn shape_script_relative_to_the_config_file() {
    let dir = examples_with_key("script");
    let c = Config::load(&dir.join("household.toml")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let shape = c.shape.unwrap();
    assert_eq!(shape.spec.classes.len(), 5);
    assert_eq!(shape.spec.default_class.map(|c| c.0), Some(0x10013));
    assert!(
        shape.notes.iter().any(|n| n.contains("default 1:13")),
        "{:?}",
        shape.notes
    );
    let missing = "[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n[shape]\nscript = \"nope.tc\"\n";
    let e = Config::parse(missing, "/etc/braid.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("shape.script: cannot read /etc/nope.tc"), "{e}");
}

#[test]
fn shape_script_must_be_a_bounded_regular_file() {
    // A device would be read without end (found while writing the config fuzz target).
    let dev = "[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n[shape]\nscript = \"/dev/zero\"\n";
    let e = Config::parse(dev, "/etc/braid.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("shape.script: cannot read /dev/zero: not a regular file"),
        "{e}"
    );
    let dir = std::env::temp_dir().join(format!("braid-bigscript-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.tc");
    std::fs::write(&big, "#".repeat((1 << 20) + 1)).unwrap();
    let text = format!(
        "[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n[shape]\nscript = {:?}\n",
        big.display().to_string()
    );
    let e = Config::parse(&text, "/etc/braid.toml")
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(e.contains("larger than 1 MiB"), "{e}");
}

fn serial_cfg(path: &str) -> String {
    format!(
        "[bond]\naddress = \"10.0.0.1/30\"\nencryption = \"none\"\n[[path]]\nname = \"s0\"\n{path}"
    )
}

#[test]
fn serial_path_keys() {
    let c = parse(&serial_cfg(
        "kind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 57600\nframing = \"cslip\"\n",
    ))
    .unwrap();
    let p = &c.paths[0];
    assert!(p.udp().is_none());
    let s = p.serial().unwrap();
    assert_eq!(s.device, std::path::PathBuf::from("/dev/ttyS0"));
    assert_eq!((s.baud, s.framing, s.mtu), (57600, Framing::Cslip, 1420));
    assert!(s.auto_bps);
    // 5760 bytes/s on the line; 1420-byte datagrams cost 1420 + 2 + 11 line bytes.
    assert_eq!(p.bps, serial_bps(57600, Framing::Cslip, 1420));
    assert!(p.bps > 45_000 && p.bps < 46_080, "{}", p.bps);
    assert_eq!(p.path_config(true).bps, p.bps);

    // Defaults: slip; an explicit bps is kept and not adjusted.
    let c = parse(&serial_cfg(
        "kind = \"serial\"\ndevice = \"/dev/ttyUSB0\"\nbaud = 14400\nbps = 10000\nmtu = 1500\n",
    ))
    .unwrap();
    let s = c.paths[0].serial().unwrap();
    assert_eq!((s.framing, s.mtu, s.auto_bps), (Framing::Slip, 1500, false));
    assert_eq!(c.paths[0].bps, 10000);
}

#[test]
fn serial_path_errors() {
    let e = err(&serial_cfg(
        "kind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 9600\nlocal = \"10.0.0.1:7000\"\n",
    ));
    assert_eq!(
        e,
        "t.toml:9:9: path[0].local: not used by a serial path (it has `device` and `baud`)"
    );
    let e = err(&serial_cfg("kind = \"serial\"\nbaud = 9600\n"));
    assert!(
        e.starts_with("t.toml:4:1: path[0].device: missing (for example device = \"/dev/ttyS0\")"),
        "{e}"
    );
    let e = err(&serial_cfg("kind = \"serial\"\ndevice = \"/dev/ttyS0\"\n"));
    assert_eq!(
        e,
        "t.toml:7:10: path[0].baud: missing (for example baud = 57600)"
    );
    let e = err(&serial_cfg(
        "kind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 5000000\n",
    ));
    assert_eq!(
        e,
        "t.toml:8:8: path[0].baud: 5000000 is out of range (50..=4000000)"
    );
    let e = err(&serial_cfg(
        "kind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 9600\nframing = \"ppp\"\n",
    ));
    assert_eq!(
        e,
        "t.toml:9:11: path[0].framing: unknown framing \"ppp\" (expected slip, slip6 or cslip)"
    );
    let e = err(&serial_cfg(
        "kind = \"serial\"\ndevice = \"ttyS0\"\nbaud = 9600\n",
    ));
    assert!(
        e.starts_with("t.toml:7:10: path[0].device: \"ttyS0\" is not an absolute path"),
        "{e}"
    );
    let e = err(&serial_cfg(
        "kind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 9600\nmtu = 296\n",
    ));
    assert!(
        e.starts_with("t.toml:9:7: path[0].mtu: 296 is smaller than bond.mtu + 20"),
        "{e}"
    );
    let e = err(&serial_cfg("kind = \"modem\"\n"));
    assert_eq!(
        e,
        "t.toml:6:8: path[0].kind: unknown kind \"modem\" (\"udp\", \"serial\" or \"ethernet\")"
    );
    let e = err(&serial_cfg(
        "local = \"10.0.0.1:7000\"\nremote = \"10.0.0.2:7000\"\nbaud = 9600\n",
    ));
    assert_eq!(e, "t.toml:8:8: path[0].baud: only for kind = \"serial\"");
    // On a UDP path, `mtu` is the link's (a PPPoE uplink: 1492).
    let c = parse(&serial_cfg(
        "local = \"10.0.0.1:7000\"\nremote = \"10.0.0.2:7000\"\nmtu = 1492\n",
    ))
    .expect("a UDP path with its link mtu");
    assert_eq!(c.paths[0].udp().map(|u| u.link_mtu), Some(1492));
    let e = err(&serial_cfg(
        "local = \"10.0.0.1:7000\"\nremote = \"10.0.0.2:7000\"\nmtu = 100\n",
    ));
    assert!(
        e.contains("path[0].mtu: 100 is out of range (576..=65535)"),
        "{e}"
    );
    let two = "[bond]\naddress = \"10.0.0.1/30\"\nencryption = \"none\"\n[[path]]\nname = \"a\"\nkind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 9600\n[[path]]\nname = \"b\"\nkind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 9600\n";
    assert_eq!(
        err(two),
        "t.toml:12:10: path[1].device: /dev/ttyS0 is already used by another path"
    );
}

#[test]
fn serial_lines_scale_the_bond_defaults() {
    let c = parse(&serial_cfg(
        "kind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 115200\n",
    ))
    .unwrap();
    // 1422 bytes at 11520 bytes/s: 123.4 ms a frame.
    assert_eq!(
        c.bond.core.health.probe_interval,
        Duration::from_millis(312)
    );
    assert_eq!(c.bond.core.reorder_max, Duration::from_millis(2468));
    assert_eq!(c.bond.core.queue_max_delay, Duration::from_millis(987));
    // Keys given win; the slowest line counts; raw-ip and UDP bonds keep the defaults.
    let two = "[bond]\naddress = \"10.0.0.1/30\"\nencryption = \"none\"\nprobe_interval_ms = 150\n\
               [[path]]\nname = \"s0\"\nkind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 115200\n\
               [[path]]\nname = \"s1\"\nkind = \"serial\"\ndevice = \"/dev/ttyS1\"\nbaud = 9600\n";
    let c = parse(two).unwrap();
    assert_eq!(
        c.bond.core.health.probe_interval,
        Duration::from_millis(150)
    );
    assert_eq!(c.bond.core.reorder_max, Duration::from_millis(10_000));
    let d = serial_defaults(&c.paths).unwrap();
    assert_eq!(d.probe_interval, Duration::from_millis(3750));
    let raw = parse(&serial_cfg(
        "kind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 115200\nmode = \"raw-ip\"\n",
    ))
    .unwrap();
    assert_eq!(serial_defaults(&raw.paths), None);
    assert_eq!(raw.bond.core.reorder_max, Duration::from_millis(200));
}

#[test]
fn serial_raw_ip_mode() {
    let raw = "kind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 57600\nframing = \"cslip\"\nmode = \"raw-ip\"\n";
    let c = parse(&serial_cfg(raw)).unwrap();
    let s = c.paths[0].serial().unwrap();
    assert_eq!(s.mode, SerialMode::RawIp);
    // No braid header on the line: the line's MTU is the TUN's.
    assert_eq!(s.mtu, 1400);
    let c = parse(&serial_cfg(
        "kind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 57600\nmode = \"bond\"\n",
    ))
    .unwrap();
    assert_eq!(c.paths[0].serial().unwrap().mode, SerialMode::Bond);
    assert_eq!(c.paths[0].serial().unwrap().mtu, 1420);

    let e = err(&serial_cfg(
        "kind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 57600\nmode = \"ppp\"\n",
    ));
    assert_eq!(
        e,
        "t.toml:9:8: path[0].mode: unknown mode \"ppp\" (\"bond\" or \"raw-ip\")"
    );
    let e = err(&serial_cfg(
        "local = \"10.0.0.1:7000\"\nremote = \"10.0.0.2:7000\"\nmode = \"raw-ip\"\n",
    ));
    assert_eq!(e, "t.toml:8:8: path[0].mode: only for kind = \"serial\"");
    // Exactly one path.
    let two = format!(
        "{}[[path]]\nname = \"s1\"\nkind = \"serial\"\ndevice = \"/dev/ttyS1\"\nbaud = 9600\n",
        serial_cfg(raw)
    );
    let e = err(&two);
    assert!(
        e.starts_with(
            "t.toml:10:8: path[0].mode: \"raw-ip\" puts the TUN's packets on this one line"
        ) && e.ends_with("this file has 2 paths"),
        "{e}"
    );
    // Plain packets only: no keys.
    let keyed = format!(
        "[bond]\naddress = \"10.0.0.1/30\"\nprivate_key = \"{KEY_A}\"\npeer_public_key = \"{PUB_B}\"\n[[path]]\nname = \"s0\"\n{raw}"
    );
    let e = err(&keyed);
    assert!(e.contains("set bond.encryption = \"none\""), "{e}");
    let e = err(&serial_cfg(&format!("{raw}bps = 40000\n")));
    assert!(
        e.contains("path[0].bps: not used with mode = \"raw-ip\""),
        "{e}"
    );
    let e = err(&serial_cfg(&format!("{raw}mtu = 296\n")));
    assert!(
        e.contains("path[0].mtu: 296 is smaller than bond.mtu = 1400"),
        "{e}"
    );
}

// ---- [bond] keys and encryption ----

const KEY_A: &str = "4AQJJwpUReIFFoMiigEEhG9NryCTnFjPBTxirKNv6nY=";
const PUB_A: &str = "WYL3zwI51cCB1psMlRojhOTdNlYH09Ct1INGahWVq0c=";
const PUB_B: &str = "nmFYF6ZKngdcryo53e+fo7ZbW4nP3CZ47oLl9sHfCRM=";

fn bond_with(lines: &str) -> String {
    format!("[bond]\naddress = \"10.200.0.1/30\"\n{lines}\n")
}

#[test]
fn full_config_has_keys() {
    let c = parse(FULL).unwrap();
    let Encryption::Keys(k) = &c.bond.encryption else {
        panic!("keys expected");
    };
    assert_eq!(k.private_key.public_key().to_base64(), PUB_A);
    assert_eq!(k.peer_public_key.to_base64(), PUB_B);
    assert!(k.preshared_key.is_some());
    assert_eq!(k.rekey_after, None);
}

#[test]
fn no_keys_is_refused_with_the_fix() {
    let e = err("[bond]\naddress = \"10.200.0.1/30\"\n");
    assert!(
        e.starts_with("t.toml:1:1: bond.private_key: missing"),
        "{e}"
    );
    assert!(
        e.contains("braid genkey") && e.contains("encryption = \"none\""),
        "{e}"
    );
    let e = err(&bond_with(&format!("private_key = \"{KEY_A}\"")));
    assert!(e.contains("bond.peer_public_key: missing"), "{e}");
    assert_eq!(
        parse(&bond_with("encryption = \"none\""))
            .unwrap()
            .bond
            .encryption,
        Encryption::None
    );
}

/// `encryption` names the cipher a sealed bond seals with; `auto`, the default, the
/// faster one on this CPU.
#[test]
fn encryption_names_the_cipher() {
    let keys = format!("private_key = \"{KEY_A}\"\npeer_public_key = \"{PUB_B}\"");
    let cipher = |line: &str| match parse(&bond_with(&format!("{keys}\n{line}")))
        .unwrap()
        .bond
        .encryption
    {
        Encryption::Keys(k) => k.cipher,
        Encryption::None => panic!("keys expected"),
    };
    assert_eq!(cipher(""), Cipher::preferred());
    assert_eq!(cipher("encryption = \"auto\""), Cipher::preferred());
    assert_eq!(cipher("encryption = \"aes-256-gcm\""), Cipher::Aes256Gcm);
    assert_eq!(
        cipher("encryption = \"chacha20-poly1305\""),
        Cipher::ChaCha20Poly1305
    );
    let e = err(&bond_with("encryption = \"aes-256-gcm\""));
    assert!(e.contains("bond.private_key: missing"), "{e}");
    let e = err(&bond_with(&format!("{keys}\nencryption = \"aes-128\"")));
    assert!(
        e.contains("bond.encryption: \"aes-128\" is not known: \"auto\""),
        "{e}"
    );
    assert!(
        e.contains("\"chacha20-poly1305\", \"aes-256-gcm\", or \"none\""),
        "{e}"
    );
}

#[test]
fn termios_baud_rounds_up_to_a_standard_rate() {
    assert_eq!(termios_baud(57600), 57600);
    assert_eq!(termios_baud(14400), 19200);
    assert_eq!(termios_baud(50), 300);
    assert_eq!(termios_baud(4_000_000), 4_000_000);
    // SLIP6 carries 3 bytes in 4 characters.
    let slip = serial_bps(9600, Framing::Slip, 1420);
    let slip6 = serial_bps(9600, Framing::Slip6, 1420);
    assert!(
        (slip6 as f64 / slip as f64 - 0.75).abs() < 0.01,
        "{slip} {slip6}"
    );
}

#[test]
fn bad_keys_name_the_key_and_line() {
    let e = err(&bond_with(&format!(
        "private_key = \"!!!!\"\npeer_public_key = \"{PUB_B}\""
    )));
    assert!(
        e.starts_with("t.toml:3:15: bond.private_key: key is not valid base64"),
        "{e}"
    );
    let e = err(&bond_with(&format!(
        "private_key = \"{KEY_A}\"\npeer_public_key = \"AAAA\""
    )));
    assert!(
        e.starts_with("t.toml:4:19: bond.peer_public_key: key decodes to 3 bytes"),
        "{e}"
    );
    let e = err(&bond_with(&format!(
        "private_key = \"{KEY_A}\"\npeer_public_key = \"{PUB_A}\""
    )));
    assert!(e.contains("this host's own public key"), "{e}");
    let e = err(&bond_with("encryption = \"aes\""));
    assert!(
        e.starts_with("t.toml:3:14: bond.encryption: \"aes\" is not known"),
        "{e}"
    );
    let e = err(&bond_with(&format!(
        "encryption = \"none\"\npeer_public_key = \"{PUB_B}\""
    )));
    assert!(e.contains("are both set"), "{e}");
    let e = err(&bond_with(&format!(
        "private_key = \"{KEY_A}\"\npeer_public_key = \"{PUB_B}\"\nrekey_after_s = 0"
    )));
    assert!(e.contains("bond.rekey_after_s: 0 is out of range"), "{e}");
}

#[test]
fn key_files_relative_and_mode_checked() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("braid-cfgkeys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("a.key");
    std::fs::write(&key, format!("{KEY_A}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let cfg = dir.join("braid.toml");
    let text = bond_with(&format!(
        "private_key_file = \"a.key\"\npeer_public_key = \"{PUB_B}\""
    ));
    let e = Config::parse(&text, cfg.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bond.private_key_file: ") && e.contains("a.key has mode 0640"),
        "{e}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = Config::parse(&text, cfg.to_str().unwrap()).unwrap();
    assert_eq!(c.bond.encryption.name(), Cipher::preferred().name());
    let both = bond_with(&format!(
        "private_key = \"{KEY_A}\"\nprivate_key_file = \"a.key\"\npeer_public_key = \"{PUB_B}\""
    ));
    let e = Config::parse(&both, cfg.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not both"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_inline_key_in_a_config_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("braid-inline-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("b.toml");
    std::fs::write(&f, FULL).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = Config::load(&f).unwrap_err().to_string();
    let line = FULL
        .lines()
        .position(|l| l.starts_with("private_key"))
        .unwrap();
    assert_eq!(
        e,
        format!(
            "{f}:{}:15: bond.private_key: {f} has mode 0644: a config file with a key inline must not be accessible to group or others (chmod 600 {f}), or keep the key in bond.private_key_file",
            line + 1,
            f = f.display()
        )
    );
    // The preshared key alone is a secret as well.
    let psk_only = FULL.replace(
        "private_key = \"4AQJJwpUReIFFoMiigEEhG9NryCTnFjPBTxirKNv6nY=\"",
        "private_key_file = \"k\"",
    );
    crate::files::write_private(&dir.join("k"), &crate::keys::genkey()).unwrap();
    std::fs::write(&f, &psk_only).unwrap();
    let e = Config::load(&f).unwrap_err().to_string();
    assert!(
        e.contains("bond.preshared_key: ") && e.contains("mode 0644"),
        "{e}"
    );
    // Mode 0600: accepted; keys in files only: the config's mode does not matter.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    Config::load(&f).unwrap();
    let files_only = psk_only.replace("preshared_key = ", "# preshared_key = ");
    std::fs::write(&f, files_only).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    Config::load(&f).unwrap();
    // Text that is not a file has no mode to check.
    Config::parse(FULL, "b.toml").unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn user_and_group_to_run_as() {
    let base = "[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n";
    let c = Config::parse(&format!("{base}user = \"nobody\"\n"), "u.toml").unwrap();
    assert_eq!(
        c.bond.run_as,
        Some(crate::privileges::RunAs {
            user: "nobody".into(),
            group: None
        })
    );
    let c = Config::parse(
        &format!("{base}user = \"braid\"\ngroup = \"dialout\"\n"),
        "u.toml",
    )
    .unwrap();
    assert_eq!(c.bond.run_as.unwrap().group.as_deref(), Some("dialout"));
    assert_eq!(Config::parse(base, "u.toml").unwrap().bond.run_as, None);
    for (extra, want) in [
        (
            "group = \"x\"\n",
            "u.toml:4:9: bond.group: needs bond.user (the user to run as)",
        ),
        (
            "user = \"a b\"\n",
            "u.toml:4:8: bond.user: \"a b\" is not a user or group name (letters, digits, _ . -)",
        ),
        (
            "user = \"x\"\ngroup = \"\"\n",
            "u.toml:5:9: bond.group: \"\" is not a user or group name (1-32 characters)",
        ),
    ] {
        let e = Config::parse(&format!("{base}{extra}"), "u.toml")
            .unwrap_err()
            .to_string();
        assert_eq!(e, want);
    }
}

/// A sealed `[bond]` with inline keys (the config is not read from a file, so no mode check).
fn sealed_bond() -> String {
    format!("[bond]\naddress = \"10.0.0.1/30\"\nprivate_key = \"{KEY_A}\"\npeer_public_key = \"{PUB_B}\"\n")
}

#[test]
fn uplinks_that_change() {
    // A DHCP uplink: its device's address, whatever it is; a server by name.
    let c = parse(&format!(
        "{MIN_BOND}[[path]]\nname = \"lte\"\nlocal = \"0.0.0.0:7000\"\ndev = \"wwan0\"\nremote = \"vpn.example.org:7000\"\n\
         [[path]]\nname = \"dsl\"\nlocal = \"0.0.0.0:7000\"\ndev = \"eth1\"\nremote = \"198.51.100.1:7001\"\n"
    )).unwrap();
    let u = c.paths[0].udp().unwrap();
    assert_eq!(u.local, "0.0.0.0:7000".parse().unwrap());
    assert_eq!(
        u.remote,
        Remote::Name {
            host: "vpn.example.org".into(),
            port: 7000
        }
    );
    // The same unspecified local on the same device is one socket twice.
    let e = err(&format!(
        "{MIN_BOND}[[path]]\nname = \"a\"\nlocal = \"0.0.0.0:7000\"\ndev = \"eth1\"\nremote = \"10.0.0.2:1\"\n\
         [[path]]\nname = \"b\"\nlocal = \"0.0.0.0:7000\"\ndev = \"eth1\"\nremote = \"10.0.0.2:2\"\n"
    ));
    assert!(
        e.contains("path[1].local: 0.0.0.0:7000 is already used by another path"),
        "{e}"
    );
    let e = err(&format!(
        "{MIN_BOND}[[path]]\nname = \"a\"\nlocal = \"10.0.0.1:7000\"\nremote = \"10.0.0.300:7000\"\n"
    ));
    assert!(
        e.contains("path[0].remote: \"10.0.0.300:7000\": \"10.0.0.300\" is not an IPv4 address"),
        "{e}"
    );
    // A server's path without `remote`: learned, on a sealed bond only.
    let c = parse(&format!(
        "{}[[path]]\nname = \"a\"\nlocal = \"10.0.0.1:7000\"\n",
        sealed_bond()
    ))
    .unwrap();
    assert_eq!(c.paths[0].udp().unwrap().remote, Remote::Learn);
}

#[test]
fn routes_and_hooks() {
    let c = parse(
        "[bond]\naddress = \"10.0.0.1/30\"\nencryption = \"none\"\nroutes = [\"0.0.0.0/0\", \"10.8.0.0/16\", \"::/0\"]\n\
         fwmark = 4242\npost_up = \"nft -f /etc/braid/nat.nft\"\npre_down = [\"echo a\", \"echo b\"]\n",
    )
    .unwrap();
    let r = &c.bond.routing;
    assert_eq!(r.routes.len(), 3);
    assert!(r.uses_table());
    assert_eq!(r.fwmark, Some(4242));
    assert_eq!(r.post_up, ["nft -f /etc/braid/nat.nft"]);
    assert_eq!(r.pre_down, ["echo a", "echo b"]);
    let c = parse(MIN_BOND).unwrap();
    assert_eq!(c.bond.routing, RoutingSettings::default());
    for (extra, want) in [
        (
            "routes = [\"10.8.1.0/16\"]",
            "t.toml:4:10: bond.routes: \"10.8.1.0/16\" has host bits set: the network is 10.8.0.0/16",
        ),
        (
            "routes = [\"0.0.0.0/0\", \"0.0.0.0/0\"]",
            "t.toml:4:10: bond.routes: 0.0.0.0/0 is listed twice",
        ),
        (
            "fwmark = 0",
            "t.toml:4:10: bond.fwmark: 0 is out of range (1..=4294967295)",
        ),
        (
            "post_up = [\"\"]",
            "t.toml:4:11: bond.post_up: \"\" is not a command (empty, or holds a NUL)",
        ),
    ] {
        assert_eq!(err(&format!("{MIN_BOND}{extra}\n")), want, "{extra}");
    }
    let e = err(&format!(
        "{MIN_BOND}routes = [\"0.0.0.0/0\"]\nuser = \"nobody\"\n"
    ));
    assert!(e.contains("bond.routes: not with bond.user"), "{e}");
}
