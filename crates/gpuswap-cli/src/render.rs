//! Text tables for the terminal.

use gpuswap_sim::apps::{AppModel, DeviceShape};
use gpuswap_sim::preset::Preset;
use gpuswap_sim::report::{Report, jain};
use gpuswap_sim::units::{format_bytes, format_ns};

/// Lays out rows in left-aligned columns, two spaces apart, with a header rule.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let text: Vec<String> = cells
            .zip(&widths)
            // Padded by hand: a `{:<w$}` width above 65535 panics in std's formatter.
            .map(|(c, w)| format!("{c}{}", " ".repeat(w.saturating_sub(c.chars().count()))))
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

/// Reports of the same tenants under several managers, side by side: per manager and
/// tenant whether it ran, its slowdown and what it lost to host memory; per manager how
/// many tenants failed and the fairness of the survivors' slowdowns.
pub fn compare_table(reports: &[Report]) -> String {
    let Some(first) = reports.first() else {
        return String::new();
    };
    let mut out = format!(
        "scenario {}  seed {}  device {}\n\n",
        first.scenario, first.seed, first.device
    );
    let rows: Vec<Vec<String>> = reports
        .iter()
        .flat_map(|r| {
            r.tenants.iter().map(|t| {
                let (result, slowdown) = match &t.error {
                    Some(e) => (format!("FAILED: {e}"), "-".to_owned()),
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
        })
        .collect();
    out += &table(
        &[
            "manager", "tenant", "app", "slowdown", "evicted", "remote", "result",
        ],
        &rows,
    );
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
    out += &table(
        &[
            "manager",
            "tenants failed",
            "worst slowdown (survivors)",
            "Jain(slowdown, survivors)",
            "makespan",
        ],
        &rows,
    );
    out
}

/// The report as tables: one row per tenant, then the system figures.
pub fn report_table(report: &Report) -> String {
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
                format_bytes(t.bytes_evicted),
                format_bytes(t.bytes_returned),
                t.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let settings = &report.settings;
    let mut out = format!(
        "scenario {}  seed {}  device {}  manager {}{}\nVRAM for tenants {}  host memory {}  chunk {}  return check every {}\n\n",
        report.scenario,
        report.seed,
        report.device,
        report.manager,
        settings
            .policy
            .iter()
            .map(|p| format!(" {p}"))
            .collect::<String>(),
        format_bytes(settings.vram_bytes),
        format_bytes(settings.host_bytes),
        format_bytes(settings.chunk_bytes),
        format_ns(settings.return_interval_ns)
    );
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
    );
    if report
        .tenants
        .iter()
        .any(|t| t.eviction_latency_ns.count + t.victim_pause_ns.count > 0)
    {
        out += "\nrelocations: allocations that evicted (latency, split summed over them) and suspensions\n";
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
        );
    }
    let s = &report.system;
    let n = report.tenants.len();
    let ran = n - s.tenants_failed;
    // Figures over tenants that finished say so when some did not; none are given when
    // none finished (an empty mean is no figure).
    let over_survivors = if ran == 0 {
        "STP -  ANTT -  Jain(slowdown) -".to_owned()
    } else {
        format!(
            "STP {:.3}  ANTT {:.3}  Jain(slowdown) {:.3}",
            s.stp, s.antt, s.jain_slowdown
        )
    };
    let failed_note = if s.tenants_failed > 0 {
        format!(
            "\n{} of {n} tenants FAILED: STP, ANTT and Jain(slowdown) cover the {ran} that finished",
            s.tenants_failed
        )
    } else {
        String::new()
    };
    out += &format!(
        "\nmakespan {}  {over_survivors}  Jain(VRAM) {:.3}{failed_note}\n\
         link utilization: to device {:.1} %, to host {:.1} %\n",
        format_ns(s.makespan_ns),
        s.jain_vram,
        100.0 * s.link_utilization_to_device,
        100.0 * s.link_utilization_to_host
    );
    out
}

/// The presets, one per row.
pub fn presets_table(presets: &[Preset]) -> String {
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
            "vram bw",
            "link (h2d/d2h)",
            "copy engines",
            "features",
            "description",
        ],
        &rows,
    )
}

/// The apps, one per row, with the memory their default size allocates at most on
/// `device` (allocations do not depend on the device; the programs need one).
pub fn apps_table(apps: &[&dyn AppModel], device: DeviceShape) -> String {
    let rows: Vec<Vec<String>> = apps
        .iter()
        .map(|a| {
            let memory = a.program("default", 1, device).map_or_else(
                |e| format!("({e})"),
                |p| format_bytes(p.peak_allocated_bytes()),
            );
            vec![a.name().to_owned(), memory, a.description().to_owned()]
        })
        .collect();
    table(&["app", "memory (default size)", "description"], &rows)
}

/// Every manager mode, and every value of each mode's parameters, with what it needs from
/// the device; then the launch schedulers. Built from the registry.
pub fn policies_table() -> String {
    use gpuswap_core::registry::{POLICIES, ParamDefault, ParamKind, schedulers};
    let needs = |n: gpuswap_core::Needs| {
        let names = n.names();
        if names.is_empty() {
            "-".to_owned()
        } else {
            names.join(", ")
        }
    };
    let mut rows = Vec::new();
    for entry in POLICIES {
        let mode = entry.choice;
        rows.push(vec![
            "manager.mode".to_owned(),
            mode.name.to_owned(),
            needs(mode.needs),
            format!("{} (scheduler: {})", mode.description, entry.scheduler),
        ]);
        for spec in entry.params {
            let key = format!("manager.{}", spec.key);
            match (spec.kind, spec.default) {
                (ParamKind::Choice(options), default) => {
                    for c in options() {
                        let is_default = matches!(default, ParamDefault::Choice(d) if d == c.name);
                        rows.push(vec![
                            key.clone(),
                            format!("{}{}", c.name, if is_default { " (default)" } else { "" }),
                            needs(c.needs),
                            format!("{}: {}", mode.name, c.description),
                        ]);
                    }
                }
                (ParamKind::Count, _) => rows.push(vec![
                    key.clone(),
                    "a whole number (default: the number of tenants)".to_owned(),
                    "-".to_owned(),
                    format!("{}: {}", mode.name, spec.help),
                ]),
            }
        }
    }
    for s in schedulers() {
        rows.push(vec![
            "scheduler".to_owned(),
            s.name.to_owned(),
            needs(s.needs),
            s.description.to_owned(),
        ]);
    }
    table(&["setting", "value", "needs", "description"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_wider_than_the_formatters_limit_are_laid_out() {
        // std's `{:<w$}` panics for widths above 65535.
        let wide = "x".repeat(70_000);
        let text = table(
            &["name", "app"],
            &[vec![wide.clone(), "a".into()], vec!["b".into(), "c".into()]],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[2], format!("{wide}  a"));
        assert_eq!(lines[3].len(), 70_000 + 3);
        assert!(lines[3].starts_with('b') && lines[3].ends_with("  c"));
    }
}
