//! Fuzzing the inputs, proptest-style (cargo-fuzz needs a nightly toolchain this project
//! does not use): every scenario shipped in `scenarios/`, mutated at random with tokens
//! that break parsers (huge and negative numbers, empty strings, stray brackets, bytes
//! that are not UTF-8), must be refused with an error or accepted; an accepted one must
//! run to an outcome, a limit or a clean error, within small limits, and never panic or
//! break an invariant. The trace files shipped in `scenarios/traces` (PyTorch snapshots
//! and a uvm-eval fault log) are mutated byte-wise the same way, with pickle opcodes and
//! log records for tokens: a tenant replaying one is refused with an error naming the
//! file, or replays within small limits, and `gpuswap trace info` does the same.
//!
//! CI runs 300 mutated scenarios, 60 extreme ones and 60 mutated trace files (about 20 s
//! in a debug build);
//! `PROPTEST_CASES=20000 cargo test --release -p gpuswap-cli fuzz` looks harder (the
//! extreme cases take about 0.2 s each there). Inputs that once failed are kept in
//! [`CORPUS`] and replayed by every run.

use std::path::{Path, PathBuf};

use gpuswap_sim::engine::{RunLimits, SimError};
use gpuswap_sim::report::run_and_report;
use proptest::prelude::*;

use crate::scenario;
use crate::sweep::Plan;

/// Inputs that once panicked, hung or broke an invariant, as (what, scenario text).
const CORPUS: &[(&str, &str)] = &[
    (
        "a tenant name wider than std's formatter allows",
        "[[tenant]]\nname = \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"\napp = \"stream\"\n",
    ),
    (
        "a repetition count that runs for ever",
        "[[tenant]]\nname = \"a\"\napp = \"stream\"\nrepeat = 4294967295\n",
    ),
    (
        "a start at the end of time",
        "[[tenant]]\nname = \"a\"\napp = \"stream\"\nstart = \"18446744073s\"\n",
    ),
    (
        "a host computation at the end of time",
        "[[tenant]]\nname = \"a\"\napp = \"alloc\"\nsize = \"buffer=1MB,total=2MB,gap=18446744073s\"\n",
    ),
];

/// Pieces that parsers mishandle.
const TOKENS: &[&str] = &[
    "0",
    "-1",
    "1",
    "4294967295",
    "18446744073709551615",
    "9223372036854775807",
    "1e308",
    "nan",
    "\"\"",
    "\"0B\"",
    "\"18446744073709551615s\"",
    "\"1KiB\"",
    "\"99999GiB\"",
    "[[tenant]]\n",
    "[device]\n",
    "[manager]\n",
    "[sweep]\n",
    "=",
    "\n",
    "\"",
    "[",
    "]",
    "{",
    "}",
    ",",
    "\u{0}",
    "é",
    "mode = \"gpuswap\"\n",
    "mode = \"gdev\"\n",
    "chunk_size = \"128KiB\"\n",
    "app = \"lud\"\n",
    "size = \"16\"\n",
    "repeat = 2\n",
    "[[vm]]\n",
    "count = 1000\n",
    "high_memory = \"3456MiB\"\n",
    "placement = \"dymgpu-util\"\n",
    "duration = \"0s\"\n",
    "workload = \"nw\"\n",
];

/// The shipped scenarios with their texts, read once for all cases.
fn shipped_scenarios() -> &'static [(PathBuf, String)] {
    static READ: std::sync::OnceLock<Vec<(PathBuf, String)>> = std::sync::OnceLock::new();
    READ.get_or_init(read_shipped_scenarios)
}

fn read_shipped_scenarios() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .chain(std::fs::read_dir(root.join("repro")).unwrap())
        .chain(std::fs::read_dir(root.join("vgpu")).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

/// One edit of a text: at a byte position (clamped to a char boundary), delete up to
/// `len` bytes and insert a token.
#[derive(Clone, Debug)]
struct Edit {
    at: usize,
    len: usize,
    token: usize,
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(
        (any::<usize>(), 0usize..12, 0..TOKENS.len()).prop_map(|(at, len, token)| Edit {
            at,
            len,
            token,
        }),
        1..6,
    )
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut text = text.to_owned();
    for edit in edits {
        let mut at = edit.at % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let mut end = (at + edit.len).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        text.replace_range(at..end, TOKENS[edit.token]);
    }
    text
}

/// Small limits: a fuzzed run may be long, but not in a test (a replayed trace's kernel
/// may walk petabytes of pages inside one event: the page-touch limit bounds that).
fn small_limits() -> RunLimits {
    RunLimits {
        max_events: 50_000,
        max_sim_ns: 100_000_000_000,
        max_page_touches: 50_000_000,
    }
}

/// Parses `text` as `path` and, if accepted, runs it (at most 8 tenants, small limits).
/// Panics (what the caller's test catches) on an invariant error.
fn parse_and_run(path: &Path, text: &str) {
    if crate::vgpu_scenario::is_vgpu_text(text) {
        return parse_and_run_vms(path, text);
    }
    if let Ok(parsed) = scenario::parse(path, text)
        && parsed.config.tenants.len() <= 8
    {
        run(path, text, parsed);
    }
    // The sweep's reading of the same text must not panic either.
    let _ = Plan::new(path, text, &[], Some(1));
}

/// [`parse_and_run`] for any number of tenants.
fn parse_and_run_all(path: &Path, text: &str) {
    if let Ok(parsed) = scenario::parse(path, text) {
        run(path, text, parsed);
    }
}

/// A VM scenario: parsed, and if accepted run for at most 10 simulated seconds (a
/// fuzzed count may ask for a thousand VMs); the sweep's reading must not panic either.
fn parse_and_run_vms(path: &Path, text: &str) {
    if let Ok(mut parsed) = crate::vgpu_scenario::parse(path, text) {
        parsed.config.max_sim_ns = 10_000_000_000;
        parsed.config.vms.truncate(64);
        let _ = gpuswap_vgpu::engine::simulate(parsed.config);
    }
    let _ = Plan::new(path, text, &[], Some(1));
}

fn run(path: &Path, text: &str, mut parsed: scenario::Scenario) {
    parsed.config.limits = small_limits();
    match run_and_report(&parsed.name, parsed.seed, &parsed.config) {
        Ok(_) | Err(SimError::Limit(_)) => {}
        Err(SimError::Invariant(e)) => panic!("{}: invariant broken: {e}\n{text}", path.display()),
    }
}

/// `default` cases from a fixed seed, so that CI runs the same inputs in the same time
/// every time; with `PROPTEST_CASES` set (a long run) that many from a random seed, or
/// from `PROPTEST_RNG_SEED` when that is set too.
pub(crate) fn config(default: u32) -> ProptestConfig {
    let env = ProptestConfig::default();
    match std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(cases) => ProptestConfig { cases, ..env },
        None => ProptestConfig {
            cases: default,
            rng_seed: proptest::test_runner::RngSeed::Fixed(20261123),
            ..env
        },
    }
}

#[test]
fn the_corpus_of_past_failures_is_refused_or_runs() {
    for (what, text) in CORPUS {
        let result = std::panic::catch_unwind(|| parse_and_run(Path::new("corpus.toml"), text));
        assert!(result.is_ok(), "{what}");
    }
}

#[test]
fn invalid_utf8_is_refused_with_its_place() {
    let dir = std::env::temp_dir().join(format!("gpuswap-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    for (_, text) in shipped_scenarios().iter().take(3) {
        let mut bytes = text.clone().into_bytes();
        let at = bytes.len() / 2;
        bytes.insert(at, 0xff);
        std::fs::write(&path, &bytes).unwrap();
        let e = scenario::read(&path).unwrap_err().to_string();
        assert!(e.contains("not UTF-8 text: byte 0xff at line"), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A valid but extreme scenario: up to 15 tenants, tiny or huge chunks, little VRAM,
/// every mode and policy, staggered starts.
fn extreme_scenario() -> impl Strategy<Value = String> {
    let presets = [
        "gtx480",
        "gtx480-refbits",
        "v100-pcie-32gb",
        "a100-80gb",
        "gh200",
    ];
    let modes = [
        "mode = \"native\"",
        "mode = \"fcfs\"",
        "mode = \"static\"",
        "mode = \"gdev\"",
        "mode = \"gpuswap\"\nchunk_policy = \"random\"",
        "mode = \"gpuswap\"\nchunk_policy = \"priority-chunk\"",
        "mode = \"gpuswap\"\nvictim = \"performance\"",
        "mode = \"gpuswap\"\nvictim = \"access-rate\"",
        "mode = \"gpuswap\"\nchunk_policy = \"reverse-swap\"",
    ];
    let apps = [
        ("backprop", "rodinia"),
        ("bfs", "rodinia"),
        ("heartwall", "rodinia"),
        ("hotspot", "rodinia"),
        ("lud", "rodinia"),
        ("nn", "rodinia"),
        ("srad_v1", "rodinia"),
        ("srad_v2", "rodinia"),
        (
            "alloc",
            "buffer=1MB,total=8MB,gap=1ms,period=10ms,hold=20ms",
        ),
        ("stream", "1048576"),
        ("random", "1048576"),
    ];
    let chunks = ["4KiB", "128KiB", "1MiB", "4MiB", "64MiB"];
    (
        0..presets.len(),
        0..modes.len(),
        0..chunks.len(),
        1u64..400,
        prop::collection::vec((0..apps.len(), 1u32..3, 0u64..20), 1..16),
        any::<u64>(),
    )
        .prop_map(move |(preset, mode, chunk, vram_mib, tenants, seed)| {
            // Reverse swapping needs reference bits: only the wish-list GTX 480 has them.
            let preset = if modes[mode].contains("reverse-swap") { 1 } else { preset };
            let mut text = format!(
                "seed = {}\n[device]\npreset = \"{}\"\nvram_limit = \"{vram_mib}MiB\"\n[manager]\n{}\nchunk_size = \"{}\"\nreturn_interval = \"5ms\"\n",
                seed >> 1,
                presets[preset],
                modes[mode],
                chunks[chunk]
            );
            for (i, (app, repeat, start_ms)) in tenants.iter().enumerate() {
                let (name, size) = apps[*app];
                text += &format!(
                    "[[tenant]]\nname = \"t{i}\"\napp = \"{name}\"\nsize = \"{size}\"\nrepeat = {repeat}\nstart = \"{start_ms}ms\"\n"
                );
            }
            text
        })
}

proptest! {
    #![proptest_config(config(60))]
    #[test]
    fn extreme_valid_scenarios_run_without_panics_or_broken_invariants(text in extreme_scenario()) {
        let path = Path::new("extreme.toml");
        // They are valid: refusing one is a bug too.
        if let Err(e) = scenario::parse(path, &text) {
            prop_assert!(false, "refused: {e}\n{text}");
        }
        let result = std::panic::catch_unwind(|| parse_and_run_all(path, &text));
        prop_assert!(result.is_ok(), "{text}");
    }
}

proptest! {
    #![proptest_config(config(300))]
    #[test]
    fn mutated_scenarios_are_refused_or_run_without_panics(
        file in 0usize..64,
        edits in edits(),
    ) {
        let scenarios = shipped_scenarios();
        let (path, text) = &scenarios[file % scenarios.len()];
        let mutated = apply(text, &edits);
        let result = std::panic::catch_unwind(|| parse_and_run(path, &mutated));
        prop_assert!(result.is_ok(), "{} with {edits:?}:\n{mutated}", path.display());
    }
}

/// Pieces that break pickles (memo gets and puts, marks, stops, containers, long
/// integers, opcodes of code) and fault logs (record types, huge and negative numbers).
const TRACE_TOKENS: &[&[u8]] = &[
    b"h\x00",
    b"h\xff",
    b"j\xff\xff\xff\xff",
    b"q\x01",
    b"\x94",
    b"(",
    b".",
    b"0",
    b"2",
    b"}",
    b"]",
    b"e",
    b"s",
    b"u",
    b"\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
    b"\x8b\xff\xff\xff\x7f",
    b"J\xff\xff\xff\xff",
    b"X\xff\xff\xff\xff",
    b"cos\nsystem\n",
    b"\x00",
    b"\xff",
    b"\n",
    b",",
    b"s,\n",
    b"b,\n",
    b"b,1,0\n",
    b"f,0xffffffffffffffff,18446744073709551615,0,4,0,1,0,0,0,0,0,0,0,0\n",
    b"-1",
    b"18446744073709551616",
    b"0x",
];

/// The trace files shipped in `scenarios/traces`, with their bytes, read once.
fn shipped_traces() -> &'static [(PathBuf, Vec<u8>)] {
    static READ: std::sync::OnceLock<Vec<(PathBuf, Vec<u8>)>> = std::sync::OnceLock::new();
    READ.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/traces");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "pickle" || e == "log"))
            .collect();
        files.sort();
        files
            .into_iter()
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect()
    })
}

/// One edit of a trace file's bytes.
#[derive(Clone, Debug)]
enum ByteEdit {
    /// The byte at a position (modulo the length) becomes another: numbers and lengths
    /// change while the pickle's structure mostly holds.
    Overwrite { at: usize, byte: u8 },
    /// At a position, up to `len` bytes deleted and a token of [`TRACE_TOKENS`] inserted.
    Splice { at: usize, len: usize, token: usize },
}

fn byte_edits() -> impl Strategy<Value = Vec<ByteEdit>> {
    let edit = prop_oneof![
        (
            any::<usize>(),
            prop::sample::select(vec![0u8, 1, 0x7f, 0x80, 0xfe, 0xff])
        )
            .prop_map(|(at, byte)| ByteEdit::Overwrite { at, byte }),
        (any::<usize>(), 0usize..16, 0..TRACE_TOKENS.len())
            .prop_map(|(at, len, token)| ByteEdit::Splice { at, len, token }),
    ];
    prop::collection::vec(edit, 0..4)
}

/// `bytes` with each edit made, then cut at `cut` thousandths of its length (1000 or
/// more keeps it whole).
fn mutate(bytes: &[u8], edits: &[ByteEdit], cut: u16) -> Vec<u8> {
    let mut bytes = bytes.to_vec();
    for edit in edits {
        match *edit {
            ByteEdit::Overwrite { at, byte } => {
                let at = at % bytes.len().max(1);
                if let Some(b) = bytes.get_mut(at) {
                    *b = byte;
                }
            }
            ByteEdit::Splice { at, len, token } => {
                let at = at % (bytes.len() + 1);
                let end = (at + len).min(bytes.len());
                bytes.splice(at..end, TRACE_TOKENS[token].iter().copied());
            }
        }
    }
    let keep = bytes.len() * usize::from(cut.min(1000)) / 1000;
    bytes.truncate(keep);
    bytes
}

/// Writes `bytes` as the trace file `name` beside a scenario replaying it (under mode
/// uvm for a fault log, `mode` for a snapshot), parses the scenario and, if accepted,
/// runs it; summarizes the file as `gpuswap trace info` does. A refusal must name the
/// file; panics (what the caller's test catches) otherwise, or on a broken invariant.
fn replay_mutated(dir: &Path, name: &str, bytes: &[u8], mode: &str) {
    let file = dir.join(name);
    std::fs::write(&file, bytes).unwrap();
    let (key, mode) = if name.ends_with(".log") {
        ("fault_log", "uvm")
    } else {
        ("trace", mode)
    };
    let text = format!(
        "[device]\npreset = \"v100-pcie-32gb\"\n[manager]\nmode = \"{mode}\"\n[[tenant]]\nname = \"t\"\n{key} = \"{name}\"\n"
    );
    let path = dir.join("replay.toml");
    match scenario::parse(&path, &text) {
        Ok(parsed) => run(&path, &text, parsed),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains(&file.display().to_string()), "{e}");
        }
    }
    if let Err(e) = crate::trace_cmd::summarize(&file) {
        assert!(e.starts_with(&file.display().to_string()), "{e}");
    }
}

proptest! {
    #![proptest_config(config(60))]
    #[test]
    fn mutated_traces_are_refused_naming_the_file_or_replay_without_panics(
        file in 0usize..16,
        edits in byte_edits(),
        cut in 0u16..2000,
        uvm in any::<bool>(),
    ) {
        let traces = shipped_traces();
        let (path, bytes) = &traces[file % traces.len()];
        let mutated = mutate(bytes, &edits, cut);
        let dir = std::env::temp_dir().join(format!("gpuswap-fuzz-traces-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        let mode = if uvm { "uvm" } else { "gpuswap" };
        let result = std::panic::catch_unwind(|| replay_mutated(&dir, name, &mutated, mode));
        prop_assert!(result.is_ok(), "{} with {edits:?}, cut {cut}, mode {mode}", path.display());
    }
}
