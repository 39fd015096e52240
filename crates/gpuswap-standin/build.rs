//! Builds the stand-in `libcuda.so.1` and its C test programs into `<profile dir>/standin/`
//! with the C compiler that the `cc` crate finds (gcc or cc; `CC` overrides).

use std::path::{Path, PathBuf};
use std::{env, fs};

/// The C sources and headers; each one reruns this script when it changes.
const INPUTS: &[&str] = &[
    "c/cuda_subset.h",
    "c/gpuswap_common.h",
    "c/standin.c",
    "c/e2e_client.c",
    "c/vmm_probe.c",
    "c/vmm_client.c",
    "c/pool_client.c",
];

/// Flags of every compile: strict warnings, and no fused multiply-add, so that the
/// stand-in's and the client's float arithmetic round alike.
const COMMON: &[&str] = &[
    "-std=gnu11",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-ffp-contract=off",
];

fn main() {
    for input in INPUTS {
        println!("cargo:rerun-if-changed={input}");
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let c_dir = manifest.join("c");
    // OUT_DIR is <target>/<profile>/build/gpuswap-standin-<hash>/out.
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let dir = out_dir
        .ancestors()
        .nth(3)
        .expect("OUT_DIR has at least three parent directories")
        .join("standin");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));

    let include = format!("-I{}", c_dir.display());
    let lib = dir.join("libcuda.so.1");
    compile(
        "the stand-in libcuda.so.1",
        &[
            include.as_str(),
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            path_str(&lib),
            path_str(&c_dir.join("standin.c")),
            "-lpthread",
            "-ldl",
            "-lrt",
        ],
    );
    let link = dir.join("libcuda.so");
    if fs::symlink_metadata(&link).is_ok() {
        fs::remove_file(&link).unwrap_or_else(|e| panic!("cannot remove {}: {e}", link.display()));
    }
    std::os::unix::fs::symlink("libcuda.so.1", &link)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", link.display()));

    // Linked by soname and without an rpath: LD_LIBRARY_PATH picks the stand-in or,
    // on a GPU machine, NVIDIA's libcuda.so.1.
    let search = format!("-L{}", dir.display());
    for (source, program) in [
        ("e2e_client.c", "gpuswap-e2e-client"),
        ("vmm_probe.c", "gpuswap-vmm-probe"),
        ("vmm_client.c", "gpuswap-vmm-client"),
        ("pool_client.c", "gpuswap-pool-client"),
    ] {
        compile(
            program,
            &[
                include.as_str(),
                "-o",
                path_str(&dir.join(program)),
                path_str(&c_dir.join(source)),
                search.as_str(),
                "-l:libcuda.so.1",
            ],
        );
    }
    println!("cargo:rustc-env=GPUSWAP_STANDIN_DIR={}", dir.display());
}

fn path_str(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("path is not UTF-8: {}", path.display()))
}

/// Runs the C compiler with the common flags plus `args`; panics with its output on failure.
fn compile(what: &str, args: &[&str]) {
    let mut cmd = cc::Build::new()
        .cargo_metadata(false)
        .get_compiler()
        .to_command();
    cmd.args(COMMON).args(args);
    let shown = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let output = cmd.output().unwrap_or_else(|e| {
        panic!(
            "gpuswap-standin: cannot run the C compiler: {e}\n{shown}\n\
             Building gpuswap-standin needs a C compiler (gcc or cc, or one named by CC)."
        )
    });
    if !output.status.success() {
        panic!(
            "gpuswap-standin: compiling {what} failed ({}):\n{shown}\n{}{}\n\
             Building gpuswap-standin needs a working C compiler (gcc or cc, or one named \
             by CC) with the glibc headers.",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
    }
}
