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
        let old_urg = old.tcp[13] & TH_URG != 0;
        // Data length of the previous packet (as int in slhc; may be negative).
        let old_data = i64::from(be16(&old.ip, 2)) - hlen as i64;
        // Deviations: the special encodings leave URG as it was in the receiver's saved
        // header, so they are not used right after a packet with URG set; and the
        // kernel's decompressor adds the SPECIAL_I length as a C `short`, so SPECIAL_I is
        // only used for lengths up to 0x7FFF.
        let special_ok = !old_urg && i64::from(ds) == old_data;
        match changes {
            // Nothing changed: compress only a data packet following a pure ack; anything
            // else is probably a retransmission: send it uncompressed.
            0 if !(be16(p, 2) != be16(&old.ip, 2) && old_data == 0) => {
                return Some(self.uncompressed(cs, p, nlen, hlen, out));
            }
            SPECIAL_I | SPECIAL_D => {
                return Some(self.uncompressed(cs, p, nlen, hlen, out));
            }
            x if x == NEW_S | NEW_A && special_ok && ds == da && ds <= 0x7FFF => {
                changes = SPECIAL_I;
                dl = 0;
            }
            NEW_S if special_ok => {
                changes = SPECIAL_D;
                dl = 0;
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
    pub fn decompress(
        &mut self,
        frame: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<PacketType, CslipError> {
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
        let mut h = self.slots.get(index).ok_or(CslipError::BadConnectionId)?.h;
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
            // The specials are only sent for packets without URG; the kernel leaves the
            // flag as it was in the saved header, this clears it (deviation).
            SPECIAL_I => {
                h.tcp[13] &= !TH_URG;
                // Deviation: unsigned, where the kernel truncates to a C short.
                add32(&mut h.tcp, 8, data_len);
                add32(&mut h.tcp, 4, data_len);
            }
            SPECIAL_D => {
                h.tcp[13] &= !TH_URG;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serial::testutil::{Tcp, ACK, FIN, PSH, SYN, URG};

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];

    fn comp(c: &mut Compressor, p: &Tcp) -> (PacketType, Vec<u8>) {
        let mut out = Vec::new();
        let t = c.compress(&p.build(), &mut out);
        (t, out)
    }

    fn decomp_ok(d: &mut Decompressor, frame: &[u8], want: &Tcp) {
        let mut out = vec![];
        d.decompress(frame, &mut out).expect("decompresses");
        assert_eq!(out, want.build(), "rebuilt packet differs");
    }

    /// A small conversation with every header byte derived by hand from RFC 1144 rules.
    #[test]
    fn hand_made_conversation_exact_bytes() {
        let mut c = Compressor::default();
        let mut d = Decompressor::default();
        let mut p = Tcp::new(A, 1024, B, 80);
        p.seq = 1000;
        p.ack = 5000;
        p.flags = ACK | PSH;
        p.id = 100;
        p.payload = b"0123456789".to_vec();

        // 1. New connection: UNCOMPRESSED_TCP, 0x45|0x70 = 0x75, slot 0 in byte 9.
        let (t, out) = comp(&mut c, &p);
        assert_eq!(t, PacketType::UncompressedTcp);
        let mut want = p.build();
        want[0] = 0x75;
        want[9] = 0;
        assert_eq!(out, want);
        decomp_ok(&mut d, &out, &p);

        // 2. Next 10 bytes: seq += previous data length -> SPECIAL_D (0x0F), PSH (0x10),
        //    id +1 (not sent), same connection (no C): 0x9F, checksum, data.
        p.seq = 1010;
        p.id = 101;
        p.payload = b"abcdefghij".to_vec();
        let (t, out) = comp(&mut c, &p);
        assert_eq!(t, PacketType::CompressedTcp);
        let ck = p.check();
        let mut want = vec![0x9F, ck[0], ck[1]];
        want.extend(b"abcdefghij");
        assert_eq!(out, want);
        decomp_ok(&mut d, &out, &p);

        // 3. SPECIAL_D again, no PSH, id +2 -> I bit and delta 2: 0xAF, ck, 0x02, data.
        p.seq = 1020;
        p.id = 103;
        p.flags = ACK;
        p.payload = b"XYZ!?".to_vec();
        let (_, out) = comp(&mut c, &p);
        let ck = p.check();
        let mut want = vec![0xAF, ck[0], ck[1], 0x02];
        want.extend(b"XYZ!?");
        assert_eq!(out, want);
        decomp_ok(&mut d, &out, &p);

        // 4. Pure ack: window -192 (0xFF40, long form), ack +300 (long form), seq +5
        //    (W|A|S = 0x0E, not a special): 0x8E ck 00 FF 40 00 01 2C 05.
        p.seq = 1025;
        p.ack = 5300;
        p.win = 8000;
        p.id = 104;
        p.payload.clear();
        let (_, out) = comp(&mut c, &p);
        let ck = p.check();
        assert_eq!(
            out,
            [0x8E, ck[0], ck[1], 0x00, 0xFF, 0x40, 0x00, 0x01, 0x2C, 0x05]
        );
        decomp_ok(&mut d, &out, &p);

        // 5. The same ack again (nothing changed, no data): probably a retransmission ->
        //    sent UNCOMPRESSED_TCP.
        p.id = 105;
        let (t, out) = comp(&mut c, &p);
        assert_eq!(t, PacketType::UncompressedTcp);
        assert_eq!((out[0], out[9]), (0x75, 0));
        decomp_ok(&mut d, &out, &p);

        // 6. Data after a pure ack, nothing else changed: compressed with no deltas.
        p.id = 106;
        p.flags = ACK | PSH;
        p.payload = b"ls\n".to_vec();
        let (_, out) = comp(&mut c, &p);
        let ck = p.check();
        assert_eq!(out, [0x90, ck[0], ck[1], b'l', b's', b'\n']);
        decomp_ok(&mut d, &out, &p);

        // 7. Echo: seq and ack both +3 = previous data length -> SPECIAL_I (0x0B).
        p.seq = 1028;
        p.ack = 5303;
        p.id = 107;
        p.flags = ACK;
        p.payload = b"abc".to_vec();
        let (_, out) = comp(&mut c, &p);
        let ck = p.check();
        assert_eq!(out, [0x8B, ck[0], ck[1], b'a', b'b', b'c']);
        decomp_ok(&mut d, &out, &p);

        // 8. A second connection: miss, slot 1.
        let mut q = Tcp::new(A, 1025, B, 80);
        q.seq = 77;
        q.ack = 88;
        q.id = 108;
        q.payload = b"hello".to_vec();
        let (t, out) = comp(&mut c, &q);
        assert_eq!(t, PacketType::UncompressedTcp);
        assert_eq!((out[0], out[9]), (0x75, 1));
        decomp_ok(&mut d, &out, &q);

        // 9. Back to the first: needs C and id 0. URG with pointer 7 (U), seq +3 (S),
        //    IP id +2 (the other connection's packet took 108) so I:
        //    0x80|0x40|0x20|0x09 = 0xE9, 00, ck, 07, 03, 02, data.
        p.seq = 1031;
        p.id = 109;
        p.flags = ACK | URG;
        p.urg = 7;
        p.payload = b"!!!".to_vec();
        let (_, out) = comp(&mut c, &p);
        let ck = p.check();
        assert_eq!(
            out,
            [0xE9, 0x00, ck[0], ck[1], 0x07, 0x03, 0x02, b'!', b'!', b'!']
        );
        decomp_ok(&mut d, &out, &p);

        // 10. URG off, pointer unchanged, same IP id (delta 0 -> 00 00 00), seq +3. Not
        //     SPECIAL_D right after an URG packet (deviation): S and I explicit:
        //     0x80|0x20|0x08 = 0xA8, ck, 03, 00 00 00, data.
        p.seq = 1034;
        p.flags = ACK;
        p.payload = b"zz".to_vec();
        let (_, out) = comp(&mut c, &p);
        let ck = p.check();
        assert_eq!(
            out,
            [0xA8, ck[0], ck[1], 0x03, 0x00, 0x00, 0x00, b'z', b'z']
        );
        decomp_ok(&mut d, &out, &p);

        // 11. Urgent pointer changed without URG: uncompressed.
        p.urg = 9;
        p.id = 110;
        p.seq = 1036;
        let (t, _) = comp(&mut c, &p);
        assert_eq!(t, PacketType::UncompressedTcp);

        assert_eq!(
            c.stats(),
            CompressorStats {
                uncompressed: 4,
                compressed: 7,
                misses: 2,
                // two full walks of the 16-slot ring for the misses, one step for 9.
                searches: 15 + 15 + 1,
                ..Default::default()
            }
        );
        assert_eq!(d.stats().compressed, 7);
        assert_eq!(d.stats().uncompressed, 3);
    }

    #[test]
    fn equal_seq_and_ack_deltas_are_special_i_only_for_the_previous_length() {
        let mut c = Compressor::default();
        let mut d = Decompressor::default();
        let mut p = Tcp::new(A, 1, B, 2);
        p.payload = vec![1; 4];
        decomp_ok(&mut d, &comp(&mut c, &p).1, &p);
        // seq and ack +4, previous length 4: SPECIAL_I.
        p.seq = 4;
        p.ack = 4;
        p.id = 1;
        let (_, out) = comp(&mut c, &p);
        assert_eq!(out[0], 0x80 | SPECIAL_I);
        decomp_ok(&mut d, &out, &p);
        // seq and ack +6, previous length 4: explicit A and S.
        p.seq = 10;
        p.ack = 10;
        p.id = 2;
        let (_, out) = comp(&mut c, &p);
        let ck = p.check();
        assert_eq!(out[..5], [0x80 | NEW_A | NEW_S, ck[0], ck[1], 6, 6]);
        decomp_ok(&mut d, &out, &p);
    }

    #[test]
    fn compress_cid_off_always_sends_the_id() {
        let mut c = Compressor::default();
        c.set_compress_cid(false);
        let mut p = Tcp::new(A, 1, B, 2);
        p.payload = vec![1, 2, 3];
        comp(&mut c, &p);
        p.seq = 3;
        p.id = 1;
        let (_, out) = comp(&mut c, &p);
        assert_eq!(out[..2], [0x80 | NEW_C | SPECIAL_D, 0]);
    }

    #[test]
    fn what_goes_as_plain_ip() {
        let mut c = Compressor::default();
        let base = {
            let mut p = Tcp::new(A, 1, B, 2);
            p.payload = vec![9; 4];
            p
        };
        let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
        for (name, f) in [
            ("syn", SYN | ACK),
            ("fin", FIN | ACK),
            ("rst", 0x04 | ACK),
            ("no ack", PSH),
        ] {
            let mut p = base.clone();
            p.flags = f;
            cases.push((name, p.build()));
        }
        let mut p = base.clone();
        p.proto = 17;
        cases.push(("udp", p.build()));
        let mut p = base.clone();
        p.frag = 0x2000; // MF
        cases.push(("fragment", p.build()));
        let mut p = base.clone();
        p.frag = 0x0001;
        cases.push(("fragment offset", p.build()));
        cases.push(("runt", base.build()[..19].to_vec()));
        cases.push(("cut tcp header", base.build()[..30].to_vec()));
        let mut v6 = base.build();
        v6[0] = 0x65;
        cases.push(("not v4", v6));
        let mut bad = base.build();
        bad.push(0); // total length disagrees with size
        cases.push(("length mismatch", bad));
        for (name, pkt) in cases {
            let mut out = vec![0xEE];
            assert_eq!(c.compress(&pkt, &mut out), PacketType::Ip, "{name}");
            assert_eq!(out[1..], pkt[..], "{name}");
        }
        // No slots: nothing is compressed.
        let mut c0 = Compressor::new(0);
        let mut out = Vec::new();
        assert_eq!(c0.compress(&base.build(), &mut out), PacketType::Ip);
    }

    #[test]
    fn changed_fields_force_uncompressed() {
        type Change = fn(&mut Tcp);
        let changes: [(&str, Change); 9] = [
            ("tos", |p| p.tos = 0x10),
            ("ttl", |p| p.ttl = 63),
            ("df", |p| p.frag = 0),
            ("ip options", |p| p.ipopt = vec![1, 1, 1, 0]),
            ("tcp options", |p| p.tcpopt = vec![1, 1, 1, 1]),
            ("ack backwards", |p| p.ack = p.ack.wrapping_sub(1)),
            ("seq jump", |p| p.seq += 0x10000),
            ("ece", |p| p.flags |= 0x40),
            ("retransmission", |p| p.seq = 100),
        ];
        for (name, f) in changes {
            let mut c = Compressor::default();
            let mut p = Tcp::new(A, 5, B, 6);
            p.seq = 100;
            p.ack = 200;
            p.payload = vec![1; 8];
            assert_eq!(comp(&mut c, &p).0, PacketType::UncompressedTcp);
            // The next segment would be SPECIAL_D ...
            p.id = 1;
            p.seq = 108;
            let mut control = c.clone();
            assert_eq!(comp(&mut control, &p).0, PacketType::CompressedTcp);
            // ... but for the change.
            f(&mut p);
            assert_eq!(comp(&mut c, &p).0, PacketType::UncompressedTcp, "{name}");
        }
        // Same tcp options as before: compressed, and rebuilt with the options.
        let mut c = Compressor::default();
        let mut d = Decompressor::default();
        let mut p = Tcp::new(A, 5, B, 6);
        p.tcpopt = vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        p.ipopt = vec![1, 1, 1, 0];
        p.payload = vec![1; 8];
        decomp_ok(&mut d, &comp(&mut c, &p).1, &p);
        p.id = 1;
        p.seq = 8;
        let (t, out) = comp(&mut c, &p);
        assert_eq!(t, PacketType::CompressedTcp);
        decomp_ok(&mut d, &out, &p);
    }

    #[test]
    fn lru_slot_reuse() {
        let mut c = Compressor::default();
        let conn = |i: u16| {
            let mut p = Tcp::new(A, 1000 + i, B, 80);
            p.payload = vec![i as u8; 3];
            p
        };
        for i in 0..16 {
            let (t, out) = comp(&mut c, &conn(i));
            assert_eq!((t, out[9]), (PacketType::UncompressedTcp, i as u8));
        }
        // Touch connection 0: now slot 1 is the oldest.
        let mut p0 = conn(0);
        p0.seq = 3;
        p0.id = 1;
        assert_eq!(comp(&mut c, &p0).0, PacketType::CompressedTcp);
        let (t, out) = comp(&mut c, &conn(16));
        assert_eq!((t, out[9]), (PacketType::UncompressedTcp, 1));
        // Connection 1 lost its slot: it takes the next oldest, slot 2.
        let mut p1 = conn(1);
        p1.seq = 3;
        p1.id = 1;
        let (t, out) = comp(&mut c, &p1);
        assert_eq!((t, out[9]), (PacketType::UncompressedTcp, 2));
        assert_eq!(c.stats().misses, 18);
    }

    #[test]
    fn toss_until_explicit_id() {
        let mut c = Compressor::default();
        let mut d = Decompressor::default();
        let mut p = Tcp::new(A, 1, B, 2);
        p.payload = vec![5; 10];
        // Fresh decompressor: implicit id is tossed.
        let (_, first) = comp(&mut c, &p);
        let mut pkts = vec![first];
        for k in 1..5u32 {
            p.seq = 10 * k;
            p.id = k as u16;
            pkts.push(comp(&mut c, &p).1);
        }
        let mut out = Vec::new();
        assert_eq!(d.decompress(&pkts[1], &mut out), Err(CslipError::Tossed));
        assert!(out.is_empty());
        d.decompress(&pkts[0], &mut out).expect("uncompressed");
        out.clear();
        d.decompress(&pkts[1], &mut out).expect("compressed");
        // pkts[2] is lost on the line; the line layer says so.
        d.toss();
        assert!(d.is_tossing());
        assert_eq!(d.decompress(&pkts[3], &mut out), Err(CslipError::Tossed));
        assert_eq!(d.decompress(&pkts[4], &mut out), Err(CslipError::Tossed));
        assert_eq!(d.stats().tossed, 3);
        // TCP retransmits from seq 20: the seq goes backwards -> uncompressed.
        p.seq = 20;
        p.id = 5;
        let (t, re) = comp(&mut c, &p);
        assert_eq!(t, PacketType::UncompressedTcp);
        out.clear();
        decomp_ok(&mut d, &re, &p);
        assert!(!d.is_tossing());
        p.seq = 30;
        p.id = 6;
        let (t, next) = comp(&mut c, &p);
        assert_eq!(t, PacketType::CompressedTcp);
        decomp_ok(&mut d, &next, &p);
    }

    #[test]
    fn explicit_id_clears_toss_and_errors_set_it() {
        let mut c = Compressor::default();
        let mut d = Decompressor::default();
        let mut p = Tcp::new(A, 1, B, 2);
        let mut q = Tcp::new(A, 3, B, 4);
        p.payload = vec![1; 4];
        q.payload = vec![2; 4];
        decomp_ok(&mut d, &comp(&mut c, &p).1, &p);
        decomp_ok(&mut d, &comp(&mut c, &q).1, &q);
        p.seq = 4;
        p.id = 1;
        let (_, with_c) = comp(&mut c, &p);
        assert_eq!(with_c[0] & NEW_C, NEW_C);
        d.toss();
        decomp_ok(&mut d, &with_c, &p);
        assert!(!d.is_tossing());

        let mut out = Vec::new();
        // Unknown slot / uninitialised slot / out of range.
        assert_eq!(
            d.decompress(&[0xC0, 5, 0, 0], &mut out),
            Err(CslipError::BadConnectionId)
        );
        assert!(d.is_tossing());
        assert_eq!(
            d.decompress(&[0xC0, 200, 0, 0], &mut out),
            Err(CslipError::BadConnectionId)
        );
        // Truncated deltas: W bit but no bytes.
        assert_eq!(
            d.decompress(&[0xC2, 0, 0, 0], &mut out),
            Err(CslipError::Truncated)
        );
        assert_eq!(
            d.decompress(&[0xC2, 0, 0, 0, 0, 1], &mut out),
            Err(CslipError::Truncated)
        );
        assert_eq!(d.decompress(&[0x80, 0], &mut out), Err(CslipError::Runt));
        assert_eq!(d.decompress(&[], &mut out), Err(CslipError::Runt));
        assert!(out.is_empty());
        // Bad checksum on an uncompressed packet.
        let mut bad = p.build();
        bad[0] |= 0x70;
        bad[9] = 0;
        bad[8] ^= 1;
        assert_eq!(d.decompress(&bad, &mut out), Err(CslipError::BadChecksum));
        // Slot number beyond 16.
        let mut bad = p.build();
        bad[0] |= 0x70;
        bad[9] = 16;
        assert_eq!(
            d.decompress(&bad, &mut out),
            Err(CslipError::BadConnectionId)
        );
        // Uncompressed TCP cut inside the TCP header.
        let mut bad = p.build();
        bad[0] |= 0x70;
        bad[9] = 0;
        assert_eq!(
            d.decompress(&bad[..30], &mut out),
            Err(CslipError::BadTcpHeader)
        );
        assert!(out.is_empty());
        let s = d.stats();
        assert_eq!((s.errors, s.badcheck, s.runts), (5, 1, 3));
        // Plain IP passes through.
        let ip = [0x45, 1, 2, 3];
        assert_eq!(d.decompress(&ip, &mut out), Ok(PacketType::Ip));
        assert_eq!(out, ip);
    }

    #[test]
    fn ip_id_wrap_is_encoded_as_the_kernel_does() {
        // id 65535 -> 0: the C int delta is -65535 (not 1), sent as (u16) 1 with I set.
        let mut c = Compressor::default();
        let mut d = Decompressor::default();
        let mut p = Tcp::new(A, 1, B, 2);
        p.id = 0xFFFF;
        p.payload = vec![1; 4];
        decomp_ok(&mut d, &comp(&mut c, &p).1, &p);
        p.id = 0;
        p.seq = 4;
        let (_, out) = comp(&mut c, &p);
        assert_eq!(out[0], 0x80 | NEW_I | SPECIAL_D);
        assert_eq!(out[3], 1);
        decomp_ok(&mut d, &out, &p);
    }

    #[test]
    fn first_byte_types() {
        assert_eq!(PacketType::from_first_byte(0x45), PacketType::Ip);
        assert_eq!(PacketType::from_first_byte(0x6F), PacketType::Ip);
        assert_eq!(
            PacketType::from_first_byte(0x75),
            PacketType::UncompressedTcp
        );
        assert_eq!(PacketType::from_first_byte(0x80), PacketType::CompressedTcp);
        assert_eq!(PacketType::from_first_byte(0xFF), PacketType::CompressedTcp);
    }
}
