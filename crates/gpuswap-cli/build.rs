//! Puts the commit the binary is built from into `gpuswap --version`
//! (`GPUSWAP_COMMIT`), so that output can be traced to the code that made it. A tree
//! that is not a git checkout, or a machine without git, says "unknown".

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=GPUSWAP_COMMIT={commit}");
    // A new commit moves the branch's ref (or packed-refs), a checkout moves HEAD.
    for path in ["HEAD", "refs/heads", "packed-refs"] {
        println!("cargo:rerun-if-changed=../../.git/{path}");
    }
}
