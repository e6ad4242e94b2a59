//! `xor`: bonding's balance-xor. Each packet is hashed with the configured transmit hash
//! ([`crate::hash::hash_ip`]) and sent on `usable[hash % usable_count]`, the usable paths
//! taken in the order given, as bonding's `slaves->arr[hash % count]` over its usable
//! slaves. A flow therefore stays on one path while the set of usable paths does not change.
use crate::hash::{hash_ip, HashPolicy};
use crate::sched::{Choice, PathState, Scheduler};
use crate::Instant;

/// bonding's balance-xor with a transmit hash policy.
#[derive(Debug, Default)]
pub struct Xor {
    hash: HashPolicy,
}

impl Scheduler for Xor {
    fn name(&self) -> &'static str {
        "xor"
    }

    fn choose(&mut self, _now: Instant, packet: &[u8], paths: &[PathState]) -> Choice {
        let count = paths.iter().filter(|p| p.usable).count();
        if count == 0 {
            return Choice::Drop;
        }
        // u32 % count as the kernel does (count <= usize::MAX, so the cast is lossless).
        let index = (u64::from(hash_ip(self.hash, packet)) % count as u64) as usize;
        paths
            .iter()
            .filter(|p| p.usable)
            .nth(index)
            .map_or(Choice::Drop, |p| Choice::One(p.id))
    }
}

impl Xor {
    /// A balance-xor scheduler hashing with `hash`.
    pub fn new(hash: HashPolicy) -> Self {
        Self { hash }
    }

    /// The transmit hash policy in use.
    pub fn policy(&self) -> HashPolicy {
        self.hash
    }
}
