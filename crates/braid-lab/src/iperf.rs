//! Reading iperf3's JSON (`-J`) and the figures the lab derives from it.
use anyhow::{Context, Result};
use serde_json::Value;

/// One reporting interval of the receiving side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// Start, seconds from the test's start.
    pub start: f64,
    /// End, seconds.
    pub end: f64,
    /// Bytes received in it.
    pub bytes: u64,
}

/// What one iperf3 run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IperfResult {
    /// Receiver's goodput over the whole test, bit/s.
    pub goodput_bps: f64,
    /// Bytes received.
    pub bytes: u64,
    /// Receiver-side intervals (`--interval`).
    pub intervals: Vec<Interval>,
    /// TCP retransmissions the sender counted (None for UDP or unknown).
    pub retransmits: Option<u64>,
    /// UDP: percentage of datagrams lost.
    pub udp_lost_percent: Option<f64>,
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_f64().map(|x| x as u64))
        .unwrap_or(0)
}

/// Combine the server's JSON (receiver: intervals and goodput) and the client's (sender:
/// retransmits). Either may be missing a field; an `error` key is an error.
pub fn parse(server: &str, client: &str) -> Result<IperfResult> {
    let s: Value =
        serde_json::from_str(server.trim()).context("iperf3 server output is not JSON")?;
    let c: Value =
        serde_json::from_str(client.trim()).context("iperf3 client output is not JSON")?;
    for (who, v) in [("server", &s), ("client", &c)] {
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            anyhow::bail!("iperf3 {who}: {e}");
        }
    }
    let intervals: Vec<Interval> = s["intervals"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| Interval {
                    start: f(&i["sum"]["start"]),
                    end: f(&i["sum"]["end"]),
                    bytes: u(&i["sum"]["bytes"]),
                })
                .collect()
        })
        .unwrap_or_default();
    let udp = s["end"]["sum"].get("lost_percent").is_some();
    let (goodput_bps, bytes) = if udp {
        // The server's UDP summary reports packets, not bytes: add up the intervals.
        let bytes: u64 = intervals.iter().map(|i| i.bytes).sum();
        let secs = intervals.last().map_or(0.0, |i| i.end);
        (
            if secs > 0.0 {
                bytes as f64 * 8.0 / secs
            } else {
                0.0
            },
            bytes,
        )
    } else {
        let r = &s["end"]["sum_received"];
        let bytes = u(&r["bytes"]);
        let mut bps = f(&r["bits_per_second"]);
        if bps == 0.0 {
            bps = f(&c["end"]["sum_received"]["bits_per_second"]);
        }
        (bps, bytes)
    };
    let retransmits = c["end"]["sum_sent"]["retransmits"].as_u64();
    let udp_lost_percent = if udp {
        Some(f(&s["end"]["sum"]["lost_percent"]))
    } else {
        None
    };
    Ok(IperfResult {
        goodput_bps,
        bytes,
        intervals,
        retransmits,
        udp_lost_percent,
    })
}

/// The longest run of consecutive intervals that each delivered less than 10% of the
/// median interval's bytes, in ms (a TCP stall shows as a run of empty intervals).
/// The last interval (usually a fragment) is ignored. Each interval counts as its length
/// to the whole ms: iperf3's timers put its 100 ms intervals a few µs long, and three of
/// them (300.1 ms) failed a 300 ms target that three exact ones met.
pub fn longest_stall_ms(intervals: &[Interval]) -> f64 {
    let body = match intervals.len() {
        0 | 1 => intervals,
        n => &intervals[..n - 1],
    };
    let mut rates: Vec<f64> = body.iter().map(rate).collect();
    if rates.is_empty() {
        return 0.0;
    }
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    let threshold = median * 0.1;
    let (mut best, mut run) = (0.0f64, 0.0f64);
    for i in body {
        if rate(i) < threshold {
            run += ((i.end - i.start) * 1000.0).round();
            best = best.max(run);
        } else {
            run = 0.0;
        }
    }
    best
}

fn rate(i: &Interval) -> f64 {
    let d = i.end - i.start;
    if d > 0.0 {
        i.bytes as f64 / d
    } else {
        0.0
    }
}

/// Goodput (bit/s) over the intervals lying within `[from, to)` seconds (an interval
/// counts if its midpoint does), or None if there are none.
pub fn goodput_between(intervals: &[Interval], from: f64, to: f64) -> Option<f64> {
    let (mut bytes, mut secs) = (0u64, 0.0f64);
    for i in intervals {
        let mid = (i.start + i.end) / 2.0;
        if mid >= from && mid < to {
            bytes += i.bytes;
            secs += i.end - i.start;
        }
    }
    (secs > 0.0).then(|| bytes as f64 * 8.0 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(rates: &[u64]) -> Vec<Interval> {
        rates
            .iter()
            .enumerate()
            .map(|(k, &b)| Interval {
                start: k as f64 * 0.1,
                end: (k + 1) as f64 * 0.1,
                bytes: b,
            })
            .collect()
    }

    #[test]
    fn stall_is_longest_empty_run() {
        let i = iv(&[100, 100, 0, 0, 0, 100, 5, 100, 0, 100, 3]);
        assert!((longest_stall_ms(&i) - 300.0).abs() < 1e-6);
        assert_eq!(longest_stall_ms(&iv(&[100, 90, 110, 1])), 0.0);
        assert_eq!(longest_stall_ms(&[]), 0.0);
        // Intervals a few µs long, as iperf3's timers make them: three are 300 ms.
        let mut late = iv(&[100, 100, 100, 0, 0, 0, 100, 100, 100]);
        for (k, i) in late.iter_mut().enumerate() {
            i.start = k as f64 * 0.100_04;
            i.end = (k + 1) as f64 * 0.100_04;
        }
        assert_eq!(longest_stall_ms(&late), 300.0);
    }

    #[test]
    fn goodput_window() {
        let i = iv(&[1000, 1000, 0, 0, 500, 500]);
        let g = goodput_between(&i, 0.2, 0.4).unwrap();
        assert_eq!(g, 0.0);
        let g = goodput_between(&i, 0.4, 0.6).unwrap();
        assert!((g - 500.0 * 8.0 / 0.1).abs() < 1e-6);
        assert!(goodput_between(&i, 5.0, 6.0).is_none());
    }

    #[test]
    fn parses_tcp_and_udp() {
        let server = r#"{"intervals":[{"sum":{"start":0,"end":0.1,"bytes":1000}},{"sum":{"start":0.1,"end":0.2,"bytes":3000}}],
            "end":{"sum_received":{"bytes":4000,"bits_per_second":160000.0}}}"#;
        let client =
            r#"{"end":{"sum_sent":{"retransmits":7},"sum_received":{"bits_per_second":1.0}}}"#;
        let r = parse(server, client).unwrap();
        assert_eq!(r.intervals.len(), 2);
        assert_eq!(r.bytes, 4000);
        assert_eq!(r.goodput_bps, 160000.0);
        assert_eq!(r.retransmits, Some(7));
        assert_eq!(r.udp_lost_percent, None);

        let server = r#"{"intervals":[{"sum":{"start":0,"end":0.5,"bytes":1000}},{"sum":{"start":0.5,"end":1.0,"bytes":1000}}],
            "end":{"sum":{"bytes":0,"lost_percent":2.5}}}"#;
        let r = parse(server, "{}").unwrap();
        assert_eq!(r.goodput_bps, 16000.0);
        assert_eq!(r.udp_lost_percent, Some(2.5));
        assert_eq!(r.retransmits, None);
    }

    #[test]
    fn errors_surface() {
        assert!(parse(r#"{"error":"unable to connect"}"#, "{}").is_err());
        assert!(parse("not json", "{}").is_err());
    }
}
