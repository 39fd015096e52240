//! The report of a scenario run: per-tenant and system figures, with each tenant's
//! slowdown against a solo run of the same program with ample memory.

use serde::Serialize;

use std::sync::Mutex;

use crate::engine::{
    Engine, Outcome, PagingOutcome, SimConfig, SimError, TenantOutcome, TenantSpec, VictimPause,
    simulate,
};
use gpuswap_core::registry::ParamValue;
use gpuswap_core::uvm::AllocationPaging;
use gpuswap_core::uvm::detect::Observed;
use gpuswap_core::{Contract, ManagerConfig, PolicySettings};

/// Summary of a latency sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Median (nearest rank).
    pub p50: u64,
    /// 99th percentile (nearest rank).
    pub p99: u64,
    /// Largest sample.
    pub max: u64,
}

impl LatencySummary {
    /// Summarizes samples (all zero for none).
    pub fn of(samples: &[u64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let rank =
            |q: f64| sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        Self {
            count: sorted.len() as u64,
            p50: rank(0.5),
            p99: rank(0.99),
            max: *sorted.last().expect("non-empty"),
        }
    }
}

/// Figures of one tenant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TenantReport {
    /// Name from the scenario.
    pub name: String,
    /// App it ran.
    pub app: String,
    /// Start to end.
    pub total_ns: u64,
    /// Time in the measured phase: the whole run for a program without one (a trace, a
    /// fault log); 0 when the program failed before finishing it.
    pub phase_ns: u64,
    /// Measured-phase time over the solo run's (total time when the app has no phase);
    /// null when the tenant failed.
    pub slowdown: Option<f64>,
    /// Highest VRAM held.
    pub vram_peak_bytes: u64,
    /// Kernel bytes served from VRAM.
    pub local_bytes: u64,
    /// Kernel bytes served from host memory.
    pub remote_bytes: u64,
    /// Bytes relocated from VRAM to host memory.
    pub bytes_evicted: u64,
    /// Bytes relocated back to VRAM.
    pub bytes_returned: u64,
    /// Latency of allocation calls.
    pub alloc_latency_ns: LatencySummary,
    /// Latency of the allocation calls that had to evict.
    pub eviction_latency_ns: LatencySummary,
    /// Where those evictions' time went, summed over them.
    pub eviction_split_ns: EvictionSplit,
    /// Suspensions as a victim (not those for its own allocation's eviction): time to
    /// drain queued work.
    pub victim_drain_ns: LatencySummary,
    /// Suspensions as a victim (as `victim_drain_ns`): time paused while chunks were
    /// copied.
    pub victim_pause_ns: LatencySummary,
    /// VRAM accounted to the tenant over time: [time_ns, bytes] at every change.
    pub vram_timeline: Vec<(u64, u64)>,
    /// Why the tenant stopped early; null when it ran to the end.
    pub error: Option<String>,
    /// Its memory contract (absent when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract: Option<Contract>,
    /// Its kernels the scheduling policy preempted (`[scheduler]`).
    pub preemptions: u32,
    /// Work lost to preemption: what its preempted kernels had run when they stopped.
    pub wasted_ns: u64,
    /// Time the scheduling policy held its kernels.
    pub wait_ns: u64,
    /// Unified memory's figures (mode `uvm` only; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uvm: Option<UvmReport>,
    /// The fault log it replays beside the simulation (a `fault_log` tenant only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault_log: Option<FaultLogReport>,
    /// How a replayed tenant's program is timed (a `trace` or `fault_log` tenant only):
    /// `"recorded"`, or `"invented: "` and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
}

/// A replayed fault log's batches beside the simulated ones: how many, and their faults
/// (distinct pages) per batch, percentiles by nearest rank.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultLogReport {
    /// Batches in the log.
    pub logged_batches: u64,
    /// Fault batches the simulated driver serviced for the tenant.
    pub simulated_batches: u64,
    /// Faults in the log.
    pub logged_faults: u64,
    /// Faults in the simulated batches.
    pub simulated_faults: u64,
    /// Mean faults per logged batch.
    pub logged_faults_per_batch_mean: f64,
    /// Mean faults per simulated batch.
    pub simulated_faults_per_batch_mean: f64,
    /// Median faults per logged batch.
    pub logged_faults_per_batch_p50: u64,
    /// Median faults per simulated batch.
    pub simulated_faults_per_batch_p50: u64,
    /// 99th percentile of faults per logged batch.
    pub logged_faults_per_batch_p99: u64,
    /// 99th percentile of faults per simulated batch.
    pub simulated_faults_per_batch_p99: u64,
}

impl FaultLogReport {
    /// From each logged batch's faults and the simulated batches' histogram (entry n
    /// counts the batches of n faults).
    fn new(logged: &[u64], simulated_histogram: &[u64]) -> Self {
        let simulated: Vec<u64> = simulated_histogram
            .iter()
            .enumerate()
            .flat_map(|(n, count)| std::iter::repeat_n(n as u64, *count as usize))
            .collect();
        let (l, s) = (LatencySummary::of(logged), LatencySummary::of(&simulated));
        let total = |sizes: &[u64]| sizes.iter().sum::<u64>();
        let mean = |sizes: &[u64]| total(sizes) as f64 / sizes.len().max(1) as f64;
        Self {
            logged_batches: l.count,
            simulated_batches: s.count,
            logged_faults: total(logged),
            simulated_faults: total(&simulated),
            logged_faults_per_batch_mean: mean(logged),
            simulated_faults_per_batch_mean: mean(&simulated),
            logged_faults_per_batch_p50: l.p50,
            simulated_faults_per_batch_p50: s.p50,
            logged_faults_per_batch_p99: l.p99,
            simulated_faults_per_batch_p99: s.p99,
        }
    }
}

/// What unified memory did for one tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UvmReport {
    /// Touches of pages not in VRAM (duplicates within a batch merged).
    pub far_faults: u64,
    /// Fault batches serviced with a fault of the tenant.
    pub fault_batches: u64,
    /// Pages migrated to VRAM.
    pub pages_in: u64,
    /// Pages evicted to host memory.
    pub pages_out: u64,
    /// Faulted pages that had been evicted before.
    pub pages_thrashed: u64,
    /// Pages migrated by the prefetcher without being faulted.
    pub pages_prefetched: u64,
    /// Prefetched pages evicted before anybody touched them.
    pub prefetched_unused: u64,
    /// Time its kernels stalled on fault batches.
    pub fault_stall_ns: u64,
    /// Touches served from host memory over the link (delayed or zero-copy migration,
    /// pages pinned by the thrashing mitigation).
    pub remote_touches: u64,
    /// Fault batches that waited a nap for thrashing pages.
    pub throttles: u64,
    /// Pages the thrashing mitigation pinned in host memory.
    pub pins: u64,
    /// Evicted clean pages dropped instead of copied back (`invalidate_clean`).
    pub pages_dropped: u64,
    /// Belady's bound on the same page stream at the same VRAM (null unless `optimum =
    /// true`).
    pub optimum_pages_in: Option<u64>,
    /// Where `optimum = true` asked for the bound but the tenant's page stream passed
    /// this many touches (the limit that keeps its memory bounded): no bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimum_skipped_touches: Option<u64>,
    /// The migration pattern detected for each managed allocation, in allocation order
    /// (`streaming`, `regular`, `random`, `mixed`, or `undecided`).
    pub patterns: Vec<&'static str>,
    /// The plan each managed allocation follows at the end (`configured`, `tree`,
    /// `host-pinned`, `hot-in-vram`; always `configured` under `policy = "fixed"`).
    pub plans: Vec<&'static str>,
    /// Times the adaptive runtime changed an allocation's plan.
    pub plan_switches: u64,
    /// Per managed allocation, the detector's observations (the last 256), oldest
    /// first: the pattern's timeline.
    pub timeline: Vec<Vec<Observation>>,
    /// Per managed allocation, the adaptive runtime's plan switches (the last 256),
    /// oldest first: `[ns, plan]`.
    pub switches: Vec<Vec<(u64, &'static str)>>,
    /// Per managed allocation, the plan in force before the first of `switches` (`configured`
    /// unless older switches were dropped).
    pub plans_before_switches: Vec<&'static str>,
}

/// One observation of a managed allocation by the pattern detector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Observation {
    /// When it closed: a kernel's end, or the first time VRAM was full.
    pub ns: u64,
    /// 64 KiB big pages that faulted in the allocation since the observation before.
    pub migrated: u64,
    /// Whether they faulted in ascending order.
    pub linear: bool,
    /// Whether most had been migrated by an earlier kernel (null: no earlier kernel
    /// migrated any of the allocation).
    pub reused: Option<bool>,
    /// The allocation's pattern after this observation.
    pub pattern: &'static str,
}

/// Where eviction latency went, summed over a tenant's evicting allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EvictionSplit {
    /// Policy run time.
    pub policy: u64,
    /// DMA setup of the chunk copies.
    pub dma_setup: u64,
    /// DMA transfers.
    pub dma: u64,
    /// Waiting: victims draining, queueing behind other relocations and copies.
    pub waiting: u64,
}

/// Figures of the whole system.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SystemReport {
    /// When the last tenant ended.
    pub makespan_ns: u64,
    /// Tenants that failed (out of memory, refused by Gdev): the figures below over
    /// tenants that finished leave them out.
    pub tenants_failed: usize,
    /// System throughput: sum of 1 / slowdown over tenants that finished; null when no
    /// tenant has a slowdown (all failed), never a 0 that reads as a measured figure.
    pub stp: Option<f64>,
    /// Average normalized turnaround time: mean slowdown over tenants that finished;
    /// null when no tenant has a slowdown.
    pub antt: Option<f64>,
    /// Jain's index of the tenants' mean VRAM held over their lives; null when no tenant
    /// finished (the VRAM that tenants held until they failed says nothing of sharing).
    pub jain_vram: Option<f64>,
    /// Jain's index of the slowdowns of tenants that finished; null when no tenant has
    /// a slowdown.
    pub jain_slowdown: Option<f64>,
    /// Utilization of the link toward the device over the run (0 idle, 1 saturated).
    pub link_utilization_to_device: f64,
    /// Utilization of the link toward the host over the run.
    pub link_utilization_to_host: f64,
    /// The busier direction's utilization (unified memory's migrations included).
    pub link_utilization: f64,
}

/// The report of one scenario run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Scenario name (its file name without extension).
    pub scenario: String,
    /// Seed of the run.
    pub seed: u64,
    /// Device preset.
    pub device: String,
    /// Manager mode.
    pub manager: String,
    /// The settings that produced the run besides the tenants.
    pub settings: Settings,
    /// Per tenant, in scenario order.
    pub tenants: Vec<TenantReport>,
    /// System figures.
    pub system: SystemReport,
    /// Discrete events the simulation processed (the scenario's run, not the baselines).
    pub events: u64,
}

/// What a run was configured with, so that a report says what produced it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    /// VRAM available to the tenants.
    pub vram_bytes: u64,
    /// Host memory available for evicted data.
    pub host_bytes: u64,
    /// Unit of accounting and relocation.
    pub chunk_bytes: u64,
    /// Period of the return check.
    pub return_interval_ns: u64,
    /// The mode's parameters with their values (defaults included), as `key=value`.
    pub policy: Vec<String>,
    /// The mode the slowdowns' solo runs use, at its defaults (see
    /// [`Baselines::solo_ns`]): `native`, or `uvm` where memory is demand paged, so a
    /// setting that beats uvm's defaults gives a slowdown below 1.
    pub baseline_mode: &'static str,
}

/// The mode a tenant's solo baseline runs in, at its defaults: native, or, where the
/// scenario's memory is unified (demand paged), uvm.
fn baseline_mode(config: &SimConfig) -> &'static str {
    if config.manager.policy.needs().page_faults {
        "uvm"
    } else {
        "native"
    }
}

/// Jain's fairness index of `xs`: 1 when all equal, 1/n when one has everything; 1 for
/// an empty or all-zero list.
pub fn jain(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if squares == 0.0 {
        1.0
    } else {
        sum * sum / (xs.len() as f64 * squares)
    }
}

/// The time a tenant's slowdown compares: the measured phase, or the whole run when
/// the program has no phase.
fn measured_ns(t: &TenantOutcome) -> u64 {
    t.phase_ns.map_or(t.total_ns(), |(a, b)| b - a)
}

/// Solo baselines already measured: each solo run's whole configuration and its
/// measured-phase time. Shared by the runs of a sweep, which repeat the same programs
/// many times; safe to share between threads. The key is the configuration the solo
/// run is made of, so a baseline is reused only where every setting it depends on
/// (device, memory, chunk size, limits, faults, the program) is the same.
#[derive(Debug, Default)]
pub struct Baselines(Mutex<Vec<(SimConfig, u64)>>);

impl Baselines {
    /// The solo time of `spec` on `config`'s device: alone, with more VRAM than it can
    /// use, started at time 0, in native mode, or, where the scenario's memory is
    /// unified (demand paged), in mode `uvm` with its defaults (the program still pays
    /// its first touches, as PILOT's "running alone" does); measured once per solo
    /// configuration. 0 (no baseline, so no slowdown) when the tenant runs endlessly or
    /// fails even alone (host memory too small, say); a failed solo run is not kept.
    pub fn solo_ns(&self, config: &SimConfig, spec: &TenantSpec) -> Result<u64, SimError> {
        // An endless tenant alone would never end; it has no solo time.
        if spec.endless {
            return Ok(0);
        }
        let mode = baseline_mode(config);
        // Everything but the tenants, which the solo run replaces: cloning every
        // tenant's program to drop it was a twentieth of a sweep's time. Named field
        // by field, so that a new setting cannot be left out unseen.
        let SimConfig {
            preset,
            manager: _,
            tenants: _,
            check_invariants,
            unsafe_skip_suspend,
            limits,
            faults,
            sharing,
            optimum,
            optimum_max_touches,
        } = config;
        // What the run's seed and the tenant's names would change is nothing: the
        // solo modes make no random choice, and names are for reports. Left out, they
        // let every seed and tenant of a program share one baseline.
        let solo = SimConfig {
            manager: ManagerConfig {
                vram_bytes: u64::MAX / 4,
                policy: PolicySettings::named(mode),
                scheduling: Default::default(),
                gpu_time: Default::default(),
                idle: Default::default(),
                seed: 0,
                ..config.manager.clone()
            },
            // Alone with more VRAM than it can use, a contract changes nothing (and a
            // baseline mode may not honour its terms).
            tenants: vec![TenantSpec {
                start_ns: 0,
                contract: Contract::default(),
                name: String::new(),
                app: String::new(),
                ..spec.clone()
            }],
            preset: preset.clone(),
            check_invariants: *check_invariants,
            unsafe_skip_suspend: *unsafe_skip_suspend,
            limits: *limits,
            faults: faults.clone(),
            sharing: *sharing,
            optimum: *optimum,
            optimum_max_touches: *optimum_max_touches,
        };
        let known =
            |list: &Vec<(SimConfig, u64)>| list.iter().find(|(c, _)| *c == solo).map(|(_, ns)| *ns);
        if let Some(ns) = known(&self.0.lock().expect("no panics while locked")) {
            return Ok(ns);
        }
        let outcome = simulate(solo.clone())?;
        if outcome.tenants[0].error.is_some() {
            return Ok(0);
        }
        let ns = measured_ns(&outcome.tenants[0]);
        let mut list = self.0.lock().expect("no panics while locked");
        if known(&list).is_none() {
            list.push((solo, ns));
        }
        Ok(ns)
    }
}

/// Runs a configuration and the solo baselines its report needs.
pub fn run_and_report(scenario: &str, seed: u64, config: &SimConfig) -> Result<Report, SimError> {
    run_and_report_with(scenario, seed, config, &Baselines::default())
}

/// [`run_and_report`] with baselines shared across runs.
pub fn run_and_report_with(
    scenario: &str,
    seed: u64,
    config: &SimConfig,
    baselines: &Baselines,
) -> Result<Report, SimError> {
    run_and_report_progress(scenario, seed, config, baselines, &mut |_, _| {})
}

/// [`run_and_report_with`], calling `progress(simulated ns, events)` now and then
/// during the main run (see [`Engine::run_with_progress`]).
pub fn run_and_report_progress(
    scenario: &str,
    seed: u64,
    config: &SimConfig,
    baselines: &Baselines,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, SimError> {
    let outcome = Engine::new(config.clone()).run_with_progress(progress)?;
    let solo_ns = config
        .tenants
        .iter()
        .map(|spec| baselines.solo_ns(config, spec))
        .collect::<Result<Vec<u64>, _>>()?;
    Ok(build(scenario, seed, config, &outcome, &solo_ns))
}

fn build(
    scenario: &str,
    seed: u64,
    config: &SimConfig,
    outcome: &Outcome,
    solo_ns: &[u64],
) -> Report {
    let tenants: Vec<TenantReport> = outcome
        .tenants
        .iter()
        .zip(solo_ns)
        .zip(&config.tenants)
        .map(|((t, solo), spec)| TenantReport::new(t, *solo, spec))
        .collect();
    Report {
        scenario: scenario.to_owned(),
        seed,
        device: config.preset.name.to_owned(),
        manager: config.manager.policy.name().to_owned(),
        settings: Settings::of(config),
        system: SystemReport::new(outcome, &tenants),
        tenants,
        events: outcome.events,
    }
}

impl TenantReport {
    /// The figures of tenant `t`, whose solo run took `solo_ns` (0: none to compare).
    fn new(t: &TenantOutcome, solo_ns: u64, spec: &TenantSpec) -> Self {
        // Suspensions for another tenant's allocation, or a return or swap: those for
        // its own allocation count in its eviction latency.
        let victim = |of: fn(&VictimPause) -> u64| -> Vec<u64> {
            t.pauses
                .iter()
                .filter(|p| !p.own_allocation)
                .map(of)
                .collect()
        };
        TenantReport {
            name: t.name.clone(),
            app: t.app.clone(),
            total_ns: t.total_ns(),
            phase_ns: match (&t.error, t.phase_ns) {
                (Some(_), None) => 0,
                _ => measured_ns(t),
            },
            slowdown: match (&t.error, solo_ns) {
                (Some(_), _) | (None, 0) => None,
                (None, solo) => Some(measured_ns(t) as f64 / solo as f64),
            },
            vram_peak_bytes: t.vram_peak_bytes,
            local_bytes: t.local_bytes.round() as u64,
            remote_bytes: t.remote_bytes.round() as u64,
            bytes_evicted: t.bytes_evicted,
            bytes_returned: t.bytes_returned,
            alloc_latency_ns: LatencySummary::of(&t.alloc_latencies_ns),
            eviction_latency_ns: LatencySummary::of(
                &t.evictions.iter().map(|e| e.total_ns).collect::<Vec<_>>(),
            ),
            eviction_split_ns: t.evictions.iter().fold(EvictionSplit::default(), |s, e| {
                EvictionSplit {
                    policy: s.policy + e.policy_ns,
                    dma_setup: s.dma_setup + e.dma_setup_ns,
                    dma: s.dma + e.dma_ns,
                    waiting: s.waiting + e.waiting_ns,
                }
            }),
            victim_drain_ns: LatencySummary::of(&victim(|p| p.drain_ns)),
            victim_pause_ns: LatencySummary::of(&victim(|p| p.pause_ns)),
            vram_timeline: t.vram_timeline.clone(),
            error: t.error.clone(),
            contract: (!t.contract.is_default()).then_some(t.contract),
            preemptions: t.preemptions,
            wasted_ns: t.wasted_ns,
            wait_ns: t.wait_ns,
            uvm: t.paging.as_ref().map(|p| UvmReport::new(p, &t.allocations)),
            fault_log: spec
                .logged_faults_per_batch
                .as_ref()
                .map(|logged| FaultLogReport::new(logged, &t.faults_per_batch)),
            timing: spec.timing.clone(),
        }
    }
}

impl UvmReport {
    /// A tenant's unified-memory figures from its paging counts and its managed
    /// allocations. The report's fields interleave the paging machine's counts, the
    /// device's and the allocations', in an order the JSON keeps, so they are listed
    /// here rather than serialized as the counts' own types.
    fn new(p: &PagingOutcome, allocations: &[AllocationPaging]) -> Self {
        UvmReport {
            far_faults: p.stats.far_faults,
            fault_batches: p.stats.fault_batches,
            pages_in: p.stats.pages_in,
            pages_out: p.stats.pages_out,
            pages_thrashed: p.stats.pages_thrashed,
            pages_prefetched: p.stats.pages_prefetched,
            prefetched_unused: p.device.prefetched_unused,
            fault_stall_ns: p.fault_stall_ns,
            remote_touches: p.device.remote_touches,
            throttles: p.stats.throttles,
            pins: p.stats.pins,
            pages_dropped: p.device.pages_dropped,
            optimum_pages_in: p.optimum_pages_in,
            optimum_skipped_touches: p.optimum_skipped_touches,
            patterns: allocations.iter().map(|a| a.pattern.name()).collect(),
            plans: allocations.iter().map(|a| a.plan.name()).collect(),
            plan_switches: p.stats.plan_switches,
            timeline: allocations
                .iter()
                .map(|a| a.timeline.iter().map(Observation::from).collect())
                .collect(),
            switches: allocations
                .iter()
                .map(|a| a.switches.iter().map(|(ns, p)| (*ns, p.name())).collect())
                .collect(),
            plans_before_switches: allocations
                .iter()
                .map(|a| a.plan_before_switches.name())
                .collect(),
        }
    }
}

impl From<&Observed> for Observation {
    fn from(o: &Observed) -> Self {
        Observation {
            ns: o.ns,
            migrated: o.migrated,
            linear: o.linear,
            reused: o.reused,
            pattern: o.pattern.name(),
        }
    }
}

impl SystemReport {
    /// The system figures of `outcome`, whose tenants' figures are `tenants`.
    fn new(outcome: &Outcome, tenants: &[TenantReport]) -> Self {
        let slowdowns: Vec<f64> = tenants.iter().filter_map(|t| t.slowdown).collect();
        let vram: Vec<f64> = outcome
            .tenants
            .iter()
            .map(TenantOutcome::mean_vram_bytes)
            .collect();
        SystemReport {
            makespan_ns: outcome.makespan_ns,
            tenants_failed: tenants.iter().filter(|t| t.error.is_some()).count(),
            link_utilization_to_device: outcome.link_utilization.0,
            link_utilization_to_host: outcome.link_utilization.1,
            link_utilization: outcome.link_utilization.0.max(outcome.link_utilization.1),
            stp: (!slowdowns.is_empty()).then(|| slowdowns.iter().map(|s| 1.0 / s).sum()),
            antt: (!slowdowns.is_empty())
                .then(|| slowdowns.iter().sum::<f64>() / slowdowns.len() as f64),
            jain_vram: (tenants.iter().any(|t| t.error.is_none())).then(|| jain(&vram)),
            jain_slowdown: (!slowdowns.is_empty()).then(|| jain(&slowdowns)),
        }
    }
}

impl Settings {
    /// What `config` set besides its tenants.
    fn of(config: &SimConfig) -> Self {
        Settings {
            vram_bytes: config.manager.vram_bytes,
            host_bytes: config.manager.host_bytes,
            chunk_bytes: config.manager.chunk_bytes,
            return_interval_ns: config.manager.return_interval_ns,
            policy: config
                .manager
                .policy
                .values()
                .iter()
                .map(|(key, value)| match value {
                    ParamValue::Choice(c) => format!("{key}={c}"),
                    ParamValue::Count(n) => format!("{key}={n}"),
                })
                .collect(),
            baseline_mode: baseline_mode(config),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples: Vec<u64> = (1..=100).rev().collect();
        let s = LatencySummary::of(&samples);
        assert_eq!((s.count, s.p50, s.p99, s.max), (100, 50, 99, 100));
        assert_eq!(
            LatencySummary::of(&[7]),
            LatencySummary {
                count: 1,
                p50: 7,
                p99: 7,
                max: 7
            }
        );
        assert_eq!(LatencySummary::of(&[]), LatencySummary::default());
    }

    #[test]
    fn a_fault_log_report_sets_logged_batches_beside_the_histogram() {
        // Simulated: two batches of 1 fault, one of 3.
        let r = FaultLogReport::new(&[4, 0, 2], &[0, 2, 0, 1]);
        assert_eq!((r.logged_batches, r.simulated_batches), (3, 3));
        assert_eq!((r.logged_faults, r.simulated_faults), (6, 5));
        assert_eq!(r.logged_faults_per_batch_mean, 2.0);
        assert!((r.simulated_faults_per_batch_mean - 5.0 / 3.0).abs() < 1e-12);
        assert_eq!(
            (r.logged_faults_per_batch_p50, r.logged_faults_per_batch_p99),
            (2, 4)
        );
        assert_eq!(
            (
                r.simulated_faults_per_batch_p50,
                r.simulated_faults_per_batch_p99
            ),
            (1, 3)
        );
        let none = FaultLogReport::new(&[1], &[]);
        assert_eq!(
            (none.simulated_batches, none.simulated_faults_per_batch_mean),
            (0, 0.0)
        );
    }

    /// Two nn tenants in 100 MiB under Gdev: it refuses both (see the behaviours' tests).
    #[test]
    fn figures_over_no_finished_tenant_are_null_not_zero() {
        let gtx480 = crate::preset::find("gtx480").unwrap();
        let program = crate::apps::find("nn")
            .unwrap()
            .program("default", 2, gtx480.shape())
            .unwrap();
        let tenants = ["a", "b"]
            .map(|n| TenantSpec::new(n, "nn", program.clone()))
            .into();
        let config = SimConfig::new(
            gtx480.clone(),
            100 * gpuswap_core::MIB,
            PolicySettings::named("gdev"),
            tenants,
        );
        let report = run_and_report("gdev", 1, &config).unwrap();
        let s = &report.system;
        assert_eq!(s.tenants_failed, 2);
        // These once read stp 0, antt 0, jain_slowdown 1 and jain_vram 0.5: figures
        // of a run in which nothing ran.
        assert_eq!(
            (s.stp, s.antt, s.jain_slowdown, s.jain_vram),
            (None, None, None, None)
        );
        // With ample memory both finish and every figure is there.
        let ample = SimConfig::new(
            gtx480,
            1 << 40,
            PolicySettings::named("gdev"),
            config.tenants.clone(),
        );
        let s = run_and_report("gdev", 1, &ample).unwrap().system;
        assert_eq!(s.tenants_failed, 0);
        assert!(s.stp.is_some_and(|stp| stp > 0.0) && s.antt.is_some_and(|a| a >= 1.0));
        assert!(s.jain_slowdown.is_some() && s.jain_vram.is_some());
    }

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain(&[3.0, 3.0, 3.0]), 1.0);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[]), 1.0);
        assert!((jain(&[1.0, 2.0]) - 0.9).abs() < 1e-12);
    }
}
