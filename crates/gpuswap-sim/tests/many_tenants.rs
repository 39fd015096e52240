//! Many tenants on one device: every one of them runs to its end.

use gpuswap_core::PolicySettings;
use gpuswap_sim::engine::{SimConfig, TenantSpec, simulate};
use gpuswap_sim::{apps, preset};

mod common;
use common::RODINIA;

/// Regression: with this many tenants a flow on the link finished in the nanosecond
/// another flow started, the start swallowed the completion, and a tenant's memcpy never
/// finished: "t12 never finished (stuck in WaitingCopy)" at 1.22 s simulated. An `alloc`
/// tenant and 39 Rodinia tenants at their default sizes, one repetition each, with all of
/// the A100's VRAM (so nothing is evicted) hit it; from 26 Rodinia tenants on the same
/// flow is lost.
#[test]
fn forty_tenants_on_an_a100_all_finish() {
    let a100 = preset::find("a100-80gb").unwrap();
    let shape = a100.shape();
    let program = |app: &str| {
        apps::find(app)
            .unwrap()
            .program("default", 1, shape)
            .unwrap()
    };
    let mut tenants = vec![TenantSpec::new("alloc", "alloc", program("alloc"))];
    for i in 0..39 {
        let app = RODINIA[i % RODINIA.len()];
        tenants.push(TenantSpec::new(format!("t{i}"), app, program(app)));
    }
    let vram = a100.tenant_vram_bytes();
    let outcome = simulate(SimConfig::new(
        a100,
        vram,
        PolicySettings::named("gpuswap"),
        tenants,
    ))
    .expect("every tenant finishes and no invariant breaks");
    assert_eq!(outcome.tenants.len(), 40);
    for t in &outcome.tenants {
        assert_eq!(t.error, None, "{} failed", t.name);
        assert!(t.end_ns > t.start_ns, "{} never ran", t.name);
    }
}
