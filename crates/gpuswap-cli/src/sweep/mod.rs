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
#[cfg(test)]
mod merge_fuzz;
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
pub use keys::is_every_modes_setting;
pub use manifest::check_finished;
pub use merge::{MergeArgs, merge};
pub use plan::Plan;
use shard::Shard;
use summary::{check_failures, grid, report};

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
    /// Check every point and say how big the sweep is and about how long it will take
    /// (one run of each point is timed, spread over the grid, for about 10 s at most);
    /// write nothing.
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
        let caps = (DRY_RUN_MAX_EVENTS, DRY_RUN_MAX_PAGE_TOUCHES);
        let (text, failed) = dry_run(&mut plan, args.shard, &out, args.jobs, caps);
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
    let points = shard.points(&plan.axis_sizes());
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
    check_failures(&summary, &out, args.fail_on_error)
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
/// shard, with one), the runs, and a wall-time estimate from timing one run of as many
/// points as about 10 s allows, spread over the grid (their solo baselines included, as
/// the sweep computes them too), given as a range: points can differ a hundredfold. A
/// timed run stops at `caps` (events, page touches: [`DRY_RUN_MAX_EVENTS`] and
/// [`DRY_RUN_MAX_PAGE_TOUCHES`]), so that one long point cannot hold the dry run for
/// minutes; its time is then a lower bound.
fn dry_run(
    plan: &mut Plan,
    shard: Option<Shard>,
    out: &Path,
    jobs: Option<usize>,
    (max_events, max_page_touches): (u64, u64),
) -> (String, usize) {
    let axes: Vec<String> = plan
        .axes
        .iter()
        .map(|a| match a.values.len() {
            1 => format!("{} (1 value)", a.key),
            n => format!("{} ({n} values)", a.key),
        })
        .collect();
    let held_points = shard.unwrap_or(Shard::WHOLE).points(&plan.axis_sizes());
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
    let sweep_limits = plan.limits;
    plan.limits.max_events = sweep_limits.max_events.min(max_events);
    plan.limits.max_page_touches = sweep_limits.max_page_touches.min(max_page_touches);
    let mut timed: Vec<(usize, f64)> = Vec::new();
    let mut capped = 0;
    let mut failed = 0;
    let started = std::time::Instant::now();
    for point in spread(&held_points) {
        if timed.len() >= DRY_RUN_MIN_SAMPLES && started.elapsed() > DRY_RUN_BUDGET {
            break;
        }
        let run_started = std::time::Instant::now();
        let row = plan.run_point(point, 0, &baselines, &tenants);
        let s = run_started.elapsed().as_secs_f64();
        match &row.result {
            // The dry run's own cap, not the sweep's: the point runs longer than this.
            Err(e) if crate::limits::stopped_by_cap(e, &sweep_limits, &plan.limits) => {
                capped += 1;
                text += &format!(
                    "point {point}: one run took more than {s:.2} s here (stopped at the dry run's cap of {max_events} events or {max_page_touches} page touches)\n"
                );
            }
            Err(e) => {
                failed += 1;
                text += &format!("point {point}: one run took {s:.2} s here (failed: {e})\n");
            }
            Ok(_) => {}
        }
        timed.push((point, s));
    }
    plan.limits = sweep_limits;
    let threads = jobs.unwrap_or_else(rayon::current_num_threads).max(1);
    text += &estimate(&timed, held, plan.runs as usize, threads);
    if capped > 0 {
        text += &format!(
            "{capped} timed runs stopped at the dry run's cap: the estimate is a lower bound\n"
        );
    }
    (text, failed)
}

/// The most events a dry run's timed run simulates: about a second of wall time on
/// this project's 2-core machines (`gpuswap bench`: about 15 million events a second
/// a thread).
const DRY_RUN_MAX_EVENTS: u64 = 20_000_000;

/// The most page touches a dry run's timed unified-memory run walks: about a second
/// too (`gpuswap bench --uvm`: about 15 ns a page touch).
const DRY_RUN_MAX_PAGE_TOUCHES: u64 = 60_000_000;

/// `--dry-run` times one run of points until this much time has gone (or every point
/// is timed)...
const DRY_RUN_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// ... but at least this many points.
const DRY_RUN_MIN_SAMPLES: usize = 5;

/// `points` in an order that spreads over the grid: the first, the last, the middle,
/// then the quarters, the eighths and so on, so that a sample of any length taken from
/// its start covers the grid about evenly.
fn spread(points: &[usize]) -> Vec<usize> {
    let n = points.len();
    let mut taken = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut take = |i: usize, order: &mut Vec<usize>| {
        if !std::mem::replace(&mut taken[i], true) {
            order.push(points[i]);
        }
    };
    if n > 0 {
        take(0, &mut order);
        take(n - 1, &mut order);
    }
    let mut parts = 2;
    while order.len() < n {
        for k in (1..parts).step_by(2) {
            take(k * (n - 1) / parts, &mut order);
        }
        // Finer than the grid: what rounding skipped comes in order.
        if parts >= n {
            (0..n).for_each(|i| take(i, &mut order));
        }
        parts *= 2;
    }
    order
}

/// The estimate lines: `runs` runs per point of `held` points on `threads` threads,
/// from one timed run of each point in `timed` (point, seconds); the points not timed
/// are counted at the mean of those timed, the range at their fastest and slowest.
fn estimate(timed: &[(usize, f64)], held: usize, runs: usize, threads: usize) -> String {
    let Some(&(slowest, high)) = timed.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
        return "estimate: nothing to run\n".into();
    };
    let low = timed.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
    let sum: f64 = timed.iter().map(|t| t.1).sum();
    let mean = sum / timed.len() as f64;
    let untimed = (held - timed.len()) as f64;
    let wall = |each: f64| {
        let parallel = threads.min(held * runs).max(1) as f64;
        format_duration((sum + untimed * each) * runs as f64 / parallel)
    };
    let mut text = format!(
        "timed one run of {} of {held} points in {}: {low:.2} s to {high:.2} s a run (slowest: point {slowest})\n",
        timed.len(),
        format_duration(sum)
    );
    if timed.len() == held {
        text += &format!(
            "estimate: about {} on {threads} threads (every point timed once; seeds and other work on the machine change it)\n",
            wall(mean)
        );
    } else {
        text += &format!(
            "estimate: about {} on {threads} threads (from {} to {}, as the other points run like the fastest or the slowest timed)\n",
            wall(mean),
            wall(low),
            wall(high)
        );
    }
    text
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
        assert_eq!(spread(&[0, 1, 2]), [0, 2, 1]);
        let hundred = spread(&(0..100).collect::<Vec<_>>());
        assert_eq!(hundred[..5], [0, 99, 49, 24, 74]);
        let mut all = hundred.clone();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>(), "every point once");
        assert_eq!(spread(&[3, 7, 11]), [3, 11, 7]);
        assert!(spread(&[]).is_empty());
        let lines = estimate(&[(0, 0.1), (2, 60.0), (1, 0.1)], 3, 10, 2);
        assert!(lines.ends_with("estimate: about 5.0 min on 2 threads (every point timed once; seeds and other work on the machine change it)\n"), "{lines}");
        assert!(lines.starts_with("timed one run of 3 of 3 points in 60.2 s: 0.10 s to 60.00 s a run (slowest: point 2)"), "{lines}");
        let lines = estimate(&[(0, 1.0), (9, 3.0)], 10, 10, 4);
        assert!(
            lines.contains("estimate: about 50.0 s on 4 threads (from 30.0 s to 70.0 s"),
            "{lines}"
        );
        assert_eq!(format_duration(7200.0), "2.0 h");
    }

    /// A point whose run is long is timed up to the dry run's cap and said to be a lower
    /// bound, not run to its end (a `repeat = 4000` scenario once held a dry run for six
    /// minutes where it promises about ten seconds).
    #[test]
    fn a_dry_run_stops_a_long_point_at_its_cap_and_says_the_estimate_is_a_floor() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/quickstart.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let mut plan = Plan::new(&path, &text, &[], None).unwrap();
        let sweep_limits = plan.limits;
        let out = Path::new("unused");
        let (said, failed) = dry_run(&mut plan, None, out, Some(1), (10, u64::MAX));
        assert_eq!(failed, 0, "{said}");
        assert!(
            said.contains("stopped at the dry run's cap of 10 events"),
            "{said}"
        );
        assert!(said.contains("the estimate is a lower bound"), "{said}");
        assert_eq!(
            plan.limits, sweep_limits,
            "the sweep's own limits come back"
        );
        // Uncapped, the same point runs to its end.
        let (said, _) = dry_run(&mut plan, None, out, Some(1), (u64::MAX, u64::MAX));
        assert!(!said.contains("cap"), "{said}");
    }

    #[test]
    fn every_reproduction_sweep_checks_at_every_point() {
        // The papers' setups (scenarios/pilot, scenarios/fidelity) are sweeps too long to
        // run in a test: every point of each must still be a valid scenario.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        for dir in ["pilot", "fidelity"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "toml") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let plan = Plan::new(&path, &text, &[], None).unwrap();
                    plan.check_points().unwrap();
                }
            }
        }
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
