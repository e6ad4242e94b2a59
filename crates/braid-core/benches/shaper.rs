//! CPU cost of the HTB shaper per packet: one enqueue and one dequeue, with a standing
//! backlog so that every dequeue has classes to choose among, on a simulated clock that
//! advances by one packet time at the link rate (so tokens, not an empty tree, decide).
//!
//! The `enqueue_dequeue_*_classes` benches are the shaper alone (`enqueue_to`: the class
//! is given, no classifier). The daemon calls `enqueue`, which classifies first: the
//! `*_classified` benches measure that whole path, with the seed's four filters and with
//! one `/32` filter per leaf of the 1000-class tree (the classifier is a linear scan, so
//! there it costs far more than the shaper; `classify_seed_filters` is it alone).
//!
//! Run: `cargo bench -p braid-core --bench shaper`

use braid_core::shape::Classifier;
use braid_core::shape::{ClassId, ClassSpec, FilterSpec, Prefix, ShapeSpec, Shaper};
use braid_core::Instant;

fn main() {
    divan::main();
}

const PACKET: usize = 1400;
const BACKLOG: usize = 64;
/// Rounds run before measuring (several times the 1000-class tree's leaf count).
const WARMUP: usize = 20_000;
/// The seed's household (`scenarios/htb-seed.tc`, as `braid tc-import` reads it: the tc
/// reader is the program's, `braid::config::tc`), scaled to 10 Gbit/s so the bench is not
/// waiting on tokens.
fn seed_spec() -> ShapeSpec {
    const MBIT: u64 = 1_000_000;
    let root = ClassId::new(1, 1);
    let mut classes = vec![ClassSpec::new(root, None, 10 * MBIT)];
    classes[0].ceil_bps = Some(10 * MBIT);
    let leaf = |minor: u16, rate_bps: u64, prio: u8| {
        let mut c = ClassSpec::new(ClassId::new(1, minor), Some(root), rate_bps);
        c.ceil_bps = Some(10 * MBIT);
        c.prio = prio;
        c
    };
    classes.push(leaf(0x10, 1_900_000, 1));
    classes.push(leaf(0x11, 2_900_000, 1));
    classes.push(leaf(0x12, 4_900_000, 1));
    classes.push(leaf(0x13, 300_000, 0));
    let filter = |prio: u32, src: &str, minor: u16| FilterSpec {
        prio,
        src: Some(Prefix::parse(src).expect("seed prefix")),
        class: ClassId::new(1, minor),
        ..FilterSpec::default()
    };
    let filters = vec![
        filter(1, "192.168.1.110", 0x10),
        filter(1, "192.168.1.111", 0x11),
        filter(1, "192.168.1.112", 0x12),
        filter(0xC000, "0.0.0.0/0", 0x13), // tc's `prio 0`: the kernel's first automatic priority
    ];
    let mut spec = ShapeSpec {
        link_bps: None,
        default_class: Some(ClassId::new(1, 0x13)),
        classes,
        filters,
        ..ShapeSpec::default()
    };
    for c in &mut spec.classes {
        c.rate_bps *= 1000;
        c.ceil_bps = c.ceil_bps.map(|b| b * 1000);
    }
    spec.link_bps = Some(10_000_000_000);
    spec
}

/// Root, 10 inner classes, 989 leaves (1000 classes), prios 0-7 spread over the leaves.
fn thousand() -> ShapeSpec {
    let root = ClassId::new(1, 1);
    let mut classes = vec![ClassSpec::new(root, None, 10_000_000_000)];
    for i in 0..10u16 {
        let mut c = ClassSpec::new(ClassId::new(1, 0x100 + i), Some(root), 1_000_000_000);
        c.ceil_bps = Some(10_000_000_000);
        classes.push(c);
    }
    for i in 0..989u16 {
        let parent = ClassId::new(1, 0x100 + i % 10);
        let mut c = ClassSpec::new(ClassId::new(1, 0x1000 + i), Some(parent), 1_000_000);
        c.ceil_bps = Some(10_000_000_000);
        c.prio = (i % 8) as u8;
        c.quantum = Some(1514);
        classes.push(c);
    }
    ShapeSpec {
        link_bps: Some(10_000_000_000),
        default_class: Some(ClassId::new(1, 0x1000)),
        classes,
        ..ShapeSpec::default()
    }
}

fn leaves(spec: &ShapeSpec) -> Vec<ClassId> {
    spec.classes
        .iter()
        .filter(|c| !spec.classes.iter().any(|d| d.parent == Some(c.id)))
        .map(|c| c.id)
        .collect()
}

/// The 1000-class tree with one filter per leaf: leaf `k` takes packets to 10.0.k/32.
fn thousand_filtered() -> ShapeSpec {
    let mut spec = thousand();
    spec.filters = leaves(&spec)
        .into_iter()
        .enumerate()
        .map(|(k, class)| FilterSpec {
            prio: 1,
            dst: Some(Prefix::new(leaf_addr(k).into(), 32)),
            class,
            ..FilterSpec::default()
        })
        .collect();
    spec
}

fn leaf_addr(k: usize) -> [u8; 4] {
    [10, 0, (k >> 8) as u8, k as u8]
}

/// A 1400-byte IPv4/UDP packet from `src` to `dst`.
fn ip_packet(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let mut p = vec![0u8; PACKET];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(PACKET as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p
}

/// How packets reach the leaves: the class given (`enqueue_to`), or classified
/// (`enqueue`), packet `k` of the list landing in leaf `k`.
enum Path {
    Direct,
    Classified(Vec<Vec<u8>>),
}

/// `n` rounds of enqueue + dequeue with a standing backlog, leaf after leaf.
fn run(bencher: divan::Bencher, spec: ShapeSpec, path: Path) {
    let leaves = leaves(&spec);
    let (mut shaper, _) = Shaper::new(&spec, 0, PACKET, Instant::ZERO).expect("shaper");
    let packet = vec![0x45u8; PACKET];
    let mut buf = vec![0u8; 2048];
    let mut now_ns: u64 = 0;
    let step_ns = PACKET as u64 * 8 * 1_000_000_000 / 10_000_000_000; // 1.12 µs at 10 Gbit/s
    let enqueue = |shaper: &mut Shaper, now: Instant, i: usize| match &path {
        Path::Direct => shaper.enqueue_to(now, leaves[i % leaves.len()], &packet),
        Path::Classified(packets) => shaper.enqueue(now, &packets[i % packets.len()]),
    };
    for i in 0..BACKLOG {
        let _ = enqueue(&mut shaper, Instant::ZERO, i);
    }
    let mut i = 0usize;
    let mut round = || {
        i += 1;
        now_ns += step_ns;
        let now = Instant::from_micros(now_ns / 1000);
        let _ = enqueue(&mut shaper, now, i);
        divan::black_box(shaper.dequeue(now, &mut buf));
    };
    // Steady state first: the buckets start full, so the first rounds would measure a
    // tree where nobody borrows and no mode ever changes.
    for _ in 0..WARMUP {
        round();
    }
    bencher
        .counter(divan::counter::ItemsCount::new(1usize))
        .bench_local(round);
}

// Many rounds per sample: one round is a few timer ticks, and the state moves on with
// every round, so divan's default of one round per sample measured only the first 100.
#[divan::bench(sample_count = 200, sample_size = 200)]
fn enqueue_dequeue_4_classes(bencher: divan::Bencher) {
    run(bencher, seed_spec(), Path::Direct);
}

#[divan::bench(sample_count = 200, sample_size = 200)]
fn enqueue_dequeue_1000_classes(bencher: divan::Bencher) {
    run(bencher, thousand(), Path::Direct);
}

/// The daemon's path on the seed: Alex, Betty, Carl and a guest, by source address.
#[divan::bench(sample_count = 200, sample_size = 200)]
fn enqueue_dequeue_4_classes_classified(bencher: divan::Bencher) {
    let hosts = (110..=113u8)
        .map(|h| ip_packet([192, 168, 1, h], [10, 200, 0, 2]))
        .collect();
    run(bencher, seed_spec(), Path::Classified(hosts));
}

/// The daemon's path on the 1000-class tree, one destination per leaf.
#[divan::bench(sample_count = 200, sample_size = 200)]
fn enqueue_dequeue_1000_classes_classified(bencher: divan::Bencher) {
    let spec = thousand_filtered();
    let packets = (0..leaves(&spec).len())
        .map(|k| ip_packet([192, 168, 1, 2], leaf_addr(k)))
        .collect();
    run(bencher, spec, Path::Classified(packets));
}

/// The classifier alone on the seed's four filters (the guest's catch-all last).
#[divan::bench]
fn classify_seed_filters(bencher: divan::Bencher) {
    let spec = seed_spec();
    let c = Classifier::new(&spec.filters, spec.default_class.unwrap_or_default());
    let mut pkt = [0u8; 28];
    pkt[0] = 0x45;
    pkt[2..4].copy_from_slice(&28u16.to_be_bytes());
    pkt[9] = 17;
    pkt[12..16].copy_from_slice(&[192, 168, 1, 113]);
    pkt[16..20].copy_from_slice(&[10, 200, 0, 2]);
    bencher.bench_local(|| c.classify(divan::black_box(&pkt)));
}
