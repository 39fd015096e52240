//! Scenario files: what to simulate, in TOML.
//!
//! ```toml
//! seed = 42
//! [device]
//! preset = "gtx480"
//! vram_limit = "100MiB"     # VRAM available to tenants (default: all the preset has)
//! # or: memory_limit = "120MiB", the GPUswap papers' limit: the driver's own
//! # structures count against it, tenants get the rest
//! host_memory = "16GiB"     # host memory for evicted chunks (default: the preset's)
//! [manager]
//! mode = "native"
//! [[tenant]]
//! name = "a"
//! app = "backprop"
//! size = "default"
//! repeat = 100
//! start = "0s"
//! ```
//!
//! `gpuswap keys` lists every key ([`crate::keys`]). Every mistake becomes a [`ScenarioError`] naming the file, the key (and line) and what
//! was expected.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use gpuswap_core::contract::Term;
use gpuswap_core::registry::SettingsError;
use gpuswap_core::scheduling::{self, SchedulingConfig};
use gpuswap_core::uvm::pages::{PAGE_BYTES, PAGES_PER_BLOCK};
use gpuswap_core::{
    AtLimit, DEFAULT_CHUNK_BYTES, DEFAULT_RETURN_INTERVAL_NS, Needs, PolicySettings,
};
use gpuswap_sim::engine::{DEFAULT_QUANTUM_NS, Sharing, SimConfig, TenantSpec};

use gpuswap_sim::preset::Features;
use gpuswap_sim::program::Program;
use gpuswap_sim::trace::torch::{Snapshot, SnapshotError};
use gpuswap_sim::trace::uvm_log::FaultLog;
use gpuswap_sim::units::{format_bytes, parse_bytes, parse_ns};
use gpuswap_sim::{apps, preset};
use serde::Deserialize;
use thiserror::Error;
use toml::Spanned;

use crate::contract_keys::{ContractTable, check_mode};
use crate::priorities::PrioritiesFile;

/// Longest tenant name: names head table and CSV columns.
const MAX_NAME_CHARS: usize = 64;

/// A scenario file that cannot be used.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why: it cannot be read, or where it stops being UTF-8.
        message: String,
    },
    /// TOML syntax, an unknown key or a value of the wrong type.
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line, column and key).
        message: String,
    },
    /// A value of the right type that makes no sense.
    #[error("{path}: {key}{}: {message}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Value {
        /// The file.
        path: PathBuf,
        /// The key, as a path (`tenant[1].app`).
        key: String,
        /// Line of the value, when known.
        line: Option<usize>,
        /// What is wrong and what was expected.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    /// An integer as TOML defines them (64-bit signed), so that `run` and `sweep`, which
    /// reads the file as a TOML table, accept the same seeds.
    seed: Option<Spanned<i64>>,
    #[serde(default)]
    device: DeviceTable,
    #[serde(default)]
    manager: ManagerTable,
    #[serde(default)]
    scheduler: SchedulerTable,
    #[serde(default)]
    tenant: Vec<TenantTable>,
    /// The grid of `gpuswap sweep` (read there): a single run runs the base point.
    sweep: Option<toml::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DeviceTable {
    preset: Option<Spanned<String>>,
    vram_limit: Option<Spanned<String>>,
    memory_limit: Option<Spanned<String>>,
    host_memory: Option<Spanned<String>>,
    oversubscription: Option<Spanned<f64>>,
    subscription: Option<Spanned<f64>>,
    sharing: Option<Spanned<String>>,
    quantum: Option<Spanned<String>>,
    link_scale: Option<Spanned<f64>>,
}

/// The `[scheduler]` table: PILOT's kernel scheduling.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SchedulerTable {
    policy: Option<Spanned<String>>,
    instrumented: Option<Spanned<bool>>,
    max_wait: Option<Spanned<String>>,
    quota: Option<Spanned<String>>,
}

/// The `[manager]` table: the settings every mode has, and the chosen mode's own
/// parameters (checked against the registry, which lists each mode's keys).
#[derive(Deserialize, Default)]
struct ManagerTable {
    mode: Option<Spanned<String>>,
    chunk_size: Option<Spanned<String>>,
    return_interval: Option<Spanned<String>>,
    /// Belady's bound on unified memory's page streams: the simulator's measurement,
    /// not a manager parameter (`true`, or the text "true" or "false").
    optimum: Option<Spanned<toml::Value>>,
    #[serde(flatten)]
    params: BTreeMap<String, toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantTable {
    name: Option<Spanned<String>>,
    app: Option<Spanned<String>>,
    /// A PyTorch memory snapshot to replay instead of an app.
    trace: Option<Spanned<String>>,
    /// The share of the device's VRAM bandwidth a trace's kernels use.
    trace_bandwidth: Option<Spanned<f64>>,
    /// A unified-memory fault log (uvm-eval's format) to replay instead of an app.
    fault_log: Option<Spanned<String>>,
    size: Option<Spanned<String>>,
    repeat: Option<Spanned<i64>>,
    start: Option<Spanned<String>>,
    priorities_file: Option<Spanned<String>>,
    #[serde(default)]
    priorities: BTreeMap<String, Spanned<i32>>,
    #[serde(default)]
    chunk_priorities: BTreeMap<String, Spanned<Vec<i32>>>,
    // The memory contract ([`crate::contract_keys`]).
    vram_guarantee: Option<Spanned<String>>,
    vram_limit: Option<Spanned<String>>,
    memory_limit: Option<Spanned<String>>,
    at_limit: Option<Spanned<String>>,
    host_limit: Option<Spanned<String>>,
    weight: Option<Spanned<i64>>,
    priority_class: Option<Spanned<i64>>,
}

impl TenantTable {
    /// Its contract keys.
    fn contract_table(&self) -> ContractTable {
        ContractTable {
            vram_guarantee: self.vram_guarantee.clone(),
            vram_limit: self.vram_limit.clone(),
            memory_limit: self.memory_limit.clone(),
            at_limit: self.at_limit.clone(),
            host_limit: self.host_limit.clone(),
            weight: self.weight.clone(),
            priority_class: self.priority_class.clone(),
        }
    }
}

/// A scenario ready to run.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Name in reports: the file name without extension.
    pub name: String,
    /// Seed of every random choice.
    pub seed: u64,
    /// What the engine runs.
    pub config: SimConfig,
    /// The file has a `[sweep]` table, which a single run leaves aside.
    pub has_sweep: bool,
}

impl Scenario {
    /// Sets the seed of the run: the report's and the manager's random choices'.
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
        self.config.manager.seed = seed;
    }
}

/// Default preset when a scenario names none: the GPUswap testbed.
pub const DEFAULT_PRESET: &str = "gtx480";

/// Whether `key` exists in `section` (`device`, `manager` or `tenant`), for checking a
/// sweep's keys before any run; the error lists what exists (from [`crate::keys`]).
pub fn check_key(section: &str, key: &str) -> Result<(), String> {
    if !["device", "manager", "tenant", "vm"].contains(&section) {
        return Ok(());
    }
    let known = crate::keys::in_section(section);
    // Entries of a tenant's priority tables are buffer labels: any name.
    if known.iter().any(|k| k == key) {
        return Ok(());
    }
    Err(format!(
        "{section}.{key} is not a scenario key; expected one of: {}",
        known
            .iter()
            .map(|k| format!("{section}.{k}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Reads a scenario file's text, once: a pipe (`/dev/stdin`, `<(...)`) cannot be read
/// twice, so a command that looks at the text before parsing it reads it here.
pub fn read(path: &Path) -> Result<String, ScenarioError> {
    crate::text::read_text(path).map_err(|message| ScenarioError::Read {
        path: path.to_owned(),
        message,
    })
}

/// Checks scenario text; `path` names it in errors.
pub fn parse(path: &Path, text: &str) -> Result<Scenario, ScenarioError> {
    let file: File = toml::from_str(text).map_err(|e| ScenarioError::Syntax {
        path: path.to_owned(),
        message: crate::text::toml_error(&e),
    })?;
    let value_error =
        |key: String, span: Option<std::ops::Range<usize>>, message: String| ScenarioError::Value {
            path: path.to_owned(),
            key,
            line: span.map(|s| text[..s.start].lines().count().max(1)),
            message,
        };

    let preset_name = file.device.preset.as_ref();
    let mut preset = match preset_name {
        None => preset::find(DEFAULT_PRESET).expect("default preset exists"),
        Some(name) => preset::find(name.get_ref()).ok_or_else(|| {
            let known: Vec<_> = preset::all().iter().map(|p| p.name).collect();
            value_error(
                "device.preset".into(),
                Some(name.span()),
                format!(
                    "unknown preset {:?}; expected one of: {}",
                    name.get_ref(),
                    known.join(", ")
                ),
            )
        })?,
    };

    if let (Some(_), Some(ratio)) = (&file.device.oversubscription, &file.device.subscription) {
        return Err(value_error(
            "device.subscription".into(),
            Some(ratio.span()),
            "expected either device.subscription or device.oversubscription, not both".into(),
        ));
    }
    if let Some(ratio) = &file.device.subscription {
        if file.device.vram_limit.is_some() || file.device.memory_limit.is_some() {
            return Err(value_error(
                "device.subscription".into(),
                Some(ratio.span()),
                "expected either device.subscription or a VRAM limit (vram_limit, memory_limit), not both".into(),
            ));
        }
        if !(ratio.get_ref().is_finite() && *ratio.get_ref() > 0.0) {
            return Err(value_error(
                "device.subscription".into(),
                Some(ratio.span()),
                format!(
                    "expected a ratio above 0 (the tenants' working sets over the VRAM the filler leaves, 0.75 for 75 %), got {}",
                    ratio.get_ref()
                ),
            ));
        }
    }
    let sharing = sharing(&file.device, &value_error)?;
    if let Some(ratio) = &file.device.oversubscription {
        if file.device.vram_limit.is_some() || file.device.memory_limit.is_some() {
            return Err(value_error(
                "device.oversubscription".into(),
                Some(ratio.span()),
                "expected either device.oversubscription or a VRAM limit (vram_limit, memory_limit), not both".into(),
            ));
        }
        if !(ratio.get_ref().is_finite() && *ratio.get_ref() >= 1.0) {
            return Err(value_error(
                "device.oversubscription".into(),
                Some(ratio.span()),
                format!(
                    "expected a ratio of at least 1 (the tenants' working set over the VRAM they get, 1.5 for 150 %), got {}",
                    ratio.get_ref()
                ),
            ));
        }
    }
    let tenant_vram_bytes = match (&file.device.vram_limit, &file.device.memory_limit) {
        (None, None) => preset.tenant_vram_bytes(),
        (Some(_), Some(limit)) => {
            return Err(value_error(
                "device.memory_limit".to_owned(),
                Some(limit.span()),
                "expected either device.vram_limit (VRAM for tenants) or device.memory_limit (VRAM the driver's structures included), not both".into(),
            ));
        }
        (Some(limit), None) => {
            let key = || "device.vram_limit".to_owned();
            let bytes = parse_bytes(limit.get_ref())
                .map_err(|e| value_error(key(), Some(limit.span()), e.to_string()))?;
            if bytes == 0 || bytes > preset.tenant_vram_bytes() {
                return Err(value_error(
                    key(),
                    Some(limit.span()),
                    format!(
                        "expected a size above 0 and at most the {} that {} has for tenants ({} installed minus {} reserved by the driver)",
                        format_bytes(preset.tenant_vram_bytes()),
                        preset.name,
                        format_bytes(preset.vram_bytes),
                        format_bytes(preset.driver_reserved_bytes)
                    ),
                ));
            }
            bytes
        }
        // The papers limited all of VRAM; the driver's structures stay in it.
        (None, Some(limit)) => {
            let key = || "device.memory_limit".to_owned();
            let bytes = parse_bytes(limit.get_ref())
                .map_err(|e| value_error(key(), Some(limit.span()), e.to_string()))?;
            if bytes <= preset.driver_reserved_bytes || bytes > preset.vram_bytes {
                return Err(value_error(
                    key(),
                    Some(limit.span()),
                    format!(
                        "expected a size above the {} the driver keeps on {} and at most its {} installed",
                        format_bytes(preset.driver_reserved_bytes),
                        preset.name,
                        format_bytes(preset.vram_bytes)
                    ),
                ));
            }
            bytes - preset.driver_reserved_bytes
        }
    };

    if let Some(scale) = &file.device.link_scale {
        let factor = *scale.get_ref();
        if !(factor.is_finite() && (1.0 / 64.0..=64.0).contains(&factor)) {
            return Err(value_error(
                "device.link_scale".into(),
                Some(scale.span()),
                format!(
                    "expected a factor from 1/64 to 64 on the host link's bandwidth (0.5 halves it, 2 doubles it), got {factor}"
                ),
            ));
        }
        preset.link = preset.link.scaled(factor);
    }
    let host_bytes = match &file.device.host_memory {
        None => preset.host_memory_bytes,
        Some(size) => parse_bytes(size.get_ref()).map_err(|e| {
            value_error(
                "device.host_memory".into(),
                Some(size.span()),
                e.to_string(),
            )
        })?,
    };

    // Contracts first: static partitioning cuts VRAM into the tenants' total weight.
    let mut contracts = Vec::with_capacity(file.tenant.len());
    for (i, t) in file.tenant.iter().enumerate() {
        let key = |field: &str| format!("tenant[{i}].{field}");
        let table = t.contract_table();
        contracts.push((table.contract(&key, &value_error)?, table));
    }
    let total_weight: u64 = contracts.iter().map(|(c, _)| u64::from(c.weight)).sum();
    let policy = policy_settings(&file.manager, total_weight, &preset, &value_error)?;
    for (i, (contract, table)) in contracts.iter().enumerate() {
        let key = |field: &str| format!("tenant[{i}].{field}");
        check_mode(contract, &policy, table, &key, &value_error)?;
        if contract.at_limit == AtLimit::Wait {
            return Err(value_error(
                key("at_limit"),
                table.span_of(Term::Wait),
                "\"wait\" needs a tenant that can free memory while one of its allocations waits (a multi-threaded process under gpuswap daemon); a simulated program blocks on its allocation, so it would wait forever: expected \"fail\" or \"spill\"".into(),
            ));
        }
        // Under unified memory the runtime's buffers stay in VRAM: a limit must leave
        // a VA block of room for pages beyond them, or no page could ever come in.
        let block_bytes = (PAGES_PER_BLOCK as u64) * PAGE_BYTES;
        if let Some(limit) = contract
            .vram_limit_bytes
            .filter(|l| policy.needs().page_faults && *l < preset.runtime_bytes() + block_bytes)
        {
            return Err(value_error(
                key("vram_limit"),
                table.span_of(Term::VramLimit),
                format!(
                    "expected at least {} under mode uvm: the {} of the runtime's buffers on {}, which stay in VRAM, and a 2 MiB block for pages; got {}",
                    format_bytes(preset.runtime_bytes() + block_bytes),
                    format_bytes(preset.runtime_bytes()),
                    preset.name,
                    format_bytes(limit)
                ),
            ));
        }
        if contract.vram_guarantee_bytes > tenant_vram_bytes {
            return Err(value_error(
                key("vram_guarantee"),
                table.span_of(Term::VramGuarantee),
                format!(
                    "expected at most the {} of VRAM tenants get",
                    format_bytes(tenant_vram_bytes)
                ),
            ));
        }
    }
    let optimum = optimum(file.manager.optimum.as_ref(), &policy, &value_error)?;
    let return_interval_ns = match &file.manager.return_interval {
        None => DEFAULT_RETURN_INTERVAL_NS,
        Some(t) => parse_ns(t.get_ref())
            .ok()
            .filter(|ns| *ns > 0)
            .ok_or_else(|| {
                value_error(
                    "manager.return_interval".into(),
                    Some(t.span()),
                    "expected a positive duration with a unit: ns, us, ms or s".into(),
                )
            })?,
    };

    let chunk_bytes = match &file.manager.chunk_size {
        None => DEFAULT_CHUNK_BYTES,
        Some(size) => {
            let key = || "manager.chunk_size".to_owned();
            let bytes = parse_bytes(size.get_ref())
                .map_err(|e| value_error(key(), Some(size.span()), e.to_string()))?;
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

    if file.tenant.is_empty() {
        return Err(value_error(
            "tenant".into(),
            None,
            "expected at least one [[tenant]] table".into(),
        ));
    }
    let mut tenants: Vec<TenantSpec> = Vec::with_capacity(file.tenant.len());
    // Files a tenant names (traces, priorities) are relative to the scenario.
    let parent = path.parent().unwrap_or(Path::new("."));
    for (i, t) in file.tenant.iter().enumerate() {
        let key = |field: &str| format!("tenant[{i}].{field}");
        let size = t.size.as_ref().map_or("default", |s| s.get_ref());
        // A trace or a fault log runs no app model: it never runs endless, and its SM
        // demand is unknown, so it takes the whole device as an app without a figure does.
        let (app_name, program, model, logged, timing) = match (&t.app, &t.trace, &t.fault_log) {
            (_, None, _) if t.trace_bandwidth.is_some() => {
                return Err(value_error(
                    key("trace_bandwidth"),
                    t.trace_bandwidth.as_ref().map(Spanned::span),
                    "trace_bandwidth applies to a tenant with trace = FILE".into(),
                ));
            }
            (Some(app), None, None) => {
                let app = find_app(app, &key("app"), &value_error)?;
                let repeat = repeat(t, &key("repeat"), &value_error)?;
                let program = app.program(size, repeat, preset.shape()).map_err(|e| {
                    value_error(key("size"), t.size.as_ref().map(|s| s.span()), e.message)
                })?;
                (app.name().to_owned(), program, Some(app), None, None)
            }
            (None, Some(trace), None) => {
                let (name, (program, timing)) =
                    trace_program(t, trace, parent, &preset, &key, &value_error)?;
                (name, program, None, None, Some(timing))
            }
            (None, None, Some(log)) => {
                let (name, log) = fault_log(t, log, parent, &policy, &key, &value_error)?;
                let timing = FaultLog::TIMING.to_owned();
                (
                    name,
                    log.program(),
                    None,
                    Some(log.faults_per_batch()),
                    Some(timing),
                )
            }
            (Some(_), Some(trace), None) => {
                return Err(value_error(
                    key("trace"),
                    Some(trace.span()),
                    "a tenant runs an app or replays a trace; expected app or trace, not both"
                        .into(),
                ));
            }
            (_, _, Some(log)) => {
                return Err(value_error(
                    key("fault_log"),
                    Some(log.span()),
                    "a tenant runs an app, replays a trace or replays a fault log; expected one of app, trace and fault_log, not several".into(),
                ));
            }
            (None, None, None) => {
                return Err(value_error(
                    key("app"),
                    None,
                    "expected app = NAME (gpuswap apps), trace = \"FILE.pickle\" (a PyTorch memory snapshot) or fault_log = \"FILE\" (a unified-memory fault log)".into(),
                ));
            }
        };
        let start_ns = match &t.start {
            None => 0,
            Some(s) => parse_ns(s.get_ref())
                .map_err(|e| value_error(key("start"), Some(s.span()), e.to_string()))?,
        };
        let name = match &t.name {
            Some(n) if n.get_ref().trim().is_empty() => {
                return Err(value_error(
                    key("name"),
                    Some(n.span()),
                    "expected a non-empty name".into(),
                ));
            }
            Some(n) if n.get_ref().chars().count() > MAX_NAME_CHARS => {
                return Err(value_error(
                    key("name"),
                    Some(n.span()),
                    format!(
                        "expected a name of at most {MAX_NAME_CHARS} characters (it heads report columns); this one has {}",
                        n.get_ref().chars().count()
                    ),
                ));
            }
            Some(n) => n.get_ref().clone(),
            // A trace's file stem may be long: the default keeps to the names' limit.
            None => {
                let index = i.to_string();
                let stem: String = app_name
                    .chars()
                    .take(MAX_NAME_CHARS - index.len())
                    .collect();
                stem + &index
            }
        };
        if tenants.iter().any(|other| other.name == name) {
            return Err(value_error(
                key("name"),
                t.name.as_ref().map(|n| n.span()),
                format!("expected a name no other tenant has; {name:?} is taken"),
            ));
        }
        let labels: Vec<String> = ["runtime_stack", "runtime_code", "runtime_constant"]
            .iter()
            .map(|l| (*l).to_owned())
            .chain(program.buffers.iter().map(|b| b.label.clone()))
            .collect();
        let unknown_label = |field: &str, label: &str, span: std::ops::Range<usize>| {
            value_error(
                key(&format!("{field}.{label}")),
                Some(span),
                format!(
                    "{app_name} has no buffer {label:?}; expected one of: {}",
                    labels.join(", ")
                ),
            )
        };
        // A priorities file first; the scenario's own entries override it.
        let from_file = match &t.priorities_file {
            None => PrioritiesFile::default(),
            Some(file) => {
                // "{app}" stands for the tenant's app, so that a sweep over apps keeps each
                // app's own profile.
                let relative = file.get_ref().replace("{app}", &app_name);
                let file_path = parent.join(relative);
                let loaded = PrioritiesFile::load(&file_path)
                    .map_err(|m| value_error(key("priorities_file"), Some(file.span()), m))?;
                let unknown = loaded
                    .priorities
                    .keys()
                    .chain(loaded.chunk_priorities.keys())
                    .find(|l| !labels.contains(l));
                if let Some(label) = unknown {
                    return Err(value_error(
                        key("priorities_file"),
                        Some(file.span()),
                        format!(
                            "{}: {app_name} has no buffer {label:?}; was the file made for another app?",
                            file_path.display(),
                        ),
                    ));
                }
                loaded
            }
        };
        let mut priorities = from_file.priorities;
        for (label, priority) in &t.priorities {
            if !labels.contains(label) {
                return Err(unknown_label("priorities", label, priority.span()));
            }
            priorities.insert(label.clone(), *priority.get_ref());
        }
        // Chunks per buffer label at this chunk size: lists for priority-chunk must fit.
        let runtime_bytes = [
            preset.runtime_stack_bytes,
            preset.runtime_code_bytes,
            preset.runtime_constant_bytes,
        ];
        let chunks_of = |label: &str| {
            let bytes = labels[..3]
                .iter()
                .zip(runtime_bytes)
                .find(|(l, _)| *l == label)
                .map(|(_, b)| b)
                .or_else(|| {
                    program
                        .buffers
                        .iter()
                        .find(|b| b.label == label)
                        .map(|b| b.bytes)
                })
                .unwrap_or(0);
            bytes.div_ceil(chunk_bytes) as usize
        };
        let per_chunk = policy.uses_chunk_priorities();
        if per_chunk && let Some(file) = &t.priorities_file {
            // The profiler writes one entry per chunk: another count means the file was
            // made for another chunk size or input size, and would apply wrongly.
            let made_for = || {
                format!(
                    "made for {} at size {}",
                    from_file.app.as_deref().unwrap_or("an unnamed app"),
                    from_file.size.as_deref().unwrap_or("unknown")
                )
            };
            if let Some((label, list)) = from_file
                .chunk_priorities
                .iter()
                .find(|(label, list)| list.len() != chunks_of(label))
            {
                return Err(value_error(
                    key("priorities_file"),
                    Some(file.span()),
                    format!(
                        "chunk_priorities.{label} has {} entries, but {label} has {} chunks of {} at size {size:?} ({}); regenerate it with gpuswap profile {} --size {size} --chunk-size {}",
                        list.len(),
                        chunks_of(label),
                        format_bytes(chunk_bytes),
                        made_for(),
                        app_name,
                        format_bytes(chunk_bytes).replace(' ', "").replace(".0", "")
                    ),
                ));
            }
        }
        let mut chunk_priorities = from_file.chunk_priorities;
        for (label, list) in &t.chunk_priorities {
            if !labels.contains(label) {
                return Err(unknown_label("chunk_priorities", label, list.span()));
            }
            // Shorter lists are allowed: missing chunks take the buffer's priority.
            if per_chunk && list.get_ref().len() > chunks_of(label) {
                return Err(value_error(
                    key(&format!("chunk_priorities.{label}")),
                    Some(list.span()),
                    format!(
                        "expected at most {} entries, one per {} chunk of {label} at size {size:?}; got {}",
                        chunks_of(label),
                        format_bytes(chunk_bytes),
                        list.get_ref().len()
                    ),
                ));
            }
            chunk_priorities.insert(label.clone(), list.get_ref().clone());
        }
        tenants.push(TenantSpec {
            start_ns,
            priorities,
            chunk_priorities,
            endless: model.is_some_and(|a| a.endless()),
            sm_share: model.map_or(1.0, |a| a.sm_utilization()),
            logged_faults_per_batch: logged,
            timing,
            contract: contracts[i].0,
            ..TenantSpec::new(name, app_name, program)
        });
    }
    if tenants.iter().all(|t| t.endless) {
        let i = tenants.len() - 1;
        return Err(value_error(
            format!("tenant[{i}].app"),
            file.tenant[i].app.as_ref().map(Spanned::span),
            format!(
                "{} runs until the other tenants end; expected at least one tenant that is not endless",
                tenants[i].app
            ),
        ));
    }

    // Oversubscription as the papers make it: limit the VRAM the tenants get, not their
    // inputs; the working set is what their programs allocate at most. PILOT's
    // subscription blocks VRAM off with a cudaMalloc'd filler that the driver never
    // evicts: the same limit, made from below 1 as well (0.75 leaves room to spare).
    let ratio = file
        .device
        .oversubscription
        .as_ref()
        .or(file.device.subscription.as_ref());
    let tenant_vram_bytes = match ratio {
        None => tenant_vram_bytes,
        Some(ratio) => {
            // The runtime's own buffers (stack, code, constants) are not managed memory:
            // they keep their VRAM, and the ratio applies to the rest. Managed memory
            // comes in whole pages: at a ratio of 1 every page of the working set fits.
            const PAGE_BYTES: u64 = gpuswap_core::uvm::pages::PAGE_BYTES;
            let working_set: u64 = tenants
                .iter()
                .map(|t| t.program.peak_footprint_bytes(PAGE_BYTES))
                .sum();
            let runtime = tenants.len() as u64 * preset.runtime_bytes();
            let managed = (working_set as f64 / ratio.get_ref()).ceil() as u64;
            let wanted =
                managed.next_multiple_of(PAGE_BYTES) + runtime.next_multiple_of(PAGE_BYTES);
            if file.device.subscription.is_some() && wanted > preset.tenant_vram_bytes() {
                return Err(value_error(
                    "device.subscription".into(),
                    Some(ratio.span()),
                    format!(
                        "subscription {} needs {} of VRAM beside the filler, but {} has {} for tenants; expected a higher ratio or smaller inputs",
                        ratio.get_ref(),
                        format_bytes(wanted),
                        preset.name,
                        format_bytes(preset.tenant_vram_bytes())
                    ),
                ));
            }
            wanted.clamp(4096, preset.tenant_vram_bytes())
        }
    };

    let scheduling = scheduling(&file.scheduler, &policy, &value_error)?;

    let seed = match &file.seed {
        None => 0,
        Some(seed) => u64::try_from(*seed.get_ref()).map_err(|_| {
            value_error(
                "seed".into(),
                Some(seed.span()),
                format!(
                    "expected a whole number from 0 to {} (TOML's integer range), got {}",
                    i64::MAX,
                    seed.get_ref()
                ),
            )
        })?,
    };
    Ok(Scenario {
        has_sweep: file.sweep.is_some(),
        name: path
            .file_stem()
            .map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned()),
        seed,
        config: {
            let mut config = SimConfig::new(preset, tenant_vram_bytes, policy, tenants);
            config.manager.chunk_bytes = chunk_bytes;
            config.manager.host_bytes = host_bytes;
            config.manager.return_interval_ns = return_interval_ns;
            config.manager.seed = seed;
            config.sharing = sharing;
            config.manager.scheduling = scheduling;
            config.optimum = optimum;
            config
        },
    })
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

/// Refuses `what`, which only unified memory has (its fault batches, page streams or
/// kernels' migrations), under a mode that does not page: the one place the scenario
/// asks whether the memory is demand paged.
fn paged_only(
    policy: &PolicySettings,
    what: &str,
    key: String,
    span: Option<std::ops::Range<usize>>,
    value_error: ValueError,
) -> Result<(), ScenarioError> {
    if policy.needs().page_faults {
        return Ok(());
    }
    Err(value_error(
        key,
        span,
        format!(
            "{what}; expected [manager] mode = \"uvm\", not {:?}",
            policy.name()
        ),
    ))
}

/// The share of the device's VRAM bandwidth a replayed trace's kernels use while it
/// runs alone: a snapshot does not record its kernels' traffic. Ours, unconfirmed; set
/// `trace_bandwidth` to what a profiler (Nsight Compute's DRAM throughput) measured.
pub const DEFAULT_TRACE_BANDWIDTH_SHARE: f64 = 0.5;

/// How a scenario reports a bad value: key, where in the file, what was expected.
type ValueError<'a> = &'a dyn Fn(String, Option<std::ops::Range<usize>>, String) -> ScenarioError;

/// The app a tenant names.
fn find_app(
    name: &Spanned<String>,
    key: &str,
    value_error: ValueError,
) -> Result<&'static dyn apps::AppModel, ScenarioError> {
    apps::find(name.get_ref()).ok_or_else(|| {
        let known: Vec<_> = apps::all().iter().map(|a| a.name()).collect();
        value_error(
            key.into(),
            Some(name.span()),
            format!(
                "unknown app {:?}; expected one of: {}",
                name.get_ref(),
                known.join(", ")
            ),
        )
    })
}

/// How often a tenant's app repeats its main computation.
fn repeat(t: &TenantTable, key: &str, value_error: ValueError) -> Result<u32, ScenarioError> {
    let Some(r) = &t.repeat else { return Ok(1) };
    u32::try_from(*r.get_ref())
        .ok()
        .filter(|r| *r >= 1)
        .ok_or_else(|| {
            value_error(
                key.into(),
                Some(r.span()),
                format!(
                    "expected a whole number from 1 to {}, got {}",
                    u32::MAX,
                    r.get_ref()
                ),
            )
        })
}

/// A tenant replaying the PyTorch memory snapshot `trace` (relative to `dir`): its
/// workload name (the file's stem), program and timing (`Snapshot::timing`).
fn trace_program(
    t: &TenantTable,
    trace: &Spanned<String>,
    dir: &Path,
    preset: &preset::Preset,
    key: &dyn Fn(&str) -> String,
    value_error: ValueError,
) -> Result<(String, (Program, String)), ScenarioError> {
    refuse_app_keys(t, "a trace", key, value_error)?;
    let share = match &t.trace_bandwidth {
        None => DEFAULT_TRACE_BANDWIDTH_SHARE,
        Some(v) if (0.0..=1.0).contains(v.get_ref()) => *v.get_ref(),
        Some(v) => {
            return Err(value_error(
                key("trace_bandwidth"),
                Some(v.span()),
                format!(
                    "expected the share of the device's VRAM bandwidth the replayed kernels use, from 0 to 1; got {}",
                    v.get_ref()
                ),
            ));
        }
    };
    let bytes_per_us = share * preset.vram_bytes_per_s / 1e6;
    read_replayed(trace, &key("trace"), dir, value_error, |bytes| {
        let snapshot = Snapshot::parse(bytes)?;
        Ok::<_, SnapshotError>((snapshot.program(bytes_per_us)?, snapshot.timing()))
    })
}

/// A tenant replaying the unified-memory fault log `log` (relative to `dir`): its
/// workload name (the file's stem) and the log. Only demand paging (mode `uvm`) has
/// fault batches to replay.
fn fault_log(
    t: &TenantTable,
    log: &Spanned<String>,
    dir: &Path,
    policy: &PolicySettings,
    key: &dyn Fn(&str) -> String,
    value_error: ValueError,
) -> Result<(String, FaultLog), ScenarioError> {
    refuse_app_keys(t, "a fault log", key, value_error)?;
    paged_only(
        policy,
        "fault_log replays unified memory's fault batches",
        key("fault_log"),
        Some(log.span()),
        value_error,
    )?;
    read_replayed(log, &key("fault_log"), dir, value_error, FaultLog::parse)
}

/// Refuses the keys that size an app (`size`, `repeat`) on a tenant replaying `what`.
fn refuse_app_keys(
    t: &TenantTable,
    what: &str,
    key: &dyn Fn(&str) -> String,
    value_error: ValueError,
) -> Result<(), ScenarioError> {
    for (field, span) in [
        ("size", t.size.as_ref().map(Spanned::span)),
        ("repeat", t.repeat.as_ref().map(Spanned::span)),
    ] {
        if span.is_some() {
            return Err(value_error(
                key(field),
                span,
                format!("{field} applies to an app; {what} replays what it recorded"),
            ));
        }
    }
    Ok(())
}

/// Reads the file a tenant replays (`file`, relative to `dir`, under scenario key
/// `key`) and parses it: the workload's name (the file's stem) and what `parse` made of
/// it. An error names the key and the file.
fn read_replayed<T, E: std::fmt::Display>(
    file: &Spanned<String>,
    key: &str,
    dir: &Path,
    value_error: ValueError,
    parse: impl FnOnce(&[u8]) -> Result<T, E>,
) -> Result<(String, T), ScenarioError> {
    let path = dir.join(file.get_ref());
    let fail = |message: String| {
        value_error(
            key.into(),
            Some(file.span()),
            format!("{}: {message}", path.display()),
        )
    };
    let bytes = std::fs::read(&path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let parsed = parse(&bytes).map_err(|e| fail(e.to_string()))?;
    let name = path
        .file_stem()
        .map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned());
    Ok((name, parsed))
}

/// The `[scheduler]` table as the core's settings.
fn scheduling(
    table: &SchedulerTable,
    policy: &PolicySettings,
    value_error: &dyn Fn(String, Option<std::ops::Range<usize>>, String) -> ScenarioError,
) -> Result<SchedulingConfig, ScenarioError> {
    let mut config = SchedulingConfig::default();
    let entry = match &table.policy {
        None => &scheduling::POLICIES[0],
        Some(name) => scheduling::find(name.get_ref()).ok_or_else(|| {
            let known: Vec<_> = scheduling::POLICIES.iter().map(|p| p.choice.name).collect();
            value_error(
                "scheduler.policy".into(),
                Some(name.span()),
                format!(
                    "unknown scheduling policy {:?}; expected one of: {}",
                    name.get_ref(),
                    known.join(", ")
                ),
            )
        })?,
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
                config.policy
            ),
        ))
    };
    if let Some(wait) = &table.max_wait {
        applies("max_wait", wait)?;
        config.max_wait_ns = parse_ns(wait.get_ref()).map_err(|e| {
            value_error(
                "scheduler.max_wait".into(),
                Some(wait.span()),
                e.to_string(),
            )
        })?;
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
    Ok(config)
}

/// The `[device]` table's sharing model, with its quantum.
fn sharing(
    device: &DeviceTable,
    value_error: &dyn Fn(String, Option<std::ops::Range<usize>>, String) -> ScenarioError,
) -> Result<Sharing, ScenarioError> {
    let name = device.sharing.as_ref();
    let sharing = match name.map(|n| n.get_ref().as_str()) {
        None | Some("time-slice") => Sharing::TimeSlice,
        Some("mps") => Sharing::Mps,
        Some("exclusive-quantum") => Sharing::ExclusiveQuantum {
            quantum_ns: DEFAULT_QUANTUM_NS,
        },
        Some(other) => {
            return Err(value_error(
                "device.sharing".into(),
                name.map(Spanned::span),
                format!(
                    "unknown sharing model {other:?}; expected one of: {}",
                    Sharing::NAMES.join(", ")
                ),
            ));
        }
    };
    let Some(quantum) = &device.quantum else {
        return Ok(sharing);
    };
    let key = || "device.quantum".to_owned();
    if !matches!(sharing, Sharing::ExclusiveQuantum { .. }) {
        return Err(value_error(
            key(),
            Some(quantum.span()),
            format!(
                "a quantum applies to sharing = \"exclusive-quantum\" only, not {:?}",
                sharing.name()
            ),
        ));
    }
    let quantum_ns = parse_ns(quantum.get_ref())
        .ok()
        .filter(|ns| *ns > 0)
        .ok_or_else(|| {
            value_error(
                key(),
                Some(quantum.span()),
                "expected a positive duration with a unit: ns, us, ms or s".into(),
            )
        })?;
    Ok(Sharing::ExclusiveQuantum { quantum_ns })
}

/// Reads an optional choice among named values; an unknown name is an error listing
/// the names.
/// The `[manager]` table's mode and parameters as registry settings; a parameter the
/// preset cannot support (reference bits, say) is refused with the presets that can.
fn policy_settings(
    manager: &ManagerTable,
    tenants: u64,
    preset: &preset::Preset,
    value_error: &dyn Fn(String, Option<std::ops::Range<usize>>, String) -> ScenarioError,
) -> Result<PolicySettings, ScenarioError> {
    let tenants = u32::try_from(tenants).unwrap_or(u32::MAX);
    let span = manager.mode.as_ref().map(Spanned::span);
    let mut settings = match &manager.mode {
        None => PolicySettings::new("native", tenants),
        Some(mode) => PolicySettings::new(mode.get_ref(), tenants),
    }
    .map_err(|e| value_error("manager.mode".into(), span.clone(), e.to_string()))?;
    for (key, value) in &manager.params {
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
    // What the policy needs that the device must have: the one place that holds a
    // mode against the preset's hardware.
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
    Ok(settings)
}

#[cfg(test)]
#[path = "scenario_tests.rs"]
mod tests;
