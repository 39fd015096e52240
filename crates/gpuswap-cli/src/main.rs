//! `gpuswap`: share one GPU's memory among many tenants, on a simulated GPU.

#[macro_use]
mod stdout;

mod bench;
mod check_cmd;
mod compare;
mod contract_keys;
mod daemon_cmd;
mod glossary;
mod keys;
mod limits;
mod manual;
mod place_cmd;
mod plot;
mod priorities;
mod profile_cmd;
mod render;
mod report_cmd;
mod scenario;
mod sweep;
mod text;
mod trace_cmd;
mod vgpu_scenario;

#[cfg(test)]
mod fuzz_tests;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ColorChoice, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use gpuswap_sim::report::{Baselines, run_and_report_progress};
use gpuswap_sim::{apps, preset};

/// Simulate tenants sharing one GPU's memory and report what each one sees.
#[derive(Parser)]
#[command(
    name = "gpuswap",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("GPUSWAP_COMMIT"), ")"),
    about,
    after_help = "Examples:\n  \
        gpuswap compare scenarios/quickstart.toml   # what oversubscription costs, per manager\n  \
        gpuswap init my.toml && gpuswap run my.toml # a scenario of your own\n  \
        gpuswap metrics                             # what the figures mean"
)]
struct Cli {
    /// Colour in help and error messages: auto (a terminal, unless NO_COLOR is set),
    /// always or never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario file and print a report per tenant and for the system.
    #[command(after_help = "Examples:\n  \
        gpuswap run scenarios/quickstart.toml\n  \
        gpuswap run scenarios/quickstart.toml --json | jq .system\n  \
        gpuswap run scenarios/quickstart.toml --seed 7 --timeline vram.png\n\n\
        Tables fit the terminal (COLUMNS, or its width): narrower than a table, they print\n\
        one record per row. Output to a pipe or file keeps one row per line.")]
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
    #[command(after_help = "Example:\n  gpuswap presets   # then: [device] preset = \"NAME\"")]
    Presets {
        /// Print every preset with every number as JSON (`gpus`, `vgpus`), for scripts.
        #[arg(long)]
        json: bool,
    },
    /// List the built-in apps with their memory use at the default size, or show one app's
    /// sizes and buffers.
    #[command(after_help = "Examples:\n  \
        gpuswap apps\n  \
        gpuswap apps backprop                 # its sizes and buffer labels\n  \
        gpuswap apps backprop --size rodinia")]
    Apps {
        /// Show this app's sizes and buffers.
        app: Option<String>,
        /// The input size whose buffers to show (with APP).
        #[arg(long, default_value = "default", requires = "app")]
        size: String,
        /// Print the listing as JSON (`apps` and `workloads`; with APP: its `buffers`),
        /// for scripts.
        #[arg(long)]
        json: bool,
    },
    /// List every manager mode and policy with its parameters and what it needs.
    #[command(
        after_help = "Example:\n  gpuswap policies   # then: [manager] mode = \"gpuswap\", victim = ..."
    )]
    Policies {
        /// Print the settings as JSON (`setting`, `value`, `default`, `needs`,
        /// `description` each), for scripts.
        #[arg(long)]
        json: bool,
    },
    /// List every scenario key with its type, default and meaning.
    #[command(after_help = "Example:\n  gpuswap keys | grep device.")]
    Keys {
        /// Print the keys as JSON (`path`, `value`, `default`, `help` each), for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Write a commented scenario template with every key (to FILE, or to standard output).
    #[command(after_help = "Examples:\n  \
        gpuswap init my.toml && gpuswap run my.toml\n  \
        gpuswap init > my.toml")]
    Init {
        /// Where to write it (default: standard output).
        file: Option<PathBuf>,
        /// Overwrite FILE if it exists.
        #[arg(long)]
        force: bool,
    },
    /// What every figure in the reports means.
    #[command(long_about = glossary::GLOSSARY, after_help = "Example:\n  gpuswap metrics")]
    Metrics,
    /// Profile an app's accesses per page, chunk or buffer and derive its priorities.
    Profile(profile_cmd::ProfileArgs),
    /// Run a scenario across a grid of settings and seeds in parallel; write CSV and plots.
    Sweep(sweep::SweepArgs),
    /// Merge the folders of a sharded sweep (`sweep --shard I/N`) into the whole sweep's
    /// results, summary and plots.
    Merge(sweep::MergeArgs),
    /// Run a scenario's tenants under several managers and compare them side by side.
    Compare(compare::CompareArgs),
    /// Measure the simulator: the full runtime-versus-memory sweep of the eight apps.
    Bench(bench::BenchArgs),
    /// Test the manager under injected faults: random cases, one per seed, with crashes,
    /// failing copies, host memory running out and shuffled schedules.
    Check(check_cmd::CheckArgs),
    /// Place vGPUs in graphics memory slots with one algorithm and count the copies it
    /// costs (gvirt, gscale, dymgpu-size, dymgpu-util).
    Place(place_cmd::PlaceArgs),
    /// Summarize a PyTorch memory snapshot or a unified-memory fault log before a run
    /// replays it (`trace info FILE`).
    #[command(after_help = "Examples:\n  \
        gpuswap trace info scenarios/traces/train.pickle\n  \
        gpuswap trace info scenarios/traces/abc-faults.log --json")]
    Trace(trace_cmd::TraceArgs),
    /// Write a sweep's folder as one self-contained web page: the scenario, every table
    /// and figure, and how to read them.
    Report(report_cmd::ReportArgs),
    /// Run gpuswapd: GPUswap for real CUDA processes on this machine's GPU. Processes
    /// started with LD_PRELOAD=libgpuswap_cuda.so become its tenants.
    #[command(after_help = "Examples:\n  \
        gpuswap daemon --socket /tmp/gpuswap.sock &\n  \
        GPUSWAP_SOCKET=/tmp/gpuswap.sock LD_PRELOAD=target/release/libgpuswap_cuda.so python train.py\n  \
        gpuswap daemon --vram 70GiB --set victim=largest-share\n\n\
        See the README's section \"Run it on a real GPU\".")]
    Daemon(daemon_cmd::DaemonArgs),
    /// Show a running daemon's tenants, refreshed like top (--json: once).
    #[command(after_help = "Examples:\n  \
        gpuswap top --socket /tmp/gpuswap.sock\n  \
        gpuswap top --json | jq '.tenants[] | {name, vram_bytes, host_bytes}'")]
    Top(daemon_cmd::TopArgs),
    /// Print a shell completion script.
    #[command(after_help = "Examples:\n  \
        gpuswap completions bash > ~/.local/share/bash-completion/completions/gpuswap\n  \
        gpuswap completions zsh > ~/.zfunc/_gpuswap")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or write every command's page into a folder.
    #[command(after_help = "Examples:\n  \
        gpuswap man > gpuswap.1 && man ./gpuswap.1\n  \
        gpuswap man --dir ~/.local/share/man/man1   # gpuswap.1, gpuswap-run.1, ...")]
    Man {
        /// Write gpuswap.1 and one page per command (gpuswap-run.1, ...) into this folder.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
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

/// Writes `text` to standard output (see [`stdout::write`]); exit status 1 if it could
/// not.
fn emit(text: &str) -> ExitCode {
    match stdout::write(text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes a command's text, or says its error: bad input, exit status 2.
fn emit_or_bad_input(result: Result<String, impl std::fmt::Display>) -> ExitCode {
    match result {
        Ok(text) => emit(&text),
        Err(e) => {
            say!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// Writes `value` as pretty JSON with a final newline.
fn emit_json(value: &impl serde::Serialize) -> ExitCode {
    emit(&(serde_json::to_string_pretty(value).expect("listings serialize") + "\n"))
}

/// Exit status of the daemon and top: their errors (unreachable daemon, bad flags,
/// a busy socket) are the user's to fix.
fn real_gpu_exit(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// The `--color` choice among the arguments, read before clap parses them so that
/// clap's own help and errors follow it; the last one given wins, as clap's would.
fn color_choice(args: &[std::ffi::OsString]) -> ColorChoice {
    let mut choice = ColorChoice::Auto;
    let mut words = args.iter().filter_map(|a| a.to_str());
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        }
        let value = match word.strip_prefix("--color") {
            Some("") => words.next(),
            Some(rest) => rest.strip_prefix('='),
            None => None,
        };
        if let Some(parsed) = value.and_then(|v| ColorChoice::from_str(v, false).ok()) {
            choice = parsed;
        }
    }
    choice
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let matches = Cli::command()
        .color(color_choice(&args))
        .get_matches_from(&args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Run {
            scenario,
            json,
            seed,
            timeline,
            fail_on_error,
            limits,
        } => {
            let text = match scenario::read(&scenario) {
                Ok(text) => text,
                Err(e) => {
                    say!("error: {e}");
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
            };
            if vgpu_scenario::is_vgpu_text(&text) {
                return run_vgpu(&scenario, &text, json, timeline.is_some(), &limits);
            }
            let mut loaded = match scenario::parse(&scenario, &text) {
                Ok(s) => s,
                Err(e) => {
                    say!("error: {e}");
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
            };
            if let Some(seed) = seed {
                loaded.set_seed(seed);
            }
            loaded.config.limits = limits.limits();
            for warning in trace_cmd::invented_timing_warnings(&scenario, &loaded.config.tenants) {
                say!("{warning}");
            }
            if let Some(file) = &timeline
                && !file.extension().is_some_and(|e| e == "svg" || e == "png")
            {
                say!(
                    "error: --timeline {}: expected a file name ending in .svg or .png (the formats it writes)",
                    file.display()
                );
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            if loaded.has_sweep {
                say!(
                    "note: {} has a [sweep] table; `run` runs its base point (`gpuswap sweep` runs the grid)",
                    scenario.display()
                );
            }
            let result = run_with_progress(&loaded);
            if let (Ok(report), Some(file)) = (&result, &timeline) {
                let png = file.extension().is_some_and(|e| e == "png");
                let figure = plot::Timeline::of(report);
                if let Err(e) = plot::save(&file.with_extension(""), (900, 520), png, &figure) {
                    say!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
            match result {
                Ok(report) => {
                    let text = if json {
                        serde_json::to_string_pretty(&report).expect("reports serialize") + "\n"
                    } else {
                        render::report_table(&report, render::terminal_width())
                    };
                    let code = emit(&text);
                    let failed = report.system.tenants_failed;
                    if fail_on_error && failed > 0 {
                        say!(
                            "error: {failed} of {} tenants failed (--fail-on-error)",
                            report.tenants.len()
                        );
                        return ExitCode::FAILURE;
                    }
                    return code;
                }
                Err(e) => {
                    say!("error: {}", limits::explain(&e, &scenario, loaded.seed));
                    return ExitCode::FAILURE;
                }
            }
        }
        Command::Presets { json: true } => {
            return emit_json(&serde_json::json!({
                "gpus": preset::all(),
                "vgpus": gpuswap_vgpu::preset::all(),
            }));
        }
        Command::Presets { json: false } => {
            let width = render::terminal_width();
            return emit(&format!(
                "{}\nvirtualised integrated GPUs (scenarios with [[vm]] tables):\n{}",
                render::presets_table(&preset::all(), width),
                render::vgpu_presets_table(&gpuswap_vgpu::preset::all(), width)
            ));
        }
        Command::Policies { json: true } => return emit_json(&render::policy_rows()),
        Command::Policies { json: false } => {
            return emit(&render::policies_table(
                &render::policy_rows(),
                render::terminal_width(),
            ));
        }
        Command::Apps { app, size, json } => {
            let device = preset::find(scenario::DEFAULT_PRESET).expect("default preset exists");
            let width = render::terminal_width();
            let Some(name) = app else {
                let rows = render::app_rows(&apps::all(), device.shape());
                let workloads = gpuswap_vgpu::workload::WORKLOADS;
                if json {
                    return emit_json(&serde_json::json!({
                        "apps": rows,
                        "workloads": workloads,
                    }));
                }
                return emit(&format!(
                    "{}\nvGPU workloads (scenarios with [[vm]] tables):\n{}",
                    render::apps_table(&rows, width),
                    render::workloads_table(workloads, width)
                ));
            };
            let Some(model) = apps::find(&name) else {
                let known: Vec<_> = apps::all().iter().map(|a| a.name()).collect();
                say!(
                    "error: unknown app {name:?}; expected one of: {}",
                    known.join(", ")
                );
                return ExitCode::from(EXIT_BAD_INPUT);
            };
            return match model.program(&size, 1, device.shape()) {
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
                Ok(program) => emit(&render::app_details(model, &size, &program, width)),
                Err(e) => {
                    say!("error: --size {size:?}: {}", e.message);
                    ExitCode::from(EXIT_BAD_INPUT)
                }
            };
        }
        Command::Keys { json: true } => return emit_json(&keys::all()),
        Command::Keys { json: false } => {
            return emit(&render::keys_table(
                &keys::table_rows(),
                render::terminal_width(),
            ));
        }
        Command::Init { file, force } => {
            let text = keys::template();
            let Some(file) = file else {
                return emit(&text);
            };
            if file.exists() && !force {
                say!(
                    "error: {} exists; pass --force to overwrite it",
                    file.display()
                );
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            if let Err(e) = crate::text::write_atomically(&file, &text) {
                say!("error: {}: cannot write: {e}", file.display());
                return ExitCode::FAILURE;
            }
            return emit(&format!(
                "wrote {}; run it with: gpuswap run {}\n",
                file.display(),
                file.display()
            ));
        }
        Command::Metrics => return emit(glossary::GLOSSARY),
        Command::Report(args) => {
            // Asked here, not in report_cmd: the sweep writes its own page through it.
            if let Err(e) = sweep::check_finished(&args.dir) {
                say!("error: {}: {e}", args.dir.display());
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            return match report_cmd::run(&args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    say!("error: {e}");
                    ExitCode::from(e.exit_code())
                }
            };
        }
        Command::Trace(args) => return emit_or_bad_input(trace_cmd::run(&args)),
        Command::Place(args) => return emit_or_bad_input(place_cmd::run(&args)),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "gpuswap", &mut script);
            return emit(&String::from_utf8_lossy(&script));
        }
        Command::Man { dir } => {
            let cmd = manual::prepared(Cli::command());
            if let Some(dir) = dir {
                return match manual::write_pages(&cmd, &dir) {
                    Ok(files) => emit(&format!(
                        "wrote {} pages into {}\n",
                        files.len(),
                        dir.display()
                    )),
                    Err(e) => {
                        say!("error: {e}");
                        ExitCode::FAILURE
                    }
                };
            }
            return match manual::page(&cmd) {
                Ok(page) => emit(&String::from_utf8_lossy(&page)),
                Err(e) => {
                    say!("error: cannot render the manual page: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Profile(args) => {
            if let Err(e) = profile_cmd::run(&args) {
                say!("error: {e}");
                return ExitCode::from(match e {
                    profile_cmd::ProfileError::BadInput(_) => EXIT_BAD_INPUT,
                    profile_cmd::ProfileError::Output(_) => 1,
                });
            }
        }
        Command::Sweep(args) => return sweep_exit(sweep::run(&args)),
        Command::Merge(args) => return sweep_exit(sweep::merge(&args)),
        Command::Compare(args) => {
            let text = match scenario::read(&args.scenario) {
                Ok(text) => text,
                Err(e) => {
                    say!("error: {e}");
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
            };
            if vgpu_scenario::is_vgpu_text(&text) {
                return match compare::run_vgpu(&args, &text) {
                    Ok(table) => emit(&table),
                    Err(e) => {
                        say!("error: {e}");
                        ExitCode::from(match e {
                            compare::CompareError::BadInput(_) => EXIT_BAD_INPUT,
                            compare::CompareError::Run(_) => 1,
                        })
                    }
                };
            }
            return match compare::run(&args, &text) {
                Ok(comparison) if args.json => emit_json(&serde_json::json!({
                    "reports": comparison.reports,
                    "left_out": comparison.left_out,
                })),
                Ok(comparison) => {
                    let mut out =
                        render::compare_table(&comparison.reports, render::terminal_width());
                    if let Some(note) = comparison.left_out {
                        out += &format!("{note}\n");
                    }
                    emit(&out)
                }
                Err(e) => {
                    say!("error: {e}");
                    ExitCode::from(match e {
                        compare::CompareError::BadInput(_) => EXIT_BAD_INPUT,
                        compare::CompareError::Run(_) => 1,
                    })
                }
            };
        }
        Command::Daemon(args) => return real_gpu_exit(daemon_cmd::daemon(&args)),
        Command::Top(args) => return real_gpu_exit(daemon_cmd::top(&args)),
        Command::Bench(args) => return sweep_exit(bench::run(&args)),
        Command::Check(args) => {
            return match check_cmd::run(&args) {
                Ok(summary) => emit(&summary),
                Err(check_cmd::CheckError::BadInput(e)) => {
                    say!("error: {e}");
                    ExitCode::from(EXIT_BAD_INPUT)
                }
                Err(check_cmd::CheckError::Failed(failures)) => {
                    say!("{}", failures.trim_end());
                    ExitCode::FAILURE
                }
            };
        }
    }
    ExitCode::SUCCESS
}

/// `gpuswap run` on a VM scenario (virtualised integrated GPU).
fn run_vgpu(
    path: &std::path::Path,
    text: &str,
    json: bool,
    timeline: bool,
    limits: &limits::LimitArgs,
) -> ExitCode {
    let mut loaded = match vgpu_scenario::parse(path, text) {
        Ok(s) => s,
        Err(e) => {
            say!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if timeline {
        say!("error: --timeline plots VRAM per tenant; a VM scenario has no VRAM timeline");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if loaded.has_sweep {
        say!(
            "note: {} has a [sweep] table; `run` runs its base point (`gpuswap sweep` runs the grid)",
            path.display()
        );
    }
    vgpu_scenario::apply_limits(&mut loaded.config, &limits.limits());
    let outcome = match gpuswap_vgpu::engine::simulate(loaded.config.clone()) {
        Ok(o) => o,
        Err(e) => {
            say!("error: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    if json {
        let report = serde_json::json!({
            "scenario": loaded.name,
            "device": loaded.config.preset.name,
            "placement": loaded.config.placement.name,
            "vms": outcome.vms.iter().map(|v| {
                let mut value = serde_json::to_value(v).expect("outcomes serialize");
                // A VM that rendered no frame (refused) has no frame rate, not 0.
                value["fps"] = serde_json::json!((v.frames > 0).then(|| v.fps()));
                value
            }).collect::<Vec<_>>(),
            "system": {
                "switches": outcome.switches,
                "slot_copies": outcome.slot_copies,
                "entries_copied": outcome.entries_copied,
                "switch_cycles": outcome.switch_cycles,
                "cycles_per_switch": (outcome.switches > 0).then(|| outcome.cycles_per_switch()),
                "reallocations": outcome.reallocations,
                "idle_releases": outcome.idle_releases,
                "makespan_ns": outcome.makespan_ns,
            },
        });
        return emit_json(&report);
    }
    emit(&render::vgpu_table(
        &loaded.name,
        &loaded.config,
        &outcome,
        render::terminal_width(),
    ))
}

/// The exit code of a sweep (or the benchmark, which is one), with its error printed.
fn sweep_exit(result: Result<(), sweep::SweepError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say!("error: {e}");
            ExitCode::from(match e {
                sweep::SweepError::BadInput(_) => EXIT_BAD_INPUT,
                sweep::SweepError::Output(_) | sweep::SweepError::Failures(_) => 1,
            })
        }
    }
}
