//! Sealing and sending on threads of their own (`[bond] workers`): the loop hands each
//! UDP path's run of datagrams, numbered and laid out by the endpoint but not yet
//! encrypted ([`braid_core::Endpoint::poll_transmit_deferred`]), to a worker, which runs
//! their AEAD and the `sendmsg` while the loop goes on reading, scheduling and folding
//! the next ones. The sans-IO endpoint keeps its one owner; only the ChaCha20-Poly1305
//! and the kernel's send path move.
//!
//! Order: a path's runs always go to the same worker, over a FIFO channel, so each path's
//! datagrams leave in the order the endpoint gave them (the receiver takes a gap that a
//! path has passed for a loss). Runs of different paths may pass each other, as they may
//! in the network.
//!
//! What the send said comes back with the run ([`Workers::finished`]) and is counted on
//! the next turn; the run's buffer is kept for reuse, so nothing is allocated once every
//! worker has its runs.

use std::io;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use braid_core::PathId;

use crate::sys::udp_batch::{BatchSocket, TxRun};

/// Runs that may be at one worker (queued, being sent, or done and not yet counted)
/// before the loop waits for one of them: 16 runs of up to 64 KB, 1000 datagrams, a few
/// milliseconds of a fast path.
const QUEUE: usize = 16;

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

/// The sending threads. Dropping it lets them finish what they hold and joins them.
///
/// Both channels are bounded (arrays: nothing is allocated per run) and never fill up:
/// at most `QUEUE` runs per worker are out, and before handing out one more the loop
/// takes a finished one back and keeps it for [`Workers::finished`].
#[derive(Debug)]
pub struct Workers {
    lanes: Vec<Lane>,
    done: Receiver<Sent>,
    /// Runs handed to the workers and not yet taken back from `done`.
    out: usize,
    /// Emptied runs, kept with their buffers.
    spare: Vec<TxRun>,
    /// Reports of finished runs not yet given to [`Workers::finished`] (their runs are
    /// back in `spare`).
    here: Vec<Sent>,
}

#[derive(Debug)]
struct Lane {
    jobs: Option<SyncSender<Sent>>,
    thread: Option<JoinHandle<()>>,
}

impl Workers {
    /// Start `n` (at least one) sending threads.
    pub fn start(n: usize) -> io::Result<Workers> {
        let n = n.max(1);
        let (done_tx, done) = mpsc::sync_channel(n * QUEUE);
        let mut lanes = Vec::with_capacity(n);
        for i in 0..n {
            let (jobs, rx) = mpsc::sync_channel::<Sent>(n * QUEUE);
            let back = done_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("braid-send-{i}"))
                .spawn(move || work(&rx, &back))?;
            lanes.push(Lane {
                jobs: Some(jobs),
                thread: Some(thread),
            });
        }
        Ok(Workers {
            lanes,
            done,
            out: 0,
            // Enough for every run that can be out, and the loop's own: none is made later.
            spare: (0..n * QUEUE + 8).map(|_| TxRun::with_capacity()).collect(),
            here: Vec::with_capacity(2 * n * QUEUE),
        })
    }

    /// How many threads send.
    pub fn threads(&self) -> usize {
        self.lanes.len()
    }

    /// Hand `run` (one path's, to `sock`) to the path's worker; `run` is left empty. Waits
    /// for a finished run first when [`QUEUE`] runs per worker are out. If the worker is
    /// gone (it cannot panic short of a bug), the run is sealed and sent here.
    pub fn send(&mut self, path: PathId, sock: &Arc<BatchSocket>, run: &mut TxRun) {
        while self.out >= self.lanes.len() * QUEUE {
            let Ok(sent) = self.done.recv() else { break };
            self.out -= 1;
            self.keep(sent);
        }
        let mut mine = self.spare.pop().unwrap_or_else(TxRun::with_capacity);
        std::mem::swap(&mut mine, run);
        let sent = Sent {
            path,
            sock: Arc::clone(sock),
            datagrams: mine.len() as u64,
            result: Ok(()),
            run: mine,
        };
        let lane = &self.lanes[path.0 as usize % self.lanes.len()];
        let mut sent = match &lane.jobs {
            Some(jobs) => match jobs.send(sent) {
                Ok(()) => {
                    self.out += 1;
                    return;
                }
                Err(mpsc::SendError(sent)) => sent,
            },
            None => sent,
        };
        sent.result = sent.sock.send(&mut sent.run);
        self.keep(sent);
    }

    /// Keep a finished run's report for [`Workers::finished`]; its buffer goes back to
    /// the spares at once.
    fn keep(&mut self, mut sent: Sent) {
        let mut run = std::mem::take(&mut sent.run);
        run.clear();
        self.spare.push(run);
        self.here.push(sent);
    }

    /// The runs the workers have finished since the last call, each with what its send
    /// said (their buffers are back with the spares).
    pub fn finished(&mut self, mut each: impl FnMut(&Sent)) {
        while let Ok(sent) = self.done.try_recv() {
            self.out -= 1;
            self.keep(sent);
        }
        for sent in self.here.drain(..) {
            each(&sent);
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for lane in &mut self.lanes {
            // Closing the channel ends the worker's loop once it has sent what it holds.
            lane.jobs = None;
            if let Some(t) = lane.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// A worker: seal and send each run, hand it back.
fn work(jobs: &Receiver<Sent>, done: &SyncSender<Sent>) {
    while let Ok(mut sent) = jobs.recv() {
        sent.result = sent.sock.send(&mut sent.run);
        if done.send(sent).is_err() {
            return;
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
