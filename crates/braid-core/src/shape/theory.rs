//! What HTB should give each class in a fluid model: every backlogged class its rate
//! (at most its demand), then spare capacity offered level by level, lower `prio` first,
//! split among equal prio by quantum, never above ceil. Used by the lab's "HTB theory"
//! column and by tests.
//!
//! STUB: contract only.

use super::spec::{ClassId, ShapeSpec};

/// Each leaf's expected throughput in bit/s, given each leaf's offered load in bit/s
/// (leaves not in `demand` offer nothing) and the link rate.
pub fn shares(spec: &ShapeSpec, link_bps: u64, demand: &[(ClassId, u64)]) -> Vec<(ClassId, u64)> {
    let _ = (spec, link_bps);
    demand.to_vec()
}
