//! A fault log as a tenant program: the simulated device touches the logged pages, batch
//! by batch, in the logged order.
//!
//! How (each a choice of ours):
//! - **Buffers.** The 2 MiB VA blocks holding a logged fault, consecutive ones merged,
//!   are the managed allocations: one buffer per region, labelled with its start
//!   address. A block is the unit the driver's prefetcher and eviction work in, so this
//!   is what paging sees of the program's allocations. The log's VA range lines are not
//!   used: uvm-eval's CSV keeps those at the end of the kernel log only, and some belong
//!   to other processes.
//! - **Kernels.** One per logged batch, touching the batch's distinct pages once each in
//!   address order (the driver sorts a batch by address): per buffer one access for the
//!   pages read and one for those written (writes and atomics; a page faulted both ways
//!   is written), its runs of consecutive pages as ranges, so that the cost follows the
//!   runs, not the pages. A batch without faults launches nothing.
//! - **No computation.** The log does not say what the program computed between
//!   batches, so the kernels carry none (`ops` 0): the replay's time is its faults'.

use std::collections::{BTreeMap, BTreeSet};

use gpuswap_core::uvm::pages::{PAGE_BYTES, PAGES_PER_BLOCK};

use super::faults::{Batch, FaultLog};
use crate::program::{Access, AccessOrder, Distribution, Kernel, Op, Program, WeightedRange};

/// Pages of a 2 MiB VA block.
const BLOCK_PAGES: u64 = PAGES_PER_BLOCK as u64;

impl Batch {
    /// Its distinct pages (address / 4 KiB), each with whether a fault on it wrote, in
    /// address order.
    pub fn pages(&self) -> BTreeMap<u64, bool> {
        let mut pages = BTreeMap::new();
        for fault in &self.faults {
            *pages.entry(fault.address / PAGE_BYTES).or_insert(false) |= fault.access.writes();
        }
        pages
    }
}

impl FaultLog {
    /// Each batch's faults as the simulator counts them: its distinct pages. The driver
    /// lists a page once per uTLB that faulted on it; the simulated device has no uTLBs.
    pub fn faults_per_batch(&self) -> Vec<u64> {
        self.batches
            .iter()
            .map(|b| b.pages().len() as u64)
            .collect()
    }

    /// How the replay is timed, for a report: the log's kernels are not in it.
    pub const TIMING: &'static str = "simulated: the log holds no computation between its batches, so the replay's time is its faults' service (the logged timestamps are not replayed)";

    /// The first and last fault timestamps (ns, the GPU's timer).
    pub fn time_span_ns(&self) -> (u64, u64) {
        let times = self
            .batches
            .iter()
            .flat_map(|b| &b.faults)
            .map(|f| f.timestamp_ns);
        (times.clone().min().unwrap_or(0), times.max().unwrap_or(0))
    }

    /// The program that replays the log (see the module documentation).
    pub fn program(&self) -> Program {
        let blocks: BTreeSet<u64> = self
            .batches
            .iter()
            .flat_map(|b| &b.faults)
            .map(|f| f.address / PAGE_BYTES / BLOCK_PAGES)
            .collect();
        let regions = runs(blocks);
        let mut program = Program::default();
        let block_bytes = BLOCK_PAGES * PAGE_BYTES;
        for (first, blocks) in &regions {
            program.buffer(format!("{:#x}", first * block_bytes), blocks * block_bytes);
        }
        program.ops = (0..regions.len()).map(Op::Alloc).collect();
        for (i, batch) in self.batches.iter().enumerate() {
            let accesses = accesses(&batch.pages(), &regions);
            if !accesses.is_empty() {
                program.ops.push(Op::Launch(Kernel {
                    name: format!("batch {i}"),
                    ops: 0,
                    accesses,
                    phases: Vec::new(),
                    outer_loop: Default::default(),
                }));
            }
        }
        // cudaFree waits for the kernels.
        program.ops.extend((0..regions.len()).map(Op::Free));
        program
    }
}

/// A batch's accesses to the buffers of `regions` (`(first block, blocks)`, one per
/// slot): per buffer, the pages read, then those written, each touched once in address
/// order.
fn accesses(pages: &BTreeMap<u64, bool>, regions: &[(u64, u64)]) -> Vec<Access> {
    // Pages by (slot, written), as offsets in the buffer, ascending.
    let mut groups: BTreeMap<(usize, bool), Vec<u64>> = BTreeMap::new();
    for (&page, &writes) in pages {
        let block = page / BLOCK_PAGES;
        // Every faulted block lies in a region.
        let slot = regions
            .partition_point(|(first, _)| *first <= block)
            .saturating_sub(1);
        let offset = page - regions[slot].0 * BLOCK_PAGES;
        groups.entry((slot, writes)).or_default().push(offset);
    }
    groups
        .into_iter()
        .map(|((slot, writes), offsets)| {
            let bytes = offsets.len() as u64 * PAGE_BYTES;
            let ranges = runs(offsets)
                .into_iter()
                .map(|(first, pages)| WeightedRange {
                    offset_bytes: first * PAGE_BYTES,
                    bytes: pages * PAGE_BYTES,
                    // Every touched page weighs the same.
                    weight: (pages * PAGE_BYTES) as f64,
                })
                .collect();
            Access {
                slot,
                read_bytes: if writes { 0 } else { bytes },
                reread_bytes: 0,
                write_bytes: if writes { bytes } else { 0 },
                rewrite_bytes: 0,
                distribution: Distribution::Ranges(ranges),
                order: AccessOrder::Linear,
            }
        })
        .collect()
}

/// Ascending distinct numbers as runs of consecutive ones, `(first, length)`.
fn runs(ascending: impl IntoIterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for n in ascending {
        match runs.last_mut() {
            Some((first, len)) if *first + *len == n => *len += 1,
            _ => runs.push((n, 1)),
        }
    }
    runs
}
