//! Replayed traces end to end: the limits bound the work inside one event, a run says
//! when a replay's timing is invented, and `gpuswap trace info` summarizes a file.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use gpuswap_sim::trace::synthetic::SnapshotBuilder;

const MIB: u64 = 1 << 20;

/// Runs the binary, which must end within a minute (these runs are small, or stopped by
/// their limits).
fn gpuswap(args: &[&str]) -> Output {
    promptly(args, Duration::from_secs(60))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh folder for one test's files.
fn folder(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("gpuswap-trace-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A scenario in `dir` of one tenant replaying `pickle` under `mode`.
fn replay_scenario(dir: &std::path::Path, pickle: &[u8], mode: &str) -> String {
    std::fs::write(dir.join("t.pickle"), pickle).unwrap();
    let path = dir.join("t.toml");
    std::fs::write(
        &path,
        format!("[device]\npreset = \"a100-80gb\"\n[manager]\nmode = \"{mode}\"\n[[tenant]]\nname = \"t\"\ntrace = \"t.pickle\"\n"),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

/// A 64 MiB block live across a recorded interval of `gap_us`.
fn gap_snapshot(gap_us: u64) -> Vec<u8> {
    let mut b = SnapshotBuilder::new();
    let seg = b.segment(64 * MIB);
    let x = b.alloc(seg, 0, 64 * MIB);
    b.wait_us(gap_us);
    b.free(seg, x);
    b.free_segment(seg);
    b.pickle()
}

/// Runs the binary with `args`, which must end within `within`, and returns the output.
fn promptly(args: &[&str], within: Duration) -> Output {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(args)
        .output()
        .expect("the binary runs");
    assert!(
        started.elapsed() < within,
        "{args:?} took {:?}",
        started.elapsed()
    );
    out
}

#[test]
fn a_huge_recorded_gap_under_unified_memory_stops_at_the_limits() {
    let dir = folder("gap");
    // 10^12 us (11.6 days) between two events: the kernel of that interval alone reads
    // petabytes. It used to walk them page by page inside one event, past every limit.
    let scenario = replay_scenario(&dir, &gap_snapshot(1_000_000_000_000), "uvm");
    for limits in [
        &["--max-events", "100", "--max-sim-time", "1s"][..],
        &["--max-sim-time", "1s"][..],
    ] {
        let out = promptly(
            &[&["run", &scenario][..], limits].concat(),
            Duration::from_secs(20),
        );
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let e = stderr(&out);
        assert!(e.contains("of simulated time"), "{e}");
        assert!(e.contains("raise it with --max-sim-time DURATION"), "{e}");
    }
    // 1000 s: within the default time limit, so the walk starts; the page-touch budget
    // ends it and says how to raise it.
    let scenario = replay_scenario(&dir, &gap_snapshot(1_000_000_000), "uvm");
    let out = promptly(
        &["run", &scenario, "--max-page-touches", "1000000"],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("stopped at its limit of 1000000 page touches"),
        "{e}"
    );
    assert!(e.contains("raise it with --max-page-touches N"), "{e}");
}

#[test]
fn an_endless_unified_memory_app_is_bounded_by_the_page_touch_limit() {
    // repeat = 2^32 - 1 of a random-access app: hours of work under the event limit
    // alone; the page-touch budget bounds it.
    let dir = folder("repeat");
    let path = dir.join("r.toml");
    std::fs::write(
        &path,
        "[device]\npreset = \"a100-80gb\"\n[manager]\nmode = \"uvm\"\n[[tenant]]\nname = \"t\"\napp = \"random\"\nrepeat = 4294967295\n",
    )
    .unwrap();
    let out = promptly(
        &[
            "run",
            path.to_str().unwrap(),
            "--max-page-touches",
            "2000000",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("raise it with --max-page-touches N"),
        "{}",
        stderr(&out)
    );
    // The default is what the help promises: a few minutes at the slowest touches
    // (about 20 ns each, random), not hours.
    assert!(gpuswap_sim::engine::RunLimits::default().max_page_touches <= 10_000_000_000);
}

#[test]
fn a_replay_on_invented_timing_is_warned_of_and_reported() {
    let dir = folder("untimed");
    let pickle = |untimed: bool| {
        let mut b = SnapshotBuilder::new();
        if untimed {
            b.untimed();
        }
        let seg = b.segment(64 * MIB);
        b.alloc(seg, 0, MIB);
        b.pickle()
    };
    for invented in [false, true] {
        let pickle = pickle(invented);
        let scenario = replay_scenario(&dir, &pickle, "native");
        let out = gpuswap(&["run", "--json", &scenario]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            stderr(&out).contains("replays on invented timing: 2 of 2 events have no time_us"),
            invented,
            "{}",
            stderr(&out)
        );
        // compare warns as run does, once, whatever the number of modes.
        let compared = gpuswap(&["compare", &scenario, "--managers", "native,gpuswap"]);
        assert!(compared.status.success(), "{}", stderr(&compared));
        assert_eq!(
            stderr(&compared)
                .matches("replays on invented timing")
                .count(),
            usize::from(invented),
            "{}",
            stderr(&compared)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let timing = v["tenants"][0]["timing"].as_str().unwrap();
        assert_eq!(timing.starts_with("invented: "), invented, "{timing}");
        if !invented {
            assert_eq!(timing, "recorded");
        }
        let text = gpuswap(&["run", &scenario]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains(&format!("  t: {}", timing.get(..20).unwrap_or(timing))),
            "{text}"
        );
        let info = gpuswap(&[
            "trace",
            "info",
            "--json",
            &dir.join("t.pickle").to_string_lossy(),
        ]);
        let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
        assert_eq!(info["timing"], timing);
        assert_eq!(info["time_span_ns"].is_null(), invented);
    }
}

#[test]
fn trace_info_refuses_what_it_cannot_read_with_the_file_named() {
    let dir = folder("info");
    let bad = dir.join("bad.pickle");
    std::fs::write(&bad, b"\x80\x04garbage").unwrap();
    let out = gpuswap(&["trace", "info", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with(&format!(
            "error: {}: not a PyTorch memory snapshot",
            bad.display()
        )),
        "{}",
        stderr(&out)
    );
}
