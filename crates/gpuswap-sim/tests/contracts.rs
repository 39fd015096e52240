//! Contracts on the simulated GPU under `gpuswap check`'s fault injection (failing
//! copies, shuffled same-time events, late answers): weighted shares converge and a
//! guarantee is kept, with every invariant checked after every event.

use gpuswap_core::{Contract, MIB, PolicySettings};
use gpuswap_sim::engine::{Faults, SimConfig, TenantSpec, simulate};
use gpuswap_sim::{apps, preset};
use proptest::prelude::*;

mod common;
use common::vram_at;

const CHUNK_BYTES: u64 = 4 * MIB;
const VRAM_BYTES: u64 = 300 * MIB;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Three leak-like tenants, each wanting 256 MiB of 300 MiB, allocate 8 MiB
    /// buffers together and hold them: under largest-share each ends within one chunk
    /// of VRAM times its weight over the total weight (a guaranteed tenant holds at
    /// least its guarantee), whatever the faults, unless failed copies killed one.
    #[test]
    fn weighted_shares_converge_under_injected_faults(
        weights in proptest::collection::vec(1u32..4, 3),
        guarantee_mib in prop_oneof![Just(0u64), 60u64..100],
        seed in any::<u64>(),
        copy_failure in prop_oneof![Just(0.0), Just(0.05), Just(0.2)],
        shuffle_ties in any::<bool>(),
        max_answer_delay_ns in prop_oneof![Just(0u64), Just(1_000u64), Just(2_000_000u64)],
    ) {
        let gtx480 = preset::find("gtx480").unwrap();
        let runtime_bytes = gtx480.runtime_bytes();
        let program = apps::find("alloc")
            .unwrap()
            .program("buffer=8MiB,total=256MiB,gap=1ms,period=100ms,hold=1s", 1, gtx480.shape())
            .unwrap();
        let tenants = weights
            .iter()
            .enumerate()
            .map(|(i, w)| TenantSpec {
                contract: Contract {
                    weight: *w,
                    vram_guarantee_bytes: if i == 0 { guarantee_mib * MIB } else { 0 },
                    ..Contract::default()
                },
                ..TenantSpec::new(format!("t{i}"), "alloc", program.clone())
            })
            .collect();
        let mut config =
            SimConfig::new(gtx480, VRAM_BYTES, PolicySettings::named("gpuswap"), tenants);
        config.manager.chunk_bytes = CHUNK_BYTES;
        config.check_invariants = true;
        config.faults = Faults {
            seed,
            copy_failure,
            shuffle_ties,
            max_answer_delay_ns,
            ..Faults::default()
        };
        let out = simulate(config).expect("no invariant breaks");
        prop_assume!(out.tenants.iter().all(|t| t.error.is_none()));
        // Every tenant has allocated all it will by 0.5 s and holds it for a second.
        let held: Vec<u64> = out
            .tenants
            .iter()
            .map(|t| vram_at(&t.vram_timeline, 500_000_000))
            .collect();
        // The guaranteed tenant keeps its guarantee; the others share the rest by
        // weight (runtime buffers included: they count as VRAM the tenant holds).
        let guarantee = guarantee_mib * MIB;
        let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
        let weighted = |i: usize| VRAM_BYTES * u64::from(weights[i]) / total;
        if weighted(0) >= guarantee {
            for (i, h) in held.iter().enumerate() {
                prop_assert!(
                    h.abs_diff(weighted(i)) <= CHUNK_BYTES + runtime_bytes % CHUNK_BYTES,
                    "tenant {i} of weight {}: {} MiB, weighted share {} MiB ({held:?})",
                    weights[i], h / MIB, weighted(i) / MIB
                );
            }
        } else {
            prop_assert!(held[0] >= guarantee, "{} MiB under {guarantee_mib} MiB", held[0] / MIB);
            let rest_total = u64::from(weights[1] + weights[2]);
            for i in 1..3 {
                let share = (VRAM_BYTES - held[0]) * u64::from(weights[i]) / rest_total;
                prop_assert!(
                    held[i].abs_diff(share) <= CHUNK_BYTES + runtime_bytes % CHUNK_BYTES,
                    "tenant {i} of weight {}: {} MiB, share of the rest {} MiB ({held:?})",
                    weights[i], held[i] / MIB, share / MIB
                );
            }
        }
    }
}
