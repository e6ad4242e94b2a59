//! The fault matrix (`braid lab fault-matrix`, `docs/reliability.md`) on a small fixed set
//! of seeds: the real `braid` binary in two network namespaces, faults injected during a
//! checked TCP transfer. Needs root (namespaces, TUN); skips otherwise unless
//! `BRAID_REQUIRE_NETNS=1`. Any number of cases: `scripts/fault-matrix N [SEED]`.
mod common;

use std::collections::BTreeSet;

use braid_lab::matrix::case::{Case, FaultKind};
use braid_lab::matrix::{self, Options};

/// Cases without restarts: flaps (one of them of a bond's only path), junk
/// of each shape at sealed and plain bonds, control-socket floods, a reload (skipped
/// until the binary has `braid reload`).
const SEEDS: &[u64] = &[178, 54, 58, 137, 204];
/// Cases that restart one end: SIGKILL and SIGTERM, of a and of b, sealed and plain.
const RESTART_SEEDS: &[u64] = &[14, 53, 147, 190];

fn kinds(seeds: &[u64]) -> BTreeSet<&'static str> {
    seeds
        .iter()
        .flat_map(|&s| Case::draw(s).faults)
        .map(|f| f.kind.name())
        .collect()
}

/// The fixed seeds still draw what their comments say (a change to the drawing changes
/// every case: pick new seeds with `braid lab fault-matrix --list --cases 400`).
#[test]
fn fixed_seeds_cover_the_fault_kinds() {
    assert_eq!(
        kinds(SEEDS),
        ["control-flood", "flap", "junk", "reload"].into(),
        "non-restart seeds"
    );
    assert_eq!(
        kinds(RESTART_SEEDS),
        ["restart-kill", "restart-term"].into()
    );
    let restarts: BTreeSet<(String, bool)> = RESTART_SEEDS
        .iter()
        .flat_map(|&s| Case::draw(s).faults)
        .filter_map(|f| match f.kind {
            FaultKind::Restart { side, kill, .. } => Some((side.name().to_string(), kill)),
            _ => None,
        })
        .collect();
    assert_eq!(
        restarts.len(),
        4,
        "SIGTERM and SIGKILL of each end: {restarts:?}"
    );
    let sealed: BTreeSet<bool> = RESTART_SEEDS
        .iter()
        .map(|&s| Case::draw(s).sealed)
        .collect();
    assert_eq!(sealed.len(), 2, "sealed and plain");
}

fn run(seeds: &[u64]) {
    let opts = Options {
        braid: common::braid(),
        reload: matrix::ReloadMode::Auto.resolve(&common::braid()),
    };
    let report = matrix::run_seeds(&opts, seeds, false).expect("the lab itself failed");
    let text = report.render();
    println!("{text}");
    assert_eq!(report.failed, 0, "failed cases:\n{text}");
    assert!(report.bytes_checked > 0);
}

#[test]
fn fault_matrix_fixed_seeds() {
    let Some(_lock) = common::netns_or_skip("fault_matrix_fixed_seeds") else {
        return;
    };
    run(SEEDS);
}

/// Fails until one end's restart no longer black-holes the bond (issue 12, part 1).
#[test]
fn fault_matrix_restarts() {
    let Some(_lock) = common::netns_or_skip("fault_matrix_restarts") else {
        return;
    };
    run(RESTART_SEEDS);
}
