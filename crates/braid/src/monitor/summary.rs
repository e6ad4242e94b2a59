//! The config summary the page shows (as the bond was started).
use serde_json::{json, Value};

use crate::config::{Config, Transport};

/// What the page's "config" panel lists.
pub fn of(cfg: &Config) -> Value {
    let b = &cfg.bond;
    let paths: Vec<Value> = cfg
        .paths
        .iter()
        .map(|p| {
            let mut v = json!({"name": p.name, "bps": p.bps, "emulated": p.emulate.is_some()});
            match &p.transport {
                Transport::Udp(u) => {
                    v["kind"] = "udp".into();
                    v["local"] = u.local.to_string().into();
                    v["remote"] = u.remote.to_string().into();
                    v["dev"] = json!(u.dev);
                }
                Transport::Serial(s) => {
                    v["kind"] = "serial".into();
                    v["device"] = s.device.display().to_string().into();
                    v["baud"] = s.baud.into();
                    v["framing"] = s.framing.to_string().into();
                }
            }
            v
        })
        .collect();
    let shape = cfg.shape.as_ref().map(|s| {
        json!({
            "rate": s.spec.link_bps.map_or("auto".to_owned(), braid_core::shape::units::format_rate),
            "classes": s.spec.classes.len(),
            "filters": s.spec.filters.len(),
        })
    });
    json!({
        "interface": b.interface,
        "address": b.address.to_string(),
        "address6": b.address6.map(|a| a.to_string()),
        "mtu": b.mtu,
        "scheduler": b.core.scheduler.name(),
        "equalize_ms": b.core.equalize_max.as_millis() as u64,
        "reorder_max_ms": b.core.reorder_max.as_millis() as u64,
        "encryption": b.encryption.name(),
        "paths": paths,
        "shape": shape,
        "version": env!("CARGO_PKG_VERSION"),
    })
}
