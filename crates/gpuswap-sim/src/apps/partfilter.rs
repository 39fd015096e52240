//! Rodinia `particlefilter` (PILOT's `partfilter`): tracks an object through the frames
//! of a noisy synthetic video with n particles, four kernels per frame; one of the ten
//! benchmarks of the PILOT study (`../shared/spec/pilot.md`), where it is an iterative
//! app.
//!
//! # The real program (Rodinia 3.1, `cuda/particlefilter/ex_particle_CUDA_float_seq.cu`)
//! The command line gives the video's size and frames and the particles; the run script
//! uses a 128 x 128 video of 10 frames and 1000 particles. Despite its name the version
//! computes in double precision. Device buffers in allocation order: `arrayX`, `arrayY`,
//! `xj`, `yj`, `CDF`, `u`, `likelihood` and `weights` (a double per particle each), the
//! video `I` (a byte per pixel and frame, frames interleaved per pixel), `objxy` (the
//! 69 (x, y) int offsets of a disk of radius 5), `ind` (69 ints per particle), `seed`
//! (an int per particle) and `partial_sums` (a double per particle, of which one per
//! block is used): 352 bytes per particle and 164 392 for the video and the disk. The
//! host copies the video, the disk, the weights, `xj`, `yj` and the seeds up (setup; the
//! memset that zeroes `likelihood` is left out). Then, for each frame after the first,
//! four launches on ceil(n / 512) blocks of 512 threads, with no synchronization until
//! the last:
//! - `likelihood_kernel`: each particle moves to its `xj`, `yj` plus Gaussian noise (two
//!   Box-Muller draws from its seed), computes the 69 video indices of the disk around
//!   it into `ind`, sums a likelihood over those 69 pixels, weights itself, and each
//!   block reduces its weights into one partial sum;
//! - `sum_kernel`: thread 0 adds the blocks' partial sums (every other thread returns);
//! - `normalize_weights_kernel`: every particle divides its weight by the sum; thread 0
//!   alone builds the CDF of the weights and draws the resampling offset `u[0]`; every
//!   particle sets `u[i] = u[0] + i / n`;
//! - `find_index_kernel`: particle `i` scans the CDF from its start for the first entry
//!   at least `u[i]` and copies that particle's position into `xj`, `yj`.
//!
//! Then the program frees ten buffers, copies `arrayX`, `arrayY` and `weights` back and
//! frees those (teardown, in that order). The phase body is the nine frames' 36
//! launches; `repeat` tracks the video again from where the particles are.
//!
//! # Sizes
//! The buffers take 352 n + 164 392 bytes. PILOT's table lists 10.2 MB, 160 MB and 1 GB
//! without the inputs; the model keeps the run script's video and scales the particles
//! (PILOT's figures read in binary units, as the hs3d and lavamd tables must be):
//! - `small`: 30 000 particles, 10.23 MiB (0.3 % over 10.2 MiB);
//! - `medium` and `default`: 476 000 particles, 159.95 MiB (0.03 % under 160 MiB);
//! - `large`: 3 050 000 particles, 1.000 02 GiB;
//! - `rodinia`: the run script's 1000 particles, 0.49 MiB.
//!
//! A plain number is the particles, 1 to 31 000 000 (the program's `int` index into
//! `ind` overflows at 2^31 / 69 particles).
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! Consecutive threads work on consecutive particles, so the per-particle vectors are
//! read and written coalesced, counted by the byte.
//! - `likelihood_kernel`: reads `xj`, `yj`; writes `arrayX`, `arrayY` and reads them
//!   back; reads and writes `weights` and `seed`; writes `likelihood`; writes the 69
//!   indices of `ind` and reads them back (each lane's 276 bytes in turn, counted by the
//!   byte); one partial sum per block. Every warp reads the 552-byte disk, which stays
//!   in the L2 ([`DeviceShape::l2_resident_reads`]). The 69 n pixel reads of the video
//!   fall around the tracked object in an order set by the particles' positions: the
//!   random-order estimate over the whole video ([`DeviceShape::random_bytes`]), which
//!   the 160 KiB video fits in every preset's L2, so it moves at most once.
//! - `sum_kernel`: one partial sum per block read, one written.
//! - `normalize_weights_kernel`: `weights` read and written by every particle, then read
//!   again by thread 0 building `CDF`, which it writes; `u` written; one line of
//!   `partial_sums` and one of `u` read by every block (in the L2), thread 0's seed.
//! - `find_index_kernel`: `u` read; the gathered positions read from `arrayX`, `arrayY`
//!   (with near-equal weights particle `i` finds index about `i`: read in order, by the
//!   byte); `xj`, `yj` written. The scans: a warp runs until its last lane finds its
//!   entry, reading the CDF from the start up to the lane's index, a double broadcast to
//!   the warp per step: about 8 n^2 / 64 bytes asked for in all. Every warp starts again
//!   from the CDF's start, so a line is read again after the whole prefix: while the CDF
//!   fits in the L2 ([`DeviceShape::reused_reads`]: up to 98 304 particles on the
//!   GTX 480, 786 432 on a V100) it moves once per launch; beyond, every scan reaches
//!   memory.
//!
//! The vectors are walked in address order (`Linear`); the video is `Random`.
//!
//! # Compute
//! Estimated from the kernels' code, not measured, with double-precision library calls
//! counted as instructions (`pow`, `exp`, `log`, `cos` about 20 to 50 each):
//! `likelihood_kernel` about 200 per particle (setup, two Box-Muller draws, the weight's
//! `exp`), 22 per disk offset for the index, 55 per disk offset for the likelihood (two
//! `pow`), 100 for the block reduction: 5613 in all, about 9 per byte moved, compute
//! bound on the GTX 480 model's balance of 3.8; 60 per idle thread of the last block,
//! which takes part in the reduction. `sum_kernel` 5 per thread and 5 per partial sum
//! added by thread 0. `normalize_weights_kernel` 35 per particle, 15 per idle thread
//! and 4 per element of thread 0's CDF. `find_index_kernel` 4 per lane and step of the
//! scan (load, compare, branch, increment) and 20 per particle, 5 per idle thread:
//! about 2 n^2 in all, compute bound for all but small n.
//!
//! Thread 0's serial loops (the partial sums, the CDF: n steps by one thread) are
//! outermost loops of one thread ([`OuterLoop`] with `threads` 1): besides their
//! instructions, which the timing model spreads over the device like any, each trip
//! waits for its read, an L2 hit (`sum += partial_sums[x]`; `CDF[x] = weights[x] +
//! CDF[x - 1]`, whose load may alias the store before it), so `sum_kernel` takes at
//! least a read's latency per block and `normalize_weights_kernel` one per particle
//! ([`crate::serial_loop`]).

use super::common::{
    READ_LINE_BYTES, WRITE_SECTOR_BYTES, d2h, h2d, parse_size, phased, pilot_rodinia_sizes,
    random_access, uniform, within,
};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, OuterLoop, Program};

/// The partfilter app.
pub struct Partfilter;

const HELP: &str = "default or medium (476000 particles, 160 MiB, PILOT's 160 MB), small \
                    (30000 particles, 10.2 MiB, PILOT's 10.2 MB), large (3050000 \
                    particles, 1 GiB, PILOT's 1 GB), rodinia (1000 particles, the run \
                    script's), or a number of particles (1 to 31000000); always a 128 x 128 \
                    video of 10 frames";
/// The named sizes: particles for PILOT's small, medium and large inputs, and the run
/// script's.
const SMALL_PARTICLES: u64 = 30_000;
const MEDIUM_PARTICLES: u64 = 476_000;
const LARGE_PARTICLES: u64 = 3_050_000;
const RODINIA_PARTICLES: u64 = 1000;
/// Largest input accepted: `ind`'s int index stays below 2^31.
const MAX_PARTICLES: u64 = 31_000_000;
/// The run script's video: 128 x 128 pixels, 10 frames, a byte each.
const VIDEO_BYTES: u64 = 128 * 128 * 10;
const FRAMES: u64 = 10;
/// Points of the disk of radius 5 (`countOnes`), two ints each in `objxy`.
const DISK_POINTS: u64 = 69;
const DISK_BYTES: u64 = DISK_POINTS * 2 * INT_BYTES;
/// Element sizes.
const DOUBLE_BYTES: u64 = 8;
const INT_BYTES: u64 = 4;
/// Threads per block of every kernel, and per warp.
const BLOCK: u64 = 512;
/// Steps of `likelihood_kernel`'s block reduction of the weights (log2 512).
const REDUCTION_STEPS: u64 = 9;
const WARP: u64 = 32;
/// Instructions (module doc).
const LIKELIHOOD_OPS: u64 = 200 + DISK_POINTS * (22 + 55) + 100;
const LIKELIHOOD_IDLE_OPS: u64 = 60;
const SUM_OPS: u64 = 5;
const NORMALIZE_OPS: u64 = 35;
const NORMALIZE_IDLE_OPS: u64 = 15;
const CDF_STEP_OPS: u64 = 4;
const SCAN_STEP_OPS: u64 = 4;
const FIND_OPS: u64 = 20;
const IDLE_OPS: u64 = 5;

impl AppModel for Partfilter {
    fn name(&self) -> &'static str {
        "partfilter"
    }

    fn description(&self) -> &'static str {
        "Rodinia particlefilter: tracks an object through a video, resampling its particles every frame"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = pilot_rodinia_sizes(
            SMALL_PARTICLES,
            MEDIUM_PARTICLES,
            LARGE_PARTICLES,
            RODINIA_PARTICLES,
        );
        let particles = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, 1..=MAX_PARTICLES, format!("{n} particles"))
        })?;
        Ok(program(particles, repeat, device))
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["particlefilter"]
    }

    /// PILOT's table: 63 % of the SMs.
    fn sm_utilization(&self) -> f64 {
        0.63
    }
}

/// The scans of `find_index_kernel` over `n` particles of equal weight, where particle
/// `i` finds entry `i`: the CDF entries its warps read (warp `w` runs until its last
/// lane's entry, min(32 (w + 1), n) of them) and the steps its lanes execute (every lane
/// of a warp through the warp's scan).
fn scans(n: u64) -> (u64, u64) {
    let (full, rest) = (n / WARP, n % WARP);
    let full_entries = WARP * full * (full + 1) / 2;
    let partial = if rest > 0 { n } else { 0 };
    (full_entries + partial, WARP * full_entries + rest * partial)
}

fn program(n: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let vector = n * DOUBLE_BYTES;
    let [array_x, array_y, xj, yj, cdf, u, likelihood, weights] = [
        "arrayX",
        "arrayY",
        "xj",
        "yj",
        "CDF",
        "u",
        "likelihood",
        "weights",
    ]
    .map(|label| p.buffer(label, vector));
    let video = p.buffer("I", VIDEO_BYTES);
    let objxy = p.buffer("objxy", DISK_BYTES);
    let ind_bytes = n * DISK_POINTS * INT_BYTES;
    let ind = p.buffer("ind", ind_bytes);
    let seeds = n * INT_BYTES;
    let seed = p.buffer("seed", seeds);
    let partial_sums = p.buffer("partial_sums", vector);

    let blocks = n.div_ceil(BLOCK);
    let idle = blocks * BLOCK - n;
    let warps = n.div_ceil(WARP);
    let linear = AccessOrder::Linear;
    let once = |slot, read, write| uniform(slot, read, write, linear);
    let sums = blocks * DOUBLE_BYTES;
    // One line read by every block, from the L2.
    let every_block = device.l2_resident_reads(READ_LINE_BYTES, blocks * READ_LINE_BYTES);
    let from_every_block =
        |slot, write| once(slot, every_block, write).read_before_l2(blocks * READ_LINE_BYTES);
    let disk_points = (DISK_POINTS * n) as f64;

    let likelihood_kernel = Kernel {
        name: "likelihood_kernel".into(),
        ops: n * LIKELIHOOD_OPS + idle * LIKELIHOOD_IDLE_OPS,
        accesses: vec![
            once(array_x, vector, vector),
            once(array_y, vector, vector),
            once(xj, vector, 0),
            once(yj, vector, 0),
            once(likelihood, 0, vector),
            once(weights, vector, vector),
            random_access(device, video, VIDEO_BYTES, (disk_points, 0.0)),
            once(
                objxy,
                device.l2_resident_reads(DISK_BYTES, warps * DISK_BYTES),
                0,
            )
            .read_before_l2(warps * DISK_BYTES),
            once(ind, ind_bytes, ind_bytes),
            once(seed, seeds, seeds),
            once(partial_sums, 0, sums),
        ],
        phases: Vec::new(),
        outer_loop: OuterLoop {
            threads: blocks * BLOCK,
            trips: n * 2 * DISK_POINTS + blocks * BLOCK * REDUCTION_STEPS,
        },
    };
    let sum_kernel = Kernel {
        name: "sum_kernel".into(),
        ops: blocks * BLOCK * SUM_OPS + blocks * SUM_OPS,
        accesses: vec![once(partial_sums, sums, DOUBLE_BYTES)],
        phases: Vec::new(),
        outer_loop: OuterLoop::uniform(1, blocks),
    };
    let normalize = Kernel {
        name: "normalize_weights_kernel".into(),
        ops: n * NORMALIZE_OPS + idle * NORMALIZE_IDLE_OPS + n * CDF_STEP_OPS,
        accesses: vec![
            once(weights, 2 * vector, vector),
            from_every_block(partial_sums, 0),
            once(cdf, 0, vector),
            from_every_block(u, vector),
            once(seed, READ_LINE_BYTES, WRITE_SECTOR_BYTES),
        ],
        phases: Vec::new(),
        outer_loop: OuterLoop::uniform(1, n),
    };
    let (scanned, steps) = scans(n);
    let find_index = Kernel {
        name: "find_index_kernel".into(),
        ops: steps * SCAN_STEP_OPS + n * FIND_OPS + idle * IDLE_OPS,
        accesses: vec![
            once(
                cdf,
                device.reused_reads(vector, scanned * DOUBLE_BYTES, 0),
                0,
            )
            .read_before_l2(scanned * DOUBLE_BYTES),
            once(u, vector, 0),
            once(array_x, vector, 0),
            once(array_y, vector, 0),
            once(xj, 0, vector),
            once(yj, 0, vector),
        ],
        phases: Vec::new(),
        outer_loop: OuterLoop {
            threads: n,
            trips: steps,
        },
    };
    let frame = [likelihood_kernel, sum_kernel, normalize, find_index].map(Op::Launch);
    let body = (1..FRAMES).flat_map(|_| frame.clone()).collect();

    let allocated = [
        array_x,
        array_y,
        xj,
        yj,
        cdf,
        u,
        likelihood,
        weights,
        video,
        objxy,
        ind,
        seed,
        partial_sums,
    ];
    let mut setup: Vec<Op> = allocated.map(Op::Alloc).into();
    setup.extend([
        h2d(video, VIDEO_BYTES),
        h2d(objxy, DISK_BYTES),
        h2d(weights, vector),
        h2d(xj, vector),
        h2d(yj, vector),
        h2d(seed, seeds),
    ]);
    let mut teardown: Vec<Op> = [
        xj,
        yj,
        cdf,
        u,
        likelihood,
        video,
        objxy,
        ind,
        seed,
        partial_sums,
    ]
    .map(Op::Free)
    .into();
    teardown.extend([
        d2h(array_x, vector),
        d2h(array_y, vector),
        d2h(weights, vector),
    ]);
    teardown.extend([weights, array_y, array_x].map(Op::Free));
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

    #[test]
    fn named_sizes_are_pilots_memory_within_ten_percent() {
        for (size, table_mib, particles) in [
            ("small", 10.2, SMALL_PARTICLES),
            ("medium", 160.0, MEDIUM_PARTICLES),
            ("large", 1024.0, LARGE_PARTICLES),
        ] {
            let p = Partfilter.program(size, 1, gtx480()).unwrap();
            assert_eq!(p.peak_allocated_bytes(), 352 * particles + 164_392);
            let off = mib(&p) / table_mib - 1.0;
            assert!(off.abs() < 0.10, "{size}: {:.2} MiB", mib(&p));
            // In fact within 0.3 %.
            assert!(off.abs() < 3e-3, "{size}: {:.2} MiB", mib(&p));
        }
        assert_eq!(
            check_app(&Partfilter, "default"),
            check_app(&Partfilter, "medium")
        );
        let rodinia = check_app(&Partfilter, "rodinia");
        assert_eq!(rodinia.peak_allocated_bytes(), 352 * 1000 + 164_392);
    }

    #[test]
    fn four_kernels_for_each_of_nine_frames_then_one_synchronization() {
        let p = check_app(&Partfilter, "rodinia");
        let body = phase_body(&p, 1);
        assert_eq!(launches(body), 36);
        assert!(body.iter().all(|op| matches!(op, Op::Launch(_))));
        let names: Vec<_> = phase_kernels(&p).iter().map(|k| k.name.as_str()).collect();
        assert_eq!(
            names[..5],
            [
                "likelihood_kernel",
                "sum_kernel",
                "normalize_weights_kernel",
                "find_index_kernel",
                "likelihood_kernel"
            ]
        );
        assert_eq!(p.buffers.len(), 13);
        assert_eq!(p.buffers[12].label, "partial_sums");
    }

    #[test]
    fn scans_by_hand() {
        // 64 particles: warp 0 scans 32 entries, warp 1 64; every lane runs its warp's.
        assert_eq!(scans(64), (96, 32 * 96));
        // 40: a full warp (32 entries) and 8 lanes scanning all 40.
        assert_eq!(scans(40), (72, 32 * 32 + 8 * 40));
        assert_eq!(scans(1), (1, 1));
        // About n^2 / 64 entries and n^2 / 2 lane steps.
        let (entries, steps) = scans(MEDIUM_PARTICLES);
        let n2 = (MEDIUM_PARTICLES * MEDIUM_PARTICLES) as f64;
        assert!((entries as f64 / (n2 / 64.0) - 1.0).abs() < 1e-3);
        assert!((steps as f64 / (n2 / 2.0) - 1.0).abs() < 1e-3);
    }

    #[test]
    fn the_cdf_moves_once_while_the_l2_holds_it() {
        let cdf_reads = |size: &str, device| {
            let p = Partfilter.program(size, 1, device).unwrap();
            phase_kernels(&p)[3].accesses[0].read_bytes
        };
        let v100 = preset::find("v100-pcie-32gb").unwrap().shape();
        // 30 000 doubles (234 KiB) fit the GTX 480's 768 KiB; 476 000 (3.6 MiB) only a
        // V100's 6 MiB; 3 050 000 neither.
        assert_eq!(cdf_reads("small", gtx480()), SMALL_PARTICLES * 8);
        assert_eq!(cdf_reads("medium", v100), MEDIUM_PARTICLES * 8);
        assert_eq!(cdf_reads("medium", gtx480()), scans(MEDIUM_PARTICLES).0 * 8);
        assert_eq!(cdf_reads("large", v100), scans(LARGE_PARTICLES).0 * 8);
    }

    #[test]
    fn the_video_moves_once_and_the_indices_dominate_the_traffic() {
        let p = Partfilter.program("medium", 1, gtx480()).unwrap();
        let t = traffic(phase_body(&p, 1), p.buffers.len());
        // 9 launches of likelihood_kernel, each reading the 160 KiB video once.
        assert_eq!(t[8].0, 9 * VIDEO_BYTES);
        let ind = MEDIUM_PARTICLES * 276;
        assert_eq!(t[10], (9 * ind, 9 * ind));
        // likelihood_kernel is compute bound on the GTX 480 model.
        let k = phase_kernels(&p)[0];
        let per_byte = ops_per_byte(k);
        assert!((8.0..10.0).contains(&per_byte), "{per_byte}");
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Partfilter, "0", "1 to 31000000");
        rejects(&Partfilter, "40000000", "1 to 31000000");
        rejects(&Partfilter, "1e6", "not a size");
    }
}
