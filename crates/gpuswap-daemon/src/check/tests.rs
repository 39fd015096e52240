//! The daemon's checker: seeds pass and reach every fault, a seed makes one run, and a
//! bug put into the endpoint on purpose is caught.

use super::{CheckStats, case, check, check_case, describe};
use crate::endpoint::Mutation;

/// Seeds a debug build checks in about two seconds; `CHECK_SEEDS` asks for more.
fn seeds() -> u64 {
    std::env::var("CHECK_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

#[test]
fn seeds_pass_and_reach_every_fault() {
    let mut total = CheckStats::default();
    for seed in 0..seeds() {
        total.add(&check(seed).unwrap_or_else(|f| panic!("seed {seed}: {f}")));
    }
    let reached = [
        ("suspensions", total.suspensions),
        ("moves", total.moves),
        ("refused moves", total.refused),
        ("frozen processes", total.frozen),
        ("slow processes", total.slow),
        (
            "frozen processes closed at the deadline",
            total.closed_at_deadline,
        ),
        ("kills mid-relocation", total.killed_mid_relocation),
        ("kills by the daemon", total.killed_by_daemon),
        ("overtaken frames", total.overtaken),
        ("bulk moves", total.batches),
    ];
    for (what, n) in reached {
        assert!(n > 0, "no {what} in {total:?}");
    }
}

#[test]
fn a_seed_makes_the_same_case_and_the_same_run() {
    for seed in [0, 7, 123_456_789] {
        assert_eq!(describe(&case(seed)), describe(&case(seed)));
        assert_eq!(check(seed), check(seed));
    }
    assert_ne!(describe(&case(1)), describe(&case(2)));
}

/// The first seed at which `mutation` is caught, and what was said.
fn caught(mutation: Mutation) -> (u64, String) {
    (0..seeds())
        .find_map(|seed| {
            check_case(&case(seed), |e| e.mutation = Some(mutation))
                .err()
                .map(|problem| (seed, problem))
        })
        .unwrap_or_else(|| panic!("{mutation:?} passed {} seeds", seeds()))
}

/// A victim resumed before its chunks have moved runs beside the tenant the room is
/// made for: the process is asked to move a chunk while it runs.
#[test]
fn a_victim_resumed_early_is_caught() {
    let (seed, problem) = caught(Mutation::ResumeEarly);
    assert!(problem.contains("while it runs"), "seed {seed}: {problem}");
    assert!(seed < 10, "caught only at seed {seed}");
}

/// A grant the endpoint drops leaves its process waiting forever.
#[test]
fn a_dropped_grant_is_caught() {
    let (seed, problem) = caught(Mutation::DropLateGrant);
    assert!(
        problem.contains("waits for an answer to request"),
        "seed {seed}: {problem}"
    );
    assert!(seed < 10, "caught only at seed {seed}");
}

/// A tenant the endpoint still counts suspended after its resume breaks its invariant
/// that nobody stays suspended without a relocation.
#[test]
fn a_suspension_never_lifted_is_caught() {
    let (seed, problem) = caught(Mutation::KeepSuspended);
    assert!(
        problem.contains("invariant broken"),
        "seed {seed}: {problem}"
    );
    assert!(seed < 10, "caught only at seed {seed}");
}

/// A parked tenant resumed when it says it is busy runs beside the holder: two tenants
/// in one turn.
#[test]
fn two_tenants_in_one_turn_are_caught() {
    let (seed, problem) = caught(Mutation::ResumeOnBusy);
    // The endpoint's invariant (a busy tenant runs beside the holder), or the process
    // resumed twice when the turn really comes to it.
    assert!(
        problem.contains("holds the GPU") || problem.contains("resumed while it runs"),
        "seed {seed}: {problem}"
    );
    // Caught at seed 4 when written: only half the cases take turns.
    assert!(seed < 50, "caught only at seed {seed}");
}
