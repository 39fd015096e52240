//! The interposer's diagnostics: warnings, the end of a process that cannot go on, and
//! the trace of `GPUSWAP_TRACE=1` (call counts, notes, and the reports printed at exit).
//!
//! Every other module reports through here, so this one imports none of them: the
//! modules whose state the exit trace reports register a report source in their slot
//! (`Report`) when they first have something to say, and the trace prints the slots in
//! their fixed order, whatever order they were registered in.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock, PoisonError};

/// Prints a warning of the interposer to standard error (a closed stderr is no reason
/// to fail a CUDA call).
pub(crate) fn warn(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "gpuswap: {message}");
}

/// Ends the process with a message: the interposer cannot go on safely. `_exit`, not
/// `exit`: exit handlers could call back into CUDA while this thread holds the gate.
pub(crate) fn die(message: &str) -> ! {
    warn(message);
    // SAFETY: _exit ends the process at once; nothing is required of the caller.
    unsafe { libc::_exit(70) }
}

/// Whether `GPUSWAP_TRACE=1`; the first call that finds it on arranges the trace at exit.
fn tracing() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = std::env::var("GPUSWAP_TRACE").is_ok_and(|v| v == "1");
        if on {
            extern "C" fn report() {
                let _ = std::panic::catch_unwind(print_trace);
            }
            // SAFETY: registers a function that takes nothing and never unwinds.
            unsafe { libc::atexit(report) };
        }
        on
    })
}

/// Calls per interposed entry point, by name.
static CALLS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Counts a call of an interposed entry point (with `GPUSWAP_TRACE=1`).
pub(crate) fn trace_call(name: &'static str) {
    if tracing() {
        *CALLS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name)
            .or_default() += 1;
    }
}

/// A note for the trace (with `GPUSWAP_TRACE=1`).
pub(crate) fn trace_note(note: &'static str) {
    if tracing() {
        warn(note);
    }
}

/// The reports of the exit trace, in the order it prints them (after the call counts).
#[derive(Clone, Copy)]
pub(crate) enum Report {
    /// The chunk moves' times (`batch`).
    Moves,
    /// The bulk moves' bytes per second (`batch`).
    Batches,
    /// The evictions served from the host pool (`host_pool`).
    HostPool,
}

impl Report {
    /// The number of slots: the last one's index plus one.
    const COUNT: usize = Report::HostPool as usize + 1;
}

/// A report's line for the trace; `None` when it has nothing to say.
pub(crate) type ReportSource = fn() -> Option<String>;

/// The registered report sources, indexed by `Report as usize`.
static REPORTS: [OnceLock<ReportSource>; Report::COUNT] =
    [const { OnceLock::new() }; Report::COUNT];

/// Has the exit trace print `source`'s line in `slot`'s place; the first registration
/// of a slot holds (later ones are cheap no-ops, so callers may register on every use).
pub(crate) fn add_report(slot: Report, source: ReportSource) {
    let _ = REPORTS[slot as usize].get_or_init(|| source);
}

/// The trace printed at exit: the call counts, then each registered report's line.
fn print_trace() {
    for line in trace_lines() {
        warn(&format!("trace: {line}"));
    }
}

/// The exit trace's lines: the call counts, then the reports' lines in slot order.
fn trace_lines() -> Vec<String> {
    let counts: Vec<String> = CALLS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(n, c)| format!("{n}={c}"))
        .collect();
    let reports = REPORTS.iter().filter_map(|slot| slot.get()?());
    std::iter::once(counts.join(" ")).chain(reports).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_come_in_slot_order_and_the_first_registration_holds() {
        // The pool is used before a move is recorded, yet the moves' line comes first.
        add_report(Report::HostPool, || Some("pool".into()));
        add_report(Report::Moves, || Some("moves".into()));
        add_report(Report::Moves, || Some("moves again".into()));
        assert_eq!(trace_lines()[1..], ["moves", "pool"]);
    }
}
