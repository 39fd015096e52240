//! The bounds every run obeys, as command-line flags, and what a user is told when a run
//! ends at one or breaks an invariant.

use std::path::Path;

use gpuswap_sim::engine::{Limit, RunLimits, SimError};
use gpuswap_sim::units::{format_ns, parse_ns};

/// `--max-events`, `--max-sim-time` and `--max-page-touches`, shared by `run` and
/// `sweep`.
#[derive(Clone, Debug, clap::Args)]
pub struct LimitArgs {
    /// Stop a run after this many simulated events (a few minutes of wall time by default).
    #[arg(long, value_name = "N", default_value_t = RunLimits::default().max_events)]
    pub max_events: u64,
    /// Stop a run at this much simulated time (ns, us, ms or s).
    #[arg(long, value_name = "DURATION", default_value = "1000000s", value_parser = duration)]
    pub max_sim_time: u64,
    /// Stop a run after its kernels touched this many pages under unified memory (mode
    /// uvm): the work inside one kernel, which one event may hold (a few minutes of wall
    /// time by default).
    #[arg(long, value_name = "N", default_value_t = RunLimits::default().max_page_touches)]
    pub max_page_touches: u64,
}

/// A clap parser for durations (ns, us, ms or s), shared by every flag that takes one.
pub fn duration(text: &str) -> Result<u64, String> {
    parse_ns(text).map_err(|e| e.to_string())
}

impl LimitArgs {
    /// The limits these flags set.
    pub fn limits(&self) -> RunLimits {
        RunLimits {
            max_events: self.max_events,
            max_sim_ns: self.max_sim_time,
            max_page_touches: self.max_page_touches,
        }
    }
}

/// How [`explain`] says to raise the event limit.
const RAISE_EVENTS: &str = "--max-events N";

/// How [`explain`] says to raise the page-touch limit.
const RAISE_PAGE_TOUCHES: &str = "--max-page-touches N";

/// Whether a run's error (as [`explain`] wrote it) is a stop at a limit that `capped`
/// lowered below `own`: a cap put on the run from outside (a dry run's), not its own.
pub fn stopped_by_cap(error: &str, own: &RunLimits, capped: &RunLimits) -> bool {
    let said = |flag: &str| error.ends_with(&format!("raise it with {flag}"));
    (said(RAISE_EVENTS) && capped.max_events < own.max_events)
        || (said(RAISE_PAGE_TOUCHES) && capped.max_page_touches < own.max_page_touches)
}

/// What to print for a run that ended without a report: a limit says which and how to
/// raise it; a broken invariant is an internal error, named with the scenario and the
/// seed that reproduce it.
pub fn explain(error: &SimError, file: &Path, seed: u64) -> String {
    match error {
        SimError::Limit(limit) => {
            let raise = match limit.limit {
                Limit::Events => RAISE_EVENTS,
                Limit::SimTime => "--max-sim-time DURATION",
                Limit::PageTouches => RAISE_PAGE_TOUCHES,
            };
            // A tenant that starts beyond the limit stops the run at its start: say
            // when that was, not only how far the others got.
            let next = match limit.limit {
                Limit::Events => String::new(),
                Limit::SimTime => {
                    format!("; the next event was due at {}", format_ns(limit.next_ns))
                }
                Limit::PageTouches => format!(
                    "; a unified-memory kernel was walking its pages at {}",
                    format_ns(limit.next_ns)
                ),
            };
            format!(
                "{}: the run stopped at its limit of {} ({} events, {} simulated{next}); raise it with {raise}",
                file.display(),
                limit.what,
                limit.events,
                format_ns(limit.time_ns)
            )
        }
        SimError::Invariant(e) => format!(
            "internal error in {} with seed {seed}: {e} (please report it with the scenario; `gpuswap run {} --seed {seed}` reproduces it)",
            file.display(),
            file.display()
        ),
    }
}
