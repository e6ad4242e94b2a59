//! Test helpers: IPv4/TCP packet builder, braid datagrams.

use super::cslip::ip_checksum;
use crate::wire::{self, Header, Message, MessageType, DATA_HEADER_LEN};

/// A plaintext braid data datagram carrying `ip`.
pub(crate) fn data_datagram(seq: u64, ip: &[u8]) -> Vec<u8> {
    let mut d = vec![0u8; DATA_HEADER_LEN + ip.len()];
    let h = Header {
        path: 3,
        timestamp: seq as u32 * 1000,
    };
    wire::emit_data_header_as(&h, MessageType::Data, seq, seq as u32, &mut d)
        .expect("room for the header");
    d[DATA_HEADER_LEN..].copy_from_slice(ip);
    d
}

/// A braid probe datagram (a control message).
pub(crate) fn probe_datagram(probe_seq: u32) -> Vec<u8> {
    let mut d = vec![0u8; 64];
    let h = Header {
        path: 1,
        timestamp: 5,
    };
    let msg = Message::Probe {
        probe_seq,
        epoch: Some(1),
    };
    let n = wire::emit(&h, &msg, &mut d).expect("room for a probe");
    d.truncate(n);
    d
}

pub(crate) const FIN: u8 = 0x01;
pub(crate) const SYN: u8 = 0x02;
pub(crate) const PSH: u8 = 0x08;
pub(crate) const ACK: u8 = 0x10;
pub(crate) const URG: u8 = 0x20;

/// One IPv4/TCP packet's fields.
#[derive(Clone, Debug)]
pub(crate) struct Tcp {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub win: u16,
    pub id: u16,
    pub urg: u16,
    pub ttl: u8,
    pub tos: u8,
    /// The whole flags/fragment-offset word.
    pub frag: u16,
    pub proto: u8,
    pub ipopt: Vec<u8>,
    pub tcpopt: Vec<u8>,
    pub payload: Vec<u8>,
}

impl Tcp {
    pub(super) fn new(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Self {
        Tcp {
            src,
            dst,
            sport,
            dport,
            seq: 0,
            ack: 0,
            flags: ACK,
            win: 8192,
            id: 0,
            urg: 0,
            ttl: 64,
            tos: 0,
            frag: 0x4000,
            proto: 6,
            ipopt: Vec::new(),
            tcpopt: Vec::new(),
            payload: Vec::new(),
        }
    }

    /// The packet bytes with a correct IP checksum and a correct TCP checksum.
    pub(super) fn build(&self) -> Vec<u8> {
        assert!(self.ipopt.len().is_multiple_of(4) && self.ipopt.len() <= 40);
        assert!(self.tcpopt.len().is_multiple_of(4) && self.tcpopt.len() <= 40);
        let nlen = 20 + self.ipopt.len();
        let thlen = 20 + self.tcpopt.len();
        let tot = nlen + thlen + self.payload.len();
        let mut p = Vec::with_capacity(tot);
        p.push(0x40 | (nlen / 4) as u8);
        p.push(self.tos);
        p.extend((tot as u16).to_be_bytes());
        p.extend(self.id.to_be_bytes());
        p.extend(self.frag.to_be_bytes());
        p.push(self.ttl);
        p.push(self.proto);
        p.extend([0, 0]);
        p.extend(self.src);
        p.extend(self.dst);
        p.extend(&self.ipopt);
        let c = ip_checksum(&p[..nlen]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend(self.sport.to_be_bytes());
        p.extend(self.dport.to_be_bytes());
        p.extend(self.seq.to_be_bytes());
        p.extend(self.ack.to_be_bytes());
        p.push(((thlen / 4) as u8) << 4);
        p.push(self.flags);
        p.extend(self.win.to_be_bytes());
        p.extend([0, 0]);
        p.extend(self.urg.to_be_bytes());
        p.extend(&self.tcpopt);
        p.extend(&self.payload);
        // TCP checksum over the pseudo header and the segment.
        let mut ph = Vec::with_capacity(12 + tot - nlen);
        ph.extend(self.src);
        ph.extend(self.dst);
        ph.extend([0, 6]);
        ph.extend(((tot - nlen) as u16).to_be_bytes());
        ph.extend(&p[nlen..]);
        let c = ip_checksum(&ph);
        p[nlen + 16..nlen + 18].copy_from_slice(&c.to_be_bytes());
        p
    }

    /// The TCP checksum bytes of the built packet.
    pub(super) fn check(&self) -> [u8; 2] {
        let p = self.build();
        let n = 20 + self.ipopt.len();
        [p[n + 16], p[n + 17]]
    }
}
