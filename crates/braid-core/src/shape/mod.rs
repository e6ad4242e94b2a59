//! Link sharing: a hierarchical token bucket shaper on the bond's egress, with Linux HTB
//! semantics (`net/sched/sch_htb.c`) and a packet classifier. (The reader for `tc` scripts
//! is a config-file reader: it lives in the `braid` program, `config/tc.rs`.)
//!
//! | module | what it is |
//! | --- | --- |
//! | [`spec`] | the shaper's configuration: classes, filters, default class |
//! | [`units`] | tc's rate, size and time units (`kbit`, `mbit`, `kbps`, `1.5k`, ...) |
//! | [`classify`] | filters in priority order, first match wins, then the default class |
//! | [`htb`] | the HTB class tree, token accounting, borrowing, DRR, leaf queues |

mod classify;
mod htb;
mod spec;
pub mod units;

pub use self::classify::Classifier;
pub use self::htb::{ClassStats, Enqueued, ShapeError, Shaper, CATCH_UP};
pub use self::spec::{
    ClassId, ClassIdError, ClassSpec, FilterSpec, PortRange, PortRangeError, Prefix, PrefixError,
    ShapeSpec, SpecError,
};
