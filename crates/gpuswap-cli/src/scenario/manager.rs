//! The `[manager]` table: the memory manager's mode and parameters, checked against the
//! registry and the preset's hardware, and the settings every mode has.

use std::collections::BTreeMap;

use gpuswap_core::registry::SettingsError;
use gpuswap_core::{DEFAULT_CHUNK_BYTES, DEFAULT_RETURN_INTERVAL_NS, Needs, PolicySettings};
use gpuswap_sim::preset::{self, Features, Preset};
use gpuswap_sim::units::parse_bytes;
use serde::Deserialize;
use toml::Spanned;

use super::values::{ScenarioError, ValueError, paged_only, parsed, positive_ns};
use crate::gpu_time_keys;
use gpuswap_core::gpu_time::{GpuTime, Idle};

/// The `[manager]` table: the settings every mode has, and the chosen mode's own
/// parameters (checked against the registry, which lists each mode's keys).
#[derive(Deserialize, Default)]
pub(super) struct ManagerTable {
    mode: Option<Spanned<String>>,
    chunk_size: Option<Spanned<String>>,
    return_interval: Option<Spanned<String>>,
    /// Belady's bound on unified memory's page streams: the simulator's measurement,
    /// not a manager parameter (`true`, or the text "true" or "false").
    optimum: Option<Spanned<toml::Value>>,
    /// How tenants share the GPU's time, and turns' settings (`crate::gpu_time_keys`).
    gpu_time: Option<Spanned<String>>,
    quantum: Option<Spanned<String>>,
    handover_after: Option<Spanned<String>>,
    remote_cost: Option<Spanned<toml::Value>>,
    idle: Option<Spanned<String>>,
    demote_after: Option<Spanned<String>>,
    #[serde(flatten)]
    params: BTreeMap<String, toml::Value>,
}

/// The `[manager]` table, checked.
pub(super) struct Manager {
    /// The mode and its parameters.
    pub policy: PolicySettings,
    /// Whether to compute Belady's bound on the tenants' page streams.
    pub optimum: bool,
    /// Period of gpuswap's return check and of access-rate measurements.
    pub return_interval_ns: u64,
    /// Unit of accounting and relocation.
    pub chunk_bytes: u64,
    /// How tenants share the GPU's time; `None` when the table leaves it out.
    pub gpu_time: Option<GpuTime>,
    /// What becomes of an idle tenant's memory.
    pub idle: Idle,
}

impl ManagerTable {
    /// Where `gpu_time` is written, if it is.
    pub(super) fn gpu_time_span(&self) -> Option<std::ops::Range<usize>> {
        self.gpu_time.as_ref().map(Spanned::span)
    }
}

/// The table's settings besides the mode, around `policy` (read first by
/// [`policy_settings`], since the tenants' contracts are checked against it before them).
/// `remote_cost` is the preset's, for `gpu_time = "auto"`.
pub(super) fn parse(
    table: &ManagerTable,
    policy: PolicySettings,
    remote_cost: f64,
    value_error: ValueError,
) -> Result<Manager, ScenarioError> {
    let optimum = optimum(table.optimum.as_ref(), &policy, value_error)?;
    let (gpu_time, idle) = gpu_time(table, remote_cost, value_error)?;
    let return_interval_ns = match &table.return_interval {
        None => DEFAULT_RETURN_INTERVAL_NS,
        Some(t) => positive_ns(t, "manager.return_interval".into(), value_error)?,
    };
    let chunk_bytes = match &table.chunk_size {
        None => DEFAULT_CHUNK_BYTES,
        Some(size) => {
            let key = || "manager.chunk_size".to_owned();
            let bytes = parsed(size, key(), parse_bytes, value_error)?;
            if bytes < 4096 {
                return Err(value_error(
                    key(),
                    Some(size.span()),
                    "expected at least 4KiB (one small page)".into(),
                ));
            }
            bytes
        }
    };
    Ok(Manager {
        policy,
        optimum,
        return_interval_ns,
        chunk_bytes,
        gpu_time,
        idle,
    })
}

/// The GPU-time keys, checked alike here and in `gpuswap daemon --set`; the GPU time is
/// `None` when none of them is written.
fn gpu_time(
    table: &ManagerTable,
    remote_cost: f64,
    value_error: ValueError,
) -> Result<(Option<GpuTime>, Idle), ScenarioError> {
    let cost_text = table.remote_cost.as_ref().map(|v| match v.get_ref() {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    let keys = [
        &table.gpu_time,
        &table.quantum,
        &table.handover_after,
        &None,
        &table.idle,
        &table.demote_after,
    ];
    fn text(k: &Option<Spanned<String>>) -> Option<&str> {
        k.as_ref().map(|v| v.get_ref().as_str())
    }
    let mut values: gpu_time_keys::Values = keys.map(text);
    values[3] = cost_text.as_deref();
    let defaults = gpu_time_keys::Defaults {
        gpu_time: "concurrent",
        remote_cost,
    };
    let written = values.iter().any(Option::is_some);
    gpu_time_keys::settings(values, defaults)
        .map(|(gpu_time, idle)| (written.then_some(gpu_time), idle))
        .map_err(|(key, message)| {
            let span = match key {
                "remote_cost" => table.remote_cost.as_ref().map(Spanned::span),
                _ => {
                    let at = gpu_time_keys::KEYS
                        .iter()
                        .position(|k| *k == key)
                        .expect("one of the keys");
                    keys[at].as_ref().map(Spanned::span)
                }
            }
            .or(table.gpu_time.as_ref().map(Spanned::span));
            value_error(format!("manager.{key}"), span, message)
        })
}

/// The mode and its parameters as registry settings, for `tenants` (the tenants' total
/// weight); a parameter the preset cannot support (reference bits, say) is refused with
/// the presets that can.
pub(super) fn policy_settings(
    table: &ManagerTable,
    tenants: u64,
    preset: &Preset,
    value_error: ValueError,
) -> Result<PolicySettings, ScenarioError> {
    let tenants = u32::try_from(tenants).unwrap_or(u32::MAX);
    let span = table.mode.as_ref().map(Spanned::span);
    let mut settings = match &table.mode {
        None => PolicySettings::new("native", tenants),
        Some(mode) => PolicySettings::new(mode.get_ref(), tenants),
    }
    .map_err(|e| value_error("manager.mode".into(), span.clone(), e.to_string()))?;
    for (key, value) in &table.params {
        let name = format!("manager.{key}");
        let text = match value {
            toml::Value::String(text) => text.clone(),
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(value_error(
                    name,
                    None,
                    format!(
                        "expected a string, a number or true/false, found {}",
                        other.type_str()
                    ),
                ));
            }
        };
        settings = settings.set(key, &text).map_err(|e| {
            let message = match &e {
                SettingsError::UnknownKey { .. } => format!(
                    "{e}; every mode takes mode, chunk_size and return_interval (see `gpuswap policies`)"
                ),
                _ => e.to_string(),
            };
            value_error(name.clone(), None, message)
        })?;
    }
    check_features(&settings, preset, value_error)?;
    Ok(settings)
}

/// Refuses settings that need hardware `preset` lacks: the one place that holds a mode
/// against the preset's hardware.
fn check_features(
    settings: &PolicySettings,
    preset: &Preset,
    value_error: ValueError,
) -> Result<(), ScenarioError> {
    // What the policy needs, what the device has, and its name.
    type Feature = (fn(Needs) -> bool, fn(&Features) -> bool, &'static str);
    let features: [Feature; 3] = [
        (
            |n| n.page_faults,
            |f| f.page_faults,
            "replayable page faults",
        ),
        (|n| n.reference_bits, |f| f.reference_bits, "reference bits"),
        (
            |n| n.access_counts,
            |f| f.access_counters,
            "access counters",
        ),
    ];
    for (needed, has, what) in features {
        if !needed(settings.needs()) || has(&preset.features) {
            continue;
        }
        let with: Vec<_> = preset::all()
            .into_iter()
            .filter(|p| has(&p.features))
            .map(|p| p.name)
            .collect();
        // Name the setting that needs it: the mode itself or one of its choices.
        let (key, value) = if needed(settings.entry().choice.needs) {
            ("mode", settings.name())
        } else {
            settings
                .chosen()
                .into_iter()
                .find(|(_, c)| needed(c.needs))
                .map_or(("mode", settings.name()), |(key, c)| (key, c.name))
        };
        return Err(value_error(
            format!("manager.{key}"),
            None,
            format!(
                "{value:?} needs {what}, which {} lacks; expected a preset that has them ({})",
                preset.name,
                with.join(", ")
            ),
        ));
    }
    Ok(())
}

/// `manager.optimum`: whether to compute Belady's bound, which only unified memory's
/// page streams have.
fn optimum(
    value: Option<&Spanned<toml::Value>>,
    policy: &PolicySettings,
    value_error: ValueError,
) -> Result<bool, ScenarioError> {
    let Some(value) = value else {
        return Ok(false);
    };
    let on = match value.get_ref() {
        toml::Value::Boolean(on) => *on,
        toml::Value::String(text) if text == "true" || text == "false" => text == "true",
        other => {
            return Err(value_error(
                "manager.optimum".into(),
                Some(value.span()),
                format!("expected true or false, found {other}"),
            ));
        }
    };
    if on {
        paged_only(
            policy,
            "Belady's bound is computed on unified memory's page streams",
            "manager.optimum".into(),
            Some(value.span()),
            value_error,
        )?;
    }
    Ok(on)
}
