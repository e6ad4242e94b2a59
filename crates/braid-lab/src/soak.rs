//! Soak and overload runs, by hand (minutes each, not in CI): `braid lab soak-flaps`,
//! `soak-overload` and `soak-junk-rekey`. `docs/reliability.md` says what each shows.
use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde_json::Value;

use super::matrix::case::{JunkShape, Rng};
use super::matrix::faults;
use super::matrix::probe::Probe;
use super::matrix::runner::wait_transfer;
use super::matrix::transfer::{Outcome, Transfer};
use super::netns::{self, now, Topology};
use super::run::{Daemons, UP_TIMEOUT};
use super::scenario::Scenario;
use super::share::{self, ShareScenario};
use super::LabArgs;

/// The soak runs: (name, about how long in seconds, what it shows).
pub const LIST: &[(&str, u64, &str)] = &[
    (
        "soak-flaps",
        200,
        "100 path flaps under one TCP flow checked byte for byte: no reset",
    ),
    (
        "soak-overload",
        130,
        "3x the bond's capacity offered for 60 s through [shape]: shares vs theory, peak RSS",
    ),
    (
        "soak-junk-rekey",
        130,
        "rekeys every 5 s for 60 s, then 60 s more under 20 kpps of junk (02 01 ...) at a path port",
    ),
];

/// The share scenario `soak-overload` runs.
const OVERLOAD: &str = include_str!("../../../scenarios/soak-overload.toml");

/// How much a daemon's peak RSS may exceed its RSS once up in `soak-overload`, KiB (its
/// queues are bounded: the shaper's leaves, the paths' queues, the reorder buffer).
const MEMORY_GROWTH_KIB: u64 = 32 << 10;
/// Flaps in `soak-flaps`.
const FLAPS: u32 = 100;
/// Junk datagrams per second in `soak-junk-rekey`.
const JUNK_PPS: u64 = 20_000;
/// `rekey_after_s` in `soak-junk-rekey` (the core's floor: one initiation per 5 s).
const REKEY_S: u64 = 5;

/// True when `name` is a soak run.
pub fn is_soak(name: &str) -> bool {
    LIST.iter().any(|(n, _, _)| *n == name)
}

/// Run soak `name`; an error if it missed its target.
pub fn main(name: &str, args: &LabArgs) -> Result<()> {
    netns::install_signal_handler();
    let braid = crate::braid_exe()?;
    let seed = args.seed.unwrap_or(1);
    match name {
        "soak-flaps" => flaps(&braid, seed),
        "soak-overload" => overload(&braid, &args.out, args.duration),
        "soak-junk-rekey" => junk_rekey(&braid, args.duration.unwrap_or(60)),
        _ => bail!("no soak run {name}"),
    }
}

/// Namespaces with `paths` links and daemons from a bond scenario's text (`[bond]` keys
/// and `[[path]]`s), every path up.
fn bring_up(braid: &Path, bond_and_paths: &str, paths: usize) -> Result<(Topology, Daemons)> {
    let sc = Scenario::parse(&format!(
        "name = \"soak\"\nbaseline_s = 0\n{bond_and_paths}\n[[test]]\n"
    ))?;
    let topo = Topology::new(paths)?;
    let cfg_a = sc.daemon_config(true, &topo.links, None)?;
    let cfg_b = sc.daemon_config(false, &topo.links, None)?;
    let mut d = Daemons::start(braid, &topo, "soak", &cfg_a, &cfg_b)?;
    let names: Vec<String> = (0..paths).map(|i| format!("p{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    d.wait_paths_up(&names, UP_TIMEOUT)?;
    Ok((topo, d))
}

/// Longest gap between probe echoes from `from_ms` to `to_ms` (the ends count as echoes),
/// ms.
fn longest_gap(arrivals: &[f64], from_ms: f64, to_ms: f64) -> f64 {
    let mut prev = from_ms;
    let mut longest = 0.0_f64;
    for &t in arrivals
        .iter()
        .filter(|&&t| t > from_ms && t < to_ms)
        .chain([to_ms].iter())
    {
        longest = longest.max(t - prev);
        prev = t;
    }
    longest
}

fn mbit(bytes: u64, secs: f64) -> f64 {
    bytes as f64 * 8.0 / secs.max(1e-3) / 1e6
}

/// 100 path flaps (one path at a time, of three, 0.3-1.5 s down, then 1-2 s to come back)
/// under one TCP flow, checked byte for byte.
fn flaps(braid: &Path, seed: u64) -> Result<()> {
    let mut bond = String::from("[bond]\nscheduler = \"adaptive\"\n");
    for (i, delay) in [5, 10, 20].iter().enumerate() {
        bond += &format!(
            "[[path]]\nname = \"p{i}\"\nemulate = {{ rate_bps = 10000000, delay_ms = {delay}.0 }}\n"
        );
    }
    let (topo, d) = bring_up(braid, &bond, 3)?;
    let t0 = now();
    let probe = Probe::start(&topo, t0)?;
    probe.wait_echo(Duration::from_secs(10))?;
    let from_ms = probe.elapsed_ms();
    let t = Transfer::start(&topo, 5001, seed, u64::MAX / 2, Duration::from_secs(5))?;
    let mut rng = Rng::new(seed);
    let mut done = 0;
    let started = now();
    for k in 0..FLAPS {
        if t.receiver_finished() {
            break;
        }
        let path = (k % 3) as usize;
        eprint!(
            "\rsoak-flaps: flap {}/{FLAPS} (p{path}), {:.1} MiB through",
            k + 1,
            t.verified() as f64 / (1 << 20) as f64
        );
        topo.set_link(path, false)?;
        let slept = netns::sleep(Duration::from_millis(rng.range(300, 1500)));
        topo.set_link(path, true)?;
        slept?;
        done += 1;
        netns::sleep(Duration::from_millis(rng.range(1000, 2000)))?;
    }
    eprintln!();
    t.stop_sending();
    let secs = now().duration_since(started).as_secs_f64();
    let bytes = t.verified();
    let outcome = wait_transfer(t, Duration::from_secs(30))?;
    let end_ms = probe.elapsed_ms();
    let arrivals = probe.stop()?;
    let downs: Vec<String> = super::run::paths_of(&d.status_a()?)
        .iter()
        .map(|p| format!("{} {}", p.name, p.downs))
        .collect();
    println!(
        "soak-flaps: {done} flaps of 3 paths (10 Mbit/s, 5/10/20 ms) under one TCP flow in {secs:.0} s: {:.1} MiB checked byte for byte, {:.2} Mbit/s; longest probe gap {:.0} ms; downs seen by a: {}",
        bytes as f64 / (1 << 20) as f64,
        mbit(bytes, secs),
        longest_gap(&arrivals, from_ms, end_ms),
        downs.join(", ")
    );
    match outcome {
        Outcome::Complete if done == FLAPS => {
            println!("soak-flaps: the connection survived every flap (no reset)");
            Ok(())
        }
        Outcome::Complete => bail!("only {done} of {FLAPS} flaps were made"),
        Outcome::Corrupt(at) => bail!("byte {at} of the stream differs from what was sent"),
        Outcome::Died(why) => bail!("the TCP connection died after {done} flaps: {why}"),
    }
}

/// `scenarios/soak-overload.toml` (kernel HTB, then braid), with braid's peak memory.
fn overload(braid: &Path, out: &Path, duration: Option<u64>) -> Result<()> {
    let mut sc = ShareScenario::parse(OVERLOAD)?;
    if let Some(s) = duration {
        let scale = s as f64 / sc.duration_s;
        sc.duration_s = s as f64;
        for p in &mut sc.phases {
            p.from_s *= scale;
            p.to_s *= scale;
        }
    }
    let r = share::run_all(std::slice::from_ref(&sc), braid, out, None)?;
    let r = r.first().ok_or_else(|| anyhow!("no result"))?;
    let mut missed = r.missed.len();
    for (side, m) in ["a", "b"]
        .iter()
        .zip(r.braid_memory_kib.unwrap_or_default())
    {
        if m.peak > m.start + MEMORY_GROWTH_KIB {
            println!(
                "  MISSED: daemon {side}'s peak RSS {:.1} MiB is more than {} MiB above its {:.1} MiB once up",
                m.peak as f64 / 1024.0,
                MEMORY_GROWTH_KIB / 1024,
                m.start as f64 / 1024.0
            );
            missed += 1;
        }
    }
    if missed > 0 {
        bail!("soak-overload missed {missed} target(s) (above)");
    }
    Ok(())
}

/// The sealer's counters `soak-junk-rekey` follows.
#[derive(Clone, Copy, Debug, Default)]
struct Sealer {
    /// Handshakes this end initiated that completed (one per new session of both ends).
    completed: u64,
    /// Sessions this end made (as initiator or responder).
    created: u64,
    /// Datagrams the sealer refused (`rejected_total`) or dropped for the handshake
    /// budget (`handshake_flood_dropped`).
    refused: u64,
}

impl std::ops::Sub for Sealer {
    type Output = Sealer;
    fn sub(self, o: Sealer) -> Sealer {
        Sealer {
            completed: self.completed.saturating_sub(o.completed),
            created: self.created.saturating_sub(o.created),
            refused: self.refused.saturating_sub(o.refused),
        }
    }
}

fn sealer(v: &Value) -> Sealer {
    let e = &v["encryption"];
    let n = |x: &Value| x.as_u64().unwrap_or(0);
    Sealer {
        completed: n(&e["events"]["handshakes_completed"]),
        created: n(&e["events"]["sessions_created"]),
        refused: n(&e["rejected_total"]) + n(&e["counters"]["handshake_flood_dropped"]),
    }
}

/// A sealed bond rekeying every [`REKEY_S`] s with a TCP flow and probes through it:
/// `secs` without junk (the baseline), then `secs` of [`JUNK_PPS`] datagrams starting
/// `02 01` at side b's p0 port. The flood must not cost rekeys.
fn junk_rekey(braid: &Path, secs: u64) -> Result<()> {
    let mut bond = format!("[bond]\nscheduler = \"adaptive\"\nrekey_after_s = {REKEY_S}\n");
    for i in 0..2 {
        bond += &format!(
            "[[path]]\nname = \"p{i}\"\nemulate = {{ rate_bps = 10000000, delay_ms = 5.0 }}\n"
        );
    }
    let (topo, d) = bring_up(braid, &bond, 2)?;
    let probe = Probe::start(&topo, now())?;
    probe.wait_echo(Duration::from_secs(10))?;
    let t = Transfer::start(&topo, 5001, 7, u64::MAX / 2, Duration::from_secs(5))?;
    let base = rekey_phase(&d, &probe, secs, None)?;
    let link = &topo.links[0];
    let flood = rekey_phase(
        &d,
        &probe,
        secs,
        Some((&topo.ns_a, link.addr_a, link.addr_b)),
    )?;
    t.stop_sending();
    let bytes = t.verified();
    let outcome = wait_transfer(t, Duration::from_secs(30))?;
    let arrivals = probe.stop()?;
    let expected = secs / REKEY_S;
    for (name, p) in [("without junk", &base), ("junk flood", &flood)] {
        println!(
            "soak-junk-rekey: {name}: {} s, {} junk datagrams ({:.0}/s) at b's p0; sessions renewed {} times (handshakes completed by a {}, by b {}; a rekey per {REKEY_S} s would be {expected}); sessions made by a {}, by b {}; datagrams b refused {}; longest probe gap {:.0} ms",
            secs,
            p.sent,
            p.sent as f64 / p.secs.max(1e-3),
            p.renewed(),
            p.a.completed,
            p.b.completed,
            p.a.created,
            p.b.created,
            p.b.refused,
            longest_gap(&arrivals, p.from_ms, p.to_ms)
        );
    }
    println!(
        "soak-junk-rekey: one TCP flow through both: {:.1} MiB checked byte for byte, {:.2} Mbit/s",
        bytes as f64 / (1 << 20) as f64,
        mbit(bytes, base.secs + flood.secs)
    );
    let mut missed = Vec::new();
    let (with, without) = (flood.renewed(), base.renewed());
    if with + 1 < without {
        missed.push(format!(
            "the session was renewed {with} times under the flood, {without} times without"
        ));
    }
    match outcome {
        Outcome::Complete => {}
        Outcome::Corrupt(at) => missed.push(format!("byte {at} of the TCP stream differs")),
        Outcome::Died(why) => missed.push(format!("the TCP flow died: {why}")),
    }
    if missed.is_empty() {
        println!("soak-junk-rekey: the flood cost no rekeys");
        Ok(())
    } else {
        bail!("soak-junk-rekey: {}", missed.join("; "))
    }
}

/// What one phase of `soak-junk-rekey` saw.
struct RekeyPhase {
    /// Its length, s.
    secs: f64,
    /// Junk datagrams sent.
    sent: u64,
    /// a's sealer counters over the phase.
    a: Sealer,
    /// b's.
    b: Sealer,
    /// Its span on the probe's clock, ms.
    from_ms: f64,
    to_ms: f64,
}

impl RekeyPhase {
    /// Sessions renewed: handshakes completed, by either end.
    fn renewed(&self) -> u64 {
        self.a.completed + self.b.completed
    }
}

/// Run `secs` with, if `junk` is (namespace, source, destination), a flood from there to
/// the destination's port 7000; the sessions made meanwhile.
fn rekey_phase(
    d: &Daemons,
    probe: &Probe,
    secs: u64,
    junk: Option<(&str, std::net::Ipv4Addr, std::net::Ipv4Addr)>,
) -> Result<RekeyPhase> {
    let (a0, b0) = (sealer(&d.status_a()?), sealer(&d.status_b()?));
    let from_ms = probe.elapsed_ms();
    let started = now();
    let flood = match junk {
        Some((ns, src, dst)) => Some(netns::spawn_in_netns(ns, move || {
            faults::junk(
                SocketAddrV4::new(src, 0),
                SocketAddrV4::new(dst, 7000),
                JUNK_PPS,
                Duration::from_secs(secs),
                JunkShape::Handshake,
                secs,
            )
        })?),
        None => None,
    };
    let label = if junk.is_some() {
        "junk flood"
    } else {
        "without junk"
    };
    let mut line = Vec::new();
    let end = started + Duration::from_secs(secs);
    while now() < end || flood.as_ref().is_some_and(|f| !f.is_finished()) {
        netns::sleep(Duration::from_secs(5).min(Duration::from_secs(secs)))?;
        if let (Ok(a), Ok(b)) = (d.status_a(), d.status_b()) {
            let new = (sealer(&a) - a0).completed + (sealer(&b) - b0).completed;
            line.push(format!(
                "{:.0}s:{new}",
                now().duration_since(started).as_secs_f64()
            ));
            eprint!(
                "\rsoak-junk-rekey: {label}: new sessions {}",
                line.join(" ")
            );
        }
    }
    eprintln!();
    let sent = match flood {
        Some(f) => f.join().map_err(|_| anyhow!("junk sender panicked"))??,
        None => 0,
    };
    let (a1, b1) = (sealer(&d.status_a()?), sealer(&d.status_b()?));
    Ok(RekeyPhase {
        secs: now().duration_since(started).as_secs_f64(),
        sent,
        a: a1 - a0,
        b: b1 - b0,
        from_ms,
        to_ms: probe.elapsed_ms(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overload_scenario_offers_three_times_the_bond() {
        let sc = ShareScenario::parse(OVERLOAD).unwrap();
        let capacity: f64 = sc.path_mbit.iter().sum();
        let offered: f64 = sc
            .users
            .iter()
            .map(|u| u.schedule.iter().map(|s| s.1).fold(0.0, f64::max))
            .sum();
        assert!(
            (offered / capacity - 3.0).abs() < 0.01,
            "{offered} / {capacity}"
        );
        assert!(sc.link_mbit < capacity, "the shaper is the bottleneck");
        assert_eq!(sc.duration_s, 60.0);
    }

    #[test]
    fn gaps() {
        assert_eq!(
            longest_gap(&[100.0, 150.0, 900.0, 950.0], 0.0, 1000.0),
            750.0
        );
        assert_eq!(longest_gap(&[100.0, 150.0], 120.0, 160.0), 30.0);
        assert_eq!(longest_gap(&[100.0, 150.0], 120.0, 400.0), 250.0);
    }
}
