use super::*;
use crate::gdev;
use crate::preset::{self, CudaRuntime};
use crate::program::{Access, AccessOrder, Op, Program};
use gpuswap_core::{MIB, PolicySettings};
use proptest::prelude::*;

/// The GTX 480 with NVIDIA's runtime: these tests pin the engine's copy and link
/// mechanics, which the testbed's Gdev copy path would hide (its own tests below).
fn gtx480() -> Preset {
    Preset {
        runtime: CudaRuntime::Nvidia,
        ..preset::find("gtx480").unwrap()
    }
}

fn config(tenants: Vec<TenantSpec>, vram_bytes: u64) -> SimConfig {
    let mut config = SimConfig::new(
        gtx480(),
        vram_bytes,
        PolicySettings::named("native"),
        tenants,
    );
    config.check_invariants = true;
    config
}

fn tenant(name: &str, program: Program) -> TenantSpec {
    TenantSpec::new(name, "test", program)
}

/// One buffer, `kernels` launches reading it whole, then sync and free.
fn kernels_program(bytes: u64, kernels: u32) -> Program {
    let mut p = Program::default();
    let a = p.buffer("a", bytes);
    p.ops = vec![
        Op::Alloc(a),
        Op::PhaseStart,
        Op::Repeat {
            times: kernels,
            body: vec![Op::Launch(Kernel {
                name: "read".into(),
                ops: 0,
                accesses: vec![Access::uniform(a, bytes, 0)],
                phases: Vec::new(),
                outer_loop: Default::default(),
            })],
        },
        Op::Sync,
        Op::PhaseEnd,
        Op::Free(a),
    ];
    p
}

/// The kernel time the timing model gives `kernels_program`'s kernel: launch + VRAM term
/// of the app buffer and the runtime's small accesses.
fn read_kernel_ns(p: &Preset, bytes: u64) -> u64 {
    let sms = u64::from(p.sms);
    // The stack's line read and written, the code and the constants read.
    let (system_reads, system_writes) = (sms * (128 + 4096 + 512), sms * 128);
    let mut traffic = Traffic::default();
    traffic.add_part(
        AccessOrder::Linear,
        (bytes + system_reads) as f64,
        system_writes as f64,
        1.0,
    );
    timing::fixed_ns(p, 0, &traffic)
}

#[test]
fn single_kernel_time_is_driver_calls_plus_kernel() {
    let p = gtx480();
    let out = simulate(config(
        vec![tenant("a", kernels_program(64 * MIB, 1))],
        1 << 30,
    ))
    .unwrap();
    let t = &out.tenants[0];
    assert_eq!(t.error, None);
    // 4 allocations (3 runtime buffers + "a") and 4 frees, each one driver call; the
    // sync waits for the kernel, which starts when it is launched.
    let kernel_ns = read_kernel_ns(&p, 64 * MIB);
    assert_eq!(t.total_ns(), 8 * p.driver_call_ns + kernel_ns);
    assert_eq!(
        t.phase_ns,
        Some((4 * p.driver_call_ns, 4 * p.driver_call_ns + kernel_ns))
    );
    assert_eq!(t.alloc_latencies_ns, vec![p.driver_call_ns; 4]);
    let app_and_runtime = 64 * MIB + p.runtime_bytes();
    assert_eq!(t.vram_peak_bytes, app_and_runtime);
    assert_eq!(t.remote_bytes, 0.0);
    // The last free returns the memory one driver call before the tenant ends.
    assert_eq!(
        t.vram_timeline.last(),
        Some(&(t.end_ns - p.driver_call_ns, 0))
    );
}

#[test]
fn back_to_back_kernels_queue_on_the_compute_engine() {
    let p = gtx480();
    let out = simulate(config(
        vec![tenant("a", kernels_program(64 * MIB, 10))],
        1 << 30,
    ))
    .unwrap();
    let (start, end) = out.tenants[0].phase_ns.unwrap();
    // Launches take 2.5 us to enqueue, kernels much longer: the GPU is the bottleneck.
    assert_eq!(end - start, 10 * read_kernel_ns(&p, 64 * MIB));
}

#[test]
fn compute_engine_alternates_between_tenants() {
    let program = kernels_program(16 * MIB, 20);
    let out = simulate(config(
        vec![tenant("a", program.clone()), tenant("b", program)],
        1 << 30,
    ))
    .unwrap();
    let kernel_ns = read_kernel_ns(&gtx480(), 16 * MIB);
    let (a, b) = (&out.tenants[0], &out.tenants[1]);
    // Round-robin at kernel granularity: both finish within about one kernel of each
    // other (first-come-first-served would finish a 20 kernels earlier), and together
    // they take the time of 40 kernels.
    assert!(
        a.end_ns.abs_diff(b.end_ns) <= kernel_ns + 10_000,
        "{} vs {}",
        a.end_ns,
        b.end_ns
    );
    let (a_start, _) = a.phase_ns.unwrap();
    assert!(a.end_ns.max(b.end_ns) - a_start >= 40 * kernel_ns);
}

/// One 57 MiB buffer and, after `host_ns` of CPU work, a measured phase of one 57 MB
/// memcpy in `direction`: 10 ms of transfer at the GTX 480's 5.7 GB/s.
fn copy_program(direction: CopyDirection, host_ns: u64) -> Program {
    let mut program = Program::default();
    let a = program.buffer("a", 57 * MIB);
    program.ops = vec![Op::Alloc(a)];
    if host_ns > 0 {
        program.ops.push(Op::Cpu { ns: host_ns });
    }
    program.ops.extend([
        Op::PhaseStart,
        Op::Copy {
            slot: a,
            direction,
            bytes: 57_000_000,
        },
        Op::PhaseEnd,
        Op::Free(a),
    ]);
    program
}

#[test]
fn copies_take_setup_plus_transfer_and_share_the_link() {
    let p = gtx480();
    let program = copy_program(CopyDirection::HostToDevice, 0);
    let out = simulate(config(vec![tenant("a", program.clone())], 1 << 30)).unwrap();
    let (s, e) = out.tenants[0].phase_ns.unwrap();
    // 57 MB at 5.7 GB/s = 10 ms, plus the 2.5 us setup.
    assert_eq!(e - s, p.copy_setup_ns + 10_000_000);
    // The link toward the device moved 57 MB in the run, nothing went to the host.
    let (to_device, to_host) = out.link_utilization;
    let expected = 57e6 / (p.link.h2d_bytes_per_s * out.makespan_ns as f64 / 1e9);
    assert!(
        (to_device - expected).abs() < 1e-9,
        "{to_device} vs {expected}"
    );
    assert!(to_device > 0.9 && to_device <= 1.0, "{to_device}");
    assert_eq!(to_host, 0.0);
    // Two tenants: the single copy engine serializes the copies.
    let out = simulate(config(
        vec![tenant("a", program.clone()), tenant("b", program)],
        1 << 30,
    ))
    .unwrap();
    let ends: Vec<u64> = out.tenants.iter().map(|t| t.phase_ns.unwrap().1).collect();
    assert!(ends[1] >= ends[0] + 10_000_000, "{ends:?}");
}

#[test]
fn copies_into_host_resident_buffers_cross_the_link_both_ways() {
    let p = gtx480();
    for direction in [CopyDirection::HostToDevice, CopyDirection::DeviceToHost] {
        let program = copy_program(direction, 0);
        // FCFS with VRAM for the runtime's buffers only: "a" lives in host memory.
        let mut cfg = config(vec![tenant("a", program)], runtime_bytes());
        cfg.manager.policy = PolicySettings::named("fcfs");
        let out = simulate(cfg).unwrap();
        let t = &out.tenants[0];
        assert_eq!(t.error, None);
        let (s, e) = t.phase_ns.unwrap();
        // Both directions carry the 57 MB at once: host to GPU and back to host memory.
        assert_eq!(e - s, p.copy_setup_ns + 10_000_000, "{direction:?}");
        let (to_device, to_host) = out.link_utilization;
        let busy_s = out.makespan_ns as f64 / 1e9;
        let to_device_expected = 57e6 / (p.link.h2d_bytes_per_s * busy_s);
        let to_host_expected = 57e6 / (p.link.d2h_bytes_per_s * busy_s);
        assert!(
            (to_device - to_device_expected).abs() < 1e-9,
            "{direction:?}: {to_device}"
        );
        assert!(
            (to_host - to_host_expected).abs() < 1e-9,
            "{direction:?}: {to_host}"
        );
    }
}

#[test]
fn a_kernel_reading_host_memory_crowds_out_a_copy() {
    let p = gtx480();
    // "reader" keeps a kernel reading 1 GiB of host memory running for about 190 ms;
    // "copier" uploads 57 MB (10 ms alone) while it runs.
    let mut reader = Program::default();
    let big = reader.buffer("big", 1 << 30);
    reader.ops = vec![
        Op::Alloc(big),
        Op::Launch(Kernel {
            name: "read".into(),
            ops: 0,
            accesses: vec![Access::uniform(big, 1 << 30, 0)],
            phases: Vec::new(),
            outer_loop: Default::default(),
        }),
        Op::Sync,
        Op::Free(big),
    ];
    let copier = copy_program(CopyDirection::HostToDevice, 5_000_000);
    // FCFS with VRAM for both runtimes and "a": "big" lives in host memory.
    let mut cfg = config(
        vec![tenant("copier", copier), tenant("reader", reader)],
        2 * runtime_bytes() + 57 * MIB,
    );
    cfg.manager.policy = PolicySettings::named("fcfs");
    let out = simulate(cfg).unwrap();
    assert_eq!(out.tenants[1].error, None);
    let (s, e) = out.tenants[0].phase_ns.unwrap();
    // The kernel keeps 15 SMs x 32 line reads = 60 KiB pending, the copy engine the
    // link's bandwidth-delay product in 512-byte requests (8 = 4 KiB): the copy gets a
    // sixteenth of the link until the kernel ends.
    let kernel_weight = timing::kernel_pending_bytes(&p);
    let dma_weight = timing::dma_pending_bytes(&p);
    assert_eq!((kernel_weight, dma_weight), (61_440.0, 4096.0));
    let copy_ns = e - s - p.copy_setup_ns;
    assert!(
        copy_ns > 15 * 10_000_000 && copy_ns < 16 * 10_000_000 + 1_000,
        "{copy_ns}"
    );
}

#[test]
fn a_kernel_with_link_traffic_costs_one_completion_event() {
    // The same program with its buffer in VRAM and (FCFS, no room) in host memory: the
    // remote kernels end at the later of their fixed part and their link flow, in one
    // event, so both runs take as many events.
    let run = |vram_bytes: u64| {
        let mut cfg = config(vec![tenant("a", kernels_program(16 * MIB, 20))], vram_bytes);
        cfg.manager.policy = PolicySettings::named("fcfs");
        simulate(cfg).unwrap()
    };
    let local = run(runtime_bytes() + 16 * MIB);
    let remote = run(runtime_bytes());
    assert_eq!(local.tenants[0].remote_bytes, 0.0);
    assert!(remote.tenants[0].remote_bytes > 0.0);
    assert_eq!(remote.events, local.events);
}

#[test]
fn native_out_of_memory_fails_only_the_newcomer() {
    let p = gtx480();
    let runtime = p.runtime_bytes();
    let vram = 2 * runtime + 100 * MIB;
    let mut late = tenant("late", kernels_program(60 * MIB, 5));
    late.start_ns = 1_000_000;
    let out = simulate(config(
        vec![tenant("early", kernels_program(60 * MIB, 50)), late],
        vram,
    ))
    .unwrap();
    assert_eq!(out.tenants[0].error, None);
    let error = out.tenants[1].error.as_deref().unwrap();
    assert!(
        error.contains("\"a\"") && error.contains("out of memory"),
        "{error}"
    );
    assert!(out.tenants[1].end_ns < out.tenants[0].end_ns);
    // The failed tenant's memory is back: its runtime buffers were released.
    assert_eq!(out.tenants[1].vram_timeline.last().unwrap().1, 0);
}

#[test]
fn same_config_same_outcome() {
    let program = kernels_program(16 * MIB, 7);
    let cfg = config(
        vec![tenant("a", program.clone()), tenant("b", program)],
        1 << 30,
    );
    assert_eq!(simulate(cfg.clone()).unwrap(), simulate(cfg).unwrap());
}

/// Random programs: sequences of allocations, frees, copies, kernels, syncs and CPU work.
fn arb_program() -> impl Strategy<Value = Program> {
    let op = prop_oneof![
        (1u64..64).prop_map(|mib| (0u8, mib)),
        Just((1u8, 0)),
        (1u64..32).prop_map(|mib| (2u8, mib)),
        (1u64..100).prop_map(|mib| (3u8, mib)),
        Just((4u8, 0)),
        (1u64..1000).prop_map(|us| (5u8, us)),
    ];
    proptest::collection::vec(op, 1..30).prop_map(|ops| {
        let mut p = Program::default();
        let mut live: Vec<usize> = Vec::new();
        for (kind, n) in ops {
            match kind {
                0 => {
                    let slot = p.buffer(format!("b{}", p.buffers.len()), n * MIB);
                    p.ops.push(Op::Alloc(slot));
                    live.push(slot);
                }
                1 => {
                    if let Some(slot) = live.pop() {
                        p.ops.push(Op::Free(slot));
                    }
                }
                2 => {
                    if let Some(&slot) = live.last() {
                        let bytes = (n * MIB).min(p.buffers[slot].bytes);
                        p.ops.push(Op::Copy {
                            slot,
                            direction: CopyDirection::HostToDevice,
                            bytes,
                        });
                    }
                }
                3 => p.ops.push(Op::Launch(Kernel {
                    name: "k".into(),
                    ops: n * 1_000_000,
                    accesses: live
                        .iter()
                        .map(|&s| Access::uniform(s, n * MIB, n * MIB / 2))
                        .collect(),
                    phases: Vec::new(),
                    outer_loop: Default::default(),
                })),
                4 => p.ops.push(Op::Sync),
                _ => p.ops.push(Op::Cpu { ns: n * 1000 }),
            }
        }
        p.ops.extend(live.into_iter().rev().map(Op::Free));
        p
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]
    /// Time never goes backwards and VRAM accounting is conserved after every event
    /// (the engine checks both and fails the run otherwise); every tenant ends, and one
    /// that did not fail ends with nothing allocated.
    #[test]
    fn engine_invariants_hold(programs in proptest::collection::vec(arb_program(), 1..4), vram_mib in 60u64..400, starts in proptest::collection::vec(0u64..5_000_000, 4)) {
        let tenants = programs.into_iter().enumerate().map(|(i, program)| TenantSpec {
            start_ns: starts[i],
            ..TenantSpec::new(format!("t{i}"), "random", program)
        }).collect();
        let out = simulate(config(tenants, vram_mib * MIB));
        prop_assert!(out.is_ok(), "{:?}", out.err());
        let out = out.unwrap();
        for t in &out.tenants {
            prop_assert!(t.end_ns >= t.start_ns);
            prop_assert!(t.vram_timeline.windows(2).all(|w| w[0].0 <= w[1].0));
            prop_assert_eq!(t.vram_timeline.last().unwrap().1, 0);
            prop_assert!(t.vram_peak_bytes <= vram_mib * MIB);
        }
    }
}

/// VRAM the runtime's system buffers take per tenant on the GTX 480.
fn runtime_bytes() -> u64 {
    let p = gtx480();
    p.runtime_bytes()
}

/// A program that writes one buffer with `kernels` launches of about `ms` each, waiting
/// for each (an iterative app that checks its result every step).
fn writer_program(bytes: u64, kernels: u32, ms: u64) -> Program {
    let mut p = Program::default();
    let a = p.buffer("a", bytes);
    let ops_per_ms = (gtx480().ops_per_s / 1e3) as u64;
    p.ops = vec![
        Op::Alloc(a),
        Op::PhaseStart,
        Op::Repeat {
            times: kernels,
            body: vec![
                Op::Launch(Kernel {
                    name: "write".into(),
                    ops: ms * ops_per_ms,
                    accesses: vec![Access::uniform(a, bytes, bytes)],
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

fn squeeze(mode: &str, unsafe_skip_suspend: bool) -> Result<Outcome, SimError> {
    squeeze_with(mode, unsafe_skip_suspend, Faults::default())
}

fn squeeze_with(
    mode: &str,
    unsafe_skip_suspend: bool,
    faults: Faults,
) -> Result<Outcome, SimError> {
    let mut late = tenant("late", writer_program(32 * MIB, 5, 1));
    late.start_ns = 5_000_000;
    let mut cfg = config(
        vec![tenant("early", writer_program(48 * MIB, 40, 1)), late],
        2 * runtime_bytes() + 48 * MIB,
    );
    cfg.manager.policy = PolicySettings::new(mode, 3).unwrap();
    // No return check within the run: the one pause is the eviction's.
    cfg.manager.return_interval_ns = 1_000_000_000;
    cfg.unsafe_skip_suspend = unsafe_skip_suspend;
    cfg.faults = faults;
    simulate(cfg)
}

/// The squeeze under gpuswap with one injected fault.
fn squeeze_faulted(faults: Faults) -> Outcome {
    squeeze_with("gpuswap", false, faults).expect("the run keeps its invariants")
}

#[test]
fn a_victim_crashing_mid_relocation_frees_its_memory_and_the_newcomer_runs_on() {
    for at in [
        CrashPoint::Suspend(1),
        CrashPoint::Copy(1),
        CrashPoint::Copy(3),
    ] {
        let out = squeeze_faulted(Faults {
            crashes: vec![Crash { tenant: 0, at }],
            ..Faults::default()
        });
        let (early, late) = (&out.tenants[0], &out.tenants[1]);
        assert!(
            early.error.as_deref().unwrap().contains("injected fault"),
            "{at:?}"
        );
        assert_eq!(late.error, None, "{at:?}");
        // Its memory went with it: nothing of it stays accounted.
        assert_eq!(early.vram_timeline.last().unwrap().1, 0, "{at:?}");
        assert!(early.end_ns < late.end_ns);
    }
}

#[test]
fn a_newcomer_crashing_while_its_eviction_runs_gets_nothing_and_the_victim_resumes() {
    let out = squeeze_faulted(Faults {
        crashes: vec![Crash {
            tenant: 1,
            at: CrashPoint::Alloc(4),
        }],
        ..Faults::default()
    });
    let (early, late) = (&out.tenants[0], &out.tenants[1]);
    assert!(late.error.as_deref().unwrap().contains("injected fault"));
    assert_eq!(early.error, None);
    assert_eq!(
        early.pauses.len(),
        1,
        "the victim was suspended once and resumed"
    );
    assert_eq!(late.vram_timeline.last().unwrap().1, 0);
}

#[test]
fn copies_that_always_fail_kill_the_victim_after_every_attempt() {
    let out = squeeze_faulted(Faults {
        copy_failure: 1.0,
        ..Faults::default()
    });
    let (early, late) = (&out.tenants[0], &out.tenants[1]);
    let error = early.error.as_deref().unwrap();
    assert!(
        error.contains(&format!("failed {} times", gpuswap_core::MAX_COPY_ATTEMPTS)),
        "{error}"
    );
    assert_eq!(early.bytes_evicted, 0, "no copy ever completed");
    // The newcomer may become a victim of its own next allocation (its stack goes
    // first) and die the same way; it never fails otherwise.
    assert!(
        late.error.as_ref().is_none_or(
            |e| e.contains(&format!("failed {} times", gpuswap_core::MAX_COPY_ATTEMPTS))
        ),
        "{:?}",
        late.error
    );
}

#[test]
fn shuffled_ties_and_late_answers_keep_every_tenant_running() {
    let base = squeeze("gpuswap", false).unwrap();
    for seed in 0..20 {
        let out = squeeze_faulted(Faults {
            seed,
            shuffle_ties: true,
            max_answer_delay_ns: 2_000_000,
            max_timer_lateness_ns: 100_000_000,
            ..Faults::default()
        });
        assert!(out.tenants.iter().all(|t| t.error.is_none()), "seed {seed}");
        assert_eq!(out.tenants[0].bytes_evicted, base.tenants[0].bytes_evicted);
    }
}

#[test]
fn gpuswap_keeps_both_tenants_running_where_native_fails_one() {
    let native = squeeze("native", false).unwrap();
    assert!(native.tenants[1].error.is_some());
    let out = squeeze("gpuswap", false).unwrap();
    for t in &out.tenants {
        assert_eq!(t.error, None, "{}", t.name);
    }
    let (early, late) = (&out.tenants[0], &out.tenants[1]);
    // The early tenant held more than half: it was the victim, its data went to host
    // memory and its kernels then reached part of it remotely.
    assert!(early.bytes_evicted >= 16 * MIB, "{}", early.bytes_evicted);
    assert!(early.remote_bytes > 0.0);
    assert_eq!(early.pauses.len(), 1);
    assert!(early.pauses[0].pause_ns > 0);
    assert!(
        !early.pauses[0].own_allocation,
        "a victim of the late tenant"
    );
    // The late tenant's allocation waited for the eviction.
    assert_eq!(late.evictions.len(), 1);
    let e = late.evictions[0];
    assert_eq!(
        e.total_ns,
        e.policy_ns + e.dma_setup_ns + e.dma_ns + e.waiting_ns
    );
    assert!(e.dma_ns > 0 && e.dma_setup_ns > 0 && e.policy_ns > 0);
}

/// One tenant whose second 40 MiB buffer does not fit beside its first in 48 MiB: its
/// own allocation evicts its own chunks.
#[test]
fn a_tenant_moved_for_its_own_allocation_is_an_allocator_not_a_victim() {
    let mut p = Program::default();
    let (a, b) = (p.buffer("a", 40 * MIB), p.buffer("b", 40 * MIB));
    let write = |slot| {
        Op::Launch(Kernel {
            name: "write".into(),
            ops: 0,
            accesses: vec![Access::uniform(slot, 40 * MIB, 40 * MIB)],
            phases: Vec::new(),
            outer_loop: Default::default(),
        })
    };
    p.ops = vec![Op::Alloc(a), write(a), Op::Alloc(b), write(b), Op::Sync];
    let mut cfg = config(vec![tenant("alone", p)], runtime_bytes() + 48 * MIB);
    cfg.manager.policy = PolicySettings::new("gpuswap", 3).unwrap();
    let report = crate::report::run_and_report("own", 1, &cfg).unwrap();
    let t = &report.tenants[0];
    assert_eq!(t.error, None);
    assert!(
        t.bytes_evicted > 0 && t.eviction_latency_ns.count == 1,
        "{t:?}"
    );
    // Its pause is inside its allocation's latency, so it is no victim's.
    assert_eq!(t.victim_pause_ns.count, 0, "{t:?}");
    let out = simulate(cfg).unwrap();
    assert!(!out.tenants[0].pauses.is_empty());
    assert!(out.tenants[0].pauses.iter().all(|p| p.own_allocation));
}

#[test]
fn relocation_without_suspension_loses_a_write() {
    let Err(SimError::Invariant(err)) = squeeze("gpuswap", true) else {
        panic!("expected a broken invariant");
    };
    assert!(err.message.contains("lost write"), "{err}");
    // The real mechanism suspends the victim and never loses one.
    assert!(squeeze("gpuswap", false).is_ok());
}

#[test]
fn gpuswap_with_ample_memory_equals_native() {
    let program = writer_program(64 * MIB, 20, 1);
    let tenants = vec![tenant("a", program.clone()), tenant("b", program)];
    let native = simulate(config(tenants.clone(), 1 << 30)).unwrap();
    let mut cfg = config(tenants, 1 << 30);
    cfg.manager.policy = PolicySettings::new("gpuswap", 3).unwrap();
    assert_eq!(simulate(cfg).unwrap(), native);
}

#[test]
fn evicted_data_returns_after_the_other_tenant_leaves() {
    let mut late = tenant("late", writer_program(32 * MIB, 2, 1));
    late.start_ns = 5_000_000;
    // The early tenant runs for about 3 s, long enough for return checks after the late
    // tenant has left.
    let mut cfg = config(
        vec![tenant("early", writer_program(48 * MIB, 3000, 1)), late],
        2 * runtime_bytes() + 48 * MIB,
    );
    cfg.manager.policy = PolicySettings::new("gpuswap", 3).unwrap();
    let out = simulate(cfg).unwrap();
    let early = &out.tenants[0];
    assert!(early.bytes_evicted > 0);
    assert_eq!(early.bytes_returned, early.bytes_evicted);
    assert_eq!(early.pauses.len(), 2, "one eviction, one return");
}

#[test]
fn gdev_costs_time_even_with_ample_memory() {
    let program = writer_program(16 * MIB, 50, 1);
    let tenants = vec![tenant("a", program.clone()), tenant("b", program)];
    let native = simulate(config(tenants.clone(), 1 << 30)).unwrap();
    let mut cfg = config(tenants, 1 << 30);
    cfg.manager.policy = PolicySettings::new("gdev", 3).unwrap();
    let gdev = simulate(cfg).unwrap();
    for (n, g) in native.tenants.iter().zip(&gdev.tenants) {
        assert_eq!(g.error, None);
        // 50 launches, each with the scheduler's cost (a little may overlap the other
        // tenant's kernels).
        assert!(
            g.total_ns() >= n.total_ns() + 40 * gtx480().gdev_launch_ns,
            "{} vs {}",
            g.total_ns(),
            n.total_ns()
        );
        assert_eq!(g.bytes_evicted, 0);
    }
}

/// Gdev's scheduler (`gdev_schedule_compute` and `gdev_select_next_compute`,
/// `common/gdev_sched.c`): a context keeps the device while it has launches in flight,
/// up to `GDEV_INSTANCES_LIMIT`; the other's launches wait for its count to reach zero.
/// (`manager.launch_limit`.)
#[test]
fn gdevs_current_context_keeps_the_device_while_it_has_launches_in_flight() {
    let p = gtx480();
    let (kernels, bytes) = (20, 64 * MIB);
    let run = |limit: Option<&str>| {
        let program = kernels_program(bytes, kernels);
        let mut cfg = config(
            vec![tenant("a", program.clone()), tenant("b", program)],
            1 << 30,
        );
        cfg.manager.policy = PolicySettings::new("gdev", 2).unwrap();
        if let Some(limit) = limit {
            cfg.manager.policy = cfg.manager.policy.with("launch_limit", limit);
        }
        let out = simulate(cfg).unwrap();
        let phase = |t: usize| out.tenants[t].phase_ns.unwrap();
        (phase(0), phase(1))
    };
    let (kernel, gate) = (read_kernel_ns(&p, bytes), p.gdev_launch_ns);
    // Limit 1: every launch waits for the one before it, whoever's, and passes the
    // scheduler with the device idle: the two alternate and end one kernel apart.
    let ((_, a_end), (_, b_end)) = run(Some("1"));
    assert!(
        b_end.abs_diff(a_end) <= kernel + 2 * gate,
        "{a_end} vs {b_end}"
    );
    assert!(b_end >= 2 * u64::from(kernels) * (kernel + gate), "{b_end}");
    // Limit 32 (mainline): the first context's queued kernels run back to back, each
    // passing the scheduler while the one before it runs; the other waits for all 20.
    let ((a_start, a_end), (_, b_end)) = run(Some("32"));
    let back_to_back = u64::from(kernels) * kernel + 2 * gate;
    assert!(a_end - a_start <= back_to_back, "{}", a_end - a_start);
    assert!(
        b_end >= a_end + u64::from(kernels - 1) * kernel,
        "{a_end} vs {b_end}"
    );
    assert!(b_end <= 2 * back_to_back + gate, "{b_end}");
    // Limit 4: the context at its limit waits for its count to reach zero, and the
    // other, queued before it, goes first: batches of four alternate.
    let ((_, a_end), (_, b_end)) = run(Some("4"));
    let batch = 4 * kernel;
    assert!(
        b_end - a_end >= batch - kernel && b_end - a_end <= batch + 2 * gate,
        "{a_end} vs {b_end}"
    );
    // The default is the limit of 1.
    assert_eq!(run(None), run(Some("1")));
}

#[test]
fn a_gdev_copy_holds_the_device_against_the_other_tenants_kernels() {
    let p = gtx480();
    let copier = copy_program(CopyDirection::HostToDevice, 0);
    let mut kernels = tenant("kernels", writer_program(16 * MIB, 5, 1));
    kernels.start_ns = 1_000_000;
    let run = |mode: &str| {
        let mut cfg = config(
            vec![tenant("copier", copier.clone()), kernels.clone()],
            1 << 30,
        );
        cfg.manager.policy = PolicySettings::new(mode, 2).unwrap();
        let out = simulate(cfg).unwrap();
        let copy_end = out.tenants[0].phase_ns.unwrap().1;
        (copy_end, out.tenants[1].phase_ns.unwrap())
    };
    // Native: the five 1 ms kernels run while the 10 ms copy moves.
    let (copy_end, (_, kernels_end)) = run("native");
    assert!(kernels_end < copy_end, "{kernels_end} vs {copy_end}");
    // Gdev: the copy holds the device; the kernels start after it. The staged copy is
    // also slower than the plain DMA: 256 KiB pieces at the slower of CPU copy and DMA.
    let (copy_end, (_, kernels_end)) = run("gdev");
    assert!(
        kernels_end > copy_end + 5_000_000,
        "{kernels_end} vs {copy_end}"
    );
    let staged = gdev::copy_cost(
        &p,
        CopyDirection::HostToDevice,
        57_000_000,
        57 * MIB,
        p.gdev_launch_ns,
    );
    assert!(
        copy_end as f64 > 57e6 / staged.cap_bytes_per_s * 1e9,
        "{copy_end}"
    );
}

#[test]
fn gdev_swaps_whole_buffers_and_rejects_tenants_that_cannot_fit() {
    let mut late = tenant("late", writer_program(32 * MIB, 5, 1));
    late.start_ns = 5_000_000;
    let vram = 2 * runtime_bytes() + 48 * MIB;
    let mut cfg = config(
        vec![
            tenant("early", writer_program(48 * MIB, 40, 1)),
            late.clone(),
        ],
        vram,
    );
    cfg.manager.policy = PolicySettings::new("gdev", 3).unwrap();
    let out = simulate(cfg).unwrap();
    for t in &out.tenants {
        assert_eq!(t.error, None, "{}", t.name);
        assert!(
            t.bytes_evicted > 0 && t.bytes_returned > 0,
            "{} swapped",
            t.name
        );
        assert_eq!(
            t.remote_bytes, 0.0,
            "gdev never accesses host memory remotely"
        );
    }
    // A tenant whose buffers exceed VRAM gets an error; the other one runs on.
    let mut cfg = config(
        vec![
            tenant("small", writer_program(16 * MIB, 10, 1)),
            tenant("huge", writer_program(200 * MIB, 5, 1)),
        ],
        vram,
    );
    cfg.manager.policy = PolicySettings::new("gdev", 3).unwrap();
    let out = simulate(cfg).unwrap();
    assert_eq!(out.tenants[0].error, None);
    assert!(
        out.tenants[1]
            .error
            .as_deref()
            .unwrap()
            .contains("gdev cannot launch")
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(48)))]
    /// Random programs under every mode with too little VRAM: accounting conserved after
    /// every event, time monotonic, no lost write, everybody ends.
    #[test]
    fn gpuswap_invariants_hold(
        programs in proptest::collection::vec(arb_program(), 2..4),
        vram_mib in 8u64..200,
        policy in prop_oneof![Just("random"), Just("priority-buffer")],
        mode in prop_oneof![Just("gpuswap"), Just("fcfs"), Just("static"), Just("gdev")],
    ) {
        let tenants = programs.into_iter().enumerate().map(|(i, program)| TenantSpec {
            start_ns: i as u64 * 1_000_000,
            ..TenantSpec::new(format!("t{i}"), "random", program)
        }).collect();
        let mut cfg = config(tenants, 3 * runtime_bytes() + vram_mib * MIB);
        cfg.manager.policy = PolicySettings::new(mode, 3).unwrap();
        if mode == "gpuswap" {
            cfg.manager.policy = cfg.manager.policy.clone().with("chunk_policy", policy);
        }
        let out = simulate(cfg);
        prop_assert!(out.is_ok(), "{:?}", out.err());
        for t in out.unwrap().tenants {
            // Only gdev refuses tenants, those whose buffers cannot fit in VRAM at all.
            let refused = mode == "gdev" && t.error.as_deref().is_some_and(|e| e.contains("gdev cannot launch"));
            prop_assert!(t.error.is_none() || refused, "{:?}", t.error);
        }
    }
}

/// A tenant that holds `bytes` and mostly computes on the CPU, launching a light kernel
/// every 100 ms for about `seconds`.
fn idle_program(bytes: u64, seconds: u32) -> Program {
    let mut p = Program::default();
    let a = p.buffer("a", bytes);
    p.ops = vec![
        Op::Alloc(a),
        Op::Repeat {
            times: seconds * 10,
            body: vec![
                Op::Launch(Kernel {
                    name: "touch".into(),
                    ops: 1000,
                    accesses: vec![Access::uniform(a, 4096, 0)],
                    phases: Vec::new(),
                    outer_loop: Default::default(),
                }),
                Op::Sync,
                Op::Cpu { ns: 100_000_000 },
            ],
        },
        Op::Free(a),
    ];
    p
}

fn victim_of(victim: &str) -> Vec<u64> {
    let mut c = tenant("c", writer_program(32 * MIB, 5, 1));
    c.start_ns = 2_500_000_000;
    let tenants = vec![
        tenant("busy", writer_program(20 * MIB, 4000, 1)),
        tenant("idle", idle_program(80 * MIB, 4)),
        c,
    ];
    // 16 MiB short when c arrives; no stack to give (the stacks fit in the extra room
    // only if nobody else is evicted first, so priorities are flattened below).
    let mut cfg = config(tenants, 3 * runtime_bytes() + 116 * MIB);
    cfg.manager.policy = PolicySettings::new("gpuswap", 3).unwrap();
    cfg.manager.policy = cfg.manager.policy.clone().with("chunk_policy", "random");
    cfg.manager.policy = cfg.manager.policy.clone().with("victim", victim);
    let out = simulate(cfg).unwrap();
    out.tenants.iter().map(|t| t.bytes_evicted).collect()
}

#[test]
fn victim_policies_pick_by_share_or_by_access_rate() {
    // Largest share: the idle tenant holds the most.
    let evicted = victim_of("largest-share");
    assert!(evicted[1] >= 16 * MIB && evicted[0] == 0, "{evicted:?}");
    // Access rate: the busy tenant makes the most accesses per second.
    let evicted = victim_of("access-rate");
    assert!(evicted[0] >= 16 * MIB && evicted[1] == 0, "{evicted:?}");
    // Performance: the idle tenant barely slows down per byte it holds... and holds
    // more than 1/n: it goes first.
    let evicted = victim_of("performance");
    assert!(evicted[1] >= 16 * MIB, "{evicted:?}");
}

#[test]
fn reverse_swapping_brings_hot_chunks_back() {
    // One tenant with a hot buffer (read by every kernel) and a cold one (never read);
    // random eviction puts some hot chunks in host memory; with reference bits they come
    // back in exchange for cold ones, so the tenant reads less remotely.
    let remote = |policy: &str, preset: &str| {
        let mut p = Program::default();
        let hot = p.buffer("hot", 32 * MIB);
        let cold = p.buffer("cold", 32 * MIB);
        p.ops = vec![
            Op::Alloc(hot),
            Op::Alloc(cold),
            Op::Repeat {
                times: 400,
                body: vec![
                    Op::Launch(Kernel {
                        name: "k".into(),
                        ops: 0,
                        accesses: vec![Access::uniform(hot, 32 * MIB, 0)],
                        phases: Vec::new(),
                        outer_loop: Default::default(),
                    }),
                    Op::Sync,
                ],
            },
            Op::Free(cold),
            Op::Free(hot),
        ];
        let mut late = tenant("late", writer_program(64 * MIB, 100, 1));
        late.start_ns = 1_000_000;
        let mut cfg = config(vec![tenant("a", p), late], 2 * runtime_bytes() + 96 * MIB);
        cfg.preset = preset::find(preset).unwrap();
        cfg.manager.policy = PolicySettings::new("gpuswap", 3).unwrap();
        cfg.manager.policy = cfg.manager.policy.clone().with("chunk_policy", policy);
        // Returns would bring chunks back for either policy: the test is of the swaps.
        cfg.manager.return_interval_ns = 1_000_000_000;
        simulate(cfg).unwrap().tenants[0].remote_bytes
    };
    let random = remote("random", "gtx480-refbits");
    let swapped = remote("reverse-swap", "gtx480-refbits");
    assert!(random > 0.0);
    // Well below random, not to zero: the swaps' copies share the link with the other
    // tenant's remote writes, weighted by pending requests, so they land late.
    assert!(
        swapped < random * 0.7,
        "reverse swap {swapped} vs random {random}"
    );
}

#[test]
fn runs_stop_at_their_limits_and_times_near_the_end_of_time_do_not_overflow() {
    // Many events: the event limit.
    let mut cfg = config(vec![tenant("a", kernels_program(MIB, 100_000))], 1 << 30);
    cfg.limits.max_events = 1_000;
    match simulate(cfg) {
        Err(SimError::Limit(l)) => {
            assert_eq!(l.limit, Limit::Events);
            assert_eq!(l.events, 1_000);
        }
        other => panic!("expected the event limit, got {other:?}"),
    }
    // A start and a host computation near u64::MAX: the time limit, not a wrapped clock.
    let mut late = tenant("late", kernels_program(MIB, 1));
    late.start_ns = u64::MAX - 10;
    let busy = Program {
        ops: vec![Op::Cpu { ns: u64::MAX }],
        ..Default::default()
    };
    for tenants in [vec![late], vec![tenant("busy", busy)]] {
        match simulate(config(tenants, 1 << 30)) {
            Err(SimError::Limit(l)) => assert_eq!(l.limit, Limit::SimTime, "{l}"),
            other => panic!("expected the time limit, got {other:?}"),
        }
    }
}

/// A property test's case count: `default` in CI, or `PROPTEST_CASES` when set, so a
/// long run can look harder than CI does.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A tenant sweeping `mib` of managed memory `passes` times with a linear kernel each
/// pass, in mode `uvm` with `vram_mib` of VRAM for managed memory.
fn uvm_sweep(mib: u64, passes: u32, vram_mib: u64, preset: Preset) -> Outcome {
    uvm_sweep_with(mib, passes, vram_mib, preset, PolicySettings::named("uvm"))
}

/// [`uvm_sweep`] with the mode's settings given.
fn uvm_sweep_with(
    mib: u64,
    passes: u32,
    vram_mib: u64,
    preset: Preset,
    policy: PolicySettings,
) -> Outcome {
    uvm_sweep_beside(mib, passes, vram_mib, preset, policy, None)
}

/// [`uvm_sweep_with`], and another tenant running `other` beside it.
fn uvm_sweep_beside(
    mib: u64,
    passes: u32,
    vram_mib: u64,
    preset: Preset,
    policy: PolicySettings,
    other: Option<Program>,
) -> Outcome {
    let p = kernels_over(mib, passes, |a| Access::uniform(a, mib * MIB, 0));
    run_uvm(p, vram_mib, preset, policy, other)
}

/// A program allocating `mib` of memory and launching `passes` kernels, each making
/// the access `access` of the buffer's slot.
/// A kernel re-reading its data ten times (the L2 serves nine in VRAM) whose pages
/// start in host memory and migrate in as it runs: the bytes VRAM served are the
/// kernel's own, not also the re-reads its pages would have cost in host memory at
/// launch.
#[test]
fn re_reads_of_host_memory_do_not_count_as_vram_bytes_once_the_pages_came_in() {
    let mib = 16;
    let p = kernels_over(mib, 1, |a| {
        Access::uniform(a, mib * MIB, 0).read_before_l2(10 * mib * MIB)
    });
    let out = run_uvm(p, 64, gtx480(), PolicySettings::named("uvm"), None);
    let t = &out.tenants[0];
    assert!(
        t.local_bytes <= (mib * MIB) as f64 * 1.01,
        "{} bytes from VRAM for a kernel reading {} once",
        t.local_bytes,
        mib * MIB
    );
}

fn kernels_over(mib: u64, passes: u32, access: impl Fn(usize) -> Access) -> Program {
    let mut p = Program::default();
    let a = p.buffer("a", mib * MIB);
    p.ops = vec![
        Op::Alloc(a),
        Op::Repeat {
            times: passes,
            body: vec![Op::Launch(Kernel {
                name: "pass".into(),
                ops: 1_000,
                accesses: vec![access(a)],
                phases: Vec::new(),
                outer_loop: Default::default(),
            })],
        },
        Op::Sync,
        Op::Free(a),
    ];
    p
}

/// Runs tenant `t` with program `p` (and `other` beside it) in mode `uvm` with `vram_mib`
/// of VRAM for managed memory, checking invariants after every event.
fn run_uvm(
    p: Program,
    vram_mib: u64,
    preset: Preset,
    policy: PolicySettings,
    other: Option<Program>,
) -> Outcome {
    // The runtime's own buffers keep VRAM outside the paging machine.
    let runtime = preset.runtime_bytes();
    let specs = std::iter::once(tenant("t", p))
        .chain(other.map(|o| tenant("other", o)))
        .collect();
    let mut cfg = SimConfig::new(preset, vram_mib * MIB + runtime, policy, specs);
    cfg.check_invariants = true;
    simulate(cfg).unwrap()
}

fn gtx1080ti() -> Preset {
    preset::find("gtx1080ti").unwrap()
}

#[test]
fn uvm_with_ample_vram_migrates_every_page_once() {
    let out = uvm_sweep(64, 3, 1024, gtx1080ti());
    let paging = out.tenants[0].paging.unwrap();
    // The buffer's pages and the runtime's few stack, code and constant pages, once.
    let once = uvm_sweep(64, 1, 1024, gtx1080ti()).tenants[0]
        .paging
        .unwrap();
    // Only the touches grow with the passes.
    assert_eq!(paging.stats, once.stats);
    assert_eq!(paging.device.touches, 3 * once.device.touches);
    assert!(paging.stats.pages_in >= 64 * 256 && paging.stats.pages_in < 66 * 256);
    assert_eq!(paging.stats.pages_out, 0);
    assert!(paging.fault_stall_ns > 0);
    // Oversubscribed by half: every pass migrates everything again (the sweep is cyclic
    // and FIFO evicts what the next pass needs first), faulted or prefetched.
    let tight_out = uvm_sweep(64, 3, 48, gtx1080ti());
    let tight = tight_out.tenants[0].paging.unwrap();
    assert!(tight.stats.pages_in >= 3 * 64 * 256);
    // The batches by size add up to the batches and their faults.
    let sizes = &tight_out.tenants[0].faults_per_batch;
    assert_eq!(sizes.iter().sum::<u64>(), tight.stats.fault_batches);
    let faults: u64 = sizes.iter().enumerate().map(|(n, c)| n as u64 * c).sum();
    assert_eq!(faults, tight.stats.far_faults);
    assert!(sizes.len() as u64 <= gtx1080ti().fault_batch_pages + 1);
    assert!(tight.stats.pages_out >= 3 * 64 * 256 - 48 * 256);
    assert!(tight.stats.pages_thrashed > 0);
    assert!(tight.fault_stall_ns > 2 * paging.fault_stall_ns);
}

#[test]
fn halving_link_bandwidth_roughly_doubles_transfer_bound_stalls() {
    let mut fast = gtx1080ti();
    fast.fault_service_ns = 0;
    let mut slow = fast.clone();
    slow.link.h2d_bytes_per_s /= 2.0;
    slow.link.d2h_bytes_per_s /= 2.0;
    let stall = |p: Preset| {
        uvm_sweep(64, 2, 48, p).tenants[0]
            .paging
            .unwrap()
            .fault_stall_ns as f64
    };
    let ratio = stall(slow) / stall(fast);
    assert!((ratio - 2.0).abs() < 0.01, "{ratio}");
}

/// Three passes over 64 MiB (at least 3 * 16384 page touches) through 48 MiB of VRAM
/// under unified memory, with Belady's bound asked for or not and its limit of touches.
fn cyclic_sweep(optimum: bool, max_touches: usize) -> PagingOutcome {
    let preset = gtx1080ti();
    let runtime = preset.runtime_bytes();
    let p = kernels_over(64, 3, |a| Access::uniform(a, 64 * MIB, 0));
    let policy = PolicySettings::named("uvm");
    let mut cfg = SimConfig::new(preset, 48 * MIB + runtime, policy, vec![tenant("t", p)]);
    cfg.check_invariants = true;
    cfg.optimum = optimum;
    cfg.optimum_max_touches = max_touches;
    simulate(cfg).unwrap().tenants[0].paging.unwrap()
}

#[test]
fn belady_bounds_the_migrations_when_asked() {
    let run = |optimum: bool| cyclic_sweep(optimum, super::config::OPTIMUM_MAX_TOUCHES);
    assert_eq!(run(false).optimum_pages_in, None);
    let with = run(true);
    let bound = with.optimum_pages_in.unwrap();
    // The cyclic sweep: FIFO migrates every page every pass; Belady keeps most of VRAM.
    assert!(
        bound < with.stats.pages_in,
        "{bound} vs {}",
        with.stats.pages_in
    );
    assert!(bound >= 64 * 256, "every page at least once: {bound}");
    assert_eq!(with.optimum_skipped_touches, None);
}

/// `optimum = true` keeps a tenant's page stream only up to its limit of touches (it
/// once kept every touch, 2.2 GB after 20,000 events): past it the bound is skipped
/// and the run says so.
#[test]
fn belady_skips_a_stream_past_its_limit() {
    let run = |limit: usize| cyclic_sweep(true, limit);
    let short = run(1000);
    assert_eq!(short.optimum_pages_in, None);
    assert_eq!(short.optimum_skipped_touches, Some(1000));
    let ample = run(1 << 20);
    assert!(ample.optimum_pages_in.is_some());
    assert_eq!(ample.optimum_skipped_touches, None);
    assert_eq!(
        short.stats.pages_in, ample.stats.pages_in,
        "the run itself is the same"
    );
}

/// A random access walks in its own loop (`touch_pages`) unless its tenant records a
/// page stream (`optimum = true`), which takes the general loop: the same run either
/// way, faulting, served remotely (the setting) and stalling.
#[test]
fn a_random_walk_runs_the_same_in_its_own_loop_and_the_general_one() {
    let run = |(name, value, write_bytes): (&str, &str, u64), optimum: bool| {
        let p = kernels_over(16, 4, |a| Access {
            order: AccessOrder::Random,
            ..Access::uniform(a, 2 * MIB, write_bytes)
        });
        let preset = gtx1080ti();
        let runtime = preset.runtime_bytes();
        let policy = PolicySettings::named("uvm").with(name, value);
        let mut cfg = SimConfig::new(preset, 8 * MIB + runtime, policy, vec![tenant("t", p)]);
        cfg.check_invariants = true;
        cfg.optimum = optimum;
        let mut out = simulate(cfg).unwrap();
        let paging = out.tenants[0].paging.as_mut().unwrap();
        // Only the general loop records the stream the bound is computed on.
        assert_eq!(paging.optimum_pages_in.is_some(), optimum);
        paging.optimum_pages_in = None;
        out
    };
    // Delayed migration serves reads alone remotely: a write faults at once.
    for setting in [("policy", "adaptive", MIB), ("migration", "delayed", 0)] {
        let own = run(setting, false);
        let paging = own.tenants[0].paging.unwrap();
        assert!(
            paging.stats.far_faults > 0
                && paging.device.remote_touches > 0
                && paging.fault_stall_ns > 0,
            "{setting:?}: {paging:?}"
        );
        assert_eq!(own, run(setting, true), "{setting:?}");
    }
}

#[test]
fn uvm_runs_repeat_exactly() {
    assert_eq!(
        uvm_sweep(16, 2, 8, gtx1080ti()),
        uvm_sweep(16, 2, 8, gtx1080ti())
    );
}

#[test]
fn zero_copy_reads_everything_over_the_link_and_delayed_migration_some() {
    let run = |migration: &str| {
        let policy = PolicySettings::named("uvm").with("migration", migration);
        let out = uvm_sweep_with(64, 2, 48, gtx1080ti(), policy);
        let t = &out.tenants[0];
        (t.paging.unwrap().stats, t.remote_bytes, t.end_ns)
    };
    let (zero, zero_remote, _) = run("zero-copy");
    assert_eq!((zero.far_faults, zero.pages_in), (0, 0));
    // Two linear passes over 64 MiB, every byte remote.
    assert!(
        (zero_remote - 2.0 * 64.0 * MIB as f64).abs() < 1.0,
        "{zero_remote}"
    );
    let (delayed, delayed_remote, _) = run("delayed");
    let (on_fault, on_fault_remote, _) = run("on-fault");
    assert_eq!(on_fault_remote, 0.0);
    // Seven remote reads per block and pass before its counter reaches 8, at most.
    assert!(delayed_remote > 0.0 && delayed_remote < zero_remote / 50.0);
    // Those reads were faults under on-fault migration.
    assert!(delayed.far_faults < on_fault.far_faults);
}

#[test]
fn uvm_with_its_data_in_vram_runs_a_kernel_as_fast_as_native() {
    // The marginal pass: with ample VRAM every page is resident after the first pass, so
    // each further pass costs what it costs natively.
    let pass_ns = |policy: &str, passes: u32| {
        uvm_sweep_with(64, passes, 1024, gtx1080ti(), PolicySettings::named(policy)).tenants[0]
            .end_ns
    };
    let uvm = pass_ns("uvm", 3) - pass_ns("uvm", 2);
    let native = pass_ns("native", 3) - pass_ns("native", 2);
    assert!(native > 0);
    assert_eq!(uvm, native);
    // The first pass is what faulting the data in costs.
    assert!(pass_ns("uvm", 1) > pass_ns("native", 1));
}

#[test]
fn fault_migrations_share_the_link_with_other_tenants_copies() {
    // Kernels of different tenants take turns on the GPU, but a copy runs beside a
    // kernel: its bytes and the kernel's migrations share the link.
    let mut copier = Program::default();
    let b = copier.buffer("b", 512 * MIB);
    copier.ops = vec![
        Op::Alloc(b),
        Op::Copy {
            slot: b,
            direction: crate::program::CopyDirection::HostToDevice,
            bytes: 512 * MIB,
        },
        Op::Free(b),
    ];
    let alone = uvm_sweep_with(64, 1, 1024, gtx1080ti(), PolicySettings::named("uvm"));
    let beside = uvm_sweep_beside(
        64,
        1,
        1024,
        gtx1080ti(),
        PolicySettings::named("uvm"),
        Some(copier),
    );
    let stall = |out: &Outcome| out.tenants[0].paging.unwrap().fault_stall_ns;
    let ratio = stall(&beside) as f64 / stall(&alone) as f64;
    // The same pages migrate, more slowly: the copy takes a share of the link.
    assert_eq!(
        alone.tenants[0].paging.unwrap().stats.pages_in,
        beside.tenants[0].paging.unwrap().stats.pages_in
    );
    assert!(ratio > 1.2, "{ratio}");
}

#[test]
fn a_cyclic_sweep_through_too_little_vram_is_detected_as_regular() {
    // Three passes over 64 MiB through 48 MiB: every pass migrates the buffer again, in
    // address order.
    let out = uvm_sweep(64, 3, 48, gtx1080ti());
    use gpuswap_core::uvm::detect::Pattern;
    let patterns = |out: &Outcome| -> Vec<Pattern> {
        out.tenants[0]
            .allocations
            .iter()
            .map(|a| a.pattern)
            .collect()
    };
    assert_eq!(patterns(&out), [Pattern::Regular]);
    // With ample VRAM only the first pass migrates: one linear observation with nothing
    // earlier to re-reference, a first guess of streaming.
    let ample = uvm_sweep(64, 3, 1024, gtx1080ti());
    assert_eq!(patterns(&ample), [Pattern::Streaming]);
    assert_eq!(ample.tenants[0].allocations[0].timeline.len(), 1);
}

// Bugs found in review (each fails until its bug is fixed).

#[test]
fn uvm_vram_timeline_shows_the_managed_pages() {
    // Ample VRAM: the 64 MiB buffer becomes resident and stays until it is freed.
    let out = uvm_sweep(64, 2, 1024, gtx1080ti());
    let t = &out.tenants[0];
    assert!(t.vram_peak_bytes >= 64 * MIB, "{}", t.vram_peak_bytes);
    let timeline_max = t.vram_timeline.iter().map(|x| x.1).max().unwrap();
    assert_eq!(
        timeline_max, t.vram_peak_bytes,
        "timeline {:?}",
        t.vram_timeline
    );
}

/// A tenant reading `mib` of managed memory at random places, `passes` kernels, in mode
/// `uvm` with `vram_mib` of VRAM for managed memory and the mode's `policy` setting.
fn uvm_random(mib: u64, passes: u32, vram_mib: u64, policy: &str) -> Outcome {
    let p = kernels_over(mib, passes, |a| Access {
        order: AccessOrder::Random,
        ..Access::uniform(a, mib * MIB / 4, 0)
    });
    let settings = PolicySettings::named("uvm").set("policy", policy).unwrap();
    run_uvm(p, vram_mib, gtx1080ti(), settings, None)
}

#[test]
fn the_adaptive_runtime_serves_a_random_allocation_remotely_once_vram_is_full() {
    use gpuswap_core::uvm::detect::Pattern;
    use gpuswap_core::uvm::policy::Plan;
    let fixed = uvm_random(64, 12, 48, "fixed");
    let adaptive = uvm_random(64, 12, 48, "adaptive");
    let stats = |o: &Outcome| o.tenants[0].paging.unwrap().stats;
    let remote = |o: &Outcome| o.tenants[0].paging.unwrap().device.remote_touches;
    let allocation = |o: &Outcome| o.tenants[0].allocations[0].clone();
    assert_eq!(allocation(&fixed).pattern, Pattern::Random);
    assert_eq!(allocation(&fixed).plan, Plan::Configured);
    assert!(allocation(&fixed).switches.is_empty());
    assert_eq!(remote(&fixed), 0);
    // Pinned on the host from the first full VRAM; the trial measures the old plan
    // (faulting) again, finds it slower and pins it for good.
    let a = allocation(&adaptive);
    assert_eq!((a.pattern, a.plan), (Pattern::Random, Plan::HostPinned));
    let plans: Vec<Plan> = a.switches.iter().map(|(_, p)| *p).collect();
    assert_eq!(
        plans,
        [Plan::HostPinned, Plan::Configured, Plan::HostPinned]
    );
    assert!(remote(&adaptive) > 0);
    assert!(
        stats(&adaptive).far_faults * 2 < stats(&fixed).far_faults,
        "{} against {}",
        stats(&adaptive).far_faults,
        stats(&fixed).far_faults
    );
    assert!(adaptive.tenants[0].total_ns() < fixed.tenants[0].total_ns());
}

#[test]
fn on_a_gdev_testbed_every_mode_copies_through_gdevs_path_and_only_gdev_pays_its_scheduler() {
    // A 1 MiB upload into a 1 MiB buffer: Gdev's runtime writes it through the BAR.
    let mut p = Program::default();
    let a = p.buffer("a", MIB);
    p.ops = vec![
        Op::Alloc(a),
        Op::Copy {
            slot: a,
            direction: CopyDirection::HostToDevice,
            bytes: MIB,
        },
        Op::Sync,
        Op::Free(a),
    ];
    let copy_ns = |runtime, mode: &str| {
        let mut cfg = config(vec![tenant("a", p.clone())], 256 * MIB);
        cfg.preset.runtime = runtime;
        cfg.manager.policy = PolicySettings::named(mode);
        simulate(cfg).unwrap().tenants[0].total_ns()
    };
    let testbed = preset::find("gtx480").unwrap();
    assert_eq!(testbed.runtime, CudaRuntime::Gdev);
    let bar = gdev::copy_cost(
        &testbed,
        CopyDirection::HostToDevice,
        MIB,
        MIB,
        testbed.copy_setup_ns,
    );
    let native_gdev = copy_ns(CudaRuntime::Gdev, "native");
    let native_nvidia = copy_ns(CudaRuntime::Nvidia, "native");
    // At 1 GB/s through the BAR the copy takes about 1 ms, against 0.19 ms by DMA.
    let bar_ns = MIB as f64 / bar.cap_bytes_per_s * 1e9;
    assert!(
        native_gdev as f64 >= native_nvidia as f64 + 0.8 * bar_ns,
        "{native_gdev} vs {native_nvidia}"
    );
    // GPUswap on the same runtime copies alike; Gdev adds its scheduler's call.
    assert_eq!(copy_ns(CudaRuntime::Gdev, "gpuswap"), native_gdev);
    let gdev = copy_ns(CudaRuntime::Gdev, "gdev");
    assert!(
        gdev >= native_gdev + testbed.gdev_launch_ns - testbed.copy_setup_ns,
        "{gdev} vs {native_gdev}"
    );
}

/// 600 launches of a ~1 ms kernel, then `cpu_ns` of host work, then a sync, on `preset`.
fn launches_then_host_work_ns(preset: Preset, cpu_ns: u64) -> (u64, u64) {
    let bytes = 64 * MIB;
    let mut p = kernels_program(bytes, 600);
    // After the launches and before the sync: the host works while the queue drains.
    let sync = p.ops.iter().position(|op| matches!(op, Op::Sync)).unwrap();
    p.ops.insert(sync, Op::Cpu { ns: cpu_ns });
    let kernel_ns = read_kernel_ns(&preset, bytes);
    let mut cfg = config(vec![tenant("a", p)], 512 * MIB);
    cfg.preset = preset;
    (simulate(cfg).unwrap().tenants[0].total_ns(), kernel_ns)
}

#[test]
fn the_gpuswap_testbeds_launch_queue_is_gdevs_indirect_buffer_ring() {
    // Gdev over pscnv: 512 ring entries, one per launch, one kept free: the host blocks
    // at its 512th pending launch until the first kernel ends, so 600 launches of
    // kernels of time k keep it busy for about (600 - 511) k before its host work.
    let testbed = preset::find("gtx480").unwrap();
    let cpu_ns = 2_000_000_000;
    let (total_ns, kernel_ns) = launches_then_host_work_ns(testbed.clone(), cpu_ns);
    let blocked_ns = total_ns - cpu_ns;
    let expected_ns = (600 - 511) * kernel_ns;
    assert!(
        blocked_ns.abs_diff(expected_ns) < expected_ns / 10,
        "{blocked_ns} vs {expected_ns}"
    );
    // With NVIDIA's commonly reported 1024 the host never blocks.
    let deep = Preset {
        launch_queue_depth: 1024,
        ..testbed
    };
    let (deep_ns, _) = launches_then_host_work_ns(deep, cpu_ns);
    assert!(deep_ns - cpu_ns < 600 * 10_000, "{deep_ns}");
}
