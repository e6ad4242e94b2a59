//! Linux glue: the TUN device, path sockets, signals and `ppoll`. Everything `unsafe` in
//! the program lives here.

pub mod poll;
pub mod signal;
pub mod tty;
pub mod tun;
pub mod udp;

use std::io;

/// `Err(last_os_error)` when a libc call returned -1.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
