//! `layer = "ethernet"`: the bond's interface is a TAP carrying Ethernet frames, and its
//! members may be Ethernet ports (`kind = "ethernet"` paths) bonded as the kernel's
//! bonding driver bonds them: the keys of that mode (`lacp_rate`, `lacp`, `min_links`,
//! `lacp_fallback`, `mac`, `arp_interval`, `arp_ip_target`, `take_default_route`) are
//! validated here. `docs/ethernet.md` explains them.
use std::net::Ipv4Addr;
use std::ops::Range;
use std::time::Duration;

use braid_core::hash::HashPolicy;

use super::{at, check_ifname, int, VResult, S};

/// What the bond's interface carries (`bond.layer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layer {
    /// `"ip"`: a TUN; IP packets (the default).
    #[default]
    Ip,
    /// `"ethernet"`: a TAP; Ethernet frames, one MAC for the bond.
    Ethernet,
}

impl Layer {
    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Ip => "ip",
            Layer::Ethernet => "ethernet",
        }
    }
}

/// How an Ethernet bond spreads frames over its members (`bond.scheduler`, bonding's
/// `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtherScheduler {
    /// `round-robin` (balance-rr, the default as in bonding).
    RoundRobin,
    /// `active-backup`.
    ActiveBackup,
    /// `xor` (balance-xor).
    Xor,
    /// `broadcast`.
    Broadcast,
    /// `802.3ad` (LACP).
    Lacp,
}

impl EtherScheduler {
    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            EtherScheduler::RoundRobin => "round-robin",
            EtherScheduler::ActiveBackup => "active-backup",
            EtherScheduler::Xor => "xor",
            EtherScheduler::Broadcast => "broadcast",
            EtherScheduler::Lacp => "802.3ad",
        }
    }

    fn parse(s: &str) -> Option<EtherScheduler> {
        [
            EtherScheduler::RoundRobin,
            EtherScheduler::ActiveBackup,
            EtherScheduler::Xor,
            EtherScheduler::Broadcast,
            EtherScheduler::Lacp,
        ]
        .into_iter()
        .find(|m| m.name() == s)
    }
}

/// One Ethernet port of the bond (`[[path]]` with `kind = "ethernet"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtherMember {
    /// The path's name.
    pub name: String,
    /// The NIC (`dev`).
    pub dev: String,
}

/// A bond of Ethernet ports: what `layer = "ethernet"` with `kind = "ethernet"` paths
/// runs instead of the endpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct EtherSettings {
    /// The members, in file order (member ids 0, 1, ...).
    pub members: Vec<EtherMember>,
    /// `scheduler`.
    pub scheduler: EtherScheduler,
    /// `hash` (xor and 802.3ad; default layer2, as bonding's xmit_hash_policy).
    pub hash: HashPolicy,
    /// `lacp_rate = "fast"` (default slow).
    pub lacp_fast: bool,
    /// `lacp = "active"` (the default) or `"passive"`.
    pub lacp_active: bool,
    /// `min_links` (802.3ad; default 1).
    pub min_links: u16,
    /// `lacp_fallback`: active-backup while the partner says nothing (802.3ad).
    pub lacp_fallback: bool,
    /// `primary` (active-backup): the member's index.
    pub primary: Option<usize>,
    /// `arp_interval` (ms; zero: carrier only).
    pub arp_interval: Duration,
    /// `arp_ip_target`.
    pub arp_targets: Vec<Ipv4Addr>,
    /// `take_default_route`: move a member that carries the host's default route.
    pub take_default_route: bool,
}

/// The `[bond]` keys of an Ethernet bond, as written.
pub(super) struct RawEther<'a> {
    pub(super) scheduler: Option<&'a S<String>>,
    pub(super) hash: Option<HashPolicy>,
    pub(super) primary: Option<&'a S<String>>,
    pub(super) lacp_rate: &'a Option<S<String>>,
    pub(super) lacp: &'a Option<S<String>>,
    pub(super) min_links: &'a Option<S<i64>>,
    pub(super) lacp_fallback: &'a Option<S<bool>>,
    pub(super) arp_interval: &'a Option<S<i64>>,
    pub(super) arp_ip_target: &'a Option<S<Vec<String>>>,
    pub(super) take_default_route: &'a Option<S<bool>>,
}

impl RawEther<'_> {
    /// The span of the first key given that only an Ethernet bond takes (for the error
    /// when there is no `kind = "ethernet"` member), and its name.
    pub(super) fn first_given(&self) -> Option<(Range<usize>, &'static str)> {
        let spans = [
            (self.lacp_rate.as_ref().map(S::span), "lacp_rate"),
            (self.lacp.as_ref().map(S::span), "lacp"),
            (self.min_links.as_ref().map(S::span), "min_links"),
            (self.lacp_fallback.as_ref().map(S::span), "lacp_fallback"),
            (self.arp_interval.as_ref().map(S::span), "arp_interval"),
            (self.arp_ip_target.as_ref().map(S::span), "arp_ip_target"),
            (
                self.take_default_route.as_ref().map(S::span),
                "take_default_route",
            ),
        ];
        spans.into_iter().find_map(|(s, k)| s.map(|s| (s, k)))
    }
}

/// `dev` of a `kind = "ethernet"` path, the only key it takes besides `name` and `kind`.
pub(super) fn member(
    name: &str,
    dev: Option<&S<String>>,
    others: &[(Option<Range<usize>>, &str)],
    key: &dyn Fn(&str) -> String,
    span: &Range<usize>,
) -> VResult<EtherMember> {
    if let Some((Some(s), k)) = others.iter().find(|(s, _)| s.is_some()) {
        return Err((
            Some(s.clone()),
            format!(
                "{}: not for kind = \"ethernet\" (an Ethernet member takes name and dev only)",
                key(k)
            ),
        ));
    }
    let Some(dev) = dev else {
        return Err((
            Some(span.clone()),
            format!(
                "{}: missing (the member port, for example dev = \"eth1\")",
                key("dev")
            ),
        ));
    };
    check_ifname(dev.get_ref()).map_err(|m| at(dev, format!("{}: {m}", key("dev"))))?;
    Ok(EtherMember {
        name: name.to_owned(),
        dev: dev.get_ref().clone(),
    })
}

/// Validate an Ethernet bond's keys for `members` (at least one).
pub(super) fn validate(
    raw: &RawEther<'_>,
    members: Vec<EtherMember>,
    devices: &[Range<usize>],
) -> VResult<EtherSettings> {
    for (i, m) in members.iter().enumerate() {
        if let Some(j) = members.iter().take(i).position(|o| o.dev == m.dev) {
            return Err((
                devices.get(i).cloned(),
                format!(
                    "path[{i}].dev: {:?} is already member {:?}; a port can be in the bond once",
                    m.dev, members[j].name
                ),
            ));
        }
    }
    let scheduler = match raw.scheduler {
        None => EtherScheduler::RoundRobin,
        Some(s) => EtherScheduler::parse(s.get_ref()).ok_or_else(|| {
            at(
                s,
                format!(
                    "bond.scheduler: {:?} is not a mode for Ethernet members (round-robin, active-backup, xor, broadcast or 802.3ad)",
                    s.get_ref()
                ),
            )
        })?,
    };
    let lacp_only = [
        (raw.lacp_rate.as_ref().map(S::span), "lacp_rate"),
        (raw.lacp.as_ref().map(S::span), "lacp"),
        (raw.min_links.as_ref().map(S::span), "min_links"),
        (raw.lacp_fallback.as_ref().map(S::span), "lacp_fallback"),
    ];
    if scheduler != EtherScheduler::Lacp {
        if let Some((Some(s), k)) = lacp_only.iter().find(|(s, _)| s.is_some()) {
            return Err((
                Some(s.clone()),
                format!(
                    "bond.{k}: only used with scheduler = \"802.3ad\" (scheduler is \"{}\")",
                    scheduler.name()
                ),
            ));
        }
    }
    let lacp_fast = match raw.lacp_rate {
        None => false,
        Some(s) => match s.get_ref().as_str() {
            "fast" => true,
            "slow" => false,
            other => {
                return Err(at(
                    s,
                    format!("bond.lacp_rate: {other:?} is not fast or slow"),
                ))
            }
        },
    };
    let lacp_active = match raw.lacp {
        None => true,
        Some(s) => match s.get_ref().as_str() {
            "active" => true,
            "passive" => false,
            other => {
                return Err(at(
                    s,
                    format!("bond.lacp: {other:?} is not active or passive"),
                ))
            }
        },
    };
    let count = i64::try_from(members.len()).unwrap_or(i64::MAX);
    let min_links = int(raw.min_links, "bond.min_links", 1, count.max(1), 1)?;
    let primary = match raw.primary {
        None => None,
        Some(s) => Some(
            members
                .iter()
                .position(|m| &m.name == s.get_ref())
                .ok_or_else(|| at(s, format!("bond.primary: no path named {:?}", s.get_ref())))?,
        ),
    };
    let arp_interval = int(raw.arp_interval, "bond.arp_interval", 0, 600_000, 0)?;
    let arp_targets = match raw.arp_ip_target {
        None => Vec::new(),
        Some(s) => {
            let mut v = Vec::new();
            for t in s.get_ref() {
                let a: Ipv4Addr = t.parse().map_err(|_| {
                    at(
                        s,
                        format!("bond.arp_ip_target: {t:?} is not an IPv4 address"),
                    )
                })?;
                if a.is_unspecified() || a.is_broadcast() || a.is_multicast() {
                    return Err(at(
                        s,
                        format!("bond.arp_ip_target: {t:?} is not a unicast address"),
                    ));
                }
                v.push(a);
            }
            if v.len() > 16 {
                return Err(at(
                    s,
                    "bond.arp_ip_target: at most 16 targets, as bonding".into(),
                ));
            }
            v
        }
    };
    if arp_interval > 0 && arp_targets.is_empty() {
        let s = raw.arp_interval.as_ref().map(S::span);
        return Err((
            s,
            "bond.arp_interval: needs bond.arp_ip_target (the addresses to probe)".into(),
        ));
    }
    if arp_interval > 0 && scheduler == EtherScheduler::Lacp {
        let s = raw.arp_interval.as_ref().map(S::span);
        return Err((s, "bond.arp_interval: not with scheduler = \"802.3ad\" (LACP watches its members itself, as bonding refuses ARP monitoring in 802.3ad mode)".into()));
    }
    Ok(EtherSettings {
        members,
        scheduler,
        hash: raw.hash.unwrap_or(HashPolicy::Layer2),
        lacp_fast,
        lacp_active,
        min_links: u16::try_from(min_links).unwrap_or(1),
        lacp_fallback: raw.lacp_fallback.as_ref().is_some_and(|v| *v.get_ref()),
        primary,
        arp_interval: Duration::from_millis(arp_interval.unsigned_abs()),
        arp_targets,
        take_default_route: raw
            .take_default_route
            .as_ref()
            .is_some_and(|v| *v.get_ref()),
    })
}

/// `bond.mac` (only with `layer = "ethernet"`).
pub(super) fn mac(v: &Option<S<String>>, layer: Layer) -> VResult<Option<[u8; 6]>> {
    let Some(s) = v else {
        return Ok(None);
    };
    if layer != Layer::Ethernet {
        return Err(at(
            s,
            "bond.mac: only with layer = \"ethernet\" (a TUN has no MAC)".into(),
        ));
    }
    parse_mac(s.get_ref()).map(Some).ok_or_else(|| {
        at(
            s,
            format!(
                "bond.mac: {:?} is not a unicast MAC address such as \"02:00:00:00:00:01\"",
                s.get_ref()
            ),
        )
    })
}

/// The MAC of a TAP bond over UDP paths without `bond.mac`: locally administered
/// (`02:...`), the same at every start for the same interface name and address (so the
/// peer's neighbour cache stays right across a restart): FNV-1a of both.
pub fn derived_mac(interface: &str, address: &str) -> [u8; 6] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in interface.bytes().chain([0]).chain(address.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let b = h.to_be_bytes();
    [0x02, b[0], b[1], b[2], b[3], b[4]]
}

/// `aa:bb:cc:dd:ee:ff` (or with `-`), unicast (the group bit clear), not all zero.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    if parts.next().is_some() || mac[0] & 1 != 0 || mac == [0; 6] {
        return None;
    }
    Some(mac)
}

/// A MAC as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: [u8; 6]) -> String {
    let [a, b, c, d, e, f] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const BOND: &str = "[bond]\ninterface = \"bond0\"\nlayer = \"ethernet\"\naddress = \"10.210.0.1/24\"\nencryption = \"none\"\n";
    const MEMBERS: &str = "[[path]]\nname = \"e1\"\nkind = \"ethernet\"\ndev = \"eth1\"\n[[path]]\nname = \"e2\"\nkind = \"ethernet\"\ndev = \"eth2\"\n";

    fn parse(bond_keys: &str, paths: &str) -> Result<Config, String> {
        Config::parse(&format!("{BOND}{bond_keys}{paths}"), "t.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn the_issue_example_parses() {
        let c = parse(
            "scheduler = \"802.3ad\"\nhash = \"layer3+4\"\nlacp_rate = \"fast\"\nlacp = \"active\"\n",
            MEMBERS,
        )
        .expect("valid");
        assert_eq!(c.bond.layer, Layer::Ethernet);
        assert!(c.paths.is_empty());
        let e = c.ether.expect("an Ethernet bond");
        assert_eq!(e.scheduler, EtherScheduler::Lacp);
        assert_eq!(e.hash, HashPolicy::Layer34);
        assert!(e.lacp_fast && e.lacp_active);
        assert_eq!(e.min_links, 1);
        assert_eq!(
            e.members,
            vec![
                EtherMember {
                    name: "e1".into(),
                    dev: "eth1".into()
                },
                EtherMember {
                    name: "e2".into(),
                    dev: "eth2".into()
                }
            ]
        );
    }

    #[test]
    fn defaults_are_bondings() {
        let e = parse("", MEMBERS).expect("valid").ether.expect("ether");
        assert_eq!(e.scheduler, EtherScheduler::RoundRobin);
        assert_eq!(e.hash, HashPolicy::Layer2);
        assert!(!e.lacp_fast && e.lacp_active && !e.lacp_fallback && !e.take_default_route);
        assert_eq!((e.primary, e.arp_interval), (None, Duration::ZERO));
    }

    #[test]
    fn every_key_maps() {
        let e = parse(
            "scheduler = \"active-backup\"\nprimary = \"e2\"\nmac = \"02:00:00:00:00:07\"\narp_interval = 200\narp_ip_target = [\"10.210.0.2\", \"10.210.0.3\"]\ntake_default_route = true\n",
            MEMBERS,
        )
        .expect("valid")
        .ether
        .expect("ether");
        assert_eq!(e.scheduler, EtherScheduler::ActiveBackup);
        assert_eq!(e.primary, Some(1));
        assert_eq!(e.arp_interval, Duration::from_millis(200));
        assert_eq!(
            e.arp_targets,
            vec![Ipv4Addr::new(10, 210, 0, 2), Ipv4Addr::new(10, 210, 0, 3)]
        );
        assert!(e.take_default_route);
        let l = parse(
            "scheduler = \"802.3ad\"\nmin_links = 2\nlacp_fallback = true\nlacp = \"passive\"\n",
            MEMBERS,
        )
        .expect("valid")
        .ether
        .expect("ether");
        assert_eq!(
            (l.min_links, l.lacp_fallback, l.lacp_active),
            (2, true, false)
        );
    }

    #[test]
    fn mistakes_are_named() {
        let cases: &[(&str, &str, &str)] = &[
            ("scheduler = \"eql\"\n", MEMBERS, "bond.scheduler: \"eql\" is not a mode for Ethernet members"),
            ("lacp_rate = \"fast\"\n", MEMBERS, "bond.lacp_rate: only used with scheduler = \"802.3ad\" (scheduler is \"round-robin\")"),
            ("scheduler = \"802.3ad\"\nlacp_rate = \"quick\"\n", MEMBERS, "bond.lacp_rate: \"quick\" is not fast or slow"),
            ("scheduler = \"802.3ad\"\nmin_links = 3\n", MEMBERS, "bond.min_links: 3 is out of range (1..=2)"),
            ("scheduler = \"active-backup\"\nprimary = \"e9\"\n", MEMBERS, "bond.primary: no path named \"e9\""),
            ("arp_interval = 100\n", MEMBERS, "bond.arp_interval: needs bond.arp_ip_target"),
            ("arp_ip_target = [\"10.210.0.x\"]\n", MEMBERS, "bond.arp_ip_target: \"10.210.0.x\" is not an IPv4 address"),
            ("", "[[path]]\nname = \"e1\"\nkind = \"ethernet\"\n", "path[0].dev: missing"),
            ("", "[[path]]\nname = \"e1\"\nkind = \"ethernet\"\ndev = \"eth1\"\nlocal = \"10.0.0.1:7000\"\n", "path[0].local: not for kind = \"ethernet\""),
            ("", "[[path]]\nname = \"e1\"\nkind = \"ethernet\"\ndev = \"eth1\"\n[[path]]\nname = \"e2\"\nkind = \"ethernet\"\ndev = \"eth1\"\n", "path[1].dev: \"eth1\" is already member \"e1\""),
            ("", "[[path]]\nname = \"e1\"\nkind = \"ethernet\"\ndev = \"eth1\"\n[[path]]\nname = \"p0\"\nlocal = \"10.201.0.1:7000\"\nremote = \"10.201.0.2:7000\"\n", "cannot also have UDP paths"),
        ];
        for (keys, paths, want) in cases {
            let e = parse(keys, paths).expect_err(want);
            assert!(e.contains(want), "{keys:?}: {e}\n  wanted {want}");
        }
        // Keys of an Ethernet bond without Ethernet members, members without the layer,
        // 802.3ad without members, keys on an Ethernet member bond.
        let ip = "[bond]\naddress = \"10.210.0.1/24\"\nencryption = \"none\"\n";
        let e = Config::parse(&format!("{ip}lacp_rate = \"fast\"\n"), "t.toml")
            .expect_err("no members")
            .to_string();
        assert!(
            e.contains("bond.lacp_rate: only for a bond of Ethernet ports"),
            "{e}"
        );
        let e = Config::parse(&format!("{ip}{MEMBERS}"), "t.toml")
            .expect_err("no layer")
            .to_string();
        assert!(
            e.contains("path[0].kind: \"ethernet\" members need bond.layer = \"ethernet\""),
            "{e}"
        );
        let e = Config::parse(&format!("{ip}scheduler = \"802.3ad\"\n"), "t.toml")
            .expect_err("no members")
            .to_string();
        assert!(e.contains("\"802.3ad\" bonds Ethernet ports"), "{e}");
        let sealed = "[bond]\nlayer = \"ethernet\"\naddress = \"10.210.0.1/24\"\nprivate_key = \"4AQJJwpUReIFFoMiigEEhG9NryCTnFjPBTxirKNv6nY=\"\npeer_public_key = \"nmFYF6ZKngdcryo53e+fo7ZbW4nP3CZ47oLl9sHfCRM=\"\n";
        let e = Config::parse(&format!("{sealed}{MEMBERS}"), "t.toml")
            .expect_err("keys")
            .to_string();
        assert!(e.contains("set encryption = \"none\""), "{e}");
    }

    #[test]
    fn an_ethernet_bond_over_serial_lines_refuses_what_reads_ip() {
        let line = |extra: &str| {
            format!("{BOND}[[path]]\nname = \"s0\"\nkind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 115200\n{extra}")
        };
        let e = Config::parse(&line("mode = \"raw-ip\"\n"), "t.toml")
            .expect_err("raw-ip")
            .to_string();
        assert!(
            e.contains("path[0].mode: \"raw-ip\" puts IP packets on the line"),
            "{e}"
        );
        let e = Config::parse(&line("framing = \"cslip\"\n"), "t.toml")
            .expect_err("cslip")
            .to_string();
        assert!(
            e.contains("path[0].framing: \"cslip\" compresses the TCP/IP headers"),
            "{e}"
        );
        let c = Config::parse(&line("framing = \"slip6\"\n"), "t.toml").expect("slip6 is fine");
        assert_eq!(c.bond.core.frames, braid_core::Frames::Ethernet);
    }

    #[test]
    fn ethernet_over_udp_paths_is_a_layer_only() {
        let c = Config::parse(
            &format!("{BOND}[[path]]\nname = \"p0\"\nlocal = \"10.201.0.1:7000\"\nremote = \"10.201.0.2:7000\"\n"),
            "t.toml",
        )
        .expect("valid");
        assert_eq!(c.bond.layer, Layer::Ethernet);
        assert!(c.ether.is_none());
        assert_eq!(c.paths.len(), 1);
    }

    #[test]
    fn the_mac_key_needs_the_ethernet_layer_and_a_derived_mac_is_stable() {
        let c = parse("mac = \"02:00:00:00:00:07\"\n", MEMBERS).expect("valid");
        assert_eq!(c.bond.mac, Some([2, 0, 0, 0, 0, 7]));
        let e = Config::parse(
            "[bond]\naddress = \"10.210.0.1/24\"\nencryption = \"none\"\nmac = \"02:00:00:00:00:07\"\n",
            "t.toml",
        )
        .expect_err("a TUN has no MAC")
        .to_string();
        assert!(
            e.contains("bond.mac: only with layer = \"ethernet\""),
            "{e}"
        );
        let e = parse("mac = \"01:00:5e:00:00:01\"\n", MEMBERS).expect_err("multicast");
        assert!(e.contains("is not a unicast MAC"), "{e}");
        // Pinned: the same name and address give the same MAC in every build.
        let m = derived_mac("braid0", "10.200.0.1/30");
        assert_eq!(m, derived_mac("braid0", "10.200.0.1/30"));
        assert_ne!(m, derived_mac("braid1", "10.200.0.1/30"));
        assert_ne!(m, derived_mac("braid0", "10.200.0.2/30"));
        assert_eq!(m[0], 0x02, "locally administered, unicast");
        assert_eq!(
            format_mac(m),
            format_mac(derived_mac("braid0", "10.200.0.1/30"))
        );
    }

    #[test]
    fn macs_parse_and_print() {
        assert_eq!(
            parse_mac("02:00:5E:10:00:01"),
            Some([2, 0, 0x5e, 0x10, 0, 1])
        );
        assert_eq!(
            parse_mac("02-00-5e-10-00-01"),
            Some([2, 0, 0x5e, 0x10, 0, 1])
        );
        assert_eq!(format_mac([2, 0, 0x5e, 0x10, 0, 1]), "02:00:5e:10:00:01");
        for bad in [
            "",
            "02:00:5e:10:00",
            "02:00:5e:10:00:01:02",
            "01:00:5e:00:00:01",
            "00:00:00:00:00:00",
            "2:0:5e:10:0:1",
            "zz:00:5e:10:00:01",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }
}
