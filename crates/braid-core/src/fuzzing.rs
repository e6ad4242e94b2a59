//! Internals the fuzz targets drive directly. Hidden from the docs and not part of
//! braid-core's interface: nothing but `fuzz/` may use it.

pub use crate::crypto::cookie::MacKeys;
pub use crate::flow::{DissectOpts, L2Header};
pub use crate::fragments::GroupKey;
pub use crate::reorder::{Inserted, ReorderBuffer};
pub use crate::sched::adaptive::skips_equalization;

/// The kernel-faithful flow dissector (`flow.rs`).
pub mod flow {
    pub use crate::flow::{bond_dissect, dissect, peek_frame, peek_ip};
}
