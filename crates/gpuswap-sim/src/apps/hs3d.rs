//! Rodinia `hotspot3D` (PILOT's `hs3d`): transient thermal simulation of a chip stacked
//! in layers, a seven-point stencil on an N x N x L grid; one of the ten benchmarks of
//! the PILOT study (`../shared/spec/pilot.md`), where it is an iterative app.
//!
//! # The real program (Rodinia 3.1, `cuda/hotspot3D/3D.cu` and `opt1.cu`)
//! The command line gives the rows (= columns) N, the layers L, the iterations and three
//! files; the run script uses N = 512, L = 8 and 100 iterations. Device buffers, float
//! N^2 L each, in allocation order: `p_d` (power), `tIn_d`, `tOut_d` (temperature,
//! ping-pong); layer z holds cells `x + N y + N^2 z`. Copies: H2D of the temperature
//! and the power once. Each iteration launches `hotspotOpt1` on a grid of (N / 64) x
//! (N / 4) blocks of 64 x 4 threads, one thread per column (x, y) of the chip; the host
//! swaps the two temperature pointers after each launch and synchronizes once after the
//! last. Each thread walks its column from the bottom layer to the top: per layer it
//! reads the temperature of its cell and of its four in-layer neighbours (clamped to
//! the cell at the grid's edges), the cell above (kept in registers as the next layer's
//! centre) and its power, and writes the new temperature. After the loop the program
//! copies `tOut_d` back, which after the last swap is the previous iteration's result,
//! not the last one (a slip of the original); the model copies what the program copies.
//! The grid covers only whole 64 x 4 tiles, so the model takes sides that are multiples
//! of 64. The phase body is the 100 launches, alternating source and destination; an
//! even count, so every repetition starts from the same buffer as a run with `repeat`
//! times the iterations would, and the final copy is always from `tOut_d`.
//!
//! # Sizes
//! PILOT's table lists 48 MB, 768 MB and 3 GB (binary units: lavaMD's 936 MB is
//! 936.5 MiB) without the inputs. The model keeps the run script's 8 layers and 100
//! iterations and scales the side, a multiple of 64: 12 x 8 N^2 bytes.
//! - `small`: N = 704, 45.4 MiB (5.5 % under 48 MiB, 0.9 % under 48e6 bytes);
//! - `medium` and `default`: N = 2880, 759.4 MiB (1.1 % under 768 MiB);
//! - `large`: N = 5760, 2.97 GiB (1.1 % under 3 GiB);
//! - `rodinia`: the run script's N = 512, 24 MiB.
//!
//! (16 layers at N = 512, 2048 and 4096 would give the table's figures exactly; nothing
//! says PILOT used them.) A plain number is the side N (64 to 16320: the program's `int`
//! cell indices overflow at N^2 L = 2^31).
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! A warp is 32 consecutive cells of one row, so every access is a coalesced row
//! segment. Counted per block and layer, the source temperature is read over the block's
//! 64 x 4 cells plus the halo its neighbour reads reach: one column each side of its
//! four rows and one row of 64 above and below, less what falls outside the grid
//! ([`loaded_per_layer`]): N^2 + 2 N (N/64 - 1) + 2 N (N/4 - 1) elements per layer, about
//! 1.53 N^2. The cell above is the next layer's centre, loaded once per layer. The power
//! is read and the destination written once per cell: 4 N^2 L bytes each. The blocks
//! resident at once cover a few rows of the grid and walk up through the L layers
//! together, so each buffer's pages are touched a few rows in each layer in turn, then
//! the next rows: `Strided` by one layer (4 N^2 bytes), eight interleaved streams where
//! hotspot has one. That is the irregularity PILOT sees in hs3d under oversubscription.
//! The timing model then charges remote writes as isolated 32-byte sectors, where each
//! warp's store is a coalesced 128-byte line: under remote access (host-pinned pages)
//! the model overstates the destination's write transactions up to 4x.
//!
//! # Compute
//! About 20 instructions per thread of setup (indices, the four clamps, the first
//! loads) and 30 per layer (six loads, a store, nine multiply-adds, five address
//! increments and the loop test): 260 per thread at 8 layers, against about 14 bytes
//! moved per cell and layer: about 2.3 instructions per byte where the GTX 480 model
//! balances at 3.8, so `hotspotOpt1` is memory bound.

use super::common::{d2h, h2d, parse_size, phased, pilot_rodinia_sizes, uniform, within};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, OuterLoop, Program};

/// The hs3d app.
pub struct Hs3d;

const HELP: &str = "default or medium (a 2880 x 2880 x 8 grid, 759 MiB), small (704 x 704 x 8, \
                    45 MiB), large (5760 x 5760 x 8, 2.97 GiB), rodinia (512 x 512 x 8, 24 MiB), \
                    or a grid side (a multiple of 64, 64 to 16320); always 8 layers and 100 \
                    iterations";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// Threads per block along a row (x) and down a column (y).
const BLOCK_X: u64 = 64;
const BLOCK_Y: u64 = 4;
/// Layers and iterations of the run script, at every size.
const LAYERS: u64 = 8;
const ITERATIONS: u64 = 100;
// Whole ping-pong pairs: every repetition starts from the same buffer.
const _: () = assert!(ITERATIONS.is_multiple_of(2));
/// The sides of the named sizes (module doc).
const RODINIA_SIDE: u64 = 512;
const SMALL_SIDE: u64 = 704;
const MEDIUM_SIDE: u64 = 2880;
const LARGE_SIDE: u64 = 5760;
/// Accepted sides: one block across at least; below 2^31 cells (the program's `int`
/// indices), 23.8 GiB of buffers.
const MIN_SIDE: u64 = BLOCK_X;
const MAX_SIDE: u64 = 16_320;
/// Instructions per thread: setup, and per layer (module doc).
const SETUP_OPS: u64 = 20;
const LAYER_OPS: u64 = 30;

impl AppModel for Hs3d {
    fn name(&self) -> &'static str {
        "hs3d"
    }

    fn description(&self) -> &'static str {
        "Rodinia hotspot3D: thermal stencil on a layered grid, each thread walking a column up the layers"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        let named = pilot_rodinia_sizes(SMALL_SIDE, MEDIUM_SIDE, LARGE_SIDE, RODINIA_SIDE);
        let side = parse_size(self.name(), HELP, size, &named, |n| {
            let what = format!("a {n} x {n} x {LAYERS} grid");
            let n = within(n, MIN_SIDE..=MAX_SIDE, what)?;
            if n.is_multiple_of(BLOCK_X) {
                Ok(n)
            } else {
                Err(format!(
                    "side {n} is not a multiple of {BLOCK_X} (the kernel's blocks are \
                     {BLOCK_X} x {BLOCK_Y} threads)"
                ))
            }
        })?;
        Ok(program(side, repeat))
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["hotspot3D"]
    }

    /// PILOT's table: 75 % of the SMs.
    fn sm_utilization(&self) -> f64 {
        0.75
    }
}

/// Source-temperature elements all blocks load from one layer of a `side` x `side`
/// grid: each block's 64 x 4 cells, one column either side of its rows and one row of
/// 64 above and below it, where those lie inside the grid.
fn loaded_per_layer(side: u64) -> u64 {
    let (blocks_x, blocks_y) = (side / BLOCK_X, side / BLOCK_Y);
    side * side + 2 * side * (blocks_x - 1) + 2 * side * (blocks_y - 1)
}

fn program(side: u64, repeat: u32) -> Program {
    let mut p = Program::default();
    let layer = side * side * FLOAT_BYTES;
    let bytes = layer * LAYERS;
    let power = p.buffer("power", bytes);
    let temp = [p.buffer("temp_in", bytes), p.buffer("temp_out", bytes)];

    let order = AccessOrder::Strided {
        stride_bytes: layer,
    };
    let read = loaded_per_layer(side) * LAYERS * FLOAT_BYTES;
    let ops = side * side * (SETUP_OPS + LAYERS * LAYER_OPS);
    let launch = |from: usize| {
        Op::Launch(Kernel {
            name: "hotspotOpt1".into(),
            ops,
            accesses: vec![
                uniform(power, bytes, 0, order),
                uniform(temp[from], read, 0, order),
                uniform(temp[1 - from], 0, bytes, order),
            ],
            phases: Vec::new(),
            outer_loop: OuterLoop::uniform(side * side, LAYERS),
        })
    };
    let body = (0..ITERATIONS).map(|i| launch((i % 2) as usize)).collect();

    let setup = vec![
        Op::Alloc(power),
        Op::Alloc(temp[0]),
        Op::Alloc(temp[1]),
        h2d(temp[0], bytes),
        h2d(power, bytes),
    ];
    // After an even number of swaps `tOut_d` is the buffer it was at the start.
    let teardown = vec![
        d2h(temp[1], bytes),
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
    use crate::apps::testing::{
        check_app, gtx480, launches, mib, ops_per_byte, phase_body, phase_kernels, rejects, traffic,
    };
    use crate::program::CopyDirection;

    #[test]
    fn named_sizes_match_pilots_table_within_10_percent() {
        for (size, table_mib) in [("small", 48.0), ("medium", 768.0), ("large", 3072.0)] {
            let footprint = mib(&check_app(&Hs3d, size));
            let error = footprint / table_mib - 1.0;
            assert!(error.abs() < 0.1, "{size}: {footprint} MiB, {error:+.3}");
        }
        assert_eq!(mib(&check_app(&Hs3d, "small")), 45.375);
        assert_eq!(
            check_app(&Hs3d, "default"),
            check_app(&Hs3d, "medium"),
            "default is medium"
        );
        assert_eq!(mib(&check_app(&Hs3d, "rodinia")), 24.0, "512 x 512 x 8");
        assert_eq!(Hs3d.pattern_class(), None);
    }

    #[test]
    fn a_hundred_launches_ping_pong_and_the_program_copies_tout_back() {
        let p = Hs3d.program("rodinia", 3, gtx480()).unwrap();
        let body = phase_body(&p, 3);
        assert_eq!(launches(body), 100);
        let once = check_app(&Hs3d, "rodinia");
        let ks = phase_kernels(&once);
        // Launch i reads temp_in (slot 1) when i is even, temp_out (slot 2) when odd, and
        // writes the other.
        let source_and_destination = |k: &Kernel| {
            let read = k.accesses.iter().find(|a| a.read_bytes > 0 && a.slot != 0);
            let written = k.accesses.iter().find(|a| a.write_bytes > 0);
            (read.unwrap().slot, written.unwrap().slot)
        };
        assert_eq!(source_and_destination(ks[0]), (1, 2));
        assert_eq!(source_and_destination(ks[1]), (2, 1));
        assert_eq!(source_and_destination(ks[99]), (2, 1));
        let copied_back: Vec<_> = p
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Copy {
                    slot,
                    direction: CopyDirection::DeviceToHost,
                    ..
                } => Some(*slot),
                _ => None,
            })
            .collect();
        assert_eq!(copied_back, [2], "tOut_d, whatever the repeat");
    }

    #[test]
    fn traffic_by_hand_on_a_128_grid() {
        // 128 x 128 x 8: blocks of 64 x 4, 2 across and 32 down. Per layer the blocks
        // load 128^2 cells, 2 x 128 x (2 - 1) halo columns and 2 x 128 x (32 - 1) halo
        // row elements: 16384 + 256 + 7936 = 24576, 1.5 times the layer.
        assert_eq!(loaded_per_layer(128), 24_576);
        // One block across: no halo columns; 16 down.
        assert_eq!(loaded_per_layer(64), 64 * 64 + 2 * 64 * 15);
        let p = Hs3d.program("128", 1, gtx480()).unwrap();
        let cells = 128 * 128 * 8;
        let per_launch_read = 24_576 * 8 * 4;
        // Over the 100 launches each temperature buffer is the source 50 times and the
        // destination 50 times; the power is read by every launch.
        let sums = traffic(phase_body(&p, 1), 3);
        assert_eq!(sums[0], (100 * cells * 4, 0));
        assert_eq!(sums[1], (50 * per_launch_read, 50 * cells * 4));
        assert_eq!(sums[2], sums[1]);
        // Instructions: 20 + 8 x 30 per thread, a thread per column.
        let k = phase_kernels(&p)[0];
        assert_eq!(k.ops, 128 * 128 * 260);
    }

    #[test]
    fn every_buffer_is_walked_a_layer_apart() {
        let p = check_app(&Hs3d, "medium");
        let layer = 2880 * 2880 * 4;
        for k in phase_kernels(&p) {
            assert_eq!(k.accesses.len(), 3);
            for a in &k.accesses {
                assert_eq!(
                    a.order,
                    AccessOrder::Strided {
                        stride_bytes: layer
                    }
                );
            }
        }
    }

    #[test]
    fn memory_bound_by_the_per_thread_estimate() {
        let p = Hs3d.program("default", 1, gtx480()).unwrap();
        let k = phase_kernels(&p)[0];
        let ratio = ops_per_byte(k) * 177.4e9 / 672e9;
        assert!((0.4..0.8).contains(&ratio), "{ratio}");
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Hs3d, "32", "64 to 16320");
        rejects(&Hs3d, "16384", "64 to 16320");
        rejects(&Hs3d, "1000", "not a multiple of 64");
        rejects(&Hs3d, "2880x8", "not a size");
        rejects(&Hs3d, "huge", "not a size");
    }
}
