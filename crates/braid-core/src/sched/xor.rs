//! `xor`: bonding's balance-xor. Each packet is hashed with the configured transmit hash
//! ([`crate::hash::hash_ip`] for a TUN's IP packet, [`crate::hash::hash_frame`] for a TAP's
//! Ethernet frame, real MACs, tags and non-IP EtherTypes included) and sent on `usable[hash % usable_count]`, the usable paths
//! taken in the order given, as bonding's `slaves->arr[hash % count]` over its usable
//! slaves. A flow therefore stays on one path while the set of usable paths does not change.
use crate::hash::HashPolicy;
use crate::sched::{Choice, PathState, Scheduler};
use crate::{Frames, Instant};

/// bonding's balance-xor with a transmit hash policy.
#[derive(Debug, Default)]
pub(super) struct Xor {
    hash: HashPolicy,
    frames: Frames,
}

impl Scheduler for Xor {
    fn name(&self) -> &'static str {
        "xor"
    }

    fn pins_flows(&self) -> bool {
        true
    }

    fn choose(&mut self, _now: Instant, packet: &[u8], paths: &[PathState]) -> Choice {
        let count = paths.iter().filter(|p| p.usable).count();
        if count == 0 {
            return Choice::Drop;
        }
        // u32 % count as the kernel does (count <= usize::MAX, so the cast is lossless).
        let hash = self.frames.hash(self.hash, packet);
        let index = (u64::from(hash) % count as u64) as usize;
        paths
            .iter()
            .filter(|p| p.usable)
            .nth(index)
            .map_or(Choice::Drop, |p| Choice::One(p.id))
    }
}

impl Xor {
    /// A balance-xor scheduler hashing with `hash`.
    pub(super) fn new(hash: HashPolicy) -> Self {
        Self {
            hash,
            frames: Frames::Ip,
        }
    }

    /// The same, for packets that are `frames`.
    pub(super) fn with_frames(self, frames: Frames) -> Self {
        Self { frames, ..self }
    }

    #[cfg(test)]
    /// The transmit hash policy in use.
    pub(super) fn policy(&self) -> HashPolicy {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::test_frames::{arp, ip_frame};
    use crate::hash::{hash_frame, hash_ip};
    use crate::PathId;
    use proptest::prelude::*;

    fn path(id: u16, usable: bool) -> PathState {
        PathState {
            usable,
            ..PathState::unknown(PathId(id))
        }
    }

    fn tcp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&[0; 16]);
        p
    }

    const NOW: Instant = Instant::from_micros(0);

    #[test]
    fn picks_hash_mod_usable_count_in_order() {
        let p = tcp4([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        // layer3+4 hash of this flow: 0x29a989c7 = 698976711.
        let h = hash_ip(HashPolicy::Layer34, &p);
        assert_eq!(h, 698_976_711);
        let mut x = Xor::new(HashPolicy::Layer34);
        assert_eq!(x.name(), "xor");
        assert_eq!(x.policy(), HashPolicy::Layer34);
        // 698976711 % 3 = 0 -> first usable; % 2 = 1 -> second usable.
        let three = [path(5, true), path(6, true), path(7, true)];
        assert_eq!(x.choose(NOW, &p, &three), Choice::One(PathId(5)));
        let two_of_three = [path(5, true), path(6, false), path(7, true)];
        assert_eq!(x.choose(NOW, &p, &two_of_three), Choice::One(PathId(7)));
        let none = [path(5, false), path(6, false)];
        assert_eq!(x.choose(NOW, &p, &none), Choice::Drop);
        assert_eq!(x.choose(NOW, &p, &[]), Choice::Drop);
    }

    #[test]
    fn layer34_spreads_flows_layer2_does_not() {
        let paths = [path(0, true), path(1, true)];
        let mut l34 = Xor::new(HashPolicy::Layer34);
        let mut l2 = Xor::new(HashPolicy::Layer2);
        let mut on_first = 0u32;
        let mut seed = 0x1234_5678_9abc_def0u64;
        let n = 4000;
        for _ in 0..n {
            // xorshift64 for flow tuples
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let b = seed.to_le_bytes();
            let p = tcp4(
                [10, b[0], b[1], 1],
                [10, 9, b[2], 2],
                u16::from_le_bytes([b[3], b[4]]),
                5201,
            );
            if l34.choose(NOW, &p, &paths) == Choice::One(PathId(0)) {
                on_first += 1;
            }
            // layer2 on TUN packets: MACs are zero, EtherType 0x0800 -> 2048 % 2 = 0.
            assert_eq!(l2.choose(NOW, &p, &paths), Choice::One(PathId(0)));
        }
        let share = f64::from(on_first) / f64::from(n);
        assert!((0.45..=0.55).contains(&share), "share {share}");
    }

    /// Over frames, xor hashes the frame as bonding does (`hash_frame`: real MACs, the
    /// tag, and ARP by its MACs), not the IP packet as a TUN's.
    #[test]
    fn frames_are_hashed_as_frames() {
        let paths = [path(0, true), path(1, true), path(2, true)];
        let p = tcp4([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        for policy in HashPolicy::ALL {
            let mut x = Xor::new(policy).with_frames(Frames::Ethernet);
            for vlan in [false, true] {
                for f in [ip_frame(&p, vlan), arp(vlan)] {
                    let want = (hash_frame(policy, &f) % 3) as u16;
                    assert_eq!(x.choose(NOW, &f, &paths), Choice::One(PathId(want)));
                }
            }
        }
        // layer2 over a TUN puts every flow on one path; over frames the MACs spread
        // them: destination MACs ending 0, 1, 2 take paths 0, 1, 2 in some order.
        let mut l2 = Xor::new(HashPolicy::Layer2).with_frames(Frames::Ethernet);
        let mut seen = [false; 3];
        for last in 0..3u8 {
            let mut f = arp(false);
            f[5] = last;
            let Choice::One(PathId(id)) = l2.choose(NOW, &f, &paths) else {
                panic!("a path");
            };
            seen[usize::from(id)] = true;
        }
        assert_eq!(seen, [true; 3]);
    }

    proptest! {
        #[test]
        fn always_a_usable_path_and_stable(
            packet in proptest::collection::vec(any::<u8>(), 0..80),
            usable in proptest::collection::vec(any::<bool>(), 0..8),
            policy in 0usize..7,
        ) {
            let paths: Vec<PathState> =
                usable.iter().enumerate().map(|(i, u)| path(i as u16, *u)).collect();
            let mut x = Xor::new(HashPolicy::ALL[policy]);
            let c = x.choose(NOW, &packet, &paths);
            match c {
                Choice::One(id) => {
                    prop_assert!(paths.iter().any(|p| p.id == id && p.usable));
                }
                Choice::Drop => prop_assert!(!usable.iter().any(|u| *u)),
                Choice::All => prop_assert!(false, "xor never broadcasts"),
            }
            // Same packet, same paths -> same choice.
            prop_assert_eq!(x.choose(NOW, &packet, &paths), c);
        }

        #[test]
        fn same_flow_same_path(
            src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
            sport in any::<u16>(), dport in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 0..40),
            n in 1u16..6,
        ) {
            let paths: Vec<PathState> = (0..n).map(|i| path(i, true)).collect();
            for policy in HashPolicy::ALL {
                let mut x = Xor::new(policy);
                let a = tcp4(src, dst, sport, dport);
                let mut b = a.clone();
                b.extend_from_slice(&payload);
                prop_assert_eq!(x.choose(NOW, &a, &paths), x.choose(NOW, &b, &paths));
            }
        }
    }
}
