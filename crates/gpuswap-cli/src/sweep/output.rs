//! A sweep's tables: results.csv (a row per run), summary.csv (statistics per point),
//! then the plots.

use std::collections::BTreeMap;
use std::path::Path;

use toml::Value;

use super::execute::Row;
use super::figures::{Kind, TENANT_COLUMNS, TimelineRow};
use super::plan::Axis;
use super::{SweepError, plots};

/// A setting's value as tables and plot labels write it: strings bare, whole tables as
/// `key=value` pairs.
pub(super) fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Table(t) => t
            .iter()
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// The columns of results.csv: the point, its settings, the run, the summary metrics and
/// each tenant's columns.
fn results_header(kind: Kind, axes: &[Axis], tenants: &[String]) -> Vec<String> {
    let mut header: Vec<String> = vec!["point".into()];
    header.extend(axes.iter().map(|a| a.key.clone()));
    header.extend(["run", "seed", "error"].map(String::from));
    header.extend(kind.metrics().iter().map(|m| (*m).to_owned()));
    for t in tenants {
        header.extend(TENANT_COLUMNS.iter().map(|(c, _)| format!("{t}.{c}")));
        header.push(format!("{t}.error"));
    }
    header
}

/// A row of results.csv; a failed run has only its error, padded to `columns`.
fn results_record(row: &Row, point: &[Value], columns: usize) -> Vec<String> {
    let mut cells = vec![row.point.to_string()];
    cells.extend(point.iter().map(value_text));
    cells.extend([row.run.to_string(), row.seed.to_string()]);
    match &row.result {
        Ok(figures) => {
            cells.push(String::new());
            cells.extend(
                figures
                    .metrics
                    .iter()
                    .map(|v| v.map_or(String::new(), |v| format!("{v}"))),
            );
            for t in &figures.tenants {
                match t {
                    Some(t) => cells.extend(t.cells()),
                    None => cells.extend(vec![String::new(); TENANT_COLUMNS.len() + 1]),
                }
            }
        }
        Err(e) => {
            cells.push(e.clone());
            cells.resize(columns, String::new());
        }
    }
    cells
}

/// A sweep's outputs written as points complete: results.csv row by row, one summary
/// record and the statistics per point kept for summary.csv and the plots at the end.
/// Nothing per run outlives its point.
pub(super) struct Outputs<'a> {
    out: &'a Path,
    kind: Kind,
    axes: &'a [Axis],
    points: &'a [Vec<Value>],
    results: csv::Writer<std::fs::File>,
    /// patterns.csv, for sweeps in a mode that pages.
    patterns: Option<csv::Writer<std::fs::File>>,
    columns: usize,
    summary: Vec<Vec<String>>,
    stats: Vec<PointStats>,
    /// Runs written so far.
    pub(super) runs: usize,
    /// Runs that failed.
    pub(super) failed: usize,
    /// Runs that completed with a tenant that failed.
    pub(super) tenant_failed: usize,
}

fn io_error(what: &Path, e: &dyn std::fmt::Display) -> SweepError {
    SweepError::Output(format!("{}: {e}", what.display()))
}

impl<'a> Outputs<'a> {
    /// Creates `out` and results.csv with its header.
    pub(super) fn create(
        out: &'a Path,
        kind: Kind,
        axes: &'a [Axis],
        points: &'a [Vec<Value>],
        tenants: &[String],
    ) -> Result<Self, SweepError> {
        std::fs::create_dir_all(out).map_err(|e| io_error(out, &e))?;
        let path = out.join("results.csv");
        let mut results = csv::Writer::from_path(&path).map_err(|e| io_error(&path, &e))?;
        let header = results_header(kind, axes, tenants);
        results
            .write_record(&header)
            .map_err(|e| io_error(&path, &e))?;
        let patterns = if kind == Kind::PagedTenants {
            let path = out.join("patterns.csv");
            let mut w = csv::Writer::from_path(&path).map_err(|e| io_error(&path, &e))?;
            let mut header: Vec<&str> = vec!["point"];
            header.extend(axes.iter().map(|a| a.key.as_str()));
            header.extend(TimelineRow::COLUMNS);
            w.write_record(&header).map_err(|e| io_error(&path, &e))?;
            Some(w)
        } else {
            None
        };
        Ok(Self {
            out,
            kind,
            axes,
            points,
            results,
            patterns,
            columns: header.len(),
            summary: Vec::with_capacity(points.len()),
            stats: Vec::with_capacity(points.len()),
            runs: 0,
            failed: 0,
            tenant_failed: 0,
        })
    }

    /// Writes the rows of point `p` (points come in order) and keeps its statistics.
    pub(super) fn point(&mut self, p: usize, rows: &[Row]) -> Result<(), SweepError> {
        let path = self.out.join("results.csv");
        for row in rows {
            self.results
                .write_record(results_record(row, &self.points[p], self.columns))
                .map_err(|e| io_error(&path, &e))?;
        }
        // On disk at once: a sweep killed later keeps every finished point's rows.
        self.results.flush().map_err(|e| io_error(&path, &e))?;
        if let Some(w) = self.patterns.as_mut() {
            let path = self.out.join("patterns.csv");
            for row in rows {
                for t in row.result.iter().flat_map(|f| &f.timeline) {
                    let mut cells = vec![row.point.to_string()];
                    cells.extend(self.points[p].iter().map(value_text));
                    cells.push(row.run.to_string());
                    cells.extend(t.cells());
                    w.write_record(&cells).map_err(|e| io_error(&path, &e))?;
                }
            }
            w.flush().map_err(|e| io_error(&path, &e))?;
        }
        let metrics = metric_stats(self.kind, rows);
        let failed = rows.iter().filter(|r| r.result.is_err()).count();
        let mut cells = vec![p.to_string()];
        cells.extend(self.points[p].iter().map(value_text));
        cells.push(rows.len().to_string());
        cells.push(failed.to_string());
        // Runs that completed with a tenant that failed (out of memory, gdev refusals).
        let tenant_failed = rows
            .iter()
            .filter_map(|r| r.result.as_ref().ok())
            .filter(|f| f.tenant_failed)
            .count();
        cells.push(tenant_failed.to_string());
        for m in self.kind.metrics() {
            match metrics.get(m) {
                Some(s) => cells.extend([s.mean, s.std, s.min, s.max].map(|v| format!("{v}"))),
                None => cells.extend(std::iter::repeat_n(String::new(), 4)),
            }
        }
        self.summary.push(cells);
        self.stats.push(PointStats {
            runs: rows.len(),
            failed,
            tenant_failed,
            metrics,
        });
        self.runs += rows.len();
        self.failed += failed;
        self.tenant_failed += tenant_failed;
        Ok(())
    }

    /// Finishes results.csv and writes summary.csv and the plots; `apps` names the
    /// tenants' apps in the plots' titles.
    pub(super) fn finish(
        mut self,
        apps: &str,
        png: bool,
        normalize: Option<&super::normalize::Normalize>,
    ) -> Result<(), SweepError> {
        let path = self.out.join("results.csv");
        self.results.flush().map_err(|e| io_error(&path, &e))?;
        let path = self.out.join("summary.csv");
        let mut w = csv::Writer::from_path(&path).map_err(|e| io_error(&path, &e))?;
        let mut header: Vec<String> = vec!["point".into()];
        header.extend(self.axes.iter().map(|a| a.key.clone()));
        header.extend(["runs", "failed", "tenant_failed"].map(String::from));
        for m in self.kind.metrics() {
            header.extend(["mean", "std", "min", "max"].map(|s| format!("{m}.{s}")));
        }
        w.write_record(&header).map_err(|e| io_error(&path, &e))?;
        for cells in &self.summary {
            w.write_record(cells).map_err(|e| io_error(&path, &e))?;
        }
        w.flush().map_err(|e| io_error(&path, &e))?;
        if let Some(n) = normalize {
            n.write(self.out, self.axes, self.points, &self.stats, png)?;
        }
        plots::write_plots(
            self.out,
            self.kind,
            self.axes,
            self.points,
            &self.stats,
            apps,
            png,
        )
    }
}

/// What the plots need of a grid point: how its runs ended and the statistics of each
/// summary metric over the runs that gave it a value.
#[derive(Debug)]
pub(super) struct PointStats {
    /// Runs at the point.
    pub(super) runs: usize,
    /// Runs that failed (no report).
    pub(super) failed: usize,
    /// Runs that completed with a tenant that failed.
    pub(super) tenant_failed: usize,
    /// Statistics per summary metric; a metric no run gave a value is absent.
    pub(super) metrics: BTreeMap<&'static str, Stats>,
}

/// Mean, standard deviation, minimum and maximum of a metric at a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (0 for one sample).
    pub std: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Stats {
    /// Statistics of a non-empty sample.
    pub fn of(xs: &[f64]) -> Option<Self> {
        if xs.is_empty() {
            return None;
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = if xs.len() > 1 {
            xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Some(Self {
            mean,
            std: var.sqrt(),
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// The statistics of each summary metric over the rows of one point.
fn metric_stats(kind: Kind, rows: &[Row]) -> BTreeMap<&'static str, Stats> {
    kind.metrics()
        .iter()
        .filter_map(|m| {
            let xs: Vec<f64> = rows
                .iter()
                .filter_map(|r| r.result.as_ref().ok().and_then(|f| f.metric(m)))
                .collect();
            Stats::of(&xs).map(|s| (*m, s))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use gpuswap_sim::report::{Baselines, Report, run_and_report_with};

    use super::*;
    use crate::scenario;
    use crate::sweep::Plan;
    use crate::sweep::figures::{eviction_mean_ns, slowest_phase_ns};

    /// Two nn tenants; 20 MiB makes them evict, 9 GiB is more than the GTX 480 has.
    const TWO_NN: &str = "seed = 5\n[device]\npreset = \"gtx480\"\n[manager]\nmode = \"gpuswap\"\n\
        [[tenant]]\nname = \"a\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n\
        [[tenant]]\nname = \"b\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n";

    /// What a results.csv column holds, read from the full report (as JSON) rather than
    /// through the sweep's own column table; None for the columns the row itself sets.
    fn from_report(report: &Report, column: &str) -> Option<f64> {
        let json = serde_json::to_value(report).unwrap();
        let number = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("{column}: {v}"));
        if ["point", "device.vram_limit", "run", "seed", "error"].contains(&column) {
            return None;
        }
        if let Some((tenant, field)) = column.split_once('.') {
            let t = json["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == tenant)
                .unwrap();
            let (summary, stat) = match field {
                "alloc_p50_ns" => ("alloc_latency_ns", "p50"),
                "alloc_p99_ns" => ("alloc_latency_ns", "p99"),
                "eviction_p50_ns" => ("eviction_latency_ns", "p50"),
                "eviction_max_ns" => ("eviction_latency_ns", "max"),
                "error" => {
                    assert!(t["error"].is_null());
                    return None;
                }
                field => return Some(number(&t[field])),
            };
            return Some(number(&t[summary][stat]));
        }
        Some(match column {
            "slowest_phase_ns" => slowest_phase_ns(report).unwrap() as f64,
            "eviction_mean_ns" => eviction_mean_ns(report).unwrap(),
            "slowest_total_ns" => json["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| number(&t["total_ns"]))
                .fold(0.0, f64::max),
            system => number(&json["system"][system]),
        })
    }

    #[test]
    fn rows_carry_exactly_the_results_columns() {
        let path = Path::new("two-nn.toml");
        let vary = ["device.vram_limit=20MiB,9GiB".to_owned()];
        let plan = Plan::new(path, TWO_NN, &vary, Some(1)).unwrap();
        let mut rows = Vec::new();
        plan.execute(Some(1), true, |_, point_rows| {
            rows.extend(point_rows);
            Ok(())
        })
        .unwrap();
        assert_eq!(rows.len(), 2);
        let header = results_header(plan.kind(), &plan.axes, &plan.tenants());

        let mut s = scenario::parse(
            path,
            &TWO_NN.replace("gtx480\"", "gtx480\"\nvram_limit = \"20MiB\""),
        )
        .unwrap();
        s.set_seed(rows[0].seed);
        let report =
            run_and_report_with(&s.name, s.seed, &s.config, &Baselines::default()).unwrap();
        assert!(
            report.tenants.iter().any(|t| t.bytes_evicted > 0),
            "no evictions to check"
        );
        let record = results_record(&rows[0], &plan.points[0], header.len());
        assert_eq!(record.len(), header.len());
        for (column, cell) in header.iter().zip(&record) {
            let Some(want) = from_report(&report, column) else {
                continue;
            };
            let got: f64 = cell
                .parse()
                .unwrap_or_else(|_| panic!("{column}: {cell:?}"));
            // Slowdowns are written with six decimals.
            assert!(
                (got - want).abs() <= 5e-7 * want.abs().max(1.0),
                "{column}: {got} != {want}"
            );
        }
        assert_eq!(rows[0].result.as_ref().unwrap().events, report.events);

        let failed = results_record(&rows[1], &plan.points[1], header.len());
        assert_eq!(failed.len(), header.len());
        assert!(failed[header.iter().position(|h| h == "error").unwrap()].contains("vram_limit"));
    }

    #[test]
    fn stats_of_a_sample() {
        let s = Stats::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!((s.mean, s.min, s.max), (2.5, 1.0, 4.0));
        assert!((s.std - 1.290_994).abs() < 1e-6);
        assert_eq!(Stats::of(&[5.0]).unwrap().std, 0.0);
        assert_eq!(Stats::of(&[]), None);
    }
}
