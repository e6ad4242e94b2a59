//! `braid lab ether-b2b` and `braid lab ether-ovs`: braid's Ethernet bond back to back
//! with another braid, and into an Open vSwitch switch (LACP and static), with figures:
//! time to carry traffic, failover gaps on carrier loss and on LACP expiry, LACP state as
//! each side sees it, goodput of one member against the bond.
use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::braid::{self as bb, BondSpec};
use super::failover::{self, Cut, Failover};
use super::ovs::Lacp;
use super::topo::{client_addr, Bonder, Far, Topo, TopoSpec};
use crate::{iperf, run};

/// Options shared by the Ethernet runs.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Who bonds the host (braid, or Open vSwitch to check the harness).
    pub bonder: Bonder,
    /// tbf rate of every member, Mbit/s.
    pub rate_mbit: f64,
    /// Seconds per goodput measurement.
    pub secs: u64,
}

/// One bond configuration's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// What ran.
    pub label: String,
    /// Seconds from start until every bond carried traffic.
    pub up_s: f64,
    /// Failovers.
    pub failovers: Vec<Failover>,
    /// Goodput through the bond, Mbit/s (iperf3, 8 flows).
    pub goodput_mbit: f64,
    /// LACP agreement lines (braid vs OVS), when there is LACP with an OVS.
    pub lacp: Vec<String>,
    /// Targets missed.
    pub missed: Vec<String>,
}

/// TCP goodput from `src_ns` to `dst` (in `dst_ns`), `flows` connections, `secs`
/// seconds, the first second left out; Mbit/s.
pub fn goodput(src_ns: &str, dst_ns: &str, dst: Ipv4Addr, flows: u32, secs: u64) -> Result<f64> {
    let server = run::iperf_server(dst_ns, &dst.to_string())?;
    let client = run::iperf_client(src_ns, &dst.to_string(), secs, flows, None, "cubic")?;
    let r = run::iperf_finish(server, client, secs)?;
    let warm = 1.0_f64.min(secs as f64 / 2.0);
    Ok(iperf::goodput_between(&r.intervals, warm, secs as f64).unwrap_or(r.goodput_bps) / 1e6)
}

/// Goodput from the host to all its clients at once (`flows` each); the sum, Mbit/s.
fn goodput_to_clients(t: &Topo, flows: u32, secs: u64) -> Result<f64> {
    // Every server first, then every client at once, so that the runs overlap.
    let mut servers = Vec::new();
    for (j, c) in t.clients.iter().enumerate() {
        servers.push(run::iperf_server(c, &client_addr(j + 1).to_string())?);
    }
    let mut pairs = Vec::new();
    for (j, server) in servers.into_iter().enumerate() {
        let a = client_addr(j + 1).to_string();
        let client = run::iperf_client(&t.host, &a, secs, flows, None, "cubic")?;
        pairs.push((server, client));
    }
    let mut sum = 0.0;
    let warm = 1.0_f64.min(secs as f64 / 2.0);
    for (s, c) in pairs {
        let r = run::iperf_finish(s, c, secs)?;
        sum += iperf::goodput_between(&r.intervals, warm, secs as f64).unwrap_or(r.goodput_bps);
    }
    Ok(sum / 1e6)
}

/// A bond of `scheduler` (and `hash`), LACP fast, addresses set by the topology.
pub(super) fn spec(scheduler: &str, hash: Option<&str>) -> BondSpec {
    BondSpec {
        scheduler: scheduler.into(),
        hash: hash.map(str::to_string),
        lacp_fast: true,
        address: String::new(),
        mac: None,
    }
}

/// A carrier cut (target 100 ms) and, with `silence = Some(reverse)`, a member silent
/// both ways with its carrier up (target 3 s, LACP fast), the probe stream the other way
/// when `reverse`; the topology settled again after each.
fn failovers(t: &Topo, silence: Option<bool>, missed: &mut Vec<String>) -> Result<Vec<Failover>> {
    let mut out = Vec::new();
    let f = failover::measure(
        &t.flow(false),
        &t.ports(false),
        Cut::Carrier,
        Duration::from_secs(2),
    )?;
    check_failover(&f, 100.0, missed);
    out.push(f);
    if let Some(reverse) = silence {
        settle(t)?;
        let f = failover::measure(
            &t.flow(reverse),
            &t.ports(reverse),
            Cut::Silence,
            Duration::from_secs(5),
        )?;
        check_failover(&f, 3000.0, missed);
        out.push(f);
    }
    settle(t)?;
    Ok(out)
}

fn check_failover(f: &Failover, target_ms: f64, missed: &mut Vec<String>) {
    println!("    {} (target < {target_ms} ms)", f.line());
    if f.gap.gap_ms >= target_ms || f.gap.after == 0 {
        missed.push(format!("{}: gap {:.1} ms", f.cut.name(), f.gap.gap_ms));
    }
}

/// `ether-b2b`: two hosts back to back over 2 members: 802.3ad (fast) with carrier and
/// silent-member failover, then xor, round-robin and active-backup with a carrier cut;
/// goodput with 8 flows against one plain member.
pub fn back_to_back(o: &Opts) -> Result<Vec<Row>> {
    let one = {
        let t = Topo::new(topo_spec(
            o,
            1,
            Bonder::Plain,
            Far::BackToBack,
            spec("xor", None),
        ))?;
        let (ns, addr) = t.peer();
        goodput(&t.host, &ns, addr, 8, o.secs)?
    };
    println!(
        "ether-b2b ({}): one plain member, 8 flows: {one:.1} Mbit/s (tbf {} Mbit/s)",
        o.bonder.name(),
        o.rate_mbit
    );
    let mut rows = Vec::new();
    for (sched, hash) in [
        ("802.3ad", Some("layer3+4")),
        ("xor", Some("layer3+4")),
        ("round-robin", None),
        ("active-backup", None),
    ] {
        let s = spec(sched, hash);
        let label = s.label();
        println!("  {label}:");
        let start = crate::netns::now();
        let t = Topo::new(topo_spec(o, 2, o.bonder.clone(), Far::BackToBack, s))?;
        let up_s = start.elapsed().as_secs_f64();
        let mut missed = Vec::new();
        let silence = (sched == "802.3ad").then_some(false);
        let failovers = failovers(&t, silence, &mut missed)?;
        let (ns, addr) = t.peer();
        t.check_shaped()?;
        let before = member_bytes(&t)?;
        let g = goodput(&t.host, &ns, addr, 8, o.secs)?;
        let per = member_mbit(&t, &before, o.secs)?;
        println!(
            "    goodput, 8 flows: {g:.1} Mbit/s = {:.2} x one member (members sent {per})",
            g / one.max(1e-9)
        );
        rows.push(Row {
            label,
            up_s,
            failovers,
            goodput_mbit: g,
            lacp: Vec::new(),
            missed,
        });
    }
    Ok(rows)
}

/// `ether-ovs`: the host's bond of 2 members into an OVS switch with 3 clients; LACP
/// (active, fast, balance-tcp) and static (lacp=off, balance-slb against braid's xor).
pub fn into_switch(o: &Opts) -> Result<Vec<Row>> {
    let plain = Far::Switch {
        lacp: Lacp::Off,
        mode: "balance-slb".into(),
        clients: 3,
    };
    let one = {
        let t = Topo::new(topo_spec(o, 1, Bonder::Plain, plain, spec("xor", None)))?;
        goodput_to_clients(&t, 4, o.secs)?
    };
    println!(
        "ether-ovs ({}): one plain member into the switch, 3 clients x 4 flows: {one:.1} Mbit/s (tbf {} Mbit/s)",
        o.bonder.name(),
        o.rate_mbit
    );
    let mut rows = Vec::new();
    for (lacp, mode, sched) in [
        (Lacp::Active, "balance-tcp", "802.3ad"),
        (Lacp::Off, "balance-slb", "xor"),
    ] {
        let s = spec(sched, Some("layer3+4"));
        let label = format!(
            "{} / OVS lacp={} {mode}",
            s.label(),
            if lacp == Lacp::Off { "off" } else { "active" }
        );
        println!("  {label}:");
        let far = Far::Switch {
            lacp,
            mode: mode.into(),
            clients: 3,
        };
        let start = crate::netns::now();
        let t = Topo::new(topo_spec(o, 2, o.bonder.clone(), far, s))?;
        let up_s = start.elapsed().as_secs_f64();
        println!("    up in {up_s:.1} s");
        let mut lines = Vec::new();
        if lacp != Lacp::Off {
            lines = agreement_lines(&t)?;
            for l in &lines {
                println!("    {l}");
            }
        }
        let mut missed: Vec<String> = lines
            .iter()
            .filter(|l| l.contains("DISAGREE"))
            .cloned()
            .collect();
        // With LACP, the switch sends to the host on a member that then goes silent both
        // ways: the host's LACP must expire the partner and tell the switch.
        let silence = (lacp != Lacp::Off).then_some(true);
        let failovers = failovers(&t, silence, &mut missed)?;
        t.check_shaped()?;
        let before = member_bytes(&t)?;
        let g = goodput_to_clients(&t, 4, o.secs)?;
        let per = member_mbit(&t, &before, o.secs)?;
        println!(
            "    goodput to 3 clients x 4 flows: {g:.1} Mbit/s = {:.2} x one member (members sent {per})",
            g / one.max(1e-9)
        );
        rows.push(Row {
            label,
            up_s,
            failovers,
            goodput_mbit: g,
            lacp: lines,
            missed,
        });
    }
    Ok(rows)
}

/// braid's and OVS's view of each member, one line each.
pub fn agreement_lines(t: &Topo) -> Result<Vec<String>> {
    let (Some(b), Some(sw)) = (t.braid.first(), t.ovs.first()) else {
        return Ok(vec!["(no braid bond: no agreement to check)".into()]);
    };
    let show = sw.lacp_show("bond0")?;
    let status = b.status()?;
    Ok(bb::agreement(&status, &show, &t.far_ports)
        .iter()
        .map(|a| {
            format!(
                "{} ~ {}: braid actor {:08b} / OVS partner {:08b}, braid partner {:08b} / OVS actor {:08b}, systems {}: {}",
                a.member,
                a.ovs_port,
                a.braid_actor,
                a.ovs_partner,
                a.braid_partner,
                a.ovs_actor,
                if a.systems_agree { "agree" } else { "differ" },
                if a.agrees() { "agree" } else { "DISAGREE" }
            )
        })
        .collect())
}

/// Wait until every bond is back to full strength after a failover.
fn settle(t: &Topo) -> Result<()> {
    let n = t.members.len();
    for o in &t.ovs {
        if o.lacp_show("bond0")
            .is_ok_and(|s| !s.members.is_empty() && s.status != "off")
        {
            o.wait_negotiated("bond0", n, Duration::from_secs(15))?;
        }
    }
    // braid: members back in use (bounded; a static mode is back at once).
    let end = crate::netns::now() + Duration::from_secs(15);
    for b in &t.braid {
        while crate::netns::now() < end {
            let states = bb::member_states(&b.status()?);
            if states
                .iter()
                .all(|s| s == "distributing" || s == "active" || s == "backup")
            {
                break;
            }
            crate::netns::sleep(Duration::from_millis(100))?;
        }
    }
    crate::netns::sleep(Duration::from_millis(500))
}

/// The host's members' tx byte counters.
pub fn member_bytes(t: &Topo) -> Result<Vec<u64>> {
    t.members
        .iter()
        .map(|m| super::net::tx_bytes(&t.host, m))
        .collect()
}

/// What each host member sent since `before`, as Mbit/s over about `secs` seconds.
pub fn member_mbit(t: &Topo, before: &[u64], secs: u64) -> Result<String> {
    let after = member_bytes(t)?;
    Ok(t.members
        .iter()
        .zip(before.iter().zip(&after))
        .map(|(m, (b, a))| {
            let mbit = a.saturating_sub(*b) as f64 * 8.0 / 1e6 / secs.max(1) as f64;
            format!("{m} {mbit:.1}")
        })
        .collect::<Vec<_>>()
        .join(", "))
}

fn topo_spec(o: &Opts, members: usize, bonder: Bonder, far: Far, bond: BondSpec) -> TopoSpec {
    shaped(Some(o.rate_mbit), members, bonder, far, bond)
}

/// `members` members shaped to `rate_mbit` each (None: unshaped), clients unshaped.
pub(super) fn shaped(
    rate_mbit: Option<f64>,
    members: usize,
    bonder: Bonder,
    far: Far,
    bond: BondSpec,
) -> TopoSpec {
    TopoSpec {
        members,
        rate_mbit,
        client_mbit: None,
        tight: false,
        bond,
        bonder,
        far,
    }
}
