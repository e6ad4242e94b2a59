//! The deployment guide's lab (`docs/deploy.md`), end to end: the real `braid` binary on a
//! client with two uplinks through two NATing ISPs, and a server that forwards and NATs
//! the bond's traffic to the internet.
//!
//! ```text
//!              up1 10.1.0.2 ── isp1 (NAT) ──┐
//!   client ──                               ├── inet (router; host 192.0.2.80) ── server 100.64.3.2
//!              up2 10.2.0.2 ── isp2 (NAT) ──┘                                      (forwarding + NAT)
//! ```
//!
//! The client: `routes = ["0.0.0.0/0"]` (fwmark rules and table, as wg-quick), paths with
//! `local = "0.0.0.0:PORT"` + `dev` (follow the uplink's address), `remote` by name
//! (`vpn.lab.test`, from the client namespace's own hosts file). The server: no `remote`
//! (learned from the client's authenticated datagrams, through the NATs), NAT set up by a
//! `post_up` hook and removed by `pre_down`. A TCP download from the internet host goes
//! through the bond over both uplinks while isp2 gives the client a new address; pings
//! to the ISP's gateway do not touch the bond.
//!
//! Needs root, iproute2 and nft: skipped with a message otherwise, unless
//! `BRAID_REQUIRE_NETNS=1`. Namespaces `bd-<pid>-<n>-*` (and `/etc/netns/<client ns>`)
//! are removed even on failure.
mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use braid_core::crypto::{OsRng, PrivateKey};
use braid_lab::netns::{self, now, Proc};
use serde_json::Value;

const INET_HOST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 80);
const ISP1_GW: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const PORT: u16 = 5001;
/// Each ISP's downlink to the client, so that one path alone cannot carry the download.
const ISP_RATE: &str = "30mbit";

/// Five namespaces: client, isp1, isp2, server, inet; deleted on drop.
struct Lab {
    cl: String,
    isp1: String,
    isp2: String,
    sv: String,
    inet: String,
    created: Vec<String>,
    etc_netns: PathBuf,
    dir: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in self.created.drain(..) {
            let _ = netns::run_cleanup(
                Command::new("ip").args(["netns", "del", &ns]),
                Duration::from_secs(10),
            );
        }
        let _ = std::fs::remove_dir_all(&self.etc_netns);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ip(ns: &str, args: &str) -> Result<String> {
    let mut a = vec!["-n", ns];
    a.extend(args.split_whitespace());
    netns::ip(&a)
}

fn in_ns(ns: &str, prog: &str, args: &[&str]) -> Result<String> {
    netns::run_ok(netns::ns_command(ns, prog).args(args))
}

/// A veth pair `a_dev` in `a` with `a_addr`, `b_dev` in `b` with `b_addr`, both up.
fn link(a: &str, a_dev: &str, a_addr: &str, b: &str, b_dev: &str, b_addr: &str) -> Result<()> {
    ip(
        a,
        &format!("link add {a_dev} type veth peer name {b_dev} netns {b}"),
    )?;
    ip(a, &format!("addr add {a_addr} dev {a_dev}"))?;
    ip(b, &format!("addr add {b_addr} dev {b_dev}"))?;
    ip(a, &format!("link set {a_dev} up"))?;
    ip(b, &format!("link set {b_dev} up"))?;
    Ok(())
}

fn forwarding(ns: &str) -> Result<()> {
    in_ns(ns, "sysctl", &["-q", "-w", "net.ipv4.ip_forward=1"]).map(drop)
}

/// Masquerade what leaves `ns` through `dev` (a home router's NAT).
fn masquerade(ns: &str, dev: &str) -> Result<()> {
    let rules = format!(
        "table ip nat {{\n chain post {{ type nat hook postrouting priority 100; oifname \"{dev}\" masquerade; }}\n}}\n"
    );
    let f = std::env::temp_dir().join(format!("braid-deploy-{ns}.nft"));
    std::fs::write(&f, rules)?;
    let r = in_ns(ns, "nft", &["-f", &f.display().to_string()]);
    let _ = std::fs::remove_file(&f);
    r.map(drop)
}

impl Lab {
    fn new() -> Result<Lab> {
        static N: AtomicU64 = AtomicU64::new(0);
        let tag = format!(
            "bd-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let ns = |s: &str| format!("{tag}-{s}");
        let mut lab = Lab {
            cl: ns("cl"),
            isp1: ns("isp1"),
            isp2: ns("isp2"),
            sv: ns("sv"),
            inet: ns("inet"),
            created: Vec::new(),
            etc_netns: PathBuf::from(format!("/etc/netns/{}", ns("cl"))),
            dir: common::scratch(&tag),
        };
        for n in [&lab.cl, &lab.isp1, &lab.isp2, &lab.sv, &lab.inet].map(String::clone) {
            netns::ip(&["netns", "add", &n])?;
            lab.created.push(n.clone());
            ip(&n, "link set lo up")?;
        }
        let (cl, i1, i2, sv, inet) = (&lab.cl, &lab.isp1, &lab.isp2, &lab.sv, &lab.inet);
        link(cl, "up1", "10.1.0.2/24", i1, "lan", "10.1.0.1/24")?;
        link(cl, "up2", "10.2.0.2/24", i2, "lan", "10.2.0.1/24")?;
        link(i1, "wan", "100.64.1.2/30", inet, "isp1", "100.64.1.1/30")?;
        link(i2, "wan", "100.64.2.2/30", inet, "isp2", "100.64.2.1/30")?;
        link(sv, "wan", "100.64.3.2/30", inet, "srv", "100.64.3.1/30")?;
        ip(inet, &format!("addr add {INET_HOST}/32 dev lo"))?;
        for n in [i1, i2, sv] {
            ip(
                n,
                &format!("route add default via 100.64.{}.1", octet(&lab, n)),
            )?;
        }
        for n in [i1, i2, sv, inet] {
            forwarding(n)?;
        }
        masquerade(i1, "wan")?;
        masquerade(i2, "wan")?;
        // Loose reverse-path filtering, as systemd sets it (strict would drop the server's
        // datagrams: unmarked, their source routes through the bond; docs/deploy.md).
        in_ns(cl, "sysctl", &["-q", "-w", "net.ipv4.conf.all.rp_filter=2"])?;
        // The client's uplinks: a default route through each ISP, the first preferred.
        ip(cl, "route add default via 10.1.0.1 dev up1 metric 100")?;
        ip(cl, "route add default via 10.2.0.1 dev up2 metric 200")?;
        // Each ISP's downlink is a 30 Mbit/s line.
        for n in [i1, i2] {
            netns::run_ok(Command::new("tc").args([
                "-n", n, "qdisc", "replace", "dev", "lan", "root", "tbf", "rate", ISP_RATE,
                "burst", "8000", "latency", "50ms",
            ]))?;
        }
        // The server's name, for the client only (`ip netns exec` mounts it on /etc/hosts).
        std::fs::create_dir_all(&lab.etc_netns)?;
        std::fs::write(
            lab.etc_netns.join("hosts"),
            "127.0.0.1 localhost\n100.64.3.2 vpn.lab.test\n",
        )?;
        Ok(lab)
    }
}

fn octet(lab: &Lab, ns: &str) -> u8 {
    if ns == lab.isp1 {
        1
    } else if ns == lab.isp2 {
        2
    } else {
        3
    }
}

/// Key files and the two configs as `docs/deploy.md` has them.
fn configs(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let (kc, ks) = (
        PrivateKey::generate(&mut OsRng),
        PrivateKey::generate(&mut OsRng),
    );
    for (name, k) in [("client.key", &kc), ("server.key", &ks)] {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.join(name))?;
        writeln!(f, "{}", k.to_base64())?;
    }
    let client = format!(
        r#"[bond]
interface = "braid0"
address = "10.200.0.2/30"
private_key_file = "client.key"
peer_public_key = "{}"
routes = ["0.0.0.0/0"]

[[path]]
name = "isp1"
local = "0.0.0.0:7000"
dev = "up1"
remote = "vpn.lab.test:7000"

[[path]]
name = "isp2"
local = "0.0.0.0:7001"
dev = "up2"
remote = "vpn.lab.test:7001"
"#,
        ks.public_key().to_base64()
    );
    let server = format!(
        r#"[bond]
interface = "braid0"
address = "10.200.0.1/30"
private_key_file = "server.key"
peer_public_key = "{}"
post_up = "nft add table ip braid && nft add chain ip braid post '{{ type nat hook postrouting priority 100; }}' && nft add rule ip braid post ip saddr 10.200.0.0/30 oifname wan masquerade"
pre_down = "nft delete table ip braid"

[[path]]
name = "isp1"
local = "100.64.3.2:7000"

[[path]]
name = "isp2"
local = "100.64.3.2:7001"
"#,
        kc.public_key().to_base64()
    );
    let (c, s) = (dir.join("client.toml"), dir.join("server.toml"));
    std::fs::write(&c, client)?;
    std::fs::write(&s, server)?;
    Ok((c, s))
}

fn up(ns: &str, conf: &Path, sock: &Path, log: &Path) -> Result<Proc> {
    let mut cmd = netns::ns_command(ns, common::braid());
    cmd.arg("up")
        .arg("--config")
        .arg(conf)
        .arg("--control")
        .arg(sock);
    Proc::spawn(&format!("braid up in {ns}"), &mut cmd, false, Some(log))
}

fn status(sock: &Path) -> Result<Value> {
    braid_lab::run::status(&common::braid(), sock)
}

/// Per path: (state, tx_bytes) from `braid status --json`.
fn paths(v: &Value) -> Vec<(String, u64)> {
    v["status"]["paths"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    (
                        p["state"].as_str().unwrap_or("?").to_owned(),
                        p["tx_bytes"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn wait_up(sock: &Path, within: Duration, daemons: &mut [&mut Proc]) -> Result<()> {
    let end = now() + within;
    loop {
        for d in daemons.iter_mut() {
            if !d.running() {
                bail!("{} exited: {}", d.name, d.log_tail());
            }
        }
        if let Ok(v) = status(sock) {
            if paths(&v).len() == 2 && paths(&v).iter().all(|(s, _)| s == "up") {
                return Ok(());
            }
        }
        if now() > end {
            bail!(
                "paths not up within {within:?}: {}",
                status(sock).map_or_else(|e| e.to_string(), |v| v["io"].to_string())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The bond interface's transmitted packets in `ns` (the kernel's count).
fn braid0_tx(ns: &str) -> Result<u64> {
    let out = netns::ip(&["-n", ns, "-s", "-j", "link", "show", "braid0"])?;
    let v: Value = serde_json::from_str(&out).context("ip -j")?;
    v[0]["stats64"]["tx"]["packets"]
        .as_u64()
        .ok_or_else(|| anyhow!("no tx packets in {out}"))
}

/// A download of `secs` seconds from the internet host to the client, every byte checked;
/// `moved` runs `at` seconds in. The bytes received.
fn download(lab: &Lab, secs: f64, at: f64, moved: impl FnOnce() -> Result<()>) -> Result<u64> {
    let addr = SocketAddr::from((INET_HOST, PORT));
    let tx = netns::spawn_in_netns(&lab.inet, move || -> Result<u64> {
        let l = TcpListener::bind(addr).context("bind on the internet host")?;
        l.set_nonblocking(true)?;
        let end = now() + Duration::from_secs(10);
        let mut s = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && now() < end => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => bail!("accept: {e}"),
            }
        };
        s.set_nonblocking(false)?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        let end = now() + Duration::from_secs_f64(secs);
        let mut buf = vec![0u8; 16384];
        let mut off = 0u64;
        while now() < end {
            for (k, b) in buf.iter_mut().enumerate() {
                *b = common::pattern(off + k as u64);
            }
            s.write_all(&buf).context("write on the internet host")?;
            off += buf.len() as u64;
        }
        Ok(off)
    })?;
    std::thread::sleep(Duration::from_millis(200));
    let got = Arc::new(AtomicU64::new(0));
    let got2 = Arc::clone(&got);
    let rx = netns::spawn_in_netns(&lab.cl, move || -> Result<u64> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .context("connect from the client")?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = vec![0u8; 65536];
        let mut off = 0u64;
        loop {
            let n = s.read(&mut buf).context("read on the client")?;
            if n == 0 {
                return Ok(off);
            }
            for (k, &b) in buf[..n].iter().enumerate() {
                if b != common::pattern(off + k as u64) {
                    bail!("byte {} differs", off + k as u64);
                }
            }
            off += n as u64;
            got2.store(off, Ordering::Relaxed);
        }
    })?;
    std::thread::sleep(Duration::from_secs_f64(at));
    let before = got.load(Ordering::Relaxed);
    moved()?;
    let sent = tx.join().map_err(|_| anyhow!("sender panicked"))??;
    let received = rx.join().map_err(|_| anyhow!("receiver panicked"))??;
    if received != sent {
        bail!("sent {sent} bytes, received {received}");
    }
    if received <= before {
        bail!("nothing arrived after the address change ({before} bytes before)");
    }
    Ok(received)
}

#[test]
fn deployment_guide_lab() {
    let why = common::netns_unusable().or_else(|| {
        netns::which("nft")
            .is_none()
            .then_some("`nft` (nftables) not found")
    });
    if !common::runs(
        "deployment_guide_lab",
        "network namespaces, a TUN device and nft",
        why,
    ) {
        return;
    }
    let Some(_one) = common::netns_or_skip("deployment_guide_lab") else {
        return;
    };
    if let Err(e) = run() {
        panic!("{e:#}");
    }
}

fn run() -> Result<()> {
    let start = now();
    let lab = Lab::new()?;
    let (client_conf, server_conf) = configs(&lab.dir)?;
    let (csock, ssock) = (lab.dir.join("client.sock"), lab.dir.join("server.sock"));
    let mut server = up(&lab.sv, &server_conf, &ssock, &lab.dir.join("server.log"))?;
    // The server's own post_up NAT, once it is up.
    let end = now() + Duration::from_secs(10);
    while status(&ssock).is_err() {
        if now() > end || !server.running() {
            bail!("server did not start: {}", server.log_tail());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let tables = in_ns(&lab.sv, "nft", &["list", "tables"])?;
    if !tables.contains("table ip braid") {
        bail!("the server's post_up hook did not run: {tables}");
    }
    let mut client = up(&lab.cl, &client_conf, &csock, &lab.dir.join("client.log"))?;
    wait_up(
        &csock,
        Duration::from_secs(10),
        &mut [&mut client, &mut server],
    )?;
    let rules = ip(&lab.cl, "rule show")?;
    if !rules.contains("not from all fwmark 0xca6c lookup 51820")
        || !rules.contains("from all lookup main suppress_prefixlength 0")
    {
        bail!("the client's fwmark rules are missing: {rules}");
    }
    let table = ip(&lab.cl, "route show table 51820")?;
    if !table.contains("default dev braid0") {
        bail!("no default route through the bond in table 51820: {table}");
    }
    eprintln!(
        "deploy lab: both paths up {:.1} s after start",
        now().duration_since(start).as_secs_f64()
    );

    // The uplink's own traffic: a ping to the ISP's gateway does not enter the bond; a
    // ping to the internet host does.
    let tx0 = braid0_tx(&lab.cl)?;
    let replies = common::ping(&lab.cl, ISP1_GW, 3)?;
    let tx1 = braid0_tx(&lab.cl)?;
    if replies != 3 || tx1 != tx0 {
        bail!("ping to the ISP's gateway: {replies}/3 replies, braid0 sent {} packets (none expected)", tx1 - tx0);
    }
    let replies = common::ping(&lab.cl, INET_HOST, 3)?;
    let tx2 = braid0_tx(&lab.cl)?;
    if replies != 3 || tx2 < tx1 + 3 {
        bail!(
            "ping to the internet host: {replies}/3 replies, braid0 sent {} packets (3 expected)",
            tx2 - tx1
        );
    }

    // The download, with isp2 giving the client a new address 2 s in (as DHCP would).
    let before = paths(&status(&ssock)?);
    let cl = lab.cl.clone();
    let moved_at = std::sync::Mutex::new(None);
    let got = download(&lab, 6.0, 2.0, || {
        ip(&cl, "addr del 10.2.0.2/24 dev up2")?;
        ip(&cl, "addr add 10.2.0.3/24 dev up2")?;
        ip(&cl, "route add default via 10.2.0.1 dev up2 metric 200")?;
        *moved_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(paths(&status(&ssock)?));
        Ok(())
    })?;
    let after = paths(&status(&ssock)?);
    let at_move = moved_at
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .ok_or_else(|| anyhow!("address not changed"))?;
    let share: Vec<u64> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.1.saturating_sub(b.1))
        .collect();
    let total: u64 = share.iter().sum();
    let isp2_after_move = after[1].1.saturating_sub(at_move[1].1);
    eprintln!(
        "deploy lab: {:.1} MB downloaded in 6 s ({:.1} Mbit/s); server sent isp1 {:.1} MB, isp2 {:.1} MB ({:.1} MB of it after the address change)",
        got as f64 / 1e6,
        got as f64 * 8.0 / 6.0 / 1e6,
        share[0] as f64 / 1e6,
        share[1] as f64 / 1e6,
        isp2_after_move as f64 / 1e6
    );
    for (i, s) in share.iter().enumerate() {
        if *s * 5 < total {
            bail!(
                "path isp{} carried {s} of {total} bytes (under 20 %)",
                i + 1
            );
        }
    }
    if isp2_after_move < 1_000_000 {
        bail!("isp2 carried {isp2_after_move} bytes after the address change: not back in use");
    }
    let io = status(&ssock)?;
    let learned = io["io"][1]["remote"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if !learned.starts_with("100.64.2.2:") {
        bail!(
            "the server's isp2 path did not learn the NAT's address: {}",
            io["io"]
        );
    }

    if std::env::var_os("BRAID_DEPLOY_LOGS").is_some() {
        for f in ["client.log", "server.log"] {
            let log = std::fs::read_to_string(lab.dir.join(f)).unwrap_or_default();
            eprintln!("--- {f}\n{log}");
        }
    }
    // Stopping: the client removes its rules, the server runs pre_down.
    client.signal(libc::SIGTERM)?;
    client.wait_exit(Duration::from_secs(10))?;
    let rules = ip(&lab.cl, "rule show")?;
    if rules.contains("51820") || rules.contains("suppress_prefixlength") {
        bail!("the client's rules are still there after it stopped: {rules}");
    }
    server.signal(libc::SIGTERM)?;
    server.wait_exit(Duration::from_secs(15))?;
    let tables = in_ns(&lab.sv, "nft", &["list", "tables"])?;
    if tables.contains("table ip braid") {
        bail!("the server's pre_down hook did not run: {tables}");
    }
    eprintln!(
        "deploy lab: {:.1} s in all",
        now().duration_since(start).as_secs_f64()
    );
    Ok(())
}

/// A `post_up` that fails stops `braid up` with the command and why; what was added (the
/// rules, the route, the interface) is gone again, and `pre_down` does not run.
#[test]
fn a_failing_post_up_stops_braid_up_and_undoes_the_routes() {
    let Some(_one) = common::netns_or_skip("a_failing_post_up_stops_braid_up") else {
        return;
    };
    if let Err(e) = failing_post_up() {
        panic!("{e:#}");
    }
}

fn failing_post_up() -> Result<()> {
    let topo = netns::Topology::new(1)?;
    let marker = topo.file("pre_down-ran");
    let conf = topo.file("a.toml");
    std::fs::write(
        &conf,
        format!(
            "[bond]\ninterface = \"braid0\"\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n\
             routes = [\"0.0.0.0/0\", \"10.8.0.0/16\"]\n\
             post_up = [\"true\", \"echo broken >&2; exit 3\"]\npre_down = \"touch {}\"\n\
             [[path]]\nname = \"p0\"\nlocal = \"10.201.0.1:7000\"\nremote = \"10.201.0.2:7000\"\n",
            marker.display()
        ),
    )?;
    let out = netns::run_timeout(
        netns::ns_command(&topo.ns_a, common::braid())
            .arg("up")
            .arg("--config")
            .arg(&conf)
            .arg("--control")
            .arg(topo.file("a.sock")),
        Duration::from_secs(30),
    )?;
    let want = "bond.post_up `echo broken >&2; exit 3`: exited with status 3: broken";
    if out.status.code() != Some(1) || !out.stderr.contains(want) {
        bail!(
            "braid up with a failing post_up: {}, stderr: {}",
            out.status,
            out.stderr
        );
    }
    let rules = ip(&topo.ns_a, "rule show")?;
    let main = ip(&topo.ns_a, "route show")?;
    let links = ip(&topo.ns_a, "link show")?;
    if rules.contains("suppress_prefixlength") || rules.contains("fwmark") {
        bail!("rules left behind: {rules}");
    }
    if main.contains("10.8.0.0") || links.contains("braid0") {
        bail!("routes or interface left behind: {main} {links}");
    }
    if marker.exists() {
        bail!("pre_down ran although post_up failed");
    }
    Ok(())
}
