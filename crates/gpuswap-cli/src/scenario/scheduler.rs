//! The `[scheduler]` table: PILOT's memory-aware kernel scheduling.

use gpuswap_core::PolicySettings;
use gpuswap_core::gpu_time::scheduling::{self, PolicyEntry, SchedulingConfig};
use gpuswap_sim::units::{parse_bytes, parse_ns};
use serde::Deserialize;
use toml::Spanned;

use super::values::{ScenarioError, ValueError, find_named, paged_only, parsed};

/// The `[scheduler]` table: PILOT's kernel scheduling.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct SchedulerTable {
    policy: Option<Spanned<String>>,
    instrumented: Option<Spanned<bool>>,
    max_wait: Option<Spanned<String>>,
    quota: Option<Spanned<String>>,
}

/// The table as the core's settings; `policy` is the memory manager's, since PILOT's
/// runtime schedules only unified memory's kernels.
pub(super) fn parse(
    table: &SchedulerTable,
    policy: &PolicySettings,
    value_error: ValueError,
) -> Result<SchedulingConfig, ScenarioError> {
    let mut config = SchedulingConfig::default();
    let entry = match &table.policy {
        None => &scheduling::POLICIES[0],
        Some(name) => find_named(
            name,
            "scheduler.policy",
            scheduling::find,
            |name| format!("unknown scheduling policy {name:?}"),
            || scheduling::POLICIES.iter().map(|p| p.choice.name).collect(),
            value_error,
        )?,
    };
    config.policy = entry.choice.name;
    config.instrumented = table
        .instrumented
        .as_ref()
        .map_or(config.active(), |i| *i.get_ref());
    if let Some(i) = table.instrumented.as_ref().filter(|i| !i.get_ref())
        && config.active()
    {
        return Err(value_error(
            "scheduler.instrumented".into(),
            Some(i.span()),
            format!(
                "{:?} preempts or follows kernels through their instrumented checks; expected true, or policy = \"none\"",
                config.policy
            ),
        ));
    }
    if config.runs() {
        // Name the key that asked for the runtime: the policy, or instrumented alone.
        let (key, span) = match &table.instrumented {
            Some(i) if !config.active() => ("scheduler.instrumented", Some(i.span())),
            _ => ("scheduler.policy", table.policy.as_ref().map(Spanned::span)),
        };
        paged_only(
            policy,
            &format!(
                "PILOT's runtime (policy {:?}) schedules unified-memory kernels: it follows the pages they migrate and stops them between segments",
                config.policy
            ),
            key.into(),
            span,
            value_error,
        )?;
    }
    policy_settings(table, entry, &mut config, value_error)?;
    Ok(config)
}

/// Sets the settings some scheduling policies take (`max_wait`, `quota`) on `config`,
/// refusing one that `entry`, the chosen policy, does not take.
fn policy_settings(
    table: &SchedulerTable,
    entry: &PolicyEntry,
    config: &mut SchedulingConfig,
    value_error: ValueError,
) -> Result<(), ScenarioError> {
    let applies = |key: &str, value: &Spanned<String>| {
        if entry.settings.contains(&key) {
            return Ok(());
        }
        let takers: Vec<_> = scheduling::POLICIES
            .iter()
            .filter(|p| p.settings.contains(&key))
            .map(|p| p.choice.name)
            .collect();
        Err(value_error(
            format!("scheduler.{key}"),
            Some(value.span()),
            format!(
                "{key} applies to scheduler.policy = {}, not {:?}",
                takers.join(" or "),
                entry.choice.name
            ),
        ))
    };
    if let Some(wait) = &table.max_wait {
        applies("max_wait", wait)?;
        config.max_wait_ns = parsed(wait, "scheduler.max_wait".into(), parse_ns, value_error)?;
    }
    if let Some(quota) = &table.quota {
        applies("quota", quota)?;
        let bytes = parse_bytes(quota.get_ref())
            .ok()
            .filter(|b| *b > 0)
            .ok_or_else(|| {
                value_error(
                    "scheduler.quota".into(),
                    Some(quota.span()),
                    "expected a size above 0 with a unit: B, KiB, MiB, GiB".into(),
                )
            })?;
        config.quota_bytes = Some(bytes);
    }
    Ok(())
}
