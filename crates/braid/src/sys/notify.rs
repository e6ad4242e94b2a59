//! systemd's service notifications (sd_notify(3)): `READY=1` once the bond's TUN, path
//! sockets and control socket are up, `RELOADING=1` ... `READY=1` around a reload,
//! `STOPPING=1` when a signal stops the daemon. Nothing is sent, and nothing fails, when
//! `NOTIFY_SOCKET` is not set (not started by systemd with `Type=notify`).

use sd_notify::NotifyState;

/// Whether the process was given a notification socket.
pub fn wanted() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some()
}

/// `READY=1` with a one-line `STATUS=`.
pub fn ready(status: &str) -> std::io::Result<()> {
    sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)])
}

/// `RELOADING=1` (with `MONOTONIC_USEC`, which newer systemd asks for).
pub fn reloading() -> std::io::Result<()> {
    match sd_notify::NotifyState::monotonic_usec_now() {
        Ok(t) => sd_notify::notify(&[NotifyState::Reloading, t]),
        Err(_) => sd_notify::notify(&[NotifyState::Reloading]),
    }
}

/// `STOPPING=1`.
pub fn stopping() -> std::io::Result<()> {
    sd_notify::notify(&[NotifyState::Stopping])
}
