//! `[bond]` keys: `private_key` / `private_key_file`, `peer_public_key`, `preshared_key` /
//! `preshared_key_file`, `encryption` (`"none"`, or the cipher a sealed bond seals with:
//! `"auto"`, `"chacha20-poly1305"`, `"aes-256-gcm"`), and the testing key `rekey_after_s`.

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use braid_core::crypto::{Cipher, PresharedKey, PrivateKey, PublicKey};

use super::{at, VResult, S};

/// Whether and how the bond's datagrams are sealed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Encryption {
    /// `encryption = "none"`: plaintext datagrams (trusted links only; a warning at start).
    None,
    /// Sealed with a Noise IKpsk2 session between these keys.
    Keys(Box<KeySettings>),
}

impl Encryption {
    /// True when datagrams are sealed (they carry the envelope's overhead).
    pub fn is_sealed(&self) -> bool {
        !matches!(self, Encryption::None)
    }

    /// The name shown by `braid check` and in the status: `none` or the cipher this end
    /// seals with.
    pub fn name(&self) -> &'static str {
        match self {
            Encryption::None => "none",
            Encryption::Keys(k) => k.cipher.name(),
        }
    }
}

/// The validated keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySettings {
    /// Our static private key.
    pub private_key: PrivateKey,
    /// The peer's static public key.
    pub peer_public_key: PublicKey,
    /// Optional symmetric key mixed into the handshake.
    pub preshared_key: Option<PresharedKey>,
    /// The AEAD this end seals with (`encryption`, `auto` resolved on this CPU); it opens
    /// either.
    pub cipher: Cipher,
    /// Testing only: start a new handshake this often (the protocol rekeys every 120 s).
    pub rekey_after: Option<Duration>,
}

/// The config file the text came from, for the inline-key check: its path and who may
/// access it. None for text that did not come from a file (`Config::parse`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Source<'a> {
    pub path: &'a Path,
    pub access: crate::keys::Access,
}

/// The raw keys, borrowed from the `[bond]` table.
pub(super) struct RawSecurity<'a> {
    pub encryption: &'a Option<S<String>>,
    pub private_key: &'a Option<S<String>>,
    pub private_key_file: &'a Option<S<String>>,
    pub peer_public_key: &'a Option<S<String>>,
    pub preshared_key: &'a Option<S<String>>,
    pub preshared_key_file: &'a Option<S<String>>,
    pub rekey_after_s: &'a Option<S<i64>>,
    pub source: Option<Source<'a>>,
}

const HOW: &str = "generate a key pair on each host with `(umask 077; braid genkey > private.key); braid pubkey < private.key`, then set bond.private_key_file and bond.peer_public_key (the other host's public key); or set bond.encryption = \"none\" for a trusted link";

/// An inline key or a key file (relative to the config file's directory), one of them. An
/// inline key in a config file that others may read is refused as such a key file is.
fn key_text(
    inline: &Option<S<String>>,
    file: &Option<S<String>>,
    key: &str,
    base: &Path,
    source: Option<Source<'_>>,
) -> VResult<Option<(String, Range<usize>)>> {
    match (inline, file) {
        (Some(_), Some(f)) => Err(at(
            f,
            format!("bond.{key}_file: set either bond.{key} or bond.{key}_file, not both"),
        )),
        (Some(k), None) => {
            if let Some(src) = source {
                crate::keys::check_secret_access(
                    src.path,
                    src.access,
                    "a config file with a key inline",
                )
                .map_err(|m| {
                    at(
                        k,
                        format!("bond.{key}: {m}, or keep the key in bond.{key}_file"),
                    )
                })?;
            }
            Ok(Some((k.get_ref().clone(), k.span())))
        }
        (None, Some(f)) => {
            let path = base.join(f.get_ref());
            let text = crate::keys::read_key_file(&path)
                .map_err(|m| at(f, format!("bond.{key}_file: {m}")))?;
            Ok(Some((text, f.span())))
        }
        (None, None) => Ok(None),
    }
}

pub(super) fn validate(r: RawSecurity<'_>, bond: Range<usize>, base: &Path) -> VResult<Encryption> {
    let private = key_text(
        r.private_key,
        r.private_key_file,
        "private_key",
        base,
        r.source,
    )?;
    let psk = key_text(
        r.preshared_key,
        r.preshared_key_file,
        "preshared_key",
        base,
        r.source,
    )?;
    let mut cipher = Cipher::preferred();
    if let Some(e) = r.encryption {
        match e.get_ref().as_str() {
            "none" => return plain(&r),
            "auto" => {}
            name => {
                cipher = Cipher::from_name(name).ok_or_else(|| {
                    let names: Vec<String> =
                        Cipher::ALL.iter().map(|c| format!("\"{}\"", c.name())).collect();
                    at(
                        e,
                        format!(
                            "bond.encryption: {name:?} is not known: \"auto\" (the default with keys: the faster cipher on this CPU), {}, or \"none\" for plaintext",
                            names.join(", ")
                        ),
                    )
                })?;
            }
        }
    }
    let Some((private, pspan)) = private else {
        return Err((
            Some(bond),
            format!("bond.private_key: missing; braid encrypts by default: {HOW}"),
        ));
    };
    let private_key = PrivateKey::from_base64(&private).map_err(|e| {
        (
            Some(pspan.clone()),
            format!("bond.private_key: {e} (a `braid genkey` key is 44 characters of base64)"),
        )
    })?;
    let Some(peer) = r.peer_public_key else {
        return Err((
            Some(bond),
            format!("bond.peer_public_key: missing (the other host's `braid pubkey`): {HOW}"),
        ));
    };
    let peer_public_key = PublicKey::from_base64(peer.get_ref())
        .map_err(|e| at(peer, format!("bond.peer_public_key: {e}")))?;
    if peer_public_key == private_key.public_key() {
        return Err(at(
            peer,
            "bond.peer_public_key: is this host's own public key (use the other host's)".into(),
        ));
    }
    let preshared_key = match psk {
        None => None,
        Some((text, span)) => Some(
            PresharedKey::from_base64(&text)
                .map_err(|e| (Some(span), format!("bond.preshared_key: {e}")))?,
        ),
    };
    let rekey_after = match r.rekey_after_s {
        None => None,
        Some(s) if (1..=3600).contains(s.get_ref()) => {
            Some(Duration::from_secs(s.get_ref().unsigned_abs()))
        }
        Some(s) => {
            return Err(at(
                s,
                format!(
                    "bond.rekey_after_s: {} is out of range (1..=3600)",
                    s.get_ref()
                ),
            ))
        }
    };
    Ok(Encryption::Keys(Box::new(KeySettings {
        private_key,
        peer_public_key,
        preshared_key,
        cipher,
        rekey_after,
    })))
}

/// `encryption = "none"`: refused together with any key.
fn plain(r: &RawSecurity<'_>) -> VResult<Encryption> {
    let keyed = [
        r.private_key.as_ref().map(S::span),
        r.private_key_file.as_ref().map(S::span),
        r.peer_public_key.as_ref().map(S::span),
        r.preshared_key.as_ref().map(S::span),
        r.preshared_key_file.as_ref().map(S::span),
    ]
    .into_iter()
    .flatten()
    .next();
    if let Some(span) = keyed {
        return Err((
            Some(span),
            "bond.encryption = \"none\" and keys are both set: remove one".into(),
        ));
    }
    Ok(Encryption::None)
}
