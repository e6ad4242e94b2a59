//! The seeds' serial tables, reproduced over emulated lines with braid on both ends:
//!
//! - `bentson` / `bentson-full`: Randolph Bentson's 1995 EQL test (seed 000): 1-4 lines ×
//!   9600-115200 bd × MTU 400/600/900, one TCP transfer of 289284 bytes per row;
//! - `slip-seed` / `slip-seed-full`: the SLIP seed's table (seed 003): TCP link speed and
//!   link/line ratio for SLIP, CSLIP and SLIP6 at 2400-115200 bd, RTT from ping.
//!
//! Each row gets fresh namespaces, lines and daemons. The MTU of the seeds' SLIP
//! interfaces is given to TCP as its MSS (`mtu - 40`, `TCP_MAXSEG` on the sender); braid's
//! TUN keeps its MTU. `docs/lab.md` explains the columns.
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::netns::{self, Topology};
use super::run::Daemons;
use super::scenario::Scenario;
use super::serial::{self, SerialLines};

/// Bytes of Bentson's transfer.
pub const BENTSON_BYTES: u64 = 289_284;

/// Bentson's table: (lines, bd, mtu, seconds, theory bit/s, actual, % of max); `None`
/// where his run did not complete. His "actual" is bytes × 10 / seconds (8N1: 10 bits a
/// byte), so 100% is the lines' byte rate.
/// One row of [`BENTSON`].
pub type BentsonRow = (u32, u32, u32, Option<f64>, u32, Option<f64>, Option<u32>);

#[rustfmt::skip]
pub const BENTSON: &[BentsonRow] = &[
    (3, 115200, 900, None, 345600, None, None),
    (3, 115200, 400, Some(18.1), 345600, Some(159825.0), Some(46)),
    (2, 115200, 900, None, 230400, None, None),
    (2, 115200, 600, Some(18.1), 230400, Some(159825.0), Some(69)),
    (2, 115200, 400, Some(19.3), 230400, Some(149888.0), Some(65)),
    (4, 57600, 900, None, 234600, None, None),
    (4, 57600, 600, None, 234600, None, None),
    (4, 57600, 400, None, 234600, None, None),
    (3, 57600, 600, Some(20.9), 172800, Some(138413.0), Some(80)),
    (3, 57600, 900, Some(21.2), 172800, Some(136455.0), Some(78)),
    (3, 115200, 600, Some(21.7), 345600, Some(133311.0), Some(38)),
    (3, 57600, 400, Some(22.5), 172800, Some(128571.0), Some(74)),
    (4, 38400, 900, Some(25.2), 153600, Some(114795.0), Some(74)),
    (4, 38400, 600, Some(26.4), 153600, Some(109577.0), Some(71)),
    (4, 38400, 400, Some(27.3), 153600, Some(105965.0), Some(68)),
    (2, 57600, 900, Some(29.1), 115200, Some(99410.3), Some(86)),
    (1, 115200, 900, Some(30.7), 115200, Some(94229.3), Some(81)),
    (2, 57600, 600, Some(30.2), 115200, Some(95789.4), Some(83)),
    (3, 38400, 900, Some(30.3), 115200, Some(95473.3), Some(82)),
    (3, 38400, 600, Some(31.2), 115200, Some(92719.2), Some(80)),
    (1, 115200, 600, Some(31.3), 115200, Some(92423.0), Some(80)),
    (2, 57600, 400, Some(32.3), 115200, Some(89561.6), Some(77)),
    (1, 115200, 400, Some(32.8), 115200, Some(88196.3), Some(76)),
    (3, 38400, 400, Some(33.5), 115200, Some(86353.4), Some(74)),
    (2, 38400, 900, Some(43.7), 76800, Some(66197.7), Some(86)),
    (2, 38400, 600, Some(44.0), 76800, Some(65746.4), Some(85)),
    (2, 38400, 400, Some(47.2), 76800, Some(61289.0), Some(79)),
    (4, 19200, 900, Some(50.8), 76800, Some(56945.7), Some(74)),
    (4, 19200, 400, Some(53.2), 76800, Some(54376.7), Some(70)),
    (4, 19200, 600, Some(53.7), 76800, Some(53870.4), Some(70)),
    (1, 57600, 900, Some(54.6), 57600, Some(52982.4), Some(91)),
    (1, 57600, 600, Some(56.2), 57600, Some(51474.0), Some(89)),
    (3, 19200, 900, Some(60.5), 57600, Some(47815.5), Some(83)),
    (1, 57600, 400, Some(60.2), 57600, Some(48053.8), Some(83)),
    (3, 19200, 600, Some(62.0), 57600, Some(46658.7), Some(81)),
    (3, 19200, 400, Some(64.7), 57600, Some(44711.6), Some(77)),
    (1, 38400, 900, Some(79.4), 38400, Some(36433.8), Some(94)),
    (1, 38400, 600, Some(82.4), 38400, Some(35107.3), Some(91)),
    (2, 19200, 900, Some(84.4), 38400, Some(34275.4), Some(89)),
    (1, 38400, 400, Some(86.8), 38400, Some(33327.6), Some(86)),
    (2, 19200, 600, Some(87.6), 38400, Some(33023.3), Some(85)),
    (2, 19200, 400, Some(91.2), 38400, Some(31719.7), Some(82)),
    (4, 9600, 900, Some(94.7), 38400, Some(30547.4), Some(79)),
    (4, 9600, 400, Some(106.0), 38400, Some(27290.9), Some(71)),
    (4, 9600, 600, Some(110.0), 38400, Some(26298.5), Some(68)),
    (3, 9600, 900, Some(118.0), 28800, Some(24515.6), Some(85)),
    (3, 9600, 600, Some(120.0), 28800, Some(24107.0), Some(83)),
    (3, 9600, 400, Some(131.0), 28800, Some(22082.7), Some(76)),
    (1, 19200, 900, Some(155.0), 19200, Some(18663.5), Some(97)),
    (1, 19200, 600, Some(161.0), 19200, Some(17968.0), Some(93)),
    (1, 19200, 400, Some(170.0), 19200, Some(17016.7), Some(88)),
    (2, 9600, 600, Some(176.0), 19200, Some(16436.6), Some(85)),
    (2, 9600, 900, Some(180.0), 19200, Some(16071.3), Some(83)),
    (2, 9600, 400, Some(181.0), 19200, Some(15982.5), Some(83)),
    (1, 9600, 900, Some(305.0), 9600, Some(9484.72), Some(98)),
    (1, 9600, 600, Some(314.0), 9600, Some(9212.87), Some(95)),
    (1, 9600, 400, Some(332.0), 9600, Some(8713.37), Some(90)),
];

/// The SLIP seed's table: line bd, then CSLIP, SLIP, SLIP6 link speeds (kbit/s), the
/// CSLIP ratio it prints, and the RTT (ms). Its interface MTU was 296.
#[rustfmt::skip]
pub const SLIP_SEED: &[(u32, f64, f64, f64, f64, f64)] = &[
    (2400, 1.6, 1.6, 1.2, 66.7, 734.0),
    (9600, 6.4, 6.3, 4.7, 66.7, 185.0),
    (19200, 12.8, 12.6, 9.5, 66.7, 94.0),
    (38400, 25.5, 25.2, 18.9, 66.4, 48.0),
    (57600, 38.3, 37.8, 28.4, 66.5, 33.0),
    (115200, 82.0, 75.6, 56.7, 71.2, 17.7),
];

/// Which table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Bentson's EQL table.
    Bentson,
    /// The SLIP seed's table.
    Slip,
}

/// One row to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Lines in the bundle.
    pub lines: u32,
    /// Each line's rate, bd.
    pub baud: u32,
    /// The seed's interface MTU (TCP's MSS is 40 less).
    pub mtu: u32,
    /// `slip`, `cslip` or `slip6`.
    pub framing: &'static str,
}

/// A table to run.
#[derive(Clone, Debug)]
pub struct Table {
    /// Its name for `braid lab NAME`.
    pub name: &'static str,
    /// What it shows.
    pub description: &'static str,
    /// Which seed.
    pub kind: Kind,
    /// Rows, single-line rows before the bundles of the same rate and MTU.
    pub rows: Vec<Row>,
    /// The bond's scheduler.
    pub scheduler: &'static str,
    /// TCP timestamps in the namespaces. Off by default: the seeds' TCP (1995) had none,
    /// and RFC 1144 compresses no TCP option, so with Linux's default timestamps every
    /// segment would cross a CSLIP line uncompressed.
    pub tcp_timestamps: bool,
    /// The line in `mode = "raw-ip"` (plain CSLIP of IP packets, no bond).
    pub raw_ip: bool,
}

/// The names `braid lab` knows, with a description.
pub const TABLES: &[(&str, &str)] = &[
    (
        "bentson",
        "Bentson's EQL table, subset: 1-2 CSLIP lines at 115200/57600 bd, MTU 900, 289284 bytes each",
    ),
    (
        "bentson-full",
        "Bentson's EQL table, all 60 rows (1-4 lines x 9600-115200 bd x MTU 400/600/900); about an hour",
    ),
    (
        "slip-seed",
        "the SLIP seed's table, subset: SLIP/CSLIP/SLIP6 at 115200 and 57600 bd, MTU 296, ping RTT",
    ),
    (
        "slip-seed-full",
        "the SLIP seed's table, 2400-115200 bd x SLIP/CSLIP/SLIP6, MTU 296, ping RTT; about 25 minutes",
    ),
    (
        "cslip-115200",
        "one CSLIP line at 115200 bd, bond MTU 1400: the 76%-of-baud target",
    ),
    (
        "cslip-115200-raw",
        "as cslip-115200 with both ends in mode = \"raw-ip\" (plain CSLIP, no braid header, no bond)",
    ),
    (
        "cslip-115200-ts",
        "as cslip-115200 with Linux's TCP timestamps on (CSLIP cannot compress them)",
    ),
];

/// `bentson:BAUD:MTU`: the `bentson-full` rows of one speed and MTU, 1-4 lines (the
/// single line is the bundles' reference), e.g. `bentson:115200:900`.
pub const BENTSON_ROWS: &str = "bentson:BAUD:MTU";

/// `bentson:BAUD:MTU` as the rows of `bentson-full` it names.
fn bentson_rows(name: &str) -> Option<Table> {
    let mut parts = name.strip_prefix("bentson:")?.split(':');
    let baud: u32 = parts.next()?.parse().ok()?;
    let mtu: u32 = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    let mut t = load("bentson-full")?;
    t.rows.retain(|r| r.baud == baud && r.mtu == mtu);
    t.description = "Bentson's EQL table: the rows of one speed and MTU, 1-4 lines";
    (!t.rows.is_empty()).then_some(t)
}

/// A table by name (or `bentson:BAUD:MTU`, see [`BENTSON_ROWS`]).
pub fn load(name: &str) -> Option<Table> {
    if name.starts_with("bentson:") {
        return bentson_rows(name);
    }
    let description = TABLES.iter().find(|t| t.0 == name)?.1;
    let (kind, rows) = match name {
        "bentson" => {
            let mut rows = Vec::new();
            for baud in [115_200, 57_600] {
                for lines in [1, 2] {
                    rows.push(Row {
                        lines,
                        baud,
                        mtu: 900,
                        framing: "cslip",
                    });
                }
            }
            (Kind::Bentson, rows)
        }
        "bentson-full" => {
            let mut rows = Vec::new();
            for baud in [115_200, 57_600, 38_400, 19_200, 9_600] {
                for mtu in [900, 600, 400] {
                    for lines in 1..=4 {
                        rows.push(Row {
                            lines,
                            baud,
                            mtu,
                            framing: "cslip",
                        });
                    }
                }
            }
            (Kind::Bentson, rows)
        }
        "slip-seed" | "slip-seed-full" => {
            let bauds: &[u32] = if name == "slip-seed" {
                &[115_200, 57_600]
            } else {
                &[115_200, 57_600, 38_400, 19_200, 9_600, 2_400]
            };
            let mut rows = Vec::new();
            for &baud in bauds {
                for framing in ["cslip", "slip", "slip6"] {
                    rows.push(Row {
                        lines: 1,
                        baud,
                        mtu: 296,
                        framing,
                    });
                }
            }
            (Kind::Slip, rows)
        }
        "cslip-115200" | "cslip-115200-ts" | "cslip-115200-raw" => (
            Kind::Slip,
            vec![Row {
                lines: 1,
                baud: 115_200,
                mtu: 1400,
                framing: "cslip",
            }],
        ),
        _ => return None,
    };
    Some(Table {
        name: TABLES.iter().find(|t| t.0 == name).map_or("?", |t| t.0),
        description,
        kind,
        rows,
        scheduler: if std::env::var("BRAID_LAB_SCHED").as_deref() == Ok("adaptive") {
            "adaptive"
        } else {
            "eql"
        },
        tcp_timestamps: name.ends_with("-ts"),
        raw_ip: name.ends_with("-raw"),
    })
}

/// What one row measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RowResult {
    /// Lines.
    pub lines: u32,
    /// bd per line.
    pub baud: u32,
    /// Seed MTU.
    pub mtu: u32,
    /// Framing.
    pub framing: String,
    /// Bytes transferred (all checked).
    pub bytes: u64,
    /// Seconds the transfer took.
    pub seconds: f64,
    /// TCP goodput, bit/s (8 bits a byte).
    pub goodput_bps: f64,
    /// Average ping RTT through the idle bond, ms.
    pub rtt_ms: Option<f64>,
    /// Bytes each line carried from side a (line counters).
    pub line_bytes: Vec<u64>,
}

impl RowResult {
    /// Goodput as a fraction of the lines' total baud (the SLIP seed's link/line ratio).
    pub fn of_baud(&self) -> f64 {
        self.goodput_bps / (f64::from(self.baud) * f64::from(self.lines))
    }

    /// Bentson's "actual": bytes × 10 / seconds.
    pub fn bentson_actual(&self) -> f64 {
        self.bytes as f64 * 10.0 / self.seconds.max(1e-9)
    }
}

/// `[bond]` keys for lines of `baud` carrying packets of `mtu`: the daemon's serial
/// defaults (`config::serial_defaults`: probes ~1% of a line, braid's queue 8 frame
/// times, the reorder wait 20) for the frames these rows send, `mtu` plus braid's header
/// and SLIP's two ENDs, not the line's MTU. The lines are the lab's own, trusted:
/// `encryption = "none"`, so CSLIP can compress the inner headers (a sealed datagram is
/// opaque to it).
pub fn bond_keys(baud: u32, mtu: u32) -> String {
    let d = row_defaults(baud, mtu);
    format!(
        "encryption = \"none\"\nprobe_interval_ms = {}\nqueue_max_delay_ms = {}\nreorder_max_ms = {}\n",
        d.probe_interval.as_millis(),
        d.queue_max_delay.as_millis(),
        d.reorder_max.as_millis()
    )
}

/// The daemon's serial defaults for lines of `baud` carrying `mtu`-byte packets (frames
/// of `mtu` + braid's 20-byte header + SLIP's two ENDs).
fn row_defaults(baud: u32, mtu: u32) -> braid::config::SerialDefaults {
    braid::config::SerialDefaults::for_line(baud, u64::from(mtu) + 22)
}

/// The scenario (daemon configs only) of one row.
fn row_scenario(t: &Table, r: &Row) -> Result<Scenario> {
    let mut text = format!(
        "name = \"{}\"\n[bond]\nscheduler = \"{}\"\n{}",
        t.name,
        t.scheduler,
        bond_keys(r.baud, r.mtu)
    );
    for i in 0..r.lines {
        text.push_str(&format!(
            "[[path]]\nname = \"s{i}\"\nkind = \"serial\"\nbaud = {}\nframing = \"{}\"\n",
            r.baud, r.framing
        ));
        if t.raw_ip {
            text.push_str("mode = \"raw-ip\"\n");
        }
    }
    text.push_str("[[test]]\n");
    Scenario::parse(&text)
}

/// Run one row: namespaces, lines, daemons, (ping,) the transfer.
pub fn run_row(t: &Table, r: &Row, braid: &Path) -> Result<RowResult> {
    let sc = row_scenario(t, r)?;
    let topo = Topology::new(1)?;
    if !t.tcp_timestamps {
        topo.tcp_timestamps_off()?;
    }
    let lines = SerialLines::start(&sc)?;
    let devices = lines.devices();
    let cfg_a = sc.daemon_config_with(true, &topo.links, None, &devices)?;
    let cfg_b = sc.daemon_config_with(false, &topo.links, None, &devices)?;
    let mut d = Daemons::start(braid, &topo, "row", &cfg_a, &cfg_b)?;
    let names: Vec<String> = (0..r.lines).map(|i| format!("s{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // Two probes up, at the row's probe interval.
    let probe_s = row_defaults(r.baud, r.mtu).probe_interval.as_secs_f64();
    d.wait_paths_up(&names, Duration::from_secs_f64(15.0 + 4.0 * probe_s))?;
    let dst = std::net::Ipv4Addr::new(10, 200, 0, 2);
    let rtt_ms = if t.kind == Kind::Slip {
        // 10 pings of the default 56 bytes, one at a time on the idle bond.
        let interval = Duration::from_secs_f64((probe_s / 4.0).clamp(0.2, 2.0));
        serial::ping(&topo.ns_a, dst, 10, interval, 56)?.1
    } else {
        None
    };
    let bytes = match t.kind {
        Kind::Bentson => BENTSON_BYTES,
        // About 20 s of the line's TCP rate (at least 16 KB).
        Kind::Slip => (u64::from(r.baud) / 10 * 20 * 7 / 10).max(16_384),
    };
    let mss = r.mtu.checked_sub(40).filter(|&m| m >= 88 && r.mtu < 1400);
    let tr = serial::tcp_transfer(&topo, dst, 5301, bytes, mss, Duration::from_secs(60))
        .with_context(|| format!("{} x {} bd {} mtu {}", r.lines, r.baud, r.framing, r.mtu))?;
    if let Ok(path) = std::env::var("BRAID_LAB_DUMP") {
        let v = serde_json::json!({"a": d.status_a()?, "b": d.status_b()?});
        let _ = std::fs::write(
            format!("{path}-{}x{}-{}", r.lines, r.baud, r.mtu),
            v.to_string(),
        );
    }
    drop(d);
    if let Ok(path) = std::env::var("BRAID_LAB_DUMP") {
        for side in ["a", "b"] {
            let _ = std::fs::copy(
                topo.file(&format!("row-{side}.log")),
                format!("{path}-{side}.log"),
            );
        }
    }
    if let Some(e) = lines.relay_error() {
        bail!("a line's relay stopped: {e}");
    }
    Ok(RowResult {
        lines: r.lines,
        baud: r.baud,
        mtu: r.mtu,
        framing: r.framing.to_string(),
        bytes: tr.bytes,
        seconds: tr.seconds,
        goodput_bps: tr.bytes as f64 * 8.0 / tr.seconds.max(1e-9),
        rtt_ms,
        line_bytes: lines.lines().map(|l| l.stats().a_to_b.sent).collect(),
    })
}

/// Run a table, printing each row as it completes; the results.
pub fn run(t: &Table, braid: &Path) -> Result<Vec<RowResult>> {
    println!("{}: {}", t.name, t.description);
    match t.kind {
        Kind::Bentson => println!(
            "{:>5} {:>7} {:>4} | {:>7} {:>7} {:>9} {:>4} {:>6} {:>6} {:>9} | seed: {:>6} {:>9} {:>4}",
            "lines", "bd", "mtu", "seconds", "theory", "actual", "%max", "kbit/s", "%baud", "bundle/sum", "secs", "actual", "%max"
        ),
        Kind::Slip => println!(
            "{:>7} {:>6} {:>4} | {:>7} {:>7} {:>7} | seed: {:>7} {:>7} {:>7}",
            "framing", "bd", "mtu", "kbit/s", "ratio", "rtt ms", "kbit/s", "ratio", "rtt ms"
        ),
    }
    let mut out: Vec<RowResult> = Vec::new();
    for r in &t.rows {
        netns::check_interrupted()?;
        if let Ok(b) = std::env::var("BRAID_LAB_BAUD") {
            if b != r.baud.to_string() {
                continue;
            }
        }
        let res = run_row(t, r, braid)?;
        match t.kind {
            Kind::Bentson => {
                let theory = u64::from(r.baud) * u64::from(r.lines);
                let actual = res.bentson_actual();
                let single = out
                    .iter()
                    .find(|o| o.lines == 1 && o.baud == r.baud && o.mtu == r.mtu)
                    .map(|o| o.goodput_bps);
                let bundle = match single {
                    Some(s) if r.lines > 1 => {
                        format!("{:.2}", res.goodput_bps / (s * f64::from(r.lines)))
                    }
                    _ => "-".into(),
                };
                let seed = BENTSON
                    .iter()
                    .find(|b| b.0 == r.lines && b.1 == r.baud && b.2 == r.mtu);
                let f = |v: Option<f64>, p: usize| v.map_or("_".into(), |x| format!("{x:.p$}"));
                println!(
                    "{:>5} {:>7} {:>4} | {:>7.1} {:>7} {:>9.0} {:>4.0} {:>6.1} {:>6.1} {:>10} | seed: {:>6} {:>9} {:>4}",
                    r.lines,
                    r.baud,
                    r.mtu,
                    res.seconds,
                    theory,
                    actual,
                    actual / theory as f64 * 100.0,
                    res.goodput_bps / 1000.0,
                    res.of_baud() * 100.0,
                    bundle,
                    f(seed.and_then(|s| s.3), 1),
                    f(seed.and_then(|s| s.5), 0),
                    seed.and_then(|s| s.6).map_or("_".into(), |p| p.to_string()),
                );
            }
            Kind::Slip => {
                let seed = SLIP_SEED.iter().find(|s| s.0 == r.baud);
                let link = seed.map(|s| match r.framing {
                    "cslip" => s.1,
                    "slip" => s.2,
                    _ => s.3,
                });
                println!(
                    "{:>7} {:>6} {:>4} | {:>7.1} {:>6.1}% {:>7} | seed: {:>7} {:>6}% {:>7}",
                    r.framing,
                    r.baud,
                    r.mtu,
                    res.goodput_bps / 1000.0,
                    res.of_baud() * 100.0,
                    res.rtt_ms.map_or("-".into(), |x| format!("{x:.1}")),
                    link.map_or("-".into(), |l| format!("{l:.1}")),
                    link.map_or("-".into(), |l| format!(
                        "{:.1}",
                        l * 1000.0 / f64::from(r.baud) * 100.0
                    )),
                    if r.framing == "cslip" {
                        seed.map_or("-".into(), |s| format!("{:.1}", s.5))
                    } else {
                        "-".into()
                    },
                );
            }
        }
        out.push(res);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bentson_rows_of_one_speed() {
        let t = load("bentson:57600:400").unwrap();
        let rows: Vec<_> = t.rows.iter().map(|r| (r.lines, r.baud, r.mtu)).collect();
        assert_eq!(
            rows,
            [
                (1, 57600, 400),
                (2, 57600, 400),
                (3, 57600, 400),
                (4, 57600, 400)
            ]
        );
        for bad in [
            "bentson:57600",
            "bentson:57600:401",
            "bentson:x:400",
            "bentson:1:2:3",
        ] {
            assert!(load(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn tables_load_and_the_seed_is_whole() {
        for (name, _) in TABLES {
            let t = load(name).unwrap();
            assert!(!t.rows.is_empty(), "{name}");
            // Single-line rows come before the bundles they are compared with.
            for (i, r) in t.rows.iter().enumerate() {
                if r.lines > 1 {
                    assert!(t.rows[..i]
                        .iter()
                        .any(|o| o.lines == 1 && o.baud == r.baud && o.mtu == r.mtu));
                }
                row_scenario(&t, r).unwrap();
            }
        }
        assert!(load("nope").is_none());
        assert_eq!(load("bentson-full").unwrap().rows.len(), 60);
        // Every row of Bentson's table is one of the full run's.
        let full = load("bentson-full").unwrap();
        assert_eq!(BENTSON.len(), 57);
        for b in BENTSON {
            assert!(full
                .rows
                .iter()
                .any(|r| (r.lines, r.baud, r.mtu) == (b.0, b.1, b.2)));
            // His "actual" is bytes x 10 / seconds.
            if let (Some(s), Some(a)) = (b.3, b.5) {
                let mine = BENTSON_BYTES as f64 * 10.0 / s;
                assert!((mine / a - 1.0).abs() < 0.02, "{b:?}: {mine}");
            }
        }
    }

    #[test]
    fn bond_keys_scale_with_the_line() {
        // 1422-byte frames at 115200 bd: 123.4 ms each; queue 8 of them, reorder wait 20.
        assert_eq!(
            bond_keys(115_200, 1400),
            "encryption = \"none\"\nprobe_interval_ms = 312\nqueue_max_delay_ms = 987\nreorder_max_ms = 2468\n"
        );
        assert_eq!(
            bond_keys(2400, 1400),
            "encryption = \"none\"\nprobe_interval_ms = 10000\nqueue_max_delay_ms = 10000\nreorder_max_ms = 10000\n"
        );
    }
}
