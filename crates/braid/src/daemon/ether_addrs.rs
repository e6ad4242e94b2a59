//! An Ethernet bond takes over its members' addresses and routes, and gives them back.
//!
//! [`take_over`] reads each member's IPv4 and IPv6 addresses (`ip -j addr show dev M`,
//! link-local and host-scope ones left where they are) and its routes in the main table
//! (`ip -j -4/-6 route show dev M`; the kernel's own prefix routes, `proto kernel`, are
//! not copied: they follow the addresses; multipath, nexthop-object and non-unicast
//! routes are left alone). It refuses a member that carries a default route unless
//! `take_default_route`. Then it writes what it is about to move to a JSON state file
//! (a temporary file renamed into place), and moves: routes and addresses off the member,
//! addresses (IPv6 with `nodad`: they were already in use) and routes onto the bond; and
//! the member is made a port as bonding's slaves are (`arp_ignore = 8`, `disable_ipv6 =
//! 1`: see [`MEMBER_SYSCTLS`]), its settings before recorded too, and its frames are kept
//! from the host stack (`ether_guard`: an nftables netdev ingress chain that drops
//! everything after braid's packet socket has read it).
//!
//! [`Moved::restore`] (or dropping the [`Moved`]) puts everything back on the members and
//! removes the state file; [`repair`] does the same from the file a crashed run left.
//! Putting back uses `ip addr replace`/`ip route replace`, so it can run on any
//! half-done state. `ip` commands run through [`super::hooks::ip`] (bounded in time).
use std::fmt;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use braid_core::Instant;
use serde::{Deserialize, Serialize};

use super::hooks;
use crate::log::dwarn;

/// Why addresses could not be moved or put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddrError {
    /// A member carries a default route and `take_default_route` is false.
    DefaultRoute {
        /// The member's device.
        member: String,
        /// The route, as `ip route` shows it.
        route: String,
    },
    /// An `ip` command failed (its words).
    Ip(String),
    /// What `ip -j` printed was not understood.
    Parse {
        /// The command.
        command: String,
        /// Why.
        detail: String,
    },
    /// The state file could not be written, read or understood.
    State {
        /// The file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// Some addresses or routes could not be put back (each in words).
    Restore(Vec<String>),
}

impl fmt::Display for AddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrError::DefaultRoute { member, route } => write!(
                f,
                "member {member} carries the host's default route ({route}): the bond would take it over, and the host's way out with it; set take_default_route = true in [bond] to allow that, or leave {member} out"
            ),
            AddrError::Ip(e) => write!(f, "moving addresses: {e}"),
            AddrError::Parse { command, detail } => {
                write!(f, "cannot read the output of `{command}`: {detail}")
            }
            AddrError::State { path, detail } => {
                write!(f, "address state file {}: {detail}", path.display())
            }
            AddrError::Restore(what) => {
                write!(f, "could not put back: {}", what.join("; "))
            }
        }
    }
}

impl std::error::Error for AddrError {}

/// One address of a member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Addr {
    local: IpAddr,
    prefixlen: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    broadcast: Option<IpAddr>,
    #[serde(default)]
    noprefixroute: bool,
}

/// One route through a member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Route {
    v6: bool,
    /// `default` or `PREFIX/LEN` (or a bare address), as `ip` prints it.
    dst: String,
    #[serde(default)]
    gateway: Option<IpAddr>,
    #[serde(default)]
    metric: Option<u32>,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    prefsrc: Option<IpAddr>,
    #[serde(default)]
    onlink: bool,
}

/// What one member had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Member {
    dev: String,
    addrs: Vec<Addr>,
    routes: Vec<Route>,
    /// Settings changed while the member is in the bond, with their values before.
    #[serde(default)]
    sysctls: Vec<Sysctl>,
    /// The host stack kept off the member (`ether_guard`) while bonded.
    #[serde(default)]
    guarded: bool,
}

/// A setting under `/proc/sys` (in the caller's network namespace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Sysctl {
    /// Below `/proc/sys`: `net/ipv4/conf/eth1/arp_ignore`.
    path: String,
    /// The value before.
    old: String,
    /// The value while bonded.
    new: String,
}

/// What a member port is set to while bonded, as the kernel's bonding makes its slaves:
/// no ARP replies of its own (`arp_ignore = 8`: the host stack still sees the broadcasts
/// the member receives, and would answer for the bond's address with the member's MAC),
/// no IPv6 of its own (`disable_ipv6 = 1`: no link-local address, no router
/// advertisements taken, so no address or default route comes back on the member).
const MEMBER_SYSCTLS: [(&str, &str, &str); 2] = [
    ("net/ipv4/conf", "arp_ignore", "8"),
    ("net/ipv6/conf", "disable_ipv6", "1"),
];

impl Sysctl {
    fn file(&self) -> PathBuf {
        Path::new("/proc/sys").join(&self.path)
    }

    fn set(&self, value: &str) -> Result<(), String> {
        std::fs::write(self.file(), value)
            .map_err(|e| format!("set {} = {value}: {e}", self.path.replace('/', ".")))
    }
}

/// The member settings [`MEMBER_SYSCTLS`] with their current values (one that does not
/// exist, IPv6 on a host without it, is left out).
fn member_sysctls(dev: &str) -> Result<Vec<Sysctl>, AddrError> {
    if dev.is_empty() || dev.contains('/') || dev == "." || dev == ".." {
        return Err(AddrError::Ip(format!(
            "bad device name `{}`",
            dev.escape_default()
        )));
    }
    let mut out = Vec::new();
    for (dir, leaf, new) in MEMBER_SYSCTLS {
        let path = format!("{dir}/{dev}/{leaf}");
        match std::fs::read_to_string(Path::new("/proc/sys").join(&path)) {
            Ok(old) => out.push(Sysctl {
                path,
                old: old.trim().to_owned(),
                new: new.to_owned(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(AddrError::Ip(format!(
                    "read {}: {e}",
                    path.replace('/', ".")
                )))
            }
        }
    }
    Ok(out)
}

/// The state file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct State {
    version: u32,
    bond: String,
    members: Vec<Member>,
}

const STATE_VERSION: u32 = 1;

/// `ip -j addr show` output, the parts read.
#[derive(Deserialize)]
struct IpLink {
    #[serde(default)]
    addr_info: Vec<IpAddrInfo>,
}

#[derive(Deserialize)]
struct IpAddrInfo {
    #[serde(default)]
    family: String,
    #[serde(default)]
    local: Option<String>,
    #[serde(default)]
    prefixlen: Option<u8>,
    #[serde(default)]
    broadcast: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    noprefixroute: bool,
}

/// `ip -j route show` output, the parts read.
#[derive(Deserialize)]
struct IpRoute {
    dst: String,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    metric: Option<u32>,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    prefsrc: Option<String>,
    #[serde(default)]
    flags: Vec<String>,
    #[serde(default)]
    nhid: Option<u32>,
    #[serde(default)]
    multipath: Option<serde_json::Value>,
}

fn parse_ip(what: &str, s: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("`{}` is not an address", s.escape_default()))
        .map_err(|e| format!("{what}: {e}"))
}

/// The addresses to move from `ip -j addr show dev X` output: IPv4 and IPv6, not
/// link-local, not host scope.
fn parse_addrs(json: &str) -> Result<Vec<Addr>, String> {
    let links: Vec<IpLink> = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for a in links.iter().flat_map(|l| &l.addr_info) {
        if a.family != "inet" && a.family != "inet6" {
            continue;
        }
        if matches!(a.scope.as_deref(), Some("link") | Some("host")) {
            continue;
        }
        let (Some(local), Some(prefixlen)) = (&a.local, a.prefixlen) else {
            return Err("an address without `local` or `prefixlen`".into());
        };
        let local = parse_ip("local", local)?;
        let link_local = match local {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => v6.is_unicast_link_local(),
        };
        if link_local || local.is_loopback() {
            continue;
        }
        let max = if local.is_ipv4() { 32 } else { 128 };
        if prefixlen > max {
            return Err(format!("prefix length {prefixlen} of {local}"));
        }
        let broadcast = match &a.broadcast {
            Some(b) if local.is_ipv4() => Some(parse_ip("broadcast", b)?),
            _ => None,
        };
        out.push(Addr {
            local,
            prefixlen,
            broadcast,
            noprefixroute: a.noprefixroute,
        });
    }
    Ok(out)
}

/// The routes to move from `ip -j [-6] route show dev X` output: not the kernel's own
/// (prefix routes of the addresses, IPv6 link-local), unicast, with one next hop.
fn parse_routes(json: &str, v6: bool) -> Result<Vec<Route>, String> {
    let routes: Vec<IpRoute> = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for r in routes {
        if r.protocol.as_deref() == Some("kernel")
            || r.kind.as_deref().is_some_and(|k| k != "unicast")
            || r.nhid.is_some()
            || r.multipath.is_some()
            || r.dst.starts_with("fe80:")
            || r.dst.starts_with("ff00:")
        {
            continue;
        }
        if r.dst.is_empty() || r.dst.starts_with('-') || r.dst.contains(char::is_whitespace) {
            return Err(format!("a route to `{}`", r.dst.escape_default()));
        }
        out.push(Route {
            v6,
            dst: r.dst,
            gateway: r
                .gateway
                .as_deref()
                .map(|g| parse_ip("gateway", g))
                .transpose()?,
            metric: r.metric,
            protocol: r.protocol.filter(|p| is_word(p)),
            scope: r.scope.filter(|s| is_word(s)),
            prefsrc: r
                .prefsrc
                .as_deref()
                .map(|s| parse_ip("prefsrc", s))
                .transpose()?,
            onlink: r.flags.iter().any(|f| f == "onlink"),
        });
    }
    // Routes without a gateway first: a gateway may be reachable only through them.
    out.sort_by_key(|r| r.gateway.is_some());
    Ok(out)
}

/// A protocol or scope name `ip` can take back (a word or a number).
fn is_word(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Addr {
    fn cidr(&self) -> String {
        format!("{}/{}", self.local, self.prefixlen)
    }

    fn fam(&self) -> &'static str {
        if self.local.is_ipv4() {
            "-4"
        } else {
            "-6"
        }
    }

    /// `ip addr replace` arguments putting it on `dev`.
    fn add_args(&self, dev: &str) -> Vec<String> {
        let mut a = vec![
            self.fam().into(),
            "addr".into(),
            "replace".into(),
            self.cidr(),
        ];
        if let Some(b) = self.broadcast {
            a.extend(["broadcast".into(), b.to_string()]);
        }
        a.extend(["dev".into(), dev.into()]);
        if self.noprefixroute {
            a.push("noprefixroute".into());
        }
        if !self.local.is_ipv4() {
            a.push("nodad".into());
        }
        a
    }

    fn del_args(&self, dev: &str) -> Vec<String> {
        vec![
            self.fam().into(),
            "addr".into(),
            "del".into(),
            self.cidr(),
            "dev".into(),
            dev.into(),
        ]
    }
}

impl Route {
    fn fam(&self) -> &'static str {
        if self.v6 {
            "-6"
        } else {
            "-4"
        }
    }

    /// The route's selector: destination, next hop, device, metric.
    fn selector(&self, dev: &str) -> Vec<String> {
        let mut a = vec![self.dst.clone()];
        if let Some(g) = self.gateway {
            a.extend(["via".into(), g.to_string()]);
        }
        a.extend(["dev".into(), dev.into()]);
        if let Some(m) = self.metric {
            a.extend(["metric".into(), m.to_string()]);
        }
        a
    }

    fn add_args(&self, dev: &str) -> Vec<String> {
        let mut a = vec![self.fam().into(), "route".into(), "replace".into()];
        a.extend(self.selector(dev));
        if let Some(p) = &self.protocol {
            a.extend(["proto".into(), p.clone()]);
        }
        if let Some(s) = &self.scope {
            a.extend(["scope".into(), s.clone()]);
        }
        if let Some(s) = self.prefsrc {
            a.extend(["src".into(), s.to_string()]);
        }
        if self.onlink {
            a.push("onlink".into());
        }
        a
    }

    fn del_args(&self, dev: &str) -> Vec<String> {
        let mut a = vec![self.fam().into(), "route".into(), "del".into()];
        a.extend(self.selector(dev));
        a
    }

    /// As `ip route` shows it, for messages.
    fn describe(&self, dev: &str) -> String {
        self.selector(dev).join(" ")
    }
}

fn ip(args: &[String]) -> Result<String, String> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    hooks::ip(&args).map_err(|e| e.to_string())
}

/// What member `dev` has that moves to the bond.
fn read_member(dev: &str) -> Result<Member, AddrError> {
    let show = |args: &[&str]| -> Result<String, AddrError> {
        hooks::ip(args).map_err(|e| AddrError::Ip(e.to_string()))
    };
    let parse_err = |cmd: &str, detail: String| AddrError::Parse {
        command: format!("{cmd} {dev}"),
        detail,
    };
    let addrs = parse_addrs(&show(&["-j", "addr", "show", "dev", dev])?)
        .map_err(|e| parse_err("ip -j addr show dev", e))?;
    let mut routes = parse_routes(&show(&["-4", "-j", "route", "show", "dev", dev])?, false)
        .map_err(|e| parse_err("ip -4 -j route show dev", e))?;
    // No IPv6 on this host: no IPv6 routes.
    if let Ok(out) = hooks::ip(&["-6", "-j", "route", "show", "dev", dev]) {
        routes
            .extend(parse_routes(&out, true).map_err(|e| parse_err("ip -6 -j route show dev", e))?);
    }
    Ok(Member {
        dev: dev.to_owned(),
        addrs,
        routes,
        sysctls: member_sysctls(dev)?,
        guarded: true,
    })
}

/// Write `state` to `path` atomically (a temporary file beside it, renamed).
fn write_state(path: &Path, state: &State) -> Result<(), AddrError> {
    let err = |detail: String| AddrError::State {
        path: path.to_owned(),
        detail,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| err(format!("cannot create its directory: {e}")))?;
    }
    let bytes = serde_json::to_vec_pretty(state).map_err(|e| err(e.to_string()))?;
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    let tmp = PathBuf::from(name);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(format!("cannot write: {e}"))
    })
}

/// The addresses and routes moved onto the bond. [`Moved::restore`] puts them back;
/// dropping it does too.
#[derive(Debug)]
pub struct Moved {
    state: State,
    file: PathBuf,
    /// True once put back (restore runs once).
    done: bool,
}

/// Move the addresses and routes of `members` onto `bond` (which is up), recording them
/// in `state_file` first. An error leaves the members as they were (and no state file).
pub fn take_over(
    bond: &str,
    members: &[String],
    state_file: &Path,
    take_default_route: bool,
) -> Result<Moved, AddrError> {
    if state_file.exists() {
        return Err(AddrError::State {
            path: state_file.to_owned(),
            detail: "left by an earlier run that was not repaired (repair() first)".into(),
        });
    }
    let mut state = State {
        version: STATE_VERSION,
        bond: bond.to_owned(),
        members: Vec::new(),
    };
    for dev in members {
        let m = read_member(dev)?;
        if !take_default_route {
            if let Some(r) = m.routes.iter().find(|r| r.dst == "default") {
                return Err(AddrError::DefaultRoute {
                    member: dev.clone(),
                    route: r.describe(dev),
                });
            }
        }
        state.members.push(m);
    }
    write_state(state_file, &state)?;
    let mut moved = Moved {
        state,
        file: state_file.to_owned(),
        done: false,
    };
    if let Err(e) = moved.apply() {
        // Put back what was moved; the error that stopped us is the one to report.
        let _ = moved.put_back();
        return Err(e);
    }
    Ok(moved)
}

/// Put back what a crashed run's `state_file` records. `Ok(false)` when there is no
/// such file; the file is removed once done.
pub fn repair(state_file: &Path) -> Result<bool, AddrError> {
    let bytes = match std::fs::read(state_file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => {
            return Err(AddrError::State {
                path: state_file.to_owned(),
                detail: format!("cannot read: {e}"),
            })
        }
    };
    let state: State = serde_json::from_slice(&bytes)
        .ok()
        .filter(|s: &State| s.version == STATE_VERSION)
        .ok_or_else(|| AddrError::State {
            path: state_file.to_owned(),
            detail: "not a braid address state file (check it, put the addresses back by hand, and remove it)".into(),
        })?;
    let mut moved = Moved {
        state,
        file: state_file.to_owned(),
        done: false,
    };
    moved.put_back().map(|()| true)
}

impl Moved {
    /// Put everything back on the members and remove the state file.
    pub fn restore(mut self) -> Result<(), AddrError> {
        self.put_back()
    }

    /// The addresses moved onto the bond (what it announces on failover, beside its own).
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.state
            .members
            .iter()
            .flat_map(|m| m.addrs.iter().map(|a| a.local))
    }

    /// What was moved, in words for the log: `eth1: 10.0.0.1/24, route default via
    /// 10.0.0.254 -> bond0`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for m in &self.state.members {
            let mut what: Vec<String> = m.addrs.iter().map(Addr::cidr).collect();
            what.extend(
                m.routes
                    .iter()
                    .map(|r| format!("route {}", r.describe(&m.dev))),
            );
            if what.is_empty() {
                what.push("nothing".into());
            }
            parts.push(format!("{}: {}", m.dev, what.join(", ")));
        }
        format!("{} -> {}", parts.join("; "), self.state.bond)
    }

    fn apply(&self) -> Result<(), AddrError> {
        let bond = &self.state.bond;
        let run = |args: Vec<String>| ip(&args).map(|_| ()).map_err(AddrError::Ip);
        for m in &self.state.members {
            for r in m.routes.iter().rev() {
                run(r.del_args(&m.dev))?;
            }
            // Secondary addresses first: deleting a primary takes its secondaries along.
            for a in m.addrs.iter().rev() {
                run(a.del_args(&m.dev))?;
            }
        }
        for m in &self.state.members {
            for a in &m.addrs {
                run(a.add_args(bond))?;
            }
        }
        for m in &self.state.members {
            for r in &m.routes {
                run(r.add_args(bond))?;
            }
        }
        for m in &self.state.members {
            for c in &m.sysctls {
                // Belt and braces beside the guard below (which keeps the member's stack
                // from seeing any frame): a read-only /proc/sys (systemd's
                // ProtectKernelTunables) is said, not fatal.
                if let Err(e) = c.set(&c.new) {
                    dwarn!(
                        Instant::ZERO,
                        "member {}: {e} (the guard keeps the host stack off it all the same)",
                        m.dev
                    );
                }
            }
            if m.guarded {
                super::ether_guard::guard(bond, &m.dev).map_err(AddrError::Ip)?;
            }
        }
        Ok(())
    }

    /// Off the bond (failures ignored: it may be gone), back on each member (failures
    /// collected), then the state file removed. Runs once.
    fn put_back(&mut self) -> Result<(), AddrError> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        let bond = &self.state.bond;
        let mut failed = Vec::new();
        for m in &self.state.members {
            for r in m.routes.iter().rev() {
                let _ = ip(&r.del_args(bond));
            }
            for a in m.addrs.iter().rev() {
                let _ = ip(&a.del_args(bond));
            }
        }
        if self.state.members.iter().any(|m| m.guarded) {
            if let Err(e) = super::ether_guard::unguard(bond) {
                failed.push(e);
            }
        }
        for m in &self.state.members {
            // Settings first: an IPv6 address cannot go back while IPv6 is off.
            for c in &m.sysctls {
                // Never changed (a read-only /proc/sys), or already back: nothing to do.
                let now = std::fs::read_to_string(c.file()).unwrap_or_default();
                if now.trim() == c.old {
                    continue;
                }
                if let Err(e) = c.set(&c.old) {
                    failed.push(e);
                }
            }
            for a in &m.addrs {
                if let Err(e) = ip(&a.add_args(&m.dev)) {
                    failed.push(e);
                }
            }
            for r in &m.routes {
                if let Err(e) = ip(&r.add_args(&m.dev)) {
                    failed.push(e);
                }
            }
        }
        match std::fs::remove_file(&self.file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => failed.push(format!("remove {}: {e}", self.file.display())),
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(AddrError::Restore(failed))
        }
    }
}

impl Drop for Moved {
    fn drop(&mut self) {
        if let Err(e) = self.put_back() {
            // The daemon's log carries its own clock; at drop only the order matters.
            dwarn!(Instant::ZERO, "{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADDRS: &str = r#"[{"ifindex":2,"ifname":"eth1","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"addr_info":[
        {"family":"inet","local":"10.0.0.1","prefixlen":24,"broadcast":"10.0.0.255","scope":"global","label":"eth1","valid_life_time":4294967295,"preferred_life_time":4294967295},
        {"family":"inet","local":"169.254.3.4","prefixlen":16,"scope":"global"},
        {"family":"inet6","local":"2001:db8::1","prefixlen":64,"scope":"global","noprefixroute":true},
        {"family":"inet6","local":"fe80::1","prefixlen":64,"scope":"link"}]}]"#;

    #[test]
    fn addresses_but_not_link_local() {
        let a = parse_addrs(ADDRS).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].cidr(), "10.0.0.1/24");
        assert_eq!(
            a[0].add_args("bond0"),
            [
                "-4",
                "addr",
                "replace",
                "10.0.0.1/24",
                "broadcast",
                "10.0.0.255",
                "dev",
                "bond0"
            ]
        );
        assert_eq!(
            a[1].add_args("bond0"),
            [
                "-6",
                "addr",
                "replace",
                "2001:db8::1/64",
                "dev",
                "bond0",
                "noprefixroute",
                "nodad"
            ]
        );
        assert_eq!(
            a[1].del_args("eth1"),
            ["-6", "addr", "del", "2001:db8::1/64", "dev", "eth1"]
        );
        assert_eq!(parse_addrs("[]").unwrap(), []);
    }

    #[test]
    fn bad_address_output_is_an_error() {
        assert!(parse_addrs("not json").is_err());
        assert!(
            parse_addrs(r#"[{"addr_info":[{"family":"inet","local":"x","prefixlen":24}]}]"#)
                .is_err()
        );
        assert!(parse_addrs(
            r#"[{"addr_info":[{"family":"inet","local":"10.0.0.1","prefixlen":33}]}]"#
        )
        .is_err());
        assert!(parse_addrs(r#"[{"addr_info":[{"family":"inet","prefixlen":24}]}]"#).is_err());
    }

    const ROUTES4: &str = r#"[{"dst":"default","gateway":"10.0.0.254","protocol":"dhcp","metric":100,"flags":[]},
        {"dst":"10.0.0.0/24","protocol":"kernel","scope":"link","prefsrc":"10.0.0.1","flags":[]},
        {"dst":"10.9.0.0/16","scope":"link","flags":[]},
        {"dst":"192.168.7.0/24","gateway":"10.9.0.1","flags":["onlink"]},
        {"type":"blackhole","dst":"10.66.0.0/16","flags":[]},
        {"dst":"10.77.0.0/16","nhid":5,"flags":[]}]"#;

    #[test]
    fn routes_but_not_the_kernels() {
        let r = parse_routes(ROUTES4, false).unwrap();
        let dsts: Vec<&str> = r.iter().map(|r| r.dst.as_str()).collect();
        // Without a gateway first.
        assert_eq!(dsts, ["10.9.0.0/16", "default", "192.168.7.0/24"]);
        assert_eq!(
            r[1].add_args("bond0"),
            [
                "-4",
                "route",
                "replace",
                "default",
                "via",
                "10.0.0.254",
                "dev",
                "bond0",
                "metric",
                "100",
                "proto",
                "dhcp"
            ]
        );
        assert_eq!(
            r[1].del_args("eth1"),
            [
                "-4",
                "route",
                "del",
                "default",
                "via",
                "10.0.0.254",
                "dev",
                "eth1",
                "metric",
                "100"
            ]
        );
        assert_eq!(
            r[0].add_args("bond0"),
            [
                "-4",
                "route",
                "replace",
                "10.9.0.0/16",
                "dev",
                "bond0",
                "scope",
                "link"
            ]
        );
        assert!(r[2].add_args("bond0").ends_with(&["onlink".to_string()]));
    }

    #[test]
    fn ipv6_routes() {
        let json = r#"[{"dst":"2001:db8::/64","protocol":"kernel","metric":256,"flags":[],"pref":"medium"},
            {"dst":"fe80::/64","protocol":"kernel","metric":256,"flags":[],"pref":"medium"},
            {"dst":"default","gateway":"fe80::1","protocol":"ra","metric":1024,"flags":[],"pref":"medium"}]"#;
        let r = parse_routes(json, true).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0].add_args("bond0"),
            [
                "-6", "route", "replace", "default", "via", "fe80::1", "dev", "bond0", "metric",
                "1024", "proto", "ra"
            ]
        );
    }

    #[test]
    fn odd_route_output_is_refused_or_cleaned() {
        assert!(parse_routes(r#"[{"dst":"-x","flags":[]}]"#, false).is_err());
        assert!(parse_routes(r#"[{"dst":"10.0.0.0/8","gateway":"nope"}]"#, false).is_err());
        assert!(parse_routes(r#"{"dst":"default"}"#, false).is_err());
        // A protocol that is not a word is dropped rather than passed to `ip`.
        let r = parse_routes(r#"[{"dst":"10.1.0.0/16","protocol":"a b"}]"#, false).unwrap();
        assert_eq!(r[0].protocol, None);
    }

    #[test]
    fn the_default_route_message_names_member_and_route() {
        let e = AddrError::DefaultRoute {
            member: "eth1".into(),
            route: "default via 10.0.0.254 dev eth1 metric 100".into(),
        };
        let s = e.to_string();
        assert!(s.starts_with("member eth1 carries the host's default route (default via 10.0.0.254 dev eth1 metric 100)"), "{s}");
        assert!(s.contains("take_default_route = true"), "{s}");
    }

    #[test]
    fn state_round_trips_and_is_written_whole() {
        let dir = std::env::temp_dir().join(format!("braid-ether-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("sub").join("bond0.json");
        let state = State {
            version: STATE_VERSION,
            bond: "bond0".into(),
            members: vec![Member {
                dev: "eth1".into(),
                addrs: parse_addrs(ADDRS).unwrap(),
                routes: parse_routes(ROUTES4, false).unwrap(),
                sysctls: vec![Sysctl {
                    path: "net/ipv4/conf/eth1/arp_ignore".into(),
                    old: "0".into(),
                    new: "8".into(),
                }],
                guarded: true,
            }],
        };
        write_state(&path, &state).unwrap();
        let back: State = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back, state);
        assert!(!dir.join("sub").join("bond0.json.tmp").exists());
        // A file that is not a state file is refused with words, not Debug text.
        std::fs::write(&path, b"{\"what\": 1}").unwrap();
        let e = repair(&path).unwrap_err();
        assert!(
            e.to_string().contains("not a braid address state file"),
            "{e}"
        );
        assert!(
            path.exists(),
            "an unreadable state file is kept for the user"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(repair(&path), Ok(false));
    }
}
