//! Lab scenarios: TOML data files (schema in `docs/lab.md`), the built-in ones embedded in
//! the binary so that `braid demo` works from any directory.
use std::path::Path;

use anyhow::{bail, Context, Result};
use braid_core::crypto::{OsRng, PrivateKey};
use serde::{Deserialize, Serialize};

/// The scenarios shipped in `scenarios/`, as (name, TOML text).
pub const BUILTIN: &[(&str, &str)] = &[
    ("demo", include_str!("../../../scenarios/demo.toml")),
    (
        "rates-10-20-40",
        include_str!("../../../scenarios/rates-10-20-40.toml"),
    ),
    (
        "delays-5-20-60",
        include_str!("../../../scenarios/delays-5-20-60.toml"),
    ),
    ("cut", include_str!("../../../scenarios/cut.toml")),
    (
        "eql-57600-14400",
        include_str!("../../../scenarios/eql-57600-14400.toml"),
    ),
    ("xor-l34", include_str!("../../../scenarios/xor-l34.toml")),
    ("xor-l2", include_str!("../../../scenarios/xor-l2.toml")),
    (
        "loss-1pct",
        include_str!("../../../scenarios/loss-1pct.toml"),
    ),
    (
        "single-unshaped",
        include_str!("../../../scenarios/single-unshaped.toml"),
    ),
    (
        "eql-serial-57600-14400",
        include_str!("../../../scenarios/eql-serial-57600-14400.toml"),
    ),
    (
        "single-unshaped-plain",
        include_str!("../../../scenarios/single-unshaped-plain.toml"),
    ),
    (
        "striped-unshaped",
        include_str!("../../../scenarios/striped-unshaped.toml"),
    ),
];

/// One scenario: a topology, a bond configuration and the tests to run over it.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name (shown in the table).
    pub name: String,
    /// One line saying what it shows.
    #[serde(default)]
    pub description: String,
    /// Seconds each bond test runs (a test may override it).
    #[serde(default = "default_duration")]
    pub duration_s: u64,
    /// Seconds each path is measured alone with plain TCP over its veth, to get S
    /// (0 = do not measure; S is then the sum of the configured rates). Absent: as long
    /// as a test ([`Scenario::baseline_seconds`]).
    #[serde(default)]
    pub baseline_s: Option<u64>,
    /// The inner TCP's congestion control (iperf3 `-C`), for the bond and the baselines
    /// alike (default `cubic`, Linux's usual default).
    #[serde(default = "default_tcp_cc")]
    pub tcp_cc: String,
    /// Seconds at the start of every run left out of goodput figures (TCP slow start and
    /// the paths' own start-up), for the bond and the baselines alike (default 2; at most
    /// half a run).
    #[serde(default = "default_warmup")]
    pub warmup_s: f64,
    /// The `[bond]` section of both daemons' configs.
    pub bond: BondSpec,
    /// The paths.
    #[serde(rename = "path")]
    pub paths: Vec<PathSpec>,
    /// The tests, run one after the other, each with freshly started daemons.
    #[serde(rename = "test")]
    pub tests: Vec<TestSpec>,
}

fn default_duration() -> u64 {
    10
}

fn default_tcp_cc() -> String {
    "cubic".into()
}

fn default_warmup() -> f64 {
    2.0
}

/// The bond settings: `scheduler`, and any other `[bond]` key of the daemon's config
/// (copied verbatim; `interface` and `address` are set by the lab).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct BondSpec {
    /// Scheduler name.
    #[serde(default = "default_scheduler")]
    pub scheduler: String,
    /// Other `[bond]` keys (`hash`, `mtu`, ...), passed to the daemon.
    #[serde(flatten)]
    pub extra: toml::Table,
}

fn default_scheduler() -> String {
    "adaptive".into()
}

/// One path: a veth pair, optionally shaped by tbf, optionally emulated by braid; or
/// (`kind = "serial"`) an emulated serial line ([`super::line`]) between the two daemons.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct PathSpec {
    /// Path name in the daemon's config.
    pub name: String,
    /// `"udp"` (default: over the path's veth) or `"serial"` (over an emulated line).
    #[serde(default)]
    pub kind: Option<String>,
    /// Serial: the line's rate, bd (both daemons' `baud`, and the emulator's).
    #[serde(default)]
    pub baud: Option<u32>,
    /// Serial: `slip` (default), `cslip` or `slip6` (both daemons' `framing`).
    #[serde(default)]
    pub framing: Option<String>,
    /// Serial: probability that the line flips a bit of a byte (lab only).
    #[serde(default)]
    pub byte_error_rate: f64,
    /// Serial: line outages `[[start_ms, length_ms], ...]` after the line starts (lab only).
    #[serde(default)]
    pub outages: Vec<[u64; 2]>,
    /// Serial: one-way latency of the line, ms (lab only).
    #[serde(default)]
    pub latency_ms: f64,
    /// tbf rate on both ends of the veth, Mbit/s (absent = unshaped).
    #[serde(default)]
    pub rate_mbit: Option<f64>,
    /// `[path.emulate]` for both daemons (braid's own emulator on each side's egress).
    #[serde(default)]
    pub emulate: Option<toml::Table>,
    /// Other `[[path]]` keys (`bps`, ...), passed to the daemon.
    #[serde(flatten)]
    pub extra: toml::Table,
}

impl PathSpec {
    /// True for an emulated serial line.
    pub fn is_serial(&self) -> bool {
        self.kind.as_deref() == Some("serial")
    }

    /// The rate this path is limited to, bit/s, by tbf or by the emulator (None = unshaped);
    /// for a serial line its byte rate in bits (`baud` · 8/10, what 8N1 leaves).
    pub fn nominal_bps(&self) -> Option<u64> {
        if self.is_serial() {
            return self.baud.map(|b| u64::from(b) * 8 / 10);
        }
        if let Some(m) = self.rate_mbit {
            return Some((m * 1e6) as u64);
        }
        self.emulate
            .as_ref()
            .and_then(|e| e.get("rate_bps"))
            .and_then(toml::Value::as_integer)
            .and_then(|v| u64::try_from(v).ok())
            .filter(|&v| v > 0)
    }

    /// The emulator's one-way delay, ms (0 if none).
    pub fn delay_ms(&self) -> f64 {
        self.emulate
            .as_ref()
            .and_then(|e| e.get("delay_ms"))
            .and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
            .unwrap_or(0.0)
    }
}

/// One measurement through the bond.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TestSpec {
    /// Label (default: "N flow(s)").
    #[serde(default)]
    pub name: Option<String>,
    /// Parallel iperf3 streams (`-P`).
    #[serde(default = "one")]
    pub flows: u32,
    /// Run UDP at this total rate (Mbit/s) instead of TCP.
    #[serde(default)]
    pub udp_mbit: Option<f64>,
    /// Seconds (default: the scenario's `duration_s`).
    #[serde(default)]
    pub duration_s: Option<u64>,
    /// Take a path away during the test.
    #[serde(default)]
    pub cut: Option<Cut>,
    /// Targets checked after the run (a missed one is marked in the table).
    #[serde(default)]
    pub expect: Expect,
}

fn one() -> u32 {
    1
}

impl TestSpec {
    /// The label shown in the table.
    pub fn label(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        let kind = if self.udp_mbit.is_some() { " udp" } else { "" };
        let s = if self.flows == 1 { "" } else { "s" };
        format!("{} flow{s}{kind}", self.flows)
    }
}

/// A path taken away under load.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Cut {
    /// Path name.
    pub path: String,
    /// Seconds after the flow starts.
    pub at_s: f64,
    /// How long, seconds.
    pub for_s: f64,
    /// How the path is taken away.
    #[serde(default)]
    pub how: CutHow,
}

/// How a [`Cut`] takes a path away.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum CutHow {
    /// `ip link set ... down` on both ends of the veth, `up` after.
    #[default]
    LinkDown,
    /// An outage in braid's emulator on both sides (the link stays up, packets vanish).
    Emulator,
}

/// Targets for one test; each is checked only when given.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Bond goodput / S at least this.
    pub min_ratio: Option<f64>,
    /// Bond goodput at least this many times the best single path.
    pub min_x_one_path: Option<f64>,
    /// Every path carries at least this fraction of its capacity.
    pub min_path_util: Option<f64>,
    /// At most this many paths carry traffic (more than 5% of the bond's bytes each).
    pub max_paths_used: Option<usize>,
    /// Longest stall at most this many ms.
    pub max_stall_ms: Option<f64>,
    /// Goodput while cut / remaining paths' S at least this.
    pub min_cut_ratio: Option<f64>,
    /// Cut path carries traffic again within this many ms of returning.
    pub max_rejoin_ms: Option<f64>,
}

impl Scenario {
    /// Set a `[bond]` key from `KEY=VALUE` (a TOML value, or else a string), and say so in
    /// the scenario's name.
    pub fn set_bond_key(&mut self, kv: &str) -> Result<()> {
        let Some((key, value)) = kv.split_once('=') else {
            anyhow::bail!("--bond {kv}: expected KEY=VALUE, e.g. offload=false");
        };
        let (key, value) = (key.trim(), value.trim());
        let value = match toml::from_str::<toml::Table>(&format!("v = {value}")) {
            Ok(mut t) => t.remove("v").unwrap_or_else(|| value.into()),
            Err(_) => toml::Value::String(value.to_owned()),
        };
        if key == "scheduler" {
            let Some(name) = value.as_str() else {
                anyhow::bail!("--bond scheduler: expected a name");
            };
            self.bond.scheduler = name.to_owned();
        } else {
            self.bond.extra.insert(key.to_owned(), value);
        }
        self.name = format!("{} {kv}", self.name);
        Ok(())
    }

    /// Parse and check a scenario.
    pub fn parse(text: &str) -> Result<Self> {
        let s: Scenario = toml::from_str(text)?;
        s.validate()?;
        Ok(s)
    }

    /// Check what the parser cannot.
    pub fn validate(&self) -> Result<()> {
        if self.paths.is_empty() {
            bail!("scenario {}: no [[path]]", self.name);
        }
        if self.tests.is_empty() {
            bail!("scenario {}: no [[test]]", self.name);
        }
        for (i, p) in self.paths.iter().enumerate() {
            if self.paths[..i].iter().any(|q| q.name == p.name) {
                bail!("scenario {}: path name {} used twice", self.name, p.name);
            }
            match p.kind.as_deref() {
                None | Some("udp") => {
                    if p.baud.is_some() || p.framing.is_some() {
                        bail!(
                            "scenario {}: path {}: baud and framing need kind = \"serial\"",
                            self.name,
                            p.name
                        );
                    }
                }
                Some("serial") => {
                    if !p.baud.is_some_and(|b| (50..=4_000_000).contains(&b)) {
                        bail!(
                            "scenario {}: path {}: a serial path needs baud (50..=4000000)",
                            self.name,
                            p.name
                        );
                    }
                    if p.rate_mbit.is_some() {
                        bail!(
                            "scenario {}: path {}: rate_mbit shapes a veth; a serial line has baud",
                            self.name,
                            p.name
                        );
                    }
                }
                Some(k) => bail!(
                    "scenario {}: path {}: unknown kind {k:?} (udp or serial)",
                    self.name,
                    p.name
                ),
            }
            if p.rate_mbit.is_some_and(|r| !(r > 0.0 && r < 1e6)) {
                bail!(
                    "scenario {}: path {}: rate_mbit must be > 0",
                    self.name,
                    p.name
                );
            }
        }
        for t in &self.tests {
            if t.flows == 0 || t.flows > 128 {
                bail!(
                    "scenario {}: test {}: flows must be 1-128",
                    self.name,
                    t.label()
                );
            }
            if let Some(c) = &t.cut {
                if !self.paths.iter().any(|p| p.name == c.path) {
                    bail!("scenario {}: cut names unknown path {}", self.name, c.path);
                }
                let d = t.duration_s.unwrap_or(self.duration_s) as f64;
                if !(c.at_s >= 0.0 && c.for_s > 0.0 && c.at_s + c.for_s < d) {
                    bail!(
                        "scenario {}: cut must start and end within the test's {d} s",
                        self.name
                    );
                }
            }
        }
        Ok(())
    }

    /// A built-in scenario by name, or a TOML file by path.
    pub fn load(arg: &str) -> Result<Self> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == arg) {
            return Self::parse(text).with_context(|| format!("built-in scenario {arg}"));
        }
        let path = Path::new(arg);
        if path.exists() {
            let text = braid::files::read_text(path, braid::files::TEXT_MAX)
                .with_context(|| format!("reading {arg}"))?;
            return Self::parse(&text).with_context(|| format!("scenario file {arg}"));
        }
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        bail!(
            "no scenario {arg}: not a file, and the built-in ones are {}",
            names.join(", ")
        )
    }

    /// Seconds each path is measured alone: `baseline_s`, or as long as a test (`duration`,
    /// the `--duration` override, else `duration_s`), so that S and the bond's goodput are
    /// averaged over windows of the same length (a 3-second window of a 10 Mbit/s path
    /// swung from 9.4 to 10.1 Mbit/s, above what the link can carry, by where TCP's
    /// loss-recovery bursts fell).
    pub fn baseline_seconds(&self, duration: Option<u64>) -> u64 {
        self.baseline_s
            .unwrap_or_else(|| duration.unwrap_or(self.duration_s))
    }

    /// Total seconds the tests take (not counting setup and baselines).
    pub fn test_seconds(&self) -> u64 {
        self.tests
            .iter()
            .map(|t| t.duration_s.unwrap_or(self.duration_s))
            .sum()
    }

    /// The daemon config for side a (`a == true`) or b, with `outages` (ms after start)
    /// added to `path`'s emulator (for emulator cuts). Serial paths need
    /// [`Scenario::daemon_config_with`].
    pub fn daemon_config(
        &self,
        a: bool,
        links: &[super::netns::Link],
        outage: Option<(&str, u64, u64)>,
    ) -> Result<String> {
        self.daemon_config_with(a, links, outage, &[])
    }

    /// As [`Scenario::daemon_config`], with the two ends' devices of each serial path's
    /// line (`lines[i]` for path i, `None` for UDP paths).
    pub fn daemon_config_with(
        &self,
        a: bool,
        links: &[super::netns::Link],
        outage: Option<(&str, u64, u64)>,
        lines: &[Option<(std::path::PathBuf, std::path::PathBuf)>],
    ) -> Result<String> {
        let mut bond = toml::Table::new();
        bond.insert("interface".into(), "braid0".into());
        bond.insert(
            "address".into(),
            (if a { "10.200.0.1/30" } else { "10.200.0.2/30" }).into(),
        );
        bond.insert("scheduler".into(), self.bond.scheduler.clone().into());
        for (k, v) in &self.bond.extra {
            bond.insert(k.clone(), v.clone());
        }
        // Encrypted by default, as braid is: one key pair per lab run (this process),
        // unless the scenario sets `encryption = "none"` or its own keys (`encryption`
        // may also name the cipher: keys then too).
        let plain = bond.get("encryption").and_then(toml::Value::as_str) == Some("none");
        if !plain && !bond.contains_key("private_key") {
            let (ka, kb) = lab_keys();
            let (mine, peer) = if a { (ka, kb) } else { (kb, ka) };
            bond.insert("private_key".into(), mine.to_base64().into());
            bond.insert(
                "peer_public_key".into(),
                peer.public_key().to_base64().into(),
            );
        }
        let mut paths = Vec::new();
        for (i, p) in self.paths.iter().enumerate() {
            let mut t = toml::Table::new();
            t.insert("name".into(), p.name.clone().into());
            if p.is_serial() {
                let (da, db) = lines
                    .get(i)
                    .and_then(Option::as_ref)
                    .with_context(|| format!("serial path {} has no line", p.name))?;
                let dev = if a { da } else { db };
                t.insert("kind".into(), "serial".into());
                t.insert("device".into(), dev.display().to_string().into());
                t.insert("baud".into(), i64::from(p.baud.unwrap_or(9600)).into());
                if let Some(f) = &p.framing {
                    t.insert("framing".into(), f.clone().into());
                }
            } else {
                let link = links.get(i).context("fewer links than paths")?;
                let (local, remote) = if a {
                    (link.addr_a, link.addr_b)
                } else {
                    (link.addr_b, link.addr_a)
                };
                t.insert("local".into(), format!("{local}:7000").into());
                t.insert("remote".into(), format!("{remote}:7000").into());
            }
            for (k, v) in &p.extra {
                t.insert(k.clone(), v.clone());
            }
            let mut emu = p.emulate.clone();
            if let Some((_, start, len)) = outage.filter(|o| o.0 == p.name) {
                let e = emu.get_or_insert_with(toml::Table::new);
                let list = e
                    .entry("outages")
                    .or_insert_with(|| toml::Value::Array(Vec::new()));
                if let toml::Value::Array(arr) = list {
                    let w = |v: u64| toml::Value::Integer(i64::try_from(v).unwrap_or(i64::MAX));
                    arr.push(toml::Value::Array(vec![w(start), w(len)]));
                }
            }
            if let Some(mut e) = emu {
                // Different loss/jitter draws on the two sides.
                if let Some(toml::Value::Integer(seed)) = e.get("seed").cloned() {
                    e.insert(
                        "seed".into(),
                        toml::Value::Integer(seed.wrapping_mul(2) + i64::from(!a)),
                    );
                }
                t.insert("emulate".into(), toml::Value::Table(e));
            }
            paths.push(toml::Value::Table(t));
        }
        let mut root = toml::Table::new();
        root.insert("bond".into(), toml::Value::Table(bond));
        root.insert("path".into(), toml::Value::Array(paths));
        Ok(toml::to_string(&root)?)
    }
}

/// `[bond]` lines with side `a`'s (or b's) lab keys, for configs written as text.
pub fn key_lines(a: bool) -> String {
    let (ka, kb) = lab_keys();
    let (mine, peer) = if a { (ka, kb) } else { (kb, ka) };
    format!(
        "private_key = \"{}\"\npeer_public_key = \"{}\"\n",
        mine.to_base64(),
        peer.public_key().to_base64()
    )
}

/// The lab's key pair for sides a and b, generated once per process.
fn lab_keys() -> &'static (PrivateKey, PrivateKey) {
    static KEYS: std::sync::OnceLock<(PrivateKey, PrivateKey)> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        (
            PrivateKey::generate(&mut OsRng),
            PrivateKey::generate(&mut OsRng),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--bond KEY=VALUE`: TOML values as they are, anything else as a string, and the
    /// scenario's name tells the run apart.
    #[test]
    fn bond_keys_from_the_command_line() {
        let mut s = Scenario::load("single-unshaped").unwrap();
        s.set_bond_key("offload=false").unwrap();
        s.set_bond_key("encryption=none").unwrap();
        s.set_bond_key("scheduler=round-robin").unwrap();
        assert_eq!(s.bond.extra["offload"], toml::Value::Boolean(false));
        assert_eq!(s.bond.extra["encryption"].as_str(), Some("none"));
        assert_eq!(s.bond.scheduler, "round-robin");
        assert_eq!(
            s.name,
            "single-unshaped offload=false encryption=none scheduler=round-robin"
        );
        assert!(s.set_bond_key("offload").is_err());
    }

    #[test]
    fn builtin_scenarios_parse() {
        for (name, text) in BUILTIN {
            let s = Scenario::parse(text).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert_eq!(&s.name, name, "file name and scenario name agree");
            assert!(!s.description.is_empty(), "{name} has a description");
        }
    }

    /// S is measured over windows as long as the bond's unless a scenario says otherwise.
    #[test]
    fn a_baseline_lasts_as_long_as_a_test() {
        let base = "name = 'x'\nduration_s = 20\n[bond]\n[[path]]\nname = 'p0'\n[[test]]\n";
        assert_eq!(Scenario::parse(base).unwrap().baseline_seconds(None), 20);
        assert_eq!(Scenario::parse(base).unwrap().baseline_seconds(Some(5)), 5);
        for (set, want) in [(3, 3), (0, 0)] {
            let text = base.replace(
                "duration_s = 20",
                &format!("duration_s = 20\nbaseline_s = {set}"),
            );
            let sc = Scenario::parse(&text).unwrap();
            assert_eq!(sc.baseline_seconds(None), want);
            assert_eq!(sc.baseline_seconds(Some(5)), want, "baseline_s wins");
        }
        assert_eq!(
            Scenario::load("rates-10-20-40")
                .unwrap()
                .baseline_seconds(None),
            20
        );
    }

    #[test]
    fn serial_paths_get_their_line_ends() {
        let text = r#"
name = "x"
[bond]
scheduler = "eql"
[[path]]
name = "s0"
kind = "serial"
baud = 57600
framing = "cslip"
byte_error_rate = 0.0001
outages = [[1000, 200]]
[[path]]
name = "u1"
[[test]]
"#;
        let s = Scenario::parse(text).unwrap();
        assert_eq!(s.paths[0].nominal_bps(), Some(46_080));
        let links: Vec<_> = (0..2)
            .map(|i| super::super::netns::Link {
                index: i,
                dev_a: format!("a{i}"),
                dev_b: format!("b{i}"),
                addr_a: std::net::Ipv4Addr::new(10, 201, i as u8, 1),
                addr_b: std::net::Ipv4Addr::new(10, 201, i as u8, 2),
            })
            .collect();
        assert!(s.daemon_config(true, &links, None).is_err(), "no line");
        let lines = vec![Some(("/dev/pts/7".into(), "/dev/pts/8".into())), None];
        for (a, dev) in [(true, "/dev/pts/7"), (false, "/dev/pts/8")] {
            let c: toml::Table =
                toml::from_str(&s.daemon_config_with(a, &links, None, &lines).unwrap()).unwrap();
            let p = c["path"].as_array().unwrap();
            assert_eq!(p[0]["kind"].as_str(), Some("serial"));
            assert_eq!(p[0]["device"].as_str(), Some(dev));
            assert_eq!(p[0]["baud"].as_integer(), Some(57600));
            assert_eq!(p[0]["framing"].as_str(), Some("cslip"));
            assert!(p[0].get("local").is_none());
            assert!(
                p[0].get("byte_error_rate").is_none(),
                "lab-only keys stay out"
            );
            assert!(p[1].get("local").is_some());
            // The config the lab writes is one the daemon takes.
            braid::config::Config::parse(&toml::to_string(&c).unwrap(), "lab.toml").unwrap();
        }
        let bad = "name='x'\n[bond]\n[[path]]\nname='p0'\nkind='serial'\n[[test]]\n";
        assert!(Scenario::parse(bad).is_err(), "serial without baud");
        let bad = "name='x'\n[bond]\n[[path]]\nname='p0'\nbaud=9600\n[[test]]\n";
        assert!(Scenario::parse(bad).is_err(), "baud without serial");
    }

    #[test]
    fn unknown_keys_rejected() {
        let bad = "name='x'\nbogus=1\n[bond]\n[[path]]\nname='p0'\n[[test]]\n";
        assert!(Scenario::parse(bad).is_err());
        let bad_test = "name='x'\n[bond]\n[[path]]\nname='p0'\n[[test]]\nflowz=2\n";
        assert!(Scenario::parse(bad_test).is_err());
    }

    #[test]
    fn cut_is_checked() {
        let base = "name='x'\nduration_s=10\n[bond]\n[[path]]\nname='p0'\n[[test]]\n";
        assert!(Scenario::parse(&format!("{base}cut={{path='p0',at_s=2,for_s=3}}")).is_ok());
        assert!(Scenario::parse(&format!("{base}cut={{path='p9',at_s=2,for_s=3}}")).is_err());
        assert!(Scenario::parse(&format!("{base}cut={{path='p0',at_s=8,for_s=3}}")).is_err());
        let s = Scenario::parse(&format!(
            "{base}cut={{path='p0',at_s=2,for_s=3,how='emulator'}}"
        ))
        .unwrap();
        assert_eq!(s.tests[0].cut.as_ref().unwrap().how, CutHow::Emulator);
    }

    #[test]
    fn daemon_config_has_fixed_keys_and_passthrough() {
        let text = r#"
name = "x"
[bond]
scheduler = "xor"
hash = "layer2"
[[path]]
name = "p0"
rate_mbit = 10
bps = 10000000
emulate = { delay_ms = 5.0, seed = 3 }
[[path]]
name = "p1"
[[test]]
"#;
        let s = Scenario::parse(text).unwrap();
        let links: Vec<_> = (0..2)
            .map(|i| super::super::netns::Link {
                index: i,
                dev_a: format!("a{i}"),
                dev_b: format!("b{i}"),
                addr_a: std::net::Ipv4Addr::new(10, 201, i as u8, 1),
                addr_b: std::net::Ipv4Addr::new(10, 201, i as u8, 2),
            })
            .collect();
        let a: toml::Table = toml::from_str(
            &s.daemon_config(true, &links, Some(("p1", 3000, 500)))
                .unwrap(),
        )
        .unwrap();
        let b: toml::Table =
            toml::from_str(&s.daemon_config(false, &links, None).unwrap()).unwrap();
        assert_eq!(a["bond"]["scheduler"].as_str(), Some("xor"));
        assert_eq!(a["bond"]["hash"].as_str(), Some("layer2"));
        assert_eq!(a["bond"]["address"].as_str(), Some("10.200.0.1/30"));
        assert_eq!(b["bond"]["address"].as_str(), Some("10.200.0.2/30"));
        let pa = a["path"].as_array().unwrap();
        assert_eq!(pa[0]["local"].as_str(), Some("10.201.0.1:7000"));
        assert_eq!(pa[0]["remote"].as_str(), Some("10.201.0.2:7000"));
        assert_eq!(pa[0]["bps"].as_integer(), Some(10_000_000));
        assert!(pa[0].get("rate_mbit").is_none(), "lab-only keys stay out");
        assert_eq!(pa[0]["emulate"]["delay_ms"].as_float(), Some(5.0));
        assert_eq!(pa[1]["emulate"]["outages"].as_array().unwrap().len(), 1);
        let pb = b["path"].as_array().unwrap();
        assert_eq!(pb[0]["local"].as_str(), Some("10.201.0.2:7000"));
        assert!(pb[1].get("emulate").is_none());
        assert_ne!(pa[0]["emulate"]["seed"], pb[0]["emulate"]["seed"]);
        // Generated keys, each side the other's peer; both configs load.
        let key = |t: &toml::Table, k: &str| t["bond"][k].as_str().unwrap().to_owned();
        let pub_of = |t: &toml::Table| {
            PrivateKey::from_base64(&key(t, "private_key"))
                .unwrap()
                .public_key()
                .to_base64()
        };
        assert_eq!(key(&a, "peer_public_key"), pub_of(&b));
        assert_eq!(key(&b, "peer_public_key"), pub_of(&a));
        for t in [&a, &b] {
            let c = braid::config::Config::parse(&toml::to_string(t).unwrap(), "lab").unwrap();
            assert_eq!(
                c.bond.encryption.name(),
                braid_core::crypto::Cipher::preferred().name()
            );
        }
        // A scenario may name the cipher, and still gets keys.
        let chacha = Scenario::parse(&text.replace(
            "hash = \"layer2\"",
            "hash = \"layer2\"\nencryption = \"chacha20-poly1305\"",
        ))
        .unwrap();
        let c =
            braid::config::Config::parse(&chacha.daemon_config(true, &links, None).unwrap(), "lab")
                .unwrap();
        assert_eq!(c.bond.encryption.name(), "chacha20-poly1305");
        // A scenario may opt out.
        let plain = Scenario::parse(&text.replace(
            "hash = \"layer2\"",
            "hash = \"layer2\"\nencryption = \"none\"",
        ))
        .unwrap();
        let p: toml::Table =
            toml::from_str(&plain.daemon_config(true, &links, None).unwrap()).unwrap();
        assert!(p["bond"].get("private_key").is_none());
        assert_eq!(p["bond"]["encryption"].as_str(), Some("none"));
    }
}
