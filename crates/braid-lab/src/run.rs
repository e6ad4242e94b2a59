//! Running a scenario: namespaces, baselines, daemons, iperf3, sampling, cuts, figures.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use super::host::{self, HostLoad};
use super::iperf::{self, IperfResult};
use super::netns::{self, now, Proc, Topology};
use super::progress::Progress;
use super::scenario::{CutHow, Scenario, TestSpec};
use super::serial::SerialLines;

/// How long daemons get to report every path up.
pub const UP_TIMEOUT: Duration = Duration::from_secs(15);
/// Daemons are started this long before the traffic starts (emulator outages are
/// scheduled from the daemon's start, so this fixes their offset).
pub const WARMUP: Duration = Duration::from_secs(3);
/// Port iperf3 uses (inside our namespaces only).
const IPERF_PORT: &str = "5201";

/// What the lab run needs besides the scenario.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The braid executable for the daemons and `status` (normally the one beside the lab).
    pub braid: PathBuf,
    /// Override every test's duration, seconds.
    pub duration: Option<u64>,
    /// `--monitor ADDR`: side a runs its monitor, served on ADDR during each test, with
    /// an event stream open (as a page would) for the whole test.
    pub monitor: Option<std::net::SocketAddr>,
}

impl RunOptions {
    /// Options running the `braid` beside the lab ([`crate::braid_exe`]).
    pub fn current() -> Result<Self> {
        Ok(Self {
            braid: crate::braid_exe()?,
            duration: None,
            monitor: None,
        })
    }
}

/// One path's figures in one test.
#[derive(Clone, Debug, Serialize)]
pub struct PathResult {
    /// Path name.
    pub name: String,
    /// Rate the bond sent on it (side a's tx bytes, braid headers included), Mbit/s.
    pub mbit: f64,
    /// Its capacity: the single-path TCP goodput, or the configured rate, Mbit/s.
    pub capacity_mbit: f64,
    /// `mbit / capacity_mbit`.
    pub util: f64,
    /// Times it went down during the test (side a).
    pub downs: u64,
}

/// What happened around a cut.
#[derive(Clone, Debug, Serialize)]
pub struct CutResult {
    /// Path cut.
    pub path: String,
    /// How.
    pub how: CutHow,
    /// Goodput while the path was away (from 300 ms after the cut to its end), Mbit/s.
    pub during_mbit: f64,
    /// S of the remaining paths, Mbit/s.
    pub remaining_mbit: f64,
    /// `during_mbit / remaining_mbit`.
    pub ratio: f64,
    /// Time from the path's return until it carried ≥ 15 kB of data again, ms (None: not
    /// within the test).
    pub rejoin_ms: Option<f64>,
}

/// One test's result row.
#[derive(Clone, Debug, Serialize)]
pub struct TestResult {
    /// Scenario name.
    pub scenario: String,
    /// Test label.
    pub test: String,
    /// Scheduler.
    pub scheduler: String,
    /// Parallel flows.
    pub flows: u32,
    /// "tcp" or "udp".
    pub proto: &'static str,
    /// Seconds of traffic.
    pub duration_s: u64,
    /// Sum of the single-path goodputs, Mbit/s.
    pub s_mbit: f64,
    /// Bond goodput (receiver), Mbit/s.
    pub goodput_mbit: f64,
    /// `goodput_mbit / s_mbit`.
    pub ratio: f64,
    /// Per path.
    pub paths: Vec<PathResult>,
    /// Mean wait of the packets that waited in the reorder buffer, ms.
    pub reorder_wait_mean_ms: f64,
    /// Longest reorder wait, ms.
    pub reorder_wait_max_ms: f64,
    /// Fraction of delivered packets that waited for reordering.
    pub reordered_fraction: f64,
    /// Sequence numbers the receiver gave up on.
    pub reorder_skipped: u64,
    /// Of them, packets that came after all (delivered late, out of order).
    pub reorder_late: u64,
    /// TCP retransmissions (iperf3 sender).
    pub retransmits: Option<u64>,
    /// UDP loss, percent.
    pub udp_lost_percent: Option<f64>,
    /// Packets braid dropped on side a (no path, queue, too big).
    pub bond_drops: u64,
    /// Packets side a moved to another path after they were queued on one (a path
    /// stalled or went down): each may arrive behind later ones.
    pub rescheduled: u64,
    /// Datagrams side a's path sockets did not send (buffer full, or an error).
    pub send_dropped: u64,
    /// Datagrams the kernel dropped at each side's full UDP receive buffers (a, b): the
    /// namespace's `RcvbufErrors`.
    pub udp_rcvbuf_errors: (u64, u64),
    /// Longest stall (100 ms intervals under 10% of the median), ms.
    pub stall_ms: f64,
    /// CPU used by the daemons (a, b), percent of one core.
    pub cpu_pct: (f64, f64),
    /// Datagrams per syscall on the paths: side a's per `sendmsg` (UDP GSO runs), side
    /// b's per `recvmmsg` (GRO lists and batches); 0 where none were made.
    pub per_call: (f64, f64),
    /// What the host took from the test (steal, stalls of every process).
    pub host: HostLoad,
    /// Cut figures.
    pub cut: Option<CutResult>,
    /// Targets missed (empty = all met).
    pub missed: Vec<String>,
}

/// A scenario's results, and the single-path baselines.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioResult {
    /// Scenario name.
    pub scenario: String,
    /// Description.
    pub description: String,
    /// Single-path TCP goodput over the bare veth, per path, Mbit/s.
    pub single_mbit: Vec<(String, f64)>,
    /// The inner TCP's congestion control.
    pub tcp_cc: String,
    /// Seconds left out of goodput figures at the start of each run.
    pub warmup_s: f64,
    /// The tests.
    pub tests: Vec<TestResult>,
}

/// The two daemons of a test; stopped when dropped.
pub struct Daemons {
    /// Side a.
    pub a: Proc,
    /// Side b.
    pub b: Proc,
    /// Side a's control socket.
    pub sock_a: PathBuf,
    /// Side b's control socket.
    pub sock_b: PathBuf,
    braid: PathBuf,
    /// When they were started.
    pub started: Instant,
    /// Each side's namespace, config file and first log, to start it again.
    sides: [(String, PathBuf, PathBuf); 2],
    /// How often each side was started again.
    restarts: [u32; 2],
    /// Every log file written so far, restarts included.
    logs: Vec<PathBuf>,
}

impl Daemons {
    /// Write configs `cfg_a`/`cfg_b` and start `braid up` in both namespaces.
    pub fn start(
        braid: &Path,
        topo: &Topology,
        tag: &str,
        cfg_a: &str,
        cfg_b: &str,
    ) -> Result<Self> {
        let mut procs = Vec::new();
        let mut socks = Vec::new();
        let mut sides = Vec::new();
        let mut logs = Vec::new();
        let started = now();
        for (side, ns, cfg) in [("a", &topo.ns_a, cfg_a), ("b", &topo.ns_b, cfg_b)] {
            let conf = topo.file(&format!("{tag}-{side}.toml"));
            braid::files::write_private(&conf, cfg)
                .with_context(|| format!("writing {}", conf.display()))?;
            let sock = topo.file(&format!("{tag}-{side}.sock"));
            let log = topo.file(&format!("{tag}-{side}.log"));
            procs.push(spawn_up(braid, side, ns, &conf, &sock, &log)?);
            socks.push(sock);
            sides.push((ns.clone(), conf, log.clone()));
            logs.push(log);
        }
        let sides: [(String, PathBuf, PathBuf); 2] = sides
            .try_into()
            .map_err(|_| anyhow!("internal: two sides expected"))?;
        let b = procs.pop().ok_or_else(|| anyhow!("no daemon b"))?;
        let a = procs.pop().ok_or_else(|| anyhow!("no daemon a"))?;
        let sock_b = socks.pop().unwrap_or_default();
        let sock_a = socks.pop().unwrap_or_default();
        Ok(Self {
            a,
            b,
            sock_a,
            sock_b,
            braid: braid.to_path_buf(),
            started,
            sides,
            restarts: [0; 2],
            logs,
        })
    }

    /// Stop side a (or b) with `signal` (SIGTERM: a clean stop; SIGKILL: a crash) and
    /// start it again with the same config. Returns when the new daemon was started.
    pub fn restart(&mut self, side_a: bool, signal: i32) -> Result<Instant> {
        self.stop_side(side_a, signal, Duration::from_secs(5))?;
        self.start_side(side_a)
    }

    /// Side a's (or b's) daemon.
    pub fn side(&mut self, side_a: bool) -> &mut Proc {
        if side_a {
            &mut self.a
        } else {
            &mut self.b
        }
    }

    /// Send `signal` to side a's (or b's) daemon and wait (bounded by `within`) for it to
    /// exit; its exit status. It is killed, and this is an error, if it outlives `within`.
    pub fn stop_side(
        &mut self,
        side_a: bool,
        signal: i32,
        within: Duration,
    ) -> Result<std::process::ExitStatus> {
        let p = self.side(side_a);
        p.signal(signal)?;
        p.wait_exit(within)
    }

    /// Start side a's (or b's) daemon again (after [`Daemons::stop_side`]) with the
    /// config it was first started with; its log is `<tag>-<side>-<n>.log` (the old
    /// ones are kept, see [`Daemons::logs`]). Returns when it was started.
    pub fn start_side(&mut self, side_a: bool) -> Result<Instant> {
        let i = usize::from(!side_a);
        self.restarts[i] += 1;
        let (ns, conf, first) = &self.sides[i];
        let log = PathBuf::from(format!(
            "{}-{}.log",
            first.with_extension("").display(),
            self.restarts[i]
        ));
        let (side, sock) = if side_a {
            ("a", &self.sock_a)
        } else {
            ("b", &self.sock_b)
        };
        let started = now();
        let p = spawn_up(&self.braid, side, ns, conf, sock, &log)?;
        *self.side(side_a) = p;
        self.logs.push(log);
        Ok(started)
    }

    /// The config file side a (or b) was started with (and is reloaded from).
    pub fn config_file(&self, side_a: bool) -> &Path {
        &self.sides[usize::from(!side_a)].1
    }

    /// Every daemon log of this pair, restarts included.
    pub fn logs(&self) -> &[PathBuf] {
        &self.logs
    }

    /// Wait (bounded by `timeout`) until both daemons list exactly `names` and all are up.
    pub fn wait_paths_up(&mut self, names: &[&str], timeout: Duration) -> Result<()> {
        let end = now() + timeout;
        let mut last = String::new();
        loop {
            netns::check_interrupted()?;
            for d in [&mut self.a, &mut self.b] {
                if !d.running() {
                    bail!("{} exited:\n{}", d.name, d.log_tail());
                }
            }
            let mut ok = true;
            for sock in [&self.sock_a, &self.sock_b] {
                match status(&self.braid, sock) {
                    Ok(v) => {
                        let ps = paths_of(&v);
                        let mut got: Vec<&str> = ps.iter().map(|p| p.name.as_str()).collect();
                        got.sort_unstable();
                        let mut want = names.to_vec();
                        want.sort_unstable();
                        if got != want || ps.iter().any(|p| p.state != "up") {
                            ok = false;
                            last = ps
                                .iter()
                                .map(|p| format!("{}={}", p.name, p.state))
                                .collect::<Vec<_>>()
                                .join(" ");
                        }
                    }
                    Err(e) => {
                        ok = false;
                        last = format!("{e:#}");
                    }
                }
            }
            if ok {
                return Ok(());
            }
            if now() >= end {
                bail!(
                    "paths not all up after {timeout:?} (last status: {last})\nside a log:\n{}\nside b log:\n{}",
                    self.a.log_tail(),
                    self.b.log_tail()
                );
            }
            netns::sleep(Duration::from_millis(100))?;
        }
    }

    /// Side a's status.
    pub fn status_a(&self) -> Result<Value> {
        status(&self.braid, &self.sock_a)
    }

    /// Side b's status.
    pub fn status_b(&self) -> Result<Value> {
        status(&self.braid, &self.sock_b)
    }

    /// Run a control command (`enslave ...`, `emancipate ...`) against side a or b.
    pub fn control(&self, side_a: bool, args: &[&str]) -> Result<String> {
        let sock = if side_a { &self.sock_a } else { &self.sock_b };
        let mut cmd = Command::new(&self.braid);
        cmd.args(args).arg("--control").arg(sock);
        netns::run_ok(&mut cmd)
    }
}

/// `braid up` for one side, in its namespace, logging to `log`.
fn spawn_up(
    braid: &Path,
    side: &str,
    ns: &str,
    conf: &Path,
    sock: &Path,
    log: &Path,
) -> Result<Proc> {
    let mut cmd = netns::ns_command(ns, braid);
    cmd.arg("up")
        .arg("--config")
        .arg(conf)
        .arg("--control")
        .arg(sock);
    Proc::spawn(&format!("braid up ({side})"), &mut cmd, false, Some(log))
}

/// `braid status --json --control SOCK` (the control socket is a file, reachable from any
/// namespace).
pub fn status(braid: &Path, sock: &Path) -> Result<Value> {
    let out = netns::run_timeout(
        Command::new(braid)
            .args(["status", "--json", "--control"])
            .arg(sock),
        Duration::from_secs(5),
    )?;
    // 3 and 4 say the bond is degraded or down: the answer is there all the same.
    if !matches!(out.status.code(), Some(0 | 3 | 4)) {
        bail!("braid status: {}", out.stderr.trim());
    }
    serde_json::from_str(out.stdout.trim()).context("braid status --json is not JSON")
}

/// One path as `braid status --json` shows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathSample {
    /// Name.
    pub name: String,
    /// "up"/"down".
    pub state: String,
    /// Data bytes sent.
    pub tx_bytes: u64,
    /// Data bytes received.
    pub rx_bytes: u64,
    /// Times it went down.
    pub downs: u64,
}

/// The bond's status object, wherever the program nests it.
fn bond_obj(v: &Value) -> &Value {
    if v.get("paths").is_some() {
        return v;
    }
    for key in ["bond", "status"] {
        if v.get(key).and_then(|b| b.get("paths")).is_some() {
            return &v[key];
        }
    }
    v
}

/// The paths of a status.
pub fn paths_of(v: &Value) -> Vec<PathSample> {
    bond_obj(v)["paths"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| PathSample {
                    name: p["name"].as_str().unwrap_or("").to_string(),
                    state: p["state"].as_str().unwrap_or("").to_string(),
                    tx_bytes: p["tx_bytes"].as_u64().unwrap_or(0),
                    rx_bytes: p["rx_bytes"].as_u64().unwrap_or(0),
                    downs: p["downs"].as_u64().unwrap_or(0),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The mean wait in the reorder buffer, in ms: the receiver's `wait_micros_total` counts
/// every delivery's wait (in order, reordered or late), so it is divided by all of them.
fn mean_wait_ms(wait_micros_total: u64, deliveries: u64) -> f64 {
    if deliveries == 0 {
        return 0.0;
    }
    wait_micros_total as f64 / deliveries as f64 / 1000.0
}

fn reorder_field(v: &Value, k: &str) -> u64 {
    bond_obj(v)["reorder"][k].as_u64().unwrap_or(0)
}

fn counter(v: &Value, k: &str) -> u64 {
    bond_obj(v)["counters"][k].as_u64().unwrap_or(0)
}

/// Each side's namespace's UDP receive-buffer drops so far (0 where unreadable).
fn rcvbuf_errors(daemons: &Daemons) -> (u64, u64) {
    let of = |pid| netns::udp_rcvbuf_errors(pid).unwrap_or(0);
    (of(daemons.a.pid()), of(daemons.b.pid()))
}

/// One IO counter summed over every path of a status answer.
fn io_sum(v: &Value, k: &str) -> u64 {
    v["io"].as_array().map_or(0, |io| {
        io.iter()
            .map(|p| p["counters"][k].as_u64().unwrap_or(0))
            .sum()
    })
}

/// Datagrams per call between two status answers (0 if no calls).
fn per_call(before: &Value, after: &Value, datagrams: &str, calls: &str) -> f64 {
    let d = |k| io_sum(after, k).saturating_sub(io_sum(before, k));
    match d(calls) {
        0 => 0.0,
        c => d(datagrams) as f64 / c as f64,
    }
}

/// Datagrams the path sockets did not send, over every path of a status answer.
fn io_dropped(v: &Value) -> u64 {
    io_sum(v, "send_would_block") + io_sum(v, "send_errors")
}

/// Start an iperf3 server in `ns` on `addr` (one test, JSON, 100 ms intervals).
pub fn iperf_server(ns: &str, addr: &str) -> Result<Proc> {
    let mut cmd = netns::ns_command(ns, "iperf3");
    cmd.args(["-s", "-1", "-J", "-i", "0.1", "-B", addr, "-p", IPERF_PORT]);
    let p = Proc::spawn("iperf3 server", &mut cmd, true, None)?;
    netns::sleep(Duration::from_millis(300))?;
    Ok(p)
}

/// Start an iperf3 client in `ns` towards `addr`.
pub fn iperf_client(
    ns: &str,
    addr: &str,
    secs: u64,
    flows: u32,
    udp_mbit: Option<f64>,
    tcp_cc: &str,
) -> Result<Proc> {
    let mut cmd = netns::ns_command(ns, "iperf3");
    if udp_mbit.is_none() {
        cmd.args(["-C", tcp_cc]);
    }
    cmd.args([
        "-c",
        addr,
        "-p",
        IPERF_PORT,
        "-J",
        "-i",
        "1",
        "--connect-timeout",
        "3000",
    ]);
    cmd.args(["-t", &secs.to_string(), "-P", &flows.to_string()]);
    if let Some(m) = udp_mbit {
        let per_flow = (m * 1e6 / f64::from(flows)).max(1000.0) as u64;
        cmd.args(["-u", "-l", "1300", "-b", &per_flow.to_string()]);
    }
    Proc::spawn("iperf3 client", &mut cmd, true, None)
}

/// Collect a finished iperf3 pair's result.
pub fn iperf_finish(server: Proc, client: Proc, secs: u64) -> Result<IperfResult> {
    let mut server = server;
    let c = client.wait_output(Duration::from_secs(secs + 20))?;
    // iperf3 3.12 exits 0 even on errors with -J: look for its "error" key too.
    let json_err = serde_json::from_str::<Value>(c.stdout.trim())
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_string));
    if !c.status.success() || json_err.is_some() {
        // The server would wait for a test that never came: stop it, report the client.
        server.stop();
        bail!(
            "iperf3 client failed: {}",
            json_err.unwrap_or_else(|| c.stderr.trim().to_string())
        );
    }
    let s = server.wait_output(Duration::from_secs(5))?;
    iperf::parse(&s.stdout, &c.stdout)
}

/// Plain TCP over path `i`'s veth, alone: goodput in bit/s.
pub fn measure_single_path(
    topo: &Topology,
    i: usize,
    secs: u64,
    sc: &Scenario,
    progress: &Progress,
) -> Result<f64> {
    let link = topo.links.get(i).ok_or_else(|| anyhow!("no path {i}"))?;
    let addr = link.addr_b.to_string();
    let server = iperf_server(&topo.ns_b, &addr)?;
    let client = iperf_client(&topo.ns_a, &addr, secs, 1, None, &sc.tcp_cc)?;
    progress.phase(&format!("path {i} alone"), secs);
    let r = iperf_finish(server, client, secs)?;
    Ok(after_warmup(&r, sc, secs))
}

/// Goodput without the scenario's warm-up seconds (whole-run goodput if the intervals
/// do not cover it).
fn after_warmup(r: &IperfResult, sc: &Scenario, secs: u64) -> f64 {
    let warmup = sc.warmup_s.clamp(0.0, secs as f64 / 2.0);
    iperf::goodput_between(&r.intervals, warmup, secs as f64).unwrap_or(r.goodput_bps)
}

/// Run every test of a scenario.
pub fn run_scenario(
    sc: &Scenario,
    opts: &RunOptions,
    progress: &Progress,
) -> Result<ScenarioResult> {
    progress.scenario(&sc.name);
    let topo = Topology::new(sc.paths.len())?;
    for (i, p) in sc.paths.iter().enumerate() {
        if let Some(m) = p.rate_mbit {
            topo.set_rate(i, (m * 1e6) as u64)?;
        }
    }
    let baseline_s = sc.baseline_seconds(opts.duration);
    let mut single = Vec::new();
    for (i, p) in sc.paths.iter().enumerate() {
        let bps = if p.is_serial() {
            // A serial line is not on the veth: its capacity is its byte rate.
            p.nominal_bps().map_or(0.0, |n| n as f64)
        } else if baseline_s > 0 {
            let measured = measure_single_path(&topo, i, baseline_s, sc, progress)?;
            // The emulator's rate limit is not on the bare veth: cap by it.
            match (p.rate_mbit, p.nominal_bps()) {
                (None, Some(n)) => measured.min(n as f64),
                _ => measured,
            }
        } else {
            p.nominal_bps().map_or(0.0, |n| n as f64)
        };
        single.push((p.name.clone(), bps / 1e6));
    }
    let mut tests = Vec::new();
    for (k, t) in sc.tests.iter().enumerate() {
        let r = run_test(sc, t, k, &topo, &single, opts, progress)
            .with_context(|| format!("scenario {}, test {}", sc.name, t.label()))?;
        tests.push(r);
    }
    Ok(ScenarioResult {
        tcp_cc: sc.tcp_cc.clone(),
        warmup_s: sc.warmup_s,
        scenario: sc.name.clone(),
        description: sc.description.clone(),
        single_mbit: single,
        tests,
    })
}

struct Sample {
    t: f64,
    paths: Vec<PathSample>,
}

#[allow(clippy::too_many_arguments)]
fn run_test(
    sc: &Scenario,
    t: &TestSpec,
    k: usize,
    topo: &Topology,
    single: &[(String, f64)],
    opts: &RunOptions,
    progress: &Progress,
) -> Result<TestResult> {
    let secs = opts
        .duration
        .or(t.duration_s)
        .unwrap_or(sc.duration_s)
        .max(1);
    // Scale a cut to an overridden duration.
    let scale = secs as f64 / t.duration_s.unwrap_or(sc.duration_s).max(1) as f64;
    let cut = t.cut.as_ref().map(|c| (c, c.at_s * scale, c.for_s * scale));
    let cut_idx = match &cut {
        Some((c, _, _)) => Some(
            sc.paths
                .iter()
                .position(|p| p.name == c.path)
                .ok_or_else(|| anyhow!("unknown path"))?,
        ),
        None => None,
    };
    let outage = cut
        .as_ref()
        .filter(|(c, _, _)| c.how == CutHow::Emulator)
        .map(|(c, at, len)| {
            (
                c.path.as_str(),
                WARMUP.as_millis() as u64 + (at * 1000.0) as u64,
                (len * 1000.0) as u64,
            )
        });
    if let (Some((c, _, _)), Some(idx)) = (&cut, cut_idx) {
        if c.how == CutHow::LinkDown && sc.paths.get(idx).is_some_and(|p| p.is_serial()) {
            bail!(
                "path {} is a serial line: cut it with how = \"emulator\" or give the line outages",
                c.path
            );
        }
    }
    // Serial paths' lines live until the daemons have stopped (dropped after them).
    let lines = SerialLines::start(sc)?;
    let devices = lines.devices();
    let mut cfg_a = sc.daemon_config_with(true, &topo.links, outage, &devices)?;
    if opts.monitor.is_some() {
        cfg_a += super::monitor::CONFIG;
    }
    let cfg_b = sc.daemon_config_with(false, &topo.links, outage, &devices)?;
    progress.phase(&format!("{}: starting braid", t.label()), secs);
    let mut daemons = Daemons::start(&opts.braid, topo, &format!("t{k}"), &cfg_a, &cfg_b)?;
    let names: Vec<&str> = sc.paths.iter().map(|p| p.name.as_str()).collect();
    daemons.wait_paths_up(&names, UP_TIMEOUT)?;
    let _live = match opts.monitor {
        Some(addr) => Some((
            super::monitor::Proxy::start(addr, &topo.ns_a)?,
            super::monitor::Page::open(&topo.ns_a)?,
        )),
        None => None,
    };
    // Traffic starts WARMUP after the daemons (so that emulator outages line up).
    let since = now() - daemons.started;
    if since < WARMUP {
        netns::sleep(WARMUP - since)?;
    }

    let server = iperf_server(&topo.ns_b, "10.200.0.2")?;
    let a0 = daemons.status_a()?;
    let b0 = daemons.status_b()?;
    let cpu0 = (
        netns::cpu_time(daemons.a.pid()),
        netns::cpu_time(daemons.b.pid()),
    );
    let rcvbuf0 = rcvbuf_errors(&daemons);
    let mut client = iperf_client(
        &topo.ns_a,
        "10.200.0.2",
        secs,
        t.flows,
        t.udp_mbit,
        &sc.tcp_cc,
    )?;
    let t0 = now();
    let mut meter = host::Meter::start();
    progress.phase(&t.label(), secs);

    let sample_every = if cut.is_some() {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(1)
    };
    let mut samples = vec![Sample {
        t: 0.0,
        paths: paths_of(&a0),
    }];
    let mut next_sample = sample_every;
    let mut cut_state = 0; // 0 before, 1 cut, 2 restored
    let mut restored_at = None;
    let deadline = Duration::from_secs(secs + 20);
    let mut link_guard = LinkGuard { topo, idx: None };
    while client.running() {
        netns::check_interrupted()?;
        let el = now() - t0;
        if el > deadline {
            bail!("iperf3 did not finish within {deadline:?}");
        }
        if let (Some((c, at, len)), Some(idx)) = (&cut, cut_idx) {
            let el_s = el.as_secs_f64();
            if cut_state == 0 && el_s >= *at {
                if c.how == CutHow::LinkDown {
                    topo.set_link(idx, false)?;
                    link_guard.idx = Some(idx);
                }
                cut_state = 1;
            } else if cut_state == 1 && el_s >= at + len {
                if c.how == CutHow::LinkDown {
                    topo.set_link(idx, true)?;
                    link_guard.idx = None;
                }
                restored_at = Some(el_s);
                cut_state = 2;
            }
        }
        if el >= next_sample {
            if let Ok(v) = daemons.status_a() {
                samples.push(Sample {
                    t: (now() - t0).as_secs_f64(),
                    paths: paths_of(&v),
                });
            }
            next_sample = el + sample_every;
        }
        progress.tick();
        let nap = Duration::from_millis(10);
        let before = now();
        std::thread::sleep(nap);
        meter.slept(nap, now() - before);
    }
    let host = meter.finish();
    let elapsed = (now() - t0).as_secs_f64();
    drop(link_guard);
    let a1 = daemons.status_a()?;
    let b1 = daemons.status_b()?;
    let cpu1 = (
        netns::cpu_time(daemons.a.pid()),
        netns::cpu_time(daemons.b.pid()),
    );
    let rcvbuf1 = rcvbuf_errors(&daemons);
    let ip = iperf_finish(server, client, secs)?;
    drop(daemons);
    if let Some(e) = lines.relay_error() {
        bail!("a serial line's relay stopped: {e}");
    }
    drop(lines);

    let cpu_pct = |c0: Option<Duration>, c1: Option<Duration>| match (c0, c1) {
        (Some(x), Some(y)) => (y.saturating_sub(x)).as_secs_f64() / elapsed.max(1e-3) * 100.0,
        _ => 0.0,
    };
    let s_mbit: f64 = single.iter().map(|s| s.1).sum();
    let goodput_mbit = after_warmup(&ip, sc, secs) / 1e6;
    let p0 = paths_of(&a0);
    let p1 = paths_of(&a1);
    let paths: Vec<PathResult> = p1
        .iter()
        .map(|p| {
            let before = p0.iter().find(|q| q.name == p.name);
            let bytes = p.tx_bytes.saturating_sub(before.map_or(0, |q| q.tx_bytes));
            let mbit = bytes as f64 * 8.0 / elapsed.max(1e-3) / 1e6;
            let capacity_mbit = single.iter().find(|s| s.0 == p.name).map_or(0.0, |s| s.1);
            PathResult {
                name: p.name.clone(),
                mbit,
                capacity_mbit,
                util: if capacity_mbit > 0.0 {
                    mbit / capacity_mbit
                } else {
                    0.0
                },
                downs: p.downs.saturating_sub(before.map_or(0, |q| q.downs)),
            }
        })
        .collect();
    let d = |k: &str| reorder_field(&b1, k).saturating_sub(reorder_field(&b0, k));
    let waited = d("reordered");
    let delivered = waited + d("in_order");
    let drops = ["drop_no_path", "drop_queue", "drop_too_big"]
        .iter()
        .map(|k| counter(&a1, k).saturating_sub(counter(&a0, k)))
        .sum();

    let cut_result = match (&cut, cut_idx) {
        (Some((c, at, len)), Some(idx)) => {
            let remaining: f64 = single
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != idx)
                .map(|(_, s)| s.1)
                .sum();
            let during =
                iperf::goodput_between(&ip.intervals, at + 0.3, at + len).unwrap_or(0.0) / 1e6;
            let rejoin_ms = restored_at.and_then(|r| rejoin_ms(&samples, &c.path, r));
            Some(CutResult {
                path: c.path.clone(),
                how: c.how,
                during_mbit: during,
                remaining_mbit: remaining,
                ratio: if remaining > 0.0 {
                    during / remaining
                } else {
                    0.0
                },
                rejoin_ms,
            })
        }
        _ => None,
    };

    let mut r = TestResult {
        scenario: sc.name.clone(),
        test: t.label(),
        scheduler: sc.bond.scheduler.clone(),
        flows: t.flows,
        proto: if t.udp_mbit.is_some() { "udp" } else { "tcp" },
        duration_s: secs,
        s_mbit,
        goodput_mbit,
        ratio: if s_mbit > 0.0 {
            goodput_mbit / s_mbit
        } else {
            0.0
        },
        paths,
        reorder_wait_mean_ms: mean_wait_ms(d("wait_micros_total"), delivered + d("late")),
        reorder_wait_max_ms: reorder_field(&b1, "wait_micros_max") as f64 / 1000.0,
        reordered_fraction: if delivered > 0 {
            waited as f64 / delivered as f64
        } else {
            0.0
        },
        reorder_skipped: d("skipped"),
        reorder_late: d("late"),
        retransmits: ip.retransmits,
        udp_lost_percent: ip.udp_lost_percent,
        bond_drops: drops,
        rescheduled: counter(&a1, "rescheduled").saturating_sub(counter(&a0, "rescheduled")),
        send_dropped: io_dropped(&a1).saturating_sub(io_dropped(&a0)),
        udp_rcvbuf_errors: (
            rcvbuf1.0.saturating_sub(rcvbuf0.0),
            rcvbuf1.1.saturating_sub(rcvbuf0.1),
        ),
        stall_ms: iperf::longest_stall_ms(&ip.intervals),
        cpu_pct: (cpu_pct(cpu0.0, cpu1.0), cpu_pct(cpu0.1, cpu1.1)),
        per_call: (
            per_call(&a0, &a1, "send_datagrams", "send_calls"),
            per_call(&b0, &b1, "recv_datagrams", "recv_calls"),
        ),
        host,
        cut: cut_result,
        missed: Vec::new(),
    };
    let best_single = single.iter().map(|s| s.1).fold(0.0, f64::max);
    r.missed = check(t, &r, best_single);
    Ok(r)
}

/// Puts a cut link back up if the test ends early.
struct LinkGuard<'a> {
    topo: &'a Topology,
    idx: Option<usize>,
}

impl Drop for LinkGuard<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.idx.take() {
            let _ = self.topo.set_link(i, true);
        }
    }
}

/// First sample after `restored` (s) where `path` has sent ≥ 15 kB since; ms after `restored`.
fn rejoin_ms(samples: &[Sample], path: &str, restored: f64) -> Option<f64> {
    let tx = |s: &Sample| s.paths.iter().find(|p| p.name == path).map(|p| p.tx_bytes);
    let base = samples
        .iter()
        .rev()
        .find(|s| s.t <= restored)
        .and_then(tx)?;
    samples
        .iter()
        .filter(|s| s.t > restored)
        .find(|s| tx(s).is_some_and(|b| b >= base + 15_000))
        .map(|s| (s.t - restored) * 1000.0)
}

/// The targets a result missed.
pub fn check(t: &TestSpec, r: &TestResult, best_single_mbit: f64) -> Vec<String> {
    let e = &t.expect;
    let mut missed = Vec::new();
    if let Some(m) = e.min_ratio {
        if r.ratio < m {
            missed.push(format!("goodput/S {:.2} < {m}", r.ratio));
        }
    }
    if let Some(m) = e.min_x_one_path {
        let x = if best_single_mbit > 0.0 {
            r.goodput_mbit / best_single_mbit
        } else {
            0.0
        };
        if x < m {
            missed.push(format!("{x:.2}x one path < {m}x"));
        }
    }
    if let Some(m) = e.min_path_util {
        for p in &r.paths {
            if p.util < m {
                missed.push(format!("{} util {:.2} < {m}", p.name, p.util));
            }
        }
    }
    if let Some(m) = e.max_paths_used {
        let total: f64 = r.paths.iter().map(|p| p.mbit).sum();
        let used = r
            .paths
            .iter()
            .filter(|p| total > 0.0 && p.mbit > 0.05 * total)
            .count();
        if used > m {
            missed.push(format!("{used} paths used > {m}"));
        }
    }
    if let Some(m) = e.max_stall_ms {
        if r.stall_ms > m {
            missed.push(format!("stall {:.0} ms > {m}", r.stall_ms));
        }
    }
    if let Some(c) = &r.cut {
        if let Some(m) = e.min_cut_ratio {
            if c.ratio < m {
                missed.push(format!("cut ratio {:.2} < {m}", c.ratio));
            }
        }
        if let Some(m) = e.max_rejoin_ms {
            match c.rejoin_ms {
                Some(ms) if ms <= m => {}
                Some(ms) => missed.push(format!("rejoin {ms:.0} ms > {m}")),
                None => missed.push("path did not rejoin".into()),
            }
        }
    }
    missed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100,000 packets delivered in order after 0.5 ms each and 10 reordered after 4 ms:
    /// the mean is about 0.5 ms, never above the longest wait (it read 55,344 ms when it
    /// divided every delivery's wait by the reordered ones alone).
    #[test]
    fn the_mean_wait_counts_every_delivery() {
        let total = 100_000 * 500 + 10 * 4000;
        let mean = mean_wait_ms(total, 100_010);
        assert!((mean - 0.5004).abs() < 0.001, "{mean}");
        assert_eq!(mean_wait_ms(123, 0), 0.0);
    }

    fn sample(t: f64, tx: u64) -> Sample {
        Sample {
            t,
            paths: vec![PathSample {
                name: "p1".into(),
                tx_bytes: tx,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn rejoin_from_samples() {
        let s = vec![
            sample(4.9, 1000),
            sample(5.0, 1000),
            sample(5.1, 1000),
            sample(5.3, 9000),
            sample(5.4, 40_000),
        ];
        let r = rejoin_ms(&s, "p1", 5.0).unwrap();
        assert!((r - 400.0).abs() < 1e-6, "{r}");
        assert_eq!(rejoin_ms(&s[..3], "p1", 5.0), None);
        assert_eq!(rejoin_ms(&s, "p9", 5.0), None);
    }

    #[test]
    fn datagrams_per_call_over_every_path() {
        let io = |d: [u64; 2], c: [u64; 2]| {
            serde_json::json!({"io": [
                {"counters": {"send_datagrams": d[0], "send_calls": c[0]}},
                {"counters": {"send_datagrams": d[1], "send_calls": c[1]}},
            ]})
        };
        let (before, after) = (io([10, 5], [1, 1]), io([70, 45], [3, 2]));
        assert_eq!(
            per_call(&before, &after, "send_datagrams", "send_calls"),
            100.0 / 3.0
        );
        assert_eq!(
            per_call(&before, &before, "send_datagrams", "send_calls"),
            0.0
        );
        assert_eq!(
            per_call(&before, &after, "recv_datagrams", "recv_calls"),
            0.0
        );
    }

    #[test]
    fn status_paths_parse_nested_or_flat() {
        let flat: Value = serde_json::json!({"paths":[{"name":"p0","state":"up","tx_bytes":5,"downs":1}],
            "reorder":{"reordered":3}});
        let nested = serde_json::json!({"bond": flat.clone()});
        for v in [&flat, &nested] {
            let p = paths_of(v);
            assert_eq!(p.len(), 1);
            assert_eq!(p[0].name, "p0");
            assert_eq!(p[0].state, "up");
            assert_eq!(p[0].tx_bytes, 5);
            assert_eq!(p[0].downs, 1);
            assert_eq!(reorder_field(v, "reordered"), 3);
        }
    }

    #[test]
    fn targets_checked() {
        let t: TestSpec =
            toml::from_str("[expect]\nmin_ratio = 0.9\nmax_paths_used = 1\nmin_path_util = 0.5")
                .unwrap();
        let mk = |a: f64, b: f64| PathResult {
            name: "p".into(),
            mbit: a,
            capacity_mbit: b,
            util: a / b,
            downs: 0,
        };
        let mut r = TestResult {
            scenario: "s".into(),
            test: "t".into(),
            scheduler: "x".into(),
            flows: 1,
            proto: "tcp",
            duration_s: 1,
            s_mbit: 20.0,
            goodput_mbit: 19.0,
            ratio: 0.95,
            paths: vec![mk(9.5, 10.0), mk(9.5, 10.0)],
            reorder_wait_mean_ms: 0.0,
            reorder_wait_max_ms: 0.0,
            reordered_fraction: 0.0,
            reorder_skipped: 0,
            reorder_late: 0,
            retransmits: None,
            udp_lost_percent: None,
            bond_drops: 0,
            rescheduled: 0,
            send_dropped: 0,
            udp_rcvbuf_errors: (0, 0),
            stall_ms: 0.0,
            cpu_pct: (0.0, 0.0),
            per_call: (0.0, 0.0),
            host: HostLoad::default(),
            cut: None,
            missed: vec![],
        };
        assert_eq!(check(&t, &r, 10.0), vec!["2 paths used > 1".to_string()]);
        r.paths = vec![mk(9.5, 10.0), mk(0.1, 10.0)];
        r.ratio = 0.5;
        let m = check(&t, &r, 10.0);
        assert_eq!(m.len(), 2, "{m:?}");
    }
}
