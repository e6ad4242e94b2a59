//! The bonding seeds' experiments, by hand (minutes each, not in CI):
//!
//! - `seed002-fig2`: LBNL's Figure 2, aggregate bandwidth against the number of
//!   simultaneous TCP connections (iperf3 -P 1..16) between two hosts with two bonded
//!   members each, for the `layer2`, `layer3+4` and `gabler` hashes (balance-xor);
//!   target: layer3+4 ≥ 1.8 × one member from 4 connections on, layer2 one member.
//! - `seed004-netpipe`: the Boise State notes' NetPIPE runs, a master bonded with three
//!   members into a switch's static EtherChannel (OVS, lacp=off) and 1-3 nodes on access
//!   ports, two-way and streaming, before (one plain member) and after (three bonded):
//!   throughput and latency against message size.
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use super::braid::BondSpec;
use super::netpipe::{self, Point};
use super::ovs::Lacp;
use super::runs::{goodput, shaped, spec, Opts};
use super::topo::{client_addr, Bonder, Far, Topo, TopoSpec};
use super::xyplot::{self, Chart, Line};

/// One hash's sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Sweep {
    /// The hash (or "one member").
    pub label: String,
    /// (connections, Mbit/s).
    pub points: Vec<(f64, f64)>,
}

/// The connection counts of Figure 2.
pub const CONNECTIONS: std::ops::RangeInclusive<u32> = 1..=16;

/// Run seed 002's Figure 2; prints a table, writes `<out>/seed002-fig2.svg` and `.json`.
pub fn seed002(o: &Opts, out: &Path) -> Result<Vec<Sweep>> {
    let mut sweeps = Vec::new();
    let counts: Vec<u32> = match std::env::var("BRAID_LAB_CONNECTIONS") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => CONNECTIONS.collect(),
    };
    // One member, no bond: the reference line.
    let mut runs: Vec<(String, Bonder, BondSpec, usize)> = vec![(
        "one member".into(),
        Bonder::Plain,
        spec("xor", Some("layer2")),
        1,
    )];
    let ovs = matches!(o.bonder, Bonder::Ovs);
    for hash in ["layer2", "layer3+4", "gabler"] {
        if ovs && hash == "gabler" {
            continue; // Open vSwitch has no such hash
        }
        // Open vSwitch hashes by L4 only with LACP (balance-tcp); braid as bonding: xor.
        let sched = if ovs { "802.3ad" } else { "xor" };
        runs.push((hash.into(), o.bonder.clone(), spec(sched, Some(hash)), 2));
    }
    println!(
        "seed002-fig2 ({}): 2 members of {} Mbit/s back to back, iperf3 -P N for {} s each",
        o.bonder.name(),
        o.rate_mbit,
        o.secs
    );
    for (label, bonder, bond, members) in runs {
        let t = Topo::new(shaped(
            Some(o.rate_mbit),
            members,
            bonder,
            Far::BackToBack,
            bond,
        ))?;
        let (ns, addr) = t.peer();
        let mut points = Vec::new();
        for &n in &counts {
            let g = goodput(&t.host, &ns, addr, n, o.secs)?;
            println!("  {label:<11} {n:>2} connections: {g:7.1} Mbit/s");
            points.push((f64::from(n), g));
        }
        sweeps.push(Sweep { label, points });
    }
    let one = sweeps
        .first()
        .map_or(0.0, |s| s.points.iter().map(|p| p.1).fold(0.0, f64::max));
    println!(
        "\n  connections  {}",
        sweeps
            .iter()
            .map(|s| format!("{:>11}", s.label))
            .collect::<String>()
    );
    for (i, n) in counts.iter().enumerate() {
        print!("  {n:>11}  ");
        for s in &sweeps {
            print!("{:>11.1}", s.points.get(i).map_or(f64::NAN, |p| p.1));
        }
        println!();
    }
    let mut missed = Vec::new();
    for s in &sweeps {
        let ratio = |p: &(f64, f64)| p.1 / one.max(1e-9);
        if s.label == "layer3+4" {
            if let Some(p) = s.points.iter().find(|p| p.0 >= 4.0 && ratio(p) < 1.8) {
                missed.push(format!(
                    "layer3+4 at {} connections: {:.2} x one member",
                    p.0,
                    ratio(p)
                ));
            }
        }
        if s.label == "layer2" {
            if let Some(p) = s.points.iter().find(|p| ratio(p) > 1.1) {
                missed.push(format!(
                    "layer2 at {} connections: {:.2} x one member",
                    p.0,
                    ratio(p)
                ));
            }
        }
    }
    println!(
        "  targets (layer3+4 >= 1.8 x one member from 4 connections on; layer2 = one member): {}",
        if missed.is_empty() {
            "ok".to_string()
        } else {
            missed.join("; ")
        }
    );
    let lines: Vec<Line<'_>> = sweeps
        .iter()
        .map(|s| Line {
            label: &s.label,
            points: &s.points,
            dashed: s.label == "one member",
        })
        .collect();
    let title = format!(
        "seed 002 Figure 2: 2 x {} Mbit/s members, {} bond",
        o.rate_mbit,
        o.bonder.name()
    );
    let svg = xyplot::svg(&Chart {
        title: &title,
        x_label: "simultaneous TCP connections",
        y_label: "aggregate Mbit/s",
        log_x: false,
        log_y: false,
        lines,
    });
    write(out, "seed002-fig2.svg", &svg)?;
    write(
        out,
        "seed002-fig2.json",
        &serde_json::to_string_pretty(&sweeps)?,
    )?;
    Ok(sweeps)
}

fn write(dir: &Path, name: &str, text: &str) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let p = dir.join(name);
    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    println!("  wrote {}", p.display());
    Ok(())
}

/// One NetPIPE run of seed 004.
#[derive(Clone, Debug, Serialize)]
pub struct NpRun {
    /// "base" (one plain member) or "bond" (three bonded).
    pub setup: String,
    /// Nodes at once.
    pub nodes: usize,
    /// Streaming (`-s`) or two-way.
    pub stream: bool,
    /// The nodes' points added up size by size.
    pub points: Vec<Point>,
}

/// Run seed 004's NetPIPE tests; prints a table, writes `<out>/seed004-*.svg` and `.json`.
pub fn seed004(o: &Opts, out: &Path) -> Result<Vec<NpRun>> {
    let upper: u64 = std::env::var("BRAID_LAB_NP_UPPER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 20);
    let nodes_list: Vec<usize> = match std::env::var("BRAID_LAB_NODES") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => vec![1, 2, 3],
    };
    println!(
        "seed004-netpipe ({}): a master into an OVS switch (static EtherChannel: lacp=off, balance-slb), nodes on access ports, every port {} Mbit/s; NPtcp -b 131072 -u {upper}",
        o.bonder.name(),
        o.rate_mbit
    );
    let mut results = Vec::new();
    for (setup, bonder, members) in [("base", Bonder::Plain, 1), ("bond", o.bonder.clone(), 3)] {
        let t = Topo::new(TopoSpec {
            members,
            rate_mbit: Some(o.rate_mbit),
            client_mbit: Some(o.rate_mbit),
            tight: true,
            bond: spec("xor", Some("layer3+4")),
            bonder,
            far: Far::Switch {
                lacp: Lacp::Off,
                mode: "balance-slb".into(),
                clients: 3,
            },
        })?;
        for &nodes in &nodes_list {
            for stream in [false, true] {
                let pairs: Vec<netpipe::Pair> = (1..=nodes)
                    .map(|j| netpipe::Pair {
                        tx_ns: t.host.clone(),
                        rx_ns: t.clients[j - 1].clone(),
                        rx: client_addr(j),
                    })
                    .collect();
                let np = netpipe::Options {
                    stream,
                    upper,
                    repeats: None,
                };
                let limit = std::time::Duration::from_secs(600);
                let runs = match netpipe::run(&pairs, np, &t.net.dir, limit) {
                    Ok(r) => r,
                    // Debian's NPtcp 3.7.2 fails in stream mode (it resets the connection
                    // between trials, and the reset fails): say so and go on.
                    Err(e) if stream => {
                        println!("  {setup} {nodes} node(s) stream : NPtcp -s failed: {e:#}");
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let points = netpipe::combine(&runs);
                let (big, big_mbps) = points.last().map_or((0, f64::NAN), |p| (p.bytes, p.mbps));
                let lat = points.first().map_or(f64::NAN, |p| p.usec);
                let mid = netpipe::mean_mbps(&points, 12_291, 49_152).unwrap_or(f64::NAN);
                println!(
                    "  {setup} {nodes} node(s) {:<7}: {big} B {big_mbps:7.1} Mbit/s, 12-49 KB mean {mid:7.1} Mbit/s, 1-byte latency {lat:8.1} us",
                    if stream { "stream" } else { "two-way" }
                );
                results.push(NpRun {
                    setup: setup.into(),
                    nodes,
                    stream,
                    points,
                });
            }
        }
    }
    plot004(o, out, &results)?;
    write(
        out,
        "seed004-netpipe.json",
        &serde_json::to_string_pretty(&results)?,
    )?;
    Ok(results)
}

fn plot004(o: &Opts, out: &Path, results: &[NpRun]) -> Result<()> {
    let series = |stream: bool, latency: bool| -> Vec<(String, Vec<(f64, f64)>)> {
        results
            .iter()
            .filter(|r| r.stream == stream)
            .map(|r| {
                (
                    format!(
                        "{} {} node{}",
                        r.setup,
                        r.nodes,
                        if r.nodes > 1 { "s" } else { "" }
                    ),
                    r.points
                        .iter()
                        .map(|p| (p.bytes as f64, if latency { p.usec } else { p.mbps }))
                        .collect(),
                )
            })
            .collect()
    };
    for (name, title, stream, latency) in [
        (
            "seed004-twoway.svg",
            "two-way: aggregate throughput",
            false,
            false,
        ),
        (
            "seed004-stream.svg",
            "stream (-s): aggregate throughput",
            true,
            false,
        ),
        (
            "seed004-latency.svg",
            "two-way: mean latency (half round trip)",
            false,
            true,
        ),
    ] {
        let s = series(stream, latency);
        let lines: Vec<Line<'_>> = s
            .iter()
            .map(|(l, p)| Line {
                label: l,
                points: p,
                dashed: l.starts_with("base"),
            })
            .collect();
        let title = format!(
            "seed 004 NetPIPE, {title}: base (1 member) vs {} bond (3), {} Mbit/s ports",
            o.bonder.name(),
            o.rate_mbit
        );
        let svg = xyplot::svg(&Chart {
            title: &title,
            x_label: "message size, bytes",
            y_label: if latency { "latency, us" } else { "Mbit/s" },
            log_x: true,
            log_y: latency,
            lines,
        });
        write(out, name, &svg)?;
    }
    Ok(())
}
