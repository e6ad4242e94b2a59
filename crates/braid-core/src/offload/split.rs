//! The read direction: what one read from an offloaded TUN holds, as ordinary packets.
//!
//! A read returns a [`vnet::VnetHdr`](super::vnet::VnetHdr) and then either one packet
//! (maybe with its checksum left to do, `F_NEEDS_CSUM`) or a superframe of up to 64 KB:
//! one IP and TCP (or UDP) header and a payload to cut every `gso_size` bytes. This file
//! does what the NIC would have done, as Linux's `tcp_gso_segment`/`__udp_gso_segment`
//! and wireguard-go's `handleVirtioRead`/`gsoSplit` do: each segment gets the headers,
//! its IPv4 total length, ID (the first's plus the segment's index) and header checksum
//! or its IPv6 payload length, its TCP sequence number (FIN and PSH only on the last
//! segment, CWR only on the first) or its UDP length, and a complete transport checksum.
//!
//! The superframe is only read; segments are written into the caller's buffers. Nothing
//! here allocates.

use super::checksum;
use super::vnet::{self, Gso, VnetError, VnetHdr};
use super::{PROTO_TCP, PROTO_UDP};

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Why a read could not be turned into packets. Every one is a drop to count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitError {
    /// The virtio header itself is bad.
    Vnet(VnetError),
    /// `csum_start`/`csum_offset` point outside the packet (or the checksum field does
    /// not fit).
    ChecksumOutside,
    /// The IP version nibble is neither 4 nor 6, or disagrees with the GSO type.
    IpVersion(u8),
    /// `csum_start` is not where the transport header can start (the IPv4 header length,
    /// at least 40 for IPv6), or the IP protocol is not the GSO type's.
    BadHeaders,
    /// The TCP data offset is under 5 words or runs past the packet.
    BadTcpHeaderLen,
    /// `csum_offset` is not the TCP (16) or UDP (6) checksum field.
    BadChecksumOffset,
    /// `gso_size` is 0.
    ZeroGsoSize,
    /// A superframe with no payload after its headers.
    NoPayload,
    /// More than 65535 bytes in one segment's IP packet.
    TooLong,
    /// More segments than the caller gave buffers for.
    TooManySegments,
    /// A buffer too small for the packet or segment written into it.
    BufferTooSmall,
}

impl From<VnetError> for SplitError {
    fn from(e: VnetError) -> Self {
        SplitError::Vnet(e)
    }
}

impl core::fmt::Display for SplitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SplitError::Vnet(e) => e.fmt(f),
            SplitError::ChecksumOutside => write!(f, "checksum start/offset outside the packet"),
            SplitError::IpVersion(v) => write!(f, "IP version {v} does not match the GSO type"),
            SplitError::BadHeaders => write!(f, "checksum start is not the transport header"),
            SplitError::BadTcpHeaderLen => write!(f, "bad TCP header length"),
            SplitError::BadChecksumOffset => {
                write!(f, "checksum offset is not the TCP/UDP checksum")
            }
            SplitError::ZeroGsoSize => write!(f, "GSO size 0"),
            SplitError::NoPayload => write!(f, "superframe without payload"),
            SplitError::TooLong => write!(f, "segment longer than 65535 bytes"),
            SplitError::TooManySegments => write!(f, "more segments than buffers"),
            SplitError::BufferTooSmall => write!(f, "buffer too small for the packet"),
        }
    }
}

/// What one read from the TUN held.
#[derive(Debug)]
pub enum Frame<'a> {
    /// One ordinary IP packet (its checksum completed in place if it was left to do).
    Packet(&'a [u8]),
    /// A superframe: take its segments with [`Segments::next_into`].
    Segments(Segments<'a>),
}

/// Turn the bytes of one TUN read (`buf`, virtio header first) into a [`Frame`].
/// A packet whose checksum was left to do is completed in place, so `buf` is mutable.
pub fn read_frame(buf: &mut [u8]) -> Result<Frame<'_>, SplitError> {
    let hdr = VnetHdr::parse(buf)?;
    let pkt = &mut buf[vnet::LEN..];
    match hdr.gso()? {
        Gso::None => {
            if hdr.needs_csum() {
                complete_checksum(pkt, hdr.csum_start, hdr.csum_offset)?;
            }
            Ok(Frame::Packet(pkt))
        }
        gso => Segments::new(hdr, gso, pkt).map(Frame::Segments),
    }
}

/// Finish a checksum the kernel left partial (`F_NEEDS_CSUM` without GSO): sum from
/// `start` to the end, with the field at `start + offset` (which holds the
/// pseudo-header sum) as the initial value, and store the result there.
pub fn complete_checksum(pkt: &mut [u8], start: u16, offset: u16) -> Result<(), SplitError> {
    let start = usize::from(start);
    let at = start + usize::from(offset);
    if at + 2 > pkt.len() {
        return Err(SplitError::ChecksumOutside);
    }
    let initial = u16::from_be_bytes([pkt[at], pkt[at + 1]]);
    pkt[at..at + 2].fill(0);
    let c = checksum::checksum(&pkt[start..], initial);
    pkt[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// The segments of one superframe, produced one at a time into the caller's buffer.
#[derive(Debug)]
pub struct Segments<'a> {
    frame: &'a [u8],
    v6: bool,
    tcp: bool,
    /// Bytes of IP header (the virtio `csum_start`).
    ip_len: usize,
    /// Bytes of IP and transport header.
    hdr_len: usize,
    gso_size: usize,
    /// The next segment's index and where its payload starts.
    index: usize,
    at: usize,
}

impl<'a> Segments<'a> {
    fn new(hdr: VnetHdr, gso: Gso, frame: &'a [u8]) -> Result<Self, SplitError> {
        let version = frame.first().map_or(0, |b| b >> 4);
        let v6 = match (version, gso) {
            (4, Gso::TcpV4 | Gso::UdpL4) => false,
            (6, Gso::TcpV6 | Gso::UdpL4) => true,
            _ => return Err(SplitError::IpVersion(version)),
        };
        let tcp = gso != Gso::UdpL4;
        let ip_len = usize::from(hdr.csum_start);
        // The IP header: csum_start must be where the transport header starts.
        if v6 {
            if ip_len < 40 || frame.len() < ip_len {
                return Err(SplitError::BadHeaders);
            }
            if ip_len == 40 && frame[6] != if tcp { PROTO_TCP } else { PROTO_UDP } {
                return Err(SplitError::BadHeaders);
            }
        } else {
            if frame.len() < 20
                || ip_len != usize::from(frame[0] & 0x0f) * 4
                || ip_len < 20
                || frame[9] != if tcp { PROTO_TCP } else { PROTO_UDP }
            {
                return Err(SplitError::BadHeaders);
            }
        }
        if usize::from(hdr.csum_offset) != if tcp { 16 } else { 6 } {
            return Err(SplitError::BadChecksumOffset);
        }
        // Do not trust hdr_len (it can be the whole first packet on a forwarding path, as
        // wireguard-go notes); take it from the transport header.
        let hdr_len = if tcp {
            let off = frame.get(ip_len + 12).ok_or(SplitError::BadTcpHeaderLen)?;
            let tcp_len = usize::from(off >> 4) * 4;
            if tcp_len < 20 {
                return Err(SplitError::BadTcpHeaderLen);
            }
            ip_len + tcp_len
        } else {
            ip_len + 8
        };
        if hdr_len > frame.len() {
            return Err(if tcp {
                SplitError::BadTcpHeaderLen
            } else {
                SplitError::ChecksumOutside
            });
        }
        if hdr.gso_size == 0 {
            return Err(SplitError::ZeroGsoSize);
        }
        if hdr_len == frame.len() {
            return Err(SplitError::NoPayload);
        }
        let gso_size = usize::from(hdr.gso_size);
        if hdr_len + gso_size.min(frame.len() - hdr_len) > 65535 {
            return Err(SplitError::TooLong);
        }
        Ok(Segments {
            frame,
            v6,
            tcp,
            ip_len,
            hdr_len,
            gso_size,
            index: 0,
            at: hdr_len,
        })
    }

    /// How many segments the superframe holds in all.
    pub fn count(&self) -> usize {
        (self.frame.len() - self.hdr_len).div_ceil(self.gso_size)
    }

    /// The largest segment's length (IP header included).
    pub fn segment_len(&self) -> usize {
        self.hdr_len + self.gso_size.min(self.frame.len() - self.hdr_len)
    }

    /// True for IPv6.
    pub fn is_v6(&self) -> bool {
        self.v6
    }

    /// Write the next segment into `out`: its length, or None when all were written.
    /// `out` must hold [`Segments::segment_len`] bytes.
    pub fn next_into(&mut self, out: &mut [u8]) -> Result<Option<usize>, SplitError> {
        let frame = self.frame;
        if self.at >= frame.len() {
            return Ok(None);
        }
        let end = (self.at + self.gso_size).min(frame.len());
        let last = end == frame.len();
        let data = end - self.at;
        let total = self.hdr_len + data;
        let out = out.get_mut(..total).ok_or(SplitError::BufferTooSmall)?;
        out[..self.hdr_len].copy_from_slice(&frame[..self.hdr_len]);
        // The payload is read once: copied and summed for the checksum in one pass.
        let payload_sum = checksum::copy_and_sum(&mut out[self.hdr_len..], &frame[self.at..end], 0);
        let i = self.index;
        // IP header.
        let total16 = u16::try_from(total).map_err(|_| SplitError::TooLong)?;
        if self.v6 {
            let payload = u16::try_from(total - 40).map_err(|_| SplitError::TooLong)?;
            out[4..6].copy_from_slice(&payload.to_be_bytes());
        } else {
            out[2..4].copy_from_slice(&total16.to_be_bytes());
            // Truncation intended: IDs wrap.
            let id = u16::from_be_bytes([out[4], out[5]]).wrapping_add(i as u16);
            out[4..6].copy_from_slice(&id.to_be_bytes());
            out[10..12].fill(0);
            let c = checksum::checksum(&out[..self.ip_len], 0);
            out[10..12].copy_from_slice(&c.to_be_bytes());
        }
        // Transport header.
        let t = self.ip_len;
        let len = total - t;
        let (proto, csum_at) = if self.tcp {
            let seq = u32::from_be_bytes([out[t + 4], out[t + 5], out[t + 6], out[t + 7]]);
            // Truncation intended: sequence numbers wrap.
            let seq = seq.wrapping_add((self.at - self.hdr_len) as u32);
            out[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
            if !last {
                out[t + 13] &= !(TCP_FIN | TCP_PSH);
            }
            if i > 0 {
                out[t + 13] &= !TCP_CWR;
            }
            (PROTO_TCP, t + 16)
        } else {
            let l = u16::try_from(len).map_err(|_| SplitError::TooLong)?;
            out[t + 4..t + 6].copy_from_slice(&l.to_be_bytes());
            (PROTO_UDP, t + 6)
        };
        out[csum_at..csum_at + 2].fill(0);
        let pseudo = pseudo_sum(out, self.v6, proto, len);
        // The transport header is a whole number of 16-bit words (TCP's data offset
        // counts words of 4 bytes, UDP's is 8): its sum and the payload's add up.
        let head = checksum::sum(&out[t..self.hdr_len], pseudo);
        let mut c = !checksum::add(head, payload_sum);
        if !self.tcp && c == 0 {
            // UDP: a zero checksum means "none"; send its other form.
            c = 0xffff;
        }
        out[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
        self.index += 1;
        self.at = end;
        Ok(Some(total))
    }
}

/// The pseudo-header sum of the packet `p` (IPv4 or IPv6 header at 0) for `len` bytes of
/// transport.
pub(super) fn pseudo_sum(p: &[u8], v6: bool, proto: u8, len: usize) -> u16 {
    if v6 {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&p[8..24]);
        d.copy_from_slice(&p[24..40]);
        checksum::pseudo_v6(&s, &d, proto, u32::try_from(len).unwrap_or(u32::MAX))
    } else {
        let mut s = [0u8; 4];
        let mut d = [0u8; 4];
        s.copy_from_slice(&p[12..16]);
        d.copy_from_slice(&p[16..20]);
        checksum::pseudo_v4(&s, &d, proto, u16::try_from(len).unwrap_or(u16::MAX))
    }
}

/// Split one TUN read into `bufs` (one packet each, lengths in `sizes`): the number of
/// packets. A plain packet is copied into `bufs[0]`. Segments already written stay
/// written when an error comes.
pub fn split_into<B: AsMut<[u8]>>(
    buf: &mut [u8],
    bufs: &mut [B],
    sizes: &mut [usize],
) -> Result<usize, SplitError> {
    let room = bufs.len().min(sizes.len());
    match read_frame(buf)? {
        Frame::Packet(p) => {
            let (Some(out), Some(size)) = (bufs.first_mut(), sizes.first_mut()) else {
                return Err(SplitError::TooManySegments);
            };
            out.as_mut()
                .get_mut(..p.len())
                .ok_or(SplitError::BufferTooSmall)?
                .copy_from_slice(p);
            *size = p.len();
            Ok(1)
        }
        Frame::Segments(mut segs) => {
            if segs.count() > room {
                return Err(SplitError::TooManySegments);
            }
            let count = segs.count();
            for (out, size) in bufs.iter_mut().zip(sizes.iter_mut()).take(count) {
                *size = segs.next_into(out.as_mut())?.unwrap_or(0);
            }
            Ok(count)
        }
    }
}
