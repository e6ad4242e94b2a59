//! What the bond carries: IP packets (from a TUN, `layer = "ip"`) or Ethernet frames
//! (from a TAP, `layer = "ethernet"` over UDP paths), and where the IP packet is inside.
//!
//! Everything in the bond that reads a packet as IP (the MSS clamp, retransmission
//! detection, fragment groups, the adaptive scheduler's small-packet test, round-robin's
//! IGMP rule, the shaper's classifier) asks [`Frames::ip_packet`] for the IP packet and
//! leaves a packet that has none alone. In a frame the IP packet starts after the 14-byte
//! Ethernet header, or after 18 bytes when one 802.1Q or 802.1ad tag is there; a frame of
//! any other EtherType (ARP, LLDP, a second tag, ...) has no IP packet for braid: it is
//! carried untouched, goes to the shaper's default class, and the xor scheduler hashes it
//! as bonding does ([`crate::hash::hash_frame`]).

use crate::flow::{ETH_P_8021AD, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6};
use crate::hash::{hash_frame, hash_ip, HashPolicy};

/// An Ethernet header without a tag: destination, source, EtherType.
pub(crate) const ETH_HLEN: usize = 14;
/// One 802.1Q / 802.1ad tag.
pub(crate) const VLAN_HLEN: usize = 4;

/// What the bond's packets are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Frames {
    /// IP packets, as a TUN reads and writes them (IPv4 or IPv6 by the version nibble).
    #[default]
    Ip,
    /// Ethernet frames, as a TAP reads and writes them: destination MAC first, no FCS.
    Ethernet,
}

impl Frames {
    /// The largest packet the bond carries for an IP MTU of `mtu`: the MTU itself, or for
    /// a frame the MTU plus its Ethernet header and one VLAN tag (a VLAN device on the TAP
    /// has the TAP's MTU, so its frames are 4 bytes longer).
    pub fn max_len(self, mtu: usize) -> usize {
        match self {
            Frames::Ip => mtu,
            Frames::Ethernet => mtu.saturating_add(ETH_HLEN + VLAN_HLEN),
        }
    }

    /// The shortest frame the bond carries: a whole Ethernet header (no minimum for IP
    /// packets; an empty one is refused as it always was, where it is read).
    pub fn min_len(self) -> usize {
        match self {
            Frames::Ip => 0,
            Frames::Ethernet => ETH_HLEN,
        }
    }

    /// Where the IP packet starts in `packet`: 0 for an IP packet (whatever its bytes:
    /// the readers check them); after the Ethernet header (and one VLAN tag) for a frame
    /// whose EtherType is IPv4 or IPv6; `None` for any other frame.
    pub(crate) fn ip_offset(self, packet: &[u8]) -> Option<usize> {
        match self {
            Frames::Ip => Some(0),
            Frames::Ethernet => {
                let mut at = ETH_HLEN;
                let mut ethertype = be16(packet, 12)?;
                if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
                    ethertype = be16(packet, 16)?;
                    at += VLAN_HLEN;
                }
                (ethertype == ETH_P_IP || ethertype == ETH_P_IPV6).then_some(at)
            }
        }
    }

    /// The IP packet in `packet` (see [`Frames::ip_offset`]).
    pub(crate) fn ip_packet(self, packet: &[u8]) -> Option<&[u8]> {
        packet.get(self.ip_offset(packet)?..)
    }

    /// The bonding transmit hash of `packet` with `policy`.
    pub(crate) fn hash(self, policy: HashPolicy, packet: &[u8]) -> u32 {
        match self {
            Frames::Ip => hash_ip(policy, packet),
            Frames::Ethernet => hash_frame(policy, packet),
        }
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// Test frames: the same packets with an Ethernet header, with or without a tag.
#[cfg(test)]
pub(crate) mod test_frames {
    use super::*;

    /// Destination and source MACs of every test frame.
    pub(crate) const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
    pub(crate) const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

    /// `payload` behind an Ethernet header of `ethertype`, tagged with VLAN 7 when
    /// `vlan` (802.1Q).
    pub(crate) fn frame(ethertype: u16, vlan: bool, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(payload.len() + 18);
        f.extend_from_slice(&DST);
        f.extend_from_slice(&SRC);
        if vlan {
            f.extend_from_slice(&ETH_P_8021Q.to_be_bytes());
            f.extend_from_slice(&7u16.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// An IP packet in a frame, EtherType from its version nibble.
    pub(crate) fn ip_frame(packet: &[u8], vlan: bool) -> Vec<u8> {
        let ethertype = match packet.first().map(|b| b >> 4) {
            Some(6) => ETH_P_IPV6,
            _ => ETH_P_IP,
        };
        frame(ethertype, vlan, packet)
    }

    /// A broadcast ARP request (28 bytes of ARP) for 10.200.0.2.
    pub(crate) fn arp(vlan: bool) -> Vec<u8> {
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
        a.extend_from_slice(&SRC);
        a.extend_from_slice(&[10, 200, 0, 1]);
        a.extend_from_slice(&[0; 6]);
        a.extend_from_slice(&[10, 200, 0, 2]);
        let mut f = frame(crate::flow::ETH_P_ARP, vlan, &a);
        f[..6].copy_from_slice(&[0xff; 6]);
        f
    }

    /// An ARP-like frame whose first payload byte is 0x45 and whose bytes from the
    /// start would read as an IPv4 TCP SYN with an MSS option: nothing may take it for IP.
    pub(crate) fn lookalike(syn: &[u8]) -> Vec<u8> {
        // The SYN's bytes from offset 0 of the frame: destination MAC = the IP header's
        // first six bytes, and so on; the EtherType at 12..14 is what the IP header has
        // there (the source address's first two bytes, 10.200 = 0x0AC8: not IP).
        assert_eq!(syn.first(), Some(&0x45));
        assert_ne!(be16(syn, 12), Some(ETH_P_IP));
        assert_ne!(be16(syn, 12), Some(ETH_P_IPV6));
        syn.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::test_frames::*;
    use super::*;
    use crate::sim::udp_packet;

    fn v6() -> Vec<u8> {
        let mut p = vec![0u8; 48];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&8u16.to_be_bytes());
        p[6] = 17;
        p[7] = 64;
        p
    }

    #[test]
    fn the_ip_packet_is_after_the_header_and_one_tag() {
        let v4 = udp_packet(1, 100, 1, 2);
        for vlan in [false, true] {
            let at = if vlan { 18 } else { 14 };
            let f = ip_frame(&v4, vlan);
            assert_eq!(Frames::Ethernet.ip_offset(&f), Some(at));
            assert_eq!(Frames::Ethernet.ip_packet(&f), Some(&v4[..]));
            let f = ip_frame(&v6(), vlan);
            assert_eq!(Frames::Ethernet.ip_packet(&f), Some(&v6()[..]));
            // An 802.1ad tag in front: one tag is looked behind, two are not.
            let mut tagged = vec![0, 7];
            tagged.extend_from_slice(&f[12..]);
            let f = frame(ETH_P_8021AD, false, &tagged);
            assert_eq!(
                Frames::Ethernet.ip_offset(&f),
                (!vlan).then_some(18),
                "QinQ"
            );
            assert_eq!(Frames::Ethernet.ip_offset(&arp(vlan)), None, "ARP");
        }
        // LLDP, a runt, a tag cut short.
        assert_eq!(
            Frames::Ethernet.ip_offset(&frame(0x88cc, false, &[0; 40])),
            None
        );
        assert_eq!(Frames::Ethernet.ip_offset(&[0x45; 13]), None);
        assert_eq!(
            Frames::Ethernet.ip_offset(&frame(ETH_P_8021Q, false, &[0, 7, 8])),
            None
        );
        // A header and nothing after it: the IP packet is empty (its readers refuse it).
        assert_eq!(
            Frames::Ethernet.ip_packet(&frame(ETH_P_IP, false, &[])),
            Some(&[][..])
        );
        // An IP packet is its own IP packet, and a frame that looks like one is not.
        assert_eq!(Frames::Ip.ip_packet(&v4), Some(&v4[..]));
        assert_eq!(Frames::Ethernet.ip_offset(&lookalike(&v4)), None);
    }

    #[test]
    fn lengths() {
        assert_eq!(Frames::Ip.max_len(1500), 1500);
        assert_eq!(Frames::Ethernet.max_len(1500), 1518);
        assert_eq!(Frames::Ip.min_len(), 0);
        assert_eq!(Frames::Ethernet.min_len(), 14);
    }

    #[test]
    fn frames_hash_as_bonding_does() {
        let f = ip_frame(&udp_packet(1, 100, 1000, 2000), false);
        for policy in [HashPolicy::Layer2, HashPolicy::Layer34] {
            assert_eq!(Frames::Ethernet.hash(policy, &f), hash_frame(policy, &f));
            assert_eq!(Frames::Ip.hash(policy, &f[14..]), hash_ip(policy, &f[14..]));
        }
        // layer2 sees the MACs of a frame (TUN packets have none).
        assert_ne!(
            Frames::Ethernet.hash(HashPolicy::Layer2, &f),
            Frames::Ip.hash(HashPolicy::Layer2, &f[14..])
        );
    }
}
