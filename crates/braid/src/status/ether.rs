//! `braid status` of a bond of Ethernet ports (`"layer": "ethernet"` with `members`):
//! one row per member (the daemon's port and IO, the bond's state and counters), the
//! LACP actor and partner per member in 802.3ad, and the health from the bond's carrier.
use std::fmt::Write as _;

use serde_json::Value;

use super::{bytes, table, u, Health};

/// Whether `resp` is an Ethernet bond's status.
pub(super) fn is_ether(resp: &Value) -> bool {
    resp.get("layer").and_then(Value::as_str) == Some("ethernet") && resp.get("members").is_some()
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("?")
}

fn list(v: &Value, k: &str) -> Vec<Value> {
    v.get(k)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Down without carrier (no member can carry traffic); degraded while a member has no
/// carrier or no socket, or (802.3ad) is not distributing; else up.
pub(super) fn health(resp: &Value) -> Health {
    let members = list(resp, "members");
    let bond = resp.get("bond").cloned().unwrap_or(Value::Null);
    let states = list(&bond, "members");
    if members.is_empty() {
        return Health::Down("no members".into());
    }
    if resp.get("carrier").and_then(Value::as_bool) != Some(true) {
        return Health::Down("no member can carry traffic".into());
    }
    let mut not_up = Vec::new();
    for (m, st) in members
        .iter()
        .zip(states.iter().chain(std::iter::repeat(&Value::Null)))
    {
        let name = s(m, "name");
        if m.get("socket").and_then(Value::as_str) == Some("closed") {
            not_up.push(format!("{name} has no port"));
        } else if m.get("carrier").and_then(Value::as_bool) != Some(true) {
            not_up.push(format!("{name} no carrier"));
        } else if matches!(s(st, "state"), "waiting" | "collecting" | "down") {
            not_up.push(format!("{name} {}", s(st, "state")));
        }
    }
    if not_up.is_empty() {
        Health::Up
    } else {
        Health::Degraded(not_up.join(", "))
    }
}

/// The table.
pub(super) fn render(resp: &Value) -> String {
    let mut out = String::new();
    let bond = resp.get("bond").cloned().unwrap_or(Value::Null);
    let members = list(resp, "members");
    let states = list(&bond, "members");
    let _ = writeln!(
        out,
        "{} {}: Ethernet bond, mac {}, scheduler {}{}, {} member(s), up {:.0}s",
        s(resp, "interface"),
        s(resp, "address"),
        s(resp, "mac"),
        s(resp, "scheduler"),
        match s(resp, "scheduler") {
            "xor" | "802.3ad" => format!(" (hash {})", s(resp, "hash")),
            _ => String::new(),
        },
        members.len(),
        u(resp, "uptime_us") as f64 / 1e6,
    );
    let header = [
        "MEMBER",
        "PORT",
        "STATE",
        "CARRIER",
        "TX FRAMES",
        "TX BYTES",
        "RX FRAMES",
        "RX BYTES",
        "CONTROL TX",
        "DROPS",
        "ERRORS",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
    let null = Value::Null;
    for (i, m) in members.iter().enumerate() {
        let st = states.get(i).unwrap_or(&null);
        let drops = st.get("drops").unwrap_or(&null);
        let dropped: u64 = ["inactive", "looped", "lacp_bad", "short", "unknown_member"]
            .iter()
            .map(|k| u(drops, k))
            .sum();
        let state = if m.get("socket").and_then(Value::as_str) == Some("closed") {
            "no port".to_owned()
        } else {
            s(st, "state").to_owned()
        };
        rows.push(vec![
            s(m, "name").to_owned(),
            s(m, "dev").to_owned(),
            state,
            if m.get("carrier").and_then(Value::as_bool) == Some(true) {
                "up"
            } else {
                "down"
            }
            .to_owned(),
            u(st, "tx_frames").to_string(),
            bytes(u(st, "tx_bytes")),
            u(st, "rx_frames").to_string(),
            bytes(u(st, "rx_bytes")),
            u(st, "control_tx").to_string(),
            dropped.to_string(),
            (u(m, "send_errors") + u(m, "recv_errors")).to_string(),
        ]);
    }
    table(&mut out, &rows, 3);
    for m in &members {
        if let Some(e) = m.get("last_error").and_then(Value::as_str) {
            let _ = writeln!(out, "  {}: {e}", s(m, "name"));
        }
    }
    if let Some(l) = bond.get("lacp").filter(|l| !l.is_null()) {
        let _ = writeln!(
            out,
            "lacp: system {} priority {}, key {}, {} {}, min_links {}, aggregator {}{}",
            s(l, "system"),
            u(l, "system_priority"),
            u(l, "key"),
            s(l, "mode"),
            s(l, "rate"),
            u(l, "min_links"),
            if l.get("aggregator_up").and_then(Value::as_bool) == Some(true) {
                "up"
            } else {
                "down"
            },
            if l.get("fallback_engaged").and_then(Value::as_bool) == Some(true) {
                ", fallback to active-backup engaged"
            } else {
                ""
            }
        );
        for (p, m) in list(l, "ports").iter().zip(members.iter()) {
            let names = |info: &Value| {
                info.get("state_names")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default()
            };
            let actor = p.get("actor").unwrap_or(&null);
            let partner = p.get("partner").unwrap_or(&null);
            let _ = writeln!(
                out,
                "  {}: {}, rx {}, mux {}; actor port {} [{}]; partner {} key {} port {} [{}]",
                s(m, "name"),
                s(p, "selected"),
                s(p, "rx_state"),
                s(p, "mux_state"),
                u(actor, "port"),
                names(actor),
                s(partner, "system"),
                u(partner, "key"),
                u(partner, "port"),
                names(partner),
            );
        }
    }
    let d = bond.get("drops").unwrap_or(&null);
    let tap = resp.get("tap").unwrap_or(&null);
    let _ = writeln!(
        out,
        "bond: dropped: no member {}, inactive member {}, looped {}, bad lacp {}, short {}; tap errors: read {}, write {}",
        u(d, "no_member"),
        u(d, "inactive"),
        u(d, "looped"),
        u(d, "lacp_bad"),
        u(d, "short"),
        u(tap, "read_errors"),
        u(tap, "write_errors"),
    );
    let _ = writeln!(out, "{}", health(resp).line());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resp(carrier: bool, second_carrier: bool, state: &str) -> Value {
        json!({
            "ok": true, "layer": "ethernet", "interface": "bond0", "address": "10.210.0.1/24",
            "mac": "02:00:00:00:00:01", "scheduler": "802.3ad", "hash": "layer3+4", "carrier": carrier,
            "uptime_us": 5_000_000,
            "members": [
                {"name": "e1", "dev": "eth1", "socket": "open", "carrier": true, "send_errors": 0, "recv_errors": 0, "last_error": null},
                {"name": "e2", "dev": "eth2", "socket": "open", "carrier": second_carrier, "send_errors": 1, "recv_errors": 0, "last_error": null}
            ],
            "bond": {
                "members": [
                    {"id": 0, "state": "distributing", "tx_frames": 10, "tx_bytes": 1500, "rx_frames": 7, "rx_bytes": 700, "control_tx": 3, "drops": {"inactive": 2}},
                    {"id": 1, "state": state, "tx_frames": 0, "tx_bytes": 0, "rx_frames": 0, "rx_bytes": 0, "control_tx": 1, "drops": {}}
                ],
                "drops": {"no_member": 4},
                "lacp": {"system": "02:00:00:00:00:01", "system_priority": 65535, "key": 1, "mode": "active", "rate": "fast", "min_links": 1, "aggregator_up": true, "fallback_engaged": false,
                         "ports": [
                             {"selected": "selected", "rx_state": "current", "mux_state": "collecting_distributing",
                              "actor": {"port": 1, "state_names": ["activity", "timeout"]},
                              "partner": {"system": "aa:bb:cc:dd:ee:ff", "key": 5, "port": 2, "state_names": ["activity"]}},
                             {"selected": "unselected", "rx_state": "defaulted", "mux_state": "detached", "actor": {}, "partner": {}}
                         ]}
            },
            "tap": {"read_errors": 0, "write_errors": 0}
        })
    }

    #[test]
    fn health_follows_carrier_and_members() {
        assert_eq!(health(&resp(true, true, "distributing")), Health::Up);
        assert_eq!(
            health(&resp(true, false, "down")),
            Health::Degraded("e2 no carrier".into())
        );
        assert_eq!(
            health(&resp(true, true, "waiting")),
            Health::Degraded("e2 waiting".into())
        );
        assert_eq!(
            health(&resp(false, true, "waiting")),
            Health::Down("no member can carry traffic".into())
        );
        assert!(is_ether(&resp(true, true, "distributing")));
        assert!(!is_ether(&json!({"status": {}})));
    }

    #[test]
    fn the_table_names_members_ports_and_partners() {
        let t = render(&resp(true, true, "distributing"));
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("bond0 10.210.0.1/24: Ethernet bond, mac 02:00:00:00:00:01, scheduler 802.3ad (hash layer3+4), 2 member(s)"), "{t}");
        assert!(lines[1].starts_with("MEMBER  PORT  STATE"), "{t}");
        assert!(lines[2].starts_with("e1      eth1  distributing"), "{t}");
        assert!(t.contains("  e1: selected, rx current, mux collecting_distributing; actor port 1 [activity,timeout]; partner aa:bb:cc:dd:ee:ff key 5 port 2 [activity]"), "{t}");
        assert!(
            t.contains("bond: dropped: no member 4, inactive member 0"),
            "{t}"
        );
        assert!(t.ends_with("health: up\n"), "{t}");
        assert!(!t.contains("Some(") && !t.contains("None"), "{t}");
    }
}
