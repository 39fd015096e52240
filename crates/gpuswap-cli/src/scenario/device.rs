//! The `[device]` table: the simulated GPU, the VRAM its tenants get and how they share
//! it.

use gpuswap_core::gpu_time::NVSHARE_QUANTUM_NS;
#[cfg(doc)]
use gpuswap_core::gpu_time::TurnSettings;
use gpuswap_core::uvm::pages::PAGE_BYTES;
use gpuswap_sim::engine::{Sharing, TenantSpec};
use gpuswap_sim::preset::{self, Preset};
use gpuswap_sim::units::{format_bytes, parse_bytes, parse_ns};
use serde::Deserialize;
use toml::Spanned;

use super::values::{ScenarioError, ValueError, find_named, parsed, positive_ns};

/// Default preset when a scenario names none: the GPUswap testbed.
pub const DEFAULT_PRESET: &str = "gtx480";

/// The `[device]` table as the file writes it.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct DeviceTable {
    preset: Option<Spanned<String>>,
    vram_limit: Option<Spanned<String>>,
    memory_limit: Option<Spanned<String>>,
    host_memory: Option<Spanned<String>>,
    oversubscription: Option<Spanned<f64>>,
    subscription: Option<Spanned<f64>>,
    pub(super) sharing: Option<Spanned<String>>,
    quantum: Option<Spanned<String>>,
    time_slice: Option<Spanned<String>>,
    preemption_cost: Option<Spanned<String>>,
    link_scale: Option<Spanned<f64>>,
}

/// The `[device]` table, checked.
pub(super) struct Device {
    /// The simulated GPU, its host link scaled by `link_scale`.
    pub preset: Preset,
    /// VRAM for tenants as a limit sets it (all the preset has for them without one); a
    /// ratio replaces it once the tenants' programs are known ([`Device::vram_for`]).
    pub tenant_vram_bytes: u64,
    /// `oversubscription` or `subscription`, whichever is set.
    ratio: Option<Ratio>,
    /// How the tenants' kernels share the GPU.
    pub sharing: Sharing,
    /// `sharing = "exclusive-quantum"`: turns that always hold (nvshare's lock), this
    /// long; the manager takes them ([`TurnSettings::exclusive`]).
    pub exclusive_quantum_ns: Option<u64>,
    /// Host memory for evicted or host-placed chunks.
    pub host_bytes: u64,
}

/// A ratio of the tenants' working set to their VRAM, set instead of a limit.
struct Ratio {
    value: Spanned<f64>,
    /// PILOT's subscription, whose filler cannot make more VRAM than the device has: a
    /// ratio that asks for more is refused rather than cut to what there is.
    filler: bool,
}

/// Checks the `[device]` table against the presets.
pub(super) fn parse(table: &DeviceTable, value_error: ValueError) -> Result<Device, ScenarioError> {
    let mut preset = match &table.preset {
        None => preset::find(DEFAULT_PRESET).expect("default preset exists"),
        Some(name) => find_named(
            name,
            "device.preset",
            preset::find,
            |name| format!("unknown preset {name:?}"),
            || preset::all().iter().map(|p| p.name).collect(),
            value_error,
        )?,
    };
    if let (Some(_), Some(ratio)) = (&table.oversubscription, &table.subscription) {
        return Err(value_error(
            "device.subscription".into(),
            Some(ratio.span()),
            "expected either device.subscription or device.oversubscription, not both".into(),
        ));
    }
    // This order of the checks is the order a file's mistakes are reported in.
    if let Some(ratio) = &table.subscription {
        check_ratio(
            table,
            "device.subscription",
            ratio,
            |r| r > 0.0,
            "a ratio above 0 (the tenants' working sets over the VRAM the filler leaves, 0.75 for 75 %)",
            value_error,
        )?;
    }
    let (sharing, exclusive_quantum_ns) = sharing(table, &preset, value_error)?;
    if let Some(ratio) = &table.oversubscription {
        check_ratio(
            table,
            "device.oversubscription",
            ratio,
            |r| r >= 1.0,
            "a ratio of at least 1 (the tenants' working set over the VRAM they get, 1.5 for 150 %)",
            value_error,
        )?;
    }
    let tenant_vram_bytes = limit_bytes(table, &preset, value_error)?;
    if let Some(scale) = &table.link_scale {
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
    let host_bytes = match &table.host_memory {
        None => preset.host_memory_bytes,
        Some(size) => parsed(size, "device.host_memory".into(), parse_bytes, value_error)?,
    };
    let ratio = (table.oversubscription.clone())
        .map(|value| Ratio {
            value,
            filler: false,
        })
        .or_else(|| {
            (table.subscription.clone()).map(|value| Ratio {
                value,
                filler: true,
            })
        });
    Ok(Device {
        preset,
        tenant_vram_bytes,
        ratio,
        sharing,
        exclusive_quantum_ns,
        host_bytes,
    })
}

/// Checks `ratio`, the value of `key` (`device.subscription` or
/// `device.oversubscription`): it stands instead of a VRAM limit, and `valid` says which
/// ratios make sense (`expected` says it in words).
fn check_ratio(
    table: &DeviceTable,
    key: &str,
    ratio: &Spanned<f64>,
    valid: fn(f64) -> bool,
    expected: &str,
    value_error: ValueError,
) -> Result<(), ScenarioError> {
    if table.vram_limit.is_some() || table.memory_limit.is_some() {
        return Err(value_error(
            key.into(),
            Some(ratio.span()),
            format!("expected either {key} or a VRAM limit (vram_limit, memory_limit), not both"),
        ));
    }
    if !(ratio.get_ref().is_finite() && valid(*ratio.get_ref())) {
        return Err(value_error(
            key.into(),
            Some(ratio.span()),
            format!("expected {expected}, got {}", ratio.get_ref()),
        ));
    }
    Ok(())
}

/// VRAM for tenants as `vram_limit` or `memory_limit` sets it, or all `preset` has for
/// them.
fn limit_bytes(
    table: &DeviceTable,
    preset: &Preset,
    value_error: ValueError,
) -> Result<u64, ScenarioError> {
    match (&table.vram_limit, &table.memory_limit) {
        (None, None) => Ok(preset.tenant_vram_bytes()),
        (Some(_), Some(limit)) => Err(value_error(
            "device.memory_limit".to_owned(),
            Some(limit.span()),
            "expected either device.vram_limit (VRAM for tenants) or device.memory_limit (VRAM the driver's structures included), not both".into(),
        )),
        (Some(limit), None) => {
            let key = || "device.vram_limit".to_owned();
            let bytes = parsed(limit, key(), parse_bytes, value_error)?;
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
            Ok(bytes)
        }
        // The papers limited all of VRAM; the driver's structures stay in it.
        (None, Some(limit)) => {
            let key = || "device.memory_limit".to_owned();
            let bytes = parsed(limit, key(), parse_bytes, value_error)?;
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
            Ok(bytes - preset.driver_reserved_bytes)
        }
    }
}

/// What `sharing` may name: the compute engine's models, and nvshare's lock, which is
/// the manager's turns (`Device::exclusive_quantum_ns`).
const SHARING_NAMES: [&str; 4] = [
    Sharing::NAMES[0],
    Sharing::NAMES[1],
    Sharing::NAMES[2],
    EXCLUSIVE_QUANTUM,
];

/// The alias of turns that always hold (nvshare's lock).
const EXCLUSIVE_QUANTUM: &str = "exclusive-quantum";

/// The sharing model, and the quantum when it is `exclusive-quantum`. Without a
/// `sharing`, the preset's own: preemptive slices where it has compute preemption.
fn sharing(
    table: &DeviceTable,
    preset: &Preset,
    value_error: ValueError,
) -> Result<(Sharing, Option<u64>), ScenarioError> {
    let name = table.sharing.as_ref();
    let (sharing, exclusive) = match name.map(|n| n.get_ref().as_str()) {
        None => (Sharing::of_preset(preset), false),
        Some("time-slice") => (Sharing::TimeSlice, false),
        Some("mps") => (Sharing::Mps, false),
        Some("preemptive") => {
            let Some(slicing) = preset.time_slicing else {
                return Err(value_error(
                    "device.sharing".into(),
                    name.map(Spanned::span),
                    format!(
                        "{} has no compute preemption (Pascal and later have it); expected time-slice, mps or exclusive-quantum",
                        preset.name
                    ),
                ));
            };
            (Sharing::Preemptive(slicing), false)
        }
        Some(EXCLUSIVE_QUANTUM) => (Sharing::TimeSlice, true),
        Some(other) => {
            return Err(value_error(
                "device.sharing".into(),
                name.map(Spanned::span),
                format!(
                    "unknown sharing model {other:?}; expected one of: {}",
                    SHARING_NAMES.join(", ")
                ),
            ));
        }
    };
    let sharing = time_slicing(table, sharing, value_error)?;
    let default = exclusive.then_some(NVSHARE_QUANTUM_NS);
    let Some(quantum) = &table.quantum else {
        return Ok((sharing, default));
    };
    let key = || "device.quantum".to_owned();
    if !exclusive {
        return Err(value_error(
            key(),
            Some(quantum.span()),
            format!(
                "a quantum applies to sharing = \"exclusive-quantum\" only, not {:?}",
                sharing.name()
            ),
        ));
    }
    let quantum_ns = positive_ns(quantum, key(), value_error)?;
    Ok((sharing, Some(quantum_ns)))
}

/// `sharing` with the table's `time_slice` and `preemption_cost`, which apply to
/// preemptive slices only.
fn time_slicing(
    table: &DeviceTable,
    sharing: Sharing,
    value_error: ValueError,
) -> Result<Sharing, ScenarioError> {
    let keys = [
        ("device.time_slice", &table.time_slice),
        ("device.preemption_cost", &table.preemption_cost),
    ];
    let Sharing::Preemptive(mut slicing) = sharing else {
        if let Some((key, Some(value))) = keys.iter().find(|(_, v)| v.is_some()) {
            return Err(value_error(
                (*key).into(),
                Some(value.span()),
                format!(
                    "{} applies to sharing = \"preemptive\" only, not {:?}",
                    &key["device.".len()..],
                    sharing.name()
                ),
            ));
        }
        return Ok(sharing);
    };
    if let Some(slice) = &table.time_slice {
        slicing.slice_ns = positive_ns(slice, "device.time_slice".into(), value_error)?;
    }
    if let Some(cost) = &table.preemption_cost {
        slicing.preemption_cost_ns =
            parsed(cost, "device.preemption_cost".into(), parse_ns, value_error)?;
    }
    Ok(Sharing::Preemptive(slicing))
}

impl Device {
    /// VRAM for `tenants`: [`Device::tenant_vram_bytes`], or what the ratio makes of
    /// their working set when the table sets one.
    pub fn vram_for(
        &self,
        tenants: &[TenantSpec],
        value_error: ValueError,
    ) -> Result<u64, ScenarioError> {
        // Oversubscription as the papers make it: limit the VRAM the tenants get, not
        // their inputs; the working set is what their programs allocate at most. PILOT's
        // subscription blocks VRAM off with a cudaMalloc'd filler that the driver never
        // evicts: the same limit, made from below 1 as well (0.75 leaves room to spare).
        let Some(Ratio {
            value: ratio,
            filler,
        }) = &self.ratio
        else {
            return Ok(self.tenant_vram_bytes);
        };
        let preset = &self.preset;
        // The runtime's own buffers (stack, code, constants) are not managed memory:
        // they keep their VRAM, and the ratio applies to the rest. Managed memory
        // comes in whole pages: at a ratio of 1 every page of the working set fits.
        let working_set: u64 = tenants
            .iter()
            .map(|t| t.program.peak_footprint_bytes(PAGE_BYTES))
            .sum();
        let runtime = tenants.len() as u64 * preset.runtime_bytes();
        let managed = (working_set as f64 / ratio.get_ref()).ceil() as u64;
        let wanted = managed.next_multiple_of(PAGE_BYTES) + runtime.next_multiple_of(PAGE_BYTES);
        if *filler && wanted > preset.tenant_vram_bytes() {
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
        Ok(wanted.clamp(4096, preset.tenant_vram_bytes()))
    }
}
