//! Built-in application models: the Rodinia programs of the GPUswap evaluation and
//! synthetic programs. Each app lives in its own module with the reasoning behind its
//! numbers; this module is the registry.

use crate::program::Program;
use thiserror::Error;

/// An input size the app does not understand.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("app {app}: {message}")]
pub struct SizeError {
    /// The app.
    pub app: &'static str,
    /// What was wrong and what is expected.
    pub message: String,
}

/// A model of an application: turns an input size and a repetition count into a program.
pub trait AppModel: Sync {
    /// The name used in scenario files.
    fn name(&self) -> &'static str;
    /// One line saying what the app is and does.
    fn description(&self) -> &'static str;
    /// The input sizes the app accepts, for help texts (for example
    /// `"default (65536 units), paper (1048560 units), or a number of input units"`).
    fn sizes_help(&self) -> &'static str;
    /// The program for `size` (`"default"` always works) with its measured phase run
    /// `repeat` times (`repeat >= 1`).
    fn program(&self, size: &str, repeat: u32) -> Result<Program, SizeError>;
}

/// Every built-in app, in the order `gpuswap apps` lists them.
pub fn all() -> Vec<&'static dyn AppModel> {
    Vec::new()
}

/// The app called `name`.
pub fn find(name: &str) -> Option<&'static dyn AppModel> {
    all().into_iter().find(|a| a.name() == name)
}
