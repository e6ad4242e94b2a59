//! In-memory tests of [`Tunnel`]: two (or more) peers pass datagrams by hand.

use super::envelope::{
    COOKIE_REPLY_LEN, HEADER_LEN, INITIATION_LEN, KEEPALIVE_LEN, OVERHEAD, RESPONSE_LEN,
};
use super::*;
use crate::wire;
use crate::Instant;
use proptest::prelude::*;
use std::net::SocketAddr;

const A_ADDR: &str = "192.0.2.1:5000";
const B_ADDR: &str = "198.51.100.2:6000";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)))
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn key(b: u8) -> PrivateKey {
    PrivateKey::from_bytes([b; 32])
}

fn config(me: u8, peer: u8) -> TunnelConfig {
    let mut c = TunnelConfig::new(key(me), key(peer).public_key(), [me; 32]);
    c.unix_micros_at_zero = 1_700_000_000_000_000;
    c.replay_window_bits = 8192;
    c
}

/// Peers 1 and 2; returns (lower public key, higher public key) so tests can name the
/// collision winner.
fn pair() -> (Tunnel, Tunnel) {
    let (a, b) = (Tunnel::new(config(1, 2)), Tunnel::new(config(2, 1)));
    if a.local_public_key() < b.local_public_key() {
        (a, b)
    } else {
        (b, a)
    }
}

fn transmit(t: &mut Tunnel, now: Instant) -> Option<(TransmitKind, Vec<u8>)> {
    let mut buf = [0u8; 256];
    let tx = t.poll_transmit(now, &mut buf)?;
    Some((tx.kind, buf[..tx.len].to_vec()))
}

fn initiation(t: &mut Tunnel, now: Instant) -> Vec<u8> {
    t.start_handshake(now);
    match transmit(t, now) {
        Some((TransmitKind::Initiation, m)) => m,
        other => panic!("expected an initiation, got {other:?}"),
    }
}

/// `to.open(msg)` as an owned result.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    Data(Vec<u8>, SessionId),
    Reply(Vec<u8>),
    Established(SessionId),
    Cookie,
}

fn deliver(to: &mut Tunnel, now: Instant, from: &str, msg: &[u8]) -> Result<Got, Rejected> {
    let mut buf = msg.to_vec();
    to.open(now, addr(from), &mut buf).map(|o| match o {
        Opened::Data {
            plaintext, session, ..
        } => Got::Data(plaintext.to_vec(), session),
        Opened::Reply(r) => Got::Reply(r.to_vec()),
        Opened::Established(s) => Got::Established(s),
        Opened::CookieStored => Got::Cookie,
    })
}

/// `i` initiates to `r` at `now`; the whole exchange including the keepalive.
fn handshake(i: &mut Tunnel, r: &mut Tunnel, now: Instant, i_addr: &str) {
    let init = initiation(i, now);
    let Ok(Got::Reply(resp)) = deliver(r, now, i_addr, &init) else {
        panic!("no response");
    };
    assert_eq!(resp.len(), RESPONSE_LEN);
    assert!(matches!(
        deliver(i, now, "0.0.0.0:1", &resp),
        Ok(Got::Established(_))
    ));
    let Some((TransmitKind::Keepalive, ka)) = transmit(i, now) else {
        panic!("no keepalive");
    };
    assert_eq!(ka.len(), KEEPALIVE_LEN);
    assert!(matches!(deliver(r, now, i_addr, &ka), Ok(Got::Data(ref p, _)) if p.is_empty()));
    assert!(i.is_established(now) && r.is_established(now));
}

fn seal(t: &mut Tunnel, now: Instant, plaintext: &[u8]) -> Result<Vec<u8>, SealError> {
    let mut buf = vec![0u8; plaintext.len() + OVERHEAD];
    let n = t.seal_from(now, 0, plaintext, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

fn data(t: &mut Tunnel, now: Instant, seq: u64) -> Vec<u8> {
    let payload = [0x45u8; 100];
    let msg = wire::Message::Data {
        seq,
        path_seq: seq as u32,
        payload: &payload,
    };
    let mut plain = vec![0u8; msg.wire_len()];
    let n = wire::emit(
        &wire::Header {
            path: 3,
            timestamp: 7,
        },
        &msg,
        &mut plain,
    )
    .unwrap_or(0);
    assert_eq!(n, 120);
    match seal(t, now, &plain) {
        Ok(s) => s,
        Err(e) => panic!("seal: {e}"),
    }
}

fn opened_seq(r: Result<Got, Rejected>) -> Option<u64> {
    match r {
        Ok(Got::Data(p, _)) => match wire::parse(&p) {
            Ok((_, wire::Message::Data { seq, .. })) => Some(seq),
            _ => None,
        },
        _ => None,
    }
}

#[test]
fn handshake_either_side_initiates_and_data_flows_both_ways() {
    for lower_initiates in [true, false] {
        let (mut lo, mut hi) = pair();
        let (i, r) = if lower_initiates {
            (&mut lo, &mut hi)
        } else {
            (&mut hi, &mut lo)
        };
        let t = at(1000);
        assert_eq!(seal(i, t, b"x"), Err(SealError::NoSession));
        handshake(i, r, t, A_ADDR);
        for seq in 0..10 {
            let d = data(i, t, seq);
            assert_eq!(d.len(), 120 + OVERHEAD);
            assert_eq!(d[0], 4);
            assert_eq!(opened_seq(deliver(r, t, A_ADDR, &d)), Some(seq));
            let d = data(r, t, 100 + seq);
            assert_eq!(opened_seq(deliver(i, t, B_ADDR, &d)), Some(100 + seq));
        }
        assert_eq!(i.counters().rejected_total(), 0);
        assert_eq!(r.counters().rejected_total(), 0);
        assert_eq!(i.counters().handshakes_completed, 1);
        assert_eq!(r.counters().responses_sent, 1);
        assert_eq!(r.counters().opened, 11);
        assert_eq!(i.counters().sealed, 11);
    }
}

/// Each end seals with its own cipher and opens the other's, through a rekey too; the
/// kind byte says which (0x1t ChaCha20-Poly1305, 0x2t AES-256-GCM).
#[test]
fn ends_with_different_ciphers_understand_each_other() {
    for (ca, cb) in [
        (Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305),
        (Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm),
        (Cipher::Aes256Gcm, Cipher::Aes256Gcm),
    ] {
        let (mut ka, mut kb) = (config(1, 2), config(2, 1));
        (ka.cipher, kb.cipher) = (ca, cb);
        let (mut a, mut b) = (Tunnel::new(ka), Tunnel::new(kb));
        assert_eq!(a.peer_cipher(), None);
        for (round, t) in [at(1000), at(200_000)].into_iter().enumerate() {
            handshake(&mut a, &mut b, t, A_ADDR);
            for seq in 0..5 {
                let d = data(&mut a, t, seq);
                assert_eq!(d[1], ca.kind_base(), "{ca} at a");
                assert_eq!(opened_seq(deliver(&mut b, t, A_ADDR, &d)), Some(seq));
                let d = data(&mut b, t, 100 + seq);
                assert_eq!(d[1], cb.kind_base(), "{cb} at b");
                assert_eq!(opened_seq(deliver(&mut a, t, B_ADDR, &d)), Some(100 + seq));
            }
            assert_eq!((a.cipher(), a.peer_cipher()), (ca, Some(cb)));
            assert_eq!((b.cipher(), b.peer_cipher()), (cb, Some(ca)));
            assert_eq!(a.counters().rejected_total(), 0, "round {round}");
            assert_eq!(b.counters().rejected_total(), 0, "round {round}");
        }
    }
}

#[test]
fn seal_in_place_without_copy() {
    let (mut a, mut b) = pair();
    handshake(&mut a, &mut b, at(0), A_ADDR);
    let mut buf = [0u8; 1500];
    let plain = b"\x01\x01\x00\x01\x00\x00\x00\x00\x00\x00\x00\x05";
    buf[HEADER_LEN..HEADER_LEN + plain.len()].copy_from_slice(plain);
    let n = a.seal(at(1), 1, &mut buf, plain.len());
    assert_eq!(n, Ok(plain.len() + OVERHEAD));
    // Version 4, kind 0x10 + user type 1, the low 16 bits of b's index.
    let index = b.current_session(at(1)).map_or(0, |s| s.0 as u16);
    assert_eq!(
        &buf[..4],
        &[&[4u8, 0x11][..], &index.to_be_bytes()].concat()[..]
    );
    // The counter is the second datagram's (the keepalive was 0), low 32 bits.
    assert_eq!(&buf[4..8], &1u32.to_be_bytes());
    let mut d = buf[..plain.len() + OVERHEAD].to_vec();
    let Ok(Opened::Data {
        user_type,
        plaintext,
        counter,
        ..
    }) = b.open(at(1), addr(A_ADDR), &mut d)
    else {
        panic!("not opened");
    };
    assert_eq!((user_type, plaintext, counter), (1, &plain[..], 1));
    assert!(matches!(
        wire::parse(plaintext),
        Ok((_, wire::Message::Probe { probe_seq: 5, .. }))
    ));
    assert_eq!(
        a.seal(at(1), 0, &mut [0u8; 32], 9),
        Err(SealError::BufferTooSmall)
    );
}

#[test]
fn simultaneous_initiation_resolves_to_one_session() {
    let (mut lo, mut hi) = pair();
    let t = at(500);
    let init_lo = initiation(&mut lo, t);
    let init_hi = initiation(&mut hi, t);
    // The higher key answers the lower key's initiation and abandons its own...
    let Ok(Got::Reply(resp_hi)) = deliver(&mut hi, t, A_ADDR, &init_lo) else {
        panic!("higher key did not answer");
    };
    // ...the lower key answers too (its own might have been lost) but keeps its own...
    let Ok(Got::Reply(resp_lo)) = deliver(&mut lo, t, B_ADDR, &init_hi) else {
        panic!("lower key did not answer");
    };
    assert_eq!(lo.counters().handshake_collisions, 1);
    assert_eq!(hi.counters().handshake_collisions, 1);
    // ...so only the lower key's handshake completes.
    assert_eq!(
        deliver(&mut hi, t, A_ADDR, &resp_lo),
        Err(Rejected::UnknownReceiverIndex)
    );
    assert!(matches!(
        deliver(&mut lo, t, B_ADDR, &resp_hi),
        Ok(Got::Established(_))
    ));
    let Some((TransmitKind::Keepalive, ka)) = transmit(&mut lo, t) else {
        panic!("no keepalive");
    };
    assert!(matches!(
        deliver(&mut hi, t, A_ADDR, &ka),
        Ok(Got::Data(..))
    ));
    // Neither side wants another handshake.
    assert_eq!(transmit(&mut hi, t + Duration::from_secs(6)), None);
    assert_eq!(transmit(&mut lo, t + Duration::from_secs(6)), None);
    for seq in 0..3 {
        let d = data(&mut hi, t, seq);
        assert_eq!(opened_seq(deliver(&mut lo, t, B_ADDR, &d)), Some(seq));
        let d = data(&mut lo, t, seq);
        assert_eq!(opened_seq(deliver(&mut hi, t, A_ADDR, &d)), Some(seq));
    }
    assert_eq!(lo.counters().handshakes_completed, 1);
    assert_eq!(hi.counters().handshakes_completed, 0);

    // Every other delivery order ends in one working session too: in this one the higher
    // key's initiation completes, because the lower key's answer reaches it first.
    let (mut lo, mut hi) = pair();
    let init_lo = initiation(&mut lo, t);
    let init_hi = initiation(&mut hi, t);
    let Ok(Got::Reply(resp_lo)) = deliver(&mut lo, t, B_ADDR, &init_hi) else {
        panic!("lower key did not answer");
    };
    assert!(matches!(
        deliver(&mut hi, t, A_ADDR, &resp_lo),
        Ok(Got::Established(_))
    ));
    let Some((TransmitKind::Keepalive, ka)) = transmit(&mut hi, t) else {
        panic!("no keepalive");
    };
    assert!(matches!(
        deliver(&mut lo, t, B_ADDR, &ka),
        Ok(Got::Data(..))
    ));
    // lo's initiation arrives late: hi answers it, lo no longer waits for it.
    let Ok(Got::Reply(resp_hi)) = deliver(&mut hi, t, A_ADDR, &init_lo) else {
        panic!("no answer to the late initiation");
    };
    assert_eq!(
        deliver(&mut lo, t, B_ADDR, &resp_hi),
        Err(Rejected::UnknownReceiverIndex)
    );
    assert!(lo.is_established(t) && hi.is_established(t));
    for seq in 0..3 {
        let d = data(&mut lo, t, seq);
        assert_eq!(opened_seq(deliver(&mut hi, t, A_ADDR, &d)), Some(seq));
        let d = data(&mut hi, t, seq);
        assert_eq!(opened_seq(deliver(&mut lo, t, B_ADDR, &d)), Some(seq));
    }
}

/// The two ends started within a few ms of each other, so that the first initiation
/// reaches a peer that is not up yet and is lost, stepped in virtual time with 2 ms each
/// way: both can send within a few round trips, whoever started first. (With the old
/// rule the lower key dropped the higher key's initiation while waiting for an answer to
/// its own lost one, and the bond came up only on its retry 5 s later.)
#[test]
fn ends_started_together_are_up_within_a_few_round_trips() {
    let delay = Duration::from_millis(2);
    for (lo_start, hi_start) in [(0, 0), (0, 5), (5, 0), (0, 1), (1, 0)] {
        let (mut lo, mut hi) = pair();
        let start = [at(1000 + lo_start), at(1000 + hi_start)];
        let addrs = [A_ADDR, B_ADDR];
        let mut wire: Vec<(Instant, usize, Vec<u8>)> = Vec::new();
        let mut up = None;
        for ms in 0..6000 {
            let now = at(1000 + ms);
            for (i, t) in [&mut lo, &mut hi].into_iter().enumerate() {
                if now < start[i] {
                    continue;
                }
                if now == start[i] {
                    t.start_handshake(now);
                }
                if t.poll_timeout().is_some_and(|x| x <= now) {
                    t.handle_timeout(now);
                }
                // The bond probes every 10 ms.
                if ms % 10 == 0 {
                    if let Ok(d) = seal(t, now, b"probe") {
                        wire.push((now + delay, 1 - i, d));
                    }
                }
                while let Some((_, m)) = transmit(t, now) {
                    wire.push((now + delay, 1 - i, m));
                }
            }
            let due: Vec<_> = wire.iter().filter(|w| w.0 <= now).cloned().collect();
            wire.retain(|w| w.0 > now);
            for (_, to, m) in due {
                if now < start[to] {
                    continue; // not up yet: the datagram is lost
                }
                let t = if to == 0 { &mut lo } else { &mut hi };
                if let Ok(Got::Reply(r)) = deliver(t, now, addrs[1 - to], &m) {
                    wire.push((now + delay, 1 - to, r));
                }
            }
            if lo.is_established(now) && hi.is_established(now) {
                up = Some(ms);
                break;
            }
        }
        let up = up.unwrap_or_else(|| panic!("never up: lo at {lo_start}, hi at {hi_start}"));
        assert!(
            up <= 30,
            "lo started at {lo_start} ms, hi at {hi_start} ms: up after {up} ms"
        );
    }
}

/// A collision winner whose own initiations keep failing at the peer (here the peer
/// refuses its timestamps, as after the winner's clock went back) does not block the
/// bond: it answers the peer's initiation, which completes at once.
#[test]
fn collision_winner_whose_initiations_fail_still_answers() {
    let (mut lo, mut hi) = pair();
    let lo_byte = b_peer_byte(&hi);
    let mut future_cfg = config(lo_byte, 3 - lo_byte);
    future_cfg.unix_micros_at_zero += 3_600_000_000;
    let mut lo_future = Tunnel::new(future_cfg);
    let t = at(0);
    let stale = initiation(&mut lo_future, t);
    assert!(matches!(
        deliver(&mut hi, t, A_ADDR, &stale),
        Ok(Got::Reply(_))
    ));
    let now = at(1000);
    lo.start_handshake(now);
    hi.start_handshake(now);
    let Some((_, from_lo)) = transmit(&mut lo, now) else {
        panic!("no initiation");
    };
    assert_eq!(
        deliver(&mut hi, now, A_ADDR, &from_lo),
        Err(Rejected::HandshakeTooOld)
    );
    let Some((_, from_hi)) = transmit(&mut hi, now) else {
        panic!("no initiation");
    };
    let Ok(Got::Reply(resp)) = deliver(&mut lo, now, B_ADDR, &from_hi) else {
        panic!("the winner did not answer");
    };
    assert!(matches!(
        deliver(&mut hi, now, A_ADDR, &resp),
        Ok(Got::Established(_))
    ));
    let Some((TransmitKind::Keepalive, ka)) = transmit(&mut hi, now) else {
        panic!("no keepalive");
    };
    assert!(matches!(
        deliver(&mut lo, now, B_ADDR, &ka),
        Ok(Got::Data(..))
    ));
    assert_eq!(lo.counters().handshake_collisions, 1);
    assert!(lo.is_established(now) && hi.is_established(now));
    // lo no longer waits for its own.
    assert_eq!(transmit(&mut lo, now + Duration::from_secs(6)), None);
}

#[test]
fn forged_replayed_truncated_wrong_key_and_bit_flipped_are_rejected_by_name() {
    let (mut a, mut b) = pair();
    let t = at(0);
    handshake(&mut a, &mut b, t, A_ADDR);
    let good = data(&mut a, t, 1);

    // Replayed.
    assert!(opened_seq(deliver(&mut b, t, A_ADDR, &good)).is_some());
    assert_eq!(deliver(&mut b, t, A_ADDR, &good), Err(Rejected::Replayed));
    assert_eq!(b.counters().replayed, 1);

    // Forged: a valid header (right receiver index, fresh counter), random body.
    let mut forged = good.clone();
    forged[4..8].copy_from_slice(&999u32.to_be_bytes());
    for (i, byte) in forged.iter_mut().enumerate().skip(HEADER_LEN) {
        *byte = i as u8;
    }
    assert_eq!(deliver(&mut b, t, A_ADDR, &forged), Err(Rejected::BadTag));
    // The forged counter did not move the window: counter 2 still opens.
    let next = data(&mut a, t, 2);
    assert!(opened_seq(deliver(&mut b, t, A_ADDR, &next)).is_some());

    // Truncated: every prefix.
    let third = data(&mut a, t, 3);
    let before = b.counters().clone();
    for cut in 0..third.len() {
        assert!(
            deliver(&mut b, t, A_ADDR, &third[..cut]).is_err(),
            "prefix {cut}"
        );
    }
    assert!(b.counters().truncated - before.truncated >= OVERHEAD as u64);
    assert_eq!(b.counters().opened, before.opened);

    // Bit-flipped anywhere: never opens. Header flips are named by what they break.
    let four = data(&mut a, t, 4);
    for i in 0..four.len() {
        let mut bad = four.clone();
        bad[i] ^= 0x80;
        let r = deliver(&mut b, t, A_ADDR, &bad);
        let want = match i {
            0 => Rejected::BadVersion,
            1 => Rejected::Malformed,
            2..=3 => Rejected::UnknownReceiverIndex,
            _ => Rejected::BadTag,
        };
        assert_eq!(r, Err(want), "byte {i}");
    }
    assert!(opened_seq(deliver(&mut b, t, A_ADDR, &four)).is_some());

    // Wrong key: a third peer C with its own session with A cannot reach B: its
    // datagrams carry an index B does not know, or with B's index fail the tag.
    let mut a2 = Tunnel::new(config(1, 3));
    let mut c = Tunnel::new(config(3, 1));
    handshake(&mut c, &mut a2, t, "203.0.113.3:1");
    let from_c = data(&mut c, t, 5);
    let r = deliver(&mut b, t, "203.0.113.3:1", &from_c);
    assert!(matches!(r, Err(Rejected::UnknownReceiverIndex)));
    let mut retarget = from_c.clone();
    retarget[2..4].copy_from_slice(&good[2..4]);
    retarget[4..8].copy_from_slice(&12_345u32.to_be_bytes());
    assert_eq!(
        deliver(&mut b, t, "203.0.113.3:1", &retarget),
        Err(Rejected::BadTag)
    );
    // ...and C's initiation to B is from an unknown static key.
    let mut c2 = Tunnel::new(config(3, 2));
    let init = initiation(&mut c2, t);
    assert_eq!(
        deliver(&mut b, t, "203.0.113.3:1", &init),
        Err(Rejected::UnknownPeer)
    );

    // A plaintext version-1 datagram is refused by a keyed peer.
    assert_eq!(
        deliver(&mut b, t, A_ADDR, &[1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5]),
        Err(Rejected::BadVersion)
    );
    let c = b.counters();
    assert_eq!(
        (c.bad_version, c.replayed, c.unknown_peer),
        (2, 1, 1),
        "{c:?}"
    );
    assert!(c.bad_tag >= 2 && c.malformed >= 1 && c.unknown_receiver_index >= 3);
}

#[test]
fn preshared_key_mismatch_never_establishes() {
    let mut ca = config(1, 2);
    ca.preshared_key = Some(PresharedKey::from_bytes([7; 32]));
    let mut a = Tunnel::new(ca);
    let mut b = Tunnel::new(config(2, 1));
    let t = at(0);
    let init = initiation(&mut a, t);
    let Ok(Got::Reply(resp)) = deliver(&mut b, t, A_ADDR, &init) else {
        panic!("no response");
    };
    assert_eq!(
        deliver(&mut a, t, B_ADDR, &resp),
        Err(Rejected::HandshakeFailed)
    );
    assert!(!a.is_established(t));
    // B's responder session is never confirmed, so B cannot send either.
    assert_eq!(seal(&mut b, t, b"x"), Err(SealError::NoSession));
    // A retries on its timer, not at once (a forged response cannot make it spin).
    assert_eq!(transmit(&mut a, t), None);
    assert!(matches!(
        transmit(&mut a, t + Duration::from_millis(5334)),
        Some((TransmitKind::Initiation, _))
    ));
}

/// A response forged by someone who saw the initiation (right receiver index, valid
/// mac1: the initiator's public key is public; Noise that does not verify) leaves the
/// pending handshake as it was: the real response still establishes (review H2).
#[test]
fn forged_response_then_the_real_one_establishes() {
    let (mut a, mut b) = pair();
    let t = at(0);
    let init = initiation(&mut a, t);
    let Ok(Got::Reply(real)) = deliver(&mut b, t, A_ADDR, &init) else {
        panic!("no response");
    };
    let a_macs = cookie::MacKeys::new(&a.local_public_key());
    // Forgery 1: random Noise bytes. Forgery 2: the real response with one Noise byte
    // changed (and mac1 stamped again), so only the AEAD can tell.
    let mut random = [0u8; RESPONSE_LEN];
    random[..8].copy_from_slice(&init[..8]);
    random[1] = 2;
    for (i, byte) in random.iter_mut().enumerate().skip(8) {
        *byte = (i as u8).wrapping_mul(37);
    }
    a_macs.stamp(&mut random, None);
    let mut flipped = real.clone();
    flipped[50] ^= 1;
    a_macs.stamp(&mut flipped, None);
    for forged in [&random[..], &flipped[..], &random[..]] {
        assert_eq!(
            deliver(&mut a, t, B_ADDR, forged),
            Err(Rejected::HandshakeFailed)
        );
    }
    assert!(!a.is_established(t));
    assert!(matches!(
        deliver(&mut a, t, B_ADDR, &real),
        Ok(Got::Established(_))
    ));
    let Some((TransmitKind::Keepalive, ka)) = transmit(&mut a, t) else {
        panic!("no keepalive");
    };
    assert!(matches!(deliver(&mut b, t, A_ADDR, &ka), Ok(Got::Data(..))));
    assert!(a.is_established(t) && b.is_established(t));
    assert_eq!(a.counters().handshake_failed, 3);
    // Once established, the same forgery names an index we no longer have.
    assert_eq!(
        deliver(&mut a, t, B_ADDR, &random),
        Err(Rejected::UnknownReceiverIndex)
    );
}

#[test]
fn rekey_keeps_old_session_for_packets_in_flight() {
    let (mut a, mut b) = pair();
    handshake(&mut a, &mut b, at(0), A_ADDR);
    let s1 = a.current_session(at(0));
    // Before 120 s: no rekey.
    let _ = data(&mut a, at(119_000), 0);
    assert_eq!(transmit(&mut a, at(119_000)), None);
    // Packets sealed with the old session, both ways, still in flight...
    let old_ab: Vec<_> = (1..=5).map(|s| data(&mut a, at(120_000), s)).collect();
    let old_ba: Vec<_> = (1..=5).map(|s| data(&mut b, at(120_000), s)).collect();
    // ...the send at 120 s asked for a rekey.
    let t = at(120_001);
    let Some((TransmitKind::Initiation, init)) = transmit(&mut a, t) else {
        panic!("no rekey initiation");
    };
    // Old traffic still arrives while the handshake runs.
    assert_eq!(opened_seq(deliver(&mut b, t, A_ADDR, &old_ab[0])), Some(1));
    let Ok(Got::Reply(resp)) = deliver(&mut b, t, A_ADDR, &init) else {
        panic!("no response");
    };
    // B still sends with the old session until A confirms the new one.
    let mid_ba = data(&mut b, t, 6);
    assert!(matches!(
        deliver(&mut a, t, B_ADDR, &resp),
        Ok(Got::Established(_))
    ));
    let s2 = a.current_session(t);
    assert_ne!(s1, s2);
    // A sends with the new session at once; B accepts it (this confirms it at B).
    let new_ab = data(&mut a, t, 100);
    assert_eq!(opened_seq(deliver(&mut b, t, A_ADDR, &new_ab)), Some(100));
    // The old in-flight packets are all still accepted, in any order.
    for d in old_ab[1..].iter().rev() {
        assert!(opened_seq(deliver(&mut b, t, A_ADDR, d)).is_some());
    }
    for d in old_ba.iter().chain([&mid_ba]) {
        assert!(opened_seq(deliver(&mut a, t, B_ADDR, d)).is_some());
    }
    // B now sends on the new session too.
    let new_ba = data(&mut b, t, 200);
    let Ok(Got::Data(_, sid)) = deliver(&mut a, t, B_ADDR, &new_ba) else {
        panic!("new session data refused");
    };
    assert_eq!(Some(sid), s2);
    assert_eq!(
        a.counters().rejected_total() + b.counters().rejected_total(),
        0
    );
    // The keepalive A queued is still fine to send late.
    let Some((TransmitKind::Keepalive, ka)) = transmit(&mut a, t) else {
        panic!("no keepalive");
    };
    assert!(deliver(&mut b, t, A_ADDR, &ka).is_ok());

    // The old session expires 180 s after it was made: its stragglers are refused.
    let late = old_ab[0].clone();
    let mut late2 = late.clone();
    late2[4..8].copy_from_slice(&50u32.to_be_bytes());
    assert_eq!(
        deliver(&mut b, at(180_000), A_ADDR, &late2),
        Err(Rejected::Expired)
    );
}

#[test]
fn responder_rekeys_later_and_sessions_expire_after_180_s() {
    let (mut a, mut b) = pair();
    handshake(&mut a, &mut b, at(0), A_ADDR);
    // The responder does not rekey at 120 s...
    let _ = data(&mut b, at(130_000), 0);
    assert_eq!(transmit(&mut b, at(130_000)), None);
    // ...but at 150 s.
    let _ = data(&mut b, at(150_000), 1);
    assert!(matches!(
        transmit(&mut b, at(150_000)),
        Some((TransmitKind::Initiation, _))
    ));

    // Nobody answers: at 180 s the session can neither seal nor open.
    let (mut a, mut b) = pair();
    handshake(&mut a, &mut b, at(0), A_ADDR);
    let d = data(&mut a, at(179_999), 1);
    assert!(opened_seq(deliver(&mut b, at(179_999), A_ADDR, &d)).is_some());
    let d = data(&mut a, at(179_999), 2);
    assert_eq!(
        deliver(&mut b, at(180_000), A_ADDR, &d),
        Err(Rejected::Expired)
    );
    assert_eq!(seal(&mut a, at(180_000), b"x"), Err(SealError::NoSession));
    assert!(!a.is_established(at(180_000)));
    // Keys are erased at 540 s.
    assert!(a.poll_timeout() <= Some(at(540_000)));
    a.handle_timeout(at(540_000));
    b.handle_timeout(at(540_000));
    assert_eq!(
        deliver(&mut b, at(540_000), A_ADDR, &d),
        Err(Rejected::UnknownReceiverIndex)
    );
}

#[test]
fn initiation_is_retried_with_jitter_and_given_up_after_90_s() {
    let (mut a, _b) = pair();
    let t0 = at(10_000);
    let _lost = initiation(&mut a, t0);
    let retry = a.poll_timeout();
    let Some(retry) = retry else {
        panic!("no retry timer");
    };
    let wait = retry.saturating_since(t0);
    assert!(
        wait >= REKEY_TIMEOUT && wait <= REKEY_TIMEOUT + REKEY_TIMEOUT_JITTER,
        "{wait:?}"
    );
    assert_eq!(transmit(&mut a, retry - Duration::from_micros(1)), None);
    let mut sent = 1;
    let mut now = retry;
    while now < t0 + Duration::from_secs(100) {
        a.handle_timeout(now);
        while let Some((k, _)) = transmit(&mut a, now) {
            assert_eq!(k, TransmitKind::Initiation);
            sent += 1;
        }
        match a.poll_timeout() {
            Some(t) if t > now => now = t,
            _ => break,
        }
    }
    // 90 s of 5-5.33 s retries: 17 or 18 initiations, as WireGuard's 18 tries.
    assert!((17..=19).contains(&sent), "{sent}");
    assert_eq!(a.counters().handshake_timeouts, 1);
    assert_eq!(a.counters().initiations_sent, sent);
    // A later send asks again.
    assert_eq!(seal(&mut a, at(200_000), b"x"), Err(SealError::NoSession));
    assert!(transmit(&mut a, at(200_000)).is_some());
}

/// Review L2: the initiator sends its initiation on every path; when the path whose copy
/// arrives first works in one direction only, the response to that copy is lost. Every
/// other copy gets the same response again (no DH, no new session), on its own path, so
/// the handshake completes at once instead of on the retry.
#[test]
fn every_copy_of_an_initiation_gets_the_same_answer() {
    let (mut a, mut b) = pair();
    let t = at(1000);
    let init = initiation(&mut a, t);
    let Ok(Got::Reply(lost)) = deliver(&mut b, t, A_ADDR, &init) else {
        panic!("no response");
    };
    let second_path = "192.0.2.77:5001";
    let Ok(Got::Reply(again)) = deliver(&mut b, t + Duration::from_millis(30), second_path, &init)
    else {
        panic!("the second copy was not answered");
    };
    assert_eq!(again, lost);
    assert_eq!(b.counters().responses_sent, 1);
    assert_eq!(b.counters().responses_resent, 1);
    assert_eq!(b.counters().sessions_created, 1);
    assert!(matches!(
        deliver(&mut a, t, second_path, &again),
        Ok(Got::Established(_))
    ));
    let Some((TransmitKind::Keepalive, ka)) = transmit(&mut a, t) else {
        panic!("no keepalive");
    };
    assert!(matches!(
        deliver(&mut b, t, second_path, &ka),
        Ok(Got::Data(..))
    ));
    assert!(a.is_established(t) && b.is_established(t));
    // Had the first answer arrived too, it is counted as what it is.
    assert_eq!(
        deliver(&mut a, t, A_ADDR, &lost),
        Err(Rejected::DuplicateResponse)
    );
    // Once the session is confirmed, a copy is a replay again.
    assert_eq!(
        deliver(&mut b, t, "192.0.2.78:5001", &init),
        Err(Rejected::HandshakeTooOld)
    );
    // Unconfirmed, copies are answered for 5 s and at most 64 times.
    let (mut a, mut b) = pair();
    let init = initiation(&mut a, t);
    assert!(matches!(
        deliver(&mut b, t, A_ADDR, &init),
        Ok(Got::Reply(_))
    ));
    let answered = (0..100)
        .filter(|_| matches!(deliver(&mut b, t, second_path, &init), Ok(Got::Reply(_))))
        .count();
    assert_eq!(answered, 64);
    let (mut a, mut b) = pair();
    let init = initiation(&mut a, t);
    assert!(matches!(
        deliver(&mut b, t, A_ADDR, &init),
        Ok(Got::Reply(_))
    ));
    assert_eq!(
        deliver(&mut b, t + REKEY_TIMEOUT, second_path, &init),
        Err(Rejected::HandshakeTooOld)
    );
}

#[test]
fn replayed_initiations_are_too_old() {
    let (mut a, mut b) = pair();
    let t = at(0);
    let init = initiation(&mut a, t);
    assert!(matches!(
        deliver(&mut b, t, A_ADDR, &init),
        Ok(Got::Reply(_))
    ));
    // The same initiation again after the time copies are answered: a replay.
    assert_eq!(
        deliver(&mut b, t + REKEY_TIMEOUT, "192.0.2.9:5001", &init),
        Err(Rejected::HandshakeTooOld)
    );
    // A newer initiation from A (after a restart, say) is accepted.
    let mut a_restarted = Tunnel::new(config(1, 2));
    let init2 = initiation(&mut a_restarted, at(20));
    assert!(matches!(
        deliver(&mut b, at(20), A_ADDR, &init2),
        Ok(Got::Reply(_))
    ));
    // Replaying the first one later is still refused.
    assert_eq!(
        deliver(&mut b, at(60_000), A_ADDR, &init),
        Err(Rejected::HandshakeTooOld)
    );
    assert_eq!(b.counters().handshake_too_old, 2);
}

/// Review L3: initiations the peer sent before our restart, recorded and replayed after
/// it in timestamp order, are accepted once each (our memory of the last timestamp went
/// with the restart). They are answered, but they no longer make us give up our own
/// handshake (as the higher key would for a crossing initiation) nor hold it back for
/// 5 s waiting for a confirmation that never comes: the bond is up in one round trip.
#[test]
fn initiations_recorded_before_our_restart_do_not_hold_the_handshake() {
    let (_, hi) = pair();
    let lo_byte = b_peer_byte(&hi);
    // b is the higher key: the one that gives up its own handshake for a crossing one.
    let (a_byte, b_byte) = (lo_byte, 3 - lo_byte);
    let hour = 3_600_000_000u64;
    let recorded: Vec<Vec<u8>> = (1..=5u64)
        .rev()
        .map(|h| {
            let mut c = config(a_byte, b_byte);
            c.unix_micros_at_zero -= h * hour;
            initiation(&mut Tunnel::new(c), at(0))
        })
        .collect();
    let mut a = Tunnel::new(config(a_byte, b_byte));
    let mut b = Tunnel::new(config(b_byte, a_byte));
    assert!(b.local_public_key() > a.local_public_key());
    let t = at(1000);
    // b starts and initiates; a replay reaches it before the answer.
    let init_b = initiation(&mut b, t);
    let pending = b.pending_handshake();
    assert!(matches!(
        deliver(&mut b, t, A_ADDR, &recorded[0]),
        Ok(Got::Reply(_))
    ));
    assert_eq!(
        b.pending_handshake(),
        pending,
        "b gave up its own handshake"
    );
    let Ok(Got::Reply(resp)) = deliver(&mut a, t, B_ADDR, &init_b) else {
        panic!("a did not answer");
    };
    assert!(matches!(
        deliver(&mut b, t, A_ADDR, &resp),
        Ok(Got::Established(_))
    ));
    let Some((TransmitKind::Keepalive, ka)) = transmit(&mut b, t) else {
        panic!("no keepalive");
    };
    assert!(matches!(deliver(&mut a, t, B_ADDR, &ka), Ok(Got::Data(..))));
    // The other recordings, in order, are answered and change nothing that works.
    for r in &recorded[1..] {
        assert!(matches!(deliver(&mut b, t, A_ADDR, r), Ok(Got::Reply(_))));
    }
    for seq in 0..3 {
        let d = data(&mut b, t, seq);
        assert_eq!(opened_seq(deliver(&mut a, t, B_ADDR, &d)), Some(seq));
        let d = data(&mut a, t, seq);
        assert_eq!(opened_seq(deliver(&mut b, t, A_ADDR, &d)), Some(seq));
    }
    assert_eq!(b.counters().stale_initiations, 5);

    // A replay that arrives before b has initiated at all does not make b wait for a
    // confirmation either: b's first send asks for a handshake at once.
    let mut b = Tunnel::new(config(b_byte, a_byte));
    assert!(matches!(
        deliver(&mut b, t, A_ADDR, &recorded[0]),
        Ok(Got::Reply(_))
    ));
    assert_eq!(seal(&mut b, t, b"x"), Err(SealError::NoSession));
    assert!(matches!(
        transmit(&mut b, t),
        Some((TransmitKind::Initiation, _))
    ));
}

#[test]
fn bad_mac1_is_dropped_before_any_work() {
    let (mut a, mut b) = pair();
    let t = at(0);
    // An initiation meant for someone else (mac1 keyed with another public key).
    let mut a_to_c = Tunnel::new(config(1, 3));
    let init = initiation(&mut a_to_c, t);
    assert_eq!(deliver(&mut b, t, A_ADDR, &init), Err(Rejected::BadMac1));
    // Garbage of the right shape.
    let mut junk = [0x5au8; INITIATION_LEN];
    junk[..4].copy_from_slice(&[4, 1, 0, 0]);
    for _ in 0..100 {
        assert_eq!(deliver(&mut b, t, A_ADDR, &junk), Err(Rejected::BadMac1));
    }
    // A response that does not match our pending initiation.
    let mut resp = [0u8; RESPONSE_LEN];
    resp[..4].copy_from_slice(&[4, 2, 0, 0]);
    assert_eq!(
        deliver(&mut a, t, B_ADDR, &resp),
        Err(Rejected::UnknownReceiverIndex)
    );
    assert_eq!(b.counters().bad_mac1, 101);
    // None of it reached the rate limiter or the load meter: a real initiation passes.
    let init = initiation(&mut a, t);
    assert!(matches!(
        deliver(&mut b, t, A_ADDR, &init),
        Ok(Got::Reply(_))
    ));
    assert_eq!(
        b.counters().rate_limited + b.counters().cookie_replies_sent,
        0
    );
}

/// Under load, initiations with a valid mac2 are rate-limited per source address (20 a
/// second, burst 5); another address is unaffected.
#[test]
fn under_load_proven_initiations_are_rate_limited_per_source() {
    let (_, b) = pair();
    let me = b_peer_byte(&b);
    let mut cb = config(3 - me, me);
    cb.under_load_threshold = 1;
    let mut b = Tunnel::new(cb);
    let peer_b = b.local_public_key();
    let t = at(1000);
    // Seven strangers who know B's public key, on seven ports of one address, each get
    // a cookie (B is under load from the second initiation on)...
    let mut strangers: Vec<Tunnel> = (10..17u8)
        .map(|k| Tunnel::new(TunnelConfig::new(key(k), peer_b, [k; 32])))
        .collect();
    let src = |k: usize| format!("203.0.113.7:{}", 9000 + k);
    for (k, s) in strangers.iter_mut().enumerate() {
        let init = initiation(s, t);
        if let Ok(Got::Reply(c)) = deliver(&mut b, t, &src(k), &init) {
            assert_eq!(c.len(), COOKIE_REPLY_LEN);
            assert_eq!(deliver(s, t, B_ADDR, &c), Ok(Got::Cookie));
        }
    }
    // ...and retry with mac2 while B is still under load: each costs B a DH (and is
    // refused as an unknown peer) until the address's bucket is empty.
    let t2 = t + Duration::from_millis(5400);
    let _ = strangers_at(&mut b, t2, 60, 2);
    let mut results = Vec::new();
    for (k, s) in strangers.iter_mut().enumerate().skip(1) {
        let Some((TransmitKind::Initiation, init)) = transmit(s, t2) else {
            panic!("no retry");
        };
        results.push(deliver(&mut b, t2, &src(k), &init));
    }
    let refused: Vec<_> = results.iter().map(|r| r.as_ref().err().copied()).collect();
    assert_eq!(
        refused,
        [
            Some(Rejected::UnknownPeer),
            Some(Rejected::UnknownPeer),
            Some(Rejected::UnknownPeer),
            Some(Rejected::UnknownPeer),
            Some(Rejected::UnknownPeer),
            Some(Rejected::RateLimited),
        ]
    );
    assert_eq!(b.counters().rate_limited, 1);
}

/// Review L1: below the load threshold nothing is rate-limited, so a spoofer who knows
/// B's public key and sends 90 initiations a second from A's address (B's bucket for that
/// address would refill at only 20 a second) does not keep A from getting a session.
#[test]
fn spoofed_initiations_below_the_load_threshold_do_not_starve_the_peer() {
    let (mut a, mut b) = pair();
    let peer_b = b.local_public_key();
    let spoofed: Vec<Vec<u8>> = (20..23u8)
        .map(|k| {
            initiation(
                &mut Tunnel::new(TunnelConfig::new(key(k), peer_b, [k; 32])),
                at(0),
            )
        })
        .collect();
    let a_ip_other_port = "192.0.2.1:5999";
    let t0 = at(1000);
    for i in 0..90u64 {
        let t = t0 + Duration::from_micros(i * 11_111);
        let _ = deliver(&mut b, t, a_ip_other_port, &spoofed[i as usize % 3]);
    }
    // A's initiation right after the last spoofed one (as likely as any other moment).
    let t = t0 + Duration::from_micros(89 * 11_111);
    let init = initiation(&mut a, t);
    let Ok(Got::Reply(resp)) = deliver(&mut b, t, A_ADDR, &init) else {
        panic!("the real peer was refused");
    };
    assert!(matches!(
        deliver(&mut a, t, B_ADDR, &resp),
        Ok(Got::Established(_))
    ));
    assert_eq!(b.counters().rate_limited, 0);
    assert_eq!(b.counters().unknown_peer, 90);
}

/// The key byte of `t`'s peer in [`pair`] (1 or 2).
fn b_peer_byte(t: &Tunnel) -> u8 {
    if t.peer_public_key() == key(1).public_key() {
        1
    } else {
        2
    }
}

fn real_peer_of(t: &Tunnel) -> Tunnel {
    let me = b_peer_byte(t);
    Tunnel::new(config(me, 3 - me))
}

#[test]
fn under_load_the_responder_answers_with_a_cookie_and_the_peer_gets_through() {
    let (_, b) = pair();
    let me = b_peer_byte(&b);
    let mut cb = config(3 - me, me);
    cb.under_load_threshold = 3;
    let mut b = Tunnel::new(cb);
    let mut a = real_peer_of(&b);
    let t = at(1000);
    // Strangers from many addresses push B over the threshold.
    let peer_b = b.local_public_key();
    for k in 20..24u8 {
        let mut s = Tunnel::new(TunnelConfig::new(key(k), peer_b, [k; 32]));
        let init = initiation(&mut s, t);
        let _ = deliver(&mut b, t, &format!("203.0.113.{k}:9"), &init);
    }
    // Now A's initiation gets a cookie reply, smaller than the initiation, and no DH.
    let init = initiation(&mut a, t);
    let Ok(Got::Reply(cookie)) = deliver(&mut b, t, A_ADDR, &init) else {
        panic!("no cookie reply");
    };
    assert_eq!(cookie.len(), COOKIE_REPLY_LEN);
    assert!(cookie.len() < init.len());
    assert_eq!(cookie[1], 3);
    // The fourth stranger (over the threshold) got one too.
    assert_eq!(b.counters().cookie_replies_sent, 2);
    let sessions_before = b.counters().sessions_created;
    assert_eq!(deliver(&mut a, t, B_ADDR, &cookie), Ok(Got::Cookie));
    // A's retry carries mac2 and is processed although B is still under load.
    let t2 = t + Duration::from_millis(5334);
    for k in 30..35u8 {
        let mut s = Tunnel::new(TunnelConfig::new(key(k), peer_b, [k; 32]));
        let init = initiation(&mut s, t2);
        let _ = deliver(&mut b, t2, &format!("203.0.113.{k}:9"), &init);
    }
    let cookies_before = b.counters().cookie_replies_sent;
    assert_eq!(cookies_before, 4);
    let Some((TransmitKind::Initiation, init2)) = transmit(&mut a, t2) else {
        panic!("no retry");
    };
    // The same mac2 from another source port is not valid: that source gets a cookie.
    // init2's bytes from elsewhere first: mac2 is bound to A's address and port.
    let r = deliver(&mut b, t2, "192.0.2.1:5001", &init2);
    assert!(matches!(r, Ok(Got::Reply(ref c)) if c.len() == COOKIE_REPLY_LEN));
    let Ok(Got::Reply(resp)) = deliver(&mut b, t2, A_ADDR, &init2) else {
        panic!("no response");
    };
    assert_eq!(resp.len(), RESPONSE_LEN);
    assert_eq!(b.counters().sessions_created, sessions_before + 1);
    assert_eq!(b.counters().cookie_replies_sent, cookies_before + 1);
    assert!(matches!(
        deliver(&mut a, t2, B_ADDR, &resp),
        Ok(Got::Established(_))
    ));
    // A cookie reply for an initiation we did not send is refused.
    assert_eq!(
        deliver(&mut a, t2, B_ADDR, &cookie),
        Err(Rejected::UnknownReceiverIndex)
    );
}

/// `n` initiations to `to` from strangers (valid mac1, unknown keys), each from its own
/// address, delivered at `t`; the results.
fn strangers_at(to: &mut Tunnel, t: Instant, first_key: u8, n: u8) -> Vec<Result<Got, Rejected>> {
    let peer = to.local_public_key();
    (first_key..first_key + n)
        .map(|k| {
            let mut s = Tunnel::new(TunnelConfig::new(key(k), peer, [k; 32]));
            let init = initiation(&mut s, t);
            deliver(to, t, &format!("203.0.113.{k}:9"), &init)
        })
        .collect()
}

/// The handshake budget (review H1): initiations that pass mac1 take a token, and beyond
/// the budget are dropped unread; but a response to our own handshake and an initiation
/// with a valid mac2 (its sender proved it receives at its address) never wait for one.
#[test]
fn budget_spares_replies_to_our_handshake_and_proven_initiations() {
    let (lo, _) = pair();
    let me = b_peer_byte(&lo);
    let budgeted = |me: u8| {
        let mut c = config(me, 3 - me);
        c.handshake_budget = 20; // burst 2, a token every 50 ms
        c.under_load_threshold = 3;
        Tunnel::new(c)
    };
    let (mut a, mut b) = (budgeted(3 - me), budgeted(me));
    let t = at(1000);
    // Two strangers use up b's budget; the third is dropped unread, and so is a's.
    let r = strangers_at(&mut b, t, 10, 3);
    assert_eq!(r[2], Err(Rejected::FloodDropped));
    let init = initiation(&mut a, t);
    assert_eq!(
        deliver(&mut b, t, A_ADDR, &init),
        Err(Rejected::FloodDropped)
    );
    // Junk never takes a token: a refilled token is still there after it.
    let t1 = t + Duration::from_millis(50);
    let mut junk = [0x5au8; INITIATION_LEN];
    junk[..4].copy_from_slice(&[4, 1, 0, 0]);
    for _ in 0..50 {
        assert_eq!(deliver(&mut b, t1, A_ADDR, &junk), Err(Rejected::BadMac1));
    }
    // b is under load (5 initiations in this second): a's copy gets a cookie.
    let Ok(Got::Reply(cookie)) = deliver(&mut b, t1, A_ADDR, &init) else {
        panic!("no cookie reply");
    };
    assert_eq!(cookie.len(), COOKIE_REPLY_LEN);
    // a's own budget is used up by strangers too: the cookie reply still gets in.
    let _ = strangers_at(&mut a, t1, 20, 3);
    assert_eq!(deliver(&mut a, t1, B_ADDR, &cookie), Ok(Got::Cookie));
    // At the retry both are flooded again; a's initiation carries mac2 and gets through.
    let t2 = t + Duration::from_millis(5400);
    assert!(strangers_at(&mut b, t2, 30, 5).contains(&Err(Rejected::FloodDropped)));
    assert!(strangers_at(&mut a, t2, 40, 5).contains(&Err(Rejected::FloodDropped)));
    let Some((TransmitKind::Initiation, init2)) = transmit(&mut a, t2) else {
        panic!("no retry");
    };
    let Ok(Got::Reply(resp)) = deliver(&mut b, t2, A_ADDR, &init2) else {
        panic!("the proven initiation was not answered");
    };
    assert_eq!(resp.len(), RESPONSE_LEN);
    assert!(matches!(
        deliver(&mut a, t2, B_ADDR, &resp),
        Ok(Got::Established(_))
    ));
    assert!(a.counters().handshake_flood_dropped >= 1);
}

/// No answer before authentication is larger than what caused it, whatever comes in.
#[test]
fn no_amplification() {
    let (mut a, mut b) = pair();
    let t = at(0);
    let init = initiation(&mut a, t);
    let mut replies = Vec::new();
    if let Ok(Got::Reply(r)) = deliver(&mut b, t, A_ADDR, &init) {
        replies.push((init.len(), r.len()));
    }
    let mut loaded_cfg = config(b_peer_byte(&a), 3 - b_peer_byte(&a));
    loaded_cfg.under_load_threshold = 1;
    let mut loaded = Tunnel::new(loaded_cfg);
    for ms in [1u64, 2, 3] {
        let mut a = real_peer_of(&loaded);
        let init = initiation(&mut a, at(ms * 20));
        if let Ok(Got::Reply(r)) = deliver(&mut loaded, at(ms * 20), A_ADDR, &init) {
            replies.push((init.len(), r.len()));
        }
    }
    assert!(replies.iter().any(|&(_, r)| r == RESPONSE_LEN));
    assert!(replies.iter().any(|&(_, r)| r == COOKIE_REPLY_LEN));
    for (q, r) in replies {
        assert!(r <= q, "reply of {r} bytes to {q}");
    }
    const { assert!(RESPONSE_LEN < INITIATION_LEN && COOKIE_REPLY_LEN < INITIATION_LEN) };
}

#[test]
fn counter_names_are_unique_and_listed() {
    let names: Vec<_> = Rejected::ALL.iter().map(|r| r.name()).collect();
    let mut dedup = names.clone();
    dedup.sort_unstable();
    dedup.dedup();
    assert_eq!(dedup.len(), names.len());
    for want in [
        "bad_version",
        "truncated",
        "unknown_receiver_index",
        "replayed",
        "bad_tag",
        "bad_mac1",
        "rate_limited",
        "handshake_too_old",
    ] {
        assert!(names.contains(&want), "{want}");
    }
    let c = Counters::default();
    let listed: Vec<_> = c.iter().map(|(n, _)| n).collect();
    for n in &names {
        assert!(listed.contains(n));
    }
}

proptest! {
    /// Arbitrary bytes never panic, never open as data, and never get a reply larger
    /// than themselves; every refusal is counted.
    #[test]
    fn arbitrary_input_is_refused_and_counted(
        msgs in prop::collection::vec(
            (any::<u8>(), 0u8..5, prop::collection::vec(any::<u8>(), 0..200)), 1..40),
    ) {
        let (mut a, mut b) = pair();
        handshake(&mut a, &mut b, at(0), A_ADDR);
        let mut refused = 0;
        for (v, kind, body) in msgs {
            let mut m = body.clone();
            if m.len() >= 4 {
                m[0] = if v < 200 { 2 } else { v };
                m[1] = kind;
                m[2] = 0;
                m[3] = 0;
            }
            let len = m.len();
            match b.open(at(1), addr(B_ADDR), &mut m) {
                Ok(Opened::Reply(r)) => prop_assert!(r.len() <= len),
                Ok(other) => prop_assert!(false, "opened garbage: {:?}", other),
                Err(_) => refused += 1,
            }
        }
        prop_assert_eq!(b.counters().rejected_total(), refused);
    }
}
