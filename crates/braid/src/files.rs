//! Bounded reads of the files braid is pointed at: configs, key files, tc scripts, lab
//! scenarios. A path such as `/dev/zero` or a huge file must give a clear error, not a
//! process that grows without end (`braid check --config /dev/zero` once took 24 GB).
use std::fmt;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Longest config file, tc script or lab scenario read (real ones are a few kilobytes).
pub const TEXT_MAX: u64 = 1 << 20;

/// Why a file could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// Opening, inspecting or reading it failed.
    Io(io::Error),
    /// Not a regular file (a device, a fifo, a directory) where one is required.
    NotRegular,
    /// It holds more than the limit.
    TooLarge {
        /// The limit, bytes.
        limit: u64,
    },
    /// Not UTF-8 text.
    NotUtf8,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotRegular => write!(f, "not a regular file"),
            ReadError::TooLarge { limit } => write!(f, "larger than {}", size(*limit)),
            ReadError::NotUtf8 => write!(f, "stream did not contain valid UTF-8"),
        }
    }
}

impl std::error::Error for ReadError {}

/// `1 MiB`, `512 bytes`.
pub fn size(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// Open `path` for reading without blocking on a fifo (O_NONBLOCK: a regular file ignores
/// it) and return it with its metadata, refused unless it is a regular file. The checks
/// run on the opened file, so nothing can swap the path between check and read.
pub fn open_regular(path: &Path) -> Result<(File, Metadata), ReadError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular);
    }
    Ok((file, meta))
}

/// Read at most `limit` bytes of UTF-8 text from `r`; more is [`ReadError::TooLarge`].
pub fn read_limited(r: impl Read, limit: u64) -> Result<String, ReadError> {
    let mut bytes = Vec::new();
    r.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8)
}

/// Read a text file of any kind (a pipe such as `<(cmd)` works) up to `limit` bytes.
pub fn read_text(path: &Path, limit: u64) -> Result<String, ReadError> {
    let file = File::open(path).map_err(ReadError::Io)?;
    read_limited(file, limit)
}

/// Read a regular text file up to `limit` bytes.
pub fn read_regular_text(path: &Path, limit: u64) -> Result<String, ReadError> {
    let (file, _) = open_regular(path)?;
    read_limited(file, limit)
}

/// Write `text` to `path` readable by its owner only (mode 0600, also when the file was
/// there before): for configs that hold a key inline, which braid refuses otherwise.
pub fn write_private(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_zero_is_cut_at_the_limit() {
        let e = read_text(Path::new("/dev/zero"), 4096).unwrap_err();
        assert!(matches!(e, ReadError::TooLarge { limit: 4096 }), "{e}");
        assert_eq!(e.to_string(), "larger than 4 KiB");
        let e = read_regular_text(Path::new("/dev/zero"), 4096).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
    }

    #[test]
    fn limits_and_text() {
        assert_eq!(read_limited(&b"abc"[..], 3).unwrap(), "abc");
        assert!(matches!(
            read_limited(&b"abcd"[..], 3),
            Err(ReadError::TooLarge { limit: 3 })
        ));
        assert!(matches!(
            read_limited(&b"\xff"[..], 3),
            Err(ReadError::NotUtf8)
        ));
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(512), "512 bytes");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("braid-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("f");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(open_regular(&fifo), Err(ReadError::NotRegular)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
