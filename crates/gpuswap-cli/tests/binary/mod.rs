//! Running the `gpuswap` binary from tests, shared by the test files that do.

// Each test file uses a part of this.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs the binary with output to a pipe (wide tables, whatever `COLUMNS` the tests
/// inherit).
pub fn gpuswap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(args)
        .env_remove("COLUMNS")
        .output()
        .expect("the binary runs")
}

/// What the binary wrote to standard error.
pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("utf-8 output")
}

/// A file of the repository, by its path from the root.
pub fn repo_file(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}
