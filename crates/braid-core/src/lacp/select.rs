//! Selection logic (802.1AX-2008 §5.4.14) for one bond: which aggregator each port
//! belongs in, which aggregator the bond uses, and the active-backup fallback.
//!
//! A bond is one logical link, so (as Linux bonding) only one aggregator carries traffic:
//! the one in use stays while it has a port, unless it has no LACP partner and another
//! one has; otherwise the one with the most ports wins, then the lowest port number.
//! Ports of the other aggregators are STANDBY: they wait, out of sync, so their partner
//! does not send on them either.

use super::pdu::{PortInfo, State};
use super::port::{ActorSystem, LagId, Port, RxState, Selected};
use super::PortId;

/// The aggregator a port's partner information puts it in (None: loopback, never
/// selected: the port is cabled to our own system, as Open vSwitch checks).
pub(super) fn lag_of(port: &Port, sys: &ActorSystem) -> Option<LagId> {
    let p: &PortInfo = &port.partner;
    if p.system == sys.system && p.system_priority == sys.system_priority {
        return None;
    }
    Some(LagId {
        system_priority: p.system_priority,
        system: p.system,
        key: p.key,
        individual: (!p.state.has(State::AGGREGATION)).then_some(p.port),
    })
}

/// What selection decided for the bond.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Decision {
    /// The aggregator in use.
    pub active: Option<LagId>,
    /// The port carrying traffic in active-backup fallback, when engaged.
    pub fallback: Option<PortId>,
}

/// Runs the selection logic over all ports. Returns whether any port's `selected`
/// changed.
pub(super) fn select(
    ports: &mut [Port],
    sys: &ActorSystem,
    fallback_ab: bool,
    decision: &mut Decision,
) -> bool {
    let before = *decision;
    let mut changed = false;
    // A port that is unselected and fully detached picks its aggregator.
    for port in ports.iter_mut() {
        if !port.enabled {
            set(port, Selected::Unselected, &mut changed);
            port.lag = None;
            continue;
        }
        if port.selected == Selected::Unselected && port.mux == super::port::MuxState::Detached {
            port.lag = lag_of(port, sys);
            if port.lag.is_some() {
                set(port, Selected::Standby, &mut changed);
            }
        }
    }
    // The aggregator in use.
    let candidate = |p: &Port| p.enabled && p.selected != Selected::Unselected;
    let count = |ports: &[Port], lag: LagId| {
        ports
            .iter()
            .filter(|p| candidate(p) && p.lag == Some(lag))
            .count()
    };
    let any_partnered = ports
        .iter()
        .any(|p| candidate(p) && p.lag.is_some_and(|l| l.has_partner()));
    let keep = decision
        .active
        .filter(|&a| count(ports, a) > 0 && (a.has_partner() || !any_partnered));
    decision.active = keep.or_else(|| {
        let mut best: Option<(bool, usize, u16, LagId)> = None;
        for p in ports.iter().filter(|p| candidate(p)) {
            let Some(lag) = p.lag else { continue };
            let key = (lag.has_partner(), count(ports, lag), p.number);
            let better = match best {
                None => true,
                Some((bp, bc, bn, _)) => {
                    (key.0, key.1) > (bp, bc) || ((key.0, key.1) == (bp, bc) && key.2 < bn)
                }
            };
            if better {
                best = Some((key.0, key.1, key.2, lag));
            }
        }
        best.map(|b| b.3)
    });
    // Active-backup fallback: a port that is up has heard no LACP partner for the whole
    // EXPIRED time, and no port hears one now or has just lost one (a port that comes
    // up and has never heard a partner does not end the fallback). One port carries
    // traffic; it keeps it while it stays up.
    let hears_lacp = |p: &Port| {
        p.enabled
            && (p.rx == RxState::Current
                || (p.rx == RxState::Expired && p.partner.system != [0; 6]))
    };
    let engaged = fallback_ab
        && ports
            .iter()
            .any(|p| p.enabled && p.rx == RxState::Defaulted)
        && !ports.iter().any(hears_lacp);
    // Only a port that has waited out EXPIRED carries fallback traffic (an EXPIRED port
    // is never distributing).
    let eligible = |p: &Port| p.enabled && p.rx == RxState::Defaulted && p.lag.is_some();
    decision.fallback = if engaged {
        let keep = decision
            .fallback
            .filter(|id| ports.iter().any(|p| p.id == *id && eligible(p)));
        keep.or_else(|| {
            ports
                .iter()
                .filter(|p| eligible(p))
                .min_by_key(|p| p.number)
                .map(|p| p.id)
        })
    } else {
        None
    };
    for port in ports.iter_mut().filter(|p| candidate(p)) {
        let in_use = port.lag.is_some() && port.lag == decision.active;
        let fallback_ok = decision.fallback.is_none_or(|id| id == port.id);
        let s = if in_use && fallback_ok {
            Selected::Selected
        } else {
            Selected::Standby
        };
        set(port, s, &mut changed);
    }
    changed || before != *decision
}

fn set(port: &mut Port, s: Selected, changed: &mut bool) {
    if port.selected != s {
        port.selected = s;
        *changed = true;
    }
}
