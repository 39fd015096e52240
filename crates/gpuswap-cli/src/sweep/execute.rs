//! Running a sweep: every point with every seed, in parallel, each run reduced to its
//! figures in the worker.

use gpuswap_sim::report::{Baselines, run_and_report_with};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use toml::Value;

use super::error::SweepError;
use super::figures::{Kind, RunFigures};
use super::keys::apply;
use super::plan::{Plan, text_without_sweep};
use crate::scenario;

/// One run of the sweep and what came out.
#[derive(Debug)]
pub struct Row {
    /// Index of the grid point.
    pub point: usize,
    /// Run number at the point.
    pub run: u32,
    /// Seed used.
    pub seed: u64,
    /// What the outputs need of the run's report, or why the run failed.
    pub result: Result<RunFigures, String>,
}

/// Runs per batch: a sweep runs whole points in batches of about this many runs, hands
/// each point's rows to the caller and forgets them, so its memory does not grow with
/// the number of runs.
const BATCH_RUNS: usize = 512;

impl Plan {
    /// Runs each of `points` (indices, ascending) `runs` times in parallel (`jobs`
    /// threads, default one per core) and hands each point's rows, in that order, to
    /// `on_point`.
    pub fn execute(
        &self,
        points: &[usize],
        jobs: Option<usize>,
        quiet: bool,
        mut on_point: impl FnMut(usize, Vec<Row>) -> Result<(), SweepError>,
    ) -> Result<(), SweepError> {
        let runs = self.runs as usize;
        let progress = if quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new((points.len() * runs) as u64)
        };
        progress.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} runs, {elapsed} elapsed, eta {eta}")
                .expect("valid template"),
        );
        let baselines = Baselines::default();
        let tenants = self.tenants();
        let pool = match jobs {
            Some(n) => Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n.max(1))
                    .build()
                    .map_err(|e| SweepError::BadInput(format!("--jobs: {e}")))?,
            ),
            None => None,
        };
        let points_per_batch = (BATCH_RUNS / runs.max(1)).max(1);
        for batch_points in points.chunks(points_per_batch) {
            let batch = || {
                batch_points
                    .iter()
                    .flat_map(|&p| (0..self.runs).map(move |r| (p, r)))
                    .collect::<Vec<_>>()
                    .into_par_iter()
                    .map(|(point, run)| {
                        let row = self.run_point(point, run, &baselines, &tenants);
                        progress.inc(1);
                        row
                    })
                    .collect::<Vec<Row>>()
            };
            let rows = match &pool {
                Some(pool) => pool.install(batch),
                None => batch(),
            };
            let mut rows = rows.into_iter().peekable();
            for &point in batch_points {
                let mut of_point = Vec::with_capacity(runs);
                while let Some(row) = rows.next_if(|r| r.point == point) {
                    of_point.push(row);
                }
                on_point(point, of_point)?;
            }
        }
        progress.finish_and_clear();
        Ok(())
    }

    /// Run `run` of point `index`, reduced to what the outputs need of its report.
    pub(super) fn run_point(
        &self,
        index: usize,
        run: u32,
        baselines: &Baselines,
        tenants: &[String],
    ) -> Row {
        let mut table = self.table.clone();
        for (axis, value) in self.axes.iter().zip(&self.points[index]) {
            apply(&mut table, &axis.key, value);
        }
        let seed = derive_seed(
            table.get("seed").and_then(Value::as_integer).unwrap_or(0) as u64,
            run,
        );
        let text = text_without_sweep(&table);
        if self.kind() == Kind::Vms {
            return Row {
                point: index,
                run,
                seed,
                result: self.run_vms(&text),
            };
        }
        let result = scenario::parse(&self.path, &text)
            .map_err(|e| e.to_string())
            .and_then(|mut s| {
                s.set_seed(seed);
                s.config.limits = self.limits;
                // A bug in one run must not take the others down: it becomes that row's error.
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_and_report_with(&s.name, seed, &s.config, baselines)
                }));
                match run {
                    Ok(Ok(report)) => Ok(RunFigures::of(&report, self.kind(), tenants)),
                    Ok(Err(e)) => Err(crate::limits::explain(&e, &self.path, seed)),
                    Err(_) => Err("internal error: the simulation panicked (please report)".into()),
                }
            });
        Row {
            point: index,
            run,
            seed,
            result,
        }
    }
}

impl Plan {
    /// One run of a VM scenario's point (the simulation has no random choices: every
    /// seed gives the same run).
    fn run_vms(&self, text: &str) -> Result<RunFigures, String> {
        let mut s = crate::vgpu_scenario::parse(&self.path, text).map_err(|e| e.to_string())?;
        crate::vgpu_scenario::apply_limits(&mut s.config, &self.limits);
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gpuswap_vgpu::engine::simulate(s.config)
        }));
        match run {
            Ok(Ok(outcome)) => Ok(RunFigures::of_vms(&outcome)),
            Ok(Err(e)) => Err(format!("{}: {e}", self.path.display())),
            Err(_) => Err("internal error: the simulation panicked (please report)".into()),
        }
    }
}

/// The seed of run `run` of a point whose scenario seed is `base`.
pub fn derive_seed(base: u64, run: u32) -> u64 {
    base.wrapping_add(u64::from(run))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_derived_from_the_scenario_seed() {
        assert_eq!(derive_seed(42, 0), 42);
        assert_eq!(derive_seed(42, 3), 45);
        assert_eq!(derive_seed(u64::MAX, 1), 0);
        let seeds: std::collections::BTreeSet<u64> = (0..10).map(|r| derive_seed(7, r)).collect();
        assert_eq!(seeds.len(), 10);
    }
}
