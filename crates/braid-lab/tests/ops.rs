//! Operating a running bond, in network namespaces with the real `braid` binary: a config
//! reload (SIGHUP and `braid reload`) under a TCP flow and pings, refused reloads, the
//! exit status of `braid status`, and what the log says about mismatched keys.
//!
//! Root only: without namespaces they skip with a message, unless `BRAID_REQUIRE_NETNS=1`.
//! One at a time (a lock); each in its own namespaces, deleted even on failure.
mod common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use braid_lab::netns::{now, Topology};
use braid_lab::run::{paths_of, Daemons};
use braid_lab::scenario::key_lines;

const BOND_B: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);

/// Side a's (or b's) config with the first `paths` links of `topo`; `bond` goes into
/// `[bond]` after the keys, `p0` into the first path, `tail` at the end.
fn config(
    topo: &Topology,
    a: bool,
    keys: &str,
    bond: &str,
    paths: usize,
    p0: &str,
    tail: &str,
) -> String {
    let side = if a { 1 } else { 2 };
    let mut t =
        format!("[bond]\ninterface = \"braid0\"\naddress = \"10.200.0.{side}/30\"\n{keys}{bond}\n");
    for l in topo.links.iter().take(paths) {
        let (local, remote) = if a {
            (l.addr_a, l.addr_b)
        } else {
            (l.addr_b, l.addr_a)
        };
        t.push_str(&format!(
            "[[path]]\nname = \"p{}\"\nlocal = \"{local}:7000\"\nremote = \"{remote}:7000\"\n{}\n",
            l.index,
            if l.index == 0 { p0 } else { "" }
        ));
    }
    t + tail
}

/// The config file `Daemons::start` wrote for a side.
fn config_file(topo: &Topology, tag: &str, a: bool) -> std::path::PathBuf {
    topo.file(&format!("{tag}-{}.toml", if a { "a" } else { "b" }))
}

fn write(file: &Path, text: &str) {
    std::fs::write(file, text).expect("write config");
}

fn braid(args: &[&str], sock: &Path) -> Output {
    Command::new(common::braid())
        .args(args)
        .arg("--control")
        .arg(sock)
        .output()
        .expect("run braid")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn log(d: &Daemons, a: bool) -> String {
    let p = if a { &d.a.log } else { &d.b.log };
    p.as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default()
}

fn sighup(pid: u32) {
    // SAFETY: kill(2) on the pid of a daemon this test started and has not reaped.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGHUP);
    }
}

/// Wait (at most `secs`) until `f` holds.
fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = now() + Duration::from_secs(secs);
    while now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

const SHAPE: &str = r#"[shape]
rate = "40mbit"
default = "1:20"
[[shape.class]]
id = "1:10"
rate = "1mbit"
ceil = "40mbit"
[[shape.class]]
id = "1:20"
rate = "30mbit"
ceil = "40mbit"
[[shape.filter]]
protocol = "udp"
dport = "5060"
class = "1:10"
"#;

#[test]
fn reload_changes_paths_speeds_and_classes_under_a_tcp_flow() {
    let Some(_lock) =
        common::netns_or_skip("reload_changes_paths_speeds_and_classes_under_a_tcp_flow")
    else {
        return;
    };
    let topo = Topology::new(3).unwrap();
    for i in 0..3 {
        topo.set_rate(i, 20_000_000).unwrap();
    }
    let (ka, kb) = (key_lines(true), key_lines(false));
    let cfg_a = config(&topo, true, &ka, "", 2, "", SHAPE);
    let cfg_b = config(&topo, false, &kb, "", 2, "", "");
    let mut d = Daemons::start(common::braid().as_path(), &topo, "rl", &cfg_a, &cfg_b).unwrap();
    d.wait_paths_up(&["p0", "p1"], Duration::from_secs(15))
        .unwrap();
    assert_eq!(common::ping(&topo.ns_a, BOND_B, 3).unwrap(), 3);

    // A TCP flow through the bond for 6 s; the reload comes 2 s in.
    let received = Arc::new(AtomicU64::new(0));
    let topo = Arc::new(topo);
    let (t2, r2) = (Arc::clone(&topo), Arc::clone(&received));
    let flow = std::thread::spawn(move || common::tcp_flow(&t2, BOND_B, 5101, 6.0, u64::MAX, r2));
    std::thread::sleep(Duration::from_secs(2));

    // Add p2, give p0 a speed, change class 1:10: a by SIGHUP, b by `braid reload`.
    let new_a = config(
        &topo,
        true,
        &ka,
        "",
        3,
        "bps = 15000000",
        &SHAPE.replace("rate = \"1mbit\"", "rate = \"2mbit\"\nprio = 3"),
    );
    write(&config_file(&topo, "rl", true), &new_a);
    write(
        &config_file(&topo, "rl", false),
        &config(&topo, false, &kb, "", 3, "bps = 15000000", ""),
    );
    let before = received.load(Ordering::Relaxed);
    sighup(d.a.pid());
    let o = braid(&["reload"], &d.sock_b);
    let (out, err) = text(&o);
    assert!(o.status.success(), "braid reload: {err}");
    assert!(
        out.contains("path p0: bps 0 -> 15000000") && out.contains("path p2 added: "),
        "{out}"
    );
    d.wait_paths_up(&["p0", "p1", "p2"], Duration::from_secs(10))
        .unwrap();
    let (sent, got) = flow.join().unwrap().expect("the flow ran without a reset");
    assert_eq!(sent, got, "every byte arrived, in order");
    assert!(
        got > before + 1_000_000,
        "the flow went on after the reload ({before} -> {got})"
    );

    // The daemons run the new file.
    let la = log(&d, true);
    assert!(la.contains("SIGHUP received, reloading the config"), "{la}");
    for line in [
        "info: reload: path p0: bps 0 -> 15000000",
        "info: reload: path p2 added: 10.201.2.1:7000 -> 10.201.2.2:7000",
        "info: reload: class 1:10: rate 1Mbit -> 2Mbit, prio 0 -> 3",
    ] {
        assert!(la.contains(line), "{line} missing:\n{la}");
    }
    let st = d.status_a().unwrap();
    assert_eq!(st["status"]["paths"][0]["bps"], 15_000_000);
    let names: Vec<String> = paths_of(&st).into_iter().map(|p| p.name).collect();
    assert_eq!(names, ["p0", "p1", "p2"]);
    let o = braid(&["status"], &d.sock_a);
    let (table, _) = text(&o);
    assert!(table.lines().any(|l| l.starts_with("p2  ")), "{table}");
    let o = braid(&["class", "show", "--json"], &d.sock_a);
    let classes: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(classes["classes"][0]["rate_bps"], 2_000_000);
    assert_eq!(classes["classes"][0]["prio"], 3);
    assert_eq!(common::ping(&topo.ns_a, BOND_B, 3).unwrap(), 3);

    // A file with an error: refused, with its line; the daemon runs on unchanged.
    let file_a = config_file(&topo, "rl", true);
    write(&file_a, &format!("{new_a}oops =\n"));
    sighup(d.a.pid());
    let where_ = format!("config not reloaded: {}:", file_a.display());
    assert!(
        eventually(3, || log(&d, true).contains(&where_)),
        "{}",
        log(&d, true)
    );
    let o = braid(&["reload"], &d.sock_a);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with(&format!("braid: {where_}")), "{err}");
    // A key that needs a restart: refused by name.
    write(&file_a, &new_a.replace("[bond]\n", "[bond]\nmtu = 1300\n"));
    let o = braid(&["reload"], &d.sock_a);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("bond.mtu (1500 -> 1300)"), "{err}");
    assert!(d.a.running(), "the daemon runs on");
    d.wait_paths_up(&["p0", "p1", "p2"], Duration::from_secs(5))
        .unwrap();
    assert_eq!(common::ping(&topo.ns_a, BOND_B, 3).unwrap(), 3);
}

#[test]
fn status_exits_3_when_degraded_and_4_when_down() {
    let Some(_lock) = common::netns_or_skip("status_exits_3_when_degraded_and_4_when_down") else {
        return;
    };
    let topo = Topology::new(2).unwrap();
    let fast = "probe_interval_ms = 50\n";
    let cfg_a = config(&topo, true, &key_lines(true), fast, 2, "", "");
    let cfg_b = config(&topo, false, &key_lines(false), fast, 2, "", "");
    let mut d = Daemons::start(common::braid().as_path(), &topo, "st", &cfg_a, &cfg_b).unwrap();
    d.wait_paths_up(&["p0", "p1"], Duration::from_secs(15))
        .unwrap();
    let code = |d: &Daemons| braid(&["status"], &d.sock_a).status.code();
    assert_eq!(code(&d), Some(0));
    let (table, _) = text(&braid(&["status"], &d.sock_a));
    assert!(
        table.contains("latest handshake ") && table.contains("health: up"),
        "{table}"
    );
    let j: serde_json::Value =
        serde_json::from_slice(&braid(&["status", "--json"], &d.sock_a).stdout).unwrap();
    assert_eq!(j["version"], 1);
    assert!(j["encryption"]["session"].is_u64(), "{}", j["encryption"]);
    assert!(j["encryption"]["latest_handshake_age_us"].is_u64());

    topo.set_link(1, false).unwrap();
    assert!(eventually(5, || code(&d) == Some(3)), "degraded: exit 3");
    let (table, _) = text(&braid(&["status"], &d.sock_a));
    assert!(table.contains("health: DEGRADED (p1 down)"), "{table}");
    topo.set_link(0, false).unwrap();
    assert!(eventually(5, || code(&d) == Some(4)), "down: exit 4");
    let o = braid(&["status", "--json"], &d.sock_a);
    assert_eq!(o.status.code(), Some(4), "also with --json");
    assert!(serde_json::from_slice::<serde_json::Value>(&o.stdout).is_ok());
    drop(d);
    let gone = braid(&["status"], &topo.file("st-a.sock"));
    assert_eq!(gone.status.code(), Some(1), "no daemon");
}

#[test]
fn mismatched_keys_are_said_in_the_log() {
    let Some(_lock) = common::netns_or_skip("mismatched_keys_are_said_in_the_log") else {
        return;
    };
    let topo = Topology::new(1).unwrap();
    // b runs with a key of its own instead of the one a expects; it still knows a's.
    let stranger = braid::keys::genkey();
    let kb = key_lines(false);
    let peer = kb.lines().nth(1).expect("peer_public_key line");
    let kb_wrong = format!("private_key = \"{stranger}\"\n{peer}\n");
    let cfg_a = config(&topo, true, &key_lines(true), "", 1, "", "");
    let cfg_b = config(&topo, false, &kb_wrong, "", 1, "", "");
    let d = Daemons::start(common::braid().as_path(), &topo, "km", &cfg_a, &cfg_b).unwrap();
    // a: b's initiations name a's key (mac1 is right) but come from an unknown key.
    let want_a =
        "handshake from 10.201.0.2:7000 on path p0 rejected: not the configured peer_public_key";
    // b: a's initiations are made for the key b should have had.
    let want_b =
        "handshake from 10.201.0.1:7000 on path p0 rejected: not made for this host's public key";
    assert!(
        eventually(8, || log(&d, true).contains(want_a)
            && log(&d, false).contains(want_b)),
        "a:\n{}\nb:\n{}",
        log(&d, true),
        log(&d, false)
    );
    // Said once, not per handshake.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        log(&d, true).matches(want_a).count(),
        1,
        "{}",
        log(&d, true)
    );
    assert_eq!(braid(&["status"], &d.sock_a).status.code(), Some(4));
    assert!(
        key_text_absent(&log(&d, false), &stranger),
        "a private key never goes to the log"
    );
}

fn key_text_absent(log: &str, key: &str) -> bool {
    !log.contains(key)
}
