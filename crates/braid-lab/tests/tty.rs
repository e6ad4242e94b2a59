//! Serial ttys and the lab's line emulator, over pseudo-terminals (no root needed).
//!
//! The pacing tests check the emulator's spec: a byte takes 10 bit times (8N1). They time
//! seconds of data so that scheduler noise is small next to the 5% tolerance.
#![allow(clippy::disallowed_methods)] // these tests measure real time
#![allow(clippy::unwrap_used)] // helpers too: a test fails by panicking
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use braid::sys::tty::{self, Tty};
use braid_lab::line::{Line, LineConfig};

/// A pattern with every byte value, SLIP's specials included, that does not repeat within
/// 65536 bytes (so a lost run shows where it was).
fn pattern(n: usize, salt: u8) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678 ^ u32::from(salt);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 7) as u8
        })
        .collect()
}

/// What one end saw: the bytes received, when its first write went in, when the last
/// expected byte came out.
struct EndResult {
    got: Vec<u8>,
    first_write: Instant,
    last_rx: Option<Instant>,
}

/// Drive one end: write `send` as fast as the tty takes it, read until `expect` bytes have
/// come or `limit` passes.
fn drive(tty: &mut Tty, send: &[u8], expect: usize, limit: Duration) -> EndResult {
    let first_write = Instant::now();
    let deadline = first_write + limit;
    let mut sent = 0;
    let mut got = Vec::with_capacity(expect);
    let mut last_rx = None;
    let mut buf = [0u8; 4096];
    while (sent < send.len() || got.len() < expect) && Instant::now() < deadline {
        let mut events = libc::POLLIN;
        if sent < send.len() {
            events |= libc::POLLOUT;
        }
        let mut fds = [libc::pollfd {
            fd: tty.as_raw_fd(),
            events,
            revents: 0,
        }];
        braid::sys::poll::wait(&mut fds, Some(Duration::from_millis(5))).unwrap();
        if sent < send.len() {
            match tty.write(&send[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        loop {
            match tty.read(&mut buf) {
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    if got.len() >= expect && last_rx.is_none() {
                        last_rx = Some(Instant::now());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
    }
    EndResult {
        got,
        first_write,
        last_rx,
    }
}

fn open_ends(line: &Line, baud: u32) -> (Tty, Tty) {
    let (pa, pb) = line.paths();
    assert!(pa.starts_with("/dev/pts"), "{}", pa.display());
    (Tty::open(&pa, baud).unwrap(), Tty::open(&pb, baud).unwrap())
}

/// Send `n` bytes each way at once; both must arrive intact after n * 10 / baud s (5%).
fn full_duplex_at(baud: u32, n: usize) {
    let line = Line::start(LineConfig::new(baud)).unwrap();
    let (mut a, mut b) = open_ends(&line, baud);
    let ab = pattern(n, 1);
    let ba = pattern(n, 2);
    let want = Duration::from_secs_f64(n as f64 * 10.0 / f64::from(baud));
    let limit = want * 2 + Duration::from_secs(2);
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| drive(&mut a, &ab, n, limit));
        let tb = s.spawn(|| drive(&mut b, &ba, n, limit));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    assert!(
        rb.got == ab,
        "a->b at {baud} bd: {} of {n} bytes, or changed",
        rb.got.len()
    );
    assert!(
        ra.got == ba,
        "b->a at {baud} bd: {} of {n} bytes, or changed",
        ra.got.len()
    );
    for (dir, sender, receiver) in [("a->b", &ra, &rb), ("b->a", &rb, &ra)] {
        let took = receiver
            .last_rx
            .unwrap()
            .duration_since(sender.first_write)
            .as_secs_f64();
        let ratio = took / want.as_secs_f64();
        eprintln!(
            "{baud} bd {dir}: {n} bytes in {took:.4} s, 8N1 wants {:.4} s: ratio {ratio:.4}",
            want.as_secs_f64()
        );
        assert!(
            (0.95..=1.05).contains(&ratio),
            "{baud} bd {dir}: {n} bytes took {took:.3} s, want {:.3} s",
            want.as_secs_f64()
        );
    }
    let st = line.stats();
    for d in [st.a_to_b, st.b_to_a] {
        assert_eq!(d.sent, n as u64);
        assert_eq!(d.relayed, n as u64);
        assert_eq!((d.corrupted, d.dropped, d.overrun), (0, 0, 0));
    }
    assert_eq!(line.relay_error(), None);
}

#[test]
fn paced_at_9600_both_ways() {
    full_duplex_at(9600, 2400); // 2.5 s each way
}

#[test]
fn paced_at_115200_both_ways() {
    full_duplex_at(115_200, 34_560); // 3 s each way, more than a pty buffers
}

#[test]
fn paced_at_one_megabit_both_ways() {
    full_duplex_at(1_000_000, 200_000); // 2 s each way
}

/// Send `n` bytes a->b on a line with errors; return what arrived and the counters.
fn noisy(seed: u64, n: usize) -> (Vec<u8>, Vec<u8>, u64) {
    let mut cfg = LineConfig::new(1_000_000);
    cfg.byte_error_rate = 0.01;
    cfg.seed = seed;
    let line = Line::start(cfg).unwrap();
    let (mut a, mut b) = open_ends(&line, 1_000_000);
    let data = pattern(n, 3);
    let limit = Duration::from_secs(5);
    let rb = std::thread::scope(|s| {
        s.spawn(|| drive(&mut a, &data, 0, limit));
        let tb = s.spawn(|| drive(&mut b, &[], n, limit));
        tb.join().unwrap()
    });
    let st = line.stats();
    assert_eq!(st.a_to_b.relayed, n as u64);
    assert_eq!(st.b_to_a, Default::default());
    (data, rb.got, st.a_to_b.corrupted)
}

#[test]
fn byte_errors_flip_one_bit_in_one_percent_of_bytes_deterministically() {
    let n = 50_000;
    let (data, got, corrupted) = noisy(42, n);
    assert_eq!(got.len(), n);
    let bad: Vec<usize> = (0..n).filter(|&i| data[i] != got[i]).collect();
    assert_eq!(bad.len() as u64, corrupted);
    for &i in &bad {
        assert_eq!((data[i] ^ got[i]).count_ones(), 1, "byte {i}");
    }
    // 1% of 50000 = 500 (sd 22); this seed's exact count:
    assert!((400..=600).contains(&bad.len()), "{}", bad.len());
    assert_eq!(bad.len(), SEED_42_ERRORS);
    // the same seed corrupts the same positions on another line
    let (_, again, _) = noisy(42, n);
    assert_eq!(again, got);
}

const SEED_42_ERRORS: usize = 504;

#[test]
fn outage_drops_bytes_only_inside_the_window() {
    let baud = 115_200;
    let mut cfg = LineConfig::new(baud);
    cfg.outages_ms = vec![(400, 300)];
    let line = Line::start(cfg).unwrap();
    let (mut a, mut b) = open_ends(&line, baud);
    let n = 23_040; // 2 s
    let data = pattern(n, 4);
    let limit = Duration::from_secs(5);
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| drive(&mut a, &data, 0, limit));
        // less than n arrives: read until the line has had time to carry everything
        let tb = s.spawn(|| drive(&mut b, &[], n, Duration::from_millis(2600)));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    let st = line.stats().a_to_b;
    assert_eq!(st.sent, n as u64);
    // 300 ms of a busy 11520 B/s line
    assert!((3455..=3458).contains(&st.dropped), "{}", st.dropped);
    let got = rb.got;
    assert_eq!(got.len() + st.dropped as usize, n);
    // what arrived is the data with one run cut out
    let cut = data.iter().zip(&got).position(|(x, y)| x != y).unwrap();
    let lost = n - got.len();
    assert_eq!(got[..cut], data[..cut]);
    assert_eq!(got[cut..], data[cut + lost..]);
    // and the run is where the window is: 400 ms after start, less the time before sending
    let lead = ra
        .first_write
        .duration_since(line.started_at())
        .as_secs_f64();
    let want_cut = (0.4 - lead) * f64::from(baud) / 10.0;
    assert!(
        (cut as f64 - want_cut).abs() < 0.02 * f64::from(baud) / 10.0,
        "cut at byte {cut}, window starts at byte {want_cut:.0}"
    );
}

#[test]
fn latency_delays_each_byte() {
    let mut cfg = LineConfig::new(115_200);
    cfg.latency = Duration::from_millis(100);
    let line = Line::start(cfg).unwrap();
    let (mut a, mut b) = open_ends(&line, 115_200);
    let ra = drive(&mut a, b"\xc0", 0, Duration::from_secs(1));
    let rb = drive(&mut b, &[], 1, Duration::from_secs(2));
    assert_eq!(rb.got, b"\xc0");
    let took = rb.last_rx.unwrap().duration_since(ra.first_write);
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_millis(160),
        "{took:?}"
    );
}

#[test]
fn an_end_can_be_closed_and_reopened() {
    let line = Line::start(LineConfig::new(1_000_000)).unwrap();
    let (pa, _) = line.paths();
    let (a, mut b) = open_ends(&line, 1_000_000);
    drop(a);
    let mut a = Tty::open(&pa, 1_000_000).unwrap();
    drive(&mut a, b"again", 0, Duration::from_secs(1));
    let rb = drive(&mut b, &[], 5, Duration::from_secs(2));
    assert_eq!(rb.got, b"again");
}

#[test]
fn a_stopped_line_is_gone_for_its_users() {
    let line = Line::start(LineConfig::new(9600)).unwrap();
    let (mut a, _b) = open_ends(&line, 9600);
    let t = Instant::now();
    drop(line);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let mut buf = [0u8; 8];
    let e = a.read(&mut buf).unwrap_err();
    assert!(tty::is_gone(&e), "{e}");
    assert!(tty::is_gone(&a.write(b"x").unwrap_err()));
}

#[test]
fn a_non_tty_is_refused_clearly() {
    let e = Tty::open("/dev/null", 9600).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/dev/null: tcgetattr: Inappropriate ioctl for device (os error 25) (not a terminal)"
    );
    assert!(!tty::is_gone(&e));
}

#[test]
fn an_unsupported_baud_is_refused_clearly() {
    let line = Line::start(LineConfig::new(14_400)).unwrap();
    let (pa, _) = line.paths();
    let e = Tty::open(&pa, 14_400).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let s = e.to_string();
    assert!(
        s.contains(&format!(
            "{}: unsupported baud rate 14400; supported: 300, 600,",
            pa.display()
        )),
        "{s}"
    );
    assert!(s.ends_with("3500000, 4000000"), "{s}");
}

#[test]
fn a_bad_line_config_is_refused() {
    let mut cfg = LineConfig::new(9600);
    cfg.byte_error_rate = -0.1;
    assert_eq!(
        Line::start(cfg).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}
