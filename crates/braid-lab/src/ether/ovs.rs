//! Open vSwitch as an independent LACP partner: `ovsdb-server` and `ovs-vswitchd` started
//! INSIDE one of the lab's network namespaces, with a private database, run, log and
//! control directory, the userspace datapath (`datapath_type=netdev`: packet sockets on
//! the namespace's veths, no kernel module), so that it sees only that namespace's
//! devices and never the host's. Stopped by PID when dropped (vswitchd, then the
//! database server), also on error.
//!
//! It reads what OVS says with `ovs-appctl -t <its own unixctl socket>`: `lacp/show`
//! (per member: attached/current/defaulted/expired, actor and partner state) and
//! `bond/show` (per member: enabled, may_enable, the active member).
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::netns::{self, now, ns_command, run_ok, Proc};

/// The schema Debian's `openvswitch-common` installs.
const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// Why Open vSwitch cannot run here, or None: its programs and schema are needed.
pub fn missing() -> Option<String> {
    for prog in [
        "ovsdb-server",
        "ovs-vswitchd",
        "ovs-vsctl",
        "ovs-appctl",
        "ovsdb-tool",
    ] {
        if netns::which(prog).is_none() {
            return Some(format!(
                "`{prog}` not found: install Open vSwitch (apt-get install --no-install-recommends openvswitch-switch; scripts/setup does)"
            ));
        }
    }
    if !Path::new(SCHEMA).is_file() {
        return Some(format!("{SCHEMA} missing (openvswitch-common)"));
    }
    None
}

/// How a bond negotiates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Lacp {
    /// `lacp=active`: sends LACPDUs.
    Active,
    /// `lacp=passive`.
    Passive,
    /// `lacp=off`: a static bond (EtherChannel mode "on").
    Off,
}

impl Lacp {
    fn arg(self) -> &'static str {
        match self {
            Lacp::Active => "lacp=active",
            Lacp::Passive => "lacp=passive",
            Lacp::Off => "lacp=off",
        }
    }
}

/// One Open vSwitch instance in a namespace; stopped on drop.
pub struct Ovs {
    /// The namespace it runs in.
    pub ns: String,
    /// Its private directory (conf.db, sockets, pid files, logs).
    pub dir: PathBuf,
    vswitchd: Option<Proc>,
    ovsdb: Option<Proc>,
}

impl Ovs {
    /// Start `ovsdb-server` and `ovs-vswitchd` in `ns`, everything under `dir` (created).
    pub fn start(ns: &str, dir: &Path) -> Result<Self> {
        if let Some(why) = missing() {
            bail!("{why}");
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let db = dir.join("conf.db");
        let _ = std::fs::remove_file(&db);
        run_ok(
            Command::new("ovsdb-tool")
                .arg("create")
                .arg(&db)
                .arg(SCHEMA),
        )?;
        let mut ovs = Self {
            ns: ns.to_string(),
            dir: dir.to_path_buf(),
            vswitchd: None,
            ovsdb: None,
        };
        let mut cmd = ovs.command("ovsdb-server");
        cmd.arg(&db)
            .arg(format!("--remote=punix:{}", ovs.db_sock().display()))
            .arg(format!(
                "--pidfile={}",
                dir.join("ovsdb-server.pid").display()
            ))
            .arg(format!(
                "--unixctl={}",
                dir.join("ovsdb-server.ctl").display()
            ))
            .arg(format!(
                "--log-file={}",
                dir.join("ovsdb-server.log").display()
            ));
        ovs.ovsdb = Some(Proc::spawn(
            "ovsdb-server",
            &mut cmd,
            false,
            Some(&dir.join("ovsdb-server.out")),
        )?);
        ovs.wait_for(&ovs.db_sock(), "ovsdb-server")?;
        run_ok(ovs.vsctl_cmd().args(["--no-wait", "init"]))?;
        let mut cmd = ovs.command("ovs-vswitchd");
        cmd.arg(format!("unix:{}", ovs.db_sock().display()))
            .arg(format!(
                "--pidfile={}",
                dir.join("ovs-vswitchd.pid").display()
            ))
            .arg(format!("--unixctl={}", ovs.ctl().display()))
            .arg(format!(
                "--log-file={}",
                dir.join("ovs-vswitchd.log").display()
            ));
        ovs.vswitchd = Some(Proc::spawn(
            "ovs-vswitchd",
            &mut cmd,
            false,
            Some(&dir.join("ovs-vswitchd.out")),
        )?);
        ovs.wait_for(&ovs.ctl(), "ovs-vswitchd")?;
        Ok(ovs)
    }

    /// A command running `prog` in the namespace with OVS's directories pointed at ours.
    fn command(&self, prog: &str) -> Command {
        let mut c = ns_command(&self.ns, prog);
        for var in ["OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"] {
            c.env(var, &self.dir);
        }
        c.current_dir(&self.dir);
        c
    }

    fn db_sock(&self) -> PathBuf {
        self.dir.join("db.sock")
    }

    /// ovs-vswitchd's control socket (`ovs-appctl -t`).
    pub fn ctl(&self) -> PathBuf {
        self.dir.join("ovs-vswitchd.ctl")
    }

    fn wait_for(&mut self, sock: &Path, what: &str) -> Result<()> {
        let end = now() + Duration::from_secs(10);
        while !sock.exists() {
            netns::check_interrupted()?;
            let mut dead = None;
            for p in [self.ovsdb.as_mut(), self.vswitchd.as_mut()]
                .into_iter()
                .flatten()
            {
                if !p.running() {
                    dead = Some(p.name.clone());
                }
            }
            if let Some(name) = dead {
                bail!("{name} exited:\n{}", self.log_tail(&name));
            }
            if now() >= end {
                bail!(
                    "{what} did not create {} within 10 s:\n{}",
                    sock.display(),
                    self.log_tail(what)
                );
            }
            netns::sleep(Duration::from_millis(20))?;
        }
        Ok(())
    }

    /// The last lines of `what`'s log (ovsdb-server, ovs-vswitchd).
    pub fn log_tail(&self, what: &str) -> String {
        let text = std::fs::read_to_string(self.dir.join(format!("{what}.log")))
            .unwrap_or_default()
            + &std::fs::read_to_string(self.dir.join(format!("{what}.out"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(12)..].join("\n")
    }

    fn vsctl_cmd(&self) -> Command {
        let mut c = Command::new("ovs-vsctl");
        c.arg(format!("--db=unix:{}", self.db_sock().display()))
            .arg("--timeout=10");
        c
    }

    /// `ovs-vsctl ARGS` against this instance (waits until vswitchd applied it).
    pub fn vsctl(&self, args: &[&str]) -> Result<String> {
        run_ok(self.vsctl_cmd().args(args))
    }

    /// `ovs-appctl -t <ctl> ARGS`.
    pub fn appctl(&self, args: &[&str]) -> Result<String> {
        let mut c = Command::new("ovs-appctl");
        c.arg("-t").arg(self.ctl()).args(args);
        run_ok(&mut c)
    }

    /// A bridge `name` on the userspace datapath, acting as a plain learning switch.
    pub fn add_bridge(&self, name: &str) -> Result<()> {
        self.vsctl(&[
            "add-br",
            name,
            "--",
            "set",
            "bridge",
            name,
            "datapath_type=netdev",
            "fail_mode=standalone",
        ])?;
        Ok(())
    }

    /// A bond `bond` of `ports` on `bridge`: `lacp`, `mode` (`balance-tcp`,
    /// `balance-slb`, `active-backup`), fast LACP rate when `fast`.
    pub fn add_bond(
        &self,
        bridge: &str,
        bond: &str,
        ports: &[&str],
        lacp: Lacp,
        mode: &str,
        fast: bool,
    ) -> Result<()> {
        let mut args = vec!["add-bond", bridge, bond];
        args.extend_from_slice(ports);
        let mode_arg = format!("bond_mode={mode}");
        args.push(lacp.arg());
        args.push(&mode_arg);
        if fast {
            args.push("other_config:lacp-time=fast");
        }
        // Carrier changes count at once (no updelay/downdelay), as bonding's miimon does.
        args.push("bond_updelay=0");
        args.push("bond_downdelay=0");
        self.vsctl(&args)?;
        self.keep_qdiscs(bond)
    }

    /// An access port `port` on `bridge`.
    pub fn add_port(&self, bridge: &str, port: &str) -> Result<()> {
        self.vsctl(&["add-port", bridge, port])?;
        self.keep_qdiscs(port)
    }

    /// Tell OVS to leave the port's Linux qdiscs alone (QoS type `linux-noop`): without
    /// a QoS record it deletes the root qdisc of its ports at every reconfiguration, and
    /// with it the lab's tbf.
    fn keep_qdiscs(&self, port: &str) -> Result<()> {
        self.vsctl(&[
            "--",
            "set",
            "port",
            port,
            "qos=@q",
            "--",
            "--id=@q",
            "create",
            "qos",
            "type=linux-noop",
        ])?;
        Ok(())
    }

    /// `lacp/show BOND`, parsed.
    pub fn lacp_show(&self, bond: &str) -> Result<LacpShow> {
        Ok(parse_lacp_show(&self.appctl(&["lacp/show", bond])?))
    }

    /// `bond/show BOND`, parsed.
    pub fn bond_show(&self, bond: &str) -> Result<BondShow> {
        Ok(parse_bond_show(&self.appctl(&["bond/show", bond])?))
    }

    /// Wait (bounded) until every member of `bond` is current, attached, collecting and
    /// distributing at both actor and partner; how long it took.
    pub fn wait_negotiated(
        &self,
        bond: &str,
        members: usize,
        within: Duration,
    ) -> Result<Duration> {
        let start = now();
        let end = start + within;
        loop {
            netns::check_interrupted()?;
            let show = self.lacp_show(bond);
            if let Ok(s) = &show {
                if s.members.len() == members && s.members.iter().all(LacpMember::distributing) {
                    return Ok(start.elapsed());
                }
            }
            if now() >= end {
                bail!(
                    "LACP on {bond} in {} not negotiated within {within:?}: {}",
                    self.ns,
                    match show {
                        Ok(s) => s.summary(),
                        Err(e) => format!("{e:#}"),
                    }
                );
            }
            netns::sleep(Duration::from_millis(50))?;
        }
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        // vswitchd first (it holds the database connection), each by its own PID.
        if let Some(mut p) = self.vswitchd.take() {
            p.stop();
        }
        if let Some(mut p) = self.ovsdb.take() {
            p.stop();
        }
    }
}

/// One member in `lacp/show`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LacpMember {
    /// The port's name.
    pub name: String,
    /// The status words after the name: `current`, `expired`, `defaulted`, `attached`,
    /// `detached`.
    pub status: Vec<String>,
    /// `may_enable`.
    pub may_enable: bool,
    /// The actor state words (`activity timeout aggregation synchronized collecting
    /// distributing ...`).
    pub actor_state: Vec<String>,
    /// The partner state words.
    pub partner_state: Vec<String>,
    /// The partner's system id (MAC).
    pub partner_sys_id: String,
    /// The partner's key.
    pub partner_key: Option<u16>,
    /// The partner's port id.
    pub partner_port_id: Option<u16>,
    /// Our actor key.
    pub actor_key: Option<u16>,
}

impl LacpMember {
    /// Current, attached, may be enabled, and both actor and partner in sync, collecting
    /// and distributing, neither expired nor defaulted.
    pub fn distributing(&self) -> bool {
        let has = |v: &[String], w: &str| v.iter().any(|x| x == w);
        has(&self.status, "current")
            && has(&self.status, "attached")
            && self.may_enable
            && ["synchronized", "collecting", "distributing"]
                .iter()
                .all(|w| has(&self.actor_state, w) && has(&self.partner_state, w))
            && ["expired", "defaulted"]
                .iter()
                .all(|w| !has(&self.actor_state, w) && !has(&self.partner_state, w))
    }
}

/// `lacp/show` for one bond.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LacpShow {
    /// `status:` (`active negotiated`, `passive`, ...).
    pub status: String,
    /// Our system id.
    pub sys_id: String,
    /// `lacp_time:` (fast/slow).
    pub lacp_time: String,
    /// The members, in OVS's order.
    pub members: Vec<LacpMember>,
}

impl LacpShow {
    /// One line: each member's status and whether it distributes.
    pub fn summary(&self) -> String {
        if self.members.is_empty() {
            return format!("status {:?}, no members", self.status);
        }
        self.members
            .iter()
            .map(|m| {
                format!(
                    "{}: {} (actor {}; partner {})",
                    m.name,
                    m.status.join(" "),
                    m.actor_state.join(" "),
                    m.partner_state.join(" ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The member called `name`.
    pub fn member(&self, name: &str) -> Option<&LacpMember> {
        self.members.iter().find(|m| m.name == name)
    }
}

/// Parse `ovs-appctl lacp/show BOND` (OVS 2.x/3.x layout: `---- bond ----`, then
/// `key: value` lines, then a `member: NAME: status words` block per member, older
/// versions saying `slave`).
pub fn parse_lacp_show(text: &str) -> LacpShow {
    let mut show = LacpShow::default();
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(rest) = line
            .strip_prefix("member: ")
            .or_else(|| line.strip_prefix("slave: "))
        {
            let (name, status) = rest.split_once(':').unwrap_or((rest, ""));
            show.members.push(LacpMember {
                name: name.trim().to_string(),
                status: words(status),
                ..LacpMember::default()
            });
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match show.members.last_mut() {
            None => match key {
                "status" => show.status = value.to_string(),
                "sys_id" => show.sys_id = value.to_string(),
                "lacp_time" => show.lacp_time = value.to_string(),
                _ => {}
            },
            Some(m) => match key {
                "may_enable" => m.may_enable = value == "true",
                "actor state" => m.actor_state = words(value),
                "partner state" => m.partner_state = words(value),
                "partner sys_id" => m.partner_sys_id = value.to_string(),
                "partner key" => m.partner_key = value.parse().ok(),
                "partner port_id" => m.partner_port_id = value.parse().ok(),
                "actor key" => m.actor_key = value.parse().ok(),
                _ => {}
            },
        }
    }
    show
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// One member in `bond/show`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BondMember {
    /// The port's name.
    pub name: String,
    /// `enabled` (true) or `disabled`.
    pub enabled: bool,
    /// `may_enable`.
    pub may_enable: bool,
    /// The active member (active-backup, or the one carrying unhashed traffic).
    pub active: bool,
}

/// `bond/show` for one bond.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BondShow {
    /// `bond_mode:`.
    pub mode: String,
    /// `lacp_status:` (negotiated, configured, off).
    pub lacp_status: String,
    /// The members.
    pub members: Vec<BondMember>,
}

/// Parse `ovs-appctl bond/show BOND`.
pub fn parse_bond_show(text: &str) -> BondShow {
    let mut show = BondShow::default();
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(rest) = line
            .strip_prefix("member ")
            .or_else(|| line.strip_prefix("slave "))
        {
            if let Some((name, state)) = rest.split_once(':') {
                show.members.push(BondMember {
                    name: name.trim().to_string(),
                    enabled: state.trim() == "enabled",
                    ..BondMember::default()
                });
                continue;
            }
        }
        if line == "active member" || line == "active slave" {
            if let Some(m) = show.members.last_mut() {
                m.active = true;
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match (show.members.last_mut(), key) {
            (None, "bond_mode") => show.mode = value.to_string(),
            (None, "lacp_status") => show.lacp_status = value.to_string(),
            (Some(m), "may_enable") => m.may_enable = value == "true",
            _ => {}
        }
    }
    show
}

#[cfg(test)]
mod tests {
    use super::*;

    const LACP: &str = "---- bond0 ----
  status: active negotiated
  sys_id: 66:29:81:73:b0:44
  sys_priority: 65534
  aggregation key: 1
  lacp_time: fast

member: p1: current attached
  port_id: 2
  port_priority: 65535
  may_enable: true

  actor sys_id: 66:29:81:73:b0:44
  actor sys_priority: 65534
  actor port_id: 2
  actor port_priority: 65535
  actor key: 1
  actor state: activity timeout aggregation synchronized collecting distributing

  partner sys_id: 9e:4a:d3:42:11:43
  partner sys_priority: 65534
  partner port_id: 1
  partner port_priority: 65535
  partner key: 1
  partner state: activity timeout aggregation synchronized collecting distributing

member: p2: expired attached
  port_id: 1
  port_priority: 65535
  may_enable: false

  actor sys_id: 66:29:81:73:b0:44
  actor key: 1
  actor state: activity timeout aggregation synchronized expired

  partner sys_id: 9e:4a:d3:42:11:43
  partner port_id: 2
  partner key: 1
  partner state: activity timeout aggregation collecting distributing
";

    #[test]
    fn lacp_show_members_and_states() {
        let s = parse_lacp_show(LACP);
        assert_eq!(s.status, "active negotiated");
        assert_eq!(s.lacp_time, "fast");
        assert_eq!(s.sys_id, "66:29:81:73:b0:44");
        assert_eq!(s.members.len(), 2);
        let p1 = s.member("p1").unwrap();
        assert_eq!(p1.status, ["current", "attached"]);
        assert!(p1.may_enable && p1.distributing());
        assert_eq!(p1.partner_sys_id, "9e:4a:d3:42:11:43");
        assert_eq!(
            (p1.partner_key, p1.partner_port_id, p1.actor_key),
            (Some(1), Some(1), Some(1))
        );
        let p2 = s.member("p2").unwrap();
        assert!(!p2.may_enable);
        assert!(
            !p2.distributing(),
            "expired, and the actor is not distributing"
        );
        assert!(s.summary().contains("p2: expired attached"));
    }

    #[test]
    fn lacp_show_of_nothing_is_empty() {
        let s = parse_lacp_show("");
        assert!(s.members.is_empty());
        assert!(s.summary().contains("no members"));
        // A member that is current and attached but whose partner is not yet in sync.
        let s = parse_lacp_show(
            "member: e0: current attached\n may_enable: true\n actor state: activity synchronized collecting distributing\n partner state: activity\n",
        );
        assert!(!s.members[0].distributing());
    }

    #[test]
    fn bond_show_members() {
        let text = "---- bond0 ----
bond_mode: balance-tcp
lacp_status: negotiated
active member mac: 6a:dc:92:29:1f:11(p1)

member p1: enabled
  active member
  may_enable: true
  hash 154: 14906 kB load

member p2: disabled
  may_enable: false
";
        let s = parse_bond_show(text);
        assert_eq!(
            (s.mode.as_str(), s.lacp_status.as_str()),
            ("balance-tcp", "negotiated")
        );
        assert_eq!(
            s.members,
            [
                BondMember {
                    name: "p1".into(),
                    enabled: true,
                    may_enable: true,
                    active: true
                },
                BondMember {
                    name: "p2".into(),
                    enabled: false,
                    may_enable: false,
                    active: false
                },
            ]
        );
    }
}
