//! Rodinia `srad_v2`: speckle-reducing anisotropic diffusion of a rows x cols image in
//! 16 x 16 tiles, with the image statistics computed on the host.
//!
//! # The real program (Rodinia 3.1, `cuda/srad/srad_v2`)
//! Buffers, float rows x cols each (row-major), in allocation order: `j_cuda` (the image
//! J), `c_cuda` (the diffusion coefficient), `e_c`, `w_c`, `s_c`, `n_c` (the four
//! derivatives): 16 MiB each at the script's 2048 x 2048. Nothing is copied in setup.
//! Each iteration: the host computes the mean and variance of J over the region of
//! interest (rows and columns 0..=127 in the script), copies J H2D in full, launches
//! `srad_cuda_1` and `srad_cuda_2` on (rows/16) x (cols/16) blocks of 16 x 16 threads,
//! and copies J D2H in full. The phase body is the iteration loop (2 iterations in the
//! script and in the default size). Every iteration sweeps all six buffers again: the
//! regular class of the adaptive unified-memory paper (`../shared/spec/uvm-adaptive.md`).
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! Each block loads its 16 x 16 tile plus a halo into shared memory:
//! - `srad_cuda_1` reads J: the tile, the row above and the row below (16 elements
//!   each, every thread row reads the same ones) and the element left and right of each
//!   tile row; it writes the tile of C, E, W, S and N. With the west and east elements
//!   lengthening each 16-element row run to 18, every image row is read 18/16 = 1.125
//!   times, and the rows just outside each tile row are read once more as north or
//!   south halo: rows 16k and 16k + 15 get 2.125, the others 1.125 (the top and bottom
//!   tile rows re-read their own edge row instead), 1.25 times J in all.
//! - `srad_cuda_2` reads J's tile and writes it back; reads C's tile plus the row below
//!   and the column right of it (rows 16k, k > 0, and the last row get one more read,
//!   every row 17/16), and the tiles of the four derivatives.
//!
//! That halo structure is the structure within the buffers the GPUswap profiles showed
//! for srad_v2: the model gives J's and C's accesses per image row as a
//! [`Profile`](Distribution::Profile) whose pages are image rows. The column halos
//! repeat every 64 bytes and are spread evenly within each row.
//!
//! # Compute
//! `srad_cuda_1`: about 110 instructions per thread (index arithmetic and six loads
//! ~35, the border-case cascade ~15, the gradient, Laplacian and coefficient with five
//! float divisions ~60); `srad_cuda_2`: about 55. Per pixel `srad_cuda_1` moves 25
//! bytes (0.23 per instruction, against the GTX 480 model's balance of 0.26: compute
//! bound by about 1.15x), `srad_cuda_2` 28.5 (0.52: memory bound). The full-image copies
//! of every iteration take several times longer than both kernels anyway.
//!
//! The host's statistics over the 128 x 128 region cost 1 ns per element (unconfirmed: a
//! load, an add and a multiply-add on a Core i7-4770, rows 128 floats long).
//!
//! # Sizes
//! `default` (2560 x 2560, 2 iterations) is at the GPUswap evaluation's scale, `rodinia`
//! is the run script's input. `uvmsmart` is the input of the managed-memory version in
//! GPGPU-Sim UVM Smart (`benchmarks/Managed/srad_v2`, run as 1024 x 1024 with 4
//! iterations and the same region): 24 MiB of buffers. That version allocates only J
//! managed (4 MiB: the 4 MB working set of `spec/uvm-driver.md`, whose "3072x1024" does
//! not match its own figure nor the run script) and the five others with `cudaMalloc`;
//! the model cannot tell them apart (mode `uvm` manages every buffer of an app), and
//! keeps Rodinia's copies of J where that version lets the host touch J in place.
//! `large` is 12288 x 12288 with 2 iterations (3.4 GiB).

use super::common::{d2h, h2d, parse_size, phased, uniform};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::DeviceShape;
use crate::program::{Access, AccessOrder, Distribution, Kernel, Op, Program, Slot};

/// The srad_v2 app.
pub struct SradV2;

const HELP: &str = "default (2560 x 2560 image, 2 iterations, 150 MiB), rodinia (2048 x 2048, \
                    2 iterations, 96 MiB), uvmsmart (1024 x 1024, 4 iterations, 24 MiB, \
                    the research simulator's input), large (12288 x 12288, 2 iterations, \
                    3.4 GiB), or an image side N for an N x N image with 2 iterations (a \
                    multiple of 16, 16 to 16384)";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// Tile side.
const TILE: u64 = 16;
/// Iterations of Rodinia's script, for every size but `uvmsmart`.
const ITERATIONS: u64 = 2;
/// Iterations of UVM Smart's script.
const UVMSMART_ITERATIONS: u64 = 4;
/// Image side of the size `large`: six 576 MiB buffers.
const LARGE_SIDE: u64 = 12_288;
/// Side of the host's region of interest (rows and columns 0..=127 in the script).
const ROI_SIDE: u64 = 128;
/// Host time per region element (unconfirmed, see the module doc).
const HOST_NS_PER_ELEMENT: u64 = 1;
/// Instructions per thread of the two kernels (module doc).
const SRAD1_OPS: u64 = 110;
const SRAD2_OPS: u64 = 55;
/// Largest image side: six 1 GiB buffers.
const MAX_SIDE: u64 = 16_384;

impl AppModel for SradV2 {
    fn name(&self) -> &'static str {
        "srad_v2"
    }

    fn description(&self) -> &'static str {
        "Rodinia srad_v2: tiled image diffusion; the image is copied in and out every iteration"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        let named = [
            ("default", (2560, ITERATIONS)),
            ("rodinia", (2048, ITERATIONS)),
            ("uvmsmart", (1024, UVMSMART_ITERATIONS)),
            ("large", (LARGE_SIDE, ITERATIONS)),
        ];
        let (side, iterations) = parse_size(self.name(), HELP, size, &named, |n| {
            if n == 0 || !n.is_multiple_of(TILE) || n > MAX_SIDE {
                Err(format!(
                    "image side {n} is not a multiple of 16 between 16 and {MAX_SIDE}"
                ))
            } else {
                Ok((n, ITERATIONS))
            }
        })?;
        Ok(program(side, iterations, repeat))
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Regular)
    }
}

/// A read of a rows x cols image whose accesses per row are `weight(row)`; the read
/// bytes are the weights' sum times the row size.
fn rows_read(slot: Slot, rows: u64, row_bytes: u64, weight: impl Fn(u64) -> f64) -> Access {
    let weights: Vec<f64> = (0..rows).map(weight).collect();
    let read = (weights.iter().sum::<f64>() * row_bytes as f64).round() as u64;
    Access {
        slot,
        read_bytes: read,
        reread_bytes: 0,
        write_bytes: 0,
        rewrite_bytes: 0,
        distribution: Distribution::Profile {
            page_bytes: row_bytes,
            weights,
        },
        order: AccessOrder::Linear,
    }
}

fn program(side: u64, iterations: u64, repeat: u32) -> Program {
    let mut p = Program::default();
    let (rows, cols) = (side, side);
    let row_bytes = cols * FLOAT_BYTES;
    let b = rows * row_bytes;
    let [j, c, e, w, s, n] =
        ["j_cuda", "c_cuda", "e_c", "w_c", "s_c", "n_c"].map(|l| p.buffer(l, b));
    let derivs = [e, w, s, n];
    let linear =
        |slot: Slot, read: u64, write: u64| uniform(slot, read, write, AccessOrder::Linear);
    let pixels = rows * cols;

    // Rows 16k and 16k + 15 are read again as the halo of the neighbouring tile row (the
    // first and last rows by their own tile row).
    let edge_row = |r: u64| r.is_multiple_of(TILE) || r % TILE == TILE - 1;
    let srad1_j = rows_read(j, rows, row_bytes, |r| {
        (TILE + 2) as f64 / TILE as f64 + if edge_row(r) { 1.0 } else { 0.0 }
    });
    let mut srad1 = vec![srad1_j];
    srad1.extend([c].iter().chain(&derivs).map(|&slot| linear(slot, 0, b)));
    // C's south halo: the first row of the next tile row; the last tile row re-reads
    // its own last row.
    let south_row = |r: u64| (r.is_multiple_of(TILE) && r > 0) || r == rows - 1;
    let srad2_c = rows_read(c, rows, row_bytes, |r| {
        (TILE + 1) as f64 / TILE as f64 + if south_row(r) { 1.0 } else { 0.0 }
    });
    let mut srad2 = vec![linear(j, b, b), srad2_c];
    srad2.extend(derivs.map(|slot| linear(slot, b, 0)));

    let roi = ROI_SIDE.min(side);
    let iteration = [
        Op::Cpu {
            ns: roi * roi * HOST_NS_PER_ELEMENT,
        },
        h2d(j, b),
        Op::Launch(Kernel {
            name: "srad_cuda_1".into(),
            ops: pixels * SRAD1_OPS,
            accesses: srad1,
            phases: Vec::new(),
            outer_loop: Default::default(),
        }),
        Op::Launch(Kernel {
            name: "srad_cuda_2".into(),
            ops: pixels * SRAD2_OPS,
            accesses: srad2,
            phases: Vec::new(),
            outer_loop: Default::default(),
        }),
        d2h(j, b),
    ];
    let body = (0..iterations).flat_map(|_| iteration.clone()).collect();
    let setup = [j, c, e, w, s, n].map(Op::Alloc).into();
    let teardown = vec![
        Op::Sync,
        Op::Free(c),
        Op::Free(j),
        Op::Free(e),
        Op::Free(w),
        Op::Free(n),
        Op::Free(s),
    ];
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{
        check_app, density, gtx480, launches, mib, phase_body, rejects, traffic,
    };

    #[test]
    fn footprint_is_six_images() {
        let p = check_app(&SradV2, "rodinia");
        assert_eq!(mib(&p), 96.0);
        let p = check_app(&SradV2, "default");
        assert_eq!(mib(&p), 150.0);
        assert_eq!(launches(phase_body(&p, 1)), 4);
    }

    #[test]
    fn uvmsmart_runs_4_iterations_large_is_gibibytes() {
        let p = check_app(&SradV2, "uvmsmart");
        assert_eq!(
            p.buffers[0].bytes,
            4 << 20,
            "J: the 4 MB managed in the artifact"
        );
        assert_eq!(mib(&p), 24.0);
        let body = phase_body(&p, 1);
        assert_eq!(launches(body), 8, "two kernels per iteration");
        // Every iteration sweeps all six buffers again in address order: regular.
        let swept: std::collections::BTreeSet<_> = body[2..4]
            .iter()
            .flat_map(|op| match op {
                Op::Launch(k) => k.accesses.clone(),
                _ => panic!("the two kernels"),
            })
            .inspect(|a| assert_eq!(a.order, AccessOrder::Linear))
            .map(|a| a.slot)
            .collect();
        assert_eq!(swept.len(), 6);
        let large = mib(&check_app(&SradV2, "large")) / 1024.0;
        assert!((2.0..=8.0).contains(&large), "{large} GiB");
        assert_eq!(SradV2.pattern_class(), Some(PatternClass::Regular));
    }

    #[test]
    fn the_image_is_copied_both_ways_every_iteration() {
        let p = SradV2.program("rodinia", 1, gtx480()).unwrap();
        let full = |op: &&Op| matches!(op, Op::Copy { slot: 0, bytes, .. } if *bytes == 16 << 20);
        assert_eq!(phase_body(&p, 1).iter().filter(full).count(), 4);
    }

    #[test]
    fn halos_give_the_image_row_structure() {
        let p = SradV2.program("256", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        // srad_cuda_1 reads J 1.25 times: 18/16 per row plus two halo rows per 16.
        let Op::Launch(k1) = &body[2] else {
            panic!("srad_cuda_1")
        };
        assert_eq!(k1.accesses[0].read_bytes, 256 * 256 * 5);
        // Per row, over the phase: edge rows of each tile row get more than the others.
        let d = density(&p, body, 0, 256);
        let (edge, inner) = (d[16], d[20]);
        // Per iteration: edge 2.125 + 2 (srad_cuda_2), inner 1.125 + 2.
        let expected = (2.125 + 2.0) / (1.125 + 2.0);
        assert!((edge / inner - expected).abs() < 1e-9, "{edge} {inner}");
        assert_eq!(d[15], d[16], "both sides of a tile boundary are halo rows");
        // The derivatives have no structure.
        let flat = density(&p, body, 2, 16);
        assert!(flat.iter().all(|x| (x - flat[0]).abs() < 1e-9));
    }

    #[test]
    fn coefficient_and_derivatives_are_written_then_read() {
        let p = SradV2.program("rodinia", 1, gtx480()).unwrap();
        let t = traffic(phase_body(&p, 1), 6);
        let b = 16u64 << 20;
        for (deriv, buffer) in t[2..].iter().zip(&p.buffers[2..]) {
            assert_eq!(*deriv, (2 * b, 2 * b), "{}", buffer.label);
        }
        // C: 17/16 per row plus the south halo rows (one per tile row): 1.125 per read.
        assert_eq!(t[1], (2 * b * 9 / 8, 2 * b));
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&SradV2, "100", "multiple of 16");
        rejects(&SradV2, "16400", "16384");
        rejects(&SradV2, "2048x2048", "not a size");
    }
}
