//! `braid status`: the daemon's status response as a readable table, and the bond's
//! health as the exit status (for monitoring).
use std::fmt::Write as _;

use serde_json::Value;

mod ether;

/// The version of `braid status --json`'s layout (`"version"`): raised when a field
/// changes meaning or goes away (new fields may be added within a version).
pub const JSON_VERSION: u64 = 1;

/// The bond's health, from a status response: what `braid status` exits with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// A session (with keys) and every path up: exit 0.
    Up,
    /// Some path not up (down, stalled, no socket): exit 3. Says which.
    Degraded(String),
    /// No path up, or no session: exit 4. Says why.
    Down(String),
}

impl Health {
    /// `braid status`'s exit status: 0 up, 3 degraded, 4 down (1 is "no daemon").
    pub fn exit_code(&self) -> u8 {
        match self {
            Health::Up => 0,
            Health::Degraded(_) => 3,
            Health::Down(_) => 4,
        }
    }

    /// The last line of the table.
    pub fn line(&self) -> String {
        match self {
            Health::Up => "health: up".to_owned(),
            Health::Degraded(why) => format!("health: DEGRADED ({why})"),
            Health::Down(why) => format!("health: DOWN ({why})"),
        }
    }
}

/// The health of the bond in a status response: down without a session (when sealed) or
/// without a path in state `up`; degraded while any path is in another state (`down`,
/// `stalled`, ...) or has no socket; else up.
pub fn health(resp: &Value) -> Health {
    if ether::is_ether(resp) {
        return ether::health(resp);
    }
    let null = Value::Null;
    let paths: &[Value] = resp
        .get("status")
        .and_then(|s| s.get("paths"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let io: &[Value] = resp
        .get("io")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let e = resp.get("encryption").unwrap_or(&null);
    if e.get("enabled") == Some(&Value::Bool(true))
        && e.get("established") != Some(&Value::Bool(true))
    {
        return Health::Down("no session with the peer".into());
    }
    let mut not_up = Vec::new();
    for p in paths {
        let name = p.get("name").and_then(Value::as_str).unwrap_or("?");
        let state = p.get("state").and_then(Value::as_str).unwrap_or("?");
        let id = p.get("id").and_then(Value::as_u64);
        let closed = io.iter().any(|i| {
            i.get("id").and_then(Value::as_u64) == id
                && i.get("socket").and_then(Value::as_str) == Some("closed")
        });
        if state != "up" {
            not_up.push(format!("{name} {state}"));
        } else if closed {
            not_up.push(format!("{name} has no socket"));
        }
    }
    if paths.is_empty() {
        Health::Down("no paths".into())
    } else if not_up.len() == paths.len() {
        Health::Down(format!("no path up: {}", not_up.join(", ")))
    } else if !not_up.is_empty() {
        Health::Degraded(not_up.join(", "))
    } else {
        Health::Up
    }
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// `rows` (the first is the header) as aligned columns: the first `left` columns to the
/// left, the others to the right.
fn table(out: &mut String, rows: &[Vec<String>], left: usize) {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (s, w))| {
                if c < left {
                    format!("{s:<w$}")
                } else {
                    format!("{s:>w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
}

/// `12.3M`-style bit rate.
pub fn rate(bps: u64) -> String {
    if bps == 0 {
        return "-".into();
    }
    let b = bps as f64;
    if b >= 1e9 {
        format!("{:.2}G", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1}M", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1}k", b / 1e3)
    } else {
        format!("{bps}")
    }
}

/// `1.5MB`-style byte count.
pub fn bytes(n: u64) -> String {
    let b = n as f64;
    if b >= 1e9 {
        format!("{:.2}GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1}MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1}kB", b / 1e3)
    } else {
        format!("{n}B")
    }
}

/// How long ago, from microseconds: "80ms ago", "12s ago", "3m ago".
fn age(us: u64) -> String {
    match us {
        0..1_000_000 => format!("{}ms ago", us / 1000),
        1_000_000..120_000_000 => format!("{}s ago", us / 1_000_000),
        _ => format!("{}m ago", us / 60_000_000),
    }
}

/// A loop this late to send (µs) is worth a line: a busy host, bursts to catch up.
const LATE_LOOP_US: u64 = 2_000;

fn ms(us: u64) -> String {
    if us == 0 {
        "-".into()
    } else {
        format!("{:.1}ms", us as f64 / 1000.0)
    }
}

/// Render a `status` response (`{"ok":true,"interface":..,"status":{BondStatus},"io":[..]}`).
pub fn render(resp: &Value) -> String {
    if ether::is_ether(resp) {
        return ether::render(resp);
    }
    let null = Value::Null;
    let st = resp.get("status").unwrap_or(&null);
    let mut out = String::new();
    let paths: &[Value] = st
        .get("paths")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let io: &[Value] = resp
        .get("io")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let workers = match resp
        .get("workers")
        .and_then(|w| w.get("threads"))
        .and_then(Value::as_u64)
    {
        Some(1) => ", 1 worker thread".to_owned(),
        Some(n) if n > 1 => format!(", {n} worker threads"),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "{} {}: scheduler {}, {} path(s){workers}, up {:.0}s",
        resp.get("interface").and_then(Value::as_str).unwrap_or("?"),
        resp.get("address").and_then(Value::as_str).unwrap_or(""),
        st.get("scheduler").and_then(Value::as_str).unwrap_or("?"),
        paths.len(),
        u(resp, "uptime_us") as f64 / 1e6,
    );
    let header = [
        "PATH", "STATE", "RTT", "LOSS", "CAPACITY", "PACING", "QUEUED", "INFLIGHT", "TX PKTS",
        "TX BYTES", "RX PKTS", "RX BYTES", "DOWNS", "LAST RX",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for p in paths {
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let mut state = p
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let id = p.get("id").and_then(Value::as_u64);
        if let Some(i) = io
            .iter()
            .find(|i| i.get("id").and_then(Value::as_u64) == id)
        {
            if i.get("socket").and_then(Value::as_str) == Some("closed") {
                state.push_str(" (no socket)");
            }
        }
        let loss = p.get("loss").and_then(Value::as_f64).unwrap_or(0.0);
        rows.push(vec![
            name,
            state,
            ms(u(p, "srtt_us")),
            format!("{:.1}%", loss * 100.0),
            rate(u(p, "capacity_bps")),
            rate(u(p, "pacing_bps")),
            bytes(u(p, "queued_bytes")),
            bytes(u(p, "inflight_bytes")),
            u(p, "tx_packets").to_string(),
            bytes(u(p, "tx_bytes")),
            u(p, "rx_packets").to_string(),
            bytes(u(p, "rx_bytes")),
            u(p, "downs").to_string(),
            p.get("last_rx_us")
                .and_then(Value::as_u64)
                .map_or_else(|| "never".to_owned(), age),
        ]);
    }
    table(&mut out, &rows, 2);
    for i in io {
        if let Some(e) = i.get("error").and_then(Value::as_str) {
            let _ = writeln!(
                out,
                "  {}: {e}",
                i.get("name").and_then(Value::as_str).unwrap_or("?")
            );
        }
    }
    let c = st.get("counters").unwrap_or(&null);
    let _ = writeln!(
        out,
        "bond: tun rx {}, tun tx {}; dropped: no path {}, queue {}, too big {}, redundant retransmit {}; bad datagrams {}; rescheduled {}",
        u(c, "tun_rx"),
        u(c, "tun_tx"),
        u(c, "drop_no_path"),
        u(c, "drop_queue"),
        u(c, "drop_too_big"),
        u(c, "drop_redundant_retransmit"),
        u(c, "bad_datagram"),
        u(c, "rescheduled"),
    );
    // What only a restart or a fault produces, said only when it happened.
    let rare: Vec<String> = [
        ("peer_restarts", "peer restarts"),
        ("stall_recoveries", "stalls ended by probe answers"),
        ("drop_rx_too_big", "dropped from peer: larger than the mtu"),
        (
            "drop_partial",
            "dropped from peer: packets with a part missing",
        ),
        (
            "drop_rx_held",
            "dropped from peer: held through an outage of their path",
        ),
        (
            "drop_fragment_group",
            "dropped: fragments of datagrams that lost a fragment",
        ),
    ]
    .iter()
    .filter(|(k, _)| u(c, k) > 0)
    .map(|(k, what)| format!("{what} {}", u(c, k)))
    .collect();
    if !rare.is_empty() {
        let _ = writeln!(out, "  {}", rare.join("; "));
    }
    let r = st.get("reorder").unwrap_or(&null);
    let waited = u(r, "reordered").max(1);
    let _ = writeln!(
        out,
        "reorder: in order {} ({} straight through), reordered {}, duplicates {}, late {}, skipped {}, overflows {}; wait avg {}, max {}; deadline {}",
        u(r, "in_order"),
        u(r, "passed"),
        u(r, "reordered"),
        u(r, "duplicates"),
        u(r, "late"),
        u(r, "skipped"),
        u(r, "overflows"),
        ms(u(r, "wait_micros_total") / waited),
        ms(u(r, "wait_micros_max")),
        ms(u(st, "reorder_deadline_us")),
    );
    let held = u(r, "equalized");
    if held > 0 || u(st, "equalize_us") > 0 {
        let _ = writeln!(
            out,
            "equalise: quickest path held {} now; {} packets held, avg {}",
            ms(u(st, "equalize_us")),
            held,
            ms(u(r, "equalize_micros_total") / held.max(1)),
        );
    }
    let lag = u(st, "pacing_lag_us");
    if lag >= LATE_LOOP_US {
        let _ = writeln!(
            out,
            "pacing: sends ran up to {} late in the last seconds (a busy host); the paths catch up in bursts",
            ms(lag),
        );
    }
    if let Some(e) = resp.get("encryption") {
        out.push_str(&crate::seal::render_status(e));
    }
    if let Some(p) = resp.get("privileges") {
        out.push_str(&crate::privileges::render_status(p));
    }
    let _ = writeln!(out, "{}", health(resp).line());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn units() {
        assert_eq!(rate(0), "-");
        assert_eq!(rate(999), "999");
        assert_eq!(rate(10_000_000), "10.0M");
        assert_eq!(rate(2_500_000_000), "2.50G");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(1_500_000), "1.5MB");
        assert_eq!(ms(0), "-");
        assert_eq!(ms(20_100), "20.1ms");
    }

    #[test]
    fn renders_paths_counters_and_reorder() {
        let resp = json!({
            "ok": true, "interface": "braid0", "address": "10.200.0.1/30", "uptime_us": 5_000_000u64,
            "status": {
                "scheduler": "adaptive",
                "paths": [
                    {"id": 0, "name": "p0", "state": "up", "bps": 0, "capacity_bps": 10_000_000u64, "pacing_bps": 12_000_000u64,
                     "srtt_us": 20_100, "loss": 0.015, "queued_bytes": 3000, "inflight_bytes": 15000, "tx_packets": 10,
                     "tx_bytes": 14000, "rx_packets": 7, "rx_bytes": 9000, "downs": 1, "last_rx_us": 80_000},
                    {"id": 1, "name": "longname", "state": "down", "bps": 0, "capacity_bps": 0, "pacing_bps": 0,
                     "srtt_us": 0, "loss": 0.0, "queued_bytes": 0, "inflight_bytes": 0, "tx_packets": 0,
                     "tx_bytes": 0, "rx_packets": 0, "rx_bytes": 0, "downs": 0}
                ],
                "counters": {"tun_rx": 11, "tun_tx": 22, "drop_no_path": 1, "drop_queue": 2, "drop_too_big": 3, "bad_datagram": 4, "rescheduled": 5},
                "reorder": {"in_order": 100, "passed": 90, "reordered": 4, "duplicates": 6, "late": 7, "skipped": 8, "overflows": 9,
                            "wait_micros_total": 8000, "wait_micros_max": 5000,
                            "equalized": 10, "equalize_micros_total": 550_000},
                "reorder_deadline_us": 12_000,
                "equalize_us": 55_000,
                "pacing_lag_us": 5_400
            },
            "io": [{"id": 1, "name": "longname", "socket": "closed", "error": "bind 1.2.3.4:5: Cannot assign requested address"}]
        });
        let t = render(&resp);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "braid0 10.200.0.1/30: scheduler adaptive, 2 path(s), up 5s"
        );
        let mut threaded = resp.clone();
        threaded["workers"] = json!({"threads": 2});
        assert_eq!(
            render(&threaded).lines().next(),
            Some("braid0 10.200.0.1/30: scheduler adaptive, 2 path(s), 2 worker threads, up 5s")
        );
        assert!(lines[1].starts_with("PATH      STATE"), "{t}");
        assert!(lines[2].starts_with("p0        up"), "{t}");
        for cell in [
            "20.1ms", "1.5%", "10.0M", "12.0M", "3.0kB", "15.0kB", "14.0kB", "9.0kB", "80ms ago",
        ] {
            assert!(lines[2].contains(cell), "{cell} missing: {}", lines[2]);
        }
        assert!(lines[3].starts_with("longname  down (no socket)"), "{t}");
        assert!(lines[3].ends_with("never"), "{t}");
        assert_eq!(
            lines[4],
            "  longname: bind 1.2.3.4:5: Cannot assign requested address"
        );
        assert_eq!(lines[5], "bond: tun rx 11, tun tx 22; dropped: no path 1, queue 2, too big 3, redundant retransmit 0; bad datagrams 4; rescheduled 5");
        assert_eq!(
            lines[6],
            "reorder: in order 100 (90 straight through), reordered 4, duplicates 6, late 7, skipped 8, overflows 9; wait avg 2.0ms, max 5.0ms; deadline 12.0ms"
        );
        assert_eq!(
            lines[7],
            "equalise: quickest path held 55.0ms now; 10 packets held, avg 55.0ms"
        );
        assert_eq!(
            lines[8],
            "pacing: sends ran up to 5.4ms late in the last seconds (a busy host); the paths catch up in bursts"
        );
        assert_eq!(lines[9], "health: DEGRADED (longname down)");
    }

    fn with_paths(states: &[(&str, &str)], sealed: Option<bool>) -> Value {
        let paths: Vec<Value> = states
            .iter()
            .enumerate()
            .map(|(i, (n, s))| json!({"id": i, "name": n, "state": s}))
            .collect();
        let io: Vec<Value> = states
            .iter()
            .enumerate()
            .map(|(i, _)| json!({"id": i, "socket": "open"}))
            .collect();
        let mut v = json!({"ok": true, "status": {"paths": paths}, "io": io});
        if let Some(up) = sealed {
            v["encryption"] = json!({"enabled": true, "established": up});
        }
        v
    }

    #[test]
    fn health_is_the_exit_status() {
        let h = health(&with_paths(&[("p0", "up"), ("p1", "up")], Some(true)));
        assert_eq!((h.exit_code(), h.line()), (0, "health: up".to_owned()));
        let h = health(&with_paths(&[("p0", "up"), ("p1", "up")], None));
        assert_eq!(h, Health::Up, "encryption = \"none\"");
        // Any state but "up" is degraded: down, and the core's stalled.
        let h = health(&with_paths(
            &[("p0", "up"), ("p1", "down"), ("p2", "stalled")],
            Some(true),
        ));
        assert_eq!(h.exit_code(), 3);
        assert_eq!(h.line(), "health: DEGRADED (p1 down, p2 stalled)");
        let h = health(&with_paths(
            &[("p0", "down"), ("p1", "stalled")],
            Some(true),
        ));
        assert_eq!(h.exit_code(), 4);
        assert_eq!(h.line(), "health: DOWN (no path up: p0 down, p1 stalled)");
        let h = health(&with_paths(&[("p0", "up")], Some(false)));
        assert_eq!(h, Health::Down("no session with the peer".into()));
        assert_eq!(h.exit_code(), 4);
        assert_eq!(health(&with_paths(&[], None)).exit_code(), 4);
        // An up path without its socket is not up.
        let mut v = with_paths(&[("p0", "up"), ("p1", "up")], None);
        v["io"][1]["socket"] = "closed".into();
        assert_eq!(health(&v), Health::Degraded("p1 has no socket".into()));
    }
}
