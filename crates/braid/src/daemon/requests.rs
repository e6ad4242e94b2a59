//! Control requests (`status`, `enslave`, `emancipate`, `set`, `class-show`,
//! `class-change`) answered from the endpoint and the paths' IO, and the parts of a
//! `status` answer that are not the bond's (sessions, privileges, raw-ip lines).

use braid_core::Instant;
use braid_core::{Endpoint, PathKind};
use serde_json::{json, Value};

use super::carrier::{Carrier, IoCounters, PathIo, SockOpts, UdpIo};
use super::notices::Notices;
use super::TunCounters;
use super::SOCKET_RETRY;
use crate::config;
use crate::control::{self, Request};
use crate::log::dlog;
use crate::sys::udp_batch::BatchSocket;

/// The session and privilege figures of a `status` answer (`encryption`, `privileges`).
pub(super) fn add_session(
    v: &mut Value,
    now: Instant,
    ep: &Endpoint,
    notices: &Notices,
    privileges: &crate::privileges::Privileges,
) {
    v["encryption"] = crate::seal::status_json(ep.sealer(), now);
    if ep.sealer().enabled() {
        v["encryption"]["latest_handshake_age_us"] = json!(notices
            .handshake_age(now)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)));
    }
    v["privileges"] = privileges.json();
}

/// `raw-ip`: the bond never hears from the line (no probes), so its view of the path is
/// replaced by the line's: up while the tty is open, and the line's frame counters.
pub(super) fn raw_ip_status(v: &mut Value, ep: &Endpoint, paths: &[PathIo]) {
    let Some(st) = v.get_mut("status") else {
        return;
    };
    st["mode"] = "raw-ip".into();
    st["rx_not_ip"] = ep.raw_ip_counters().rx_not_ip.into();
    let Some(ps) = st.get_mut("paths").and_then(Value::as_array_mut) else {
        return;
    };
    for (ps, p) in ps.iter_mut().zip(paths) {
        let (Carrier::Serial(s), Some(line)) = (&p.carrier, ep.line(p.id)) else {
            continue;
        };
        ps["state"] = if s.is_open() { "up" } else { "down" }.into();
        ps["mode"] = "raw-ip".into();
        ps["tx_packets"] = line.counters().tx_frames.into();
        ps["rx_packets"] = line.counters().rx_frames.into();
    }
}

/// Answer one control request.
pub(super) fn handle_request(
    now: Instant,
    ep: &mut Endpoint,
    paths: &mut Vec<PathIo>,
    req: Request,
    (interface, address): (&str, &str),
    tun: TunCounters,
    opts: SockOpts,
) -> Value {
    let sealed = ep.sealer().enabled();
    match req {
        Request::Status => {
            let status = match serde_json::to_value(ep.bond().status()) {
                Ok(v) => v,
                Err(e) => return control::error(format!("internal: {e}")),
            };
            let io: Vec<Value> = paths.iter().map(|p| p.io_json(now, ep)).collect();
            json!({
                "ok": true,
                "version": crate::status::JSON_VERSION,
                "interface": interface,
                "address": address,
                "uptime_us": now.as_micros(),
                "status": status,
                "io": io,
                "tun_write_errors": tun.write_errors,
                "tun": tun,
            })
        }
        Request::Enslave { .. } if paths.iter().any(PathIo::is_raw_ip) => control::error(
            "this bond's serial path is in mode = \"raw-ip\": it has exactly that one path"
                .to_string(),
        ),
        Request::Enslave {
            name,
            local,
            remote,
            bps,
            dev,
        } => {
            if let Err(e) = config::check_path_name(&name) {
                return control::error(format!("name: {e}"));
            }
            let (local, remote) = match config::check_endpoints(&local, &remote) {
                Ok(x) => x,
                Err(e) => return control::error(e),
            };
            if let Some(d) = &dev {
                if let Err(e) = config::check_ifname(d) {
                    return control::error(format!("dev: {e}"));
                }
            }
            if ep.bond().path_by_name(&name).is_some() {
                return control::error(format!("a path named {name:?} already exists"));
            }
            if let Some(other) = paths
                .iter()
                .find(|p| p.udp_io().is_some_and(|u| u.local == local))
            {
                return control::error(format!(
                    "local {local} is already used by path {:?}",
                    other.name
                ));
            }
            // Open the socket first: a clear local mistake (address in use) is refused.
            let sock = BatchSocket::open(local, dev.as_deref(), opts.mark, opts.offload);
            if let Err(e) = &sock {
                if matches!(
                    e.err.raw_os_error(),
                    Some(libc::EADDRINUSE) | Some(libc::EPERM) | Some(libc::EACCES)
                ) {
                    return control::error(format!("path {name}: {e}"));
                }
            }
            let bps = bps.unwrap_or(0);
            let mut pc = config::path_config(&name, bps, 0);
            pc.max_datagram = config::udp_max_datagram(&remote, config::LINK_MTU_DEFAULT, sealed);
            let kind = PathKind::Udp {
                remote: Some(remote),
            };
            let id = match ep.add_path(now, pc, kind, None) {
                Ok(id) => id,
                Err(e) => return control::error(e),
            };
            let mut io = PathIo {
                id,
                name: name.clone(),
                carrier: Carrier::Udp(UdpIo::new(local, config::Remote::Addr(remote), dev, opts)),
                retry_at: now,
                last_error: None,
                last_errno: None,
                counters: IoCounters::default(),
            };
            let warning = match sock {
                Ok(s) => {
                    if let Carrier::Udp(u) = &mut io.carrier {
                        u.sock = Some(std::sync::Arc::new(s));
                    }
                    None
                }
                Err(e) => {
                    let msg = e.to_string();
                    io.fail(now, msg.clone());
                    Some(format!("{msg}; retrying every {}s", SOCKET_RETRY.as_secs()))
                }
            };
            dlog!(now, "path {name} ({id}) enslaved: {local} -> {remote}");
            paths.push(io);
            json!({"ok": true, "id": id.0, "warning": warning})
        }
        Request::Emancipate { name } => {
            let Some(id) = ep.bond().path_by_name(&name) else {
                return control::error(format!("no path named {name:?}"));
            };
            if let Err(e) = ep.remove_path(now, id) {
                return control::error(e);
            }
            paths.retain(|p| p.id != id);
            dlog!(now, "path {name} ({id}) emancipated");
            json!({"ok": true})
        }
        Request::Reload | Request::Down => {
            control::error("internal: reload and down are handled by the daemon")
        }
        Request::ClassShow => crate::classes::show(now, ep.bond()),
        Request::ClassChange { id, set } => {
            let r = crate::classes::change(now, ep.bond_mut(), &id, &set);
            if r.get("ok") == Some(&Value::Bool(true)) {
                dlog!(now, "class {id} changed: {}", Value::Object(set));
            }
            r
        }
        Request::Set { name, bps } => {
            let Some(id) = ep.bond().path_by_name(&name) else {
                return control::error(format!("no path named {name:?}"));
            };
            match ep.bond_mut().set_path_bps(id, bps) {
                Ok(()) => {
                    dlog!(now, "path {name} ({id}): bps = {bps}");
                    json!({"ok": true})
                }
                Err(e) => control::error(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;

    use super::*;

    fn bond_with(names: &[&str]) -> (Endpoint, Vec<PathIo>) {
        let now = Instant::ZERO;
        let cfg = config::Config::parse(
            "[bond]\naddress = \"10.0.0.1/30\"\nencryption = \"none\"\n",
            "t.toml",
        )
        .unwrap();
        let (mut ep, _) = cfg.build_endpoint(now).unwrap();
        let mut paths = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let kind = PathKind::Udp { remote: None };
            let id = ep
                .add_path(now, config::path_config(n, 0, 0), kind, None)
                .unwrap();
            // Closed sockets: these tests never send.
            paths.push(PathIo {
                id,
                name: (*n).to_owned(),
                carrier: Carrier::Udp(UdpIo::new(
                    format!("127.0.0.1:{}", 40000 + i).parse().unwrap(),
                    config::Remote::Addr("127.0.0.1:1".parse().unwrap()),
                    None,
                    SockOpts::default(),
                )),
                retry_at: Instant::FAR_FUTURE,
                last_error: None,
                last_errno: None,
                counters: IoCounters::default(),
            });
        }
        (ep, paths)
    }

    fn req(ep: &mut Endpoint, paths: &mut Vec<PathIo>, r: Request) -> Value {
        handle_request(
            Instant::ZERO,
            ep,
            paths,
            r,
            ("braid0", "10.0.0.1/30"),
            TunCounters::default(),
            SockOpts::default(),
        )
    }

    fn err_of(v: &Value) -> &str {
        assert_eq!(v["ok"], false, "{v}");
        v["error"].as_str().unwrap()
    }

    #[test]
    fn set_and_emancipate_by_name() {
        let (mut bond, mut paths) = bond_with(&["a", "b"]);
        let v = req(
            &mut bond,
            &mut paths,
            Request::Set {
                name: "b".into(),
                bps: 5000,
            },
        );
        assert_eq!(v["ok"], true);
        let s = req(&mut bond, &mut paths, Request::Status);
        assert_eq!(s["status"]["paths"][1]["bps"], 5000);
        assert_eq!(s["io"][1]["name"], "b");
        assert_eq!(s["interface"], "braid0");
        assert_eq!(s["version"], crate::status::JSON_VERSION);
        assert_eq!(
            err_of(&req(
                &mut bond,
                &mut paths,
                Request::Set {
                    name: "zz".into(),
                    bps: 1
                }
            )),
            "no path named \"zz\""
        );
        assert_eq!(
            req(
                &mut bond,
                &mut paths,
                Request::Emancipate { name: "a".into() }
            )["ok"],
            true
        );
        assert_eq!(paths.len(), 1);
        assert_eq!(bond.bond().path_by_name("a"), None);
        assert_eq!(
            err_of(&req(
                &mut bond,
                &mut paths,
                Request::Emancipate { name: "a".into() }
            )),
            "no path named \"a\""
        );
    }

    #[test]
    fn enslave_validates() {
        let (mut bond, mut paths) = bond_with(&["a"]);
        let ens = |name: &str, local: &str, remote: &str, dev: Option<&str>| Request::Enslave {
            name: name.into(),
            local: local.into(),
            remote: remote.into(),
            bps: None,
            dev: dev.map(Into::into),
        };
        let mut error = |r: Request| err_of(&req(&mut bond, &mut paths, r)).to_string();
        let (local, remote) = ("127.0.0.1:40100", "127.0.0.1:40101");
        assert_eq!(
            error(ens("a", local, remote, None)),
            "a path named \"a\" already exists"
        );
        assert_eq!(
            error(ens("", local, remote, None)),
            "name: must not be empty"
        );
        assert_eq!(
            error(ens("c", "127.0.0.1:0", remote, None)),
            "local: \"127.0.0.1:0\": port 0 is not allowed"
        );
        assert_eq!(
            error(ens("c", "127.0.0.1:40000", remote, None)),
            "local 127.0.0.1:40000 is already used by path \"a\""
        );
        let e = error(ens("c", local, remote, Some("a/b")));
        assert!(e.starts_with("dev: "), "{e}");
        assert_eq!(paths.len(), 1);
    }

    #[test]
    fn enslave_on_loopback_opens_a_socket() {
        let (mut bond, mut paths) = bond_with(&[]);
        let free = UdpSocket::bind("127.0.0.1:0").unwrap();
        let local = free.local_addr().unwrap().to_string();
        drop(free);
        let v = req(
            &mut bond,
            &mut paths,
            Request::Enslave {
                name: "n".into(),
                local,
                remote: "127.0.0.1:9".into(),
                bps: Some(1000),
                dev: None,
            },
        );
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["warning"], Value::Null);
        assert_eq!(paths.len(), 1);
        assert!(paths[0].is_open());
        assert_eq!(bond.bond().status().paths[0].bps, 1000);
        // A foreign local address is accepted with a warning and retried.
        let v = req(
            &mut bond,
            &mut paths,
            Request::Enslave {
                name: "m".into(),
                local: "192.0.2.1:7000".into(),
                remote: "192.0.2.2:7000".into(),
                bps: None,
                dev: None,
            },
        );
        assert_eq!(v["ok"], true, "{v}");
        assert!(
            v["warning"]
                .as_str()
                .unwrap()
                .starts_with("bind 192.0.2.1:7000: "),
            "{v}"
        );
        assert!(!paths[1].is_open());
    }
}
