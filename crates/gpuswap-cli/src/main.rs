//! `gpuswap`: share one GPU's memory among many tenants, on a simulated GPU.

#[macro_use]
mod stdout;

mod bench;
mod check_cmd;
mod commands;
mod compare;
mod contract_keys;
mod daemon_cmd;
mod glossary;
mod gpu_time_keys;
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
mod table;
mod text;
mod trace_cmd;
mod vgpu_scenario;
mod vm_figures;

#[cfg(test)]
mod fuzz_tests;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ColorChoice, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

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
    Run(commands::RunArgs),
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
        Command::Run(args) => commands::run(&args),
        Command::Presets { json } => commands::presets(json),
        Command::Policies { json } => commands::policies(json),
        Command::Apps { app, size, json } => commands::apps(app.as_deref(), &size, json),
        Command::Keys { json } => commands::keys(json),
        Command::Init { file, force } => commands::init(file.as_deref(), force),
        Command::Metrics => commands::emit(glossary::GLOSSARY),
        Command::Report(args) => commands::report(&args),
        Command::Trace(args) => commands::emit_or_bad_input(trace_cmd::run(&args)),
        Command::Place(args) => commands::emit_or_bad_input(place_cmd::run(&args)),
        Command::Completions { shell } => commands::completions(shell, Cli::command()),
        Command::Man { dir } => commands::man(dir.as_deref(), Cli::command()),
        Command::Profile(args) => commands::profile(&args),
        Command::Sweep(args) => commands::sweep_exit(sweep::run(&args)),
        Command::Merge(args) => commands::sweep_exit(sweep::merge(&args)),
        Command::Compare(args) => commands::compare(&args),
        Command::Daemon(args) => commands::real_gpu_exit(daemon_cmd::daemon(&args)),
        Command::Top(args) => commands::real_gpu_exit(daemon_cmd::top(&args)),
        Command::Bench(args) => commands::sweep_exit(bench::run(&args)),
        Command::Check(args) => commands::check(&args),
    }
}
