//! The classifier: filters by prefix, protocol, port and TOS in priority order; the first
//! match wins; otherwise the default class.
//!
//! STUB: contract only.

use super::spec::{ClassId, FilterSpec};

/// Filters sorted for matching.
#[derive(Clone, Debug, Default)]
pub struct Classifier {
    _private: (),
}

impl Classifier {
    /// Sorts `filters` by priority (stable) and remembers the default class.
    pub fn new(filters: &[FilterSpec], default_class: ClassId) -> Self {
        let _ = (filters, default_class);
        Self::default()
    }

    /// The class for an IP packet (IPv4 or IPv6; anything unparsable goes to the default).
    pub fn classify(&self, packet: &[u8]) -> ClassId {
        let _ = packet;
        ClassId(0)
    }
}
