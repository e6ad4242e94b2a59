//! `braid lab fault-matrix`: a randomised fault matrix, as the MPTCP selftests'
//! `mptcp_connect.sh` is for MPTCP. N seeded cases; each draws its paths (1-4, with
//! braid's emulator: rate, delay, jitter, loss), a scheduler, sealed or plain, a transfer
//! size and faults during the transfer (path flaps, one end restarted with SIGTERM or
//! SIGKILL, a reload, a control-socket flood, junk datagrams on a path port); the transfer
//! is checked byte for byte, the daemons' status against invariants, and every fault's
//! outage is measured with a probe stream through the bond. A failed case prints its seed
//! and the command that replays it. `docs/reliability.md` describes it.
//!
//! | module | what it is |
//! | --- | --- |
//! | [`case`] | drawing a case from its seed |
//! | [`transfer`] | the checked TCP transfer |
//! | [`probe`] | the probe stream and outages |
//! | [`faults`] | injecting each fault |
//! | [`invariants`] | checks of `braid status --json` |
//! | [`runner`] | running one case |
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

pub mod case;
pub mod faults;
pub mod invariants;
pub mod probe;
pub mod runner;
pub mod transfer;

use case::{Case, FAULT_KINDS};
pub use runner::{CaseResult, Options};

/// Whether reload faults are injected.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReloadMode {
    /// On when `braid reload --help` succeeds on the binary under test.
    #[default]
    Auto,
    /// Always (SIGHUP).
    On,
    /// Never: reload faults are drawn (so seeds keep their meaning) but skipped.
    Off,
}

impl ReloadMode {
    /// Resolve `auto` against the binary `braid`.
    pub fn resolve(self, braid: &Path) -> bool {
        match self {
            ReloadMode::On => true,
            ReloadMode::Off => false,
            ReloadMode::Auto => has_reload(braid),
        }
    }
}

/// True when `braid reload --help` succeeds: the binary has a reload command.
pub fn has_reload(braid: &Path) -> bool {
    let mut cmd = Command::new(braid);
    cmd.args(["reload", "--help"]);
    crate::netns::run_timeout(&mut cmd, Duration::from_secs(10)).is_ok_and(|o| o.status.success())
}

/// The command that replays the case of `seed`.
pub fn replay_command(seed: u64, reload: bool) -> String {
    format!(
        "sudo braid lab fault-matrix --cases 1 --seed {seed} --reload {}",
        if reload { "on" } else { "off" }
    )
}

/// Per fault kind: how many, and the longest outage.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KindFigures {
    /// Injected.
    pub injected: u64,
    /// Drawn but not injected (reload off).
    pub skipped: u64,
    /// Longest outage among those that recovered, ms, and its case's seed.
    pub longest_outage_ms: Option<(f64, u64)>,
    /// Faults after which data did not flow again within their case, and the longest
    /// time it was out at least (ms) with its seed.
    pub not_recovered: u64,
    /// The longest "out at least" of those, ms, and its seed.
    pub longest_unrecovered_ms: Option<(f64, u64)>,
    /// Restarts: longest time from the new daemon's start to data, ms, and its seed.
    pub longest_after_start_ms: Option<(f64, u64)>,
}

/// A whole run's figures.
#[derive(Clone, Debug, Serialize)]
pub struct MatrixReport {
    /// Whether reload faults were injected.
    pub reload: bool,
    /// Every case.
    pub cases: Vec<CaseResult>,
    /// Per fault kind.
    pub kinds: BTreeMap<String, KindFigures>,
    /// Bytes checked, all cases.
    pub bytes_checked: u64,
    /// Cases that failed.
    pub failed: usize,
}

fn keep_max(slot: &mut Option<(f64, u64)>, v: f64, seed: u64) {
    if slot.is_none_or(|(m, _)| v > m) {
        *slot = Some((v, seed));
    }
}

impl MatrixReport {
    /// Figures from the cases.
    pub fn new(reload: bool, cases: Vec<CaseResult>) -> Self {
        let mut kinds: BTreeMap<String, KindFigures> = FAULT_KINDS
            .iter()
            .map(|k| (k.to_string(), KindFigures::default()))
            .collect();
        for c in &cases {
            for f in &c.faults {
                let k = kinds.entry(f.kind.to_string()).or_default();
                if f.skipped {
                    k.skipped += 1;
                    continue;
                }
                k.injected += 1;
                if let Some(o) = f.outage_ms {
                    keep_max(&mut k.longest_outage_ms, o, c.seed);
                }
                if let (Some(o), false) = (f.out_at_least_ms, f.masked) {
                    k.not_recovered += 1;
                    keep_max(&mut k.longest_unrecovered_ms, o, c.seed);
                }
                if let Some(o) = f.after_start_ms {
                    keep_max(&mut k.longest_after_start_ms, o, c.seed);
                }
            }
        }
        Self {
            reload,
            bytes_checked: cases.iter().map(|c| c.bytes_checked).sum(),
            failed: cases.iter().filter(|c| !c.failures.is_empty()).count(),
            cases,
            kinds,
        }
    }

    /// The summary: counts, the per-kind table and every failure with its replay command.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let n = self.cases.len();
        let _ = writeln!(
            s,
            "fault matrix: {n} case(s), seeds {}, reload faults {}: {} passed, {} failed; {:.1} MiB checked byte for byte",
            seed_list(&self.cases.iter().map(|c| c.seed).collect::<Vec<_>>()),
            if self.reload { "on" } else { "off (skipped)" },
            self.cases.len() - self.failed,
            self.failed,
            self.bytes_checked as f64 / (1 << 20) as f64
        );
        let _ = writeln!(
            s,
            "  {:<14} {:>8} {:>8} {:>22} {:>14} {:>22}",
            "fault",
            "injected",
            "skipped",
            "longest outage",
            "not recovered",
            "restart: start to data"
        );
        let fmt = |v: Option<(f64, u64)>| match v {
            Some((ms, seed)) => format!("{ms:.0} ms (#{seed})"),
            None => "-".into(),
        };
        let order = FAULT_KINDS
            .iter()
            .filter_map(|n| self.kinds.get_key_value(*n))
            .chain(
                self.kinds
                    .iter()
                    .filter(|(n, _)| !FAULT_KINDS.contains(&n.as_str())),
            );
        for (name, k) in order {
            let unrec = match k.longest_unrecovered_ms {
                Some((ms, seed)) => format!("{} (>{:.0} s #{seed})", k.not_recovered, ms / 1000.0),
                None => "0".into(),
            };
            let _ = writeln!(
                s,
                "  {:<14} {:>8} {:>8} {:>22} {:>14} {:>22}",
                name,
                k.injected,
                k.skipped,
                fmt(k.longest_outage_ms),
                unrec,
                if name.starts_with("restart") {
                    fmt(k.longest_after_start_ms)
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(
            s,
            "  (outage: longest time without a probe through the bond, every 50 ms, from the fault until data flowed again after it)"
        );
        for c in self.cases.iter().filter(|c| !c.failures.is_empty()) {
            let _ = writeln!(s, "FAILED case {}: {}", c.seed, c.summary);
            for f in &c.faults {
                let _ = writeln!(s, "    fault at {:.1} s: {}", f.at_s, f.what);
            }
            for m in &c.failures {
                let _ = writeln!(s, "    - {m}");
            }
            let _ = writeln!(s, "    replay: {}", replay_command(c.seed, self.reload));
        }
        s
    }
}

/// `3..=7` for consecutive seeds, else `3, 9, 12`.
fn seed_list(seeds: &[u64]) -> String {
    let consecutive = seeds.windows(2).all(|w| w[1] == w[0].wrapping_add(1));
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if consecutive && seeds.len() > 1 => format!("{a}..={b}"),
        _ => seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// One line for a finished case.
pub fn case_line(c: &CaseResult, reload: bool) -> String {
    let faults: Vec<String> = c
        .faults
        .iter()
        .map(|f| {
            let cost = if f.skipped {
                "skipped".to_string()
            } else {
                match (f.outage_ms, f.out_at_least_ms) {
                    (Some(o), _) => format!("outage {o:.0} ms"),
                    (None, Some(_)) if f.masked => "the bond was already out".into(),
                    (None, Some(o)) => format!("NOT RECOVERED, out >= {:.1} s", o / 1000.0),
                    _ => "-".into(),
                }
            };
            format!("{:.1} s {} ({cost})", f.at_s, f.what)
        })
        .collect();
    let mut s = format!(
        "case {} {} ({:.0} s): {}; faults: {}",
        c.seed,
        if c.failures.is_empty() {
            "ok"
        } else {
            "FAILED"
        },
        c.seconds,
        c.summary,
        faults.join(", ")
    );
    if c.reconnects > 0 {
        s += &format!("; reconnected {}x", c.reconnects);
    }
    for m in &c.failures {
        s += &format!("\n    - {m}");
    }
    if !c.failures.is_empty() {
        s += &format!("\n    replay: {}", replay_command(c.seed, reload));
    }
    s
}

/// Run cases `seed`, `seed + 1`, ... (`cases` of them), printing a line per case to stderr
/// as each ends (unless `quiet`).
pub fn run(opts: &Options, seed: u64, cases: u64, quiet: bool) -> Result<MatrixReport> {
    let seeds: Vec<u64> = (0..cases).map(|k| seed.wrapping_add(k)).collect();
    run_seeds(opts, &seeds, quiet)
}

/// Run the cases of `seeds`, printing a line per case to stderr as each ends (unless
/// `quiet`).
pub fn run_seeds(opts: &Options, seeds: &[u64], quiet: bool) -> Result<MatrixReport> {
    crate::netns::install_signal_handler();
    let mut results = Vec::new();
    for (k, &seed) in seeds.iter().enumerate() {
        let c = Case::draw(seed);
        if !quiet {
            eprintln!("case {seed} ({}/{}): {}", k + 1, seeds.len(), c.summary());
        }
        let r = runner::run_case(&c, opts)?;
        if !quiet {
            eprintln!("{}", case_line(&r, opts.reload));
        }
        results.push(r);
    }
    Ok(MatrixReport::new(opts.reload, results))
}

/// A seed for a run when none is given (from the OS's random source).
pub fn fresh_seed() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    // Small enough to type.
    u64::from_le_bytes(b) % 1_000_000
}

/// `braid lab fault-matrix`'s whole run: prints the report; an error if any case failed.
pub fn main(
    braid: PathBuf,
    cases: u64,
    seed: Option<u64>,
    reload: ReloadMode,
    json: Option<&Path>,
    quiet: bool,
) -> Result<()> {
    let reload = reload.resolve(&braid);
    let seed = seed.unwrap_or_else(fresh_seed);
    let opts = Options { braid, reload };
    let report = run(&opts, seed, cases, quiet)?;
    println!("{}", report.render());
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    if report.failed > 0 {
        anyhow::bail!(
            "{} of {} fault-matrix case(s) failed (seeds and replay commands above)",
            report.failed,
            report.cases.len()
        );
    }
    Ok(())
}

/// `--list`: the cases of seeds `seed..seed + cases` without running them.
pub fn list(seed: u64, cases: u64) -> String {
    let mut s = String::new();
    for k in 0..cases {
        let c = Case::draw(seed.wrapping_add(k));
        let faults: Vec<String> = c
            .faults
            .iter()
            .map(|f| format!("{:.1} s {}", f.at_ms as f64 / 1000.0, f.kind))
            .collect();
        let _ = writeln!(
            s,
            "case {}: {}; ~{:.1} s; faults: {}",
            c.seed,
            c.summary(),
            c.expected_ms() as f64 / 1000.0,
            faults.join(", ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner::FaultResult;

    fn fault(kind: &'static str, outage: Option<f64>, skipped: bool) -> FaultResult {
        FaultResult {
            kind,
            what: kind.into(),
            at_s: 1.0,
            skipped,
            outage_ms: outage,
            after_start_ms: None,
            out_at_least_ms: if outage.is_none() && !skipped {
                Some(30_000.0)
            } else {
                None
            },
            masked: false,
        }
    }

    #[test]
    fn report_counts_kinds_outages_and_failures() {
        let ok = CaseResult {
            seed: 10,
            summary: "x".into(),
            faults: vec![
                fault("flap", Some(120.0), false),
                fault("flap", Some(800.0), false),
                fault("reload", None, true),
            ],
            bytes_checked: 1 << 20,
            reconnects: 0,
            failures: vec![],
            seconds: 3.0,
        };
        let bad = CaseResult {
            seed: 11,
            summary: "y".into(),
            faults: vec![fault("restart-kill", None, false)],
            bytes_checked: 0,
            reconnects: 1,
            failures: vec!["no data".into()],
            seconds: 40.0,
        };
        let r = MatrixReport::new(false, vec![ok, bad]);
        assert_eq!(r.failed, 1);
        assert_eq!(r.bytes_checked, 1 << 20);
        assert_eq!(r.kinds["flap"].injected, 2);
        assert_eq!(r.kinds["flap"].longest_outage_ms, Some((800.0, 10)));
        assert_eq!(r.kinds["reload"].skipped, 1);
        assert_eq!(r.kinds["restart-kill"].not_recovered, 1);
        let text = r.render();
        assert!(text.contains("2 case(s), seeds 10..=11"), "{text}");
        assert!(text.contains("1 passed, 1 failed"), "{text}");
        assert!(text.contains("FAILED case 11"), "{text}");
        assert!(
            text.contains("replay: sudo braid lab fault-matrix --cases 1 --seed 11 --reload off"),
            "{text}"
        );
        assert!(!text.contains("FAILED case 10"));
    }

    #[test]
    fn reload_auto_asks_the_binary() {
        let yes = crate::netns::which("true").unwrap();
        let no = crate::netns::which("false").unwrap();
        assert!(ReloadMode::Auto.resolve(&yes));
        assert!(!ReloadMode::Auto.resolve(&no));
        assert!(ReloadMode::On.resolve(&no));
        assert!(!ReloadMode::Off.resolve(&yes));
    }

    #[test]
    fn seed_lists() {
        assert_eq!(seed_list(&[3, 4, 5]), "3..=5");
        assert_eq!(seed_list(&[3, 9]), "3, 9");
        assert_eq!(seed_list(&[3]), "3");
    }

    #[test]
    fn list_names_each_case() {
        let l = list(5, 3);
        assert_eq!(l.lines().count(), 3);
        assert!(l.starts_with("case 5: "));
    }
}
