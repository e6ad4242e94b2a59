//! A member port of an Ethernet bond: an `AF_PACKET`/`SOCK_RAW` socket for every protocol
//! (`ETH_P_ALL`), bound to one device, non-blocking.
//!
//! - It never returns a frame the host sends on the device (`PACKET_IGNORE_OUTGOING`,
//!   Linux 4.20; on older kernels each read's `sll_pkttype` is checked and outgoing frames
//!   are skipped). A packet socket never sees its own sends in any case.
//! - Promiscuous when asked, through `PACKET_ADD_MEMBERSHIP`/`PACKET_MR_PROMISC`: a
//!   reference the kernel drops when the socket closes, so a crash leaves no promiscuous
//!   NIC behind (unlike `ip link set promisc on`).
//! - With `vnet_hdr` (`PACKET_VNET_HDR`), every frame read and written starts with the
//!   10-byte `virtio_net_hdr`: GSO superframes (up to 64 KB) arrive and leave whole.
//! - VLAN tags: the kernel takes an 802.1Q/802.1ad tag off every frame it receives
//!   (`skb_vlan_untag`, or the NIC's rx-vlan offload) before packet sockets see it, and
//!   reports it only in `PACKET_AUXDATA`. [`PacketSocket::recv`] asks for that and puts
//!   the tag back in the frame (after the two MAC addresses, with its TPID), and moves the
//!   virtio header's `csum_start` by the 4 bytes, so a tagged frame reaches the caller as
//!   it was on the wire. Sent frames go out as given, tag included.
//! - The socket's receive buffer is raised to [`RCVBUF`] so that 64 KB GSO frames fit.
use std::io;
use std::mem::{size_of, size_of_val};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, netdev};

/// The receive buffer asked for (`SO_RCVBUFFORCE`, else `SO_RCVBUF` within `rmem_max`).
pub const RCVBUF: usize = 4 << 20;
/// The largest read: the virtio header, a 64 KB GSO frame and a VLAN tag put back.
pub const MAX_RECV: usize = VNET_HDR_LEN + 65535 + VLAN_HLEN;

const VNET_HDR_LEN: usize = 10;
const VLAN_HLEN: usize = 4;
/// `virtio_net_hdr.flags`: the checksum from `csum_start` is left to do.
const VNET_F_NEEDS_CSUM: u8 = 1;

// linux/if_packet.h
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_MR_PROMISC: u16 = 1;
const PACKET_AUXDATA: libc::c_int = 8;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_OUTGOING: u8 = 4;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const ETH_P_8021Q: u16 = 0x8100;
/// Outgoing frames skipped per [`PacketSocket::recv`] (the fallback filter) before it
/// says `WouldBlock` (the socket stays readable; the next call goes on).
const OUTGOING_SKIPS: usize = 64;

/// `struct packet_mreq`.
#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: u16,
    mr_alen: u16,
    mr_address: [u8; 8],
}

/// A raw packet socket on one device.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: u32,
    mac: [u8; 6],
    vnet_hdr: bool,
    /// The kernel refused `PACKET_IGNORE_OUTGOING`: skip outgoing frames on read.
    filter_outgoing: bool,
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, v: &T) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<T>()).expect("option size fits socklen_t");
    // SAFETY: `v` points to a valid T of `len` bytes, the type the option expects.
    cvt(unsafe { libc::setsockopt(fd.as_raw_fd(), level, opt, (v as *const T).cast(), len) })
        .map(|_| ())
}

impl PacketSocket {
    /// Open a packet socket on `dev`: promiscuous if `promisc`, with the virtio header
    /// on every frame if `vnet_hdr`.
    pub fn open(dev: &str, promisc: bool, vnet_hdr: bool) -> io::Result<PacketSocket> {
        PacketSocket::open_with(dev, promisc, vnet_hdr, true)
    }

    /// As [`PacketSocket::open`], without asking for `PACKET_IGNORE_OUTGOING`: outgoing
    /// frames are then skipped by their `sll_pkttype` (what happens on kernels before
    /// 4.20). For tests of that path.
    #[doc(hidden)]
    pub fn open_filtering(dev: &str, promisc: bool, vnet_hdr: bool) -> io::Result<PacketSocket> {
        PacketSocket::open_with(dev, promisc, vnet_hdr, false)
    }

    fn open_with(
        dev: &str,
        promisc: bool,
        vnet_hdr: bool,
        ignore_outgoing: bool,
    ) -> io::Result<PacketSocket> {
        let ifindex = netdev::ifindex(dev)?;
        let mac = netdev::hwaddr(dev)?;
        let ctx = |e: io::Error, what: &str| netdev::with_context(e, &format!("{dev}: {what}"));
        // Protocol 0: no frame is queued until bind() names the protocol and the device.
        // SAFETY: plain socket(2); the fd is owned at once.
        let fd = unsafe {
            OwnedFd::from_raw_fd(
                cvt(libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    0,
                ))
                .map_err(|e| ctx(e, "packet socket"))?,
            )
        };
        let one: libc::c_int = 1;
        let filter_outgoing = !ignore_outgoing
            || setsockopt(&fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &one).is_err();
        setsockopt(&fd, libc::SOL_PACKET, PACKET_AUXDATA, &one)
            .map_err(|e| ctx(e, "PACKET_AUXDATA"))?;
        if vnet_hdr {
            setsockopt(&fd, libc::SOL_PACKET, PACKET_VNET_HDR, &one)
                .map_err(|e| ctx(e, "PACKET_VNET_HDR"))?;
        }
        let size = libc::c_int::try_from(RCVBUF).expect("RCVBUF fits an int");
        if setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &size).is_err() {
            // Without CAP_NET_ADMIN: as much as rmem_max allows.
            let _ = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &size);
        }
        let ifindex_c = libc::c_int::try_from(ifindex)
            .map_err(|_| io::Error::other(format!("{dev}: bad index {ifindex}")))?;
        if promisc {
            let mreq = PacketMreq {
                mr_ifindex: ifindex_c,
                mr_type: PACKET_MR_PROMISC,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            setsockopt(&fd, libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(|e| ctx(e, "promiscuous mode"))?;
        }
        // SAFETY: sockaddr_ll is plain data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex_c;
        let len = libc::socklen_t::try_from(size_of_val(&sll)).expect("sockaddr_ll size");
        // SAFETY: sll is a valid sockaddr_ll of `len` bytes.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                len,
            )
        })
        .map_err(|e| ctx(e, "bind packet socket"))?;
        Ok(PacketSocket {
            fd,
            ifindex,
            mac,
            vnet_hdr,
            filter_outgoing,
        })
    }

    /// Read one frame (virtio header first when opened with `vnet_hdr`), its VLAN tag
    /// put back; `WouldBlock` when none is waiting. Never a frame the host sent on the
    /// device. A frame longer than `buf` (less 4 bytes kept for a tag) is dropped with
    /// an `InvalidData` error; [`MAX_RECV`] bytes always suffice.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let room = buf.len().saturating_sub(VLAN_HLEN);
        for _ in 0..OUTGOING_SKIPS {
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: room,
            };
            // SAFETY: plain data; all-zero is valid.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            // Room for one tpacket_auxdata control message, aligned.
            let mut control = [0u64; 8];
            // SAFETY: plain data; all-zero is valid.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
            msg.msg_namelen = libc::socklen_t::try_from(size_of_val(&from)).expect("size");
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = size_of_val(&control);
            // SAFETY: msg points to live buffers of the lengths it gives.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if self.filter_outgoing && from.sll_pkttype == PACKET_OUTGOING {
                continue;
            }
            let n = n.unsigned_abs();
            if n > room {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a frame of {n} bytes does not fit a {room}-byte buffer; dropped"),
                ));
            }
            let tag = auxdata_tag(&msg);
            let off = if self.vnet_hdr { VNET_HDR_LEN } else { 0 };
            return Ok(match tag {
                Some((tpid, tci)) => put_tag_back(buf, n, off, tpid, tci),
                None => n,
            });
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Send one frame (virtio header first when opened with `vnet_hdr`) out of the device.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: frame is valid for reads of its length.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n.unsigned_abs() != frame.len() {
            return Err(io::Error::other(format!(
                "sent {n} of {} bytes",
                frame.len()
            )));
        }
        Ok(())
    }

    /// The device's Ethernet address (when the socket was opened).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The device's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// True when frames carry the virtio header.
    pub fn vnet_hdr(&self) -> bool {
        self.vnet_hdr
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The VLAN tag (TPID, TCI) the kernel took off the frame, from its `PACKET_AUXDATA`.
fn auxdata_tag(msg: &libc::msghdr) -> Option<(u16, u16)> {
    // SAFETY: msg is the header recvmsg filled; CMSG_* walk its control buffer within
    // msg_controllen.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !c.is_null() {
        // SAFETY: c is a control message header inside the buffer.
        let h = unsafe { &*c };
        if h.cmsg_level == libc::SOL_PACKET && h.cmsg_type == PACKET_AUXDATA {
            // SAFETY: as above; the data follows the header.
            let data = unsafe { libc::CMSG_DATA(c) };
            // SAFETY: CMSG_LEN of 0 is the header's size, within cmsg_len.
            let hdr = unsafe { libc::CMSG_LEN(0) } as usize;
            let len = h.cmsg_len.saturating_sub(hdr);
            // tpacket_auxdata: status u32, len u32, snaplen u32, mac u16, net u16,
            // vlan_tci u16, vlan_tpid u16.
            if len < 20 {
                return None;
            }
            // SAFETY: `len` bytes of data are in the buffer.
            let d = unsafe { std::slice::from_raw_parts(data, 20) };
            return aux_tag(d);
        }
        // SAFETY: walking the same buffer.
        c = unsafe { libc::CMSG_NXTHDR(msg, c) };
    }
    None
}

/// The tag a `tpacket_auxdata` (native byte order) reports, if any.
fn aux_tag(d: &[u8]) -> Option<(u16, u16)> {
    let u16_at = |i: usize| {
        d.get(i..i + 2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
            .unwrap_or(0)
    };
    let status = d
        .get(0..4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))?;
    if status & TP_STATUS_VLAN_VALID == 0 {
        return None;
    }
    let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
        u16_at(18)
    } else {
        ETH_P_8021Q
    };
    Some((tpid, u16_at(16)))
}

/// Insert the tag (`tpid`, `tci`) after the MAC addresses of the frame at `buf[off..n]`
/// (`off`: the virtio header's length, whose `csum_start` then moves by 4). `buf` has
/// room for 4 more bytes. The new length; a frame too short for its MAC addresses is
/// left as it is.
fn put_tag_back(buf: &mut [u8], n: usize, off: usize, tpid: u16, tci: u16) -> usize {
    let at = off + 12;
    if n < at || n + VLAN_HLEN > buf.len() {
        return n;
    }
    buf.copy_within(at..n, at + VLAN_HLEN);
    let tpid = tpid.to_be_bytes();
    let tci = tci.to_be_bytes();
    if let Some(t) = buf.get_mut(at..at + VLAN_HLEN) {
        t.copy_from_slice(&[tpid[0], tpid[1], tci[0], tci[1]]);
    }
    if off >= VNET_HDR_LEN && buf.first().is_some_and(|f| f & VNET_F_NEEDS_CSUM != 0) {
        if let Some(cs) = buf.get_mut(6..8) {
            let v = u16::from_le_bytes([cs[0], cs[1]]).saturating_add(VLAN_HLEN as u16);
            cs.copy_from_slice(&v.to_le_bytes());
        }
    }
    n + VLAN_HLEN
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 4];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14..].copy_from_slice(&[1, 2, 3, 4]);
        f
    }

    #[test]
    fn a_tag_goes_back_after_the_macs() {
        let f = frame();
        let mut buf = vec![0u8; 64];
        buf[..f.len()].copy_from_slice(&f);
        let n = put_tag_back(&mut buf, f.len(), 0, 0x8100, 0x2064);
        assert_eq!(n, f.len() + 4);
        assert_eq!(&buf[..12], &f[..12]);
        assert_eq!(&buf[12..16], &[0x81, 0x00, 0x20, 0x64]);
        assert_eq!(&buf[16..n], &f[12..]);
    }

    #[test]
    fn with_a_virtio_header_csum_start_moves() {
        let f = frame();
        let mut buf = vec![0u8; 64];
        // flags NEEDS_CSUM, csum_start 34, csum_offset 16.
        buf[..10].copy_from_slice(&[1, 0, 0, 0, 0, 0, 34, 0, 16, 0]);
        buf[10..10 + f.len()].copy_from_slice(&f);
        let n = put_tag_back(&mut buf, 10 + f.len(), 10, 0x88a8, 5);
        assert_eq!(n, 10 + f.len() + 4);
        assert_eq!(&buf[6..10], &[38, 0, 16, 0]);
        assert_eq!(&buf[22..26], &[0x88, 0xa8, 0, 5]);
        assert_eq!(&buf[26..n], &f[12..]);
        // Without NEEDS_CSUM the header is left alone.
        let mut buf2 = vec![0u8; 64];
        buf2[..10].copy_from_slice(&[0, 0, 0, 0, 0, 0, 34, 0, 16, 0]);
        buf2[10..10 + f.len()].copy_from_slice(&f);
        put_tag_back(&mut buf2, 10 + f.len(), 10, 0x8100, 5);
        assert_eq!(&buf2[6..8], &[34, 0]);
    }

    #[test]
    fn short_frames_and_full_buffers_are_left_alone() {
        let mut buf = [7u8; 16];
        assert_eq!(put_tag_back(&mut buf, 10, 0, 0x8100, 1), 10);
        assert_eq!(buf, [7u8; 16]);
        assert_eq!(put_tag_back(&mut buf, 14, 0, 0x8100, 1), 14);
    }

    #[test]
    fn auxdata_reports_a_tag_only_when_valid() {
        let mut d = [0u8; 20];
        assert_eq!(aux_tag(&d), None);
        d[..4].copy_from_slice(&TP_STATUS_VLAN_VALID.to_ne_bytes());
        d[16..18].copy_from_slice(&100u16.to_ne_bytes());
        assert_eq!(aux_tag(&d), Some((0x8100, 100)));
        d[..4].copy_from_slice(&(TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID).to_ne_bytes());
        d[18..20].copy_from_slice(&0x88a8u16.to_ne_bytes());
        assert_eq!(aux_tag(&d), Some((0x88a8, 100)));
        assert_eq!(aux_tag(&d[..3]), None);
    }
}
