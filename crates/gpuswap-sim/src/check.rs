//! Deterministic simulation testing in the TigerBeetle / FoundationDB style: one seed
//! makes a whole case (device, manager mode and parameters, tenants' programs, memory
//! sizes) and its faults (crashes at any point, failing copies, host memory running
//! out, late answers and timers, shuffled same-time events). The engine checks the
//! manager's books and the device after every event and at the end; [`check`] adds what
//! an outcome must say. The same seed always makes the same case and the same run.

use gpuswap_core::contract::{Term, Terms};
use gpuswap_core::registry::{POLICIES, ParamKind};
use gpuswap_core::{AtLimit, Contract, MIB, PolicySettings};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::engine::{
    Crash, CrashPoint, Faults, Outcome, RunLimits, Sharing, SimConfig, TenantSpec, simulate,
};
use crate::preset;
use crate::program::{Access, CopyDirection, Kernel, Op, Program};
use gpuswap_core::gpu_time::scheduling::SchedulingConfig;
use gpuswap_core::gpu_time::{GpuTime, Quantum, TurnSettings};

/// Events one case may take: generated programs are short (a few thousand events), so a
/// case that reaches this does not terminate.
const MAX_EVENTS: u64 = 2_000_000;

/// What a tenant's error may say in a checked run: an injected crash, the manager's
/// kill after failed copies, an allocation the mode cannot serve, or Gdev refusing a
/// tenant that cannot fit. Anything else is a bug.
const EXPECTED_ERRORS: &[&str] = &[
    "(injected fault)",
    "killed by the memory manager: relocation copy",
    "failed: out of memory",
    "failed: out of host memory",
    "gdev cannot launch",
    "failed: over the memory_limit",
    "failed: over the host_limit",
    "failed: out of memory within the contracts",
    "not admitted: vram_guarantee",
];

/// A failed case: its seed, what it was, and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("seed {seed} ({case}): {problem}")]
pub struct CheckFailure {
    /// The seed that makes the case.
    pub seed: u64,
    /// The case in one line.
    pub case: String,
    /// What went wrong.
    pub problem: String,
}

/// What a passed case did (for the summary).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckStats {
    /// Events the run took.
    pub events: u64,
    /// Tenants that crashed as injected.
    pub crashed: u32,
    /// Tenants the manager killed after failed copies.
    pub killed: u32,
    /// Tenants whose allocations or launches failed.
    pub refused: u32,
    /// Cases in which data was relocated (0 or 1 per case).
    pub relocating: u32,
}

/// The case a seed makes.
pub fn case(seed: u64) -> SimConfig {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let presets = preset::all();
    let preset = presets[rng.random_range(0..presets.len())].clone();
    let n_tenants = rng.random_range(1..=4usize);
    // GPUswap, whose relocations the faults are mostly about, in half the cases.
    let entry = if rng.random_bool(0.5) {
        gpuswap_core::registry::find_policy("gpuswap").expect("registered")
    } else {
        &POLICIES[rng.random_range(0..POLICIES.len())]
    };
    let mut policy = PolicySettings::new(entry.choice.name, n_tenants as u32)
        .expect("registered policies build");
    for param in entry.params {
        let value = match param.kind {
            ParamKind::Choice(options) => {
                let options = options();
                options[rng.random_range(0..options.len())].name.to_owned()
            }
            ParamKind::Count => rng.random_range(1..=n_tenants as u64 + 1).to_string(),
        };
        policy = policy.with(param.key, &value);
    }
    let runtime_bytes = preset.runtime_bytes();
    let vram_bytes = runtime_bytes * n_tenants as u64 + rng.random_range(4..128u64) * MIB;
    let tenants = (0..n_tenants)
        .map(|i| TenantSpec {
            start_ns: rng.random_range(0..5_000_000),
            ..TenantSpec::new(format!("t{i}"), "random", program(&mut rng))
        })
        .collect();
    let mut config = SimConfig::new(preset, vram_bytes, policy, tenants);
    // Host memory runs out in a third of the cases.
    if rng.random_bool(1.0 / 3.0) {
        config.manager.host_bytes = rng.random_range(0..128u64) * MIB;
    }
    config.manager.chunk_bytes = MIB << rng.random_range(0..4);
    config.manager.return_interval_ns = rng.random_range(1..100u64) * 1_000_000;
    config.manager.seed = seed;
    config.check_invariants = true;
    config.limits = RunLimits {
        max_events: MAX_EVENTS,
        ..RunLimits::default()
    };
    config.faults = faults(&mut rng, seed, n_tenants);
    // The sharing model and, under unified memory, the scheduling policy, from a stream
    // of their own so that the draws above make the same cases as before they existed.
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5348_4152_494e_4721);
    // Turns: nvshare's exclusive quantum (the third case), or turns when memory does not
    // fit (the fourth), each with a short quantum so that cases hand over often.
    let sharing = rng.random_range(0..4);
    config.sharing = if sharing == 1 {
        Sharing::Mps
    } else {
        Sharing::TimeSlice
    };
    // Gdev's own scheduler gates launches: turns are refused beside it.
    if sharing >= 2 && !config.manager.policy.needs().launch_gating {
        let quantum_ns = rng.random_range(1..50u64) * 1_000_000;
        config.manager.gpu_time = GpuTime::Turns(match sharing {
            2 => TurnSettings::exclusive(quantum_ns),
            _ => TurnSettings {
                quantum: Quantum::Fixed { ns: quantum_ns },
                handover_after_ns: rng.random_range(1..20u64) * 1_000_000,
                always: false,
            },
        });
    }
    // Contracts, from a stream of their own too.
    let mut contract_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x434f_4e54_5241_4354);
    let honours = config.manager.policy.honours();
    let guarantee_mib = (vram_bytes / MIB / n_tenants as u64).max(2);
    for tenant in &mut config.tenants {
        if contract_rng.random_bool(0.5) {
            tenant.contract = contract(&mut contract_rng, honours, guarantee_mib);
        }
    }
    if config.manager.policy.needs().page_faults {
        let policies = gpuswap_core::gpu_time::scheduling::POLICIES;
        let entry = &policies[rng.random_range(0..policies.len())];
        config.manager.scheduling = SchedulingConfig {
            policy: entry.choice.name,
            max_wait_ns: rng.random_range(1..20u64) * 1_000_000,
            instrumented: true,
            quota_bytes: rng
                .random_bool(0.5)
                .then(|| rng.random_range(1..64u64) * MIB),
        };
    }
    config
}

/// Runs the case of `seed` and checks its outcome.
pub fn check(seed: u64) -> Result<CheckStats, CheckFailure> {
    let config = case(seed);
    let described = describe(&config);
    let fail = |problem: String| CheckFailure {
        seed,
        case: described.clone(),
        problem,
    };
    let outcome = simulate(config).map_err(|e| fail(e.to_string()))?;
    check_outcome(&outcome).map_err(fail)
}

/// The case in one line: device, mode, memory, tenants and faults.
pub fn describe(config: &SimConfig) -> String {
    let m = &config.manager;
    let settings: Vec<String> = m
        .policy
        .chosen()
        .iter()
        .map(|(k, c)| format!("{k}={}", c.name))
        .collect();
    let f = &config.faults;
    let contracts: Vec<String> = config
        .tenants
        .iter()
        .filter(|t| !t.contract.is_default())
        .map(|t| {
            let described = t.contract.describe(|b| format!("{} MiB", b / MIB));
            format!("{}: {described}", t.name)
        })
        .collect();
    let contracts = if contracts.is_empty() {
        String::new()
    } else {
        format!(", contracts ({})", contracts.join("; "))
    };
    format!(
        "{} {}{}{} vram {} MiB host {} MiB chunk {} MiB, {} tenants{contracts}, {} crashes, copy failure {:.2}, shuffled ties {}, answers up to {} us late",
        config.preset.name,
        m.policy.name(),
        if settings.is_empty() {
            String::new()
        } else {
            format!(" ({})", settings.join(", "))
        },
        {
            let s = &m.scheduling;
            let turns = match m.gpu_time {
                GpuTime::Turns(t) if t.always => " (exclusive turns)",
                GpuTime::Turns(_) => " (turns)",
                GpuTime::Auto(_) => " (auto)",
                GpuTime::Concurrent => "",
            };
            format!(
                " sharing {}{turns}{}",
                config.sharing.name(),
                if s.runs() {
                    format!(
                        " scheduler {} (max_wait {} ms, quota {})",
                        s.policy,
                        s.max_wait_ns / 1_000_000,
                        s.quota_bytes
                            .map_or("what the others leave".to_owned(), |q| format!(
                                "{} MiB",
                                q / MIB
                            ))
                    )
                } else {
                    String::new()
                }
            )
        },
        m.vram_bytes / MIB,
        m.host_bytes / MIB,
        m.chunk_bytes / MIB,
        config.tenants.len(),
        f.crashes.len(),
        f.copy_failure,
        f.shuffle_ties,
        f.max_answer_delay_ns / 1_000,
    )
}

fn check_outcome(outcome: &Outcome) -> Result<CheckStats, String> {
    let mut stats = CheckStats {
        events: outcome.events,
        relocating: u32::from(outcome.tenants.iter().any(|t| t.bytes_evicted > 0)),
        ..CheckStats::default()
    };
    for t in &outcome.tenants {
        if t.end_ns < t.start_ns {
            return Err(format!("{} ended before it started", t.name));
        }
        let Some(error) = &t.error else { continue };
        match EXPECTED_ERRORS.iter().position(|e| error.contains(e)) {
            Some(0) => stats.crashed += 1,
            Some(1) => stats.killed += 1,
            Some(_) => stats.refused += 1,
            None => return Err(format!("{} failed unexpectedly: {error}", t.name)),
        }
    }
    Ok(stats)
}

/// A random contract of the terms a mode honours, each on with probability 1/3 (never
/// `at_limit = "wait"`: a simulated program cannot free while its allocation waits),
/// guarantees under `guarantee_mib` and limits never under the guarantee.
fn contract(rng: &mut ChaCha8Rng, honours: Terms, guarantee_mib: u64) -> Contract {
    let mut on = |term| honours.contains(term) && rng.random_bool(1.0 / 3.0);
    let (guarantee, vram_limit, memory_limit, spill, host_limit, weight, class) = (
        on(Term::VramGuarantee),
        on(Term::VramLimit),
        on(Term::MemoryLimit),
        on(Term::Spill),
        on(Term::HostLimit),
        on(Term::Weight),
        on(Term::PriorityClass),
    );
    let g = if guarantee {
        rng.random_range(1..guarantee_mib)
    } else {
        0
    };
    let mut size =
        |on: bool, range: std::ops::Range<u64>| on.then(|| rng.random_range(range).max(g) * MIB);
    let vram_limit_bytes = size(vram_limit, 1..256);
    let memory_limit_bytes = size(memory_limit || spill, 1..256);
    let host_limit_bytes = size(host_limit, 0..128);
    Contract {
        vram_guarantee_bytes: g * MIB,
        vram_limit_bytes,
        memory_limit_bytes,
        at_limit: if spill { AtLimit::Spill } else { AtLimit::Fail },
        host_limit_bytes,
        weight: if weight { rng.random_range(2..5) } else { 1 },
        priority_class: if class { rng.random_range(1..4) } else { 0 },
        wait_timeout_ns: None,
    }
}

fn faults(rng: &mut ChaCha8Rng, seed: u64, tenants: usize) -> Faults {
    let crashes = (0..rng.random_range(0..=2))
        .map(|_| {
            let k = rng.random_range(1..=3);
            Crash {
                tenant: rng.random_range(0..tenants),
                at: match rng.random_range(0..4) {
                    0 => CrashPoint::Time(rng.random_range(0..50_000_000)),
                    1 => CrashPoint::Alloc(k),
                    2 => CrashPoint::Suspend(k),
                    _ => CrashPoint::Copy(k),
                },
            }
        })
        .collect();
    Faults {
        seed,
        crashes,
        copy_failure: [0.0, 0.05, 0.3, 0.7][rng.random_range(0..4)],
        shuffle_ties: rng.random_bool(0.5),
        max_answer_delay_ns: [0, 1_000, 2_000_000][rng.random_range(0..3)],
        max_timer_lateness_ns: [0, 100_000_000][rng.random_range(0..2)],
    }
}

/// A random program: allocations, frees, copies both ways, kernels that read and write
/// every live buffer, synchronizations and CPU work; it frees what it still holds.
fn program(rng: &mut ChaCha8Rng) -> Program {
    let mut p = Program::default();
    let mut live: Vec<usize> = Vec::new();
    for _ in 0..rng.random_range(1..60) {
        let mib = rng.random_range(1..48u64);
        match rng.random_range(0..7) {
            0 | 1 => {
                let slot = p.buffer(format!("b{}", p.buffers.len()), mib * MIB);
                p.ops.push(Op::Alloc(slot));
                live.push(slot);
            }
            2 if !live.is_empty() => {
                let slot = live.swap_remove(rng.random_range(0..live.len()));
                p.ops.push(Op::Free(slot));
            }
            3 if !live.is_empty() => {
                let slot = live[rng.random_range(0..live.len())];
                let direction = if rng.random_bool(0.5) {
                    CopyDirection::HostToDevice
                } else {
                    CopyDirection::DeviceToHost
                };
                let bytes = (mib * MIB).min(p.buffers[slot].bytes);
                p.ops.push(Op::Copy {
                    slot,
                    direction,
                    bytes,
                });
            }
            4 => p.ops.push(Op::Sync),
            5 => p.ops.push(Op::Cpu {
                ns: rng.random_range(1..2_000) * 1_000,
            }),
            _ => p.ops.push(Op::Launch(Kernel {
                name: "k".into(),
                ops: mib * 1_000_000,
                accesses: live
                    .iter()
                    .map(|&s| Access::uniform(s, mib * MIB, mib * MIB / 2))
                    .collect(),
                phases: Vec::new(),
                outer_loop: Default::default(),
            })),
        }
    }
    p.ops.extend(live.into_iter().rev().map(Op::Free));
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_makes_the_same_case_and_the_same_run() {
        for seed in [0, 7, 123_456_789] {
            assert_eq!(describe(&case(seed)), describe(&case(seed)));
            assert_eq!(simulate(case(seed)), simulate(case(seed)));
        }
        assert_ne!(describe(&case(1)), describe(&case(2)));
    }

    #[test]
    fn an_unexpected_tenant_error_fails_the_check() {
        let mut outcome = simulate(case(3)).unwrap();
        outcome.tenants[0].error = Some("free of buffer \"b0\", which is not allocated".into());
        let problem = check_outcome(&outcome).unwrap_err();
        assert!(problem.contains("failed unexpectedly"), "{problem}");
    }

    /// The harness reaches what it is for: across seeds, crashes at every kind of point,
    /// kills after failed copies, refused allocations, and runs where none of it happens.
    #[test]
    fn seeds_pass_and_cover_every_fault() {
        let mut total = CheckStats::default();
        // 250 seeds reach every fault in a few seconds of a debug build; the long run is
        // `gpuswap check --seeds 100000` (release) or CHECK_SEEDS.
        for seed in 0..cases(250) {
            let stats = check(seed).unwrap_or_else(|f| panic!("{f}"));
            total.crashed += stats.crashed;
            total.killed += stats.killed;
            total.refused += stats.refused;
        }
        assert!(
            total.crashed > 0 && total.killed > 0 && total.refused > 0,
            "{total:?}"
        );
    }

    /// Seeds that failed once, with what they found (their cases change if the
    /// generator does; the unit tests named pin the same bugs without it).
    /// Each fails with its fix reverted (checked when mode uvm joined the registry, which
    /// changed the cases of seeds that draw a mode: 83 and 19 no longer reached the bugs).
    const REGRESSIONS: &[u64] = &[
        96,   // a suspension reached a tenant that had ended (manager_tests)
        6494, // reverse swap over-committed host memory
        69,   // gpuswap's eviction over-committed host memory (manager_tests)
        1436, // Gdev's launch swapped out more than host memory could take (manager_tests)
    ];

    #[test]
    fn seeds_that_once_failed_pass() {
        for &seed in REGRESSIONS {
            check(seed).unwrap_or_else(|f| panic!("{f}"));
        }
    }

    fn cases(default: u64) -> u64 {
        std::env::var("CHECK_SEEDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }
}
