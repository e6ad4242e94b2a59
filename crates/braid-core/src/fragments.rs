//! IP fragment groups: a datagram is queued whole or dropped whole.
//!
//! A datagram larger than the bond's MTU reaches the TUN as IP fragments, and the far
//! end can use it only if every fragment arrives: fragments sent without the rest are
//! sent for nothing, and they also fill the receiver's reassembly memory for 30 s. A
//! queue that drops fragments one by one when it is full does exactly that (the HTB
//! seed's iperf test through a bond of MTU 1400 got 1.6 of 10 Mbit/s). So where braid
//! queues or drops packets (a shaper leaf, a path's queue), [`FragmentGroups`] makes the
//! decision once per datagram, at its first fragment:
//!
//! - a fragment of a group already **admitted** (an earlier fragment was queued) is queued
//!   even beyond the queue's limit, up to a bounded overshoot that the caller sets
//!   (a datagram is at most 64 KiB: 45 fragments at a 1500-byte MTU);
//! - a fragment of a **doomed** group (an earlier fragment was dropped) is dropped, and
//!   so is one still waiting in a queue when it reaches the head;
//! - the first fragment of a group the queue has room for admits it; one it has no room
//!   for dooms it.
//!
//! A group is the datagram's (source, destination, protocol, identification), as the
//! kernel reassembles them (RFC 791; IPv6: the Fragment header right after the fixed
//! header, RFC 8200 sec. 4.5). A group is remembered for [`GROUP_FOR`] (the kernel writes
//! a datagram's fragments to the TUN one after the other) and at most [`GROUPS_MAX`]
//! groups at once, the oldest forgotten first; a later datagram that reuses the
//! identification within that time shares the verdict (the kernel's identifications are
//! per destination, so that takes 65 536 fragmented datagrams to one host within
//! [`GROUP_FOR`]). Whole datagrams are not looked at beyond their first 8 bytes.

use core::time::Duration;

use crate::wire::ip::IpPacket;
use crate::{Frames, Instant};

/// How long a group's verdict is kept.
pub(crate) const GROUP_FOR: Duration = Duration::from_secs(2);
/// Groups remembered at once.
pub(crate) const GROUPS_MAX: usize = 64;
/// Packets a queue may hold beyond its limit for the rest of admitted groups.
pub(crate) const OVERSHOOT: usize = 64;

/// What was decided for a fragment group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A fragment was queued: queue the rest, even beyond the limit.
    Admitted,
    /// A fragment was dropped: drop the rest.
    Doomed,
}

/// The group of an IP fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupKey {
    src: [u8; 16],
    dst: [u8; 16],
    id: u32,
    proto: u8,
}

impl GroupKey {
    /// The group of `packet` if it is an IPv4 fragment (more fragments, or an offset)
    /// or an IPv6 packet whose first extension header is a Fragment header.
    pub fn of(packet: &[u8]) -> Option<GroupKey> {
        match IpPacket::new_checked(packet).ok()? {
            IpPacket::V4(ip) => {
                if !ip.is_fragment() {
                    return None; // neither MF nor an offset: a whole datagram
                }
                let mut src = [0u8; 16];
                let mut dst = [0u8; 16];
                src[..4].copy_from_slice(&ip.src_addr());
                dst[..4].copy_from_slice(&ip.dst_addr());
                Some(GroupKey {
                    src,
                    dst,
                    id: u32::from(ip.ident()),
                    proto: ip.protocol(),
                })
            }
            IpPacket::V6(ip) => {
                let frag = ip.fragment_header()?;
                Some(GroupKey {
                    src: ip.src_addr(),
                    dst: ip.dst_addr(),
                    id: frag.ident(),
                    proto: frag.next_header(),
                })
            }
        }
    }
}

/// The verdicts on recent fragment groups. See the module documentation.
#[derive(Clone, Debug, Default)]
pub(crate) struct FragmentGroups {
    /// (group, verdict, when decided), oldest first.
    groups: std::collections::VecDeque<(GroupKey, Verdict, Instant)>,
    /// What the packets are: in a frame, the IP packet after its header is looked at (a
    /// frame that carries no IP is a whole datagram).
    frames: Frames,
}

impl FragmentGroups {
    /// Fragment groups of IP packets, or of the IP packets in frames.
    pub(crate) fn new(frames: Frames) -> Self {
        FragmentGroups {
            groups: Default::default(),
            frames,
        }
    }

    /// The group of `packet` (an IP packet or a frame, as the groups' packets are).
    fn key(&self, packet: &[u8]) -> Option<GroupKey> {
        GroupKey::of(self.frames.ip_packet(packet)?)
    }

    /// The verdict on `packet`'s group: `None` for a whole datagram or a group not seen.
    pub(crate) fn verdict(&mut self, now: Instant, packet: &[u8]) -> Option<Verdict> {
        if self.groups.is_empty() {
            return None;
        }
        let key = self.key(packet)?;
        self.expire(now);
        self.groups
            .iter()
            .rev()
            .find(|(k, ..)| *k == key)
            .map(|(_, v, _)| *v)
    }

    /// `packet` was queued: if it is a fragment of a group not decided, admit the group.
    pub(crate) fn queued(&mut self, now: Instant, packet: &[u8]) {
        self.decide(now, packet, Verdict::Admitted);
    }

    /// `packet` was dropped: if it is a fragment, its group is doomed (also one that was
    /// admitted: its fragments still queued go at the head).
    pub(crate) fn dropped(&mut self, now: Instant, packet: &[u8]) {
        self.decide(now, packet, Verdict::Doomed);
    }

    fn decide(&mut self, now: Instant, packet: &[u8], verdict: Verdict) {
        let Some(key) = self.key(packet) else {
            return;
        };
        self.expire(now);
        if let Some(g) = self.groups.iter_mut().rev().find(|(k, ..)| *k == key) {
            if verdict == Verdict::Doomed {
                g.1 = Verdict::Doomed;
            }
            return;
        }
        if self.groups.len() >= GROUPS_MAX {
            self.groups.pop_front();
        }
        self.groups.push_back((key, verdict, now));
    }

    fn expire(&mut self, now: Instant) {
        while self
            .groups
            .front()
            .is_some_and(|(.., at)| now.saturating_since(*at) >= GROUP_FOR)
        {
            self.groups.pop_front();
        }
    }
}

/// An IPv4 fragment of datagram `id` at `offset` (8-byte units), `more` to follow.
#[cfg(test)]
pub(crate) fn v4_fragment(id: u16, offset: u16, more: bool, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len.max(20)];
    p[0] = 0x45;
    let total = u16::try_from(p.len()).unwrap_or(u16::MAX);
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[4..6].copy_from_slice(&id.to_be_bytes());
    let fo = offset | if more { 0x2000 } else { 0 };
    p[6..8].copy_from_slice(&fo.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_ms(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    #[test]
    fn groups_are_told_by_addresses_protocol_and_id() {
        let first = v4_fragment(7, 0, true, 1500);
        let last = v4_fragment(7, 185, false, 100);
        assert!(GroupKey::of(&first).is_some());
        assert_eq!(GroupKey::of(&first), GroupKey::of(&last));
        assert_ne!(
            GroupKey::of(&first),
            GroupKey::of(&v4_fragment(8, 0, true, 1500))
        );
        // DF or nothing set: a whole datagram, no group.
        let mut whole = v4_fragment(7, 0, false, 1500);
        assert_eq!(GroupKey::of(&whole), None);
        whole[6] = 0x40;
        assert_eq!(GroupKey::of(&whole), None);
        // IPv6 with a Fragment header, and without.
        let mut v6 = vec![0u8; 120];
        v6[0] = 0x60;
        v6[6] = 44;
        v6[40] = 17;
        v6[44..48].copy_from_slice(&99u32.to_be_bytes());
        let k = GroupKey::of(&v6).expect("a v6 fragment");
        assert_eq!((k.id, k.proto), (99, 17));
        v6[6] = 17;
        assert_eq!(GroupKey::of(&v6), None);
        for short in [&[][..], &[0x45, 0, 0][..], &[0x60; 30][..], &[0x10; 50][..]] {
            assert_eq!(GroupKey::of(short), None);
        }
    }

    #[test]
    fn the_first_fragment_decides_for_the_group_for_a_while() {
        let mut g = FragmentGroups::default();
        let (a0, a1) = (
            v4_fragment(1, 0, true, 1500),
            v4_fragment(1, 185, false, 100),
        );
        let (b0, b1) = (
            v4_fragment(2, 0, true, 1500),
            v4_fragment(2, 185, false, 100),
        );
        assert_eq!(g.verdict(at_ms(0), &a0), None);
        g.queued(at_ms(0), &a0);
        g.dropped(at_ms(0), &b0);
        assert_eq!(g.verdict(at_ms(1), &a1), Some(Verdict::Admitted));
        assert_eq!(g.verdict(at_ms(1), &b1), Some(Verdict::Doomed));
        // Queuing a doomed group's fragment does not revive it; dropping an admitted
        // group's fragment dooms it.
        g.queued(at_ms(1), &b1);
        assert_eq!(g.verdict(at_ms(1), &b0), Some(Verdict::Doomed));
        g.dropped(at_ms(1), &a1);
        assert_eq!(g.verdict(at_ms(1), &a0), Some(Verdict::Doomed));
        assert_eq!(
            g.verdict(at_ms(1), &v4_fragment(1, 0, false, 100)),
            None,
            "whole"
        );
        assert_eq!(
            g.verdict(at_ms(2000), &a1),
            None,
            "forgotten after GROUP_FOR"
        );
        // Whole datagrams are never remembered; at most GROUPS_MAX groups are.
        g.dropped(at_ms(3000), &v4_fragment(1, 0, false, 100));
        assert!(g.groups.is_empty());
        for id in 0..(GROUPS_MAX as u16 + 10) {
            g.dropped(at_ms(3000), &v4_fragment(id, 0, true, 100));
        }
        assert_eq!(g.groups.len(), GROUPS_MAX);
        assert_eq!(g.verdict(at_ms(3000), &v4_fragment(0, 0, true, 100)), None);
        let last = v4_fragment(GROUPS_MAX as u16 + 9, 0, true, 100);
        assert_eq!(g.verdict(at_ms(3000), &last), Some(Verdict::Doomed));
    }

    /// In frames, a fragment's group is its IP packet's, with or without a tag; a frame
    /// that carries no IP, or reads as an IPv4 fragment from its first byte, has none.
    #[test]
    fn frames_are_grouped_by_their_ip_packet() {
        use crate::frames::test_frames::{arp, ip_frame, lookalike};
        let mut g = FragmentGroups::new(Frames::Ethernet);
        let (first, last) = (
            v4_fragment(3, 0, true, 1400),
            v4_fragment(3, 175, false, 100),
        );
        g.dropped(at_ms(0), &ip_frame(&first, false));
        for vlan in [false, true] {
            let f = ip_frame(&last, vlan);
            assert_eq!(g.verdict(at_ms(1), &f), Some(Verdict::Doomed), "{vlan}");
        }
        g.dropped(at_ms(1), &arp(false));
        g.dropped(at_ms(1), &lookalike(&v4_fragment(4, 0, true, 100)));
        assert_eq!(g.groups.len(), 1, "only the IP fragment's group");
        // The same bytes as IP packets are another matter.
        let mut ip = FragmentGroups::new(Frames::Ip);
        ip.dropped(at_ms(0), &v4_fragment(4, 0, true, 100));
        assert_eq!(ip.groups.len(), 1);
    }
}
