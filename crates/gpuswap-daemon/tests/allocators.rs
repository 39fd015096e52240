//! The allocators beside `cuMemAlloc` end to end on the CUDA stand-in (issue 41):
//! stream-ordered pools with frees in stream order, managed memory, a pitched 2D copy
//! and IPC between two processes. Each program runs under the interposer beside a
//! `cuMemAlloc` program that oversubscribes the daemon's VRAM with it, so chunks move
//! both ways while both verify every byte; at each step of the program the daemon's
//! accounting of it equals the stand-in's VRAM use by its process (its chunks in VRAM,
//! its managed memory at its allocated size, its pinned buffers).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Output};
use std::time::{Duration, Instant};

use gpuswap_core::MIB;
use gpuswap_daemon::observe;
use gpuswap_wire::{Snapshot, TenantRow};

mod common;
#[path = "common/serving.rs"]
mod serving;
#[path = "common/standin.rs"]
mod standin;
use serving::start;
use standin::{World, verified};

/// The stand-in's VRAM: far above the daemon's, so that only the daemon's placements
/// decide what is in VRAM.
const STANDIN_VRAM: &str = "256MiB";

impl World {
    /// The `cuMemAlloc` program beside: two 8 MiB buffers checked for a few seconds.
    fn beside(&self) -> Child {
        let args = [
            "--buffers",
            "2",
            "--size",
            "8MiB",
            "--rounds",
            "12",
            "--hold-ms",
            "150",
        ];
        self.command(gpuswap_standin::client(), &args, STANDIN_VRAM)
            .spawn()
            .unwrap()
    }
}

/// What the daemon counts of a tenant as VRAM the stand-in charges: its chunks in
/// VRAM, its managed memory at its size, its pinned buffers.
fn counted(row: &TenantRow) -> u64 {
    row.vram_bytes + row.managed_bytes + row.pinned_bytes
}

/// A program's stderr lines, until one cannot be read.
type Lines = std::iter::MapWhile<
    std::io::Lines<BufReader<ChildStderr>>,
    fn(std::io::Result<String>) -> Option<String>,
>;

/// A program run step by step (`--steps`): each step is checked, then let go on.
struct Stepped {
    child: Child,
    steps: Lines,
    log: Vec<String>,
}

impl Stepped {
    fn spawn(mut command: Command) -> Stepped {
        let mut child = command.spawn().unwrap();
        let steps = BufReader::new(child.stderr.take().unwrap())
            .lines()
            .map_while(Result::ok as fn(_) -> _);
        Stepped {
            child,
            steps,
            log: Vec::new(),
        }
    }

    /// Waits for step `name`, checks that the daemon's snapshot soon satisfies `check`
    /// (given the program's row, none once it holds nothing, and the stand-in's VRAM
    /// for its process), then lets it go on.
    fn at(
        &mut self,
        w: &World,
        socket: &Path,
        name: &str,
        check: impl Fn(Option<&TenantRow>, u64) -> bool,
    ) -> Snapshot {
        let snap = self.reach(w, socket, name, check);
        self.go_on();
        snap
    }

    /// [`Stepped::at`] without letting the program go on ([`Stepped::go_on`]).
    fn reach(
        &mut self,
        w: &World,
        socket: &Path,
        name: &str,
        check: impl Fn(Option<&TenantRow>, u64) -> bool,
    ) -> Snapshot {
        let want = format!("pool-client: step {name}");
        loop {
            let Some(line) = self.steps.next() else {
                panic!("no step {name}: {}", self.log.join("\n"));
            };
            self.log.push(line.clone());
            if line == want {
                break;
            }
        }
        let pid = self.child.id();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let standin = w.standin_vram(pid);
            if let Ok(snap) = observe(socket) {
                let row = snap.tenants.iter().find(|t| t.pid == pid);
                if check(row, standin) && standin == w.standin_vram(pid) {
                    break snap;
                }
                assert!(
                    Instant::now() < deadline,
                    "at step {name}: stand-in {standin} bytes, daemon {row:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lets the program go on from the step it waits at.
    fn go_on(&mut self) {
        writeln!(self.child.stdin.as_mut().unwrap()).unwrap();
    }

    /// Waits for the end; returns the output (stderr as logged).
    fn finish(mut self) -> Output {
        self.log.extend(self.steps.by_ref());
        let mut out = self.child.wait_with_output().unwrap();
        out.stderr = self.log.join("\n").into_bytes();
        out
    }
}

/// The row's books match the stand-in, and it holds `bytes` in all in chunks.
fn books(row: Option<&TenantRow>, standin: u64, bytes: u64) -> bool {
    row.is_some_and(|r| counted(r) == standin && r.vram_bytes + r.host_bytes == bytes)
}

/// Nothing is left of the program, on either side.
fn nothing(row: Option<&TenantRow>, standin: u64) -> bool {
    standin == 0 && row.is_none_or(|r| counted(r) + r.host_bytes == 0)
}

/// One test's scene: its world, its daemon (24 MiB of VRAM) and the `cuMemAlloc`
/// program beside, its buffers allocated.
struct Scene {
    w: World,
    d: serving::Daemon,
    beside: Child,
}

impl Scene {
    fn new(name: &str) -> Scene {
        let w = World::new(name, 24);
        let d = start(w.config.clone());
        let beside = w.beside();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !observe(&d.socket).is_ok_and(|s| s.tenants.iter().any(|t| t.buffers >= 2)) {
            assert!(
                Instant::now() < deadline,
                "the program beside never allocated"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Scene { w, d, beside }
    }

    /// The allocators' client with `args` (split at spaces), step by step.
    fn client(&self, args: &str) -> Stepped {
        let mut args: Vec<&str> = args.split(' ').collect();
        args.push("--steps");
        Stepped::spawn(
            self.w
                .command(gpuswap_standin::pool_client(), &args, STANDIN_VRAM),
        )
    }

    /// At step `name` of `p`, see [`Stepped::at`].
    fn at(
        &self,
        p: &mut Stepped,
        name: &str,
        check: impl Fn(Option<&TenantRow>, u64) -> bool,
    ) -> Snapshot {
        p.at(&self.w, &self.d.socket, name, check)
    }

    /// The program beside verified every byte too.
    fn finish(self) {
        let out = self.beside.wait_with_output().unwrap();
        verified(&out, "the cuMemAlloc program");
    }
}

/// Stream-ordered allocations: 4 buffers of 8 MiB, by turns from the device's pool and
/// a pool of the program's, are managed allocations the daemon places and moves
/// (beside 18 MiB of the other program's, in 24 MiB of VRAM); half are copied into the
/// others and freed in stream order behind the copies, which must have read them whole.
#[test]
fn stream_ordered_pools_are_managed_and_free_in_stream_order() {
    let s = Scene::new("pools");
    let mut p = s.client("--mode pools --buffers 4 --size 8MiB --rounds 3 --hold-ms 150");
    let snap = s.at(&mut p, "allocated", |r, vram| books(r, vram, 32 * MIB));
    assert!(
        snap.tenants.iter().map(|t| t.host_bytes).sum::<u64>() > 0,
        "nothing was evicted: {snap:?}"
    );
    s.at(&mut p, "freed-in-stream-order", |r, vram| {
        books(r, vram, 16 * MIB)
    });
    // The room the frees made brings evicted chunks back: moves went both ways.
    let snap = s.at(&mut p, "freed", nothing);
    let (evicted, returned) = snap.tenants.iter().fold((0, 0), |(e, r), t| {
        (e + t.evicted_bytes, r + t.returned_bytes)
    });
    assert!(evicted > 0 && returned > 0, "{snap:?}");
    verified(&p.finish(), "pool client");
    s.finish();
}

/// Managed memory: 8 MiB of it beside two 8 MiB buffers, in 24 MiB of VRAM beside the
/// other program's 18: the driver pages it, the daemon counts it at its size and moves
/// only the buffers around it, and gives out that much less VRAM.
#[test]
fn managed_memory_is_counted_and_never_moved() {
    let s = Scene::new("managed");
    let mut p = s.client("--mode managed --buffers 2 --size 8MiB --rounds 3 --hold-ms 150");
    let snap = s.at(&mut p, "allocated", |r, vram| {
        books(r, vram, 16 * MIB) && r.is_some_and(|r| r.managed_bytes == 8 * MIB)
    });
    // The budget shrank by the managed memory (to what is left beside it, or to what
    // the buffers already hold in VRAM, which nothing moves out for the budget alone).
    assert!(snap.vram_budget_bytes < 24 * MIB, "{snap:?}");
    s.at(&mut p, "freed", nothing);
    verified(&p.finish(), "managed client");
    s.finish();
}

/// A pitched allocation of 8 MiB of 1000-byte rows (512-byte-aligned pitch) is a managed
/// allocation, written and read back with 2D copies of another pitch while it moves.
#[test]
fn pitched_memory_is_managed_and_copies_in_2d() {
    let s = Scene::new("pitch");
    let mut p = s.client("--mode pitch --size 8MiB --rounds 3 --hold-ms 150");
    // 8 MiB / 1000 = 8388 rows of a 1024-byte pitch, whole granules: 10 MiB.
    s.at(&mut p, "allocated", |r, vram| books(r, vram, 10 * MIB));
    s.at(&mut p, "freed", nothing);
    verified(&p.finish(), "pitch client");
    s.finish();
}

/// IPC of a managed buffer between two processes under gpuswap: the exporter's 8 MiB
/// buffer is pinned in VRAM at its export and counted there once (pinned, as `top`
/// shows it), never at the importer; the exporter then allocates 16 MiB more beside the
/// other program's 16, in 24 MiB of VRAM, and the daemon evicts around the pinned
/// buffer, never moving it: the importer, which opened it before, reads the exporter's
/// half after the evictions and writes its own, and both verify every byte. After the
/// free, the handle opens nothing.
#[test]
fn ipc_of_a_managed_buffer_pins_it_at_the_exporter_only() {
    let s = Scene::new("ipc");
    let mut exporter = s.client("--mode export --buffers 2 --size 8MiB --rounds 3 --hold-ms 150");
    s.at(&mut exporter, "allocated", |r, vram| {
        books(r, vram, 8 * MIB)
    });
    // Pinned: out of the movable chunks, counted once as pinned, charged as before.
    let pinned = |r: Option<&TenantRow>, vram: u64, movable: u64| {
        books(r, vram, movable) && r.is_some_and(|r| r.pinned_bytes == 8 * MIB)
    };
    exporter.reach(&s.w, &s.d.socket, "exported", |r, vram| pinned(r, vram, 0));
    let handle = handle_line(&mut exporter);
    let mut importer = s.client(&format!("--mode import --handle {handle} --size 8MiB"));
    let exporter_pid = exporter.child.id();
    let snap = importer.reach(&s.w, &s.d.socket, "opened", |r, vram| {
        vram == 0 && r.is_none_or(|r| counted(r) + r.host_bytes == 0)
    });
    // The exporter waits at its step: its books are as they were, pinned.
    let row = snap.tenants.iter().find(|t| t.pid == exporter_pid);
    let vram = s.w.standin_vram(exporter_pid);
    assert!(pinned(row, vram, 0), "stand-in {vram}: {snap:?}");
    // 8 MiB pinned, 16 movable beside the other program's 16, in 24: evictions.
    exporter.go_on();
    let snap = exporter.reach(&s.w, &s.d.socket, "oversubscribed", |r, vram| {
        pinned(r, vram, 16 * MIB)
    });
    assert!(
        snap.tenants.iter().map(|t| t.host_bytes).sum::<u64>() > 0,
        "nothing was evicted: {snap:?}"
    );
    // The importer reads the exporter's half after the evictions and writes its own.
    importer.go_on();
    s.at(&mut importer, "closed", nothing);
    verified(&importer.finish(), "importer");
    exporter.go_on();
    exporter.reach(&s.w, &s.d.socket, "freed", nothing);
    // The exporter lives on at its last step: the freed buffer's handle opens nothing.
    assert_stale(&s.w, &handle);
    exporter.go_on();
    verified(&exporter.finish(), "exporter");
    s.finish();
}

/// An exporter that forked a child (which makes no CUDA call, as a DataLoader worker)
/// and then died: the child's copy of the exports' socket is closed at the fork, so the
/// exporter's name is no longer bound and an importer of its handle is refused at once
/// (`CUDA_ERROR_INVALID_HANDLE`) instead of waiting for an answer nobody gives.
#[test]
fn a_forked_child_does_not_keep_a_dead_exporters_handles_open() {
    let s = Scene::new("ipc-fork");
    let mut exporter =
        s.client("--mode export --buffers 1 --size 8MiB --rounds 1 --fork-child-ms 60000");
    s.at(&mut exporter, "allocated", |r, vram| {
        books(r, vram, 8 * MIB)
    });
    exporter.reach(&s.w, &s.d.socket, "exported", |r, vram| {
        books(r, vram, 0) && r.is_some_and(|r| r.pinned_bytes == 8 * MIB)
    });
    let handle = handle_line(&mut exporter);
    let forked = exporter.log.iter().find_map(|line| {
        line.strip_prefix("pool-client: forked child ")?
            .parse::<u32>()
            .ok()
    });
    // Killed at the end, whatever the test finds.
    let _child = Killed(forked.expect("the exporter forks"));
    let name = format!("@gpuswap-ipc-{}", exporter.child.id());
    // Bound while /proc/net/unix lists a socket of exactly that name (its last column).
    let bound = || {
        std::fs::read_to_string("/proc/net/unix")
            .unwrap()
            .lines()
            .any(|line| line.split_whitespace().last() == Some(name.as_str()))
    };
    assert!(bound(), "the exporter serves {name}");
    exporter.child.kill().unwrap();
    exporter.child.wait().unwrap();
    // The kernel may release a killed process's last socket a moment after its end;
    // with the child's copy open, the name would stay bound for the child's minute.
    let deadline = Instant::now() + Duration::from_secs(5);
    while bound() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !bound(),
        "{name} is still bound 5 s after its exporter died"
    );
    let started = Instant::now();
    assert_stale(&s.w, &handle);
    // Refused by the kernel, not after the importer's 10 s of patience.
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(8), "{waited:?}");
    s.finish();
}

/// Opening `handle` fails as a stale handle's open must: exit status 2 (a CUDA error),
/// `CUDA_ERROR_INVALID_HANDLE`.
fn assert_stale(w: &World, handle: &str) {
    let out = w
        .command(
            gpuswap_standin::pool_client(),
            &["--mode", "import", "--handle", handle, "--size", "8MiB"],
            STANDIN_VRAM,
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("CUDA_ERROR_INVALID_HANDLE"), "{stderr}");
}

/// A process killed when this is dropped.
struct Killed(u32);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .status();
    }
}

/// The handle line an exporter printed before its step.
fn handle_line(exporter: &mut Stepped) -> String {
    let mut line = String::new();
    BufReader::new(exporter.child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let handle = line.trim().strip_prefix("handle ");
    handle.expect("a handle line").to_owned()
}

/// The driver's own IPC handles pass through the interposer: a process outside
/// gpuswap exports a buffer, and one under it opens the export unmanaged and counts
/// nothing (the exporter's memory is not the daemon's).
#[test]
fn the_drivers_own_ipc_handles_pass_through_and_an_import_counts_nothing() {
    let s = Scene::new("ipc-plain");
    let mut plain = s.w.command(
        gpuswap_standin::pool_client(),
        &[
            "--mode",
            "export",
            "--buffers",
            "1",
            "--size",
            "8MiB",
            "--rounds",
            "1",
            "--steps",
        ],
        STANDIN_VRAM,
    );
    plain.env_remove("LD_PRELOAD");
    let mut exporter = Stepped::spawn(plain);
    s.at(&mut exporter, "allocated", |r, vram| {
        r.is_none() && vram == 8 * MIB
    });
    s.at(&mut exporter, "exported", |r, vram| {
        r.is_none() && vram == 8 * MIB
    });
    let handle = handle_line(&mut exporter);
    exporter.reach(&s.w, &s.d.socket, "oversubscribed", |r, vram| {
        r.is_none() && vram == 16 * MIB
    });
    let mut importer = s.client(&format!("--mode import --handle {handle} --size 8MiB"));
    s.at(&mut importer, "opened", |r, vram| {
        vram == 0 && r.is_none_or(|r| counted(r) + r.host_bytes == 0)
    });
    s.at(&mut importer, "closed", nothing);
    verified(&importer.finish(), "importer");
    exporter.go_on();
    s.at(&mut exporter, "freed", nothing);
    verified(&exporter.finish(), "exporter");
    s.finish();
}
