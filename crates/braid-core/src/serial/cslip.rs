//! CSLIP: Van Jacobson TCP/IP header compression (RFC 1144) as Linux `slhc.c`.
//!
//! The [`Compressor`] turns an IPv4 packet into one of three packet types, told apart by
//! the first byte (as `sl_bump` does):
//!
//! - `byte0 & 0x80`: [`PacketType::CompressedTcp`]: `0x80|changes`, optional connection
//!   id, the 2-byte TCP checksum, the deltas (U, W, A, S, I), then the TCP payload;
//! - `byte0 >= 0x70`: [`PacketType::UncompressedTcp`]: the full packet with 0x70 ORed
//!   into the version byte and the connection id in the protocol byte (offset 9);
//! - otherwise [`PacketType::Ip`]: the packet unchanged.
//!
//! The [`Decompressor`] rebuilds the full IP and TCP headers (the IP checksum is computed
//! again, the TCP checksum is the one carried) and, after any error, drops compressed
//! packets without an explicit connection id until one with an id arrives (`SLF_TOSS`).
//!
//! Deviations from the kernel (all on inputs the kernel mishandles; none changes the bytes
//! sent for a well-formed TCP/IP packet the kernel would compress correctly) are listed in
//! `docs/serial.md`.

use core::fmt;

/// First-byte type bits of a plain IP packet (version 4).
pub const TYPE_IP: u8 = 0x40;
/// First-byte type bits of an uncompressed TCP packet.
pub const TYPE_UNCOMPRESSED_TCP: u8 = 0x70;
/// First-byte type bit of a compressed TCP packet.
pub const TYPE_COMPRESSED_TCP: u8 = 0x80;

/// Change bit: connection id present.
pub const NEW_C: u8 = 0x40;
/// Change bit: IP id delta present (it is left out when the delta is 1).
pub const NEW_I: u8 = 0x20;
/// Change bit: the TCP PSH flag.
pub const TCP_PUSH_BIT: u8 = 0x10;
/// Change bit: sequence number delta present.
pub const NEW_S: u8 = 0x08;
/// Change bit: ack number delta present.
pub const NEW_A: u8 = 0x04;
/// Change bit: window delta present.
pub const NEW_W: u8 = 0x02;
/// Change bit: urgent pointer present (URG set).
pub const NEW_U: u8 = 0x01;
/// Echoed interactive traffic: seq and ack both advance by the previous data length.
pub const SPECIAL_I: u8 = NEW_S | NEW_W | NEW_U;
/// One-way data: seq advances by the previous data length.
pub const SPECIAL_D: u8 = NEW_S | NEW_A | NEW_W | NEW_U;
const SPECIALS_MASK: u8 = NEW_S | NEW_A | NEW_W | NEW_U;

/// Slots each way on a Linux SLIP line (`slhc_init(16, 16)`).
pub const DEFAULT_SLOTS: u8 = 16;

const TH_FIN: u8 = 0x01;
const TH_SYN: u8 = 0x02;
const TH_RST: u8 = 0x04;
const TH_PSH: u8 = 0x08;
const TH_ACK: u8 = 0x10;
const TH_URG: u8 = 0x20;
const IPPROTO_TCP: u8 = 6;

/// The three CSLIP packet types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketType {
    /// Sent as it is (not TCP, a fragment, SYN/FIN/RST, no ACK, runt, or no slots).
    Ip,
    /// A full TCP/IP packet that (re)sets a connection slot.
    UncompressedTcp,
    /// A compressed TCP/IP header followed by the payload.
    CompressedTcp,
}

impl PacketType {
    /// The type of a received CSLIP packet from its first byte, as `sl_bump` reads it.
    pub fn from_first_byte(b: u8) -> Self {
        if b & TYPE_COMPRESSED_TCP != 0 {
            PacketType::CompressedTcp
        } else if b >= TYPE_UNCOMPRESSED_TCP {
            PacketType::UncompressedTcp
        } else {
            PacketType::Ip
        }
    }
}

/// Why the decompressor refused a packet. After any of these except [`CslipError::Tossed`]
/// the decompressor drops implicit-id compressed packets until an explicit id arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CslipError {
    /// Empty packet, a compressed packet under 3 bytes, or an uncompressed TCP packet too
    /// short for its IP header, or whose IHL is below 5 (`sls_i_runt`).
    Runt,
    /// An uncompressed TCP packet whose TCP header is cut short or has a data offset below
    /// 5 (the kernel would read past the packet).
    BadTcpHeader,
    /// An uncompressed TCP packet with a bad IP header checksum (`sls_i_badcheck`).
    BadChecksum,
    /// A connection id beyond the slots, or naming a slot never set up.
    BadConnectionId,
    /// A compressed packet that ends inside its header or deltas.
    Truncated,
    /// The rebuilt packet would be longer than 65535 bytes.
    TooLong,
    /// Dropped: implicit connection id while tossing after an error (`sls_i_tossed`).
    Tossed,
}

impl fmt::Display for CslipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CslipError::Runt => "runt packet",
            CslipError::BadTcpHeader => "bad TCP header in uncompressed TCP packet",
            CslipError::BadChecksum => "bad IP header checksum",
            CslipError::BadConnectionId => "bad connection id",
            CslipError::Truncated => "truncated compressed header",
            CslipError::TooLong => "rebuilt packet too long",
            CslipError::Tossed => "tossed: waiting for an explicit connection id",
        })
    }
}

impl std::error::Error for CslipError {}

/// Saved headers of one connection: 20 bytes of IP, 20 of TCP and their options.
#[derive(Clone, Copy)]
struct Headers {
    ip: [u8; 20],
    tcp: [u8; 20],
    ipopt: [u8; 40],
    tcpopt: [u8; 40],
}

impl Headers {
    const ZERO: Headers = Headers {
        ip: [0; 20],
        tcp: [0; 20],
        ipopt: [0; 40],
        tcpopt: [0; 40],
    };
    fn ihl(&self) -> usize {
        usize::from(self.ip[0] & 0x0F)
    }
    fn doff(&self) -> usize {
        usize::from(self.tcp[12] >> 4)
    }
    fn ipopt(&self) -> &[u8] {
        &self.ipopt[..self.ihl().saturating_sub(5) * 4]
    }
    fn tcpopt(&self) -> &[u8] {
        &self.tcpopt[..self.doff().saturating_sub(5) * 4]
    }
    /// Saves a header whose IHL and data offset the caller has checked to be >= 5 and
    /// within `p`.
    fn save_full(&mut self, p: &[u8], nlen: usize, hlen: usize) {
        self.ip.copy_from_slice(&p[..20]);
        self.tcp.copy_from_slice(&p[nlen..nlen + 20]);
        self.ipopt[..nlen - 20].copy_from_slice(&p[20..nlen]);
        self.tcpopt[..hlen - nlen - 20].copy_from_slice(&p[nlen + 20..hlen]);
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Headers")
            .field("ip", &self.ip)
            .field("tcp", &self.tcp)
            .finish_non_exhaustive()
    }
}

fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}
fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}
fn add16(b: &mut [u8], off: usize, d: u16) {
    let v = be16(b, off).wrapping_add(d);
    put16(b, off, v);
}
fn add32(b: &mut [u8], off: usize, d: u32) {
    let v = be32(b, off).wrapping_add(d);
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// The IPv4 header checksum of `hdr` (whose checksum field may hold anything: a header
/// with a correct checksum sums to 0 here only if the field is included, see callers).
pub fn ip_checksum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = hdr.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// slhc `encode()`: 1 byte for 1..=255, else `0, hi, lo`.
fn encode_num(buf: &mut [u8; 16], len: &mut usize, n: u16) {
    if n == 0 || n >= 256 {
        buf[*len] = 0;
        buf[*len + 1..*len + 3].copy_from_slice(&n.to_be_bytes());
        *len += 3;
    } else {
        buf[*len] = n as u8;
        *len += 1;
    }
}

/// Compressor counters (slhc `sls_o_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompressorStats {
    /// Packets that were not TCP.
    pub nontcp: u64,
    /// TCP packets sent as plain IP (fragments, SYN/FIN/RST, no ACK, runts).
    pub tcp: u64,
    /// Sent as UNCOMPRESSED_TCP.
    pub uncompressed: u64,
    /// Sent as COMPRESSED_TCP.
    pub compressed: u64,
    /// Slot list steps while looking up a connection.
    pub searches: u64,
    /// Lookups that found no slot (the oldest slot was reused).
    pub misses: u64,
}

#[derive(Clone, Copy, Debug)]
struct TxSlot {
    this: u8,
    next: u8,
    h: Headers,
}

/// The sending half of RFC 1144 (slhc `tstate`): an LRU ring of connection slots.
#[derive(Clone, Debug)]
pub struct Compressor {
    slots: Vec<TxSlot>,
    oldest: u8,
    current: u8,
    compress_cid: bool,
    stats: CompressorStats,
}

impl Default for Compressor {
    fn default() -> Self {
        Compressor::new(DEFAULT_SLOTS)
    }
}

impl Compressor {
    /// A compressor with `slots` connection slots (0 turns compression off: every packet
    /// goes out as [`PacketType::Ip`]). The connection id is left out when it equals the
    /// last one sent (`compress_cid`, as slip.c); see [`Compressor::set_compress_cid`].
    pub fn new(slots: u8) -> Self {
        let n = usize::from(slots);
        let mut v: Vec<TxSlot> = (0..n)
            .map(|i| TxSlot {
                this: i as u8,
                next: i.saturating_sub(1) as u8,
                h: Headers::ZERO,
            })
            .collect();
        if let Some(first) = v.first_mut() {
            first.next = slots - 1;
        }
        Compressor {
            slots: v,
            oldest: 0,
            current: 255,
            compress_cid: true,
            stats: CompressorStats::default(),
        }
    }

    /// Whether to leave the connection id out when it equals the previous packet's.
    pub fn set_compress_cid(&mut self, on: bool) {
        self.compress_cid = on;
    }

    /// Counters so far.
    pub fn stats(&self) -> CompressorStats {
        self.stats
    }

    /// Number of connection slots.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Compresses the IPv4 packet `ip_packet`, **appending** the result to `out` (so the
    /// caller may put its own prefix there first), and returns its type. Never fails: a
    /// packet that cannot be compressed is appended unchanged as [`PacketType::Ip`].
    pub fn compress(&mut self, ip_packet: &[u8], out: &mut Vec<u8>) -> PacketType {
        match self.compress_inner(ip_packet, out) {
            Some(t) => t,
            None => {
                out.extend_from_slice(ip_packet);
                PacketType::Ip
            }
        }
    }

    /// `None`: send `p` as plain IP.
    fn compress_inner(&mut self, p: &[u8], out: &mut Vec<u8>) -> Option<PacketType> {
        if self.slots.is_empty() || p.len() < 20 {
            return None;
        }
        let ihl = usize::from(p[0] & 0x0F);
        if p[0] >> 4 != 4 || ihl < 5 {
            return None;
        }
        if p[9] != IPPROTO_TCP || be16(p, 6) & 0x3FFF != 0 {
            if p[9] != IPPROTO_TCP {
                self.stats.nontcp += 1;
            } else {
                self.stats.tcp += 1;
            }
            return None;
        }
        let nlen = ihl * 4;
        if p.len() < nlen + 20 {
            return None;
        }
        let th = &p[nlen..];
        let doff = usize::from(th[12] >> 4);
        if doff < 5 {
            return None;
        }
        let hlen = nlen + doff * 4;
        let flags = th[13];
        // Deviation: a packet whose total length disagrees with its size would come out
        // of the decompressor with a different total length; send it as it is.
        if hlen > p.len()
            || flags & (TH_SYN | TH_FIN | TH_RST) != 0
            || flags & TH_ACK == 0
            || usize::from(be16(p, 2)) != p.len()
        {
            self.stats.tcp += 1;
            return None;
        }

        // Find the connection's slot in the LRU ring (slhc's linear search).
        let ocs = usize::from(self.oldest);
        let mut lcs = ocs;
        let mut cs = usize::from(self.slots[ocs].next);
        let found = loop {
            let h = &self.slots[cs].h;
            if p[12..20] == h.ip[12..20] && th[0..4] == h.tcp[0..4] {
                break true;
            }
            if cs == ocs {
                break false;
            }
            lcs = cs;
            cs = usize::from(self.slots[cs].next);
            self.stats.searches += 1;
        };
        if !found {
            self.stats.misses += 1;
            self.oldest = self.slots[lcs].this;
            return Some(self.uncompressed(cs, p, nlen, hlen, out));
        }
        if lcs == ocs {
            // already the most recently used
        } else if cs == ocs {
            self.oldest = self.slots[lcs].this;
        } else {
            self.slots[lcs].next = self.slots[cs].next;
            self.slots[cs].next = self.slots[ocs].next;
            self.slots[ocs].next = cs as u8;
        }

        let old = self.slots[cs].h;
        // Only what is expected to change may change. Beyond the kernel's checks
        // (version, IHL, TOS, DF, TTL, data offset, options) this also compares the IP
        // reserved flag and the TCP flags other than PSH/URG (ECE, CWR, reserved bits),
        // which the kernel would silently rebuild from the old header.
        if p[0] != old.ip[0]
            || p[1] != old.ip[1]
            || be16(p, 6) != be16(&old.ip, 6)
            || p[8] != old.ip[8]
            || th[12] != old.tcp[12]
            || (flags & !(TH_PSH | TH_URG)) != (old.tcp[13] & !(TH_PSH | TH_URG))
            || p[20..nlen] != *old.ipopt()
            || th[20..doff * 4] != *old.tcpopt()
        {
            return Some(self.uncompressed(cs, p, nlen, hlen, out));
        }

        let mut deltas = [0u8; 16];
        let mut dl = 0usize;
        let mut changes: u8 = 0;
        let urg_ptr = be16(th, 18);
        if flags & TH_URG != 0 {
            encode_num(&mut deltas, &mut dl, urg_ptr);
            changes |= NEW_U;
        } else if urg_ptr != be16(&old.tcp, 18) {
            return Some(self.uncompressed(cs, p, nlen, hlen, out));
        }
        let dw = be16(th, 14).wrapping_sub(be16(&old.tcp, 14));
        if dw != 0 {
            encode_num(&mut deltas, &mut dl, dw);
            changes |= NEW_W;
        }
        let da = be32(th, 8).wrapping_sub(be32(&old.tcp, 8));
        if da != 0 {
            if da > 0xFFFF {
                return Some(self.uncompressed(cs, p, nlen, hlen, out));
            }
            encode_num(&mut deltas, &mut dl, da as u16);
            changes |= NEW_A;
        }
        let ds = be32(th, 4).wrapping_sub(be32(&old.tcp, 4));
        if ds != 0 {
            if ds > 0xFFFF {
                return Some(self.uncompressed(cs, p, nlen, hlen, out));
            }
            encode_num(&mut deltas, &mut dl, ds as u16);
            changes |= NEW_S;
        }
        // Data length of the previous packet (as int in slhc; may be negative).
        let old_data = i64::from(be16(&old.ip, 2)) - hlen as i64;
        match changes {
            0 => {
                // Nothing changed: compress only a data packet following a pure ack;
                // anything else is probably a retransmission: send it uncompressed.
                if !(be16(p, 2) != be16(&old.ip, 2) && old_data == 0) {
                    return Some(self.uncompressed(cs, p, nlen, hlen, out));
                }
            }
            SPECIAL_I | SPECIAL_D => {
                return Some(self.uncompressed(cs, p, nlen, hlen, out));
            }
            x if x == NEW_S | NEW_A => {
                // Deviation: the kernel's decompressor adds this length as a C `short`,
                // so SPECIAL_I is only used for lengths up to 0x7FFF here.
                if ds == da && i64::from(ds) == old_data && ds <= 0x7FFF {
                    changes = SPECIAL_I;
                    dl = 0;
                }
            }
            NEW_S => {
                if i64::from(ds) == old_data {
                    changes = SPECIAL_D;
                    dl = 0;
                }
            }
            _ => {}
        }
        // The IP id delta, computed as C int and sent truncated to 16 bits unless it is 1.
        let di = i32::from(be16(p, 4)) - i32::from(be16(&old.ip, 4));
        if di != 1 {
            encode_num(&mut deltas, &mut dl, di as u16);
            changes |= NEW_I;
        }
        if flags & TH_PSH != 0 {
            changes |= TCP_PUSH_BIT;
        }
        let slot = &mut self.slots[cs];
        slot.h.ip.copy_from_slice(&p[..20]);
        slot.h.tcp.copy_from_slice(&th[..20]);
        let this = slot.this;

        let start = out.len();
        out.reserve(4 + dl + p.len() - hlen);
        if !self.compress_cid || self.current != this {
            out.push(changes | NEW_C);
            out.push(this);
            self.current = this;
        } else {
            out.push(changes);
        }
        out.extend_from_slice(&th[16..18]);
        out.extend_from_slice(&deltas[..dl]);
        out.extend_from_slice(&p[hlen..]);
        out[start] |= TYPE_COMPRESSED_TCP;
        self.stats.compressed += 1;
        Some(PacketType::CompressedTcp)
    }

    fn uncompressed(
        &mut self,
        cs: usize,
        p: &[u8],
        nlen: usize,
        hlen: usize,
        out: &mut Vec<u8>,
    ) -> PacketType {
        let slot = &mut self.slots[cs];
        slot.h.save_full(p, nlen, hlen);
        let this = slot.this;
        self.current = this;
        self.stats.uncompressed += 1;
        let start = out.len();
        out.extend_from_slice(p);
        out[start + 9] = this;
        out[start] |= TYPE_UNCOMPRESSED_TCP;
        PacketType::UncompressedTcp
    }
}

/// Decompressor counters (slhc `sls_i_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecompressorStats {
    /// UNCOMPRESSED_TCP packets accepted.
    pub uncompressed: u64,
    /// COMPRESSED_TCP packets seen (accepted or not).
    pub compressed: u64,
    /// Plain IP packets passed through.
    pub ip: u64,
    /// Bad compressed packets and bad connection ids.
    pub errors: u64,
    /// Compressed packets dropped while tossing.
    pub tossed: u64,
    /// Runt packets.
    pub runts: u64,
    /// Uncompressed TCP packets with a bad IP checksum.
    pub badcheck: u64,
}

#[derive(Clone, Copy, Debug)]
struct RxSlot {
    h: Headers,
    initialized: bool,
}

/// The receiving half of RFC 1144 (slhc `rstate`).
#[derive(Clone, Debug)]
pub struct Decompressor {
    slots: Vec<RxSlot>,
    current: u8,
    toss: bool,
    stats: DecompressorStats,
}

impl Default for Decompressor {
    fn default() -> Self {
        Decompressor::new(DEFAULT_SLOTS)
    }
}

/// Reads slhc `decode()` numbers and fixed fields off a compressed header.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, CslipError> {
        let v = *self.b.get(self.pos).ok_or(CslipError::Truncated)?;
        self.pos += 1;
        Ok(v)
    }
    fn two(&mut self) -> Result<[u8; 2], CslipError> {
        Ok([self.byte()?, self.byte()?])
    }
    fn num(&mut self) -> Result<u16, CslipError> {
        match self.byte()? {
            0 => Ok(u16::from_be_bytes(self.two()?)),
            x => Ok(u16::from(x)),
        }
    }
}

impl Decompressor {
    /// A decompressor with `slots` connection slots. It starts tossing: compressed
    /// packets are dropped until one names its connection (as `slhc_init`).
    pub fn new(slots: u8) -> Self {
        Decompressor {
            slots: vec![
                RxSlot {
                    h: Headers::ZERO,
                    initialized: false
                };
                usize::from(slots)
            ],
            current: 255,
            toss: true,
            stats: DecompressorStats::default(),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> DecompressorStats {
        self.stats
    }

    /// Whether implicit-id compressed packets are being dropped.
    pub fn is_tossing(&self) -> bool {
        self.toss
    }

    /// The line layer saw a framing error (a frame was lost): drop implicit-id compressed
    /// packets until an explicit id arrives (slhc `slhc_toss`).
    pub fn toss(&mut self) {
        self.toss = true;
    }

    /// Decompresses one received CSLIP packet, **appending** the IP packet to `out`. The
    /// type comes from the first byte as in `sl_bump`. On error nothing is appended.
    pub fn decompress(&mut self, frame: &[u8], out: &mut Vec<u8>) -> Result<PacketType, CslipError> {
        let Some(&first) = frame.first() else {
            self.stats.runts += 1;
            self.toss = true;
            return Err(CslipError::Runt);
        };
        let ty = PacketType::from_first_byte(first);
        let res = match ty {
            PacketType::CompressedTcp => self.uncompress(frame, out),
            PacketType::UncompressedTcp => self.remember(frame, out),
            PacketType::Ip => {
                self.stats.ip += 1;
                out.extend_from_slice(frame);
                Ok(())
            }
        };
        res.map(|()| ty)
    }

    /// slhc_remember: an UNCOMPRESSED_TCP packet sets up its slot.
    fn remember(&mut self, frame: &[u8], out: &mut Vec<u8>) -> Result<(), CslipError> {
        let r = self.check_uncompressed(frame);
        match r {
            Ok((index, nlen, hlen)) => {
                let start = out.len();
                out.extend_from_slice(frame);
                let p = &mut out[start..];
                p[0] &= 0x4F;
                p[9] = IPPROTO_TCP;
                let slot = &mut self.slots[index];
                slot.h.save_full(p, nlen, hlen);
                slot.initialized = true;
                self.current = index as u8;
                self.toss = false;
                self.stats.uncompressed += 1;
                Ok(())
            }
            Err(e) => {
                match e {
                    CslipError::Runt | CslipError::BadTcpHeader => self.stats.runts += 1,
                    CslipError::BadChecksum => self.stats.badcheck += 1,
                    _ => self.stats.errors += 1,
                }
                self.toss = true;
                Err(e)
            }
        }
    }

    /// Validates an UNCOMPRESSED_TCP packet without copying it: (slot, nlen, hlen).
    fn check_uncompressed(&self, frame: &[u8]) -> Result<(usize, usize, usize), CslipError> {
        if frame.len() < 20 {
            return Err(CslipError::Runt);
        }
        let ihl = usize::from(frame[0] & 0x0F);
        let nlen = ihl * 4;
        if ihl < 5 || frame.len() < nlen {
            return Err(CslipError::Runt);
        }
        // Checksum of the header as it will be once byte 0 and byte 9 are restored.
        let mut hdr = [0u8; 60];
        hdr[..nlen].copy_from_slice(&frame[..nlen]);
        hdr[0] &= 0x4F;
        hdr[9] = IPPROTO_TCP;
        if ip_checksum(&hdr[..nlen]) != 0 {
            return Err(CslipError::BadChecksum);
        }
        let index = usize::from(frame[9]);
        if index >= self.slots.len() {
            return Err(CslipError::BadConnectionId);
        }
        if frame.len() < nlen + 20 {
            return Err(CslipError::BadTcpHeader);
        }
        let doff = usize::from(frame[nlen + 12] >> 4);
        let hlen = nlen + doff * 4;
        if doff < 5 || frame.len() < hlen {
            return Err(CslipError::BadTcpHeader);
        }
        Ok((index, nlen, hlen))
    }

    /// slhc_uncompress: rebuild the headers of a COMPRESSED_TCP packet.
    fn uncompress(&mut self, frame: &[u8], out: &mut Vec<u8>) -> Result<(), CslipError> {
        self.stats.compressed += 1;
        match self.uncompress_inner(frame, out) {
            Ok(()) => Ok(()),
            Err(CslipError::Tossed) => {
                self.stats.tossed += 1;
                Err(CslipError::Tossed)
            }
            Err(e) => {
                if e == CslipError::Runt {
                    self.stats.runts += 1;
                } else {
                    self.stats.errors += 1;
                }
                self.toss = true;
                Err(e)
            }
        }
    }

    fn uncompress_inner(&mut self, frame: &[u8], out: &mut Vec<u8>) -> Result<(), CslipError> {
        if frame.len() < 3 {
            return Err(CslipError::Runt);
        }
        let mut r = Reader { b: frame, pos: 0 };
        let changes = r.byte()?;
        let index = if changes & NEW_C != 0 {
            let x = usize::from(r.byte()?);
            match self.slots.get(x) {
                Some(s) if s.initialized => x,
                _ => return Err(CslipError::BadConnectionId),
            }
        } else if self.toss {
            return Err(CslipError::Tossed);
        } else {
            usize::from(self.current)
        };
        // Work on a copy and commit only a fully parsed packet.
        let mut h = self
            .slots
            .get(index)
            .ok_or(CslipError::BadConnectionId)?
            .h;
        let check = r.two()?;
        h.tcp[16..18].copy_from_slice(&check);
        if changes & TCP_PUSH_BIT != 0 {
            h.tcp[13] |= TH_PSH;
        } else {
            h.tcp[13] &= !TH_PSH;
        }
        let hdrlen = h.ihl() * 4 + h.doff() * 4;
        let data_len = u32::from(be16(&h.ip, 2)).wrapping_sub(hdrlen as u32);
        match changes & SPECIALS_MASK {
            SPECIAL_I => {
                // Deviation: unsigned, where the kernel truncates to a C short.
                add32(&mut h.tcp, 8, data_len);
                add32(&mut h.tcp, 4, data_len);
            }
            SPECIAL_D => {
                add32(&mut h.tcp, 4, data_len);
            }
            _ => {
                if changes & NEW_U != 0 {
                    h.tcp[13] |= TH_URG;
                    let x = r.num()?;
                    put16(&mut h.tcp, 18, x);
                } else {
                    h.tcp[13] &= !TH_URG;
                }
                if changes & NEW_W != 0 {
                    let x = r.num()?;
                    add16(&mut h.tcp, 14, x);
                }
                if changes & NEW_A != 0 {
                    let x = r.num()?;
                    add32(&mut h.tcp, 8, u32::from(x));
                }
                if changes & NEW_S != 0 {
                    let x = r.num()?;
                    add32(&mut h.tcp, 4, u32::from(x));
                }
            }
        }
        let di = if changes & NEW_I != 0 { r.num()? } else { 1 };
        add16(&mut h.ip, 4, di);

        let data = &frame[r.pos..];
        let len = data.len() + hdrlen;
        let tot_len = u16::try_from(len).map_err(|_| CslipError::TooLong)?;
        put16(&mut h.ip, 2, tot_len);
        put16(&mut h.ip, 10, 0);

        let start = out.len();
        out.reserve(len);
        out.extend_from_slice(&h.ip);
        out.extend_from_slice(h.ipopt());
        let sum = ip_checksum(&out[start..]);
        put16(&mut out[start..], 10, sum);
        out.extend_from_slice(&h.tcp);
        out.extend_from_slice(h.tcpopt());
        out.extend_from_slice(data);

        if let Some(slot) = self.slots.get_mut(index) {
            slot.h = h;
        }
        self.current = index as u8;
        self.toss = false;
        Ok(())
    }
}
