//! PolyBench/GPU `2DCONV`: a 3 x 3 convolution of an N x N image; the streaming-class
//! workload of the adaptive unified-memory paper (`../shared/spec/uvm-adaptive.md`).
//!
//! # The real program (GPGPU-Sim UVM Smart, `benchmarks/Managed/2DCONV/2DConvolution.cu`)
//! Buffers, float N^2 each, both managed, in allocation order: `A` (the input image) and
//! `B` (the output), with NI = NJ = N = 1024: 8 MiB, the 8 MB of `spec/uvm-driver.md`
//! (the research simulator's allocation rounding, [`managed_bytes`], adds nothing to
//! 4 MiB buffers). The host fills `A` with random numbers (setup: H2D of `A`). One
//! launch of `Convolution2D_kernel` on (N / 32) x (N / 8) blocks of 32 x 8 threads, one
//! thread per pixel, then a device synchronization. Every interior pixel (`0 < i, j <
//! N - 1`) reads its 3 x 3 neighbourhood of `A` and writes one weighted sum to `B`;
//! border threads only test the bounds. The host then prints every 10 000th element of
//! `B`, 40 000 bytes apart, so it reads one page of `B` in ten (teardown: D2H of those
//! pages). The program convolves once; the phase body is that launch, so `repeat`
//! convolves the same image again.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! No shared memory: the threads of a block read their neighbourhoods straight from
//! global memory, and neighbouring threads' reads of one row coalesce. Counted per block,
//! a block of 8 x 32 pixels reads rows one above to one below its own and columns one
//! left to one right, clipped to what its interior threads reach: 10 x 34 elements for
//! 8 x 32 written, (10/8)(34/32) = 1.33 times the image, slightly less at the borders.
//! Exactly, the reads are (rows loaded by all block rows) x (columns loaded by all block
//! columns) elements ([`loaded_lines`]); `B` is written once, (N - 2)^2 elements.
//!
//! Both buffers are walked in address order, block row after block row: `Linear`. Each
//! page of `A` and `B` is touched in that one pass and not again in the launch: the
//! streaming class. (The page stream makes the halo rows' extra third of `A` a short
//! second pass over its first pages; those pages are still resident unless less than `A`
//! fits in VRAM, beyond 2x oversubscription.)
//!
//! # Sizes
//! `default` and `uvmsmart` are the research simulator's 1024 x 1024 image, `large`
//! the unified-memory study's 24576 x 24576 (4.5 GiB). For the PILOT study
//! (`../shared/spec/pilot.md`, one of its ten benchmarks, `2dconvol` there) `small` and
//! `medium` are the images whose buffers, rounded as managed allocations
//! ([`managed_bytes`]), take the memory of its table, 1 MB and 1 GB (read in binary
//! units, as the hs3d and lavamd tables must be): sides 352 (two 512 KiB allocations,
//! 1 MiB) and 11584 (two of 512 MiB, 1 GiB), multiples of 32 (whole blocks). Its 5.1 GB
//! large input is the side 26144 (5.09 GiB, 0.1 % under 5.1 GiB): the name `large`
//! keeps the unified-memory study's input.
//!
//! # Compute
//! The research simulator's log counts 50 212 980 instructions for the launch at
//! N = 1024: about 48 per interior thread (index arithmetic, the bounds test, nine
//! loads, nine multiply-adds and the store) and 13 per border thread (the index and the
//! failing bounds test), as counted below to within 0.1 %. Against 9.3 bytes moved per
//! pixel that is about 5.2 instructions per byte where the GTX 480 model balances at
//! 3.8: compute bound by about 1.4x on the model, near the balance as a 3 x 3 stencil
//! without shared memory is.

use super::common::{
    d2h, data_access, h2d, managed_bytes, parse_size, phased, within, workload_sizes,
};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, Program};
use gpuswap_core::uvm::pages::PAGE_BYTES;

/// The 2dconv app.
pub struct Conv2d;

const HELP: &str = "default or uvmsmart (a 1024 x 1024 image, 8 MiB, the research \
                    simulator's input), large (24576 x 24576, 4.5 GiB), small (352 x 352, \
                    1 MiB, PILOT's 1 MB), medium (11584 x 11584, 1 GiB, PILOT's 1 GB), or \
                    an image side (3 to 32768; PILOT's 5.1 GB is 26144)";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// The managed version's NI = NJ.
const UVMSMART_SIDE: u64 = 1024;
/// Two 2.25 GiB images.
const LARGE_SIDE: u64 = 24_576;
/// PILOT's small and medium inputs (module doc).
const SMALL_SIDE: u64 = 352;
const MEDIUM_SIDE: u64 = 11_584;
/// Accepted sides: one interior pixel at least, two 4 GiB images at most.
const MIN_SIDE: u64 = 3;
const MAX_SIDE: u64 = 32_768;
/// Threads per block along a row (x, columns) and down a column (y, rows).
const BLOCK_X: u64 = 32;
const BLOCK_Y: u64 = 8;
/// Instructions per interior and per border thread (module doc, from the research
/// simulator's count).
const INTERIOR_OPS: u64 = 48;
const BORDER_OPS: u64 = 13;
/// The host prints every this many elements of `B`.
const PRINT_EVERY: u64 = 10_000;

impl AppModel for Conv2d {
    fn name(&self) -> &'static str {
        "2dconv"
    }

    fn description(&self) -> &'static str {
        "PolyBench 2DCONV: a 3 x 3 convolution of a float image, one pass per launch"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        let side = parse_size(
            self.name(),
            HELP,
            size,
            &[
                workload_sizes(UVMSMART_SIDE, LARGE_SIDE).as_slice(),
                &[("small", SMALL_SIDE), ("medium", MEDIUM_SIDE)],
            ]
            .concat(),
            |n| within(n, MIN_SIDE..=MAX_SIDE, format!("a {n} x {n} image")),
        )?;
        Ok(program(side, repeat))
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Streaming)
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["2dconvol"]
    }
}

/// Rows (or columns) of the image loaded by all blocks along one dimension, `block`
/// threads a block: each block loads one line beyond its interior threads on each side.
fn loaded_lines(side: u64, block: u64) -> u64 {
    (0..side.div_ceil(block))
        .map(|b| {
            let first = (b * block).max(1);
            let last = (b * block + block - 1).min(side - 2);
            if first > last { 0 } else { last - first + 3 }
        })
        .sum()
}

fn program(side: u64, repeat: u32) -> Program {
    let mut p = Program::default();
    let image = side * side * FLOAT_BYTES;
    let [a, b] = ["A", "B"].map(|label| p.buffer(label, managed_bytes(image)));

    let read = loaded_lines(side, BLOCK_Y) * loaded_lines(side, BLOCK_X) * FLOAT_BYTES;
    let interior = (side - 2) * (side - 2);
    let threads = side.div_ceil(BLOCK_X) * BLOCK_X * side.div_ceil(BLOCK_Y) * BLOCK_Y;
    let convolve = Kernel {
        name: "Convolution2D_kernel".into(),
        ops: interior * INTERIOR_OPS + (threads - interior) * BORDER_OPS,
        accesses: vec![
            data_access(a, image, read, 0, AccessOrder::Linear),
            data_access(b, image, 0, interior * FLOAT_BYTES, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };

    // The printed elements lie more than a page apart: one page each.
    let printed_pages = (side * side).div_ceil(PRINT_EVERY) * PAGE_BYTES;
    let setup = vec![Op::Alloc(a), Op::Alloc(b), h2d(a, image)];
    let body = vec![Op::Launch(convolve), Op::Sync];
    let teardown = vec![d2h(b, printed_pages.min(image)), Op::Free(a), Op::Free(b)];
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::find;
    use crate::apps::testing::assert_pilot_memory;
    use crate::apps::testing::{check_app, gtx480, launches, mib, per_byte, phase_body, rejects};
    use crate::program::Distribution;

    #[test]
    fn default_is_the_research_simulators_8_mb() {
        let p = check_app(&Conv2d, "default");
        assert_eq!(p, check_app(&Conv2d, "uvmsmart"));
        assert_eq!(mib(&p), 8.0);
        assert_eq!(launches(phase_body(&p, 1)), 1);
        let large = check_app(&Conv2d, "large");
        let gib = large.peak_allocated_bytes() as f64 / f64::from(1 << 30);
        assert!((2.0..8.0).contains(&gib), "{gib}");
        // An odd side is rounded as the research simulator allocates: 3 x 3 floats in
        // 64 KiB each.
        assert_eq!(check_app(&Conv2d, "3").peak_allocated_bytes(), 2 * 65_536);
    }

    #[test]
    fn halos_read_the_input_a_third_more_and_the_output_is_written_once() {
        // Block row 0 loads rows 0..=8, the others 10 rows, the last 9; columns alike.
        assert_eq!(loaded_lines(1024, 8), 128 * 10 - 2);
        assert_eq!(loaded_lines(1024, 32), 32 * 34 - 2);
        // One interior pixel: its 3 x 3 neighbourhood.
        assert_eq!(loaded_lines(3, 8) * loaded_lines(3, 32), 9);
        let p = Conv2d.program("default", 1, gtx480()).unwrap();
        let d = per_byte(&p, 1);
        assert!((1.32..1.33).contains(&d[0]), "{}", d[0]);
        assert!((0.99..1.0).contains(&d[1]), "{}", d[1]);
    }

    #[test]
    fn one_linear_pass_over_each_buffer_per_launch() {
        let p = Conv2d.program("large", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        let Op::Launch(k) = &body[0] else {
            panic!("a launch")
        };
        assert_eq!(body[1], Op::Sync);
        for access in &k.accesses {
            assert_eq!(access.order, AccessOrder::Linear);
            assert!(matches!(access.distribution, Distribution::Ranges(_)));
            let passes = (access.read_bytes + access.write_bytes) as f64
                / p.buffers[access.slot].bytes as f64;
            assert!(passes < 1.34, "{passes}");
        }
        assert_eq!(Conv2d.pattern_class(), Some(PatternClass::Streaming));
    }

    #[test]
    fn instructions_match_the_research_simulators_count() {
        let p = Conv2d.program("default", 1, gtx480()).unwrap();
        let Op::Launch(k) = &phase_body(&p, 1)[0] else {
            panic!("a launch")
        };
        assert!(
            (k.ops as f64 / 50_212_980.0 - 1.0).abs() < 0.001,
            "{}",
            k.ops
        );
        let bytes: u64 = k
            .accesses
            .iter()
            .map(|a| a.read_bytes + a.write_bytes)
            .sum();
        let ratio = (k.ops as f64 / 672e9) / (bytes as f64 / 177.4e9);
        assert!((1.2..1.6).contains(&ratio), "{ratio}");
    }

    #[test]
    fn the_host_reads_one_page_in_ten_of_the_output() {
        let p = Conv2d.program("default", 1, gtx480()).unwrap();
        let copied = p.ops.iter().rev().find_map(|op| match op {
            Op::Copy { slot: 1, bytes, .. } => Some(*bytes),
            _ => None,
        });
        // 105 printed elements, each on its own page.
        assert_eq!(copied, Some(105 * 4096));
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Conv2d, "2", "3 to 32768");
        rejects(&Conv2d, "40000", "3 to 32768");
        rejects(&Conv2d, "1024x1024", "not a size");
    }

    #[test]
    fn pilot_sizes_take_the_memory_of_its_table() {
        // Managed allocations round the images to 512 KiB and 512 MiB.
        assert_pilot_memory(&Conv2d, &[("small", 1.0), ("medium", 1024.0)], 1e-9);
        // PILOT's large input goes by number: `large` is the unified-memory study's.
        assert_pilot_memory(&Conv2d, &[("26144", 5.1 * 1024.0)], 0.01);
        assert_eq!(find("2dconvol").map(|a| a.name()), Some("2dconv"));
    }
}
