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
use crate::lab::netns::{self, now, Topology};
use crate::lab::run::Daemons;

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
                ctx.daemons.side(side == Side::A).signal(libc::SIGHUP)?;
                rec.reloaded = Some(side);
                netns::sleep(Duration::from_millis(500))?;
                if let Some(st) = ctx.daemons.side(side == Side::A).exited() {
                    rec.failures.push(format!(
                        "daemon {} exited ({st}) on SIGHUP instead of reloading",
                        side.name()
                    ));
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
            buf[0] = 2;
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
    for _ in 0..(crate::control::MAX_CLIENTS + 8) {
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
            assert_eq!(buf[0], 2);
            if n > 1 {
                assert_eq!(buf[1], 1);
            }
            let n = junk_datagram(&mut rng, JunkShape::Data, &mut buf);
            assert!(buf[0] == 1 && (n == 1 || buf[1] == 0));
        }
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
