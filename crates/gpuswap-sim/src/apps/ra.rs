//! `ra`: the "RandomAccess" benchmark of GPGPU-Sim UVM Smart (`benchmarks/Managed/ra`),
//! the random-class workload of the adaptive unified-memory paper
//! (`../shared/spec/uvm-adaptive.md`).
//!
//! # The real program
//! Named after HPCC's RandomAccess (GUPS), but not its update loop (the `random` app
//! models that one): a sparse gather and scatter of floats. Buffers, N floats each, all
//! managed, in allocation order: `input`, `output`, `table`; N = 2^20 (12 MiB in all, the
//! 12 MB of `spec/uvm-driver.md`). The host fills `input` with uniform random numbers in
//! [0, 1] and `table` with its indices (setup: H2D of both; `output` is never
//! initialised). One launch of `kernel` on ceil(N / 256) blocks of 256 threads, then a
//! device synchronization; the host then scans all of `output` (teardown: D2H). The
//! program runs the kernel once; the phase body is that launch, so `repeat` runs it
//! again on the same data.
//!
//! Only every hundredth thread works: thread `x` with `x mod 100 = 0` reads `input[x]`,
//! turns its fraction into an index `i` (the fraction times N), reads `table[i]` and
//! writes `output[i]`. So A = ceil(N / 100) threads are active, one per 400 bytes of
//! `input`, and their indices are uniform over the table. Float precision leaves about
//! 2^24 distinct fractions, so above 2^24 floats the indices grow coarser than one float
//! but still reach every 4 KiB page.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! - `input`: A isolated reads at a 400-byte stride, in address order (threads in index
//!   order). The stride exceeds a line, so each moves its own 128-byte line:
//!   `Strided { 400 }`, 128 A bytes.
//! - `table`: A isolated reads at data-dependent places, in random order: 128-byte lines,
//!   moved again when the device's L2 no longer holds them
//!   ([`DeviceShape::random_bytes`]): `Random`.
//! - `output`: A isolated writes at the same places: 32-byte sectors, the same way.
//!
//! At N = 2^20 each 4 KiB page holds 1024 floats, about ten of the active threads'
//! indices, so a launch touches nearly every page of all three buffers, the table and
//! output pages in no order: the random class.
//!
//! # Compute
//! Every thread computes its index and tests the bound and the remainder by 100 (about
//! 10 instructions: the division by a constant compiles to a multiply-high, a shift, a
//! multiply and a subtract). An active thread adds about 16 (a load, floor, two
//! conversions, the subtraction and scaling, two address computations, a load, a
//! multiply, a store), and its warp runs them with all 32 lanes: no two active threads
//! share a warp (100 > 32), so A warps do. At N = 2^20 that is 15 instructions per
//! float of the table against 2.9 bytes moved: 5.2 per byte where the GTX 480 model
//! balances at 3.8, so the launch is mostly the issue of threads that exit at once,
//! about 1.4x compute bound.

use super::common::{
    READ_LINE_BYTES, d2h, h2d, parse_size, phased, random_access, uniform, within, workload_sizes,
};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, Program};

/// The ra app.
pub struct Ra;

const HELP: &str = "default or uvmsmart (2^20 = 1048576 floats per array, 12 MiB, the \
                    research simulator's input), large (2^28 floats, 3 GiB), or a number \
                    of floats per array (1024 to 536870912)";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// One thread in this many works (the kernel's `x_id % 100` test).
const ACTIVE_EVERY: u64 = 100;
/// Threads per warp: a warp holding an active thread runs its path on every lane.
const WARP_LANES: u64 = 32;
/// Instructions per thread for the index and the tests, and per lane of a warp holding
/// an active thread for its gather and scatter (module doc).
const TEST_OPS: u64 = 10;
const ACTIVE_OPS: u64 = 16;
/// The run script's input (the program's `N`).
const UVMSMART_FLOATS: u64 = 1 << 20;
/// Arrays of 1 GiB: 3 GiB of buffers.
const LARGE_FLOATS: u64 = 1 << 28;
/// Accepted floats per array: a page of each at least, 6 GiB of buffers at most.
const MIN_FLOATS: u64 = 1 << 10;
const MAX_FLOATS: u64 = 1 << 29;

impl AppModel for Ra {
    fn name(&self) -> &'static str {
        "ra"
    }

    fn description(&self) -> &'static str {
        "UVM Smart RandomAccess: every 100th thread gathers a float from a random table \
         entry and scatters it to the same output entry"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let floats = parse_size(
            self.name(),
            HELP,
            size,
            &workload_sizes(UVMSMART_FLOATS, LARGE_FLOATS),
            |n| within(n, MIN_FLOATS..=MAX_FLOATS, format!("{n} floats per array")),
        )?;
        Ok(program(floats, repeat, device))
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Random)
    }
}

fn program(floats: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let bytes = floats * FLOAT_BYTES;
    let [input, output, table] = ["input", "output", "table"].map(|label| p.buffer(label, bytes));
    let active = floats.div_ceil(ACTIVE_EVERY);
    let kernel = Kernel {
        name: "kernel".into(),
        ops: floats * TEST_OPS + active * WARP_LANES * ACTIVE_OPS,
        accesses: vec![
            uniform(
                input,
                active * READ_LINE_BYTES,
                0,
                AccessOrder::Strided {
                    stride_bytes: ACTIVE_EVERY * FLOAT_BYTES,
                },
            ),
            random_access(device, table, bytes, (active as f64, 0.0)),
            random_access(device, output, bytes, (0.0, active as f64)),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };
    let mut setup: Vec<Op> = [input, output, table].map(Op::Alloc).into();
    setup.extend([h2d(input, bytes), h2d(table, bytes)]);
    let body = vec![Op::Launch(kernel), Op::Sync];
    let mut teardown = vec![d2h(output, bytes)];
    teardown.extend([input, output, table].map(Op::Free));
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, launches, mib, phase_body, rejects};
    use crate::program::Access;

    fn accesses(size: &str, device: DeviceShape) -> Vec<Access> {
        let p = Ra.program(size, 1, device).unwrap();
        let Op::Launch(k) = &phase_body(&p, 1)[0] else {
            panic!("a launch")
        };
        k.accesses.clone()
    }

    #[test]
    fn footprint_is_three_arrays_of_the_research_input() {
        let p = check_app(&Ra, "default");
        assert_eq!(mib(&p), 12.0, "the 12 MB of the artifact");
        assert_eq!(p, check_app(&Ra, "uvmsmart"));
        assert_eq!(launches(phase_body(&p, 1)), 1);
        let large = mib(&check_app(&Ra, "large")) / 1024.0;
        assert!((2.0..=8.0).contains(&large), "{large} GiB");
    }

    #[test]
    fn every_hundredth_thread_gathers_and_scatters_at_random() {
        let [input, table, output]: [Access; 3] = accesses("default", gtx480()).try_into().unwrap();
        let active = 10_486.0;
        // One line of input per active thread, in address order at its stride.
        assert_eq!(input.order, AccessOrder::Strided { stride_bytes: 400 });
        assert_eq!(input.read_bytes, 10_486 * 128);
        // The table and output at the data-dependent index: in random order, each
        // access a line read or a sector written, less the second touches of a line
        // that the L2 still holds (a fifth of them: 768 KiB of 4 MiB).
        for (access, granule) in [(&table, 128.0), (&output, 32.0)] {
            assert_eq!(access.order, AccessOrder::Random);
            let moved = (access.read_bytes + access.write_bytes) as f64 / granule;
            assert!((0.95 * active..active).contains(&moved), "{moved}");
        }
        assert_eq!((table.write_bytes, output.read_bytes), (0, 0));
        // Every 4 KiB page of the table holds about ten of the indices.
        let pages = f64::from(1 << 20) * 4.0 / 4096.0;
        assert!(active / pages > 10.0);
    }

    #[test]
    fn a_larger_l2_keeps_the_random_lines() {
        let small = accesses("default", gtx480());
        let big = accesses("default", crate::preset::find("gh200").unwrap().shape());
        // The 4 MiB table fits in the GH200's L2: each line moves once.
        assert!(big[1].read_bytes < small[1].read_bytes);
        assert_eq!(big[0], small[0], "the strided reads never repeat a line");
    }

    #[test]
    fn mostly_threads_that_exit_at_once() {
        let p = Ra.program("default", 1, gtx480()).unwrap();
        let Op::Launch(k) = &phase_body(&p, 1)[0] else {
            panic!("a launch")
        };
        let bytes: u64 = k
            .accesses
            .iter()
            .map(|a| a.read_bytes + a.write_bytes)
            .sum();
        let ratio = (k.ops as f64 / 672e9) / (bytes as f64 / 177.4e9);
        assert!((1.2..1.6).contains(&ratio), "{ratio}");
        assert!(k.ops < 2 * (1 << 20) * TEST_OPS, "the tests dominate");
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Ra, "1000", "1024 to");
        rejects(&Ra, "1073741824", "1024 to");
        rejects(&Ra, "12MB", "not a size");
        assert_eq!(Ra.pattern_class(), Some(PatternClass::Random));
    }
}
