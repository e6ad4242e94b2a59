//! `[bond]` keys that route traffic into the bond, as wg-quick users expect: `routes`,
//! `fwmark`, `post_up`, `pre_down`. The daemon's side is `daemon/routes.rs` and
//! `daemon/hooks.rs`.
use std::fmt;
use std::net::IpAddr;

use serde::Deserialize;

use super::{at, VResult, S};

/// A route's destination prefix (`0.0.0.0/0`, `10.8.0.0/16`, `::/0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// The network address (no host bits set).
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

impl Prefix {
    /// A default route (`/0`): it goes in braid's own table behind the fwmark rules.
    pub fn is_default(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// The validated routing keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoutingSettings {
    /// `routes`: prefixes routed through the bond's interface while it runs.
    pub routes: Vec<Prefix>,
    /// `fwmark`: the path sockets' SO_MARK and the routing table of the default routes.
    /// None: the first free table from 51820 (as wg-quick), picked at start.
    pub fwmark: Option<u32>,
    /// `post_up`: commands run (`sh -c`) once the bond is up.
    pub post_up: Vec<String>,
    /// `pre_down`: commands run before the bond goes down.
    pub pre_down: Vec<String>,
}

impl RoutingSettings {
    /// True when there is a default route, so the fwmark rules and table are needed.
    pub fn uses_table(&self) -> bool {
        self.routes.iter().any(Prefix::is_default)
    }
}

/// `post_up = "cmd"` or `post_up = ["cmd1", "cmd2"]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawHooks {
    One(String),
    Many(Vec<String>),
}

/// The raw keys, borrowed from `RawBond`.
pub(super) struct RawRouting<'a> {
    pub routes: &'a Option<S<Vec<String>>>,
    pub fwmark: &'a Option<S<i64>>,
    pub post_up: &'a Option<S<RawHooks>>,
    pub pre_down: &'a Option<S<RawHooks>>,
    pub user: bool,
}

pub(super) fn validate(r: RawRouting<'_>) -> VResult<RoutingSettings> {
    let mut routes = Vec::new();
    if let Some(s) = r.routes {
        for text in s.get_ref() {
            let p = parse_prefix(text).map_err(|m| at(s, format!("bond.routes: {m}")))?;
            if routes.contains(&p) {
                return Err(at(s, format!("bond.routes: {p} is listed twice")));
            }
            routes.push(p);
        }
        if r.user && !routes.is_empty() {
            return Err(at(
                s,
                "bond.routes: not with bond.user: braid removes its routing rules when it stops, which needs CAP_NET_ADMIN; leave out bond.user (run as root, or as a user given CAP_NET_ADMIN, as a systemd unit with AmbientCapabilities= does), or add the routes in a post_up hook".into(),
            ));
        }
    }
    let fwmark = match r.fwmark {
        None => None,
        Some(s) => {
            let v = *s.get_ref();
            if !(1..=i64::from(u32::MAX)).contains(&v) {
                return Err(at(
                    s,
                    format!("bond.fwmark: {v} is out of range (1..={})", u32::MAX),
                ));
            }
            Some(u32::try_from(v).unwrap_or(u32::MAX))
        }
    };
    Ok(RoutingSettings {
        routes,
        fwmark,
        post_up: hooks(r.post_up, "bond.post_up")?,
        pre_down: hooks(r.pre_down, "bond.pre_down")?,
    })
}

fn hooks(v: &Option<S<RawHooks>>, key: &str) -> VResult<Vec<String>> {
    let Some(s) = v else {
        return Ok(Vec::new());
    };
    let list = match s.get_ref() {
        RawHooks::One(c) => vec![c.clone()],
        RawHooks::Many(cs) => cs.clone(),
    };
    if let Some(bad) = list
        .iter()
        .find(|c| c.trim().is_empty() || c.contains('\0'))
    {
        return Err(at(
            s,
            format!("{key}: {bad:?} is not a command (empty, or holds a NUL)"),
        ));
    }
    Ok(list)
}

/// `ADDR/LEN`, the network address itself (as `ip route` wants it).
pub fn parse_prefix(s: &str) -> Result<Prefix, String> {
    let bad = || format!("{s:?} is not a prefix such as \"0.0.0.0/0\" or \"10.8.0.0/16\"");
    let (a, l) = s.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = a.parse().map_err(|_| bad())?;
    if !l.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let len: u8 = l.parse().map_err(|_| bad())?;
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    if u32::from(len) > bits {
        return Err(bad());
    }
    let masked = mask(addr, len);
    if masked != addr {
        return Err(format!(
            "{s:?} has host bits set: the network is {masked}/{len}"
        ));
    }
    Ok(Prefix { addr, len })
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let p = parse_prefix("0.0.0.0/0").unwrap();
        assert!(p.is_default());
        assert_eq!(p.to_string(), "0.0.0.0/0");
        assert_eq!(parse_prefix("10.8.0.0/16").unwrap().len, 16);
        assert!(parse_prefix("::/0").unwrap().is_default());
        assert_eq!(parse_prefix("fd00::/8").unwrap().to_string(), "fd00::/8");
        assert_eq!(
            parse_prefix("10.8.1.0/16").unwrap_err(),
            "\"10.8.1.0/16\" has host bits set: the network is 10.8.0.0/16"
        );
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "::/129",
            "x/8",
            "10.0.0.0/+8",
            "10.0.0.0/",
        ] {
            assert!(parse_prefix(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_prefix("10.0.0.1/32").unwrap().len, 32);
    }
}
