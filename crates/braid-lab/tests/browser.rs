//! The dashboard in a real browser: headless Chromium (Debian's `chromium`, installed by
//! `scripts/setup --test`) loads the page of a running bond in its namespace while a TCP
//! flow crosses the bond; the DOM it built from the live `/events` stream is checked twice
//! (the charts have points, the figures change with the traffic), and a screenshot is
//! saved as `target/lab/monitor-dashboard.png` (a CI artifact).
//!
//! Needs root (namespaces, TUN) and Chromium; skips with a message otherwise, unless
//! `BRAID_REQUIRE_NETNS=1`.
mod common;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use braid_lab::netns::Topology;
use braid_lab::run::Daemons;
use braid_lab::scenario::Scenario;

const BOND_B: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
const PAGE: &str = "http://127.0.0.1:9190/?samples=3";

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|n| braid_lab::netns::which(n))
}

/// Chromium in namespace `ns`, headless, with `args` and the page; its stdout.
fn run_chromium(bin: &Path, ns: &str, profile: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("timeout")
        .args(["-k", "5", "25", "ip", "netns", "exec", ns])
        .arg(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,1700",
            // The page keeps its event stream open: give it 3.5 s of its own time.
            "--virtual-time-budget=3500",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(PAGE)
        .output()
        .context("running chromium")?;
    anyhow::ensure!(
        out.status.success(),
        "chromium failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `name="value"` of the first element whose opening tag contains `marker`.
fn attr(dom: &str, marker: &str, name: &str) -> Option<String> {
    let at = dom.find(marker)?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    let tag = &dom[start..end];
    let key = format!("{name}=\"");
    let v = tag.find(&key)? + key.len();
    Some(tag[v..].split('"').next()?.to_owned())
}

#[test]
fn the_dashboard_draws_live_figures_in_chromium() {
    let Some(_lock) = common::netns_or_skip("the_dashboard_draws_live_figures_in_chromium") else {
        return;
    };
    let Some(bin) = chromium() else {
        common::runs(
            "the_dashboard_draws_live_figures_in_chromium",
            "chromium (scripts/setup --test installs it)",
            Some("chromium not found"),
        );
        return;
    };
    let topo = Topology::new(2).unwrap();
    for i in 0..2 {
        topo.set_rate(i, 20_000_000).unwrap();
    }
    let sc = Scenario::parse(
        "name = \"page\"\n[bond]\n[[path]]\nname = \"p0\"\n[[path]]\nname = \"p1\"\n[[test]]\n",
    )
    .unwrap();
    let cfg_a = sc.daemon_config(true, &topo.links, None).unwrap()
        + "\n[monitor]\nlisten = \"127.0.0.1:9190\"\nhistory = false\n";
    let cfg_b = sc.daemon_config(false, &topo.links, None).unwrap();
    let mut d = Daemons::start(common::braid().as_path(), &topo, "page", &cfg_a, &cfg_b).unwrap();
    d.wait_paths_up(&["p0", "p1"], Duration::from_secs(15))
        .unwrap();
    let profile = topo.file("chromium-profile");
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/lab");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join("monitor-dashboard.png");
    let _ = std::fs::remove_file(&shot);
    // Traffic for as long as the browser takes (each load may take many seconds on a
    // loaded machine): 2 s flows one after the other until the last load is done.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (doms, flow) = std::thread::scope(|s| {
        let flow = s.spawn(|| -> Result<(u64, u64)> {
            let (mut sent, mut got) = (0, 0);
            for port in 5001..5100 {
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let (a, b) = common::tcp_flow(
                    &topo,
                    BOND_B,
                    port,
                    2.0,
                    1 << 40,
                    Arc::new(AtomicU64::new(0)),
                )?;
                sent += a;
                got += b;
            }
            Ok((sent, got))
        });
        std::thread::sleep(Duration::from_secs(2));
        let first = run_chromium(&bin, &topo.ns_a, &profile, &["--dump-dom"]);
        let second = run_chromium(&bin, &topo.ns_a, &profile, &["--dump-dom"]);
        let shot_arg = format!("--screenshot={}", shot.display());
        let third = run_chromium(&bin, &topo.ns_a, &profile, &[&shot_arg]);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        ((first, second, third), flow.join())
    });
    let (first, second, third) = doms;
    let first = first.unwrap();
    let second = second.unwrap();
    third.unwrap();
    let (sent, got) = flow.expect("flow thread").unwrap();
    assert_eq!(sent, got);
    for dom in [&first, &second] {
        assert_eq!(
            attr(dom, "<body", "data-state").as_deref(),
            Some("closed"),
            "three samples came: {dom}"
        );
        let points: usize = attr(dom, "id=\"c-tput\"", "data-points")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(points >= 2, "the throughput chart has {points} points");
        let total: f64 = attr(dom, "id=\"c-tput\"", "data-total")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        assert!(total > 1e6, "the page shows the flow: {total} bit/s");
        for id in ["c-rtt", "c-loss", "c-jit", "c-queue"] {
            let p: usize = attr(dom, &format!("id=\"{id}\""), "data-points")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            assert!(p >= 2, "{id} has {p} points");
        }
        assert!(
            dom.contains("class=\"state-up\">up<"),
            "the path table shows paths up"
        );
    }
    // The second load saw more of the flow: more samples, other figures.
    let samples = |dom: &str| -> usize {
        attr(dom, "<body", "data-samples")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    assert!(
        samples(&second) > samples(&first),
        "{} then {} samples",
        samples(&first),
        samples(&second)
    );
    // ...and other figures: the latest sample's total (bit/s, as drawn) moved with the flow.
    let total = |dom: &str| attr(dom, "id=\"c-tput\"", "data-total");
    assert_ne!(total(&first), total(&second), "the figures changed");
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "{} is {size} bytes", shot.display());
    eprintln!("screenshot: {}", shot.display());
}
