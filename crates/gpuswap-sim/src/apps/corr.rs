//! PolyBench/GPU `CORR`: the correlation matrix of an N x M data matrix (N observations
//! of M variables), in four kernels; one of the ten benchmarks of the PILOT study
//! (`../shared/spec/pilot.md`), "long running" there.
//!
//! # The real program (PolyBench/GPU 1.0, `CUDA/CORR/correlation.cu` and `.cuh` of
//! `sgrauerg/polybenchGpu`)
//! Buffers, float, in allocation order: `data` (N rows of M, row-major), `symmat` (M x M
//! in an allocation of M x N), `stddev` (M) and `mean` (M), with M = N = 2048 in every
//! dataset of the header; the model takes M = N. The host fills `data` and copies all
//! four buffers up (setup: H2D of each; `symmat`, `stddev` and `mean` carry whatever the
//! host's arrays hold). Then four launches, each followed by a device synchronization:
//! - `mean_kernel`, one thread per column `j` in blocks of 256: sums column `j` of
//!   `data` into `mean[j]`, then divides by a constant;
//! - `std_kernel`, the same grid: sums the squared deviations of column `j` into
//!   `stddev[j]`, then divides, takes the square root and replaces values below a
//!   threshold by 1;
//! - `reduce_kernel`, one thread per element on blocks of 32 x 8: centres and scales
//!   `data[i][j]` by `mean[j]` and `stddev[j]`, in place;
//! - `corr_kernel`, one thread per column `j1 < M - 1` in blocks of 256: sets
//!   `symmat[j1][j1]` to 1 and, for every `j2 > j1`, sums `data[i][j1] data[i][j2]` over
//!   all rows into `symmat[j1][j2]` and mirrors it into `symmat[j2][j1]`.
//!
//! Afterwards the host copies one float (the last diagonal element, which no thread
//! sets) into `symmat` and the whole of `symmat` back (teardown: that H2D and the D2H).
//! The program runs the four kernels once; the phase body is those four launches, so
//! `repeat` normalises `data` again in place and recomputes `symmat`, with the same
//! traffic.
//!
//! Each grid's size is the column (or row) count divided by the block's side and
//! truncated, not rounded up: the program covers C = 256 floor(N / 256) columns in
//! kernels 1, 2 and 4 and 32 floor(N / 32) columns by 8 floor(N / 8) rows in kernel 3.
//! Below N = 256 the first grid would be empty, so 256 is the smallest N accepted; above
//! it the model leaves the uncovered columns untouched as the program does. The named
//! sizes are multiples of 256, which the program covers whole.
//!
//! # Sizes
//! The buffers take 8 N^2 + 8 N bytes. PILOT's table gives 64.1 MB, 256.2 MB and 1 GB;
//! the model's sizes are N = 2816 (`small`, 60.5 MiB), 5632 (`medium`, the default,
//! 242.0 MiB) and 11264 (`large`, 968.1 MiB): multiples of 256 that quadruple the
//! footprint from size to size as the table does, 5.5 to 5.6 % below its figures read
//! as MiB and within 1.5 % of them read as decimal MB (the next multiples, 3072, 5888
//! and 11520, would be 12 % above, 3 % above and 1 % below in MiB). The table's figures
//! are exactly four N x N float matrices at N = 2048, 4096 and 8192, twice what the
//! program's GPU buffers take at those N; the paper does not say what it counted, so the
//! model takes its memory as given.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! - `mean_kernel`, `data`: a warp's load is 32 consecutive floats of one row:
//!   coalesced. The blocks (11 to 44 at the named sizes) are all resident at once and
//!   walk down the rows together, so the launch reads the covered columns row by row,
//!   each element once: `Linear`, 4 C N bytes.
//! - `mean_kernel`, `mean`: the sum is kept in a register but stored every iteration
//!   (`mean` might alias `data`, whose next load must see the store), plus the initial
//!   zero and the quotient: C (N + 2) coalesced stores, streamed into the write-back L2,
//!   which holds the vector and writes it back once while it stays there
//!   ([`DeviceShape::l2_resident_reads`], the estimate [`atax`](super::atax) uses for
//!   its stored vectors).
//! - `std_kernel`: `data` as in the mean; `stddev` stored C (N + 2) times like `mean`;
//!   `mean[j]` reloaded every iteration (the store to `stddev` might have changed it),
//!   C N coalesced loads of a vector that stays in the L2.
//! - `reduce_kernel`: every covered element of `data` read once and written once, in
//!   block rows of 8, in address order (`Linear`); the second store of an element lands
//!   in the line the first just wrote, in the L2. Each block's 8 warps read the same 32
//!   floats of `mean` and of `stddev`: 128 bytes per block from each, a vector that stays
//!   in the L2.
//! - `corr_kernel`, `data`: at step `k` of its `j2` loop, thread `j1` reads columns `j1`
//!   and `j1 + 1 + k` down all N rows. Neighbouring threads read neighbouring columns,
//!   so each row's reads coalesce, and a block's two column ranges overlap while
//!   `k < 255`: per block, step and row the block reads the union, `a + min(k + 1, a)`
//!   floats for its `a` threads still running ([`corr_data_reads`]). Every step sweeps
//!   the matrix from the first row to the last, so the launch reads it about N times in
//!   all (just under 4 N^3 bytes for a full matrix, counted per block with no cache
//!   between blocks: blocks at the same row at the same moment would share lines in the
//!   L2, which the model does not count): `Linear`, pass after pass.
//! - `corr_kernel`, `symmat`: the running sum is stored every iteration to an element
//!   a row plus one float from the next lane's, an isolated write. Each thread keeps
//!   storing to one line, advancing along row `j1` one element per step; while the
//!   threads' lines and one iteration of `data` fit in the L2 (the rule of
//!   [`DeviceShape::reused_reads`]: up to about 5780 threads on the GTX 480, 46 000 on a
//!   V100) each line is written back once, 4 bytes per element of the upper triangle;
//!   beyond, every store moves a sector. The mirror stores walk column `j1`, one row per
//!   step, and the diagonal store is one per thread: a sector each. The threads advance
//!   together along their rows: `Strided` by a row.
//!
//! # Compute
//! Estimated from the kernels' code, not measured: `mean_kernel` 5 instructions per
//! iteration (load, add, store, counter, branch) and 20 per thread (index, bound test,
//! a division); `std_kernel` 7 per iteration (two loads, a difference, a multiply-add, a
//! store, the loop) and 30 per thread (a division and a square root); `reduce_kernel` 28
//! per thread (index, bound test, three loads, a difference, a product, a division, two
//! stores); `corr_kernel` 6 per iteration (two loads, a multiply-add, a store, the
//! loop), 8 per `j2` step (two more stores and the index) and 12 per thread. Against 4
//! to 8 bytes per iteration the mean, the deviation and the correlation stay below 2
//! instructions per byte where the GTX 480 model balances at 3.8: memory bound; the
//! reduction's 28 per element against its 8 bytes come to 3.5, memory bound by a hair.
//! `corr_kernel` dominates: N / 2 of its iterations per element of `data`. Its grid has
//! only N / 256 blocks (11 to 44 at the named sizes), fewer than a V100's 80 SMs; the
//! timing model spreads instructions over the whole device (see
//! [`DeviceShape::sm_count`]), so it times the launch as if the grid filled the GPU.

use super::common::{
    READ_LINE_BYTES, WRITE_SECTOR_BYTES, d2h, h2d, parse_size, phased, pilot_sizes, uniform, within,
};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, OuterLoop, Program};

/// The corr app.
pub struct Corr;

const HELP: &str = "default or medium (N = 5632: a 5632 x 5632 matrix, 242 MiB, PILOT's \
                    256.2 MB), small (N = 2816, 60.5 MiB, PILOT's 64.1 MB), large \
                    (N = 11264, 968 MiB, PILOT's 1 GB), or a matrix side N (256 to 32768; \
                    the program's grids cover multiples of 256 columns)";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// The named sizes: N for PILOT's small, medium and large inputs.
const SMALL_SIDE: u64 = 2816;
const MEDIUM_SIDE: u64 = 5632;
const LARGE_SIDE: u64 = 11_264;
/// Accepted sides: one block of the 1-D grids at least, 8 GiB of matrices at most.
const MIN_SIDE: u64 = 256;
const MAX_SIDE: u64 = 32_768;
/// Threads per block of kernels 1, 2 and 4, and the 2-D blocks of kernel 3.
const BLOCK: u64 = 256;
const BLOCK3_X: u64 = 32;
const BLOCK3_Y: u64 = 8;
/// Instructions (module doc): per iteration and per thread of the mean and the
/// deviation, per thread of the reduction, and per iteration, `j2` step, working thread
/// and idle thread of the correlation.
const MEAN_ITER_OPS: u64 = 5;
const MEAN_THREAD_OPS: u64 = 20;
const STD_ITER_OPS: u64 = 7;
const STD_THREAD_OPS: u64 = 30;
const REDUCE_OPS: u64 = 28;
const CORR_ITER_OPS: u64 = 6;
const CORR_STEP_OPS: u64 = 8;
const CORR_THREAD_OPS: u64 = 12;
const IDLE_OPS: u64 = 5;

impl AppModel for Corr {
    fn name(&self) -> &'static str {
        "corr"
    }

    fn description(&self) -> &'static str {
        "PolyBench correlation: column means and deviations, then every column pair's dot product over all rows"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = pilot_sizes(SMALL_SIDE, MEDIUM_SIDE, LARGE_SIDE);
        let side = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, MIN_SIDE..=MAX_SIDE, format!("a {n} x {n} matrix"))
        })?;
        Ok(program(side, repeat, device))
    }

    /// PILOT's table: 63 % of the SMs.
    fn sm_utilization(&self) -> f64 {
        0.63
    }
}

/// Column pairs `corr_kernel` computes: thread `j1` of the `threads` working ones pairs
/// its column with each of the `n - 1 - j1` after it.
fn pairs(n: u64, threads: u64) -> u64 {
    threads * (n - 1) - threads * (threads - 1) / 2
}

/// Bytes of `data` that `corr_kernel` reads on an N x N matrix with `columns` covered
/// columns, counted per block: at step `k` a block whose threads from `first` on are
/// `a` still running (those with `j1 < n - 1 - k`) reads, in every row, their own
/// columns and the columns `k + 1` to the right, `a + min(k + 1, a)` floats where the
/// two ranges overlap.
fn corr_data_reads(n: u64, columns: u64) -> u64 {
    let mut floats_per_row = 0;
    for first in (0..columns).step_by(BLOCK as usize) {
        for k in 0..n - 1 {
            let running = (n - 1 - k).saturating_sub(first).min(BLOCK);
            if running == 0 {
                break;
            }
            floats_per_row += running + (k + 1).min(running);
        }
    }
    floats_per_row * n * FLOAT_BYTES
}

fn program(n: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let matrix = n * n * FLOAT_BYTES;
    let vector = n * FLOAT_BYTES;
    let data = p.buffer("data", matrix);
    let symmat = p.buffer("symmat", matrix);
    let stddev = p.buffer("stddev", vector);
    let mean = p.buffer("mean", vector);

    // Columns of the 1-D grids, and the 2-D grid's columns and rows (truncated grids).
    let columns = n / BLOCK * BLOCK;
    let (columns3, rows3) = (n / BLOCK3_X * BLOCK3_X, n / BLOCK3_Y * BLOCK3_Y);
    let covered = columns * FLOAT_BYTES;
    let column_walk = columns * n * FLOAT_BYTES;
    // A vector stored every iteration, plus its initial zero and its final value.
    let stores = columns * (n + 2) * FLOAT_BYTES;
    let stored = device.l2_resident_reads(covered, stores);

    let mean_kernel = Kernel {
        name: "mean_kernel".into(),
        ops: columns * (n * MEAN_ITER_OPS + MEAN_THREAD_OPS),
        accesses: vec![
            uniform(mean, 0, stored, AccessOrder::Linear).written_before_l2(stores),
            uniform(data, column_walk, 0, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: OuterLoop::uniform(columns, n),
    };
    let std_kernel = Kernel {
        name: "std_kernel".into(),
        ops: columns * (n * STD_ITER_OPS + STD_THREAD_OPS),
        accesses: vec![
            uniform(
                mean,
                device.l2_resident_reads(covered, column_walk),
                0,
                AccessOrder::Linear,
            )
            .read_before_l2(column_walk),
            uniform(stddev, 0, stored, AccessOrder::Linear).written_before_l2(stores),
            uniform(data, column_walk, 0, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: OuterLoop::uniform(columns, n),
    };
    let elements3 = columns3 * rows3;
    // Each block reads one line of 32 floats of each vector.
    let per_block_unfiltered = elements3 / (BLOCK3_X * BLOCK3_Y) * BLOCK3_X * FLOAT_BYTES;
    let per_block = device.l2_resident_reads(columns3 * FLOAT_BYTES, per_block_unfiltered);
    let reduce_kernel = Kernel {
        name: "reduce_kernel".into(),
        ops: elements3 * REDUCE_OPS,
        accesses: vec![
            uniform(mean, per_block, 0, AccessOrder::Linear).read_before_l2(per_block_unfiltered),
            uniform(stddev, per_block, 0, AccessOrder::Linear).read_before_l2(per_block_unfiltered),
            uniform(
                data,
                elements3 * FLOAT_BYTES,
                elements3 * FLOAT_BYTES,
                AccessOrder::Linear,
            ),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };
    // Threads with a column after theirs, and the pairs they compute.
    let working = columns.min(n - 1);
    let pairs = pairs(n, working);
    // Each working thread's line of `symmat`, and one iteration's `data` beside them.
    let hot = working * READ_LINE_BYTES + 2 * working * FLOAT_BYTES;
    // A sector per store when the lines do not stay in the L2 (always in host memory).
    let stores_unfiltered = pairs * n * WRITE_SECTOR_BYTES;
    let running_sums = if hot <= device.l2_bytes {
        pairs * FLOAT_BYTES
    } else {
        stores_unfiltered
    };
    let corr_kernel = Kernel {
        name: "corr_kernel".into(),
        ops: pairs * (n * CORR_ITER_OPS + CORR_STEP_OPS)
            + working * CORR_THREAD_OPS
            + (columns - working) * IDLE_OPS,
        accesses: vec![
            uniform(
                symmat,
                0,
                running_sums + (pairs + working) * WRITE_SECTOR_BYTES,
                AccessOrder::Strided {
                    stride_bytes: vector,
                },
            )
            .written_before_l2(stores_unfiltered + (pairs + working) * WRITE_SECTOR_BYTES),
            uniform(data, corr_data_reads(n, columns), 0, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: OuterLoop {
            threads: working,
            trips: pairs,
        },
    };

    let all = [data, symmat, stddev, mean];
    let mut setup: Vec<Op> = all.map(Op::Alloc).into();
    setup.extend([
        h2d(data, matrix),
        h2d(symmat, matrix),
        h2d(stddev, vector),
        h2d(mean, vector),
    ]);
    let mut body = Vec::new();
    for kernel in [mean_kernel, std_kernel, reduce_kernel, corr_kernel] {
        body.extend([Op::Launch(kernel), Op::Sync]);
    }
    let mut teardown = vec![h2d(symmat, FLOAT_BYTES), d2h(symmat, matrix)];
    teardown.extend(all.map(Op::Free));
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{
        check_app, gtx480, mib, ops_per_byte, phase_body, phase_kernels, rejects,
    };
    use crate::apps::testing::{order_of, traffic};

    /// Reads and writes per buffer (`data`, `symmat`, `stddev`, `mean`) of each of the
    /// four launches at side `n`.
    fn per_kernel(n: u64, device: DeviceShape) -> Vec<Vec<(u64, u64)>> {
        let p = Corr.program(&n.to_string(), 1, device).unwrap();
        phase_kernels(&p)
            .into_iter()
            .map(|k| traffic(&[Op::Launch(k.clone())], 4))
            .collect()
    }

    #[test]
    fn named_sizes_are_pilots_memory_within_ten_percent() {
        for (size, table_mib, side) in [
            ("small", 64.1, SMALL_SIDE),
            ("medium", 256.2, MEDIUM_SIDE),
            ("large", 1024.0, LARGE_SIDE),
        ] {
            let p = check_app(&Corr, size);
            assert_eq!(p.peak_allocated_bytes(), 8 * side * side + 8 * side);
            let off = mib(&p) / table_mib - 1.0;
            assert!(off.abs() < 0.10, "{size}: {:.1} MiB", mib(&p));
            // Whole blocks: the truncated grids cover every column.
            assert_eq!(side % 256, 0);
        }
        assert_eq!(check_app(&Corr, "default"), check_app(&Corr, "medium"));
        assert_eq!(
            Corr.program("2816", 1, gtx480()),
            Corr.program("small", 1, gtx480())
        );
    }

    #[test]
    fn four_synchronized_launches_on_four_device_buffers() {
        let p = Corr.program("small", 1, gtx480()).unwrap();
        let labels: Vec<_> = p.buffers.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["data", "symmat", "stddev", "mean"]);
        assert!(
            p.buffers
                .iter()
                .all(|b| b.kind == gpuswap_core::BufferKind::Device)
        );
        let body = phase_body(&p, 1);
        let names: Vec<_> = body
            .chunks(2)
            .map(|pair| match pair {
                [Op::Launch(k), Op::Sync] => k.name.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            ["mean_kernel", "std_kernel", "reduce_kernel", "corr_kernel"]
        );
        // The correlation walks symmat's rows together, data pass after pass.
        let corr = phase_kernels(&p)[3];
        assert_eq!(
            order_of(&p, corr, "symmat"),
            Some(AccessOrder::Strided {
                stride_bytes: 2816 * 4
            })
        );
        assert_eq!(order_of(&p, corr, "data"), Some(AccessOrder::Linear));
    }

    #[test]
    fn traffic_on_one_block_by_hand() {
        // N = 256: one block of 256 threads, 255 of them working in corr_kernel.
        let t = per_kernel(256, gtx480());
        let (matrix, vector) = (256 * 256 * 4, 256 * 4);
        // mean: data once; mean's 256 x 258 stores written back once from the L2.
        assert_eq!(t[0], vec![(matrix, 0), (0, 0), (0, 0), (0, vector)]);
        // std: data once, mean's per-iteration reloads once, stddev like mean.
        assert_eq!(t[1], vec![(matrix, 0), (0, 0), (0, vector), (vector, 0)]);
        // reduce: data read and written once, the vectors once each.
        assert_eq!(
            t[2],
            vec![(matrix, matrix), (0, 0), (vector, 0), (vector, 0)]
        );
        // corr: 255 + 254 + ... + 1 = 32640 pairs. Floats per row over the 255 steps:
        // the running threads 255 - k sum to 32640, the overlap min(k + 1, 255 - k) to
        // 8256 + 8128 = 16384; 256 rows of 4 bytes each.
        assert_eq!(pairs(256, 255), 32_640);
        assert_eq!(corr_data_reads(256, 256), (32_640 + 16_384) * 256 * 4);
        // symmat: the running sums written back once (4 B a pair), a sector per mirror
        // store and per diagonal element.
        let symmat = 32_640 * 4 + 32_640 * 32 + 255 * 32;
        assert_eq!(
            t[3],
            vec![(50_200_576, 0), (0, symmat), (0, 0), (0, 0)],
            "{:?}",
            t[3]
        );
    }

    #[test]
    fn truncated_grids_leave_the_last_columns_alone() {
        // N = 300: kernels 1, 2 and 4 cover 256 columns, kernel 3 288 x 296 elements.
        let t = per_kernel(300, gtx480());
        assert_eq!(t[0][0], (256 * 300 * 4, 0));
        assert_eq!(t[1][0], (256 * 300 * 4, 0));
        assert_eq!(t[2][0], (288 * 296 * 4, 288 * 296 * 4));
        // Every thread of the one block works: 256 threads pair with up to 299 columns.
        assert_eq!(pairs(300, 256), 256 * 299 - 256 * 255 / 2);
        let p = Corr.program("300", 1, gtx480()).unwrap();
        let corr = phase_kernels(&p)[3];
        assert_eq!(
            corr.ops,
            pairs(300, 256) * (300 * 6 + 8) + 256 * 12,
            "no idle thread"
        );
    }

    #[test]
    fn without_an_l2_every_store_reaches_memory() {
        let none = DeviceShape {
            l2_bytes: 0,
            ..gtx480()
        };
        let t = per_kernel(256, none);
        assert_eq!(t[0][3], (0, 256 * 258 * 4));
        assert_eq!(t[1][3], (256 * 256 * 4, 0));
        // One line of 32 floats per block of 32 x 8: 8 x 32 blocks.
        assert_eq!(t[2][3], (8 * 32 * 128, 0));
        // Every iteration's store of a running sum moves a sector.
        assert_eq!(t[3][1], (0, 32_640 * 256 * 32 + 32_640 * 32 + 255 * 32));
    }

    #[test]
    fn the_correlation_dominates_and_every_kernel_is_memory_bound() {
        let p = Corr.program("medium", 1, gtx480()).unwrap();
        let ks = phase_kernels(&p);
        for k in &ks {
            let per_byte = ops_per_byte(k);
            let bound = if k.name == "reduce_kernel" { 3.8 } else { 2.0 };
            assert!(per_byte < bound, "{}: {per_byte}", k.name);
        }
        // Just under 4 N^3 bytes of data: the ranges overlap in the first 255 steps.
        let n = MEDIUM_SIDE as f64;
        let data = ks[3].accesses[1].read_bytes as f64 / (4.0 * n * n * n);
        assert!((0.95..1.0).contains(&data), "{data}");
        // Threads' lines still fit the GTX 480's L2 at the medium size, not at large.
        let upper = |size: &str| {
            let p = Corr.program(size, 1, gtx480()).unwrap();
            phase_kernels(&p)[3].accesses[0].write_bytes
        };
        let m = MEDIUM_SIDE;
        assert_eq!(upper("medium"), pairs(m, m - 1) * 36 + (m - 1) * 32);
        let l = LARGE_SIDE;
        assert!(upper("large") > pairs(l, l - 1) * l * 32);
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Corr, "255", "256 to 32768");
        rejects(&Corr, "40000", "256 to 32768");
        rejects(&Corr, "huge", "not a size");
        rejects(&Corr, "2048x2048", "not a size");
    }
}
