//! A UDP path's endpoints as written: `local` (a literal address, or `0.0.0.0:PORT` /
//! `[::]:PORT` with `dev`: follow the device's address) and `remote` (a literal address,
//! a DNS name with a port, or absent: learned from the peer's authenticated datagrams).
use std::fmt;
use std::net::SocketAddr;

/// Where a UDP path sends to, as the config says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remote {
    /// A literal `ADDR:PORT`.
    Addr(SocketAddr),
    /// `NAME:PORT`: resolved when the daemon starts and again while the path is down.
    Name {
        /// The DNS name.
        host: String,
        /// The port.
        port: u16,
    },
    /// No `remote`: the path waits until an authenticated datagram arrives and answers its
    /// source (a server whose clients are behind NAT). Only on a sealed bond.
    Learn,
}

impl Remote {
    /// The literal address, if it is one.
    pub fn addr(&self) -> Option<SocketAddr> {
        match self {
            Remote::Addr(a) => Some(*a),
            _ => None,
        }
    }
}

impl fmt::Display for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Remote::Addr(a) => write!(f, "{a}"),
            Remote::Name { host, port } => write!(f, "{host}:{port}"),
            Remote::Learn => write!(f, "(learned from the peer)"),
        }
    }
}

/// Parse a `remote`: `ADDR:PORT`, `[ADDR6]:PORT` or `NAME:PORT`. Port 0, unspecified and
/// multicast addresses are refused, as is a name that is not a DNS name.
pub fn parse_remote(s: &str) -> Result<Remote, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return super::parse_endpoint(s).map(|_| Remote::Addr(a));
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!(
            "{s:?} is not an ADDR:PORT or NAME:PORT (IPv6 as [ADDR]:PORT)"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{s:?}: {port:?} is not a port number"))?;
    if port == 0 {
        return Err(format!("{s:?}: port 0 is not allowed"));
    }
    check_dns_name(host).map_err(|m| format!("{s:?}: {m}"))?;
    Ok(Remote::Name {
        host: host.to_owned(),
        port,
    })
}

/// A DNS name: 1-253 bytes of dot-separated labels of 1-63 letters, digits and `-` (not at
/// a label's ends), with a final dot allowed; not all digits and dots (a mistyped IPv4
/// address such as `10.0.0.300`).
fn check_dns_name(host: &str) -> Result<(), String> {
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.is_empty() || host.len() > 253 {
        return Err(format!("{host:?} is not a host name"));
    }
    if name.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!("{host:?} is not an IPv4 address"));
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!(
                "{host:?} is not a host name (letters, digits, '-' and dots)"
            ));
        }
    }
    Ok(())
}

/// Parse a `local`: `ADDR:PORT`, or `0.0.0.0:PORT` / `[::]:PORT` when `has_dev` (the
/// socket then binds to the device's current address).
pub fn parse_local(s: &str, has_dev: bool) -> Result<SocketAddr, String> {
    match s.parse::<SocketAddr>() {
        Ok(a) if a.ip().is_unspecified() && a.port() != 0 => {
            if has_dev {
                Ok(a)
            } else {
                Err(format!(
                    "{s:?}: an unspecified address needs `dev` (the uplink whose address the path follows, such as dev = \"wwan0\"); else give the address"
                ))
            }
        }
        _ => super::parse_endpoint(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes() {
        assert_eq!(
            parse_remote("10.0.0.2:7000"),
            Ok(Remote::Addr("10.0.0.2:7000".parse().unwrap()))
        );
        assert_eq!(
            parse_remote("vpn.example.org:7000"),
            Ok(Remote::Name {
                host: "vpn.example.org".into(),
                port: 7000
            })
        );
        assert_eq!(
            parse_remote("vpn.example.org:7000").unwrap().to_string(),
            "vpn.example.org:7000"
        );
        for (bad, why) in [
            ("vpn.example.org", "is not an ADDR:PORT or NAME:PORT"),
            ("vpn.example.org:0", "port 0"),
            ("vpn.example.org:x", "is not a port number"),
            ("vpn.example.org:70000", "is not a port number"),
            ("10.0.0.300:7000", "is not an IPv4 address"),
            ("a_b.org:7000", "is not a host name"),
            ("-a.org:7000", "is not a host name"),
            (":7000", "is not a host name"),
            ("0.0.0.0:7000", "needs a unicast address"),
            ("[fd00::1:7000", "is not a host name"),
        ] {
            let e = parse_remote(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn locals() {
        assert!(parse_local("0.0.0.0:7000", true).is_ok());
        assert!(parse_local("[::]:7000", true).is_ok());
        let e = parse_local("0.0.0.0:7000", false).unwrap_err();
        assert!(e.contains("needs `dev`"), "{e}");
        assert!(parse_local("0.0.0.0:0", true).is_err());
        assert!(parse_local("10.0.0.1:7000", false).is_ok());
    }
}
