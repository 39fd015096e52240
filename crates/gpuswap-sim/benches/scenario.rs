//! Wall time of whole scenario runs: the figure behind "seconds, not days".
//!
//! `cargo bench -p gpuswap-sim --bench scenario`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpuswap_core::PolicySettings;
use gpuswap_sim::engine::{SimConfig, TenantSpec, simulate};
use gpuswap_sim::report::run_and_report;
use gpuswap_sim::{apps, preset};

/// Two instances of `app` at its default size, `repeat` phases each, on a GTX 480.
fn two_instances(app: &str, repeat: u32) -> SimConfig {
    let model = apps::find(app).expect("built-in app");
    let preset = preset::find("gtx480").expect("preset");
    let program = model
        .program("default", repeat, preset.shape())
        .expect("default size");
    let tenants = ["a", "b"]
        .into_iter()
        .map(|name| TenantSpec::new(name, app, program.clone()))
        .collect();
    SimConfig::new(
        preset.clone(),
        preset.tenant_vram_bytes(),
        PolicySettings::named("native"),
        tenants,
    )
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("scenario");
    for app in ["backprop", "srad_v1", "heartwall"] {
        let config = two_instances(app, 100);
        let events = simulate(config.clone()).expect("runs").events;
        group.bench_function(format!("{app} x2, repeat 100 ({events} events)"), |b| {
            b.iter(|| simulate(config.clone()).expect("runs"))
        });
    }
    // The full report: main run plus the solo baseline.
    let config = two_instances("backprop", 100);
    group.bench_function("report backprop x2, repeat 100", |b| {
        b.iter(|| run_and_report("bench", 0, &config).expect("runs"))
    });
    group.finish();
}

/// `n` tenants, backprop and nn in turn, in gpuswap mode on an A100 with VRAM for 60 % of
/// their footprint, so evictions, returns and timers run: the per-event cost at `n`
/// tenants. Two apps, so that 2 tenants run the same mix as 128 and the counts compare
/// like with like (a mix of four put other apps' events into the larger counts only).
fn many_tenants(n: usize) -> SimConfig {
    let preset = preset::find("a100-80gb").expect("preset");
    let mix = ["backprop", "nn"];
    let tenants: Vec<TenantSpec> = (0..n)
        .map(|i| {
            let app = mix[i % mix.len()];
            let program = apps::find(app)
                .expect("built-in app")
                .program("rodinia", 200, preset.shape())
                .expect("rodinia size");
            TenantSpec {
                start_ns: i as u64 * 100_000,
                ..TenantSpec::new(format!("t{i}"), app, program)
            }
        })
        .collect();
    let footprint: u64 = tenants
        .iter()
        .map(|t| t.program.peak_allocated_bytes())
        .sum();
    SimConfig::new(
        preset,
        footprint * 6 / 10,
        PolicySettings::named("gpuswap"),
        tenants,
    )
}

/// Cost per event must not grow with the number of tenants: criterion reports events per
/// second at 2, 16, 64 and 128 tenants (issue 28's target: within 1.5x from 2 to 128).
fn per_event(c: &mut Criterion) {
    let mut group = c.benchmark_group("per-event cost");
    group.sample_size(10);
    for n in [2, 16, 64, 128] {
        let config = many_tenants(n);
        let events = simulate(config.clone()).expect("runs").events;
        group.throughput(Throughput::Elements(events));
        group.bench_function(format!("{n} tenants ({events} events)"), |b| {
            b.iter(|| simulate(config.clone()).expect("runs"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench, per_event);
criterion_main!(benches);
