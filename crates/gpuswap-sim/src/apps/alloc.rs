//! `alloc`: the leak-like program of GPUswap's fairness test. It allocates buffers of one
//! size one after another up to a total, holds them, then frees them.
//!
//! In the fairness test two such programs each allocate 32 MB buffers up to 2 GB, the
//! second starting 20 s after the first, on 1400 MB of VRAM with 32 MB chunks
//! (`spec/gpuswap.md`). The model: `floor(total / buffer)` buffers (`buffer_00`,
//! `buffer_01`, ...), each allocation followed by a short host gap; then the measured
//! phase holds them, and every `period` launches a light kernel that touches every held
//! buffer a little, so that the program is a real GPU tenant whose data placement
//! matters; then everything is freed.
//!
//! **Repetitions.** The phase body holds for `hold` (a whole number of periods: launch,
//! wait for it, sleep out the period); `repeat` repetitions hold for `repeat x hold`.
//! The default `hold` is 600 ms, so the evaluation's 100 repetitions hold for 60 s.
//!
//! **The touch kernel** reads one element and writes one element per 128 KiB of every
//! held buffer, strided: isolated accesses, so a 128-byte line read and a 32-byte sector
//! written each (32 KiB read and 8 KiB written of a 32 MiB buffer); about 10
//! instructions per touched place.

use super::common::{READ_LINE_BYTES, WRITE_SECTOR_BYTES, phased, size_error};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{Access, AccessOrder, Distribution, Kernel, Op, Program};
use gpuswap_units::{parse_bytes, parse_ns};

/// The alloc app.
pub struct Alloc;

const HELP: &str = "default (buffer=32MB,total=2GB,gap=10ms,period=100ms,hold=600ms), or \
                    comma-separated key=value pairs overriding any of those keys; sizes take \
                    B/KB/MB/GB or KiB/MiB/GiB, durations ns/us/ms/s; hold (per repetition) \
                    must be a whole number of periods";
/// Bytes between two touched places.
const TOUCH_STRIDE_BYTES: u64 = 128 << 10;
/// Instructions per touched place.
const TOUCH_OPS: u64 = 10;
/// At most this many buffers: the program lists each one.
const MAX_BUFFERS: u64 = 100_000;

impl AppModel for Alloc {
    fn name(&self) -> &'static str {
        "alloc"
    }

    fn description(&self) -> &'static str {
        "Synthetic leak of the GPUswap fairness test: allocates buffers up to a total, holds them, frees them"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        Ok(program(&parse(size)?, repeat))
    }
}

/// The program's parameters.
#[derive(Clone, Debug, PartialEq)]
struct Input {
    buffer_bytes: u64,
    total_bytes: u64,
    gap_ns: u64,
    period_ns: u64,
    hold_ns: u64,
}

const DEFAULT: Input = Input {
    buffer_bytes: 32_000_000,
    total_bytes: 2_000_000_000,
    gap_ns: 10_000_000,
    period_ns: 100_000_000,
    hold_ns: 600_000_000,
};

fn parse(size: &str) -> Result<Input, SizeError> {
    let err = |problem: String| size_error("alloc", HELP, problem);
    let mut input = DEFAULT;
    let text = size.trim();
    if text != "default" {
        for pair in text.split(',') {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(err(format!("{pair:?} is not a size or a key=value pair")));
            };
            let (key, value) = (key.trim(), value.trim());
            let bytes = || parse_bytes(value).map_err(|e| err(format!("{key}: {e}")));
            let ns = || parse_ns(value).map_err(|e| err(format!("{key}: {e}")));
            match key {
                "buffer" => input.buffer_bytes = bytes()?,
                "total" => input.total_bytes = bytes()?,
                "gap" => input.gap_ns = ns()?,
                "period" => input.period_ns = ns()?,
                "hold" => input.hold_ns = ns()?,
                _ => return Err(err(format!("unknown key {key:?}"))),
            }
        }
    }
    if input.buffer_bytes == 0 || input.total_bytes < input.buffer_bytes {
        return Err(err(format!(
            "buffer ({} B) must be positive and at most total ({} B)",
            input.buffer_bytes, input.total_bytes
        )));
    }
    if input.total_bytes / input.buffer_bytes > MAX_BUFFERS {
        return Err(err(format!("total / buffer exceeds {MAX_BUFFERS} buffers")));
    }
    if input.period_ns == 0 || input.hold_ns == 0 || !input.hold_ns.is_multiple_of(input.period_ns)
    {
        return Err(err(format!(
            "hold ({} ns) must be a positive whole number of periods ({} ns)",
            input.hold_ns, input.period_ns
        )));
    }
    if u32::try_from(input.hold_ns / input.period_ns).is_err() {
        return Err(err("hold / period exceeds 2^32 periods".into()));
    }
    Ok(input)
}

fn program(input: &Input, repeat: u32) -> Program {
    let mut p = Program::default();
    let count = input.total_bytes / input.buffer_bytes;
    let slots: Vec<_> = (0..count)
        .map(|i| p.buffer(format!("buffer_{i:02}"), input.buffer_bytes))
        .collect();
    let touched = input.buffer_bytes.div_ceil(TOUCH_STRIDE_BYTES);
    let touch = Kernel {
        name: "touch".into(),
        ops: count * touched * TOUCH_OPS,
        accesses: slots
            .iter()
            .map(|&slot| Access {
                slot,
                read_bytes: touched * READ_LINE_BYTES,
                reread_bytes: 0,
                write_bytes: touched * WRITE_SECTOR_BYTES,
                rewrite_bytes: 0,
                distribution: Distribution::Uniform,
                order: AccessOrder::Strided {
                    stride_bytes: TOUCH_STRIDE_BYTES,
                },
            })
            .collect(),
        phases: Vec::new(),
        outer_loop: Default::default(),
    };
    let periods = u32::try_from(input.hold_ns / input.period_ns).expect("checked by parse");
    // The launch and its wait take part of the period; the engine's clock adds them, so
    // the host sleeps the period itself (the touch is tiny against 100 ms).
    let body = vec![Op::Repeat {
        times: periods,
        body: vec![
            Op::Launch(touch),
            Op::Sync,
            Op::Cpu {
                ns: input.period_ns,
            },
        ],
    }];
    let setup = slots
        .iter()
        .flat_map(|&slot| [Op::Alloc(slot), Op::Cpu { ns: input.gap_ns }])
        .collect();
    let teardown = slots.iter().map(|&slot| Op::Free(slot)).collect();
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, cpu_ns, gtx480, launches, phase_body, rejects};

    #[test]
    fn default_allocates_62_buffers_of_32_mb() {
        let p = check_app(&Alloc, "default");
        assert_eq!(p.buffers.len(), 62);
        assert!(p.buffers.iter().all(|b| b.bytes == 32_000_000));
        assert_eq!(p.peak_allocated_bytes(), 1_984_000_000);
        // Allocations come one by one, a gap after each.
        assert_eq!(p.ops[0], Op::Alloc(0));
        assert_eq!(p.ops[1], Op::Cpu { ns: 10_000_000 });
        assert_eq!(p.ops[2], Op::Alloc(1));
    }

    #[test]
    fn hundred_repetitions_hold_for_sixty_seconds() {
        let p = Alloc.program("default", 100, gtx480()).unwrap();
        let body = phase_body(&p, 100);
        assert_eq!(cpu_ns(body), 600_000_000);
        assert_eq!(launches(body), 6);
        let start = p.ops.iter().position(|op| *op == Op::PhaseStart).unwrap();
        assert_eq!(cpu_ns(&p.ops[start..start + 2]), 60_000_000_000);
    }

    #[test]
    fn the_touch_kernel_reaches_every_buffer_lightly() {
        let p = Alloc
            .program("buffer=32MiB,total=256MiB,hold=1s", 1, gtx480())
            .unwrap();
        assert_eq!(p.buffers.len(), 8);
        let Op::Repeat { times: 10, body } = &phase_body(&p, 1)[0] else {
            panic!("10 periods")
        };
        let Op::Launch(touch) = &body[0] else {
            panic!("a launch")
        };
        assert_eq!(touch.accesses.len(), 8);
        for a in &touch.accesses {
            assert_eq!(a.read_bytes, (32 << 20) / 1024, "a line per 128 KiB");
            assert_eq!(a.write_bytes, (32 << 20) / 4096, "a sector per 128 KiB");
        }
    }

    #[test]
    fn keys_override_the_defaults() {
        let input = parse("total = 100MB, gap=1ms").unwrap();
        assert_eq!(input.total_bytes, 100_000_000);
        assert_eq!(input.gap_ns, 1_000_000);
        assert_eq!(input.buffer_bytes, DEFAULT.buffer_bytes);
        assert_eq!(check_app(&Alloc, "total=100MB").buffers.len(), 3);
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Alloc, "size=3GB", "unknown key \"size\"");
        rejects(&Alloc, "buffer=32", "MiB");
        rejects(&Alloc, "buffer=3GB", "at most total");
        rejects(&Alloc, "hold=150ms", "whole number of periods");
        rejects(&Alloc, "hold=10 min", "duration");
        rejects(&Alloc, "32MB", "key=value");
        rejects(&Alloc, "buffer=1B,total=1GB", "100000 buffers");
    }
}
