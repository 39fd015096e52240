//! `gpuswap man`: the manual pages, one per command, each with the exit statuses.
//!
//! clap_mangen's whole-page `render` has no EXIT STATUS section and its SUBCOMMANDS
//! section names a page per command (`gpuswap-run(1)`), so the pages are assembled
//! from its sections here and every page it names can be written with `--dir`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap_mangen::Man;

/// What gpuswap's exit statuses mean, the same for every command.
const EXIT_STATUS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success.
.TP
\fB1\fR
A run or check failed, a tenant failed under \fB\-\-fail\-on\-error\fR, or an output
file could not be written (the message names it).
.TP
\fB2\fR
Bad input: flags, scenario files, traces or sweep folders (the message names the file,
key or line and what was expected).
"#;

/// Tells the reader of the top page where the per-command pages come from.
const PER_COMMAND_PAGES: &str = ".PP\nEach command's page (gpuswap\\-run(1) and the others above) is written by\n\\fBgpuswap man \\-\\-dir\\fR \\fIDIR\\fR.\n";

/// The manual page of `cmd` (built, so that its subcommands know their page names).
pub fn page(cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let man = Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
        out.write_all(PER_COMMAND_PAGES.as_bytes())?;
    }
    out.write_all(EXIT_STATUS.as_bytes())?;
    if cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some() {
        man.render_extra_section(&mut out)?;
    }
    if cmd.get_version().is_some() || cmd.get_long_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

/// `cmd` ready for its pages: built, without clap's `help` subcommand (it has no page).
pub fn prepared(cmd: clap::Command) -> clap::Command {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Writes the page of `cmd` and of every command under it into `dir`; returns the files.
pub fn write_pages(cmd: &clap::Command, dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
    let mut written = Vec::new();
    let mut pending = vec![cmd.clone()];
    while let Some(cmd) = pending.pop() {
        pending.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let file = dir.join(Man::new(cmd.clone()).get_filename());
        let text = page(&cmd).map_err(|e| format!("cannot render {}: {e}", file.display()))?;
        crate::text::write_atomically(&file, String::from_utf8_lossy(&text).as_bytes())
            .map_err(|e| format!("{}: cannot write: {e}", file.display()))?;
        written.push(file);
    }
    written.sort();
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_page_the_top_page_names_is_written_and_each_has_exit_statuses() {
        let cmd = prepared(crate::Cli::command());
        let dir = std::env::temp_dir().join(format!("gpuswap-man-{}/man1", std::process::id()));
        let written = write_pages(&cmd, &dir).unwrap();
        let top = std::fs::read_to_string(dir.join("gpuswap.1")).unwrap();
        let named: Vec<&str> = top
            .split("gpuswap\\-")
            .skip(1)
            .filter_map(|rest| rest.split_once("(1)").map(|(name, _)| name))
            .filter(|name| name.chars().all(|c| c.is_ascii_lowercase()))
            .collect();
        assert!(
            named.contains(&"run") && named.contains(&"sweep"),
            "{named:?}"
        );
        for name in &named {
            let file = dir.join(format!("gpuswap-{name}.1"));
            assert!(
                written.contains(&file),
                "gpuswap.1 names {name} but no page"
            );
        }
        assert!(!named.contains(&"help"), "clap's help command has no page");
        for file in &written {
            let text = std::fs::read_to_string(file).unwrap();
            assert!(text.contains(".SH \"EXIT STATUS\""), "{}", file.display());
            assert!(text.contains(".SH SYNOPSIS"), "{}", file.display());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
