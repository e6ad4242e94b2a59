//! Writes the committed seed corpus of the byte-oriented fuzz targets into
//! `fuzz/corpus/<target>/`: real inputs made with braid's own encoders (wire datagrams,
//! SLIP/SLIP6/CSLIP line bytes of a TCP conversation, IP packets and Ethernet frames),
//! the example configs and tc scripts from the repository, and control requests.
//!
//! Run from the repository root: `cargo run --manifest-path fuzz/Cargo.toml --example
//! gen_seeds`. The output is deterministic. The targets driven by `arbitrary` (tunnel,
//! replay, reorder, serial_roundtrip) have no meaningful hand-made inputs; their seeds are
//! a few inputs kept from a first run (see docs/fuzzing.md).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use braid_core::serial::{slip, slip6, FrameCodec, Framing};
use braid_core::wire::{self, Ack, Header, Message, MessageType, DATA_HEADER_LEN};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn put(target: &str, name: &str, bytes: &[u8]) {
    let dir = root().join("fuzz/corpus").join(target);
    fs::create_dir_all(&dir).expect("corpus directory");
    fs::write(dir.join(name), bytes).expect("seed written");
}

fn copy(target: &str, name: &str, from: &str) {
    let bytes = fs::read(root().join(from)).expect("repository file");
    put(target, name, &bytes);
}

fn checksum(b: &[u8]) -> u16 {
    braid_core::serial::cslip::ip_checksum(b)
}

/// An IPv4 packet: `proto`, addresses, a transport header + payload.
fn ipv4(proto: u8, id: u16, body: &[u8]) -> Vec<u8> {
    let mut p = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0, 192, 168, 1, 110, 10, 0, 0, 1,
    ];
    let total = (20 + body.len()) as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[4..6].copy_from_slice(&id.to_be_bytes());
    let c = checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(body);
    p
}

fn tcp(seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&80u16.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = 0x50;
    t[13] = flags;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    t[16..18].copy_from_slice(&[0x12, 0x34]);
    t.extend_from_slice(payload);
    t
}

fn udp(payload: &[u8]) -> Vec<u8> {
    let mut u = vec![0x13, 0x88, 0x00, 0x35, 0, 0, 0, 0];
    u[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(payload);
    u
}

/// A TCP conversation: a SYN (sent as IP), then data and acks (compressible).
fn conversation() -> Vec<Vec<u8>> {
    let mut v = vec![ipv4(6, 1, &tcp(1000, 0, 0x02, &[]))];
    let mut seq = 1001;
    for i in 0..5u16 {
        let data = vec![b'a' + i as u8; 10 + usize::from(i) * 7];
        v.push(ipv4(6, 2 + i, &tcp(seq, 5000, 0x18, &data)));
        seq += data.len() as u32;
    }
    v.push(ipv4(17, 9, &udp(b"dns?")));
    v
}

fn wire_seeds() {
    let h = Header {
        path: 3,
        timestamp: 0x0102_0304,
    };
    let msgs: [(&str, Message<'_>); 5] = [
        (
            "data",
            Message::Data {
                seq: 42,
                path_seq: 7,
                payload: &[0x45, 0, 0, 20, 0xC0, 0xDB],
            },
        ),
        (
            "pinned",
            Message::PinnedData {
                seq: u64::MAX,
                path_seq: 1,
                payload: b"pinned",
            },
        ),
        (
            "probe",
            Message::Probe {
                probe_seq: 9,
                epoch: Some(9),
            },
        ),
        (
            "probe_ack",
            Message::ProbeAck {
                probe_seq: 9,
                echo_timestamp: 0x0102_0304,
                hold: Duration::from_micros(250),
            },
        ),
        (
            "ack",
            Message::Ack(Ack {
                highest_path_seq: 7,
                rx_bytes: 123_456,
                rx_packets: 99,
                echo_timestamp: 5,
                hold: Duration::from_millis(2),
            }),
        ),
    ];
    for (name, m) in msgs {
        let mut buf = vec![0u8; m.wire_len()];
        let n = wire::emit(&h, &m, &mut buf).expect("emit");
        put("wire", name, &buf[..n]);
    }
    // A control message with trailing bytes, and a sealed (version 4) first byte.
    let mut probe = vec![0u8; wire::PROBE_EPOCH_LEN];
    wire::emit(
        &h,
        &Message::Probe {
            probe_seq: 1,
            epoch: Some(1),
        },
        &mut probe,
    )
    .expect("emit");
    probe.extend_from_slice(b"future");
    put("wire", "probe_trailing", &probe);
    put(
        "wire",
        "sealed_version",
        &[wire::SEALED_VERSION, 0x10, 0, 0, 0, 0, 0, 1],
    );
    // Folded forms (the target also reads every input as one, its first byte % 16 the
    // type): a data datagram folded with wire path id 0x10 (type 0, Data) and a part with
    // 0x05 (type 5, DataPart).
    for (name, path, m) in [
        (
            "folded_data",
            0x10,
            Message::Data {
                seq: 42,
                path_seq: 7,
                payload: &[0x45, 0, 0, 20, 0xC0, 0xDB],
            },
        ),
        (
            "folded_part",
            0x05,
            Message::DataPart {
                seq: 1 << 40,
                path_seq: 8,
                part: 1,
                parts: 2,
                kind: wire::MessageType::PinnedData,
                payload: b"part",
            },
        ),
    ] {
        let mut v1 = vec![0u8; m.wire_len()];
        let n = wire::emit(&h, &m, &mut v1).expect("emit");
        let mut out = vec![0u8; n];
        let (_, k) = wire::folded::fold(&v1[..n], path, &mut out).expect("fold");
        put("wire", name, &out[..k]);
    }
}

fn flow_seeds() {
    // Input: EtherType (2 bytes), network offset, option flags, then the packet.
    let with = |proto: u16, nhoff: u8, flags: u8, pkt: &[u8]| {
        let mut v = proto.to_be_bytes().to_vec();
        v.extend_from_slice(&[nhoff, flags]);
        v.extend_from_slice(pkt);
        v
    };
    put(
        "flow",
        "ipv4_tcp",
        &with(0x0800, 0, 4, &ipv4(6, 1, &tcp(1, 2, 0x10, b"x"))),
    );
    put(
        "flow",
        "ipv4_udp",
        &with(0x0800, 0, 0, &ipv4(17, 1, &udp(b"hello"))),
    );
    // ICMP echo, then an ICMP error quoting a UDP header.
    put(
        "flow",
        "icmp_echo",
        &with(0x0800, 0, 0, &ipv4(1, 1, &[8, 0, 0, 0, 0x12, 0x34, 0, 1])),
    );
    let mut err = vec![3, 3, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&ipv4(17, 1, &udp(b"")));
    put("flow", "icmp_error", &with(0x0800, 0, 0, &ipv4(1, 2, &err)));
    // IPv6 UDP.
    let mut v6 = vec![0x60, 0, 0, 0, 0, 13, 17, 64];
    v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    v6.extend_from_slice(&udp(b"hello"));
    put("flow", "ipv6_udp", &with(0x86DD, 0, 4, &v6));
    // An Ethernet frame with an 802.1Q tag carrying IPv4 TCP.
    let mut frame = vec![
        2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x81, 0x00, 0x20, 0x0A, 0x08, 0x00,
    ];
    frame.extend_from_slice(&ipv4(6, 1, &tcp(5, 6, 0x10, b"")));
    put("flow", "vlan_frame", &with(0x8100, 14, 1, &frame));
    // IP-in-IP.
    let inner = ipv4(17, 3, &udp(b"in"));
    put("flow", "ipip", &with(0x0800, 0, 0, &ipv4(4, 4, &inner)));
}

fn serial_seeds() {
    let packets = conversation();
    // slip / slip6: config byte 0 (limit 1152, no line errors), chunk length 7.
    for (target, framing) in [("slip", Framing::Slip), ("slip6", Framing::Slip6)] {
        let mut line = vec![0u8, 7];
        for p in &packets {
            match framing {
                Framing::Slip6 => slip6::encode(p, &mut line),
                _ => slip::encode(p, &mut line),
            }
        }
        put(target, "conversation", &line);
        // Escapes, a runt, line noise and an unfinished frame.
        let mut noisy = vec![0x80u8, 3];
        match framing {
            Framing::Slip6 => {
                slip6::encode(&[0xC0, 0xDB, 0xDC, 0xDD, 1, 2, 3], &mut noisy);
                noisy.extend_from_slice(b"\r\n p01p zz");
                slip6::encode(&[1, 2], &mut noisy);
            }
            _ => {
                slip::encode(&[0xC0, 0xDB, 0xDC, 0xDD, 1, 2, 3], &mut noisy);
                noisy.extend_from_slice(&[0xDB, 0x41, 0xDC, 0xC0, 0x00, 0x55, 0xC0]);
                slip::encode(&[1, 2], &mut noisy);
            }
        }
        noisy.extend_from_slice(&[0x30, 0x31, 0x00]);
        put(target, "noisy", &noisy);
    }
    // cslip: the conversation through the frame codec, in raw-ip mode (the packets
    // alone) and in bond mode (braid data datagrams: the data header, full or short, in
    // front of each compressed packet); and with a line error in the middle.
    let mut raw = FrameCodec::raw_ip(Framing::Cslip, 1500);
    let mut line = vec![16 << 2, 11];
    for p in &packets {
        raw.encode(p, &mut line);
    }
    put("cslip", "conversation", &line);
    let mut bond = FrameCodec::new(Framing::Cslip, 1500);
    let mut line = vec![1u8 | (16 << 2), 11];
    for (k, p) in packets.iter().enumerate() {
        let mut d = vec![0u8; DATA_HEADER_LEN + p.len()];
        let h = Header {
            path: 1,
            timestamp: k as u32 * 1000,
        };
        wire::emit_data_header_as(&h, MessageType::Data, k as u64, k as u32, &mut d)
            .expect("room for the header");
        d[DATA_HEADER_LEN..].copy_from_slice(p);
        bond.encode(&d, &mut line);
    }
    put("cslip", "prefixed", &line);
    let mut enc = FrameCodec::raw_ip(Framing::Cslip, 1500);
    let mut line = vec![2u8 | (16 << 2), 255];
    for (i, p) in packets.iter().enumerate() {
        enc.encode(p, &mut line);
        if i == 2 {
            line.push(0x00); // a line error here
        }
    }
    put("cslip", "line_error", &line);
}

fn text_seeds() {
    copy("tc", "htb-seed.tc", "scenarios/htb-seed.tc");
    put(
        "tc",
        "filters.tc",
        b"#!/bin/sh\nTC=tc\nDEV=eth0\n$TC qdisc add dev $DEV root handle 1: htb default 20 r2q 5\n\
$TC class add dev $DEV parent 1: classid 1:1 htb rate 100mbit burst 15k\n\
$TC class add dev $DEV parent 1:1 classid 1:10 htb rate 60mbit ceil 100mbit prio 0 quantum 1514\n\
$TC class add dev $DEV parent 1:1 classid 1:20 htb rate 40mbit ceil 90mbit cburst 3000\n\
$TC filter add dev $DEV parent 1: protocol ip prio 3 u32 match ip dport 22 0xffff flowid 1:10\n\
$TC filter add dev $DEV parent 1: protocol ip pref 7 u32 match ip tos 0x10 0xfc \\\n  match ip dst 10.0.0.0/8 flowid 1:10\n\
$TC filter add dev $DEV parent 1: protocol ipv6 prio 4 u32 match ip6 src 2001:db8::/32 flowid 1:20\n",
    );
    for name in [
        "active-backup.toml",
        "eql-bps.toml",
        "household.toml",
        "two-host-adaptive.toml",
        "xor-layer34.toml",
    ] {
        copy("config", name, &format!("examples/{name}"));
    }
    put(
        "config",
        "serial.toml",
        b"[bond]\ninterface = \"braid1\"\naddress = \"10.9.0.1/30\"\nencryption = \"none\"\nmtu = 576\n\n\
[[path]]\nname = \"modem1\"\nkind = \"serial\"\ndevice = \"/dev/ttyS0\"\nbaud = 57600\nframing = \"cslip\"\n\n\
[[path]]\nname = \"modem2\"\nkind = \"serial\"\ndevice = \"/dev/ttyS1\"\nbaud = 14400\nframing = \"slip6\"\n\n\
[shape]\nrate = \"auto\"\ndefault = \"1:20\"\n\n[[shape.class]]\nid = \"1:10\"\nrate = \"20kbit\"\nprio = 0\n\n\
[[shape.class]]\nid = \"1:20\"\nrate = \"40kbit\"\nceil = \"70kbit\"\n\n\
[[shape.filter]]\nprio = 1\nprotocol = \"tcp\"\ndport = \"22\"\nclass = \"1:10\"\n",
    );
    let requests: [(&str, &str); 7] = [
        ("status", r#"{"cmd":"status"}"#),
        (
            "enslave",
            r#"{"cmd":"enslave","name":"lte","local":"192.0.2.7:7001","remote":"198.51.100.1:7001","bps":20000000,"dev":"wwan0"}"#,
        ),
        (
            "enslave_v6",
            r#"{"cmd":"enslave","name":"v6","local":"[2001:db8::1]:7000","remote":"[2001:db8::2]:7000"}"#,
        ),
        ("emancipate", r#"{"cmd":"emancipate","name":"a"}"#),
        ("set", r#"{"cmd":"set","name":"b","bps":57600}"#),
        ("class_show", r#"{"cmd":"class-show"}"#),
        (
            "class_change",
            r#"{"cmd":"class-change","id":"1:10","set":{"rate":"5mbit","ceil":"9mbit","burst":"15k","prio":"2","quantum":"1514","limit":"100"}}"#,
        ),
    ];
    for (name, text) in requests {
        put("control", name, text.as_bytes());
    }
}

fn main() {
    wire_seeds();
    flow_seeds();
    serial_seeds();
    text_seeds();
    println!(
        "seeds written under {}",
        root().join("fuzz/corpus").display()
    );
}
