//! What a simulation takes (tenants, configuration) and what it gives back (outcomes).

use std::collections::BTreeMap;

use gpuswap_core::gpu_time::scheduling::SchedulingConfig;
use gpuswap_core::{
    Contract, DEFAULT_CHUNK_BYTES, DEFAULT_RETURN_INTERVAL_NS, ManagerConfig, PolicySettings,
};
use thiserror::Error;

use crate::preset::{Preset, TimeSlicing};
use crate::program::{Program, SharedProgram};

/// One tenant of a simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantSpec {
    /// Name in reports.
    pub name: String,
    /// The app it runs (for reports).
    pub app: String,
    /// What it does (the app's program, without the runtime's system buffers), shared
    /// with the other configurations that run it.
    pub program: SharedProgram,
    /// When it starts.
    pub start_ns: u64,
    /// Buffer priorities by label; unlisted buffers get the manager's default rule.
    pub priorities: BTreeMap<String, i32>,
    /// Per-chunk priorities by buffer label (the `priority-chunk` policy).
    pub chunk_priorities: BTreeMap<String, Vec<i32>>,
    /// The share of the device's SMs its kernels occupy alone (0 to 1): what it asks of
    /// the SMs when kernels of several tenants run at once (`Sharing::Mps`).
    pub sm_share: f64,
    /// It runs until every other tenant has ended (an interference generator such as
    /// pageDoS), then ends as if its program had finished.
    pub endless: bool,
    /// For a tenant replaying a unified-memory fault log (`trace::uvm_log`): each logged
    /// batch's faults, which the report compares with the simulated batches.
    pub logged_faults_per_batch: Option<Vec<u64>>,
    /// For a tenant replaying a trace or a fault log: how its program is timed
    /// (`"recorded"`, or `"invented: "` and why), for the report.
    pub timing: Option<String>,
    /// Its memory contract, given to the manager when it starts (which may refuse it).
    pub contract: Contract,
    /// How long it idles between repeats of its measured phase (a notebook between
    /// cells, a server between bursts): no GPU work while it idles.
    pub idle_between: IdleBetween,
}

impl TenantSpec {
    /// A tenant without priorities.
    pub fn new(name: impl Into<String>, app: impl Into<String>, program: Program) -> Self {
        Self {
            name: name.into(),
            app: app.into(),
            program: program.into(),
            start_ns: 0,
            priorities: BTreeMap::new(),
            chunk_priorities: BTreeMap::new(),
            sm_share: 1.0,
            endless: false,
            logged_faults_per_batch: None,
            timing: None,
            contract: Contract::default(),
            idle_between: IdleBetween::None,
        }
    }
}

/// Idle time between a tenant's repeats of its measured phase, once the GPU has done
/// the work of the repeat that ended (after the last repeat it does not idle).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdleBetween {
    /// No idle time: the next repeat starts at once (every app before idle times).
    #[default]
    None,
    /// The same time after every repeat.
    Fixed {
        /// The idle time.
        ns: u64,
    },
    /// Exponentially distributed times of this mean (requests or cells arriving as a
    /// Poisson process), drawn with ChaCha8 from the run's seed on the tenant's own
    /// stream. They belong to the tenant, not to the run: its solo baseline, alone under
    /// another seed, idles the same times.
    Exponential {
        /// The mean idle time.
        mean_ns: u64,
        /// The seed of the run the tenant is part of.
        seed: u64,
        /// The tenant's index in that run: tenants alike draw different times.
        stream: u64,
    },
}

impl IdleBetween {
    /// The same idle times in a run of seed `seed`: exponential ones drawn anew.
    pub fn with_seed(self, seed: u64) -> Self {
        match self {
            Self::Exponential {
                mean_ns, stream, ..
            } => Self::Exponential {
                mean_ns,
                seed,
                stream,
            },
            other => other,
        }
    }
}

/// How the device shares its compute engine among tenants' kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sharing {
    /// One kernel at a time, round-robin over tenants at kernel granularity: how Fermi,
    /// without compute preemption, time-slices between contexts.
    #[default]
    TimeSlice,
    /// NVIDIA MPS: kernels of different tenants run at once (each tenant's in order),
    /// sharing the SMs by their demand and VRAM bandwidth and the link max-min fairly.
    Mps,
    /// Time slicing with compute preemption (Pascal and later): one context at a time,
    /// each running its kernels back to back for up to a slice while it has work, and
    /// preempted mid-kernel when its slice ends and another context waits (see
    /// `engine::slices`).
    Preemptive(TimeSlicing),
}

impl Sharing {
    /// The names scenario files use, in the order help texts list them.
    pub const NAMES: [&str; 3] = ["time-slice", "mps", "preemptive"];

    /// The name scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            Self::TimeSlice => Self::NAMES[0],
            Self::Mps => Self::NAMES[1],
            Self::Preemptive(_) => Self::NAMES[2],
        }
    }

    /// How `preset` shares its compute engine between processes without MPS:
    /// preemptive time slicing where it has compute preemption, whole kernels in
    /// turn where it has not.
    pub fn of_preset(preset: &Preset) -> Self {
        preset
            .time_slicing
            .map_or(Self::TimeSlice, Self::Preemptive)
    }

    /// Whether kernels of several tenants run at once, so that a kernel's page touches
    /// must interleave with theirs: it then runs in segments (see `engine::compute`).
    pub(crate) fn concurrent(self) -> bool {
        self == Self::Mps
    }
}

/// Everything a simulation needs.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// The device.
    pub preset: Preset,
    /// The memory manager (its `vram_bytes` is the VRAM available to tenants).
    pub manager: ManagerConfig,
    /// The tenants.
    pub tenants: Vec<TenantSpec>,
    /// Check the manager's accounting after every event (tests; costs time).
    pub check_invariants: bool,
    /// Answer suspensions without suspending: only for the test that shows why
    /// relocation needs suspension (a write during a copy is lost).
    pub unsafe_skip_suspend: bool,
    /// Where a run stops, however the scenario is written.
    pub limits: RunLimits,
    /// Injected faults and schedule perturbations (deterministic simulation testing);
    /// the default injects nothing.
    pub faults: Faults,
    /// How kernels of different tenants share the compute engine.
    pub sharing: Sharing,
    /// Also compute Belady's bound on each tenant's page stream (unified memory): a
    /// measurement of the simulator, which keeps the stream (memory grows with it).
    pub optimum: bool,
    /// The most page touches a tenant's stream keeps for the bound (8 bytes each, and as
    /// much again to compute it); past it the bound is skipped, so memory stays bounded
    /// whatever the run's length.
    pub optimum_max_touches: usize,
}

/// Default of [`SimConfig::optimum_max_touches`]: 2^25 touches, 256 MiB of stream and
/// about 512 MiB while the bound is computed (a 128 GiB working set's pages, touched
/// once each; runs longer than that are not what the bound is for).
pub const OPTIMUM_MAX_TOUCHES: usize = 1 << 25;

/// Faults and schedule perturbations for deterministic simulation testing (`gpuswap
/// check`), every random choice drawn from `seed`: the same faults give the same run.
/// The default injects nothing and leaves the engine's schedule as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// Seed of every random choice below.
    pub seed: u64,
    /// Tenants that crash, and where.
    pub crashes: Vec<Crash>,
    /// Probability that one attempt of a relocation copy fails.
    pub copy_failure: f64,
    /// Events due at the same time run in a seeded random order instead of the order
    /// they were scheduled in (any order is a valid execution).
    pub shuffle_ties: bool,
    /// The driver reports a drained tenant up to this much late, and a relocation copy
    /// takes up to this much longer to set up.
    pub max_answer_delay_ns: u64,
    /// The return timer fires up to this much late.
    pub max_timer_lateness_ns: u64,
}

impl Faults {
    /// Whether anything is injected or perturbed.
    pub fn any(&self) -> bool {
        *self
            != Self {
                seed: self.seed,
                ..Self::default()
            }
    }
}

/// A tenant crash: the tenant dies at once, whatever it is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crash {
    /// Index of the tenant in the scenario.
    pub tenant: usize,
    /// When.
    pub at: CrashPoint,
}

/// Where a tenant crashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// At this simulated time (if it still runs).
    Time(u64),
    /// Right after its n-th allocation request (1-based), while it waits for the answer.
    Alloc(u32),
    /// When it is asked to suspend for the n-th time: a victim mid-relocation.
    Suspend(u32),
    /// When the n-th relocation copy of its chunks is handed to a copy engine.
    Copy(u32),
}

/// Bounds on one run: a scenario that would run for ever (a huge repetition count, a
/// start time near the end of time) stops with [`SimError::Limit`] instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLimits {
    /// Events handled at most.
    pub max_events: u64,
    /// Simulated time at most.
    pub max_sim_ns: u64,
    /// Pages touched at most by unified-memory kernels' page walks, all tenants together:
    /// the work inside one event (a kernel walking terabytes is one event).
    pub max_page_touches: u64,
}

impl Default for RunLimits {
    /// 4 billion events (a few minutes of wall time), 10^6 s (11.6 days) of simulated
    /// time and 10^10 page touches (at most about three minutes of wall time, for random
    /// touches; seconds for linear ones): far beyond every shipped scenario (the longest,
    /// Gdev thrashing lud, simulates 12 239 s; no unified-memory one touches 10^9 pages),
    /// well below where time arithmetic could overflow.
    fn default() -> Self {
        Self {
            max_events: 4_000_000_000,
            max_sim_ns: 1_000_000 * 1_000_000_000,
            max_page_touches: DEFAULT_MAX_PAGE_TOUCHES,
        }
    }
}

/// The default of [`RunLimits::max_page_touches`].
pub const DEFAULT_MAX_PAGE_TOUCHES: u64 = 10_000_000_000;

/// Which of the [`RunLimits`] a run reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `max_events`.
    Events,
    /// `max_sim_ns`.
    SimTime,
    /// `max_page_touches`.
    PageTouches,
}

/// Why a run ended without an outcome.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum SimError {
    /// An invariant broke: a bug, never bad input.
    #[error(transparent)]
    Invariant(#[from] InvariantError),
    /// The run reached one of its [`RunLimits`].
    #[error("{0}")]
    Limit(LimitReached),
}

/// A run stopped at a limit.
#[derive(Clone, Debug, Error, PartialEq)]
#[error(
    "the run stopped at its limit of {what} after {events} events and {time_ns} ns of simulated time"
)]
pub struct LimitReached {
    /// Which limit: "N events", "N ns of simulated time" or "N page touches".
    pub what: String,
    /// Events handled by then.
    pub events: u64,
    /// Simulated time reached.
    pub time_ns: u64,
    /// When the next event was due (beyond the time limit, or the event the event
    /// limit stopped before; for a kernel stopped inside its page walk, when it would
    /// have ended at the earliest).
    pub next_ns: u64,
    /// Which limit.
    pub limit: Limit,
}

impl SimConfig {
    /// A configuration with the manager's default chunk size and return interval, host
    /// memory from the preset, seed 0 and no checks.
    pub fn new(
        preset: Preset,
        vram_bytes: u64,
        policy: PolicySettings,
        tenants: Vec<TenantSpec>,
    ) -> Self {
        Self {
            manager: ManagerConfig {
                vram_bytes,
                host_bytes: preset.host_memory_bytes,
                chunk_bytes: DEFAULT_CHUNK_BYTES,
                policy,
                return_interval_ns: DEFAULT_RETURN_INTERVAL_NS,
                seed: 0,
                scheduling: SchedulingConfig::default(),
                gpu_time: Default::default(),
                idle: Default::default(),
            },
            preset,
            tenants,
            check_invariants: false,
            unsafe_skip_suspend: false,
            limits: RunLimits::default(),
            faults: Faults::default(),
            sharing: Sharing::default(),
            optimum: false,
            optimum_max_touches: OPTIMUM_MAX_TOUCHES,
        }
    }
}

/// One eviction as seen by the tenant whose allocation caused it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EvictionLatency {
    /// From the allocation call to its return.
    pub total_ns: u64,
    /// Policy run time.
    pub policy_ns: u64,
    /// DMA setup of the chunk copies.
    pub dma_setup_ns: u64,
    /// DMA transfers.
    pub dma_ns: u64,
    /// The rest: victims draining, queueing behind other relocations and copies.
    pub waiting_ns: u64,
}

/// One suspension of a tenant whose data was relocated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VictimPause {
    /// From the suspension request until queued work drained.
    pub drain_ns: u64,
    /// From drained until resumed (the copies).
    pub pause_ns: u64,
    /// Whether it was suspended for the eviction its own allocation asked for: the
    /// manager moves the allocator's own chunks too (fair victim selection can pick
    /// it), and that pause is part of its allocation's latency, not a victim's.
    pub own_allocation: bool,
}

/// What happened to one tenant.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantOutcome {
    /// Name.
    pub name: String,
    /// App.
    pub app: String,
    /// When it started.
    pub start_ns: u64,
    /// When it ended (finished or failed).
    pub end_ns: u64,
    /// The measured phase, when the program reached both markers.
    pub phase_ns: Option<(u64, u64)>,
    /// VRAM accounted to it over time: (time, bytes) at every change.
    pub vram_timeline: Vec<(u64, u64)>,
    /// Highest VRAM held.
    pub vram_peak_bytes: u64,
    /// Kernel bytes served from VRAM.
    pub local_bytes: f64,
    /// Kernel bytes served from host memory.
    pub remote_bytes: f64,
    /// Bytes relocated to host memory.
    pub bytes_evicted: u64,
    /// Bytes relocated back to VRAM.
    pub bytes_returned: u64,
    /// Latency of each allocation call.
    pub alloc_latencies_ns: Vec<u64>,
    /// Allocations that had to evict, with their latency split.
    pub evictions: Vec<EvictionLatency>,
    /// Suspensions as a victim (or winner of a return).
    pub pauses: Vec<VictimPause>,
    /// Why the tenant stopped early.
    pub error: Option<String>,
    /// Its memory contract.
    pub contract: Contract,
    /// Unified memory's counts for the tenant (mode `uvm` only).
    pub paging: Option<PagingOutcome>,
    /// Unified memory: what the adaptive runtime knows of each managed allocation
    /// (pattern, plan, timeline), in allocation order; empty outside mode `uvm`.
    pub allocations: Vec<gpuswap_core::uvm::AllocationPaging>,
    /// Unified memory: how many of its fault batches had each number of faults (entry
    /// n counts the batches of n faults; they sum to its `fault_batches`); empty outside
    /// mode `uvm`.
    pub faults_per_batch: Vec<u64>,
    /// Its kernels the scheduling policy preempted.
    pub preemptions: u32,
    /// Time its preempted kernels had run when they stopped (work lost: they ran again
    /// from their start).
    pub wasted_ns: u64,
    /// Time the scheduling policy held its kernels.
    pub wait_ns: u64,
    /// The longest the scheduling policy held one of its kernels.
    pub longest_wait_ns: u64,
    /// Its longest kernel, from its (last) start to its end.
    pub longest_kernel_ns: u64,
}

/// What unified memory did for one tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagingOutcome {
    /// The manager's counts (its decisions).
    pub stats: gpuswap_core::uvm::PagingStats,
    /// The MMU's counts (what the device saw).
    pub device: crate::mmu::PageCounts,
    /// Time its kernels stalled on fault batches.
    pub fault_stall_ns: u64,
    /// Belady's bound on its page stream at the paging machine's VRAM, when asked for
    /// (`optimum = true`).
    pub optimum_pages_in: Option<u64>,
    /// The limit of touches its stream passed, where the bound was asked for but skipped.
    pub optimum_skipped_touches: Option<u64>,
}

impl TenantOutcome {
    /// Time from start to end.
    pub fn total_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// VRAM held on average over the tenant's life.
    pub fn mean_vram_bytes(&self) -> f64 {
        let total = self.total_ns();
        if total == 0 {
            return self.vram_peak_bytes as f64;
        }
        let mut area = 0.0;
        for (i, (t, bytes)) in self.vram_timeline.iter().enumerate() {
            let next = self.vram_timeline.get(i + 1).map_or(self.end_ns, |n| n.0);
            area += (next.min(self.end_ns) - (*t).min(self.end_ns)) as f64 * *bytes as f64;
        }
        area / total as f64
    }
}

/// What happened in a simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// One per tenant, in scenario order.
    pub tenants: Vec<TenantOutcome>,
    /// When the last tenant ended.
    pub makespan_ns: u64,
    /// Events processed. A wake-up that only passes one part of a kernel's or copy's
    /// end (its fixed part while its link flows run, or the reverse) is none: a kernel
    /// costs one completion event.
    pub events: u64,
    /// How busy each link direction was over the run (time 0 to the last event): bytes
    /// moved over what its bandwidth could move, as (to device, to host).
    pub link_utilization: (f64, f64),
}

/// A simulation that broke an invariant (a bug, never bad input).
#[derive(Clone, Debug, Error, PartialEq)]
#[error("invariant broken at {time_ns} ns: {message}")]
pub struct InvariantError {
    /// When.
    pub time_ns: u64,
    /// What.
    pub message: String,
}
