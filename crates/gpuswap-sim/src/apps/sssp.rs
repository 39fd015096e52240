//! `sssp`: single-source shortest paths on a random graph by iterated edge relaxation
//! (Bellman-Ford over a frontier, relaxing with atomic minimums), the managed-memory
//! version of GPGPU-Sim UVM Smart (`benchmarks/Managed/sssp`), a mixed-class workload of
//! the adaptive unified-memory paper (`../shared/spec/uvm-adaptive.md`).
//!
//! # The real program
//! The host builds a graph of V vertices in CSR form, each vertex with d = 2 out-edges to
//! distinct random vertices other than itself and a random weight each (so E = 2V and
//! vertex v's edges are at 2v and 2v + 1). Buffers, in allocation order: `vertices`
//! (row offsets, 4V), `edges` (targets, 4E), `weights` (float 4E), `distances` (float
//! 4V), `mask` (1 byte per vertex, the one buffer the program allocates with plain
//! `cudaMalloc`), `updating` (float 4V): 29V bytes. The host writes the first three
//! (setup: H2D of each). Every kernel runs ceil(V / 16) blocks of 16 threads, one thread
//! per vertex.
//!
//! The search (the phase body, so each repetition starts over): `initializeArrays`
//! writes the mask (only the source set), the distances and the updating distances;
//! D2H of the mask. Then groups of five iterations, each `Kernel1` (a thread whose mask
//! is set clears it, reads its two row offsets, and for each edge reads the target and
//! the weight, its own distance, and lowers the target's updating distance with an
//! atomic minimum, a compare-and-swap loop) and `Kernel2` (every thread compares its
//! distance with its updating distance, takes the smaller and sets its mask if it
//! improved, and writes the updating distance back), followed by a D2H of the mask;
//! the search stops after a group that leaves the mask empty or after 15 iterations
//! (`MAX_ITERATION`). The distances go to the host at the end (teardown: D2H).
//!
//! # Iterations (derived)
//! The vertices active in an iteration are those improved in the one before: first the
//! source. Each active vertex reaches 2 random vertices; with `R_k` vertices reached so
//! far and `f_k` active, iteration k reaches `f_{k+1} = (V - R_k)(1 - exp(-2 f_k / V))`
//! new ones (the mean-field recurrence of a random graph; below half a vertex, none).
//! Improvements of vertices already reached are left out: at most the share of
//! reached vertices among the targets, 3 % in the last iteration at the default. The
//! frontier doubles every iteration: at 2^20 vertices, 1, 2, ..., about 16000 active in
//! the 15th and last iteration the cap allows, 62000 reached in all; the search never
//! empties the mask there, so the phase is 31 launches and four 1 MiB copies of the
//! mask.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! Which vertices are active is decided by the search, and they lie at random places.
//! Their accesses are isolated ones: 128-byte lines read, 32-byte sectors written, each
//! line moved once where the threads reach it in address order ([`scattered_bytes`]),
//! again unless the L2 holds it where they come in random order
//! ([`DeviceShape::random_bytes`]). Those sparse, data-dependent accesses are `Random`
//! (the engine draws one page per transaction, so a frontier reaches the pages it
//! really lands on); the full sweeps are `Linear`.
//! - `initializeArrays`: `mask`, `distances` and `updating` written in full, linearly.
//! - `Kernel1` with f active: `mask` read in full and f clears; `vertices` f reads of two
//!   adjacent offsets, one line, two for the 1 in 32 at a line's end; `edges` and
//!   `weights` f reads of two adjacent elements (8 bytes, 8-aligned: one line);
//!   `distances` f reads (the second edge's read of it hits the L1); `updating` 2f
//!   random reads and 2f random writes for the atomic minimums (the load before the
//!   compare-and-swap, and the sector the compare-and-swap writes back).
//! - `Kernel2` with r improved: `distances` read in full and r writes; `updating` read
//!   and written in full; `mask` r writes at the improved vertices (`Random`).
//!
//! So every iteration sweeps `mask`, `distances` and `updating` linearly (re-read, the
//! same pages kernel after kernel) while the graph's arrays get a few sparse touches at
//! data-dependent places: the mixed class.
//!
//! # Compute
//! A 16-thread block fills half a warp, whose idle lanes take issue slots too, so the
//! model counts 32 lanes per block. Per lane: `initializeArrays` about 8 instructions
//! (index, bound test, the source test, three stores); `Kernel1` 8 for the mask test,
//! plus, in a block holding an active vertex, 38 for its work (10 for the clear and the
//! offsets, 14 per edge: two loads and the distance, the addition, and a
//! compare-and-swap loop of a load, a minimum, the swap and the test); `Kernel2` 12
//! (index, bound test, two loads, the comparison, the store), plus 4 in a block holding
//! an improved vertex (two stores). `initializeArrays` and `Kernel2` come out memory
//! bound (under 2 instructions per byte); `Kernel1` reads one byte of mask per thread
//! and is bound by issuing its threads (16 instructions per byte of mask, and the
//! frontier's work on top).
//!
//! # Sizes
//! `default` and `uvmsmart` are the program's built-in graph (2^20 vertices, 2 edges
//! each): 29 MiB, of which 28 managed, the 28 MB of `spec/uvm-driver.md` (the mask is
//! not managed there; the model pages it with the rest in mode `uvm`, 1 MiB more than
//! the research simulator). A number sets the vertices.

use super::common::{
    READ_LINE_BYTES, WRITE_SECTOR_BYTES, d2h, h2d, parse_size, phased, random_access, uniform,
    within, workload_sizes,
};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::{DeviceShape, scattered_bytes};
use crate::program::{Access, AccessOrder, Kernel, Op, Program};

/// The sssp app.
pub struct Sssp;

const HELP: &str = "default or uvmsmart (2^20 = 1048576 vertices, 29 MiB, the research \
                    simulator's input), large (2^27 vertices, 3.6 GiB), or a number of \
                    vertices (16 to 268435456; always 2 edges per vertex)";
/// Out-edges per vertex (`neighborsPerVertex`).
const DEGREE: u64 = 2;
/// Bytes of an int or a float.
const WORD_BYTES: u64 = 4;
/// Threads per block (`BLOCK_SIZE`).
const BLOCK: u64 = 16;
/// Lanes of the warp holding one block's 16 threads.
const LANES_PER_BLOCK: u64 = 32;
/// Iterations per group between reads of the mask, and at most in all
/// (`NUM_ASYNCHRONOUS_ITERATIONS`, `MAX_ITERATION`).
const GROUP: usize = 5;
const MAX_ITERATIONS: usize = 15;
/// Instructions per lane (module doc).
const INIT_OPS: u64 = 8;
const SCAN_OPS: u64 = 8;
const FRONTIER_OPS: u64 = 10 + DEGREE * 14;
const RELAX_OPS: u64 = 12;
const IMPROVE_OPS: u64 = 4;
/// The program's graph.
const UVMSMART_VERTICES: u64 = 1 << 20;
/// 3.6 GiB of buffers (29 bytes per vertex).
const LARGE_VERTICES: u64 = 1 << 27;
/// 7.25 GiB of buffers.
const MAX_VERTICES: u64 = 1 << 28;

impl AppModel for Sssp {
    fn name(&self) -> &'static str {
        "sssp"
    }

    fn description(&self) -> &'static str {
        "Single-source shortest paths: frontier relaxation on a random graph of out-degree 2"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let vertices = parse_size(
            self.name(),
            HELP,
            size,
            &workload_sizes(UVMSMART_VERTICES, LARGE_VERTICES),
            |n| within(n, 16..=MAX_VERTICES, format!("{n} vertices")),
        )?;
        Ok(program(vertices, repeat, device))
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Mixed)
    }
}

/// One iteration of the search.
#[derive(Clone, Copy, Debug)]
struct Iteration {
    /// Vertices whose mask is set when `Kernel1` runs.
    active: f64,
    /// Vertices `Kernel2` improves (the next iteration's active ones).
    improved: f64,
}

/// The iterations the program runs on a graph of `vertices` (module doc): whole groups
/// of five until one leaves nothing active, fifteen at most.
fn iterations(vertices: u64) -> Vec<Iteration> {
    let n = vertices as f64;
    let (mut reached, mut active) = (1.0, 1.0);
    let mut out = Vec::new();
    while out.len() < MAX_ITERATIONS {
        for _ in 0..GROUP {
            let improved = (n - reached) * (1.0 - (-(DEGREE as f64) * active / n).exp());
            let improved = if improved < 0.5 { 0.0 } else { improved };
            out.push(Iteration { active, improved });
            reached += improved;
            active = improved;
        }
        if active == 0.0 {
            break;
        }
    }
    out
}

fn program(vertices: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let v = vertices;
    let graph = [
        p.buffer("vertices", WORD_BYTES * v),
        p.buffer("edges", WORD_BYTES * DEGREE * v),
        p.buffer("weights", WORD_BYTES * DEGREE * v),
    ];
    let [offsets, edges, weights] = graph;
    let distances = p.buffer("distances", WORD_BYTES * v);
    let mask = p.buffer("mask", v);
    let updating = p.buffer("updating", WORD_BYTES * v);
    let size = |slot: usize| p.buffers[slot].bytes;
    let read = |slot: usize, accesses: f64| scattered_bytes(size(slot), accesses, READ_LINE_BYTES);
    let write =
        |slot: usize, accesses: f64| scattered_bytes(size(slot), accesses, WRITE_SECTOR_BYTES);
    let random =
        |slot: usize, read: u64, write: u64| uniform(slot, read, write, AccessOrder::Random);
    let linear =
        |slot: usize, read: u64, write: u64| uniform(slot, read, write, AccessOrder::Linear);
    // An access that moves nothing is left out: it touches no page.
    let moving = |accesses: Vec<Access>| -> Vec<Access> {
        accesses
            .into_iter()
            .filter(|a| a.read_bytes + a.write_bytes > 0)
            .collect()
    };

    let blocks = v.div_ceil(BLOCK);
    let lanes = blocks * LANES_PER_BLOCK;
    // Blocks holding at least one of `k` vertices spread at random.
    let busy_lanes = |k: f64| {
        let share = 1.0 - (1.0 - k / v as f64).powf(BLOCK as f64);
        (blocks as f64 * share).round() as u64 * LANES_PER_BLOCK
    };
    // Two adjacent offsets span two lines when the first is a line's last int.
    let offset_lines = 1.0 + WORD_BYTES as f64 / READ_LINE_BYTES as f64;

    let mask_copy = d2h(mask, v);
    let mut body = vec![
        Op::Launch(Kernel {
            name: "initializeArrays".into(),
            ops: lanes * INIT_OPS,
            accesses: vec![
                linear(mask, 0, v),
                linear(distances, 0, size(distances)),
                linear(updating, 0, size(updating)),
            ],
            phases: Vec::new(),
            outer_loop: Default::default(),
        }),
        mask_copy.clone(),
    ];
    for group in iterations(v).chunks(GROUP) {
        for it in group {
            let (f, r) = (it.active, it.improved);
            let relaxations = DEGREE as f64 * f;
            body.push(Op::Launch(Kernel {
                name: "Kernel1".into(),
                ops: lanes * SCAN_OPS + busy_lanes(f) * FRONTIER_OPS,
                accesses: moving(vec![
                    linear(mask, v, write(mask, f)),
                    random(offsets, read(offsets, f * offset_lines), 0),
                    random(edges, read(edges, f), 0),
                    random(weights, read(weights, f), 0),
                    random(distances, read(distances, f), 0),
                    random_access(device, updating, size(updating), (relaxations, relaxations)),
                ]),
                phases: Vec::new(),
                outer_loop: Default::default(),
            }));
            body.push(Op::Launch(Kernel {
                name: "Kernel2".into(),
                ops: lanes * RELAX_OPS + busy_lanes(r) * IMPROVE_OPS,
                accesses: moving(vec![
                    linear(distances, size(distances), write(distances, r)),
                    linear(updating, size(updating), size(updating)),
                    random(mask, 0, write(mask, r)),
                ]),
                phases: Vec::new(),
                outer_loop: Default::default(),
            }));
        }
        body.push(mask_copy.clone());
    }

    let mut setup = Vec::new();
    for slot in graph {
        setup.extend([Op::Alloc(slot), h2d(slot, size(slot))]);
    }
    setup.extend([distances, mask, updating].map(Op::Alloc));
    let mut teardown = vec![d2h(distances, size(distances))];
    teardown.extend([offsets, edges, weights, distances, mask, updating].map(Op::Free));
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{
        check_app, gtx480, launches, mib, order_of, per_byte, phase_body, phase_kernels, rejects,
    };
    use crate::program::CopyDirection;

    #[test]
    fn default_is_the_research_simulators_input() {
        let p = check_app(&Sssp, "default");
        assert_eq!(p.peak_allocated_bytes(), 29 << 20);
        // The research simulator's 28 MB are the managed buffers: all but the mask.
        let managed: u64 = p
            .buffers
            .iter()
            .filter(|b| b.label != "mask")
            .map(|b| b.bytes)
            .sum();
        assert_eq!(managed, 28 << 20);
        assert_eq!(p, Sssp.program("uvmsmart", 1, gtx480()).unwrap());
        assert_eq!(Sssp.pattern_class(), Some(PatternClass::Mixed));
        let large = mib(&check_app(&Sssp, "large")) / 1024.0;
        assert!((2.0..8.0).contains(&large), "{large} GiB");
    }

    #[test]
    fn the_search_runs_fifteen_iterations_with_a_doubling_frontier() {
        let its = iterations(1 << 20);
        assert_eq!(its.len(), 15);
        assert_eq!(its[0].active, 1.0);
        for pair in its.windows(2) {
            let growth = pair[1].active / pair[0].active;
            assert!((1.9..=2.0).contains(&growth), "{pair:?}");
        }
        let reached: f64 = 1.0 + its.iter().map(|i| i.improved).sum::<f64>();
        assert!((58_000.0..64_000.0).contains(&reached), "{reached}");
        let p = Sssp.program("default", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        assert_eq!(launches(body), 31);
        let copies = body
            .iter()
            .filter(|op| {
                **op == Op::Copy {
                    slot: 4,
                    direction: CopyDirection::DeviceToHost,
                    bytes: 1 << 20,
                }
            })
            .count();
        assert_eq!(copies, 4);
        // A small graph is searched to the end: the frontier dies out, and the search
        // stops after the group in which it did.
        let small = iterations(32);
        assert_eq!(small.len(), 10);
        assert_eq!(small.last().unwrap().improved, 0.0);
    }

    #[test]
    fn sweeps_are_linear_and_frontier_accesses_random() {
        let p = Sssp.program("default", 1, gtx480()).unwrap();
        let kernels = phase_kernels(&p);
        let order = |k: &Kernel, label: &str| order_of(&p, k, label);
        // The last Kernel1 expands thousands of vertices.
        let expand = kernels[kernels.len() - 2];
        assert_eq!(expand.name, "Kernel1");
        assert_eq!(order(expand, "mask"), Some(AccessOrder::Linear));
        for gathered in ["vertices", "edges", "weights", "distances", "updating"] {
            assert_eq!(
                order(expand, gathered),
                Some(AccessOrder::Random),
                "{gathered}"
            );
        }
        let relax = kernels[kernels.len() - 1];
        assert_eq!(relax.name, "Kernel2");
        assert_eq!(order(relax, "distances"), Some(AccessOrder::Linear));
        assert_eq!(order(relax, "updating"), Some(AccessOrder::Linear));
        assert_eq!(order(relax, "mask"), Some(AccessOrder::Random));
        assert_eq!(order(relax, "edges"), None);
        // The first Kernel1 expands the source alone: one line of each graph array.
        let first = kernels[1];
        let edges = first.accesses.iter().find(|a| a.slot == 1).unwrap();
        assert_eq!(edges.read_bytes, 128);
        // Per search, the swept arrays move many times their size, the graph's arrays a
        // small part of theirs.
        let d = per_byte(&p, 1);
        assert!(d[3..].iter().all(|x| *x > 15.0), "{d:?}");
        assert!(d[..3].iter().all(|x| *x < 1.0), "{d:?}");
    }

    #[test]
    fn the_atomics_hit_a_larger_l2() {
        let moved = |device: DeviceShape| -> u64 {
            let p = Sssp.program("default", 1, device).unwrap();
            crate::apps::testing::traffic(phase_body(&p, 1), p.buffers.len())[5].0
        };
        let large = crate::preset::find("gh200").unwrap().shape();
        assert!(moved(large) < moved(gtx480()));
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Sssp, "8", "16 to");
        rejects(&Sssp, "268435457", "16 to");
        rejects(&Sssp, "1M", "not a size");
    }
}
