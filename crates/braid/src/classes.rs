//! `braid class show` and `braid class change`: the shaper's classes through the control
//! socket, and their table (like `tc -s class show`).
use std::fmt::Write as _;

use braid_core::bond::Bond;
use braid_core::shape::units::{format_rate, parse_rate, parse_size};
use braid_core::shape::{ClassId, ClassStats};
use braid_core::Instant;
use serde_json::{json, Map, Value};

use crate::control;
use crate::status::{bytes, rate};

/// The settings `braid class change` accepts.
pub const SETTABLE: &[&str] = &[
    "rate", "ceil", "burst", "cburst", "prio", "quantum", "limit",
];

/// Build a `class-change` request from `KEY=VALUE` settings (values checked by the
/// daemon, which knows the units).
pub fn change_request(id: &str, settings: &[String]) -> anyhow::Result<Value> {
    ClassId::parse(id).map_err(|e| anyhow::anyhow!("class id: {e}"))?;
    let mut set = Map::new();
    for s in settings {
        let Some((k, v)) = s.split_once('=') else {
            anyhow::bail!("{s:?}: expected KEY=VALUE, such as rate=2mbit");
        };
        if !SETTABLE.contains(&k) {
            anyhow::bail!("unknown setting {k:?} (settable: {})", SETTABLE.join(", "));
        }
        set.insert(k.to_owned(), Value::String(v.to_owned()));
    }
    if set.is_empty() {
        anyhow::bail!("nothing to change");
    }
    Ok(json!({"cmd": "class-change", "id": id, "set": set}))
}

/// `class-show`: every class's figures.
pub fn show(now: Instant, bond: &Bond) -> Value {
    let Some(shaper) = bond.shaper() else {
        return control::error("this bond has no shaper (no [shape] in its config)");
    };
    let classes: Vec<Value> = shaper.stats(now).iter().map(class_json).collect();
    json!({"ok": true, "classes": classes, "drop_shaper": bond.status().counters.drop_shaper})
}

fn class_json(c: &ClassStats) -> Value {
    json!({
        "id": c.id.to_string(),
        "parent": c.parent.map(|p| p.to_string()),
        "name": c.name,
        "leaf": c.leaf,
        "rate_bps": c.rate_bps,
        "ceil_bps": c.ceil_bps,
        "burst": c.burst,
        "cburst": c.cburst,
        "prio": c.prio,
        "quantum": c.quantum,
        "mode": c.mode,
        "rate_measured_bps": c.rate_measured_bps,
        "pps_measured": c.pps_measured,
        "sent_bytes": c.sent_bytes,
        "sent_packets": c.sent_packets,
        "dropped": c.dropped,
        "borrows": c.borrows,
        "lends": c.lends,
        "tokens_ns": c.tokens_ns,
        "ctokens_ns": c.ctokens_ns,
        "backlog_packets": c.backlog_packets,
        "backlog_bytes": c.backlog_bytes,
    })
}

/// `class-change`: apply new settings to one class, keeping its queue and counters.
pub fn change(now: Instant, bond: &mut Bond, id: &str, set: &Map<String, Value>) -> Value {
    let Some(shaper) = bond.shaper_mut() else {
        return control::error("this bond has no shaper (no [shape] in its config)");
    };
    let id = match ClassId::parse(id) {
        Ok(id) => id,
        Err(e) => return control::error(format!("class id: {e}")),
    };
    let Some(mut spec) = shaper.class_spec(id) else {
        return control::error(format!("no class {id}"));
    };
    for (k, v) in set {
        let Some(v) = v.as_str() else {
            return control::error(format!("{k}: the value must be a string"));
        };
        let r = match k.as_str() {
            "rate" => parse_rate(v)
                .map(|b| spec.rate_bps = b)
                .map_err(|e| e.to_string()),
            "ceil" => parse_rate(v)
                .map(|b| spec.ceil_bps = Some(b))
                .map_err(|e| e.to_string()),
            "burst" => parse_size(v)
                .map(|b| spec.burst = Some(b))
                .map_err(|e| e.to_string()),
            "cburst" => parse_size(v)
                .map(|b| spec.cburst = Some(b))
                .map_err(|e| e.to_string()),
            "prio" => v
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= 7)
                .map(|p| spec.prio = p)
                .ok_or_else(|| format!("{v:?} is not a priority 0-7")),
            "quantum" => v
                .parse::<u32>()
                .ok()
                .filter(|&q| q > 0)
                .map(|q| spec.quantum = Some(q))
                .ok_or_else(|| format!("{v:?} is not a quantum in bytes")),
            "limit" => v
                .parse::<u32>()
                .ok()
                .filter(|&q| q > 0)
                .map(|q| spec.limit = Some(q))
                .ok_or_else(|| format!("{v:?} is not a queue limit in packets")),
            _ => Err(format!(
                "unknown setting (settable: {})",
                SETTABLE.join(", ")
            )),
        };
        if let Err(e) = r {
            return control::error(format!("{k}: {e}"));
        }
    }
    match shaper.change_class(now, &spec) {
        Ok(warnings) => json!({"ok": true, "warnings": warnings}),
        Err(e) => control::error(e),
    }
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// Render a `class-show` response as a table, children indented under their parents.
pub fn render(resp: &Value) -> String {
    let classes: &[Value] = resp
        .get("classes")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:>9} {:>9} {:>4} {:>10} {:>9} {:>7} {:>9} {:>8} {:>8} {:>7} {:>10}",
        "class",
        "rate",
        "ceil",
        "prio",
        "mode",
        "now",
        "pkt/s",
        "sent",
        "lends",
        "borrows",
        "drops",
        "backlog"
    );
    let depth = |c: &Value| {
        let mut d = 0;
        let mut parent = c.get("parent").and_then(Value::as_str).map(str::to_owned);
        while let Some(p) = parent {
            d += 1;
            if d > 8 {
                break;
            }
            parent = classes
                .iter()
                .find(|x| s(x, "id") == p)
                .and_then(|x| x.get("parent").and_then(Value::as_str).map(str::to_owned));
        }
        d
    };
    for c in classes {
        let name = match c.get("name").and_then(Value::as_str) {
            Some(n) => format!("{} {n}", s(c, "id")),
            None => s(c, "id").to_owned(),
        };
        let label = format!("{}{name}", "  ".repeat(depth(c)));
        let backlog = if c.get("leaf").and_then(Value::as_bool).unwrap_or(false) {
            format!(
                "{}p/{}",
                u(c, "backlog_packets"),
                bytes(u(c, "backlog_bytes"))
            )
        } else {
            "-".into()
        };
        let us = |k: &str| {
            let ns = c.get(k).and_then(Value::as_i64).unwrap_or(0);
            format!("{:.0}us", ns as f64 / 1000.0)
        };
        let _ = writeln!(
            out,
            "{:<16} {:>9} {:>9} {:>4} {:>10} {:>9} {:>7} {:>9} {:>8} {:>8} {:>7} {:>10} {:>9} {:>9}",
            label,
            format_rate(u(c, "rate_bps")),
            format_rate(u(c, "ceil_bps")),
            u(c, "prio"),
            s(c, "mode"),
            rate(u(c, "rate_measured_bps")),
            u(c, "pps_measured"),
            bytes(u(c, "sent_bytes")),
            u(c, "lends"),
            u(c, "borrows"),
            u(c, "dropped"),
            backlog,
            us("tokens_ns"),
            us("ctokens_ns")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_requests_are_checked_locally() {
        let r = change_request("1:10", &["rate=2mbit".into(), "prio=3".into()]).unwrap();
        assert_eq!(
            r,
            json!({"cmd": "class-change", "id": "1:10", "set": {"rate": "2mbit", "prio": "3"}})
        );
        assert!(change_request("1:10", &[]).is_err());
        assert!(change_request("1:10", &["rate".into()]).is_err());
        let e = change_request("1:10", &["color=red".into()]).unwrap_err();
        assert!(e.to_string().contains("settable: rate, ceil"), "{e}");
        assert!(change_request("x:y:z", &["rate=1mbit".into()]).is_err());
    }

    #[test]
    fn render_indents_children_and_shows_backlog_of_leaves() {
        let resp = json!({"ok": true, "classes": [
            {"id": "1:1", "parent": null, "leaf": false, "rate_bps": 10_000_000u64, "ceil_bps": 10_000_000u64, "mode": "can-send"},
            {"id": "1:10", "parent": "1:1", "name": "alex", "leaf": true, "rate_bps": 1_900_000u64, "ceil_bps": 10_000_000u64,
             "prio": 1, "mode": "may-borrow", "backlog_packets": 3, "backlog_bytes": 4200, "borrows": 7,
             "tokens_ns": -1_500_000i64, "ctokens_ns": 800_000}
        ]});
        let t = render(&resp);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("1:1 "), "{t}");
        assert!(lines[2].starts_with("  1:10 alex"), "{t}");
        assert!(
            lines[2].contains("3p/4.2kB") && lines[2].contains("may-borrow"),
            "{t}"
        );
    }
}
