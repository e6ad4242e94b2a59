//! Running one case: namespaces and daemons as the case says, a probe stream and a checked
//! TCP transfer through the bond, the faults at their times, then the checks: the transfer
//! complete (or, across a restart, a fresh one after reconnecting), every path up again,
//! a fresh transfer after the faults, each fault's outage, the status invariants, live
//! daemons and no panic in their logs.
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::case::{Case, Rng, Side};
use super::faults::{self, Ctx, Injected};
use super::invariants;
use super::probe::{self, Probe};
use super::transfer::{Outcome, Transfer};
use crate::netns::{self, now, Topology};
use crate::run::{Daemons, UP_TIMEOUT};

/// A transfer that makes no progress this long is dead.
pub const STALL: Duration = Duration::from_secs(10);
/// After a restart killed the connection, a new one must be made within this.
pub const RECONNECT_WITHIN: Duration = Duration::from_secs(10);
/// The longest wait for data through the bond after a fault before the next one.
const RECOVERY_WAIT: Duration = Duration::from_secs(10);
/// After the last fault, every path must be up again within this.
const PATHS_BACK_WITHIN: Duration = Duration::from_secs(10);
/// The transfer made after the faults, bytes.
const AFTER_SIZE: u64 = 256 << 10;

/// How the cases run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The braid executable under test.
    pub braid: PathBuf,
    /// Inject reload faults (SIGHUP); else they are skipped.
    pub reload: bool,
}

/// One injected fault and what it cost.
#[derive(Clone, Debug, Serialize)]
pub struct FaultResult {
    /// Kind name.
    pub kind: &'static str,
    /// What exactly.
    pub what: String,
    /// When, seconds after the transfer started.
    pub at_s: f64,
    /// Not injected (reload faults off).
    pub skipped: bool,
    /// Longest time without data through the bond from the fault until data flowed again
    /// after it, ms; None: it did not flow again within the case.
    pub outage_ms: Option<f64>,
    /// For a restart: from the new daemon's start to the first data through the bond, ms.
    pub after_start_ms: Option<f64>,
    /// For a fault that did not recover: how long the bond was out at least, ms.
    pub out_at_least_ms: Option<f64>,
    /// It came after a fault the bond had not recovered from: its outage is that one's.
    pub masked: bool,
}

/// One case's result.
#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    /// Its seed.
    pub seed: u64,
    /// What it was.
    pub summary: String,
    /// The faults.
    pub faults: Vec<FaultResult>,
    /// Bytes received and compared with what was sent.
    pub bytes_checked: u64,
    /// Fresh connections made after a restart killed one.
    pub reconnects: u32,
    /// What went wrong (empty: passed).
    pub failures: Vec<String>,
    /// Wall time, s.
    pub seconds: f64,
}

/// Run one case. An `Err` is the lab's own trouble (a namespace that cannot be made, an
/// interrupt); what braid did wrong is in [`CaseResult::failures`].
pub fn run_case(case: &Case, opts: &Options) -> Result<CaseResult> {
    let started = now();
    let mut r = CaseResult {
        seed: case.seed,
        summary: case.summary(),
        faults: Vec::new(),
        bytes_checked: 0,
        reconnects: 0,
        failures: Vec::new(),
        seconds: 0.0,
    };
    let topo = Topology::new(case.paths.len())?;
    let (cfg_a, cfg_b) = case.configs(&topo.links)?;
    let mut d = Daemons::start(&opts.braid, &topo, "m", &cfg_a, &cfg_b)?;
    let names: Vec<String> = (0..case.paths.len()).map(|i| format!("p{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    if let Err(e) = d.wait_paths_up(&names, UP_TIMEOUT) {
        netns::check_interrupted()?;
        r.failures.push(format!("the bond did not come up: {e:#}"));
        return Ok(finish(r, started));
    }
    let t0 = now();
    let probe = Probe::start(&topo, t0)?;
    if !probe.wait_echo(Duration::from_secs(10))? {
        r.failures
            .push("no probe through the bond within 10 s of every path being up".into());
        return Ok(finish(r, started));
    }
    let transfer_start = probe.elapsed_ms();
    let transfer = Transfer::start(&topo, 5001, case.seed, case.size, Duration::from_secs(5))?;

    let mut rng = Rng::new(case.seed ^ 0x6a75_6e6b);
    let mut injected: Vec<Injected> = Vec::new();
    for f in &case.faults {
        let due = transfer_start + f.at_ms as f64;
        let wait = due - probe.elapsed_ms();
        if wait > 0.0 {
            netns::sleep(Duration::from_secs_f64(wait / 1000.0))?;
        }
        let mut ctx = Ctx {
            topo: &topo,
            daemons: &mut d,
            t0,
            reload: opts.reload,
            rng: &mut rng,
        };
        injected.push(faults::inject(&mut ctx, &f.kind)?);
        // The next fault waits until data flows again (bounded): so that each outage is
        // its own fault's, and a chain of outages does not stretch TCP's retransmission
        // backoff (the transfer has moved on, or is over, before the next one).
        let moved = transfer.verified();
        let end = now() + RECOVERY_WAIT;
        if probe.wait_echo(RECOVERY_WAIT)? {
            while now() < end && !transfer.receiver_finished() && transfer.verified() == moved {
                netns::sleep(Duration::from_millis(10))?;
            }
        }
    }
    let restarted = injected.iter().any(|f| f.restarted.is_some());
    // A side's receive counters cover its whole run unless it was reloaded (paths may be
    // re-created) or its peer restarted (the bond forgets the peer's previous run, and
    // with it the paths' receive counters).
    let counters_whole = |s: Side| {
        let peer = if s == Side::A { Side::B } else { Side::A };
        !injected
            .iter()
            .any(|f| f.reloaded == Some(s) || f.restarted == Some(peer))
    };
    let reloaded = injected.iter().any(|f| f.reloaded.is_some());
    let deadline = Duration::from_millis(4 * case.expected_ms()) + Duration::from_secs(30);
    let outcome = wait_transfer(transfer, deadline)?;
    // What the daemons said when the transfer gave up, for the failure message.
    let outcome = match outcome {
        Outcome::Died(why) => Outcome::Died(format!("{why}\n{}", snapshot(&d))),
        o => o,
    };
    let mut transfer_ok = false;
    match outcome {
        Outcome::Complete => {
            r.bytes_checked += case.size;
            transfer_ok = true;
        }
        Outcome::Corrupt(at) => r.failures.push(format!(
            "byte {at} of the {} byte transfer differs from what was sent",
            case.size
        )),
        Outcome::Died(why) if restarted => {
            // Across a restart the connection may die: a new one must be made, and carry
            // a whole transfer.
            r.reconnects += 1;
            let t = Transfer::start(
                &topo,
                5002,
                case.seed.rotate_left(17),
                case.size,
                RECONNECT_WITHIN,
            )?;
            match wait_transfer(t, deadline)? {
                Outcome::Complete => {
                    r.bytes_checked += case.size;
                    transfer_ok = true;
                }
                Outcome::Corrupt(at) => r.failures.push(format!(
                    "after reconnecting: byte {at} of the fresh transfer differs from what was sent"
                )),
                Outcome::Died(again) => r.failures.push(format!(
                    "the connection died across a restart ({why}); the fresh one made after it failed too ({again}; bounds: {} s to connect, {} s without progress)",
                    RECONNECT_WITHIN.as_secs(),
                    STALL.as_secs()
                )),
            }
        }
        Outcome::Died(why) => r
            .failures
            .push(format!("the TCP connection died without a restart: {why}")),
    }
    for f in &injected {
        r.failures
            .extend(f.failures.iter().map(|m| format!("{}: {m}", f.what)));
    }
    if let Err(e) = d.wait_paths_up(&names, PATHS_BACK_WITHIN) {
        netns::check_interrupted()?;
        r.failures.push(format!(
            "paths not all up {PATHS_BACK_WITHIN:?} after the last fault: {}",
            first_line(&format!("{e:#}"))
        ));
    }
    if transfer_ok {
        let t = Transfer::start(&topo, 5003, !case.seed, AFTER_SIZE, RECONNECT_WITHIN)?;
        match wait_transfer(t, Duration::from_secs(30))? {
            Outcome::Complete => r.bytes_checked += AFTER_SIZE,
            Outcome::Corrupt(at) => r.failures.push(format!(
                "after the faults: byte {at} of a fresh transfer differs from what was sent"
            )),
            Outcome::Died(why) => r.failures.push(format!(
                "after the faults, a fresh transfer did not complete: {why}"
            )),
        }
    }
    netns::sleep(Duration::from_millis(300))?;
    let end_ms = probe.elapsed_ms();
    let arrivals = probe.stop()?;
    for f in &injected {
        let mut fr = fault_result(f, &arrivals, transfer_start, end_ms);
        // After a fault the bond did not recover from, later ones cannot be judged.
        fr.masked = r.faults.iter().any(|x| x.out_at_least_ms.is_some());
        if let (Some(out), false) = (fr.out_at_least_ms, fr.masked) {
            r.failures.push(format!(
                "{} (at {:.1} s): no data through the bond afterwards; out for at least {:.1} s, until the case ended",
                f.what,
                (f.start_ms - transfer_start) / 1000.0,
                out / 1000.0
            ));
        }
        r.faults.push(fr);
    }
    check_daemons(
        &mut d,
        case.sealed,
        restarted || reloaded,
        &counters_whole,
        &mut r,
    );
    Ok(finish(r, started))
}

/// Both daemons' status, one line each, indented (for failure messages).
fn snapshot(d: &Daemons) -> String {
    let line = |v: Result<serde_json::Value>| match v {
        Ok(v) => invariants::status_line(&v),
        Err(e) => format!("no status: {e:#}"),
    };
    format!(
        "        status a: {}\n        status b: {}",
        line(d.status_a()),
        line(d.status_b())
    )
}

fn finish(mut r: CaseResult, started: std::time::Instant) -> CaseResult {
    r.seconds = now().duration_since(started).as_secs_f64();
    r
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// Wait for a transfer to end: complete, failed, no progress for [`STALL`] (then it is
/// aborted) or past `deadline`.
pub fn wait_transfer(t: Transfer, deadline: Duration) -> Result<Outcome> {
    let end = now() + deadline;
    loop {
        if netns::interrupted() {
            t.abort();
            netns::check_interrupted()?;
        }
        if t.receiver_finished() {
            return Ok(t.finish());
        }
        let idle = t.idle();
        if idle >= STALL || now() >= end {
            let (got, size, connected) = (t.verified(), t.size, t.connected());
            t.abort();
            let _ = t.finish();
            let why = if !connected {
                format!("no connection within {:.0} s", idle.as_secs_f64())
            } else if idle >= STALL {
                format!("no progress for {:.0} s", idle.as_secs_f64())
            } else {
                format!("not done within {:.0} s", deadline.as_secs_f64())
            };
            return Ok(Outcome::Died(format!("{why} after {got} of {size} bytes")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn fault_result(f: &Injected, arrivals: &[f64], transfer_start: f64, end_ms: f64) -> FaultResult {
    let outage = if f.skipped {
        None
    } else {
        probe::outage(arrivals, f.start_ms, f.end_ms, end_ms)
    };
    let after_start = f.restarted.and_then(|_| {
        arrivals
            .iter()
            .find(|&&t| t > f.end_ms)
            .map(|t| t - f.end_ms)
    });
    FaultResult {
        kind: f.kind,
        what: f.what.clone(),
        at_s: (f.start_ms - transfer_start) / 1000.0,
        skipped: f.skipped,
        outage_ms: outage,
        after_start_ms: after_start,
        out_at_least_ms: (!f.skipped && outage.is_none()).then_some(end_ms - f.start_ms),
        masked: false,
    }
}

/// Both daemons alive, their status invariants, no panics in any log.
fn check_daemons(
    d: &mut Daemons,
    sealed: bool,
    restarted_or_reloaded: bool,
    counters_whole: &dyn Fn(Side) -> bool,
    r: &mut CaseResult,
) {
    for (side, name) in [(true, "a"), (false, "b")] {
        let p = d.side(side);
        if let Some(st) = p.exited() {
            r.failures
                .push(format!("daemon {name} exited ({st}):\n{}", p.log_tail()));
        }
    }
    // b, then a, then b again: what one end received was sent before it was sampled.
    let (b1, a, b2) = (d.status_b(), d.status_a(), d.status_b());
    let mut got = |v: Result<serde_json::Value>, name: &str| match v {
        Ok(v) => Some(v),
        Err(e) => {
            r.failures
                .push(format!("braid status on {name} failed: {e:#}"));
            None
        }
    };
    let (b1, a, b2) = (got(b1, "b"), got(a, "a"), got(b2, "b"));
    if let Some(v) = &a {
        r.failures.extend(invariants::check_one(
            v,
            "a",
            sealed,
            counters_whole(Side::A),
        ));
    }
    if let Some(v) = &b2 {
        r.failures.extend(invariants::check_one(
            v,
            "b",
            sealed,
            counters_whole(Side::B),
        ));
    }
    if !restarted_or_reloaded {
        if let (Some(b1), Some(a), Some(b2)) = (&b1, &a, &b2) {
            r.failures.extend(invariants::check_pair(b1, "b", a, "a"));
            r.failures.extend(invariants::check_pair(a, "a", b2, "b"));
        }
    }
    for log in d.logs() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for l in invariants::panics(&text) {
            r.failures.push(format!("{}: {l}", short(log)));
        }
    }
}

fn short(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
}
