//! Checked views over the IP, TCP and UDP headers of the packets braid carries, in the
//! style of smoltcp's `wire::ipv4::Packet<T>`: zero-copy, over any `T: AsRef<[u8]>`, with
//! every length the accessors rely on checked once, in `new_checked`, so the accessors
//! index without further checks and never panic.
//!
//! | view | `new_checked` requires |
//! | --- | --- |
//! | [`IpPacket`] | a version nibble of 4 or 6, then what that version's view requires |
//! | [`Ipv4Packet`] | version 4, 20 bytes, IHL ≥ 5 and the whole header (IHL × 4 bytes) |
//! | [`Ipv6Packet`] | version 6 and the 40-byte fixed header |
//! | [`TcpPacket`] | 20 bytes, data offset ≥ 5 and the whole header (options included) |
//! | [`Ports`] | the 4-byte port pair that starts TCP, UDP, UDP-Lite and SCTP headers |
//!
//! The length fields inside the packet (IPv4 total length, IPv6 payload length) are read
//! but not applied: [`Ipv4Packet::payload`] and [`Ipv6Packet::payload`] run to the end of
//! the buffer, and each user decides what a length that disagrees with the buffer means.
//!
//! These are the views for braid's own decisions (the shaper's classifier, the redundant
//! retransmission check, the schedulers, fragment groups, MSS clamping). The bonding
//! hashes use [`crate::flow`], which mirrors the kernel's dissectors quirk for quirk.

use core::fmt;

use crate::flow::proto;

/// Extension headers [`Ipv6Packet::upper_layer`] walks before it gives up.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// Why bytes are not the header a view was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpError {
    /// The buffer ends inside the header.
    Truncated,
    /// The version nibble is not the view's (or, for [`IpPacket`], neither 4 nor 6).
    Version(u8),
    /// A header length field below the header's fixed part (IPv4 IHL < 5, TCP data
    /// offset < 5).
    HeaderLen,
}

impl fmt::Display for IpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpError::Truncated => f.write_str("IP packet truncated"),
            IpError::Version(v) => write!(f, "IP version {v}"),
            IpError::HeaderLen => f.write_str("header length below the fixed header"),
        }
    }
}

impl std::error::Error for IpError {}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// An IPv4 or an IPv6 packet, by its version nibble.
#[derive(Clone, Copy, Debug)]
pub enum IpPacket<T: AsRef<[u8]>> {
    /// Version 4.
    V4(Ipv4Packet<T>),
    /// Version 6.
    V6(Ipv6Packet<T>),
}

impl<T: AsRef<[u8]>> IpPacket<T> {
    /// The view for the packet's version; errors as [`Ipv4Packet::new_checked`] and
    /// [`Ipv6Packet::new_checked`], or [`IpError::Truncated`] for an empty buffer.
    pub fn new_checked(buffer: T) -> Result<Self, IpError> {
        match buffer.as_ref().first().map(|b| b >> 4) {
            None => Err(IpError::Truncated),
            Some(4) => Ipv4Packet::new_checked(buffer).map(IpPacket::V4),
            Some(6) => Ipv6Packet::new_checked(buffer).map(IpPacket::V6),
            Some(v) => Err(IpError::Version(v)),
        }
    }
}

/// A view over an IPv4 header (RFC 791). See the module documentation.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Length of the header without options.
    pub const MIN_HEADER_LEN: usize = 20;

    /// Checks, in this order: 20 bytes ([`IpError::Truncated`]), version 4
    /// ([`IpError::Version`]), IHL ≥ 5 ([`IpError::HeaderLen`]), the whole header with
    /// its options ([`IpError::Truncated`]).
    pub fn new_checked(buffer: T) -> Result<Self, IpError> {
        let b = buffer.as_ref();
        if b.len() < Self::MIN_HEADER_LEN {
            return Err(IpError::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(IpError::Version(b[0] >> 4));
        }
        let header_len = usize::from(b[0] & 0x0f) * 4;
        if header_len < Self::MIN_HEADER_LEN {
            return Err(IpError::HeaderLen);
        }
        if b.len() < header_len {
            return Err(IpError::Truncated);
        }
        Ok(Self { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The header's length in bytes (IHL × 4, 20 to 60).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }

    /// The type-of-service byte (DSCP and ECN).
    pub fn tos(&self) -> u8 {
        self.b()[1]
    }

    /// The total-length field (not checked against the buffer).
    pub fn total_len(&self) -> u16 {
        be16(self.b(), 2)
    }

    /// The identification field.
    pub fn ident(&self) -> u16 {
        be16(self.b(), 4)
    }

    /// The "more fragments" flag.
    pub fn more_frags(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }

    /// The fragment offset, in units of 8 bytes.
    pub fn frag_offset(&self) -> u16 {
        be16(self.b(), 6) & 0x1fff
    }

    /// True for a fragment: more fragments follow, or the offset is not zero.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// The protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }

    /// The source address, in network byte order.
    pub fn src_addr(&self) -> [u8; 4] {
        let b = self.b();
        [b[12], b[13], b[14], b[15]]
    }

    /// The destination address, in network byte order.
    pub fn dst_addr(&self) -> [u8; 4] {
        let b = self.b();
        [b[16], b[17], b[18], b[19]]
    }

    /// Source and destination addresses as they are on the wire (8 bytes).
    pub fn addr_bytes(&self) -> &[u8] {
        &self.b()[12..20]
    }

    /// The bytes after the header (options included), up to the end of the buffer.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }

    /// The buffer the view is over.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// A view over an IPv6 fixed header (RFC 8200) and, through
/// [`upper_layer`](Self::upper_layer), its extension header chain.
#[derive(Clone, Copy, Debug)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// Where an IPv6 packet's extension header chain ends: what
/// [`Ipv6Packet::upper_layer`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpperLayer {
    /// The upper-layer protocol; an extension header's number when the chain is longer
    /// than [`MAX_EXTENSION_HEADERS`] (see [`ended`](Self::ended)).
    pub protocol: u8,
    /// Where that header starts in the packet (it may lie beyond the buffer's end).
    pub offset: usize,
    /// False when a Fragment header has a non-zero offset: the upper-layer header is in
    /// the datagram's first fragment, not in this one.
    pub first_fragment: bool,
    /// False when the walk stopped at [`MAX_EXTENSION_HEADERS`] with more to go.
    pub ended: bool,
}

impl UpperLayer {
    /// True when the upper-layer header (and so its ports) is in this packet: the chain
    /// ended and this is not a later fragment.
    pub fn has_header(&self) -> bool {
        self.ended && self.first_fragment
    }
}

/// True for the extension headers [`Ipv6Packet::upper_layer`] walks: hop-by-hop options,
/// routing, fragment and destination options.
pub fn is_extension_header(next_header: u8) -> bool {
    matches!(
        next_header,
        proto::HOPOPTS | proto::ROUTING | proto::FRAGMENT | proto::DSTOPTS
    )
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Length of the fixed header.
    pub const HEADER_LEN: usize = 40;

    /// Checks the 40-byte fixed header ([`IpError::Truncated`]), then version 6
    /// ([`IpError::Version`]).
    pub fn new_checked(buffer: T) -> Result<Self, IpError> {
        let b = buffer.as_ref();
        if b.len() < Self::HEADER_LEN {
            return Err(IpError::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(IpError::Version(b[0] >> 4));
        }
        Ok(Self { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        let b = self.b();
        (b[0] << 4) | (b[1] >> 4)
    }

    /// The payload-length field: bytes after the fixed header (not checked against the
    /// buffer).
    pub fn payload_len(&self) -> u16 {
        be16(self.b(), 4)
    }

    /// The next-header field of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }

    /// The source address, in network byte order.
    pub fn src_addr(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[8..24]);
        a
    }

    /// The destination address, in network byte order.
    pub fn dst_addr(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[24..40]);
        a
    }

    /// Source and destination addresses as they are on the wire (32 bytes).
    pub fn addr_bytes(&self) -> &[u8] {
        &self.b()[8..40]
    }

    /// The bytes after the fixed header, up to the end of the buffer.
    pub fn payload(&self) -> &[u8] {
        &self.b()[Self::HEADER_LEN..]
    }

    /// The Fragment header, when it is the first extension header (where the kernel puts
    /// it on the fragments it sends).
    pub fn fragment_header(&self) -> Option<FragmentHeader<&[u8]>> {
        (self.next_header() == proto::FRAGMENT)
            .then(|| FragmentHeader::new_checked(self.payload()).ok())
            .flatten()
    }

    /// Walks the extension headers (hop-by-hop, routing and destination options:
    /// `(length + 1) × 8` bytes; fragment: 8 bytes), at most [`MAX_EXTENSION_HEADERS`],
    /// to the upper-layer header. [`IpError::Truncated`] when the buffer ends inside the
    /// fields the walk reads (an extension header's next-header and length bytes, a
    /// Fragment header's offset); an upper-layer offset beyond the buffer is not an error.
    pub fn upper_layer(&self) -> Result<UpperLayer, IpError> {
        let b = self.b();
        let byte = |at: usize| b.get(at).copied().ok_or(IpError::Truncated);
        let mut next = self.next_header();
        let mut at = Self::HEADER_LEN;
        let mut first_fragment = true;
        for _ in 0..MAX_EXTENSION_HEADERS {
            match next {
                proto::HOPOPTS | proto::ROUTING | proto::DSTOPTS => {
                    let len = (usize::from(byte(at + 1)?) + 1) * 8;
                    next = byte(at)?;
                    at += len;
                }
                proto::FRAGMENT => {
                    next = byte(at)?;
                    let offset = u16::from_be_bytes([byte(at + 2)?, byte(at + 3)?]) >> 3;
                    if offset != 0 {
                        first_fragment = false;
                    }
                    at += 8;
                }
                _ => break,
            }
        }
        Ok(UpperLayer {
            protocol: next,
            offset: at,
            first_fragment,
            ended: !is_extension_header(next),
        })
    }

    /// The buffer the view is over.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// A view over an IPv6 Fragment header (8 bytes, RFC 8200 sec. 4.5).
#[derive(Clone, Copy, Debug)]
pub struct FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FragmentHeader<T> {
    /// Length of the header.
    pub const LEN: usize = 8;

    /// Checks that the 8 bytes are there ([`IpError::Truncated`]).
    pub fn new_checked(buffer: T) -> Result<Self, IpError> {
        if buffer.as_ref().len() < Self::LEN {
            return Err(IpError::Truncated);
        }
        Ok(Self { buffer })
    }

    /// The protocol of the fragmented part.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The fragment offset, in units of 8 bytes.
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), 2) >> 3
    }

    /// The "more fragments" flag.
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[3] & 1 != 0
    }

    /// The identification.
    pub fn ident(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }
}

/// True for the protocols whose header starts with a source and a destination port:
/// TCP, UDP, UDP-Lite and SCTP.
pub fn has_ports(protocol: u8) -> bool {
    matches!(
        protocol,
        proto::TCP | proto::UDP | proto::UDPLITE | proto::SCTP
    )
}

/// A view over the source and destination ports that start a TCP, UDP, UDP-Lite or SCTP
/// header: only those 4 bytes are required.
#[derive(Clone, Copy, Debug)]
pub struct Ports<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ports<T> {
    /// Length of the port pair.
    pub const LEN: usize = 4;

    /// Checks that the 4 bytes are there ([`IpError::Truncated`]).
    pub fn new_checked(buffer: T) -> Result<Self, IpError> {
        if buffer.as_ref().len() < Self::LEN {
            return Err(IpError::Truncated);
        }
        Ok(Self { buffer })
    }

    /// The source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
}

/// A view over a TCP header (RFC 9293) and the segment's data.
#[derive(Clone, Copy, Debug)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

/// TCP flag bits (the header's byte 13).
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Length of the header without options.
    pub const MIN_HEADER_LEN: usize = 20;

    /// Checks, in this order: 20 bytes ([`IpError::Truncated`]), data offset ≥ 5
    /// ([`IpError::HeaderLen`]), the whole header with its options
    /// ([`IpError::Truncated`]).
    pub fn new_checked(buffer: T) -> Result<Self, IpError> {
        let b = buffer.as_ref();
        if b.len() < Self::MIN_HEADER_LEN {
            return Err(IpError::Truncated);
        }
        let header_len = usize::from(b[12] >> 4) * 4;
        if header_len < Self::MIN_HEADER_LEN {
            return Err(IpError::HeaderLen);
        }
        if b.len() < header_len {
            return Err(IpError::Truncated);
        }
        Ok(Self { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The source port.
    pub fn src_port(&self) -> u16 {
        be16(self.b(), 0)
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), 2)
    }

    /// The sequence number.
    pub fn seq_number(&self) -> u32 {
        be32(self.b(), 4)
    }

    /// The header's length in bytes (data offset × 4, 20 to 60).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[12] >> 4) * 4
    }

    /// The flag byte (see [`tcp_flags`]).
    pub fn flags(&self) -> u8 {
        self.b()[13]
    }

    /// The FIN flag.
    pub fn fin(&self) -> bool {
        self.flags() & tcp_flags::FIN != 0
    }

    /// The SYN flag.
    pub fn syn(&self) -> bool {
        self.flags() & tcp_flags::SYN != 0
    }

    /// The RST flag.
    pub fn rst(&self) -> bool {
        self.flags() & tcp_flags::RST != 0
    }

    /// The options, between the fixed header and the data.
    pub fn options(&self) -> &[u8] {
        &self.b()[Self::MIN_HEADER_LEN..self.header_len()]
    }

    /// The bytes after the header, up to the end of the buffer.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests;
