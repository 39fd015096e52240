//! A tenant's idle time between repeats (`TenantSpec::idle_between`): each repeat but
//! the last ends with the tenant idle for that long once its GPU work is done, exponential
//! times are the same for the same seed and the tenant's own, and under turns the idle tenant gives the GPU
//! up while it idles.

use gpuswap_core::gpu_time::{GpuTime, TurnSettings};
use gpuswap_core::{MIB, PolicySettings};
use gpuswap_sim::engine::{IdleBetween, Outcome, SimConfig, TenantSpec, simulate};
use gpuswap_sim::{apps, preset};

const SECOND_NS: u64 = 1_000_000_000;

/// One stream tenant per entry of `idle`, each repeating its phase `repeat` times, on
/// the GTX 480 with `vram_mib` of VRAM, under `gpu_time`, with the manager seeded
/// `seed`.
fn run(idle: &[IdleBetween], repeat: u32, vram_mib: u64, gpu_time: GpuTime, seed: u64) -> Outcome {
    let gtx480 = preset::find("gtx480").unwrap();
    let program = apps::find("stream")
        .unwrap()
        .program("default", repeat, gtx480.shape())
        .unwrap();
    let tenants = idle
        .iter()
        .enumerate()
        .map(|(i, idle_between)| TenantSpec {
            idle_between: *idle_between,
            ..TenantSpec::new(format!("t{i}"), "stream", program.clone())
        })
        .collect();
    let mut config = SimConfig::new(
        gtx480,
        vram_mib * MIB,
        PolicySettings::named("gpuswap"),
        tenants,
    );
    config.manager.seed = seed;
    config.manager.gpu_time = gpu_time;
    config.check_invariants = true;
    simulate(config).expect("no invariant breaks")
}

/// The length of tenant `t`'s measured phase.
fn phase_ns(out: &Outcome, t: usize) -> u64 {
    let (start, end) = out.tenants[t].phase_ns.expect("the phase ran");
    end - start
}

#[test]
fn a_fixed_idle_time_delays_each_repeat_after_the_first_by_that_time() {
    let alone = run(&[IdleBetween::None], 4, 1024, GpuTime::Concurrent, 0);
    let idling = run(
        &[IdleBetween::Fixed { ns: SECOND_NS }],
        4,
        1024,
        GpuTime::Concurrent,
        0,
    );
    // Three idle times between four repeats, none after the last.
    assert_eq!(phase_ns(&idling, 0), phase_ns(&alone, 0) + 3 * SECOND_NS);
    assert_eq!(idling.tenants[0].error, None);
    // The absent key is no idle time at all: once is as without it.
    let once = run(
        &[IdleBetween::Fixed { ns: SECOND_NS }],
        1,
        1024,
        GpuTime::Concurrent,
        0,
    );
    let plain = run(&[IdleBetween::None], 1, 1024, GpuTime::Concurrent, 0);
    assert_eq!(once, plain);
}

#[test]
fn exponential_idle_times_follow_the_seed_and_have_their_mean() {
    let exp = |seed| IdleBetween::Exponential {
        mean_ns: SECOND_NS / 10,
        seed,
        stream: 0,
    };
    let a = run(&[exp(7)], 201, 1024, GpuTime::Concurrent, 0);
    let again = run(&[exp(7)], 201, 1024, GpuTime::Concurrent, 0);
    assert_eq!(a, again, "same seed, same run");
    // The times are the tenant's: the manager's seed does not change them.
    let reseeded = run(&[exp(7)], 201, 1024, GpuTime::Concurrent, 3);
    assert_eq!(phase_ns(&a, 0), phase_ns(&reseeded, 0));
    let b = run(&[exp(8)], 201, 1024, GpuTime::Concurrent, 0);
    assert_ne!(
        phase_ns(&a, 0),
        phase_ns(&b, 0),
        "another seed, other times"
    );
    // 200 idle times of mean 0.1 s: 20 s within a few standard deviations (1.4 s).
    let busy = phase_ns(
        &run(&[IdleBetween::None], 201, 1024, GpuTime::Concurrent, 0),
        0,
    );
    for out in [&a, &b] {
        let idle_s = (phase_ns(out, 0) - busy) as f64 / SECOND_NS as f64;
        assert!((15.0..25.0).contains(&idle_s), "{idle_s} s idle");
    }
    // Each tenant draws on its own stream: two alike tenants idle differently.
    let other = IdleBetween::Exponential {
        mean_ns: SECOND_NS / 10,
        seed: 7,
        stream: 1,
    };
    let pair = run(&[exp(7), other], 201, 1024, GpuTime::Concurrent, 0);
    assert_ne!(phase_ns(&pair, 0), phase_ns(&pair, 1));
}

#[test]
fn under_turns_a_tenant_gives_the_gpu_up_while_it_idles() {
    // Two 192 MiB stream tenants in 300 MiB: they take turns. The first idles 5 s
    // between its repeats; the second, which does not idle, runs its whole program in
    // the first's idle time, well before a turn's 2 s quantum would have handed over.
    let out = run(
        &[IdleBetween::Fixed { ns: 5 * SECOND_NS }, IdleBetween::None],
        2,
        300,
        GpuTime::Turns(TurnSettings::default()),
        0,
    );
    assert!(out.tenants.iter().all(|t| t.error.is_none()));
    assert!(
        out.tenants[1].end_ns < 5 * SECOND_NS,
        "the busy tenant ended at {} ns",
        out.tenants[1].end_ns
    );
    assert!(out.tenants[0].end_ns > 5 * SECOND_NS);
}
