//! LACP actors cabled to each other in virtual time: frames sent by one arrive at the
//! other after a delay; time jumps from one timeout or delivery to the next.

use core::time::Duration;

use super::*;

const DELAY: Duration = Duration::from_millis(1);

fn mac(node: u8, port: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, node, port]
}

fn config(node: u8) -> LacpConfig {
    LacpConfig {
        system_mac: mac(node, 0),
        ..LacpConfig::default()
    }
}

struct Cable {
    ends: [(usize, PortId); 2],
    /// Frames are carried (false: the cable drops them, carrier stays up).
    carries: bool,
}

struct InFlight {
    at: Instant,
    node: usize,
    port: PortId,
    frame: Vec<u8>,
}

/// Actors, cables between their ports, and the frames on the cables.
struct Lab {
    now: Instant,
    nodes: Vec<Lacp>,
    cables: Vec<Cable>,
    flight: Vec<InFlight>,
    /// Nodes whose frames are dropped at the source (a partner gone silent).
    muted: Vec<bool>,
    /// LACPDUs sent: (time, node, port).
    sent: Vec<(Instant, usize, PortId)>,
    /// Events polled: (time, node, event).
    events: Vec<(Instant, usize, Event)>,
}

impl Lab {
    fn new(configs: &[LacpConfig]) -> Self {
        Lab {
            now: Instant::ZERO,
            nodes: configs.iter().map(|c| Lacp::new(*c)).collect(),
            cables: Vec::new(),
            flight: Vec::new(),
            muted: vec![false; configs.len()],
            sent: Vec::new(),
            events: Vec::new(),
        }
    }

    fn port(&mut self, node: usize) -> PortId {
        let n = self.nodes[node].ports.len() as u8 + 1;
        let cfg = PortConfig {
            mac: mac(node as u8 + 1, n),
            number: u16::from(n),
            priority: 255,
        };
        let now = self.now;
        self.nodes[node].add_port(now, cfg, true).expect("port")
    }

    /// Cables a new port of `a` to a new port of `b`; returns the cable's index.
    fn cable(&mut self, a: usize, b: usize) -> usize {
        let pa = self.port(a);
        let pb = self.port(b);
        self.cables.push(Cable {
            ends: [(a, pa), (b, pb)],
            carries: true,
        });
        self.cables.len() - 1
    }

    fn end(&self, cable: usize, side: usize) -> (usize, PortId) {
        self.cables[cable].ends[side]
    }

    fn flush(&mut self) {
        let mut buf = [0u8; FRAME_LEN];
        for node in 0..self.nodes.len() {
            while let Some((port, len)) = self.nodes[node].poll_transmit(self.now, &mut buf) {
                assert_eq!(len, FRAME_LEN);
                if matches!(parse(&buf), Ok(SlowPdu::Lacp(_))) {
                    self.sent.push((self.now, node, port));
                }
                if self.muted[node] {
                    continue;
                }
                let Some(cable) = self
                    .cables
                    .iter()
                    .find(|c| c.ends.contains(&(node, port)) && c.carries)
                else {
                    continue;
                };
                let (to_node, to_port) = if cable.ends[0] == (node, port) {
                    cable.ends[1]
                } else {
                    cable.ends[0]
                };
                self.flight.push(InFlight {
                    at: self.now + DELAY,
                    node: to_node,
                    port: to_port,
                    frame: buf[..len].to_vec(),
                });
            }
            while let Some(e) = self.nodes[node].poll_event() {
                self.events.push((self.now, node, e));
            }
        }
    }

    /// Runs until `end`, or until `done` holds (checked after every step); returns the
    /// time `done` first held.
    fn run_until(&mut self, end: Instant, mut done: impl FnMut(&Lab) -> bool) -> Option<Instant> {
        let mut steps = 0u32;
        loop {
            self.flush();
            if done(self) {
                return Some(self.now);
            }
            let next = self
                .nodes
                .iter()
                .filter_map(|n| n.poll_timeout())
                .chain(self.flight.iter().map(|f| f.at))
                .min()
                .unwrap_or(Instant::FAR_FUTURE);
            steps += 1;
            assert!(
                steps < 200_000,
                "no progress at {:?}: next {next:?}",
                self.now
            );
            if next > end {
                self.now = end;
                for n in &mut self.nodes {
                    n.handle_timeout(end);
                }
                self.flush();
                return done(self).then_some(self.now);
            }
            self.now = self.now.max(next);
            let now = self.now;
            let (due, later): (Vec<_>, Vec<_>) = self.flight.drain(..).partition(|f| f.at <= now);
            self.flight = later;
            for f in due {
                match self.nodes[f.node].handle_frame(now, f.port, &f.frame) {
                    Ok(()) | Err(LacpError::PortDown(_)) => {}
                    Err(e) => panic!("frame refused: {e}"),
                }
            }
            for n in &mut self.nodes {
                n.handle_timeout(now);
            }
        }
    }

    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.run_until(end, |_| false);
    }

    fn state(&self, node: usize, port: PortId) -> State {
        self.nodes[node].actor_state(port).expect("port")
    }

    fn cd(&self, node: usize, port: PortId) -> bool {
        self.state(node, port).0 & 0x30 == 0x30
    }

    fn distributing(&self, node: usize) -> Vec<PortId> {
        self.nodes[node].distributing_ports().collect()
    }

    /// Every port of every cable collecting and distributing on both sides.
    fn all_cd(&self) -> bool {
        self.cables
            .iter()
            .all(|c| c.ends.iter().all(|&(n, p)| self.cd(n, p)))
    }
}

fn secs(s: f64) -> Instant {
    Instant::from_micros((s * 1e6) as u64)
}

#[test]
fn two_active_fast_actors_aggregate_within_three_seconds() {
    let mut lab = Lab::new(&[config(1), config(2)]);
    lab.cable(0, 1);
    lab.cable(0, 1);
    let t = lab
        .run_until(secs(10.0), Lab::all_cd)
        .expect("never aggregated");
    // wait_while (2 s) then one exchange: 2 s and a few ms.
    assert!(t >= secs(2.0) && t <= secs(3.0), "aggregated at {t:?}");
    assert_eq!(lab.distributing(0).len(), 2);
    assert_eq!(lab.distributing(1).len(), 2);
    for node in 0..2 {
        let joined = lab
            .events
            .iter()
            .filter(|(_, n, e)| *n == node && matches!(e, Event::Distributing(_)))
            .count();
        assert_eq!(joined, 2, "node {node}");
    }
    // Steady state: each port sends once a second (fast rate asked by the partner).
    let from = lab.now;
    lab.run_for(Duration::from_secs(10));
    for c in 0..2 {
        for side in 0..2 {
            let (n, p) = lab.end(c, side);
            let count = lab
                .sent
                .iter()
                .filter(|&&(t, sn, sp)| t > from && sn == n && sp == p)
                .count();
            assert!((9..=11).contains(&count), "{count} LACPDUs in 10 s");
        }
    }
    let st = lab.nodes[0].status();
    assert!(st.aggregator_up);
    assert_eq!(st.ports[0].rx_state, "current");
    assert_eq!(st.ports[0].mux_state, "collecting_distributing");
    assert_eq!(st.ports[0].partner.system, "02:00:00:00:02:00");
    assert_eq!(
        st.ports[0].actor.state_names,
        [
            "activity",
            "timeout",
            "aggregation",
            "synchronized",
            "collecting",
            "distributing"
        ]
    );
}

#[test]
fn slow_rate_sends_every_thirty_seconds() {
    let slow = |n| LacpConfig {
        rate: Rate::Slow,
        ..config(n)
    };
    let mut lab = Lab::new(&[slow(1), slow(2)]);
    lab.cable(0, 1);
    let t = lab
        .run_until(secs(10.0), Lab::all_cd)
        .expect("never aggregated");
    assert!(t <= secs(3.0), "aggregated at {t:?}");
    let from = lab.now;
    lab.run_for(Duration::from_secs(300));
    let count = lab
        .sent
        .iter()
        .filter(|&&(t, n, _)| t > from && n == 0)
        .count();
    assert!((9..=11).contains(&count), "{count} LACPDUs in 300 s");
    assert!(lab.all_cd());
}

#[test]
fn active_and_passive_aggregate_and_a_passive_pair_never_does() {
    let passive = |n| LacpConfig {
        mode: Mode::Passive,
        ..config(n)
    };
    let mut lab = Lab::new(&[config(1), passive(2)]);
    lab.cable(0, 1);
    lab.cable(0, 1);
    let t = lab
        .run_until(secs(10.0), Lab::all_cd)
        .expect("never aggregated");
    assert!(t <= secs(3.0), "aggregated at {t:?}");
    assert_eq!(lab.state(1, lab.end(0, 1).1).0 & State::ACTIVITY, 0);

    let mut lab = Lab::new(&[passive(1), passive(2)]);
    lab.cable(0, 1);
    lab.cable(0, 1);
    lab.run_for(Duration::from_secs(120));
    assert!(
        lab.sent.is_empty(),
        "passive actors spoke: {:?}",
        lab.sent.len()
    );
    for c in 0..2 {
        for side in 0..2 {
            let (n, p) = lab.end(c, side);
            assert_eq!(lab.state(n, p).0 & 0x30, 0);
        }
    }
    assert!(lab.distributing(0).is_empty() && lab.distributing(1).is_empty());
}

#[test]
fn a_silent_partner_expires_after_three_fast_intervals() {
    let mut lab = Lab::new(&[config(1), config(2)]);
    lab.cable(0, 1);
    lab.cable(0, 1);
    lab.run_until(secs(10.0), Lab::all_cd).expect("aggregated");
    lab.run_for(Duration::from_secs(5));
    let muted_at = lab.now;
    lab.muted[1] = true;
    let t = lab
        .run_until(muted_at + Duration::from_secs(10), |l| {
            l.distributing(0).is_empty()
        })
        .expect("never left");
    let after = t - muted_at;
    // The last LACPDU arrived at most 1 s before the partner went silent; the port
    // expires 3 s after the last one.
    assert!(
        after > Duration::from_secs(2) && after <= Duration::from_secs(3),
        "left distributing {after:?} after the partner went silent"
    );
    let (n, p) = lab.end(0, 0);
    let s = lab.state(n, p);
    assert!(
        s.has(State::EXPIRED) && !s.has(State::DISTRIBUTING),
        "{s:?}"
    );
    assert_eq!(lab.nodes[0].status().ports[0].rx_state, "expired");
    // Then 3 s more of EXPIRED, and the partner is defaulted.
    lab.run_for(Duration::from_millis(3100));
    let s = lab.state(n, p);
    assert!(s.has(State::DEFAULTED) && !s.has(State::EXPIRED), "{s:?}");
    assert!(lab
        .events
        .iter()
        .any(|(_, node, e)| *node == 0 && *e == Event::PartnerDefaulted(p)));
    assert_eq!(lab.nodes[0].partner(p).expect("port").system, [0; 6]);
}

#[test]
fn a_silent_slow_partner_expires_after_ninety_seconds() {
    let slow = |n| LacpConfig {
        rate: Rate::Slow,
        ..config(n)
    };
    let mut lab = Lab::new(&[slow(1), slow(2)]);
    lab.cable(0, 1);
    lab.run_until(secs(10.0), Lab::all_cd).expect("aggregated");
    lab.run_for(Duration::from_secs(100));
    let muted_at = lab.now;
    lab.muted[1] = true;
    let t = lab
        .run_until(muted_at + Duration::from_secs(200), |l| {
            l.distributing(0).is_empty()
        })
        .expect("never left");
    let after = t - muted_at;
    assert!(
        after > Duration::from_secs(60) && after <= Duration::from_secs(90),
        "left distributing {after:?} after the partner went silent"
    );
}

#[test]
fn link_down_removes_the_port_at_once() {
    let mut lab = Lab::new(&[config(1), config(2)]);
    lab.cable(0, 1);
    lab.cable(0, 1);
    lab.run_until(secs(10.0), Lab::all_cd).expect("aggregated");
    let (n, p) = lab.end(0, 0);
    let now = lab.now;
    lab.nodes[n].set_link(now, p, false).expect("port");
    assert_eq!(lab.distributing(0), vec![lab.end(1, 0).1]);
    assert_eq!(
        lab.state(n, p).0 & 0x38,
        0,
        "no sync, collecting, distributing"
    );
    assert_eq!(lab.nodes[n].poll_event(), Some(Event::NotDistributing(p)));
    assert_eq!(
        lab.nodes[n].handle_frame(now, p, &[0; 124]),
        Err(LacpError::PortDown(p))
    );
    // Back up: it aggregates again after wait_while.
    lab.nodes[n].set_link(now, p, true).expect("port");
    let t = lab.run_until(now + Duration::from_secs(10), Lab::all_cd);
    assert!(
        t.is_some_and(|t| t - now <= Duration::from_secs(3)),
        "{t:?}"
    );
}

#[test]
fn min_links_holds_the_aggregator_down() {
    let with_min = |n, m| LacpConfig {
        min_links: m,
        ..config(n)
    };
    let mut lab = Lab::new(&[with_min(1, 3), config(2)]);
    lab.cable(0, 1);
    lab.cable(0, 1);
    lab.run_until(secs(10.0), Lab::all_cd).expect("aggregated");
    // Both ports collect and distribute as LACP goes, but the bond does not use them.
    assert!(lab.distributing(0).is_empty());
    assert!(!lab.nodes[0].aggregator_up());
    assert_eq!(lab.distributing(1).len(), 2);

    let mut lab = Lab::new(&[with_min(1, 2), config(2)]);
    lab.cable(0, 1);
    lab.cable(0, 1);
    lab.run_until(secs(10.0), Lab::all_cd).expect("aggregated");
    assert_eq!(lab.distributing(0).len(), 2);
    let (n, p) = lab.end(0, 0);
    let now = lab.now;
    lab.nodes[n].set_link(now, p, false).expect("port");
    assert!(lab.distributing(0).is_empty(), "one port left, min_links 2");
    assert!(!lab.nodes[0].status().aggregator_up);
}

#[test]
fn fallback_ab_engages_with_a_silent_partner_and_ends_when_lacp_speaks() {
    let fb = LacpConfig {
        fallback_ab: true,
        ..config(1)
    };
    let mut lab = Lab::new(&[fb, config(2)]);
    lab.cable(0, 1);
    lab.cable(0, 1);
    lab.muted[1] = true;
    let t = lab
        .run_until(secs(20.0), |l| !l.distributing(0).is_empty())
        .expect("fallback never engaged");
    // EXPIRED lasts the short timeout: 3 s with nothing heard.
    assert!(t >= secs(3.0) && t <= secs(3.1), "engaged at {t:?}");
    assert!(lab.nodes[0].fallback_engaged());
    let first = lab.end(0, 0).1;
    assert_eq!(lab.distributing(0), vec![first], "active-backup: one port");
    assert!(lab
        .events
        .iter()
        .any(|(_, n, e)| *n == 0 && *e == Event::FallbackEngaged(first)));
    // The active port fails: the other (standby, done waiting) takes over at once.
    lab.run_for(Duration::from_secs(5));
    let now = lab.now;
    lab.nodes[0].set_link(now, first, false).expect("port");
    assert_eq!(lab.distributing(0), vec![lab.end(1, 0).1]);
    lab.nodes[0].set_link(now, first, true).expect("port");
    lab.run_for(Duration::from_secs(5));
    assert_eq!(
        lab.distributing(0),
        vec![lab.end(1, 0).1],
        "no flapping back"
    );
    // The partner speaks LACP: fallback ends, the two aggregate.
    lab.muted[1] = false;
    let unmuted = lab.now;
    let t = lab
        .run_until(unmuted + Duration::from_secs(10), Lab::all_cd)
        .expect("never aggregated");
    assert!(t - unmuted <= Duration::from_secs(4), "{:?}", t - unmuted);
    assert!(!lab.nodes[0].fallback_engaged());
    assert_eq!(lab.distributing(0).len(), 2);
    assert!(lab
        .events
        .iter()
        .any(|(_, n, e)| *n == 0 && *e == Event::FallbackDisengaged));

    // Without fallback, a silent partner means no traffic at all.
    let mut lab = Lab::new(&[config(1), config(2)]);
    lab.cable(0, 1);
    lab.muted[1] = true;
    lab.run_for(Duration::from_secs(20));
    assert!(lab.distributing(0).is_empty());
}

#[test]
fn partners_with_another_system_or_key_go_to_another_aggregator() {
    let other_key = LacpConfig {
        key: 9,
        ..config(2)
    };
    for partner_c in [config(3), other_key] {
        let mut lab = Lab::new(&[config(1), config(2), partner_c]);
        lab.cable(0, 1);
        lab.cable(0, 1);
        let odd = lab.cable(0, 2);
        lab.run_for(Duration::from_secs(10));
        // Node 0 uses the aggregator with the most ports: the two cables to node 1.
        let to_b: Vec<PortId> = (0..2).map(|c| lab.end(c, 0).1).collect();
        assert_eq!(lab.distributing(0), to_b);
        let (n, p) = lab.end(odd, 0);
        let s = lab.state(n, p);
        assert!(!s.has(State::SYNC), "standby port in sync: {s:?}");
        assert_eq!(lab.nodes[0].status().ports[2].selected, "standby");
        // Its partner sees it out of sync and does not distribute either.
        let (cn, cp) = lab.end(odd, 1);
        assert!(!lab.cd(cn, cp));
        assert!(lab.distributing(2).is_empty());
        // The two cables to node 1 fail: the odd port's aggregator takes over.
        let now = lab.now;
        for c in 0..2 {
            let (n, p) = lab.end(c, 0);
            lab.nodes[n].set_link(now, p, false).expect("port");
        }
        let t = lab
            .run_until(now + Duration::from_secs(10), |l| {
                l.distributing(0) == vec![p]
            })
            .expect("never moved");
        assert!(t - now <= Duration::from_secs(3), "{:?}", t - now);
    }
}

#[test]
fn a_port_cabled_to_its_own_bond_is_never_selected() {
    let mut lab = Lab::new(&[config(1)]);
    lab.cable(0, 0);
    lab.run_for(Duration::from_secs(10));
    assert!(lab.distributing(0).is_empty());
    assert!(lab.nodes[0]
        .status()
        .ports
        .iter()
        .all(|p| p.selected == "unselected" && p.rx_state == "current"));
}

#[test]
fn marker_information_is_answered_with_a_response() {
    let mut lacp = Lacp::new(config(1));
    let port = lacp
        .add_port(
            Instant::ZERO,
            PortConfig {
                mac: mac(1, 1),
                number: 1,
                priority: 255,
            },
            true,
        )
        .expect("port");
    let mut buf = [0u8; FRAME_LEN];
    while lacp.poll_transmit(Instant::ZERO, &mut buf).is_some() {}
    let request = Marker {
        kind: MarkerKind::Information,
        requester_port: 4,
        requester_system: mac(9, 0),
        transaction_id: 77,
    };
    emit_marker(mac(9, 4), &request, &mut buf);
    let frame = buf;
    lacp.handle_frame(Instant::ZERO, port, &frame)
        .expect("marker");
    assert!(lacp.poll_timeout().is_some_and(|t| t <= Instant::ZERO));
    let (p, len) = lacp
        .poll_transmit(Instant::ZERO, &mut buf)
        .expect("response");
    assert_eq!((p, len), (port, FRAME_LEN));
    assert_eq!(&buf[6..12], &mac(1, 1), "sent from the port's address");
    assert_eq!(
        parse(&buf),
        Ok(SlowPdu::Marker(Marker {
            kind: MarkerKind::Response,
            ..request
        }))
    );
    // A response is counted, never answered.
    lacp.handle_frame(Instant::ZERO, port, &buf)
        .expect("response in");
    assert_eq!(lacp.poll_transmit(Instant::ZERO, &mut buf), None);
    let st = lacp.status();
    assert_eq!(
        (st.ports[0].markers_rx, st.ports[0].marker_responses_tx),
        (2, 1)
    );
}

#[test]
fn no_more_than_three_lacpdus_a_second() {
    let mut lacp = Lacp::new(config(1));
    let port = lacp
        .add_port(
            Instant::ZERO,
            PortConfig {
                mac: mac(1, 1),
                number: 1,
                priority: 255,
            },
            true,
        )
        .expect("port");
    let mut buf = [0u8; FRAME_LEN];
    let mut sent = Vec::new();
    // A partner changing its mind every 10 ms: each LACPDU sets NTT.
    for i in 0..300u64 {
        let now = Instant::from_millis(i * 10);
        let pdu = Lacpdu {
            actor: PortInfo {
                system_priority: 1,
                system: mac(2, 0),
                key: (i % 7) as u16 + 1,
                port_priority: 1,
                port: 1,
                state: State(0x0f),
            },
            partner: PortInfo::default(),
            collector_max_delay: 0,
        };
        let mut frame = [0u8; FRAME_LEN];
        emit_lacpdu(mac(2, 1), &pdu, &mut frame);
        lacp.handle_frame(now, port, &frame).expect("lacpdu");
        while let Some((p, _)) = lacp.poll_transmit(now, &mut buf) {
            assert_eq!(p, port);
            sent.push(now);
        }
    }
    assert!(sent.len() >= 8, "NTT never honoured: {}", sent.len());
    for w in sent.windows(4) {
        assert!(
            w[3] - w[0] >= Duration::from_secs(1),
            "4 LACPDUs within 1 s: {w:?}"
        );
    }
}

#[test]
fn ports_are_checked_when_added() {
    let mut lacp = Lacp::new(config(1));
    let cfg = PortConfig {
        mac: mac(1, 1),
        number: 1,
        priority: 255,
    };
    assert!(lacp.add_port(Instant::ZERO, cfg, false).is_ok());
    assert_eq!(
        lacp.add_port(Instant::ZERO, cfg, false),
        Err(LacpError::DuplicatePortNumber(1))
    );
    assert_eq!(
        lacp.add_port(Instant::ZERO, PortConfig { number: 0, ..cfg }, false),
        Err(LacpError::ZeroPortNumber)
    );
    assert_eq!(
        lacp.set_link(Instant::ZERO, PortId(9), true),
        Err(LacpError::UnknownPort(PortId(9)))
    );
    assert_eq!(
        lacp.poll_timeout(),
        None,
        "a port that is down has no timers"
    );
}

#[test]
fn removing_a_port_stops_it_and_names_the_partner_first_heard() {
    let mut lab = Lab::new(&[config(1), config(2)]);
    lab.cable(0, 1);
    lab.cable(0, 1);
    lab.run_until(secs(10.0), Lab::all_cd).expect("aggregated");
    let (n, p) = lab.end(0, 0);
    let heard = lab.events.iter().find_map(|(_, node, e)| match e {
        Event::PartnerChanged { port, partner } if *node == n && *port == p => Some(*partner),
        _ => None,
    });
    assert_eq!(heard.map(|h| (h.system, h.port)), Some((mac(2, 0), 1)));
    let now = lab.now;
    lab.nodes[n].remove_port(now, p).expect("port");
    assert_eq!(lab.nodes[n].poll_event(), Some(Event::NotDistributing(p)));
    assert_eq!(lab.distributing(n), vec![lab.end(1, 0).1]);
    assert_eq!(
        lab.nodes[n].remove_port(now, p),
        Err(LacpError::UnknownPort(p))
    );
    assert_eq!(lab.nodes[n].actor_state(p), None);
}

#[test]
fn a_captured_cisco_lacpdu_is_recorded_as_the_partner_and_answered() {
    let mut lacp = Lacp::new(config(1));
    let cfg = PortConfig {
        mac: mac(1, 1),
        number: 1,
        priority: 255,
    };
    let port = lacp.add_port(Instant::ZERO, cfg, true).expect("port");
    let mut buf = [0u8; FRAME_LEN];
    while lacp.poll_transmit(Instant::ZERO, &mut buf).is_some() {}
    let t = Instant::from_millis(500);
    let frame = super::pdu_tests::hex(super::pdu_tests::CISCO_FRAME_1);
    lacp.handle_frame(t, port, &frame).expect("captured LACPDU");
    let partner = lacp.partner(port).expect("port");
    assert_eq!(partner.system, [0x00, 0x13, 0xc4, 0x12, 0x0f, 0x00]);
    assert_eq!(
        (partner.key, partner.port, partner.port_priority),
        (13, 22, 32768)
    );
    // Its partner field names another switch, so it is not in sync with us, and our
    // next LACPDU (at once: its view of us is stale) tells it who we are.
    assert!(!partner.state.has(State::SYNC));
    assert_eq!(lacp.status().ports[0].rx_state, "current");
    let (p, _) = lacp.poll_transmit(t, &mut buf).expect("answer");
    assert_eq!(p, port);
    let Ok(SlowPdu::Lacp(ours)) = parse(&buf) else {
        panic!("not an LACPDU");
    };
    assert_eq!(ours.partner.system, partner.system);
    assert_eq!(ours.actor.system, mac(1, 0));
}
