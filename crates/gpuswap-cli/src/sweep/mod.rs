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

mod axis;
mod error;
mod execute;
mod figures;
mod folder;
mod keys;
mod manifest;
mod merge;
mod normalize;
mod output;
mod plan;
mod plots;
mod records;
mod shard;
mod stats;
mod summary;

use std::path::{Path, PathBuf};

pub use error::SweepError;
use folder::{SCENARIO_FILE, check_html, prepare_out, write_html, write_scenario};
pub use merge::{MergeArgs, merge};
pub use plan::Plan;
use shard::Shard;
use summary::{grid, report};

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
