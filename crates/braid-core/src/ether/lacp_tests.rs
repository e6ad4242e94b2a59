//! Two 802.3ad bonds cabled back to back in virtual time (as `lacp::tests` cables two
//! actors): what each bond sends arrives at the other's member after 1 ms; time jumps
//! from one timeout or delivery to the next.

use core::time::Duration;

use super::*;
use crate::hash::HashPolicy;
use crate::lacp::Rate;

const DELAY: Duration = Duration::from_millis(1);

fn config(node: u8) -> EtherConfig {
    let mut c = EtherConfig::new([0x02, 0, 0, 0, node, 0], Mode::Lacp);
    c.hash = HashPolicy::Layer34;
    c.lacp.rate = Rate::Fast;
    c
}

struct InFlight {
    at: Instant,
    node: usize,
    member: MemberId,
    frame: Vec<u8>,
}

struct Lab {
    now: Instant,
    bonds: [EtherBond; 2],
    /// Cable i joins member i of both bonds; false: it drops frames (carrier stays).
    carries: Vec<bool>,
    flight: Vec<InFlight>,
    events: Vec<(Instant, usize, EtherEvent)>,
}

impl Lab {
    fn new(members: usize, a: EtherConfig, b: EtherConfig) -> Self {
        let mut bonds = [
            EtherBond::new(a).expect("config"),
            EtherBond::new(b).expect("config"),
        ];
        for (node, bond) in bonds.iter_mut().enumerate() {
            for i in 0..members {
                bond.add_member(
                    Instant::ZERO,
                    MemberConfig {
                        mac: [0x02, 0, 0, 1, node as u8 + 1, i as u8],
                        link_up: true,
                    },
                );
            }
        }
        Lab {
            now: Instant::ZERO,
            bonds,
            carries: vec![true; members],
            flight: Vec::new(),
            events: Vec::new(),
        }
    }

    fn flush(&mut self) {
        let mut buf = [0u8; 1518];
        for node in 0..2 {
            while let Some((m, len)) = self.bonds[node].poll_transmit(self.now, &mut buf) {
                if !self.carries[usize::from(m.0)] {
                    continue;
                }
                self.flight.push(InFlight {
                    at: self.now + DELAY,
                    node: 1 - node,
                    member: m,
                    frame: buf[..len].to_vec(),
                });
            }
            while let Some(e) = self.bonds[node].poll_event() {
                self.events.push((self.now, node, e));
            }
        }
    }

    /// Runs until `end` or until `done` holds; returns the time it first held.
    fn run_until(&mut self, end: Instant, done: impl Fn(&Lab) -> bool) -> Option<Instant> {
        for _ in 0..200_000 {
            self.flush();
            if done(self) {
                return Some(self.now);
            }
            let next = self
                .bonds
                .iter()
                .filter_map(EtherBond::poll_timeout)
                .chain(self.flight.iter().map(|f| f.at))
                .min()
                .unwrap_or(Instant::FAR_FUTURE);
            if next > end {
                self.now = end;
                for b in &mut self.bonds {
                    b.handle_timeout(end);
                }
                self.flush();
                return done(self).then_some(self.now);
            }
            self.now = self.now.max(next);
            let now = self.now;
            let (due, later): (Vec<_>, Vec<_>) = self.flight.drain(..).partition(|f| f.at <= now);
            self.flight = later;
            for f in due {
                let r = self.bonds[f.node].receive(now, f.member, &f.frame);
                assert_eq!(r, Ingress::Consumed, "a LACPDU is the bond's");
            }
            for b in &mut self.bonds {
                b.handle_timeout(now);
            }
        }
        panic!("no progress at {:?}", self.now);
    }

    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.run_until(end, |_| false);
    }

    fn usable(&self, node: usize) -> Vec<u16> {
        self.bonds[node].usable().map(|m| m.0).collect()
    }

    fn set_link(&mut self, cable: usize, up: bool) {
        let now = self.now;
        for b in &mut self.bonds {
            b.set_link(now, MemberId(cable as u16), up);
        }
        self.carries[cable] = up;
    }
}

/// A UDP/IPv4 frame of flow `port`.
fn flow(port: u16) -> [u8; 64] {
    let mut f = [0u8; 64];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 2, 0]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 1, 0]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..34].copy_from_slice(&[
        0x45, 0, 0, 50, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    f[34..36].copy_from_slice(&port.to_be_bytes());
    f[36..38].copy_from_slice(&5001u16.to_be_bytes());
    f
}

/// Where 256 flows go.
fn spread(b: &mut EtherBond, now: Instant) -> Vec<Egress> {
    (0..256u16)
        .map(|p| b.transmit(now, &flow(40000 + p)))
        .collect()
}

#[test]
fn two_bonds_aggregate_then_carry_flows_by_hash_over_the_distributing_members() {
    let mut lab = Lab::new(2, config(1), config(2));
    let f = flow(40000);
    // Nothing is distributing yet: no traffic, no carrier, data dropped on receive.
    assert_eq!(
        lab.bonds[0].transmit(lab.now, &f),
        Egress::Drop(DropReason::NoMember)
    );
    assert!(!lab.bonds[0].carrier());
    assert_eq!(
        lab.bonds[1].receive(lab.now, MemberId(0), &f),
        Ingress::Drop(DropReason::Inactive)
    );
    let t = lab
        .run_until(Instant::from_millis(5000), |l| {
            l.usable(0).len() == 2 && l.usable(1).len() == 2
        })
        .expect("aggregated");
    // wait_while (2 s) and one exchange, as two bare actors (docs/lacp.md).
    assert!(t <= Instant::from_millis(2100), "{t:?}");
    assert!(lab.bonds[0].carrier() && lab.bonds[1].carrier());
    assert!(lab
        .events
        .iter()
        .any(|e| e.1 == 0 && e.2 == EtherEvent::CarrierUp));
    assert!(lab
        .events
        .iter()
        .any(|e| e.2 == EtherEvent::Lacp(lacp::Event::Distributing(PortId(1)))));
    // bond_3ad_xor_xmit: hash % distributing, over the members in order.
    let now = lab.now;
    for p in 0..256u16 {
        let f = flow(40000 + p);
        let want = hash_frame(HashPolicy::Layer34, &f) % 2;
        assert_eq!(
            lab.bonds[0].transmit(now, &f),
            Egress::One(MemberId(want as u16))
        );
    }
    // Collecting members deliver data.
    assert_eq!(lab.bonds[1].receive(now, MemberId(1), &f), Ingress::Deliver);
    let s = lab.bonds[0].status();
    assert_eq!(s.mode, "802.3ad");
    assert!(s.members.iter().all(|m| m.state == "distributing"));
    let l = s.lacp.expect("lacp status");
    assert!(l.ports.iter().all(|p| p.distributing));
}

#[test]
fn a_member_cut_takes_no_more_frames() {
    let mut lab = Lab::new(2, config(1), config(2));
    lab.run_until(Instant::from_millis(5000), |l| l.usable(0).len() == 2)
        .expect("aggregated");
    lab.run_for(Duration::from_millis(500));
    lab.set_link(1, false);
    let now = lab.now;
    assert_eq!(lab.usable(0), [0]);
    assert!(spread(&mut lab.bonds[0], now)
        .iter()
        .all(|e| *e == Egress::One(MemberId(0))));
    assert!(lab.bonds[0].carrier());
    let f = flow(40000);
    assert_eq!(
        lab.bonds[1].receive(now, MemberId(1), &f),
        Ingress::Drop(DropReason::Inactive)
    );
    // Back: it aggregates again within wait_while and an exchange.
    lab.set_link(1, true);
    let t = lab
        .run_until(now + Duration::from_secs(5), |l| l.usable(0).len() == 2)
        .expect("back");
    assert!(t <= now + Duration::from_millis(2100), "{t:?}");
}

#[test]
fn a_member_whose_partner_falls_silent_stops_distributing_within_three_seconds() {
    let mut lab = Lab::new(2, config(1), config(2));
    lab.run_until(Instant::from_millis(5000), |l| l.usable(0).len() == 2)
        .expect("aggregated");
    lab.run_for(Duration::from_millis(300));
    // The cable stops carrying; carrier stays up on both sides.
    lab.carries[1] = false;
    let cut = lab.now;
    let t = lab
        .run_until(cut + Duration::from_secs(5), |l| l.usable(0) == [0])
        .expect("expired");
    assert!(
        t <= cut + Duration::from_secs(3),
        "{:?}",
        t.saturating_since(cut)
    );
    assert!(
        t >= cut + Duration::from_secs(2),
        "{:?}",
        t.saturating_since(cut)
    );
    assert!(lab
        .events
        .iter()
        .any(|e| e.1 == 0 && e.2 == EtherEvent::Lacp(lacp::Event::NotDistributing(PortId(1)))));
    let now = lab.now;
    assert!(spread(&mut lab.bonds[0], now)
        .iter()
        .all(|e| *e == Egress::One(MemberId(0))));
}

#[test]
fn min_links_holds_the_carrier_down() {
    let mut a = config(1);
    a.min_links = 3;
    let mut lab = Lab::new(2, a, config(2));
    lab.run_for(Duration::from_secs(4));
    assert!(lab.usable(1).len() == 2, "the partner aggregates");
    assert!(lab.usable(0).is_empty());
    assert!(!lab.bonds[0].carrier());
    let now = lab.now;
    assert_eq!(
        lab.bonds[0].transmit(now, &flow(1)),
        Egress::Drop(DropReason::NoMember)
    );
}

#[test]
fn fallback_carries_traffic_on_one_member_when_the_partner_is_silent() {
    let mut a = config(1);
    a.lacp.fallback_ab = true;
    let mut lab = Lab::new(2, a, config(2));
    lab.carries = vec![false, false];
    lab.run_for(Duration::from_secs(8));
    assert_eq!(lab.usable(0), [0]);
    assert!(lab.bonds[0].carrier());
    let now = lab.now;
    assert!(spread(&mut lab.bonds[0], now)
        .iter()
        .all(|e| *e == Egress::One(MemberId(0))));
    // A frame from the other side (bond 2's source MAC).
    let mut f = flow(1);
    f[0..12].copy_from_slice(&[0x02, 0, 0, 0, 1, 0, 0x02, 0, 0, 0, 2, 0]);
    assert_eq!(lab.bonds[0].receive(now, MemberId(0), &f), Ingress::Deliver);
    assert_eq!(
        lab.bonds[0].receive(now, MemberId(1), &f),
        Ingress::Drop(DropReason::Inactive)
    );
}

#[test]
fn a_bad_slow_protocols_frame_is_counted() {
    let mut lab = Lab::new(1, config(1), config(2));
    let mut f = [0u8; 60];
    f[0..6].copy_from_slice(&lacp::SLOW_PROTOCOLS_MAC);
    f[12..14].copy_from_slice(&[0x88, 0x09]);
    f[14] = 9;
    let now = lab.now;
    assert_eq!(
        lab.bonds[0].receive(now, MemberId(0), &f),
        Ingress::Drop(DropReason::LacpBad)
    );
    assert_eq!(lab.bonds[0].status().drops.lacp_bad, 1);
}
