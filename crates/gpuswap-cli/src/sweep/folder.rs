//! The output folder around a sweep's tables, shared by `gpuswap sweep` and `gpuswap
//! merge`: refusing or clearing a folder that holds other files, and the scenario copy
//! and web page left beside the results.

use std::path::{Path, PathBuf};

use super::error::SweepError;
use super::manifest;

/// The copy of the scenario a whole sweep (or a merge) leaves beside its results, for
/// `gpuswap report` and for whoever reads the folder later.
pub(super) const SCENARIO_FILE: &str = "scenario.toml";

/// Writes [`SCENARIO_FILE`]: the scenario file's `text` under a comment naming its path
/// and the flags that changed the grid. A merge writes what the sweep would have, from
/// the shards' manifests.
pub(super) fn write_scenario(
    out: &Path,
    scenario: &str,
    vary: &[String],
    runs: u32,
    text: &str,
) -> Result<(), SweepError> {
    let flags: String = vary.iter().map(|v| format!(" --vary {v:?}")).collect();
    let header = format!(
        "# The scenario of this sweep: {scenario}{flags}, {runs} runs (seeds) per point.\n"
    );
    let path = out.join(SCENARIO_FILE);
    crate::text::write_atomically(&path, header + text)
        .map_err(|e| SweepError::Output(format!("{}: {e}", path.display())))
}

/// `--html FILE` is checked before any run: an existing FILE without `--force`, or a
/// folder that does not exist, would otherwise fail only after the whole sweep.
pub(super) fn check_html(html: Option<&Path>, force: bool) -> Result<(), SweepError> {
    html.map_or(Ok(()), |html| {
        crate::report_cmd::check_target(html, force)
            .map_err(|e| SweepError::BadInput(format!("--html {e}")))
    })
}

/// `--html FILE`: the finished sweep folder `out` as a page.
pub(super) fn write_html(out: &Path, html: Option<&Path>, force: bool) -> Result<(), SweepError> {
    match html {
        Some(html) => crate::report_cmd::write_page(out, html, force)
            .map_err(|e| SweepError::Output(e.to_string())),
        None => Ok(()),
    }
}

/// Whether a file is one a sweep, a shard or a merge writes: its CSVs, plots, scenario
/// copy and pages, a shard's manifest, and the partial files a killed run leaves.
fn sweep_output(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let name = name.strip_suffix(".partial").unwrap_or(name);
    name == "results.csv"
        || name == "summary.csv"
        || name == "normalized.csv"
        || name == "patterns.csv"
        || name == manifest::FILE
        || name == manifest::INCOMPLETE
        || name == SCENARIO_FILE
        || name.ends_with(".html")
        || name.ends_with(".svg")
        || name.ends_with(".png")
}

/// Refuses an output folder that holds anything, unless `force`: then an earlier
/// sweep's files go first (plots of another grid must not stay beside new CSVs); other
/// files make it refuse even so.
pub(super) fn prepare_out(out: &Path, force: bool) -> Result<(), SweepError> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Ok(());
    };
    let files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    if files.is_empty() {
        return Ok(());
    }
    if !force {
        let resume = if out.join(manifest::INCOMPLETE).exists() {
            ", or --resume (with the flags it ran with) to finish the interrupted sweep there"
        } else {
            ""
        };
        return Err(SweepError::BadInput(format!(
            "{} is not empty; give another --out, or --force to replace an earlier sweep's files there{resume}",
            out.display()
        )));
    }
    if let Some(other) = files.iter().find(|f| !sweep_output(f)) {
        return Err(SweepError::BadInput(format!(
            "{}: --force replaces only a sweep's own files, and {} is not one",
            out.display(),
            other.display()
        )));
    }
    for file in files {
        std::fs::remove_file(&file)
            .map_err(|e| SweepError::BadInput(format!("{}: cannot remove: {e}", file.display())))?;
    }
    Ok(())
}
