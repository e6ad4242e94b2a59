//! The sealed (version 4) datagram: byte layouts and the transport AEAD.
//!
//! Every sealed datagram starts with `4, kind`. Integers are big-endian like the rest of
//! the wire format; only the AEAD nonce is little-endian (see [`nonce`]).
//!
//! ```text
//! transport (kind 0x10 + t or 0x20 + t), 24 + plaintext bytes
//!   0       4 (version)
//!   1       kind: 0x10 + the user's type t (0..=15; braid's message type, see
//!           `wire::folded`) when sealed with ChaCha20-Poly1305, 0x20 + t with
//!           AES-256-GCM ([`super::Cipher`]); an empty transport datagram is a keepalive
//!   2..4    receiver index, low 16 bits
//!   4..8    counter, low 32 bits (the receiver takes the full 64-bit counter nearest
//!           to its replay window's top: `expand_counter`)
//!   8..n-16   ciphertext (empty: keepalive)
//!   n-16..n   tag; associated data = bytes 0..8; nonce from the full counter
//!
//! initiation (kind 1), 148 bytes
//!   0..4    4, 1, 0, 0
//!   4..8    sender index
//!   8..116  Noise IKpsk2 message 1: e (32) | s sealed (48) | TAI64N timestamp sealed (28)
//!   116..132 mac1 = MAC(HASH("mac1----" | responder public key), bytes 0..116)
//!   132..148 mac2 = MAC(cookie, bytes 0..132), or zeros without a cookie
//!
//! response (kind 2), 92 bytes
//!   0..4    4, 2, 0, 0
//!   4..8    receiver index (the initiator's sender index)
//!   8..12   sender index
//!   12..60  Noise IKpsk2 message 2: e (32) | empty payload sealed (16)
//!   60..76  mac1 = MAC(HASH("mac1----" | initiator public key), bytes 0..60)
//!   76..92  mac2 (always zeros: responses are not cookie-checked)
//!
//! cookie reply (kind 3), 64 bytes
//!   0..4    4, 3, 0, 0
//!   4..8    receiver index (the initiation's sender index)
//!   8..32   random 24-byte nonce
//!   32..64  XChaCha20-Poly1305(HASH("cookie--" | responder public key), nonce,
//!           cookie (16 bytes), associated data = the initiation's mac1)
//! ```

use std::sync::Arc;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};

use super::Cipher;

/// The version byte of every sealed datagram ([`crate::wire::SEALED_VERSION`]).
pub const VERSION: u8 = crate::wire::SEALED_VERSION;
/// Bytes of the transport header (the associated data).
pub const HEADER_LEN: usize = 8;
/// Bytes of the tag (Poly1305 or GHASH).
pub const TAG_LEN: usize = 16;
/// Bytes a sealed transport datagram adds to its plaintext.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// A keepalive: a transport datagram with an empty plaintext.
pub const KEEPALIVE_LEN: usize = OVERHEAD;
/// Bytes of a handshake initiation.
pub const INITIATION_LEN: usize = 148;
/// Bytes of a handshake response.
pub const RESPONSE_LEN: usize = 92;
/// Bytes of a cookie reply.
pub const COOKIE_REPLY_LEN: usize = 64;
/// Bytes of a MAC (mac1, mac2, cookie).
pub const MAC_LEN: usize = 16;

/// Noise message 1 inside an initiation.
pub(crate) const INIT_NOISE: core::ops::Range<usize> = 8..116;
/// Noise message 2 inside a response.
pub(crate) const RESP_NOISE: core::ops::Range<usize> = 12..60;
/// Payload of Noise message 1: a TAI64N timestamp.
pub(crate) const TIMESTAMP_LEN: usize = 12;

/// Kind byte of a ChaCha20-Poly1305 transport datagram of user type 0 (a keepalive when
/// empty); one of user type `t` has kind `TRANSPORT + t`, and with AES-256-GCM
/// `0x20 + t` ([`Cipher`]).
pub const TRANSPORT: u8 = 0x10;
/// The largest user type a transport datagram carries (the low 4 bits of its kind).
pub const MAX_USER_TYPE: u8 = 0x0f;

/// What a sealed datagram carries (byte 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Encrypted bytes of the user's (kinds `0x10..=0x2f`: the cipher's base + user type).
    Transport = TRANSPORT,
    /// Noise message 1.
    Initiation = 1,
    /// Noise message 2.
    Response = 2,
    /// A cookie for a responder under load.
    CookieReply = 3,
}

impl Kind {
    /// From the kind byte.
    pub fn from_byte(b: u8) -> Option<Kind> {
        match b {
            TRANSPORT..=0x2f => Some(Kind::Transport),
            1 => Some(Kind::Initiation),
            2 => Some(Kind::Response),
            3 => Some(Kind::CookieReply),
            _ => None,
        }
    }
}

/// The 12-byte AEAD nonce for `counter`: four zero bytes, then the counter
/// little-endian (as WireGuard and the Noise ChaChaPoly cipher). The counter travels
/// big-endian in the header; only the nonce uses this layout.
pub fn nonce(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    n
}

pub(crate) fn read_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

/// Write `4, kind, 0, 0` and `index` at 4..8 (handshake messages). `b` must hold 8
/// bytes.
pub(crate) fn write_prefix(b: &mut [u8], kind: Kind, index: u32) {
    if let Some(h) = b.get_mut(..8) {
        h[0] = VERSION;
        h[1] = kind as u8;
        h[2] = 0;
        h[3] = 0;
        h[4..8].copy_from_slice(&index.to_be_bytes());
    }
}

/// Write a transport header: the cipher and `user_type` (its low 4 bits) in the kind, the
/// low 16 bits of `receiver`, the low 32 bits of `counter`.
pub fn write_transport_header(
    b: &mut [u8; HEADER_LEN],
    cipher: Cipher,
    user_type: u8,
    receiver: u32,
    counter: u64,
) {
    b[0] = VERSION;
    b[1] = cipher.kind_base() | (user_type & MAX_USER_TYPE);
    b[2..4].copy_from_slice(&(receiver as u16).to_be_bytes());
    b[4..8].copy_from_slice(&(counter as u32).to_be_bytes());
}

/// A transport header's fields as sent: user type, receiver index (low 16 bits), counter
/// (low 32 bits). `None` if `b` is not a transport datagram's header.
pub fn read_transport_header(b: &[u8]) -> Option<(u8, u16, u32)> {
    let h = b.get(..HEADER_LEN)?;
    if h[0] != VERSION || Kind::from_byte(h[1]) != Some(Kind::Transport) {
        return None;
    }
    Some((
        h[1] & MAX_USER_TYPE,
        u16::from_be_bytes([h[2], h[3]]),
        u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
    ))
}

/// The 64-bit value with low 32 bits `low` nearest to `reference` (modulo 2^64): how a
/// receiver rebuilds a counter from its low 32 bits, with its replay window's top (the
/// highest counter accepted, plus one) as `reference`. Unambiguous while the sender is
/// less than 2^31 datagrams ahead of, or behind, the window's top; the replay window
/// (at most 2^22 counters) refuses anything further behind anyway, and a wrong guess
/// only fails the tag (the nonce is the full counter).
pub fn expand_counter(reference: u64, low: u32) -> u64 {
    crate::wire::nearest(reference, u64::from(low), 32)
}

/// One direction's transport key: the AEAD keys of both ciphers (a receiver opens
/// either), and the cipher this end seals with.
///
/// The AEADs are ring's (the ChaCha20-Poly1305 one is the same RFC 8439 construction as
/// the `chacha20poly1305` crate, which the tests check it against byte for byte): its
/// assembly is about four times as fast here (0.8 µs against 3.0 µs to seal 1400 bytes
/// on this project's VM), and its AES-256-GCM with VAES three times as fast again
/// (0.3 µs). ring does not wipe the keys when they are dropped; the Noise handshake
/// state (snow) still does.
pub struct TransportKey {
    chacha: LessSafeKey,
    aes: LessSafeKey,
    seal_with: Cipher,
}

impl core::fmt::Debug for TransportKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "TransportKey({}, ..)", self.seal_with)
    }
}

/// The transport AEAD failed: wrong key, altered bytes or a buffer too short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AeadError;

impl TransportKey {
    /// From the 32 raw bytes of a Noise split; seals with `seal_with`.
    pub fn new(key: &[u8; 32], seal_with: Cipher) -> Self {
        // A 32-byte key is the only thing `UnboundKey::new` checks for these algorithms.
        let chacha = UnboundKey::new(&CHACHA20_POLY1305, key)
            .unwrap_or_else(|_| unreachable!("ChaCha20-Poly1305 takes 32-byte keys"));
        let mut aes_key = Cipher::aes_key(key);
        let aes = UnboundKey::new(&AES_256_GCM, &aes_key)
            .unwrap_or_else(|_| unreachable!("AES-256-GCM takes 32-byte keys"));
        zeroize::Zeroize::zeroize(&mut aes_key);
        Self {
            chacha: LessSafeKey::new(chacha),
            aes: LessSafeKey::new(aes),
            seal_with,
        }
    }

    /// The cipher this key seals with.
    pub fn cipher(&self) -> Cipher {
        self.seal_with
    }

    fn aead(&self, cipher: Cipher) -> &LessSafeKey {
        match cipher {
            Cipher::ChaCha20Poly1305 => &self.chacha,
            Cipher::Aes256Gcm => &self.aes,
        }
    }

    /// Seal in place: `buf[HEADER_LEN..HEADER_LEN + plaintext_len]` holds the plaintext;
    /// writes the header (with `user_type`) before it and the tag after it and returns the
    /// datagram length (`plaintext_len + OVERHEAD`). No allocation.
    pub fn seal(
        &self,
        (user_type, receiver, counter): (u8, u32, u64),
        buf: &mut [u8],
        plaintext_len: usize,
    ) -> Result<usize, AeadError> {
        let total = write_header(
            buf,
            self.seal_with,
            (user_type, receiver, counter),
            plaintext_len,
        )?;
        self.seal_written(counter, buf.get_mut(..total).ok_or(AeadError)?)?;
        Ok(total)
    }

    /// Encrypt and tag a datagram whose header is written (`datagram`: header, plaintext,
    /// then [`TAG_LEN`] bytes for the tag), in place.
    fn seal_written(&self, counter: u64, datagram: &mut [u8]) -> Result<(), AeadError> {
        let body_len = datagram.len().checked_sub(OVERHEAD).ok_or(AeadError)?;
        let (head, rest) = datagram.split_at_mut(HEADER_LEN);
        let (body, tag_out) = rest.split_at_mut(body_len);
        let tag = self
            .aead(self.seal_with)
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce(counter)),
                Aad::from(&head[..]),
                body,
            )
            .map_err(|_| AeadError)?;
        tag_out.copy_from_slice(tag.as_ref());
        Ok(())
    }

    /// Open a whole transport datagram in place (header included) whose full counter is
    /// `counter` (rebuilt from the header's low 32 bits: [`expand_counter`]), with the
    /// cipher its kind byte names; on success the plaintext is
    /// `datagram[HEADER_LEN..len - TAG_LEN]`. On failure the buffer holds garbage where
    /// the ciphertext was.
    pub fn open(&self, counter: u64, datagram: &mut [u8]) -> Result<(), AeadError> {
        if datagram.len() < OVERHEAD {
            return Err(AeadError);
        }
        let cipher = Cipher::from_kind(datagram[1]).ok_or(AeadError)?;
        let (head, rest) = datagram.split_at_mut(HEADER_LEN);
        self.aead(cipher)
            .open_in_place(
                Nonce::assume_unique_for_key(nonce(counter)),
                Aad::from(&head[..]),
                rest,
            )
            .map(|_| ())
            .map_err(|_| AeadError)
    }
}

/// Write the transport header in front of `plaintext_len` bytes of plaintext at
/// `buf[HEADER_LEN..]`; the sealed datagram's length, if `buf` holds it.
fn write_header(
    buf: &mut [u8],
    cipher: Cipher,
    (user_type, receiver, counter): (u8, u32, u64),
    plaintext_len: usize,
) -> Result<usize, AeadError> {
    let total = plaintext_len.checked_add(OVERHEAD).ok_or(AeadError)?;
    if buf.len() < total {
        return Err(AeadError);
    }
    let head: &mut [u8; HEADER_LEN] = buf
        .get_mut(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(AeadError)?;
    write_transport_header(head, cipher, user_type, receiver, counter);
    Ok(total)
}

/// A transport datagram numbered and laid out but not yet encrypted: what
/// [`crate::crypto::Tunnel::seal_deferred`] hands out so that the AEAD, the costly part,
/// can run on another thread. Its counter is spent: seal the datagram (or drop it), never
/// send it as it is. Holds the session's send key, not a copy of it.
#[must_use = "the datagram is plaintext until sealed"]
pub struct PendingSeal {
    key: Arc<TransportKey>,
    counter: u64,
    len: usize,
}

impl core::fmt::Debug for PendingSeal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PendingSeal")
            .field("counter", &self.counter)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl PendingSeal {
    /// Numbers and lays out one datagram: its header written into `buf` in front of the
    /// plaintext, the AEAD left to [`PendingSeal::seal`].
    pub(crate) fn new(
        key: &Arc<TransportKey>,
        header: (u8, u32, u64),
        buf: &mut [u8],
        plaintext_len: usize,
    ) -> Result<PendingSeal, AeadError> {
        let len = write_header(buf, key.seal_with, header, plaintext_len)?;
        Ok(PendingSeal {
            key: Arc::clone(key),
            counter: header.2,
            len,
        })
    }

    /// The sealed datagram's length (header, ciphertext, tag).
    pub fn datagram_len(&self) -> usize {
        self.len
    }

    /// Encrypt and tag `datagram` in place: the [`PendingSeal::datagram_len`] bytes the endpoint
    /// laid out (a longer slice is cut to them). On any thread.
    pub fn seal(&self, datagram: &mut [u8]) -> Result<(), AeadError> {
        let d = datagram.get_mut(..self.len).ok_or(AeadError)?;
        self.key.seal_written(self.counter, d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonce_layout_is_pinned() {
        assert_eq!(
            nonce(0x0102_0304_0506_0708),
            [0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]
        );
        assert_eq!(nonce(0), [0; 12]);
    }

    #[test]
    fn header_layout_is_pinned() {
        let mut h = [0xffu8; HEADER_LEN];
        let chacha = Cipher::ChaCha20Poly1305;
        write_transport_header(&mut h, chacha, 5, 0xaabb_ccdd, 0x0102_0304_0506_0708);
        assert_eq!(h, [4, 0x15, 0xcc, 0xdd, 5, 6, 7, 8]);
        assert_eq!(read_transport_header(&h), Some((5, 0xccdd, 0x0506_0708)));
        write_transport_header(&mut h, Cipher::Aes256Gcm, 5, 0xaabb_ccdd, 0x0102_0304);
        assert_eq!(h, [4, 0x25, 0xcc, 0xdd, 1, 2, 3, 4]);
        assert_eq!(read_transport_header(&h), Some((5, 0xccdd, 0x0102_0304)));
        // Only the low 4 bits of the user type.
        write_transport_header(&mut h, chacha, 0xf3, 1, 2);
        assert_eq!(h, [4, 0x13, 0, 1, 0, 0, 0, 2]);
        for bad in [[2, 0x10], [4, 0], [4, 1], [4, 0x30], [4, 0x0f]] {
            let mut b = h;
            b[..2].copy_from_slice(&bad);
            assert_eq!(read_transport_header(&b), None, "{bad:?}");
        }
        assert_eq!(read_transport_header(&h[..7]), None);
        assert_eq!(OVERHEAD, 24);
        assert_eq!(
            INITIATION_LEN,
            8 + 32 + (32 + 16) + (TIMESTAMP_LEN + 16) + 2 * MAC_LEN
        );
        assert_eq!(INIT_NOISE.len(), 108);
        assert_eq!(RESPONSE_LEN, 12 + 32 + 16 + 2 * MAC_LEN);
        assert_eq!(RESP_NOISE.len(), 48);
        assert_eq!(COOKIE_REPLY_LEN, 8 + 24 + MAC_LEN + 16);
    }

    #[test]
    fn counters_expand_from_their_low_32_bits() {
        assert_eq!(expand_counter(0, 0), 0);
        assert_eq!(expand_counter(0, 5), 5);
        assert_eq!(expand_counter(0xffff_fff0, 3), 0x1_0000_0003);
        assert_eq!(expand_counter(0x1_0000_0003, 0xffff_fff0), 0xffff_fff0);
        let top = 0x0123_4567_89ab_cdef_u64;
        for d in [0u64, 1, 1000, (1 << 22), (1 << 31) - 1] {
            assert_eq!(expand_counter(top, (top + d) as u32), top + d);
            assert_eq!(expand_counter(top, (top - d) as u32), top - d);
        }
    }

    const PLAIN_LEN: usize = 100;

    /// Seal 100 bytes with `key` as user type 3 to receiver 42 with counter 9; check the
    /// header (kind `kind`), that the ciphertext and tag are what `reference` (an
    /// independent implementation's `encrypt(plaintext, associated data)`) makes, that
    /// `openers` all open it, and that every byte is authenticated. The sealed datagram.
    fn sealed_as_reference(
        key: &TransportKey,
        kind: u8,
        reference: impl Fn(&[u8], &[u8]) -> Vec<u8>,
        openers: &[&TransportKey],
    ) -> Vec<u8> {
        let plain: Vec<u8> = (0..PLAIN_LEN as u8).collect();
        let mut buf = vec![0u8; 200];
        buf[HEADER_LEN..HEADER_LEN + PLAIN_LEN].copy_from_slice(&plain);
        let n = key.seal((3, 42, 9), &mut buf, PLAIN_LEN).unwrap_or(0);
        assert_eq!(n, PLAIN_LEN + OVERHEAD);
        assert_eq!(&buf[..HEADER_LEN], &[4, kind, 0, 42, 0, 0, 0, 9]);
        assert_eq!(
            &buf[HEADER_LEN..n],
            &reference(&plain, &buf[..HEADER_LEN])[..]
        );
        let sealed = buf[..n].to_vec();
        for opener in openers {
            let mut ok = sealed.clone();
            assert_eq!(opener.open(9, &mut ok), Ok(()));
            assert_eq!(&ok[HEADER_LEN..n - TAG_LEN], &plain[..]);
        }
        for i in 0..n {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            assert_eq!(key.open(9, &mut bad), Err(AeadError), "byte {i}");
        }
        sealed
    }

    /// RFC 8439 section 2.8.2's AEAD vector run through `seal` would need its own nonce
    /// layout; instead pin that our seal (ring) equals an independent implementation's
    /// (the RustCrypto crate's) plain `encrypt` with our nonce and header as associated
    /// data, and that every byte is authenticated.
    #[test]
    fn seal_open_and_every_byte_is_authenticated() {
        use chacha20poly1305::aead::{Aead, Payload};
        use chacha20poly1305::{ChaCha20Poly1305, KeyInit, Nonce};
        let k = [7u8; 32];
        let key = TransportKey::new(&k, Cipher::ChaCha20Poly1305);
        let reference = |msg: &[u8], aad: &[u8]| {
            ChaCha20Poly1305::new((&k).into())
                .encrypt(Nonce::from_slice(&nonce(9)), Payload { msg, aad })
                .unwrap_or_default()
        };
        // An end that seals with AES-256-GCM opens it too.
        let aes = TransportKey::new(&k, Cipher::Aes256Gcm);
        let sealed = sealed_as_reference(&key, 0x13, reference, &[&key, &aes]);
        let n = sealed.len();
        // The nonce is the full counter: the same bytes under another counter with the
        // same low 32 bits do not open.
        assert_eq!(key.open(9 + (1 << 32), &mut sealed.clone()), Err(AeadError));
        assert_eq!(key.open(9, &mut sealed.clone()[..n - 1]), Err(AeadError));
        assert_eq!(key.open(9, &mut [0u8; 23]), Err(AeadError));
        assert_eq!(key.seal((0, 1, 1), &mut [0u8; 32], 9), Err(AeadError));
        assert_eq!(
            TransportKey::new(&[8u8; 32], Cipher::ChaCha20Poly1305).open(9, &mut sealed.clone()),
            Err(AeadError)
        );
    }

    /// AES-256-GCM as the `aes-gcm` crate computes it, with the derived key; a key of
    /// either choice opens both; every byte is authenticated, the kind byte included (a
    /// datagram relabelled with the other cipher does not open).
    #[test]
    fn aes_seals_with_the_derived_key_and_either_key_opens_both() {
        use aes_gcm::aead::{Aead, KeyInit, Payload};
        use aes_gcm::{Aes256Gcm, Nonce};
        let k = [7u8; 32];
        let aes = TransportKey::new(&k, Cipher::Aes256Gcm);
        let chacha = TransportKey::new(&k, Cipher::ChaCha20Poly1305);
        assert_eq!(aes.cipher(), Cipher::Aes256Gcm);
        let reference = |msg: &[u8], aad: &[u8]| {
            Aes256Gcm::new((&Cipher::aes_key(&k)).into())
                .encrypt(Nonce::from_slice(&nonce(9)), Payload { msg, aad })
                .unwrap_or_default()
        };
        let sealed = sealed_as_reference(&aes, 0x23, reference, &[&aes, &chacha]);
        let mut relabelled = sealed.clone();
        relabelled[1] = 0x13;
        assert_eq!(aes.open(9, &mut relabelled), Err(AeadError));
    }
}
