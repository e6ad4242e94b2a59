//! Uplinks that change, in two namespaces joined by one veth: side a's path has
//! `local = "0.0.0.0:7000"` with `dev`, side b's path has no `remote`.
//!
//! - a starts while its device has no address: the daemon runs, the path is down and
//!   `status` says why; an address appears and the path comes up;
//! - a's address changes: a's socket follows it and b learns the new address.
//!
//! Needs root (namespaces, TUN): skipped with a message otherwise, unless
//! `BRAID_REQUIRE_NETNS=1`. Namespaces `braid-<pid>-<n>-{a,b}` are deleted even on failure.
mod common;

use std::time::Duration;

use anyhow::{bail, Result};
use braid_core::crypto::{OsRng, PrivateKey};
use braid_lab::netns::{self, now, Proc, Topology};
use serde_json::Value;

fn up(
    ns: &str,
    conf: &std::path::Path,
    sock: &std::path::Path,
    log: &std::path::Path,
) -> Result<Proc> {
    let mut cmd = netns::ns_command(ns, common::braid());
    cmd.arg("up")
        .arg("--config")
        .arg(conf)
        .arg("--control")
        .arg(sock);
    Proc::spawn(&format!("braid up in {ns}"), &mut cmd, false, Some(log))
}

fn status(sock: &std::path::Path) -> Result<Value> {
    braid_lab::run::status(&common::braid(), sock)
}

/// Wait until `ok` holds for `sock`'s status, or fail with the last status.
fn wait(
    sock: &std::path::Path,
    within: Duration,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let end = now() + within;
    loop {
        let s = status(sock);
        if let Ok(v) = &s {
            if ok(v) {
                return Ok(v.clone());
            }
        }
        if now() > end {
            bail!(
                "{what}: not within {within:?}: {}",
                s.map_or_else(|e| e.to_string(), |v| v["io"].to_string())
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn path_up(v: &Value) -> bool {
    v["status"]["paths"][0]["state"] == "up"
}

#[test]
fn a_path_follows_its_device_address_and_the_peer_learns_it() {
    let Some(_one) = common::netns_or_skip("a_path_follows_its_device_address") else {
        return;
    };
    if let Err(e) = run() {
        panic!("{e:#}");
    }
}

fn run() -> Result<()> {
    let topo = Topology::new(1)?;
    let r = steps(&topo);
    if r.is_err() {
        for f in ["a.log", "b.log"] {
            let log = std::fs::read_to_string(topo.file(f)).unwrap_or_default();
            eprintln!("--- {f}\n{log}");
        }
    }
    r
}

fn steps(topo: &Topology) -> Result<()> {
    let link = topo.links[0].clone();
    let (ns_a, ns_b) = (topo.ns_a.clone(), topo.ns_b.clone());
    netns::ip(&["-n", &ns_a, "addr", "flush", "dev", &link.dev_a])?;
    let (ka, kb) = (
        PrivateKey::generate(&mut OsRng),
        PrivateKey::generate(&mut OsRng),
    );
    let conf = |me: &PrivateKey, peer: &PrivateKey, side: u8, path: &str| {
        format!(
            "[bond]\ninterface = \"braid0\"\naddress = \"10.200.0.{side}/30\"\nprivate_key = \"{}\"\npeer_public_key = \"{}\"\n[[path]]\nname = \"p0\"\n{path}\n",
            me.to_base64(),
            peer.public_key().to_base64()
        )
    };
    let a_conf = conf(
        &ka,
        &kb,
        1,
        &format!(
            "local = \"0.0.0.0:7000\"\ndev = \"{}\"\nremote = \"{}:7000\"",
            link.dev_a, link.addr_b
        ),
    );
    let b_conf = conf(&kb, &ka, 2, &format!("local = \"{}:7000\"", link.addr_b));
    let write = |name: &str, text: &str| -> Result<std::path::PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let f = topo.file(name);
        std::fs::write(&f, text)?;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600))?;
        Ok(f)
    };
    let (fa, fb) = (write("a.toml", &a_conf)?, write("b.toml", &b_conf)?);
    let (sa, sb) = (topo.file("a.sock"), topo.file("b.sock"));
    let mut b = up(&ns_b, &fb, &sb, &topo.file("b.log"))?;
    let mut a = up(&ns_a, &fa, &sa, &topo.file("a.log"))?;

    // No address on a's device: a runs, its path is down and says why.
    let want = format!(
        "dev {} has no IPv4 address (yet): the path waits for one",
        link.dev_a
    );
    let v = wait(
        &sa,
        Duration::from_secs(5),
        "a's status names the missing address",
        |v| v["io"][0]["error"].as_str() == Some(want.as_str()),
    )?;
    if path_up(&v) || v["io"][0]["socket"] != "closed" {
        bail!("a's path without an address: {}", v["io"]);
    }
    std::thread::sleep(Duration::from_millis(1200));
    if !a.running() {
        bail!("a stopped: {}", a.log_tail());
    }

    // The address appears: the path comes up, bound to it; b learns it.
    netns::ip(&[
        "-n",
        &ns_a,
        "addr",
        "add",
        &format!("{}/30", link.addr_a),
        "dev",
        &link.dev_a,
    ])?;
    let v = wait(
        &sa,
        Duration::from_secs(5),
        "a's path up once its device has an address",
        path_up,
    )?;
    let bound = format!("{}:7000", link.addr_a);
    if v["io"][0]["bound"].as_str() != Some(bound.as_str()) {
        bail!("a's socket is not bound to {bound}: {}", v["io"]);
    }
    wait(&sb, Duration::from_secs(5), "b learns a's address", |v| {
        path_up(v) && v["io"][0]["remote"].as_str() == Some(bound.as_str())
    })?;

    // A new address (as a DHCP renewal): a's socket follows it, b's path moves to it.
    // (10.201.0.5/24: outside b's /30, whose .3 is its broadcast; b gets a host route.)
    let new = std::net::Ipv4Addr::new(10, 201, 0, 5);
    let (old_a, new_a, host) = (
        format!("{}/30", link.addr_a),
        format!("{new}/24"),
        format!("{new}/32"),
    );
    netns::ip(&["-n", &ns_b, "route", "add", &host, "dev", &link.dev_b])?;
    netns::ip(&["-n", &ns_a, "addr", "del", &old_a, "dev", &link.dev_a])?;
    netns::ip(&["-n", &ns_a, "addr", "add", &new_a, "dev", &link.dev_a])?;
    let moved = format!("{new}:7000");
    wait(
        &sa,
        Duration::from_secs(5),
        "a's socket on the new address",
        |v| path_up(v) && v["io"][0]["bound"].as_str() == Some(moved.as_str()),
    )?;
    wait(
        &sb,
        Duration::from_secs(5),
        "b follows a to its new address",
        |v| path_up(v) && v["io"][0]["remote"].as_str() == Some(moved.as_str()),
    )?;
    for (p, name) in [(&mut a, "a"), (&mut b, "b")] {
        if !p.running() {
            bail!("{name} stopped: {}", p.log_tail());
        }
    }
    Ok(())
}
