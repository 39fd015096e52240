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
pub use execute::{progress_bar, without_lines};
use folder::{SCENARIO_FILE, check_html, prepare_out, write_html, write_scenario};
pub use keys::EVERY_MODES_SETTINGS;
pub use manifest::check_finished;
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
    /// Exit with status 1 when a run ended with a failed tenant too (a run that failed
    /// always makes the sweep exit with status 1; the results are written all the same).
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
    /// of a few points is timed); write nothing.
    #[arg(long, conflicts_with = "resume")]
    pub dry_run: bool,
    /// Finish a sweep that was interrupted (killed, or stopped by an error) in --out:
    /// run only the points it had not finished, then write every file as the whole
    /// sweep would have. Give the flags it ran with (`gpuswap report` on the folder
    /// prints them).
    #[arg(long, conflicts_with = "force")]
    pub resume: bool,
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
    plan.check_points()?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("results").join(plan.name()));
    if args.dry_run {
        let (text, failed) = dry_run(&plan, args.shard, &out, args.jobs);
        crate::stdout::write(&text).map_err(SweepError::Output)?;
        return match failed {
            0 => Ok(()),
            n => Err(SweepError::Failures(format!(
                "{n} of the sampled runs failed (see above); the sweep's runs would fail too"
            ))),
        };
    }
    check_html(args.html.as_deref(), args.force)?;
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    let points = shard.points(plan.points.len());
    let files = plan.files_read();
    let inputs = manifest::PlanInputs {
        text: &text,
        vary: &args.vary,
        runs: plan.runs,
        limits: plan.limits,
        files: &files,
    };
    let running = manifest::Manifest::new(
        shard,
        &args.scenario,
        &inputs,
        plan.points.len(),
        points.clone(),
    );
    // Rows go to partial files, renamed when the sweep ends; incomplete.toml notes each
    // finished point, so that a sweep killed midway leaves nothing that looks whole
    // and `--resume` can go on from its last finished point.
    let (mut outputs, done) = if args.resume {
        resume(&out, &plan, &running)?
    } else {
        prepare_out(&out, args.force)?;
        std::fs::create_dir_all(&out)
            .map_err(|e| SweepError::Output(format!("{}: {e}", out.display())))?;
        running.write_incomplete(&out)?;
        (output::Outputs::create(&out, &plan)?, 0)
    };
    plan.execute(&points[done..], args.jobs, args.quiet, |point, rows| {
        outputs.point(&outputs.records(point, &rows))?;
        manifest::note_done(&out, point, outputs.bytes()?)
    })?;
    let summary = outputs.finish()?;
    // The sweep's own files written, it is finished: the page reads a finished folder.
    let finished = || {
        let incomplete = out.join(manifest::INCOMPLETE);
        std::fs::remove_file(&incomplete)
            .map_err(|e| SweepError::Output(format!("{}: {e}", incomplete.display())))
    };
    let what = match args.shard {
        Some(shard) => {
            running.write(&out)?;
            finished()?;
            format!("shard {shard}: ")
        }
        None => {
            summary.write(&out, args.png)?;
            let scenario = args.scenario.display().to_string();
            write_scenario(&out, &scenario, &args.vary, plan.runs, &text)?;
            finished()?;
            write_html(&out, args.html.as_deref(), args.force)?;
            String::new()
        }
    };
    report(&what, &plan, points.len(), &summary, &out)?;
    let results = out.join("results.csv");
    if summary.failed > 0 {
        return Err(SweepError::Failures(format!(
            "{} of {} runs failed; their errors are in the error column of {}",
            summary.failed,
            summary.runs,
            results.display()
        )));
    }
    if args.fail_on_error && summary.tenant_failed > 0 {
        return Err(SweepError::Failures(format!(
            "{} of {} runs ended with a failed tenant (--fail-on-error); the tenants' errors are in the TENANT.error columns of {}",
            summary.tenant_failed,
            summary.runs,
            results.display()
        )));
    }
    Ok(())
}

/// `--resume`: the outputs of the unfinished sweep in `out`, reopened after its last
/// finished point with those points in the summary, and how many of `running`'s
/// points are done. The sweep must be the one given now (the same plan and shard).
fn resume<'a>(
    out: &Path,
    plan: &'a Plan,
    running: &manifest::Manifest,
) -> Result<(output::Outputs<'a>, usize), SweepError> {
    let Some(incomplete) = manifest::read_incomplete(out)? else {
        return Err(SweepError::BadInput(format!(
            "--resume: {} holds no unfinished sweep ({} is not there); expected the --out of a sweep that was interrupted",
            out.display(),
            manifest::INCOMPLETE
        )));
    };
    let m = &incomplete.manifest;
    if m.plan != running.plan || m.shard != running.shard {
        return Err(SweepError::BadInput(format!(
            "--resume: {} holds another sweep (plan {}, shard {}; this one is plan {}, shard {}: the scenario, a file it reads or a flag differs); expected the flags it ran with: {}",
            out.display(),
            m.plan,
            m.shard,
            running.plan,
            running.shard,
            m.resume_command(out)
        )));
    }
    if incomplete.done == 0 {
        return Ok((output::Outputs::create(out, plan)?, 0));
    }
    let mut outputs = output::Outputs::reopen(out, plan, incomplete.bytes)?;
    let mut tables = merge::ShardTables::open_partial(out, plan)?;
    for &p in &running.points[..incomplete.done] {
        outputs.replay(&tables.point(p, plan.runs as usize)?)?;
    }
    Ok((outputs, incomplete.done))
}

/// What `--dry-run` says, and how many of its timed runs failed: the grid (of the
/// shard, with one), the runs, and a wall-time estimate from timing one run of each of
/// a few points spread over the grid (their solo baselines included, as the sweep
/// computes them too), given as a range: points can differ a hundredfold.
fn dry_run(plan: &Plan, shard: Option<Shard>, out: &Path, jobs: Option<usize>) -> (String, usize) {
    let axes: Vec<String> = plan
        .axes
        .iter()
        .map(|a| format!("{} ({} values)", a.key, a.values.len()))
        .collect();
    let held_points = shard.unwrap_or(Shard::WHOLE).points(plan.points.len());
    let held = held_points.len();
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
    let mut seconds = Vec::new();
    let mut failed = 0;
    for point in samples(&held_points, DRY_RUN_SAMPLES) {
        let started = std::time::Instant::now();
        let row = plan.run_point(point, 0, &baselines, &tenants);
        let s = started.elapsed().as_secs_f64();
        let result = match &row.result {
            Ok(_) => "ran".to_owned(),
            Err(e) => {
                failed += 1;
                format!("failed: {e}")
            }
        };
        text += &format!("point {point}: one run took {s:.2} s here ({result})\n");
        seconds.push(s);
    }
    let threads = jobs.unwrap_or_else(rayon::current_num_threads).max(1);
    text += &estimate(&seconds, held, runs, threads);
    (text, failed)
}

/// How many points `--dry-run` times, at most.
const DRY_RUN_SAMPLES: usize = 5;

/// Up to `k` of `points`, spread evenly from the first to the last.
fn samples(points: &[usize], k: usize) -> Vec<usize> {
    let n = points.len();
    if n <= k {
        return points.to_vec();
    }
    let mut picked: Vec<usize> = (0..k).map(|i| points[i * (n - 1) / (k - 1)]).collect();
    picked.dedup();
    picked
}

/// The estimate line: `runs` runs on `threads` threads, each taking about what the
/// sampled runs took (`seconds`, one run each of `seconds.len()` of `held` points), from
/// the fastest to the slowest of them.
fn estimate(seconds: &[f64], held: usize, runs: usize, threads: usize) -> String {
    if seconds.is_empty() {
        return "estimate: nothing to run\n".into();
    }
    let total = |s: f64| format_duration(s * runs as f64 / threads.min(runs.max(1)) as f64);
    let mean = seconds.iter().sum::<f64>() / seconds.len() as f64;
    let low = seconds.iter().copied().fold(f64::INFINITY, f64::min);
    let high = seconds.iter().copied().fold(0.0, f64::max);
    let sampled = if seconds.len() == held {
        format!("every point timed once, on {threads} threads")
    } else {
        format!(
            "{} of {held} points timed once, on {threads} threads; the others may take more or less",
            seconds.len()
        )
    };
    format!(
        "estimate: about {} (from {} to {}: {sampled})\n",
        total(mean),
        total(low),
        total(high)
    )
}

/// A wall time in the unit a reader plans with: seconds, minutes or hours.
fn format_duration(s: f64) -> String {
    if s < 90.0 {
        format!("{s:.1} s")
    } else if s < 90.0 * 60.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dry_run_samples_the_middle_of_the_grid_and_gives_a_range() {
        // The first and the last point alone once timed a 12-minute sweep at 11 s.
        assert_eq!(samples(&[0, 1, 2], 5), [0, 1, 2]);
        assert_eq!(
            samples(&(0..100).collect::<Vec<_>>(), 5),
            [0, 24, 49, 74, 99]
        );
        assert_eq!(samples(&[3, 7, 11, 15, 19, 23], 5), [3, 7, 11, 15, 23]);
        let line = estimate(&[0.1, 60.0, 0.1], 3, 30, 2);
        assert_eq!(
            line,
            "estimate: about 5.0 min (from 1.5 s to 15.0 min: every point timed once, on 2 threads)\n"
        );
        assert!(estimate(&[1.0], 10, 10, 4).contains("1 of 10 points timed once"));
        assert_eq!(format_duration(7200.0), "2.0 h");
    }

    #[test]
    fn the_baselines_scenarios_own_sweep_checks_at_every_point() {
        // Its comment once said to vary the mode alone: 12 of 15 runs failed.
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/baselines-backprop.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let line = text.lines().find(|l| l.contains("gpuswap sweep")).unwrap();
        let vary = line
            .split("--vary '")
            .nth(1)
            .unwrap()
            .trim_end_matches('\'');
        let plan = Plan::new(&path, &text, &[vary.to_owned()], Some(3)).unwrap();
        assert_eq!(plan.points.len(), 6);
        plan.check_points().unwrap();
        // A mode alone keeps the table's chunk policy, which only gpuswap takes.
        let plan = Plan::new(
            &path,
            &text,
            &["manager.mode=native,gpuswap".to_owned()],
            None,
        )
        .unwrap();
        let SweepError::BadInput(e) = plan.check_points().unwrap_err() else {
            panic!("bad input expected")
        };
        assert!(
            e.contains("point 0 (manager.mode = \"native\")")
                && e.contains("chunk_policy")
                && !e.contains("(line "),
            "{e}"
        );
    }
}
