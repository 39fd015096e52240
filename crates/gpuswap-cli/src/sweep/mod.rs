//! Sweeps: one scenario run across a grid of settings, several seeds per grid point, in
//! parallel; results as CSV tables and plots.
//!
//! The grid comes from the scenario's `[sweep]` table and from `--vary`:
//!
//! ```toml
//! [sweep]
//! runs = 10                                   # seeds per grid point
//! [sweep.vary]
//! "device.vram_limit" = "20MiB..500MiB step 20MiB"
//! "manager.chunk_policy" = ["random", "priority-buffer"]
//! ```
//!
//! A key is a dotted path into the scenario (`seed`, `device.preset`, `manager.mode`,
//! `tenant.repeat` for every tenant, `tenant[1].start` for one), a whole table
//! (`manager = [{ mode = "gpuswap", chunk_policy = "random" }, { mode = "gdev" }]`), or
//! keys joined by `+` that take the same value (`"tenant[0].app+tenant[1].app"`). Run
//! `r` of a point uses seed `scenario seed + r`.

mod execute;
mod figures;
mod keys;
mod output;
mod plan;
mod plots;

use std::path::{Path, PathBuf};

use thiserror::Error;

pub use plan::Plan;

/// What went wrong with a sweep as a whole (single failed runs are rows, not errors,
/// unless `--fail-on-error` asks for them to count).
#[derive(Debug, Error)]
pub enum SweepError {
    /// The scenario, a `--vary` flag or the `[sweep]` table is wrong.
    #[error("{0}")]
    BadInput(String),
    /// Results could not be written.
    #[error("{0}")]
    Output(String),
    /// `--fail-on-error`: runs failed or ended with a failed tenant (the results are
    /// written all the same).
    #[error("{0} runs failed or ended with a failed tenant (--fail-on-error)")]
    Failures(usize),
}

/// Settings of a sweep from the command line.
#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// The scenario (TOML), optionally with a `[sweep]` table.
    pub scenario: PathBuf,
    /// Vary a scenario key: KEY=V1,V2,... or KEY=FROM..TO step STEP (repeatable).
    #[arg(long = "vary", value_name = "KEY=VALUES")]
    pub vary: Vec<String>,
    /// Runs (seeds) per grid point; overrides `[sweep]` runs.
    #[arg(long)]
    pub runs: Option<u32>,
    /// Output folder (default: results/SCENARIO-NAME).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write PNG plots.
    #[arg(long)]
    pub png: bool,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Write into an output folder that holds an earlier sweep's files, replacing them.
    #[arg(long)]
    pub force: bool,
    /// Exit with status 1 when a run failed or ended with a failed tenant.
    #[arg(long)]
    pub fail_on_error: bool,
    /// Bounds of every run.
    #[command(flatten)]
    pub limits: crate::limits::LimitArgs,
}

/// Runs a sweep and writes its results.
pub fn run(args: &SweepArgs) -> Result<(), SweepError> {
    let text = crate::text::read_text(&args.scenario)
        .map_err(|e| SweepError::BadInput(format!("{}: {e}", args.scenario.display())))?;
    let mut plan = Plan::new(&args.scenario, &text, &args.vary, args.runs)?;
    plan.limits = args.limits.limits();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("results").join(&plan.base.name));
    prepare_out(&out, args.force)?;
    let tenants = plan.tenants();
    let mut outputs = output::Outputs::create(&out, &plan.axes, &plan.points, &tenants)?;
    plan.execute(args.jobs, args.quiet, |point, rows| {
        outputs.point(point, &rows)
    })?;
    let (runs, failed, tenant_failed) = (outputs.runs, outputs.failed, outputs.tenant_failed);
    outputs.finish(args.png)?;
    println!(
        "{runs} runs ({} grid points x {} seeds): {failed} failed, {tenant_failed} more ended with a failed tenant; wrote {}",
        plan.points.len(),
        plan.runs,
        out.display()
    );
    if args.fail_on_error && failed + tenant_failed > 0 {
        return Err(SweepError::Failures(failed + tenant_failed));
    }
    Ok(())
}

/// Whether a file is one a sweep writes: its CSVs and plots.
fn sweep_output(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name == "results.csv"
        || name == "summary.csv"
        || name.ends_with(".svg")
        || name.ends_with(".png")
}

/// Refuses an output folder that holds anything, unless `force`: then an earlier
/// sweep's files go first (plots of another grid must not stay beside new CSVs); other
/// files make it refuse even so.
fn prepare_out(out: &Path, force: bool) -> Result<(), SweepError> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Ok(());
    };
    let files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    if files.is_empty() {
        return Ok(());
    }
    if !force {
        return Err(SweepError::BadInput(format!(
            "{} is not empty; give another --out, or --force to replace an earlier sweep's files there",
            out.display()
        )));
    }
    if let Some(other) = files.iter().find(|f| !sweep_output(f)) {
        return Err(SweepError::BadInput(format!(
            "{}: --force replaces only a sweep's own files, and {} is not one",
            out.display(),
            other.display()
        )));
    }
    for file in files {
        std::fs::remove_file(&file)
            .map_err(|e| SweepError::BadInput(format!("{}: cannot remove: {e}", file.display())))?;
    }
    Ok(())
}
