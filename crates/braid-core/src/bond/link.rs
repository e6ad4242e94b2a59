//! One path as the bond sees it: its queue, its health and congestion state, what it
//! owes the peer (probe answers, acks) and its counters.

use std::collections::VecDeque;

use core::num::NonZeroU64;
use core::time::Duration;

use super::deadline::OwdTrack;
use super::equalize::BaseDelay;
use super::parts::Joiner;
use super::retransmit::{self, SegmentFilter};
use super::status::PathStatus;
use super::PathConfig;
use crate::cc::{CcMode, PathCc};
use crate::path::{HealthConfig, LinkState, PathHealth};
use crate::sched::PathState;
use crate::wire::Ack;
use crate::{Instant, PathId};

/// Acknowledge at once after this many data datagrams (on a UDP path: of at least
/// `ACK_LARGE` bytes)...
pub(crate) const ACK_EVERY: u32 = 8;
/// ...or on a UDP path after this many, however small...
const ACK_EVERY_SMALL: u32 = 64;
/// ...(a datagram this long or longer carries bulk data)...
const ACK_LARGE: usize = 512;
/// ...and otherwise this long after the first unacknowledged one...
pub(crate) const ACK_DELAY: Duration = Duration::from_millis(2);
/// ...or, on a path too slow for that to be cheap, later: the acks of a sparse stream
/// take at most 1/`ACK_SHARE` of what the path carries the other way...
const ACK_SHARE: u64 = 1024;
/// ...counting an ack as this many bytes on the wire (sealed, with IPv4, UDP and an
/// Ethernet header: 99)...
const ACK_WIRE_BYTES: u64 = 100;
/// ...and never later than this.
pub(crate) const ACK_DELAY_MAX: Duration = Duration::from_millis(20);
/// Slack on top of twice the RTT before a path with unacknowledged data counts as stalled.
const STALL_SLACK: Duration = Duration::from_millis(10);

/// A packet waiting in braid for its path.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) buf: Vec<u8>,
    pub(crate) seq: u64,
    pub(crate) enqueued: Instant,
    /// The TCP segment it carries, to recognise a retransmission of it.
    pub(crate) segment: Option<core::num::NonZeroU64>,
}

/// What the receiving side of a path owes the peer.
#[derive(Debug, Default)]
pub(crate) struct RxState {
    pub(crate) bytes: u64,
    pub(crate) packets: u64,
    pub(crate) highest_path_seq: Option<u32>,
    pub(crate) highest_timestamp: u32,
    pub(crate) highest_at: Instant,
    pub(crate) unacked: u32,
    /// Of them, datagrams of at least [`ACK_LARGE`] bytes.
    pub(crate) unacked_large: u32,
    pub(crate) first_unacked: Option<Instant>,
    /// The path's ack delay (`PathConfig::ack_delay`, else [`ACK_DELAY`]; see
    /// [`Link::ack_due`]).
    pub(crate) ack_delay: Duration,
}

impl RxState {
    pub(crate) fn on_data(&mut self, now: Instant, path_seq: u32, timestamp: u32, len: usize) {
        self.bytes += len as u64;
        self.packets += 1;
        let newer = self
            .highest_path_seq
            .is_none_or(|h| (path_seq.wrapping_sub(h) as i32) > 0);
        if newer {
            self.highest_path_seq = Some(path_seq);
            self.highest_timestamp = timestamp;
            self.highest_at = now;
        }
        self.unacked += 1;
        self.unacked_large += u32::from(len >= ACK_LARGE);
        self.first_unacked.get_or_insert(now);
    }

    /// When the ack is due: at once after `every` datagrams or [`ACK_EVERY`] large ones,
    /// else `delay` after the first unacknowledged datagram.
    pub(crate) fn ack_due(&self, delay: Duration, every: u32) -> Option<Instant> {
        let first = self.first_unacked?;
        if self.unacked >= every || self.unacked_large >= ACK_EVERY {
            Some(first)
        } else {
            Some(first + delay)
        }
    }

    pub(crate) fn take_ack(&mut self, now: Instant) -> Option<Ack> {
        let highest = self.highest_path_seq?;
        self.unacked = 0;
        self.unacked_large = 0;
        self.first_unacked = None;
        Some(Ack {
            highest_path_seq: highest,
            rx_bytes: self.bytes,
            rx_packets: self.packets,
            echo_timestamp: self.highest_timestamp,
            hold: now.saturating_since(self.highest_at),
        })
    }
}

/// The ack delay of a run of small datagrams on a UDP path whose capacity towards the
/// peer is `capacity_bps` (0: not measured yet); see [`Link::ack_due`].
fn sparse_ack_delay(capacity_bps: u64) -> Duration {
    if capacity_bps == 0 {
        return ACK_DELAY;
    }
    let ns = ACK_WIRE_BYTES * 8 * ACK_SHARE * 1_000_000_000 / capacity_bps;
    Duration::from_nanos(ns).clamp(ACK_DELAY, ACK_DELAY_MAX)
}

/// A path of the bond.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) id: PathId,
    pub(crate) cfg: PathConfig,
    pub(crate) health: PathHealth,
    pub(crate) cc: PathCc,
    pub(crate) queue: VecDeque<Queued>,
    pub(crate) queued_bytes: u64,
    /// The TCP segments `queue` holds ([`Link::holds_segment`]).
    segments: SegmentFilter,
    pub(crate) next_path_seq: u32,
    /// A probe to send: its number.
    pub(crate) probe_out: Option<u32>,
    /// A probe to answer: (number, its timestamp, when it arrived).
    pub(crate) probe_ack_out: Option<(u32, u32, Instant)>,
    pub(crate) rx: RxState,
    /// The next part of the queue's head to send, when it goes out in parts.
    pub(crate) next_part: usize,
    /// The packet being joined from parts received on this path.
    pub(crate) joiner: Joiner,
    /// Highest bond sequence number received on this path.
    pub(crate) rx_max_seq: Option<u64>,
    pub(crate) owd: OwdTrack,
    /// Base one-way delay from every datagram (delay equalisation).
    pub(crate) base: BaseDelay,
    pub(crate) tx_packets: u64,
    pub(crate) tx_bytes: u64,
    pub(crate) downs: u64,
    /// When the path last went down (the receiver's view: nothing heard from the peer).
    pub(crate) went_down: Option<Instant>,
    /// The largest datagram sent on this path, bytes.
    pub(crate) largest_sent: usize,
    /// When the peer last acknowledged data on this path (or the path last came up).
    pub(crate) last_ack: Instant,
    /// Time packets waited for the congestion window.
    pub(crate) window: WindowClock,
}

/// How long a path's packets have waited for its congestion window.
#[derive(Debug, Default)]
pub(crate) struct WindowClock {
    total: Duration,
    full_since: Option<Instant>,
    /// When the window last opened after being full.
    opened_at: Instant,
}

impl WindowClock {
    /// Whether packets wait for the window at `now` (queue non-empty, window full).
    pub(crate) fn note(&mut self, now: Instant, full: bool) {
        match (full, self.full_since) {
            (true, None) => self.full_since = Some(now),
            (false, Some(since)) => {
                self.total += now.saturating_since(since);
                self.full_since = None;
                self.opened_at = now;
            }
            _ => {}
        }
    }

    /// When the window last opened after being full.
    pub(crate) fn opened_at(&self) -> Instant {
        self.opened_at
    }

    /// The total up to `now`.
    fn at(&self, now: Instant) -> Duration {
        self.total
            + self
                .full_since
                .map_or(Duration::ZERO, |since| now.saturating_since(since))
    }
}

impl Link {
    /// A new link whose probes are numbered from `first_probe_seq` (random per run, so a
    /// restarted peer's old answers cannot match this run's probes).
    pub(crate) fn new(
        id: PathId,
        cfg: PathConfig,
        health: HealthConfig,
        now: Instant,
        first_probe_seq: u32,
    ) -> Self {
        let mut cc_cfg = cfg.cc;
        if cfg.bps > 0 {
            // A configured speed is the line's speed (EQL's priority): start there and
            // never pace above it, whatever a bursty link makes the estimator read.
            cc_cfg.initial_rate_bps = cfg.bps;
            cc_cfg.max_rate_bps = cfg.bps;
            if cfg.fixed_rate {
                cc_cfg.min_rate_bps = cfg.bps;
            }
        }
        let ack_delay = cfg.ack_delay.unwrap_or(ACK_DELAY);
        if cfg.ack_delay.is_some() {
            cc_cfg.peer_ack_delay = ack_delay;
        }
        Self {
            id,
            health: PathHealth::with_probe_seq(health, now, first_probe_seq),
            cc: PathCc::new(cc_cfg, now),
            cfg,
            queue: VecDeque::new(),
            segments: SegmentFilter::default(),
            queued_bytes: 0,
            next_path_seq: 0,
            probe_out: None,
            probe_ack_out: None,
            rx: RxState {
                ack_delay,
                ..RxState::default()
            },
            next_part: 0,
            joiner: Joiner::default(),
            rx_max_seq: None,
            owd: OwdTrack::default(),
            base: BaseDelay::default(),
            tx_packets: 0,
            tx_bytes: 0,
            downs: 0,
            went_down: None,
            largest_sent: 0,
            last_ack: now,
            window: WindowClock::default(),
        }
    }

    pub(crate) fn is_up(&self) -> bool {
        self.health.state() == LinkState::Up
    }

    /// The peer restarted: forget what this path knew of its previous run (what it
    /// received, what it owes, the peer's clock) and what it had in flight to it (the
    /// new run will never acknowledge it). Counters and the queue stay.
    pub(crate) fn forget_peer(&mut self, now: Instant) {
        self.rx = RxState {
            ack_delay: self.rx.ack_delay,
            ..RxState::default()
        };
        self.rx_max_seq = None;
        self.joiner.reset();
        self.probe_ack_out = None;
        self.owd = OwdTrack::default();
        self.base.reset();
        self.cc.reset(now);
        self.last_ack = now;
    }

    pub(crate) fn push(&mut self, q: Queued) {
        self.queued_bytes += q.buf.len() as u64;
        if let Some(key) = q.segment {
            self.segments.add(key);
        }
        self.queue.push_back(q);
    }

    pub(crate) fn pop(&mut self) -> Option<Queued> {
        let q = self.queue.pop_front()?;
        self.queued_bytes -= q.buf.len() as u64;
        if let Some(key) = q.segment {
            self.segments.remove(key);
        }
        Some(q)
    }

    /// True when the head of the queue ([`retransmit::SCAN`] packets) holds TCP segment
    /// `key` (see [`retransmit`]).
    pub(crate) fn holds_segment(&self, key: NonZeroU64) -> bool {
        self.segments.may_hold(key)
            && self
                .queue
                .iter()
                .take(retransmit::SCAN)
                .any(|q| q.segment == Some(key))
    }

    /// When this end owes the peer an ack. A serial line: after [`ACK_EVERY`] datagrams
    /// or its configured delay, both ends alike. A UDP path: bulk data ([`ACK_LARGE`]
    /// datagrams) as it always was, [`ACK_EVERY`] of them or [`ACK_DELAY`] after the
    /// first unacknowledged datagram (the sender's model and the scheduler's delay
    /// estimates read its acks); a run of small datagrams waits for
    /// [`ACK_EVERY_SMALL`] or longer on a slow path. Acks go back on the path they
    /// acknowledge, so the acks of a sparse stream (the tunnelled TCP acks of a bulk
    /// transfer the other way, a few hundred small datagrams a second) compete with
    /// this end's own data there, and at 2 ms they took 1-1.5 % of a 10-20 Mbit/s path.
    /// They now take at most 1/[`ACK_SHARE`] (0.1 %) of the path's capacity towards the
    /// peer (this end's congestion control measures it), waiting at most
    /// [`ACK_DELAY_MAX`].
    pub(crate) fn ack_due(&self) -> Option<Instant> {
        if self.cfg.ack_delay.is_some() {
            return self.rx.ack_due(self.rx.ack_delay, ACK_EVERY);
        }
        let delay = if self.rx.unacked_large > 0 {
            ACK_DELAY
        } else {
            sparse_ack_delay(self.cc.capacity_bps())
        };
        self.rx.ack_due(delay, ACK_EVERY_SMALL)
    }

    /// How long the peer may hold its ack of what is in flight: with a large datagram out
    /// its delay is [`ACK_DELAY`], with [`ACK_EVERY_SMALL`] out it acks on the last; a
    /// run of fewer small ones may wait its sparse delay, which depends on its estimate
    /// of this path's capacity towards us and so is taken at its bound. A configured
    /// delay is the same at both ends (a serial line's ends derive it from the same baud
    /// and MTU).
    fn peer_ack_wait(&self) -> Duration {
        // `out` datagrams in flight, at least `large` of them large: each small one is
        // under ACK_LARGE bytes, none is over the largest sent.
        let out = self.cc.inflight_datagrams();
        let small_max = (ACK_LARGE - 1) as u64;
        let large = self
            .cc
            .inflight_bytes()
            .saturating_sub(u64::from(out) * small_max)
            / (self.largest_sent.max(ACK_LARGE) as u64 - small_max);
        let large = u32::try_from(large).unwrap_or(u32::MAX);
        if self.cfg.ack_delay.is_some() {
            self.rx.ack_delay
        } else if large > 0 || out >= ACK_EVERY_SMALL {
            ACK_DELAY
        } else {
            ACK_DELAY_MAX
        }
    }

    /// How long data may go unacknowledged before the path counts as stalled: twice
    /// the smoothed RTT plus the time the peer may hold its ack, a serial line's frame
    /// time and some slack.
    fn stall_timeout(&self) -> Duration {
        let srtt = self.srtt().unwrap_or(Duration::from_millis(100));
        srtt * 2 + self.peer_ack_wait() + self.frames_time() + STALL_SLACK
    }

    /// On a fixed-rate path (a serial line), the line time of two of its largest frames:
    /// the oldest unacknowledged frame may wait behind one on the wire and takes a frame
    /// time itself, and an RTT learnt from probes (small frames) includes neither. At
    /// 115200 bd with 900-byte frames these are 160 ms, and without them the first data
    /// after an idle spell (RTT 16 ms from probes) counted as stalled at 390 ms, before
    /// its ack (due 430 ms) could come, and the line's queue was handed to the others.
    fn frames_time(&self) -> Duration {
        self.line_time(2 * self.largest_sent as u64)
            .unwrap_or(Duration::ZERO)
    }

    /// How long `bytes` take on a fixed-rate path (a serial line); None on others.
    pub(crate) fn line_time(&self, bytes: u64) -> Option<Duration> {
        (self.cfg.fixed_rate && self.cfg.bps > 0)
            .then(|| Duration::from_micros(bytes * 8_000_000 / self.cfg.bps))
    }

    /// Data is in flight and nothing has been acknowledged for [`Self::stall_timeout`]:
    /// the path is probably dead. It takes no new packets until an ack comes, its health
    /// state machine declares it down, or the congestion controller gives up on what is
    /// in flight and it may try again.
    pub(crate) fn stalled(&self, now: Instant) -> bool {
        self.cc.inflight_bytes() > 0
            && now.saturating_since(self.last_ack) > self.stall_timeout()
            // Once the congestion controller's own timeout has passed, what was in flight
            // counts as lost and the path may try again: otherwise a path that stalled
            // would never be given the packet that lets it recover.
            && !self.cc.inflight_expired(now)
    }

    /// When the path counts (or would count) as stalled: the last ack plus the stall
    /// timeout.
    pub(crate) fn stall_onset(&self) -> Instant {
        self.last_ack + self.stall_timeout()
    }

    /// Up and not stalled: the path may take packets.
    pub(crate) fn usable(&self, now: Instant) -> bool {
        self.is_up() && !self.stalled(now)
    }

    /// When the path will count as stalled if no ack comes.
    pub(crate) fn stall_deadline(&self) -> Option<Instant> {
        (self.is_up() && self.cc.inflight_bytes() > 0 && !self.queue.is_empty())
            .then(|| self.last_ack + self.stall_timeout() + Duration::from_micros(1))
    }

    /// How fast this path's queue drains, bit/s: the measured capacity once known;
    /// before that, the pacing rate or what the congestion window lets through per
    /// round trip, whichever is lower (a new path on a long RTT is window-limited).
    /// Never above a configured speed, which caps the pace.
    pub(crate) fn drain_rate_bps(&self) -> u64 {
        if self.cfg.fixed_rate && self.cfg.bps > 0 {
            // A serial line: it drains at its pace, whatever acks suggest (a delayed
            // ack covering several frames reads as a burst far above the line's rate).
            return self.cc.pacing_rate_bps();
        }
        let mut capacity = self.cc.capacity_bps();
        if self.cfg.bps > 0 {
            // Acks that come in bunches read as bursts: on a 1.44 Mbit/s path the
            // estimate was 10 Mbit/s at times, its queue was timed at a seventh of its
            // wait, and it grew to 200 ms while later packets left on the other path.
            capacity = capacity.min(self.cfg.bps);
        }
        // Before Startup has found the capacity, an estimate from a few app-limited
        // packets can be far too low, and a scheduler that believed it would starve the
        // path it needs to measure: trust the pace instead.
        if capacity > 0 && self.cc.mode() != CcMode::Startup {
            return capacity;
        }
        let pacing = self.cc.pacing_rate_bps().max(capacity);
        match self.srtt() {
            Some(rtt) if !rtt.is_zero() => {
                let window = self.cc.cwnd_bytes() as u128 * 8_000_000 / rtt.as_micros();
                pacing.min(u64::try_from(window).unwrap_or(u64::MAX))
            }
            _ => pacing,
        }
    }

    /// How long the queue takes to drain at [`Self::drain_rate_bps`].
    pub(crate) fn queue_delay(&self) -> Duration {
        let rate = self.drain_rate_bps().max(1);
        Duration::from_micros(self.queued_bytes.saturating_mul(8_000_000) / rate)
    }

    /// Empty the queue, returning what it held.
    pub(crate) fn take_queue(&mut self) -> VecDeque<Queued> {
        self.queued_bytes = 0;
        // A head sent in part goes whole on its new path.
        self.next_part = 0;
        self.segments.clear();
        core::mem::take(&mut self.queue)
    }

    /// Smoothed RTT: from data acks when there are some, else from probes.
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.cc.srtt().or_else(|| self.health.srtt())
    }

    /// Expected one-way delay of a packet sent now: half the base RTT, plus the queue
    /// in the network implied by what is in flight beyond one bandwidth-delay product.
    /// Fresh on every call, unlike a smoothed RTT that an idle path never updates.
    ///
    /// In Startup the capacity is a lower bound (a path fed little measures little), so
    /// a window read at it looks like a queue that is not there; there the queue counts
    /// only as far as the RTT shows it (smoothed RTT over the minimum). Without that, a
    /// long path's first window read as a second of queue and the scheduler starved the
    /// path it needed to measure (docs/congestion-control.md, Startup and the scheduler).
    fn one_way_delay(&self) -> Duration {
        let Some(base) = self.cc.min_rtt().or_else(|| self.health.srtt()) else {
            return Duration::ZERO;
        };
        let rate = self.cc.capacity_bps();
        if rate == 0 {
            return self.srtt().unwrap_or(base) / 2;
        }
        let bdp = rate as u128 * base.as_micros() / 8_000_000;
        let excess = (self.cc.inflight_bytes() as u128).saturating_sub(bdp);
        let mut queued = Duration::from_micros((excess * 8_000_000 / rate as u128) as u64);
        if self.cc.mode() == CcMode::Startup {
            queued = queued.min(self.srtt().unwrap_or(base).saturating_sub(base));
        }
        base / 2 + queued
    }

    /// Half the minimum RTT (from data acks, else probes): the one-way delay without
    /// queueing. Zero while unknown.
    fn base_delay(&self) -> Duration {
        self.cc
            .min_rtt()
            .or_else(|| self.health.srtt())
            .map_or(Duration::ZERO, |r| r / 2)
    }

    pub(crate) fn state(&self, now: Instant) -> PathState {
        PathState {
            id: self.id,
            usable: self.usable(now),
            bps: self.cfg.bps,
            rate_bps: self.drain_rate_bps(),
            queued_bytes: self.queued_bytes,
            inflight_bytes: self.cc.inflight_bytes(),
            one_way_delay: self.one_way_delay(),
            base_delay: self.base_delay(),
            prio: self.cfg.prio,
        }
    }

    /// When this path next has something to send, given the current time.
    pub(crate) fn next_transmit(&self, now: Instant) -> Option<Instant> {
        if self.probe_out.is_some() || self.probe_ack_out.is_some() {
            return Some(now);
        }
        let mut t = self.ack_due();
        if self.is_up() {
            if let Some(head) = self.queue.front() {
                let data = self
                    .cc
                    .next_send_time(now, head.buf.len() + crate::wire::DATA_HEADER_LEN);
                t = match (t, data) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        t
    }

    pub(crate) fn status(&self, now: Instant) -> PathStatus {
        PathStatus {
            id: self.id.0,
            name: self.cfg.name.clone(),
            state: match (self.is_up(), self.stalled(now)) {
                (false, _) => "down",
                (true, true) => "stalled",
                (true, false) => "up",
            },
            bps: self.cfg.bps,
            capacity_bps: self.cc.capacity_bps(),
            pacing_bps: self.cc.pacing_rate_bps(),
            srtt_us: self.srtt().map_or(0, |d| d.as_micros() as u64),
            min_rtt_us: self.cc.min_rtt().map_or(0, |d| d.as_micros() as u64),
            rttvar_us: self.health.rttvar().as_micros() as u64,
            loss: self.cc.loss_ratio().max(self.health.probe_loss()),
            queued_bytes: self.queued_bytes,
            inflight_bytes: self.cc.inflight_bytes(),
            cwnd_bytes: self.cc.cwnd_bytes(),
            cc_mode: self.cc.mode().as_str(),
            window_limited_ms: self.window.at(now).as_millis() as u64,
            owd_us: self.one_way_delay().as_micros() as u64,
            tx_packets: self.tx_packets,
            tx_bytes: self.tx_bytes,
            rx_packets: self.rx.packets,
            rx_bytes: self.rx.bytes,
            downs: self.downs,
            last_rx_us: self
                .health
                .last_heard()
                .map(|t| now.saturating_since(t).as_micros() as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `status` shows as the scheduler's one-way delay. Pinned for a 120 ms path in
    /// Startup whose first samples were small (0.37 Mbit/s: four datagrams over a round
    /// trip) with 56 kB out: read at that estimate the window would count as a 1.08 s
    /// queue (1 140 036 µs before the RTT bound), and the scheduler starved the path.
    /// Only a queue the RTT shows counts in Startup, and never more than the window
    /// implies.
    #[test]
    fn status_shows_the_schedulers_one_way_delay() {
        let t0 = Instant::from_millis(1000);
        let mut l = Link::new(
            PathId(0),
            PathConfig::default(),
            HealthConfig::default(),
            t0,
            0,
        );
        let rtt = Duration::from_millis(120);
        l.cc.hint_rtt(rtt);
        let ack = |h: u32, n: u64| crate::wire::Ack {
            highest_path_seq: h,
            rx_bytes: n * 1400,
            rx_packets: n,
            echo_timestamp: 0,
            hold: Duration::ZERO,
        };
        let burst = Duration::from_millis(1);
        assert_eq!(l.status(t0).owd_us, 0, "unknown before any RTT");
        l.cc.on_send(t0, 0, 1400, true, burst);
        l.cc.on_ack(t0 + rtt, &ack(0, 1));
        for seq in 1..5 {
            l.cc.on_send(t0 + rtt, seq, 1400, true, burst);
        }
        let t1 = t0 + 2 * rtt;
        l.cc.on_ack(t1, &ack(4, 5));
        assert_eq!(l.cc.mode(), CcMode::Startup);
        // 5600 B in 120 ms: 46 666 B/s.
        assert_eq!(l.cc.capacity_bps(), 46_666 * 8);
        assert_eq!(l.status(t1).owd_us, 60_000, "nothing in flight");
        for seq in 5..45 {
            l.cc.on_send(t1, seq, 1400, false, burst);
        }
        assert_eq!(
            l.status(t1).owd_us,
            l.state(t1).one_way_delay.as_micros() as u64
        );
        assert_eq!(l.status(t1).owd_us, 60_000, "a window is not a queue");
        // The RTT grows by 40 ms: the queue counts as far as the smoothed RTT shows it.
        let t2 = t1 + Duration::from_millis(160);
        l.cc.on_ack(t2, &ack(5, 6));
        let srtt = l.srtt().expect("acked");
        assert!(srtt > rtt, "{srtt:?}");
        let queue = srtt - rtt;
        assert_eq!(l.status(t2).owd_us, (rtt / 2 + queue).as_micros() as u64);
        assert_eq!(l.status(t2).owd_us, 65_000);
        // Everything acked: nothing out, so no queue, whatever the smoothed RTT says.
        l.cc.on_ack(t2, &ack(44, 45));
        assert_eq!(l.cc.inflight_bytes(), 0);
        assert_eq!(l.cc.mode(), CcMode::Startup);
        assert!(l.srtt().expect("acked") > rtt);
        assert_eq!(l.status(t2).owd_us, 60_000);
    }

    #[test]
    fn ack_waits_for_the_paths_delay_or_eight_datagrams() {
        let t0 = Instant::from_millis(1000);
        let mut rx = RxState {
            ack_delay: Duration::from_millis(250),
            ..RxState::default()
        };
        let (d, line) = (rx.ack_delay, ACK_EVERY);
        assert_eq!(rx.ack_due(d, line), None);
        rx.on_data(t0, 1, 5, 100);
        assert_eq!(rx.ack_due(d, line), Some(t0 + Duration::from_millis(250)));
        for k in 2..=ACK_EVERY {
            rx.on_data(t0 + Duration::from_millis(u64::from(k)), k, 5, 100);
        }
        assert_eq!(rx.ack_due(d, line), Some(t0), "eight datagrams: at once");
        // On a UDP path eight small ones wait; eight large ones, or 64 small, do not.
        let udp = ACK_EVERY_SMALL;
        assert_eq!(rx.ack_due(d, udp), Some(t0 + d));
        let a = rx.take_ack(t0 + Duration::from_millis(10)).unwrap();
        assert_eq!(a.highest_path_seq, ACK_EVERY);
        assert_eq!(rx.ack_due(d, line), None);
        for k in 0..ACK_EVERY {
            rx.on_data(t0, 100 + k, 5, 1400);
        }
        assert_eq!(rx.ack_due(d, udp), Some(t0), "eight of 1400 bytes");
        rx.take_ack(t0);
        for k in 0..ACK_EVERY_SMALL {
            assert_ne!(rx.ack_due(d, udp), Some(t0), "{k} small ones");
            rx.on_data(t0, 200 + k, 5, 72);
        }
        assert_eq!(rx.ack_due(d, udp), Some(t0), "64 small ones");
        // A path built without a delay uses the UDP default.
        let l = Link::new(
            PathId(0),
            PathConfig::default(),
            HealthConfig::default(),
            t0,
            0,
        );
        assert_eq!(l.rx.ack_delay, ACK_DELAY);
        let l = Link::new(
            PathId(0),
            PathConfig {
                ack_delay: Some(Duration::from_millis(300)),
                ..PathConfig::default()
            },
            HealthConfig::default(),
            t0,
            0,
        );
        assert_eq!(l.rx.ack_delay, Duration::from_millis(300));
        let mut l = l;
        l.rx.on_data(t0, 1, 5, 72);
        assert_eq!(
            l.ack_due(),
            Some(t0 + Duration::from_millis(300)),
            "configured: as it is"
        );
        l.rx.take_ack(t0);
        // The stall timeout allows for it.
        assert!(l.stall_timeout() >= Duration::from_millis(300));
    }

    /// A UDP path's acks wait 2 ms, or as long as keeps a sparse stream's acks (100 bytes
    /// each, at most one per delay) under 1/1024 of the capacity they compete with: 20 ms
    /// at most.
    #[test]
    fn a_slow_paths_acks_wait_longer() {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        assert_eq!(sparse_ack_delay(0), ACK_DELAY, "nothing measured yet");
        assert_eq!(sparse_ack_delay(1_000_000_000), ACK_DELAY);
        assert_eq!(ms(sparse_ack_delay(400_000_000)), 2.048);
        assert_eq!(ms(sparse_ack_delay(100_000_000)), 8.192);
        assert_eq!(ms(sparse_ack_delay(50_000_000)), 16.384);
        assert_eq!(sparse_ack_delay(40_000_000), ACK_DELAY_MAX);
        assert_eq!(sparse_ack_delay(1), ACK_DELAY_MAX);
        // A fresh path has measured nothing: the default.
        let mut l = Link::new(
            PathId(0),
            PathConfig::default(),
            HealthConfig::default(),
            Instant::from_millis(1000),
            0,
        );
        // Nothing in flight: the peer's ack may take its longest delay.
        assert!(l.stall_timeout() >= ACK_DELAY_MAX + Duration::from_millis(200));
        let t0 = Instant::from_millis(1000);
        l.rx.on_data(t0, 1, 5, 72);
        assert_eq!(l.ack_due(), Some(t0 + ACK_DELAY));
    }

    #[test]
    fn window_limited_time_adds_up_the_spells_of_a_full_window() {
        let t = |ms: u64| Instant::from_millis(1000 + ms);
        let mut w = WindowClock::default();
        w.note(t(0), false);
        w.note(t(10), true);
        w.note(t(15), true); // still the same spell
        assert_eq!(w.at(t(20)), Duration::from_millis(10));
        w.note(t(40), false);
        w.note(t(50), false);
        w.note(t(100), true);
        w.note(t(105), false);
        assert_eq!(w.at(t(200)), Duration::from_millis(35));
    }
}
