//! The sharing models (time slicing, MPS), the manager's turns (nvshare's exclusive
//! quantum) and the scheduling policies as the engine carries them out.

use super::*;
use crate::preset::{self, TimeSlicing};
use crate::program::{Access, AccessOrder, Op, Program};
use gpuswap_core::gpu_time::scheduling::SchedulingConfig;
use gpuswap_core::gpu_time::{GpuTime, NVSHARE_IDLE_RELEASE_NS, TurnSettings};
use gpuswap_core::{MIB, PolicySettings};

fn v100() -> Preset {
    preset::find("v100-pcie-32gb").unwrap()
}

/// `kernels` launches of a kernel of `ops` instructions reading `mib` MiB of one buffer
/// linearly, one after the other (synchronized), as the measured phase.
fn program(mib: u64, kernels: u32, ops: u64) -> Program {
    let mut p = Program::default();
    let bytes = mib * MIB;
    let a = p.buffer("a", bytes);
    p.ops = vec![
        Op::Alloc(a),
        Op::PhaseStart,
        Op::Repeat {
            times: kernels,
            body: vec![
                Op::Launch(Kernel {
                    name: "k".into(),
                    ops,
                    accesses: vec![Access {
                        order: AccessOrder::Linear,
                        ..Access::uniform(a, bytes, 0)
                    }],
                    phases: Vec::new(),
                    outer_loop: Default::default(),
                }),
                Op::Sync,
            ],
        },
        Op::Sync,
        Op::PhaseEnd,
        Op::Free(a),
    ];
    p
}

/// Tenants `programs` (with their SM shares) on a V100 with `vram_mib` MiB for managed
/// memory beside the runtime's buffers, in `mode`, sharing as `sharing`, scheduled by
/// `scheduling`.
fn run(
    programs: Vec<(Program, f64)>,
    vram_mib: u64,
    mode: &str,
    sharing: Sharing,
    scheduling: SchedulingConfig,
) -> Outcome {
    run_with(
        programs,
        vram_mib,
        mode,
        sharing,
        scheduling,
        GpuTime::Concurrent,
    )
}

/// [`run`] under nvshare's exclusive quantum (time slicing among the tenants not
/// parked).
fn exclusive(programs: Vec<(Program, f64)>, vram_mib: u64, mode: &str, quantum_ns: u64) -> Outcome {
    let turns = GpuTime::Turns(TurnSettings::exclusive(quantum_ns));
    let none = SchedulingConfig::default();
    run_with(programs, vram_mib, mode, Sharing::TimeSlice, none, turns)
}

fn run_with(
    programs: Vec<(Program, f64)>,
    vram_mib: u64,
    mode: &str,
    sharing: Sharing,
    scheduling: SchedulingConfig,
    gpu_time: GpuTime,
) -> Outcome {
    let preset = v100();
    let runtime = preset.runtime_bytes() * programs.len() as u64;
    let specs = programs
        .into_iter()
        .enumerate()
        .map(|(i, (p, sm_share))| TenantSpec {
            sm_share,
            ..TenantSpec::new(format!("t{i}"), "test", p)
        })
        .collect();
    let mut cfg = SimConfig::new(
        preset,
        vram_mib * MIB + runtime,
        PolicySettings::named(mode),
        specs,
    );
    cfg.sharing = sharing;
    cfg.manager.scheduling = scheduling;
    cfg.manager.gpu_time = gpu_time;
    cfg.check_invariants = true;
    // A livelock fails the test instead of hanging it.
    cfg.limits.max_events = 1_000_000;
    simulate(cfg).unwrap()
}

fn phase_ns(t: &TenantOutcome) -> u64 {
    let (a, b) = t.phase_ns.unwrap();
    b - a
}

#[test]
fn mps_and_a_quantum_with_one_tenant_equal_time_slicing() {
    // Oversubscribed unified memory, so that faults, evictions and thrashing count.
    let one = || vec![(program(96, 6, 1 << 20), 1.0)];
    let sliced = run(
        one(),
        64,
        "uvm",
        Sharing::TimeSlice,
        SchedulingConfig::default(),
    );
    assert!(sliced.tenants[0].paging.unwrap().stats.pages_out > 0);
    let mps = run(one(), 64, "uvm", Sharing::Mps, SchedulingConfig::default());
    assert_eq!(mps, sliced, "MPS");
    assert_eq!(exclusive(one(), 64, "uvm", 1_000_000), sliced, "a quantum");
}

#[test]
fn mps_overlaps_kernels_that_leave_sms_idle_and_shares_those_that_do_not() {
    // Compute-bound kernels (1 MiB read, 10^10 instructions).
    let pair = |share: f64| vec![(program(1, 4, 10_000_000_000), share); 2];
    let ample = 1024;
    let none = SchedulingConfig::default;
    let sliced = run(pair(0.5), ample, "native", Sharing::TimeSlice, none());
    let half = run(pair(0.5), ample, "native", Sharing::Mps, none());
    let full = run(pair(1.0), ample, "native", Sharing::Mps, none());
    let alone = phase_ns(
        &run(
            vec![pair(0.5)[0].clone()],
            ample,
            "native",
            Sharing::Mps,
            none(),
        )
        .tenants[0],
    );
    // Time slicing runs them in turn; half the SMs each run side by side as if alone;
    // all the SMs each share them, as slow as taking turns.
    let ratio = |o: &Outcome| o.makespan_ns as f64 / alone as f64;
    assert!(ratio(&sliced) > 1.9, "time slicing {}", ratio(&sliced));
    assert!(
        ratio(&half) < 1.1,
        "MPS, half the SMs each {}",
        ratio(&half)
    );
    assert!(ratio(&full) > 1.9, "MPS, all the SMs each {}", ratio(&full));
}

#[test]
fn under_mps_pilots_checks_count_in_a_kernels_demand_for_the_sms() {
    // Compute-bound kernels whose loops make the checks as many instructions as their
    // own work: instrumented, half their arithmetic is the checks'.
    let instrumented = || {
        let mut p = program(1, 4, 3 << 30);
        let Op::Repeat { body, .. } = &mut p.ops[2] else {
            panic!("the program's kernels repeat");
        };
        let Op::Launch(kernel) = &mut body[0] else {
            panic!("the repeat launches the kernel");
        };
        kernel.outer_loop = crate::program::OuterLoop::uniform(1 << 20, 1 << 10);
        assert_eq!(
            crate::preemption::check_ops(kernel.outer_loop),
            kernel.ops,
            "as many check instructions as its own"
        );
        (p, 1.0)
    };
    let pilot = || scheduled("none", 0);
    let alone =
        phase_ns(&run(vec![instrumented()], 1024, "native", Sharing::Mps, pilot()).tenants[0]);
    let pair = run(
        vec![instrumented(); 2],
        1024,
        "native",
        Sharing::Mps,
        pilot(),
    );
    // Each asks all the SMs for all of its arithmetic, checks included, so the two take
    // turns in effect; counting only their own half, the pair took 1.5 times one alone.
    let ratio = pair.makespan_ns as f64 / alone as f64;
    assert!(
        ratio > 1.9,
        "two instrumented kernels side by side: {ratio}"
    );
}

#[test]
fn under_mps_a_memory_bound_kernel_loses_nothing_to_a_compute_bound_ones_sms() {
    // Both ask all the SMs. The streaming kernel (256 MiB, few instructions) is bound by
    // VRAM, which the compute-bound one (1 MiB, 10^10 instructions) barely uses: with
    // half the SMs its arithmetic is still shorter than its memory time (the roofline).
    let streaming = || (program(256, 4, 1_000_000), 1.0);
    let computing = || (program(1, 4, 10_000_000_000), 1.0);
    let none = SchedulingConfig::default;
    let alone = |p: (Program, f64)| {
        phase_ns(&run(vec![p], 1024, "native", Sharing::Mps, none()).tenants[0]) as f64
    };
    let (streaming_alone, computing_alone) = (alone(streaming()), alone(computing()));
    let both = run(
        vec![streaming(), computing()],
        1024,
        "native",
        Sharing::Mps,
        none(),
    );
    let streaming_ratio = phase_ns(&both.tenants[0]) as f64 / streaming_alone;
    let computing_ratio = phase_ns(&both.tenants[1]) as f64 / computing_alone;
    assert!(streaming_ratio < 1.05, "streaming {streaming_ratio}");
    // The compute-bound one has half the SMs while they overlap (its first quarter).
    assert!(computing_ratio > 1.05, "computing {computing_ratio}");
}

#[test]
fn a_quantum_holder_runs_alone_until_it_ends_and_time_slicing_interleaves() {
    let pair = || vec![(program(8, 20, 1_000_000_000), 1.0); 2];
    let none = SchedulingConfig::default;
    let sliced = run(pair(), 1024, "native", Sharing::TimeSlice, none());
    let held = exclusive(pair(), 1024, "native", 1_000_000_000_000);
    let ends = |o: &Outcome| (o.tenants[0].end_ns as f64, o.tenants[1].end_ns as f64);
    let (a, b) = ends(&sliced);
    assert!((a / b - 1.0).abs() < 0.1, "interleaved: {a} and {b}");
    let (a, b) = ends(&held);
    assert!(
        a < 0.6 * b,
        "the first holds the device to its end: {a} then {b}"
    );
    // The holder's end hands the device over at once: no idle release to wait out.
    let idle = held.makespan_ns.abs_diff(sliced.makespan_ns);
    assert!(
        idle < NVSHARE_IDLE_RELEASE_NS / 10,
        "held {} against sliced {}",
        held.makespan_ns,
        sliced.makespan_ns
    );
    // A short quantum hands over while both still have work: they end close together.
    let short = exclusive(pair(), 1024, "native", 500_000);
    let (a, b) = ends(&short);
    assert!(a > 0.8 * b, "handed over: {a} and {b}");
}

#[test]
fn an_endless_tenant_ends_with_the_others() {
    let mut hog = program(32, u32::MAX, 1_000_000);
    hog.ops
        .retain(|op| !matches!(op, Op::PhaseStart | Op::PhaseEnd));
    let preset = v100();
    let runtime = preset.runtime_bytes() * 2;
    let specs = vec![
        TenantSpec::new("work", "test", program(32, 5, 1_000_000)),
        TenantSpec {
            endless: true,
            ..TenantSpec::new("hog", "test", hog)
        },
    ];
    let mut cfg = SimConfig::new(
        preset,
        48 * MIB + runtime,
        PolicySettings::named("uvm"),
        specs,
    );
    cfg.sharing = Sharing::Mps;
    cfg.check_invariants = true;
    let out = simulate(cfg).unwrap();
    assert_eq!(out.tenants[1].end_ns, out.tenants[0].end_ns);
    assert_eq!(out.tenants[1].error, None);
}

fn scheduled(policy: &'static str, max_wait_ns: u64) -> SchedulingConfig {
    SchedulingConfig {
        policy,
        max_wait_ns,
        instrumented: true,
        quota_bytes: None,
    }
}

#[test]
fn mfit_holds_kernels_no_longer_than_its_cap_plus_one_kernel() {
    // Two tenants whose buffers do not fit together: MFit runs them mostly in turn.
    let pair = || vec![(program(96, 8, 1_000_000), 1.0); 2];
    let cap_ns = 2_000_000;
    let mps = run(
        pair(),
        128,
        "uvm",
        Sharing::Mps,
        SchedulingConfig::default(),
    );
    let mfit = run(pair(), 128, "uvm", Sharing::Mps, scheduled("mfit", cap_ns));
    // A hold ends at the cap, once the kernel it stops reaches its next check, or when
    // a kernel it may not stop (a re-run) ends.
    let kernel_ns = mfit
        .tenants
        .iter()
        .map(|t| t.longest_kernel_ns)
        .max()
        .unwrap();
    let waited: u64 = mfit.tenants.iter().map(|t| t.wait_ns).sum();
    assert!(waited > 0, "MFit held something");
    for t in &mfit.tenants {
        assert!(
            t.longest_wait_ns <= cap_ns + kernel_ns,
            "{}: waited {} ns, cap {cap_ns} ns, kernel {kernel_ns} ns",
            t.name,
            t.longest_wait_ns
        );
    }
    let faults = |o: &Outcome| -> u64 {
        o.tenants
            .iter()
            .map(|t| t.paging.unwrap().stats.far_faults)
            .sum()
    };
    assert!(faults(&mfit) < faults(&mps), "MFit thrashes less than MPS");
    assert!(
        mps.tenants
            .iter()
            .all(|t| t.wait_ns == 0 && t.preemptions == 0)
    );
}

#[test]
fn amfit_preempts_and_reruns_with_the_work_lost_counted() {
    let pair = || vec![(program(96, 4, 1_000_000), 1.0); 2];
    let out = run(
        pair(),
        128,
        "uvm",
        Sharing::Mps,
        scheduled("amfit", 1_000_000_000),
    );
    let preempted: u32 = out.tenants.iter().map(|t| t.preemptions).sum();
    assert!(preempted > 0);
    for t in &out.tenants {
        assert_eq!(t.preemptions > 0, t.wasted_ns > 0, "{}", t.name);
        assert_eq!(t.error, None);
    }
    // Same scenario, same outcome.
    assert_eq!(
        out,
        run(
            pair(),
            128,
            "uvm",
            Sharing::Mps,
            scheduled("amfit", 1_000_000_000)
        )
    );
}

/// A tenant in VRAM with `local_kernels` short kernels, and one whose buffer of
/// `remote_mib` fcfs puts in host memory (VRAM holds the first tenant's 16 MiB only):
/// each tenant's measured phase under `sharing`, and alone.
fn beside_a_remote_reader(
    sharing: Sharing,
    local_kernels: u32,
    remote_mib: u64,
    remote_kernels: u32,
) -> [(u64, u64); 2] {
    let none = SchedulingConfig::default;
    let local = || (program(16, local_kernels, 1 << 20), 1.0);
    let remote = || (program(remote_mib, remote_kernels, 1 << 20), 1.0);
    let pair = run(vec![local(), remote()], 16, "fcfs", sharing, none());
    let local_alone = run(vec![local()], 16, "fcfs", sharing, none());
    let remote_alone = run(vec![remote()], 16, "fcfs", sharing, none());
    assert_eq!(pair.tenants[0].remote_bytes, 0.0, "{pair:?}");
    assert!(pair.tenants[1].remote_bytes > 0.0, "{pair:?}");
    [
        (
            phase_ns(&pair.tenants[0]),
            phase_ns(&local_alone.tenants[0]),
        ),
        (
            phase_ns(&pair.tenants[1]),
            phase_ns(&remote_alone.tenants[0]),
        ),
    ]
}

#[test]
fn preemptive_slices_keep_a_slow_remote_kernel_from_holding_the_gpu() {
    // 512 MiB read over the V100's 12 GB/s PCIe: about 45 ms a kernel, twenty slices.
    let slicing = v100().time_slicing.unwrap();
    let [(local_fermi, local_alone), _] = beside_a_remote_reader(Sharing::TimeSlice, 50, 512, 60);
    let [(local, alone), (remote, remote_alone)] =
        beside_a_remote_reader(Sharing::Preemptive(slicing), 50, 512, 60);
    assert_eq!(alone, local_alone);
    // Whole kernels in turn: each of the VRAM tenant's kernels waits for a whole
    // remote one (the remote tenant has more than enough).
    assert!(local_fermi > 50 * 40_000_000, "{local_fermi}");
    // Preempted: each waits one slice and the preemption at most.
    let per_kernel_ns = slicing.slice_ns + slicing.preemption_cost_ns + alone / 50;
    assert!(
        local <= 50 * per_kernel_ns,
        "{local} vs {per_kernel_ns} a kernel"
    );
    assert!(local * 10 < local_fermi, "{local} vs {local_fermi}");
    // Nobody is faster than alone, and the remote reader pays about the VRAM tenant's
    // time and the preemptions, not more.
    assert!(local >= alone && remote >= remote_alone, "{local} {remote}");
    assert!(remote <= remote_alone + local + 60 * slicing.preemption_cost_ns);
}

#[test]
fn preemptive_slices_change_nothing_for_one_tenant() {
    let slicing = v100().time_slicing.unwrap();
    let none = SchedulingConfig::default;
    let one = || vec![(program(512, 3, 1 << 20), 1.0)];
    let sliced = run(one(), 16, "fcfs", Sharing::Preemptive(slicing), none());
    assert_eq!(sliced, run(one(), 16, "fcfs", Sharing::TimeSlice, none()));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// Under preemptive slices no tenant is faster than alone, whatever the lengths of
    /// the kernels on either side and the slice's (the engine's invariants hold too).
    #[test]
    fn preemptive_slices_make_no_tenant_faster_than_alone(
        local_kernels in 1u32..40,
        remote_mib in 17u64..400,
        remote_kernels in 1u32..6,
        slice_us in 100u64..5_000,
        cost_us in 0u64..200,
    ) {
        let slicing = TimeSlicing { slice_ns: slice_us * 1000, preemption_cost_ns: cost_us * 1000 };
        let tenants = beside_a_remote_reader(
            Sharing::Preemptive(slicing), local_kernels, remote_mib, remote_kernels,
        );
        for (shared, alone) in tenants {
            proptest::prop_assert!(shared >= alone, "{} < {}", shared, alone);
        }
    }
}
