//! Arbitrary frames, link changes and time into an actor: no panic, and the state bits
//! stay consistent after every step.

use core::time::Duration;

use proptest::prelude::*;

use super::*;

#[derive(Clone, Debug)]
enum Op {
    Wait(u16),
    Bytes(usize, Vec<u8>),
    /// A well-formed LACPDU: partner system (0: us, so it can match), key, the partner's
    /// view of our port (true: right), and both state bytes.
    Lacpdu(usize, u8, u16, bool, u8, u8),
    Marker(usize, bool),
    Link(usize, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u16..5000).prop_map(Op::Wait),
        (0usize..3, proptest::collection::vec(any::<u8>(), 0..1600))
            .prop_map(|(p, b)| Op::Bytes(p, b)),
        (
            0usize..3,
            0u8..3,
            1u16..3,
            any::<bool>(),
            any::<u8>(),
            any::<u8>()
        )
            .prop_map(|(p, s, k, v, a, b)| Op::Lacpdu(p, s, k, v, a, b)),
        (0usize..3, any::<bool>()).prop_map(|(p, i)| Op::Marker(p, i)),
        (0usize..3, any::<bool>()).prop_map(|(p, u)| Op::Link(p, u)),
    ]
}

fn check(lacp: &Lacp, ports: &[PortId]) -> Result<(), TestCaseError> {
    let dist: Vec<PortId> = lacp.distributing_ports().collect();
    for &p in ports {
        let s = lacp.actor_state(p).expect("port");
        if s.has(State::DISTRIBUTING) {
            prop_assert!(
                s.has(State::COLLECTING),
                "distributing, not collecting: {s:?}"
            );
            prop_assert!(!s.has(State::EXPIRED), "distributing while expired: {s:?}");
        }
        if s.has(State::COLLECTING) {
            prop_assert!(s.has(State::SYNC), "collecting, not in sync: {s:?}");
        }
        // (Expired and Defaulted may be set together: INITIALIZE records the defaults,
        // EXPIRED does not clear Defaulted, 802.1AX §5.4.12.)
        if dist.contains(&p) {
            prop_assert!(
                s.has(State::DISTRIBUTING),
                "used but not distributing: {s:?}"
            );
        }
    }
    if !lacp.fallback_engaged() {
        // Without fallback, a port carries traffic only with a partner in sync.
        for &p in &dist {
            let partner = lacp.partner(p).expect("port");
            prop_assert!(partner.state.has(State::SYNC));
        }
    } else {
        prop_assert!(dist.len() <= 1, "fallback on {} ports", dist.len());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_inputs_keep_the_state_bits_consistent(
        fast in any::<bool>(),
        active in any::<bool>(),
        min_links in 0u16..3,
        fallback_ab in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let cfg = LacpConfig {
            system_mac: [2, 0, 0, 0, 0, 1],
            rate: if fast { Rate::Fast } else { Rate::Slow },
            mode: if active { Mode::Active } else { Mode::Passive },
            min_links,
            fallback_ab,
            ..LacpConfig::default()
        };
        let mut lacp = Lacp::new(cfg);
        let mut now = Instant::ZERO;
        let ports: Vec<PortId> = (1..=3u16)
            .map(|n| {
                let pc = PortConfig { mac: [2, 0, 0, 0, 1, n as u8], number: n, priority: 255 };
                lacp.add_port(now, pc, n != 3).expect("port")
            })
            .collect();
        let mut buf = [0u8; FRAME_LEN];
        for op in ops {
            match op {
                Op::Wait(ms) => {
                    now += Duration::from_millis(u64::from(ms));
                    lacp.handle_timeout(now);
                }
                Op::Bytes(p, bytes) => {
                    let _ = lacp.handle_frame(now, ports[p], &bytes);
                }
                Op::Lacpdu(p, sys, key, right, a, b) => {
                    let port = ports[p];
                    let me = PortInfo {
                        system_priority: cfg.system_priority,
                        system: cfg.system_mac,
                        key: cfg.key,
                        port_priority: 255,
                        port: port.0 + 1,
                        state: State(b),
                    };
                    let pdu = Lacpdu {
                        actor: PortInfo {
                            system_priority: 100,
                            system: [2, 0, 0, 0, 0, 10 + sys],
                            key,
                            port_priority: 1,
                            port: 7 + port.0,
                            state: State(a),
                        },
                        partner: if right { me } else { PortInfo { state: State(b), ..PortInfo::default() } },
                        collector_max_delay: 0,
                    };
                    let mut f = [0u8; FRAME_LEN];
                    emit_lacpdu([2, 0, 0, 0, 9, 9], &pdu, &mut f);
                    let r = lacp.handle_frame(now, port, &f);
                    prop_assert!(r.is_ok() || r == Err(LacpError::PortDown(port)), "{r:?}");
                }
                Op::Marker(p, info) => {
                    let m = Marker {
                        kind: if info { MarkerKind::Information } else { MarkerKind::Response },
                        requester_port: 3,
                        requester_system: [2, 0, 0, 0, 0, 10],
                        transaction_id: 5,
                    };
                    let mut f = [0u8; FRAME_LEN];
                    emit_marker([2, 0, 0, 0, 9, 9], &m, &mut f);
                    let _ = lacp.handle_frame(now, ports[p], &f);
                }
                Op::Link(p, up) => {
                    lacp.set_link(now, ports[p], up).expect("port");
                }
            }
            let mut sent = 0;
            while let Some((port, len)) = lacp.poll_transmit(now, &mut buf) {
                prop_assert!(ports.contains(&port));
                prop_assert_eq!(len, FRAME_LEN);
                prop_assert!(parse(&buf).is_ok(), "emitted an unreadable frame");
                sent += 1;
                prop_assert!(sent <= 6, "transmit never ends");
            }
            while lacp.poll_event().is_some() {}
            if let Some(t) = lacp.poll_timeout() {
                // A timeout in the past is work to do now, not a busy loop: after
                // handling it and sending, the next one is later.
                if t <= now {
                    lacp.handle_timeout(now);
                    while lacp.poll_transmit(now, &mut buf).is_some() {}
                    prop_assert!(lacp.poll_timeout().is_none_or(|t| t > now), "busy loop at {now:?}");
                }
            }
            check(&lacp, &ports)?;
        }
    }
}
