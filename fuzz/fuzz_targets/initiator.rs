//! The initiator side of `crypto::Tunnel`: its pending handshake against forged and
//! altered responses and cookie replies, with an honest responder `Tunnel`.
//!
//! The initiator's initiations are captured; the honest responder answers any of them
//! (a response, or a cookie reply when the input makes it "under load"), and those
//! genuine answers are captured too. The input is a sequence of operations: the
//! initiator asking for a handshake, the responder answering a captured initiation,
//! captured answers delivered (as they are, altered or cut), forged responses (any body,
//! the index of a captured initiation, a correct mac1) and forged cookie replies (any
//! body, the index of a captured initiation), raw datagrams, the initiator sealing a
//! payload for the responder, and time passing.
//!
//! Checks:
//! - `Established` only for bytes identical to a genuine response up to its mac2 (which
//!   responses do not check), at most once each;
//!   `CookieStored` only for bytes identical to a genuine cookie reply;
//! - a refused datagram leaves the pending handshake as it was (review H2): a forged
//!   response cannot end it;
//! - a completed handshake gives both ends the same keys: when the response came from
//!   the responder's latest answer, what the initiator seals next opens at the responder;
//! - every refusal is counted: `rejected_total` equals the number of `Err` results.
//!
//! The handshake's ephemeral keys come from the OS RNG (snow), so runs are not
//! bit-for-bit repeatable; the checks do not depend on those keys.
#![no_main]

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use arbitrary::Arbitrary;
use braid_core::fuzzing::MacKeys;
use braid_core::crypto::envelope::{COOKIE_REPLY_LEN, MAC_LEN, OVERHEAD, RESPONSE_LEN};
use braid_core::crypto::{Opened, PrivateKey, Tunnel, TunnelConfig};
use braid_core::Instant;
use libfuzzer_sys::fuzz_target;

const INITIATOR_KEY: [u8; 32] = [0x66; 32];
const RESPONDER_KEY: [u8; 32] = [0x77; 32];
const MAX_CAPTURED: usize = 32;
/// Where a response's mac2 starts.
const MAC2_AT: usize = RESPONSE_LEN - MAC_LEN;

#[derive(Arbitrary, Debug)]
enum Op {
    /// The initiator asks for a handshake (sent if its retry timer allows).
    Initiate,
    /// The responder reads captured initiation `which`; its answer is captured.
    Answer { which: u8 },
    /// A captured answer reaches the initiator, maybe altered and cut short.
    Deliver {
        which: u8,
        flips: Vec<(u16, u8)>,
        cut: Option<u16>,
    },
    /// A forged response: index of captured initiation `which`, any body, valid mac1.
    ForgeResponse { which: u8, body: Vec<u8> },
    /// A forged cookie reply naming captured initiation `which`.
    ForgeCookie { which: u8, body: Vec<u8> },
    /// Any bytes.
    Raw { bytes: Vec<u8> },
    /// The initiator seals a payload; the responder opens it.
    Seal { payload: Vec<u8> },
    /// Time passes; timers run on both sides.
    Advance { millis: u32 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// The responder's load threshold (small values make it send cookies).
    under_load: u8,
    ops: Vec<Op>,
}

fn addr(last: u8) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, last)), 7000)
}

struct Harness {
    now: Instant,
    initiator: Tunnel,
    responder: Tunnel,
    initiator_macs: MacKeys,
    initiations: Vec<Vec<u8>>,
    /// Genuine answers (responses and cookie replies), in the order made.
    answers: Vec<Vec<u8>>,
    /// The responder's latest response: the only one its `next` session matches.
    latest_response: Option<Vec<u8>>,
    established: HashSet<Vec<u8>>,
    /// The initiator's current session came from the latest response and is unused.
    fresh_match: bool,
    errors: u64,
}

impl Harness {
    fn drain(&mut self) {
        let mut buf = [0u8; 256];
        for _ in 0..4 {
            let Some(t) = self.initiator.poll_transmit(self.now, &mut buf) else {
                break;
            };
            let d = buf[..t.len].to_vec();
            if t.len == OVERHEAD {
                // The keepalive confirms the session at the responder.
                let mut k = d.clone();
                let _ = self.responder.open(self.now, addr(1), &mut k);
            } else if self.initiations.len() < MAX_CAPTURED {
                self.initiations.push(d);
            }
        }
    }

    fn to_initiator(&mut self, datagram: &[u8]) {
        let pending = self.initiator.pending_handshake();
        let mut buf = datagram.to_vec();
        match self.initiator.open(self.now, addr(2), &mut buf) {
            Err(_) => {
                self.errors += 1;
                assert_eq!(
                    self.initiator.pending_handshake(),
                    pending,
                    "a refused datagram changed the pending handshake"
                );
            }
            Ok(Opened::Established(_)) => {
                // mac2 of a response is not checked (it is zeros: responses are not
                // cookie-checked), so compare what comes before it.
                let signed = datagram.get(..MAC2_AT).unwrap_or(datagram);
                assert!(
                    datagram.len() == RESPONSE_LEN
                        && self
                            .answers
                            .iter()
                            .any(|a| a.get(..MAC2_AT) == Some(signed)),
                    "established by a response the responder never sent"
                );
                assert!(
                    self.established.insert(signed.to_vec()),
                    "one response established twice"
                );
                self.fresh_match =
                    self.latest_response.as_ref().and_then(|r| r.get(..MAC2_AT)) == Some(signed);
                self.drain();
            }
            Ok(Opened::CookieStored) => {
                assert!(
                    datagram.len() == COOKIE_REPLY_LEN
                        && self.answers.iter().any(|a| a == datagram),
                    "stored a cookie the responder never sent"
                );
            }
            Ok(Opened::Data { .. }) => panic!("the initiator opened data nobody sealed"),
            Ok(Opened::Reply(r)) => {
                assert!(r.len() <= datagram.len(), "reply longer than its request")
            }
        }
        assert_eq!(
            self.initiator.counters().rejected_total(),
            self.errors,
            "every refusal is counted once"
        );
    }

    /// Captured initiation `which`, if any.
    fn initiation(&self, which: u8) -> Option<&Vec<u8>> {
        if self.initiations.is_empty() {
            return None;
        }
        self.initiations
            .get(usize::from(which) % self.initiations.len())
    }
}

fuzz_target!(|input: Input| {
    let (ik, rk) = (
        PrivateKey::from_bytes(INITIATOR_KEY),
        PrivateKey::from_bytes(RESPONDER_KEY),
    );
    let mut ic = TunnelConfig::new(ik.clone(), rk.public_key(), [3; 32]);
    ic.unix_micros_at_zero = 1_700_000_000_000_000;
    ic.replay_window_bits = 128;
    let mut rc = TunnelConfig::new(rk, ik.public_key(), [4; 32]);
    rc.unix_micros_at_zero = 1_700_000_000_000_000;
    rc.replay_window_bits = 128;
    rc.under_load_threshold = u32::from(input.under_load);
    let mut h = Harness {
        now: Instant::from_millis(1000),
        initiator: Tunnel::new(ic),
        responder: Tunnel::new(rc),
        initiator_macs: MacKeys::new(&ik.public_key()),
        initiations: Vec::new(),
        answers: Vec::new(),
        latest_response: None,
        established: HashSet::new(),
        fresh_match: false,
        errors: 0,
    };

    for op in input.ops.into_iter().take(48) {
        match op {
            Op::Initiate => {
                h.initiator.start_handshake(h.now);
                h.drain();
            }
            Op::Answer { which } => {
                let Some(init) = h.initiation(which).cloned() else {
                    continue;
                };
                let mut buf = init;
                if let Ok(Opened::Reply(r)) = h.responder.open(h.now, addr(1), &mut buf) {
                    let r = r.to_vec();
                    if r.len() == RESPONSE_LEN {
                        // A copy answered again is the same bytes; a new answer replaces
                        // the responder's unconfirmed session.
                        if h.latest_response.as_ref() != Some(&r) {
                            h.fresh_match = false;
                        }
                        h.latest_response = Some(r.clone());
                    }
                    if h.answers.len() < MAX_CAPTURED {
                        h.answers.push(r);
                    }
                }
            }
            Op::Deliver { which, flips, cut } => {
                if h.answers.is_empty() {
                    continue;
                }
                let mut d = h.answers[usize::from(which) % h.answers.len()].clone();
                for (pos, mask) in flips.into_iter().take(8) {
                    if !d.is_empty() {
                        let p = usize::from(pos) % d.len();
                        d[p] ^= mask;
                    }
                }
                if let Some(c) = cut {
                    d.truncate(usize::from(c));
                }
                h.to_initiator(&d);
            }
            Op::ForgeResponse { which, body } => {
                let Some(init) = h.initiation(which) else {
                    continue;
                };
                let mut d = vec![0u8; RESPONSE_LEN];
                d[..4].copy_from_slice(&[braid_core::wire::SEALED_VERSION, 2, 0, 0]);
                d[4..8].copy_from_slice(&init[4..8]);
                let n = body.len().min(RESPONSE_LEN - 8);
                d[8..8 + n].copy_from_slice(&body[..n]);
                h.initiator_macs.stamp(&mut d, None);
                h.to_initiator(&d);
            }
            Op::ForgeCookie { which, body } => {
                let Some(init) = h.initiation(which) else {
                    continue;
                };
                let mut d = vec![0u8; COOKIE_REPLY_LEN];
                d[..4].copy_from_slice(&[braid_core::wire::SEALED_VERSION, 3, 0, 0]);
                d[4..8].copy_from_slice(&init[4..8]);
                let n = body.len().min(COOKIE_REPLY_LEN - 8);
                d[8..8 + n].copy_from_slice(&body[..n]);
                h.to_initiator(&d);
            }
            Op::Raw { bytes } => h.to_initiator(&bytes),
            Op::Seal { payload } => {
                let payload = &payload[..payload.len().min(256)];
                let mut out = vec![0u8; payload.len() + OVERHEAD];
                let Ok(n) = h.initiator.seal_from(h.now, 0, payload, &mut out) else {
                    h.drain();
                    continue;
                };
                out.truncate(n);
                let opened = h.responder.open(h.now, addr(1), &mut out);
                if h.fresh_match {
                    match opened {
                        Ok(Opened::Data { plaintext, .. }) => {
                            assert_eq!(plaintext, payload, "opened something else")
                        }
                        other => panic!("a completed handshake's keys do not match: {other:?}"),
                    }
                }
                h.drain();
            }
            Op::Advance { millis } => {
                h.now = h.now + Duration::from_millis(u64::from(millis % 600_000));
                h.initiator.handle_timeout(h.now);
                h.responder.handle_timeout(h.now);
                // Keys expire (180 s): a later seal would ask for a new handshake.
                h.fresh_match = false;
                h.drain();
            }
        }
    }
});
