//! The Ethernet bond (`braid_core::ether::EtherBond`) of each mode under arbitrary
//! input.
//!
//! A bond of one to four members (mode, primary, ARP monitor chosen by the input) is
//! cabled member for member to an honest peer bond of the same mode; operations: time
//! passing, the peer's frames delivered (as sent, with a byte changed, or dropped), raw
//! frames of any length from the TAP and on any member (ids past the last included),
//! ARP replies to the monitor, links going down and up. After every operation: no
//! panic; `transmit` names only a usable member (all of them only in broadcast mode,
//! nothing only when none is usable); the carrier is "some member usable";
//! active-backup uses one member at most; every control frame names a member and fits
//! the buffer; `poll_transmit` ends; a `poll_timeout` in the past is cleared by handling
//! it.
#![no_main]

use std::net::Ipv4Addr;
use std::time::Duration;

use arbitrary::Arbitrary;
use braid_core::ether::{
    ArpMonitor, DropReason, Egress, EtherBond, EtherConfig, Ingress, MemberConfig, MemberId,
    Mode,
};
use braid_core::hash::HashPolicy;
use braid_core::lacp::Rate;
use braid_core::Instant;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Wait { ms: u16 },
    /// Deliver the peer's oldest frame on a member, changing byte `at` by `xor`.
    Deliver { member: u8, at: u8, xor: u8 },
    Drop { member: u8 },
    Tx { bytes: Vec<u8> },
    Rx { member: u8, bytes: Vec<u8> },
    ArpReply { member: u8 },
    Link { member: u8, up: bool },
}

#[derive(Arbitrary, Debug)]
struct Input {
    mode: u8,
    members: u8,
    hash: u8,
    primary: Option<u8>,
    arp: bool,
    fast: bool,
    fallback: bool,
    min_links: u8,
    ops: Vec<Op>,
}

const MODES: [Mode; 5] = [
    Mode::RoundRobin,
    Mode::ActiveBackup,
    Mode::Xor,
    Mode::Broadcast,
    Mode::Lacp,
];
const TARGET: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);
const SOURCE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

fn config(input: &Input, node: u8, mode: Mode) -> EtherConfig {
    let mut c = EtherConfig::new([2, 0, 0, 0, node, 0], mode);
    c.hash = HashPolicy::ALL[usize::from(input.hash) % HashPolicy::ALL.len()];
    c.primary = input.primary.map(|p| MemberId(u16::from(p % 5)));
    c.lacp.rate = if input.fast { Rate::Fast } else { Rate::Slow };
    c.lacp.fallback_ab = input.fallback;
    c.min_links = u16::from(input.min_links % 4);
    c.announce.ipv4 = vec![SOURCE];
    c.announce.ipv6 = vec!["2001:db8::1".parse().expect("address")];
    if input.arp && mode != Mode::Lacp {
        c.arp_monitor = Some(ArpMonitor {
            interval: Duration::from_millis(100),
            targets: vec![TARGET],
            source: SOURCE,
        });
    }
    c
}

fn arp_reply() -> [u8; 42] {
    let mut f = [0u8; 42];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 1, 0]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0x99, 9]);
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
    f[22..28].copy_from_slice(&[2, 0, 0, 0, 0x99, 9]);
    f[28..32].copy_from_slice(&TARGET.octets());
    f[32..38].copy_from_slice(&[2, 0, 0, 0, 1, 0]);
    f[38..42].copy_from_slice(&SOURCE.octets());
    f
}

fn check(b: &EtherBond, mode: Mode) {
    let usable: Vec<MemberId> = b.usable().collect();
    assert_eq!(b.carrier(), !usable.is_empty());
    if mode == Mode::ActiveBackup {
        assert!(usable.len() <= 1, "{usable:?}");
        assert_eq!(b.active(), usable.first().copied());
    }
}

fuzz_target!(|input: Input| {
    let mode = MODES[usize::from(input.mode) % MODES.len()];
    let members = 1 + usize::from(input.members % 4);
    let (Ok(mut a), Ok(mut peer)) = (
        EtherBond::new(config(&input, 1, mode)),
        EtherBond::new(config(&input, 2, mode)),
    ) else {
        panic!("a valid config was refused");
    };
    let mut now = Instant::ZERO;
    for i in 0..members {
        for (node, b) in [&mut a, &mut peer].into_iter().enumerate() {
            b.add_member(
                now,
                MemberConfig {
                    mac: [2, 0, 0, 1, node as u8, i as u8],
                    link_up: true,
                },
            );
        }
    }
    // The peer's frames waiting on each member's cable (bounded).
    let mut queued: Vec<Vec<Vec<u8>>> = vec![Vec::new(); members];
    let mut buf = [0u8; 1518];
    for op in input.ops.iter().take(512) {
        let member = |m: u8| usize::from(m) % members;
        match op {
            Op::Wait { ms } => {
                now += Duration::from_millis(u64::from(*ms));
                a.handle_timeout(now);
                peer.handle_timeout(now);
            }
            Op::Deliver { member: m, at, xor } => {
                let m = member(*m);
                if !queued[m].is_empty() {
                    let mut f = queued[m].remove(0);
                    if let Some(byte) = f.get_mut(usize::from(*at)) {
                        *byte ^= xor;
                    }
                    let _ = a.receive(now, MemberId(m as u16), &f);
                }
            }
            Op::Drop { member: m } => {
                let m = member(*m);
                if !queued[m].is_empty() {
                    queued[m].remove(0);
                }
            }
            Op::Tx { bytes } => {
                let usable: Vec<MemberId> = a.usable().collect();
                match a.transmit(now, bytes) {
                    Egress::One(m) => assert!(usable.contains(&m), "{m:?} not in {usable:?}"),
                    Egress::All => assert!(mode == Mode::Broadcast && !usable.is_empty()),
                    Egress::Drop(DropReason::NoMember) => assert!(usable.is_empty()),
                    Egress::Drop(DropReason::Short) => assert!(bytes.len() < 14),
                    Egress::Drop(r) => panic!("transmit dropped for {r:?}"),
                }
            }
            Op::Rx { member: m, bytes } => {
                let r = a.receive(now, MemberId(u16::from(*m)), bytes);
                if usize::from(*m) >= members {
                    assert_eq!(r, Ingress::Drop(DropReason::UnknownMember));
                } else if bytes.len() < 14 {
                    assert_eq!(r, Ingress::Drop(DropReason::Short));
                }
            }
            Op::ArpReply { member: m } => {
                let _ = a.receive(now, MemberId(member(*m) as u16), &arp_reply());
            }
            Op::Link { member: m, up } => {
                let m = member(*m);
                a.set_link(now, MemberId(m as u16), *up);
                peer.set_link(now, MemberId(m as u16), *up);
                queued[m].clear();
            }
        }
        // What the bond sends reaches the peer; what the peer sends waits.
        let mut sent = 0;
        while let Some((m, len)) = a.poll_transmit(now, &mut buf) {
            let i = usize::from(m.0);
            assert!(i < members, "control frame on {m:?}");
            assert!((14..=1518).contains(&len));
            sent += 1;
            assert!(sent <= 256, "poll_transmit never ends");
            let _ = peer.receive(now, m, &buf[..len]);
        }
        while let Some((m, len)) = peer.poll_transmit(now, &mut buf) {
            let i = usize::from(m.0) % members;
            if queued[i].len() < 16 {
                queued[i].push(buf[..len].to_vec());
            }
        }
        while a.poll_event().is_some() {}
        while peer.poll_event().is_some() {}
        if a.poll_timeout().is_some_and(|t| t <= now) {
            a.handle_timeout(now);
            while a.poll_transmit(now, &mut buf).is_some() {}
            assert!(
                a.poll_timeout().is_none_or(|t| t > now),
                "busy loop at {now:?}"
            );
        }
        check(&a, mode);
    }
    let _ = a.status();
});
