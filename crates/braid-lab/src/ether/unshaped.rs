//! `braid lab ether-unshaped`: the cost of braid's layer-2 path. Two hosts back to back
//! over unshaped veth pairs, TCP (CUBIC) through a plain veth, through braid's Ethernet
//! bond of one member, and of two members (round-robin, and xor layer3+4 with 8 flows):
//! goodput, and the CPU both daemons used per Gbit/s carried.
use std::time::Duration;

use anyhow::Result;

use super::runs::{self, goodput, shaped};
use super::topo::{Bonder, Far, Topo, TopoSpec};

fn spec(members: usize, bonder: Bonder, scheduler: &str, hash: Option<&str>) -> TopoSpec {
    shaped(
        None,
        members,
        bonder,
        Far::BackToBack,
        runs::spec(scheduler, hash),
    )
}

/// One line: goodput with `flows` flows, and the daemons' CPU per Gbit/s (host, far).
fn measure(t: &Topo, label: &str, flows: u32, secs: u64) -> Result<()> {
    let cpu = |i: usize| t.braid.get(i).and_then(super::braid::Braid::cpu);
    let before = (cpu(0), cpu(1));
    let (ns, addr) = t.peer();
    let g = goodput(&t.host, &ns, addr, flows, secs)?;
    let per_gbit = |b: Option<Duration>, a: Option<Duration>| match (b, a) {
        (Some(b), Some(a)) if g > 0.0 => format!(
            "{:.2}",
            a.saturating_sub(b).as_secs_f64() / secs as f64 / (g / 1000.0)
        ),
        _ => "-".into(),
    };
    println!(
        "  {label:<34} {flows} flow(s): {g:>7.1} Mbit/s; cores per Gbit/s: sender {}, receiver {}",
        per_gbit(before.0, cpu(0)),
        per_gbit(before.1, cpu(1)),
    );
    Ok(())
}

/// Run it; `bonder` is braid (or OVS, to compare).
pub fn run(bonder: &Bonder, secs: u64) -> Result<()> {
    println!("ether-unshaped ({}), {secs} s per figure:", bonder.name());
    let plain = Topo::new(spec(1, Bonder::Plain, "xor", None))?;
    for flows in [1, 8] {
        measure(&plain, "plain veth", flows, secs)?;
    }
    drop(plain);
    let one = Topo::new(spec(1, bonder.clone(), "round-robin", None))?;
    for flows in [1, 8] {
        measure(&one, "bond of 1 member", flows, secs)?;
    }
    drop(one);
    let rr = Topo::new(spec(2, bonder.clone(), "round-robin", None))?;
    measure(&rr, "bond of 2, round-robin", 1, secs)?;
    drop(rr);
    let xor = Topo::new(spec(2, bonder.clone(), "xor", Some("layer3+4")))?;
    measure(&xor, "bond of 2, xor layer3+4", 8, secs)?;
    Ok(())
}
