//! The modes' transmit and receive decisions, active-backup's selection and failover
//! announcements, and the ARP monitor in virtual time.

use core::time::Duration;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;
use crate::hash::HashPolicy;

const BOND_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const T0: Instant = Instant::ZERO;

fn member_mac(i: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x10, i]
}

fn bond_with(config: EtherConfig, members: usize) -> EtherBond {
    let mut b = EtherBond::new(config).expect("config");
    for i in 0..members {
        b.add_member(
            T0,
            MemberConfig {
                mac: member_mac(i as u8),
                link_up: true,
            },
        );
    }
    b
}

fn bond(mode: Mode, members: usize) -> EtherBond {
    bond_with(EtherConfig::new(BOND_MAC, mode), members)
}

/// A 60-byte untagged frame from a host out there to `dst5`, EtherType `proto`.
fn frame(dst5: u8, src5: u8, proto: u16) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0x20, dst5]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0x30, src5]);
    f[12..14].copy_from_slice(&proto.to_be_bytes());
    f
}

fn one(e: Egress) -> u16 {
    match e {
        Egress::One(m) => m.0,
        other => panic!("not one member: {other:?}"),
    }
}

fn events(b: &mut EtherBond) -> Vec<EtherEvent> {
    core::iter::from_fn(|| b.poll_event()).collect()
}

fn drain_tx(b: &mut EtherBond, now: Instant) -> Vec<(MemberId, Vec<u8>)> {
    let mut buf = [0u8; 1518];
    let mut out = Vec::new();
    while let Some((m, n)) = b.poll_transmit(now, &mut buf) {
        out.push((m, buf[..n].to_vec()));
        assert!(out.len() < 1000, "poll_transmit never ends");
    }
    out
}

#[test]
fn round_robin_takes_members_in_turn_from_the_counter_and_skips_down_ones() {
    let mut b = bond(Mode::RoundRobin, 3);
    let f = frame(1, 1, 0x0800);
    // rr_tx_counter is incremented before use (this_cpu_inc_return): member 1 first.
    let seq: Vec<u16> = (0..6).map(|_| one(b.transmit(T0, &f))).collect();
    assert_eq!(seq, [1, 2, 0, 1, 2, 0]);
    b.set_link(T0, MemberId(1), false);
    // bond_get_slave_by_id: counter % 3 picks a slot; a down slot gives the next up one.
    let seq: Vec<u16> = (0..6).map(|_| one(b.transmit(T0, &f))).collect();
    assert_eq!(seq, [2, 2, 0, 2, 2, 0]);
}

#[test]
fn round_robin_sends_igmp_on_the_current_active_member() {
    let mut b = bond(Mode::RoundRobin, 3);
    let mut igmp = frame(1, 1, 0x0800);
    igmp[14 + 9] = 2;
    for _ in 0..4 {
        assert_eq!(one(b.transmit(T0, &igmp)), 0);
    }
    b.set_link(T0, MemberId(0), false);
    assert_eq!(one(b.transmit(T0, &igmp)), 1);
}

#[test]
fn xor_is_the_hash_modulo_the_usable_members_in_order() {
    let mut b = bond(Mode::Xor, 3);
    // layer2: dst[5] ^ src[5] ^ EtherType.
    for d in 0..32u8 {
        let f = frame(d, 7, 0x0800);
        let hash = u32::from(d ^ 7) ^ 0x0800;
        assert_eq!(u32::from(one(b.transmit(T0, &f))), hash % 3, "dst {d}");
    }
    b.set_link(T0, MemberId(1), false);
    let usable = [0u16, 2];
    for d in 0..32u8 {
        let f = frame(d, 7, 0x0800);
        let hash = u32::from(d ^ 7) ^ 0x0800;
        assert_eq!(one(b.transmit(T0, &f)), usable[(hash % 2) as usize]);
    }
}

#[test]
fn xor_uses_the_configured_policy() {
    let mut cfg = EtherConfig::new(BOND_MAC, Mode::Xor);
    cfg.hash = HashPolicy::Layer34;
    let mut b = bond_with(cfg, 2);
    let mut f = [0u8; 64];
    f[0..14].copy_from_slice(&frame(1, 1, 0x0800)[0..14]);
    f[14..34].copy_from_slice(&[
        0x45, 0, 0, 50, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    let mut seen = [false; 2];
    for port in 0..64u16 {
        f[34..36].copy_from_slice(&(40000 + port).to_be_bytes());
        f[36..38].copy_from_slice(&5001u16.to_be_bytes());
        let want = crate::hash::hash_frame(HashPolicy::Layer34, &f) % 2;
        let got = one(b.transmit(T0, &f));
        assert_eq!(u32::from(got), want);
        seen[usize::from(got)] = true;
    }
    assert_eq!(seen, [true, true], "flows spread over both members");
}

#[test]
fn broadcast_sends_on_every_usable_member_and_counts_each() {
    let mut b = bond(Mode::Broadcast, 3);
    let f = frame(1, 1, 0x0800);
    assert_eq!(b.transmit(T0, &f), Egress::All);
    b.set_link(T0, MemberId(2), false);
    assert_eq!(b.transmit(T0, &f), Egress::All);
    assert_eq!(b.usable().collect::<Vec<_>>(), [MemberId(0), MemberId(1)]);
    let s = b.status();
    let tx: Vec<u64> = s.members.iter().map(|m| m.tx_frames).collect();
    assert_eq!(tx, [2, 2, 1]);
    assert_eq!(s.members[0].tx_bytes, 120);
}

#[test]
fn no_usable_member_drops_and_the_carrier_follows() {
    let mut b = bond(Mode::Xor, 2);
    assert!(b.carrier());
    let ev = events(&mut b);
    assert!(ev.contains(&EtherEvent::MemberUp(MemberId(0))), "{ev:?}");
    assert!(ev.contains(&EtherEvent::CarrierUp), "{ev:?}");
    b.set_link(T0, MemberId(0), false);
    assert!(b.carrier());
    b.set_link(T0, MemberId(1), false);
    assert!(!b.carrier());
    assert_eq!(
        events(&mut b),
        [
            EtherEvent::MemberDown(MemberId(0)),
            EtherEvent::MemberDown(MemberId(1)),
            EtherEvent::CarrierDown
        ]
    );
    for mode in [
        Mode::RoundRobin,
        Mode::ActiveBackup,
        Mode::Xor,
        Mode::Broadcast,
        Mode::Lacp,
    ] {
        let mut empty = bond(mode, 0);
        let f = frame(1, 1, 0x0800);
        assert_eq!(
            empty.transmit(T0, &f),
            Egress::Drop(DropReason::NoMember),
            "{mode:?}"
        );
        assert!(!empty.carrier());
    }
    let f = frame(1, 1, 0x0800);
    assert_eq!(b.transmit(T0, &f), Egress::Drop(DropReason::NoMember));
    assert_eq!(b.transmit(T0, &f[..13]), Egress::Drop(DropReason::Short));
    let s = b.status();
    assert_eq!((s.drops.no_member, s.drops.short), (1, 1));
}

#[test]
fn active_backup_prefers_the_primary_and_keeps_the_current_otherwise() {
    let mut cfg = EtherConfig::new(BOND_MAC, Mode::ActiveBackup);
    cfg.primary = Some(MemberId(1));
    let mut b = bond_with(cfg, 3);
    assert_eq!(b.active(), Some(MemberId(1)));
    let f = frame(1, 1, 0x0800);
    assert_eq!(b.transmit(T0, &f), Egress::One(MemberId(1)));
    assert_eq!(b.usable().collect::<Vec<_>>(), [MemberId(1)]);
    events(&mut b);
    b.set_link(T0, MemberId(1), false);
    assert_eq!(b.active(), Some(MemberId(0)));
    assert_eq!(b.transmit(T0, &f), Egress::One(MemberId(0)));
    // The primary back: it takes over again (primary_reselect=always).
    b.set_link(T0, MemberId(1), true);
    assert_eq!(b.active(), Some(MemberId(1)));
    assert_eq!(
        events(&mut b),
        [
            EtherEvent::MemberDown(MemberId(1)),
            EtherEvent::ActiveChanged {
                from: Some(MemberId(1)),
                to: Some(MemberId(0))
            },
            EtherEvent::MemberUp(MemberId(1)),
            EtherEvent::ActiveChanged {
                from: Some(MemberId(0)),
                to: Some(MemberId(1))
            },
        ]
    );

    // Without a primary, a member coming back does not take over.
    let mut b = bond(Mode::ActiveBackup, 2);
    assert_eq!(b.active(), Some(MemberId(0)));
    b.set_link(T0, MemberId(0), false);
    assert_eq!(b.active(), Some(MemberId(1)));
    b.set_link(T0, MemberId(0), true);
    assert_eq!(b.active(), Some(MemberId(1)));
    b.set_link(T0, MemberId(1), false);
    b.set_link(T0, MemberId(0), false);
    assert_eq!(b.active(), None);
    assert!(!b.carrier());
    assert_eq!(b.transmit(T0, &f), Egress::Drop(DropReason::NoMember));
}

#[test]
fn active_backup_announces_on_the_new_active_member() {
    let mut cfg = EtherConfig::new(BOND_MAC, Mode::ActiveBackup);
    let v4 = [Ipv4Addr::new(10, 210, 0, 1), Ipv4Addr::new(192, 0, 2, 7)];
    let v6: Ipv6Addr = "2001:db8::1".parse().expect("address");
    cfg.announce = Announce {
        ipv4: v4.to_vec(),
        ipv6: vec![v6],
        count: 2,
    };
    let mut b = bond_with(cfg, 2);
    // The first active member announces too (bond_change_active_slave from none).
    let first = drain_tx(&mut b, T0);
    assert_eq!(first.len(), 6);
    assert!(first.iter().all(|(m, _)| *m == MemberId(0)));

    b.set_link(T0, MemberId(0), false);
    let sent = drain_tx(&mut b, T0);
    let mut garp = [[0u8; 42]; 2];
    for (g, ip) in garp.iter_mut().zip(v4) {
        frames::emit_arp_request(g, BOND_MAC, ip, ip);
    }
    let mut na = [0u8; 86];
    frames::emit_unsolicited_na(&mut na, BOND_MAC, v6);
    let want: Vec<(MemberId, Vec<u8>)> = (0..2)
        .flat_map(|_| [garp[0].to_vec(), garp[1].to_vec(), na.to_vec()])
        .map(|f| (MemberId(1), f))
        .collect();
    assert_eq!(sent, want);
    // The bytes themselves: a broadcast request, sender = target = the address, from
    // the bond's MAC.
    let g = &sent[1].1;
    assert_eq!(&g[0..6], &[0xff; 6]);
    assert_eq!(&g[6..12], &BOND_MAC);
    assert_eq!(&g[20..22], &[0, 1]);
    assert_eq!(&g[22..28], &BOND_MAC);
    assert_eq!(
        (&g[28..32], &g[38..42]),
        (&[192, 0, 2, 7][..], &[192, 0, 2, 7][..])
    );
    let n = &sent[2].1;
    assert_eq!(&n[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
    assert_eq!((n[54], n[58]), (136, 0x20), "NA with Override");
    assert_eq!(&n[80..86], &BOND_MAC, "target link-layer address option");
    assert_eq!(b.status().members[1].control_tx, 6);

    // A member that loses carrier before its announcements went out sends none.
    b.set_link(T0, MemberId(0), true);
    b.set_link(T0, MemberId(1), false);
    assert_eq!(b.active(), Some(MemberId(0)));
    b.set_link(T0, MemberId(0), false);
    assert_eq!(b.active(), None);
    assert!(drain_tx(&mut b, T0).is_empty());
    assert_eq!(b.status().control_dropped, 6);

    // count 0: nothing announced.
    let mut cfg = EtherConfig::new(BOND_MAC, Mode::ActiveBackup);
    cfg.announce.ipv4 = v4.to_vec();
    cfg.announce.count = 0;
    let mut b = bond_with(cfg, 2);
    b.set_link(T0, MemberId(0), false);
    assert!(drain_tx(&mut b, T0).is_empty());
}

#[test]
fn active_backup_sends_learning_frames_for_the_macs_behind_it_on_failover() {
    let mut cfg = EtherConfig::new(BOND_MAC, Mode::ActiveBackup);
    cfg.announce.ipv4 = vec![Ipv4Addr::new(10, 210, 0, 1)];
    let mut b = bond_with(cfg, 2);
    drain_tx(&mut b, T0);
    // Frames from two hosts behind the bond (twice each), the bond's own and a
    // multicast source: two MACs learned.
    for src5 in [1, 2, 1, 2] {
        b.transmit(T0, &frame(9, src5, 0x0800));
    }
    let mut own = frame(9, 0, 0x0800);
    own[6..12].copy_from_slice(&BOND_MAC);
    b.transmit(T0, &own);
    let mut group = frame(9, 0, 0x0800);
    group[6] = 0x01;
    b.transmit(T0, &group);
    b.set_link(T0, MemberId(0), false);
    let sent = drain_tx(&mut b, T0);
    assert_eq!(sent.len(), 3, "two learning frames and the gratuitous ARP");
    assert!(sent.iter().all(|(m, _)| *m == MemberId(1)));
    for (k, src5) in [1u8, 2].into_iter().enumerate() {
        let mac = [0x02, 0, 0, 0, 0x30, src5];
        let mut want = [0u8; 42];
        frames::emit_learning(&mut want, mac);
        assert_eq!(sent[k].1, want.to_vec());
    }
    // compose_rarp's bytes: broadcast, RARP, Ethernet/IPv4, request reverse, sender and
    // target hardware address the learned MAC, zero protocol addresses.
    let f = &sent[0].1;
    let mac = [0x02, 0, 0, 0, 0x30, 1];
    assert_eq!(&f[0..6], &[0xff; 6]);
    assert_eq!(&f[6..12], &mac);
    assert_eq!(&f[12..22], &[0x80, 0x35, 0, 1, 0x08, 0, 6, 4, 0, 3]);
    assert_eq!((&f[22..28], &f[28..32]), (&mac[..], &[0u8; 4][..]));
    assert_eq!((&f[32..38], &f[38..42]), (&mac[..], &[0u8; 4][..]));
    // At most 64 are kept, the oldest replaced.
    for i in 0..100u8 {
        b.transmit(T0, &frame(9, 100 + i, 0x0800));
    }
    b.set_link(T0, MemberId(0), true);
    b.set_link(T0, MemberId(1), false);
    let sent = drain_tx(&mut b, T0);
    assert_eq!(sent.len(), 64 + 1);
}

#[test]
fn receive_drops_backup_members_looped_and_short_frames() {
    let mut b = bond(Mode::ActiveBackup, 2);
    let f = frame(1, 1, 0x0800);
    assert_eq!(b.receive(T0, MemberId(0), &f), Ingress::Deliver);
    assert_eq!(
        b.receive(T0, MemberId(1), &f),
        Ingress::Drop(DropReason::Inactive)
    );
    let mut looped = f;
    looped[6..12].copy_from_slice(&BOND_MAC);
    assert_eq!(
        b.receive(T0, MemberId(0), &looped),
        Ingress::Drop(DropReason::Looped)
    );
    assert_eq!(
        b.receive(T0, MemberId(0), &f[..13]),
        Ingress::Drop(DropReason::Short)
    );
    assert_eq!(
        b.receive(T0, MemberId(9), &f),
        Ingress::Drop(DropReason::UnknownMember)
    );
    // A LACPDU in a static mode is a frame like any other (bonding has no recv_probe).
    let mut slow = f;
    slow[12..14].copy_from_slice(&[0x88, 0x09]);
    assert_eq!(b.receive(T0, MemberId(0), &slow), Ingress::Deliver);
    // After failover the other member is the one heard.
    b.set_link(T0, MemberId(0), false);
    assert_eq!(b.receive(T0, MemberId(1), &f), Ingress::Deliver);
    let s = b.status();
    assert_eq!(s.members[0].rx_frames, 2);
    assert_eq!(s.members[0].rx_bytes, 120);
    assert_eq!(s.members[1].drops.inactive, 1);
    assert_eq!(
        (
            s.drops.inactive,
            s.drops.looped,
            s.drops.short,
            s.drops.unknown_member
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(s.members[1].state, "active");
    assert_eq!(s.members[0].state, "down");

    // The load-balancing modes hear every member.
    for mode in [Mode::RoundRobin, Mode::Xor, Mode::Broadcast] {
        let mut b = bond(mode, 2);
        assert_eq!(b.receive(T0, MemberId(1), &f), Ingress::Deliver, "{mode:?}");
    }
}

#[test]
fn config_errors() {
    let arp = |interval: u64, targets: usize| ArpMonitor {
        interval: Duration::from_millis(interval),
        targets: (0..targets)
            .map(|i| Ipv4Addr::new(10, 0, 0, i as u8))
            .collect(),
        source: Ipv4Addr::UNSPECIFIED,
    };
    let with = |mode, a| {
        let mut c = EtherConfig::new(BOND_MAC, mode);
        c.arp_monitor = Some(a);
        EtherBond::new(c).map(|_| ())
    };
    assert_eq!(
        with(Mode::ActiveBackup, arp(0, 1)),
        Err(EtherConfigError::ArpIntervalZero)
    );
    assert_eq!(
        with(Mode::Xor, arp(100, 0)),
        Err(EtherConfigError::ArpNoTargets)
    );
    assert_eq!(
        with(Mode::Xor, arp(100, 17)),
        Err(EtherConfigError::ArpTooManyTargets(17))
    );
    assert_eq!(
        with(Mode::Lacp, arp(100, 1)),
        Err(EtherConfigError::ArpMonitorWithLacp)
    );
    assert_eq!(with(Mode::RoundRobin, arp(100, 16)), Ok(()));
}

// ---- ARP monitor ----

const IV: Duration = Duration::from_millis(100);
const TARGET: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);
const SOURCE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

fn arp_bond(mode: Mode, members: usize) -> EtherBond {
    let mut cfg = EtherConfig::new(BOND_MAC, mode);
    cfg.arp_monitor = Some(ArpMonitor {
        interval: IV,
        targets: vec![TARGET],
        source: SOURCE,
    });
    bond_with(cfg, members)
}

/// The target's reply to our probe.
fn reply() -> [u8; 42] {
    let mut f = [0u8; 42];
    frames::emit_arp_request(&mut f, [2, 0, 0, 0, 0x99, 9], TARGET, SOURCE);
    f[0..6].copy_from_slice(&BOND_MAC);
    f[21] = 2;
    f
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

/// Runs the bond's timers from `from` to `to` (exclusive) in 1 ms steps; `hear(t)`
/// names the members that receive a frame at `t`. Returns the events with their times
/// and the probes sent (time, member).
#[allow(clippy::type_complexity)]
fn run(
    b: &mut EtherBond,
    from: u64,
    to: u64,
    hear: impl Fn(u64) -> Vec<u16>,
) -> (Vec<(u64, EtherEvent)>, Vec<(u64, u16)>) {
    let mut ev = Vec::new();
    let mut probes = Vec::new();
    for t in from..to {
        let now = ms(t);
        for m in hear(t) {
            let r = b.receive(now, MemberId(m), &reply());
            assert_ne!(r, Ingress::Drop(DropReason::Short));
        }
        if b.poll_timeout().is_some_and(|d| d <= now) {
            b.handle_timeout(now);
            assert!(b.poll_timeout().is_some_and(|d| d > now), "busy loop");
        }
        for (m, f) in drain_tx(b, now) {
            if frames::ethertype(&f) == frames::ETHERTYPE_ARP && f[38..42] == TARGET.octets() {
                assert_eq!(&f[28..32], &SOURCE.octets());
                probes.push((t, m.0));
            }
        }
        while let Some(e) = b.poll_event() {
            ev.push((t, e));
        }
    }
    (ev, probes)
}

#[test]
fn load_balancing_arp_monitor_takes_a_silent_member_down_and_back() {
    let mut b = arp_bond(Mode::RoundRobin, 2);
    events(&mut b);
    // Member 0 hears a reply 10 ms after each probe; member 1 hears nothing until 500 ms.
    let hear = |t: u64| {
        let mut v = Vec::new();
        if t % 100 == 10 {
            v.push(0);
            if t >= 500 {
                v.push(1);
            }
        }
        v
    };
    let (ev, probes) = run(&mut b, 0, 1000, hear);
    // A request to the target on every member with carrier, every interval.
    assert_eq!(probes.len(), 20);
    assert!(probes.contains(&(0, 0)) && probes.contains(&(900, 1)));
    // Member 1: last heard "an interval and a tick" before the start; down when that
    // is more than missed_max intervals and a half ago (the 200 ms run), up at the first
    // run with a probe sent and a frame heard within 1.5 intervals (600 ms).
    assert_eq!(
        ev,
        [
            (200, EtherEvent::MemberDown(MemberId(1))),
            (600, EtherEvent::MemberUp(MemberId(1)))
        ]
    );
    // While down it carries nothing.
    let mut b = arp_bond(Mode::RoundRobin, 2);
    run(
        &mut b,
        0,
        250,
        |t| if t % 100 == 10 { vec![0] } else { vec![] },
    );
    let f = frame(1, 1, 0x0800);
    for _ in 0..4 {
        assert_eq!(b.transmit(ms(250), &f), Egress::One(MemberId(0)));
    }
    assert_eq!(b.status().members[1].arp_up, Some(false));
}

#[test]
fn active_backup_arp_monitor_fails_over_when_the_active_member_goes_silent() {
    let mut cfg = EtherConfig::new(BOND_MAC, Mode::ActiveBackup);
    cfg.arp_monitor = Some(ArpMonitor {
        interval: IV,
        targets: vec![TARGET],
        source: SOURCE,
    });
    cfg.announce.ipv4 = vec![SOURCE];
    let mut b = bond_with(cfg, 2);
    events(&mut b);
    drain_tx(&mut b, T0);
    // Both hear the target's replies (the switch floods them) until member 0's far side
    // dies at 1000 ms.
    let hear = |t: u64| {
        let mut v = Vec::new();
        if t % 100 == 10 {
            if t < 1000 {
                v.push(0);
            }
            v.push(1);
        }
        v
    };
    let (ev, probes) = run(&mut b, 0, 2000, hear);
    // Probes go on the active member only.
    assert!(probes.iter().filter(|p| p.0 < 1200).all(|p| p.1 == 0));
    // Last heard at 910: down at the first run more than 2.5 intervals later (1200).
    assert_eq!(
        ev,
        [
            (1200, EtherEvent::MemberDown(MemberId(0))),
            (
                1200,
                EtherEvent::ActiveChanged {
                    from: Some(MemberId(0)),
                    to: Some(MemberId(1))
                }
            ),
        ]
    );
    assert!(probes.iter().filter(|p| p.0 >= 1200).all(|p| p.1 == 1));
    // A reply on the backup is the monitor's, not a dropped frame.
    assert_eq!(
        b.receive(ms(2000), MemberId(0), &reply()),
        Ingress::Consumed
    );
    let f = frame(1, 1, 0x0800);
    assert_eq!(
        b.receive(ms(2000), MemberId(0), &f),
        Ingress::Drop(DropReason::Inactive)
    );
}

#[test]
fn active_backup_arp_monitor_searches_for_a_member_when_none_is_heard() {
    let mut b = arp_bond(Mode::ActiveBackup, 3);
    events(&mut b);
    // Nobody hears anything: after the 2.5-interval grace the active member goes down,
    // the backups (silent for 3.5 intervals) too; then members are probed in turn.
    let (ev, probes) = run(&mut b, 0, 900, |_| vec![]);
    assert!(
        ev.contains(&(300, EtherEvent::MemberDown(MemberId(0)))),
        "{ev:?}"
    );
    assert_eq!(b.active(), None);
    assert!(!b.carrier());
    let later: Vec<u16> = probes.iter().filter(|p| p.0 >= 400).map(|p| p.1).collect();
    assert!(later.len() >= 4, "{probes:?}");
    for w in later.windows(2) {
        assert_eq!(w[1], (w[0] + 1) % 3, "members probed in turn: {later:?}");
    }
    // Member 2 answers: it comes up at the next run and becomes active.
    let (ev, _) = run(
        &mut b,
        900,
        1200,
        |t| if t == 950 { vec![2] } else { vec![] },
    );
    assert!(
        ev.contains(&(
            1000,
            EtherEvent::ActiveChanged {
                from: None,
                to: Some(MemberId(2))
            }
        )),
        "{ev:?}"
    );
}
