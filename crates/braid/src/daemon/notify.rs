//! The daemon's side of systemd's notifications ([`crate::sys::notify`]): what it says
//! when, and a log line when the notification socket cannot be reached (once each kind:
//! a unit whose READY never arrives is killed by systemd, so the reason must be in the
//! journal).

use braid_core::Instant;

use crate::log::{dlog, dwarn};
use crate::sys::notify;

impl super::Daemon {
    /// `READY=1`: the TUN, path sockets and control socket are up (called once
    /// [`super::Daemon::new`] has returned).
    pub(super) fn notify_ready(&self) {
        if !notify::wanted() {
            return;
        }
        let now = self.clock.now();
        let status = format!(
            "{} up, {} path(s), control socket {}",
            self.interface,
            self.paths.len(),
            self.control.path().display()
        );
        match notify::ready(&status) {
            Ok(()) => dlog!(now, "braid: told systemd it is ready"),
            Err(e) => dwarn!(now, "braid: cannot notify systemd (NOTIFY_SOCKET): {e}"),
        }
    }

    /// `STOPPING=1`: a signal stops the daemon.
    pub(super) fn notify_stopping(&self, now: Instant) {
        if let Err(e) = notify::stopping() {
            dwarn!(now, "braid: cannot notify systemd (NOTIFY_SOCKET): {e}");
        }
    }
}

/// `RELOADING=1`: a reload starts.
pub(super) fn reloading(now: Instant) {
    if let Err(e) = notify::reloading() {
        dwarn!(now, "braid: cannot notify systemd (NOTIFY_SOCKET): {e}");
    }
}

/// `READY=1` again: the reload is done (applied or refused: the bond runs either way).
pub(super) fn reloaded(now: Instant, applied: bool) {
    if !notify::wanted() {
        return;
    }
    let status = if applied {
        "config reloaded"
    } else {
        "config not reloaded (see the log); the running bond is unchanged"
    };
    if let Err(e) = notify::ready(status) {
        dwarn!(now, "braid: cannot notify systemd (NOTIFY_SOCKET): {e}");
    }
}
