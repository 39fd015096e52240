//! Rodinia `lud`: in-place LU decomposition of a dense dim x dim float matrix in
//! 16 x 16 blocks.
//!
//! # The real program (Rodinia 3.1, `cuda/lud`)
//! One buffer, `matrix` (float dim^2: 256 KiB at the script's dim = 256, 16 MiB at 2048,
//! 256 MB at 8000), copied H2D before and D2H after the factorization. For each step at
//! offset o = 0, 16, ..., dim - 32, with n = (dim - o) / 16 - 1 trailing tiles per side:
//! `lud_diagonal` (1 block of 16 threads) factors the 16 x 16 diagonal tile at (o, o);
//! `lud_perimeter` (n blocks of 32 threads) reads the diagonal tile, one tile of the row
//! band (rows o..o+15 right of the diagonal) and one of the column band (columns
//! o..o+15 below it) and writes both back; `lud_internal` (n^2 blocks of 16 x 16)
//! reads a row-band tile and a column-band tile and read-modify-writes its own tile of
//! the trailing submatrix. A last `lud_diagonal` at o = dim - 16 ends it: 3(dim/16 - 1)
//! \+ 1 launches, all queued without synchronization. The phase body is one
//! factorization (`lud_cuda`).
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! A tile row is 64 contiguous bytes, so a tile moves 1 KiB (the diagonal writes back
//! only its 15 lower rows, 960 B; so does the perimeter's row-band tile).
//! - `lud_diagonal`: 1 KiB read, 960 B written, in the rows of the diagonal tile.
//! - `lud_perimeter`: per block 2 KiB read and 960 B written in the row band, 1 KiB read
//!   and 1 KiB written in the column band.
//! - `lud_internal`: per block 1 KiB read in the row band, 2 KiB read and 1 KiB written
//!   below it (the column-band tile and its own tile).
//!
//! Those are what the blocks ask for; what reaches memory is less where re-reads hit the
//! L2 (below).
//!
//! The structure inside the single buffer comes from the shrinking trailing submatrix:
//! each launch's accesses are per-launch [`Ranges`](Distribution::Ranges), one over the
//! row band (from the diagonal tile to the end of row o + 15) and one over everything
//! below (from row o + 16, column o, to the end of the matrix), weighted by the bytes
//! each receives. The ranges include the columns left of o in those rows, which the
//! kernels skip: exact at chunk granularity (a row is 20 KiB at the default dim, a chunk
//! 2-4 MiB), coarse at page granularity. Over a factorization a row is in the band of
//! one step and below the band of every earlier one, so the accesses per page grow
//! towards the end of the matrix.
//!
//! # Re-reads and the L2 ([`DeviceShape::reused_reads`])
//! Blocks run in row-major order. `lud_internal`'s block (i, j) reads row-band tile j:
//! between two reads of that tile (blocks (i, j) and (i + 1, j)) the other n - 1 blocks
//! bring their own tiles through the L2, n KiB, beside the n KiB of the band; the
//! column-band tile i is read by n consecutive blocks, with 2 KiB between reads; the
//! perimeter's blocks all read the diagonal tile, 2 KiB apart. Where the region and
//! what passes between its reads fit in the L2 (2n KiB <= 768 KiB on the GTX 480: the
//! whole default factorization), each is read from memory once per launch.
//!
//! # Compute
//! `lud_internal`: about 80 instructions per thread (two loads, 16 shared-memory
//! multiply-adds at ~4 instructions, the read-modify-write and index arithmetic): 20480
//! per block against the 2 KiB that reach memory once the band tiles hit the L2 (its
//! own tile read and written), about 10 instructions per byte where the GTX 480 model
//! balances at 3.8: compute bound by about 2.6x.
//! `lud_perimeter`: about 700 per thread (24 tile-row loads, two triangular solves of
//! 120 multiply-adds, 16 divisions, 31 stores); `lud_diagonal` about 1000 per thread
//! (the triangular factorization of 16 x 16 by 16 threads).

use super::common::{d2h, h2d, parse_size, phased};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{Access, AccessOrder, Distribution, Kernel, Op, Program, WeightedRange};

/// The lud app.
pub struct Lud;

const HELP: &str = "default (dim 5120, 100 MiB), rodinia (dim 256, 256 KiB), or a matrix \
                    dimension (a multiple of 16, 16 to 32768; e.g. 512, 2048, 8000)";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// Tile side.
const TILE: u64 = 16;
/// Bytes of one tile, and of its 15 rows below the first.
const TILE_BYTES: u64 = TILE * TILE * FLOAT_BYTES;
const TILE_LOWER_BYTES: u64 = (TILE - 1) * TILE * FLOAT_BYTES;
/// Instructions per thread of the three kernels (module doc).
const DIAGONAL_OPS_PER_THREAD: u64 = 1000;
const PERIMETER_OPS_PER_THREAD: u64 = 700;
const INTERNAL_OPS_PER_THREAD: u64 = 80;
/// Largest dimension accepted: a 4 GiB matrix.
const MAX_DIM: u64 = 32_768;

impl AppModel for Lud {
    fn name(&self) -> &'static str {
        "lud"
    }

    fn description(&self) -> &'static str {
        "Rodinia lud: blocked LU decomposition in place, one buffer with a shrinking active part"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = [("default", 5120), ("rodinia", 256)];
        let dim = parse_size(self.name(), HELP, size, &named, |n| {
            if n == 0 || !n.is_multiple_of(TILE) || n > MAX_DIM {
                Err(format!(
                    "dimension {n} is not a multiple of 16 between 16 and {MAX_DIM}"
                ))
            } else {
                Ok(n)
            }
        })?;
        Ok(program(dim, repeat, device))
    }
}

/// Byte offset of element (row, col) of a dim x dim matrix.
fn at(dim: u64, row: u64, col: u64) -> u64 {
    (row * dim + col) * FLOAT_BYTES
}

/// An access whose traffic lands in the given (start, end, bytes) byte ranges.
fn banded(slot: usize, read: u64, write: u64, bands: &[(u64, u64, u64)]) -> Access {
    Access {
        slot,
        read_bytes: read,
        reread_bytes: 0,
        write_bytes: write,
        rewrite_bytes: 0,
        distribution: Distribution::Ranges(
            bands
                .iter()
                .map(|&(start, end, bytes)| WeightedRange {
                    offset_bytes: start,
                    bytes: end - start,
                    weight: bytes as f64,
                })
                .collect(),
        ),
        order: AccessOrder::Linear,
    }
}

fn program(dim: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let bytes = dim * dim * FLOAT_BYTES;
    let m = p.buffer("matrix", bytes);
    let diagonal = |o: u64| {
        let band = (
            at(dim, o, o),
            at(dim, o + TILE - 1, o + TILE),
            TILE_BYTES + TILE_LOWER_BYTES,
        );
        Op::Launch(Kernel {
            name: "lud_diagonal".into(),
            ops: TILE * DIAGONAL_OPS_PER_THREAD,
            accesses: vec![banded(m, TILE_BYTES, TILE_LOWER_BYTES, &[band])],
            phases: Vec::new(),
            outer_loop: Default::default(),
        })
    };
    let mut body = Vec::new();
    for o in (0..dim - TILE).step_by(TILE as usize) {
        let n = (dim - o) / TILE - 1;
        let row_band = (at(dim, o, o), at(dim, o + TILE, 0));
        let below = (at(dim, o + TILE, o), bytes);
        body.push(diagonal(o));
        // Per perimeter block: the diagonal tile (re-read by every block) and a row-band
        // tile, read-modify-written; a column-band tile likewise.
        let diagonal_reads = device.reused_reads(TILE_BYTES, n * TILE_BYTES, 2 * TILE_BYTES);
        let (band_read, band_write) = (diagonal_reads + n * TILE_BYTES, n * TILE_LOWER_BYTES);
        let (col_read, col_write) = (n * TILE_BYTES, n * TILE_BYTES);
        body.push(Op::Launch(Kernel {
            name: "lud_perimeter".into(),
            ops: n * 2 * TILE * PERIMETER_OPS_PER_THREAD,
            accesses: vec![
                banded(
                    m,
                    band_read + col_read,
                    band_write + col_write,
                    &[
                        (row_band.0, row_band.1, band_read + band_write),
                        (below.0, below.1, col_read + col_write),
                    ],
                )
                .read_before_l2(2 * n * TILE_BYTES + col_read),
            ],
            phases: Vec::new(),
            outer_loop: Default::default(),
        }));
        let blocks = n * n;
        // Row-band tiles: each read by n blocks, n - 1 own tiles apart; column-band
        // tiles: each read by n consecutive blocks; own tiles: once each.
        let band_read =
            device.reused_reads(n * TILE_BYTES, blocks * TILE_BYTES, (n - 1) * TILE_BYTES);
        let column_read = n * device.reused_reads(TILE_BYTES, n * TILE_BYTES, 2 * TILE_BYTES);
        let (below_read, below_write) = (blocks * TILE_BYTES + column_read, blocks * TILE_BYTES);
        body.push(Op::Launch(Kernel {
            name: "lud_internal".into(),
            ops: blocks * TILE * TILE * INTERNAL_OPS_PER_THREAD,
            accesses: vec![
                banded(
                    m,
                    band_read + below_read,
                    below_write,
                    &[
                        (row_band.0, row_band.1, band_read),
                        (below.0, below.1, below_read + below_write),
                    ],
                )
                .read_before_l2((2 * blocks + n * n) * TILE_BYTES),
            ],
            phases: Vec::new(),
            outer_loop: Default::default(),
        }));
    }
    body.push(diagonal(dim - TILE));

    let setup = vec![Op::Alloc(m), h2d(m, bytes)];
    let teardown = vec![d2h(m, bytes), Op::Free(m)];
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
    fn footprint_is_one_matrix() {
        let p = check_app(&Lud, "rodinia");
        assert_eq!(p.peak_allocated_bytes(), 256 << 10);
        let p = check_app(&Lud, "default");
        assert_eq!(mib(&p), 100.0);
        assert_eq!(
            Lud.program("2048", 1, gtx480())
                .unwrap()
                .peak_allocated_bytes(),
            16 << 20
        );
    }

    #[test]
    fn launches_are_three_per_step_plus_one() {
        let p = Lud.program("rodinia", 1, gtx480()).unwrap();
        assert_eq!(launches(phase_body(&p, 1)), 46);
        let p = Lud.program("default", 1, gtx480()).unwrap();
        assert_eq!(launches(phase_body(&p, 1)), 3 * (5120 / 16 - 1) + 1);
        assert_eq!(
            launches(phase_body(&Lud.program("16", 1, gtx480()).unwrap(), 1)),
            1
        );
    }

    #[test]
    fn internal_reads_each_band_tile_once_when_the_l2_holds_it() {
        let p = Lud.program("256", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        let Op::Launch(internal) = &body[2] else {
            panic!("first internal")
        };
        // 15 x 15 blocks: each reads and writes its own tile; the 15 row-band and 15
        // column-band tiles are read once each (30 KiB between re-reads fit the L2).
        assert_eq!(internal.accesses[0].read_bytes, (225 + 15 + 15) * 1024);
        assert_eq!(internal.accesses[0].write_bytes, 225 * 1024);
        // The whole factorization moves about 2 KiB x sum of n^2 = 2 KiB x (dim/16)^3 / 3
        // = dim^3 / 6 bytes, plus the bands and the perimeters.
        let (read, write) = traffic(body, 1)[0];
        let estimate = (256u64.pow(3) / 6) as f64;
        assert!(
            ((read + write) as f64 / estimate - 1.0).abs() < 0.3,
            "{read} {write}"
        );
        // Without an L2 big enough every block reads its band tiles again.
        let tiny = DeviceShape {
            l2_bytes: 16 << 10,
            ..gtx480()
        };
        let p = Lud.program("256", 1, tiny).unwrap();
        let Op::Launch(internal) = &phase_body(&p, 1)[2] else {
            panic!("first internal")
        };
        assert_eq!(internal.accesses[0].read_bytes, (225 + 225 + 15) * 1024);
    }

    #[test]
    fn each_step_concentrates_on_its_bands() {
        let p = Lud.program("1024", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        // The first internal launch: its row band (rows 0..16) is read once, about one
        // access per byte; the rows below are read and written once, about two.
        let d = density(&p, &body[2..3], 0, 64);
        assert!((d[0] / d[1] - 0.5).abs() < 0.02, "{} {}", d[0], d[1]);
        // The last step touches only the bottom-right corner.
        let last = density(&p, &body[body.len() - 4..], 0, 64);
        assert!(last[..62].iter().all(|&x| x == 0.0) && last[63] > 0.0);
    }

    #[test]
    fn the_end_of_the_matrix_gets_more_accesses_per_page() {
        let p = Lud.program("1024", 1, gtx480()).unwrap();
        let d = density(&p, phase_body(&p, 1), 0, 4);
        // Row r is below the band of every step before it: later rows are in more
        // trailing submatrices.
        assert!(d[0] < d[1] && d[1] < d[2] && d[2] < d[3], "{d:?}");
        assert!(d[3] / d[0] > 2.0, "{d:?}");
    }

    #[test]
    fn internal_is_compute_bound_once_its_bands_hit_the_l2() {
        let ops_per_byte = (256 * INTERNAL_OPS_PER_THREAD) as f64 / (2 * TILE_BYTES) as f64;
        let balance = 672e9 / 177.4e9;
        assert!(
            (2.0..3.0).contains(&(ops_per_byte / balance)),
            "{ops_per_byte}"
        );
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Lud, "1000", "multiple of 16");
        rejects(&Lud, "0", "multiple of 16");
        rejects(&Lud, "65536", "32768");
        rejects(&Lud, "2k", "not a size");
    }
}
