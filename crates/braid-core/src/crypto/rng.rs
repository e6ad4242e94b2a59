//! A small deterministic RNG for the crypto state machine: BLAKE2s in counter mode over a
//! 32-byte seed the driver supplies (from `getrandom` in the daemon, a constant in tests).
//! Used for session indexes, retry jitter, cookie secrets and cookie nonces; the Noise
//! ephemeral keys come from `snow`'s own OS RNG.

use blake2::digest::{FixedOutput, KeyInit, Mac};
use blake2::Blake2sMac256;
use zeroize::Zeroize;

/// See the module documentation.
pub(crate) struct Rng {
    key: [u8; 32],
    counter: u64,
}

impl Rng {
    /// From a seed.
    pub(crate) fn new(seed: [u8; 32]) -> Self {
        Self {
            key: seed,
            counter: 0,
        }
    }

    fn block(&mut self) -> [u8; 32] {
        self.counter = self.counter.wrapping_add(1);
        // A fixed 32-byte key: BLAKE2s-MAC's key size, so keying cannot fail.
        let mut m = <Blake2sMac256 as KeyInit>::new(&self.key.into());
        Mac::update(&mut m, &self.counter.to_le_bytes());
        m.finalize_fixed().into()
    }

    /// Fill `out` with pseudo-random bytes.
    pub(crate) fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(32) {
            let mut b = self.block();
            // `chunks_mut(32)`: a chunk is at most the block's 32 bytes.
            let (part, _) = b.split_at(chunk.len());
            chunk.copy_from_slice(part);
            b.zeroize();
        }
    }

    /// A pseudo-random u32.
    pub(crate) fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill(&mut b);
        u32::from_le_bytes(b)
    }

    /// A pseudo-random u64 below `bound` (0 if `bound` is 0); the bias is negligible for
    /// the small bounds used here.
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        let mut b = [0u8; 8];
        self.fill(&mut b);
        u64::from_le_bytes(b).checked_rem(bound).unwrap_or(0)
    }
}

impl Drop for Rng {
    fn drop(&mut self) {
        self.key.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_seed_dependent() {
        let (mut a, mut b, mut c) = (Rng::new([1; 32]), Rng::new([1; 32]), Rng::new([2; 32]));
        let (x, y, z) = (a.next_u32(), b.next_u32(), c.next_u32());
        assert_eq!(x, y);
        assert_ne!(x, z);
        assert_ne!(a.next_u32(), x);
        let mut buf = [0u8; 70];
        a.fill(&mut buf);
        assert!(buf[64..].iter().any(|&v| v != 0));
        assert!((0..100).all(|_| a.below(333) < 333));
        assert_eq!(a.below(0), 0);
    }
}
