//! `gpuswap run`: one scenario, its report as tables or JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gpuswap_sim::report::{Baselines, Report, run_and_report_progress};

use super::exit::{EXIT_BAD_INPUT, emit, emit_json, fail};
use crate::{limits, plot, render, scenario, trace_cmd, vgpu_scenario};

/// `gpuswap run`'s flags.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The scenario (TOML).
    scenario: PathBuf,
    /// Print the report as one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Also plot each tenant's VRAM over time into this file (SVG; .png adds a PNG).
    #[arg(long, value_name = "FILE")]
    timeline: Option<PathBuf>,
    /// Exit with status 1 when a tenant failed (the report is printed all the same).
    #[arg(long)]
    fail_on_error: bool,
    /// Bounds of the run.
    #[command(flatten)]
    limits: limits::LimitArgs,
}

/// Runs the scenario (a VM scenario goes to [`run_vgpu`]) and writes its report.
pub fn run(flags: &RunArgs) -> ExitCode {
    let path = &flags.scenario;
    let text = match scenario::read(path) {
        Ok(text) => text,
        Err(e) => return fail(e, EXIT_BAD_INPUT),
    };
    if vgpu_scenario::is_vgpu_text(&text) {
        return run_vgpu(path, &text, flags);
    }
    let mut loaded = match scenario::parse(path, &text) {
        Ok(s) => s,
        Err(e) => return fail(e, EXIT_BAD_INPUT),
    };
    if let Some(seed) = flags.seed {
        loaded.set_seed(seed);
    }
    loaded.config.limits = flags.limits.limits();
    for warning in trace_cmd::invented_timing_warnings(path, &loaded.config.tenants) {
        say!("{warning}");
    }
    if let Some(file) = &flags.timeline
        && !file.extension().is_some_and(|e| e == "svg" || e == "png")
    {
        return fail(
            format!(
                "--timeline {}: expected a file name ending in .svg or .png (the formats it writes)",
                file.display()
            ),
            EXIT_BAD_INPUT,
        );
    }
    if loaded.has_sweep {
        note_sweep(path);
    }
    let report = match run_with_progress(&loaded) {
        Ok(report) => report,
        Err(e) => return fail(limits::explain(&e, path, loaded.seed), 1),
    };
    if let Some(file) = &flags.timeline {
        let png = file.extension().is_some_and(|e| e == "png");
        let figure = plot::Timeline::of(&report);
        if let Err(e) = plot::save(&file.with_extension(""), (900, 520), png, &figure) {
            return fail(e, 1);
        }
    }
    let text = if flags.json {
        serde_json::to_string_pretty(&report).expect("reports serialize") + "\n"
    } else {
        render::report_table(&report, render::terminal_width())
    };
    let code = emit(&text);
    let failed = report.system.tenants_failed;
    if flags.fail_on_error && failed > 0 {
        say!(
            "error: {failed} of {} tenants failed (--fail-on-error)",
            report.tenants.len()
        );
        return ExitCode::FAILURE;
    }
    code
}

/// Says that `run` runs only the base point of a scenario with a `[sweep]` table.
fn note_sweep(path: &Path) {
    say!(
        "note: {} has a [sweep] table; `run` runs its base point (`gpuswap sweep` runs the grid)",
        path.display()
    );
}

/// Runs a scenario; a run that takes more than a second shows a spinner with the
/// simulated time and events on stderr.
fn run_with_progress(loaded: &scenario::Scenario) -> Result<Report, gpuswap_sim::engine::SimError> {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let started = std::time::Instant::now();
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("a valid template"));
    let mut progress = |sim_ns: u64, events: u64| {
        if bar.is_hidden() && started.elapsed() > std::time::Duration::from_secs(1) {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        bar.set_message(format!(
            "{}: simulated {}, {events} events",
            loaded.name,
            gpuswap_sim::units::format_ns(sim_ns)
        ));
        bar.tick();
    };
    let result = run_and_report_progress(
        &loaded.name,
        loaded.seed,
        &loaded.config,
        &Baselines::default(),
        &mut progress,
    );
    bar.finish_and_clear();
    result
}

/// `gpuswap run` on a VM scenario (virtualised integrated GPU).
fn run_vgpu(path: &Path, text: &str, flags: &RunArgs) -> ExitCode {
    let mut loaded = match vgpu_scenario::parse(path, text) {
        Ok(s) => s,
        Err(e) => return fail(e, EXIT_BAD_INPUT),
    };
    if flags.timeline.is_some() {
        return fail(
            "--timeline plots VRAM per tenant; a VM scenario has no VRAM timeline",
            EXIT_BAD_INPUT,
        );
    }
    if loaded.has_sweep {
        note_sweep(path);
    }
    vgpu_scenario::apply_limits(&mut loaded.config, &flags.limits.limits());
    let outcome = match gpuswap_vgpu::engine::simulate(loaded.config.clone()) {
        Ok(o) => o,
        Err(e) => return fail(format!("{}: {e}", path.display()), 1),
    };
    if flags.json {
        let report = crate::vm_figures::report_json(&loaded.name, &loaded.config, &outcome);
        return emit_json(&report);
    }
    emit(&render::vgpu_table(
        &loaded.name,
        &loaded.config,
        &outcome,
        render::terminal_width(),
    ))
}
