//! gpuswap-standin: a CPU stand-in for NVIDIA's CUDA driver library, for CI without a GPU.
//!
//! The build script compiles, with the system C compiler, into `<target>/<profile>/standin/`:
//!
//! - `libcuda.so.1` (and a `libcuda.so` symlink): a test double of the CUDA driver API
//!   written in C (`c/standin.c`). Device memory is process memory, checked against a
//!   table of mappings; the virtual-memory-management calls (`cuMemCreate`, `cuMemMap`,
//!   ...) are backed by memfds and `mmap`; kernels are three built-ins run on the CPU;
//!   VRAM capacity is shared by every process on the machine through a POSIX
//!   shared-memory table. See the crate's `README.md` for the calls and environment
//!   variables.
//! - `gpuswap-e2e-client`: a plain C driver-API program that allocates buffers, fills them
//!   with kernels and verifies them round after round. It links `libcuda.so.1` by soname
//!   with no rpath, so `LD_LIBRARY_PATH` picks the stand-in, or on a GPU machine the real
//!   driver (there it loads the kernels from `c/e2e_kernels.cu` compiled to PTX).
//! - `gpuswap-vmm-probe`: a C program that moves a chunk from a device handle to a host
//!   handle at an unchanged address and checks bytes and free-memory figures.
//! - `gpuswap-pool-client`: a C program that allocates as the allocators beside
//!   `cuMemAlloc` do (stream-ordered pools, managed memory, pitched memory, IPC between
//!   two processes) and verifies every byte.
//!
//! This crate says where those files are, and reads a program's verdict ([`verified`]).
//! Run them with `LD_LIBRARY_PATH` set to [`dir()`]:
//!
//! ```no_run
//! let status = std::process::Command::new(gpuswap_standin::client())
//!     .env("LD_LIBRARY_PATH", gpuswap_standin::dir())
//!     .env("GPUSWAP_STANDIN_VRAM", "256MiB")
//!     .args(["--buffers", "2", "--size", "8MiB"])
//!     .status()
//!     .unwrap();
//! assert!(status.success());
//! ```

use std::path::{Path, PathBuf};
use std::process::Output;

/// The directory holding the stand-in library and the test programs, as built by this
/// crate's build script (`<target>/<profile>/standin`). Put it on `LD_LIBRARY_PATH`.
pub fn dir() -> &'static Path {
    Path::new(env!("GPUSWAP_STANDIN_DIR"))
}

/// The stand-in driver library, `dir()/libcuda.so.1`.
pub fn library() -> PathBuf {
    dir().join("libcuda.so.1")
}

/// The VRAM that the stand-in's accounting table `shm` (a `GPUSWAP_STANDIN_SHM` name;
/// device i's, i > 0, is that name and `-i`) charges to process `pid` now; 0 without
/// the table. The table: 256 slots of a pid (i32), padding and bytes (u64).
pub fn charged_bytes(shm: &str, pid: u32) -> u64 {
    let table = std::fs::read(format!("/dev/shm{shm}")).unwrap_or_default();
    table
        .chunks_exact(16)
        .filter(|slot| slot[..4] == (pid as i32).to_ne_bytes())
        .map(|slot| u64::from_ne_bytes(slot[8..].try_into().expect("8 bytes")))
        .sum()
}

/// The end-to-end test client, `dir()/gpuswap-e2e-client` (its flags: `README.md`).
pub fn client() -> PathBuf {
    dir().join("gpuswap-e2e-client")
}

/// The virtual-memory-management probe, `dir()/gpuswap-vmm-probe` (exit status 0 when
/// every check passes).
pub fn vmm_probe() -> PathBuf {
    dir().join("gpuswap-vmm-probe")
}

/// The virtual-memory-management client, `dir()/gpuswap-vmm-client`: an
/// expandable-segments-like allocator that verifies its data (its flags: `README.md`).
pub fn vmm_client() -> PathBuf {
    dir().join("gpuswap-vmm-client")
}

/// The allocators' test client, `dir()/gpuswap-pool-client`: stream-ordered pools,
/// managed memory, pitched memory and IPC (its modes: `c/pool_client.c`).
pub fn pool_client() -> PathBuf {
    dir().join("gpuswap-pool-client")
}

/// The gpuswap interposer, `libgpuswap_cuda.so`, for tests that run programs under it:
/// built once per test process into `profile_dir` (`<target>/<profile>`, where it
/// lands). Cargo builds a dependency's rlib only, so the cdylib is built here, by the
/// cargo that runs the tests (`CARGO`; its lock is free while tests run).
pub fn interposer(profile_dir: &Path) -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target_dir = profile_dir.parent().expect("a profile folder has a parent");
            let cargo = std::env::var_os("CARGO").unwrap_or("cargo".into());
            let mut build = std::process::Command::new(cargo);
            build
                .args(["build", "--quiet", "-p", "gpuswap-cuda", "--target-dir"])
                .arg(target_dir);
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                build.arg("--release");
            }
            let status = build.status().expect("cargo runs");
            assert!(status.success(), "building the interposer failed");
            let lib = profile_dir.join("libgpuswap_cuda.so");
            assert!(lib.exists(), "{} not built", lib.display());
            lib
        })
        .clone()
}

/// A test program's last line of output as JSON, after checking that it succeeded and
/// verified every byte (`"ok": true`); `who` names it in the panic.
pub fn verified(out: &Output, who: &str) -> serde_json::Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{who} failed ({}):\n{stderr}",
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{who}'s last line is not JSON ({e}): {last}\n{stderr}"));
    assert_eq!(json["ok"], true, "{who}: {json}\n{stderr}");
    json
}
