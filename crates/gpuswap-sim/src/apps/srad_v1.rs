//! Rodinia `srad_v1`: speckle-reducing anisotropic diffusion of an Nr x Nc image, with
//! the image statistics reduced on the GPU.
//!
//! # The real program (Rodinia 3.1, `cuda/srad/srad_v1`)
//! Buffers, in allocation order: `image` (the image I, float Nr x Nc, column-major), the
//! four neighbour index tables `index_n`, `index_s` (Nr ints) and `index_e`, `index_w`
//! (Nc ints, each copied H2D after its allocation), then `sums`, `sums2`, `deriv_n`,
//! `deriv_s`, `deriv_w`, `deriv_e` and `coeff` (the diffusion coefficient c), float
//! Nr x Nc each: eight equal buffers, 0.92 MB each at the script's 502 x 458. Setup:
//! H2D of the image and the `extract` launch. Each iteration: `prepare`; `reduce` passes
//! of 512-thread blocks until one block remains (2 passes at 502 x 458, 3 at 2048^2);
//! D2H of one float of `sums` and of `sums2` (synchronous); `srad`; `srad2`. Teardown:
//! `compress` and the image D2H. The phase body is the iteration loop; the script runs
//! 100 iterations (502 launches with extract and compress, `spec/apps.md`), the default
//! size 10 so that 100 repetitions stay at 6000 launches.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! One thread per pixel, consecutive threads on consecutive pixels of a column (B = the
//! bytes of one image-sized buffer):
//! - `prepare`: reads I (B), writes `sums` and `sums2` (B each);
//! - `reduce`, first pass: reads `sums` and `sums2` (B each) and writes one float per
//!   block of each; later passes read one float every 512^k (isolated, a 128-byte line
//!   each) and write one per block;
//! - `srad`: reads I at the pixel and its four neighbours: north and south lie in the
//!   same column run, west and east in the neighbouring columns, so I is read 3B; writes
//!   `deriv_n`..`deriv_e` and `coeff` (B each); the index tables stay in L2 (read once);
//! - `srad2`: reads `coeff` at the pixel, its south (same run) and east (next column)
//!   neighbours: 2B; reads the four derivatives (B each); reads and writes I (B each).
//!
//! Per iteration that is 6B of traffic on I, 3B on `coeff`, about 2B on each of the six
//! others: the first-allocated buffer gets the most accesses per page, the last an
//! intermediate number, the rest few, as in the GPUswap profiles. (The last `reduce`
//! block's serial tail of fewer than 512 elements is left out.)
//!
//! # Compute
//! Instructions per thread: `extract`/`compress` 30 (an exponential or logarithm),
//! `prepare` 12, `reduce` 70 (nine tree steps with a modulo test each), `srad` 90 (five
//! float divisions at ~10 and ~40 other), `srad2` 25. All but `reduce` move more than
//! the GTX 480 model's balance of 0.26 bytes per instruction (`srad` 0.36, `extract`
//! 0.27): memory bound; the reduction tree makes `reduce` compute bound.

use super::common::{
    READ_LINE_BYTES, WRITE_SECTOR_BYTES, d2h, h2d, parse_size, phased, uniform, within,
};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, Program, Slot};

/// The srad_v1 app.
pub struct SradV1;

const HELP: &str = "default (2048 x 2048 image, 10 iterations, 128 MiB), rodinia (502 x 458, \
                    100 iterations, 7.4 MB), or an image side N for an N x N image with 10 \
                    iterations (2 to 8192)";
/// Float and int size.
const WORD_BYTES: u64 = 4;
/// Threads per block.
const BLOCK: u64 = 512;
/// Iterations of the default and numeric sizes.
const DEFAULT_ITERATIONS: u64 = 10;
/// Largest image side: eight 256 MiB buffers.
const MAX_SIDE: u64 = 8192;
/// Instructions per thread of each kernel (module doc).
const EXTRACT_OPS: u64 = 30;
const PREPARE_OPS: u64 = 12;
const REDUCE_OPS: u64 = 70;
const SRAD_OPS: u64 = 90;
const SRAD2_OPS: u64 = 25;

impl AppModel for SradV1 {
    fn name(&self) -> &'static str {
        "srad_v1"
    }

    fn description(&self) -> &'static str {
        "Rodinia srad_v1: image diffusion with GPU reductions, eight image-sized buffers"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = [
            (
                "default",
                Input {
                    rows: 2048,
                    cols: 2048,
                    iterations: DEFAULT_ITERATIONS,
                },
            ),
            (
                "rodinia",
                Input {
                    rows: 502,
                    cols: 458,
                    iterations: 100,
                },
            ),
        ];
        let input = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, 2..=MAX_SIDE, format!("a {n} x {n} image")).map(|n| Input {
                rows: n,
                cols: n,
                iterations: DEFAULT_ITERATIONS,
            })
        })?;
        Ok(program(input, repeat, device))
    }
}

/// The program's arguments that shape its memory behaviour.
#[derive(Clone, Copy)]
struct Input {
    rows: u64,
    cols: u64,
    iterations: u64,
}

/// The reduction passes over `elements` partial sums: (elements read, stride multiplier,
/// blocks) per launch, as the host loop of `main.cu` computes them.
fn reduce_passes(elements: u64) -> Vec<(u64, u64, u64)> {
    let mut passes = Vec::new();
    let (mut no, mut mul, mut blocks) = (elements, 1, elements.div_ceil(BLOCK));
    loop {
        passes.push((no, mul, blocks));
        if blocks == 1 {
            return passes;
        }
        no = blocks;
        mul *= BLOCK;
        blocks = blocks.div_ceil(BLOCK);
    }
}

fn program(input: Input, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let pixels = input.rows * input.cols;
    let b = pixels * WORD_BYTES;
    let image = p.buffer("image", b);
    let tables = [
        p.buffer("index_n", input.rows * WORD_BYTES),
        p.buffer("index_s", input.rows * WORD_BYTES),
        p.buffer("index_e", input.cols * WORD_BYTES),
        p.buffer("index_w", input.cols * WORD_BYTES),
    ];
    let [index_n, index_s, index_e, index_w] = tables;
    let sums = p.buffer("sums", b);
    let sums2 = p.buffer("sums2", b);
    let derivs = ["deriv_n", "deriv_s", "deriv_w", "deriv_e"].map(|label| p.buffer(label, b));
    let coeff = p.buffer("coeff", b);

    let threads = pixels.div_ceil(BLOCK) * BLOCK;
    let linear =
        |slot: Slot, read: u64, write: u64| uniform(slot, read, write, AccessOrder::Linear);
    let table = |p: &Program, slot: Slot| {
        linear(slot, device.l2_resident_reads(p.buffers[slot].bytes, b), 0).read_before_l2(b)
    };
    let kernel = |name: &str, ops_per_thread: u64, accesses| {
        Op::Launch(Kernel {
            name: name.into(),
            ops: threads * ops_per_thread,
            accesses,
            phases: Vec::new(),
            outer_loop: Default::default(),
        })
    };

    let mut iteration = vec![kernel(
        "prepare",
        PREPARE_OPS,
        vec![linear(image, b, 0), linear(sums, 0, b), linear(sums2, 0, b)],
    )];
    for (no, mul, blocks) in reduce_passes(pixels) {
        let (read, order) = if mul == 1 {
            (no * WORD_BYTES, AccessOrder::Linear)
        } else {
            let stride_bytes = mul * WORD_BYTES;
            (
                (no * READ_LINE_BYTES).min(b),
                AccessOrder::Strided { stride_bytes },
            )
        };
        let accesses = [sums, sums2]
            .map(|slot| uniform(slot, read, blocks * WRITE_SECTOR_BYTES, order))
            .into();
        iteration.push(Op::Launch(Kernel {
            name: "reduce".into(),
            ops: blocks * BLOCK * REDUCE_OPS,
            accesses,
            phases: Vec::new(),
            outer_loop: Default::default(),
        }));
    }
    iteration.extend([d2h(sums, WORD_BYTES), d2h(sums2, WORD_BYTES)]);
    let mut srad = vec![linear(image, 3 * b, 0)];
    srad.extend(tables.map(|slot| table(&p, slot)));
    srad.extend(derivs.map(|slot| linear(slot, 0, b)));
    srad.push(linear(coeff, 0, b));
    iteration.push(kernel("srad", SRAD_OPS, srad));
    let mut srad2 = vec![linear(coeff, 2 * b, 0)];
    srad2.extend(derivs.map(|slot| linear(slot, b, 0)));
    srad2.extend([table(&p, index_s), table(&p, index_e), linear(image, b, b)]);
    iteration.push(kernel("srad2", SRAD2_OPS, srad2));
    let body = (0..input.iterations)
        .flat_map(|_| iteration.clone())
        .collect();

    let mut setup = vec![Op::Alloc(image)];
    for slot in tables {
        setup.extend([Op::Alloc(slot), h2d(slot, p.buffers[slot].bytes)]);
    }
    setup.extend(
        [sums, sums2]
            .into_iter()
            .chain(derivs)
            .chain([coeff])
            .map(Op::Alloc),
    );
    setup.extend([
        h2d(image, b),
        kernel("extract", EXTRACT_OPS, vec![linear(image, b, b)]),
    ]);
    let mut teardown = vec![
        kernel("compress", EXTRACT_OPS, vec![linear(image, b, b)]),
        d2h(image, b),
    ];
    let [deriv_n, deriv_s, deriv_w, deriv_e] = derivs;
    let freed = [
        image, coeff, index_n, index_s, index_e, index_w, deriv_n, deriv_s, deriv_e, deriv_w, sums,
        sums2,
    ];
    teardown.extend(freed.map(Op::Free));
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, launches, mib, per_byte, phase_body, rejects};

    #[test]
    fn footprint_is_eight_images_and_four_tables() {
        let p = check_app(&SradV1, "rodinia");
        let image = 502 * 458 * 4;
        assert_eq!(
            p.peak_allocated_bytes(),
            8 * image + 2 * 502 * 4 + 2 * 458 * 4
        );
        assert!((p.peak_allocated_bytes() as f64 / 1e6 - 7.37).abs() < 0.02);
        let large: Vec<_> = p.buffers.iter().filter(|b| b.bytes == image).collect();
        assert_eq!(large.len(), 8);
        let p = check_app(&SradV1, "default");
        assert!((128.0..128.1).contains(&mib(&p)), "{}", mib(&p));
    }

    #[test]
    fn launch_counts_match_the_script() {
        // 100 iterations of prepare, two reduce passes, srad, srad2, plus extract and
        // compress outside the phase: 502.
        let p = SradV1.program("rodinia", 1, gtx480()).unwrap();
        assert_eq!(launches(phase_body(&p, 1)), 500);
        assert_eq!(launches(&p.ops), 502);
        assert_eq!(reduce_passes(2048 * 2048).len(), 3);
        let p = SradV1.program("default", 1, gtx480()).unwrap();
        assert_eq!(launches(phase_body(&p, 1)), 60);
    }

    #[test]
    fn image_most_accessed_coefficient_intermediate_rest_few() {
        let p = SradV1.program("default", 1, gtx480()).unwrap();
        let d = per_byte(&p, 1);
        let large: Vec<(String, f64)> = p
            .buffers
            .iter()
            .zip(&d)
            .filter(|(b, _)| b.bytes == p.buffers[0].bytes)
            .map(|(b, d)| (b.label.clone(), *d))
            .collect();
        assert_eq!(large.first().unwrap().0, "image");
        assert_eq!(large.last().unwrap().0, "coeff");
        let (image, coeff) = (large[0].1, large[7].1);
        let rest: Vec<f64> = large[1..7].iter().map(|(_, d)| *d).collect();
        let (low, high) = rest
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &d| (l.min(d), h.max(d)));
        // Per iteration: 6 B on I, 3 B on c, about 2 B on each of the others.
        assert!((image / (10.0 * 6.0) - 1.0).abs() < 0.01, "{image}");
        assert!((coeff / (10.0 * 3.0) - 1.0).abs() < 0.01, "{coeff}");
        assert!(high < 1.1 * low && low >= 20.0, "{rest:?}");
        assert!(image > 1.5 * coeff && coeff > 1.3 * high);
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&SradV1, "1", "2 to 8192");
        rejects(&SradV1, "10000", "2 to 8192");
        rejects(&SradV1, "502x458", "not a size");
    }
}
