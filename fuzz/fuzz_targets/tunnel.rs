//! Sealed (version 4) datagrams and handshake messages fed to a responder `Tunnel`.
//!
//! Two tunnels with fixed keys: the responder under test and an honest initiator whose
//! genuine initiations, keepalives and sealed datagrams are captured. The input is a
//! sequence of operations: raw datagrams, datagrams with a valid sealed prefix, handshake
//! messages with arbitrary bodies but a correct mac1 (so they reach the Noise code), the
//! initiator starting a handshake or sealing a payload, captured datagrams delivered (as
//! they are, altered, or cut short; opened by the responder itself or first by its
//! `OpenKeys`, fresh or kept from earlier, as the daemon's workers do), and time passing. The responder's replies go back to
//! the initiator, which completes its handshakes (and stores cookies).
//!
//! Checks:
//! - `Opened::Data` only for bytes identical to a datagram the initiator sealed, with the
//!   plaintext it sealed, and at most once per datagram (no replay, nothing forged or
//!   altered is delivered);
//! - the responder, which never initiates, never reports `Established` or `CookieStored`;
//! - a reply is never longer than the datagram it answers;
//! - every refusal is counted: `rejected_total` equals the number of `Err` results.
//!
//! The handshake's ephemeral keys come from the OS RNG (snow), so runs are not
//! bit-for-bit repeatable; the checks above do not depend on those keys.
#![no_main]

#[path = "common/sealed_frame.rs"]
mod sealed;
use sealed::sealed_frame;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use braid_core::crypto::envelope::{COOKIE_REPLY_LEN, INITIATION_LEN, OVERHEAD, RESPONSE_LEN};
use braid_core::crypto::{
    Cipher, OpenKeys, Opened, Preopen, PresharedKey, PrivateKey, PublicKey, Tunnel, TunnelConfig,
};
use braid_core::fuzzing::MacKeys;
use braid_core::Instant;
use libfuzzer_sys::fuzz_target;

const RESPONDER_KEY: [u8; 32] = [0x11; 32];
const INITIATOR_KEY: [u8; 32] = [0x22; 32];
const PSK: [u8; 32] = [0x33; 32];
const MAX_CAPTURED: usize = 64;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Any bytes from the network.
    Raw { src: u8, bytes: Vec<u8> },
    /// `4, kind, 0, 0` then any bytes: gets past the version and reserved-byte checks.
    Framed { src: u8, kind: u8, body: Vec<u8> },
    /// A handshake message of the right length for `kind` (initiation, response or
    /// cookie reply), any content, with a correct mac1 for the responder: reaches Noise.
    Stamped { src: u8, kind: u8, body: Vec<u8> },
    /// The initiator asks for a handshake; its initiation is captured.
    Initiate,
    /// The initiator seals a payload (if it has a session); the datagram is captured.
    Seal { payload: Vec<u8> },
    /// A captured datagram reaches the responder, maybe altered (`flips`: position, XOR
    /// mask) and maybe cut short; `elsewhere`: opened first by `OpenKeys` (1: taken now,
    /// 2: the ones kept by `KeepKeys`), as the daemon's workers do.
    Deliver {
        src: u8,
        which: u8,
        flips: Vec<(u16, u8)>,
        cut: Option<u16>,
        elsewhere: u8,
    },
    /// Keep the responder's receive keys as they are now (stale after a rekey).
    KeepKeys,
    /// Time passes; timers run on both sides.
    Advance { millis: u32 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Initiations per second above which the responder answers with cookies (small
    /// values exercise the cookie path).
    under_load: u8,
    psk: bool,
    /// Each end's cipher: AES-256-GCM when set, else ChaCha20-Poly1305 (they may differ).
    aes: (bool, bool),
    ops: Vec<Op>,
}

fn cipher(aes: bool) -> Cipher {
    if aes {
        Cipher::Aes256Gcm
    } else {
        Cipher::ChaCha20Poly1305
    }
}

fn addr(src: u8) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, src % 4)), 7000)
}

struct Harness {
    now: Instant,
    responder: Tunnel,
    initiator: Tunnel,
    responder_macs: MacKeys,
    /// Datagrams the initiator sent, in order; with the plaintext for sealed ones.
    captured: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Genuine sealed datagrams → their plaintext.
    sealed: HashMap<Vec<u8>, Vec<u8>>,
    delivered: HashSet<Vec<u8>>,
    errors: u64,
    kept: OpenKeys,
}

impl Harness {
    fn capture(&mut self, bytes: Vec<u8>, plaintext: Option<Vec<u8>>) {
        if let Some(p) = &plaintext {
            self.sealed.insert(bytes.clone(), p.clone());
        }
        if self.captured.len() < MAX_CAPTURED {
            self.captured.push((bytes, plaintext));
        }
    }

    /// Drain the initiator's transmissions into the capture list.
    fn drain_initiator(&mut self) {
        let mut buf = [0u8; 256];
        for _ in 0..4 {
            match self.initiator.poll_transmit(self.now, &mut buf) {
                Some(t) => {
                    let bytes = buf[..t.len].to_vec();
                    // A keepalive is sealed: an empty plaintext.
                    let plain = (t.len == OVERHEAD).then(Vec::new);
                    self.capture(bytes, plain);
                }
                None => break,
            }
        }
    }

    /// Feed one datagram to the responder and check what comes out.
    fn to_responder(&mut self, src: SocketAddr, datagram: &[u8]) {
        self.to_responder_via(src, datagram, 0);
    }

    /// As [`Harness::to_responder`], opened first by the responder's `OpenKeys` when
    /// `elsewhere` says so (1: fresh, 2: kept).
    fn to_responder_via(&mut self, src: SocketAddr, datagram: &[u8], elsewhere: u8) {
        let mut buf = datagram.to_vec();
        let pre = match elsewhere % 3 {
            0 => Preopen::Untouched,
            1 => self.responder.open_keys().open(&mut buf),
            _ => self.kept.open(&mut buf),
        };
        let result = self.responder.open_preopened(self.now, src, &mut buf, pre);
        let reply = match result {
            Err(_) => {
                self.errors += 1;
                None
            }
            Ok(Opened::Data { plaintext, .. }) => {
                let genuine = self
                    .sealed
                    .get(datagram)
                    .expect("unauthenticated datagram delivered");
                assert_eq!(plaintext, &genuine[..], "delivered plaintext differs");
                assert!(
                    self.delivered.insert(datagram.to_vec()),
                    "sealed datagram delivered twice (replay)"
                );
                None
            }
            Ok(Opened::Reply(r)) => {
                assert!(r.len() <= datagram.len(), "reply longer than its request");
                assert!(r.len() == RESPONSE_LEN || r.len() == COOKIE_REPLY_LEN);
                Some(r.to_vec())
            }
            Ok(other) => panic!("responder never initiates, yet it got {other:?}"),
        };
        assert_eq!(
            self.responder.counters().rejected_total(),
            self.errors,
            "every refusal is counted once"
        );
        if let Some(mut r) = reply {
            // The honest initiator reads the answer (response or cookie reply).
            let _ = self.initiator.open(self.now, addr(200), &mut r);
            self.drain_initiator();
        }
    }
}

fuzz_target!(|input: Input| {
    // Public keys are computed once; each input gets fresh tunnels.
    static KEYS: OnceLock<(PublicKey, PublicKey, MacKeys)> = OnceLock::new();
    let (responder_pub, initiator_pub, responder_macs) = KEYS.get_or_init(|| {
        let r = PrivateKey::from_bytes(RESPONDER_KEY).public_key();
        let i = PrivateKey::from_bytes(INITIATOR_KEY).public_key();
        (r, i, MacKeys::new(&r))
    });
    let psk = input.psk.then(|| PresharedKey::from_bytes(PSK));
    let mut rc = TunnelConfig::new(
        PrivateKey::from_bytes(RESPONDER_KEY),
        *initiator_pub,
        [1; 32],
    );
    rc.preshared_key = psk.clone();
    rc.cipher = cipher(input.aes.0);
    rc.under_load_threshold = u32::from(input.under_load);
    rc.replay_window_bits = 128;
    rc.rate_limit_table_size = 8;
    let mut ic = TunnelConfig::new(
        PrivateKey::from_bytes(INITIATOR_KEY),
        *responder_pub,
        [2; 32],
    );
    ic.preshared_key = psk;
    ic.cipher = cipher(input.aes.1);
    ic.unix_micros_at_zero = 1_700_000_000_000_000;
    ic.replay_window_bits = 128;
    ic.rate_limit_table_size = 8;
    let mut h = Harness {
        now: Instant::from_micros(1),
        responder_macs: responder_macs.clone(),
        responder: Tunnel::new(rc),
        initiator: Tunnel::new(ic),
        captured: Vec::new(),
        sealed: HashMap::new(),
        delivered: HashSet::new(),
        errors: 0,
        kept: OpenKeys::default(),
    };

    for op in input.ops.into_iter().take(32) {
        match op {
            Op::Raw { src, bytes } => h.to_responder(addr(src), &bytes),
            Op::Framed { src, kind, body } => {
                let d = sealed_frame(kind, &body);
                h.to_responder(addr(src), &d);
            }
            Op::Stamped { src, kind, body } => {
                let (k, len) = match kind % 3 {
                    0 => (1, INITIATION_LEN),
                    1 => (2, RESPONSE_LEN),
                    _ => (3, COOKIE_REPLY_LEN),
                };
                let mut d = vec![0u8; len];
                d[0] = braid_core::wire::SEALED_VERSION;
                d[1] = k;
                let n = body.len().min(len - 4);
                d[4..4 + n].copy_from_slice(&body[..n]);
                h.responder_macs.stamp(&mut d, None);
                h.to_responder(addr(src), &d);
            }
            Op::Initiate => {
                h.initiator.start_handshake(h.now);
                h.drain_initiator();
            }
            Op::Seal { payload } => {
                let payload = &payload[..payload.len().min(256)];
                let mut out = vec![0u8; payload.len() + OVERHEAD];
                if let Ok(n) = h.initiator.seal_from(h.now, 0, payload, &mut out) {
                    out.truncate(n);
                    h.capture(out, Some(payload.to_vec()));
                }
                h.drain_initiator();
            }
            Op::Deliver {
                src,
                which,
                flips,
                cut,
                elsewhere,
            } => {
                if h.captured.is_empty() {
                    continue;
                }
                let i = usize::from(which) % h.captured.len();
                let mut d = h.captured[i].0.clone();
                for (pos, mask) in flips.into_iter().take(8) {
                    if !d.is_empty() {
                        let p = usize::from(pos) % d.len();
                        d[p] ^= mask;
                    }
                }
                if let Some(c) = cut {
                    d.truncate(usize::from(c));
                }
                h.to_responder_via(addr(src), &d, elsewhere);
            }
            Op::KeepKeys => h.kept = h.responder.open_keys(),
            Op::Advance { millis } => {
                h.now = h.now + std::time::Duration::from_millis(u64::from(millis % 600_000));
                h.responder.handle_timeout(h.now);
                h.initiator.handle_timeout(h.now);
                let mut buf = [0u8; 256];
                // The responder has nothing of its own to send: it never seals.
                assert!(h.responder.poll_transmit(h.now, &mut buf).is_none());
                h.drain_initiator();
            }
        }
    }
});
