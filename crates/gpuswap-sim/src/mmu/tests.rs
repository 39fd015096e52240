//! The MMU with the manager's paging machine: what the device serves, counts and
//! carries out of the machine's decisions (the machine's decisions alone are tested in
//! gpuswap-core).

use gpuswap_core::BufferId;
use gpuswap_core::uvm::detect::Pattern;
use gpuswap_core::uvm::pages::{PAGE_BYTES, PAGES_PER_BLOCK};
use gpuswap_core::uvm::policy::{Plan, Runtime};
use gpuswap_core::uvm::thrash::ThrashingParams;
use gpuswap_core::uvm::{Migration, Paging, PagingConfig, PagingStats};

use super::*;

const MIB: u64 = 1 << 20;

/// The paging machine and the MMU it drives, as the engine wires them.
struct Rig {
    p: Paging,
    mmu: Mmu,
    /// Buffers made so far (each allocation gets a buffer id of its own).
    buffers: usize,
}

impl Rig {
    fn new(capacity_bytes: u64, config: PagingConfig) -> Self {
        Self {
            p: Paging::new(capacity_bytes, config),
            mmu: Mmu::new(true),
            buffers: 0,
        }
    }

    fn add_allocation(&mut self, owner: u32, bytes: u64) -> u64 {
        let first = self
            .p
            .add_allocation(owner, BufferId::new(0, self.buffers), bytes);
        self.buffers += 1;
        self.apply();
        first
    }

    /// Carries out the machine's actions on the MMU.
    fn apply(&mut self) -> PageWork {
        let mut work = PageWork::default();
        while let Some(action) = self.p.poll_action() {
            self.mmu.apply(action, &mut work);
        }
        if work.migrated {
            self.p.migrations_done();
        }
        work
    }

    /// A run of touches, its access notes sent at once.
    fn touch_run(
        &mut self,
        first: u64,
        len: u64,
        kind: AccessKind,
        now_ns: u64,
        faults: &mut Vec<Fault>,
        batch: usize,
    ) -> Touched {
        let touched = self.mmu.touch_run(first, len, kind, now_ns, faults, batch);
        let notes = self.mmu.take_notes();
        self.p.access_notes(&notes);
        touched
    }

    /// Services a batch and carries it out; both auditors must agree afterwards.
    fn service(&mut self, faults: &[Fault], now_ns: u64) -> PageWork {
        self.p.fault_batch(faults, now_ns);
        let work = self.apply();
        assert!(work.replayed);
        self.check_invariants().unwrap();
        work
    }

    fn check_invariants(&self) -> Result<(), String> {
        self.p.check_invariants()?;
        self.mmu.audit(Some(&self.p))
    }

    fn stats(&self, owner: u32) -> PagingStats {
        self.p.stats(owner)
    }

    fn counts(&self, owner: u32) -> PageCounts {
        self.mmu.counts(TenantId(owner))
    }

    fn resident_pages(&self) -> u64 {
        self.p.resident_pages()
    }
}

/// On-fault migration without thrashing detection: the policies alone.
fn config(prefetch: &str, eviction: &str) -> PagingConfig {
    PagingConfig::named(prefetch, eviction)
        .unwrap()
        .thrashing(false)
}

fn paging(capacity_bytes: u64, prefetch: &str, eviction: &str) -> Rig {
    Rig::new(capacity_bytes, config(prefetch, eviction))
}

/// The pages of a batch.
fn pages_of(faults: &[Fault]) -> Vec<u64> {
    faults.iter().map(|f| f.page).collect()
}

/// Plays a driver that services every fault at once (a batch of one).
fn run(p: &mut Rig, stream: &[u64]) {
    for &page in stream {
        let mut faults = Vec::new();
        p.touch_run(page, 1, AccessKind::Read, 0, &mut faults, 1);
        if !faults.is_empty() {
            p.service(&faults, 0);
        }
    }
}

/// The adaptive runtime with the research simulator's migrate threshold.
const ADAPTIVE: Runtime = Runtime::Adaptive {
    migrate_threshold: 8,
};

/// A machine with the given runtime, 64 KiB prefetching and FIFO eviction.
fn paging_under(capacity_bytes: u64, runtime: Runtime) -> Rig {
    Rig::new(
        capacity_bytes,
        PagingConfig {
            runtime,
            ..config("sequential-64k", "fifo-2mb")
        },
    )
}

#[test]
fn prefetched_pages_nobody_touched_are_counted_when_evicted() {
    let mut p = paging(2 * MIB, "sequential-64k", "fifo-2mb");
    let base = p.add_allocation(0, 4 * MIB);
    // One touch per 64 KiB big page of the first block: each brings 16 pages.
    let sparse: Vec<u64> = (0..32).map(|i| base + i * 16).collect();
    run(&mut p, &sparse);
    assert_eq!(p.stats(0).pages_prefetched, 32 * 15);
    // The second block pushes the first out: its 480 untouched prefetched pages.
    run(&mut p, &[base + PAGES_PER_BLOCK as u64]);
    assert_eq!(p.counts(0).prefetched_unused, 32 * 15);
}

/// A paging machine with `migration` and the driver's thrashing detection as given.
fn paging_with(capacity_bytes: u64, migration: Migration, thrashing: bool) -> Rig {
    let config = config("none", "fifo-2mb").migrating(migration);
    Rig::new(capacity_bytes, config.thrashing(thrashing))
}

#[test]
fn a_run_of_resident_pages_costs_one_call_and_stops_at_a_full_batch() {
    let mut p = paging(8 * MIB, "none", "fifo-2mb");
    let base = p.add_allocation(0, 4 * MIB);
    // 1024 pages in one run, batches of 256: four calls fault them all.
    let mut faults = Vec::new();
    let mut at = base;
    let mut calls = 0;
    while at < base + 1024 {
        let run = p.touch_run(at, base + 1024 - at, AccessKind::Read, 0, &mut faults, 256);
        assert_eq!(faults.len(), 256, "stops exactly when the batch is full");
        assert_eq!(run.pages, 256);
        p.service(&faults, 0);
        faults.clear();
        at += run.pages;
        calls += 1;
    }
    assert_eq!(calls, 4);
    // Now resident: the whole run is touched in one call, across both blocks.
    let run = p.touch_run(base, 1024, AccessKind::Read, 0, &mut faults, 256);
    assert_eq!((run.pages, run.remote, faults.len()), (1024, 0, 0));
    let s = p.stats(0);
    assert_eq!(
        (p.counts(0).touches, s.far_faults, s.pages_in),
        (2048, 1024, 1024)
    );
    p.check_invariants().unwrap();
}

#[test]
fn pages_waiting_in_a_batch_fault_once() {
    let mut p = paging(8 * MIB, "none", "fifo-2mb");
    let base = p.add_allocation(0, MIB);
    let mut faults = Vec::new();
    for _ in 0..3 {
        p.touch_run(base, 8, AccessKind::Read, 0, &mut faults, 256);
    }
    assert_eq!(faults.len(), 8);
    assert_eq!(p.counts(0).touches, 24);
    p.service(&faults, 0);
    assert_eq!(p.stats(0).far_faults, 8);
}

#[test]
fn touches_that_wait_for_a_batch_stall_and_resident_or_remote_ones_do_not() {
    let mut p = paging(8 * MIB, "none", "fifo-2mb");
    let base = p.add_allocation(0, MIB);
    let mut faults = Vec::new();
    // Fault the first 8 pages and have them serviced: resident now.
    p.touch_run(base, 8, AccessKind::Read, 0, &mut faults, 256);
    p.service(&faults, 0);
    faults.clear();
    // A run over 16 pages: 8 resident go on, 8 fault and stall.
    let run = p.touch_run(base, 16, AccessKind::Read, 0, &mut faults, 256);
    assert_eq!((run.pages, run.stalled, faults.len()), (16, 8, 8));
    // Touched again before the batch is serviced: the waiting pages stall again, once
    // each, without new faults; one page on its own (the single-page path) as well.
    let again = p.touch_run(base + 4, 8, AccessKind::Read, 0, &mut faults, 256);
    assert_eq!((again.stalled, faults.len()), (4, 8));
    let single = p.touch_run(base + 12, 1, AccessKind::Read, 0, &mut faults, 256);
    let resident = p.touch_run(base, 1, AccessKind::Read, 0, &mut faults, 256);
    assert_eq!((single.stalled, resident.stalled), (1, 0));
    // Served remotely: no stall.
    let mut z = paging_with(8 * MIB, Migration::ZeroCopy, true);
    let zb = z.add_allocation(0, MIB);
    let remote = z.touch_run(zb, 16, AccessKind::Read, 0, &mut faults, 256);
    assert_eq!((remote.remote, remote.stalled), (16, 0));
}

#[test]
fn zero_copy_serves_every_touch_remotely_and_never_migrates() {
    let mut p = paging_with(8 * MIB, Migration::ZeroCopy, true);
    let base = p.add_allocation(0, 4 * MIB);
    let mut faults = Vec::new();
    for kind in [AccessKind::Read, AccessKind::Write] {
        let run = p.touch_run(base, 1024, kind, 0, &mut faults, 256);
        assert_eq!((run.pages, run.remote), (1024, 1024));
    }
    assert!(faults.is_empty());
    assert_eq!(p.resident_pages(), 0);
    assert_eq!(p.counts(0).remote_touches, 2048);
}

#[test]
fn delayed_migration_reads_remotely_until_the_counter_and_writes_at_once() {
    let delayed = Migration::Delayed {
        threshold: 8,
        adaptive: false,
    };
    let mut p = paging_with(8 * MIB, delayed, false);
    let base = p.add_allocation(0, 4 * MIB);
    let mut faults = Vec::new();
    // Seven reads of block 0 are remote; the eighth reaches the threshold and faults.
    for page in 0..7 {
        let run = p.touch_run(base + page, 1, AccessKind::Read, 0, &mut faults, 256);
        assert_eq!(run.remote, 1, "read {page}");
    }
    assert!(faults.is_empty());
    p.touch_run(base + 7, 1, AccessKind::Read, 0, &mut faults, 256);
    assert_eq!(pages_of(&faults), [base + 7]);
    // From then on the block's pages fault as under on-fault migration.
    p.touch_run(base + 8, 4, AccessKind::Read, 0, &mut faults, 256);
    assert_eq!(faults.len(), 5);
    // A write to the other block migrates at once.
    p.touch_run(base + 512, 1, AccessKind::Write, 0, &mut faults, 256);
    assert_eq!(faults.len(), 6);
    p.service(&faults, 0);
    assert_eq!(p.resident_pages(), 6);
    assert_eq!(p.counts(0).remote_touches, 7);
    p.check_invariants().unwrap();
}

#[test]
fn the_adaptive_threshold_grows_with_evictions_once_oversubscribed() {
    let delayed = Migration::Delayed {
        threshold: 2,
        adaptive: true,
    };
    // Room for one page: each block's page evicts the other's.
    let mut p = paging_with(PAGE_BYTES, delayed, false);
    let base = p.add_allocation(0, 4 * MIB);
    let remote_reads_before_fault = |p: &mut Rig, page: u64| {
        let mut faults = Vec::new();
        let mut remote = 0;
        while faults.is_empty() {
            remote += p
                .touch_run(page, 1, AccessKind::Read, 0, &mut faults, 1)
                .remote;
        }
        p.service(&faults, 0);
        remote
    };
    // Fixed threshold 2 before any eviction: one remote read, the second faults.
    assert_eq!(remote_reads_before_fault(&mut p, base), 1);
    // Block 1's page faults at threshold 2 too (nothing evicted yet) and evicts block 0's.
    assert_eq!(remote_reads_before_fault(&mut p, base + 512), 1);
    // Block 0 was evicted once: 2 x 2 x (1 + 1) = 8, seven remote reads first.
    assert_eq!(remote_reads_before_fault(&mut p, base), 7);
    p.check_invariants().unwrap();
}

#[test]
fn thrashing_pages_are_throttled_then_pinned_and_read_remotely() {
    // Pages of two blocks bouncing through room for one, faster than the driver's lapse.
    let mut p = paging_with(PAGE_BYTES, Migration::OnFault, true);
    let base = p.add_allocation(0, 4 * MIB);
    let params = ThrashingParams::default();
    let mut now = 0;
    let mut naps = 0;
    let mut remote = 0;
    for _ in 0..40 {
        for block in [base, base + 512] {
            now += 10_000;
            let mut faults = Vec::new();
            remote += p
                .touch_run(block, 1, AccessKind::Read, now, &mut faults, 1)
                .remote;
            if !faults.is_empty() {
                let s = p.service(&faults, now);
                naps += u64::from(s.nap_ns == params.nap_ns);
            }
            p.check_invariants().unwrap();
        }
    }
    let s = p.stats(0);
    assert!(naps > 0 && s.throttles == naps, "{s:?}");
    assert!(s.pins > 0, "{s:?}");
    assert!(remote > 0 && p.counts(0).remote_touches == remote, "{s:?}");
    // Without detection the same stream faults every time.
    let mut off = paging_with(PAGE_BYTES, Migration::OnFault, false);
    let base = off.add_allocation(0, 4 * MIB);
    for _ in 0..40 {
        for block in [base, base + 512] {
            let mut faults = Vec::new();
            off.touch_run(block, 1, AccessKind::Read, 0, &mut faults, 1);
            off.service(&faults, 0);
        }
    }
    assert_eq!(off.stats(0).far_faults, 80);
    assert_eq!(off.counts(0).remote_touches, 0);
}

#[test]
fn invalidate_clean_drops_pages_nobody_wrote_and_copies_back_the_rest() {
    for invalidate_clean in [false, true] {
        let mut p = Rig::new(
            2 * MIB,
            PagingConfig {
                invalidate_clean,
                ..config("none", "fifo-2mb")
            },
        );
        let base = p.add_allocation(0, 4 * MIB);
        let mut faults = Vec::new();
        // Block 0: 100 pages read, 50 written (one of them read first, then written).
        p.touch_run(base, 100, AccessKind::Read, 0, &mut faults, 512);
        p.touch_run(base + 99, 50, AccessKind::Write, 0, &mut faults, 512);
        p.service(&faults, 0);
        faults.clear();
        // Block 1 fills VRAM: block 0 goes (FIFO).
        p.touch_run(base + 512, 512, AccessKind::Read, 0, &mut faults, 512);
        let s = p.service(&faults, 0);
        assert_eq!(s.pages_out, 149);
        let written = if invalidate_clean { 50 } else { 149 };
        assert_eq!(
            s.pages_written_back, written,
            "invalidate_clean {invalidate_clean}"
        );
        assert_eq!(p.counts(0).pages_dropped, 149 - written);
        p.check_invariants().unwrap();
    }
}

#[test]
fn a_write_fault_pinned_in_host_memory_leaves_no_dirty_page_behind() {
    // Two blocks' first pages written in turn through room for one page, until one
    // write fault is pinned (served remotely: the host's copy has the write).
    let mut p = Rig::new(
        PAGE_BYTES,
        PagingConfig {
            thrashing: Some(ThrashingParams::default()),
            invalidate_clean: true,
            ..config("none", "fifo-2mb")
        },
    );
    let base = p.add_allocation(0, 4 * MIB);
    let params = ThrashingParams::default();
    let mut now = 0;
    let mut pinned = None;
    'bounce: for _ in 0..40 {
        for page in [base, base + 512] {
            now += 10_000;
            let mut faults = Vec::new();
            p.touch_run(page, 1, AccessKind::Write, now, &mut faults, 1);
            if !faults.is_empty() {
                p.service(&faults, now);
                if p.stats(0).pins > 0 {
                    pinned = Some(page);
                    break 'bounce;
                }
            }
        }
    }
    let pinned = pinned.expect("a page gets pinned");
    let other = if pinned == base { base + 512 } else { base };
    // Long after the pin: the pinned page is read (it migrates, clean), then pushed out
    // by the other page: nothing wrote it since it arrived, so it is dropped.
    now += params.pin_ns + params.epoch_ns;
    for page in [pinned, other] {
        now += 10 * params.lapse_ns;
        let mut faults = Vec::new();
        p.touch_run(page, 1, AccessKind::Read, now, &mut faults, 1);
        assert_eq!(pages_of(&faults), [page]);
        let before = p.counts(0);
        let s = p.service(&faults, now);
        p.check_invariants().unwrap();
        if page == other {
            assert_eq!(s.pages_out, 1);
            assert_eq!(
                (
                    s.pages_written_back,
                    p.counts(0).pages_dropped - before.pages_dropped
                ),
                (0, 1),
                "a page only read since it arrived is written back"
            );
        }
    }
}

#[test]
fn a_region_larger_than_vram_does_not_reset_the_access_counter() {
    // Delayed migration, threshold 2; 8 pages of VRAM, 64 KiB prefetch regions (16 pages).
    let mut p = Rig::new(
        8 * PAGE_BYTES,
        PagingConfig {
            migration: Migration::Delayed {
                threshold: 2,
                adaptive: false,
            },
            ..config("sequential-64k", "fifo-2mb")
        },
    );
    let base = p.add_allocation(0, 4 * MIB);
    let mut faults = Vec::new();
    // The first read is remote, the second reaches the counter and faults.
    assert_eq!(
        p.touch_run(base, 1, AccessKind::Read, 0, &mut faults, 8)
            .remote,
        1
    );
    p.touch_run(base + 1, 1, AccessKind::Read, 0, &mut faults, 8);
    assert_eq!(pages_of(&faults), [base + 1]);
    // Its region does not fit; the faulted page comes alone. Nothing was evicted.
    let s = p.service(&faults, 0);
    assert_eq!((s.pages_in, s.pages_out), (1, 0));
    faults.clear();
    // The block reached its threshold and never left VRAM: its next page faults.
    let run = p.touch_run(base + 2, 1, AccessKind::Read, 0, &mut faults, 8);
    assert_eq!((run.remote, faults.len()), (0, 1), "served remotely again");
}

#[test]
fn adaptive_pins_a_random_allocation_on_the_host_from_the_first_full_batch() {
    // 64 big pages of an 8 MiB allocation in a scattered order (step 67 of 128: about
    // half the steps ascend), each fault bringing its 64 KiB, into 2 MiB of VRAM: 32 fit.
    let run = |runtime| {
        let mut p = paging_under(2 * MIB, runtime);
        let base = p.add_allocation(0, 8 * MIB);
        for i in 0..64u64 {
            let page = base + (i * 67 + 13) % 128 * 16;
            let mut faults = Vec::new();
            p.touch_run(page, 1, AccessKind::Read, i, &mut faults, 256);
            p.service(&faults, i);
            p.check_invariants().unwrap();
        }
        p.p.kernel_finished(0, 64, 64, 64);
        p
    };
    let fixed = run(Runtime::Fixed);
    assert_eq!(fixed.stats(0).far_faults, 64);
    assert_eq!(fixed.counts(0).remote_touches, 0);
    assert_eq!(fixed.p.allocations(0)[0].plan, Plan::Configured);
    // The 33rd fault finds VRAM full: the detector's checkpoint sees 33 scattered
    // faults (random), the allocation is pinned on the host, and that fault is the
    // last: the 31 after it are remote.
    let adaptive = run(ADAPTIVE);
    let s = adaptive.stats(0);
    assert_eq!((s.far_faults, adaptive.counts(0).remote_touches), (33, 31));
    let report = &adaptive.p.allocations(0)[0];
    assert_eq!(
        (report.pattern, report.plan),
        (Pattern::Random, Plan::HostPinned)
    );
    assert_eq!(s.plan_switches, 1);
    // Both reported the same observations: the first at the checkpoint, then the rest.
    let seen = |p: &Rig| -> Vec<(u64, u64)> {
        p.p.allocations(0)[0]
            .timeline
            .iter()
            .map(|o| (o.ns, o.migrated))
            .collect()
    };
    assert_eq!(seen(&fixed), [(32, 33), (64, 31)]);
    assert_eq!(seen(&adaptive), [(32, 33)]);
}

#[test]
fn the_auditor_catches_residency_the_manager_did_not_plan() {
    let mut p = paging(8 * MIB, "none", "fifo-2mb");
    let base = p.add_allocation(0, 4 * MIB);
    let mut faults = Vec::new();
    p.touch_run(base, 8, AccessKind::Read, 0, &mut faults, 256);
    p.service(&faults, 0);
    assert_eq!(p.check_invariants(), Ok(()));
    // A page arrives that nobody asked for: the device and the plan disagree.
    let mut work = PageWork::default();
    p.mmu.apply(
        PageAction::MigrateIn {
            block: 1,
            pages: Pages::single(3),
        },
        &mut work,
    );
    let error = p.mmu.audit(Some(&p.p)).unwrap_err();
    assert!(
        error.contains("block 1") && error.contains("1 differ"),
        "{error}"
    );
    // While migrations are in flight the plan is ahead of the device: no comparison.
    p.touch_run(base + 512, 1, AccessKind::Read, 0, &mut faults, 256);
    p.p.fault_batch(&faults[8..], 0);
    assert!(p.p.migrating());
    assert_eq!(p.mmu.audit(Some(&p.p)), Ok(()));
}

#[test]
fn notes_go_only_where_the_policy_needs_access_counts() {
    for wants in [false, true] {
        let mut mmu = Mmu::new(wants);
        let mut p = Paging::new(8 * MIB, config("none", "lru-2mb"));
        p.add_allocation(0, BufferId::new(0, 0), MIB);
        let mut work = PageWork::default();
        while let Some(action) = p.poll_action() {
            mmu.apply(action, &mut work);
        }
        mmu.apply(
            PageAction::MigrateIn {
                block: 0,
                pages: Pages::range(0, 4),
            },
            &mut work,
        );
        let mut faults = Vec::new();
        mmu.touch_run(0, 4, AccessKind::Read, 0, &mut faults, 16);
        mmu.touch_run(2, 1, AccessKind::Write, 0, &mut faults, 16);
        let notes = mmu.take_notes();
        if wants {
            assert_eq!(
                notes,
                [(0, Pages::range(0, 4)), (0, Pages::single(2))],
                "in touch order, one per run"
            );
        } else {
            assert!(notes.is_empty());
        }
        assert!(faults.is_empty());
    }
}
