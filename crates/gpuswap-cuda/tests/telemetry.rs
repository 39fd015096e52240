//! The interposer's progress reports and touch hints (issue 40), and the stand-in's
//! slow remote memory, against a daemon that only records: it welcomes the stand-in's
//! end-to-end client with a `progress_report_ns`, grants every allocation and keeps
//! every other message the client sends until it exits.

use std::collections::BTreeSet;
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};

use gpuswap_wire::{self as wire, ClientMsg, DaemonMsg, Location, PROTOCOL_VERSION, Placement};

const CHUNK_BYTES: u64 = 2 << 20;

/// What a client sent and printed.
struct Recorded {
    /// Every message but allocations and frees, in order.
    said: Vec<ClientMsg>,
    /// The client's JSON line.
    json: serde_json::Value,
}

impl Recorded {
    fn progress(&self) -> Vec<&wire::Progress> {
        self.said
            .iter()
            .filter_map(|m| match m {
                ClientMsg::Progress(p) => Some(p),
                _ => None,
            })
            .collect()
    }
}

/// Runs the client with `args` and `env` under the interposer, welcomed with
/// `progress_report_ns`; allocations are granted in VRAM, the first in host memory if
/// `first_in_host`.
fn record(
    name: &str,
    progress_report_ns: u64,
    first_in_host: bool,
    args: &[&str],
    env: &[(&str, &str)],
) -> Recorded {
    let dir = std::env::temp_dir().join(format!("gpuswap-tele-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let shm = format!("/gpuswap-tele-{}-{name}", std::process::id());
    let listener = UnixListener::bind(dir.join("d.sock")).unwrap();
    let exe = std::env::current_exe().unwrap();
    let client = Command::new(gpuswap_standin::client())
        .args(args)
        .env("LD_LIBRARY_PATH", gpuswap_standin::dir())
        .env(
            "LD_PRELOAD",
            gpuswap_standin::interposer(exe.parent().unwrap().parent().unwrap()),
        )
        .env("GPUSWAP_SOCKET", dir.join("d.sock"))
        .env("GPUSWAP_STANDIN_SHM", &shm)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut stream, _) = listener.accept().unwrap();
    let hello: ClientMsg = wire::read_frame(&mut stream).unwrap();
    assert!(matches!(hello, ClientMsg::Hello { .. }), "{hello:?}");
    let welcome = DaemonMsg::Welcome {
        protocol: PROTOCOL_VERSION,
        tenant: 1,
        chunk_bytes: CHUNK_BYTES,
        vram_bytes: 1 << 30,
        idle_report_ns: 0,
        progress_report_ns,
        vram_limit_bytes: 0,
        probe_remote: false,
    };
    wire::write_frame(&mut stream, &welcome).unwrap();
    let (mut said, mut buffers) = (Vec::new(), 0u64);
    while let Ok(msg) = wire::read_frame::<ClientMsg>(&mut stream) {
        match msg {
            ClientMsg::Alloc { request, bytes } => {
                buffers += 1;
                let location = if first_in_host && buffers == 1 {
                    Location::Host
                } else {
                    Location::Vram
                };
                let granted = DaemonMsg::Granted {
                    request,
                    buffer: buffers,
                    bytes,
                    chunk_bytes: CHUNK_BYTES,
                    placement: vec![Placement {
                        chunks: bytes.div_ceil(CHUNK_BYTES) as u32,
                        location,
                    }],
                };
                wire::write_frame(&mut stream, &granted).unwrap();
            }
            // The device's memory is reported every second: not telemetry.
            ClientMsg::Free { .. } | ClientMsg::DeviceMemory { .. } => {}
            other => said.push(other),
        }
    }
    let out = client.wait_with_output().unwrap();
    let _ = std::fs::remove_file(format!("/dev/shm{shm}"));
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: the client failed: {stderr}");
    let json = serde_json::from_slice(&out.stdout).unwrap();
    Recorded { said, json }
}

/// A command line's words.
fn words(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

/// The client's work before its rounds with `--launches K`: a fill of each of its 2
/// buffers, the axpy check and the K launches.
fn launches_before_rounds(k: u64) -> u64 {
    2 + 1 + k
}

#[test]
fn progress_counts_every_launch_their_completion_the_waits_and_the_buffers_named() {
    // Buffers 1 and 2 of 4 MiB, then the scratch buffer (3); the client launches 500
    // kernels, waits 30 ms for a copy in flight, and is quiet for 800 ms before its
    // round.
    let k = 500;
    let run = record(
        "progress",
        50_000_000,
        false,
        &words(&format!(
            "--buffers 2 --size 4MiB --rounds 1 --hold-ms 800 --launches {k}"
        )),
        &[("GPUSWAP_STANDIN_COPY_DELAY_MS", "30")],
    );
    let reports = run.progress();
    let first_idle = reports
        .iter()
        .position(|p| p.idle)
        .unwrap_or_else(|| panic!("never idle: {reports:?}"));
    let before_rounds = &reports[..=first_idle];
    let sum = |f: fn(&wire::Progress) -> u64| before_rounds.iter().map(|p| f(p)).sum::<u64>();
    let launched = launches_before_rounds(k);
    assert_eq!(sum(|p| p.launches), launched, "{before_rounds:?}");
    // 256 blocks a launch (the client's grid).
    assert_eq!(sum(|p| p.blocks), launched * 256);
    // Idle only once every launch is known complete.
    assert_eq!(sum(|p| p.completed), launched, "{before_rounds:?}");
    assert_eq!(sum(|p| p.completed_blocks), launched * 256);
    assert!(sum(|p| p.sync_wait_ns) >= 30_000_000, "{before_rounds:?}");
    assert!(before_rounds.iter().all(|p| p.window_ns > 0));
    let touched: BTreeSet<u64> = before_rounds
        .iter()
        .flat_map(|p| p.touched.iter().copied())
        .collect();
    // The fills named buffers 1 and 2, the checksums buffer 1 and the scratch (3),
    // the axpy check the scratch.
    assert_eq!(touched, BTreeSet::from([1, 2, 3]), "{before_rounds:?}");
    // Quiet, it says idle once and then nothing until its round starts.
    assert!(
        reports[first_idle + 1..]
            .iter()
            .all(|p| p.launches > 0 || !p.idle),
        "{reports:?}"
    );
    assert!(reports.len() - first_idle <= 4, "{reports:?}");
}

#[test]
fn without_scanning_progress_names_no_buffer() {
    let run = record(
        "no-scan",
        50_000_000,
        false,
        &words("--buffers 1 --size 4MiB --rounds 1 --hold-ms 300"),
        &[("GPUSWAP_TOUCH", "0")],
    );
    let reports = run.progress();
    assert!(reports.iter().map(|p| p.launches).sum::<u64>() > 0);
    assert!(reports.iter().all(|p| p.touched.is_empty()), "{reports:?}");
}

#[test]
fn without_progress_report_ns_nothing_is_sent() {
    let run = record(
        "no-progress",
        0,
        false,
        &words("--buffers 1 --size 4MiB --rounds 1 --hold-ms 300 --launches 200"),
        &[],
    );
    assert!(run.said.is_empty(), "{:?}", run.said);
}

#[test]
fn the_stand_ins_kernels_take_remote_ns_per_access_to_host_memory() {
    // Buffer 1 in host memory, the scratch buffer in VRAM: each of the client's small
    // checksums reads one word of buffer 1 remotely and writes the scratch locally.
    let remote_ns = 200_000.0;
    let args = words("--buffers 1 --size 4KiB --rounds 0 --launches 20");
    let each_ns = |env: &[(&str, &str)]| {
        let run = record("remote", 0, true, &args, env);
        run.json["launch_ns_each"].as_f64().unwrap()
    };
    let slow = each_ns(&[("GPUSWAP_STANDIN_REMOTE_NS", "200000")]);
    assert!(slow >= remote_ns, "{slow} ns a launch");
    let local = each_ns(&[]);
    assert!(
        local < remote_ns / 4.0,
        "{local} ns a launch without remote delay"
    );
}

/// The launch path's cost with the stand-in (`cargo test --release -p gpuswap-cuda
/// --test telemetry -- --ignored --nocapture`): ns a launch of a one-word kernel, plain
/// and under the interposer without progress, with progress and no scan, and with both.
#[test]
#[ignore = "a measurement: run it in release"]
fn launch_cost() {
    let args = words("--buffers 2 --size 4KiB --rounds 0 --launches 2000000");
    let plain = || {
        let shm = format!("/gpuswap-tele-{}-plain", std::process::id());
        let out = Command::new(gpuswap_standin::client())
            .args(&args)
            .env("LD_LIBRARY_PATH", gpuswap_standin::dir())
            .env("GPUSWAP_STANDIN_SHM", &shm)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(format!("/dev/shm{shm}"));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json["launch_ns_each"].as_f64().unwrap()
    };
    let each = |progress_ns: u64, env: &[(&str, &str)]| {
        record("cost", progress_ns, false, &args, env).json["launch_ns_each"]
            .as_f64()
            .unwrap()
    };
    // Interleaved runs, the least and the median of each kept: the machine is shared.
    const RUNS: usize = 9;
    let mut ns: [Vec<f64>; 4] = Default::default();
    for _ in 0..RUNS {
        ns[0].push(plain());
        ns[1].push(each(0, &[]));
        ns[2].push(each(100_000_000, &[("GPUSWAP_TOUCH", "0")]));
        ns[3].push(each(100_000_000, &[]));
    }
    let names = [
        "stand-in alone",
        "interposer, no progress",
        "progress, no scan",
        "progress and scan",
    ];
    for (name, runs) in names.iter().zip(&mut ns) {
        runs.sort_by(f64::total_cmp);
        eprintln!(
            "{name}: {:.1} ns a launch at least, {:.1} the median of {RUNS} runs",
            runs[0],
            runs[RUNS / 2]
        );
    }
}
