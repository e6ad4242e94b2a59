//! `braid up` for real, in two network namespaces joined by veth pairs (needs root; skips
//! otherwise unless BRAID_REQUIRE_NETNS=1).
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

fn sh(args: &[&str]) -> std::process::Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run command")
}

fn ok(args: &[&str]) {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Two namespaces `A` and `B` joined by `n` veth pairs: path i is 10.201.i.1 <-> 10.201.i.2.
/// Dropping it kills the daemons it started and deletes the namespaces.
struct Lab {
    a: String,
    b: String,
    dir: PathBuf,
    daemons: Vec<Child>,
}

impl Lab {
    fn new(tag: &str, n: usize) -> Lab {
        let pid = std::process::id();
        let lab = Lab {
            a: format!("braidtest-{tag}a-{pid}"),
            b: format!("braidtest-{tag}b-{pid}"),
            dir: common::scratch(&format!("netns-{tag}")),
            daemons: Vec::new(),
        };
        ok(&["ip", "netns", "add", &lab.a]);
        ok(&["ip", "netns", "add", &lab.b]);
        for i in 0..n {
            let (va, vb) = (format!("va{i}"), format!("vb{i}"));
            ok(&[
                "ip", "link", "add", &va, "netns", &lab.a, "type", "veth", "peer", "name", &vb,
                "netns", &lab.b,
            ]);
            ok(&[
                "ip",
                "-n",
                &lab.a,
                "addr",
                "add",
                &format!("10.201.{i}.1/24"),
                "dev",
                &va,
            ]);
            ok(&[
                "ip",
                "-n",
                &lab.b,
                "addr",
                "add",
                &format!("10.201.{i}.2/24"),
                "dev",
                &vb,
            ]);
            ok(&["ip", "-n", &lab.a, "link", "set", &va, "up"]);
            ok(&["ip", "-n", &lab.b, "link", "set", &vb, "up"]);
        }
        lab
    }

    fn config(&self, side: u8, paths: usize, extra: &str) -> PathBuf {
        let peer = 3 - side;
        let keys = if extra.contains("encryption") {
            String::new()
        } else {
            braid_lab::scenario::key_lines(side == 1)
        };
        let mut t = format!("[bond]\ninterface = \"braid0\"\naddress = \"10.200.0.{side}/30\"\nmtu = 1300\n{keys}{extra}\n");
        for i in 0..paths {
            t.push_str(&format!(
                "[[path]]\nname = \"p{i}\"\nlocal = \"10.201.{i}.{side}:7000\"\nremote = \"10.201.{i}.{peer}:7000\"\n"
            ));
        }
        let f = self.dir.join(format!("{side}.toml"));
        braid::files::write_private(&f, &t).expect("write config");
        f
    }

    fn ns(&self, side: u8) -> &str {
        if side == 1 {
            &self.a
        } else {
            &self.b
        }
    }

    fn sock(&self, side: u8) -> PathBuf {
        self.dir.join(format!("{side}.sock"))
    }

    /// Start `braid up` on a side and wait until its control socket answers.
    fn up(&mut self, side: u8, cfg: &Path) -> usize {
        self.up_with(side, cfg, &[])
    }

    /// [`Lab::up`] with more arguments for `braid up`.
    fn up_with(&mut self, side: u8, cfg: &Path, args: &[&str]) -> usize {
        let log = std::fs::File::create(self.dir.join(format!("{side}.log"))).expect("log file");
        let child = Command::new("ip")
            .args(["netns", "exec", self.ns(side)])
            .arg(common::braid())
            .args(["up", "--config"])
            .arg(cfg)
            .arg("--control")
            .arg(self.sock(side))
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn braid up");
        self.daemons.push(child);
        let i = self.daemons.len() - 1;
        for _ in 0..100 {
            if self.status(side).is_some() {
                return i;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "braid up on side {side} not ready in 5 s; log:\n{}",
            self.log(side)
        );
    }

    fn log(&self, side: u8) -> String {
        std::fs::read_to_string(self.dir.join(format!("{side}.log"))).unwrap_or_default()
    }

    fn braid(&self, side: u8, args: &[&str]) -> std::process::Output {
        Command::new(common::braid())
            .args(args)
            .arg("--control")
            .arg(self.sock(side))
            .output()
            .expect("run braid")
    }

    fn status(&self, side: u8) -> Option<Value> {
        let o = self.braid(side, &["status", "--json"]);
        // 3 and 4: degraded or down (paths not up yet), but the daemon answered.
        matches!(o.status.code(), Some(0 | 3 | 4))
            .then(|| serde_json::from_slice(&o.stdout).ok())
            .flatten()
    }

    fn exec(&self, side: u8, args: &[&str]) -> std::process::Output {
        let mut full = vec!["ip", "netns", "exec", self.ns(side)];
        full.extend_from_slice(args);
        sh(&full)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.daemons {
            // SAFETY: kill(2) on the pid of a child we started and have not reaped.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
            }
            let _ = c.wait();
        }
        let _ = sh(&["ip", "netns", "del", &self.a]);
        let _ = sh(&["ip", "netns", "del", &self.b]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn up_configures_tun_serves_control_and_cleans_up() {
    if !common::require_root() {
        return;
    }
    let mut lab = Lab::new("life", 3);
    let cfg = lab.config(1, 2, "");
    let i = lab.up(1, &cfg);

    // The TUN exists with the address and MTU.
    let o = lab.exec(1, &["ip", "-o", "addr", "show", "dev", "braid0"]);
    let addrs = String::from_utf8_lossy(&o.stdout);
    assert!(addrs.contains("inet 10.200.0.1/30"), "{addrs}");
    let o = lab.exec(1, &["ip", "-o", "link", "show", "dev", "braid0"]);
    let link = String::from_utf8_lossy(&o.stdout);
    assert!(link.contains("mtu 1300") && link.contains(",UP"), "{link}");
    // Prefix route from the netmask.
    let o = lab.exec(1, &["ip", "-o", "route", "show", "dev", "braid0"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("10.200.0.0/30"));

    // Status lists the paths; the control socket is root-only.
    let s = lab.status(1).expect("status");
    assert_eq!(s["interface"], "braid0");
    let names = path_names(&s);
    assert_eq!(names, ["p0", "p1"]);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(lab.sock(1)).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Run-time enslave / set / emancipate.
    let o = lab.braid(
        1,
        &[
            "enslave",
            "p2",
            "--local",
            "10.201.2.1:7000",
            "--remote",
            "10.201.2.2:7000",
            "--bps",
            "1000000",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = lab.braid(
        1,
        &[
            "enslave",
            "p2",
            "--local",
            "10.201.2.1:7001",
            "--remote",
            "10.201.2.2:7000",
        ],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("a path named \"p2\" already exists"));
    let o = lab.braid(1, &["set", "p2", "bps=2000000"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = lab.status(1).unwrap();
    assert_eq!(s["status"]["paths"][2]["name"], "p2");
    assert_eq!(s["status"]["paths"][2]["bps"], 2_000_000);
    assert_eq!(s["io"][2]["socket"], "open");
    let o = lab.braid(1, &["emancipate", "p0"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = lab.status(1).unwrap();
    let names = path_names(&s);
    assert_eq!(names, ["p1", "p2"]);

    // Garbage on the control socket does not disturb the daemon.
    {
        use std::io::{BufRead, Write};
        let mut c = std::os::unix::net::UnixStream::connect(lab.sock(1)).unwrap();
        c.write_all(b"hello\n{\"cmd\":\"reboot\"}\n").unwrap();
        let mut r = std::io::BufReader::new(c);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(
            line.contains("\"ok\":false") && line.contains("not JSON"),
            "{line}"
        );
        line.clear();
        r.read_line(&mut line).unwrap();
        assert!(line.contains("unknown cmd"), "{line}");
    }
    assert!(lab.status(1).is_some());

    // A second daemon on the same socket is refused.
    let o = lab.exec(
        1,
        &[
            common::braid().to_str().unwrap(),
            "up",
            "--config",
            cfg.to_str().unwrap(),
            "--control",
            lab.sock(1).to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("another braid is already running"));

    // SIGTERM: exit 0, TUN and socket gone.
    let mut child = lab.daemons.remove(i);
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let st = child.wait().unwrap();
    assert!(st.success(), "exit status {st:?}; log:\n{}", lab.log(1));
    assert!(!lab.sock(1).exists());
    let o = lab.exec(1, &["ip", "link", "show", "dev", "braid0"]);
    assert!(!o.status.success(), "braid0 removed");
    assert!(lab.log(1).contains("SIGTERM received"));
}

/// The path names in a `status --json` answer, in order.
fn path_names(status: &Value) -> Vec<&str> {
    status["status"]["paths"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["name"].as_str()).collect())
        .unwrap_or_default()
}

#[test]
fn shaper_classes_show_and_change_at_run_time() {
    if !common::require_root() {
        return;
    }
    let mut lab = Lab::new("shape", 1);
    let shape = r#"
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
prio = 0
[[shape.class]]
id = "1:20"
parent = "1:1"
rate = "9mbit"
ceil = "10mbit"
[[shape.filter]]
protocol = "udp"
dport = "5060-5061"
class = "1:10"
"#;
    let cfg = lab.config(1, 1, shape);
    lab.up(1, &cfg);
    let show = |lab: &Lab| -> Value {
        let o = lab.braid(1, &["class", "show", "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).expect("class show --json is JSON")
    };
    let v = show(&lab);
    let ids: Vec<&str> = v["classes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, ["1:1", "1:10", "1:20"]);
    assert_eq!(v["classes"][1]["name"], "voice");
    assert_eq!(v["classes"][1]["rate_bps"], 1_000_000);

    let o = lab.braid(1, &["class", "change", "1:10", "rate=2mbit", "prio=3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = show(&lab);
    assert_eq!(v["classes"][1]["rate_bps"], 2_000_000);
    assert_eq!(v["classes"][1]["prio"], 3);
    let table = lab.braid(1, &["class", "show"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("  1:10 voice"), "{table}");

    for (args, want) in [
        (
            vec!["class", "change", "1:99", "rate=1mbit"],
            "no class 1:99",
        ),
        (vec!["class", "change", "1:10", "rate=fast"], "rate:"),
        (
            vec!["class", "change", "1:10", "colour=red"],
            "unknown setting",
        ),
    ] {
        let o = lab.braid(1, &args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert!(lab.status(1).is_some(), "the daemon survives bad requests");
    assert!(lab.log(1).contains("class 1:10 changed"), "{}", lab.log(1));

    // A bond without [shape] says so.
    let plain = lab.config(2, 1, "");
    let mut other = Lab::new("noshape", 1);
    other.up(2, &plain);
    let o = other.braid(2, &["class", "show"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no shaper"));
}

/// Send a datagram from side 1's bond address to side 2's through the bond and wait for
/// its echo: true once one came back within `limit` (a ping without `ping`).
fn bond_echo(lab: &Lab, limit: Duration) -> bool {
    use braid_lab::netns::spawn_in_netns;
    use std::net::UdpSocket;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let echo = spawn_in_netns(lab.ns(2), move || -> anyhow::Result<()> {
        let s = UdpSocket::bind("10.200.0.2:5599")?;
        s.set_read_timeout(Some(Duration::from_millis(100)))?;
        let mut buf = [0u8; 64];
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                s.send_to(&buf[..n], from)?;
            }
        }
        Ok(())
    })
    .expect("echo thread");
    let client = spawn_in_netns(lab.ns(1), move || -> anyhow::Result<bool> {
        let s = UdpSocket::bind("10.200.0.1:0")?;
        s.set_read_timeout(Some(Duration::from_millis(100)))?;
        let mut buf = [0u8; 64];
        let tries = (limit.as_millis() / 100).max(1);
        for i in 0..tries {
            let msg = format!("echo {i}");
            let _ = s.send_to(msg.as_bytes(), "10.200.0.2:5599");
            if let Ok((n, _)) = s.recv_from(&mut buf) {
                if buf[..n] == *msg.as_bytes() {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    })
    .expect("client thread");
    let got = client.join().expect("client").expect("client socket");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    echo.join().expect("echo").expect("echo socket");
    got
}

/// A line of /proc/PID/status (`Uid`, `CapEff`...), its value.
fn proc_status(pid: u32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default()
}

/// Wait until `side`'s log holds `what` (at most `limit`).
fn wait_log(lab: &Lab, side: u8, what: &str, limit: Duration) -> bool {
    let t = braid_lab::netns::now();
    while t.elapsed() < limit {
        if lab.log(side).contains(what) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn up_as_nobody_keeps_only_what_it_needs_and_still_bonds() {
    if !common::require_root() {
        return;
    }
    let mut lab = Lab::new("privs", 1);
    // Port 700: re-opening the path's socket needs CAP_NET_BIND_SERVICE.
    let low_port = |f: PathBuf| {
        let t = std::fs::read_to_string(&f)
            .unwrap()
            .replace(":7000", ":700");
        braid::files::write_private(&f, &t).unwrap();
        f
    };
    let (c1, c2) = (
        low_port(lab.config(1, 1, "")),
        low_port(lab.config(2, 1, "")),
    );
    let i = lab.up_with(1, &c1, &["--user", "nobody"]);
    lab.up(2, &c2);
    let pid = lab.daemons[i].id();
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap(),
        "braid\n",
        "`ip netns exec` execs braid itself"
    );
    assert_eq!(proc_status(pid, "Uid"), "65534\t65534\t65534\t65534");
    assert_eq!(proc_status(pid, "Gid"), "65534\t65534\t65534\t65534");
    let bind_service = format!("{:016x}", 1u64 << 10); // CAP_NET_BIND_SERVICE
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(proc_status(pid, set), bind_service, "{set}");
    }
    assert_eq!(proc_status(pid, "CapInh"), "0000000000000000");
    assert_eq!(proc_status(pid, "CapAmb"), "0000000000000000");
    assert_eq!(proc_status(pid, "NoNewPrivs"), "1");
    assert!(
        lab.log(1)
            .contains("braid: running as user nobody (uid 65534)"),
        "{}",
        lab.log(1)
    );

    // status says so, to root and to the daemon's own user.
    let v = lab.status(1).expect("status");
    let p = &v["privileges"];
    assert_eq!(p["user"], "nobody");
    assert_eq!(p["uid"], 65534);
    assert_eq!(p["dropped"], true);
    assert_eq!(
        p["capabilities"],
        serde_json::json!(["CAP_NET_BIND_SERVICE"])
    );
    assert_eq!(p["no_new_privs"], true);
    let text = lab.braid(1, &["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("privileges: user nobody (uid 65534), group nogroup (gid 65534), dropped; capabilities: net_bind_service; no_new_privs"),
        "{text}"
    );
    assert_eq!(
        lab.status(2).expect("status")["privileges"]["dropped"],
        false
    );
    let as_nobody = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::braid())
        .args(["status", "--json", "--control"])
        .arg(lab.sock(1))
        .output();
    if let Ok(o) = as_nobody {
        // Answered (0 up, 3 degraded, 4 down: the health is not what is tested here).
        assert!(
            matches!(o.status.code(), Some(0 | 3 | 4)),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    assert!(bond_echo(&lab, Duration::from_secs(10)), "{}", lab.log(1));

    // The path's address goes away: its socket fails (ENETUNREACH from an address that is
    // no longer the host's; the same error from a link that went down keeps the socket).
    // Back again, the daemon (as nobody) re-binds port 700 and the bond carries traffic
    // again.
    ok(&[
        "ip",
        "-n",
        &lab.a,
        "addr",
        "del",
        "10.201.0.1/24",
        "dev",
        "va0",
    ]);
    ok(&[
        "ip",
        "-n",
        &lab.a,
        "route",
        "add",
        "10.201.0.0/24",
        "dev",
        "va0",
    ]);
    assert!(
        wait_log(&lab, 1, "retrying every 1s", Duration::from_secs(5)),
        "{}",
        lab.log(1)
    );
    ok(&[
        "ip",
        "-n",
        &lab.a,
        "route",
        "del",
        "10.201.0.0/24",
        "dev",
        "va0",
    ]);
    ok(&[
        "ip",
        "-n",
        &lab.a,
        "addr",
        "add",
        "10.201.0.1/24",
        "dev",
        "va0",
    ]);
    assert!(
        wait_log(
            &lab,
            1,
            "path p0: socket open again",
            Duration::from_secs(5)
        ),
        "{}",
        lab.log(1)
    );
    assert!(bond_echo(&lab, Duration::from_secs(10)), "{}", lab.log(1));
}

#[test]
fn up_with_a_wrong_user_says_so() {
    if !common::require_root() {
        return;
    }
    let lab = Lab::new("nouser", 1);
    let cfg = lab.config(1, 1, "");
    let o = lab.exec(
        1,
        &[
            common::braid().to_str().unwrap(),
            "up",
            "--config",
            cfg.to_str().unwrap(),
            "--control",
            lab.sock(1).to_str().unwrap(),
            "--user",
            "no-such-user-braid",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "braid: --user no-such-user-braid: unknown user \"no-such-user-braid\" (not in the passwd database)\n"
    );
    let o = lab.exec(1, &["ip", "link", "show", "dev", "braid0"]);
    assert!(!o.status.success(), "no TUN was created");
}

#[test]
fn idle_control_clients_do_not_lock_out_the_cli() {
    if !common::require_root() {
        return;
    }
    let mut lab = Lab::new("idle", 1);
    let cfg = lab.config(1, 1, "");
    lab.up(1, &cfg);
    let idle: Vec<std::os::unix::net::UnixStream> = (0..32)
        .map(|_| std::os::unix::net::UnixStream::connect(lab.sock(1)).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t = braid_lab::netns::now();
    let o = lab.braid(1, &["status", "--json"]);
    // Answered: the lone daemon's bond is down (exit 4), which is not what is tested.
    assert!(
        matches!(o.status.code(), Some(0 | 3 | 4)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    drop(idle);
}
