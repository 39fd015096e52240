//! PolyBench/GPU `GESUMMV`: y = alpha A x + beta B x for two N x N matrices, in one
//! matrix-vector kernel; one of the ten benchmarks of the PILOT study
//! (`../shared/spec/pilot.md`), "long running" there.
//!
//! # The real program (PolyBench/GPU 1.0, `CUDA/GESUMMV/gesummv.cu` and `.cuh` of
//! `sgrauerg/polybenchGpu`)
//! Buffers, float, in allocation order: `A` and `B` (N x N, row-major), `x`, `y` and
//! `tmp` (N each), with N = 4096 in every dataset of the header. The host fills `A`, `B`
//! and `x` and copies all five buffers up (setup: H2D of each; `y` and `tmp` carry
//! whatever the host's arrays hold, and the kernel accumulates onto them without zeroing
//! them). Then one launch of `gesummv_kernel` on ceil(N / 256) blocks of 256 threads,
//! one thread per row `i < N`, and a device synchronization: thread `i` walks row `i` of
//! both matrices, adding `A[i][j] x[j]` to `tmp[i]` and `B[i][j] x[j]` to `y[i]` for
//! every `j`, then sets `y[i]` to `alpha tmp[i] + beta y[i]`. The host copies `y` back
//! (teardown: D2H of `y`); the program never frees its device buffers (it exits), the
//! model frees them as every app does. The phase body is the launch and its
//! synchronization, so `repeat` accumulates into `tmp` and `y` again as a longer run
//! would.
//!
//! # Sizes
//! The buffers take 8 N^2 + 12 N bytes. PILOT's table gives 256 MB, 1 GB and 4 GB; the
//! model's sizes are N = 5792 (`small`, 256.01 MiB), 11584 (`medium`, the default,
//! 1023.9 MiB) and 23168 (`large`, 4095.4 MiB): multiples of 32 (whole warps) within
//! 0.02 % of the table read as MiB and GiB (5 to 7.4 % above it read as decimal
//! units). The
//! table's figures are exactly four N x N float matrices at N = 4096, 8192 and 16384,
//! twice what the program's GPU buffers take at those N; the paper does not say what it
//! counted, so the model takes its memory as given.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! - `A` and `B`: a warp's load reads one float from each of 32 rows, 4N bytes apart:
//!   uncoalesced, a 128-byte line per row. Each thread's next 31 iterations read the rest
//!   of its line, so whether a line moves once or once per element depends on whether
//!   it survives that long: between two reads of a line every other thread reads its own
//!   two lines and its `tmp` and `y` elements, 2 N x 128 + 8 N bytes in all. While that
//!   fits in the L2 (the rule of [`DeviceShape::reused_reads`]: N up to 23 831 on a
//!   V100's 6 MiB, so every named size on PILOT's GPU, `large` with 3 % to spare; up to
//!   2978 on the GTX 480) each line of both matrices moves once, 4 N^2 bytes each;
//!   beyond, every element moves a line, 128 N^2 bytes each. The model counts every row
//!   as in flight at once (all N threads resident, up to 23 040 on the GTX 480 and
//!   163 840 on a V100). At the page level the threads advance together along their
//!   rows, so the launch touches the current page of every row, then the next page of
//!   every row: `Strided` by a row, as in [`atax`](super::atax)'s first kernel.
//! - `x`: every warp reads the whole vector, one float broadcast to its lanes, twice per
//!   iteration (the store to `tmp` might have changed `x[j]`, so it is loaded again for
//!   `B`'s product); the vector stays in the L2, read once per launch
//!   ([`DeviceShape::l2_resident_reads`]).
//! - `tmp` and `y`: the sums cannot stay in registers, as the buffers might alias each
//!   other and the matrices: every iteration loads and stores both (coalesced, a warp's
//!   32 consecutive floats), and the final expression loads `tmp` once more and stores
//!   `y` once more. Streamed into the write-back L2, which holds the vectors and reads
//!   and writes each once while they stay there, every time otherwise (the estimate
//!   [`atax`](super::atax) uses for its stored vectors).
//!
//! # Compute
//! Estimated from the kernel's code, not measured: 11 instructions per iteration (six
//! loads, two multiply-adds, two stores, the loop's counter and branch, the addresses
//! folded into offsets) and 15 per thread (index, bound test, the final expression),
//! 5 per idle thread of the last block. With each line moving once that is 11
//! instructions per 8 bytes of the matrices, 1.4 per byte, below the GTX 480 model's
//! balance of 3.8: memory bound, and far more so when every element moves a line.

use super::common::{READ_LINE_BYTES, d2h, h2d, parse_size, phased, pilot_sizes, uniform, within};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, OuterLoop, Program};

/// The gesummv app.
pub struct Gesummv;

const HELP: &str = "default or medium (N = 11584: two 11584 x 11584 matrices, 1 GiB, \
                    PILOT's 1 GB), small (N = 5792, 256 MiB, PILOT's 256 MB), large \
                    (N = 23168, 4 GiB, PILOT's 4 GB), or a matrix side N (1 to 32768)";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// The named sizes: N for PILOT's small, medium and large inputs.
const SMALL_SIDE: u64 = 5792;
const MEDIUM_SIDE: u64 = 11_584;
const LARGE_SIDE: u64 = 23_168;
/// Largest side accepted: 8 GiB of matrices.
const MAX_SIDE: u64 = 32_768;
/// Threads per block, and per warp.
const BLOCK: u64 = 256;
const WARP: u64 = 32;
/// Instructions per iteration, per working thread and per idle thread (module doc).
const ITER_OPS: u64 = 11;
const THREAD_OPS: u64 = 15;
const IDLE_OPS: u64 = 5;

impl AppModel for Gesummv {
    fn name(&self) -> &'static str {
        "gesummv"
    }

    fn description(&self) -> &'static str {
        "PolyBench gesummv: y = alpha A x + beta B x, one thread walking each row of two matrices"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = pilot_sizes(SMALL_SIDE, MEDIUM_SIDE, LARGE_SIDE);
        let side = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, 1..=MAX_SIDE, format!("a {n} x {n} matrix"))
        })?;
        Ok(program(side, repeat, device))
    }
}

fn program(n: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let matrix = n * n * FLOAT_BYTES;
    let vector = n * FLOAT_BYTES;
    let [a, b] = ["A", "B"].map(|label| p.buffer(label, matrix));
    let [x, y, tmp] = ["x", "y", "tmp"].map(|label| p.buffer(label, vector));

    // Every row's current line of both matrices, and the stored vectors beside them.
    let in_flight = 2 * n * READ_LINE_BYTES + 2 * vector;
    // A line per element when no row's line stays in the L2 (always in host memory).
    let rows_unfiltered = n * n * READ_LINE_BYTES;
    let rows = if in_flight <= device.l2_bytes {
        matrix
    } else {
        rows_unfiltered
    };
    let row_walk = AccessOrder::Strided {
        stride_bytes: vector,
    };
    let warps = n.div_ceil(WARP);
    let threads = n.div_ceil(BLOCK) * BLOCK;
    // A vector loaded or stored by every thread `times` times.
    let each = |times: u64| device.l2_resident_reads(vector, times * vector);
    // A vector loaded `reads` times and stored `writes` times by every thread.
    let read_written = |slot, reads: u64, writes: u64| {
        uniform(slot, each(reads), each(writes), AccessOrder::Linear)
            .read_before_l2(reads * vector)
            .written_before_l2(writes * vector)
    };
    let kernel = Kernel {
        name: "gesummv_kernel".into(),
        ops: n * (n * ITER_OPS + THREAD_OPS) + (threads - n) * IDLE_OPS,
        accesses: vec![
            uniform(a, rows, 0, row_walk).read_before_l2(rows_unfiltered),
            uniform(b, rows, 0, row_walk).read_before_l2(rows_unfiltered),
            uniform(
                x,
                device.l2_resident_reads(vector, 2 * warps * vector),
                0,
                AccessOrder::Linear,
            )
            .read_before_l2(2 * warps * vector),
            read_written(y, n, n + 1),
            read_written(tmp, n + 1, n),
        ],
        phases: Vec::new(),
        outer_loop: OuterLoop::uniform(n, n),
    };

    let all = [a, b, x, y, tmp];
    let mut setup: Vec<Op> = all.map(Op::Alloc).into();
    setup.extend([
        h2d(a, matrix),
        h2d(b, matrix),
        h2d(x, vector),
        h2d(y, vector),
        h2d(tmp, vector),
    ]);
    let body = vec![Op::Launch(kernel), Op::Sync];
    let mut teardown = vec![d2h(y, vector)];
    teardown.extend(all.map(Op::Free));
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{
        check_app, gtx480, launches, mib, ops_per_byte, order_of, phase_body, phase_kernels,
        rejects, traffic,
    };
    use crate::preset;

    /// Reads and writes per buffer (`A`, `B`, `x`, `y`, `tmp`) of the launch at side `n`.
    fn launch_traffic(n: u64, device: DeviceShape) -> Vec<(u64, u64)> {
        let p = Gesummv.program(&n.to_string(), 1, device).unwrap();
        traffic(phase_body(&p, 1), 5)
    }

    #[test]
    fn named_sizes_are_pilots_memory_within_ten_percent() {
        for (size, table_mib, side) in [
            ("small", 256.0, SMALL_SIDE),
            ("medium", 1024.0, MEDIUM_SIDE),
            ("large", 4096.0, LARGE_SIDE),
        ] {
            let p = check_app(&Gesummv, size);
            assert_eq!(p.peak_allocated_bytes(), 8 * side * side + 12 * side);
            let off = mib(&p) / table_mib - 1.0;
            assert!(off.abs() < 0.10, "{size}: {:.1} MiB", mib(&p));
            // In fact within 0.02 %.
            assert!(off.abs() < 2e-4, "{size}: {:.1} MiB", mib(&p));
        }
        assert_eq!(
            check_app(&Gesummv, "default"),
            check_app(&Gesummv, "medium")
        );
    }

    #[test]
    fn one_synchronized_launch_walking_rows_of_five_device_buffers() {
        let p = Gesummv.program("small", 1, gtx480()).unwrap();
        let labels: Vec<_> = p.buffers.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["A", "B", "x", "y", "tmp"]);
        assert!(
            p.buffers
                .iter()
                .all(|b| b.kind == gpuswap_core::BufferKind::Device)
        );
        let body = phase_body(&p, 1);
        assert_eq!(launches(body), 1);
        assert!(matches!(body, [Op::Launch(_), Op::Sync]), "{body:?}");
        let k = phase_kernels(&p)[0];
        let rows = Some(AccessOrder::Strided {
            stride_bytes: 5792 * 4,
        });
        assert_eq!(order_of(&p, k, "A"), rows);
        assert_eq!(order_of(&p, k, "B"), rows);
        assert_eq!(order_of(&p, k, "x"), Some(AccessOrder::Linear));
    }

    #[test]
    fn traffic_at_n_64_by_hand() {
        // 64 rows: 2 x 64 lines of 128 B and two 256-byte vectors fit any L2, so each
        // line of A and B moves once; the vectors are read (and written) once.
        let t = launch_traffic(64, gtx480());
        let (matrix, vector) = (64 * 64 * 4, 64 * 4);
        assert_eq!(
            t,
            [
                (matrix, 0),
                (matrix, 0),
                (vector, 0),
                (vector, vector),
                (vector, vector)
            ]
        );
        // Without an L2 every element moves a line, and every load and store of a
        // vector reaches memory: x twice per iteration in each of 2 warps, y 64 loads
        // and 65 stores per thread, tmp 65 loads and 64 stores.
        let none = DeviceShape {
            l2_bytes: 0,
            ..gtx480()
        };
        let t = launch_traffic(64, none);
        assert_eq!(
            t,
            [
                (64 * 64 * 128, 0),
                (64 * 64 * 128, 0),
                (2 * 2 * 64 * 4, 0),
                (64 * 64 * 4, 65 * 64 * 4),
                (65 * 64 * 4, 64 * 64 * 4)
            ]
        );
        // 64 threads of 64 iterations, 192 idle threads in the one block.
        let p = Gesummv.program("64", 1, gtx480()).unwrap();
        assert_eq!(phase_kernels(&p)[0].ops, 64 * (64 * 11 + 15) + 192 * 5);
    }

    #[test]
    fn the_l2_decides_whether_a_line_moves_once_or_per_element() {
        let n = SMALL_SIDE;
        // 1.5 MB of rows in flight: beyond the GTX 480's 768 KiB, within a V100's 6 MiB.
        let fermi = launch_traffic(n, gtx480());
        assert_eq!(fermi[0].0, n * n * 128);
        let v100 = preset::find("v100-pcie-32gb").unwrap().shape();
        assert_eq!(launch_traffic(n, v100)[0].0, n * n * 4);
        // The V100 holds them up to N = 23831, the large size included.
        let large = Gesummv.program("large", 1, v100).unwrap();
        let k = phase_kernels(&large)[0];
        assert_eq!(k.accesses[1].read_bytes, LARGE_SIDE * LARGE_SIDE * 4);
        assert_eq!(launch_traffic(23_832, v100)[1].0, 23_832 * 23_832 * 128);
    }

    #[test]
    fn memory_bound_even_when_lines_move_once() {
        let v100 = preset::find("v100-pcie-32gb").unwrap().shape();
        let p = Gesummv.program("medium", 1, v100).unwrap();
        let k = phase_kernels(&p)[0];
        let per_byte = ops_per_byte(k);
        assert!((1.3..1.5).contains(&per_byte), "{per_byte}");
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Gesummv, "0", "1 to 32768");
        rejects(&Gesummv, "40000", "1 to 32768");
        rejects(&Gesummv, "4GB", "not a size");
    }
}
