use super::*;

const KEYS: &str = "private_key = \"4AQJJwpUReIFFoMiigEEhG9NryCTnFjPBTxirKNv6nY=\"\npeer_public_key = \"nmFYF6ZKngdcryo53e+fo7ZbW4nP3CZ47oLl9sHfCRM=\"\n";

/// A two-path sealed bond; `bond` goes into `[bond]`, `more` after the paths.
fn cfg(bond: &str, more: &str) -> Config {
    let text = format!(
        "[bond]\naddress = \"10.200.0.1/30\"\nmtu = 1300\n{KEYS}{bond}\n\
         [[path]]\nname = \"p0\"\nlocal = \"10.201.0.1:7000\"\nremote = \"10.201.0.2:7000\"\n\
         [[path]]\nname = \"p1\"\nlocal = \"10.201.1.1:7000\"\nremote = \"10.201.1.2:7000\"\n{more}"
    );
    Config::parse(&text, "t.toml").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn lines(a: &Config, b: &Config) -> Vec<String> {
    diff(a, b)
        .unwrap_or_else(|r| panic!("refused: {r:?}"))
        .lines()
}

fn refused(a: &Config, b: &Config) -> Vec<String> {
    match diff(a, b) {
        Ok(d) => panic!("accepted: {:?}", d.lines()),
        Err(r) => r.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn the_same_file_changes_nothing() {
    let a = cfg("", "");
    let d = diff(&a, &a.clone()).unwrap();
    assert!(d.is_empty());
    assert!(d.lines().is_empty());
}

#[test]
fn paths_added_removed_and_changed() {
    let a = cfg("", "");
    let b = cfg(
        "",
        "[[path]]\nname = \"p2\"\nlocal = \"10.201.2.1:7000\"\nremote = \"10.201.2.2:7000\"\nbps = 5000000\n",
    );
    let d = diff(&a, &b).unwrap();
    assert_eq!(
        d.lines(),
        ["path p2 added: 10.201.2.1:7000 -> 10.201.2.2:7000"]
    );
    assert!(matches!(&d.paths[..], [PathChange::Added(p)] if p.bps == 5_000_000));
    assert_eq!(lines(&b, &a), ["path p2 removed"]);

    // Speed, priority, peer address: in place.
    let mut c = a.clone();
    c.paths[0].bps = 20_000_000;
    c.paths[0].prio = 3;
    if let Transport::Udp(u) = &mut c.paths[1].transport {
        u.remote = crate::config::Remote::Addr("10.201.1.9:7001".parse().unwrap());
    }
    let d = diff(&a, &c).unwrap();
    assert_eq!(
        d.lines(),
        [
            "path p0: bps 0 -> 20000000, prio 0 -> 3",
            "path p1: remote 10.201.1.2:7000 -> 10.201.1.9:7001"
        ]
    );
    assert!(d.paths.iter().all(|p| matches!(
        p,
        PathChange::Changed {
            reopen: Reopen::No,
            ..
        }
    )));

    // A new local address or device: the socket is re-opened.
    let mut e = a.clone();
    if let Transport::Udp(u) = &mut e.paths[0].transport {
        u.local = "10.201.0.1:7100".parse().unwrap();
        u.dev = Some("eth9".into());
    }
    let d = diff(&a, &e).unwrap();
    assert_eq!(
        d.lines(),
        ["path p0: local 10.201.0.1:7000 -> 10.201.0.1:7100, dev none -> eth9 (socket re-opened)"]
    );
    assert!(matches!(
        d.paths[..],
        [PathChange::Changed {
            reopen: Reopen::Socket,
            ..
        }]
    ));

    // A new link MTU changes the path's largest datagram: the path is re-created.
    let mut m = a.clone();
    if let Transport::Udp(u) = &mut m.paths[1].transport {
        u.link_mtu = 9000;
    }
    let d = diff(&a, &m).unwrap();
    assert_eq!(d.lines(), ["path p1: mtu 1500 -> 9000 (path re-created)"]);

    // Removed first, then changed, then added.
    let mut f = b.clone();
    f.paths.remove(0);
    f.paths[0].bps = 1;
    let d = diff(&a, &f).unwrap();
    assert_eq!(
        d.lines(),
        [
            "path p0 removed",
            "path p1: bps 0 -> 1",
            "path p2 added: 10.201.2.1:7000 -> 10.201.2.2:7000"
        ]
    );
}

#[test]
fn a_serial_line_with_new_settings_is_re_created() {
    let line = |baud: u32| {
        cfg(
            "",
            &format!("[[path]]\nname = \"s0\"\nkind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = {baud}\n"),
        )
    };
    let d = diff(&line(57600), &line(115200)).unwrap();
    // The line's datagram rate follows the baud rate; so do the serial defaults.
    assert!(matches!(
        &d.paths[..],
        [PathChange::Changed {
            reopen: Reopen::Recreate,
            ..
        }]
    ));
    let l = d.lines();
    assert!(
        l.iter()
            .any(|l| l.starts_with("path s0: baud 57600 -> 115200, bps ")
                && l.ends_with("(path re-created)")),
        "{l:?}"
    );
}

#[test]
fn bond_keys_change_at_run_time() {
    let a = cfg("", "");
    let b = cfg(
        "scheduler = \"eql\"\nprobe_interval_ms = 200\ndown_after = 5\nreorder_max_ms = 50\nqueue_max_delay_ms = 30\nequalize_ms = 0\nseed = 4\nmss_clamp = false\n",
        "",
    );
    assert_eq!(
        lines(&a, &b),
        [
            "bond.scheduler adaptive -> eql",
            "bond.probe_interval_ms 100 -> 200",
            "bond.down_after 3 -> 5",
            "bond.reorder_max_ms 200 -> 50",
            "bond.queue_max_delay_ms 100 -> 30",
            "bond.equalize_ms 100 -> 0",
            "bond.seed 0 -> 4",
            "bond.mss_clamp true -> false"
        ]
    );
    let x = cfg("scheduler = \"xor\"\nhash = \"layer3+4\"\n", "");
    assert_eq!(
        lines(&cfg("scheduler = \"xor\"\n", ""), &x),
        ["bond.hash layer2 -> layer3+4"]
    );
}

#[test]
fn the_primary_is_compared_by_name() {
    let ab = |primary: &str| {
        cfg(
            &format!("scheduler = \"active-backup\"\nprimary = \"{primary}\"\nupdelay_ms = 10\n"),
            "",
        )
    };
    assert_eq!(lines(&ab("p0"), &ab("p1")), ["bond.primary p0 -> p1"]);
    // The same primary, now second in the file (its id in the new file is 1, not 0):
    // no change.
    let a = ab("p1");
    let mut b = a.clone();
    b.paths.swap(0, 1);
    if let SchedulerConfig::ActiveBackup(o) = &mut b.bond.core.scheduler {
        o.primary = Some(braid_core::PathId(0));
    }
    assert!(diff(&a, &b).unwrap().is_empty());
}

#[test]
fn what_cannot_change_is_refused_by_key() {
    let a = cfg("", "");
    let mut b = a.clone();
    b.bond.interface = "braid9".into();
    b.bond.mtu = 1400;
    b.bond.offload = false;
    b.bond.workers = Some(0);
    b.bond.layer = super::super::Layer::Ethernet;
    b.bond.mac = Some([2, 0, 0, 0, 0, 9]);
    b.bond.address = super::super::parse_cidr4("10.200.9.1/30").unwrap();
    b.paths[0].bps = 7; // a change that could be made: refused with the rest
    assert_eq!(
        refused(&a, &b),
        [
            "bond.interface (braid0 -> braid9)",
            "bond.address (10.200.0.1/30 -> 10.200.9.1/30)",
            "bond.mtu (1300 -> 1400)",
            "bond.offload (true -> false)",
            "bond.workers (auto -> 0)",
            "bond.layer (ip -> ethernet)",
            "bond.mac (unset -> 02:00:00:00:00:09)"
        ]
    );
    // Keys are named, not shown.
    let other = "private_key = \"qDLFMEVmrDBqc9BbOQsL0u3pJ0Wi2k0t2t0HYjf1Zms=\"\n";
    let c = Config::parse(
        &cfg("", "")
            .paths
            .iter()
            .fold(
                format!("[bond]\naddress = \"10.200.0.1/30\"\nmtu = 1300\n{other}peer_public_key = \"nmFYF6ZKngdcryo53e+fo7ZbW4nP3CZ47oLl9sHfCRM=\"\n"),
                |t, p| {
                    let u = p.udp().unwrap();
                    t + &format!("[[path]]\nname = \"{}\"\nlocal = \"{}\"\nremote = \"{}\"\n", p.name, u.local, u.remote)
                },
            ),
        "t.toml",
    )
    .unwrap();
    let r = refused(&a, &c);
    assert_eq!(r, ["bond.private_key (changed)"]);
    assert!(!r[0].contains("qDLF"), "the key is not shown");
    let mut d = a.clone();
    d.bond.encryption = Encryption::None;
    assert_eq!(refused(&a, &d), ["bond.encryption (keys -> none)"]);
    let u = cfg("user = \"nobody\"\n", "");
    assert_eq!(refused(&a, &u), ["bond.user (root -> nobody)"]);
}

const SHAPE: &str = r#"
[shape]
rate = "10mbit"
default = "1:20"
[[shape.class]]
id = "1:1"
rate = "10mbit"
[[shape.class]]
id = "1:10"
parent = "1:1"
rate = "1mbit"
ceil = "10mbit"
[[shape.class]]
id = "1:20"
parent = "1:1"
rate = "9mbit"
[[shape.filter]]
protocol = "udp"
dport = "5060"
class = "1:10"
"#;

#[test]
fn classes_change_in_place_and_a_new_tree_replaces_the_shaper() {
    let a = cfg("", SHAPE);
    let b = cfg(
        "",
        &SHAPE.replace(
            "rate = \"1mbit\"\nceil = \"10mbit\"",
            "rate = \"2mbit\"\nceil = \"10mbit\"\nprio = 3",
        ),
    );
    let d = diff(&a, &b).unwrap();
    assert_eq!(d.lines(), ["class 1:10: rate 1Mbit -> 2Mbit, prio 0 -> 3"]);
    let ShapeChange::Classes(cs) = &d.shape else {
        panic!("{:?}", d.shape)
    };
    assert_eq!(cs[0].0.rate_bps, 2_000_000);

    let f = cfg("", &SHAPE.replace("dport = \"5060\"", "dport = \"5061\""));
    assert_eq!(lines(&a, &f), ["[shape] replaced (filters changed)"]);
    let g = cfg(
        "",
        &format!("{SHAPE}[[shape.class]]\nid = \"1:30\"\nparent = \"1:1\"\nrate = \"1mbit\"\n"),
    );
    assert_eq!(
        lines(&a, &g),
        ["[shape] replaced (classes added, removed or moved)"]
    );
    let r = cfg(
        "",
        &SHAPE.replace("rate = \"10mbit\"\ndefault", "rate = \"20mbit\"\ndefault"),
    );
    assert_eq!(lines(&a, &r), ["[shape] replaced (rate 10Mbit -> 20Mbit)"]);
    let none = cfg("", "");
    assert_eq!(lines(&none, &a), ["[shape] added"]);
    assert_eq!(lines(&a, &none), ["[shape] removed"]);
}

#[test]
fn a_raw_ip_line_is_kept_as_it_runs() {
    let raw = |baud: u32| {
        Config::parse(
            &format!("[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n[[path]]\nname = \"s0\"\nkind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = {baud}\nmode = \"raw-ip\"\n"),
            "t.toml",
        )
        .unwrap()
    };
    assert_eq!(
        refused(&raw(9600), &raw(19200)),
        ["path[0].mode (a bond in mode = \"raw-ip\" runs its one line as it was started)"]
    );
    assert!(diff(&raw(9600), &raw(9600)).unwrap().is_empty());
}

#[test]
fn routes_and_hooks_need_a_restart() {
    let a = cfg("routes = [\"0.0.0.0/0\"]\npost_up = \"true\"", "");
    let b = cfg(
        "routes = [\"0.0.0.0/0\", \"10.8.0.0/16\"]\nfwmark = 7\npost_up = \"false\"\npre_down = \"true\"",
        "",
    );
    assert_eq!(
        refused(&a, &b),
        [
            "bond.routes ([0.0.0.0/0] -> [0.0.0.0/0, 10.8.0.0/16])",
            "bond.fwmark (auto -> 7)",
            "bond.post_up (changed)",
            "bond.pre_down (changed)",
        ]
    );
    assert!(lines(&a, &a.clone()).is_empty());
}

#[test]
fn uplink_keys_change_at_run_time() {
    let a = cfg("", "");
    let mut text = String::new();
    text.push_str("[[path]]\nname = \"p2\"\nlocal = \"0.0.0.0:7002\"\ndev = \"wwan0\"\nremote = \"vpn.example.org:7002\"\n");
    text.push_str("[[path]]\nname = \"p3\"\nlocal = \"10.201.3.1:7000\"\n");
    let b = cfg("", &text);
    assert_eq!(
        lines(&a, &b),
        [
            "path p2 added: 0.0.0.0:7002 -> vpn.example.org:7002 dev wwan0",
            "path p3 added: 10.201.3.1:7000 -> (learned from the peer)",
        ]
    );
    // A remote that becomes a name, and a local that starts following its device.
    let c = cfg(
        "",
        &text
            .replace("vpn.example.org:7002", "10.0.0.9:7002")
            .replace(
                "local = \"10.201.3.1:7000\"",
                "local = \"0.0.0.0:7000\"\ndev = \"eth3\"",
            ),
    );
    assert_eq!(
        lines(&b, &c),
        [
            "path p2: remote vpn.example.org:7002 -> 10.0.0.9:7002",
            "path p3: local 10.201.3.1:7000 -> 0.0.0.0:7000, dev none -> eth3 (socket re-opened)",
        ]
    );
}

#[test]
fn the_monitor_is_restart_only() {
    let a = cfg("", "");
    let b = cfg(
        "",
        "[monitor]\nlisten = \"127.0.0.1:9190\"\nhistory = false\n",
    );
    assert_eq!(
        refused(&a, &b),
        ["monitor (its listener and history file are set up at start)"]
    );
    let c = cfg(
        "",
        "[monitor]\nlisten = \"127.0.0.1:9191\"\nhistory = false\n",
    );
    assert_eq!(refused(&b, &c).len(), 1);
    assert!(diff(&b, &b.clone()).is_ok());
}
