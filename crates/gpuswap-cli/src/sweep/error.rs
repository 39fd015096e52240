//! The error of a sweep, a leaf of its own: every part of the sweep returns it, so
//! that none of them has to import [`super`] for it.

use thiserror::Error;

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
