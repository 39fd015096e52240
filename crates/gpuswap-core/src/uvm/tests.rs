use proptest::prelude::*;

use super::evict::{EVICTIONS, find_eviction};
use super::optimum::belady_pages_in;
use super::pages::PAGES_PER_BLOCK;
use super::prefetch::{PREFETCHERS, find_prefetch};
use super::thrash::ThrashingParams;
use super::*;

const MIB: u64 = 1 << 20;

/// On-fault migration without thrashing detection: the policies alone.
fn config(prefetch: &str, eviction: &str) -> PagingConfig {
    PagingConfig {
        thrashing: None,
        ..PagingConfig::new(
            (find_prefetch(prefetch).unwrap().build)(),
            find_eviction(eviction).unwrap().build,
        )
    }
}

fn paging(capacity_bytes: u64, prefetch: &str, eviction: &str) -> Paging {
    Paging::new(capacity_bytes, config(prefetch, eviction))
}

/// Reads one page at time 0: whether it faulted (it then waits in a batch).
fn faults_on(p: &mut Paging, page: u64) -> bool {
    let mut faults = Vec::new();
    p.touch_run(page, 1, AccessKind::Read, 0, &mut faults, 1);
    !faults.is_empty()
}

/// Plays a driver that services every fault at once (a batch of one), checking the
/// accounting after each.
fn run(p: &mut Paging, stream: &[u64]) {
    for &page in stream {
        if faults_on(p, page) {
            p.service(&[page], 0);
            // A served fault always gets its page in.
            assert!(
                p.blocks[(page / 512) as usize]
                    .resident
                    .contains((page % 512) as usize)
            );
        }
        p.check_invariants().unwrap();
    }
}

#[test]
fn with_ample_vram_every_page_migrates_once_and_nothing_is_evicted() {
    for prefetch in PREFETCHERS {
        let mut p = paging(64 * MIB, prefetch.name, "fifo-2mb");
        let base = p.add_allocation(0, 8 * MIB);
        let stream: Vec<u64> = (0..3).flat_map(|_| base..base + 2048).collect();
        run(&mut p, &stream);
        let s = p.stats(0);
        assert_eq!(s.pages_in, 2048, "{}", prefetch.name);
        assert_eq!(s.pages_out, 0, "{}", prefetch.name);
        assert_eq!(s.pages_thrashed, 0);
    }
}

#[test]
fn a_cyclic_sweep_over_more_than_vram_thrashes_under_lru() {
    // 3 MiB swept 4 times through 2 MiB of VRAM, page by page, no prefetching: LRU evicts
    // exactly the page needed next, so every touch faults.
    let mut p = paging(2 * MIB, "none", "lru-4k");
    let base = p.add_allocation(0, 3 * MIB);
    let pages = 3 * 256;
    let stream: Vec<u64> = (0..4).flat_map(|_| base..base + pages).collect();
    run(&mut p, &stream);
    let s = p.stats(0);
    assert_eq!(s.far_faults, stream.len() as u64);
    assert_eq!(s.pages_in, stream.len() as u64);
    assert_eq!(s.pages_thrashed, stream.len() as u64 - pages);
    // Belady's bound: after the first pass, each of the 3 others misses only as many
    // pages as do not fit (256), half of LRU's total.
    assert_eq!(belady_pages_in(&stream, 512), 768 + 3 * 256);
}

#[test]
fn the_driver_evicts_by_residency_not_by_use() {
    // Blocks A and B fill VRAM; A is touched again; a third block must evict one.
    let mut fifo = paging(4 * MIB, "tree", "fifo-2mb");
    let mut lru = paging(4 * MIB, "tree", "lru-2mb");
    for p in [&mut fifo, &mut lru] {
        let base = p.add_allocation(0, 6 * MIB);
        let block = PAGES_PER_BLOCK as u64;
        let a: Vec<u64> = (base..base + block).collect();
        let b: Vec<u64> = (base + block..base + 2 * block).collect();
        run(p, &a);
        run(p, &b);
        run(p, &a[..1]);
        run(p, &[base + 2 * block]);
    }
    // FIFO evicts A (resident first) although it was just used; LRU evicts B.
    let resident_a = |p: &mut Paging| !faults_on(p, 0);
    assert!(!resident_a(&mut fifo));
    assert!(resident_a(&mut lru));
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
    assert_eq!(p.stats(0).prefetched_unused, 32 * 15);
}

proptest! {
    /// Residency never drifts, whatever the stream and the policies; and no policy
    /// migrates fewer pages than Belady's bound for the same stream and VRAM.
    #[test]
    fn accounting_holds_and_belady_bounds_every_policy(
        capacity_pages in 1u64..1200,
        touches in proptest::collection::vec((0u64..3, 0u64..1500), 1..400),
        prefetch in 0..PREFETCHERS.len(),
        eviction in 0..EVICTIONS.len(),
        batch in 1usize..8,
        largest_share in any::<bool>(),
    ) {
        let mut p = Paging::new(
            capacity_pages * pages::PAGE_BYTES,
            PagingConfig {
                victim: if largest_share { Victim::LargestShare } else { Victim::Any },
                ..config(PREFETCHERS[prefetch].name, EVICTIONS[eviction].name)
            },
        );
        // One owner per allocation, so that per-tenant eviction has shares to compare.
        let bases: Vec<u64> = [3 * MIB, MIB, 6 * MIB]
            .iter()
            .enumerate()
            .map(|(owner, b)| p.add_allocation(owner as u32, *b))
            .collect();
        let sizes = [768, 256, 1536];
        let stream: Vec<u64> = touches
            .iter()
            .map(|(a, off)| bases[*a as usize] + off % sizes[*a as usize])
            .collect();
        // Faults wait in batches of up to `batch` distinct pages, as a driver fetches
        // them; a page is served when its batch is.
        let mut pending = Vec::new();
        for &page in &stream {
            p.touch_run(page, 1, AccessKind::Read, 0, &mut pending, batch);
            if pending.len() >= batch {
                p.service(&pending, 0);
                pending.clear();
            }
            prop_assert_eq!(p.check_invariants(), Ok(()));
        }
        p.service(&pending, 0);
        prop_assert_eq!(p.check_invariants(), Ok(()));
        let (pages_in, pages_out) = (0..3).map(|o| p.stats(o)).fold((0, 0), |(i, o), s| {
            (i + s.pages_in, o + s.pages_out)
        });
        prop_assert!(pages_in >= pages_out);
        prop_assert_eq!(pages_in - pages_out, p.resident_pages());
        // Belady's bound holds for a driver that serves each fault before the next touch.
        let mut serial = Paging::new(
            capacity_pages * pages::PAGE_BYTES,
            config(PREFETCHERS[prefetch].name, EVICTIONS[eviction].name),
        );
        for size in [3 * MIB, MIB, 6 * MIB] {
            serial.add_allocation(0, size);
        }
        for &page in &stream {
            if faults_on(&mut serial, page) {
                serial.service(&[page], 0);
            }
        }
        prop_assert!(
            belady_pages_in(&stream, capacity_pages) <= serial.stats(0).pages_in,
            "Belady {} > {} migrated", belady_pages_in(&stream, capacity_pages), serial.stats(0).pages_in
        );
    }
}

#[test]
fn reserved_vram_shrinks_the_room_and_evicts_what_no_longer_fits() {
    let mut p = paging(4 * MIB, "none", "fifo-2mb");
    let base = p.add_allocation(0, 4 * MIB);
    let all: Vec<u64> = (base..base + 1024).collect();
    run(&mut p, &all);
    assert_eq!(p.resident_pages(), 1024);
    // The runtime takes 1 MiB: one whole block goes (FIFO: the first).
    p.reserve(MIB);
    assert_eq!(p.resident_pages(), 512);
    p.check_invariants().unwrap();
    p.unreserve(MIB);
    run(&mut p, &all[..1]);
    assert_eq!(p.resident_pages(), 513);
    // A freed allocation leaves VRAM without counting as evicted.
    let out = p.stats(0).pages_out;
    p.free_allocation(base, 4 * MIB);
    assert_eq!(p.resident_pages(), 0);
    assert_eq!(p.stats(0).pages_out, out);
    p.check_invariants().unwrap();
}

#[test]
fn reservations_never_leave_more_room_than_vram() {
    // Three reservations of 349 525 bytes each round to 86 pages apiece; together they
    // are 256 pages (1 MiB less a byte). Freed, the room is VRAM again, not more.
    let mut p = paging(MIB, "none", "fifo-2mb");
    for _ in 0..3 {
        p.reserve(349_525);
    }
    assert_eq!(p.capacity_pages(), 0);
    for _ in 0..3 {
        p.unreserve(349_525);
    }
    assert_eq!(p.capacity_pages(), 256);
}

#[test]
fn sequential_64k_evicts_the_oldest_big_page_and_random_4k_one_page() {
    // VRAM of 32 pages: two big pages fill it; a third evicts exactly the first.
    let mut seq = paging(128 * 1024, "sequential-64k", "sequential-64k");
    let base = seq.add_allocation(0, MIB);
    run(&mut seq, &[base, base + 16, base + 32]);
    assert_eq!(seq.stats(0).pages_out, 16);
    assert!(faults_on(&mut seq, base) && !faults_on(&mut seq, base + 16));
    // Random eviction frees one page per page needed.
    let mut random = paging(128 * 1024, "none", "random-4k");
    let base = random.add_allocation(0, MIB);
    let first: Vec<u64> = (base..base + 32).collect();
    run(&mut random, &first);
    run(&mut random, &[base + 100]);
    assert_eq!(random.stats(0).pages_out, 1);
    assert_eq!(random.resident_pages(), 32);
}

/// A paging machine with `migration` and the driver's thrashing detection as given.
fn paging_with(capacity_bytes: u64, migration: Migration, thrashing: bool) -> Paging {
    Paging::new(
        capacity_bytes,
        PagingConfig {
            migration,
            thrashing: thrashing.then(ThrashingParams::default),
            ..config("none", "fifo-2mb")
        },
    )
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
    assert_eq!((s.touches, s.far_faults, s.pages_in), (2048, 1024, 1024));
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
    assert_eq!(p.stats(0).far_faults, 8);
    assert_eq!(p.stats(0).touches, 24);
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
    assert_eq!(p.stats(0).remote_touches, 2048);
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
    assert_eq!(faults, [base + 7]);
    // From then on the block's pages fault as under on-fault migration.
    p.touch_run(base + 8, 4, AccessKind::Read, 0, &mut faults, 256);
    assert_eq!(faults.len(), 5);
    // A write to the other block migrates at once.
    p.touch_run(base + 512, 1, AccessKind::Write, 0, &mut faults, 256);
    assert_eq!(faults.len(), 6);
    p.service(&faults, 0);
    assert_eq!(p.resident_pages(), 6);
    assert_eq!(p.stats(0).remote_touches, 7);
    p.check_invariants().unwrap();
}

#[test]
fn the_adaptive_threshold_grows_with_evictions_once_oversubscribed() {
    let delayed = Migration::Delayed {
        threshold: 2,
        adaptive: true,
    };
    // Room for one page: each block's page evicts the other's.
    let mut p = paging_with(pages::PAGE_BYTES, delayed, false);
    let base = p.add_allocation(0, 4 * MIB);
    let remote_reads_before_fault = |p: &mut Paging, page: u64| {
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
    let mut p = paging_with(pages::PAGE_BYTES, Migration::OnFault, true);
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
    assert!(remote > 0 && s.remote_touches == remote, "{s:?}");
    // Without detection the same stream faults every time.
    let mut off = paging_with(pages::PAGE_BYTES, Migration::OnFault, false);
    let base = off.add_allocation(0, 4 * MIB);
    for _ in 0..40 {
        for block in [base, base + 512] {
            let mut faults = Vec::new();
            off.touch_run(block, 1, AccessKind::Read, 0, &mut faults, 1);
            off.service(&faults, 0);
        }
    }
    assert_eq!(off.stats(0).far_faults, 80);
    assert_eq!(off.stats(0).remote_touches, 0);
}

#[test]
fn tree_eviction_drains_the_nodes_a_victim_leaves_less_than_half_resident() {
    let tree = |resident: Pages, touched_last: Pages| {
        let mut e = (find_eviction("tree").unwrap().build)();
        e.resident(0, resident, true, 1);
        e.touched(0, touched_last, 2);
        e.victim(&|_| resident, u32::MAX).unwrap()
    };
    // Big pages 0, 1 and 4 resident, 0 least recently touched: evicting it leaves node
    // 0..64 a quarter full and node 0..128 an eighth: both drain, so everything goes.
    let sparse = Pages::range(0, 32) | Pages::range(64, 80);
    let touched = Pages::range(16, 32) | Pages::range(64, 80);
    assert_eq!(tree(sparse, touched), (0, sparse));
    // More than half the block resident (18 of 32 big pages): after the victim every node
    // above it is still at least half full.
    let dense = Pages::range(0, 288);
    assert_eq!(tree(dense, Pages::range(16, 288)), (0, Pages::range(0, 16)));
    // Touches refresh: the least recently touched big page goes first.
    assert_eq!(tree(dense, Pages::range(0, 16)).1, Pages::range(16, 32));
    // Exactly half: the root falls below half once the victim goes, and drains.
    let half = Pages::range(0, 256);
    assert_eq!(tree(half, Pages::range(16, 256)).1, half);
}

#[test]
fn invalidate_clean_drops_pages_nobody_wrote_and_copies_back_the_rest() {
    for invalidate_clean in [false, true] {
        let mut p = Paging::new(
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
        assert_eq!(p.stats(0).pages_dropped, 149 - written);
        p.check_invariants().unwrap();
    }
}

#[test]
fn largest_share_eviction_takes_from_the_biggest_holder_where_the_driver_takes_the_oldest() {
    let evicted_owner = |victim: Victim| {
        let mut p = Paging::new(
            6 * MIB,
            PagingConfig {
                victim,
                ..config("none", "fifo-2mb")
            },
        );
        let a = p.add_allocation(1, 2 * MIB);
        let bc = p.add_allocation(0, 4 * MIB);
        let d = p.add_allocation(1, 2 * MIB);
        // Tenant 1's block first (the oldest), then tenant 0's two: VRAM is full.
        for first in [a, bc, bc + 512, d] {
            fill_block(&mut p, first);
        }
        (p.stats(0).pages_out, p.stats(1).pages_out)
    };
    // FIFO alone evicts tenant 1's own oldest block for its new one.
    assert_eq!(evicted_owner(Victim::Any), (0, 512));
    // Per-tenant: tenant 0 holds twice as much, so its oldest block goes.
    assert_eq!(evicted_owner(Victim::LargestShare), (512, 0));
}

// Bugs found in review (each fails until its bug is fixed).

#[test]
fn a_batch_that_waits_one_nap_counts_one_throttle() {
    // Room for two pages; pages of blocks A and B, then of C and D, bounce in pairs.
    let mut p = paging_with(2 * pages::PAGE_BYTES, Migration::OnFault, true);
    let base = p.add_allocation(0, 8 * MIB);
    let mut now = 0;
    let mut naps = 0;
    for _ in 0..5 {
        for pair in [[base, base + 512], [base + 1024, base + 1536]] {
            now += 10_000;
            let mut faults = Vec::new();
            for page in pair {
                p.touch_run(page, 1, AccessKind::Read, now, &mut faults, 2);
            }
            let s = p.service(&faults, now);
            naps += u64::from(s.nap_ns > 0);
            p.check_invariants().unwrap();
        }
    }
    assert!(naps > 0);
    // `throttles`: "fault batches that waited a nap for thrashing pages".
    assert_eq!(p.stats(0).throttles, naps);
}

#[test]
fn a_page_that_arrived_long_ago_is_not_thrashing() {
    // Room for two pages. Page A0 arrives at 0; A1 at 400 ms; both leave at 400.1 ms for
    // block B; A0 comes back at 400.2 ms. A0 migrated twice within a lapse (out, in):
    // below the threshold of 3, so no throttle.
    let mut p = paging_with(2 * pages::PAGE_BYTES, Migration::OnFault, true);
    let base = p.add_allocation(0, 4 * MIB);
    let (a0, a1, b0, b1) = (base, base + 1, base + 512, base + 513);
    let step = |p: &mut Paging, pages: &[u64], now: u64| {
        let mut faults = Vec::new();
        for &page in pages {
            p.touch_run(page, 1, AccessKind::Read, now, &mut faults, 2);
        }
        let s = p.service(&faults, now);
        p.check_invariants().unwrap();
        s
    };
    step(&mut p, &[a0], 0);
    step(&mut p, &[a1], 400_000_000);
    let s = step(&mut p, &[b0, b1], 400_100_000);
    assert_eq!(s.pages_out, 2);
    let s = step(&mut p, &[a0], 400_200_000);
    assert_eq!((s.nap_ns, p.stats(0).throttles), (0, 0));
}

#[test]
fn a_write_fault_pinned_in_host_memory_leaves_no_dirty_page_behind() {
    // Two blocks' first pages written in turn through room for one page, until one
    // write fault is pinned (served remotely: the host's copy has the write).
    let mut p = Paging::new(
        pages::PAGE_BYTES,
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
        assert_eq!(faults, [page]);
        let before = p.stats(0);
        let s = p.service(&faults, now);
        p.check_invariants().unwrap();
        if page == other {
            assert_eq!(s.pages_out, 1);
            assert_eq!(
                (
                    s.pages_written_back,
                    p.stats(0).pages_dropped - before.pages_dropped
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
    let mut p = Paging::new(
        8 * pages::PAGE_BYTES,
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
    assert_eq!(faults, [base + 1]);
    // Its region does not fit; the faulted page comes alone. Nothing was evicted.
    let s = p.service(&faults, 0);
    assert_eq!((s.pages_in, s.pages_out), (1, 0));
    faults.clear();
    // The block reached its threshold and never left VRAM: its next page faults.
    let run = p.touch_run(base + 2, 1, AccessKind::Read, 0, &mut faults, 8);
    assert_eq!((run.remote, faults.len()), (0, 1), "served remotely again");
}

// The adaptive runtime's policy engine (issue 9).

/// The adaptive runtime with the research simulator's migrate threshold.
const ADAPTIVE: Runtime = Runtime::Adaptive {
    migrate_threshold: 8,
};

/// Reads a whole 2 MiB block from page `first` in one batch, and checks the accounting.
fn fill_block(p: &mut Paging, first: u64) {
    let mut faults = Vec::new();
    p.touch_run(first, 512, AccessKind::Read, 0, &mut faults, 512);
    p.service(&faults, 0);
    p.check_invariants().unwrap();
}

/// A machine with the given runtime, 64 KiB prefetching and FIFO eviction.
fn paging_under(capacity_bytes: u64, runtime: Runtime) -> Paging {
    Paging::new(
        capacity_bytes,
        PagingConfig {
            runtime,
            ..config("sequential-64k", "fifo-2mb")
        },
    )
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
        p.kernel_finished(0, 64, 64, 64);
        p
    };
    let fixed = run(Runtime::Fixed);
    assert_eq!(fixed.stats(0).far_faults, 64);
    assert_eq!(fixed.stats(0).remote_touches, 0);
    assert_eq!(fixed.allocations(0)[0].plan, Plan::Configured);
    // The 33rd fault finds VRAM full: the detector's checkpoint sees 33 scattered
    // faults (random), the allocation is pinned on the host, and that fault is the
    // last: the 31 after it are remote.
    let adaptive = run(ADAPTIVE);
    let s = adaptive.stats(0);
    assert_eq!((s.far_faults, s.remote_touches), (33, 31));
    let report = &adaptive.allocations(0)[0];
    assert_eq!(
        (report.pattern, report.plan),
        (Pattern::Random, Plan::HostPinned)
    );
    assert_eq!(s.plan_switches, 1);
    // Both reported the same observations: the first at the checkpoint, then the rest.
    let seen = |p: &Paging| -> Vec<(u64, u64)> {
        p.allocations(0)[0]
            .timeline
            .iter()
            .map(|o| (o.ns, o.migrated))
            .collect()
    };
    assert_eq!(seen(&fixed), [(32, 33), (64, 31)]);
    assert_eq!(seen(&adaptive), [(32, 33)]);
}

#[test]
fn the_tree_order_gives_up_blocks_before_the_configured_order() {
    // A (2 MiB) arrives first, then B (2 MiB), then C needs the room of one of them in
    // 4 MiB. All configured, FIFO takes A, the oldest; with B on the tree plan, the tree
    // order goes first and B makes the room. (Set as if VRAM had been full before, so no
    // checkpoint replans them.)
    let resident_after = |tree: bool| {
        let mut p = paging_under(4 * MIB, ADAPTIVE);
        p.checkpoint_ns = Some(0);
        let a = p.add_allocation(0, 2 * MIB);
        let b = p.add_allocation(0, 2 * MIB);
        let c = p.add_allocation(0, 2 * MIB);
        if tree {
            p.set_plan(1, Plan::Tree, 0);
        }
        fill_block(&mut p, a);
        fill_block(&mut p, b);
        fill_block(&mut p, c);
        (p.blocks[0].resident.count(), p.blocks[1].resident.count())
    };
    assert_eq!(resident_after(false), (0, 512));
    assert_eq!(resident_after(true), (512, 0));
}

#[test]
fn a_mixed_allocation_reads_remotely_until_its_block_is_hot() {
    let mut p = paging_under(
        64 * MIB,
        Runtime::Adaptive {
            migrate_threshold: 4,
        },
    );
    let base = p.add_allocation(0, 4 * MIB);
    p.set_plan(0, Plan::HotInVram, 0);
    let mut faults = Vec::new();
    for i in 0..3 {
        let t = p.touch_run(base + i * 16, 1, AccessKind::Read, 0, &mut faults, 256);
        assert_eq!(t.remote, 1, "read {i} of a cold block is remote");
    }
    assert!(faults.is_empty());
    // The fourth read reaches the threshold: the block is hot and migrates.
    p.touch_run(base + 48, 1, AccessKind::Read, 0, &mut faults, 256);
    assert_eq!(faults, [base + 48]);
    // The other block is still cold; a write migrates at once.
    faults.clear();
    p.touch_run(base + 512, 1, AccessKind::Write, 0, &mut faults, 256);
    assert_eq!(faults, [base + 512]);
}

#[test]
fn the_coarse_runtime_switches_every_tenants_allocations_at_once() {
    let mut p = paging_under(
        2 * MIB,
        Runtime::AdaptiveCoarse {
            migrate_threshold: 8,
        },
    );
    let base = p.add_allocation(0, 8 * MIB);
    p.add_allocation(1, 2 * MIB);
    for i in 0..40u64 {
        let mut faults = Vec::new();
        p.touch_run(
            base + (i * 67 + 13) % 128 * 16,
            1,
            AccessKind::Read,
            i,
            &mut faults,
            256,
        );
        p.service(&faults, i);
    }
    let (random, other) = (&p.allocations(0)[0], &p.allocations(1)[0]);
    assert_eq!(
        (random.pattern, other.pattern),
        (Pattern::Random, Pattern::Undecided)
    );
    assert_eq!(
        (random.plan, other.plan),
        (Plan::HotInVram, Plan::HotInVram)
    );
}

#[test]
fn a_switch_that_slows_the_tenants_kernels_is_undone_and_never_retried() {
    let mut p = paging_under(64 * MIB, ADAPTIVE);
    p.add_allocation(0, 4 * MIB);
    p.checkpoint_ns = Some(0);
    // Four kernels at slowdown 2 under the configured plan: the baseline.
    let mut now = 0;
    let kernel = |p: &mut Paging, now: &mut u64, slowdown: u64| {
        *now += 100 * slowdown;
        p.kernel_finished(0, *now, 100 * slowdown, 100);
    };
    for _ in 0..4 {
        kernel(&mut p, &mut now, 2);
    }
    p.set_plan(0, Plan::Tree, now);
    p.trials[0].start(vec![(0, Plan::Configured, Plan::Tree)]);
    for _ in 0..3 {
        kernel(&mut p, &mut now, 3);
    }
    assert_eq!(
        p.allocations(0)[0].plan,
        Plan::Tree,
        "judged after four kernels"
    );
    kernel(&mut p, &mut now, 3);
    let report = &p.allocations(0)[0];
    assert_eq!(report.plan, Plan::Configured);
    assert_eq!(p.allocs[0].rejected, Plan::Tree.bit());
    assert_eq!(
        report
            .switches
            .iter()
            .map(|(_, plan)| *plan)
            .collect::<Vec<_>>(),
        [Plan::Tree, Plan::Configured]
    );
}

#[test]
fn a_freed_allocation_leaves_the_tree_order_it_was_in() {
    // A and B on the tree plan fill 4 MiB; A is freed; C (tree plan too) needs all of
    // VRAM: B must be the victim, not A's stale place in the order.
    let mut p = paging_under(4 * MIB, ADAPTIVE);
    let a = p.add_allocation(0, 2 * MIB);
    let b = p.add_allocation(0, 2 * MIB);
    let c = p.add_allocation(0, 4 * MIB);
    for alloc in 0..3 {
        p.set_plan(alloc, Plan::Tree, 0);
    }
    // As if VRAM had been full before: no checkpoint replans them.
    p.checkpoint_ns = Some(0);
    fill_block(&mut p, a);
    fill_block(&mut p, b);
    p.free_allocation(a, 2 * MIB);
    fill_block(&mut p, c);
    fill_block(&mut p, c + 512);
    assert_eq!(p.blocks[1].resident.count(), 0, "B made room");
    assert_eq!(
        p.blocks[2].resident.count() + p.blocks[3].resident.count(),
        1024
    );
}

// Review findings of the adaptive runtime: each test failed until its bug was fixed.

/// Feeds `n` oversubscribed kernels of `ns` each (100 ns with the data in VRAM).
fn trial_kernels(t: &mut trial::TenantTrials, n: usize, ns: u64) -> Vec<trial::Verdict> {
    (0..n).map(|_| t.kernel(ns, 100, true)).collect()
}

#[test]
fn stale_trial_baseline_after_measure_old_then_keep() {
    // A trial with no baseline: the new plans (slowdown 2) beat the old ones measured
    // after them (4), so the new plans are put back. The plans in force run at 2.
    const A: trial::Switch = (0, Plan::Configured, Plan::Tree);
    const B: trial::Switch = (1, Plan::Configured, Plan::HostPinned);
    let mut t = trial::TenantTrials::default();
    t.start(vec![A]);
    assert_eq!(
        trial_kernels(&mut t, 4, 200)[3],
        trial::Verdict::MeasureOld(vec![A])
    );
    assert_eq!(
        trial_kernels(&mut t, 4, 400)[3],
        trial::Verdict::Keep(vec![A])
    );
    // The next switch makes the kernels 50 % slower than the plans in force (3 against
    // 2): it must be undone. Its baseline is the last four kernels, which ran under the
    // plans the first trial rejected (4), so it is kept.
    t.start(vec![B]);
    assert_eq!(
        trial_kernels(&mut t, 4, 300)[3],
        trial::Verdict::Undo(vec![B]),
        "judged against the old plans' kernels, not the plans in force"
    );
}

#[test]
fn stale_trial_baseline_after_an_undo_with_a_baseline() {
    // Baseline 2, the new plans run at 3: undone, the plans at 2 come back.
    const A: trial::Switch = (0, Plan::Configured, Plan::Tree);
    const B: trial::Switch = (1, Plan::Configured, Plan::HostPinned);
    let mut t = trial::TenantTrials::default();
    trial_kernels(&mut t, 4, 200);
    t.start(vec![A]);
    assert_eq!(
        trial_kernels(&mut t, 4, 300)[3],
        trial::Verdict::Undo(vec![A])
    );
    // A switch to 3.2 is 60 % slower than the plans in force, but the baseline is the
    // rejected plans' four kernels (3), and 3.2 is within 10 % of that.
    t.start(vec![B]);
    assert_eq!(
        trial_kernels(&mut t, 4, 320)[3],
        trial::Verdict::Undo(vec![B]),
        "judged against the rejected plans' kernels"
    );
}

#[test]
fn a_rejected_plan_is_retried_after_a_second_rejection() {
    let mut p = paging_under(64 * MIB, ADAPTIVE);
    p.add_allocation(0, 8 * MIB);
    p.checkpoint_ns = Some(0);
    let linear: Vec<u32> = (0..16).collect();
    let random: Vec<u32> = (0..16).map(|i| (i * 67 + 13) % 128).collect();
    let mut now = 0;
    // A kernel of `ns` (100 ideal) that migrated `bigs` of allocation 0, in that order.
    let mut kernel = |p: &mut Paging, ns: u64, bigs: &[u32]| {
        for &big in bigs {
            p.detector.faulted(0, big);
        }
        now += ns;
        p.kernel_finished(0, now, ns, 100);
    };
    for _ in 0..4 {
        kernel(&mut p, 200, &[]);
    }
    kernel(&mut p, 200, &linear);
    kernel(&mut p, 200, &linear); // regular: the tree plan, on trial
    for _ in 0..4 {
        kernel(&mut p, 300, &[]);
    }
    assert_eq!(p.allocs[0].rejected, Plan::Tree.bit());
    kernel(&mut p, 200, &random);
    kernel(&mut p, 200, &random); // mixed: hot-in-vram, on trial
    assert_eq!(p.allocs[0].plan, Plan::HotInVram);
    for _ in 0..4 {
        kernel(&mut p, 1000, &[]);
    }
    assert_eq!(p.allocs[0].plan, Plan::Configured);
    for _ in 0..3 {
        kernel(&mut p, 200, &linear); // regular again
    }
    let tried: Vec<Plan> = p.allocs[0].switches.iter().map(|(_, plan)| *plan).collect();
    assert_eq!(
        tried.iter().filter(|plan| **plan == Plan::Tree).count(),
        1,
        "the tree plan was rejected, yet tried again: {tried:?}"
    );
}

#[test]
fn a_freed_allocation_is_replanned_and_holds_its_tenants_trial() {
    let mut p = paging_under(64 * MIB, ADAPTIVE);
    let a = p.add_allocation(0, 8 * MIB);
    p.add_allocation(0, 8 * MIB);
    p.checkpoint_ns = Some(0);
    // A kernel faults 16 scattered big pages of A, then A is freed before it ends.
    for i in 0..16u64 {
        let mut faults = Vec::new();
        p.touch_run(
            a + (i * 67 + 13) % 128 * 16,
            1,
            AccessKind::Read,
            i,
            &mut faults,
            256,
        );
        p.service(&faults, i);
    }
    p.free_allocation(a, 8 * MIB);
    p.kernel_finished(0, 100, 100, 100);
    assert_eq!(
        (p.allocs[0].plan, p.stats(0).plan_switches),
        (Plan::Configured, 0),
        "a freed allocation was switched"
    );
    assert!(
        !p.trials[0].busy(),
        "the tenant's trial of a freed allocation blocks its live allocations' switches"
    );
}
