//! Rodinia `nw` (Needleman-Wunsch): global alignment of two sequences of length n by
//! dynamic programming over an (n + 1) x (n + 1) score matrix, swept as an anti-diagonal
//! wavefront of 16 x 16 blocks, in the managed-memory version of GPGPU-Sim UVM Smart
//! (`benchmarks/Managed/nw`), a mixed-class workload of the adaptive unified-memory
//! paper (`../shared/spec/uvm-adaptive.md`).
//!
//! # The real program
//! Buffers, int (n + 1)^2 each, both managed, in allocation order: `reference` (the
//! BLOSUM62 score of every pair of residues) and `itemsets` (the score matrix, its first
//! row and column holding the gap penalties). The host fills both (setup: H2D of each,
//! as Rodinia's original copies them). With w = n / 16 blocks per side,
//! `needle_cuda_shared_1` runs w times, launch i (1..=w) on i blocks, for the upper-left
//! triangle of blocks; `needle_cuda_shared_2` runs w - 1 times, launch i (from w - 1
//! down to one) on i blocks, for the lower-right one: 2w - 1 launches (127 at the run
//! script's n = 1024), queued without synchronization, then a device synchronization,
//! and the host traces the alignment back through the score matrix (teardown: D2H of
//! `itemsets`). Each of the w^2 blocks runs once. The phase body is one alignment.
//!
//! A block is 16 threads, one per column of its block. It loads the 16 x 16 reference
//! tile (one row of 16 ints per step, all threads together), the corner and north row
//! of the score matrix above the tile and its west column (one element per thread),
//! computes the tile's 31 anti-diagonals in shared memory (a barrier after each) and
//! writes the 16 rows of the tile. The blocks of launch i lie on one anti-diagonal of
//! blocks: upper-left block b (0..i) at block column b, block row i - 1 - b; lower-right
//! block b at block column b + w - i, block row w - 1 - b. So launch i reaches the rows
//! of block rows 0..i (upper-left) or w - i..w (lower-right), 16 i matrix rows, each in a
//! piece of 16 ints.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! A matrix row is 4 (n + 1) bytes (4100 at n = 1024), so the row pieces of a tile are a
//! row apart: isolated accesses. A piece starts at int r (n + 1) + 16 x + 1 of row r,
//! and since n + 1 is odd its offset within a 128-byte line takes each of the 32 int
//! positions once over 32 consecutive rows. A 64-byte piece spans two lines when it
//! starts in the last 60 bytes of one (15 of 32 offsets: 47/32 lines) and three 32-byte
//! sectors unless it starts on one (1 of 8: 23/8 sectors). Per block:
//! - `reference`: 16 pieces read, 16 x 47/32 lines = 3008 bytes;
//! - `itemsets`: the corner and the north row read (17 contiguous ints from int 16 y
//!   (n + 1) + 16 x, which starts a line or its middle in equal shares over the blocks:
//!   one line or two, 3/2), and the west column (16 isolated elements, a line each):
//!   2240 bytes; 16 pieces written, 16 x 23/8 sectors = 1472 bytes.
//!
//! Each launch's accesses reach the rows of its block rows, a range that grows by 16
//! rows per launch over the upper-left triangle and shrinks by 16 over the lower-right
//! one; the row pieces are a few percent of a row, but at the default a row is about a
//! 4 KiB page, so the launch reaches every page of its range. Its blocks run at once,
//! each walking its 16 rows, so the launch's accesses arrive interleaved across the
//! range, not in address order: `Random` over the range (the engine draws one page per
//! isolated transaction, reaching each page of the range a time or more). Every page
//! comes back in about w launches, one column of blocks further each time:
//! re-referenced ranges touched out of order, the mixed class.
//!
//! The ranges are whole rows, exact at page granularity while a row takes at most about
//! a page (n up to about 1024). A longer row spans several pages, of which a launch's
//! piece lands in one (the same one for 64 launches in a row, as the piece moves 64
//! bytes per launch); the model spreads the launch's touches over all of them, so at
//! such sizes (`large` among them) it overstates how many pages a launch reaches and
//! understates how soon they come back.
//!
//! # Compute
//! Per thread, about 20 instructions of index arithmetic, 3 per element loaded into
//! shared memory (16 reference rows, the corner, north and west elements: 57), 20 per
//! anti-diagonal step (the lane test, six indices, four shared loads, three
//! additions, two comparisons, the store and the barrier; every lane runs all 31 steps,
//! idle or not) and 4 per row stored (64): 761. A 16-thread block fills half a warp,
//! whose idle lanes take issue slots too, so the model counts 32 lanes per block:
//! 24352 instructions against 6720 bytes, 3.6 per byte, about balanced on the GTX 480
//! model (3.8) and memory bound on the GTX 1080 Ti's. The real kernels are bound by
//! neither but by latency (31 barriers in a block of 16 threads, launches of a few
//! blocks), which the timing model does not see: it spreads a launch over the whole GPU.
//!
//! # Sizes
//! `default` and `uvmsmart` are UVM Smart's run script (`./needle 1024 10`): two 4.0 MiB
//! matrices, 8.02 MiB, 1.3 % under the 8.125 MB of `spec/uvm-driver.md` (what each
//! allocation takes rounded up to whole 64 KiB blocks: 2 x 65 x 64 KiB), and 127
//! launches, as there. The penalty changes no access.

use super::common::{
    READ_LINE_BYTES, WRITE_SECTOR_BYTES, d2h, h2d, parse_size, phased, workload_sizes,
};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::DeviceShape;
use crate::program::{Access, AccessOrder, Distribution, Kernel, Op, Program, WeightedRange};

/// The nw app.
pub struct Nw;

const HELP: &str = "default or uvmsmart (two 1024-residue sequences, 8 MiB, the research \
                    simulator's input), large (20480 residues, 3.1 GiB), or a sequence \
                    length (a multiple of 16, 16 to 32768)";
/// Int size.
const INT_BYTES: u64 = 4;
/// Threads per block and tile side (`BLOCK_SIZE` in `needle.h`).
const BLOCK: u64 = 16;
/// Lanes of the warp holding one block's 16 threads.
const LANES_PER_BLOCK: u64 = 32;
/// Bytes moved per block (module doc): 16 reference pieces of 47/32 lines; 16 west
/// elements of a line and the corner with the north row in 3/2 lines; 16 pieces written
/// in 23/8 sectors.
const REFERENCE_READ_BYTES: u64 = BLOCK * 47 * READ_LINE_BYTES / 32;
const ITEMSETS_READ_BYTES: u64 = BLOCK * READ_LINE_BYTES + 3 * READ_LINE_BYTES / 2;
const ITEMSETS_WRITE_BYTES: u64 = BLOCK * 23 * WRITE_SECTOR_BYTES / 8;
const _: () = assert!(
    REFERENCE_READ_BYTES == 3008 && ITEMSETS_READ_BYTES == 2240 && ITEMSETS_WRITE_BYTES == 1472
);
/// Instructions per lane (module doc): setup, per element loaded, per anti-diagonal
/// step and per row stored.
const SETUP_OPS: u64 = 20;
const LOAD_OPS: u64 = 3;
const STEP_OPS: u64 = 20;
const STORE_OPS: u64 = 4;
const OPS_PER_LANE: u64 =
    SETUP_OPS + (BLOCK + 3) * LOAD_OPS + (2 * BLOCK - 1) * STEP_OPS + BLOCK * STORE_OPS;
/// The run script's sequence length.
const UVMSMART_LENGTH: u64 = 1024;
/// Two 1.56 GiB matrices.
const LARGE_LENGTH: u64 = 20_480;
/// Two 4 GiB matrices; the real kernels' int indices hold (n + 1)^2 up to 46340.
const MAX_LENGTH: u64 = 32_768;

impl AppModel for Nw {
    fn name(&self) -> &'static str {
        "nw"
    }

    fn description(&self) -> &'static str {
        "Rodinia nw: Needleman-Wunsch alignment, an anti-diagonal wavefront of 16 x 16 blocks"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        let length = parse_size(
            self.name(),
            HELP,
            size,
            &workload_sizes(UVMSMART_LENGTH, LARGE_LENGTH),
            |n| {
                if n == 0 || !n.is_multiple_of(BLOCK) || n > MAX_LENGTH {
                    Err(format!(
                        "length {n} is not a multiple of 16 between 16 and {MAX_LENGTH}"
                    ))
                } else {
                    Ok(n)
                }
            },
        )?;
        Ok(program(length, repeat))
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Mixed)
    }
}

/// An access to whole matrix rows `first..first + rows` (rows of `row_bytes`), in
/// random order.
fn rows(slot: usize, read: u64, write: u64, first: u64, rows: u64, row_bytes: u64) -> Access {
    Access {
        slot,
        read_bytes: read,
        reread_bytes: 0,
        write_bytes: write,
        rewrite_bytes: 0,
        distribution: Distribution::Ranges(vec![WeightedRange {
            offset_bytes: first * row_bytes,
            bytes: rows * row_bytes,
            weight: 1.0,
        }]),
        order: AccessOrder::Random,
    }
}

fn program(length: u64, repeat: u32) -> Program {
    let mut p = Program::default();
    let side = length + 1;
    let row_bytes = side * INT_BYTES;
    let bytes = side * row_bytes;
    let reference = p.buffer("reference", bytes);
    let itemsets = p.buffer("itemsets", bytes);
    let width = length / BLOCK;

    // A launch of `blocks` blocks on block rows `first..first + blocks`: the tiles
    // cover matrix rows 16 first + 1 ..= 16 (first + blocks), and the north rows reach
    // one row higher.
    let launch = |name: &str, blocks: u64, first: u64| {
        Op::Launch(Kernel {
            name: name.into(),
            ops: blocks * LANES_PER_BLOCK * OPS_PER_LANE,
            accesses: vec![
                rows(
                    reference,
                    blocks * REFERENCE_READ_BYTES,
                    0,
                    BLOCK * first + 1,
                    BLOCK * blocks,
                    row_bytes,
                ),
                rows(
                    itemsets,
                    blocks * ITEMSETS_READ_BYTES,
                    blocks * ITEMSETS_WRITE_BYTES,
                    BLOCK * first,
                    BLOCK * blocks + 1,
                    row_bytes,
                ),
            ],
            phases: Vec::new(),
            outer_loop: Default::default(),
        })
    };
    let mut body: Vec<Op> = (1..=width)
        .map(|i| launch("needle_cuda_shared_1", i, 0))
        .collect();
    body.extend(
        (1..width)
            .rev()
            .map(|i| launch("needle_cuda_shared_2", i, width - i)),
    );
    body.push(Op::Sync);

    let setup = vec![
        Op::Alloc(reference),
        Op::Alloc(itemsets),
        h2d(reference, bytes),
        h2d(itemsets, bytes),
    ];
    let teardown = vec![
        d2h(itemsets, bytes),
        Op::Free(reference),
        Op::Free(itemsets),
    ];
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, launches, mib, phase_body, rejects, traffic};

    /// The ranges (first byte, bytes) and order of each launch's accesses to `slot`.
    fn reach(program: &Program, slot: usize) -> Vec<(u64, u64, AccessOrder)> {
        phase_body(program, 1)
            .iter()
            .filter_map(|op| match op {
                Op::Launch(k) => k.accesses.iter().find(|a| a.slot == slot),
                _ => None,
            })
            .map(|a| match &a.distribution {
                Distribution::Ranges(r) => (r[0].offset_bytes, r[0].bytes, a.order),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn default_is_the_research_simulators_input() {
        let p = check_app(&Nw, "default");
        assert_eq!(p.peak_allocated_bytes(), 2 * 1025 * 1025 * 4);
        let footprint = mib(&p);
        assert!((footprint / 8.125 - 1.0).abs() < 0.02, "{footprint}");
        assert_eq!(launches(phase_body(&p, 1)), 127);
        assert_eq!(p, Nw.program("uvmsmart", 1, gtx480()).unwrap());
        assert_eq!(Nw.pattern_class(), Some(PatternClass::Mixed));
        let large = mib(&check_app(&Nw, "large")) / 1024.0;
        assert!((2.0..8.0).contains(&large), "{large} GiB");
    }

    #[test]
    fn every_block_runs_once_and_moves_its_tile() {
        let p = Nw.program("default", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        let blocks = 64 * 64;
        let t = traffic(body, 2);
        assert_eq!(t[0], (blocks * 3008, 0));
        assert_eq!(t[1], (blocks * 2240, blocks * 1472));
        // The isolated row pieces make the reference move about three times its size.
        let ratio = t[0].0 as f64 / p.buffers[0].bytes as f64;
        assert!((2.8..3.0).contains(&ratio), "{ratio}");
        let ops: u64 = body
            .iter()
            .map(|op| match op {
                Op::Launch(k) => k.ops,
                _ => 0,
            })
            .sum();
        assert_eq!(ops, blocks * 32 * 761);
    }

    #[test]
    fn the_wavefront_grows_then_shrinks_over_the_rows() {
        let p = Nw.program("default", 1, gtx480()).unwrap();
        let row = 1025 * 4;
        let reference = reach(&p, 0);
        assert_eq!(reference.len(), 127);
        assert!(reference.iter().all(|r| r.2 == AccessOrder::Random));
        // The first launch's one block: rows 1..=16; the widest: every row but row 0;
        // the last: the bottom 16 rows.
        assert_eq!(reference[0], (row, 16 * row, AccessOrder::Random));
        assert_eq!(reference[63], (row, 1024 * row, AccessOrder::Random));
        assert_eq!(reference[126], (1009 * row, 16 * row, AccessOrder::Random));
        // Each launch's range ends where the previous one does or starts where it does:
        // the same pages come back launch after launch.
        for pair in reference.windows(2) {
            let ((a, la, _), (b, lb, _)) = (pair[0], pair[1]);
            assert!(a == b || a + la == b + lb, "{pair:?}");
        }
        // The score matrix's range adds the north row above the tiles.
        let itemsets = reach(&p, 1);
        assert_eq!(itemsets[0].0, 0);
        assert_eq!(itemsets[0].1, 17 * row);
        assert_eq!(itemsets[126].0 + itemsets[126].1, p.buffers[1].bytes);
    }

    #[test]
    fn launches_follow_the_block_count() {
        for (length, expected) in [(16, 1), (32, 3), (2048, 255)] {
            let p = Nw.program(&length.to_string(), 1, gtx480()).unwrap();
            assert_eq!(launches(phase_body(&p, 1)), expected, "{length}");
        }
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Nw, "0", "multiple of 16");
        rejects(&Nw, "1000", "multiple of 16");
        rejects(&Nw, "32784", "multiple of 16");
        rejects(&Nw, "1024x1024", "not a size");
    }
}
