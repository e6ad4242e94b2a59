//! The transport AEADs a sealed datagram can use, and how each end picks the one it seals
//! with.
//!
//! Every end opens both; each seals with its own choice (`[bond] encryption`), and the
//! kind byte of every transport datagram says which it used (`0x10 + t`
//! ChaCha20-Poly1305, `0x20 + t` AES-256-GCM; [`super::envelope`]). So the two directions
//! may differ and nothing is negotiated. The handshake is always Noise's ChaChaPoly; only
//! transport datagrams change.
//!
//! Keys: ChaCha20-Poly1305 uses the 32-byte key of the Noise split as it is (as WireGuard
//! and earlier braid versions); AES-256-GCM uses a key derived from it,
//! `BLAKE2s-MAC-256(key = split key, "braid transport aes-256-gcm")`, so that no key is
//! used by two algorithms. The nonce (the 64-bit counter) is the session's and direction's
//! whatever the algorithm, so no (key, nonce) pair repeats.

use blake2::digest::{FixedOutput, KeyInit, Mac};
use blake2::Blake2sMac256;

/// A transport AEAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// ChaCha20-Poly1305 (RFC 8439): WireGuard's; fast everywhere in software.
    ChaCha20Poly1305,
    /// AES-256-GCM: several times faster where the CPU has AES and carry-less multiply
    /// instructions (x86 AES-NI and PCLMULQDQ, more with VAES; ARMv8 AES and PMULL), much
    /// slower where it has not.
    Aes256Gcm,
}

/// The label of the AES-256-GCM key derivation.
const AES_KEY_LABEL: &[u8] = b"braid transport aes-256-gcm";

impl Cipher {
    /// Every cipher, in the order the docs list them.
    pub const ALL: [Cipher; 2] = [Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm];

    /// The name in configs, logs and the status.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
            Cipher::Aes256Gcm => "aes-256-gcm",
        }
    }

    /// The cipher named `name` ([`Cipher::name`]).
    pub fn from_name(name: &str) -> Option<Cipher> {
        Cipher::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The faster one on this CPU: AES-256-GCM where it has AES and carry-less multiply
    /// instructions, ChaCha20-Poly1305 otherwise (what `encryption = "auto"` seals with).
    pub fn preferred() -> Cipher {
        if has_aes_instructions() {
            Cipher::Aes256Gcm
        } else {
            Cipher::ChaCha20Poly1305
        }
    }

    /// The kind byte of this cipher's transport datagram of user type 0.
    pub(crate) fn kind_base(self) -> u8 {
        match self {
            Cipher::ChaCha20Poly1305 => 0x10,
            Cipher::Aes256Gcm => 0x20,
        }
    }

    /// The cipher of a transport datagram's kind byte; `None` for any other kind.
    pub(crate) fn from_kind(kind: u8) -> Option<Cipher> {
        match kind & 0xf0 {
            0x10 => Some(Cipher::ChaCha20Poly1305),
            0x20 => Some(Cipher::Aes256Gcm),
            _ => None,
        }
    }

    /// The AES-256-GCM key that goes with the split key `key` (see the module docs).
    pub(crate) fn aes_key(key: &[u8; 32]) -> [u8; 32] {
        let mut mac = <Blake2sMac256 as KeyInit>::new(key.into());
        mac.update(AES_KEY_LABEL);
        mac.finalize_fixed().into()
    }
}

impl core::fmt::Display for Cipher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn has_aes_instructions() -> bool {
    std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
}

#[cfg(target_arch = "aarch64")]
fn has_aes_instructions() -> bool {
    std::arch::is_aarch64_feature_detected!("aes")
        && std::arch::is_aarch64_feature_detected!("pmull")
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn has_aes_instructions() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds_round_trip() {
        for c in Cipher::ALL {
            assert_eq!(Cipher::from_name(c.name()), Some(c));
            for t in 0..16 {
                assert_eq!(Cipher::from_kind(c.kind_base() + t), Some(c));
            }
        }
        assert_eq!(Cipher::from_name("aes"), None);
        for kind in [0u8, 1, 2, 3, 0x0f, 0x30, 0xff] {
            assert_eq!(Cipher::from_kind(kind), None, "{kind:#x}");
        }
    }

    /// The derivation is pinned (a change would make two versions' AES keys differ) and
    /// gives another key than the one it starts from.
    #[test]
    fn the_aes_key_is_derived_and_pinned() {
        let k = [7u8; 32];
        let a = Cipher::aes_key(&k);
        assert_ne!(a, k);
        assert_ne!(a, Cipher::aes_key(&[8u8; 32]));
        let hex: String = a.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, PINNED_AES_KEY);
    }

    /// Python: `hashlib.blake2s(b"braid transport aes-256-gcm", key=bytes([7] * 32)).hexdigest()`.
    const PINNED_AES_KEY: &str = "c58b2535c5eb17fef6eaf015b813bf7f2a5feb3ccf0920089a83109c559378cf";
}
