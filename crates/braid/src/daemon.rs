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
use braid_core::wire::{MessageType, DATA_HEADER_LEN};
use braid_core::{Instant, PathId};
use serde_json::{json, Value};

use crate::config::{self, termios_baud, Config, PathSettings, Transport, UdpSettings};
use crate::control::{self, ControlServer, Request};
use crate::log::{dlog, dwarn, Level};
use crate::seal::{Incoming, Roaming, Sealer, LINE_PEER};
use crate::sys::poll;
use crate::sys::signal::{self, Signals};
use crate::sys::tun::Tun;
use crate::sys::udp::{self, ErrorKind};

mod hooks;
mod notices;
mod notify;
mod reload;
mod routes;
mod serial;
mod snapshot;
mod uplink;
use notices::Notices;
pub use serial::{SerialCounters, SerialPath};

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

/// A UDP path's socket and endpoints.
#[derive(Debug)]
pub struct UdpIo {
    /// Local address as configured (unspecified: follow `dev`'s address).
    pub local: SocketAddr,
    /// The peer's current address (port 0: not known yet, nothing is sent).
    pub remote: SocketAddr,
    /// Device binding.
    pub dev: Option<String>,
    sock: Option<UdpSocket>,
    /// When `remote` may move to a new source address (`seal::Roaming`).
    roam: Roaming,
    /// The configured `remote` and SO_MARK, the device's address, name resolution
    /// (`daemon/uplink.rs`).
    uplink: Box<uplink::Uplink>,
}

impl UdpIo {
    /// A path's endpoints, no socket yet.
    fn new(
        local: SocketAddr,
        target: config::Remote,
        dev: Option<String>,
        mark: Option<u32>,
    ) -> UdpIo {
        UdpIo {
            local,
            remote: target
                .addr()
                .unwrap_or_else(|| uplink::unknown_peer(local.is_ipv4())),
            dev,
            sock: None,
            roam: Roaming::default(),
            uplink: Box::new(uplink::Uplink::new(target, mark)),
        }
    }

    /// Set the configured `remote` (a reload): a new address at once, a name resolved
    /// afresh, a learned one kept.
    fn set_target(&mut self, now: Instant, target: &config::Remote) {
        if &self.uplink.target == target {
            return;
        }
        self.uplink.target = target.clone();
        if let Some(a) = target.addr() {
            self.remote = a;
        }
        self.roam = Roaming::default();
        if matches!(target, config::Remote::Name { .. }) {
            self.remote = uplink::unknown_peer(self.local.is_ipv4());
            self.start_resolving(now);
        }
    }
}

/// What carries a path: a UDP socket or a serial line.
#[derive(Debug)]
pub enum Carrier {
    /// A UDP socket.
    Udp(UdpIo),
    /// A serial line (`daemon/serial.rs`).
    Serial(Box<SerialPath>),
}

/// One path's IO: its socket or tty (re-opened when broken) and optional emulator.
#[derive(Debug)]
pub struct PathIo {
    /// The bond's id for the path.
    pub id: PathId,
    /// Path name.
    pub name: String,
    /// The socket or the line.
    pub carrier: Carrier,
    /// When to try to re-open the socket or tty (if closed).
    retry_at: Instant,
    /// Last open/IO error, for status and to log only changes.
    last_error: Option<String>,
    /// Its OS error number.
    last_errno: Option<i32>,
    emu: Option<Emulator>,
    counters: IoCounters,
}

impl PathIo {
    /// A path's IO; opens the socket or tty at once (or schedules retries when that fails).
    fn new(
        now: Instant,
        id: PathId,
        name: String,
        carrier: Carrier,
        emu: Option<EmuConfig>,
    ) -> PathIo {
        let mut p = PathIo {
            id,
            name,
            carrier,
            retry_at: now,
            last_error: None,
            last_errno: None,
            emu: emu.map(|c| Emulator::new(c, now)),
            counters: IoCounters::default(),
        };
        p.try_open(now);
        p
    }

    /// A UDP path's IO from its settings; `mark`: the sockets' SO_MARK.
    fn udp(
        now: Instant,
        id: PathId,
        name: String,
        u: &UdpSettings,
        emu: Option<EmuConfig>,
        mark: Option<u32>,
    ) -> PathIo {
        let carrier = Carrier::Udp(UdpIo::new(u.local, u.remote.clone(), u.dev.clone(), mark));
        let mut p = PathIo::new(now, id, name, carrier, emu);
        p.resolve_now(now);
        p
    }

    /// A path's IO from its settings: opens the socket or tty (a serial line at a rate
    /// that is not a standard one is warned about).
    fn open(now: Instant, id: PathId, p: &PathSettings, mark: Option<u32>) -> PathIo {
        match &p.transport {
            Transport::Udp(u) => PathIo::udp(now, id, p.name.clone(), u, p.emulate.clone(), mark),
            Transport::Serial(s) => {
                if termios_baud(s.baud) != s.baud {
                    dwarn!(
                        now,
                        "path {}: {} bd is not a standard rate: {} is opened at {} bd and braid paces at {} bd (right for a pty or a modem with its own line rate; on a plain UART the line would run at {} bd)",
                        p.name,
                        s.baud,
                        s.device.display(),
                        termios_baud(s.baud),
                        s.baud,
                        termios_baud(s.baud)
                    );
                }
                let carrier = Carrier::Serial(Box::new(SerialPath::new(s.clone(), p.bps)));
                PathIo::new(now, id, p.name.clone(), carrier, p.emulate.clone())
            }
        }
    }

    /// True for a serial path in `mode = "raw-ip"` (then it is the bond's only path).
    pub fn is_raw_ip(&self) -> bool {
        matches!(&self.carrier, Carrier::Serial(s) if s.is_raw_ip())
    }

    /// The UDP side, if it is a UDP path.
    pub fn udp_io(&self) -> Option<&UdpIo> {
        match &self.carrier {
            Carrier::Udp(u) => Some(u),
            Carrier::Serial(_) => None,
        }
    }

    /// True while the socket or tty is open.
    fn is_open(&self) -> bool {
        match &self.carrier {
            Carrier::Udp(u) => u.sock.is_some(),
            Carrier::Serial(s) => s.is_open(),
        }
    }

    /// The fd to poll for reading.
    fn fd(&self) -> Option<i32> {
        match &self.carrier {
            Carrier::Udp(u) => u.sock.as_ref().map(AsRawFd::as_raw_fd),
            Carrier::Serial(s) => s.fd(),
        }
    }

    /// Try to open the socket or tty; on failure log (once per distinct error) and retry
    /// later.
    fn try_open(&mut self, now: Instant) -> bool {
        let res = match &mut self.carrier {
            Carrier::Udp(u) => match u.bind_addr() {
                Err(why) => Err((why, None)),
                Ok(at) => match udp::open(at, u.dev.as_deref(), u.uplink.mark) {
                    Ok(s) => {
                        u.sock = Some(s);
                        u.uplink.bound = Some(at);
                        Ok(format!("socket open again ({at} -> {})", u.uplink.target))
                    }
                    Err(e) => Err((e.to_string(), e.err.raw_os_error())),
                },
            },
            Carrier::Serial(s) => match s.open() {
                Ok(()) => Ok(format!("{} open again", s.cfg.device.display())),
                Err(e) => Err((e.to_string(), e.raw_os_error())),
            },
        };
        match res {
            Ok(again) => {
                if self.last_error.take().is_some() {
                    let line = format!("path {}: {again}", self.name);
                    crate::log::limited(now, Level::Info, &line, line.clone());
                }
                true
            }
            Err((msg, errno)) => {
                self.fail(now, msg);
                self.last_errno = errno;
                false
            }
        }
    }

    /// Close the socket or tty after `msg`, log it (once per distinct message) and retry
    /// later.
    fn fail(&mut self, now: Instant, msg: String) {
        if self.last_error.as_deref() != Some(msg.as_str()) {
            // A dead uplink fails and re-opens twice a second: said once, then summed up.
            let line = format!(
                "path {}: {msg}; retrying every {}s",
                self.name,
                SOCKET_RETRY.as_secs()
            );
            crate::log::limited(now, Level::Warn, &line, line.clone());
        }
        match &mut self.carrier {
            Carrier::Udp(u) => u.sock = None,
            Carrier::Serial(s) => s.close(),
        }
        self.last_error = Some(msg);
        self.last_errno = None;
        self.retry_at = now + SOCKET_RETRY;
    }

    fn io_json(&self, now: Instant) -> Value {
        let mut v = json!({
            "id": self.id.0,
            "name": self.name,
            "error": self.last_error,
            "emulated": self.emu.is_some(),
            "counters": self.counters,
        });
        match &self.carrier {
            Carrier::Udp(u) => {
                v["kind"] = "udp".into();
                v["local"] = u.local.to_string().into();
                v["bound"] = json!(u.uplink.bound.map(|a| a.to_string()));
                v["remote"] = json!((!uplink::is_unknown(&u.remote)).then(|| u.remote.to_string()));
                v["remote_config"] = u.uplink.target.to_string().into();
                v["resolving"] = self.resolving().into();
                v["dev"] = json!(u.dev);
                v["socket"] = if u.sock.is_some() { "open" } else { "closed" }.into();
            }
            Carrier::Serial(s) => {
                v["kind"] = "serial".into();
                v["serial"] = s.json(now);
            }
        }
        v
    }

    /// Where the path goes, for the start-up log.
    fn describe(&self) -> String {
        match &self.carrier {
            Carrier::Udp(u) => format!(
                "{} -> {}{}",
                u.local,
                u.uplink.target,
                u.dev
                    .as_ref()
                    .map(|d| format!(" dev {d}"))
                    .unwrap_or_default()
            ),
            Carrier::Serial(s) => format!(
                "{} at {} bd, {}, mtu {}",
                s.cfg.device.display(),
                s.cfg.baud,
                s.cfg.framing,
                s.cfg.mtu
            ),
        }
    }
}

/// A running daemon's state. Built by [`Daemon::new`], driven by [`Daemon::run`].
#[derive(Debug)]
pub struct Daemon {
    clock: Clock,
    bond: Bond,
    /// Routes, rules and hooks around the bond (`daemon/routes.rs`); before `tun`, so
    /// that it is undone while the interface still exists.
    routing: routes::Routing,
    /// The path sockets' SO_MARK (the routes' fwmark), if any.
    mark: Option<u32>,
    tun: Tun,
    paths: Vec<PathIo>,
    sealer: Sealer,
    /// What the daemon says about the peer's handshakes and sessions.
    notices: Notices,
    control: ControlServer,
    signals: Signals,
    interface: String,
    address: String,
    tx_buf: Vec<u8>,
    rx_buf: Vec<u8>,
    tun_buf: Vec<u8>,
    /// Scratch for opening what a serial line delivers (it decodes into its own buffer).
    open_buf: Vec<u8>,
    pollfds: Vec<libc::pollfd>,
    tun_write_errors: u64,
    /// `raw-ip`: the one path is a serial line carrying the TUN's packets as they are; the
    /// bond is bypassed (nothing of it goes on the line).
    raw_ip: bool,
    /// `raw-ip`: frames from the line that were not IPv4/IPv6 packets.
    rx_not_ip: u64,
    /// What runs: the config last loaded, with run-time enslave/emancipate/set (a reload
    /// makes the bond match the file again).
    applied: Config,
    /// The config file, re-read on SIGHUP and `braid reload`.
    config_file: Option<std::path::PathBuf>,
    /// The user it runs as (`--user`), for `status`.
    privileges: crate::privileges::Privileges,
    /// The dashboard and `/metrics` (`[monitor]`), fed a snapshot once a second.
    monitor: Option<crate::monitor::Monitor>,
}

/// `braid up`: set everything up from `cfg`, run until SIGINT/SIGTERM, tear down. `file`
/// is the config file and what was read from it (`cfg` may differ by command-line
/// options): SIGHUP re-reads it and applies what changed.
pub fn run(
    cfg: &Config,
    file: (&Path, &Config),
    control_path: Option<&Path>,
) -> anyhow::Result<()> {
    let control_path = control_path.map_or_else(
        || control::default_socket(&cfg.bond.interface),
        Path::to_path_buf,
    );
    let mut d = Daemon::new(cfg, &control_path)?;
    d.config_file = Some(file.0.to_path_buf());
    d.applied = file.1.clone();
    d.notify_ready();
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
        let plan = crate::privileges::plan(b.run_as.as_ref())?;
        if plan.is_some() && !b.routing.routes.is_empty() {
            anyhow::bail!("--user is not possible with bond.routes: braid removes its routing rules when it stops, which needs CAP_NET_ADMIN; run without --user (as root, or as a user given CAP_NET_ADMIN, as a systemd unit with AmbientCapabilities= does)");
        }
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
            for n in &shape.notes {
                dlog!(now, "shape: {n}");
            }
            for w in &warnings {
                dwarn!(now, "shape: {w}");
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
        let mark = routes::pick_mark(&b.routing).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut paths = Vec::with_capacity(cfg.paths.len());
        for (p, id) in cfg.paths.iter().zip(ids) {
            let io = PathIo::open(now, id, p, mark);
            if let (Some(e), Some(libc::EADDRINUSE | libc::EPERM | libc::EACCES)) =
                (&io.last_error, io.last_errno)
            {
                anyhow::bail!("path {}: {e}", p.name);
            }
            paths.push(io);
        }
        let raw_ip = paths.len() == 1 && paths.iter().all(PathIo::is_raw_ip);
        // Names resolve through the uplinks' routes, before routes go through the bond.
        uplink::wait_resolved(&mut paths, &mut bond, &clock);
        let routing = routes::Routing::up(clock.now(), &b.routing, &b.interface, mark)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let control = ControlServer::bind(control_path)?;
        let monitor = cfg
            .monitor
            .as_ref()
            .map(crate::monitor::bind)
            .transpose()?
            .flatten();
        // Everything privileged is open: become the `--user`, if any.
        let (privileges, notes) = crate::privileges::apply(plan, cfg, &control)?;
        for n in notes {
            dlog!(now, "braid: {n}");
        }
        let bufsize = b.core.mtu + DATA_HEADER_LEN + 64;
        let sealer = Sealer::new(cfg, now);
        if !sealer.enabled() {
            dwarn!(
                now,
                "braid: encryption = \"none\": anyone who sees a path's traffic can read it and inject packets into {}",
                b.interface
            );
        }
        let now = clock.now();
        let mut d = Daemon {
            monitor: None,
            clock,
            bond,
            routing,
            mark,
            tun,
            paths,
            notices: Notices::new(&sealer, now),
            sealer,
            control,
            signals,
            interface: b.interface.clone(),
            address: b.address.to_string(),
            tx_buf: vec![0; bufsize.max(MAX_DATAGRAM)],
            rx_buf: vec![0; MAX_DATAGRAM],
            tun_buf: vec![0; MAX_DATAGRAM],
            open_buf: Vec::with_capacity(MAX_DATAGRAM),
            pollfds: Vec::with_capacity(8 + cfg.paths.len() + control::MAX_CLIENTS),
            tun_write_errors: 0,
            raw_ip,
            rx_not_ip: 0,
            applied: cfg.clone(),
            config_file: None,
            privileges,
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
                "path {} ({}): {}{}",
                p.name,
                p.id,
                p.describe(),
                if p.emu.is_some() { " (emulated)" } else { "" }
            );
        }
        if let Some(bound) = monitor {
            d.monitor = Some(snapshot::start(bound, cfg, now)?);
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
            let timeout = self.next_wakeup(now).map(|t| t.saturating_since(now));

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
                if let Some(fd) = p.fd() {
                    self.pollfds.push(poll::readable(fd));
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
                            if sig == libc::SIGHUP {
                                dlog!(now, "braid: SIGHUP received, reloading the config");
                                self.reload(now);
                                // Paths may have changed: poll them afresh.
                                break;
                            }
                            dlog!(
                                now,
                                "braid: {} received, removing {}",
                                signal::name(sig),
                                self.interface
                            );
                            self.routing.down(now);
                            self.notify_stopping(now);
                            return Ok(());
                        }
                    }
                    Slot::Tun => self.read_tun(now),
                    Slot::Listener => self.control.accept(now),
                    Slot::Client => self.serve_client(now, pfd.fd),
                    Slot::Path(i) => self.read_path(now, i),
                }
            }
        }
    }

    fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        let mut next = self.bond.poll_timeout();
        let mut merge = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        merge(self.sealer.poll_timeout());
        merge(crate::log::next_repeat_due());
        merge(self.control.poll_timeout());
        merge(self.monitor.as_ref().map(crate::monitor::Monitor::next_due));
        for p in &self.paths {
            merge(p.uplink_due(now));
            merge(p.emu.as_ref().and_then(Emulator::poll_timeout));
            if !p.is_open() {
                merge(Some(p.retry_at));
            }
            if let Carrier::Serial(s) = &p.carrier {
                merge(s.next_write());
                if s.cfg.auto_bps {
                    merge(Some(s.next_rate_update()));
                }
            }
        }
        next
    }

    fn read_tun(&mut self, now: Instant) {
        if self.raw_ip {
            // The TUN's packets go to the line as they are.
            for _ in 0..BATCH {
                let Ok(n) = self.tun.read(&mut self.tun_buf) else {
                    break;
                };
                let (Some(pkt), Some(p)) = (self.tun_buf.get(..n), self.paths.first_mut()) else {
                    continue;
                };
                if let Carrier::Serial(s) = &mut p.carrier {
                    if n > 0 && !s.send(pkt) {
                        p.counters.send_would_block += 1;
                    }
                }
            }
            return;
        }
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
        let (bond, sealer, notices) = (&mut self.bond, &mut self.sealer, &mut self.notices);
        let id = p.id;
        if let Carrier::Serial(s) = &mut p.carrier {
            if s.is_raw_ip() {
                // IP packets from a classic SLIP peer: straight to the TUN.
                let (tun, tun_errors, not_ip) =
                    (&self.tun, &mut self.tun_write_errors, &mut self.rx_not_ip);
                let r = s.read(&mut self.rx_buf, BATCH, &mut |pkt| {
                    if !matches!(pkt.first().map(|b| b >> 4), Some(4 | 6)) {
                        *not_ip += 1;
                    } else if tun.write(pkt).is_err() {
                        *tun_errors += 1;
                    }
                });
                if let Err(e) = r {
                    p.counters.recv_errors += 1;
                    p.fail(now, e.to_string());
                }
                return;
            }
            let scratch = &mut self.open_buf;
            let mut replies: Vec<Vec<u8>> = Vec::new();
            let r = s.read(&mut self.rx_buf, BATCH, &mut |d| {
                scratch.clear();
                scratch.extend_from_slice(d);
                match sealer.incoming_line(now, scratch) {
                    Incoming::Deliver(d) => bond.handle_datagram(now, id, d),
                    Incoming::Reply(r) => replies.push(r.to_vec()),
                    Incoming::Drop => {}
                }
                notices.after_incoming(now, &p.name, None, sealer);
            });
            for r in &replies {
                s.send_as(r, true);
            }
            if let Err(e) = r {
                p.counters.recv_errors += 1;
                bond.handle_path_error(now, id);
                p.fail(now, e.to_string());
            }
            return;
        }
        for _ in 0..BATCH {
            let Carrier::Udp(UdpIo {
                sock, remote, roam, ..
            }) = &mut p.carrier
            else {
                return;
            };
            let Some(sock) = sock.as_ref() else { return };
            let mut reply = None;
            match sock.recv_from(&mut self.rx_buf) {
                Ok((n, src)) => {
                    let Some(d) = self.rx_buf.get_mut(..n) else {
                        continue;
                    };
                    let was = *remote;
                    match sealer.incoming(now, remote, roam, src, d) {
                        Incoming::Deliver(d) => bond.handle_datagram(now, id, d),
                        Incoming::Reply(r) => reply = Some((src, r.to_vec())),
                        Incoming::Drop => {}
                    }
                    notices.after_incoming(now, &p.name, Some(src), sealer);
                    if *remote != was && uplink::is_unknown(&was) {
                        dlog!(
                            now,
                            "path {}: peer is at {} (learned from its datagrams)",
                            p.name,
                            *remote
                        );
                    } else if *remote != was {
                        dlog!(now, "path {}: peer moved {was} -> {}", p.name, *remote);
                    }
                }
                Err(e) => {
                    match udp::classify_on(sock, &e) {
                        ErrorKind::WouldBlock => {}
                        ErrorKind::Datagram => continue,
                        ErrorKind::Path => {
                            p.counters.recv_errors += 1;
                            bond.handle_path_error(now, id);
                        }
                        ErrorKind::Socket => {
                            p.counters.recv_errors += 1;
                            bond.handle_path_error(now, id);
                            p.fail(now, format!("receive: {e}"));
                        }
                    }
                    return;
                }
            }
            if let Some((to, r)) = reply {
                send_raw(bond, now, p, to, &r);
            }
        }
    }

    /// Timers, then everything the bond and the emulators have to send or deliver.
    fn turn_output(&mut self, now: Instant) {
        crate::log::flush_repeats(now);
        for p in &mut self.paths {
            if !p.is_open() && p.retry_at <= now {
                p.try_open(now);
            }
            p.check_uplink(now, &mut self.bond);
        }
        if self.bond.poll_timeout().is_some_and(|t| t <= now) {
            self.bond.handle_timeout(now);
        }
        if self.sealer.poll_timeout().is_some_and(|t| t <= now) {
            self.sealer.handle_timeout(now);
        }
        self.notices.tick(now, &self.sealer);
        if self.control.poll_timeout().is_some_and(|t| t <= now) {
            self.control.handle_timeout(now);
        }
        while let Some(d) = self.sealer.poll_transmit(now) {
            for p in self.paths.iter_mut().filter(|p| p.is_open()) {
                let to = match &p.carrier {
                    Carrier::Udp(u) => u.remote,
                    Carrier::Serial(_) => LINE_PEER,
                };
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
            if self.raw_ip {
                // No braid datagram (probe, ack) goes on a raw-ip line.
                continue;
            }
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
        for p in &mut self.paths {
            let Carrier::Serial(s) = &mut p.carrier else {
                continue;
            };
            if let Err(e) = s.flush(now) {
                p.counters.send_errors += 1;
                self.bond.handle_path_error(now, p.id);
                p.fail(now, e.to_string());
                continue;
            }
            if let Some(bps) = s.rate_update(now) {
                let _ = self.bond.set_path_bps(p.id, bps);
            }
        }
        while let Some(n) = self.bond.poll_deliver(now, &mut self.tun_buf) {
            if let Some(pkt) = self.tun_buf.get(..n) {
                if self.tun.write(pkt).is_err() {
                    self.tun_write_errors += 1;
                }
            }
        }
        while let Some(ev) = self.bond.poll_event() {
            let (id, what, level) = match ev {
                Event::PathUp(id) => (id, "up", Level::Info),
                Event::PathDown(id) => (id, "down", Level::Warn),
                Event::PeerRestarted => {
                    dlog!(
                        now,
                        "peer restarted (new epoch in its probes): forgot its previous run's sequence numbers and acks"
                    );
                    continue;
                }
            };
            let name = self
                .paths
                .iter()
                .find(|p| p.id == id)
                .map_or("?", |p| p.name.as_str());
            crate::log::write(now, level, format_args!("path {name} ({id}) {what}"));
        }
        self.publish_snapshot(now);
    }

    fn serve_client(&mut self, now: Instant, fd: i32) {
        let Daemon {
            control,
            bond,
            paths,
            sealer,
            notices,
            interface,
            address,
            tun_write_errors,
            raw_ip,
            rx_not_ip,
            applied,
            config_file,
            privileges,
            mark,
            ..
        } = self;
        let mut handle = |req: Result<Request, String>| -> Value {
            match req {
                Err(e) => control::error(e),
                Ok(Request::Reload) => {
                    match reload::reload(now, config_file.as_deref(), applied, bond, paths, *mark) {
                        Ok(changes) => json!({"ok": true, "changes": changes}),
                        Err(e) => control::error(e),
                    }
                }
                Ok(req) => {
                    let asked = req.clone();
                    let mut v = handle_request(
                        now,
                        bond,
                        paths,
                        req,
                        (interface, address),
                        *tun_write_errors,
                        (sealer.enabled(), *mark),
                    );
                    reload::note(applied, &asked, &v);
                    if *raw_ip {
                        raw_ip_status(&mut v, paths, *rx_not_ip);
                    }
                    if v.get("status").is_some() && v.get("io").is_some() {
                        add_session(&mut v, now, sealer, notices, privileges);
                    }
                    v
                }
            }
        };
        control.service(now, fd, &mut handle);
        // Requests may have added paths or changed the bond: output happens next turn,
        // which starts at once because `turn_output` runs before every wait.
    }
}

/// The session and privilege figures of a `status` answer (`encryption`, `privileges`).
fn add_session(
    v: &mut Value,
    now: Instant,
    sealer: &Sealer,
    notices: &Notices,
    privileges: &crate::privileges::Privileges,
) {
    v["encryption"] = sealer.status_json(now);
    if sealer.enabled() {
        v["encryption"]["latest_handshake_age_us"] = json!(notices
            .handshake_age(now)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)));
    }
    v["privileges"] = privileges.json();
}

/// `raw-ip`: the bond never hears from the line (no probes), so its view of the path is
/// replaced by the line's: up while the tty is open, and the line's frame counters.
fn raw_ip_status(v: &mut Value, paths: &[PathIo], rx_not_ip: u64) {
    let Some(st) = v.get_mut("status") else {
        return;
    };
    st["mode"] = "raw-ip".into();
    st["rx_not_ip"] = rx_not_ip.into();
    let Some(ps) = st.get_mut("paths").and_then(Value::as_array_mut) else {
        return;
    };
    for (ps, p) in ps.iter_mut().zip(paths) {
        if let Carrier::Serial(s) = &p.carrier {
            ps["state"] = if s.is_open() { "up" } else { "down" }.into();
            ps["mode"] = "raw-ip".into();
            ps["tx_packets"] = s.counters().tx_frames.into();
            ps["rx_packets"] = s.counters().rx_frames.into();
        }
    }
}

/// Seal one datagram of the bond and send it on a path (a serial path queues it for its
/// paced writer).
fn send(sealer: &mut Sealer, bond: &mut Bond, now: Instant, p: &mut PathIo, data: &[u8]) {
    // Told apart before sealing: a serial line sends control messages ahead of its data.
    let control = !matches!(
        data.get(1).copied().map(MessageType::try_from),
        Some(Ok(MessageType::Data | MessageType::PinnedData))
    );
    let sealed = match p.carrier {
        Carrier::Udp(_) => sealer.outgoing(now, data),
        Carrier::Serial(_) => sealer.outgoing_line(now, data),
    };
    let Some(sealed) = sealed else {
        return;
    };
    match &mut p.carrier {
        Carrier::Udp(u) => {
            let to = u.remote;
            send_raw(bond, now, p, to, sealed);
        }
        Carrier::Serial(s) => {
            if !s.send_as(sealed, control) {
                p.counters.send_would_block += 1;
            }
        }
    }
}

/// Send bytes as they are on a UDP path's socket to `to` (its peer address, or the source
/// of a handshake message being answered); errors go to the bond. A serial path's line is
/// the only way to its peer: the bytes go there.
fn send_raw(bond: &mut Bond, now: Instant, p: &mut PathIo, to: SocketAddr, data: &[u8]) {
    let sock = match &mut p.carrier {
        Carrier::Udp(u) => u.sock.as_ref(),
        Carrier::Serial(s) => {
            // Handshake messages: small, ahead of data.
            if !s.send_as(data, true) {
                p.counters.send_would_block += 1;
            }
            return;
        }
    };
    let Some(sock) = sock else {
        p.counters.send_errors += 1;
        return;
    };
    if uplink::is_unknown(&to) {
        // The peer's address is not known yet (a name not resolved, or a path waiting for
        // the peer's first datagram): nothing to send to.
        return;
    }
    if let Err(e) = sock.send_to(data, to) {
        match udp::classify_on(sock, &e) {
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
    (interface, address): (&str, &str),
    tun_write_errors: u64,
    (sealed, mark): (bool, Option<u32>),
) -> Value {
    match req {
        Request::Status => {
            let status = match serde_json::to_value(bond.status()) {
                Ok(v) => v,
                Err(e) => return control::error(format!("internal: {e}")),
            };
            let io: Vec<Value> = paths.iter().map(|p| p.io_json(now)).collect();
            json!({
                "ok": true,
                "version": crate::status::JSON_VERSION,
                "interface": interface,
                "address": address,
                "uptime_us": now.as_micros(),
                "status": status,
                "io": io,
                "tun_write_errors": tun_write_errors,
            })
        }
        Request::Enslave { .. } if paths.iter().any(PathIo::is_raw_ip) => control::error(
            "this bond's serial path is in mode = \"raw-ip\": it has exactly that one path"
                .to_string(),
        ),
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
            if let Some(other) = paths
                .iter()
                .find(|p| p.udp_io().is_some_and(|u| u.local == local))
            {
                return control::error(format!(
                    "local {local} is already used by path {:?}",
                    other.name
                ));
            }
            // Open the socket first: a clear local mistake (address in use) is refused.
            let sock = udp::open(local, dev.as_deref(), mark);
            if let Err(e) = &sock {
                if matches!(
                    e.err.raw_os_error(),
                    Some(libc::EADDRINUSE) | Some(libc::EPERM) | Some(libc::EACCES)
                ) {
                    return control::error(format!("path {name}: {e}"));
                }
            }
            let bps = bps.unwrap_or(0);
            let mut pc = config::path_config(&name, bps, 0);
            pc.max_datagram = config::udp_max_datagram(&remote, config::LINK_MTU_DEFAULT, sealed);
            let id = match bond.add_path(now, pc) {
                Ok(id) => id,
                Err(e) => return control::error(e),
            };
            let mut io = PathIo {
                id,
                name: name.clone(),
                carrier: Carrier::Udp(UdpIo::new(local, config::Remote::Addr(remote), dev, mark)),
                retry_at: now,
                last_error: None,
                last_errno: None,
                emu: None,
                counters: IoCounters::default(),
            };
            let warning = match sock {
                Ok(s) => {
                    if let Carrier::Udp(u) = &mut io.carrier {
                        u.sock = Some(s);
                    }
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
        Request::Reload => control::error("internal: reload is handled by the daemon"),
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
                carrier: Carrier::Udp(UdpIo::new(
                    format!("127.0.0.1:{}", 40000 + i).parse().unwrap(),
                    config::Remote::Addr("127.0.0.1:1".parse().unwrap()),
                    None,
                    None,
                )),
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
        handle_request(
            Instant::ZERO,
            bond,
            paths,
            r,
            ("braid0", "10.0.0.1/30"),
            0,
            (true, None),
        )
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
        assert_eq!(s["version"], crate::status::JSON_VERSION);
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
        assert!(paths[0].is_open());
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
        assert!(!paths[1].is_open());
    }

    #[test]
    fn clock_is_monotonic_micros() {
        let c = Clock::start();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
