//! The Ethernet lab's network: any number of namespaces joined by veth pairs that carry no
//! address of their own (bond members, switch ports, access ports), shaped by tbf, cut by
//! carrier or silenced by a blackhole qdisc. A [`Net`] deletes every namespace it made
//! (and its scratch directory) when dropped, also on error and on Ctrl-C.
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::netns::{self, ip, run_cleanup, run_ok};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Namespaces and veths of one run; removed on drop.
#[derive(Debug)]
pub struct Net {
    /// The prefix of every namespace name, `braid-eth-<pid>-<n>`.
    pub tag: String,
    /// A private scratch directory (OVS databases, configs, sockets, logs).
    pub dir: PathBuf,
    created: Vec<String>,
}

impl Net {
    /// A new, empty network with a unique tag and a fresh scratch directory.
    pub fn new() -> Result<Self> {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("braid-eth-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("{tag}-lab"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self {
            tag,
            dir,
            created: Vec::new(),
        })
    }

    /// Create namespace `<tag>-<name>` with loopback up; its full name.
    pub fn ns(&mut self, name: &str) -> Result<String> {
        let ns = format!("{}-{name}", self.tag);
        ip(&["netns", "add", &ns])?;
        self.created.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A veth pair `dev_a` (in `ns_a`) ↔ `dev_b` (in `ns_b`), both up, no address.
    pub fn veth(&self, ns_a: &str, dev_a: &str, ns_b: &str, dev_b: &str) -> Result<()> {
        ip(&[
            "-n", ns_a, "link", "add", dev_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b,
        ])?;
        // No IPv6 chatter (router solicitations, DAD) on ports that are only Ethernet.
        for (ns, dev) in [(ns_a, dev_a), (ns_b, dev_b)] {
            let _ = sysctl(ns, &format!("net.ipv6.conf.{dev}.disable_ipv6"), "1");
        }
        ip(&["-n", ns_a, "link", "set", dev_a, "up"])?;
        ip(&["-n", ns_b, "link", "set", dev_b, "up"])?;
        Ok(())
    }

    /// A file in the scratch directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.created.drain(..).rev() {
            let _ = run_cleanup(
                Command::new("ip").args(["netns", "del", &ns]),
                Duration::from_secs(10),
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `sysctl -w key=value` inside `ns`.
pub fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    run_ok(crate::netns::ns_command(ns, "sysctl").args(["-q", "-w", &format!("{key}={value}")]))?;
    Ok(())
}

/// Add `cidr` to `dev` in `ns`.
pub fn addr(ns: &str, dev: &str, cidr: &str) -> Result<()> {
    ip(&["-n", ns, "addr", "add", cidr, "dev", dev])?;
    Ok(())
}

/// Limit `dev`'s egress in `ns` to `mbit` Mbit/s with tbf (bucket of 2 ms at rate, at
/// least 3.2 kB; 50 ms queue), as the lab's paths are shaped.
pub fn shape(ns: &str, dev: &str, mbit: f64) -> Result<()> {
    shape_burst(ns, dev, mbit, None)
}

/// [`shape`] with a bucket of `burst` bytes (None: 2 ms at rate, at least 3.2 kB). A
/// ping-pong benchmark (NetPIPE) lets the bucket refill between messages, so a message
/// that fits in it crosses at the veth's speed: `Some(3200)` (two full frames) keeps a
/// port close to a NIC of that rate.
pub fn shape_burst(ns: &str, dev: &str, mbit: f64, burst: Option<u64>) -> Result<()> {
    crate::netns::tbf(ns, dev, (mbit * 1e6) as u64, burst)
}

/// True when `dev` in `ns` has a tbf root qdisc (the lab's shaping is in place).
pub fn has_tbf(ns: &str, dev: &str) -> Result<bool> {
    let out = run_ok(Command::new("tc").args(["-n", ns, "qdisc", "show", "dev", dev, "root"]))?;
    Ok(out.contains("qdisc tbf"))
}

/// Fail unless every `(ns, dev)` still has its tbf.
pub fn check_shaped<'a>(devs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<()> {
    for (ns, dev) in devs {
        if !has_tbf(ns, dev)? {
            bail!("{dev} in {ns} lost its tbf qdisc: its figures would be unshaped");
        }
    }
    Ok(())
}

/// `dev`'s MAC address in `ns`.
pub fn mac(ns: &str, dev: &str) -> Result<String> {
    let out = ip(&["-n", ns, "-j", "link", "show", "dev", dev])?;
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).context("`ip -j link` is not JSON")?;
    v.get(0)
        .and_then(|l| l["address"].as_str())
        .map(str::to_string)
        .with_context(|| format!("no MAC for {dev} in {ns}"))
}

/// A permanent neighbour entry in `ns`: `addr` is at `mac` on `dev`.
pub fn neigh(ns: &str, dev: &str, addr: std::net::Ipv4Addr, mac: &str) -> Result<()> {
    ip(&[
        "-n",
        ns,
        "neigh",
        "replace",
        &addr.to_string(),
        "lladdr",
        mac,
        "dev",
        dev,
        "nud",
        "permanent",
    ])?;
    Ok(())
}

/// Set `dev` in `ns` down or up. A veth's peer loses (and regains) its carrier with it.
pub fn set_link(ns: &str, dev: &str, up: bool) -> Result<()> {
    ip(&["-n", ns, "link", "set", dev, if up { "up" } else { "down" }])?;
    Ok(())
}

/// Silence `dev`'s egress in `ns` (a blackhole root qdisc: every frame sent on it,
/// LACPDUs included, is dropped before the wire; the carrier stays up), or, with
/// `silent == false`, put back `restore_mbit`'s tbf (or no qdisc at all).
///
/// Egress, not ingress: packet sockets (Open vSwitch's userspace datapath, braid's
/// members) see a frame before the ingress qdisc could drop it. This kernel has neither
/// netem nor the gact action, so a blackhole qdisc is the way to silence a port.
pub fn silence(ns: &str, dev: &str, silent: bool, restore_mbit: Option<f64>) -> Result<()> {
    if silent {
        return netns::root_qdisc(ns, dev, &["blackhole"]);
    }
    match restore_mbit {
        Some(m) => shape(ns, dev, m),
        None => {
            run_ok(Command::new("tc").args(["-n", ns, "qdisc", "del", "dev", dev, "root"]))?;
            Ok(())
        }
    }
}

/// Frames `dev` in `ns` has sent so far (`tx_packets`).
pub fn tx_packets(ns: &str, dev: &str) -> Result<u64> {
    tx_counter(ns, dev, "packets")
}

/// Bytes `dev` in `ns` has sent so far (`tx_bytes`).
pub fn tx_bytes(ns: &str, dev: &str) -> Result<u64> {
    tx_counter(ns, dev, "bytes")
}

fn tx_counter(ns: &str, dev: &str, what: &str) -> Result<u64> {
    let out = ip(&["-n", ns, "-j", "-s", "link", "show", "dev", dev])?;
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).context("`ip -j -s link` is not JSON")?;
    v.get(0)
        .and_then(|l| l["stats64"]["tx"][what].as_u64())
        .with_context(|| format!("no tx {what} counter for {dev} in {ns}"))
}

/// Turn off transmit checksum offload (and with it TSO) on `dev` in `ns`
/// (`ETHTOOL_STXCSUM`, as `ethtool -K dev tx off`): Open vSwitch's userspace datapath
/// reads frames with a packet socket without the virtio header, so a frame whose checksum
/// the sender left to the NIC would cross it with a wrong checksum and be dropped at the
/// receiver. Every sender into an OVS switch in the lab needs this.
pub fn tx_csum_off(ns: &str, dev: &str) -> Result<()> {
    let dev = dev.to_string();
    crate::netns::spawn_in_netns(ns, move || set_tx_csum(&dev, false))?
        .join()
        .map_err(|_| anyhow::anyhow!("tx_csum_off thread panicked"))?
}

fn set_tx_csum(dev: &str, on: bool) -> Result<()> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_STXCSUM: u32 = 0x17;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    #[repr(C)]
    struct IfReq {
        name: [libc::c_char; libc::IFNAMSIZ],
        data: *mut EthtoolValue,
        _pad: [u8; 16],
    }
    if dev.is_empty() || dev.len() >= libc::IFNAMSIZ {
        bail!("bad interface name {dev:?}");
    }
    let mut value = EthtoolValue {
        cmd: ETHTOOL_STXCSUM,
        data: u32::from(on),
    };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: &mut value,
        _pad: [0; 16],
    };
    for (d, s) in req.name.iter_mut().zip(dev.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: a plain socket(2) call; the result is checked and closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    if fd < 0 {
        bail!("socket: {}", std::io::Error::last_os_error());
    }
    // SAFETY: SIOCETHTOOL reads the ifreq (a NUL-terminated name and a pointer to a live
    // ethtool_value) and writes only into that value; both outlive the call.
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL, &mut req as *mut IfReq) };
    let err = std::io::Error::last_os_error();
    // SAFETY: closing the descriptor opened above, once.
    unsafe { libc::close(fd) };
    if rc != 0 {
        bail!("ETHTOOL_STXCSUM on {dev}: {err}");
    }
    Ok(())
}
