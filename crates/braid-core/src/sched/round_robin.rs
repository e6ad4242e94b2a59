//! bonding's balance-rr (`bond_xmit_roundrobin_slave_get`, Linux 5.14 and later).
//!
//! `bond_rr_gen_slave_id` makes a slave id per packet:
//! - `packets_per_slave == 0`: a random `u32`;
//! - `== 1` (default): `this_cpu_inc_return(rr_tx_counter)`, the counter *after* the
//!   increment, so the first packet gets 1;
//! - `> 1`: that counter divided by N (`reciprocal_divide`, which is exact u32 division).
//!
//! Then `bond_get_slave_by_id(id % slave_cnt)`: count `slave_cnt` over *all* slaves,
//! start at that index and walk forward, wrapping, to the first slave that can transmit.
//! IPv4 IGMP does not advance the counter and goes to the current active slave (in a
//! frame: the IPv4 packet after its header and tag, as bonding sees it).
//!
//! braid has one counter (the kernel's is per CPU) and uses its own seeded PRNG
//! (splitmix64) for the random case, so a run is reproducible.

use crate::sched::{Choice, PathState, Scheduler};
use crate::wire::ip::Ipv4Packet;
use crate::{Frames, Instant, PathId};

/// IP protocol number of IGMP.
const IGMP: u8 = 2;

/// splitmix64: small, fast, and good enough to spread packets.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}

/// bonding's balance-rr. See the module docs.
#[derive(Debug)]
pub(super) struct RoundRobin {
    packets_per_path: u32,
    counter: u32,
    rng: SplitMix64,
    /// Where IGMP goes (bonding's `curr_active_slave`): kept while it can transmit.
    igmp_active: Option<PathId>,
    frames: Frames,
}

impl Default for RoundRobin {
    fn default() -> Self {
        Self::new(1, 0)
    }
}

impl RoundRobin {
    /// `packets_per_path` as bonding's `packets_per_slave` (0 = random path, 1 = default);
    /// `seed` seeds the random choice.
    pub(super) fn new(packets_per_path: u32, seed: u64) -> Self {
        Self {
            packets_per_path,
            counter: 0,
            rng: SplitMix64(seed),
            igmp_active: None,
            frames: Frames::Ip,
        }
    }

    /// The same, for packets that are `frames`.
    pub(super) fn with_frames(self, frames: Frames) -> Self {
        Self { frames, ..self }
    }

    /// `bond_rr_gen_slave_id`.
    fn gen_slave_id(&mut self) -> u32 {
        match self.packets_per_path {
            0 => self.rng.next_u32(),
            1 => {
                self.counter = self.counter.wrapping_add(1);
                self.counter
            }
            n => {
                self.counter = self.counter.wrapping_add(1);
                self.counter / n
            }
        }
    }
}

/// `bond_get_slave_by_id`: from index `start`, forward and wrapping, the first usable.
fn slave_by_id(paths: &[PathState], start: usize) -> Option<PathId> {
    let (head, tail) = paths.split_at(start.min(paths.len()));
    tail.iter().chain(head).find(|p| p.usable).map(|p| p.id)
}

/// An IPv4 packet carrying IGMP (protocol 2), or a frame carrying one.
fn is_igmp(frames: Frames, packet: &[u8]) -> bool {
    frames
        .ip_packet(packet)
        .is_some_and(|ip| Ipv4Packet::new_checked(ip).is_ok_and(|ip| ip.protocol() == IGMP))
}

impl Scheduler for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn choose(&mut self, _now: Instant, packet: &[u8], paths: &[PathState]) -> Choice {
        if is_igmp(self.frames, packet) {
            let keep = self
                .igmp_active
                .filter(|id| paths.iter().any(|p| p.id == *id && p.usable));
            self.igmp_active = keep.or_else(|| slave_by_id(paths, 0));
            return self.igmp_active.map_or(Choice::Drop, Choice::One);
        }
        if paths.is_empty() {
            return Choice::Drop;
        }
        let id = self.gen_slave_id();
        let start = usize::try_from(id).unwrap_or(0) % paths.len();
        slave_by_id(paths, start).map_or(Choice::Drop, Choice::One)
    }

    fn path_removed(&mut self, path: PathId) {
        if self.igmp_active == Some(path) {
            self.igmp_active = None;
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use proptest::prelude::*;

    fn paths(n: u16) -> Vec<PathState> {
        crate::sched::test_paths(n)
    }

    fn run(rr: &mut RoundRobin, ps: &[PathState], n: usize) -> Vec<u16> {
        (0..n)
            .map(|_| match rr.choose(Instant::ZERO, &[0x45; 40], ps) {
                Choice::One(id) => id.0,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn default_starts_at_slave_one_like_this_cpu_inc_return() {
        let mut rr = RoundRobin::new(1, 0);
        assert_eq!(run(&mut rr, &paths(3), 7), vec![1, 2, 0, 1, 2, 0, 1]);
        assert_eq!(rr.name(), "round-robin");
    }

    #[test]
    fn packets_per_path_divides_the_counter() {
        // Counter 1..=9 divided by 3: 0,0,1,1,1,2,2,2,3 -> mod 3.
        let mut rr = RoundRobin::new(3, 0);
        assert_eq!(run(&mut rr, &paths(3), 9), vec![0, 0, 1, 1, 1, 2, 2, 2, 0]);
        let mut rr = RoundRobin::new(2, 0);
        assert_eq!(run(&mut rr, &paths(2), 8), vec![0, 1, 1, 0, 0, 1, 1, 0]);
    }

    #[test]
    fn counter_wraps_as_u32() {
        let mut rr = RoundRobin::new(1, 0);
        rr.counter = u32::MAX - 1;
        // u32::MAX % 3 == 0, then 0 % 3 == 0, then 1.
        assert_eq!(run(&mut rr, &paths(3), 3), vec![0, 0, 1]);
    }

    #[test]
    fn unusable_path_is_skipped_forward() {
        let mut ps = paths(4);
        ps[2].usable = false;
        // ids 1,2,3,0,1,2: index 2 walks on to 3.
        let mut rr = RoundRobin::new(1, 0);
        assert_eq!(run(&mut rr, &ps, 6), vec![1, 3, 3, 0, 1, 3]);
        // The last path down: wraps round to the first.
        ps[2].usable = true;
        ps[3].usable = false;
        let mut rr = RoundRobin::new(1, 0);
        assert_eq!(run(&mut rr, &ps, 4), vec![1, 2, 0, 0]);
        for p in &mut ps {
            p.usable = false;
        }
        assert_eq!(rr.choose(Instant::ZERO, &[0; 40], &ps), Choice::Drop);
        assert_eq!(rr.choose(Instant::ZERO, &[0; 40], &[]), Choice::Drop);
    }

    #[test]
    fn random_mode_is_seeded_and_spread() {
        let ps = paths(3);
        let a = run(&mut RoundRobin::new(0, 42), &ps, 3000);
        let b = run(&mut RoundRobin::new(0, 42), &ps, 3000);
        let c = run(&mut RoundRobin::new(0, 43), &ps, 3000);
        assert_eq!(a, b);
        assert_ne!(a, c);
        for p in 0..3 {
            let n = a.iter().filter(|&&x| x == p).count();
            assert!((900..1100).contains(&n), "path {p}: {n}");
        }
    }

    #[test]
    fn igmp_goes_to_the_sticky_active_path_without_counting() {
        let mut igmp = [0u8; 28];
        igmp[0] = 0x45;
        igmp[9] = 2;
        let mut ps = paths(3);
        let mut rr = RoundRobin::new(1, 0);
        assert_eq!(rr.choose(Instant::ZERO, &igmp, &ps), Choice::One(PathId(0)));
        assert_eq!(run(&mut rr, &ps, 2), vec![1, 2]);
        ps[0].usable = false;
        assert_eq!(rr.choose(Instant::ZERO, &igmp, &ps), Choice::One(PathId(1)));
        ps[0].usable = true;
        assert_eq!(rr.choose(Instant::ZERO, &igmp, &ps), Choice::One(PathId(1)));
        assert_eq!(run(&mut rr, &ps, 1), vec![0]);
        // Truncated or IPv6 packets are not IGMP.
        assert_eq!(run(&mut rr, &ps, 1), vec![1]);
        assert!(!is_igmp(Frames::Ip, &igmp[..19]));
        assert!(!is_igmp(
            Frames::Ip,
            &[0x60, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        ));
    }

    /// Over frames, IGMP is the IPv4 packet after the header (and tag): it goes to the
    /// active path without counting; an ARP frame, or one whose bytes read as IGMP from
    /// its first byte, is counted as any other frame.
    #[test]
    fn igmp_in_frames() {
        use crate::frames::test_frames::{arp, ip_frame, lookalike};
        let mut igmp = [0u8; 28];
        igmp[0] = 0x45;
        igmp[9] = 2;
        igmp[12] = 10;
        let ps = paths(3);
        for vlan in [false, true] {
            let mut rr = RoundRobin::new(1, 0).with_frames(Frames::Ethernet);
            let f = ip_frame(&igmp, vlan);
            assert!(is_igmp(Frames::Ethernet, &f));
            assert_eq!(rr.choose(Instant::ZERO, &f, &ps), Choice::One(PathId(0)));
            assert_eq!(
                rr.choose(Instant::ZERO, &arp(vlan), &ps),
                Choice::One(PathId(1))
            );
            assert_eq!(rr.choose(Instant::ZERO, &f, &ps), Choice::One(PathId(0)));
            assert_eq!(run(&mut rr, &ps, 1), vec![2]);
        }
        assert!(is_igmp(Frames::Ip, &igmp));
        assert!(!is_igmp(Frames::Ethernet, &lookalike(&igmp)));
    }

    proptest! {
        /// With every path usable and packets_per_path = N, the shares are equal to within
        /// N packets (one partial run at each end).
        #[test]
        fn equal_shares(n in 1u16..6, ppp in 1u32..8, count in 1usize..2000) {
            let ps = paths(n);
            let seq = run(&mut RoundRobin::new(ppp, 0), &ps, count);
            let counts: Vec<usize> =
                (0..n).map(|p| seq.iter().filter(|&&x| x == p).count()).collect();
            let (lo, hi) = (counts.iter().min().copied().unwrap_or(0), counts.iter().max().copied().unwrap_or(0));
            prop_assert!(hi - lo <= ppp as usize, "{:?}", counts);
        }

        /// The chosen path is always usable, and it is the first usable one at or after
        /// `id % n`.
        #[test]
        fn picks_first_usable_from_index(usable in proptest::collection::vec(any::<bool>(), 1..8), count in 1usize..50) {
            let mut ps = paths(usable.len() as u16);
            for (p, u) in ps.iter_mut().zip(&usable) {
                p.usable = *u;
            }
            let mut rr = RoundRobin::new(1, 0);
            for k in 1..=count {
                let c = rr.choose(Instant::ZERO, &[0; 40], &ps);
                let start = k % ps.len();
                let want = (0..ps.len()).map(|d| (start + d) % ps.len()).find(|&i| usable[i]);
                prop_assert_eq!(c, want.map_or(Choice::Drop, |i| Choice::One(PathId(i as u16))));
            }
        }
    }
}
