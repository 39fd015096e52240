//! What each command prints as text: the reports, comparisons and listings, laid out
//! by [`crate::table`].

use gpuswap_core::uvm::pages::PAGE_BYTES;
use gpuswap_sim::apps::AppModel;
use gpuswap_sim::device::DeviceShape;
use gpuswap_sim::preset::Preset;
use gpuswap_sim::report::{FaultLogReport, Report, TenantReport, UvmReport, jain};
use gpuswap_sim::units::{format_bytes, format_ns};
use gpuswap_vgpu::engine::VgpuOutcome;

pub use crate::table::terminal_width;
use crate::table::{caption, columns, fields, fit, table, wrap};
use crate::vm_figures;

/// A fault-log tenant's rows: its logged batches, then its simulated ones.
fn fault_log_rows(tenant: &str, f: &FaultLogReport) -> [Vec<String>; 2] {
    let row = |side: &str, batches: u64, faults: u64, mean: f64, p50: u64, p99: u64| {
        vec![
            tenant.to_owned(),
            side.to_owned(),
            batches.to_string(),
            faults.to_string(),
            format!("{mean:.1}"),
            p50.to_string(),
            p99.to_string(),
        ]
    };
    [
        row(
            "logged",
            f.logged_batches,
            f.logged_faults,
            f.logged_faults_per_batch_mean,
            f.logged_faults_per_batch_p50,
            f.logged_faults_per_batch_p99,
        ),
        row(
            "simulated",
            f.simulated_batches,
            f.simulated_faults,
            f.simulated_faults_per_batch_mean,
            f.simulated_faults_per_batch_p50,
            f.simulated_faults_per_batch_p99,
        ),
    ]
}

/// Reports of the same tenants under several managers, side by side, each named by its
/// label (`labels[i]` for `reports[i]`: a mode, or a mode with its settings): per manager
/// and tenant whether it ran, its slowdown and what it lost to host memory; per manager
/// how many tenants failed and the fairness of the survivors' slowdowns.
pub fn compare_table(labels: &[String], reports: &[Report], width: Option<usize>) -> String {
    let Some(first) = reports.first() else {
        return String::new();
    };
    let mut out = fields(
        &[
            format!("scenario {}", first.scenario),
            format!("seed {}", first.seed),
            format!("device {}", first.device),
        ],
        width,
    ) + "\n";
    // An error is a sentence: in a cell it would widen the table past any terminal, so
    // the cell points to a note below.
    let mut notes = Vec::new();
    let rows: Vec<Vec<String>> = labels
        .iter()
        .zip(reports)
        .flat_map(|(label, r)| r.tenants.iter().map(move |t| (label, t)))
        .map(|(label, t)| {
            let (result, slowdown) = match &t.error {
                Some(e) => {
                    notes.push(format!("{label} {}: {e}", t.name));
                    (format!("FAILED (note {})", notes.len()), "-".to_owned())
                }
                None => ("ran".to_owned(), three_places(t.slowdown)),
            };
            vec![
                label.clone(),
                t.name.clone(),
                t.app.clone(),
                slowdown,
                format_bytes(t.bytes_evicted),
                format_bytes(t.remote_bytes),
                result,
            ]
        })
        .collect();
    out += &table(
        &[
            "manager", "tenant", "app", "slowdown", "evicted", "remote", "result",
        ],
        &rows,
        width,
    );
    for (i, note) in notes.iter().enumerate() {
        out += &wrap(
            &format!("note {}: {note}", i + 1),
            width.unwrap_or(usize::MAX),
            4,
        );
    }
    out += "\n";
    let rows: Vec<Vec<String>> = labels
        .iter()
        .zip(reports)
        .map(|(label, r)| {
            let failed = r.tenants.iter().filter(|t| t.error.is_some()).count();
            let survivors: Vec<f64> = r
                .tenants
                .iter()
                .filter(|t| t.error.is_none())
                .filter_map(|t| t.slowdown)
                .collect();
            let worst = survivors.iter().copied().fold(f64::NAN, f64::max);
            let any = !survivors.is_empty();
            vec![
                label.clone(),
                format!("{failed} of {}", r.tenants.len()),
                three_places(any.then_some(worst)),
                three_places(any.then(|| jain(&survivors))),
                format_ns(r.system.makespan_ns),
            ]
        })
        .collect();
    // Short headers keep the table a table at 80 columns; the line below says whom the
    // starred figures cover.
    out += &table(
        &[
            "manager",
            "failed",
            "worst slowdown*",
            "Jain(slowdown)*",
            "makespan",
        ],
        &rows,
        width,
    );
    out += "* over the tenants that finished\n";
    out
}

/// The report as text: the run's settings, a row per tenant, the tables only some
/// runs have (contracts, relocations, kernel scheduling, unified memory, fault logs,
/// replay timings), then the system figures.
pub fn report_table(report: &Report, width: Option<usize>) -> String {
    let sections: [fn(&Report, Option<usize>) -> String; 9] = [
        run_settings,
        tenants_section,
        contracts_section,
        relocations_section,
        scheduling_section,
        unified_memory_section,
        fault_logs_section,
        timings_section,
        system_figures,
    ];
    sections.iter().map(|s| s(report, width)).collect()
}

/// A figure to three decimal places, or `-` for none.
fn three_places(figure: Option<f64>) -> String {
    figure.map_or("-".to_owned(), |v| format!("{v:.3}"))
}

/// A tenant's name: the first cell of every per-tenant table.
fn tenant_name(t: &TenantReport) -> String {
    t.name.clone()
}

/// The lines above the tables: the run, its manager and the memory it managed.
fn run_settings(report: &Report, width: Option<usize>) -> String {
    let settings = &report.settings;
    let mut out = fields(
        &[
            format!("scenario {}", report.scenario),
            format!("seed {}", report.seed),
            format!("device {}", report.device),
            format!(
                "manager {}{}",
                report.manager,
                settings
                    .policy
                    .iter()
                    .map(|p| format!(" {p}"))
                    .collect::<String>()
            ),
        ],
        width,
    );
    out += &fields(
        &[
            format!("VRAM for tenants {}", format_bytes(settings.vram_bytes)),
            format!("host memory {}", format_bytes(settings.host_bytes)),
            format!("chunk {}", format_bytes(settings.chunk_bytes)),
            format!(
                "return check every {}",
                format_ns(settings.return_interval_ns)
            ),
        ],
        width,
    );
    out + "\n"
}

/// The table every report has, a row per tenant, with captions saying what its figures
/// are measured against.
fn tenants_section(report: &Report, width: Option<usize>) -> String {
    // Unified memory moves pages, not the books' chunks: its evictions are pages out,
    // its returns pages faulted in again after an eviction.
    let evicted = |t: &TenantReport| {
        let uvm = t.uvm.as_ref();
        format_bytes(uvm.map_or(t.bytes_evicted, |u| u.pages_out * PAGE_BYTES))
    };
    let returned = |t: &TenantReport| {
        let uvm = t.uvm.as_ref();
        format_bytes(uvm.map_or(t.bytes_returned, |u| u.pages_thrashed * PAGE_BYTES))
    };
    let mut out = columns(
        &report.tenants,
        &[
            ("tenant", &tenant_name),
            ("app", &|t| t.app.clone()),
            ("total", &|t| format_ns(t.total_ns)),
            ("phase", &|t| format_ns(t.phase_ns)),
            ("slowdown", &|t| three_places(t.slowdown)),
            ("vram peak", &|t| format_bytes(t.vram_peak_bytes)),
            ("local", &|t| format_bytes(t.local_bytes)),
            ("remote", &|t| format_bytes(t.remote_bytes)),
            ("evicted", &evicted),
            ("returned", &returned),
            ("error", &|t| t.error.clone().unwrap_or_default()),
        ],
        width,
    );
    let baseline_mode = report.settings.baseline_mode;
    if baseline_mode != "native" {
        out += &caption(
            &format!(
                "slowdown: against each program alone with ample VRAM in mode {baseline_mode} at its defaults; settings that beat those defaults give a slowdown below 1",
            ),
            width,
        );
    }
    out += &caption(
        "local, remote: bytes its kernels read and wrote in VRAM and over the link, summed over the run; evicted, returned: bytes moved out of VRAM and back (unified memory: pages evicted, and pages faulted in again after their eviction)",
        width,
    );
    out
}

/// What each tenant's contract promises and limits, when any tenant has one.
fn contracts_section(report: &Report, width: Option<usize>) -> String {
    if report.tenants.iter().all(|t| t.contract.is_none()) {
        return String::new();
    }
    let contract = |t: &TenantReport| {
        let described = t.contract.as_ref().map(crate::contract_keys::describe);
        described.unwrap_or_else(|| "none".into())
    };
    caption(
        "contracts: what each tenant is promised and limited to",
        width,
    ) + &columns(
        &report.tenants,
        &[("tenant", &tenant_name), ("contract", &contract)],
        width,
    )
}

/// The allocations that evicted and the tenants suspended, when there were any.
fn relocations_section(report: &Report, width: Option<usize>) -> String {
    if !report
        .tenants
        .iter()
        .any(|t| t.eviction_latency_ns.count + t.victim_pause_ns.count > 0)
    {
        return String::new();
    }
    caption(
        "relocations: allocations that evicted (latency, split summed over them) and suspensions",
        width,
    ) + &columns(
        &report.tenants,
        &[
            ("tenant", &tenant_name),
            ("evictions", &|t| t.eviction_latency_ns.count.to_string()),
            ("p50", &|t| format_ns(t.eviction_latency_ns.p50)),
            ("max", &|t| format_ns(t.eviction_latency_ns.max)),
            ("policy", &|t| format_ns(t.eviction_split_ns.policy)),
            ("dma setup", &|t| format_ns(t.eviction_split_ns.dma_setup)),
            ("dma", &|t| format_ns(t.eviction_split_ns.dma)),
            ("waiting", &|t| format_ns(t.eviction_split_ns.waiting)),
            ("suspensions", &|t| t.victim_pause_ns.count.to_string()),
            ("drain p50", &|t| format_ns(t.victim_drain_ns.p50)),
            ("pause p50", &|t| format_ns(t.victim_pause_ns.p50)),
            ("pause max", &|t| format_ns(t.victim_pause_ns.max)),
        ],
        width,
    )
}

/// Kernels preempted and held, when the policy did either.
fn scheduling_section(report: &Report, width: Option<usize>) -> String {
    if !report
        .tenants
        .iter()
        .any(|t| t.preemptions > 0 || t.wait_ns > 0)
    {
        return String::new();
    }
    caption(
        "kernel scheduling: kernels the policy preempted, the work they lost, and time it held the tenant's kernels",
        width,
    ) + &columns(
        &report.tenants,
        &[
            ("tenant", &tenant_name),
            ("preemptions", &|t| t.preemptions.to_string()),
            ("work lost", &|t| format_ns(t.wasted_ns)),
            ("held", &|t| format_ns(t.wait_ns)),
        ],
        width,
    )
}

/// The faults and migrations of the tenants on unified memory, then the pattern and
/// plan of each of their managed allocations.
fn unified_memory_section(report: &Report, width: Option<usize>) -> String {
    let uvm: Vec<(&TenantReport, &UvmReport)> = report
        .tenants
        .iter()
        .filter_map(|t| t.uvm.as_ref().map(|u| (t, u)))
        .collect();
    if uvm.is_empty() {
        return String::new();
    }
    let optimum = |(_, u): &(&TenantReport, &UvmReport)| match (
        u.optimum_pages_in,
        u.optimum_skipped_touches,
    ) {
        (Some(pages), _) => pages.to_string(),
        (None, Some(limit)) => format!("skipped: over {limit} touches"),
        (None, None) => "-".into(),
    };
    let mut out = caption(
        "unified memory: far faults, batches, pages migrated in and out (4 KiB), thrashed (evicted, then faulted again), prefetched and never used, served remotely, and time stalled on faults",
        width,
    );
    out += &columns(
        &uvm,
        &[
            ("tenant", &|(t, _)| t.name.clone()),
            ("far faults", &|(_, u)| u.far_faults.to_string()),
            ("batches", &|(_, u)| u.fault_batches.to_string()),
            ("pages in", &|(_, u)| u.pages_in.to_string()),
            ("pages out", &|(_, u)| u.pages_out.to_string()),
            ("thrashed", &|(_, u)| u.pages_thrashed.to_string()),
            ("unused / prefetched", &|(_, u)| {
                format!("{} / {}", u.prefetched_unused, u.pages_prefetched)
            }),
            ("remote touches", &|(_, u)| u.remote_touches.to_string()),
            ("throttles / pins", &|(_, u)| {
                format!("{} / {}", u.throttles, u.pins)
            }),
            ("fault stall", &|(_, u)| format_ns(u.fault_stall_ns)),
            ("optimum in", &optimum),
        ],
        width,
    );
    out += &caption(
        "managed allocations: the migration pattern detected (observations: kernels, and the first full VRAM, that migrated at least 8 big pages) and the plan the runtime chose (policy = \"adaptive\" or \"adaptive-coarse\"; \"configured\" follows the settings)",
        width,
    );
    let rows: Vec<Vec<String>> = uvm
        .iter()
        .flat_map(|(t, u)| {
            (0..u.patterns.len()).map(move |a| {
                vec![
                    t.name.clone(),
                    a.to_string(),
                    u.patterns[a].to_owned(),
                    u.plans[a].to_owned(),
                    u.timeline[a].len().to_string(),
                ]
            })
        })
        .collect();
    out + &table(
        &["tenant", "allocation", "pattern", "plan", "observations"],
        &rows,
        width,
    )
}

/// The replayed fault logs, logged against simulated, when a tenant replays one.
fn fault_logs_section(report: &Report, width: Option<usize>) -> String {
    let rows: Vec<Vec<String>> = report
        .tenants
        .iter()
        .filter_map(|t| Some(fault_log_rows(&t.name, t.fault_log.as_ref()?)))
        .flatten()
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    caption(
        "fault logs replayed: the driver's fault batches as logged on the GPU and as simulated, with their faults (distinct pages) per batch",
        width,
    ) + &table(
        &[
            "tenant",
            "source",
            "batches",
            "faults",
            "faults/batch mean",
            "p50",
            "p99",
        ],
        &rows,
        width,
    )
}

/// How each replayed trace is timed, when a tenant replays one.
fn timings_section(report: &Report, width: Option<usize>) -> String {
    let timed: Vec<String> = report
        .tenants
        .iter()
        .filter_map(|t| Some(format!("  {}: {}", t.name, t.timing.as_ref()?)))
        .collect();
    if timed.is_empty() {
        return String::new();
    }
    let mut out = caption("how the replays are timed:", width);
    for line in timed {
        out += &wrap(&line, width.unwrap_or(usize::MAX), 4);
    }
    out
}

/// The system's figures: makespan, throughput, turnaround and fairness, and how busy
/// the link was.
fn system_figures(report: &Report, width: Option<usize>) -> String {
    let s = &report.system;
    let n = report.tenants.len();
    let ran = n - s.tenants_failed;
    // Figures over tenants that finished say so when some did not; none are given when
    // none finished (an empty mean is no figure).
    let failed_note = if s.tenants_failed > 0 {
        format!(
            "\n{} of {n} tenants FAILED: STP, ANTT and Jain(slowdown) cover the {ran} that finished",
            s.tenants_failed
        )
    } else {
        String::new()
    };
    let text = format!(
        "\nmakespan {}  STP {}  ANTT {}  Jain(slowdown) {}  Jain(VRAM) {}{failed_note}\n\
         link utilization: to device {:.1} %, to host {:.1} %\n",
        format_ns(s.makespan_ns),
        three_places(s.stp),
        three_places(s.antt),
        three_places(s.jain_slowdown),
        three_places(s.jain_vram),
        100.0 * s.link_utilization_to_device,
        100.0 * s.link_utilization_to_host
    );
    fit(&text, width)
}

/// A VM scenario's outcome: per VM what it got, then the system's switch costs.
pub fn vgpu_table(
    scenario: &str,
    config: &gpuswap_vgpu::engine::VgpuConfig,
    out: &VgpuOutcome,
    width: Option<usize>,
) -> String {
    let mut text = fields(
        &[
            format!("scenario {scenario}"),
            format!("device {}", config.preset.name),
            format!("placement {}", config.placement.name),
            format!(
                "{} slots of {}",
                config.preset.total_slots(),
                format_bytes(config.preset.slot_bytes)
            ),
        ],
        width,
    ) + "\n";
    text += &columns(
        &out.vms,
        &[
            ("vm", &|v| v.name.clone()),
            ("workload", &|v| v.workload.to_owned()),
            ("slots", &|v| v.slots.to_string()),
            ("time", &|v| format_ns(v.end_ns - v.start_ns)),
            ("fps", &|v| {
                vm_figures::fps(v).map_or("-".into(), |fps| format!("{fps:.1}"))
            }),
            ("gpu time", &|v| format_ns(v.gpu_ns)),
            ("moves", &|v| v.moves.to_string()),
            ("error", &|v| v.error.clone().unwrap_or_default()),
        ],
        width,
    );
    let refused = vm_figures::refused(out);
    text += "\n";
    text += &fields(
        &[
            format!("context switches {}", out.switches),
            format!("slot copies {}", out.slot_copies),
            format!("entries copied {}", out.entries_copied),
        ],
        width,
    );
    text += &fields(
        &[
            format!("cycles per switch {:.0}", out.cycles_per_switch()),
            format!("switch cycles {}", out.switch_cycles),
            format!("reallocations {}", out.reallocations),
            format!("idle releases {}", out.idle_releases),
            format!("makespan {}", format_ns(out.makespan_ns)),
        ],
        width,
    );
    if refused > 0 {
        text += &format!("{refused} of {} VMs FAILED to start\n", out.vms.len());
    }
    text
}

/// The same VMs under several placements: per placement the VMs refused, the mean
/// frame rate of the VMs that render frames, and the switch costs.
pub fn vgpu_compare_table(
    scenario: &str,
    outcomes: &[(&str, VgpuOutcome)],
    width: Option<usize>,
) -> String {
    let mean_fps = |(_, o): &(&str, VgpuOutcome)| {
        // A mean over the VMs a placement let in flatters one that refused others.
        let starred = if vm_figures::refused(o) > 0 { "*" } else { "" };
        vm_figures::mean_fps(o).map_or("-".into(), |fps| format!("{fps:.1}{starred}"))
    };
    let refusing = outcomes.iter().any(|(_, o)| vm_figures::refused(o) > 0);
    let note = if refusing {
        "* the mean over the VMs that rendered: the VMs the placement refused are left out\n"
    } else {
        ""
    };
    format!("scenario {scenario}\n\n")
        + &columns(
            outcomes,
            &[
                ("placement", &|(name, _)| (*name).to_owned()),
                ("vms failed", &|(_, o)| {
                    format!("{} of {}", vm_figures::refused(o), o.vms.len())
                }),
                ("mean fps", &mean_fps),
                ("switches", &|(_, o)| o.switches.to_string()),
                ("slot copies", &|(_, o)| o.slot_copies.to_string()),
                ("cycles/switch", &|(_, o)| {
                    format!("{:.0}", o.cycles_per_switch())
                }),
                ("switch cycles", &|(_, o)| {
                    format!("{:.3e}", o.switch_cycles as f64)
                }),
                ("reallocations", &|(_, o)| o.reallocations.to_string()),
            ],
            width,
        )
        + note
}

/// The presets, one per row.
pub fn presets_table(presets: &[Preset], width: Option<usize>) -> String {
    let features = |p: &Preset| {
        let on: Vec<&str> = [
            (p.features.page_faults, "faults"),
            (p.features.access_counters, "access-counters"),
            (p.features.reference_bits, "reference-bits"),
            (p.features.preemption, "preemption"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect();
        if on.is_empty() {
            "-".into()
        } else {
            on.join(",")
        }
    };
    columns(
        presets,
        &[
            ("preset", &|p| p.name.to_owned()),
            ("vram", &|p| format_bytes(p.vram_bytes)),
            ("host memory", &|p| format_bytes(p.host_memory_bytes)),
            ("vram bw", &|p| {
                format!("{:.0} GB/s", p.vram_bytes_per_s / 1e9)
            }),
            ("link (h2d/d2h)", &|p| {
                format!(
                    "{} {:.1}/{:.1} GB/s",
                    p.link.name,
                    p.link.h2d_bytes_per_s / 1e9,
                    p.link.d2h_bytes_per_s / 1e9
                )
            }),
            ("copy engines", &|p| p.copy_engines.to_string()),
            ("features", &features),
            ("description", &|p| p.description.to_owned()),
        ],
        width,
    )
}

/// The virtualised integrated GPUs, one per row.
pub fn vgpu_presets_table(
    presets: &[gpuswap_vgpu::preset::VgpuPreset],
    width: Option<usize>,
) -> String {
    columns(
        presets,
        &[
            ("preset", &|p| p.name.to_owned()),
            ("high memory slots", &|p| {
                format!("{} x {}", p.total_slots(), format_bytes(p.slot_bytes))
            }),
            ("low memory per vm", &|p| format_bytes(p.low_memory_bytes)),
            ("slice", &|p| format_ns(p.slice_ns)),
            ("description", &|p| p.description.to_owned()),
        ],
        width,
    )
}

/// The vGPU workloads, one per row, with what they ask of the GPU.
pub fn workloads_table(
    workloads: &[gpuswap_vgpu::workload::Workload],
    width: Option<usize>,
) -> String {
    use gpuswap_vgpu::workload::Kind;
    columns(
        workloads,
        &[
            ("workload", &|w| w.name.to_owned()),
            ("work", &|w| match w.kind {
                Kind::Frames { gpu_ns, cpu_ns } => format!(
                    "{} GPU + {} CPU per frame",
                    format_ns(gpu_ns),
                    format_ns(cpu_ns)
                ),
                Kind::Job { gpu_ns } => format!("{} of GPU work", format_ns(gpu_ns)),
            }),
            ("description", &|w| w.description.to_owned()),
        ],
        width,
    )
}

/// One built-in app as `gpuswap apps` lists it (a row, or a JSON object).
#[derive(serde::Serialize)]
pub struct AppRow {
    /// Its name in scenarios.
    pub name: &'static str,
    /// One line.
    pub description: &'static str,
    /// The sizes it takes.
    pub sizes: &'static str,
    /// The most it allocates at its default size; absent where that size cannot run on
    /// the device (see `default_size_error`).
    pub default_size_peak_bytes: Option<u64>,
    /// Why the default size cannot run on the device.
    pub default_size_error: Option<String>,
}

/// The apps with the memory their default size allocates at most on `device`
/// (allocations do not depend on the device; the programs need one).
pub fn app_rows(apps: &[&dyn AppModel], device: DeviceShape) -> Vec<AppRow> {
    apps.iter()
        .map(|a| {
            let program = a.program("default", 1, device);
            AppRow {
                name: a.name(),
                description: a.description(),
                sizes: a.sizes_help(),
                default_size_peak_bytes: program.as_ref().ok().map(|p| p.peak_allocated_bytes()),
                default_size_error: program.err().map(|e| e.to_string()),
            }
        })
        .collect()
}

/// The apps, one per row (see [`app_rows`]).
pub fn apps_table(apps: &[AppRow], width: Option<usize>) -> String {
    columns(
        apps,
        &[
            ("app", &|a| a.name.to_owned()),
            (
                "memory (default size)",
                &|a| match (&a.default_size_peak_bytes, &a.default_size_error) {
                    (Some(bytes), _) => format_bytes(*bytes),
                    (None, e) => format!("({})", e.as_deref().unwrap_or_default()),
                },
            ),
            ("description", &|a| a.description.to_owned()),
        ],
        width,
    )
}

/// One app: what it is, the sizes it takes, and the buffers it allocates at `size` (the
/// labels priorities refer to), with their sizes and kinds.
pub fn app_details(
    app: &dyn AppModel,
    size: &str,
    program: &gpuswap_sim::program::Program,
    width: Option<usize>,
) -> String {
    let mut out = wrap(
        &format!("{}: {}", app.name(), app.description()),
        width.unwrap_or(usize::MAX),
        2,
    );
    out += &wrap(
        &format!("sizes: {}", app.sizes_help()),
        width.unwrap_or(usize::MAX),
        2,
    );
    out += "\n";
    out += &wrap(
        &format!(
            "buffers at size {size:?} (peak {} allocated; the runtime adds runtime_stack, runtime_code and runtime_constant):",
            format_bytes(program.peak_allocated_bytes())
        ),
        width.unwrap_or(usize::MAX),
        0,
    );
    let rows: Vec<Vec<String>> = program
        .buffers
        .iter()
        .map(|b| {
            vec![
                b.label.clone(),
                format_bytes(b.bytes),
                buffer_kind_name(b.kind),
            ]
        })
        .collect();
    out + &table(&["label", "size", "kind"], &rows, width)
}

/// A buffer kind as listings name it (`input`, `output`, ...).
pub fn buffer_kind_name(kind: gpuswap_core::BufferKind) -> String {
    format!("{kind:?}").to_lowercase()
}

/// Every scenario key with its type, default and meaning (`gpuswap keys`).
pub fn keys_table(rows: &[Vec<String>], width: Option<usize>) -> String {
    table(&["key", "value", "default", "meaning"], rows, width)
}

/// One value of one setting as `gpuswap policies` lists it (a row, or a JSON object).
#[derive(serde::Serialize)]
pub struct PolicyRow {
    /// The scenario key (`manager.mode`, `manager.victim`, ...), or `launch gate`.
    pub setting: String,
    /// One value it takes (a count parameter: `a whole number (default: N)`).
    pub value: String,
    /// Whether this value is the default.
    pub default: bool,
    /// What it needs from the device.
    pub needs: Vec<&'static str>,
    /// What it does.
    pub description: String,
}

/// Every manager mode, and every value of each mode's parameters, with what it needs from
/// the device; then the launch schedulers. Built from the registry.
pub fn policy_rows() -> Vec<PolicyRow> {
    use gpuswap_core::registry::{POLICIES, ParamDefault, ParamKind, schedulers};
    let row = |setting: &str, value: String, default, needs, description| PolicyRow {
        setting: setting.to_owned(),
        value,
        default,
        needs,
        description,
    };
    let mut rows = Vec::new();
    for entry in POLICIES {
        let mode = entry.choice;
        rows.push(row(
            "manager.mode",
            mode.name.to_owned(),
            false,
            mode.needs.names(),
            format!("{} (scheduler: {})", mode.description, entry.scheduler),
        ));
        for spec in entry.params {
            let key = format!("manager.{}", spec.key);
            match (spec.kind, spec.default) {
                (ParamKind::Choice(options), default) => {
                    for c in options() {
                        rows.push(row(
                            &key,
                            c.name.to_owned(),
                            matches!(default, ParamDefault::Choice(d) if d == c.name),
                            c.needs.names(),
                            format!("{}: {}", mode.name, c.description),
                        ));
                    }
                }
                (ParamKind::Count, default) => rows.push(row(
                    &key,
                    format!(
                        "a whole number (default: {})",
                        crate::keys::default_text(default)
                    ),
                    false,
                    Vec::new(),
                    format!("{}: {}", mode.name, spec.help),
                )),
            }
        }
    }
    // The launch gate a mode brings (not a scenario key: the mode names it).
    for s in schedulers() {
        rows.push(row(
            "launch gate",
            s.name.to_owned(),
            false,
            s.needs.names(),
            s.description.to_owned(),
        ));
    }
    for (i, p) in gpuswap_core::gpu_time::scheduling::POLICIES
        .iter()
        .enumerate()
    {
        rows.push(row(
            "scheduler.policy",
            p.choice.name.to_owned(),
            i == 0,
            vec!["unified memory"],
            p.choice.description.to_owned(),
        ));
    }
    rows
}

/// The table of [`policy_rows`].
pub fn policies_table(rows: &[PolicyRow], width: Option<usize>) -> String {
    columns(
        rows,
        &[
            ("setting", &|r| r.setting.clone()),
            ("value", &|r| {
                let default = if r.default { " (default)" } else { "" };
                format!("{}{default}", r.value)
            }),
            ("needs", &|r| {
                if r.needs.is_empty() {
                    "-".to_owned()
                } else {
                    r.needs.join(", ")
                }
            }),
            ("description", &|r| r.description.clone()),
        ],
        width,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gvirt refuses 12 of the 15 VMs and shows the best mean frame rate of the three
    /// it let in: the cell is starred and the note says what the mean leaves out.
    #[test]
    fn a_placement_that_refuses_vms_has_its_frame_rate_starred() {
        use gpuswap_core::placement::find_placement;
        let path = std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scenarios/vgpu/fifteen-vms.toml"
        ));
        let text = std::fs::read_to_string(path).unwrap();
        let loaded = crate::vgpu_scenario::parse(path, &text).unwrap();
        let outcomes: Vec<(&str, gpuswap_vgpu::engine::VgpuOutcome)> = ["gvirt", "gscale"]
            .iter()
            .map(|name| {
                let mut config = loaded.config.clone();
                config.placement = find_placement(name).unwrap();
                (*name, gpuswap_vgpu::engine::simulate(config).unwrap())
            })
            .collect();
        assert!(outcomes[0].1.vms.iter().any(|v| v.error.is_some()));
        assert!(outcomes[1].1.vms.iter().all(|v| v.error.is_none()));
        let text = vgpu_compare_table("fifteen-vms", &outcomes, None);
        let row = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .unwrap()
                .to_owned()
        };
        let fps = |row: String| row.split_whitespace().nth(4).unwrap().to_owned();
        assert!(fps(row("gvirt")).ends_with('*'), "{text}");
        assert!(!fps(row("gscale")).ends_with('*'), "{text}");
        assert!(
            text.ends_with("the VMs the placement refused are left out\n"),
            "{text}"
        );
    }
}
