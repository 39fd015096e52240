//! `gpuswap`: share one GPU's memory among many tenants, on a simulated GPU.

mod bench;
mod check_cmd;
mod compare;
mod limits;
mod plot;
mod priorities;
mod profile_cmd;
mod render;
mod scenario;
mod sweep;
mod text;

#[cfg(test)]
mod fuzz_tests;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gpuswap_sim::report::{Baselines, run_and_report_progress};
use gpuswap_sim::{apps, preset};

/// Simulate tenants sharing one GPU's memory and report what each one sees.
#[derive(Parser)]
#[command(name = "gpuswap", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario file and print a report per tenant and for the system.
    Run {
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
    },
    /// List the device presets.
    Presets,
    /// List the built-in apps with their memory use at the default size.
    Apps,
    /// List every manager mode and policy with its parameters and what it needs.
    Policies,
    /// Profile an app's accesses per page, chunk or buffer and derive its priorities.
    Profile(profile_cmd::ProfileArgs),
    /// Run a scenario across a grid of settings and seeds in parallel; write CSV and plots.
    Sweep(sweep::SweepArgs),
    /// Run a scenario's tenants under several managers and compare them side by side.
    Compare(compare::CompareArgs),
    /// Measure the simulator: the full runtime-versus-memory sweep of the eight apps.
    Bench(bench::BenchArgs),
    /// Test the manager under injected faults: random cases, one per seed, with crashes,
    /// failing copies, host memory running out and shuffled schedules.
    Check(check_cmd::CheckArgs),
}

/// Exit code for bad input (scenario files, flags), as clap uses for bad flags.
const EXIT_BAD_INPUT: u8 = 2;

/// Runs a scenario; a run that takes more than a second shows a spinner with the
/// simulated time and events on stderr.
fn run_with_progress(
    loaded: &scenario::Scenario,
) -> Result<gpuswap_sim::report::Report, gpuswap_sim::engine::SimError> {
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

/// Writes `text` to standard output. A reader that stops early (`| head`) is not an
/// error, as for other command-line tools; any other write error is (a full disk).
fn emit(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write the output: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            scenario,
            json,
            seed,
            timeline,
            fail_on_error,
            limits,
        } => {
            let mut loaded = match scenario::load(&scenario) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
            };
            if let Some(seed) = seed {
                loaded.set_seed(seed);
            }
            loaded.config.limits = limits.limits();
            if let Some(file) = &timeline
                && !file.extension().is_some_and(|e| e == "svg" || e == "png")
            {
                eprintln!(
                    "error: --timeline {}: expected a file name ending in .svg or .png (the formats it writes)",
                    file.display()
                );
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            if loaded.has_sweep {
                eprintln!(
                    "note: {} has a [sweep] table; `run` runs its base point (`gpuswap sweep` runs the grid)",
                    scenario.display()
                );
            }
            let result = run_with_progress(&loaded);
            if let (Ok(report), Some(file)) = (&result, &timeline) {
                let series: Vec<(String, Vec<(u64, u64)>)> = report
                    .tenants
                    .iter()
                    .map(|t| (t.name.clone(), t.vram_timeline.clone()))
                    .collect();
                let title = format!(
                    "VRAM held per tenant: {} ({})",
                    report.scenario, report.manager
                );
                let png = file.extension().is_some_and(|e| e == "png");
                let figure = plot::Timeline {
                    title: &title,
                    series: &series,
                    end_ns: report.system.makespan_ns,
                };
                if let Err(e) = plot::save(&file.with_extension(""), (900, 520), png, &figure) {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
            match result {
                Ok(report) => {
                    let text = if json {
                        serde_json::to_string_pretty(&report).expect("reports serialize") + "\n"
                    } else {
                        render::report_table(&report)
                    };
                    let code = emit(&text);
                    let failed = report.system.tenants_failed;
                    if fail_on_error && failed > 0 {
                        eprintln!(
                            "error: {failed} of {} tenants failed (--fail-on-error)",
                            report.tenants.len()
                        );
                        return ExitCode::FAILURE;
                    }
                    return code;
                }
                Err(e) => {
                    eprintln!("error: {}", limits::explain(&e, &scenario, loaded.seed));
                    return ExitCode::FAILURE;
                }
            }
        }
        Command::Presets => return emit(&render::presets_table(&preset::all())),
        Command::Policies => return emit(&render::policies_table()),
        Command::Apps => {
            let device = preset::find(scenario::DEFAULT_PRESET).expect("default preset exists");
            return emit(&render::apps_table(&apps::all(), device.shape()));
        }
        Command::Profile(args) => {
            if let Err(e) = profile_cmd::run(&args) {
                eprintln!("error: {e}");
                return ExitCode::from(match e {
                    profile_cmd::ProfileError::BadInput(_) => EXIT_BAD_INPUT,
                    profile_cmd::ProfileError::Output(_) => 1,
                });
            }
        }
        Command::Sweep(args) => return sweep_exit(sweep::run(&args)),
        Command::Compare(args) => {
            return match compare::run(&args) {
                Ok(reports) => emit(&render::compare_table(&reports)),
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(match e {
                        compare::CompareError::BadInput(_) => EXIT_BAD_INPUT,
                        compare::CompareError::Run(_) => 1,
                    })
                }
            };
        }
        Command::Bench(args) => return sweep_exit(bench::run(&args)),
        Command::Check(args) => {
            return match check_cmd::run(&args) {
                Ok(summary) => emit(&summary),
                Err(failures) => {
                    eprint!("{failures}");
                    ExitCode::FAILURE
                }
            };
        }
    }
    ExitCode::SUCCESS
}

/// The exit code of a sweep (or the benchmark, which is one), with its error printed.
fn sweep_exit(result: Result<(), sweep::SweepError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(match e {
                sweep::SweepError::BadInput(_) => EXIT_BAD_INPUT,
                sweep::SweepError::Output(_) | sweep::SweepError::Failures(_) => 1,
            })
        }
    }
}
