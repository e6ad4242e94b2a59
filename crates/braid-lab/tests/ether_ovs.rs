//! braid's Ethernet bond against an independent LACP implementation: Open vSwitch (its
//! userspace datapath, run by the lab inside a namespace) as the switch, braid's bond of
//! two members cabled into it, a client on an access port. Skipped with a message when
//! not root or when Open vSwitch is not installed (`scripts/setup` installs it, so CI
//! runs these; `BRAID_REQUIRE_NETNS=1` makes a skip a failure). The failover figures are
//! printed (`-- --nocapture`).
mod common;

use std::time::Duration;

use braid_lab::ether::braid::{agreement, member_states, BondSpec};
use braid_lab::ether::failover::{self, Cut};
use braid_lab::ether::ovs::{self, Lacp};
use braid_lab::ether::topo::{Bonder, Far, Topo, TopoSpec};

fn ovs_or_skip(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    let guard = common::netns_or_skip(test)?;
    common::runs(test, "Open vSwitch", ovs::missing().as_deref()).then_some(guard)
}

fn topo(scheduler: &str, lacp: Lacp, mode: &str) -> Topo {
    Topo::new(TopoSpec {
        members: 2,
        rate_mbit: None,
        client_mbit: None,
        tight: false,
        bond: BondSpec {
            scheduler: scheduler.into(),
            hash: Some("layer3+4".into()),
            lacp_fast: true,
            address: String::new(),
            mac: None,
        },
        bonder: Bonder::Braid(common::braid()),
        far: Far::Switch {
            lacp,
            mode: mode.into(),
            clients: 1,
        },
    })
    .expect("braid's bond into an OVS switch")
}

/// 802.3ad (fast) against OVS's `lacp=active balance-tcp`: both sides collecting and
/// distributing on both members, and `braid status` agrees with `ovs-appctl lacp/show`
/// on every state bit and on who the partner is. A carrier cut moves the stream within
/// 100 ms; a member silent both ways with its carrier up is noticed by braid's LACP
/// (partner expiry, three fast intervals) and the switch is told, within about 3 s.
#[test]
fn braid_lacp_interoperates_with_open_vswitch() {
    let Some(_g) = ovs_or_skip("braid_lacp_interoperates_with_open_vswitch") else {
        return;
    };
    let t = topo("802.3ad", Lacp::Active, "balance-tcp");
    let status = t.braid[0].status().expect("braid status");
    assert_eq!(
        member_states(&status),
        ["distributing", "distributing"],
        "{status}"
    );
    let show = t.ovs[0].lacp_show("bond0").expect("lacp/show");
    let agree = agreement(&status, &show, &t.far_ports);
    assert_eq!(agree.len(), 2);
    for a in &agree {
        assert!(
            a.agrees(),
            "braid and OVS disagree: {a:?}\n{}",
            show.summary()
        );
        assert_eq!(
            a.braid_actor & 0x3c,
            0x3c,
            "aggregation, sync, collecting, distributing"
        );
    }
    let carrier = failover::measure(
        &t.flow(false),
        &t.ports(false),
        Cut::Carrier,
        Duration::from_secs(1),
    )
    .expect("carrier failover");
    eprintln!("{}", carrier.line());
    assert!(carrier.gap.after > 500, "the stream came back: {carrier:?}");
    assert!(carrier.gap.gap_ms < 100.0, "{}", carrier.line());
    t.ovs[0]
        .wait_negotiated("bond0", 2, Duration::from_secs(10))
        .expect("renegotiates after the carrier returns");
    // The switch sends to braid on the member that goes silent: braid must expire it.
    let silent = failover::measure(
        &t.flow(true),
        &t.ports(true),
        Cut::Silence,
        Duration::from_secs(4),
    )
    .expect("silent failover");
    eprintln!("{}", silent.line());
    assert!(silent.gap.after > 500, "the stream came back: {silent:?}");
    assert!(
        silent.gap.gap_ms > 1500.0 && silent.gap.gap_ms < 3300.0,
        "only LACP expiry notices a silent member: {}",
        silent.line()
    );
}

/// Static EtherChannel: braid's `xor` (layer3+4) into OVS's `lacp=off balance-slb`;
/// the stream crosses, and a carrier cut moves it within 100 ms.
#[test]
fn braid_static_bond_into_open_vswitch() {
    let Some(_g) = ovs_or_skip("braid_static_bond_into_open_vswitch") else {
        return;
    };
    let t = topo("xor", Lacp::Off, "balance-slb");
    let f = failover::measure(
        &t.flow(false),
        &t.ports(false),
        Cut::Carrier,
        Duration::from_secs(1),
    )
    .expect("carrier failover");
    eprintln!("{}", f.line());
    assert!(f.gap.after > 500, "the stream came back: {f:?}");
    assert!(f.gap.gap_ms < 100.0, "{}", f.line());
}
