//! LACPDU and Marker PDU bytes: golden frames built by hand from the standard's layout,
//! a capture from real switches, and every refusal.

use super::pdu::*;

pub(super) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("test hex"))
        .collect()
}

/// Frame 1 of `tests/LACP.pcap` in the-tcpdump-group/tcpdump (added in commit c661f8b,
/// "use more PacketLife captures for test cases"; a Cisco switch, 00:13:c4:12:0f:0d,
/// talking to another, 00:0e:83:16:f5:10). tcpdump's own decode, `tests/lacp-ev.out`:
/// actor 00:13:c4:12:0f:00 priority 32768 key 13 port 22 port priority 32768, state
/// [Activity, Aggregation, Expired]; partner 00:0e:83:16:f5:00 priority 32768 key 13
/// port 25 port priority 32768, state [Timeout, Aggregation, Collecting, Distributing];
/// collector max delay 32768. The bytes as captured (16 a line):
pub(super) const CISCO_FRAME_1: &str = "0180c20000020013c4120f0d88090101
    011480000013c4120f00000d80000016
    8500000002148000000e8316f500000d
    80000019360000000310800000000000
    00000000000000000000000000000000
    00000000000000000000000000000000
    00000000000000000000000000000000
    000000000000000000000000";

/// Frame 20 of the same capture: the two switches aggregated, both sides Activity,
/// Aggregation, Sync, Collecting, Distributing (0x3d; the partner field, 0x3c, is the
/// other switch passive).
const CISCO_FRAME_20: &str = "0180c20000020013c4120f0d88090101
    011480000013c4120f00000d80000016
    3d00000002148000000e8316f500000d
    800000193c0000000310800000000000
    00000000000000000000000000000000
    00000000000000000000000000000000
    00000000000000000000000000000000
    000000000000000000000000";

fn info(system: [u8; 6], key: u16, port: u16, state: u8) -> PortInfo {
    PortInfo {
        system_priority: 32768,
        system,
        key,
        port_priority: 32768,
        port,
        state: State(state),
    }
}

#[test]
fn emitted_lacpdu_matches_the_layout_byte_for_byte() {
    let pdu = Lacpdu {
        actor: PortInfo {
            system_priority: 0xfffe,
            system: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
            key: 0x0102,
            port_priority: 0x00ff,
            port: 7,
            state: State(0x3f),
        },
        partner: PortInfo {
            system_priority: 0x8000,
            system: [0x0a, 0xbb, 0xcc, 0xdd, 0xee, 0xff],
            key: 0x0009,
            port_priority: 0x0080,
            port: 0x0203,
            state: State(0x47),
        },
        collector_max_delay: 0,
    };
    let mut buf = [0xa5u8; FRAME_LEN];
    emit_lacpdu([0x02, 0x11, 0x22, 0x33, 0x44, 0x66], &pdu, &mut buf);
    // 6 dst + 6 src + 2 EtherType = 14; then subtype, version (2), actor TLV (2 + 18),
    // partner TLV (2 + 18), collector TLV (2 + 14), terminator (2), reserved (50):
    // 14 + 2 + 20 + 20 + 16 + 2 + 50 = 124 bytes.
    let mut want = Vec::new();
    want.extend_from_slice(&[0x01, 0x80, 0xc2, 0x00, 0x00, 0x02]); // dst
    want.extend_from_slice(&[0x02, 0x11, 0x22, 0x33, 0x44, 0x66]); // src: the port
    want.extend_from_slice(&[0x88, 0x09]); // slow protocols
    want.extend_from_slice(&[0x01, 0x01]); // subtype LACP, version 1
    want.extend_from_slice(&[0x01, 0x14]); // actor TLV, 20
    want.extend_from_slice(&[0xff, 0xfe, 0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
    want.extend_from_slice(&[0x01, 0x02, 0x00, 0xff, 0x00, 0x07, 0x3f, 0, 0, 0]);
    want.extend_from_slice(&[0x02, 0x14]); // partner TLV, 20
    want.extend_from_slice(&[0x80, 0x00, 0x0a, 0xbb, 0xcc, 0xdd, 0xee, 0xff]);
    want.extend_from_slice(&[0x00, 0x09, 0x00, 0x80, 0x02, 0x03, 0x47, 0, 0, 0]);
    want.extend_from_slice(&[0x03, 0x10, 0x00, 0x00]); // collector TLV, 16, max delay 0
    want.extend_from_slice(&[0; 12]);
    want.extend_from_slice(&[0x00, 0x00]); // terminator
    want.extend_from_slice(&[0; 50]);
    assert_eq!(want.len(), 124);
    assert_eq!(buf.as_slice(), want.as_slice());
    assert_eq!(parse(&buf), Ok(SlowPdu::Lacp(pdu)));
}

#[test]
fn a_captured_cisco_lacpdu_parses_and_reemits_to_the_same_bytes() {
    for (frame, actor_state, partner_state) in
        [(CISCO_FRAME_1, 0x85, 0x36), (CISCO_FRAME_20, 0x3d, 0x3c)]
    {
        let frame = hex(frame);
        assert_eq!(frame.len(), 124);
        let want = Lacpdu {
            actor: info([0x00, 0x13, 0xc4, 0x12, 0x0f, 0x00], 13, 22, actor_state),
            partner: info([0x00, 0x0e, 0x83, 0x16, 0xf5, 0x00], 13, 25, partner_state),
            collector_max_delay: 32768,
        };
        assert_eq!(parse(&frame), Ok(SlowPdu::Lacp(want)));
        let mut buf = [0u8; FRAME_LEN];
        emit_lacpdu([0x00, 0x13, 0xc4, 0x12, 0x0f, 0x0d], &want, &mut buf);
        assert_eq!(buf.as_slice(), frame.as_slice());
    }
    let names: Vec<_> = State(0x85).names().collect();
    assert_eq!(names, ["activity", "aggregation", "expired"]);
}

#[test]
fn version_reserved_bytes_and_trailing_bytes_are_not_checked() {
    let mut frame = hex(CISCO_FRAME_20);
    frame[15] = 2; // version
    frame[14 + 19] = 0xee; // actor reserved
    frame[14 + 46] = 0xee; // collector reserved
    frame[14 + 100] = 0xee; // trailing reserved
    frame.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]); // an FCS left on
    let Ok(SlowPdu::Lacp(pdu)) = parse(&frame) else {
        panic!("refused: {:?}", parse(&frame));
    };
    assert_eq!(pdu.actor.port, 22);
    frame.resize(MAX_FRAME_LEN, 0);
    assert!(parse(&frame).is_ok());
}

#[test]
fn refusals_are_typed() {
    let good = hex(CISCO_FRAME_20);
    assert_eq!(parse(&good[..123]), Err(FrameError::Short { len: 123 }));
    assert_eq!(parse(&good[..10]), Err(FrameError::Short { len: 10 }));
    assert_eq!(parse(&[]), Err(FrameError::Short { len: 0 }));
    let mut long = good.clone();
    long.resize(MAX_FRAME_LEN + 1, 0);
    assert_eq!(
        parse(&long),
        Err(FrameError::Oversized {
            len: MAX_FRAME_LEN + 1
        })
    );
    let mut f = good.clone();
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    assert_eq!(
        parse(&f),
        Err(FrameError::NotSlowProtocols { ethertype: 0x0800 })
    );
    let mut f = good.clone();
    f[5] = 0x0e; // LLDP's address
    assert_eq!(parse(&f), Err(FrameError::WrongDestination));
    let mut f = good.clone();
    f[14] = 3; // OAM
    assert_eq!(parse(&f), Err(FrameError::UnknownSubtype(3)));
    // An OSSP frame of any length is refused for its subtype, not its length.
    assert_eq!(parse(&f[..20]), Err(FrameError::UnknownSubtype(3)));
    for (at, tlv, tlv_type, length) in [
        (17, "actor", 1, 0x13),
        (37, "partner", 2, 0x15),
        (57, "collector", 3, 0x11),
        (73, "terminator", 0, 0x01),
    ] {
        let mut f = good.clone();
        f[at] = length;
        assert_eq!(
            parse(&f),
            Err(FrameError::BadTlv {
                tlv,
                tlv_type,
                length
            }),
            "{tlv}"
        );
    }
    let mut f = good.clone();
    f[16] = 2; // actor TLV with the partner's type
    assert!(matches!(
        parse(&f),
        Err(FrameError::BadTlv { tlv: "actor", .. })
    ));
    // Every error reads as a sentence, not as Debug text.
    assert_eq!(
        FrameError::BadTlv {
            tlv: "actor",
            tlv_type: 1,
            length: 19
        }
        .to_string(),
        "bad actor TLV (type 1, length 19)"
    );
}

#[test]
fn marker_information_and_response_match_the_layout() {
    let m = Marker {
        kind: MarkerKind::Information,
        requester_port: 0x0102,
        requester_system: [0x02, 0, 0, 0, 0, 9],
        transaction_id: 0xdead_beef,
    };
    let mut buf = [0x5au8; FRAME_LEN];
    emit_marker([0x02, 0, 0, 0, 0, 8], &m, &mut buf);
    // 14 + subtype, version (2) + marker TLV (2 + 14: port 2, system 6, transaction 4,
    // pad 2) + terminator (2) + reserved (90) = 124.
    let mut want = Vec::new();
    want.extend_from_slice(&[0x01, 0x80, 0xc2, 0x00, 0x00, 0x02, 0x02, 0, 0, 0, 0, 8]);
    want.extend_from_slice(&[0x88, 0x09, 0x02, 0x01, 0x01, 0x10, 0x01, 0x02]);
    want.extend_from_slice(&[0x02, 0, 0, 0, 0, 9, 0xde, 0xad, 0xbe, 0xef, 0, 0]);
    want.extend_from_slice(&[0, 0]);
    want.extend_from_slice(&[0; 90]);
    assert_eq!(buf.as_slice(), want.as_slice());
    assert_eq!(parse(&buf), Ok(SlowPdu::Marker(m)));
    let mut f = want.clone();
    f[16] = 2; // response
    assert_eq!(
        parse(&f),
        Ok(SlowPdu::Marker(Marker {
            kind: MarkerKind::Response,
            ..m
        }))
    );
    f[16] = 3;
    assert_eq!(
        parse(&f),
        Err(FrameError::BadTlv {
            tlv: "marker",
            tlv_type: 3,
            length: 16
        })
    );
}
