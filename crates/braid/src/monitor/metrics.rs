//! `/metrics`: the latest snapshot in the Prometheus text format (version 0.0.4), every
//! family with `# HELP` and `# TYPE`, named `braid_...`, labelled `bond` and `path` or
//! `class` (`docs/monitor.md` lists them).
use std::fmt::Write as _;

use serde_json::Value;

use super::Snapshot;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

struct Out {
    text: String,
    bond: String,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        let _ = write!(self.text, "{name}{{bond=\"{}\"", escape(&self.bond));
        for (k, l) in labels {
            let _ = write!(self.text, ",{k}=\"{}\"", escape(l));
        }
        let _ = writeln!(self.text, "}} {}", value(v));
    }

    /// One family with one sample per item of `items`.
    fn each(
        &mut self,
        (name, kind, help): (&str, &str, &str),
        items: &[Value],
        label: &str,
        key: &str,
        f: impl Fn(&Value) -> f64,
    ) {
        if items.is_empty() {
            return;
        }
        self.family(name, kind, help);
        for it in items {
            let l = it.get(key).and_then(Value::as_str).unwrap_or("?");
            self.sample(name, &[(label, l)], f(it));
        }
    }
}

/// A figure of a path or class.
type Figure = Box<dyn Fn(&Value) -> f64>;

fn num(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

fn get<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| v.get(k).unwrap_or(&Value::Null))
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// The metrics of `snap` for the bond `bond`.
pub fn render(bond: &str, snap: &Snapshot) -> String {
    let mut o = Out {
        text: String::with_capacity(16 << 10),
        bond: bond.to_owned(),
    };
    let s = &snap.status;
    let st = get(s, &["status"]);
    o.family(
        "braid_up",
        "gauge",
        "1 while the daemon answers (this page is its answer).",
    );
    o.sample("braid_up", &[], 1.0);
    o.family(
        "braid_uptime_seconds",
        "gauge",
        "Seconds since the daemon started.",
    );
    o.sample("braid_uptime_seconds", &[], num(s, "uptime_us") / 1e6);
    paths(&mut o, s, st);
    bond_counters(&mut o, st);
    reorder(&mut o, st);
    encryption(&mut o, get(s, &["encryption"]));
    if let Some(c) = &snap.classes {
        classes(&mut o, arr(c));
    }
    o.text
}

fn paths(o: &mut Out, s: &Value, st: &Value) {
    let ps = arr(get(st, &["paths"]));
    if ps.is_empty() {
        return;
    }
    o.family(
        "braid_path_state",
        "gauge",
        "1 for the path's state now (up, stalled: up but its data unacknowledged, down).",
    );
    for p in ps {
        let name = p.get("name").and_then(Value::as_str).unwrap_or("?");
        let now = p.get("state").and_then(Value::as_str).unwrap_or("down");
        for state in ["up", "stalled", "down"] {
            o.sample(
                "braid_path_state",
                &[("path", name), ("state", state)],
                if now == state { 1.0 } else { 0.0 },
            );
        }
    }
    let us = |k: &'static str| move |p: &Value| num(p, k) / 1e6;
    let gauges: [(&str, &str, &str, Figure); 12] = [
        (
            "braid_path_srtt_seconds",
            "gauge",
            "Smoothed round-trip time (0: not measured yet).",
            Box::new(us("srtt_us")),
        ),
        (
            "braid_path_min_rtt_seconds",
            "gauge",
            "Minimum round-trip time over the last 10 s of data acks (0: none yet).",
            Box::new(us("min_rtt_us")),
        ),
        (
            "braid_path_jitter_seconds",
            "gauge",
            "Round-trip time variation from probes (RFC 6298 RTTVAR).",
            Box::new(us("rttvar_us")),
        ),
        (
            "braid_path_loss_ratio",
            "gauge",
            "Loss, 0-1 (data and probes).",
            Box::new(|p: &Value| num(p, "loss")),
        ),
        (
            "braid_path_capacity_bps",
            "gauge",
            "Estimated capacity, bit/s (0: not measured yet).",
            Box::new(|p: &Value| num(p, "capacity_bps")),
        ),
        (
            "braid_path_pacing_bps",
            "gauge",
            "Pacing rate, bit/s.",
            Box::new(|p: &Value| num(p, "pacing_bps")),
        ),
        (
            "braid_path_configured_bps",
            "gauge",
            "Configured speed (bps), bit/s (0: none).",
            Box::new(|p: &Value| num(p, "bps")),
        ),
        (
            "braid_path_queue_bytes",
            "gauge",
            "Bytes queued in braid for the path.",
            Box::new(|p: &Value| num(p, "queued_bytes")),
        ),
        (
            "braid_path_queue_delay_seconds",
            "gauge",
            "What the path's queue takes to send at its pacing rate.",
            Box::new(|p: &Value| {
                let pacing = num(p, "pacing_bps");
                if pacing > 0.0 {
                    num(p, "queued_bytes") * 8.0 / pacing
                } else {
                    0.0
                }
            }),
        ),
        (
            "braid_path_inflight_bytes",
            "gauge",
            "Bytes sent and not yet acknowledged.",
            Box::new(|p: &Value| num(p, "inflight_bytes")),
        ),
        (
            "braid_path_cwnd_bytes",
            "gauge",
            "The path's congestion window.",
            Box::new(|p: &Value| num(p, "cwnd_bytes")),
        ),
        (
            "braid_path_window_limited_seconds_total",
            "counter",
            "Time the path had packets queued and a full congestion window.",
            Box::new(|p: &Value| num(p, "window_limited_ms") / 1000.0),
        ),
    ];
    for (name, kind, help, f) in &gauges {
        o.each((name, kind, help), ps, "path", "name", f);
    }
    let counters = [
        (
            "braid_path_tx_bytes_total",
            "Data bytes sent on the path.",
            "tx_bytes",
        ),
        (
            "braid_path_tx_packets_total",
            "Data datagrams sent on the path.",
            "tx_packets",
        ),
        (
            "braid_path_rx_bytes_total",
            "Data bytes received on the path.",
            "rx_bytes",
        ),
        (
            "braid_path_rx_packets_total",
            "Data datagrams received on the path.",
            "rx_packets",
        ),
        (
            "braid_path_downs_total",
            "Times the path went down.",
            "downs",
        ),
    ];
    for (name, help, key) in counters {
        o.each((name, "counter", help), ps, "path", "name", |p| num(p, key));
    }
    let heard: Vec<Value> = ps
        .iter()
        .filter(|p| p.get("last_rx_us").is_some_and(|v| !v.is_null()))
        .cloned()
        .collect();
    o.each(
        (
            "braid_path_last_rx_age_seconds",
            "gauge",
            "Seconds since the last datagram from the peer on the path (absent: never).",
        ),
        &heard,
        "path",
        "name",
        us("last_rx_us"),
    );
    let io = arr(get(s, &["io"]));
    if !io.is_empty() {
        o.family(
            "braid_path_io_errors_total",
            "counter",
            "Datagrams the path's socket or line did not take, by kind (send_would_block: buffer full; send_errors; recv_errors; emu_dropped: the lab's emulator).",
        );
        io_counters(
            o,
            io,
            "braid_path_io_errors_total",
            &[
                "send_would_block",
                "send_errors",
                "recv_errors",
                "emu_dropped",
            ],
        );
        o.family(
            "braid_path_io_total",
            "counter",
            "A UDP path's datagrams and the syscalls that carried them, each way (send_datagrams / send_calls: datagrams per sendmsg with GSO; recv_datagrams / recv_calls: per recvmmsg with GRO).",
        );
        io_counters(
            o,
            io,
            "braid_path_io_total",
            &[
                "send_datagrams",
                "send_calls",
                "recv_datagrams",
                "recv_calls",
            ],
        );
    }
}

/// One sample of `family` per path and kind, from each path's `io` counters.
fn io_counters(o: &mut Out, io: &[Value], family: &str, kinds: &[&str]) {
    for p in io {
        let name = p.get("name").and_then(Value::as_str).unwrap_or("?");
        for kind in kinds {
            o.sample(
                family,
                &[("path", name), ("kind", kind)],
                num(get(p, &["counters"]), kind),
            );
        }
    }
}

fn bond_counters(o: &mut Out, st: &Value) {
    let c = get(st, &["counters"]);
    o.family(
        "braid_tun_rx_packets_total",
        "counter",
        "Packets read from the TUN (to send over the paths).",
    );
    o.sample("braid_tun_rx_packets_total", &[], num(c, "tun_rx"));
    o.family(
        "braid_tun_tx_packets_total",
        "counter",
        "Packets delivered to the TUN (received over the paths).",
    );
    o.sample("braid_tun_tx_packets_total", &[], num(c, "tun_tx"));
    o.family(
        "braid_drops_total",
        "counter",
        "Packets or datagrams the bond dropped, by reason.",
    );
    for (reason, key) in [
        ("no_path", "drop_no_path"),
        ("queue", "drop_queue"),
        ("too_big", "drop_too_big"),
        ("redundant_retransmit", "drop_redundant_retransmit"),
        ("shaper", "drop_shaper"),
        ("rx_too_big", "drop_rx_too_big"),
        ("partial", "drop_partial"),
        ("bad_datagram", "bad_datagram"),
        ("unknown_path", "unknown_path"),
    ] {
        o.sample("braid_drops_total", &[("reason", reason)], num(c, key));
    }
    for (name, key, help) in [
        (
            "braid_rescheduled_total",
            "rescheduled",
            "Packets moved off a path that went down onto live ones.",
        ),
        (
            "braid_peer_restarts_total",
            "peer_restarts",
            "Times the peer announced a new epoch (it restarted).",
        ),
        (
            "braid_stall_recoveries_total",
            "stall_recoveries",
            "Times a stalled path's in-flight data was declared lost.",
        ),
        (
            "braid_mss_clamped_total",
            "mss_clamped",
            "TCP SYNs whose MSS was lowered to fit one datagram.",
        ),
    ] {
        o.family(name, "counter", help);
        o.sample(name, &[], num(c, key));
    }
}

fn reorder(o: &mut Out, st: &Value) {
    let r = get(st, &["reorder"]);
    o.family(
        "braid_reorder_packets_total",
        "counter",
        "Packets through the reorder buffer, by outcome.",
    );
    for k in [
        "in_order",
        "reordered",
        "late",
        "duplicates",
        "skipped",
        "overflows",
        "stale",
        "dropped",
        "equalized",
    ] {
        o.sample("braid_reorder_packets_total", &[("outcome", k)], num(r, k));
    }
    o.family(
        "braid_reorder_wait_seconds",
        "histogram",
        "How long delivered packets waited in the reorder buffer for a gap to fill.",
    );
    let hist: Vec<f64> = arr(get(r, &["wait_hist"]))
        .iter()
        .map(|v| v.as_f64().unwrap_or(0.0))
        .collect();
    let mut cum = 0.0;
    for (i, b) in braid_core::WAIT_BUCKETS_US.iter().enumerate() {
        cum += hist.get(i).copied().unwrap_or(0.0);
        let le = value(*b as f64 / 1e6);
        o.sample("braid_reorder_wait_seconds_bucket", &[("le", &le)], cum);
    }
    let total: f64 = hist.iter().sum();
    o.sample(
        "braid_reorder_wait_seconds_bucket",
        &[("le", "+Inf")],
        total,
    );
    o.sample(
        "braid_reorder_wait_seconds_sum",
        &[],
        num(r, "wait_micros_total") / 1e6,
    );
    o.sample("braid_reorder_wait_seconds_count", &[], total);
    o.family(
        "braid_reorder_deadline_seconds",
        "gauge",
        "How long the reorder buffer waits for a gap now.",
    );
    o.sample(
        "braid_reorder_deadline_seconds",
        &[],
        num(st, "reorder_deadline_us") / 1e6,
    );
    o.family(
        "braid_equalize_seconds",
        "gauge",
        "Delay equalisation: how long a packet on the quickest path is held now.",
    );
    o.sample("braid_equalize_seconds", &[], num(st, "equalize_us") / 1e6);
    o.family(
        "braid_pacing_lag_seconds",
        "gauge",
        "The most a queued datagram left after its pacing time in the last 1-2 s: how late the daemon's loop runs.",
    );
    o.sample(
        "braid_pacing_lag_seconds",
        &[],
        num(st, "pacing_lag_us") / 1e6,
    );
}

fn encryption(o: &mut Out, e: &Value) {
    if e.get("enabled") != Some(&Value::Bool(true)) {
        return;
    }
    o.family(
        "braid_session_established",
        "gauge",
        "1 while a session with the peer is up.",
    );
    o.sample(
        "braid_session_established",
        &[],
        if e.get("established") == Some(&Value::Bool(true)) {
            1.0
        } else {
            0.0
        },
    );
    if let Some(age) = e.get("latest_handshake_age_us").and_then(Value::as_f64) {
        o.family(
            "braid_handshake_age_seconds",
            "gauge",
            "Seconds since the current session's handshake.",
        );
        o.sample("braid_handshake_age_seconds", &[], age / 1e6);
    }
    let ev = get(e, &["events"]);
    for (name, key, help) in [
        (
            "braid_sessions_total",
            "sessions_created",
            "Sessions made with the peer (the first and each rekey).",
        ),
        (
            "braid_handshakes_completed_total",
            "handshakes_completed",
            "Handshakes completed.",
        ),
        ("braid_sealed_total", "sealed", "Datagrams sealed."),
        ("braid_opened_total", "opened", "Datagrams opened."),
    ] {
        o.family(name, "counter", help);
        o.sample(name, &[], num(ev, key));
    }
    let rej = get(e, &["rejected"]);
    if let Some(m) = rej.as_object() {
        o.family(
            "braid_datagrams_rejected_total",
            "counter",
            "Datagrams the sealer refused, by reason.",
        );
        for (k, v) in m {
            o.sample(
                "braid_datagrams_rejected_total",
                &[("reason", k)],
                v.as_f64().unwrap_or(0.0),
            );
        }
    }
}

fn classes(o: &mut Out, cs: &[Value]) {
    if cs.is_empty() {
        return;
    }
    let ns = |k: &'static str| move |c: &Value| num(c, k) / 1e9;
    let gauges: [(&str, &str, Figure); 9] = [
        (
            "braid_class_rate_bps",
            "The class's assured rate, bit/s.",
            Box::new(|c: &Value| num(c, "rate_bps")),
        ),
        (
            "braid_class_ceil_bps",
            "The class's ceil, bit/s.",
            Box::new(|c: &Value| num(c, "ceil_bps")),
        ),
        (
            "braid_class_measured_bps",
            "What the class sent over the last second, bit/s.",
            Box::new(|c: &Value| num(c, "rate_measured_bps")),
        ),
        (
            "braid_class_measured_pps",
            "Packets per second the class sent over the last second.",
            Box::new(|c: &Value| num(c, "pps_measured")),
        ),
        (
            "braid_class_tokens_seconds",
            "Token balance at rate, in seconds of transmit time (the kernel's tokens).",
            Box::new(ns("tokens_ns")),
        ),
        (
            "braid_class_ctokens_seconds",
            "Token balance at ceil, in seconds of transmit time (the kernel's ctokens).",
            Box::new(ns("ctokens_ns")),
        ),
        (
            "braid_class_backlog_bytes",
            "Bytes queued in the class (leaves).",
            Box::new(|c: &Value| num(c, "backlog_bytes")),
        ),
        (
            "braid_class_backlog_packets",
            "Packets queued in the class (leaves).",
            Box::new(|c: &Value| num(c, "backlog_packets")),
        ),
        (
            "braid_class_prio",
            "The class's priority (0 first).",
            Box::new(|c: &Value| num(c, "prio")),
        ),
    ];
    for (name, help, f) in &gauges {
        o.each((name, "gauge", help), cs, "class", "id", f);
    }
    for (name, help, key) in [
        (
            "braid_class_sent_bytes_total",
            "Bytes the class sent.",
            "sent_bytes",
        ),
        (
            "braid_class_sent_packets_total",
            "Packets the class sent.",
            "sent_packets",
        ),
        (
            "braid_class_drops_total",
            "Packets the class dropped (its queue was full).",
            "dropped",
        ),
        (
            "braid_class_lends_total",
            "Packets the class sent within its own rate (the kernel's lends).",
            "lends",
        ),
        (
            "braid_class_borrows_total",
            "Packets the class sent on tokens borrowed from an ancestor (the kernel's borrows).",
            "borrows",
        ),
    ] {
        o.each((name, "counter", help), cs, "class", "id", |c| num(c, key));
    }
    o.family(
        "braid_class_mode",
        "gauge",
        "1 for the class's mode now (can-send: under rate; may-borrow: over rate, under ceil; cant-send: over ceil).",
    );
    for c in cs {
        let id = c.get("id").and_then(Value::as_str).unwrap_or("?");
        let now = c.get("mode").and_then(Value::as_str).unwrap_or("");
        for mode in ["can-send", "may-borrow", "cant-send"] {
            o.sample(
                "braid_class_mode",
                &[("class", id), ("mode", mode)],
                if now == mode { 1.0 } else { 0.0 },
            );
        }
    }
    o.family(
        "braid_class_info",
        "gauge",
        "1 per class, with its parent and name as labels.",
    );
    for c in cs {
        let id = c.get("id").and_then(Value::as_str).unwrap_or("?");
        let parent = c.get("parent").and_then(Value::as_str).unwrap_or("");
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        o.sample(
            "braid_class_info",
            &[("class", id), ("parent", parent), ("name", name)],
            1.0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_labels_are_written_as_the_format_wants() {
        assert_eq!(value(3.0), "3");
        assert_eq!(value(0.25), "0.25");
        assert_eq!(value(f64::INFINITY), "+Inf");
        assert_eq!(value(f64::NAN), "NaN");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
