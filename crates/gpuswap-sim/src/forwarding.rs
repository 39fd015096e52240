//! What PILOT's front end adds to each CUDA call it forwards (`../shared/spec/pilot.md`).
//!
//! PILOT's front end is an `LD_PRELOAD` library that overrides the CUDA runtime and
//! forwards the app's calls over a UNIX socket to its back-end daemon, the only process
//! the CUDA runtime sees; the daemon's proxy thread makes the call on the app's behalf.
//! A call returns a result the app waits for, so each forwarded launch and
//! synchronization costs the app a socket round trip on its host thread, besides the
//! runtime's own enqueue. An app of few long kernels hides it; one of many short,
//! synchronized kernels (Rodinia gaussian: two launches and two synchronizations per
//! pivot row) pays it at every call.
//!
//! Not modelled: allocations and copies are forwarded too, but an app makes few of them;
//! the daemon's hand-offs between its threads (the scheduling thread, a vGPU's proxy
//! thread), which PILOT does not time.

/// One round trip over a UNIX domain socket between two processes: 4.6 us, the median
/// of a million 32-byte ping-pongs on an Intel i7-12650H with both processes pinned and
/// at real-time priority ("The kernel tax", riyaneel.github.io/posts/kernel-tax: four
/// user-kernel crossings per round trip). A lower bound for PILOT's daemon, whose threads are neither pinned nor
/// real-time and hand each call on; unconfirmed for the V100 testbed's host.
pub const SOCKET_ROUND_TRIP_NS: u64 = 4_611;

/// What a forwarded call adds to the app's wait where PILOT's runtime carries its calls
/// (`pilot`), nothing elsewhere.
pub fn call_ns(pilot: bool) -> u64 {
    if pilot { SOCKET_ROUND_TRIP_NS } else { 0 }
}
