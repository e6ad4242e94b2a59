//! `braid up`: one thread, one `ppoll` loop around the [`Endpoint`].
//!
//! Each turn reads the clock once ([`Clock::now`]), then: TUN reads (at most [`BATCH`])
//! into `handle_tun_packet`; path reads, in batches, into `handle_udp_preopened` (a
//! packet it hands back goes into the TUN frames at once) or (a serial line's bytes)
//! `handle_line_bytes`; control requests; then `turn_output`: the
//! endpoint's timers, `poll_transmit` → each path's carrier (`daemon/carrier.rs`),
//! `poll_deliver_ref` → TUN write (lent, not copied), `poll_event` → log. The loop sleeps
//! until a fd is ready or the earliest of the endpoint's, the serial writers' and the
//! socket-retry deadlines.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use braid_core::crypto::{PendingSeal, Preopen};
use braid_core::wire::DATA_HEADER_LEN;
use braid_core::Instant;
use braid_core::{Endpoint, Event, Transmit};
use serde_json::{json, Value};

use crate::config::Config;
use crate::control::{self, ControlServer, Request};
use crate::log::{dlog, dwarn, Level};
use crate::sys::poll;
use crate::sys::signal::{self, Signals};
use crate::sys::tun::{Offloads, Tun};
use crate::sys::udp_batch::RECV_SLOTS;

mod carrier;
mod device;
mod ether;
mod ether_addrs;
mod ether_guard;
mod hooks;
mod notices;
mod notify;
mod reload;
mod requests;
mod routes;
mod serial;
mod snapshot;
mod tun_frames;
mod uplink;
mod workers;
pub use carrier::{Carrier, IoCounters, PathIo, RecvBatch, SockOpts, UdpIo};
pub use device::{Device, PacketPipe};
pub use ether_addrs::{repair, take_over, AddrError, Moved};
use notices::Notices;
pub use serial::{SerialCounters, SerialPath};
pub use tun_frames::TunCounters;
use tun_frames::TunFrames;
pub use workers::Handed;

/// Most packets read from the TUN (or a serial line's reads) per loop turn.
pub const BATCH: usize = 64;
/// Most `recvmmsg` batches read from one path per loop turn.
const PATH_BATCHES: usize = 4;
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

/// A running daemon's state. Built by [`Daemon::new`], driven by [`Daemon::run`].
#[derive(Debug)]
pub struct Daemon {
    clock: Clock,
    ep: Endpoint,
    /// Routes, rules and hooks around the bond (`daemon/routes.rs`); before `tun`, so
    /// that it is undone while the interface still exists.
    routing: routes::Routing,
    /// How path sockets are opened: SO_MARK (the routes' fwmark), offloads.
    sock: SockOpts,
    tun: Box<dyn Device>,
    paths: Vec<PathIo>,
    /// What the daemon says about the peer's handshakes and sessions.
    notices: Notices,
    control: ControlServer,
    signals: Signals,
    interface: String,
    address: String,
    tx_buf: Vec<u8>,
    /// The path the next datagram most likely goes to: the endpoint writes it straight
    /// into that path's run (see `turn_output`, `place`).
    tx_guess: usize,
    /// The path the last datagram went to.
    tx_last: usize,
    rx_buf: Vec<u8>,
    /// What a UDP path's socket has, read in one go.
    rx_batch: RecvBatch,
    pollfds: Vec<libc::pollfd>,
    /// What each of `pollfds` stands for (kept, like it, to allocate nothing per turn).
    slots: Vec<Slot>,
    /// The TUN's reads and writes (superframes cut and merged when offloaded).
    tun_frames: TunFrames,
    /// `raw-ip`: the one path is a serial line carrying the TUN's packets as they are (the
    /// endpoint bypasses the bond); `status` says so.
    raw_ip: bool,
    /// What runs: the config last loaded, with run-time enslave/emancipate/set (a reload
    /// makes the bond match the file again).
    applied: Config,
    /// The config file, re-read on SIGHUP and `braid reload`.
    config_file: Option<std::path::PathBuf>,
    /// The user it runs as (`--user`), for `status`.
    privileges: crate::privileges::Privileges,
    /// The dashboard and `/metrics` (`[monitor]`), fed a snapshot once a second.
    monitor: Option<crate::monitor::Monitor>,
    /// `braid down` asked the daemon to stop: it does at the end of the turn.
    down_requested: bool,
    /// The threads that seal and send the UDP paths' runs and open their batches
    /// (`[bond] workers`); `None`: the loop does.
    workers: Option<workers::Workers>,
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
    if let Some(ether) = &cfg.ether {
        return ether::run(cfg, ether, file.0, &control_path);
    }
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
    /// The workers opened a batch.
    Opened,
}

impl Daemon {
    /// Create the TUN, the path sockets and the control socket (last: when it accepts
    /// connections, the daemon is ready).
    pub fn new(cfg: &Config, control_path: &Path) -> anyhow::Result<Daemon> {
        let b = &cfg.bond;
        if std::os::unix::net::UnixStream::connect(control_path).is_ok() {
            anyhow::bail!(
                "another braid is already running with control socket {}",
                control_path.display()
            );
        }
        let plan = crate::privileges::plan(b.run_as.as_ref())?;
        if plan.is_some() && !b.routing.routes.is_empty() {
            anyhow::bail!("--user is not possible with bond.routes: braid removes its routing rules when it stops, which needs CAP_NET_ADMIN; run without --user (as root, or as a user given CAP_NET_ADMIN, as a systemd unit with AmbientCapabilities= does)");
        }
        let device: Box<dyn Device> = match b.layer {
            crate::config::Layer::Ethernet => Box::new(device::open_tap(b)?),
            crate::config::Layer::Ip if b.offload => Box::new(Tun::open_with(
                &b.interface,
                b.mtu,
                b.address,
                b.address6,
                Offloads::ALL,
            )?),
            crate::config::Layer::Ip => {
                Box::new(Tun::open(&b.interface, b.mtu, b.address, b.address6)?)
            }
        };
        Daemon::with_device(cfg, control_path, device, plan)
    }

    /// The daemon of `cfg` on `device` (the TUN, or a [`PacketPipe`] in the tests): the
    /// endpoint, the path sockets, routes and hooks, the control socket, the monitor, and
    /// then the `--user` of `plan`.
    pub fn with_device(
        cfg: &Config,
        control_path: &Path,
        device: Box<dyn Device>,
        plan: Option<crate::privileges::Plan>,
    ) -> anyhow::Result<Daemon> {
        let clock = Clock::start();
        let now = clock.now();
        let signals = Signals::new().map_err(|e| anyhow::anyhow!("signalfd: {e}"))?;
        let b = &cfg.bond;
        let (vnet_hdr, uso) = device.vnet();
        let (mut ep, ids) = cfg.build_endpoint(now)?;
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
            ep.bond_mut()
                .set_shaper(now, Some(shaper), shape.spec.link_bps.is_none());
        }
        let mark = routes::pick_mark(&b.routing).map_err(|e| anyhow::anyhow!("{e}"))?;
        let sock = SockOpts {
            mark,
            offload: b.offload,
        };
        let mut paths = Vec::with_capacity(cfg.paths.len());
        for (p, id) in cfg.paths.iter().zip(ids) {
            let io = PathIo::open(now, id, p, sock);
            if let (Some(e), Some(libc::EADDRINUSE | libc::EPERM | libc::EACCES)) =
                (&io.last_error, io.last_errno)
            {
                anyhow::bail!("path {}: {e}", p.name);
            }
            paths.push(io);
        }
        let raw_ip = paths.len() == 1 && paths.iter().all(PathIo::is_raw_ip);
        // Names resolve through the uplinks' routes, before routes go through the bond.
        uplink::wait_resolved(&mut paths, &mut ep, &clock);
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
        if !ep.sealer().enabled() {
            dwarn!(
                now,
                "braid: encryption = \"none\": anyone who sees a path's traffic can read it and inject packets into {}",
                b.interface
            );
        }
        let workers = start_workers(now, b.workers)?;
        let now = clock.now();
        let mut d = Daemon {
            workers,
            monitor: None,
            clock,
            notices: Notices::new(ep.sealer(), now),
            ep,
            routing,
            sock,
            tun: device,
            paths,
            control,
            signals,
            interface: b.interface.clone(),
            address: b.address.to_string(),
            tx_buf: vec![0; bufsize.max(MAX_DATAGRAM)],
            tx_guess: 0,
            tx_last: 0,
            rx_buf: vec![0; MAX_DATAGRAM],
            rx_batch: RecvBatch::default(),
            pollfds: Vec::with_capacity(8 + cfg.paths.len() + control::MAX_CLIENTS),
            slots: Vec::with_capacity(8 + cfg.paths.len() + control::MAX_CLIENTS),
            tun_frames: TunFrames::new(vnet_hdr, uso),
            raw_ip,
            applied: cfg.clone(),
            config_file: None,
            privileges,
            down_requested: false,
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
                if d.ep.emulated(p.id).is_some() {
                    " (emulated)"
                } else {
                    ""
                }
            );
        }
        if let Some(bound) = monitor {
            d.monitor = Some(snapshot::start(bound, cfg, now)?);
        }
        Ok(d)
    }

    /// What the worker threads were given so far (`None`: there are none).
    pub fn handed(&self) -> Option<Handed> {
        self.workers.as_ref().map(workers::Workers::handed)
    }

    /// The control socket's path.
    pub fn control_path(&self) -> &Path {
        self.control.path()
    }

    /// Run until a terminating signal. Dropping the daemon afterwards removes the TUN and
    /// the control socket.
    pub fn run(&mut self) -> anyhow::Result<()> {
        while self.turn(None)? {}
        Ok(())
    }

    /// Run for `d` (or until a terminating signal): the tests' way to drive the loop.
    pub fn run_for(&mut self, d: Duration) -> anyhow::Result<()> {
        let end = self.clock.now() + d;
        while self.clock.now() < end && self.turn(Some(end))? {}
        Ok(())
    }

    /// One loop turn: output, wait (at most until `limit`), input. False after a
    /// terminating signal.
    fn turn(&mut self, limit: Option<Instant>) -> anyhow::Result<bool> {
        let now = self.clock.now();
        // Timers and output for what the last wake-up brought in.
        self.turn_output(now);
        let wake = match (self.next_wakeup(now), limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = wake.map(|t| t.saturating_since(now));

        let mut slots = std::mem::take(&mut self.slots);
        slots.clear();
        self.pollfds.clear();
        self.pollfds.push(poll::readable(self.signals.as_raw_fd()));
        slots.push(Slot::Signal);
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
        if let Some(w) = &self.workers {
            self.pollfds.push(poll::readable(w.wake_fd()));
            slots.push(Slot::Opened);
        }
        for (i, p) in self.paths.iter().enumerate() {
            // With workers, a path is read while it has room for another batch.
            let room = self.workers.as_ref().is_none_or(|w| w.can_read(p.id));
            if let (Some(fd), true) = (p.fd(), room) {
                self.pollfds.push(poll::readable(fd));
                slots.push(Slot::Path(i));
            }
        }
        // The TUN last: what the paths brought (acks above all) updates their state
        // before new packets are scheduled on them. After a long turn, packets read
        // first would meet paths whose acks still wait in their sockets, look stalled
        // and be dropped.
        if self.ep.wants_tun_packets() {
            self.pollfds.push(poll::readable(self.tun.fd()));
            slots.push(Slot::Tun);
        }
        poll::wait(&mut self.pollfds, timeout).map_err(|e| anyhow::anyhow!("ppoll: {e}"))?;

        let now = self.clock.now();
        let mut go_on = true;
        if let Some(w) = &mut self.workers {
            // What this turn reads is handed to the endpoint together.
            w.next_round();
        }
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
                        go_on = false;
                        break;
                    }
                }
                Slot::Tun => self.read_tun(now),
                Slot::Listener => self.control.accept(now),
                Slot::Client => self.serve_client(now, pfd.fd),
                Slot::Path(i) => self.read_path(now, i),
                Slot::Opened => self.take_opened(now),
            }
        }
        self.slots = slots;
        if go_on && self.down_requested {
            dlog!(now, "braid: braid down asked, removing {}", self.interface);
            self.routing.down(now);
            self.notify_stopping(now);
            go_on = false;
        }
        Ok(go_on)
    }

    fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        let mut next = self.ep.poll_timeout();
        let mut merge = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        merge(crate::log::next_repeat_due());
        merge(self.control.poll_timeout());
        merge(self.monitor.as_ref().map(crate::monitor::Monitor::next_due));
        for p in &self.paths {
            merge(p.uplink_due(now));
            if !p.is_open() {
                merge(Some(p.retry_at));
            }
        }
        next
    }

    fn read_tun(&mut self, now: Instant) {
        let ep = &mut self.ep;
        for _ in 0..BATCH {
            // EAGAIN (or a transient error): the next turn reads on.
            if !ep.wants_tun_packets()
                || !self
                    .tun_frames
                    .read(&*self.tun, |p| ep.handle_tun_vec(now, p))
            {
                break;
            }
        }
    }

    fn read_path(&mut self, now: Instant, i: usize) {
        let Some(p) = self.paths.get_mut(i) else {
            return;
        };
        let (ep, notices) = (&mut self.ep, &mut self.notices);
        let (frames, tun) = (&mut self.tun_frames, &*self.tun);
        let id = p.id;
        if let Carrier::Serial(s) = &mut p.carrier {
            let name = &p.name;
            let r = s.read(&mut self.rx_buf, BATCH, &mut |bytes| {
                ep.handle_line_bytes(now, id, bytes);
                notices.after_incoming(now, name, None, ep);
            });
            if let Err(e) = r {
                p.counters.recv_errors += 1;
                ep.handle_path_error(now, id);
                p.fail(now, e.to_string());
            }
            return;
        }
        if let Some(w) = &mut self.workers {
            // Read here, opened by a worker, handed to the endpoint in `take_opened`.
            for _ in 0..workers::OPENS {
                let Some(mut o) = w.batch(id) else { return };
                let outcome = p.recv_batch(now, o.batch());
                let messages = o.batch().messages();
                if w.hand_over(id, o.batch().datagram_count()) {
                    w.open(id, o, ep.open_keys());
                } else {
                    // A few: opened here, at once.
                    hand_to_endpoint(now, ep, notices, p, o.batch(), (frames, tun));
                    w.unused(o);
                }
                if outcome != carrier::Outcome::Fine {
                    ep.handle_path_error(now, id);
                    return;
                }
                if messages < RECV_SLOTS {
                    return;
                }
            }
            return;
        }
        // A few batches per wake-up (each one `recvmmsg`), so that one busy path does not
        // keep the others and the TUN waiting.
        for _ in 0..PATH_BATCHES {
            let outcome = p.recv_batch(now, &mut self.rx_batch);
            hand_to_endpoint(now, ep, notices, p, &mut self.rx_batch, (frames, tun));
            if outcome != carrier::Outcome::Fine {
                ep.handle_path_error(now, id);
                return;
            }
            if self.rx_batch.messages() < RECV_SLOTS {
                return;
            }
        }
    }

    /// Timers, then everything the endpoint has to send or deliver.
    fn turn_output(&mut self, now: Instant) {
        crate::log::flush_repeats(now);
        for p in &mut self.paths {
            if !p.is_open() && p.retry_at <= now {
                p.try_open(now);
            }
            p.check_uplink(now, &mut self.ep);
            p.sync_line(&mut self.ep);
        }
        self.ep.handle_timeout(now);
        self.notices.tick(now, self.ep.sealer());
        if self.control.poll_timeout().is_some_and(|t| t <= now) {
            self.control.handle_timeout(now);
        }
        self.take_opened(now);
        self.count_sent(now);
        loop {
            // The endpoint writes each datagram straight into the run of the path it most
            // likely goes to (`place`); one for another path is copied from there into its
            // own (`PathIo::queue`).
            let g = self.tx_guess;
            let room = self.tx_buf.len();
            let tail = self.paths.get_mut(g).and_then(|p| p.run_tail(room));
            let in_run = tail.is_some();
            let buf = tail.unwrap_or(&mut self.tx_buf);
            // With workers, the AEAD is theirs: the endpoint lays datagrams out.
            let next = if self.workers.is_some() {
                self.ep.poll_transmit_deferred(now, buf)
            } else {
                self.ep.poll_transmit(now, buf).map(|t| (t, None))
            };
            let Some((t, seal)) = next else { break };
            if self.place(now, &t, seal, in_run.then_some(g)) != carrier::Outcome::Fine {
                self.ep.handle_path_error(now, t.path);
            }
        }
        for p in &mut self.paths {
            if p.flush(now, self.workers.as_mut()) != carrier::Outcome::Fine {
                self.ep.handle_path_error(now, p.id);
            }
        }
        // The lines write what their clocks allow.
        for p in &mut self.paths {
            let id = p.id;
            let Carrier::Serial(s) = &mut p.carrier else {
                continue;
            };
            if let Err(e) = s.flush(now, &mut self.ep, id) {
                p.counters.send_errors += 1;
                self.ep.handle_path_error(now, id);
                p.fail(now, e.to_string());
                p.sync_line(&mut self.ep);
            }
        }
        while let Some(pkt) = self.ep.poll_deliver_ref(now) {
            self.tun_frames.deliver(&*self.tun, pkt);
        }
        self.tun_frames.flush(&*self.tun);
        while let Some(ev) = self.ep.poll_event() {
            self.log_event(now, ev);
        }
        self.publish_snapshot(now);
    }

    /// Put the datagram `t` the endpoint wrote (at the start of path `wrote_in`'s run
    /// tail, or else into `tx_buf`) into its path's run: where it lies when that is its
    /// run and it may join it, else copied there (`PathIo::queue`).
    fn place(
        &mut self,
        now: Instant,
        t: &Transmit,
        seal: Option<PendingSeal>,
        wrote_in: Option<usize>,
    ) -> carrier::Outcome {
        let Some(k) = self.paths.iter().position(|p| p.id == t.path) else {
            return carrier::Outcome::Fine;
        };
        // Striping moves on to the next path with each datagram (the bond takes its
        // paths in turn); one path, or flows pinned to paths, stay.
        self.tx_guess = if k == self.tx_last {
            k
        } else {
            (k + 1) % self.paths.len()
        };
        self.tx_last = k;
        let workers = self.workers.as_mut();
        let seal = match wrote_in {
            Some(g) if g == k => match self.paths[k].commit(t, seal) {
                Ok(()) => return carrier::Outcome::Fine,
                Err(seal) => {
                    // It cannot join its own run: out of the tail before that run goes.
                    let data = self.paths[k].tail_datagram(t);
                    let dst = self.tx_buf.get_mut(..t.len);
                    if let (Some(data), Some(dst)) = (data, dst) {
                        dst.copy_from_slice(data);
                    }
                    seal
                }
            },
            Some(g) => {
                let (from, to) = pair_mut(&mut self.paths, g, k);
                return match from.tail_datagram(t) {
                    Some(data) => to.queue(now, t, data, seal, workers),
                    None => carrier::Outcome::Fine,
                };
            }
            None => seal,
        };
        match self.tx_buf.get(..t.len) {
            Some(data) => self.paths[k].queue(now, t, data, seal, workers),
            None => carrier::Outcome::Fine,
        }
    }

    /// Hand the batches the workers opened to the endpoint, each datagram with what its
    /// opening found, a turn's batches merged by the bond's sequence number.
    fn take_opened(&mut self, now: Instant) {
        let Some(w) = &mut self.workers else { return };
        let (paths, ep, notices) = (&mut self.paths, &mut self.ep, &mut self.notices);
        let (frames, tun) = (&mut self.tun_frames, &*self.tun);
        w.opened(|id, src, d, pre| {
            let Some(p) = paths.iter_mut().find(|p| p.id == id) else {
                return;
            };
            p.counters.recv_datagrams += 1;
            // What the datagram lets out goes into the TUN's frames at once.
            ep.handle_udp_preopened(now, p.id, src, d, pre, |pkt| frames.deliver(tun, pkt));
            notices.after_incoming(now, &p.name, Some(src), ep);
        });
    }

    /// What the sending threads said about the runs they finished.
    fn count_sent(&mut self, now: Instant) {
        let Some(w) = &mut self.workers else { return };
        let (paths, ep) = (&mut self.paths, &mut self.ep);
        w.finished(|s| {
            let Some(p) = paths.iter_mut().find(|p| p.id == s.path) else {
                return;
            };
            if p.sent(now, s) != carrier::Outcome::Fine {
                ep.handle_path_error(now, p.id);
            }
        });
    }

    fn path_name(&self, id: braid_core::PathId) -> &str {
        self.paths
            .iter()
            .find(|p| p.id == id)
            .map_or("?", |p| p.name.as_str())
    }

    fn log_event(&self, now: Instant, ev: Event) {
        match ev {
            Event::PathUp(id) => crate::log::write(
                now,
                Level::Info,
                format_args!("path {} ({id}) up", self.path_name(id)),
            ),
            Event::PathDown(id) => crate::log::write(
                now,
                Level::Warn,
                format_args!("path {} ({id}) down", self.path_name(id)),
            ),
            Event::PeerRestarted => dlog!(
                now,
                "peer restarted (new epoch in its probes): forgot its previous run's sequence numbers and acks"
            ),
            Event::PeerMoved { path, from, to } => match from {
                None => dlog!(
                    now,
                    "path {}: peer is at {to} (learned from its datagrams)",
                    self.path_name(path)
                ),
                Some(from) => dlog!(
                    now,
                    "path {}: peer moved {from} -> {to}",
                    self.path_name(path)
                ),
            },
        }
    }

    fn serve_client(&mut self, now: Instant, fd: i32) {
        let Daemon {
            control,
            ep,
            paths,
            notices,
            interface,
            address,
            tun_frames,
            raw_ip,
            applied,
            config_file,
            privileges,
            sock,
            down_requested,
            workers,
            ..
        } = self;
        let mut handle = |req: Result<Request, String>| -> Value {
            match req {
                Err(e) => control::error(e),
                Ok(Request::Down) => {
                    *down_requested = true;
                    json!({"ok": true})
                }
                Ok(Request::Reload) => {
                    match reload::reload(now, config_file.as_deref(), applied, ep, paths, *sock) {
                        Ok(changes) => json!({"ok": true, "changes": changes}),
                        Err(e) => control::error(e),
                    }
                }
                Ok(req) => {
                    let asked = req.clone();
                    let mut v = requests::handle_request(
                        now,
                        ep,
                        paths,
                        req,
                        (interface, address),
                        tun_frames.counters,
                        *sock,
                    );
                    reload::note(applied, &asked, &v);
                    if *raw_ip {
                        requests::raw_ip_status(&mut v, ep, paths);
                    }
                    if v.get("status").is_some() && v.get("io").is_some() {
                        requests::add_session(&mut v, now, ep, notices, privileges);
                        v["workers"] = workers.as_ref().map_or_else(
                            || json!({"threads": 0}),
                            |w| json!({"threads": w.threads(), "handed": w.handed()}),
                        );
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

/// Two different elements of `v`, both mutable.
fn pair_mut<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b, "two different elements");
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&mut x[a], &mut y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&mut y[0], &mut x[b])
    }
}

/// A path's datagrams read by the loop, handed to the endpoint (opened there).
fn hand_to_endpoint(
    now: Instant,
    ep: &mut Endpoint,
    notices: &mut Notices,
    p: &mut PathIo,
    batch: &mut RecvBatch,
    tun: (&mut TunFrames, &dyn Device),
) {
    for (src, d) in batch.datagrams() {
        p.counters.recv_datagrams += 1;
        ep.handle_udp_preopened(now, p.id, src, d, Preopen::Untouched, |pkt| {
            tun.0.deliver(tun.1, pkt);
        });
        notices.after_incoming(now, &p.name, Some(src), ep);
    }
}

/// The worker threads `[bond] workers` asks for (`None` in the config: one, if the
/// machine has a second CPU).
fn start_workers(now: Instant, asked: Option<usize>) -> anyhow::Result<Option<workers::Workers>> {
    let n = asked.unwrap_or_else(|| {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        usize::from(cpus >= 2)
    });
    if n == 0 {
        return Ok(None);
    }
    let w = workers::Workers::start(n)
        .map_err(|e| anyhow::anyhow!("starting {n} worker thread(s): {e}"))?;
    dlog!(
        now,
        "braid: {} worker thread(s) seal, send and open the paths' datagrams",
        w.threads()
    );
    Ok(Some(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic_micros() {
        let c = Clock::start();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
