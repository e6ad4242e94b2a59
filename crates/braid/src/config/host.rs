//! `braid check`'s look at the host it runs on, after the file itself is valid: what
//! would make `braid up` loop or wait here. Each finding names the key and says what to
//! do. Errors are mistakes no host can fix (a path's `remote` inside the bond's own
//! subnet); warnings are things `braid up` waits for (a device not plugged in yet).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use super::{Config, Transport};

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// An error (`braid check` exits 1) rather than a warning.
    pub error: bool,
    /// What and what to do, starting with the key (`path[1].dev: ...`).
    pub message: String,
}

/// What a path's tty device is on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// No such file.
    Missing,
    /// There, but not a character device.
    NotChar,
    /// A character device.
    Char,
}

/// What the checks ask of the host (the real one, or a test's).
pub trait Host {
    /// Whether a network interface of that name exists.
    fn interface_exists(&self, name: &str) -> bool;
    /// What `path` is.
    fn device(&self, path: &Path) -> Device;
    /// Whether `ip` is an address of this host (a socket can bind to it now).
    fn local_address(&self, ip: IpAddr) -> bool;
}

/// This host.
pub struct ThisHost;

impl Host for ThisHost {
    fn interface_exists(&self, name: &str) -> bool {
        // A name `check_ifname` accepted cannot climb out of the directory.
        Path::new("/sys/class/net").join(name).exists()
    }

    fn device(&self, path: &Path) -> Device {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::metadata(path) {
            Err(_) => Device::Missing,
            Ok(m) if m.file_type().is_char_device() => Device::Char,
            Ok(_) => Device::NotChar,
        }
    }

    fn local_address(&self, ip: IpAddr) -> bool {
        !matches!(
            std::net::UdpSocket::bind((ip, 0)),
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL)
        )
    }
}

/// The findings for `cfg` on `host`, in file order.
pub fn check(cfg: &Config, host: &dyn Host) -> Vec<Finding> {
    let mut out = Vec::new();
    let warn = |message: String| Finding {
        error: false,
        message,
    };
    for (i, p) in cfg.paths.iter().enumerate() {
        let key = |k: &str| format!("path[{i}].{k}");
        match &p.transport {
            Transport::Udp(u) => {
                // A literal address only: a name is resolved at run time.
                let remote = u.remote.addr().map(|a| a.ip());
                if let Some((ip, net)) =
                    remote.and_then(|ip| bond_subnet_holding(cfg, ip).map(|n| (ip, n)))
                {
                    out.push(Finding {
                        error: true,
                        message: format!(
                            "{}: {ip} is inside the bond's own subnet {net}: the path's datagrams would be routed into the bond itself; set the peer's address on this path's uplink (its public or ISP-side address), or give the bond another subnet",
                            key("remote"),
                        ),
                    });
                }
                if let Some(dev) = &u.dev {
                    if !host.interface_exists(dev) {
                        out.push(warn(format!(
                            "{}: no interface {dev:?} on this host (`ip link` lists them); braid up waits for it, retrying every second",
                            key("dev")
                        )));
                    }
                }
                let ip = u.local.ip();
                if !ip.is_unspecified() && !host.local_address(ip) {
                    out.push(warn(format!(
                        "{}: {ip} is not an address of this host now (`ip addr` lists them); braid up retries every second until it is",
                        key("local")
                    )));
                }
            }
            Transport::Serial(s) => {
                match host.device(&s.device) {
                    Device::Char => {}
                    Device::Missing => out.push(warn(format!(
                        "{}: {} does not exist on this host; plug the line in or fix the name (braid up retries every second)",
                        key("device"),
                        s.device.display()
                    ))),
                    Device::NotChar => out.push(Finding {
                        error: true,
                        message: format!(
                            "{}: {} is not a character device; name the line's tty (/dev/ttyS0, /dev/ttyUSB0, ...)",
                            key("device"),
                            s.device.display()
                        ),
                    }),
                }
                let opened = super::termios_baud(s.baud);
                if opened != s.baud {
                    out.push(warn(format!(
                        "{}: {} is not a standard tty rate: a real UART runs at {opened} while braid paces at {}; use a standard rate (a pty does not mind)",
                        key("baud"),
                        s.baud,
                        s.baud
                    )));
                }
            }
        }
    }
    for (i, m) in cfg.ether.iter().flat_map(|e| e.members.iter()).enumerate() {
        if !host.interface_exists(&m.dev) {
            out.push(warn(format!(
                "path[{i}].dev: no interface {:?} on this host (`ip link` lists them); braid up starts without the member and takes it when it appears, trying every second{}",
                m.dev,
                if i == 0 && cfg.bond.mac.is_none() {
                    " (but the first member gives the bond its MAC: set bond.mac, or braid up refuses to start without it)"
                } else {
                    ""
                }
            )));
        }
        if m.dev == cfg.bond.interface {
            out.push(Finding {
                error: true,
                message: format!(
                    "path[{i}].dev: {:?} is the bond's own interface (bond.interface); name the member port",
                    m.dev
                ),
            });
        }
    }
    out
}

/// The bond's own subnet (`bond.address`, `bond.address6`) that holds `ip`, as text.
fn bond_subnet_holding(cfg: &Config, ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(a) => {
            let c = cfg.bond.address;
            let mask = u32::from(c.netmask());
            let net = Ipv4Addr::from(u32::from(c.addr) & mask);
            (c.prefix > 0 && u32::from(a) & mask == u32::from(net))
                .then(|| format!("{net}/{} (bond.address)", c.prefix))
        }
        IpAddr::V6(a) => {
            let c = cfg.bond.address6?;
            let bits = u32::from(c.prefix);
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            let net = Ipv6Addr::from(u128::from(c.addr) & mask);
            (bits > 0 && u128::from(a) & mask == u128::from(net))
                .then(|| format!("{net}/{bits} (bond.address6)"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host with `eth1`, `/dev/ttyS0`, a regular file `/etc/motd` and 10.201.0.1.
    struct Fake;

    impl Host for Fake {
        fn interface_exists(&self, name: &str) -> bool {
            name == "eth1"
        }
        fn device(&self, path: &Path) -> Device {
            match path.to_str() {
                Some("/dev/ttyS0") => Device::Char,
                Some("/etc/motd") => Device::NotChar,
                _ => Device::Missing,
            }
        }
        fn local_address(&self, ip: IpAddr) -> bool {
            ip == IpAddr::from([10, 201, 0, 1])
        }
    }

    fn findings(paths: &str) -> Vec<Finding> {
        let text = format!(
            "[bond]\naddress = \"10.200.0.1/30\"\naddress6 = \"fd00:b::1/64\"\nencryption = \"none\"\n{paths}"
        );
        let cfg = Config::parse(&text, "t.toml").expect("valid config");
        check(&cfg, &Fake)
    }

    #[test]
    fn a_good_config_on_a_good_host_has_nothing() {
        let f = findings(
            "[[path]]\nname = \"p0\"\nlocal = \"10.201.0.1:7000\"\nremote = \"10.201.0.2:7000\"\ndev = \"eth1\"\n\
             [[path]]\nname = \"s0\"\nkind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 115200\n",
        );
        assert_eq!(f, []);
    }

    #[test]
    fn remote_inside_the_bond_subnet_is_an_error() {
        let f = findings(
            "[[path]]\nname = \"p0\"\nlocal = \"10.201.0.1:7000\"\nremote = \"10.200.0.2:7000\"\n",
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].error);
        assert!(
            f[0].message.starts_with("path[0].remote: 10.200.0.2 is inside the bond's own subnet 10.200.0.0/30 (bond.address)"),
            "{}",
            f[0].message
        );
        // Just outside the /30: fine.
        let f = findings(
            "[[path]]\nname = \"p0\"\nlocal = \"10.201.0.1:7000\"\nremote = \"10.200.0.4:7000\"\n",
        );
        assert_eq!(f, []);
        let f = findings(
            "[[path]]\nname = \"p0\"\nlocal = \"[fd00:b::9]:7000\"\nremote = \"[fd00:b::2]:7000\"\n",
        );
        assert!(
            f.iter()
                .any(|f| f.error && f.message.contains("fd00:b::/64 (bond.address6)")),
            "{f:?}"
        );
    }

    #[test]
    fn missing_devices_and_addresses_are_warnings_that_say_what_to_do() {
        let f = findings(
            "[[path]]\nname = \"p0\"\nlocal = \"192.0.2.10:7000\"\nremote = \"198.51.100.1:7000\"\ndev = \"wwan0\"\n\
             [[path]]\nname = \"s0\"\nkind = \"serial\"\ndevice = \"/dev/ttyUSB3\"\nbaud = 14400\n",
        );
        let m: Vec<&str> = f.iter().map(|f| f.message.as_str()).collect();
        assert!(f.iter().all(|f| !f.error), "{m:?}");
        assert_eq!(m.len(), 4, "{m:?}");
        assert!(m[0].starts_with("path[0].dev: no interface \"wwan0\" on this host"));
        assert!(m[1].starts_with("path[0].local: 192.0.2.10 is not an address of this host now"));
        assert!(m[2].starts_with("path[1].device: /dev/ttyUSB3 does not exist on this host"));
        assert!(m[3].starts_with(
            "path[1].baud: 14400 is not a standard tty rate: a real UART runs at 19200"
        ));
    }

    #[test]
    fn ethernet_members_are_looked_for() {
        let text = "[bond]\ninterface = \"bond0\"\nlayer = \"ethernet\"\naddress = \"10.210.0.1/24\"\nencryption = \"none\"\n\
                    [[path]]\nname = \"e1\"\nkind = \"ethernet\"\ndev = \"eth1\"\n\
                    [[path]]\nname = \"e2\"\nkind = \"ethernet\"\ndev = \"eth9\"\n\
                    [[path]]\nname = \"e3\"\nkind = \"ethernet\"\ndev = \"bond0\"\n";
        let cfg = Config::parse(text, "t.toml").expect("valid config");
        let f = check(&cfg, &Fake);
        let m: Vec<(bool, &str)> = f.iter().map(|f| (f.error, f.message.as_str())).collect();
        assert_eq!(m.len(), 3, "{m:?}");
        assert!(
            !m[0].0
                && m[0]
                    .1
                    .starts_with("path[1].dev: no interface \"eth9\" on this host")
        );
        assert!(!m[1].0 && m[1].1.starts_with("path[2].dev: no interface \"bond0\""));
        assert!(
            m[2].0
                && m[2]
                    .1
                    .starts_with("path[2].dev: \"bond0\" is the bond's own interface")
        );
    }

    #[test]
    fn a_file_is_not_a_tty() {
        let f = findings(
            "[[path]]\nname = \"s0\"\nkind = \"serial\"\ndevice = \"/etc/motd\"\nbaud = 9600\n",
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].error && f[0].message.contains("is not a character device"));
    }
}
