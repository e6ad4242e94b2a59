//! `ppoll` with a microsecond timeout.
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Readable-interest entry for [`wait`].
pub fn readable(fd: RawFd) -> libc::pollfd {
    libc::pollfd { fd, events: libc::POLLIN, revents: 0 }
}

/// True when the entry reported readiness (or an error/hang-up, which a read will surface).
pub fn is_ready(p: &libc::pollfd) -> bool {
    p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0
}

/// Wait until one of `fds` is ready or `timeout` passes (`None` = forever). EINTR counts as
/// a wake-up with nothing ready.
pub fn wait(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::try_from(t.subsec_nanos()).unwrap_or(0),
    });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a valid slice of pollfd for its length; `tsp` is null or points to a
    // live timespec; a null sigmask leaves the mask alone.
    let r = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, tsp, std::ptr::null()) };
    if r == -1 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(usize::try_from(r).unwrap_or(0))
}
