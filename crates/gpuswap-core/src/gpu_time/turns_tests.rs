//! Turns through the manager's interface: who holds, who is parked, what moves at a
//! handover, and when turns end.

use crate::gpu_time::{GpuTime, Idle, Quantum, TurnSettings};
use crate::ids::{RequestId, TenantId};
use crate::protocol::{Action, AllocRequest, Dma, Execution, Purpose};
use crate::{BufferKind, Location, MIB, Manager, ManagerConfig, PolicySettings};

pub(super) const SECOND: u64 = 1_000_000_000;

/// Gpuswap on 100 MiB of VRAM in 2 MiB chunks, turns of `quantum_ns`.
pub(super) fn manager(quantum_ns: u64) -> Manager {
    manager_with(
        GpuTime::Turns(TurnSettings {
            quantum: Quantum::Fixed { ns: quantum_ns },
            handover_after_ns: SECOND,
            always: false,
        }),
        Idle::Keep,
    )
}

/// Gpuswap on 100 MiB of VRAM in 2 MiB chunks, with `gpu_time` and `idle`.
pub(super) fn manager_with(gpu_time: GpuTime, idle: Idle) -> Manager {
    Manager::new(ManagerConfig {
        vram_bytes: 100 * MIB,
        host_bytes: 1 << 40,
        chunk_bytes: 2 * MIB,
        policy: PolicySettings::named("gpuswap"),
        return_interval_ns: 1000 * SECOND,
        seed: 1,
        scheduling: Default::default(),
        gpu_time,
        idle,
    })
}

/// Plays the driver: suspensions drain at once, bulk moves all succeed; returns the
/// actions in order.
pub(super) fn drive(m: &mut Manager, now_ns: u64) -> Vec<Action> {
    let mut seen = Vec::new();
    while let Some(action) = m.poll_action() {
        match &action {
            Action::Execution(Execution::Suspend { tenant, .. }) => {
                m.handle_suspended(*tenant).unwrap();
            }
            Action::Dma(Dma::Copy { copy, .. }) => m.handle_copy_done(*copy).unwrap(),
            Action::Dma(Dma::Batch { copy, .. }) => {
                m.handle_batch_done(*copy, &[], now_ns).unwrap();
            }
            _ => {}
        }
        m.check_invariants().unwrap();
        seen.push(action);
    }
    seen
}

/// Tenant `t` allocates `mib` and starts working at `now_ns`.
pub(super) fn start(m: &mut Manager, t: u32, mib: u64, now_ns: u64) -> Vec<Action> {
    m.handle_gpu_busy(TenantId(t), now_ns);
    let mut seen = drive(m, now_ns);
    m.handle_alloc(AllocRequest {
        request: RequestId(u64::from(t)),
        tenant: TenantId(t),
        bytes: mib * MIB,
        kind: BufferKind::Device,
        priority: None,
        chunk_priorities: Vec::new(),
    });
    seen.extend(drive(m, now_ns));
    seen
}

pub(super) fn moved_bytes(actions: &[Action], to: Location) -> u64 {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Dma(Dma::Batch { moves, .. }) => Some(
                moves
                    .iter()
                    .filter(|m| m.to == to)
                    .map(|m| m.bytes)
                    .sum::<u64>(),
            ),
            _ => None,
        })
        .sum()
}

#[test]
fn a_pair_that_does_not_fit_takes_turns_and_moves_only_the_overflow() {
    let mut m = manager(2 * SECOND);
    let (a, b) = (TenantId(0), TenantId(1));
    start(&mut m, 0, 60, 0);
    assert_eq!(m.holder(), None, "alone, a fits: no turns");
    let actions = start(&mut m, 1, 60, 1);
    // b's demand makes 120 MiB of 100: a, first to ask, holds; b is parked and its
    // overflow starts in host memory rather than taking a's VRAM.
    assert_eq!(m.holder(), Some(a));
    assert!(m.parked(b) && !m.parked(a));
    assert_eq!(m.usage(a).vram_bytes, 60 * MIB);
    assert_eq!(m.usage(b).host_bytes, 20 * MIB);
    assert!(
        !actions
            .iter()
            .any(|x| matches!(x, Action::Execution(Execution::Resume { tenant }) if *tenant == b)),
        "b stays parked"
    );
    // The quantum, from b's demand on, ends: the GPU passes to b; only the overflow
    // moves, in bulk.
    assert_eq!(m.poll_timeout(), Some(2 * SECOND + 1));
    m.handle_timeout(2 * SECOND + 1);
    let handover = drive(&mut m, 2 * SECOND + 1_000);
    assert_eq!(m.holder(), Some(b));
    assert_eq!(m.handovers(), 1);
    assert!(m.parked(a) && !m.parked(b));
    assert_eq!(moved_bytes(&handover, Location::Host), 20 * MIB);
    assert_eq!(moved_bytes(&handover, Location::Vram), 20 * MIB);
    assert_eq!(m.usage(b).vram_bytes, 60 * MIB);
    assert_eq!(m.usage(a).vram_bytes, 40 * MIB);
    assert!(handover.iter().any(|x| matches!(
        x,
        Action::Execution(Execution::Suspend { tenant, purpose: Purpose::Turn }) if *tenant == a
    )));
    assert!(matches!(
        handover.last(),
        Some(Action::Execution(Execution::Resume { tenant })) if *tenant == b
    ));
    // b finishes its work and exits: turns end, a runs again with its data back.
    m.handle_tenant_exit(b);
    let end = drive(&mut m, 3 * SECOND);
    assert_eq!(m.holder(), None);
    assert!(!m.parked(a));
    assert_eq!(m.usage(a).vram_bytes, 60 * MIB);
    assert!(
        end.iter()
            .any(|x| matches!(x, Action::Execution(Execution::Resume { tenant }) if *tenant == a))
    );
}

#[test]
fn an_idle_holder_hands_over_early_and_a_pair_that_fits_runs_at_once() {
    let mut m = manager(100 * SECOND);
    let (a, b) = (TenantId(0), TenantId(1));
    start(&mut m, 0, 60, 0);
    start(&mut m, 1, 60, 1);
    assert_eq!(m.holder(), Some(a));
    m.handle_gpu_idle(a, 10);
    drive(&mut m, 10);
    // handover_after (1 s) of idleness, not the 100 s quantum.
    assert_eq!(m.poll_timeout(), Some(10 + SECOND));
    m.handle_timeout(10 + SECOND);
    let handover = drive(&mut m, 10 + SECOND);
    // b gets its data in; then, alone demanding, it fits: turns end, nobody is parked.
    assert_eq!(moved_bytes(&handover, Location::Vram), 20 * MIB);
    assert_eq!(m.usage(b).vram_bytes, 60 * MIB);
    assert_eq!(m.holder(), None);
    assert!(!m.parked(a) && !m.parked(b));
    // Two tenants that fit together never take turns.
    let mut m = manager(SECOND);
    start(&mut m, 0, 40, 0);
    start(&mut m, 1, 40, 0);
    assert_eq!(m.holder(), None);
    assert!(!m.parked(TenantId(0)) && !m.parked(TenantId(1)));
}

#[test]
fn a_failed_bulk_move_is_asked_again_with_only_its_failures() {
    let mut m = manager(SECOND);
    start(&mut m, 0, 60, 0);
    start(&mut m, 1, 60, 1);
    m.handle_timeout(SECOND + 1);
    let Some(Action::Execution(Execution::Suspend { tenant, .. })) = m.poll_action() else {
        panic!("the holder is parked first")
    };
    m.handle_suspended(tenant).unwrap();
    let Some(Action::Dma(Dma::Batch { copy, moves, .. })) = m.poll_action() else {
        panic!("a bulk move out")
    };
    assert_eq!(moves.len(), 10);
    m.handle_batch_done(copy, &[2, 5], SECOND).unwrap();
    let remaps = std::iter::from_fn(|| m.poll_action())
        .take_while(|a| !matches!(a, Action::Dma(Dma::Batch { .. })))
        .count();
    assert_eq!(remaps, 8, "the moved ones are remapped before the retry");
    m.check_invariants().unwrap();
    assert!(
        m.handle_batch_done(copy, &[], SECOND).is_err(),
        "an old batch"
    );
}

/// Demand, allocations, frees, exits and time at random: after every event the books
/// hold, and once no relocation runs, nobody who is busy runs beside the holder.
mod random {
    use super::*;
    use crate::ids::BufferId;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Event {
        Busy(u32),
        Idle(u32),
        Alloc(u32, u64),
        Free(u32, usize),
        Exit(u32),
        Wait(u64),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0..3u32).prop_map(Event::Busy),
            (0..3u32).prop_map(Event::Idle),
            (0..3u32, 1..40u64).prop_map(|(t, mib)| Event::Alloc(t, mib)),
            (0..3u32, 0..4usize).prop_map(|(t, i)| Event::Free(t, i)),
            (0..3u32).prop_map(Event::Exit),
            (1..3000u64).prop_map(|ms| Event::Wait(ms * 1_000_000)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::proptest_cases(64)))]
        #[test]
        fn nobody_busy_runs_beside_the_holder(events in proptest::collection::vec(event(), 1..80)) {
            let mut m = manager(SECOND / 2);
            let mut now = 0u64;
            let mut request = 0u64;
            for e in events {
                match e {
                    Event::Busy(t) => m.handle_gpu_busy(TenantId(t), now),
                    Event::Idle(t) => m.handle_gpu_idle(TenantId(t), now),
                    Event::Alloc(t, mib) => {
                        request += 1;
                        m.handle_alloc(AllocRequest {
                            request: RequestId(request),
                            tenant: TenantId(t),
                            bytes: mib * MIB,
                            kind: BufferKind::Device,
                            priority: None,
                            chunk_priorities: Vec::new(),
                        });
                    }
                    Event::Free(t, i) => {
                        let ids: Vec<BufferId> = m.buffers_of(TenantId(t)).map(|b| b.id).collect();
                        if let Some(id) = ids.get(i) {
                            m.handle_free(TenantId(t), *id).unwrap();
                        }
                    }
                    Event::Exit(t) => m.handle_tenant_exit(TenantId(t)),
                    Event::Wait(ns) => {
                        now += ns;
                        if m.poll_timeout().is_some_and(|at| at <= now) {
                            m.handle_timeout(now);
                        }
                    }
                }
                drive(&mut m, now);
                prop_assert!(m.check_invariants().is_ok(), "{:?}", m.check_invariants());
                if let (Some(holder), false) = (m.holder(), m.relocating()) {
                    for t in (0..3).map(TenantId) {
                        let runs_beside = t != holder && !m.parked(t) && m.busy(t);
                        prop_assert!(!runs_beside, "{t} runs beside {holder}");
                    }
                }
            }
        }
    }
}

#[test]
fn a_slow_handover_makes_the_automatic_quantum_long_but_never_past_nvshares() {
    let mut m = manager_with(
        GpuTime::Turns(TurnSettings {
            quantum: Quantum::Auto,
            handover_after_ns: SECOND,
            always: false,
        }),
        Idle::Keep,
    );
    start(&mut m, 0, 60, 0);
    start(&mut m, 1, 60, 0);
    assert_eq!(m.holder(), Some(TenantId(0)));
    // The first quantum is the shortest, 2 s; the handover then takes 10 s (a victim
    // draining a slow kernel), and 20 handovers would be 200 s.
    m.handle_timeout(2 * SECOND);
    let handover = drive(&mut m, 12 * SECOND);
    assert_eq!(m.holder(), Some(TenantId(1)));
    assert!(!handover.is_empty());
    assert_eq!(
        m.poll_timeout(),
        Some(12 * SECOND + crate::gpu_time::MAX_AUTO_QUANTUM_NS)
    );
}
