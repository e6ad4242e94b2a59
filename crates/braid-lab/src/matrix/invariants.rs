//! Invariants of `braid status --json` after a case: values in range, nothing delivered
//! that was not received, nothing received that was not sent, sealing in the state the
//! config asks for. Each check returns what it found wrong, as sentences.
use serde_json::Value;

/// Largest believable byte rate of any counter over the daemon's uptime (10 Gbit/s: the
/// lab's paths carry at most a few tens of Mbit/s).
const MAX_BYTES_PER_S: f64 = 1.25e9;
/// Largest believable queue or in-flight figure, bytes.
const MAX_QUEUE_BYTES: u64 = 256 << 20;
/// Largest believable smoothed RTT, µs.
const MAX_SRTT_US: u64 = 60_000_000;

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Every number anywhere in `v` that is negative or not finite, as `path = value`.
fn bad_numbers(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Number(x) => {
            let neg = x.as_i64().is_some_and(|i| i < 0);
            let non_finite = x.as_f64().is_some_and(|f| !f.is_finite() || f < 0.0);
            if neg || non_finite {
                out.push(format!("{at} = {x}"));
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                bad_numbers(x, &format!("{at}[{i}]"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                bad_numbers(x, &format!("{at}.{k}"), out);
            }
        }
        _ => {}
    }
}

/// One daemon's status (`side` names it in messages). `sealed`: the case's config has
/// keys. `same_paths`: its paths' receive counters cover the daemon's whole run (no
/// reload re-created them, no restart of the peer reset them).
pub fn check_one(v: &Value, side: &str, sealed: bool, same_paths: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    bad_numbers(v, "", &mut bad);
    for b in bad {
        out.push(format!("{side}: negative or non-finite value {b}"));
    }
    let st = &v["status"];
    let Some(paths) = st["paths"].as_array() else {
        out.push(format!("{side}: status has no paths"));
        return out;
    };
    let uptime_s = n(&v["uptime_us"]) as f64 / 1e6;
    let max_bytes = (uptime_s + 1.0) * MAX_BYTES_PER_S;
    let mut rx_packets = 0u64;
    for p in paths {
        let name = p["name"].as_str().unwrap_or("?");
        let loss = p["loss"].as_f64().unwrap_or(0.0);
        if !(0.0..=1.0).contains(&loss) {
            out.push(format!("{side}: path {name}: loss {loss} outside 0..=1"));
        }
        if n(&p["srtt_us"]) > MAX_SRTT_US {
            out.push(format!(
                "{side}: path {name}: srtt {} µs is absurd",
                n(&p["srtt_us"])
            ));
        }
        for k in ["queued_bytes", "inflight_bytes"] {
            if n(&p[k]) > MAX_QUEUE_BYTES {
                out.push(format!("{side}: path {name}: {k} {} is absurd", n(&p[k])));
            }
        }
        for k in ["tx_bytes", "rx_bytes"] {
            if n(&p[k]) as f64 > max_bytes {
                out.push(format!(
                    "{side}: path {name}: {k} {} in {uptime_s:.1} s of uptime is absurd",
                    n(&p[k])
                ));
            }
        }
        if n(&p["rx_packets"]) > n(&p["rx_bytes"]) || n(&p["tx_packets"]) > n(&p["tx_bytes"]) {
            out.push(format!("{side}: path {name}: more packets than bytes"));
        }
        if p["state"].as_str().is_none_or(str::is_empty) {
            out.push(format!("{side}: path {name}: no state"));
        }
        rx_packets += n(&p["rx_packets"]);
    }
    let tun_tx = n(&st["counters"]["tun_tx"]);
    if same_paths && tun_tx > rx_packets {
        out.push(format!(
            "{side}: delivered {tun_tx} packets to the TUN but received only {rx_packets} data datagrams"
        ));
    }
    let enc = &v["encryption"];
    match (sealed, enc["enabled"].as_bool()) {
        (true, Some(true)) => {
            if enc["established"].as_bool() != Some(true) {
                out.push(format!("{side}: sealed bond without a session at the end"));
            }
        }
        (false, Some(false)) => {}
        (_, e) => out.push(format!(
            "{side}: encryption.enabled is {e:?}, the config says sealed = {sealed}"
        )),
    }
    out
}

/// Between the two ends, when neither was restarted or reloaded: what `rx` (sampled
/// first) received on each path is at most what `tx` (sampled after it) sent on that path,
/// and `rx` delivered to its TUN at most what `tx` read from its own.
pub fn check_pair(rx: &Value, rx_side: &str, tx: &Value, tx_side: &str) -> Vec<String> {
    let mut out = Vec::new();
    let paths = |v: &Value| -> Vec<(String, u64, u64)> {
        v["status"]["paths"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|p| {
                        (
                            p["name"].as_str().unwrap_or("?").to_string(),
                            n(&p["rx_packets"]),
                            n(&p["tx_packets"]),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let sent = paths(tx);
    for (name, got, _) in paths(rx) {
        if let Some((_, _, s)) = sent.iter().find(|p| p.0 == name) {
            if got > *s {
                out.push(format!(
                    "path {name}: {rx_side} received {got} data datagrams, {tx_side} sent only {s}"
                ));
            }
        }
    }
    let delivered = n(&rx["status"]["counters"]["tun_tx"]);
    let read = n(&tx["status"]["counters"]["tun_rx"]);
    if delivered > read {
        out.push(format!(
            "{rx_side} delivered {delivered} packets to its TUN, {tx_side} read only {read} from its own"
        ));
    }
    out
}

/// One line of what a status says, for a failure message: each path's state, RTT, pacing,
/// queue, bytes in flight and datagrams sent and received; the non-zero drop and
/// reorder counters.
pub fn status_line(v: &Value) -> String {
    use braid::status::{bytes, rate};
    let st = &v["status"];
    let mut parts: Vec<String> = st["paths"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|p| {
            format!(
                "{} {} rtt {:.0}ms pacing {} queued {} inflight {} tx {} rx {}",
                p["name"].as_str().unwrap_or("?"),
                p["state"].as_str().unwrap_or("?"),
                n(&p["srtt_us"]) as f64 / 1000.0,
                rate(n(&p["pacing_bps"])),
                bytes(n(&p["queued_bytes"])),
                bytes(n(&p["inflight_bytes"])),
                n(&p["tx_packets"]),
                n(&p["rx_packets"])
            )
        })
        .collect();
    for (group, obj) in [("", &st["counters"]), ("reorder ", &st["reorder"])] {
        if let Some(o) = obj.as_object() {
            for (k, x) in o {
                let keep = k.starts_with("drop")
                    || k.contains("bad")
                    || [
                        "skipped",
                        "late",
                        "duplicates",
                        "stale",
                        "dropped",
                        "overflows",
                        "resyncs",
                    ]
                    .contains(&k.as_str());
                if keep && n(x) > 0 {
                    parts.push(format!("{group}{k} {}", n(x)));
                }
            }
        }
    }
    parts.join("; ")
}

/// A daemon log's lines that say it panicked.
pub fn panics(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("panicked"))
        .map(|l| l.trim().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(tx: u64, rx: u64, tun_rx: u64, tun_tx: u64) -> Value {
        json!({
            "uptime_us": 10_000_000u64,
            "status": {
                "counters": {"tun_rx": tun_rx, "tun_tx": tun_tx},
                "paths": [{"name": "p0", "state": "up", "loss": 0.01, "srtt_us": 20000,
                    "queued_bytes": 0, "inflight_bytes": 3000,
                    "tx_packets": tx, "tx_bytes": tx * 1000, "rx_packets": rx, "rx_bytes": rx * 1000}]
            },
            "encryption": {"enabled": true, "established": true}
        })
    }

    #[test]
    fn a_sane_status_passes() {
        let v = status(100, 90, 100, 80);
        assert_eq!(check_one(&v, "a", true, true), Vec::<String>::new());
        assert!(check_pair(&v, "b", &status(95, 0, 95, 0), "a").is_empty());
    }

    #[test]
    fn each_broken_invariant_is_reported() {
        let mut v = status(100, 90, 100, 95);
        assert_eq!(
            check_one(&v, "a", true, true).len(),
            1,
            "delivered > received"
        );
        assert!(
            check_one(&v, "a", true, false).is_empty(),
            "unless reloaded"
        );
        v["status"]["paths"][0]["loss"] = json!(1.5);
        v["status"]["paths"][0]["srtt_us"] = json!(61_000_000u64);
        v["status"]["paths"][0]["tx_bytes"] = json!(1u64 << 50);
        v["status"]["counters"]["drop_queue"] = json!(-1);
        v["encryption"]["established"] = json!(false);
        let e = check_one(&v, "a", true, false);
        assert_eq!(e.len(), 5, "{e:#?}");
        assert!(e.iter().any(|m| m.contains("drop_queue = -1")));
        assert_eq!(check_one(&v, "a", false, false).len(), 5, "plain vs sealed");
        // b received more than a sent, and delivered more than a read.
        let e = check_pair(&status(0, 120, 0, 130), "b", &status(100, 0, 100, 0), "a");
        assert_eq!(e.len(), 2, "{e:#?}");
    }

    #[test]
    fn status_line_names_paths_and_nonzero_drops() {
        let mut v = status(100, 90, 100, 80);
        v["status"]["counters"]["drop_queue"] = json!(7);
        v["status"]["counters"]["drop_no_path"] = json!(0);
        v["status"]["reorder"] = json!({"skipped": 3, "in_order": 50});
        let l = status_line(&v);
        assert!(l.starts_with("p0 up rtt 20ms"), "{l}");
        assert!(l.contains("tx 100 rx 90"), "{l}");
        assert!(
            l.contains("drop_queue 7") && l.contains("reorder skipped 3"),
            "{l}"
        );
        assert!(
            !l.contains("drop_no_path") && !l.contains("in_order"),
            "{l}"
        );
    }

    #[test]
    fn panics_found_in_logs() {
        let log = "[ 1.0] braid: up\nthread 'main' panicked at src/x.rs:1:1:\nboom\n";
        assert_eq!(panics(log).len(), 1);
        assert!(panics("[ 1.0] braid: up\n").is_empty());
    }
}
