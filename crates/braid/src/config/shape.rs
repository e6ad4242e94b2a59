//! The `[shape]` table: braid's HTB shaper, in native TOML or as a tc script
//! (`script = "FILE"`). Documented in `docs/config.md` and `docs/shaping.md`.

use std::path::Path;

use braid_core::shape::units::{parse_rate, parse_size};
use braid_core::shape::{ClassId, ClassSpec, FilterSpec, PortRange, Prefix, ShapeSpec};
use serde::Deserialize;

use super::tc::parse_script;
use super::{at, VResult, S};

/// A validated `[shape]` table.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeSettings {
    /// The classes, filters and link rate.
    pub spec: ShapeSpec,
    /// Notes from reading a tc script (what was accepted and ignored).
    pub notes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShape {
    rate: Option<S<String>>,
    default: Option<S<String>>,
    r2q: Option<S<i64>>,
    script: Option<S<String>>,
    #[serde(default)]
    class: Vec<S<RawClass>>,
    #[serde(default)]
    filter: Vec<S<RawFilter>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClass {
    id: Option<S<String>>,
    parent: Option<S<String>>,
    name: Option<S<String>>,
    rate: Option<S<String>>,
    ceil: Option<S<String>>,
    burst: Option<S<toml::Value>>,
    cburst: Option<S<toml::Value>>,
    prio: Option<S<i64>>,
    quantum: Option<S<i64>>,
    limit: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilter {
    prio: Option<S<i64>>,
    src: Option<S<String>>,
    dst: Option<S<String>>,
    protocol: Option<S<toml::Value>>,
    sport: Option<S<toml::Value>>,
    dport: Option<S<toml::Value>>,
    tos: Option<S<String>>,
    dscp: Option<S<i64>>,
    class: Option<S<String>>,
}

/// Read a tc script: a regular file of at most [`crate::files::TEXT_MAX`] bytes, so that a
/// path such as `/dev/zero` or a fifo is refused instead of reading without end.
fn read_script(path: &Path) -> Result<String, String> {
    crate::files::read_regular_text(path, crate::files::TEXT_MAX).map_err(|e| e.to_string())
}

/// Validate `[shape]`; `base` is the config file's directory (for a relative `script`).
pub(super) fn validate(raw: S<RawShape>, base: &Path) -> VResult<ShapeSettings> {
    let span = raw.span();
    let r = raw.into_inner();
    let link_bps = match &r.rate {
        None => None,
        Some(s) if s.get_ref() == "auto" => None,
        Some(s) => Some(
            parse_rate(s.get_ref())
                .ok()
                .filter(|&b| b > 0)
                .ok_or_else(|| {
                    at(
                        s,
                        format!(
                            "shape.rate: {:?} is not a rate (\"10mbit\", \"1.5gbit\", \"auto\")",
                            s.get_ref()
                        ),
                    )
                })?,
        ),
    };
    let (mut spec, notes) = if let Some(script) = &r.script {
        if !r.class.is_empty() || !r.filter.is_empty() {
            return Err(at(
                script,
                "shape.script: give either a tc script or [[shape.class]]/[[shape.filter]], not both".into(),
            ));
        }
        let path = base.join(script.get_ref());
        let text = read_script(&path).map_err(|e| {
            at(
                script,
                format!("shape.script: cannot read {}: {e}", path.display()),
            )
        })?;
        let parsed = parse_script(&text)
            .map_err(|e| at(script, format!("shape.script: {}: {e}", path.display())))?;
        (parsed.spec, parsed.notes)
    } else {
        let mut spec = ShapeSpec::default();
        for c in &r.class {
            spec.classes.push(class(c)?);
        }
        for f in &r.filter {
            spec.filters.push(filter(f)?);
        }
        (spec, Vec::new())
    };
    spec.link_bps = link_bps.or(spec.link_bps);
    if let Some(d) = &r.default {
        spec.default_class = Some(class_id(d, "shape.default")?);
    }
    if let Some(q) = &r.r2q {
        spec.r2q = u32::try_from(*q.get_ref())
            .ok()
            .filter(|&v| v >= 1)
            .ok_or_else(|| {
                at(
                    q,
                    "shape.r2q: must be a positive integer (tc's default is 10)".into(),
                )
            })?;
    }
    if spec.classes.is_empty() {
        return Err((
            Some(span),
            "shape: no classes (add [[shape.class]] or script = \"FILE\")".into(),
        ));
    }
    if spec.default_class.is_none() {
        return Err((
            Some(span),
            "shape.default: missing: name the leaf class unclassified traffic goes to (braid never sends it unshaped)".into(),
        ));
    }
    Ok(ShapeSettings { spec, notes })
}

fn class_id(s: &S<String>, key: &str) -> VResult<ClassId> {
    ClassId::parse(s.get_ref()).map_err(|e| at(s, format!("{key}: {e}")))
}

fn rate(s: &S<String>, key: &str) -> VResult<u64> {
    parse_rate(s.get_ref())
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| {
            at(
                s,
                format!(
                    "{key}: {:?} is not a rate such as \"1.9mbit\" or \"300kbit\"",
                    s.get_ref()
                ),
            )
        })
}

fn size(v: &S<toml::Value>, key: &str) -> VResult<u32> {
    match v.get_ref() {
        toml::Value::Integer(i) => u32::try_from(*i)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| at(v, format!("{key}: must be 1 to 4294967295 bytes"))),
        toml::Value::String(s) => parse_size(s).map_err(|e| at(v, format!("{key}: {e}"))),
        _ => Err(at(
            v,
            format!("{key}: a size in bytes (15000) or with a unit (\"15k\")"),
        )),
    }
}

fn class(c: &S<RawClass>) -> VResult<ClassSpec> {
    let span = c.span();
    let c = c.get_ref();
    let id = match &c.id {
        Some(s) => class_id(s, "shape.class.id")?,
        None => return Err((Some(span), "shape.class.id: missing (\"1:10\")".into())),
    };
    let key = |k: &str| format!("shape.class {id}: {k}");
    // "1:" (the qdisc) and no parent both mean a top-level class.
    let parent = match &c.parent {
        None => None,
        Some(s) => {
            let p = class_id(s, &key("parent"))?;
            (p.minor() != 0).then_some(p)
        }
    };
    let rate_bps = match &c.rate {
        Some(s) => rate(s, &key("rate"))?,
        None => return Err((Some(span), key("rate: missing"))),
    };
    let mut spec = ClassSpec::new(id, parent, rate_bps);
    spec.name = c.name.as_ref().map(|n| n.get_ref().clone());
    spec.ceil_bps = c.ceil.as_ref().map(|s| rate(s, &key("ceil"))).transpose()?;
    spec.burst = c
        .burst
        .as_ref()
        .map(|v| size(v, &key("burst")))
        .transpose()?;
    spec.cburst = c
        .cburst
        .as_ref()
        .map(|v| size(v, &key("cburst")))
        .transpose()?;
    if let Some(p) = &c.prio {
        spec.prio = u8::try_from(*p.get_ref())
            .ok()
            .filter(|&v| v <= 7)
            .ok_or_else(|| at(p, key("prio: must be 0 (first) to 7")))?;
    }
    spec.quantum = match &c.quantum {
        None => None,
        Some(q) => Some(
            u32::try_from(*q.get_ref())
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| at(q, key("quantum: must be a positive number of bytes")))?,
        ),
    };
    spec.limit = match &c.limit {
        None => None,
        Some(q) => Some(
            u32::try_from(*q.get_ref())
                .ok()
                .filter(|&v| (1..=1_000_000).contains(&v))
                .ok_or_else(|| at(q, key("limit: must be 1 to 1000000 packets")))?,
        ),
    };
    Ok(spec)
}

fn protocol(v: &S<toml::Value>) -> VResult<u8> {
    let bad = || {
        at(
            v,
            "shape.filter.protocol: a name (tcp, udp, icmp, ...) or a number 0-255".into(),
        )
    };
    match v.get_ref() {
        toml::Value::Integer(i) => u8::try_from(*i).map_err(|_| bad()),
        toml::Value::String(s) => match s.as_str() {
            "icmp" => Ok(1),
            "igmp" => Ok(2),
            "tcp" => Ok(6),
            "udp" => Ok(17),
            "gre" => Ok(47),
            "esp" => Ok(50),
            "ah" => Ok(51),
            "icmpv6" | "ipv6-icmp" => Ok(58),
            "sctp" => Ok(132),
            "udplite" => Ok(136),
            other => other.parse().map_err(|_| bad()),
        },
        _ => Err(bad()),
    }
}

fn ports(v: &S<toml::Value>, key: &str) -> VResult<PortRange> {
    match v.get_ref() {
        toml::Value::Integer(i) => u16::try_from(*i)
            .map(|p| PortRange { lo: p, hi: p })
            .map_err(|_| at(v, format!("{key}: a port 0-65535 or a range \"1000-2000\""))),
        toml::Value::String(s) => PortRange::parse(s).map_err(|e| at(v, format!("{key}: {e}"))),
        _ => Err(at(
            v,
            format!("{key}: a port 0-65535 or a range \"1000-2000\""),
        )),
    }
}

fn tos(s: &S<String>) -> VResult<(u8, u8)> {
    let num = |t: &str| -> Option<u8> {
        match t.strip_prefix("0x") {
            Some(h) => u8::from_str_radix(h, 16).ok(),
            None => t.parse().ok(),
        }
    };
    let text = s.get_ref();
    let (v, m) = match text.split_once('/') {
        Some((v, m)) => (num(v), num(m)),
        None => (num(text), Some(0xff)),
    };
    match (v, m) {
        (Some(v), Some(m)) => Ok((v, m)),
        _ => Err(at(
            s,
            format!("shape.filter.tos: {text:?} is not VALUE[/MASK] such as \"0x10/0x1e\""),
        )),
    }
}

fn filter(f: &S<RawFilter>) -> VResult<FilterSpec> {
    let span = f.span();
    let f = f.get_ref();
    let prefix = |s: &S<String>, k: &str| {
        Prefix::parse(s.get_ref()).map_err(|e| at(s, format!("shape.filter.{k}: {e}")))
    };
    let class = match &f.class {
        Some(s) => class_id(s, "shape.filter.class")?,
        None => {
            return Err((
                Some(span),
                "shape.filter.class: missing (the class matching packets go to)".into(),
            ))
        }
    };
    if f.tos.is_some() && f.dscp.is_some() {
        return Err((
            Some(span),
            "shape.filter: give tos or dscp, not both".into(),
        ));
    }
    let tos = match (&f.tos, &f.dscp) {
        (Some(t), _) => Some(tos(t)?),
        (None, Some(d)) => Some(
            u8::try_from(*d.get_ref())
                .ok()
                .filter(|&v| v < 64)
                .map(|v| (v << 2, 0xfc))
                .ok_or_else(|| at(d, "shape.filter.dscp: must be 0-63".into()))?,
        ),
        (None, None) => None,
    };
    Ok(FilterSpec {
        prio: match &f.prio {
            None => 0,
            Some(p) => u32::try_from(*p.get_ref()).map_err(|_| {
                at(
                    p,
                    "shape.filter.prio: must be 0 or more (lower first)".into(),
                )
            })?,
        },
        src: f.src.as_ref().map(|s| prefix(s, "src")).transpose()?,
        dst: f.dst.as_ref().map(|s| prefix(s, "dst")).transpose()?,
        protocol: f.protocol.as_ref().map(protocol).transpose()?,
        sport: f
            .sport
            .as_ref()
            .map(|v| ports(v, "shape.filter.sport"))
            .transpose()?,
        dport: f
            .dport
            .as_ref()
            .map(|v| ports(v, "shape.filter.dport"))
            .transpose()?,
        tos,
        class,
    })
}
