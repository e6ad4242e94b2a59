//! Uplinks that change: a path whose `local` is `0.0.0.0:PORT` with `dev` binds to the
//! device's current address and re-opens its socket when that address changes (no address:
//! the path is down, its status says why, and it is checked again every second); a `remote`
//! that is a DNS name is resolved on a thread of its own (never in the loop), at start and
//! again while the path is down; a path without `remote` waits for the peer's first
//! authenticated datagram (the core's `Roaming` moves an unknown peer address to its
//! source). The peer's current address is the endpoint's ([`Endpoint::remote`]).
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::Duration;

use braid_core::Endpoint;
use braid_core::LinkState;
use braid_core::{Instant, PathId};

use super::{Carrier, PathIo, UdpIo};
use crate::config::Remote;
use crate::log::{dlog, dwarn};
use crate::sys::ifaddr;

/// How often a device-following path looks at its device's address.
pub const ADDRESS_CHECK: Duration = Duration::from_secs(1);
/// How long a down path waits between two resolutions of its `remote` name.
pub const RESOLVE_RETRY: Duration = Duration::from_secs(5);
/// How often the loop looks for the answer of a resolution in flight.
const RESOLVE_POLL: Duration = Duration::from_millis(50);
/// How long `braid up` waits at start for the names to resolve (before routes are added
/// through the bond, so that the first lookups still use the uplinks' routes).
pub const RESOLVE_AT_START: Duration = Duration::from_secs(5);

/// A path's uplink bookkeeping (kept in its [`UdpIo`]).
#[derive(Debug)]
pub struct Uplink {
    /// `remote` as configured: an address, a name to resolve, or learned.
    pub target: Remote,
    /// SO_MARK of the socket (the routes' fwmark).
    pub mark: Option<u32>,
    /// The address the socket is bound to (the device's, for a device-following path).
    pub bound: Option<SocketAddr>,
    /// When to look at the device's address again.
    next_check: Option<Instant>,
    /// A resolution in flight.
    resolving: Option<Receiver<Result<Vec<SocketAddr>, String>>>,
    /// When the next resolution may start.
    resolve_after: Option<Instant>,
}

impl Uplink {
    /// A path's uplink state, nothing bound or resolved yet.
    pub fn new(target: Remote, mark: Option<u32>) -> Uplink {
        Uplink {
            target,
            mark,
            bound: None,
            next_check: None,
            resolving: None,
            resolve_after: None,
        }
    }
}

impl UdpIo {
    /// Set the configured `remote` (a reload): a new address at once, a name resolved
    /// afresh, a learned one kept.
    pub(super) fn set_target(
        &mut self,
        now: Instant,
        target: &Remote,
        ep: &mut Endpoint,
        id: PathId,
    ) {
        if &self.uplink.target == target {
            return;
        }
        self.uplink.target = target.clone();
        if let Some(a) = target.addr() {
            ep.set_remote(id, Some(a));
        }
        if matches!(target, Remote::Name { .. }) {
            ep.set_remote(id, None);
            self.start_resolving(now);
        }
    }

    /// True when `local` is unspecified: the socket binds to `dev`'s address.
    pub fn follows_dev(&self) -> bool {
        self.local.ip().is_unspecified() && self.dev.is_some()
    }

    /// The address to bind: `local`, or `dev`'s current address with `local`'s port.
    pub fn bind_addr(&self) -> Result<SocketAddr, String> {
        if !self.follows_dev() {
            return Ok(self.local);
        }
        let dev = self.dev.as_deref().unwrap_or_default();
        let v4 = self.local.is_ipv4();
        match ifaddr::device_address(dev, v4) {
            Ok(Some(ip)) => Ok(SocketAddr::new(ip, self.local.port())),
            Ok(None) => Err(format!(
                "dev {dev} has no {} address (yet): the path waits for one",
                if v4 { "IPv4" } else { "IPv6" }
            )),
            Err(e) => Err(format!("dev {dev}: cannot read its addresses: {e}")),
        }
    }

    /// Start resolving the `remote` name (nothing if it is not a name or one is in flight).
    pub(super) fn start_resolving(&mut self, now: Instant) {
        let Remote::Name { host, port } = &self.uplink.target else {
            return;
        };
        if self.uplink.resolving.is_some() {
            return;
        }
        let (tx, rx) = mpsc::channel();
        let (host, port) = (host.clone(), *port);
        let spawned = std::thread::Builder::new()
            .name("braid-resolve".into())
            .spawn(move || {
                let r = (host.as_str(), port)
                    .to_socket_addrs()
                    .map(Iterator::collect)
                    .map_err(|e| e.to_string());
                let _ = tx.send(r);
            });
        if spawned.is_ok() {
            self.uplink.resolving = Some(rx);
        }
        self.uplink.resolve_after = Some(now + RESOLVE_RETRY);
    }

    /// The answer of a resolution, if one came: `Some(Ok(addr))` (of `local`'s family) or
    /// `Some(Err(why))`.
    fn poll_resolved(&mut self) -> Option<Result<SocketAddr, String>> {
        let rx = self.uplink.resolving.as_ref()?;
        let r = match rx.try_recv() {
            Ok(r) => r,
            Err(TryRecvError::Empty) => return None,
            Err(TryRecvError::Disconnected) => Err("the resolver thread stopped".into()),
        };
        self.uplink.resolving = None;
        let v4 = self.local.is_ipv4();
        Some(r.and_then(|addrs| {
            addrs
                .into_iter()
                .find(|a| a.is_ipv4() == v4)
                .ok_or_else(|| {
                    format!(
                        "no {} address (the path's local is {})",
                        if v4 { "IPv4" } else { "IPv6" },
                        self.local
                    )
                })
        }))
    }
}

/// `braid up`: wait (at most [`RESOLVE_AT_START`]) for the paths' names to resolve, and
/// take their answers.
pub(super) fn wait_resolved(paths: &mut [PathIo], ep: &mut Endpoint, clock: &super::Clock) {
    let start = clock.now();
    loop {
        for p in paths.iter_mut() {
            p.check_uplink(clock.now(), ep);
        }
        if !paths.iter().any(PathIo::resolving)
            || clock.now().saturating_since(start) >= RESOLVE_AT_START
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl PathIo {
    /// Start resolving a `remote` name; for `braid up` and new paths.
    pub(super) fn resolve_now(&mut self, now: Instant) {
        if let Carrier::Udp(u) = &mut self.carrier {
            u.start_resolving(now);
        }
    }

    /// True while a resolution is in flight.
    pub(super) fn resolving(&self) -> bool {
        matches!(&self.carrier, Carrier::Udp(u) if u.uplink.resolving.is_some())
    }

    /// When the loop must look at this path's uplink next.
    pub(super) fn uplink_due(&self, now: Instant) -> Option<Instant> {
        let Carrier::Udp(u) = &self.carrier else {
            return None;
        };
        let mut next = u.uplink.next_check.filter(|_| u.follows_dev());
        if u.uplink.resolving.is_some() {
            let t = now + RESOLVE_POLL;
            next = Some(next.map_or(t, |n| n.min(t)));
        } else if matches!(u.uplink.target, Remote::Name { .. }) {
            if let Some(t) = u.uplink.resolve_after {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }

    /// One turn's look at the uplink: a resolution's answer, a new resolution while the
    /// path is down, the device's address. Cheap when nothing is due.
    pub(super) fn check_uplink(&mut self, now: Instant, ep: &mut Endpoint) {
        let PathIo {
            id, name, carrier, ..
        } = self;
        let Carrier::Udp(u) = carrier else {
            return;
        };
        if let Some(r) = u.poll_resolved() {
            match r {
                Ok(a) if Some(a) != ep.remote(*id) => {
                    dlog!(now, "path {name}: {} is {a}", u.uplink.target);
                    ep.set_remote(*id, Some(a));
                }
                Ok(_) => {}
                Err(e) => {
                    let line = format!(
                        "path {name}: cannot resolve {}: {e}; trying again every {}s while the path is down",
                        u.uplink.target,
                        RESOLVE_RETRY.as_secs()
                    );
                    crate::log::limited(now, crate::log::Level::Warn, &line, line.clone());
                }
            }
        }
        if matches!(u.uplink.target, Remote::Name { .. })
            && u.uplink.resolve_after.is_none_or(|t| t <= now)
            && (ep.remote(*id).is_none() || ep.bond().path_state(*id) != Some(LinkState::Up))
        {
            u.start_resolving(now);
        }
        if !u.follows_dev() || u.sock.is_none() || u.uplink.next_check.is_some_and(|t| t > now) {
            return;
        }
        u.uplink.next_check = Some(now + ADDRESS_CHECK);
        let want = u.bind_addr();
        if want.as_ref().ok() == u.uplink.bound.as_ref() {
            return;
        }
        let was = u
            .uplink
            .bound
            .map_or("none".to_string(), |a| a.ip().to_string());
        let dev = u.dev.as_deref().unwrap_or_default();
        match want {
            Ok(a) => dlog!(
                now,
                "path {name}: {dev}'s address changed {was} -> {}; re-opening the socket",
                a.ip()
            ),
            Err(_) => dwarn!(now, "path {name}: {dev} lost its address {was}"),
        }
        ep.handle_path_error(now, *id);
        self.reopen(now);
    }

    /// Close and open the socket again at once (a new local address or device).
    pub(super) fn reopen(&mut self, now: Instant) {
        if let Carrier::Udp(u) = &mut self.carrier {
            u.sock = None;
            u.uplink.bound = None;
            u.uplink.next_check = Some(now + ADDRESS_CHECK);
        }
        self.last_error = None;
        self.try_open(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(local: &str, dev: Option<&str>, target: Remote) -> UdpIo {
        let local: SocketAddr = local.parse().unwrap();
        UdpIo::new(
            local,
            target,
            dev.map(Into::into),
            crate::daemon::SockOpts::default(),
        )
    }

    #[test]
    fn follows_the_device_address() {
        let u = io("0.0.0.0:7000", Some("lo"), Remote::Learn);
        assert!(u.follows_dev());
        assert_eq!(u.bind_addr().unwrap(), "127.0.0.1:7000".parse().unwrap());
        let u = io("0.0.0.0:7000", Some("no-such-dev0"), Remote::Learn);
        let e = u.bind_addr().unwrap_err();
        assert_eq!(
            e,
            "dev no-such-dev0 has no IPv4 address (yet): the path waits for one"
        );
        let u = io("127.0.0.1:7000", Some("lo"), Remote::Learn);
        assert!(!u.follows_dev());
    }

    /// Wait (bounded) for a resolution in flight to be taken by `check_uplink`.
    fn settle(p: &mut PathIo, ep: &mut Endpoint, now: Instant) {
        for _ in 0..500 {
            p.check_uplink(now, ep);
            if !p.resolving() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no answer from the resolver");
    }

    #[test]
    fn a_name_is_resolved_again_while_the_path_is_down() {
        let cfg = crate::config::Config::parse(
            "[bond]\naddress = \"10.0.0.1/30\"\nencryption = \"none\"\n",
            "t",
        )
        .unwrap();
        let (mut ep, _) = cfg.build_endpoint(Instant::ZERO).unwrap();
        let kind = braid_core::PathKind::Udp { remote: None };
        let id = ep
            .add_path(
                Instant::ZERO,
                crate::config::path_config("p", 0, 0),
                kind,
                None,
            )
            .unwrap();
        let target = Remote::Name {
            host: "localhost".into(),
            port: 7001,
        };
        let carrier = Carrier::Udp(io("127.0.0.1:0", None, target));
        let mut p = PathIo::new(Instant::ZERO, id, "p".into(), carrier);
        assert_eq!(ep.bond().path_state(id), Some(LinkState::Down));
        let t0 = Instant::from_millis(10);
        p.check_uplink(t0, &mut ep);
        assert!(p.resolving(), "a name not known yet is resolved");
        settle(&mut p, &mut ep, t0);
        assert_eq!(ep.remote(id), Some("127.0.0.1:7001".parse().unwrap()));
        // Down, but resolved less than RESOLVE_RETRY ago: not again yet.
        p.check_uplink(t0 + RESOLVE_RETRY / 2, &mut ep);
        assert!(!p.resolving());
        // Still down RESOLVE_RETRY later: again.
        p.check_uplink(t0 + RESOLVE_RETRY, &mut ep);
        assert!(p.resolving(), "a down path resolves its name again");
        settle(&mut p, &mut ep, t0 + RESOLVE_RETRY);
        assert_eq!(
            p.uplink_due(t0 + RESOLVE_RETRY),
            Some(t0 + RESOLVE_RETRY * 2)
        );
    }

    #[test]
    fn resolves_a_name_off_the_loop() {
        let mut u = io(
            "127.0.0.1:7000",
            None,
            Remote::Name {
                host: "localhost".into(),
                port: 7001,
            },
        );
        u.start_resolving(Instant::ZERO);
        let mut got = None;
        for _ in 0..500 {
            if let Some(r) = u.poll_resolved() {
                got = Some(r);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(got, Some(Ok("127.0.0.1:7001".parse().unwrap())));
    }
}
