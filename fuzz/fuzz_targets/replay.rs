//! The replay window (`crypto::ReplayWindow`), driven by arbitrary check/mark sequences.
//!
//! Checks against a model that remembers every marked counter: a counter is never
//! accepted twice; `mark` accepts exactly when `check` says `Fresh`; a counter ahead of
//! every marked one is always fresh (below the end of the counter space); one within the
//! window of the highest marked counter and never marked is fresh; `check` is read-only.
#![no_main]

use std::collections::HashSet;

use arbitrary::Arbitrary;
use braid_core::crypto::{ReplayVerdict, ReplayWindow};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Mark `top + delta` (a little ahead or behind the newest).
    Near { delta: i16 },
    /// Mark `top + shift` (a big jump ahead).
    Jump { shift: u32 },
    /// Mark any counter.
    Any { counter: u64 },
    /// Reset the window (a new session).
    Reset,
}

#[derive(Arbitrary, Debug)]
struct Input {
    bits: u16,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let mut w = ReplayWindow::new(usize::from(input.bits));
    let window = w.window();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut top: Option<u64> = None;
    for op in input.ops.iter().take(4096) {
        let counter = match *op {
            Op::Reset => {
                w.reset();
                seen.clear();
                top = None;
                assert_eq!(w.window(), window);
                continue;
            }
            Op::Near { delta } => top.unwrap_or(0).wrapping_add(i64::from(delta) as u64),
            Op::Jump { shift } => top.unwrap_or(0).wrapping_add(u64::from(shift)),
            Op::Any { counter } => counter,
        };
        let verdict = w.check(counter);
        assert_eq!(w.check(counter), verdict, "check is read-only");
        if seen.contains(&counter) {
            assert_ne!(
                verdict,
                ReplayVerdict::Fresh,
                "counter {counter} accepted twice"
            );
        }
        let exhausted = verdict == ReplayVerdict::Exhausted;
        if !exhausted {
            match top {
                None => assert_eq!(verdict, ReplayVerdict::Fresh, "first counter {counter}"),
                Some(t) if counter > t => {
                    assert_eq!(verdict, ReplayVerdict::Fresh, "{counter} ahead of {t}")
                }
                Some(t) if !seen.contains(&counter) && t - counter <= window => {
                    assert_eq!(
                        verdict,
                        ReplayVerdict::Fresh,
                        "{counter} within the window behind {t}"
                    )
                }
                _ => {}
            }
        }
        let marked = w.mark(counter);
        assert_eq!(marked, verdict == ReplayVerdict::Fresh);
        if marked {
            seen.insert(counter);
            top = Some(top.map_or(counter, |t| t.max(counter)));
            assert_ne!(w.check(counter), ReplayVerdict::Fresh);
        }
    }
});
