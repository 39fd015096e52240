//! The commands that list what the simulator knows (presets, policies, apps, keys) and
//! `init`, which writes the keys as a scenario template.

use std::path::Path;
use std::process::ExitCode;

use gpuswap_sim::{apps as app_models, preset};

use super::exit::{EXIT_BAD_INPUT, emit, emit_json, fail};
use crate::{keys as scenario_keys, render, scenario};

/// A listing as JSON (`value`), or as text for the terminal (`text`, given its width).
fn listing(
    json: bool,
    value: &impl serde::Serialize,
    text: impl FnOnce(Option<usize>) -> String,
) -> ExitCode {
    if json {
        emit_json(value)
    } else {
        emit(&text(render::terminal_width()))
    }
}

/// `gpuswap presets`: the GPUs, then the virtualised integrated GPUs.
pub fn presets(json: bool) -> ExitCode {
    let (gpus, vgpus) = (preset::all(), gpuswap_vgpu::preset::all());
    let value = serde_json::json!({ "gpus": gpus, "vgpus": vgpus });
    listing(json, &value, |width| {
        format!(
            "{}\nvirtualised integrated GPUs (scenarios with [[vm]] tables):\n{}",
            render::presets_table(&gpus, width),
            render::vgpu_presets_table(&vgpus, width)
        )
    })
}

/// `gpuswap policies`: every mode and parameter value with what it needs.
pub fn policies(json: bool) -> ExitCode {
    let rows = render::policy_rows();
    listing(json, &rows, |width| render::policies_table(&rows, width))
}

/// `gpuswap keys`: every scenario key.
pub fn keys(json: bool) -> ExitCode {
    listing(json, &scenario_keys::all(), |width| {
        render::keys_table(&scenario_keys::table_rows(), width)
    })
}

/// `gpuswap apps`: the apps and the vGPU workloads, or with `app` that app's buffers at
/// `size`.
pub fn apps(app: Option<&str>, size: &str, json: bool) -> ExitCode {
    let device = preset::find(scenario::DEFAULT_PRESET).expect("default preset exists");
    let Some(name) = app else {
        let rows = render::app_rows(&app_models::all(), device.shape());
        let workloads = gpuswap_vgpu::workload::WORKLOADS;
        let value = serde_json::json!({ "apps": rows, "workloads": workloads });
        return listing(json, &value, |width| {
            format!(
                "{}\nvGPU workloads (scenarios with [[vm]] tables):\n{}",
                render::apps_table(&rows, width),
                render::workloads_table(workloads, width)
            )
        });
    };
    let Some(model) = app_models::find(name) else {
        let known: Vec<_> = app_models::all().iter().map(|a| a.name()).collect();
        return fail(
            format!(
                "unknown app {name:?}; expected one of: {}",
                known.join(", ")
            ),
            EXIT_BAD_INPUT,
        );
    };
    match model.program(size, 1, device.shape()) {
        Ok(program) if json => emit_json(&serde_json::json!({
            "name": model.name(),
            "description": model.description(),
            "sizes": model.sizes_help(),
            "size": size,
            "peak_allocated_bytes": program.peak_allocated_bytes(),
            "buffers": program.buffers.iter().map(|b| serde_json::json!({
                "label": b.label,
                "bytes": b.bytes,
                "kind": render::buffer_kind_name(b.kind),
            })).collect::<Vec<_>>(),
        })),
        Ok(program) => emit(&render::app_details(
            model,
            size,
            &program,
            render::terminal_width(),
        )),
        Err(e) => fail(format!("--size {size:?}: {}", e.message), EXIT_BAD_INPUT),
    }
}

/// `gpuswap init`: the scenario template, to standard output or to `file` (which it
/// overwrites only when `force`).
pub fn init(file: Option<&Path>, force: bool) -> ExitCode {
    let text = scenario_keys::template();
    let Some(file) = file else {
        return emit(&text);
    };
    if file.exists() && !force {
        return fail(
            format!("{} exists; pass --force to overwrite it", file.display()),
            EXIT_BAD_INPUT,
        );
    }
    if let Err(e) = crate::text::write_atomically(file, &text) {
        return fail(format!("{}: cannot write: {e}", file.display()), 1);
    }
    emit(&format!(
        "wrote {}; run it with: gpuswap run {}\n",
        file.display(),
        file.display()
    ))
}
