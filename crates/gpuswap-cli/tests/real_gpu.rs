//! gpuswapd, the interposer and unmodified CUDA programs end to end, on the CUDA
//! stand-in (`gpuswap-standin`): real processes, a real socket, real address-space
//! remapping; only the GPU is the stand-in's CPU. `scripts/gpu-check.sh` runs the same
//! client on a real GPU.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{MIB, World, verified};
use gpuswap_daemon::observe;

#[test]
fn three_processes_oversubscribe_and_keep_every_byte() {
    // Concurrent time: all three run at once with their overflow in host memory.
    let w = World::with_daemon_args("three", 64, None, &["--set", "gpu_time=concurrent"]);
    // 3 x (3 x 12 MiB + a 2 MiB scratch) = 114 MiB asked of 64 MiB. The third runs
    // longest, so evicted data returns to it while it still checks its buffers; the
    // second finds the driver as libcudart does (dlsym, cuGetProcAddress).
    let runs: [(&str, &[&str]); 3] = [
        ("a", &["--rounds", "3", "--seed", "1"]),
        (
            "b",
            &["--rounds", "3", "--seed", "2", "--resolve", "runtime"],
        ),
        ("c", &["--rounds", "8", "--seed", "3"]),
    ];
    let mut children = Vec::new();
    for (name, extra) in runs {
        let mut args = vec!["--buffers", "3", "--size", "12MiB", "--hold-ms", "150"];
        args.extend_from_slice(extra);
        let child = w
            .client(64, &args)
            .env("GPUSWAP_TENANT_NAME", name)
            .spawn()
            .unwrap();
        children.push((name, child));
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen = w.watch(|| {
        children
            .iter_mut()
            .all(|(_, c)| c.try_wait().unwrap().is_some())
    });
    for (name, child) in children {
        let json = verified(&child.wait_with_output().unwrap(), name);
        // cuMemGetInfo reports the tenant's view: the daemon's VRAM as the total.
        assert_eq!(json["mem_info_total"], 64 * MIB);
    }
    let evicted: u64 = seen.values().map(|v| v.0).sum();
    let returned: u64 = seen.values().map(|v| v.1).sum();
    assert!(
        evicted >= 20 * MIB,
        "too little moved to host memory: {seen:?}"
    );
    assert!(returned > 0, "nothing came back to VRAM: {seen:?}");
    w.assert_empty();
}

/// Two processes of 2 x 24 MiB (and a scratch) in 64 MiB: the second's allocation
/// evicts from the first, whose copies take `copy_delay_ms` each (so that a kill lands
/// mid-relocation) and which traces its calls and moves.
fn pair_with_slow_victim(
    w: &World,
    copy_delay_ms: &str,
    victim_env: &[(&str, &str)],
) -> (Child, Child) {
    let member = |name: &str, hold_ms: &str, seed: &str, copy_delay_ms: &str| {
        let mut client = w.client(
            64,
            &[
                "--buffers",
                "2",
                "--size",
                "24MiB",
                "--rounds",
                "2",
                "--hold-ms",
                hold_ms,
                "--seed",
                seed,
            ],
        );
        client
            .env("GPUSWAP_TENANT_NAME", name)
            .env("GPUSWAP_STANDIN_COPY_DELAY_MS", copy_delay_ms);
        client
    };
    let victim = {
        let mut victim = member("victim", "1500", "5", copy_delay_ms);
        victim
            .env("GPUSWAP_TRACE", "1")
            .envs(victim_env.iter().copied());
        victim.spawn().unwrap()
    };
    w.wait_buffers(3);
    let requester = member("requester", "100", "6", "0").spawn().unwrap();
    w.wait_suspended("victim");
    // Inside the first relocation copy (it sleeps 400 ms).
    std::thread::sleep(Duration::from_millis(150));
    (victim, requester)
}

#[test]
fn a_victim_killed_mid_relocation_frees_everything_and_the_other_goes_on() {
    let w = World::new("kill-victim", 64);
    let (mut victim, requester) = pair_with_slow_victim(&w, "400", &[]);
    victim.kill().unwrap();
    // Reaped only after the requester is done: a killed process holds no VRAM even
    // while its parent has not waited for it (the driver frees it as the process exits).
    verified(&requester.wait_with_output().unwrap(), "requester");
    victim.wait().unwrap();
    w.assert_empty();
}

/// The victim's trace after a pair whose victim copies slowly, with `victim_env`.
fn slow_victims_trace(name: &str, victim_env: &[(&str, &str)]) -> String {
    // Concurrent time: the victim's chunks move one by one while it runs (under the
    // default, auto, the pair would take turns and move in bulk).
    let w = World::with_daemon_args(name, 64, None, &["--set", "gpu_time=concurrent"]);
    let (victim, requester) = pair_with_slow_victim(&w, "30", victim_env);
    verified(&requester.wait_with_output().unwrap(), "requester");
    let out = victim.wait_with_output().unwrap();
    verified(&out, "victim");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The pool's line of a trace: (evictions served from the pool, evictions).
fn pool_line(stderr: &str) -> Option<(u64, u64)> {
    let line = stderr
        .lines()
        .find_map(|l| l.split("host memory for ").nth(1))?;
    let words: Vec<&str> = line.split(' ').collect();
    Some((words[0].parse().ok()?, words[2].parse().ok()?))
}

/// Issue 41, item 4: a pitched allocation is a managed one of pitch x height bytes; two
/// programs of them oversubscribe VRAM, their chunks move, and every byte survives.
#[test]
fn pitched_allocations_are_managed_and_keep_every_byte() {
    let w = World::with_daemon_args("pitched", 64, None, &["--set", "gpu_time=concurrent"]);
    let args = [
        "--pitched",
        "--buffers",
        "3",
        "--size",
        "12MiB",
        "--rounds",
        "3",
        "--hold-ms",
        "100",
    ];
    let a = w.client(64, &args).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let b = w
        .client(64, &[&args[..], &["--seed", "7"]].concat())
        .spawn()
        .unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    verified(&a, "a");
    verified(&b, "b");
    let summary = String::from_utf8_lossy(&a.stderr) + String::from_utf8_lossy(&b.stderr);
    assert!(
        !summary.contains("not interposed") && !summary.contains("NOT_SUPPORTED"),
        "{summary}"
    );
}

#[test]
fn the_trace_says_where_a_move_spends_its_time() {
    let stderr = slow_victims_trace("move-times", &[("GPUSWAP_HOST_POOL", "8MiB")]);
    let line = stderr
        .lines()
        .find_map(|l| l.split("moves to Host: ").nth(1))
        .unwrap_or_else(|| panic!("no moves in the trace: {stderr}"));
    let words: Vec<&str> = line
        .split([' ', ',', ';'])
        .filter(|w| !w.is_empty())
        .collect();
    let after = |name: &str| -> f64 {
        let at = words.iter().position(|w| *w == name);
        let number = at.and_then(|i| words.get(i + 1)?.parse().ok());
        number.unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    let chunks: f64 = words[0].parse().unwrap();
    // The requester's first 24 MiB find 14 MiB free: at least five 2 MiB chunks left.
    assert!(chunks >= 5.0, "{line}");
    assert_eq!(after("chunks"), 2.0 * MIB as f64 * chunks, "{line}");
    // The stand-in's copies sleep 30 ms: the copy phase carries it, the others not.
    assert!(after("copy") >= 30_000.0, "{line}");
    assert!(after("remap") < 30_000.0, "{line}"); // The pool pins ahead while the copies sleep: after the first eviction, which
    // starts it, later ones find host memory ready.
    let (from_pool, evictions) = pool_line(&stderr).unwrap_or_else(|| panic!("{stderr}"));
    assert_eq!(evictions as f64, chunks, "{stderr}");
    assert!(from_pool >= 1, "{stderr}");
}

#[test]
fn without_a_pool_every_eviction_creates_its_host_memory() {
    // `0`: no pool (unset, host memory that comes back to VRAM is kept).
    let stderr = slow_victims_trace("no-pool", &[("GPUSWAP_HOST_POOL", "0")]);
    assert!(stderr.contains("moves to Host: "), "{stderr}");
    assert_eq!(pool_line(&stderr), None, "{stderr}");
}

#[test]
fn a_requester_killed_while_it_waits_leaves_the_victim_intact() {
    let w = World::new("kill-requester", 64);
    let (victim, mut requester) = pair_with_slow_victim(&w, "400", &[]);
    requester.kill().unwrap();
    requester.wait().unwrap();
    verified(&victim.wait_with_output().unwrap(), "victim");
    w.assert_empty();
    // The number and memory of both are free again: a newcomer gets all of it.
    let out = w
        .client(64, &["--buffers", "1", "--size", "60MiB", "--rounds", "1"])
        .output()
        .unwrap();
    verified(&out, "newcomer");
}

#[test]
fn no_daemon_is_a_clear_error_at_the_first_call_and_passthrough_runs() {
    let w = World::new("nodaemon", 64);
    let started = Instant::now();
    let out = w
        .client(64, &["--buffers", "1", "--size", "4MiB", "--rounds", "1"])
        .env("GPUSWAP_SOCKET", w.dir.join("nobody.sock"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no gpuswap daemon at"), "{stderr}");
    assert!(stderr.contains("cuInit"), "the first call fails: {stderr}");
    assert!(stderr.contains("GPUSWAP_PASSTHROUGH"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "it must not hang"
    );
    let out = w
        .client(64, &["--buffers", "1", "--size", "4MiB", "--rounds", "1"])
        .env("GPUSWAP_SOCKET", w.dir.join("nobody.sock"))
        .env("GPUSWAP_PASSTHROUGH", "1")
        .output()
        .unwrap();
    let json = verified(&out, "passthrough");
    // Unmanaged: the stand-in's own figures.
    assert_eq!(json["mem_info_total"], 64 * MIB);
}

/// Issue 41, item 5: cuMemGetInfo tells a tenant its contract's truth: the total is its
/// `vram_limit` where that is below the daemon's VRAM, the free memory that total less
/// what it holds in VRAM.
#[test]
fn mem_get_info_says_the_contracts_vram_limit_and_what_is_held_in_vram() {
    let contracts = "[process.capped]\nvram_limit = \"24MiB\"\n";
    let w = World::with_contracts("meminfo", 64, Some(contracts));
    let args = ["--buffers", "1", "--size", "8MiB", "--rounds", "1"];
    let run = |name: &str| {
        let out = w
            .client(64, &args)
            .env("GPUSWAP_TENANT_NAME", name)
            .output();
        verified(&out.unwrap(), name)
    };
    let json = run("capped");
    assert_eq!(json["mem_info_total"], 24 * MIB);
    // 8 MiB and a 2 MiB scratch buffer, all in VRAM.
    assert_eq!(json["mem_info_free"], 14 * MIB);
    let json = run("free");
    assert_eq!(json["mem_info_total"], 64 * MIB);
    assert_eq!(json["mem_info_free"], 54 * MIB);
}

/// `GET /metrics` over plain HTTP/1.0: the body.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{head}"
    );
    assert!(head.contains("application/openmetrics-text"), "{head}");
    body.to_owned()
}

/// Issue 42, item 3: during an oversubscribed run the metrics parse as OpenMetrics and
/// agree with `top --json` of the same generation.
#[test]
fn metrics_scraped_during_an_oversubscribed_run_agree_with_top() {
    use openmetrics_parser::OpenMetricsValue;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let w = World::with_daemon_args(
        "metrics",
        64,
        None,
        &["--metrics-listen", &addr, "--set", "gpu_time=concurrent"],
    );
    let args = [
        "--buffers",
        "3",
        "--size",
        "12MiB",
        "--rounds",
        "2",
        "--hold-ms",
        "400",
    ];
    let a = w.client(64, &args).spawn().unwrap();
    let b = w
        .client(64, &[&args[..], &["--seed", "9"]].concat())
        .spawn()
        .unwrap();
    w.wait_buffers(7);
    let mut agreed = 0;
    for _ in 0..200 {
        let text = scrape(&addr);
        let snap = observe(&w.socket()).unwrap();
        let parsed = openmetrics_parser::openmetrics::parse_openmetrics(&text)
            .unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        let value = |family: &str, tenant: Option<u32>| -> u64 {
            let f = &parsed.families[family];
            let sample = f
                .iter_samples()
                .find(|s| {
                    let set = s.get_labelset().unwrap();
                    tenant.is_none_or(|t| set.get_label_value("tenant") == Some(&t.to_string()))
                })
                .unwrap();
            match &sample.value {
                OpenMetricsValue::Gauge(n) => n.as_f64() as u64,
                OpenMetricsValue::Counter(c) => c.value.as_f64() as u64,
                other => panic!("{other:?}"),
            }
        };
        if value("gpuswap_snapshot_generation", None) != snap.generation {
            continue;
        }
        assert_eq!(value("gpuswap_vram_used_bytes", None), snap.vram_used_bytes);
        assert_eq!(value("gpuswap_tenants", None), snap.tenants.len() as u64);
        for t in &snap.tenants {
            assert_eq!(
                value("gpuswap_tenant_vram_bytes", Some(t.tenant)),
                t.vram_bytes
            );
            assert_eq!(
                value("gpuswap_tenant_host_bytes", Some(t.tenant)),
                t.host_bytes
            );
            assert_eq!(value("gpuswap_tenant_moves", Some(t.tenant)), t.relocations);
        }
        // Under concurrent time each move is one chunk's: the histogram counts them all.
        let moves: u64 = snap.tenants.iter().map(|t| t.relocations).sum();
        let latency = parsed.families["gpuswap_move_latency_seconds"]
            .iter_samples()
            .next()
            .map(|s| match &s.value {
                OpenMetricsValue::Histogram(h) => h.count.unwrap_or(0),
                other => panic!("{other:?}"),
            })
            .unwrap();
        assert_eq!(latency, snap.move_latency.count());
        assert!(latency >= moves, "{latency} moves timed, {moves} counted");
        agreed += 1;
        if agreed >= 3 && snap.host_used_bytes > 0 {
            break;
        }
    }
    assert!(agreed >= 3, "no scrape met top at the same generation");
    verified(&a.wait_with_output().unwrap(), "a");
    verified(&b.wait_with_output().unwrap(), "b");
}

/// Issue 42, item 4: `--log-format json` writes one object a line, with a time stamp
/// and a level: a connection and its end at info, a refusal at warn.
#[test]
fn json_logs_carry_a_time_stamp_and_a_level_per_line() {
    let w = World::logged("json-logs", 64, &["--log-format", "json"]);
    let args = ["--buffers", "1", "--size", "4MiB", "--rounds", "1"];
    verified(&w.client(64, &args).output().unwrap(), "a");
    let mut stream = std::os::unix::net::UnixStream::connect(w.socket()).unwrap();
    let hello = gpuswap_wire::ClientMsg::Hello {
        protocol: 999,
        pid: 1,
        name: "old".into(),
        device_total_bytes: 1 << 30,
        granularity_bytes: 2 * MIB,
        memory_limit_bytes: 0,
        device_uuid: String::new(),
    };
    gpuswap_wire::write_frame(&mut stream, &hello).unwrap();
    let answer: gpuswap_wire::DaemonMsg = gpuswap_wire::read_frame(&mut stream).unwrap();
    assert!(matches!(answer, gpuswap_wire::DaemonMsg::Refused { .. }));
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines: Vec<serde_json::Value> = loop {
        let log = w.log();
        // The first process's end may come after the refusal: wait for both.
        if (log.contains("refused") && log.contains("gone:")) || Instant::now() > deadline {
            break log
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let find = |what: &str| {
        lines
            .iter()
            .find(|l| l["fields"]["message"].as_str().unwrap().contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in {lines:?}"))
    };
    assert_eq!(find("connected: pid")["level"], "INFO");
    assert_eq!(find("gone: disconnected")["level"], "INFO");
    assert_eq!(find("refused")["level"], "WARN");
    assert!(
        find("listening on")["timestamp"]
            .as_str()
            .unwrap()
            .starts_with("20")
    );
}

/// Issue 42, item 7: HAMi-core's per-container limit is the process's memory limit, and
/// HAMi-core's own interposer loaded beside ours is refused with a message.
#[test]
fn hami_cores_limit_is_honoured_and_its_library_refused() {
    let w = World::new("hami", 64);
    let try_alloc = |limit: &str, bytes: &str| {
        w.client(64, &["--try-alloc", bytes])
            .env("CUDA_DEVICE_MEMORY_LIMIT", limit)
            .output()
            .unwrap()
    };
    let under = try_alloc("16m", "8388608");
    assert!(
        under.status.success(),
        "{}",
        String::from_utf8_lossy(&under.stderr)
    );
    let over = try_alloc("8m", "16777216");
    assert!(!over.status.success(), "16 MiB under an 8 MiB limit");
    let bad = try_alloc("lots", "8388608");
    assert!(!bad.status.success());
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(
        said.contains("CUDA_DEVICE_MEMORY_LIMIT=\"lots\" is no memory limit"),
        "{said}"
    );
    // A stand-in for HAMi-core's library: any shared object of its name.
    let dir = std::env::temp_dir().join(format!("gpuswap-hami-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("vgpu.c");
    std::fs::write(&source, "int hami_core_stand_in;\n").unwrap();
    let library = dir.join("libvgpu.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        return; // No C compiler here: the unit test covers the detection.
    }
    let preload = format!("{}:{}", library.display(), common::interposer().display());
    let out = w
        .client(64, &["--try-alloc", "8388608"])
        .env("LD_PRELOAD", preload)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("HAMi-core's libvgpu.so is loaded in this process too"),
        "{said}"
    );
}

#[test]
fn top_shows_tenants_and_fails_clearly_without_a_daemon() {
    let contracts = "[process.holder]\nvram_guarantee = \"16MiB\"\npriority_class = 1\n\n\
                     [process.greedy]\nvram_guarantee = \"60MiB\"\n";
    let w = World::with_contracts("top", 64, Some(contracts));
    let mut holder = w
        .client(
            64,
            &[
                "--buffers",
                "2",
                "--size",
                "8MiB",
                "--rounds",
                "1",
                "--hold-ms",
                "3000",
            ],
        )
        .env("GPUSWAP_TENANT_NAME", "holder")
        .spawn()
        .unwrap();
    w.wait_buffers(3);
    let gpuswap = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gpuswap"))
            .args(args)
            .output()
            .unwrap()
    };
    let socket = w.socket().display().to_string();
    let out = gpuswap(&["top", "--json", "--socket", &socket]);
    assert!(out.status.success());
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(snap["tenants"][0]["name"], "holder");
    assert_eq!(snap["tenants"][0]["vram_bytes"], 18 * MIB);
    assert_eq!(
        snap["tenants"][0]["contract"]["vram_guarantee_bytes"],
        16 * MIB
    );
    let out = gpuswap(&["top", "--iterations", "1", "--socket", &socket]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("holder")
            && table.contains("18.0 MiB")
            && table.contains("guarantee 16.0 MiB, class 1"),
        "{table}"
    );
    // A process whose configured guarantee does not fit beside the holder's is refused
    // at its first call, with the reason.
    let greedy = w
        .client(64, &["--buffers", "1", "--size", "2MiB", "--rounds", "1"])
        .env("GPUSWAP_TENANT_NAME", "greedy")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&greedy.stderr);
    assert!(!greedy.status.success());
    assert!(
        stderr.contains("contract of \"greedy\"") && stderr.contains("vram_guarantee"),
        "{stderr}"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    let missing = w.dir.join("missing.sock").display().to_string();
    let out = gpuswap(&["top", "--json", "--socket", &missing]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no gpuswap daemon at"));
}

#[test]
fn a_program_outlives_its_daemon() {
    let mut w = World::new("daemon-dies", 64);
    let client = w
        .client(
            64,
            &[
                "--buffers",
                "2",
                "--size",
                "8MiB",
                "--rounds",
                "3",
                "--hold-ms",
                "400",
            ],
        )
        .spawn()
        .unwrap();
    w.wait_buffers(3);
    w.daemon.kill().unwrap();
    w.daemon.wait().unwrap();
    // Its buffers stay where they are, its frees and later allocations go to the driver.
    let out = client.wait_with_output().unwrap();
    verified(&out, "orphan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("lost the gpuswap daemon"), "{stderr}");
}

/// `gpuswap top --json`'s snapshot, or `None` while the daemon does not answer.
fn top_json(w: &World) -> Option<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["top", "--json", "--socket"])
        .arg(w.socket())
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// Whether a snapshot breaks turns: a holder is named, yet both tenants are busy and
/// neither is held.
fn two_run_in_one_turn(snap: &serde_json::Value) -> bool {
    let tenants = snap["tenants"].as_array().cloned().unwrap_or_default();
    !snap["holder"].is_null()
        && tenants.len() == 2
        && tenants
            .iter()
            .all(|t| t["busy"] == true && t["suspended"] == false)
}

/// A world under turns (a quantum of 500 ms) with tenants "a" and "b" that each fit
/// alone but not together: 3 x 12 MiB and a 2 MiB scratch each, 38 MiB of the 64 MiB
/// managed, 76 MiB for both. Each verifies and refills all of it round after round
/// without a pause, so both are busy from start to end and must take turns. `a_env`:
/// more of "a"'s environment.
fn turns_pair(name: &str, a_env: &[(&str, &str)]) -> (World, Vec<(&'static str, Child)>) {
    let w = World::with_daemon_args(
        name,
        64,
        None,
        &["--set", "gpu_time=turns", "--set", "quantum=500ms"],
    );
    let children = [("a", "11", a_env), ("b", "12", &[][..])]
        .into_iter()
        .map(|(name, seed, env)| {
            let args = [
                "--buffers",
                "3",
                "--size",
                "12MiB",
                "--rounds",
                "80",
                "--seed",
                seed,
            ];
            let child = w
                .client(64, &args)
                .env("GPUSWAP_TENANT_NAME", name)
                .envs(env.iter().copied())
                .spawn()
                .unwrap();
            (name, child)
        })
        .collect();
    (w, children)
}

#[test]
fn two_tenants_that_fit_only_alone_take_turns_and_keep_every_byte() {
    let (w, mut children) = turns_pair("turns", &[]);
    let deadline = Instant::now() + Duration::from_secs(180);
    let (mut samples, mut held_seen) = (0, false);
    while !children
        .iter_mut()
        .all(|(_, c)| c.try_wait().unwrap().is_some())
    {
        assert!(Instant::now() < deadline, "the tenants did not finish");
        let Some(snap) = top_json(&w) else { continue };
        assert!(!two_run_in_one_turn(&snap), "both run in one turn: {snap}");
        let tenants = snap["tenants"].as_array().cloned().unwrap_or_default();
        held_seen |= tenants.iter().any(|t| t["turn"] == "held");
        samples += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    for (name, child) in children {
        // Each client checked every byte of every buffer at every round.
        verified(&child.wait_with_output().unwrap(), name);
    }
    let snap = top_json(&w).expect("the daemon answers");
    assert!(
        samples > 10 && held_seen,
        "{samples} samples, a held tenant seen: {held_seen}"
    );
    assert!(snap["handovers"].as_u64().unwrap() >= 2, "{snap}");
    assert!(snap["batch_moved_bytes"].as_u64().unwrap() > 0, "{snap}");
    w.assert_empty();
}

#[test]
fn a_tenant_killed_in_a_handover_leaves_the_other_intact() {
    // "a"'s copies sleep 300 ms (once per batch pass), so a handover that moves its
    // chunks lasts that long: it is killed while it is suspended after a handover.
    let (w, mut children) = turns_pair("turns-kill", &[("GPUSWAP_STANDIN_COPY_DELAY_MS", "300")]);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            Instant::now() < deadline,
            "no handover with \"a\" suspended"
        );
        let snap = top_json(&w);
        let handing_over = snap.as_ref().is_some_and(|snap| {
            let a = snap["tenants"]
                .as_array()
                .and_then(|t| t.iter().find(|t| t["name"] == "a").cloned());
            snap["handovers"].as_u64() >= Some(1) && a.is_some_and(|a| a["suspended"] == true)
        });
        if handing_over {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    let (_, mut a) = children.remove(0);
    a.kill().unwrap();
    let (_, b) = children.remove(0);
    verified(&b.wait_with_output().unwrap(), "b");
    a.wait().unwrap();
    w.assert_empty();
}

/// Churn (issue 39): rounds of processes allocating beside each other past the daemon's
/// VRAM while one is killed or stopped at random, and now and then the daemon itself
/// is stopped for a while; every process that ends on its own verified every byte,
/// and the daemon holds nothing once they are gone. `CHURN_ROUNDS` (default 3) sets the
/// rounds; `scripts/churn.sh` runs many and prints the counts.
#[test]
fn churn_loses_no_byte_and_leaves_nothing_booked() {
    let rounds: u64 = std::env::var("CHURN_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let w = World::new("churn", 64);
    // A small generator of our own: the rounds differ, a round repeats.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut draw = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let signal = |pid: u32, sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    };
    let (mut started, mut killed, mut stopped, mut daemon_stops) = (0, 0, 0, 0);
    let (mut verified_runs, mut verified_bytes) = (0u64, 0u64);
    for round in 0..rounds {
        let mut children = Vec::new();
        for i in 0..3 {
            let buffers = 1 + draw(3);
            let mib = 8 + 4 * draw(3);
            let rounds = 2 + draw(3);
            let args = [
                "--buffers".to_owned(),
                buffers.to_string(),
                "--size".to_owned(),
                format!("{mib}MiB"),
                "--rounds".to_owned(),
                rounds.to_string(),
                "--hold-ms".to_owned(),
                (20 + draw(80)).to_string(),
                "--seed".to_owned(),
                (round * 3 + i + 1).to_string(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let child = w.client(64, &args).spawn().unwrap();
            children.push((child, buffers * mib * MIB * rounds));
            started += 1;
        }
        std::thread::sleep(Duration::from_millis(50 + draw(200)));
        let victim = draw(3) as usize;
        let pid = children[victim].0.id();
        let mut gone = None;
        match draw(4) {
            0 => {
                signal(pid, "-KILL");
                killed += 1;
                gone = Some(victim);
            }
            1 => {
                signal(pid, "-STOP");
                std::thread::sleep(Duration::from_millis(100 + draw(400)));
                signal(pid, "-CONT");
                stopped += 1;
            }
            2 => {
                // The daemon stopped for a while: everyone waits, nobody is lost.
                signal(w.daemon.id(), "-STOP");
                std::thread::sleep(Duration::from_millis(100 + draw(400)));
                signal(w.daemon.id(), "-CONT");
                daemon_stops += 1;
            }
            _ => {}
        }
        for (i, (child, bytes)) in children.into_iter().enumerate() {
            let out = child.wait_with_output().unwrap();
            if gone == Some(i) {
                continue;
            }
            verified(&out, &format!("round {round}, client {i}"));
            verified_runs += 1;
            verified_bytes += bytes;
        }
        w.assert_empty();
    }
    eprintln!(
        "churn: {rounds} rounds, {started} processes, {killed} killed, {stopped} stopped, \
         daemon stopped {daemon_stops} times; {verified_runs} verified every byte \
         (about {verified_bytes} bytes written and read back), nothing left booked"
    );
    assert!(verified_runs >= rounds * 2, "too few processes finished");
}

#[test]
fn a_refusal_for_a_limit_or_no_room_is_out_of_memory_to_the_program() {
    // PyTorch frees its cache and retries on CUDA_ERROR_OUT_OF_MEMORY, and raises its
    // OutOfMemoryError; CUDA_ERROR_INVALID_VALUE reads as a bug in the program.
    let contracts = "[process.limited]\nmemory_limit = \"8MiB\"\n\n\
                     [process.hostless]\nhost_limit = \"4MiB\"\n";
    let w = World::with_contracts("oom-errors", 64, Some(contracts));
    for (name, size, buffers) in [("limited", "8MiB", "2"), ("hostless", "24MiB", "3")] {
        let out = w
            .client(64, &["--buffers", buffers, "--size", size, "--rounds", "1"])
            .env("GPUSWAP_TENANT_NAME", name)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains("cuMemAlloc") && stderr.contains("CUDA_ERROR_OUT_OF_MEMORY"),
            "{name}: {stderr}"
        );
    }
    w.assert_empty();
}

#[test]
fn a_socket_folder_others_may_write_in_is_refused_by_the_daemon_and_its_clients() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new("open-folder", 64);
    // Anyone could have put a socket of theirs there, or could replace the daemon's.
    std::fs::set_permissions(&w.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = w
        .client(64, &["--buffers", "1", "--size", "4MiB", "--rounds", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("writable by others") && stderr.contains("cuInit"),
        "{stderr}"
    );
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["daemon", "--quiet", "--vram", "64MiB", "--socket"])
        .arg(w.dir.join("second.sock"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemon.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = daemon.kill();
            panic!("the daemon listens in a folder others may write in");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = daemon.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("writable by others"),
        "{stderr}"
    );
}

#[test]
fn a_stopped_daemon_is_given_up_after_the_timeout_and_holds_nothing_when_continued() {
    let w = World::new("daemon-stopped", 64);
    let args = [
        "--buffers",
        "2",
        "--size",
        "8MiB",
        "--rounds",
        "2",
        "--hold-ms",
        "1000",
    ];
    let client = w
        .client(64, &args)
        .env("GPUSWAP_DAEMON_TIMEOUT", "300ms")
        .spawn()
        .unwrap();
    w.wait_buffers(3);
    let daemon = w.daemon.id().to_string();
    let signal = |name: &str| {
        let sent = Command::new("kill").args([name, &daemon]).status().unwrap();
        assert!(sent.success());
    };
    signal("-STOP");
    let out = client.wait_with_output().unwrap();
    signal("-CONT");
    verified(&out, "orphan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "lost the gpuswap daemon (its process, pid {daemon}, has stopped"
        )),
        "{stderr}"
    );
    // Given up, the connection is shut: the daemon, continued, frees the process's books.
    w.assert_empty();
}

#[test]
fn a_forked_child_does_not_keep_its_dead_parents_memory_booked() {
    let w = World::new("fork", 64);
    // The child lives 20 s, as a DataLoader worker outlives a crashed trainer.
    let args = [
        "--buffers",
        "2",
        "--size",
        "8MiB",
        "--hold-ms",
        "20000",
        "--fork-child-ms",
        "20000",
    ];
    let mut parent = w.client(64, &args).spawn().unwrap();
    // Read on (the parent must not write into a closed pipe).
    let mut progress =
        std::io::BufRead::lines(std::io::BufReader::new(parent.stderr.take().unwrap()));
    let child: u32 = progress
        .find_map(|line| {
            line.unwrap()
                .strip_prefix("e2e-client: forked child ")?
                .parse()
                .ok()
        })
        .expect("the client forks");
    // The child holds the pipe as long as it lives.
    std::thread::spawn(move || progress.for_each(drop));
    w.wait_buffers(3);
    parent.kill().unwrap();
    parent.wait().unwrap();
    // Only the child holds a copy of the connection now: closed at the fork, it does
    // not keep the parent booked.
    let empty = std::panic::catch_unwind(|| w.assert_empty());
    let _ = Command::new("kill")
        .args(["-KILL", &child.to_string()])
        .status();
    empty.unwrap();
}

/// A daemon at its connection cap refuses a process as it connects; the process says
/// why (the daemon's reason), not "Broken pipe", and runs no CUDA call managed.
#[test]
fn a_process_beyond_the_connection_cap_is_told_why() {
    let w = World::with_daemon_args("cap", 64, None, &["--max-connections", "1"]);
    // One connection that says nothing holds the only place (until its hello deadline).
    let _holder = std::os::unix::net::UnixStream::connect(w.socket()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let out = w
        .client(64, &["--buffers", "1", "--size", "2MiB", "--rounds", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("at most 1 connections") && !stderr.contains("Broken pipe"),
        "{stderr}"
    );
}
