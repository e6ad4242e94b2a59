//! Path encryption in network namespaces: the real `braid` binary on both ends of one veth
//! pair, with (for most tests) a UDP forwarder in namespace b between the two daemons, so
//! that the test can capture real sealed datagrams, replay them, and move side a's
//! apparent source port (NAT rebinding).
//!
//! ```text
//!   a: braid 10.201.0.1:7000  ->  fwd 10.201.0.2:7100 | fwd 10.201.0.2:7101 (or :7102)  ->  b: braid 10.201.0.2:7000
//! ```
//!
//! Needs root (namespaces, TUN): skipped with a message otherwise, unless
//! `BRAID_REQUIRE_NETNS=1`. Namespaces `braid-<pid>-<n>-{a,b}` are deleted even on failure.
mod common;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Result;
use braid_core::crypto::{OsRng, PrivateKey, PublicKey, Tunnel, TunnelConfig};
use braid_lab::netns::{self, now, Topology};
use braid_lab::run::Daemons;
use serde_json::Value;

const BOND_B: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
const A_PATH: &str = "10.201.0.1:7000";
const B_PATH: &str = "10.201.0.2:7000";
const FWD_A: &str = "10.201.0.2:7100";
const FWD_B: &str = "10.201.0.2:7101";
const FWD_B_MOVED: &str = "10.201.0.2:7102";

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address")
}

/// The two daemons' configs: keys, one path, `a_remote`/`b_remote` as given.
fn configs(a_remote: &str, b_remote: &str, extra: &str) -> (String, String) {
    let (ka, kb) = (
        PrivateKey::generate(&mut OsRng),
        PrivateKey::generate(&mut OsRng),
    );
    let cfg = |me: &PrivateKey, peer: &PrivateKey, side: u8, local: &str, remote: &str| {
        format!(
            "[bond]\ninterface = \"braid0\"\naddress = \"10.200.0.{side}/30\"\nprivate_key = \"{}\"\npeer_public_key = \"{}\"\n{extra}\n[[path]]\nname = \"p0\"\nlocal = \"{local}\"\nremote = \"{remote}\"\n",
            me.to_base64(),
            peer.public_key().to_base64()
        )
    };
    (
        cfg(&ka, &kb, 1, A_PATH, a_remote),
        cfg(&kb, &ka, 2, B_PATH, b_remote),
    )
}

/// What the forwarder shares with the test.
#[derive(Default)]
struct FwdState {
    /// Recent sealed data datagrams from a (transport kind, longer than a keepalive).
    captured: Vec<Vec<u8>>,
    /// Datagrams to send to b from the forwarder's b-side socket (b's known peer).
    inject: Vec<Vec<u8>>,
    /// Move the b-side socket to FWD_B_MOVED.
    rebind: bool,
}

fn lock(m: &Mutex<FwdState>) -> MutexGuard<'_, FwdState> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Forwarder {
    state: Arc<Mutex<FwdState>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Forwarder {
    fn start(topo: &Topology) -> Result<Forwarder> {
        let state = Arc::new(Mutex::new(FwdState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let handle = netns::spawn_in_netns(&topo.ns_b, move || -> Result<()> {
            let fa = UdpSocket::bind(FWD_A)?;
            let mut fb = UdpSocket::bind(FWD_B)?;
            fa.set_nonblocking(true)?;
            fb.set_nonblocking(true)?;
            let mut buf = vec![0u8; 65536];
            while !sp.load(Ordering::Relaxed) {
                let mut idle = true;
                for _ in 0..64 {
                    let Ok((n, _)) = fa.recv_from(&mut buf) else {
                        break;
                    };
                    idle = false;
                    let d = &buf[..n];
                    if n > 64
                        && d[0] == braid_core::wire::SEALED_VERSION
                        && matches!(d[1], 0x10 | 0x20)
                    {
                        let mut s = lock(&st);
                        if s.captured.len() >= 16 {
                            s.captured.remove(0);
                        }
                        s.captured.push(d.to_vec());
                    }
                    let _ = fb.send_to(d, addr(B_PATH));
                }
                for _ in 0..64 {
                    let Ok((n, _)) = fb.recv_from(&mut buf) else {
                        break;
                    };
                    idle = false;
                    let _ = fa.send_to(&buf[..n], addr(A_PATH));
                }
                {
                    let mut s = lock(&st);
                    for d in s.inject.drain(..) {
                        let _ = fb.send_to(&d, addr(B_PATH));
                    }
                    if s.rebind {
                        s.rebind = false;
                        fb = UdpSocket::bind(FWD_B_MOVED)?;
                        fb.set_nonblocking(true)?;
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            Ok(())
        })?;
        Ok(Forwarder {
            state,
            stop,
            handle: Some(handle),
        })
    }

    fn captured(&self) -> Vec<u8> {
        lock(&self.state)
            .captured
            .last()
            .cloned()
            .expect("a captured data datagram")
    }

    fn inject(&self, d: Vec<u8>) {
        lock(&self.state).inject.push(d);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Namespaces, daemons (through the forwarder when `fwd`), path up.
fn bring_up(fwd: bool, extra: &str) -> Result<(Topology, Option<Forwarder>, Daemons)> {
    let topo = Topology::new(1)?;
    let f = if fwd {
        Some(Forwarder::start(&topo)?)
    } else {
        None
    };
    let (ca, cb) = if fwd {
        configs(FWD_A, FWD_B, extra)
    } else {
        configs(B_PATH, A_PATH, extra)
    };
    let mut d = Daemons::start(common::braid().as_path(), &topo, "sec", &ca, &cb)?;
    d.wait_paths_up(&["p0"], Duration::from_secs(20))?;
    Ok((topo, f, d))
}

fn counter(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for k in path {
        x = &x[*k];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("no counter {path:?} in {v}"))
}

fn tun_tx(v: &Value) -> u64 {
    counter(v, &["status", "counters", "tun_tx"])
}

/// Send `d` to b's path port with the forwarder (b's known peer address) or, when
/// `stranger`, from a socket in namespace a that b has never heard of; then check that
/// nothing reached b's TUN and that `rejected.<name>` rose by one.
fn refused(
    topo: &Topology,
    f: &Forwarder,
    d: &Daemons,
    datagram: Vec<u8>,
    stranger: bool,
    name: &str,
) -> Result<()> {
    let before = d.status_b()?;
    if stranger {
        let h = netns::spawn_in_netns(&topo.ns_a, move || -> Result<()> {
            let s = UdpSocket::bind("10.201.0.1:7300")?;
            s.send_to(&datagram, addr(B_PATH))?;
            Ok(())
        })?;
        h.join().map_err(|_| anyhow::anyhow!("sender panicked"))??;
    } else {
        f.inject(datagram);
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = d.status_b()?;
    assert_eq!(tun_tx(&after), tun_tx(&before), "{name}: reached the TUN");
    let key = ["encryption", "rejected", name];
    assert_eq!(
        counter(&after, &key),
        counter(&before, &key) + 1,
        "{name} counted once: {}",
        after["encryption"]
    );
    if stranger {
        let k = ["encryption", "counters", "unknown_source"];
        assert_eq!(counter(&after, &k), counter(&before, &k) + 1);
    }
    Ok(())
}

/// An initiation to b from a key b does not know (valid mac1: it knows b's public key).
fn foreign_initiation(b_public: PublicKey) -> Vec<u8> {
    let mut t = Tunnel::new(TunnelConfig::new(
        PrivateKey::generate(&mut OsRng),
        b_public,
        *PrivateKey::generate(&mut OsRng).as_bytes(),
    ));
    let now = braid_core::Instant::from_micros(1);
    t.start_handshake(now);
    let mut buf = vec![0u8; 256];
    let tx = t.poll_transmit(now, &mut buf).expect("an initiation");
    buf.truncate(tx.len);
    buf
}

/// A transport datagram of a session b never made.
fn foreign_transport() -> Vec<u8> {
    let (k1, k2) = (
        PrivateKey::generate(&mut OsRng),
        PrivateKey::generate(&mut OsRng),
    );
    let seed = [7u8; 32];
    let mut a = Tunnel::new(TunnelConfig::new(k1.clone(), k2.public_key(), seed));
    let mut b = Tunnel::new(TunnelConfig::new(k2, k1.public_key(), seed));
    let now = braid_core::Instant::from_micros(1);
    let src = addr("192.0.2.1:1");
    a.start_handshake(now);
    let mut buf = vec![0u8; 256];
    let n = a.poll_transmit(now, &mut buf).expect("initiation").len;
    let mut init = buf[..n].to_vec();
    let reply = match b.open(now, src, &mut init) {
        Ok(braid_core::crypto::Opened::Reply(r)) => r.to_vec(),
        other => panic!("{other:?}"),
    };
    let mut reply = reply;
    a.open(now, src, &mut reply).expect("response");
    let mut out = vec![0u8; 256];
    let n = a
        .seal_from(now, 0, &[0x45; 60], &mut out)
        .expect("sealed with the foreign session");
    out.truncate(n);
    out
}

#[test]
fn unauthenticated_datagrams_never_reach_the_tun() {
    let Some(_g) = common::netns_or_skip("unauthenticated_datagrams_never_reach_the_tun") else {
        return;
    };
    let (topo, f, d) = bring_up(true, "").expect("bring up");
    let f = f.expect("forwarder");
    // A little traffic so that the forwarder captures data datagrams.
    common::tcp_flow(&topo, BOND_B, 5301, 1.0, 200_000, Default::default()).expect("flow");
    let real = f.captured();
    let st = d.status_b().expect("status");
    let b_public =
        PublicKey::from_base64(st["encryption"]["public_key"].as_str().expect("public key"))
            .expect("key");

    // Forged: a counter b has not seen (so that the replay check passes) and a changed
    // byte of ciphertext.
    let mut forged = real.clone();
    let counter = u32::from_be_bytes(forged[4..8].try_into().expect("4 bytes"));
    forged[4..8].copy_from_slice(&counter.wrapping_add(1000).to_be_bytes());
    forged[40] ^= 0x01;
    refused(&topo, &f, &d, forged, false, "bad_tag").expect("forged");
    // Relabelled: the kind byte names the other cipher (it is associated data).
    let mut relabelled = real.clone();
    relabelled[4..8].copy_from_slice(&counter.wrapping_add(1001).to_be_bytes());
    relabelled[1] ^= 0x30;
    refused(&topo, &f, &d, relabelled, false, "bad_tag").expect("relabelled");
    refused(&topo, &f, &d, real.clone(), false, "replayed").expect("replayed");
    refused(&topo, &f, &d, real[..20].to_vec(), false, "truncated").expect("truncated");
    refused(
        &topo,
        &f,
        &d,
        foreign_initiation(b_public),
        false,
        "unknown_peer",
    )
    .expect("wrong key (initiation)");
    refused(
        &topo,
        &f,
        &d,
        foreign_transport(),
        false,
        "unknown_receiver_index",
    )
    .expect("wrong key (transport)");
    // From an unknown address: a replay, and a plaintext (version 1) datagram.
    refused(&topo, &f, &d, real.clone(), true, "replayed").expect("unknown address");
    let mut plain = real;
    plain[0] = 1;
    refused(&topo, &f, &d, plain, true, "bad_version").expect("plaintext");
    // The text status names them.
    let text = d.control(false, &["status"]).expect("status text");
    assert!(text.contains("encryption: session up"), "{text}");
    assert!(
        text.contains("bad_tag 2") && text.contains("replayed 2"),
        "{text}"
    );
}

/// Both daemons started at the same moment (within the few ms `Daemons::start` takes):
/// the handshakes cross, and the path is up within a second (it took 5.3-5.6 s when the
/// lower key dropped the peer's initiation while its own was lost). Prints the figure.
#[test]
fn both_ends_started_together_are_up_within_a_second() {
    let Some(_g) = common::netns_or_skip("both_ends_started_together_are_up_within_a_second")
    else {
        return;
    };
    let topo = Topology::new(1).expect("topology");
    let (ca, cb) = configs(B_PATH, A_PATH, "");
    let mut d =
        Daemons::start(common::braid().as_path(), &topo, "together", &ca, &cb).expect("start");
    d.wait_paths_up(&["p0"], Duration::from_secs(20))
        .expect("path up");
    let up = now() - d.started;
    let collisions = |v: Value| v["encryption"]["events"]["handshake_collisions"].clone();
    eprintln!(
        "both ends started together: path up after {:.2} s; crossing initiations a {}, b {}",
        up.as_secs_f64(),
        collisions(d.status_a().expect("status")),
        collisions(d.status_b().expect("status")),
    );
    assert!(up < Duration::from_secs(1), "up after {up:?}");
}

#[test]
fn rekey_under_a_tcp_flow_loses_nothing() {
    let Some(_g) = common::netns_or_skip("rekey_under_a_tcp_flow_loses_nothing") else {
        return;
    };
    // Each side asks for new keys every second; the core sends at most one initiation
    // per 5 s (REKEY_TIMEOUT), so sessions turn over about every 5 s.
    let (topo, _f, d) = bring_up(false, "rekey_after_s = 1").expect("bring up");
    let before = counter(
        &d.status_b().expect("status"),
        &["encryption", "events", "sessions_created"],
    );
    let (sent, got) =
        common::tcp_flow(&topo, BOND_B, 5302, 11.0, u64::MAX, Default::default()).expect("flow");
    assert_eq!(
        sent, got,
        "every byte arrived, in order (checked by the receiver)"
    );
    let sb = d.status_b().expect("status");
    let after = counter(&sb, &["encryption", "events", "sessions_created"]);
    assert!(
        after >= before + 2,
        "rekeyed during the flow: {before} -> {after}"
    );
    assert_eq!(counter(&sb, &["encryption", "rejected", "bad_tag"]), 0);
    assert_eq!(counter(&sb, &["encryption", "rejected", "replayed"]), 0);
}

#[test]
fn nat_rebinding_keeps_the_path() {
    let Some(_g) = common::netns_or_skip("nat_rebinding_keeps_the_path") else {
        return;
    };
    let (topo, f, d) = bring_up(true, "").expect("bring up");
    let f = f.expect("forwarder");
    lock(&f.state).rebind = true;
    let t0 = now();
    // a's probes now come to b from port 7102 and b's answers to 7101 are lost: b moves
    // the path once 7101 has been silent for the dead time (300 ms) and 7102 goes on.
    let moved = loop {
        let sb = d.status_b().expect("status");
        if sb["io"][0]["remote"].as_str() == Some(FWD_B_MOVED) {
            break now() - t0;
        }
        assert!(now() - t0 < Duration::from_secs(10), "never moved: {sb}");
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
        "NAT rebinding: path moved {:.2} s after the rebind",
        moved.as_secs_f64()
    );
    // Traffic from a now comes to b from port 7102; b follows and answers there.
    let (sent, got) = common::tcp_flow(&topo, BOND_B, 5303, 2.0, 2_000_000, Default::default())
        .expect("flow after rebinding");
    assert_eq!(sent, got);
    let sb = d.status_b().expect("status");
    assert_eq!(sb["io"][0]["remote"].as_str(), Some(FWD_B_MOVED), "{sb}");
    assert!(counter(&sb, &["encryption", "counters", "roamed"]) >= 1);
    assert_eq!(sb["status"]["paths"][0]["state"].as_str(), Some("up"));
}

/// A server whose `remote` is wrong (a NATed client's port is not known in advance): the
/// client's handshake and probes find it, and the path moves on the second authenticated
/// datagram from the client's real address (the configured one was never heard from).
/// Prints how long the path took to come up (6 s in the first-use review).
#[test]
fn wrong_remote_is_found_by_roaming() {
    let Some(_g) = common::netns_or_skip("wrong_remote_is_found_by_roaming") else {
        return;
    };
    let topo = Topology::new(1).expect("topology");
    let (ca, cb) = configs(B_PATH, "10.201.0.1:9999", "");
    let mut d =
        Daemons::start(common::braid().as_path(), &topo, "natted", &ca, &cb).expect("start");
    d.wait_paths_up(&["p0"], Duration::from_secs(20))
        .expect("path up");
    let up = now() - d.started;
    let sb = d.status_b().expect("status");
    eprintln!(
        "wrong remote: path up after {:.2} s, remote {}",
        up.as_secs_f64(),
        sb["io"][0]["remote"]
    );
    assert_eq!(sb["io"][0]["remote"].as_str(), Some(A_PATH), "{sb}");
    assert_eq!(counter(&sb, &["encryption", "counters", "roamed"]), 1);
}

#[test]
fn handshake_flood_leaves_throughput() {
    let Some(_g) = common::netns_or_skip("handshake_flood_leaves_throughput") else {
        return;
    };
    let (topo, _f, d) = bring_up(false, "").expect("bring up");
    topo.set_rate(0, 40_000_000).expect("tbf");
    let b_public = PublicKey::from_base64(
        d.status_b().expect("status")["encryption"]["public_key"]
            .as_str()
            .expect("key"),
    )
    .expect("key");
    let mbit = |port: u16| -> f64 {
        let t0 = now();
        let (sent, got) =
            common::tcp_flow(&topo, BOND_B, port, 3.0, u64::MAX, Default::default()).expect("flow");
        assert_eq!(sent, got);
        got as f64 * 8.0 / (now() - t0).as_secs_f64() / 1e6
    };
    let quiet = mbit(5304);
    // The flood: distinct initiations (valid mac1), from the host itself, as fast as one
    // thread sends them, for the whole second measurement.
    let inits: Vec<Vec<u8>> = (0..64).map(|_| foreign_initiation(b_public)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let sp = stop.clone();
    let flood = netns::spawn_in_netns(&topo.ns_b, move || -> Result<u64> {
        // Many sources (ports) on the host itself, about 10 000 initiations per second.
        let socks: Vec<UdpSocket> = (0..16)
            .map(|_| UdpSocket::bind("0.0.0.0:0"))
            .collect::<std::io::Result<_>>()?;
        let mut n = 0u64;
        while !sp.load(Ordering::Relaxed) {
            for (k, i) in inits.iter().enumerate() {
                if socks[k % socks.len()].send_to(i, addr(B_PATH)).is_ok() {
                    n += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(6));
        }
        Ok(n)
    })
    .expect("flooder");
    let flooded = mbit(5305);
    stop.store(true, Ordering::Relaxed);
    let sent = flood
        .join()
        .map_err(|_| anyhow::anyhow!("flooder panicked"))
        .and_then(|r| r)
        .expect("flood");
    let sb = d.status_b().expect("status");
    let e = &sb["encryption"];
    eprintln!(
        "throughput {quiet:.1} Mbit/s quiet, {flooded:.1} Mbit/s under a flood of {sent} initiations; {e}"
    );
    assert!(sent > 10_000, "a real flood: {sent}");
    assert!(counter(&sb, &["encryption", "counters", "handshake_flood_dropped"]) > 0);
    assert!(
        flooded >= 0.9 * quiet,
        "flood cost more than 10%: {quiet:.1} -> {flooded:.1} Mbit/s"
    );
    assert_eq!(e["established"], true);
    let refused = counter(&sb, &["encryption", "rejected", "rate_limited"])
        + counter(&sb, &["encryption", "rejected", "unknown_peer"])
        + counter(&sb, &["encryption", "events", "cookie_replies_sent"]);
    assert!(refused > 0, "{e}");
}

/// Review H1 in the real daemon: junk handshake datagrams (`4, 1` and `4, 2`, of the
/// handshake lengths and not, no valid mac1 or index) at about 20 000 a second to b's path
/// port, from many source ports, while both ends rekey every second (`rekey_after_s = 1`,
/// so a new session about every 5 s): sessions keep being made through the flood. (Before,
/// every such datagram took a token of the 1000/s handshake budget before any check, and
/// the real handshakes got one only by chance.)
#[test]
fn junk_flood_does_not_stop_rekeying() {
    let Some(_g) = common::netns_or_skip("junk_flood_does_not_stop_rekeying") else {
        return;
    };
    let (topo, _f, d) = bring_up(false, "rekey_after_s = 1").expect("bring up");
    let sessions = |d: &Daemons| {
        counter(
            &d.status_b().expect("status"),
            &["encryption", "events", "sessions_created"],
        )
    };
    let before = sessions(&d);
    let stop = Arc::new(AtomicBool::new(false));
    let sp = stop.clone();
    let flood = netns::spawn_in_netns(&topo.ns_b, move || -> Result<u64> {
        let socks: Vec<UdpSocket> = (0..16)
            .map(|_| UdpSocket::bind("0.0.0.0:0"))
            .collect::<std::io::Result<_>>()?;
        let junk: Vec<Vec<u8>> = [2usize, 148, 92, 64, 148, 92]
            .iter()
            .enumerate()
            .map(|(k, &len)| {
                let mut v: Vec<u8> = (0..len).map(|i| (i * 7 + k) as u8).collect();
                v[0] = braid_core::wire::SEALED_VERSION;
                v[1] = if k % 2 == 0 { 1 } else { 2 };
                if len > 4 {
                    v[2] = 0;
                    v[3] = 0;
                }
                v
            })
            .collect();
        let (mut n, mut sent, t0) = (0u64, 0u64, now());
        while !sp.load(Ordering::Relaxed) {
            // 20 datagrams a millisecond, paced.
            for _ in 0..20 {
                let i = n as usize;
                n += 1;
                if socks[i % socks.len()]
                    .send_to(&junk[i % junk.len()], addr(B_PATH))
                    .is_ok()
                {
                    sent += 1;
                }
            }
            let due = Duration::from_micros(n * 50);
            let el = now() - t0;
            if due > el {
                std::thread::sleep(due - el);
            }
        }
        Ok(sent)
    })
    .expect("flooder");
    let t0 = now();
    std::thread::sleep(Duration::from_secs(11));
    let after = sessions(&d);
    stop.store(true, Ordering::Relaxed);
    let sent = flood
        .join()
        .map_err(|_| anyhow::anyhow!("flooder panicked"))
        .and_then(|r| r)
        .expect("flood");
    let secs = (now() - t0).as_secs_f64();
    let sb = d.status_b().expect("status");
    let e = &sb["encryption"];
    eprintln!(
        "junk flood: {sent} datagrams in {secs:.1} s ({:.0}/s); sessions {before} -> {after}; bad_mac1 {}, unknown_receiver_index {}, handshake_flood_dropped {}; {}",
        sent as f64 / secs,
        e["rejected"]["bad_mac1"],
        e["rejected"]["unknown_receiver_index"],
        e["counters"]["handshake_flood_dropped"],
        e["rejected"],
    );
    assert!(
        sent as f64 / secs > 10_000.0,
        "a real flood: {sent} in {secs:.1} s"
    );
    assert!(
        after >= before + 2,
        "sessions {before} -> {after} under the flood"
    );
    assert_eq!(
        counter(&sb, &["encryption", "counters", "handshake_flood_dropped"]),
        0
    );
    assert_eq!(e["established"], true);
}

/// Review M4: without keys, datagrams forged from b's configured remote (the forwarder's
/// address: an attacker who knows the path's addresses and ports but cannot see its
/// traffic) reach neither b's TUN nor its bond unless they carry b's verification tag: a
/// data datagram with a far sequence number (bare, or in an envelope with guessed tags)
/// and a probe announcing a new epoch (which would reset the bond's reorder state).
#[test]
fn plain_mode_refuses_forged_datagrams_from_the_peers_address() {
    use braid_core::wire::TAGGED_VERSION;
    use braid_core::wire::{self, Header, Message};
    let Some(_g) =
        common::netns_or_skip("plain_mode_refuses_forged_datagrams_from_the_peers_address")
    else {
        return;
    };
    let topo = Topology::new(1).expect("namespaces");
    let f = Forwarder::start(&topo).expect("forwarder");
    let cfg = |side: u8, local: &str, remote: &str| {
        format!(
            "[bond]\ninterface = \"braid0\"\naddress = \"10.200.0.{side}/30\"\nencryption = \"none\"\n[[path]]\nname = \"p0\"\nlocal = \"{local}\"\nremote = \"{remote}\"\n"
        )
    };
    let mut d = Daemons::start(
        common::braid().as_path(),
        &topo,
        "sec",
        &cfg(1, A_PATH, FWD_A),
        &cfg(2, B_PATH, FWD_B),
    )
    .expect("daemons");
    d.wait_paths_up(&["p0"], Duration::from_secs(20))
        .expect("path up");
    common::tcp_flow(&topo, BOND_B, 5302, 1.0, 200_000, Default::default()).expect("flow");

    // A UDP packet for b's bond address, behind a data header far ahead of the bond's.
    let mut ip = vec![0u8; 28];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&28u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 200, 0, 1]);
    ip[16..20].copy_from_slice(&BOND_B.octets());
    ip[22..24].copy_from_slice(&9u16.to_be_bytes());
    ip[24..26].copy_from_slice(&8u16.to_be_bytes());
    let h = Header {
        path: 0,
        timestamp: 0,
    };
    let mut data = vec![0u8; wire::DATA_HEADER_LEN];
    wire::emit_data_header(&h, 1 << 40, 1, &mut data).expect("data header");
    data.extend_from_slice(&ip);
    let mut probe = vec![0u8; 64];
    let n = wire::emit(
        &h,
        &Message::Probe {
            probe_seq: 1,
            epoch: Some(0x5eed),
        },
        &mut probe,
    )
    .expect("probe");
    probe.truncate(n);
    let envelope = |sender: u64, receiver: u64, inner: &[u8]| {
        let mut v = vec![TAGGED_VERSION];
        v.extend_from_slice(&sender.to_be_bytes());
        v.extend_from_slice(&receiver.to_be_bytes());
        v.extend_from_slice(inner);
        v
    };
    // The flow's last packets (a FIN's retransmission on a loaded machine) may still be
    // on their way: wait (bounded) until b's TUN count stands still.
    let mut before = d.status_b().expect("status");
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(200));
        let now = d.status_b().expect("status");
        let still = tun_tx(&now) == tun_tx(&before);
        before = now;
        if still {
            break;
        }
    }
    f.inject(data.clone());
    f.inject(envelope(0x1234, 0x9876_5432_1000_0001, &data));
    f.inject(envelope(0x1234, 0, &data));
    f.inject(envelope(0x1234, 0x9876_5432_1000_0002, &probe));
    std::thread::sleep(Duration::from_millis(500));
    let after = d.status_b().expect("status");
    let tags = |v: &Value, k: &str| counter(v, &["encryption", "tags", k]);
    let restarts = |v: &Value| counter(v, &["status", "counters", "peer_restarts"]);
    eprintln!("plain b after forgeries: {}", after["encryption"]);
    assert_eq!(
        tun_tx(&after),
        tun_tx(&before),
        "a forged packet reached the TUN"
    );
    assert_eq!(
        restarts(&after),
        restarts(&before),
        "a forged epoch reset the bond"
    );
    assert_eq!(tags(&after, "malformed"), tags(&before, "malformed") + 1);
    assert_eq!(tags(&after, "wrong_tag"), tags(&before, "wrong_tag") + 3);
    assert_eq!(
        tags(&after, "peer_tag_changes"),
        tags(&before, "peer_tag_changes")
    );
    // The bond goes on carrying.
    common::tcp_flow(&topo, BOND_B, 5303, 1.0, 200_000, Default::default()).expect("flow after");
}
