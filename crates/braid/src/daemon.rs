//! `braid up`: one thread, one `ppoll` loop around the bond.
//!
//! Each turn reads the clock once ([`Clock::now`]), then: TUN reads (at most [`BATCH`])
//! into `handle_tun_packet`; path socket reads into `handle_datagram`; control requests;
//! `handle_timeout` when due; then `poll_transmit` → send (through the path's emulator if
//! it has one), emulator releases → send, `poll_deliver` → TUN write, `poll_event` → log.
//! The loop sleeps until a fd is ready or the earliest of the bond's, the emulators' and
//! the socket-retry deadlines.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use braid_core::bond::{Bond, Event};
use braid_core::emu::{EmuConfig, Emulator};
use braid_core::wire::DATA_HEADER_LEN;
use braid_core::{Instant, PathId};
use serde_json::{json, Value};

use crate::config::{self, Config};
use crate::control::{self, ControlServer, Request};
use crate::seal::{Incoming, Sealer};
use crate::sys::poll;
use crate::sys::signal::{self, Signals};
use crate::sys::tun::Tun;
use crate::sys::udp::{self, ErrorKind};

/// Most packets read from one fd per loop turn.
pub const BATCH: usize = 64;
/// How often a broken path socket is re-created.
pub const SOCKET_RETRY: Duration = Duration::from_secs(1);
/// Largest datagram read from a path socket.
const MAX_DATAGRAM: usize = 65536;

/// The daemon's one clock: monotonic time since start as a [`braid_core::Instant`].
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: std::time::Instant,
}

impl Clock {
    /// Start the clock: `now()` counts from here.
    #[expect(clippy::disallowed_methods, reason = "the daemon's one clock read")]
    pub fn start() -> Clock {
        Clock {
            start: std::time::Instant::now(),
        }
    }

    /// Now, in µs since start.
    pub fn now(&self) -> Instant {
        Instant::from_micros(
            u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX / 4),
        )
    }
}

/// Log a line to stderr with the daemon's uptime, dmesg style.
pub fn log(now: Instant, msg: std::fmt::Arguments<'_>) {
    let us = now.as_micros();
    eprintln!("[{:>6}.{:03}] {msg}", us / 1_000_000, (us / 1000) % 1000);
}

macro_rules! dlog {
    ($now:expr, $($arg:tt)*) => { log($now, format_args!($($arg)*)) };
}

/// Counters of the IO layer (not the bond's), shown by `status`.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct IoCounters {
    /// Datagrams not sent: the socket buffer was full (EAGAIN).
    pub send_would_block: u64,
    /// Datagrams not sent: the socket was closed or the send failed.
    pub send_errors: u64,
    /// Receive errors.
    pub recv_errors: u64,
    /// Datagrams the emulator dropped (loss, outage, queue full).
    pub emu_dropped: u64,
}

/// One path's IO: its socket (re-created when broken) and optional emulator.
#[derive(Debug)]
pub struct PathIo {
    /// The bond's id for the path.
    pub id: PathId,
    /// Path name.
    pub name: String,
    /// Local address.
    pub local: SocketAddr,
    /// Remote address.
    pub remote: SocketAddr,
    /// Device binding.
    pub dev: Option<String>,
    sock: Option<UdpSocket>,
    /// When to try to re-open the socket (if closed).
    retry_at: Instant,
    /// Last socket error, for status and to log only changes.
    last_error: Option<String>,
    /// Its OS error number.
    last_errno: Option<i32>,
    emu: Option<Emulator>,
    counters: IoCounters,
}

impl PathIo {
    /// A path's IO; opens the socket at once (or schedules retries when that fails).
    fn new(
        now: Instant,
        id: PathId,
        name: String,
        local: SocketAddr,
        remote: SocketAddr,
        dev: Option<String>,
        emu: Option<EmuConfig>,
    ) -> PathIo {
        let mut p = PathIo {
            id,
            name,
            local,
            remote,
            dev,
            sock: None,
            retry_at: now,
            last_error: None,
            last_errno: None,
            emu: emu.map(|c| Emulator::new(c, now)),
            counters: IoCounters::default(),
        };
        p.try_open(now);
        p
    }

    /// Try to open the socket; on failure log (once per distinct error) and retry later.
    fn try_open(&mut self, now: Instant) -> bool {
        match udp::open(self.local, self.remote, self.dev.as_deref()) {
            Ok(s) => {
                if self.last_error.take().is_some() {
                    dlog!(
                        now,
                        "path {}: socket open again ({} -> {})",
                        self.name,
                        self.local,
                        self.remote
                    );
                }
                self.sock = Some(s);
                true
            }
            Err(e) => {
                self.fail(now, e.to_string());
                self.last_errno = e.err.raw_os_error();
                false
            }
        }
    }

    fn fail(&mut self, now: Instant, msg: String) {
        if self.last_error.as_deref() != Some(msg.as_str()) {
            dlog!(
                now,
                "path {}: {msg}; retrying every {}s",
                self.name,
                SOCKET_RETRY.as_secs()
            );
        }
        self.sock = None;
        self.last_error = Some(msg);
        self.last_errno = None;
        self.retry_at = now + SOCKET_RETRY;
    }

    fn io_json(&self) -> Value {
        json!({
            "id": self.id.0,
            "name": self.name,
            "local": self.local.to_string(),
            "remote": self.remote.to_string(),
            "dev": self.dev,
            "socket": if self.sock.is_some() { "open" } else { "closed" },
            "error": self.last_error,
            "emulated": self.emu.is_some(),
            "counters": self.counters,
        })
    }
}

/// A running daemon's state. Built by [`Daemon::new`], driven by [`Daemon::run`].
#[derive(Debug)]
pub struct Daemon {
    clock: Clock,
    bond: Bond,
    tun: Tun,
    paths: Vec<PathIo>,
    sealer: Sealer,
    control: ControlServer,
    signals: Signals,
    interface: String,
    address: String,
    tx_buf: Vec<u8>,
    rx_buf: Vec<u8>,
    tun_buf: Vec<u8>,
    pollfds: Vec<libc::pollfd>,
    tun_write_errors: u64,
}

/// `braid up`: set everything up from `cfg`, run until SIGINT/SIGTERM, tear down.
pub fn run(cfg: &Config, control_path: Option<&Path>) -> anyhow::Result<()> {
    let control_path = control_path.map_or_else(
        || control::default_socket(&cfg.bond.interface),
        Path::to_path_buf,
    );
    let mut d = Daemon::new(cfg, &control_path)?;
    d.run()
}

/// Which fd a pollfd entry stands for.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Signal,
    Tun,
    Listener,
    Client,
    Path(usize),
}

impl Daemon {
    /// Create the TUN, the path sockets and the control socket (last: when it accepts
    /// connections, the daemon is ready).
    pub fn new(cfg: &Config, control_path: &Path) -> anyhow::Result<Daemon> {
        let clock = Clock::start();
        let now = clock.now();
        let signals = Signals::new().map_err(|e| anyhow::anyhow!("signalfd: {e}"))?;
        let b = &cfg.bond;
        if std::os::unix::net::UnixStream::connect(control_path).is_ok() {
            anyhow::bail!(
                "another braid is already running with control socket {}",
                control_path.display()
            );
        }
        let tun = Tun::open(&b.interface, b.mtu, b.address, b.address6)?;
        let (mut bond, ids) = cfg.build_bond(now)?;
        if let Some(shape) = &cfg.shape {
            let (shaper, warnings) =
                braid_core::shape::Shaper::new(&shape.spec, 0, b.core.mtu, now)
                    .map_err(|e| anyhow::anyhow!("shape: {e}"))?;
            for n in shape.notes.iter().chain(&warnings) {
                dlog!(now, "shape: {n}");
            }
            dlog!(
                now,
                "shape: {} classes, {} filters, link rate {}",
                shape.spec.classes.len(),
                shape.spec.filters.len(),
                shape
                    .spec
                    .link_bps
                    .map_or("auto".to_string(), braid_core::shape::units::format_rate)
            );
            bond.set_shaper(now, Some(shaper), shape.spec.link_bps.is_none());
        }
        let mut paths = Vec::with_capacity(cfg.paths.len());
        for (p, id) in cfg.paths.iter().zip(ids) {
            let io = PathIo::new(
                now,
                id,
                p.name.clone(),
                p.local,
                p.remote,
                p.dev.clone(),
                p.emulate.clone(),
            );
            if let (Some(e), Some(libc::EADDRINUSE | libc::EPERM | libc::EACCES)) =
                (&io.last_error, io.last_errno)
            {
                anyhow::bail!("path {}: {e}", p.name);
            }
            paths.push(io);
        }
        let control = ControlServer::bind(control_path)?;
        let bufsize = b.core.mtu + DATA_HEADER_LEN + 64;
        let sealer = Sealer::new(cfg, now);
        if !sealer.enabled() {
            dlog!(
                now,
                "braid: WARNING: encryption = \"none\": anyone who can reach a path's port can inject packets into {}",
                b.interface
            );
        }
        let d = Daemon {
            clock,
            bond,
            tun,
            paths,
            sealer,
            control,
            signals,
            interface: b.interface.clone(),
            address: b.address.to_string(),
            tx_buf: vec![0; bufsize.max(MAX_DATAGRAM)],
            rx_buf: vec![0; MAX_DATAGRAM],
            tun_buf: vec![0; MAX_DATAGRAM],
            pollfds: Vec::with_capacity(8 + cfg.paths.len() + control::MAX_CLIENTS),
            tun_write_errors: 0,
        };
        dlog!(
            now,
            "braid: {} up: address {}{}, mtu {}, scheduler {}, {} path(s); control socket {}",
            b.interface,
            b.address,
            b.address6.map(|a| format!(" and {a}")).unwrap_or_default(),
            b.mtu,
            b.core.scheduler.name(),
            d.paths.len(),
            d.control.path().display()
        );
        for p in &d.paths {
            dlog!(
                now,
                "path {} ({}): {} -> {}{}{}",
                p.name,
                p.id,
                p.local,
                p.remote,
                p.dev
                    .as_ref()
                    .map(|d| format!(" dev {d}"))
                    .unwrap_or_default(),
                if p.emu.is_some() { " (emulated)" } else { "" }
            );
        }
        Ok(d)
    }

    /// The control socket's path.
    pub fn control_path(&self) -> &Path {
        self.control.path()
    }

    /// Run until a terminating signal. Dropping the daemon afterwards removes the TUN and
    /// the control socket.
    pub fn run(&mut self) -> anyhow::Result<()> {
        let mut slots: Vec<Slot> = Vec::with_capacity(self.pollfds.capacity());
        let mut now = self.clock.now();
        loop {
            // Timers and output for what the last wake-up brought in.
            self.turn_output(now);
            let timeout = self.next_wakeup().map(|t| t.saturating_since(now));

            self.pollfds.clear();
            slots.clear();
            self.pollfds.push(poll::readable(self.signals.as_raw_fd()));
            slots.push(Slot::Signal);
            self.pollfds.push(poll::readable(self.tun.as_raw_fd()));
            slots.push(Slot::Tun);
            self.pollfds
                .push(poll::readable(self.control.listener_fd()));
            slots.push(Slot::Listener);
            for (fd, wants_write) in self.control.client_fds() {
                let mut p = poll::readable(fd);
                if wants_write {
                    p.events |= libc::POLLOUT;
                }
                self.pollfds.push(p);
                slots.push(Slot::Client);
            }
            for (i, p) in self.paths.iter().enumerate() {
                if let Some(s) = &p.sock {
                    self.pollfds.push(poll::readable(s.as_raw_fd()));
                    slots.push(Slot::Path(i));
                }
            }
            poll::wait(&mut self.pollfds, timeout).map_err(|e| anyhow::anyhow!("ppoll: {e}"))?;

            now = self.clock.now();
            for (k, slot) in slots.iter().enumerate() {
                let Some(&pfd) = self.pollfds.get(k) else {
                    break;
                };
                let ready = poll::is_ready(&pfd) || pfd.revents & libc::POLLOUT != 0;
                if !ready {
                    continue;
                }
                match *slot {
                    Slot::Signal => {
                        if let Some(sig) = self.signals.read() {
                            dlog!(
                                now,
                                "braid: {} received, removing {}",
                                signal::name(sig),
                                self.interface
                            );
                            return Ok(());
                        }
                    }
                    Slot::Tun => self.read_tun(now),
                    Slot::Listener => self.control.accept(),
                    Slot::Client => self.serve_client(now, pfd.fd),
                    Slot::Path(i) => self.read_path(now, i),
                }
            }
        }
    }

    fn next_wakeup(&self) -> Option<Instant> {
        let mut next = self.bond.poll_timeout();
        let mut merge = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        merge(self.sealer.poll_timeout());
        for p in &self.paths {
            merge(p.emu.as_ref().and_then(Emulator::poll_timeout));
            if p.sock.is_none() {
                merge(Some(p.retry_at));
            }
        }
        next
    }

    fn read_tun(&mut self, now: Instant) {
        for _ in 0..BATCH {
            match self.tun.read(&mut self.tun_buf) {
                Ok(n) => match self.tun_buf.get(..n) {
                    Some(pkt) if n > 0 => self.bond.handle_tun_packet(now, pkt),
                    _ => {}
                },
                Err(_) => break, // EAGAIN (or a transient error): next turn
            }
        }
    }

    fn read_path(&mut self, now: Instant, i: usize) {
        let Some(p) = self.paths.get_mut(i) else {
            return;
        };
        for _ in 0..BATCH {
            let Some(sock) = &p.sock else { return };
            match sock.recv_from(&mut self.rx_buf) {
                Ok((n, src)) => {
                    let Some(d) = self.rx_buf.get_mut(..n) else {
                        continue;
                    };
                    let was = p.remote;
                    match self.sealer.incoming(now, &mut p.remote, src, d) {
                        Incoming::Deliver(d) => self.bond.handle_datagram(now, p.id, d),
                        Incoming::Reply(r) => send_raw(&mut self.bond, now, p, src, r),
                        Incoming::Drop => {}
                    }
                    if p.remote != was {
                        dlog!(now, "path {}: peer moved {was} -> {}", p.name, p.remote);
                    }
                }
                Err(e) => {
                    match udp::classify(&e) {
                        ErrorKind::WouldBlock => {}
                        ErrorKind::Datagram => continue,
                        ErrorKind::Path => {
                            p.counters.recv_errors += 1;
                            self.bond.handle_path_error(now, p.id);
                        }
                        ErrorKind::Socket => {
                            p.counters.recv_errors += 1;
                            self.bond.handle_path_error(now, p.id);
                            p.fail(now, format!("receive: {e}"));
                        }
                    }
                    return;
                }
            }
        }
    }

    /// Timers, then everything the bond and the emulators have to send or deliver.
    fn turn_output(&mut self, now: Instant) {
        for p in &mut self.paths {
            if p.sock.is_none() && p.retry_at <= now {
                p.try_open(now);
            }
        }
        if self.bond.poll_timeout().is_some_and(|t| t <= now) {
            self.bond.handle_timeout(now);
        }
        if self.sealer.poll_timeout().is_some_and(|t| t <= now) {
            self.sealer.handle_timeout(now);
        }
        while let Some(d) = self.sealer.poll_transmit(now) {
            for p in self.paths.iter_mut().filter(|p| p.sock.is_some()) {
                let to = p.remote;
                send_raw(&mut self.bond, now, p, to, d);
            }
        }
        while let Some(t) = self.bond.poll_transmit(now, &mut self.tx_buf) {
            let Some(i) = self.paths.iter().position(|p| p.id == t.path) else {
                continue;
            };
            let Some(data) = self.tx_buf.get(..t.len) else {
                continue;
            };
            let p = &mut self.paths[i];
            if let Some(emu) = &mut p.emu {
                if !emu.push(now, data) {
                    p.counters.emu_dropped += 1;
                }
            } else {
                send(&mut self.sealer, &mut self.bond, now, p, data);
            }
        }
        for p in &mut self.paths {
            let Some(mut emu) = p.emu.take() else {
                continue;
            };
            while let Some(n) = emu.poll(now, &mut self.tx_buf) {
                if let Some(data) = self.tx_buf.get(..n) {
                    send(&mut self.sealer, &mut self.bond, now, p, data);
                }
            }
            p.emu = Some(emu);
        }
        while let Some(n) = self.bond.poll_deliver(now, &mut self.tun_buf) {
            if let Some(pkt) = self.tun_buf.get(..n) {
                if self.tun.write(pkt).is_err() {
                    self.tun_write_errors += 1;
                }
            }
        }
        while let Some(ev) = self.bond.poll_event() {
            let (id, what) = match ev {
                Event::PathUp(id) => (id, "up"),
                Event::PathDown(id) => (id, "down"),
            };
            let name = self
                .paths
                .iter()
                .find(|p| p.id == id)
                .map_or("?", |p| p.name.as_str());
            dlog!(now, "path {name} ({id}) {what}");
        }
    }

    fn serve_client(&mut self, now: Instant, fd: i32) {
        let Daemon {
            control,
            bond,
            paths,
            sealer,
            interface,
            address,
            tun_write_errors,
            ..
        } = self;
        let mut handle = |req: Result<Request, String>| -> Value {
            match req {
                Err(e) => control::error(e),
                Ok(req) => {
                    let mut v = handle_request(
                        now,
                        bond,
                        paths,
                        req,
                        interface,
                        address,
                        *tun_write_errors,
                    );
                    if v.get("status").is_some() && v.get("io").is_some() {
                        v["encryption"] = sealer.status_json(now);
                    }
                    v
                }
            }
        };
        control.service(fd, &mut handle);
        // Requests may have added paths or changed the bond: output happens next turn,
        // which starts at once because `turn_output` runs before every wait.
    }
}

/// Seal one datagram of the bond and send it on a path.
fn send(sealer: &mut Sealer, bond: &mut Bond, now: Instant, p: &mut PathIo, data: &[u8]) {
    if let Some(sealed) = sealer.outgoing(now, data) {
        let to = p.remote;
        send_raw(bond, now, p, to, sealed);
    }
}

/// Send bytes as they are on a path's socket to `to` (its peer address, or the source of a
/// handshake message being answered); errors go to the bond.
fn send_raw(bond: &mut Bond, now: Instant, p: &mut PathIo, to: SocketAddr, data: &[u8]) {
    let Some(sock) = &p.sock else {
        p.counters.send_errors += 1;
        return;
    };
    if let Err(e) = sock.send_to(data, to) {
        match udp::classify(&e) {
            ErrorKind::WouldBlock => p.counters.send_would_block += 1,
            ErrorKind::Datagram => p.counters.send_errors += 1,
            ErrorKind::Path => {
                p.counters.send_errors += 1;
                bond.handle_path_error(now, p.id);
            }
            ErrorKind::Socket => {
                p.counters.send_errors += 1;
                bond.handle_path_error(now, p.id);
                p.fail(now, format!("send: {e}"));
            }
        }
    }
}

/// Answer one control request.
fn handle_request(
    now: Instant,
    bond: &mut Bond,
    paths: &mut Vec<PathIo>,
    req: Request,
    interface: &str,
    address: &str,
    tun_write_errors: u64,
) -> Value {
    match req {
        Request::Status => {
            let status = match serde_json::to_value(bond.status()) {
                Ok(v) => v,
                Err(e) => return control::error(format!("internal: {e}")),
            };
            let io: Vec<Value> = paths.iter().map(PathIo::io_json).collect();
            json!({
                "ok": true,
                "interface": interface,
                "address": address,
                "uptime_us": now.as_micros(),
                "status": status,
                "io": io,
                "tun_write_errors": tun_write_errors,
            })
        }
        Request::Enslave {
            name,
            local,
            remote,
            bps,
            dev,
        } => {
            if let Err(e) = config::check_path_name(&name) {
                return control::error(format!("name: {e}"));
            }
            let (local, remote) = match config::check_endpoints(&local, &remote) {
                Ok(x) => x,
                Err(e) => return control::error(e),
            };
            if let Some(d) = &dev {
                if let Err(e) = config::check_ifname(d) {
                    return control::error(format!("dev: {e}"));
                }
            }
            if bond.path_by_name(&name).is_some() {
                return control::error(format!("a path named {name:?} already exists"));
            }
            if let Some(other) = paths.iter().find(|p| p.local == local) {
                return control::error(format!(
                    "local {local} is already used by path {:?}",
                    other.name
                ));
            }
            // Open the socket first: a clear local mistake (address in use) is refused.
            let sock = udp::open(local, remote, dev.as_deref());
            if let Err(e) = &sock {
                if matches!(
                    e.err.raw_os_error(),
                    Some(libc::EADDRINUSE) | Some(libc::EPERM) | Some(libc::EACCES)
                ) {
                    return control::error(format!("path {name}: {e}"));
                }
            }
            let bps = bps.unwrap_or(0);
            let id = match bond.add_path(now, config::path_config(&name, bps, 0)) {
                Ok(id) => id,
                Err(e) => return control::error(e),
            };
            let mut io = PathIo {
                id,
                name: name.clone(),
                local,
                remote,
                dev,
                sock: None,
                retry_at: now,
                last_error: None,
                last_errno: None,
                emu: None,
                counters: IoCounters::default(),
            };
            let warning = match sock {
                Ok(s) => {
                    io.sock = Some(s);
                    None
                }
                Err(e) => {
                    let msg = e.to_string();
                    io.fail(now, msg.clone());
                    Some(format!("{msg}; retrying every {}s", SOCKET_RETRY.as_secs()))
                }
            };
            dlog!(now, "path {name} ({id}) enslaved: {local} -> {remote}");
            paths.push(io);
            json!({"ok": true, "id": id.0, "warning": warning})
        }
        Request::Emancipate { name } => {
            let Some(id) = bond.path_by_name(&name) else {
                return control::error(format!("no path named {name:?}"));
            };
            if let Err(e) = bond.remove_path(now, id) {
                return control::error(e);
            }
            paths.retain(|p| p.id != id);
            dlog!(now, "path {name} ({id}) emancipated");
            json!({"ok": true})
        }
        Request::ClassShow => crate::classes::show(now, bond),
        Request::ClassChange { id, set } => {
            let r = crate::classes::change(now, bond, &id, &set);
            if r.get("ok") == Some(&Value::Bool(true)) {
                dlog!(now, "class {id} changed: {}", Value::Object(set));
            }
            r
        }
        Request::Set { name, bps } => {
            let Some(id) = bond.path_by_name(&name) else {
                return control::error(format!("no path named {name:?}"));
            };
            match bond.set_path_bps(id, bps) {
                Ok(()) => {
                    dlog!(now, "path {name} ({id}): bps = {bps}");
                    json!({"ok": true})
                }
                Err(e) => control::error(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bond_with(names: &[&str]) -> (Bond, Vec<PathIo>) {
        let now = Instant::ZERO;
        let mut bond = Bond::new(Default::default(), now);
        let mut paths = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let id = bond.add_path(now, config::path_config(n, 0, 0)).unwrap();
            // Closed sockets: these tests never send.
            paths.push(PathIo {
                id,
                name: (*n).to_owned(),
                local: format!("127.0.0.1:{}", 40000 + i).parse().unwrap(),
                remote: "127.0.0.1:1".parse().unwrap(),
                dev: None,
                sock: None,
                retry_at: Instant::FAR_FUTURE,
                last_error: None,
                last_errno: None,
                emu: None,
                counters: IoCounters::default(),
            });
        }
        (bond, paths)
    }

    fn req(bond: &mut Bond, paths: &mut Vec<PathIo>, r: Request) -> Value {
        handle_request(Instant::ZERO, bond, paths, r, "braid0", "10.0.0.1/30", 0)
    }

    fn err_of(v: &Value) -> &str {
        assert_eq!(v["ok"], false, "{v}");
        v["error"].as_str().unwrap()
    }

    #[test]
    fn set_and_emancipate_by_name() {
        let (mut bond, mut paths) = bond_with(&["a", "b"]);
        let v = req(
            &mut bond,
            &mut paths,
            Request::Set {
                name: "b".into(),
                bps: 5000,
            },
        );
        assert_eq!(v["ok"], true);
        let s = req(&mut bond, &mut paths, Request::Status);
        assert_eq!(s["status"]["paths"][1]["bps"], 5000);
        assert_eq!(s["io"][1]["name"], "b");
        assert_eq!(s["interface"], "braid0");
        assert_eq!(
            err_of(&req(
                &mut bond,
                &mut paths,
                Request::Set {
                    name: "zz".into(),
                    bps: 1
                }
            )),
            "no path named \"zz\""
        );
        assert_eq!(
            req(
                &mut bond,
                &mut paths,
                Request::Emancipate { name: "a".into() }
            )["ok"],
            true
        );
        assert_eq!(paths.len(), 1);
        assert_eq!(bond.path_by_name("a"), None);
        assert_eq!(
            err_of(&req(
                &mut bond,
                &mut paths,
                Request::Emancipate { name: "a".into() }
            )),
            "no path named \"a\""
        );
    }

    #[test]
    fn enslave_validates() {
        let (mut bond, mut paths) = bond_with(&["a"]);
        let ens = |name: &str, local: &str, remote: &str, dev: Option<&str>| Request::Enslave {
            name: name.into(),
            local: local.into(),
            remote: remote.into(),
            bps: None,
            dev: dev.map(Into::into),
        };
        let mut error = |r: Request| err_of(&req(&mut bond, &mut paths, r)).to_string();
        let (local, remote) = ("127.0.0.1:40100", "127.0.0.1:40101");
        assert_eq!(
            error(ens("a", local, remote, None)),
            "a path named \"a\" already exists"
        );
        assert_eq!(
            error(ens("", local, remote, None)),
            "name: must not be empty"
        );
        assert_eq!(
            error(ens("c", "127.0.0.1:0", remote, None)),
            "local: \"127.0.0.1:0\": port 0 is not allowed"
        );
        assert_eq!(
            error(ens("c", "127.0.0.1:40000", remote, None)),
            "local 127.0.0.1:40000 is already used by path \"a\""
        );
        let e = error(ens("c", local, remote, Some("a/b")));
        assert!(e.starts_with("dev: "), "{e}");
        assert_eq!(paths.len(), 1);
    }

    #[test]
    fn enslave_on_loopback_opens_a_socket() {
        let (mut bond, mut paths) = bond_with(&[]);
        let free = UdpSocket::bind("127.0.0.1:0").unwrap();
        let local = free.local_addr().unwrap().to_string();
        drop(free);
        let v = req(
            &mut bond,
            &mut paths,
            Request::Enslave {
                name: "n".into(),
                local,
                remote: "127.0.0.1:9".into(),
                bps: Some(1000),
                dev: None,
            },
        );
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["warning"], Value::Null);
        assert_eq!(paths.len(), 1);
        assert!(paths[0].sock.is_some());
        assert_eq!(bond.status().paths[0].bps, 1000);
        // A foreign local address is accepted with a warning and retried.
        let v = req(
            &mut bond,
            &mut paths,
            Request::Enslave {
                name: "m".into(),
                local: "192.0.2.1:7000".into(),
                remote: "192.0.2.2:7000".into(),
                bps: None,
                dev: None,
            },
        );
        assert_eq!(v["ok"], true, "{v}");
        assert!(
            v["warning"]
                .as_str()
                .unwrap()
                .starts_with("bind 192.0.2.1:7000: "),
            "{v}"
        );
        assert!(paths[1].sock.is_none());
    }

    #[test]
    fn clock_is_monotonic_micros() {
        let c = Clock::start();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
