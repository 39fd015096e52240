//! Text tables for the terminal.

use gpuswap_core::uvm::pages::PAGE_BYTES;
use gpuswap_sim::apps::AppModel;
use gpuswap_sim::device::DeviceShape;
use gpuswap_sim::preset::Preset;
use gpuswap_sim::report::{FaultLogReport, Report, jain};
use gpuswap_sim::units::{format_bytes, format_ns};

/// Narrowest output the tables are laid out for: below it, records wrap anyway.
const MIN_WIDTH: usize = 40;

/// How wide the terminal on standard output is (`COLUMNS` if set, as for other
/// command-line tools), or `None` when output goes to a pipe or a file: then tables keep
/// one row per line, whatever their width, for tools that read them.
pub fn terminal_width() -> Option<usize> {
    if let Some(columns) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
    {
        return Some(columns);
    }
    terminal_size::terminal_size().map(|(w, _)| usize::from(w.0))
}

/// Lays out rows in left-aligned columns, two spaces apart, with a header rule; when
/// that is wider than `width`, as one record per row instead (the first cell as its
/// title, then one `header  value` line per other cell, long values wrapped).
pub fn table(header: &[&str], rows: &[Vec<String>], width: Option<usize>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    if let Some(width) = width.filter(|w| total > *w) {
        return records(header, rows, width.max(MIN_WIDTH));
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let text: Vec<String> = cells
            .zip(&widths)
            // Padded by hand: a `{:<w$}` width above 65535 panics in std's formatter.
            .map(|(c, w)| pad(c, *w))
            .collect();
        text.join("  ").trim_end().to_owned() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    let rules: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out += &line(&mut rules.iter().map(String::as_str));
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

/// `text` padded with spaces to `width` characters.
fn pad(text: &str, width: usize) -> String {
    format!(
        "{text}{}",
        " ".repeat(width.saturating_sub(text.chars().count()))
    )
}

/// The narrow layout of [`table`]: a record per row.
fn records(header: &[&str], rows: &[Vec<String>], width: usize) -> String {
    let label_width = header.iter().skip(1).map(|h| h.len()).max().unwrap_or(0);
    let indent = 2 + label_width + 2;
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let title = format!("{} {}", header[0], row.first().map_or("", String::as_str));
        out += &wrap(&title, width, 0);
        for (h, cell) in header.iter().zip(row).skip(1) {
            if cell.is_empty() {
                continue;
            }
            let first = format!("  {}  {cell}", pad(h, label_width));
            out += &wrap(&first, width, indent);
        }
    }
    out
}

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

/// A table's caption: a blank line, then `text` wrapped to the terminal's `width`.
fn caption(text: &str, width: Option<usize>) -> String {
    format!("\n{}", wrap(text, width.unwrap_or(usize::MAX), 0))
}

/// Breaks `text` at spaces into lines of at most `width` characters (a word longer than
/// that gets a line of its own), continuation lines indented by `indent`.
fn wrap(text: &str, width: usize, indent: usize) -> String {
    let body = text.trim_start_matches(' ');
    let lead = text.len() - body.len();
    let mut out = String::new();
    let mut line = " ".repeat(lead);
    // Whether the line holds a word yet (a line of indentation alone never wraps).
    let mut has_word = false;
    for word in body.split(' ') {
        let len = line.chars().count();
        if has_word && len + 1 + word.chars().count() > width {
            out += line.trim_end();
            out.push('\n');
            line = " ".repeat(indent);
        } else if has_word {
            line.push(' ');
        }
        line += word;
        has_word = true;
    }
    out += line.trim_end();
    out.push('\n');
    out
}

/// A line of `item  item  item` fields: as it is, or with the fields spread over lines
/// of at most `width` characters.
fn fields(items: &[String], width: Option<usize>) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for item in items.iter().filter(|i| !i.is_empty()) {
        let fits = width.is_none_or(|w| line.chars().count() + 2 + item.chars().count() <= w);
        if !line.is_empty() && !fits {
            out += &line;
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line += "  ";
        }
        line += item;
    }
    out += &line;
    out.push('\n');
    out
}

/// Reports of the same tenants under several managers, side by side: per manager and
/// tenant whether it ran, its slowdown and what it lost to host memory; per manager how
/// many tenants failed and the fairness of the survivors' slowdowns.
pub fn compare_table(reports: &[Report], width: Option<usize>) -> String {
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
    let rows: Vec<Vec<String>> = reports
        .iter()
        .flat_map(|r| r.tenants.iter().map(|t| (r, t)).collect::<Vec<_>>())
        .map(|(r, t)| {
            let (result, slowdown) = match &t.error {
                Some(e) => {
                    notes.push(format!("{} {}: {e}", r.manager, t.name));
                    (format!("FAILED (note {})", notes.len()), "-".to_owned())
                }
                None => (
                    "ran".to_owned(),
                    t.slowdown.map_or("-".into(), |s| format!("{s:.3}")),
                ),
            };
            vec![
                r.manager.clone(),
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
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let failed = r.tenants.iter().filter(|t| t.error.is_some()).count();
            let survivors: Vec<f64> = r
                .tenants
                .iter()
                .filter(|t| t.error.is_none())
                .filter_map(|t| t.slowdown)
                .collect();
            let worst = survivors.iter().copied().fold(f64::NAN, f64::max);
            vec![
                r.manager.clone(),
                format!("{failed} of {}", r.tenants.len()),
                if survivors.is_empty() {
                    "-".into()
                } else {
                    format!("{worst:.3}")
                },
                if survivors.is_empty() {
                    "-".into()
                } else {
                    format!("{:.3}", jain(&survivors))
                },
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

/// The report as tables: one row per tenant, then the system figures.
pub fn report_table(report: &Report, width: Option<usize>) -> String {
    let rows: Vec<Vec<String>> = report
        .tenants
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.app.clone(),
                format_ns(t.total_ns),
                format_ns(t.phase_ns),
                t.slowdown.map_or("-".into(), |s| format!("{s:.3}")),
                format_bytes(t.vram_peak_bytes),
                format_bytes(t.local_bytes),
                format_bytes(t.remote_bytes),
                // Unified memory moves pages, not the books' chunks: its evictions are
                // pages out, its returns pages faulted in again after an eviction.
                format_bytes(
                    t.uvm
                        .as_ref()
                        .map_or(t.bytes_evicted, |u| u.pages_out * PAGE_BYTES),
                ),
                format_bytes(
                    t.uvm
                        .as_ref()
                        .map_or(t.bytes_returned, |u| u.pages_thrashed * PAGE_BYTES),
                ),
                t.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
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
    out += "\n";
    out += &table(
        &[
            "tenant",
            "app",
            "total",
            "phase",
            "slowdown",
            "vram peak",
            "local",
            "remote",
            "evicted",
            "returned",
            "error",
        ],
        &rows,
        width,
    );
    if settings.baseline_mode != "native" {
        out += &caption(
            &format!(
                "slowdown: against each program alone with ample VRAM in mode {} at its defaults; settings that beat those defaults give a slowdown below 1",
                settings.baseline_mode
            ),
            width,
        );
    }
    out += &caption(
        "local, remote: bytes its kernels read and wrote in VRAM and over the link, summed over the run; evicted, returned: bytes moved out of VRAM and back (unified memory: pages evicted, and pages faulted in again after their eviction)",
        width,
    );
    if report.tenants.iter().any(|t| t.contract.is_some()) {
        out += &caption(
            "contracts: what each tenant is promised and limited to",
            width,
        );
        let rows: Vec<Vec<String>> = report
            .tenants
            .iter()
            .map(|t| {
                let contract = t.contract.as_ref().map(crate::contract_keys::describe);
                vec![t.name.clone(), contract.unwrap_or_else(|| "none".into())]
            })
            .collect();
        out += &table(&["tenant", "contract"], &rows, width);
    }
    if report
        .tenants
        .iter()
        .any(|t| t.eviction_latency_ns.count + t.victim_pause_ns.count > 0)
    {
        out += &caption(
            "relocations: allocations that evicted (latency, split summed over them) and suspensions",
            width,
        );
        let rows: Vec<Vec<String>> = report
            .tenants
            .iter()
            .map(|t| {
                let e = &t.eviction_latency_ns;
                let split = &t.eviction_split_ns;
                vec![
                    t.name.clone(),
                    e.count.to_string(),
                    format_ns(e.p50),
                    format_ns(e.max),
                    format_ns(split.policy),
                    format_ns(split.dma_setup),
                    format_ns(split.dma),
                    format_ns(split.waiting),
                    t.victim_pause_ns.count.to_string(),
                    format_ns(t.victim_drain_ns.p50),
                    format_ns(t.victim_pause_ns.p50),
                    format_ns(t.victim_pause_ns.max),
                ]
            })
            .collect();
        out += &table(
            &[
                "tenant",
                "evictions",
                "p50",
                "max",
                "policy",
                "dma setup",
                "dma",
                "waiting",
                "suspensions",
                "drain p50",
                "pause p50",
                "pause max",
            ],
            &rows,
            width,
        );
    }
    if report
        .tenants
        .iter()
        .any(|t| t.preemptions > 0 || t.wait_ns > 0)
    {
        out += &caption(
            "kernel scheduling: kernels the policy preempted, the work they lost, and time it held the tenant's kernels",
            width,
        );
        let rows: Vec<Vec<String>> = report
            .tenants
            .iter()
            .map(|t| {
                vec![
                    t.name.clone(),
                    t.preemptions.to_string(),
                    format_ns(t.wasted_ns),
                    format_ns(t.wait_ns),
                ]
            })
            .collect();
        out += &table(
            &["tenant", "preemptions", "work lost", "held"],
            &rows,
            width,
        );
    }
    if report.tenants.iter().any(|t| t.uvm.is_some()) {
        out += &caption(
            "unified memory: far faults, batches, pages migrated in and out (4 KiB), thrashed (evicted, then faulted again), prefetched and never used, served remotely, and time stalled on faults",
            width,
        );
        let count = |n: u64| n.to_string();
        let rows: Vec<Vec<String>> = report
            .tenants
            .iter()
            .filter_map(|t| t.uvm.as_ref().map(|u| (t, u)))
            .map(|(t, u)| {
                vec![
                    t.name.clone(),
                    count(u.far_faults),
                    count(u.fault_batches),
                    count(u.pages_in),
                    count(u.pages_out),
                    count(u.pages_thrashed),
                    format!("{} / {}", u.prefetched_unused, u.pages_prefetched),
                    count(u.remote_touches),
                    format!("{} / {}", u.throttles, u.pins),
                    format_ns(u.fault_stall_ns),
                    match (u.optimum_pages_in, u.optimum_skipped_touches) {
                        (Some(pages), _) => count(pages),
                        (None, Some(limit)) => format!("skipped: over {limit} touches"),
                        (None, None) => "-".into(),
                    },
                ]
            })
            .collect();
        out += &table(
            &[
                "tenant",
                "far faults",
                "batches",
                "pages in",
                "pages out",
                "thrashed",
                "unused / prefetched",
                "remote touches",
                "throttles / pins",
                "fault stall",
                "optimum in",
            ],
            &rows,
            width,
        );
        out += &caption(
            "managed allocations: the migration pattern detected (observations: kernels, and the first full VRAM, that migrated at least 8 big pages) and the plan the runtime chose (policy = \"adaptive\" or \"adaptive-coarse\"; \"configured\" follows the settings)",
            width,
        );
        let rows: Vec<Vec<String>> = report
            .tenants
            .iter()
            .filter_map(|t| t.uvm.as_ref().map(|u| (t, u)))
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
        out += &table(
            &["tenant", "allocation", "pattern", "plan", "observations"],
            &rows,
            width,
        );
    }
    if report.tenants.iter().any(|t| t.fault_log.is_some()) {
        out += &caption(
            "fault logs replayed: the driver's fault batches as logged on the GPU and as simulated, with their faults (distinct pages) per batch",
            width,
        );
        let mut rows: Vec<Vec<String>> = Vec::new();
        for t in &report.tenants {
            if let Some(f) = &t.fault_log {
                rows.extend(fault_log_rows(&t.name, f));
            }
        }
        out += &table(
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
        );
    }
    let timed: Vec<String> = report
        .tenants
        .iter()
        .filter_map(|t| Some(format!("  {}: {}", t.name, t.timing.as_ref()?)))
        .collect();
    if !timed.is_empty() {
        out += &caption("how the replays are timed:", width);
        for line in timed {
            out += &wrap(&line, width.unwrap_or(usize::MAX), 4);
        }
    }
    let s = &report.system;
    let n = report.tenants.len();
    let ran = n - s.tenants_failed;
    // Figures over tenants that finished say so when some did not; none are given when
    // none finished (an empty mean is no figure).
    let figure = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
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
        figure(s.stp),
        figure(s.antt),
        figure(s.jain_slowdown),
        figure(s.jain_vram),
        100.0 * s.link_utilization_to_device,
        100.0 * s.link_utilization_to_host
    );
    out += &fit(&text, width);
    out
}

/// Text whose lines are `field  field  field`, each line spread over lines of at most
/// `width` characters if it is wider (see [`fields`]).
fn fit(text: &str, width: Option<usize>) -> String {
    text.lines()
        .map(|line| {
            let items: Vec<String> = line.split("  ").map(str::to_owned).collect();
            fields(&items, width)
        })
        .collect()
}

/// A VM scenario's outcome: per VM what it got, then the system's switch costs.
pub fn vgpu_table(
    scenario: &str,
    config: &gpuswap_vgpu::engine::VgpuConfig,
    out: &gpuswap_vgpu::engine::VgpuOutcome,
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
    let rows: Vec<Vec<String>> = out
        .vms
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                v.workload.to_owned(),
                v.slots.to_string(),
                format_ns(v.end_ns - v.start_ns),
                if v.frames > 0 {
                    format!("{:.1}", v.fps())
                } else {
                    "-".into()
                },
                format_ns(v.gpu_ns),
                v.moves.to_string(),
                v.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    text += &table(
        &[
            "vm", "workload", "slots", "time", "fps", "gpu time", "moves", "error",
        ],
        &rows,
        width,
    );
    let refused = out.vms.iter().filter(|v| v.error.is_some()).count();
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
    outcomes: &[(&str, gpuswap_vgpu::engine::VgpuOutcome)],
    width: Option<usize>,
) -> String {
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|(name, o)| {
            let refused = o.vms.iter().filter(|v| v.error.is_some()).count();
            let rendering: Vec<f64> = o
                .vms
                .iter()
                .filter(|v| v.frames > 0)
                .map(|v| v.fps())
                .collect();
            // A mean over the VMs a placement let in flatters one that refused others.
            let starred = if refused > 0 { "*" } else { "" };
            vec![
                (*name).to_owned(),
                format!("{refused} of {}", o.vms.len()),
                if rendering.is_empty() {
                    "-".into()
                } else {
                    format!(
                        "{:.1}{starred}",
                        rendering.iter().sum::<f64>() / rendering.len() as f64
                    )
                },
                o.switches.to_string(),
                o.slot_copies.to_string(),
                format!("{:.0}", o.cycles_per_switch()),
                format!("{:.3e}", o.switch_cycles as f64),
                o.reallocations.to_string(),
            ]
        })
        .collect();
    let refusing = outcomes
        .iter()
        .any(|(_, o)| o.vms.iter().any(|v| v.error.is_some()));
    let note = if refusing {
        "* the mean over the VMs that rendered: the VMs the placement refused are left out\n"
    } else {
        ""
    };
    format!("scenario {scenario}\n\n")
        + &table(
            &[
                "placement",
                "vms failed",
                "mean fps",
                "switches",
                "slot copies",
                "cycles/switch",
                "switch cycles",
                "reallocations",
            ],
            &rows,
            width,
        )
        + note
}

/// The presets, one per row.
pub fn presets_table(presets: &[Preset], width: Option<usize>) -> String {
    let rows: Vec<Vec<String>> = presets
        .iter()
        .map(|p| {
            let features = [
                (p.features.page_faults, "faults"),
                (p.features.access_counters, "access-counters"),
                (p.features.reference_bits, "reference-bits"),
                (p.features.preemption, "preemption"),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, name)| *name)
            .collect::<Vec<_>>()
            .join(",");
            vec![
                p.name.to_owned(),
                format_bytes(p.vram_bytes),
                format_bytes(p.host_memory_bytes),
                format!("{:.0} GB/s", p.vram_bytes_per_s / 1e9),
                format!(
                    "{} {:.1}/{:.1} GB/s",
                    p.link.name,
                    p.link.h2d_bytes_per_s / 1e9,
                    p.link.d2h_bytes_per_s / 1e9
                ),
                p.copy_engines.to_string(),
                if features.is_empty() {
                    "-".into()
                } else {
                    features
                },
                p.description.to_owned(),
            ]
        })
        .collect();
    table(
        &[
            "preset",
            "vram",
            "host memory",
            "vram bw",
            "link (h2d/d2h)",
            "copy engines",
            "features",
            "description",
        ],
        &rows,
        width,
    )
}

/// The virtualised integrated GPUs, one per row.
pub fn vgpu_presets_table(
    presets: &[gpuswap_vgpu::preset::VgpuPreset],
    width: Option<usize>,
) -> String {
    let rows: Vec<Vec<String>> = presets
        .iter()
        .map(|p| {
            vec![
                p.name.to_owned(),
                format!("{} x {}", p.total_slots(), format_bytes(p.slot_bytes)),
                format_bytes(p.low_memory_bytes),
                format_ns(p.slice_ns),
                p.description.to_owned(),
            ]
        })
        .collect();
    table(
        &[
            "preset",
            "high memory slots",
            "low memory per vm",
            "slice",
            "description",
        ],
        &rows,
        width,
    )
}

/// The vGPU workloads, one per row, with what they ask of the GPU.
pub fn workloads_table(
    workloads: &[gpuswap_vgpu::workload::Workload],
    width: Option<usize>,
) -> String {
    use gpuswap_vgpu::workload::Kind;
    let rows: Vec<Vec<String>> = workloads
        .iter()
        .map(|w| {
            let work = match w.kind {
                Kind::Frames { gpu_ns, cpu_ns } => format!(
                    "{} GPU + {} CPU per frame",
                    format_ns(gpu_ns),
                    format_ns(cpu_ns)
                ),
                Kind::Job { gpu_ns } => format!("{} of GPU work", format_ns(gpu_ns)),
            };
            vec![w.name.to_owned(), work, w.description.to_owned()]
        })
        .collect();
    table(&["workload", "work", "description"], &rows, width)
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
    let rows: Vec<Vec<String>> = apps
        .iter()
        .map(|a| {
            let memory = match (&a.default_size_peak_bytes, &a.default_size_error) {
                (Some(bytes), _) => format_bytes(*bytes),
                (None, e) => format!("({})", e.as_deref().unwrap_or_default()),
            };
            vec![a.name.to_owned(), memory, a.description.to_owned()]
        })
        .collect();
    table(
        &["app", "memory (default size)", "description"],
        &rows,
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
    for (i, p) in gpuswap_core::scheduling::POLICIES.iter().enumerate() {
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
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let default = if r.default { " (default)" } else { "" };
            let needs = if r.needs.is_empty() {
                "-".to_owned()
            } else {
                r.needs.join(", ")
            };
            vec![
                r.setting.clone(),
                format!("{}{default}", r.value),
                needs,
                r.description.clone(),
            ]
        })
        .collect();
    table(&["setting", "value", "needs", "description"], &cells, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Vec<String>> {
        vec![
            vec![
                "a".into(),
                "backprop".into(),
                "a long description of what it does".into(),
            ],
            vec!["b".into(), "hotspot".into(), String::new()],
        ]
    }

    #[test]
    fn a_table_wider_than_the_terminal_becomes_records() {
        let header = ["tenant", "app", "description"];
        let wide = table(&header, &rows(), None);
        assert_eq!(wide.lines().count(), 4);
        assert!(
            wide.lines()
                .next()
                .unwrap()
                .starts_with("tenant  app       description")
        );
        // Fits in 60 columns: unchanged.
        assert_eq!(table(&header, &rows(), Some(60)), wide);
        let narrow = table(&header, &rows(), Some(40));
        assert_eq!(
            narrow,
            "tenant a\n  app          backprop\n  description  a long description of\n               what it does\n\ntenant b\n  app          hotspot\n"
        );
        assert!(narrow.lines().all(|l| l.chars().count() <= 40));
    }

    #[test]
    fn fields_spread_over_lines_that_fit() {
        let items: Vec<String> = ["makespan 1 s", "STP 1.000", "ANTT 1.000"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            fields(&items, None),
            "makespan 1 s  STP 1.000  ANTT 1.000\n"
        );
        assert_eq!(
            fields(&items, Some(25)),
            "makespan 1 s  STP 1.000\nANTT 1.000\n"
        );
    }

    proptest::proptest! {
        /// Wrapped lines fit the width, unless one word alone is wider; no word is lost.
        #[test]
        fn wrapped_lines_fit_and_keep_every_word(
            words in proptest::collection::vec("[a-z]{1,12}", 1..40),
            width in 20usize..100,
            indent in 0usize..10,
        ) {
            let text = words.join(" ");
            let wrapped = wrap(&text, width, indent);
            for line in wrapped.lines() {
                let fits = line.chars().count() <= width;
                proptest::prop_assert!(fits || !line.trim().contains(' '), "{line:?}");
            }
            let back: Vec<&str> = wrapped.split_whitespace().collect();
            proptest::prop_assert_eq!(back, words.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }

    #[test]
    fn cells_wider_than_the_formatters_limit_are_laid_out() {
        // std's `{:<w$}` panics for widths above 65535.
        let wide = "x".repeat(70_000);
        let text = table(
            &["name", "app"],
            &[vec![wide.clone(), "a".into()], vec!["b".into(), "c".into()]],
            None,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[2], format!("{wide}  a"));
        assert_eq!(lines[3].len(), 70_000 + 3);
        assert!(lines[3].starts_with('b') && lines[3].ends_with("  c"));
    }

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
