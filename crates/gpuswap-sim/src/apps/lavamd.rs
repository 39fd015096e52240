//! Rodinia `lavaMD` (PILOT's `lavamd`): particle potentials and forces in a 3D space
//! cut into B^3 boxes of 100 particles, each box interacting with itself and its up to
//! 26 neighbours; one of the ten benchmarks of the PILOT study
//! (`../shared/spec/pilot.md`), where it is a long-running app (one launch).
//!
//! # The real program (Rodinia 3.1, `cuda/lavaMD`: `main.c`, `main.h`,
//! `kernel/kernel_gpu_cuda.cu`, `kernel/kernel_gpu_cuda_wrapper.cu`)
//! The one input is `-boxes1d B` (the run script's B = 10). Device buffers in allocation
//! order, for the B^3 boxes: `d_box_gpu` (a 656-byte `box_str` per box: its
//! coordinates, its particles' offset and its neighbours' numbers and offsets), `d_rv_gpu`
//! (a `FOUR_VECTOR` of four doubles per particle, 3200 bytes per box), `d_qv_gpu` (a
//! double charge per particle, 800 bytes per box) and `d_fv_gpu` (the forces, four
//! doubles per particle, 3200 bytes per box): 7856 bytes per box. The host fills all
//! four and copies them in (`fv` as zeros, since the kernel adds to it); one launch of
//! `kernel_gpu_cuda` with one block of 128 threads per box; a device synchronization;
//! the forces copied back. The phase body is that launch; `repeat` runs it again,
//! adding to the same forces, as a longer run would.
//!
//! Block `bx` copies its home box's positions into shared memory, then for the home box
//! and each neighbour in turn copies that box's positions and charges into shared memory
//! (a barrier either side) and lets threads 0 to 99 each add the interaction of its
//! particle with all 100 of the box's to its own force vector: 100 x 100 pairs per box
//! pair, an `exp` in double precision each. The 28 threads above 99 only copy and wait.
//!
//! # Sizes
//! PILOT's table lists 7.5 MB, 936 MB and 3.3 GB (binary units: 50^3 boxes take exactly
//! 936.5 MiB) without the inputs; the footprint is 7856 B^3 bytes.
//! - `small` and `rodinia`: B = 10, the run script's input, 7.49 MiB (0.1 % under 7.5);
//! - `medium` and `default`: B = 50, 936.5 MiB (0.05 % over 936);
//! - `large`: B = 77, 3.34 GiB (1.2 % over 3.3; B = 76 would be 2.7 % under).
//!
//! A plain number is B, 1 to 128 (16.5 GB; the program's `int` particle offsets would
//! allow 277). The launch has B^3 blocks in one grid dimension: on a device of compute
//! capability 2.x such as the GTX 480 (65535 blocks at most) the real program fails above
//! B = 40; the model does not check that.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! Per block, with the within-block reads of the home box counted once: the positions
//! and charges of the home box and its neighbours, (nn + 1) x 4000 bytes coalesced
//! (consecutive threads copy consecutive particles); the block's own force vectors read
//! and written once, 3200 bytes each way (each thread's 100 x (nn + 1) additions to its
//! own vector stay in the cache, whether or not the compiler keeps them in registers);
//! its own `box_str` (656 bytes, read field by field) and one isolated line per
//! neighbour for that neighbour's particle offset. Summed over the boxes, (home,
//! neighbour) pairs number (3B - 2)^3 ([`box_pairs`]): about 27 reads of every box.
//!
//! Those re-reads come close together: blocks run in box order (x fastest), so a box is
//! read by the blocks of its own row 2 blocks apart, by the adjacent rows over 2(B + 1)
//! blocks and by the adjacent planes over 2(B^2 + B + 1). As in lud, the model lets the
//! L2 catch a dimension's re-reads when the box's data and what passes between its first
//! and last reader fit ([`DeviceShape::reused_reads`]); between them each block brings
//! the boxes it reads for the first time (3^d for d dimensions not caught), its own
//! forces and its `box_str` ([`caught_dimensions`]). Each caught dimension divides the
//! reads along it from 3B - 2 to B: at B = 50 the GTX 480's 768 KiB catches the row
//! (about 9 reads of every box), the V100's 6 MiB the rows too (3), the GH200's 60 MiB
//! everything (1).
//!
//! Every buffer is read by a front that advances through the boxes in address order:
//! `Linear`. At the page level the model then makes the re-reads further linear passes
//! over `rv` and `qv` (up to 9 at B = 50 on the GTX 480), where the real kernel touches
//! each page within a window of about 2 B^2 boxes behind and ahead of the front (16 MB at
//! B = 50): under oversubscription the model faults those pages in once per pass where
//! the real kernel, its window in VRAM, faults them once. That is approximate in the
//! direction of too many faults.
//!
//! # Compute
//! About 60 instructions per particle pair (five shared-memory loads, the dot product,
//! a double `exp` of about 25 instructions, the force components and four accumulations
//! with their loads and stores, the loop), about 37 of them double-precision arithmetic.
//! Those count twice: double precision runs at half the single-precision rate on the
//! V100 of the PILOT paper (as on the A100 and H100); the GTX 480, a GeForce part, runs
//! it at an eighth, which the model does not charge. So 100 per pair, plus about 30 per
//! thread and neighbour box (the box lookup, the copy into shared memory, two barriers)
//! and 30 per thread of setup; the idle threads 100 to 127 are counted with the others,
//! as their warp issues every instruction for its four active threads. About 10^6
//! instructions per block and neighbour against 4000 bytes: hundreds of instructions per
//! byte, compute bound on any preset.

use super::common::{
    READ_LINE_BYTES, d2h, h2d, parse_size, phased, pilot_rodinia_sizes, uniform, within,
};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, OuterLoop, Program};

/// The lavamd app.
pub struct Lavamd;

const HELP: &str = "default or medium (50 boxes per side, 936 MiB), small or rodinia \
                    (10 boxes per side, the run script's -boxes1d 10, 7.5 MiB), large (77 \
                    boxes per side, 3.34 GiB), or a number of boxes per side (1 to 128)";
/// Particles per box (`NUMBER_PAR_PER_BOX`) and threads per block (`NUMBER_THREADS`).
const PARTICLES: u64 = 100;
const THREADS: u64 = 128;
/// Bytes per box of each buffer: a `box_str`, the positions (`FOUR_VECTOR` of doubles),
/// the charges (doubles) and the forces.
const BOX_STRUCT_BYTES: u64 = 656;
const RV_BOX_BYTES: u64 = PARTICLES * 32;
const QV_BOX_BYTES: u64 = PARTICLES * 8;
const FV_BOX_BYTES: u64 = PARTICLES * 32;
/// What a block reads of each box it interacts with, and what it brings of its own.
const BOX_DATA_BYTES: u64 = RV_BOX_BYTES + QV_BOX_BYTES;
const OWN_BYTES: u64 = FV_BOX_BYTES + BOX_STRUCT_BYTES;
/// Boxes per side of the named sizes (module doc).
const SMALL_SIDE: u64 = 10;
const MEDIUM_SIDE: u64 = 50;
const LARGE_SIDE: u64 = 77;
/// Largest number of boxes per side accepted: 16.5 GB of buffers.
const MAX_SIDE: u64 = 128;
/// Instructions per thread: setup, per neighbour box, per particle pair (module doc).
const SETUP_OPS: u64 = 30;
const BOX_OPS: u64 = 30;
const PAIR_OPS: u64 = 100;

impl AppModel for Lavamd {
    fn name(&self) -> &'static str {
        "lavamd"
    }

    fn description(&self) -> &'static str {
        "Rodinia lavaMD: particle forces in a grid of boxes, each box against its 26 neighbours, in double precision"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = pilot_rodinia_sizes(SMALL_SIDE, MEDIUM_SIDE, LARGE_SIDE, SMALL_SIDE);
        let side = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, 1..=MAX_SIDE, format!("{n} boxes per side"))
        })?;
        Ok(program(side, repeat, device))
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["lavaMD"]
    }

    /// PILOT's table: 56 % of the SMs.
    fn sm_utilization(&self) -> f64 {
        0.56
    }
}

/// (Home box, box it reads) pairs over a grid of `side`^3 boxes, the home box with
/// itself included: along each dimension a box has itself and the boxes either side
/// that exist, 3 `side` - 2 pairs, and the dimensions multiply.
fn box_pairs(side: u64) -> u64 {
    (3 * side - 2).pow(3)
}

/// How many of the three dimensions' re-reads the L2 catches, outermost last: z (planes
/// 2(B^2 + B + 1) blocks apart) only if y (rows 2(B + 1) apart) and x (2 apart) too. A
/// dimension is caught when a box's data stays in the L2 from its first reader to its
/// last while every block in between brings the boxes it reads for the first time (one
/// if all three dimensions are caught, three per dimension that is not), its own forces
/// and its `box_str`.
fn caught_dimensions(side: u64, device: DeviceShape) -> u32 {
    let spans = [2 * (side * side + side + 1), 2 * (side + 1), 2];
    for (missed, span) in (0u32..).zip(spans) {
        let between = span * (3u64.pow(missed) * BOX_DATA_BYTES + OWN_BYTES);
        if device.reused_reads(BOX_DATA_BYTES, 3 * BOX_DATA_BYTES, between) < 3 * BOX_DATA_BYTES {
            return 3 - missed;
        }
    }
    0
}

/// (Home box, box) pairs whose reads reach memory: along a caught dimension a box is
/// read once (`side` per line of boxes), along the others by every neighbour.
fn pairs_from_memory(side: u64, device: DeviceShape) -> u64 {
    let caught = caught_dimensions(side, device);
    (0..3)
        .map(|d| if d < caught { side } else { 3 * side - 2 })
        .product()
}

fn program(side: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let boxes = side.pow(3);
    let box_bytes = boxes * BOX_STRUCT_BYTES;
    let rv_bytes = boxes * RV_BOX_BYTES;
    let qv_bytes = boxes * QV_BOX_BYTES;
    let fv_bytes = boxes * FV_BOX_BYTES;
    let box_array = p.buffer("box", box_bytes);
    let rv = p.buffer("rv", rv_bytes);
    let qv = p.buffer("qv", qv_bytes);
    let fv = p.buffer("fv", fv_bytes);

    let pairs = pairs_from_memory(side, device);
    // Every pair reads from memory when the L2 catches no re-read (in host memory).
    let every_pair = box_pairs(side);
    let linear = AccessOrder::Linear;
    let ops = THREADS * (boxes * SETUP_OPS + box_pairs(side) * (BOX_OPS + PARTICLES * PAIR_OPS));
    let kernel = Kernel {
        name: "kernel_gpu_cuda".into(),
        ops,
        accesses: vec![
            uniform(
                box_array,
                box_bytes + (pairs - boxes) * READ_LINE_BYTES,
                0,
                linear,
            )
            .read_before_l2(box_bytes + (every_pair - boxes) * READ_LINE_BYTES),
            uniform(rv, pairs * RV_BOX_BYTES, 0, linear).read_before_l2(every_pair * RV_BOX_BYTES),
            uniform(qv, pairs * QV_BOX_BYTES, 0, linear).read_before_l2(every_pair * QV_BOX_BYTES),
            uniform(fv, fv_bytes, fv_bytes, linear),
        ],
        phases: Vec::new(),
        outer_loop: OuterLoop {
            threads: THREADS * boxes,
            trips: THREADS * box_pairs(side),
        },
    };
    let body = vec![Op::Launch(kernel), Op::Sync];

    let buffers = [box_array, rv, qv, fv];
    let mut setup: Vec<Op> = buffers.map(Op::Alloc).into();
    setup.extend([
        h2d(box_array, box_bytes),
        h2d(rv, rv_bytes),
        h2d(qv, qv_bytes),
        h2d(fv, fv_bytes),
    ]);
    let teardown = vec![
        d2h(fv, fv_bytes),
        Op::Free(rv),
        Op::Free(qv),
        Op::Free(fv),
        Op::Free(box_array),
    ];
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{
        check_app, gtx480, launches, mib, ops_per_byte, phase_body, phase_kernels, rejects, traffic,
    };
    use crate::preset;

    fn shape(name: &str) -> DeviceShape {
        preset::find(name).unwrap().shape()
    }

    #[test]
    fn named_sizes_match_pilots_table_within_10_percent() {
        let table = [("small", 7.5), ("medium", 936.0), ("large", 3.3 * 1024.0)];
        for (size, table_mib) in table {
            let footprint = mib(&check_app(&Lavamd, size));
            let error = footprint / table_mib - 1.0;
            assert!(error.abs() < 0.1, "{size}: {footprint} MiB, {error:+.3}");
        }
        let small = check_app(&Lavamd, "small");
        assert_eq!(small.peak_allocated_bytes(), 1000 * 7856);
        assert_eq!(
            small,
            check_app(&Lavamd, "rodinia"),
            "the run script's -boxes1d 10"
        );
        assert_eq!(
            check_app(&Lavamd, "default"),
            check_app(&Lavamd, "medium"),
            "default is medium"
        );
        assert_eq!(
            check_app(&Lavamd, "medium").peak_allocated_bytes(),
            982_000_000
        );
    }

    #[test]
    fn one_synchronized_launch_of_a_block_per_box() {
        let p = check_app(&Lavamd, "small");
        let body = phase_body(&p, 1);
        assert_eq!(launches(body), 1);
        assert!(matches!(body, [Op::Launch(_), Op::Sync]), "{body:?}");
        let k = phase_kernels(&p)[0];
        assert!(k.accesses.iter().all(|a| a.order == AccessOrder::Linear));
        // Only the forces are written.
        let written: Vec<_> = k
            .accesses
            .iter()
            .filter(|a| a.write_bytes > 0)
            .map(|a| p.buffers[a.slot].label.as_str())
            .collect();
        assert_eq!(written, ["fv"]);
    }

    #[test]
    fn box_pairs_count_every_existing_neighbour() {
        for side in 1..=6i64 {
            let inside = |c: i64| (0..side).contains(&c);
            let mut pairs = 0;
            for (x, y, z) in (0..side.pow(3)).map(|n| (n % side, n / side % side, n / side / side))
            {
                for d in 0..27 {
                    let (dx, dy, dz) = (d % 3 - 1, d / 3 % 3 - 1, d / 9 - 1);
                    if inside(x + dx) && inside(y + dy) && inside(z + dz) {
                        pairs += 1;
                    }
                }
            }
            assert_eq!(box_pairs(side as u64), pairs, "{side}");
        }
    }

    #[test]
    fn traffic_by_hand_at_two_boxes_per_side() {
        // 8 boxes, each the neighbour of the 7 others: 64 pairs.
        let none = DeviceShape {
            l2_bytes: 0,
            ..gtx480()
        };
        let p = Lavamd.program("2", 1, none).unwrap();
        let sums = traffic(phase_body(&p, 1), 4);
        assert_eq!(
            sums[0],
            (8 * 656 + 56 * 128, 0),
            "box_str, neighbour offsets"
        );
        assert_eq!(sums[1], (64 * 3200, 0), "positions");
        assert_eq!(sums[2], (64 * 800, 0), "charges");
        assert_eq!(sums[3], (8 * 3200, 8 * 3200), "forces");
        // The GTX 480's L2 holds the 14 blocks' data between a box's first and last
        // reader along z (about 110 KB): every box is read once.
        let p = Lavamd.program("2", 1, gtx480()).unwrap();
        let sums = traffic(phase_body(&p, 1), 4);
        assert_eq!(sums[0], (8 * 656, 0));
        assert_eq!(sums[1], (8 * 3200, 0));
        // Instructions: 128 threads x (8 x 30 + 64 x (30 + 100 x 100)).
        let k = phase_kernels(&p)[0];
        assert_eq!(k.ops, 128 * (8 * 30 + 64 * 10_030));
    }

    #[test]
    fn a_larger_l2_catches_more_of_the_neighbour_re_reads() {
        // At 50 boxes per side: the row on the GTX 480, the rows on the V100, the
        // planes too on the GH200.
        let caught = ["gtx480", "v100-pcie-32gb", "gh200"].map(|d| caught_dimensions(50, shape(d)));
        assert_eq!(caught, [1, 2, 3]);
        let rv_reads = |device| {
            let p = Lavamd.program("medium", 1, device).unwrap();
            traffic(phase_body(&p, 1), 4)[1].0 as f64 / p.buffers[1].bytes as f64
        };
        let none = DeviceShape {
            l2_bytes: 0,
            ..gtx480()
        };
        let reads = [none, gtx480(), shape("v100-pcie-32gb"), shape("gh200")].map(rv_reads);
        // (148/50)^3, (148/50)^2, 148/50 and 1.
        let expected = [25.934, 8.7616, 2.96, 1.0];
        for (got, want) in reads.iter().zip(expected) {
            assert!((got - want).abs() < 1e-3, "{reads:?}");
        }
    }

    #[test]
    fn compute_bound_by_far() {
        let p = Lavamd.program("default", 1, gtx480()).unwrap();
        let k = phase_kernels(&p)[0];
        let ratio = ops_per_byte(k) * 177.4e9 / 672e9;
        assert!(ratio > 50.0, "{ratio}");
        // About 6 s on the GTX 480 model.
        let seconds = k.ops as f64 / 672e9;
        assert!((4.0..9.0).contains(&seconds), "{seconds}");
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Lavamd, "0", "1 to 128");
        rejects(&Lavamd, "200", "1 to 128");
        rejects(&Lavamd, "-boxes1d 10", "not a size");
    }
}
