//! `gpuswap compare`: the same tenants under several managers, side by side.

use std::path::{Path, PathBuf};

use gpuswap_core::PolicySettings;
use gpuswap_core::contract::Terms;
use gpuswap_core::registry::POLICIES;
use gpuswap_sim::report::{Baselines, Report, run_and_report_progress};

use crate::limits::{LimitArgs, explain};
use crate::scenario;

/// Settings of a comparison from the command line.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gpuswap compare scenarios/quickstart.toml --managers native,gpuswap\n  \
     gpuswap compare scenarios/quickstart.toml --managers \
     gpuswap:victim=largest-share,gpuswap:victim=access-rate\n  \
     gpuswap compare scenarios/real/torch-pair.toml --managers \
     \"gpuswap:gpu_time=concurrent,gpuswap:gpu_time=turns\""
)]
pub struct CompareArgs {
    /// The scenario (TOML); its `[manager]` table is replaced by each manager in turn.
    pub scenario: PathBuf,
    /// Managers to compare, comma-separated (default: every mode the scenario is valid
    /// under and whose terms its tenants' contracts fit; see `gpuswap policies`). A
    /// manager is a mode at its default parameters, or a mode with settings of its
    /// `[manager]` keys, `MODE:KEY=VALUE[:KEY=VALUE...]` (`gpuswap:victim=access-rate`;
    /// a value is read as TOML, else as a string), so that settings of one mode can be
    /// compared (`gpuswap:gpu_time=auto,gpuswap:gpu_time=turns` compares ways of sharing
    /// GPU time). The scenario's `chunk_size`, `return_interval` and GPU-time keys
    /// (`gpu_time`, `quantum`, ...) are kept unless a manager sets them.
    #[arg(long, value_delimiter = ',')]
    pub managers: Vec<String>,
    /// Print the reports as JSON (`reports`: one `run --json` report per manager;
    /// `left_out`: the modes left out and why, or null), for scripts.
    #[arg(long)]
    pub json: bool,
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

/// The reports of a comparison, and what it left out.
pub struct Comparison {
    /// Each manager as asked (a mode, or `MODE:KEY=VALUE...`), in the order asked.
    pub labels: Vec<String>,
    /// One per manager, in the order asked.
    pub reports: Vec<Report>,
    /// Without `--managers`: the modes left out, a line per reason: they do not honour
    /// a tenant's contract (the terms, in words), or the scenario is not valid under
    /// them (a fault log replays only under `uvm`).
    pub left_out: Option<String>,
}

/// Runs the scenario (`text`, read from `args.scenario`) under each manager; the
/// reports in the order asked.
pub fn run(args: &CompareArgs, text: &str) -> Result<Comparison, CompareError> {
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        CompareError::BadInput(format!(
            "{}: {}",
            args.scenario.display(),
            crate::text::toml_error(&e)
        ))
    })?;
    table.remove("sweep");
    let mut left_out = None;
    let modes: Vec<String> = if args.managers.is_empty() {
        // Every mode the scenario's device supports and that honours every tenant's
        // contract with its default parameters.
        let config = scenario::parse(&args.scenario, text)
            .map_err(|e| CompareError::BadInput(e.to_string()))?
            .config;
        let features = config.preset.features;
        let terms = config
            .tenants
            .iter()
            .fold(Terms::NONE, |t, tenant| t.union(tenant.contract.terms()));
        let (modes, refused): (Vec<_>, Vec<_>) = POLICIES
            .iter()
            .filter(|p| !p.choice.needs.page_faults || features.page_faults)
            .map(|p| p.choice.name)
            .partition(|mode| terms.is_within(PolicySettings::named(mode).honours()));
        if !refused.is_empty() {
            left_out = Some(format!(
                "left out: {} (they do not honour the tenants' {terms} with their default parameters)",
                refused.join(", ")
            ));
        }
        modes.into_iter().map(str::to_owned).collect()
    } else {
        args.managers.clone()
    };
    let mut loaded = Vec::new();
    // Without --managers, a mode the scenario is not valid under (a fault log replays
    // only under uvm) is left out with the reason; a mode asked for is bad input.
    let mut invalid: Vec<(&str, String)> = Vec::new();
    for mode in &modes {
        match build(&args.scenario, &table, mode) {
            Ok(s) => loaded.push((mode.clone(), s)),
            Err(e) if args.managers.is_empty() => {
                invalid.push((mode, crate::sweep::without_lines(&e)));
            }
            Err(e) => return Err(CompareError::BadInput(format!("--managers {mode}: {e}"))),
        }
    }
    let mut notes: Vec<String> = left_out.into_iter().collect();
    if let Some((first, why)) = invalid.first() {
        let modes: Vec<&str> = invalid.iter().map(|(m, _)| *m).collect();
        notes.push(format!(
            "left out: {} (the scenario is not valid under them; under {first}: {why})",
            modes.join(", ")
        ));
    }
    if loaded.is_empty() {
        return Err(CompareError::BadInput(format!(
            "{}: no manager can run this scenario; {}",
            args.scenario.display(),
            notes.join("; ")
        )));
    }
    // The tenants are the same under every mode: one warning each.
    for warning in
        crate::trace_cmd::invented_timing_warnings(&args.scenario, &loaded[0].1.config.tenants)
    {
        say!("{warning}");
    }
    let baselines = Baselines::default();
    let progress = crate::sweep::progress_bar(loaded.len() as u64, "managers", false);
    let labels: Vec<String> = loaded.iter().map(|(label, _)| label.clone()).collect();
    let reports = loaded
        .into_iter()
        .map(|(mode, mut s)| {
            s.config.limits = args.limits.limits();
            let mut tick = |sim_ns: u64, events: u64| {
                progress.set_message(format!(
                    "{mode}: simulated {}, {events} events",
                    gpuswap_sim::units::format_ns(sim_ns)
                ));
            };
            let report = run_and_report_progress(&s.name, s.seed, &s.config, &baselines, &mut tick)
                .map_err(|e| CompareError::Run(explain(&e, &args.scenario, s.seed)));
            progress.inc(1);
            report
        })
        .collect::<Result<_, _>>();
    progress.finish_and_clear();
    Ok(Comparison {
        labels,
        reports: reports?,
        left_out: (!notes.is_empty()).then(|| notes.join("\n")),
    })
}

/// The scenario (`table`) with its manager replaced by `manager`: a mode at its default
/// parameters, or `MODE:KEY=VALUE...` with those settings; the scenario's chunk size,
/// return interval and GPU-time keys (`gpu_time`, ...) are kept unless the settings
/// give them.
fn build(
    path: &Path,
    table: &toml::Table,
    manager: &str,
) -> Result<scenario::Scenario, scenario::ScenarioError> {
    let mut table = table.clone();
    let given = table
        .get("manager")
        .and_then(toml::Value::as_table)
        .cloned();
    let (mode, settings) =
        split_manager(manager).map_err(|message| scenario::ScenarioError::Value {
            path: path.to_owned(),
            key: "manager".into(),
            line: None,
            message,
        })?;
    let mut built = toml::Table::new();
    built.insert("mode".into(), toml::Value::String(mode.to_owned()));
    for (key, value) in given.iter().flatten() {
        if crate::sweep::is_every_modes_setting(key) {
            built.insert(key.clone(), value.clone());
        }
    }
    built.extend(settings);
    table.insert("manager".into(), toml::Value::Table(built));
    scenario::parse(path, &table.to_string())
}

/// A manager's settings of its `[manager]` keys, as (key, value).
type Settings = Vec<(String, toml::Value)>;

/// Splits `MODE[:KEY=VALUE...]` into the mode and its settings, each value read as TOML
/// (`2`, `true`, `"x"`) or else as a string (`access-rate`).
fn split_manager(manager: &str) -> Result<(&str, Settings), String> {
    let mut parts = manager.split(':');
    let mode = parts.next().unwrap_or_default().trim();
    let settings = parts
        .map(|setting| {
            let (key, value) = setting.split_once('=').ok_or_else(|| {
                format!("{setting:?} is not a setting; expected MODE:KEY=VALUE[:KEY=VALUE...]")
            })?;
            let value = value.trim();
            let value = format!("v = {value}")
                .parse::<toml::Table>()
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(value.to_owned()));
            Ok((key.trim().to_owned(), value))
        })
        .collect::<Result<_, String>>()?;
    Ok((mode, settings))
}

/// `gpuswap compare` on a VM scenario: the same VMs under each placement algorithm
/// (`--managers` names placements; default: all of them), as a table, or with `--json`
/// as `{"managers", "reports", "left_out"}` like a tenants' comparison, a `run --json`
/// report per placement.
pub fn run_vgpu(args: &CompareArgs, text: &str) -> Result<String, CompareError> {
    use gpuswap_core::placement::{PLACEMENTS, find_placement};
    let loaded = crate::vgpu_scenario::parse(&args.scenario, text)
        .map_err(|e| CompareError::BadInput(e.to_string()))?;
    let names: Vec<String> = if args.managers.is_empty() {
        PLACEMENTS.iter().map(|p| p.name.to_owned()).collect()
    } else {
        args.managers.clone()
    };
    let mut outcomes = Vec::new();
    for name in &names {
        let placement = find_placement(name).ok_or_else(|| {
            let known: Vec<_> = PLACEMENTS.iter().map(|p| p.name).collect();
            CompareError::BadInput(format!(
                "--managers: unknown placement {name:?} for a VM scenario; expected one of: {}",
                known.join(", ")
            ))
        })?;
        let mut config = loaded.config.clone();
        config.placement = placement;
        crate::vgpu_scenario::apply_limits(&mut config, &args.limits.limits());
        let outcome = gpuswap_vgpu::engine::simulate(config)
            .map_err(|e| CompareError::Run(format!("{}: {name}: {e}", args.scenario.display())))?;
        outcomes.push((placement.name, outcome));
    }
    if args.json {
        let reports: Vec<_> = outcomes
            .iter()
            .map(|(name, outcome)| {
                let mut config = loaded.config.clone();
                config.placement = find_placement(name).expect("found above");
                crate::vm_figures::report_json(&loaded.name, &config, outcome)
            })
            .collect();
        let json = serde_json::json!({
            "managers": names,
            "reports": reports,
            "left_out": null,
        });
        return Ok(serde_json::to_string_pretty(&json).expect("reports serialize") + "\n");
    }
    Ok(crate::render::vgpu_compare_table(
        &loaded.name,
        &outcomes,
        crate::render::terminal_width(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuswap_core::gpu_time::GpuTime;

    #[test]
    fn a_compared_manager_keeps_the_scenarios_gpu_time_unless_it_sets_its_own() {
        let table: toml::Table = toml::from_str(
            "[device]\npreset = \"h100-pcie-80gb\"\n[manager]\nmode = \"gpuswap\"\n\
             gpu_time = \"auto\"\nvictim = \"random\"\n\
             [[tenant]]\nname = \"a\"\napp = \"stream\"\n",
        )
        .unwrap();
        let path = Path::new("pair.toml");
        let kept = build(path, &table, "fcfs").unwrap();
        assert!(matches!(kept.config.manager.gpu_time, GpuTime::Auto(_)));
        assert_eq!(kept.config.manager.policy.name(), "fcfs");
        let own = build(path, &table, "gpuswap:gpu_time=turns").unwrap();
        assert!(matches!(own.config.manager.gpu_time, GpuTime::Turns(_)));
    }
}
