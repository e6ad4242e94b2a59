//! CPU cost per frame of the layer-2 bond's decisions (`braid_core::ether::EtherBond`):
//! `transmit` of a 1514-byte TCP frame in each mode (xor and 802.3ad hash it with
//! layer3+4), and `receive` on an active member. What the daemon adds per frame is one
//! `read` and one `send` (a TAP and a packet socket); the lab measures that end to end.
//!
//! Run: `cargo bench -p braid-core --bench ether`

use braid_core::ether::{EtherBond, EtherConfig, Ingress, MemberConfig, MemberId, Mode};
use braid_core::hash::HashPolicy;
use braid_core::Instant;

fn main() {
    divan::main();
}

/// An Ethernet + IPv4 + TCP frame of 1514 bytes from port `sport`.
fn frame(sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 1514];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&1500u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&[10, 210, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 210, 0, 2]);
    ip[20..22].copy_from_slice(&sport.to_be_bytes());
    ip[22..24].copy_from_slice(&5201u16.to_be_bytes());
    ip[32] = 0x50;
    f
}

fn bond(mode: Mode) -> EtherBond {
    let mut c = EtherConfig::new([0x02, 0, 0, 0, 0, 1], mode);
    c.hash = HashPolicy::Layer34;
    let mut b = EtherBond::new(c).expect("a valid bond");
    let now = Instant::from_millis(1);
    for i in 0..3u8 {
        b.add_member(
            now,
            MemberConfig {
                mac: [0x02, 0, 0, 0, 1, i],
                link_up: true,
            },
        );
    }
    b
}

#[divan::bench(args = [Mode::RoundRobin, Mode::ActiveBackup, Mode::Xor, Mode::Broadcast])]
fn transmit(bencher: divan::Bencher, mode: Mode) {
    let mut b = bond(mode);
    let frames: Vec<Vec<u8>> = (0..16).map(|i| frame(40_000 + i)).collect();
    let now = Instant::from_millis(2);
    let mut i = 0usize;
    bencher.bench_local(|| {
        i = (i + 1) % frames.len();
        divan::black_box(b.transmit(now, divan::black_box(&frames[i])))
    });
}

#[divan::bench]
fn receive_on_the_active_member(bencher: divan::Bencher) {
    let mut b = bond(Mode::ActiveBackup);
    let mut f = frame(5201);
    // From the peer to us.
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    let now = Instant::from_millis(2);
    let active = b.active().unwrap_or(MemberId(0));
    bencher.bench_local(|| {
        let r = b.receive(now, active, divan::black_box(&f));
        debug_assert_eq!(r, Ingress::Deliver);
        divan::black_box(r)
    });
}
