//! A user-space LACP actor (IEEE 802.1AX, formerly 802.3ad), sans-IO.
//!
//! One [`Lacp`] runs the Link Aggregation Control Protocol for one bond of Ethernet
//! ports. The driver hands it the ports ([`Lacp::add_port`]), their carrier
//! ([`Lacp::set_link`]) and every Slow Protocols frame (EtherType 0x8809) received on
//! them ([`Lacp::handle_frame`]); it sends what [`Lacp::poll_transmit`] gives, calls
//! [`Lacp::handle_timeout`] at [`Lacp::poll_timeout`], and sends traffic only on
//! [`Lacp::distributing_ports`]. Nothing here reads a clock or allocates per frame.
//!
//! * Receive machine: CURRENT, EXPIRED, DEFAULTED; the partner expires after three of
//!   its periodic intervals (3 s when we ask for the fast rate, 90 s for the slow).
//! * Periodic transmission every 1 s or 30 s as the *partner's* Timeout bit asks; none
//!   when both ends are passive. At most 3 LACPDUs per second per port.
//! * Mux machine (coupled control): DETACHED, WAITING (wait_while 2 s), ATTACHED
//!   (Sync), COLLECTING_DISTRIBUTING only while the partner is in sync.
//! * Selection: ports whose partners share system and key form one aggregator; the
//!   bond uses one aggregator at a time, and only when it has `min_links` ports
//!   collecting and distributing.
//! * Fallback to active-backup (Open vSwitch's `lacp-fallback-ab`): when no port has
//!   heard an LACP partner for the EXPIRED time, one port carries traffic.
//! * Marker Information is answered with a Marker Response, as Linux does.
//!
//! See `docs/lacp.md` for the timers, the state bits and the deliberate differences
//! from the standard.

mod pdu;
mod port;
mod select;
mod status;
pub(crate) use status::mac_string;

#[cfg(test)]
mod pdu_tests;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use core::fmt;

pub use pdu::{
    emit_lacpdu, emit_marker, parse, FrameError, Lacpdu, Marker, MarkerKind, PortInfo, SlowPdu,
    State, FRAME_LEN, MAX_FRAME_LEN, PDU_LEN, SLOW_PROTOCOLS_ETHERTYPE, SLOW_PROTOCOLS_MAC,
};
pub use port::{MuxState, RxState, Selected};
pub use status::{InfoStatus, LacpStatus, PortStatus};

use port::{ActorSystem, Port};
use select::Decision;

use crate::Instant;

/// Identifies one port of an [`Lacp`]; assigned by [`Lacp::add_port`], never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PortId(pub u16);

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "port#{}", self.0)
    }
}

/// LACP rate: how often we ask the partner to send (our Timeout bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rate {
    /// Every second; the partner expires after 3 s.
    #[default]
    Fast,
    /// Every 30 s; the partner expires after 90 s.
    Slow,
}

/// LACP activity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Sends LACPDUs unprompted.
    #[default]
    Active,
    /// Speaks only to an active partner.
    Passive,
}

/// The bond's LACP settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LacpConfig {
    /// System id: the bond's MAC address.
    pub system_mac: [u8; 6],
    /// System priority (lower wins; Linux's default 65535).
    pub system_priority: u16,
    /// The operational key every port announces.
    pub key: u16,
    /// Fast or slow rate.
    pub rate: Rate,
    /// Active or passive.
    pub mode: Mode,
    /// Ports that must be collecting and distributing before the aggregator carries
    /// traffic (0 and 1 mean one).
    pub min_links: u16,
    /// Fall back to active-backup when no partner speaks LACP.
    pub fallback_ab: bool,
}

impl Default for LacpConfig {
    fn default() -> Self {
        Self {
            system_mac: [0x02, 0, 0, 0, 0, 1],
            system_priority: 65535,
            key: 1,
            rate: Rate::Fast,
            mode: Mode::Active,
            min_links: 1,
            fallback_ab: false,
        }
    }
}

/// One member port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// The port's own MAC address: the source of its LACPDUs.
    pub mac: [u8; 6],
    /// Port number announced in LACPDUs (not 0, unique within the bond).
    pub number: u16,
    /// Port priority (lower wins; Linux's default 255).
    pub priority: u16,
}

/// Something the driver may want to know or log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Traffic may now be sent on this port.
    Distributing(PortId),
    /// Traffic must no longer be sent on this port.
    NotDistributing(PortId),
    /// A port heard a new partner (or its partner changed system, key or port).
    PartnerChanged {
        /// The port.
        port: PortId,
        /// The partner's information from its LACPDU.
        partner: PortInfo,
    },
    /// A port's partner was silent for its timeout twice over: the port uses the
    /// default partner (none).
    PartnerDefaulted(PortId),
    /// No partner speaks LACP: active-backup on this port.
    FallbackEngaged(PortId),
    /// A partner speaks LACP again (or no port is up): fallback over.
    FallbackDisengaged,
}

/// Why an input was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LacpError {
    /// The frame is not a valid LACPDU or Marker PDU.
    Frame(FrameError),
    /// No such port.
    UnknownPort(PortId),
    /// The port's link is down: frames on it are not read.
    PortDown(PortId),
    /// Port number 0 is not allowed.
    ZeroPortNumber,
    /// Another port already has this number.
    DuplicatePortNumber(u16),
    /// Every port id has been used.
    TooManyPorts,
}

impl fmt::Display for LacpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LacpError::Frame(e) => e.fmt(f),
            LacpError::UnknownPort(p) => write!(f, "no LACP port {p}"),
            LacpError::PortDown(p) => write!(f, "LACP {p} is down"),
            LacpError::ZeroPortNumber => write!(f, "LACP port number 0 is not allowed"),
            LacpError::DuplicatePortNumber(n) => write!(f, "LACP port number {n} is used twice"),
            LacpError::TooManyPorts => write!(f, "no LACP port ids left"),
        }
    }
}

impl std::error::Error for LacpError {}

impl From<FrameError> for LacpError {
    fn from(e: FrameError) -> Self {
        LacpError::Frame(e)
    }
}

/// Events kept for [`Lacp::poll_event`] before the oldest are dropped.
const EVENT_QUEUE: usize = 256;

/// The LACP actor of one bond. See the module documentation.
#[derive(Debug)]
pub struct Lacp {
    sys: ActorSystem,
    min_links: u16,
    fallback_ab: bool,
    ports: Vec<Port>,
    next_id: u16,
    decision: Decision,
    fallback_reported: Option<PortId>,
    tx_next: usize,
    events: VecDeque<Event>,
    events_dropped: u64,
}

impl Lacp {
    /// An actor with no ports.
    pub fn new(config: LacpConfig) -> Self {
        Self {
            sys: ActorSystem {
                system: config.system_mac,
                system_priority: config.system_priority,
                key: config.key,
                active: config.mode == Mode::Active,
                fast: config.rate == Rate::Fast,
            },
            min_links: config.min_links.max(1),
            fallback_ab: config.fallback_ab,
            ports: Vec::new(),
            next_id: 0,
            decision: Decision::default(),
            fallback_reported: None,
            tx_next: 0,
            events: VecDeque::with_capacity(EVENT_QUEUE),
            events_dropped: 0,
        }
    }

    /// The default partner (Partner_Admin values): nobody, aggregatable, asking for our
    /// own rate (so an actor with no partner keeps polling at its configured rate).
    fn admin_partner(&self) -> PortInfo {
        PortInfo {
            state: State(State::AGGREGATION).with(State::TIMEOUT, self.sys.fast),
            ..PortInfo::default()
        }
    }

    /// Adds a member port; its link is `link_up`.
    pub fn add_port(
        &mut self,
        now: Instant,
        config: PortConfig,
        link_up: bool,
    ) -> Result<PortId, LacpError> {
        if config.number == 0 {
            return Err(LacpError::ZeroPortNumber);
        }
        if self.ports.iter().any(|p| p.number == config.number) {
            return Err(LacpError::DuplicatePortNumber(config.number));
        }
        let id = PortId(self.next_id);
        self.next_id = self.next_id.checked_add(1).ok_or(LacpError::TooManyPorts)?;
        let admin = self.admin_partner();
        self.ports
            .push(Port::new(id, config, &self.sys, admin, link_up, now));
        self.run(now);
        Ok(id)
    }

    /// Removes a port (it stops distributing at once).
    pub fn remove_port(&mut self, now: Instant, port: PortId) -> Result<(), LacpError> {
        let i = self.index(port)?;
        let removed = self.ports.remove(i);
        if removed.reported_distributing {
            self.push(Event::NotDistributing(port));
        }
        self.run(now);
        Ok(())
    }

    /// The port's carrier changed. Down: the port leaves its aggregator at once.
    pub fn set_link(&mut self, now: Instant, port: PortId, up: bool) -> Result<(), LacpError> {
        let i = self.index(port)?;
        let sys = self.sys;
        if let Some(p) = self.ports.get_mut(i) {
            p.set_link(up, &sys, now);
        }
        self.run(now);
        Ok(())
    }

    /// A Slow Protocols frame (EtherType 0x8809, the whole Ethernet frame) received on
    /// `port`. A refused frame is counted on the port and changes nothing else.
    pub fn handle_frame(
        &mut self,
        now: Instant,
        port: PortId,
        frame: &[u8],
    ) -> Result<(), LacpError> {
        let i = self.index(port)?;
        let sys = self.sys;
        let Some(p) = self.ports.get_mut(i) else {
            return Err(LacpError::UnknownPort(port));
        };
        if !p.enabled {
            return Err(LacpError::PortDown(port));
        }
        let pdu = match pdu::parse(frame) {
            Ok(pdu) => pdu,
            Err(e) => {
                p.counters.bad_rx += 1;
                return Err(e.into());
            }
        };
        match pdu {
            SlowPdu::Lacp(lacpdu) => {
                if p.on_lacpdu(&lacpdu, &sys, now) {
                    let partner = p.partner;
                    self.push(Event::PartnerChanged { port, partner });
                }
                self.run(now);
            }
            SlowPdu::Marker(marker) => {
                p.counters.markers_rx += 1;
                if marker.kind == MarkerKind::Information {
                    // Answered with the requester's own fields, as Linux does (a
                    // second request before the answer went out replaces the first).
                    p.marker_reply = Some(Marker {
                        kind: MarkerKind::Response,
                        ..marker
                    });
                }
            }
        }
        Ok(())
    }

    /// The next frame to send, written into `buf`: the port to send it on and its
    /// length. Call until `None` after every input and timeout.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8; FRAME_LEN],
    ) -> Option<(PortId, usize)> {
        self.run(now);
        let n = self.ports.len();
        for k in 0..n {
            let i = (self.tx_next + k) % n;
            let Some(p) = self.ports.get_mut(i) else {
                continue;
            };
            if !p.enabled {
                continue;
            }
            if let Some(marker) = p.marker_reply.take() {
                pdu::emit_marker(p.mac, &marker, buf);
                p.counters.marker_responses_tx += 1;
                self.tx_next = (i + 1) % n;
                return Some((p.id, FRAME_LEN));
            }
            if p.ntt && p.may_tx(&self.sys) && now >= p.tx_allowed_at() {
                let lacpdu = Lacpdu {
                    actor: p.actor_info(&self.sys),
                    partner: p.partner,
                    collector_max_delay: 0,
                };
                pdu::emit_lacpdu(p.mac, &lacpdu, buf);
                p.sent_lacpdu(now);
                self.tx_next = (i + 1) % n;
                return Some((p.id, FRAME_LEN));
            }
        }
        None
    }

    /// When [`Lacp::handle_timeout`] (or [`Lacp::poll_transmit`]) next has work; a time
    /// at or before now means at once.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ports
            .iter()
            .filter_map(|p| p.next_timer(&self.sys))
            .min()
    }

    /// Runs the timers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.run(now);
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The ports traffic may be sent on now.
    pub fn distributing_ports(&self) -> impl Iterator<Item = PortId> + '_ {
        self.ports
            .iter()
            .filter(|p| self.distributes(p))
            .map(|p| p.id)
    }

    /// A port's actor state bits, as its next LACPDU will carry them.
    pub fn actor_state(&self, port: PortId) -> Option<State> {
        self.ports
            .iter()
            .find(|p| p.id == port)
            .map(|p| p.actor_state)
    }

    /// What a port knows of its partner (the defaults when it has none).
    pub fn partner(&self, port: PortId) -> Option<PortInfo> {
        self.ports.iter().find(|p| p.id == port).map(|p| p.partner)
    }

    /// Whether active-backup fallback is engaged.
    pub fn fallback_engaged(&self) -> bool {
        self.decision.fallback.is_some()
    }

    /// Whether the aggregator in use has enough ports to carry traffic (`min_links`).
    pub fn aggregator_up(&self) -> bool {
        if self.decision.fallback.is_some() {
            return true;
        }
        let active = self.decision.active;
        let n = self
            .ports
            .iter()
            .filter(|p| {
                p.enabled
                    && p.mux == MuxState::CollectingDistributing
                    && p.lag.is_some()
                    && p.lag == active
            })
            .count();
        n >= usize::from(self.min_links)
    }

    /// Everything `braid status` shows.
    pub fn status(&self) -> LacpStatus {
        status::build(self)
    }

    /// Events dropped because nobody polled them.
    pub fn events_dropped(&self) -> u64 {
        self.events_dropped
    }

    fn distributes(&self, p: &Port) -> bool {
        p.enabled
            && p.mux == MuxState::CollectingDistributing
            && p.lag.is_some()
            && p.lag == self.decision.active
            && self.decision.fallback.is_none_or(|f| f == p.id)
            && self.aggregator_up()
    }

    fn index(&self, port: PortId) -> Result<usize, LacpError> {
        self.ports
            .iter()
            .position(|p| p.id == port)
            .ok_or(LacpError::UnknownPort(port))
    }

    fn push(&mut self, e: Event) {
        if self.events.len() >= EVENT_QUEUE {
            self.events.pop_front();
            self.events_dropped += 1;
        }
        self.events.push_back(e);
    }

    /// Runs every machine until nothing changes, then reports what the driver must know.
    fn run(&mut self, now: Instant) {
        let sys = self.sys;
        let admin = self.admin_partner();
        for i in 0..self.ports.len() {
            let Some(p) = self.ports.get_mut(i) else {
                continue;
            };
            p.wait_timer(now);
            if p.rx_timers(&sys, admin, now) {
                let id = p.id;
                self.push(Event::PartnerDefaulted(id));
            }
        }
        // Each round changes something or ends the loop; a port passes through at most
        // four mux states per selection, so this bound is never reached in practice.
        let bound = 8 + 8 * self.ports.len();
        for _ in 0..bound {
            let mut changed =
                select::select(&mut self.ports, &sys, self.fallback_ab, &mut self.decision);
            for i in 0..self.ports.len() {
                let Some(p) = self.ports.get(i) else {
                    continue;
                };
                let ready = self.ports.iter().all(|q| {
                    q.lag != p.lag
                        || q.selected != Selected::Selected
                        || q.mux != MuxState::Waiting
                        || q.ready_n()
                });
                let sync = p.partner.state.has(State::SYNC) || self.decision.fallback == Some(p.id);
                if let Some(p) = self.ports.get_mut(i) {
                    changed |= p.mux_step(ready, sync, now);
                }
            }
            if !changed {
                break;
            }
        }
        for p in &mut self.ports {
            p.periodic(&sys, now);
        }
        self.report();
    }

    fn report(&mut self) {
        let fallback = self.decision.fallback;
        if fallback != self.fallback_reported {
            self.fallback_reported = fallback;
            self.push(match fallback {
                Some(p) => Event::FallbackEngaged(p),
                None => Event::FallbackDisengaged,
            });
        }
        for i in 0..self.ports.len() {
            let Some(p) = self.ports.get(i) else {
                continue;
            };
            let now_dist = self.distributes(p);
            if now_dist != p.reported_distributing {
                let id = p.id;
                if let Some(p) = self.ports.get_mut(i) {
                    p.reported_distributing = now_dist;
                }
                self.push(if now_dist {
                    Event::Distributing(id)
                } else {
                    Event::NotDistributing(id)
                });
            }
        }
    }
}
