//! A TSO superframe as an offloaded TUN hands it out, for the offload tests and bench
//! (included with `#[path]`): the virtio header (`F_NEEDS_CSUM`, `GSO_TCPV4`), IPv4
//! 10.0.0.1 -> 10.0.0.2 with DF, TCP 40000 -> 5201 with `options` and `flags`, and
//! `segments` × 1448 bytes of payload (byte i is `i as u8`); the TCP checksum field holds
//! the pseudo-header sum, as the kernel leaves it.

use braid_core::offload::checksum;
use braid_core::offload::vnet::{self, VnetHdr};

/// The segment size.
const MSS: usize = 1448;

/// Write the superframe into `buf`; its length.
pub fn tso_v4(
    buf: &mut [u8],
    seq: u32,
    segments: usize,
    id: u16,
    options: &[u8],
    flags: u8,
) -> usize {
    let tcp_len = 20 + options.len();
    let payload = MSS * segments;
    let total = 20 + tcp_len + payload;
    let hdr = VnetHdr {
        flags: vnet::F_NEEDS_CSUM,
        gso_type: vnet::GSO_TCPV4,
        hdr_len: (20 + tcp_len) as u16,
        gso_size: MSS as u16,
        csum_start: 20,
        csum_offset: 16,
    };
    hdr.emit(buf).expect("room for the header");
    let ip = &mut buf[vnet::LEN..vnet::LEN + total];
    ip.fill(0);
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    ip[20..24].copy_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
    ip[24..28].copy_from_slice(&seq.to_be_bytes());
    ip[32] = ((tcp_len / 4) as u8) << 4;
    ip[33] = flags;
    ip[34] = 0x01;
    ip[40..40 + options.len()].copy_from_slice(options);
    for (i, b) in ip[20 + tcp_len..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let ps = checksum::pseudo_v4(
        &[10, 0, 0, 1],
        &[10, 0, 0, 2],
        6,
        (tcp_len + payload) as u16,
    );
    ip[36..38].copy_from_slice(&ps.to_be_bytes());
    vnet::LEN + total
}
