//! One daemon per GPU, found by the GPU's UUID (issue 42, item 1): two stand-in "GPUs"
//! (each its own UUID and its own memory), a daemon bound to each with `--device`, and
//! processes that find their device's daemon with nothing set but their runtime folder;
//! a stand-in of two devices, one process allocating on both and holding a connection
//! to each daemon (and a device without one left unmanaged); a daemon bound to a GPU by
//! its index.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{interposer, verified};
use gpuswap_daemon::observe;

const GPU_A: &str = "GPU-00000000-0000-4000-8000-00000000000a";
/// GPU_A's UUID with 1 added to its last byte: also device 1's of a stand-in of two
/// devices whose device 0 is GPU_A.
const GPU_B: &str = "GPU-00000000-0000-4000-8000-00000000000b";

/// A runtime folder of the test's own, with a daemon of each GPU in it.
struct Node {
    runtime: PathBuf,
    daemons: Vec<Child>,
}

impl Node {
    fn start(name: &str) -> Node {
        Node::start_with(name, &[(GPU_A, GPU_A), (GPU_B, GPU_B)])
    }

    /// A daemon for each (`--device` argument, the GPU's UUID) of `devices`, each run
    /// with the two-device stand-in as the driver it would look an index up in.
    fn start_with(name: &str, devices: &[(&str, &str)]) -> Node {
        let runtime =
            std::env::temp_dir().join(format!("gpuswap-devices-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&runtime);
        std::fs::create_dir_all(&runtime).unwrap();
        let mut node = Node {
            runtime,
            daemons: Vec::new(),
        };
        for &(device, uuid) in devices {
            let daemon = node
                .two_device_standin(env!("CARGO_BIN_EXE_gpuswap"))
                .args(["daemon", "--quiet", "--vram", "64MiB", "--device", device])
                .spawn()
                .unwrap();
            node.daemons.push(daemon);
            let deadline = Instant::now() + Duration::from_secs(10);
            while observe(&node.socket(uuid)).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "the daemon of {uuid} (--device {device}) did not start"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        node
    }

    /// `program` on a stand-in of two devices, GPU_A and GPU_B, of 64 MiB each.
    fn two_device_standin(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = self.command(program);
        c.env("LD_LIBRARY_PATH", gpuswap_standin::dir())
            .env("GPUSWAP_STANDIN_DEVICES", "2")
            .env("GPUSWAP_STANDIN_UUID", GPU_A)
            .env("GPUSWAP_STANDIN_VRAM", "64MiB")
            .env("GPUSWAP_STANDIN_SHM", shm(&self.runtime, "two"));
        c
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
        for table in [GPU_A, GPU_B, "two", "two-1"] {
            let _ = std::fs::remove_file(format!("/dev/shm{}", shm(&self.runtime, table)));
        }
        let _ = std::fs::remove_dir_all(&self.runtime);
    }
}

/// The stand-in's memory table of GPU `uuid` (each GPU has its own memory: its last
/// letter names it), or of a stand-in named otherwise (`two`; `two-1`: its device 1's).
fn shm(runtime: &Path, uuid: &str) -> String {
    let node = runtime.file_name().unwrap().to_string_lossy().into_owned();
    match uuid.strip_prefix("GPU-") {
        Some(_) => format!("/{node}-{}", &uuid[uuid.len() - 1..]),
        None => format!("/{node}-{uuid}"),
    }
}

/// `gpuswap top --json` of the daemon at `socket`.
fn top_json(node: &Node, socket: &Path) -> serde_json::Value {
    let out = node
        .command(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["top", "--json", "--socket"])
        .arg(socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_str(stdout(&out).trim()).unwrap()
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
    // An index needs the driver: without one, what to give instead.
    let index = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["daemon", "--device", "0", "--socket", "/tmp/never.sock"])
        .env("GPUSWAP_REAL_LIBCUDA", "/nonexistent/libcuda.so.1")
        .output()
        .unwrap();
    assert!(!index.status.success());
    let stderr = String::from_utf8_lossy(&index.stderr);
    assert!(
        stderr.contains("--device 0: cannot load the CUDA driver /nonexistent/libcuda.so.1")
            && stderr.contains("give the GPU's UUID instead"),
        "{stderr}"
    );
    assert!(!Path::new("/tmp/never.sock").exists());
}

/// The stand-in's end-to-end client on both devices of the two-device stand-in: three
/// buffers of 24 MiB and a scratch buffer (one granule) on each, 74 MiB a device
/// against 64 MiB of VRAM, held 1.5 s before each round.
const PER_DEVICE_BYTES: u64 = (3 * 24 + 2) << 20;

#[test]
fn one_process_on_two_gpus_holds_a_connection_to_each_daemon() {
    // GPU_B's daemon by its index: device 1 of the stand-in, whose device 0 is GPU_A.
    let node = Node::start_with("both", &[(GPU_A, GPU_A), ("1", GPU_B)]);
    let b = top_json(&node, &node.socket(GPU_B));
    assert_eq!(b["device_uuid"], GPU_B, "{b}");
    let mut client = node.two_device_standin(gpuswap_standin::client());
    client
        .args(["--devices", "2", "--buffers", "6", "--size", "24MiB"])
        .args(["--rounds", "2", "--hold-ms", "1500"])
        .env("LD_PRELOAD", interposer());
    let child = client.spawn().unwrap();
    let pid = child.id();
    // Each daemon books the process's buffers on its own device, oversubscribed: some
    // in host memory, the VRAM part what the stand-in charges on that device.
    let tables = [(GPU_A, "two"), (GPU_B, "two-1")];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    while seen.len() < tables.len() {
        assert!(
            Instant::now() < deadline,
            "the daemons never showed the process's buffers: {seen:?}"
        );
        seen.clear();
        for (uuid, table) in tables {
            let snap = top_json(&node, &node.socket(uuid));
            let row = snap["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["pid"] == pid)
                .cloned();
            let Some(row) = row else { continue };
            let (vram, host) = (
                row["vram_bytes"].as_u64().unwrap(),
                row["host_bytes"].as_u64().unwrap(),
            );
            if vram + host == PER_DEVICE_BYTES
                && vram == gpuswap_standin::charged_bytes(&shm(&node.runtime, table), pid)
            {
                assert!(vram <= 64 << 20 && host >= 10 << 20, "{uuid}: {row}");
                assert_eq!(snap["device_uuid"], uuid);
                seen.push(uuid);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let json = verified(&out, "the client on two devices");
    assert_eq!(json["verified_bytes"], 3 * 6 * (24u64 << 20), "{json}");
    for uuid in [GPU_A, GPU_B] {
        let snap = observe(&node.socket(uuid)).unwrap();
        assert_eq!(snap.tenants_served, 1, "{uuid}: {snap:?}");
        assert!(snap.tenants.is_empty(), "{uuid}: {snap:?}");
    }
}

#[test]
fn a_gpu_index_names_the_drivers_device_or_is_refused() {
    let node = Node::start_with("index", &[("1", GPU_B)]);
    let b = observe(&node.socket(GPU_B)).unwrap();
    assert_eq!(b.device_uuid, GPU_B);
    let out = node
        .two_device_standin(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["daemon", "--quiet", "--device", "5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--device 5: there is no GPU 5: the CUDA driver shows 2, numbered from 0"),
        "{stderr}"
    );
    let sockets: Vec<_> = std::fs::read_dir(node.runtime.join("gpuswap"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(sockets.len(), 1, "{sockets:?}");
}

#[test]
fn a_device_without_a_daemon_is_said_once_and_left_unmanaged() {
    let node = Node::start_with("alone", &[(GPU_A, GPU_A)]);
    let out = node
        .two_device_standin(gpuswap_standin::client())
        .args(["--devices", "2", "--buffers", "4", "--size", "8MiB"])
        .args(["--rounds", "1"])
        .env("LD_PRELOAD", interposer())
        .output()
        .unwrap();
    verified(&out, "the client on two devices, one with a daemon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let missing = format!("no gpuswap daemon for device 1 ({GPU_B})");
    assert_eq!(stderr.matches(&missing).count(), 1, "{stderr}");
    assert!(
        stderr.contains("allocations on device 1 pass through unmanaged"),
        "{stderr}"
    );
    let snap = observe(&node.socket(GPU_A)).unwrap();
    assert_eq!(snap.tenants_served, 1, "{snap:?}");
}
