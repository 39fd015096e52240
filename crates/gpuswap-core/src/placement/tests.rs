use proptest::prelude::*;

use super::*;

fn demands(sizes: &[u32]) -> Vec<Demand> {
    sizes.iter().map(|s| Demand::of(*s)).collect()
}

fn space<'a>(total: u32, residents: &'a [Demand], positions: &'a [u32]) -> Space<'a> {
    Space {
        total,
        residents,
        positions,
    }
}

fn place(name: &str, total: u32, d: &[Demand]) -> Vec<u32> {
    find_placement(name)
        .unwrap()
        .build()
        .place(total, d)
        .unwrap()
}

#[test]
fn the_twelve_slot_round_robin_example_costs_what_the_spec_says() {
    // 12 slots, four vGPUs of 6: sharing pairwise costs 24 + 24(n-1) copies; putting
    // vGPU4 on vGPU3's slots, so that vGPU2 keeps its own, costs 24 + 18(n-1).
    let d = demands(&[6, 6, 6, 6]);
    for n in 1..6u64 {
        assert_eq!(
            round_robin_copies(12, &d, &[0, 6, 0, 6], n as u32),
            24 + 24 * (n - 1)
        );
        assert_eq!(
            round_robin_copies(12, &d, &[0, 6, 0, 0], n as u32),
            24 + 18 * (n - 1)
        );
    }
}

/// gScale's score counts a slot's occupants: the spec's worked example (four vGPUs of
/// six slots in twelve) comes out as the layout it prices at 24 + 24(n-1) copies, each
/// newcomer sharing with one vGPU, not the 24 + 18(n-1) layout a 0/1 score gave.
#[test]
fn gscale_places_the_worked_example_as_the_paper_prices_it() {
    let d = demands(&[6, 6, 6, 6]);
    let p = place("gscale", 12, &d);
    assert_eq!(p, [0, 6, 0, 6]);
    assert_eq!(round_robin_copies(12, &d, &p, 3), 24 + 24 * 2);
}

#[test]
fn gscale_takes_the_lowest_score_run_ties_to_the_left() {
    // 5 slots, slots 1-4 (1-indexed) held by one VM: a VM needing 2 gets slots 4-5.
    let mut g = find_placement("gscale").unwrap().build();
    let next = g
        .arrive(space(5, &demands(&[4]), &[0]), Demand::of(2))
        .unwrap();
    assert_eq!(next, [0, 3]);
    // On an empty space, the leftmost run.
    assert_eq!(place("gscale", 5, &demands(&[2])), [0]);
}

#[test]
fn size_based_places_the_spec_example() {
    // M = 5, S = 4, 4, 3, 2: P = 0, 1, 1, 1 (0-indexed); shared slots are 1..3.
    let d = demands(&[4, 4, 3, 2]);
    let p = place("dymgpu-size", 5, &d);
    assert_eq!(p, [0, 1, 1, 1]);
    assert_eq!(shared_slots(5, &d, &p), 3);
}

#[test]
fn size_based_edge_cases_the_printed_loop_leaves_open() {
    // Everything fits: the loop ends with every vGPU placed (no i < N guard needed).
    assert_eq!(place("dymgpu-size", 10, &demands(&[1, 1])), [0, 1]);
    // An exact fit takes the right-align branch and becomes V_K: the next vGPU stacks
    // on its start.
    assert_eq!(place("dymgpu-size", 8, &demands(&[4, 4])), [0, 4]);
    assert_eq!(place("dymgpu-size", 8, &demands(&[4, 4, 2])), [0, 4, 4]);
    // Ties keep the input order: equal sizes are placed in the order given.
    assert_eq!(place("dymgpu-size", 9, &demands(&[3, 3, 3])), [0, 3, 6]);
}

#[test]
fn utilization_based_keeps_busy_vgpus_apart_and_right_aligns_the_rest() {
    let d: Vec<Demand> = [(4, 0.9), (4, 0.2), (3, 0.5), (2, 0.7)]
        .iter()
        .map(|(s, u)| Demand {
            slots: *s,
            utilization: *u,
        })
        .collect();
    // Busiest (4 slots) at 0, then the 0.7 one right-aligned; the others right-aligned.
    assert_eq!(place("dymgpu-util", 5, &d), [0, 1, 2, 3]);
}

#[test]
fn gvirt_refuses_what_it_cannot_partition() {
    let mut g = find_placement("gvirt").unwrap().build();
    assert_eq!(g.place(12, &demands(&[6, 6])).unwrap(), [0, 6]);
    assert_eq!(
        g.place(12, &demands(&[6, 6, 1])),
        Err(PlaceError::NoRoom {
            algorithm: "gvirt",
            slots: 1
        })
    );
    // A freed run is reused.
    assert_eq!(
        g.arrive(space(12, &demands(&[6]), &[6]), Demand::of(5))
            .unwrap(),
        [6, 0]
    );
}

#[test]
fn impossible_demands_are_refused_by_every_algorithm() {
    for p in PLACEMENTS {
        let mut a = p.build();
        assert_eq!(
            a.place(4, &demands(&[5])),
            Err(PlaceError::TooLarge { slots: 5, total: 4 }),
            "{}",
            p.name
        );
        assert_eq!(
            a.place(4, &demands(&[0])),
            Err(PlaceError::Empty),
            "{}",
            p.name
        );
    }
}

#[test]
fn size_based_maps_a_small_newcomer_at_the_overlap_and_reallocates_when_space_frees() {
    let mut a = find_placement("dymgpu-size").unwrap().build();
    let d = demands(&[4, 4]);
    // 6 slots: 0-3 and 2-5, overlap L = 2 at P_K = 2.
    let p = a.place(6, &d).unwrap();
    assert_eq!(p, [0, 2]);
    // A newcomer of 2 <= L goes to P_K and adds no shared slot.
    let next = a.arrive(space(6, &d, &p), Demand::of(2)).unwrap();
    assert_eq!(next, [0, 2, 2]);
    let all = demands(&[4, 4, 2]);
    assert_eq!(shared_slots(6, &all, &next), shared_slots(6, &d, &p));
    // The first vGPU leaves slots 0-1 it held alone: the rest are re-placed, since that
    // ends their sharing.
    let after = a
        .depart(space(6, &demands(&[4, 2]), &[2, 2]), true)
        .unwrap();
    assert_eq!(after, [0, 4]);
    assert_eq!(shared_slots(6, &demands(&[4, 2]), &after), 0);
    // When nothing is shared, nobody moves.
    assert_eq!(a.depart(space(6, &demands(&[2, 2]), &[0, 4]), true), None);
    // Leaving only shared slots moves nobody.
    assert_eq!(a.depart(space(6, &demands(&[4]), &[0]), false), None);
}

#[test]
fn utilization_based_re_places_every_twenty_seconds() {
    let mut a = find_placement("dymgpu-util").unwrap().build();
    assert_eq!(a.period_ns(), Some(20_000_000_000));
    let busy_second: Vec<Demand> = [(3, 0.1), (3, 0.9)]
        .iter()
        .map(|(s, u)| Demand {
            slots: *s,
            utilization: *u,
        })
        .collect();
    // The busy one gets the left, exclusive part; the idle one is right-aligned.
    assert_eq!(
        a.periodic(space(5, &busy_second, &[0, 2])),
        Some(vec![2, 0])
    );
    // Nothing shared: nobody moves.
    assert_eq!(a.periodic(space(6, &busy_second, &[0, 3])), None);
    // Static algorithms never re-place.
    assert_eq!(find_placement("gscale").unwrap().build().period_ns(), None);
}

#[test]
fn while_everything_fits_all_placements_cost_the_same() {
    let d = demands(&[3, 2, 4]);
    let costs: Vec<u64> = PLACEMENTS
        .iter()
        .map(|p| {
            let positions = place(p.name, 12, &d);
            assert_eq!(shared_slots(12, &d, &positions), 0, "{}", p.name);
            round_robin_copies(12, &d, &positions, 10)
        })
        .collect();
    // Each vGPU's slots are copied once, at its first switch-in.
    assert!(costs.iter().all(|c| *c == 9), "{costs:?}");
}

proptest! {
    /// Every algorithm keeps every vGPU inside the space, and size-based placement
    /// never shares more slots than gScale's for the same vGPUs.
    #[test]
    fn placements_stay_in_the_space_and_size_based_shares_no_more_than_gscale(
        total in 1u32..64,
        raw in proptest::collection::vec((1u32..64, 0.0f64..1.0), 1..16),
    ) {
        let d: Vec<Demand> = raw
            .iter()
            .map(|(s, u)| Demand { slots: 1 + (s - 1) % total, utilization: *u })
            .collect();
        for p in PLACEMENTS {
            let Ok(positions) = p.build().place(total, &d) else {
                prop_assert_eq!(p.name, "gvirt", "only gvirt refuses");
                continue;
            };
            prop_assert_eq!(positions.len(), d.len());
            for (x, dd) in positions.iter().zip(&d) {
                prop_assert!(x + dd.slots <= total, "{} put {} slots at {x} in {total}", p.name, dd.slots);
            }
        }
        let size = place("dymgpu-size", total, &d);
        let gscale = place("gscale", total, &d);
        prop_assert!(
            shared_slots(total, &d, &size) <= shared_slots(total, &d, &gscale),
            "size {:?} shares more than gscale {:?}", size, gscale
        );
    }
}
