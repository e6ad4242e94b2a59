//! Link sharing through the real binary in network namespaces: two braid daemons, side a
//! shaped by a tc script, two UDP users each offering more than their class allows.
//!
//! Needs root; skips with a message otherwise, unless `BRAID_REQUIRE_NETNS=1`.
mod common;

use braid_lab::share::{self, ShareScenario};
use braid_lab::udpgen;

const SCRIPT: &str = "\
tc qdisc add dev eth0 root handle 1: htb default 20
tc class add dev eth0 parent 1: classid 1:1 htb rate 9mbit
tc class add dev eth0 parent 1:1 classid 1:10 htb rate 3mbit ceil 3mbit
tc class add dev eth0 parent 1:1 classid 1:20 htb rate 6mbit ceil 6mbit
tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip src 192.168.1.110 flowid 1:10
";

#[test]
fn two_classes_each_get_their_rate() {
    if !common::require_root() {
        return;
    }
    let sc = ShareScenario::parse(
        r#"
kind = "share"
name = "two-classes"
description = "two classes at their ceil"
script = "unused"
link_mbit = 20
duration_s = 5
[[user]]
name = "a"
src = "192.168.1.110"
port = 1010
schedule = [[0, 8]]
[[user]]
name = "b"
src = "192.168.1.111"
port = 1011
schedule = [[0, 8]]
[[phase]]
from_s = 0
to_s = 5
"#,
    )
    .expect("scenario parses");
    // With the monitor on (as `braid lab --monitor`): its samples are plotted too.
    let out = common::scratch("shape-monitor");
    let live = ("127.0.0.1:0".parse().expect("an address"), out.as_path());
    let bins = share::run_braid(&sc, &common::braid(), SCRIPT, Some(live))
        .expect("braid run")
        .users;
    let svg =
        std::fs::read_to_string(out.join("two-classes-monitor.svg")).expect("the monitor's plot");
    assert!(
        svg.contains("a (1:10)") && svg.contains("b (1:20)"),
        "{svg}"
    );
    assert!(svg.matches("<polyline").count() >= 2, "{svg}");
    let _ = std::fs::remove_dir_all(&out);
    // From 1 s (queues settled) to the end.
    let per_s = (1.0 / udpgen::BIN.as_secs_f64()) as usize;
    let a = udpgen::mbit(&bins[0], per_s, 5 * per_s);
    let b = udpgen::mbit(&bins[1], per_s, 5 * per_s);
    eprintln!(
        "class 1:10 (rate 3 Mbit/s): {a:.3} Mbit/s; class 1:20 (rate 6 Mbit/s): {b:.3} Mbit/s"
    );
    assert!(
        (a - 3.0).abs() <= 0.05 * 3.0,
        "class 1:10 got {a:.3} Mbit/s, want 3 ± 5 %"
    );
    assert!(
        (b - 6.0).abs() <= 0.05 * 6.0,
        "class 1:20 got {b:.3} Mbit/s, want 6 ± 5 %"
    );
}
