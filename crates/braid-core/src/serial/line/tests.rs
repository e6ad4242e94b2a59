//! The line model in virtual time: the line clock, the lanes, closing and reopening, and
//! two lines driven against each other over a simulated 8N1 wire.

use std::collections::VecDeque;

use super::*;
use crate::serial::testutil::{data_datagram, probe_datagram, Tcp};
use crate::wire::MessageType;

fn config(baud: u32, framing: Framing) -> LineConfig {
    LineConfig {
        baud,
        framing,
        mtu: 1420,
        raw_ip: false,
        crc: false,
        auto_bps: true,
    }
}

fn open_line(baud: u32, framing: Framing) -> Line {
    let mut l = Line::new(config(baud, framing), 7000);
    l.open();
    l
}

fn at_ms(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// Hand everything the line offers at `now` to a tty that takes it all; the bytes.
fn write_all(l: &mut Line, now: Instant) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = l.poll_write(now) {
        let n = chunk.len();
        out.extend_from_slice(chunk);
        l.wrote(n);
    }
    out
}

/// [`write_all`] every ms from `from` to `to` (inclusive); the bytes.
fn step(l: &mut Line, from: u64, to: u64) -> Vec<u8> {
    (from..=to).flat_map(|ms| write_all(l, at_ms(ms))).collect()
}

fn tcp(seq: u32, len: usize) -> Vec<u8> {
    let mut p = Tcp::new([10, 0, 0, 1], 5000, [10, 0, 0, 2], 5201);
    p.seq = seq;
    p.id = seq as u16;
    p.payload = (0..len).map(|i| (i * 7 + seq as usize) as u8).collect();
    p.build()
}

#[test]
fn eight_n_one_arithmetic() {
    assert_eq!(BITS_PER_BYTE, 10);
    assert_eq!(bytes_per_sec(115_200), 11_520);
    assert_eq!(bytes_per_sec(9600), 960);
    assert_eq!(byte_time(9600), Duration::from_nanos(1_041_666));
    assert_eq!(line_time(1402, 115_200), Duration::from_nanos(121_701_388));
    assert_eq!(line_micros(1402, 115_200), 121_701);
    assert_eq!(line_micros(10, 0), 100_000_000, "baud 0 counts as 1");
    assert_eq!(data_bits_per_sec(115_200), 92_160.0);
}

#[test]
fn the_writer_keeps_to_the_line_clock() {
    let mut l = open_line(9600, Framing::Slip);
    // 960 bytes/s: 10 ms is 9.6 bytes.
    assert!(l.send(&[0x11; 1000], false));
    assert_eq!(
        write_all(&mut l, at_ms(1000)).len(),
        9,
        "AHEAD = 10 ms at 960 B/s"
    );
    // Nothing more until the line has sent some.
    assert!(write_all(&mut l, at_ms(1000)).is_empty());
    let next = l.next_write().expect("bytes wait");
    assert!(next > at_ms(1000) && next <= at_ms(1006), "{next:?}");
    // A late poll still offers only AHEAD: the line sent nothing meanwhile.
    assert_eq!(write_all(&mut l, at_ms(1200)).len(), 9);
    // Polling every ms for 300 ms: 288 more bytes.
    let n = step(&mut l, 1201, 1500).len();
    assert!((287..=289).contains(&n), "{n}");
    assert_eq!(
        step(&mut l, 1501, 3000).len(),
        1002 - 18 - n,
        "the rest, ENDs included"
    );
    assert_eq!(l.counters().tx_line_bytes, 1002);
    assert_eq!(l.next_write(), None);
    // Idle: the next frame starts from now, not from the past.
    assert!(l.send(&[1, 2, 3], false));
    assert_eq!(write_all(&mut l, at_ms(10_000)).len(), 5);
    // The buffer holds two full frames (more than 0.5 s at this rate).
    assert!(l.send(&[0x11; 1400], false));
    assert!(l.send(&[0x11; 1400], false));
    assert!(!l.send(&[0x11; 1400], false));
    assert_eq!(l.counters().tx_overflow, 1);
}

#[test]
fn a_tty_that_takes_less_moves_the_clock_by_what_it_took() {
    let mut l = open_line(9600, Framing::Slip);
    assert!(l.send(&[0x11; 100], false));
    let offered = l.poll_write(at_ms(1000)).expect("an offer").len();
    assert_eq!(offered, 9);
    l.wrote(4);
    assert_eq!(l.counters().tx_line_bytes, 4);
    // The clock moved by 4 bytes: 5 more fit now.
    assert_eq!(l.poll_write(at_ms(1000)).map(<[u8]>::len), Some(5));
    l.would_block();
    assert_eq!(l.counters().tx_would_block, 1);
    // Refused bytes are offered again; a stray `wrote` without an offer does nothing.
    l.wrote(100);
    assert_eq!(l.counters().tx_line_bytes, 4);
    assert_eq!(write_all(&mut l, at_ms(1000)).len(), 5);
    assert_eq!(l.pending(), 102 - 9);
}

#[test]
fn control_frames_go_before_waiting_data_but_never_inside_a_frame() {
    let mut l = open_line(9600, Framing::Slip);
    let d1 = data_datagram(1, &tcp(1, 100));
    let d2 = data_datagram(2, &tcp(2, 100));
    assert!(l.send(&d1, false));
    assert!(l.send(&d2, false));
    // The first frame starts now; the probe comes while it is on the line.
    let mut line = write_all(&mut l, at_ms(1000));
    assert!(l.send(&probe_datagram(9), true));
    line.extend(step(&mut l, 1001, 1600));
    let mut rx = FrameCodec::new(Framing::Slip, 1420);
    let mut got = Vec::new();
    rx.decode(&line, &mut |d| got.push(d.to_vec()));
    assert_eq!(got, vec![d1, probe_datagram(9), d2]);
    assert_eq!(rx.counters().rx_bad_frames, 0);
    // The control lane is bounded on its own: a full data buffer does not stop it.
    while l.send(&[0x11; 1400], false) {}
    assert!(l.send(&probe_datagram(10), true));
}

#[test]
fn a_closed_line_refuses_and_a_reopened_one_starts_afresh() {
    let mut l = Line::new(config(9600, Framing::Cslip), 7000);
    assert!(!l.is_open());
    assert!(!l.send(&[1, 2, 3], false));
    assert_eq!(l.counters().tx_closed, 1);
    assert_eq!(l.poll_write(at_ms(0)), None);
    l.open();
    for k in 0..3u32 {
        assert!(l.send(&data_datagram(u64::from(k), &tcp(k * 100, 100)), false));
    }
    assert!(!write_all(&mut l, at_ms(1000)).is_empty());
    l.close();
    assert_eq!(
        (l.pending(), l.next_write()),
        (0, None),
        "pending discarded"
    );
    assert!(!l.send(&[1, 2, 3], false));
    // Reopened: a fresh receiver decodes the very next frame (full data header, the
    // packet uncompressed: the codec started afresh).
    l.open();
    let d = data_datagram(10, &tcp(1000, 100));
    assert!(l.send(&d, false));
    let bytes = step(&mut l, 2000, 3000);
    let mut rx = FrameCodec::new(Framing::Cslip, 1420);
    let mut got = Vec::new();
    rx.decode(&bytes, &mut |x| got.push(x.to_vec()));
    assert_eq!(got, vec![d]);
    assert_eq!(l.counters().tx_closed, 2);
}

#[test]
fn the_rate_follows_compression_and_the_backlog() {
    let mut l = Line::new(config(115_200, Framing::Cslip), 80_000);
    l.open();
    let first = l.rate_update(at_ms(0)).expect("automatic");
    assert!(first.abs_diff(80_000) <= 1, "{first}: the initial rate");
    let mut low = Line::new(config(115_200, Framing::Cslip), 10);
    assert_eq!(
        low.rate_update(at_ms(0)),
        Some(9216),
        "at least 10 % of the line"
    );
    assert_eq!(l.rate_update(at_ms(50)), None, "every 100 ms");
    // Compressed TCP: fewer line bytes than datagram bytes, so the rate goes up.
    for round in 1..=20u64 {
        for k in 0..4u32 {
            let seq = round as u32 * 4 + k;
            assert!(l.send(
                &data_datagram(u64::from(seq), &tcp(seq * 1000, 1000)),
                false
            ));
        }
        step(&mut l, round * 1000, round * 1000 + 900);
        let _ = l.rate_update(at_ms(round * 1000 + 950));
    }
    let bps = l.rate_update(at_ms(30_000)).expect("automatic");
    assert!(
        bps > 92_160,
        "{bps} above 80 % of 115200: headers compressed"
    );
    // A backlog lowers it.
    for k in 0..4u32 {
        assert!(l.send(&data_datagram(u64::from(k), &tcp(k * 1000, 1000)), false));
    }
    let slow = l.rate_update(at_ms(31_000)).expect("automatic");
    assert!(slow < bps * 9 / 10, "{slow} {bps}");
    // A fixed rate and a raw-ip line are left alone.
    let fixed = LineConfig {
        auto_bps: false,
        ..config(115_200, Framing::Slip)
    };
    assert_eq!(Line::new(fixed, 5000).rate_update(at_ms(0)), None);
    let raw = LineConfig {
        raw_ip: true,
        ..config(115_200, Framing::Slip)
    };
    assert_eq!(Line::new(raw, 5000).rate_update(at_ms(0)), None);
}

/// One direction of a simulated 8N1 wire: bytes handed over queue in the UART and leave
/// at exactly `baud / 10` bytes per second (its own float clock, not the line's).
struct Wire {
    baud: f64,
    /// When the UART will have sent everything, s.
    free: f64,
    /// Chunks in flight and when their last byte arrives.
    flight: VecDeque<(Instant, Vec<u8>)>,
    /// The longest the UART's queue was, s.
    max_queue: f64,
    first: Option<Instant>,
    last: Instant,
}

impl Wire {
    fn new(baud: u32) -> Wire {
        Wire {
            baud: f64::from(baud),
            free: 0.0,
            flight: VecDeque::new(),
            max_queue: 0.0,
            first: None,
            last: Instant::ZERO,
        }
    }

    fn put(&mut self, now: Instant, bytes: &[u8]) {
        let t = now.as_micros() as f64 / 1e6;
        self.free = self.free.max(t) + bytes.len() as f64 * 10.0 / self.baud;
        self.max_queue = self.max_queue.max(self.free - t);
        let arrive = Instant::from_micros((self.free * 1e6).ceil() as u64);
        self.first.get_or_insert(now);
        self.last = arrive;
        self.flight.push_back((arrive, bytes.to_vec()));
    }

    fn deliver(&mut self, now: Instant, to: &mut Line, got: &mut Vec<Vec<u8>>) {
        while self.flight.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, bytes)) = self.flight.pop_front() {
                to.receive(&bytes, &mut |d| got.push(d.to_vec()));
            }
        }
    }
}

/// What one end sends: data datagrams and, now and then, a probe (control lane).
fn traffic(n: u32, payload: impl Fn(u32) -> usize) -> Vec<(Vec<u8>, bool)> {
    (0..n)
        .map(|k| {
            if k % 25 == 24 {
                (probe_datagram(k), true)
            } else {
                let ip = tcp(k * 1500, payload(k));
                (data_datagram(u64::from(k), &ip), false)
            }
        })
        .collect()
}

/// Two lines at 115200 bd (CSLIP with the CRC) against each other in virtual time, each
/// end offering datagrams as fast as its line takes them: every datagram arrives intact
/// (data in order, probes in order), the line carries `baud / 10` bytes per second, and
/// the UART never holds more than [`AHEAD`] of line time.
#[test]
fn two_lines_exchange_datagrams_in_virtual_time() {
    const BAUD: u32 = 115_200;
    let cfg = LineConfig {
        crc: true,
        ..config(BAUD, Framing::Cslip)
    };
    let (mut a, mut b) = (Line::new(cfg, 80_000), Line::new(cfg, 80_000));
    a.open();
    b.open();
    let a_out = traffic(300, |k| 200 + (k as usize * 37) % 1000);
    let b_out = traffic(200, |k| (k as usize * 13) % 120);
    let (mut ab, mut ba) = (Wire::new(BAUD), Wire::new(BAUD));
    let (mut at_b, mut at_a) = (Vec::new(), Vec::new());
    let (mut next_a, mut next_b) = (0, 0);
    let mut now = Instant::from_millis(1);
    for _ in 0..100_000 {
        ab.deliver(now, &mut b, &mut at_b);
        ba.deliver(now, &mut a, &mut at_a);
        while a_out
            .get(next_a)
            .is_some_and(|(d, control)| a.send(d, *control))
        {
            next_a += 1;
        }
        while b_out
            .get(next_b)
            .is_some_and(|(d, control)| b.send(d, *control))
        {
            next_b += 1;
        }
        // Each line is written when it says so (a driver may write on any wake-up; this
        // one keeps the event count down).
        for (line, wire) in [(&mut a, &mut ab), (&mut b, &mut ba)] {
            if line.next_write().is_none_or(|t| t > now) {
                continue;
            }
            while let Some(chunk) = line.poll_write(now) {
                let n = chunk.len();
                wire.put(now, chunk);
                line.wrote(n);
            }
        }
        let next = [
            a.next_write(),
            b.next_write(),
            ab.flight.front().map(|(at, _)| *at),
            ba.flight.front().map(|(at, _)| *at),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) => now = t.max(now + Duration::from_micros(1)),
            None => break,
        }
    }
    assert_eq!(
        (next_a, next_b),
        (a_out.len(), b_out.len()),
        "all offered by {now:?}"
    );
    // Every datagram arrived intact: data in order, probes in order.
    let is_probe = |d: &[u8]| d.get(1) == Some(&(MessageType::Probe as u8));
    for (sent, got) in [(&a_out, &at_b), (&b_out, &at_a)] {
        for control in [false, true] {
            let want: Vec<&Vec<u8>> = sent
                .iter()
                .filter(|(_, c)| *c == control)
                .map(|(d, _)| d)
                .collect();
            let got: Vec<&Vec<u8>> = got.iter().filter(|d| is_probe(d) == control).collect();
            assert_eq!(got, want, "control {control}");
        }
    }
    let (ca, cb) = (a.counters(), b.counters());
    assert_eq!(cb.rx_frames, a_out.len() as u64);
    assert_eq!(ca.rx_frames, b_out.len() as u64);
    assert_eq!(cb.rx_line_bytes, ca.tx_line_bytes);
    assert!(ca.tx_overflow > 0, "A kept its line full");
    assert!(a
        .codec()
        .compressor()
        .is_some_and(|c| c.stats().compressed > 200));
    // Status: what B's decompressor took is what A's compressor sent.
    let (sa, sb) = (a.status(at_ms(0)), b.status(at_ms(0)));
    let (tx, rx) = (sa.cslip_tx.expect("CSLIP"), sb.cslip_rx.expect("CSLIP"));
    assert_eq!(
        (rx.compressed, rx.uncompressed),
        (tx.compressed, tx.uncompressed)
    );
    assert_eq!((rx.tossed, rx.errors, rx.runts, rx.badcheck), (0, 0, 0, 0));
    // The pace: baud / 10 bytes per second over the whole exchange, and never more than
    // AHEAD of line time waiting in the UART.
    let first = ab.first.expect("a wrote");
    let secs = ab.last.saturating_since(first).as_secs_f64();
    let rate = ca.tx_line_bytes as f64 / secs;
    assert!(secs > 5.0, "{secs} s: enough traffic to measure");
    assert!(
        (rate / 11_520.0 - 1.0).abs() < 0.005,
        "{rate:.1} B/s, {} bytes in {secs:.3} s",
        ca.tx_line_bytes
    );
    for w in [&ab, &ba] {
        assert!(w.max_queue <= AHEAD.as_secs_f64() + 1e-6, "{}", w.max_queue);
    }
}
