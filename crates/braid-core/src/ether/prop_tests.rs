//! Arbitrary frames, link changes and time into a bond of each mode: no panic, and
//! after every step transmit names only usable members, the carrier is "some member
//! usable", active-backup uses one member at most, and timers make progress.

use core::time::Duration;
use std::net::Ipv4Addr;

use proptest::prelude::*;

use super::*;

#[derive(Clone, Debug)]
enum Op {
    Wait(u16),
    Link(u16, bool),
    Tx(Vec<u8>),
    Rx(u16, Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u16..3000).prop_map(Op::Wait),
        (0u16..4, any::<bool>()).prop_map(|(m, u)| Op::Link(m, u)),
        proptest::collection::vec(any::<u8>(), 0..100).prop_map(Op::Tx),
        (0u16..4, proptest::collection::vec(any::<u8>(), 0..100)).prop_map(|(m, b)| Op::Rx(m, b)),
    ]
}

const MODES: [Mode; 5] = [
    Mode::RoundRobin,
    Mode::ActiveBackup,
    Mode::Xor,
    Mode::Broadcast,
    Mode::Lacp,
];

fn check(b: &EtherBond, mode: Mode) -> Result<(), TestCaseError> {
    let usable: Vec<MemberId> = b.usable().collect();
    prop_assert_eq!(b.carrier(), !usable.is_empty());
    if mode == Mode::ActiveBackup {
        prop_assert!(usable.len() <= 1);
        prop_assert_eq!(b.active(), usable.first().copied());
    }
    Ok(())
}

proptest! {
    #[test]
    fn transmit_only_names_usable_members(
        mode in 0usize..5,
        members in 0usize..4,
        arp in any::<bool>(),
        primary in proptest::option::of(0u16..4),
        ops in proptest::collection::vec(op(), 0..80),
    ) {
        let mode = MODES[mode];
        let mut cfg = EtherConfig::new([2, 0, 0, 0, 0, 1], mode);
        cfg.primary = primary.map(MemberId);
        cfg.announce.ipv4 = vec![Ipv4Addr::new(10, 0, 0, 1)];
        if arp && mode != Mode::Lacp {
            cfg.arp_monitor = Some(ArpMonitor {
                interval: Duration::from_millis(100),
                targets: vec![Ipv4Addr::new(10, 0, 0, 9)],
                source: Ipv4Addr::new(10, 0, 0, 1),
            });
        }
        let mut b = EtherBond::new(cfg).expect("config");
        let mut now = Instant::ZERO;
        for i in 0..members {
            b.add_member(now, MemberConfig { mac: [2, 0, 0, 1, 0, i as u8], link_up: true });
        }
        let mut buf = [0u8; 1518];
        for op in ops {
            match op {
                Op::Wait(ms) => {
                    now += Duration::from_millis(u64::from(ms));
                    b.handle_timeout(now);
                }
                Op::Link(m, up) => b.set_link(now, MemberId(m), up),
                Op::Tx(f) => {
                    let usable: Vec<MemberId> = b.usable().collect();
                    match b.transmit(now, &f) {
                        Egress::One(m) => prop_assert!(usable.contains(&m), "{m:?} not in {usable:?}"),
                        Egress::All => {
                            prop_assert_eq!(mode, Mode::Broadcast);
                            prop_assert!(!usable.is_empty());
                        }
                        Egress::Drop(DropReason::NoMember) => prop_assert!(usable.is_empty()),
                        Egress::Drop(DropReason::Short) => prop_assert!(f.len() < 14),
                        Egress::Drop(r) => prop_assert!(false, "transmit dropped for {r:?}"),
                    }
                }
                Op::Rx(m, f) => {
                    let r = b.receive(now, MemberId(m), &f);
                    if usize::from(m) >= members {
                        prop_assert_eq!(r, Ingress::Drop(DropReason::UnknownMember));
                    }
                }
            }
            let mut sent = 0;
            while let Some((m, n)) = b.poll_transmit(now, &mut buf) {
                prop_assert!(usize::from(m.0) < members);
                prop_assert!((14..=1518).contains(&n));
                sent += 1;
                prop_assert!(sent < 200, "poll_transmit never ends");
            }
            while b.poll_event().is_some() {}
            if b.poll_timeout().is_some_and(|t| t <= now) {
                b.handle_timeout(now);
                while b.poll_transmit(now, &mut buf).is_some() {}
                prop_assert!(b.poll_timeout().is_none_or(|t| t > now), "busy loop");
            }
            check(&b, mode)?;
        }
        let _ = b.status();
    }
}
