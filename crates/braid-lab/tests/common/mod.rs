//! Helpers shared by the lab's integration tests: the gates for root and namespaces, the
//! `braid` binary under test, transfers checked byte for byte, ping.
#![allow(dead_code)]

#[path = "../../../braid/tests/common/gates.rs"]
mod gates;
pub use gates::*;

use std::path::{Path, PathBuf};

/// The braid binary under test: `target/<profile>/braid`, beside this test's `deps/`
/// directory (`CARGO_BIN_EXE_braid` is set only in the braid package's own tests).
/// `cargo test --workspace` builds it; when it is missing or older than the sources it is
/// built from (`cargo test -p braid-lab` does not build it), a test run by cargo has cargo
/// build it first, so that no test runs a stale daemon.
pub fn braid() -> PathBuf {
    static BRAID: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BRAID.get_or_init(fresh_braid).clone()
}

fn fresh_braid() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps/");
    let braid = dir.join("braid");
    let built = std::fs::metadata(&braid).and_then(|m| m.modified()).ok();
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sources = [
        "braid/src",
        "braid/Cargo.toml",
        "braid-core/src",
        "braid-core/Cargo.toml",
        "../Cargo.lock",
        "../docs/config.md",
    ]
    .map(|s| crates.join(s));
    let stale = match built {
        None => true,
        Some(t) => sources.iter().any(|s| newer_than(s, t)),
    };
    if let (true, Some(cargo), Some(target), Some(profile)) = (
        stale,
        std::env::var_os("CARGO"),
        dir.parent(),
        dir.file_name().and_then(|n| n.to_str()),
    ) {
        // `cargo test` builds with the test profile into target/debug/.
        let profile = if profile == "debug" { "test" } else { profile };
        eprintln!(
            "{} is missing or older than its sources: building it",
            braid.display()
        );
        let status = std::process::Command::new(cargo)
            .args([
                "build",
                "-q",
                "-p",
                "braid",
                "--bin",
                "braid",
                "--profile",
                profile,
            ])
            .arg("--target-dir")
            .arg(target)
            .status()
            .expect("run cargo build -p braid");
        assert!(status.success(), "cargo build -p braid: {status}");
    }
    assert!(
        braid.is_file(),
        "{} is missing: build it (cargo build -p braid, or cargo test --workspace)",
        braid.display()
    );
    braid
}

/// True when `path`, or a file below it, changed after `t`.
fn newer_than(path: &Path, t: std::time::SystemTime) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_dir() {
        return meta.modified().is_ok_and(|m| m > t);
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| newer_than(&e.path(), t))
}

/// The lock that runs a test binary's namespace tests one at a time, or None (with a
/// message, see [`runs`]) when namespaces cannot be used here.
pub fn netns_or_skip(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if !runs(
        test,
        "network namespaces and a TUN device",
        netns_unusable(),
    ) {
        return None;
    }
    Some(ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner()))
}

/// True when a namespace test over emulated serial lines may run: namespaces and `ping`
/// (see [`runs`]).
pub fn serial_netns_usable(what: &str) -> bool {
    let why = netns_unusable()
        .or_else(|| (!braid_lab::serial::have_ping()).then_some("`ping` not found"));
    runs(what, "network namespaces, a TUN device and ping", why)
}

/// The byte at offset `i` of a test stream: not periodic, so reordering, loss or
/// duplication anywhere shows as a mismatch.
pub fn pattern(i: u64) -> u8 {
    let mut z = (i / 8).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)).to_le_bytes()[(i % 8) as usize]
}

/// One TCP connection from namespace a to `dst:port` in b (through the bond), sending for
/// `secs` seconds or `limit` bytes, whichever ends first; the receiver checks every byte
/// and counts them in `received` as they come. Returns (sent, received); an error (a
/// reset, a corrupted byte, a timeout) ends it.
pub fn tcp_flow(
    topo: &braid_lab::netns::Topology,
    dst: std::net::Ipv4Addr,
    port: u16,
    secs: f64,
    limit: u64,
    received: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> anyhow::Result<(u64, u64)> {
    use anyhow::{bail, Context};
    use braid_lab::netns::{self, now};
    use std::io::{Read, Write};
    use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
    use std::time::Duration;
    let addr = SocketAddr::V4(SocketAddrV4::new(dst, port));
    let rx = netns::spawn_in_netns(&topo.ns_b, move || -> anyhow::Result<u64> {
        let listener = TcpListener::bind(addr).context("bind in b")?;
        listener.set_nonblocking(true)?;
        let end = now() + Duration::from_secs(10);
        let mut s = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && now() < end => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => bail!("accept: {e}"),
            }
        };
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = vec![0u8; 65536];
        let mut off = 0u64;
        loop {
            let n = s.read(&mut buf).context("read in b")?;
            if n == 0 {
                return Ok(off);
            }
            for (k, &b) in buf[..n].iter().enumerate() {
                if b != pattern(off + k as u64) {
                    bail!("byte {} differs", off + k as u64);
                }
            }
            off += n as u64;
            received.store(off, std::sync::atomic::Ordering::Relaxed);
        }
    })?;
    std::thread::sleep(Duration::from_millis(200));
    let tx = netns::spawn_in_netns(&topo.ns_a, move || -> anyhow::Result<u64> {
        let mut s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).context("connect from a")?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        let end = now() + Duration::from_secs_f64(secs);
        let mut buf = vec![0u8; 65536];
        let mut off = 0u64;
        while off < limit && now() < end {
            let n = (limit - off).min(buf.len() as u64) as usize;
            for (k, b) in buf[..n].iter_mut().enumerate() {
                *b = pattern(off + k as u64);
            }
            s.write_all(&buf[..n]).context("write from a")?;
            off += n as u64;
        }
        s.shutdown(std::net::Shutdown::Write)?;
        // Wait for the receiver to close, so that `off` bytes have all been delivered.
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = s.read(&mut [0u8; 1]);
        Ok(off)
    })?;
    let sent = tx
        .join()
        .map_err(|_| anyhow::anyhow!("sender panicked"))??;
    let got = rx
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    Ok((sent, got))
}

/// ICMP echo from namespace `ns` to `dst` over a raw socket; the number of replies to
/// `count` requests (1 s each at most).
pub fn ping(ns: &str, dst: std::net::Ipv4Addr, count: u16) -> anyhow::Result<u16> {
    use braid_lab::netns::{self, now};
    use socket2::{Domain, Protocol, Socket, Type};
    use std::io::Read;
    use std::net::{SocketAddr, SocketAddrV4};
    use std::time::Duration;
    let h = netns::spawn_in_netns(ns, move || -> anyhow::Result<u16> {
        let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let id: u16 = (std::process::id() & 0xffff) as u16;
        let to = SocketAddr::V4(SocketAddrV4::new(dst, 0)).into();
        let mut replies = 0;
        for seq in 1..=count {
            sock.send_to(&echo_request(id, seq), &to)?;
            let end = now() + Duration::from_secs(1);
            while now() < end {
                let mut buf = [0u8; 1500];
                let Ok(n) = (&sock).read(&mut buf) else {
                    continue;
                };
                if echo_reply_seq(&buf[..n], id) == Some(seq) {
                    replies += 1;
                    break;
                }
            }
        }
        Ok(replies)
    })?;
    h.join().map_err(|_| anyhow::anyhow!("pinger panicked"))?
}

/// An ICMP echo request of identifier `id` and sequence number `seq`, 56 bytes of data.
pub fn echo_request(id: u16, seq: u16) -> Vec<u8> {
    let mut pkt = vec![8u8, 0, 0, 0];
    pkt.extend_from_slice(&id.to_be_bytes());
    pkt.extend_from_slice(&seq.to_be_bytes());
    pkt.extend_from_slice(&[0xab; 56]);
    let ck = checksum(&pkt);
    pkt[2..4].copy_from_slice(&ck.to_be_bytes());
    pkt
}

/// The sequence number of an ICMP echo reply to identifier `id` in `ip` (an IPv4 packet
/// as a raw socket reads it), if it is one.
pub fn echo_reply_seq(ip: &[u8], id: u16) -> Option<u16> {
    let ihl = usize::from(ip.first().copied().unwrap_or(0) & 0x0f) * 4;
    let icmp = ip.get(ihl..)?;
    (icmp.len() >= 8 && icmp[0] == 0 && icmp[4..6] == id.to_be_bytes())
        .then(|| u16::from_be_bytes([icmp[6], icmp[7]]))
}

/// The Internet checksum (RFC 1071) of `b`.
pub fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
