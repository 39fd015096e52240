//! Issue 40's simulator parts through the binary: `tenant.idle_between` in scenario
//! files (its values, its errors, its seed) and the scenarios under `scenarios/real/`
//! that run the `train-step` and `decode-step` apps.

mod binary;

use std::path::PathBuf;

use binary::{gpuswap, repo_file, stderr};

/// Writes `text` to a fresh scenario file named `name`.
fn scenario(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuswap-idle-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A stream tenant repeating 3 times with `idle_between = value` (TOML), alone.
fn idle_scenario(name: &str, value: &str) -> PathBuf {
    scenario(
        name,
        &format!("[[tenant]]\napp = \"stream\"\nrepeat = 3\nidle_between = {value}\n"),
    )
}

/// The run's JSON report.
fn report(args: &[&str]) -> serde_json::Value {
    let out = gpuswap(args);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Tenant `t`'s measured phase in a report.
fn phase_ns(report: &serde_json::Value, t: usize) -> u64 {
    report["tenants"][t]["phase_ns"].as_u64().unwrap()
}

#[test]
fn idle_between_takes_a_duration_or_an_exponential_mean() {
    let none = scenario("none.toml", "[[tenant]]\napp = \"stream\"\nrepeat = 3\n");
    let base = phase_ns(&report(&["run", "--json", &none.to_string_lossy()]), 0);
    let fixed = idle_scenario("fixed.toml", "\"1.5s\"");
    let idle = phase_ns(&report(&["run", "--json", &fixed.to_string_lossy()]), 0);
    assert_eq!(idle, base + 3_000_000_000, "two idle times of 1.5 s");
    let exp = idle_scenario("exp.toml", "\" exp( 1s ) \"");
    let path = exp.to_string_lossy();
    let one = report(&["run", "--json", &path, "--seed", "1"]);
    assert_eq!(one, report(&["run", "--json", &path, "--seed", "1"]));
    let two = report(&["run", "--json", &path, "--seed", "2"]);
    assert_ne!(
        phase_ns(&one, 0),
        phase_ns(&two, 0),
        "the seed draws the times"
    );
    // The slowdown compares with the tenant alone idling the same times.
    let slowdown = one["tenants"][0]["slowdown"].as_f64().unwrap();
    assert!((slowdown - 1.0).abs() < 1e-9, "{slowdown}");
}

#[test]
fn bad_idle_times_are_refused_with_the_key_and_the_forms() {
    for value in [
        "\"20\"",
        "\"exp(20)\"",
        "\"exp 20s\"",
        "\"exp(20s\"",
        "\"-1s\"",
    ] {
        let file = idle_scenario("bad.toml", value);
        let out = gpuswap(&["run", &file.to_string_lossy()]);
        assert_eq!(out.status.code(), Some(2), "{value}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(
                "tenant[0].idle_between (line 4): expected a duration with a unit (\"20s\"; ns, us, ms or s), or \"exp(DURATION)\" for exponentially distributed idle times of that mean (\"exp(20s)\")"
            ),
            "{value}: {}",
            stderr(&out)
        );
    }
    let file = idle_scenario("number.toml", "20");
    let out = gpuswap(&["run", &file.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("idle_between"), "{}", stderr(&out));
    // A replayed trace has no repeats to idle between.
    let file = scenario(
        "trace.toml",
        "[[tenant]]\ntrace = \"t.pickle\"\nidle_between = \"1s\"\n",
    );
    let out = gpuswap(&["run", &file.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(
            "tenant[0].idle_between (line 3): idle_between applies to an app; a trace replays what it recorded"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn keys_list_idle_between() {
    let out = gpuswap(&["keys"]);
    let keys = String::from_utf8(out.stdout).unwrap();
    assert!(
        keys.lines().any(|l| l.starts_with("tenant.idle_between ")),
        "{keys}"
    );
}

/// Issue 40's acceptance in the simulator: each of scenarios/real's cold-pair, burst and
/// notebooks runs under its own `gpu_time = "auto"`, and auto's makespan is within 1.08x
/// of the better of concurrent and turns.
#[test]
fn on_the_real_scenarios_auto_comes_within_1_08_of_the_better_of_sharing_and_turns() {
    for name in ["cold-pair", "burst", "notebooks"] {
        let path = repo_file(&format!("scenarios/real/{name}.toml"));
        let run = report(&["run", "--json", &path]);
        for t in run["tenants"].as_array().unwrap() {
            assert!(t["error"].is_null(), "{name}: {t}");
        }
        let compared = report(&[
            "compare",
            "--json",
            &path,
            "--managers",
            "gpuswap:gpu_time=concurrent,gpuswap:gpu_time=turns,gpuswap:gpu_time=auto",
        ]);
        let makespans: Vec<u64> = compared["reports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let ends = r["tenants"].as_array().unwrap().iter();
                ends.map(|t| t["total_ns"].as_u64().unwrap()).max().unwrap()
            })
            .collect();
        let [concurrent, turns, auto] = makespans[..] else {
            panic!("{name}: {makespans:?}")
        };
        let better = concurrent.min(turns) as f64;
        assert!(
            auto as f64 <= 1.08 * better,
            "{name}: auto {auto} against concurrent {concurrent} and turns {turns}"
        );
    }
}
