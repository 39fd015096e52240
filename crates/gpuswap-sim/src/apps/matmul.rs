//! `matmul`: the PyTorch tenant measured on the H200 (`scripts/gpu-torch-tenant.py`,
//! docs/real-gpu.md's "PyTorch alone" and "PyTorch pair" rows), so that the simulator can
//! be set beside that measurement (`scenarios/real/torch-pair.toml`).
//!
//! **The real program.** `--gib G` asks for `floor(G x 2^30 / 64 MiB)` matrices of
//! 4096 x 4096 float32 (`side = 4096`, 4 bytes an element: 64 MiB each); the measured
//! runs passed `--gib 9.6` (`scripts/gpu-check.sh`), so 153 matrices, 9.56 GiB (the
//! JSON line's `"gib"`, and docs/real-gpu.md's "153 matrices ... 9.56 GiB, 60 % of the
//! daemon's VRAM"). It fills them with `torch.randn`, then allocates a 4096 x 64 weight
//! `w` and a 4096 x 64 accumulator `acc` (1 MiB each), and for `--rounds` rounds (300 in
//! every measured run) computes `acc += m @ w` for each matrix `m` in list order.
//!
//! **Sizes.** The size is the matrices' total as the script's `--gib` gives it: a size
//! with a unit, read as every size (`"9792MiB"` or `"9.5625GiB"` for the measured 153;
//! `"9.56GiB"` is not a whole number of bytes), of which the whole matrices count, as
//! the script's floor division does; or a plain number of matrices; or `"measured"`, the
//! 153 of the runs. `"default"` keeps the GPUswap evaluation's scale: 3 matrices (194 MiB
//! with the weight and the accumulator). The rounds are the tenant's `repeat`.
//!
//! **Setup.** Allocations of every matrix, the weight and the accumulator. `randn` and
//! `zeros` fill them on the GPU, not by copies from the host; their one write of each
//! byte happens before the measured phase (the script starts its clock after them) and
//! is left out, as the checksums the script computes before and after the phase are.
//!
//! **The phase body** is one round: for each matrix, one kernel `gemm_acc` that reads
//! the 64 MiB matrix once, in address order (cuBLAS tiles stream the rows), reads the
//! 1 MiB weight once (its tiles stay on chip and in the H200's 60 MiB L2 as the matrix
//! streams by) and reads and writes the 1 MiB accumulator once. The real program
//! launches three kernels per matrix: two of the GEMM's through `cuLaunchKernelEx`
//! (docs/real-gpu.md counts 91 800 = 2 x 300 x 153 per process) and the add into `acc`
//! (45 900 of its 46 672 `cuLaunchKernel`, the rest the setup's). Only the GEMM's read
//! the matrix; the others touch the 1 MiB buffers, so one kernel per matrix keeps the
//! traffic that matters and its order. No `Sync`
//! inside the round: the script only queues launches and waits once, after the last
//! round (the phase's closing `Sync`).
//!
//! **Compute.** `2 x 4096 x 4096 x 64` flops per matrix, a multiply and an add per
//! product term: `4096 x 4096 x 64` fused multiply-adds, one instruction each, which is
//! what `Kernel::ops` counts (the presets' `ops_per_s` is cores x clock, the H200's
//! 33.5e12 half the datasheet's 67 FP32 TFLOPS). PyTorch's float32 matmul runs on the
//! FP32 cores (TF32 is off by default), so the tensor cores play no part. The GEMM's
//! index and load instructions are left out: cuBLAS amortises them over a tile. That is
//! 1.07e9 instructions against 67 MiB moved, 15 per byte, above the H200 preset's
//! balance of 33.5e12 / 4.8e12 = 7: compute bound alone, about 32 us a kernel at the
//! preset's peak. The measured 3.0 s alone is 65 us per matrix (3.0 s / (153 x 300)):
//! the skinny GEMM reaches about half the peak, which the model does not know (it
//! assumes the peak). In the pair the matrices' host-memory part, read over the link,
//! is what matters.

use super::common::{parse_size, phased, size_error, uniform, within};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, Program};
use gpuswap_units::parse_bytes;

/// The matmul app.
pub struct Matmul;

const HELP: &str = "default (3 matrices of 4096 x 4096 float32, 194 MiB), measured (153 \
                    matrices, 9.56 GiB, the H200 runs' --gib 9.6), a size with a unit (the \
                    whole 64 MiB matrices it holds, as the script's --gib: 9792MiB), or a \
                    number of matrices (1 to 16384)";
/// The script's `side`: matrices are `SIDE x SIDE`.
const SIDE: u64 = 4096;
/// Columns of the weight and the accumulator.
const COLUMNS: u64 = 64;
/// Float32.
const FLOAT_BYTES: u64 = 4;
/// One matrix: 64 MiB.
const MATRIX_BYTES: u64 = SIDE * SIDE * FLOAT_BYTES;
/// The weight and the accumulator: 1 MiB each.
const SMALL_BYTES: u64 = SIDE * COLUMNS * FLOAT_BYTES;
/// Matrices of the measured runs (`--gib 9.6`).
const MEASURED_MATRICES: u64 = 153;
/// At most 1 TiB of matrices: the program lists each one.
const MAX_MATRICES: u64 = 16_384;

impl AppModel for Matmul {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn description(&self) -> &'static str {
        "The measured PyTorch tenant: N 4096 x 4096 float32 matrices each multiplied by a 4096 x 64 weight into an accumulator, round after round"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        Ok(program(parse(size)?, repeat))
    }
}

/// The number of matrices `size` asks for.
fn parse(size: &str) -> Result<u64, SizeError> {
    let check = |n: u64| within(n, 1..=MAX_MATRICES, format!("{n} matrices"));
    let text = size.trim();
    if text.ends_with('B') {
        let bytes = parse_bytes(text).map_err(|e| size_error("matmul", HELP, e))?;
        return check(bytes / MATRIX_BYTES).map_err(|e| size_error("matmul", HELP, e));
    }
    let named = [("default", 3), ("measured", MEASURED_MATRICES)];
    parse_size("matmul", HELP, size, &named, check)
}

fn program(matrices: u64, repeat: u32) -> Program {
    let mut p = Program::default();
    let slots: Vec<_> = (0..matrices)
        .map(|i| p.buffer(format!("m{i:03}"), MATRIX_BYTES))
        .collect();
    let w = p.buffer("w", SMALL_BYTES);
    let acc = p.buffer("acc", SMALL_BYTES);
    let gemm = |m| Kernel {
        name: "gemm_acc".into(),
        ops: SIDE * SIDE * COLUMNS,
        accesses: vec![
            uniform(m, MATRIX_BYTES, 0, AccessOrder::Linear),
            uniform(w, SMALL_BYTES, 0, AccessOrder::Linear),
            uniform(acc, SMALL_BYTES, SMALL_BYTES, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };
    let mut all = slots.clone();
    all.extend([w, acc]);
    let setup = all.iter().copied().map(Op::Alloc).collect();
    let body = slots.iter().map(|&m| Op::Launch(gemm(m))).collect();
    let teardown = all.into_iter().map(Op::Free).collect();
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, launches, rejects, traffic};

    #[test]
    fn holds_the_matrices_the_weight_and_the_accumulator() {
        let measured = check_app(&Matmul, "measured");
        assert_eq!(
            measured.peak_allocated_bytes(),
            153 * (64u64 << 20) + 2 * (1 << 20)
        );
        // The script's floor division: 9792 MiB is 153 matrices, a byte less is 152.
        assert_eq!(
            check_app(&Matmul, "9792MiB"),
            measured,
            "the size names the matrices' total"
        );
        assert_eq!(
            check_app(&Matmul, &format!("{}B", 9792u64 * (1 << 20) - 1))
                .buffers
                .len(),
            152 + 2
        );
        assert_eq!(check_app(&Matmul, "default").buffers.len(), 3 + 2);
    }

    #[test]
    fn one_kernel_per_matrix_per_round_reads_each_matrix_once() {
        let p = Matmul.program("4", 300, gtx480()).unwrap();
        assert_eq!(launches(&p.ops), 4 * 300);
        let t = traffic(&p.ops, p.buffers.len());
        let (small, matrix): (u64, u64) = (1 << 20, 64 << 20);
        assert_eq!(t[..4], [(300 * matrix, 0); 4]);
        // The weight and the accumulator once per kernel: four times a round.
        let kernels = 4 * 300;
        assert_eq!(
            t[4..],
            [(kernels * small, 0), (kernels * small, kernels * small)]
        );
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Matmul, "0", "1 to");
        rejects(&Matmul, "63MiB", "0 matrices");
        rejects(&Matmul, "9.56GiB", "not a size");
        rejects(&Matmul, "16385", "1 to");
    }
}
