//! `mode = "raw-ip"` against a classic SLIP peer: the real `braid` binary in a network
//! namespace with one serial path in raw-ip mode on a pty; the test holds the pty's master
//! and is the peer, with its own SLIP encoder and decoder written here (no braid code),
//! cross-checked with the PyPI `sliplib` package when it is installed. `ping` in the
//! namespace sends ICMP echo requests through braid's TUN; the peer must see plain SLIP
//! frames of IP packets (no braid header, no probes) and answers each with an echo reply,
//! which braid must hand to the kernel.
//!
//! A second test runs two braid daemons in raw-ip CSLIP mode over the lab's paced line
//! and moves a checked TCP transfer through them (VJ compression both ways).
//!
//! Needs root (namespaces, TUN). Without it the tests skip with a message, unless
//! `BRAID_REQUIRE_NETNS=1`, which makes them fail instead.
mod common;

use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use braid::sys::tty::open_pty;
use braid_lab::netns::{self, Proc, Topology};
use braid_lab::run::{paths_of, status, Daemons};
use braid_lab::scenario::Scenario;
use braid_lab::serial::{self, SerialLines};

fn usable() -> bool {
    common::serial_netns_usable("the raw-ip test")
}

// ---- the peer's own SLIP (RFC 1055), independent of braid_core ----

const END: u8 = 0xC0;
const ESC: u8 = 0xDB;
const ESC_END: u8 = 0xDC;
const ESC_ESC: u8 = 0xDD;

fn slip_encode(packet: &[u8]) -> Vec<u8> {
    let mut out = vec![END];
    for &b in packet {
        match b {
            END => out.extend_from_slice(&[ESC, ESC_END]),
            ESC => out.extend_from_slice(&[ESC, ESC_ESC]),
            _ => out.push(b),
        }
    }
    out.push(END);
    out
}

/// RFC 1055's receiver: frames between ENDs, empty ones skipped.
#[derive(Default)]
struct SlipRx {
    cur: Vec<u8>,
    esc: bool,
}

impl SlipRx {
    fn push(&mut self, bytes: &[u8], frames: &mut Vec<Vec<u8>>) {
        for &b in bytes {
            match (self.esc, b) {
                (_, END) => {
                    if !self.cur.is_empty() {
                        frames.push(std::mem::take(&mut self.cur));
                    }
                    self.esc = false;
                }
                (false, ESC) => self.esc = true,
                (true, ESC_END) => {
                    self.cur.push(END);
                    self.esc = false;
                }
                (true, ESC_ESC) => {
                    self.cur.push(ESC);
                    self.esc = false;
                }
                (_, x) => {
                    self.cur.push(x);
                    self.esc = false;
                }
            }
        }
    }
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        let w = u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]);
        sum += u32::from(w);
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// The echo reply to an IPv4 ICMP echo request, or None if `p` is not one.
fn echo_reply(p: &[u8]) -> Option<Vec<u8>> {
    let ihl = usize::from(p.first()? & 0x0F) * 4;
    if p[0] >> 4 != 4 || p.len() < ihl + 8 || p[9] != 1 || p[ihl] != 8 {
        return None;
    }
    let mut r = p.to_vec();
    r[12..16].copy_from_slice(&p[16..20]);
    r[16..20].copy_from_slice(&p[12..16]);
    r[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(&r[..ihl]);
    r[10..12].copy_from_slice(&c.to_be_bytes());
    r[ihl] = 0; // echo reply
    r[ihl + 2..ihl + 4].copy_from_slice(&[0, 0]);
    let c = checksum(&r[ihl..]);
    r[ihl + 2..ihl + 4].copy_from_slice(&c.to_be_bytes());
    Some(r)
}

/// sliplib's decoding of `line` (hex frames), or None when python3/sliplib is missing.
fn sliplib_decode(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let script = r#"
import sys, sliplib
d = sliplib.Driver()
d.receive(bytes.fromhex(sys.stdin.read().strip()))
d.receive(b"")
while True:
    m = d.get(block=False)
    if not m:
        break
    print(m.hex())
"#;
    let have = Command::new("python3")
        .args(["-c", "import sliplib"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        eprintln!("sliplib cross-check skipped: python3 with sliplib not available");
        return None;
    }
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let hex: String = line.iter().map(|b| format!("{b:02x}")).collect();
    child.stdin.take()?.write_all(hex.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    assert!(out.status.success(), "sliplib failed");
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                (0..l.len() / 2)
                    .map(|i| u8::from_str_radix(&l[2 * i..2 * i + 2], 16).unwrap_or(0))
                    .collect()
            })
            .collect(),
    )
}

#[test]
fn raw_ip_slip_talks_to_a_classic_peer() -> Result<()> {
    if !usable() {
        return Ok(());
    }
    let topo = Topology::new(1)?;
    let (mut master, slave) = open_pty(115_200)?;
    let cfg = format!(
        "[bond]\ninterface = \"braid0\"\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n\
         [[path]]\nname = \"line\"\nkind = \"serial\"\ndevice = \"{}\"\nbaud = 115200\n\
         framing = \"slip\"\nmode = \"raw-ip\"\n",
        slave.path().display()
    );
    let conf = topo.file("raw.toml");
    std::fs::write(&conf, cfg)?;
    let sock = topo.file("raw.sock");
    let log = topo.file("raw.log");
    let mut cmd = netns::ns_command(&topo.ns_a, common::braid());
    cmd.arg("up")
        .arg("--config")
        .arg(&conf)
        .arg("--control")
        .arg(&sock);
    let mut daemon = Proc::spawn("braid up (raw-ip)", &mut cmd, false, Some(&log))?;
    let deadline = netns::now() + Duration::from_secs(10);
    let st = loop {
        if !daemon.running() {
            bail!("braid exited:\n{}", daemon.log_tail());
        }
        if let Ok(v) = status(common::braid().as_path(), &sock) {
            break v;
        }
        if netns::now() > deadline {
            bail!("no control socket:\n{}", daemon.log_tail());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let ps = paths_of(&st);
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].state, "up", "up while the tty is open");
    assert_eq!(st["io"][0]["serial"]["mode"], "raw-ip");

    // The pattern puts END and ESC bytes into every packet's payload.
    let ns = topo.ns_a.clone();
    let pinger = std::thread::spawn(move || {
        netns::run_timeout(
            netns::ns_command(&ns, "ping").args([
                "-n",
                "-q",
                "-c",
                "4",
                "-i",
                "0.3",
                "-W",
                "3",
                "-s",
                "100",
                "-p",
                "c0dbdcdd",
                "10.200.0.2",
            ]),
            Duration::from_secs(30),
        )
    });
    let mut rx = SlipRx::default();
    let mut line = Vec::new();
    let mut requests = 0;
    let mut frames = Vec::new();
    let mut buf = [0u8; 4096];
    let end = netns::now() + Duration::from_secs(20);
    while !pinger.is_finished() && netns::now() < end {
        let mut fds = [braid::sys::poll::readable(master.as_raw_fd())];
        if braid::sys::poll::wait(&mut fds, Some(Duration::from_millis(50))).unwrap_or(0) == 0 {
            continue;
        }
        let n = match master.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e).context("reading the pty master"),
        };
        line.extend_from_slice(&buf[..n]);
        let mut got = Vec::new();
        rx.push(&buf[..n], &mut got);
        for f in got {
            // Every frame is a plain IP packet: IPv4 here (braid's header would start 01).
            assert!(
                matches!(f[0] >> 4, 4 | 6),
                "not an IP packet: {:02x?}",
                &f[..f.len().min(24)]
            );
            if let Some(reply) = echo_reply(&f) {
                requests += 1;
                assert!(f.windows(4).any(|w| w == [0xC0, 0xDB, 0xDC, 0xDD]));
                master.write_all(&slip_encode(&reply))?;
            }
            frames.push(f);
        }
    }
    let out = pinger.join().expect("ping thread")?;
    let (replies, _) = serial::parse_ping(&out.stdout);
    assert_eq!(requests, 4, "four echo requests on the line");
    assert_eq!(replies, 4, "every reply reached ping: {}", out.stdout);
    // An independent decoder (sliplib) sees the same frames in what braid wrote.
    if let Some(theirs) = sliplib_decode(&line) {
        assert_eq!(theirs, frames);
    }
    let st = status(common::braid().as_path(), &sock)?;
    let c = &st["io"][0]["serial"]["counters"];
    assert_eq!(c["rx_frames"], 4, "{c}");
    assert!(c["tx_frames"].as_u64().unwrap_or(0) >= 4, "{c}");
    daemon.stop();
    Ok(())
}

const RAW_CSLIP: &str = r#"
name = "raw-cslip-test"
[bond]
encryption = "none"
[[path]]
name = "line"
kind = "serial"
baud = 115200
framing = "cslip"
mode = "raw-ip"
[[test]]
"#;

#[test]
fn raw_ip_cslip_carries_tcp_between_two_braids() -> Result<()> {
    if !usable() {
        return Ok(());
    }
    let sc = Scenario::parse(RAW_CSLIP)?;
    let topo = Topology::new(1)?;
    topo.tcp_timestamps_off()?;
    let lines = SerialLines::start(&sc)?;
    let devices = lines.devices();
    let cfg_a = sc.daemon_config_with(true, &topo.links, None, &devices)?;
    let cfg_b = sc.daemon_config_with(false, &topo.links, None, &devices)?;
    assert!(cfg_a.contains("raw-ip"), "{cfg_a}");
    let mut d = Daemons::start(common::braid().as_path(), &topo, "raw", &cfg_a, &cfg_b)?;
    d.wait_paths_up(&["line"], Duration::from_secs(10))?;
    let bytes = 150_000;
    let dst = Ipv4Addr::new(10, 200, 0, 2);
    let t = serial::tcp_transfer(&topo, dst, 5302, bytes, None, Duration::from_secs(30))?;
    assert_eq!(t.bytes, bytes, "every byte arrived, in order, unchanged");
    // 11520 bytes/s of line: at least 13 s for 150 KB.
    assert!(t.seconds > 12.0 && t.seconds < 30.0, "{} s", t.seconds);
    // VJ compression both ways: side a's data segments and side b's acks.
    let sides = [("a", d.status_a()?), ("b", d.status_b()?)];
    let wire: Vec<_> = lines.lines().map(|l| l.stats()).collect();
    let all = format!(
        "a: {}\nb: {}\nline: {wire:?}\nlog a:\n{}\nlog b:\n{}",
        sides[0].1["io"][0]["serial"],
        sides[1].1["io"][0]["serial"],
        d.a.log_tail(),
        d.b.log_tail()
    );
    for (side, st) in &sides {
        let line = &st["io"][0]["serial"];
        assert_eq!(line["counters"]["rx_cslip_errors"], 0, "{side}: {all}");
        let n = |k: &str| line["cslip_tx"][k].as_u64().unwrap_or(0);
        assert!(n("compressed") > 40, "{side}: {line}");
        assert!(n("compressed") > n("uncompressed"), "{side}: {line}");
    }
    drop(d);
    assert_eq!(lines.relay_error(), None);
    Ok(())
}
