//! The lab for Ethernet bonds (issue 17): Open vSwitch as an independent LACP partner
//! in a namespace ([`ovs`]), namespaces joined by address-less veths ([`net`]), the
//! topologies ([`topo`]), braid's Ethernet bond in them ([`braid`]), failover gaps from a
//! 1 ms probe stream ([`probe`], [`failover`]), NetPIPE ([`netpipe`]), and the runs
//! `braid lab` offers: `ovs-ovs` (the harness against itself), `ether-b2b`, `ether-ovs`
//! ([`runs`]), and the seeds' experiments ([`seeds`]). `docs/lab.md` ("Ethernet bonds")
//! says how to run them.
pub mod braid;
pub mod failover;
pub mod net;
pub mod netpipe;
pub mod ovs;
pub mod ovs_pair;
pub mod probe;
pub mod runs;
pub mod seeds;
pub mod topo;
pub mod unshaped;
pub mod xyplot;

use anyhow::{bail, Context, Result};

use topo::Bonder;

/// The Ethernet runs: (name, about how long in seconds, what it shows).
pub const LIST: &[(&str, u64, &str)] = &[
    (
        "ovs-ovs",
        30,
        "the harness against itself: two Open vSwitch bonded by LACP (fast), carrier and silent-member failover",
    ),
    (
        "ether-b2b",
        90,
        "braid's Ethernet bond back to back (802.3ad, xor, round-robin, active-backup): failover gaps, goodput vs one member",
    ),
    (
        "ether-ovs",
        80,
        "braid's Ethernet bond into an OVS switch (LACP and static), 3 clients: LACP agreement, failover gaps, goodput",
    ),
    (
        "ether-unshaped",
        60,
        "the cost of the layer-2 path: TCP through a plain veth and through braid's bond of 1 and 2 unshaped members, CPU per Gbit/s",
    ),
    (
        "seed002-fig2",
        330,
        "seed 002 Figure 2: bandwidth vs 1..16 TCP connections, hashes layer2, layer3+4, gabler; SVG plot",
    ),
    (
        "seed004-netpipe",
        600,
        "seed 004: NetPIPE, 1-3 nodes, two-way and stream, one member vs three bonded; SVG plots",
    ),
];

/// True if `name` is one of the Ethernet runs.
pub fn is_ether(name: &str) -> bool {
    LIST.iter().any(|(n, _, _)| *n == name)
}

/// The options from the command line and the environment: `BRAID_LAB_BONDER=ovs` bonds
/// the host with Open vSwitch instead of braid (to check the harness),
/// `BRAID_LAB_MBIT` sets the members' rate (default 100 Mbit/s; 50 into a switch).
fn opts(name: &str, args: &crate::LabArgs) -> Result<runs::Opts> {
    let bonder = match std::env::var("BRAID_LAB_BONDER").as_deref() {
        Ok("ovs") => Bonder::Ovs,
        Ok("braid") | Err(_) => Bonder::Braid(crate::braid_exe()?),
        Ok(other) => bail!("BRAID_LAB_BONDER={other}: braid or ovs"),
    };
    let default_mbit = if matches!(name, "ether-ovs" | "seed004-netpipe") {
        50.0
    } else {
        100.0
    };
    let rate_mbit = match std::env::var("BRAID_LAB_MBIT") {
        Ok(v) => v
            .parse()
            .with_context(|| format!("BRAID_LAB_MBIT={v}: a number of Mbit/s"))?,
        Err(_) => default_mbit,
    };
    Ok(runs::Opts {
        bonder,
        rate_mbit,
        secs: args.duration.unwrap_or(5),
    })
}

/// Run the Ethernet run `name`.
pub fn main(name: &str, args: &crate::LabArgs) -> Result<()> {
    crate::preflight_netns()?;
    if let Some(why) = ovs::missing() {
        bail!("{why}");
    }
    crate::netns::install_signal_handler();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "machine load (1/5/15 min): {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let missed: Vec<String> = match name {
        "ovs-ovs" => ovs_pair::run(2, None)?.missed,
        "ether-b2b" => runs::back_to_back(&opts(name, args)?)?
            .into_iter()
            .flat_map(|r| r.missed)
            .collect(),
        "ether-ovs" => runs::into_switch(&opts(name, args)?)?
            .into_iter()
            .flat_map(|r| r.missed)
            .collect(),
        "ether-unshaped" => {
            let o = opts(name, args)?;
            unshaped::run(&o.bonder, o.secs)?;
            Vec::new()
        }
        "seed002-fig2" => {
            seeds::seed002(&opts(name, args)?, &args.out)?;
            Vec::new()
        }
        "seed004-netpipe" => {
            if let Some(why) = netpipe::missing() {
                bail!("{why}");
            }
            seeds::seed004(&opts(name, args)?, &args.out)?;
            Vec::new()
        }
        _ => bail!("no Ethernet run called {name}"),
    };
    if !missed.is_empty() {
        bail!("targets missed: {}", missed.join("; "));
    }
    Ok(())
}
