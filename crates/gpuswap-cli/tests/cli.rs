//! The `gpuswap` binary, end to end: one test per command, plus determinism and bad input.

mod binary;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use binary::{gpuswap, repo_file, stderr};

/// Runs the binary as on a terminal `columns` wide.
fn gpuswap_in(columns: usize, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(args)
        .env("COLUMNS", columns.to_string())
        .output()
        .expect("the binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

/// Asserts that the command exited with `code` and said `fragment` on stderr.
fn assert_fails(out: &Output, code: i32, fragment: &str) {
    assert_eq!(out.status.code(), Some(code), "{}", stderr(out));
    assert!(stderr(out).contains(fragment), "{}", stderr(out));
}

/// Writes a scenario to a fresh temporary file.
fn temp_scenario(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuswap-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn run_prints_a_table_per_tenant_and_system_figures() {
    let out = gpuswap(&["run", &repo_file("scenarios/quickstart.toml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "tenant",
        "slowdown",
        "vram peak",
        "backprop",
        "hotspot",
        "makespan",
        "STP",
        "ANTT",
        "Jain(VRAM)",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn run_json_has_every_documented_field() {
    let out = gpuswap(&["run", "--json", &repo_file("scenarios/quickstart.toml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    for key in ["scenario", "seed", "device", "manager", "tenants", "system"] {
        assert!(v.get(key).is_some(), "top level lacks {key}");
    }
    assert_eq!(v["scenario"], "quickstart");
    assert_eq!(v["seed"], 42);
    assert_eq!(v["device"], "gtx480");
    assert_eq!(v["manager"], "gpuswap");
    // The settings that produced it.
    assert_eq!(v["settings"]["vram_bytes"], 300 << 20);
    assert_eq!(v["settings"]["chunk_bytes"], 4 << 20);
    assert_eq!(v["settings"]["return_interval_ns"], 50_000_000);
    let policy = v["settings"]["policy"].as_array().unwrap();
    assert!(
        policy.contains(&serde_json::json!("chunk_policy=priority-buffer")),
        "{policy:?}"
    );
    let tenants = v["tenants"].as_array().unwrap();
    assert_eq!(tenants.len(), 2);
    for t in tenants {
        for key in [
            "name",
            "app",
            "total_ns",
            "phase_ns",
            "slowdown",
            "vram_peak_bytes",
            "local_bytes",
            "remote_bytes",
            "bytes_evicted",
            "bytes_returned",
            "alloc_latency_ns",
            "error",
        ] {
            assert!(t.get(key).is_some(), "tenant lacks {key}: {t}");
        }
        for key in ["count", "p50", "p99", "max"] {
            assert!(
                t["alloc_latency_ns"][key].is_u64(),
                "alloc_latency_ns lacks {key}"
            );
        }
        assert!(t["error"].is_null());
        // 434 MiB of data in 300 MiB: GPUswap evicts, both run, both slower than alone.
        let slowdown = t["slowdown"].as_f64().unwrap();
        assert!((1.0..5.0).contains(&slowdown), "slowdown {slowdown}");
    }
    let evicted: u64 = tenants
        .iter()
        .map(|t| t["bytes_evicted"].as_u64().unwrap())
        .sum();
    assert!(evicted > 0);
    for key in ["makespan_ns", "stp", "antt", "jain_vram", "jain_slowdown"] {
        assert!(v["system"][key].is_number(), "system lacks {key}");
    }
}

/// Both tenants run out of 20 MiB: the system figures over finished tenants are null,
/// never the 0 (STP, ANTT) and 1 (Jain) that read as measured, and the text says "-".
#[test]
fn run_json_gives_null_figures_where_no_tenant_finished() {
    let path = temp_scenario(
        "all-fail.toml",
        &TWO_NN_SWEEP
            .replace("\"gpuswap\"", "\"native\"")
            .replace("[device]\n", "[device]\nvram_limit = \"20MiB\"\n"),
    );
    let out = gpuswap(&["run", "--json", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["system"]["tenants_failed"], 2);
    for key in ["stp", "antt", "jain_vram", "jain_slowdown"] {
        assert!(v["system"][key].is_null(), "{key}: {}", v["system"][key]);
    }
    let text = stdout(&gpuswap(&["run", path.to_str().unwrap()]));
    assert!(
        text.contains("STP -  ANTT -  Jain(slowdown) -  Jain(VRAM) -"),
        "{text}"
    );
}

#[test]
fn run_twice_gives_identical_json() {
    let path = repo_file("scenarios/native-oom.toml");
    let a = gpuswap(&["run", "--json", &path]);
    let b = gpuswap(&["run", "--json", &path]);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn apps_are_modelled_for_the_scenarios_device() {
    // random's re-reads of its 128 MiB table miss the GTX 480's 768 KiB L2 and often
    // hit the A100's 40 MiB one; the runtime's per-SM traffic is below 1 MB a launch.
    let vram_traffic = |preset: &str| -> u64 {
        let text = format!("[device]\npreset = \"{preset}\"\n[[tenant]]\napp = \"random\"\n");
        let path = temp_scenario(&format!("random-{preset}.toml"), &text);
        let out = gpuswap(&["run", "--json", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        v["tenants"][0]["local_bytes"].as_u64().unwrap()
    };
    let (testbed, a100) = (vram_traffic("gtx480"), vram_traffic("a100-80gb"));
    assert!(a100 < testbed * 9 / 10, "{a100} vs {testbed}");
}

#[test]
fn gpuswap_run_is_deterministic_and_reports_relocations() {
    let path = repo_file("scenarios/gpuswap-20mib.toml");
    let a = gpuswap(&["run", "--json", &path]);
    let b = gpuswap(&["run", "--json", &path]);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(a.stdout, b.stdout, "same scenario and seed, same bytes");
    let v: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(v["manager"], "gpuswap");
    // The settings that produced it.
    assert_eq!(v["settings"]["vram_bytes"], 20 << 20);
    assert_eq!(v["settings"]["chunk_bytes"], 4 << 20);
    assert_eq!(v["settings"]["return_interval_ns"], 50_000_000);
    let policy = v["settings"]["policy"].as_array().unwrap();
    assert!(
        policy.contains(&serde_json::json!("chunk_policy=priority-buffer")),
        "{policy:?}"
    );
    for t in v["tenants"].as_array().unwrap() {
        assert!(t["error"].is_null(), "{t}");
        assert!(t["remote_bytes"].as_u64().unwrap() > 0);
        assert!(t["vram_peak_bytes"].as_u64().unwrap() <= 20 << 20);
        let timeline = t["vram_timeline"].as_array().unwrap();
        assert!(timeline.len() > 2 && timeline.iter().all(|p| p.as_array().unwrap().len() == 2));
        for key in ["eviction_latency_ns", "victim_drain_ns", "victim_pause_ns"] {
            assert!(t[key]["count"].is_u64(), "{key}");
        }
        for key in ["policy", "dma_setup", "dma", "waiting"] {
            assert!(t["eviction_split_ns"][key].is_u64(), "{key}");
        }
    }
    let evicted: u64 = v["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["bytes_evicted"].as_u64().unwrap())
        .sum();
    assert!(evicted > 0);
    // Another seed changes the random choices, not the validity.
    let c = gpuswap(&["run", "--json", "--seed", "2", &path]);
    assert!(c.status.success());
}

#[test]
fn native_mode_fails_the_newcomer_and_keeps_the_first() {
    let out = gpuswap(&["run", "--json", &repo_file("scenarios/native-oom.toml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let first = &v["tenants"][0];
    let newcomer = &v["tenants"][1];
    assert!(first["error"].is_null(), "{first}");
    assert!(
        newcomer["error"]
            .as_str()
            .unwrap()
            .contains("out of memory"),
        "{newcomer}"
    );
    assert!(newcomer["slowdown"].is_null());
}

#[test]
fn seed_flag_overrides_the_scenario() {
    let out = gpuswap(&[
        "run",
        "--json",
        "--seed",
        "9",
        &repo_file("scenarios/native-oom.toml"),
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["seed"], 9);
}

#[test]
fn every_example_scenario_runs() {
    // The unified-memory ones are small (the research simulator's sizes); the real
    // GPU's model takes a fraction of a second under its own manager.
    for dir in [
        repo_file("scenarios"),
        repo_file("scenarios/uvm"),
        repo_file("scenarios/real"),
    ] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let out = gpuswap(&["run", path.to_str().unwrap()]);
                assert!(out.status.success(), "{}: {}", path.display(), stderr(&out));
            }
        }
    }
}

#[test]
fn presets_lists_every_required_device() {
    let out = gpuswap(&["presets"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for name in [
        "gtx480",
        "gtx1080ti",
        "v100-pcie-32gb",
        "a100-80gb",
        "h100-pcie-80gb",
        "gh200",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "{name} missing in\n{text}"
        );
    }
    // Every registered preset is listed, not only the required ones.
    for p in gpuswap_sim::preset::all() {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(p.name)),
            "{} missing in\n{text}",
            p.name
        );
    }
    assert!(text.contains("PCIe 2.0 x16") && text.contains("NVLink-C2C"));
}

#[test]
fn policies_lists_every_registered_mode_and_choice_with_its_needs() {
    use gpuswap_core::registry::{POLICIES, ParamKind, schedulers};
    let out = gpuswap(&["policies"]);
    assert!(out.status.success());
    let text = stdout(&out);
    let row = |setting: &str, value: &str| {
        text.lines()
            .find(|l| {
                let mut words = l.split_whitespace();
                words.next() == Some(setting) && words.next() == Some(value)
            })
            .unwrap_or_else(|| panic!("{setting} = {value} missing in\n{text}"))
            .to_owned()
    };
    for entry in POLICIES {
        row("manager.mode", entry.choice.name);
        for spec in entry.params {
            if let ParamKind::Choice(options) = spec.kind {
                for c in options() {
                    let line = row(&format!("manager.{}", spec.key), c.name);
                    for need in c.needs.names() {
                        assert!(line.contains(need), "{line} lacks {need}");
                    }
                }
            }
        }
    }
    for s in schedulers() {
        let listed = text
            .lines()
            .any(|l| l.starts_with("launch gate") && l.split_whitespace().nth(2) == Some(s.name));
        assert!(listed, "launch gate {} missing in\n{text}", s.name);
    }
    for p in gpuswap_core::gpu_time::scheduling::POLICIES {
        row("scheduler.policy", p.choice.name);
    }
    assert!(row("manager.mode", "gdev").contains("launch gating"));
}

#[test]
fn apps_lists_every_app_with_memory_use() {
    let out = gpuswap(&["apps"]);
    assert!(out.status.success());
    let text = stdout(&out);
    // Every registered app, whatever the registry holds.
    for name in gpuswap_sim::apps::all().iter().map(|a| a.name()) {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name));
        let line = line.unwrap_or_else(|| panic!("{name} missing in\n{text}"));
        assert!(line.contains("MiB") || line.contains("GiB"), "{line}");
    }
}

#[test]
fn bad_scenarios_exit_2_with_file_key_and_expectation() {
    let cases = [
        (
            "unknown-key.toml",
            "[[tenant]]\napp = \"nn\"\nrepet = 2\n",
            "repet",
        ),
        (
            "bad-unit.toml",
            "[device]\nvram_limit = \"100 megs\"\n[[tenant]]\napp = \"nn\"\n",
            "device.vram_limit",
        ),
        (
            "unknown-app.toml",
            "[[tenant]]\napp = \"crysis\"\n",
            "tenant[0].app",
        ),
        (
            "unknown-preset.toml",
            "[device]\npreset = \"voodoo2\"\n[[tenant]]\napp = \"nn\"\n",
            "device.preset",
        ),
        (
            "zero-repeat.toml",
            "[[tenant]]\napp = \"nn\"\nrepeat = 0\n",
            "tenant[0].repeat",
        ),
    ];
    for (name, text, key) in cases {
        let path = temp_scenario(name, text);
        let out = gpuswap(&["run", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = stderr(&out);
        assert!(err.contains(name) && err.contains(key), "{name}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn missing_scenario_file_exits_2() {
    let out = gpuswap(&["run", "/no/such/scenario.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("/no/such/scenario.toml"));
}

#[test]
fn bad_flags_exit_2() {
    assert_eq!(gpuswap(&["run"]).status.code(), Some(2));
    assert_eq!(gpuswap(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        gpuswap(&["run", "x.toml", "--seed", "minus-one"])
            .status
            .code(),
        Some(2)
    );
}

/// A small sweep: two nn tenants on a GTX 480, two chunk policies, three seeds each.
const TWO_NN_SWEEP: &str = "seed = 5\n[device]\npreset = \"gtx480\"\n[manager]\nmode = \"gpuswap\"\n\
    [[tenant]]\nname = \"a\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n\
    [[tenant]]\nname = \"b\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n\
    [sweep]\nruns = 3\n[sweep.vary]\n\"manager.chunk_policy\" = [\"random\", \"priority-buffer\"]\n";

#[test]
fn sweep_writes_every_row_even_when_a_point_fails() {
    let dir = std::env::temp_dir().join(format!("gpuswap-sweep-test-{}", std::process::id()));
    let scenario = temp_scenario("sweep.toml", TWO_NN_SWEEP);
    // 9 GiB is more than the GTX 480 has: every point is checked before the first run,
    // and the sweep stops there, naming the point, the key and the value.
    let out = gpuswap(&[
        "sweep",
        scenario.to_str().unwrap(),
        "--vary",
        "device.vram_limit=20MiB,200MiB,9GiB",
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert_fails(
        &out,
        2,
        "point 2 (manager.chunk_policy = \"random\", device.vram_limit = \"9GiB\"): device.vram_limit",
    );
    assert!(!dir.exists(), "a refused sweep wrote {}", dir.display());
    // A second tenant starting after the simulated time's limit: those runs fail, the
    // others run, every row is written, and the sweep says so with status 1.
    let vary = [
        "--vary",
        "device.vram_limit=20MiB,200MiB",
        "--vary",
        "tenant[1].start=0s,2000000s",
    ];
    let mut args = vec!["sweep", scenario.to_str().unwrap()];
    args.extend(vary);
    args.extend(["--out", dir.to_str().unwrap(), "--quiet"]);
    let out = gpuswap(&args);
    assert_fails(
        &out,
        1,
        &format!(
            "12 of 24 runs failed; their errors are in the error column of {}",
            dir.join("results.csv").display()
        ),
    );
    assert!(
        stdout(&out).contains("24 runs (8 grid points x 3 seeds): 12 failed"),
        "{}",
        stdout(&out)
    );

    let mut results = csv::Reader::from_path(dir.join("results.csv")).unwrap();
    let header: Vec<String> = results
        .headers()
        .unwrap()
        .iter()
        .map(String::from)
        .collect();
    for column in [
        "point",
        "manager.chunk_policy",
        "device.vram_limit",
        "run",
        "seed",
        "error",
        "slowest_phase_ns",
        "stp",
        "a.total_ns",
        "b.slowdown",
        "b.bytes_evicted",
        "a.error",
    ] {
        assert!(
            header.iter().any(|h| h == column),
            "no column {column} in {header:?}"
        );
    }
    let rows: Vec<csv::StringRecord> = results.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 24);
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    for row in &rows {
        let failed = &row[col("tenant[1].start")] == "2000000s";
        assert_eq!(!row[col("error")].is_empty(), failed, "{row:?}");
        assert_eq!(row[col("a.total_ns")].is_empty(), failed);
        if failed {
            assert!(
                row[col("error")].contains("--max-sim-time"),
                "{}",
                &row[col("error")]
            );
        }
    }
    // Seeds: scenario seed + run.
    let seeds: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r.get(col("seed")).unwrap()).collect();
    assert_eq!(seeds, ["5", "6", "7"].into_iter().collect());

    let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    assert_eq!(summary.lines().count(), 9, "header + 8 points");
    assert!(
        summary
            .lines()
            .next()
            .unwrap()
            .contains("slowest_phase_ns.mean")
    );
    assert!(
        summary
            .lines()
            .next()
            .unwrap()
            .contains("eviction_mean_ns.mean")
    );
    // 20 MiB forces evictions: their latency gets a plot too.
    let latency =
        std::fs::read_to_string(dir.join("eviction-latency-vs-device_vram_limit.svg")).unwrap();
    assert!(latency.contains("mean latency of evicting allocations (ms)"));
    let svg = std::fs::read_to_string(dir.join("runtime-vs-device_vram_limit.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("runtime of the slowest tenant"));
    // Points failed: the figures mark them rather than leave them out.
    assert!(
        svg.contains("a run failed"),
        "no failure mark in the runtime plot"
    );
    let phase = std::fs::read_to_string(dir.join("phase-vs-device_vram_limit.svg")).unwrap();
    assert!(
        phase.contains("measured phase of the slowest tenant") && phase.contains("a run failed")
    );
    // Same sweep, same bytes.
    let again = dir.join("again");
    let mut args = vec!["sweep", scenario.to_str().unwrap()];
    args.extend(vary);
    args.extend(["--out", again.to_str().unwrap(), "--quiet"]);
    gpuswap(&args);
    assert_eq!(
        std::fs::read(dir.join("results.csv")).unwrap(),
        std::fs::read(again.join("results.csv")).unwrap()
    );
    // Sharded, the same failures: each shard and the merge exit 1 (the merge once exited
    // 0), and the merge still writes the whole sweep's bytes.
    let mut shards = Vec::new();
    for shard in ["1/2", "2/2"] {
        let folder = dir.join(format!("shard{}", &shard[..1]));
        let mut args = vec!["sweep", scenario.to_str().unwrap()];
        args.extend(vary);
        args.extend([
            "--shard",
            shard,
            "--out",
            folder.to_str().unwrap(),
            "--quiet",
        ]);
        assert_eq!(gpuswap(&args).status.code(), Some(1), "shard {shard}");
        shards.push(folder.to_string_lossy().into_owned());
    }
    let merged = dir.join("merged");
    let out = gpuswap(&[
        "merge",
        &shards[0],
        &shards[1],
        "--out",
        merged.to_str().unwrap(),
    ]);
    assert_fails(&out, 1, "12 of 24 runs failed");
    assert_eq!(
        std::fs::read(dir.join("results.csv")).unwrap(),
        std::fs::read(merged.join("results.csv")).unwrap()
    );
}

#[test]
fn sweep_rejects_bad_input_with_exit_2() {
    let scenario = temp_scenario("sweep-bad.toml", "[[tenant]]\napp = \"nn\"\n");
    for (args, expected) in [
        (vec!["--vary", "colour=red"], "expected a scenario key"),
        (
            vec!["--vary", "device.vram_limit=1MiB..0MiB step 1MiB"],
            "below",
        ),
        (vec!["--vary", "tenant[4].repeat=1"], "tenants"),
        (vec!["--runs", "0"], "--runs"),
        (
            vec![
                "--vary",
                "tenant.repeat=1,2",
                "--vary",
                "tenant[0].repeat=3",
            ],
            "set the same setting",
        ),
    ] {
        let mut all = vec!["sweep", scenario.to_str().unwrap(), "--quiet"];
        all.extend(args);
        let out = gpuswap(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert!(stderr(&out).contains(expected), "{all:?}: {}", stderr(&out));
    }
}

#[test]
fn bench_reports_runs_and_event_rate() {
    let out = gpuswap(&["bench", "--runs", "1", "--apps", "nn,backprop"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("2 apps x 25 sizes x 2 policies x 1 runs = 100 runs (0 failed)"),
        "{text}"
    );
    assert!(
        text.contains("simulated events/s") && text.contains("ns of wall time per event"),
        "{text}"
    );
    // Wall time on a loaded machine is several times the work: CPU time comes too.
    assert!(text.contains("; CPU time "), "{text}");
    let bad = gpuswap(&["bench", "--apps", "doom"]);
    assert_fails(&bad, 2, "doom");
    // Samples give the spread; --json the figures for scripts.
    let out = gpuswap(&[
        "bench",
        "--runs",
        "1",
        "--apps",
        "nw",
        "--samples",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let figures: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(figures["runs"], 50);
    assert_eq!(figures["wall_s"].as_array().unwrap().len(), 2);
    let events = figures["events"].as_f64().unwrap();
    let median = figures["wall_s_median"].as_f64().unwrap();
    assert!(events > 0.0 && median >= figures["wall_s_min"].as_f64().unwrap());
    let ns = figures["ns_per_event"].as_f64().unwrap();
    assert!((ns - median * 1e9 / events).abs() < 1e-6 * ns, "{figures}");
    assert_eq!(figures["cpu_s"].as_array().unwrap().len(), 2, "{figures}");
    let cpu_ns = figures["cpu_ns_per_event"].as_f64().unwrap();
    assert!(cpu_ns > 0.0, "{figures}");
}

#[test]
fn the_unified_memory_bench_measures_the_workloads_and_sizes_asked() {
    let out = gpuswap(&[
        "bench",
        "--uvm",
        "--workloads",
        "mixed,linear",
        "--working-sets",
        "8MiB",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    // The benchmark's order, whatever the list's; one row per workload and size.
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!(rows[0][0], "linear", "{text}");
    assert_eq!(rows[1][0], "mixed", "{text}");
    for row in &rows {
        assert_eq!(&row[1..3], ["8.0", "MiB"], "{text}");
        let touches: u64 = row[3].parse().unwrap();
        assert!(touches > 0, "{text}");
    }
    assert_fails(
        &gpuswap(&["bench", "--uvm", "--workloads", "strided"]),
        2,
        "--workloads: unknown workload \"strided\"",
    );
    assert_fails(
        &gpuswap(&["bench", "--uvm", "--working-sets", "1MiB"]),
        2,
        "--working-sets: \"1MiB\" is below one 2 MiB block",
    );
    // The filters belong to --uvm.
    assert_fails(&gpuswap(&["bench", "--workloads", "linear"]), 2, "--uvm");
}

#[test]
fn a_reader_that_stops_early_is_not_an_error_but_a_full_disk_is() {
    use std::process::Stdio;
    // The reading end is closed before the run has written anything.
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["run", "--json", &repo_file("scenarios/quickstart.toml")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    if Path::new("/dev/full").exists() {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
            .args(["presets"])
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        assert_fails(&out, 1, "cannot write the output");
    }
}

#[test]
fn a_scenario_from_a_pipe_is_read_once() {
    use std::io::Write;
    use std::process::Stdio;
    let text = std::fs::read_to_string(repo_file("scenarios/quickstart.toml")).unwrap();
    for command in ["run", "compare"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
            .args([command, "/dev/stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{command}: {}", stderr(&out));
        assert!(stdout(&out).contains("scenario stdin"), "{}", stdout(&out));
    }
}

#[test]
fn a_closed_or_full_standard_error_never_panics() {
    use std::process::Stdio;
    // An error for a full standard error still exits 2, not 101 (a panic).
    if Path::new("/dev/full").exists() {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
            .args(["run", "/nonexistent/scenario.toml"])
            .stderr(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
    }
    // `check -v` writes a line per seed to standard error, whose reader has gone.
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["check", "--seeds", "20", "-v"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// A daemon whose standard error is full keeps serving (its log lines are lost).
#[test]
fn a_daemon_with_a_full_standard_error_keeps_serving() {
    if !Path::new("/dev/full").exists() {
        return;
    }
    let socket = std::env::temp_dir().join(format!("gpuswap-full-{}.sock", std::process::id()));
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["daemon", "--vram", "64MiB", "--socket"])
        .arg(&socket)
        .stderr(std::fs::File::create("/dev/full").unwrap())
        .spawn()
        .unwrap();
    let socket_text = socket.display().to_string();
    let mut answered = false;
    for _ in 0..200 {
        let top = gpuswap(&["top", "--json", "--socket", &socket_text]);
        if top.status.success() {
            answered = true;
            break;
        }
        assert_eq!(daemon.try_wait().unwrap(), None, "the daemon died");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(answered, "the daemon never answered");
    assert_eq!(daemon.try_wait().unwrap(), None, "the daemon died");
    daemon.kill().unwrap();
    daemon.wait().unwrap();
}

#[test]
fn run_takes_a_sweep_scenario_and_runs_its_base_point() {
    let out = gpuswap(&["run", &repo_file("scenarios/repro/backprop-memory.toml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("backprop"));
    assert!(stderr(&out).contains("has a [sweep] table; `run` runs its base point"));
}

#[test]
fn an_overlong_name_or_a_file_that_is_not_utf8_is_refused_with_its_place() {
    let name = "x".repeat(70_000);
    let path = temp_scenario(
        "long.toml",
        &format!("[[tenant]]\nname = \"{name}\"\napp = \"stream\"\n"),
    );
    let out = gpuswap(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("tenant[0].name (line 2): expected a name of at most 64"));
    let path = temp_scenario("latin1.toml", "");
    std::fs::write(&path, b"[[tenant]]\nname = \"caf\xe9\"\napp = \"stream\"\n").unwrap();
    let out = gpuswap(&["run", path.to_str().unwrap()]);
    assert_fails(&out, 2, "not UTF-8 text: byte 0xe9 at line 2, column 12");
}

#[test]
fn a_run_that_would_not_end_stops_at_its_limit_and_says_how_to_raise_it() {
    let path = temp_scenario(
        "forever.toml",
        "[[tenant]]\nname = \"a\"\napp = \"stream\"\nrepeat = 4294967295\n",
    );
    let out = gpuswap(&["run", path.to_str().unwrap(), "--max-events", "100000"]);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(e.contains("stopped at its limit of 100000 events"), "{e}");
    assert!(e.contains("raise it with --max-events N"), "{e}");
    let path = temp_scenario(
        "late.toml",
        "[[tenant]]\nname = \"a\"\napp = \"stream\"\nstart = \"4611686018s\"\n",
    );
    let out = gpuswap(&["run", path.to_str().unwrap()]);
    assert_fails(&out, 1, "raise it with --max-sim-time DURATION");
}

#[test]
fn sweep_keys_are_checked_before_any_run() {
    let scenario = repo_file("scenarios/quickstart.toml");
    let out = gpuswap(&[
        "sweep",
        &scenario,
        "--vary",
        "device.vram_limt=100MiB,200MiB",
        "--quiet",
    ]);
    assert_fails(&out, 2, "device.vram_limt is not a scenario key");
    let out = gpuswap(&[
        "sweep",
        &scenario,
        "--vary",
        "device.vram_limit=100MiB",
        "--vary",
        "device.vram_limit=200MiB",
        "--quiet",
    ]);
    assert_fails(&out, 2, "varied by an earlier --vary too");
}

#[test]
fn compare_compares_settings_of_one_mode() {
    let quickstart = repo_file("scenarios/quickstart.toml");
    let managers = "gpuswap:victim=largest-share,gpuswap:victim=access-rate";
    let out = gpuswap(&["compare", &quickstart, "--managers", managers]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let rows = |label: &str| text.lines().filter(|l| l.starts_with(label)).count();
    // Two tenants and one summary row per manager, each named as asked.
    assert_eq!(rows("gpuswap:victim=largest-share "), 3, "{text}");
    assert_eq!(rows("gpuswap:victim=access-rate "), 3, "{text}");
    // The settings took: the two victims evict differently.
    let out = gpuswap(&["compare", &quickstart, "--json", "--managers", managers]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["managers"],
        serde_json::json!(["gpuswap:victim=largest-share", "gpuswap:victim=access-rate"])
    );
    let evicted = |i: usize| json["reports"][i]["tenants"][0]["bytes_evicted"].clone();
    assert_ne!(evicted(0), evicted(1));
    // A setting the mode does not take, or one without a value, is bad input naming it.
    for (managers, says) in [
        ("gpuswap:bogus=1", "manager.bogus"),
        ("gpuswap:victim", "is not a setting"),
        ("gpuswap:victim=nope", "manager.victim"),
    ] {
        let out = gpuswap(&["compare", &quickstart, "--managers", managers]);
        assert_eq!(out.status.code(), Some(2), "{managers}");
        assert!(stderr(&out).contains(says), "{managers}: {}", stderr(&out));
    }
}

#[test]
fn compare_shows_native_failing_the_newcomer_where_gpuswap_keeps_both() {
    let out = gpuswap(&[
        "compare",
        &repo_file("scenarios/quickstart.toml"),
        "--managers",
        "native,gpuswap",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let line = |manager: &str, tenant: &str| {
        text.lines()
            .find(|l| l.starts_with(manager) && l.split_whitespace().nth(1) == Some(tenant))
            .unwrap_or_else(|| panic!("no row for {manager} {tenant} in\n{text}"))
            .to_owned()
    };
    assert!(line("native", "b").ends_with("FAILED (note 1)"), "{text}");
    assert!(
        text.contains("note 1: native b: allocation of \"temp_0\""),
        "{text}"
    );
    assert!(line("native", "a").ends_with("ran"), "{text}");
    assert!(line("gpuswap", "a").ends_with("ran") && line("gpuswap", "b").ends_with("ran"));
    assert!(
        text.contains("native   1 of 2") && text.contains("gpuswap  0 of 2"),
        "{text}"
    );
    // At 80 columns both stay tables (a long error once turned them into one record per
    // row).
    let narrow = stdout(&gpuswap_in(
        80,
        &["compare", &repo_file("scenarios/quickstart.toml")],
    ));
    assert!(narrow.lines().all(|l| l.chars().count() <= 80), "{narrow}");
    assert!(!narrow.contains("\nmanager native\n"), "{narrow}");
    // Every mode by default; an unknown one is bad input.
    let out = gpuswap(&["compare", &repo_file("scenarios/quickstart.toml")]);
    for mode in ["native", "gpuswap", "fcfs", "static", "gdev"] {
        assert!(stdout(&out).contains(&format!("\n{mode} ")), "{mode}");
    }
    let out = gpuswap(&[
        "compare",
        &repo_file("scenarios/quickstart.toml"),
        "--managers",
        "nope",
    ]);
    assert_fails(&out, 2, "--managers nope");
    // Tenants with contracts: only the modes that honour them, and a word on the others.
    let out = gpuswap(&["compare", &repo_file("scenarios/contracts.toml")]);
    let text = stdout(&out);
    assert!(
        text.contains("\ngpuswap ") && !text.contains("\nnative "),
        "{text}"
    );
    assert!(
        text.contains("left out: native, fcfs, static, gdev (they do not honour the tenants' vram_guarantee, weight, priority_class"),
        "{text}"
    );
}

#[test]
fn the_daemon_refuses_a_zero_chunk_or_return_interval() {
    for flag in [["--chunk-size", "0B"], ["--return-interval", "0s"]] {
        let out = gpuswap(&[
            "daemon",
            "--vram",
            "1GiB",
            "--socket",
            "/tmp/never.sock",
            flag[0],
            flag[1],
        ]);
        assert_fails(
            &out,
            2,
            "--chunk-size and --return-interval must be positive",
        );
    }
    // Nor does it start on no VRAM or on more host memory than the machine has
    // (checked before the first client, issue 42).
    let zero = gpuswap(&["daemon", "--vram", "0B", "--socket", "/tmp/never.sock"]);
    assert_fails(&zero, 2, "--vram must be above 0");
    let host = gpuswap(&["daemon", "--host", "1000TiB", "--socket", "/tmp/never.sock"]);
    assert_fails(&host, 2, "is beyond this machine's memory");
}

#[test]
fn a_timeline_in_a_format_it_cannot_write_is_refused() {
    let out = gpuswap(&[
        "run",
        &repo_file("scenarios/quickstart.toml"),
        "--timeline",
        "/tmp/x.pdf",
    ]);
    assert_fails(&out, 2, "expected a file name ending in .svg or .png");
}

#[test]
fn sweep_refuses_a_folder_in_use_unless_forced_and_then_replaces_its_files() {
    let dir = std::env::temp_dir().join(format!("gpuswap-cli-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("old-plot.svg"), "<svg/>").unwrap();
    let scenario = repo_file("scenarios/quickstart.toml");
    let out_dir = dir.to_str().unwrap();
    let args = [
        "sweep",
        &scenario,
        "--out",
        out_dir,
        "--quiet",
        "--vary",
        "tenant.repeat=1",
    ];
    let out = gpuswap(&args);
    assert_fails(&out, 2, "is not empty");
    let forced: Vec<&str> = args.iter().copied().chain(["--force"]).collect();
    let out = gpuswap(&forced);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !dir.join("old-plot.svg").exists(),
        "the earlier plot is gone"
    );
    assert!(dir.join("results.csv").exists());
    // A file a sweep does not write stops even --force.
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let out = gpuswap(&forced);
    assert_eq!(out.status.code(), Some(2));
    assert!(dir.join("notes.txt").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failed_tenants_are_never_a_good_figure_and_can_fail_the_command() {
    let scenario = repo_file("scenarios/native-oom.toml");
    let out = gpuswap(&["run", &scenario]);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains(
            "1 of 2 tenants FAILED: STP, ANTT and Jain(slowdown) cover the 1 that finished"
        ),
        "{}",
        stdout(&out)
    );
    let v: serde_json::Value =
        serde_json::from_str(&stdout(&gpuswap(&["run", "--json", &scenario]))).unwrap();
    assert_eq!(v["system"]["tenants_failed"], 1);
    let out = gpuswap(&["run", &scenario, "--fail-on-error"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("1 of 2 tenants failed"));
    // Every tenant failed: no figure over survivors at all.
    let path = temp_scenario(
        "all-fail.toml",
        "[device]\nvram_limit = \"1MiB\"\n[manager]\nmode = \"native\"\n[[tenant]]\nname = \"a\"\napp = \"stream\"\n",
    );
    let text = stdout(&gpuswap(&["run", path.to_str().unwrap()]));
    assert!(text.contains("STP -  ANTT -  Jain(slowdown) -"), "{text}");
    // A sweep says how many runs ended with a failed tenant, and can fail on them.
    let dir = std::env::temp_dir().join(format!("gpuswap-cli-fail-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = gpuswap(&[
        "sweep",
        &scenario,
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
        "--fail-on-error",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("0 failed, 1 more ended with a failed tenant"),
        "{}",
        stdout(&out)
    );
    assert!(
        dir.join("results.csv").exists(),
        "results are written all the same"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_daemon_drives_the_endpoint_and_names_how_to_reproduce_a_seed() {
    let out = gpuswap(&["check", "--daemon", "--seeds", "20"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("checked 20 daemon seeds (0..19)"),
        "{text}"
    );
    assert!(text.contains("all passed"), "{text}");
    // One seed, with its case on stderr.
    let out = gpuswap(&["check", "--daemon", "--seed", "3", "--verbose"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).starts_with("seed 3: "), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("checked 1 daemon seeds (3..3)"));
}

#[test]
fn check_runs_seeds_and_names_how_to_reproduce_one() {
    let out = gpuswap(&["check", "--seeds", "40", "--first", "100"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("checked 40 seeds (100..139)"), "{text}");
    assert!(text.contains("all passed"), "{text}");
    // One seed, with its case shown on stderr.
    let out = gpuswap(&["check", "--seed", "7", "--verbose"]);
    assert!(out.status.success());
    assert!(stderr(&out).starts_with("seed 7: "), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("checked 1 seeds (7..7)"));
    // No seeds, or a seed with a range, is bad input.
    assert_eq!(gpuswap(&["check", "--seeds", "0"]).status.code(), Some(2));
    assert_eq!(
        gpuswap(&["check", "--seed", "1", "--seeds", "5"])
            .status
            .code(),
        Some(2)
    );
    // The largest seed is checked, and a range past it is refused, not cut short.
    let max = u64::MAX.to_string();
    let out = gpuswap(&["check", "--seed", &max]);
    assert!(
        stdout(&out).starts_with(&format!("checked 1 seeds ({max}..{max})")),
        "{}",
        stdout(&out)
    );
    let out = gpuswap(&[
        "check",
        "--seeds",
        "5",
        "--first",
        &(u64::MAX - 1).to_string(),
    ]);
    assert_fails(
        &out,
        2,
        "expected at most 2 seeds from 18446744073709551614",
    );
}

#[test]
fn output_fits_a_narrow_terminal() {
    let quickstart = repo_file("scenarios/quickstart.toml");
    for args in [
        vec!["run", quickstart.as_str()],
        vec!["compare", quickstart.as_str()],
        vec!["presets"],
        vec!["policies"],
        vec!["apps"],
        vec!["apps", "backprop"],
        vec!["keys"],
        vec!["metrics"],
    ] {
        let wide = stdout(&gpuswap(&args));
        let out = gpuswap_in(80, &args);
        assert!(out.status.success(), "{args:?}");
        let text = stdout(&out);
        let longest = text.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(longest <= 80, "{args:?}: a line of {longest} columns");
        // The same figures, laid out differently.
        assert_eq!(
            text.split_whitespace()
                .filter(|w| w.ends_with("MiB"))
                .count(),
            wide.split_whitespace()
                .filter(|w| w.ends_with("MiB"))
                .count(),
            "{args:?}"
        );
    }
    // Piped, a table keeps one row per line however wide.
    let presets = stdout(&gpuswap(&["presets"]));
    assert!(presets.lines().any(|l| l.chars().count() > 150));
}

#[test]
fn keys_and_init_cover_every_scenario_key_and_the_template_runs() {
    let keys = stdout(&gpuswap(&["keys"]));
    for key in [
        "seed",
        "device.host_memory",
        "manager.chunk_size",
        "manager.victim",
        "manager.tenants",
        "tenant.priorities_file",
        "sweep.vary",
    ] {
        assert!(
            keys.lines().any(|l| l.starts_with(&format!("{key} "))),
            "{key} missing"
        );
    }
    let template = stdout(&gpuswap(&["init"]));
    // Every key is in the template, set or commented.
    for line in keys.lines().skip(2) {
        let key = line.split_whitespace().next().unwrap();
        let name = key.rsplit('.').next().unwrap();
        assert!(
            template.contains(&format!("{name} = ")),
            "{key} not in the template"
        );
    }
    let file = temp_scenario("init.toml", "");
    std::fs::remove_file(&file).unwrap();
    let path = file.to_string_lossy().into_owned();
    let out = gpuswap(&["init", &path]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), template);
    // It does not overwrite without --force.
    let again = gpuswap(&["init", &path]);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("--force"));
    assert!(gpuswap(&["init", &path, "--force"]).status.success());
    // And it runs as it is, oversubscribed: gpuswap evicts.
    let out = gpuswap(&["run", &path, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let evicted: u64 = report["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["bytes_evicted"].as_u64().unwrap())
        .sum();
    assert!(evicted > 0);
}

#[test]
fn host_memory_is_shown_and_settable() {
    let presets = stdout(&gpuswap(&["presets"]));
    assert!(presets.lines().next().unwrap().contains("host memory"));
    assert!(presets.contains("16.0 GiB"));
    let scenario = temp_scenario(
        "host.toml",
        "[device]\nvram_limit = \"300MiB\"\nhost_memory = \"1MiB\"\n[manager]\nmode = \"gpuswap\"\n\
         [[tenant]]\napp = \"backprop\"\n[[tenant]]\napp = \"hotspot\"\nstart = \"20ms\"\n",
    );
    let out = gpuswap(&["run", &scenario.to_string_lossy()]);
    let text = stdout(&out);
    assert!(text.contains("host memory 1.0 MiB"), "{text}");
    // Too little host memory to evict into: the newcomer fails, and says why.
    assert!(text.contains("out of host memory"), "{text}");
    let bad = temp_scenario(
        "host-bad.toml",
        "[device]\nhost_memory = \"lots\"\n[[tenant]]\napp = \"stream\"\n",
    );
    let out = gpuswap(&["run", &bad.to_string_lossy()]);
    assert_fails(&out, 2, "device.host_memory");
}

#[test]
fn apps_app_shows_sizes_and_buffer_labels() {
    let out = gpuswap(&["apps", "backprop"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("sizes: default"), "{text}");
    assert!(text.contains("input_hidden_weights  68.0 MiB"), "{text}");
    let small = stdout(&gpuswap(&["apps", "backprop", "--size", "rodinia"]));
    assert!(!small.contains("68.0 MiB"), "{small}");
    let out = gpuswap(&["apps", "backprp"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("expected one of"));
    assert_eq!(
        gpuswap(&["apps", "backprop", "--size", "huge"])
            .status
            .code(),
        Some(2)
    );
}

/// Every column of every table `run` prints, in every mode, is in `gpuswap metrics`
/// (it once explained nothing of unified memory, PILOT, fault logs or VMs).
#[test]
fn metrics_explains_every_column_run_prints() {
    let glossary = stdout(&gpuswap(&["metrics"]));
    let pilot = temp_scenario(
        "glossary-pilot.toml",
        "seed = 1\n[device]\npreset = \"v100-pcie-32gb\"\nsharing = \"mps\"\nsubscription = 1.5\n\
         [manager]\nmode = \"uvm\"\n[scheduler]\npolicy = \"mfit\"\n\
         [[tenant]]\napp = \"backprop\"\n[[tenant]]\napp = \"pagedos\"\n",
    );
    let scenarios = [
        repo_file("scenarios/quickstart.toml"),
        repo_file("scenarios/contracts.toml"),
        repo_file("scenarios/uvm/two-tenants.toml"),
        repo_file("scenarios/traces/fault-log.toml"),
        repo_file("scenarios/vgpu/placement.toml"),
        pilot.to_string_lossy().into_owned(),
    ];
    let mut seen = Vec::new();
    for scenario in &scenarios {
        let out = gpuswap(&["run", scenario]);
        assert!(out.status.success(), "{scenario}: {}", stderr(&out));
        let text = stdout(&out);
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.windows(2) {
            if !pair[1].starts_with("---") {
                continue;
            }
            for column in pair[0].split("  ").map(str::trim).filter(|c| !c.is_empty()) {
                if ["tenant", "app", "vm", "workload"].contains(&column) {
                    continue;
                }
                assert!(
                    glossary.contains(column),
                    "{scenario}: column {column:?} is not in gpuswap metrics"
                );
                seen.push(column.to_owned());
            }
        }
    }
    for column in [
        "far faults",
        "preemptions",
        "faults/batch mean",
        "fps",
        "contract",
    ] {
        assert!(
            seen.iter().any(|c| c == column),
            "no table showed {column}: {seen:?}"
        );
    }
}

/// A program without a measured phase (a fault log) is measured whole: its phase is
/// its run, the time its slowdown divides (it once showed phase 0 beside slowdown 1.2).
#[test]
fn a_fault_log_tenants_phase_is_its_whole_run() {
    let out = gpuswap(&[
        "run",
        &repo_file("scenarios/traces/fault-log.toml"),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tenant = &report["tenants"][0];
    assert!(tenant["phase_ns"].as_u64().unwrap() > 0, "{tenant}");
    assert_eq!(tenant["phase_ns"], tenant["total_ns"], "{tenant}");
}

/// Times near the end of u64 once wrapped the simulated clock (a panic inside the
/// link); durations are bounded at 2^62 ns, and a run at that bound stops at its limit.
/// A VM's long life is bounded by the event limit as well as by time.
#[test]
fn the_simulated_clock_never_wraps() {
    let at_bound = temp_scenario(
        "clock-bound.toml",
        "seed = 1\n[device]\npreset = \"gtx480\"\n[[tenant]]\napp = \"backprop\"\n\
         start = \"4611686018427387904ns\"\n[[tenant]]\napp = \"bfs\"\n",
    );
    let limit = "--max-sim-time";
    let out = gpuswap(&[
        "run",
        &at_bound.to_string_lossy(),
        limit,
        "4611686018427387904ns",
    ]);
    assert_fails(&out, 1, "stopped at its limit of 4611686018.427 s");
    let out = gpuswap(&[
        "run",
        &at_bound.to_string_lossy(),
        limit,
        "18446744073709551615ns",
    ]);
    assert_fails(&out, 2, "at most 4611686018s");
    let past = temp_scenario(
        "clock-past.toml",
        "[device]\npreset = \"gtx480\"\n[[tenant]]\napp = \"bfs\"\nstart = \"18446744073s\"\n",
    );
    assert_fails(
        &gpuswap(&["run", &past.to_string_lossy()]),
        2,
        "tenant[0].start",
    );
    let long_vm = temp_scenario(
        "clock-vm.toml",
        "[device]\npreset = \"hd530\"\n[[vm]]\nworkload = \"urbanterror\"\n\
         duration = \"4611686018s\"\n",
    );
    let out = gpuswap(&["run", &long_vm.to_string_lossy(), "--max-events", "10000"]);
    assert_fails(&out, 1, "--max-events");
}

/// A lone unified-memory tenant under zero-copy once reported STP 5.4 with no word that
/// its slowdown compares against uvm's defaults: the report names the baseline's mode.
#[test]
fn a_report_names_the_mode_its_slowdowns_compare_against() {
    let zero_copy = temp_scenario(
        "baseline-zero-copy.toml",
        "seed = 1\n[device]\npreset = \"gtx1080ti\"\n[manager]\nmode = \"uvm\"\n\
         migration = \"zero-copy\"\n[[tenant]]\napp = \"backprop\"\n",
    );
    let path = zero_copy.to_string_lossy();
    let report: serde_json::Value =
        serde_json::from_slice(&gpuswap(&["run", &path, "--json"]).stdout).unwrap();
    assert_eq!(report["settings"]["baseline_mode"], "uvm");
    let text = stdout(&gpuswap(&["run", &path]));
    assert!(
        text.contains("alone with ample VRAM in mode uvm at its defaults"),
        "{text}"
    );
    let quick = repo_file("scenarios/quickstart.toml");
    let report: serde_json::Value =
        serde_json::from_slice(&gpuswap(&["run", &quick, "--json"]).stdout).unwrap();
    assert_eq!(report["settings"]["baseline_mode"], "native");
    assert!(!stdout(&gpuswap(&["run", &quick])).contains("at its defaults"));
}

#[test]
fn the_metrics_glossary_is_the_readmes() {
    let glossary = stdout(&gpuswap(&["metrics"]));
    let readme = std::fs::read_to_string(repo_file("README.md")).unwrap();
    assert!(
        readme.contains(&glossary),
        "README's glossary differs from gpuswap metrics"
    );
    for term in [
        "STP",
        "ANTT",
        "Jain(slowdown)",
        "local / remote",
        "slowdown",
    ] {
        assert!(glossary.contains(term), "{term}");
    }
    let help = stdout(&gpuswap(&["help", "metrics"]));
    assert!(help.contains("ANTT"), "{help}");
}

#[test]
fn every_command_has_examples_completions_and_a_man_page() {
    let top = stdout(&gpuswap(&["--help"]));
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // Wrapped descriptions continue on lines indented further.
        .filter(|l| !l.starts_with("   "))
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 14, "{commands:?}");
    for command in &commands {
        let help = stdout(&gpuswap(&[command, "--help"]));
        assert!(help.contains("Example"), "{command} --help has no example");
    }
    let bash = stdout(&gpuswap(&["completions", "bash"]));
    assert!(
        bash.contains("_gpuswap()") && bash.contains("sweep"),
        "{bash}"
    );
    let man = stdout(&gpuswap(&["man"]));
    assert!(
        man.starts_with(".ie") || man.contains(".TH gpuswap"),
        "{man}"
    );
    assert_eq!(gpuswap(&["completions", "tcsh"]).status.code(), Some(2));
}

#[test]
fn help_wraps_to_the_terminal_and_colour_follows_the_flag() {
    for command in ["run", "sweep", "daemon", "compare"] {
        let help = stdout(&gpuswap_in(60, &[command, "--help"]));
        let long: Vec<&str> = help.lines().filter(|l| l.chars().count() > 60).collect();
        assert!(long.is_empty(), "{command} --help at 60 columns: {long:?}");
    }
    let coloured = gpuswap(&["--color", "always", "no-such-command"]);
    assert_eq!(coloured.status.code(), Some(2));
    assert!(stderr(&coloured).contains('\x1b'), "{}", stderr(&coloured));
    for plain in [
        gpuswap(&["--color=never", "no-such-command"]),
        gpuswap(&["no-such-command"]),
    ] {
        assert_fails(&plain, 2, "no-such-command");
        assert!(!stderr(&plain).contains('\x1b'), "{}", stderr(&plain));
    }
}

#[test]
fn sweep_dry_run_sizes_the_sweep_and_writes_nothing() {
    let out_dir = std::env::temp_dir().join(format!("gpuswap-dry-{}", std::process::id()));
    let out = gpuswap(&[
        "sweep",
        &repo_file("scenarios/quickstart.toml"),
        "--vary",
        "device.vram_limit=100MiB..500MiB step 100MiB",
        "--runs",
        "3",
        "--out",
        &out_dir.to_string_lossy(),
        "--dry-run",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("5 grid points x 3 seeds = 15 runs over device.vram_limit (5 values)"),
        "{text}"
    );
    assert!(text.contains("timed one run of 5 of 5 points"), "{text}");
    assert!(text.contains("estimate: about"), "{text}");
    assert!(!out_dir.exists(), "a dry run wrote {}", out_dir.display());
    // A sampled run that fails makes the dry run fail too.
    let out = gpuswap(&[
        "sweep",
        &repo_file("scenarios/quickstart.toml"),
        "--vary",
        "tenant.start=0s,2000000s",
        "--dry-run",
    ]);
    assert_fails(&out, 1, "1 of the sampled runs failed");
    assert!(
        stdout(&out).contains("point 1: one run took"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn place_computes_the_spec_examples_and_refuses_bad_input() {
    let json = |args: &[&str]| -> serde_json::Value {
        let out = gpuswap(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let size = json(&[
        "place",
        "dymgpu-size",
        "--slots",
        "5",
        "--sizes",
        "4,4,3,2",
        "--json",
    ]);
    assert_eq!(size["positions"], serde_json::json!([0, 1, 1, 1]));
    assert_eq!(size["copies"], serde_json::Value::Null);
    // The 12-slot example: gScale's score counts occupants, so the last two each share
    // with one of the first two: the layout the spec prices at 24 + 24(n-1) copies.
    let gscale = json(&[
        "place", "gscale", "--slots", "12", "--sizes", "6,6,6,6", "--rounds", "10", "--json",
    ]);
    assert_eq!(gscale["positions"], serde_json::json!([0, 6, 0, 6]));
    assert_eq!(gscale["copies"], serde_json::json!(24 + 24 * 9));
    let text = stdout(&gpuswap(&[
        "place",
        "dymgpu-size",
        "--slots",
        "5",
        "--sizes",
        "4,4,3,2",
    ]));
    assert!(
        text.contains("vGPU 3: slots 1..2") && text.contains("shared slots: 3"),
        "{text}"
    );
    for (args, expected) in [
        (
            vec!["place", "dymgpu", "--slots", "5", "--sizes", "1"],
            "expected one of: gvirt",
        ),
        (
            vec!["place", "gscale", "--slots", "0", "--sizes", "1"],
            "--slots",
        ),
        (
            vec!["place", "gscale", "--slots", "4294967295", "--sizes", "1"],
            "--slots 4294967295: expected 1 to 65536",
        ),
        (
            vec!["place", "gscale", "--slots", "4", "--sizes", "5"],
            "needs 5 slots",
        ),
        (
            vec!["place", "gvirt", "--slots", "5", "--sizes", "4,4"],
            "does not share",
        ),
        (
            vec![
                "place",
                "dymgpu-util",
                "--slots",
                "5",
                "--sizes",
                "1,2",
                "--utilization",
                "0.5",
            ],
            "one value per vGPU",
        ),
        (
            vec![
                "place",
                "dymgpu-util",
                "--slots",
                "5",
                "--sizes",
                "1",
                "--utilization",
                "2",
            ],
            "from 0 to 1",
        ),
    ] {
        let out = gpuswap(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains(expected),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn vm_scenarios_run_compare_and_sweep() {
    let fifteen = repo_file("scenarios/vgpu/fifteen-vms.toml");
    let out = gpuswap(&["run", &fifteen]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("placement dymgpu-size") && text.contains("urbanterror-1"),
        "{text}"
    );
    assert!(text.contains("context switches") && text.contains("cycles per switch"));
    let json: serde_json::Value =
        serde_json::from_slice(&gpuswap(&["run", &fifteen, "--json"]).stdout).unwrap();
    assert_eq!(json["vms"].as_array().unwrap().len(), 15);
    // 90 slots asked of 54: slots are shared, and copies dominate the switches.
    assert!(json["system"]["slot_copies"].as_u64().unwrap() > 10_000);
    assert!(json["vms"][0]["fps"].as_f64().unwrap() > 0.0);

    // The device and the workloads are listed where the others are.
    assert!(stdout(&gpuswap(&["presets"])).contains("hd530"));
    let apps = stdout(&gpuswap(&["apps"]));
    assert!(
        apps.contains("urbanterror") && apps.contains("16.000 ms GPU"),
        "{apps}"
    );
    let compare = stdout(&gpuswap(&["compare", &fifteen]));
    for placement in ["gvirt", "gscale", "dymgpu-size", "dymgpu-util"] {
        assert!(compare.contains(placement), "{compare}");
    }
    // gVirt's partitions hold three vGPUs.
    assert!(compare.contains("12 of 15"), "{compare}");
    let bad = gpuswap(&["compare", &fifteen, "--managers", "native"]);
    assert_eq!(bad.status.code(), Some(2));

    let out_dir = std::env::temp_dir().join(format!("gpuswap-vgpu-sweep-{}", std::process::id()));
    let out = gpuswap(&[
        "sweep",
        &repo_file("scenarios/vgpu/placement.toml"),
        "--vary",
        "vm[2].count=1,8",
        "--out",
        &out_dir.to_string_lossy(),
        "--force",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = std::fs::read_to_string(out_dir.join("summary.csv")).unwrap();
    assert!(
        summary.starts_with(
            "point,manager.placement,vm[2].count,runs,failed,tenant_failed,slot_copies.mean"
        ),
        "{summary}"
    );
    // 8 points: 4 placements x 2 counts.
    assert_eq!(summary.lines().count(), 9);
    assert!(out_dir.join("slot-copies-vs-vm_2__count.svg").exists());
    std::fs::remove_dir_all(&out_dir).unwrap();
    // A key the VMs do not have is refused before any run.
    let out = gpuswap(&[
        "sweep",
        &repo_file("scenarios/vgpu/placement.toml"),
        "--vary",
        "vm[5].count=1,2",
        "--dry-run",
    ]);
    assert_fails(&out, 2, "expected an index below 3");
}

/// A solo baseline that fails (too little host memory for unified memory's managed
/// buffers) is never reused: a later point with ample host memory gets the ANTT it has
/// alone (once 997 instead of 10.3, from the failed baseline).
#[test]
fn a_failed_solo_baseline_is_never_reused_by_another_point() {
    let dir = std::env::temp_dir().join(format!("gpuswap-baselines-{}", std::process::id()));
    let scenario = repo_file("scenarios/uvm/two-tenants.toml");
    let antt = |vary: &str, out: &str| -> Vec<String> {
        let out = dir.join(out);
        let args = [
            "sweep",
            &scenario,
            "--vary",
            vary,
            "--vary",
            "manager.victim=any",
            "--vary",
            "manager.eviction=fifo-2mb",
            "--runs",
            "1",
            "--jobs",
            "1",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ];
        let run = gpuswap(&args);
        assert!(run.status.success(), "{}", stderr(&run));
        let mut results = csv::Reader::from_path(out.join("results.csv")).unwrap();
        let column = results
            .headers()
            .unwrap()
            .iter()
            .position(|c| c == "antt")
            .unwrap();
        results
            .records()
            .map(|r| r.unwrap()[column].to_owned())
            .collect()
    };
    let both = antt("device.host_memory=5MiB,64GiB", "both");
    let ample = antt("device.host_memory=64GiB", "ample");
    assert_eq!(both[1], ample[0]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unified_memory_runs_and_sweeps_across_oversubscription() {
    let scenario = repo_file("scenarios/uvm/hotspot-150.toml");
    let out = gpuswap(&["run", &scenario, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let uvm = &report["tenants"][0]["uvm"];
    for field in [
        "far_faults",
        "fault_batches",
        "pages_in",
        "pages_out",
        "pages_thrashed",
        "pages_prefetched",
        "prefetched_unused",
        "fault_stall_ns",
        "plan_switches",
    ] {
        assert!(uvm[field].is_u64(), "{field}: {uvm}");
    }
    // One pattern, plan and timeline per managed allocation; a fixed policy never
    // switches.
    let allocations = uvm["patterns"].as_array().unwrap().len();
    assert!(allocations > 0);
    assert_eq!(uvm["plans"].as_array().unwrap().len(), allocations);
    assert_eq!(uvm["timeline"].as_array().unwrap().len(), allocations);
    assert_eq!(uvm["switches"].as_array().unwrap().len(), allocations);
    assert_eq!(
        uvm["plans_before_switches"].as_array().unwrap().len(),
        allocations
    );
    assert!(
        uvm["plans"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p == "configured")
    );
    let first = &uvm["timeline"][0][0];
    for field in ["ns", "migrated"] {
        assert!(first[field].is_u64(), "{field}: {first}");
    }
    assert!(
        first["linear"].is_boolean() && first["pattern"].is_string(),
        "{first}"
    );
    // The scenario asks for Belady's bound: never above what the driver migrated.
    assert!(uvm["optimum_pages_in"].as_u64().unwrap() <= uvm["pages_in"].as_u64().unwrap());
    // At 150 % the re-referenced data thrashes.
    assert!(uvm["pages_thrashed"].as_u64().unwrap() > 0);
    // Tenant modes' reports have no uvm object.
    let quick = gpuswap(&["run", &repo_file("scenarios/quickstart.toml"), "--json"]);
    let quick: serde_json::Value = serde_json::from_slice(&quick.stdout).unwrap();
    assert!(quick["tenants"][0].get("uvm").is_none());

    let out_dir = std::env::temp_dir().join(format!("gpuswap-uvm-sweep-{}", std::process::id()));
    let out = gpuswap(&[
        "sweep",
        &repo_file("scenarios/uvm/policies.toml"),
        "--vary",
        "device.oversubscription=1.0,1.5",
        "--vary",
        "manager.prefetch=tree",
        "--vary",
        "manager.eviction=fifo-2mb",
        "--vary",
        "tenant.app=hotspot",
        "--out",
        &out_dir.to_string_lossy(),
        "--force",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = std::fs::read_to_string(out_dir.join("summary.csv")).unwrap();
    let mut rows = csv::Reader::from_reader(summary.as_bytes());
    let header = rows.headers().unwrap().clone();
    let thrashed = header
        .iter()
        .position(|h| h == "pages_thrashed.mean")
        .unwrap();
    let values: Vec<f64> = rows
        .records()
        .map(|r| r.unwrap()[thrashed].parse().unwrap())
        .collect();
    // Everything fits at 1.0; at 1.5 pages come back after eviction.
    assert_eq!(values[0], 0.0);
    assert!(values[1] > 0.0);
    assert!(
        out_dir
            .join("migrated-vs-device_oversubscription.svg")
            .exists()
    );
    std::fs::remove_dir_all(&out_dir).unwrap();
}

/// normalized.csv of a sweep: its header and rows as maps from column to cell.
fn normalized_rows(dir: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(dir.join("normalized.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(String::from))
                .collect()
        })
        .collect()
}

/// The whole adaptive sweep: about 50 s of CPU in a debug build, so outside the quick
/// `cargo test --workspace`; `bash .ci/run` runs it (`-- --ignored`).
#[test]
#[ignore = "slow: the whole adaptive sweep; bash .ci/run runs it"]
fn the_adaptive_sweep_normalises_to_the_default_and_beats_the_coarse_runtime() {
    let out_dir = std::env::temp_dir().join(format!("gpuswap-adaptive-{}", std::process::id()));
    let scenario = repo_file("scenarios/uvm/adaptive.toml");
    let sweep = |extra: &[&str]| {
        let mut args = vec![
            "sweep",
            &scenario,
            "--out",
            out_dir.to_str().unwrap(),
            "--quiet",
        ];
        args.extend(extra);
        let out = gpuswap(&args);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    // One level first; then the whole sweep over it: normalized.csv is the sweep's own,
    // so --force replaces it.
    sweep(&["--vary", "device.oversubscription=1.25"]);
    assert_eq!(normalized_rows(&out_dir).len(), 12 + 5);
    sweep(&["--force"]);
    assert!(out_dir.join("normalized.svg").exists());
    let rows = normalized_rows(&out_dir);
    let ratio = |row: &std::collections::HashMap<String, String>, column: &str| -> f64 {
        row[column]
            .parse()
            .unwrap_or_else(|_| panic!("{column}: {row:?}"))
    };
    let fixed = [
        "default",
        "tree-eviction",
        "lru-2mb",
        "zero-copy",
        "delayed-adaptive",
    ];
    let (workloads, means): (Vec<_>, Vec<_>) =
        rows.iter().partition(|r| r["tenant.app"] != "geomean");
    // 12 workloads at 2 levels; the default is the baseline; the optimum is the best
    // fixed policy of each row.
    assert_eq!(workloads.len(), 24);
    for row in &workloads {
        assert_eq!(ratio(row, "default"), 1.0);
        let best = fixed.iter().map(|c| ratio(row, c)).fold(f64::MAX, f64::min);
        assert_eq!(ratio(row, "optimum"), best, "{row:?}");
        assert!(
            !row["class"].is_empty(),
            "every workload has a pattern class"
        );
        // "Much worse" is more than 15 % slower than the default.
        assert!(ratio(row, "adaptive") <= 1.15, "{row:?}");
    }
    // Per level: four classes and all.
    assert_eq!(means.len(), 10);
    for row in &means {
        let adaptive = ratio(row, "adaptive");
        // Never much worse than the default on a class; over all workloads better than
        // the research simulator's one switch, and within 10 % of the offline optimum
        // (the best fixed policy per workload: a plan per allocation may beat it, as at
        // 150 % on the research simulator's GPU, but its trials cost time).
        assert!(adaptive <= 1.05, "{row:?}");
        if row["class"] == "all" {
            assert!(adaptive < ratio(row, "adaptive-coarse"), "{row:?}");
            assert!(adaptive <= ratio(row, "optimum") * 1.10, "{row:?}");
        }
    }
    // The pattern timeline: observations of every run, switches only where a runtime
    // adapts.
    let text = std::fs::read_to_string(out_dir.join("patterns.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        header[header.len() - 10..],
        [
            "run",
            "tenant_name",
            "allocation",
            "ns",
            "event",
            "migrated",
            "linear",
            "reused",
            "pattern",
            "plan"
        ]
    );
    let manager = header.iter().position(|h| *h == "manager").unwrap();
    let (event, plan) = (header.len() - 6, header.len() - 1);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let fixed = |r: &&Vec<&str>| !r[manager].contains("policy=");
    assert!(
        rows.iter()
            .filter(fixed)
            .all(|r| r[event] == "observation" && r[plan] == "configured")
    );
    let adaptive: Vec<_> = rows
        .iter()
        .filter(|r| r[manager].contains("policy=adaptive"))
        .collect();
    assert!(
        adaptive
            .iter()
            .any(|r| r[event] == "switch" && r[plan] == "host-pinned")
    );
    assert!(
        adaptive
            .iter()
            .any(|r| r[event] == "switch" && r[plan] == "tree")
    );
    std::fs::remove_dir_all(&out_dir).unwrap();
}

#[test]
fn sweep_normalize_rejects_what_it_cannot_compare_with_exit_2() {
    let base = "seed = 1\n[device]\npreset = \"gtx1080ti\"\n[manager]\nmode = \"uvm\"\n\
        [[tenant]]\napp = \"hotspot\"\nsize = \"uvmsmart\"\n\
        [sweep.vary]\n\"manager.eviction\" = [\"fifo-2mb\", \"tree\"]\n\
        [sweep.normalize]\n";
    for (normalize, expected) in [
        (
            "axis = \"manager.prefetch\"\nbaseline = \"fifo-2mb\"\nmetric = \"far_faults\"\n",
            "sweep.normalize.axis: \"manager.prefetch\" is not varied",
        ),
        (
            "axis = \"manager.eviction\"\nbaseline = \"lru\"\nmetric = \"far_faults\"\n",
            "sweep.normalize.baseline: \"lru\" is not a name of the axis",
        ),
        (
            "axis = \"manager.eviction\"\nbaseline = \"tree\"\nmetric = \"speed\"\n",
            "sweep.normalize.metric: \"speed\" is not a summary metric",
        ),
        (
            "axis = \"manager.eviction\"\nnames = [\"a\"]\nbaseline = \"a\"\nmetric = \"far_faults\"\n",
            "sweep.normalize.names: 1 names for 2 values",
        ),
        (
            "axis = \"manager.eviction\"\nbaseline = \"tree\"\nmetric = \"far_faults\"\ncolour = 1\n",
            "sweep.normalize.colour: unknown key",
        ),
    ] {
        let scenario = temp_scenario("normalize-bad.toml", &format!("{base}{normalize}"));
        let out = gpuswap(&["sweep", scenario.to_str().unwrap(), "--dry-run"]);
        assert_fails(&out, 2, expected);
        assert!(
            stderr(&out).contains("normalize-bad.toml"),
            "{}",
            stderr(&out)
        );
    }
}

/// The `text` of a scenario in `scenarios/traces` with the files it names there made
/// absolute, so that a copy runs from anywhere.
fn traces_absolute(text: &str, files: &[&str]) -> String {
    files.iter().fold(text.to_owned(), |text, file| {
        let path = repo_file(&format!("scenarios/traces/{file}"));
        text.replace(&format!("{file:?}"), &format!("{path:?}"))
    })
}

#[test]
fn traced_tenants_replay_to_their_snapshots_peak() {
    // Alone on a card with room, a replayed training job holds what its snapshot did at
    // its peak (6.5 GiB of segments) plus the runtime's buffers.
    let scenario = temp_scenario(
        "alone-trace.toml",
        &format!(
            "[device]\npreset = \"a100-80gb\"\n[manager]\nmode = \"native\"\n[[tenant]]\ntrace = {:?}\n",
            repo_file("scenarios/traces/train.pickle")
        ),
    );
    let out = gpuswap(&["run", "--json", scenario.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let t = &v["tenants"][0];
    assert_eq!(t["app"], "train");
    let runtime = gpuswap_sim::preset::find("a100-80gb")
        .unwrap()
        .runtime_bytes();
    assert_eq!(t["vram_peak_bytes"], (6656 << 20) + runtime);
    // Together on an 11 GB card they do not fit: the stock driver fails the newcomer,
    // gpuswap keeps both running.
    let two = repo_file("scenarios/traces/two-models.toml");
    let out = gpuswap(&["run", "--json", &two]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    for t in v["tenants"].as_array().unwrap() {
        assert!(t["error"].is_null(), "{t}");
    }
    let text = std::fs::read_to_string(&two)
        .unwrap()
        .replace("\"gpuswap\"", "\"native\"");
    let native = temp_scenario(
        "two-native.toml",
        &traces_absolute(&text, &["train.pickle", "infer.pickle"]),
    );
    let out = gpuswap(&["run", "--json", native.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        v["tenants"][1]["error"]
            .as_str()
            .unwrap()
            .contains("out of memory")
    );
}

#[test]
fn report_writes_a_page_once_and_refuses_a_folder_that_is_no_sweep() {
    let dir = temp_scenario("report-sweep/results.csv", "point,x\n0,1\n")
        .parent()
        .unwrap()
        .to_path_buf();
    let page = dir.join("index.html");
    let _ = std::fs::remove_file(&page);
    let args = |force: bool| {
        let mut a = vec![
            "report".to_owned(),
            dir.to_string_lossy().into_owned(),
            "--html".to_owned(),
            page.to_string_lossy().into_owned(),
        ];
        if force {
            a.push("--force".into());
        }
        a
    };
    let run = |a: Vec<String>| gpuswap(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(run(args(false)).status.success());
    assert!(
        std::fs::read_to_string(&page)
            .unwrap()
            .contains("<td>1</td>")
    );
    assert_fails(&run(args(false)), 2, "--force");
    assert!(run(args(true)).status.success());
    let empty = temp_scenario("report-empty/x.txt", "")
        .parent()
        .unwrap()
        .to_path_buf();
    let out = gpuswap(&[
        "report",
        empty.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
        "--force",
    ]);
    assert_fails(&out, 2, "expected a sweep's output folder");
    // A full disk (the page's partial file is /dev/full): exit 1 naming the page, and
    // neither the page nor its partial file is left.
    if Path::new("/dev/full").exists() {
        std::fs::remove_file(&page).unwrap();
        let partial = dir.join("index.html.partial");
        let _ = std::fs::remove_file(&partial);
        std::os::unix::fs::symlink("/dev/full", &partial).unwrap();
        assert_fails(
            &run(args(false)),
            1,
            &format!("{}: cannot write", page.display()),
        );
        assert!(!page.exists() && partial.symlink_metadata().is_err());
    }
}

/// The files of a folder, by name, with their bytes.
fn folder_files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

/// Runs `sweep` in one go into `dir/whole` and as `shards` shards into `dir/partI`
/// (`extra` flags to each); returns the shards' folders.
fn sweep_whole_and_sharded(
    dir: &Path,
    scenario: &str,
    extra: &[&str],
    shards: usize,
) -> Vec<String> {
    let _ = std::fs::remove_dir_all(dir);
    let sweep = |out: &Path, shard: Option<String>| {
        let mut args = vec!["sweep", scenario, "--quiet", "--out", out.to_str().unwrap()];
        args.extend(extra);
        let shard = shard.map(|s| ["--shard".to_owned(), s]);
        args.extend(shard.iter().flatten().map(String::as_str));
        let out = gpuswap(&args);
        // Status 1: runs failed (their rows are written all the same).
        let failed = out.status.code() == Some(1) && stderr(&out).contains("runs failed");
        assert!(out.status.success() || failed, "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    sweep(&dir.join("whole"), None);
    (1..=shards)
        .map(|i| {
            let part = dir.join(format!("part{i}"));
            let said = sweep(&part, Some(format!("{i}/{shards}")));
            assert!(said.starts_with(&format!("shard {i}/{shards}: ")), "{said}");
            part.to_string_lossy().into_owned()
        })
        .collect()
}

#[test]
fn three_shards_merge_into_the_bytes_of_one_sweep() {
    let dir = std::env::temp_dir().join(format!("gpuswap-shards-{}", std::process::id()));
    // Three axes, eight points; the points whose second tenant starts after the time
    // limit fail, which the summary counts and the plots mark.
    let scenario = temp_scenario("shards.toml", TWO_NN_SWEEP);
    let vary = [
        "--vary",
        "device.vram_limit=20MiB,200MiB",
        "--vary",
        "tenant[1].start=0s,2000000s",
        "--runs",
        "2",
    ];
    let parts = sweep_whole_and_sharded(&dir, scenario.to_str().unwrap(), &vary, 3);
    // A shard holds its rows and its manifest, nothing made of the whole sweep.
    let part: Vec<String> = folder_files(Path::new(&parts[0])).into_keys().collect();
    assert_eq!(part, ["results.csv", "shard.toml"]);
    let merged = dir.join("merged");
    let mut args = vec!["merge"];
    args.extend(parts.iter().map(String::as_str));
    args.extend(["--out", merged.to_str().unwrap()]);
    let out = gpuswap(&args);
    // Runs failed (as the whole sweep's did): the merge writes everything, then exits 1.
    assert_fails(&out, 1, "8 of 16 runs failed");
    assert!(
        stdout(&out).starts_with("merged 3 shards: 16 runs (8 grid points x 2 seeds): 8 failed"),
        "{}",
        stdout(&out)
    );
    let whole = folder_files(&dir.join("whole"));
    assert!(whole.contains_key("summary.csv") && whole.keys().any(|f| f.ends_with(".svg")));
    assert!(whole.contains_key("scenario.toml"));
    assert!(
        folder_files(&merged) == whole,
        "merged files differ from the sweep's"
    );
    // Merging again replaces the earlier merge only with --force; --html adds its page.
    assert_fails(&gpuswap(&args), 2, "is not empty");
    let page = merged.join("index.html");
    args.extend(["--force", "--html", page.to_str().unwrap()]);
    assert_fails(&gpuswap(&args), 1, "8 of 16 runs failed");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Device: <b>gtx480</b>") && html.contains("--vary"));
    // Each figure embedded as an image, none inlined as markup.
    assert_eq!(
        html.matches("src=\"data:image/svg+xml;base64,").count(),
        whole.keys().filter(|f| f.ends_with(".svg")).count()
    );
    assert!(!html.contains("<svg"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_sharded_uvm_sweep_merges_its_patterns_and_normalized_tables_too() {
    let dir = std::env::temp_dir().join(format!("gpuswap-uvm-shards-{}", std::process::id()));
    let scenario = repo_file("scenarios/uvm/adaptive.toml");
    let vary = [
        "--vary",
        "tenant.app=2dconv,hotspot",
        "--vary",
        "device.oversubscription=1.25",
    ];
    let parts = sweep_whole_and_sharded(&dir, &scenario, &vary, 4);
    let merged = dir.join("merged");
    let mut args = vec!["merge", "--out", merged.to_str().unwrap()];
    args.extend(parts.iter().map(String::as_str));
    let out = gpuswap(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let whole = folder_files(&dir.join("whole"));
    assert!(whole.contains_key("patterns.csv") && whole.contains_key("normalized.csv"));
    assert!(
        folder_files(&merged) == whole,
        "merged files differ from the sweep's"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn merge_names_missing_points_duplicated_shards_and_other_sweeps() {
    let dir = std::env::temp_dir().join(format!("gpuswap-bad-merge-{}", std::process::id()));
    let scenario = repo_file("scenarios/quickstart.toml");
    let vary = ["--vary", "tenant.repeat=1,2,3,4,5"];
    let parts = sweep_whole_and_sharded(&dir, &scenario, &vary, 3);
    let out = dir.join("merged");
    let merge = |dirs: &[&str]| {
        let mut args = vec!["merge", "--out", out.to_str().unwrap()];
        args.extend(dirs);
        gpuswap(&args)
    };
    // Shard 2/3 holds points 1 and 4.
    let missing = merge(&[&parts[0], &parts[2]]);
    assert_fails(&missing, 2, "shard 2/3 is missing: points 1, 4");
    let copy = dir.join("part3-again");
    std::fs::create_dir_all(&copy).unwrap();
    for file in ["results.csv", "shard.toml"] {
        std::fs::copy(Path::new(&parts[2]).join(file), copy.join(file)).unwrap();
    }
    let twice = merge(&[&parts[0], &parts[1], &parts[2], copy.to_str().unwrap()]);
    assert_fails(
        &twice,
        2,
        &format!(
            "point 2 more than once: in {}, {}",
            parts[2],
            copy.display()
        ),
    );
    // A shard of another sweep (other seeds per point) is refused by its plan.
    let other = dir.join("other");
    let mut args = vec![
        "sweep", &scenario, "--quiet", "--runs", "2", "--shard", "2/3",
    ];
    args.extend(vary);
    args.extend(["--out", other.to_str().unwrap()]);
    assert!(gpuswap(&args).status.success());
    let mixed = merge(&[&parts[0], other.to_str().unwrap(), &parts[2]]);
    assert_fails(&mixed, 2, "the shards ran different sweeps");
    // A shard that did not finish left no manifest.
    std::fs::remove_file(copy.join("shard.toml")).unwrap();
    let unfinished = merge(&[&parts[0], &parts[1], copy.to_str().unwrap()]);
    assert_fails(&unfinished, 2, "shard.toml: missing");
    assert!(!out.exists(), "a failed merge wrote {}", out.display());
    // A figure that is not finite (this once hung the merge's plots) is refused with
    // its file, row and column.
    let results = Path::new(&parts[1]).join("results.csv");
    let text = std::fs::read_to_string(&results).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let column = header.iter().position(|c| *c == "makespan_ns").unwrap();
    // So are a negative one and one beyond any 64-bit count (both once merged).
    for bad in ["inf", "-1", "1e300"] {
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let mut cells: Vec<String> = lines[1].split(',').map(String::from).collect();
        cells[column] = bad.into();
        lines[1] = cells.join(",");
        std::fs::write(&results, lines.join("\n") + "\n").unwrap();
        let refused = merge(&[&parts[0], &parts[1], &parts[2]]);
        assert_fails(
            &refused,
            2,
            &format!(
                "{}: point 1, run 1, column makespan_ns: \"{bad}\" is not a figure a run measures (a finite number from 0 to 2^64)",
                results.display()
            ),
        );
    }
    // A failed merge leaves nothing half-written behind.
    assert!(
        folder_files(&out).is_empty(),
        "{:?}",
        folder_files(&out).keys()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The examples in the help of the commands that need no files run as shown (one once
/// asked for an input size that does not exist).
#[test]
fn help_examples_of_the_listing_commands_run() {
    for command in ["apps", "place", "presets", "policies", "keys"] {
        let help = stdout(&gpuswap(&[command, "--help"]));
        let examples = help
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("gpuswap "))
            // A shell pipe's first command is the example.
            .map(|l| l.split(['#', '|']).next().unwrap().trim().to_owned());
        for example in examples {
            let args: Vec<&str> = example.split_whitespace().skip(1).collect();
            let out = gpuswap(&args);
            assert!(out.status.success(), "{example}: {}", stderr(&out));
        }
    }
}

/// A syntax error on a very long line quotes the line cut, not whole (a 20,000-character
/// line once made a 40 kB message).
#[test]
fn a_syntax_error_on_a_long_line_gives_a_short_message() {
    let scenario = temp_scenario(
        "long-line.toml",
        &format!("seed = {}\n", "x".repeat(20_000)),
    );
    let out = gpuswap(&["run", scenario.to_str().unwrap()]);
    assert_fails(&out, 2, "line 1, column 8");
    assert!(stderr(&out).len() < 1_000, "{} bytes", stderr(&out).len());
    assert!(
        stderr(&out).contains("... (20011 characters)"),
        "{}",
        stderr(&out)
    );
}

/// A tenant that starts after the time limit stops the run there: the message says
/// when the next event was due, not only how far the others got.
#[test]
fn a_tenant_starting_after_the_time_limit_is_explained() {
    let scenario = temp_scenario(
        "late.toml",
        "[[tenant]]\napp = \"backprop\"\n[[tenant]]\napp = \"backprop\"\nstart = \"100s\"\n",
    );
    let out = gpuswap(&["run", scenario.to_str().unwrap(), "--max-sim-time", "1s"]);
    assert_fails(&out, 1, "the next event was due at 100.000 s");
}

/// `--version` names the commit the binary was built from (or says it is unknown).
#[test]
fn the_version_names_the_commit() {
    let text = stdout(&gpuswap(&["--version"]));
    let commit = text
        .trim_end()
        .strip_prefix(&format!("gpuswap {} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{text}"
    );
}

/// Scripts read the catalogues and a comparison as JSON.
#[test]
fn keys_presets_and_compare_speak_json() {
    let json = |args: &[&str]| -> serde_json::Value {
        let out = gpuswap(args);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let keys = json(&["keys", "--json"]);
    let paths: Vec<&str> = keys
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"device.preset") && paths.contains(&"tenant.vram_guarantee"));
    let presets = json(&["presets", "--json"]);
    assert_eq!(presets["gpus"][0]["name"], "gtx480");
    assert_eq!(presets["vgpus"][0]["name"], "hd530");
    // The catalogues: every app and setting of the tables, with the figures as numbers.
    let apps = json(&["apps", "--json"]);
    let table = stdout(&gpuswap(&["apps"]));
    for app in apps["apps"].as_array().unwrap() {
        let name = app["name"].as_str().unwrap();
        assert!(
            table.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name}"
        );
    }
    assert!(
        apps["workloads"][0]["kind"].is_object(),
        "{}",
        apps["workloads"]
    );
    let backprop = json(&["apps", "backprop", "--json"]);
    let buffers = backprop["buffers"].as_array().unwrap();
    let sum: u64 = buffers.iter().map(|b| b["bytes"].as_u64().unwrap()).sum();
    assert!(sum >= backprop["peak_allocated_bytes"].as_u64().unwrap());
    assert!(buffers.iter().any(|b| b["label"] == "input_hidden_weights"));
    let policies = json(&["policies", "--json"]);
    let rows = policies.as_array().unwrap();
    let defaults = rows
        .iter()
        .filter(|r| r["setting"] == "manager.victim" && r["default"] == true)
        .filter(|r| r["description"].as_str().unwrap().starts_with("gpuswap:"))
        .count();
    assert_eq!(defaults, 1, "one default victim for gpuswap: {rows:?}");
    let table = stdout(&gpuswap(&["policies"]));
    assert_eq!(table.lines().count(), rows.len() + 2, "{table}");
    let compared = json(&["compare", &repo_file("scenarios/quickstart.toml"), "--json"]);
    let managers: Vec<&str> = compared["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["native", "gpuswap", "fcfs", "static", "gdev"]);
    assert!(compared["left_out"].is_null());
}

/// Under unified memory the tenant table's evicted and returned columns show pages
/// moved (they once said 0 B beside hundreds of thousands of pages out), and a caption
/// says what the traffic columns sum.
#[test]
fn the_tenant_table_shows_unified_memorys_evictions() {
    let out = gpuswap(&["run", &repo_file("scenarios/uvm/two-tenants.toml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with("srad_v20"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("96.0 MiB  6.5 MiB"), "{row}");
    assert!(text.contains("summed over the run"), "{text}");
}

/// A grid too large to build is counted and refused before any point is made (three
/// axes of a thousand values once ran out of memory in `--dry-run`).
#[test]
fn a_grid_of_a_billion_points_is_refused_before_it_is_built() {
    let out = gpuswap(&[
        "sweep",
        &repo_file("scenarios/quickstart.toml"),
        "--vary",
        "device.vram_limit=1MiB..1000MiB step 1MiB",
        "--vary",
        "tenant.repeat=1..1000 step 1",
        "--vary",
        "manager.chunk_size=4KiB..4000KiB step 4KiB",
        "--dry-run",
    ]);
    assert_fails(
        &out,
        2,
        "the grid has 1000000000 points (1000 x 1000 x 1000); expected at most 1000000",
    );
}

#[test]
fn bad_shard_values_are_refused_with_exit_2() {
    let scenario = repo_file("scenarios/quickstart.toml");
    for bad in ["0/16", "17/16", "1/0", "3", "a/b"] {
        let out = gpuswap(&["sweep", &scenario, "--shard", bad, "--dry-run"]);
        assert_fails(&out, 2, "--shard <I/N>");
        assert!(
            stderr(&out).contains("expected I/N"),
            "{bad}: {}",
            stderr(&out)
        );
    }
    let out = gpuswap(&["sweep", &scenario, "--shard", "2/4", "--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("shard 2/4: 0 of 1 grid points"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_fault_log_tenant_reports_its_batches_beside_the_logged_ones() {
    let scenario = repo_file("scenarios/traces/fault-log.toml");
    let out = gpuswap(&["run", "--json", &scenario]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let t = &v["tenants"][0];
    assert_eq!(t["app"], "abc-faults");
    let f = &t["fault_log"];
    // The log: 56 faults (24 pages of `a`, 32 of `b`), then 8 (the rest of `a`), then 32
    // writes of `c`.
    assert_eq!(f["logged_batches"], 3);
    assert_eq!(f["logged_faults"], 96);
    assert_eq!(f["logged_faults_per_batch_mean"], 32.0);
    assert_eq!(f["logged_faults_per_batch_p50"], 32);
    assert_eq!(f["logged_faults_per_batch_p99"], 56);
    // Without the prefetcher, as recorded, each logged batch is one simulated batch.
    for side in [
        "batches",
        "faults",
        "faults_per_batch_p50",
        "faults_per_batch_p99",
    ] {
        assert_eq!(
            f[format!("simulated_{side}")],
            f[format!("logged_{side}")],
            "{side}"
        );
    }
    assert_eq!(f["simulated_batches"], t["uvm"]["fault_batches"]);
    // With the driver's default prefetcher, the first batch's big pages bring the
    // second batch's pages along.
    let text = std::fs::read_to_string(&scenario)
        .unwrap()
        .replace("\"none\"", "\"tree\"");
    let tree = temp_scenario(
        "fault-log-tree.toml",
        &traces_absolute(&text, &["abc-faults.log"]),
    );
    let out = gpuswap(&["run", "--json", tree.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let f = &v["tenants"][0]["fault_log"];
    assert_eq!(
        (&f["logged_batches"], &f["simulated_batches"]),
        (&3.into(), &2.into())
    );
    // The text report has the comparison too.
    let out = gpuswap(&["run", &scenario]);
    let text = stdout(&out);
    assert!(text.contains("fault logs replayed"), "{text}");
    assert!(
        text.lines().any(|l| l
            .split_whitespace()
            .eq(["abc", "logged", "3", "96", "32.0", "32", "56"])),
        "{text}"
    );
}

#[test]
fn an_html_page_that_exists_is_refused_before_any_run() {
    let scenario = temp_scenario("html-first.toml", TWO_NN_SWEEP);
    let page = temp_scenario("html-first/exists.html", "old");
    let out_dir = page.parent().unwrap().join("out");
    let out = gpuswap(&[
        "sweep",
        scenario.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
        "--quiet",
    ]);
    assert_fails(&out, 2, "--force to overwrite it");
    assert!(!out_dir.join("results.csv").exists(), "nothing ran");
}

#[test]
fn an_interrupted_sweep_is_refused_until_resumed_to_the_same_bytes() {
    let dir = std::env::temp_dir().join(format!("gpuswap-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let scenario = temp_scenario("resume.toml", TWO_NN_SWEEP);
    let (whole, cut) = (dir.join("whole"), dir.join("cut"));
    // 200 runs a point: the sweep hands its rows over two points at a time.
    let args = |out: &Path| -> Vec<String> {
        [
            "sweep",
            scenario.to_str().unwrap(),
            "--vary",
            "tenant.repeat=1..4 step 1",
            "--runs",
            "200",
            "--jobs",
            "1",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };
    let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(args(&whole))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // Killed (as Ctrl-C or a job's time limit would) once some points are done.
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(args(&cut))
        .spawn()
        .unwrap();
    let incomplete = cut.join("incomplete.toml");
    while !std::fs::read_to_string(&incomplete).is_ok_and(|t| t.contains("# done:")) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the sweep ended before it could be cut"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!cut.join("results.csv").exists(), "results.csv looks whole");
    assert!(cut.join("results.csv.partial").exists());
    // A write cut short by the kill: half a row after the last finished point.
    let mut partial = std::fs::OpenOptions::new()
        .append(true)
        .open(cut.join("results.csv.partial"))
        .unwrap();
    std::io::Write::write_all(&mut partial, b"7,random,4,0,5,,123").unwrap();
    let report = gpuswap(&[
        "report",
        cut.to_str().unwrap(),
        "--html",
        dir.join("page.html").to_str().unwrap(),
    ]);
    assert_fails(&report, 2, "the sweep did not finish");
    assert!(stderr(&report).contains("--out") && stderr(&report).contains("--resume"));
    let merge = gpuswap(&[
        "merge",
        cut.to_str().unwrap(),
        "--out",
        dir.join("m").to_str().unwrap(),
    ]);
    assert_fails(&merge, 2, "--resume");
    // Running it again into the folder says how to finish it instead.
    let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(args(&cut))
        .output()
        .unwrap();
    assert_fails(&out, 2, "or --resume (with the flags it ran with)");
    // Another plan is not resumed.
    let mut other = args(&cut);
    other[5] = "100".into();
    other.push("--resume".into());
    let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(&other)
        .output()
        .unwrap();
    assert_fails(&out, 2, "holds another sweep");
    let mut resume = args(&cut);
    resume.push("--resume".into());
    let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(&resume)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(folder_files(&cut), folder_files(&whole));
    let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(&resume)
        .output()
        .unwrap();
    assert_fails(&out, 2, "holds no unfinished sweep");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn managers_compare_through_a_sweep_and_typos_stop_it_before_any_run() {
    let dir = std::env::temp_dir().join(format!("gpuswap-managers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let scenario = repo_file("scenarios/baselines-backprop.toml");
    let managers = r#"manager={ mode = "native" },{ mode = "gpuswap", chunk_policy = "random" },{ mode = "fcfs" }"#;
    let out = gpuswap(&[
        "sweep",
        &scenario,
        "--vary",
        managers,
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("3 runs (3 grid points x 1 seeds): 0 failed"),
        "{}",
        stdout(&out)
    );
    let results = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    assert!(
        results.contains("\n1,chunk_policy=random mode=gpuswap,0,"),
        "{results}"
    );
    let typo = r#"manager={ mode = "gpuswap" },{ mode = "gpsuwap" }"#;
    for extra in [&[][..], &["--dry-run"][..]] {
        let mut args = vec![
            "sweep",
            &scenario,
            "--vary",
            typo,
            "--out",
            dir.to_str().unwrap(),
            "--force",
            "--quiet",
        ];
        args.extend(extra);
        let out = gpuswap(&args);
        assert_fails(
            &out,
            2,
            "point 1 (manager = { mode = \"gpsuwap\" }): manager.mode",
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
    // compare leaves out the modes a fault log cannot run under, and says so.
    let out = gpuswap(&["compare", &repo_file("scenarios/traces/fault-log.toml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("\nuvm ") && !text.contains("\nnative "),
        "{text}"
    );
    assert!(
        text.contains("left out: native, gpuswap, fcfs, static, gdev (the scenario is not valid under them; under native: tenant[0].fault_log"),
        "{text}"
    );
}

#[test]
fn progress_bars_stay_off_a_log() {
    // Standard error to a file or pipe (a job's log): errors only, no bar to garble it.
    for args in [
        vec!["check", "--seeds", "3"],
        vec![
            "compare",
            "scenarios/quickstart.toml",
            "--managers",
            "native,gpuswap",
        ],
    ] {
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if a.ends_with(".toml") {
                    repo_file(a)
                } else {
                    (*a).to_owned()
                }
            })
            .collect();
        let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
}

/// Issue 38's simulator target: on the measured PyTorch pair, turns (and issue 40's auto,
/// the scenario's own) finish within 1.15x of running the two one after the other, neither
/// slowed more than 2.3x, where
/// running them at once takes about 11x; and the exclusive quantum's alias refuses a
/// second GPU-time setting.
#[test]
fn turns_on_the_torch_pair_come_within_one_and_a_bit_of_back_to_back() {
    let pair = std::fs::read_to_string(repo_file("scenarios/real/torch-pair.toml")).unwrap();
    let makespan = |name: &str, text: &str| {
        let path = temp_scenario(name, text);
        let out = gpuswap(&["run", "--json", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let slowdowns: Vec<f64> = report["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["slowdown"].as_f64().unwrap())
            .collect();
        let ends = report["tenants"].as_array().unwrap().iter();
        let makespan = ends.map(|t| t["total_ns"].as_u64().unwrap()).max().unwrap();
        (makespan as f64, slowdowns)
    };
    let second = pair.match_indices("[[tenant]]").nth(1).unwrap().0;
    let (alone, _) = makespan("torch-alone.toml", &pair[..second]);
    let auto = "gpu_time = \"auto\"";
    assert!(pair.contains(auto), "the scenario says auto");
    let turns_text = pair.replace(auto, "gpu_time = \"turns\"");
    let (turns, slowdowns) = makespan("torch-turns.toml", &turns_text);
    let concurrent_text = pair.replace(auto, "gpu_time = \"concurrent\"");
    let (concurrent, _) = makespan("torch-concurrent.toml", &concurrent_text);
    // Issue 40's G1 stays met with the default: auto as close as turns.
    let (auto_ns, _) = makespan("torch-auto.toml", &pair);
    assert!(
        auto_ns <= 1.15 * 2.0 * alone,
        "auto {auto_ns} against {}",
        2.0 * alone
    );
    let back_to_back = 2.0 * alone;
    assert!(
        turns <= 1.15 * back_to_back,
        "turns {turns} against {back_to_back}"
    );
    assert!(slowdowns.iter().all(|s| *s <= 2.3), "{slowdowns:?}");
    assert!(concurrent > 5.0 * back_to_back, "concurrent {concurrent}");
    let both = turns_text.replace("[device]\n", "[device]\nsharing = \"exclusive-quantum\"\n");
    let path = temp_scenario("torch-both.toml", &both);
    let out = gpuswap(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot be combined with [manager] gpu_time"),
        "{}",
        stderr(&out)
    );
    let bad = pair.replace(auto, "gpu_time = \"both\"");
    let path = temp_scenario("torch-bad.toml", &bad);
    let out = gpuswap(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("manager.gpu_time") && err.contains("concurrent, turns, auto"),
        "{err}"
    );
}

/// `compare --json` on a VM scenario gives JSON, as for tenants (it printed the text
/// table): a `run --json` report per placement, the scenario's own equal to `run`'s.
#[test]
fn compare_json_of_a_vm_scenario_is_a_report_per_placement() {
    let path = repo_file("scenarios/vgpu/placement.toml");
    let out = gpuswap(&["compare", "--json", &path]);
    assert!(out.status.success(), "{}", stderr(&out));
    let compared: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let managers = compared["managers"].as_array().unwrap();
    let reports = compared["reports"].as_array().unwrap();
    assert_eq!(managers.len(), reports.len());
    assert!(managers.len() >= 2, "{compared}");
    for (name, report) in managers.iter().zip(reports) {
        assert_eq!(&report["placement"], name);
    }
    let run: serde_json::Value =
        serde_json::from_slice(&gpuswap(&["run", "--json", &path]).stdout).unwrap();
    let own = reports
        .iter()
        .find(|r| r["placement"] == run["placement"])
        .expect("the scenario's placement is compared");
    assert_eq!(own, &run);
}

/// SIGTERM stops the daemon cleanly (issue 42): it exits 0, says so, and removes its
/// socket; a process it served carries on unmanaged (`real_gpu.rs` shows that part).
#[test]
fn sigterm_stops_the_daemon_cleanly_and_removes_its_socket() {
    let dir = std::env::temp_dir().join(format!("gpuswap-sigterm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("d.sock");
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["daemon", "--vram", "64MiB", "--socket"])
        .arg(&socket)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !socket.exists() {
        assert!(std::time::Instant::now() < deadline, "no socket");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = daemon.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut daemon.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("stopped by a signal"), "{stderr}");
    assert!(!socket.exists(), "the socket is left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}
