//! Rodinia `hotspot`: transient thermal simulation of a chip on an N x N grid.
//!
//! # The real program (Rodinia 3.1, `cuda/hotspot`)
//! Buffers, float N^2 each, in allocation order: `temp_0`, `temp_1` (the temperature,
//! ping-pong), `power`. Copies: H2D `temp_0` and `power` once, D2H the result once.
//! `calculate_temp` runs ceil(iterations / pyramid) times on a grid of ceil(N / 12)^2
//! blocks of 16 x 16 threads (pyramid height 2: each block loads a 16 x 16 tile of
//! temperature and power, steps twice in shared memory, and writes the inner 12 x 12).
//! Each launch reads the source temperature and the power and writes the other
//! temperature buffer; the host swaps them between launches. The run script uses
//! N = 512, pyramid 2 and 2 iterations: one launch, from `temp_0` into `temp_1`. The
//! phase body is the run's launches; each repetition continues the ping-pong where the
//! last stopped (as a run with `repeat` times the iterations would), so the two
//! temperature buffers take turns as source and destination. A repetition may hold an
//! odd number of launches (one at the script's input), so the model gives every launch
//! the average of a pair: each temperature buffer half read as the source, half written
//! as the destination. Over any two launches every buffer moves exactly the bytes of the
//! real pair; within one, the fluid timing model (no cache between launches) makes the
//! same total time. Every launch sweeps all three buffers again: the regular class of
//! the adaptive unified-memory paper (`../shared/spec/uvm-adaptive.md`).
//!
//! # Sizes
//! `default` (4096 x 4096, 2 iterations) is at the GPUswap evaluation's scale,
//! `rodinia` is the run script's input. `uvmsmart` is the input of the managed-memory
//! version in GPGPU-Sim UVM Smart (`benchmarks/Managed/hotspot`): 1024 x 1024, pyramid 2,
//! 8 iterations, so 4 launches per repetition and 12 MiB, as `spec/uvm-driver.md` lists.
//! That version allocates the three grids managed and copies nothing (the host reads
//! its input files into them and writes the result from them); the model keeps
//! Rodinia's copies. `large` is the largest grid accepted, 16384 x 16384 (3 GiB), with
//! 2 iterations.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! Tiles overlap by the 2-element halo on each side, so a block reads 16 x 16 elements
//! of each input for 12 x 12 it writes: (16/12)^2 = 1.78 times the grid, less the
//! halo that falls outside the grid at the borders. Exactly: block row b loads rows
//! 12b - 2 ..= 12b + 13 clipped to the grid, so each input is read
//! (sum over b of the clipped rows)^2 elements; the output is written once, N^2. The
//! halo rows and columns (4 of every 12) are read twice; that period (192 KiB of a
//! 4096-wide grid) is far below a chunk, so the model spreads the reads uniformly.
//!
//! # Compute
//! About 40 instructions of setup per thread (block geometry, clamps, three reciprocals
//! of the thermal resistances, two loads) and 35 per pyramid step (range tests, the
//! five-point update, two barriers): 110 per thread at pyramid 2, for (16/12)^2 threads
//! per cell, against 18 bytes moved per cell: about 11 instructions per byte where the
//! GTX 480 model balances at 3.8, so the model makes `calculate_temp` compute bound by
//! about 2.8x (the pyramid trades redundant halo computation for memory traffic).

use super::common::{d2h, h2d, parse_size, phased, uniform, within};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, Program};

/// The hotspot app.
pub struct Hotspot;

const HELP: &str = "default (4096 x 4096 grid, 192 MiB), rodinia (512 x 512, 3 MiB), \
                    uvmsmart (1024 x 1024, 8 iterations, 12 MiB, the research simulator's \
                    input), large (16384 x 16384, 3 GiB), or a grid side (16 to 16384); \
                    always pyramid height 2, and 2 iterations except for uvmsmart";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// Threads per block side.
const BLOCK_SIDE: u64 = 16;
/// Pyramid height of both run scripts.
const PYRAMID: u64 = 2;
/// Simulated iterations of Rodinia's run script, for every size but `uvmsmart`.
const ITERATIONS: u64 = 2;
/// Simulated iterations of UVM Smart's run script.
const UVMSMART_ITERATIONS: u64 = 8;
// Whole launches only: every launch takes PYRAMID steps.
const _: () =
    assert!(ITERATIONS.is_multiple_of(PYRAMID) && UVMSMART_ITERATIONS.is_multiple_of(PYRAMID));
/// Output cells per block side: the tile less the halo each step consumes.
const SMALL_SIDE: u64 = BLOCK_SIDE - 2 * PYRAMID;
/// Instructions per thread: setup, and per pyramid step (module doc).
const SETUP_OPS: u64 = 40;
const STEP_OPS: u64 = 35;
/// Largest grid side accepted, and the size `large`: 3 GiB of buffers.
const MAX_SIDE: u64 = 16_384;

impl AppModel for Hotspot {
    fn name(&self) -> &'static str {
        "hotspot"
    }

    fn description(&self) -> &'static str {
        "Rodinia hotspot: thermal stencil on a square grid with overlapping 16 x 16 tiles"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        let named = [
            ("default", (4096, ITERATIONS)),
            ("rodinia", (512, ITERATIONS)),
            ("uvmsmart", (1024, UVMSMART_ITERATIONS)),
            ("large", (MAX_SIDE, ITERATIONS)),
        ];
        let (side, iterations) = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, BLOCK_SIDE..=MAX_SIDE, format!("a {n} x {n} grid")).map(|n| (n, ITERATIONS))
        })?;
        Ok(program(side, iterations / PYRAMID, repeat))
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Regular)
    }
}

/// Grid rows (or columns) loaded by all blocks along one dimension, halos included.
fn loaded_lines(side: u64) -> u64 {
    let blocks = side.div_ceil(SMALL_SIDE);
    (0..blocks)
        .map(|b| {
            let first = (b * SMALL_SIDE).saturating_sub(PYRAMID);
            let last = (b * SMALL_SIDE + SMALL_SIDE + PYRAMID - 1).min(side - 1);
            last - first + 1
        })
        .sum()
}

fn program(side: u64, launches: u64, repeat: u32) -> Program {
    let mut p = Program::default();
    let bytes = side * side * FLOAT_BYTES;
    let temp = [p.buffer("temp_0", bytes), p.buffer("temp_1", bytes)];
    let power = p.buffer("power", bytes);

    let loaded = loaded_lines(side);
    let read = loaded * loaded * FLOAT_BYTES;
    let blocks = side.div_ceil(SMALL_SIDE).pow(2);
    let ops = blocks * BLOCK_SIDE * BLOCK_SIDE * (SETUP_OPS + STEP_OPS * PYRAMID);
    // A pair of launches reads each temperature buffer once as the source and writes
    // it once as the destination: each launch is half of that pair.
    let launch = Op::Launch(Kernel {
        name: "calculate_temp".into(),
        ops,
        accesses: vec![
            uniform(power, read, 0, AccessOrder::Linear),
            uniform(temp[0], read / 2, bytes / 2, AccessOrder::Linear),
            uniform(temp[1], read / 2, bytes / 2, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    });
    let body = vec![launch; launches as usize];
    let result = temp[(launches * u64::from(repeat) % 2) as usize];

    let setup = vec![
        Op::Alloc(temp[0]),
        Op::Alloc(temp[1]),
        h2d(temp[0], bytes),
        Op::Alloc(power),
        h2d(power, bytes),
    ];
    let teardown = vec![
        d2h(result, bytes),
        Op::Free(power),
        Op::Free(temp[0]),
        Op::Free(temp[1]),
    ];
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, launches, mib, per_byte, phase_body, rejects};

    #[test]
    fn footprint_is_three_grids() {
        let p = check_app(&Hotspot, "rodinia");
        assert_eq!(p.peak_allocated_bytes(), 3 << 20, "3 MiB at 512");
        let p = check_app(&Hotspot, "default");
        assert_eq!(mib(&p), 192.0);
        assert_eq!(launches(phase_body(&p, 1)), 1);
    }

    #[test]
    fn uvmsmart_runs_8_iterations_large_is_gibibytes() {
        let p = check_app(&Hotspot, "uvmsmart");
        assert_eq!(mib(&p), 12.0, "the 12 MB of the artifact");
        let body = phase_body(&p, 1);
        assert_eq!(launches(body), 4, "8 iterations at pyramid height 2");
        // Every launch sweeps all three grids linearly again: regular.
        for op in body {
            let Op::Launch(k) = op else {
                panic!("only launches")
            };
            assert_eq!(k.accesses.len(), 3);
            assert!(k.accesses.iter().all(|a| a.order == AccessOrder::Linear));
        }
        // An even number of launches per repetition ends where it started.
        let d2h_slot = |size: &str, repeat: u32| {
            let p = Hotspot.program(size, repeat, gtx480()).unwrap();
            p.ops.iter().find_map(|op| match op {
                Op::Copy {
                    slot,
                    direction: crate::program::CopyDirection::DeviceToHost,
                    ..
                } => Some(*slot),
                _ => None,
            })
        };
        assert_eq!(d2h_slot("uvmsmart", 1), Some(0));
        assert_eq!(d2h_slot("rodinia", 1), Some(1));
        assert_eq!(d2h_slot("rodinia", 2), Some(0));
        assert_eq!(mib(&check_app(&Hotspot, "large")), 3072.0);
        assert_eq!(Hotspot.pattern_class(), Some(PatternClass::Regular));
    }

    #[test]
    fn overlapping_tiles_read_the_inputs_about_1_8_times() {
        let p = Hotspot.program("default", 1, gtx480()).unwrap();
        let d = per_byte(&p, 1);
        let (temp_0, temp_1, power) = (d[0], d[1], d[2]);
        // (16/12)^2 = 1.78, slightly less for the halo clipped at the borders.
        assert!((1.76..1.78).contains(&power), "{power}");
        // Ping-pong: each temperature buffer is the source one launch in two and the
        // destination the other.
        assert_eq!(temp_0, temp_1);
        assert!(
            (temp_0 - (power + 1.0) / 2.0).abs() < 1e-6,
            "{temp_0} vs {power}"
        );
        // Exact clipping at a small grid: block 0 loads rows 0..=13, block 1 rows 10..=15.
        assert_eq!(loaded_lines(16), 14 + 6);
    }

    #[test]
    fn compute_bound_by_the_per_thread_estimate() {
        let p = Hotspot.program("default", 1, gtx480()).unwrap();
        let Op::Launch(k) = &phase_body(&p, 1)[0] else {
            panic!("a launch")
        };
        let bytes: u64 = k
            .accesses
            .iter()
            .map(|a| a.read_bytes + a.write_bytes)
            .sum();
        let ratio = (k.ops as f64 / 672e9) / (bytes as f64 / 177.4e9);
        assert!((2.0..3.0).contains(&ratio), "{ratio}");
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Hotspot, "8", "16 to 16384");
        rejects(&Hotspot, "20000", "16 to 16384");
        rejects(&Hotspot, "512x512", "not a size");
    }
}
