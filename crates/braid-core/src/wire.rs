//! The tunnel datagram. STUB: the contract below is fixed; the body is being written.
//!
//! Every datagram starts with an 8-byte common header (network byte order):
//!
//! ```text
//!  0       1       2       3       4       5       6       7
//! +-------+-------+-------+-------+-------+-------+-------+-------+
//! |version| type  |    path id    |   timestamp (sender µs, wraps) |
//! +-------+-------+-------+-------+-------+-------+-------+-------+
//! ```

use core::time::Duration;

/// Wire version this build speaks.
pub const VERSION: u8 = 1;
/// Bytes of the common header.
pub const HEADER_LEN: usize = 8;
/// Bytes of a data header (common header + bond seq + path seq).
pub const DATA_HEADER_LEN: usize = 20;

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
    /// A liveness probe.
    Probe {
        /// Probe number.
        probe_seq: u32,
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

/// Parse a datagram.
pub fn parse(_bytes: &[u8]) -> Result<(Header, Message<'_>), WireError> {
    Err(WireError::Truncated)
}

/// Write a control message (anything but `Data`) into `buf`, returning its length.
pub fn emit(_header: &Header, _msg: &Message<'_>, _buf: &mut [u8]) -> Result<usize, WireError> {
    Err(WireError::BufferTooSmall)
}

/// Write a data header into `buf[..DATA_HEADER_LEN]`; the caller puts the payload after.
pub fn emit_data_header(
    _header: &Header,
    _seq: u64,
    _path_seq: u32,
    _buf: &mut [u8],
) -> Result<usize, WireError> {
    Err(WireError::BufferTooSmall)
}
