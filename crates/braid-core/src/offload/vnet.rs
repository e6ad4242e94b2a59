//! The `virtio_net_hdr` a TUN opened with `IFF_VNET_HDR` puts in front of every packet
//! (include/uapi/linux/virtio_net.h, `struct virtio_net_hdr`, 10 bytes).
//!
//! The fields are in the "legacy" virtio byte order. For tun that is little-endian when
//! the device has `TUNSETVNETLE` set, and otherwise the host's order
//! (`tun_vnet_is_little_endian`: `TUN_VNET_LE || virtio_legacy_is_little_endian()`, the
//! latter true on little-endian hosts such as x86-64), unless `TUNSETVNETBE` (only with
//! `CONFIG_TUN_VNET_CROSS_LE`) asked for big-endian. braid's TUN code sets `TUNSETVNETLE`,
//! so this module always reads and writes little-endian.

/// Length of the header in bytes (`sizeof(struct virtio_net_hdr)`, the tun default
/// `vnet_hdr_sz`).
pub const LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum from `csum_start` to the end is not done;
/// the field at `csum_start + csum_offset` holds the pseudo-header sum.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksum was checked (tun may set it on reads).
pub const F_DATA_VALID: u8 = 2;

/// `VIRTIO_NET_HDR_GSO_NONE`: one ordinary packet.
pub const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`: a TCP over IPv4 superframe (TSO).
pub const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_UDP` (UFO, IP fragmentation): never produced here, refused.
pub const GSO_UDP: u8 = 3;
/// `VIRTIO_NET_HDR_GSO_TCPV6`: a TCP over IPv6 superframe (TSO).
pub const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`: a UDP superframe cut into datagrams (USO).
pub const GSO_UDP_L4: u8 = 5;
/// `VIRTIO_NET_HDR_GSO_ECN`: the TCP superframe has ECN (CWR on its first segment only).
pub const GSO_ECN: u8 = 0x80;

/// What kind of superframe a header announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gso {
    /// One ordinary packet.
    None,
    /// TCP over IPv4, cut at `gso_size` bytes of payload.
    TcpV4,
    /// TCP over IPv6, cut at `gso_size` bytes of payload.
    TcpV6,
    /// UDP (either IP version), one datagram per `gso_size` bytes of payload.
    UdpL4,
}

/// A parsed `virtio_net_hdr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct VnetHdr {
    /// `F_NEEDS_CSUM`, `F_DATA_VALID`.
    pub flags: u8,
    /// One of the `GSO_*` values, maybe with `GSO_ECN`.
    pub gso_type: u8,
    /// Length of the headers (IP and transport) in front of the payload.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksummed part starts (the transport header).
    pub csum_start: u16,
    /// Where, from `csum_start`, the checksum field is (16 for TCP, 6 for UDP).
    pub csum_offset: u16,
}

/// A header that cannot be read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VnetError {
    /// Fewer than [`LEN`] bytes.
    Short,
    /// A `gso_type` this module does not know (or UFO), the value given.
    UnknownGso(u8),
    /// `GSO_ECN` on something that is not TCP.
    EcnNotTcp,
}

impl core::fmt::Display for VnetError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            VnetError::Short => write!(f, "shorter than the {LEN}-byte virtio_net_hdr"),
            VnetError::UnknownGso(t) => write!(f, "unsupported virtio GSO type {t}"),
            VnetError::EcnNotTcp => write!(f, "GSO ECN bit on a non-TCP superframe"),
        }
    }
}

impl VnetHdr {
    /// The header of an ordinary packet: no GSO, checksum complete.
    pub const NONE: VnetHdr = VnetHdr {
        flags: 0,
        gso_type: GSO_NONE,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 0,
        csum_offset: 0,
    };

    /// Read the first [`LEN`] bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<VnetHdr, VnetError> {
        let b: &[u8; LEN] = b
            .get(..LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or(VnetError::Short)?;
        let le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let h = VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: le(2),
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
        };
        h.gso()?;
        Ok(h)
    }

    /// Write the header into the first [`LEN`] bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), VnetError> {
        let b = b.get_mut(..LEN).ok_or(VnetError::Short)?;
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        Ok(())
    }

    /// The superframe kind (`gso_type` without the ECN bit).
    pub fn gso(&self) -> Result<Gso, VnetError> {
        let ecn = self.gso_type & GSO_ECN != 0;
        let kind = match self.gso_type & !GSO_ECN {
            GSO_NONE => Gso::None,
            GSO_TCPV4 => Gso::TcpV4,
            GSO_TCPV6 => Gso::TcpV6,
            GSO_UDP_L4 => Gso::UdpL4,
            other => return Err(VnetError::UnknownGso(other)),
        };
        if ecn && !matches!(kind, Gso::TcpV4 | Gso::TcpV6) {
            return Err(VnetError::EcnNotTcp);
        }
        Ok(kind)
    }

    /// True when `F_NEEDS_CSUM` is set.
    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_is_little_endian() {
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4 | GSO_ECN,
            hdr_len: 0x0134,
            gso_size: 1448,
            csum_start: 20,
            csum_offset: 16,
        };
        let mut b = [0u8; LEN];
        h.emit(&mut b).unwrap();
        assert_eq!(b, [1, 0x81, 0x34, 0x01, 0xa8, 0x05, 20, 0, 16, 0]);
        assert_eq!(VnetHdr::parse(&b), Ok(h));
        assert_eq!(h.gso(), Ok(Gso::TcpV4));
        assert!(h.needs_csum());
    }

    #[test]
    fn errors_are_typed() {
        assert_eq!(VnetHdr::parse(&[0; 9]), Err(VnetError::Short));
        assert_eq!(VnetHdr::NONE.emit(&mut [0; 9]), Err(VnetError::Short));
        let mut b = [0u8; LEN];
        b[1] = GSO_UDP;
        assert_eq!(VnetHdr::parse(&b), Err(VnetError::UnknownGso(GSO_UDP)));
        b[1] = 9;
        assert_eq!(VnetHdr::parse(&b), Err(VnetError::UnknownGso(9)));
        b[1] = GSO_UDP_L4 | GSO_ECN;
        assert_eq!(VnetHdr::parse(&b), Err(VnetError::EcnNotTcp));
        b[1] = GSO_TCPV6 | GSO_ECN;
        assert_eq!(VnetHdr::parse(&b).map(|h| h.gso()), Ok(Ok(Gso::TcpV6)));
    }
}
