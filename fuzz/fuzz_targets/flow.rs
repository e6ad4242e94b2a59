//! The IP/TCP/UDP (and Ethernet) peek: `flow::peek_ip`, `flow::peek_frame`,
//! `flow::dissect`, `flow::bond_dissect` and the transmit hashes built on them.
//!
//! Input: two bytes choosing the EtherType given to the dissectors, one byte choosing the
//! network header offset, one of options, then the packet.
//!
//! Checks: the dissectors only look at bytes from the network offset on (putting junk in
//! front and moving the offset by as much gives the same keys); an IP packet peeked
//! through `peek_ip` gives the same keys as the same packet behind an Ethernet header
//! through `peek_frame`, and every transmit hash policy gives both the same hash.
#![no_main]

use braid_core::fuzzing::{flow, DissectOpts, L2Header};
use braid_core::hash::{self, HashPolicy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let proto = u16::from_be_bytes([data[0], data[1]]);
    let nhoff = usize::from(data[2] % 64);
    let flags = data[3];
    let pkt = &data[4..];
    let opts = DissectOpts {
        hw_vlan_tci: (flags & 1 != 0).then_some(u16::from(flags)),
        stop_before_encap: flags & 2 != 0,
    };

    // Offset invariance.
    let keys = flow::dissect(pkt, proto, nhoff, opts);
    let l34 = flags & 4 != 0;
    let bkeys = flow::bond_dissect(pkt, proto, nhoff, l34);
    let mut shifted = vec![0xEEu8; 7];
    shifted.extend_from_slice(pkt);
    assert_eq!(flow::dissect(&shifted, proto, nhoff + 7, opts), keys);
    assert_eq!(flow::bond_dissect(&shifted, proto, nhoff + 7, l34), bkeys);

    // The TUN peek and the Ethernet peek agree on an IP packet.
    let ip = flow::peek_ip(pkt);
    let l2 = L2Header::from_ip(pkt);
    if l2.proto != 0 {
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&l2.proto.to_be_bytes());
        frame.extend_from_slice(pkt);
        let (fl2, fkeys) = flow::peek_frame(&frame);
        assert_eq!(fl2.proto, l2.proto);
        assert_eq!(fl2.nhoff, 14);
        assert_eq!(fkeys, ip, "peek_frame and peek_ip disagree");
        for policy in HashPolicy::ALL {
            assert_eq!(
                hash::hash_frame(policy, &frame),
                hash::hash_ip(policy, pkt),
                "{policy}: the frame and its IP packet hash differently"
            );
        }
    }
    let (fl2, _) = flow::peek_frame(pkt);
    assert!(!fl2.present || fl2.nhoff <= pkt.len());

    for policy in HashPolicy::ALL {
        let _ = hash::hash_frame(policy, pkt);
    }
});
