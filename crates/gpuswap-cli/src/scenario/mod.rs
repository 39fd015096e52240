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
//!
//! Each table has its module, which checks it and returns its typed piece: `device`
//! (`[device]`), `manager` (`[manager]`), `scheduler` (`[scheduler]`) and `tenant`
//! (`[[tenant]]`). [`parse`] reads them in the order they depend on each other, which
//! is also the order their mistakes are reported in.

mod device;
mod manager;
mod scheduler;
mod tenant;
mod values;

use std::path::Path;

use gpuswap_core::gpu_time::{GpuTime, TurnSettings};
use gpuswap_sim::engine::SimConfig;
use serde::Deserialize;
use toml::Spanned;

pub use device::DEFAULT_PRESET;
pub use values::ScenarioError;
pub(crate) use values::{ValueError, deserialize, find_named, name_of, parsed, value_error};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    /// An integer as TOML defines them (64-bit signed), so that `run` and `sweep`, which
    /// reads the file as a TOML table, accept the same seeds.
    seed: Option<Spanned<i64>>,
    #[serde(default)]
    device: device::DeviceTable,
    #[serde(default)]
    manager: manager::ManagerTable,
    #[serde(default)]
    scheduler: scheduler::SchedulerTable,
    #[serde(default)]
    tenant: Vec<tenant::TenantTable>,
    /// The grid of `gpuswap sweep` (read there): a single run runs the base point.
    sweep: Option<toml::Value>,
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
    /// Sets the seed of the run: the report's, the manager's and the tenants' random
    /// choices' (their exponential idle times).
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
        self.config.manager.seed = seed;
        for tenant in &mut self.config.tenants {
            tenant.idle_between = tenant.idle_between.with_seed(seed);
        }
    }
}

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
    let file: File = deserialize(path, text)?;
    let at = value_error(path, text);
    let value_error: ValueError = &at;
    let device = device::parse(&file.device, value_error)?;
    // Contracts first: static partitioning cuts VRAM into the tenants' total weight.
    let contracts = tenant::contracts(&file.tenant, value_error)?;
    let total_weight: u64 = contracts.iter().map(|(c, _)| u64::from(c.weight)).sum();
    let policy =
        manager::policy_settings(&file.manager, total_weight, &device.preset, value_error)?;
    tenant::check_contracts(&contracts, &policy, &device, value_error)?;
    let manager = manager::parse(
        &file.manager,
        policy,
        device.preset.remote_cost(),
        value_error,
    )?;
    let tenants = tenant::parse(
        &file.tenant,
        &contracts,
        &tenant::Setting {
            preset: &device.preset,
            manager: &manager,
            // Files a tenant names (traces, priorities) are relative to the scenario.
            dir: path.parent().unwrap_or(Path::new(".")),
            value_error,
        },
    )?;
    let tenant_vram_bytes = device.vram_for(&tenants, value_error)?;
    let scheduling = scheduler::parse(&file.scheduler, &manager.policy, value_error)?;
    let seed = seed(file.seed.as_ref(), value_error)?;
    let gpu_time = gpu_time(&file, &device, &manager, value_error)?;
    let mut config = SimConfig::new(device.preset, tenant_vram_bytes, manager.policy, tenants);
    config.manager.chunk_bytes = manager.chunk_bytes;
    config.manager.host_bytes = device.host_bytes;
    config.manager.return_interval_ns = manager.return_interval_ns;
    config.sharing = device.sharing;
    config.manager.gpu_time = gpu_time;
    config.manager.idle = manager.idle;
    config.manager.scheduling = scheduling;
    config.optimum = manager.optimum;
    let mut scenario = Scenario {
        has_sweep: file.sweep.is_some(),
        name: name_of(path),
        seed,
        config,
    };
    scenario.set_seed(seed);
    Ok(scenario)
}

/// How tenants share the GPU's time: `[manager] gpu_time`, or its alias `[device]
/// sharing = "exclusive-quantum"`, not both.
fn gpu_time(
    file: &File,
    device: &device::Device,
    manager: &manager::Manager,
    value_error: ValueError,
) -> Result<GpuTime, ScenarioError> {
    let turns = device.exclusive_quantum_ns.is_some()
        || matches!(manager.gpu_time, Some(GpuTime::Turns(_) | GpuTime::Auto(_)));
    if turns && manager.policy.needs().launch_gating {
        let (key, span) = match &file.manager.gpu_time_span() {
            Some(span) => ("manager.gpu_time", Some(span.clone())),
            None => (
                "device.sharing",
                file.device.sharing.as_ref().map(Spanned::span),
            ),
        };
        return Err(value_error(
            key.into(),
            span,
            format!(
                "turns do not combine with mode {}, whose own scheduler gates launches; use \"concurrent\" or another mode",
                manager.policy.name()
            ),
        ));
    }
    match (device.exclusive_quantum_ns, manager.gpu_time) {
        (Some(_), Some(_)) => Err(value_error(
            "device.sharing".into(),
            file.device.sharing.as_ref().map(Spanned::span),
            "sharing = \"exclusive-quantum\" is turns that always hold; it cannot be combined with [manager] gpu_time, quantum or handover_after (set one of them)".into(),
        )),
        (Some(quantum_ns), None) => Ok(GpuTime::Turns(TurnSettings::exclusive(quantum_ns))),
        (None, gpu_time) => Ok(gpu_time.unwrap_or_default()),
    }
}

/// The `seed` key: 0 when left out.
fn seed(seed: Option<&Spanned<i64>>, value_error: ValueError) -> Result<u64, ScenarioError> {
    let Some(seed) = seed else { return Ok(0) };
    u64::try_from(*seed.get_ref()).map_err(|_| {
        value_error(
            "seed".into(),
            Some(seed.span()),
            format!(
                "expected a whole number from 0 to {} (TOML's integer range), got {}",
                i64::MAX,
                seed.get_ref()
            ),
        )
    })
}

#[cfg(test)]
mod tests;
