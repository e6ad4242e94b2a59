//! NetPIPE as the seed-004 lab runs it, over a veth pair between two namespaces (no
//! braid): `NPtcp` receiver and transmitter, two-way, the output file parsed. Skipped with a message when not root or when NetPIPE is not installed
//! (`scripts/setup` installs `netpipe-tcp`, so CI runs it; `BRAID_REQUIRE_NETNS=1` makes a
//! skip a failure).
mod common;

use std::time::Duration;

use braid_lab::ether::net::{self, Net};
use braid_lab::ether::netpipe::{self, Options, Pair};

#[test]
fn nptcp_two_way_over_a_veth() {
    let test = "nptcp_two_way_over_a_veth";
    let Some(_g) = common::netns_or_skip(test) else {
        return;
    };
    if !common::runs(test, "NetPIPE (NPtcp)", netpipe::missing().as_deref()) {
        return;
    }
    let mut n = Net::new().expect("namespaces");
    let a = n.ns("np-a").expect("ns a");
    let b = n.ns("np-b").expect("ns b");
    n.veth(&a, "eth0", &b, "eth0").expect("veth");
    net::addr(&a, "eth0", "10.213.0.1/24").expect("address a");
    net::addr(&b, "eth0", "10.213.0.2/24").expect("address b");
    let pair = Pair {
        tx_ns: a,
        rx_ns: b,
        rx: "10.213.0.2".parse().expect("address"),
    };
    // Two-way only: the stream mode (`-s`) of Debian's NetPIPE 3.7.2 resets the
    // connection between trials and fails at the first reset ("error writing or reading
    // synchronization string: Connection reset by peer"), on loopback too, as `-r` does.
    {
        let stream = false;
        let o = Options {
            stream,
            upper: 65536,
            repeats: Some(20),
        };
        let runs = netpipe::run(
            std::slice::from_ref(&pair),
            o,
            &n.dir,
            Duration::from_secs(60),
        )
        .expect("NPtcp runs");
        let p = &runs[0];
        // NetPIPE's sizes: 1, 2, 3, 4, 6, 8, ... and 2^k ± 3 up to the bound.
        assert_eq!(p[0].bytes, 1, "{p:?}");
        assert!(p.iter().any(|x| x.bytes == 65536), "reached -u: {p:?}");
        assert!(p.windows(2).all(|w| w[0].bytes < w[1].bytes));
        assert!(p.iter().all(|x| x.mbps > 0.0 && x.usec > 0.0), "{p:?}");
        // Bigger messages move more bits per second than 1-byte ones over a veth.
        assert!(p.last().map_or(0.0, |x| x.mbps) > 10.0 * p[0].mbps, "{p:?}");
        eprintln!(
            "{}: {} sizes, 1 byte {:.1} us, 64 KB {:.0} Mbit/s",
            if stream { "stream" } else { "two-way" },
            p.len(),
            p[0].usec,
            p.last().map_or(0.0, |x| x.mbps)
        );
    }
}
