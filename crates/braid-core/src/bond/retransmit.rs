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
//! head), which bounds the cost on a fast path with a long queue. Each path also counts
//! its queued segments in a [`SegmentFilter`], so that the common case, a segment sent
//! for the first time, is told apart in two lookups instead of a scan of every path's
//! queue head (which was 8.5 % of a striping sender's main thread at 4.3 Gbit/s).

use core::num::NonZeroU64;

use crate::flow::proto::TCP;
use crate::wire::ip::{tcp_flags, IpPacket, Ipv6Packet, TcpPacket};
use crate::Frames;

/// Packets at the head of each path's queue compared with a retransmission.
pub(crate) const SCAN: usize = 64;

/// A TCP segment's identity, or `None` for anything that is not a TCP segment carrying
/// data (pure acks, SYN, RST, fragments, non-TCP, IPv6 with extension headers, a frame
/// that carries no IP, and anything malformed). `packet` is an IP packet or a frame, as
/// `frames` says; a frame's key is its IP packet's (its MACs and tag do not count).
pub(crate) fn segment_key(frames: Frames, packet: &[u8]) -> Option<NonZeroU64> {
    let packet = frames.ip_packet(packet)?;
    // The addresses, the TCP header and the IP packet's length (its length field, capped
    // at the bytes there are).
    let ip = IpPacket::new_checked(packet).ok()?;
    let (addrs, tcp, ip_len) = match &ip {
        IpPacket::V4(ip) => {
            if ip.protocol() != TCP || ip.is_fragment() {
                return None;
            }
            let len = usize::from(ip.total_len());
            (ip.addr_bytes(), ip.header_len(), len)
        }
        IpPacket::V6(ip) => {
            if ip.next_header() != TCP {
                return None;
            }
            let len = Ipv6Packet::<&[u8]>::HEADER_LEN + usize::from(ip.payload_len());
            (ip.addr_bytes(), Ipv6Packet::<&[u8]>::HEADER_LEN, len)
        }
    };
    let ip_len = ip_len.min(packet.len());
    let segment = TcpPacket::new_checked(packet.get(tcp..)?).ok()?;
    let payload = ip_len.checked_sub(tcp + segment.header_len())?;
    if payload == 0 || segment.syn() || segment.rst() {
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
    mix(&segment.src_port().to_be_bytes());
    mix(&segment.dst_port().to_be_bytes());
    mix(&segment.seq_number().to_be_bytes());
    mix(&(payload as u32).to_be_bytes());
    mix(&[segment.flags() & tcp_flags::FIN]);
    NonZeroU64::new(h).or(NonZeroU64::new(1))
}

/// Counters of the filter (a power of two).
const FILTER_SLOTS: usize = 4096;

/// Which TCP segments a path's queue may hold: a counting Bloom filter over their keys (two
/// counters a key). It never misses a segment the queue holds, as long as every key
/// added is removed once, with the queue's packet ([`Link::push`](super::link::Link::push),
/// [`pop`](super::link::Link::pop), [`take_queue`](super::link::Link::take_queue));
/// a key it "may hold" is then looked for in the queue itself. The counters wrap, and a
/// queue holds at most `MAX_QUEUE_PACKETS` (8192) packets, far below a counter's range.
#[derive(Debug)]
pub(crate) struct SegmentFilter {
    counts: Box<[u16; FILTER_SLOTS]>,
}

impl Default for SegmentFilter {
    fn default() -> SegmentFilter {
        SegmentFilter {
            counts: Box::new([0; FILTER_SLOTS]),
        }
    }
}

impl SegmentFilter {
    fn slots(key: NonZeroU64) -> [usize; 2] {
        let k = key.get();
        [k as usize % FILTER_SLOTS, (k >> 32) as usize % FILTER_SLOTS]
    }

    pub(crate) fn add(&mut self, key: NonZeroU64) {
        for i in Self::slots(key) {
            self.counts[i] = self.counts[i].wrapping_add(1);
        }
    }

    pub(crate) fn remove(&mut self, key: NonZeroU64) {
        for i in Self::slots(key) {
            self.counts[i] = self.counts[i].wrapping_sub(1);
        }
    }

    /// False only when no key added and not removed is `key`.
    pub(crate) fn may_hold(&self, key: NonZeroU64) -> bool {
        Self::slots(key).iter().all(|&i| self.counts[i] != 0)
    }

    pub(crate) fn clear(&mut self) {
        self.counts.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::test_frames::{arp, ip_frame, lookalike};

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
        assert!(segment_key(Frames::Ip, &a).is_some());
        assert_eq!(segment_key(Frames::Ip, &a), segment_key(Frames::Ip, &b));
    }

    #[test]
    fn different_segments_differ() {
        let base = segment_key(Frames::Ip, &v4(1000, 1348, 0x10, 5));
        assert_ne!(
            base,
            segment_key(Frames::Ip, &v4(2348, 1348, 0x10, 5)),
            "sequence"
        );
        assert_ne!(
            base,
            segment_key(Frames::Ip, &v4(1000, 1000, 0x10, 5)),
            "length"
        );
        assert_ne!(
            base,
            segment_key(Frames::Ip, &v4(1000, 1348, 0x11, 5)),
            "FIN"
        );
        let mut port = v4(1000, 1348, 0x10, 5);
        port[21] ^= 1;
        assert_ne!(base, segment_key(Frames::Ip, &port), "port");
        let mut addr = v4(1000, 1348, 0x10, 5);
        addr[19] = 3;
        assert_ne!(base, segment_key(Frames::Ip, &addr), "address");
    }

    #[test]
    fn no_key_without_data() {
        assert_eq!(
            segment_key(Frames::Ip, &v4(1, 0, 0x10, 5)),
            None,
            "pure ack"
        );
        assert_eq!(segment_key(Frames::Ip, &v4(1, 0, 0x02, 5)), None, "SYN");
        assert_eq!(segment_key(Frames::Ip, &v4(1, 10, 0x04, 5)), None, "RST");
        assert_eq!(
            segment_key(Frames::Ip, &v4(1, 0, 0x10, 8)),
            None,
            "ack with timestamps"
        );
        assert!(
            segment_key(Frames::Ip, &v4(1, 1, 0x10, 8)).is_some(),
            "one byte after options"
        );
        let mut frag = v4(1, 100, 0x10, 5);
        frag[6] = 0x20; // more fragments
        assert_eq!(segment_key(Frames::Ip, &frag), None);
        let mut udp = v4(1, 100, 0x10, 5);
        udp[9] = 17;
        assert_eq!(segment_key(Frames::Ip, &udp), None);
    }

    /// A TCP/IPv6 segment of 100 bytes from ::1 to ::2 (20-byte TCP header).
    fn v6() -> Vec<u8> {
        let mut p = vec![0u8; 40 + 20 + 100];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&120u16.to_be_bytes());
        p[6] = TCP;
        p[23] = 1;
        p[39] = 2;
        p[40 + 12] = 5 << 4;
        p[40 + 13] = 0x10;
        p
    }

    /// A frame's key is its IP packet's, with or without a tag; a frame that carries no
    /// IP (ARP, or bytes that read as IPv4 from the frame's start) has none.
    #[test]
    fn a_frame_is_keyed_by_its_ip_packet() {
        for ip in [v4(1000, 1348, 0x10, 5), v6()] {
            let key = segment_key(Frames::Ip, &ip);
            assert!(key.is_some());
            for vlan in [false, true] {
                let f = ip_frame(&ip, vlan);
                assert_eq!(segment_key(Frames::Ethernet, &f), key, "vlan {vlan}");
                assert_eq!(segment_key(Frames::Ethernet, &arp(vlan)), None);
            }
        }
        let ip = v4(1000, 1348, 0x10, 5);
        assert_eq!(segment_key(Frames::Ethernet, &lookalike(&ip)), None);
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
        let k = segment_key(Frames::Ip, &p);
        assert!(k.is_some());
        p[40 + 7] = 1; // sequence number
        assert_ne!(segment_key(Frames::Ip, &p), k);
        p[6] = 0; // hop-by-hop options first: not looked into
        assert_eq!(segment_key(Frames::Ip, &p), None);
    }

    #[test]
    fn malformed_input_is_no_segment() {
        let good = v4(1000, 100, 0x10, 5);
        for n in 0..good.len() - 100 {
            assert_eq!(segment_key(Frames::Ip, &good[..n]), None, "cut at {n}");
        }
        let mut short_doff = good.clone();
        short_doff[32] = 4 << 4;
        assert_eq!(segment_key(Frames::Ip, &short_doff), None);
        let mut short_ihl = good.clone();
        short_ihl[0] = 0x44;
        assert_eq!(segment_key(Frames::Ip, &short_ihl), None);
        let mut lying_total = good.clone();
        lying_total[2..4].copy_from_slice(&30u16.to_be_bytes());
        assert_eq!(segment_key(Frames::Ip, &lying_total), None);
        for bytes in [&[][..], &[0x45], &[0xff; 64], &[0x60; 39]] {
            assert_eq!(segment_key(Frames::Ip, bytes), None);
        }
    }

    #[test]
    fn the_filter_never_misses_a_held_key_and_forgets_removed_ones() {
        // The keys of a bulk flow's consecutive segments.
        let key = |i: u32| segment_key(Frames::Ip, &v4(1 + i * 1000, 1000, 0x10, 5)).unwrap();
        let mut f = SegmentFilter::default();
        // A fast path's queue (a few hundred packets), each segment held twice (the same
        // segment may wait twice: a retransmission beyond the scanned head).
        for _ in 0..2 {
            for i in 0..300 {
                f.add(key(i));
            }
        }
        assert!((0..300).all(|i| f.may_hold(key(i))));
        let absent = (1000..11_000).filter(|&i| f.may_hold(key(i))).count();
        assert!(absent < 500, "{absent} false positives of 10,000");
        for i in (0..300).rev() {
            f.remove(key(i));
        }
        assert!((0..300).all(|i| f.may_hold(key(i))), "held once more");
        for i in 0..150 {
            f.remove(key(i));
        }
        assert!((150..300).all(|i| f.may_hold(key(i))));
        assert!((0..150).filter(|&i| f.may_hold(key(i))).count() < 20);
        for i in 150..300 {
            f.remove(key(i));
        }
        assert!((0..20_000).all(|i| !f.may_hold(key(i))), "all removed");
        f.add(key(7));
        f.clear();
        assert!(!f.may_hold(key(7)));
    }
}
