//! The automatic choice, idle demotion and touch marks through the manager's interface.

use proptest::prelude::*;

use super::turns_tests::{SECOND, drive, manager_with, moved_bytes, start};
use crate::gpu_time::auto::{PROBE_GAP_FACTOR, PROBE_MAX_NS};
use crate::gpu_time::{AutoSettings, Choice, GpuTime, Idle, Progress, Quantum, TurnSettings};
use crate::ids::{BufferId, TenantId};
use crate::{Location, MIB, Manager};

const WINDOW_NS: u64 = 100_000_000;

/// Gpuswap on 100 MiB of VRAM in 2 MiB chunks, `gpu_time = "auto"` with 1 s turns.
fn manager(share_first: bool, idle: Idle) -> Manager {
    let turns = TurnSettings {
        quantum: Quantum::Fixed { ns: SECOND },
        handover_after_ns: SECOND,
        always: false,
    };
    manager_with(GpuTime::Auto(AutoSettings { turns, share_first }), idle)
}

/// A window of `work` completed blocks ending at `now_ns`, touching `touched`.
fn report(m: &mut Manager, t: u32, work: u64, touched: &[BufferId], now_ns: u64) {
    let p = Progress {
        window_ns: WINDOW_NS,
        completed_blocks: work,
        ..Progress::default()
    };
    m.handle_progress(TenantId(t), &p, touched, now_ns);
    drive(m, now_ns);
}

/// Each busy tenant reports every 100 ms from `from_ns` to `to_ns`, at `rate(t)` blocks
/// a window (the holder at `alone`, the others at `beside` under sharing, nothing while
/// parked); timeouts fire in between. Returns the time reached.
fn run(m: &mut Manager, from_ns: u64, to_ns: u64, alone: u64, beside: u64) -> u64 {
    let mut now = from_ns;
    while now < to_ns {
        now += WINDOW_NS;
        if let Some(t) = m.poll_timeout().filter(|t| *t <= now) {
            m.handle_timeout(t.max(now - WINDOW_NS));
            drive(m, now);
        }
        for t in 0..2u32 {
            if m.parked(TenantId(t)) {
                continue;
            }
            let running = (0..2).filter(|o| !m.parked(TenantId(*o))).count();
            let work = if running == 1 { alone } else { beside };
            report(m, t, work, &[], now);
        }
    }
    now
}

#[test]
fn on_pcie_a_hot_pair_takes_turns_and_a_failed_probe_waits_49_times_its_length() {
    let mut m = manager(false, Idle::Keep);
    start(&mut m, 0, 60, 0);
    start(&mut m, 1, 60, 1);
    assert_eq!(
        m.gpu_time_choice(),
        Some(Choice::Turns),
        "PCIe: turns first"
    );
    assert!(m.holder().is_some());
    // Each holds a turn and is measured at its best; then sharing is probed, and with
    // hot data remote each does a tenth: back to turns.
    let now = run(&mut m, 1, 4 * SECOND, 1000, 100);
    let switches: Vec<_> = std::iter::from_fn(|| m.poll_switch()).collect();
    assert!(switches.len() >= 2, "a probe and its failure: {switches:?}");
    assert_eq!(switches[0].to, Choice::Share);
    assert!(switches[0].reason.contains("probing"), "{switches:?}");
    assert_eq!(switches[1].to, Choice::Turns);
    assert!(switches[1].reason.contains("0.20"), "{switches:?}");
    assert_eq!(m.gpu_time_choice(), Some(Choice::Turns));
    let failed_at = switches[1].at_ns;
    let probe_ns = failed_at - switches[0].at_ns;
    assert!(probe_ns <= PROBE_MAX_NS);
    // No probe again before 49 probe lengths.
    run(
        &mut m,
        now,
        failed_at + 2 * PROBE_GAP_FACTOR * probe_ns,
        1000,
        100,
    );
    let next = m.poll_switch().expect("probed again");
    assert!(
        next.at_ns >= failed_at + PROBE_GAP_FACTOR * probe_ns,
        "probed again at {} after failing at {failed_at} a probe of {probe_ns} ns",
        next.at_ns
    );
    assert_eq!(
        m.slowdown_estimate(TenantId(0)).map(|e| e.round()),
        Some(1.0)
    );
}

#[test]
fn a_cold_pair_keeps_sharing_after_its_probe() {
    let mut m = manager(false, Idle::Keep);
    start(&mut m, 0, 60, 0);
    start(&mut m, 1, 60, 1);
    // Beside each other each does half of its best: as much work as turns, so the probe
    // keeps sharing and the GPU stays shared.
    run(&mut m, 1, 6 * SECOND, 1000, 500);
    assert_eq!(m.gpu_time_choice(), Some(Choice::Share));
    assert_eq!(m.holder(), None);
    assert!(!m.parked(TenantId(0)) && !m.parked(TenantId(1)));
    let switches: Vec<_> = std::iter::from_fn(|| m.poll_switch()).collect();
    assert!(
        switches.iter().any(|s| s.reason.contains("kept sharing")),
        "{switches:?}"
    );
    assert_eq!(
        m.slowdown_estimate(TenantId(1)).map(|e| e.round()),
        Some(2.0)
    );
}

#[test]
fn an_idle_tenant_gives_its_memory_back_under_pressure_and_gets_it_back_at_its_next_work() {
    let after_ns = 5 * SECOND;
    let mut m = manager(true, Idle::Demote { after_ns });
    let (a, b) = (TenantId(0), TenantId(1));
    start(&mut m, 0, 60, 0);
    m.handle_gpu_idle(a, SECOND);
    drive(&mut m, SECOND);
    start(&mut m, 1, 60, 2 * SECOND);
    // b shares with 20 MiB of its memory remote: pressure. a is idle, but not yet long.
    assert!(m.usage(b).host_bytes > 0);
    assert_eq!(m.poll_timeout(), Some(SECOND + after_ns));
    let a_vram = m.usage(a).vram_bytes;
    m.handle_timeout(SECOND + after_ns);
    let demotion = drive(&mut m, SECOND + after_ns);
    assert!(m.demoted(a) && m.parked(a));
    assert_eq!(m.usage(a).vram_bytes, 0, "a gives all its VRAM back");
    assert_eq!(m.usage(b).host_bytes, 0, "b's overflow comes in");
    assert_eq!(moved_bytes(&demotion, Location::Host), a_vram);
    // a has work again: it is held until its memory is back, then runs.
    m.handle_gpu_busy(a, 10 * SECOND);
    let wake = drive(&mut m, 10 * SECOND);
    assert!(!m.demoted(a) && !m.parked(a));
    assert_eq!(m.usage(a).vram_bytes, 60 * MIB);
    assert_eq!(moved_bytes(&wake, Location::Vram), 60 * MIB);
}

#[test]
fn without_pressure_an_idle_tenant_keeps_its_memory() {
    let mut m = manager(true, Idle::Demote { after_ns: SECOND });
    start(&mut m, 0, 40, 0);
    m.handle_gpu_idle(TenantId(0), 0);
    start(&mut m, 1, 40, 0);
    m.handle_timeout(10 * SECOND);
    drive(&mut m, 10 * SECOND);
    assert!(!m.demoted(TenantId(0)));
    assert_eq!(m.usage(TenantId(0)).vram_bytes, 40 * MIB);
}

#[test]
fn under_sharing_touched_chunks_in_host_memory_swap_with_untouched_ones_in_vram() {
    let mut m = manager(true, Idle::Keep);
    let (a, b) = (TenantId(0), TenantId(1));
    start(&mut m, 0, 40, 0); // a's cold table
    start(&mut m, 0, 20, 0); // a's hot weights
    start(&mut m, 1, 60, 0);
    let buffers: Vec<BufferId> = m.buffers_of(a).map(|x| x.id).collect();
    let (table, weights) = (buffers[0], buffers[1]);
    let host_of = |m: &Manager, id| m.buffer(id).unwrap().planned_bytes_at(Location::Host);
    assert!(m.usage(a).host_bytes + m.usage(b).host_bytes > 0);
    // Only the weights and b's buffer are touched, for longer than the cold age.
    let b_buffer = m.buffers_of(b).next().unwrap().id;
    let mut now = 0;
    for _ in 0..40 {
        now += WINDOW_NS;
        report(&mut m, 0, 1000, &[weights], now);
        report(&mut m, 1, 1000, &[b_buffer], now);
    }
    assert_eq!(m.gpu_time_choice(), Some(Choice::Share));
    assert_eq!(host_of(&m, weights), 0, "the hot weights are local");
    assert_eq!(host_of(&m, b_buffer), 0, "b's hot buffer is local");
    assert_eq!(
        host_of(&m, table),
        20 * MIB,
        "the overflow is a's cold table"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever two busy tenants report (nonsense included: empty windows, no work,
    /// absurd work), the books stay consistent, nobody runs beside a holder, and both
    /// get the GPU: neither is parked through 20 s.
    #[test]
    fn lying_reports_starve_nobody(
        reports in proptest::collection::vec((0u32..2, 0u64..3, 0u64..4), 1..400),
    ) {
        let mut m = manager(false, Idle::Keep);
        start(&mut m, 0, 60, 0);
        start(&mut m, 1, 60, 0);
        let mut ran = [false; 2];
        let mut now = 0;
        for (t, window, work) in reports {
            now += WINDOW_NS / 2;
            if let Some(at) = m.poll_timeout().filter(|at| *at <= now) {
                m.handle_timeout(at);
                drive(&mut m, now);
            }
            let p = Progress {
                window_ns: [0, WINDOW_NS, u64::MAX][window as usize],
                completed_blocks: [0, 1, 1000, u64::MAX][work as usize],
                ..Progress::default()
            };
            m.handle_progress(TenantId(t), &p, &[BufferId(u64::MAX)], now);
            drive(&mut m, now);
            m.check_invariants().unwrap();
            if let Some(h) = m.holder() {
                prop_assert!(m.parked(TenantId(1 - h.0)), "a tenant ran beside the holder");
            }
            for (i, r) in ran.iter_mut().enumerate() {
                *r |= !m.parked(TenantId(i as u32));
            }
        }
        if now >= 20 * SECOND {
            prop_assert!(ran[0] && ran[1], "a tenant never ran in {now} ns");
        }
    }
}
