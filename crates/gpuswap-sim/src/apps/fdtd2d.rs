//! PolyBench/GPU `FDTD-2D`: a two-dimensional finite-difference time-domain solver of
//! Maxwell's equations; the regular-class workload of the adaptive unified-memory paper
//! (`../shared/spec/uvm-adaptive.md`).
//!
//! # The real program (GPGPU-Sim UVM Smart, `benchmarks/Managed/FDTD-2D/fdtd2d.cu`)
//! Buffers, float, all managed, in allocation order: `_fict_` (T, the source term per
//! step), `ex` (N x (N + 1)), `ey` ((N + 1) x N), `hz` (N x N), with NX = NY = N = 1200
//! and T = 5 time steps. The host initialises them (setup: H2D of `_fict_`, of the
//! N^2 floats its loop writes at the start of `ex` and `ey`, and of `hz`). Each time step
//! launches three kernels on ceil(N / 32) x ceil(N / 8) blocks of 32 x 8 threads, one
//! thread per cell (i, j) with i, j < N, each followed by a device synchronization:
//! - `fdtd_step1_kernel`: row 0 of `ey` takes `_fict_[t]`; every other cell updates
//!   `ey[i][j]` from `hz[i][j] - hz[i-1][j]`;
//! - `fdtd_step2_kernel`: every cell with j > 0 updates `ex[i][j]` from
//!   `hz[i][j] - hz[i][j-1]`;
//! - `fdtd_step3_kernel`: every cell updates `hz[i][j]` from `ex[i][j+1] - ex[i][j]` and
//!   `ey[i+1][j] - ey[i][j]`.
//!
//! The host then prints every 1000th element of `hz`, 4000 bytes apart, so it reads every
//! page of `hz` (teardown: D2H of `hz`). The phase body is the T time steps, 15 launches;
//! `repeat` runs more steps as a longer run would (the source term cycles through T).
//!
//! # Sizes
//! The research simulator's allocation rounding ([`managed_bytes`]) takes each 5.5 MiB
//! field to 6 MiB and `_fict_` to 64 KiB: 18.0625 MiB, the 18.06 MB of
//! `spec/uvm-driver.md`. The kernels touch only the data at the start of each allocation.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! A warp is 32 consecutive cells of one row: every access is a coalesced row segment.
//! Counted per block, a neighbour one row up (step 1) or down (step 3) adds one row to
//! the block's 8, and a neighbour one column across (steps 2 and 3) one element to its
//! 32 ([`loaded_rows`], [`loaded_columns`]):
//! - step 1: `ey` rows 1..N read, rows 0..N written; `hz` about 9/8 of N^2 read;
//!   `_fict_` one float (broadcast to row 0's warps, from the L2);
//! - step 2: `ex` N (N - 1) read and written; `hz` about 33/32 of N^2 read;
//! - step 3: `hz` N^2 read and written; `ex` about 33/32 and `ey` 9/8 of N^2 read.
//!
//! Every launch walks its buffers block row after block row, in address order: `Linear`.
//! Each time step sweeps `hz` three times and `ex` and `ey` twice, and the next step
//! sweeps them again: at 18 MiB with 12 MiB of VRAM (150 %) each sweep finds the pages
//! of the last one evicted, the cyclic re-reference of the regular class.
//!
//! # Compute
//! The research simulator's log counts 49 297 200, 49 266 000 and 52 147 200
//! instructions for the three kernels at N = 1200: about 34, 34 and 36 per active thread
//! (index arithmetic, the bounds test, three or four loads, two floating-point operations
//! and a store) and 8 per thread outside the grid or the update, as counted below to
//! within 0.5 %. Against 12 to 17 bytes moved per cell that is under 3 instructions per
//! byte, below the GTX 480 model's balance of 3.8: memory bound.

use super::common::{
    d2h, data_access, h2d, managed_bytes, parse_size, phased, within, workload_sizes,
};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, Program};

/// The fdtd-2d app.
pub struct Fdtd2d;

const HELP: &str = "default or uvmsmart (a 1200 x 1200 grid, 5 time steps, 18.06 MiB as the \
                    research simulator allocates it), large (20480 x 20480, 4.7 GiB), or \
                    a grid side (2 to 24576); always 5 time steps";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// The managed version's NX = NY.
const UVMSMART_SIDE: u64 = 1200;
/// Three fields of about 1.56 GiB.
const LARGE_SIDE: u64 = 20_480;
/// Accepted sides: a cell with a neighbour each way at least, 6.75 GiB of fields at most.
const MIN_SIDE: u64 = 2;
const MAX_SIDE: u64 = 24_576;
/// The managed version's `tmax`.
const TIME_STEPS: u64 = 5;
/// Threads per block along a row (x, columns) and down a column (y, rows).
const BLOCK_X: u64 = 32;
const BLOCK_Y: u64 = 8;
/// Instructions per updating thread of each kernel and per idle thread (module doc, from
/// the research simulator's counts).
const STEP1_OPS: u64 = 34;
const STEP2_OPS: u64 = 34;
const STEP3_OPS: u64 = 36;
const IDLE_OPS: u64 = 8;

impl AppModel for Fdtd2d {
    fn name(&self) -> &'static str {
        "fdtd-2d"
    }

    fn description(&self) -> &'static str {
        "PolyBench FDTD-2D: electromagnetic field stencils, three sweeps over three fields per time step"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let side = parse_size(
            self.name(),
            HELP,
            size,
            &workload_sizes(UVMSMART_SIDE, LARGE_SIDE),
            |n| within(n, MIN_SIDE..=MAX_SIDE, format!("a {n} x {n} grid")),
        )?;
        Ok(program(side, repeat, device))
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Regular)
    }
}

/// Rows loaded by all block rows when the threads of rows `from..side` update their own
/// row and read one beside it ([`loaded`]).
fn loaded_rows(side: u64, from: u64) -> u64 {
    loaded(side, BLOCK_Y, from)
}

/// Columns loaded by all block columns, as [`loaded_rows`] for a column beside.
fn loaded_columns(side: u64, from: u64) -> u64 {
    loaded(side, BLOCK_X, from)
}

/// Lines loaded by all blocks of `block` threads along a dimension of `side` cells, where
/// the cells `from..side` read their own line and the one before or after it: one line
/// more than a block's updating cells, for every block that has any. Whichever way the
/// neighbour lies, it stays inside the field: the previous line exists for cells from 1,
/// and the staggered fields have one line more than the grid past the last cell (`ex`
/// N + 1 columns, `ey` N + 1 rows).
fn loaded(side: u64, block: u64, from: u64) -> u64 {
    (0..side.div_ceil(block))
        .map(|b| {
            let first = (b * block).max(from);
            let last = (b * block + block - 1).min(side - 1);
            if first > last { 0 } else { last - first + 2 }
        })
        .sum()
}

fn program(n: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let fict_data = TIME_STEPS * FLOAT_BYTES;
    let ex_data = n * (n + 1) * FLOAT_BYTES;
    let ey_data = (n + 1) * n * FLOAT_BYTES;
    let hz_data = n * n * FLOAT_BYTES;
    let fict = p.buffer("_fict_", managed_bytes(fict_data));
    let ex = p.buffer("ex", managed_bytes(ex_data));
    let ey = p.buffer("ey", managed_bytes(ey_data));
    let hz = p.buffer("hz", managed_bytes(hz_data));

    let row = n * FLOAT_BYTES;
    let threads = n.div_ceil(BLOCK_X) * BLOCK_X * n.div_ceil(BLOCK_Y) * BLOCK_Y;
    let ops =
        |updating: u64, per_thread: u64| updating * per_thread + (threads - updating) * IDLE_OPS;
    // Row 0's warps each read the step's source term; it stays in the L2.
    let source_reads = n.div_ceil(BLOCK_X) * FLOAT_BYTES;
    let source = device.l2_resident_reads(FLOAT_BYTES, source_reads);

    let step1 = Kernel {
        name: "fdtd_step1_kernel".into(),
        ops: ops(n * n, STEP1_OPS),
        accesses: vec![
            data_access(fict, fict_data, source, 0, AccessOrder::Linear)
                .read_before_l2(source_reads),
            data_access(ey, ey_data, (n - 1) * row, n * row, AccessOrder::Linear),
            data_access(hz, hz_data, loaded_rows(n, 1) * row, 0, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };
    let step2 = Kernel {
        name: "fdtd_step2_kernel".into(),
        ops: ops(n * (n - 1), STEP2_OPS),
        accesses: vec![
            data_access(
                ex,
                ex_data,
                n * (n - 1) * FLOAT_BYTES,
                n * (n - 1) * FLOAT_BYTES,
                AccessOrder::Linear,
            ),
            data_access(
                hz,
                hz_data,
                n * loaded_columns(n, 1) * FLOAT_BYTES,
                0,
                AccessOrder::Linear,
            ),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };
    let step3 = Kernel {
        name: "fdtd_step3_kernel".into(),
        ops: ops(n * n, STEP3_OPS),
        accesses: vec![
            data_access(hz, hz_data, hz_data, hz_data, AccessOrder::Linear),
            data_access(
                ex,
                ex_data,
                n * loaded_columns(n, 0) * FLOAT_BYTES,
                0,
                AccessOrder::Linear,
            ),
            data_access(ey, ey_data, loaded_rows(n, 0) * row, 0, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };
    let mut body = Vec::new();
    for _ in 0..TIME_STEPS {
        for kernel in [&step1, &step2, &step3] {
            body.extend([Op::Launch(kernel.clone()), Op::Sync]);
        }
    }

    let all = [fict, ex, ey, hz];
    let mut setup: Vec<Op> = all.map(Op::Alloc).into();
    // The host's loop writes N^2 elements of each field, indexing `ex` and `ey` with
    // stride N as it does `hz`.
    setup.extend([
        h2d(fict, fict_data),
        h2d(ex, hz_data),
        h2d(ey, hz_data),
        h2d(hz, hz_data),
    ]);
    let mut teardown = vec![d2h(hz, hz_data)];
    teardown.extend(all.map(Op::Free));
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{
        check_app, gtx480, launches, mib, per_byte, phase_body, phase_kernels, rejects,
    };

    #[test]
    fn default_is_the_research_simulators_18_06_mb() {
        let p = check_app(&Fdtd2d, "default");
        assert_eq!(p, check_app(&Fdtd2d, "uvmsmart"));
        assert_eq!(mib(&p), 18.0625);
        assert!((mib(&p) - 18.06).abs() < 0.01);
        let large = check_app(&Fdtd2d, "large");
        let gib = large.peak_allocated_bytes() as f64 / f64::from(1 << 30);
        assert!((2.0..8.0).contains(&gib), "{gib}");
    }

    #[test]
    fn five_time_steps_of_three_synchronized_launches() {
        let p = Fdtd2d.program("default", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        assert_eq!(launches(body), 15);
        let names: Vec<_> = phase_kernels(&p).iter().map(|k| k.name.clone()).collect();
        assert_eq!(names[..3], names[3..6]);
        assert_eq!(names[0], "fdtd_step1_kernel");
        // Each launch is followed by a synchronization.
        for pair in body.chunks(2) {
            assert!(matches!(pair, [Op::Launch(_), Op::Sync]), "{pair:?}");
        }
    }

    #[test]
    fn every_step_re_sweeps_the_three_fields_in_address_order() {
        let p = Fdtd2d.program("default", 1, gtx480()).unwrap();
        let ks = phase_kernels(&p);
        // hz in all three kernels, ex in steps 2 and 3, ey in steps 1 and 3.
        let touching = |slot| {
            ks[..3]
                .iter()
                .filter(|k| k.accesses.iter().any(|a| a.slot == slot))
                .count()
        };
        assert_eq!([touching(1), touching(2), touching(3)], [2, 2, 3]);
        for k in &ks {
            assert!(k.accesses.iter().all(|a| a.order == AccessOrder::Linear));
        }
        // Per byte of each field per repetition: about 5 x (1 + 1 + 33/32) for ex, the
        // same with 9/8 for ey, and 5 x (9/8 + 33/32 + 2) for hz, less the rounding.
        let d = per_byte(&p, 1);
        let fraction = |data: f64, buffer: usize| data / p.buffers[buffer].bytes as f64;
        let (ex, ey) = (
            fraction(1200.0 * 1201.0 * 4.0, 1),
            fraction(1201.0 * 1200.0 * 4.0, 2),
        );
        assert!((d[1] / ex - 15.1).abs() < 0.1, "{}", d[1] / ex);
        assert!((d[2] / ey - 15.6).abs() < 0.1, "{}", d[2] / ey);
        let hz = fraction(1200.0 * 1200.0 * 4.0, 3);
        assert!((d[3] / hz - 20.8).abs() < 0.1, "{}", d[3] / hz);
        assert_eq!(Fdtd2d.pattern_class(), Some(PatternClass::Regular));
    }

    #[test]
    fn halo_lines_are_counted_per_block() {
        // 150 block rows of 8: the first updates rows 1..=7 and loads 8, the others 9.
        assert_eq!(loaded_rows(1200, 1), 8 + 149 * 9);
        // Reading the row below: every block loads 9 rows.
        assert_eq!(loaded_rows(1200, 0), 150 * 9);
        // 38 block columns of 32, the last with 16 cells: 31 + 1, 36 x 33, 16 + 1.
        assert_eq!(loaded_columns(1200, 1), 32 + 36 * 33 + 17);
        assert_eq!(loaded_columns(1200, 0), 37 * 33 + 17);
    }

    #[test]
    fn instructions_match_the_research_simulators_counts_and_are_memory_bound() {
        let p = Fdtd2d.program("default", 1, gtx480()).unwrap();
        let logged = [49_297_200.0, 49_266_000.0, 52_147_200.0];
        for (k, logged) in phase_kernels(&p).iter().zip(logged) {
            assert!((k.ops as f64 / logged - 1.0).abs() < 0.005, "{}", k.ops);
            let bytes: u64 = k
                .accesses
                .iter()
                .map(|a| a.read_bytes + a.write_bytes)
                .sum();
            let ratio = (k.ops as f64 / 672e9) / (bytes as f64 / 177.4e9);
            assert!(ratio < 1.0, "{}: {ratio}", k.name);
        }
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Fdtd2d, "1", "2 to 24576");
        rejects(&Fdtd2d, "30000", "2 to 24576");
        rejects(&Fdtd2d, "-5", "not a size");
    }
}
