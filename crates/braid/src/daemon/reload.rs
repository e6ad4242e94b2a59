//! SIGHUP and `braid reload`: re-read the config file and make the running bond match it.
//!
//! The file is read and checked first ([`Config::load`], as `braid check`), then compared
//! with what runs ([`diff`]): a config with an error, or one that changes what cannot
//! change at run time (interface, address, mtu, keys), is refused whole and the bond runs
//! on as it was. Local addresses of new sockets are tried before anything changes, so that
//! an address in use refuses the reload too. Then, in order: paths removed, paths changed
//! (in place, with a re-opened socket, or re-created), paths added, bond-wide keys, the
//! shaper. Each change is one log line.
//!
//! What runs is the file as last loaded plus run-time `enslave`, `emancipate` and `set`
//! ([`note`]): a reload makes the bond match the file, so run-time changes that are not in
//! the file are undone (and said).
use std::path::Path;

use braid_core::bond::Bond;
use braid_core::shape::Shaper;
use braid_core::Endpoint;
use braid_core::Instant;
use braid_core::SchedulerConfig;
use serde_json::Value;

use super::{Carrier, PathIo, SockOpts};
use crate::config::diff::{self, Diff, PathChange, Reopen, ShapeChange};
use crate::config::{Config, PathSettings, Transport, UdpSettings};
use crate::control::Request;
use crate::log::{derror, dlog, dwarn};
use crate::sys::udp;

impl super::Daemon {
    /// SIGHUP: reload and log (the outcome is in the log only).
    pub(super) fn reload(&mut self, now: Instant) {
        let _ = reload(
            now,
            self.config_file.as_deref(),
            &mut self.applied,
            &mut self.ep,
            &mut self.paths,
            self.sock,
        );
    }
}

/// Reload `file` into the running bond; one log line per change (or the refusal). The
/// changes, or why nothing was changed. `opts`: how path sockets are opened.
pub(super) fn reload(
    now: Instant,
    file: Option<&Path>,
    applied: &mut Config,
    ep: &mut Endpoint,
    paths: &mut Vec<PathIo>,
    opts: SockOpts,
) -> Result<Vec<String>, String> {
    super::notify::reloading(now);
    let done = apply_file(now, file, applied, ep, paths, opts);
    super::notify::reloaded(now, done.is_ok());
    match done {
        Ok(lines) => {
            if lines.is_empty() {
                dlog!(now, "reload: no changes");
            }
            for l in &lines {
                dlog!(now, "reload: {l}");
            }
            Ok(lines)
        }
        Err(e) => {
            derror!(now, "reload: {e}");
            Err(e)
        }
    }
}

fn apply_file(
    now: Instant,
    file: Option<&Path>,
    applied: &mut Config,
    ep: &mut Endpoint,
    paths: &mut Vec<PathIo>,
    opts: SockOpts,
) -> Result<Vec<String>, String> {
    let Some(file) = file else {
        return Err("this daemon was not started from a config file".into());
    };
    let new = Config::load(file)
        .map_err(|e| format!("config not reloaded: {e}; the running bond is unchanged"))?;
    let d = diff::diff(applied, &new).map_err(|refused| {
        let keys: Vec<String> = refused.iter().map(ToString::to_string).collect();
        format!(
            "config not reloaded: {} cannot change while braid runs: {}; restart braid to apply the file (the running bond is unchanged)",
            if keys.len() == 1 { "this key" } else { "these keys" },
            keys.join(", ")
        )
    })?;
    check_sockets(&d, paths)?;
    let shaper = match &d.shape {
        ShapeChange::Added | ShapeChange::Replace(_) => {
            let Some(s) = &new.shape else {
                return Err("internal: no [shape] to build".into());
            };
            let (shaper, warnings) = Shaper::new(&s.spec, 0, ep.bond().config().mtu, now)
                .map_err(|e| format!("config not reloaded: shape: {e}"))?;
            for n in &s.notes {
                dlog!(now, "shape: {n}");
            }
            for w in &warnings {
                dwarn!(now, "shape: {w}");
            }
            Some((shaper, s.spec.link_bps.is_none()))
        }
        _ => None,
    };
    let mut lines = d.lines();
    let sealed = new.bond.encryption.is_sealed();
    lines.extend(apply_paths(now, &d, (sealed, opts), ep, paths));
    // Bond-wide keys; active-backup's primary by name, as the paths' ids may have changed.
    let mut core = new.bond.core.clone();
    if let SchedulerConfig::ActiveBackup(o) = &mut core.scheduler {
        o.primary = new
            .bond
            .primary
            .as_deref()
            .and_then(|n| ep.bond().path_by_name(n));
    }
    if !d.bond.is_empty() || ep.bond().config().scheduler != core.scheduler {
        ep.bond_mut().reconfigure(now, core);
    }
    lines.extend(apply_shape(now, &d.shape, shaper, ep.bond_mut()));
    *applied = new;
    Ok(lines)
}

/// Refuse the reload when a new local address is in use by another program or not ours
/// to bind (the same mistakes `enslave` refuses). An address a path of this bond holds
/// now is freed before it is needed; one that does not exist yet is retried later.
fn check_sockets(d: &Diff, paths: &[PathIo]) -> Result<(), String> {
    for c in &d.paths {
        let (p, needs) = match c {
            PathChange::Added(p) => (p, true),
            PathChange::Changed { new, reopen, .. } => (new, *reopen != Reopen::No),
            PathChange::Removed { .. } => continue,
        };
        let Some(u) = p.udp().filter(|_| needs) else {
            continue;
        };
        // A path that follows its device binds to the device's address when it opens.
        if u.local.ip().is_unspecified()
            || paths
                .iter()
                .any(|io| io.udp_io().is_some_and(|x| x.local == u.local))
        {
            continue;
        }
        if let Err(e) = udp::open(u.local, u.dev.as_deref(), None) {
            if matches!(
                e.err.raw_os_error(),
                Some(libc::EADDRINUSE | libc::EPERM | libc::EACCES)
            ) {
                return Err(format!(
                    "config not reloaded: path {}: {e} (the running bond is unchanged)",
                    p.name
                ));
            }
        }
    }
    Ok(())
}

/// Remove, change and add paths; returns notes on what did not go as planned.
fn apply_paths(
    now: Instant,
    d: &Diff,
    (sealed, opts): (bool, SockOpts),
    ep: &mut Endpoint,
    paths: &mut Vec<PathIo>,
) -> Vec<String> {
    let mut notes = Vec::new();
    let mut added: Vec<&PathSettings> = Vec::new();
    for c in &d.paths {
        match c {
            PathChange::Removed { name } => remove(now, name, ep, paths),
            PathChange::Changed {
                new,
                reopen: Reopen::Recreate,
                ..
            } => {
                remove(now, &new.name, ep, paths);
                added.push(new);
            }
            PathChange::Changed { new, keys, reopen } => {
                let changed = |k: &str| keys.iter().any(|c| c.key == k);
                change(now, new, &changed, *reopen == Reopen::Socket, ep, paths);
            }
            PathChange::Added(p) => added.push(p),
        }
    }
    for p in added {
        match ep.add_path(now, p.path_config(sealed), p.kind(), p.emulate.clone()) {
            Ok(id) => {
                let io = PathIo::open(now, id, p, opts);
                if let Some(e) = &io.last_error {
                    notes.push(format!(
                        "path {}: {e}; retrying every {}s",
                        p.name,
                        super::SOCKET_RETRY.as_secs()
                    ));
                }
                paths.push(io);
            }
            Err(e) => {
                let msg = format!("path {} not added: {e}", p.name);
                derror!(now, "reload: {msg}");
                notes.push(msg);
            }
        }
    }
    notes
}

fn remove(now: Instant, name: &str, ep: &mut Endpoint, paths: &mut Vec<PathIo>) {
    if let Some(id) = ep.bond().path_by_name(name) {
        let _ = ep.remove_path(now, id);
        paths.retain(|p| p.id != id);
    }
}

/// A path that stays: what `changed` (by key) of its speed, priority, peer address and
/// emulator, and (`reopen`) a new socket for a new local address or device.
fn change(
    now: Instant,
    new: &PathSettings,
    changed: &dyn Fn(&str) -> bool,
    reopen: bool,
    ep: &mut Endpoint,
    paths: &mut [PathIo],
) {
    let Some(id) = ep.bond().path_by_name(&new.name) else {
        return;
    };
    if changed("bps") {
        let _ = ep.bond_mut().set_path_bps(id, new.bps);
    }
    if changed("prio") {
        let _ = ep.bond_mut().set_path_prio(id, new.prio);
    }
    let Some(io) = paths.iter_mut().find(|p| p.id == id) else {
        return;
    };
    if let (
        Carrier::Udp(u),
        Transport::Udp(UdpSettings {
            local, remote, dev, ..
        }),
    ) = (&mut io.carrier, &new.transport)
    {
        u.set_target(now, remote, ep, id);
        if reopen {
            u.local = *local;
            u.dev = dev.clone();
        }
    }
    if reopen {
        io.reopen(now);
    }
    // A new emulator starts its outage schedule again: only when its settings changed.
    if changed("emulate") {
        ep.set_emulator(now, id, new.emulate.clone());
    }
}

/// Put on, take off, replace or change the shaper.
fn apply_shape(
    now: Instant,
    change: &ShapeChange,
    built: Option<(Shaper, bool)>,
    bond: &mut Bond,
) -> Vec<String> {
    let mut notes = Vec::new();
    let dropped = match (change, built) {
        (ShapeChange::Removed, _) => bond.replace_shaper(now, None, false),
        (ShapeChange::Added | ShapeChange::Replace(_), Some((s, auto))) => {
            bond.replace_shaper(now, Some(s), auto)
        }
        (ShapeChange::Classes(cs), _) => {
            for (spec, _) in cs {
                let r = match bond.shaper_mut() {
                    Some(sh) => sh.change_class(now, spec).map_err(|e| e.to_string()),
                    None => Err("no shaper".into()),
                };
                match r {
                    Ok(warnings) => {
                        notes.extend(warnings.iter().map(|w| format!("class {}: {w}", spec.id)))
                    }
                    Err(e) => notes.push(format!("class {} not changed: {e}", spec.id)),
                }
            }
            0
        }
        _ => 0,
    };
    if dropped > 0 {
        notes.push(format!(
            "[shape]: {dropped} packets queued in the old shaper were dropped"
        ));
    }
    notes
}

/// Keep `applied` (what runs) up to date with a run-time request that succeeded
/// (`response` is its answer).
pub(super) fn note(applied: &mut Config, req: &Request, response: &Value) {
    if response.get("ok") != Some(&Value::Bool(true)) {
        return;
    }
    match req {
        Request::Enslave {
            name,
            local,
            remote,
            bps,
            dev,
        } => {
            let Ok((local, remote)) = crate::config::check_endpoints(local, remote) else {
                return;
            };
            applied.paths.push(PathSettings {
                name: name.clone(),
                transport: Transport::Udp(UdpSettings {
                    local,
                    remote: crate::config::Remote::Addr(remote),
                    dev: dev.clone(),
                    link_mtu: crate::config::LINK_MTU_DEFAULT,
                }),
                bps: bps.unwrap_or(0),
                prio: 0,
                emulate: None,
            });
        }
        Request::Emancipate { name } => applied.paths.retain(|p| &p.name != name),
        Request::Set { name, bps } => {
            if let Some(p) = applied.paths.iter_mut().find(|p| &p.name == name) {
                p.bps = *bps;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::path::PathBuf;

    use super::*;

    /// A free loopback UDP port.
    fn port() -> u16 {
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    const SHAPE: &str = "[shape]\nrate = \"10mbit\"\ndefault = \"1:20\"\n[[shape.class]]\nid = \"1:10\"\nrate = \"1mbit\"\n[[shape.class]]\nid = \"1:20\"\nrate = \"9mbit\"\n";

    /// A bond on loopback, as `braid up` builds it from a config file (no TUN).
    struct Running {
        dir: PathBuf,
        file: PathBuf,
        applied: Config,
        ep: Endpoint,
        paths: Vec<PathIo>,
        ports: [u16; 3],
    }

    impl Running {
        fn new(tag: &str) -> Running {
            let dir =
                std::env::temp_dir().join(format!("braid-reload-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("t.toml");
            let ports = [port(), port(), port()];
            let mut r = Running {
                dir,
                file,
                applied: Config::parse(
                    "[bond]\naddress = \"10.0.0.1/30\"\nencryption = \"none\"\n",
                    "x",
                )
                .unwrap(),
                ep: Config::parse(
                    "[bond]\naddress = \"10.0.0.1/30\"\nencryption = \"none\"\n",
                    "x",
                )
                .unwrap()
                .build_endpoint(Instant::ZERO)
                .unwrap()
                .0,
                paths: Vec::new(),
                ports,
            };
            r.write(&r.text(2, "", "", SHAPE));
            let cfg = Config::load(&r.file).unwrap();
            let now = Instant::ZERO;
            let (mut ep, ids) = cfg.build_endpoint(now).unwrap();
            let spec = &cfg.shape.as_ref().unwrap().spec;
            let (shaper, _) = Shaper::new(spec, 0, 1400, now).unwrap();
            ep.bond_mut().set_shaper(now, Some(shaper), false);
            r.paths = cfg
                .paths
                .iter()
                .zip(ids)
                .map(|(p, id)| PathIo::open(now, id, p, SockOpts::default()))
                .collect();
            r.ep = ep;
            r.applied = cfg;
            r
        }

        /// A config with `n` paths on the loopback ports; `bond` in `[bond]`, `p0` in the
        /// first path.
        fn text(&self, n: usize, bond: &str, p0: &str, shape: &str) -> String {
            let mut t =
                format!("[bond]\naddress = \"10.0.0.1/30\"\nencryption = \"none\"\n{bond}\n");
            for (i, port) in self.ports.iter().take(n).enumerate() {
                t.push_str(&format!(
                    "[[path]]\nname = \"p{i}\"\nlocal = \"127.0.0.1:{port}\"\nremote = \"127.0.0.1:9\"\n{}\n",
                    if i == 0 { p0 } else { "" }
                ));
            }
            t + shape
        }

        fn write(&self, text: &str) {
            std::fs::write(&self.file, text).unwrap();
        }

        fn reload(&mut self) -> Result<Vec<String>, String> {
            reload(
                Instant::from_millis(1000),
                Some(&self.file),
                &mut self.applied,
                &mut self.ep,
                &mut self.paths,
                SockOpts::default(),
            )
        }

        fn names(&self) -> Vec<String> {
            self.ep
                .bond()
                .status()
                .paths
                .iter()
                .map(|p| p.name.clone())
                .collect()
        }

        fn rate_of(&self, class: &str) -> u64 {
            let id = braid_core::shape::ClassId::parse(class).unwrap();
            self.ep
                .bond()
                .shaper()
                .unwrap()
                .class_spec(id)
                .unwrap()
                .rate_bps
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn paths_keys_and_classes_change_while_the_bond_runs() {
        let mut r = Running::new("apply");
        assert_eq!(r.names(), ["p0", "p1"]);
        r.write(&r.text(
            3,
            "scheduler = \"eql\"\nprobe_interval_ms = 250\n",
            "bps = 20000000\nprio = 2",
            &SHAPE.replace("rate = \"1mbit\"", "rate = \"2mbit\""),
        ));
        let lines = r.reload().unwrap();
        assert_eq!(
            lines,
            [
                "bond.scheduler adaptive -> eql",
                "bond.probe_interval_ms 100 -> 250",
                "path p0: bps 0 -> 20000000, prio 0 -> 2",
                &format!("path p2 added: 127.0.0.1:{} -> 127.0.0.1:9", r.ports[2]),
                "class 1:10: rate 1Mbit -> 2Mbit",
            ]
        );
        assert_eq!(r.names(), ["p0", "p1", "p2"]);
        let st = r.ep.bond().status();
        assert_eq!(st.scheduler, "eql");
        assert_eq!(st.paths[0].bps, 20_000_000);
        assert_eq!(
            r.ep.bond().config().health.probe_interval,
            std::time::Duration::from_millis(250)
        );
        assert_eq!(r.rate_of("1:10"), 2_000_000);
        assert!(r.paths[2].is_open(), "the new path's socket is open");
        // Again: nothing to do.
        assert_eq!(r.reload().unwrap(), Vec::<String>::new());

        // A path removed, and the shaper off.
        r.write(&r.text(2, "scheduler = \"eql\"\nprobe_interval_ms = 250\n", "", ""));
        let lines = r.reload().unwrap();
        assert_eq!(
            lines,
            [
                "path p2 removed",
                "path p0: bps 20000000 -> 0, prio 2 -> 0",
                "[shape] removed"
            ]
        );
        assert_eq!(r.names(), ["p0", "p1"]);
        assert_eq!(r.paths.len(), 2);
        assert!(r.ep.bond().shaper().is_none());
    }

    #[test]
    fn only_what_changed_is_touched() {
        let mut r = Running::new("touch");
        // The daemon moved p0's speed at run time (as a serial line's measured rate does);
        // a reload that changes p0's priority only leaves the speed alone.
        let id = r.ep.bond().path_by_name("p0").unwrap();
        r.ep.bond_mut().set_path_bps(id, 123_456).unwrap();
        r.write(&r.text(2, "", "prio = 4", SHAPE));
        assert_eq!(r.reload().unwrap(), ["path p0: prio 0 -> 4"]);
        assert_eq!(r.ep.bond().status().paths[0].bps, 123_456);
    }

    #[test]
    fn a_bad_file_is_refused_and_the_bond_runs_on() {
        let mut r = Running::new("refuse");
        let before = r.applied.clone();
        // A syntax error: the file's name, line and column, as `braid check` says it.
        r.write(&(r.text(3, "", "bps = 5", SHAPE) + "oops =\n"));
        let e = r.reload().unwrap_err();
        let at = format!("{}:", r.file.display());
        assert!(e.starts_with(&format!("config not reloaded: {at}")), "{e}");
        assert!(e.contains("the running bond is unchanged"), "{e}");
        // A key that needs a restart, with changes that could be made: all refused.
        r.write(&r.text(3, "mtu = 1300", "bps = 5", SHAPE));
        let e = r.reload().unwrap_err();
        assert!(
            e.contains("cannot change while braid runs: bond.mtu (1500 -> 1300)"),
            "{e}"
        );
        // A new local address another program holds.
        let busy = UdpSocket::bind("127.0.0.1:0").unwrap();
        let taken = busy.local_addr().unwrap();
        r.write(&format!(
            "{}[[path]]\nname = \"px\"\nlocal = \"{taken}\"\nremote = \"127.0.0.1:9\"\n",
            r.text(2, "", "bps = 5", "")
        ));
        let e = r.reload().unwrap_err();
        assert!(
            e.contains(&format!("path px: bind {taken}: Address already in use")),
            "{e}"
        );
        // Nothing changed.
        assert_eq!(r.applied, before);
        assert_eq!(r.names(), ["p0", "p1"]);
        assert_eq!(r.ep.bond().status().paths[0].bps, 0);
        assert!(r.ep.bond().shaper().is_some());
        // No file: refused too.
        let e = reload(
            Instant::ZERO,
            None,
            &mut r.applied,
            &mut r.ep,
            &mut r.paths,
            SockOpts::default(),
        );
        assert!(e.is_err());
    }

    #[test]
    fn run_time_changes_not_in_the_file_are_undone() {
        let mut r = Running::new("note");
        let p = port();
        let enslave = Request::Enslave {
            name: "extra".into(),
            local: format!("127.0.0.1:{p}"),
            remote: "127.0.0.1:9".into(),
            bps: Some(7),
            dev: None,
        };
        note(&mut r.applied, &enslave, &serde_json::json!({"ok": true}));
        note(
            &mut r.applied,
            &Request::Set {
                name: "p1".into(),
                bps: 9,
            },
            &serde_json::json!({"ok": true}),
        );
        // A refused request changes nothing.
        note(
            &mut r.applied,
            &Request::Emancipate { name: "p0".into() },
            &serde_json::json!({"ok": false, "error": "x"}),
        );
        assert_eq!(r.applied.paths.len(), 3);
        let kind = braid_core::PathKind::Udp { remote: None };
        r.ep.add_path(
            Instant::ZERO,
            crate::config::path_config("extra", 7, 0),
            kind,
            None,
        )
        .unwrap();
        let lines = r.reload().unwrap();
        assert_eq!(lines, ["path extra removed", "path p1: bps 9 -> 0"]);
        assert_eq!(r.names(), ["p0", "p1"]);
    }
}
