//! Rodinia `gaussian`: forward elimination of an N x N linear system, one pair of
//! kernels per pivot row; one of the ten benchmarks of the PILOT study
//! (`../shared/spec/pilot.md`), where it is an iterative app.
//!
//! # The real program (Rodinia 3.1, `cuda/gaussian/gaussian.cu`)
//! `-s N` makes the matrix on the host (the run script's second line uses N = 16).
//! Device buffers, float, in allocation order: `m` (the multipliers, N x N, zeroed by
//! the host), `a` (the matrix, N x N, row-major) and `b` (the right-hand side, N); all
//! three are copied up (setup). For every pivot `t = 0 .. N - 2` the host launches
//! - `Fan1` on ceil(N / 512) blocks of 512 threads: thread `i < N - 1 - t` sets
//!   `m[t + 1 + i][t]` to `a[t + 1 + i][t] / a[t][t]`, walking column `t` down the rows
//!   below the pivot;
//! - `Fan2` on ceil(N / 4) x ceil(N / 4) blocks of 4 x 4 threads, x along the rows below
//!   the pivot and y along the columns from `t`: thread (x, y) inside the
//!   (N - 1 - t) x (N - t) trailing submatrix subtracts `m[t + 1 + x][t] a[t][t + y]`
//!   from `a[t + 1 + x][t + y]`, and the threads of the first column (`y = 0`) update
//!   `b[t + 1 + x]` with the same multiplier and `b[t]`;
//!
//! each launch followed by a device synchronization: 2 (N - 1) launches. The grids keep
//! their full size at every `t`; the threads outside the shrinking submatrix test their
//! bounds and return. Afterwards the host copies `m`, `a` and `b` back and frees them
//! (teardown); back substitution runs on the host, outside the GPU's work. The phase
//! body is the forward elimination; `repeat` eliminates the already triangular matrix
//! again, with the same traffic.
//!
//! # Sizes
//! The buffers take 8 N^2 + 4 N bytes. PILOT's table lists 128 MB, 512 MB and 1.1 GB;
//! read in binary units (as the hs3d and lavamd tables must be) the first two are two
//! N x N float matrices at N = 4096 and 8192 exactly, the matrix sides Rodinia's data
//! files use:
//! - `small`: N = 4096, 128.0 MiB (0.01 % over 128 MiB);
//! - `medium` and `default`: N = 8192, 512.0 MiB (0.01 % over);
//! - `large`: N = 12160, 1.102 GiB (0.2 % over 1.1 GiB; a multiple of 64, the side
//!   nearest 1.1 GiB among them);
//! - `rodinia`: the run script's N = 16, 2 KiB.
//!
//! A plain number is the side N, 2 to 32768 (8 GiB of matrices). At the medium size the
//! phase launches 16 382 kernels, at the large 24 318: the program's shape, which
//! PILOT's schedulers see kernel by kernel.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! At pivot `t` the submatrix has r = N - 1 - t rows and c = N - t columns.
//! - `Fan1`: each thread reads one element of column `t` of `a` and writes one of
//!   column `t` of `m`, rows 4N bytes apart: an isolated read (a line) and an isolated
//!   write (a sector) per row. The pivot `a[t][t]`, read by every thread, stays in the
//!   L2: one line more, r + 1 lines of `a` in all.
//! - `Fan2`, `a`: a warp is one block, 4 rows x 4 consecutive floats: per row a 16-byte
//!   segment read and written back. Blocks run x first, so the grid walks a strip of
//!   4 columns down all rows, then the next strip; a line of 32 floats is revisited by
//!   the next 7 strips, each after a whole strip of N rows (N lines) has passed through
//!   the L2, beside the strip's N lines of `m` (below). While those 2N lines fit (the
//!   rule of [`DeviceShape::reused_reads`]: up to N = 3072 on the GTX 480's 768 KiB,
//!   24 576 on a V100's 6 MiB, so every named size on PILOT's GPU) every line moves
//!   once, 4 bytes per element each way; beyond, each segment moves a line when read,
//!   32 bytes per element, and a sector when written, 8. The pivot row's c elements, read by every
//!   block of a strip in a row, move once. At the page level the strip walks the
//!   submatrix a row apart: `Strided` by a row.
//! - `Fan2`, `m`: every block reads the multipliers of its 4 rows, isolated elements of
//!   column `t`, a line each; the strips after the first find them in the L2 under the
//!   same rule, so the column moves once (r lines) or once per strip (r ceil(c / 4)
//!   lines).
//! - `Fan2`, `b`: the r threads of the first column read and write their element of `b`
//!   (coalesced by 4, counted by the byte) and read `b[t]` (in the L2).
//!
//! Over the elimination the submatrix shrinks from the whole matrix to its last row:
//! each launch's accesses are per-launch ranges from the pivot's row to the end, so the
//! pages near the end of both matrices are touched most, as in [`lud`](super::lud).
//! Summed, `a` moves about N^3 / 3 elements each way.
//!
//! # Compute
//! Estimated from the kernels' code, not measured: `Fan1` 20 instructions per working
//! thread (index, bound test, two loads, a division of about 10, the store) and 5 per
//! idle one; `Fan2` 15 per working thread (index arithmetic, both bound tests, three
//! loads, a multiply-add, the store, the first-column test), 8 more in the first
//! column, and 6 per idle thread (the index and a failing bound test). The idle threads
//! are most of the grid late in the elimination: N^2 threads per `Fan2` launch against
//! the r c that work. With every line moving once a working `Fan2` thread does 15
//! instructions for 8 bytes, about 1.9 per byte where the GTX 480 model balances at 3.8:
//! memory bound.

use super::common::{
    READ_LINE_BYTES, WRITE_SECTOR_BYTES, d2h, h2d, parse_size, phased, pilot_rodinia_sizes, within,
};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{Access, AccessOrder, Distribution, Kernel, Op, Program, Slot, WeightedRange};

/// The gaussian app.
pub struct Gaussian;

const HELP: &str = "default or medium (N = 8192: two 8192 x 8192 matrices, 512 MiB, \
                    PILOT's 512 MB), small (N = 4096, 128 MiB, PILOT's 128 MB), large \
                    (N = 12160, 1.1 GiB, PILOT's 1.1 GB), rodinia (N = 16, the run \
                    script's -s 16), or a matrix side N (2 to 32768)";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// The named sizes: N for PILOT's small, medium and large inputs, and the run script's.
const SMALL_SIDE: u64 = 4096;
const MEDIUM_SIDE: u64 = 8192;
const LARGE_SIDE: u64 = 12_160;
const RODINIA_SIDE: u64 = 16;
/// Largest side accepted: two 4 GiB matrices.
const MAX_SIDE: u64 = 32_768;
/// Threads per block of `Fan1`, and the side of `Fan2`'s square blocks.
const FAN1_BLOCK: u64 = 512;
const FAN2_BLOCK: u64 = 4;
/// Instructions (module doc): per working and idle thread of `Fan1`; per working
/// thread, extra per first-column thread and per idle thread of `Fan2`.
const FAN1_OPS: u64 = 20;
const FAN1_IDLE_OPS: u64 = 5;
const FAN2_OPS: u64 = 15;
const FAN2_COLUMN_OPS: u64 = 8;
const FAN2_IDLE_OPS: u64 = 6;

impl AppModel for Gaussian {
    fn name(&self) -> &'static str {
        "gaussian"
    }

    fn description(&self) -> &'static str {
        "Rodinia gaussian: forward elimination, a column of multipliers and a submatrix update per pivot row"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = pilot_rodinia_sizes(SMALL_SIDE, MEDIUM_SIDE, LARGE_SIDE, RODINIA_SIDE);
        let side = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, 2..=MAX_SIDE, format!("a {n} x {n} matrix"))
        })?;
        Ok(program(side, repeat, device))
    }
}

/// An access to the `bytes` of a buffer from `offset`.
fn range(
    slot: Slot,
    offset: u64,
    bytes: u64,
    (read, write): (u64, u64),
    order: AccessOrder,
) -> Access {
    Access {
        slot,
        read_bytes: read,
        reread_bytes: 0,
        write_bytes: write,
        rewrite_bytes: 0,
        distribution: Distribution::Ranges(vec![WeightedRange {
            offset_bytes: offset,
            bytes,
            weight: 1.0,
        }]),
        order,
    }
}

/// An access to rows `first..` of an N x N matrix of `row` bytes a row, to its end,
/// walked a row apart.
fn rows_from(slot: Slot, first: u64, row: u64, moved: (u64, u64)) -> Access {
    let rows = row / FLOAT_BYTES - first;
    let order = AccessOrder::Strided { stride_bytes: row };
    range(slot, first * row, rows * row, moved, order)
}

fn program(n: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let row = n * FLOAT_BYTES;
    let matrix = n * row;
    let m = p.buffer("m", matrix);
    let a = p.buffer("a", matrix);
    let b = p.buffer("b", row);

    // A strip of Fan2 leaves its lines in the L2 for the next strips while they and
    // the multipliers' column, a line a row each, fit (module doc).
    let lines_stay = 2 * n * READ_LINE_BYTES <= device.l2_bytes;
    let fan1_threads = n.div_ceil(FAN1_BLOCK) * FAN1_BLOCK;
    let fan2_threads = (n.div_ceil(FAN2_BLOCK) * FAN2_BLOCK).pow(2);

    let mut body = Vec::with_capacity(2 * n as usize);
    for t in 0..n - 1 {
        let (r, c) = (n - 1 - t, n - t);
        let fan1 = Kernel {
            name: "Fan1".into(),
            ops: r * FAN1_OPS + (fan1_threads - r) * FAN1_IDLE_OPS,
            accesses: vec![
                rows_from(m, t + 1, row, (0, r * WRITE_SECTOR_BYTES)),
                rows_from(a, t, row, ((r + 1) * READ_LINE_BYTES, 0)),
            ],
            phases: Vec::new(),
            outer_loop: Default::default(),
        };
        let elements = r * c;
        // What the strips move when no line stays in the L2 between them: in host memory
        // every strip's reads and writes cross the link.
        let strips = c.div_ceil(FAN2_BLOCK);
        let unfiltered = (
            elements * READ_LINE_BYTES / FAN2_BLOCK,
            elements * WRITE_SECTOR_BYTES / FAN2_BLOCK,
            r * strips * READ_LINE_BYTES,
        );
        let (a_read, a_written, m_read) = if lines_stay {
            (
                elements * FLOAT_BYTES,
                elements * FLOAT_BYTES,
                r * READ_LINE_BYTES,
            )
        } else {
            unfiltered
        };
        let fan2 = Kernel {
            name: "Fan2".into(),
            ops: elements * FAN2_OPS
                + r * FAN2_COLUMN_OPS
                + (fan2_threads - elements) * FAN2_IDLE_OPS,
            accesses: vec![
                rows_from(m, t + 1, row, (m_read, 0)).read_before_l2(unfiltered.2),
                rows_from(a, t, row, (a_read + c * FLOAT_BYTES, a_written))
                    .read_before_l2(unfiltered.0 + c * FLOAT_BYTES)
                    .written_before_l2(unfiltered.1),
                range(
                    b,
                    t * FLOAT_BYTES,
                    c * FLOAT_BYTES,
                    (c * FLOAT_BYTES, r * FLOAT_BYTES),
                    AccessOrder::Linear,
                ),
            ],
            phases: Vec::new(),
            outer_loop: Default::default(),
        };
        body.extend([Op::Launch(fan1), Op::Sync, Op::Launch(fan2), Op::Sync]);
    }

    let all = [m, a, b];
    let mut setup: Vec<Op> = all.map(Op::Alloc).into();
    setup.extend([h2d(m, matrix), h2d(a, matrix), h2d(b, row)]);
    let mut teardown = vec![d2h(m, matrix), d2h(a, matrix), d2h(b, row)];
    teardown.extend(all.map(Op::Free));
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{
        check_app, density, gtx480, launches, mib, phase_body, phase_kernels, rejects, traffic,
    };
    use crate::preset;

    #[test]
    fn named_sizes_are_pilots_memory_within_ten_percent() {
        for (size, table_mib, side) in [
            ("small", 128.0, SMALL_SIDE),
            ("medium", 512.0, MEDIUM_SIDE),
            ("large", 1.1 * 1024.0, LARGE_SIDE),
        ] {
            let p = Gaussian.program(size, 1, gtx480()).unwrap();
            assert_eq!(p.peak_allocated_bytes(), 8 * side * side + 4 * side);
            let off = mib(&p) / table_mib - 1.0;
            assert!(off.abs() < 0.10, "{size}: {:.1} MiB", mib(&p));
            // In fact within 0.2 %.
            assert!(off.abs() < 2e-3, "{size}: {:.1} MiB", mib(&p));
        }
        assert_eq!(
            Gaussian.program("default", 1, gtx480()),
            Gaussian.program("medium", 1, gtx480())
        );
        assert_eq!(check_app(&Gaussian, "rodinia").peak_allocated_bytes(), 2112);
    }

    #[test]
    fn two_synchronized_launches_per_pivot_row() {
        let p = check_app(&Gaussian, "rodinia");
        let body = phase_body(&p, 1);
        assert_eq!(launches(body), 30);
        let names: Vec<_> = phase_kernels(&p).iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names[..4], ["Fan1", "Fan2", "Fan1", "Fan2"]);
        assert!(matches!(
            body[..4],
            [Op::Launch(_), Op::Sync, Op::Launch(_), Op::Sync]
        ));
        let medium = Gaussian.program("medium", 1, gtx480()).unwrap();
        assert_eq!(launches(phase_body(&medium, 1)), 2 * 8191);
    }

    #[test]
    fn traffic_at_n_16_by_hand() {
        // 2 x 16 lines fit any preset's L2: every line of the submatrix moves once.
        let p = Gaussian.program("16", 1, gtx480()).unwrap();
        let ks = phase_kernels(&p);
        // Pivot 0: Fan1 reads 16 lines of column 0 of a, writes 15 sectors of m.
        assert_eq!(ks[0].accesses[0].write_bytes, 15 * 32);
        assert_eq!(ks[0].accesses[1].read_bytes, 16 * 128);
        // Fan2 at pivot 0: 15 x 16 elements read and written, the pivot row read, the
        // 15 multipliers a line each, b's 16 elements read and 15 written.
        let fan2 = &ks[1].accesses;
        assert_eq!(fan2[0].read_bytes, 15 * 128);
        assert_eq!(
            (fan2[1].read_bytes, fan2[1].write_bytes),
            (15 * 16 * 4 + 16 * 4, 15 * 16 * 4)
        );
        assert_eq!((fan2[2].read_bytes, fan2[2].write_bytes), (16 * 4, 15 * 4));
        // 16 x 16 threads, 240 working, 15 of them in the first column.
        assert_eq!(ks[1].ops, 240 * 15 + 15 * 8 + 16 * 6);
        // Fan1: one block of 512 threads, 15 working.
        assert_eq!(ks[0].ops, 15 * 20 + 497 * 5);
        // Summed, a moves about N^3 / 3 elements each way.
        let (read, written) = traffic(phase_body(&p, 1), 3)[1];
        let third = (16u64.pow(3) / 3 * 4) as f64;
        assert!((written as f64 / third - 1.0).abs() < 0.15, "{written}");
        assert!(read > written);
    }

    #[test]
    fn beyond_the_l2_each_segment_moves_a_line() {
        // 2 x 4096 lines are 1 MiB: beyond the GTX 480's 768 KiB, within a V100's.
        let fan2_a = |device| {
            let p = Gaussian.program("small", 1, device).unwrap();
            let k = phase_kernels(&p)[1];
            (k.accesses[1].read_bytes, k.accesses[1].write_bytes)
        };
        let elements = 4095 * 4096;
        let pivot_row = 4096 * 4;
        assert_eq!(fan2_a(gtx480()), (elements * 32 + pivot_row, elements * 8));
        let v100 = preset::find("v100-pcie-32gb").unwrap().shape();
        assert_eq!(fan2_a(v100), (elements * 4 + pivot_row, elements * 4));
    }

    #[test]
    fn the_end_of_the_matrix_is_touched_most() {
        let p = Gaussian.program("256", 1, gtx480()).unwrap();
        let d = density(&p, phase_body(&p, 1), 1, 4);
        assert!(d[0] < d[1] && d[1] < d[2] && d[2] < d[3], "{d:?}");
        for k in phase_kernels(&p) {
            for access in &k.accesses[..2] {
                assert_eq!(access.order, AccessOrder::Strided { stride_bytes: 1024 });
            }
        }
    }

    #[test]
    fn fan2_is_memory_bound_while_its_lines_move_once() {
        let ops_per_byte = FAN2_OPS as f64 / 8.0;
        assert!(ops_per_byte < 672e9 / 177.4e9, "{ops_per_byte}");
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Gaussian, "1", "2 to 32768");
        rejects(&Gaussian, "40000", "2 to 32768");
        rejects(&Gaussian, "8192x8192", "not a size");
    }
}
