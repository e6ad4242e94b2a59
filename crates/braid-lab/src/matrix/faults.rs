//! Injecting one fault: a path flap, a restart of one end, a reload, a control-socket
//! flood or junk datagrams on a path port. Each runs to its end (a flap's link is back up,
//! a restarted daemon has been started again, a flood has stopped) before it returns, and
//! says what it did and when.
use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use super::case::{FaultKind, JunkShape, Rng, Side};
use crate::netns::{self, now, Topology};
use crate::run::Daemons;

/// What a fault did.
#[derive(Clone, Debug)]
pub struct Injected {
    /// Kind name (`flap`, `restart-term`, ...).
    pub kind: &'static str,
    /// What exactly.
    pub what: String,
    /// When it started, ms since the case's clock started.
    pub start_ms: f64,
    /// When it was over (link up, daemon started again, flood stopped), ms.
    pub end_ms: f64,
    /// The side restarted, if it was a restart.
    pub restarted: Option<Side>,
    /// The side sent SIGHUP, if it was a reload that was injected.
    pub reloaded: Option<Side>,
    /// True when it was not injected (a reload while reload faults are off).
    pub skipped: bool,
    /// Invariants it broke on the spot (a SIGTERM'd daemon that did not exit 0, junk
    /// that no counter saw, ...).
    pub failures: Vec<String>,
    /// Datagrams or requests it sent (junk, flood).
    pub sent: u64,
}

/// What injecting needs.
pub struct Ctx<'a> {
    /// The namespaces.
    pub topo: &'a Topology,
    /// The daemons.
    pub daemons: &'a mut Daemons,
    /// The case's clock.
    pub t0: Instant,
    /// Inject reload faults (else they are skipped).
    pub reload: bool,
    /// For junk contents.
    pub rng: &'a mut Rng,
}

impl Ctx<'_> {
    fn ms(&self) -> f64 {
        now().duration_since(self.t0).as_secs_f64() * 1000.0
    }
}

/// Inject `kind` now; returns when it is over.
pub fn inject(ctx: &mut Ctx<'_>, kind: &FaultKind) -> Result<Injected> {
    let mut rec = Injected {
        kind: kind.name(),
        what: kind.to_string(),
        start_ms: ctx.ms(),
        end_ms: 0.0,
        restarted: None,
        reloaded: None,
        skipped: false,
        failures: Vec::new(),
        sent: 0,
    };
    match *kind {
        FaultKind::Flap { path, down_ms } => {
            ctx.topo.set_link(path, false)?;
            let slept = netns::sleep(Duration::from_millis(down_ms));
            // Up again even when interrupted.
            ctx.topo.set_link(path, true)?;
            slept?;
        }
        FaultKind::Restart {
            side,
            kill,
            down_ms,
        } => {
            let a = side == Side::A;
            let sig = if kill { libc::SIGKILL } else { libc::SIGTERM };
            let st = ctx.daemons.stop_side(a, sig, Duration::from_secs(5))?;
            if !kill && !st.success() {
                rec.failures.push(format!(
                    "daemon {} exited with {st} after SIGTERM (expected 0)",
                    side.name()
                ));
            }
            netns::sleep(Duration::from_millis(down_ms))?;
            ctx.daemons.start_side(a)?;
            rec.restarted = Some(side);
        }
        FaultKind::Reload { side } => {
            if ctx.reload {
                let a = side == Side::A;
                // Every other reload of a side changes its config (each path's bps, the
                // probe interval); the next one changes it back.
                let file = ctx.daemons.config_file(a).to_path_buf();
                let now_text = std::fs::read_to_string(&file)?;
                let next = match changed_config(&now_text)? {
                    Some(changed) => changed,
                    None => original_config(&now_text)?,
                };
                std::fs::write(&file, &next)?;
                rec.what += if next.contains(CHANGED_MARK) {
                    " (config changed: each path's bps, probe_interval_ms)"
                } else {
                    " (config changed back)"
                };
                ctx.daemons.side(a).signal(libc::SIGHUP)?;
                rec.reloaded = Some(side);
                netns::sleep(Duration::from_millis(500))?;
                if let Some(st) = ctx.daemons.side(a).exited() {
                    rec.failures.push(format!(
                        "daemon {} exited ({st}) on SIGHUP instead of reloading",
                        side.name()
                    ));
                } else {
                    let status = if a {
                        ctx.daemons.status_a()
                    } else {
                        ctx.daemons.status_b()
                    };
                    match status {
                        Ok(v) => rec.failures.extend(reload_applied(&next, &v)),
                        Err(e) => rec
                            .failures
                            .push(format!("braid status after the reload failed: {e:#}")),
                    }
                }
            } else {
                rec.skipped = true;
            }
        }
        FaultKind::ControlFlood { side, ms } => {
            let sock = if side == Side::A {
                ctx.daemons.sock_a.clone()
            } else {
                ctx.daemons.sock_b.clone()
            };
            rec.sent = control_flood(&sock, Duration::from_millis(ms))?;
        }
        FaultKind::Junk {
            side,
            path,
            pps,
            ms,
            shape,
        } => {
            let before = drops(ctx.daemons, side);
            let link = ctx
                .topo
                .links
                .get(path)
                .ok_or_else(|| anyhow!("no path {path}"))?;
            // From the other end's namespace, from another port than braid's.
            let (ns, src, dst) = match side {
                Side::A => (&ctx.topo.ns_b, link.addr_b, link.addr_a),
                Side::B => (&ctx.topo.ns_a, link.addr_a, link.addr_b),
            };
            let seed = ctx.rng.next_u64();
            let h = netns::spawn_in_netns(ns, move || {
                junk(
                    SocketAddrV4::new(src, 0),
                    SocketAddrV4::new(dst, 7000),
                    pps,
                    Duration::from_millis(ms),
                    shape,
                    seed,
                )
            })?;
            rec.sent = h.join().map_err(|_| anyhow!("junk sender panicked"))??;
            // Give the daemon a moment to read what is queued.
            netns::sleep(Duration::from_millis(200))?;
            let after = drops(ctx.daemons, side);
            match (before, after) {
                (Some(b), Some(a)) if rec.sent > 0 && a <= b => rec.failures.push(format!(
                    "{} junk datagrams sent to {}'s p{path}, but none of its drop counters grew",
                    rec.sent,
                    side.name()
                )),
                (_, None) => rec.failures.push(format!(
                    "braid status on {} failed after the junk",
                    side.name()
                )),
                _ => {}
            }
        }
    }
    rec.end_ms = ctx.ms();
    Ok(rec)
}

/// The probe interval a changed config asks for (it marks the config as changed).
const CHANGED_PROBE_MS: i64 = 150;
/// How a changed config says so.
const CHANGED_MARK: &str = "probe_interval_ms = 150";

/// A daemon config (as the lab writes it) with every path's `bps` at 80 % of its
/// emulated rate and `probe_interval_ms` at 150; None if it is already the changed one.
pub fn changed_config(text: &str) -> Result<Option<String>> {
    let mut t: toml::Table = toml::from_str(text)?;
    let bond = t
        .get_mut("bond")
        .and_then(toml::Value::as_table_mut)
        .ok_or_else(|| anyhow!("config has no [bond]"))?;
    if bond.contains_key("probe_interval_ms") {
        return Ok(None);
    }
    bond.insert(
        "probe_interval_ms".into(),
        toml::Value::Integer(CHANGED_PROBE_MS),
    );
    // The original values go beside, as comments, to change them back.
    let mut out = String::new();
    for p in paths_mut(&mut t) {
        let rate = p
            .get("emulate")
            .and_then(|e| e.get("rate_bps"))
            .and_then(toml::Value::as_integer)
            .unwrap_or(10_000_000);
        let orig = p.get("bps").and_then(toml::Value::as_integer).unwrap_or(0);
        let name = p.get("name").and_then(toml::Value::as_str).unwrap_or("?");
        out += &format!("# original bps of {name}: {orig}\n");
        p.insert("bps".into(), toml::Value::Integer(rate / 10 * 8));
    }
    Ok(Some(out + &toml::to_string(&t)?))
}

/// The config [`changed_config`] was made from.
pub fn original_config(text: &str) -> Result<String> {
    let mut orig = std::collections::HashMap::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# original bps of ") {
            if let Some((name, v)) = rest.split_once(": ") {
                orig.insert(name.to_string(), v.trim().parse::<i64>().unwrap_or(0));
            }
        }
    }
    let mut t: toml::Table = toml::from_str(text)?;
    if let Some(b) = t.get_mut("bond").and_then(toml::Value::as_table_mut) {
        b.remove("probe_interval_ms");
    }
    for p in paths_mut(&mut t) {
        let name = p
            .get("name")
            .and_then(toml::Value::as_str)
            .unwrap_or("")
            .to_string();
        match orig.get(&name) {
            Some(&v) if v > 0 => {
                p.insert("bps".into(), toml::Value::Integer(v));
            }
            _ => {
                p.remove("bps");
            }
        }
    }
    Ok(toml::to_string(&t)?)
}

fn paths_mut(t: &mut toml::Table) -> impl Iterator<Item = &mut toml::Table> {
    t.get_mut("path")
        .and_then(toml::Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(toml::Value::as_table_mut)
}

/// What a status shows that the config `text` (just reloaded) says otherwise: each path's
/// `bps`.
pub fn reload_applied(text: &str, status: &Value) -> Vec<String> {
    let Ok(t) = toml::from_str::<toml::Table>(text) else {
        return vec!["the reloaded config does not parse".into()];
    };
    let want: Vec<(String, u64)> = t
        .get("path")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p.get("name")
                    .and_then(toml::Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                p.get("bps")
                    .and_then(toml::Value::as_integer)
                    .and_then(|v| u64::try_from(v).ok())
                    .unwrap_or(0),
            )
        })
        .collect();
    let mut out = Vec::new();
    for p in status["status"]["paths"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or("");
        let got = p["bps"].as_u64().unwrap_or(0);
        if let Some((_, w)) = want.iter().find(|w| w.0 == name) {
            if *w != got {
                out.push(format!(
                    "after the reload path {name} has bps {got}, the config says {w}"
                ));
            }
        }
    }
    out
}

/// The sum of a daemon's counters of datagrams it dropped as bad (bond, sealer, unknown
/// sources), or None if `status` fails.
fn drops(d: &Daemons, side: Side) -> Option<u64> {
    let v = match side {
        Side::A => d.status_a(),
        Side::B => d.status_b(),
    }
    .ok()?;
    Some(drop_sum(&v))
}

/// Bad-datagram counters of a status: the bond's `bad_datagram` and `unknown_path`, the
/// sealer's rejections, and its counters of dropped datagrams.
pub fn drop_sum(v: &Value) -> u64 {
    let n = |x: &Value| x.as_u64().unwrap_or(0);
    let st = &v["status"]["counters"];
    let enc = &v["encryption"];
    let mut sum = n(&st["bad_datagram"]) + n(&st["unknown_path"]);
    sum += n(&enc["rejected_total"]);
    if let Some(c) = enc["counters"].as_object() {
        sum += c
            .iter()
            .filter(|(k, _)| k.as_str() != "keepalives_received" && k.as_str() != "roamed")
            .map(|(_, x)| n(x))
            .sum::<u64>();
    }
    sum
}

/// Send junk datagrams at `pps` for `span`; how many were sent (send errors, as while a
/// link is down, are not counted).
pub fn junk(
    from: SocketAddrV4,
    to: SocketAddrV4,
    pps: u64,
    span: Duration,
    shape: JunkShape,
    seed: u64,
) -> Result<u64> {
    let sock = UdpSocket::bind(from).with_context(|| format!("binding {from} for junk"))?;
    let to = SocketAddr::V4(to);
    let mut rng = Rng::new(seed);
    let mut buf = [0u8; 1400];
    let start = now();
    let total = pps.saturating_mul(span.as_millis() as u64) / 1000;
    let mut sent = 0u64;
    for k in 0..total {
        netns::check_interrupted()?;
        // Paced: datagram k leaves at k / pps.
        let due = start + Duration::from_micros(k.saturating_mul(1_000_000) / pps.max(1));
        let t = now();
        if due > t {
            std::thread::sleep(due - t);
        }
        let len = junk_datagram(&mut rng, shape, &mut buf);
        if sock.send_to(&buf[..len], to).is_ok() {
            sent += 1;
        }
    }
    Ok(sent)
}

/// One junk datagram of `shape` in `buf`; its length.
fn junk_datagram(rng: &mut Rng, shape: JunkShape, buf: &mut [u8; 1400]) -> usize {
    let len = match rng.range(0, 3) {
        0 => rng.range(1, 8) as usize,
        1 => rng.range(20, 160) as usize,
        _ => rng.range(1, buf.len() as u64) as usize,
    };
    for b in buf[..len].iter_mut() {
        *b = rng.next_u64() as u8;
    }
    match shape {
        JunkShape::Random => {}
        JunkShape::Handshake => {
            buf[0] = braid_core::wire::SEALED_VERSION;
            if len > 1 {
                buf[1] = 1;
            }
        }
        JunkShape::Data => {
            buf[0] = 1;
            if len > 1 {
                buf[1] = 0;
            }
        }
    }
    len
}

/// Hold more idle connections than the daemon serves and, meanwhile, open connection after
/// connection sending garbage and status requests, for `span`; requests made. Every
/// connection is closed when it returns.
fn control_flood(sock: &Path, span: Duration) -> Result<u64> {
    let mut idle = Vec::new();
    for _ in 0..(braid::control::MAX_CLIENTS + 8) {
        if let Ok(c) = UnixStream::connect(sock) {
            idle.push(c);
        }
    }
    let end = now() + span;
    let mut requests = 0u64;
    let lines: [&[u8]; 4] = [
        b"{\"cmd\":\"status\"}\n",
        b"not json at all\n",
        b"{\"cmd\":\"no-such-command\"}\n",
        b"{\"cmd\":\n",
    ];
    while now() < end {
        netns::check_interrupted()?;
        if let Ok(mut c) = UnixStream::connect(sock) {
            let _ = c.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = c.set_read_timeout(Some(Duration::from_millis(20)));
            let _ = c.write_all(lines[(requests % 4) as usize]);
            let _ = c.read(&mut [0u8; 256]);
            requests += 1;
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    drop(idle);
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junk_shapes_start_as_drawn() {
        let mut rng = Rng::new(1);
        let mut buf = [0u8; 1400];
        for _ in 0..200 {
            let n = junk_datagram(&mut rng, JunkShape::Handshake, &mut buf);
            assert!((1..=1400).contains(&n));
            assert_eq!(buf[0], braid_core::wire::SEALED_VERSION);
            if n > 1 {
                assert_eq!(buf[1], 1);
            }
            let n = junk_datagram(&mut rng, JunkShape::Data, &mut buf);
            assert!(buf[0] == 1 && (n == 1 || buf[1] == 0));
        }
    }

    #[test]
    fn reload_configs_change_and_change_back() {
        let c = super::super::case::Case::draw(58);
        let links: Vec<crate::netns::Link> = (0..4)
            .map(|i| crate::netns::Link {
                index: i,
                dev_a: format!("a{i}"),
                dev_b: format!("b{i}"),
                addr_a: std::net::Ipv4Addr::new(10, 201, i as u8, 1),
                addr_b: std::net::Ipv4Addr::new(10, 201, i as u8, 2),
            })
            .collect();
        let (a, _) = c.configs(&links).unwrap();
        let changed = changed_config(&a).unwrap().expect("changes the original");
        assert!(changed.contains(CHANGED_MARK), "{changed}");
        assert!(
            changed_config(&changed).unwrap().is_none(),
            "already changed"
        );
        let cfg = braid::config::Config::parse(&changed, "x.toml").unwrap();
        for (p, d) in cfg.paths.iter().zip(&c.paths) {
            assert_eq!(p.bps, d.rate_bps / 10 * 8, "{changed}");
        }
        let back = original_config(&changed).unwrap();
        let (x, y): (toml::Table, toml::Table) =
            (toml::from_str(&a).unwrap(), toml::from_str(&back).unwrap());
        assert_eq!(x, y, "changed back to the original");
        // What status must show after each.
        let status = |bps: Vec<u64>| {
            serde_json::json!({"status": {"paths": bps.iter().enumerate()
                .map(|(i, b)| serde_json::json!({"name": format!("p{i}"), "bps": b}))
                .collect::<Vec<_>>()}})
        };
        let want: Vec<u64> = c.paths.iter().map(|p| p.rate_bps / 10 * 8).collect();
        assert!(reload_applied(&changed, &status(want.clone())).is_empty());
        assert_eq!(reload_applied(&back, &status(want)).len(), c.paths.len());
    }

    #[test]
    fn drop_sum_adds_the_bad_datagram_counters() {
        let v = serde_json::json!({
            "status": {"counters": {"bad_datagram": 2, "unknown_path": 1, "tun_rx": 50}},
            "encryption": {"rejected_total": 4,
                "counters": {"handshake_flood_dropped": 8, "keepalives_received": 100, "roamed": 3, "unknown_source": 16}}
        });
        assert_eq!(drop_sum(&v), 2 + 1 + 4 + 8 + 16);
        assert_eq!(drop_sum(&serde_json::json!({})), 0);
    }
}
