//! The Ethernet lab's harness against itself (no braid): two Open vSwitch instances, each
//! in its own namespace with the userspace datapath, bonded to each other by LACP (active,
//! fast) over two veth pairs. Skipped with a message when not root or when Open vSwitch
//! is not installed (`scripts/setup` installs it, so CI runs it; `BRAID_REQUIRE_NETNS=1`
//! makes a skip a failure).
mod common;

use std::time::Duration;

use braid_lab::ether::failover::Cut;
use braid_lab::ether::ovs;
use braid_lab::ether::ovs_pair::{Pair, PairSpec};

fn ovs_or_skip(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    let guard = common::netns_or_skip(test)?;
    common::runs(test, "Open vSwitch", ovs::missing().as_deref()).then_some(guard)
}

/// Both switches reach current/attached/collecting/distributing on both members, and
/// agree on each other: each one's partner system id is the other's own.
/// A member whose carrier drops moves the stream within 100 ms; a member that goes
/// silent both ways with its carrier up is noticed only by LACP's partner expiry (fast
/// rate: three 1 s intervals), so the stream stops for more than 1.5 s and about 3 s at most.
#[test]
fn ovs_lacp_pair_negotiates_and_fails_over() {
    let Some(_g) = ovs_or_skip("ovs_lacp_pair_negotiates_and_fails_over") else {
        return;
    };
    let pair = Pair::new(PairSpec {
        members: 2,
        rate_mbit: None,
        mode: "balance-tcp".into(),
    })
    .expect("build two OVS switches");
    let t = pair
        .wait_negotiated(Duration::from_secs(10))
        .expect("LACP negotiates");
    let shows = pair.lacp().expect("lacp/show");
    assert_eq!(shows[0].lacp_time, "fast");
    for (me, other) in [(0, 1), (1, 0)] {
        assert_eq!(shows[me].members.len(), 2);
        for m in &shows[me].members {
            assert!(m.distributing(), "{}", shows[me].summary());
            assert_eq!(
                m.partner_sys_id, shows[other].sys_id,
                "partner is the other OVS"
            );
        }
    }
    let carrier = pair
        .failover(Cut::Carrier, Duration::from_secs(1))
        .expect("carrier failover");
    eprintln!("negotiated in {:.1} s; {}", t.as_secs_f64(), carrier.line());
    assert!(carrier.gap.after > 500, "the stream came back: {carrier:?}");
    assert!(carrier.gap.gap_ms < 100.0, "{}", carrier.line());
    pair.wait_negotiated(Duration::from_secs(10))
        .expect("renegotiates after the carrier returns");
    let silent = pair
        .failover(Cut::Silence, Duration::from_secs(4))
        .expect("silent failover");
    eprintln!("{}", silent.line());
    assert!(silent.gap.after > 500, "the stream came back: {silent:?}");
    // Expiry is three intervals after the last LACPDU, which came 0-1 s before the cut:
    // 2-3 s, and a little more on a loaded machine.
    assert!(
        silent.gap.gap_ms > 1500.0 && silent.gap.gap_ms < 3300.0,
        "only LACP expiry notices a silent member: {}",
        silent.line()
    );
}
