//! CPU cost of the sealed envelope: seal and open one 1400-byte version-1 datagram (the
//! AEAD, ChaCha20-Poly1305 or AES-256-GCM, plus header, replay window and session
//! lookup), and one full handshake (two X25519 key pairs' worth of DH on each side).
//!
//! Run: `cargo bench -p braid-core --bench crypto`

use braid_core::crypto::{Cipher, Opened, PrivateKey, Tunnel, TunnelConfig};
use braid_core::Instant;
use std::net::SocketAddr;

fn main() {
    divan::main();
}

const PLAIN: usize = 1400;

const CIPHERS: [Cipher; 2] = Cipher::ALL;

fn established(cipher: Cipher) -> (Tunnel, Tunnel) {
    let (ka, kb) = (
        PrivateKey::from_bytes([1; 32]),
        PrivateKey::from_bytes([2; 32]),
    );
    let mut ca = TunnelConfig::new(ka.clone(), kb.public_key(), [1; 32]);
    let mut cb = TunnelConfig::new(kb, ka.public_key(), [2; 32]);
    (ca.cipher, cb.cipher) = (cipher, cipher);
    let mut a = Tunnel::new(ca);
    let mut b = Tunnel::new(cb);
    handshake(&mut a, &mut b);
    (a, b)
}

fn src() -> SocketAddr {
    SocketAddr::from(([192, 0, 2, 1], 5000))
}

fn handshake(a: &mut Tunnel, b: &mut Tunnel) {
    let now = Instant::from_millis(1);
    let mut buf = [0u8; 256];
    a.start_handshake(now);
    let Some(tx) = a.poll_transmit(now, &mut buf) else {
        return;
    };
    let mut msg = buf[..tx.len].to_vec();
    let resp = match b.open(now, src(), &mut msg) {
        Ok(Opened::Reply(r)) => r.to_vec(),
        _ => return,
    };
    let mut resp = resp;
    let _ = a.open(now, src(), &mut resp);
    if let Some(tx) = a.poll_transmit(now, &mut buf) {
        let mut ka = buf[..tx.len].to_vec();
        let _ = b.open(now, src(), &mut ka);
    }
}

/// Seal at A and open at B, in place, one 1400-byte datagram per iteration.
#[divan::bench(args = CIPHERS)]
fn seal_open_1400(bencher: divan::Bencher, cipher: Cipher) {
    let (mut a, mut b) = established(cipher);
    let now = Instant::from_millis(2);
    let mut buf = vec![0x45u8; PLAIN + 32];
    bencher
        .counter(divan::counter::BytesCount::new(PLAIN))
        .bench_local(|| {
            let n = a.seal(now, 0, &mut buf, PLAIN).unwrap_or(0);
            match b.open(now, src(), &mut buf[..n]) {
                Ok(Opened::Data { plaintext, .. }) => plaintext.len(),
                _ => 0,
            }
        });
}

/// Seal only.
#[divan::bench(args = CIPHERS)]
fn seal_1400(bencher: divan::Bencher, cipher: Cipher) {
    let (mut a, _b) = established(cipher);
    let now = Instant::from_millis(2);
    let mut buf = vec![0x45u8; PLAIN + 32];
    bencher
        .counter(divan::counter::BytesCount::new(PLAIN))
        .bench_local(|| a.seal(now, 0, &mut buf, PLAIN).unwrap_or(0));
}

/// A whole handshake: initiation, response, keepalive.
#[divan::bench(sample_count = 20)]
fn full_handshake(bencher: divan::Bencher) {
    let (ka, kb) = (
        PrivateKey::from_bytes([1; 32]),
        PrivateKey::from_bytes([2; 32]),
    );
    bencher.bench_local(|| {
        let mut a = Tunnel::new(TunnelConfig::new(ka.clone(), kb.public_key(), [1; 32]));
        let mut b = Tunnel::new(TunnelConfig::new(kb.clone(), ka.public_key(), [2; 32]));
        handshake(&mut a, &mut b);
        a.is_established(Instant::from_millis(1))
    });
}
