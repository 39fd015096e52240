//! `gpuswap compare`: the same tenants under several managers, side by side.

use std::path::{Path, PathBuf};

use gpuswap_core::registry::POLICIES;
use gpuswap_sim::report::{Baselines, Report, run_and_report_with};

use crate::limits::{LimitArgs, explain};
use crate::scenario;

/// Settings of a comparison from the command line.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  gpuswap compare scenarios/quickstart.toml --managers native,gpuswap"
)]
pub struct CompareArgs {
    /// The scenario (TOML); its `[manager]` table is replaced by each manager in turn.
    pub scenario: PathBuf,
    /// Managers (modes) to compare, comma-separated (default: every mode; see
    /// `gpuswap policies`). Each runs with its default parameters; the scenario's
    /// `chunk_size` and `return_interval` are kept.
    #[arg(long, value_delimiter = ',')]
    pub managers: Vec<String>,
    /// Bounds of every run.
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// Why a comparison could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// The scenario or a flag is wrong.
    #[error("{0}")]
    BadInput(String),
    /// A run ended without a report (a limit, or a broken invariant).
    #[error("{0}")]
    Run(String),
}

/// Runs the scenario under each manager; the reports in the order asked.
pub fn run(args: &CompareArgs) -> Result<Vec<Report>, CompareError> {
    let text = crate::text::read_text(&args.scenario)
        .map_err(|e| CompareError::BadInput(format!("{}: {e}", args.scenario.display())))?;
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        CompareError::BadInput(format!(
            "{}: {}",
            args.scenario.display(),
            e.to_string().trim_end()
        ))
    })?;
    table.remove("sweep");
    let modes: Vec<String> = if args.managers.is_empty() {
        POLICIES.iter().map(|p| p.choice.name.to_owned()).collect()
    } else {
        args.managers.clone()
    };
    let baselines = Baselines::default();
    modes
        .iter()
        .map(|mode| run_one(&args.scenario, &table, mode, &args.limits, &baselines))
        .collect()
}

fn run_one(
    path: &Path,
    table: &toml::Table,
    mode: &str,
    limits: &LimitArgs,
    baselines: &Baselines,
) -> Result<Report, CompareError> {
    let mut table = table.clone();
    let given = table
        .get("manager")
        .and_then(toml::Value::as_table)
        .cloned();
    let mut manager = toml::Table::new();
    manager.insert("mode".into(), toml::Value::String(mode.to_owned()));
    for kept in ["chunk_size", "return_interval"] {
        if let Some(value) = given.as_ref().and_then(|m| m.get(kept)) {
            manager.insert(kept.into(), value.clone());
        }
    }
    table.insert("manager".into(), toml::Value::Table(manager));
    let mut loaded = scenario::parse(path, &table.to_string())
        .map_err(|e| CompareError::BadInput(format!("--managers {mode}: {e}")))?;
    loaded.config.limits = limits.limits();
    run_and_report_with(&loaded.name, loaded.seed, &loaded.config, baselines)
        .map_err(|e| CompareError::Run(explain(&e, path, loaded.seed)))
}
