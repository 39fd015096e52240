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
//! A key is a dotted path into the scenario (`device.preset`, `manager.mode`,
//! `tenant.repeat` for every tenant, `tenant[1].start` for one), a whole table
//! (`manager = [{ mode = "gpuswap", chunk_policy = "random" }, { mode = "gdev" }]`), or
//! keys joined by `+` that take the same value (`"tenant[0].app+tenant[1].app"`). Run
//! `r` of a point uses seed `scenario seed + r`, so seeds are varied with `runs`, not as
//! a key.

mod execute;
mod figures;
mod keys;
mod manifest;
mod merge;
mod normalize;
mod output;
mod plan;
mod plots;
mod shard;
mod summary;

use std::path::{Path, PathBuf};

use thiserror::Error;

pub use merge::{MergeArgs, merge};
pub use plan::Plan;
use shard::Shard;

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
#[command(after_help = "Examples:\n  \
    gpuswap sweep scenarios/repro/backprop-memory.toml --out results/backprop --png\n  \
    gpuswap sweep scenarios/quickstart.toml --vary \"device.vram_limit=100MiB..500MiB step 100MiB\" --runs 5\n  \
    gpuswap sweep scenarios/quickstart.toml --vary manager.chunk_policy=random,priority-buffer --dry-run\n  \
    gpuswap sweep big.toml --shard 3/16 --out part3   # then: gpuswap merge part* --out big")]
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
    /// Run only shard I of N: the points whose index is I-1 modulo N. Writes results.csv
    /// (and patterns.csv) whole when done, then shard.toml for `gpuswap merge`; no
    /// summary or plots.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// Also write the sweep as one self-contained web page (as `gpuswap report`).
    #[arg(long, value_name = "FILE", conflicts_with = "shard")]
    pub html: Option<PathBuf>,
    /// Check the sweep and say how big it is and about how long it will take (one run
    /// of its first and last points is timed); write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Bounds of every run.
    #[command(flatten)]
    pub limits: crate::limits::LimitArgs,
}

/// Runs a sweep, or one shard of it, and writes its results.
pub fn run(args: &SweepArgs) -> Result<(), SweepError> {
    let text = crate::text::read_text(&args.scenario)
        .map_err(|e| SweepError::BadInput(format!("{}: {e}", args.scenario.display())))?;
    let mut plan = Plan::new(&args.scenario, &text, &args.vary, args.runs)?;
    plan.limits = args.limits.limits();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("results").join(plan.name()));
    if args.dry_run {
        return crate::stdout::write(&dry_run(&plan, args.shard, &out, args.jobs))
            .map_err(SweepError::Output);
    }
    check_html(args.html.as_deref(), args.force)?;
    prepare_out(&out, args.force)?;
    let points = args.shard.unwrap_or(Shard::WHOLE).points(plan.points.len());
    let mut outputs = output::Outputs::create(&out, &plan, args.shard.is_some())?;
    plan.execute(&points, args.jobs, args.quiet, |point, rows| {
        outputs.point(&outputs.records(point, &rows))
    })?;
    let summary = outputs.finish()?;
    let held = points.len();
    let what = match args.shard {
        Some(shard) => {
            let inputs = manifest::PlanInputs {
                text: &text,
                vary: &args.vary,
                runs: plan.runs,
                limits: plan.limits,
            };
            manifest::Manifest::new(shard, &args.scenario, &inputs, plan.points.len(), points)
                .write(&out)?;
            format!("shard {shard}: ")
        }
        None => {
            summary.write(&out, args.png)?;
            let scenario = args.scenario.display().to_string();
            write_scenario(&out, &scenario, &args.vary, plan.runs, &text)?;
            write_html(&out, args.html.as_deref(), args.force)?;
            String::new()
        }
    };
    report(&what, &plan, held, &summary, &out)?;
    if args.fail_on_error && summary.failed + summary.tenant_failed > 0 {
        return Err(SweepError::Failures(summary.failed + summary.tenant_failed));
    }
    Ok(())
}

/// How big a sweep, or a shard holding `held` of its points, is: "6 grid points x 2
/// seeds", "2 of 6 grid points x 2 seeds".
fn grid(plan: &Plan, held: usize) -> String {
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
fn report(
    what: &str,
    plan: &Plan,
    held: usize,
    summary: &summary::Summary,
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

/// What `--dry-run` says: the grid (of the shard, with one), the runs, and a wall-time
/// estimate from timing one run of the first and of the last point (their solo
/// baselines included, as the sweep computes them too).
fn dry_run(plan: &Plan, shard: Option<Shard>, out: &Path, jobs: Option<usize>) -> String {
    let axes: Vec<String> = plan
        .axes
        .iter()
        .map(|a| format!("{} ({} values)", a.key, a.values.len()))
        .collect();
    let held = shard.map_or(plan.points.len(), |s| s.points(plan.points.len()).len());
    let runs = held * plan.runs as usize;
    let mut files = vec!["results.csv"];
    if shard.is_none() {
        files.extend(["summary.csv", SCENARIO_FILE]);
        if plan.normalize.is_some() {
            files.push("normalized.csv");
        }
    }
    if plan.kind() == figures::Kind::PagedTenants {
        files.push("patterns.csv");
    }
    files.push(if shard.is_some() {
        manifest::FILE
    } else {
        "plots"
    });
    let what = shard.map_or(String::new(), |s| format!("shard {s}: "));
    let mut text = format!(
        "{what}{} = {runs} runs over {}; would write {} ({})\n",
        grid(plan, held),
        if axes.is_empty() {
            "no varied key".to_owned()
        } else {
            axes.join(", ")
        },
        out.display(),
        files.join(", ")
    );
    let baselines = gpuswap_sim::report::Baselines::default();
    let tenants = plan.tenants();
    let mut samples = vec![0];
    if plan.points.len() > 1 {
        samples.push(plan.points.len() - 1);
    }
    let mut seconds = Vec::new();
    for point in samples {
        let started = std::time::Instant::now();
        let row = plan.run_point(point, 0, &baselines, &tenants);
        let s = started.elapsed().as_secs_f64();
        let result = match &row.result {
            Ok(_) => "ran".to_owned(),
            Err(e) => format!("failed: {e}"),
        };
        text += &format!("point {point}: one run took {s:.2} s here ({result})\n");
        seconds.push(s);
    }
    let threads = jobs.unwrap_or_else(rayon::current_num_threads).max(1);
    let mean_s = seconds.iter().sum::<f64>() / seconds.len() as f64;
    text += &format!(
        "estimate: about {:.1} s on {threads} threads (points differ: a rough guide)\n",
        mean_s * runs as f64 / threads as f64
    );
    text
}

/// The copy of the scenario a whole sweep (or a merge) leaves beside its results, for
/// `gpuswap report` and for whoever reads the folder later.
const SCENARIO_FILE: &str = "scenario.toml";

/// Writes [`SCENARIO_FILE`]: the scenario file's `text` under a comment naming its path
/// and the flags that changed the grid. A merge writes what the sweep would have, from
/// the shards' manifests.
fn write_scenario(
    out: &Path,
    scenario: &str,
    vary: &[String],
    runs: u32,
    text: &str,
) -> Result<(), SweepError> {
    let flags: String = vary.iter().map(|v| format!(" --vary {v:?}")).collect();
    let header = format!(
        "# The scenario of this sweep: {scenario}{flags}, {runs} runs (seeds) per point.\n"
    );
    let path = out.join(SCENARIO_FILE);
    std::fs::write(&path, header + text)
        .map_err(|e| SweepError::Output(format!("{}: {e}", path.display())))
}

/// `--html FILE` is checked before any run: an existing FILE without `--force`, or a
/// folder that does not exist, would otherwise fail only after the whole sweep.
fn check_html(html: Option<&Path>, force: bool) -> Result<(), SweepError> {
    html.map_or(Ok(()), |html| {
        crate::report_cmd::check_target(html, force)
            .map_err(|e| SweepError::BadInput(format!("--html {e}")))
    })
}

/// `--html FILE`: the finished sweep folder `out` as a page.
fn write_html(out: &Path, html: Option<&Path>, force: bool) -> Result<(), SweepError> {
    match html {
        Some(html) => crate::report_cmd::write_page(out, html, force)
            .map_err(|e| SweepError::Output(e.to_string())),
        None => Ok(()),
    }
}

/// Whether a file is one a sweep, a shard or a merge writes: its CSVs, plots, scenario
/// copy and pages, a shard's manifest, and the partial files a killed run leaves.
fn sweep_output(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let name = name.strip_suffix(".partial").unwrap_or(name);
    name == "results.csv"
        || name == "summary.csv"
        || name == "normalized.csv"
        || name == "patterns.csv"
        || name == manifest::FILE
        || name == SCENARIO_FILE
        || name.ends_with(".html")
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
