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
//! [`READ_TRANSACTION_BYTES`]; writes likewise over [`WRITE_TRANSACTION_BYTES`]. Shares
//! come from [`timing::weighted_ranges`], the form `timing::local_fraction` works on, with
//! each range's weight spread evenly over its bytes. The simulator is a fluid model, so
//! counts are expected values and may be fractional.
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

use std::collections::BTreeMap;
use std::rc::Rc;

use gpuswap_core::{BufferKind, chunk_layout};

use crate::link::size_curve_bytes_per_s;
use crate::preset::Preset;
use crate::program::{Kernel, Program, Slot};
use crate::runtime::{Instr, flatten};
use crate::timing::{self, READ_TRANSACTION_BYTES, Traffic, WRITE_TRANSACTION_BYTES};

/// The GTX 480's small page (gpuswap.md): the unit of page granularity and the page of
/// "accesses per page".
pub const PAGE_BYTES: u64 = 4 << 10;

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
    let instrs = flatten(&program.ops);
    let unit_bytes_of = |slot: Slot| match granularity {
        Granularity::Page => PAGE_BYTES,
        Granularity::Chunk => chunk_bytes,
        // One unit for the whole buffer (`max` keeps an empty buffer's layout defined).
        Granularity::Buffer => buffers[slot].bytes.max(1),
    };
    // Bytes each unit moves when it alone is remote, summed over launches: (read, write).
    let zeros = |unit_of: &dyn Fn(Slot) -> u64| -> Vec<Vec<(f64, f64)>> {
        (0..buffers.len())
            .map(|s| vec![(0.0, 0.0); buffers[s].bytes.div_ceil(unit_of(s)) as usize])
            .collect()
    };
    let mut unit_moved = zeros(&unit_bytes_of);
    // At page granularity chunk priorities need counts per chunk as well.
    let page_to_chunks = granularity == Granularity::Page;
    let mut chunk_moved = if page_to_chunks {
        zeros(&|_| chunk_bytes)
    } else {
        Vec::new()
    };

    let (mut launches, mut repetitions, mut profiling_ns, mut normal_ns) = (0, 0, 0, 0);
    for (kernel, times) in launch_counts(&instrs) {
        launches += times;
        let mut all_local = Traffic::default();
        for access in &kernel.accesses {
            all_local.add(access.read_bytes, access.write_bytes, 1.0);
        }
        normal_ns += times * kernel_ns(preset, kernel.ops, &all_local);
        let restore_ns = restore_ns(preset, program, &kernel);
        for slot in accessed_slots(&kernel) {
            let bytes = buffers[slot].bytes;
            let moved = moved_per_unit(&kernel, slot, bytes, unit_bytes_of(slot));
            // Reads and writes are counted in separate repetitions.
            repetitions += 2 * times * moved.len() as u64;
            // Alike units (pages of a buffer often are) cost alike: each run of them is
            // timed once.
            let mut units = chunk_layout(bytes, unit_bytes_of(slot))
                .zip(&moved)
                .map(|((_, unit_bytes), &(read, write))| (unit_bytes, read, write))
                .peekable();
            while let Some(unit) = units.next() {
                let mut alike = 1;
                while units.next_if_eq(&unit).is_some() {
                    alike += 1;
                }
                let (unit_bytes, read, write) = unit;
                let traffic = Traffic {
                    local_bytes: (all_local.local_bytes - read - write).max(0.0),
                    remote_read_bytes: read,
                    remote_write_bytes: write,
                };
                let repetition_ns = kernel_ns(preset, kernel.ops, &traffic)
                    + relocation_ns(preset, unit_bytes)
                    + restore_ns;
                profiling_ns += 2 * times * alike * repetition_ns;
            }
            add_scaled(&mut unit_moved[slot], &moved, times);
            if page_to_chunks {
                let moved = moved_per_unit(&kernel, slot, bytes, chunk_bytes);
                add_scaled(&mut chunk_moved[slot], &moved, times);
            }
        }
    }

    let order = allocation_order(&instrs, buffers.len());
    let units: Vec<UnitProfile> = order
        .iter()
        .flat_map(|&slot| {
            let label = &buffers[slot].label;
            chunk_layout(buffers[slot].bytes, unit_bytes_of(slot))
                .zip(&unit_moved[slot])
                .map(|((offset_bytes, bytes), &moved)| {
                    let (reads, writes) = transactions(moved);
                    UnitProfile {
                        label: label.clone(),
                        offset_bytes,
                        bytes,
                        reads,
                        writes,
                    }
                })
        })
        .collect();

    let buffer_accesses: Vec<(f64, f64)> = order
        .iter()
        .map(|&slot| {
            unit_moved[slot]
                .iter()
                .map(|&moved| transactions(moved))
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
    let profiled_buffers: Vec<BufferProfile> = order
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
        .collect();

    let chunk_priorities = match granularity {
        Granularity::Buffer => BTreeMap::new(),
        Granularity::Chunk => chunk_priorities(program, &order, &unit_moved, chunk_bytes),
        Granularity::Page => chunk_priorities(program, &order, &chunk_moved, chunk_bytes),
    };
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

/// Every launch instruction with the number of times it runs (the product of its
/// enclosing loops' counts). Repeated launches share their kernel, so the profiler works
/// out each one once and scales it.
fn launch_counts(instrs: &[Instr]) -> Vec<(Rc<Kernel>, u64)> {
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
fn allocation_order(instrs: &[Instr], buffers: usize) -> Vec<Slot> {
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
fn accessed_slots(kernel: &Kernel) -> Vec<Slot> {
    let mut slots: Vec<Slot> = kernel.accesses.iter().map(|a| a.slot).collect();
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// Bytes read and written in each unit of `unit_bytes` of buffer `slot` (of
/// `buffer_bytes`) by one launch of `kernel`: what that unit alone in host memory would
/// make remote.
fn moved_per_unit(
    kernel: &Kernel,
    slot: Slot,
    buffer_bytes: u64,
    unit_bytes: u64,
) -> Vec<(f64, f64)> {
    let mut moved = vec![(0.0, 0.0); buffer_bytes.div_ceil(unit_bytes) as usize];
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
                let (read, write) = &mut moved[unit as usize];
                *read += access.read_bytes as f64 * share;
                *write += access.write_bytes as f64 * share;
                start = unit_end;
            }
        }
    }
    moved
}

/// Adds `times` launches' worth of `moved` to `sums`.
fn add_scaled(sums: &mut [(f64, f64)], moved: &[(f64, f64)], times: u64) {
    for ((sum_read, sum_write), (read, write)) in sums.iter_mut().zip(moved) {
        *sum_read += read * times as f64;
        *sum_write += write * times as f64;
    }
}

/// Remote bytes as the counters see them: (read transactions, write transactions).
fn transactions((read_bytes, write_bytes): (f64, f64)) -> (f64, f64) {
    (
        read_bytes / READ_TRANSACTION_BYTES as f64,
        write_bytes / WRITE_TRANSACTION_BYTES as f64,
    )
}

/// Accesses per 4 KiB page of a region of `bytes` (a partial page counts as one).
fn per_page(accesses: f64, bytes: u64) -> f64 {
    accesses / bytes.div_ceil(PAGE_BYTES).max(1) as f64
}

/// Priorities `1..=n` for `n` items by accesses per page: the most accessed item gets
/// `n`, and ties keep the items' order (the earlier item gets the higher priority).
fn rank(accesses_per_page: &[f64]) -> Vec<i32> {
    let mut by_accesses: Vec<usize> = (0..accesses_per_page.len()).collect();
    // Stable: equal values keep index order.
    by_accesses.sort_by(|&a, &b| accesses_per_page[b].total_cmp(&accesses_per_page[a]));
    let mut priorities = vec![0; accesses_per_page.len()];
    for (position, &item) in by_accesses.iter().enumerate() {
        priorities[item] = i32::try_from(accesses_per_page.len() - position)
            .expect("fewer than 2^31 buffers or chunks");
    }
    priorities
}

/// Ranks every chunk of `chunk_bytes` of every buffer in `order` by its accesses per page;
/// `moved` holds each slot's bytes moved per chunk.
fn chunk_priorities(
    program: &Program,
    order: &[Slot],
    moved: &[Vec<(f64, f64)>],
    chunk_bytes: u64,
) -> BTreeMap<String, Vec<i32>> {
    let per_chunk: Vec<f64> = order
        .iter()
        .flat_map(|&slot| {
            chunk_layout(program.buffers[slot].bytes, chunk_bytes)
                .zip(&moved[slot])
                .map(|((_, bytes), &chunk)| {
                    let (reads, writes) = transactions(chunk);
                    per_page(reads + writes, bytes)
                })
        })
        .collect();
    let mut priorities = rank(&per_chunk).into_iter();
    order
        .iter()
        .map(|&slot| {
            let chunks = moved[slot].len();
            (
                program.buffers[slot].label.clone(),
                priorities.by_ref().take(chunks).collect(),
            )
        })
        .collect()
}

/// A kernel's run time alone on the device: its fixed part and its remote flows run side
/// by side, as the engine runs them, each flow with its link direction to itself.
fn kernel_ns(preset: &Preset, ops: u64, traffic: &Traffic) -> u64 {
    let flow_ns = |bytes: f64, bytes_per_s: f64| (bytes / bytes_per_s * 1e9).ceil() as u64;
    timing::fixed_ns(preset, ops, traffic)
        .max(flow_ns(
            traffic.link_bytes_to_device(),
            preset.link.h2d_bytes_per_s,
        ))
        .max(flow_ns(
            traffic.link_bytes_to_host(),
            preset.link.d2h_bytes_per_s,
        ))
}

/// Relocating a unit of `bytes` to host memory and back: two DMA copies, each with the
/// driver's relocation cost, at the transfer-size curve's bandwidth where the preset has
/// one (as the engine's copies run).
fn relocation_ns(preset: &Preset, bytes: u64) -> u64 {
    [preset.link.d2h_bytes_per_s, preset.link.h2d_bytes_per_s]
        .into_iter()
        .map(|peak| {
            let bytes_per_s = preset
                .link
                .size_curve_k_per_kib
                .map_or(peak, |k| size_curve_bytes_per_s(peak, k, bytes));
            preset.relocation_setup_ns + (bytes as f64 / bytes_per_s * 1e9).ceil() as u64
        })
        .sum()
}

/// Restoring what a kernel overwrites before its next repetition: one device-to-device
/// copy of every application buffer it writes, each byte read and written once in VRAM,
/// plus a copy's fixed cost. The runtime's buffers need no restore: the stack is scratch
/// space between launches, code and constants are only read.
fn restore_ns(preset: &Preset, program: &Program, kernel: &Kernel) -> u64 {
    let written_bytes: u64 = accessed_slots(kernel)
        .into_iter()
        .filter(|&slot| {
            program.buffers[slot].kind == BufferKind::Device
                && kernel
                    .accesses
                    .iter()
                    .any(|a| a.slot == slot && a.write_bytes > 0)
        })
        .map(|slot| program.buffers[slot].bytes)
        .sum();
    if written_bytes == 0 {
        return 0;
    }
    preset.copy_setup_ns
        + (2.0 * written_bytes as f64 / preset.vram_bytes_per_s * 1e9).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{Access, Distribution, Op, WeightedRange};
    use crate::{apps, preset, runtime};

    fn gtx480() -> Preset {
        preset::find("gtx480").unwrap()
    }

    /// An app's program at `size` with one phase iteration, wrapped with the runtime.
    fn app_program(app: &str, size: &str) -> Program {
        let gtx480 = gtx480();
        let program = apps::find(app)
            .unwrap()
            .program(size, 1, gtx480.shape())
            .unwrap();
        runtime::with_runtime(program, &gtx480)
    }

    fn buffer<'a>(profile: &'a Profile, label: &str) -> &'a BufferProfile {
        profile
            .buffers
            .iter()
            .find(|b| b.label == label)
            .unwrap_or_else(|| panic!("buffer {label}"))
    }

    /// Bytes read and written per slot by all launches of `ops`, loops unrolled: the
    /// app model's own traffic, computed without the profiler's walk.
    fn model_traffic(ops: &[Op], sums: &mut [(f64, f64)], times: f64) {
        for op in ops {
            match op {
                Op::Launch(kernel) => {
                    for a in &kernel.accesses {
                        sums[a.slot].0 += times * a.read_bytes as f64;
                        sums[a.slot].1 += times * a.write_bytes as f64;
                    }
                }
                Op::Repeat { times: t, body } => model_traffic(body, sums, times * f64::from(*t)),
                _ => {}
            }
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) + 1e-9
    }

    /// A program with one buffer of `bytes` and one kernel accessing it with `access`.
    fn one_kernel(bytes: u64, accesses: Vec<Access>) -> Program {
        let mut p = Program::default();
        let a = p.buffer("a", bytes);
        p.ops = vec![
            Op::Alloc(a),
            Op::Launch(Kernel {
                name: "k".into(),
                ops: 1,
                accesses,
            }),
            Op::Free(a),
        ];
        p.validate().unwrap();
        p
    }

    fn reads(profile: &Profile) -> Vec<f64> {
        profile.units.iter().map(|u| u.reads).collect()
    }

    fn all_close(found: &[f64], expected: &[f64]) {
        assert!(
            found.len() == expected.len() && found.iter().zip(expected).all(|(a, b)| close(*a, *b)),
            "{found:?} vs {expected:?}"
        );
    }

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
            for (spec, (read_bytes, write_bytes)) in program.buffers.iter().zip(&model) {
                let reads = read_bytes / READ_TRANSACTION_BYTES as f64;
                let writes = write_bytes / WRITE_TRANSACTION_BYTES as f64;
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
    fn the_last_partial_page_gets_its_share() {
        // 10000 bytes: pages of 4096, 4096 and 1808 bytes; written uniformly.
        let program = one_kernel(10_000, vec![Access::uniform(0, 0, 10_000)]);
        let p = profile(&program, &gtx480(), Granularity::Page, 4 << 20);
        let writes: Vec<f64> = p.units.iter().map(|u| u.writes).collect();
        all_close(&writes, &[128.0, 128.0, 56.5]);
        assert_eq!(p.units[2].bytes, 1808);
        // At buffer granularity the one unit holds it all.
        let p = profile(&program, &gtx480(), Granularity::Buffer, 4 << 20);
        assert_eq!(p.units.len(), 1);
        assert!(close(p.units[0].writes, 312.5));
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
    fn profiling_time_adds_repetitions_relocations_and_restores() {
        let preset = gtx480();
        // Two pages read and written in place by a kernel of negligible compute.
        let program = one_kernel(2 * PAGE_BYTES, vec![Access::uniform(0, 8192, 8192)]);
        let p = profile(&program, &preset, Granularity::Page, 4 << 20);
        let ns = |bytes: f64, bytes_per_s: f64| (bytes / bytes_per_s * 1e9).ceil() as u64;
        // All local: launch plus 16 KiB at VRAM bandwidth.
        let normal = preset.kernel_launch_ns + ns(16384.0, preset.vram_bytes_per_s);
        assert_eq!(p.normal_ns, normal);
        // One page remote: 4096 B read as 32 lines, 32 round trips with 32 in flight, one
        // link latency; the flows (writes with their packet overhead the longer one) end
        // before that.
        let remote_ns = preset.kernel_launch_ns + preset.link.latency_ns;
        assert!(ns(4096.0 * 56.0 / 32.0, preset.link.d2h_bytes_per_s) < remote_ns);
        let relocation = 2 * (preset.relocation_setup_ns + ns(4096.0, 5.7e9));
        let restore = preset.copy_setup_ns + ns(2.0 * 8192.0, preset.vram_bytes_per_s);
        assert_eq!(p.repetitions, 4);
        assert_eq!(p.profiling_ns, 4 * (remote_ns + relocation + restore));
        assert!((p.slowdown - p.profiling_ns as f64 / normal as f64).abs() < 1e-12);
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

    #[test]
    fn backprop_stack_lowest_of_used_buffers_and_weights_above_previous_weights() {
        let p = profile(
            &app_program("backprop", "default"),
            &gtx480(),
            Granularity::Chunk,
            4 << 20,
        );
        // Lowest but for `output_hidden`, which the kernels are passed and never use:
        // nothing ranks below no access at all.
        assert_eq!(buffer(&p, "output_hidden").accesses_per_page, 0.0);
        assert_eq!(p.priorities["output_hidden"], 1);
        assert_eq!(p.priorities["runtime_stack"], 2);
        let weights = buffer(&p, "input_hidden_weights");
        let previous = buffer(&p, "input_prev_weights");
        assert!(weights.priority > previous.priority);
        // The dissertation's profile: about twice the accesses per page.
        let ratio = weights.accesses_per_page / previous.accesses_per_page;
        assert!((1.8..=2.2).contains(&ratio), "{ratio}");
        assert!(p.slowdown > 1.0);
    }

    #[test]
    fn nn_input_and_output_take_adjacent_priorities_output_above() {
        let p = profile(
            &app_program("nn", "default"),
            &gtx480(),
            Granularity::Chunk,
            4 << 20,
        );
        let (input, output) = (buffer(&p, "locations"), buffer(&p, "distances"));
        assert_eq!((input.writes, output.reads), (0.0, 0.0));
        // One byte per byte each (the profiles' equal accesses per page), but writes are
        // not coalesced: a page of output takes 4096 / 32 write transactions, a page of
        // input 4096 / 128 reads. So the output ranks just above the input, the order
        // that hurt nn in the evaluation.
        assert!(close(input.accesses_per_page, 32.0));
        assert!(close(output.accesses_per_page, 128.0));
        assert_eq!(output.priority, input.priority + 1);
        assert_eq!(output.priority, p.buffers.len() as i32);
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
