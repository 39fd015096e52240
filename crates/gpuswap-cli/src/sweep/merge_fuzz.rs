//! Fuzzing `gpuswap merge` over shard folders, proptest-style as `fuzz_tests.rs` does
//! for scenarios: the three shards of a small sweep, copied and then mutated at random
//! (files cut short or deleted, cells replaced by numbers that are not finite, too big
//! or not numbers, a manifest's fingerprint, points or counts changed, lines repeated),
//! must merge or be refused with an error; never panic, never hang, and never leave a
//! partial file behind.
//!
//! CI runs 48 cases (a few seconds in a debug build);
//! `PROPTEST_CASES=5000 cargo test --release -p gpuswap-cli merge_fuzz` looks harder.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;

use super::{MergeArgs, SweepArgs, SweepError, merge};

/// The sweep the shards come from: four points, two runs each, in three shards.
const SCENARIO: &str = "seed = 5\n[device]\npreset = \"gtx480\"\n[manager]\nmode = \"gpuswap\"\n\
    [[tenant]]\nname = \"a\"\napp = \"nn\"\nsize = \"rodinia\"\n\
    [[tenant]]\nname = \"b\"\napp = \"nn\"\nsize = \"rodinia\"\n\
    [sweep]\nruns = 2\n[sweep.vary]\n\"manager.chunk_policy\" = [\"random\", \"priority-buffer\"]\n\
    \"device.vram_limit\" = [\"20MiB\", \"200MiB\"]\n";

const SHARDS: usize = 3;

/// The files of a shard.
const FILES: [&str; 2] = ["results.csv", "shard.toml"];

/// The shards' folders, swept once for every case.
fn shards() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("gpuswap-merge-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let scenario = dir.join("fuzz.toml");
        std::fs::write(&scenario, SCENARIO).unwrap();
        for i in 1..=SHARDS {
            let args = SweepArgs {
                scenario: scenario.clone(),
                vary: Vec::new(),
                runs: None,
                out: Some(dir.join(format!("part{i}"))),
                png: false,
                jobs: Some(1),
                quiet: true,
                force: false,
                fail_on_error: false,
                shard: Some(format!("{i}/{SHARDS}").parse().unwrap()),
                html: None,
                dry_run: false,
                resume: false,
                limits: crate::limits::LimitArgs {
                    max_events: 1_000_000,
                    max_sim_time: 1_000_000_000_000,
                    max_page_touches: gpuswap_sim::engine::RunLimits::default().max_page_touches,
                },
            };
            super::run(&args).unwrap();
        }
        dir
    })
}

/// Pieces that CSV and TOML readers and the summary's arithmetic mishandle.
const TOKENS: &[&str] = &[
    "inf",
    "-inf",
    "NaN",
    "1e400",
    "-1",
    "0",
    "18446744073709551616",
    "1e-400",
    "",
    "\"",
    "\"\"",
    "x",
    ",",
    "\n",
    "\r\n",
    "é",
    "\u{0}",
    "plan = \"0000000000000000\"\n",
    "total_points = 1000000000000\n",
    "runs_per_point = 0\n",
    "points = [0, 0, 99]\n",
    "shard = \"1/1\"\n",
    "[",
];

/// One change to a shard's file.
#[derive(Clone, Debug)]
enum Mutation {
    /// Cut the file to `at` (modulo its length) bytes.
    Truncate { at: usize },
    /// Delete the file.
    Delete,
    /// Replace `len` bytes at `at` with a token.
    Splice { at: usize, len: usize, token: usize },
    /// Replace one cell of a CSV line (or a TOML line) with a token.
    Cell {
        line: usize,
        cell: usize,
        token: usize,
    },
    /// Repeat a line.
    Repeat { line: usize },
}

/// A mutation of one file of one shard.
#[derive(Clone, Debug)]
struct Edit {
    shard: usize,
    file: usize,
    mutation: Mutation,
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let token = 0..TOKENS.len();
    let mutation =
        prop_oneof![
            any::<usize>().prop_map(|at| Mutation::Truncate { at }),
            Just(Mutation::Delete),
            (any::<usize>(), 0usize..8, token.clone())
                .prop_map(|(at, len, token)| Mutation::Splice { at, len, token }),
            (any::<usize>(), any::<usize>(), token)
                .prop_map(|(line, cell, token)| Mutation::Cell { line, cell, token }),
            any::<usize>().prop_map(|line| Mutation::Repeat { line }),
        ];
    prop::collection::vec(
        (0..SHARDS, 0..FILES.len(), mutation).prop_map(|(shard, file, mutation)| Edit {
            shard,
            file,
            mutation,
        }),
        1..4,
    )
}

/// Applies `mutation` to the file at `path` (which may be gone already).
fn mutate(path: &Path, mutation: &Mutation) {
    let Ok(mut bytes) = std::fs::read(path) else {
        return;
    };
    match *mutation {
        Mutation::Truncate { at } => bytes.truncate(at % (bytes.len() + 1)),
        Mutation::Delete => {
            std::fs::remove_file(path).unwrap();
            return;
        }
        Mutation::Splice { at, len, token } => {
            let at = at % (bytes.len() + 1);
            let end = (at + len).min(bytes.len());
            bytes.splice(at..end, TOKENS[token].bytes());
        }
        Mutation::Cell { line, cell, token } => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let mut lines: Vec<String> = text.lines().map(String::from).collect();
            if !lines.is_empty() {
                let n = lines.len();
                let mut cells: Vec<String> = lines[line % n].split(',').map(String::from).collect();
                let c = cell % cells.len();
                cells[c] = TOKENS[token].to_owned();
                lines[line % n] = cells.join(",");
            }
            bytes = (lines.join("\n") + "\n").into_bytes();
        }
        Mutation::Repeat { line } => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let mut lines: Vec<&str> = text.lines().collect();
            if !lines.is_empty() {
                let at = line % lines.len();
                lines.insert(at, lines[at]);
            }
            bytes = (lines.join("\n") + "\n").into_bytes();
        }
    }
    std::fs::write(path, bytes).unwrap();
}

/// The shards copied into `case`, with `edits` applied; their folders.
fn mutated_shards(case: &Path, edits: &[Edit]) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = (1..=SHARDS)
        .map(|i| case.join(format!("part{i}")))
        .collect();
    for (i, dir) in dirs.iter().enumerate() {
        std::fs::create_dir_all(dir).unwrap();
        for file in FILES {
            let from = shards().join(format!("part{}", i + 1)).join(file);
            std::fs::copy(from, dir.join(file)).unwrap();
        }
    }
    for edit in edits {
        mutate(&dirs[edit.shard].join(FILES[edit.file]), &edit.mutation);
    }
    dirs
}

/// How long one merge of these small shards may take before it counts as hung.
const HANG: Duration = Duration::from_secs(60);

proptest! {
    #![proptest_config(crate::fuzz_tests::config(48))]
    #[test]
    fn mutated_shard_folders_merge_or_are_refused_without_panics_or_leftovers(edits in edits()) {
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let case = shards().join(format!("case{n}"));
        let dirs = mutated_shards(&case, &edits);
        let out = case.join("merged");
        let args = MergeArgs { dirs, out: out.clone(), png: false, force: false, html: None };
        let (send, receive) = mpsc::channel();
        std::thread::spawn(move || {
            let result = std::panic::catch_unwind(|| merge(&args).map_err(|e| e.to_string()));
            let _ = send.send(result);
        });
        let result = receive.recv_timeout(HANG);
        prop_assert!(result.is_ok(), "the merge hung with {edits:?}");
        let result = result.unwrap();
        prop_assert!(result.is_ok(), "the merge panicked with {edits:?}");
        match result.unwrap() {
            Ok(()) => prop_assert!(out.join("results.csv").is_file() && out.join("summary.csv").is_file()),
            // Every refusal names a file or folder of the case, or the shards it counts.
            Err(e) => prop_assert!(
                e.contains(case.to_str().unwrap()) || e.contains("the shards do not hold"),
                "{e}"
            ),
        }
        let leftovers: Vec<PathBuf> = std::fs::read_dir(&out)
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "partial"))
            .collect();
        prop_assert!(leftovers.is_empty(), "{leftovers:?} left with {edits:?}");
        std::fs::remove_dir_all(&case).unwrap();
    }
}

#[test]
fn the_unmutated_shards_merge() {
    let case = shards().join("unmutated");
    let dirs = mutated_shards(&case, &[]);
    let out = case.join("merged");
    let args = MergeArgs {
        dirs,
        out: out.clone(),
        png: false,
        force: false,
        html: None,
    };
    let result: Result<(), SweepError> = merge(&args);
    assert!(result.is_ok(), "{result:?}");
    let rows = std::fs::read_to_string(out.join("results.csv"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(rows, 1 + 4 * 2, "a row per run");
    std::fs::remove_dir_all(&case).unwrap();
}
