//! CPU cost of the core data path, per packet: TUN packet in at A, scheduled, paced,
//! framed, parsed at B, reordered, delivered; acks back to A. No sockets: this is what
//! braid's own logic costs on top of the syscalls.
//!
//! Run: `cargo bench -p braid-core --bench datapath`

use core::time::Duration;

use braid_core::bond::BondConfig;
use braid_core::crypto::{Cipher, OsRng, PrivateKey, TunnelConfig};
use braid_core::sim::{udp_packet, Node, Pair};
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
    pair.add_unpaced_paths(paths);
    pair
}

/// Runs the bench's turns over `pair`, a packet a microsecond (1200 bytes: 9.6 Gbit/s;
/// the clock counts whole microseconds), and checks afterwards that B delivered what A was
/// given: a bench whose bond delivers nothing times the wrong thing.
fn bench_turns<N: Node>(bencher: divan::Bencher, pair: &mut Pair<N>) {
    let pkts: Vec<Vec<u8>> = (0..64)
        .map(|i| udp_packet(i, 1200, 40000 + i as u16, 5001))
        .collect();
    let mut now = pair.now;
    let (mut sent, mut delivered) = (0usize, 0usize);
    bencher.bench_local(|| {
        now += Duration::from_micros(1);
        delivered += pair.exchange(now, &pkts[sent % pkts.len()]);
        sent += 1;
    });
    // Held for the equalization's microsecond: the last turn's packets at most.
    assert!(
        delivered + 8 >= sent,
        "the bench's bond delivered {delivered} of {sent} packets"
    );
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
    bench_turns(bencher, &mut pair);
}

/// Packets a TUN superframe of 64 KB splits into (1448-byte TCP segments).
const RUN: usize = 45;

/// `per_packet`'s adaptive bond with packets in runs of [`RUN`] at one instant, as the
/// daemon hands over a superframe's segments; divan gives the time of a run and the
/// packets a second.
#[divan::bench(sample_count = 30, sample_size = 50)]
fn per_packet_in_runs(bencher: divan::Bencher) {
    let mut pair = ready_pair(SchedulerConfig::Adaptive, 3);
    let pkts: Vec<Vec<u8>> = (0..RUN)
        .map(|i| udp_packet(i as u64, 1200, 40000, 5001))
        .collect();
    let mut now = pair.now;
    let (mut sent, mut delivered) = (0usize, 0usize);
    bencher
        .counter(divan::counter::ItemsCount::new(RUN))
        .bench_local(|| {
            // A run's 45 packets take 45 µs at 9.6 Gbit/s.
            now += Duration::from_micros(RUN as u64);
            delivered += pair.exchange_run(now, pkts.iter().map(Vec::as_slice));
            sent += RUN;
        });
    assert!(
        delivered + 2 * RUN >= sent,
        "the bench's bond delivered {delivered} of {sent} packets"
    );
}

/// Two endpoints (the bond with its sealing, as the daemon runs it) over `paths` UDP
/// paths, up, pacing out of the way.
fn ready_endpoints(cipher: Option<Cipher>, paths: usize) -> Pair<Endpoint> {
    let seal = |tag: u64, mine: &PrivateKey, peer: &PrivateKey| SealConfig {
        sealing: if let Some(cipher) = cipher {
            let mut tunnel = TunnelConfig::new(mine.clone(), peer.public_key(), [7; 32]);
            tunnel.cipher = cipher;
            Sealing::Keys {
                tunnel: Box::new(tunnel),
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
    pair.add_unpaced_paths(paths);
    pair
}

/// The same as `per_packet` through whole endpoints: sealing (or plain mode's tags) on
/// top of the bond, adaptive scheduler, 3 paths.
#[divan::bench(args = ["plain", "chacha20-poly1305", "aes-256-gcm"], sample_count = 30, sample_size = 2000)]
fn endpoint_per_packet(bencher: divan::Bencher, mode: &str) {
    let mut pair = ready_endpoints(Cipher::from_name(mode), 3);
    bench_turns(bencher, &mut pair);
}
