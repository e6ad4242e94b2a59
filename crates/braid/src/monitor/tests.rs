//! The monitor end to end, in-process: a real bond's status and classes, rendered as
//! metrics and parsed back by a Prometheus text-format parser; the HTTP server on a
//! loopback port (page, metrics, token, client bound, the event stream).
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use braid_core::Instant;
use serde_json::json;

use super::*;
use crate::config::Config;

const CONFIG: &str = r#"
[bond]
address = "10.200.0.1/30"
encryption = "none"
[[path]]
name = "dsl"
local = "127.0.0.1:7000"
remote = "127.0.0.1:7001"
[[path]]
name = "lte\"4g"
local = "127.0.0.1:7002"
remote = "127.0.0.1:7003"
[shape]
rate = "10mbit"
default = "1:20"
[[shape.class]]
id = "1:1"
rate = "10mbit"
[[shape.class]]
id = "1:10"
parent = "1:1"
name = "alex"
rate = "2mbit"
ceil = "10mbit"
[[shape.class]]
id = "1:20"
parent = "1:1"
rate = "8mbit"
"#;

/// A snapshot of a real bond built from [`CONFIG`], as the daemon makes it.
fn real_snapshot(unix_ms: u64) -> Snapshot {
    let cfg = Config::parse(CONFIG, "t.toml").unwrap();
    let now = Instant::ZERO;
    let (mut ep, _) = cfg.build_endpoint(now).unwrap();
    let shape = cfg.shape.as_ref().unwrap();
    let (shaper, _) = braid_core::shape::Shaper::new(&shape.spec, 0, 1500, now).unwrap();
    ep.bond_mut().set_shaper(now, Some(shaper), false);
    let bond = ep.bond();
    let status = json!({
        "ok": true, "interface": "braid0", "uptime_us": 5_000_000u64,
        "status": serde_json::to_value(bond.status()).unwrap(),
        "io": [{"id": 0, "name": "dsl", "counters": {"send_errors": 2, "send_datagrams": 640, "send_calls": 10}}],
        "encryption": {"enabled": true, "established": true, "latest_handshake_age_us": 3_000_000u64,
                       "events": {"sessions_created": 4, "sealed": 10, "opened": 9},
                       "rejected": {"mac1": 1, "replay": 0}},
    });
    let classes = crate::classes::show(now, bond).get("classes").cloned();
    Snapshot {
        unix_ms,
        status,
        classes,
        notes: Vec::new(),
    }
}

#[test]
fn metrics_parse_as_prometheus_text() {
    let snap = real_snapshot(1000);
    let text = metrics::render("braid0", &snap);
    let lines: Vec<std::io::Result<String>> = text.lines().map(|l| Ok(l.to_owned())).collect();
    let scrape = prometheus_parse::Scrape::parse(lines.into_iter()).expect("parses");
    // Every family has its HELP and TYPE, and every name the braid_ prefix.
    for s in &scrape.samples {
        assert!(s.metric.starts_with("braid_"), "{}", s.metric);
        assert_eq!(s.labels.get("bond"), Some("braid0"), "{}", s.metric);
    }
    for family in [
        "braid_path_state",
        "braid_path_srtt_seconds",
        "braid_path_min_rtt_seconds",
        "braid_path_jitter_seconds",
        "braid_path_loss_ratio",
        "braid_path_capacity_bps",
        "braid_path_pacing_bps",
        "braid_path_queue_bytes",
        "braid_path_queue_delay_seconds",
        "braid_path_cwnd_bytes",
        "braid_path_window_limited_seconds_total",
        "braid_pacing_lag_seconds",
        "braid_path_tx_bytes_total",
        "braid_path_rx_packets_total",
        "braid_path_io_total",
        "braid_drops_total",
        "braid_reorder_wait_seconds",
        "braid_handshake_age_seconds",
        "braid_sessions_total",
        "braid_class_rate_bps",
        "braid_class_ceil_bps",
        "braid_class_tokens_seconds",
        "braid_class_ctokens_seconds",
        "braid_class_lends_total",
        "braid_class_borrows_total",
        "braid_class_backlog_bytes",
        "braid_class_drops_total",
    ] {
        assert!(scrape.docs.contains_key(family), "no HELP for {family}");
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "no TYPE for {family}"
        );
    }
    let find = |metric: &str, label: (&str, &str)| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && s.labels.get(label.0) == Some(label.1))
            .unwrap_or_else(|| panic!("no {metric} {label:?}"))
    };
    let v = |s: &prometheus_parse::Sample| match s.value {
        prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Untyped(v) => v,
        _ => f64::NAN,
    };
    // The quote in a path's name is escaped (this parser keeps the escape as it is).
    assert!(
        text.contains("path=\"lte\\\"4g\",state=\"down\"} 1"),
        "{text}"
    );
    assert_eq!(v(find("braid_path_state", ("path", "lte\\\"4g"))), 0.0);
    assert_eq!(
        v(find("braid_class_rate_bps", ("class", "1:10"))),
        2_000_000.0
    );
    assert_eq!(
        v(find("braid_class_ceil_bps", ("class", "1:10"))),
        10_000_000.0
    );
    assert_eq!(
        v(find("braid_handshake_age_seconds", ("bond", "braid0"))),
        3.0
    );
    assert_eq!(
        v(find("braid_path_io_errors_total", ("kind", "send_errors"))),
        2.0
    );
    assert_eq!(
        v(find("braid_path_io_total", ("kind", "send_datagrams"))),
        640.0
    );
    assert_eq!(v(find("braid_path_io_total", ("kind", "send_calls"))), 10.0);
    // The congestion window as status has it; a fresh bond neither waited on a window
    // nor sent late.
    let cwnd = snap.status["status"]["paths"][0]["cwnd_bytes"].as_f64();
    assert!(cwnd.is_some_and(|c| c > 0.0), "{}", snap.status);
    assert_eq!(
        Some(v(find("braid_path_cwnd_bytes", ("path", "dsl")))),
        cwnd
    );
    let limited = find("braid_path_window_limited_seconds_total", ("path", "dsl"));
    assert_eq!(v(limited), 0.0);
    assert_eq!(v(find("braid_pacing_lag_seconds", ("bond", "braid0"))), 0.0);
    // The histogram: buckets, sum and count.
    let h = scrape
        .samples
        .iter()
        .find(|s| s.metric == "braid_reorder_wait_seconds")
        .expect("histogram");
    match &h.value {
        prometheus_parse::Value::Histogram(b) => {
            assert_eq!(b.len(), braid_core::WAIT_BUCKETS_US.len() + 1);
            assert!(b.last().unwrap().less_than.is_infinite());
        }
        other => panic!("not a histogram: {other:?}"),
    }
}

fn start(token: Option<crate::config::monitor::Token>) -> Monitor {
    let settings = MonitorSettings {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        token,
        token_file: None,
        state_dir: None,
    };
    let bound = bind(&settings).unwrap().unwrap();
    Monitor::start(
        bound,
        "braid0",
        json!({"interface": "braid0"}),
        Instant::ZERO,
    )
    .unwrap()
}

fn try_get(m: &Monitor, target: &str, header: &str) -> std::io::Result<(u16, String)> {
    let mut c = TcpStream::connect(m.addr())?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\n{header}\r\n").as_bytes())?;
    let mut out = String::new();
    c.read_to_string(&mut out)?;
    let code = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

fn get(m: &Monitor, target: &str, header: &str) -> (u16, String) {
    try_get(m, target, header).unwrap()
}

/// Publish until the worker has taken `n` snapshots (the daemon's loop does this once a
/// second; here at once).
fn feed(m: &mut Monitor, from_ms: u64, n: u64) {
    for i in 0..n {
        let now = m.next_due();
        m.publish(now, real_snapshot(from_ms + i * 1000));
        // The worker takes it before the next one replaces it.
        for _ in 0..200 {
            if m.inbox.slot.lock().unwrap().is_none() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[test]
fn the_server_answers_page_metrics_and_history() {
    let mut m = start(None);
    let (code, body) = get(&m, "/metrics", "");
    assert_eq!(code, 503, "{body}");
    feed(&mut m, 1_700_000_000_000, 3);
    let (code, body) = get(&m, "/", "");
    assert_eq!(code, 200);
    assert!(body.contains("<script src=\"app.js\">"));
    assert_eq!(get(&m, "/app.js", "").1, assets::APP_JS);
    let (code, body) = get(&m, "/metrics", "");
    assert_eq!(code, 200);
    assert!(
        body.contains("braid_class_rate_bps{bond=\"braid0\",class=\"1:10\"} 2000000"),
        "{body}"
    );
    let (code, body) = get(&m, "/api/history", "");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["samples"].as_array().unwrap().len(), 3);
    assert_eq!(get(&m, "/nothing", "").0, 404);
    let mut c = TcpStream::connect(m.addr()).unwrap();
    c.write_all(b"POST /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 405"), "{out}");
}

#[test]
fn a_token_is_asked_for_and_checked() {
    let dir = std::env::temp_dir().join(format!("braid-mon-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("t");
    crate::files::write_private(&f, "s3cret-s3cret-s3cret\n").unwrap();
    let t = crate::config::monitor::read_token(&f).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let mut m = start(Some(t));
    feed(&mut m, 1_700_000_000_000, 1);
    assert_eq!(get(&m, "/metrics", "").0, 401);
    assert_eq!(get(&m, "/", "").0, 401);
    assert_eq!(get(&m, "/metrics?token=s3cret-s3cret-s3creX", "").0, 401);
    assert_eq!(get(&m, "/metrics?token=s3cret-s3cret-s3cret", "").0, 200);
    assert_eq!(
        get(
            &m,
            "/metrics",
            "Authorization: Bearer s3cret-s3cret-s3cret\r\n"
        )
        .0,
        200
    );
    assert_eq!(get(&m, "/events", "").0, 401);
}

#[test]
fn clients_are_bounded_and_idle_ones_time_out() {
    let m = start(None);
    // MAX_CONNECTIONS clients that send nothing hold every slot...
    let idle: Vec<TcpStream> = (0..http::MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(m.addr()).unwrap())
        .collect();
    // ...so the next one is told at once (once the listener has taken them all: tried
    // for up to 3 s on a busy machine),
    let mut answer = (0, String::new());
    for _ in 0..30 {
        answer = try_get(&m, "/", "").unwrap_or((0, String::new()));
        if answer.0 == 503 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!((answer.0, answer.1.as_str()), (503, "too many clients\n"));
    // and once they time out (IO_TIMEOUT), clients are served again.
    std::thread::sleep(http::IO_TIMEOUT);
    let mut code = 0;
    for _ in 0..30 {
        code = try_get(&m, "/", "").map_or(0, |a| a.0);
        if code == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(code, 200);
    drop(idle);
}

#[test]
fn the_event_stream_says_hello_then_each_sample() {
    let mut m = start(None);
    feed(&mut m, 1_700_000_000_000, 2);
    let mut c = TcpStream::connect(m.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    let mut events = Vec::new();
    let mut line = String::new();
    let mut fed = false;
    while events.len() < 2 {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "stream ended");
        if let Some(data) = line.strip_prefix("data: ") {
            events.push(serde_json::from_str::<serde_json::Value>(data).unwrap());
            if !fed {
                fed = true;
                feed(&mut m, 1_700_000_002_000, 1);
            }
        }
        if line.starts_with("HTTP/1.1") {
            assert!(line.contains("200"), "{line}");
        }
    }
    assert_eq!(events[0]["interface"], "braid0");
    assert_eq!(events[0]["history"].as_array().unwrap().len(), 2);
    assert_eq!(events[1]["sample"]["t"], 1_700_000_002_000u64);
    assert_eq!(events[1]["sample"]["c"][1]["id"], "1:10");
}

#[test]
fn publish_never_waits_for_the_worker() {
    let mut m = start(None);
    // The worker is held (as if busy): publish returns at once and retries soon after.
    let inbox = m.inbox.clone();
    let held = inbox.slot.lock().unwrap();
    let now = m.next_due();
    m.publish(now, real_snapshot(1000));
    assert_eq!(m.next_due(), now + RETRY);
    drop(held);
    m.publish(m.next_due(), real_snapshot(2000));
    assert_eq!(m.next_due(), now + RETRY + PERIOD);
}
