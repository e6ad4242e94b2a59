//! Crypto and path IO on threads of their own (`[bond] workers`), beside the loop.
//!
//! - **Out**: the loop hands each UDP path's run of datagrams, numbered and laid out by
//!   the endpoint but not yet encrypted ([`braid_core::Endpoint::poll_transmit_deferred`]),
//!   to a worker, which runs their AEAD and the GSO `sendmsg` while the loop goes on
//!   reading, scheduling and folding the next ones.
//! - **In**: the loop reads a path's datagrams (`recvmmsg`) into a batch and hands it to a
//!   worker with the endpoint's receive keys ([`braid_core::crypto::OpenKeys`]); the
//!   worker opens them in place and says so on a wake-up socket the loop polls; the loop
//!   then gives them to the endpoint ([`braid_core::Endpoint::handle_udp_preopened`]),
//!   where every check that keeps state (replay window, roaming, the bond) runs as for
//!   any datagram. The batches read in one turn of the loop go together, the paths'
//!   datagrams merged by the bond's sequence number ([`Workers::opened`]): striped over
//!   three paths, 12 % of the packets then come ahead of a gap and wait in the reorder
//!   buffer for another path's, where one path's batch after another's left 65 % so.
//!
//! The sans-IO endpoint keeps its one owner; only the AEAD and the kernel's send path
//! move. Order: a path's runs and batches always go to the same worker, over a
//! FIFO channel, and come back in order, so each path's datagrams leave in the order the
//! endpoint gave them and reach it in the order they came (the receiver takes a gap that
//! a path has passed for a loss). Different paths' datagrams are interleaved, as they
//! may be in the network.
//!
//! What a send said comes back with the run ([`Workers::finished`]) and is counted on the
//! next turn. Runs and batches are pooled, so nothing is allocated once the pools have
//! their size.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use braid_core::bond::MAX_PATHS;
use braid_core::crypto::{OpenKeys, Preopen};
use braid_core::PathId;

use crate::sys::udp_batch::{BatchSocket, Place, RecvBatch, TxRun, RECV_SLOTS};

/// Runs that may be at one worker (queued, being sent, or done and not yet counted)
/// before the loop waits for one of them: 16 runs of up to 64 KB, 1000 datagrams, a few
/// milliseconds of a fast path.
const QUEUE: usize = 16;

/// Batches of one path's received datagrams at the workers at once (being opened, or
/// opened and not yet taken): one being opened while the loop reads the next. Per path,
/// so that a busy path does not keep the others waiting in their sockets (their
/// datagrams would look late to the bond). A batch holds up to 32 GRO lists (4 MB of
/// buffer, touched only as far as datagrams fill it).
pub const OPENS: usize = 2;

/// Runs and batches of fewer datagrams than this are done by the loop itself when the
/// path has nothing at a worker (so its order is kept): at low rates a hand-over costs
/// more than it saves (a thread woken per datagram or two; 35 % of a core instead of 21 %
/// at 67 Mbit/s in `rates-10-20-40`).
pub const HAND_OVER_FROM: usize = 8;

/// What the workers were given so far (`status`: `workers`).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Handed {
    /// Runs sealed and sent by a worker.
    pub runs: u64,
    /// Their datagrams.
    pub run_datagrams: u64,
    /// Received batches opened by a worker.
    pub batches: u64,
}

/// One path's run on its way to a worker and back.
#[derive(Debug)]
pub struct Sent {
    /// The path.
    pub path: PathId,
    /// The socket it went to (the path's may have been re-opened since).
    pub sock: Arc<BatchSocket>,
    /// Datagrams in it.
    pub datagrams: u64,
    /// What sealing and sending said.
    pub result: io::Result<()>,
    run: TxRun,
}

/// A batch of one path's datagrams on its way to a worker to be opened, and back.
#[derive(Debug)]
pub struct Opening {
    /// The path it was read from.
    pub path: PathId,
    batch: RecvBatch,
    keys: OpenKeys,
    /// What opening found, one per datagram of the batch, in order, with the data
    /// datagrams' `seq` ([`braid_core::opened_seq`]).
    found: Vec<(Preopen, Option<u32>)>,
    /// The next datagram to hand over, and its index in `found`.
    next: (Place, usize),
    /// The loop's round it was read in ([`Workers::next_round`]).
    round: u64,
}

impl Opening {
    fn new() -> Box<Opening> {
        Box::new(Opening {
            path: PathId(0),
            batch: RecvBatch::default(),
            keys: OpenKeys::default(),
            // A full batch of full GRO lists (64 datagrams each at most).
            found: Vec::with_capacity(RECV_SLOTS * 64),
            next: (Place::default(), 0),
            round: 0,
        })
    }

    /// The batch to read into.
    pub fn batch(&mut self) -> &mut RecvBatch {
        &mut self.batch
    }

    /// Open every datagram that the keys speak for (the worker's part).
    fn open_all(&mut self) {
        self.found.clear();
        let keys = &self.keys;
        self.found.extend(self.batch.datagrams().map(|(_, d)| {
            let pre = keys.open(d);
            (pre, braid_core::opened_seq(d, pre))
        }));
    }

    /// The next datagram's `seq` (`Some(None)`: it has none, or was not opened), `None`
    /// when all are handed over.
    fn next_seq(&self) -> Option<Option<u32>> {
        self.found.get(self.next.1).map(|&(_, seq)| seq)
    }

    /// The next datagram to hand over, with its source and what opening found.
    fn take_next(&mut self) -> Option<(SocketAddr, &mut [u8], Preopen)> {
        let (at, k) = self.next;
        let pre = self.found.get(k).map(|&(pre, _)| pre);
        let Some(((src, d, next), pre)) = self.batch.datagram_at(at).zip(pre) else {
            // The datagrams and what opening found are counted alike; were they not,
            // the rest would be left out rather than handed over twice.
            self.next.1 = self.found.len();
            return None;
        };
        self.next = (next, k + 1);
        Some((src, d, pre))
    }

    fn clear(&mut self) {
        self.batch.clear();
        self.keys = OpenKeys::default();
        self.found.clear();
        self.next = (Place::default(), 0);
    }
}

enum Job {
    Send(Sent),
    Open(Box<Opening>),
}

/// The worker threads. Dropping it lets them finish what they hold and joins them.
///
/// The channels are bounded (arrays: nothing is allocated per job) and never fill up: at
/// most `QUEUE` runs per worker and [`OPENS`] batches per path are out, and before
/// handing out one run more the loop takes a finished job back.
pub struct Workers {
    lanes: Vec<Lane>,
    done: Receiver<Job>,
    /// Runs handed to the workers and not yet taken back from `done`.
    sends_out: usize,
    /// The loop's round: batches read in one are handed to the endpoint together.
    round: u64,
    /// Batches handed to the workers and not yet taken back from `done`, by round
    /// (oldest first; rounds with none are left out).
    rounds_out: VecDeque<(u64, usize)>,
    /// Batches out or ready, by path (paths with none are left out).
    opens_by_path: Vec<(PathId, usize)>,
    /// Runs out, by path (paths with none are left out).
    sends_by_path: Vec<(PathId, usize)>,
    /// Runs and batches handed to the workers so far.
    handed: Handed,
    /// Emptied runs, kept with their buffers.
    spare: Vec<TxRun>,
    /// Reports of finished runs not yet given to [`Workers::finished`] (their runs are
    /// back in `spare`).
    here: Vec<Sent>,
    /// Opened batches, in the order they came back, for [`Workers::opened`].
    ready: VecDeque<Box<Opening>>,
    /// Emptied batches (boxed: they move through the channels as pointers).
    #[allow(clippy::vec_box)]
    spare_batches: Vec<Box<Opening>>,
    /// Readable when a batch has been opened.
    wake: UnixDatagram,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.lanes.len())
            .field("sends_out", &self.sends_out)
            .field("rounds_out", &self.rounds_out)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Lane {
    jobs: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Workers {
    /// Start `n` (at least one) worker threads.
    pub fn start(n: usize) -> io::Result<Workers> {
        let n = n.max(1);
        let depth = n * QUEUE + OPENS * MAX_PATHS;
        let (done_tx, done) = mpsc::sync_channel(depth);
        let (wake, wake_tx) = UnixDatagram::pair()?;
        wake.set_nonblocking(true)?;
        wake_tx.set_nonblocking(true)?;
        let wake_tx = Arc::new(wake_tx);
        let mut lanes = Vec::with_capacity(n);
        for i in 0..n {
            let (jobs, rx) = mpsc::sync_channel::<Job>(depth);
            let (back, wake_tx) = (done_tx.clone(), Arc::clone(&wake_tx));
            let thread = std::thread::Builder::new()
                .name(format!("braid-work-{i}"))
                .spawn(move || work(&rx, &back, &wake_tx))?;
            lanes.push(Lane {
                jobs: Some(jobs),
                thread: Some(thread),
            });
        }
        Ok(Workers {
            lanes,
            done,
            sends_out: 0,
            round: 0,
            rounds_out: VecDeque::with_capacity(OPENS * MAX_PATHS),
            opens_by_path: Vec::with_capacity(MAX_PATHS),
            sends_by_path: Vec::with_capacity(MAX_PATHS),
            handed: Handed::default(),
            // Enough for every run that can be out, and the loop's own: none is made later.
            spare: (0..n * QUEUE + 8).map(|_| TxRun::with_capacity()).collect(),
            here: Vec::with_capacity(2 * n * QUEUE),
            ready: VecDeque::with_capacity(OPENS * MAX_PATHS),
            // Two paths' worth; more are made as paths come (and kept).
            spare_batches: (0..2 * OPENS).map(|_| Opening::new()).collect(),
            wake,
        })
    }

    /// How many threads work.
    pub fn threads(&self) -> usize {
        self.lanes.len()
    }

    /// What they were given so far.
    pub fn handed(&self) -> Handed {
        self.handed
    }

    fn lane(&self, path: PathId) -> &SyncSender<Job> {
        self.lanes[usize::from(path.0) % self.lanes.len()]
            .jobs
            .as_ref()
            .expect("a lane's channel is closed only when the workers are dropped")
    }

    /// Hand `run` (one path's, to `sock`) to the path's worker; `run` is left empty. Waits
    /// for a finished run first when [`QUEUE`] runs per worker are out. If the worker is
    /// gone (it cannot panic short of a bug), the run is sealed and sent here.
    pub fn send(&mut self, path: PathId, sock: &Arc<BatchSocket>, run: &mut TxRun) {
        while self.sends_out >= self.lanes.len() * QUEUE {
            let Ok(job) = self.done.recv() else { break };
            self.take_back(job);
        }
        let mut mine = self.spare.pop().unwrap_or_else(TxRun::with_capacity);
        std::mem::swap(&mut mine, run);
        let datagrams = mine.len() as u64;
        let sent = Sent {
            path,
            sock: Arc::clone(sock),
            datagrams,
            result: Ok(()),
            run: mine,
        };
        let mut sent = match self.lane(path).send(Job::Send(sent)) {
            Ok(()) => {
                self.sends_out += 1;
                count(&mut self.sends_by_path, path, true);
                self.handed.runs += 1;
                self.handed.run_datagrams += datagrams;
                return;
            }
            Err(mpsc::SendError(Job::Send(sent))) => sent,
            Err(mpsc::SendError(Job::Open(_))) => unreachable!("a run was sent"),
        };
        sent.result = sent.sock.send(&mut sent.run);
        self.keep(sent);
    }

    /// Whether `datagrams` of `path`'s, to send or just read, should go to a worker:
    /// [`HAND_OVER_FROM`] or more, or the path has some at a worker already (they must
    /// stay in order behind them).
    pub fn hand_over(&self, path: PathId, datagrams: usize) -> bool {
        datagrams >= HAND_OVER_FROM
            || out(&self.sends_by_path, path) > 0
            || out(&self.opens_by_path, path) > 0
    }

    /// Whether path `path` may read a batch now: it has fewer than [`OPENS`] out (else
    /// leave its socket until [`Workers::opened`] brought some back).
    pub fn can_read(&self, path: PathId) -> bool {
        out(&self.opens_by_path, path) < OPENS
    }

    /// A batch to read path `path`'s datagrams into, if [`Workers::can_read`].
    pub fn batch(&mut self, path: PathId) -> Option<Box<Opening>> {
        if !self.can_read(path) {
            return None;
        }
        Some(self.spare_batches.pop().unwrap_or_else(Opening::new))
    }

    /// Give back a batch that was not used.
    pub fn unused(&mut self, mut o: Box<Opening>) {
        o.clear();
        self.spare_batches.push(o);
    }

    /// Hand path `path`'s batch to its worker to be opened with `keys`. If the worker is
    /// gone, the batch comes back unopened (the endpoint opens it).
    pub fn open(&mut self, path: PathId, mut o: Box<Opening>, keys: OpenKeys) {
        o.path = path;
        o.keys = keys;
        o.round = self.round;
        count(&mut self.opens_by_path, path, true);
        match self.lane(path).send(Job::Open(o)) {
            Ok(()) => {
                self.handed.batches += 1;
                match self.rounds_out.back_mut() {
                    Some((r, n)) if *r == self.round => *n += 1,
                    _ => self.rounds_out.push_back((self.round, 1)),
                }
            }
            Err(mpsc::SendError(Job::Open(mut o))) => {
                o.found.clear();
                let n = o.batch.datagrams().count();
                o.found.resize(n, (Preopen::Untouched, None));
                self.ready.push_back(o);
            }
            Err(mpsc::SendError(Job::Send(_))) => unreachable!("a batch was sent"),
        }
    }

    /// The socket that is readable when batches have been opened.
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Batches read from now on are of a new round of the loop.
    pub fn next_round(&mut self) {
        self.round += 1;
    }

    /// The datagrams of the opened batches, each with its path, source and what opening
    /// found, the batches merged by the data's `seq` (a datagram without one goes as
    /// soon as it is next in its batch): the bond gets the paths' packets about in
    /// sequence rather than one path's after another's, so that fewer come ahead of a
    /// gap and wait in the reorder buffer, and more pass straight through. Each batch's
    /// own datagrams keep their order. A round's batches are handed over together, once
    /// the last of them is opened (they are queued behind each other at the workers);
    /// then they go back to the pool.
    pub fn opened(&mut self, mut each: impl FnMut(PathId, SocketAddr, &mut [u8], Preopen)) {
        let mut buf = [0u8; 64];
        while self.wake.recv(&mut buf).is_ok() {}
        self.collect();
        // Rounds before the oldest with a batch out are whole.
        let whole = self.rounds_out.front().map_or(u64::MAX, |(r, _)| *r);
        let batches = self.ready.make_contiguous();
        while let Some(k) = next_in_order(batches, whole) {
            let o = &mut batches[k];
            let path = o.path;
            if let Some((src, d, pre)) = o.take_next() {
                each(path, src, d, pre);
            }
        }
        let mut k = 0;
        while k < self.ready.len() {
            if self.ready[k].round >= whole {
                k += 1;
                continue;
            }
            let mut o = self.ready.remove(k).expect("k is within the queue");
            count(&mut self.opens_by_path, o.path, false);
            o.clear();
            self.spare_batches.push(o);
        }
    }

    /// The runs the workers have finished since the last call, each with what its send
    /// said (their buffers are back with the spares).
    pub fn finished(&mut self, mut each: impl FnMut(&Sent)) {
        self.collect();
        for sent in self.here.drain(..) {
            each(&sent);
        }
    }

    /// Take back whatever the workers have finished.
    fn collect(&mut self) {
        while let Ok(job) = self.done.try_recv() {
            self.take_back(job);
        }
    }

    fn take_back(&mut self, job: Job) {
        match job {
            Job::Send(sent) => {
                self.sends_out -= 1;
                count(&mut self.sends_by_path, sent.path, false);
                self.keep(sent);
            }
            Job::Open(o) => {
                if let Some(k) = self.rounds_out.iter().position(|(r, _)| *r == o.round) {
                    self.rounds_out[k].1 -= 1;
                    if self.rounds_out[k].1 == 0 {
                        self.rounds_out.remove(k);
                    }
                }
                self.ready.push_back(o);
            }
        }
    }

    /// Keep a finished run's report for [`Workers::finished`]; its buffer goes back to
    /// the spares at once.
    fn keep(&mut self, mut sent: Sent) {
        let mut run = std::mem::take(&mut sent.run);
        run.clear();
        self.spare.push(run);
        self.here.push(sent);
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for lane in &mut self.lanes {
            // Closing the channel ends the worker's loop once it has done what it holds.
            lane.jobs = None;
            if let Some(t) = lane.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// Of the batches of rounds before `whole`, the one whose next datagram has the lowest
/// `seq` (modulo 2^32: they are close); one without comes first (it has no place to wait
/// for). A path's later batch waits until its earlier one is handed over (a path's
/// datagrams reach the bond in the order they came, even a retransmitted one with a low
/// `seq`). `None` when all of theirs are handed over.
fn next_in_order(batches: &[Box<Opening>], whole: u64) -> Option<usize> {
    let mut first: Option<(usize, u32)> = None;
    let due = |o: &Opening| o.round < whole && o.next_seq().is_some();
    for (k, o) in batches.iter().enumerate() {
        if !due(o) || batches[..k].iter().any(|b| b.path == o.path && due(b)) {
            continue;
        }
        let Some(seq) = o.next_seq().flatten() else {
            return Some(k);
        };
        if first.is_none_or(|(_, f)| (seq.wrapping_sub(f) as i32) < 0) {
            first = Some((k, seq));
        }
    }
    first.map(|(k, _)| k)
}

/// Jobs of `path` in `list`.
fn out(list: &[(PathId, usize)], path: PathId) -> usize {
    list.iter().find(|(p, _)| *p == path).map_or(0, |(_, n)| *n)
}

/// Count a job of `path`'s out (`up`) or back in `list`.
fn count(list: &mut Vec<(PathId, usize)>, path: PathId, up: bool) {
    match list.iter().position(|(p, _)| *p == path) {
        Some(i) if up => list[i].1 += 1,
        Some(i) => {
            list[i].1 -= 1;
            if list[i].1 == 0 {
                list.swap_remove(i);
            }
        }
        None if up => list.push((path, 1)),
        None => {}
    }
}

/// A worker: seal and send each run, open each batch, hand it back (and say so for a
/// batch, which the loop waits for).
fn work(jobs: &Receiver<Job>, done: &SyncSender<Job>, wake: &UnixDatagram) {
    while let Ok(job) = jobs.recv() {
        let (job, opened) = match job {
            Job::Send(mut s) => {
                s.result = s.sock.send(&mut s.run);
                (Job::Send(s), false)
            }
            Job::Open(mut o) => {
                o.open_all();
                (Job::Open(o), true)
            }
        };
        if done.send(job).is_err() {
            return;
        }
        if opened {
            // Full: a wake-up is pending already.
            let _ = wake.send(&[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, UdpSocket};
    use std::time::Duration;

    use braid_core::crypto::PendingSeal;

    fn socket() -> Arc<BatchSocket> {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind on loopback");
        Arc::new(BatchSocket::new(s, true).expect("batching"))
    }

    fn recv_all(sock: &UdpSocket, n: usize) -> Vec<Vec<u8>> {
        sock.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while got.len() < n {
            let Ok(k) = sock.recv(&mut buf) else { break };
            got.push(buf[..k].to_vec());
        }
        got
    }

    /// A batch as a worker hands it back: `path`'s datagrams, each `[path, index]`, read
    /// in `round`, with the `seq`s their opening found.
    fn opened_batch(path: u16, round: u64, seqs: &[Option<u32>]) -> Box<Opening> {
        let from = SocketAddr::from(([127, 0, 0, 1], 9));
        let data: Vec<[u8; 2]> = (0..seqs.len()).map(|i| [path as u8, i as u8]).collect();
        let messages: Vec<_> = data.iter().map(|d| (from, &d[..], 2, 0)).collect();
        let mut o = Opening::new();
        o.batch.fill(&messages);
        o.found = seqs.iter().map(|&s| (Preopen::Untouched, s)).collect();
        (o.path, o.round) = (PathId(path), round);
        o
    }

    /// What `opened` hands over, as `[path, index]`, after `ready` came back.
    #[allow(clippy::vec_box)] // what the workers hand back: boxes
    fn hand_over(w: &mut Workers, ready: Vec<Box<Opening>>) -> Vec<[u8; 2]> {
        for o in ready {
            count(&mut w.opens_by_path, o.path, true);
            w.ready.push_back(o);
        }
        let mut got = Vec::new();
        w.opened(|path, _, d, _| {
            assert_eq!(PathId(u16::from(d[0])), path);
            got.push([d[0], d[1]]);
        });
        got
    }

    /// Two paths' batches are merged by `seq` (modulo 2^32), each keeping its own order;
    /// a datagram without one goes when it is next in its batch; the batches go back to
    /// the pool.
    #[test]
    fn batches_are_handed_over_merged_by_seq() {
        let mut w = Workers::start(1).expect("a thread");
        let spares = w.spare_batches.len();
        let p0 = opened_batch(0, 1, &[Some(1), Some(3), Some(5), Some(7)]);
        let p1 = opened_batch(1, 1, &[Some(2), None, Some(4), Some(6), Some(8)]);
        let got = hand_over(&mut w, vec![p0, p1]);
        let want = [
            [0, 0],
            [1, 0],
            [1, 1],
            [0, 1],
            [1, 2],
            [0, 2],
            [1, 3],
            [0, 3],
            [1, 4],
        ];
        assert_eq!(got, want);
        assert_eq!(w.spare_batches.len(), spares + 2, "both back in the pool");
        assert!(w.opens_by_path.is_empty(), "{:?}", w.opens_by_path);
        let top = u32::MAX;
        let p0 = opened_batch(0, 2, &[Some(top - 1), Some(0)]);
        let p1 = opened_batch(1, 2, &[Some(top), Some(1)]);
        let got = hand_over(&mut w, vec![p0, p1]);
        assert_eq!(got, [[0, 0], [1, 0], [0, 1], [1, 1]], "across the wrap");
        // Path 0's second batch starts with a retransmission: after its first batch.
        let p0 = opened_batch(0, 3, &[Some(10), Some(12)]);
        let p1 = opened_batch(1, 3, &[Some(11)]);
        let p0_later = opened_batch(0, 3, &[Some(3), Some(13)]);
        let got = hand_over(&mut w, vec![p0, p1, p0_later]);
        assert_eq!(got, [[0, 0], [1, 0], [0, 1], [0, 0], [0, 1]]);
    }

    /// A batch waits while one of its round is still at a worker; a round before that
    /// goes at once.
    #[test]
    fn a_round_is_handed_over_whole() {
        let mut w = Workers::start(1).expect("a thread");
        w.rounds_out.push_back((5, 1));
        let early = opened_batch(1, 4, &[Some(1)]);
        let waiting = opened_batch(0, 5, &[Some(2)]);
        assert_eq!(hand_over(&mut w, vec![waiting, early]), [[1, 0]]);
        assert_eq!(hand_over(&mut w, Vec::new()), Vec::<[u8; 2]>::new());
        w.rounds_out.clear();
        assert_eq!(hand_over(&mut w, Vec::new()), [[0, 0]]);
        assert!(w.ready.is_empty());
    }

    /// Two paths' runs through two workers: every datagram arrives, each path's in the
    /// order it was queued, and the finished runs come back with their counts.
    #[test]
    fn each_path_keeps_its_order_through_the_workers() {
        let mut w = Workers::start(2).expect("threads");
        let spares = w.spare.len();
        let sinks: Vec<UdpSocket> = (0..2)
            .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let from = socket();
        let mut run = TxRun::default();
        for round in 0..50u8 {
            for (p, sink) in sinks.iter().enumerate() {
                let to: SocketAddr = sink.local_addr().expect("address");
                for k in 0..4u8 {
                    run.push(to, &[p as u8, round, k, 0, 0, 0, 0, 0], None::<PendingSeal>);
                }
                w.send(PathId(p as u16), &from, &mut run);
                assert!(run.is_empty(), "the run went to the worker");
            }
        }
        for (p, sink) in sinks.iter().enumerate() {
            let got = recv_all(sink, 200);
            assert_eq!(got.len(), 200, "path {p}");
            let order: Vec<(u8, u8)> = got.iter().map(|d| (d[1], d[2])).collect();
            let want: Vec<(u8, u8)> = (0..50u8)
                .flat_map(|r| (0..4u8).map(move |k| (r, k)))
                .collect();
            assert_eq!(order, want, "path {p}");
            assert!(got.iter().all(|d| d[0] == p as u8));
        }
        let mut counted = 0;
        for _ in 0..200 {
            w.finished(|s| {
                assert!(s.result.is_ok());
                counted += s.datagrams;
            });
            if counted == 400 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(counted, 400);
        assert_eq!(w.spare.len(), spares, "every run came back for reuse");
    }
}
