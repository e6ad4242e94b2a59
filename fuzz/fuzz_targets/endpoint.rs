//! The whole endpoint the daemon runs (`braid_core::Endpoint`, made from a
//! config as `braid up` makes it: two UDP paths and a CSLIP serial line, with keys or
//! without, carrying IP packets or Ethernet frames) fed arbitrary datagrams on its UDP paths from any source, arbitrary line
//! bytes, arbitrary TUN packets, and time passing.
//!
//! Checks: it never panics; what it hands out fits the buffer it was given; a UDP
//! transmit names a path the endpoint has and an address to send to; a line never offers
//! more than it was asked to write; nothing loops without bound.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use braid::config::Config;
use braid_core::crypto::Preopen;
use braid_core::{Instant, PathId};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    /// A datagram on UDP path `path % 2` from source `src % 4`; `path & 2`: handed over
    /// as the daemon does (`handle_udp_preopened`, which delivers what it lets out at once).
    Udp { path: u8, src: u8, bytes: Vec<u8> },
    /// Bytes from the serial line's tty.
    Line { bytes: Vec<u8> },
    /// A packet from the TUN.
    Tun { bytes: Vec<u8> },
    /// Time passes.
    Wait { ms: u16 },
    /// The line's tty closes, or opens again.
    Tty { open: bool },
}

#[derive(Arbitrary, Debug)]
struct Input {
    sealed: bool,
    /// Ethernet frames (a TAP) instead of IP packets (a TUN).
    ethernet: bool,
    ops: Vec<Op>,
}

fn config(sealed: bool) -> String {
    let enc = if sealed {
        "private_key = \"4HhIySO8n9Fg0zGmBNKq5u/ThHUmO9MjC0cJAmGjV2w=\"\npeer_public_key = \"HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=\"\n"
    } else {
        "encryption = \"none\"\n"
    };
    format!(
        "[bond]\naddress = \"10.9.0.1/30\"\n{enc}[[path]]\nname = \"u0\"\nlocal = \"192.0.2.1:7000\"\nremote = \"192.0.2.2:7000\"\n[[path]]\nname = \"u1\"\nlocal = \"192.0.2.1:7001\"\nremote = \"192.0.2.2:7001\"\n[[path]]\nname = \"s0\"\nkind = \"serial\"\ndevice = \"/dev/ttyS9\"\nbaud = 115200\nframing = \"cslip\"\n"
    )
}

fn source(path: usize, src: u8) -> SocketAddr {
    match src % 4 {
        // The configured peer of the path.
        0 => SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), 7000 + path as u16),
        1 => SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), 7001 - path as u16),
        2 => SocketAddr::new(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)), 4444),
        _ => SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)), 7000),
    }
}

fuzz_target!(|input: Input| {
    static CONFIGS: OnceLock<[Config; 4]> = OnceLock::new();
    let configs = CONFIGS.get_or_init(|| {
        [(false, false), (true, false), (false, true), (true, true)].map(|(k, ethernet)| {
            let mut c = Config::parse(&config(k), "fuzz.toml").expect("the config parses");
            if ethernet {
                c.bond.core.frames = braid_core::Frames::Ethernet;
            }
            c
        })
    });
    let cfg = &configs[usize::from(input.sealed) + 2 * usize::from(input.ethernet)];
    let mut now = Instant::from_millis(1000);
    let (mut ep, ids) = cfg.build_endpoint(now).expect("the endpoint builds");
    let line = ids[2];
    ep.line_opened(line);
    let mut buf = vec![0u8; 70_000];
    for op in input.ops.into_iter().take(200) {
        match op {
            Op::Udp {
                path,
                src,
                mut bytes,
            } => {
                let p = usize::from(path % 2);
                if path & 2 == 0 {
                    ep.handle_udp(now, ids[p], source(p, src), &mut bytes);
                } else {
                    // The daemon's way: what it lets out goes at once.
                    ep.handle_udp_preopened(
                        now,
                        ids[p],
                        source(p, src),
                        &mut bytes,
                        Preopen::Untouched,
                        |_| {},
                    );
                }
            }
            Op::Line { bytes } => ep.handle_line_bytes(now, line, &bytes),
            Op::Tun { bytes } => ep.handle_tun_packet(now, &bytes),
            Op::Wait { ms } => now += std::time::Duration::from_millis(u64::from(ms)),
            Op::Tty { open: true } => ep.line_opened(line),
            Op::Tty { open: false } => ep.line_closed(line),
        }
        ep.handle_timeout(now);
        for _ in 0..10_000 {
            let Some(t) = ep.poll_transmit(now, &mut buf) else {
                break;
            };
            assert!(t.len <= buf.len());
            assert!(ids[..2].contains(&t.path), "a transmit for {}", t.path);
            assert!(t.to.is_some(), "a UDP transmit with nowhere to go");
        }
        for _ in 0..10_000 {
            let Some(len) = ep.poll_line_write(now, line).map(<[u8]>::len) else {
                break;
            };
            // The tty takes about half of what is offered.
            ep.line_wrote(line, (len / 2 + 1).min(len));
        }
        while ep.poll_deliver(now, &mut buf).is_some() {}
        while ep.poll_event().is_some() {}
        let _ = ep.line(line).map(|l| l.status(now));
        let _ = ep.remote(PathId(0));
    }
});
