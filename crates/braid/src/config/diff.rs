//! What a reload changes: the running config against the file's, key by key.
//!
//! [`diff`] either lists the changes the daemon can make while the bond runs (paths added,
//! removed or changed, bond-wide scheduler and monitoring keys, shaper classes and
//! filters), or refuses: keys that shape the TUN or the keys of the session (interface,
//! address, mtu, encryption) cannot change without a restart, and the whole reload is
//! refused so that the running bond stays as it was.
use std::fmt;
use std::time::Duration;

use braid_core::shape::units::format_rate;
use braid_core::shape::{ClassSpec, ShapeSpec};
use braid_core::Reselect;
use braid_core::SchedulerConfig;

use super::{
    Config, Encryption, PathSettings, SerialMode, SerialSettings, ShapeSettings, Transport,
    UdpSettings,
};

/// One key's old and new value, for the log and `braid reload`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyChange {
    /// The key (`bond.probe_interval_ms`, `bps`, `rate`).
    pub key: String,
    /// Old value, as written in a config.
    pub from: String,
    /// New value.
    pub to: String,
}

impl fmt::Display for KeyChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} -> {}", self.key, self.from, self.to)
    }
}

/// A key that cannot change while the bond runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The key (`bond.mtu`).
    pub key: String,
    /// Old and new value, or why (`(changed)` for keys, which are not shown).
    pub detail: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.key, self.detail)
    }
}

/// What becomes of a path that is in both configs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reopen {
    /// Settings change in place (speed, priority, peer address, emulator).
    No,
    /// The UDP socket is re-opened (new `local` or `dev`); the bond keeps the path.
    Socket,
    /// The path is removed and added again (a serial line's settings, or a new kind).
    Recreate,
}

/// One path's change.
#[derive(Clone, Debug, PartialEq)]
pub enum PathChange {
    /// Not in the new config: emancipated.
    Removed {
        /// Its name.
        name: String,
    },
    /// New: enslaved.
    Added(PathSettings),
    /// In both, with other settings.
    Changed {
        /// The new settings.
        new: PathSettings,
        /// What changed.
        keys: Vec<KeyChange>,
        /// What it takes.
        reopen: Reopen,
    },
}

impl fmt::Display for PathChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathChange::Removed { name } => write!(f, "path {name} removed"),
            PathChange::Added(p) => write!(f, "path {} added: {}", p.name, describe(p)),
            PathChange::Changed { new, keys, reopen } => {
                write!(f, "path {}: {}", new.name, join(keys))?;
                match reopen {
                    Reopen::No => Ok(()),
                    Reopen::Socket => write!(f, " (socket re-opened)"),
                    Reopen::Recreate => write!(f, " (path re-created)"),
                }
            }
        }
    }
}

/// What becomes of the shaper.
#[derive(Clone, Debug, PartialEq)]
pub enum ShapeChange {
    /// Same as before.
    None,
    /// A `[shape]` where there was none.
    Added,
    /// No `[shape]` any more.
    Removed,
    /// The same tree and filters; these classes get new parameters in place (queues and
    /// counters kept, as `braid class change`).
    Classes(Vec<(ClassSpec, Vec<KeyChange>)>),
    /// Classes added, removed or moved, filters, the link rate or the default class
    /// changed: a new shaper replaces the running one (packets queued in it are dropped).
    Replace(String),
}

/// Everything a reload changes.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// Bond-wide keys (scheduler and its options, monitoring, reorder, queue, equalise,
    /// seed, MSS clamping): applied together.
    pub bond: Vec<KeyChange>,
    /// Paths, in the order: removed, changed, added.
    pub paths: Vec<PathChange>,
    /// The shaper.
    pub shape: ShapeChange,
}

impl Diff {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.bond.is_empty() && self.paths.is_empty() && self.shape == ShapeChange::None
    }

    /// One line per change, for the log and `braid reload`.
    pub fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self.bond.iter().map(ToString::to_string).collect();
        out.extend(self.paths.iter().map(ToString::to_string));
        match &self.shape {
            ShapeChange::None => {}
            ShapeChange::Added => out.push("[shape] added".into()),
            ShapeChange::Removed => out.push("[shape] removed".into()),
            ShapeChange::Classes(cs) => {
                out.extend(
                    cs.iter()
                        .map(|(c, k)| format!("class {}: {}", c.id, join(k))),
                );
            }
            ShapeChange::Replace(why) => out.push(format!("[shape] replaced ({why})")),
        }
        out
    }
}

fn join(keys: &[KeyChange]) -> String {
    keys.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe(p: &PathSettings) -> String {
    match &p.transport {
        Transport::Udp(u) => format!(
            "{} -> {}{}",
            u.local,
            u.remote,
            u.dev
                .as_ref()
                .map(|d| format!(" dev {d}"))
                .unwrap_or_default()
        ),
        Transport::Serial(s) => format!("{} at {} bd", s.device.display(), s.baud),
    }
}

fn ms(d: Duration) -> String {
    d.as_millis().to_string()
}

/// Collects key changes.
#[derive(Default)]
struct Keys(Vec<KeyChange>);

impl Keys {
    fn cmp<T: PartialEq + ?Sized>(&mut self, key: &str, a: &T, b: &T, show: impl Fn(&T) -> String) {
        if a != b {
            self.0.push(KeyChange {
                key: key.to_owned(),
                from: show(a),
                to: show(b),
            });
        }
    }
}

/// The changes from `old` (what runs) to `new` (the file), or why they cannot be made
/// while the bond runs.
pub fn diff(old: &Config, new: &Config) -> Result<Diff, Vec<Refusal>> {
    let refused = refusals(old, new);
    if !refused.is_empty() {
        return Err(refused);
    }
    Ok(Diff {
        bond: bond_keys(old, new),
        paths: paths(&old.paths, &new.paths),
        shape: shape(old.shape.as_ref(), new.shape.as_ref()),
    })
}

fn refusals(old: &Config, new: &Config) -> Vec<Refusal> {
    let (a, b) = (&old.bond, &new.bond);
    let mut out = Vec::new();
    let mut refuse = |key: &str, detail: String| {
        out.push(Refusal {
            key: key.to_owned(),
            detail,
        })
    };
    if a.interface != b.interface {
        refuse(
            "bond.interface",
            format!("{} -> {}", a.interface, b.interface),
        );
    }
    if a.address != b.address {
        refuse("bond.address", format!("{} -> {}", a.address, b.address));
    }
    if a.address6 != b.address6 {
        let show = |x: &Option<super::Ipv6Cidr>| x.map_or("none".to_owned(), |c| c.to_string());
        refuse(
            "bond.address6",
            format!("{} -> {}", show(&a.address6), show(&b.address6)),
        );
    }
    if a.mtu != b.mtu {
        refuse("bond.mtu", format!("{} -> {}", a.mtu, b.mtu));
    }
    if a.offload != b.offload {
        refuse("bond.offload", format!("{} -> {}", a.offload, b.offload));
    }
    if a.workers != b.workers {
        let show = |w: Option<usize>| w.map_or("auto".to_owned(), |n| n.to_string());
        refuse(
            "bond.workers",
            format!("{} -> {}", show(a.workers), show(b.workers)),
        );
    }
    if a.layer != b.layer {
        refuse(
            "bond.layer",
            format!("{} -> {}", a.layer.name(), b.layer.name()),
        );
    }
    if a.mac != b.mac {
        let show = |m: Option<[u8; 6]>| m.map_or("unset".to_owned(), super::format_mac);
        refuse("bond.mac", format!("{} -> {}", show(a.mac), show(b.mac)));
    }
    if old.ether != new.ether {
        // A bond of Ethernet ports is set up once (members, mode, MAC, LACP).
        refuse("the Ethernet members or their bond keys", "changed".into());
    }
    match (&a.encryption, &b.encryption) {
        (Encryption::None, Encryption::None) => {}
        (Encryption::Keys(x), Encryption::Keys(y)) => {
            if x.private_key != y.private_key {
                refuse("bond.private_key", "changed".into());
            }
            if x.peer_public_key != y.peer_public_key {
                refuse("bond.peer_public_key", "changed".into());
            }
            if x.preshared_key != y.preshared_key {
                refuse("bond.preshared_key", "changed".into());
            }
            if x.rekey_after != y.rekey_after {
                let show =
                    |d: Option<Duration>| d.map_or("none".into(), |d| d.as_secs().to_string());
                refuse(
                    "bond.rekey_after_s",
                    format!("{} -> {}", show(x.rekey_after), show(y.rekey_after)),
                );
            }
        }
        (x, y) => refuse(
            "bond.encryption",
            format!(
                "{} -> {}",
                if matches!(x, Encryption::None) {
                    "none"
                } else {
                    "keys"
                },
                if matches!(y, Encryption::None) {
                    "none"
                } else {
                    "keys"
                }
            ),
        ),
    }
    if a.run_as != b.run_as {
        let show = |r: &Option<crate::privileges::RunAs>| match r {
            None => "root".to_owned(),
            Some(r) => match &r.group {
                Some(g) => format!("{}:{g}", r.user),
                None => r.user.clone(),
            },
        };
        refuse(
            "bond.user",
            format!("{} -> {}", show(&a.run_as), show(&b.run_as)),
        );
    }
    routing_refusals(&a.routing, &b.routing, &mut refuse);
    if old.monitor != new.monitor {
        // The listener, its token and the history file are set up at start.
        refuse(
            "monitor",
            "its listener and history file are set up at start".into(),
        );
    }
    let raw_ip = |c: &Config| {
        c.paths
            .iter()
            .position(|p| p.serial().is_some_and(|s| s.mode == SerialMode::RawIp))
    };
    if let Some(i) = raw_ip(old).or(raw_ip(new)) {
        if old.paths != new.paths {
            refuse(
                &format!("path[{i}].mode"),
                "a bond in mode = \"raw-ip\" runs its one line as it was started".into(),
            );
        }
    }
    out
}

fn bond_keys(old: &Config, new: &Config) -> Vec<KeyChange> {
    let (a, b) = (&old.bond.core, &new.bond.core);
    let mut k = Keys::default();
    k.cmp(
        "bond.scheduler",
        a.scheduler.name(),
        b.scheduler.name(),
        |s| s.to_owned(),
    );
    match (&a.scheduler, &b.scheduler) {
        (
            SchedulerConfig::RoundRobin {
                packets_per_path: x,
            },
            SchedulerConfig::RoundRobin {
                packets_per_path: y,
            },
        ) => k.cmp("bond.packets_per_path", x, y, ToString::to_string),
        (SchedulerConfig::Xor { hash: x }, SchedulerConfig::Xor { hash: y }) => {
            k.cmp("bond.hash", x, y, ToString::to_string)
        }
        (SchedulerConfig::ActiveBackup(x), SchedulerConfig::ActiveBackup(y)) => {
            // `primary` by name: the ids in a config are its file order, not the bond's.
            k.cmp("bond.primary", &old.bond.primary, &new.bond.primary, |p| {
                p.clone().unwrap_or_else(|| "none".into())
            });
            k.cmp("bond.primary_reselect", &x.reselect, &y.reselect, |r| {
                match r {
                    Reselect::Always => "always",
                    Reselect::Better => "better",
                    Reselect::Failure => "failure",
                }
                .to_owned()
            });
            k.cmp("bond.updelay_ms", &x.updelay, &y.updelay, |d| ms(*d));
            k.cmp("bond.downdelay_ms", &x.downdelay, &y.downdelay, |d| ms(*d));
        }
        _ => {}
    }
    let (h, g) = (&a.health, &b.health);
    k.cmp(
        "bond.probe_interval_ms",
        &h.probe_interval,
        &g.probe_interval,
        |d| ms(*d),
    );
    k.cmp(
        "bond.down_after",
        &h.down_after,
        &g.down_after,
        ToString::to_string,
    );
    k.cmp(
        "bond.up_after",
        &h.up_after,
        &g.up_after,
        ToString::to_string,
    );
    k.cmp("bond.reorder_max_ms", &a.reorder_max, &b.reorder_max, |d| {
        ms(*d)
    });
    k.cmp(
        "bond.queue_max_delay_ms",
        &a.queue_max_delay,
        &b.queue_max_delay,
        |d| ms(*d),
    );
    k.cmp("bond.equalize_ms", &a.equalize_max, &b.equalize_max, |d| {
        ms(*d)
    });
    k.cmp("bond.seed", &a.seed, &b.seed, ToString::to_string);
    k.cmp(
        "bond.mss_clamp",
        &a.mss_clamp,
        &b.mss_clamp,
        ToString::to_string,
    );
    k.0
}

fn paths(old: &[PathSettings], new: &[PathSettings]) -> Vec<PathChange> {
    let mut out: Vec<PathChange> = old
        .iter()
        .filter(|o| !new.iter().any(|n| n.name == o.name))
        .map(|o| PathChange::Removed {
            name: o.name.clone(),
        })
        .collect();
    for n in new {
        if let Some(o) = old.iter().find(|o| o.name == n.name) {
            if o != n {
                let (keys, reopen) = path_keys(o, n);
                out.push(PathChange::Changed {
                    new: n.clone(),
                    keys,
                    reopen,
                });
            }
        }
    }
    out.extend(
        new.iter()
            .filter(|n| !old.iter().any(|o| o.name == n.name))
            .cloned()
            .map(PathChange::Added),
    );
    out
}

fn path_keys(o: &PathSettings, n: &PathSettings) -> (Vec<KeyChange>, Reopen) {
    let mut k = Keys::default();
    let reopen = match (&o.transport, &n.transport) {
        (Transport::Udp(a), Transport::Udp(b)) => udp_keys(&mut k, a, b),
        (Transport::Serial(a), Transport::Serial(b)) => serial_keys(&mut k, a, b),
        (a, b) => {
            let kind = |t: &Transport| match t {
                Transport::Udp(_) => "udp",
                Transport::Serial(_) => "serial",
            };
            k.cmp("kind", kind(a), kind(b), |s| format!("{s:?}"));
            Reopen::Recreate
        }
    };
    k.cmp("bps", &o.bps, &n.bps, ToString::to_string);
    k.cmp("prio", &o.prio, &n.prio, ToString::to_string);
    if o.emulate != n.emulate {
        k.0.push(KeyChange {
            key: "emulate".into(),
            from: if o.emulate.is_some() { "set" } else { "none" }.into(),
            to: if n.emulate.is_some() {
                "new settings"
            } else {
                "none"
            }
            .into(),
        });
    }
    // A serial line paces at its bps: a new bps is a new line.
    let reopen = if reopen == Reopen::No && o.bps != n.bps && n.serial().is_some() {
        Reopen::Recreate
    } else {
        reopen
    };
    (k.0, reopen)
}

fn udp_keys(k: &mut Keys, a: &UdpSettings, b: &UdpSettings) -> Reopen {
    k.cmp("local", &a.local, &b.local, ToString::to_string);
    k.cmp("remote", &a.remote, &b.remote, ToString::to_string);
    k.cmp("dev", &a.dev, &b.dev, |d| {
        d.clone().unwrap_or_else(|| "none".into())
    });
    k.cmp("mtu", &a.link_mtu, &b.link_mtu, ToString::to_string);
    // The largest datagram follows the link's MTU and the address family's headers.
    if a.link_mtu != b.link_mtu || a.local.is_ipv4() != b.local.is_ipv4() {
        Reopen::Recreate
    } else if a.local != b.local || a.dev != b.dev {
        Reopen::Socket
    } else {
        Reopen::No
    }
}

fn serial_keys(k: &mut Keys, a: &SerialSettings, b: &SerialSettings) -> Reopen {
    k.cmp("device", &a.device, &b.device, |d| d.display().to_string());
    k.cmp("baud", &a.baud, &b.baud, ToString::to_string);
    k.cmp("framing", &a.framing, &b.framing, ToString::to_string);
    k.cmp("mtu", &a.mtu, &b.mtu, ToString::to_string);
    if a == b {
        Reopen::No
    } else {
        Reopen::Recreate
    }
}

fn shape(old: Option<&ShapeSettings>, new: Option<&ShapeSettings>) -> ShapeChange {
    match (old, new) {
        (None, None) => ShapeChange::None,
        (None, Some(_)) => ShapeChange::Added,
        (Some(_), None) => ShapeChange::Removed,
        (Some(a), Some(b)) if a.spec == b.spec => ShapeChange::None,
        (Some(a), Some(b)) => match replace_reason(&a.spec, &b.spec) {
            Some(why) => ShapeChange::Replace(why),
            None => ShapeChange::Classes(
                b.spec
                    .classes
                    .iter()
                    .filter_map(|c| {
                        let o = a.spec.classes.iter().find(|o| o.id == c.id)?;
                        let keys = class_keys(o, c);
                        (!keys.is_empty()).then(|| (c.clone(), keys))
                    })
                    .collect(),
            ),
        },
    }
}

/// Why the running shaper cannot take `b` class by class, if it cannot.
fn replace_reason(a: &ShapeSpec, b: &ShapeSpec) -> Option<String> {
    let tree = |s: &ShapeSpec| {
        let mut t: Vec<_> = s.classes.iter().map(|c| (c.id, c.parent)).collect();
        t.sort();
        t
    };
    if tree(a) != tree(b) {
        Some("classes added, removed or moved".into())
    } else if a.filters != b.filters {
        Some("filters changed".into())
    } else if a.link_bps != b.link_bps {
        let show = |r: Option<u64>| r.map_or("auto".into(), format_rate);
        Some(format!("rate {} -> {}", show(a.link_bps), show(b.link_bps)))
    } else if a.default_class != b.default_class {
        Some("default class changed".into())
    } else if a.r2q != b.r2q {
        Some(format!("r2q {} -> {}", a.r2q, b.r2q))
    } else {
        None
    }
}

fn class_keys(a: &ClassSpec, b: &ClassSpec) -> Vec<KeyChange> {
    let mut k = Keys::default();
    let opt = |v: &Option<u32>| v.map_or("default".into(), |x| x.to_string());
    k.cmp("name", &a.name, &b.name, |n| {
        n.clone().unwrap_or_else(|| "none".into())
    });
    k.cmp("rate", &a.rate_bps, &b.rate_bps, |r| format_rate(*r));
    k.cmp("ceil", &a.ceil_bps, &b.ceil_bps, |c| {
        c.map_or("rate".into(), format_rate)
    });
    k.cmp("burst", &a.burst, &b.burst, opt);
    k.cmp("cburst", &a.cburst, &b.cburst, opt);
    k.cmp("prio", &a.prio, &b.prio, ToString::to_string);
    k.cmp("quantum", &a.quantum, &b.quantum, opt);
    k.cmp("limit", &a.limit, &b.limit, opt);
    k.0
}

#[cfg(test)]
mod tests;

/// `routes`, `fwmark`, `post_up`, `pre_down`: set up when the bond starts and undone when it
/// stops, so a change needs a restart.
fn routing_refusals(
    a: &super::RoutingSettings,
    b: &super::RoutingSettings,
    refuse: &mut dyn FnMut(&str, String),
) {
    let list = |v: &[String]| format!("[{}]", v.join(", "));
    if a.routes != b.routes {
        let r: Vec<String> = a.routes.iter().map(ToString::to_string).collect();
        let s: Vec<String> = b.routes.iter().map(ToString::to_string).collect();
        refuse("bond.routes", format!("{} -> {}", list(&r), list(&s)));
    }
    if a.fwmark != b.fwmark {
        let show = |m: Option<u32>| m.map_or("auto".to_owned(), |m| m.to_string());
        refuse(
            "bond.fwmark",
            format!("{} -> {}", show(a.fwmark), show(b.fwmark)),
        );
    }
    if a.post_up != b.post_up {
        refuse("bond.post_up", "changed".into());
    }
    if a.pre_down != b.pre_down {
        refuse("bond.pre_down", "changed".into());
    }
}
