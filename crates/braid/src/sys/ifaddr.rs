//! A device's current address (`getifaddrs`), for paths whose `local` follows their
//! uplink (`local = "0.0.0.0:PORT"` with `dev`).
use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The first address of `dev` in the family of `v4` (IPv6: the first global one, not
/// link-local, which would need a scope). `Ok(None)` when the device has none (or does not
/// exist).
pub fn device_address(dev: &str, v4: bool) -> io::Result<Option<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
        if name.to_bytes() != dev.as_bytes() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr of the family it names.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let addr = match family {
            libc::AF_INET if v4 => {
                // SAFETY: an AF_INET sockaddr is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))))
            }
            libc::AF_INET6 if !v4 => {
                // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let a = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                (!a.is_unicast_link_local()).then_some(IpAddr::V6(a))
            }
            _ => None,
        };
        if addr.is_some() {
            found = addr;
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_127_0_0_1() {
        assert_eq!(
            device_address("lo", true).unwrap(),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(device_address("no-such-dev0", true).unwrap(), None);
    }
}
