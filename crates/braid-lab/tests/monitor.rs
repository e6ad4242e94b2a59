//! The monitor of a running bond, in network namespaces: `/metrics` parsed by a
//! Prometheus parser while a TCP flow crosses the bond, the `/events` stream, and the
//! history file read back after a restart.
//!
//! Needs root (namespaces, TUN); skips with a message otherwise, unless
//! `BRAID_REQUIRE_NETNS=1`. The daemons' monitors listen on 127.0.0.1:9190 inside their
//! own namespace: nothing outside it can reach them.
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use braid_lab::netns::{self, Topology};
use braid_lab::run::Daemons;
use braid_lab::scenario::Scenario;

const BOND_B: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
const MONITOR: &str = "127.0.0.1:9190";

/// Two paths, side a with its monitor on and its history in `state`.
fn bring_up(state: &std::path::Path) -> Result<(Topology, Daemons)> {
    let topo = Topology::new(2)?;
    for i in 0..2 {
        topo.set_rate(i, 20_000_000)?;
    }
    let sc = Scenario::parse(
        "name = \"mon\"\n[bond]\n[[path]]\nname = \"p0\"\n[[path]]\nname = \"p1\"\n[[test]]\n",
    )?;
    let cfg_a = sc.daemon_config(true, &topo.links, None)?
        + &format!(
            "\n[monitor]\nlisten = \"{MONITOR}\"\nstate_dir = \"{}\"\n",
            state.display()
        );
    let cfg_b = sc.daemon_config(false, &topo.links, None)?;
    let mut d = Daemons::start(common::braid().as_path(), &topo, "mon", &cfg_a, &cfg_b)?;
    d.wait_paths_up(&["p0", "p1"], Duration::from_secs(15))?;
    Ok((topo, d))
}

/// GET `target` from the monitor in namespace `ns`: (status code, body).
fn get(ns: &str, target: &'static str) -> Result<(u16, String)> {
    let h = netns::spawn_in_netns(ns, move || -> Result<(u16, String)> {
        let mut c = TcpStream::connect(MONITOR).context("connect to the monitor")?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(c, "GET {target} HTTP/1.1\r\nHost: braid\r\n\r\n")?;
        let mut out = String::new();
        c.read_to_string(&mut out)?;
        let code = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((code, body))
    })?;
    h.join().map_err(|_| anyhow::anyhow!("client panicked"))?
}

/// The monitor's metrics, parsed; retried while the first snapshot is not out yet.
fn scrape(ns: &str) -> Result<prometheus_parse::Scrape> {
    for _ in 0..30 {
        let (code, body) = get(ns, "/metrics")?;
        if code == 200 {
            let lines = body.lines().map(|l| Ok(l.to_owned()));
            return Ok(prometheus_parse::Scrape::parse(lines)?);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    anyhow::bail!("no metrics within 6 s")
}

fn value(s: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .find(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map_or(f64::NAN, |x| match x.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
            _ => f64::NAN,
        })
}

/// The first `n` SSE `data:` payloads of `/events` in `ns`, connecting after `wait`.
fn events(
    ns: &str,
    n: usize,
    wait: Duration,
) -> Result<std::thread::JoinHandle<Result<Vec<serde_json::Value>>>> {
    netns::spawn_in_netns(ns, move || -> Result<Vec<serde_json::Value>> {
        std::thread::sleep(wait);
        let mut c = TcpStream::connect(MONITOR)?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        c.write_all(b"GET /events HTTP/1.1\r\nHost: braid\r\n\r\n")?;
        let mut r = BufReader::new(c);
        let mut out = Vec::new();
        let mut line = String::new();
        while out.len() < n {
            line.clear();
            if r.read_line(&mut line)? == 0 {
                anyhow::bail!("the stream ended");
            }
            if let Some(d) = line.strip_prefix("data: ") {
                out.push(serde_json::from_str(d)?);
            }
        }
        Ok(out)
    })
}

#[test]
fn metrics_events_and_history_of_a_running_bond() {
    let Some(_lock) = common::netns_or_skip("metrics_events_and_history_of_a_running_bond") else {
        return;
    };
    let state = common::scratch("monitor-state");
    let (topo, mut d) = bring_up(&state).unwrap();
    let ns_a = topo.ns_a.clone();
    // The snapshot is at most a second old: wait for one taken with both paths up.
    let mut before = scrape(&ns_a).unwrap();
    for _ in 0..20 {
        let up = |p| value(&before, "braid_path_state", &[("path", p), ("state", "up")]);
        if up("p0") == 1.0 && up("p1") == 1.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        before = scrape(&ns_a).unwrap();
    }
    for p in ["p0", "p1"] {
        assert_eq!(
            value(&before, "braid_path_state", &[("path", p), ("state", "up")]),
            1.0
        );
        assert!(value(&before, "braid_path_srtt_seconds", &[("path", p)]) > 0.0);
    }
    // A TCP flow through the bond while the page's stream is open.
    let stream = events(&ns_a, 3, Duration::from_millis(1500)).unwrap();
    let (sent, got) = common::tcp_flow(
        &topo,
        BOND_B,
        5001,
        4.0,
        64 << 20,
        Arc::new(AtomicU64::new(0)),
    )
    .unwrap();
    let ev = stream
        .join()
        .map_err(|_| anyhow::anyhow!("client panicked"))
        .unwrap()
        .unwrap();
    assert_eq!(sent, got);
    assert_eq!(ev[0]["interface"], "braid0");
    assert!(!ev[0]["history"].as_array().unwrap().is_empty());
    let tx: f64 = ev[2]["sample"]["p"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tx"].as_f64().unwrap())
        .sum();
    assert!(
        tx > 1e6,
        "the stream's sample shows the flow: {tx} bit/s, {}",
        ev[2]
    );
    // The next snapshot is taken after the flow's end.
    std::thread::sleep(Duration::from_millis(1200));
    let after = scrape(&ns_a).unwrap();
    let bytes = |s: &prometheus_parse::Scrape| {
        value(s, "braid_path_tx_bytes_total", &[("path", "p0")])
            + value(s, "braid_path_tx_bytes_total", &[("path", "p1")])
    };
    assert!(
        bytes(&after) - bytes(&before) >= sent as f64,
        "tx bytes grew by {} for {sent} sent",
        bytes(&after) - bytes(&before)
    );
    // Stopped and started again: the history file brings the graphs back.
    d.stop_side(true, libc::SIGTERM, Duration::from_secs(5))
        .unwrap();
    let file = state.join("braid0.history");
    let lines = std::fs::read_to_string(&file).unwrap().lines().count();
    assert!(lines >= 1, "{} has {lines} lines", file.display());
    d.start_side(true).unwrap();
    d.wait_paths_up(&["p0", "p1"], Duration::from_secs(15))
        .unwrap();
    let (code, body) = get(&ns_a, "/api/history?range=long").unwrap();
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let samples = v["samples"].as_array().unwrap();
    assert!(
        samples.len() >= lines,
        "{} samples after the restart",
        samples.len()
    );
    let peak: f64 = samples
        .iter()
        .map(|s| {
            s["p"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["tx"].as_f64().unwrap())
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    assert!(
        peak > 1e5,
        "the flow is in the history read back: {peak} bit/s"
    );
    // The daemon writes its history as it stops: stop it before removing its directory.
    drop(d);
    let _ = std::fs::remove_dir_all(&state);
}
