//! The records of results.csv and patterns.csv as written, a grid point at a time:
//! what the tables write and the summary reads back (from a sweep or a merge). A leaf,
//! so that the tables can feed the summary without the summary importing the tables.

use super::axis::Axis;

/// Where results.csv's error column is: after the point, its settings, the run and the
/// seed. The summary metrics follow it.
pub(super) fn error_column(axes: &[Axis]) -> usize {
    axes.len() + 3
}

/// The last column of results.csv and summary.csv: tenants (VMs) that failed in a run,
/// or in a point's runs, which the figures over tenants that finished leave out.
pub(super) const TENANTS_FAILED: &str = "tenants_failed";

/// A grid point's records of results.csv and patterns.csv, as written: what the
/// summary is taken from, whether the runs just ended or a merge read them back.
pub(super) struct PointRecords {
    /// The point's index.
    pub(super) point: usize,
    /// Its results.csv records, a run each, in run order.
    pub(super) results: Vec<Vec<String>>,
    /// Its patterns.csv records, in run order.
    pub(super) patterns: Vec<Vec<String>>,
}
