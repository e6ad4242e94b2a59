//! The daemon's whole loop without root: two daemons in one process, each on a packet
//! pipe standing in for its TUN ([`braid::daemon::PacketPipe`]), joined by two sealed UDP
//! paths over loopback. What is written into one pipe comes out of the other, as through
//! a bond, and the control socket answers while the loops run.
#![allow(clippy::unwrap_used)] // a test fails by panicking
#![allow(clippy::disallowed_methods)] // the test waits in real time

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use braid::config::Config;
use braid::daemon::{Daemon, Device, PacketPipe};

#[path = "../../braid-core/tests/support/counting.rs"]
mod counting;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

/// A free loopback UDP port (bound and released; the daemon binds it a moment later).
fn port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One end's config: `address`, its key and the peer's public key, two paths from
/// `mine` to `theirs`.
fn config(address: &str, keys: (&str, &str), mine: [u16; 2], theirs: [u16; 2]) -> Config {
    let mut t = format!(
        "[bond]\ninterface = \"loop0\"\naddress = \"{address}\"\nprivate_key = \"{}\"\npeer_public_key = \"{}\"\n",
        keys.0, keys.1
    );
    for i in 0..2 {
        t.push_str(&format!(
            "[[path]]\nname = \"p{i}\"\nlocal = \"127.0.0.1:{}\"\nremote = \"127.0.0.1:{}\"\n",
            mine[i], theirs[i]
        ));
    }
    Config::parse(&t, "loop.toml").unwrap()
}

/// Run a daemon of `cfg` on `pipe` for `d` in a thread of its own.
/// The two ends' configs: fresh keys, two loopback paths on free ports, the TUN
/// addresses `NET.1/30` and `NET.2/30`.
fn configs(net: &str) -> (Config, Config) {
    let (ka, kb) = (braid::keys::genkey(), braid::keys::genkey());
    let (pa, pb) = (
        braid::keys::pubkey(&ka).unwrap(),
        braid::keys::pubkey(&kb).unwrap(),
    );
    let (a_ports, b_ports) = ([port(), port()], [port(), port()]);
    (
        config(&format!("{net}.1/30"), (&ka, &pb), a_ports, b_ports),
        config(&format!("{net}.2/30"), (&kb, &pa), b_ports, a_ports),
    )
}

fn spawn(cfg: Config, control: PathBuf, pipe: PacketPipe, d: Duration) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut daemon = Daemon::with_device(&cfg, &control, Box::new(pipe), None).unwrap();
        daemon.run_for(d).unwrap();
    })
}

/// An IPv4/UDP packet from 10.77.0.1 to 10.77.0.2 whose payload is `n` repeated.
/// A daemon that runs `warm`, then `counted` with its thread's allocations counted.
fn spawn_counted(
    cfg: Config,
    control: PathBuf,
    pipe: PacketPipe,
    warm: Duration,
    counted: Duration,
) -> thread::JoinHandle<Option<braid::daemon::Handed>> {
    thread::spawn(move || {
        let mut daemon = Daemon::with_device(&cfg, &control, Box::new(pipe), None).unwrap();
        daemon.run_for(warm).unwrap();
        let before = daemon.handed();
        counting::on(true);
        daemon.run_for(counted).unwrap();
        counting::on(false);
        let after = daemon.handed()?;
        let before = before.unwrap_or_default();
        Some(braid::daemon::Handed {
            runs: after.runs - before.runs,
            run_datagrams: after.run_datagrams - before.run_datagrams,
            batches: after.batches - before.batches,
        })
    })
}

fn packet(n: u32) -> Vec<u8> {
    let mut p = vec![0u8; 28 + 100];
    p[0] = 0x45;
    let len = p.len() as u16;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 77, 0, 1]);
    p[16..20].copy_from_slice(&[10, 77, 0, 2]);
    p[20..22].copy_from_slice(&4000u16.to_be_bytes());
    p[22..24].copy_from_slice(&5000u16.to_be_bytes());
    p[24..26].copy_from_slice(&108u16.to_be_bytes());
    for c in p[28..].chunks_mut(4) {
        c.copy_from_slice(&n.to_be_bytes());
    }
    p
}

fn status(control: &Path) -> serde_json::Value {
    braid::control::request(control, &serde_json::json!({"cmd": "status"})).unwrap()
}

/// Wait (polling every 50 ms) until the daemon at `control` lists every path as up;
/// fails when that takes until `start + limit`.
fn wait_up(control: &Path, start: Instant, limit: Duration) {
    loop {
        thread::sleep(Duration::from_millis(50));
        let up = control.exists()
            && status(control)["status"]["paths"]
                .as_array()
                .is_some_and(|ps| ps.iter().all(|p| p["state"] == "up"));
        if up {
            return;
        }
        assert!(start.elapsed() < limit, "paths not up");
    }
}

#[test]
fn two_daemons_carry_packets_over_sealed_loopback_paths() {
    let dir = std::env::temp_dir().join(format!("braid-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = configs("10.77.0");
    let (a_tun, a_app) = PacketPipe::pair().unwrap();
    let (b_tun, b_app) = PacketPipe::pair().unwrap();
    let (a_ctl, b_ctl) = (dir.join("a.sock"), dir.join("b.sock"));
    let run = Duration::from_secs(4);
    let ta = spawn(a, a_ctl.clone(), a_tun, run);
    let tb = spawn(b, b_ctl.clone(), b_tun, run);

    // Wait (bounded) for both paths to come up at a.
    let start = Instant::now();
    wait_up(&a_ctl, start, Duration::from_secs(3));
    // 300 packets a -> b, 2 ms apart; every one arrives intact, in order.
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    for n in 0..300u32 {
        a_app.write(&packet(n)).unwrap();
        thread::sleep(Duration::from_millis(2));
        while let Ok(k) = b_app.read(&mut buf) {
            got.push(buf[..k].to_vec());
        }
    }
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        while let Ok(k) = b_app.read(&mut buf) {
            got.push(buf[..k].to_vec());
        }
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(got.len(), 300);
    for (n, p) in got.iter().enumerate() {
        assert_eq!(p, &packet(n as u32), "packet {n}");
    }
    // The sessions are up and the packets went sealed.
    let st = status(&a_ctl);
    assert_eq!(st["encryption"]["established"], true, "{st}");
    // One worker seals, sends and opens where there is a second CPU (`[bond] workers`).
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(st["workers"]["threads"], u64::from(cpus >= 2), "{st}");
    assert!(st["encryption"]["events"]["sealed"].as_u64().unwrap() >= 300);
    let st = status(&b_ctl);
    assert!(st["status"]["counters"]["tun_tx"].as_u64().unwrap() >= 300);
    ta.join().unwrap();
    tb.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Once warm, the daemons' loops allocate nothing per packet: 2000 packets from A's TUN
/// to B's, sealed over two loopback paths, while both daemon threads count allocations.
/// Each end has a worker thread (`workers = 1`), and the packets come in bursts of 20, so
/// that runs and batches go to it (fewer are done by the loop itself).
#[test]
fn the_loop_allocates_nothing_per_packet() {
    let dir = std::env::temp_dir().join(format!("braid-alloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut a, mut b) = configs("10.78.0");
    (a.bond.workers, b.bond.workers) = (Some(1), Some(1));
    let (a_tun, a_app) = PacketPipe::pair().unwrap();
    let (b_tun, b_app) = PacketPipe::pair().unwrap();
    let (warm, counted) = (Duration::from_secs(4), Duration::from_secs(3));
    let start = Instant::now();
    let ta = spawn_counted(a, dir.join("a.sock"), a_tun, warm, counted);
    let tb = spawn_counted(b, dir.join("b.sock"), b_tun, warm, counted);
    let packets: Vec<Vec<u8>> = (0..2000).map(packet).collect();
    let mut buf = [0u8; 2048];
    let mut got = 0;
    // Warm-up: queues, pools and the reorder buffer's spare buffers grow to their size.
    let a_ctl = dir.join("a.sock");
    wait_up(&a_ctl, start, Duration::from_secs(2));
    for n in 0..9000u32 {
        a_app.write(&packets[n as usize % 2000]).unwrap();
        if n % 20 == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        while b_app.read(&mut buf).is_ok() {}
    }
    let warm_end = start + warm + Duration::from_millis(200);
    assert!(Instant::now() < warm_end, "the warm-up took too long");
    thread::sleep(warm_end - Instant::now());
    let before = counting::allocations();
    for burst in packets.chunks(20) {
        for p in burst {
            a_app.write(p).unwrap();
        }
        thread::sleep(Duration::from_millis(10));
        while b_app.read(&mut buf).is_ok() {
            got += 1;
        }
    }
    thread::sleep(Duration::from_millis(100));
    while b_app.read(&mut buf).is_ok() {
        got += 1;
    }
    let handed_a = ta.join().unwrap().expect("A has a worker");
    let handed_b = tb.join().unwrap().expect("B has a worker");
    let allocs = counting::allocations() - before;
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{allocs} allocations while {got} packets crossed; A's worker sent {handed_a:?}, B's opened {handed_b:?}");
    assert!(got >= 1990, "{got} packets arrived");
    assert!(
        handed_a.run_datagrams >= 1000,
        "A's worker sent {handed_a:?}"
    );
    assert!(handed_b.batches >= 20, "B's worker opened {handed_b:?}");
    assert_eq!(allocs, 0, "{allocs} allocations for {got} packets");
}
