//! One port's state machines (802.1AX-2008 §5.4.12 to §5.4.16): Receive, Periodic
//! Transmission, Mux (coupled control) and the Transmit limit. Selection across ports is
//! in `select.rs`; this file only moves one port through its states.

use core::time::Duration;

use super::pdu::{Lacpdu, Marker, PortInfo, State};
use super::{PortConfig, PortId};
use crate::Instant;

/// Periodic transmission with a short-timeout partner (802.1AX Fast_Periodic_Time).
pub(super) const FAST_PERIODIC: Duration = Duration::from_secs(1);
/// Periodic transmission with a long-timeout partner (Slow_Periodic_Time).
pub(super) const SLOW_PERIODIC: Duration = Duration::from_secs(30);
/// current_while with our short timeout: 3 fast intervals (Short_Timeout_Time).
pub(super) const SHORT_TIMEOUT: Duration = Duration::from_secs(3);
/// current_while with our long timeout: 3 slow intervals (Long_Timeout_Time).
pub(super) const LONG_TIMEOUT: Duration = Duration::from_secs(90);
/// wait_while: how long a port waits before attaching (Aggregate_Wait_Time).
pub(super) const AGGREGATE_WAIT: Duration = Duration::from_secs(2);
/// At most this many LACPDUs in any one fast periodic interval (§5.4.16).
pub(super) const TX_LIMIT: usize = 3;

/// Receive machine state (802.1AX §5.4.12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxState {
    /// The link is down.
    PortDisabled,
    /// Nothing heard for the timeout: the partner's information is still used, it is
    /// asked for news at the fast rate.
    Expired,
    /// No partner heard: administrative defaults in use.
    Defaulted,
    /// The partner's information is up to date.
    Current,
}

impl RxState {
    /// Lower-case name, as `ovs-appctl lacp/show` prints it.
    pub fn name(self) -> &'static str {
        match self {
            RxState::PortDisabled => "disabled",
            RxState::Expired => "expired",
            RxState::Defaulted => "defaulted",
            RxState::Current => "current",
        }
    }
}

/// Mux machine state (802.1AX §5.4.15, coupled control).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MuxState {
    /// Not attached to an aggregator.
    Detached,
    /// Selected, waiting for wait_while and for the other ports of the aggregator.
    Waiting,
    /// Attached, in sync, not yet collecting or distributing.
    Attached,
    /// Collecting and distributing.
    CollectingDistributing,
}

impl MuxState {
    /// Lower-case name for status output.
    pub fn name(self) -> &'static str {
        match self {
            MuxState::Detached => "detached",
            MuxState::Waiting => "waiting",
            MuxState::Attached => "attached",
            MuxState::CollectingDistributing => "collecting_distributing",
        }
    }
}

/// The Selected variable (802.1AX §5.4.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selected {
    /// No aggregator chosen (or the choice was invalidated).
    Unselected,
    /// Attached (or attaching) to the aggregator in use.
    Selected,
    /// Its aggregator is not the one in use: it waits.
    Standby,
}

impl Selected {
    /// Lower-case name for status output.
    pub fn name(self) -> &'static str {
        match self {
            Selected::Unselected => "unselected",
            Selected::Selected => "selected",
            Selected::Standby => "standby",
        }
    }
}

/// Which aggregator a port belongs in: the partner's side of its LAG id (ours is the
/// same for every port). `individual` holds the partner's port number when the partner
/// says the link cannot be aggregated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LagId {
    pub system_priority: u16,
    pub system: [u8; 6],
    pub key: u16,
    pub individual: Option<u16>,
}

impl LagId {
    pub(super) fn has_partner(&self) -> bool {
        self.system != [0; 6]
    }
}

/// Per-port counters (802.1AX §7.3.3 names in brackets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Counters {
    /// LACPDUs received [LACPDUsRx].
    pub lacpdus_rx: u64,
    /// LACPDUs sent [LACPDUsTx].
    pub lacpdus_tx: u64,
    /// Marker PDUs received [MarkerPDUsRx].
    pub markers_rx: u64,
    /// Marker responses sent [MarkerResponsePDUsTx].
    pub marker_responses_tx: u64,
    /// Frames refused [IllegalRx + UnknownRx].
    pub bad_rx: u64,
}

/// What the actor says about itself on every port (from the configuration).
#[derive(Clone, Copy, Debug)]
pub(super) struct ActorSystem {
    pub system: [u8; 6],
    pub system_priority: u16,
    pub key: u16,
    pub active: bool,
    pub fast: bool,
}

#[derive(Debug)]
pub(super) struct Port {
    pub id: PortId,
    pub mac: [u8; 6],
    pub number: u16,
    pub priority: u16,
    pub enabled: bool,
    pub rx: RxState,
    current_while: Option<Instant>,
    pub partner: PortInfo,
    pub actor_state: State,
    pub selected: Selected,
    pub lag: Option<LagId>,
    pub mux: MuxState,
    wait_while: Option<Instant>,
    ready_n: bool,
    periodic_next: Option<Instant>,
    periodic_fast: bool,
    pub ntt: bool,
    tx_times: [Option<Instant>; TX_LIMIT],
    pub marker_reply: Option<Marker>,
    /// Whether the last events told the driver this port distributes.
    pub reported_distributing: bool,
    pub counters: Counters,
}

impl Port {
    /// A new port, through INITIALIZE (and on to EXPIRED when its link is up).
    pub(super) fn new(
        id: PortId,
        config: PortConfig,
        sys: &ActorSystem,
        admin: PortInfo,
        link_up: bool,
        now: Instant,
    ) -> Self {
        let mut port = Port {
            id,
            mac: config.mac,
            number: config.number,
            priority: config.priority,
            enabled: false,
            rx: RxState::PortDisabled,
            current_while: None,
            partner: admin,
            actor_state: State(0),
            selected: Selected::Unselected,
            lag: None,
            mux: MuxState::Detached,
            wait_while: None,
            ready_n: false,
            periodic_next: None,
            periodic_fast: true,
            // BEGIN enters the Mux machine's DETACHED, which sets NTT.
            ntt: true,
            tx_times: [None; TX_LIMIT],
            marker_reply: None,
            reported_distributing: false,
            counters: Counters::default(),
        };
        port.actor_state = State(0)
            .with(State::ACTIVITY, sys.active)
            .with(State::TIMEOUT, sys.fast)
            .with(State::AGGREGATION, true)
            .with(State::DEFAULTED, true);
        if link_up {
            port.set_link(true, sys, now);
        }
        port
    }

    /// The actor information this port sends.
    pub(super) fn actor_info(&self, sys: &ActorSystem) -> PortInfo {
        PortInfo {
            system_priority: sys.system_priority,
            system: sys.system,
            key: sys.key,
            port_priority: self.priority,
            port: self.number,
            state: self.actor_state,
        }
    }

    /// Link up: PORT_DISABLED → EXPIRED. Link down: → PORT_DISABLED, and the port leaves
    /// its aggregator at once.
    pub(super) fn set_link(&mut self, up: bool, sys: &ActorSystem, now: Instant) {
        if up == self.enabled {
            return;
        }
        self.enabled = up;
        self.partner.state = self.partner.state.with(State::SYNC, false);
        if up {
            self.enter_expired(sys, now);
        } else {
            self.rx = RxState::PortDisabled;
            self.current_while = None;
            self.actor_state = self.actor_state.with(State::EXPIRED, false);
            self.selected = Selected::Unselected;
            self.periodic_next = None;
            self.ntt = false;
            self.marker_reply = None;
        }
    }

    fn enter_expired(&mut self, _sys: &ActorSystem, now: Instant) {
        self.rx = RxState::Expired;
        self.partner.state = self
            .partner
            .state
            .with(State::SYNC, false)
            .with(State::TIMEOUT, true);
        self.current_while = Some(now + SHORT_TIMEOUT);
        self.actor_state = self.actor_state.with(State::EXPIRED, true);
    }

    /// A valid LACPDU arrived: update_Selected, update_NTT, recordPDU, → CURRENT.
    /// Returns whether the partner's identity (anything but its state) changed.
    pub(super) fn on_lacpdu(&mut self, pdu: &Lacpdu, sys: &ActorSystem, now: Instant) -> bool {
        self.counters.lacpdus_rx += 1;
        let old = self.partner;
        let a = pdu.actor;
        // update_Selected (§5.4.9): a different partner, or one that changed its mind
        // about aggregating, means a new aggregator.
        let agg = State::AGGREGATION;
        if identity(&a) != identity(&old) || a.state.has(agg) != old.state.has(agg) {
            self.selected = Selected::Unselected;
        }
        // update_NTT: the partner's view of us is out of date.
        let me = self.actor_info(sys);
        let watched = State::ACTIVITY | State::TIMEOUT | State::SYNC | State::AGGREGATION;
        if identity(&pdu.partner) != identity(&me)
            || (pdu.partner.state.0 ^ me.state.0) & watched != 0
        {
            self.ntt = true;
        }
        // recordPDU.
        let matched = identity(&pdu.partner) == identity(&me)
            && pdu.partner.state.has(agg) == me.state.has(agg);
        let active = a.state.has(State::ACTIVITY)
            || (me.state.has(State::ACTIVITY) && pdu.partner.state.has(State::ACTIVITY));
        let in_sync =
            a.state.has(State::SYNC) && active && (matched || !a.state.has(State::AGGREGATION));
        self.partner = a;
        self.partner.state = a.state.with(State::SYNC, in_sync);
        self.actor_state = self
            .actor_state
            .with(State::DEFAULTED, false)
            .with(State::EXPIRED, false);
        self.rx = RxState::Current;
        let timeout = if sys.fast {
            SHORT_TIMEOUT
        } else {
            LONG_TIMEOUT
        };
        self.current_while = Some(now + timeout);
        identity(&old) != identity(&a)
    }

    /// current_while ran out: CURRENT → EXPIRED, EXPIRED → DEFAULTED. Returns true on
    /// entering DEFAULTED.
    pub(super) fn rx_timers(&mut self, sys: &ActorSystem, admin: PortInfo, now: Instant) -> bool {
        let Some(at) = self.current_while else {
            return false;
        };
        if now < at || !self.enabled {
            return false;
        }
        match self.rx {
            RxState::Current => {
                self.enter_expired(sys, now);
                false
            }
            RxState::Expired => {
                // update_Default_Selected, recordDefault.
                if identity(&admin) != identity(&self.partner)
                    || admin.state.has(State::AGGREGATION)
                        != self.partner.state.has(State::AGGREGATION)
                {
                    self.selected = Selected::Unselected;
                }
                self.partner = admin;
                self.actor_state = self
                    .actor_state
                    .with(State::DEFAULTED, true)
                    .with(State::EXPIRED, false);
                self.rx = RxState::Defaulted;
                self.current_while = None;
                true
            }
            RxState::Defaulted | RxState::PortDisabled => {
                self.current_while = None;
                false
            }
        }
    }

    /// wait_while ran out: Ready_N.
    pub(super) fn wait_timer(&mut self, now: Instant) {
        if self.wait_while.is_some_and(|t| now >= t) {
            self.wait_while = None;
            self.ready_n = true;
        }
    }

    /// Whether this port is waiting and done waiting (Ready_N).
    pub(super) fn ready_n(&self) -> bool {
        self.mux == MuxState::Waiting && self.ready_n
    }

    fn detach(&mut self) {
        self.mux = MuxState::Detached;
        self.wait_while = None;
        self.ready_n = false;
        self.actor_state = self
            .actor_state
            .with(State::SYNC | State::COLLECTING | State::DISTRIBUTING, false);
        self.ntt = true;
    }

    /// One step of the Mux machine. `ready`: every port waiting for this port's
    /// aggregator is done waiting. `partner_sync`: the partner is in sync (or the
    /// fallback stands in for it). Returns whether the state changed.
    pub(super) fn mux_step(&mut self, ready: bool, partner_sync: bool, now: Instant) -> bool {
        let before = (self.mux, self.actor_state);
        match self.mux {
            MuxState::Detached => {
                if self.selected != Selected::Unselected {
                    self.mux = MuxState::Waiting;
                    self.wait_while = Some(now + AGGREGATE_WAIT);
                    self.ready_n = false;
                }
            }
            MuxState::Waiting => {
                if self.selected == Selected::Unselected {
                    self.detach();
                } else if self.selected == Selected::Selected && ready {
                    self.mux = MuxState::Attached;
                    self.wait_while = None;
                    self.ready_n = false;
                    self.actor_state = self
                        .actor_state
                        .with(State::SYNC, true)
                        .with(State::COLLECTING | State::DISTRIBUTING, false);
                    self.ntt = true;
                }
            }
            MuxState::Attached => {
                if self.selected != Selected::Selected {
                    self.detach();
                } else if partner_sync {
                    self.mux = MuxState::CollectingDistributing;
                    self.actor_state = self
                        .actor_state
                        .with(State::COLLECTING | State::DISTRIBUTING, true);
                    self.ntt = true;
                }
            }
            MuxState::CollectingDistributing => {
                if self.selected != Selected::Selected || !partner_sync {
                    self.mux = MuxState::Attached;
                    self.actor_state = self
                        .actor_state
                        .with(State::COLLECTING | State::DISTRIBUTING, false);
                    self.ntt = true;
                }
            }
        }
        before != (self.mux, self.actor_state)
    }

    /// Periodic Transmission machine: sets NTT when the periodic timer runs out.
    pub(super) fn periodic(&mut self, sys: &ActorSystem, now: Instant) {
        let partner_active = self.partner.state.has(State::ACTIVITY);
        if !self.enabled || (!sys.active && !partner_active) {
            self.periodic_next = None; // NO_PERIODIC
            return;
        }
        let fast = self.partner.state.has(State::TIMEOUT);
        match self.periodic_next {
            // NO_PERIODIC → FAST_PERIODIC.
            None => {
                self.periodic_next = Some(now + FAST_PERIODIC);
                self.periodic_fast = true;
            }
            // SLOW_PERIODIC with a partner now asking for short timeouts: send now.
            Some(_) if fast && !self.periodic_fast => {
                self.ntt = true;
                self.periodic_next = Some(now + FAST_PERIODIC);
                self.periodic_fast = true;
            }
            Some(at) if now >= at => {
                self.ntt = true;
                self.periodic_fast = fast;
                self.periodic_next = Some(now + if fast { FAST_PERIODIC } else { SLOW_PERIODIC });
            }
            Some(_) => {}
        }
    }

    /// Whether this port may send an LACPDU at all (OVS's `slave_may_tx`: an actor that
    /// is passive speaks only to an active partner it has heard).
    pub(super) fn may_tx(&self, sys: &ActorSystem) -> bool {
        self.enabled && (sys.active || self.partner.state.has(State::ACTIVITY))
    }

    /// When the transmit limit next allows an LACPDU (`now` or earlier: it does).
    pub(super) fn tx_allowed_at(&self) -> Instant {
        // tx_times is ordered oldest first once full.
        match self.tx_times.first().copied().flatten() {
            Some(oldest) if self.tx_times.iter().all(Option::is_some) => oldest + FAST_PERIODIC,
            _ => Instant::ZERO,
        }
    }

    /// Records an LACPDU sent now: NTT cleared, the transmit window moved.
    pub(super) fn sent_lacpdu(&mut self, now: Instant) {
        self.ntt = false;
        self.counters.lacpdus_tx += 1;
        self.tx_times.rotate_left(1);
        if let Some(last) = self.tx_times.last_mut() {
            *last = Some(now);
        }
    }

    /// The earliest time one of this port's timers runs out, if any.
    pub(super) fn next_timer(&self, sys: &ActorSystem) -> Option<Instant> {
        let mut t = [self.current_while, self.wait_while, self.periodic_next]
            .into_iter()
            .flatten()
            .min();
        if self.enabled && (self.marker_reply.is_some() || (self.ntt && self.may_tx(sys))) {
            let tx = if self.marker_reply.is_some() {
                Instant::ZERO
            } else {
                self.tx_allowed_at()
            };
            t = Some(t.map_or(tx, |t| t.min(tx)));
        }
        t
    }
}

/// The fields of a port's information that name it (all but the state).
fn identity(p: &PortInfo) -> (u16, [u8; 6], u16, u16, u16) {
    (p.system_priority, p.system, p.key, p.port_priority, p.port)
}
