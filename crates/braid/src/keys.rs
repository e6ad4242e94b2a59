//! Key files and `braid genkey` / `braid pubkey` (the same text form as `wg genkey` /
//! `wg pubkey`: 32 bytes in standard base64, 44 characters).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::files::ReadError;

use braid_core::crypto::{OsRng, PrivateKey};

/// A new random private key in base64 (`braid genkey`).
pub fn genkey() -> String {
    PrivateKey::generate(&mut OsRng).to_base64()
}

/// The public key of the base64 private key in `text` (`braid pubkey`); surrounding
/// whitespace is ignored.
pub fn pubkey(text: &str) -> Result<String, String> {
    PrivateKey::from_base64(text)
        .map(|k| k.public_key().to_base64())
        .map_err(|e| format!("not a private key: {e}"))
}

/// Read at most this much from stdin or a key file (a key is 44 characters and a newline).
pub const KEY_TEXT_MAX: u64 = 512;

/// `braid pubkey`: read a private key on stdin, return the public key line.
pub fn pubkey_from_stdin() -> anyhow::Result<String> {
    let text = crate::files::read_limited(std::io::stdin(), KEY_TEXT_MAX)
        .map_err(|e| anyhow::anyhow!("reading stdin: {e}"))?;
    pubkey(&text).map_err(|e| anyhow::anyhow!("{e}"))
}

/// The owner and permission bits of a file that holds a secret: a key file, or a config
/// file with a key inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Owner's uid.
    pub uid: u32,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
}

impl Access {
    /// The owner and mode in `meta`.
    pub fn of(meta: &std::fs::Metadata) -> Access {
        Access {
            uid: meta.uid(),
            mode: meta.mode() & 0o7777,
        }
    }
}

/// A file holding `what` (`a key file`, `a config file with a key inline`) is refused when
/// group or others may access it, as a key others can read is no secret, or when it
/// belongs to a user other than root and the one braid runs as, who could change it.
pub fn check_secret_access(path: &Path, a: Access, what: &str) -> Result<(), String> {
    let me = crate::sys::euid();
    if a.uid != 0 && a.uid != me {
        return Err(format!(
            "{} is owned by uid {}: {what} must belong to root{} (chown root {})",
            path.display(),
            a.uid,
            if me == 0 {
                String::new()
            } else {
                format!(" or uid {me}")
            },
            path.display()
        ));
    }
    let mode = a.mode & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} has mode {mode:04o}: {what} must not be accessible to group or others (chmod 600 {})",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

/// Why a key file was refused.
#[derive(Debug)]
pub enum KeyFileError {
    /// It does not exist.
    Missing(PathBuf),
    /// It cannot be read: not a regular file, too large, an IO error.
    Read(PathBuf, ReadError),
    /// Its owner or mode lets others read or change it.
    Access(String),
}

impl std::fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyFileError::Missing(p) => write!(
                f,
                "{}: no such file (make one with `(umask 077; braid genkey > {})`)",
                p.display(),
                p.display()
            ),
            KeyFileError::Read(p, ReadError::NotRegular) => write!(
                f,
                "{}: not a regular file (a key file holds one `braid genkey` line)",
                p.display()
            ),
            KeyFileError::Read(p, e @ ReadError::TooLarge { .. }) => write!(
                f,
                "{}: {e}: a key file holds one key (44 characters)",
                p.display()
            ),
            KeyFileError::Read(p, e) => write!(f, "{}: {e}", p.display()),
            KeyFileError::Access(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for KeyFileError {}

/// Read a key file: it must be a regular file (checked first: `/dev/zero` is not a key
/// file whatever its mode), pass [`check_secret_access`], and hold at most
/// [`KEY_TEXT_MAX`] bytes. Returns the file's text (trimmed by the key parsers).
pub fn read_key_file(path: &Path) -> Result<String, KeyFileError> {
    let (file, meta) = crate::files::open_regular(path).map_err(|e| match e {
        ReadError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            KeyFileError::Missing(path.to_owned())
        }
        e => KeyFileError::Read(path.to_owned(), e),
    })?;
    check_secret_access(path, Access::of(&meta), "a key file").map_err(KeyFileError::Access)?;
    crate::files::read_limited(file, KEY_TEXT_MAX)
        .map_err(|e| KeyFileError::Read(path.to_owned(), e))
}

/// `braid genkey`'s warning when its output goes to a regular file that group or others
/// can access (as `wg genkey` warns), or None.
pub fn genkey_output_warning() -> Option<String> {
    use std::os::fd::AsFd;
    let out = std::io::stdout();
    let file = std::fs::File::from(out.as_fd().try_clone_to_owned().ok()?);
    let meta = file.metadata().ok()?;
    let mode = meta.mode() & 0o777;
    (meta.is_file() && mode & 0o077 != 0).then(|| {
        format!(
            "writing a private key to a file that group or others can access (mode {mode:04o}); \
             braid refuses such key files: chmod 600 it, or run `umask 077` first"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn genkey_pubkey_round_trip() {
        let a = genkey();
        let b = genkey();
        assert_eq!(a.len(), 44);
        assert_ne!(a, b, "two keys differ");
        let p = pubkey(&format!("{a}\n")).unwrap();
        assert_eq!(p.len(), 44);
        assert_ne!(p, a);
        assert_eq!(pubkey(&a).unwrap(), p, "deterministic");
        // wg's test vector (RFC 7748 Alice's key pair, base64).
        assert_eq!(
            pubkey("dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo=").unwrap(),
            "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo="
        );
        assert!(pubkey("hello")
            .unwrap_err()
            .starts_with("not a private key"));
    }

    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn key_file_mode_is_checked() {
        let dir = std::env::temp_dir().join(format!("braid-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("k");
        std::fs::write(&f, "abc\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_key_file(&f).unwrap_err().to_string();
        assert!(e.contains("has mode 0644"), "{e}");
        assert!(e.contains(&format!("(chmod 600 {})", f.display())), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_key_file(&f).unwrap(), "abc\n");
        let e = read_key_file(&dir.join("none")).unwrap_err().to_string();
        assert!(
            e.contains("no such file (make one with `(umask 077; braid genkey >"),
            "{e}"
        );
        // Too large: refused, not cut.
        std::fs::write(&f, "a".repeat(KEY_TEXT_MAX as usize + 1)).unwrap();
        let e = read_key_file(&f).unwrap_err().to_string();
        assert!(e.contains("larger than 512 bytes"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_device_is_not_a_key_file_whatever_its_mode() {
        // /dev/zero is 0666: the type is checked first, so the advice is not `chmod 600`.
        let e = read_key_file(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/dev/zero: not a regular file (a key file holds one `braid genkey` line)"
        );
    }

    #[test]
    fn a_key_file_of_another_user_is_refused() {
        if crate::sys::euid() != 0 {
            eprintln!("SKIPPED: needs root to give a file to another user");
            return;
        }
        let dir = std::env::temp_dir().join(format!("braid-keys-own-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("k");
        crate::files::write_private(&f, "abc\n").unwrap();
        std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
        let e = read_key_file(&f).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            e,
            format!(
                "{} is owned by uid 65534: a key file must belong to root (chown root {})",
                f.display(),
                f.display()
            )
        );
    }
}
