//! Link-sharing scenarios: the seed's HTB tests (`shared/seeds/001_*`), run twice in one
//! go, once through the kernel's HTB on a veth (the seed's script applied with `tc`) and
//! once through braid's shaper on a bond (the same script, read by braid), with the
//! seed's figures and the fluid-model theory beside them.
//!
//! Users are UDP senders from their own addresses (192.168.1.110-113 in the seed) inside
//! namespace a; receivers in namespace b bin what arrives in 10 ms bins on one clock.
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use braid::config::tc::parse_script;
use braid_core::shape::Classifier;
use braid_core::shape::{ClassId, ShapeSpec};
use serde::{Deserialize, Serialize};

use super::capture;
use super::netns::{self, now, run_ok, spawn_in_netns, Topology};
use super::plot::{self, Panel, Series};
use super::run::Daemons;
use super::udpgen::{self, Sender, BIN};
use crate::theory;

/// tc scripts shipped with braid, by name.
pub const SCRIPTS: &[(&str, &str)] =
    &[("htb-seed", include_str!("../../../scenarios/htb-seed.tc"))];

/// The link-sharing scenarios shipped in `scenarios/`, as (name, TOML text).
pub const SHARE_BUILTIN: &[(&str, &str)] = &[
    (
        "htb-seed-1",
        include_str!("../../../scenarios/htb-seed-1.toml"),
    ),
    (
        "htb-seed-2",
        include_str!("../../../scenarios/htb-seed-2.toml"),
    ),
    (
        "htb-seed-3",
        include_str!("../../../scenarios/htb-seed-3.toml"),
    ),
];

/// A link-sharing scenario (`kind = "share"` in `scenarios/*.toml`; schema in
/// `docs/lab.md`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShareScenario {
    /// Must be "share".
    pub kind: String,
    /// Short name.
    pub name: String,
    /// One line saying what it shows.
    pub description: String,
    /// A built-in tc script name (`htb-seed`) or a file.
    pub script: String,
    /// The link's rate, Mbit/s: braid's `[shape] rate` (the kernel's veth is unshaped;
    /// the script's own classes limit it).
    pub link_mbit: f64,
    /// Seconds of traffic.
    pub duration_s: f64,
    /// UDP payload bytes per datagram (IP packet = payload + 28).
    #[serde(default = "default_payload")]
    pub payload: usize,
    /// Seconds after each phase starts left out of its averages (queues settle).
    #[serde(default = "default_settle")]
    pub settle_s: f64,
    /// The senders.
    #[serde(rename = "user")]
    pub users: Vec<User>,
    /// Intervals over which averages are reported, with the seed's figures.
    #[serde(rename = "phase")]
    pub phases: Vec<Phase>,
    /// Bond paths (tbf rates, Mbit/s) for the braid run.
    #[serde(default = "default_paths")]
    pub path_mbit: Vec<f64>,
    /// The bond's MTU (`bond.mtu`; braid's default when absent). Below `payload + 28`
    /// the kernel fragments every datagram before the TUN.
    #[serde(default)]
    pub mtu: Option<u32>,
}

fn default_payload() -> usize {
    1372
}
fn default_settle() -> f64 {
    0.5
}
fn default_paths() -> Vec<f64> {
    vec![10.0, 20.0]
}

/// One user: a UDP sender with a schedule.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// Name in tables.
    pub name: String,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination port.
    pub port: u16,
    /// `[from_s, mbit]` pairs: offered IP rate from that second on.
    pub schedule: Vec<(f64, f64)>,
}

/// One reporting interval.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Start, seconds.
    pub from_s: f64,
    /// End, seconds.
    pub to_s: f64,
    /// The seed's measured averages, Mbit/s, by user name.
    #[serde(default)]
    pub seed_mbit: std::collections::BTreeMap<String, f64>,
}

/// One user's averages in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct UserPhase {
    /// User.
    pub user: String,
    /// The seed's figure, Mbit/s.
    pub seed: Option<f64>,
    /// Fluid-model HTB, Mbit/s.
    pub theory: f64,
    /// Kernel HTB on a veth, Mbit/s.
    pub kernel: f64,
    /// braid, Mbit/s.
    pub braid: f64,
}

/// One scenario's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ShareResult {
    /// Scenario name.
    pub scenario: String,
    /// Per phase `(from_s, to_s)`, per user.
    pub phases: Vec<((f64, f64), Vec<UserPhase>)>,
    /// Per second, per user: (kernel, braid) Mbit/s.
    pub per_second: Vec<Vec<(f64, f64)>>,
    /// Link total / link rate while every phase's demand exceeds the link (kernel, braid).
    pub link_use: (f64, f64),
    /// Highest 100 ms window of the link total as it left (the shaped veth, or the
    /// bond's paths' inner packets): (Mbit/s, starting second), kernel and braid.
    pub max_100ms: ((f64, f64), (f64, f64)),
    /// The same at the receivers (after the far end's reordering), kernel and braid.
    pub max_100ms_received: ((f64, f64), (f64, f64)),
    /// The plot file.
    pub plot: Option<PathBuf>,
    /// Targets missed (braid).
    pub missed: Vec<String>,
    /// braid's daemons' memory (a, b), KiB.
    pub braid_memory_kib: Option<[Memory; 2]>,
}

impl ShareScenario {
    /// The fraction of the shaper's bytes that are whole datagrams when the bond's MTU
    /// fragments them: each fragment after the first adds a 20-byte IPv4 header (1.0
    /// when nothing is fragmented).
    pub fn fragment_efficiency(&self) -> f64 {
        let datagram = self.payload + 28;
        match self.mtu.map(|m| m as usize) {
            Some(mtu) if mtu > 28 && datagram > mtu => {
                let per_fragment = (mtu - 20) / 8 * 8;
                let fragments = (datagram - 20).div_ceil(per_fragment.max(8));
                datagram as f64 / (datagram + 20 * (fragments - 1)) as f64
            }
            _ => 1.0,
        }
    }

    /// Parse and check.
    pub fn parse(text: &str) -> Result<Self> {
        let s: Self = toml::from_str(text)?;
        if s.kind != "share" {
            bail!("scenario {}: kind must be \"share\"", s.name);
        }
        if s.users.is_empty() || s.phases.is_empty() {
            bail!("scenario {}: needs [[user]] and [[phase]]", s.name);
        }
        if !(s.duration_s > 0.0 && s.duration_s <= 600.0) {
            bail!("scenario {}: duration_s must be in (0, 600]", s.name);
        }
        // Up to a full 1500-byte IP packet (the bond's default MTU; braid carries the
        // packets that do not fit one datagram in parts).
        if s.payload < 64 || s.payload > 1472 {
            bail!("scenario {}: payload must be 64-1472 bytes", s.name);
        }
        if s.mtu.is_some_and(|m| !(576..=9000).contains(&m)) {
            bail!("scenario {}: mtu must be 576-9000 bytes", s.name);
        }
        for p in &s.phases {
            if !(p.from_s >= 0.0 && p.to_s <= s.duration_s && p.from_s + s.settle_s < p.to_s) {
                bail!(
                    "scenario {}: phase {}-{} s outside the run",
                    s.name,
                    p.from_s,
                    p.to_s
                );
            }
        }
        Ok(s)
    }

    /// A built-in share scenario by name, or a file whose `kind` is "share"; `None` when
    /// `arg` names something else (a bond scenario).
    pub fn load(arg: &str) -> Result<Option<Self>> {
        if let Some((_, text)) = SHARE_BUILTIN.iter().find(|(n, _)| *n == arg) {
            return Self::parse(text)
                .map(Some)
                .with_context(|| format!("built-in scenario {arg}"));
        }
        let Ok(text) = braid::files::read_text(Path::new(arg), braid::files::TEXT_MAX) else {
            return Ok(None);
        };
        let kind = toml::from_str::<toml::Table>(&text)
            .ok()
            .and_then(|t| t.get("kind").and_then(|k| k.as_str().map(str::to_string)));
        if kind.as_deref() != Some("share") {
            return Ok(None);
        }
        Self::parse(&text)
            .map(Some)
            .with_context(|| format!("scenario file {arg}"))
    }

    /// The tc script's text.
    pub fn script_text(&self) -> Result<String> {
        if let Some((_, t)) = SCRIPTS.iter().find(|(n, _)| *n == self.script) {
            return Ok((*t).to_string());
        }
        braid::files::read_text(Path::new(&self.script), braid::files::TEXT_MAX)
            .with_context(|| format!("reading tc script {}", self.script))
    }

    fn sender(&self, u: &User, dst: Ipv4Addr) -> Sender {
        Sender {
            src: u.src,
            dst: SocketAddrV4::new(dst, u.port),
            payload: self.payload,
            schedule: u.schedule.clone(),
            stop_s: self.duration_s,
        }
    }

    /// Offered IP rate of `u` in the middle of `phase`, bit/s.
    fn demand(&self, u: &User, p: &Phase) -> u64 {
        (self
            .sender(u, Ipv4Addr::LOCALHOST)
            .rate_at((p.from_s + p.to_s) / 2.0)
            * 1e6) as u64
    }
}

/// The class a user's packets land in, by braid's classifier on a sample packet.
fn class_of(spec: &ShapeSpec, u: &User) -> ClassId {
    let mut pkt = [0u8; 28];
    pkt[0] = 0x45;
    pkt[2..4].copy_from_slice(&28u16.to_be_bytes());
    pkt[8] = 64;
    pkt[9] = 17;
    pkt[12..16].copy_from_slice(&u.src.octets());
    pkt[16..20].copy_from_slice(&[10, 200, 0, 2]);
    pkt[20..22].copy_from_slice(&40000u16.to_be_bytes());
    pkt[22..24].copy_from_slice(&u.port.to_be_bytes());
    pkt[24..26].copy_from_slice(&8u16.to_be_bytes());
    let default = spec.default_class.unwrap_or_default();
    Classifier::new(&spec.filters, default).classify(&pkt)
}

/// The seed's script for the kernel: `dev X` → our veth, `qdisc del` skipped (there is
/// nothing to delete), and `default 1:13` → `default 13` (tc reads `default` as a bare
/// hex minor and refuses `1:13`; braid accepts both).
fn kernel_commands(script: &str, dev: &str) -> Vec<Vec<String>> {
    let joined = script.replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut toks: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        if toks.first().map(String::as_str) != Some("tc") {
            continue;
        }
        toks.remove(0);
        if toks.get(1).map(String::as_str) == Some("del") {
            continue;
        }
        for i in 1..toks.len() {
            if toks[i - 1] == "dev" {
                toks[i] = dev.to_string();
            }
            if toks[i - 1] == "default" {
                if let Some((_, minor)) = toks[i].clone().split_once(':') {
                    toks[i] = minor.to_string();
                }
            }
        }
        out.push(toks);
    }
    out
}

/// What one run measured, in 10 ms bins: per user at the receiver, and the link's
/// total as it left namespace a.
pub struct Bins {
    /// Per user, IP bytes received.
    pub users: Vec<Vec<u64>>,
    /// IP bytes sent on the link (the shaped veth, or the bond's paths: inner packets).
    pub link: Vec<u64>,
    /// braid runs: each daemon's (a, b) memory, KiB: resident once the paths were up
    /// (VmRSS) and its peak at the end (VmHWM).
    pub rss_kib: Option<[Memory; 2]>,
}

/// A daemon's memory in a run, KiB.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Memory {
    /// VmRSS once its paths were up.
    pub start: u64,
    /// VmHWM (peak resident set) at the end.
    pub peak: u64,
}

/// A field of `/proc/<pid>/status` in kB (`VmRSS`, `VmHWM`), or None.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status_kib(&text, field)
}

fn parse_status_kib(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Start receivers in `ns_b` on `dst`, a capture of `devs` in `ns_a`, and the senders.
fn traffic(
    sc: &ShareScenario,
    ns_a: &str,
    ns_b: &str,
    dst: Ipv4Addr,
    devs: &[String],
    count: capture::Counter,
) -> Result<Bins> {
    let start = now() + Duration::from_millis(500);
    let until = sc.duration_s + 0.5;
    let link = capture::egress(ns_a, devs, start, until, count)?;
    let mut rx = Vec::new();
    for u in &sc.users {
        let bind = SocketAddrV4::new(dst, u.port);
        rx.push(spawn_in_netns(ns_b, move || {
            udpgen::receive(bind, start, until)
        })?);
    }
    let mut tx = Vec::new();
    for u in &sc.users {
        let s = sc.sender(u, dst);
        tx.push(spawn_in_netns(ns_a, move || s.run(start))?);
    }
    for t in tx {
        t.join().map_err(|_| anyhow!("sender thread panicked"))??;
    }
    let users = rx
        .into_iter()
        .map(|r| r.join().map_err(|_| anyhow!("receiver thread panicked"))?)
        .collect::<Result<Vec<_>>>()?;
    let link = link
        .join()
        .map_err(|_| anyhow!("capture thread panicked"))??;
    Ok(Bins {
        users,
        link,
        rss_kib: None,
    })
}

/// The users' addresses on `lo` in namespace a, and routes back to them in namespace b
/// (`via` is the rest of the route: `["via", ADDR]` or `["dev", "braid0"]`).
fn add_users(sc: &ShareScenario, ns_a: &str, ns_b: &str, via: &[&str]) -> Result<()> {
    for u in &sc.users {
        let host = format!("{}/32", u.src);
        netns::ip(&["-n", ns_a, "addr", "add", &host, "dev", "lo"])?;
        let mut route = vec!["-n", ns_b, "route", "replace", &host];
        route.extend_from_slice(via);
        netns::ip(&route)?;
    }
    Ok(())
}

fn run_kernel(sc: &ShareScenario, script: &str) -> Result<Bins> {
    let topo = Topology::new(1)?;
    let link = &topo.links[0];
    add_users(
        sc,
        &topo.ns_a,
        &topo.ns_b,
        &["via", &link.addr_a.to_string()],
    )?;
    for cmd in kernel_commands(script, &link.dev_a) {
        let mut c = Command::new("tc");
        c.args(["-n", &topo.ns_a]).args(&cmd);
        run_ok(&mut c)
            .with_context(|| format!("applying the script with tc: tc {}", cmd.join(" ")))?;
    }
    traffic(
        sc,
        &topo.ns_a,
        &topo.ns_b,
        link.addr_b,
        std::slice::from_ref(&link.dev_a),
        capture::ipv4_bytes,
    )
}

/// The braid run alone: two daemons over `path_mbit` paths, side a shaped by `script`;
/// per-user 10 ms bins. With `live` (`braid lab --monitor ADDR`), side a's dashboard is
/// served on `ADDR` during the run and its samples are plotted in `out_dir` afterwards.
pub fn run_braid(
    sc: &ShareScenario,
    braid: &Path,
    script: &str,
    live: Option<(std::net::SocketAddr, &Path)>,
) -> Result<Bins> {
    let topo = Topology::new(sc.path_mbit.len())?;
    for (i, r) in sc.path_mbit.iter().enumerate() {
        topo.set_rate(i, (r * 1e6) as u64)?;
    }
    let script_file = topo.file("shape.tc");
    std::fs::write(&script_file, script)?;
    let cfg = |a: bool| -> String {
        let mut s = format!(
            "[bond]\ninterface = \"braid0\"\naddress = \"{}\"\n",
            if a { "10.200.0.1/30" } else { "10.200.0.2/30" }
        );
        // Plain paths: the link capture counts IP bytes by reading braid's data header,
        // which sealing hides. The shaper runs before sealing either way.
        s += "encryption = \"none\"\n";
        if let Some(m) = sc.mtu {
            s += &format!("mtu = {m}\n");
        }
        if a {
            s += &format!(
                "[shape]\nscript = \"{}\"\nrate = \"{}kbit\"\n",
                script_file.display(),
                (sc.link_mbit * 1000.0).round()
            );
        }
        for l in &topo.links {
            let (local, remote) = if a {
                (l.addr_a, l.addr_b)
            } else {
                (l.addr_b, l.addr_a)
            };
            s += &format!(
                "[[path]]\nname = \"p{}\"\nlocal = \"{local}:7000\"\nremote = \"{remote}:7000\"\n",
                l.index
            );
        }
        s
    };
    let cfg_a = cfg(true)
        + if live.is_some() {
            super::monitor::CONFIG
        } else {
            ""
        };
    let mut d = Daemons::start(braid, &topo, "share", &cfg_a, &cfg(false))?;
    let names: Vec<String> = topo.links.iter().map(|l| format!("p{}", l.index)).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    d.wait_paths_up(&names, super::run::UP_TIMEOUT)?;
    let proxy = match live {
        Some((addr, _)) => {
            let p = super::monitor::Proxy::start(addr, &topo.ns_a)?;
            eprintln!(
                "braid lab: {}: braid's run, live on http://{}/ for {} s",
                sc.name, p.addr, sc.duration_s
            );
            Some(p)
        }
        None => None,
    };
    let traffic_from = braid::monitor::unix_ms();
    let start_rss = [d.a.pid(), d.b.pid()].map(|p| proc_status_kib(p, "VmRSS").unwrap_or(0));
    add_users(sc, &topo.ns_a, &topo.ns_b, &["dev", "braid0"])?;
    let devs: Vec<String> = topo.links.iter().map(|l| l.dev_a.clone()).collect();
    let mut bins = traffic(
        sc,
        &topo.ns_a,
        &topo.ns_b,
        Ipv4Addr::new(10, 200, 0, 2),
        &devs,
        capture::braid_data_bytes,
    )?;
    if let Some((_, out_dir)) = live {
        // One more sample for the last second of traffic.
        std::thread::sleep(Duration::from_millis(1100));
        monitor_plot(sc, script, &topo.ns_a, traffic_from, out_dir)?;
    }
    drop(proxy);
    let peak = [d.a.pid(), d.b.pid()].map(|p| proc_status_kib(p, "VmHWM").unwrap_or(0));
    bins.rss_kib = Some([0, 1].map(|i| Memory {
        start: start_rss[i],
        peak: peak[i],
    }));
    for p in [&mut d.a, &mut d.b] {
        if !p.running() {
            bail!("{} exited during the run:\n{}", p.name, p.log_tail());
        }
    }
    Ok(bins)
}

/// `<out_dir>/<name>-monitor.svg`: each user's class, per second, as the monitor of side a
/// sampled it (braid's shaper, sender side) during the traffic.
fn monitor_plot(
    sc: &ShareScenario,
    script: &str,
    ns_a: &str,
    from_ms: u64,
    out_dir: &Path,
) -> Result<()> {
    let spec = parse_script(script)
        .map_err(|e| anyhow!("{}: {e}", sc.script))?
        .spec;
    let samples = super::monitor::samples(ns_a)?;
    let mut names: Vec<(String, String)> = Vec::new();
    for u in &sc.users {
        let id = class_of(&spec, u).to_string();
        if !names.iter().any(|(i, _)| *i == id) {
            names.push((id, u.name.clone()));
        }
    }
    let svg = super::monitor::class_plot(
        &format!("{}: per class, live samples", sc.name),
        &samples,
        from_ms,
        &names,
        sc.link_mbit * 1.1,
    );
    std::fs::create_dir_all(out_dir)?;
    let f = out_dir.join(format!("{}-monitor.svg", sc.name));
    std::fs::write(&f, svg).with_context(|| format!("writing {}", f.display()))?;
    eprintln!(
        "braid lab: {}: the monitor's samples plotted in {}",
        sc.name,
        f.display()
    );
    Ok(())
}

/// Run one scenario: kernel, then braid; figures and a plot in `out_dir`.
pub fn run(
    sc: &ShareScenario,
    braid: &Path,
    out_dir: &Path,
    live: Option<std::net::SocketAddr>,
) -> Result<ShareResult> {
    let script = sc.script_text()?;
    let parsed = parse_script(&script).map_err(|e| anyhow!("{}: {e}", sc.script))?;
    let spec = parsed.spec;
    let kernel_run = run_kernel(sc, &script).context("kernel HTB run")?;
    netns::check_interrupted()?;
    let braid_run =
        run_braid(sc, braid, &script, live.map(|a| (a, out_dir))).context("braid run")?;
    let (kernel, ours) = (&kernel_run.users, &braid_run.users);
    let per_sec_bins = (1.0 / BIN.as_secs_f64()) as usize;
    let secs = sc.duration_s.ceil() as usize;
    let per_second: Vec<Vec<(f64, f64)>> = (0..secs)
        .map(|s| {
            (0..sc.users.len())
                .map(|u| {
                    let (a, b) = (s * per_sec_bins, (s + 1) * per_sec_bins);
                    (udpgen::mbit(&kernel[u], a, b), udpgen::mbit(&ours[u], a, b))
                })
                .collect()
        })
        .collect();
    let link_bps = (sc.link_mbit * 1e6) as u64;
    let classes: Vec<ClassId> = sc.users.iter().map(|u| class_of(&spec, u)).collect();
    let mut phases = Vec::new();
    let (mut use_k, mut use_b, mut sat_bins) = (0.0, 0.0, 0.0);
    for p in &sc.phases {
        let from = ((p.from_s + sc.settle_s) / BIN.as_secs_f64()).round() as usize;
        let to = (p.to_s / BIN.as_secs_f64()).round() as usize;
        let demand: Vec<(ClassId, u64)> = sc
            .users
            .iter()
            .zip(&classes)
            .map(|(u, c)| (*c, sc.demand(u, p)))
            .collect();
        // Two users in one class share it: theory splits a class's share by demand.
        let shares = theory::shares(&spec, link_bps, &merge(&demand));
        let mut rows = Vec::new();
        for (i, u) in sc.users.iter().enumerate() {
            let class_share = shares.iter().find(|x| x.0 == classes[i]).map_or(0, |x| x.1);
            let class_demand: u64 = demand
                .iter()
                .filter(|d| d.0 == classes[i])
                .map(|d| d.1)
                .sum();
            let theory = if class_demand == 0 {
                0.0
            } else {
                class_share as f64 * demand[i].1 as f64 / class_demand as f64 / 1e6
            };
            rows.push(UserPhase {
                user: u.name.clone(),
                seed: p.seed_mbit.get(&u.name).copied(),
                theory,
                kernel: udpgen::mbit(&kernel[i], from, to),
                braid: udpgen::mbit(&ours[i], from, to),
            });
        }
        let offered: u64 = demand.iter().map(|d| d.1).sum();
        if offered > link_bps {
            let w = (to - from) as f64;
            use_k += rows.iter().map(|r| r.kernel).sum::<f64>() * w;
            use_b += rows.iter().map(|r| r.braid).sum::<f64>() * w;
            sat_bins += w;
        }
        phases.push(((p.from_s, p.to_s), rows));
    }
    let link_mbit = sc.link_mbit;
    let link_use = if sat_bins > 0.0 {
        (use_k / sat_bins / link_mbit, use_b / sat_bins / link_mbit)
    } else {
        (f64::NAN, f64::NAN)
    };
    let total = |runs: &[Vec<u64>]| -> Vec<u64> {
        let n = runs.iter().map(Vec::len).max().unwrap_or(0);
        (0..n)
            .map(|i| runs.iter().map(|r| r.get(i).copied().unwrap_or(0)).sum())
            .collect()
    };
    let window = (0.1 / BIN.as_secs_f64()).round() as usize;
    let max_100ms = (
        udpgen::max_window_mbit(&kernel_run.link, window),
        udpgen::max_window_mbit(&braid_run.link, window),
    );
    let max_100ms_received = (
        udpgen::max_window_mbit(&total(kernel), window),
        udpgen::max_window_mbit(&total(ours), window),
    );
    let mut missed = Vec::new();
    // Fragmented datagrams carry an IP header per fragment through the shaper: braid's
    // best is that fraction of each share (the kernel's run is not fragmented).
    let frag = sc.fragment_efficiency();
    for ((from, to), rows) in &phases {
        for r in rows {
            let tol = (0.02 * r.theory).max(0.05);
            if (r.braid - r.theory * frag).abs() > tol {
                missed.push(format!(
                    "{from}-{to} s {}: {:.2} Mbit/s, theory {:.2}",
                    r.user, r.braid, r.theory
                ));
            }
        }
    }
    if link_use.1 < 0.99 * frag {
        missed.push(format!(
            "link use {:.1} % < {:.1} %",
            link_use.1 * 100.0,
            99.0 * frag
        ));
    }
    if braid_run.link.iter().all(|&b| b == 0) {
        // The ceil check below would pass on nothing.
        missed.push("the link capture saw no braid data packets".into());
    }
    if max_100ms.1 .0 > link_mbit * 1.01 {
        missed.push(format!(
            "a 100 ms window at {:.2} Mbit/s > ceil + 1 %",
            max_100ms.1 .0
        ));
    }
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let plot_path = out_dir.join(format!("{}.svg", sc.name));
    let theory_per_sec: Vec<Vec<f64>> = sc
        .users
        .iter()
        .enumerate()
        .map(|(i, _)| {
            (0..secs)
                .map(|s| {
                    phases
                        .iter()
                        .find(|((f, t), _)| (s as f64) >= *f && (s as f64) < *t)
                        .map_or(0.0, |(_, rows)| rows[i].theory)
                })
                .collect()
        })
        .collect();
    let column = |k: usize| -> Vec<Vec<f64>> {
        (0..sc.users.len())
            .map(|u| {
                per_second
                    .iter()
                    .map(|row| if k == 0 { row[u].0 } else { row[u].1 })
                    .collect()
            })
            .collect()
    };
    let (kcol, bcol) = (column(0), column(1));
    let svg = plot::svg(
        &format!("{}: {}", sc.name, sc.description),
        &[
            Panel {
                title: "kernel HTB (tc on a veth)".into(),
                series: lines(sc, &kcol, &theory_per_sec),
            },
            Panel {
                title: "braid shaper on a bond".into(),
                series: lines(sc, &bcol, &theory_per_sec),
            },
        ],
        (link_mbit * 1.1).ceil(),
    );
    std::fs::write(&plot_path, svg).with_context(|| format!("writing {}", plot_path.display()))?;
    Ok(ShareResult {
        scenario: sc.name.clone(),
        phases,
        per_second,
        link_use,
        max_100ms,
        max_100ms_received,
        plot: Some(plot_path),
        missed,
        braid_memory_kib: braid_run.rss_kib,
    })
}

/// Measured (solid) and theory (dashed) lines, one colour per user.
fn lines<'a>(
    sc: &'a ShareScenario,
    cols: &'a [Vec<f64>],
    theory: &'a [Vec<f64>],
) -> Vec<Series<'a>> {
    let measured = sc
        .users
        .iter()
        .zip(cols)
        .enumerate()
        .map(|(i, (u, c))| Series {
            label: &u.name,
            values: c,
            dashed: false,
            colour: i,
        });
    let expected = theory.iter().enumerate().map(|(i, t)| Series {
        label: "theory",
        values: t,
        dashed: true,
        colour: i,
    });
    measured.chain(expected).collect()
}

fn merge(demand: &[(ClassId, u64)]) -> Vec<(ClassId, u64)> {
    let mut out: Vec<(ClassId, u64)> = Vec::new();
    for &(c, b) in demand {
        match out.iter_mut().find(|x| x.0 == c) {
            Some(x) => x.1 += b,
            None => out.push((c, b)),
        }
    }
    out
}

/// The per-second table and the summary, as text.
pub fn report(sc: &ShareScenario, r: &ShareResult) -> String {
    let mut s = format!("{}: {}\n", sc.name, sc.description);
    s += "  per second, Mbit/s of IP packets received (kernel HTB / braid):\n     t";
    for u in &sc.users {
        s += &format!(" {:>13}", u.name);
    }
    s += &format!(" {:>13}\n", "total");
    for (t, row) in r.per_second.iter().enumerate() {
        s += &format!("  {:>4}", t + 1);
        let (mut tk, mut tb) = (0.0, 0.0);
        for (k, b) in row {
            s += &format!("   {k:>5.2} {b:>5.2}");
            tk += k;
            tb += b;
        }
        s += &format!("   {tk:>5.2} {tb:>5.2}\n");
    }
    s += &format!(
        "  averages (each phase from {} s after it starts), Mbit/s:\n  {:<10} {:<8} {:>6} {:>7} {:>7} {:>7}\n",
        sc.settle_s, "phase", "user", "seed", "theory", "kernel", "braid"
    );
    for ((from, to), rows) in &r.phases {
        let (mut st, mut tt, mut kt, mut bt) = (0.0, 0.0, 0.0, 0.0);
        let mut any_seed = false;
        for row in rows {
            if row.theory == 0.0 && row.seed.is_none() && row.braid < 0.05 {
                continue;
            }
            let seed = row.seed.map_or("-".to_string(), |v| format!("{v:.2}"));
            s += &format!(
                "  {:<10} {:<8} {:>6} {:>7.2} {:>7.2} {:>7.2}\n",
                format!("{from}-{to} s"),
                row.user,
                seed,
                row.theory,
                row.kernel,
                row.braid
            );
            st += row.seed.unwrap_or(0.0);
            any_seed |= row.seed.is_some();
            tt += row.theory;
            kt += row.kernel;
            bt += row.braid;
        }
        let seed = if any_seed {
            format!("{st:.2}")
        } else {
            "-".into()
        };
        s += &format!(
            "  {:<10} {:<8} {:>6} {:>7.2} {:>7.2} {:>7.2}\n",
            "", "total", seed, tt, kt, bt
        );
    }
    s += &format!(
        "  link use while demand exceeds {} Mbit/s: kernel {:.1} %, braid {:.1} %\n  busiest 100 ms on the link: kernel {:.2} Mbit/s (at {:.2} s), braid {:.2} Mbit/s (at {:.2} s); at the receivers: kernel {:.2}, braid {:.2}\n",
        sc.link_mbit,
        r.link_use.0 * 100.0,
        r.link_use.1 * 100.0,
        r.max_100ms.0 .0,
        r.max_100ms.0 .1,
        r.max_100ms.1 .0,
        r.max_100ms.1 .1,
        r.max_100ms_received.0 .0,
        r.max_100ms_received.1 .0
    );
    if let Some(m) = &r.braid_memory_kib {
        s += &format!(
            "  braid's memory: a {:.1} MiB once up, peak {:.1} MiB (VmHWM); b {:.1} MiB, peak {:.1} MiB\n",
            m[0].start as f64 / 1024.0,
            m[0].peak as f64 / 1024.0,
            m[1].start as f64 / 1024.0,
            m[1].peak as f64 / 1024.0
        );
    }
    if let Some(p) = &r.plot {
        s += &format!("  plot: {}\n", p.display());
    }
    let frag = sc.fragment_efficiency();
    if frag < 1.0 {
        s += &format!(
            "  bond mtu {}: every {}-byte datagram crosses braid as fragments; braid's targets are {:.1} % of theory (the fragments' extra IP headers)\n",
            sc.mtu.unwrap_or(0),
            sc.payload + 28,
            frag * 100.0
        );
    }
    if r.missed.is_empty() {
        s += "  targets met (each user within 2 % or 0.05 Mbit/s of theory, link use >= 99 %, no 100 ms window above ceil + 1 %)\n";
    } else {
        for m in &r.missed {
            s += &format!("  MISSED: {m}\n");
        }
    }
    s
}

/// Run the scenarios, print each report; results for `--json`.
pub fn run_all(
    scenarios: &[ShareScenario],
    braid: &Path,
    out_dir: &Path,
    live: Option<std::net::SocketAddr>,
) -> Result<Vec<ShareResult>> {
    netns::install_signal_handler();
    let mut out = Vec::new();
    for sc in scenarios {
        let t0 = now();
        eprintln!(
            "braid lab: {} ({} s of traffic, kernel then braid) ...",
            sc.name, sc.duration_s
        );
        let r = run(sc, braid, out_dir, live)?;
        println!("{}", report(sc, &r));
        eprintln!("  ({:.0} s)", now().duration_since(t0).as_secs_f64());
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_fields() {
        let text = "Name:\tbraid\nVmPeak:\t  9000 kB\nVmHWM:\t    5120 kB\nVmRSS:\t    4096 kB\n";
        assert_eq!(parse_status_kib(text, "VmHWM"), Some(5120));
        assert_eq!(parse_status_kib(text, "VmRSS"), Some(4096));
        assert_eq!(parse_status_kib(text, "VmSwap"), None);
        assert!(proc_status_kib(std::process::id(), "VmHWM").is_some_and(|k| k > 0));
    }

    #[test]
    fn builtin_share_scenarios_parse() {
        for (name, text) in SHARE_BUILTIN {
            let s = ShareScenario::parse(text).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert_eq!(&s.name, name);
        }
    }

    #[test]
    fn kernel_commands_rewrite_dev_and_default() {
        let cmds = kernel_commands(SCRIPTS[0].1, "bra0");
        assert!(cmds.iter().all(|c| !c.contains(&"eth1".to_string())));
        assert!(cmds
            .iter()
            .all(|c| c.get(1).map(String::as_str) != Some("del")));
        let qdisc = &cmds[0];
        assert_eq!(
            qdisc.join(" "),
            "qdisc add dev bra0 root handle 1: htb default 13"
        );
        assert_eq!(cmds.len(), 1 + 5 + 4, "qdisc, 5 classes, 4 filters");
        assert!(cmds[2]
            .join(" ")
            .contains("classid 1:10 htb rate 1.9mbit ceil 10mbit prio 1"));
    }

    #[test]
    fn schedules_give_demand_per_phase() {
        let text = r#"
kind = "share"
name = "x"
description = "d"
script = "htb-seed"
link_mbit = 10
duration_s = 15
[[user]]
name = "carl"
src = "192.168.1.112"
port = 1012
schedule = [[5, 2.5], [10, 10]]
[[phase]]
from_s = 5
to_s = 10
"#;
        let sc = ShareScenario::parse(text).unwrap();
        assert_eq!(sc.demand(&sc.users[0], &sc.phases[0]), 2_500_000);
        let bad = text.replace("to_s = 10", "to_s = 16");
        assert!(ShareScenario::parse(&bad).is_err());
    }
}
