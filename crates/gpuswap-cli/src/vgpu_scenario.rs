//! Scenario files for the virtualised integrated GPU (`gpuswap-vgpu`): VMs instead of
//! tenants, a placement algorithm instead of a memory manager mode.
//!
//! ```toml
//! [device]
//! preset = "hd530"
//! [manager]
//! placement = "dymgpu-size"   # gvirt | gscale | dymgpu-size | dymgpu-util
//! [[vm]]
//! workload = "urbanterror"    # see `gpuswap apps`
//! high_memory = "384MiB"      # default 384MiB
//! start = "0s"
//! duration = "60s"            # frame workloads run until then; jobs until done
//! count = 11                  # this many VMs alike
//! ```
//!
//! A file with `[[vm]]` tables is one of these ([`is_vgpu`]). Mistakes are
//! [`ScenarioError`]s naming the file, the key and its line.

use std::path::Path;

use gpuswap_core::MIB;
use gpuswap_core::placement::{PLACEMENTS, PlacementEntry, find_placement};
use gpuswap_sim::engine::RunLimits;
use gpuswap_sim::units::{parse_bytes, parse_ns};
use gpuswap_vgpu::engine::{VgpuConfig, VmSpec};
use gpuswap_vgpu::preset::{self, VgpuPreset};
use gpuswap_vgpu::workload;
use serde::Deserialize;
use toml::Spanned;

use crate::scenario::{self, ScenarioError, ValueError, find_named, parsed};

/// Default preset of a VM scenario: DymGPU's testbed.
const DEFAULT_PRESET: &str = "hd530";
/// Default high graphics memory per VM: the spec's smallest DomU size.
const DEFAULT_HIGH_MEMORY: &str = "384MiB";
/// Sets the run's bounds (`--max-sim-time`, `--max-events`) on a VM scenario's config.
pub fn apply_limits(config: &mut VgpuConfig, limits: &RunLimits) {
    config.max_sim_ns = limits.max_sim_ns;
    config.max_events = limits.max_events;
}

/// A VM scenario ready to run.
#[derive(Clone, Debug)]
pub struct VgpuScenario {
    /// Name in reports: the file name without extension.
    pub name: String,
    /// What the simulator runs.
    pub config: VgpuConfig,
    /// The file has a `[sweep]` table, which a single run leaves aside.
    pub has_sweep: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    device: Device,
    #[serde(default)]
    manager: Manager,
    vm: Vec<Vm>,
    /// The grid of `gpuswap sweep` (read there).
    sweep: Option<toml::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Device {
    preset: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Manager {
    placement: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Vm {
    name: Option<Spanned<String>>,
    workload: Spanned<String>,
    high_memory: Option<Spanned<String>>,
    start: Option<Spanned<String>>,
    duration: Option<Spanned<String>>,
    count: Option<Spanned<i64>>,
}

/// Whether a scenario table describes VMs on a virtualised GPU (it has `[[vm]]`).
pub fn is_vgpu(table: &toml::Table) -> bool {
    table.contains_key("vm")
}

/// Whether scenario text describes VMs (text that is not TOML is not).
pub fn is_vgpu_text(text: &str) -> bool {
    text.parse::<toml::Table>().is_ok_and(|t| is_vgpu(&t))
}

/// Checks VM scenario text; `path` names it in errors.
pub fn parse(path: &Path, text: &str) -> Result<VgpuScenario, ScenarioError> {
    let file: File = scenario::deserialize(path, text)?;
    let at = scenario::value_error(path, text);
    let value_error: ValueError = &at;
    let preset = device(&file.device, value_error)?;
    let placement = placement(&file.manager, value_error)?;
    let vms = vms(&file.vm, &preset, value_error)?;
    Ok(VgpuScenario {
        name: scenario::name_of(path),
        config: VgpuConfig {
            preset,
            placement,
            vms,
            max_sim_ns: RunLimits::default().max_sim_ns,
            max_events: RunLimits::default().max_events,
        },
        has_sweep: file.sweep.is_some(),
    })
}

/// The `[device]` table: the preset.
fn device(table: &Device, value_error: ValueError) -> Result<VgpuPreset, ScenarioError> {
    match &table.preset {
        None => Ok(preset::find(DEFAULT_PRESET).expect("the default preset exists")),
        Some(name) => find_named(
            name,
            "device.preset",
            preset::find,
            |name| format!("unknown preset {name:?} for VMs"),
            || preset::all().iter().map(|p| p.name).collect(),
            value_error,
        ),
    }
}

/// The `[manager]` table: the placement algorithm.
fn placement(
    table: &Manager,
    value_error: ValueError,
) -> Result<&'static PlacementEntry, ScenarioError> {
    match &table.placement {
        None => Ok(find_placement("gscale").expect("registered")),
        Some(name) => find_named(
            name,
            "manager.placement",
            find_placement,
            |name| format!("unknown placement {name:?}"),
            || PLACEMENTS.iter().map(|p| p.name).collect(),
            value_error,
        ),
    }
}

/// The `[[vm]]` tables' VMs, each table's `count` of them in turn.
fn vms(
    tables: &[Vm],
    preset: &VgpuPreset,
    value_error: ValueError,
) -> Result<Vec<VmSpec>, ScenarioError> {
    if tables.is_empty() {
        return Err(value_error(
            "vm".into(),
            None,
            "expected at least one [[vm]] table".into(),
        ));
    }
    let mut vms = Vec::new();
    for (i, table) in tables.iter().enumerate() {
        let (vm, count) = vm(i, table, preset, value_error)?;
        for k in 0..count {
            let name = if count == 1 {
                vm.name.clone()
            } else {
                format!("{}-{k}", vm.name)
            };
            if vms.iter().any(|v: &VmSpec| v.name == name) {
                return Err(value_error(
                    format!("vm[{i}].name"),
                    table.name.as_ref().map(|n| n.span()),
                    format!("expected names no other VM has; {name:?} is taken"),
                ));
            }
            vms.push(VmSpec { name, ..vm.clone() });
        }
    }
    Ok(vms)
}

/// The `[[vm]]` table `i`: its VM (named after the table's name or its workload) and
/// how many VMs alike it stands for.
fn vm(
    i: usize,
    table: &Vm,
    preset: &VgpuPreset,
    value_error: ValueError,
) -> Result<(VmSpec, u32), ScenarioError> {
    let key = |field: &str| format!("vm[{i}].{field}");
    let w = find_named(
        &table.workload,
        &key("workload"),
        workload::find,
        |name| format!("unknown workload {name:?}"),
        || workload::WORKLOADS.iter().map(|w| w.name).collect(),
        value_error,
    )?;
    let high_memory_bytes = match &table.high_memory {
        None => parse_bytes(DEFAULT_HIGH_MEMORY).expect("a valid default"),
        Some(size) => {
            let bytes = parsed(size, key("high_memory"), parse_bytes, value_error)?;
            if bytes == 0 || bytes > preset.high_memory_bytes {
                return Err(value_error(
                    key("high_memory"),
                    Some(size.span()),
                    format!(
                        "expected a size above 0 and at most the {} MiB of high graphics memory {} has",
                        preset.high_memory_bytes / MIB,
                        preset.name
                    ),
                ));
            }
            bytes
        }
    };
    let start_ns = match &table.start {
        None => 0,
        Some(s) => parsed(s, key("start"), parse_ns, value_error)?,
    };
    let duration_ns = (table.duration.as_ref())
        .map(|d| parsed(d, key("duration"), parse_ns, value_error))
        .transpose()?;
    if matches!(w.kind, workload::Kind::Frames { .. }) && duration_ns.is_none() {
        return Err(value_error(
            key("duration"),
            Some(table.workload.span()),
            format!(
                "{} renders frames until its VM leaves: expected a duration (\"60s\")",
                w.name
            ),
        ));
    }
    let count = match &table.count {
        None => 1,
        Some(c) => u32::try_from(*c.get_ref())
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                value_error(
                    key("count"),
                    Some(c.span()),
                    format!(
                        "expected a whole number from 1 to 1000, got {}",
                        c.get_ref()
                    ),
                )
            })?,
    };
    let name =
        (table.name.as_ref()).map_or_else(|| format!("{}{i}", w.name), |n| n.get_ref().clone());
    let vm = VmSpec {
        name,
        workload: w,
        high_memory_bytes,
        start_ns,
        duration_ns,
    };
    Ok((vm, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<VgpuScenario, ScenarioError> {
        parse(Path::new("v.toml"), text)
    }

    #[test]
    fn a_vm_scenario_is_read_with_defaults_and_counts() {
        let s = check(
            "[manager]\nplacement = \"dymgpu-size\"\n[[vm]]\nworkload = \"urbanterror\"\nduration = \"60s\"\ncount = 3\n\
             [[vm]]\nname = \"job\"\nworkload = \"nw\"\nhigh_memory = \"512MiB\"\nstart = \"2s\"\n",
        )
        .unwrap();
        let c = &s.config;
        assert_eq!(c.preset.name, "hd530");
        assert_eq!(c.placement.name, "dymgpu-size");
        let names: Vec<&str> = c.vms.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            ["urbanterror0-0", "urbanterror0-1", "urbanterror0-2", "job"]
        );
        assert_eq!(c.vms[0].high_memory_bytes, 384 * MIB);
        assert_eq!(c.vms[3].start_ns, 2_000_000_000);
        assert_eq!(c.vms[3].duration_ns, None);
    }

    #[test]
    fn mistakes_name_the_key_line_and_expectation() {
        for (text, expected) in [
            (
                "[[vm]]\nworkload = \"quake\"\n",
                "vm[0].workload (line 2): unknown workload",
            ),
            (
                "[[vm]]\nworkload = \"openarena\"\n",
                "vm[0].duration (line 2): openarena renders frames",
            ),
            (
                "[manager]\nplacement = \"best\"\n[[vm]]\nworkload = \"nw\"\n",
                "manager.placement (line 2): unknown placement",
            ),
            (
                "[[vm]]\nworkload = \"nw\"\ncount = 0\n",
                "vm[0].count (line 3): expected a whole number",
            ),
            (
                "[[vm]]\nworkload = \"nw\"\nhigh_memory = \"8GiB\"\n",
                "vm[0].high_memory (line 3): expected a size above 0 and at most",
            ),
            (
                "[[vm]]\nname = \"a\"\nworkload = \"nw\"\n[[vm]]\nname = \"a\"\nworkload = \"lud\"\n",
                "vm[1].name (line 5): expected names no other VM has",
            ),
            (
                "[[vm]]\nworkload = \"nw\"\nspeed = 2\n",
                "unknown field `speed`",
            ),
        ] {
            let e = check(text).unwrap_err().to_string();
            assert!(e.contains(expected), "{text}: {e}");
        }
    }

    #[test]
    fn vm_files_are_told_apart_from_tenant_files() {
        assert!(is_vgpu_text("[[vm]]\nworkload = \"nw\"\n"));
        assert!(!is_vgpu_text("[[tenant]]\napp = \"nn\"\n"));
        assert!(!is_vgpu_text("not toml ["));
    }
}
