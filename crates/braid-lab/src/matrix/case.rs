//! One fault-matrix case, drawn from its seed: paths, emulation, scheduler, sealing,
//! transfer size and the faults to inject. Drawing is pure (no I/O), so a seed always
//! gives the same case and `braid lab fault-matrix --cases 1 --seed S` replays it.
use std::fmt;

use anyhow::Result;

use crate::netns::Link;
use crate::scenario::Scenario;

/// braid's schedulers, each drawn with the same probability.
pub const SCHEDULERS: &[&str] = &[
    "eql",
    "round-robin",
    "weighted",
    "active-backup",
    "xor",
    "broadcast",
    "adaptive",
];

/// Smallest and largest transfer, bytes.
pub const MIN_SIZE: u64 = 256 << 10;
/// Largest transfer, bytes.
pub const MAX_SIZE: u64 = 8 << 20;
/// A transfer is cut to about this many seconds at the case's estimated rate (but never
/// below [`MIN_SIZE`]), so that a case lasts a few seconds.
const TARGET_TRANSFER_S: f64 = 6.0;

/// SplitMix64: the lab's seeded generator (the same one the core's emulator uses).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        let i = self.range(0, items.len().saturating_sub(1) as u64) as usize;
        &items[i]
    }
}

/// SplitMix64's output function.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One emulated path.
#[derive(Clone, Debug, PartialEq)]
pub struct PathDraw {
    /// The emulator's rate, bit/s.
    pub rate_bps: u64,
    /// One-way delay, ms.
    pub delay_ms: u64,
    /// Jitter (uniform extra delay, order kept), ms.
    pub jitter_ms: u64,
    /// Loss probability.
    pub loss: f64,
    /// Whether the path's `bps` is configured (= its rate) or left to be measured.
    pub bps_configured: bool,
}

/// Which daemon a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Namespace a (the sender of the transfer).
    A,
    /// Namespace b (the receiver).
    B,
}

impl Side {
    /// "a" or "b".
    pub fn name(self) -> &'static str {
        match self {
            Side::A => "a",
            Side::B => "b",
        }
    }
}

/// What junk datagrams look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JunkShape {
    /// Random bytes of random length.
    Random,
    /// Starting `02 01` (a handshake initiation's type), random rest and length.
    Handshake,
    /// A braid data header (version 1, type 0) and a random rest.
    Data,
}

/// A fault and its parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultKind {
    /// Path `path`'s veth down on both ends for `down_ms`, then up.
    Flap {
        /// Path index.
        path: usize,
        /// How long it stays down.
        down_ms: u64,
    },
    /// One end stopped with SIGTERM (`kill == false`) or SIGKILL, started again after
    /// `down_ms`.
    Restart {
        /// Which end.
        side: Side,
        /// SIGKILL instead of SIGTERM.
        kill: bool,
        /// Time between the exit and the new start.
        down_ms: u64,
    },
    /// SIGHUP to one end (skipped unless reload faults are on).
    Reload {
        /// Which end.
        side: Side,
    },
    /// Many clients on one end's control socket: idle connections, garbage and status
    /// requests, for `ms`.
    ControlFlood {
        /// Which end.
        side: Side,
        /// How long.
        ms: u64,
    },
    /// Datagrams to one end's path port, sent from inside the other namespace.
    Junk {
        /// The end receiving them.
        side: Side,
        /// Its path.
        path: usize,
        /// Datagrams per second.
        pps: u64,
        /// How long.
        ms: u64,
        /// What they look like.
        shape: JunkShape,
    },
}

impl FaultKind {
    /// The kind's name in reports: `flap`, `restart-term`, `restart-kill`, `reload`,
    /// `control-flood`, `junk`.
    pub fn name(&self) -> &'static str {
        match self {
            FaultKind::Flap { .. } => "flap",
            FaultKind::Restart { kill: false, .. } => "restart-term",
            FaultKind::Restart { kill: true, .. } => "restart-kill",
            FaultKind::Reload { .. } => "reload",
            FaultKind::ControlFlood { .. } => "control-flood",
            FaultKind::Junk { .. } => "junk",
        }
    }
}

/// Every fault kind's name, in report order.
pub const FAULT_KINDS: &[&str] = &[
    "flap",
    "restart-term",
    "restart-kill",
    "reload",
    "control-flood",
    "junk",
];

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultKind::Flap { path, down_ms } => write!(f, "flap p{path} for {down_ms} ms"),
            FaultKind::Restart {
                side,
                kill,
                down_ms,
            } => write!(
                f,
                "{} to {}, started again {down_ms} ms after it exits",
                if *kill { "SIGKILL" } else { "SIGTERM" },
                side.name()
            ),
            FaultKind::Reload { side } => write!(f, "SIGHUP {}", side.name()),
            FaultKind::ControlFlood { side, ms } => {
                write!(f, "control-socket flood on {} for {ms} ms", side.name())
            }
            FaultKind::Junk {
                side,
                path,
                pps,
                ms,
                shape,
            } => write!(
                f,
                "junk ({}) to {}'s p{path} at {pps}/s for {ms} ms",
                match shape {
                    JunkShape::Random => "random",
                    JunkShape::Handshake => "02 01...",
                    JunkShape::Data => "data header",
                },
                side.name()
            ),
        }
    }
}

/// A fault at `at_ms` after the transfer starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// When, ms after the transfer starts.
    pub at_ms: u64,
    /// What.
    pub kind: FaultKind,
}

/// A case: everything a seed decides.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Its seed.
    pub seed: u64,
    /// The paths (1-4).
    pub paths: Vec<PathDraw>,
    /// The scheduler.
    pub scheduler: &'static str,
    /// Sealed (keys) or plain (`encryption = "none"`).
    pub sealed: bool,
    /// `equalize_ms = 0` (reordering reaches TCP) instead of the default.
    pub no_equalize: bool,
    /// Bytes to transfer.
    pub size: u64,
    /// Faults, in time order.
    pub faults: Vec<Fault>,
}

impl Case {
    /// Draw the case of `seed`.
    pub fn draw(seed: u64) -> Case {
        let mut r = Rng::new(seed);
        let n = r.range(1, 4) as usize;
        let paths: Vec<PathDraw> = (0..n)
            .map(|_| {
                let delay_ms = r.range(0, 30);
                PathDraw {
                    rate_bps: r.range(2, 12) * 1_000_000,
                    delay_ms,
                    jitter_ms: r.range(0, delay_ms.min(8)),
                    loss: if r.chance(0.5) {
                        0.0
                    } else {
                        r.range(1, 20) as f64 / 1000.0
                    },
                    bps_configured: r.chance(0.5),
                }
            })
            .collect();
        let scheduler = *r.pick(SCHEDULERS);
        let sealed = r.chance(0.5);
        let no_equalize = r.chance(0.5);
        // Log-uniform size, then cut to a few seconds at the estimated rate.
        let span = (MAX_SIZE as f64 / MIN_SIZE as f64).ln();
        let drawn = (MIN_SIZE as f64 * (r.unit() * span).exp()) as u64;
        let mut case = Case {
            seed,
            paths,
            scheduler,
            sealed,
            no_equalize,
            size: drawn,
            faults: Vec::new(),
        };
        let cap = (case.rate_estimate_bps() / 8.0 * TARGET_TRANSFER_S) as u64;
        case.size = drawn.min(cap).clamp(MIN_SIZE, MAX_SIZE);
        // Faults start while the transfer runs (at 100 ms up to 80 % of its expected
        // time); they run one after the other, so a later one may start after it.
        let span_ms = (case.expected_ms() as f64 * 0.7) as u64;
        let count = r.range(1, 3);
        let mut faults: Vec<Fault> = (0..count)
            .map(|_| Fault {
                at_ms: 100 + r.range(0, span_ms.max(100)),
                kind: draw_kind(&mut r, n),
            })
            .collect();
        faults.sort_by_key(|f| f.at_ms);
        case.faults = faults;
        case
    }

    /// What the bond should carry of one TCP flow, bit/s (a guess for timing only: the
    /// sum of the rates for schedulers that spread a flow, the slowest path for those that
    /// keep it on one path or copy it to all, at 60 %).
    pub fn rate_estimate_bps(&self) -> f64 {
        let min = self.paths.iter().map(|p| p.rate_bps).min().unwrap_or(0) as f64;
        let sum: f64 = self.paths.iter().map(|p| p.rate_bps as f64).sum();
        let base = match self.scheduler {
            "xor" | "active-backup" | "broadcast" => min,
            _ => sum,
        };
        base * 0.6
    }

    /// The transfer's expected duration without faults, ms.
    pub fn expected_ms(&self) -> u64 {
        let bps = self.rate_estimate_bps().max(1e5);
        (self.size as f64 * 8.0 / bps * 1000.0) as u64
    }

    /// The lab scenario (bond and paths) the daemons' configs are made from.
    pub fn scenario(&self) -> Result<Scenario> {
        let mut bond = toml::Table::new();
        bond.insert("scheduler".into(), self.scheduler.into());
        if !self.sealed {
            bond.insert("encryption".into(), "none".into());
        }
        if self.no_equalize {
            bond.insert("equalize_ms".into(), toml::Value::Integer(0));
        }
        let mut text = toml::Table::new();
        text.insert("name".into(), format!("case-{}", self.seed).into());
        text.insert("baseline_s".into(), toml::Value::Integer(0));
        text.insert("bond".into(), toml::Value::Table(bond));
        let mut paths = Vec::new();
        for (i, p) in self.paths.iter().enumerate() {
            let mut t = toml::Table::new();
            t.insert("name".into(), format!("p{i}").into());
            if p.bps_configured {
                t.insert("bps".into(), int(p.rate_bps));
            }
            let mut e = toml::Table::new();
            e.insert("rate_bps".into(), int(p.rate_bps));
            e.insert("delay_ms".into(), toml::Value::Float(p.delay_ms as f64));
            e.insert("jitter_ms".into(), toml::Value::Float(p.jitter_ms as f64));
            e.insert("loss".into(), toml::Value::Float(p.loss));
            e.insert("seed".into(), int(self.seed.wrapping_add(i as u64) >> 2));
            t.insert("emulate".into(), toml::Value::Table(e));
            paths.push(toml::Value::Table(t));
        }
        text.insert("path".into(), toml::Value::Array(paths));
        text.insert(
            "test".into(),
            toml::Value::Array(vec![toml::Value::Table(toml::Table::new())]),
        );
        Scenario::parse(&toml::to_string(&text)?)
    }

    /// Both daemons' configs for `links`.
    pub fn configs(&self, links: &[Link]) -> Result<(String, String)> {
        let sc = self.scenario()?;
        Ok((
            sc.daemon_config(true, links, None)?,
            sc.daemon_config(false, links, None)?,
        ))
    }

    /// One line: what the case is.
    pub fn summary(&self) -> String {
        let paths: Vec<String> = self
            .paths
            .iter()
            .map(|p| {
                let mut s = format!("{}M/{}ms", p.rate_bps / 1_000_000, p.delay_ms);
                if p.jitter_ms > 0 {
                    s += &format!("±{}", p.jitter_ms);
                }
                if p.loss > 0.0 {
                    s += &format!("/{:.1}%", p.loss * 100.0);
                }
                s
            })
            .collect();
        format!(
            "{} path(s) [{}], {}, {}{}, {} KiB",
            self.paths.len(),
            paths.join(" "),
            self.scheduler,
            if self.sealed { "sealed" } else { "plain" },
            if self.no_equalize {
                ", equalize off"
            } else {
                ""
            },
            self.size >> 10
        )
    }
}

fn int(v: u64) -> toml::Value {
    toml::Value::Integer(i64::try_from(v).unwrap_or(i64::MAX))
}

fn draw_side(r: &mut Rng) -> Side {
    if r.chance(0.5) {
        Side::A
    } else {
        Side::B
    }
}

/// Fault kinds by weight: flaps 35 %, restarts 25 %, reloads 10 %, control floods 15 %,
/// junk 15 %.
fn draw_kind(r: &mut Rng, paths: usize) -> FaultKind {
    let x = r.range(0, 99);
    let last = paths.saturating_sub(1) as u64;
    if x < 35 {
        FaultKind::Flap {
            path: r.range(0, last) as usize,
            down_ms: r.range(200, 3000),
        }
    } else if x < 60 {
        FaultKind::Restart {
            side: draw_side(r),
            kill: r.chance(0.5),
            down_ms: r.range(0, 1000),
        }
    } else if x < 70 {
        FaultKind::Reload { side: draw_side(r) }
    } else if x < 85 {
        FaultKind::ControlFlood {
            side: draw_side(r),
            ms: r.range(500, 2000),
        }
    } else {
        FaultKind::Junk {
            side: draw_side(r),
            path: r.range(0, last) as usize,
            pps: r.range(2, 20) * 1000,
            ms: r.range(500, 2000),
            shape: *r.pick(&[JunkShape::Random, JunkShape::Handshake, JunkShape::Data]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_case() {
        assert_eq!(Case::draw(7), Case::draw(7));
        assert_ne!(Case::draw(7), Case::draw(8));
    }

    #[test]
    fn draws_stay_in_their_ranges_and_cover_every_kind() {
        let mut kinds = std::collections::BTreeSet::new();
        let mut schedulers = std::collections::BTreeSet::new();
        let (mut sealed, mut plain) = (0, 0);
        for seed in 0..2000 {
            let c = Case::draw(seed);
            assert!((1..=4).contains(&c.paths.len()));
            assert!((MIN_SIZE..=MAX_SIZE).contains(&c.size), "{}", c.size);
            assert!((1..=3).contains(&c.faults.len()));
            assert!(c.faults.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
            for p in &c.paths {
                assert!((2_000_000..=12_000_000).contains(&p.rate_bps));
                assert!(p.jitter_ms <= p.delay_ms && p.loss <= 0.02);
            }
            for f in &c.faults {
                kinds.insert(f.kind.name());
                if let FaultKind::Flap { path, .. } | FaultKind::Junk { path, .. } = f.kind {
                    assert!(path < c.paths.len());
                }
            }
            schedulers.insert(c.scheduler);
            if c.sealed {
                sealed += 1;
            } else {
                plain += 1;
            }
        }
        assert_eq!(kinds.len(), FAULT_KINDS.len(), "{kinds:?}");
        assert_eq!(schedulers.len(), SCHEDULERS.len());
        assert!(sealed > 800 && plain > 800);
    }

    #[test]
    fn configs_load_as_daemon_configs() {
        let links: Vec<Link> = (0..4)
            .map(|i| Link {
                index: i,
                dev_a: format!("a{i}"),
                dev_b: format!("b{i}"),
                addr_a: std::net::Ipv4Addr::new(10, 201, i as u8, 1),
                addr_b: std::net::Ipv4Addr::new(10, 201, i as u8, 2),
            })
            .collect();
        for seed in 0..50 {
            let c = Case::draw(seed);
            let (a, b) = c.configs(&links).unwrap();
            for text in [&a, &b] {
                let cfg = braid::config::Config::parse(text, "case.toml")
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
                assert_eq!(cfg.paths.len(), c.paths.len());
                assert_eq!(cfg.bond.core.scheduler.name(), c.scheduler);
                let enc = if c.sealed {
                    braid_core::crypto::Cipher::preferred().name()
                } else {
                    "none"
                };
                assert_eq!(cfg.bond.encryption.name(), enc);
            }
        }
    }
}
