//! braid's Ethernet bond (`layer = "ethernet"`, `kind = "ethernet"` members) end to end:
//! two namespaces joined by two veth pairs, a braid daemon on each side bonding its two
//! veth ends, as two hosts with two NICs cabled back to back. Pings cross the bond; the
//! members' own addresses move onto the bond and come back at `braid down` (and after a
//! crash, at the next start); active-backup fails over when a member loses its carrier;
//! two 802.3ad bonds aggregate with each other. The failover gap is printed
//! (`cargo test --test ether_bond -- --nocapture`); the bound asserted is generous (a
//! shared 2-core machine), the figures are read from the output.
//!
//! Needs root (namespaces, TAP, packet sockets); skips otherwise unless
//! `BRAID_REQUIRE_NETNS=1`.
mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use braid_lab::netns::{self, now, Topology};
use braid_lab::run::Daemons;
use serde_json::Value;

const BOND_A: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 1);
const BOND_B: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 2);

/// A side's config: bond0 over the side's two veth ends; `{peer}` in `keys` is the other
/// side's bond address.
fn config(topo: &Topology, side_a: bool, keys: &str) -> String {
    let keys = keys.replace(
        "{peer}",
        &(if side_a { BOND_B } else { BOND_A }).to_string(),
    );
    let (addr, devs) = if side_a {
        (
            BOND_A,
            topo.links
                .iter()
                .map(|l| l.dev_a.clone())
                .collect::<Vec<_>>(),
        )
    } else {
        (BOND_B, topo.links.iter().map(|l| l.dev_b.clone()).collect())
    };
    let mut c = format!(
        "[bond]\ninterface = \"bond0\"\nlayer = \"ethernet\"\naddress = \"{addr}/24\"\nencryption = \"none\"\n{keys}"
    );
    for (i, d) in devs.iter().enumerate() {
        c.push_str(&format!(
            "[[path]]\nname = \"e{i}\"\nkind = \"ethernet\"\ndev = \"{d}\"\n"
        ));
    }
    c
}

fn bring_up(keys: &str) -> Result<(Topology, Daemons)> {
    let topo = Topology::new(2)?;
    let (a, b) = (config(&topo, true, keys), config(&topo, false, keys));
    let d = Daemons::start(common::braid().as_path(), &topo, "e", &a, &b)?;
    Ok((topo, d))
}

/// Wait (at most `limit`) until `ok` holds for both sides' status.
fn wait_status(d: &mut Daemons, limit: Duration, ok: impl Fn(&Value) -> bool) -> Result<()> {
    let end = now() + limit;
    let mut last = (Value::Null, Value::Null);
    loop {
        for p in [&mut d.a, &mut d.b] {
            if !p.running() {
                bail!("{} exited:\n{}", p.name, p.log_tail());
            }
        }
        if let (Ok(a), Ok(b)) = (d.status_a(), d.status_b()) {
            if ok(&a) && ok(&b) {
                return Ok(());
            }
            last = (a, b);
        }
        if now() >= end {
            bail!(
                "not there after {limit:?}; last status:\na: {}\nb: {}\nlog a:\n{}",
                last.0,
                last.1,
                d.a.log_tail()
            );
        }
        netns::sleep(Duration::from_millis(50))?;
    }
}

fn carrier(v: &Value) -> bool {
    v["carrier"] == Value::Bool(true)
}

/// The member states of a status, in order.
fn states(v: &Value) -> Vec<String> {
    v["bond"]["members"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| m["state"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The IPv4 addresses (with prefix) on `dev` in `ns`.
fn addresses(ns: &str, dev: &str) -> Result<Vec<String>> {
    let out = netns::ip(&["-n", ns, "-j", "addr", "show", "dev", dev])?;
    let v: Value = serde_json::from_str(&out).context("ip -j addr")?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["family"] == "inet")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or("?"), a["prefixlen"]))
        .collect())
}

/// Pings from `ns` to `dst` every `interval` for `count` requests, replies waited for
/// until 300 ms after the last one; which requests were answered.
fn paced_ping(ns: &str, dst: Ipv4Addr, interval: Duration, count: u16) -> Result<Vec<bool>> {
    use socket2::{Domain, Protocol, Socket, Type};
    use std::io::Read;
    use std::net::{SocketAddr, SocketAddrV4};
    let h = netns::spawn_in_netns(ns, move || -> Result<Vec<bool>> {
        let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
        sock.set_read_timeout(Some(Duration::from_millis(1)))?;
        let id: u16 = (std::process::id() & 0xffff) as u16 ^ 0x5a5a;
        let to = SocketAddr::V4(SocketAddrV4::new(dst, 0)).into();
        let mut got = vec![false; usize::from(count)];
        let start = now();
        let mut sent: u16 = 0;
        let end = start + interval * u32::from(count) + Duration::from_millis(300);
        while now() < end {
            if sent < count && now() >= start + interval * u32::from(sent) {
                sent += 1;
                let _ = sock.send_to(&common::echo_request(id, sent), &to);
            }
            let mut buf = [0u8; 1500];
            let Ok(n) = (&sock).read(&mut buf) else {
                continue;
            };
            if let Some(seq) = common::echo_reply_seq(&buf[..n], id) {
                if let Some(g) = got.get_mut(usize::from(seq).wrapping_sub(1)) {
                    *g = true;
                }
            }
        }
        Ok(got)
    })?;
    h.join().map_err(|_| anyhow::anyhow!("pinger panicked"))?
}

/// The longest run of unanswered requests.
/// An active-backup bond with e0 active: 300 pings at 10 ms from side a to b, with `fault`
/// done to the topology a second in; which of them came back.
fn ping_through_failover(
    topo: &Topology,
    d: &mut Daemons,
    fault: impl FnOnce(&Topology) -> Result<()>,
) -> Result<Vec<bool>> {
    wait_status(d, Duration::from_secs(10), |v| {
        carrier(v) && states(v) == ["active", "backup"]
    })?;
    assert_eq!(common::ping(&topo.ns_a, BOND_B, 2)?, 2);
    let ns = topo.ns_a.clone();
    let pinger =
        std::thread::spawn(move || paced_ping(&ns, BOND_B, Duration::from_millis(10), 300));
    netns::sleep(Duration::from_millis(1000))?;
    fault(topo)?;
    pinger
        .join()
        .map_err(|_| anyhow::anyhow!("pinger thread"))?
}

fn longest_gap(got: &[bool]) -> usize {
    got.split(|&g| g).map(<[bool]>::len).max().unwrap_or(0)
}

#[test]
fn round_robin_bond_carries_pings_and_puts_addresses_back() -> Result<()> {
    let Some(_lock) =
        common::netns_or_skip("round_robin_bond_carries_pings_and_puts_addresses_back")
    else {
        return Ok(());
    };
    let (topo, mut d) = bring_up("")?;
    wait_status(&mut d, Duration::from_secs(10), carrier)?;
    // The veth ends' own addresses are on the bond now, beside its configured one.
    let on_a0 = addresses(&topo.ns_a, &topo.links[0].dev_a)?;
    let on_bond = addresses(&topo.ns_a, "bond0")?;
    assert!(on_a0.is_empty(), "{on_a0:?} left on the member");
    for want in ["10.211.0.1/24", "10.201.0.1/30", "10.201.1.1/30"] {
        assert!(
            on_bond.iter().any(|a| a == want),
            "{want} not on bond0: {on_bond:?}"
        );
    }
    let replies = common::ping(&topo.ns_a, BOND_B, 5)?;
    assert_eq!(replies, 5, "pings through the bond");
    // Each request answered once: the members' own stack never sees the frames (without
    // the guard, the far end answered both through its member and through its bond).
    let out = netns::run_ok(netns::ns_command(&topo.ns_a, "ping").args([
        "-c",
        "5",
        "-i",
        "0.2",
        "-W",
        "1",
        "10.211.0.2",
    ]))?;
    assert!(
        out.contains(" 5 received") && !out.contains("duplicates"),
        "{out}"
    );
    // A moved address answers through the bond too.
    assert_eq!(common::ping(&topo.ns_a, topo.links[1].addr_b, 3)?, 3);
    let st = d.status_a()?;
    let tx: Vec<u64> = st["bond"]["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["tx_frames"].as_u64().unwrap_or(0))
        .collect();
    assert!(
        tx.len() == 2 && tx.iter().all(|&t| t > 0),
        "round-robin uses both members: {tx:?}"
    );
    // `braid down`: the daemon goes, bond0 goes, the addresses come back.
    d.control(true, &["down"])?;
    let status = d.a.wait_exit(Duration::from_secs(10))?;
    assert!(status.success(), "{status}");
    assert_eq!(
        addresses(&topo.ns_a, &topo.links[0].dev_a)?,
        ["10.201.0.1/30"]
    );
    assert_eq!(
        addresses(&topo.ns_a, &topo.links[1].dev_a)?,
        ["10.201.1.1/30"]
    );
    assert!(
        netns::ip(&["-n", &topo.ns_a, "link", "show", "bond0"]).is_err(),
        "bond0 left behind"
    );
    Ok(())
}

#[test]
fn a_crashed_bond_puts_the_addresses_back_at_its_next_start() -> Result<()> {
    let Some(_lock) =
        common::netns_or_skip("a_crashed_bond_puts_the_addresses_back_at_its_next_start")
    else {
        return Ok(());
    };
    let (topo, mut d) = bring_up("scheduler = \"active-backup\"\n")?;
    wait_status(&mut d, Duration::from_secs(10), carrier)?;
    assert!(addresses(&topo.ns_a, &topo.links[0].dev_a)?.is_empty());
    d.stop_side(true, libc::SIGKILL, Duration::from_secs(5))?;
    // Killed: nothing put the address back.
    assert!(addresses(&topo.ns_a, &topo.links[0].dev_a)?.is_empty());
    d.start_side(true)?;
    wait_status(&mut d, Duration::from_secs(10), carrier)?;
    assert_eq!(common::ping(&topo.ns_a, BOND_B, 3)?, 3);
    d.control(true, &["down"])?;
    assert!(d.a.wait_exit(Duration::from_secs(10))?.success());
    assert_eq!(
        addresses(&topo.ns_a, &topo.links[0].dev_a)?,
        ["10.201.0.1/30"]
    );
    assert_eq!(
        addresses(&topo.ns_a, &topo.links[1].dev_a)?,
        ["10.201.1.1/30"]
    );
    let log = std::fs::read_to_string(&d.logs()[2]).unwrap_or_default();
    assert!(
        log.contains("stopped without putting its members' addresses back"),
        "{log}"
    );
    Ok(())
}

#[test]
fn active_backup_fails_over_when_the_active_member_loses_carrier() -> Result<()> {
    let Some(_lock) =
        common::netns_or_skip("active_backup_fails_over_when_the_active_member_loses_carrier")
    else {
        return Ok(());
    };
    let (topo, mut d) = bring_up("scheduler = \"active-backup\"\nprimary = \"e0\"\n")?;
    // The far end's port goes down: this side sees only its carrier go (a pulled cable),
    // right after another link changed (the far end's), when the kernel's own link
    // notices come late.
    let got = ping_through_failover(&topo, &mut d, |topo| {
        netns::ip(&[
            "-n",
            &topo.ns_b,
            "link",
            "set",
            &topo.links[0].dev_b,
            "down",
        ])?;
        Ok(())
    })?;
    let gap = longest_gap(&got);
    let lost = got.iter().filter(|g| !**g).count();
    println!(
        "active-backup failover on carrier loss: longest gap {gap} pings at 10 ms (~{} ms), {lost} of {} lost",
        gap * 10,
        got.len()
    );
    wait_status(&mut d, Duration::from_secs(5), |v| {
        states(v) == ["down", "active"]
    })?;
    // The new active member announced every address of the bond: its own and the two
    // moved from the members (a gratuitous ARP each).
    let announced = d.status_a()?["bond"]["members"][1]["control_tx"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        announced >= 3,
        "{announced} announcements on the new active member"
    );
    assert!(
        gap <= 40,
        "failover took more than 400 ms: {gap} pings lost in a row"
    );
    assert!(
        got.iter().rev().take(50).all(|g| *g),
        "pings did not come back after the failover"
    );
    Ok(())
}

#[test]
fn two_802_3ad_bonds_aggregate_and_survive_a_member_cut() -> Result<()> {
    let Some(_lock) = common::netns_or_skip("two_802_3ad_bonds_aggregate_and_survive_a_member_cut")
    else {
        return Ok(());
    };
    let (topo, mut d) =
        bring_up("scheduler = \"802.3ad\"\nlacp_rate = \"fast\"\nhash = \"layer3+4\"\n")?;
    let t0 = now();
    wait_status(&mut d, Duration::from_secs(15), |v| {
        carrier(v) && states(v) == ["distributing", "distributing"]
    })?;
    println!(
        "802.3ad: both members distributing on both sides {} ms after start",
        t0.elapsed().as_millis()
    );
    let (a, b) = (d.status_a()?, d.status_b()?);
    for p in a["bond"]["lacp"]["ports"].as_array().into_iter().flatten() {
        assert_eq!(p["partner"]["system"], b["mac"], "a's partner is b: {p}");
    }
    assert_eq!(common::ping(&topo.ns_a, BOND_B, 3)?, 3);
    topo.set_link(1, false)?;
    wait_status(&mut d, Duration::from_secs(5), |v| {
        states(v).first().map(String::as_str) == Some("distributing")
            && states(v).get(1).map(String::as_str) == Some("down")
    })?;
    assert_eq!(common::ping(&topo.ns_a, BOND_B, 3)?, 3);
    Ok(())
}

#[test]
fn ethernet_frames_cross_sealed_udp_paths() -> Result<()> {
    let Some(_lock) = common::netns_or_skip("ethernet_frames_cross_sealed_udp_paths") else {
        return Ok(());
    };
    use braid_lab::scenario::Scenario;
    let topo = Topology::new(2)?;
    let sc = Scenario::parse(
        "name = \"tap-over-udp\"\n[bond]\nscheduler = \"round-robin\"\nlayer = \"ethernet\"\n[[path]]\nname = \"p0\"\n[[path]]\nname = \"p1\"\n[[test]]\n",
    )?;
    let (cfg_a, cfg_b) = (
        sc.daemon_config(true, &topo.links, None)?,
        sc.daemon_config(false, &topo.links, None)?,
    );
    assert!(cfg_a.contains("private_key"), "sealed");
    let mut d = Daemons::start(common::braid().as_path(), &topo, "t", &cfg_a, &cfg_b)?;
    d.wait_paths_up(&["p0", "p1"], Duration::from_secs(15))?;
    let peer = Ipv4Addr::new(10, 200, 0, 2);
    assert_eq!(common::ping(&topo.ns_a, peer, 5)?, 5, "pings over the TAPs");
    // ARP crossed the bond: a's neighbour entry is b's TAP, whose MAC is derived from its
    // interface and address.
    let neigh = netns::ip(&["-n", &topo.ns_a, "neigh", "show", "dev", "braid0"])?;
    let want = braid::config::format_mac(braid::config::derived_mac("braid0", "10.200.0.2/30"));
    assert!(
        neigh.contains(&want),
        "no neighbour {want} on braid0: {neigh}"
    );
    // A TCP transfer checked byte for byte.
    let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (sent, got) = common::tcp_flow(&topo, peer, 5201, 2.0, 20 << 20, received)?;
    assert!(sent > 0 && got == sent, "sent {sent}, received {got}");
    let st = d.status_a()?;
    let tx: Vec<u64> = st["status"]["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["tx_packets"].as_u64().unwrap_or(0))
        .collect();
    assert!(
        tx.iter().all(|&t| t > 100),
        "round-robin over both paths: {tx:?}"
    );
    Ok(())
}

#[test]
fn a_member_port_that_vanishes_and_comes_back_is_taken_again() -> Result<()> {
    let Some(_lock) =
        common::netns_or_skip("a_member_port_that_vanishes_and_comes_back_is_taken_again")
    else {
        return Ok(());
    };
    let (topo, mut d) = bring_up("")?;
    wait_status(&mut d, Duration::from_secs(10), |v| {
        carrier(v) && states(v) == ["up", "up"]
    })?;
    // Deleting one end of a veth pair deletes both.
    let (a1, b1) = (&topo.links[1].dev_a, &topo.links[1].dev_b);
    netns::ip(&["-n", &topo.ns_a, "link", "del", a1])?;
    wait_status(&mut d, Duration::from_secs(5), |v| {
        v["members"][1]["socket"] == "closed"
            || states(v).get(1).map(String::as_str) == Some("down")
    })?;
    let st = d.status_a()?;
    assert_eq!(st["members"][1]["socket"], "closed", "{st}");
    assert_eq!(
        common::ping(&topo.ns_a, BOND_B, 3)?,
        3,
        "the other member carries on"
    );
    assert!(
        d.a.running() && d.b.running(),
        "a vanished port took a daemon down"
    );
    // The same names again: both daemons take the new ports within a few seconds.
    netns::ip(&[
        "-n", &topo.ns_a, "link", "add", a1, "type", "veth", "peer", "name", b1, "netns",
        &topo.ns_b,
    ])?;
    netns::ip(&["-n", &topo.ns_a, "link", "set", a1, "up"])?;
    netns::ip(&["-n", &topo.ns_b, "link", "set", b1, "up"])?;
    wait_status(&mut d, Duration::from_secs(10), |v| {
        carrier(v) && states(v) == ["up", "up"]
    })?;
    let before: u64 = d.status_a()?["bond"]["members"][1]["tx_frames"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(common::ping(&topo.ns_a, BOND_B, 6)?, 6);
    let after: u64 = d.status_a()?["bond"]["members"][1]["tx_frames"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        after > before,
        "the new port carries frames again ({before} -> {after})"
    );
    Ok(())
}

#[test]
fn a_member_missing_at_start_is_taken_when_it_appears() -> Result<()> {
    let Some(_lock) = common::netns_or_skip("a_member_missing_at_start_is_taken_when_it_appears")
    else {
        return Ok(());
    };
    let topo = Topology::new(2)?;
    let (a1, b1) = (&topo.links[1].dev_a, &topo.links[1].dev_b);
    netns::ip(&["-n", &topo.ns_a, "link", "del", a1])?;
    let (ca, cb) = (config(&topo, true, ""), config(&topo, false, ""));
    let mut d = Daemons::start(common::braid().as_path(), &topo, "m", &ca, &cb)?;
    wait_status(&mut d, Duration::from_secs(10), |v| {
        carrier(v) && v["members"][1]["socket"] == "closed"
    })?;
    assert_eq!(common::ping(&topo.ns_a, BOND_B, 3)?, 3);
    netns::ip(&[
        "-n", &topo.ns_a, "link", "add", a1, "type", "veth", "peer", "name", b1, "netns",
        &topo.ns_b,
    ])?;
    netns::ip(&["-n", &topo.ns_a, "link", "set", a1, "up"])?;
    netns::ip(&["-n", &topo.ns_b, "link", "set", b1, "up"])?;
    wait_status(&mut d, Duration::from_secs(10), |v| {
        carrier(v) && states(v) == ["up", "up"]
    })?;
    assert_eq!(common::ping(&topo.ns_a, BOND_B, 4)?, 4);
    Ok(())
}

#[test]
fn the_arp_monitor_fails_over_from_a_member_that_went_silent() -> Result<()> {
    let Some(_lock) =
        common::netns_or_skip("the_arp_monitor_fails_over_from_a_member_that_went_silent")
    else {
        return Ok(());
    };
    let (topo, mut d) = bring_up(
        "scheduler = \"active-backup\"\nprimary = \"e0\"\narp_interval = 100\narp_ip_target = [\"{peer}\"]\n",
    )?;
    // Member 0 goes silent both ways, its carrier up: only the ARP monitor can tell.
    let got = ping_through_failover(&topo, &mut d, |topo| {
        for (ns, dev) in [
            (&topo.ns_a, &topo.links[0].dev_a),
            (&topo.ns_b, &topo.links[0].dev_b),
        ] {
            braid_lab::ether::net::silence(ns, dev, true, None)?;
        }
        Ok(())
    })?;
    let gap = longest_gap(&got);
    println!(
        "active-backup, ARP monitor every 100 ms, a member silent with its carrier up: longest gap {gap} pings at 10 ms (~{} ms)",
        gap * 10
    );
    let st = d.status_a()?;
    assert_eq!(st["bond"]["members"][0]["arp_up"], false, "{st}");
    assert!(
        gap <= 100,
        "no failover within 1 s: {gap} pings lost in a row"
    );
    assert!(
        got.iter().rev().take(50).all(|g| *g),
        "pings did not come back"
    );
    Ok(())
}
