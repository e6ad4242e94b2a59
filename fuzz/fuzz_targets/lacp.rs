//! The LACP actor (`braid_core::lacp::Lacp`) and its frame decoder under arbitrary input.
//!
//! The input's first part is one frame for the decoder alone: when `lacp::parse` accepts
//! it, emitting what it read gives back the same bytes at every position the decoder
//! checks or reads (everything but the version and the reserved bytes), and parsing that
//! gives the same PDU.
//!
//! Then an actor with two ports, cabled to an honest partner actor, runs operations:
//! time passing, the partner's frames delivered (as sent, with a byte changed, or
//! dropped), raw bytes of any length up to 64 KiB (oversized frames included) on either
//! port, links going down and up. After every operation: no panic; every frame the actor
//! emits parses; Distributing implies Collecting implies Sync and Expired implies not
//! Distributing on every port; a port the actor says traffic may use is distributing;
//! and `poll_timeout` in the past is work that handling clears (no busy loop).
#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use braid_core::lacp::{
    emit_lacpdu, emit_marker, parse, Lacp, LacpConfig, LacpError, Mode, PortConfig, PortId,
    Rate, SlowPdu, State, FRAME_LEN,
};
use braid_core::Instant;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Wait { ms: u16 },
    /// Deliver the partner's oldest frame on a cable, changing byte `at` by `xor`.
    Deliver { cable: bool, at: u8, xor: u8 },
    Drop { cable: bool },
    Raw { port: bool, bytes: Vec<u8> },
    Oversized { port: bool, len: u16, fill: u8 },
    Link { port: bool, up: bool },
}

#[derive(Arbitrary, Debug)]
struct Input {
    frame: Vec<u8>,
    fast: bool,
    active: bool,
    partner_active: bool,
    min_links: u8,
    fallback_ab: bool,
    ops: Vec<Op>,
}

fn check_decoder(frame: &[u8]) {
    let Ok(pdu) = parse(frame) else { return };
    let mut buf = [0u8; FRAME_LEN];
    let src: [u8; 6] = frame[6..12].try_into().expect("parse checked the length");
    match pdu {
        SlowPdu::Lacp(l) => {
            emit_lacpdu(src, &l, &mut buf);
            // Read or checked: header, subtype, TLV headers and the info fields.
            let checked = (0..15)
                .chain(16..33)
                .chain(36..53)
                .chain(56..60)
                .chain(72..74);
            for i in checked {
                assert_eq!(buf[i], frame[i], "byte {i}");
            }
        }
        SlowPdu::Marker(m) => {
            emit_marker(src, &m, &mut buf);
            for i in (0..15).chain(16..30).chain(32..34) {
                assert_eq!(buf[i], frame[i], "byte {i}");
            }
        }
    }
    assert_eq!(parse(&buf), Ok(pdu));
}

fn check_actor(a: &Lacp, ports: &[PortId]) {
    let dist: Vec<PortId> = a.distributing_ports().collect();
    for &p in ports {
        let s = a.actor_state(p).expect("port");
        if s.has(State::DISTRIBUTING) {
            assert!(s.has(State::COLLECTING) && !s.has(State::EXPIRED), "{s:?}");
        }
        if s.has(State::COLLECTING) {
            assert!(s.has(State::SYNC), "{s:?}");
        }
        if dist.contains(&p) {
            assert!(s.has(State::DISTRIBUTING), "{s:?}");
        }
    }
}

fn port_cfg(node: u8, n: u16) -> PortConfig {
    PortConfig {
        mac: [2, 0, 0, 0, node, n as u8],
        number: n,
        priority: 255,
    }
}

fuzz_target!(|input: Input| {
    check_decoder(&input.frame);

    let cfg = LacpConfig {
        system_mac: [2, 0, 0, 0, 0, 1],
        rate: if input.fast { Rate::Fast } else { Rate::Slow },
        mode: if input.active { Mode::Active } else { Mode::Passive },
        min_links: u16::from(input.min_links % 4),
        fallback_ab: input.fallback_ab,
        ..LacpConfig::default()
    };
    let partner_cfg = LacpConfig {
        system_mac: [2, 0, 0, 0, 0, 2],
        mode: if input.partner_active { Mode::Active } else { Mode::Passive },
        ..LacpConfig::default()
    };
    let mut now = Instant::ZERO;
    let mut a = Lacp::new(cfg);
    let mut b = Lacp::new(partner_cfg);
    let ours: Vec<PortId> = (1..=2)
        .map(|n| a.add_port(now, port_cfg(1, n), true).expect("port"))
        .collect();
    let theirs: Vec<PortId> = (1..=2)
        .map(|n| b.add_port(now, port_cfg(2, n), true).expect("port"))
        .collect();
    // Frames from the partner waiting on each cable (bounded).
    let mut queued: [Vec<[u8; FRAME_LEN]>; 2] = [Vec::new(), Vec::new()];
    let mut buf = [0u8; FRAME_LEN];
    for op in input.ops.iter().take(512) {
        let cable = |c: bool| usize::from(c);
        match *op {
            Op::Wait { ms } => {
                now += Duration::from_millis(u64::from(ms));
                a.handle_timeout(now);
                b.handle_timeout(now);
            }
            Op::Deliver { cable: c, at, xor } => {
                let c = cable(c);
                if !queued[c].is_empty() {
                    let mut f = queued[c].remove(0);
                    if let Some(byte) = f.get_mut(usize::from(at)) {
                        *byte ^= xor;
                    }
                    match a.handle_frame(now, ours[c], &f) {
                        Ok(()) => {}
                        Err(LacpError::Frame(_)) | Err(LacpError::PortDown(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            Op::Drop { cable: c } => {
                let c = cable(c);
                if !queued[c].is_empty() {
                    queued[c].remove(0);
                }
            }
            Op::Raw { port, ref bytes } => {
                let _ = a.handle_frame(now, ours[cable(port)], bytes);
            }
            Op::Oversized { port, len, fill } => {
                let mut f = vec![fill; usize::from(len)];
                if f.len() >= 15 {
                    f[..6].copy_from_slice(&[0x01, 0x80, 0xc2, 0, 0, 2]);
                    f[12..15].copy_from_slice(&[0x88, 0x09, 1]);
                }
                let r = a.handle_frame(now, ours[cable(port)], &f);
                assert!(r.is_err() || (15..=1518).contains(&f.len()), "{r:?}");
            }
            Op::Link { port, up } => {
                let c = cable(port);
                a.set_link(now, ours[c], up).expect("port");
                b.set_link(now, theirs[c], up).expect("port");
                queued[c].clear();
            }
        }
        // What the actor sends reaches the partner; what the partner sends waits.
        let mut sent = 0;
        while let Some((port, len)) = a.poll_transmit(now, &mut buf) {
            assert_eq!(len, FRAME_LEN);
            assert!(parse(&buf).is_ok(), "emitted an unreadable frame");
            sent += 1;
            assert!(sent <= 8, "transmit never ends");
            let c = usize::from(port == ours[1]);
            let _ = b.handle_frame(now, theirs[c], &buf);
        }
        while let Some((port, _)) = b.poll_transmit(now, &mut buf) {
            let c = usize::from(port == theirs[1]);
            if queued[c].len() < 16 {
                queued[c].push(buf);
            }
        }
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
        if a.poll_timeout().is_some_and(|t| t <= now) {
            a.handle_timeout(now);
            while a.poll_transmit(now, &mut buf).is_some() {}
            assert!(
                a.poll_timeout().is_none_or(|t| t > now),
                "busy loop at {now:?}"
            );
        }
        check_actor(&a, &ours);
    }
});
