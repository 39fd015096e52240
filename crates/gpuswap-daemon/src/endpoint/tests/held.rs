//! Memory held outside the books: a dropped process's VRAM stays counted until it
//! exits, a reconnecting process's buffers are adopted where they are, and the device's
//! own free memory bounds the budget.

use gpuswap_core::MIB;
use gpuswap_wire::{ClientMsg, DaemonMsg, HeldBuffer, Location, Placement, runs};

use super::{MS, alloc, closes, crowded, endpoint, hello, logs, transmits};
use crate::endpoint::Input;

/// The VRAM and host bytes of a grant's placement, in 2 MiB chunks.
fn split(placement: &[Placement]) -> (u64, u64) {
    let at = |l| {
        placement
            .iter()
            .filter(|r| r.location == l)
            .map(|r| u64::from(r.chunks) * 2 * MIB)
            .sum()
    };
    (at(Location::Vram), at(Location::Host))
}

/// A frozen victim is dropped at the deadline but its process lives: its 12 MiB stay
/// counted, so the allocation that waited for them lands in the 4 MiB left and in host
/// memory, not in VRAM the process still holds; once it exits, its VRAM is free again.
/// (Before, the allocation was placed in VRAM the process still held: on a GPU, out
/// of memory.)
#[test]
fn a_dropped_process_holds_its_vram_until_it_exits() {
    let mut e = crowded(3_600_000 * MS);
    e.hold_until_exit();
    let deadline = 10 * MS + 30_000 * MS;
    e.handle_timeout(deadline);
    assert_eq!(closes(&mut e), [1]);
    let granted = transmits(&mut e);
    let [(2, DaemonMsg::Granted { placement, .. })] = granted.as_slice() else {
        panic!("not granted: {granted:?}")
    };
    assert_eq!(split(placement), (4 * MIB, 8 * MIB));
    let log = logs(&mut e).join("\n");
    assert!(
        log.contains("pid 101 may still hold 12582912 bytes"),
        "{log}"
    );
    e.check_invariants().unwrap();
    let snap = e.snapshot();
    assert_eq!(snap.held_by_gone_bytes, 12 * MIB);
    assert_eq!(snap.vram_budget_bytes, 4 * MIB);
    assert_eq!(e.held_pids().collect::<Vec<_>>(), [101]);
    e.handle(deadline + MS, Input::Exited(101));
    let snap = e.snapshot();
    assert_eq!(
        (snap.held_by_gone_bytes, snap.vram_budget_bytes),
        (0, 16 * MIB)
    );
    assert!(e.held_pids().next().is_none());
    e.check_invariants().unwrap();
}

/// Without a driver that watches processes, a closed tenant's memory is free at once
/// (the memory would otherwise stay counted for ever).
#[test]
fn without_a_watch_a_closed_tenants_memory_is_free_at_once() {
    let mut e = crowded(3_600_000 * MS);
    e.handle_timeout(10 * MS + 30_000 * MS);
    let snap = e.snapshot();
    assert_eq!(
        (snap.held_by_gone_bytes, snap.vram_budget_bytes),
        (0, 16 * MIB)
    );
}

fn held(bytes: u64, chunk_bytes: u64, locations: &[Location]) -> HeldBuffer {
    HeldBuffer {
        bytes,
        chunk_bytes,
        placement: runs(locations.iter().copied()),
    }
}

/// A reconnecting process declares its buffers: each is booked where it is, over the
/// budget too, and answered with an id its frees use; a buffer of another chunk size
/// is not adopted and its VRAM is counted as held by the process until it exits.
#[test]
fn declared_buffers_are_adopted_where_they_are() {
    let mut e = endpoint(16, 3_600_000 * MS);
    e.hold_until_exit();
    hello(&mut e, 0, 1, "a");
    let (v, h) = (Location::Vram, Location::Host);
    let buffers = vec![
        held(6 * MIB, 2 * MIB, &[v, h, v]),
        held(16 * MIB, 2 * MIB, &[v; 8]),
        held(4 * MIB, 4 * MIB, &[v]),
        held(4 * MIB, 2 * MIB, &[v; 3]),
    ];
    e.handle(MS, Input::Frame(1, ClientMsg::Held { buffers }));
    let out = transmits(&mut e);
    let [(1, DaemonMsg::Adopted { buffers })] = out.as_slice() else {
        panic!("not answered: {out:?}")
    };
    assert!(matches!(buffers.as_slice(), [Some(_), Some(_), None, None]));
    e.check_invariants().unwrap();
    let snap = e.snapshot();
    assert_eq!(
        (snap.tenants[0].vram_bytes, snap.tenants[0].host_bytes),
        (20 * MIB, 2 * MIB)
    );
    assert_eq!(snap.held_by_gone_bytes, 8 * MIB);
    assert_eq!(snap.vram_used_bytes, 20 * MIB);
    // The adopted buffer's new id frees it.
    let buffer = buffers[0].unwrap();
    e.handle(3 * MS, Input::Frame(1, ClientMsg::Free { buffer }));
    assert!(closes(&mut e).is_empty());
    assert_eq!(e.snapshot().tenants[0].host_bytes, 0);
    e.check_invariants().unwrap();
}

/// The device's own free memory bounds the budget: what processes outside the daemon
/// use is not given out, and an allocation beyond it starts partly in host memory.
#[test]
fn the_device_report_bounds_the_budget() {
    let mut e = endpoint(16, 3_600_000 * MS);
    hello(&mut e, 0, 1, "a");
    let report = ClientMsg::DeviceMemory {
        free_bytes: 6 * MIB,
        total_bytes: 16 * MIB,
    };
    e.handle(MS, Input::Frame(1, report));
    assert_eq!(e.snapshot().vram_budget_bytes, 6 * MIB);
    alloc(&mut e, 2 * MS, 1, 1, 10 * MIB);
    let out = transmits(&mut e);
    let [(1, DaemonMsg::Granted { placement, .. })] = out.as_slice() else {
        panic!("not granted: {out:?}")
    };
    assert_eq!(split(placement), (6 * MIB, 4 * MIB));
    e.check_invariants().unwrap();
}
