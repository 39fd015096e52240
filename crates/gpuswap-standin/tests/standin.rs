//! End-to-end tests: the C test programs run against the stand-in `libcuda.so.1`.
//!
//! Each test uses its own shared-memory accounting table (`GPUSWAP_STANDIN_SHM`), so
//! tests running in parallel do not share VRAM, and removes it at the end.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// A test's private VRAM accounting table; removed on drop.
struct Shm(String);

impl Shm {
    fn new(test: &str) -> Shm {
        let shm = Shm(format!(
            "/gpuswap-standin-test-{}-{test}",
            std::process::id()
        ));
        shm.remove();
        shm
    }

    fn remove(&self) {
        let _ = std::fs::remove_file(Path::new("/dev/shm").join(&self.0[1..]));
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A child killed on drop, so a failing test leaves no client behind.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `program` set up to run against the stand-in with the given table and capacity.
fn command(program: &Path, shm: &Shm, vram: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", gpuswap_standin::dir())
        .env("GPUSWAP_STANDIN_SHM", &shm.0)
        .env("GPUSWAP_STANDIN_VRAM", vram)
        .env_remove("GPUSWAP_STANDIN_COPY_DELAY_MS");
    cmd
}

fn client(shm: &Shm, vram: &str, args: &[&str]) -> Command {
    let mut cmd = command(&gpuswap_standin::client(), shm, vram);
    cmd.args(args);
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn describe(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The unsigned integer value of `"key":` in the client's one-line JSON report.
fn json_u64(json: &str, key: &str) -> u64 {
    let pat = format!("\"{key}\":");
    let start = json
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {json}"))
        + pat.len();
    let digits: String = json[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|e| panic!("bad {key} in {json}: {e}"))
}

#[test]
fn built_files_exist() {
    assert!(gpuswap_standin::library().is_file());
    assert!(gpuswap_standin::dir().join("libcuda.so").exists());
    assert!(gpuswap_standin::client().is_file());
    assert!(gpuswap_standin::vmm_probe().is_file());
}

#[test]
fn within_capacity_verifies_every_byte() {
    let shm = Shm::new("within");
    let out = run(&mut client(
        &shm,
        "256MiB",
        &["--buffers", "4", "--size", "8MiB", "--rounds", "2"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.starts_with("{\"ok\":true,"), "{json}");
    // Rounds 1 and 2 each verify round r-1's contents, then a final pass: 3 passes.
    assert_eq!(json_u64(&json, "verified_bytes"), 3 * 4 * 8 * MIB, "{json}");
    assert_eq!(json_u64(&json, "mem_info_total"), 256 * MIB, "{json}");
    // Measured while holding 4 x 8 MiB plus the 2 MiB granule of the scratch buffer.
    assert_eq!(
        json_u64(&json, "mem_info_free"),
        (256 - 32 - 2) * MIB,
        "{json}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("e2e-client: round 2 verified"), "{stderr}");
}

#[test]
fn beyond_capacity_fails_with_out_of_memory() {
    let shm = Shm::new("beyond");
    let out = run(&mut client(
        &shm,
        "256MiB",
        &["--buffers", "4", "--size", "96MiB", "--rounds", "1"],
    ));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("CUDA_ERROR_OUT_OF_MEMORY"), "{stderr}");
    // 2 x 96 MiB fit in 256 MiB, the third buffer does not.
    assert!(stderr.contains("buffer 2"), "{stderr}");
}

#[test]
fn capacity_is_shared_between_processes_and_freed_when_one_dies() {
    let shm = Shm::new("shared");
    let args = ["--buffers", "2", "--size", "80MiB", "--rounds", "1"];

    // A holds 160 MiB (+2 MiB scratch) and sleeps; it is killed below, never finishes.
    let mut a = KillOnDrop(
        client(&shm, "256MiB", &args)
            .args(["--hold-ms", "60000"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn client A"),
    );
    let mut lines = BufReader::new(a.0.stderr.take().expect("A's stderr")).lines();
    loop {
        let line = lines
            .next()
            .expect("client A exited before allocating")
            .expect("read A's stderr");
        if line.starts_with("e2e-client: allocated") {
            break;
        }
    }

    let b = run(&mut client(&shm, "256MiB", &args));
    assert_eq!(b.status.code(), Some(2), "client B: {}", describe(&b));
    assert!(
        String::from_utf8_lossy(&b.stderr).contains("CUDA_ERROR_OUT_OF_MEMORY"),
        "client B: {}",
        describe(&b)
    );

    a.0.kill().expect("kill client A");
    a.0.wait().expect("reap client A"); // a zombie still counts as alive

    let c = run(&mut client(&shm, "256MiB", &args));
    assert_eq!(c.status.code(), Some(0), "client C: {}", describe(&c));
}

#[test]
fn bad_vram_setting_is_reported() {
    let shm = Shm::new("badvram");
    let out = run(&mut client(
        &shm,
        "lots",
        &["--buffers", "1", "--size", "1MiB"],
    ));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("GPUSWAP_STANDIN_VRAM"), "{stderr}");
    assert!(stderr.contains("cuInit"), "{stderr}");
}

#[test]
fn bad_flags_exit_64() {
    let shm = Shm::new("badflags");
    for args in [
        &["--bogus"][..],
        &["--size", "3"],
        &["--buffers", "x"],
        &["--size"],
    ] {
        let out = run(&mut client(&shm, "256MiB", args));
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("usage:"),
            "{args:?}: {}",
            describe(&out)
        );
    }
}

#[test]
fn own_context_works_too() {
    let shm = Shm::new("ownctx");
    let out = run(&mut client(
        &shm,
        "64MiB",
        &[
            "--own-context",
            "--buffers",
            "2",
            "--size",
            "1MiB",
            "--rounds",
            "1",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

#[test]
fn vmm_probe_moves_a_chunk_at_an_unchanged_address() {
    let shm = Shm::new("vmm");
    let out = run(&mut command(&gpuswap_standin::vmm_probe(), &shm, "64MiB"));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("vmm-probe: ok"));
}

#[test]
fn copy_delay_slows_device_to_device_copies() {
    let shm = Shm::new("delay");
    // The probe makes two device-to-device copies (one of them refused after the delay).
    let start = Instant::now();
    let out = run(command(&gpuswap_standin::vmm_probe(), &shm, "64MiB")
        .env("GPUSWAP_STANDIN_COPY_DELAY_MS", "300"));
    let elapsed = start.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(elapsed >= Duration::from_millis(600), "took {elapsed:?}");
}

#[test]
fn async_copies_are_in_flight_together_until_one_synchronize() {
    let shm = Shm::new("in-flight");
    // Four device-to-device copies queued on a stream: the delay is slept once for the
    // lot, as copies in flight together on a GPU's copy engines overlap.
    let out = run(command(&gpuswap_standin::vmm_probe(), &shm, "64MiB")
        .env("GPUSWAP_STANDIN_COPY_DELAY_MS", "300"));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ms: f64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("vmm-probe: 4 async copies in flight took "))
        .and_then(|rest| rest.strip_suffix(" ms")?.parse().ok())
        .unwrap_or_else(|| panic!("no in-flight line: {stderr}"));
    assert!((300.0..1200.0).contains(&ms), "took {ms} ms: {stderr}");
}
