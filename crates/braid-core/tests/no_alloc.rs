//! After warm-up, carrying a packet allocates nothing: two sealed endpoints over two UDP
//! paths exchange traffic both ways (TUN packet in, sealed datagrams out, opened, reordered,
//! delivered; acks and probes back) while a counting allocator watches.
//!
//! The counter counts only while this test's thread turns it on, so the harness's own
//! buffers (made before) do not count.

use std::net::SocketAddr;
use std::time::Duration;

use braid_core::bond::{BondConfig, PathConfig};
use braid_core::crypto::{OsRng, PrivateKey, TunnelConfig};
use braid_core::sim::udp_packet;
use braid_core::{
    Endpoint, EndpointConfig, Instant, PathId, PathKind, SealConfig, Sealing, MAX_DATAGRAM,
};

#[path = "support/counting.rs"]
mod counting;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 7000))
}

fn endpoint(mine: &PrivateKey, peer: &PrivateKey, seed: u64, me: u8, peer_at: u8) -> Endpoint {
    let mut bond = BondConfig {
        seed,
        ..BondConfig::default()
    };
    if seed == 1 {
        bond.epoch = !bond.epoch;
    }
    let tunnel = TunnelConfig::new(
        mine.clone(),
        peer.public_key(),
        *PrivateKey::generate(&mut OsRng).as_bytes(),
    );
    let seal = SealConfig {
        sealing: Sealing::Keys {
            tunnel: Box::new(tunnel),
            rekey_every: None,
        },
        plain_tag: u64::from(me),
        roam_quiet: Duration::from_millis(300),
    };
    let mut ep = Endpoint::new(EndpointConfig { bond, seal }, Instant::ZERO);
    for i in 0..2u8 {
        let cfg = PathConfig {
            name: format!("p{i}"),
            ..PathConfig::default()
        };
        let remote = Some(addr(peer_at + i));
        ep.add_path(Instant::ZERO, cfg, PathKind::Udp { remote }, None)
            .expect("a path");
    }
    ep
}

/// Everything `from` has to send goes straight into `to` (zero delay, no loss).
fn carry(now: Instant, from: &mut Endpoint, to: &mut Endpoint, buf: &mut [u8], src: u8) {
    while let Some(t) = from.poll_transmit(now, buf) {
        let path = PathId(t.path.0);
        let Some(d) = buf.get_mut(..t.len) else {
            continue;
        };
        to.handle_udp(now, path, addr(src + path.0 as u8), d);
    }
}

/// Two endpoints and the buffers that carry between them.
struct Harness {
    a: Endpoint,
    b: Endpoint,
    buf: Vec<u8>,
    out: Vec<u8>,
    packets: Vec<Vec<u8>>,
    delivered: u64,
}

impl Harness {
    /// One step at `now`: a packet into each end's TUN, timers, everything carried across,
    /// everything delivered.
    fn step(&mut self, now: Instant, i: usize) {
        self.a.handle_tun_packet(now, &self.packets[i % 64]);
        self.b.handle_tun_packet(now, &self.packets[(i + 7) % 64]);
        self.a.handle_timeout(now);
        self.b.handle_timeout(now);
        carry(now, &mut self.a, &mut self.b, &mut self.buf, 1);
        carry(now, &mut self.b, &mut self.a, &mut self.buf, 11);
        while self.b.poll_deliver(now, &mut self.out).is_some() {
            self.delivered += 1;
        }
        while self.a.poll_deliver(now, &mut self.out).is_some() {}
        while self.a.poll_event().is_some() {}
        while self.b.poll_event().is_some() {}
    }
}

#[test]
fn carrying_a_packet_allocates_nothing_after_warm_up() {
    let (ka, kb) = (
        PrivateKey::generate(&mut OsRng),
        PrivateKey::generate(&mut OsRng),
    );
    let mut h = Harness {
        a: endpoint(&ka, &kb, 0, 1, 11),
        b: endpoint(&kb, &ka, 1, 11, 1),
        buf: vec![0u8; MAX_DATAGRAM],
        out: vec![0u8; MAX_DATAGRAM],
        packets: (0..64).map(|i| udp_packet(i, 1200, 40000, 5001)).collect(),
        delivered: 0,
    };
    let (mut now, step) = (Instant::ZERO, Duration::from_micros(200));
    // Warm-up: 3 s of traffic (handshake, paths up, queues and buffers at their size).
    for i in 0..15_000 {
        now += step;
        h.step(now, i);
    }
    let warm = h.delivered;
    assert!(warm > 10_000, "warm-up carried {warm} packets");
    // 2 s more, counted.
    counting::on(true);
    for i in 0..10_000 {
        now += step;
        h.step(now, i);
    }
    counting::on(false);
    let carried = h.delivered - warm;
    let allocs = counting::allocations();
    assert!(carried >= 9_900, "carried {carried}");
    assert_eq!(allocs, 0, "{allocs} allocations for {carried} packets");
    // The counter counts (the assertion above is not vacuous).
    counting::on(true);
    let v = std::hint::black_box(vec![1u8; 10]);
    counting::on(false);
    drop(v);
    assert_eq!(counting::allocations(), 1);
}
