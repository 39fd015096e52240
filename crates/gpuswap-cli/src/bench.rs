//! `gpuswap bench`: the speed of the simulator on the sweep people run most, runtime
//! against available memory for the eight Rodinia apps.

use std::path::Path;
use std::time::Instant;

use gpuswap_core::PolicySettings;
use gpuswap_sim::program::AccessOrder;

use crate::sweep::{Plan, SweepError};

/// The benchmark sweep: two instances of each app, main computation repeated 100 times,
/// 25 memory sizes, random and priority-based chunk selection; `runs` seeds per point.
const SWEEP: &str = include_str!("../../../scenarios/repro/bench.toml");

/// Settings of the benchmark.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    gpuswap bench                         # the target: 10 seeds per point\n  \
    gpuswap bench --runs 1 --apps lud,nn  # a quick look\n  \
    gpuswap bench --uvm                   # unified memory: page touches per second\n  \
    gpuswap bench --uvm --workloads random --working-sets 16GiB  # one case")]
pub struct BenchArgs {
    /// Seeds per grid point (the target is defined for 10).
    #[arg(long, default_value_t = 10)]
    pub runs: u32,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Only these apps (comma-separated; default: the eight Rodinia apps).
    #[arg(long, value_name = "APPS")]
    pub apps: Option<String>,
    /// Measure unified memory instead: page touches simulated per second on a linear, a
    /// random and a mixed workload with working sets of 1 GiB and 16 GiB at 150 %.
    #[arg(long, conflicts_with_all = ["apps"])]
    pub uvm: bool,
    /// With --uvm: who chooses each allocation's paging (fixed, adaptive or
    /// adaptive-coarse), to measure what the adaptive runtime costs.
    #[arg(long, requires = "uvm", default_value = "fixed")]
    pub policy: String,
    /// With --uvm: only these workloads (comma-separated: linear, random, mixed), to
    /// measure one access order without waiting for the others.
    #[arg(long, requires = "uvm", value_name = "LIST")]
    pub workloads: Option<String>,
    /// With --uvm: these working-set sizes instead of 1 GiB and 16 GiB (comma-separated,
    /// bytes or with a unit: 16GiB, 512MiB).
    #[arg(long, requires = "uvm", value_name = "SIZES")]
    pub working_sets: Option<String>,
    /// Run the sweep this many times and give the spread of the wall time (this
    /// machine's timings vary from run to run).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100), conflicts_with = "uvm")]
    pub samples: u32,
    /// Print the figures as JSON, for scripts.
    #[arg(long, conflicts_with = "uvm")]
    pub json: bool,
}

/// What the benchmark sweep measured.
#[derive(Debug, serde::Serialize)]
struct Measured {
    runs: usize,
    failed: usize,
    /// Simulated events per sample (every sample simulates the same).
    events: u64,
    threads: usize,
    /// Wall time of each sample, in order.
    wall_s: Vec<f64>,
    wall_s_min: f64,
    wall_s_median: f64,
    /// CPU time (user and system, every thread) of each sample, in order: on a loaded
    /// machine wall time is several times the work, CPU time is not. Empty where
    /// /proc/self/stat cannot be read.
    cpu_s: Vec<f64>,
    /// From the median sample: events per second of wall time.
    events_per_s: f64,
    /// Wall time per event, from the median sample (all threads together).
    ns_per_event: f64,
    /// CPU time per event, from the sample of median CPU time; `None` without CPU
    /// times.
    cpu_ns_per_event: Option<f64>,
}

/// The process's CPU time so far (user and system, every thread), from
/// /proc/self/stat's `utime` and `stime` (proc(5)), in clock ticks of `USER_HZ`, which
/// Linux fixes at 100 for user space; `None` where it cannot be read.
fn cpu_time_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces: fields are counted after its ')'.
    let after = &stat[stat.rfind(')')? + 2..];
    let mut fields = after.split(' ').skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// Runs the benchmark sweep and prints wall time, runs and simulated events per second.
pub fn run(args: &BenchArgs) -> Result<(), SweepError> {
    if args.uvm {
        let policy = PolicySettings::named("uvm")
            .set("policy", &args.policy)
            .map_err(|e| SweepError::BadInput(format!("--policy: {e}")))?;
        let workloads = uvm_workloads(args.workloads.as_deref())?;
        let working_sets = uvm_working_sets(args.working_sets.as_deref())?;
        return crate::stdout::write(&uvm_bench(&policy, &workloads, &working_sets))
            .map_err(SweepError::Output);
    }
    if let Some(list) = &args.apps
        && let Some(unknown) = list
            .split(',')
            .map(str::trim)
            .find(|a| gpuswap_sim::apps::find(a).is_none())
    {
        let known: Vec<_> = gpuswap_sim::apps::all().iter().map(|a| a.name()).collect();
        return Err(SweepError::BadInput(format!(
            "--apps: unknown app {unknown:?}; expected a comma-separated list of: {}",
            known.join(", ")
        )));
    }
    let vary: Vec<String> = args
        .apps
        .iter()
        .map(|apps| format!("tenant.app={apps}"))
        .collect();
    let plan = Plan::new(Path::new("<bench sweep>"), SWEEP, &vary, Some(args.runs))?;
    let apps = plan.values("tenant.app").map_or(1, <[_]>::len);
    let mut wall_s = Vec::new();
    let mut cpu_s = Vec::new();
    let (mut runs, mut failed, mut events) = (0, 0, 0u64);
    for _ in 0..args.samples {
        let started = Instant::now();
        let cpu_started = cpu_time_s();
        (runs, failed, events) = (0, 0, 0);
        let points: Vec<usize> = (0..plan.points.len()).collect();
        plan.execute(&points, args.jobs, false, |_, rows| {
            runs += rows.len();
            failed += rows.iter().filter(|r| r.result.is_err()).count();
            events += rows
                .iter()
                .filter_map(|r| r.result.as_ref().ok())
                .map(|figures| figures.events)
                .sum::<u64>();
            Ok(())
        })?;
        wall_s.push(started.elapsed().as_secs_f64());
        if let (Some(before), Some(after)) = (cpu_started, cpu_time_s()) {
            cpu_s.push(after - before);
        }
    }
    let cpu_median = {
        let mut sorted = cpu_s.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len() / 2).copied()
    };
    let mut sorted = wall_s.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let measured = Measured {
        runs,
        failed,
        events,
        threads: args.jobs.unwrap_or_else(rayon::current_num_threads),
        wall_s_min: sorted[0],
        wall_s_median: median,
        events_per_s: events as f64 / median,
        ns_per_event: median * 1e9 / events.max(1) as f64,
        cpu_ns_per_event: cpu_median.map(|cpu| cpu * 1e9 / events.max(1) as f64),
        wall_s,
        cpu_s,
    };
    let text = if args.json {
        serde_json::to_string_pretty(&measured).expect("figures serialize") + "\n"
    } else {
        let spread = if args.samples > 1 {
            format!(
                " (median of {} samples; min {:.2} s, max {:.2} s)",
                args.samples,
                measured.wall_s_min,
                sorted[sorted.len() - 1]
            )
        } else {
            String::new()
        };
        format!(
            "runtime vs memory: {apps} apps x 25 sizes x 2 policies x {} runs = {runs} runs ({failed} failed)\n\
             wall time {median:.2} s{spread} on {} threads: {:.0} runs/s, {:.2e} simulated events/s, {:.1} ns of wall time per event ({events} events){}\n",
            args.runs,
            measured.threads,
            runs as f64 / median,
            measured.events_per_s,
            measured.ns_per_event,
            match (cpu_median, measured.cpu_ns_per_event) {
                (Some(cpu), Some(per_event)) =>
                    format!("; CPU time {cpu:.2} s, {per_event:.1} ns per event"),
                _ => String::new(),
            },
        )
    };
    crate::stdout::write(&text).map_err(SweepError::Output)
}

/// The unified-memory benchmark: one tenant on an A100 (80 GB, so 16 GiB fits at 150 %)
/// sweeping its managed data three times, linearly, at random, or both (half of it read
/// linearly, half touched at random); page touches per second of wall time, under
/// `policy` (mode `uvm`).
fn uvm_bench(policy: &PolicySettings, workloads: &[UvmWorkload], working_sets: &[u64]) -> String {
    use gpuswap_sim::engine::{SimConfig, TenantSpec, simulate};
    use gpuswap_sim::program::{Access, Kernel, Op, Program};

    let mut out =
        String::from("workload  working set  touches        far faults     wall s   touches/s\n");
    for &ws in working_sets {
        for &(name, orders) in workloads {
            let mut p = Program::default();
            let part = ws / orders.len() as u64;
            let slots: Vec<usize> = (0..orders.len())
                .map(|i| p.buffer(format!("b{i}"), part))
                .collect();
            let accesses = slots
                .iter()
                .zip(orders)
                .map(|(s, order)| Access {
                    order: *order,
                    ..Access::uniform(*s, part, 0)
                })
                .collect();
            p.ops = slots.iter().map(|s| Op::Alloc(*s)).collect();
            p.ops.push(Op::Repeat {
                times: 3,
                body: vec![Op::Launch(Kernel {
                    name: name.into(),
                    ops: 1_000_000,
                    accesses,
                    phases: Vec::new(),
                    outer_loop: Default::default(),
                })],
            });
            p.ops.push(Op::Sync);
            let preset = gpuswap_sim::preset::find("a100-80gb").expect("a preset");
            let runtime = preset.runtime_bytes();
            let config = SimConfig::new(
                preset,
                ws * 2 / 3 + runtime,
                policy.clone(),
                vec![TenantSpec::new(name, name, p)],
            );
            let started = Instant::now();
            let outcome = simulate(config);
            let wall_s = started.elapsed().as_secs_f64();
            let (touches, faults) = outcome
                .ok()
                .and_then(|o| o.tenants[0].paging)
                .map_or((0, 0), |p| (p.device.touches, p.stats.far_faults));
            out += &format!(
                "{name:<9} {:>9}    {touches:<14} {faults:<14} {wall_s:<8.2} {:.3e}\n",
                gpuswap_sim::units::format_bytes(ws),
                touches as f64 / wall_s
            );
        }
    }
    out
}

/// A unified-memory workload: its name and the access orders its buffers are read in
/// (one buffer per order, the working set split evenly).
type UvmWorkload = (&'static str, &'static [AccessOrder]);

/// The unified-memory benchmark's workloads.
const UVM_WORKLOADS: [UvmWorkload; 3] = [
    ("linear", &[AccessOrder::Linear]),
    ("random", &[AccessOrder::Random]),
    ("mixed", &[AccessOrder::Linear, AccessOrder::Random]),
];

/// `--workloads`: the named ones, in the benchmark's order; all without the flag.
fn uvm_workloads(list: Option<&str>) -> Result<Vec<UvmWorkload>, SweepError> {
    let Some(list) = list else {
        return Ok(UVM_WORKLOADS.to_vec());
    };
    let names: Vec<&str> = list.split(',').map(str::trim).collect();
    if let Some(unknown) = names
        .iter()
        .find(|n| !UVM_WORKLOADS.iter().any(|w| w.0 == **n))
    {
        return Err(SweepError::BadInput(format!(
            "--workloads: unknown workload {unknown:?}; expected a comma-separated list of: linear, random, mixed"
        )));
    }
    Ok(UVM_WORKLOADS
        .into_iter()
        .filter(|w| names.contains(&w.0))
        .collect())
}

/// `--working-sets`: the sizes given, at least one 2 MiB VA block each; 1 GiB and 16 GiB
/// without the flag.
fn uvm_working_sets(list: Option<&str>) -> Result<Vec<u64>, SweepError> {
    use gpuswap_core::uvm::pages::{PAGE_BYTES, PAGES_PER_BLOCK};
    const GIB: u64 = 1 << 30;
    const BLOCK_BYTES: u64 = PAGES_PER_BLOCK as u64 * PAGE_BYTES;
    let Some(list) = list else {
        return Ok(vec![GIB, 16 * GIB]);
    };
    list.split(',')
        .map(|size| match gpuswap_sim::units::parse_bytes(size.trim()) {
            Ok(bytes) if bytes >= BLOCK_BYTES => Ok(bytes),
            Ok(_) => Err(format!("{size:?} is below one 2 MiB block")),
            Err(e) => Err(e.to_string()),
        })
        .collect::<Result<_, _>>()
        .map_err(|e| SweepError::BadInput(format!("--working-sets: {e}")))
}
