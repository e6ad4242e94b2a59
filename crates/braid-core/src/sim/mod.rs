//! A deterministic simulator for two bonds, or two whole endpoints, joined by emulated
//! paths.
//!
//! Used by the tests and benchmarks: time starts at zero and jumps to the next event, so
//! minutes of traffic run in milliseconds. Each direction of each path is a
//! [`crate::emu::Emulator`] (rate, delay, jitter, loss, outages), the same model the lab
//! uses inside the live daemon.

use std::collections::VecDeque;

use core::time::Duration;

use crate::bond::{Bond, BondConfig, PathConfig};
use crate::emu::{EmuConfig, EmuStats, Emulator};
use crate::serial::LineConfig;
use crate::CcConfig;
use crate::{Instant, PathId};

mod node;

pub use self::node::{address, Node};

/// One side of the simulated pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The sender in most tests.
    A,
    /// The receiver in most tests.
    B,
}

/// A simulated path: one emulator each way.
#[derive(Debug)]
struct SimPath {
    cfg: PathConfig,
    a_id: PathId,
    b_id: PathId,
    a_to_b: Emulator,
    b_to_a: Emulator,
    /// A serial line: the emulators carry the bytes each end's line writes (set their
    /// rate to the UART's, `baud / 10` bytes a second), not datagrams.
    line: Option<LineConfig>,
    /// While cut, everything sent either way is dropped (the emulators keep state).
    cut: bool,
    /// While held, everything sent either way waits here (`true`: from A), up to
    /// [`HELD_MAX`] datagrams, and goes on when the hold ends: a dead link whose ARP
    /// queue keeps what was sent to it and delivers it when the link comes back.
    held: Option<Vec<(bool, Vec<u8>)>>,
}

/// Datagrams a held path keeps (the kernel's ARP queue: `unres_qlen_bytes` 212 992, about
/// 150 full-size packets).
pub const HELD_MAX: usize = 150;

/// Two nodes (bare bonds, or whole endpoints with sealing) and the paths between them.
#[derive(Debug)]
pub struct Pair<N: Node = Bond> {
    /// Simulated time.
    pub now: Instant,
    /// Left node.
    pub a: N,
    /// Right node.
    pub b: N,
    paths: Vec<SimPath>,
    buf: Vec<u8>,
    /// A line's bytes on their way to its emulator.
    chunk: Vec<u8>,
    /// Packets delivered to A's TUN.
    pub delivered_a: VecDeque<Vec<u8>>,
    /// Packets delivered to B's TUN.
    pub delivered_b: VecDeque<Vec<u8>>,
}

impl Pair<Bond> {
    /// Two bonds with the same config and no paths.
    pub fn new(cfg: BondConfig) -> Self {
        let now = Instant::ZERO;
        let mut b_cfg = cfg.clone();
        b_cfg.seed = cfg.seed.wrapping_add(1);
        b_cfg.epoch = !cfg.epoch;
        Pair::of(Bond::new(cfg, now), Bond::new(b_cfg, now))
    }

    /// Restart one side: its bond is replaced by a new one built from `cfg` (with the
    /// same paths), as a daemon that was stopped and started again. What was queued or
    /// held in the old one is lost; datagrams already on the wire still arrive.
    pub fn restart(&mut self, side: Side, cfg: BondConfig) {
        let bond = Bond::new(cfg, self.now);
        self.replace(side, bond);
    }
}

impl<N: Node> Pair<N> {
    /// Two nodes made at time zero, no paths yet.
    pub fn of(a: N, b: N) -> Self {
        Self {
            now: Instant::ZERO,
            a,
            b,
            paths: Vec::new(),
            buf: vec![0; 65536 + 256],
            chunk: Vec::new(),
            delivered_a: VecDeque::new(),
            delivered_b: VecDeque::new(),
        }
    }

    /// Add a path with the same emulation both ways.
    pub fn add_path(&mut self, cfg: PathConfig, emu: EmuConfig) -> usize {
        let i = self.paths.len();
        let mut back = emu.clone();
        back.seed = emu.seed.wrapping_add(0x9e37_79b9);
        let a_id = self.a.add_path(self.now, cfg.clone(), i, Side::A);
        let b_id = self.b.add_path(self.now, cfg.clone(), i, Side::B);
        self.paths.push(SimPath {
            cfg,
            a_id,
            b_id,
            a_to_b: Emulator::new(emu, self.now),
            b_to_a: Emulator::new(back, self.now),
            line: None,
            cut: false,
            held: None,
        });
        i
    }

    /// Add a serial line: each end's endpoint frames and paces its datagrams
    /// ([`crate::serial::Line`]); each way an emulator at the UART's byte rate (8N1:
    /// `baud / 10` bytes a second) plus `delay` carries the bytes.
    pub fn add_line(&mut self, cfg: PathConfig, line: LineConfig, delay: Duration) -> usize {
        let i = self.paths.len();
        let emu = EmuConfig {
            rate_bps: u64::from(crate::serial::bytes_per_sec(line.baud)) * 8,
            delay,
            ..EmuConfig::default()
        };
        let a_id = self.a.add_line(self.now, cfg.clone(), line);
        let b_id = self.b.add_line(self.now, cfg.clone(), line);
        self.paths.push(SimPath {
            cfg,
            a_id,
            b_id,
            a_to_b: Emulator::new(emu.clone(), self.now),
            b_to_a: Emulator::new(emu, self.now),
            line: Some(line),
            cut: false,
            held: None,
        });
        i
    }

    /// Replace one side's node by `node` (its paths added again), as a daemon that was
    /// stopped and started again.
    pub fn replace(&mut self, side: Side, mut node: N) {
        for (i, p) in self.paths.iter_mut().enumerate() {
            let id = match p.line {
                Some(line) => node.add_line(self.now, p.cfg.clone(), line),
                None => node.add_path(self.now, p.cfg.clone(), i, side),
            };
            match side {
                Side::A => p.a_id = id,
                Side::B => p.b_id = id,
            }
        }
        match side {
            Side::A => self.a = node,
            Side::B => self.b = node,
        }
    }

    /// Cut or restore path `i` (both directions drop everything while cut).
    pub fn set_cut(&mut self, i: usize, cut: bool) {
        self.paths[i].cut = cut;
    }

    /// Hold path `i` (both directions keep what is sent, see `SimPath::held`) or let
    /// what it held go on, in order, now.
    pub fn set_held(&mut self, i: usize, hold: bool) {
        let now = self.now;
        let p = &mut self.paths[i];
        if hold {
            p.held.get_or_insert_with(Vec::new);
            return;
        }
        for (from_a, d) in p.held.take().unwrap_or_default() {
            let emu = if from_a { &mut p.a_to_b } else { &mut p.b_to_a };
            emu.push(now, &d);
        }
    }

    /// What `from` has put on path `i` so far (its emulator's counts that way).
    pub fn carried(&self, i: usize, from: Side) -> EmuStats {
        let p = &self.paths[i];
        match from {
            Side::A => p.a_to_b.stats(),
            Side::B => p.b_to_a.stats(),
        }
    }

    /// The path id of simulated path `i` on side A.
    pub fn a_path(&self, i: usize) -> PathId {
        self.paths[i].a_id
    }

    /// The path id of simulated path `i` on side B.
    pub fn b_path(&self, i: usize) -> PathId {
        self.paths[i].b_id
    }

    /// Run both nodes until `until`, calling `inject(now, pair)` whenever time moves so
    /// the test can feed the TUNs. Returns the number of steps taken.
    pub fn run_until(&mut self, until: Instant, mut inject: impl FnMut(&mut Pair<N>)) -> u64 {
        let mut steps = 0u64;
        while self.now < until {
            steps += 1;
            inject(self);
            self.step();
            let next = self.next_event().unwrap_or(until).min(until);
            // Time always moves forward by at least a microsecond so nothing spins.
            self.now = next.max(self.now + Duration::from_micros(1));
        }
        steps
    }

    /// `n` paths that pacing leaves alone (100 Gbit/s from the start, no emulated limit),
    /// then half a second for them to come up: the benchmarks' paths, where the bond's own
    /// cost is measured and not a link's.
    pub fn add_unpaced_paths(&mut self, n: usize) {
        let cc = CcConfig {
            initial_rate_bps: 100_000_000_000,
            min_rate_bps: 100_000_000_000,
            max_rate_bps: 0,
            ..CcConfig::default()
        };
        for i in 0..n {
            let name = format!("p{i}");
            self.add_path(
                PathConfig {
                    name,
                    cc,
                    ..PathConfig::default()
                },
                EmuConfig::default(),
            );
        }
        let until = self.now + Duration::from_millis(500);
        self.run_until(until, |_| {});
    }

    /// A benchmark's turn, without the emulators or the timers: at `now`, `packet` enters
    /// A's TUN, every datagram either side sends goes straight to the other, and what B
    /// delivers is taken as the daemon takes it (lent, [`Node::poll_deliver_ref`]). Returns
    /// how many packets B delivered. The clock counts whole microseconds: a caller
    /// stepping `now` by less stands still.
    pub fn exchange(&mut self, now: Instant, packet: &[u8]) -> usize {
        self.exchange_run(now, [packet])
    }

    /// [`Pair::exchange`] with a run of packets entering A's TUN at the same instant (as
    /// the daemon hands over the segments of a TUN superframe) before either side sends.
    pub fn exchange_run<'p>(
        &mut self,
        now: Instant,
        packets: impl IntoIterator<Item = &'p [u8]>,
    ) -> usize {
        self.now = now;
        let mut delivered = 0;
        for packet in packets {
            self.a.handle_tun_packet(now, packet);
        }
        while let Some((path, len)) = self.a.transmit(now, &mut self.buf) {
            if let Some(i) = self.paths.iter().position(|p| p.a_id == path) {
                let id = self.paths[i].b_id;
                let mut count = |p: &[u8]| {
                    core::hint::black_box(p);
                    delivered += 1;
                };
                self.b
                    .receive(now, id, i, Side::A, &mut self.buf[..len], &mut count);
            }
        }
        while let Some((path, len)) = self.b.transmit(now, &mut self.buf) {
            if let Some(i) = self.paths.iter().position(|p| p.b_id == path) {
                let id = self.paths[i].a_id;
                // What comes back to A is not what this counts.
                self.a
                    .receive(now, id, i, Side::B, &mut self.buf[..len], &mut |_| {});
            }
        }
        while let Some(p) = self.b.poll_deliver_ref(now) {
            core::hint::black_box(p);
            delivered += 1;
        }
        delivered
    }

    /// The earliest time either node or any emulated path has something to do.
    pub fn next_event(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut merge = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        merge(self.a.poll_timeout());
        merge(self.b.poll_timeout());
        for p in &self.paths {
            merge(p.a_to_b.poll_timeout());
            merge(p.b_to_a.poll_timeout());
        }
        next
    }

    /// One turn of both event loops at the current time.
    pub fn step(&mut self) {
        let now = self.now;
        // Arrivals.
        for i in 0..self.paths.len() {
            let line = self.paths[i].line.is_some();
            while let Some(n) = self.paths[i].a_to_b.poll(now, &mut self.buf) {
                let id = self.paths[i].b_id;
                if line {
                    self.b.line_receive(now, id, &self.buf[..n]);
                } else {
                    let to = &mut self.delivered_b;
                    let mut deliver = |p: &[u8]| to.push_back(p.to_vec());
                    self.b
                        .receive(now, id, i, Side::A, &mut self.buf[..n], &mut deliver);
                }
            }
            while let Some(n) = self.paths[i].b_to_a.poll(now, &mut self.buf) {
                let id = self.paths[i].a_id;
                if line {
                    self.a.line_receive(now, id, &self.buf[..n]);
                } else {
                    let to = &mut self.delivered_a;
                    let mut deliver = |p: &[u8]| to.push_back(p.to_vec());
                    self.a
                        .receive(now, id, i, Side::B, &mut self.buf[..n], &mut deliver);
                }
            }
        }
        for side in [Side::A, Side::B] {
            let node = match side {
                Side::A => &mut self.a,
                Side::B => &mut self.b,
            };
            if node.poll_timeout().is_some_and(|t| t <= now) {
                node.handle_timeout(now);
            }
            while let Some((path, len)) = node.transmit(now, &mut self.buf) {
                let Some(p) = self.paths.iter_mut().find(|p| match side {
                    Side::A => p.a_id == path,
                    Side::B => p.b_id == path,
                }) else {
                    continue;
                };
                if p.cut {
                    continue;
                }
                if let Some(h) = &mut p.held {
                    if h.len() < HELD_MAX {
                        h.push((side == Side::A, self.buf[..len].to_vec()));
                    }
                    continue;
                }
                let emu = match side {
                    Side::A => &mut p.a_to_b,
                    Side::B => &mut p.b_to_a,
                };
                emu.push(now, &self.buf[..len]);
            }
            // The lines write what their clocks allow; the bytes ride their emulator.
            for p in self.paths.iter_mut().filter(|p| p.line.is_some()) {
                let (id, emu) = match side {
                    Side::A => (p.a_id, &mut p.a_to_b),
                    Side::B => (p.b_id, &mut p.b_to_a),
                };
                while node.line_write(now, id, &mut self.chunk) {
                    // A cut line loses what is written to it.
                    if !p.cut {
                        emu.push(now, &self.chunk);
                    }
                }
            }
            let out = match side {
                Side::A => &mut self.delivered_a,
                Side::B => &mut self.delivered_b,
            };
            while let Some(n) = node.poll_deliver(now, &mut self.buf) {
                out.push_back(self.buf[..n].to_vec());
            }
        }
    }
}

/// A zeroed IPv4 packet of `len` bytes from 10.200.0.1 to 10.200.0.2 with a 20-byte
/// header for `protocol`.
fn ipv4(len: usize, protocol: u8) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = protocol;
    p[12..16].copy_from_slice(&[10, 200, 0, 1]);
    p[16..20].copy_from_slice(&[10, 200, 0, 2]);
    p
}

/// An IPv4/UDP packet of `len` bytes (at least 36) whose payload starts with `seq`.
pub fn udp_packet(seq: u64, len: usize, sport: u16, dport: u16) -> Vec<u8> {
    let len = len.max(36);
    let mut p = ipv4(len, 17);
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
    p[28..36].copy_from_slice(&seq.to_be_bytes());
    p
}

/// An IPv4/TCP segment from 10.200.0.1:`sport` to 10.200.0.2:5201: a 20-byte TCP header
/// with `flags` and sequence number `seq`, then `payload` zero bytes.
pub fn tcp_packet(seq: u32, payload: usize, sport: u16, flags: u8) -> Vec<u8> {
    let mut p = ipv4(40 + payload, 6);
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&5201u16.to_be_bytes());
    p[24..28].copy_from_slice(&seq.to_be_bytes());
    p[32] = 5 << 4;
    p[33] = flags;
    p
}

/// The sequence number [`udp_packet`] put in a packet.
pub fn packet_seq(p: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(p.get(28..36)?.try_into().ok()?))
}
