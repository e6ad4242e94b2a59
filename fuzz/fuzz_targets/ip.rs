//! The checked IP header views (`wire::ip`) and the decisions built on them: the shaper's
//! classifier, delay equalisation's small-packet check and fragment groups.
//!
//! Input: the packet.
//!
//! Checks: nothing panics; a view that checks out keeps its promises (an IPv4 header
//! length of 20 to 60 bytes within the buffer, a TCP header within its bytes, an IPv6
//! extension walk that ends where an upper-layer header starts or says it did not end).
#![no_main]

use braid_core::fuzzing::GroupKey;
use braid_core::fuzzing::skips_equalization;
use braid_core::shape::Classifier;
use braid_core::Frames;
use braid_core::shape::{ClassId, FilterSpec, PortRange, Prefix};
use braid_core::wire::ip::{
    is_extension_header, IpPacket, Ports, TcpPacket, MAX_EXTENSION_HEADERS,
};
use libfuzzer_sys::fuzz_target;

fn transport(l4: &[u8]) {
    if let Ok(p) = Ports::new_checked(l4) {
        let _ = (p.src_port(), p.dst_port());
    }
    if let Ok(t) = TcpPacket::new_checked(l4) {
        assert!((20..=60).contains(&t.header_len()) && t.header_len() <= l4.len());
        assert_eq!(20 + t.options().len() + t.payload().len(), l4.len());
        let _ = (t.seq_number(), t.flags(), t.syn(), t.fin(), t.rst());
    }
}

fuzz_target!(|data: &[u8]| {
    match IpPacket::new_checked(data) {
        Ok(IpPacket::V4(ip)) => {
            assert!((20..=60).contains(&ip.header_len()) && ip.header_len() <= data.len());
            assert_eq!(ip.payload().len(), data.len() - ip.header_len());
            let _ = (ip.tos(), ip.total_len(), ip.ident(), ip.protocol());
            let _ = (ip.src_addr(), ip.dst_addr(), ip.is_fragment());
            transport(ip.payload());
        }
        Ok(IpPacket::V6(ip)) => {
            assert!(data.len() >= 40);
            let _ = (
                ip.traffic_class(),
                ip.payload_len(),
                ip.src_addr(),
                ip.dst_addr(),
            );
            if let Some(f) = ip.fragment_header() {
                let _ = (f.next_header(), f.frag_offset(), f.more_frags(), f.ident());
            }
            if let Ok(up) = ip.upper_layer() {
                assert!(up.offset >= 40);
                assert!(up.offset <= 40 + MAX_EXTENSION_HEADERS * 2048);
                assert_eq!(up.ended, !is_extension_header(up.protocol));
                if let Some(l4) = data.get(up.offset..) {
                    transport(l4);
                }
            }
        }
        Err(_) => {}
    }

    // The decisions on top of the views.
    let _ = skips_equalization(Frames::Ip, data);
    let _ = skips_equalization(Frames::Ethernet, data);
    let _ = GroupKey::of(data);
    let class = |minor| ClassId::new(1, minor);
    let filters = [
        FilterSpec {
            prio: 1,
            src: Prefix::parse("10.0.0.0/8").ok(),
            dport: Some(PortRange { lo: 80, hi: 443 }),
            class: class(0x10),
            ..FilterSpec::default()
        },
        FilterSpec {
            prio: 2,
            dst: Prefix::parse("2001:db8::/32").ok(),
            protocol: Some(17),
            class: class(0x11),
            ..FilterSpec::default()
        },
        FilterSpec {
            prio: 3,
            tos: Some((0xb8, 0xfc)),
            class: class(0x12),
            ..FilterSpec::default()
        },
    ];
    let c = Classifier::new(&filters, class(0x13));
    let got = c.classify(data);
    assert!([0x10, 0x11, 0x12, 0x13].map(class).contains(&got));
    // The same bytes as an Ethernet frame: classified by the IP packet it carries.
    let got = c.classify_frame(Frames::Ethernet, data);
    assert!([0x10, 0x11, 0x12, 0x13].map(class).contains(&got));
});
