//! The Ethernet bond's system side against the real kernel, in two fresh namespaces
//! joined by a veth pair (`a0` in the first, `b0` in the second): the TAP, packet sockets
//! (promiscuous, outgoing frames hidden, VLAN tags kept, a GSO frame with its virtio
//! header), the netlink carrier watch, and the addresses and routes moved onto the bond
//! and back (also after a crash, and the default-route refusal).
#![allow(clippy::disallowed_methods)] // deadlines and the carrier watch's delay are real time
#![allow(clippy::unwrap_used)] // a test fails by panicking

mod common;

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use braid::daemon::{repair, take_over, AddrError};
use braid::sys::link_watch::{carrier, LinkWatch};
use braid::sys::packet::{PacketSocket, MAX_RECV};
use braid::sys::tap::Tap;

/// Two namespaces with a veth pair between them, deleted on drop (also when the test
/// fails).
struct Pair {
    a: String,
    b: String,
}

impl Pair {
    fn new(tag: &str) -> Pair {
        let pid = std::process::id();
        let p = Pair {
            a: format!("braid-es-{pid}-{tag}-a"),
            b: format!("braid-es-{pid}-{tag}-b"),
        };
        ip(&["netns", "add", &p.a]);
        ip(&["netns", "add", &p.b]);
        ip(&[
            "-n", &p.a, "link", "add", "a0", "type", "veth", "peer", "name", "b0", "netns", &p.b,
        ]);
        for (ns, dev) in [(&p.a, "a0"), (&p.b, "b0")] {
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        p
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run `f` on a thread inside namespace `ns` (sockets, devices and the commands it
/// starts are there).
fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).expect("open netns");
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns on a namespace fd; it changes only this thread.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("namespace thread")
    })
}

/// `ip -d -j link show dev` in `ns`, as JSON.
fn link(ns: &str, dev: &str) -> serde_json::Value {
    let out = ip(&["-n", ns, "-d", "-j", "link", "show", "dev", dev]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("ip -j output");
    v[0].clone()
}

/// Wait until `fd` is readable or `until`; true if readable.
fn readable(fd: &impl AsRawFd, until: Instant) -> bool {
    let left = until.saturating_duration_since(Instant::now());
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(1000);
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Every frame `s` receives until `until` or until one carries `last` as its payload's
/// first byte (whose ethertype is 0x88b5).
fn frames_until(s: &PacketSocket, last: u8, until: Instant) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; MAX_RECV];
    while Instant::now() < until {
        if !readable(s, until) {
            break;
        }
        while let Ok(n) = s.recv(&mut buf) {
            let f = buf[..n].to_vec();
            let done = f.get(12..15) == Some(&[0x88, 0xb5, last][..]);
            seen.push(f);
            if done {
                return seen;
            }
        }
    }
    seen
}

const FOREIGN: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];

fn frame(dst: [u8; 6], src: [u8; 6], tag: Option<u16>, first: u8) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend(dst);
    f.extend(src);
    if let Some(vid) = tag {
        f.extend([0x81, 0x00]);
        f.extend(vid.to_be_bytes());
    }
    f.extend([0x88, 0xb5, first]);
    f.extend((0..60u8).map(|i| i.wrapping_mul(7)));
    f
}

fn flags(v: &serde_json::Value) -> Vec<String> {
    v["flags"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn tap_opens_with_the_mac_and_mtu_asked() {
    let Some(_one) = common::netns_or_skip("tap_opens_with_the_mac_and_mtu_asked") else {
        return;
    };
    let p = Pair::new("tap");
    let mac = [0x02, 0x42, 0, 0, 0, 0x01];
    let tap = in_ns(&p.a, || {
        Tap::open("btap0", mac, 1400, true).expect("open TAP")
    });
    assert_eq!(tap.name(), "btap0");
    assert!(tap.vnet_hdr());
    eprintln!("TAP offloads the kernel took: {:?}", tap.offloads());
    let l = link(&p.a, "btap0");
    assert_eq!(l["address"], "02:42:00:00:00:01");
    assert_eq!(l["mtu"], 1400);
    assert!(flags(&l).contains(&"UP".to_string()), "{l}");
    // What the host sends on it (IPv6 MLD, router solicitations) reads as the virtio
    // header then a frame from the TAP's MAC; then WouldBlock, not a hang.
    let mut buf = [0u8; 2048];
    let mut ended = false;
    for _ in 0..100 {
        match tap.read(&mut buf) {
            Ok(n) => assert_eq!(&buf[16..22.min(n)], &mac[..], "{:?}", &buf[..n]),
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
                ended = true;
                break;
            }
        }
    }
    assert!(ended);
    drop(tap);
    let out = Command::new("ip")
        .args(["-n", &p.a, "link", "show", "dev", "btap0"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the TAP goes with its fd");
    // Without the virtio header.
    let tap = in_ns(&p.a, || {
        Tap::open("btap1", mac, 1500, false).expect("open TAP")
    });
    assert!(!tap.vnet_hdr());
}

/// Frames from a0 reach b0's promiscuous socket, a VLAN tag included; b0's own
/// outgoing frames (another socket sending on b0) never show up on it.
fn packet_sockets_cross(filtering: bool) {
    let tag = if filtering { "pkf" } else { "pk" };
    let p = Pair::new(tag);
    let tx = in_ns(&p.a, || {
        PacketSocket::open("a0", false, false).expect("a0 socket")
    });
    let rx = in_ns(&p.b, || {
        if filtering {
            PacketSocket::open_filtering("b0", true, false)
        } else {
            PacketSocket::open("b0", true, false)
        }
        .expect("b0 socket")
    });
    let other = in_ns(&p.b, || {
        PacketSocket::open("b0", false, false).expect("b0 sender")
    });
    assert_eq!(rx.mac(), other.mac());
    let b0 = link(&p.b, "b0");
    assert_eq!(rx.ifindex(), b0["ifindex"].as_u64().unwrap() as u32);
    assert_eq!(
        b0["address"].as_str().unwrap(),
        braid::config::format_mac(rx.mac())
    );
    assert_eq!(b0["promiscuity"], 1, "{b0}");

    // Outgoing on b0 first, then three frames from a0: plain, tagged, and the last.
    other
        .send(&frame(FOREIGN, other.mac(), None, 0xee))
        .unwrap();
    let plain = frame(FOREIGN, tx.mac(), None, 1);
    let tagged = frame(FOREIGN, tx.mac(), Some(0x2064), 2);
    tx.send(&plain).unwrap();
    tx.send(&tagged).unwrap();
    tx.send(&frame(FOREIGN, tx.mac(), None, 3)).unwrap();
    let seen = frames_until(&rx, 3, Instant::now() + Duration::from_secs(2));
    let ours: Vec<&Vec<u8>> = seen
        .iter()
        .filter(|f| f.get(6..12) == Some(&tx.mac()[..]))
        // Not the namespace's own traffic (IPv6 MLD reports...).
        .filter(|f| matches!(f.get(12..14), Some([0x88, 0xb5]) | Some([0x81, 0x00])))
        .collect();
    assert!(
        seen.iter().all(|f| f.get(6..12) != Some(&other.mac()[..])),
        "an outgoing frame of b0 was read"
    );
    assert_eq!(ours.len(), 3, "frames from a0: {ours:?}");
    assert_eq!(ours[0], &plain);
    assert_eq!(ours[1], &tagged, "the VLAN tag is back in place");

    // Closing the socket ends promiscuous mode (the kernel's membership goes with it).
    drop(rx);
    let b0 = link(&p.b, "b0");
    assert_eq!(b0["promiscuity"], 0, "{b0}");
}

#[test]
fn packet_sockets_cross_a_veth() {
    let Some(_one) = common::netns_or_skip("packet_sockets_cross_a_veth") else {
        return;
    };
    packet_sockets_cross(false);
}

#[test]
fn packet_sockets_filter_outgoing_without_the_option() {
    let Some(_one) = common::netns_or_skip("packet_sockets_filter_outgoing_without_the_option")
    else {
        return;
    };
    packet_sockets_cross(true);
}

/// A TCP superframe (3 x 1000 bytes) sent with its virtio header arrives, whole or as
/// segments, every payload byte there.
#[test]
fn a_gso_frame_goes_through_with_its_virtio_header() {
    let Some(_one) = common::netns_or_skip("a_gso_frame_goes_through_with_its_virtio_header")
    else {
        return;
    };
    let p = Pair::new("gso");
    let tx = in_ns(&p.a, || {
        PacketSocket::open("a0", false, true).expect("a0 socket")
    });
    let rx = in_ns(&p.b, || {
        PacketSocket::open("b0", true, true).expect("b0 socket")
    });
    assert!(tx.vnet_hdr() && rx.vnet_hdr());
    let payload = 3000usize;
    let mut f = Vec::new();
    // virtio_net_hdr: NEEDS_CSUM, TCPV4, hdr_len 54, gso_size 1000, csum 34+16.
    f.extend([1u8, 1]);
    f.extend(54u16.to_le_bytes());
    f.extend(1000u16.to_le_bytes());
    f.extend(34u16.to_le_bytes());
    f.extend(16u16.to_le_bytes());
    f.extend(rx.mac());
    f.extend(tx.mac());
    f.extend([0x08, 0x00]);
    let total = (20 + 20 + payload) as u16;
    let mut iph = vec![0x45, 0];
    iph.extend(total.to_be_bytes());
    iph.extend([0, 1, 0x40, 0, 64, 6, 0, 0, 10, 9, 0, 1, 10, 9, 0, 2]);
    let sum = !iph
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .fold(0u32, |a, b| {
            let s = a + b;
            (s & 0xffff) + (s >> 16)
        }) as u16;
    iph[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend(&iph);
    // TCP: ports 1000 -> 2000, seq 1, ack 0, data offset 5, ACK|PSH, window.
    f.extend([
        0x03, 0xe8, 0x07, 0xd0, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff,
    ]);
    f.extend([0, 0, 0, 0]);
    f.extend((0..payload).map(|i| (i % 251) as u8));
    tx.send(&f).expect("send a GSO frame");

    let until = Instant::now() + Duration::from_secs(2);
    let mut buf = vec![0u8; MAX_RECV];
    let mut got = 0usize;
    let mut reads = 0;
    while got < payload && Instant::now() < until {
        if !readable(&rx, until) {
            break;
        }
        while let Ok(n) = rx.recv(&mut buf) {
            let fr = &buf[..n];
            // Only our TCP frames (the namespace may send IPv6 router solicitations).
            if fr.get(22..24) != Some(&[0x08, 0x00][..]) || fr.get(33) != Some(&6) {
                continue;
            }
            reads += 1;
            got += n - 10 - 54;
            if n == 10 + 54 + payload {
                // Whole: the virtio header still says TCPV4 in 1000-byte segments.
                assert_eq!(fr[1], 1, "gso_type");
                assert_eq!(&fr[4..6], &1000u16.to_le_bytes(), "gso_size");
            }
        }
    }
    eprintln!("GSO frame of {payload} bytes arrived in {reads} read(s)");
    assert_eq!(got, payload);
}

/// Waits for a0's carrier to become `up` after `ip link set b0 up/down`: from the
/// notices alone (`poll_every` None) or also asking every `poll_every`. The delay.
fn carrier_change(
    p: &Pair,
    watch: &mut LinkWatch,
    a0: u32,
    up: bool,
    poll_every: Option<Duration>,
) -> Duration {
    // From the moment `ip` is done (the change is made by then): the time `ip` takes
    // to start is not the watch's.
    ip(&[
        "-n",
        &p.b,
        "link",
        "set",
        "b0",
        if up { "up" } else { "down" },
    ]);
    let start = Instant::now();
    let until = start + Duration::from_secs(3);
    let mut at = None;
    let mut next_poll = start;
    while at.is_none() && Instant::now() < until {
        let wake = match poll_every {
            Some(every) => {
                if Instant::now() >= next_poll {
                    watch.request(a0).unwrap();
                    next_poll += every;
                }
                next_poll.min(until)
            }
            None => until,
        };
        if !readable(watch, wake) {
            continue;
        }
        watch
            .drain(&mut |i, c| {
                if i == a0 && c == up && at.is_none() {
                    at = Some(start.elapsed());
                }
            })
            .unwrap();
    }
    at.unwrap_or_else(|| panic!("no carrier {up} for a0 within 3 s"))
}

#[test]
fn link_watch_sees_the_carrier_within_100_ms() {
    let Some(_one) = common::netns_or_skip("link_watch_sees_the_carrier_within_100_ms") else {
        return;
    };
    let p = Pair::new("lw");
    let (mut watch, a0) = in_ns(&p.a, || {
        let w = LinkWatch::open().expect("link watch");
        assert!(carrier("a0").unwrap());
        assert!(carrier("nosuchdev0").is_err());
        let l = link(&p.a, "a0");
        (w, l["ifindex"].as_u64().unwrap() as u32)
    });
    // Asking every 20 ms (miimon): within 100 ms whatever the kernel's notice delay.
    for up in [false, true] {
        let at = carrier_change(&p, &mut watch, a0, up, Some(Duration::from_millis(20)));
        eprintln!(
            "carrier {up} of a0 seen {} ms after `ip link set b0` returned (asking every 20 ms)",
            at.as_millis()
        );
        assert!(at < Duration::from_millis(100), "{at:?}");
        assert_eq!(in_ns(&p.a, || carrier("a0").unwrap()), up);
    }
    // The notices alone arrive too (the kernel may hold them up to a second).
    for up in [false, true] {
        let at = carrier_change(&p, &mut watch, a0, up, None);
        eprintln!(
            "carrier {up} of a0 seen {} ms after `ip link set b0` returned (notices only)",
            at.as_millis()
        );
    }
    assert_eq!(watch.stats().malformed, 0);
}

/// A state file's path in a scratch directory removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(d) = self.0.parent() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn scratch_state(tag: &str) -> Scratch {
    Scratch(common::scratch(&format!("ether-{tag}")).join("addrs.json"))
}

fn has(out: &str, what: &str) -> bool {
    out.contains(what)
}

#[test]
fn addresses_and_routes_move_to_the_bond_and_back() {
    let Some(_one) = common::netns_or_skip("addresses_and_routes_move_to_the_bond_and_back") else {
        return;
    };
    let p = Pair::new("addr");
    let scratch = scratch_state("addr");
    let state = &scratch.0;
    in_ns(&p.a, || {
        ip(&["addr", "add", "10.231.0.1/24", "dev", "a0"]);
        ip(&["addr", "add", "fd31::1/64", "dev", "a0", "nodad"]);
        ip(&[
            "route",
            "add",
            "10.232.0.0/16",
            "via",
            "10.231.0.2",
            "dev",
            "a0",
        ]);
        let tap = Tap::open("bond0", [2, 0, 0, 0, 0, 1], 1500, true).expect("TAP");
        let members = ["a0".to_string()];

        let sysctl = |leaf: &str| {
            std::fs::read_to_string(format!("/proc/sys/net/{leaf}"))
                .unwrap()
                .trim()
                .to_owned()
        };
        ip(&[
            "-6",
            "route",
            "add",
            "fd32::/64",
            "via",
            "fd31::2",
            "dev",
            "a0",
        ]);
        let moved = take_over("bond0", &members, state, false).expect("take over");
        assert!(state.exists());
        // The member is a port now: no ARP replies or IPv6 of its own.
        assert_eq!(sysctl("ipv4/conf/a0/arp_ignore"), "8");
        assert_eq!(sysctl("ipv6/conf/a0/disable_ipv6"), "1");
        assert!(has(
            &ip(&["-6", "route", "show", "dev", "bond0"]),
            "fd32::/64 via fd31::2"
        ));
        let s = moved.summary();
        assert!(
            s.contains("10.231.0.1/24") && s.contains("10.232.0.0/16"),
            "{s}"
        );
        let on_bond = ip(&["addr", "show", "dev", "bond0"]);
        assert!(
            has(&on_bond, "10.231.0.1/24") && has(&on_bond, "fd31::1/64"),
            "{on_bond}"
        );
        assert!(!has(&ip(&["addr", "show", "dev", "a0"]), "10.231.0.1"));
        assert!(has(
            &ip(&["route", "show", "dev", "bond0"]),
            "10.232.0.0/16 via 10.231.0.2"
        ));
        moved.restore().expect("restore");
        assert!(!state.exists());
        assert_eq!(sysctl("ipv4/conf/a0/arp_ignore"), "0");
        assert_eq!(sysctl("ipv6/conf/a0/disable_ipv6"), "0");
        assert!(has(
            &ip(&["-6", "route", "show", "dev", "a0"]),
            "fd32::/64 via fd31::2"
        ));
        assert!(has(&ip(&["addr", "show", "dev", "a0"]), "10.231.0.1/24"));
        assert!(has(&ip(&["addr", "show", "dev", "a0"]), "fd31::1/64"));
        assert!(has(
            &ip(&["route", "show", "dev", "a0"]),
            "10.232.0.0/16 via 10.231.0.2"
        ));
        assert!(!has(&ip(&["addr", "show", "dev", "bond0"]), "10.231.0.1"));

        // A crash: the Moved is never dropped and the TAP goes with the process.
        let moved = take_over("bond0", &members, state, false).expect("take over again");
        std::mem::forget(moved);
        drop(tap);
        assert!(!has(&ip(&["addr", "show", "dev", "a0"]), "10.231.0.1"));
        // A new run may not take over before repairing.
        let e = take_over("bond0", &members, state, false).unwrap_err();
        assert!(matches!(e, AddrError::State { .. }), "{e}");
        assert_eq!(sysctl("ipv6/conf/a0/disable_ipv6"), "1");
        assert_eq!(repair(state), Ok(true));
        assert!(!state.exists());
        assert_eq!(sysctl("ipv6/conf/a0/disable_ipv6"), "0");
        assert!(has(&ip(&["addr", "show", "dev", "a0"]), "fd31::1/64"));
        assert!(has(&ip(&["addr", "show", "dev", "a0"]), "10.231.0.1/24"));
        assert!(has(
            &ip(&["route", "show", "dev", "a0"]),
            "10.232.0.0/16 via 10.231.0.2"
        ));
        assert_eq!(repair(state), Ok(false));
    });
}

#[test]
fn a_member_with_the_default_route_is_refused_unless_allowed() {
    let Some(_one) =
        common::netns_or_skip("a_member_with_the_default_route_is_refused_unless_allowed")
    else {
        return;
    };
    let p = Pair::new("dflt");
    let scratch = scratch_state("dflt");
    let state = &scratch.0;
    in_ns(&p.a, || {
        ip(&["addr", "add", "10.233.0.1/24", "dev", "a0"]);
        ip(&[
            "route",
            "add",
            "default",
            "via",
            "10.233.0.254",
            "dev",
            "a0",
        ]);
        let _tap = Tap::open("bond0", [2, 0, 0, 0, 0, 1], 1500, false).expect("TAP");
        let members = ["a0".to_string()];
        let e = take_over("bond0", &members, state, false).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(
                "member a0 carries the host's default route (default via 10.233.0.254 dev a0)"
            ),
            "{msg}"
        );
        assert!(!state.exists());
        assert!(has(&ip(&["addr", "show", "dev", "a0"]), "10.233.0.1/24"));

        let moved = take_over("bond0", &members, state, true).expect("allowed");
        assert!(has(
            &ip(&["route", "show", "default"]),
            "via 10.233.0.254 dev bond0"
        ));
        drop(moved); // dropping puts back too
        assert!(has(
            &ip(&["route", "show", "default"]),
            "via 10.233.0.254 dev a0"
        ));
        assert!(!state.exists());
    });
}

/// Once the address is on the bond, an ARP request for it that arrives on the member
/// gets no answer from the host's stack with the member's MAC (only the bond answers,
/// through braid, which this test does not run).
#[test]
fn a_member_does_not_answer_arp_for_the_bond() {
    let Some(_one) = common::netns_or_skip("a_member_does_not_answer_arp_for_the_bond") else {
        return;
    };
    let p = Pair::new("arp");
    let scratch = scratch_state("arp");
    let state = &scratch.0;
    let (tap, moved) = in_ns(&p.a, || {
        ip(&["addr", "add", "10.234.0.1/24", "dev", "a0"]);
        let tap = Tap::open("bond0", [2, 0, 0, 0, 0, 1], 1500, false).expect("TAP");
        let moved = take_over("bond0", &["a0".to_string()], state, false).expect("take over");
        (tap, moved)
    });
    let a0_mac = link(&p.a, "a0")["address"].as_str().unwrap().to_owned();
    ip(&["-n", &p.b, "addr", "add", "10.234.0.2/24", "dev", "b0"]);
    in_ns(&p.b, || {
        let s = std::net::UdpSocket::bind("10.234.0.2:0").unwrap();
        // Sending needs the neighbour: an ARP request goes out on b0.
        let _ = s.send_to(b"x", "10.234.0.1:9");
    });
    std::thread::sleep(Duration::from_millis(300));
    let neigh = ip(&["-n", &p.b, "neigh", "show", "10.234.0.1"]);
    // Put back in the namespace (a Moved runs `ip` where it is dropped).
    in_ns(&p.a, move || moved.restore().expect("restore"));
    drop(tap);
    assert!(!neigh.contains(&a0_mac), "the member answered ARP: {neigh}");
}

/// When notices overflow the watch's socket (ENOBUFS), it asks for every link's state
/// and reports it: the member's carrier comes through after the overrun.
#[test]
fn link_watch_recovers_from_an_overrun() {
    let Some(_one) = common::netns_or_skip("link_watch_recovers_from_an_overrun") else {
        return;
    };
    let p = Pair::new("lwo");
    let (mut watch, a0) = in_ns(&p.a, || {
        let w = LinkWatch::open().expect("link watch");
        // The smallest receive buffer the kernel allows: a few notices fill it.
        let one: libc::c_int = 1;
        // SAFETY: a valid int option on the watch's socket.
        let rc = unsafe {
            libc::setsockopt(
                w.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        let l = link(&p.a, "a0");
        (w, l["ifindex"].as_u64().unwrap() as u32)
    });
    // Forty new links in the namespace: far more notices than the buffer holds.
    let batch: String = (0..20)
        .map(|i| format!("link add x{i} type veth peer name y{i}\n"))
        .collect();
    let mut child = Command::new("ip")
        .args(["-n", &p.a, "-batch", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), batch.as_bytes()).unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let until = Instant::now() + Duration::from_secs(2);
    let mut a0_seen = false;
    while !a0_seen && readable(&watch, until) {
        watch
            .drain(&mut |i, c| {
                if i == a0 {
                    assert!(c, "a0's carrier is up");
                    a0_seen = true;
                }
            })
            .unwrap();
    }
    let stats = watch.stats();
    eprintln!("link watch after 40 new links: {stats:?}");
    assert!(stats.overruns >= 1, "{stats:?}");
    assert!(a0_seen, "the dump after the overrun reports a0");
}
