use super::*;
use gpuswap_core::gpu_time::{GpuTime, TurnSettings};
use gpuswap_core::{AtLimit, DEFAULT_CHUNK_BYTES, MIB};
use gpuswap_sim::engine::Sharing;

fn check(text: &str) -> Result<Scenario, ScenarioError> {
    parse(Path::new("s.toml"), text)
}

/// The error message for `text`, which must be rejected.
fn error(text: &str) -> String {
    match check(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

const TENANT: &str = "[[tenant]]\nname = \"a\"\napp = \"stream\"\n";

#[test]
fn full_scenario_is_read() {
    let s = check(
        "seed = 42\n[device]\npreset = \"gtx480\"\nvram_limit = \"100MiB\"\n[manager]\nmode = \"native\"\n\
         [[tenant]]\nname = \"a\"\napp = \"stream\"\nsize = \"default\"\nrepeat = 3\nstart = \"1.5s\"\n",
    )
    .unwrap();
    assert_eq!(s.name, "s");
    assert_eq!(s.seed, 42);
    assert_eq!(s.config.manager.vram_bytes, 100 * MIB);
    assert_eq!(s.config.manager.chunk_bytes, DEFAULT_CHUNK_BYTES);
    assert_eq!(s.config.manager.seed, 42);
    assert_eq!(s.config.tenants[0].start_ns, 1_500_000_000);
    assert_eq!(s.config.tenants[0].name, "a");
}

#[test]
fn defaults_fill_what_is_left_out() {
    let s = check("[[tenant]]\napp = \"stream\"\n[[tenant]]\napp = \"stream\"\n").unwrap();
    assert_eq!(s.seed, 0);
    assert_eq!(s.config.preset.name, DEFAULT_PRESET);
    assert_eq!(
        s.config.manager.vram_bytes,
        s.config.preset.tenant_vram_bytes()
    );
    let names: Vec<_> = s.config.tenants.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["stream_triad0", "stream_triad1"]);
}

#[test]
fn unknown_keys_are_named() {
    let e = error(&format!("[device]\nvram_limt = \"1GiB\"\n{TENANT}"));
    assert!(
        e.starts_with("s.toml: ") && e.contains("vram_limt") && e.contains("vram_limit"),
        "{e}"
    );
    let e = error(&format!("{TENANT}repat = 3\n"));
    assert!(e.contains("repat") && e.contains("repeat"), "{e}");
}

#[test]
fn a_memory_limit_counts_the_drivers_structures() {
    let s = check(&format!("[device]\nmemory_limit = \"120MiB\"\n{TENANT}")).unwrap();
    // The GTX 480's driver keeps 20 MiB: tenants get the other 100.
    assert_eq!(s.config.manager.vram_bytes, 100 * MIB);
}

#[test]
fn bad_values_name_key_line_and_expectation() {
    let cases = [
        (
            format!("[device]\nvram_limit = \"100 mb\"\n{TENANT}"),
            "device.vram_limit (line 2)",
            "MiB",
        ),
        (
            format!("[device]\nvram_limit = \"100XB\"\n{TENANT}"),
            "device.vram_limit",
            "expected",
        ),
        (
            format!("[device]\nvram_limit = \"9GiB\"\n{TENANT}"),
            "device.vram_limit",
            "at most",
        ),
        (
            format!("[device]\nmemory_limit = \"20MiB\"\n{TENANT}"),
            "device.memory_limit (line 2)",
            "above the 20.0 MiB the driver keeps on gtx480",
        ),
        (
            format!("[device]\nvram_limit = \"1GiB\"\nmemory_limit = \"1GiB\"\n{TENANT}"),
            "device.memory_limit",
            "not both",
        ),
        (
            format!("[device]\nsharing = \"preemptive\"\n{TENANT}"),
            "device.sharing (line 2)",
            "gtx480 has no compute preemption",
        ),
        (
            format!("[device]\npreset = \"gtx9000\"\n{TENANT}"),
            "device.preset",
            "gtx480",
        ),
        (
            format!("[manager]\nmode = \"magic\"\n{TENANT}"),
            "manager.mode",
            "native",
        ),
        (
            format!("[manager]\nmode = \"native\"\nvictim = \"performance\"\n{TENANT}"),
            "manager.victim",
            "takes none",
        ),
        (
            format!("[manager]\nmode = \"gpuswap\"\nvictim = \"richest\"\n{TENANT}"),
            "manager.victim",
            "largest-share, performance, access-rate",
        ),
        (
            format!("[manager]\nmode = \"gpuswap\"\nchunk_policy = \"reverse-swap\"\n{TENANT}"),
            "manager.chunk_policy",
            "gtx480-refbits",
        ),
        (
            format!("[manager]\nmode = \"static\"\ntenants = 0\n{TENANT}"),
            "manager.tenants",
            "positive whole number",
        ),
        (
            format!("[manager]\nchunk_size = \"1KiB\"\n{TENANT}"),
            "manager.chunk_size",
            "4KiB",
        ),
        (
            "[[tenant]]\napp = \"nosuch\"\n".into(),
            "tenant[0].app (line 2)",
            "backprop",
        ),
        (
            format!("{TENANT}repeat = 0\n"),
            "tenant[0].repeat (line 4)",
            "from 1",
        ),
        (
            format!("{TENANT}repeat = -5\n"),
            "tenant[0].repeat",
            "from 1",
        ),
        (
            format!("{TENANT}start = \"soon\"\n"),
            "tenant[0].start",
            "ns, us, ms or s",
        ),
        (
            format!("{TENANT}size = \"huge\"\n"),
            "tenant[0].size",
            "expected default",
        ),
        (format!("{TENANT}{TENANT}"), "tenant[1].name", "taken"),
        ("seed = 1\n".into(), "tenant", "at least one"),
    ];
    for (text, key, expected) in cases {
        let e = error(&text);
        assert!(
            e.starts_with(&format!("s.toml: {key}")),
            "{e}\n--- for ---\n{text}"
        );
        assert!(e.contains(expected), "{e} lacks {expected:?}");
    }
}

#[test]
fn wrong_types_and_syntax_are_reported_with_position() {
    let e = error(&format!("{TENANT}repeat = \"many\"\n"));
    assert!(e.starts_with("s.toml: ") && e.contains("line 4"), "{e}");
    let e = error("[[tenant]\napp = 1");
    assert!(e.starts_with("s.toml: ") && e.contains("line 1"), "{e}");
}

#[test]
fn priorities_come_from_file_and_scenario() {
    let dir = std::env::temp_dir().join(format!("gpuswap-scn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("nn.toml"),
        "app = \"nn\"\n[priorities]\nlocations = 2\ndistances = 1\n[chunk_priorities]\nlocations = [5, 4]\n",
    )
    .unwrap();
    let text =
        "[[tenant]]\napp = \"nn\"\npriorities_file = \"nn.toml\"\npriorities = { distances = 9 }\n";
    let s = parse(&dir.join("s.toml"), text).unwrap();
    let t = &s.config.tenants[0];
    assert_eq!(t.priorities["locations"], 2);
    assert_eq!(
        t.priorities["distances"], 9,
        "the scenario overrides the file"
    );
    assert_eq!(t.chunk_priorities["locations"], vec![5, 4]);
    // "{app}" names the tenant's app.
    let text = "[[tenant]]\napp = \"nn\"\npriorities_file = \"{app}.toml\"\n";
    let s = parse(&dir.join("s.toml"), text).unwrap();
    assert_eq!(s.config.tenants[0].priorities["locations"], 2);
    // A file for another app is caught.
    std::fs::write(dir.join("other.toml"), "[priorities]\nweights = 1\n").unwrap();
    let text = "[[tenant]]\napp = \"nn\"\npriorities_file = \"other.toml\"\n";
    let e = parse(&dir.join("s.toml"), text).unwrap_err().to_string();
    assert!(
        e.contains("tenant[0].priorities_file") && e.contains("weights"),
        "{e}"
    );
}

#[test]
fn missing_file_is_named() {
    let e = read(Path::new("/nonexistent/x.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("/nonexistent/x.toml: cannot read"), "{e}");
}

#[test]
fn the_key_lists_a_sweep_checks_against_are_the_parsers_keys() {
    // Every listed key is one the parser knows (a wrong value, not an unknown key).
    for key in crate::keys::in_section("device") {
        let e = check(&format!("[device]\n{key} = 17\n{TENANT}"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!e.contains("unknown field"), "{key}: {e}");
    }
    for key in crate::keys::in_section("tenant") {
        let e = check(&format!("[[tenant]]\napp = \"stream\"\n{key} = true\n"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!e.contains("unknown field"), "{key}: {e}");
    }
    assert_eq!(check_key("manager", "chunk_policy"), Ok(()));
    assert_eq!(check_key("tenant", "repeat"), Ok(()));
    let e = check_key("tenant", "repat").unwrap_err();
    assert!(
        e.contains("tenant.repat is not a scenario key") && e.contains("tenant.repeat"),
        "{e}"
    );
    // And a key the parser does not know is not listed.
    let e = error(&format!("[device]\nvram_limt = \"1GiB\"\n{TENANT}"));
    assert!(e.contains("unknown field"), "{e}");
    assert!(check_key("device", "vram_limt").is_err());
}

#[test]
fn host_memory_is_settable() {
    let s = check(&format!("[device]\nhost_memory = \"2GiB\"\n{TENANT}")).unwrap();
    assert_eq!(s.config.manager.host_bytes, 2048 * MIB);
    let default = check(TENANT).unwrap();
    assert_eq!(
        default.config.manager.host_bytes,
        default.config.preset.host_memory_bytes
    );
    let e = error(&format!("[device]\nhost_memory = \"2 lots\"\n{TENANT}"));
    assert!(e.contains("device.host_memory (line 2)"), "{e}");
}

#[test]
fn chunk_priorities_made_for_another_chunk_size_are_refused_where_they_apply() {
    let dir = std::env::temp_dir().join(format!("gpuswap-chunkprio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // backprop's input_hidden_weights is 68 MiB: 17 chunks of 4 MiB, 9 of 8 MiB.
    let list = vec!["1"; 17].join(", ");
    std::fs::write(
        dir.join("p.toml"),
        format!(
            "app = \"backprop\"\nsize = \"default\"\n[chunk_priorities]\ninput_hidden_weights = [{list}]\n"
        ),
    )
    .unwrap();
    let scenario = |chunk: &str, policy: &str| {
        format!(
            "[manager]\nmode = \"gpuswap\"\nchunk_size = \"{chunk}\"\nchunk_policy = \"{policy}\"\n\
             [[tenant]]\napp = \"backprop\"\npriorities_file = \"p.toml\"\n"
        )
    };
    let parse_in = |text: String| parse(&dir.join("s.toml"), &text);
    assert!(parse_in(scenario("4MiB", "priority-chunk")).is_ok());
    let e = parse_in(scenario("8MiB", "priority-chunk"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tenant[0].priorities_file")
            && e.contains("has 17 entries, but input_hidden_weights has 9 chunks of 8.0 MiB")
            && e.contains("--chunk-size 8MiB"),
        "{e}"
    );
    // A policy that does not read chunk priorities does not care.
    assert!(parse_in(scenario("8MiB", "priority-buffer")).is_ok());
    // Inline lists may be shorter (the rest take the buffer's priority), not longer.
    let inline = |n: usize| {
        format!(
            "[manager]\nmode = \"gpuswap\"\nchunk_policy = \"priority-chunk\"\n\
             [[tenant]]\napp = \"backprop\"\nchunk_priorities = {{ input_units = [{}] }}\n",
            vec!["1"; n].join(", ")
        )
    };
    assert!(check(&inline(1)).is_ok());
    let e = error(&inline(2));
    assert!(e.contains("expected at most 1 entries"), "{e}");
}

#[test]
fn seeds_are_toml_integers_for_run_and_sweep_alike() {
    let max = check(&format!("seed = {}\n{TENANT}", i64::MAX)).unwrap();
    assert_eq!(max.seed, i64::MAX as u64);
    let e = error(&format!("seed = -1\n{TENANT}"));
    assert!(
        e.contains("seed (line 1): expected a whole number from 0 to"),
        "{e}"
    );
    // Beyond TOML's range: refused by the TOML reader, as `sweep` refuses it.
    let e = error(&format!("seed = {}\n{TENANT}", u64::MAX));
    assert!(e.contains("line 1"), "{e}");
}

#[test]
fn uvm_needs_page_faults_and_oversubscription_limits_vram_by_the_working_set() {
    let uvm = |preset: &str, device: &str| {
        check(&format!(
            "[device]\npreset = \"{preset}\"\n{device}\n[manager]\nmode = \"uvm\"\n[[tenant]]\napp = \"hotspot\"\n"
        ))
    };
    let e = uvm("gtx480", "").unwrap_err().to_string();
    assert!(
        e.contains("manager.mode")
            && e.contains("needs replayable page faults, which gtx480 lacks")
            && e.contains("gtx1080ti"),
        "{e}"
    );
    let s = uvm("gtx1080ti", "oversubscription = 1.5").unwrap();
    let working_set = s.config.tenants[0].program.peak_allocated_bytes();
    let p = &s.config.preset;
    let runtime = p.runtime_bytes();
    assert_eq!(
        s.config.manager.vram_bytes,
        (working_set as f64 / 1.5).ceil() as u64 + runtime
    );
    for (device, expected) in [
        ("oversubscription = 0.5", "expected a ratio of at least 1"),
        ("oversubscription = 1.5\nvram_limit = \"1GiB\"", "not both"),
    ] {
        let e = uvm("gtx1080ti", device).unwrap_err().to_string();
        assert!(
            e.contains("device.oversubscription") && e.contains(expected),
            "{e}"
        );
    }
}

/// PILOT's small input, for the benchmarks (pageDoS has its own sizes).
fn small(app: &str) -> &'static str {
    if app == "pagedos" {
        "size = \"256\"\n"
    } else {
        "size = \"small\"\n"
    }
}

/// A two-tenant unified-memory scenario on the V100 with `device` and `scheduler`
/// lines added.
fn pilot(device: &str, scheduler: &str, apps: [&str; 2]) -> Result<Scenario, ScenarioError> {
    check(&format!(
        "seed = 3\n[device]\npreset = \"v100-pcie-32gb\"\n{device}\n[manager]\nmode = \"uvm\"\n\
         [scheduler]\n{scheduler}\n[[tenant]]\napp = \"{}\"\n{}[[tenant]]\napp = \"{}\"\n{}",
        apps[0],
        small(apps[0]),
        apps[1],
        small(apps[1])
    ))
}

#[test]
fn sharing_subscription_and_scheduler_are_read() {
    let s = pilot(
        "sharing = \"exclusive-quantum\"\nquantum = \"2s\"\nsubscription = 0.75",
        "policy = \"mfit\"\nmax_wait = \"50ms\"",
        ["corr", "hs3d"],
    )
    .unwrap();
    // The exclusive quantum is the manager's turns that always hold, time slicing the
    // tenants not parked.
    assert_eq!(s.config.sharing, Sharing::TimeSlice);
    assert_eq!(
        s.config.manager.gpu_time,
        GpuTime::Turns(TurnSettings::exclusive(2_000_000_000))
    );
    let sched = &s.config.manager.scheduling;
    assert_eq!((sched.policy, sched.max_wait_ns), ("mfit", 50_000_000));
    assert!(sched.instrumented);
    // The filler leaves the working sets over the subscription, beside the runtime's.
    let working_set: u64 = s
        .config
        .tenants
        .iter()
        .map(|t| t.program.peak_footprint_bytes(4096))
        .sum();
    let runtime = 2 * s.config.preset.runtime_bytes();
    let managed = s.config.manager.vram_bytes - runtime;
    assert!((managed as f64 - working_set as f64 / 0.75).abs() < 8192.0);
    // hs3d asks for three quarters of the SMs (PILOT's table).
    assert_eq!(s.config.tenants[1].sm_share, 0.75);
    // Without a sharing, the V100's own: preemptive time slices, its slice settable.
    let d = pilot("", "", ["corr", "pagedos"]).unwrap();
    let slicing = d.config.preset.time_slicing.unwrap();
    assert_eq!(d.config.sharing, Sharing::Preemptive(slicing));
    let set = pilot(
        "sharing = \"preemptive\"\ntime_slice = \"10ms\"\npreemption_cost = \"0s\"",
        "",
        ["corr", "nn"],
    )
    .unwrap();
    let expected = gpuswap_sim::preset::TimeSlicing {
        slice_ns: 10_000_000,
        preemption_cost_ns: 0,
    };
    assert_eq!(set.config.sharing, Sharing::Preemptive(expected));
    assert!(!d.config.manager.scheduling.runs());
    assert!(d.config.tenants[1].endless && !d.config.tenants[0].endless);
    let quota = pilot(
        "sharing = \"mps\"",
        "policy = \"madvise\"\nquota = \"1GiB\"",
        ["corr", "nn"],
    );
    assert_eq!(
        quota.unwrap().config.manager.scheduling.quota_bytes,
        Some(1 << 30)
    );
}

#[test]
fn bad_sharing_and_scheduler_settings_name_key_and_expectation() {
    for (device, scheduler, apps, key, expected) in [
        (
            "sharing = \"spatial\"",
            "",
            ["corr", "nn"],
            "device.sharing",
            "time-slice, mps, preemptive, exclusive-quantum",
        ),
        (
            "sharing = \"time-slice\"\ntime_slice = \"1ms\"",
            "",
            ["corr", "nn"],
            "device.time_slice",
            "time_slice applies to sharing = \"preemptive\" only, not \"time-slice\"",
        ),
        (
            "preemption_cost = \"-1us\"",
            "",
            ["corr", "nn"],
            "device.preemption_cost",
            "",
        ),
        (
            "time_slice = \"0ms\"",
            "",
            ["corr", "nn"],
            "device.time_slice",
            "positive duration",
        ),
        (
            "sharing = \"mps\"\nquantum = \"1s\"",
            "",
            ["corr", "nn"],
            "device.quantum",
            "only, not \"mps\"",
        ),
        (
            "sharing = \"exclusive-quantum\"\nquantum = \"0s\"",
            "",
            ["corr", "nn"],
            "device.quantum",
            "positive duration",
        ),
        (
            "subscription = 0",
            "",
            ["corr", "nn"],
            "device.subscription",
            "above 0",
        ),
        (
            "subscription = 1.5\noversubscription = 1.5",
            "",
            ["corr", "nn"],
            "device.subscription",
            "not both",
        ),
        (
            "subscription = 0.001",
            "",
            ["corr", "nn"],
            "device.subscription",
            "needs",
        ),
        (
            "",
            "policy = \"fifo\"",
            ["corr", "nn"],
            "scheduler.policy",
            "none, mfit, amfit, madvise",
        ),
        (
            "",
            "policy = \"madvise\"\nmax_wait = \"1s\"",
            ["corr", "nn"],
            "scheduler.max_wait",
            "mfit or amfit",
        ),
        (
            "",
            "policy = \"mfit\"\nquota = \"1GiB\"",
            ["corr", "nn"],
            "scheduler.quota",
            "madvise",
        ),
        (
            "",
            "policy = \"amfit\"\ninstrumented = false",
            ["corr", "nn"],
            "scheduler.instrumented",
            "expected true",
        ),
        (
            "",
            "policy = \"mfit\"\nmax_wait = \"soon\"",
            ["corr", "nn"],
            "scheduler.max_wait",
            "",
        ),
        (
            "",
            "policy = \"madvise\"\nquota = \"0B\"",
            ["corr", "nn"],
            "scheduler.quota",
            "above 0",
        ),
        (
            "",
            "",
            ["pagedos", "pagedos"],
            "tenant[1].app",
            "at least one tenant that is not endless",
        ),
    ] {
        let e = pilot(device, scheduler, apps).unwrap_err().to_string();
        assert!(
            e.starts_with("s.toml: ") && e.contains(key) && e.contains(expected),
            "{e}"
        );
    }
    // A scheduling policy needs unified memory.
    let e = error("[scheduler]\npolicy = \"mfit\"\n[[tenant]]\napp = \"stream\"\n");
    assert!(
        e.contains("scheduler.policy") && e.contains("[manager] mode = \"uvm\""),
        "{e}"
    );
    // So does PILOT's runtime without one, and the error names the key that asked.
    let e = error("[scheduler]\ninstrumented = true\n[[tenant]]\napp = \"stream\"\n");
    assert!(
        e.contains("scheduler.instrumented (line 2)") && e.contains("[manager] mode = \"uvm\""),
        "{e}"
    );
}

/// The slowest tenant's measured phase of `scenario`.
fn slowest_phase(scenario: &Scenario) -> u64 {
    let report = gpuswap_sim::report::run_and_report("s", scenario.seed, &scenario.config).unwrap();
    report.tenants.iter().map(|t| t.phase_ns).max().unwrap()
}

#[test]
fn with_room_to_spare_every_policy_runs_as_pilot_without_mitigation_does() {
    // At 75 % subscription nothing needs holding, stopping or throttling: the policies
    // cost what the instrumented checks cost PILOT without mitigation, no more.
    for apps in [["corr", "backprop"], ["hs3d", "2dconvol"]] {
        let with = |scheduler: &str| {
            slowest_phase(
                &pilot("sharing = \"mps\"\nsubscription = 0.75", scheduler, apps).unwrap(),
            )
        };
        let pilot_alone = with("instrumented = true") as f64;
        for policy in ["mfit", "amfit", "madvise"] {
            let ns = with(&format!("policy = \"{policy}\"")) as f64;
            assert!(
                (ns / pilot_alone - 1.0).abs() < 0.05,
                "{apps:?} {policy}: {ns} vs PILOT without mitigation {pilot_alone}"
            );
        }
    }
}

/// `app` at `size` alone with room to spare: its measured phase with PILOT's
/// instrumentation and call forwarding, and without.
fn instrumented_phases(app: &str, size: &str) -> (u64, u64) {
    let run = |instrumented: bool| {
        let s = check(&format!(
            "seed = 3\n[device]\npreset = \"v100-pcie-32gb\"\nsharing = \"mps\"\n\
             subscription = 0.75\n[manager]\nmode = \"uvm\"\n[scheduler]\n\
             instrumented = {instrumented}\n[[tenant]]\napp = \"{app}\"\nsize = \"{size}\"\n"
        ))
        .unwrap();
        slowest_phase(&s)
    };
    (run(true), run(false))
}

/// What PILOT adds to `app` at `size` alone with room to spare: its measured phase with
/// the checks and the forwarding over without.
fn instrumentation_overhead(app: &str, size: &str) -> f64 {
    let (with, without) = instrumented_phases(app, size);
    with as f64 / without as f64 - 1.0
}

#[test]
fn instrumentation_overhead_is_large_for_small_inputs_and_falls_with_size() {
    // PILOT: the overhead of its preemption checks matters for small inputs and shrinks
    // as the problem grows. gesummv checks once per element of its row in every thread:
    // at a thousand rows the flag's latency is on every trip's path, at twelve thousand
    // the other warps hide part of it.
    let small = instrumentation_overhead("gesummv", "1024");
    let larger = instrumentation_overhead("gesummv", "12288");
    assert!(small > larger && larger > 0.0, "{small} vs {larger}");
    // A kernel without a loop has no check: 2dconvol's one launch costs only the
    // socket round trips of its synchronization and of the one that ends the measured
    // phase (its launch's is hidden behind the kernel, which outlasts it).
    let (with, without) = instrumented_phases("2dconvol", "small");
    assert_eq!(
        with - without,
        2 * gpuswap_sim::forwarding::SOCKET_ROUND_TRIP_NS
    );
}

#[test]
fn forwarding_slows_many_short_synchronized_launches_most() {
    // PILOT's front end forwards every call over a socket: gaussian's 2 launches and 2
    // synchronizations per pivot row pay it at every call, more at the small input,
    // where its kernels are shortest.
    let small = instrumentation_overhead("gaussian", "1024");
    let larger = instrumentation_overhead("gaussian", "2048");
    assert!(small > larger && larger > 0.0, "{small} vs {larger}");
}

#[test]
fn the_same_scenario_and_seed_give_the_same_bytes() {
    let s = pilot(
        "sharing = \"mps\"\nsubscription = 1.5",
        "policy = \"amfit\"",
        ["bfs", "pagedos"],
    )
    .unwrap();
    let json = || {
        let report = gpuswap_sim::report::run_and_report("s", s.seed, &s.config).unwrap();
        serde_json::to_string(&report).unwrap()
    };
    let first = json();
    assert_eq!(first, json());
    for field in ["\"preemptions\":", "\"wasted_ns\":", "\"wait_ns\":"] {
        assert!(first.contains(field), "{field}");
    }
}

#[test]
fn every_scenario_in_the_readme_is_read() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    // Beside the shipped traces, which the README's trace example names.
    let at = root.join("scenarios/traces/readme.toml");
    let blocks: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .filter(|b| b.contains("[[tenant]]"))
        .collect();
    assert!(!blocks.is_empty(), "the README shows no scenario");
    for block in blocks {
        if let Err(e) = parse(&at, block) {
            panic!("{e}\nin the README's scenario:\n{block}");
        }
    }
}

/// A scenario at `dir/s.toml` whose tenants replay the given files (written to `dir`).
fn with_traces(
    name: &str,
    files: &[(&str, Vec<u8>)],
    text: &str,
) -> Result<Scenario, ScenarioError> {
    let dir = std::env::temp_dir().join(format!("gpuswap-traces-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, bytes) in files {
        std::fs::write(dir.join(file), bytes).unwrap();
    }
    parse(&dir.join("s.toml"), text)
}

#[test]
fn a_tenant_replays_a_pytorch_snapshot() {
    use gpuswap_sim::trace::synthetic;
    let s = with_traces(
        "ok",
        &[("train.pickle", synthetic::training().pickle())],
        "[device]\npreset = \"gtx1080ti\"\n[[tenant]]\ntrace = \"train.pickle\"\ntrace_bandwidth = 0.25\n",
    )
    .unwrap();
    let t = &s.config.tenants[0];
    assert_eq!(t.name, "train0");
    assert_eq!(t.app, "train");
    // The runtime's buffers come on top when it runs.
    assert_eq!(
        t.program.peak_allocated_bytes(),
        synthetic::training().peak_bytes()
    );
}

#[test]
fn bad_trace_tenants_name_the_key_and_file() {
    use gpuswap_sim::trace::synthetic;
    let good = synthetic::inference().pickle();
    let cases: [(&str, String, &str, &str); 6] = [
        (
            "both",
            "app = \"nn\"\ntrace = \"t.pickle\"".into(),
            "tenant[0].trace (line 3)",
            "not both",
        ),
        (
            "neither",
            "name = \"x\"".into(),
            "tenant[0].app",
            "trace = \"FILE.pickle\"",
        ),
        (
            "size",
            "trace = \"t.pickle\"\nsize = \"large\"".into(),
            "tenant[0].size (line 3)",
            "replays what it recorded",
        ),
        (
            "share",
            "trace = \"t.pickle\"\ntrace_bandwidth = 1.5".into(),
            "tenant[0].trace_bandwidth (line 3)",
            "from 0 to 1",
        ),
        (
            "stray",
            "app = \"nn\"\ntrace_bandwidth = 0.5".into(),
            "tenant[0].trace_bandwidth",
            "trace = FILE",
        ),
        (
            "missing",
            "trace = \"nosuch.pickle\"".into(),
            "tenant[0].trace (line 2)",
            "nosuch.pickle: cannot read it",
        ),
    ];
    for (name, tenant, key, expected) in cases {
        let e = with_traces(
            name,
            &[("t.pickle", good.clone())],
            &format!("[[tenant]]\n{tenant}\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(key) && e.contains(expected), "{name}: {e}");
    }
    let e = with_traces(
        "truncated",
        &[("t.pickle", good[..100].to_vec())],
        "[[tenant]]\ntrace = \"t.pickle\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("tenant[0].trace") && e.contains("t.pickle: not a readable pickle"),
        "{e}"
    );
}

/// A fault log of two batches: pages 0 and 1 read, then page 2 written.
const FAULT_LOG: &str = "s,\nf,7f0000000000,1,0,1,2,1,0,0,0,127,1,0,1,63\n\
                         f,7f0000001000,1,0,1,2,1,0,0,0,127,1,0,1,63\nb,10,0\n\
                         s,\nf,7f0000002000,2,0,2,4,1,0,0,0,127,1,0,1,63\nb,10,0\n";

/// A unified-memory scenario whose tenant table is `tenant`, beside `FAULT_LOG` as
/// `f.log`.
fn with_fault_log(name: &str, manager: &str, tenant: &str) -> Result<Scenario, ScenarioError> {
    with_traces(
        name,
        &[("f.log", FAULT_LOG.as_bytes().to_vec())],
        &format!(
            "[device]\npreset = \"v100-pcie-32gb\"\n[manager]\n{manager}\n[[tenant]]\n{tenant}\n"
        ),
    )
}

#[test]
fn a_tenant_replays_a_fault_log() {
    let s = with_fault_log("log-ok", "mode = \"uvm\"", "fault_log = \"f.log\"").unwrap();
    let t = &s.config.tenants[0];
    assert_eq!((t.name.as_str(), t.app.as_str()), ("f0", "f"));
    assert_eq!(t.logged_faults_per_batch, Some(vec![2, 1]));
    // One 2 MiB block holds the three pages.
    assert_eq!(t.program.peak_allocated_bytes(), 2 * MIB);
}

#[test]
fn bad_fault_log_tenants_name_the_key_and_file() {
    let uvm = "mode = \"uvm\"";
    let cases = [
        (
            "log-app",
            uvm,
            "app = \"nn\"\nfault_log = \"f.log\"",
            "tenant[0].fault_log (line 7)",
            "expected one of app, trace and fault_log, not several",
        ),
        (
            "log-trace",
            uvm,
            "trace = \"t.pickle\"\nfault_log = \"f.log\"",
            "tenant[0].fault_log (line 7)",
            "not several",
        ),
        (
            "log-mode",
            "mode = \"gpuswap\"",
            "fault_log = \"f.log\"",
            "tenant[0].fault_log (line 6)",
            "expected [manager] mode = \"uvm\", not \"gpuswap\"",
        ),
        (
            "log-repeat",
            uvm,
            "fault_log = \"f.log\"\nrepeat = 2",
            "tenant[0].repeat (line 7)",
            "a fault log replays what it recorded",
        ),
        (
            "log-missing",
            uvm,
            "fault_log = \"nosuch.log\"",
            "tenant[0].fault_log (line 6)",
            "nosuch.log: cannot read it",
        ),
        (
            "log-neither",
            uvm,
            "name = \"x\"",
            "tenant[0].app",
            "or fault_log = \"FILE\"",
        ),
    ];
    for (name, manager, tenant, key, expected) in cases {
        let e = with_fault_log(name, manager, tenant)
            .unwrap_err()
            .to_string();
        assert!(e.contains(key) && e.contains(expected), "{name}: {e}");
    }
    let e = with_traces(
        "log-bad",
        &[("f.log", b"s,\nf,7f0000000000,1\n".to_vec())],
        "[device]\npreset = \"v100-pcie-32gb\"\n[manager]\nmode = \"uvm\"\n[[tenant]]\nfault_log = \"f.log\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("tenant[0].fault_log (line 6)")
            && e.contains("f.log: line 2: `f` record with 2 fields; expected 14"),
        "{e}"
    );
}

#[test]
fn optimum_is_a_simulator_setting_for_unified_memory_only() {
    let with = |mode: &str, optimum: &str| {
        check(&format!(
            "[device]\npreset = \"gtx1080ti\"\n[manager]\nmode = \"{mode}\"\noptimum = {optimum}\n[[tenant]]\napp = \"hotspot\"\n"
        ))
    };
    assert!(with("uvm", "true").unwrap().config.optimum);
    assert!(with("uvm", "\"true\"").unwrap().config.optimum);
    assert!(!with("uvm", "false").unwrap().config.optimum);
    let e = with("uvm", "3").unwrap_err().to_string();
    assert!(
        e.contains("manager.optimum") && e.contains("expected true or false"),
        "{e}"
    );
    let e = with("gpuswap", "true").unwrap_err().to_string();
    assert!(
        e.contains("manager.optimum") && e.contains("[manager] mode = \"uvm\""),
        "{e}"
    );
    // It is no manager parameter: the registry's uvm keys do not list it.
    let uvm = gpuswap_core::registry::find_policy("uvm").unwrap();
    assert!(uvm.params.iter().all(|p| p.key != "optimum"));
}

#[test]
fn contracts_are_read_and_checked_against_the_mode() {
    let gpuswap = "[manager]\nmode = \"gpuswap\"\n";
    let s = check(&format!(
        "{gpuswap}{TENANT}vram_guarantee = \"64MiB\"\nvram_limit = \"128MiB\"\nmemory_limit = \"256MiB\"\nat_limit = \"spill\"\nhost_limit = \"1GiB\"\nweight = 3\npriority_class = 2\n[[tenant]]\napp = \"stream\"\n"
    ))
    .unwrap();
    let c = s.config.tenants[0].contract;
    assert_eq!(c.vram_guarantee_bytes, 64 * MIB);
    assert_eq!(c.vram_limit_bytes, Some(128 * MIB));
    assert_eq!(c.memory_limit_bytes, Some(256 * MIB));
    assert_eq!(c.at_limit, AtLimit::Spill);
    assert_eq!(c.host_limit_bytes, Some(1 << 30));
    assert_eq!((c.weight, c.priority_class), (3, 2));
    assert!(s.config.tenants[1].contract.is_default());
    // Static partitioning cuts VRAM into the tenants' total weight.
    let s = check(&format!(
        "[manager]\nmode = \"static\"\n{TENANT}weight = 3\n[[tenant]]\napp = \"stream\"\n"
    ))
    .unwrap();
    assert_eq!(s.config.manager.policy.count("tenants"), 4);

    let cases = [
        // A term the mode has no meaning for names the modes that have one.
        (
            format!("{TENANT}weight = 2\n"),
            "tenant[0].weight (line 4): mode native does not honour weight",
            "modes that do: gpuswap, static",
        ),
        (
            format!("{gpuswap}{TENANT}weight = 0\n"),
            "tenant[0].weight (line 6)",
            "from 1 to 1000",
        ),
        (
            format!("{gpuswap}{TENANT}priority_class = 300\n"),
            "tenant[0].priority_class",
            "from 0 to 255",
        ),
        (
            format!("{gpuswap}{TENANT}vram_guarantee = \"lots\"\n"),
            "tenant[0].vram_guarantee (line 6)",
            "size",
        ),
        (
            format!("{gpuswap}{TENANT}at_limit = \"maybe\"\nmemory_limit = \"1GiB\"\n"),
            "tenant[0].at_limit",
            "expected one of: fail, wait, spill",
        ),
        (
            format!("{gpuswap}{TENANT}at_limit = \"spill\"\n"),
            "tenant[0].at_limit",
            "needs a memory_limit",
        ),
        (
            format!("{gpuswap}{TENANT}at_limit = \"wait\"\nmemory_limit = \"1GiB\"\n"),
            "tenant[0].at_limit",
            "a simulated program blocks on its allocation",
        ),
        (
            format!("{gpuswap}{TENANT}vram_guarantee = \"2GiB\"\nvram_limit = \"1GiB\"\n"),
            "tenant[0].vram_guarantee",
            "above vram_limit",
        ),
        (
            format!(
                "[device]\nvram_limit = \"100MiB\"\n{gpuswap}{TENANT}vram_guarantee = \"200MiB\"\n"
            ),
            "tenant[0].vram_guarantee",
            "expected at most the 100.0 MiB of VRAM tenants get",
        ),
        (
            format!(
                "[device]\npreset = \"a100-80gb\"\n[manager]\nmode = \"uvm\"\n{TENANT}weight = 2\n"
            ),
            "tenant[0].weight",
            "mode uvm honours weight only with victim = \"largest-share\" (it has victim = \"any\")",
        ),
        (
            format!(
                "[device]\npreset = \"a100-80gb\"\n[manager]\nmode = \"uvm\"\nvictim = \"largest-share\"\n{TENANT}vram_limit = \"100MiB\"\n"
            ),
            "tenant[0].vram_limit",
            "which stay in VRAM, and a 2 MiB block for pages; got 100.0 MiB",
        ),
        (
            format!(
                "[device]\npreset = \"a100-80gb\"\n[manager]\nmode = \"uvm\"\n{TENANT}host_limit = \"1GiB\"\n"
            ),
            "tenant[0].host_limit",
            "mode uvm does not honour host_limit",
        ),
    ];
    for (text, key, expected) in cases {
        let e = error(&text);
        assert!(e.contains(key) && e.contains(expected), "{e}");
    }
}

#[test]
fn a_guarantee_that_does_not_fit_beside_the_others_fails_the_later_tenant() {
    let s = check(
        "[device]\nvram_limit = \"200MiB\"\n[manager]\nmode = \"gpuswap\"\n\
         [[tenant]]\napp = \"stream\"\nsize = \"uvmsmart\"\nvram_guarantee = \"150MiB\"\n\
         [[tenant]]\napp = \"stream\"\nsize = \"uvmsmart\"\nstart = \"1ms\"\nvram_guarantee = \"100MiB\"\n",
    )
    .unwrap();
    let outcome = gpuswap_sim::engine::simulate(s.config).unwrap();
    assert_eq!(outcome.tenants[0].error, None);
    let error = outcome.tenants[1].error.as_deref().unwrap();
    assert!(
        error.starts_with("not admitted: vram_guarantee of 104857600 bytes does not fit"),
        "{error}"
    );
}

/// `device.link_scale` scales the host link's bandwidth alone (the adaptive-runtime
/// paper's interconnect study): a unified-memory tenant whose pages cross the link runs
/// longer on half the link and shorter on twice it; bad factors are refused.
#[test]
fn link_scale_scales_the_links_bandwidth() {
    let run = |scale: &str| {
        let s = check(&format!(
            "seed = 1\n[device]\npreset = \"gtx1080ti\"\nlink_scale = {scale}\n\
             [manager]\nmode = \"uvm\"\n[[tenant]]\napp = \"backprop\"\n"
        ))
        .unwrap();
        let link = s.config.preset.link;
        let report = gpuswap_sim::report::run_and_report("s", 1, &s.config).unwrap();
        (link, report.tenants[0].total_ns)
    };
    let (one, at_one) = run("1.0");
    let (half, at_half) = run("0.5");
    let (_, at_two) = run("2.0");
    assert_eq!(half.h2d_bytes_per_s, one.h2d_bytes_per_s / 2.0);
    assert_eq!(half.d2h_bytes_per_s, one.d2h_bytes_per_s / 2.0);
    assert_eq!(half.latency_ns, one.latency_ns);
    assert!(
        at_half > at_one && at_one > at_two,
        "{at_half} {at_one} {at_two}"
    );
    for bad in ["0", "-1", "100", "nan"] {
        let e = error(&format!("[device]\nlink_scale = {bad}\n{TENANT}"));
        assert!(
            e.contains("device.link_scale") && e.contains("1/64 to 64"),
            "{bad}: {e}"
        );
    }
}
