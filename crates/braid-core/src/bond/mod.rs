//! The bond: the one API every driver uses.
//!
//! ```text
//!  TUN ──handle_tun_packet──▶ scheduler ──▶ per-path queues ──poll_transmit──▶ paths
//!  TUN ◀──poll_deliver─────── reorder buffer ◀──handle_datagram────────────── paths
//! ```
//!
//! A packet read from the TUN gets the next bond sequence number and goes into the queue
//! of the path the scheduler chose. Each path drains its queue at the pace its congestion
//! controller allows, so packets wait here, where a path that goes down can hand its
//! queue to the others, and not in a queue inside the network. The receiver acknowledges
//! each path (capacity and RTT), answers probes (liveness) and puts packets back in
//! sequence order, waiting for a gap at most the deadline learnt from the paths' delay
//! spread.
//!
//! Nothing here reads a clock or touches a socket: the driver passes `now` in, sends what
//! [`Bond::poll_transmit`] returns and writes what [`Bond::poll_deliver`] returns.

mod deadline;
mod equalize;
mod lag;
mod link;
mod mss;
mod parts;
mod reconfigure;
mod retransmit;
mod shaping;
mod status;

use std::collections::VecDeque;

use core::num::NonZeroU64;
use core::time::Duration;

use self::deadline::Deadline;
use self::link::{Link, Queued};
pub use self::shaping::{AUTO_HEADROOM, SHAPER_ROOM};
pub use self::status::{BondCounters, BondStatus, Event, PathStatus};
use crate::cc::CcConfig;
use crate::fragments::{FragmentGroups, Verdict};
use crate::path::{HealthConfig, LinkState, Transition};
use crate::reorder::{Inserted, ReorderBuffer};
use crate::sched::adaptive;
use crate::sched::{Choice, PathState, Scheduler, SchedulerConfig};
use crate::wire::{self, Header, Message, MessageType, DATA_HEADER_LEN};
use crate::{Frames, Instant, PathId};

/// Most paths one bond carries.
pub const MAX_PATHS: usize = 64;
/// Most packets queued in braid for one path, whatever their age.
const MAX_QUEUE_PACKETS: usize = 8192;
/// Packets queued on a path beyond which it takes no more from the TUN
/// ([`Bond::wants_packets`]): far above what the queue delay limit lets a path of tens of
/// Mbit/s hold (a 40 Mbit/s path's 100 ms is 330 packets of 1500 bytes), so that on such
/// paths it is that limit's drops that tell TCP to slow down.
const BACKLOG_PACKETS: usize = 1024;
/// A path whose [`BACKLOG_PACKETS`] would drain within its queue delay limit (so that it
/// is the backlog, not the limit, that stops it: above ~120 Mbit/s for 1500-byte packets)
/// holds this many instead. The driver's next turn comes long before they are sent, and
/// a longer queue only keeps the packets out of the cache until they are copied out
/// again. Measured (three unshaped veth paths, one TCP flow, builds alternating): 1024
/// packets 4381 Mbit/s over 15 runs, 64 packets 5168 over 5 (README, Data plane). Slower
/// paths keep the limit as TCP's signal.
const SHORT_BACKLOG_PACKETS: usize = 64;
/// A data datagram this much later than its path's lowest delay, with the path down in
/// between, was held through the outage and is dropped ([`Counters::drop_rx_held`]).
pub const HELD_AFTER_DOWN: Duration = Duration::from_secs(1);
/// A path whose queue holds this much (at its drain rate) passes packets on to the
/// policy's next choice.
const PASS_ON_DELAY: Duration = Duration::from_millis(20);
/// Packet buffers kept for reuse.
const POOL_MAX: usize = 16384;

/// Whether `l` holds its backlog: [`BACKLOG_PACKETS`], or [`SHORT_BACKLOG_PACKETS`] on a
/// fast path, one whose whole backlog of packets like these drains within `limit` (the
/// queue delay limit).
fn holds_backlog(l: &Link, limit: Duration) -> bool {
    let n = l.queue.len();
    let short = n >= SHORT_BACKLOG_PACKETS
        && (l.queue_delay() / n as u32)
            .checked_mul(BACKLOG_PACKETS as u32)
            .is_some_and(|d| d <= limit);
    n >= BACKLOG_PACKETS || short
}
/// Packets up to this long are looked at for a TCP SYN to clamp (an IPv6 SYN with 40
/// bytes of options in a tagged frame).
const MSS_CLAMP_LOOK: usize = 160;

/// Bond-wide settings.
#[derive(Clone, Debug, PartialEq)]
pub struct BondConfig {
    /// Transmit policy.
    pub scheduler: SchedulerConfig,
    /// Probing and liveness.
    pub health: HealthConfig,
    /// Longest a gap in the sequence is waited for at the receiver (default 200 ms).
    pub reorder_max: Duration,
    /// Packets the reorder buffer holds (default 16384: 60 ms at 3 Gbit/s of 1400-byte
    /// packets; with 4096, one path of three lagging 15 ms behind the others on a busy
    /// host overflowed it, and every packet skipped for it came late).
    pub reorder_capacity: usize,
    /// Delay equalisation: hold data packets from faster paths so that every packet is
    /// delivered as late as on the slowest up path whose base one-way delay is within
    /// this much of the fastest's (`bond/equalize.rs`). Zero turns it off.
    pub equalize_max: Duration,
    /// Longest a packet may wait in braid's queue for its path before it is dropped
    /// (default 100 ms).
    pub queue_max_delay: Duration,
    /// Largest IP packet carried (the TUN's or TAP's MTU; a frame may be longer by its
    /// Ethernet header and one VLAN tag, [`Frames::max_len`]).
    pub mtu: usize,
    /// What the bond carries: IP packets (a TUN) or Ethernet frames (a TAP). Whatever
    /// reads a packet as IP finds the IP packet inside a frame ([`Frames`]).
    pub frames: Frames,
    /// Seed for randomised policies.
    pub seed: u64,
    /// Lower the MSS of TCP SYNs entering the bond so that full-size segments fit one
    /// datagram on every path (`bond/mss.rs`; default on).
    pub mss_clamp: bool,
    /// This run's identity, drawn at random by the driver when it starts (the core has
    /// no randomness of its own). Probes carry it, so the peer recognises a restart; the
    /// first bond sequence number and each path's first probe number derive from it, so
    /// a restarted sender does not reuse the numbers of its previous run.
    pub epoch: u64,
}

impl Default for BondConfig {
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            health: HealthConfig::default(),
            reorder_max: Duration::from_millis(200),
            reorder_capacity: 16384,
            equalize_max: Duration::from_millis(100),
            queue_max_delay: Duration::from_millis(100),
            mtu: 1400,
            frames: Frames::Ip,
            seed: 0,
            mss_clamp: true,
            epoch: 0,
        }
    }
}

/// One path's settings.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PathConfig {
    /// Name, unique in the bond (the same on both ends).
    pub name: String,
    /// Configured speed, bit/s (0 = measure).
    pub bps: u64,
    /// Active-backup priority.
    pub prio: i32,
    /// Congestion control.
    pub cc: CcConfig,
    /// How long the receiver may hold an ack after the first unacknowledged data
    /// datagram (`None`: 2 ms; for a run of small datagrams up to 20 ms on a slow path,
    /// see `Link::ack_due`). Slow serial lines use a few frame times, so acks take a
    /// small share of the line.
    pub ack_delay: Option<Duration>,
    /// The path's rate is known, not estimated (a serial line: `bps` is what the line
    /// carries): pace at `bps`, never below, whatever the bandwidth estimate says; the
    /// congestion controller still bounds what is in flight.
    pub fixed_rate: bool,
    /// Largest datagram the path carries, bytes: its link MTU less the IP, UDP and
    /// sealing overhead (0 = no limit, as on a serial line). A packet that does not fit
    /// with its data header goes in parts (`bond/parts.rs`).
    pub max_datagram: usize,
}

/// Why a bond operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BondError {
    /// A path of that name exists.
    DuplicatePath(String),
    /// No such path.
    NoSuchPath,
    /// The bond has the maximum number of paths.
    TooManyPaths,
}

impl core::fmt::Display for BondError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BondError::DuplicatePath(n) => write!(f, "a path named {n:?} already exists"),
            BondError::NoSuchPath => write!(f, "no such path"),
            BondError::TooManyPaths => write!(f, "the bond already has {MAX_PATHS} paths"),
        }
    }
}

impl std::error::Error for BondError {}

/// A datagram to send: `len` bytes of the caller's buffer, on `path`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Transmit {
    /// The path to send on.
    pub path: PathId,
    /// Bytes of the buffer to send.
    pub len: usize,
}

/// The bond state machine.
#[derive(Debug)]
pub struct Bond {
    cfg: BondConfig,
    scheduler: Box<dyn Scheduler>,
    links: Vec<Link>,
    next_path_id: u16,
    next_seq: u64,
    /// The peer's epoch, from its probes, and the one before (a probe of the previous
    /// run still in flight must not count as yet another restart).
    peer_epoch: Option<u64>,
    previous_peer_epoch: Option<u64>,
    /// Where the next `poll_transmit` starts looking, so no path is favoured.
    cursor: usize,
    /// The latest `now` the bond was given (for `poll_timeout`, which takes none).
    now: Instant,
    reorder: ReorderBuffer,
    deadline: Deadline,
    /// How late the driver comes to send (the pacers' burst allowance).
    lag: lag::Lag,
    pool: Vec<Vec<u8>>,
    /// IP fragment groups: queued whole or dropped whole (`fragments`).
    groups: FragmentGroups,
    states: Vec<PathState>,
    /// The paths' states as of the first packet of the current run from the TUN, and the
    /// run's instant (see [`Bond::refresh_run_states`]); `None` outside a run.
    run_states: Vec<PathState>,
    run_at: Option<Instant>,
    events: VecDeque<Event>,
    counters: BondCounters,
    shaper: Option<crate::shape::Shaper>,
    shaper_auto: bool,
}

impl Bond {
    /// A bond with no paths.
    pub fn new(cfg: BondConfig, now: Instant) -> Self {
        Self {
            scheduler: cfg.scheduler.build(cfg.seed, cfg.equalize_max, cfg.frames),
            links: Vec::new(),
            next_path_id: 0,
            next_seq: mix64(cfg.epoch),
            peer_epoch: None,
            previous_peer_epoch: None,
            cursor: 0,
            now,
            reorder: ReorderBuffer::new(cfg.reorder_capacity),
            deadline: Deadline::new(cfg.reorder_max),
            lag: lag::Lag::default(),
            pool: Vec::new(),
            groups: FragmentGroups::new(cfg.frames),
            states: Vec::new(),
            run_states: Vec::new(),
            run_at: None,
            events: VecDeque::new(),
            counters: BondCounters::default(),
            shaper: None,
            shaper_auto: false,
            cfg,
        }
    }

    /// Add (enslave) a path. It starts down and comes up when the peer answers probes.
    pub fn add_path(&mut self, now: Instant, cfg: PathConfig) -> Result<PathId, BondError> {
        self.end_run();
        if self.links.iter().any(|l| l.cfg.name == cfg.name) {
            return Err(BondError::DuplicatePath(cfg.name));
        }
        if self.links.len() >= MAX_PATHS || self.next_path_id == u16::MAX {
            return Err(BondError::TooManyPaths);
        }
        let id = PathId(self.next_path_id);
        self.next_path_id += 1;
        let first_probe = mix64(self.cfg.epoch ^ (u64::from(id.0) + 1) << 32) as u32;
        self.links
            .push(Link::new(id, cfg, self.cfg.health, now, first_probe));
        self.scheduler.path_added(now, id);
        Ok(id)
    }

    /// Remove (emancipate) a path; its queued packets are rescheduled on the others.
    pub fn remove_path(&mut self, now: Instant, id: PathId) -> Result<(), BondError> {
        self.end_run();
        let i = self.index(id).ok_or(BondError::NoSuchPath)?;
        let mut link = self.links.remove(i);
        self.scheduler.path_removed(id);
        self.cursor = 0;
        let packets = link.take_queue();
        self.reschedule(now, id, packets);
        Ok(())
    }

    /// Look a path up by name.
    pub fn path_by_name(&self, name: &str) -> Option<PathId> {
        self.links.iter().find(|l| l.cfg.name == name).map(|l| l.id)
    }

    /// Change a path's configured speed (EQL's priority, weighted's weight, and the cap
    /// on its pace; 0 = measure, no cap).
    pub fn set_path_bps(&mut self, id: PathId, bps: u64) -> Result<(), BondError> {
        self.end_run();
        let i = self.index(id).ok_or(BondError::NoSuchPath)?;
        self.links[i].cfg.bps = bps;
        if self.links[i].cfg.fixed_rate && bps > 0 {
            self.links[i].cc.set_fixed_rate_bps(bps);
        } else {
            self.links[i].cc.set_max_rate_bps(bps);
        }
        Ok(())
    }

    /// A packet read from the TUN (a frame read from the TAP, as [`BondConfig::frames`]
    /// says): through the shaper if there is one, then numbered and queued on the path(s)
    /// the scheduler chooses.
    pub fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]) {
        let buf = self.copy_into_buffer(packet);
        self.handle_tun_buffer(now, buf);
    }

    /// [`Bond::handle_tun_packet`] without a copy: the bond keeps the buffer the packet is
    /// in and leaves one of its spares in its place (length and bytes unspecified), for
    /// the caller to read the next packet into.
    pub fn handle_tun_vec(&mut self, now: Instant, packet: &mut Vec<u8>) {
        let spare = self.spare_buffer();
        let buf = core::mem::replace(packet, spare);
        self.handle_tun_buffer(now, buf);
    }

    fn handle_tun_buffer(&mut self, now: Instant, mut buf: Vec<u8>) {
        self.now = now;
        self.counters.tun_rx += 1;
        let frames = self.cfg.frames;
        let len = buf.len();
        if len > frames.max_len(self.cfg.mtu) || len < frames.min_len() || len == 0 {
            self.counters.drop_too_big += 1;
            self.recycle(buf);
            return;
        }
        // A SYN is small: look at small packets only (room for an IPv6 SYN with 40 bytes
        // of options in a tagged frame).
        if let (Some(room), true) = (self.mss_room(), len <= MSS_CLAMP_LOOK) {
            if mss::clamp(frames, &mut buf, room) {
                self.counters.mss_clamped += 1;
            }
        }
        if self.shape(now, &buf) {
            self.recycle(buf);
        } else {
            self.schedule_packet(now, buf);
        }
    }

    /// The largest packet (IP packet, or frame with its header) that goes whole on every
    /// path, when MSS clamping is on and some path has a datagram limit.
    fn mss_room(&self) -> Option<usize> {
        if !self.cfg.mss_clamp {
            return None;
        }
        self.links
            .iter()
            .filter(|l| l.cfg.max_datagram > 0)
            .map(|l| l.cfg.max_datagram.saturating_sub(DATA_HEADER_LEN))
            .min()
    }

    /// Number a packet and queue it on the path(s) the scheduler chooses.
    fn schedule_packet(&mut self, now: Instant, buf: Vec<u8>) {
        let packet = &buf[..];
        let verdict = self.groups.verdict(now, packet);
        if verdict == Some(Verdict::Doomed) {
            self.counters.drop_fragment_group += 1;
            self.recycle(buf);
            return;
        }
        let segment = retransmit::segment_key(self.cfg.frames, packet);
        if segment.is_some_and(|key| self.links.iter().any(|l| l.holds_segment(key))) {
            self.counters.drop_redundant_retransmit += 1;
            self.recycle(buf);
            return;
        }
        self.refresh_run_states();
        if self.scheduler.weighs_queues() {
            self.skip_full_queues();
        }
        let first = self.scheduler.choose(now, packet, &self.states);
        let choice = if self.scheduler.pins_flows() || self.scheduler.weighs_queues() {
            first
        } else {
            self.pass_on(now, packet, first)
        };
        // Every path stalled (no ack for a few round trips): the packet waits on a path
        // that is up rather than being dropped. On a busy host acks are late by a
        // scheduler's time slice, and with nowhere else to go a drop only costs the
        // flow a retransmission; a path that has really died is declared down by its
        // liveness check, and what waits on it is handed on then.
        let choice = match choice {
            Choice::Drop if !self.scheduler.pins_flows() => self
                .soonest_empty(|l| l.is_up())
                .map_or(Choice::Drop, Choice::One),
            other => other,
        };
        // Drop here, before the packet is numbered, if its path's queue already holds
        // more than `queue_max_delay`: a numbered packet that is dropped later leaves a
        // gap the receiver has to wait out. When the receiver equalises delays, a faster
        // path's queue may also hold the difference to the equalised delay: waiting here
        // or at the receiver comes to the same, and every path keeps the same headroom,
        // so the sender sees its RTT grow before anything is dropped.
        // The rest of an admitted fragment group is queued whatever the delay.
        if let (Choice::One(id), None) = (choice, verdict) {
            // Pinned flows (xor, active-backup) are delivered unheld.
            let equalized = if self.scheduler.pins_flows() {
                Duration::ZERO
            } else {
                adaptive::equalized_delay(&self.states, self.cfg.equalize_max)
            };
            let base = self
                .states
                .iter()
                .find(|s| s.id == id)
                .map_or(Duration::ZERO, |s| s.base_delay);
            let limit = self.cfg.queue_max_delay + equalized.saturating_sub(base);
            if self.queue_over(id, limit) {
                self.counters.drop_queue += 1;
                self.groups.dropped(now, packet);
                self.recycle(buf);
                return;
            }
        }
        // The fragment groups look at the packet before the queue takes its buffer: a
        // drop in `enqueue` dooms the group all the same.
        self.groups.queued(now, packet);
        // The number is spent only if a path took the packet, for the same reason.
        if self.enqueue(now, choice, self.next_seq, buf, segment) {
            self.next_seq = self.next_seq.wrapping_add(1);
        }
    }

    /// True when path `id`'s queue holds more than `limit` at its drain rate, or as many
    /// packets as it may.
    fn queue_over(&self, id: PathId, limit: Duration) -> bool {
        self.index(id).is_some_and(|i| {
            let l = &self.links[i];
            l.queue_delay() > limit || l.queue.len() >= MAX_QUEUE_PACKETS
        })
    }

    /// False while every path that is up holds its backlog ([`BACKLOG_PACKETS`], or
    /// [`SHORT_BACKLOG_PACKETS`] on a fast path): the driver then leaves packets in the
    /// TUN (whose queue and the senders' TCP small queues push back, as a full NIC's do)
    /// instead of handing over packets that could only wait here or be dropped. True
    /// when no path is up: those are dropped and counted.
    pub fn wants_packets(&self) -> bool {
        let limit = self.cfg.queue_max_delay;
        let mut up = self.links.iter().filter(|l| l.is_up()).peekable();
        up.peek().is_none() || up.any(|l| !holds_backlog(l, limit))
    }

    /// A scheduler that weighs queues itself still gets no path that holds its backlog
    /// while another usable one does not: its estimate of a queue's drain is a rate, and
    /// on a fast path a long queue drains in bursts. Such a queue's packets would wait
    /// there for milliseconds while later ones left on the others, and the receiver give
    /// up on them before they came.
    fn skip_full_queues(&mut self) {
        let limit = self.cfg.queue_max_delay;
        // `refresh_states` lists the paths in the links' order.
        let room = |(s, l): (&PathState, &Link)| s.usable && !holds_backlog(l, limit);
        if !self.states.iter().zip(&self.links).any(room) {
            return;
        }
        for (s, l) in self.states.iter_mut().zip(&self.links) {
            if holds_backlog(l, limit) {
                s.usable = false;
            }
        }
    }

    /// A path whose queue already holds PASS_ON_DELAY is full for this purpose: where the
    /// kernel would queue on that slave (and drop once its queue is full), braid offers
    /// the packet to the policy's next choice. A striping policy's queues are reordering
    /// the receiver must wait out, so "full" is far below the drop limit. If every path
    /// is full, the packet goes to the one whose queue empties first (the kernel would
    /// queue it on the policy's choice, however long that slave's queue). Only for
    /// policies that neither pin flows (a flow would move) nor weigh queues themselves.
    fn pass_on(&mut self, now: Instant, packet: &[u8], first: Choice) -> Choice {
        let mut choice = first;
        for _ in 0..self.links.len() {
            let Choice::One(id) = choice else { break };
            if !self.queue_over(id, PASS_ON_DELAY) {
                return choice;
            }
            match self.states.iter_mut().find(|s| s.id == id) {
                Some(s) if s.usable => s.usable = false,
                _ => break,
            }
            choice = self.scheduler.choose(now, packet, &self.states);
        }
        match (first, choice) {
            (Choice::One(_), Choice::One(id)) if !self.queue_over(id, PASS_ON_DELAY) => choice,
            (Choice::One(_), _) => self
                .soonest_empty(|l| l.usable(now))
                .map_or(first, Choice::One),
            _ => first,
        }
    }

    /// Of the paths `pick` takes, the one whose queue empties first at its drain rate.
    fn soonest_empty(&self, pick: impl Fn(&Link) -> bool) -> Option<PathId> {
        self.links
            .iter()
            .filter(|l| pick(l))
            .min_by_key(|l| l.queue_delay())
            .map(|l| l.id)
    }

    fn copy_into_buffer(&mut self, packet: &[u8]) -> Vec<u8> {
        let mut b = self.spare_buffer();
        b.clear();
        b.extend_from_slice(packet);
        b
    }

    /// A buffer from the pool (or a new one), its length and bytes as they were left.
    fn spare_buffer(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_default()
    }

    /// Keep `buf` for reuse, unless the pool is full or it is far larger than a packet
    /// (a buffer handed in by [`Bond::handle_tun_vec`] that held something too big).
    fn recycle(&mut self, buf: Vec<u8>) {
        let largest = 2 * self.cfg.frames.max_len(self.cfg.mtu) + 64;
        if self.pool.len() < POOL_MAX && buf.capacity() <= largest {
            self.pool.push(buf);
        }
    }

    /// Queue the packet in `buf` as the scheduler chose: the last target gets `buf`
    /// itself, any others (broadcast) a copy. False if no live path took it.
    fn enqueue(
        &mut self,
        now: Instant,
        choice: Choice,
        seq: u64,
        buf: Vec<u8>,
        segment: Option<NonZeroU64>,
    ) -> bool {
        let wanted = |l: &Link| {
            l.is_up()
                && match choice {
                    Choice::One(id) => l.id == id,
                    Choice::All => true,
                    Choice::Drop => false,
                }
        };
        let mut left = self.links.iter().filter(|l| wanted(l)).count();
        if left == 0 {
            self.counters.drop_no_path += 1;
            self.groups.dropped(now, &buf);
            self.recycle(buf);
            return false;
        }
        let mut buf = Some(buf);
        for i in 0..self.links.len() {
            if !wanted(&self.links[i]) {
                continue;
            }
            left -= 1;
            let b = match (left, buf.take()) {
                (0, Some(b)) => b,
                (_, Some(b)) => {
                    let copy = self.copy_into_buffer(&b);
                    buf = Some(b);
                    copy
                }
                (_, None) => break,
            };
            if self.links[i].queue.len() >= MAX_QUEUE_PACKETS {
                self.counters.drop_queue += 1;
                self.groups.dropped(now, &b);
                self.recycle(b);
            } else {
                self.links[i].push(Queued {
                    buf: b,
                    seq,
                    enqueued: now,
                    segment,
                });
            }
        }
        true
    }

    /// Hand packets that were queued on path `from` to the live paths, keeping their
    /// sequence numbers so the receiver still puts them in order.
    fn reschedule(&mut self, now: Instant, from: PathId, packets: VecDeque<Queued>) {
        for q in packets {
            self.refresh_states();
            let choice = match self.scheduler.choose(now, &q.buf, &self.states) {
                Choice::One(id) if id == from => Choice::Drop,
                other => other,
            };
            if self.enqueue(now, choice, q.seq, q.buf, q.segment) {
                self.counters.rescheduled += 1;
            }
        }
    }

    fn refresh_states(&mut self) {
        self.states.clear();
        let now = self.now;
        self.states.extend(self.links.iter().map(|l| l.state(now)));
    }

    /// [`Bond::refresh_states`] for a packet from the TUN. The packets of a run (handed
    /// over at one instant with no other call between them, as the driver hands over a
    /// superframe's segments and a turn's reads) change nothing of the paths but their
    /// queues, so the rest (delays, rates, usability: a few divisions a path) is worked
    /// out at the run's first packet, not at every one; each packet sees the queues as
    /// they are. Every entry point that may change a path ends the run ([`Bond::end_run`]).
    fn refresh_run_states(&mut self) {
        let now = self.now;
        if self.run_at != Some(now) {
            self.refresh_states();
            self.run_states.clone_from(&self.states);
            self.run_at = Some(now);
            return;
        }
        self.states.clone_from(&self.run_states);
        for (s, l) in self.states.iter_mut().zip(&self.links) {
            s.queued_bytes = l.queued_bytes;
        }
        debug_assert!(
            self.states
                .iter()
                .copied()
                .eq(self.links.iter().map(|l| l.state(now))),
            "a path changed within a run of TUN packets: an entry point misses end_run"
        );
    }

    /// The run of TUN packets, if one was going on, is over (see
    /// [`Bond::refresh_run_states`]).
    fn end_run(&mut self) {
        self.run_at = None;
    }

    fn index(&self, id: PathId) -> Option<usize> {
        self.links.iter().position(|l| l.id == id)
    }

    /// A datagram received on a path.
    pub fn handle_datagram(&mut self, now: Instant, path: PathId, bytes: &[u8]) {
        let stored = self.datagram(now, path, bytes, false);
        debug_assert!(stored.is_none(), "a packet passed without being asked to");
    }

    /// [`Bond::handle_datagram`], with every packet it lets out handed to `deliver` at
    /// once, in order: the one it brought, without storing it, if it is the next in
    /// sequence and nothing is to go before it or hold it back (saving a copy where
    /// packets come in order), then those held behind the gap it filled (so that the next
    /// one can go straight through too). A gap whose deadline has passed is not given up
    /// here: the datagram that fills it may be the next one read (on another path). That
    /// is [`Bond::poll_deliver`]'s, called once the turn's datagrams are in, which also
    /// gives what falls due as time passes.
    pub fn handle_datagram_passing(
        &mut self,
        now: Instant,
        path: PathId,
        bytes: &[u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) {
        if let Some(p) = self.datagram(now, path, bytes, true) {
            deliver(p);
        }
        while let Some(p) = self.reorder.poll_ready_ref(now) {
            self.counters.tun_tx += 1;
            deliver(p);
        }
    }

    fn datagram<'a>(
        &mut self,
        now: Instant,
        path: PathId,
        bytes: &'a [u8],
        pass: bool,
    ) -> Option<&'a [u8]> {
        self.end_run();
        self.now = now;
        let Some(i) = self.index(path) else {
            self.counters.unknown_path += 1;
            return None;
        };
        let Ok((header, msg)) = wire::parse(bytes) else {
            self.counters.bad_datagram += 1;
            return None;
        };
        let t = self.links[i].health.on_peer_alive(now);
        self.apply(now, i, t);
        let rel = self.deadline.relative(now, header.timestamp);
        self.links[i].base.sample(now, rel);
        let ordered = matches!(msg, Message::Data { .. });
        match msg {
            Message::Data {
                seq,
                path_seq,
                payload,
            }
            | Message::PinnedData {
                seq,
                path_seq,
                payload,
            } => {
                self.links[i]
                    .rx
                    .on_data(now, path_seq, header.timestamp, bytes.len());
                if self.deliver_data(now, i, &header, seq, payload, ordered, pass) {
                    return Some(payload);
                }
            }
            Message::DataPart {
                seq,
                path_seq,
                part,
                parts,
                kind,
                payload,
            } => self.receive_part(
                now,
                i,
                &header,
                (seq, path_seq),
                (part, parts),
                kind,
                payload,
                bytes.len(),
            ),
            Message::Probe { probe_seq, epoch } => {
                if let Some(epoch) = epoch {
                    self.on_peer_epoch(now, epoch);
                }
                self.links[i].probe_ack_out = Some((probe_seq, header.timestamp, now));
            }
            Message::ProbeAck {
                probe_seq, hold, ..
            } => {
                let sent = self.links[i].health.pending_probe_sent(probe_seq);
                let t = self.links[i].health.on_probe_ack(now, probe_seq, hold);
                let link = &mut self.links[i];
                if link.stalled(now) && sent.is_some_and(|s| s >= link.stall_onset()) {
                    // A probe sent after the data should have been acknowledged came
                    // back: the path carries datagrams both ways, so that data was lost or
                    // its acks will never match (a peer that restarted without saying
                    // so). Count it lost now rather than keep the path out until the
                    // congestion controller's own timeout.
                    link.cc.reset(now);
                    link.last_ack = now;
                    self.counters.stall_recoveries += 1;
                }
                if let Some(rtt) = self.links[i].health.srtt() {
                    self.links[i].cc.hint_rtt(rtt);
                }
                self.apply(now, i, t);
            }
            Message::Ack(ack) => {
                let link = &mut self.links[i];
                link.cc.on_ack(now, &ack);
                link.last_ack = now;
            }
        }
        None
    }

    /// Part of a packet on link `i`: joined with the parts before it; the whole packet
    /// goes on as a data datagram would.
    #[expect(
        clippy::too_many_arguments,
        reason = "the fields of one DataPart; one call site"
    )]
    fn receive_part(
        &mut self,
        now: Instant,
        i: usize,
        header: &Header,
        (seq, path_seq): (u64, u32),
        (part, parts): (u8, u8),
        kind: MessageType,
        payload: &[u8],
        wire_len: usize,
    ) {
        let mtu = self.cfg.frames.max_len(self.cfg.mtu);
        let link = &mut self.links[i];
        link.rx.on_data(now, path_seq, header.timestamp, wire_len);
        let Some(kind) = link.joiner.add(seq, part, parts, kind, payload, mtu) else {
            return;
        };
        let whole = link.joiner.take();
        self.deliver_data(
            now,
            i,
            header,
            seq,
            &whole,
            kind == MessageType::Data,
            false,
        );
        self.links[i].joiner.put_back(whole);
    }

    /// A whole packet received on link `i` (its datagram already counted for acks):
    /// into the reorder buffer, or (`pass`, and [`ReorderBuffer::pass`] agrees) handed
    /// back to go out at once: true. `ordered`: wait for gaps (striping policies); else
    /// the sender pinned the flow to this path, which keeps it in order by itself, and
    /// the packet goes out at once (a zero deadline: only duplicates are dropped).
    #[expect(
        clippy::too_many_arguments,
        reason = "the fields of one data message; two call sites"
    )]
    fn deliver_data(
        &mut self,
        now: Instant,
        i: usize,
        header: &Header,
        seq: u64,
        payload: &[u8],
        ordered: bool,
        pass: bool,
    ) -> bool {
        let frames = self.cfg.frames;
        if payload.len() > frames.max_len(self.cfg.mtu) || payload.len() < frames.min_len() {
            // Larger than anything the peer may send: it would only grow the reorder
            // buffer's slots. (Or a frame shorter than its header: no TAP takes it.)
            self.counters.drop_rx_too_big += 1;
            return false;
        }
        let link = &mut self.links[i];
        let rel = self.deadline.relative(now, header.timestamp);
        if held_through_outage(link, now, rel) {
            self.counters.drop_rx_held += 1;
            return false;
        }
        link.rx_max_seq = Some(link.rx_max_seq.map_or(seq, |m| seq_max(m, seq)));
        link.owd.sample(now, rel);
        let hold = if ordered && !adaptive::skips_equalization(self.cfg.frames, payload) {
            equalize::hold(self.equalize_target(), rel)
        } else {
            Duration::ZERO
        };
        let release = now + hold;
        if pass && self.reorder.pass(now, seq, release) {
            // Stored, it would be the held head: nothing would be given up now either.
            self.counters.tun_tx += 1;
            return true;
        }
        let deadline = if ordered {
            self.current_deadline(now)
        } else {
            Duration::ZERO
        };
        let resyncs = self.reorder.stats().resyncs;
        let inserted = self
            .reorder
            .insert_held(now, seq, deadline, release, payload);
        if self.reorder.stats().resyncs != resyncs {
            // The window jumped (a peer restart the epoch did not announce, or a very
            // long outage): the other paths' highest numbers belong to the old run.
            for (k, l) in self.links.iter_mut().enumerate() {
                if k != i {
                    l.rx_max_seq = None;
                }
            }
        }
        if inserted == Inserted::Late && ordered {
            self.deadline.on_late(now, deadline);
        }
        if ordered {
            self.give_up_lost();
        }
        false
    }

    /// Paths are FIFO: once every path that is up has delivered a packet numbered above
    /// a missing one, the missing one can only have been lost. Give it up now rather than
    /// at the deadline. A path that has carried nothing yet, or lags, holds this back, so
    /// an idle path's late packet is never given up early; the deadline remains for that.
    fn give_up_lost(&mut self) {
        let mut floor = None;
        for l in self.links.iter().filter(|l| l.is_up()) {
            let Some(m) = l.rx_max_seq else { return };
            floor = Some(floor.map_or(m, |f| seq_min(f, m)));
        }
        if let Some(floor) = floor {
            self.reorder.give_up_before(floor);
        }
    }

    /// A probe announced the peer's epoch: a new one means the peer restarted. Forget its
    /// previous run: the reorder window and duplicate history (its new numbers could be
    /// taken for duplicates of the old ones), each path's highest number, acks owed and
    /// data in flight, and its clock's offset.
    fn on_peer_epoch(&mut self, now: Instant, epoch: u64) {
        match self.peer_epoch {
            None => self.peer_epoch = Some(epoch),
            Some(e) if e == epoch || self.previous_peer_epoch == Some(epoch) => {}
            Some(e) => {
                self.previous_peer_epoch = Some(e);
                self.peer_epoch = Some(epoch);
                self.counters.peer_restarts += 1;
                self.reorder.restart();
                self.deadline.forget_peer_clock();
                for link in &mut self.links {
                    link.forget_peer(now);
                }
                self.events.push_back(Event::PeerRestarted);
            }
        }
    }

    /// A path's socket failed (interface gone, unreachable): the path is down until it
    /// answers probes again.
    pub fn handle_path_error(&mut self, now: Instant, path: PathId) {
        self.end_run();
        self.now = now;
        if let Some(i) = self.index(path) {
            let t = self.links[i].health.on_io_error(now);
            self.apply(now, i, t);
        }
    }

    /// Act on a liveness change of link `i`.
    fn apply(&mut self, now: Instant, i: usize, t: Option<Transition>) {
        match t {
            None => {}
            Some(Transition::Up) => {
                let link = &mut self.links[i];
                link.cc.reset(now);
                self.events.push_back(Event::PathUp(link.id));
            }
            Some(Transition::Down) => {
                let link = &mut self.links[i];
                link.downs += 1;
                link.went_down = Some(now);
                link.cc.reset(now);
                link.base.reset();
                let (id, packets) = (link.id, link.take_queue());
                self.events.push_back(Event::PathDown(id));
                self.reschedule(now, id, packets);
            }
        }
    }

    /// The next datagram to send, written into `buf`: probe answers, acks and probes
    /// first, then data as each path's pacing allows. `buf` must hold `mtu +
    /// DATA_HEADER_LEN` bytes (frames: [`Frames::max_len`] of the MTU); a smaller one gets
    /// only control messages.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.end_run();
        self.now = now;
        if self.shaper.is_some() {
            self.release(now);
        }
        let n = self.links.len();
        for k in 0..n {
            let i = (self.cursor + k) % n;
            if let Some(len) = self.control_transmit(now, i, buf) {
                return Some(Transmit {
                    path: self.links[i].id,
                    len,
                });
            }
        }
        for k in 0..n {
            let i = (self.cursor + k) % n;
            if let Some(len) = self.data_transmit(now, i, buf) {
                self.cursor = (i + 1) % n;
                return Some(Transmit {
                    path: self.links[i].id,
                    len,
                });
            }
        }
        None
    }

    fn control_transmit(&mut self, now: Instant, i: usize, buf: &mut [u8]) -> Option<usize> {
        let header = Header {
            path: self.links[i].id.0,
            timestamp: now.wire_micros(),
        };
        let epoch = self.cfg.epoch;
        let link = &mut self.links[i];
        let msg = if let Some((probe_seq, echo_timestamp, at)) = link.probe_ack_out.take() {
            Message::ProbeAck {
                probe_seq,
                echo_timestamp,
                hold: now.saturating_since(at),
            }
        } else if link.ack_due().is_some_and(|t| t <= now) {
            Message::Ack(link.rx.take_ack(now)?)
        } else if let Some(probe_seq) = link.probe_out.take() {
            Message::Probe {
                probe_seq,
                epoch: Some(epoch),
            }
        } else {
            return None;
        };
        wire::emit(&header, &msg, buf).ok()
    }

    fn data_transmit(&mut self, now: Instant, i: usize, buf: &mut [u8]) -> Option<usize> {
        let kind = if self.scheduler.pins_flows() {
            MessageType::PinnedData
        } else {
            MessageType::Data
        };
        let link = &mut self.links[i];
        if !link.is_up() {
            return None;
        }
        let Some(head) = link.queue.front() else {
            link.window.note(now, false);
            return None;
        };
        let whole = head.buf.len() + DATA_HEADER_LEN;
        let limit = link.cfg.max_datagram;
        let (parts, range) = parts::split(
            head.buf.len(),
            limit.saturating_sub(wire::DATA_PART_HEADER_LEN),
        );
        let in_parts = limit > 0 && whole > limit && parts <= usize::from(u8::MAX);
        let (len, part) = if in_parts {
            let r = range(link.next_part);
            (wire::DATA_PART_HEADER_LEN + r.len(), Some(r))
        } else {
            (whole, None)
        };
        if buf.len() < len {
            return None;
        }
        let release = link.cc.next_send_time(now, len);
        link.window.note(now, release.is_none());
        if release? > now {
            return None;
        }
        // The datagram could leave once the pacer released it, it was queued and the
        // window was open: whatever has passed since is the loop's lag, which the pacers
        // may make good in a burst.
        let sendable = link
            .cc
            .release_at()
            .max(head.enqueued)
            .max(link.window.opened_at());
        self.lag.sample(now, sendable);
        // Data carries the time its sequence number was assigned, not the time it
        // left: the receiver's delay spread then includes the wait in braid's queue,
        // which reorders packets just as much as the network does.
        let header = Header {
            path: link.id.0,
            timestamp: head.enqueued.wire_micros(),
        };
        let path_seq = link.next_path_seq;
        let done = match part {
            None => {
                wire::emit_data_header_as(&header, kind, head.seq, path_seq, buf).ok()?;
                buf[DATA_HEADER_LEN..len].copy_from_slice(&head.buf);
                true
            }
            Some(r) => {
                let k = link.next_part;
                // Both fit in a u8: `in_parts` checked the count.
                let (k8, n8) = (k as u8, parts as u8);
                wire::emit_data_part_header(&header, kind, head.seq, path_seq, k8, n8, buf).ok()?;
                buf[wire::DATA_PART_HEADER_LEN..len].copy_from_slice(&head.buf[r]);
                link.next_part = if k + 1 == parts { 0 } else { k + 1 };
                k + 1 == parts
            }
        };
        let sent = if done { link.pop() } else { None };
        link.next_path_seq = path_seq.wrapping_add(1);
        link.tx_packets += 1;
        link.tx_bytes += len as u64;
        link.largest_sent = link.largest_sent.max(len);
        if link.cc.inflight_bytes() == 0 {
            // The stall clock starts with the first packet after an idle spell.
            link.last_ack = now;
        }
        let app_limited = link.queue.is_empty();
        link.cc
            .on_send(now, path_seq, len, app_limited, self.lag.burst(now));
        if let Some(q) = sent {
            self.recycle(q.buf);
        }
        Some(len)
    }

    /// The next in-order packet for the TUN, written into `buf`.
    pub fn poll_deliver(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.now = now;
        let n = self.reorder.poll(now, buf)?;
        self.counters.tun_tx += 1;
        Some(n)
    }

    /// [`Bond::poll_deliver`] without the copy: the packet is lent until the next call
    /// that takes the bond.
    pub fn poll_deliver_ref(&mut self, now: Instant) -> Option<&[u8]> {
        self.now = now;
        let p = self.reorder.poll_ref(now)?;
        self.counters.tun_tx += 1;
        Some(p)
    }

    /// Returns the next time at which `handle_timeout` (or `poll_transmit` /
    /// `poll_deliver`) has work. "Now" means: call them now.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let now = self.now;
        let mut next = self.scheduler.poll_timeout();
        let mut merge = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        merge(self.reorder.poll_timeout());
        merge(self.shaper_timeout());
        for link in &self.links {
            merge(Some(link.health.poll_timeout()));
            merge(link.next_transmit(now));
            merge(link.stall_deadline());
        }
        next
    }

    /// Timers: probes due, missed probes, the scheduler's periodic work.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.end_run();
        self.now = now;
        for i in 0..self.links.len() {
            let t = self.links[i].health.handle_timeout(now);
            self.apply(now, i, t);
            if self.links[i].is_up()
                && self.links[i].stalled(now)
                && !self.links[i].queue.is_empty()
                && self
                    .links
                    .iter()
                    .enumerate()
                    .any(|(j, l)| j != i && l.usable(now))
            {
                // Acks stopped: hand the queue over now rather than after `down_after`.
                // Only to a path that can take it: with nowhere to go it stays, as the
                // packets the scheduler queues meanwhile do (a late ack is far likelier
                // than a dead path that is still up; dropping numbered packets would
                // leave gaps the receiver waits out).
                let (id, packets) = (self.links[i].id, self.links[i].take_queue());
                self.reschedule(now, id, packets);
            }
            if let Some(seq) = self.links[i].health.poll_probe(now) {
                self.links[i].probe_out = Some(seq);
            }
        }
        if self.scheduler.poll_timeout().is_some_and(|t| t <= now) {
            self.refresh_states();
            self.scheduler.handle_timeout(now, &self.states);
        }
        if self.shaper.is_some() {
            self.refresh_link_rate(now);
            self.release(now);
        }
    }

    /// Path up/down and other news.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The relative one-way delay every ordered packet is held to, if equalising.
    fn equalize_target(&self) -> Option<i64> {
        let bases = self
            .links
            .iter()
            .filter(|l| l.is_up())
            .filter_map(|l| l.base.get());
        equalize::target(bases, self.cfg.equalize_max)
    }

    /// How long a packet on the quickest up path is held now.
    fn equalize_spread(&self) -> Duration {
        let lo = self
            .links
            .iter()
            .filter(|l| l.is_up())
            .filter_map(|l| l.base.get())
            .min();
        match lo {
            Some(lo) => equalize::hold(self.equalize_target(), lo),
            None => Duration::ZERO,
        }
    }

    fn current_deadline(&self, now: Instant) -> Duration {
        let (mut lo, mut hi) = (Duration::MAX, Duration::ZERO);
        for l in self.links.iter().filter(|l| l.is_up()) {
            if let Some(rtt) = l.health.srtt() {
                lo = lo.min(rtt / 2);
                hi = hi.max(rtt / 2 + l.health.rttvar() * 2);
            }
        }
        let rtt_spread = hi.saturating_sub(lo);
        self.deadline
            .current(now, self.links.iter().map(|l| &l.owd), rtt_spread)
            .max(self.frame_floor().min(self.cfg.reorder_max))
    }

    /// With a fixed-rate path (a serial line) up beside another path: braid's queue
    /// limit plus two full packets' time on the slowest such line. A packet can wait in
    /// one line's queue up to the limit while later ones go out on an emptier line, and be
    /// a frame or two behind them on the wire besides. The delay tracks learn the spread
    /// only once data has flowed on every line; at the start of a transfer the deadline
    /// was the 2 ms floor (then two frames), the receiver gave up on such packets, and TCP,
    /// seeing them out of order, resent ~15 segments each time. A lost packet is still
    /// given up as soon as every line has passed it (`give_up_lost`), so the longer wait
    /// costs only when a line is idle.
    fn frame_floor(&self) -> Duration {
        let up = self.links.iter().filter(|l| l.is_up());
        if up.clone().count() < 2 {
            return Duration::ZERO;
        }
        let frame = self.cfg.frames.max_len(self.cfg.mtu) as u64 + DATA_HEADER_LEN as u64;
        up.filter_map(|l| l.line_time(2 * frame))
            .max()
            .map_or(Duration::ZERO, |frames| self.cfg.queue_max_delay + frames)
    }

    /// Figures for `braid status`.
    pub fn status(&self) -> BondStatus {
        BondStatus {
            scheduler: self.scheduler.name(),
            paths: self.links.iter().map(|l| l.status(self.now)).collect(),
            counters: BondCounters {
                drop_partial: self.links.iter().map(|l| l.joiner.dropped).sum(),
                ..self.counters
            },
            reorder: self.reorder.stats(),
            reorder_deadline_us: self.current_deadline(self.now).as_micros() as u64,
            equalize_us: self.equalize_spread().as_micros() as u64,
            pacing_lag_us: self.lag.get(self.now).as_micros() as u64,
        }
    }

    /// Link state of a path.
    pub fn path_state(&self, id: PathId) -> Option<LinkState> {
        self.index(id).map(|i| self.links[i].health.state())
    }
}

/// The later of two sequence numbers, modulo 2^64 (a sender starts at a random value,
/// so a run may cross `u64::MAX`).
fn seq_max(a: u64, b: u64) -> u64 {
    if (b.wrapping_sub(a) as i64) > 0 {
        b
    } else {
        a
    }
}

/// The earlier of two sequence numbers, modulo 2^64.
fn seq_min(a: u64, b: u64) -> u64 {
    if seq_max(a, b) == a {
        b
    } else {
        a
    }
}

/// SplitMix64's finaliser: spreads the epoch into unrelated-looking start numbers.
fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod frames_tests;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod tests;

/// True when a data datagram with relative delay `rel` (µs, [`Deadline::relative`]) on
/// `link` was held through an outage of the path: it arrives more than [`HELD_AFTER_DOWN`]
/// later than the path's lowest delay would have brought it, and the path went down
/// after (or up to [`HELD_AFTER_DOWN`] before) it was due. A dead link's ARP queue does
/// that: it keeps what was sent into it until the neighbour answers again. TCP timed those
/// packets out long ago, and their acks would make it take seconds for the path's round
/// trip (an RTO of 6 s after a 2 s flap). A path that is merely slow (its delay above its
/// minimum by more than that, but no outage) keeps its packets.
fn held_through_outage(link: &Link, now: Instant, rel: i64) -> bool {
    let (Some(down), Some(base)) = (link.went_down, link.owd.known_base()) else {
        return false;
    };
    let excess = u64::try_from(rel - base).unwrap_or(0);
    let limit = HELD_AFTER_DOWN.as_micros() as u64;
    let due = now.as_micros().saturating_sub(excess);
    excess > limit && down.as_micros() + limit > due && down <= now
}
