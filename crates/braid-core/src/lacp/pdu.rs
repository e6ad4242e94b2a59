//! The two Slow Protocols frames LACP speaks: the LACPDU (subtype 1) and the Marker PDU
//! (subtype 2), as whole Ethernet frames (destination, source, EtherType, PDU).
//!
//! Layout (IEEE 802.1AX-2008 §5.4.2.2, the same as 802.3ad-2000 §43.4.2.2; Linux
//! `struct lacpdu` in `include/net/bond_3ad.h`, Open vSwitch `struct lacp_pdu`):
//!
//! | payload offset | bytes | field |
//! | ---: | ---: | --- |
//! | 0 | 1 | subtype = 1 |
//! | 1 | 1 | version = 1 |
//! | 2 | 2 | TLV type 1 (actor), length 20 |
//! | 4 | 18 | actor info: system priority 2, system 6, key 2, port priority 2, port 2, state 1, reserved 3 |
//! | 22 | 2 | TLV type 2 (partner), length 20 |
//! | 24 | 18 | partner info, as the actor's |
//! | 42 | 2 | TLV type 3 (collector), length 16 |
//! | 44 | 14 | collector max delay 2, reserved 12 |
//! | 58 | 2 | TLV type 0 (terminator), length 0 |
//! | 60 | 50 | reserved |
//!
//! 2 + 20 + 20 + 16 + 2 + 50 = 110 payload bytes; with the 14-byte Ethernet header a frame
//! is 124 bytes (no padding: above the 60-byte minimum), 128 on the wire with the FCS.
//!
//! The Marker PDU (802.1AX §5.5.3.3, Linux `struct bond_marker`): subtype 2, version 1,
//! TLV type 1 (information) or 2 (response) with length 16, requester port 2, requester
//! system 6, transaction id 4, pad 2, terminator TLV (0, 0), 90 reserved: 110 bytes too.
//!
//! Receive checks, as §5.4.12 (43.4.12) allows: the EtherType, the destination (the Slow
//! Protocols multicast only, as Linux), the subtype, and the TLV types and lengths. The
//! version and every reserved byte are not checked, so a later version's LACPDU reads as
//! version 1. Bytes after the 110 (padding, a version 2 LACPDU's extra TLVs) are ignored,
//! up to a whole untagged Ethernet frame ([`MAX_FRAME_LEN`]); longer is refused.

use core::fmt;

/// The Slow Protocols multicast address LACPDUs are sent to.
pub const SLOW_PROTOCOLS_MAC: [u8; 6] = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x02];
/// The Slow Protocols EtherType.
pub const SLOW_PROTOCOLS_ETHERTYPE: u16 = 0x8809;
/// Slow Protocols subtype of the LACPDU.
pub(super) const SUBTYPE_LACP: u8 = 1;
/// Slow Protocols subtype of the Marker PDU.
pub(super) const SUBTYPE_MARKER: u8 = 2;
/// Ethernet header: destination, source, EtherType.
pub(super) const ETH_HEADER_LEN: usize = 14;
/// An LACPDU or Marker PDU after the Ethernet header.
pub const PDU_LEN: usize = 110;
/// A whole LACPDU or Marker frame as emitted (no FCS).
pub const FRAME_LEN: usize = ETH_HEADER_LEN + PDU_LEN;
/// Longest frame accepted: an untagged Ethernet frame of 1500 payload bytes plus the FCS.
pub const MAX_FRAME_LEN: usize = 1518;

const TLV_ACTOR: (u8, u8) = (1, 20);
const TLV_PARTNER: (u8, u8) = (2, 20);
const TLV_COLLECTOR: (u8, u8) = (3, 16);
const TLV_TERMINATOR: (u8, u8) = (0, 0);
const TLV_MARKER_LEN: u8 = 16;
const MARKER_INFORMATION: u8 = 1;
const MARKER_RESPONSE: u8 = 2;

/// One port's LACP state byte (802.1AX §5.4.2.2 item s).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct State(pub u8);

impl State {
    /// LACP_Activity: active (set) or passive.
    pub const ACTIVITY: u8 = 0x01;
    /// LACP_Timeout: short timeout (set, fast rate) or long.
    pub const TIMEOUT: u8 = 0x02;
    /// Aggregation: the link may be aggregated (set) or is individual.
    pub const AGGREGATION: u8 = 0x04;
    /// Synchronization: the port is attached to the right aggregator.
    pub const SYNC: u8 = 0x08;
    /// Collecting: frames received on the port are collected.
    pub const COLLECTING: u8 = 0x10;
    /// Distributing: frames are sent on the port.
    pub const DISTRIBUTING: u8 = 0x20;
    /// Defaulted: the partner information in use is the administrative default.
    pub const DEFAULTED: u8 = 0x40;
    /// Expired: the receive machine is in EXPIRED.
    pub const EXPIRED: u8 = 0x80;

    /// Whether every bit of `bits` is set.
    pub const fn has(self, bits: u8) -> bool {
        self.0 & bits == bits
    }

    /// The state with `bits` set or cleared.
    #[must_use]
    pub const fn with(self, bits: u8, on: bool) -> State {
        if on {
            State(self.0 | bits)
        } else {
            State(self.0 & !bits)
        }
    }

    /// The set bits by name, lowest first, as `ovs-appctl lacp/show` prints them.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        const NAMES: [&str; 8] = [
            "activity",
            "timeout",
            "aggregation",
            "synchronized",
            "collecting",
            "distributing",
            "defaulted",
            "expired",
        ];
        NAMES
            .into_iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, n)| n)
    }
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#04x}", self.0)
    }
}

/// The actor or partner information of an LACPDU (802.1AX §5.4.2.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PortInfo {
    /// System priority (lower is better).
    pub system_priority: u16,
    /// System id (a MAC address).
    pub system: [u8; 6],
    /// Operational key.
    pub key: u16,
    /// Port priority (lower is better).
    pub port_priority: u16,
    /// Port number.
    pub port: u16,
    /// State bits.
    pub state: State,
}

/// A parsed LACPDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lacpdu {
    /// The sender's own information.
    pub actor: PortInfo,
    /// What the sender knows of us.
    pub partner: PortInfo,
    /// Collector max delay, tens of µs (we send 0, as Linux and Open vSwitch do).
    pub collector_max_delay: u16,
}

/// Marker Information (a request) or Marker Response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    /// Marker Information: the requester asks for a response.
    Information,
    /// Marker Response: the answer.
    Response,
}

/// A parsed Marker PDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// Information or response.
    pub kind: MarkerKind,
    /// The requester's port number.
    pub requester_port: u16,
    /// The requester's system id.
    pub requester_system: [u8; 6],
    /// The requester's transaction id.
    pub transaction_id: u32,
}

/// What a Slow Protocols frame for LACP holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlowPdu {
    /// An LACPDU.
    Lacp(Lacpdu),
    /// A Marker PDU.
    Marker(Marker),
}

/// Why a frame is not an LACPDU or Marker PDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Too short for its Ethernet header or its PDU.
    Short {
        /// The frame's length.
        len: usize,
    },
    /// Longer than an untagged Ethernet frame ([`MAX_FRAME_LEN`]).
    Oversized {
        /// The frame's length.
        len: usize,
    },
    /// Not EtherType 0x8809.
    NotSlowProtocols {
        /// The EtherType found.
        ethertype: u16,
    },
    /// Not sent to the Slow Protocols multicast address.
    WrongDestination,
    /// A Slow Protocol other than LACP and Marker (OAM, OSSP...).
    UnknownSubtype(u8),
    /// A TLV with the wrong type or length.
    BadTlv {
        /// Which TLV.
        tlv: &'static str,
        /// Its type byte.
        tlv_type: u8,
        /// Its length byte.
        length: u8,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FrameError::Short { len } => write!(f, "slow protocols frame too short ({len} bytes)"),
            FrameError::Oversized { len } => {
                write!(
                    f,
                    "slow protocols frame too long ({len} bytes, at most {MAX_FRAME_LEN})"
                )
            }
            FrameError::NotSlowProtocols { ethertype } => {
                write!(f, "not a slow protocols frame (EtherType {ethertype:#06x})")
            }
            FrameError::WrongDestination => {
                write!(f, "slow protocols frame not sent to 01:80:c2:00:00:02")
            }
            FrameError::UnknownSubtype(s) => write!(f, "slow protocols subtype {s} is not LACP"),
            FrameError::BadTlv {
                tlv,
                tlv_type,
                length,
            } => write!(f, "bad {tlv} TLV (type {tlv_type}, length {length})"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Reads a whole Ethernet frame (from the destination address on, FCS or not).
pub fn parse(frame: &[u8]) -> Result<SlowPdu, FrameError> {
    let len = frame.len();
    if len > MAX_FRAME_LEN {
        return Err(FrameError::Oversized { len });
    }
    let header: &[u8; ETH_HEADER_LEN + 1] = frame
        .get(..ETH_HEADER_LEN + 1)
        .and_then(|h| h.try_into().ok())
        .ok_or(FrameError::Short { len })?;
    let ethertype = u16::from_be_bytes([header[12], header[13]]);
    if ethertype != SLOW_PROTOCOLS_ETHERTYPE {
        return Err(FrameError::NotSlowProtocols { ethertype });
    }
    if header[..6] != SLOW_PROTOCOLS_MAC {
        return Err(FrameError::WrongDestination);
    }
    let subtype = header[ETH_HEADER_LEN];
    if subtype != SUBTYPE_LACP && subtype != SUBTYPE_MARKER {
        return Err(FrameError::UnknownSubtype(subtype));
    }
    let pdu: &[u8; PDU_LEN] = frame
        .get(ETH_HEADER_LEN..FRAME_LEN)
        .and_then(|p| p.try_into().ok())
        .ok_or(FrameError::Short { len })?;
    if subtype == SUBTYPE_LACP {
        parse_lacpdu(pdu).map(SlowPdu::Lacp)
    } else {
        parse_marker(pdu).map(SlowPdu::Marker)
    }
}

fn check_tlv(tlv: &'static str, got: (u8, u8), want: (u8, u8)) -> Result<(), FrameError> {
    if got == want {
        Ok(())
    } else {
        Err(FrameError::BadTlv {
            tlv,
            tlv_type: got.0,
            length: got.1,
        })
    }
}

fn parse_lacpdu(p: &[u8; PDU_LEN]) -> Result<Lacpdu, FrameError> {
    check_tlv("actor", (p[2], p[3]), TLV_ACTOR)?;
    check_tlv("partner", (p[22], p[23]), TLV_PARTNER)?;
    check_tlv("collector", (p[42], p[43]), TLV_COLLECTOR)?;
    check_tlv("terminator", (p[58], p[59]), TLV_TERMINATOR)?;
    Ok(Lacpdu {
        actor: read_info(p, 4),
        partner: read_info(p, 24),
        collector_max_delay: u16::from_be_bytes([p[44], p[45]]),
    })
}

fn read_info(p: &[u8; PDU_LEN], at: usize) -> PortInfo {
    let b = |i: usize| p.get(at + i).copied().unwrap_or(0);
    PortInfo {
        system_priority: u16::from_be_bytes([b(0), b(1)]),
        system: [b(2), b(3), b(4), b(5), b(6), b(7)],
        key: u16::from_be_bytes([b(8), b(9)]),
        port_priority: u16::from_be_bytes([b(10), b(11)]),
        port: u16::from_be_bytes([b(12), b(13)]),
        state: State(b(14)),
    }
}

fn parse_marker(p: &[u8; PDU_LEN]) -> Result<Marker, FrameError> {
    let kind = match (p[2], p[3]) {
        (MARKER_INFORMATION, TLV_MARKER_LEN) => MarkerKind::Information,
        (MARKER_RESPONSE, TLV_MARKER_LEN) => MarkerKind::Response,
        (tlv_type, length) => {
            return Err(FrameError::BadTlv {
                tlv: "marker",
                tlv_type,
                length,
            })
        }
    };
    check_tlv("terminator", (p[18], p[19]), TLV_TERMINATOR)?;
    Ok(Marker {
        kind,
        requester_port: u16::from_be_bytes([p[4], p[5]]),
        requester_system: [p[6], p[7], p[8], p[9], p[10], p[11]],
        transaction_id: u32::from_be_bytes([p[12], p[13], p[14], p[15]]),
    })
}

fn write_header(buf: &mut [u8; FRAME_LEN], src: [u8; 6], subtype: u8) {
    buf.fill(0);
    buf[..6].copy_from_slice(&SLOW_PROTOCOLS_MAC);
    buf[6..12].copy_from_slice(&src);
    buf[12..14].copy_from_slice(&SLOW_PROTOCOLS_ETHERTYPE.to_be_bytes());
    buf[ETH_HEADER_LEN] = subtype;
    buf[ETH_HEADER_LEN + 1] = 1; // version
}

fn write_info(buf: &mut [u8; FRAME_LEN], at: usize, tlv: (u8, u8), info: &PortInfo) {
    let at = ETH_HEADER_LEN + at;
    buf[at] = tlv.0;
    buf[at + 1] = tlv.1;
    buf[at + 2..at + 4].copy_from_slice(&info.system_priority.to_be_bytes());
    buf[at + 4..at + 10].copy_from_slice(&info.system);
    buf[at + 10..at + 12].copy_from_slice(&info.key.to_be_bytes());
    buf[at + 12..at + 14].copy_from_slice(&info.port_priority.to_be_bytes());
    buf[at + 14..at + 16].copy_from_slice(&info.port.to_be_bytes());
    buf[at + 16] = info.state.0;
}

/// Writes an LACPDU frame from `src` into `buf`, every byte of it (reserved ones zero).
pub fn emit_lacpdu(src: [u8; 6], pdu: &Lacpdu, buf: &mut [u8; FRAME_LEN]) {
    write_header(buf, src, SUBTYPE_LACP);
    write_info(buf, 2, TLV_ACTOR, &pdu.actor);
    write_info(buf, 22, TLV_PARTNER, &pdu.partner);
    let c = ETH_HEADER_LEN + 42;
    buf[c] = TLV_COLLECTOR.0;
    buf[c + 1] = TLV_COLLECTOR.1;
    buf[c + 2..c + 4].copy_from_slice(&pdu.collector_max_delay.to_be_bytes());
    // Terminator (type 0, length 0) and the reserved bytes are the zeros `fill` left.
}

/// Writes a Marker PDU frame from `src` into `buf`.
pub fn emit_marker(src: [u8; 6], marker: &Marker, buf: &mut [u8; FRAME_LEN]) {
    write_header(buf, src, SUBTYPE_MARKER);
    let m = ETH_HEADER_LEN;
    buf[m + 2] = match marker.kind {
        MarkerKind::Information => MARKER_INFORMATION,
        MarkerKind::Response => MARKER_RESPONSE,
    };
    buf[m + 3] = TLV_MARKER_LEN;
    buf[m + 4..m + 6].copy_from_slice(&marker.requester_port.to_be_bytes());
    buf[m + 6..m + 12].copy_from_slice(&marker.requester_system);
    buf[m + 12..m + 16].copy_from_slice(&marker.transaction_id.to_be_bytes());
}
