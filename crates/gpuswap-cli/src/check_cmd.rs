//! `gpuswap check`: deterministic simulation testing over many seeds, of the simulator
//! (`gpuswap_sim::check`) or, with `--daemon`, of the daemon's endpoint
//! (`gpuswap_daemon::check`): each seed makes a random case with injected faults; a
//! failing seed is printed with the command that reproduces it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use gpuswap_daemon::check as daemon_check;
use gpuswap_sim::check::{self, CheckStats};
use rayon::prelude::*;

/// Settings of `gpuswap check`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    gpuswap check                     # seeds 0..1000, as CI runs it\n  \
    gpuswap check --seeds 100000      # the long run\n  \
    gpuswap check --seed 4711 -v      # reproduce one seed and show its case\n  \
    gpuswap check --daemon --seeds 100000   # the daemon's endpoint, the long run")]
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
    /// Check the daemon's endpoint instead of the simulator: simulated processes speak
    /// the wire protocol on a seeded clock, some freeze, die while their data moves,
    /// refuse moves or answer late; the endpoint's and the manager's invariants are
    /// checked after every input.
    #[arg(long)]
    pub daemon: bool,
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
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.jobs.unwrap_or(0))
        .build()
        .map_err(|e| CheckError::Failed(format!("cannot start worker threads: {e}")))?;
    let seeds = (first, last);
    if args.daemon {
        let checked = check_seeds(
            args,
            &pool,
            seeds,
            |seed| daemon_check::describe(&daemon_check::case(seed)),
            daemon_check::check,
        );
        daemon_verdict(checked, seeds)
    } else {
        let checked = check_seeds(
            args,
            &pool,
            seeds,
            |seed| check::describe(&check::case(seed)),
            |seed| check::check(seed).map_err(|f| f.problem),
        );
        sim_verdict(checked, seeds)
    }
}

/// A failed seed: its number and the failure in one line.
type Failure = (u64, String);

/// What the seeds' checks found.
struct Checked<T> {
    /// The figures of each seed that passed.
    passed: Vec<T>,
    /// The seeds that failed.
    failures: Vec<Failure>,
    wall_s: f64,
}

impl<T> Checked<T> {
    /// Seeds checked, counted, so the summary says how many really ran.
    fn count(&self) -> u64 {
        (self.passed.len() + self.failures.len()) as u64
    }
}

/// Checks seeds `first..=last` on `pool` with `check` (a seed's figures, or its
/// problem), each case shown by `describe` when verbose. A panic is the seed's failure.
fn check_seeds<T: Send>(
    args: &CheckArgs,
    pool: &rayon::ThreadPool,
    (first, last): (u64, u64),
    describe: impl Fn(u64) -> String + Sync,
    check: impl Fn(u64) -> Result<T, String> + Sync,
) -> Checked<T> {
    let started = Instant::now();
    // Verbose prints each case on standard error, where a bar would garble it.
    let count = (last - first).saturating_add(1);
    let progress = crate::sweep::progress_bar(count, "seeds", args.verbose);
    let results: Vec<Result<T, String>> = pool.install(|| {
        (first..=last)
            .into_par_iter()
            .map(|seed| {
                if args.verbose {
                    say!("seed {seed}: {}", describe(seed));
                }
                let checked = catch_unwind(AssertUnwindSafe(|| check(seed)));
                progress.inc(1);
                checked.unwrap_or_else(|panic| {
                    let what = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_default();
                    Err(format!("panicked: {what}"))
                })
            })
            .collect()
    });
    progress.finish_and_clear();
    let wall_s = started.elapsed().as_secs_f64();
    let mut checked = Checked {
        passed: Vec::new(),
        failures: Vec::new(),
        wall_s,
    };
    for (seed, result) in (first..=last).zip(results) {
        match result {
            Ok(stats) => checked.passed.push(stats),
            Err(problem) => checked
                .failures
                .push((seed, format!("seed {seed} ({}): {problem}", describe(seed)))),
        }
    }
    checked
}

/// The summary with "all passed", or with each failure and the command that
/// reproduces it (`flags` come before `--seed`).
fn verdict(
    summary: String,
    failures: &[Failure],
    n: u64,
    flags: &str,
) -> Result<String, CheckError> {
    if failures.is_empty() {
        return Ok(format!("{summary}all passed\n"));
    }
    let mut text = format!("{summary}{} of {n} seeds FAILED:\n", failures.len());
    for (seed, failure) in failures {
        text.push_str(&format!(
            "  {failure}\n    reproduce: gpuswap check {flags}--seed {seed} --verbose\n"
        ));
    }
    Err(CheckError::Failed(text))
}

/// The simulator's verdict (`gpuswap_sim::check`).
fn sim_verdict(
    checked: Checked<CheckStats>,
    (first, last): (u64, u64),
) -> Result<String, CheckError> {
    let mut total = CheckStats::default();
    for stats in &checked.passed {
        total.events += stats.events;
        total.crashed += stats.crashed;
        total.killed += stats.killed;
        total.refused += stats.refused;
        total.relocating += stats.relocating;
    }
    let n = checked.count();
    let summary = format!(
        "checked {n} seeds ({first}..{last}) in {:.1} s: {} events, {} cases relocating data; tenants crashed {}, killed after failed copies {}, refused memory {}\n",
        checked.wall_s, total.events, total.relocating, total.crashed, total.killed, total.refused,
    );
    verdict(summary, &checked.failures, n, "")
}

/// The daemon's verdict (`gpuswap_daemon::check`).
fn daemon_verdict(
    checked: Checked<daemon_check::CheckStats>,
    (first, last): (u64, u64),
) -> Result<String, CheckError> {
    let mut t = daemon_check::CheckStats::default();
    for stats in &checked.passed {
        t.add(stats);
    }
    let n = checked.count();
    let summary = format!(
        "checked {n} daemon seeds ({first}..{last}) in {:.1} s: {} inputs, {} suspensions, {} moves; moves refused {}, processes frozen {}, too slow to drain {} (closed at the answer deadline {}), killed mid-relocation {}, ended by the daemon {}; frames overtaken {}\n",
        checked.wall_s,
        t.inputs,
        t.suspensions,
        t.moves,
        t.refused,
        t.frozen,
        t.slow,
        t.closed_at_deadline,
        t.killed_mid_relocation,
        t.killed_by_daemon,
        t.overtaken,
    );
    verdict(summary, &checked.failures, n, "--daemon ")
}
