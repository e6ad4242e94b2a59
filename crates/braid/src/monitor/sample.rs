//! One sample: what the page graphs for one second (or the mean of ten, in the long
//! history). Rates come from the difference of two snapshots' counters; the rest is the
//! snapshot's own figures. Short field names: a day of samples is kept in a file.
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Snapshot;

/// Most paths and classes a sample keeps (a bond with more graphs the first ones).
pub const MAX_SERIES: usize = 64;

/// One path in a sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathSample {
    /// Name.
    pub n: String,
    /// Up (1), stalled (0.5) or down (0); a mean over a long sample.
    pub up: f64,
    /// Data sent, bit/s.
    pub tx: f64,
    /// Data received, bit/s.
    pub rx: f64,
    /// Smoothed RTT, ms (0 = unknown).
    pub rtt: f64,
    /// Jitter (RTT variation), ms.
    pub jit: f64,
    /// Loss, %.
    pub loss: f64,
    /// Bytes queued in braid for the path.
    pub q: f64,
    /// Queue delay at the pacing rate, ms.
    pub qd: f64,
}

/// One shaper class in a sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassSample {
    /// Class id (`1:10`).
    pub id: String,
    /// Its name, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Whether it is a leaf.
    #[serde(default)]
    pub leaf: bool,
    /// Sent over the sample, bit/s.
    pub r: f64,
    /// Its configured rate, bit/s.
    pub rate: f64,
    /// Its ceil, bit/s.
    pub ceil: f64,
    /// Backlog, bytes.
    pub bl: f64,
    /// Drops over the sample.
    pub dr: f64,
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Unix time at its end, ms.
    pub t: u64,
    /// Seconds it covers.
    pub s: f64,
    /// Paths.
    pub p: Vec<PathSample>,
    /// Classes (empty without a shaper).
    #[serde(default)]
    pub c: Vec<ClassSample>,
    /// Packets the bond dropped over the sample (every reason).
    #[serde(default)]
    pub dr: f64,
}

fn num(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

fn arr(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The bond's drop counters, every reason.
pub fn drops(status: &Value) -> f64 {
    let c = status.get("status").and_then(|s| s.get("counters"));
    let Some(c) = c else { return 0.0 };
    [
        "drop_no_path",
        "drop_queue",
        "drop_too_big",
        "drop_redundant_retransmit",
        "drop_shaper",
        "drop_rx_too_big",
        "drop_partial",
        "bad_datagram",
        "unknown_path",
    ]
    .iter()
    .map(|k| num(c, k))
    .sum()
}

/// The sample from `prev` to `cur` (`prev` none: the first one, with no rates).
pub fn between(prev: Option<&Snapshot>, cur: &Snapshot) -> Sample {
    let secs = prev
        .map(|p| cur.unix_ms.saturating_sub(p.unix_ms) as f64 / 1000.0)
        .filter(|&s| s > 0.0);
    let rate = |a: f64, b: Option<f64>| match (secs, b) {
        (Some(s), Some(b)) if a >= b => (a - b) / s,
        _ => 0.0,
    };
    let paths_of = |s: &Snapshot| arr(s.status.get("status").and_then(|s| s.get("paths"))).to_vec();
    let prev_paths = prev.map(paths_of).unwrap_or_default();
    let p = paths_of(cur)
        .iter()
        .take(MAX_SERIES)
        .map(|p| {
            let name = p
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            let before = prev_paths
                .iter()
                .find(|q| q.get("name").and_then(Value::as_str) == Some(&name));
            let pacing = num(p, "pacing_bps");
            let q = num(p, "queued_bytes");
            PathSample {
                up: match p.get("state").and_then(Value::as_str) {
                    Some("up") => 1.0,
                    Some("stalled") => 0.5,
                    _ => 0.0,
                },
                tx: 8.0 * rate(num(p, "tx_bytes"), before.map(|b| num(b, "tx_bytes"))),
                rx: 8.0 * rate(num(p, "rx_bytes"), before.map(|b| num(b, "rx_bytes"))),
                rtt: num(p, "srtt_us") / 1000.0,
                jit: num(p, "rttvar_us") / 1000.0,
                loss: num(p, "loss") * 100.0,
                q,
                qd: if pacing > 0.0 {
                    q * 8.0 / pacing * 1000.0
                } else {
                    0.0
                },
                n: name,
            }
        })
        .collect();
    let prev_classes = prev
        .map(|s| arr(s.classes.as_ref()).to_vec())
        .unwrap_or_default();
    let c = arr(cur.classes.as_ref())
        .iter()
        .take(MAX_SERIES)
        .map(|c| {
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            let before = prev_classes
                .iter()
                .find(|q| q.get("id").and_then(Value::as_str) == Some(&id));
            ClassSample {
                name: c.get("name").and_then(Value::as_str).map(str::to_owned),
                leaf: c.get("leaf").and_then(Value::as_bool).unwrap_or(false),
                r: 8.0 * rate(num(c, "sent_bytes"), before.map(|b| num(b, "sent_bytes"))),
                rate: num(c, "rate_bps"),
                ceil: num(c, "ceil_bps"),
                bl: num(c, "backlog_bytes"),
                dr: prev.map_or(0.0, |_| {
                    (num(c, "dropped") - before.map_or(0.0, |b| num(b, "dropped"))).max(0.0)
                }),
                id,
            }
        })
        .collect();
    Sample {
        t: cur.unix_ms,
        s: secs.unwrap_or(0.0),
        p,
        c,
        dr: prev.map_or(0.0, |p| (drops(&cur.status) - drops(&p.status)).max(0.0)),
    }
}

/// The mean of `samples` (each weighted by the seconds it covers), as one sample ending
/// at the last one's time. Paths and classes are matched by name and id.
pub fn mean(samples: &[Sample]) -> Option<Sample> {
    let last = samples.last()?;
    let total: f64 = samples.iter().map(|s| s.s.max(0.001)).sum();
    let w = |s: &Sample| s.s.max(0.001) / total;
    let mut out = Sample {
        t: last.t,
        s: samples.iter().map(|s| s.s).sum(),
        p: last
            .p
            .iter()
            .map(|p| PathSample {
                up: 0.0,
                tx: 0.0,
                rx: 0.0,
                rtt: 0.0,
                jit: 0.0,
                loss: 0.0,
                q: 0.0,
                qd: 0.0,
                n: p.n.clone(),
            })
            .collect(),
        c: last
            .c
            .iter()
            .map(|c| ClassSample {
                r: 0.0,
                bl: 0.0,
                dr: 0.0,
                ..c.clone()
            })
            .collect(),
        dr: samples.iter().map(|s| s.dr).sum(),
    };
    for s in samples {
        let k = w(s);
        for o in &mut out.p {
            if let Some(p) = s.p.iter().find(|p| p.n == o.n) {
                o.up += k * p.up;
                o.tx += k * p.tx;
                o.rx += k * p.rx;
                o.rtt += k * p.rtt;
                o.jit += k * p.jit;
                o.loss += k * p.loss;
                o.q += k * p.q;
                o.qd += k * p.qd;
            }
        }
        for o in &mut out.c {
            if let Some(c) = s.c.iter().find(|c| c.id == o.id) {
                o.r += k * c.r;
                o.bl += k * c.bl;
                o.dr += c.dr;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snap(ms: u64, tx: u64, state: &str, sent: u64, dropped: u64) -> Snapshot {
        Snapshot {
            unix_ms: ms,
            status: json!({"status": {
                "paths": [{"name": "p0", "state": state, "tx_bytes": tx, "rx_bytes": 0, "srtt_us": 20_500,
                           "rttvar_us": 1500, "loss": 0.01, "queued_bytes": 12_500, "pacing_bps": 10_000_000}],
                "counters": {"drop_queue": dropped, "drop_shaper": 1}}}),
            classes: Some(
                json!([{"id": "1:10", "leaf": true, "rate_bps": 1_000_000, "ceil_bps": 2_000_000,
                                  "sent_bytes": sent, "backlog_bytes": 3000, "dropped": dropped}]),
            ),
            notes: Vec::new(),
        }
    }

    #[test]
    fn rates_come_from_counter_deltas() {
        let a = snap(1_000, 1_000_000, "up", 0, 0);
        let b = snap(3_000, 3_500_000, "stalled", 250_000, 7);
        let first = between(None, &a);
        assert_eq!((first.p[0].tx, first.c[0].r, first.dr), (0.0, 0.0, 0.0));
        let s = between(Some(&a), &b);
        assert_eq!(s.s, 2.0);
        assert_eq!(s.p[0].tx, 10_000_000.0);
        assert_eq!(s.p[0].up, 0.5);
        assert_eq!((s.p[0].rtt, s.p[0].jit, s.p[0].loss), (20.5, 1.5, 1.0));
        assert_eq!(s.p[0].qd, 10.0);
        assert_eq!(s.c[0].r, 1_000_000.0);
        assert_eq!((s.c[0].dr, s.dr), (7.0, 7.0));
        // A counter that went back (a restart, a re-created path) is no negative rate.
        assert_eq!(between(Some(&b), &a).p[0].tx, 0.0);
    }

    #[test]
    fn the_mean_weights_by_duration() {
        let a = snap(1_000, 0, "up", 0, 0);
        let b = snap(2_000, 1_000_000, "up", 0, 0);
        let c = snap(5_000, 1_000_000, "down", 0, 0);
        let m = mean(&[between(Some(&a), &b), between(Some(&b), &c)]).unwrap();
        assert_eq!(m.t, 5_000);
        assert_eq!(m.s, 4.0);
        assert_eq!(m.p[0].tx, 2_000_000.0);
        assert_eq!(m.p[0].up, 0.25);
        assert!(mean(&[]).is_none());
    }
}
