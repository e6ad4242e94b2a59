//! Packets larger than a path's datagram: split in order on the sending path, joined at
//! the receiver.
//!
//! A path has a largest datagram (`PathConfig::max_datagram`: its link MTU less the IP,
//! UDP and sealing overhead). A TUN packet that does not fit with its data header goes out
//! as `DataPart` datagrams, one after another on the same path, each with its own path
//! sequence number (so acks, pacing and loss count datagrams as always) and the packet's
//! bond sequence number. The queue holds the packet as one entry until its last part is
//! sent: a packet is queued, dropped or moved to another path whole, never in part.
//!
//! A path is FIFO, so the receiver joins parts that arrive in order on one path. A part
//! that does not continue the packet being joined (a part was lost, or the sender moved
//! the rest of the packet to another path) ends that packet: what was joined is dropped
//! and counted, and the whole packet (if it was moved) comes on the other path.

use crate::wire::MessageType;

/// Byte ranges of the parts of a `len`-byte packet when each part carries at most
/// `room` bytes: how many parts, and part `k`'s range.
pub(crate) fn split(len: usize, room: usize) -> (usize, impl Fn(usize) -> core::ops::Range<usize>) {
    let room = room.max(1);
    let parts = len.div_ceil(room).max(1);
    // Equal parts (the last no larger than the others), not full parts and a runt.
    let size = len.div_ceil(parts);
    (parts, move |k: usize| {
        let start = (k * size).min(len);
        start..((k + 1) * size).min(len)
    })
}

/// One path's packet being joined.
#[derive(Debug, Default)]
pub(crate) struct Joiner {
    active: bool,
    seq: u64,
    next: u8,
    parts: u8,
    kind: Option<MessageType>,
    buf: Vec<u8>,
    /// Packets given up partly joined, and parts that continued nothing.
    pub(crate) dropped: u64,
}

impl Joiner {
    /// Part `part` of `parts` of packet `seq`, at most `max` bytes in all. The packet's
    /// type once it is whole (then in [`Joiner::packet`]).
    pub(crate) fn add(
        &mut self,
        seq: u64,
        part: u8,
        parts: u8,
        kind: MessageType,
        payload: &[u8],
        max: usize,
    ) -> Option<MessageType> {
        let continues = self.active
            && seq == self.seq
            && part == self.next
            && parts == self.parts
            && Some(kind) == self.kind;
        if !continues {
            if self.active {
                self.dropped += 1;
                self.active = false;
            }
            if part != 0 || parts < 2 {
                self.dropped += 1;
                return None;
            }
            self.active = true;
            self.seq = seq;
            self.parts = parts;
            self.kind = Some(kind);
            self.next = 0;
            self.buf.clear();
        }
        if self.buf.len() + payload.len() > max {
            self.active = false;
            self.dropped += 1;
            return None;
        }
        self.buf.extend_from_slice(payload);
        self.next += 1;
        if self.next < self.parts {
            return None;
        }
        self.active = false;
        Some(kind)
    }

    /// The packet [`Joiner::add`] just reported whole.
    #[cfg(test)]
    pub(crate) fn packet(&self) -> &[u8] {
        &self.buf
    }

    /// Forget what was being joined (the peer restarted).
    pub(crate) fn reset(&mut self) {
        self.active = false;
        self.buf.clear();
    }

    /// Takes the buffer out (to deliver from it while the bond is borrowed); give it
    /// back with [`Joiner::put_back`] so its allocation is reused.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.buf)
    }

    pub(crate) fn put_back(&mut self, buf: Vec<u8>) {
        self.buf = buf;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_into_equal_parts_that_cover_the_packet() {
        for (len, room, parts) in [(1500, 1429, 2), (1429, 1429, 1), (3000, 1000, 3), (1, 5, 1)] {
            let (n, range) = split(len, room);
            assert_eq!(n, parts, "{len} in {room}");
            let mut at = 0;
            for k in 0..n {
                let r = range(k);
                assert_eq!(r.start, at);
                assert!(r.len() <= room && !r.is_empty(), "{r:?}");
                at = r.end;
            }
            assert_eq!(at, len);
        }
        // 1500 in 1429: 750 + 750, not 1429 + 71.
        assert_eq!(split(1500, 1429).1(1), 750..1500);
    }

    #[test]
    fn joins_parts_in_order_and_drops_what_does_not_continue() {
        let d = MessageType::Data;
        let mut j = Joiner::default();
        assert_eq!(j.add(7, 0, 2, d, b"ab", 10), None);
        assert_eq!(j.add(7, 1, 2, d, b"cd", 10), Some(d));
        assert_eq!((j.packet(), j.dropped), (&b"abcd"[..], 0));
        // A lost part 1: the next packet's part 0 gives packet 8 up and is kept.
        assert_eq!(j.add(8, 0, 2, d, b"xx", 10), None);
        assert_eq!(j.add(9, 0, 2, d, b"ef", 10), None);
        assert_eq!(j.dropped, 1);
        assert_eq!(j.add(9, 1, 2, d, b"gh", 10), Some(d));
        assert_eq!(j.packet(), b"efgh");
        // A part without its first: dropped alone.
        assert_eq!(j.add(10, 1, 2, d, b"zz", 10), None);
        assert_eq!(j.dropped, 2);
        // Too large in all, a one-part "split", a kind that changes: dropped.
        assert_eq!(j.add(11, 0, 2, d, b"123456", 10), None);
        assert_eq!(j.add(11, 1, 2, d, b"78901", 10), None);
        assert_eq!(j.add(12, 0, 1, d, b"1", 10), None);
        assert_eq!(j.add(13, 0, 2, d, b"ab", 10), None);
        assert_eq!(j.add(13, 1, 2, MessageType::PinnedData, b"cd", 10), None);
        assert_eq!(j.dropped, 6);
    }
}

#[cfg(test)]
mod bond_tests {
    use core::time::Duration;

    use crate::bond::{BondConfig, PathConfig};
    use crate::emu::EmuConfig;
    use crate::sim::{packet_seq, udp_packet, Pair};
    use crate::Instant;

    /// Two 40 Mbit/s paths whose datagrams carry at most 1000 bytes, `loss` each way;
    /// 1400-byte packets at 20 Mbit/s for 2 s. Returns the pair and how many were sent.
    fn run(loss: f64) -> (Pair, u64) {
        let mut pair = Pair::new(BondConfig::default());
        for i in 0..2u64 {
            let emu = EmuConfig {
                rate_bps: 40_000_000,
                delay: Duration::from_millis(5 + 10 * i),
                loss,
                seed: i + 1,
                ..EmuConfig::default()
            };
            let path = PathConfig {
                name: format!("p{i}"),
                max_datagram: 1000,
                ..PathConfig::default()
            };
            pair.add_path(path, emu);
        }
        let (start, stop) = (Instant::from_millis(1000), Instant::from_millis(3000));
        let mut sent = 0u64;
        pair.run_until(Instant::from_millis(3500), |p| {
            let now = p.now.min(stop);
            if now < start {
                return;
            }
            let due = (now - start).as_micros() as u64 * 20 / (1400 * 8);
            while sent < due {
                let pkt = udp_packet(sent, 1400, 40000, 5001);
                p.a.handle_tun_packet(p.now, &pkt);
                sent += 1;
            }
        });
        (pair, sent)
    }

    #[test]
    fn packets_larger_than_a_paths_datagram_cross_in_parts_whole_and_in_order() {
        let (pair, sent) = run(0.0);
        let got: Vec<u64> = pair
            .delivered_b
            .iter()
            .filter_map(|p| packet_seq(p))
            .collect();
        assert_eq!(got, (0..sent).collect::<Vec<_>>());
        for p in &pair.delivered_b {
            let k = packet_seq(p).expect("numbered");
            assert_eq!(p, &udp_packet(k, 1400, 40000, 5001), "packet {k}");
        }
        let a = pair.a.status();
        let datagrams: u64 = a.paths.iter().map(|p| p.tx_packets).sum();
        assert_eq!(datagrams, 2 * sent, "two datagrams a packet");
        assert!(a.paths.iter().all(|p| p.tx_packets > 0), "both paths used");
        assert_eq!(pair.b.status().counters.drop_partial, 0);
    }

    #[test]
    fn a_lost_part_loses_its_whole_packet_and_nothing_else() {
        let (pair, sent) = run(0.02);
        let b = pair.b.status();
        assert!(b.counters.drop_partial > 0, "{:?}", b.counters);
        for p in &pair.delivered_b {
            let k = packet_seq(p).expect("numbered");
            assert_eq!(p, &udp_packet(k, 1400, 40000, 5001), "packet {k}");
        }
        // About 4 % of packets lose one of their two parts.
        let got = pair.delivered_b.len() as u64;
        assert!(got * 100 >= sent * 90, "{got} of {sent}");
    }
}
