//! Integration test over emulated serial lines in network namespaces: the real `braid`
//! binary on both ends of two lines (115200 bd CSLIP and 57600 bd SLIP, the lab's pty
//! line emulator), ping through the bond, and a TCP transfer that must arrive
//! byte-identical.
//!
//! Needs root (namespaces, TUN). Without it the test skips with a message, unless
//! `BRAID_REQUIRE_NETNS=1`, which makes it fail instead.
mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::Result;
use braid_lab::netns::Topology;
use braid_lab::run::{paths_of, Daemons};
use braid_lab::scenario::Scenario;
use braid_lab::serial::{self, SerialLines};

const BOND_B: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);

/// The tests here run one at a time: each drives emulated lines whose pacing a parallel
/// test's CPU use disturbs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn usable() -> Option<std::sync::MutexGuard<'static, ()>> {
    common::serial_netns_usable("the serial netns test")
        .then(|| ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner()))
}

const SCENARIO: &str = r#"
name = "serial-test"
[bond]
scheduler = "adaptive"
probe_interval_ms = 500
queue_max_delay_ms = 500
reorder_max_ms = 400
[[path]]
name = "fast"
kind = "serial"
baud = 115200
framing = "cslip"
[[path]]
name = "slow"
kind = "serial"
baud = 57600
framing = "slip"
[[test]]
"#;

#[test]
fn ping_and_tcp_through_a_bond_of_two_serial_lines() -> Result<()> {
    let Some(_one) = usable() else {
        return Ok(());
    };
    let sc = Scenario::parse(SCENARIO)?;
    let topo = Topology::new(1)?;
    let lines = SerialLines::start(&sc)?;
    let devices = lines.devices();
    let cfg_a = sc.daemon_config_with(true, &topo.links, None, &devices)?;
    let cfg_b = sc.daemon_config_with(false, &topo.links, None, &devices)?;
    let mut d = Daemons::start(common::braid().as_path(), &topo, "serial", &cfg_a, &cfg_b)?;
    d.wait_paths_up(&["fast", "slow"], Duration::from_secs(15))?;

    let (replies, rtt) = serial::ping(&topo.ns_a, BOND_B, 5, Duration::from_millis(200), 56)?;
    assert_eq!(replies, 5, "every ping answered");
    // 84 + 20 bytes each way at 5760-11520 bytes/s: about 10-40 ms.
    let rtt = rtt.expect("an average RTT");
    assert!(rtt > 5.0 && rtt < 200.0, "rtt {rtt} ms");

    let bytes = 200_000;
    let a0 = paths_of(&d.status_a()?);
    let t = serial::tcp_transfer(&topo, BOND_B, 5301, bytes, None, Duration::from_secs(30))?;
    assert_eq!(t.bytes, bytes, "every byte arrived, in order, unchanged");
    // 200 KB over 11520 + 5760 bytes/s of line: at least ~11.6 s; both lines carry.
    assert!(t.seconds > 10.0 && t.seconds < 40.0, "{} s", t.seconds);
    let a1 = paths_of(&d.status_a()?);
    for name in ["fast", "slow"] {
        let before = a0.iter().find(|p| p.name == name).map_or(0, |p| p.tx_bytes);
        let after = a1.iter().find(|p| p.name == name).map_or(0, |p| p.tx_bytes);
        assert!(
            after - before > 20_000,
            "path {name} carried {} bytes",
            after - before
        );
    }
    let st = d.status_a()?;
    let io = st["io"].as_array().expect("io");
    assert_eq!(io[0]["kind"], "serial");
    assert_eq!(io[0]["serial"]["framing"], "cslip");
    assert_eq!(io[0]["serial"]["tty"], "open");
    drop(d);
    assert_eq!(lines.relay_error(), None);
    Ok(())
}

/// `braid lab` stopped by SIGINT in the middle of a row (a TCP transfer over the lines)
/// ends within a few seconds and deletes the namespaces it made. (Before, the transfer
/// ran to the end of the row, and the interrupt flag also killed the `ip netns del` of the
/// cleanup, so every interrupted lab left its namespaces behind.)
#[test]
fn interrupted_lab_stops_and_removes_its_namespaces() -> Result<()> {
    use braid_lab::netns::now;
    use std::process::{Command, Stdio};
    let Some(_one) = usable() else {
        return Ok(());
    };
    let mut lab = Command::new(common::braid())
        .args(["lab", "bentson", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let prefix = format!("braid-{}-", lab.id());
    let namespaces = || -> Vec<String> {
        let out = Command::new("ip").args(["netns", "list"]).output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        text.unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&prefix))
            .map(str::to_owned)
            .collect()
    };
    // Wait for the first row's namespaces, then for its transfer to be under way.
    let start = now();
    while namespaces().len() < 2 && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let made = namespaces();
    std::thread::sleep(Duration::from_secs(6));
    let pid = libc::pid_t::try_from(lab.id())?;
    // SAFETY: kill has no memory preconditions; `pid` is our own child, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let sent = now();
    let status = loop {
        if let Some(st) = lab.try_wait()? {
            break Some(st);
        }
        if sent.elapsed() > Duration::from_secs(20) {
            let _ = lab.kill();
            let _ = lab.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = sent.elapsed();
    let left = namespaces();
    for ns in &left {
        let _ = Command::new("ip").args(["netns", "del", ns]).status();
    }
    let mut stderr = String::new();
    if let Some(mut e) = lab.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    assert_eq!(made.len(), 2, "the lab made a namespace pair: {made:?}");
    let status = status.expect("the lab ends within 20 s of SIGINT");
    assert!(!status.success(), "an interrupted lab exits non-zero");
    assert!(stderr.contains("interrupted"), "says why: {stderr}");
    assert!(
        took < Duration::from_secs(10),
        "ended {took:?} after SIGINT"
    );
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    Ok(())
}
