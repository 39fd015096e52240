//! One function per subcommand that `main` dispatches to, each returning the process's
//! exit status, and the ways they end: text written to standard output, or an error said
//! on standard error with its status.

mod exit;
mod listings;
mod run;

use std::process::ExitCode;

use crate::{check_cmd, compare, manual, profile_cmd, render, report_cmd, scenario, sweep};

pub use exit::{EXIT_BAD_INPUT, emit, emit_or_bad_input, real_gpu_exit, sweep_exit};
use exit::{emit_json, fail};
pub use listings::{apps, init, keys, policies, presets};
pub use run::{RunArgs, run};

/// `gpuswap report`: a finished sweep's folder as one web page.
pub fn report(args: &report_cmd::ReportArgs) -> ExitCode {
    // Asked here, not in report_cmd: the sweep writes its own page through it.
    if let Err(e) = sweep::check_finished(&args.dir) {
        return fail(format!("{}: {e}", args.dir.display()), EXIT_BAD_INPUT);
    }
    match report_cmd::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = e.exit_code();
            fail(e, code)
        }
    }
}

/// `gpuswap profile`: an app's accesses, and the priorities they give.
pub fn profile(args: &profile_cmd::ProfileArgs) -> ExitCode {
    match profile_cmd::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = match e {
                profile_cmd::ProfileError::BadInput(_) => EXIT_BAD_INPUT,
                profile_cmd::ProfileError::Output(_) => 1,
            };
            fail(e, code)
        }
    }
}

/// `gpuswap compare`: a scenario's tenants (or VMs) under several managers (or
/// placements), side by side.
pub fn compare(args: &compare::CompareArgs) -> ExitCode {
    let text = match scenario::read(&args.scenario) {
        Ok(text) => text,
        Err(e) => return fail(e, EXIT_BAD_INPUT),
    };
    let result = if crate::vgpu_scenario::is_vgpu_text(&text) {
        compare::run_vgpu(args, &text).map(|table| emit(&table))
    } else {
        compare::run(args, &text).map(|comparison| {
            if args.json {
                return emit_json(&serde_json::json!({
                    "managers": comparison.labels,
                    "reports": comparison.reports,
                    "left_out": comparison.left_out,
                }));
            }
            let mut out = render::compare_table(
                &comparison.labels,
                &comparison.reports,
                render::terminal_width(),
            );
            if let Some(note) = comparison.left_out {
                out += &format!("{note}\n");
            }
            emit(&out)
        })
    };
    result.unwrap_or_else(|e| {
        let code = match e {
            compare::CompareError::BadInput(_) => EXIT_BAD_INPUT,
            compare::CompareError::Run(_) => 1,
        };
        fail(e, code)
    })
}

/// `gpuswap check`: the manager under injected faults; the failures, if any, on
/// standard error.
pub fn check(args: &check_cmd::CheckArgs) -> ExitCode {
    match check_cmd::run(args) {
        Ok(summary) => emit(&summary),
        Err(check_cmd::CheckError::BadInput(e)) => fail(e, EXIT_BAD_INPUT),
        Err(check_cmd::CheckError::Failed(failures)) => {
            say!("{}", failures.trim_end());
            ExitCode::FAILURE
        }
    }
}

/// `gpuswap completions`: the completion script of `cli` for `shell`.
pub fn completions(shell: clap_complete::Shell, mut cli: clap::Command) -> ExitCode {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli, "gpuswap", &mut script);
    emit(&String::from_utf8_lossy(&script))
}

/// `gpuswap man`: the manual page of `cli`, or every command's page written into `dir`.
pub fn man(dir: Option<&std::path::Path>, cli: clap::Command) -> ExitCode {
    let cmd = manual::prepared(cli);
    if let Some(dir) = dir {
        return match manual::write_pages(&cmd, dir) {
            Ok(files) => emit(&format!(
                "wrote {} pages into {}\n",
                files.len(),
                dir.display()
            )),
            Err(e) => fail(e, 1),
        };
    }
    match manual::page(&cmd) {
        Ok(page) => emit(&String::from_utf8_lossy(&page)),
        Err(e) => fail(format!("cannot render the manual page: {e}"), 1),
    }
}
