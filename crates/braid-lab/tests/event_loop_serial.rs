//! The daemon's whole loop over a serial line, without root: two daemons in one process,
//! each on a packet pipe standing in for its TUN, joined by the lab's line emulator (two
//! pseudo-terminals and a relay at 115200 bd), sealed. What goes into one pipe comes out
//! of the other, framed, paced and opened by the endpoints on the way.
#![allow(clippy::unwrap_used)] // a test fails by panicking
#![allow(clippy::disallowed_methods)] // the test waits in real time

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use braid::config::Config;
use braid::daemon::{Daemon, Device, PacketPipe};
use braid_lab::line::{Line, LineConfig};

fn config(address: &str, keys: (&str, &str), device: &Path) -> Config {
    let t = format!(
        "[bond]\ninterface = \"sl0\"\naddress = \"{address}\"\nprivate_key = \"{}\"\npeer_public_key = \"{}\"\n[[path]]\nname = \"line\"\nkind = \"serial\"\ndevice = \"{}\"\nbaud = 115200\nframing = \"cslip\"\n",
        keys.0,
        keys.1,
        device.display()
    );
    Config::parse(&t, "line.toml").unwrap()
}

fn spawn(cfg: Config, control: PathBuf, pipe: PacketPipe, d: Duration) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut daemon = Daemon::with_device(&cfg, &control, Box::new(pipe), None).unwrap();
        daemon.run_for(d).unwrap();
    })
}

/// An IPv4/UDP packet of 300 bytes whose payload is `n` repeated.
fn packet(n: u32) -> Vec<u8> {
    let mut p = vec![0u8; 300];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&300u16.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 78, 0, 1]);
    p[16..20].copy_from_slice(&[10, 78, 0, 2]);
    p[24..26].copy_from_slice(&280u16.to_be_bytes());
    for c in p[28..].chunks_mut(4) {
        c.copy_from_slice(&n.to_be_bytes());
    }
    p
}

#[test]
fn two_daemons_carry_packets_over_a_sealed_serial_line() {
    let dir = std::env::temp_dir().join(format!("braid-loop-serial-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let line = Line::start(LineConfig::new(115_200)).unwrap();
    let (dev_a, dev_b) = line.paths();
    let (ka, kb) = (braid::keys::genkey(), braid::keys::genkey());
    let (pa, pb) = (
        braid::keys::pubkey(&ka).unwrap(),
        braid::keys::pubkey(&kb).unwrap(),
    );
    let a = config("10.78.0.1/30", (&ka, &pb), &dev_a);
    let b = config("10.78.0.2/30", (&kb, &pa), &dev_b);
    let (a_tun, a_app) = PacketPipe::pair().unwrap();
    let (b_tun, b_app) = PacketPipe::pair().unwrap();
    let (a_ctl, b_ctl) = (dir.join("a.sock"), dir.join("b.sock"));
    let run = Duration::from_secs(8);
    let ta = spawn(a, a_ctl.clone(), a_tun, run);
    let tb = spawn(b, b_ctl.clone(), b_tun, run);
    let status = |c: &Path| braid::control::request(c, &serde_json::json!({"cmd": "status"}));
    let start = Instant::now();
    loop {
        thread::sleep(Duration::from_millis(50));
        let up = status(&a_ctl).is_ok_and(|s| s["status"]["paths"][0]["state"] == "up");
        if up {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(4), "line not up");
    }
    // 100 packets of 300 bytes, 10 ms apart: 240 kbit/s offered to a line that carries
    // about 90, so the bond paces, queues and drops what waits too long (counted); every
    // one it sent arrives, in order and intact.
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    for n in 0..100u32 {
        a_app.write(&packet(n)).unwrap();
        thread::sleep(Duration::from_millis(10));
        while let Ok(k) = b_app.read(&mut buf) {
            got.push(buf[..k].to_vec());
        }
    }
    // The line takes about 2 s for what the bond queued (74 packets of ~330 bytes).
    let until = Instant::now() + Duration::from_millis(3000);
    while Instant::now() < until {
        while let Ok(k) = b_app.read(&mut buf) {
            got.push(buf[..k].to_vec());
        }
        thread::sleep(Duration::from_millis(10));
    }
    let st = status(&a_ctl).unwrap();
    let dropped = st["status"]["counters"]["drop_queue"].as_u64().unwrap_or(0);
    assert!(got.len() >= 60, "{} arrived", got.len());
    assert_eq!(got.len() as u64 + dropped, 100, "{st}");
    let ns: Vec<u32> = got
        .iter()
        .map(|p| u32::from_be_bytes(p[28..32].try_into().unwrap()))
        .collect();
    assert!(ns.windows(2).all(|w| w[0] < w[1]), "{ns:?}");
    for p in &got {
        let n = u32::from_be_bytes(p[28..32].try_into().unwrap());
        assert_eq!(p, &packet(n));
    }
    assert_eq!(st["encryption"]["established"], true, "{st}");
    let c = &st["io"][0]["serial"]["counters"];
    assert!(c["tx_line_bytes"].as_u64().unwrap() > 20_000, "{c}");
    ta.join().unwrap();
    tb.join().unwrap();
    drop(line);
    let _ = std::fs::remove_dir_all(&dir);
}
