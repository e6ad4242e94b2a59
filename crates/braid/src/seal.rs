//! The program's side of sealing: the [`SealConfig`] a config file makes (keys, a random
//! seed and tag, the replay window sized from the bond), and the `encryption` object of
//! `braid status` and its text line. The sealing itself is the core's
//! ([`braid_core::Sealer`]).

use std::time::Duration;

use braid_core::crypto::{Cipher, OsRng, PrivateKey, Rejected, ReplayWindow, TunnelConfig};
pub use braid_core::udp_overhead;
use braid_core::Instant;
use braid_core::{SealConfig, Sealer, Sealing};
use rand_core::RngCore;
use serde_json::{json, Map, Value};

use crate::config::{Config, Encryption};

/// Smallest replay window, in packets: 65 536 (0.7 s at 1 Gbit/s of 1400-byte datagrams).
pub const MIN_REPLAY_WINDOW: usize = 65536;

/// The packet size the window is sized for: small packets make the most packets per
/// second at a given rate.
const SIZING_PACKET_BYTES: u64 = 256;

/// The rate the window is sized for when no path has a configured `bps`.
const DEFAULT_SIZING_BPS: u64 = 1_000_000_000;

/// The replay window for a bond: the packets that can arrive in `max(reorder_max, 200 ms)`
/// at the sum of the paths' configured rates (1 Gbit/s when none is configured) in
/// 256-byte packets, and at least [`MIN_REPLAY_WINDOW`]. A datagram further behind than
/// the reorder buffer waits is useless anyway; the 200 ms floor covers paths whose delays
/// differ more than the reorder buffer's default allows.
pub fn replay_window_bits(cfg: &Config) -> usize {
    let bps: u64 = cfg.paths.iter().map(|p| p.bps).sum();
    let bps = if bps == 0 { DEFAULT_SIZING_BPS } else { bps };
    let spread = cfg.bond.core.reorder_max.max(Duration::from_millis(200));
    let pps = ReplayWindow::packet_rate(bps, SIZING_PACKET_BYTES);
    ReplayWindow::bits_for(pps, spread).max(MIN_REPLAY_WINDOW)
}

/// The sealing of `cfg`'s bond, started at `now`: keys (with 32 random bytes from the OS
/// as the tunnel's seed and the wall clock as its timestamps' base) or plain tags (a
/// random tag for this run), and the roaming dead time from the bond's health settings.
pub fn seal_config(cfg: &Config, now: Instant) -> SealConfig {
    let sealing = match &cfg.bond.encryption {
        Encryption::None => Sealing::None,
        Encryption::Keys(k) => {
            // 32 random bytes from the OS (a fresh key is exactly that, clamped).
            let seed = *PrivateKey::generate(&mut OsRng).as_bytes();
            let mut tc = TunnelConfig::new(k.private_key.clone(), k.peer_public_key, seed);
            tc.preshared_key = k.preshared_key.clone();
            tc.cipher = k.cipher;
            tc.replay_window_bits = replay_window_bits(cfg);
            tc.unix_micros_at_zero = unix_micros().saturating_sub(now.as_micros());
            Sealing::Keys {
                tunnel: Box::new(tc),
                rekey_every: k.rekey_after,
            }
        }
    };
    let h = &cfg.bond.core.health;
    SealConfig {
        sealing,
        plain_tag: OsRng.next_u64(),
        roam_quiet: h.probe_interval.saturating_mul(h.down_after.max(1)),
    }
}

/// The `encryption` object of `braid status --json`: whether sealing is on, the session,
/// the replay window, and every counter by name (each [`Rejected`] reason in `rejected`).
pub fn status_json(sealer: &Sealer, now: Instant) -> Value {
    let Some(t) = sealer.tunnel() else {
        return json!({
            "enabled": false,
            "counters": sealer.counters(),
            "tags": sealer.tag_counters(),
        });
    };
    let c = t.counters();
    let rejected: Map<String, Value> = Rejected::ALL
        .iter()
        .map(|r| (r.name().to_string(), json!(c.rejected(*r))))
        .collect();
    let events: Map<String, Value> = c
        .iter()
        .skip(Rejected::ALL.len())
        .map(|(n, v)| (n.to_string(), json!(v)))
        .collect();
    json!({
        "enabled": true,
        "public_key": t.local_public_key().to_base64(),
        "peer_public_key": t.peer_public_key().to_base64(),
        "established": t.is_established(now),
        "session": t.current_session(now).map(|s| s.0),
        "cipher": t.cipher().name(),
        "peer_cipher": t.peer_cipher().map(Cipher::name),
        "replay_window": t.replay_window_bits(),
        "rejected": rejected,
        "rejected_total": c.rejected_total(),
        "events": events,
        "counters": sealer.counters(),
    })
}

/// The text status line(s) of the `encryption` object of [`status_json`]: the
/// session state, and every non-zero drop counter by name.
pub fn render_status(e: &Value) -> String {
    let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let c = e.get("counters").unwrap_or(&Value::Null);
    if e.get("enabled") != Some(&Value::Bool(true)) {
        let t = e.get("tags").unwrap_or(&Value::Null);
        return format!(
            "encryption: NONE; dropped: unknown source {}, wrong tag {}, malformed {}; tag hints sent {}, peer tag changes {}\n",
            n(c, "unknown_source"),
            n(t, "wrong_tag"),
            n(t, "malformed"),
            n(t, "hints_sent"),
            n(t, "peer_tag_changes"),
        );
    }
    let ev = e.get("events").unwrap_or(&Value::Null);
    let drops: Vec<String> = e
        .get("rejected")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                // Shown as "handshake flood" below.
                .filter(|(k, v)| v.as_u64().unwrap_or(0) > 0 && *k != "handshake_flood_dropped")
                .map(|(k, v)| format!("{k} {v}"))
                .collect()
        })
        .unwrap_or_default();
    let handshake = match e.get("latest_handshake_age_us").and_then(Value::as_u64) {
        Some(us) => format!(", latest handshake {}", age(us)),
        None if e.get("latest_handshake_age_us").is_some() => ", no handshake yet".to_owned(),
        None => String::new(),
    };
    let cipher = match (
        e.get("cipher").and_then(Value::as_str),
        e.get("peer_cipher").and_then(Value::as_str),
    ) {
        (Some(ours), Some(theirs)) => format!(" ({ours}, peer {theirs})"),
        (Some(ours), None) => format!(" ({ours})"),
        _ => String::new(),
    };
    format!(
        "encryption: {}{cipher}{handshake}, window {}; sealed {}, opened {}, sessions {}, roamed {}, no session {}, unknown source {}, handshake flood {}; rejected: {}\n",
        if e.get("established") == Some(&Value::Bool(true)) {
            "session up"
        } else {
            "NO SESSION (handshaking)"
        },
        n(e, "replay_window"),
        n(ev, "sealed"),
        n(ev, "opened"),
        n(ev, "sessions_created"),
        n(c, "roamed"),
        n(c, "no_session_dropped"),
        n(c, "unknown_source"),
        n(c, "handshake_flood_dropped"),
        if drops.is_empty() {
            "none".to_string()
        } else {
            drops.join(", ")
        }
    )
}

/// `12 s ago`, `3 min 5 s ago`, `2 h 10 min ago`, as `wg show`'s "latest handshake".
pub fn age(us: u64) -> String {
    let s = us / 1_000_000;
    match s {
        0..120 => format!("{s} s ago"),
        120..7200 => format!("{} min {} s ago", s / 60, s % 60),
        _ => format!("{} h {} min ago", s / 3600, (s / 60) % 60),
    }
}

/// Wall-clock time in µs since 1970 (handshake timestamps must grow across restarts).
fn unix_micros() -> u64 {
    #[expect(clippy::disallowed_methods, reason = "the handshake's wall-clock base")]
    let t = std::time::SystemTime::now();
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(enc: &str) -> Config {
        let text = format!(
            "[bond]\naddress = \"10.200.0.1/30\"\n{enc}\n[[path]]\nname = \"p0\"\nlocal = \"127.0.0.1:7000\"\nremote = \"127.0.0.1:7001\"\n"
        );
        Config::parse(&text, "t.toml").unwrap()
    }

    /// The status object of a sealer with a session, and its text line.
    #[test]
    fn a_session_reads_as_numbers_and_one_line() {
        let (ka, kb) = (
            PrivateKey::generate(&mut OsRng),
            PrivateKey::generate(&mut OsRng),
        );
        let keyed = |mine: &PrivateKey, peer: &PrivateKey| {
            config(&format!(
                "private_key = \"{}\"\npeer_public_key = \"{}\"",
                mine.to_base64(),
                peer.public_key().to_base64()
            ))
        };
        let now = Instant::ZERO;
        let mut a = Sealer::new(seal_config(&keyed(&ka, &kb), now), now);
        let mut b = Sealer::new(seal_config(&keyed(&kb, &ka), now), now);
        let src: std::net::SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let mut remote = Some(src);
        let mut roam = braid_core::Roaming::default();
        let mut buf = vec![0u8; 2048];
        // A's initiation, B's response, A's keepalive.
        let n = a.poll_transmit(now, &mut buf).expect("an initiation");
        let mut d = buf[..n].to_vec();
        let braid_core::Incoming::Reply(r) = b.incoming(now, &mut remote, &mut roam, src, &mut d)
        else {
            panic!("no response");
        };
        let mut r = r.to_vec();
        let _ = a.incoming(now, &mut remote, &mut roam, src, &mut r);
        let n = a.poll_transmit(now, &mut buf).expect("a keepalive");
        let mut d = buf[..n].to_vec();
        let _ = b.incoming(now, &mut remote, &mut roam, src, &mut d);
        let mut again = d.clone();
        let _ = b.incoming(now, &mut remote, &mut roam, src, &mut again);
        let mut st = status_json(&b, now);
        assert!(st["session"].is_u64(), "a number, not Rust text: {st}");
        assert_eq!(st["established"], true);
        assert_eq!(st["replay_window"], 131_072);
        // Both ends seal with this CPU's choice; b has opened a's keepalive.
        let c = Cipher::preferred().name();
        assert_eq!((&st["cipher"], &st["peer_cipher"]), (&c.into(), &c.into()));
        let line = render_status(&st);
        assert!(
            line.starts_with(&format!(
                "encryption: session up ({c}, peer {c}), window 131072"
            )),
            "{line}"
        );
        st["latest_handshake_age_us"] = 12_300_000.into();
        st["peer_cipher"] = Value::Null;
        let line = render_status(&st);
        assert!(
            line.starts_with(&format!(
                "encryption: session up ({c}), latest handshake 12 s ago, window"
            )),
            "{line}"
        );
        let plain = Sealer::new(seal_config(&config("encryption = \"none\""), now), now);
        let line = render_status(&status_json(&plain, now));
        assert!(
            line.starts_with("encryption: NONE; dropped: unknown source 0"),
            "{line}"
        );
    }

    #[test]
    fn handshake_ages_read_as_wg_show() {
        assert_eq!(age(0), "0 s ago");
        assert_eq!(age(119_999_999), "119 s ago");
        assert_eq!(age(185_000_000), "3 min 5 s ago");
        assert_eq!(age(7_800_000_000), "2 h 10 min ago");
    }

    #[test]
    fn window_is_sized_from_the_bond() {
        let c = config("encryption = \"none\"");
        // 1 Gbit/s, 256-byte packets, 200 ms: 97 656 packets -> 131 072.
        assert_eq!(replay_window_bits(&c), 131_072);
        let mut slow = c.clone();
        slow.paths[0].bps = 10_000_000;
        assert_eq!(replay_window_bits(&slow), MIN_REPLAY_WINDOW);
        let mut fast = c;
        fast.paths[0].bps = 10_000_000_000;
        fast.bond.core.reorder_max = Duration::from_millis(500);
        // 4.88 M packets/s × 0.5 s: clamped to the core's maximum.
        assert_eq!(
            replay_window_bits(&fast),
            braid_core::crypto::MAX_WINDOW_BITS
        );
    }
}
