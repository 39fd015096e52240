//! Rodinia `bfs`: breadth-first search from node 0 of a random graph, one level per
//! pair of kernels.
//!
//! # The real program (Rodinia 3.1, `cuda/bfs`)
//! The input generator gives every node 2-4 undirected edges to random nodes and stores
//! each edge in both directions, so a graph of N nodes has about E = 6N directed edges
//! and mean degree 6 (`spec/apps.md`). Buffers, in allocation order: `nodes` ({start,
//! degree}, 8N), `edges` (4E), `mask`, `updating_mask`, `visited` (1 B x N each), `cost`
//! (4N), `over` (1 B): 39N + 1 bytes, 2.56 MB at 65536 nodes, 39 MB at 1M. Every array is
//! copied H2D after its allocation (the setup).
//!
//! Per level: H2D of `over` (1 B); `Kernel` (one thread per node: reads `mask`; a
//! frontier node clears its mask, reads its node record and its contiguous run of
//! edges, reads `visited` of each neighbour (random) and, for unvisited ones, writes
//! `cost` and `updating_mask` (random)); `Kernel2` (one thread per node: reads
//! `updating_mask`; a newly reached node sets `mask` and `visited`, clears
//! `updating_mask` and sets `over`); D2H of `over` (1 B, synchronous) decides whether to
//! go on. The cost array goes D2H at the end.
//!
//! # Levels (derived)
//! Frontier sizes follow the mean-field recurrence of a random graph with mean degree
//! d = 6: with `V_k` nodes reached before level k and frontier `f_k`, level k reaches
//! `f_{k+1} = (N - V_k)(1 - exp(-d f_k / N))` new nodes; the search stops after the
//! first level that reaches fewer than half a node. That gives 11 levels at 65536 nodes
//! (the "~10 levels" of `spec/apps.md`), 13 at 1M and 14 at 4M, with 99.7 % of the nodes
//! reached. The program does one traversal; the model's phase body is one traversal, the
//! same one every repetition (the real state would need a reset between traversals,
//! whose copies the model leaves out as the real program never makes them).
//!
//! # Traffic per level (derived, see the conventions in [`super`])
//! Frontier nodes sit at random places, so their accesses are isolated ones spread over
//! the buffer: reads move 128-byte lines, writes 32-byte sectors. Accesses at the
//! threads' own nodes come in address order and move each line once
//! ([`scattered_bytes`]); accesses at neighbours come in random order and move a line
//! again when the device's L2 no longer holds it ([`DeviceShape::random_bytes`]).
//! - `Kernel`: `mask` read in full (N) and `f_k` clears; `nodes` `f_k` isolated reads;
//!   `edges` one run of 6 x 4 = 24 B per frontier node, which spans two lines with
//!   probability 20/128; `visited` `6 f_k` random reads; `cost` `f_k` reads of the
//!   node's own cost and `u_k = 6 f_k (1 - V_k/N)` random writes at neighbours not
//!   visited when the level starts (`visited` changes only in `Kernel2`, so a node
//!   reached from several frontier nodes is written by each); `updating_mask` the same
//!   `u_k` random writes.
//! - `Kernel2`: `updating_mask` read in full and `f_{k+1}` clears; `mask`, `visited`
//!   `f_{k+1}` writes each; `over` one write per warp that holds a reached node (threads
//!   of one warp writing one address merge, warps do not).
//!
//! Over a traversal the N-byte flag arrays are scanned once per level (about 14 reads
//! per byte at 4M nodes) while `nodes` and `edges` are read about once per line per
//! level that has a frontier large enough to touch them: the two large buffers get few
//! accesses per page, the small ones many, as in the GPUswap profiles.
//!
//! That is the mixed class of the adaptive unified-memory paper
//! (`../shared/spec/uvm-adaptive.md`): the flag arrays are linear ranges re-read every
//! level, `visited`, `cost` and `updating_mask` take data-dependent touches in random
//! order, and `nodes` and `edges` sparse ones in address order.
//!
//! # Sizes
//! `default` is at the GPUswap evaluation's scale (4M nodes). `uvmsmart` is the input of
//! the managed-memory version in GPGPU-Sim UVM Smart (`benchmarks/Managed/bfs`, run on
//! `graph256k`): 262144 nodes, 9.75 MiB, the 9.75 MB of `spec/uvm-driver.md`. That
//! version allocates the six arrays managed and copies none of them (the host fills
//! them in place), and keeps `over` in device memory; the model keeps Rodinia's copies.
//! `large` is the unified-memory study's large input, 2^26 nodes (2.44 GiB).
//!
//! For the PILOT study (`../shared/spec/pilot.md`, one of its ten benchmarks) `small`
//! and `medium` are the inputs whose buffers take the memory of its table, 39 MB and
//! 1 GB (read in binary units, as the hs3d and lavamd tables must be): 2^20 nodes, the
//! 39 MiB of Rodinia's `graph1M` (0.00 % off), and 27 525 120 nodes (420 x 2^16,
//! 1023.75 MiB, 0.02 % under 1 GiB). Its 4.9 GB large input is the number 134217728
//! (2^27 nodes, 4.875 GiB, 0.5 % under 4.9 GiB), the largest graph accepted: the name
//! `large` keeps the unified-memory study's input.
//!
//! # Compute
//! `Kernel`: about 10 instructions per thread for the mask test, plus, in every warp
//! holding a frontier node, 32 lanes x (12 instructions of setup + 6 edges x 12 for the
//! visited test and the writes): SIMT runs the whole warp through the loop. `Kernel2`:
//! about 8 per thread plus 8 per reached node. Both come out memory bound on the GTX 480
//! model, as BFS is.

use super::common::{
    READ_LINE_BYTES, WRITE_SECTOR_BYTES, d2h, h2d, isolated_bytes, parse_size, phased,
    random_access, uniform, within,
};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::{DeviceShape, scattered_bytes};
use crate::program::{AccessOrder, Kernel, Op, OuterLoop, Program};

/// The bfs app.
pub struct Bfs;

const HELP: &str = "default (4194304 nodes, 156 MiB), rodinia (graph65536, 2.5 MB), \
                    uvmsmart (graph256k: 262144 nodes, 9.75 MiB, the research simulator's \
                    input), large (67108864 nodes, 2.44 GiB), small (1048576 nodes, 39 MiB, \
                    PILOT's 39 MB), medium (27525120 nodes, 1 GiB, PILOT's 1 GB), or a \
                    number of nodes (16 to 134217728; PILOT's 4.9 GB is 134217728)";
/// Mean directed edges per node: 2-4 undirected edges initiated per node (mean 3),
/// stored in both directions.
const DEGREE: u64 = 6;
/// The size `large`: 2.6 GB of buffers.
const LARGE_NODES: u64 = 1 << 26;
/// PILOT's small and medium inputs (module doc).
const SMALL_NODES: u64 = 1 << 20;
const MEDIUM_NODES: u64 = 420 << 16;
/// Largest graph accepted, PILOT's large input: 5.2 GB of buffers.
const MAX_NODES: u64 = 1 << 27;
/// Instructions per thread for the mask test of both kernels.
const SCAN_OPS_PER_THREAD: u64 = 10;
/// Instructions per lane of a warp with a frontier node: setup plus 6 edges x 12.
const FRONTIER_OPS_PER_LANE: u64 = 12 + DEGREE * 12;
/// Instructions of `Kernel2` per reached node.
const REACH_OPS_PER_NODE: u64 = 8;
/// Threads per warp.
const WARP: f64 = 32.0;

impl AppModel for Bfs {
    fn name(&self) -> &'static str {
        "bfs"
    }

    fn description(&self) -> &'static str {
        "Rodinia bfs: level-synchronous breadth-first search of a random graph with mean degree 6"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = [
            ("default", 1 << 22),
            ("rodinia", 65_536),
            ("uvmsmart", 1 << 18),
            ("large", LARGE_NODES),
            ("small", SMALL_NODES),
            ("medium", MEDIUM_NODES),
        ];
        let nodes = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, 16..=MAX_NODES, format!("{n} nodes"))
        })?;
        Ok(program(nodes, repeat, device))
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Mixed)
    }
}

/// One level of the traversal: how many nodes it expands and reaches.
#[derive(Clone, Copy, Debug)]
struct Level {
    /// Nodes in the frontier (`f_k`).
    frontier: f64,
    /// Nodes reached for the first time (`f_{k+1}`).
    reached: f64,
    /// Writes at unvisited neighbours (`u_k`).
    neighbour_writes: f64,
}

/// The levels of one traversal of a graph of `nodes` nodes (see the module doc).
fn levels(nodes: u64) -> Vec<Level> {
    let n = nodes as f64;
    let d = DEGREE as f64;
    let (mut visited, mut frontier) = (1.0, 1.0);
    let mut out = Vec::new();
    loop {
        let reached = (n - visited) * (1.0 - (-d * frontier / n).exp());
        let reached = if reached < 0.5 { 0.0 } else { reached };
        out.push(Level {
            frontier,
            reached,
            neighbour_writes: d * frontier * (1.0 - visited / n),
        });
        if reached == 0.0 {
            return out;
        }
        visited += reached;
        frontier = reached;
    }
}

fn program(nodes: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let n = nodes;
    let slots = [
        p.buffer("nodes", 8 * n),
        p.buffer("edges", 4 * DEGREE * n),
        p.buffer("mask", n),
        p.buffer("updating_mask", n),
        p.buffer("visited", n),
        p.buffer("cost", 4 * n),
    ];
    let [node_slot, edge_slot, mask, updating, visited, cost] = slots;
    let over = p.buffer("over", 1);
    let size = |slot: usize| p.buffers[slot].bytes;
    let read = |slot: usize, accesses: f64| scattered_bytes(size(slot), accesses, READ_LINE_BYTES);
    let write =
        |slot: usize, accesses: f64| scattered_bytes(size(slot), accesses, WRITE_SECTOR_BYTES);
    let random_write =
        |slot: usize, accesses: f64| device.random_bytes(size(slot), accesses, WRITE_SECTOR_BYTES);
    // A 24-byte edge run at a 4-byte-aligned place spans two 128-byte lines when it
    // starts in the last 20 bytes of one.
    let lines_per_run = 1.0 + (4 * DEGREE - 4) as f64 / READ_LINE_BYTES as f64;

    let mut body = Vec::new();
    for level in levels(n) {
        let (f, reached, u) = (level.frontier, level.reached, level.neighbour_writes);
        let warps = n as f64 / WARP;
        let busy_warps = warps * (1.0 - (1.0 - f / n as f64).powf(WARP));
        // The threads of busy warps walk their edges in lockstep: a warp makes about
        // DEGREE trips of the edge loop, PILOT's checked loop.
        let looping = (busy_warps * WARP).round() as u64;
        let expand = Kernel {
            name: "Kernel".into(),
            ops: n * SCAN_OPS_PER_THREAD
                + (busy_warps * WARP * FRONTIER_OPS_PER_LANE as f64).round() as u64,
            accesses: vec![
                uniform(mask, n, write(mask, f), AccessOrder::Linear),
                uniform(node_slot, read(node_slot, f), 0, AccessOrder::Linear),
                uniform(
                    edge_slot,
                    read(edge_slot, f * lines_per_run),
                    0,
                    AccessOrder::Linear,
                ),
                random_access(device, visited, size(visited), (DEGREE as f64 * f, 0.0)),
                uniform(
                    cost,
                    read(cost, f),
                    random_write(cost, u),
                    AccessOrder::Random,
                )
                .written_before_l2(isolated_bytes(u, WRITE_SECTOR_BYTES)),
                random_access(device, updating, size(updating), (0.0, u)),
            ],
            phases: Vec::new(),
            outer_loop: OuterLoop::uniform(looping, DEGREE),
        };
        let mut settle = Kernel {
            name: "Kernel2".into(),
            ops: n * SCAN_OPS_PER_THREAD + (reached * REACH_OPS_PER_NODE as f64).round() as u64,
            accesses: vec![
                uniform(updating, n, write(updating, reached), AccessOrder::Linear),
                uniform(mask, 0, write(mask, reached), AccessOrder::Linear),
                uniform(visited, 0, write(visited, reached), AccessOrder::Linear),
            ],
            phases: Vec::new(),
            outer_loop: Default::default(),
        };
        if reached > 0.0 {
            let reaching_warps = warps * (1.0 - (1.0 - reached / n as f64).powf(WARP));
            let flag_bytes = (reaching_warps.max(1.0) * WRITE_SECTOR_BYTES as f64).round();
            settle
                .accesses
                .push(uniform(over, 0, flag_bytes as u64, AccessOrder::Linear));
        }
        body.extend([
            h2d(over, 1),
            Op::Launch(expand),
            Op::Launch(settle),
            d2h(over, 1),
        ]);
    }

    let mut setup = Vec::new();
    for slot in slots {
        setup.extend([Op::Alloc(slot), h2d(slot, size(slot))]);
    }
    setup.push(Op::Alloc(over));
    let mut teardown = vec![d2h(cost, size(cost))];
    teardown.extend(slots.iter().chain([&over]).map(|&s| Op::Free(s)));
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::assert_pilot_memory;
    use crate::apps::testing::{
        check_app, gtx480, launches, mib, order_of, per_byte, phase_body, phase_kernels, rejects,
    };

    #[test]
    fn footprint_is_39_bytes_per_node() {
        let p = check_app(&Bfs, "rodinia");
        assert_eq!(p.peak_allocated_bytes(), 39 * 65_536 + 1);
        let p = check_app(&Bfs, "default");
        assert_eq!(p.peak_allocated_bytes(), 39 * (1 << 22) + 1);
        assert!((150.0..160.0).contains(&mib(&p)));
    }

    #[test]
    fn uvmsmart_is_graph256k_and_large_is_gibibytes() {
        let p = check_app(&Bfs, "uvmsmart");
        assert_eq!(
            mib(&p),
            9.75 + 1.0 / f64::from(1 << 20),
            "9.75 MiB and `over`"
        );
        let large = mib(&check_app(&Bfs, "large")) / 1024.0;
        assert!((2.0..=8.0).contains(&large), "{large} GiB");
        assert_eq!(Bfs.pattern_class(), Some(PatternClass::Mixed));
    }

    #[test]
    fn flags_are_rescanned_linearly_neighbours_touched_at_random() {
        let p = Bfs.program("uvmsmart", 1, gtx480()).unwrap();
        let kernels = phase_kernels(&p);
        let order = |k: &Kernel, label: &str| order_of(&p, k, label);
        for pair in kernels.chunks(2) {
            let (expand, settle) = (pair[0], pair[1]);
            // Both kernels scan a flag array in full every level.
            assert_eq!(order(expand, "mask"), Some(AccessOrder::Linear));
            assert_eq!(order(settle, "updating_mask"), Some(AccessOrder::Linear));
            // The gathers and scatters at neighbours are data-dependent.
            for label in ["visited", "cost", "updating_mask"] {
                assert_eq!(order(expand, label), Some(AccessOrder::Random), "{label}");
            }
        }
    }

    #[test]
    fn traversal_depth_grows_with_the_logarithm_of_the_graph() {
        let depth = |n| levels(n).len();
        assert_eq!(depth(65_536), 11);
        assert_eq!(depth(1 << 20), 13);
        assert_eq!(depth(1 << 22), 14);
        let p = Bfs.program("rodinia", 1, gtx480()).unwrap();
        assert_eq!(launches(phase_body(&p, 1)), 22);
        // Nearly every node is reached once: the giant component of a degree-6 graph.
        let reached: f64 = 1.0 + levels(1 << 20).iter().map(|l| l.reached).sum::<f64>();
        assert!(
            (0.99..1.0).contains(&(reached / f64::from(1 << 20))),
            "{reached}"
        );
    }

    #[test]
    fn large_buffers_get_few_accesses_per_page_small_ones_many() {
        let p = Bfs.program("default", 1, gtx480()).unwrap();
        let density = per_byte(&p, 1);
        let (nodes, edges) = (density[0], density[1]);
        for (small, buffer) in density[2..6].iter().zip(&p.buffers[2..6]) {
            assert!(
                *small > 1.5 * nodes.max(edges),
                "{}: {small} vs nodes {nodes}, edges {edges}",
                buffer.label,
            );
        }
        // The flag arrays are scanned once per level.
        assert!(density[2] > 14.0 && density[3] > 14.0, "{density:?}");
        assert!(nodes < 5.0 && edges < 5.0, "{density:?}");
    }

    #[test]
    fn every_level_copies_the_flag_both_ways() {
        let p = Bfs.program("rodinia", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        let copies = body
            .iter()
            .filter(|op| matches!(op, Op::Copy { bytes: 1, .. }))
            .count();
        assert_eq!(copies, 2 * levels(65_536).len());
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Bfs, "8", "16 to");
        rejects(&Bfs, "200000000", "16 to");
        rejects(&Bfs, "graph1M", "not a size");
    }

    #[test]
    fn pilot_sizes_take_the_memory_of_its_table() {
        assert_pilot_memory(&Bfs, &[("small", 39.0), ("medium", 1024.0)], 1e-3);
        // PILOT's large input goes by number: `large` is the unified-memory study's.
        assert_pilot_memory(&Bfs, &[("134217728", 4.9 * 1024.0)], 0.01);
        assert_eq!(
            check_app(&Bfs, "large").peak_allocated_bytes(),
            39 * (1 << 26) + 1
        );
    }
}
