//! WireGuard's MAC and cookie scheme (whitepaper §5.4.4 and §5.4.7), adapted to braid's
//! handshake layout (see [`super::envelope`]).
//!
//! - **mac1** = `MAC(HASH("mac1----" ‖ receiver's public key), message up to mac1)`. Only
//!   a sender that knows the receiver's public key can produce it, and checking it costs
//!   one BLAKE2s over ~116 bytes: it is checked first, before any state is touched, any
//!   allocation or any Diffie-Hellman.
//! - **cookie** = `MAC(secret, source IP ‖ source port)`, the secret being 32 random bytes
//!   replaced every [`COOKIE_SECRET_LIFETIME`].
//! - **mac2** = `MAC(cookie, message up to mac2)`. A responder under load does Noise only
//!   for initiations with a valid mac2, i.e. from a source that proved it receives
//!   datagrams at its address; to others it sends a cookie reply.
//!
//! `MAC` is keyed BLAKE2s with a 16-byte output, `HASH` is BLAKE2s-256.

use super::envelope::{self, Kind, COOKIE_REPLY_LEN, MAC_LEN};
use super::keys::PublicKey;
use super::rng::Rng;
use crate::Instant;
use blake2::digest::consts::U16;
use blake2::digest::{FixedOutput, Mac};
use blake2::{Blake2s256, Blake2sMac, Digest};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{KeyInit, Tag, XChaCha20Poly1305, XNonce};
use core::time::Duration;
use std::net::{IpAddr, SocketAddr};

/// How long a cookie secret (and so a cookie) is valid.
pub(crate) const COOKIE_SECRET_LIFETIME: Duration = Duration::from_secs(120);

const LABEL_MAC1: &[u8] = b"mac1----";
const LABEL_COOKIE: &[u8] = b"cookie--";

type Mac16 = Blake2sMac<U16>;

fn hash(label: &[u8], key: &PublicKey) -> [u8; 32] {
    let mut h = Blake2s256::new();
    h.update(label);
    h.update(key.as_bytes());
    h.finalize().into()
}

/// Keyed BLAKE2s-128 of `parts`. Keys are at most 32 bytes, which BLAKE2s accepts.
pub(crate) fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    match <Mac16 as Mac>::new_from_slice(key) {
        Ok(mut m) => {
            for p in parts {
                Mac::update(&mut m, p);
            }
            m.finalize_fixed().into()
        }
        Err(_) => [0u8; MAC_LEN],
    }
}

/// Constant-time comparison of two MACs.
pub(crate) fn mac_eq(a: &[u8; MAC_LEN], b: &[u8]) -> bool {
    if b.len() != MAC_LEN {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    diff == 0
}

/// The keys derived from one public key: checks mac1 of messages *to* that key and
/// decrypts cookies *from* it.
#[derive(Clone)]
pub struct MacKeys {
    mac1_key: [u8; 32],
    cookie_key: [u8; 32],
}

impl MacKeys {
    /// For messages sent to the owner of `key`.
    pub fn new(key: &PublicKey) -> Self {
        Self {
            mac1_key: hash(LABEL_MAC1, key),
            cookie_key: hash(LABEL_COOKIE, key),
        }
    }

    /// mac1 of `msg` (the bytes before the mac1 field).
    pub fn mac1(&self, msg: &[u8]) -> [u8; MAC_LEN] {
        mac(&self.mac1_key, &[msg])
    }

    /// Check the mac1 field of a whole handshake message whose last 32 bytes are
    /// mac1 and mac2.
    pub fn check_mac1(&self, msg: &[u8]) -> bool {
        let Some(cut) = msg.len().checked_sub(2 * MAC_LEN) else {
            return false;
        };
        let (body, macs) = msg.split_at(cut);
        let (mac1, _mac2) = macs.split_at(MAC_LEN);
        mac_eq(&self.mac1(body), mac1)
    }

    /// Write mac1 and mac2 (zeros without a cookie) into the last 32 bytes of `msg`.
    pub fn stamp(&self, msg: &mut [u8], cookie: Option<&[u8; MAC_LEN]>) {
        let Some(cut) = msg.len().checked_sub(2 * MAC_LEN) else {
            return;
        };
        let m1 = self.mac1(msg.split_at(cut).0);
        if let Some(d) = msg.get_mut(cut..cut + MAC_LEN) {
            d.copy_from_slice(&m1);
        }
        let m2 = match cookie {
            Some(c) => mac(c, &[msg.split_at(cut + MAC_LEN).0]),
            None => [0u8; MAC_LEN],
        };
        if let Some(d) = msg.get_mut(cut + MAC_LEN..cut + 2 * MAC_LEN) {
            d.copy_from_slice(&m2);
        }
    }

    /// Decrypt a cookie reply sent by the owner of this key in answer to an initiation
    /// whose mac1 was `mac1`.
    pub fn open_cookie(&self, reply: &[u8], mac1: &[u8; MAC_LEN]) -> Option<[u8; MAC_LEN]> {
        if reply.len() != COOKIE_REPLY_LEN {
            return None;
        }
        let aead = XChaCha20Poly1305::new((&self.cookie_key).into());
        let nonce = XNonce::clone_from_slice(reply.get(8..32)?);
        let mut cookie: [u8; MAC_LEN] = reply.get(32..48)?.try_into().ok()?;
        let tag = Tag::clone_from_slice(reply.get(48..64)?);
        aead.decrypt_in_place_detached(&nonce, mac1, &mut cookie, &tag)
            .ok()?;
        Some(cookie)
    }
}

fn address_bytes(src: SocketAddr, out: &mut [u8; 18]) -> usize {
    let port = src.port().to_be_bytes();
    match src.ip() {
        IpAddr::V4(a) => {
            out[..4].copy_from_slice(&a.octets());
            out[4..6].copy_from_slice(&port);
            6
        }
        IpAddr::V6(a) => {
            out[..16].copy_from_slice(&a.octets());
            out[16..18].copy_from_slice(&port);
            18
        }
    }
}

/// The responder's side: our own mac keys, the rotating secret, cookie replies.
pub(crate) struct CookieChecker {
    keys: MacKeys,
    secret: [u8; 32],
    secret_born: Option<Instant>,
}

impl CookieChecker {
    /// For a responder whose public key is `ours`.
    pub(crate) fn new(ours: &PublicKey) -> Self {
        Self {
            keys: MacKeys::new(ours),
            secret: [0u8; 32],
            secret_born: None,
        }
    }

    /// Our mac keys (to check mac1 of incoming messages).
    pub(crate) fn keys(&self) -> &MacKeys {
        &self.keys
    }

    fn cookie(&mut self, now: Instant, src: SocketAddr, rng: &mut Rng) -> [u8; MAC_LEN] {
        let stale = self
            .secret_born
            .is_none_or(|t| now.saturating_since(t) >= COOKIE_SECRET_LIFETIME);
        if stale {
            rng.fill(&mut self.secret);
            self.secret_born = Some(now);
        }
        let mut a = [0u8; 18];
        let n = address_bytes(src, &mut a);
        let (addr, _) = a.split_at(n);
        mac(&self.secret, &[addr])
    }

    /// Does the initiation `msg` carry a valid mac2 for `src`?
    pub(crate) fn check_mac2(
        &mut self,
        now: Instant,
        src: SocketAddr,
        msg: &[u8],
        rng: &mut Rng,
    ) -> bool {
        let Some(cut) = msg.len().checked_sub(MAC_LEN) else {
            return false;
        };
        let cookie = self.cookie(now, src, rng);
        let (body, mac2) = msg.split_at(cut);
        let want = mac(&cookie, &[body]);
        mac_eq(&want, mac2)
    }

    /// Write a cookie reply to the initiation in `msg` (from `src`) over `msg` itself,
    /// returning its length ([`COOKIE_REPLY_LEN`], smaller than the initiation).
    pub(crate) fn write_reply(
        &mut self,
        now: Instant,
        src: SocketAddr,
        msg: &mut [u8],
        rng: &mut Rng,
    ) -> usize {
        if msg.len() < envelope::INITIATION_LEN {
            return 0;
        }
        let sender = envelope::read_u32(msg, 4);
        let mut mac1 = [0u8; MAC_LEN];
        let cut = envelope::INITIATION_LEN - 2 * MAC_LEN;
        mac1.copy_from_slice(msg.get(cut..cut + MAC_LEN).unwrap_or(&[0u8; MAC_LEN]));
        let mut cookie = self.cookie(now, src, rng);
        let mut nonce = [0u8; 24];
        rng.fill(&mut nonce);
        let aead = XChaCha20Poly1305::new((&self.keys.cookie_key).into());
        let Ok(tag) =
            aead.encrypt_in_place_detached(XNonce::from_slice(&nonce), &mac1, &mut cookie)
        else {
            return 0;
        };
        envelope::write_prefix(msg, Kind::CookieReply, sender);
        if let Some(out) = msg.get_mut(8..COOKIE_REPLY_LEN) {
            out[..24].copy_from_slice(&nonce);
            out[24..40].copy_from_slice(&cookie);
            out[40..56].copy_from_slice(&tag);
        }
        COOKIE_REPLY_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::keys::PrivateKey;

    #[test]
    fn mac1_binds_the_receiver_key_and_every_byte() {
        let a = PrivateKey::from_bytes([1; 32]).public_key();
        let b = PrivateKey::from_bytes([2; 32]).public_key();
        let mut msg = [9u8; 148];
        MacKeys::new(&a).stamp(&mut msg, None);
        assert!(MacKeys::new(&a).check_mac1(&msg));
        assert!(!MacKeys::new(&b).check_mac1(&msg));
        assert_eq!(&msg[132..], &[0u8; 16]);
        for i in 0..132 {
            let mut m = msg;
            m[i] ^= 0x80;
            assert!(!MacKeys::new(&a).check_mac1(&m), "byte {i}");
        }
        assert!(!MacKeys::new(&a).check_mac1(&msg[..20]));
    }

    #[test]
    fn cookie_round_trip_and_mac2() {
        let responder = PrivateKey::from_bytes([3; 32]).public_key();
        let keys = MacKeys::new(&responder);
        let mut checker = CookieChecker::new(&responder);
        let mut rng = Rng::new([5; 32]);
        let src: SocketAddr = "192.0.2.1:4000"
            .parse()
            .unwrap_or(SocketAddr::from(([0; 4], 0)));
        let other: SocketAddr = "192.0.2.1:4001"
            .parse()
            .unwrap_or(SocketAddr::from(([0; 4], 0)));
        let t0 = Instant::ZERO;

        let mut init = [0u8; 148];
        init[0] = 2;
        init[1] = 1;
        init[4..8].copy_from_slice(&77u32.to_be_bytes());
        keys.stamp(&mut init, None);
        assert!(!checker.check_mac2(t0, src, &init, &mut rng));
        let mac1: [u8; 16] = init[116..132].try_into().unwrap_or([0; 16]);

        let mut reply = init;
        let n = checker.write_reply(t0, src, &mut reply, &mut rng);
        assert_eq!(n, COOKIE_REPLY_LEN);
        assert!(n < init.len());
        assert_eq!(&reply[..8], &[4, 3, 0, 0, 0, 0, 0, 77]);
        let cookie = keys.open_cookie(&reply[..n], &mac1);
        assert!(cookie.is_some());
        // Wrong mac1 (a reply to some other initiation) does not open.
        assert_eq!(keys.open_cookie(&reply[..n], &[0; 16]), None);

        let mut again = init;
        keys.stamp(&mut again, cookie.as_ref());
        assert!(checker.check_mac2(t0 + Duration::from_secs(119), src, &again, &mut rng));
        // Bound to the source address and port.
        assert!(!checker.check_mac2(t0, other, &again, &mut rng));
        // The secret rotates after 120 s.
        assert!(!checker.check_mac2(t0 + Duration::from_secs(121), src, &again, &mut rng));
    }
}
