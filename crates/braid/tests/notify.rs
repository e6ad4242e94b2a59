//! systemd's readiness protocol against a fake `NOTIFY_SOCKET`: `braid up` in a network
//! namespace of its own says `READY=1` only once its TUN, path socket and control socket
//! are there, `RELOADING=1` then `READY=1` around a SIGHUP reload, and `STOPPING=1` on
//! SIGTERM (needs root; skips otherwise unless BRAID_REQUIRE_NETNS=1).
#![allow(clippy::disallowed_methods)] // a deadline on real time for the daemon to answer
mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A namespace and a daemon in it; dropping it kills the daemon and deletes the namespace.
struct Ns {
    name: String,
    daemon: Option<Child>,
}

impl Drop for Ns {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn in_ns(ns: &str, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .expect("run ip netns exec")
}

/// The next notification, or None within `limit`.
fn next(sock: &UnixDatagram, limit: Duration) -> Option<String> {
    sock.set_read_timeout(Some(limit)).expect("set timeout");
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Every string in a JSON value.
fn collect_strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        serde_json::Value::Object(o) => o.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    let pid = i32::try_from(child.id()).expect("pid fits");
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// A namespace of its own (`braidtest-TAG-PID`, loopback up), a scratch directory with a
/// config `n.toml` for a bond on loopback, and the bond's interface name.
fn namespace(tag: &str) -> (Ns, std::path::PathBuf, String) {
    let pid = std::process::id();
    let dir = common::scratch(tag);
    let ns = Ns {
        name: format!("braidtest-{tag}-{pid}"),
        daemon: None,
    };
    assert!(Command::new("ip")
        .args(["netns", "add", &ns.name])
        .status()
        .expect("ip netns add")
        .success());
    assert!(in_ns(&ns.name, &["ip", "link", "set", "lo", "up"])
        .status
        .success());
    let iface = format!("bn{}", pid % 100_000);
    std::fs::write(
        dir.join("n.toml"),
        format!(
            "[bond]\ninterface = \"{iface}\"\naddress = \"10.252.0.1/30\"\nencryption = \"none\"\n\
             [[path]]\nname = \"p0\"\nlocal = \"127.0.0.1:7311\"\nremote = \"127.0.0.1:7312\"\n"
        ),
    )
    .expect("write config");
    (ns, dir, iface)
}

/// `braid up` in namespace `ns`, with a fake `NOTIFY_SOCKET` if given.
fn up(ns: &str, cfg: &Path, control: &Path, notify: Option<&Path>) -> Child {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(common::braid())
        .args(["up", "--config"])
        .arg(cfg)
        .arg("--control")
        .arg(control)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(n) = notify {
        c.env("NOTIFY_SOCKET", n);
    }
    c.spawn().expect("start braid up")
}

/// Wait (at most 10 s) for `child` to exit; its status.
fn exit_of(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        assert!(Instant::now() < deadline, "daemon did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn braid_down_stops_the_daemon_and_removes_its_interface() {
    let Some(_lock) =
        common::netns_or_skip("braid_down_stops_the_daemon_and_removes_its_interface")
    else {
        return;
    };
    let (mut ns, dir, iface) = namespace("down");
    let control = dir.join("n.sock");
    ns.daemon = Some(up(&ns.name, &dir.join("n.toml"), &control, None));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&control).is_err() {
        assert!(Instant::now() < deadline, "no control socket within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::new(common::braid())
        .args(["down", "--control"])
        .arg(&control)
        .output()
        .expect("braid down");
    assert!(
        out.status.success(),
        "braid down: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "down\n");
    let mut d = ns.daemon.take().expect("daemon");
    assert!(exit_of(&mut d).success());
    let link = in_ns(&ns.name, &["ip", "-o", "link", "show", "dev", &iface]);
    assert!(
        !link.status.success(),
        "{iface} still there after braid down"
    );
    assert!(!control.exists(), "control socket left behind");
    // Nothing answers any more: a second `braid down` says so.
    let again = Command::new(common::braid())
        .args(["down", "--control"])
        .arg(&control)
        .output()
        .expect("braid down");
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("is `braid up` running?"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    drop(ns);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ready_after_tun_and_sockets_reloading_and_stopping() {
    let Some(_lock) = common::netns_or_skip("ready_after_tun_and_sockets_reloading_and_stopping")
    else {
        return;
    };
    let (mut ns, dir, iface) = namespace("notify");
    let cfg = dir.join("n.toml");
    let control = dir.join("n.sock");
    let notify_path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&notify_path).expect("bind the fake NOTIFY_SOCKET");

    let started = Instant::now();
    ns.daemon = Some(up(&ns.name, &cfg, &control, Some(&notify_path)));
    let daemon = ns.daemon.as_ref().expect("just set");
    let msg = next(&sock, Duration::from_secs(10)).expect("READY=1 within 10 s");
    // At READY the TUN, the path's socket and the control socket are there (checked
    // before anything else can happen: the daemon does nothing more until it is asked).
    let link = in_ns(&ns.name, &["ip", "-o", "link", "show", "dev", &iface]);
    let udp =
        String::from_utf8_lossy(&in_ns(&ns.name, &["cat", "/proc/net/udp"]).stdout).into_owned();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
    assert!(msg.contains("STATUS="), "{msg:?}");
    assert!(link.status.success(), "no TUN {iface} at READY=1");
    assert!(
        udp.contains(":1C8F "),
        "no socket on port 7311 at READY=1:\n{udp}"
    );
    assert!(control.exists(), "no control socket at READY=1");
    eprintln!("READY=1 {} ms after start", started.elapsed().as_millis());

    // Then `status --json` answers, with its schema version and no Rust Debug text
    // (`"session": "SessionId(1204220710)"` was there once).
    let out = Command::new(common::braid())
        .args(["status", "--json", "--control"])
        .arg(&control)
        .output()
        .expect("braid status");
    let status: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("status --json is JSON");
    assert!(status["version"].is_u64(), "{status}");
    let mut strings = Vec::new();
    collect_strings(&status, &mut strings);
    for s in &strings {
        let debug_like = s.contains("Some(")
            || s == "None"
            || s.contains(" { ")
            || s.split_once('(').is_some_and(|(head, _)| {
                head.len() > 1
                    && head.chars().all(|c| c.is_ascii_alphabetic())
                    && head.starts_with(|c: char| c.is_ascii_uppercase())
            });
        assert!(!debug_like, "Rust Debug text in status --json: {s:?}");
    }

    // SIGHUP: RELOADING=1 (with MONOTONIC_USEC), then READY=1.
    signal(daemon, libc::SIGHUP);
    let msg = next(&sock, Duration::from_secs(10)).expect("RELOADING=1");
    assert!(msg.lines().any(|l| l == "RELOADING=1"), "{msg:?}");
    assert!(msg.contains("MONOTONIC_USEC="), "{msg:?}");
    let msg = next(&sock, Duration::from_secs(10)).expect("READY=1 after the reload");
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");

    // SIGTERM: STOPPING=1, and the daemon exits 0.
    signal(daemon, libc::SIGTERM);
    let msg = next(&sock, Duration::from_secs(10)).expect("STOPPING=1");
    assert!(msg.lines().any(|l| l == "STOPPING=1"), "{msg:?}");
    let mut d = ns.daemon.take().expect("daemon");
    let status = exit_of(&mut d);
    assert!(status.success(), "{status}");
    drop(ns);
    let _ = std::fs::remove_dir_all(&dir);
}
