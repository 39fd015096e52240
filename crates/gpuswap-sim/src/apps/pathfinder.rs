//! Rodinia `pathfinder`: the cheapest top-to-bottom path through a grid of weights
//! (dynamic programming, row by row), in the managed-memory version of GPGPU-Sim UVM
//! Smart (`benchmarks/Managed/pathfinder`), a streaming-class workload of the adaptive
//! unified-memory paper (`../shared/spec/uvm-adaptive.md`).
//!
//! # The real program
//! A grid of `rows` x `cols` ints; row 0 is the starting cost, rows 1.. the wall.
//! Buffers, all managed, in allocation order: `result_0` and `result_1` (cols ints each,
//! the ping-pong cost rows) and `wall` ((rows - 1) x cols ints). The host fills row 0
//! into `result_0` and the wall (setup: H2D of both, as Rodinia's original copies them).
//! `dynproc_kernel` then runs once per band of `pyramid` rows, launch k at wall rows
//! 10 k.. (the run script: `./pathfinder 50000 200 10`, so 20 launches, the last over
//! the 9 rows left), on ceil(cols / 236) blocks of 256 threads; the launches are queued
//! without synchronization, the host swapping source and destination between them, and
//! a device synchronization ends the run (teardown: D2H of the final row, `result_0`
//! after an even number of launches). The phase body is one run; a repetition starts
//! from the last one's final row, as a longer grid would.
//!
//! Block b covers columns 236 b - 10 .. 236 b + 246 (a halo of `pyramid` columns each
//! side; the last launch places its blocks 238 apart, its halo being one narrower). A
//! thread loads its source cost into shared memory; step i (0..iteration) has the
//! threads i + 1 ..= 254 - i whose column lies in the grid each read their wall element
//! of row `startStep + i`, take the minimum of three neighbours and add it; after the
//! last step the middle 256 - 2 iteration threads write the destination row.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! Every access is a warp's contiguous run: counted by its size, halos included (the
//! neighbouring blocks read them again), clipped at the grid's edges (computed exactly
//! per block). The wall rows of a band are read about 245 / 236 = 1.04 times (step i
//! reads 254 - 2 i of every 236 columns), the source row 256 / 236 = 1.08 times, the
//! destination row written once. All of it in address order: `Linear`, over the band's
//! rows of the wall ([`Distribution::Ranges`]) and over the whole of each cost row.
//! Each launch consumes the next band and never returns to an earlier one: over a run
//! the wall is read once, band by band, the streaming class; only the two cost rows
//! (0.5 % of the footprint at the default) are reused by every launch.
//!
//! # Compute
//! About 28 instructions per thread outside the steps (block geometry, the clamps of
//! the neighbours, the validity test, the source load and the final store) and 22 per
//! step (the range test, three shared loads, two minimums, the wall index and load, the
//! addition, the shared stores and two barriers), every thread going through every
//! step: 248 per thread for a band of 10 rows against about 46 bytes moved, 5.4 per
//! byte, compute bound by about 1.4x on the GTX 480 model (3.8) and memory bound on the
//! GTX 1080 Ti's (11).
//!
//! # Sizes
//! `default` and `uvmsmart` are the run script's grid: 50000 columns, 200 rows, pyramid
//! 10: 38.3 MiB, 0.4 % under the 38.5 MB of `spec/uvm-driver.md` (what each allocation
//! takes rounded up to whole 64 KiB blocks: 2 x 4 + 608 of them). A number sets the
//! columns, with the rows and pyramid of the run script.

use super::common::{d2h, h2d, parse_size, phased, uniform, within, workload_sizes};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::DeviceShape;
use crate::program::{Access, AccessOrder, Distribution, Kernel, Op, Program, WeightedRange};

/// The pathfinder app.
pub struct Pathfinder;

const HELP: &str = "default or uvmsmart (50000 columns x 200 rows, 38 MiB, the research \
                    simulator's input), large (5000000 columns, 3.7 GiB), or a number of \
                    columns (1 to 10000000; always 200 rows and pyramid 10 as in the run \
                    script)";
/// Int size.
const INT_BYTES: u64 = 4;
/// Threads per block (`BLOCK_SIZE`).
const BLOCK: u64 = 256;
/// Grid rows and pyramid height of the run script.
const ROWS: u64 = 200;
const PYRAMID: u64 = 10;
/// Halo columns each side of a block (pyramid x `HALO`, which is 1).
const BORDER: u64 = PYRAMID;
/// Instructions per thread outside the steps and per step (module doc).
const SETUP_OPS: u64 = 28;
const STEP_OPS: u64 = 22;
/// The run script's columns.
const UVMSMART_COLS: u64 = 50_000;
/// A 3.7 GiB wall.
const LARGE_COLS: u64 = 5_000_000;
/// A 7.4 GiB wall; the real kernel's int wall index holds 199 x cols up to 10.7 M.
const MAX_COLS: u64 = 10_000_000;

impl AppModel for Pathfinder {
    fn name(&self) -> &'static str {
        "pathfinder"
    }

    fn description(&self) -> &'static str {
        "Rodinia pathfinder: row-by-row dynamic programming, the wall read once band by band"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        let cols = parse_size(
            self.name(),
            HELP,
            size,
            &workload_sizes(UVMSMART_COLS, LARGE_COLS),
            |n| within(n, 1..=MAX_COLS, format!("{n} columns")),
        )?;
        Ok(program(cols, repeat))
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Streaming)
    }
}

/// Elements one launch moves: wall elements read, source elements read, destination
/// elements written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Band {
    wall: u64,
    source: u64,
    destination: u64,
}

/// The elements a launch of `iteration` steps moves over `cols` columns (module doc).
fn band(cols: u64, iteration: u64) -> Band {
    let blocks = cols.div_ceil(BLOCK - 2 * BORDER);
    let small = BLOCK - 2 * iteration;
    // Threads first..=last of block b whose column lies in the grid.
    let valid = |b: u64, first: u64, last: u64| -> u64 {
        let origin = (small * b) as i64 - BORDER as i64;
        let lo = (origin + first as i64).max(0);
        let hi = (origin + last as i64).min(cols as i64 - 1);
        (hi - lo + 1).max(0) as u64
    };
    let mut out = Band {
        wall: 0,
        source: 0,
        destination: 0,
    };
    for b in 0..blocks {
        out.source += valid(b, 0, BLOCK - 1);
        out.wall += (0..iteration)
            .map(|i| valid(b, i + 1, BLOCK - 2 - i))
            .sum::<u64>();
        out.destination += valid(b, iteration, BLOCK - 1 - iteration);
    }
    out
}

fn program(cols: u64, repeat: u32) -> Program {
    let mut p = Program::default();
    let row_bytes = cols * INT_BYTES;
    let results = [
        p.buffer("result_0", row_bytes),
        p.buffer("result_1", row_bytes),
    ];
    let wall = p.buffer("wall", (ROWS - 1) * row_bytes);
    let threads = cols.div_ceil(BLOCK - 2 * BORDER) * BLOCK;

    let mut body = Vec::new();
    for (k, start) in (0..ROWS - 1).step_by(PYRAMID as usize).enumerate() {
        let iteration = PYRAMID.min(ROWS - 1 - start);
        let moved = band(cols, iteration);
        let (source, destination) = (results[k % 2], results[(k + 1) % 2]);
        body.push(Op::Launch(Kernel {
            name: "dynproc_kernel".into(),
            ops: threads * (SETUP_OPS + STEP_OPS * iteration),
            accesses: vec![
                Access {
                    slot: wall,
                    read_bytes: moved.wall * INT_BYTES,
                    reread_bytes: 0,
                    write_bytes: 0,
                    rewrite_bytes: 0,
                    distribution: Distribution::Ranges(vec![WeightedRange {
                        offset_bytes: start * row_bytes,
                        bytes: iteration * row_bytes,
                        weight: 1.0,
                    }]),
                    order: AccessOrder::Linear,
                },
                uniform(source, moved.source * INT_BYTES, 0, AccessOrder::Linear),
                uniform(
                    destination,
                    0,
                    moved.destination * INT_BYTES,
                    AccessOrder::Linear,
                ),
            ],
            phases: Vec::new(),
            outer_loop: Default::default(),
        }));
    }
    let result = results[body.len() % 2];
    body.push(Op::Sync);

    let setup = vec![
        Op::Alloc(results[0]),
        Op::Alloc(results[1]),
        Op::Alloc(wall),
        h2d(results[0], row_bytes),
        h2d(wall, (ROWS - 1) * row_bytes),
    ];
    let teardown = vec![
        d2h(result, row_bytes),
        Op::Free(wall),
        Op::Free(results[0]),
        Op::Free(results[1]),
    ];
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, launches, mib, per_byte, phase_body, rejects};

    #[test]
    fn default_is_the_research_simulators_input() {
        let p = check_app(&Pathfinder, "default");
        // Two cost rows and 199 wall rows.
        assert_eq!(p.peak_allocated_bytes(), 201 * 50_000 * 4);
        let footprint = mib(&p);
        assert!((footprint / 38.5 - 1.0).abs() < 0.02, "{footprint}");
        assert_eq!(launches(phase_body(&p, 1)), 20);
        assert_eq!(p, Pathfinder.program("uvmsmart", 1, gtx480()).unwrap());
        assert_eq!(Pathfinder.pattern_class(), Some(PatternClass::Streaming));
        let large = mib(&check_app(&Pathfinder, "large")) / 1024.0;
        assert!((2.0..8.0).contains(&large), "{large} GiB");
    }

    #[test]
    fn the_wall_is_streamed_band_by_band_once() {
        let p = Pathfinder.program("default", 1, gtx480()).unwrap();
        let row = 50_000 * 4;
        let mut next = 0;
        for op in phase_body(&p, 1) {
            let Op::Launch(k) = op else { continue };
            let wall = &k.accesses[0];
            assert_eq!((wall.slot, wall.order), (2, AccessOrder::Linear));
            let Distribution::Ranges(r) = &wall.distribution else {
                panic!("{:?}", wall.distribution)
            };
            // Each band starts where the last one ended.
            assert_eq!(r[0].offset_bytes, next);
            next += r[0].bytes;
            // Read about once, halos included.
            let ratio = wall.read_bytes as f64 / r[0].bytes as f64;
            assert!((1.03..1.05).contains(&ratio), "{ratio}");
        }
        assert_eq!(next, 199 * row);
        // Over a run the wall moves about once per byte, the cost rows twenty times.
        let d = per_byte(&p, 1);
        assert!((1.03..1.05).contains(&d[2]), "{d:?}");
        assert!(d[0] > 19.0 && d[1] > 19.0, "{d:?}");
    }

    #[test]
    fn halos_and_edges_are_counted_exactly() {
        // One block over 100 columns: the halo falls outside the grid.
        let b = band(100, 10);
        assert_eq!(b.source, 100);
        assert_eq!(b.destination, 100);
        // Step i reads columns i - 9 ..= 244 - i: all 100 of the grid.
        assert_eq!(b.wall, 10 * 100);
        // In the interior a block reads 254 - 2 i per step and writes 236 columns.
        let wide = band(236 * 1000, 10);
        assert_eq!(wide.destination, 236 * 1000);
        let per_block = wide.wall as f64 / 1000.0;
        assert!((per_block - 2450.0).abs() < 5.0, "{per_block}");
        // The last band of the run script: 9 rows, blocks 238 apart, every column written.
        assert_eq!(band(50_000, 9).destination, 50_000);
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Pathfinder, "0", "1 to 10000000");
        rejects(&Pathfinder, "10000001", "1 to 10000000");
        rejects(&Pathfinder, "50000x200", "not a size");
    }
}
