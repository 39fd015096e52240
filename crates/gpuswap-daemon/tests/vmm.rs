//! A program's own virtual memory management under the interposer (issue 41, item 1),
//! end to end on the CUDA stand-in: the daemon runs on a thread of this test, the
//! stand-in's expandable-segments-like client (`gpuswap-vmm-client`: handles created,
//! mapped whole, in part and at two addresses, unmapped and released as it grows and
//! shrinks, and a torch_memory_saver-like pause and resume) runs under the interposer
//! as a real process, beside a `cuMemAlloc` client. Every byte is verified at every
//! address, and the daemon's books equal the driver's memory after each call.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use gpuswap_core::MIB;
use gpuswap_daemon::observe;
use gpuswap_wire::{Snapshot, TenantRow};

mod common;
#[path = "common/serving.rs"]
mod serving;
#[path = "common/standin.rs"]
mod standin;
use serving::{Daemon, start};
use standin::{World, verified};

/// The daemon's chunk size here: a 6 MiB segment is a chunk of 4 MiB and one of 2.
const CHUNK_BYTES: u64 = 4 * MIB;

/// One test's world: 64 MiB of VRAM in chunks of [`CHUNK_BYTES`].
fn world(name: &str) -> World {
    let mut w = World::new(&format!("vmm-{name}"), 64);
    w.config.chunk_bytes = CHUNK_BYTES;
    w
}

impl World {
    /// `program` (a stand-in program) under the interposer as tenant `name`.
    fn run(&self, program: PathBuf, name: &str, args: &[&str]) -> Command {
        let mut c = self.command(program, args, "64MiB");
        c.env("GPUSWAP_TENANT_NAME", name);
        c
    }
}

/// The daemon, then the `cuMemAlloc` program with `alloc_args` (split at spaces) as
/// tenant `alloc`, and 300 ms later the VMM program with `vmm_args` as tenant `vmm`.
fn start_pair(w: &World, alloc_args: &str, vmm_args: &str) -> (Daemon, Child, Child) {
    let daemon = start(w.config.clone());
    let alloc_args: Vec<&str> = alloc_args.split(' ').collect();
    let alloc = w
        .run(gpuswap_standin::client(), "alloc", &alloc_args)
        .spawn();
    std::thread::sleep(Duration::from_millis(300));
    let vmm_args: Vec<&str> = vmm_args.split(' ').collect();
    let vmm = w
        .run(gpuswap_standin::vmm_client(), "vmm", &vmm_args)
        .spawn();
    (daemon, alloc.unwrap(), vmm.unwrap())
}

fn tenant<'a>(snap: &'a Snapshot, name: &str) -> Option<&'a TenantRow> {
    snap.tenants.iter().find(|t| t.name == name)
}

/// The program's JSON line, after checking that it verified every byte and that the
/// interposer managed all its memory.
fn json_of(out: &Output, who: &str) -> serde_json::Value {
    let json = verified(out, who);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("not managed"), "{who}: {stderr}");
    json
}

/// Both programs at once need 38 + 38 MiB of 64: the daemon moves chunks of each to
/// host memory and back, the VMM program's (its 6 MiB handles: chunks of 4 and 2 MiB)
/// both ways, while it maps them whole, in part and at two addresses, shrinks, grows,
/// and pauses and resumes; every byte verifies at every address, and nothing stays
/// booked.
#[test]
fn an_expandable_allocator_beside_a_cumemalloc_program_oversubscribes_and_keeps_every_byte() {
    let w = world("pair");
    let alloc = "--buffers 3 --size 12MiB --rounds 6 --hold-ms 150";
    let vmm = "--rounds 6 --hold-ms 150 --pause-resume";
    let (daemon, alloc, mut vmm) = start_pair(&w, alloc, vmm);
    let (mut evicted, mut returned) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    while vmm.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the VMM program did not finish");
        if let Ok(snap) = observe(&daemon.socket)
            && let Some(t) = tenant(&snap, "vmm")
        {
            (evicted, returned) = (evicted.max(t.evicted_bytes), returned.max(t.returned_bytes));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let json = json_of(&vmm.wait_with_output().unwrap(), "vmm");
    assert_eq!(json["paused"], true);
    json_of(&alloc.wait_with_output().unwrap(), "alloc");
    assert!(
        evicted > 0,
        "none of the VMM program's memory moved to host memory"
    );
    assert!(
        returned > 0,
        "none of the VMM program's memory came back to VRAM"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !observe(&daemon.socket).is_ok_and(|s| s.tenants.is_empty() && s.vram_used_bytes == 0) {
        assert!(Instant::now() < deadline, "the daemon still holds memory");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// After every call of the VMM program (each create, map, unmap and release, and its
/// pause and resume), its tenant holds in the daemon's books what its handles hold, and
/// the daemon's VRAM for it is what the driver charges it, beside a `cuMemAlloc`
/// program that its growth evicts from.
#[test]
fn the_daemons_books_equal_the_drivers_memory_after_every_call() {
    let w = world("books");
    let alloc = "--buffers 2 --size 12MiB --rounds 2 --hold-ms 1500";
    let vmm = "--segments 8 --rounds 2 --pause-resume --checkpoints";
    let (daemon, alloc, mut vmm) = start_pair(&w, alloc, vmm);
    let pid = vmm.id();
    let mut stdin = vmm.stdin.take().unwrap();
    let lines = BufReader::new(vmm.stdout.take().unwrap()).lines();
    let mut checks = 0;
    for line in lines {
        let line = line.unwrap();
        let Some(rest) = line.strip_prefix("checkpoint ") else {
            assert!(line.starts_with("{\"ok\":true"), "{line}");
            break;
        };
        let (step, held) = rest.split_once(' ').unwrap();
        let held: u64 = held.parse().unwrap();
        // Equal once no move of the daemon's return path is under way.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let snap = observe(&daemon.socket).unwrap();
            let t = tenant(&snap, "vmm").expect("the VMM program is a tenant");
            let books = (t.vram_bytes + t.host_bytes, t.vram_bytes);
            let driver = (held, w.standin_vram(pid));
            if books == driver {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "after {step}: the daemon books {books:?} (all, VRAM), the program holds \
                 {driver:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        checks += 1;
        writeln!(stdin, "go").unwrap();
    }
    drop(stdin);
    let out = vmm.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(checks >= 40, "only {checks} checkpoints");
    json_of(&alloc.wait_with_output().unwrap(), "alloc");
}

/// Exporting a managed handle is refused, with a message saying why: another process
/// that mapped its memory could not follow its moves.
#[test]
fn an_export_of_a_managed_handle_is_refused_with_a_message() {
    let w = world("export");
    let daemon = start(w.config.clone());
    let args = ["--rounds", "2", "--export"];
    let out = w.run(gpuswap_standin::vmm_client(), "vmm", &args).output();
    let out = out.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("export answered 801"), "{stderr}");
    assert!(
        stderr.contains("cuMemExportToShareableHandle is not managed by gpuswap"),
        "{stderr}"
    );
    drop(daemon);
}
