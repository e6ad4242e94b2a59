//! The config file (TOML): parsing, validation, and mapping to the core's settings.
//!
//! Every key is documented in `docs/config.md`. Errors name the key and, where the TOML
//! parser knows it, the line and column: `FILE:LINE:COL: bond.mtu: ...`.

use std::collections::HashSet;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::time::Duration;

use braid_core::bond::{BondConfig, PathConfig};
use braid_core::emu::EmuConfig;
use braid_core::hash::HashPolicy;
use braid_core::serial::Framing;
pub use braid_core::serial::{serial_ack_delay, serial_bps, SerialDefaults};
use braid_core::wire::DATA_HEADER_LEN;
use braid_core::CcConfig;
use braid_core::HealthConfig;
use braid_core::PathId;
use braid_core::SchedulerConfig;
use braid_core::{ActiveBackupOptions as Options, Reselect};
use serde::Deserialize;
use toml::Spanned;

pub mod diff;
mod endpoint;
mod errors;
mod ether;
pub mod host;
pub mod monitor;
mod routing;
mod security;
mod shape;
pub mod tc;
pub use endpoint::Remote;
pub use errors::parse_bps;
pub use ether::{
    derived_mac, format_mac, parse_mac, EtherMember, EtherScheduler, EtherSettings, Layer,
};
pub use monitor::MonitorSettings;
pub use routing::{Prefix, RoutingSettings};
pub use security::{Encryption, KeySettings};
pub use shape::ShapeSettings;

use crate::sys::tty::SUPPORTED_BAUDS;

/// Smallest TUN MTU accepted (the IPv4 minimum datagram every host must take).
pub const MTU_MIN: u32 = 576;
/// Default TUN MTU: a standard Ethernet packet, carried in parts where a path's
/// datagram is smaller (`bond/parts.rs`), so neither hosts nor users need to know.
pub const MTU_DEFAULT: u32 = 1500;
/// Default TUN MTU of a bond with serial lines: a frame's line time grows with it (the
/// serial defaults and tables were set for 1400; the SLIP seed itself used 296).
pub const MTU_DEFAULT_SERIAL: u32 = 1400;
/// Largest TUN MTU accepted: a sealed braid datagram (IPv6 + UDP + what sealing adds to a
/// data datagram + data header + packet) must fit in 65535 bytes.
pub const MTU_MAX: u32 =
    65535 - 40 - 8 - crate::seal::udp_overhead(true) as u32 - DATA_HEADER_LEN as u32;
/// Longest interface name Linux accepts (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;

/// A config error: where (if known) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file name as given.
    pub file: String,
    /// 1-based line and column, when known.
    pub position: Option<(usize, usize)>,
    /// What is wrong, starting with the key (`bond.mtu: ...`) when there is one.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, col)) => write!(f, "{}:{line}:{col}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// An IPv4 address with its prefix length (`10.200.0.1/30`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    /// The interface's own address.
    pub addr: Ipv4Addr,
    /// Prefix length, 0-32.
    pub prefix: u8,
}

impl Ipv4Cidr {
    /// The netmask for the prefix.
    pub fn netmask(&self) -> Ipv4Addr {
        let bits = if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        };
        Ipv4Addr::from(bits)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// An IPv6 address with its prefix length (`fd00::1/64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Cidr {
    /// The interface's own address.
    pub addr: Ipv6Addr,
    /// Prefix length, 0-128.
    pub prefix: u8,
}

impl fmt::Display for Ipv6Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The validated `[bond]` table.
#[derive(Clone, Debug, PartialEq)]
pub struct BondSettings {
    /// TUN interface name.
    pub interface: String,
    /// IPv4 address and prefix for the TUN.
    pub address: Ipv4Cidr,
    /// Optional IPv6 address and prefix for the TUN.
    pub address6: Option<Ipv6Cidr>,
    /// TUN MTU.
    pub mtu: u32,
    /// The `primary` path's name (active-backup only).
    pub primary: Option<String>,
    /// `offload`: batched, offloaded IO (UDP GSO and GRO on the paths); false sends and
    /// receives one datagram per syscall.
    pub offload: bool,
    /// `workers`: threads that seal and send the UDP paths' datagrams beside the loop
    /// (0: the loop does it all); `None`: one where the machine has a second CPU.
    pub workers: Option<usize>,
    /// Everything the core needs. For active-backup, `primary` holds the id the path will
    /// get when the paths are added in file order (`PathId(index)`); [`Config::build_endpoint`]
    /// checks that.
    pub core: BondConfig,
    /// Keys, or the explicit `encryption = "none"`.
    pub encryption: Encryption,
    /// `user` (and `group`): the account the daemon switches to once the TUN, sockets,
    /// ttys and control socket are open (`braid up --user` overrides it).
    pub run_as: Option<crate::privileges::RunAs>,
    /// `routes`, `fwmark`, `post_up`, `pre_down`.
    pub routing: RoutingSettings,
    /// `layer`: a TUN carrying IP packets, or a TAP carrying Ethernet frames.
    pub layer: Layer,
    /// `mac`: the TAP's MAC (`layer = "ethernet"`); unset, the first member's (an
    /// Ethernet bond) or [`derived_mac`] (over UDP paths).
    pub mac: Option<[u8; 6]>,
}

/// One validated `[[path]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PathSettings {
    /// Name, unique in the bond and the same on both ends.
    pub name: String,
    /// What carries the path's datagrams: a UDP socket or a serial line.
    pub transport: Transport,
    /// Configured speed, bit/s (0 = unset, measure). For a serial path without `bps`, the
    /// line's datagram rate ([`serial_bps`]).
    pub bps: u64,
    /// Active-backup priority.
    pub prio: i32,
    /// Lab/testing: emulate a path on this path's egress.
    pub emulate: Option<EmuConfig>,
}

/// `kind = "udp"`: the path's socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpSettings {
    /// Local address to bind the path's UDP socket to; an unspecified address (with
    /// `dev`) follows the device's address.
    pub local: SocketAddr,
    /// The peer's address for this path: literal, a DNS name, or learned.
    pub remote: Remote,
    /// Interface to bind to (SO_BINDTODEVICE).
    pub dev: Option<String>,
    /// MTU of the link under the path (`mtu`, default 1500): with the IP and UDP headers
    /// and the sealing overhead it sets the largest datagram, and a TUN packet that does
    /// not fit goes in two (or more) parts.
    pub link_mtu: u32,
}

/// Default MTU of the link under a UDP path (Ethernet).
pub const LINK_MTU_DEFAULT: u32 = 1500;

/// Largest braid datagram on a UDP path to `remote` over a link of `link_mtu`: less
/// the IP and UDP headers and the envelope ([`crate::seal::udp_overhead`]).
pub fn udp_max_datagram(remote: &SocketAddr, link_mtu: u32, sealed: bool) -> usize {
    let ip_udp = if remote.is_ipv4() { 20 + 8 } else { 40 + 8 };
    (link_mtu as usize).saturating_sub(ip_udp + crate::seal::udp_overhead(sealed))
}

/// `kind = "serial"`: the path's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SerialSettings {
    /// The tty (`/dev/ttyS0`, `/dev/ttyUSB0`, a pty's `/dev/pts/N`).
    pub device: PathBuf,
    /// The line rate, bd (8N1: 10 bits per byte). Pacing uses it as given; the tty is
    /// opened at [`termios_baud`] of it.
    pub baud: u32,
    /// The framing.
    pub framing: Framing,
    /// The line's MTU: the largest datagram sent on it (braid header included). The
    /// receiver drops frames longer than `max(2·mtu, 1152)` bytes, as slip.c.
    pub mtu: usize,
    /// True when `bps` was not configured: the daemon keeps it at the line's measured
    /// datagram rate (framing, escapes and compression included).
    pub auto_bps: bool,
    /// What the frames carry: braid datagrams (a bonded path) or the TUN's IP packets as
    /// they are, for a classic SLIP/CSLIP peer.
    pub mode: SerialMode,
    /// Frames end in a CRC-32 (`mode = "bond"` without keys: nothing else would catch
    /// line noise; sealed datagrams carry their own tag, raw IP is the kernel's format).
    pub crc: bool,
}

impl SerialSettings {
    /// The core's line model settings for this line.
    pub fn line_config(&self) -> braid_core::serial::LineConfig {
        braid_core::serial::LineConfig {
            baud: self.baud,
            framing: self.framing,
            mtu: self.mtu,
            raw_ip: self.mode == SerialMode::RawIp,
            crc: self.mode == SerialMode::Bond && self.crc,
            auto_bps: self.auto_bps,
        }
    }
}

/// `mode` of a serial path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SerialMode {
    /// `mode = "bond"` (default): each frame holds one braid datagram; the path bonds
    /// with the others.
    #[default]
    Bond,
    /// `mode = "raw-ip"`: each frame holds one IP packet of the TUN, no braid header, no
    /// probes or acks: a classic single-line SLIP/CSLIP/SLIP6 peer (Linux `slattach`,
    /// a router's SLIP port) is at the other end. The bond has exactly this one path.
    RawIp,
}

impl SerialMode {
    /// The config value.
    pub fn as_str(self) -> &'static str {
        match self {
            SerialMode::Bond => "bond",
            SerialMode::RawIp => "raw-ip",
        }
    }
}

/// What carries a path's datagrams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A UDP socket.
    Udp(UdpSettings),
    /// A serial line with SLIP, SLIP6 or CSLIP framing.
    Serial(SerialSettings),
}

/// Lowest and highest `baud` accepted for a serial path.
pub const BAUD_RANGE: RangeInclusive<u32> = 50..=4_000_000;

/// The termios speed a serial path of `baud` is opened at: `baud` itself when it is a
/// standard rate, else the next standard rate above it (a pty ignores the rate; a real
/// UART would then run faster than braid paces, which the daemon warns about).
pub fn termios_baud(baud: u32) -> u32 {
    SUPPORTED_BAUDS
        .iter()
        .copied()
        .find(|&b| b >= baud)
        .unwrap_or(baud)
}

impl PathSettings {
    /// The UDP settings, if it is a UDP path.
    pub fn udp(&self) -> Option<&UdpSettings> {
        match &self.transport {
            Transport::Udp(u) => Some(u),
            Transport::Serial(_) => None,
        }
    }

    /// The serial settings, if it is a serial path.
    pub fn serial(&self) -> Option<&SerialSettings> {
        match &self.transport {
            Transport::Serial(s) => Some(s),
            Transport::Udp(_) => None,
        }
    }

    /// How the endpoint reaches the peer on this path.
    pub fn kind(&self) -> braid_core::PathKind {
        match &self.transport {
            Transport::Udp(u) => braid_core::PathKind::Udp {
                remote: u.remote.addr(),
            },
            Transport::Serial(s) => braid_core::PathKind::Line(s.line_config()),
        }
    }

    /// The core's settings for this path; `sealed`: datagrams carry the envelope.
    pub fn path_config(&self, sealed: bool) -> PathConfig {
        let mut c = path_config(&self.name, self.bps, self.prio);
        match &self.transport {
            Transport::Serial(s) => {
                c.ack_delay = Some(serial_ack_delay(s.baud, s.mtu));
                c.fixed_rate = true;
            }
            Transport::Udp(u) => c.max_datagram = udp_max_datagram(&u.local, u.link_mtu, sealed),
        }
        c
    }
}

/// [`SerialDefaults`] for `paths`, or `None` without a serial path in bond mode.
pub fn serial_defaults(paths: &[PathSettings]) -> Option<SerialDefaults> {
    SerialDefaults::for_lines(
        paths
            .iter()
            .filter_map(PathSettings::serial)
            .filter(|s| s.mode == SerialMode::Bond)
            .map(|s| (s.baud, s.mtu)),
    )
}

/// The core's [`PathConfig`] for a path of that name, speed and priority.
pub fn path_config(name: &str, bps: u64, prio: i32) -> PathConfig {
    let mut cc = CcConfig::default();
    if bps > 0 {
        cc.initial_rate_bps = bps;
    }
    PathConfig {
        name: name.to_owned(),
        bps,
        prio,
        cc,
        ack_delay: None,
        fixed_rate: false,
        max_datagram: 0,
    }
}

/// A whole validated config file.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `[bond]`.
    pub bond: BondSettings,
    /// `[[path]]`, in file order.
    pub paths: Vec<PathSettings>,
    /// `[shape]`, the HTB shaper on the bond's egress (none = unshaped).
    pub shape: Option<ShapeSettings>,
    /// `[monitor]`, the dashboard and `/metrics` (off without a `listen`).
    pub monitor: Option<MonitorSettings>,
    /// A bond of Ethernet ports (`layer = "ethernet"` with `kind = "ethernet"` paths):
    /// it runs instead of the endpoint, and `paths` is empty.
    pub ether: Option<EtherSettings>,
}

impl Config {
    /// Read and validate a config file (at most [`crate::files::TEXT_MAX`] bytes). A key
    /// inline is refused when others may read the file (`keys::check_secret_access`).
    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        let name = file.display().to_string();
        let fail = |message: String| ConfigError {
            file: name.clone(),
            position: None,
            message,
        };
        let f =
            std::fs::File::open(file).map_err(|e| fail(format!("cannot read config file: {e}")))?;
        let access = f
            .metadata()
            .map_err(|e| fail(format!("cannot read config file: {e}")))?;
        let text = crate::files::read_limited(f, crate::files::TEXT_MAX).map_err(|e| match e {
            crate::files::ReadError::TooLarge { .. } => fail(format!("config file is {e}")),
            e => fail(format!("cannot read config file: {e}")),
        })?;
        let source = security::Source {
            path: file,
            access: crate::keys::Access::of(&access),
        };
        Config::parse_from(&text, &name, Some(source))
    }

    /// Parse and validate config text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        Config::parse_from(text, file, None)
    }

    fn parse_from(
        text: &str,
        file: &str,
        source: Option<security::Source<'_>>,
    ) -> Result<Config, ConfigError> {
        let err = |span: Option<Range<usize>>, message: String| ConfigError {
            file: file.to_owned(),
            position: span.map(|s| line_col(text, s.start)),
            message,
        };
        let de = toml::Deserializer::parse(text)
            .map_err(|e| err(e.span(), e.message().trim().to_owned()))?;
        let raw: RawFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = errors::key_path(e.path());
            let e = e.into_inner();
            err(e.span(), errors::describe(&path, e.message()))
        })?;
        let base = Path::new(file).parent().unwrap_or(Path::new(""));
        validate(raw, base, source).map_err(|(span, message)| err(span, message))
    }

    /// Create the endpoint (the bond, its sealing, the paths' emulators) and add the paths
    /// in file order. Returns it and the path ids (same order as `paths`).
    pub fn build_endpoint(
        &self,
        now: braid_core::Instant,
    ) -> anyhow::Result<(braid_core::Endpoint, Vec<PathId>)> {
        use braid_core::crypto::OsRng;
        use braid_core::{Endpoint, EndpointConfig};
        use rand_core::RngCore;
        // A new epoch every run: the peer tells a restart by it, and this run's sequence
        // and probe numbers start where the last run's cannot be.
        let bond = braid_core::bond::BondConfig {
            epoch: OsRng.next_u64(),
            ..self.bond.core.clone()
        };
        let seal = crate::seal::seal_config(self, now);
        let mut ep = Endpoint::new(EndpointConfig { bond, seal }, now);
        let mut ids = Vec::with_capacity(self.paths.len());
        for p in &self.paths {
            let id = ep
                .add_path(
                    now,
                    p.path_config(self.bond.encryption.is_sealed()),
                    p.kind(),
                    p.emulate.clone(),
                )
                .map_err(|e| anyhow::anyhow!("path {:?}: {e}", p.name))?;
            ids.push(id);
        }
        if let Some(primary) = &self.bond.primary {
            let want = self
                .paths
                .iter()
                .position(|p| &p.name == primary)
                .map(index_id);
            if ep.bond().path_by_name(primary) != want {
                anyhow::bail!("internal: path ids are not assigned in file order; cannot resolve primary {primary:?}");
            }
        }
        Ok((ep, ids))
    }
}

fn index_id(i: usize) -> PathId {
    PathId(u16::try_from(i).unwrap_or(u16::MAX))
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, col)
}

// ---- raw (as written) form ----

type S<T> = Spanned<T>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    bond: Option<S<RawBond>>,
    #[serde(default)]
    path: Vec<S<RawPath>>,
    shape: Option<S<shape::RawShape>>,
    monitor: Option<S<monitor::RawMonitor>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBond {
    interface: Option<S<String>>,
    address: Option<S<String>>,
    address6: Option<S<String>>,
    mtu: Option<S<i64>>,
    scheduler: Option<S<String>>,
    hash: Option<S<String>>,
    packets_per_path: Option<S<i64>>,
    primary: Option<S<String>>,
    primary_reselect: Option<S<String>>,
    updelay_ms: Option<S<i64>>,
    downdelay_ms: Option<S<i64>>,
    probe_interval_ms: Option<S<i64>>,
    down_after: Option<S<i64>>,
    up_after: Option<S<i64>>,
    reorder_max_ms: Option<S<i64>>,
    queue_max_delay_ms: Option<S<i64>>,
    equalize_ms: Option<S<i64>>,
    seed: Option<S<i64>>,
    mss_clamp: Option<S<bool>>,
    offload: Option<S<bool>>,
    workers: Option<S<i64>>,
    encryption: Option<S<String>>,
    private_key: Option<S<String>>,
    private_key_file: Option<S<String>>,
    peer_public_key: Option<S<String>>,
    preshared_key: Option<S<String>>,
    preshared_key_file: Option<S<String>>,
    rekey_after_s: Option<S<i64>>,
    user: Option<S<String>>,
    group: Option<S<String>>,
    routes: Option<S<Vec<String>>>,
    fwmark: Option<S<i64>>,
    post_up: Option<S<routing::RawHooks>>,
    pre_down: Option<S<routing::RawHooks>>,
    layer: Option<S<String>>,
    lacp_rate: Option<S<String>>,
    lacp: Option<S<String>>,
    min_links: Option<S<i64>>,
    lacp_fallback: Option<S<bool>>,
    mac: Option<S<String>>,
    arp_interval: Option<S<i64>>,
    arp_ip_target: Option<S<Vec<String>>>,
    take_default_route: Option<S<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPath {
    name: Option<S<String>>,
    kind: Option<S<String>>,
    device: Option<S<String>>,
    baud: Option<S<i64>>,
    framing: Option<S<String>>,
    mode: Option<S<String>>,
    mtu: Option<S<i64>>,
    local: Option<S<String>>,
    remote: Option<S<String>>,
    bps: Option<S<errors::Bps>>,
    dev: Option<S<String>>,
    prio: Option<S<i64>>,
    emulate: Option<S<RawEmulate>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmulate {
    delay_ms: Option<S<f64>>,
    jitter_ms: Option<S<f64>>,
    loss: Option<S<f64>>,
    rate_bps: Option<S<i64>>,
    queue_bytes: Option<S<i64>>,
    outages: Option<S<Vec<Vec<i64>>>>,
    seed: Option<S<i64>>,
}

type VResult<T> = Result<T, (Option<Range<usize>>, String)>;

fn at<T>(s: &S<T>, msg: String) -> (Option<Range<usize>>, String) {
    (Some(s.span()), msg)
}

/// An integer key within `lo..=hi`, or `default` when absent.
fn int(v: &Option<S<i64>>, key: &str, lo: i64, hi: i64, default: i64) -> VResult<i64> {
    match v {
        None => Ok(default),
        Some(s) if (lo..=hi).contains(s.get_ref()) => Ok(*s.get_ref()),
        Some(s) => Err(at(
            s,
            format!("{key}: {} is out of range ({lo}..={hi})", s.get_ref()),
        )),
    }
}

fn ms(v: &Option<S<i64>>, key: &str, lo: i64, hi: i64, default: i64) -> VResult<Duration> {
    Ok(Duration::from_millis(
        int(v, key, lo, hi, default).map(|x| x.unsigned_abs())?,
    ))
}

/// Parse a `hash = ...` name (the core's names: layer2, layer2+3, layer3+4, encap2+3,
/// encap3+4, vlan+srcmac, gabler).
pub fn parse_hash(s: &str) -> Option<HashPolicy> {
    braid_core::hash::parse_policy(s)
}

/// The scheduler names accepted by `scheduler = ...`.
pub const SCHEDULERS: &[&str] = &[
    "eql",
    "round-robin",
    "weighted",
    "active-backup",
    "xor",
    "broadcast",
    "adaptive",
];

fn parse_cidr4(s: &str) -> Option<Ipv4Cidr> {
    let (a, p) = s.split_once('/')?;
    let addr: Ipv4Addr = a.parse().ok()?;
    let prefix: u8 = p.parse().ok().filter(|p| *p <= 32)?;
    if !p.bytes().all(|b| b.is_ascii_digit())
        || addr.is_unspecified()
        || addr.is_multicast()
        || addr.is_broadcast()
    {
        return None;
    }
    Some(Ipv4Cidr { addr, prefix })
}

fn parse_cidr6(s: &str) -> Option<Ipv6Cidr> {
    let (a, p) = s.split_once('/')?;
    let addr: Ipv6Addr = a.parse().ok()?;
    let prefix: u8 = p.parse().ok().filter(|p| *p <= 128)?;
    if !p.bytes().all(|b| b.is_ascii_digit()) || addr.is_unspecified() || addr.is_multicast() {
        return None;
    }
    Some(Ipv6Cidr { addr, prefix })
}

/// Why `name` is not a usable Linux interface name, if it is not.
pub fn check_ifname(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > IFNAME_MAX {
        return Err(format!("{name:?} is longer than {IFNAME_MAX} bytes"));
    }
    if name == "."
        || name == ".."
        || name.bytes().any(|b| {
            b == b'/' || b == b':' || b == b'%' || b.is_ascii_whitespace() || b.is_ascii_control()
        })
    {
        return Err(format!(
            "{name:?} is not a valid interface name (no '/', ':', '%' or spaces)"
        ));
    }
    Ok(())
}

/// Parse `ADDR:PORT` (IPv6 as `[ADDR]:PORT`) for a path endpoint; port 0 is refused.
pub fn parse_endpoint(s: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = s
        .parse()
        .map_err(|_| format!("{s:?} is not an ADDR:PORT (IPv6 as [ADDR]:PORT)"))?;
    if addr.port() == 0 {
        return Err(format!("{s:?}: port 0 is not allowed"));
    }
    if addr.ip().is_unspecified() || addr.ip().is_multicast() {
        return Err(format!("{s:?}: needs a unicast address"));
    }
    Ok(addr)
}

/// Check a path name: non-empty, at most 32 bytes, printable without spaces.
pub fn check_path_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > 32 {
        return Err(format!("{name:?} is longer than 32 bytes"));
    }
    if !name.chars().all(|c| c.is_ascii_graphic()) {
        return Err(format!(
            "{name:?} may only hold printable ASCII without spaces"
        ));
    }
    Ok(())
}

/// `bond.user` and `bond.group`: names only (looked up by `braid up`, on the host that runs
/// it).
fn run_as(
    user: Option<&S<String>>,
    group: Option<&S<String>>,
) -> VResult<Option<crate::privileges::RunAs>> {
    use crate::privileges::check_account_name;
    let Some(u) = user else {
        return match group {
            None => Ok(None),
            Some(g) => Err(at(
                g,
                "bond.group: needs bond.user (the user to run as)".into(),
            )),
        };
    };
    check_account_name(u.get_ref()).map_err(|m| at(u, format!("bond.user: {m}")))?;
    if let Some(g) = group {
        check_account_name(g.get_ref()).map_err(|m| at(g, format!("bond.group: {m}")))?;
    }
    Ok(Some(crate::privileges::RunAs {
        user: u.get_ref().clone(),
        group: group.map(|g| g.get_ref().clone()),
    }))
}

fn validate(raw: RawFile, base: &Path, source: Option<security::Source<'_>>) -> VResult<Config> {
    let Some(bond) = raw.bond else {
        return Err((
            None,
            "missing [bond] table (it needs at least `address`)".into(),
        ));
    };
    let bond_span = bond.span();
    let b = bond.into_inner();

    let interface = match &b.interface {
        None => "braid0".to_owned(),
        Some(s) => {
            check_ifname(s.get_ref()).map_err(|m| at(s, format!("bond.interface: {m}")))?;
            s.get_ref().clone()
        }
    };
    let address = match &b.address {
        None => return Err((Some(bond_span), "bond.address: missing (an IPv4 CIDR such as \"10.200.0.1/30\")".into())),
        Some(s) => parse_cidr4(s.get_ref())
            .ok_or_else(|| at(s, format!("bond.address: {:?} is not an IPv4 address with prefix, such as \"10.200.0.1/30\"", s.get_ref())))?,
    };
    let address6 = match &b.address6 {
        None => None,
        Some(s) => Some(
            parse_cidr6(s.get_ref())
                .ok_or_else(|| at(s, format!("bond.address6: {:?} is not an IPv6 address with prefix, such as \"fd00:b::1/64\"", s.get_ref())))?,
        ),
    };
    let serial = raw.path.iter().any(|p| {
        p.get_ref()
            .kind
            .as_ref()
            .is_some_and(|k| k.get_ref() == "serial")
    });
    let default_mtu = if serial {
        MTU_DEFAULT_SERIAL
    } else {
        MTU_DEFAULT
    };
    let mtu = int(
        &b.mtu,
        "bond.mtu",
        i64::from(MTU_MIN),
        i64::from(MTU_MAX),
        i64::from(default_mtu),
    )?;
    let mtu = u32::try_from(mtu).unwrap_or(default_mtu);

    let layer = match &b.layer {
        None => Layer::Ip,
        Some(s) => match s.get_ref().as_str() {
            "ip" => Layer::Ip,
            "ethernet" => Layer::Ethernet,
            other => {
                return Err(at(
                    s,
                    format!("bond.layer: {other:?} is not ip or ethernet"),
                ));
            }
        },
    };
    // Ethernet members (`kind = "ethernet"`): a bond of ports, validated by `ether`.
    let ether_members = raw.path.iter().any(|p| {
        p.get_ref()
            .kind
            .as_ref()
            .is_some_and(|k| k.get_ref() == "ethernet")
    });
    let sched_name = b
        .scheduler
        .as_ref()
        .map_or("adaptive", |s| s.get_ref().as_str());
    if let Some(s) = b.scheduler.as_ref().filter(|_| !ether_members) {
        if sched_name == "802.3ad" {
            return Err(at(s, "bond.scheduler: \"802.3ad\" bonds Ethernet ports: it needs layer = \"ethernet\" and kind = \"ethernet\" paths".into()));
        }
        if !SCHEDULERS.contains(&sched_name) {
            return Err(at(
                s,
                format!(
                    "bond.scheduler: unknown scheduler {sched_name:?} (one of: {})",
                    SCHEDULERS.join(", ")
                ),
            ));
        }
    }
    let only = |v: Option<Range<usize>>, key: &str, sched: &str| -> VResult<()> {
        match v {
            Some(span) if sched_name != sched => Err((
                Some(span),
                format!("bond.{key}: only used with scheduler = \"{sched}\" (scheduler is \"{sched_name}\")"),
            )),
            _ => Ok(()),
        }
    };
    if sched_name != "802.3ad" {
        only(b.hash.as_ref().map(S::span), "hash", "xor")?;
    }
    only(
        b.packets_per_path.as_ref().map(S::span),
        "packets_per_path",
        "round-robin",
    )?;
    only(b.primary.as_ref().map(S::span), "primary", "active-backup")?;
    only(
        b.primary_reselect.as_ref().map(S::span),
        "primary_reselect",
        "active-backup",
    )?;
    only(
        b.updelay_ms.as_ref().map(S::span),
        "updelay_ms",
        "active-backup",
    )?;
    only(
        b.downdelay_ms.as_ref().map(S::span),
        "downdelay_ms",
        "active-backup",
    )?;

    let mut health = HealthConfig {
        probe_interval: ms(
            &b.probe_interval_ms,
            "bond.probe_interval_ms",
            1,
            60_000,
            100,
        )?,
        down_after: u32::try_from(int(&b.down_after, "bond.down_after", 1, 1000, 3)?).unwrap_or(3),
        up_after: u32::try_from(int(&b.up_after, "bond.up_after", 1, 1000, 2)?).unwrap_or(2),
    };
    let mut reorder_max = ms(&b.reorder_max_ms, "bond.reorder_max_ms", 0, 10_000, 200)?;
    let mut queue_max_delay = ms(
        &b.queue_max_delay_ms,
        "bond.queue_max_delay_ms",
        1,
        10_000,
        100,
    )?;
    let equalize_max = ms(&b.equalize_ms, "bond.equalize_ms", 0, 10_000, 100)?;
    let seed = int(&b.seed, "bond.seed", 0, i64::MAX, 0)?.unsigned_abs();

    // Paths.
    let mut paths = Vec::with_capacity(raw.path.len());
    let mut names = HashSet::new();
    let mut locals = HashSet::new();
    let mut devices = HashSet::new();
    // Paths without `remote` (learned), allowed on a sealed bond only.
    let mut learned: Vec<(usize, Range<usize>)> = Vec::new();
    let path_modes: Vec<Option<S<String>>> =
        raw.path.iter().map(|p| p.get_ref().mode.clone()).collect();
    let mut members = Vec::new();
    let mut member_devs = Vec::new();
    for (i, p) in raw.path.into_iter().enumerate() {
        let span = p.span();
        let p = p.into_inner();
        let key = |k: &str| format!("path[{i}].{k}");
        let need = |v: &Option<S<String>>, k: &str, example: &str| -> VResult<S<String>> {
            v.clone().ok_or_else(|| {
                (
                    Some(span.clone()),
                    format!("{}: missing (for example {k} = {example})", key(k)),
                )
            })
        };
        let name = need(&p.name, "name", "\"p0\"")?;
        check_path_name(name.get_ref()).map_err(|m| at(&name, format!("{}: {m}", key("name"))))?;
        if !names.insert(name.get_ref().clone()) {
            return Err(at(
                &name,
                format!("{}: duplicate path name {:?}", key("name"), name.get_ref()),
            ));
        }
        let kind = p.kind.as_ref().map_or("udp", |k| k.get_ref().as_str());
        if kind == "ethernet" {
            if layer != Layer::Ethernet {
                let k = p.kind.as_ref().map_or(span.clone(), S::span);
                return Err((
                    Some(k),
                    format!(
                        "{}: \"ethernet\" members need bond.layer = \"ethernet\"",
                        key("kind")
                    ),
                ));
            }
            let others = [
                (p.local.as_ref().map(S::span), "local"),
                (p.remote.as_ref().map(S::span), "remote"),
                (p.device.as_ref().map(S::span), "device"),
                (p.baud.as_ref().map(S::span), "baud"),
                (p.framing.as_ref().map(S::span), "framing"),
                (p.mode.as_ref().map(S::span), "mode"),
                (p.mtu.as_ref().map(S::span), "mtu"),
                (p.bps.as_ref().map(S::span), "bps"),
                (p.prio.as_ref().map(S::span), "prio"),
                (p.emulate.as_ref().map(S::span), "emulate"),
            ];
            members.push(ether::member(
                name.get_ref(),
                p.dev.as_ref(),
                &others,
                &key,
                &span,
            )?);
            member_devs.push(p.dev.as_ref().map_or(span.clone(), S::span));
            continue;
        }
        let transport = match kind {
            "udp" => {
                for (v, k) in [
                    (&p.device, "device"),
                    (&p.framing, "framing"),
                    (&p.mode, "mode"),
                ] {
                    if let Some(v) = v {
                        return Err(at(v, format!("{}: only for kind = \"serial\"", key(k))));
                    }
                }
                if let Some(v) = &p.baud {
                    return Err(at(
                        v,
                        format!("{}: only for kind = \"serial\"", key("baud")),
                    ));
                }
                let u = udp_path(&p, &key, &need, &mut locals)?;
                if u.remote == Remote::Learn {
                    learned.push((i, span.clone()));
                }
                Transport::Udp(u)
            }
            "serial" => Transport::Serial(serial_path(
                &p,
                &key,
                &need,
                &mut devices,
                usize::try_from(mtu).unwrap_or(1400),
            )?),
            other => {
                let k = p.kind.as_ref().map_or(span.clone(), S::span);
                return Err((
                    Some(k),
                    format!(
                        "{}: unknown kind {other:?} (\"udp\", \"serial\" or \"ethernet\")",
                        key("kind")
                    ),
                ));
            }
        };
        let mut bps = p.bps.as_ref().map_or(0, |b| b.get_ref().0);
        if let Transport::Serial(s) = &transport {
            if s.auto_bps {
                bps = serial_bps(s.baud, s.framing, s.mtu);
            }
        }
        let prio = int(
            &p.prio,
            &key("prio"),
            i64::from(i32::MIN),
            i64::from(i32::MAX),
            0,
        )?;
        let prio = i32::try_from(prio).unwrap_or(0);
        let emulate = match &p.emulate {
            None => None,
            Some(e) => Some(emulate(e.get_ref(), &key("emulate"))?),
        };
        paths.push(PathSettings {
            name: name.into_inner(),
            transport,
            bps,
            prio,
            emulate,
        });
    }

    if let Some((i, m)) = path_modes.iter().enumerate().find_map(|(i, m)| {
        m.as_ref()
            .filter(|m| m.get_ref() == "raw-ip")
            .map(|m| (i, m))
    }) {
        if paths.len() != 1 {
            return Err(at(
                m,
                format!(
                    "path[{i}].mode: \"raw-ip\" puts the TUN's packets on this one line without braid's header (for a classic SLIP/CSLIP peer), so it must be the bond's only path; this file has {} paths",
                    paths.len()
                ),
            ));
        }
        if b.encryption.as_ref().map(|e| e.get_ref().as_str()) != Some("none") {
            return Err(at(
                m,
                format!(
                    "path[{i}].mode: \"raw-ip\" sends plain IP packets (a classic SLIP peer cannot open sealed datagrams): set bond.encryption = \"none\" and no keys"
                ),
            ));
        }
    }

    let raw_ether = ether::RawEther {
        scheduler: b.scheduler.as_ref(),
        hash: match &b.hash {
            None => None,
            Some(s) => Some(parse_hash(s.get_ref()).ok_or_else(|| {
                at(s, format!(
                    "bond.hash: unknown hash policy {:?} (one of: layer2, layer2+3, layer3+4, encap2+3, encap3+4, vlan+srcmac, gabler)",
                    s.get_ref()
                ))
            })?),
        },
        primary: b.primary.as_ref(),
        lacp_rate: &b.lacp_rate,
        lacp: &b.lacp,
        min_links: &b.min_links,
        lacp_fallback: &b.lacp_fallback,
        arp_interval: &b.arp_interval,
        arp_ip_target: &b.arp_ip_target,
        take_default_route: &b.take_default_route,
    };
    let ether = if members.is_empty() {
        if let Some((span, k)) = raw_ether.first_given() {
            return Err((Some(span), format!("bond.{k}: only for a bond of Ethernet ports (layer = \"ethernet\" with kind = \"ethernet\" paths)")));
        }
        None
    } else {
        if let Some(first) = paths.first() {
            return Err((Some(bond_span), format!("path {:?}: a bond of Ethernet ports cannot also have {} paths (an Ethernet bond over UDP paths has no kind = \"ethernet\" members)", first.name, if first.serial().is_some() { "serial" } else { "UDP" })));
        }
        if b.encryption.as_ref().map(|e| e.get_ref().as_str()) != Some("none") {
            let s = b.encryption.as_ref().map_or(bond_span.clone(), S::span);
            return Err((Some(s), "bond.encryption: Ethernet members carry frames as the kernel's bonding does, unsealed: set encryption = \"none\" (and no keys)".into()));
        }
        Some(ether::validate(&raw_ether, members, &member_devs)?)
    };

    // Serial lines: defaults that scale with the slowest line (keys given win).
    if let Some(d) = serial_defaults(&paths) {
        if b.probe_interval_ms.is_none() {
            health.probe_interval = d.probe_interval;
        }
        if b.reorder_max_ms.is_none() {
            reorder_max = d.reorder_max;
        }
        if b.queue_max_delay_ms.is_none() {
            queue_max_delay = d.queue_max_delay;
        }
    }

    let scheduler = match sched_name {
        // An Ethernet bond's mode is in `ether`; no endpoint runs.
        _ if ether.is_some() => SchedulerConfig::Adaptive,
        "eql" => SchedulerConfig::Eql,
        "round-robin" => SchedulerConfig::RoundRobin {
            packets_per_path: u32::try_from(int(&b.packets_per_path, "bond.packets_per_path", 0, 65_535, 1)?).unwrap_or(1),
        },
        "weighted" => SchedulerConfig::Weighted,
        "broadcast" => SchedulerConfig::Broadcast,
        "xor" => SchedulerConfig::Xor {
            hash: match &b.hash {
                None => HashPolicy::Layer2,
                Some(s) => parse_hash(s.get_ref()).ok_or_else(|| {
                    at(s, format!(
                        "bond.hash: unknown hash policy {:?} (one of: layer2, layer2+3, layer3+4, encap2+3, encap3+4, vlan+srcmac, gabler)",
                        s.get_ref()
                    ))
                })?,
            },
        },
        "active-backup" => {
            let primary = match &b.primary {
                None => None,
                Some(s) => Some(
                    paths
                        .iter()
                        .position(|p| &p.name == s.get_ref())
                        .map(index_id)
                        .ok_or_else(|| at(s, format!("bond.primary: no path named {:?}", s.get_ref())))?,
                ),
            };
            let reselect = match &b.primary_reselect {
                None => Reselect::Always,
                Some(s) => match s.get_ref().as_str() {
                    "always" => Reselect::Always,
                    "better" => Reselect::Better,
                    "failure" => Reselect::Failure,
                    other => {
                        return Err(at(s, format!("bond.primary_reselect: {other:?} is not one of always, better, failure")));
                    }
                },
            };
            SchedulerConfig::ActiveBackup(Options {
                primary,
                reselect,
                updelay: ms(&b.updelay_ms, "bond.updelay_ms", 0, 600_000, 0)?,
                downdelay: ms(&b.downdelay_ms, "bond.downdelay_ms", 0, 600_000, 0)?,
            })
        }
        _ => SchedulerConfig::Adaptive,
    };

    let core = BondConfig {
        scheduler,
        health,
        reorder_max,
        queue_max_delay,
        equalize_max,
        mtu: usize::try_from(mtu).unwrap_or(default_mtu as usize),
        seed,
        mss_clamp: b.mss_clamp.as_ref().is_none_or(|v| *v.get_ref()),
        // IP packets from the TUN; Ethernet frames from a TAP when `layer = "ethernet"`.
        frames: match layer {
            Layer::Ip => braid_core::Frames::Ip,
            Layer::Ethernet => braid_core::Frames::Ethernet,
        },
        ..BondConfig::default()
    };
    let encryption = security::validate(
        security::RawSecurity {
            encryption: &b.encryption,
            private_key: &b.private_key,
            private_key_file: &b.private_key_file,
            peer_public_key: &b.peer_public_key,
            preshared_key: &b.preshared_key,
            preshared_key_file: &b.preshared_key_file,
            rekey_after_s: &b.rekey_after_s,
            source,
        },
        bond_span.clone(),
        base,
    )?;
    let run_as = run_as(b.user.as_ref(), b.group.as_ref())?;
    if layer == Layer::Ethernet {
        for (i, p) in paths.iter().enumerate() {
            let Some(sl) = p.serial() else { continue };
            if sl.mode == SerialMode::RawIp {
                return Err((Some(bond_span), format!("path[{i}].mode: \"raw-ip\" puts IP packets on the line; an Ethernet bond (layer = \"ethernet\") carries frames: use mode = \"bond\"")));
            }
            if sl.framing == Framing::Cslip && !encryption.is_sealed() {
                return Err((Some(bond_span), format!("path[{i}].framing: \"cslip\" compresses the TCP/IP headers of plain IP packets; an Ethernet bond's plain datagrams carry frames: use \"slip\" or \"slip6\", or seal the bond")));
            }
        }
    }
    for p in &mut paths {
        if let Transport::Serial(s) = &mut p.transport {
            s.crc = s.mode == SerialMode::Bond && !encryption.is_sealed();
        }
    }
    let routing = routing::validate(routing::RawRouting {
        routes: &b.routes,
        fwmark: &b.fwmark,
        post_up: &b.post_up,
        pre_down: &b.pre_down,
        user: run_as.is_some(),
    })?;
    if !encryption.is_sealed() {
        if let Some((i, span)) = learned.first() {
            return Err((
                Some(span.clone()),
                format!("path[{i}].remote: missing; it may be left out (learned from the peer's datagrams) only on a sealed bond: with encryption = \"none\" braid accepts datagrams only from a path's remote"),
            ));
        }
    }
    let bond = BondSettings {
        interface,
        address,
        address6,
        mtu,
        primary: b.primary.map(S::into_inner),
        offload: b.offload.as_ref().is_none_or(|v| *v.get_ref()),
        workers: match &b.workers {
            None => None,
            Some(_) => {
                Some(usize::try_from(int(&b.workers, "bond.workers", 0, 16, 1)?).unwrap_or(1))
            }
        },
        core,
        encryption,
        run_as,
        routing,
        layer,
        mac: ether::mac(&b.mac, layer)?,
    };
    let shape = match raw.shape {
        None => None,
        Some(s) => {
            let span = s.span();
            let settings = shape::validate(s, base)?;
            // The shaper's own checks (tree, default class, depth) at load time, so that
            // `braid check` reports them.
            braid_core::shape::Shaper::new(
                &settings.spec,
                0,
                bond.core.mtu,
                braid_core::Instant::ZERO,
            )
            .map_err(|e| (Some(span), format!("shape: {e}")))?;
            Some(settings)
        }
    };
    let monitor = raw
        .monitor
        .map(|m| monitor::validate(m, base))
        .transpose()?;
    if ether.is_some() && monitor.as_ref().is_some_and(|m| m.listen.is_some()) {
        return Err((None, "[monitor]: not served by a bond of Ethernet ports yet (braid status shows its members); remove [monitor] or its listen".into()));
    }
    if ether.is_some() && shape.is_some() {
        return Err((None, "[shape]: not for a bond of Ethernet ports (HTB runs on the IP layer's bond; shape the members with tc)".into()));
    }
    Ok(Config {
        bond,
        paths,
        shape,
        monitor,
        ether,
    })
}

type Need<'a> = dyn Fn(&Option<S<String>>, &str, &str) -> VResult<S<String>> + 'a;

/// `local`, `remote`, `dev` of a UDP path.
fn udp_path(
    p: &RawPath,
    key: &dyn Fn(&str) -> String,
    need: &Need<'_>,
    locals: &mut HashSet<(SocketAddr, Option<String>)>,
) -> VResult<UdpSettings> {
    let local_s = need(&p.local, "local", "\"10.201.0.1:7000\"")?;
    let local = endpoint::parse_local(local_s.get_ref(), p.dev.is_some())
        .map_err(|m| at(&local_s, format!("{}: {m}", key("local"))))?;
    // An unspecified local follows its device's address: unique with the device.
    let dev_key = local
        .ip()
        .is_unspecified()
        .then(|| p.dev.as_ref().map(|d| d.get_ref().clone()))
        .flatten();
    if !locals.insert((local, dev_key)) {
        return Err(at(
            &local_s,
            format!("{}: {local} is already used by another path", key("local")),
        ));
    }
    let remote = match &p.remote {
        None => Remote::Learn,
        Some(remote_s) => {
            let remote = endpoint::parse_remote(remote_s.get_ref())
                .map_err(|m| at(remote_s, format!("{}: {m}", key("remote"))))?;
            if let Remote::Addr(r) = remote {
                if local.is_ipv4() != r.is_ipv4() {
                    return Err(at(
                        remote_s,
                        format!(
                            "{}: {r} and local {local} are of different address families",
                            key("remote")
                        ),
                    ));
                }
            }
            remote
        }
    };
    let dev = match &p.dev {
        None => None,
        Some(s) => {
            check_ifname(s.get_ref()).map_err(|m| at(s, format!("{}: {m}", key("dev"))))?;
            Some(s.get_ref().clone())
        }
    };
    let link_mtu = int(
        &p.mtu,
        &key("mtu"),
        576,
        65_535,
        i64::from(LINK_MTU_DEFAULT),
    )?;
    let link_mtu = u32::try_from(link_mtu).unwrap_or(LINK_MTU_DEFAULT);
    Ok(UdpSettings {
        local,
        remote,
        dev,
        link_mtu,
    })
}

/// `device`, `baud`, `framing`, `mtu` of a serial path; `bond_mtu` is the TUN's.
fn serial_path(
    p: &RawPath,
    key: &dyn Fn(&str) -> String,
    need: &Need<'_>,
    devices: &mut HashSet<PathBuf>,
    bond_mtu: usize,
) -> VResult<SerialSettings> {
    for (v, k) in [(&p.local, "local"), (&p.remote, "remote"), (&p.dev, "dev")] {
        if let Some(v) = v {
            return Err(at(
                v,
                format!(
                    "{}: not used by a serial path (it has `device` and `baud`)",
                    key(k)
                ),
            ));
        }
    }
    let dev_s = need(&p.device, "device", "\"/dev/ttyS0\"")?;
    let device = PathBuf::from(dev_s.get_ref());
    if !device.is_absolute() {
        return Err(at(
            &dev_s,
            format!(
                "{}: {:?} is not an absolute path (for example \"/dev/ttyS0\")",
                key("device"),
                dev_s.get_ref()
            ),
        ));
    }
    if !devices.insert(device.clone()) {
        return Err(at(
            &dev_s,
            format!(
                "{}: {} is already used by another path",
                key("device"),
                device.display()
            ),
        ));
    }
    let Some(baud_s) = &p.baud else {
        return Err((
            p.device.as_ref().map(S::span),
            format!("{}: missing (for example baud = 57600)", key("baud")),
        ));
    };
    let baud = int(
        &p.baud,
        &key("baud"),
        i64::from(*BAUD_RANGE.start()),
        i64::from(*BAUD_RANGE.end()),
        0,
    )?;
    let baud =
        u32::try_from(baud).map_err(|_| at(baud_s, format!("{}: out of range", key("baud"))))?;
    let framing = match &p.framing {
        None => Framing::Slip,
        Some(f) => f
            .get_ref()
            .parse::<Framing>()
            .map_err(|e| at(f, format!("{}: {e}", key("framing"))))?,
    };
    let mode = match &p.mode {
        None => SerialMode::Bond,
        Some(m) => match m.get_ref().as_str() {
            "bond" => SerialMode::Bond,
            "raw-ip" => SerialMode::RawIp,
            other => {
                return Err(at(
                    m,
                    format!(
                        "{}: unknown mode {other:?} (\"bond\" or \"raw-ip\")",
                        key("mode")
                    ),
                ))
            }
        },
    };
    if mode == SerialMode::RawIp {
        if let Some(b) = &p.bps {
            return Err(at(
                b,
                format!(
                    "{}: not used with mode = \"raw-ip\" (the line is paced at its baud)",
                    key("bps")
                ),
            ));
        }
    }
    // In raw-ip mode a frame is the TUN's packet alone.
    let datagram = match mode {
        SerialMode::Bond => bond_mtu + DATA_HEADER_LEN,
        SerialMode::RawIp => bond_mtu,
    };
    let mtu = int(&p.mtu, &key("mtu"), 0, 65_535, 0)?.unsigned_abs();
    let mtu = usize::try_from(mtu).unwrap_or(0);
    if let Some(m) = &p.mtu {
        if mode == SerialMode::RawIp && mtu < datagram {
            return Err(at(
                m,
                format!(
                    "{}: {mtu} is smaller than bond.mtu = {datagram}; braid does not fragment, lower bond.mtu instead",
                    key("mtu")
                ),
            ));
        }
        if mtu < datagram {
            return Err(at(
                m,
                format!(
                    "{}: {mtu} is smaller than bond.mtu + {DATA_HEADER_LEN} (braid's header) = {datagram}; braid does not fragment, lower bond.mtu instead",
                    key("mtu")
                ),
            ));
        }
    }
    Ok(SerialSettings {
        device,
        baud,
        framing,
        mtu: if p.mtu.is_some() { mtu } else { datagram },
        auto_bps: p.bps.as_ref().is_none_or(|b| b.get_ref().0 == 0),
        mode,
        crc: false,
    })
}

fn emulate(e: &RawEmulate, key: &str) -> VResult<EmuConfig> {
    let millis = |v: &Option<S<f64>>, k: &str| -> VResult<Duration> {
        match v {
            None => Ok(Duration::ZERO),
            Some(s) => {
                let x = *s.get_ref();
                if !x.is_finite() || !(0.0..=60_000.0).contains(&x) {
                    return Err(at(
                        s,
                        format!("{key}.{k}: {x} is out of range (0..=60000 ms)"),
                    ));
                }
                Ok(Duration::from_secs_f64(x / 1000.0))
            }
        }
    };
    let loss = match &e.loss {
        None => 0.0,
        Some(s) => {
            let x = *s.get_ref();
            if !(0.0..=1.0).contains(&x) {
                return Err(at(
                    s,
                    format!("{key}.loss: {x} is out of range (a probability, 0..=1)"),
                ));
            }
            x
        }
    };
    let mut outages = Vec::new();
    if let Some(s) = &e.outages {
        for pair in s.get_ref() {
            let &[start, len] = pair.as_slice() else {
                return Err(at(
                    s,
                    format!("{key}.outages: {pair:?} is not a [start_ms, length_ms] pair"),
                ));
            };
            if start < 0 || len < 0 {
                return Err(at(s, format!("{key}.outages: [{start}, {len}] has a negative time (use [start_ms, length_ms])")));
            }
            outages.push((
                Duration::from_millis(start.unsigned_abs()),
                Duration::from_millis(len.unsigned_abs()),
            ));
        }
    }
    Ok(EmuConfig {
        delay: millis(&e.delay_ms, "delay_ms")?,
        jitter: millis(&e.jitter_ms, "jitter_ms")?,
        loss,
        rate_bps: int(&e.rate_bps, &format!("{key}.rate_bps"), 0, i64::MAX, 0)?.unsigned_abs(),
        queue_bytes: int(
            &e.queue_bytes,
            &format!("{key}.queue_bytes"),
            0,
            i64::MAX,
            0,
        )?
        .unsigned_abs(),
        outages,
        seed: int(&e.seed, &format!("{key}.seed"), 0, i64::MAX, 1)?.unsigned_abs(),
    })
}

/// The peer's address family check used by run-time `enslave`: both endpoints valid and of
/// one family.
pub fn check_endpoints(local: &str, remote: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let l = parse_endpoint(local).map_err(|m| format!("local: {m}"))?;
    let r = parse_endpoint(remote).map_err(|m| format!("remote: {m}"))?;
    if l.is_ipv4() != r.is_ipv4() {
        return Err(format!(
            "remote: {r} and local {l} are of different address families"
        ));
    }
    Ok((l, r))
}

#[cfg(test)]
mod tests;
