//! One Ethernet member of the bond: its packet socket (re-opened when the port vanishes
//! and comes back), its carrier as the daemon last told the bond, and its IO counters.
use std::io;
use std::time::Duration;

use braid_core::ether::MemberId;
use braid_core::Instant;
use serde_json::{json, Value};

use crate::log::{dlog, dwarn};
use crate::sys::link_watch;
use crate::sys::packet::PacketSocket;

/// How often a member whose socket is gone (the port vanished) is tried again.
pub(super) const REOPEN: Duration = Duration::from_secs(1);

/// The daemon's side of one member.
#[derive(Debug)]
pub(super) struct Member {
    pub(super) name: String,
    pub(super) dev: String,
    pub(super) id: MemberId,
    pub(super) sock: Option<PacketSocket>,
    /// The device's index while the socket is open (link events name devices by index).
    pub(super) ifindex: u32,
    /// Carrier as last given to the bond.
    pub(super) carrier: bool,
    /// When to try opening the socket again.
    pub(super) retry_at: Instant,
    pub(super) last_error: Option<String>,
    pub(super) sent: u64,
    pub(super) send_errors: u64,
    pub(super) received: u64,
    pub(super) recv_errors: u64,
}

impl Member {
    /// A member of device `dev`, its socket opened (or due to be retried).
    pub(super) fn open(
        now: Instant,
        id: MemberId,
        name: &str,
        dev: &str,
        vnet_hdr: bool,
    ) -> Member {
        let mut m = Member {
            name: name.to_owned(),
            dev: dev.to_owned(),
            id,
            sock: None,
            ifindex: 0,
            carrier: false,
            retry_at: now,
            last_error: None,
            sent: 0,
            send_errors: 0,
            received: 0,
            recv_errors: 0,
        };
        m.try_open(now, vnet_hdr);
        m
    }

    /// Open the packet socket; on failure keep the error and retry after [`REOPEN`].
    pub(super) fn try_open(&mut self, now: Instant, vnet_hdr: bool) {
        match PacketSocket::open(&self.dev, true, vnet_hdr) {
            Ok(s) => {
                self.ifindex = s.ifindex();
                self.sock = Some(s);
                if self.last_error.take().is_some() {
                    dlog!(now, "member {} ({}): port is back", self.name, self.dev);
                }
            }
            Err(e) => {
                if self.last_error.is_none() {
                    dwarn!(
                        now,
                        "member {} ({}): cannot open the port: {e}; trying again every {} s",
                        self.name,
                        self.dev,
                        REOPEN.as_secs()
                    );
                }
                self.fail(now, e.to_string());
            }
        }
    }

    /// The socket is unusable (the port vanished): close it, retry later.
    pub(super) fn fail(&mut self, now: Instant, error: String) {
        self.sock = None;
        self.ifindex = 0;
        self.last_error = Some(error);
        self.retry_at = now + REOPEN;
    }

    /// The carrier now: down without a socket.
    pub(super) fn carrier_now(&self) -> bool {
        self.sock.is_some() && link_watch::carrier(&self.dev).unwrap_or(false)
    }

    /// Send one frame (vnet header first when the sockets use them). A vanished port
    /// closes the socket; other errors are counted.
    pub(super) fn send(&mut self, now: Instant, frame: &[u8]) {
        let Some(s) = &self.sock else {
            self.send_errors += 1;
            return;
        };
        match s.send(frame) {
            Ok(()) => self.sent += 1,
            Err(e) => {
                self.send_errors += 1;
                if vanished(&e) {
                    self.fail(now, e.to_string());
                }
            }
        }
    }

    /// The member's part of `status`.
    pub(super) fn json(&self) -> Value {
        json!({
            "name": self.name,
            "dev": self.dev,
            "socket": if self.sock.is_some() { "open" } else { "closed" },
            "carrier": self.carrier,
            "frames_sent": self.sent,
            "send_errors": self.send_errors,
            "frames_received": self.received,
            "recv_errors": self.recv_errors,
            "last_error": self.last_error,
        })
    }
}

/// Errors that mean the port is gone (deleted, or its driver unbound). ENETDOWN is not
/// one: a port set down keeps its socket, which works again when it comes up.
pub(super) fn vanished(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ENXIO))
}

impl Member {
    /// Whether the device this member's socket is bound to is still there under its
    /// name (a deleted port, or one deleted and made again, has another index or none).
    pub(super) fn still_there(&self) -> bool {
        let Ok(name) = std::ffi::CString::new(self.dev.as_str()) else {
            return false;
        };
        // SAFETY: `name` is a valid NUL-terminated string for the call's duration.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        index != 0 && index == self.ifindex
    }
}
