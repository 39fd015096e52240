//! `gpuswap check`: deterministic simulation testing over many seeds (see
//! `gpuswap_sim::check`): each seed makes a random case with injected faults; a failing
//! seed is printed with the command that reproduces it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use gpuswap_sim::check::{self, CheckFailure, CheckStats};
use rayon::prelude::*;

/// Settings of `gpuswap check`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    gpuswap check                     # seeds 0..1000, as CI runs it\n  \
    gpuswap check --seeds 100000      # the long run\n  \
    gpuswap check --seed 4711 -v      # reproduce one seed and show its case")]
pub struct CheckArgs {
    /// How many seeds to check, starting at --first.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    pub first: u64,
    /// Check this one seed only (what a failure tells you to run).
    #[arg(long, conflicts_with_all = ["seeds", "first"])]
    pub seed: Option<u64>,
    /// Print each case as it is checked.
    #[arg(short, long)]
    pub verbose: bool,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub jobs: Option<usize>,
}

/// Why `gpuswap check` did not pass.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The flags ask for something that cannot be checked.
    #[error("{0}")]
    BadInput(String),
    /// A seed failed (the text lists each with its reproduction), or the workers could
    /// not start.
    #[error("{0}")]
    Failed(String),
}

/// Checks the seeds; the summary, or each failure with its reproduction command.
pub fn run(args: &CheckArgs) -> Result<String, CheckError> {
    let (first, last) = match args.seed {
        Some(seed) => (seed, seed),
        None => {
            let last = args.first.checked_add(args.seeds - 1).ok_or_else(|| {
                CheckError::BadInput(format!(
                    "--first {} with --seeds {} passes the largest seed, {}: expected at most {} seeds from {}",
                    args.first,
                    args.seeds,
                    u64::MAX,
                    u64::MAX - args.first + 1,
                    args.first
                ))
            })?;
            (args.first, last)
        }
    };
    let seeds = first..=last;
    let started = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.jobs.unwrap_or(0))
        .build()
        .map_err(|e| CheckError::Failed(format!("cannot start worker threads: {e}")))?;
    // Verbose prints each case on standard error, where a bar would garble it.
    let count = (last - first).saturating_add(1);
    let progress = crate::sweep::progress_bar(count, "seeds", args.verbose);
    let results: Vec<Result<CheckStats, CheckFailure>> = pool.install(|| {
        seeds
            .clone()
            .into_par_iter()
            .map(|seed| {
                if args.verbose {
                    say!("seed {seed}: {}", check::describe(&check::case(seed)));
                }
                let checked = catch_unwind(AssertUnwindSafe(|| check::check(seed)));
                progress.inc(1);
                checked.unwrap_or_else(|panic| {
                    let what = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_default();
                    Err(CheckFailure {
                        seed,
                        case: check::describe(&check::case(seed)),
                        problem: format!("panicked: {what}"),
                    })
                })
            })
            .collect()
    });
    progress.finish_and_clear();
    let wall_s = started.elapsed().as_secs_f64();
    let mut total = CheckStats::default();
    let mut failures = Vec::new();
    let mut passed = 0u64;
    for result in results {
        match result {
            Ok(stats) => {
                passed += 1;
                total.events += stats.events;
                total.crashed += stats.crashed;
                total.killed += stats.killed;
                total.refused += stats.refused;
                total.relocating += stats.relocating;
            }
            Err(failure) => failures.push(failure),
        }
    }
    // Counted, so the summary says how many really ran.
    let n = passed + failures.len() as u64;
    let summary = format!(
        "checked {n} seeds ({first}..{last}) in {wall_s:.1} s: {} events, {} cases relocating data; tenants crashed {}, killed after failed copies {}, refused memory {}\n",
        total.events, total.relocating, total.crashed, total.killed, total.refused,
    );
    if failures.is_empty() {
        return Ok(format!("{summary}all passed\n"));
    }
    let mut text = format!("{summary}{} of {n} seeds FAILED:\n", failures.len());
    for f in &failures {
        text.push_str(&format!(
            "  {f}\n    reproduce: gpuswap check --seed {} --verbose\n",
            f.seed
        ));
    }
    Err(CheckError::Failed(text))
}
