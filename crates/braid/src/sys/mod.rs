//! Linux glue: the TUN and TAP devices, packet sockets, link notices, path sockets, signals, `ppoll`, user switching and systemd's
//! notifications. Everything `unsafe` in
//! the program lives here.

pub mod ifaddr;
pub mod link_watch;
pub mod netdev;
pub mod notify;
pub mod packet;
pub mod poll;
pub mod privs;
pub mod signal;
pub mod tap;
pub mod tty;
pub mod tun;
pub mod udp;
pub mod udp_batch;

use std::io;

/// `Err(last_os_error)` when a libc call returned -1.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The effective uid.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Run `f` with the process's umask set to `mask`, then restore it. The umask is
/// process-wide: calls are serialised by a lock, and files created by other threads
/// meanwhile (none in the daemon; other tests in a test binary) get `mask` too.
pub fn with_umask<T>(mask: libc::mode_t, f: impl FnOnce() -> T) -> T {
    static UMASK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = UMASK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // SAFETY: umask has no preconditions and cannot fail.
    let old = unsafe { libc::umask(mask) };
    let r = f();
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    r
}
