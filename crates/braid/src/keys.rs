//! Key files and `braid genkey` / `braid pubkey` (the same text form as `wg genkey` /
//! `wg pubkey`: 32 bytes in standard base64, 44 characters).

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

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

/// Read at most this much from stdin or a key file (a key is 44 characters).
const KEY_TEXT_MAX: u64 = 1024;

/// `braid pubkey`: read a private key on stdin, return the public key line.
pub fn pubkey_from_stdin() -> anyhow::Result<String> {
    let mut text = String::new();
    std::io::stdin()
        .take(KEY_TEXT_MAX)
        .read_to_string(&mut text)
        .map_err(|e| anyhow::anyhow!("reading stdin: {e}"))?;
    pubkey(&text).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Read a key file: refused when group or others may read or write it (mode & 0o077), as a
/// key others can read is no secret. Returns the file's text (trimmed by the key parsers).
pub fn read_key_file(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} has mode {mode:04o}: a key file must not be accessible to group or others (chmod 600 {})",
            path.display(),
            path.display()
        ));
    }
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(KEY_TEXT_MAX).read_to_string(&mut text))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text)
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

    #[test]
    fn key_file_mode_is_checked() {
        let dir = std::env::temp_dir().join(format!("braid-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("k");
        std::fs::write(&f, "abc\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_key_file(&f).unwrap_err();
        assert!(e.contains("has mode 0644"), "{e}");
        assert!(e.contains(f.to_str().unwrap()), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_key_file(&f).unwrap(), "abc\n");
        assert!(read_key_file(&dir.join("none")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
