//! The Noise handshake messages: `Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s` through `snow`,
//! framed as in [`super::envelope`]. One round trip: the initiator knows the responder's
//! static key (IK), the optional preshared key is mixed in after message 2 (psk2), exactly
//! as WireGuard. Message 1 carries a TAI64N timestamp the responder uses to refuse a
//! replayed initiation.
//!
//! These functions build and read single messages; the timing and session rules are in
//! [`super::Tunnel`].

use super::cookie::MacKeys;
use super::envelope::{
    self, Kind, INITIATION_LEN, INIT_NOISE, RESPONSE_LEN, RESP_NOISE, TIMESTAMP_LEN,
};
use super::keys::{PresharedKey, PrivateKey, PublicKey};
use snow::params::NoiseParams;
use snow::{Builder, HandshakeState};

/// The Noise protocol name.
pub(super) const NOISE_PARAMS: &str = "Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
/// Mixed into every handshake so a braid handshake can never be confused with a
/// WireGuard one (or another protocol using the same pattern).
pub(super) const PROLOGUE: &[u8] = b"braid sealed v4";

/// A TAI64N label: 2^62 + 10 + seconds (big-endian) then nanoseconds (big-endian),
/// computed from Unix microseconds. Nanoseconds are rounded down to a multiple of 2^24
/// (16.8 ms) as WireGuard does, so the timestamp does not leak the clock finely; two
/// initiations less than that apart carry the same timestamp and the second is refused.
pub(super) fn tai64n(unix_micros: u64) -> [u8; TIMESTAMP_LEN] {
    let secs = unix_micros / 1_000_000;
    let nanos = ((unix_micros % 1_000_000) * 1000) as u32 & !((1u32 << 24) - 1);
    let mut out = [0u8; TIMESTAMP_LEN];
    out[..8].copy_from_slice(&(0x4000_0000_0000_000a_u64.wrapping_add(secs)).to_be_bytes());
    out[8..].copy_from_slice(&nanos.to_be_bytes());
    out
}

/// Why a handshake message was refused after its mac1 checked out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandshakeError {
    /// Noise decryption or DH failed (wrong keys, altered bytes).
    Failed,
    /// A valid initiation from a static key that is not our peer's.
    UnknownPeer,
}

/// The Noise parameters: a constant string, so parsing it either always works or never.
fn params() -> NoiseParams {
    NOISE_PARAMS
        .parse()
        .expect("NOISE_PARAMS names a pattern and primitives snow supports")
}

fn psk_bytes(psk: Option<&PresharedKey>) -> [u8; 32] {
    psk.map_or([0u8; 32], |p| *p.as_bytes())
}

/// Write a complete initiation into `out` and return the initiator's handshake state.
/// `out` is [`INITIATION_LEN`] bytes; mac1 is keyed with the responder's key, mac2 with
/// `cookie` if we hold a fresh one.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_initiation(
    local: &PrivateKey,
    peer: &PublicKey,
    psk: Option<&PresharedKey>,
    peer_macs: &MacKeys,
    sender_index: u32,
    timestamp: &[u8; TIMESTAMP_LEN],
    cookie: Option<&[u8; envelope::MAC_LEN]>,
    out: &mut [u8; INITIATION_LEN],
) -> Option<HandshakeState> {
    let psk = psk_bytes(psk);
    let mut hs = Builder::new(params())
        .local_private_key(local.as_bytes())
        .ok()?
        .remote_public_key(peer.as_bytes())
        .ok()?
        .psk(2, &psk)
        .ok()?
        .prologue(PROLOGUE)
        .ok()?
        .build_initiator()
        .ok()?;
    envelope::write_prefix(out, Kind::Initiation, sender_index);
    let n = hs.write_message(timestamp, out.get_mut(INIT_NOISE)?).ok()?;
    if n != INIT_NOISE.len() {
        return None;
    }
    peer_macs.stamp(out, cookie);
    Some(hs)
}

/// What a valid initiation told the responder.
pub(crate) struct ReadInitiation {
    pub state: HandshakeState,
    pub sender_index: u32,
    pub timestamp: [u8; TIMESTAMP_LEN],
}

/// Read an initiation whose length and mac1 were already checked. Does the DH.
pub(crate) fn read_initiation(
    local: &PrivateKey,
    peer: &PublicKey,
    psk: Option<&PresharedKey>,
    msg: &[u8],
) -> Result<ReadInitiation, HandshakeError> {
    let psk = psk_bytes(psk);
    let responder = || {
        Builder::new(params())
            .local_private_key(local.as_bytes())
            .ok()?
            .psk(2, &psk)
            .ok()?
            .prologue(PROLOGUE)
            .ok()?
            .build_responder()
            .ok()
    };
    let mut hs = responder().ok_or(HandshakeError::Failed)?;
    let noise = msg.get(INIT_NOISE).ok_or(HandshakeError::Failed)?;
    let mut payload = [0u8; 64];
    let n = hs
        .read_message(noise, &mut payload)
        .map_err(|_| HandshakeError::Failed)?;
    if hs.get_remote_static() != Some(peer.as_bytes().as_slice()) {
        return Err(HandshakeError::UnknownPeer);
    }
    let timestamp: [u8; TIMESTAMP_LEN] = payload
        .get(..n)
        .and_then(|p| p.try_into().ok())
        .ok_or(HandshakeError::Failed)?;
    Ok(ReadInitiation {
        state: hs,
        sender_index: envelope::read_u32(msg, 4),
        timestamp,
    })
}

/// Write the response to an initiation into `out` ([`RESPONSE_LEN`] bytes) and return
/// the responder's (send, receive) keys.
pub(crate) fn write_response(
    mut hs: HandshakeState,
    peer_macs: &MacKeys,
    receiver_index: u32,
    sender_index: u32,
    out: &mut [u8; RESPONSE_LEN],
) -> Option<([u8; 32], [u8; 32])> {
    envelope::write_prefix(out, Kind::Response, receiver_index);
    out[8..12].copy_from_slice(&sender_index.to_be_bytes());
    let n = hs.write_message(&[], out.get_mut(RESP_NOISE)?).ok()?;
    if n != RESP_NOISE.len() || !hs.is_handshake_finished() {
        return None;
    }
    peer_macs.stamp(out, None);
    let (i2r, r2i) = hs.dangerously_get_raw_split();
    Some((r2i, i2r))
}

/// Read a response (length, receiver index and mac1 already checked) and return the
/// initiator's (send, receive) keys. On failure `hs` is as it was (snow restores its
/// symmetric state, and message 2 begins by deriving a new cipher key from it), so a
/// forged response leaves the handshake able to read the real one.
pub(crate) fn read_response(
    hs: &mut HandshakeState,
    msg: &[u8],
) -> Result<([u8; 32], [u8; 32]), HandshakeError> {
    let noise = msg.get(RESP_NOISE).ok_or(HandshakeError::Failed)?;
    let mut payload = [0u8; 16];
    let n = hs
        .read_message(noise, &mut payload)
        .map_err(|_| HandshakeError::Failed)?;
    if n != 0 || !hs.is_handshake_finished() {
        return Err(HandshakeError::Failed);
    }
    let (i2r, r2i) = hs.dangerously_get_raw_split();
    Ok((i2r, r2i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tai64n_layout() {
        // 1 s and 500 ms after the Unix epoch.
        let t = tai64n(1_500_000);
        assert_eq!(&t[..8], &0x4000_0000_0000_000b_u64.to_be_bytes());
        // 500 000 000 ns rounded down to a multiple of 2^24.
        assert_eq!(u32::from_be_bytes([t[8], t[9], t[10], t[11]]), 486_539_264);
        // Ordering as bytes is ordering in time, at 16.8 ms granularity.
        assert!(tai64n(2_000_000) > tai64n(1_999_999));
        assert_eq!(tai64n(1_000_000), tai64n(1_016_000));
        assert!(tai64n(1_017_000) > tai64n(1_000_000));
    }

    #[test]
    fn one_round_trip_gives_matching_keys() {
        let (a, b) = (
            PrivateKey::from_bytes([1; 32]),
            PrivateKey::from_bytes([2; 32]),
        );
        let psk = PresharedKey::from_bytes([9; 32]);
        let b_macs = MacKeys::new(&b.public_key());
        let a_macs = MacKeys::new(&a.public_key());
        let mut init = [0u8; INITIATION_LEN];
        let ts = tai64n(5_000_000);
        let hs_a = write_initiation(
            &a,
            &b.public_key(),
            Some(&psk),
            &b_macs,
            11,
            &ts,
            None,
            &mut init,
        );
        assert!(hs_a.is_some());
        assert!(b_macs.check_mac1(&init));
        let r = read_initiation(&b, &a.public_key(), Some(&psk), &init);
        let Ok(r) = r else {
            panic!("initiation refused");
        };
        assert_eq!((r.sender_index, r.timestamp), (11, ts));
        let mut resp = [0u8; RESPONSE_LEN];
        let keys_b = write_response(r.state, &a_macs, 11, 22, &mut resp);
        assert!(a_macs.check_mac1(&resp));
        assert_eq!(&resp[..12], &[4, 2, 0, 0, 0, 0, 0, 11, 0, 0, 0, 22]);
        let keys_a = hs_a.map(|mut hs| read_response(&mut hs, &resp));
        let (Some(kb), Some(Ok(ka))) = (keys_b, keys_a) else {
            panic!("handshake failed");
        };
        // A's send key is B's receive key and vice versa, and the two differ.
        assert_eq!(ka.0, kb.1);
        assert_eq!(ka.1, kb.0);
        assert_ne!(ka.0, ka.1);

        // A third party's static key is refused as an unknown peer.
        let c = PrivateKey::from_bytes([3; 32]);
        let mut init_c = [0u8; INITIATION_LEN];
        let _ = write_initiation(
            &c,
            &b.public_key(),
            Some(&psk),
            &b_macs,
            12,
            &ts,
            None,
            &mut init_c,
        );
        assert_eq!(
            read_initiation(&b, &a.public_key(), Some(&psk), &init_c).err(),
            Some(HandshakeError::UnknownPeer)
        );
        // A flipped bit in the Noise body fails.
        let mut bad = init;
        bad[50] ^= 1;
        assert_eq!(
            read_initiation(&b, &a.public_key(), Some(&psk), &bad).err(),
            Some(HandshakeError::Failed)
        );
    }

    #[test]
    fn preshared_key_mismatch_fails_at_the_initiator() {
        let (a, b) = (
            PrivateKey::from_bytes([1; 32]),
            PrivateKey::from_bytes([2; 32]),
        );
        let b_macs = MacKeys::new(&b.public_key());
        let a_macs = MacKeys::new(&a.public_key());
        let mut init = [0u8; INITIATION_LEN];
        let ts = tai64n(5_000_000);
        let psk_a = PresharedKey::from_bytes([1; 32]);
        let hs_a = write_initiation(
            &a,
            &b.public_key(),
            Some(&psk_a),
            &b_macs,
            1,
            &ts,
            None,
            &mut init,
        );
        // psk2: the responder cannot tell yet...
        let Ok(r) = read_initiation(&b, &a.public_key(), None, &init) else {
            panic!("initiation refused");
        };
        let mut resp = [0u8; RESPONSE_LEN];
        assert!(write_response(r.state, &a_macs, 1, 2, &mut resp).is_some());
        // ...the initiator can.
        assert_eq!(
            hs_a.map(|mut hs| read_response(&mut hs, &resp).err()),
            Some(Some(HandshakeError::Failed))
        );
    }
}
