//! `braid top` under a pseudo-terminal: it reads a monitor's `/api/status` (a stand-in
//! on a loopback port whose counters grow 1.25 MB a second), draws paths and classes
//! with their rates, redraws, and quits on `q` with status 0. No root needed.
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[expect(
    clippy::disallowed_methods,
    reason = "deadlines on real time for the program under test"
)]
fn now() -> Instant {
    Instant::now()
}

/// A stand-in monitor: answers every request with a status whose counters grow per call.
fn fake_monitor() -> (String, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = l.local_addr().expect("its address").to_string();
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().take(100) {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let n = c.fetch_add(1, Ordering::Relaxed);
            let body = serde_json::json!({
                "interface": "braid0",
                "status": {"interface": "braid0", "address": "10.200.0.1/30", "uptime_us": n * 1_000_000,
                    "status": {"scheduler": "adaptive", "paths": [
                        {"id": 0, "name": "dsl", "state": "up", "tx_bytes": n * 1_250_000, "rx_bytes": 0,
                         "srtt_us": 12_000, "rttvar_us": 400, "loss": 0.0, "queued_bytes": 0, "pacing_bps": 10_000_000},
                        {"id": 1, "name": "lte", "state": "up", "tx_bytes": 0, "rx_bytes": n * 125_000}]}},
                "classes": [{"id": "1:10", "name": "alex", "leaf": true, "rate_bps": 2_000_000, "ceil_bps": 10_000_000,
                             "sent_bytes": n * 250_000, "backlog_bytes": 0, "dropped": 0, "mode": "can-send"}],
            })
            .to_string();
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, calls)
}

/// A pseudo-terminal of 110 x 30: (master, slave).
fn pty() -> (OwnedFd, OwnedFd) {
    let (mut m, mut s) = (-1, -1);
    let ws = libc::winsize {
        ws_row: 30,
        ws_col: 110,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two fds; the name and termios pointers may be null.
    let r = unsafe { libc::openpty(&mut m, &mut s, std::ptr::null_mut(), std::ptr::null(), &ws) };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just opened and are owned here.
    unsafe { (OwnedFd::from_raw_fd(m), OwnedFd::from_raw_fd(s)) }
}

/// The screen as a terminal would show it after `out`: a small model of what ratatui
/// writes (cursor positioning `ESC[row;colH`, other CSI sequences ignored, text).
fn screen(out: &str, rows: usize, cols: usize) -> Vec<String> {
    let mut grid = vec![vec![' '; cols]; rows];
    let (mut r, mut c) = (0usize, 0usize);
    let mut it = out.chars().peekable();
    while let Some(ch) = it.next() {
        if ch == '\x1b' {
            if it.peek() != Some(&'[') {
                continue;
            }
            it.next();
            let mut params = String::new();
            let mut fin = ' ';
            for x in it.by_ref() {
                if x.is_ascii_alphabetic() {
                    fin = x;
                    break;
                }
                params.push(x);
            }
            if fin == 'H' {
                let mut p = params.split(';').map(|v| v.parse::<usize>().unwrap_or(1));
                r = p.next().unwrap_or(1).saturating_sub(1);
                c = p.next().unwrap_or(1).saturating_sub(1);
            }
            continue;
        }
        if ch == '\r' || ch == '\n' {
            continue;
        }
        if let Some(cell) = grid.get_mut(r).and_then(|row| row.get_mut(c)) {
            *cell = ch;
        }
        c += 1;
    }
    grid.into_iter()
        .map(|row| row.into_iter().collect())
        .collect()
}

/// Read what the terminal shows until `want` appears (or `within` passes); all of it.
fn read_until(
    master: &mut std::fs::File,
    seen: &mut String,
    want: &[&str],
    within: Duration,
) -> bool {
    let end = now() + within;
    let fd = master.as_raw_fd();
    while now() < end {
        if want.iter().all(|w| seen.contains(w)) {
            return true;
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 100) } <= 0 {
            continue;
        }
        let mut buf = [0u8; 8192];
        match master.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    want.iter().all(|w| seen.contains(w))
}

#[test]
fn top_draws_live_figures_and_quits_on_q() {
    let (addr, calls) = fake_monitor();
    let (master, slave) = pty();
    let mut child = Command::new(env!("CARGO_BIN_EXE_braid"))
        .args(["top", "--monitor", &format!("http://{addr}")])
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .env("TERM", "xterm-256color")
        .spawn()
        .unwrap();
    let mut m = std::fs::File::from(master);
    let mut seen = String::new();
    let ok = read_until(
        &mut m,
        &mut seen,
        &["braid0", "dsl", "lte", "1:10", "alex", "can-send", "quits"],
        Duration::from_secs(10),
    );
    assert!(ok, "the first screen:\n{seen}");
    // Three answers later the rates are on the screen: 1.25 MB a second on dsl.
    std::thread::sleep(Duration::from_millis(3200));
    read_until(&mut m, &mut seen, &["never"], Duration::from_millis(300));
    let shown = screen(&seen, 30, 110);
    let text = shown.join("\n");
    let dsl = shown
        .iter()
        .find(|l| l.starts_with("dsl"))
        .expect("a dsl row");
    assert!(
        dsl.contains("9.9M")
            || dsl.contains("10.0M")
            || dsl.contains("10.1M")
            || dsl.contains("9.8M"),
        "dsl sends ~10 Mbit/s:\n{text}"
    );
    assert!(
        text.contains("(last 3 s)") || text.contains("(last 4 s)"),
        "{text}"
    );
    // It keeps redrawing: more answers are fetched.
    let before = calls.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(2300));
    assert!(
        calls.load(Ordering::Relaxed) >= before + 2,
        "refreshed each second"
    );
    m.write_all(b"q").unwrap();
    let end = now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if now() > end {
            let _ = child.kill();
            panic!("braid top did not quit on q");
        }
        // Drain the terminal so that the child never blocks writing.
        let mut buf = [0u8; 4096];
        let mut p = libc::pollfd {
            fd: m.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 50) } > 0 {
            let _ = m.read(&mut buf);
        }
    };
    assert!(status.success(), "{status}");
}

#[test]
fn top_without_a_monitor_says_so() {
    let out = Command::new(env!("CARGO_BIN_EXE_braid"))
        .args(["top", "--monitor", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("braid: cannot connect to the monitor at 127.0.0.1:1"),
        "{err}"
    );
}
