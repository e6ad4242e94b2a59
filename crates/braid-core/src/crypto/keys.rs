//! X25519 keys and the optional preshared key, in WireGuard's text form: 32 bytes,
//! standard base64 with padding (44 characters). `braid genkey` / `braid pubkey` print
//! exactly what `wg genkey` / `wg pubkey` print, and keys move freely between the two.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use core::fmt;
use curve25519_dalek::montgomery::MontgomeryPoint;
use rand_core::CryptoRngCore;
use zeroize::Zeroize;

/// Bytes of every key.
pub(super) const KEY_LEN: usize = 32;

/// Why a key did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// Not valid standard base64 (with padding).
    Base64,
    /// Decoded to something other than 32 bytes.
    Length(usize),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Base64 => f.write_str("key is not valid base64"),
            KeyError::Length(n) => write!(f, "key decodes to {n} bytes, expected 32"),
        }
    }
}

impl std::error::Error for KeyError {}

fn decode32(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    // 44 characters of base64 decode to 32 bytes; refuse anything long before decoding so
    // a huge input is not copied.
    let text = text.trim();
    if text.len() > 64 {
        return Err(KeyError::Length(text.len() * 3 / 4));
    }
    let mut out = [0u8; 48];
    let n = STANDARD
        .decode_slice(text.as_bytes(), &mut out)
        .map_err(|_| KeyError::Base64)?;
    let decoded = out
        .get(..n)
        .expect("decode_slice reports at most the buffer's length");
    let key: Result<[u8; KEY_LEN], _> = decoded.try_into();
    out.zeroize();
    key.map_err(|_| KeyError::Length(n))
}

/// Clamp a scalar as X25519 (RFC 7748) and `wg genkey` do.
fn clamp(mut k: [u8; KEY_LEN]) -> [u8; KEY_LEN] {
    k[0] &= 248;
    k[31] &= 127;
    k[31] |= 64;
    k
}

/// An X25519 private key (always stored clamped). Zeroed when dropped; `Debug` does not
/// print it.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKey([u8; KEY_LEN]);

impl PrivateKey {
    /// A new random key from a cryptographic RNG (the daemon passes `OsRng`).
    pub fn generate(rng: &mut impl CryptoRngCore) -> Self {
        let mut k = [0u8; KEY_LEN];
        rng.fill_bytes(&mut k);
        let key = Self(clamp(k));
        k.zeroize();
        key
    }

    /// From raw bytes; clamped as `wg` does.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(clamp(bytes))
    }

    /// Parse `wg genkey` output (surrounding whitespace ignored). The key is clamped, so
    /// an unclamped key from another tool still works (as in WireGuard).
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        let mut raw = decode32(text)?;
        let key = Self(clamp(raw));
        raw.zeroize();
        Ok(key)
    }

    /// The 44-character base64 form, as `wg genkey` prints it.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The raw (clamped) bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The matching public key (`wg pubkey`).
    pub fn public_key(&self) -> PublicKey {
        PublicKey(MontgomeryPoint::mul_base_clamped(self.0).0)
    }
}

impl Drop for PrivateKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(..)")
    }
}

/// An X25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PublicKey([u8; KEY_LEN]);

impl PublicKey {
    /// From raw bytes.
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// Parse the base64 form (surrounding whitespace ignored).
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        decode32(text).map(Self)
    }

    /// The 44-character base64 form, as `wg pubkey` prints it.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

/// The optional symmetric key mixed into the handshake (`wg genpsk`): 32 random bytes.
/// Without one the handshake uses 32 zero bytes, as WireGuard does. Zeroed when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct PresharedKey([u8; KEY_LEN]);

impl PresharedKey {
    /// A new random key.
    pub fn generate(rng: &mut impl CryptoRngCore) -> Self {
        let mut k = [0u8; KEY_LEN];
        rng.fill_bytes(&mut k);
        Self(k)
    }

    /// From raw bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// Parse the base64 form.
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        decode32(text).map(Self)
    }

    /// The base64 form.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl Drop for PresharedKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for PresharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PresharedKey(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 7748 section 6.1 (X25519 Diffie-Hellman test vector): Alice's keys.
    const ALICE_PRIV_HEX: &str = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a";
    const ALICE_PUB_HEX: &str = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a";

    fn hex32(s: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0);
        }
        out
    }

    #[test]
    fn rfc7748_public_key() {
        let k = PrivateKey::from_bytes(hex32(ALICE_PRIV_HEX));
        assert_eq!(k.public_key().as_bytes(), &hex32(ALICE_PUB_HEX));
    }

    #[test]
    fn base64_round_trip_is_wg_format() {
        let k = PrivateKey::from_bytes(hex32(ALICE_PRIV_HEX));
        let text = k.to_base64();
        assert_eq!(text.len(), 44);
        assert!(text.ends_with('='));
        assert_eq!(
            PrivateKey::from_base64(&format!("  {text}\n")),
            Ok(k.clone())
        );
        let p = k.public_key();
        assert_eq!(PublicKey::from_base64(&p.to_base64()), Ok(p));
        // `wg pubkey` of RFC 7748 Alice, computed independently: base64 of ALICE_PUB_HEX.
        assert_eq!(
            p.to_base64(),
            "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo="
        );
    }

    #[test]
    fn generated_keys_are_clamped_and_distinct() {
        let mut rng = rand_core::OsRng;
        let a = PrivateKey::generate(&mut rng);
        let b = PrivateKey::generate(&mut rng);
        assert_ne!(a, b);
        for k in [&a, &b] {
            let raw = k.as_bytes();
            assert_eq!(raw[0] & 7, 0);
            assert_eq!(raw[31] & 0xc0, 0x40);
        }
        // An unclamped input is clamped on parse, as wg does.
        let unclamped = STANDARD.encode([0xffu8; 32]);
        let k = PrivateKey::from_base64(&unclamped).map(|k| *k.as_bytes());
        assert_eq!(k.map(|k| (k[0], k[31])), Ok((0xf8, 0x7f)));
    }

    #[test]
    fn bad_keys_are_errors() {
        assert_eq!(PublicKey::from_base64("not base64!"), Err(KeyError::Base64));
        assert_eq!(
            PublicKey::from_base64(&STANDARD.encode([1u8; 31])),
            Err(KeyError::Length(31))
        );
        assert_eq!(
            PublicKey::from_base64(&STANDARD.encode([1u8; 33])),
            Err(KeyError::Length(33))
        );
        assert!(PublicKey::from_base64(&"A".repeat(10_000)).is_err());
        assert_eq!(PublicKey::from_base64(""), Err(KeyError::Length(0)));
        assert_eq!(
            format!("{:?}", PrivateKey::from_bytes([7; 32])),
            "PrivateKey(..)"
        );
    }
}
