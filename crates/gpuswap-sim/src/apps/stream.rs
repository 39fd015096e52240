//! `stream_triad` (formerly `stream`): the STREAM triad on three float arrays, as in the
//! managed-memory benchmarks of GPGPU-Sim UVM Smart (`benchmarks/Managed/StreamTriad`),
//! the streaming workload of the adaptive unified-memory paper
//! (`../shared/spec/uvm-adaptive.md`).
//!
//! The real program computes `z[j] = s x[j] + y[j]` on 2^20 floats per array (12 MiB, the
//! 12 MB of `spec/uvm-driver.md`: the size `uvmsmart`); its grid-stride loop has exactly
//! one thread per element at that size (4096 blocks of 256). The `default` size keeps the
//! GPUswap evaluation's scale, 2^24 floats per array.
//!
//! Buffers `a` (written, the program's `z`), `b`, `c` (read, `x` and `y`), n floats
//! each, in that order. The host initialises all three (setup: H2D of each) and reads
//! `a` after (teardown: D2H). The phase body is one launch of `triad`, one thread per
//! element, and a synchronization (the program waits for the kernel before reading the
//! result). Traffic: `b` and `c` read linearly in full, `a` written linearly in full:
//! every page touched once per launch, in one pass, and again only in the next
//! repetition, after all the others. Compute: about 8 instructions per thread (index,
//! bound test, two loads, a multiply-add, the store): 0.67 instructions per byte, far
//! below the GTX 480 model's balance of 3.8, so memory bound, as STREAM is meant to be.

use super::common::{d2h, h2d, parse_size, phased, uniform, within};
use super::model::{AppModel, PatternClass, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, Program};

/// The stream_triad app.
pub struct Stream;

const HELP: &str = "default (2^24 = 16777216 floats per array, 192 MiB), uvmsmart (2^20 \
                    floats, 12 MiB, the research simulator's input), large (2^28 floats, \
                    3 GiB), or a number of floats per array (1 to 268435456)";
/// Float size.
const FLOAT_BYTES: u64 = 4;
/// Instructions per thread.
const OPS_PER_THREAD: u64 = 8;
/// Largest array accepted, and the size `large`: three 1 GiB arrays.
const MAX_ELEMENTS: u64 = 1 << 28;

impl AppModel for Stream {
    fn name(&self) -> &'static str {
        "stream_triad"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["stream"]
    }

    fn pattern_class(&self) -> Option<PatternClass> {
        Some(PatternClass::Streaming)
    }

    fn description(&self) -> &'static str {
        "Synthetic STREAM triad: two arrays read and one written linearly per launch"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        let named = [
            ("default", 1 << 24),
            ("uvmsmart", 1 << 20),
            ("large", MAX_ELEMENTS),
        ];
        let elements = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, 1..=MAX_ELEMENTS, format!("{n} floats per array"))
        })?;
        Ok(program(elements, repeat))
    }
}

fn program(elements: u64, repeat: u32) -> Program {
    let mut p = Program::default();
    let bytes = elements * FLOAT_BYTES;
    let [a, b, c] = ["a", "b", "c"].map(|label| p.buffer(label, bytes));
    let triad = Kernel {
        name: "triad".into(),
        ops: elements * OPS_PER_THREAD,
        accesses: vec![
            uniform(a, 0, bytes, AccessOrder::Linear),
            uniform(b, bytes, 0, AccessOrder::Linear),
            uniform(c, bytes, 0, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };
    let mut setup: Vec<Op> = [a, b, c].map(Op::Alloc).into();
    setup.extend([a, b, c].map(|slot| h2d(slot, bytes)));
    let body = vec![Op::Launch(triad), Op::Sync];
    let mut teardown = vec![d2h(a, bytes)];
    teardown.extend([a, b, c].map(Op::Free));
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, mib, phase_body, rejects, traffic};

    #[test]
    fn footprint_is_three_arrays() {
        assert_eq!(mib(&check_app(&Stream, "default")), 192.0);
        assert_eq!(mib(&check_app(&Stream, "uvmsmart")), 12.0);
        assert_eq!(check_app(&Stream, "1000").peak_allocated_bytes(), 12_000);
        assert_eq!(mib(&check_app(&Stream, "large")), 3072.0);
    }

    #[test]
    fn the_old_name_still_finds_it() {
        let app = crate::apps::find("stream").expect("the alias");
        assert_eq!(app.name(), "stream_triad");
        assert_eq!(app.pattern_class(), Some(PatternClass::Streaming));
    }

    #[test]
    fn two_arrays_read_one_written_once_per_launch() {
        let p = Stream.program("1000", 1, gtx480()).unwrap();
        let t = traffic(phase_body(&p, 1), 3);
        assert_eq!(t, vec![(0, 4000), (4000, 0), (4000, 0)]);
        let Op::Launch(k) = &phase_body(&p, 1)[0] else {
            panic!("a launch")
        };
        assert!(
            (k.ops as f64 / 12_000.0) < 672e9 / 177.4e9 / 4.0,
            "memory bound"
        );
        // One linear pass over each array: streaming.
        assert!(k.accesses.iter().all(|a| a.order == AccessOrder::Linear));
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Stream, "0", "1 to");
        rejects(&Stream, "300000000", "1 to");
        rejects(&Stream, "64MiB", "not a size");
    }
}
