//! Issue 42, item 2: a contract goes to the processes the kernel vouches for (their uid
//! and cgroup), never to one that merely claims its name; `--contracts-dir` is read
//! again as jobs come and go; `gpuswap daemon --check-contracts` says who may take what.

mod binary;
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use binary::{gpuswap, stderr};
use common::{World, verified};

/// The stand-in's client run under `name`, once, to its end.
fn run_as(w: &World, name: &str) {
    let args = ["--buffers", "1", "--size", "4MiB", "--rounds", "1"];
    let out = w
        .client(64, &args)
        .env("GPUSWAP_TENANT_NAME", name)
        .output()
        .unwrap();
    verified(&out, name);
}

/// The daemon's log once it has a line containing `what`, and that line.
fn wait_log(w: &World, what: &str) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = w.log();
        if let Some(line) = log.lines().find(|l| l.contains(what)) {
            return (line.to_owned(), log);
        }
        assert!(Instant::now() < deadline, "no {what:?} in:\n{log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The daemon's log line of the (first) process that claimed `name`.
fn connect_line(w: &World, name: &str) -> String {
    wait_log(w, &format!("{name:?}; ")).0
}

/// This process's uid and (first) cgroup, which the client it starts inherits.
fn own_identity() -> (u32, String) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    let cgroups = gpuswap_daemon::identity::cgroups_of(std::process::id());
    (uid, cgroups[0].clone())
}

/// A folder of this test's own (mode 0755: the daemon refuses one others may write).
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuswap-identity-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[test]
fn a_contract_bound_to_a_uid_or_cgroup_is_not_taken_by_a_process_claiming_its_name() {
    let (uid, cgroup) = own_identity();
    let dir = folder("bound");
    let file = dir.join("contracts.toml");
    std::fs::write(
        &file,
        format!(
            "[process.by_uid]\nuids = [{}]\nvram_guarantee = \"8MiB\"\n\n\
             [process.by_cgroup]\ncgroup = \"/gpuswap-test.slice/job_1\"\n\
             vram_guarantee = \"8MiB\"\n\n\
             [process.mine]\nuids = [{uid}]\ncgroup = \"{cgroup}\"\nvram_guarantee = \"8MiB\"\n",
            uid + 1
        ),
    )
    .unwrap();
    let w = World::logged("identity-bound", 64, &["--contracts", &path_arg(&file)]);
    run_as(&w, "by_uid");
    run_as(&w, "by_cgroup");
    run_as(&w, "mine");
    let line = connect_line(&w, "by_uid");
    assert!(
        line.contains("WARN")
            && line.contains(&format!(
                "not its to take: uid {uid} is not among its uids [{}]",
                uid + 1
            ))
            && line.ends_with("; the default"),
        "{line}"
    );
    let line = connect_line(&w, "by_cgroup");
    assert!(
        line.contains(&format!(
            "the process is in cgroup {cgroup}, not under /gpuswap-test.slice/job_1"
        )),
        "{line}"
    );
    let line = connect_line(&w, "mine");
    assert!(
        line.contains("INFO") && line.contains("its contract [process.NAME] matched"),
        "{line}"
    );
    w.assert_empty();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A job's file written just before its process starts is there for its hello (no
/// wait for the next look at the folder); one removed is gone for the next process;
/// SIGHUP reads the folder again.
#[test]
fn the_contracts_dir_follows_its_jobs() {
    let (uid, cgroup) = own_identity();
    let dir = folder("dir");
    let w = World::logged("identity-dir", 64, &["--contracts-dir", &path_arg(&dir)]);
    let job = dir.join("job_7.toml");
    let staged = dir.join(".job_7.toml.tmp");
    std::fs::write(
        &staged,
        format!(
            "[process.job_7]\nuids = [{uid}]\ncgroup = \"{cgroup}\"\nvram_guarantee = \"4MiB\"\n"
        ),
    )
    .unwrap();
    std::fs::rename(&staged, &job).unwrap();
    run_as(&w, "job_7");
    let line = connect_line(&w, "job_7");
    assert!(
        line.contains("matched (") && line.contains("job_7.toml"),
        "{line}"
    );
    std::fs::remove_file(&job).unwrap();
    run_as(&w, "job_7");
    let (_, log) = wait_log(&w, "\"job_7\"; no contracts");
    assert_eq!(log.matches("0 file(s), 0 table(s)").count(), 2, "{log}");
    let reads = |log: &str| log.matches("contracts read from").count();
    let before = reads(&w.log());
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &w.daemon.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while reads(&w.log()) == before {
        assert!(
            Instant::now() < deadline,
            "SIGHUP read nothing:\n{}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Still serving: SIGHUP did not end it.
    run_as(&w, "after_hangup");
    connect_line(&w, "after_hangup");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_contracts_dir_others_may_write_in_is_refused() {
    let dir = folder("loose");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.join("d.sock");
    let out = gpuswap(&[
        "daemon",
        "--socket",
        &path_arg(&socket),
        "--contracts-dir",
        &path_arg(&dir),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("may be written by its group or others (mode 777)"),
        "{}",
        stderr(&out)
    );
    assert!(!socket.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_contracts_says_who_may_take_what_and_names_mistakes() {
    let dir = folder("check");
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "[process.slurm_job_42]\nuids = [1001]\ncgroup = \"/system.slice/slurmstepd.scope/job_42\"\n\
         vram_guarantee = \"10GiB\"\n\n[process.server]\npriority_class = 1\n",
    )
    .unwrap();
    let out = gpuswap(&["daemon", "--check-contracts", &path_arg(&good)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("good.toml: 2 contract(s)"), "{text}");
    assert!(
        text.contains(
            "[process.\"slurm_job_42\"] guarantee 10.0 GiB: to processes of uid 1001 in cgroup \
             /system.slice/slurmstepd.scope/job_42 that claim the name \"slurm_job_42\""
        ),
        "{text}"
    );
    assert!(
        text.contains("[process.\"server\"] class 1: to processes of the daemon's own uid"),
        "{text}"
    );
    for (body, expected) in [
        (
            "[process.a]\nuids = [1, \"x\"]\n",
            "bad.toml: process.a.uids (line 2): expected a list of one or more uids",
        ),
        (
            "[process.a]\ncgroup = \"job_42\"\n",
            "bad.toml: process.a.cgroup (line 2): expected an absolute cgroup path",
        ),
        ("[process.a]\nweigth = 3\n", "unknown field `weigth`"),
        ("[process.a\n", "bad.toml: TOML parse error at line 1"),
    ] {
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, body).unwrap();
        let out = gpuswap(&["daemon", "--check-contracts", &path_arg(&bad)]);
        assert_eq!(out.status.code(), Some(2), "{body}");
        assert!(stderr(&out).contains(expected), "{body}: {}", stderr(&out));
        assert!(out.stdout.is_empty());
    }
    // The mode and --vram given are checked against, as the daemon would.
    let out = gpuswap(&[
        "daemon",
        "--vram",
        "8GiB",
        "--check-contracts",
        &path_arg(&good),
    ]);
    assert!(
        stderr(&out)
            .contains("vram_guarantee (line 4): 10.0 GiB is more than the --vram of 8.0 GiB"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
