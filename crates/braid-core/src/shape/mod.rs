//! Link sharing: a hierarchical token bucket shaper on the bond's egress, with Linux HTB
//! semantics (`net/sched/sch_htb.c`), a packet classifier and a reader for `tc` scripts.
//!
//! | module | what it is |
//! | --- | --- |
//! | [`spec`] | the shaper's configuration: classes, filters, default class |
//! | [`units`] | tc's rate, size and time units (`kbit`, `mbit`, `kbps`, `1.5k`, ...) |
//! | [`classify`] | filters in priority order, first match wins, then the default class |
//! | [`htb`] | the HTB class tree, token accounting, borrowing, DRR, leaf queues |
//! | [`tc`] | reads `tc qdisc/class/filter add ... htb/u32` scripts into a [`spec::ShapeSpec`] |

pub mod classify;
pub mod htb;
pub mod spec;
pub mod tc;
pub mod units;

pub use self::htb::{ClassStats, Enqueued, ShapeError, Shaper};
pub use self::spec::{ClassId, ClassSpec, FilterSpec, PortRange, Prefix, ShapeSpec};
