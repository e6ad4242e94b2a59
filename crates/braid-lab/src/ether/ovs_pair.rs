//! `braid lab ovs-ovs`: the harness checked against itself before braid is in it. Two
//! switch namespaces, each with its own Open vSwitch, bonded to each other over N veth
//! pairs (LACP active, fast), a host namespace on an access port of each. Both OVS must
//! reach current/distributing on every member; a member cut by carrier must move the
//! stream within 100 ms, a silent member (no carrier loss) within 3 s (three fast
//! LACPDU intervals).
//!
//! ```text
//!  h1 ── a1 [s1: OVS br0, bond0 = m0..mN-1] ══ N veths ══ [s2: OVS br0, bond0] a1 ── h2
//! ```
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::failover::{self, Cut, Failover, Flow, Port};
use super::net::{self, Net};
use super::ovs::{Lacp, LacpShow, Ovs};

/// The pair's layout.
#[derive(Clone, Debug)]
pub struct PairSpec {
    /// Bond members.
    pub members: usize,
    /// tbf rate on every member port (both ends), Mbit/s.
    pub rate_mbit: Option<f64>,
    /// `bond_mode`.
    pub mode: String,
}

/// Two OVS switches bonded to each other, a host on each; torn down on drop.
pub struct Pair {
    /// OVS of switch 1 (dropped before the namespaces).
    pub ovs: Vec<Ovs>,
    /// Namespaces: s1, s2, h1, h2.
    pub s: [String; 2],
    /// The hosts' namespaces.
    pub h: [String; 2],
    /// The member ports' names (the same in both switches).
    pub ports: Vec<String>,
    /// The spec.
    pub spec: PairSpec,
    /// The namespaces (declared last: dropped after the OVS processes).
    pub net: Net,
}

/// The hosts' addresses.
pub const H1: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 211, 0, 1);
/// Host 2.
pub const H2: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 211, 0, 2);

impl Pair {
    /// Build it and start both OVS; returns once both daemons run (not yet negotiated).
    pub fn new(spec: PairSpec) -> Result<Self> {
        let mut net = Net::new()?;
        let s = [net.ns("s1")?, net.ns("s2")?];
        let h = [net.ns("h1")?, net.ns("h2")?];
        let ports: Vec<String> = (0..spec.members).map(|i| format!("m{i}")).collect();
        for p in &ports {
            net.veth(&s[0], p, &s[1], p)?;
            if let Some(m) = spec.rate_mbit {
                net::shape(&s[0], p, m)?;
                net::shape(&s[1], p, m)?;
            }
        }
        for (i, (sw, host)) in s.iter().zip(&h).enumerate() {
            net.veth(host, "eth0", sw, "a1")?;
            let a = if i == 0 { H1 } else { H2 };
            net::addr(host, "eth0", &format!("{a}/24"))?;
            net::tx_csum_off(host, "eth0")?;
        }
        let mut ovs = Vec::new();
        for (i, sw) in s.iter().enumerate() {
            let o = Ovs::start(sw, &net.file(&format!("ovs{}", i + 1)))?;
            o.add_bridge("br0")?;
            let refs: Vec<&str> = ports.iter().map(String::as_str).collect();
            o.add_bond("br0", "bond0", &refs, Lacp::Active, &spec.mode, true)?;
            o.add_port("br0", "a1")?;
            ovs.push(o);
        }
        Ok(Self {
            ovs,
            s,
            h,
            ports,
            spec,
            net,
        })
    }

    /// Wait until both bonds negotiated every member; the slower one's time.
    pub fn wait_negotiated(&self, within: Duration) -> Result<Duration> {
        let mut t = Duration::ZERO;
        for o in &self.ovs {
            t = t.max(o.wait_negotiated("bond0", self.ports.len(), within)?);
        }
        Ok(t)
    }

    /// Both switches' `lacp/show bond0`.
    pub fn lacp(&self) -> Result<Vec<LacpShow>> {
        self.ovs.iter().map(|o| o.lacp_show("bond0")).collect()
    }

    /// Switch 1's member ports (the stream h1 → h2 leaves s1 on one of them).
    pub fn s1_ports(&self) -> Vec<Port> {
        self.ports
            .iter()
            .map(|p| Port {
                ns: self.s[0].clone(),
                dev: p.clone(),
                rate_mbit: self.spec.rate_mbit,
                peer: Some((self.s[1].clone(), p.clone())),
            })
            .collect()
    }

    /// The probe flow h1 → h2.
    pub fn flow(&self) -> Flow {
        Flow {
            src_ns: self.h[0].clone(),
            src: H1,
            dst_ns: self.h[1].clone(),
            dst: H2,
        }
    }

    /// One failover of the member carrying h1 → h2.
    pub fn failover(&self, cut: Cut, hold: Duration) -> Result<Failover> {
        failover::measure(&self.flow(), &self.s1_ports(), cut, hold)
    }
}

/// What `ovs-ovs` found.
#[derive(Clone, Debug, Serialize)]
pub struct PairResult {
    /// Seconds until both bonds negotiated.
    pub negotiated_s: f64,
    /// The failovers.
    pub failovers: Vec<Failover>,
    /// Targets missed.
    pub missed: Vec<String>,
}

/// Run the validation: negotiate, then a carrier cut and a silent member, each followed by
/// renegotiation. Prints as it goes.
pub fn run(members: usize, rate_mbit: Option<f64>) -> Result<PairResult> {
    let pair = Pair::new(PairSpec {
        members,
        rate_mbit,
        mode: "balance-tcp".into(),
    })?;
    let t = pair.wait_negotiated(Duration::from_secs(15))?;
    println!(
        "ovs-ovs: {members} members, LACP active fast, negotiated on both switches in {:.1} s",
        t.as_secs_f64()
    );
    for (i, show) in pair.lacp()?.iter().enumerate() {
        println!("  s{}: {}", i + 1, show.summary());
    }
    let mut failovers = Vec::new();
    let mut missed = Vec::new();
    for (cut, target_ms) in [(Cut::Carrier, 100.0), (Cut::Silence, 3000.0)] {
        let f = pair.failover(cut, Duration::from_secs(5))?;
        println!("  {} (target < {target_ms} ms)", f.line());
        if f.gap.gap_ms >= target_ms || f.gap.after == 0 {
            missed.push(format!("{}: gap {:.1} ms", cut.name(), f.gap.gap_ms));
        }
        failovers.push(f);
        pair.wait_negotiated(Duration::from_secs(15))?;
    }
    Ok(PairResult {
        negotiated_s: t.as_secs_f64(),
        failovers,
        missed,
    })
}
