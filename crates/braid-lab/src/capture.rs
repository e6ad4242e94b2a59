//! Counting what leaves on a link: a packet socket (`AF_PACKET`) inside a lab namespace
//! sees every frame sent on the chosen devices, with the kernel's timestamp, and bins
//! the bytes a caller-supplied function finds in each. The link-sharing scenarios use
//! it to check a ceil where it applies, on the link, rather than after the far end has
//! reordered (and so bunched) what arrived.
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use anyhow::{bail, Result};

use super::netns::{interrupted, now, spawn_in_netns};
use super::udpgen::BIN;

/// What a frame counts for, in bytes (None: not counted).
pub type Counter = fn(&[u8]) -> Option<usize>;

/// IPv4 packets: the IP length of an Ethernet frame carrying IPv4.
pub fn ipv4_bytes(frame: &[u8]) -> Option<usize> {
    (frame.get(12..14)? == [0x08, 0x00]).then(|| frame.len() - 14)
}

/// braid data: the inner IP packet's bytes in a braid Data, PinnedData or DataPart
/// datagram (version 1, bare or in the tag envelope of `encryption = "none"`) sent over
/// UDP/IPv4 to port 7000 (the lab's path port).
pub fn braid_data_bytes(frame: &[u8]) -> Option<usize> {
    let ip = frame.get(14..).filter(|_| ipv4_bytes(frame).is_some())?;
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    if *ip.get(9)? != 17 {
        return None;
    }
    let udp = ip.get(ihl..)?;
    if udp.get(2..4)? != 7000u16.to_be_bytes() {
        return None;
    }
    let mut payload = udp.get(8..)?;
    if payload.first() == Some(&braid_core::wire::TAGGED_VERSION) {
        payload = payload.get(braid_core::wire::TAG_HEADER_LEN..)?;
    }
    let (version, kind) = (*payload.first()?, *payload.get(1)?);
    if version != braid_core::wire::VERSION {
        return None;
    }
    let header = match kind {
        0 | 4 => braid_core::wire::DATA_HEADER_LEN,
        5 => braid_core::wire::DATA_PART_HEADER_LEN,
        _ => return None,
    };
    payload.len().checked_sub(header)
}

/// Count frames sent on `devs` in namespace `ns` from `start` until `until_s`, in
/// [`BIN`]s, as `count` measures them.
pub fn egress(
    ns: &str,
    devs: &[String],
    start: Instant,
    until_s: f64,
    count: Counter,
) -> Result<std::thread::JoinHandle<Result<Vec<u64>>>> {
    let devs = devs.to_vec();
    spawn_in_netns(ns, move || {
        let fd = open_packet_socket()?;
        let mut ifindexes = Vec::new();
        for d in &devs {
            let name = CString::new(d.as_str())?;
            // SAFETY: if_nametoindex reads a NUL-terminated string we own.
            let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
            if i == 0 {
                bail!("no device {d} in the namespace");
            }
            ifindexes.push(i32::try_from(i).unwrap_or(0));
        }
        let bins = (until_s / BIN.as_secs_f64()).ceil() as usize + 1;
        let mut out = vec![0u64; bins];
        let mut buf = vec![0u8; 65536];
        let real_at_start = realtime_ns() - i128::try_from((now() - start).as_nanos()).unwrap_or(0);
        while start.elapsed().as_secs_f64() < until_s && !interrupted() {
            let Some((n, ifindex, outgoing, at)) = recv(&fd, &mut buf) else {
                continue;
            };
            if !outgoing || !ifindexes.contains(&ifindex) {
                continue;
            }
            let Some(bytes) = buf.get(..n).and_then(count) else {
                continue;
            };
            let i = usize::try_from((at - real_at_start) / BIN.as_nanos() as i128).unwrap_or(0);
            if let Some(b) = out.get_mut(i) {
                *b += bytes as u64;
            }
        }
        Ok(out)
    })
}

fn open_packet_socket() -> Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
    if raw < 0 {
        bail!("packet socket: {}", std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let on: libc::c_int = 1;
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 50_000,
    };
    // SAFETY: setsockopt on our socket with pointers to live values and their sizes.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    Ok(fd)
}

/// CLOCK_REALTIME in ns (the clock of `SO_TIMESTAMPNS`).
pub(super) fn realtime_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// One frame: (length, ifindex, sent by this host, kernel timestamp ns realtime).
fn recv(fd: &OwnedFd, buf: &mut [u8]) -> Option<(usize, i32, bool, i128)> {
    // SAFETY: all-zero is a valid sockaddr_ll and msghdr.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16];
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut addr as *mut libc::sockaddr_ll).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg with buffers that outlive the call and their true sizes.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC) };
    if n < 0 {
        return None;
    }
    let at = timestamp_ns(&msg);
    let len = usize::try_from(n).ok()?.min(buf.len());
    let outgoing = addr.sll_pkttype == libc::PACKET_OUTGOING;
    Some((
        len,
        addr.sll_ifindex,
        outgoing,
        at.unwrap_or_else(realtime_ns),
    ))
}

/// The `SCM_TIMESTAMPNS` a `recvmsg` returned in `msg`'s control buffer, ns realtime.
pub(super) fn timestamp_ns(msg: &libc::msghdr) -> Option<i128> {
    let mut at = None;
    // SAFETY: walking the control messages the kernel wrote into `msg`'s control buffer,
    // with libc's macros, which stay within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                at = Some(i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec));
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ethertype: [u8; 2], ip: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype);
        f.extend_from_slice(ip);
        f
    }

    #[test]
    fn counts_ipv4_and_braid_data_only() {
        assert_eq!(ipv4_bytes(&frame([0x08, 0x00], &[0x45; 100])), Some(100));
        assert_eq!(ipv4_bytes(&frame([0x86, 0xdd], &[0x60; 100])), None);
        // IPv4 + UDP to 7000 + braid Data header + 1000 bytes of inner packet.
        let mut ip = vec![0u8; 20 + 8 + 20 + 1000];
        ip[0] = 0x45;
        ip[9] = 17;
        ip[22..24].copy_from_slice(&7000u16.to_be_bytes());
        ip[28] = braid_core::wire::VERSION;
        ip[29] = 0;
        assert_eq!(braid_data_bytes(&frame([0x08, 0x00], &ip)), Some(1000));
        ip[29] = 3; // an Ack
        assert_eq!(braid_data_bytes(&frame([0x08, 0x00], &ip)), None);
        ip[29] = 4; // PinnedData
        assert_eq!(braid_data_bytes(&frame([0x08, 0x00], &ip)), Some(1000));
        ip[29] = 5; // a DataPart: 3 bytes more header
        assert_eq!(braid_data_bytes(&frame([0x08, 0x00], &ip)), Some(997));
        // In the tag envelope of encryption = "none".
        let mut tagged = ip[..28].to_vec();
        tagged.push(braid_core::wire::TAGGED_VERSION);
        tagged.extend_from_slice(&[7; 16]);
        tagged.extend_from_slice(&ip[28..]);
        tagged[29 + 17] = 0; // a Data again
        assert_eq!(braid_data_bytes(&frame([0x08, 0x00], &tagged)), Some(1000));
        ip[23] = 1; // another port
        assert_eq!(braid_data_bytes(&frame([0x08, 0x00], &ip)), None);
        assert_eq!(braid_data_bytes(&[0u8; 10]), None);
    }
}
