//! The carriers: what moves a path's bytes. A UDP path's socket ([`UdpIo`]) or a serial
//! line ([`SerialPath`]), each re-opened when it breaks, behind one [`PathIo`] whose
//! methods are the only place that tells them apart. The loop hands a path's datagrams to
//! the endpoint in batches ([`RecvBatch`]: one `recvmmsg`, GRO lists cut apart), queues
//! what the endpoint returns with [`PathIo::queue`], which gathers each path's datagrams
//! into runs, and ends the turn with [`PathIo::flush`] (one GSO `sendmsg` per run).

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use braid_core::crypto::PendingSeal;
use braid_core::{Endpoint, Transmit, TransmitKind};
use braid_core::{Instant, PathId};
use serde_json::{json, Value};

use super::serial::SerialPath;
use super::uplink;
use super::workers::{Sent, Workers};
use super::SOCKET_RETRY;
use crate::config::{self, termios_baud, PathSettings, Transport, UdpSettings};
use crate::log::{dwarn, Level};
use crate::sys::udp::{self, ErrorKind};
pub use crate::sys::udp_batch::RecvBatch;
use crate::sys::udp_batch::{BatchSocket, TxRun};

/// Counters of the IO layer (not the bond's), shown by `status`.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct IoCounters {
    /// Datagrams not sent: the socket buffer was full (EAGAIN).
    pub send_would_block: u64,
    /// Datagrams not sent: the socket was closed or the send failed.
    pub send_errors: u64,
    /// Receive errors.
    pub recv_errors: u64,
    /// Datagrams handed to the socket (sent or failed).
    pub send_datagrams: u64,
    /// `sendmsg` calls they took (fewer than datagrams with UDP GSO).
    pub send_calls: u64,
    /// Datagrams read.
    pub recv_datagrams: u64,
    /// `recvmmsg` calls that returned them.
    pub recv_calls: u64,
    /// Datagrams the emulator dropped (loss, outage, queue full).
    pub emu_dropped: u64,
}

/// How a path's UDP socket is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockOpts {
    /// SO_MARK (the routes' fwmark), if any.
    pub mark: Option<u32>,
    /// `offload`: UDP GSO and GRO (batches of datagrams per syscall).
    pub offload: bool,
}

impl Default for SockOpts {
    fn default() -> Self {
        SockOpts {
            mark: None,
            offload: true,
        }
    }
}

/// A UDP path's socket and where it binds.
#[derive(Debug)]
pub struct UdpIo {
    /// Local address as configured (unspecified: follow `dev`'s address).
    pub local: SocketAddr,
    /// Device binding.
    pub dev: Option<String>,
    /// Shared with the sending threads (`daemon/workers.rs`) while they hold its runs.
    pub(super) sock: Option<Arc<BatchSocket>>,
    /// Datagrams waiting for the end of the turn, sent as one GSO run.
    run: TxRun,
    /// UDP GSO and GRO (`offload`).
    offload: bool,
    /// The configured `remote` and SO_MARK, the device's address, name resolution
    /// (`daemon/uplink.rs`). The peer's current address is the endpoint's
    /// ([`Endpoint::remote`]).
    pub(super) uplink: Box<uplink::Uplink>,
}

impl UdpIo {
    /// A path's socket settings, no socket yet.
    pub(super) fn new(
        local: SocketAddr,
        target: config::Remote,
        dev: Option<String>,
        opts: SockOpts,
    ) -> UdpIo {
        UdpIo {
            local,
            dev,
            sock: None,
            run: TxRun::with_capacity(),
            offload: opts.offload,
            uplink: Box::new(uplink::Uplink::new(target, opts.mark)),
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

/// What a send or receive said about the path.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done (or one datagram dropped and counted).
    Fine,
    /// The path is broken (the bond takes it down at once); the carrier stays open.
    PathError,
    /// The carrier failed and was closed (reopened later); the path is down.
    Failed,
}

/// One path's IO: its socket or tty (re-opened when broken).
#[derive(Debug)]
pub struct PathIo {
    /// The endpoint's id for the path.
    pub id: PathId,
    /// Path name.
    pub name: String,
    /// The socket or the line.
    pub carrier: Carrier,
    /// When to try to re-open the socket or tty (if closed).
    pub(super) retry_at: Instant,
    /// Last open/IO error, for status and to log only changes.
    pub(super) last_error: Option<String>,
    /// Its OS error number.
    pub(super) last_errno: Option<i32>,
    pub(super) counters: IoCounters,
}

impl PathIo {
    /// A path's IO; opens the socket or tty at once (or schedules retries when that fails).
    pub(super) fn new(now: Instant, id: PathId, name: String, carrier: Carrier) -> PathIo {
        let mut p = PathIo {
            id,
            name,
            carrier,
            retry_at: now,
            last_error: None,
            last_errno: None,
            counters: IoCounters::default(),
        };
        p.try_open(now);
        p
    }

    /// A UDP path's IO from its settings; `mark`: the sockets' SO_MARK.
    pub(super) fn udp(
        now: Instant,
        id: PathId,
        name: String,
        u: &UdpSettings,
        opts: SockOpts,
    ) -> PathIo {
        let carrier = Carrier::Udp(UdpIo::new(u.local, u.remote.clone(), u.dev.clone(), opts));
        let mut p = PathIo::new(now, id, name, carrier);
        p.resolve_now(now);
        p
    }

    /// A path's IO from its settings: opens the socket or tty (a serial line at a rate
    /// that is not a standard one is warned about).
    pub(super) fn open(now: Instant, id: PathId, p: &PathSettings, opts: SockOpts) -> PathIo {
        match &p.transport {
            Transport::Udp(u) => PathIo::udp(now, id, p.name.clone(), u, opts),
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
                let carrier = Carrier::Serial(Box::new(SerialPath::new(s.clone())));
                PathIo::new(now, id, p.name.clone(), carrier)
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
    pub(super) fn is_open(&self) -> bool {
        match &self.carrier {
            Carrier::Udp(u) => u.sock.is_some(),
            Carrier::Serial(s) => s.is_open(),
        }
    }

    /// The fd to poll for reading.
    pub(super) fn fd(&self) -> Option<i32> {
        match &self.carrier {
            Carrier::Udp(u) => u.sock.as_ref().map(AsRawFd::as_raw_fd),
            Carrier::Serial(s) => s.fd(),
        }
    }

    /// Try to open the socket or tty; on failure log (once per distinct error) and retry
    /// later.
    pub(super) fn try_open(&mut self, now: Instant) -> bool {
        let res = match &mut self.carrier {
            Carrier::Udp(u) => match u.bind_addr() {
                Err(why) => Err((why, None)),
                Ok(at) => match BatchSocket::open(at, u.dev.as_deref(), u.uplink.mark, u.offload) {
                    Ok(s) => {
                        u.sock = Some(Arc::new(s));
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
    pub(super) fn fail(&mut self, now: Instant, msg: String) {
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
            Carrier::Udp(u) => {
                u.sock = None;
                u.run.clear();
            }
            Carrier::Serial(s) => s.close(),
        }
        self.last_error = Some(msg);
        self.last_errno = None;
        self.retry_at = now + SOCKET_RETRY;
    }

    /// Tell the endpoint's line that the tty was opened or closed since the last call (a
    /// serial path's line starts afresh on each open).
    pub(super) fn sync_line(&mut self, ep: &mut Endpoint) {
        let Carrier::Serial(s) = &mut self.carrier else {
            return;
        };
        match s.take_change() {
            Some(true) => ep.line_opened(self.id),
            Some(false) => ep.line_closed(self.id),
            None => {}
        }
    }

    /// Take a datagram the endpoint handed out for this (UDP) path, with the job that
    /// seals it if it is not sealed yet: it joins the path's run, which is sent first if
    /// the datagram cannot join it (another address, a longer datagram, a full run).
    pub(super) fn queue(
        &mut self,
        now: Instant,
        t: &Transmit,
        data: &[u8],
        seal: Option<PendingSeal>,
        workers: Option<&mut Workers>,
    ) -> Outcome {
        let Carrier::Udp(u) = &mut self.carrier else {
            // A line's datagrams stay in the endpoint's line until its clock lets them out.
            return Outcome::Fine;
        };
        let (Some(sock), Some(to)) = (u.sock.as_ref(), t.to) else {
            // The sealer's handshakes go to every path; only a closed socket's bond
            // datagrams are errors.
            if t.kind != TransmitKind::Handshake {
                self.counters.send_errors += 1;
            }
            return Outcome::Fine;
        };
        let outcome = if u.run.fits(to, data.len(), sock.max_run()) {
            Outcome::Fine
        } else {
            self.flush(now, workers)
        };
        match &mut self.carrier {
            Carrier::Udp(u) if u.sock.is_some() => u.run.push(to, data, seal),
            // The flush failed and closed the socket: this datagram is lost with the run.
            _ => self.counters.send_errors += 1,
        }
        outcome
    }

    /// Where the endpoint may write this path's next datagram in place: the tail of its
    /// run, on a UDP path with an open socket, if it has at least `room` bytes.
    pub(super) fn run_tail(&mut self, room: usize) -> Option<&mut [u8]> {
        match &mut self.carrier {
            Carrier::Udp(u) if u.sock.is_some() => Some(u.run.tail()).filter(|t| t.len() >= room),
            _ => None,
        }
    }

    /// The datagram of `t.len` bytes at the start of [`PathIo::run_tail`].
    pub(super) fn tail_datagram(&mut self, t: &Transmit) -> Option<&[u8]> {
        self.run_tail(0).and_then(|tail| tail.get(..t.len))
    }

    /// Take the datagram the endpoint wrote at the start of [`PathIo::run_tail`] into the
    /// run as it lies, if it may join it; if not (another address, a longer datagram, a
    /// full run, no address or socket), the job comes back and the datagram goes through
    /// [`PathIo::queue`].
    pub(super) fn commit(
        &mut self,
        t: &Transmit,
        seal: Option<PendingSeal>,
    ) -> Result<(), Option<PendingSeal>> {
        let Carrier::Udp(u) = &mut self.carrier else {
            return Err(seal);
        };
        match (u.sock.as_ref(), t.to) {
            (Some(sock), Some(to)) if u.run.fits(to, t.len, sock.max_run()) => {
                u.run.commit(to, t.len, seal);
                Ok(())
            }
            _ => Err(seal),
        }
    }

    /// Send the path's run (see [`PathIo::queue`]): here, or by a sending thread, whose
    /// outcome comes back later ([`PathIo::sent`]).
    pub(super) fn flush(&mut self, now: Instant, workers: Option<&mut Workers>) -> Outcome {
        let Carrier::Udp(u) = &mut self.carrier else {
            return Outcome::Fine;
        };
        let n = u.run.len() as u64;
        let Some(sock) = u.sock.as_ref().filter(|_| n > 0) else {
            return Outcome::Fine;
        };
        self.counters.send_datagrams += n;
        self.counters.send_calls += 1;
        if let Some(w) = workers.filter(|w| w.hand_over(self.id, u.run.len())) {
            w.send(self.id, sock, &mut u.run);
            return Outcome::Fine;
        }
        let sent = sock.send(&mut u.run);
        u.run.clear();
        let Err(e) = sent else {
            return Outcome::Fine;
        };
        let sock = Arc::clone(sock);
        self.send_failed(now, &sock, n, &e)
    }

    /// What a sending thread said about one of this path's runs.
    pub(super) fn sent(&mut self, now: Instant, s: &Sent) -> Outcome {
        let Err(e) = &s.result else {
            return Outcome::Fine;
        };
        self.send_failed(now, &s.sock, s.datagrams, e)
    }

    /// Count `n` datagrams that `sock` failed to send with `e`; close the socket if the
    /// error says it is broken (unless it was re-opened since).
    fn send_failed(
        &mut self,
        now: Instant,
        sock: &Arc<BatchSocket>,
        n: u64,
        e: &io::Error,
    ) -> Outcome {
        match udp::classify_on(sock.socket(), e) {
            ErrorKind::WouldBlock => self.counters.send_would_block += n,
            ErrorKind::Datagram => self.counters.send_errors += n,
            ErrorKind::Path => {
                self.counters.send_errors += n;
                return Outcome::PathError;
            }
            ErrorKind::Socket => {
                self.counters.send_errors += n;
                let current = matches!(&self.carrier, Carrier::Udp(u) if u.sock.as_ref().is_some_and(|c| Arc::ptr_eq(c, sock)));
                if !current {
                    return Outcome::Fine;
                }
                self.fail(now, format!("send: {e}"));
                return Outcome::Failed;
            }
        }
        Outcome::Fine
    }

    /// Read what a UDP path's socket has into `batch` (one `recvmmsg`; empty when there
    /// was nothing).
    pub(super) fn recv_batch(&mut self, now: Instant, batch: &mut RecvBatch) -> Outcome {
        batch.clear();
        let Carrier::Udp(u) = &mut self.carrier else {
            return Outcome::Fine;
        };
        let Some(sock) = u.sock.as_ref() else {
            return Outcome::Fine;
        };
        // An ICMP error about an earlier datagram is reported once: read on after it.
        for _ in 0..4 {
            let Err(e) = sock.recv(batch) else {
                self.counters.recv_calls += 1;
                return Outcome::Fine;
            };
            match udp::classify_on(sock.socket(), &e) {
                ErrorKind::WouldBlock => return Outcome::Fine,
                ErrorKind::Datagram => continue,
                ErrorKind::Socket => {
                    self.counters.recv_errors += 1;
                    self.fail(now, format!("receive: {e}"));
                    return Outcome::Failed;
                }
                ErrorKind::Path => {
                    self.counters.recv_errors += 1;
                    return Outcome::PathError;
                }
            }
        }
        Outcome::Fine
    }

    /// The `io` entry of `status` for this path.
    pub(super) fn io_json(&self, now: Instant, ep: &Endpoint) -> Value {
        let emu_dropped = ep.emulated(self.id);
        let mut counters = self.counters;
        counters.emu_dropped = emu_dropped.unwrap_or(0);
        let mut v = json!({
            "id": self.id.0,
            "name": self.name,
            "error": self.last_error,
            "emulated": emu_dropped.is_some(),
            "counters": counters,
        });
        match &self.carrier {
            Carrier::Udp(u) => {
                v["kind"] = "udp".into();
                v["local"] = u.local.to_string().into();
                v["bound"] = json!(u.uplink.bound.map(|a| a.to_string()));
                v["remote"] = json!(ep.remote(self.id).map(|a| a.to_string()));
                v["remote_config"] = u.uplink.target.to_string().into();
                v["resolving"] = self.resolving().into();
                v["dev"] = json!(u.dev);
                v["socket"] = if u.sock.is_some() { "open" } else { "closed" }.into();
            }
            Carrier::Serial(s) => {
                v["kind"] = "serial".into();
                v["serial"] = s.json(now, ep.line(self.id));
            }
        }
        v
    }

    /// Where the path goes, for the start-up log.
    pub(super) fn describe(&self) -> String {
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
