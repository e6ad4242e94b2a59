//! CPU cost of the core data path, per packet: TUN packet in at A, scheduled, paced,
//! framed, parsed at B, reordered, delivered; acks back to A. No sockets: this is what
//! braid's own logic costs on top of the syscalls.
//!
//! Run: `cargo bench -p braid-core --bench datapath`

use core::time::Duration;

use braid_core::bond::{BondConfig, PathConfig};
use braid_core::crypto::{OsRng, PrivateKey, TunnelConfig};
use braid_core::emu::EmuConfig;
use braid_core::sim::{address, udp_packet, Node, Pair, Side};
use braid_core::CcConfig;
use braid_core::Instant;
use braid_core::SchedulerConfig;
use braid_core::{Endpoint, EndpointConfig, SealConfig, Sealing};

fn main() {
    divan::main();
}

/// A pair with `paths` paths up and pacing out of the way (a very fast link).
fn ready_pair(scheduler: SchedulerConfig, paths: usize) -> Pair {
    let cfg = BondConfig {
        scheduler,
        ..BondConfig::default()
    };
    let mut pair = Pair::new(cfg);
    add_fast_paths(&mut pair, paths);
    pair
}

/// `paths` paths with pacing out of the way (a very fast link), then half a second for
/// them to come up.
fn add_fast_paths<N: Node>(pair: &mut Pair<N>, paths: usize) {
    let fast = CcConfig {
        initial_rate_bps: 100_000_000_000,
        min_rate_bps: 100_000_000_000,
        max_rate_bps: 0,
        ..CcConfig::default()
    };
    for i in 0..paths {
        let pc = PathConfig {
            name: format!("p{i}"),
            cc: fast,
            ..PathConfig::default()
        };
        pair.add_path(pc, EmuConfig::default());
    }
    pair.run_until(Instant::from_millis(500), |_| {});
}

/// Move one packet A → B and everything both sides owe each other, at `now`.
fn one_packet(pair: &mut Pair, now: Instant, pkt: &[u8], buf: &mut [u8], out: &mut [u8]) {
    pair.a.handle_tun_packet(now, pkt);
    while let Some(t) = pair.a.poll_transmit(now, buf) {
        pair.b.handle_datagram(now, t.path, &buf[..t.len]);
    }
    while let Some(t) = pair.b.poll_transmit(now, buf) {
        pair.a.handle_datagram(now, t.path, &buf[..t.len]);
    }
    while let Some(n) = pair.b.poll_deliver(now, out) {
        divan::black_box(&out[..n]);
    }
}

#[divan::bench(args = ["adaptive", "round-robin", "xor", "eql", "weighted"], sample_count = 30, sample_size = 2000)]
fn per_packet(bencher: divan::Bencher, policy: &str) {
    let scheduler = match policy {
        "round-robin" => SchedulerConfig::RoundRobin {
            packets_per_path: 1,
        },
        "xor" => SchedulerConfig::Xor {
            hash: braid_core::hash::HashPolicy::Layer34,
        },
        "eql" => SchedulerConfig::Eql,
        "weighted" => SchedulerConfig::Weighted,
        _ => SchedulerConfig::Adaptive,
    };
    let mut pair = ready_pair(scheduler, 3);
    let pkts: Vec<Vec<u8>> = (0..64)
        .map(|i| udp_packet(i, 1200, 40000 + i as u16, 5001))
        .collect();
    let mut buf = vec![0u8; 65536];
    let mut out = vec![0u8; 65536];
    let mut now = pair.now;
    let mut i = 0usize;
    bencher.bench_local(|| {
        // 1200-byte packets at 10 Gbit/s: about a microsecond apart.
        now += Duration::from_nanos(960);
        one_packet(&mut pair, now, &pkts[i % pkts.len()], &mut buf, &mut out);
        i += 1;
    });
}

/// Two endpoints (the bond with its sealing, as the daemon runs it) over `paths` UDP
/// paths, up, pacing out of the way.
fn ready_endpoints(sealed: bool, paths: usize) -> Pair<Endpoint> {
    let seal = |tag: u64, mine: &PrivateKey, peer: &PrivateKey| SealConfig {
        sealing: if sealed {
            Sealing::Keys {
                tunnel: Box::new(TunnelConfig::new(mine.clone(), peer.public_key(), [7; 32])),
                rekey_every: None,
            }
        } else {
            Sealing::None
        },
        plain_tag: tag,
        roam_quiet: Duration::from_millis(300),
    };
    let (ka, kb) = (
        PrivateKey::generate(&mut OsRng),
        PrivateKey::generate(&mut OsRng),
    );
    let bond = BondConfig::default();
    let b_bond = BondConfig {
        seed: 1,
        epoch: 1,
        ..BondConfig::default()
    };
    let a = Endpoint::new(
        EndpointConfig {
            bond,
            seal: seal(0xa, &ka, &kb),
        },
        Instant::ZERO,
    );
    let b = Endpoint::new(
        EndpointConfig {
            bond: b_bond,
            seal: seal(0xb, &kb, &ka),
        },
        Instant::ZERO,
    );
    let mut pair = Pair::of(a, b);
    add_fast_paths(&mut pair, paths);
    pair
}

/// The same as `per_packet` through whole endpoints: sealing (or plain mode's tags) on
/// top of the bond, adaptive scheduler, 3 paths.
#[divan::bench(args = ["plain", "sealed"], sample_count = 30, sample_size = 2000)]
fn endpoint_per_packet(bencher: divan::Bencher, mode: &str) {
    let mut pair = ready_endpoints(mode == "sealed", 3);
    let pkts: Vec<Vec<u8>> = (0..64)
        .map(|i| udp_packet(i, 1200, 40000 + i as u16, 5001))
        .collect();
    let mut buf = vec![0u8; 65536 + 64];
    let mut out = vec![0u8; 65536];
    let mut now = pair.now;
    let mut i = 0usize;
    bencher.bench_local(|| {
        now += Duration::from_nanos(960);
        pair.a.handle_tun_packet(now, &pkts[i % pkts.len()]);
        while let Some(t) = pair.a.poll_transmit(now, &mut buf) {
            let src = address(usize::from(t.path.0), Side::A);
            pair.b.handle_udp(now, t.path, src, &mut buf[..t.len]);
        }
        while let Some(t) = pair.b.poll_transmit(now, &mut buf) {
            let src = address(usize::from(t.path.0), Side::B);
            pair.a.handle_udp(now, t.path, src, &mut buf[..t.len]);
        }
        while let Some(n) = pair.b.poll_deliver(now, &mut out) {
            divan::black_box(&out[..n]);
        }
        i += 1;
    });
}
