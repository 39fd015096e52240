//! A sweep's plots: runtime, measured phase, makespan and eviction latency against each
//! numeric setting (each named one when none is numeric), a line per combination of the
//! other settings, with the points where runs or tenants failed marked.

use std::collections::BTreeMap;
use std::path::Path;

use gpuswap_sim::units::{parse_bytes, parse_ns};
use toml::Value;

use super::axis::{Axis, value_text};
use super::error::SweepError;
use super::figures::Kind;
use super::stats::PointStats;
use crate::plot::{self, Line, LinePoint, Spread, XAxis};

/// A measure the sweep plots: a summary metric and how its figure reads.
struct Measure {
    /// The summary metric.
    metric: &'static str,
    /// What the metric is divided by for the plot's unit.
    scale: f64,
    /// The plot's unit.
    unit: &'static str,
    /// File name before `-vs-SETTING`.
    stem: &'static str,
    /// Title, before "vs SETTING".
    title: &'static str,
    /// Y axis label, without the unit.
    y_label: &'static str,
    /// The runs a point's value covers.
    runs_counted: &'static str,
}

/// What a sweep plots. The runtime is the slowest tenant's time from start to end, not
/// its measured phase: an eviction that makes a tenant wait for the other's queued
/// kernels serializes the two, and each measured phase is then a solo phase, so the
/// slowest phase can fall where the tenants take longer (and rise with more memory). The
/// phase, the runtime of the paper's figures, has a plot of its own to compare with them.
const MEASURES: [Measure; 4] = [
    Measure {
        metric: "slowest_total_ns",
        scale: 1e9,
        unit: "s",
        stem: "runtime",
        title: "slowest tenant's runtime",
        y_label: "runtime of the slowest tenant, start to end",
        runs_counted: "runs in which every tenant finished",
    },
    Measure {
        metric: "slowest_phase_ns",
        scale: 1e9,
        unit: "s",
        stem: "phase",
        title: "slowest tenant's measured phase",
        y_label: "measured phase of the slowest tenant",
        runs_counted: "runs in which every tenant finished",
    },
    Measure {
        metric: "makespan_ns",
        scale: 1e9,
        unit: "s",
        stem: "makespan",
        title: "makespan",
        y_label: "makespan",
        runs_counted: "runs that completed (a failed tenant ends where it stopped)",
    },
    Measure {
        metric: "eviction_mean_ns",
        scale: 1e6,
        unit: "ms",
        stem: "eviction-latency",
        title: "eviction latency",
        y_label: "mean latency of evicting allocations",
        runs_counted: "runs in which allocations had to evict",
    },
];

/// What a VM sweep plots: the copies and cycles that placements are about, and what the
/// VMs got.
const VM_MEASURES: [Measure; 4] = [
    Measure {
        metric: "slot_copies",
        scale: 1.0,
        unit: "copies",
        stem: "slot-copies",
        title: "private-table slot copies",
        y_label: "slot copies at switches",
        runs_counted: "runs",
    },
    Measure {
        metric: "switch_cycles",
        scale: 1e9,
        unit: "10^9 cycles",
        stem: "switch-cycles",
        title: "total switch cycles",
        y_label: "cycles spent switching",
        runs_counted: "runs",
    },
    Measure {
        metric: "cycles_per_switch",
        scale: 1e6,
        unit: "10^6 cycles",
        stem: "cycles-per-switch",
        title: "cycles per switch",
        y_label: "mean cycles per context switch",
        runs_counted: "runs",
    },
    Measure {
        metric: "mean_fps",
        scale: 1.0,
        unit: "frames/s",
        stem: "fps",
        title: "frame rate",
        y_label: "mean frame rate of the VMs that rendered",
        runs_counted: "runs",
    },
];

/// What a unified-memory sweep plots besides the tenant measures.
const PAGING_MEASURES: [Measure; 2] = [
    Measure {
        metric: "pages_in",
        scale: 256.0,
        unit: "MiB",
        stem: "migrated",
        title: "data migrated to VRAM",
        y_label: "pages migrated to VRAM, all tenants",
        runs_counted: "runs",
    },
    Measure {
        metric: "fault_stall_ns",
        scale: 1e9,
        unit: "s",
        stem: "fault-stall",
        title: "time stalled on faults",
        y_label: "kernel time stalled on fault batches, all tenants",
        runs_counted: "runs",
    },
];

/// The measures plotted for a kind of scenario.
fn measures(kind: Kind) -> Vec<&'static Measure> {
    match kind {
        Kind::Tenants => MEASURES.iter().collect(),
        Kind::PagedTenants => MEASURES.iter().chain(&PAGING_MEASURES).collect(),
        Kind::Vms => VM_MEASURES.iter().collect(),
    }
}

/// Writes the plots of a sweep from its per-point statistics; `apps` names the tenants'
/// apps in the titles.
pub(super) fn write_plots(
    out: &Path,
    kind: Kind,
    axes: &[Axis],
    points: &[Vec<Value>],
    stats: &[PointStats],
    apps: &str,
    png: bool,
) -> Result<(), SweepError> {
    let runs = stats.iter().map(|s| s.runs).max().unwrap_or(0);
    for k in plotted_axes(axes) {
        // The figures against one setting share their series, and only they do: a series
        // names the values of every other setting.
        let colors = plot::color_slots(points.iter().map(|p| series_label(k, axes, p)));
        let axis = &axes[k];
        let (x_label, placement) = placement(axis);
        let name = axis.key.replace(['.', '[', ']'], "_");
        for measure in measures(kind) {
            let lines = lines_for(k, axes, points, stats, measure, &placement, &colors);
            let all = || lines.iter().flat_map(|l| l.points.iter());
            if !all().any(|p| p.value.is_some() || p.run_failed || p.tenant_failed) {
                continue;
            }
            let counted = measure.runs_counted;
            let mut subtitle = match (runs, &placement) {
                (..=1, _) => format!("One run (seed) per point; values only from {counted}"),
                (_, Placement::Categories(_)) => format!(
                    "Mean of the {counted}, {runs} seeds per point; bar: smallest to largest"
                ),
                _ => format!(
                    "Mean of the {counted}, {runs} seeds per point; band: smallest to largest"
                ),
            };
            if all().any(|p| p.run_failed || p.tenant_failed) {
                subtitle.push_str(
                    "\nRed marks: a run or a tenant failed at that point; on the x axis where no run counts",
                );
            }
            plot::save(
                &out.join(format!("{}-vs-{name}", measure.stem)),
                (1000, 600),
                png,
                &plot::LineChart {
                    title: &format!("{apps}: {} vs {}", measure.title, axis.key),
                    subtitle: &subtitle,
                    x_label: &x_label,
                    y_label: measure.y_label,
                    y_unit: measure.unit,
                    lines: &lines,
                    x_axis: placement.x_axis(),
                },
            )
            .map_err(SweepError::Output)?;
        }
    }
    Ok(())
}

/// The axes that get plots: each numeric one, with a line per combination of the others
/// (policies, modes); each named one when nothing is numeric.
fn plotted_axes(axes: &[Axis]) -> Vec<usize> {
    let numeric: Vec<usize> = (0..axes.len())
        .filter(|k| !matches!(placement(&axes[*k]).1, Placement::Categories(_)))
        .collect();
    if numeric.is_empty() {
        (0..axes.len()).collect()
    } else {
        numeric
    }
}

/// Where an axis's values sit on a plot's x axis.
#[derive(Clone, Debug, PartialEq)]
enum Placement {
    /// Numbers at their values (MiB for sizes, ms for durations).
    Numbers,
    /// Numbers spanning more than a factor of 64, such as chunk sizes from 128 KiB to
    /// 128 MiB, placed evenly; the values as written.
    Evenly(Vec<String>),
    /// Names, such as policies, placed evenly; the names.
    Categories(Vec<String>),
}

impl Placement {
    fn x_axis(&self) -> XAxis<'_> {
        match self {
            Self::Numbers => XAxis::Numbers,
            Self::Evenly(names) => XAxis::Evenly(names),
            Self::Categories(names) => XAxis::Categories(names),
        }
    }
}

/// How an axis's values sit on a plot's x axis, and the axis label.
fn placement(axis: &Axis) -> (String, Placement) {
    let texts: Vec<String> = axis.values.iter().map(value_text).collect();
    let (label, numbers) = if texts.iter().all(|t| parse_bytes(t).is_ok()) {
        (format!("{} (MiB)", axis.key), true)
    } else if texts.iter().all(|t| parse_ns(t).is_ok()) {
        (format!("{} (ms)", axis.key), true)
    } else {
        (axis.key.clone(), axis.values.iter().all(Value::is_integer))
    };
    if !numbers {
        return (label, Placement::Categories(texts));
    }
    let xs = axis.values.iter().map(number);
    let (min, max) = xs.fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
    if min > 0.0 && max / min >= 64.0 {
        // The positions show the values as written, units and all.
        (axis.key.clone(), Placement::Evenly(texts))
    } else {
        (label, Placement::Numbers)
    }
}

/// A numeric setting's value in the unit of its axis: MiB, ms, or itself.
fn number(value: &Value) -> f64 {
    let text = value_text(value);
    if let Ok(bytes) = parse_bytes(&text) {
        bytes as f64 / (1u64 << 20) as f64
    } else if let Ok(ns) = parse_ns(&text) {
        ns as f64 / 1e6
    } else {
        value.as_integer().unwrap_or(0) as f64
    }
}

/// The line a point belongs to on plots against axis `k`: the other axes' values.
fn series_label(k: usize, axes: &[Axis], point: &[Value]) -> String {
    point
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != k)
        .map(|(i, v)| match v {
            Value::Table(_) => value_text(v),
            _ => format!(
                "{}={}",
                axes[i].key.rsplit('.').next().unwrap_or(""),
                value_text(v)
            ),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One line per combination of the other axes' values: `measure`'s mean and range at each
/// point, and whether runs or tenants failed there; `colors` holds the palette slot of
/// every series of the sweep.
fn lines_for(
    k: usize,
    axes: &[Axis],
    points: &[Vec<Value>],
    stats: &[PointStats],
    measure: &Measure,
    placement: &Placement,
    colors: &BTreeMap<String, usize>,
) -> Vec<Line> {
    let mut lines: BTreeMap<String, Vec<LinePoint>> = BTreeMap::new();
    for (point, stats) in points.iter().zip(stats) {
        let x = match placement {
            Placement::Numbers => number(&point[k]),
            Placement::Evenly(_) | Placement::Categories(_) => axes[k]
                .values
                .iter()
                .position(|v| *v == point[k])
                .unwrap_or(0) as f64,
        };
        let scale = measure.scale;
        lines
            .entry(series_label(k, axes, point))
            .or_default()
            .push(LinePoint {
                x,
                value: stats.metrics.get(measure.metric).map(|s| Spread {
                    mean: s.mean / scale,
                    min: s.min / scale,
                    max: s.max / scale,
                }),
                run_failed: stats.failed > 0,
                tenant_failed: stats.tenant_failed > 0,
            });
    }
    lines
        .into_iter()
        .map(|(label, mut points)| {
            points.sort_by(|a, b| a.x.total_cmp(&b.x));
            Line {
                color: colors.get(&label).copied().unwrap_or(0),
                label,
                points,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::plan::grid;
    use crate::sweep::stats::Stats;

    fn axis(key: &str, values: &[&str]) -> Axis {
        Axis {
            key: key.into(),
            values: values.iter().map(|v| Value::String((*v).into())).collect(),
        }
    }

    /// Statistics of a point whose runs gave each metric one value.
    fn point(
        runs: usize,
        failed: usize,
        tenant_failed: usize,
        metrics: &[(&'static str, f64)],
    ) -> PointStats {
        PointStats {
            runs,
            failed,
            tenant_failed,
            metrics: metrics
                .iter()
                .map(|(m, v)| (*m, Stats::of(&[*v]).unwrap()))
                .collect(),
        }
    }

    fn measure(metric: &str) -> &'static Measure {
        MEASURES.iter().find(|m| m.metric == metric).unwrap()
    }

    #[test]
    fn a_series_keeps_its_colour_in_every_figure() {
        let axes = [
            axis("device.vram_limit", &["100MiB", "200MiB"]),
            axis(
                "manager.chunk_policy",
                &["random", "priority-buffer", "reverse-swap"],
            ),
        ];
        let points = grid(&axes);
        // Only reverse-swap evicts: the eviction figure has a line of its own.
        let stats: Vec<PointStats> = points
            .iter()
            .map(|p| match p[1].as_str() {
                Some("reverse-swap") => {
                    point(1, 0, 0, &[("makespan_ns", 2e9), ("eviction_mean_ns", 1e6)])
                }
                _ => point(1, 0, 0, &[("makespan_ns", 1e9)]),
            })
            .collect();
        let colors = plot::color_slots(points.iter().map(|p| series_label(0, &axes, p)));
        let (_, placement) = placement(&axes[0]);
        let figure = |metric| {
            lines_for(
                0,
                &axes,
                &points,
                &stats,
                measure(metric),
                &placement,
                &colors,
            )
            .into_iter()
            .filter(|l| l.points.iter().any(|p| p.value.is_some()))
            .map(|l| (l.label, l.color))
            .collect::<Vec<_>>()
        };
        let makespan = figure("makespan_ns");
        assert_eq!(makespan.len(), 3);
        let eviction = figure("eviction_mean_ns");
        assert_eq!(eviction.len(), 1);
        assert!(
            makespan.contains(&eviction[0]),
            "{eviction:?} not in {makespan:?}"
        );
        let mut slots: Vec<usize> = makespan.iter().map(|(_, c)| *c).collect();
        slots.dedup();
        assert_eq!(slots.len(), 3, "two series share a colour: {makespan:?}");
    }

    #[test]
    fn failed_points_are_marked_not_dropped() {
        let axes = [axis("device.vram_limit", &["100MiB", "200MiB", "300MiB"])];
        let points = grid(&axes);
        let stats = [
            // Every run had a tenant fail: no runtime, the makespan of the runs.
            point(2, 0, 2, &[("makespan_ns", 3e9)]),
            // One of two runs had a tenant fail: the runtime of the other.
            point(2, 0, 1, &[("slowest_total_ns", 2e9), ("makespan_ns", 2e9)]),
            // Every run failed.
            point(2, 2, 0, &[]),
        ];
        let (_, placement) = placement(&axes[0]);
        let colors = plot::color_slots([String::new()]);
        let lines = lines_for(
            0,
            &axes,
            &points,
            &stats,
            measure("slowest_total_ns"),
            &placement,
            &colors,
        );
        assert_eq!(lines.len(), 1);
        let marks: Vec<(f64, Option<f64>, bool, bool)> = lines[0]
            .points
            .iter()
            .map(|p| (p.x, p.value.map(|v| v.mean), p.run_failed, p.tenant_failed))
            .collect();
        assert_eq!(
            marks,
            [
                (100.0, None, false, true),
                (200.0, Some(2.0), false, true),
                (300.0, None, true, false),
            ]
        );
    }

    #[test]
    fn named_settings_are_categories_drawn_as_points() {
        let axes = [axis("manager.chunk_policy", &["random", "priority-buffer"])];
        let (label, policies) = placement(&axes[0]);
        assert_eq!(label, "manager.chunk_policy");
        assert_eq!(
            policies,
            Placement::Categories(vec!["random".into(), "priority-buffer".into()])
        );
        assert!(matches!(policies.x_axis(), XAxis::Categories(names) if names.len() == 2));
        let points = grid(&axes);
        let stats = [
            point(1, 0, 0, &[("makespan_ns", 1e9)]),
            point(1, 0, 0, &[("makespan_ns", 2e9)]),
        ];
        let colors = plot::color_slots([String::new()]);
        let lines = lines_for(
            0,
            &axes,
            &points,
            &stats,
            measure("makespan_ns"),
            &policies,
            &colors,
        );
        let xs: Vec<f64> = lines[0].points.iter().map(|p| p.x).collect();
        assert_eq!(xs, [0.0, 1.0]);
        // Numbers stay numbers, placed evenly only when they span orders of magnitude.
        let sizes = axis("device.vram_limit", &["100MiB", "200MiB"]);
        assert_eq!(placement(&sizes).1, Placement::Numbers);
        let chunks = axis("manager.chunk_size", &["128KiB", "1MiB", "128MiB"]);
        assert!(matches!(placement(&chunks).1, Placement::Evenly(_)));
        // Named settings get plots of their own only when nothing is numeric.
        assert_eq!(plotted_axes(&[axes[0].clone(), sizes.clone()]), [1]);
        assert_eq!(plotted_axes(&[axes[0].clone(), axes[0].clone()]), [0, 1]);
    }
}
