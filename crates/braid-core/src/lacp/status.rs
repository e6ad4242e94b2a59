//! What the LACP actor reports about itself, for `braid status` (the fields of
//! `ovs-appctl lacp/show`, so the two can be compared).

use super::pdu::PortInfo;
use super::Lacp;

/// The actor of a bond.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LacpStatus {
    /// System id, `aa:bb:cc:dd:ee:ff`.
    pub system: String,
    /// System priority.
    pub system_priority: u16,
    /// Operational key.
    pub key: u16,
    /// "active" or "passive".
    pub mode: &'static str,
    /// "fast" or "slow".
    pub rate: &'static str,
    /// Ports needed before the aggregator carries traffic.
    pub min_links: u16,
    /// Whether active-backup fallback is configured.
    pub fallback_ab: bool,
    /// Whether it is engaged now.
    pub fallback_engaged: bool,
    /// Whether the aggregator in use carries traffic.
    pub aggregator_up: bool,
    /// Events dropped because nobody polled them.
    pub events_dropped: u64,
    /// The ports, in the order they were added.
    pub ports: Vec<PortStatus>,
}

/// One port.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PortStatus {
    /// Port id.
    pub id: u16,
    /// Port number in LACPDUs.
    pub number: u16,
    /// Carrier.
    pub link_up: bool,
    /// Receive machine: "current", "expired", "defaulted" or "disabled".
    pub rx_state: &'static str,
    /// Mux machine: "detached", "waiting", "attached" or "collecting_distributing".
    pub mux_state: &'static str,
    /// Selection: "selected", "standby" or "unselected".
    pub selected: &'static str,
    /// Whether traffic is sent on it.
    pub distributing: bool,
    /// What it announces.
    pub actor: InfoStatus,
    /// What it knows of its partner.
    pub partner: InfoStatus,
    /// LACPDUs received.
    pub lacpdus_rx: u64,
    /// LACPDUs sent.
    pub lacpdus_tx: u64,
    /// Marker PDUs received.
    pub markers_rx: u64,
    /// Marker responses sent.
    pub marker_responses_tx: u64,
    /// Frames refused.
    pub bad_rx: u64,
}

/// Actor or partner information.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct InfoStatus {
    /// System id.
    pub system: String,
    /// System priority.
    pub system_priority: u16,
    /// Key.
    pub key: u16,
    /// Port priority.
    pub port_priority: u16,
    /// Port number.
    pub port: u16,
    /// State byte.
    pub state: u8,
    /// Its set bits by name (`activity`, `timeout`, `aggregation`, `synchronized`,
    /// `collecting`, `distributing`, `defaulted`, `expired`).
    pub state_names: Vec<&'static str>,
}

/// `aa:bb:cc:dd:ee:ff`.
pub(crate) fn mac_string(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

fn info(p: &PortInfo) -> InfoStatus {
    InfoStatus {
        system: mac_string(p.system),
        system_priority: p.system_priority,
        key: p.key,
        port_priority: p.port_priority,
        port: p.port,
        state: p.state.0,
        state_names: p.state.names().collect(),
    }
}

pub(super) fn build(lacp: &Lacp) -> LacpStatus {
    let sys = &lacp.sys;
    LacpStatus {
        system: mac_string(sys.system),
        system_priority: sys.system_priority,
        key: sys.key,
        mode: if sys.active { "active" } else { "passive" },
        rate: if sys.fast { "fast" } else { "slow" },
        min_links: lacp.min_links,
        fallback_ab: lacp.fallback_ab,
        fallback_engaged: lacp.fallback_engaged(),
        aggregator_up: lacp.aggregator_up(),
        events_dropped: lacp.events_dropped,
        ports: lacp
            .ports
            .iter()
            .map(|p| PortStatus {
                id: p.id.0,
                number: p.number,
                link_up: p.enabled,
                rx_state: p.rx.name(),
                mux_state: p.mux.name(),
                selected: p.selected.name(),
                distributing: lacp.distributes(p),
                actor: info(&p.actor_info(sys)),
                partner: info(&p.partner),
                lacpdus_rx: p.counters.lacpdus_rx,
                lacpdus_tx: p.counters.lacpdus_tx,
                markers_rx: p.counters.markers_rx,
                marker_responses_tx: p.counters.marker_responses_tx,
                bad_rx: p.counters.bad_rx,
            })
            .collect(),
    }
}
