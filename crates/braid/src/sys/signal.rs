//! SIGINT/SIGTERM as a readable fd (signalfd), so the event loop sees them in turn.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::cvt;

/// A signalfd for SIGINT and SIGTERM (and SIGHUP), which are blocked for normal delivery.
#[derive(Debug)]
pub struct Signals {
    fd: OwnedFd,
}

impl Signals {
    /// Block SIGINT, SIGTERM and SIGHUP and open a non-blocking signalfd for them.
    pub fn new() -> io::Result<Signals> {
        // SAFETY: sigset_t is plain data; the sig* calls only write into `set`.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGHUP);
            let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if r != 0 {
                return Err(io::Error::from_raw_os_error(r));
            }
            let fd = cvt(libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC))?;
            Ok(Signals { fd: OwnedFd::from_raw_fd(fd) })
        }
    }

    /// The signal received, if one is pending.
    pub fn read(&self) -> Option<i32> {
        // SAFETY: signalfd_siginfo is plain data; read writes at most its size.
        unsafe {
            let mut info: libc::signalfd_siginfo = std::mem::zeroed();
            let n = libc::read(
                self.fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                std::mem::size_of::<libc::signalfd_siginfo>(),
            );
            (n == std::mem::size_of::<libc::signalfd_siginfo>() as isize).then(|| i32::try_from(info.ssi_signo).unwrap_or(0))
        }
    }
}

impl AsRawFd for Signals {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A signal's name for logs.
pub fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}
