//! braid's Ethernet bond in a lab namespace: its config (`layer = "ethernet"`,
//! `kind = "ethernet"` members, the keys of `docs/config.md`), `braid up` started and
//! stopped by PID, `braid status --json` read, and LACP's state compared with what Open
//! vSwitch says of the same ports.
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use serde::Serialize;
use serde_json::Value;

use super::net::Net;
use super::ovs::LacpShow;
use crate::netns::{self, now, ns_command, Proc};

/// The bond's interface in every lab namespace.
pub const BOND: &str = "bond0";

/// What the bond should be.
#[derive(Clone, Debug, Serialize)]
pub struct BondSpec {
    /// `scheduler`: round-robin | active-backup | xor | broadcast | 802.3ad.
    pub scheduler: String,
    /// `hash` (xor and 802.3ad).
    pub hash: Option<String>,
    /// `lacp_rate = "fast"` (802.3ad).
    pub lacp_fast: bool,
    /// `address` on bond0 (CIDR).
    pub address: String,
    /// `mac` of the bond (unset: the first member's, as bonding).
    pub mac: Option<String>,
}

impl BondSpec {
    /// A short label: `802.3ad layer3+4`.
    pub fn label(&self) -> String {
        match &self.hash {
            Some(h) => format!("{} {h}", self.scheduler),
            None => self.scheduler.clone(),
        }
    }
}

/// The daemon's config for a bond of `members` (the ports' device names; the paths are
/// called e0, e1, ...).
pub fn config(spec: &BondSpec, members: &[String]) -> String {
    let mut bond = toml::Table::new();
    bond.insert("interface".into(), BOND.into());
    bond.insert("layer".into(), "ethernet".into());
    bond.insert("address".into(), spec.address.clone().into());
    bond.insert("scheduler".into(), spec.scheduler.clone().into());
    if let Some(h) = &spec.hash {
        bond.insert("hash".into(), h.clone().into());
    }
    if spec.scheduler == "802.3ad" {
        let rate = if spec.lacp_fast { "fast" } else { "slow" };
        bond.insert("lacp_rate".into(), rate.into());
    }
    if let Some(m) = &spec.mac {
        bond.insert("mac".into(), m.clone().into());
    }
    bond.insert("encryption".into(), "none".into());
    let paths: Vec<toml::Value> = members
        .iter()
        .enumerate()
        .map(|(i, dev)| {
            let mut t = toml::Table::new();
            t.insert("name".into(), format!("e{i}").into());
            t.insert("kind".into(), "ethernet".into());
            t.insert("dev".into(), dev.clone().into());
            toml::Value::Table(t)
        })
        .collect();
    let mut root = toml::Table::new();
    root.insert("bond".into(), toml::Value::Table(bond));
    root.insert("path".into(), toml::Value::Array(paths));
    toml::to_string(&root).unwrap_or_default()
}

/// A running `braid up` with an Ethernet bond; stopped (SIGTERM, by PID) when dropped.
pub struct Braid {
    /// The namespace.
    pub ns: String,
    /// The control socket.
    pub sock: PathBuf,
    braid: PathBuf,
    proc: Proc,
}

impl Braid {
    /// Write the config for `members` as `<name>.toml` in the run's directory and start
    /// `braid up` in `ns`.
    pub fn start(
        braid: &Path,
        net: &Net,
        ns: &str,
        name: &str,
        spec: &BondSpec,
        members: &[String],
    ) -> Result<Self> {
        let conf = net.file(&format!("{name}.toml"));
        braid::files::write_private(&conf, &config(spec, members))?;
        let sock = net.file(&format!("{name}.sock"));
        let log = net.file(&format!("{name}.log"));
        let mut cmd = ns_command(ns, braid);
        cmd.arg("up")
            .arg("--config")
            .arg(&conf)
            .arg("--control")
            .arg(&sock);
        let proc = Proc::spawn(&format!("braid up ({name})"), &mut cmd, false, Some(&log))?;
        Ok(Self {
            ns: ns.to_string(),
            sock,
            braid: braid.to_path_buf(),
            proc,
        })
    }

    /// `braid status --json`.
    pub fn status(&self) -> Result<Value> {
        crate::run::status(&self.braid, &self.sock)
    }

    /// Wait (bounded) until the bond reports carrier (a usable member: with 802.3ad, one
    /// collecting and distributing) and every member `distributing` (or `active`, for
    /// the static modes); how long it took.
    pub fn wait_up(&mut self, members: usize, within: Duration) -> Result<Duration> {
        let start = now();
        loop {
            netns::check_interrupted()?;
            if !self.proc.running() {
                bail!("{} exited:\n{}", self.proc.name, self.proc.log_tail());
            }
            let last = match self.status() {
                Ok(v) => {
                    let states = member_states(&v);
                    if v["carrier"].as_bool() == Some(true)
                        && states.len() == members
                        && states.iter().all(|s| usable_state(s))
                    {
                        return Ok(start.elapsed());
                    }
                    format!("carrier {}, members {}", v["carrier"], states.join(" "))
                }
                Err(e) => format!("{e:#}"),
            };
            if start.elapsed() >= within {
                bail!(
                    "braid's bond in {} not up within {within:?} ({last})\n{}",
                    self.ns,
                    self.proc.log_tail()
                );
            }
            netns::sleep(Duration::from_millis(100))?;
        }
    }

    /// The daemon's log so far (last lines).
    pub fn log_tail(&self) -> String {
        self.proc.log_tail()
    }

    /// CPU time the daemon has used.
    pub fn cpu(&self) -> Option<Duration> {
        netns::cpu_time(self.proc.pid())
    }
}

/// A member state that carries traffic.
fn usable_state(s: &str) -> bool {
    matches!(s, "distributing" | "active" | "backup" | "up")
}

/// Each member's state in `braid status --json` (`bond.members[].state`), in id order.
pub fn member_states(v: &Value) -> Vec<String> {
    v["bond"]["members"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| m["state"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Each member's `tx_frames` (what braid's bond decided to send on it).
pub fn member_tx_frames(v: &Value) -> Vec<u64> {
    v["bond"]["members"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| m["tx_frames"].as_u64().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default()
}

/// LACP state bits by name (IEEE 802.1AX's order), whatever words a tool uses.
fn state_bits(words: &[String]) -> u8 {
    let mut bits = 0;
    for w in words {
        let w = w.to_ascii_lowercase();
        let bit = if w.starts_with("activ") {
            0
        } else if w.starts_with("timeout") || w == "short_timeout" || w == "fast" {
            1
        } else if w.starts_with("aggreg") {
            2
        } else if w.starts_with("sync") || w == "in_sync" {
            3
        } else if w.starts_with("collect") {
            4
        } else if w.starts_with("distribut") {
            5
        } else if w.starts_with("default") {
            6
        } else if w.starts_with("expire") {
            7
        } else {
            continue;
        };
        bits |= 1 << bit;
    }
    bits
}

fn names(v: &Value) -> Vec<String> {
    v["state_names"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// One member's LACP as braid and OVS each see it.
#[derive(Clone, Debug, Serialize)]
pub struct Agreement {
    /// braid's path name.
    pub member: String,
    /// The OVS port it is cabled to.
    pub ovs_port: String,
    /// braid's actor state bits (802.1AX order, bit 0 = activity) and OVS's partner
    /// state bits for that port: equal when they agree.
    pub braid_actor: u8,
    /// OVS's view of braid.
    pub ovs_partner: u8,
    /// braid's view of OVS.
    pub braid_partner: u8,
    /// OVS's own actor state.
    pub ovs_actor: u8,
    /// braid's partner system id is OVS's sys_id, and OVS's partner sys_id is braid's.
    pub systems_agree: bool,
}

impl Agreement {
    /// Both views agree on both ends' state and on who the partner is.
    pub fn agrees(&self) -> bool {
        self.braid_actor == self.ovs_partner
            && self.braid_partner == self.ovs_actor
            && self.systems_agree
    }
}

/// Compare `braid status --json` with OVS's `lacp/show` for the same ports
/// (`ovs_ports[i]` is cabled to braid's member i).
pub fn agreement(status: &Value, ovs: &LacpShow, ovs_ports: &[String]) -> Vec<Agreement> {
    let lacp = &status["bond"]["lacp"];
    let braid_system = lacp["system"].as_str().unwrap_or("").to_ascii_lowercase();
    let ports = lacp["ports"].as_array().cloned().unwrap_or_default();
    let members = status["members"].as_array().cloned().unwrap_or_default();
    ports
        .iter()
        .zip(ovs_ports)
        .enumerate()
        .map(|(i, (p, op))| {
            let o = ovs.member(op).cloned().unwrap_or_default();
            let partner_system = p["partner"]["system"]
                .as_str()
                .unwrap_or("")
                .to_ascii_lowercase();
            Agreement {
                member: members
                    .get(i)
                    .and_then(|m| m["name"].as_str())
                    .map_or_else(|| format!("e{i}"), str::to_string),
                ovs_port: op.clone(),
                braid_actor: state_bits(&names(&p["actor"])),
                ovs_partner: state_bits(&o.partner_state),
                braid_partner: state_bits(&names(&p["partner"])),
                ovs_actor: state_bits(&o.actor_state),
                systems_agree: !braid_system.is_empty()
                    && partner_system == ovs.sys_id.to_ascii_lowercase()
                    && o.partner_sys_id.to_ascii_lowercase() == braid_system,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn config_has_the_ethernet_keys() {
        let spec = BondSpec {
            scheduler: "802.3ad".into(),
            hash: Some("layer3+4".into()),
            lacp_fast: true,
            address: "10.210.0.1/24".into(),
            mac: None,
        };
        let t: toml::Table = toml::from_str(&config(&spec, &["m0".into(), "m1".into()])).unwrap();
        assert_eq!(t["bond"]["layer"].as_str(), Some("ethernet"));
        assert_eq!(t["bond"]["lacp_rate"].as_str(), Some("fast"));
        assert_eq!(t["bond"]["hash"].as_str(), Some("layer3+4"));
        assert_eq!(t["bond"]["encryption"].as_str(), Some("none"));
        let p = t["path"].as_array().unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1]["kind"].as_str(), Some("ethernet"));
        assert_eq!(p[1]["dev"].as_str(), Some("m1"));
        assert_eq!(p[1]["name"].as_str(), Some("e1"));
        let xor = BondSpec {
            scheduler: "xor".into(),
            ..spec
        };
        let t: toml::Table = toml::from_str(&config(&xor, &["m0".into()])).unwrap();
        assert!(t["bond"].get("lacp_rate").is_none());
    }

    #[test]
    fn agreement_compares_both_views() {
        let status = json!({
            "members": [{"name": "e0"}],
            "bond": {"members": [{"state": "distributing", "tx_frames": 5}],
              "lacp": {"system": "02:00:00:00:00:01", "ports": [
                {"actor": {"state_names": ["activity", "timeout", "aggregation", "synchronization", "collecting", "distributing"]},
                 "partner": {"system": "66:29:81:73:b0:44", "state_names": ["activity", "timeout", "aggregation", "synchronization", "collecting", "distributing"]}}]}}
        });
        let show = super::super::ovs::parse_lacp_show(
            "  sys_id: 66:29:81:73:b0:44\nmember: m0: current attached\n  may_enable: true\n  actor state: activity timeout aggregation synchronized collecting distributing\n  partner sys_id: 02:00:00:00:00:01\n  partner state: activity timeout aggregation synchronized collecting distributing\n",
        );
        let a = agreement(&status, &show, &["m0".into()]);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].braid_actor, 0x3f);
        assert!(a[0].agrees(), "{a:?}");
        assert_eq!(member_states(&status), ["distributing"]);
        assert_eq!(member_tx_frames(&status), [5]);
        // OVS sees braid without distributing: they disagree.
        let show2 = super::super::ovs::parse_lacp_show(
            "  sys_id: 66:29:81:73:b0:44\nmember: m0: current attached\n  actor state: activity timeout aggregation synchronized collecting distributing\n  partner sys_id: 02:00:00:00:00:01\n  partner state: activity timeout aggregation synchronized\n",
        );
        assert!(!agreement(&status, &show2, &["m0".into()])[0].agrees());
    }
}
