//! A device's current address (`getifaddrs`), for paths whose `local` follows their
//! uplink (`local = "0.0.0.0:PORT"` with `dev`).
use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is one of this host's addresses (on any device).
pub fn is_local(ip: IpAddr) -> io::Result<bool> {
    let mut found = false;
    each_address(&mut |_, a| {
        found |= a == ip;
        found
    })?;
    Ok(found)
}

/// The first address of `dev` in the family of `v4` (IPv6: the first global one, not
/// link-local, which would need a scope). `Ok(None)` when the device has none (or does not
/// exist).
pub fn device_address(dev: &str, v4: bool) -> io::Result<Option<IpAddr>> {
    let mut found = None;
    each_address(&mut |name, a| {
        let wanted = match a {
            IpAddr::V4(_) => v4,
            IpAddr::V6(a6) => !v4 && !a6.is_unicast_link_local(),
        };
        if name == dev.as_bytes() && wanted {
            found = Some(a);
        }
        found.is_some()
    })?;
    Ok(found)
}

/// Calls `f(device name, address)` for each IPv4 and IPv6 address of the host until it
/// returns true.
fn each_address(f: &mut dyn FnMut(&[u8], IpAddr) -> bool) -> io::Result<()> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
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
        // SAFETY: ifa_addr is non-null and points to a sockaddr of the family it names.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let addr = match family {
            libc::AF_INET => {
                // SAFETY: an AF_INET sockaddr is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
            }
            _ => continue,
        };
        if f(name.to_bytes(), addr) {
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(())
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
        assert!(is_local(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap());
        // TEST-NET-3: on no host of this project's.
        assert!(!is_local(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 77))).unwrap());
    }
}
