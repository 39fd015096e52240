//! What a sweep keeps of a run: the summary metrics and each tenant's results.csv
//! columns, taken from the run's report (tenants on a discrete GPU) or outcome (VMs on a
//! virtualised integrated GPU).

use gpuswap_sim::report::{Report, TenantReport};
use gpuswap_vgpu::engine::VgpuOutcome;

/// What a sweep's scenario runs: tenants on a discrete GPU, or VMs on a virtualised
/// integrated GPU. Each has its own summary metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `[[tenant]]` scenarios.
    Tenants,
    /// `[[tenant]]` scenarios in a mode that pages (`uvm`): unified memory's counts too.
    PagedTenants,
    /// `[[vm]]` scenarios.
    Vms,
}

impl Kind {
    /// The summary metrics of its runs, the columns of results.csv and summary.csv.
    pub fn metrics(self) -> &'static [&'static str] {
        match self {
            Self::Tenants => &SUMMARY_METRICS[..TENANT_METRICS],
            Self::PagedTenants => &SUMMARY_METRICS,
            Self::Vms => &VM_METRICS,
        }
    }
}

/// The results.csv name of the tenant at `index` when tenant lists vary.
pub(super) fn positional(index: usize) -> String {
    format!("tenant[{index}]")
}

/// How many of [`SUMMARY_METRICS`] every tenant run has; the rest are unified memory's,
/// summed over the tenants.
const TENANT_METRICS: usize = 8;

/// System figures of a VM run summarized per grid point.
pub(super) const VM_METRICS: [&str; 9] = [
    "slot_copies",
    "entries_copied",
    "switches",
    "cycles_per_switch",
    "switch_cycles",
    "mean_fps",
    "vms_failed",
    "reallocations",
    "makespan_ns",
];

/// What the outputs keep of one run's report: the summary metrics and the per-tenant
/// columns of results.csv, taken in the worker right after the run. A whole report holds
/// every tenant's VRAM timeline, so keeping it in every row made a sweep's memory grow
/// with the length of its runs as well as their number; these are fixed-size.
#[derive(Clone, Debug, PartialEq)]
pub struct RunFigures {
    /// What ran: names the metrics.
    pub kind: Kind,
    /// The kind's metrics ([`Kind::metrics`]), in order; None where one has no value.
    pub metrics: Vec<Option<f64>>,
    /// Per tenant of the base scenario, by name; None when the run had no tenant of that
    /// name (a varied name).
    pub tenants: Vec<Option<TenantFigures>>,
    /// Tenants (VMs) that failed: the figures over tenants that finished leave them out.
    pub tenants_failed: usize,
    /// Discrete events the simulation processed.
    pub events: u64,
    /// Unified memory: every tenant's managed allocations' pattern timeline (bounded by
    /// the detector's history), the rows of patterns.csv.
    pub timeline: Vec<TimelineRow>,
}

/// A row of patterns.csv: an observation of a managed allocation by the pattern
/// detector, or a plan switch of the adaptive runtime.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineRow {
    /// The tenant's name.
    pub tenant: String,
    /// The allocation's number among the tenant's managed allocations.
    pub allocation: usize,
    /// When.
    pub ns: u64,
    /// `observation` or `switch`.
    pub event: &'static str,
    /// Observations: big pages migrated, ascending order, re-referenced (`None` for a
    /// switch, or no earlier kernel).
    pub migrated: Option<u64>,
    /// See `migrated`.
    pub linear: Option<bool>,
    /// See `migrated`.
    pub reused: Option<bool>,
    /// The allocation's pattern then.
    pub pattern: &'static str,
    /// The plan in force after the event.
    pub plan: &'static str,
}

impl TimelineRow {
    /// The columns of patterns.csv after the point's.
    pub const COLUMNS: [&str; 10] = [
        "run",
        // Not "tenant": a sweep that varies the tenant list has a "tenant" column already.
        "tenant_name",
        "allocation",
        "ns",
        "event",
        "migrated",
        "linear",
        "reused",
        "pattern",
        "plan",
    ];

    /// The cells of its columns, after the point's and the run's.
    pub(super) fn cells(&self) -> Vec<String> {
        let opt = |v: Option<String>| v.unwrap_or_default();
        vec![
            self.tenant.clone(),
            self.allocation.to_string(),
            self.ns.to_string(),
            self.event.to_owned(),
            opt(self.migrated.map(|m| m.to_string())),
            opt(self.linear.map(|l| l.to_string())),
            opt(self.reused.map(|r| r.to_string())),
            self.pattern.to_owned(),
            self.plan.to_owned(),
        ]
    }

    /// A tenant's rows, per allocation in time order (an observation before a switch it
    /// caused).
    fn of(t: &TenantReport) -> Vec<Self> {
        let Some(u) = &t.uvm else {
            return Vec::new();
        };
        let mut rows = Vec::new();
        for (a, (observations, switches)) in u.timeline.iter().zip(&u.switches).enumerate() {
            let (mut o, mut s) = (observations.iter().peekable(), switches.iter().peekable());
            let (mut pattern, mut plan) = ("undecided", u.plans_before_switches[a]);
            loop {
                let take_observation = match (o.peek(), s.peek()) {
                    (Some(ob), Some((ns, _))) => ob.ns <= *ns,
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (None, None) => break,
                };
                let row = if take_observation {
                    let ob = o.next().expect("peeked");
                    pattern = ob.pattern;
                    Self {
                        ns: ob.ns,
                        event: "observation",
                        migrated: Some(ob.migrated),
                        linear: Some(ob.linear),
                        reused: ob.reused,
                        pattern,
                        plan,
                        tenant: t.name.clone(),
                        allocation: a,
                    }
                } else {
                    let (ns, new) = s.next().expect("peeked");
                    plan = new;
                    Self {
                        ns: *ns,
                        event: "switch",
                        migrated: None,
                        linear: None,
                        reused: None,
                        pattern,
                        plan,
                        tenant: t.name.clone(),
                        allocation: a,
                    }
                };
                rows.push(row);
            }
        }
        rows
    }
}

impl RunFigures {
    /// Takes the figures of a report; `tenants` names the tenants of results.csv's
    /// columns (by name, or `tenant[i]` by position: see `Plan::tenants`).
    pub fn of(report: &Report, kind: Kind, tenants: &[String]) -> Self {
        Self {
            kind,
            metrics: kind.metrics().iter().map(|m| metric(report, m)).collect(),
            tenants: tenants
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    report
                        .tenants
                        .iter()
                        .find(|t| t.name == *name)
                        .or_else(|| {
                            (*name == positional(i))
                                .then(|| report.tenants.get(i))
                                .flatten()
                        })
                        .map(TenantFigures::of)
                })
                .collect(),
            tenants_failed: report.system.tenants_failed,
            events: report.events,
            timeline: report.tenants.iter().flat_map(TimelineRow::of).collect(),
        }
    }

    /// Takes the figures of a VM run: no per-tenant columns; a VM that failed to start
    /// counts as a failed tenant. The mean frame rate is over the VMs that rendered.
    pub fn of_vms(outcome: &VgpuOutcome) -> Self {
        let failed = crate::vm_figures::refused(outcome);
        let value = |name: &str| -> Option<f64> {
            Some(match name {
                "slot_copies" => outcome.slot_copies as f64,
                "entries_copied" => outcome.entries_copied as f64,
                "switches" => outcome.switches as f64,
                // No switch, no cost per switch (not 0 cycles).
                "cycles_per_switch" if outcome.switches == 0 => return None,
                "cycles_per_switch" => outcome.cycles_per_switch(),
                "switch_cycles" => outcome.switch_cycles as f64,
                "mean_fps" => return crate::vm_figures::mean_fps(outcome),
                "vms_failed" => failed as f64,
                "reallocations" => outcome.reallocations as f64,
                "makespan_ns" => outcome.makespan_ns as f64,
                _ => return None,
            })
        };
        Self {
            kind: Kind::Vms,
            metrics: VM_METRICS.iter().map(|m| value(m)).collect(),
            tenants: Vec::new(),
            tenants_failed: failed,
            events: outcome.switches,
            timeline: Vec::new(),
        }
    }
}

/// One tenant's columns of results.csv.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantFigures {
    /// The values of [`TENANT_COLUMNS`], in order.
    pub values: [Figure; TENANT_COLUMNS.len()],
    /// Why the tenant stopped early.
    pub error: Option<String>,
}

impl TenantFigures {
    fn of(t: &TenantReport) -> Self {
        Self {
            values: TENANT_COLUMNS.map(|(_, take)| take(t)),
            error: t.error.clone(),
        }
    }

    /// The cells: the columns, then the error.
    pub(super) fn cells(&self) -> Vec<String> {
        let mut cells: Vec<String> = self.values.iter().map(|v| v.cell()).collect();
        cells.push(self.error.clone().unwrap_or_default());
        cells
    }
}

/// A number of results.csv, kept as a number until it is written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Figure {
    /// A whole number: nanoseconds or bytes.
    Count(u64),
    /// A ratio; an empty cell when undefined (a failed tenant's slowdown).
    Ratio(Option<f64>),
}

impl Figure {
    fn cell(self) -> String {
        match self {
            Self::Count(n) => n.to_string(),
            Self::Ratio(r) => r.map_or(String::new(), |r| format!("{r:.6}")),
        }
    }
}

/// The slowest tenant's measured phase: the runtime the paper's figures plot. None when a
/// tenant failed.
pub fn slowest_phase_ns(report: &Report) -> Option<u64> {
    slowest_ns(report, |t| t.phase_ns)
}

/// The slowest tenant's total time, from its start to its end: the runtime the sweep plots
/// by default. Unlike the measured phase it counts what a tenant spends waiting for its
/// allocations and the evictions they need. When an eviction makes one tenant wait until
/// the other's queued kernels drain, the two run one after the other and each measured
/// phase is a solo phase, so the slowest phase can fall while the tenants take longer;
/// the wait shows here. None when a tenant failed (its end is where it stopped).
pub fn slowest_total_ns(report: &Report) -> Option<u64> {
    slowest_ns(report, |t| t.total_ns)
}

/// The largest of a time over the tenants; None when a tenant failed.
fn slowest_ns(report: &Report, time_ns: fn(&TenantReport) -> u64) -> Option<u64> {
    if report.tenants.iter().any(|t| t.error.is_some()) {
        return None;
    }
    report.tenants.iter().map(time_ns).max()
}

/// Mean latency of the allocations that had to evict, over all tenants; None when none
/// had to.
pub fn eviction_mean_ns(report: &Report) -> Option<f64> {
    let count: u64 = report
        .tenants
        .iter()
        .map(|t| t.eviction_latency_ns.count)
        .sum();
    let total: u64 = report
        .tenants
        .iter()
        .map(|t| {
            let s = &t.eviction_split_ns;
            s.policy + s.dma_setup + s.dma + s.waiting
        })
        .sum();
    (count > 0).then(|| total as f64 / count as f64)
}

/// System figures summarized per grid point: every tenant run's, then unified memory's.
pub(super) const SUMMARY_METRICS: [&str; 19] = [
    "slowest_phase_ns",
    "makespan_ns",
    "stp",
    "antt",
    "jain_vram",
    "jain_slowdown",
    "eviction_mean_ns",
    "slowest_total_ns",
    "far_faults",
    "pages_in",
    "pages_out",
    "pages_thrashed",
    "fault_stall_ns",
    "fault_batches",
    "pages_prefetched",
    "prefetched_unused",
    "remote_touches",
    "remote_bytes",
    "link_utilization",
];

fn metric(report: &Report, name: &str) -> Option<f64> {
    let s = &report.system;
    match name {
        "slowest_phase_ns" => slowest_phase_ns(report).map(|ns| ns as f64),
        "makespan_ns" => Some(s.makespan_ns as f64),
        "stp" => s.stp,
        "antt" => s.antt,
        "jain_vram" => s.jain_vram,
        "jain_slowdown" => s.jain_slowdown,
        "eviction_mean_ns" => eviction_mean_ns(report),
        "slowest_total_ns" => slowest_total_ns(report).map(|ns| ns as f64),
        "far_faults" => paging_sum(report, |u| u.far_faults),
        "pages_in" => paging_sum(report, |u| u.pages_in),
        "pages_out" => paging_sum(report, |u| u.pages_out),
        "pages_thrashed" => paging_sum(report, |u| u.pages_thrashed),
        "fault_stall_ns" => paging_sum(report, |u| u.fault_stall_ns),
        "fault_batches" => paging_sum(report, |u| u.fault_batches),
        "pages_prefetched" => paging_sum(report, |u| u.pages_prefetched),
        "prefetched_unused" => paging_sum(report, |u| u.prefetched_unused),
        "remote_touches" => paging_sum(report, |u| u.remote_touches),
        "remote_bytes" => Some(report.tenants.iter().map(|t| t.remote_bytes as f64).sum()),
        "link_utilization" => Some(s.link_utilization),
        _ => None,
    }
}

/// A unified-memory count summed over the tenants; None when no tenant paged.
fn paging_sum(report: &Report, count: fn(&gpuswap_sim::report::UvmReport) -> u64) -> Option<f64> {
    let counts: Vec<u64> = report
        .tenants
        .iter()
        .filter_map(|t| t.uvm.as_ref())
        .map(count)
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum::<u64>() as f64)
}

/// A per-tenant column of results.csv: its name and how it is taken from a tenant's report.
pub(super) type TenantColumn = (&'static str, fn(&TenantReport) -> Figure);

/// Per-tenant columns of results.csv and how each is taken from a tenant's report (an
/// error column follows them).
pub(super) const TENANT_COLUMNS: [TenantColumn; 17] = [
    ("total_ns", |t| Figure::Count(t.total_ns)),
    ("phase_ns", |t| Figure::Count(t.phase_ns)),
    ("slowdown", |t| Figure::Ratio(t.slowdown)),
    ("vram_peak_bytes", |t| Figure::Count(t.vram_peak_bytes)),
    ("local_bytes", |t| Figure::Count(t.local_bytes)),
    ("remote_bytes", |t| Figure::Count(t.remote_bytes)),
    ("bytes_evicted", |t| Figure::Count(t.bytes_evicted)),
    ("bytes_returned", |t| Figure::Count(t.bytes_returned)),
    ("alloc_p50_ns", |t| Figure::Count(t.alloc_latency_ns.p50)),
    ("alloc_p99_ns", |t| Figure::Count(t.alloc_latency_ns.p99)),
    ("eviction_p50_ns", |t| {
        Figure::Count(t.eviction_latency_ns.p50)
    }),
    ("eviction_max_ns", |t| {
        Figure::Count(t.eviction_latency_ns.max)
    }),
    ("victim_pause_p50_ns", |t| {
        Figure::Count(t.victim_pause_ns.p50)
    }),
    ("victim_pause_max_ns", |t| {
        Figure::Count(t.victim_pause_ns.max)
    }),
    ("preemptions", |t| Figure::Count(u64::from(t.preemptions))),
    ("wasted_ns", |t| Figure::Count(t.wasted_ns)),
    ("wait_ns", |t| Figure::Count(t.wait_ns)),
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    use gpuswap_sim::report::{Baselines, run_and_report_with};

    use super::*;
    use crate::scenario;

    fn report(mode: &str) -> Report {
        let text = format!(
            "seed = 5\n[device]\npreset = \"gtx480\"\nvram_limit = \"20MiB\"\n\
             [manager]\nmode = \"{mode}\"\n\
             [[tenant]]\nname = \"a\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n\
             [[tenant]]\nname = \"b\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n\
             start = \"1ms\"\n"
        );
        let s = scenario::parse(Path::new("two-nn.toml"), &text).unwrap();
        run_and_report_with(&s.name, s.seed, &s.config, &Baselines::default()).unwrap()
    }

    #[test]
    fn the_slowest_total_spans_start_to_end_and_is_none_when_a_tenant_failed() {
        let evicting = report("gpuswap");
        assert!(evicting.tenants.iter().all(|t| t.error.is_none()));
        let slowest = evicting.tenants.iter().map(|t| t.total_ns).max();
        assert_eq!(slowest_total_ns(&evicting), slowest);
        // The total counts the setup and the waits around the measured phase.
        assert!(slowest_total_ns(&evicting) > slowest_phase_ns(&evicting));
        // A stock driver runs out of 20 MiB: a tenant fails, and the time it stopped at
        // is no runtime.
        let failing = report("native");
        assert!(failing.tenants.iter().any(|t| t.error.is_some()));
        assert_eq!(slowest_total_ns(&failing), None);
        assert_eq!(slowest_phase_ns(&failing), None);
        let failed = |report: &Report| RunFigures::of(report, Kind::Tenants, &[]).tenants_failed;
        assert_eq!((failed(&failing), failed(&evicting)), (2, 0));
    }

    /// A VM run in which nothing switched or rendered has no cost per switch and no
    /// frame rate: empty cells, not zeros that plot as the best placement.
    #[test]
    fn a_vm_run_without_switches_or_frames_has_no_per_switch_or_fps_figure() {
        let figures = RunFigures::of_vms(&VgpuOutcome::default());
        let value = |name: &str| {
            let i = VM_METRICS.iter().position(|m| *m == name).unwrap();
            figures.metrics[i]
        };
        assert_eq!(value("cycles_per_switch"), None);
        assert_eq!(value("mean_fps"), None);
        assert_eq!(value("switches"), Some(0.0));
        assert_eq!(figures.tenants_failed, 0);
    }
}
