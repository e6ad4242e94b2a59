//! NetPIPE (`NPtcp`, Debian's `netpipe-tcp`), as seed 004 ran it: a receiver on each node,
//! a transmitter on the master (`NPtcp -h node -b 131072`, `-s` for one-way streaming),
//! several at once for the multi-node tests; each transmitter's output file parsed
//! (message bytes, Mbit/s, seconds: half the round trip in two-way mode).
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::netns::{self, ns_command, Proc};

/// Why NetPIPE cannot run here, or None.
pub fn missing() -> Option<String> {
    netns::which("NPtcp").is_none().then(|| {
        "`NPtcp` not found: install NetPIPE (apt-get install --no-install-recommends netpipe-tcp; scripts/setup does)".to_string()
    })
}

/// One line of NPtcp's output file.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Point {
    /// Message size, bytes.
    pub bytes: u64,
    /// Throughput, Mbit/s.
    pub mbps: f64,
    /// Time per message, µs (two-way: half the round trip, NetPIPE's latency).
    pub usec: f64,
}

/// Parse NPtcp's output file: `bytes Mbps seconds` per line. Lines that are not three
/// numbers are skipped (the file of a run cut short may end mid-line).
pub fn parse(text: &str) -> Vec<Point> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let bytes = f.next()?.parse().ok()?;
            let mbps: f64 = f.next()?.parse().ok()?;
            let secs: f64 = f.next()?.parse().ok()?;
            (f.next().is_none() && mbps.is_finite() && secs.is_finite()).then_some(Point {
                bytes,
                mbps,
                usec: secs * 1e6,
            })
        })
        .collect()
}

/// One transmitter → receiver pair.
#[derive(Clone, Debug)]
pub struct Pair {
    /// The transmitter's namespace (the master).
    pub tx_ns: String,
    /// The receiver's namespace (a node).
    pub rx_ns: String,
    /// The receiver's address.
    pub rx: Ipv4Addr,
}

/// How NPtcp runs.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// `-s`: stream one way instead of two-way ping-pong.
    pub stream: bool,
    /// `-u`: the largest message, bytes.
    pub upper: u64,
    /// `-n`: a fixed number of repeats per size (None: NetPIPE times each size itself,
    /// about a quarter of a second; a small fixed count makes a quick test).
    pub repeats: Option<u32>,
}

/// Run every pair at once (as seed 004's multi-node tests did) with `-b 131072` as the
/// seed; each transmitter's points. Files go to `dir`. Bounded by `timeout`.
pub fn run(pairs: &[Pair], o: Options, dir: &Path, timeout: Duration) -> Result<Vec<Vec<Point>>> {
    if let Some(why) = missing() {
        bail!("{why}");
    }
    let common = |c: &mut std::process::Command| {
        c.args(["-b", "131072", "-u", &o.upper.to_string()]);
        if o.stream {
            c.arg("-s");
        }
        if let Some(n) = o.repeats {
            c.args(["-n", &n.to_string()]);
        }
        c.current_dir(dir);
    };
    let mut receivers = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        let mut c = ns_command(&p.rx_ns, "NPtcp");
        common(&mut c);
        c.arg("-o").arg(dir.join(format!("np-rx{i}.out")));
        receivers.push(Proc::spawn(
            &format!("NPtcp receiver {i}"),
            &mut c,
            true,
            Some(&dir.join(format!("np-rx{i}.log"))),
        )?);
    }
    netns::sleep(Duration::from_millis(500))?;
    let mut transmitters = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        let out = dir.join(format!("np-tx{i}.out"));
        let _ = std::fs::remove_file(&out);
        let mut c = ns_command(&p.tx_ns, "NPtcp");
        c.arg("-h").arg(p.rx.to_string());
        common(&mut c);
        c.arg("-o").arg(&out);
        transmitters.push((
            out,
            Proc::spawn(
                &format!("NPtcp transmitter {i}"),
                &mut c,
                true,
                Some(&dir.join(format!("np-tx{i}.log"))),
            )?,
        ));
    }
    let mut all = Vec::new();
    for (out, t) in transmitters {
        let o = t.wait_output(timeout)?;
        if !o.status.success() {
            let tail: Vec<&str> = o.stdout.lines().rev().take(3).collect();
            bail!(
                "NPtcp failed ({}): {} {}",
                o.status,
                o.stderr.trim(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            );
        }
        let text =
            std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
        let points = parse(&text);
        if points.is_empty() {
            bail!("NPtcp wrote no points to {}", out.display());
        }
        all.push(points);
    }
    for mut r in receivers {
        let _ = r.wait_exit(Duration::from_secs(5));
    }
    Ok(all)
}

/// The nodes' results added up size by size (throughput summed, latency averaged), as
/// seed 004 combined its multi-node runs; sizes that not every run reached are left out.
pub fn combine(runs: &[Vec<Point>]) -> Vec<Point> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let same: Vec<&Point> = runs
                .iter()
                .filter_map(|r| r.get(i).filter(|q| q.bytes == p.bytes))
                .collect();
            (same.len() == runs.len()).then(|| Point {
                bytes: p.bytes,
                mbps: same.iter().map(|q| q.mbps).sum(),
                usec: same.iter().map(|q| q.usec).sum::<f64>() / same.len() as f64,
            })
        })
        .collect()
}

/// Mean throughput over message sizes in `[lo, hi]` bytes.
pub fn mean_mbps(points: &[Point], lo: u64, hi: u64) -> Option<f64> {
    let v: Vec<f64> = points
        .iter()
        .filter(|p| (lo..=hi).contains(&p.bytes))
        .map(|p| p.mbps)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nptcp_output() {
        let text = "       1 1.071321   0.00000712\n       2 1.697664   0.00000899\n   65539 30316.089241   0.00001649\n   3069 12.5";
        let p = parse(text);
        assert_eq!(p.len(), 3, "the cut-off last line is skipped");
        assert_eq!(p[0].bytes, 1);
        assert!((p[0].usec - 7.12).abs() < 1e-9);
        assert!((p[2].mbps - 30316.089241).abs() < 1e-9);
        assert!(parse("x y z\n").is_empty());
    }

    #[test]
    fn combines_nodes_size_by_size() {
        let a = vec![
            Point {
                bytes: 1,
                mbps: 1.0,
                usec: 10.0,
            },
            Point {
                bytes: 2,
                mbps: 2.0,
                usec: 20.0,
            },
        ];
        let b = vec![Point {
            bytes: 1,
            mbps: 3.0,
            usec: 30.0,
        }];
        let c = combine(&[a.clone(), b]);
        assert_eq!(
            c,
            [Point {
                bytes: 1,
                mbps: 4.0,
                usec: 20.0
            }]
        );
        assert_eq!(combine(std::slice::from_ref(&a)), a);
        assert_eq!(mean_mbps(&a, 2, 100), Some(2.0));
        assert_eq!(mean_mbps(&a, 5, 100), None);
    }
}
