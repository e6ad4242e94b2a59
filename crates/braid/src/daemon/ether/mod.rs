//! `braid up` for a bond of Ethernet ports (`layer = "ethernet"`, `kind = "ethernet"`
//! members): one thread, one `ppoll` loop around [`braid_core::ether::EtherBond`], as
//! the kernel's bonding driver runs around its slaves.
//!
//! The bond's interface is a TAP with one MAC; each member is a packet socket on its
//! port (promiscuous, vnet headers so that GSO superframes pass whole). Each turn reads
//! the clock once, then: TAP reads into `EtherBond::transmit` (sent on the member it
//! names, or on every usable one), member reads into `EtherBond::receive` (delivered to
//! the TAP, or taken by the bond: LACPDUs, ARP monitor replies), carrier changes from
//! netlink into `set_link`, control requests; then the bond's timers and its own frames
//! (LACPDUs, gratuitous ARP / NA, ARP probes). At start the members' addresses and
//! routes move onto the TAP (`ether_addrs`), and back at exit.
use std::path::Path;

use anyhow::Context;
use braid_core::ether::{Egress, EtherBond, EtherEvent, Ingress, MemberConfig, MemberId};
use braid_core::Instant;
use serde_json::{json, Value};

use super::ether_addrs::{self, Moved};
use super::{Clock, BATCH};
use crate::config::{format_mac, Config, EtherSettings};
use crate::control::{self, ControlServer, Request};
use crate::log::{dlog, dwarn, Level};
use crate::sys::link_watch::LinkWatch;
use crate::sys::poll;
use crate::sys::signal::{self, Signals};
use crate::sys::tap::Tap;

mod bond_config;
mod member;
mod status;

use member::Member;

/// `virtio_net_hdr` in front of every frame on the TAP and the packet sockets.
const VNET_HDR: usize = 10;
/// How often each member's carrier is asked for, as bonding's `miimon` (default 100 ms)
/// polls it: the kernel's own link notices may come up to a second late when another link
/// changed just before (its link-watch rate limit), the flags an `RTM_GETLINK` answer
/// carries are the carrier now.
const MIIMON: std::time::Duration = std::time::Duration::from_millis(100);
/// Largest frame read: a 64 KB GSO superframe, its header and a VLAN tag put back.
const FRAME_BUF: usize = crate::sys::packet::MAX_RECV;

/// `braid up` with an Ethernet bond: set up, run until SIGINT/SIGTERM or `braid down`,
/// put everything back.
pub fn run(
    cfg: &Config,
    ether: &EtherSettings,
    file: &Path,
    control_path: &Path,
) -> anyhow::Result<()> {
    let mut d = EtherDaemon::new(cfg, ether, control_path)?;
    d.config_file = Some(file.to_path_buf());
    d.notify_ready();
    let r = d.run();
    d.shut_down();
    r
}

/// Which fd a pollfd entry stands for.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Signal,
    Tap,
    Link,
    Listener,
    Client,
    Member(usize),
}

/// A running Ethernet bond.
#[derive(Debug)]
struct EtherDaemon {
    clock: Clock,
    bond: EtherBond,
    /// The members' addresses and routes, moved onto the TAP; put back at exit.
    moved: Option<Moved>,
    tap: Tap,
    members: Vec<Member>,
    link: LinkWatch,
    control: ControlServer,
    signals: Signals,
    interface: String,
    address: String,
    mac: [u8; 6],
    settings: EtherSettings,
    config_file: Option<std::path::PathBuf>,
    buf: Vec<u8>,
    /// The bond's own frames, behind a zeroed vnet header.
    ctl: [u8; VNET_HDR + 1518],
    pollfds: Vec<libc::pollfd>,
    slots: Vec<Slot>,
    tap_read_errors: u64,
    tap_write_errors: u64,
    down_requested: bool,
    started: Instant,
    /// When the members' carrier is next asked for ([`MIIMON`]).
    next_miimon: Instant,
}

impl EtherDaemon {
    fn new(
        cfg: &Config,
        ether: &EtherSettings,
        control_path: &Path,
    ) -> anyhow::Result<EtherDaemon> {
        let b = &cfg.bond;
        if std::os::unix::net::UnixStream::connect(control_path).is_ok() {
            anyhow::bail!(
                "another braid is already running with control socket {}",
                control_path.display()
            );
        }
        if b.run_as.is_some() {
            anyhow::bail!("--user is not possible with a bond of Ethernet ports: braid puts the members' addresses and routes back when it stops, which needs CAP_NET_ADMIN; run it as root (or as a user given CAP_NET_ADMIN and CAP_NET_RAW)");
        }
        if cfg.monitor.as_ref().is_some_and(|m| m.listen.is_some()) {
            anyhow::bail!("--monitor and [monitor] are not served by a bond of Ethernet ports yet: braid status shows its members");
        }
        let clock = Clock::start();
        let now = clock.now();
        let state_file = ether_addrs_state(control_path);
        if ether_addrs::repair(&state_file).map_err(|e| anyhow::anyhow!("{e}"))? {
            dwarn!(
                now,
                "braid: a previous run of {} stopped without putting its members' addresses back; they are back now",
                b.interface
            );
        }
        let mut members = Vec::with_capacity(ether.members.len());
        for (i, m) in ether.members.iter().enumerate() {
            let id = MemberId(u16::try_from(i).context("too many members")?);
            members.push(Member::open(now, id, &m.name, &m.dev, true));
        }
        let mac = match b.mac {
            Some(mac) => mac,
            None => members
                .first()
                .and_then(|m| m.sock.as_ref())
                .map(crate::sys::packet::PacketSocket::mac)
                .ok_or_else(|| {
                    let first = ether.members.first().map_or("?", |m| m.dev.as_str());
                    anyhow::anyhow!("bond.mac is not set and the first member's port {first} cannot be opened to take its MAC (set bond.mac, or check the port)")
                })?,
        };
        let tap = Tap::open(&b.interface, mac, b.mtu, true)
            .with_context(|| format!("cannot create the TAP interface {}", b.interface))?;
        // The ports there now; one that appears later joins without addresses to move.
        let devs: Vec<String> = members
            .iter()
            .filter(|m| m.sock.is_some())
            .map(|m| m.dev.clone())
            .collect();
        let moved =
            ether_addrs::take_over(&b.interface, &devs, &state_file, ether.take_default_route)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        dlog!(
            now,
            "braid: moved onto {}: {}",
            b.interface,
            moved.summary()
        );
        add_address(now, &b.interface, &b.address.to_string());
        if let Some(a6) = b.address6 {
            add_address(now, &b.interface, &a6.to_string());
        }
        let mut bond = EtherBond::new(bond_config::core_config(cfg, ether, mac, moved.addresses()))
            .map_err(|e| anyhow::anyhow!("bond: {e}"))?;
        for m in &mut members {
            // A port missing now speaks (LACP) from the bond's MAC when it comes.
            let mac = m
                .sock
                .as_ref()
                .map_or(mac, crate::sys::packet::PacketSocket::mac);
            m.carrier = m.carrier_now();
            let id = bond.add_member(
                now,
                MemberConfig {
                    mac,
                    link_up: m.carrier,
                },
            );
            debug_assert_eq!(id, m.id, "members are added in file order");
        }
        let link = LinkWatch::open().context("cannot watch the members' carrier (netlink)")?;
        let control = ControlServer::bind(control_path)?;
        let d = EtherDaemon {
            clock,
            bond,
            moved: Some(moved),
            tap,
            members,
            link,
            control,
            signals: Signals::new().map_err(|e| anyhow::anyhow!("signalfd: {e}"))?,
            interface: b.interface.clone(),
            address: b.address.to_string(),
            mac,
            settings: ether.clone(),
            config_file: None,
            buf: vec![0; FRAME_BUF],
            ctl: [0; VNET_HDR + 1518],
            pollfds: Vec::with_capacity(8 + ether.members.len() + control::MAX_CLIENTS),
            slots: Vec::with_capacity(8 + ether.members.len() + control::MAX_CLIENTS),
            tap_read_errors: 0,
            tap_write_errors: 0,
            down_requested: false,
            started: now,
            next_miimon: now + MIIMON,
        };
        dlog!(
            now,
            "braid: {} up: Ethernet bond, mac {}, address {}, mtu {}, scheduler {}{}, members {}; control socket {}",
            d.interface,
            format_mac(mac),
            d.address,
            b.mtu,
            ether.scheduler.name(),
            match ether.scheduler {
                crate::config::EtherScheduler::Xor | crate::config::EtherScheduler::Lacp =>
                    format!(" (hash {})", ether.hash),
                _ => String::new(),
            },
            d.members
                .iter()
                .map(|m| format!("{} ({}, carrier {})", m.name, m.dev, if m.carrier { "up" } else { "down" }))
                .collect::<Vec<_>>()
                .join(", "),
            d.control.path().display()
        );
        Ok(d)
    }

    fn notify_ready(&self) {
        if !crate::sys::notify::wanted() {
            return;
        }
        let status = format!(
            "{} up, {} member(s), control socket {}",
            self.interface,
            self.members.len(),
            self.control.path().display()
        );
        if let Err(e) = crate::sys::notify::ready(&status) {
            dwarn!(
                self.clock.now(),
                "braid: cannot notify systemd (NOTIFY_SOCKET): {e}"
            );
        }
    }

    fn run(&mut self) -> anyhow::Result<()> {
        while self.turn()? {}
        Ok(())
    }

    /// Put the members' addresses and routes back (the TAP goes when it is dropped).
    fn shut_down(&mut self) {
        let now = self.clock.now();
        if let Err(e) = crate::sys::notify::stopping() {
            dwarn!(now, "braid: cannot notify systemd (NOTIFY_SOCKET): {e}");
        }
        if let Some(moved) = self.moved.take() {
            if let Err(e) = moved.restore() {
                dwarn!(now, "braid: putting the members' addresses back: {e}");
            }
        }
    }

    fn turn(&mut self) -> anyhow::Result<bool> {
        let now = self.clock.now();
        self.turn_output(now);
        let timeout = self.next_wakeup(now).map(|t| t.saturating_since(now));

        let mut slots = std::mem::take(&mut self.slots);
        slots.clear();
        self.pollfds.clear();
        let mut watch = |fd, slot| {
            self.pollfds.push(poll::readable(fd));
            slots.push(slot);
        };
        use std::os::fd::AsRawFd;
        watch(self.signals.as_raw_fd(), Slot::Signal);
        watch(self.tap.as_raw_fd(), Slot::Tap);
        watch(self.link.as_raw_fd(), Slot::Link);
        watch(self.control.listener_fd(), Slot::Listener);
        for (fd, _) in self.control.client_fds() {
            watch(fd, Slot::Client);
        }
        for (i, m) in self.members.iter().enumerate() {
            if let Some(s) = &m.sock {
                watch(s.as_raw_fd(), Slot::Member(i));
            }
        }
        for (p, (fd, wants_write)) in self
            .pollfds
            .iter_mut()
            .skip(4)
            .zip(self.control.client_fds())
        {
            if fd == p.fd && wants_write {
                p.events |= libc::POLLOUT;
            }
        }
        poll::wait(&mut self.pollfds, timeout).map_err(|e| anyhow::anyhow!("ppoll: {e}"))?;

        let now = self.clock.now();
        let mut go_on = true;
        for (k, slot) in slots.iter().enumerate() {
            let Some(&pfd) = self.pollfds.get(k) else {
                break;
            };
            if !(poll::is_ready(&pfd) || pfd.revents & libc::POLLOUT != 0) {
                continue;
            }
            match *slot {
                Slot::Signal => {
                    if let Some(sig) = self.signals.read() {
                        if sig == libc::SIGHUP {
                            dlog!(now, "braid: SIGHUP received, reloading the config");
                            let v = self.reload(now);
                            if let Some(e) = v.get("error").and_then(Value::as_str) {
                                dwarn!(now, "braid: config not reloaded: {e}");
                            }
                            continue;
                        }
                        dlog!(
                            now,
                            "braid: {} received, removing {}",
                            signal::name(sig),
                            self.interface
                        );
                        go_on = false;
                    }
                }
                Slot::Tap => self.read_tap(now),
                Slot::Link => self.read_links(now),
                Slot::Listener => self.control.accept(now),
                Slot::Client => self.serve_client(now, pfd.fd),
                Slot::Member(i) => self.read_member(now, i),
            }
        }
        self.slots = slots;
        if go_on && self.down_requested {
            dlog!(now, "braid: braid down asked, removing {}", self.interface);
            go_on = false;
        }
        Ok(go_on)
    }

    fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        [
            self.bond.poll_timeout(),
            crate::log::next_repeat_due(),
            self.control.poll_timeout(),
            Some(self.next_miimon),
            self.members
                .iter()
                .filter(|m| m.sock.is_none())
                .map(|m| m.retry_at.max(now))
                .min(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Frames from the host: to the member(s) the bond picks.
    fn read_tap(&mut self, now: Instant) {
        for _ in 0..BATCH {
            let n = match self.tap.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    self.tap_read_errors += 1;
                    crate::log::limited(
                        now,
                        Level::Warn,
                        "tap-read",
                        format!("braid: reading {}: {e}", self.interface),
                    );
                    return;
                }
            };
            let Some(frame) = self.buf.get(VNET_HDR..n) else {
                continue;
            };
            match self.bond.transmit(now, frame) {
                Egress::One(id) => {
                    if let Some(m) = self.members.get_mut(usize::from(id.0)) {
                        m.send(now, &self.buf[..n]);
                    }
                }
                Egress::All => {
                    for id in self.bond.usable() {
                        if let Some(m) = self.members.get_mut(usize::from(id.0)) {
                            m.send(now, &self.buf[..n]);
                        }
                    }
                }
                Egress::Drop(_) => {}
            }
        }
    }

    /// Frames from a member: to the host, or to the bond itself.
    fn read_member(&mut self, now: Instant, i: usize) {
        let Some(m) = self.members.get_mut(i) else {
            return;
        };
        for _ in 0..BATCH {
            let Some(s) = &m.sock else {
                return;
            };
            let n = match s.recv(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    m.recv_errors += 1;
                    if member::vanished(&e) || !m.still_there() {
                        dwarn!(now, "member {} ({}): port gone: {e}", m.name, m.dev);
                        m.fail(now, e.to_string());
                        if m.carrier {
                            m.carrier = false;
                            self.bond.set_link(now, m.id, false);
                        }
                    }
                    return;
                }
            };
            m.received += 1;
            let Some(frame) = self.buf.get(VNET_HDR..n) else {
                continue;
            };
            if self.bond.receive(now, m.id, frame) == Ingress::Deliver {
                if let Err(e) = self.tap.write(&self.buf[..n]) {
                    self.tap_write_errors += 1;
                    crate::log::limited(
                        now,
                        Level::Warn,
                        "tap-write",
                        format!("braid: writing to {}: {e}", self.interface),
                    );
                }
            }
        }
    }

    /// Carrier changes of the members' ports.
    fn read_links(&mut self, now: Instant) {
        let (members, bond) = (&mut self.members, &mut self.bond);
        let r = self.link.drain(&mut |ifindex, up| {
            let Some(m) = members
                .iter_mut()
                .find(|m| m.sock.is_some() && m.ifindex == ifindex)
            else {
                return;
            };
            if !up && !m.still_there() {
                dwarn!(now, "member {} ({}): port gone", m.name, m.dev);
                m.fail(now, "the port was removed".into());
            }
            let up = up && m.sock.is_some();
            if up != m.carrier {
                m.carrier = up;
                bond.set_link(now, m.id, up);
            }
        });
        if let Err(e) = r {
            crate::log::limited(
                now,
                Level::Warn,
                "netlink",
                format!("braid: reading link changes: {e}"),
            );
        }
    }

    /// Timers, reopened ports, the bond's own frames, its events.
    fn turn_output(&mut self, now: Instant) {
        crate::log::flush_repeats(now);
        if self.control.poll_timeout().is_some_and(|t| t <= now) {
            self.control.handle_timeout(now);
        }
        for m in &mut self.members {
            if m.sock.is_none() && m.retry_at <= now {
                m.try_open(now, true);
                // A port made again has no guard yet (its predecessor's went with it).
                if m.sock.is_some() {
                    if let Err(e) = super::ether_guard::guard(&self.interface, &m.dev) {
                        dwarn!(now, "member {} ({}): cannot keep the host stack off the port (it may answer twice): {e}", m.name, m.dev);
                    }
                }
                let up = m.carrier_now();
                if up != m.carrier {
                    m.carrier = up;
                    self.bond.set_link(now, m.id, up);
                }
            }
        }
        if self.next_miimon <= now {
            self.next_miimon = now + MIIMON;
            for m in self.members.iter().filter(|m| m.sock.is_some()) {
                if let Err(e) = self.link.request(m.ifindex) {
                    crate::log::limited(
                        now,
                        Level::Warn,
                        "netlink-request",
                        format!("braid: asking for {}'s carrier: {e}", m.dev),
                    );
                }
            }
        }
        if self.bond.poll_timeout().is_some_and(|t| t <= now) {
            self.bond.handle_timeout(now);
        }
        let mut frame = [0u8; 1518];
        while let Some((id, len)) = self.bond.poll_transmit(now, &mut frame) {
            let (Some(m), Some(f)) = (self.members.get_mut(usize::from(id.0)), frame.get(..len))
            else {
                continue;
            };
            self.ctl[..VNET_HDR].fill(0);
            self.ctl[VNET_HDR..VNET_HDR + len].copy_from_slice(f);
            m.send(now, &self.ctl[..VNET_HDR + len]);
        }
        while let Some(ev) = self.bond.poll_event() {
            self.log_event(now, ev);
        }
    }

    fn member_name(&self, id: Option<MemberId>) -> &str {
        id.and_then(|id| self.members.get(usize::from(id.0)))
            .map_or("none", |m| m.name.as_str())
    }

    fn log_event(&self, now: Instant, ev: EtherEvent) {
        match ev {
            EtherEvent::MemberUp(id) => dlog!(now, "member {} up", self.member_name(Some(id))),
            EtherEvent::MemberDown(id) => dwarn!(now, "member {} down", self.member_name(Some(id))),
            EtherEvent::ActiveChanged { from, to } => dlog!(
                now,
                "active member {} -> {}",
                self.member_name(from),
                self.member_name(to)
            ),
            EtherEvent::CarrierUp => dlog!(now, "{}: carrier up", self.interface),
            EtherEvent::CarrierDown => dwarn!(
                now,
                "{}: carrier down: no member can carry traffic",
                self.interface
            ),
            EtherEvent::Lacp(e) => dlog!(now, "lacp: {}", status::lacp_event(e, &self.members)),
        }
    }

    fn serve_client(&mut self, now: Instant, fd: i32) {
        let EtherDaemon {
            control,
            down_requested,
            config_file,
            settings,
            bond,
            members,
            interface,
            address,
            mac,
            started,
            tap_read_errors,
            tap_write_errors,
            ..
        } = self;
        let view = status::View {
            bond,
            members,
            interface,
            address,
            mac: *mac,
            settings,
            uptime: now.saturating_since(*started),
            tap_read_errors: *tap_read_errors,
            tap_write_errors: *tap_write_errors,
        };
        control.service(now, fd, &mut |req| match req {
            Err(e) => control::error(e),
            Ok(Request::Status) => status::json(&view),
            Ok(Request::Down) => {
                *down_requested = true;
                json!({"ok": true})
            }
            Ok(Request::Reload) => reload(config_file.as_deref(), settings),
            Ok(_) => control::error("not for a bond of Ethernet ports (its members are its config's [[path]] kind = \"ethernet\"; change the file and restart)"),
        });
    }

    fn reload(&self, _now: Instant) -> Value {
        reload(self.config_file.as_deref(), &self.settings)
    }
}

/// Re-read the config file: an Ethernet bond applies nothing at run time, so a file that
/// changes what runs is refused (restart to apply it).
fn reload(file: Option<&Path>, running: &EtherSettings) -> Value {
    let Some(file) = file else {
        return control::error("no config file to reload");
    };
    match crate::config::Config::load(file) {
        Err(e) => control::error(format!(
            "config not reloaded: {e}; the running bond is unchanged"
        )),
        Ok(c) if c.ether.as_ref() == Some(running) => json!({"ok": true, "changes": []}),
        Ok(_) => control::error("config not reloaded: a bond of Ethernet ports does not change while it runs; restart braid to apply the file (the running bond is unchanged)"),
    }
}

/// Put `cidr` on the bond's interface (`ip addr replace`, so an address the members
/// brought along is no error).
fn add_address(now: Instant, interface: &str, cidr: &str) {
    let args = ["addr", "replace", cidr, "dev", interface];
    if let Err(e) = super::hooks::ip(&args) {
        dwarn!(now, "braid: cannot put {cidr} on {interface}: {e}");
    }
}

/// Where the moved addresses are written down while the bond runs: beside the control
/// socket (`/run/braid/bond0.sock` → `/run/braid/bond0.moved.json`).
fn ether_addrs_state(control_path: &Path) -> std::path::PathBuf {
    control_path.with_extension("moved.json")
}
