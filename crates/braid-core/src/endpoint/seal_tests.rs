use std::net::SocketAddr;

use core::time::Duration;

use super::*;
use crate::crypto::{OsRng, PrivateKey, PublicKey};
use crate::plain;

/// A plain sealer's config (tag `tag`).
fn plain_config(tag: u64) -> SealConfig {
    SealConfig {
        sealing: Sealing::None,
        plain_tag: tag,
        roam_quiet: Duration::from_millis(300),
    }
}

fn keyed(mine: &PrivateKey, peer: PublicKey) -> SealConfig {
    let seed = *PrivateKey::generate(&mut OsRng).as_bytes();
    SealConfig {
        sealing: Sealing::Keys {
            tunnel: Box::new(TunnelConfig::new(mine.clone(), peer, seed)),
            rekey_every: None,
        },
        plain_tag: 1,
        roam_quiet: Duration::from_millis(300),
    }
}

/// What `s` sends for `d` on a UDP path (sealed datagrams name the path by the low byte
/// of `d`'s path id, as if the endpoint had numbered its paths so).
fn out(s: &mut Sealer, now: Instant, d: &[u8]) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; d.len() + 64];
    let wire = crate::wire::parse(d).map_or(0, |(h, _)| h.path as u8);
    let n = s.outgoing(now, d, wire, &mut buf)?;
    buf.truncate(n);
    Some(buf)
}

/// A version-1 Data datagram of path 0 carrying `payload` (what a bond emits).
fn data(seq: u64, payload: &[u8]) -> Vec<u8> {
    let msg = crate::wire::Message::Data {
        seq,
        path_seq: seq as u32,
        payload,
    };
    let mut buf = vec![0u8; msg.wire_len()];
    let h = crate::wire::Header {
        path: 0,
        timestamp: 1,
    };
    crate::wire::emit(&h, &msg, &mut buf).expect("fits");
    buf
}

/// The handshake datagram `s` sends next.
fn poll(s: &mut Sealer, now: Instant) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 2048];
    let n = s.poll_transmit(now, &mut buf)?;
    buf.truncate(n);
    Some(buf)
}
fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// `d` from the configured remote `src` of a plain path.
fn recv<'a>(s: &mut Sealer, src: &str, d: &'a mut [u8]) -> Incoming<'a> {
    let mut remote = Some(addr(src));
    s.incoming(
        Instant::ZERO,
        &mut remote,
        &mut Roaming::default(),
        addr(src),
        d,
    )
}

/// Two plain sealers that know each other's tags: `a`'s first datagram is answered
/// with a hint, which `a` accepts.
fn plain_pair(now: Instant) -> (Sealer, Sealer) {
    let (mut a, mut b) = (
        Sealer::new(plain_config(0xa), now),
        Sealer::new(plain_config(0xb), now),
    );
    let mut d = out(&mut a, now, b"hello").expect("plain").to_vec();
    let Incoming::Reply(hint) = recv(&mut b, "127.0.0.1:7000", &mut d) else {
        panic!("b did not hint");
    };
    let mut hint = hint.to_vec();
    let r = recv(&mut a, "127.0.0.1:7001", &mut hint);
    assert_eq!(r, Incoming::Drop, "a hint is nothing for the bond");
    (a, b)
}

#[test]
fn plain_datagrams_need_the_receivers_tag() {
    let now = Instant::ZERO;
    let (mut a, mut b) = plain_pair(now);
    let mut d = out(&mut a, now, b"data").unwrap().to_vec();
    assert_eq!(d.len(), 4 + TAG_HEADER_LEN);
    assert_eq!(
        recv(&mut b, "127.0.0.1:7000", &mut d),
        Incoming::Deliver(&b"data"[..])
    );
    // Review M4/M3: a spoofed data datagram from the configured remote, with a far
    // sequence number, without B's tag (bare, or in an envelope with a guessed tag):
    // refused, never delivered; B's view of A is unchanged.
    let mut far = vec![0u8; crate::wire::DATA_HEADER_LEN + 20];
    let h = crate::wire::Header {
        path: 0,
        timestamp: 0,
    };
    crate::wire::emit_data_header(&h, 1 << 40, 1, &mut far).unwrap();
    let mut guessed = vec![plain::TAGGED_VERSION];
    guessed.extend_from_slice(&7u64.to_be_bytes());
    guessed.extend_from_slice(&8u64.to_be_bytes());
    guessed.extend_from_slice(&far);
    for forged in [&mut far, &mut guessed] {
        let r = recv(&mut b, "127.0.0.1:7000", forged);
        assert!(!matches!(r, Incoming::Deliver(_)));
    }
    let t = b.tags.counters();
    assert_eq!((t.malformed, t.wrong_tag, t.peer_tag_changes), (1, 2, 1));
    let mut d = out(&mut a, now, b"still").unwrap().to_vec();
    assert_eq!(
        recv(&mut b, "127.0.0.1:7000", &mut d),
        Incoming::Deliver(&b"still"[..])
    );
}

#[test]
fn a_restarted_plain_peer_is_heard_after_one_hint() {
    let now = Instant::ZERO;
    let (_a, mut b) = plain_pair(now);
    let mut a2 = Sealer::new(plain_config(0xa2), now);
    // B goes on naming the old run's tag: A2 refuses it and hints.
    let mut d = out(&mut b, now, b"to old a").unwrap().to_vec();
    let Incoming::Reply(hint) = recv(&mut a2, "127.0.0.1:7001", &mut d) else {
        panic!("a2 did not hint");
    };
    let mut hint = hint.to_vec();
    assert_eq!(recv(&mut b, "127.0.0.1:7000", &mut hint), Incoming::Drop);
    // B now names A2's tag: A2 accepts and learns B's.
    let mut d = out(&mut b, now, b"to a2").unwrap().to_vec();
    assert_eq!(
        recv(&mut a2, "127.0.0.1:7001", &mut d),
        Incoming::Deliver(&b"to a2"[..])
    );
    let mut d = out(&mut a2, now, b"back").unwrap().to_vec();
    assert_eq!(
        recv(&mut b, "127.0.0.1:7000", &mut d),
        Incoming::Deliver(&b"back"[..])
    );
    assert_eq!(b.tags.peer(), Some(a2.tags.own()));
}

#[test]
fn none_passes_lines_and_filters_sources() {
    let now = Instant::ZERO;
    let mut s = Sealer::new(plain_config(0xc), now);
    assert!(!s.enabled());
    let mut buf = [0u8; 8];
    assert_eq!(s.outgoing_line(now, b"abc", 0, &mut buf), Some(3));
    assert_eq!(&buf[..3], b"abc");
    let mut line = *b"abc";
    assert_eq!(
        s.incoming_line(now, &mut line),
        Incoming::Deliver(&b"abc"[..])
    );
    assert_eq!(poll(&mut s, now), None);
    let mut remote = Some(addr("127.0.0.1:7001"));
    let mut d = out(&mut s, now, b"xyz").unwrap().to_vec();
    // Its own datagram names no receiver's tag it knows: refused (and hinted).
    let r = s.incoming(
        now,
        &mut remote,
        &mut Roaming::default(),
        addr("127.0.0.1:7001"),
        &mut d,
    );
    assert!(matches!(r, Incoming::Reply(_)));
    assert_eq!(
        s.incoming(
            now,
            &mut remote,
            &mut Roaming::default(),
            addr("127.0.0.1:9999"),
            &mut d
        ),
        Incoming::Drop
    );
    assert_eq!(s.counters().unknown_source, 1);
    assert_eq!(
        remote,
        Some(addr("127.0.0.1:7001")),
        "no roaming without keys"
    );
}

/// Two sealers talk; the handshake completes, data flows, a forgery and a replay are
/// refused and counted, and an authenticated datagram from a new address roams.
#[test]
fn handshake_data_replay_roaming() {
    let (ka, kb) = (
        PrivateKey::generate(&mut OsRng),
        PrivateKey::generate(&mut OsRng),
    );
    let mut now = Instant::ZERO;
    let mut a = Sealer::new(keyed(&ka, kb.public_key()), now);
    let mut b = Sealer::new(keyed(&kb, ka.public_key()), now);
    let (aa, ba) = (addr("127.0.0.1:7000"), addr("127.0.0.1:7001"));
    let (mut a_remote, mut b_remote) = (Some(ba), Some(aa));
    // Nothing to send before the handshake.
    assert_eq!(out(&mut a, now, &data(1, b"early")), None);
    assert_eq!(a.counters().no_session_dropped, 1);
    // Shuttle handshake datagrams until both can send.
    for _ in 0..10 {
        now += Duration::from_millis(1);
        let mut to_b = Vec::new();
        while let Some(d) = poll(&mut a, now) {
            to_b.push(d.to_vec());
        }
        let mut to_a = Vec::new();
        while let Some(d) = poll(&mut b, now) {
            to_a.push(d.to_vec());
        }
        for mut d in to_b {
            if let Incoming::Reply(r) =
                b.incoming(now, &mut b_remote, &mut Roaming::default(), aa, &mut d)
            {
                to_a.push(r.to_vec());
            }
        }
        for mut d in to_a {
            if let Incoming::Reply(r) =
                a.incoming(now, &mut a_remote, &mut Roaming::default(), ba, &mut d)
            {
                let mut r = r.to_vec();
                let _ = b.incoming(now, &mut b_remote, &mut Roaming::default(), aa, &mut r);
            }
        }
    }
    let hello = data(2, b"hello");
    let mut sealed = out(&mut a, now, &hello).expect("session").to_vec();
    assert_eq!(sealed.len(), hello.len() + SEALED_DATA_OVERHEAD);
    let copy = sealed.clone();
    let mut b_roam = Roaming::default();
    assert_eq!(
        b.incoming(now, &mut b_remote, &mut b_roam, aa, &mut sealed),
        Incoming::Deliver(&hello[..])
    );
    // Replayed.
    let mut again = copy.clone();
    assert_eq!(
        b.incoming(now, &mut b_remote, &mut Roaming::default(), aa, &mut again),
        Incoming::Drop
    );
    assert_eq!(b.tunnel_counter("replayed"), Some(1));
    // Forged (one bit flipped in the ciphertext), from an unknown address.
    let mut forged = out(&mut a, now, &data(3, b"world")).unwrap().to_vec();
    forged[HEADER_BYTE] ^= 1;
    let stranger = addr("127.0.0.1:9");
    assert_eq!(
        b.incoming(
            now,
            &mut b_remote,
            &mut Roaming::default(),
            stranger,
            &mut forged
        ),
        Incoming::Drop
    );
    assert_eq!(b.tunnel_counter("bad_tag"), Some(1));
    assert_eq!(b.counters().unknown_source, 1);
    assert_eq!(b_remote, Some(aa), "a forgery does not move the peer");
    // Authenticated from a new port (a NAT rebinding): delivered at once, but the
    // path moves only on a second datagram from there once the old address has been
    // silent for the dead time (3 x 100 ms by default).
    let moved = addr("127.0.0.1:7777");
    let mut from_moved = |b: &mut Sealer, at: Instant, remote: &mut Option<SocketAddr>| {
        let mut d = out(&mut a, at, &probe(0)).unwrap().to_vec();
        assert!(matches!(
            b.incoming(at, remote, &mut b_roam, moved, &mut d),
            Incoming::Deliver(_)
        ));
    };
    from_moved(&mut b, now, &mut b_remote);
    from_moved(&mut b, now + Duration::from_millis(100), &mut b_remote);
    assert_eq!(b_remote, Some(aa));
    assert_eq!(b.counters().roam_held, 2);
    now += Duration::from_millis(300);
    from_moved(&mut b, now, &mut b_remote);
    assert_eq!(b_remote, Some(moved));
    assert_eq!(b.counters().roamed, 1);
    assert!(b.established(now));
    assert_eq!(b.tunnel_counter("bad_tag"), Some(1));
}

/// Two sealers with a session, talking over two paths `p` and `q` (one sealer per
/// end spans every path); `b`'s view of each path.
struct TwoPaths {
    a: Sealer,
    b: Sealer,
    /// b's peer address and roaming state for p and q.
    remote: [Option<SocketAddr>; 2],
    roam: [Roaming; 2],
    now: Instant,
}

/// a's source addresses on p and q.
const A_P: &str = "192.0.2.1:7000";
const A_Q: &str = "198.51.100.1:7000";

impl TwoPaths {
    fn new() -> TwoPaths {
        let (ka, kb) = (
            PrivateKey::generate(&mut OsRng),
            PrivateKey::generate(&mut OsRng),
        );
        let now = Instant::from_millis(1000);
        let mut a = Sealer::new(keyed(&ka, kb.public_key()), now);
        let mut b = Sealer::new(keyed(&kb, ka.public_key()), now);
        let init = poll(&mut a, now).expect("initiation").to_vec();
        let _ = poll(&mut b, now);
        let mut init = init;
        let mut roam = Roaming::default();
        let mut r = Some(addr(A_P));
        let Incoming::Reply(resp) = b.incoming(now, &mut r, &mut roam, addr(A_P), &mut init) else {
            panic!("no response");
        };
        let mut resp = resp.to_vec();
        let _ = a.incoming(
            now,
            &mut Some(addr("10.0.0.2:1")),
            &mut roam,
            addr("10.0.0.2:1"),
            &mut resp,
        );
        let ka = poll(&mut a, now).expect("keepalive").to_vec();
        let mut t = TwoPaths {
            a,
            b,
            remote: [Some(addr(A_P)), Some(addr(A_Q))],
            roam: [Roaming::default(), Roaming::default()],
            now,
        };
        let _ = t.deliver_b(0, A_P, ka);
        t
    }

    /// A probe a seals now on path `i` (its inner header names a's path id `i`).
    fn sealed(&mut self, i: u16) -> Vec<u8> {
        out(&mut self.a, self.now, &probe(i))
            .expect("session")
            .to_vec()
    }

    /// `d` reaches b's socket of path `i` from `src`: delivered?
    fn deliver_b(&mut self, i: usize, src: &str, mut d: Vec<u8>) -> bool {
        let r = self.b.incoming(
            self.now,
            &mut self.remote[i],
            &mut self.roam[i],
            addr(src),
            &mut d,
        );
        matches!(r, Incoming::Deliver(_))
    }
}

/// A version-1 probe sent on the sender's path `path`.
fn probe(path: u16) -> Vec<u8> {
    let msg = crate::wire::Message::Probe {
        probe_seq: 7,
        epoch: Some(1),
    };
    let mut buf = vec![0u8; msg.wire_len()];
    let h = crate::wire::Header { path, timestamp: 1 };
    let n = crate::wire::emit(&h, &msg, &mut buf).expect("a probe fits");
    buf.truncate(n);
    buf
}

/// Review M1: someone who sees path p copies a's datagrams on p and delivers them to
/// b's socket of path q from a third address, before the originals. They are
/// authenticated (and, arriving first, fresh), but q's peer address stays where it
/// is, as long as a is still heard from there (every probe interval), for a single
/// copy and for a stream of them.
#[test]
fn datagrams_copied_from_another_path_do_not_move_a_path() {
    let mut t = TwoPaths::new();
    let third = "203.0.113.66:4444";
    // Both paths carry a's probes from a's address on each.
    for _ in 0..3 {
        let (dp, dq) = (t.sealed(0), t.sealed(1));
        assert!(t.deliver_b(0, A_P, dp) && t.deliver_b(1, A_Q, dq));
        t.now += Duration::from_millis(100);
    }
    // One copy of a datagram a sent on p, delivered on q from the third address first.
    let on_p = t.sealed(0);
    assert!(
        t.deliver_b(1, third, on_p.clone()),
        "authenticated and fresh"
    );
    assert_eq!(t.remote[1], Some(addr(A_Q)), "moved by one copied datagram");
    assert!(!t.deliver_b(0, A_P, on_p), "the original is now a replay");
    // A stream of copies, 10 a probe interval for 3 s: first while a goes on probing
    // on q, then while q is silent (its inbound direction broken, say).
    for n in 0..600 {
        let d = t.sealed(0);
        assert!(t.deliver_b(1, third, d));
        if n < 300 && n % 10 == 0 {
            let d = t.sealed(1);
            assert!(t.deliver_b(1, A_Q, d));
        }
        t.now += Duration::from_millis(10);
    }
    assert_eq!(t.remote[1], Some(addr(A_Q)), "moved by a stream of copies");
    assert_eq!(t.remote[0], Some(addr(A_P)));
    assert_eq!(t.b.counters().roamed, 0);
    assert!(t.b.counters().roam_held >= 601);
}

/// A NAT rebinding still moves the path: a's address on q changes and the old one
/// falls silent; a's probes from the new address move q after the dead time (300 ms
/// by default), and copies of p's datagrams from elsewhere meanwhile change nothing.
#[test]
fn nat_rebinding_moves_the_path_after_the_dead_time() {
    let mut t = TwoPaths::new();
    let d = t.sealed(1);
    assert!(t.deliver_b(1, A_Q, d));
    let rebound = "198.51.100.1:40001";
    let start = t.now;
    let mut moved_at = None;
    for n in 0..20 {
        t.now = start + Duration::from_millis(100 * (n + 1));
        let d = t.sealed(1);
        assert!(t.deliver_b(1, rebound, d));
        if t.remote[1] == Some(addr(rebound)) {
            moved_at = Some(t.now.saturating_since(start));
            break;
        }
        let copy = t.sealed(0);
        assert!(t.deliver_b(1, "203.0.113.66:4444", copy));
    }
    assert_eq!(t.remote[1], Some(addr(rebound)));
    let moved_at = moved_at.expect("moved");
    assert!(
        moved_at >= Duration::from_millis(300) && moved_at <= Duration::from_millis(400),
        "{moved_at:?}"
    );
    assert_eq!(t.b.counters().roamed, 1);
}

/// A peer whose configured `remote` is wrong (a NATed client) is found on its second
/// authenticated datagram: the configured address was never heard from.
#[test]
fn a_path_never_heard_from_its_configured_address_moves_on_the_second_datagram() {
    let mut t = TwoPaths::new();
    let natted = "198.51.100.9:61000";
    let d = t.sealed(1);
    assert!(t.deliver_b(1, natted, d));
    assert_eq!(t.remote[1], Some(addr(A_Q)));
    t.now += Duration::from_millis(100);
    let d = t.sealed(1);
    assert!(t.deliver_b(1, natted, d));
    assert_eq!(t.remote[1], Some(addr(natted)));
}

/// Initiations from keys the sealer does not know (valid mac1: the sender knows its
/// public key) at one instant: the budget's burst reaches the tunnel (a DH each, then
/// `unknown_peer`), the rest are dropped after the mac1 check. Junk of any length
/// takes no token, nor do data datagrams.
#[test]
fn handshake_budget_bounds_a_flood() {
    let k = PrivateKey::generate(&mut OsRng);
    let now = Instant::ZERO;
    let mut s = Sealer::new(
        keyed(&k, PrivateKey::generate(&mut OsRng).public_key()),
        now,
    );
    let mut remote = Some(addr("127.0.0.1:7001"));
    for _ in 0..500 {
        let mut d = [4u8, 1, 0, 0, 9, 9, 9, 9];
        assert_eq!(
            s.incoming(
                now,
                &mut remote,
                &mut Roaming::default(),
                addr("127.0.0.1:5"),
                &mut d
            ),
            Incoming::Drop
        );
    }
    assert_eq!(s.tunnel_counter("truncated"), Some(500));
    assert_eq!(s.counters().handshake_flood_dropped, 0);
    // From many addresses, so that the per-source limit is not what stops them.
    let init = stranger_initiation(k.public_key());
    for i in 0..500u32 {
        let mut d = init.clone();
        let src = SocketAddr::from(([10, 9, (i / 250) as u8, (i % 250) as u8], 5));
        let _ = s.incoming(now, &mut remote, &mut Roaming::default(), src, &mut d);
    }
    assert_eq!(s.tunnel_counter("unknown_peer"), Some(100));
    assert_eq!(s.counters().handshake_flood_dropped, 400);
    // A second later the budget is full again; data datagrams never use it.
    let later = now + Duration::from_secs(1);
    let mut d = init.clone();
    // (Still under load from the last second: answered with a cookie, no DH.)
    assert!(matches!(
        s.incoming(later, &mut remote, &mut Roaming::default(), addr("10.9.9.9:5"), &mut d),
        Incoming::Reply(r) if r.len() == 64
    ));
    assert_eq!(s.tunnel_counter("cookie_replies_sent"), Some(1));
    let mut t = [4u8, 0x10, 0, 0];
    let _ = s.incoming(
        later,
        &mut remote,
        &mut Roaming::default(),
        addr("127.0.0.1:5"),
        &mut t,
    );
    assert_eq!(s.counters().handshake_flood_dropped, 400);
}

/// An initiation to `to` from a fresh key: valid mac1, unknown static key.
fn stranger_initiation(to: PublicKey) -> Vec<u8> {
    let mut t = crate::crypto::Tunnel::new(TunnelConfig::new(
        PrivateKey::generate(&mut OsRng),
        to,
        [5; 32],
    ));
    let now = Instant::from_micros(1);
    t.start_handshake(now);
    let mut buf = vec![0u8; 256];
    let n = t.poll_transmit(now, &mut buf).expect("an initiation").len;
    buf.truncate(n);
    buf
}

/// Two sealers over one path with `delay` each way, stepped 1 ms at a time from
/// their creation; `junk(now, n)` gives the junk datagrams each end receives in the
/// millisecond `n` besides. Returns the first time both ends can send, if any within
/// `limit`.
fn run_pair(
    delay: Duration,
    limit: Duration,
    junk: &mut dyn FnMut(u64) -> Vec<Vec<u8>>,
) -> (Option<Duration>, Sealer, Sealer) {
    let (ka, kb) = (
        PrivateKey::generate(&mut OsRng),
        PrivateKey::generate(&mut OsRng),
    );
    let t0 = Instant::from_millis(1000);
    let mut a = Sealer::new(keyed(&ka, kb.public_key()), t0);
    let mut b = Sealer::new(keyed(&kb, ka.public_key()), t0);
    let (aa, ba) = (addr("127.0.0.1:7000"), addr("127.0.0.1:7001"));
    let (mut a_remote, mut b_remote) = (Some(ba), Some(aa));
    // (arrival, to b?, bytes)
    let mut wire: Vec<(Instant, bool, Vec<u8>)> = Vec::new();
    let stranger = addr("192.0.2.99:4444");
    let steps = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
    for n in 0..steps {
        let now = t0 + Duration::from_millis(n);
        for s in [&mut a, &mut b] {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
        while let Some(d) = poll(&mut a, now) {
            wire.push((now + delay, true, d.to_vec()));
        }
        while let Some(d) = poll(&mut b, now) {
            wire.push((now + delay, false, d.to_vec()));
        }
        for j in junk(n) {
            let (mut x, mut y) = (j.clone(), j);
            let _ = a.incoming(
                now,
                &mut a_remote,
                &mut Roaming::default(),
                stranger,
                &mut x,
            );
            let _ = b.incoming(
                now,
                &mut b_remote,
                &mut Roaming::default(),
                stranger,
                &mut y,
            );
        }
        let due: Vec<_> = wire.iter().filter(|w| w.0 <= now).cloned().collect();
        wire.retain(|w| w.0 > now);
        for (_, to_b, mut d) in due {
            let (s, remote, src) = if to_b {
                (&mut b, &mut b_remote, aa)
            } else {
                (&mut a, &mut a_remote, ba)
            };
            if let Incoming::Reply(r) =
                s.incoming(now, remote, &mut Roaming::default(), src, &mut d)
            {
                wire.push((now + delay, !to_b, r.to_vec()));
            }
        }
        // Both ends send (as the bond's probes do); a keepalive or data confirms.
        for (s, to_b) in [(&mut a, true), (&mut b, false)] {
            if let Some(d) = out(s, now, b"probe") {
                wire.push((now + delay, to_b, d.to_vec()));
            }
        }
        if a.established(now) && b.established(now) {
            return (Some(now.saturating_since(t0)), a, b);
        }
    }
    (None, a, b)
}

/// Junk handshake datagrams (`4, 1` and `4, 2`, of the right lengths and not), 50 per
/// ms at each end, from before the first initiation: the handshake still completes in
/// one round trip, and none of the junk took a budget token (review H1).
#[test]
fn junk_handshake_flood_does_not_stop_the_handshake() {
    let mut junk = |n: u64| -> Vec<Vec<u8>> {
        (0..50u64)
            .map(|k| {
                let x = n * 50 + k;
                let len = match x % 4 {
                    0 => 2,
                    1 => 148,
                    2 => 92,
                    _ => 64,
                };
                let mut d: Vec<u8> = (0..len).map(|i| (x as u8) ^ (i as u8)).collect();
                d[0] = 4;
                d[1] = if (x / 4).is_multiple_of(2) { 1 } else { 2 };
                if len > 4 {
                    d[2] = 0;
                    d[3] = 0;
                }
                d
            })
            .collect()
    };
    let delay = Duration::from_millis(10);
    let (up, a, b) = run_pair(delay, Duration::from_secs(3), &mut junk);
    let up = up.expect("the handshake completed under the flood");
    assert!(up <= Duration::from_millis(50), "{up:?}");
    for s in [&a, &b] {
        assert_eq!(s.counters().handshake_flood_dropped, 0);
        let seen = |n| s.tunnel_counter(n).unwrap_or(0);
        assert!(seen("bad_mac1") > 100 && seen("unknown_receiver_index") > 100);
    }
}

/// First byte after the 8-byte header: inside the ciphertext.
const HEADER_BYTE: usize = 8;

/// The sealed data datagram, field by field (wire version 4): its 8-byte header is pinned
/// byte for byte, and a change to any field, in the clear header (the message type in the
/// kind byte, the receiver index, the counter) or folded inside the ciphertext (path id,
/// timestamp, seq, path_seq), to the payload or to the tag, is refused by the receiver
/// under the name of what it breaks, never delivered; the genuine datagram still opens
/// afterwards (nothing it was refused for moved the replay window).
#[test]
fn every_field_of_a_sealed_data_datagram_is_authenticated() {
    let (up, mut a, mut b) = run_pair(
        Duration::from_millis(1),
        Duration::from_millis(100),
        &mut |_| Vec::new(),
    );
    let now = Instant::from_millis(1000) + up.expect("a session") + Duration::from_millis(10);
    let aa = addr("127.0.0.1:7000");
    // (A seq below 2^32: a fresh receiver rebuilds the low 32 bits as they are.)
    let d = data(0x89ab_cdef, b"payload");
    let sealed = out(&mut a, now, &d).expect("sealed");
    let n = sealed.len();
    assert_eq!(n, d.len() + SEALED_DATA_OVERHEAD);
    assert_eq!(SEALED_DATA_OVERHEAD, 17);
    // Version, kind (0x10 + Data), the low 16 bits of b's index, the low 32 bits of a's
    // counter (0, or 1 when a initiated and sent a keepalive first).
    let index = b
        .tunnel()
        .and_then(|t| t.current_session(now))
        .map_or(0, |s| s.0 as u16);
    let counter = a.tunnel().map_or(0, |t| t.counters().sealed - 1) as u32;
    assert!(counter <= 1);
    assert_eq!(
        &sealed[..HEADER_LEN],
        &[
            &[4u8, 0x10][..],
            &index.to_be_bytes(),
            &counter.to_be_bytes()
        ]
        .concat()[..]
    );
    let fields: [(&str, core::ops::Range<usize>); 9] = [
        ("kind", 1..2),
        ("receiver index", 2..4),
        ("counter", 4..8),
        ("path id", 8..9),
        ("timestamp", 9..13),
        ("seq", 13..17),
        ("path_seq", 17..21),
        ("payload", 21..n - 16),
        ("tag", n - 16..n),
    ];
    let mut refused = 0;
    for (name, range) in fields {
        for i in range {
            for bit in [0x01u8, 0x80] {
                let mut bad = sealed.clone();
                bad[i] ^= bit;
                let mut remote = Some(aa);
                let r = b.incoming(now, &mut remote, &mut Roaming::default(), aa, &mut bad);
                assert_eq!(r, Incoming::Drop, "{name}: byte {i} ^ {bit:#x}");
                let why = b.take_rejected();
                let want: &[Rejected] = match (name, bit) {
                    // Another message type: the type is associated data.
                    ("kind", 0x01) => &[Rejected::BadTag],
                    // Not a transport kind at all.
                    ("kind", _) => &[Rejected::Malformed],
                    ("receiver index", _) => &[Rejected::UnknownReceiverIndex],
                    // Another counter: a fresh one fails the tag (the nonce is the
                    // counter); one b has accepted (a's keepalive, when a sent one) or
                    // one out of the window (the top bit: 2^31 from the window's top)
                    // is refused by the window first.
                    ("counter", _) => &[Rejected::Replayed, Rejected::BadTag],
                    _ => &[Rejected::BadTag],
                };
                assert!(
                    why.is_some_and(|w| want.contains(&w)),
                    "{name}: byte {i} ^ {bit:#x}: {why:?}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 2 * n - 2);
    assert_eq!(b.counters().malformed, 0);
    let mut good = sealed.clone();
    let mut remote = Some(aa);
    assert_eq!(
        b.incoming(now, &mut remote, &mut Roaming::default(), aa, &mut good),
        Incoming::Deliver(&d[..])
    );
}
