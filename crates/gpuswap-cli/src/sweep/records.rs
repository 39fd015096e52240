//! The records of results.csv and patterns.csv as written, a grid point at a time:
//! what the tables write and the summary reads back (from a sweep or a merge). A leaf,
//! so that the tables can feed the summary without the summary importing the tables.

use std::path::Path;

use super::axis::Axis;
use super::error::SweepError;

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

/// Writes a whole CSV file, `header` then `rows`, at once: a reader (or a full disk)
/// never leaves part of it (see [`crate::text::write_atomically`]). The error names the
/// file.
pub(super) fn write_csv(
    path: &Path,
    header: &[String],
    rows: &[Vec<String>],
) -> Result<(), SweepError> {
    let io = |e: &dyn std::fmt::Display| SweepError::Output(format!("{}: {e}", path.display()));
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(header).map_err(|e| io(&e))?;
    for row in rows {
        w.write_record(row).map_err(|e| io(&e))?;
    }
    let bytes = w.into_inner().map_err(|e| io(&e))?;
    crate::text::write_atomically(path, bytes).map_err(|e| io(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full disk (summary.csv's partial file is /dev/full): the error names the file,
    /// and neither a truncated summary.csv nor its partial file is left.
    #[test]
    fn a_table_that_cannot_be_written_leaves_nothing() {
        if !Path::new("/dev/full").exists() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("gpuswap-csv-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("summary.csv");
        let partial = crate::text::partial_path(&path);
        std::os::unix::fs::symlink("/dev/full", &partial).unwrap();
        let rows = vec![vec!["0".to_owned()]; 10_000];
        let e = write_csv(&path, &["point".to_owned()], &rows).unwrap_err();
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert!(!path.exists() && partial.symlink_metadata().is_err());
        write_csv(&path, &["point".to_owned()], &rows[..1]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "point\n0\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
