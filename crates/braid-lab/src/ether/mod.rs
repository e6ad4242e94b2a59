//! The lab for Ethernet bonds (issue 17): Open vSwitch as an independent LACP partner
//! in a namespace ([`ovs`]), namespaces joined by address-less veths ([`net`]), failover
//! gaps from a 1 ms probe stream ([`probe`], [`failover`]), and the runs `braid lab`
//! offers: `ovs-ovs` (the harness against itself), braid's Ethernet bond back to back and
//! into an OVS switch, and the seeds' experiments. `docs/lab.md` ("Ethernet bonds") says
//! how to run them.
pub mod failover;
pub mod net;
pub mod ovs;
pub mod ovs_pair;
pub mod probe;

use anyhow::{bail, Result};

/// The Ethernet runs: (name, about how long in seconds, what it shows).
pub const LIST: &[(&str, u64, &str)] = &[(
    "ovs-ovs",
    30,
    "the harness against itself: two Open vSwitch bonded by LACP (fast), carrier and silent-member failover",
)];

/// True if `name` is one of the Ethernet runs.
pub fn is_ether(name: &str) -> bool {
    LIST.iter().any(|(n, _, _)| *n == name)
}

/// Run the Ethernet run `name`.
pub fn main(name: &str, args: &crate::LabArgs) -> Result<()> {
    crate::preflight_netns()?;
    if let Some(why) = ovs::missing() {
        bail!("{why}");
    }
    crate::netns::install_signal_handler();
    let _ = args;
    match name {
        "ovs-ovs" => {
            let r = ovs_pair::run(2, None)?;
            if !r.missed.is_empty() {
                bail!("targets missed: {}", r.missed.join("; "));
            }
            Ok(())
        }
        _ => bail!("no Ethernet run called {name}"),
    }
}
