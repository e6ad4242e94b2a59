//! The endpoint end to end: two endpoints over emulated UDP paths in virtual time (the
//! simulator's `Pair<Endpoint>`), with keys and without.

use core::time::Duration;
use std::collections::HashSet;

use super::*;
use crate::crypto::{OsRng, PrivateKey, TunnelConfig};
use crate::sim::{packet_seq, udp_packet, Pair, Side};

const MBIT: u64 = 1_000_000;
const SIZE: usize = 1200;

fn seal_config(sealing: Sealing, tag: u64) -> SealConfig {
    SealConfig {
        sealing,
        plain_tag: tag,
        roam_quiet: Duration::from_millis(300),
    }
}

/// The two ends' configs: with keys (each end's own key pair) or without.
pub(super) fn configs(sealed: bool) -> (EndpointConfig, EndpointConfig) {
    let (ka, kb) = (
        PrivateKey::generate(&mut OsRng),
        PrivateKey::generate(&mut OsRng),
    );
    let sealing = |mine: &PrivateKey, peer: &PrivateKey| {
        if !sealed {
            return Sealing::None;
        }
        let seed = *PrivateKey::generate(&mut OsRng).as_bytes();
        Sealing::Keys {
            tunnel: Box::new(TunnelConfig::new(mine.clone(), peer.public_key(), seed)),
            rekey_every: None,
        }
    };
    let bond = BondConfig::default();
    let mut b_bond = bond.clone();
    b_bond.seed = 1;
    b_bond.epoch = !bond.epoch;
    (
        EndpointConfig {
            bond,
            seal: seal_config(sealing(&ka, &kb), 0xa),
        },
        EndpointConfig {
            bond: b_bond,
            seal: seal_config(sealing(&kb, &ka), 0xb),
        },
    )
}

fn pair(sealed: bool, delays_ms: &[u64]) -> (Pair<Endpoint>, EndpointConfig) {
    let (a, b) = configs(sealed);
    let mut pair = Pair::of(
        Endpoint::new(a, Instant::ZERO),
        Endpoint::new(b.clone(), Instant::ZERO),
    );
    for (i, &delay) in delays_ms.iter().enumerate() {
        let emu = EmuConfig {
            rate_bps: 20 * MBIT,
            delay: Duration::from_millis(delay),
            seed: i as u64 + 1,
            ..EmuConfig::default()
        };
        let path = PathConfig {
            name: format!("p{i}"),
            ..PathConfig::default()
        };
        pair.add_path(path, emu);
    }
    (pair, b)
}

/// Feed A's TUN with numbered UDP packets at `mbit` from `from` to `until`; returns the
/// number sent.
fn feed(pair: &mut Pair<Endpoint>, mbit: u64, from: Instant, until: Instant) -> u64 {
    let mut sent = 0u64;
    pair.run_until(until, |p| {
        if p.now < from {
            return;
        }
        let due = (p.now - from).as_micros() as u64 * mbit / (SIZE as u64 * 8);
        while sent < due {
            p.a.handle_tun_packet(p.now, &udp_packet(sent, SIZE, 40000, 5001));
            sent += 1;
        }
    });
    sent
}

/// Distinct packet numbers B delivered, and whether they came in order.
fn delivered(pair: &Pair<Endpoint>) -> (usize, bool) {
    let seqs: Vec<u64> = pair
        .delivered_b
        .iter()
        .filter_map(|p| packet_seq(p))
        .collect();
    let distinct: HashSet<u64> = seqs.iter().copied().collect();
    (distinct.len(), seqs.windows(2).all(|w| w[0] < w[1]))
}

/// Ten seconds of a sealed bond over two paths run in virtual time: the handshake
/// completes within a round trip of the slower path, the paths come up, and then every
/// packet offered below the paths' rate is delivered, in order, sealed on the way (the
/// sealer's counters say so) and opened at the far end.
#[test]
fn a_sealed_bond_carries_traffic_in_virtual_time() {
    let (mut pair, _) = pair(true, &[5, 20]);
    let mut up = None;
    pair.run_until(Instant::from_millis(100), |p| {
        if up.is_none() && p.a.sealer().established(p.now) {
            up = Some(p.now);
        }
    });
    // Both ends initiate at once (a collision, which the tunnel resolves): at most a round
    // trip on the slower (20 ms) path.
    let up = up.expect("a session");
    assert!(up <= Instant::from_millis(45), "{up:?}");
    assert!(pair.a.sealer().established(pair.now));
    let t0 = Instant::from_millis(1000);
    pair.run_until(t0, |_| {});
    assert!(pair.b.sealer().established(pair.now));
    assert!(pair.a.bond().status().paths.iter().all(|p| p.state == "up"));
    let rejected =
        |p: &Pair<Endpoint>| p.b.sealer().tunnel().map(|t| t.counters().rejected_total());
    // (The crossed initiations of the start left a few refusals.)
    let rejected_at_start = rejected(&pair);
    let end = t0 + Duration::from_secs(10);
    let sent = feed(&mut pair, 28, t0, end);
    pair.run_until(end + Duration::from_secs(1), |_| {});
    let (got, in_order) = delivered(&pair);
    assert!(sent > 29_000, "{sent}");
    assert_eq!(got as u64, sent, "every packet arrives");
    assert!(in_order);
    let sealed = pair.a.sealer().tunnel_counter("sealed").expect("keys");
    assert!(sealed >= sent, "{sealed} sealed for {sent} packets");
    assert_eq!(
        rejected(&pair),
        rejected_at_start,
        "nothing refused once up"
    );
    let st = pair.b.bond().status();
    assert!(
        st.paths.iter().all(|p| p.rx_packets > 1000),
        "both paths carry"
    );
}

/// Without keys the first datagram each way names no tag the receiver knows: it is
/// refused and answered with a hint, after which everything flows.
#[test]
fn a_plain_bond_learns_the_peers_tag_and_carries_traffic() {
    let (mut pair, _) = pair(false, &[5, 20]);
    let t0 = Instant::from_millis(500);
    pair.run_until(t0, |_| {});
    let end = t0 + Duration::from_secs(3);
    let sent = feed(&mut pair, 8, t0, end);
    pair.run_until(end + Duration::from_secs(1), |_| {});
    let (got, in_order) = delivered(&pair);
    assert_eq!(got as u64, sent);
    assert!(in_order);
    for e in [&pair.a, &pair.b] {
        let t = e.sealer().tag_counters();
        assert!(t.hints_sent >= 1 && t.peer_tag_changes == 1, "{t:?}");
    }
}

/// B restarts (a new endpoint: new keys' session, new epoch, new tag) while A sends:
/// traffic flows again within a second of virtual time.
#[test]
fn a_restarted_sealed_peer_is_back_within_a_second() {
    for sealed in [true, false] {
        let (mut pair, b_cfg) = pair(sealed, &[5, 20]);
        let t0 = Instant::from_millis(200);
        pair.run_until(t0, |_| {});
        feed(&mut pair, 8, t0, t0 + Duration::from_secs(2));
        let restart = pair.now;
        let mut cfg = b_cfg.clone();
        cfg.bond.epoch = b_cfg.bond.epoch.wrapping_add(7);
        cfg.seal.plain_tag = 0xb2;
        pair.replace(Side::B, Endpoint::new(cfg, restart));
        pair.delivered_b.clear();
        let until = restart + Duration::from_secs(3);
        feed(&mut pair, 8, restart, until);
        let (got, _) = delivered(&pair);
        // 3 s at 8 Mbit/s is 2500 packets: most of them arrive.
        assert!(
            got > 2000,
            "sealed {sealed}: {got} delivered after the restart"
        );
    }
}

/// A path whose peer address is not configured learns it from the peer's sealed
/// datagrams, and says so once.
#[test]
fn a_udp_path_learns_its_peer_from_sealed_datagrams() {
    let (a, b) = configs(true);
    let mut pair = Pair::of(
        Endpoint::new(a, Instant::ZERO),
        Endpoint::new(b, Instant::ZERO),
    );
    pair.add_path(PathConfig::default(), EmuConfig::default());
    let id = pair.a_path(0);
    let b_id = pair.b.bond().status().paths[0].id;
    pair.b.set_remote(PathId(b_id), None);
    pair.run_until(Instant::from_millis(500), |_| {});
    assert_eq!(
        pair.b.remote(PathId(b_id)),
        Some(crate::sim::address(0, Side::A))
    );
    let mut moved = 0;
    while let Some(e) = pair.b.poll_event() {
        if let Event::PeerMoved { from: None, .. } = e {
            moved += 1;
        }
    }
    assert_eq!(moved, 1);
    assert!(pair.a.bond().path_state(id).is_some());
}

/// A path with an emulator inside the endpoint (`[path.emulate]`): what the bond sends
/// on it waits the emulated delay before it is sealed and handed out.
#[test]
fn an_emulated_path_delays_what_it_carries() {
    let (a, _) = configs(false);
    let mut ep = Endpoint::new(a, Instant::ZERO);
    let emu = EmuConfig {
        delay: Duration::from_millis(40),
        ..EmuConfig::default()
    };
    let remote = Some(crate::sim::address(0, Side::B));
    let id = ep
        .add_path(
            Instant::ZERO,
            PathConfig::default(),
            PathKind::Udp { remote },
            Some(emu),
        )
        .unwrap();
    let mut buf = vec![0u8; MAX_DATAGRAM + 64];
    let mut at = Vec::new();
    for ms in 0..100u64 {
        let now = Instant::from_millis(ms);
        ep.handle_timeout(now);
        while let Some(t) = ep.poll_transmit(now, &mut buf) {
            assert_eq!((t.path, t.to), (id, remote));
            at.push((ms, t.kind));
        }
    }
    // The bond probes at once; its first probe leaves the emulator 40 ms later.
    let first = at
        .iter()
        .find(|(_, k)| *k == TransmitKind::Control)
        .expect("a probe");
    assert_eq!(first.0, 40);
    assert_eq!(ep.emulated(id), Some(0));
}

/// A sealed bond over two serial lines at 115200 bd, CSLIP, in virtual time: the
/// endpoints frame and pace what they send (each line's clock, its control lane, its
/// measured rate), the sim carries the bytes at the UART's rate. Twenty seconds of a
/// stream at 150 kbit/s (more than one line carries) arrive in order, over both lines.
#[test]
fn a_sealed_bond_over_two_serial_lines_runs_in_virtual_time() {
    let (a, b) = configs(true);
    let mut pair = Pair::of(
        Endpoint::new(a, Instant::ZERO),
        Endpoint::new(b, Instant::ZERO),
    );
    let line = crate::serial::LineConfig {
        baud: 115_200,
        framing: crate::serial::Framing::Cslip,
        mtu: 1420,
        raw_ip: false,
        crc: false,
        auto_bps: true,
    };
    for i in 0..2 {
        let cfg = PathConfig {
            name: format!("s{i}"),
            bps: crate::serial::serial_bps(115_200, line.framing, line.mtu),
            ack_delay: Some(crate::serial::serial_ack_delay(115_200, line.mtu)),
            fixed_rate: true,
            ..PathConfig::default()
        };
        pair.add_line(cfg, line, Duration::from_millis(2));
    }
    let t0 = Instant::from_millis(2000);
    pair.run_until(t0, |_| {});
    assert!(pair.a.sealer().established(pair.now) && pair.b.sealer().established(pair.now));
    assert!(pair.a.bond().status().paths.iter().all(|p| p.state == "up"));
    let end = t0 + Duration::from_secs(20);
    let size = 500usize;
    let mut sent = 0u64;
    pair.run_until(end, |p| {
        let due = (p.now - t0).as_micros() as u64 * 150_000 / (size as u64 * 8) / 1_000_000;
        while sent < due {
            p.a.handle_tun_packet(p.now, &udp_packet(sent, size, 40000, 5001));
            sent += 1;
        }
    });
    pair.run_until(end + Duration::from_secs(2), |_| {});
    let (got, _) = delivered(&pair);
    assert!(sent >= 740, "{sent}");
    // Sealed frames differ run to run (fresh keys: the ciphertext's SLIP escapes), so the
    // figures do too. The stream fills the lines to about 90 %, and a line's queue in
    // braid holds only 100 ms (`queue_max_delay`: two 500-byte packets at 115200 bd), so
    // when a run's escapes come in a burst a few packets are dropped there, counted: 0-7
    // in 40 runs on 2026-11-27, and up to 15 missing (2 %) in 60 more (the old bound of
    // 1 % failed 2 of those). Nothing else may go missing. A few more (0.5 to 5.4 % in 45 runs)
    // arrive after the receiver gave up waiting for them (delivered late, not lost).
    let dropped = pair.a.bond().status().counters.drop_queue;
    assert_eq!(
        got as u64 + dropped,
        sent,
        "every packet arrives or is a counted queue drop"
    );
    assert!(dropped * 100 <= sent * 3, "{dropped} of {sent} dropped");
    let seqs: Vec<u64> = pair
        .delivered_b
        .iter()
        .filter_map(|p| packet_seq(p))
        .collect();
    let late = seqs.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(late * 100 <= got * 8, "{late} of {got} out of order");
    let lines: Vec<_> = (0..2)
        .map(|i| pair.b.line(PathId(i)).expect("a line").counters())
        .collect();
    for c in &lines {
        assert!(c.rx_frames > 200, "{c:?}");
        assert_eq!((c.rx_bad_frames, c.rx_cslip_errors), (0, 0), "{c:?}");
    }
}

/// What a data packet costs on a UDP path, sealed and plain, through two whole endpoints
/// driven by hand: the datagram the daemon sends for a TUN packet of `n` bytes is `n + 37`
/// bytes (`docs/wire.md`, Overhead: sealed, an 8-byte header, the 13-byte folded data
/// header and the 16-byte tag; plain, the 20-byte data header in the 17-byte tag
/// envelope), and the packet arrives whole. With the 28 bytes of IPv4 and UDP that is 65
/// bytes more than the bare TCP segment, a ceiling of (1448 - 65) / 1448 = 0.955 of the
/// bare path's TCP goodput on a 1500-byte underlay. Before wire version 4 a sealed one
/// cost `n + 52`.
#[test]
fn a_data_packet_costs_37_bytes_sealed_or_plain() {
    const BRAID_BYTES: usize = 37;
    assert_eq!(
        crate::wire::DATA_HEADER_LEN + udp_overhead(true),
        BRAID_BYTES
    );
    assert_eq!(
        crate::wire::DATA_HEADER_LEN + udp_overhead(false),
        BRAID_BYTES
    );
    // The ceiling docs/wire.md states, from a 1500-byte underlay.
    let bare_payload = 1500 - 20 - 32; // IPv4, TCP with timestamps
    let tunnelled = bare_payload - (20 + 8 + BRAID_BYTES);
    assert!(tunnelled as f64 / bare_payload as f64 >= 0.955);
    for sealed in [true, false] {
        let (mut a, mut b, (pa, aa), (pb, ba)) = two_on_one_path(sealed);
        let t0 = Instant::ZERO;
        let packet = udp_packet(7, 1000, 40000, 5001);
        let mut buf = vec![0u8; MAX_DATAGRAM + 64];
        let mut data = Vec::new();
        let mut got = Vec::new();
        for ms in 0..2000 {
            let now = t0 + Duration::from_millis(ms);
            a.handle_timeout(now);
            b.handle_timeout(now);
            if ms == 1500 {
                a.handle_tun_packet(now, &packet);
            }
            while let Some(tx) = a.poll_transmit(now, &mut buf) {
                if tx.kind == TransmitKind::Data {
                    data.push(tx.len);
                }
                let mut d = buf[..tx.len].to_vec();
                b.handle_udp(now, pb, aa, &mut d);
            }
            while let Some(tx) = b.poll_transmit(now, &mut buf) {
                let mut d = buf[..tx.len].to_vec();
                a.handle_udp(now, pa, ba, &mut d);
            }
            while let Some(n) = b.poll_deliver(now, &mut buf) {
                got.push(buf[..n].to_vec());
            }
        }
        assert_eq!(data, [packet.len() + BRAID_BYTES], "sealed: {sealed}");
        assert_eq!(got.len(), 1, "sealed: {sealed}");
        assert_eq!(got[0], packet, "sealed: {sealed}");
    }
}

/// Two endpoints with one UDP path between them, driven by hand: the endpoints and each
/// one's path id and address.
#[allow(clippy::type_complexity)]
fn two_on_one_path(
    sealed: bool,
) -> (
    Endpoint,
    Endpoint,
    (PathId, SocketAddr),
    (PathId, SocketAddr),
) {
    let (ca, cb) = configs(sealed);
    let t0 = Instant::ZERO;
    let mut a = Endpoint::new(ca, t0);
    let mut b = Endpoint::new(cb, t0);
    let (aa, ba): (SocketAddr, SocketAddr) = (
        "192.0.2.1:7000".parse().expect("address"),
        "192.0.2.2:7000".parse().expect("address"),
    );
    let path = || PathConfig {
        name: "p0".into(),
        ..PathConfig::default()
    };
    let pa = a
        .add_path(t0, path(), PathKind::Udp { remote: Some(ba) }, None)
        .expect("path");
    let pb = b
        .add_path(t0, path(), PathKind::Udp { remote: Some(aa) }, None)
        .expect("path");
    (a, b, (pa, aa), (pb, ba))
}

/// Two seconds of two endpoints on one path, driven by hand in 1 ms steps: 50 numbered
/// packets go into A's TUN at 1.5 s; each step `a_to_b(now, a, b)` carries A's datagrams
/// to B, and B's go back as they are. The packet numbers B delivered, in order.
fn fifty_packets(
    a: &mut Endpoint,
    b: &mut Endpoint,
    (pa, ba): (PathId, SocketAddr),
    mut a_to_b: impl FnMut(Instant, &mut Endpoint, &mut Endpoint) -> Vec<u64>,
) -> Vec<u64> {
    let mut buf = vec![0u8; MAX_DATAGRAM + 64];
    let mut got = Vec::new();
    for ms in 0..2000u64 {
        let now = Instant::ZERO + Duration::from_millis(ms);
        a.handle_timeout(now);
        b.handle_timeout(now);
        if ms == 1500 {
            for i in 0..50 {
                a.handle_tun_packet(now, &udp_packet(i, 1000, 40000, 5001));
            }
        }
        // Packets handed back at once come before any polled after them.
        got.extend(a_to_b(now, a, b));
        while let Some(tx) = b.poll_transmit(now, &mut buf) {
            let mut d = buf[..tx.len].to_vec();
            a.handle_udp(now, pa, ba, &mut d);
        }
        while let Some(n) = b.poll_deliver(now, &mut buf) {
            got.extend(packet_seq(&buf[..n]));
        }
    }
    got
}

/// `poll_transmit_deferred`: sealed data comes laid out but plaintext with a job that
/// seals it; unsealed it is refused by the peer (bad tag); sealed in any order (here
/// backwards, as worker threads might) and sent in the order given, it all arrives, in
/// order. Plain mode's datagrams come ready, without a job. (Sent out of order on one
/// path they would not all arrive in order: the receiver takes a gap that a path has
/// passed for a loss.)
#[test]
fn deferred_sealing_may_run_in_any_order() {
    for sealed in [true, false] {
        let (mut a, mut b, (pa, aa), (pb, ba)) = two_on_one_path(sealed);
        let mut buf = vec![0u8; MAX_DATAGRAM + 64];
        let mut jobs = 0;
        let got = fifty_packets(&mut a, &mut b, (pa, ba), |now, a, b| {
            let mut out = Vec::new();
            while let Some((tx, job)) = a.poll_transmit_deferred(now, &mut buf) {
                assert!(job.is_none() || tx.kind != TransmitKind::Handshake);
                assert_eq!(job.as_ref().map_or(tx.len, |j| j.datagram_len()), tx.len);
                out.push((buf[..tx.len].to_vec(), job));
            }
            for (d, job) in out.iter_mut().rev() {
                if let Some(job) = job.take() {
                    jobs += 1;
                    let refused = b.sealer().tunnel_counter("bad_tag");
                    b.handle_udp(now, pb, aa, &mut d.clone());
                    assert_eq!(
                        b.sealer().tunnel_counter("bad_tag"),
                        refused.map(|n| n + 1),
                        "an unsealed datagram is refused"
                    );
                    job.seal(d).expect("laid out in this buffer");
                }
            }
            for (mut d, _) in out {
                b.handle_udp(now, pb, aa, &mut d);
            }
            Vec::new()
        });
        assert_eq!(got, (0..50).collect::<Vec<_>>(), "sealed: {sealed}");
        if sealed {
            assert!(jobs >= 50, "{jobs} jobs");
        } else {
            assert_eq!(jobs, 0);
        }
    }
}

/// Datagrams opened on another thread (`OpenKeys::open` in a scoped thread, as the
/// daemon's workers do) and then handed over with what was found: all delivered in
/// order; a copy of one already taken is refused by the replay window as before, a
/// tampered one fails its tag and is counted, and keys taken before the session existed
/// leave its datagrams untouched for the endpoint to open itself.
#[test]
fn datagrams_opened_elsewhere_keep_every_check() {
    let (mut a, mut b, (pa, aa), (pb, ba)) = two_on_one_path(true);
    let mut buf = vec![0u8; MAX_DATAGRAM + 64];
    let stale_keys = b.open_keys();
    let (mut untouched, mut opened) = (0, 0);
    let (mut last_seq, mut seqs) = (None, 0);
    let mut copy = None;
    let got = fifty_packets(&mut a, &mut b, (pa, ba), |now, a, b| {
        let mut out = Vec::new();
        while let Some(tx) = a.poll_transmit(now, &mut buf) {
            if tx.kind == TransmitKind::Data && copy.is_none() {
                copy = Some(buf[..tx.len].to_vec());
            }
            out.push(buf[..tx.len].to_vec());
        }
        // Before the data the keys are those taken before any session.
        let keys = if now < Instant::from_millis(1500) {
            stale_keys.clone()
        } else {
            b.open_keys()
        };
        let pre: Vec<Preopen> = std::thread::scope(|s| {
            s.spawn(|| out.iter_mut().map(|d| keys.open(d)).collect())
                .join()
                .expect("the opener")
        });
        let mut passed = Vec::new();
        for (mut d, pre) in out.into_iter().zip(pre) {
            // Data opened elsewhere says its `seq`: one after another, as A numbered them.
            if let Some(seq) = crate::opened_seq(&d, pre) {
                assert!(
                    last_seq.is_none_or(|l: u32| seq == l.wrapping_add(1)),
                    "{seq}"
                );
                last_seq = Some(seq);
                seqs += 1;
            }
            match pre {
                Preopen::Untouched => untouched += 1,
                Preopen::Opened(_) => opened += 1,
                Preopen::Failed => panic!("a datagram of A failed its tag"),
            }
            b.handle_udp_preopened(now, pb, aa, &mut d, pre, |p| {
                passed.extend(packet_seq(p));
            });
        }
        passed
    });
    assert_eq!(got, (0..50).collect::<Vec<_>>());
    assert!(opened >= 50, "{opened} opened elsewhere");
    assert!(seqs >= 50, "{seqs} data datagrams said their seq");
    assert!(
        untouched > 0,
        "the handshake and the first session's datagrams"
    );
    let now = Instant::from_millis(2000);
    let copy = copy.expect("A sent data");
    let counter = |b: &Endpoint, name| b.sealer().tunnel_counter(name).unwrap_or(0);
    let (replayed, bad_tag) = (counter(&b, "replayed"), counter(&b, "bad_tag"));
    let keys = b.open_keys();
    let mut again = copy.clone();
    let pre = keys.open(&mut again);
    assert!(matches!(pre, Preopen::Opened(_)), "{pre:?}");
    b.handle_udp_preopened(now, pb, aa, &mut again, pre, |p| {
        panic!("a copy delivered: {p:?}")
    });
    assert_eq!(counter(&b, "replayed"), replayed + 1, "the copy is refused");
    let mut tampered = copy;
    tampered[12] ^= 1;
    let pre = keys.open(&mut tampered);
    assert_eq!(pre, Preopen::Failed);
    b.handle_udp_preopened(now, pb, aa, &mut tampered, pre, |p| {
        panic!("a tampered datagram delivered: {p:?}")
    });
    assert_eq!(counter(&b, "bad_tag"), bad_tag + 1);
    assert!(b.poll_deliver(now, &mut buf).is_none());
}

/// A `raw-ip` line's packets come out of `poll_deliver_ref` (the daemon's way) whole and
/// in the order they were read, and the lent buffers go back to be read into again.
#[test]
fn a_raw_ip_lines_packets_are_lent_in_order() {
    let (a, _) = configs(false);
    let mut ep = Endpoint::new(a, Instant::ZERO);
    let line = crate::serial::LineConfig {
        baud: 115_200,
        framing: crate::serial::Framing::Slip,
        mtu: 1500,
        raw_ip: true,
        crc: false,
        auto_bps: false,
    };
    let cfg = PathConfig {
        name: "s0".into(),
        ..PathConfig::default()
    };
    let now = Instant::from_millis(1);
    let id = ep
        .add_path(now, cfg, PathKind::Line(line), None)
        .expect("a line");
    ep.line_opened(id);
    for round in 0..3u64 {
        // Three SLIP frames (END, packet, END) in one read; these bytes need no escapes.
        let pkts: Vec<Vec<u8>> = (0..3)
            .map(|k| udp_packet(round * 3 + k, 100, 40000, 5001))
            .collect();
        let mut bytes = Vec::new();
        for p in &pkts {
            assert!(!p.iter().any(|&b| b == 0xc0 || b == 0xdb));
            bytes.push(0xc0);
            bytes.extend_from_slice(p);
            bytes.push(0xc0);
        }
        ep.handle_line_bytes(now, id, &bytes);
        for p in &pkts {
            assert_eq!(ep.poll_deliver_ref(now), Some(&p[..]));
        }
        assert_eq!(ep.poll_deliver_ref(now), None);
    }
    // One buffer lent, the others back in the pool: none made beyond the first read's.
    assert!(ep.raw_ip_free.len() <= 3, "{}", ep.raw_ip_free.len());
}
