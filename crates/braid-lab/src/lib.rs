//! The lab (`braid lab`, `braid demo`): two network namespaces joined by N veth pairs
//! (shaped by tbf, emulated by braid's own [`braid_core::emu`]), braid running on both
//! ends, iperf3 through the bond, and a result table. Scenarios are TOML data files
//! (`scenarios/`, embedded in the binary); `docs/lab.md` has the topology, the schema and
//! the columns. The `braid` program runs this crate's `braid-lab` for `braid lab` and
//! `braid demo`; the lab runs the `braid` beside it ([`braid_exe`]) in its namespaces. Its
//! modules are also the fixtures of the namespace tests in `tests/`.
//!
//! | module | what it is |
//! | --- | --- |
//! | [`scenario`] | the scenario schema, the built-in scenarios, daemon configs |
//! | [`netns`] | namespaces, veths, tbf, processes; cleanup guards and Ctrl-C |
//! | [`run`] | running a scenario and computing its figures |
//! | [`iperf`] | iperf3's JSON, stalls, windowed goodput |
//! | [`report`] | the table |
//! | [`progress`] | the progress line |
//! | [`share`] | link-sharing scenarios: the seed's HTB tests, kernel HTB beside braid's |
//! | [`udpgen`] | paced UDP senders and binning receivers for [`share`] |
//! | [`plot`] | SVG charts of per-second rates |
//! | [`capture`] | counting what leaves on a link (packet socket, kernel timestamps) |
//! | [`line`] | serial line emulator: two ptys joined at a baud rate, with errors and outages |
//! | [`serial`] | a scenario's serial lines, timed TCP transfers, ping |
//! | [`serial_tables`] | the seeds' serial tables (Bentson's EQL table, the SLIP table) |
//! | [`matrix`] | `fault-matrix`: seeded cases of faults under a checked transfer |
//! | [`soak`] | `soak-flaps`, `soak-overload`, `soak-junk-rekey`: long runs by hand |
//! | [`ether`] | Ethernet bonds: Open vSwitch as LACP partner, failover gaps, the bonding seeds' experiments |
//! | [`theory`] | the fluid-model share each HTB class should get, for the tables and tests |
//! | [`cli`] | the `braid-lab` program's command line |
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

pub mod capture;
pub mod cli;
pub mod ether;
pub mod host;
pub mod iperf;
pub mod line;
pub mod matrix;
pub mod monitor;
pub mod netns;
pub mod plot;
pub mod progress;
pub mod report;
pub mod run;
pub mod scenario;
pub mod serial;
pub mod serial_tables;
pub mod share;
pub mod soak;
pub mod theory;
pub mod udpgen;

use progress::Progress;
use run::{RunOptions, ScenarioResult};
use scenario::{Scenario, BUILTIN};
use share::{ShareScenario, SHARE_BUILTIN};

/// Arguments of `braid lab`.
#[derive(clap::Args, Debug, Clone)]
pub struct LabArgs {
    /// scenario files or names of built-in scenarios (default: all built-in ones)
    pub scenarios: Vec<String>,
    /// list the built-in scenarios and exit
    #[arg(long)]
    pub list: bool,
    /// override each test's duration, seconds
    #[arg(long)]
    pub duration: Option<u64>,
    /// also write the results as JSON to this file
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// no progress line
    #[arg(long)]
    pub quiet: bool,
    /// set a `[bond]` key in every bond scenario (repeatable), e.g. `--bond offload=false`
    /// or `--bond encryption=none`; the scenario's name in the results says so
    #[arg(long = "bond", value_name = "KEY=VALUE")]
    pub bond_keys: Vec<String>,
    /// where link-sharing scenarios write their plots
    #[arg(long, default_value = "lab-results")]
    pub out: PathBuf,
    /// fault-matrix: how many cases
    #[arg(long, default_value_t = 20)]
    pub cases: u64,
    /// fault-matrix: the first case's seed; cases are SEED, SEED+1, ... [default: random]
    #[arg(long)]
    pub seed: Option<u64>,
    /// fault-matrix: inject reload faults (SIGHUP); auto: when `braid reload --help` works
    #[arg(long, value_enum, default_value_t)]
    pub reload: matrix::ReloadMode,
    /// serve braid's live dashboard of each run on ADDR:PORT (e.g. 127.0.0.1:9190; side
    /// a's daemon); bond scenarios keep an event stream open as a page would,
    /// link-sharing ones plot the monitor's samples beside the receivers' plot
    #[arg(long, value_name = "ADDR:PORT")]
    pub monitor: Option<std::net::SocketAddr>,
}

/// Run `braid lab`.
pub fn main(args: LabArgs) -> Result<()> {
    if let Some(special) = args
        .scenarios
        .iter()
        .find(|n| *n == "fault-matrix" || soak::is_soak(n) || ether::is_ether(n))
    {
        if args.scenarios.len() > 1 {
            bail!("{special} runs alone: give it as the only scenario");
        }
        if special == "fault-matrix" {
            if args.list {
                print!("{}", matrix::list(args.seed.unwrap_or(1), args.cases));
                return Ok(());
            }
            preflight_netns()?;
            return matrix::main(
                braid_exe()?,
                args.cases,
                args.seed,
                args.reload,
                args.json.as_deref(),
                args.quiet,
            );
        }
        if ether::is_ether(special) {
            return ether::main(special, &args);
        }
        preflight_netns()?;
        return soak::main(special, &args);
    }
    if args.list {
        for (name, text) in BUILTIN {
            let s = Scenario::parse(text)?;
            println!(
                "{name:<18} {:>4} s  {}",
                s.test_seconds() + s.baseline_seconds(None) * s.paths.len() as u64,
                s.description
            );
        }
        for (name, text) in SHARE_BUILTIN {
            let s = ShareScenario::parse(text)?;
            println!(
                "{name:<18} {:>4} s  {}",
                (s.duration_s * 2.0).round(),
                s.description
            );
        }
        for (name, description) in serial_tables::TABLES {
            println!("{name:<18} {:>4}    {description}", "");
        }
        println!(
            "{:<18} {:>4}    bentson-full's rows of one speed and MTU (1-4 lines), e.g. bentson:115200:900",
            serial_tables::BENTSON_ROWS,
            ""
        );
        println!(
            "{:<18} {:>4}    seeded cases of faults under a checked transfer (--cases N --seed S; docs/reliability.md)",
            "fault-matrix", ""
        );
        for (name, secs, description) in soak::LIST.iter().chain(ether::LIST) {
            println!("{name:<18} {secs:>4} s  {description}");
        }
        return Ok(());
    }
    let names: Vec<String> = if args.scenarios.is_empty() {
        BUILTIN
            .iter()
            .chain(SHARE_BUILTIN)
            .map(|(n, _)| n.to_string())
            .filter(|n| n != "demo")
            .collect()
    } else {
        args.scenarios.clone()
    };
    let (mut bond, mut share, mut tables) = (Vec::new(), Vec::new(), Vec::new());
    for n in &names {
        if let Some(t) = serial_tables::load(n) {
            tables.push(t);
            continue;
        }
        match ShareScenario::load(n)? {
            Some(s) => share.push(s),
            None => {
                let mut s = Scenario::load(n)?;
                for kv in &args.bond_keys {
                    s.set_bond_key(kv)?;
                }
                bond.push(s);
            }
        }
    }
    preflight()?;
    let mut opts = RunOptions::current()?;
    opts.duration = args.duration;
    opts.monitor = args.monitor;
    let results = if bond.is_empty() {
        Vec::new()
    } else {
        run_all(&bond, &opts, !args.quiet)?
    };
    let shared = share::run_all(&share, &opts.braid, &args.out, args.monitor)?;
    let mut serial = Vec::new();
    if !tables.is_empty() {
        netns::install_signal_handler();
    }
    for t in &tables {
        serial.push(
            serde_json::json!({ "table": t.name, "rows": serial_tables::run(t, &opts.braid)? }),
        );
    }
    if let Some(path) = &args.json {
        let all = serde_json::json!({ "bond": results, "share": shared, "serial": serial });
        let text = serde_json::to_string_pretty(&all)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Run `braid demo`: the default lab scenario.
pub fn demo() -> Result<()> {
    let sc = Scenario::load("demo")?;
    preflight()?;
    eprintln!(
        "braid demo: two network namespaces joined by {} paths ({}), braid on both ends, iperf3 through the bond.",
        sc.paths.len(),
        sc.paths
            .iter()
            .map(|p| p.rate_mbit.map_or_else(|| "unshaped".to_string(), |r| format!("{r} Mbit/s")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    run_all(&[sc], &RunOptions::current()?, true)?;
    Ok(())
}

/// Run scenarios one after the other, print the table; Ctrl-C cleans up.
pub fn run_all(
    scenarios: &[Scenario],
    opts: &RunOptions,
    show_progress: bool,
) -> Result<Vec<ScenarioResult>> {
    netns::install_signal_handler();
    let progress = Progress::new(show_progress);
    let mut results = Vec::new();
    for (i, sc) in scenarios.iter().enumerate() {
        progress.set_count(i + 1, scenarios.len());
        let r = run::run_scenario(sc, opts, &progress);
        progress.clear();
        match r {
            Ok(r) => results.push(r),
            Err(e) => {
                if !results.is_empty() {
                    println!("{}", report::table(&results));
                }
                return Err(e);
            }
        }
    }
    println!("{}", report::table(&results));
    Ok(results)
}

/// Check that we can run the lab: root, `ip`, `tc`, `iperf3`, `/dev/net/tun`. Nothing is
/// installed here: `scripts/setup --demo` (or `scripts/demo`) installs what is missing.
pub fn preflight() -> Result<()> {
    preflight_netns()?;
    preflight_iperf()
}

/// Check that we can make namespaces and TUN devices: root, `ip`, `tc`, `/dev/net/tun`.
pub fn preflight_netns() -> Result<()> {
    if !netns::is_root() {
        bail!(
            "the lab creates network namespaces and TUN devices: run it as root (sudo braid ...)"
        );
    }
    for tool in ["ip", "tc"] {
        if netns::which(tool).is_none() {
            bail!("`{tool}` not found: install iproute2 (apt-get install -y iproute2)");
        }
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        bail!("/dev/net/tun is missing: load the tun module (modprobe tun)");
    }
    Ok(())
}

/// Check that `iperf3` is there.
fn preflight_iperf() -> Result<()> {
    if netns::which("iperf3").is_none() {
        bail!("`iperf3` not found: install it (apt-get install -y iperf3; from a checkout, scripts/setup --demo installs what the lab uses)");
    }
    Ok(())
}

/// The `braid` program the lab runs in its namespaces (daemons, `braid status`): the one
/// beside this executable, as `cargo build` and the .deb install them, else `braid` on
/// `PATH`.
pub fn braid_exe() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding the lab's own executable")?;
    let beside = exe.parent().map(|dir| dir.join("braid"));
    if let Some(b) = beside.as_deref().filter(|b| b.is_file()) {
        return Ok(b.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("braid"))
        .find(|b| b.is_file())
        .with_context(|| {
            format!(
                "the `braid` program is neither beside {} nor on PATH: build it (cargo build --release -p braid) or install it",
                exe.display()
            )
        })
}
