//! Memory that is still held, end to end on the CUDA stand-in: the daemon runs on a
//! thread of this test, and the stand-in's client runs under the interposer as real
//! processes that share the stand-in's VRAM. A frozen tenant is dropped but its memory
//! stays counted until it exits, a restarted daemon adopts what a surviving process
//! declares, and memory a process outside the daemon uses is not given out; every
//! client checks every byte of its buffers.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use gpuswap_core::MIB;
use gpuswap_daemon::observe;
use gpuswap_wire::Snapshot;

mod common;
#[path = "common/serving.rs"]
mod serving;
#[path = "common/standin.rs"]
mod standin;
use serving::start;
use standin::{World, verified};

impl World {
    /// The stand-in's client with `args` on a stand-in of 64 MiB; under the interposer
    /// unless `outside` (then a process the daemon does not know of).
    fn client(&self, args: &[&str], outside: bool) -> Command {
        let mut c = self.command(gpuswap_standin::client(), args, "64MiB");
        if outside {
            c.env_remove("LD_PRELOAD");
        }
        c
    }
}

/// Polls the daemon at `socket` until `done` says yes of its snapshot; returns that
/// snapshot.
fn wait_for(socket: &Path, what: &str, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(snap) = observe(socket)
            && done(&snap)
        {
            return snap;
        }
        assert!(Instant::now() < deadline, "never {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([name, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// A tenant frozen by SIGSTOP does not answer its suspension and is dropped after the
/// answer deadline (30 s), but its process still holds its 34 MiB of VRAM: they stay
/// counted until it exits, and the newcomer that waited lands in the VRAM left and in
/// host memory, verifying every byte, where it used to get out of memory. Continued,
/// the frozen process reconnects and declares its buffers, and finishes verifying every
/// byte of them through the daemon.
#[test]
fn a_frozen_tenants_memory_stays_counted_and_the_newcomer_is_not_refused() {
    let w = World::new("frozen", 64);
    let d = start(w.config.clone());
    let hold = [
        "--buffers",
        "2",
        "--size",
        "16MiB",
        "--rounds",
        "1",
        "--hold-ms",
        "50000",
    ];
    let frozen = w.client(&hold, false).spawn().unwrap();
    wait_for(&d.socket, "the first tenant's buffers", |s| {
        s.tenants.iter().map(|t| t.buffers).sum::<u64>() == 3
    });
    signal(&frozen, "-STOP");
    let args = ["--buffers", "2", "--size", "16MiB", "--rounds", "2"];
    let newcomer = w.client(&args, false).spawn().unwrap();
    let out = newcomer.wait_with_output().unwrap();
    verified(&out, "newcomer");
    let snap = wait_for(&d.socket, "the frozen tenant's memory held", |s| {
        s.held_by_gone_bytes > 0 && s.tenants.is_empty()
    });
    assert_eq!(snap.held_by_gone_bytes, 34 * MIB, "{snap:?}");
    assert_eq!(snap.vram_budget_bytes, 30 * MIB, "{snap:?}");
    signal(&frozen, "-CONT");
    let snap = wait_for(&d.socket, "the continued tenant's buffers declared", |s| {
        s.tenants.iter().map(|t| t.buffers).sum::<u64>() == 3
    });
    assert_eq!(
        (snap.held_by_gone_bytes, snap.vram_used_bytes),
        (0, 34 * MIB),
        "{snap:?}"
    );
    let out = frozen.wait_with_output().unwrap();
    verified(&out, "continued");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("3 buffers declared, 3 adopted"), "{stderr}");
    wait_for(&d.socket, "the memory freed", |s| {
        s.tenants.is_empty() && s.vram_used_bytes == 0 && s.vram_budget_bytes == 64 * MIB
    });
}

/// The daemon restarts under a running process: the process reconnects, declares its
/// three buffers, the new daemon adopts them where they are, and the process's later
/// frees and checks go on through it, every byte verified, nothing left booked.
#[test]
fn a_surviving_process_declares_its_buffers_to_a_restarted_daemon() {
    let w = World::new("restart", 64);
    let first = start(w.config.clone());
    let args = [
        "--buffers",
        "2",
        "--size",
        "8MiB",
        "--rounds",
        "4",
        "--hold-ms",
        "1500",
    ];
    let survivor = w.client(&args, false).spawn().unwrap();
    let socket = first.socket.clone();
    wait_for(&socket, "the buffers", |s| {
        s.tenants.iter().map(|t| t.buffers).sum::<u64>() == 3
    });
    drop(first);
    let _second = start(w.config.clone());
    let snap = wait_for(&socket, "the buffers declared", |s| {
        s.tenants.iter().map(|t| t.buffers).sum::<u64>() == 3
    });
    assert_eq!(snap.vram_used_bytes, 18 * MIB, "{snap:?}");
    let out = survivor.wait_with_output().unwrap();
    verified(&out, "survivor");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("reconnected to the gpuswap daemon: 3 buffers declared, 3 adopted"),
        "{stderr}"
    );
    wait_for(&socket, "nothing booked", |s| {
        s.tenants.is_empty() && s.vram_used_bytes == 0 && s.held_by_gone_bytes == 0
    });
}

/// A process outside the daemon holds 42 MiB of the stand-in's 64: the tenant reports
/// the device's real free memory, so the daemon gives out only the 22 MiB left, and
/// the tenant's 34 MiB land partly in host memory instead of failing out of memory.
#[test]
fn memory_used_outside_the_daemon_is_not_given_out() {
    let w = World::new("outside", 64);
    let d = start(w.config.clone());
    let hold = ["--buffers", "1", "--size", "40MiB", "--hold-ms", "60000"];
    let mut outside = w.client(&hold, true).spawn().unwrap();
    let mut progress =
        std::io::BufRead::lines(std::io::BufReader::new(outside.stderr.take().unwrap()));
    assert!(
        progress.any(|line| line.unwrap().contains("allocated")),
        "the outside process allocates"
    );
    std::thread::spawn(move || progress.for_each(drop));
    let args = [
        "--buffers",
        "2",
        "--size",
        "16MiB",
        "--rounds",
        "2",
        "--hold-ms",
        "1000",
    ];
    let tenant = w.client(&args, false).spawn().unwrap();
    // The budget is what the device has free beside what the tenants hold.
    wait_for(&d.socket, "the budget of the device's room", |s| {
        s.vram_budget_bytes == 22 * MIB
    });
    verified(&tenant.wait_with_output().unwrap(), "tenant");
    outside.kill().unwrap();
    outside.wait().unwrap();
}
