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
/// apps in the titles, `names` the values of one axis (`[sweep.normalize]`'s).
#[allow(clippy::too_many_arguments)]
pub(super) fn write_plots(
    out: &Path,
    kind: Kind,
    axes: &[Axis],
    points: &[Vec<Value>],
    stats: &[PointStats],
    apps: &str,
    names: Option<(usize, &[String])>,
    png: bool,
) -> Result<(), SweepError> {
    let runs = stats.iter().map(|s| s.runs).max().unwrap_or(0);
    let labels = Labels::new(axes, names);
    for k in plotted_axes(axes) {
        let layout = Layout::new(k, axes);
        // The figures against one setting share their series, and only they do: a series
        // names the values of every other setting but the panels'.
        let colors = plot::color_slots(points.iter().map(|p| labels.of(&layout.series, p)));
        let axis = &axes[k];
        let (x_label, placement) = placement(axis, &labels.of_axis(k));
        let name = axis.key.replace(['.', '[', ']'], "_");
        for measure in measures(kind) {
            let panels: Vec<plot::Panel> = layout
                .panels(points)
                .into_iter()
                .map(|members| plot::Panel {
                    title: if layout.panel_axes.is_empty() {
                        String::new()
                    } else {
                        labels.of(&layout.panel_axes, &points[members[0]])
                    },
                    lines: lines_for(
                        k,
                        axes,
                        &members,
                        points,
                        stats,
                        measure,
                        &placement,
                        &|p: &[Value]| labels.of(&layout.series, p),
                        &colors,
                    ),
                })
                .collect();
            let all = || {
                panels
                    .iter()
                    .flat_map(|p| p.lines.iter().flat_map(|l| l.points.iter()))
            };
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
            if !layout.panel_axes.is_empty() {
                let keys: Vec<&str> = layout
                    .panel_axes
                    .iter()
                    .map(|a| short_key(&axes[*a].key))
                    .collect();
                subtitle += &format!(
                    "\nA panel per {}; y: {} ({})",
                    keys.join(" and "),
                    measure.y_label,
                    measure.unit
                );
            }
            if all().any(|p| p.run_failed || p.tenant_failed) {
                subtitle.push_str(
                    "\nRed marks: a run or a tenant failed at that point; on the x axis where no run counts",
                );
            }
            plot::save(
                &out.join(format!("{}-vs-{name}", measure.stem)),
                plot::chart_pixels(panels.len(), (1000, 600)),
                png,
                &plot::LineChart {
                    title: &format!("{apps}: {} vs {}", measure.title, axis.key),
                    subtitle: &subtitle,
                    x_label: &x_label,
                    y_label: measure.y_label,
                    y_unit: measure.unit,
                    panels: &panels,
                    x_axis: placement.x_axis(),
                },
            )
            .map_err(SweepError::Output)?;
        }
    }
    Ok(())
}

/// How the figures against axis `k` split the other axes: those that make the panels
/// (small multiples) and those whose values make the series within a panel.
#[derive(Debug, PartialEq)]
struct Layout {
    panel_axes: Vec<usize>,
    series: Vec<usize>,
}

impl Layout {
    /// A single panel while the other axes make at most [`plot::MAX_SERIES`] series;
    /// past that, the axes with the most values (the apps, the pairs) make panels, one
    /// at a time, until the rest fit in a panel.
    fn new(k: usize, axes: &[Axis]) -> Self {
        let mut series: Vec<usize> = (0..axes.len()).filter(|a| *a != k).collect();
        let count =
            |list: &[usize]| -> usize { list.iter().map(|a| axes[*a].values.len()).product() };
        let mut panel_axes = Vec::new();
        while count(&series) > plot::MAX_SERIES {
            let widest = *series
                .iter()
                .max_by_key(|a| (axes[**a].values.len(), std::cmp::Reverse(**a)))
                .expect("more than one series");
            series.retain(|a| *a != widest);
            panel_axes.push(widest);
        }
        panel_axes.sort_unstable();
        Self { panel_axes, series }
    }

    /// The points of each panel, in the grid's order.
    fn panels(&self, points: &[Vec<Value>]) -> Vec<Vec<usize>> {
        let mut panels: Vec<(Vec<&Value>, Vec<usize>)> = Vec::new();
        for (p, point) in points.iter().enumerate() {
            let key: Vec<&Value> = self.panel_axes.iter().map(|a| &point[*a]).collect();
            match panels.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(p),
                None => panels.push((key, vec![p])),
            }
        }
        panels.into_iter().map(|(_, members)| members).collect()
    }
}

/// What the figures call each axis's values: `[sweep.normalize]`'s names for its axis;
/// for whole tables (a manager), the settings in which they differ; for tenant lists,
/// their apps (`bfs+nn`); other values as written.
struct Labels {
    /// Per axis, its values and their labels, in the axis's order.
    values: Vec<Vec<(Value, String)>>,
    /// Per axis, what goes before a label (`app=`); empty where a label says what it
    /// is (a table's settings).
    prefix: Vec<String>,
}

impl Labels {
    fn new(axes: &[Axis], names: Option<(usize, &[String])>) -> Self {
        let mut values = Vec::new();
        let mut prefix = Vec::new();
        for (a, axis) in axes.iter().enumerate() {
            let named = names.filter(|(n, names)| *n == a && names.len() == axis.values.len());
            let (labels, bare) = match named {
                Some((_, names)) => (names.to_vec(), false),
                None => (
                    readable(&axis.values),
                    axis.values.iter().any(|v| v.is_table() || v.is_array()),
                ),
            };
            values.push(axis.values.iter().cloned().zip(labels).collect());
            prefix.push(if bare {
                String::new()
            } else {
                format!("{}=", short_key(&axis.key))
            });
        }
        Self { values, prefix }
    }

    /// The labels of axis `a`'s values, in its order.
    fn of_axis(&self, a: usize) -> Vec<String> {
        self.values[a].iter().map(|(_, l)| l.clone()).collect()
    }

    /// The label of `point` over `axes`: each value's, after its key where needed.
    fn of(&self, axes: &[usize], point: &[Value]) -> String {
        axes.iter()
            .map(|a| {
                let label = self.values[*a]
                    .iter()
                    .find(|(v, _)| *v == point[*a])
                    .map_or_else(|| value_text(&point[*a]), |(_, l)| l.clone());
                format!("{}{label}", self.prefix[*a])
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A key without its tables: `tenant.app` is `app`, `device.vram_limit` `vram_limit`.
fn short_key(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

/// Labels a reader can tell apart for an axis's values: whole tables by the settings
/// in which they differ from the others (`eviction=tree` rather than `mode=uvm
/// eviction=tree`; all of them where none differ), tenant lists by their apps joined
/// with `+`, anything else as written.
fn readable(values: &[Value]) -> Vec<String> {
    let pairs = |v: &Value| -> Vec<String> {
        v.as_table().map_or_else(Vec::new, |t| {
            t.iter()
                .map(|(k, v)| format!("{k}={}", value_text(v)))
                .collect()
        })
    };
    let common: Vec<String> = values
        .first()
        .map(|first| {
            pairs(first)
                .into_iter()
                .filter(|p| values.iter().all(|v| pairs(v).contains(p)))
                .collect()
        })
        .unwrap_or_default();
    values
        .iter()
        .map(|v| match v {
            Value::Table(_) => {
                let own: Vec<String> = pairs(v)
                    .into_iter()
                    .filter(|p| !common.contains(p))
                    .collect();
                if own.is_empty() {
                    value_text(v)
                } else {
                    own.join(" ")
                }
            }
            Value::Array(items) => items
                .iter()
                .map(|item| match item.get("app") {
                    Some(app) => value_text(app),
                    None => value_text(item),
                })
                .collect::<Vec<_>>()
                .join("+"),
            _ => value_text(v),
        })
        .collect()
}

/// The axes that get plots: each numeric one, with a line per combination of the others
/// (policies, modes); each named one when nothing is numeric.
fn plotted_axes(axes: &[Axis]) -> Vec<usize> {
    let numeric: Vec<usize> = (0..axes.len())
        .filter(|k| !matches!(placement(&axes[*k], &[]).1, Placement::Categories(_)))
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

/// How an axis's values sit on a plot's x axis, and the axis label; `labels` name its
/// values where they are categories.
fn placement(axis: &Axis, labels: &[String]) -> (String, Placement) {
    let texts: Vec<String> = axis.values.iter().map(value_text).collect();
    let (label, numbers) = if texts.iter().all(|t| parse_bytes(t).is_ok()) {
        (format!("{} (MiB)", axis.key), true)
    } else if texts.iter().all(|t| parse_ns(t).is_ok()) {
        (format!("{} (ms)", axis.key), true)
    } else {
        (axis.key.clone(), axis.values.iter().all(Value::is_integer))
    };
    if !numbers {
        return (label, Placement::Categories(labels.to_vec()));
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

/// One line per series among the points `members` (a panel's): `measure`'s mean and
/// range at each point, and whether runs or tenants failed there; `series` names the
/// line a point belongs to, `colors` holds the palette slot of every series of the
/// figure.
#[allow(clippy::too_many_arguments)]
fn lines_for(
    k: usize,
    axes: &[Axis],
    members: &[usize],
    points: &[Vec<Value>],
    stats: &[PointStats],
    measure: &Measure,
    placement: &Placement,
    series: &dyn Fn(&[Value]) -> String,
    colors: &BTreeMap<String, usize>,
) -> Vec<Line> {
    let mut lines: BTreeMap<String, Vec<LinePoint>> = BTreeMap::new();
    for &p in members {
        let (point, stats) = (&points[p], &stats[p]);
        let x = match placement {
            Placement::Numbers => number(&point[k]),
            Placement::Evenly(_) | Placement::Categories(_) => axes[k]
                .values
                .iter()
                .position(|v| *v == point[k])
                .unwrap_or(0) as f64,
        };
        let scale = measure.scale;
        lines.entry(series(point)).or_default().push(LinePoint {
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
        let labels = Labels::new(&axes, None);
        let series = |p: &[Value]| labels.of(&[1], p);
        let colors = plot::color_slots(points.iter().map(|p| series(p)));
        let (_, placement) = placement(&axes[0], &[]);
        let all: Vec<usize> = (0..points.len()).collect();
        let figure = |metric| {
            lines_for(
                0,
                &axes,
                &all,
                &points,
                &stats,
                measure(metric),
                &placement,
                &series,
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
        let (_, placement) = placement(&axes[0], &[]);
        let colors = plot::color_slots([String::new()]);
        let lines = lines_for(
            0,
            &axes,
            &[0, 1, 2],
            &points,
            &stats,
            measure("slowest_total_ns"),
            &placement,
            &|_: &[Value]| String::new(),
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
        let names = ["random".to_owned(), "priority-buffer".to_owned()];
        let (label, policies) = placement(&axes[0], &names);
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
            &[0, 1],
            &points,
            &stats,
            measure("makespan_ns"),
            &policies,
            &|_: &[Value]| String::new(),
            &colors,
        );
        let xs: Vec<f64> = lines[0].points.iter().map(|p| p.x).collect();
        assert_eq!(xs, [0.0, 1.0]);
        // Numbers stay numbers, placed evenly only when they span orders of magnitude.
        let sizes = axis("device.vram_limit", &["100MiB", "200MiB"]);
        assert_eq!(placement(&sizes, &[]).1, Placement::Numbers);
        let chunks = axis("manager.chunk_size", &["128KiB", "1MiB", "128MiB"]);
        assert!(matches!(placement(&chunks, &[]).1, Placement::Evenly(_)));
        // Named settings get plots of their own only when nothing is numeric.
        assert_eq!(plotted_axes(&[axes[0].clone(), sizes.clone()]), [1]);
        assert_eq!(plotted_axes(&[axes[0].clone(), axes[0].clone()]), [0, 1]);
    }

    fn toml_values(text: &str) -> Vec<Value> {
        let table: toml::Table = toml::from_str(&format!("v = {text}")).unwrap();
        table["v"].as_array().unwrap().clone()
    }

    /// The shipped adaptive sweep's grid: 12 apps, 2 oversubscriptions, 7 managers.
    fn adaptive_axes() -> Vec<Axis> {
        let apps: Vec<String> = (0..12).map(|i| format!("app{i:02}")).collect();
        let managers: Vec<String> = (0..7)
            .map(|i| format!("{{ mode = \"uvm\", x = \"{i}\" }}"))
            .collect();
        vec![
            Axis {
                key: "tenant.app".into(),
                values: apps.iter().map(|a| Value::String(a.clone())).collect(),
            },
            Axis {
                key: "device.oversubscription".into(),
                values: toml_values("[1.25, 1.5]"),
            },
            Axis {
                key: "manager".into(),
                values: toml_values(&format!("[{}]", managers.join(", "))),
            },
        ]
    }

    /// 84 series in one figure once made clipped legends and repeated colours: past
    /// eight series the apps make panels, and no panel repeats a colour.
    #[test]
    fn many_series_become_small_multiples_with_distinct_colours() {
        let axes = adaptive_axes();
        let vs_oversubscription = Layout::new(1, &axes);
        assert_eq!(
            vs_oversubscription,
            Layout {
                panel_axes: vec![0],
                series: vec![2]
            }
        );
        let vs_manager = Layout::new(2, &axes);
        assert_eq!(
            (vs_manager.panel_axes, vs_manager.series),
            (vec![0], vec![1])
        );
        // Few series: one panel.
        let two = [axes[1].clone(), axes[2].clone()];
        assert!(Layout::new(0, &two).panel_axes.is_empty());

        let points = grid(&axes);
        let stats: Vec<PointStats> = points
            .iter()
            .map(|_| point(1, 0, 0, &[("makespan_ns", 1e9)]))
            .collect();
        let layout = vs_oversubscription;
        let panels = layout.panels(&points);
        assert_eq!(panels.len(), 12);
        let labels = Labels::new(&axes, None);
        let series = |p: &[Value]| labels.of(&layout.series, p);
        let colors = plot::color_slots(points.iter().map(|p| series(p)));
        let (_, placement) = placement(&axes[1], &labels.of_axis(1));
        for members in &panels {
            let lines = lines_for(
                1,
                &axes,
                members,
                &points,
                &stats,
                measure("makespan_ns"),
                &placement,
                &series,
                &colors,
            );
            assert_eq!(lines.len(), 7);
            assert!(lines.len() <= plot::MAX_SERIES);
            let mut slots: Vec<usize> = lines.iter().map(|l| l.color).collect();
            slots.sort_unstable();
            slots.dedup();
            assert_eq!(slots.len(), lines.len(), "a colour repeats in a panel");
        }
        assert_eq!(
            labels.of(&layout.panel_axes, &points[panels[3][0]]),
            "app=app03"
        );
        // Bounded: 12 panels, or a 39-category figure, are no wider than 1800 px.
        assert!(plot::chart_pixels(panels.len(), (1000, 600)).0 <= 1800);
        assert!(plot::chart_pixels(1, (3510, 700)).0 <= 1800);
    }

    /// Axis labels are not raw TOML: tables by the settings in which they differ, tenant
    /// lists by their apps, an axis `[sweep.normalize]` names by its names.
    #[test]
    fn values_are_labelled_readably() {
        let managers = toml_values(
            "[{ mode = \"uvm\" }, { mode = \"uvm\", eviction = \"tree\" }, \
             { mode = \"uvm\", migration = \"delayed\", eviction = \"tree\" }]",
        );
        assert_eq!(
            readable(&managers),
            [
                "mode=uvm",
                "eviction=tree",
                "eviction=tree migration=delayed"
            ]
        );
        let pairs = toml_values(
            "[[{ app = \"bfs\", size = \"medium\" }, { app = \"nn\" }], [{ app = \"hs3d\" }, { app = \"pagedos\" }]]",
        );
        assert_eq!(readable(&pairs), ["bfs+nn", "hs3d+pagedos"]);
        for label in readable(&managers).iter().chain(&readable(&pairs)) {
            assert!(!label.contains(['{', '"', '[']), "{label}");
        }
        let axes = [
            Axis {
                key: "tenant".into(),
                values: pairs,
            },
            Axis {
                key: "scheduler".into(),
                values: managers,
            },
        ];
        let names = ["mps".to_owned(), "pilot".to_owned(), "amfit".to_owned()];
        let labels = Labels::new(&axes, Some((1, &names)));
        let point = [axes[0].values[1].clone(), axes[1].values[2].clone()];
        assert_eq!(labels.of(&[0, 1], &point), "hs3d+pagedos scheduler=amfit");
        assert_eq!(labels.of_axis(1), names);
    }
}
