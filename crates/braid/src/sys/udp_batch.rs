//! A path's UDP socket with batched IO, through `quinn-udp`: reads take up to
//! [`RECV_SLOTS`] messages in one `recvmmsg`, each of which may hold a UDP GRO list of
//! datagrams; sends go out in runs ([`TxRun`]) of equal-size datagrams to one address,
//! one `sendmsg` with `UDP_SEGMENT` (GSO) each. Where the kernel or the NIC refuses GSO
//! (EIO/EINVAL), `quinn-udp` turns it off for the socket and runs are sent one datagram
//! at a time.

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use braid_core::crypto::PendingSeal;
use braid_core::MAX_DATAGRAM;
use quinn_udp::{RecvMeta, Transmit, UdpSocketState};

use super::udp::{self, OpenError};

/// Messages read by one `recvmmsg` (`quinn-udp`'s batch on Linux).
pub const RECV_SLOTS: usize = 32;

/// Bytes per message: a GRO list holds at most 64 datagrams (`UDP_GRO_CNT_MAX`), so a
/// 1500-byte path's list (64 × 1472 = 94,208 bytes) fits, and any single datagram does.
/// What a longer list would lose is cut off by the kernel: its last datagram arrives
/// short and fails to parse or authenticate (a counted drop).
pub const SLOT_BYTES: usize = 128 * 1024;

/// At most this many datagrams in one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 128;
/// `quinn-udp` and wireguard-go use 64).
pub const MAX_RUN: usize = 64;

/// Bytes of one GSO send at most: an IP datagram's 65,535 less the IPv6 and UDP headers.
const MAX_RUN_BYTES: usize = 65_535 - 40 - 8;

/// A path's socket and its batching state.
#[derive(Debug)]
pub struct BatchSocket {
    sock: UdpSocket,
    state: UdpSocketState,
    offload: bool,
}

impl BatchSocket {
    /// Open as [`udp::open`] does, then (with `offload`) enable GRO and probe GSO.
    pub fn open(
        local: SocketAddr,
        dev: Option<&str>,
        mark: Option<u32>,
        offload: bool,
    ) -> Result<BatchSocket, OpenError> {
        let sock = udp::open(local, dev, mark)?;
        BatchSocket::new(sock, offload).map_err(|err| OpenError {
            step: "UDP batching (GRO/GSO) setup".into(),
            err,
        })
    }

    /// Batching on an open socket. `quinn-udp` turns on GRO and packet info and sets
    /// "do not fragment"; braid keeps its own fragmentation rule (the kernel may fragment
    /// an IPv4 datagram larger than the route's MTU, `udp::open`) and does without receive
    /// timestamps.
    /// Without `offload`, one datagram per send and per message (no GSO, no GRO).
    pub fn new(sock: UdpSocket, offload: bool) -> io::Result<BatchSocket> {
        let state = UdpSocketState::new((&sock).into())?;
        if sock.local_addr()?.is_ipv4() {
            udp::let_kernel_fragment(&sock);
        }
        udp::set_int_option(&sock, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 0);
        if !offload {
            udp::set_int_option(&sock, libc::SOL_UDP, libc::UDP_GRO, 0);
        }
        Ok(BatchSocket {
            sock,
            state,
            offload,
        })
    }

    /// The socket.
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// How many datagrams one send may carry now (1 once GSO was refused).
    pub fn max_run(&self) -> usize {
        if !self.offload {
            return 1;
        }
        self.state.max_gso_segments().clamp(1, MAX_RUN)
    }

    /// Whether received messages may hold GRO lists.
    pub fn gro(&self) -> bool {
        self.offload && self.state.gro_segments() > 1
    }

    /// Seal what in `run` waits for its AEAD, then send it (one datagram, or a GSO run
    /// of them); it is left as it was otherwise. A run whose sealing failed (it cannot:
    /// each job's datagram is laid out in the run) is not sent at all.
    pub fn send(&self, run: &mut TxRun) -> io::Result<()> {
        run.seal()?;
        let Some(to) = run.to else {
            return Ok(());
        };
        let t = Transmit {
            destination: to,
            ecn: None,
            contents: run.bytes(),
            segment_size: (run.count > 1).then_some(run.segment),
            src_ip: None,
        };
        self.state.try_send((&self.sock).into(), &t)
    }

    /// Read what the socket has, up to [`RECV_SLOTS`] messages, into `batch`.
    pub fn recv(&self, batch: &mut RecvBatch) -> io::Result<()> {
        batch.len = 0;
        let mut chunks = batch.buf.chunks_mut(SLOT_BYTES);
        let mut iovs: [IoSliceMut<'_>; RECV_SLOTS] = std::array::from_fn(|_| {
            IoSliceMut::new(chunks.next().expect("the buffer is RECV_SLOTS slots long"))
        });
        batch.len = self
            .state
            .recv((&self.sock).into(), &mut iovs, &mut batch.meta)?;
        Ok(())
    }
}

impl AsRawFd for BatchSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// Where a datagram lies in a [`RecvBatch`]: its message, and its place in the message's
/// GRO list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Place {
    msg: usize,
    seg: usize,
}

/// Messages read from one path in one `recvmmsg`, each one datagram or a GRO list.
pub struct RecvBatch {
    buf: Vec<u8>,
    meta: [RecvMeta; RECV_SLOTS],
    len: usize,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch").field("len", &self.len).finish()
    }
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch {
            buf: vec![0; RECV_SLOTS * SLOT_BYTES],
            meta: std::array::from_fn(|_| RecvMeta::default()),
            len: 0,
        }
    }
}

impl RecvBatch {
    /// Messages read by the last [`BatchSocket::recv`].
    pub fn messages(&self) -> usize {
        self.len
    }

    /// Datagrams in the messages read (a GRO list counts its datagrams).
    pub fn datagram_count(&self) -> usize {
        self.meta[..self.len.min(RECV_SLOTS)]
            .iter()
            .map(|m| {
                let len = m.len.min(SLOT_BYTES);
                if m.stride == 0 || m.stride >= len {
                    1
                } else {
                    len.div_ceil(m.stride)
                }
            })
            .sum()
    }

    /// Forget what was read.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The datagrams read, each with its source, mutable (they are opened in place): GRO
    /// lists are cut at their stride.
    pub fn datagrams(&mut self) -> impl Iterator<Item = (SocketAddr, &mut [u8])> {
        let metas = &self.meta[..self.len.min(RECV_SLOTS)];
        self.buf
            .chunks_mut(SLOT_BYTES)
            .zip(metas)
            .flat_map(|(slot, m)| {
                let data = &mut slot[..m.len.min(SLOT_BYTES)];
                segments(data, m.stride).map(move |d| (m.addr, d))
            })
    }

    /// The datagram at `at` with its source, and where the next one is: what
    /// [`RecvBatch::datagrams`] gives, one at a time (start at `Place::default()`).
    /// `None` past the last.
    pub fn datagram_at(&mut self, at: Place) -> Option<(SocketAddr, &mut [u8], Place)> {
        let metas = &self.meta[..self.len.min(RECV_SLOTS)];
        let mut at = at;
        loop {
            let m = metas.get(at.msg)?;
            let len = m.len.min(SLOT_BYTES);
            let stride = cut_at(len, m.stride);
            let start = at.seg.saturating_mul(stride);
            let next_message = Place {
                msg: at.msg + 1,
                seg: 0,
            };
            if start >= len {
                at = next_message;
                continue;
            }
            let end = (start + stride).min(len);
            let next = if end < len {
                Place {
                    seg: at.seg + 1,
                    ..at
                }
            } else {
                next_message
            };
            let slot = &mut self.buf[at.msg * SLOT_BYTES..][..len];
            return Some((m.addr, &mut slot[start..end], next));
        }
    }

    /// Fill the batch as if `recv` had read `messages` (source, bytes, the length the
    /// kernel reported, GRO stride), the length trusted as the kernel's would be: the tests'
    /// and the fuzz target's way in. Bytes beyond a slot are left out.
    #[doc(hidden)]
    pub fn fill(&mut self, messages: &[(SocketAddr, &[u8], usize, usize)]) {
        self.len = messages.len().min(RECV_SLOTS);
        for (i, (addr, bytes, len, stride)) in messages.iter().take(RECV_SLOTS).enumerate() {
            let n = bytes.len().min(SLOT_BYTES);
            self.buf[i * SLOT_BYTES..][..n].copy_from_slice(&bytes[..n]);
            let mut m = RecvMeta::default();
            (m.addr, m.len, m.stride) = (*addr, *len, *stride);
            self.meta[i] = m;
        }
    }

    #[cfg(test)]
    fn fake(messages: &[(SocketAddr, &[u8], usize)]) -> RecvBatch {
        let mut b = RecvBatch::default();
        let with_len: Vec<_> = messages
            .iter()
            .map(|&(a, d, stride)| (a, d, d.len(), stride))
            .collect();
        b.fill(&with_len);
        b
    }
}

/// A GRO list cut at `stride` (the last datagram may be shorter); a stride of 0 or one
/// at least the length means one datagram.
fn segments(data: &mut [u8], stride: usize) -> impl Iterator<Item = &mut [u8]> {
    let stride = cut_at(data.len(), stride);
    data.chunks_mut(stride)
}

/// The length a message of `len` bytes with GRO stride `stride` is cut at (0: not a list).
fn cut_at(len: usize, stride: usize) -> usize {
    if stride == 0 {
        len.max(1)
    } else {
        stride
    }
}

/// Datagrams gathered for one path during a turn, sent as one GSO run: the same
/// destination, all of one size but the last, which may be shorter and ends the run.
/// Sealed datagrams may join it laid out but not yet encrypted, with their
/// [`PendingSeal`]: [`TxRun::seal`] does them all, wherever the run is sent from.
///
/// Made by [`TxRun::with_capacity`], its buffer always has [`TAIL_ROOM`] bytes after the
/// datagrams, so the next one can be written there in place ([`TxRun::tail`],
/// [`TxRun::commit`]) instead of copied in. (The default one has no buffer until its
/// first [`TxRun::push`]: what a finished run leaves behind, allocating nothing.)
#[derive(Debug, Default)]
pub struct TxRun {
    /// `MAX_RUN_BYTES + TAIL_ROOM` bytes long (or empty); the run is `buf[..used]`.
    buf: Vec<u8>,
    used: usize,
    to: Option<SocketAddr>,
    segment: usize,
    count: usize,
    ended: bool,
    /// Where a datagram waiting for its AEAD starts, and its job.
    seals: Vec<(usize, PendingSeal)>,
}

/// Bytes free behind a run's datagrams, whatever it holds: room for any datagram the
/// endpoint writes (as large as the daemon's own transmit buffer, with the sealing
/// overhead and some to spare).
pub const TAIL_ROOM: usize = MAX_DATAGRAM + 64;

impl TxRun {
    /// An empty run with room for the largest one, so that filling it never allocates
    /// (zeroed pages the kernel maps as they are first written).
    pub fn with_capacity() -> TxRun {
        TxRun {
            buf: vec![0; MAX_RUN_BYTES + TAIL_ROOM],
            seals: Vec::with_capacity(MAX_RUN),
            ..TxRun::default()
        }
    }

    /// Whether a datagram of `len` bytes to `to` can join the run (of at most `max`).
    pub fn fits(&self, to: SocketAddr, len: usize, max: usize) -> bool {
        self.count == 0
            || (self.to == Some(to)
                && !self.ended
                && len <= self.segment
                && self.count < max
                && self.used + len <= MAX_RUN_BYTES)
    }

    /// Add a datagram ([`TxRun::fits`] said it may), with the job that seals it if it is
    /// not sealed yet.
    pub fn push(&mut self, to: SocketAddr, data: &[u8], seal: Option<PendingSeal>) {
        if self.buf.is_empty() {
            *self = TxRun::with_capacity();
        }
        self.tail()[..data.len()].copy_from_slice(data);
        self.commit(to, data.len(), seal);
    }

    /// Where the next datagram goes: at least [`TAIL_ROOM`] bytes (in a run made by
    /// [`TxRun::with_capacity`]).
    pub fn tail(&mut self) -> &mut [u8] {
        &mut self.buf[self.used..]
    }

    /// Add the datagram of `len` bytes written at the start of [`TxRun::tail`]
    /// ([`TxRun::fits`] said it may), with the job that seals it if it is not sealed yet.
    pub fn commit(&mut self, to: SocketAddr, len: usize, seal: Option<PendingSeal>) {
        if self.count == 0 {
            self.to = Some(to);
            self.segment = len;
        } else if len < self.segment {
            self.ended = true;
        }
        if let Some(job) = seal {
            self.seals.push((self.used, job));
        }
        self.used += len;
        self.count += 1;
    }

    /// The run's datagrams, one after another.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.used]
    }

    /// Run the AEAD of every datagram that waits for it. On an error (there is none: each
    /// job's datagram was laid out in this run by [`TxRun::push`]) the run is emptied,
    /// so that no plaintext is ever sent.
    fn seal(&mut self) -> io::Result<()> {
        let mut failed = false;
        let used = self.used;
        for (at, job) in self.seals.drain(..) {
            let sealed = self.buf.get_mut(at..used).map(|d| job.seal(d));
            failed |= !matches!(sealed, Some(Ok(())));
        }
        if failed {
            self.clear();
            return Err(io::Error::other("a datagram could not be sealed"));
        }
        Ok(())
    }

    /// Datagrams in the run.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Empty it (keeping its buffer).
    pub fn clear(&mut self) {
        self.used = 0;
        self.to = None;
        self.count = 0;
        self.ended = false;
        self.seals.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_run_takes_equal_datagrams_to_one_address_and_ends_at_a_short_one() {
        let mut r = TxRun::default();
        assert!(r.fits(addr(1), 100, 64));
        r.push(addr(1), &[1; 100], None);
        assert!(r.fits(addr(1), 100, 64));
        assert!(!r.fits(addr(2), 100, 64), "another address");
        assert!(!r.fits(addr(1), 101, 64), "a longer datagram");
        assert!(!r.fits(addr(1), 100, 1), "the run is full");
        r.push(addr(1), &[2; 60], None);
        assert!(!r.fits(addr(1), 60, 64), "a short datagram ended it");
        assert_eq!((r.len(), r.bytes().len(), r.segment), (2, 160, 100));
        r.clear();
        assert!(r.is_empty() && r.fits(addr(2), 1400, 64));
    }

    #[test]
    fn a_run_stays_within_one_ip_datagram() {
        let mut r = TxRun::default();
        let d = [0u8; 1400];
        let mut n = 0;
        while r.fits(addr(1), d.len(), 128) {
            r.push(addr(1), &d, None);
            n += 1;
        }
        assert_eq!(n, MAX_RUN_BYTES / 1400);
        assert!(r.bytes().len() <= MAX_RUN_BYTES);
        assert!(r.tail().len() >= TAIL_ROOM, "a full run still has its tail");
    }

    #[test]
    fn a_datagram_written_in_the_tail_joins_the_run_where_it_lies() {
        let (mut pushed, mut written) = (TxRun::default(), TxRun::with_capacity());
        for (i, len) in [(1u8, 100), (2, 100), (3, 60)] {
            pushed.push(addr(1), &vec![i; len], None);
            let tail = written.tail();
            assert!(tail.len() >= TAIL_ROOM);
            tail[..len].fill(i);
            written.commit(addr(1), len, None);
        }
        assert_eq!(written.bytes(), pushed.bytes());
        assert_eq!((written.len(), written.segment), (3, 100));
        assert!(!written.fits(addr(1), 60, 64), "the short one ended it");
    }

    #[test]
    fn gro_lists_are_cut_at_their_stride() {
        let list: Vec<u8> = (0..250u8).collect();
        let mut b = RecvBatch::fake(&[
            (addr(1), &list, 100),
            (addr(2), &[9; 7], 7),
            (addr(3), &[8; 5], 0),
        ]);
        let got: Vec<(SocketAddr, Vec<u8>)> = b.datagrams().map(|(a, d)| (a, d.to_vec())).collect();
        let want = vec![
            (addr(1), list[..100].to_vec()),
            (addr(1), list[100..200].to_vec()),
            (addr(1), list[200..].to_vec()),
            (addr(2), vec![9; 7]),
            (addr(3), vec![8; 5]),
        ];
        assert_eq!(got, want);
        assert_eq!(one_at_a_time(&mut b), want);
    }

    /// The datagrams by [`RecvBatch::datagram_at`], from the first to the last.
    fn one_at_a_time(b: &mut RecvBatch) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut got = Vec::new();
        let mut at = Place::default();
        while let Some((a, d, next)) = b.datagram_at(at) {
            got.push((a, d.to_vec()));
            at = next;
        }
        got
    }

    /// Whatever the kernel reports (a length beyond the slot, any stride), the batch
    /// yields slices of its own buffer and never panics.
    #[test]
    fn odd_lengths_and_strides_never_panic() {
        for (len, stride) in [(0, 0), (0, 5), (SLOT_BYTES + 9, 1), (10, 1), (10, 11)] {
            let mut b = RecvBatch::default();
            b.fill(&[(addr(1), &[], len, stride)]);
            b.len = RECV_SLOTS + 3;
            let total: usize = b.datagrams().map(|(_, d)| d.len()).sum();
            assert_eq!(total, len.min(SLOT_BYTES));
            let all: Vec<(SocketAddr, Vec<u8>)> =
                b.datagrams().map(|(a, d)| (a, d.to_vec())).collect();
            assert_eq!(one_at_a_time(&mut b), all, "len {len} stride {stride}");
        }
    }

    /// A run of 20 datagrams (the last shorter) crosses loopback in one send and arrives
    /// whole, in order (as a GRO list where the kernel has UDP GRO).
    #[test]
    fn a_gso_run_arrives_whole_over_loopback() {
        let a = BatchSocket::open(addr(0), None, None, true).expect("open a");
        let b = BatchSocket::open(addr(0), None, None, true).expect("open b");
        let to = b.socket().local_addr().expect("b's address");
        let mut run = TxRun::default();
        let mut sent = Vec::new();
        for i in 0..20u8 {
            let d = vec![i; if i == 19 { 300 } else { 1200 }];
            assert!(run.fits(to, d.len(), a.max_run().max(20)));
            run.push(to, &d, None);
            sent.push(d);
        }
        if a.max_run() < 20 {
            eprintln!("GSO is off here: sending one at a time");
            for d in &sent {
                let mut one = TxRun::default();
                one.push(to, d, None);
                a.send(&mut one).expect("send");
            }
        } else {
            a.send(&mut run).expect("send the run");
        }
        let (mut got, mut messages) = (Vec::new(), 0);
        let mut batch = RecvBatch::default();
        // At most 5 s.
        for _ in 0..5000 {
            if got.len() == sent.len() {
                break;
            }
            match b.recv(&mut batch) {
                Ok(()) => {
                    messages += batch.messages();
                    got.extend(batch.datagrams().map(|(_, d)| d.to_vec()))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("recv: {e}"),
            }
        }
        assert_eq!(got, sent);
        if a.max_run() >= 20 && b.gro() {
            // Loopback keeps a GSO run whole: it arrives as one GRO list.
            assert!(messages < sent.len(), "{messages} messages: no GRO list");
        }
    }

    /// `offload = false`: one datagram per send, and no GRO list on receive.
    #[test]
    fn without_offload_every_datagram_is_its_own_message() {
        let a = BatchSocket::open(addr(0), None, None, false).expect("open a");
        let b = BatchSocket::open(addr(0), None, None, false).expect("open b");
        assert_eq!((a.max_run(), b.gro()), (1, false));
        let to = b.socket().local_addr().expect("b's address");
        for i in 0..5u8 {
            let mut one = TxRun::default();
            one.push(to, &[i; 1000], None);
            a.send(&mut one).expect("send");
        }
        let (mut got, mut messages) = (0, 0);
        let mut batch = RecvBatch::default();
        for _ in 0..5000 {
            if got == 5 {
                break;
            }
            match b.recv(&mut batch) {
                Ok(()) => {
                    messages += batch.messages();
                    got += batch.datagrams().count();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("recv: {e}"),
            }
        }
        assert_eq!((got, messages), (5, 5));
    }
}
