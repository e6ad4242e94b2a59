//! The write direction: packets bound for an offloaded TUN, TCP segments merged (GRO).
//!
//! [`Coalescer::push`] takes IP packets one at a time, in the order they are to reach the
//! kernel. A TCP segment that continues the newest frame of its flow is appended to it;
//! anything else starts a new frame. Each frame is ready to write to the TUN as it is:
//! a [`VnetHdr`] and then either one packet as it came (`GSO_NONE`, no flags) or a
//! superframe (`GSO_TCPV4`/`GSO_TCPV6`, `F_NEEDS_CSUM`, the TCP checksum field holding
//! the pseudo-header sum, as the kernel expects for `CHECKSUM_PARTIAL`).
//!
//! The rules are those of Linux's `tcp_gro_receive`/`inet_gro_receive` and
//! wireguard-go's `tcpGRO`, kept strict enough that cutting a superframe again
//! ([`super::split`]) gives back exactly the packets that went in (bar the form of a
//! checksum): same addresses and ports, IPv4 without options and not a fragment, equal
//! TOS/DF/TTL (IPv4) or first word and hop limit (IPv6), equal ACK number, window,
//! urgent pointer and options, flags ACK or ACK|PSH, a payload, the sequence number
//! continuing the frame, the IPv4 ID one more than the segment before, no segment longer
//! than the first, nothing after a shorter one or after PSH, at most [`MAX_SEGMENTS`]
//! segments and 65535 bytes of IP packet. Both IP and TCP checksums are checked before a
//! segment joins (the kernel will not check them again on a `CHECKSUM_PARTIAL` frame).
//! Segments are only appended, so no flow is reordered; frames keep the order in which
//! they were started.
//!
//! With [`Coalescer::with_udp`] (for a TUN with USO), UDP datagrams of one flow in a row
//! are merged the same way into a `GSO_UDP_L4` frame (as wireguard-go's `udpGRO`): equal
//! IP fields, IPv4 IDs stepping, none longer than the first, nothing after a shorter one,
//! checksums verified and not zero.
//!
//! All buffers are allocated in [`Coalescer::new`]; pushing never allocates.

use super::checksum;
use super::split::pseudo_sum;
use super::vnet::{self, VnetHdr};
use super::{PROTO_TCP, PROTO_UDP};

/// The most segments merged into one frame (as `UDP_GRO_CNT_MAX`).
pub const MAX_SEGMENTS: u16 = 64;

const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;

/// Why a packet was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushError {
    /// Every frame is in use: write the frames out, [`Coalescer::clear`], push again.
    Full,
    /// The packet (with the virtio header) does not fit in a frame at all: a drop.
    TooLarge,
}

impl core::fmt::Display for PushError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PushError::Full => write!(f, "every frame of the batch is in use"),
            PushError::TooLarge => write!(f, "packet larger than a frame"),
        }
    }
}

/// Where a pushed packet went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The index of its frame.
    pub frame: usize,
    /// True if it joined an existing frame, false if it started one.
    pub merged: bool,
}

/// A batch of frames being built for the TUN.
#[derive(Debug)]
pub struct Coalescer {
    store: Vec<u8>,
    frame_cap: usize,
    frames: Vec<Slot>,
    max_frames: usize,
    udp: bool,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Bytes used, virtio header included.
    len: usize,
    /// Set for a TCP frame that may take more segments.
    tcp: Option<Item>,
    /// Segments were appended since its headers were last written ([`Coalescer::finish`]).
    stale: bool,
}

#[derive(Clone, Copy, Debug)]
struct Item {
    seg: Seg,
    /// Segments in the frame.
    segs: u16,
    next_seq: u32,
    /// Nothing more may be appended (a shorter segment or PSH came).
    closed: bool,
}

/// A TCP segment (or UDP datagram) that may be merged.
#[derive(Clone, Copy, Debug)]
struct Seg {
    v6: bool,
    udp: bool,
    ip_len: usize,
    l4_len: usize,
    seq: u32,
    psh: bool,
    payload: usize,
}

impl Coalescer {
    /// A batch of at most `max_frames` frames of `frame_cap` bytes each (virtio header
    /// included; [`super::MAX_FRAME`] takes any superframe the kernel accepts).
    pub fn new(max_frames: usize, frame_cap: usize) -> Coalescer {
        Coalescer {
            store: vec![0; max_frames * frame_cap],
            frame_cap,
            frames: Vec::with_capacity(max_frames),
            max_frames,
            udp: false,
        }
    }

    /// Merge UDP datagrams too (`GSO_UDP_L4`): only for a TUN with USO on (Linux 6.2
    /// and later). Datagrams of a flow in a row, of equal length but for a shorter last
    /// one, with a checksum that verifies (not zero), become one frame.
    pub fn with_udp(mut self, on: bool) -> Coalescer {
        self.udp = on;
        self
    }

    /// Frames in the batch.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// True when no frame has been started.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Frame `i`: the bytes to write to the TUN.
    pub fn frame(&mut self, i: usize) -> Option<&[u8]> {
        self.finish(i);
        self.bytes(i)
    }

    /// The frames in order.
    pub fn frames(&mut self) -> impl Iterator<Item = &[u8]> {
        for i in 0..self.frames.len() {
            self.finish(i);
        }
        (0..self.frames.len()).filter_map(|i| self.bytes(i))
    }

    fn bytes(&self, i: usize) -> Option<&[u8]> {
        let s = self.frames.get(i)?;
        self.store
            .get(i * self.frame_cap..i * self.frame_cap + s.len)
    }

    /// Start a new batch (the frames were written).
    pub fn clear(&mut self) {
        self.frames.clear();
    }

    /// Add one IP packet to the batch.
    pub fn push(&mut self, packet: &[u8]) -> Result<Pushed, PushError> {
        if packet.len() + vnet::LEN > self.frame_cap || packet.len() > 65535 {
            return Err(PushError::TooLarge);
        }
        let seg = candidate(packet, self.udp);
        if let Some(seg) = seg {
            if let Some(i) = self.newest_of_flow(packet, &seg) {
                if self.append(i, packet, &seg) {
                    return Ok(Pushed {
                        frame: i,
                        merged: true,
                    });
                }
            }
        }
        if self.frames.len() == self.max_frames {
            return Err(PushError::Full);
        }
        let i = self.frames.len();
        let at = i * self.frame_cap;
        let buf = &mut self.store[at..at + vnet::LEN + packet.len()];
        // The buffer is LEN bytes or more: emit cannot fail.
        let _ = VnetHdr::NONE.emit(buf);
        let dst = &mut buf[vnet::LEN..];
        // A segment that may take more; any other TCP packet only marks its flow, so
        // that nothing of the flow is appended to a frame before it.
        let tcp = match seg {
            Some(s) => Some(Item {
                seg: s,
                segs: 1,
                next_seq: s.seq.wrapping_add(s.payload as u32),
                closed: !copy_checked(dst, packet, &s, 0) || s.psh,
            }),
            None => {
                dst.copy_from_slice(packet);
                flow_of(packet).map(|(v6, udp, ip_len)| Item {
                    seg: Seg {
                        v6,
                        udp,
                        ip_len,
                        l4_len: 0,
                        seq: 0,
                        psh: false,
                        payload: 0,
                    },
                    segs: 1,
                    next_seq: 0,
                    closed: true,
                })
            }
        };
        self.frames.push(Slot {
            len: vnet::LEN + packet.len(),
            tcp,
            stale: false,
        });
        Ok(Pushed {
            frame: i,
            merged: false,
        })
    }

    /// The newest frame holding a segment of `p`'s flow, if it is open.
    fn newest_of_flow(&self, p: &[u8], s: &Seg) -> Option<usize> {
        let addrs = if s.v6 { 8..40 } else { 12..20 };
        let t = s.ip_len;
        for i in (0..self.frames.len()).rev() {
            let Some(item) = self.frames[i].tcp else {
                continue;
            };
            if item.seg.v6 != s.v6 || item.seg.udp != s.udp {
                continue;
            }
            let head = &self.store[i * self.frame_cap + vnet::LEN..];
            let ht = item.seg.ip_len;
            if head[addrs.clone()] == p[addrs.clone()] && head[ht..ht + 4] == p[t..t + 4] {
                return (!item.closed).then_some(i);
            }
        }
        None
    }

    /// Append `p` to frame `i` if the rules allow; true if it was.
    fn append(&mut self, i: usize, p: &[u8], s: &Seg) -> bool {
        let slot = self.frames[i];
        let Some(mut item) = slot.tcp else {
            return false;
        };
        let at = i * self.frame_cap;
        let head = &self.store[at + vnet::LEN..at + slot.len];
        let h = &item.seg;
        let t = h.ip_len;
        let ip_ok = if s.v6 {
            head[..4] == p[..4] && head[7] == p[7]
        } else {
            let id = u16::from_be_bytes([head[4], head[5]]).wrapping_add(item.segs);
            head[1] == p[1] && head[6..9] == p[6..9] && p[4..6] == id.to_be_bytes()
        };
        let ip_len = slot.len - vnet::LEN + s.payload;
        if !ip_ok
            || s.ip_len != h.ip_len
            || s.l4_len != h.l4_len
            || s.udp != h.udp
            || (!s.udp && s.seq != item.next_seq)
            || s.payload > h.payload
            || item.segs >= MAX_SEGMENTS
            || ip_len > 65535
            || slot.len + s.payload > self.frame_cap
            // TCP: ACK number and data offset; window and urgent pointer; options.
            || (!s.udp
                && (head[t + 8..t + 13] != p[t + 8..t + 13]
                    || head[t + 14..t + 16] != p[t + 14..t + 16]
                    || head[t + 18..t + h.l4_len] != p[t + 18..t + s.l4_len]))
        {
            return false;
        }
        let frame = &mut self.store[at..at + slot.len + s.payload];
        // The payload goes in behind the frame's end, which moves only if it verifies.
        if !copy_checked(&mut frame[slot.len..], p, s, s.ip_len + s.l4_len) {
            return false;
        }
        item.segs += 1;
        item.next_seq = s.seq.wrapping_add(s.payload as u32);
        item.closed = s.payload < h.payload || s.psh;
        if s.psh {
            frame[vnet::LEN + t + 13] |= TCP_PSH;
        }
        self.frames[i] = Slot {
            len: slot.len + s.payload,
            tcp: Some(item),
            stale: true,
        };
        true
    }

    /// Write frame `i`'s headers for what it holds, once, when it is read (not on every
    /// segment appended): the IP length (and IPv4 header checksum), UDP length, the
    /// transport checksum field's pseudo-header sum and the virtio header.
    fn finish(&mut self, i: usize) {
        let Some(slot) = self.frames.get_mut(i) else {
            return;
        };
        let (true, Some(item)) = (slot.stale, slot.tcp) else {
            return;
        };
        slot.stale = false;
        let h = item.seg;
        let t = h.ip_len;
        let at = i * self.frame_cap;
        let frame = &mut self.store[at..at + slot.len];
        let ip_len = slot.len - vnet::LEN;
        let pkt = &mut frame[vnet::LEN..];
        if h.v6 {
            let n = u16::try_from(ip_len - 40).unwrap_or(u16::MAX);
            pkt[4..6].copy_from_slice(&n.to_be_bytes());
        } else {
            let n = u16::try_from(ip_len).unwrap_or(u16::MAX);
            pkt[2..4].copy_from_slice(&n.to_be_bytes());
            pkt[10..12].fill(0);
            let c = checksum::checksum(&pkt[..t], 0);
            pkt[10..12].copy_from_slice(&c.to_be_bytes());
        }
        // The checksum field holds the pseudo-header sum; the kernel adds the rest.
        let (proto, csum_offset, gso_type) = match (h.udp, h.v6) {
            (true, _) => (PROTO_UDP, 6, vnet::GSO_UDP_L4),
            (false, true) => (PROTO_TCP, 16, vnet::GSO_TCPV6),
            (false, false) => (PROTO_TCP, 16, vnet::GSO_TCPV4),
        };
        if h.udp {
            // The UDP length covers the whole superframe (as wireguard-go writes it).
            let n = u16::try_from(ip_len - t).unwrap_or(u16::MAX);
            pkt[t + 4..t + 6].copy_from_slice(&n.to_be_bytes());
        }
        let partial = pseudo_sum(pkt, h.v6, proto, ip_len - t);
        let at = t + usize::from(csum_offset);
        pkt[at..at + 2].copy_from_slice(&partial.to_be_bytes());
        let hdr = VnetHdr {
            flags: vnet::F_NEEDS_CSUM,
            gso_type,
            hdr_len: u16::try_from(t + h.l4_len).unwrap_or(u16::MAX),
            gso_size: u16::try_from(h.payload).unwrap_or(u16::MAX),
            csum_start: u16::try_from(t).unwrap_or(u16::MAX),
            csum_offset,
        };
        // The frame is LEN bytes or more: emit cannot fail.
        let _ = hdr.emit(frame);
    }
}

/// The TCP segment (or, with `udp`, UDP datagram) `p` is, if it may be merged at all.
fn candidate(p: &[u8], udp: bool) -> Option<Seg> {
    let version = p.first()? >> 4;
    let (v6, ip_len, proto) = match version {
        4 => {
            if p.len() < 28
                || p[0] != 0x45
                || usize::from(u16::from_be_bytes([p[2], p[3]])) != p.len()
                || p[6] & 0x3f != 0
                || p[7] != 0
            {
                return None;
            }
            (false, 20, p[9])
        }
        6 => {
            if p.len() < 48 || usize::from(u16::from_be_bytes([p[4], p[5]])) != p.len() - 40 {
                return None;
            }
            (true, 40, p[6])
        }
        _ => return None,
    };
    let t = ip_len;
    if proto == PROTO_UDP && udp {
        // The UDP length is the packet's; a zero checksum ("none") is not merged.
        if p.len() <= t + 8
            || usize::from(u16::from_be_bytes([p[t + 4], p[t + 5]])) != p.len() - t
            || p[t + 6..t + 8] == [0, 0]
        {
            return None;
        }
        return Some(Seg {
            v6,
            udp: true,
            ip_len,
            l4_len: 8,
            seq: 0,
            psh: false,
            payload: p.len() - t - 8,
        });
    }
    if proto != PROTO_TCP || p.len() < t + 20 {
        return None;
    }
    let l4_len = usize::from(p[t + 12] >> 4) * 4;
    if l4_len < 20 || t + l4_len >= p.len() {
        return None;
    }
    let flags = p[t + 13];
    if flags != TCP_ACK && flags != TCP_ACK | TCP_PSH {
        return None;
    }
    Some(Seg {
        v6,
        udp: false,
        ip_len,
        l4_len,
        seq: u32::from_be_bytes([p[t + 4], p[t + 5], p[t + 6], p[t + 7]]),
        psh: flags & TCP_PSH != 0,
        payload: p.len() - t - l4_len,
    })
}

/// For any TCP or UDP packet with its ports in place: IPv6 or not, UDP or not, and its
/// IP header length.
fn flow_of(p: &[u8]) -> Option<(bool, bool, usize)> {
    let (v6, t, proto) = match p.first()? >> 4 {
        4 => (false, usize::from(p[0] & 0x0f) * 4, *p.get(9)?),
        6 => (true, 40, *p.get(6)?),
        _ => return None,
    };
    let udp = match proto {
        PROTO_TCP => false,
        PROTO_UDP => true,
        _ => return None,
    };
    (t >= 20 && p.len() >= t + 4).then_some((v6, udp, t))
}

/// Copy `p[from..]` (`from`: 0, or where segment `s`'s payload starts) into `dst` and
/// say whether `p`'s IPv4 header checksum and TCP/UDP checksum check out: what is copied
/// is read once, summed as it is copied.
fn copy_checked(dst: &mut [u8], p: &[u8], s: &Seg, from: usize) -> bool {
    let t = s.ip_len;
    let proto = if s.udp { PROTO_UDP } else { PROTO_TCP };
    let pseudo = pseudo_sum(p, s.v6, proto, p.len() - t);
    let transport = if from == 0 {
        dst[..t].copy_from_slice(&p[..t]);
        checksum::copy_and_sum(&mut dst[t..], &p[t..], pseudo)
    } else {
        // The transport header is a whole number of 16-bit words: the sums add up.
        let head = checksum::sum(&p[t..from], pseudo);
        checksum::add(head, checksum::copy_and_sum(dst, &p[from..], 0))
    };
    (s.v6 || checksum::sum(&p[..t], 0) == 0xffff) && transport == 0xffff
}
