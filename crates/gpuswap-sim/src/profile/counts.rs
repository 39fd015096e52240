//! What the counters read: the launches and how often each runs, the buffers in
//! allocation order, and the bytes each unit alone in host memory would make remote.

use std::rc::Rc;

use crate::program::{Kernel, Slot};
use crate::runtime::Instr;
use crate::timing::{self, Traffic};

/// Every launch instruction with the number of times it runs (the product of its
/// enclosing loops' counts). Repeated launches share their kernel, so the profiler works
/// out each one once and scales it.
pub(super) fn launch_counts(instrs: &[Instr]) -> Vec<(Rc<Kernel>, u64)> {
    let mut enclosing = vec![1u64];
    let mut out = Vec::new();
    for instr in instrs {
        let times = *enclosing
            .last()
            .expect("the outermost level is never popped");
        match instr {
            Instr::LoopStart { times: n, .. } => enclosing.push(times * u64::from(*n)),
            Instr::LoopEnd { .. } => {
                enclosing.pop();
            }
            Instr::Launch(kernel) => out.push((Rc::clone(kernel), times)),
            _ => {}
        }
    }
    out
}

/// Slots in the order of their first allocation; buffers never allocated are left out
/// (they have no memory to profile).
pub(super) fn allocation_order(instrs: &[Instr], buffers: usize) -> Vec<Slot> {
    let mut seen = vec![false; buffers];
    let mut order = Vec::new();
    for instr in instrs {
        if let Instr::Alloc(slot) = instr
            && !std::mem::replace(&mut seen[*slot], true)
        {
            order.push(*slot);
        }
    }
    order
}

/// The buffers a kernel accesses, each once, in slot order.
pub(super) fn accessed_slots(kernel: &Kernel) -> Vec<Slot> {
    let mut slots: Vec<Slot> = kernel.accesses.iter().map(|a| a.slot).collect();
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// The remote traffic each unit of `unit_bytes` of buffer `slot` (of `buffer_bytes`)
/// alone in host memory would cause in one launch of `kernel`.
pub(super) fn moved_per_unit(
    kernel: &Kernel,
    slot: Slot,
    buffer_bytes: u64,
    unit_bytes: u64,
) -> Vec<Traffic> {
    let mut moved = vec![Traffic::default(); buffer_bytes.div_ceil(unit_bytes) as usize];
    for access in kernel.accesses.iter().filter(|a| a.slot == slot) {
        let ranges = || timing::weighted_ranges(&access.distribution, buffer_bytes);
        let total_weight: f64 = ranges().map(|(_, _, weight)| weight).sum();
        for (offset, bytes, weight) in ranges() {
            let share_per_byte = weight / total_weight / bytes as f64;
            // A validated program's ranges lie inside the buffer; clamping keeps any other
            // from indexing past the last unit.
            let end = offset.saturating_add(bytes).min(buffer_bytes);
            let mut start = offset;
            while start < end {
                let unit = start / unit_bytes;
                let unit_end = ((unit + 1) * unit_bytes).min(end);
                let share = share_per_byte * (unit_end - start) as f64;
                moved[unit as usize].add_remote_share(access, share);
                start = unit_end;
            }
        }
    }
    moved
}

/// Adds `times` launches' worth of `moved` to `sums`.
pub(super) fn add_scaled(sums: &mut [Traffic], moved: &[Traffic], times: u64) {
    for (sum, unit) in sums.iter_mut().zip(moved) {
        sum.add_scaled(unit, times as f64);
    }
}

/// Remote traffic as the counters see it: (read transactions, write transactions).
pub(super) fn transactions(moved: &Traffic) -> (f64, f64) {
    (moved.remote_reads(), moved.remote_write_transactions)
}

#[cfg(test)]
mod tests {
    use crate::profile::test_support::*;
    use crate::profile::{Granularity, PAGE_BYTES, profile};
    use crate::program::{Access, Distribution, Op, WeightedRange};

    #[test]
    fn the_last_partial_page_gets_its_share() {
        // 10000 bytes: pages of 4096, 4096 and 1808 bytes; written uniformly in linear
        // order, so in whole 128-byte lines.
        let program = one_kernel(10_000, vec![Access::uniform(0, 0, 10_000)]);
        let p = profile(&program, &gtx480(), Granularity::Page, 4 << 20);
        let writes: Vec<f64> = p.units.iter().map(|u| u.writes).collect();
        all_close(&writes, &[32.0, 32.0, 14.125]);
        assert_eq!(p.units[2].bytes, 1808);
        // At buffer granularity the one unit holds it all.
        let p = profile(&program, &gtx480(), Granularity::Buffer, 4 << 20);
        assert_eq!(p.units.len(), 1);
        assert!(close(p.units[0].writes, 78.125));
        assert!(p.chunk_priorities.is_empty());
    }

    #[test]
    fn ranges_and_profiles_split_by_weight_and_overlap() {
        let range = |offset_bytes, bytes, weight| WeightedRange {
            offset_bytes,
            bytes,
            weight,
        };
        // Weight 1 on half of page 1 and weight 3 on page 2; pages 0 and 3 untouched.
        let ranges = Distribution::Ranges(vec![range(4096, 2048, 1.0), range(8192, 4096, 3.0)]);
        let program = one_kernel(
            4 * PAGE_BYTES,
            vec![Access {
                distribution: ranges,
                ..Access::uniform(0, 128 * 400, 0)
            }],
        );
        let p = profile(&program, &gtx480(), Granularity::Page, 4 << 20);
        all_close(&reads(&p), &[0.0, 100.0, 300.0, 0.0]);

        // A profile over 8 KiB rows (the last one 4 KiB): each row's weight splits evenly
        // over its two pages.
        let rows = Distribution::Profile {
            page_bytes: 2 * PAGE_BYTES,
            weights: vec![1.0, 0.0, 2.0],
        };
        let program = one_kernel(
            5 * PAGE_BYTES,
            vec![Access {
                distribution: rows,
                ..Access::uniform(0, 128 * 300, 0)
            }],
        );
        let p = profile(&program, &gtx480(), Granularity::Page, 2 * PAGE_BYTES);
        all_close(&reads(&p), &[50.0, 50.0, 0.0, 0.0, 200.0]);
        // Pages add up to chunks: two 8 KiB chunks and a 4 KiB remainder.
        let by_chunk = profile(&program, &gtx480(), Granularity::Chunk, 2 * PAGE_BYTES);
        all_close(&reads(&by_chunk), &[100.0, 0.0, 200.0]);
        assert_eq!(p.chunk_priorities, by_chunk.chunk_priorities);
        assert_eq!(p.chunk_priorities["a"], [2, 1, 3]);
    }

    #[test]
    fn launches_in_loops_count_once_per_run() {
        let mut program = one_kernel(PAGE_BYTES, vec![Access::uniform(0, 128, 0)]);
        let launch = program.ops.remove(1);
        program.ops.insert(
            1,
            Op::Repeat {
                times: 3,
                body: vec![Op::Repeat {
                    times: 2,
                    body: vec![launch],
                }],
            },
        );
        let p = profile(&program, &gtx480(), Granularity::Page, 4 << 20);
        assert_eq!((p.launches, p.repetitions), (6, 12));
        assert_eq!(reads(&p), [6.0]);
    }
}
