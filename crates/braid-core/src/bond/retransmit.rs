//! Redundant TCP retransmissions: a segment that TCP sends again while braid still holds
//! the first copy in a path's queue.
//!
//! On a slow path (a serial line carries a 1400-byte packet in 122 ms at 115200 bd) a TCP
//! sender's retransmission timer can fire while the segment it gives up on is still
//! waiting in braid. The kernel would queue the copy behind the original and the line
//! would carry both; braid drops the copy instead (counted as `drop_redundant_retransmit`):
//! the original goes out on its path as planned and its acknowledgment answers the
//! retransmission too. With TCP timestamps on, the acknowledgment echoes the original's
//! timestamp, so the sender can see that the timeout was spurious and undo it.
//!
//! A segment is the same when its addresses, ports, sequence number, payload length and
//! FIN flag are: a retransmission that carries more or less data, or adds a FIN, is sent.
//! Only the oldest [`SCAN`] packets of each path's queue are compared (a retransmitted
//! segment is the oldest unacknowledged one, so when braid still has it, it is near the
//! head), which bounds the cost on a fast path with a long queue.

use core::num::NonZeroU64;

/// Packets at the head of each path's queue compared with a retransmission.
pub(crate) const SCAN: usize = 64;

const TCP: u8 = 6;
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;

/// A TCP segment's identity, or `None` for anything that is not a TCP segment carrying
/// data (pure acks, SYN, RST, fragments, non-TCP, IPv6 with extension headers, and
/// anything malformed).
pub(crate) fn segment_key(packet: &[u8]) -> Option<NonZeroU64> {
    let version = packet.first()? >> 4;
    let (addrs, tcp, ip_len) = match version {
        4 => {
            let ihl = usize::from(packet.first()? & 0x0f) * 4;
            let frag = u16::from_be_bytes([*packet.get(6)?, *packet.get(7)?]);
            if ihl < 20 || *packet.get(9)? != TCP || frag & 0x3fff != 0 {
                return None;
            }
            let total = usize::from(u16::from_be_bytes([*packet.get(2)?, *packet.get(3)?]));
            (packet.get(12..20)?, ihl, total)
        }
        6 => {
            if *packet.get(6)? != TCP {
                return None;
            }
            let payload = usize::from(u16::from_be_bytes([*packet.get(4)?, *packet.get(5)?]));
            (packet.get(8..40)?, 40, 40 + payload)
        }
        _ => return None,
    };
    let ip_len = ip_len.min(packet.len());
    let header = packet.get(tcp..tcp + 20)?;
    let data_offset = usize::from(header[12] >> 4) * 4;
    let flags = header[13];
    if data_offset < 20 {
        return None;
    }
    let payload = ip_len.checked_sub(tcp + data_offset)?;
    if payload == 0 || flags & (SYN | RST) != 0 {
        return None;
    }
    // FNV-1a over the identity; the key only has to tell segments in one queue apart.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    mix(addrs);
    mix(&header[0..8]); // ports and sequence number
    mix(&(payload as u32).to_be_bytes());
    mix(&[flags & FIN]);
    NonZeroU64::new(h).or(NonZeroU64::new(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 TCP segment with a `doff`-word TCP header and `payload` bytes.
    fn v4(seq: u32, payload: usize, flags: u8, doff: u8) -> Vec<u8> {
        let extra = usize::from(doff).saturating_sub(5) * 4;
        let mut p = crate::sim::tcp_packet(seq, payload + extra, 40000, flags);
        p[32] = doff << 4;
        p
    }

    #[test]
    fn same_segment_same_key_whatever_else_changed() {
        let a = v4(1000, 1348, 0x10, 5);
        let mut b = a.clone();
        b[4] = 0x12; // IP id
        b[10] = 0x99; // checksum
        b[28..32].copy_from_slice(&7u32.to_be_bytes()); // ack number
        b[33] = 0x18; // PSH
        b[34] = 0x40; // window
        assert!(segment_key(&a).is_some());
        assert_eq!(segment_key(&a), segment_key(&b));
    }

    #[test]
    fn different_segments_differ() {
        let base = segment_key(&v4(1000, 1348, 0x10, 5));
        assert_ne!(base, segment_key(&v4(2348, 1348, 0x10, 5)), "sequence");
        assert_ne!(base, segment_key(&v4(1000, 1000, 0x10, 5)), "length");
        assert_ne!(base, segment_key(&v4(1000, 1348, 0x11, 5)), "FIN");
        let mut port = v4(1000, 1348, 0x10, 5);
        port[21] ^= 1;
        assert_ne!(base, segment_key(&port), "port");
        let mut addr = v4(1000, 1348, 0x10, 5);
        addr[19] = 3;
        assert_ne!(base, segment_key(&addr), "address");
    }

    #[test]
    fn no_key_without_data() {
        assert_eq!(segment_key(&v4(1, 0, 0x10, 5)), None, "pure ack");
        assert_eq!(segment_key(&v4(1, 0, 0x02, 5)), None, "SYN");
        assert_eq!(segment_key(&v4(1, 10, 0x04, 5)), None, "RST");
        assert_eq!(segment_key(&v4(1, 0, 0x10, 8)), None, "ack with timestamps");
        assert!(
            segment_key(&v4(1, 1, 0x10, 8)).is_some(),
            "one byte after options"
        );
        let mut frag = v4(1, 100, 0x10, 5);
        frag[6] = 0x20; // more fragments
        assert_eq!(segment_key(&frag), None);
        let mut udp = v4(1, 100, 0x10, 5);
        udp[9] = 17;
        assert_eq!(segment_key(&udp), None);
    }

    #[test]
    fn ipv6_segments() {
        let mut p = vec![0u8; 40 + 20 + 100];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&120u16.to_be_bytes());
        p[6] = TCP;
        p[8] = 0x20;
        p[24] = 0x20;
        p[39] = 1;
        p[40 + 12] = 5 << 4;
        p[40 + 13] = 0x10;
        let k = segment_key(&p);
        assert!(k.is_some());
        p[40 + 7] = 1; // sequence number
        assert_ne!(segment_key(&p), k);
        p[6] = 0; // hop-by-hop options first: not looked into
        assert_eq!(segment_key(&p), None);
    }

    #[test]
    fn malformed_input_is_no_segment() {
        let good = v4(1000, 100, 0x10, 5);
        for n in 0..good.len() - 100 {
            assert_eq!(segment_key(&good[..n]), None, "cut at {n}");
        }
        let mut short_doff = good.clone();
        short_doff[32] = 4 << 4;
        assert_eq!(segment_key(&short_doff), None);
        let mut short_ihl = good.clone();
        short_ihl[0] = 0x44;
        assert_eq!(segment_key(&short_ihl), None);
        let mut lying_total = good.clone();
        lying_total[2..4].copy_from_slice(&30u16.to_be_bytes());
        assert_eq!(segment_key(&lying_total), None);
        for bytes in [&[][..], &[0x45], &[0xff; 64], &[0x60; 39]] {
            assert_eq!(segment_key(bytes), None);
        }
    }
}
