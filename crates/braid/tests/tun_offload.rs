//! TUN offloads against the real kernel: two namespaces, an offloaded TUN in each
//! (`Tun::open_with`, `IFF_VNET_HDR` + `TUNSETOFFLOAD`), and a loop in this process that
//! forwards between them the way the daemon will: read a superframe, split it
//! (`offload::split`), coalesce the packets (`offload::coalesce`), write. TCP (a few MB,
//! IPv4 and IPv6), UDP (plain and a UDP_SEGMENT send) and ping cross it intact; the test
//! checks that superframes larger than the MTU were read and merged frames written.
#![allow(clippy::disallowed_methods)] // the forwarding loop has a real-time deadline

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid::config::{Ipv4Cidr, Ipv6Cidr};
use braid::sys::tun::{Offloads, Tun};
use braid_core::offload::coalesce::{Coalescer, PushError};
use braid_core::offload::split::{read_frame, Frame};
use braid_core::offload::vnet::{self, VnetHdr};
use braid_core::offload::{MAX_FRAME, MAX_SEGMENT};

const MTU: usize = 1500;

/// Two namespaces, deleted on drop (also when the test fails).
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run `f` on a thread inside namespace `ns` (sockets and TUNs it makes stay there).
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

#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    superframes: AtomicU64,
    largest_read: AtomicU64,
    udp_superframes: AtomicU64,
    partial_checksums: AtomicU64,
    segments: AtomicU64,
    frames_written: AtomicU64,
    merged_frames: AtomicU64,
    merged_udp_frames: AtomicU64,
    drops: AtomicU64,
}

/// Forward between the two TUNs until `stop`: read, split, coalesce, write.
fn forward(tuns: [Tun; 2], udp_gro: bool, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    let mut buf = vec![0u8; MAX_FRAME];
    let mut seg = vec![0u8; MAX_SEGMENT];
    let mut gro = Coalescer::new(64, MAX_FRAME).with_udp(udp_gro);
    let deadline = Instant::now() + Duration::from_secs(60);
    let flush = |gro: &mut Coalescer, out: &Tun| {
        for f in gro.frames() {
            let gso = VnetHdr::parse(f).map_or(vnet::GSO_NONE, |h| h.gso_type);
            let merged = gso != vnet::GSO_NONE;
            match out.write(f) {
                Ok(_) => {
                    counts.frames_written.fetch_add(1, Ordering::Relaxed);
                    if merged {
                        counts.merged_frames.fetch_add(1, Ordering::Relaxed);
                    }
                    if gso == vnet::GSO_UDP_L4 {
                        counts.merged_udp_frames.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(_) => {
                    counts.drops.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        gro.clear();
    };
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let mut fds = tuns.each_ref().map(|t| libc::pollfd {
            fd: t.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: fds is a valid array of two pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 50) };
        if n <= 0 {
            continue;
        }
        for (i, pfd) in fds.iter().enumerate() {
            if pfd.revents & libc::POLLIN == 0 {
                continue;
            }
            let (from, to) = (&tuns[i], &tuns[1 - i]);
            // A batch: up to 64 reads, then the merged frames go out.
            for _ in 0..64 {
                let n = match from.read(&mut buf) {
                    Ok(n) => n,
                    Err(_) => break,
                };
                counts.reads.fetch_add(1, Ordering::Relaxed);
                counts.largest_read.fetch_max(n as u64, Ordering::Relaxed);
                let hdr = VnetHdr::parse(&buf[..n]).unwrap_or_default();
                let udp = hdr.gso_type == vnet::GSO_UDP_L4;
                if hdr.gso_type == vnet::GSO_NONE && hdr.needs_csum() {
                    counts.partial_checksums.fetch_add(1, Ordering::Relaxed);
                }
                let push = |p: &[u8], gro: &mut Coalescer| {
                    counts.segments.fetch_add(1, Ordering::Relaxed);
                    match gro.push(p) {
                        Ok(_) => {}
                        Err(PushError::Full) => {
                            flush(gro, to);
                            if gro.push(p).is_err() {
                                counts.drops.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(PushError::TooLarge) => {
                            counts.drops.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                };
                match read_frame(&mut buf[..n]) {
                    Ok(Frame::Packet(p)) => push(p, &mut gro),
                    Ok(Frame::Segments(mut s)) => {
                        if n - vnet::LEN > MTU {
                            counts.superframes.fetch_add(1, Ordering::Relaxed);
                        }
                        if udp {
                            counts.udp_superframes.fetch_add(1, Ordering::Relaxed);
                        }
                        while let Ok(Some(len)) = s.next_into(&mut seg) {
                            push(&seg[..len], &mut gro);
                        }
                    }
                    Err(_) => {
                        counts.drops.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            flush(&mut gro, to);
        }
    }
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 12)) as u8
}

/// Send `len` bytes from namespace a to `to` in namespace b over TCP; true if they
/// arrived intact.
fn tcp_transfer(a: &str, b: &str, to: SocketAddr, len: usize) {
    let listener = in_ns(b, || TcpListener::bind(to).expect("bind in b"));
    let receiver = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut got = 0usize;
        let mut bad = None;
        let mut chunk = vec![0u8; 256 * 1024];
        loop {
            let n = s.read(&mut chunk).expect("read");
            if n == 0 {
                break;
            }
            for (k, &c) in chunk[..n].iter().enumerate() {
                if bad.is_none() && c != pattern(got + k) {
                    bad = Some(got + k);
                }
            }
            got += n;
        }
        (got, bad)
    });
    let mut s = in_ns(a, || {
        TcpStream::connect_timeout(&to, Duration::from_secs(5))
    })
    .expect("connect through the TUNs");
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let data: Vec<u8> = (0..len).map(pattern).collect();
    let t0 = Instant::now();
    s.write_all(&data).expect("send");
    s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let (got, bad) = receiver.join().expect("receiver");
    eprintln!(
        "tun_offload: {len} bytes over TCP to {to} in {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(got, len, "all bytes arrived");
    assert_eq!(bad, None, "bytes intact");
}

/// Datagrams from a to `to` in b, plain and as one UDP_SEGMENT send (a USO superframe
/// on the TUN): all arrive with their bytes.
fn udp_check(a: &str, b: &str, to: SocketAddr) {
    let rx = in_ns(b, || UdpSocket::bind(to).expect("bind udp in b"));
    rx.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let any: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse().expect("addr")
    } else {
        "[::]:0".parse().expect("addr")
    };
    let tx = in_ns(a, || UdpSocket::bind(any).expect("bind udp in a"));
    let mut sent = Vec::new();
    for i in 0..10u8 {
        let d = vec![i; 100 + usize::from(i) * 130];
        tx.send_to(&d, to).expect("send");
        sent.push(d);
    }
    // Eight datagrams of 1000 bytes in one send.
    let seg: libc::c_int = 1000;
    // SAFETY: UDP_SEGMENT takes an int.
    let rc = unsafe {
        libc::setsockopt(
            tx.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&seg as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "UDP_SEGMENT");
    let big: Vec<u8> = (0..8000).map(pattern).collect();
    tx.send_to(&big, to).expect("send gso");
    sent.extend(big.chunks(1000).map(<[u8]>::to_vec));
    let mut buf = [0u8; 2000];
    for d in &sent {
        let n = rx.recv(&mut buf).expect("datagram arrives");
        assert_eq!(&buf[..n], &d[..], "datagram intact, in order");
    }
}

fn ping(ns: &str, to: IpAddr) {
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-s", "3000",
        ])
        .arg(to.to_string())
        .output()
        .expect("run ping");
    assert!(
        out.status.success(),
        "ping {to}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// What one run through the forwarding loop counted.
struct Seen {
    on: Offloads,
    reads: u64,
    superframes: u64,
    largest_read: u64,
    udp_superframes: u64,
    partial_checksums: u64,
    merged_frames: u64,
    merged_udp_frames: u64,
    drops: u64,
}

/// Two namespaces with a TUN each (opened asking for `wanted`), the loop between them,
/// and the traffic: ping, TCP and UDP, IPv4 and IPv6, each checked.
fn run(tag: &str, wanted: Offloads) -> Seen {
    let pid = std::process::id();
    let (a, b) = (
        format!("braid-{tag}-{pid}-a"),
        format!("braid-{tag}-{pid}-b"),
    );
    let _ns = Namespaces(vec![a.clone(), b.clone()]);
    for ns in [&a, &b] {
        ip(&["netns", "add", ns]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.default.accept_dad=0",
            ])
            .output()
            .expect("sysctl");
        assert!(out.status.success(), "sysctl accept_dad");
    }
    let open = |ns: &str, last: u8| {
        in_ns(ns, || {
            Tun::open_with(
                "boff0",
                MTU as u32,
                Ipv4Cidr {
                    addr: Ipv4Addr::new(10, 77, 0, last),
                    prefix: 24,
                },
                Some(Ipv6Cidr {
                    addr: Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, u16::from(last)),
                    prefix: 64,
                }),
                wanted,
            )
            .expect("open offloaded TUN")
        })
    };
    let (ta, tb) = (open(&a, 1), open(&b, 2));
    let on = ta.offloads();
    assert_eq!(on, tb.offloads());
    eprintln!("tun_offload {tag}: offloads on: {on:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let fwd = {
        let (stop, counts) = (stop.clone(), counts.clone());
        std::thread::spawn(move || forward([ta, tb], on.uso, stop, counts))
    };
    // Stop the forwarder however the checks end.
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stopper = Stop(stop);

    let v4b = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2));
    let v6b = IpAddr::V6(Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 2));
    ping(&a, v4b);
    ping(&a, v6b);
    tcp_transfer(&a, &b, SocketAddr::new(v4b, 5201), 8 << 20);
    tcp_transfer(&a, &b, SocketAddr::new(v6b, 5202), 4 << 20);
    udp_check(&a, &b, SocketAddr::new(v4b, 5203));
    udp_check(&a, &b, SocketAddr::new(v6b, 5204));

    drop(stopper);
    fwd.join().expect("forwarder");
    let c = |x: &AtomicU64| x.load(Ordering::Relaxed);
    eprintln!(
        "tun_offload {tag}: {} reads ({} superframes > MTU, largest {} B, {} UDP, {} packets with the checksum to do), {} packets, {} frames written ({} merged, {} UDP), {} drops",
        c(&counts.reads),
        c(&counts.superframes),
        c(&counts.largest_read),
        c(&counts.udp_superframes),
        c(&counts.partial_checksums),
        c(&counts.segments),
        c(&counts.frames_written),
        c(&counts.merged_frames),
        c(&counts.merged_udp_frames),
        c(&counts.drops)
    );
    Seen {
        on,
        reads: c(&counts.reads),
        superframes: c(&counts.superframes),
        largest_read: c(&counts.largest_read),
        udp_superframes: c(&counts.udp_superframes),
        partial_checksums: c(&counts.partial_checksums),
        merged_frames: c(&counts.merged_frames),
        merged_udp_frames: c(&counts.merged_udp_frames),
        drops: c(&counts.drops),
    }
}

#[test]
fn offloaded_tuns_forward_tcp_udp_icmp() {
    let Some(_one) = common::netns_or_skip("offloaded_tuns_forward_tcp_udp_icmp") else {
        return;
    };
    let seen = run("off", Offloads::ALL);
    let on = seen.on;
    assert!(on.vnet_hdr && on.csum && on.tso, "TSO on: {on:?}");
    assert!(
        seen.superframes > 0,
        "the kernel handed out TSO superframes"
    );
    assert!(seen.largest_read > 20_000, "large superframes");
    assert!(seen.merged_frames > 0, "coalesced frames were written");
    assert!(
        seen.partial_checksums > 0,
        "packets with their checksum left to do (completed by the loop) were read"
    );
    if on.uso {
        assert!(
            seen.udp_superframes > 0,
            "the UDP_SEGMENT send came as a USO superframe"
        );
        assert!(
            seen.merged_udp_frames > 0,
            "UDP datagrams merged (UDP GRO with USO on)"
        );
    }
    assert_eq!(seen.drops, 0, "nothing dropped");
}

/// The header without offloads: every read one packet no larger than the MTU, and the
/// same traffic gets through (merged frames are still written: the kernel takes GSO
/// writes whatever TUNSETOFFLOAD said).
#[test]
fn vnet_header_without_offloads() {
    let Some(_one) = common::netns_or_skip("vnet_header_without_offloads") else {
        return;
    };
    let header_only = Offloads {
        vnet_hdr: true,
        ..Offloads::default()
    };
    let seen = run("nooff", header_only);
    assert_eq!(seen.on, header_only);
    assert!(seen.reads > 0);
    assert_eq!(seen.superframes, 0, "no superframes without TSO");
    assert_eq!(seen.merged_udp_frames, 0, "no UDP GRO without USO");
    assert_eq!(
        seen.partial_checksums, 0,
        "no checksum left to do without TUN_F_CSUM"
    );
    assert!(seen.largest_read as usize <= vnet::LEN + MTU);
    assert!(
        seen.merged_frames > 0,
        "merged frames written without TUNSETOFFLOAD"
    );
    assert_eq!(seen.drops, 0, "nothing dropped");
}
