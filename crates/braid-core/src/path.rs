//! One path's liveness: probes, the up/down state machine, probe RTT and probe loss.
//!
//! The bond owns one [`PathHealth`] per path and drives it:
//!
//! * [`PathHealth::poll_probe`] when a probe is due (returns the probe number to send);
//! * [`PathHealth::on_probe_ack`] when the peer answers a probe;
//! * [`PathHealth::on_peer_alive`] on every valid datagram from the peer on the path;
//! * [`PathHealth::on_io_error`] when the path's socket fails;
//! * [`PathHealth::handle_timeout`] at [`PathHealth::poll_timeout`].
//!
//! Rules (defaults: probe every 100 ms, `down_after` 3, `up_after` 2; see
//! `docs/path-health.md`):
//!
//! * A path starts **Down** and is probed every `probe_interval`, whatever its state.
//! * Down → **Up** after `up_after` answered probes in a row (also for the very first
//!   bring-up: an answer proves both directions work, one answer may be luck).
//!   A probe that times out unanswered resets the count, as does an I/O error.
//! * Up → **Down** when nothing at all (probe answer, data, ack, the peer's own probes) has
//!   been heard from the peer for `down_after × probe_interval`; that is, `down_after`
//!   probes in a row went unanswered and no data showed the peer alive. Also Up → Down
//!   when `3 × down_after` probes in a row time out even though the peer is heard (our
//!   direction is broken; the peer is talking to a wall), and at once on an I/O error.
//! * A probe times out `max(probe_interval, srtt + 4·rttvar)` after it was sent (1 s
//!   before any RTT is known), so a path whose RTT exceeds the probe interval still
//!   comes up. Answers that arrive after the timeout still count (late is not lost).
//! * Answers to probes not among the last [`PROBE_WINDOW`] sent, and second answers to
//!   the same probe, are ignored. Probe numbers wrap.
use core::time::Duration;

use crate::rtt::RttEstimator;
use crate::Instant;

/// Probe and liveness settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HealthConfig {
    /// Time between probes (default 100 ms).
    pub probe_interval: Duration,
    /// Missed probes before the path is declared down (default 3).
    pub down_after: u32,
    /// Answered probes in a row before a down path is declared up (default 2).
    pub up_after: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            probe_interval: Duration::from_millis(100),
            down_after: 3,
            up_after: 2,
        }
    }
}

/// Liveness state of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Carries traffic.
    Up,
    /// Does not carry traffic; probed until it answers.
    Down,
}

/// A change of liveness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transition {
    /// The path came up.
    Up,
    /// The path went down.
    Down,
}

/// How many recent probes are remembered (for matching answers and for probe loss).
pub(crate) const PROBE_WINDOW: usize = 32;

/// Probe timeout before any RTT has been measured (RFC 6298's initial RTO).
const INITIAL_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Up → Down after this many × `down_after` probe timeouts in a row even if the peer is
/// heard (one-way failure).
const ONE_WAY_DOWN_FACTOR: u32 = 3;

/// Shortest accepted probe interval (a zero interval would probe in a busy loop).
const MIN_PROBE_INTERVAL: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProbeStatus {
    Empty,
    Pending,
    Answered,
    Lost,
}

#[derive(Clone, Copy, Debug)]
struct ProbeRec {
    seq: u32,
    sent: Instant,
    status: ProbeStatus,
}

const EMPTY_PROBE: ProbeRec = ProbeRec {
    seq: 0,
    sent: Instant::ZERO,
    status: ProbeStatus::Empty,
};

/// One path's liveness state machine.
#[derive(Debug)]
pub(crate) struct PathHealth {
    state: LinkState,
    interval: Duration,
    down_after: u32,
    up_after: u32,
    next_probe_at: Instant,
    next_seq: u32,
    probes: [ProbeRec; PROBE_WINDOW],
    /// Last time anything arrived from the peer (None: never, or not since going down).
    last_heard: Option<Instant>,
    answered_in_row: u32,
    timeouts_in_row: u32,
    rtt: RttEstimator,
}

impl PathHealth {
    #[cfg(test)]
    /// A new path, down until `up_after` probes are answered.
    pub(crate) fn new(cfg: HealthConfig, now: Instant) -> Self {
        Self::with_probe_seq(cfg, now, 0)
    }

    /// Like [`PathHealth::new`], with the first probe numbered `first_probe_seq`.
    pub(crate) fn with_probe_seq(cfg: HealthConfig, now: Instant, first_probe_seq: u32) -> Self {
        Self {
            state: LinkState::Down,
            interval: cfg.probe_interval.max(MIN_PROBE_INTERVAL),
            down_after: cfg.down_after.max(1),
            up_after: cfg.up_after.max(1),
            next_probe_at: now,
            next_seq: first_probe_seq,
            probes: [EMPTY_PROBE; PROBE_WINDOW],
            last_heard: None,
            answered_in_row: 0,
            timeouts_in_row: 0,
            rtt: RttEstimator::default(),
        }
    }

    /// Current state.
    pub(crate) fn state(&self) -> LinkState {
        self.state
    }

    /// New settings at run time (a config reload): state, RTT and probes in flight are
    /// kept; the next probe goes no later than one new interval from `now`.
    pub(crate) fn set_config(&mut self, cfg: HealthConfig, now: Instant) {
        self.interval = cfg.probe_interval.max(MIN_PROBE_INTERVAL);
        self.down_after = cfg.down_after.max(1);
        self.up_after = cfg.up_after.max(1);
        self.next_probe_at = self.next_probe_at.min(now + self.interval);
    }

    /// If a probe is due, record it as sent and return its number.
    pub(crate) fn poll_probe(&mut self, now: Instant) -> Option<u32> {
        if now < self.next_probe_at {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        let slot = slot(seq);
        // A probe still pending when its slot is reused counts as timed out (only
        // possible with a timeout longer than the window; handle_timeout normally
        // got there first).
        if let Some(old) = self.probes.get(slot).copied() {
            if old.status == ProbeStatus::Pending {
                self.count_timeout();
            }
        }
        if let Some(rec) = self.probes.get_mut(slot) {
            *rec = ProbeRec {
                seq,
                sent: now,
                status: ProbeStatus::Pending,
            };
        }
        self.next_probe_at += self.interval;
        if self.next_probe_at <= now {
            // We were polled late: do not send a burst of catch-up probes.
            self.next_probe_at = now + self.interval;
        }
        Some(seq)
    }

    /// When probe `probe_seq` was sent, if it is still waiting for its answer.
    pub(crate) fn pending_probe_sent(&self, probe_seq: u32) -> Option<Instant> {
        let rec = self.probes.get(slot(probe_seq))?;
        (rec.seq == probe_seq && matches!(rec.status, ProbeStatus::Pending | ProbeStatus::Lost))
            .then_some(rec.sent)
    }

    /// A probe ack arrived; `hold` is the peer's delay before answering.
    pub(crate) fn on_probe_ack(
        &mut self,
        now: Instant,
        probe_seq: u32,
        hold: Duration,
    ) -> Option<Transition> {
        let rec = self.probes.get_mut(slot(probe_seq))?;
        if rec.seq != probe_seq || !matches!(rec.status, ProbeStatus::Pending | ProbeStatus::Lost) {
            // Never sent, too old (slot reused), or already answered: stale/duplicate.
            return None;
        }
        rec.status = ProbeStatus::Answered;
        let elapsed = now.saturating_since(rec.sent);
        if hold < elapsed {
            self.rtt.sample(elapsed - hold);
        }
        self.last_heard = Some(now);
        self.timeouts_in_row = 0;
        self.answered_in_row = self.answered_in_row.saturating_add(1);
        if self.state == LinkState::Down && self.answered_in_row >= self.up_after {
            self.state = LinkState::Up;
            return Some(Transition::Up);
        }
        None
    }

    /// Any authenticated datagram arrived from the peer on this path.
    ///
    /// Keeps an up path up; it does not bring a down path up (only probe answers prove
    /// that our direction works too).
    pub(crate) fn on_peer_alive(&mut self, now: Instant) -> Option<Transition> {
        self.last_heard = Some(now);
        None
    }

    /// The socket reported an error (interface gone, unreachable): down at once.
    pub(crate) fn on_io_error(&mut self, _now: Instant) -> Option<Transition> {
        self.answered_in_row = 0;
        self.go_down()
    }

    /// Missed-probe accounting.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Option<Transition> {
        let timeout = self.probe_timeout();
        let mut timed_out = 0u32;
        for rec in self.probes.iter_mut() {
            if rec.status == ProbeStatus::Pending && now >= rec.sent + timeout {
                rec.status = ProbeStatus::Lost;
                timed_out += 1;
            }
        }
        for _ in 0..timed_out {
            self.count_timeout();
        }
        if self.state == LinkState::Up {
            let silent = match self.last_heard {
                Some(t) => now >= t + self.silence_limit(),
                None => true,
            };
            let one_way =
                self.timeouts_in_row >= self.down_after.saturating_mul(ONE_WAY_DOWN_FACTOR);
            if silent || one_way {
                return self.go_down();
            }
        }
        None
    }

    /// Next time [`PathHealth::handle_timeout`] or [`PathHealth::poll_probe`] has work.
    pub(crate) fn poll_timeout(&self) -> Instant {
        let mut t = self.next_probe_at;
        let timeout = self.probe_timeout();
        for rec in &self.probes {
            if rec.status == ProbeStatus::Pending {
                t = t.min(rec.sent + timeout);
            }
        }
        if self.state == LinkState::Up {
            if let Some(h) = self.last_heard {
                t = t.min(h + self.silence_limit());
            }
        }
        t
    }

    /// Smoothed RTT from probes, if any.
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.rtt.srtt()
    }

    /// RTT variation from probes (RFC 6298 `RTTVAR`); zero before the first sample.
    pub(crate) fn rttvar(&self) -> Duration {
        self.rtt.rttvar()
    }

    /// Fraction of probes lost over the recent window (0.0-1.0).
    ///
    /// Counts the last [`PROBE_WINDOW`] probes that are answered or timed out; probes
    /// still within their timeout are not counted either way.
    pub(crate) fn probe_loss(&self) -> f64 {
        let mut lost = 0u32;
        let mut decided = 0u32;
        for rec in &self.probes {
            match rec.status {
                ProbeStatus::Answered => decided += 1,
                ProbeStatus::Lost => {
                    decided += 1;
                    lost += 1;
                }
                ProbeStatus::Empty | ProbeStatus::Pending => {}
            }
        }
        if decided == 0 {
            0.0
        } else {
            f64::from(lost) / f64::from(decided)
        }
    }

    /// Last time anything was heard from the peer on this path.
    pub(crate) fn last_heard(&self) -> Option<Instant> {
        self.last_heard
    }

    /// How long an unanswered probe waits before it counts as missed:
    /// `max(probe_interval, srtt + 4·rttvar)`, or 1 s before any RTT sample.
    pub(crate) fn probe_timeout(&self) -> Duration {
        match self.rtt.srtt() {
            Some(srtt) => (srtt + 4 * self.rtt.rttvar()).max(self.interval),
            None => INITIAL_PROBE_TIMEOUT.max(self.interval),
        }
    }

    fn silence_limit(&self) -> Duration {
        self.interval.saturating_mul(self.down_after)
    }

    fn count_timeout(&mut self) {
        self.answered_in_row = 0;
        self.timeouts_in_row = self.timeouts_in_row.saturating_add(1);
    }

    fn go_down(&mut self) -> Option<Transition> {
        self.answered_in_row = 0;
        self.timeouts_in_row = 0;
        if self.state == LinkState::Down {
            return None;
        }
        self.state = LinkState::Down;
        Some(Transition::Down)
    }
}

fn slot(seq: u32) -> usize {
    seq as usize % PROBE_WINDOW
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(v: u64) -> Instant {
        Instant::from_millis(v)
    }

    const HOLD: Duration = Duration::ZERO;

    /// Sends the due probe at `t` and has it answered at `t + rtt`.
    fn probe_answered(h: &mut PathHealth, t: u64, rtt: u64) -> Option<Transition> {
        assert_eq!(h.handle_timeout(ms(t)), None);
        let seq = h.poll_probe(ms(t)).expect("probe due");
        h.on_probe_ack(ms(t + rtt), seq, HOLD)
    }

    fn up_path() -> PathHealth {
        let mut h = PathHealth::new(HealthConfig::default(), ms(0));
        assert_eq!(probe_answered(&mut h, 0, 10), None);
        assert_eq!(probe_answered(&mut h, 100, 10), Some(Transition::Up));
        h
    }

    #[test]
    fn starts_down_and_probes_at_once_then_every_interval() {
        let mut h = PathHealth::new(HealthConfig::default(), ms(5));
        assert_eq!(h.state(), LinkState::Down);
        assert_eq!(h.poll_timeout(), ms(5));
        assert_eq!(h.poll_probe(ms(5)), Some(0));
        assert_eq!(h.poll_probe(ms(5)), None);
        assert_eq!(h.poll_probe(ms(104)), None);
        assert_eq!(h.poll_timeout(), ms(105));
        assert_eq!(h.poll_probe(ms(105)), Some(1));
        // Polled late: the next one is an interval after the late one, no burst.
        assert_eq!(h.poll_probe(ms(450)), Some(2));
        assert_eq!(h.poll_probe(ms(450)), None);
        assert_eq!(h.poll_timeout(), ms(550));
    }

    #[test]
    fn comes_up_on_second_answer() {
        let mut h = PathHealth::new(HealthConfig::default(), ms(0));
        assert_eq!(probe_answered(&mut h, 0, 20), None);
        assert_eq!(h.state(), LinkState::Down);
        assert_eq!(probe_answered(&mut h, 100, 20), Some(Transition::Up));
        assert_eq!(h.state(), LinkState::Up);
        assert_eq!(h.srtt(), Some(Duration::from_millis(20)));
        assert_eq!(h.probe_loss(), 0.0);
    }

    #[test]
    fn up_after_one_comes_up_on_first_answer() {
        let cfg = HealthConfig {
            up_after: 1,
            ..HealthConfig::default()
        };
        let mut h = PathHealth::new(cfg, ms(0));
        assert_eq!(probe_answered(&mut h, 0, 7), Some(Transition::Up));
    }

    #[test]
    fn peer_data_alone_does_not_bring_a_path_up() {
        let mut h = PathHealth::new(HealthConfig::default(), ms(0));
        for t in 0..50 {
            assert_eq!(h.on_peer_alive(ms(t * 10)), None);
            assert_eq!(h.handle_timeout(ms(t * 10)), None);
        }
        assert_eq!(h.state(), LinkState::Down);
    }

    #[test]
    fn down_after_300ms_of_silence_exactly() {
        let mut h = up_path(); // last heard at 110 ms
        assert_eq!(h.handle_timeout(ms(200)), None);
        assert_eq!(h.poll_probe(ms(200)), Some(2));
        assert_eq!(h.poll_timeout(), ms(300)); // next probe, and probe 2 times out
        assert_eq!(h.handle_timeout(ms(300)), None);
        assert_eq!(h.poll_probe(ms(300)), Some(3));
        assert_eq!(h.handle_timeout(ms(400)), None);
        assert_eq!(h.poll_probe(ms(400)), Some(4));
        assert_eq!(h.poll_timeout(), ms(410)); // silence limit: 110 + 300
        assert_eq!(h.handle_timeout(ms(409)), None);
        assert_eq!(h.state(), LinkState::Up);
        assert_eq!(h.handle_timeout(ms(410)), Some(Transition::Down));
        assert_eq!(h.state(), LinkState::Down);
        assert_eq!(h.handle_timeout(ms(411)), None);
        assert_eq!(h.poll_timeout(), ms(500));
        // Keeps probing while down.
        assert_eq!(h.poll_probe(ms(500)), Some(5));
    }

    #[test]
    fn peer_data_keeps_a_busy_path_up_without_probe_answers() {
        let mut h = up_path();
        // Probe answers lost, but data arrives every 50 ms for 700 ms.
        for t in (150..=800).step_by(50) {
            h.poll_probe(ms(t));
            h.on_peer_alive(ms(t));
            assert_eq!(h.handle_timeout(ms(t)), None, "at {t}");
        }
        assert_eq!(h.state(), LinkState::Up);
        assert!(h.probe_loss() > 0.5);
    }

    #[test]
    fn one_way_failure_goes_down_after_nine_timeouts() {
        let mut h = up_path();
        // Peer keeps talking, our probes never answered. srtt 10 ms → timeout = 100 ms.
        let mut t = 200;
        let mut went_down_at = None;
        while t <= 2000 {
            h.on_peer_alive(ms(t));
            if let Some(tr) = h.handle_timeout(ms(t)) {
                assert_eq!(tr, Transition::Down);
                went_down_at = Some(t);
                break;
            }
            h.poll_probe(ms(t));
            t += 100;
        }
        // Probes sent at 200..=1000 (9 of them) time out at 300..=1100.
        assert_eq!(went_down_at, Some(1100));
    }

    #[test]
    fn io_error_downs_at_once_and_probing_brings_it_back() {
        let mut h = up_path();
        assert_eq!(h.on_io_error(ms(150)), Some(Transition::Down));
        assert_eq!(h.on_io_error(ms(151)), None);
        // Probing goes on; two fresh answers bring it back.
        assert_eq!(probe_answered(&mut h, 200, 10), None);
        assert_eq!(probe_answered(&mut h, 300, 10), Some(Transition::Up));
    }

    #[test]
    fn io_error_between_answers_resets_the_count() {
        let mut h = PathHealth::new(HealthConfig::default(), ms(0));
        assert_eq!(probe_answered(&mut h, 0, 10), None);
        assert_eq!(h.on_io_error(ms(50)), None);
        assert_eq!(probe_answered(&mut h, 100, 10), None);
        assert_eq!(probe_answered(&mut h, 200, 10), Some(Transition::Up));
    }

    #[test]
    fn returning_path_is_back_within_two_intervals() {
        let mut h = up_path();
        // Cut at 120 ms: down at 410 ms.
        let mut t = 200;
        let mut down_at = None;
        while down_at.is_none() {
            down_at = h.handle_timeout(ms(t)).map(|_| t);
            h.poll_probe(ms(t));
            t += 10;
        }
        assert_eq!(down_at, Some(410));
        // Path returns at 1234 ms; probes due at 1300, 1400 → up at 1410.
        let mut up_at = None;
        let mut t = 420;
        while up_at.is_none() && t < 3000 {
            if h.handle_timeout(ms(t)).is_some() {
                panic!("unexpected transition while down at {t}");
            }
            if let Some(seq) = h.poll_probe(ms(t)) {
                if t >= 1234 {
                    up_at = h.on_probe_ack(ms(t + 10), seq, HOLD).map(|_| t + 10);
                }
            }
            t += 10;
        }
        assert_eq!(up_at, Some(1410));
    }

    #[test]
    fn timeout_between_answers_resets_the_up_count() {
        let mut h = PathHealth::new(HealthConfig::default(), ms(0));
        assert_eq!(probe_answered(&mut h, 0, 10), None);
        assert_eq!(h.poll_probe(ms(100)), Some(1)); // never answered
                                                    // srtt 10 → timeout max(100, 10 + 4*5) = 100 ms.
        assert_eq!(h.probe_timeout(), Duration::from_millis(100));
        assert_eq!(h.handle_timeout(ms(199)), None);
        assert_eq!(h.handle_timeout(ms(200)), None);
        assert_eq!(probe_answered(&mut h, 200, 10), None);
        assert_eq!(probe_answered(&mut h, 300, 10), Some(Transition::Up));
        assert!((h.probe_loss() - 0.25).abs() < 1e-9);
    }

    #[test]
    fn long_rtt_path_comes_up_and_stays_up() {
        // RTT 250 ms > probe interval.
        let mut h = PathHealth::new(HealthConfig::default(), ms(0));
        let mut pending: Vec<(u64, u32)> = Vec::new();
        let mut up_at = None;
        let mut t = 0;
        while t <= 5000 {
            while let Some(&(due, seq)) = pending.first() {
                if due > t {
                    break;
                }
                pending.remove(0);
                if let Some(tr) = h.on_probe_ack(ms(t), seq, HOLD) {
                    assert_eq!(tr, Transition::Up);
                    assert!(up_at.is_none());
                    up_at = Some(t);
                }
            }
            assert_eq!(h.handle_timeout(ms(t)), None, "at {t}");
            if let Some(seq) = h.poll_probe(ms(t)) {
                pending.push((t + 250, seq));
            }
            t += 10;
        }
        assert_eq!(up_at, Some(350));
        assert_eq!(h.probe_loss(), 0.0);
        assert_eq!(h.srtt(), Some(Duration::from_millis(250)));
    }

    #[test]
    fn stale_duplicate_and_unknown_acks_are_ignored() {
        let mut h = PathHealth::new(HealthConfig::default(), ms(0));
        let s0 = h.poll_probe(ms(0)).expect("due");
        assert_eq!(h.on_probe_ack(ms(10), s0, HOLD), None);
        // Duplicate of s0 must not count as the second answer.
        assert_eq!(h.on_probe_ack(ms(11), s0, HOLD), None);
        // Never-sent numbers.
        assert_eq!(h.on_probe_ack(ms(12), 7, HOLD), None);
        assert_eq!(h.on_probe_ack(ms(12), u32::MAX, HOLD), None);
        assert_eq!(h.state(), LinkState::Down);
        assert_eq!(h.srtt(), Some(Duration::from_millis(10)));
        // Probe answered after its slot was reused (32 probes later) is ignored.
        let old = h.poll_probe(ms(100)).expect("due");
        for i in 0..PROBE_WINDOW as u64 {
            h.poll_probe(ms(200 + 100 * i));
        }
        assert_eq!(h.on_probe_ack(ms(4000), old, HOLD), None);
        assert_eq!(h.state(), LinkState::Down);
    }

    #[test]
    fn hold_is_subtracted_and_bigger_hold_gives_no_sample() {
        let mut h = PathHealth::new(HealthConfig::default(), ms(0));
        let s = h.poll_probe(ms(0)).expect("due");
        h.on_probe_ack(ms(30), s, Duration::from_millis(12));
        assert_eq!(h.srtt(), Some(Duration::from_millis(18)));
        let s = h.poll_probe(ms(100)).expect("due");
        assert_eq!(
            h.on_probe_ack(ms(110), s, Duration::from_secs(5)),
            Some(Transition::Up)
        );
        assert_eq!(h.srtt(), Some(Duration::from_millis(18)));
    }

    #[test]
    fn rfc6298_smoothing() {
        let mut h = PathHealth::new(HealthConfig::default(), ms(0));
        let s = h.poll_probe(ms(0)).expect("due");
        h.on_probe_ack(ms(40), s, HOLD);
        assert_eq!(h.srtt(), Some(Duration::from_millis(40)));
        assert_eq!(h.rttvar(), Duration::from_millis(20));
        let s = h.poll_probe(ms(100)).expect("due");
        h.on_probe_ack(ms(120), s, HOLD);
        // rttvar = 3/4*20 + 1/4*20 = 20; srtt = 7/8*40 + 1/8*20 = 37.5
        assert_eq!(h.rttvar(), Duration::from_millis(20));
        assert_eq!(h.srtt(), Some(Duration::from_micros(37_500)));
    }

    #[test]
    fn probe_numbers_wrap() {
        let mut h = PathHealth::with_probe_seq(HealthConfig::default(), ms(0), u32::MAX - 1);
        assert_eq!(probe_answered(&mut h, 0, 5), None);
        assert_eq!(probe_answered(&mut h, 100, 5), Some(Transition::Up));
        let s = h.poll_probe(ms(200)).expect("due");
        assert_eq!(s, 0);
        assert_eq!(h.on_probe_ack(ms(205), s, HOLD), None);
        assert_eq!(h.probe_loss(), 0.0);
        assert_eq!(h.on_probe_ack(ms(206), u32::MAX, HOLD), None);
    }

    #[test]
    fn flapping_path_tracks_each_change() {
        let mut h = PathHealth::new(HealthConfig::default(), ms(0));
        // Alternate 1 s alive / 1 s dead for 10 s, RTT 10 ms, stepping 1 ms.
        let mut transitions = Vec::new();
        let mut pending: Vec<(u64, u32)> = Vec::new();
        for t in 0..10_000u64 {
            let alive = (t / 1000) % 2 == 0;
            pending.retain(|&(due, seq)| {
                if due == t {
                    if let Some(tr) = h.on_probe_ack(ms(t), seq, HOLD) {
                        transitions.push((t, tr));
                    }
                    false
                } else {
                    true
                }
            });
            if let Some(tr) = h.handle_timeout(ms(t)) {
                transitions.push((t, tr));
            }
            if let Some(seq) = h.poll_probe(ms(t)) {
                if alive && (t + 10) / 1000 == t / 1000 {
                    pending.push((t + 10, seq));
                }
            }
        }
        let expected: Vec<(u64, Transition)> = (0..5)
            .flat_map(|k| {
                let base = 2000 * k;
                // Up at the 2nd answered probe; last answer heard at base+910, down 300 later.
                vec![
                    (base + 110, Transition::Up),
                    (base + 1210, Transition::Down),
                ]
            })
            .collect();
        assert_eq!(transitions, expected);
    }

    proptest! {
        #[test]
        fn never_panics_and_state_matches_transitions(
            start in any::<u32>(),
            ops in proptest::collection::vec((0u8..5, any::<u32>(), 0u64..400, 0u64..200), 0..300),
        ) {
            let mut h = PathHealth::with_probe_seq(HealthConfig::default(), ms(0), start);
            let mut t = 0u64;
            let mut sent: Vec<u32> = Vec::new();
            for (op, x, dt, hold) in ops {
                t += dt;
                let now = ms(t);
                let before = h.state();
                let tr = match op {
                    0 => { if let Some(s) = h.poll_probe(now) { sent.push(s); } None }
                    1 => {
                        let seq = if sent.is_empty() { x } else { sent[x as usize % sent.len()] };
                        h.on_probe_ack(now, seq, Duration::from_millis(hold))
                    }
                    2 => h.on_peer_alive(now),
                    3 => h.on_io_error(now),
                    _ => h.handle_timeout(now),
                };
                match tr {
                    Some(Transition::Up) => prop_assert!(before == LinkState::Down && h.state() == LinkState::Up),
                    Some(Transition::Down) => prop_assert!(before == LinkState::Up && h.state() == LinkState::Down),
                    None => prop_assert_eq!(before, h.state()),
                }
                let l = h.probe_loss();
                prop_assert!((0.0..=1.0).contains(&l));
                prop_assert!(h.poll_timeout() >= ms(0));
            }
        }
    }
}
