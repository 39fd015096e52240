//! Running a sweep: every point with every seed, in parallel, each run reduced to its
//! figures in the worker.

use std::sync::Mutex;

use gpuswap_sim::program::SharedProgram;
use gpuswap_sim::report::{Baselines, run_and_report_with};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use toml::Value;

use super::error::SweepError;
use super::figures::{Kind, RunFigures};
use super::keys::apply;
use super::plan::{Plan, text_without_sweep};
use crate::scenario;

/// A progress bar of `len` steps counted in `unit` ("runs", "seeds") on standard error,
/// with the time taken and left and a message (what runs now); hidden when `quiet` or
/// when standard error is not a terminal (a log file gets no bar).
pub fn progress_bar(len: u64, unit: &str, quiet: bool) -> ProgressBar {
    let progress = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(len)
    };
    progress.set_style(
        ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {unit}, {{elapsed}} elapsed, eta {{eta}} {{msg}}"
        ))
        .expect("valid template"),
    );
    progress
}

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
        let progress = progress_bar((points.len() * runs) as u64, "runs", quiet);
        let baselines = Baselines::default();
        let programs = Programs::default();
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
                // Each point's scenario is built once and shared by its seeds' runs.
                let prepared: Vec<Prepared> = batch_points
                    .par_iter()
                    .map(|&point| self.prepare(point, &programs))
                    .collect();
                prepared
                    .iter()
                    .flat_map(|p| (0..self.runs).map(move |r| (p, r)))
                    .collect::<Vec<_>>()
                    .into_par_iter()
                    .map(|(prepared, run)| {
                        let row = self.run_prepared(prepared, run, &baselines, &tenants);
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
        let prepared = self.prepare(index, &Programs::default());
        self.run_prepared(&prepared, run, baselines, tenants)
    }

    /// Point `index`'s scenario with the sweep's limits, built for its runs to share,
    /// its tenants' programs taken from `programs` where an equal one is there.
    fn prepare(&self, index: usize, programs: &Programs) -> Prepared {
        let table = self.point_table(index);
        let base_seed = table.get("seed").and_then(Value::as_integer).unwrap_or(0) as u64;
        let text = text_without_sweep(&table);
        let scenario = if self.kind() == Kind::Vms {
            Built::Vms(text)
        } else {
            Built::Sim(
                scenario::parse(&self.path, &text)
                    .map(|mut s| {
                        s.config.limits = self.limits;
                        for tenant in &mut s.config.tenants {
                            tenant.program = programs.intern(&tenant.program);
                        }
                        Box::new(s)
                    })
                    .map_err(|e| e.to_string()),
            )
        };
        Prepared {
            index,
            base_seed,
            scenario,
        }
    }

    /// Run `run` of a prepared point, reduced to what the outputs need of its report.
    fn run_prepared(
        &self,
        prepared: &Prepared,
        run: u32,
        baselines: &Baselines,
        tenants: &[String],
    ) -> Row {
        let seed = derive_seed(prepared.base_seed, run);
        let result = match &prepared.scenario {
            Built::Vms(text) => self.run_vms(text),
            Built::Sim(parsed) => parsed.clone().and_then(|mut s| {
                s.set_seed(seed);
                // A bug in one run must not take the others down: it becomes that row's error.
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_and_report_with(&s.name, seed, &s.config, baselines)
                }));
                match run {
                    Ok(Ok(report)) => Ok(RunFigures::of(&report, self.kind(), tenants)),
                    Ok(Err(e)) => Err(crate::limits::explain(&e, &self.path, seed)),
                    Err(_) => Err("internal error: the simulation panicked (please report)".into()),
                }
            }),
        };
        Row {
            point: prepared.index,
            run,
            seed,
            result,
        }
    }
}

/// A point of the sweep, built once for all its runs.
struct Prepared {
    /// Index of the grid point.
    index: usize,
    /// The point's scenario seed, from which each run's is derived.
    base_seed: u64,
    scenario: Built,
}

/// The distinct programs of a sweep's points so far. Points that differ in settings
/// other than their tenants' build equal programs; taking the first of them for all
/// makes a solo baseline's lookup (which compares programs) a pointer comparison, once
/// per point here instead of once per run there.
#[derive(Default)]
struct Programs(Mutex<Vec<SharedProgram>>);

impl Programs {
    /// The program equal to `program` seen first.
    fn intern(&self, program: &SharedProgram) -> SharedProgram {
        let mut seen = self.0.lock().expect("no panics while locked");
        if let Some(known) = seen.iter().find(|p| *p == program) {
            return known.clone();
        }
        seen.push(program.clone());
        program.clone()
    }
}

/// What a point's runs start from.
enum Built {
    /// A VM scenario's text (its runs parse it: the VM simulation takes its
    /// configuration by value).
    Vms(String),
    /// A simulator scenario, or why it does not build (every run's error).
    Sim(Result<Box<scenario::Scenario>, String>),
}

impl Plan {
    /// The scenario of point `index`: the base with the point's values set.
    fn point_table(&self, index: usize) -> toml::Table {
        let mut table = self.table.clone();
        for (axis, value) in self.axes.iter().zip(&self.points[index]) {
            apply(&mut table, &axis.key, value);
        }
        table
    }

    /// Builds and checks every point's scenario, in parallel, before any run: a value
    /// that is wrong for its key, or wrong beside another point's value (a policy the
    /// mode does not take), stops the sweep here rather than failing its runs. The
    /// error names the first such point, its settings and what is wrong.
    pub fn check_points(&self) -> Result<(), SweepError> {
        let bad = (0..self.points.len())
            .into_par_iter()
            .find_map_first(|index| {
                let text = text_without_sweep(&self.point_table(index));
                let checked = if self.kind() == Kind::Vms {
                    crate::vgpu_scenario::parse(&self.path, &text).map(drop)
                } else {
                    scenario::parse(&self.path, &text).map(drop)
                };
                checked.err().map(|e| (index, e))
            });
        let Some((index, e)) = bad else {
            return Ok(());
        };
        let settings: Vec<String> = self
            .axes
            .iter()
            .zip(&self.points[index])
            .map(|(axis, value)| format!("{} = {value}", axis.key))
            .collect();
        Err(SweepError::BadInput(format!(
            "{}: point {index} ({}): {}; expected values that make a valid scenario at every point (each is checked before the first run)",
            self.path.display(),
            settings.join(", "),
            without_lines(&e)
        )))
    }

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

/// What is wrong with a scenario built from a file's (a sweep's point, a compared
/// manager), without the line numbers: they count lines of the text as built, not of
/// the file.
pub fn without_lines(e: &scenario::ScenarioError) -> String {
    match e {
        scenario::ScenarioError::Value { key, message, .. } => format!("{key}: {message}"),
        // The parser's last line says what is wrong; the lines above quote the built text.
        scenario::ScenarioError::Syntax { message, .. }
        | scenario::ScenarioError::Read { message, .. } => {
            message.lines().last().unwrap_or_default().to_owned()
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
