//! Rodinia `backprop`: one training step of a three-layer perceptron with `in` input
//! units, 16 hidden units and one output.
//!
//! # The real program (Rodinia 3.1, `cuda/backprop`)
//! Buffers, float, in allocation order: `input_units` (in + 1), `output_hidden` (17,
//! passed to kernel 1 but never used), `input_hidden_weights` ((in + 1) x 17),
//! `hidden_partial_sum` (in: 16 per block of in / 16 blocks), then, just before kernel 2,
//! `hidden_delta` (17) and `input_prev_weights` ((in + 1) x 17). At 65536 units that is
//! 9.44 MB, the two weight matrices 4.46 MB each (`spec/apps.md`). The model allocates
//! all six in that order during setup, since the evaluation did not repeat allocations.
//!
//! Both kernels run a grid of in / 16 blocks of 16 x 16 threads; block `by`, thread
//! `(tx, ty)` works on weight row `16 by + ty + 1`, column `tx + 1`, so the blocks
//! together cover rows 1..=in and columns 1..=16 of the 17-float rows.
//! - `bpnn_layerforward_CUDA` reads one input unit per row and the 16 x 16 weight tile,
//!   multiplies, reduces the tile over `ty` in shared memory (4 steps), writes the tile
//!   back into the weight matrix in place and 16 partial sums per block.
//! - `bpnn_adjust_weights_cuda` reads `hidden_delta[tx + 1]` and the input unit, and
//!   read-modify-writes the weight and the previous-weight element. (`spec/apps.md` says
//!   it also reads `hidden_partial_sum`; the kernel's arguments do not include it.)
//!
//! Copies per training step: H2D input and weights; kernel 1; synchronize; D2H partial
//! sums; the host finishes the hidden and output layers; H2D `hidden_delta`, previous
//! weights and weights (again: the host's copy, overwriting kernel 1's in-place results);
//! kernel 2; D2H input and weights. The model's setup makes the first two copies, its
//! phase body everything from kernel 1 to kernel 2, its teardown the last two copies.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! A block's 16 weight rows are contiguous (17 floats each, the skipped column 0 lies
//! inside the same transactions), so each kernel reads `68 in` bytes of a weight matrix
//! and writes the `64 in` bytes of the 16 columns it computed:
//! - layerforward: weights read 68 in, written 64 in; input read 4 in; partial sums
//!   written 4 in;
//! - adjust_weights: weights and previous weights each read 68 in and written 64 in;
//!   input read 4 in; `hidden_delta` (68 B) read once per launch (it stays in L2).
//!
//! Over one phase iteration the weights see 2 x 132 bytes per row and the previous
//! weights 132: twice the accesses per page, the ratio the GPUswap profiles show, here a
//! consequence of kernel 1 touching only the weights.
//!
//! # Compute
//! layerforward: about 60 instructions per thread (index arithmetic ~12, two loads and
//! a store ~6, three barriers, four reduction steps with a `__powf` and a modulo each
//! ~9 x 4); adjust_weights: about 30 (index arithmetic ~12, four loads, two stores, ~6
//! floating-point operations, a barrier and a branch). With 16 in threads, kernel 1 comes
//! out compute bound by about 2x on the GTX 480 model (the reduction tree is
//! instruction-heavy), kernel 2 memory bound by about 2x.
//!
//! The host work between the kernels is dominated by summing the `in` partial sums (16
//! strided passes over the partial-sum array): modelled as 1 ns per partial sum
//! (unconfirmed; a Core i7-4770 adds a cached float in well under that, the strided
//! passes miss more).
//!
//! # Sizes
//! `default` is the largest input the real launch takes (the grid's y dimension, in / 16
//! blocks, stays below 65536), at the GPUswap evaluation's scale. `uvmsmart` is the
//! input of the managed-memory version in GPGPU-Sim UVM Smart (`benchmarks/Managed/backprop`,
//! run with 131056 units), the streaming workload of the adaptive unified-memory paper
//! (`../shared/spec/uvm-adaptive.md`): 18.0 MiB of this model's buffers, 2.5 % above
//! the 17.56 MB `spec/uvm-driver.md` lists (which is within 0.4 % of the 140 bytes per
//! unit the second kernel alone touches). Where that version differs, the model follows
//! Rodinia: that version allocates every array managed and copies nothing, and its
//! second kernel updates a second weight matrix (`input_weights2`), so there each large
//! matrix is swept by one kernel per training step, while here kernel 2 sweeps kernel
//! 1's weights again. `large` and inputs above 1048560 units need more
//! blocks than the grid's y dimension holds: the model takes them as if the blocks were
//! folded into a two-dimensional grid, which changes no thread's work.
//!
//! For the PILOT study (`../shared/spec/pilot.md`, one of its ten benchmarks) `small`
//! and `medium` are the inputs whose buffers (144 in + 276 bytes) take the memory of its
//! table, 8.8 MB and 133.5 MB (read in binary units, as the hs3d and lavamd tables must
//! be): the run script's 65536 units, 9.0 MiB (2.3 % over 8.8 MiB), and 972 112 units,
//! 133.50 MiB (the multiple of 16 nearest). Its 453 MB large input is the number
//! 3298640 (453.0 MiB): the name `large` keeps the unified-memory study's input.

use super::common::{d2h, h2d, parse_size, phased, uniform};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, OuterLoop, Program};

/// The backprop app.
pub struct Backprop;

/// Steps of `bpnn_layerforward_CUDA`'s reduction loop over the 16 rows of a tile
/// (log2 16), its only loop: the trips of PILOT's check.
const REDUCTION_STEPS: u64 = 4;
const HELP: &str = "default (1048560 input units, 144 MiB), rodinia (65536 units, 9.4 MB), \
                    uvmsmart (131056 units, 18 MiB, the research simulator's input), large \
                    (16777216 units, 2.25 GiB), small (65536 units, 9 MiB, PILOT's 8.8 MB), \
                    medium (972112 units, 133.5 MiB, PILOT's 133.5 MB), or a number of \
                    input units (a multiple of 16, 16 to 33554432; PILOT's 453 MB is \
                    3298640)";
/// Hidden units plus the bias unit: the width of a weight row.
const ROW_FLOATS: u64 = 17;
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// The largest input the real launch takes: the grid's y dimension (in / 16) must stay
/// below 65536.
const GRID_Y_UNITS: u64 = (1 << 20) - 16;
/// The input of UVM Smart's run script.
const UVMSMART_UNITS: u64 = 131_056;
/// 2.25 GiB of buffers (144 bytes per unit).
const LARGE_UNITS: u64 = 1 << 24;
/// PILOT's small and medium inputs (module doc).
const SMALL_UNITS: u64 = 65_536;
const MEDIUM_UNITS: u64 = 972_112;
/// The largest input accepted: 4.5 GiB of buffers.
const MAX_UNITS: u64 = 1 << 25;
/// Instructions per thread of `bpnn_layerforward_CUDA` (see the module doc).
const LAYERFORWARD_OPS_PER_THREAD: u64 = 60;
/// Instructions per thread of `bpnn_adjust_weights_cuda` (see the module doc).
const ADJUST_OPS_PER_THREAD: u64 = 30;
/// Host time per partial sum added between the kernels (unconfirmed, see the module doc).
const HOST_NS_PER_PARTIAL_SUM: u64 = 1;

impl AppModel for Backprop {
    fn name(&self) -> &'static str {
        "backprop"
    }

    fn description(&self) -> &'static str {
        "Rodinia backprop: one training step of a neural network layer (two large weight matrices)"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = [
            ("default", GRID_Y_UNITS),
            ("rodinia", 65_536),
            ("uvmsmart", UVMSMART_UNITS),
            ("large", LARGE_UNITS),
            ("small", SMALL_UNITS),
            ("medium", MEDIUM_UNITS),
        ];
        let units = parse_size(self.name(), HELP, size, &named, |n| {
            if n == 0 || !n.is_multiple_of(16) || n > MAX_UNITS {
                Err(format!(
                    "{n} input units is not a multiple of 16 between 16 and {MAX_UNITS}"
                ))
            } else {
                Ok(n)
            }
        })?;
        Ok(program(units, repeat, device))
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Streaming)
    }
}

fn program(units: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let units_bytes = (units + 1) * FLOAT_BYTES;
    let matrix_bytes = (units + 1) * ROW_FLOATS * FLOAT_BYTES;
    let small_bytes = ROW_FLOATS * FLOAT_BYTES;
    let input = p.buffer("input_units", units_bytes);
    let output_hidden = p.buffer("output_hidden", small_bytes);
    let weights = p.buffer("input_hidden_weights", matrix_bytes);
    let partial = p.buffer("hidden_partial_sum", units * FLOAT_BYTES);
    let delta = p.buffer("hidden_delta", small_bytes);
    let prev_weights = p.buffer("input_prev_weights", matrix_bytes);

    // Rows 1..=in, read whole, 16 of 17 columns written.
    let rows_read = units * ROW_FLOATS * FLOAT_BYTES;
    let rows_written = units * 16 * FLOAT_BYTES;
    let threads = units * 16;
    let layerforward = Kernel {
        name: "bpnn_layerforward_CUDA".into(),
        ops: threads * LAYERFORWARD_OPS_PER_THREAD,
        accesses: vec![
            uniform(input, units * FLOAT_BYTES, 0, AccessOrder::Linear),
            uniform(weights, rows_read, rows_written, AccessOrder::Linear),
            uniform(partial, 0, units * FLOAT_BYTES, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: OuterLoop::uniform(threads, REDUCTION_STEPS),
    };
    let adjust = Kernel {
        name: "bpnn_adjust_weights_cuda".into(),
        ops: threads * ADJUST_OPS_PER_THREAD,
        accesses: vec![
            uniform(
                delta,
                device.l2_resident_reads(small_bytes, threads * FLOAT_BYTES),
                0,
                AccessOrder::Linear,
            )
            .read_before_l2(threads * FLOAT_BYTES),
            uniform(input, units * FLOAT_BYTES, 0, AccessOrder::Linear),
            uniform(weights, rows_read, rows_written, AccessOrder::Linear),
            uniform(prev_weights, rows_read, rows_written, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };

    let all = [input, output_hidden, weights, partial, delta, prev_weights];
    let mut setup: Vec<Op> = all.iter().map(|&s| Op::Alloc(s)).collect();
    setup.extend([h2d(input, units_bytes), h2d(weights, matrix_bytes)]);
    let body = vec![
        Op::Launch(layerforward),
        Op::Sync,
        d2h(partial, units * FLOAT_BYTES),
        Op::Cpu {
            ns: units * HOST_NS_PER_PARTIAL_SUM,
        },
        h2d(delta, small_bytes),
        h2d(prev_weights, matrix_bytes),
        h2d(weights, matrix_bytes),
        Op::Launch(adjust),
    ];
    let mut teardown = vec![d2h(input, units_bytes), d2h(weights, matrix_bytes)];
    teardown.extend(all.iter().map(|&s| Op::Free(s)));
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::assert_pilot_memory;
    use crate::apps::testing::{check_app, gtx480, launches, mib, per_byte, phase_body, rejects};

    #[test]
    fn rodinia_footprint_matches_the_formula() {
        let p = check_app(&Backprop, "rodinia");
        // 4 (in + 1) + 68 + 2 x 68 (in + 1) + 4 in + 68 at in = 65536: 9.44 MB.
        let expected = 4 * 65_537 + 68 + 2 * 68 * 65_537 + 4 * 65_536 + 68;
        assert_eq!(p.peak_allocated_bytes(), expected);
        assert!((p.peak_allocated_bytes() as f64 / 1e6 - 9.44).abs() < 0.01);
        assert_eq!(p.buffers[2].bytes, 4_456_516, "4.46 MB weight matrix");
    }

    #[test]
    fn uvmsmart_is_the_artifact_input_large_is_gibibytes() {
        let p = check_app(&Backprop, "uvmsmart");
        assert_eq!(p, Backprop.program("131056", 1, gtx480()).unwrap());
        // Within 3 % of the artifact's 17.56 MB (MiB, as its other figures).
        assert!((mib(&p) / 17.56 - 1.0).abs() < 0.03, "{}", mib(&p));
        let large = mib(&check_app(&Backprop, "large")) / 1024.0;
        assert!((2.0..=8.0).contains(&large), "{large} GiB");
        // Every kernel access is one linear sweep: streaming.
        let body = phase_body(&p, 1);
        for op in body {
            if let Op::Launch(k) = op {
                assert!(k.accesses.iter().all(|a| a.order == AccessOrder::Linear));
            }
        }
        assert_eq!(Backprop.pattern_class(), Some(PatternClass::Streaming));
    }

    #[test]
    fn default_is_the_largest_input_of_the_real_grid() {
        let p = check_app(&Backprop, "default");
        assert_eq!(p, Backprop.program("1048560", 1, gtx480()).unwrap());
        assert!((143.0..145.0).contains(&mib(&p)), "{}", mib(&p));
        assert_eq!(launches(phase_body(&p, 1)), 2);
    }

    #[test]
    fn weights_get_twice_the_accesses_per_page_of_the_previous_weights() {
        let p = Backprop.program("65536", 1, gtx480()).unwrap();
        let density = per_byte(&p, 1);
        let ratio = density[2] / density[5];
        // Two kernels touch the weights, one the previous weights, each the same way.
        assert!((ratio - 2.0).abs() < 1e-9, "{ratio}");
        // The two large buffers are the weights; output_hidden is never touched.
        assert_eq!(density[1], 0.0);
    }

    #[test]
    fn kernel_one_is_compute_bound_kernel_two_memory_bound() {
        let p = Backprop.program("default", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        let time = |op: &Op| {
            let Op::Launch(k) = op else {
                panic!("a launch")
            };
            let bytes: u64 = k
                .accesses
                .iter()
                .map(|a| a.read_bytes + a.write_bytes)
                .sum();
            (k.ops as f64 / 672e9, bytes as f64 / 177.4e9)
        };
        let (c1, m1) = time(&body[0]);
        let (c2, m2) = time(&body[7]);
        assert!(c1 > m1 && c1 < 3.0 * m1, "{c1} {m1}");
        assert!(m2 > c2 && m2 < 3.0 * c2, "{c2} {m2}");
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Backprop, "1000", "multiple of 16");
        rejects(&Backprop, "0", "multiple of 16");
        rejects(&Backprop, "33554448", "33554432");
        rejects(&Backprop, "64k", "not a size");
    }

    #[test]
    fn pilot_sizes_take_the_memory_of_its_table() {
        // The run script's input is 2.3 % over PILOT's small.
        assert_pilot_memory(&Backprop, &[("small", 8.8)], 0.03);
        assert_pilot_memory(&Backprop, &[("medium", 133.5), ("3298640", 453.0)], 1e-4);
        assert_eq!(
            Backprop.program("small", 1, gtx480()),
            Backprop.program("rodinia", 1, gtx480())
        );
    }
}
