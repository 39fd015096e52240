//! What the daemon's end-to-end tests on the CUDA stand-in share: a world (the test
//! daemon's configuration and the stand-in's shared VRAM table), stand-in programs run
//! under the interposer, what the table charges a process, and a program's verdict.
//! Included with `#[path]` by the tests that run stand-in programs, beside `common`.
// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use gpuswap_core::MIB;
use gpuswap_daemon::DaemonConfig;
pub use gpuswap_standin::verified;

/// One test's world: its daemon's configuration and the stand-in's VRAM table, which
/// the processes of the test share as one GPU's memory.
pub struct World {
    pub config: DaemonConfig,
    shm: String,
}

impl World {
    /// A test daemon named `name` managing `vram_mib` of VRAM, and a table of its own.
    pub fn new(name: &str, vram_mib: u64) -> World {
        let mut config = crate::common::config(name);
        config.vram_bytes = Some(vram_mib * MIB);
        World {
            config,
            shm: format!("/gpuswap-test-{}-{name}", std::process::id()),
        }
    }

    /// `program` with `args` under the interposer, talking to the world's daemon, on a
    /// stand-in of `standin_vram` (a size such as `64MiB`); its pipes are captured.
    pub fn command(&self, program: PathBuf, args: &[&str], standin_vram: &str) -> Command {
        let mut c = Command::new(program);
        c.args(args)
            .env("LD_LIBRARY_PATH", gpuswap_standin::dir())
            .env("LD_PRELOAD", interposer())
            .env("GPUSWAP_SOCKET", &self.config.socket)
            .env("GPUSWAP_STANDIN_VRAM", standin_vram)
            .env("GPUSWAP_STANDIN_SHM", &self.shm)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// The VRAM the stand-in charges to process `pid` now.
    pub fn standin_vram(&self, pid: u32) -> u64 {
        gpuswap_standin::charged_bytes(&self.shm, pid)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(format!("/dev/shm{}", self.shm));
    }
}

/// The interposer, built for this test's profile (`<profile>/deps/<this test>`).
pub fn interposer() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    gpuswap_standin::interposer(exe.parent().unwrap().parent().unwrap())
}
