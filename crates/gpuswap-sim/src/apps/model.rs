//! The interface every app model implements: what an app is asked for and what it
//! answers, kept apart from the registry in [`super`] so that the apps can import it
//! without importing the list of apps.

use thiserror::Error;

use crate::device::DeviceShape;
use crate::program::Program;

/// An input size the app does not understand.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("app {app}: {message}")]
pub struct SizeError {
    /// The app.
    pub app: &'static str,
    /// What was wrong and what is expected.
    pub message: String,
}

/// A model of an application: turns an input size, a repetition count and the device
/// it runs on into a program.
pub trait AppModel: Sync {
    /// The name used in scenario files.
    fn name(&self) -> &'static str;
    /// One line saying what the app is and does.
    fn description(&self) -> &'static str;
    /// The input sizes the app accepts, for help texts (for example
    /// `"default (65536 units), paper (1048560 units), or a number of input units"`).
    fn sizes_help(&self) -> &'static str;
    /// The program for `size` (`"default"` always works) with its measured phase run
    /// `repeat` times (`repeat >= 1`), its traffic estimated for `device`.
    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError>;
    /// The class of its managed-memory migration pattern, for the unified-memory
    /// workloads of the adaptive paper (`../shared/spec/uvm-adaptive.md`); `None` for
    /// the others.
    fn pattern_class(&self) -> Option<PatternClass> {
        None
    }
    /// Other names scenario files may use for it (older or the paper's spelling).
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }
    /// Whether it runs until every other tenant has ended instead of to its program's
    /// end (an interference generator such as pageDoS).
    fn endless(&self) -> bool {
        false
    }
    /// The share of the device's SMs its kernels occupy when the app runs alone, in
    /// (0, 1]: the SM utilization of PILOT's table (`../shared/spec/pilot.md`) for its
    /// benchmarks, all of them for the others. Concurrent execution (MPS) shares the
    /// SMs among co-running kernels by this demand.
    fn sm_utilization(&self) -> f64 {
        1.0
    }
}

/// The migration-pattern classes of the adaptive paper: how an app's pages are touched
/// within a kernel (in address order or not) and across kernels (re-referenced or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PatternClass {
    /// Each page touched in one linear pass and not again soon.
    Streaming,
    /// Linear passes re-referencing the same pages kernel after kernel.
    Regular,
    /// Re-read linear ranges next to sparse data-dependent touches.
    Mixed,
    /// Data-dependent touches spread over the whole allocation.
    Random,
}

impl PatternClass {
    /// The name tables and scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Streaming => "streaming",
            Self::Regular => "regular",
            Self::Mixed => "mixed",
            Self::Random => "random",
        }
    }
}
