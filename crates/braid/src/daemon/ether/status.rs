//! `status` of an Ethernet bond: the bond's own figures (`EtherBond::status`), each
//! member's port and IO, and the TAP's errors. `"layer": "ethernet"` tells `braid status`
//! which table to print.
use std::time::Duration;

use braid_core::ether::EtherBond;
use braid_core::lacp;
use serde_json::{json, Value};

use super::member::Member;
use crate::config::{format_mac, EtherSettings};

/// What `status` is made of, borrowed from the daemon.
pub(super) struct View<'a> {
    pub(super) bond: &'a EtherBond,
    pub(super) members: &'a [Member],
    pub(super) interface: &'a str,
    pub(super) address: &'a str,
    pub(super) mac: [u8; 6],
    pub(super) settings: &'a EtherSettings,
    pub(super) uptime: Duration,
    pub(super) tap_read_errors: u64,
    pub(super) tap_write_errors: u64,
}

/// The `status` answer.
pub(super) fn json(v: &View<'_>) -> Value {
    let bond = serde_json::to_value(v.bond.status()).unwrap_or(Value::Null);
    json!({
        "ok": true,
        "version": crate::status::JSON_VERSION,
        "layer": "ethernet",
        "interface": v.interface,
        "address": v.address,
        "mac": format_mac(v.mac),
        "scheduler": v.settings.scheduler.name(),
        "hash": v.settings.hash.name(),
        "carrier": v.bond.carrier(),
        "uptime_us": u64::try_from(v.uptime.as_micros()).unwrap_or(u64::MAX),
        "members": v.members.iter().map(Member::json).collect::<Vec<_>>(),
        "bond": bond,
        "tap": {"read_errors": v.tap_read_errors, "write_errors": v.tap_write_errors},
    })
}

/// A LACP event for the log, with member names.
pub(super) fn lacp_event(e: lacp::Event, members: &[Member]) -> String {
    let name = |p: lacp::PortId| {
        members
            .get(usize::from(p.0))
            .map_or_else(|| format!("port {}", p.0), |m| m.name.clone())
    };
    match e {
        lacp::Event::Distributing(p) => format!("{} collecting and distributing", name(p)),
        lacp::Event::NotDistributing(p) => format!("{} no longer distributing", name(p)),
        lacp::Event::PartnerChanged { port, partner } => format!(
            "{}: partner system {} (priority {}), key {}, port {}",
            name(port),
            format_mac(partner.system),
            partner.system_priority,
            partner.key,
            partner.port
        ),
        lacp::Event::PartnerDefaulted(p) => {
            format!(
                "{}: partner silent, using the default (no partner)",
                name(p)
            )
        }
        lacp::Event::FallbackEngaged(p) => format!(
            "no partner speaks LACP: active-backup on {} (lacp_fallback)",
            name(p)
        ),
        lacp::Event::FallbackDisengaged => "a partner speaks LACP: fallback over".to_owned(),
    }
}
