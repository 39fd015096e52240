//! A sweep's plots: runtime, makespan and eviction latency against each numeric setting,
//! a line per combination of the other settings.

use std::collections::BTreeMap;
use std::path::Path;

use gpuswap_sim::units::{parse_bytes, parse_ns};
use toml::Value;

use super::SweepError;
use super::output::{Stats, value_text};
use super::plan::Axis;
use crate::plot::{self, Line, LinePoint};

/// Writes the plots of a sweep from its per-point statistics.
pub(super) fn write_plots(
    out: &Path,
    axes: &[Axis],
    points: &[Vec<Value>],
    stats: &[BTreeMap<&'static str, Stats>],
    png: bool,
) -> Result<(), SweepError> {
    // Plots per numeric setting, with a line per combination of the others (policies,
    // modes); a categorical setting gets its own plots only when nothing is numeric.
    let numeric: Vec<usize> = (0..axes.len())
        .filter(|k| axis_label(&axes[*k]).2)
        .collect();
    let plotted = if numeric.is_empty() {
        (0..axes.len().min(1)).collect()
    } else {
        numeric
    };
    for k in plotted {
        let axis = &axes[k];
        let (label, categories, _) = axis_label(axis);
        let name = axis.key.replace(['.', '[', ']'], "_");
        for (metric, scale, stem, title, y_label) in [
            (
                "slowest_phase_ns",
                1e9,
                "runtime",
                "slowest tenant's runtime",
                "runtime of the slowest tenant (s)",
            ),
            // The slowest phase can shrink when an eviction serializes the tenants (one
            // runs its phase alone); the makespan shows the whole picture.
            ("makespan_ns", 1e9, "makespan", "makespan", "makespan (s)"),
            (
                "eviction_mean_ns",
                1e6,
                "eviction-latency",
                "eviction latency",
                "mean latency of evicting allocations (ms)",
            ),
        ] {
            let lines = lines_for(k, axes, points, stats, metric, scale);
            if lines.iter().all(|l| l.points.is_empty()) {
                continue;
            }
            let file = out.join(format!("{stem}-vs-{name}"));
            let title = format!("{title} vs {}", axis.key);
            plot::save(
                &file,
                (900, 560),
                png,
                &plot::LineChart {
                    title: &title,
                    x_label: &label,
                    y_label,
                    lines: &lines,
                    categories: categories.as_deref(),
                },
            )
            .map_err(SweepError::Output)?;
        }
    }
    Ok(())
}

/// How an axis's values sit on a plot's x axis: its label, the names of positions 0, 1,
/// ... when values are placed evenly (categories, or numbers spanning more than a factor
/// of 64, such as chunk sizes from 128 KiB to 128 MiB), and whether the values are
/// numbers.
fn axis_label(axis: &Axis) -> (String, Option<Vec<String>>, bool) {
    let texts: Vec<String> = axis.values.iter().map(value_text).collect();
    let (label, numbers): (String, Option<Vec<f64>>) =
        if texts.iter().all(|t| parse_bytes(t).is_ok()) {
            (
                format!("{} (MiB)", axis.key),
                Some(
                    texts
                        .iter()
                        .map(|t| parse_bytes(t).unwrap_or(0) as f64 / 1048576.0)
                        .collect(),
                ),
            )
        } else if texts.iter().all(|t| parse_ns(t).is_ok()) {
            (
                format!("{} (ms)", axis.key),
                Some(
                    texts
                        .iter()
                        .map(|t| parse_ns(t).unwrap_or(0) as f64 / 1e6)
                        .collect(),
                ),
            )
        } else if axis.values.iter().all(Value::is_integer) {
            (
                axis.key.clone(),
                Some(
                    axis.values
                        .iter()
                        .map(|v| v.as_integer().unwrap_or(0) as f64)
                        .collect(),
                ),
            )
        } else {
            (axis.key.clone(), None)
        };
    match numbers {
        None => (label, Some(texts), false),
        Some(xs) => {
            let (min, max) = xs
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(*x), b.max(*x)));
            let spread = min > 0.0 && max / min >= 64.0;
            (label, spread.then_some(texts), true)
        }
    }
}

fn x_of(value: &Value, index: usize, categorical: bool) -> f64 {
    if categorical {
        return index as f64;
    }
    let text = value_text(value);
    if let Ok(bytes) = parse_bytes(&text) {
        bytes as f64 / (1u64 << 20) as f64
    } else if let Ok(ns) = parse_ns(&text) {
        ns as f64 / 1e6
    } else {
        value.as_integer().unwrap_or(0) as f64
    }
}

/// One line per combination of the other axes' values: mean, std and best of `metric`
/// divided by `scale`.
fn lines_for(
    k: usize,
    axes: &[Axis],
    points: &[Vec<Value>],
    stats: &[BTreeMap<&str, Stats>],
    metric: &str,
    scale: f64,
) -> Vec<Line> {
    let categorical = axis_label(&axes[k]).1.is_some();
    let mut lines: BTreeMap<String, Vec<LinePoint>> = BTreeMap::new();
    for (p, point) in points.iter().enumerate() {
        let label: Vec<String> = point
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
            .collect();
        let index = axes[k]
            .values
            .iter()
            .position(|v| *v == point[k])
            .unwrap_or(0);
        if let Some(s) = stats[p].get(metric) {
            lines.entry(label.join(" ")).or_default().push(LinePoint {
                x: x_of(&point[k], index, categorical),
                mean: s.mean / scale,
                std: s.std / scale,
                best: s.min / scale,
            });
        }
    }
    lines
        .into_iter()
        .map(|(label, mut points)| {
            points.sort_by(|a, b| a.x.total_cmp(&b.x));
            Line { label, points }
        })
        .collect()
}
