//! Serial lines: a tty opened non-blocking in raw mode (8N1, no flow control, no echo, no
//! translation) at a fixed baud rate, for the serial path kind. Also the pseudo-terminal
//! helper the lab's line emulator (`braid_lab::line`) is built on.
//!
//! Errors name the device. A device that went away (a USB adapter unplugged, a pty whose
//! master closed: EIO, ENXIO, ENODEV, ENOENT, or a read of 0 bytes, which is a hang-up) is
//! reported with [`io::ErrorKind::NotConnected`]; [`is_gone`] tells the daemon to take the
//! path down and try to open the device again later.
//!
//! Pacing: on a real UART [`Tty::output_queue_bytes`] (TIOCOUTQ) says how much is still
//! waiting to go out. On a pseudo-terminal it is always 0, and a pty slave accepts about
//! 20 KB before a write returns `WouldBlock` (tens of seconds at 9600 bd), so the writer
//! must pace itself by its own clock at [`Tty::bytes_per_sec`].
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::cvt;

/// The baud rates [`Tty::open`] accepts (Linux's standard `B...` constants from 300 up).
pub const SUPPORTED_BAUDS: [u32; 24] = [
    300, 600, 1200, 1800, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 500000,
    576000, 921600, 1000000, 1152000, 1500000, 2000000, 2500000, 3000000, 3500000, 4000000,
];

/// The termios speed constant for `baud`, or `None` when it is not a standard rate.
pub fn speed_constant(baud: u32) -> Option<libc::speed_t> {
    Some(match baud {
        300 => libc::B300,
        600 => libc::B600,
        1200 => libc::B1200,
        1800 => libc::B1800,
        2400 => libc::B2400,
        4800 => libc::B4800,
        9600 => libc::B9600,
        19200 => libc::B19200,
        38400 => libc::B38400,
        57600 => libc::B57600,
        115200 => libc::B115200,
        230400 => libc::B230400,
        460800 => libc::B460800,
        500000 => libc::B500000,
        576000 => libc::B576000,
        921600 => libc::B921600,
        1000000 => libc::B1000000,
        1152000 => libc::B1152000,
        1500000 => libc::B1500000,
        2000000 => libc::B2000000,
        2500000 => libc::B2500000,
        3000000 => libc::B3000000,
        3500000 => libc::B3500000,
        4000000 => libc::B4000000,
        _ => return None,
    })
}

/// The error for a baud rate that is not in [`SUPPORTED_BAUDS`].
pub fn unsupported_baud(baud: u32) -> io::Error {
    let list: Vec<String> = SUPPORTED_BAUDS.iter().map(u32::to_string).collect();
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "unsupported baud rate {baud}; supported: {}",
            list.join(", ")
        ),
    )
}

/// An error on a tty: the device, the operation and the OS error. It is the inner error of
/// the `io::Error`s this module returns (other than `WouldBlock` and `Interrupted`, which
/// are returned bare so the hot path does not allocate).
#[derive(Debug)]
pub struct TtyError {
    /// The device path.
    pub device: PathBuf,
    /// What was being done (`open`, `read`, `tcsetattr`...).
    pub op: &'static str,
    /// The OS error (or a synthetic one, e.g. for a hang-up).
    pub source: io::Error,
    /// The device went away: take the path down, retry later.
    pub gone: bool,
}

impl fmt::Display for TtyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.device.display(), self.op, self.source)?;
        if self.source.raw_os_error() == Some(libc::ENOTTY) {
            write!(f, " (not a terminal)")?;
        }
        if self.source.raw_os_error() == Some(libc::EACCES) {
            write!(f, " (no permission: is the user in the dialout group?)")?;
        }
        if self.gone && self.op == "open" {
            write!(f, " (device absent)")?;
        } else if self.gone {
            write!(f, " (device gone)")?;
        }
        Ok(())
    }
}

impl std::error::Error for TtyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// OS errors that mean the device is not there (any more).
fn gone_errno(errno: Option<i32>) -> bool {
    matches!(
        errno,
        Some(libc::EIO) | Some(libc::ENXIO) | Some(libc::ENODEV) | Some(libc::ENOENT)
    )
}

/// True when `e` says the device went away (EIO, ENXIO, ENODEV, ENOENT, or a hang-up):
/// the daemon should mark the path down and try to open the device again later. Such
/// errors have kind [`io::ErrorKind::NotConnected`].
pub fn is_gone(e: &io::Error) -> bool {
    if let Some(t) = e.get_ref().and_then(|i| i.downcast_ref::<TtyError>()) {
        return t.gone;
    }
    gone_errno(e.raw_os_error())
}

fn tty_error(device: &Path, op: &'static str, source: io::Error) -> io::Error {
    let gone = gone_errno(source.raw_os_error());
    let kind = if gone {
        io::ErrorKind::NotConnected
    } else {
        source.kind()
    };
    io::Error::new(
        kind,
        TtyError {
            device: device.to_owned(),
            op,
            source,
            gone,
        },
    )
}

fn tcgetattr(fd: BorrowedFd<'_>) -> io::Result<libc::termios> {
    // SAFETY: termios is plain data; all-zero is a valid value to be overwritten.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is an open descriptor and `t` a valid termios to fill.
    cvt(unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) })?;
    Ok(t)
}

fn tcsetattr(fd: BorrowedFd<'_>, t: &libc::termios) -> io::Result<()> {
    // SAFETY: `fd` is an open descriptor and `t` a valid termios.
    cvt(unsafe { libc::tcsetattr(fd.as_raw_fd(), libc::TCSANOW, t) }).map(|_| ())
}

/// `t` made raw 8N1 at `speed`: cfmakeraw, CLOCAL|CREAD, no parity, one stop bit, no
/// hardware or software flow control, VMIN=1 VTIME=0. (With O_NONBLOCK, VMIN=1 makes a
/// read of an empty tty fail with EAGAIN and return what is there otherwise; VMIN=0 would
/// make it return 0, which could not be told from a hang-up.)
fn raw_termios(mut t: libc::termios, speed: libc::speed_t) -> io::Result<libc::termios> {
    // SAFETY: `t` is a valid termios; cfmakeraw only edits its fields.
    unsafe { libc::cfmakeraw(&mut t) };
    t.c_cflag &= !(libc::CSIZE | libc::PARENB | libc::CSTOPB | libc::CRTSCTS | libc::HUPCL);
    t.c_cflag |= libc::CS8 | libc::CLOCAL | libc::CREAD;
    t.c_iflag &= !(libc::IXON | libc::IXOFF | libc::IXANY);
    t.c_cc[libc::VMIN] = 1;
    t.c_cc[libc::VTIME] = 0;
    // SAFETY: `t` is a valid termios; the setters only edit its speed fields.
    cvt(unsafe { libc::cfsetispeed(&mut t, speed) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::cfsetospeed(&mut t, speed) })?;
    Ok(t)
}

fn ioctl_int(fd: BorrowedFd<'_>, req: libc::Ioctl) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: the requests used here (TIOCOUTQ, TIOCINQ) write one c_int through the pointer.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), req, &mut n as *mut libc::c_int) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// An open serial line in raw mode. Non-blocking: [`Tty::read`] and [`Tty::write`] return
/// `WouldBlock` instead of waiting; wait with poll on [`Tty::as_raw_fd`]. Dropping it puts
/// back the termios it found.
#[derive(Debug)]
pub struct Tty {
    file: File,
    path: PathBuf,
    baud: u32,
    saved: libc::termios,
}

impl Tty {
    /// Open `path` (O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC), put it in raw 8N1 mode at
    /// `baud` without flow control (TCSANOW), and discard anything queued either way.
    /// Errors: an unsupported baud (naming the supported ones), a path that is not a tty, a
    /// device that does not take the rate; each names the device.
    pub fn open(path: impl AsRef<Path>, baud: u32) -> io::Result<Tty> {
        let path = path.as_ref();
        let speed = speed_constant(baud).ok_or_else(|| {
            let e = unsupported_baud(baud);
            io::Error::new(e.kind(), format!("{}: {e}", path.display()))
        })?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| tty_error(path, "open", e))?;
        let saved = tcgetattr(file.as_fd()).map_err(|e| tty_error(path, "tcgetattr", e))?;
        let want = raw_termios(saved, speed).map_err(|e| tty_error(path, "cfsetspeed", e))?;
        tcsetattr(file.as_fd(), &want).map_err(|e| tty_error(path, "tcsetattr", e))?;
        let tty = Tty {
            file,
            path: path.to_owned(),
            baud,
            saved,
        };
        // tcsetattr succeeds when any of the changes was made: check the rate took.
        let got = tcgetattr(tty.file.as_fd()).map_err(|e| tty_error(path, "tcgetattr", e))?;
        // SAFETY: `got` is a valid termios; the getters only read it.
        let (ispeed, ospeed) = unsafe { (libc::cfgetispeed(&got), libc::cfgetospeed(&got)) };
        if ispeed != speed || ospeed != speed {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: the device does not take {baud} bd", path.display()),
            ));
        }
        // SAFETY: tcflush on an open descriptor.
        cvt(unsafe { libc::tcflush(tty.file.as_raw_fd(), libc::TCIOFLUSH) })
            .map_err(|e| tty_error(path, "tcflush", e))?;
        Ok(tty)
    }

    /// The device path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The baud rate.
    pub fn baud(&self) -> u32 {
        self.baud
    }

    /// Bytes per second the line carries with 8N1 framing (10 bits per byte).
    pub fn bytes_per_sec(&self) -> u32 {
        braid_core::serial::bytes_per_sec(self.baud)
    }

    /// Read what is there. `WouldBlock` (bare, no allocation) when nothing is; a hang-up
    /// (a read of 0 bytes) or EIO/ENXIO/ENODEV is a [`is_gone`] error.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        match retry_eintr(|| self.file.read(buf)) {
            Ok(0) => Err(self.hung_up("read")),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(e),
            Err(e) => Err(tty_error(&self.path, "read", e)),
        }
    }

    /// Write what the tty takes now (possibly fewer bytes than given). `WouldBlock` (bare)
    /// when it takes none; EIO/ENXIO/ENODEV is a [`is_gone`] error.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if bytes.is_empty() {
            return Ok(0);
        }
        match retry_eintr(|| self.file.write(bytes)) {
            Ok(0) => Err(self.hung_up("write")),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(e),
            Err(e) => Err(tty_error(&self.path, "write", e)),
        }
    }

    /// Bytes written but not yet sent by the device (TIOCOUTQ). Always 0 on a pty.
    pub fn output_queue_bytes(&self) -> io::Result<usize> {
        ioctl_int(self.file.as_fd(), libc::TIOCOUTQ)
            .map_err(|e| tty_error(&self.path, "TIOCOUTQ", e))
    }

    /// Bytes received and not yet read (TIOCINQ).
    pub fn input_queue_bytes(&self) -> io::Result<usize> {
        ioctl_int(self.file.as_fd(), libc::TIOCINQ).map_err(|e| tty_error(&self.path, "TIOCINQ", e))
    }

    /// Throw away everything queued in both directions (TCIOFLUSH).
    pub fn discard(&self) -> io::Result<()> {
        // SAFETY: tcflush on an open descriptor.
        cvt(unsafe { libc::tcflush(self.file.as_raw_fd(), libc::TCIOFLUSH) })
            .map(|_| ())
            .map_err(|e| tty_error(&self.path, "tcflush", e))
    }

    fn hung_up(&self, op: &'static str) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotConnected,
            TtyError {
                device: self.path.clone(),
                op,
                source: io::Error::new(io::ErrorKind::NotConnected, "hung up"),
                gone: true,
            },
        )
    }
}

fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted && tries < 8 => tries += 1,
            r => return r,
        }
    }
}

impl AsRawFd for Tty {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl AsFd for Tty {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl Drop for Tty {
    fn drop(&mut self) {
        // Best effort: a vanished device has no settings left to restore.
        let _ = tcsetattr(self.file.as_fd(), &self.saved);
    }
}

/// A new pseudo-terminal: the master (non-blocking, close-on-exec, raw: no echo, no
/// translation) and the path of its slave (`/dev/pts/N`). The slave's termios are made raw
/// 8N1 at `baud` (a pty ignores the rate; the setting only keeps `stty` honest; a
/// non-standard rate shows as 38400), and the
/// slave is returned open as a [`Tty`]: hold it while the pty is in use, so the master
/// never sees a hang-up when the program using the slave closes and reopens it.
pub fn open_pty(baud: u32) -> io::Result<(File, Tty)> {
    let ptmx = Path::new("/dev/ptmx");
    let master = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(ptmx)
        .map_err(|e| tty_error(ptmx, "open", e))?;
    let fd = master.as_raw_fd();
    // SAFETY: grantpt/unlockpt on an open pty master.
    cvt(unsafe { libc::grantpt(fd) }).map_err(|e| tty_error(ptmx, "grantpt", e))?;
    // SAFETY: as above.
    cvt(unsafe { libc::unlockpt(fd) }).map_err(|e| tty_error(ptmx, "unlockpt", e))?;
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: ptsname_r writes a NUL-terminated name of at most `name.len()` bytes.
    let r = unsafe { libc::ptsname_r(fd, name.as_mut_ptr(), name.len()) };
    if r != 0 {
        return Err(tty_error(ptmx, "ptsname", io::Error::from_raw_os_error(r)));
    }
    // SAFETY: on success the buffer holds a NUL-terminated string within its bounds.
    let cname = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    let slave_path = PathBuf::from(cname.to_string_lossy().into_owned());
    // The master's own termios are raw already (the kernel's pty master default); make sure.
    let mt = tcgetattr(master.as_fd()).map_err(|e| tty_error(ptmx, "tcgetattr", e))?;
    let mt = raw_termios(mt, libc::B38400).map_err(|e| tty_error(ptmx, "cfsetspeed", e))?;
    tcsetattr(master.as_fd(), &mt).map_err(|e| tty_error(ptmx, "tcsetattr", e))?;
    let cosmetic = if speed_constant(baud).is_some() {
        baud
    } else {
        38400
    };
    let slave = Tty::open(&slave_path, cosmetic)?;
    Ok((master, slave))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_baud_has_a_constant_and_others_do_not() {
        for b in SUPPORTED_BAUDS {
            assert!(speed_constant(b).is_some(), "{b}");
        }
        for b in [0, 50, 110, 200, 1234, 14400, 28800, 56000, 128000, 4000001] {
            assert!(speed_constant(b).is_none(), "{b}");
        }
    }

    #[test]
    fn unsupported_baud_names_the_supported_ones() {
        let e = Tty::open("/dev/null", 14400).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let s = e.to_string();
        assert!(s.contains("/dev/null"), "{s}");
        assert!(s.contains("unsupported baud rate 14400"), "{s}");
        assert!(s.contains("9600, 19200"), "{s}");
        assert!(s.contains("4000000"), "{s}");
    }

    #[test]
    fn a_non_tty_is_refused_by_name() {
        let e = Tty::open("/dev/null", 9600).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("/dev/null"), "{s}");
        assert!(s.contains("not a terminal"), "{s}");
        assert!(!is_gone(&e));
    }

    #[test]
    fn a_missing_device_is_gone() {
        let e = Tty::open("/dev/braid-no-such-tty", 9600).unwrap_err();
        assert!(is_gone(&e), "{e}");
        assert_eq!(e.kind(), io::ErrorKind::NotConnected);
        assert_eq!(
            e.to_string(),
            "/dev/braid-no-such-tty: open: No such file or directory (os error 2) (device absent)"
        );
    }

    #[test]
    fn gone_errnos() {
        for errno in [libc::EIO, libc::ENXIO, libc::ENODEV] {
            assert!(is_gone(&io::Error::from_raw_os_error(errno)));
            assert!(is_gone(&tty_error(
                Path::new("/dev/x"),
                "read",
                io::Error::from_raw_os_error(errno)
            )));
        }
        for errno in [libc::EAGAIN, libc::EINVAL, libc::ENOTTY, libc::EACCES] {
            assert!(!is_gone(&io::Error::from_raw_os_error(errno)));
        }
    }

    #[test]
    fn pty_round_trip_raw_and_restores_termios() {
        let (mut master, slave) = open_pty(115200).unwrap();
        let path = slave.path().to_owned();
        let before = tcgetattr(slave.as_fd()).unwrap();
        {
            let mut tty = Tty::open(&path, 9600).unwrap();
            assert_eq!(tty.baud(), 9600);
            assert_eq!(tty.bytes_per_sec(), 960);
            let mut buf = [0u8; 64];
            assert_eq!(
                tty.read(&mut buf).unwrap_err().kind(),
                io::ErrorKind::WouldBlock
            );
            // Every byte value passes untouched both ways (no echo, no CR/LF mapping).
            let all: Vec<u8> = (0..=255).collect();
            assert_eq!(tty.write(&all).unwrap(), 256);
            assert_eq!(tty.output_queue_bytes().unwrap(), 0);
            let mut got = Vec::new();
            read_some(&mut master, &mut got, 256);
            assert_eq!(got, all);
            master.write_all(&all).unwrap();
            let mut got = Vec::new();
            for _ in 0..1000 {
                match tty.read(&mut buf) {
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if got.len() >= 256 {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(got, all);
            assert!(tty.input_queue_bytes().unwrap() == 0);
            let t = tcgetattr(tty.as_fd()).unwrap();
            // SAFETY: reading the speed of a valid termios.
            assert_eq!(unsafe { libc::cfgetospeed(&t) }, libc::B9600);
        }
        let after = tcgetattr(slave.as_fd()).unwrap();
        // SAFETY: as above.
        assert_eq!(
            unsafe { (libc::cfgetospeed(&before), libc::cfgetospeed(&after)) },
            (libc::B115200, libc::B115200)
        );
        drop(slave);
        drop(master);
    }

    #[test]
    fn a_closed_master_makes_the_slave_gone() {
        let (master, slave) = open_pty(9600).unwrap();
        let mut tty = Tty::open(slave.path(), 9600).unwrap();
        drop(master);
        let mut buf = [0u8; 16];
        let e = tty.read(&mut buf).unwrap_err();
        assert!(is_gone(&e), "{e}");
        assert_eq!(e.kind(), io::ErrorKind::NotConnected);
        assert!(e.to_string().contains("/dev/pts/"), "{e}");
        let e = tty.write(b"x").unwrap_err();
        assert!(is_gone(&e), "{e}");
    }

    fn read_some(f: &mut File, out: &mut Vec<u8>, want: usize) {
        let mut buf = [0u8; 512];
        for _ in 0..1000 {
            match f.read(&mut buf) {
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if out.len() >= want {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}
