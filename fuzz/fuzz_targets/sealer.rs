//! The endpoint's receive side, `braid_core::Sealer::incoming` (the sealer the
//! daemon's `Endpoint` runs, made from a config as `braid up` makes it), on a bond of
//! three UDP paths, with an honest peer `Sealer` at the other end.
//!
//! The peer's datagrams (its initiations, keepalives and the probes it seals for each
//! path, with that path's id in the inner header) are captured; the input is a sequence
//! of operations: raw datagrams, datagrams with a valid `4, kind, 0, 0` prefix, handshake
//! messages of the right length with a correct mac1 (they reach the budget and Noise),
//! handshakes exchanged (the peer rekeys every second), the peer sealing a probe for a
//! path, captured datagrams
//! delivered on any path from any of six sources (the peer's three addresses and three
//! strangers), as they are, altered or cut, and time passing. Answers go back to the
//! peer, whose answers come back, so handshakes (and rekeys) complete.
//!
//! Checks:
//! - `Deliver` only for bytes identical to a datagram the peer sealed, with its plaintext,
//!   at most once;
//! - a reply is never longer than the datagram it answers;
//! - the handshake budget (review H1): `handshake_flood_dropped` rises only for a
//!   148-byte initiation whose mac1 is valid;
//! - roaming (review M1): a path's peer address moves only on a delivered datagram, to
//!   its source, after at least two datagrams from that source were delivered on that
//!   path, and when nothing was delivered from the old address on that path for the dead
//!   time (300 ms with the default probe interval and `down_after`).
//!
//! The sealers' seeds and the handshake's ephemeral keys come from the OS RNG, so runs
//! are not bit-for-bit repeatable; the checks do not depend on them.
#![no_main]

#[path = "common/sealed_frame.rs"]
mod sealed;
use sealed::sealed_frame;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

use arbitrary::Arbitrary;
use braid::config::Config;
use braid::seal::seal_config;
use braid_core::crypto::envelope::{COOKIE_REPLY_LEN, INITIATION_LEN, RESPONSE_LEN};
use braid_core::crypto::PrivateKey;
use braid_core::fuzzing::MacKeys;
use braid_core::wire;
use braid_core::Instant;
use braid_core::{Incoming, Roaming, Sealer};
use libfuzzer_sys::fuzz_target;

const PATHS: usize = 3;
const TARGET_KEY: [u8; 32] = [0x44; 32];
const PEER_KEY: [u8; 32] = [0x55; 32];
const MAX_CAPTURED: usize = 64;
/// `down_after × probe_interval` with the defaults.
const ROAM_QUIET: Duration = Duration::from_millis(300);

#[derive(Arbitrary, Debug)]
enum Op {
    /// Any bytes on a path from a source.
    Raw { path: u8, src: u8, bytes: Vec<u8> },
    /// `4, kind, 0, 0` then any bytes.
    Framed {
        path: u8,
        src: u8,
        kind: u8,
        body: Vec<u8>,
    },
    /// A handshake message of the right length for its kind, with a correct mac1 for the
    /// sealer under test.
    Stamped {
        path: u8,
        src: u8,
        kind: u8,
        body: Vec<u8>,
    },
    /// Handshake datagrams waiting at either end are exchanged (the peer asks for new
    /// keys every second of the fuzzer's clock, `rekey_after_s = 1`).
    Exchange,
    /// The peer seals a probe sent on its path `path` (captured), and maybe delivers it
    /// at once on path `to.0` from source `to.1`.
    Seal {
        path: u8,
        seq: u32,
        to: Option<(u8, u8)>,
    },
    /// A captured datagram (`which` counts back from the newest) reaches a path from a
    /// source, maybe altered and cut short.
    Deliver {
        which: u8,
        path: u8,
        src: u8,
        flips: Vec<(u16, u8)>,
        cut: Option<u16>,
    },
    /// Time passes; timers run on both sides.
    Advance { millis: u16 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    ops: Vec<Op>,
}

fn config(me: &PrivateKey, peer: &PrivateKey, side: u8, extra: &str) -> Config {
    let mut text = format!(
        "[bond]\naddress = \"10.200.0.{side}/30\"\nprivate_key = \"{}\"\npeer_public_key = \"{}\"\n{extra}\n",
        me.to_base64(),
        peer.public_key().to_base64()
    );
    for i in 0..PATHS {
        let other = 3 - side;
        text.push_str(&format!(
            "[[path]]\nname = \"p{i}\"\nlocal = \"192.0.2.{side}:{}\"\nremote = \"192.0.2.{other}:{}\"\n",
            7000 + i,
            7000 + i
        ));
    }
    Config::parse(&text, "fuzz.toml").expect("the fuzz config parses")
}

/// The peer's address on path `i`.
fn peer_addr(i: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), 7000 + i as u16)
}

/// Sources 0..3 are the peer's path addresses, 3..6 strangers.
fn source(src: u8) -> SocketAddr {
    match usize::from(src) % 6 {
        i @ 0..=2 => peer_addr(i),
        i => SocketAddr::new(IpAddr::V4(Ipv4Addr::new(203, 0, 113, i as u8)), 4444),
    }
}

struct Harness {
    now: Instant,
    target: Sealer,
    peer: Sealer,
    target_macs: MacKeys,
    /// The target's peer address and roaming state per path.
    remote: [Option<SocketAddr>; PATHS],
    roam: [Roaming; PATHS],
    /// The peer's view of each path.
    peer_remote: [Option<SocketAddr>; PATHS],
    peer_roam: [Roaming; PATHS],
    captured: Vec<Vec<u8>>,
    /// Sealed by the peer → plaintext.
    sealed: HashMap<Vec<u8>, Vec<u8>>,
    delivered: HashSet<Vec<u8>>,
    /// Datagrams delivered per (path, source), and when the last one was.
    delivered_from: HashMap<(usize, SocketAddr), (u32, Instant)>,
}

impl Harness {
    fn capture(&mut self, bytes: Vec<u8>) {
        if self.captured.len() >= MAX_CAPTURED {
            self.captured.remove(0);
        }
        self.captured.push(bytes);
    }

    /// The peer's handshake datagrams go to the target on every path (as the daemon
    /// does), the target's on to the peer; a few rounds.
    fn exchange(&mut self) {
        for _ in 0..3 {
            let mut out = Vec::new();
            let mut buf = [0u8; 2048];
            while let Some(n) = self.peer.poll_transmit(self.now, &mut buf) {
                out.push(buf[..n].to_vec());
                if out.len() > 4 {
                    break;
                }
            }
            for d in out {
                self.capture(d.clone());
                for p in 0..PATHS {
                    self.to_target(p, peer_addr(p), &d);
                }
            }
            let mut back = Vec::new();
            while let Some(n) = self.target.poll_transmit(self.now, &mut buf) {
                back.push(buf[..n].to_vec());
                if back.len() > 4 {
                    break;
                }
            }
            for d in back {
                self.to_peer(0, &d);
            }
        }
    }

    /// A datagram from the target reaches the peer on path `p`; its answer comes back.
    fn to_peer(&mut self, p: usize, d: &[u8]) {
        let mut buf = d.to_vec();
        let from = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 7000 + p as u16);
        let r = self.peer.incoming(
            self.now,
            &mut self.peer_remote[p],
            &mut self.peer_roam[p],
            from,
            &mut buf,
        );
        if let Incoming::Reply(r) = r {
            let r = r.to_vec();
            self.capture(r.clone());
            self.to_target(p, peer_addr(p), &r);
        }
    }

    /// Feed one datagram to the target and check what comes out.
    fn to_target(&mut self, p: usize, src: SocketAddr, datagram: &[u8]) {
        let flood_before = self.target.counters().handshake_flood_dropped;
        let old_remote = self.remote[p];
        let mut buf = datagram.to_vec();
        let r = self.target.incoming(
            self.now,
            &mut self.remote[p],
            &mut self.roam[p],
            src,
            &mut buf,
        );
        let delivered = match r {
            Incoming::Deliver(plain) => {
                let genuine = self
                    .sealed
                    .get(datagram)
                    .expect("unauthenticated datagram delivered");
                assert_eq!(plain, &genuine[..], "delivered plaintext differs");
                assert!(
                    self.delivered.insert(datagram.to_vec()),
                    "sealed datagram delivered twice (replay)"
                );
                true
            }
            Incoming::Reply(reply) => {
                assert!(
                    reply.len() <= datagram.len(),
                    "reply longer than its request"
                );
                let reply = reply.to_vec();
                self.to_peer(p, &reply);
                false
            }
            // (A keepalive is authenticated but not delivered; it names no path, so it
            // cannot move one.)
            Incoming::Drop => false,
        };
        if self.target.counters().handshake_flood_dropped != flood_before {
            assert!(
                datagram.len() == INITIATION_LEN
                    && datagram.starts_with(&[braid_core::wire::SEALED_VERSION, 1, 0, 0])
                    && self.target_macs.check_mac1(datagram),
                "the budget was taken by something that is not a valid-mac1 initiation"
            );
        }
        if self.remote[p] != old_remote {
            assert!(
                delivered,
                "path moved by a datagram that was not authenticated"
            );
            assert_eq!(
                self.remote[p],
                Some(src),
                "path moved elsewhere than the source"
            );
            let (n, _) = self
                .delivered_from
                .get(&(p, src))
                .copied()
                .unwrap_or((0, self.now));
            assert!(n >= 1, "path moved on the first datagram from {src}");
            let old = old_remote.expect("the target's paths start with their peer's address");
            if let Some((_, last)) = self.delivered_from.get(&(p, old)) {
                assert!(
                    self.now.saturating_since(*last) >= ROAM_QUIET,
                    "path moved while its old address was heard {:?} ago",
                    self.now.saturating_since(*last)
                );
            }
        }
        if delivered {
            let e = self.delivered_from.entry((p, src)).or_insert((0, self.now));
            e.0 += 1;
            e.1 = self.now;
        }
    }
}

fuzz_target!(|input: Input| {
    // Configs and keys are made once; each input gets fresh sealers.
    static SETUP: OnceLock<(Config, Config, MacKeys)> = OnceLock::new();
    let (target_cfg, peer_cfg, target_macs) = SETUP.get_or_init(|| {
        let (tk, pk) = (
            PrivateKey::from_bytes(TARGET_KEY),
            PrivateKey::from_bytes(PEER_KEY),
        );
        (
            config(&tk, &pk, 1, ""),
            config(&pk, &tk, 2, "rekey_after_s = 1"),
            MacKeys::new(&tk.public_key()),
        )
    });
    let now = Instant::from_millis(1000);
    let target = Sealer::new(seal_config(target_cfg, now), now);
    let peer = Sealer::new(seal_config(peer_cfg, now), now);
    let mut h = Harness {
        now,
        target,
        peer,
        target_macs: target_macs.clone(),
        remote: [Some(peer_addr(0)), Some(peer_addr(1)), Some(peer_addr(2))],
        roam: Default::default(),
        peer_remote: std::array::from_fn(|i| {
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
                7000 + i as u16,
            ))
        }),
        peer_roam: Default::default(),
        captured: Vec::new(),
        sealed: HashMap::new(),
        delivered: HashSet::new(),
        delivered_from: HashMap::new(),
    };
    h.exchange();

    for op in input.ops.into_iter().take(64) {
        match op {
            Op::Raw { path, src, bytes } => {
                h.to_target(usize::from(path) % PATHS, source(src), &bytes)
            }
            Op::Framed {
                path,
                src,
                kind,
                body,
            } => {
                let d = sealed_frame(kind, &body);
                h.to_target(usize::from(path) % PATHS, source(src), &d);
            }
            Op::Stamped {
                path,
                src,
                kind,
                body,
            } => {
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
                h.target_macs.stamp(&mut d, None);
                h.to_target(usize::from(path) % PATHS, source(src), &d);
            }
            Op::Exchange => h.exchange(),
            Op::Seal { path, seq, to } => {
                let msg = wire::Message::Probe {
                    probe_seq: seq,
                    epoch: Some(1),
                };
                let mut plain = vec![0u8; msg.wire_len()];
                let hd = wire::Header {
                    path: u16::from(path) % PATHS as u16,
                    timestamp: 1,
                };
                let Ok(n) = wire::emit(&hd, &msg, &mut plain) else {
                    continue;
                };
                plain.truncate(n);
                let mut buf = vec![0u8; plain.len() + 64];
                // The peer names its path p by p (its wire path id), so the unfolded
                // datagram is `plain` byte for byte.
                if let Some(n) = h.peer.outgoing(h.now, &plain, hd.path as u8, &mut buf) {
                    let d = buf[..n].to_vec();
                    h.sealed.insert(d.clone(), plain);
                    h.capture(d.clone());
                    if let Some((p, src)) = to {
                        h.to_target(usize::from(p) % PATHS, source(src), &d);
                    }
                }
                h.exchange();
            }
            Op::Deliver {
                which,
                path,
                src,
                flips,
                cut,
            } => {
                if h.captured.is_empty() {
                    continue;
                }
                // Counted from the newest, so that `which: 0` is what was just sealed.
                let i = h.captured.len() - 1 - usize::from(which) % h.captured.len();
                let mut d = h.captured[i].clone();
                for (pos, mask) in flips.into_iter().take(8) {
                    if !d.is_empty() {
                        let p = usize::from(pos) % d.len();
                        d[p] ^= mask;
                    }
                }
                if let Some(c) = cut {
                    d.truncate(usize::from(c));
                }
                h.to_target(usize::from(path) % PATHS, source(src), &d);
            }
            Op::Advance { millis } => {
                h.now = h.now + Duration::from_millis(u64::from(millis));
                for s in [&mut h.target, &mut h.peer] {
                    if s.poll_timeout().is_some_and(|t| t <= h.now) {
                        s.handle_timeout(h.now);
                    }
                }
                h.exchange();
            }
        }
    }
});
