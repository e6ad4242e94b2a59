//! The tunnel datagram: a checked view over bytes ([`Packet`]) and a parsed form
//! ([`Header`] + [`Message`]), in the style of smoltcp's `wire` module.
//!
//! Every datagram starts with an 8-byte common header (network byte order):
//!
//! ```text
//!  0       1       2       3       4       5       6       7
//! +-------+-------+-------+-------+-------+-------+-------+-------+
//! |version| type  |    path id    |   timestamp (sender µs, wraps) |
//! +-------+-------+-------+-------+-------+-------+-------+-------+
//! ```
//!
//! followed by a body that depends on `type`:
//!
//! | type | name | body (after the common header) | total |
//! | --- | --- | --- | --- |
//! | 0 | [`Message::Data`] | `seq u64 \| path_seq u32 \| payload` | 20 + payload |
//! | 1 | [`Message::Probe`] | `probe_seq u32 \| epoch u64` (epoch optional) | 12 or 20 |
//! | 2 | [`Message::ProbeAck`] | `probe_seq u32 \| echo_timestamp u32 \| hold_us u32` | 20 |
//! | 4 | [`Message::PinnedData`] | as `Data` | 20 + payload |
//! | 5 | [`Message::DataPart`] | `seq u64 \| path_seq u32 \| part u8 \| parts u8 \| kind u8 \| payload part` | 23 + part |
//! | 3 | [`Message::Ack`] | `highest_path_seq u32 \| rx_bytes u64 \| rx_packets u64 \| echo_timestamp u32 \| hold_us u32` | 36 |
//!
//! Control messages (every type but `Data`) may carry trailing bytes; this version ignores
//! them so a later one can extend a message without breaking this one. A `Data` payload is
//! everything after the data header. Durations travel as `u32` microseconds and saturate at
//! `u32::MAX` (about 71 minutes).
//!
//! The version byte is the first byte of every datagram, in the clear. [`VERSION`] (1) is
//! this plaintext format; [`SEALED_VERSION`] (4) is the AEAD envelope (`crypto::envelope`)
//! into which a version-1 datagram is folded ([`folded`]: its version and type become
//! the envelope's kind byte, the path id one byte, `seq` its low 32 bits). Version 2 was
//! the first sealed format (a whole version-1 datagram inside a 32-byte envelope) and is
//! refused. See `docs/wire.md`. Version 0 is never used, so a zeroed buffer is never a
//! valid datagram.
//!
//! Nothing here panics on any input: short, garbage or unknown input is a [`WireError`].

use core::time::Duration;

pub mod folded;
pub mod ip;

/// Plain mode's tag header (`docs/wire.md`, "Plain mode tags"), in front of a datagram.
pub use crate::plain::{TAGGED_VERSION, TAG_HEADER_LEN};

/// Wire version this build speaks.
pub const VERSION: u8 = 1;
/// The sealed format (`crypto::envelope`): a datagram starting with this byte is an AEAD
/// envelope carrying a [`folded`] version-1 datagram. [`parse`] rejects it as
/// [`WireError::UnknownVersion`] (it is opened first).
pub const SEALED_VERSION: u8 = 4;
/// Bytes of the common header.
pub const HEADER_LEN: usize = 8;
/// Bytes of a data header (common header + bond seq + path seq).
pub const DATA_HEADER_LEN: usize = 20;
/// Bytes of a data part's header (data header + part, parts, kind).
pub const DATA_PART_HEADER_LEN: usize = 23;
/// Bytes of a probe without the sender's epoch (the shortest valid probe).
pub const PROBE_LEN: usize = 12;
/// Bytes of a probe carrying the sender's epoch (what this version sends).
pub const PROBE_EPOCH_LEN: usize = 20;
/// Bytes of a probe ack.
pub const PROBE_ACK_LEN: usize = 20;
/// Bytes of an ack.
pub const ACK_LEN: usize = 36;

/// Why a datagram was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than its type needs.
    Truncated,
    /// A version this build does not speak.
    UnknownVersion(u8),
    /// A message type this build does not know.
    UnknownType(u8),
    /// The output buffer is too small.
    BufferTooSmall,
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WireError::Truncated => f.write_str("datagram truncated"),
            WireError::UnknownVersion(v) => write!(f, "unknown wire version {v}"),
            WireError::UnknownType(t) => write!(f, "unknown message type {t}"),
            WireError::BufferTooSmall => f.write_str("output buffer too small"),
        }
    }
}

impl std::error::Error for WireError {}

/// The common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The sender's id for the path the datagram was sent on.
    pub path: u16,
    /// Sender clock in µs, low 32 bits.
    pub timestamp: u32,
}

/// Receiver feedback about one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    /// Highest per-path sequence number received on the path.
    pub highest_path_seq: u32,
    /// Total payload+header bytes received on the path since it started.
    pub rx_bytes: u64,
    /// Total data datagrams received on the path since it started.
    pub rx_packets: u64,
    /// The timestamp of the data datagram carrying `highest_path_seq`.
    pub echo_timestamp: u32,
    /// Time between receiving that datagram and sending this ack.
    pub hold: Duration,
}

/// A parsed datagram; `Data` borrows its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// An IP packet from the peer's TUN.
    Data {
        /// Bond-wide sequence number.
        seq: u64,
        /// Per-path sequence number.
        path_seq: u32,
        /// The IP packet.
        payload: &'a [u8],
    },
    /// An IP packet whose flow the sender keeps on this one path (xor, active-backup):
    /// the path keeps the flow in order, so the receiver delivers it without waiting for
    /// gaps left by other paths (duplicates are still dropped). Same layout as `Data`.
    PinnedData {
        /// Bond-wide sequence number.
        seq: u64,
        /// Per-path sequence number.
        path_seq: u32,
        /// The IP packet.
        payload: &'a [u8],
    },
    /// One part of an IP packet too large for one datagram on its path (`Data` or
    /// `PinnedData` split in order; the receiver joins the parts of one `seq` that arrive
    /// in order on one path).
    DataPart {
        /// Bond-wide sequence number (of the whole packet).
        seq: u64,
        /// Per-path sequence number (of this datagram).
        path_seq: u32,
        /// This part's index, from 0.
        part: u8,
        /// How many parts the packet was split into (at least 2).
        parts: u8,
        /// The whole packet's type: [`MessageType::Data`] or [`MessageType::PinnedData`].
        kind: MessageType,
        /// This part of the IP packet.
        payload: &'a [u8],
    },
    /// A liveness probe.
    Probe {
        /// Probe number.
        probe_seq: u32,
        /// The sender's epoch: a random number drawn when it started. A new one means the
        /// peer restarted (`bond` then forgets what it knew of the old run). `None` in a
        /// probe from a sender that does not send it (the 12-byte form).
        epoch: Option<u64>,
    },
    /// The answer to a probe.
    ProbeAck {
        /// Echoed probe number.
        probe_seq: u32,
        /// Echoed probe timestamp.
        echo_timestamp: u32,
        /// Time between receiving the probe and sending the ack.
        hold: Duration,
    },
    /// Receiver feedback.
    Ack(Ack),
}

impl Message<'_> {
    /// Its type byte.
    pub fn message_type(&self) -> MessageType {
        match self {
            Message::Data { .. } => MessageType::Data,
            Message::PinnedData { .. } => MessageType::PinnedData,
            Message::DataPart { .. } => MessageType::DataPart,
            Message::Probe { .. } => MessageType::Probe,
            Message::ProbeAck { .. } => MessageType::ProbeAck,
            Message::Ack(_) => MessageType::Ack,
        }
    }

    /// Bytes [`emit`] writes for it (for `Data`, header plus payload).
    pub fn wire_len(&self) -> usize {
        match self {
            Message::Data { payload, .. } | Message::PinnedData { payload, .. } => {
                DATA_HEADER_LEN + payload.len()
            }
            Message::DataPart { payload, .. } => DATA_PART_HEADER_LEN + payload.len(),
            Message::Probe { epoch: Some(_), .. } => PROBE_EPOCH_LEN,
            other => other.message_type().min_len(),
        }
    }
}

/// The message type byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    /// An IP packet.
    Data = 0,
    /// A liveness probe.
    Probe = 1,
    /// The answer to a probe.
    ProbeAck = 2,
    /// Receiver feedback.
    Ack = 3,
    /// An IP packet of a flow pinned to its path: no reordering needed.
    PinnedData = 4,
    /// A part of an IP packet split over several datagrams.
    DataPart = 5,
}

impl MessageType {
    /// The shortest valid datagram of this type (for `Data`, an empty payload).
    pub const fn min_len(self) -> usize {
        match self {
            MessageType::Data | MessageType::PinnedData => DATA_HEADER_LEN,
            MessageType::DataPart => DATA_PART_HEADER_LEN,
            MessageType::Probe => PROBE_LEN,
            MessageType::ProbeAck => PROBE_ACK_LEN,
            MessageType::Ack => ACK_LEN,
        }
    }
}

impl TryFrom<u8> for MessageType {
    type Error = WireError;
    fn try_from(value: u8) -> Result<Self, WireError> {
        match value {
            0 => Ok(MessageType::Data),
            1 => Ok(MessageType::Probe),
            2 => Ok(MessageType::ProbeAck),
            3 => Ok(MessageType::Ack),
            4 => Ok(MessageType::PinnedData),
            5 => Ok(MessageType::DataPart),
            other => Err(WireError::UnknownType(other)),
        }
    }
}

/// Byte offsets of every field.
mod field {
    use core::ops::Range;

    pub(super) const VERSION: usize = 0;
    pub(super) const TYPE: usize = 1;
    pub(super) const PATH: Range<usize> = 2..4;
    pub(super) const TIMESTAMP: Range<usize> = 4..8;

    pub(super) const SEQ: Range<usize> = 8..16;
    pub(super) const PATH_SEQ: Range<usize> = 16..20;

    pub(super) const PART: usize = 20;
    pub(super) const PARTS: usize = 21;
    pub(super) const PART_KIND: usize = 22;

    pub(super) const PROBE_SEQ: Range<usize> = 8..12;
    pub(super) const PROBE_EPOCH: Range<usize> = 12..20;
    pub(super) const PROBE_ECHO: Range<usize> = 12..16;
    pub(super) const PROBE_HOLD: Range<usize> = 16..20;

    pub(super) const ACK_HIGHEST: Range<usize> = 8..12;
    pub(super) const ACK_RX_BYTES: Range<usize> = 12..20;
    pub(super) const ACK_RX_PACKETS: Range<usize> = 20..28;
    pub(super) const ACK_ECHO: Range<usize> = 28..32;
    pub(super) const ACK_HOLD: Range<usize> = 32..36;
}

// Panic-free big-endian readers: a missing range reads as zero. `Packet::new_checked`
// has already verified the length, so in practice every range is present.
fn get_u16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    b.get(r)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u16::from_be_bytes)
}
fn get_u32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    b.get(r)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}
fn get_u64(b: &[u8], r: core::ops::Range<usize>) -> u64 {
    b.get(r)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}
// Panic-free writer; callers check the buffer length first.
fn put(b: &mut [u8], r: core::ops::Range<usize>, bytes: &[u8]) {
    if let Some(dst) = b.get_mut(r) {
        if dst.len() == bytes.len() {
            dst.copy_from_slice(bytes);
        }
    }
}

/// The value with low `bits` bits `low` nearest to `reference`, modulo 2^64 (ties go
/// behind): how a receiver rebuilds a number sent in a short form (`bits` in 1..=63).
pub fn nearest(reference: u64, low: u64, bits: u32) -> u64 {
    let m = 1u64 << bits;
    let diff = low.wrapping_sub(reference) & (m - 1);
    if diff < m / 2 {
        reference.wrapping_add(diff)
    } else {
        reference.wrapping_sub(m - diff)
    }
}

/// A duration as wire microseconds, saturating at `u32::MAX`.
pub fn duration_to_wire(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Wire microseconds as a duration.
pub fn duration_from_wire(micros: u32) -> Duration {
    Duration::from_micros(u64::from(micros))
}

/// A checked, zero-copy view of a datagram: once [`Packet::new_checked`] succeeds, the
/// version is [`VERSION`], the type is known and the buffer is long enough for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    ty: MessageType,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Check `buffer` and wrap it.
    ///
    /// Checks in this order: empty input is [`WireError::Truncated`]; a first byte other
    /// than [`VERSION`] is [`WireError::UnknownVersion`] (whatever the length, so a later
    /// version's datagram is named as such); fewer than [`HEADER_LEN`] bytes is `Truncated`;
    /// an unknown type byte is [`WireError::UnknownType`]; fewer bytes than the type needs
    /// is `Truncated`.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        let version = *b.get(field::VERSION).ok_or(WireError::Truncated)?;
        if version != VERSION {
            return Err(WireError::UnknownVersion(version));
        }
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let ty = MessageType::try_from(*b.get(field::TYPE).ok_or(WireError::Truncated)?)?;
        if b.len() < ty.min_len() {
            return Err(WireError::Truncated);
        }
        if ty == MessageType::DataPart {
            // A part's packet is Data or PinnedData; any other kind is refused as an
            // unknown type, as that type would be.
            match b.get(field::PART_KIND).copied() {
                Some(0 | 4) => {}
                Some(other) => return Err(WireError::UnknownType(other)),
                None => return Err(WireError::Truncated),
            }
        }
        Ok(Self { buffer, ty })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version byte (always [`VERSION`]).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref().first().copied().unwrap_or(0)
    }

    /// The message type.
    pub fn message_type(&self) -> MessageType {
        self.ty
    }

    /// The sender's path id.
    pub fn path(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::PATH)
    }

    /// The sender's timestamp.
    pub fn timestamp(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::TIMESTAMP)
    }

    /// The common header.
    pub fn header(&self) -> Header {
        Header {
            path: self.path(),
            timestamp: self.timestamp(),
        }
    }

    /// The parsed message, borrowing the payload from this view.
    pub fn message(&self) -> Message<'_> {
        decode(self.buffer.as_ref(), self.ty)
    }
}

fn decode(b: &[u8], ty: MessageType) -> Message<'_> {
    match ty {
        MessageType::Data => Message::Data {
            seq: get_u64(b, field::SEQ),
            path_seq: get_u32(b, field::PATH_SEQ),
            payload: b
                .get(DATA_HEADER_LEN..)
                .expect("Packet::new_checked checked the data header"),
        },
        MessageType::PinnedData => Message::PinnedData {
            seq: get_u64(b, field::SEQ),
            path_seq: get_u32(b, field::PATH_SEQ),
            payload: b
                .get(DATA_HEADER_LEN..)
                .expect("Packet::new_checked checked the data header"),
        },
        MessageType::DataPart => Message::DataPart {
            seq: get_u64(b, field::SEQ),
            path_seq: get_u32(b, field::PATH_SEQ),
            part: b.get(field::PART).copied().unwrap_or(0),
            parts: b.get(field::PARTS).copied().unwrap_or(0),
            // `Packet::new_checked` let only 0 and 4 through.
            kind: match b.get(field::PART_KIND) {
                Some(4) => MessageType::PinnedData,
                _ => MessageType::Data,
            },
            payload: b
                .get(DATA_PART_HEADER_LEN..)
                .expect("Packet::new_checked checked the part header"),
        },
        MessageType::Probe => Message::Probe {
            probe_seq: get_u32(b, field::PROBE_SEQ),
            epoch: (b.len() >= PROBE_EPOCH_LEN).then(|| get_u64(b, field::PROBE_EPOCH)),
        },
        MessageType::ProbeAck => Message::ProbeAck {
            probe_seq: get_u32(b, field::PROBE_SEQ),
            echo_timestamp: get_u32(b, field::PROBE_ECHO),
            hold: duration_from_wire(get_u32(b, field::PROBE_HOLD)),
        },
        MessageType::Ack => Message::Ack(Ack {
            highest_path_seq: get_u32(b, field::ACK_HIGHEST),
            rx_bytes: get_u64(b, field::ACK_RX_BYTES),
            rx_packets: get_u64(b, field::ACK_RX_PACKETS),
            echo_timestamp: get_u32(b, field::ACK_ECHO),
            hold: duration_from_wire(get_u32(b, field::ACK_HOLD)),
        }),
    }
}

/// Parse a datagram. See [`Packet::new_checked`] for the checks and their order.
pub fn parse(bytes: &[u8]) -> Result<(Header, Message<'_>), WireError> {
    let packet = Packet::new_checked(bytes)?;
    Ok((packet.header(), decode(bytes, packet.ty)))
}

fn emit_header(header: &Header, ty: MessageType, buf: &mut [u8]) {
    put(buf, field::VERSION..field::VERSION + 1, &[VERSION]);
    put(buf, field::TYPE..field::TYPE + 1, &[ty as u8]);
    put(buf, field::PATH, &header.path.to_be_bytes());
    put(buf, field::TIMESTAMP, &header.timestamp.to_be_bytes());
}

/// Write a message into `buf`, returning its length ([`Message::wire_len`]).
///
/// Meant for control messages; a [`Message::Data`] is written too, by copying its payload
/// after the data header (the data path should use [`emit_data_header`] and write the
/// payload in place instead). Durations saturate at `u32::MAX` µs. Nothing is written if
/// `buf` is too small.
pub fn emit(header: &Header, msg: &Message<'_>, buf: &mut [u8]) -> Result<usize, WireError> {
    let len = msg.wire_len();
    if buf.len() < len {
        return Err(WireError::BufferTooSmall);
    }
    emit_header(header, msg.message_type(), buf);
    match *msg {
        Message::Data {
            seq,
            path_seq,
            payload,
        }
        | Message::PinnedData {
            seq,
            path_seq,
            payload,
        } => {
            put(buf, field::SEQ, &seq.to_be_bytes());
            put(buf, field::PATH_SEQ, &path_seq.to_be_bytes());
            put(buf, DATA_HEADER_LEN..len, payload);
        }
        Message::DataPart {
            seq,
            path_seq,
            part,
            parts,
            kind,
            payload,
        } => {
            put(buf, field::SEQ, &seq.to_be_bytes());
            put(buf, field::PATH_SEQ, &path_seq.to_be_bytes());
            put(buf, field::PART..field::PART + 1, &[part]);
            put(buf, field::PARTS..field::PARTS + 1, &[parts]);
            put(buf, field::PART_KIND..field::PART_KIND + 1, &[kind as u8]);
            put(buf, DATA_PART_HEADER_LEN..len, payload);
        }
        Message::Probe { probe_seq, epoch } => {
            put(buf, field::PROBE_SEQ, &probe_seq.to_be_bytes());
            if let Some(epoch) = epoch {
                put(buf, field::PROBE_EPOCH, &epoch.to_be_bytes());
            }
        }
        Message::ProbeAck {
            probe_seq,
            echo_timestamp,
            hold,
        } => {
            put(buf, field::PROBE_SEQ, &probe_seq.to_be_bytes());
            put(buf, field::PROBE_ECHO, &echo_timestamp.to_be_bytes());
            put(
                buf,
                field::PROBE_HOLD,
                &duration_to_wire(hold).to_be_bytes(),
            );
        }
        Message::Ack(ack) => {
            put(buf, field::ACK_HIGHEST, &ack.highest_path_seq.to_be_bytes());
            put(buf, field::ACK_RX_BYTES, &ack.rx_bytes.to_be_bytes());
            put(buf, field::ACK_RX_PACKETS, &ack.rx_packets.to_be_bytes());
            put(buf, field::ACK_ECHO, &ack.echo_timestamp.to_be_bytes());
            put(
                buf,
                field::ACK_HOLD,
                &duration_to_wire(ack.hold).to_be_bytes(),
            );
        }
    }
    Ok(len)
}

/// Write a data header into `buf[..DATA_HEADER_LEN]`; the caller puts the payload after.
/// Returns [`DATA_HEADER_LEN`]. Nothing is written if `buf` is too small.
pub fn emit_data_header(
    header: &Header,
    seq: u64,
    path_seq: u32,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    emit_data_header_as(header, MessageType::Data, seq, path_seq, buf)
}

/// The header of part `part` of `parts` of a packet of type `kind` (`Data` or
/// `PinnedData`), written into `buf` before the part itself; its length.
pub fn emit_data_part_header(
    header: &Header,
    kind: MessageType,
    seq: u64,
    path_seq: u32,
    part: u8,
    parts: u8,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    if buf.len() < DATA_PART_HEADER_LEN {
        return Err(WireError::BufferTooSmall);
    }
    emit_header(header, MessageType::DataPart, buf);
    put(buf, field::SEQ, &seq.to_be_bytes());
    put(buf, field::PATH_SEQ, &path_seq.to_be_bytes());
    put(buf, field::PART..field::PART + 1, &[part]);
    put(buf, field::PARTS..field::PARTS + 1, &[parts]);
    put(buf, field::PART_KIND..field::PART_KIND + 1, &[kind as u8]);
    Ok(DATA_PART_HEADER_LEN)
}

/// [`emit_data_header`] with the type given: `Data` or `PinnedData`.
pub fn emit_data_header_as(
    header: &Header,
    ty: MessageType,
    seq: u64,
    path_seq: u32,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    if buf.len() < DATA_HEADER_LEN {
        return Err(WireError::BufferTooSmall);
    }
    emit_header(header, ty, buf);
    put(buf, field::SEQ, &seq.to_be_bytes());
    put(buf, field::PATH_SEQ, &path_seq.to_be_bytes());
    Ok(DATA_HEADER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HDR: Header = Header {
        path: 0x0102,
        timestamp: 0x0304_0506,
    };

    fn roundtrip(header: Header, msg: Message<'_>) {
        let mut buf = [0u8; 128];
        let n = emit(&header, &msg, &mut buf).expect("fits");
        assert_eq!(n, msg.wire_len());
        let (h, m) = parse(&buf[..n]).expect("parses");
        assert_eq!(h, header);
        assert_eq!(m, msg);
    }

    fn hand_made() -> Vec<(Message<'static>, Vec<u8>)> {
        let common = |ty: u8| vec![1, ty, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06];
        let mut data = common(0);
        data.extend_from_slice(&[0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17]);
        data.extend_from_slice(&[0x20, 0x21, 0x22, 0x23]);
        data.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0x45]);
        let mut probe = common(1);
        probe.extend_from_slice(&[0xa0, 0xa1, 0xa2, 0xa3]);
        let mut probe_epoch = probe.clone();
        probe_epoch.extend_from_slice(&[0xe0, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7]);
        let mut probe_ack = common(2);
        probe_ack.extend_from_slice(&[0xa0, 0xa1, 0xa2, 0xa3]);
        probe_ack.extend_from_slice(&[0xb0, 0xb1, 0xb2, 0xb3]);
        probe_ack.extend_from_slice(&[0x00, 0x00, 0x30, 0x39]); // 12345 µs
        let mut ack = common(3);
        ack.extend_from_slice(&[0xc0, 0xc1, 0xc2, 0xc3]);
        ack.extend_from_slice(&[0, 0, 0, 0x01, 0, 0, 0, 0x02]);
        ack.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x03, 0xe8]);
        ack.extend_from_slice(&[0xd0, 0xd1, 0xd2, 0xd3]);
        ack.extend_from_slice(&[0x00, 0x0f, 0x42, 0x40]); // 1 s
        vec![
            (
                Message::Data {
                    seq: 0x1011_1213_1415_1617,
                    path_seq: 0x2021_2223,
                    payload: &[0xde, 0xad, 0xbe, 0xef, 0x45],
                },
                data,
            ),
            (
                Message::Probe {
                    probe_seq: 0xa0a1_a2a3,
                    epoch: None,
                },
                probe,
            ),
            (
                Message::Probe {
                    probe_seq: 0xa0a1_a2a3,
                    epoch: Some(0xe0e1_e2e3_e4e5_e6e7),
                },
                probe_epoch,
            ),
            (
                Message::ProbeAck {
                    probe_seq: 0xa0a1_a2a3,
                    echo_timestamp: 0xb0b1_b2b3,
                    hold: Duration::from_micros(12345),
                },
                probe_ack,
            ),
            (
                Message::Ack(Ack {
                    highest_path_seq: 0xc0c1_c2c3,
                    rx_bytes: 0x0000_0001_0000_0002,
                    rx_packets: 1000,
                    echo_timestamp: 0xd0d1_d2d3,
                    hold: Duration::from_secs(1),
                }),
                ack,
            ),
        ]
    }

    #[test]
    fn exact_bytes_of_each_type() {
        for (msg, bytes) in hand_made() {
            let mut buf = [0xffu8; 64];
            let n = emit(&HDR, &msg, &mut buf).expect("fits");
            assert_eq!(&buf[..n], &bytes[..], "{msg:?}");
            assert_eq!(parse(&bytes), Ok((HDR, msg)));
        }
    }

    #[test]
    fn sizes_match_layout() {
        let sizes: Vec<usize> = hand_made().iter().map(|(_, b)| b.len()).collect();
        assert_eq!(
            sizes,
            [
                DATA_HEADER_LEN + 5,
                PROBE_LEN,
                PROBE_EPOCH_LEN,
                PROBE_ACK_LEN,
                ACK_LEN
            ]
        );
    }

    #[test]
    fn data_header_then_payload_in_place() {
        let (msg, bytes) = hand_made().swap_remove(0);
        let Message::Data {
            seq,
            path_seq,
            payload,
        } = msg
        else {
            unreachable!()
        };
        let mut buf = [0u8; 64];
        assert_eq!(
            emit_data_header(&HDR, seq, path_seq, &mut buf),
            Ok(DATA_HEADER_LEN)
        );
        buf[DATA_HEADER_LEN..DATA_HEADER_LEN + payload.len()].copy_from_slice(payload);
        assert_eq!(&buf[..bytes.len()], &bytes[..]);
    }

    #[test]
    fn empty_data_payload() {
        roundtrip(
            HDR,
            Message::Data {
                seq: 7,
                path_seq: 9,
                payload: &[],
            },
        );
    }

    #[test]
    fn every_truncation_is_truncated() {
        for (msg, bytes) in hand_made() {
            let min = msg.message_type().min_len();
            for len in 0..min {
                assert_eq!(
                    parse(&bytes[..len]),
                    Err(WireError::Truncated),
                    "{msg:?} at {len}"
                );
            }
            // Data: any prefix at least a data header long is a shorter payload; a probe
            // cut inside its epoch is a probe without one.
            for len in min..bytes.len() {
                let (_, m) = parse(&bytes[..len]).expect("long enough");
                match m {
                    Message::Data { payload, .. } => {
                        assert_eq!(payload.len(), len - DATA_HEADER_LEN);
                    }
                    Message::Probe { epoch, .. } => assert_eq!(epoch, None),
                    _ => panic!("only data and probes have bytes beyond min_len here"),
                }
            }
        }
    }

    #[test]
    fn control_messages_ignore_trailing_bytes() {
        // The 12-byte probe is left out: bytes after it are its epoch (a field appended
        // in this version, as the rule for extending a control message allows).
        let full = hand_made()
            .into_iter()
            .skip(1)
            .filter(|(m, _)| !matches!(m, Message::Probe { epoch: None, .. }));
        for (msg, mut bytes) in full {
            bytes.extend_from_slice(&[0x55; 9]);
            assert_eq!(parse(&bytes), Ok((HDR, msg)));
        }
    }

    #[test]
    fn unknown_version_and_type_rejected() {
        for (_, bytes) in hand_made() {
            for v in [0u8, 2, SEALED_VERSION, 3, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[0] = v;
                assert_eq!(parse(&b), Err(WireError::UnknownVersion(v)));
                assert_eq!(parse(&b[..1]), Err(WireError::UnknownVersion(v)));
            }
            for t in [6u8, 7, 0x7f, 0xff] {
                let mut b = bytes.clone();
                b[1] = t;
                assert_eq!(parse(&b), Err(WireError::UnknownType(t)));
            }
        }
        assert_eq!(parse(&[]), Err(WireError::Truncated));
    }

    #[test]
    fn small_output_buffer() {
        for (msg, bytes) in hand_made() {
            for len in 0..bytes.len() {
                let mut buf = vec![0xaau8; len];
                assert_eq!(emit(&HDR, &msg, &mut buf), Err(WireError::BufferTooSmall));
                assert!(buf.iter().all(|&b| b == 0xaa), "nothing written on error");
            }
        }
        for len in 0..DATA_HEADER_LEN {
            let mut buf = vec![0u8; len];
            assert_eq!(
                emit_data_header(&HDR, 1, 2, &mut buf),
                Err(WireError::BufferTooSmall)
            );
        }
    }

    #[test]
    fn durations_saturate() {
        let huge = Duration::from_secs(10_000);
        let mut buf = [0u8; 64];
        let n = emit(
            &HDR,
            &Message::ProbeAck {
                probe_seq: 1,
                echo_timestamp: 2,
                hold: huge,
            },
            &mut buf,
        )
        .expect("fits");
        assert_eq!(&buf[16..20], &[0xff; 4]);
        let (_, m) = parse(&buf[..n]).expect("parses");
        assert_eq!(
            m,
            Message::ProbeAck {
                probe_seq: 1,
                echo_timestamp: 2,
                hold: Duration::from_micros(u64::from(u32::MAX))
            }
        );
        assert_eq!(duration_to_wire(Duration::MAX), u32::MAX);
        assert_eq!(duration_to_wire(Duration::from_nanos(1999)), 1);
    }

    #[test]
    fn packet_view() {
        let (_, bytes) = hand_made().swap_remove(4);
        let p = Packet::new_checked(&bytes[..]).expect("valid");
        assert_eq!(p.version(), VERSION);
        assert_eq!(p.message_type(), MessageType::Ack);
        assert_eq!(p.path(), 0x0102);
        assert_eq!(p.timestamp(), 0x0304_0506);
        assert_eq!(p.header(), HDR);
        assert!(matches!(p.message(), Message::Ack(a) if a.rx_packets == 1000));
        assert_eq!(p.into_inner().len(), ACK_LEN);
        assert_eq!(
            Packet::new_checked(vec![1u8, 1, 0, 0]),
            Err(WireError::Truncated)
        );
    }

    fn hold() -> impl Strategy<Value = Duration> {
        any::<u32>().prop_map(duration_from_wire)
    }

    proptest! {
        #[test]
        fn data_round_trip(h in any::<(u16, u32)>(), seq in any::<u64>(), path_seq in any::<u32>(),
                           payload in proptest::collection::vec(any::<u8>(), 0..1500)) {
            let header = Header { path: h.0, timestamp: h.1 };
            let msg = Message::Data { seq, path_seq, payload: &payload };
            let mut buf = vec![0u8; 1600];
            let n = emit(&header, &msg, &mut buf).expect("fits");
            prop_assert_eq!(n, DATA_HEADER_LEN + payload.len());
            prop_assert_eq!(parse(&buf[..n]), Ok((header, msg)));
            // The in-place path gives the same bytes.
            let mut buf2 = vec![0u8; n];
            let n2 = emit_data_header(&header, seq, path_seq, &mut buf2);
            prop_assert_eq!(n2, Ok(DATA_HEADER_LEN));
            buf2[DATA_HEADER_LEN..].copy_from_slice(&payload);
            prop_assert_eq!(&buf[..n], &buf2[..]);
        }

        #[test]
        fn data_part_round_trip(h in any::<(u16, u32)>(), seq in any::<u64>(), path_seq in any::<u32>(),
                                part in any::<u8>(), parts in any::<u8>(), pinned in any::<bool>(),
                                payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let kind = if pinned { MessageType::PinnedData } else { MessageType::Data };
            let msg = Message::DataPart { seq, path_seq, part, parts, kind, payload: &payload };
            roundtrip(Header { path: h.0, timestamp: h.1 }, msg);
            // The in-place header writer agrees with emit.
            let mut a = vec![0u8; DATA_PART_HEADER_LEN + payload.len()];
            let mut b = a.clone();
            emit(&Header { path: h.0, timestamp: h.1 }, &msg, &mut a).expect("room");
            emit_data_part_header(&Header { path: h.0, timestamp: h.1 }, kind, seq, path_seq, part, parts, &mut b).expect("room");
            b[DATA_PART_HEADER_LEN..].copy_from_slice(&payload);
            prop_assert_eq!(a, b);
        }

        #[test]
        fn probe_round_trip(h in any::<(u16, u32)>(), probe_seq in any::<u32>(),
                            epoch in any::<Option<u64>>()) {
            roundtrip(Header { path: h.0, timestamp: h.1 }, Message::Probe { probe_seq, epoch });
        }

        #[test]
        fn probe_ack_round_trip(h in any::<(u16, u32)>(), probe_seq in any::<u32>(),
                                echo_timestamp in any::<u32>(), hold in hold()) {
            roundtrip(Header { path: h.0, timestamp: h.1 },
                      Message::ProbeAck { probe_seq, echo_timestamp, hold });
        }

        #[test]
        fn ack_round_trip(h in any::<(u16, u32)>(), highest_path_seq in any::<u32>(),
                          rx_bytes in any::<u64>(), rx_packets in any::<u64>(),
                          echo_timestamp in any::<u32>(), hold in hold()) {
            roundtrip(Header { path: h.0, timestamp: h.1 }, Message::Ack(Ack {
                highest_path_seq, rx_bytes, rx_packets, echo_timestamp, hold,
            }));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            match parse(&bytes) {
                Ok((h, m)) => {
                    // Whatever parses re-emits to the same leading bytes.
                    let mut buf = vec![0u8; 128];
                    let n = emit(&h, &m, &mut buf).expect("fits");
                    prop_assert!(n <= bytes.len());
                    prop_assert_eq!(&buf[..n], &bytes[..n]);
                }
                Err(WireError::UnknownVersion(v)) => prop_assert_ne!(v, VERSION),
                Err(WireError::UnknownType(t)) => prop_assert!(t > 3),
                Err(WireError::Truncated) => prop_assert!(bytes.len() < ACK_LEN),
                Err(WireError::BufferTooSmall) => prop_assert!(false, "parse never says that"),
            }
        }

        #[test]
        fn versioned_bytes_never_panic(
            ty in 0u8..7,
            rest in proptest::collection::vec(any::<u8>(), 0..48),
        ) {
            // Force the right version so the type/length checks get exercised.
            let mut bytes = vec![VERSION, ty];
            bytes.extend_from_slice(&rest);
            let r = parse(&bytes);
            if ty > 5 && bytes.len() >= HEADER_LEN {
                prop_assert_eq!(r, Err(WireError::UnknownType(ty)));
            } else if ty <= 5 {
                let long_enough = bytes.len() >= MessageType::try_from(ty).expect("known").min_len();
                let kind_ok = ty != 5 || matches!(bytes.get(22), Some(0 | 4));
                prop_assert_eq!(r.is_ok(), long_enough && kind_ok);
            }
        }
    }
}
