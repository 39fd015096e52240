//! A sweep's statistics per grid point, taken from results.csv's records, and what is
//! made of them: summary.csv, normalized.csv, the plots and the line a sweep, a shard or
//! a merge ends with. Reading the records as written (rather than the runs' figures) is
//! what lets `gpuswap merge` write the same bytes from shards' results.csv files as the
//! sweep wrote in one go.

use std::collections::BTreeMap;
use std::path::Path;

use super::axis::value_text;
use super::error::SweepError;
use super::figures::Kind;
use super::plan::Plan;
use super::plots;
use super::records::{PointRecords, TENANTS_FAILED, error_column, write_csv};
use super::stats::{PointStats, Stats};

/// The statistics of the points so far, for summary.csv and the plots, and the sweep's
/// counts of runs.
pub(super) struct Summary<'a> {
    plan: &'a Plan,
    /// summary.csv's records, a point each.
    records: Vec<Vec<String>>,
    stats: Vec<PointStats>,
    /// Runs so far.
    pub(super) runs: usize,
    /// Runs that failed.
    pub(super) failed: usize,
    /// Runs that completed with a tenant that failed.
    pub(super) tenant_failed: usize,
}

impl<'a> Summary<'a> {
    /// An empty summary of `plan`'s sweep.
    pub(super) fn new(plan: &'a Plan) -> Self {
        Self {
            plan,
            records: Vec::with_capacity(plan.points.len()),
            stats: Vec::with_capacity(plan.points.len()),
            runs: 0,
            failed: 0,
            tenant_failed: 0,
        }
    }

    /// Adds a point (points come in order); the error names the run's cell that is not a
    /// number.
    pub(super) fn add(&mut self, point: &PointRecords) -> Result<(), String> {
        let kind = self.plan.kind();
        let metrics = kind.metrics();
        let error = error_column(&self.plan.axes);
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); metrics.len()];
        let (mut failed, mut tenant_failed, mut tenants_failed) = (0, 0, 0);
        for (run, record) in point.results.iter().enumerate() {
            let Some(values) = run_metrics(kind, record, error)
                .map_err(|e| format!("point {}, run {}: {e}", point.point, run + 1))?
            else {
                failed += 1;
                continue;
            };
            // Runs that completed with a tenant that failed (out of memory, gdev refusals).
            let failed_here = tenants_failed_cell(record)
                .map_err(|e| format!("point {}, run {}: {e}", point.point, run + 1))?;
            tenant_failed += usize::from(failed_here > 0);
            tenants_failed += failed_here;
            for (sample, value) in samples.iter_mut().zip(values) {
                sample.extend(value);
            }
        }
        let stats: BTreeMap<&'static str, Stats> = metrics
            .iter()
            .zip(&samples)
            .filter_map(|(m, xs)| Stats::of(xs).map(|s| (*m, s)))
            .collect();
        let runs = point.results.len();
        let mut cells = vec![point.point.to_string()];
        cells.extend(self.plan.points[point.point].iter().map(value_text));
        cells.extend([runs, failed, tenant_failed].map(|n| n.to_string()));
        for m in metrics {
            match stats.get(m) {
                Some(s) => cells.extend([s.mean, s.std, s.min, s.max].map(|v| format!("{v}"))),
                None => cells.extend(std::iter::repeat_n(String::new(), 4)),
            }
        }
        cells.push(tenants_failed.to_string());
        self.records.push(cells);
        self.stats.push(PointStats {
            runs,
            failed,
            tenant_failed,
            metrics: stats,
        });
        self.runs += runs;
        self.failed += failed;
        self.tenant_failed += tenant_failed;
        Ok(())
    }

    /// Writes summary.csv, normalized.csv when the sweep asks for it, and the plots (PNG
    /// too with `png`) into `out`.
    pub(super) fn write(&self, out: &Path, png: bool) -> Result<(), SweepError> {
        let plan = self.plan;
        let mut header: Vec<String> = vec!["point".into()];
        header.extend(plan.axes.iter().map(|a| a.key.clone()));
        header.extend(["runs", "failed", "tenant_failed"].map(String::from));
        for m in plan.kind().metrics() {
            header.extend(["mean", "std", "min", "max"].map(|s| format!("{m}.{s}")));
        }
        header.push(TENANTS_FAILED.into());
        write_csv(&out.join("summary.csv"), &header, &self.records)?;
        if let Some(n) = &plan.normalize {
            n.write(out, &plan.axes, &plan.points, &self.stats, png)?;
        }
        plots::write_plots(
            out,
            plan.kind(),
            &plan.axes,
            &plan.points,
            &self.stats,
            &plan.apps(),
            plan.normalize.as_ref().map(|n| n.value_names()),
            png,
        )
    }
}

/// How big a sweep, or a shard holding `held` of its points, is: "6 grid points x 2
/// seeds", "2 of 6 grid points x 2 seeds".
pub(super) fn grid(plan: &Plan, held: usize) -> String {
    let total = plan.points.len();
    let points = if held == total {
        total.to_string()
    } else {
        format!("{held} of {total}")
    };
    format!("{points} grid points x {} seeds", plan.runs)
}

/// Prints the line a sweep, a shard or a merge ends with: `what` ran (empty for a
/// sweep), its runs over `held` points, how they ended and where the files are.
pub(super) fn report(
    what: &str,
    plan: &Plan,
    held: usize,
    summary: &Summary,
    out: &Path,
) -> Result<(), SweepError> {
    crate::stdout::write(&format!(
        "{what}{} runs ({}): {} failed, {} more ended with a failed tenant; wrote {}\n",
        summary.runs,
        grid(plan, held),
        summary.failed,
        summary.tenant_failed,
        out.display()
    ))
    .map_err(SweepError::Output)
}

/// A sweep (or a merge) whose runs failed ends with an error saying how many and where
/// their errors are, after its files are written; with `fail_on_error`, runs that ended
/// with a failed tenant count too.
pub(super) fn check_failures(
    summary: &Summary,
    out: &Path,
    fail_on_error: bool,
) -> Result<(), SweepError> {
    let results = out.join("results.csv");
    if summary.failed > 0 {
        return Err(SweepError::Failures(format!(
            "{} of {} runs failed; their errors are in the error column of {}",
            summary.failed,
            summary.runs,
            results.display()
        )));
    }
    if fail_on_error && summary.tenant_failed > 0 {
        return Err(SweepError::Failures(format!(
            "{} of {} runs ended with a failed tenant (--fail-on-error); the tenants' errors are in the TENANT.error columns of {}",
            summary.tenant_failed,
            summary.runs,
            results.display()
        )));
    }
    Ok(())
}

/// A run's summary metrics as results.csv `record` holds them (in [`Kind::metrics`]'
/// order, after the `error` column); None for a run that failed.
fn run_metrics(
    kind: Kind,
    record: &[String],
    error: usize,
) -> Result<Option<Vec<Option<f64>>>, String> {
    if !record[error].is_empty() {
        return Ok(None);
    }
    // Cells are written with `{}`, the shortest text that reads back as the same f64
    // (a merge refuses a shard's cell that is not finite before it gets here).
    kind.metrics()
        .iter()
        .zip(&record[error + 1..])
        .map(|(metric, cell)| match cell.as_str() {
            "" => Ok(None),
            text => text
                .parse()
                .map(Some)
                .map_err(|_| format!("{metric}: {text:?} is not a number")),
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// The tenants that failed in a completed run: its record's last cell.
fn tenants_failed_cell(record: &[String]) -> Result<usize, String> {
    let cell = record.last().map_or("", String::as_str);
    cell.parse()
        .map_err(|_| format!("{TENANTS_FAILED}: {cell:?} is not a whole number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_read_back_from_their_cells_exactly() {
        let kind = Kind::Vms;
        let values = [0.1 + 0.2, 1e-300, 123_456_789.123, f64::MAX, -0.0, 7.0];
        let mut record = vec![String::new()];
        record.extend(values.iter().map(|v| format!("{v}")));
        record.resize(1 + kind.metrics().len(), String::new());
        let read = run_metrics(kind, &record, 0).unwrap().unwrap();
        for (v, r) in values.iter().zip(&read) {
            assert_eq!(v.to_bits(), r.unwrap().to_bits());
        }
        assert_eq!(read[values.len()], None);
        record[0] = "it failed".into();
        assert_eq!(run_metrics(kind, &record, 0), Ok(None));
        record[0].clear();
        record[2] = "two".into();
        let e = run_metrics(kind, &record, 0).unwrap_err();
        assert_eq!(e, "entries_copied: \"two\" is not a number");
    }
}
