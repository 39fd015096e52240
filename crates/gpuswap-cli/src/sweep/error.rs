//! The error of a sweep, a leaf of its own: every part of the sweep returns it, so
//! that none of them has to import [`super`] for it.

use thiserror::Error;

/// What went wrong with a sweep as a whole, or that some of its runs failed.
#[derive(Debug, Error)]
pub enum SweepError {
    /// The scenario, a `--vary` flag or the `[sweep]` table is wrong.
    #[error("{0}")]
    BadInput(String),
    /// Results could not be written.
    #[error("{0}")]
    Output(String),
    /// Runs failed (or, with `--fail-on-error`, ended with a failed tenant); the results
    /// are written all the same. The text says how many and where their errors are.
    #[error("{0}")]
    Failures(String),
}
