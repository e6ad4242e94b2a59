//! TCP MSS clamping: a SYN entering the bond has its MSS option lowered so that the
//! connection's full-size segments fit one datagram on every path.
//!
//! braid carries any packet up to the bond's MTU (1500 by default), in parts where a
//! path's datagram is smaller (`bond/parts.rs`), so nothing breaks without this. But two
//! datagrams per segment cost CPU and a lost part loses the segment; clamping, as routers
//! do with `--clamp-mss-to-pmtu`, makes TCP choose segments that go whole. Each end clamps
//! the SYNs (and SYN-ACKs) its own hosts send into the bond, so both directions of a
//! connection are covered. `bond.mss_clamp = false` turns it off.
//!
//! Only a plain IPv4 packet (any options, not a fragment) or an IPv6 packet whose next
//! header is TCP is looked at; the TCP checksum is recomputed over the pseudo-header. In
//! an Ethernet frame that is the IP packet after the header (and a VLAN tag,
//! [`Frames::ip_offset`]); a frame of another EtherType is never touched, whatever its
//! bytes look like.

use crate::flow::proto::TCP;
use crate::wire::ip::{IpPacket, TcpPacket};
use crate::Frames;

/// If `packet` (an IP packet or a frame, as `frames` says) carries a TCP SYN whose MSS
/// option asks for segments larger than fit in `room` bytes of packet (a frame's header
/// included), lower the MSS to fit and fix the checksum. True if changed.
pub(crate) fn clamp(frames: Frames, packet: &mut [u8], room: usize) -> bool {
    let Some(at) = frames.ip_offset(packet) else {
        return false;
    };
    match packet.get_mut(at..) {
        Some(ip) => clamp_ip(ip, room.saturating_sub(at)),
        None => false,
    }
}

/// [`clamp`] for an IP packet with `room` bytes of IP packet.
fn clamp_ip(packet: &mut [u8], room: usize) -> bool {
    let Some((ip_len, tcp_at, pseudo)) = tcp_of(packet) else {
        return false;
    };
    let Some(tcp) = packet
        .get(tcp_at..ip_len)
        .and_then(|b| TcpPacket::new_checked(b).ok())
    else {
        return false;
    };
    if !tcp.syn() {
        return false;
    }
    let max = room.saturating_sub(tcp_at + 20);
    let Ok(max) = u16::try_from(max) else {
        return false;
    };
    let Some(at) = mss_option(tcp.options()) else {
        return false;
    };
    let at = tcp_at + 20 + at;
    let mss = u16::from_be_bytes([packet[at], packet[at + 1]]);
    if mss <= max {
        return false;
    }
    packet[at..at + 2].copy_from_slice(&max.to_be_bytes());
    packet[tcp_at + 16..tcp_at + 18].copy_from_slice(&[0, 0]);
    let sum = checksum(pseudo(packet, ip_len - tcp_at), &packet[tcp_at..ip_len]);
    packet[tcp_at + 16..tcp_at + 18].copy_from_slice(&sum.to_be_bytes());
    true
}

/// The IP packet's length, where its TCP header starts and how to sum its pseudo-header;
/// None if it is not an unfragmented TCP packet this module handles.
type Pseudo = fn(&[u8], usize) -> u32;

fn tcp_of(p: &[u8]) -> Option<(usize, usize, Pseudo)> {
    match IpPacket::new_checked(p).ok()? {
        IpPacket::V4(ip) => {
            let len = usize::from(ip.total_len());
            let ihl = ip.header_len();
            (len <= p.len() && len >= ihl + 20 && !ip.is_fragment() && ip.protocol() == TCP)
                .then_some((len, ihl, pseudo4 as Pseudo))
        }
        IpPacket::V6(ip) => {
            let len = 40 + usize::from(ip.payload_len());
            (len <= p.len() && len >= 60 && ip.next_header() == TCP).then_some((
                len,
                40,
                pseudo6 as Pseudo,
            ))
        }
    }
}

fn pseudo4(p: &[u8], tcp_len: usize) -> u32 {
    sum16(&p[12..20]) + 6 + tcp_len as u32
}

fn pseudo6(p: &[u8], tcp_len: usize) -> u32 {
    sum16(&p[8..40]) + 6 + tcp_len as u32
}

/// Offset of the MSS value (2 bytes) within TCP options `opts`.
fn mss_option(opts: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => return None,
            1 => i += 1,
            kind => {
                let len = usize::from(*opts.get(i + 1)?);
                if len < 2 || i + len > opts.len() {
                    return None;
                }
                if kind == 2 && len == 4 {
                    return Some(i + 2);
                }
                i += len;
            }
        }
    }
    None
}

fn sum16(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum()
}

fn checksum(pseudo: u32, segment: &[u8]) -> u16 {
    let mut sum = u64::from(pseudo) + u64::from(sum16(segment));
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::test_frames::{arp, ip_frame, lookalike};

    /// A SYN from 10.0.0.1:40000 to 10.0.0.2:5201 with a NOP, then MSS `mss`, then
    /// SACK-permitted; its checksum right.
    fn syn4(mss: u16) -> Vec<u8> {
        let mut p = vec![0u8; 20 + 28];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&48u16.to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let t = &mut p[20..];
        t[0..2].copy_from_slice(&40000u16.to_be_bytes());
        t[2..4].copy_from_slice(&5201u16.to_be_bytes());
        t[12] = 7 << 4;
        t[13] = 0x02;
        // NOP, then MSS at an odd offset, then SACK-permitted, NOP.
        t[20] = 1;
        t[21..25].copy_from_slice(&[2, 4, (mss >> 8) as u8, mss as u8]);
        t[25..27].copy_from_slice(&[4, 2]);
        t[27] = 1;
        let sum = checksum(pseudo4(&p, 28), &p[20..]);
        p[36..38].copy_from_slice(&sum.to_be_bytes());
        p
    }

    fn valid(p: &[u8]) -> bool {
        let (len, at, pseudo) = tcp_of(p).expect("tcp");
        checksum(pseudo(p, len - at), &p[at..len]) == 0
    }

    #[test]
    fn a_syn_too_large_for_one_datagram_is_lowered_and_stays_valid() {
        let mut p = syn4(1460);
        assert!(valid(&p));
        // 1420 bytes of IP packet fit a sealed IPv4 datagram: MSS 1380.
        assert!(clamp(Frames::Ip, &mut p, 1420));
        assert_eq!(&p[41..47], &[2, 4, 0x05, 0x64, 4, 2]);
        assert!(valid(&p), "checksum recomputed");
        // Already small enough: untouched.
        let mut q = syn4(1200);
        assert!(!clamp(Frames::Ip, &mut q, 1420));
        assert_eq!(q, syn4(1200));
    }

    #[test]
    fn only_syns_of_unfragmented_tcp_are_touched() {
        let mut ack = syn4(1460);
        ack[33] = 0x10;
        assert!(!clamp(Frames::Ip, &mut ack, 1420));
        let mut frag = syn4(1460);
        frag[7] = 1;
        assert!(!clamp(Frames::Ip, &mut frag, 1420));
        let mut udp = syn4(1460);
        udp[9] = 17;
        assert!(!clamp(Frames::Ip, &mut udp, 1420));
        // Truncated or garbage: no panic, no change.
        for n in 0..48 {
            let mut p = syn4(1460)[..n].to_vec();
            let before = p.clone();
            clamp(Frames::Ip, &mut p, 1420);
            assert_eq!(p, before, "{n}");
        }
    }

    /// [`syn4`]'s segment from ::1 to ::2.
    fn syn6(mss: u16) -> Vec<u8> {
        let v4 = syn4(mss);
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&28u16.to_be_bytes());
        p[6] = 6;
        p[7] = 64;
        p[23] = 1;
        p[39] = 2;
        p.extend_from_slice(&v4[20..]);
        p[56..58].copy_from_slice(&[0, 0]);
        let sum = checksum(pseudo6(&p, 28), &p[40..]);
        p[56..58].copy_from_slice(&sum.to_be_bytes());
        p
    }

    #[test]
    fn ipv6_syns_are_clamped_by_their_longer_header() {
        let mut p = syn6(1460);
        assert!(valid(&p));
        assert!(clamp(Frames::Ip, &mut p, 1400));
        // 1400 - 40 - 20 = 1340.
        assert_eq!(u16::from_be_bytes([p[63], p[64]]), 1340);
        assert!(valid(&p));
    }

    /// In a frame (with or without a tag) the IP packet's SYN is clamped where it is,
    /// for the room left after the frame's header, and the frame's header is left alone.
    #[test]
    fn a_syn_in_a_frame_is_clamped_in_its_ip_packet() {
        for vlan in [false, true] {
            let at = if vlan { 18 } else { 14 };
            for ip in [syn4(1460), syn6(1460)] {
                let mut f = ip_frame(&ip, vlan);
                // The same room for the IP packet as 1420 bytes of TUN packet.
                assert!(clamp(Frames::Ethernet, &mut f, 1420 + at), "vlan {vlan}");
                let mut want = ip.clone();
                assert!(clamp(Frames::Ip, &mut want, 1420));
                assert_eq!(&f[..at], &ip_frame(&ip, vlan)[..at], "header untouched");
                assert_eq!(&f[at..], &want[..], "vlan {vlan}");
                assert!(valid(&f[at..]), "checksum recomputed");
            }
        }
    }

    /// A frame that carries no IP is never rewritten, even one whose bytes from the start
    /// read as an IPv4 SYN (0x45 first): as a TUN packet it would be clamped.
    #[test]
    fn a_frame_without_ip_is_never_touched() {
        let syn = syn4(1460);
        assert!(clamp(Frames::Ip, &mut syn.clone(), 1420));
        let mut f = lookalike(&syn);
        assert!(!clamp(Frames::Ethernet, &mut f, 1420));
        assert_eq!(f, syn, "unchanged");
        for vlan in [false, true] {
            let mut a = arp(vlan);
            assert!(!clamp(Frames::Ethernet, &mut a, 1420));
            assert_eq!(a, arp(vlan));
            // Cut anywhere: no panic, no change.
            let whole = ip_frame(&syn, vlan);
            for n in 0..whole.len() {
                let mut p = whole[..n].to_vec();
                assert!(!clamp(Frames::Ethernet, &mut p, 1420), "cut at {n}");
                assert_eq!(p, whole[..n]);
            }
        }
    }
}
