//! How a command ends: its text written to standard output, or its error said on
//! standard error with its exit status. A leaf every command module imports.

use std::process::ExitCode;

use crate::sweep;

/// Exit code for bad input (scenario files, flags), as clap uses for bad flags.
pub const EXIT_BAD_INPUT: u8 = 2;

/// Says `error: {message}` on standard error and gives exit status `code`.
pub(crate) fn fail(message: impl std::fmt::Display, code: u8) -> ExitCode {
    say!("error: {message}");
    ExitCode::from(code)
}

/// Writes `text` to standard output (see [`crate::stdout::write`]); exit status 1 if it
/// could not.
pub fn emit(text: &str) -> ExitCode {
    match crate::stdout::write(text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e, 1),
    }
}

/// Writes a command's text, or says its error: bad input, exit status 2.
pub fn emit_or_bad_input(result: Result<String, impl std::fmt::Display>) -> ExitCode {
    match result {
        Ok(text) => emit(&text),
        Err(e) => fail(e, EXIT_BAD_INPUT),
    }
}

/// Writes `value` as pretty JSON with a final newline.
pub(crate) fn emit_json(value: &impl serde::Serialize) -> ExitCode {
    emit(&(serde_json::to_string_pretty(value).expect("listings serialize") + "\n"))
}

/// Exit status of the daemon and top: their errors (unreachable daemon, bad flags,
/// a busy socket) are the user's to fix.
pub fn real_gpu_exit(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e, EXIT_BAD_INPUT),
    }
}

/// The exit code of a sweep (or the benchmark, which is one), with its error printed.
pub fn sweep_exit(result: Result<(), sweep::SweepError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = match e {
                sweep::SweepError::BadInput(_) => EXIT_BAD_INPUT,
                sweep::SweepError::Output(_) | sweep::SweepError::Failures(_) => 1,
            };
            fail(e, code)
        }
    }
}
