//! The access profiler of the GPUswap dissertation (chapter 4) on the simulated GPU, and
//! the buffer and chunk priorities it derives for the `priority-*` chunk policies.
//!
//! # Method
//! For every kernel launch of a program, the profiler repeats the kernel once per unit
//! (a 4 KiB page, a chunk or a whole buffer) of every buffer the kernel accesses, each
//! time with exactly that unit relocated to host memory and everything else in VRAM, and
//! reads the GPU's performance counters of host-memory reads and writes: what they count
//! is the number of accesses to the unit. The hardware counts reads and writes in
//! separate repetitions, so every unit costs two repetitions per launch. Units of buffers
//! a launch does not access count zero for it (the kernel's arguments say which buffers
//! it may touch, so those need no repetition).
//!
//! # Counts
//! On the simulated GPU the counters of a repetition are the remote transactions of the
//! timing model: a unit's reads in one launch are the access's `read_bytes` times the
//! share of the access's distribution that falls in the unit, over
//! [`READ_TRANSACTION_BYTES`](crate::timing::READ_TRANSACTION_BYTES); writes likewise
//! over the bytes one write transaction carries in the access's order
//! ([`write_transaction_bytes`](crate::timing::write_transaction_bytes)). Shares come
//! from [`timing::weighted_ranges`](crate::timing::weighted_ranges), the form
//! `timing::local_fraction` works on, with each range's weight spread evenly over its
//! bytes. The simulator is a fluid model, so counts are expected values and may be
//! fractional.
//!
//! # Profiling time
//! One repetition costs the kernel's run time with that unit remote (its fixed part and
//! its remote flows side by side, as the engine runs a kernel alone on the device),
//! relocating the unit to host memory and back (two DMA copies, each with the driver's
//! relocation cost) and restoring the inputs the kernel overwrites (kernels often work in
//! place): a device-to-device copy of the application buffers it writes. The slowdown
//! compares that with one normal run of the same launches with everything in VRAM.
//!
//! # Priorities
//! As in the dissertation: each buffer's accesses per page (reads plus writes over its
//! 4 KiB pages, a partial last page counting as one), buffers sorted by it in descending
//! order, the highest getting the highest priority. Priorities are `1` (lowest) to the
//! number of buffers, every buffer its own: ties get adjacent priorities, the buffer
//! allocated first getting the higher one. Chunk priorities (for `priority-chunk`) rank
//! every chunk of every buffer the same way, ties ordered by allocation and then by
//! offset; they are derived at chunk and page granularity (page counts add up to chunks
//! of the given chunk size), not at buffer granularity, which cannot tell chunks apart.
//! They refer to chunks of that chunk size, so a scenario should use the same
//! `chunk_size`.

mod cost;
mod counts;
mod rank;
#[cfg(test)]
mod test_support;

use std::collections::BTreeMap;

use gpuswap_core::chunk_layout;

use crate::preset::Preset;
use crate::program::{BufferSpec, Program, Slot};
use crate::runtime::{Instr, flatten};
use crate::timing::Traffic;
use cost::{kernel_ns, relocation_ns, restore_ns};
use counts::{
    accessed_slots, add_scaled, allocation_order, launch_counts, moved_per_unit, transactions,
};
pub use rank::PAGE_BYTES;
use rank::{chunk_priorities, per_page, rank};

/// What one repetition relocates to host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    /// One 4 KiB page ([`PAGE_BYTES`]).
    Page,
    /// One chunk of the chunk size given to [`profile`] (the remainder chunk last).
    Chunk,
    /// A whole buffer.
    Buffer,
}

impl Granularity {
    /// The name used on the command line and in priorities files.
    pub fn name(self) -> &'static str {
        match self {
            Granularity::Page => "page",
            Granularity::Chunk => "chunk",
            Granularity::Buffer => "buffer",
        }
    }

    /// The size of one unit of a buffer of `buffer_bytes`, with chunks of `chunk_bytes`.
    fn unit_bytes(self, buffer_bytes: u64, chunk_bytes: u64) -> u64 {
        match self {
            Granularity::Page => PAGE_BYTES,
            Granularity::Chunk => chunk_bytes,
            // One unit for the whole buffer (`max` keeps an empty buffer's layout defined).
            Granularity::Buffer => buffer_bytes.max(1),
        }
    }
}

/// The counters read for one unit, summed over every launch.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitProfile {
    /// The buffer's label.
    pub label: String,
    /// Where the unit starts in its buffer.
    pub offset_bytes: u64,
    /// The unit's size.
    pub bytes: u64,
    /// Host-memory read transactions with only this unit in host memory.
    pub reads: f64,
    /// Host-memory write transactions with only this unit in host memory.
    pub writes: f64,
}

/// One buffer's totals and the priority derived from them.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferProfile {
    /// The buffer's label.
    pub label: String,
    /// The buffer's size.
    pub bytes: u64,
    /// Read transactions summed over the buffer's units.
    pub reads: f64,
    /// Write transactions summed over the buffer's units.
    pub writes: f64,
    /// Reads plus writes over the buffer's 4 KiB pages: what priorities rank.
    pub accesses_per_page: f64,
    /// The derived priority: 1 is evicted first.
    pub priority: i32,
}

/// The result of profiling one program.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// The granularity profiled at.
    pub granularity: Granularity,
    /// Every unit of every allocated buffer, buffers in allocation order, units in address
    /// order.
    pub units: Vec<UnitProfile>,
    /// Every allocated buffer, in allocation order.
    pub buffers: Vec<BufferProfile>,
    /// Kernel launches profiled (loops unrolled).
    pub launches: u64,
    /// Kernel repetitions the profiler ran: two per unit of an accessed buffer per launch.
    pub repetitions: u64,
    /// Simulated time of all repetitions with their relocations and restores.
    pub profiling_ns: u64,
    /// Simulated time of the same launches run once with everything in VRAM.
    pub normal_ns: u64,
    /// `profiling_ns / normal_ns` (0 for a program without launches).
    pub slowdown: f64,
    /// Buffer label to priority.
    pub priorities: BTreeMap<String, i32>,
    /// Buffer label to one priority per chunk (empty at buffer granularity).
    pub chunk_priorities: BTreeMap<String, Vec<i32>>,
}

/// Profiles `program` on `preset` at `granularity`; `chunk_bytes` sizes the chunk
/// granularity's units and the chunks of [`Profile::chunk_priorities`].
///
/// `program` should be a validated program wrapped with [`crate::runtime::with_runtime`],
/// so that the runtime's system buffers are profiled too, and built with one repetition
/// of its phase: one phase iteration, with the setup and teardown launches, is the
/// profile. Buffer labels are assumed unique (priorities refer to buffers by label).
pub fn profile(
    program: &Program,
    preset: &Preset,
    granularity: Granularity,
    chunk_bytes: u64,
) -> Profile {
    assert!(chunk_bytes > 0, "chunk size must be positive");
    let buffers = &program.buffers;
    let instrs = flatten(program.ops.clone());
    let repeated = repeat(program, preset, &instrs, granularity, chunk_bytes);
    let order = allocation_order(&instrs, buffers.len());
    let units = unit_profiles(buffers, &order, &repeated.unit_moved, |slot| {
        granularity.unit_bytes(buffers[slot].bytes, chunk_bytes)
    });
    let profiled_buffers = buffer_profiles(buffers, &order, &repeated.unit_moved);
    let chunk_priorities = match granularity {
        Granularity::Buffer => BTreeMap::new(),
        Granularity::Chunk => chunk_priorities(program, &order, &repeated.unit_moved, chunk_bytes),
        Granularity::Page => chunk_priorities(program, &order, &repeated.chunk_moved, chunk_bytes),
    };
    let Repeated {
        launches,
        repetitions,
        profiling_ns,
        normal_ns,
        ..
    } = repeated;
    Profile {
        granularity,
        units,
        priorities: profiled_buffers
            .iter()
            .map(|b| (b.label.clone(), b.priority))
            .collect(),
        buffers: profiled_buffers,
        launches,
        repetitions,
        profiling_ns,
        normal_ns,
        slowdown: if normal_ns == 0 {
            0.0
        } else {
            profiling_ns as f64 / normal_ns as f64
        },
        chunk_priorities,
    }
}

/// What the repetitions of every launch counted and cost.
struct Repeated {
    /// Per buffer and unit, the traffic the unit makes remote when it alone is in host
    /// memory, summed over launches.
    unit_moved: Vec<Vec<Traffic>>,
    /// The same per chunk, at page granularity, where chunk priorities need counts per
    /// chunk as well; empty at the other granularities.
    chunk_moved: Vec<Vec<Traffic>>,
    launches: u64,
    repetitions: u64,
    profiling_ns: u64,
    normal_ns: u64,
}

/// Runs the repetitions of every launch of `instrs` (the flattened `program`), units of
/// `granularity`, and the same launches once with everything in VRAM.
fn repeat(
    program: &Program,
    preset: &Preset,
    instrs: &[Instr],
    granularity: Granularity,
    chunk_bytes: u64,
) -> Repeated {
    let buffers = &program.buffers;
    let unit_bytes_of = |slot: Slot| granularity.unit_bytes(buffers[slot].bytes, chunk_bytes);
    let zeros = |unit_of: &dyn Fn(Slot) -> u64| -> Vec<Vec<Traffic>> {
        (0..buffers.len())
            .map(|s| vec![Traffic::default(); buffers[s].bytes.div_ceil(unit_of(s)) as usize])
            .collect()
    };
    let page_to_chunks = granularity == Granularity::Page;
    let mut repeated = Repeated {
        unit_moved: zeros(&unit_bytes_of),
        chunk_moved: if page_to_chunks {
            zeros(&|_| chunk_bytes)
        } else {
            Vec::new()
        },
        launches: 0,
        repetitions: 0,
        profiling_ns: 0,
        normal_ns: 0,
    };
    for (kernel, times) in launch_counts(instrs) {
        repeated.launches += times;
        let mut all_local = Traffic::default();
        for access in &kernel.accesses {
            all_local.add(access, 1.0);
        }
        repeated.normal_ns += times * kernel_ns(preset, &kernel, &all_local);
        let restore_ns = restore_ns(preset, program, &kernel);
        for slot in accessed_slots(&kernel) {
            let (bytes, unit_bytes) = (buffers[slot].bytes, unit_bytes_of(slot));
            let moved = moved_per_unit(&kernel, slot, bytes, unit_bytes);
            // Reads and writes are counted in separate repetitions.
            repeated.repetitions += 2 * times * moved.len() as u64;
            let units = chunk_layout(bytes, unit_bytes).map(|(_, unit_bytes)| unit_bytes);
            for (alike, (unit_bytes, moved)) in runs(units.zip(moved.iter().copied())) {
                let traffic = Traffic {
                    local_bytes: (all_local.local_bytes - moved.remote_bytes_vram_would_move())
                        .max(0.0),
                    ..moved
                };
                let repetition_ns = kernel_ns(preset, &kernel, &traffic)
                    + relocation_ns(preset, unit_bytes)
                    + restore_ns;
                repeated.profiling_ns += 2 * times * alike * repetition_ns;
            }
            add_scaled(&mut repeated.unit_moved[slot], &moved, times);
            if page_to_chunks {
                let moved = moved_per_unit(&kernel, slot, bytes, chunk_bytes);
                add_scaled(&mut repeated.chunk_moved[slot], &moved, times);
            }
        }
    }
    repeated
}

/// The runs of equal items of `items`, each as (its length, the item): alike units
/// (pages of a buffer often are) cost alike, so each run of them is timed once.
fn runs<T: PartialEq>(items: impl Iterator<Item = T>) -> impl Iterator<Item = (u64, T)> {
    let mut items = items.peekable();
    std::iter::from_fn(move || {
        let item = items.next()?;
        let mut alike = 1;
        while items.next_if_eq(&item).is_some() {
            alike += 1;
        }
        Some((alike, item))
    })
}

/// Every unit of the buffers in `order`, with the counters `unit_moved` gives it.
fn unit_profiles(
    buffers: &[BufferSpec],
    order: &[Slot],
    unit_moved: &[Vec<Traffic>],
    unit_bytes_of: impl Fn(Slot) -> u64,
) -> Vec<UnitProfile> {
    order
        .iter()
        .flat_map(|&slot| {
            let label = &buffers[slot].label;
            chunk_layout(buffers[slot].bytes, unit_bytes_of(slot))
                .zip(&unit_moved[slot])
                .map(|((offset_bytes, bytes), &moved)| {
                    let (reads, writes) = transactions(&moved);
                    UnitProfile {
                        label: label.clone(),
                        offset_bytes,
                        bytes,
                        reads,
                        writes,
                    }
                })
        })
        .collect()
}

/// The buffers in `order` with their units' counters summed and the priorities ranked
/// from them.
fn buffer_profiles(
    buffers: &[BufferSpec],
    order: &[Slot],
    unit_moved: &[Vec<Traffic>],
) -> Vec<BufferProfile> {
    let buffer_accesses: Vec<(f64, f64)> = order
        .iter()
        .map(|&slot| {
            unit_moved[slot]
                .iter()
                .map(transactions)
                .fold((0.0, 0.0), |(r, w), (ur, uw)| (r + ur, w + uw))
        })
        .collect();
    let buffer_priorities = rank(
        &order
            .iter()
            .zip(&buffer_accesses)
            .map(|(&slot, &(r, w))| per_page(r + w, buffers[slot].bytes))
            .collect::<Vec<_>>(),
    );
    order
        .iter()
        .zip(&buffer_accesses)
        .zip(&buffer_priorities)
        .map(|((&slot, &(reads, writes)), &priority)| BufferProfile {
            label: buffers[slot].label.clone(),
            bytes: buffers[slot].bytes,
            reads,
            writes,
            accesses_per_page: per_page(reads + writes, buffers[slot].bytes),
            priority,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::apps;
    use crate::program::{Access, Op};

    #[test]
    fn counts_equal_every_apps_modelled_traffic_and_priorities_follow_accesses_per_page() {
        for app in apps::all() {
            // "rodinia" keeps the Rodinia apps quick in debug builds; the synthetic apps
            // have only "default".
            let size = if app.sizes_help().contains("rodinia") {
                "rodinia"
            } else {
                "default"
            };
            let program = app_program(app.name(), size);
            let profile = profile(&program, &gtx480(), Granularity::Chunk, 4 << 20);
            let name = app.name();

            let mut model = vec![(0.0, 0.0); program.buffers.len()];
            model_traffic(&program.ops, &mut model, 1.0);
            let mut expected_per_page = BTreeMap::new();
            for (spec, &(reads, writes)) in program.buffers.iter().zip(&model) {
                let units = profile.units.iter().filter(|u| u.label == spec.label);
                let (r, w) = units.fold((0.0, 0.0), |(r, w), u| (r + u.reads, w + u.writes));
                assert!(
                    close(r, reads),
                    "{name} {}: reads {r} vs {reads}",
                    spec.label
                );
                assert!(
                    close(w, writes),
                    "{name} {}: writes {w} vs {writes}",
                    spec.label
                );
                let pages = spec.bytes.div_ceil(PAGE_BYTES) as f64;
                expected_per_page.insert(spec.label.clone(), (reads + writes) / pages);
            }

            // Every buffer gets its own priority, 1 to n.
            let mut all: Vec<i32> = profile.priorities.values().copied().collect();
            all.sort_unstable();
            let n = program.buffers.len() as i32;
            assert_eq!(
                all,
                (1..=n).collect::<Vec<_>>(),
                "{name}: one label per buffer"
            );
            // More accesses per page, higher priority; ties take adjacent priorities.
            for (a, pa) in &expected_per_page {
                let ties: Vec<i32> = expected_per_page
                    .iter()
                    .filter(|(_, pb)| close(**pb, *pa))
                    .map(|(b, _)| profile.priorities[b])
                    .collect();
                let spread = ties.iter().max().unwrap() - ties.iter().min().unwrap();
                assert_eq!(
                    spread as usize,
                    ties.len() - 1,
                    "{name}: ties of {a} adjacent"
                );
                for (b, pb) in &expected_per_page {
                    if pa > pb && !close(*pa, *pb) {
                        assert!(
                            profile.priorities[a] > profile.priorities[b],
                            "{name}: {a} ({pa}/page) above {b} ({pb}/page)"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn units_tile_buffers_in_allocation_order_with_the_remainder_chunk_last() {
        let mut program = one_kernel(10 << 20, vec![Access::uniform(0, 10 << 20, 0)]);
        // A second buffer, allocated first and never accessed: listed, counted zero,
        // ranked lowest.
        let idle = program.buffer("idle", 1 << 20);
        program.ops.insert(0, Op::Alloc(idle));
        program.ops.push(Op::Free(idle));
        let p = profile(&program, &gtx480(), Granularity::Chunk, 4 << 20);
        let layout: Vec<_> = p
            .units
            .iter()
            .map(|u| (u.label.as_str(), u.offset_bytes, u.bytes))
            .collect();
        assert_eq!(
            layout,
            [
                ("idle", 0, 1 << 20),
                ("a", 0, 4 << 20),
                ("a", 4 << 20, 4 << 20),
                ("a", 8 << 20, 2 << 20)
            ]
        );
        // 10 MiB read uniformly in 128-byte lines: 81920 reads, split by chunk size.
        assert_eq!(reads(&p), [0.0, 32768.0, 32768.0, 16384.0]);
        assert_eq!(
            p.priorities,
            BTreeMap::from([("a".into(), 2), ("idle".into(), 1)])
        );
        // The remainder chunk has as many accesses per page as the others here.
        assert_eq!(p.chunk_priorities["a"], [4, 3, 2]);
        assert_eq!(p.chunk_priorities["idle"], [1]);
        // Only the accessed buffer is repeated: 3 chunks, reads and writes.
        assert_eq!((p.launches, p.repetitions), (1, 6));
    }

    #[test]
    fn profiling_is_deterministic() {
        let program = app_program("srad_v2", "rodinia");
        let once = profile(&program, &gtx480(), Granularity::Page, 4 << 20);
        assert_eq!(
            once,
            profile(&program, &gtx480(), Granularity::Page, 4 << 20)
        );
    }
}
