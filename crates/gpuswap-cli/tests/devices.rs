//! One daemon per GPU, found by the GPU's UUID (issue 42, item 1): two stand-in "GPUs"
//! (each its own UUID and its own memory), a daemon bound to each with `--device`, and
//! processes that find their device's daemon with nothing set but their runtime folder.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{interposer, verified};
use gpuswap_daemon::observe;

const GPU_A: &str = "GPU-00000000-0000-4000-8000-00000000000a";
const GPU_B: &str = "GPU-00000000-0000-4000-8000-00000000000b";

/// A runtime folder of the test's own, with a daemon of each GPU in it.
struct Node {
    runtime: PathBuf,
    daemons: Vec<Child>,
}

impl Node {
    fn start(name: &str) -> Node {
        let runtime =
            std::env::temp_dir().join(format!("gpuswap-devices-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&runtime);
        std::fs::create_dir_all(&runtime).unwrap();
        let mut node = Node {
            runtime,
            daemons: Vec::new(),
        };
        for uuid in [GPU_A, GPU_B] {
            let daemon = node
                .command(env!("CARGO_BIN_EXE_gpuswap"))
                .args(["daemon", "--quiet", "--vram", "64MiB", "--device", uuid])
                .spawn()
                .unwrap();
            node.daemons.push(daemon);
            let deadline = Instant::now() + Duration::from_secs(10);
            while observe(&node.socket(uuid)).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "the daemon of {uuid} did not start"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        node
    }

    /// `program` with the node's runtime folder and no socket named.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("XDG_RUNTIME_DIR", &self.runtime)
            .env_remove("GPUSWAP_SOCKET")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Where the daemon of `uuid` listens.
    fn socket(&self, uuid: &str) -> PathBuf {
        self.runtime.join("gpuswap").join(format!("{uuid}.sock"))
    }

    /// The stand-in's client on the GPU `uuid` (its own memory), under the interposer.
    fn client(&self, uuid: &str) -> Command {
        let mut c = self.command(gpuswap_standin::client());
        c.args(["--buffers", "3", "--size", "8MiB", "--rounds", "2"])
            .env("LD_LIBRARY_PATH", gpuswap_standin::dir())
            .env("LD_PRELOAD", interposer())
            .env("GPUSWAP_STANDIN_UUID", uuid)
            .env("GPUSWAP_STANDIN_VRAM", "64MiB")
            .env("GPUSWAP_STANDIN_SHM", shm(&self.runtime, uuid));
        c
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        for uuid in [GPU_A, GPU_B] {
            let _ = std::fs::remove_file(format!("/dev/shm{}", shm(&self.runtime, uuid)));
        }
        let _ = std::fs::remove_dir_all(&self.runtime);
    }
}

/// The stand-in's memory table of GPU `uuid` (each GPU has its own memory).
fn shm(runtime: &Path, uuid: &str) -> String {
    let node = runtime.file_name().unwrap().to_string_lossy().into_owned();
    format!("/{node}-{}", &uuid[uuid.len() - 1..])
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn each_process_finds_its_gpus_daemon_by_uuid_and_top_shows_every_daemon() {
    let node = Node::start("find");
    for uuid in [GPU_A, GPU_B, GPU_A] {
        let out = node.client(uuid).output().unwrap();
        verified(&out, uuid);
    }
    for (uuid, served) in [(GPU_A, 2), (GPU_B, 1)] {
        let snap = observe(&node.socket(uuid)).unwrap();
        assert_eq!(snap.device_uuid, uuid);
        assert_eq!(snap.tenants_served, served, "{uuid}: {snap:?}");
    }
    // `gpuswap top` without --socket: every daemon, each under its GPU.
    let top = node
        .command(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["top", "--iterations", "1"])
        .output()
        .unwrap();
    assert!(top.status.success(), "{top:?}");
    let text = stdout(&top);
    for uuid in [GPU_A, GPU_B] {
        assert!(
            text.contains(&format!("gpuswapd of {uuid}: mode gpuswap")),
            "{text}"
        );
    }
    let json = node
        .command(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["top", "--json"])
        .output()
        .unwrap();
    assert!(!json.status.success());
    let why = String::from_utf8_lossy(&json.stderr);
    assert!(
        why.contains("--json shows one daemon, and 2 are running"),
        "{why}"
    );
}

#[test]
fn a_daemon_bound_to_one_gpu_refuses_a_process_of_another() {
    let node = Node::start("refuse");
    let out = node
        .client(GPU_B)
        .env("GPUSWAP_SOCKET", node.socket(GPU_A))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "this daemon serves {GPU_A}; the process allocates on {GPU_B}"
        )),
        "{stderr}"
    );
    let snap = observe(&node.socket(GPU_A)).unwrap();
    assert_eq!(snap.tenants_served, 0);
}

#[test]
fn a_bad_device_is_refused_before_the_daemon_starts() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args([
            "daemon",
            "--device",
            "GPU-1234",
            "--socket",
            "/tmp/never.sock",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"GPU-1234\" is not a GPU UUID"),
        "{stderr}"
    );
    let index = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["daemon", "--device", "0", "--socket", "/tmp/never.sock"])
        .output()
        .unwrap();
    assert!(!index.status.success());
    let stderr = String::from_utf8_lossy(&index.stderr);
    assert!(
        stderr.contains("is a GPU index; give the GPU's UUID"),
        "{stderr}"
    );
}
