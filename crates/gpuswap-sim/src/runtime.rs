//! The CUDA runtime's share of a tenant's program: per-tenant system buffers (stack, code,
//! constants), allocated before the application's first call and freed at its end, and
//! the small accesses every kernel makes to them.

use std::rc::Rc;

use gpuswap_core::{BufferKind, SystemBuffer};

use crate::gdev;
use crate::preset::{CudaRuntime, Preset};
use crate::program::{Access, CopyDirection, Kernel, Op, Program};

/// Bytes of code one SM fetches per launch: unconfirmed, 4 KiB (a typical Rodinia kernel
/// binary is a few KiB; each SM's instruction cache misses it once).
const CODE_FETCH_BYTES_PER_SM: u64 = 4 << 10;
/// Kernel parameters and constants read per SM per launch: unconfirmed, 512 B.
const CONSTANT_BYTES_PER_SM: u64 = 512;
/// Stack (local memory) traffic per SM per launch: one 128-byte line of spills.
/// Kernels keep locals in registers, so the stack is nearly never touched (dissertation).
const STACK_BYTES_PER_SM: u64 = 128;

/// Which runtime carries a tenant's calls to the GPU, as far as the device sees it: the
/// testbed's runtime (`Preset::runtime`), and whether Gdev's scheduler is in charge of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeKind {
    /// NVIDIA's runtime: one DMA per memcpy, after the copy engine's setup.
    Nvidia,
    /// Gdev's runtime: its copy path (`crate::gdev`) in every mode; with its scheduler
    /// (`scheduled`) a memcpy also holds the device as a kernel does, and every call
    /// pays the scheduler's per-call cost.
    Gdev { scheduled: bool },
}

impl RuntimeKind {
    /// The runtime of a run on `preset` whose manager does (`gates_launches`) or does
    /// not gate launches. Launch gating is Gdev's scheduler's (the Gdev policy's), and
    /// its scheduler comes with its runtime, whatever runtime the testbed links.
    pub fn of(preset: &Preset, gates_launches: bool) -> Self {
        match (preset.runtime, gates_launches) {
            (_, true) => RuntimeKind::Gdev { scheduled: true },
            (CudaRuntime::Gdev, false) => RuntimeKind::Gdev { scheduled: false },
            (CudaRuntime::Nvidia, false) => RuntimeKind::Nvidia,
        }
    }

    /// Whether a memcpy holds the device as a kernel does (Gdev's scheduler runs copies
    /// and launches through one queue).
    pub fn copies_take_device(self) -> bool {
        self == RuntimeKind::Gdev { scheduled: true }
    }

    /// What a memcpy of `bytes` to or from a buffer of `buffer_bytes` costs before its
    /// bytes move, and the most they move per second besides the link's share.
    pub fn memcpy_setup(
        self,
        preset: &Preset,
        direction: CopyDirection,
        bytes: u64,
        buffer_bytes: u64,
    ) -> (u64, Option<f64>) {
        let call_ns = match self {
            RuntimeKind::Nvidia => return (preset.copy_setup_ns, None),
            RuntimeKind::Gdev { scheduled: true } => preset.gdev_launch_ns,
            RuntimeKind::Gdev { scheduled: false } => preset.copy_setup_ns,
        };
        let cost = gdev::copy_cost(preset, direction, bytes, buffer_bytes, call_ns);
        (cost.setup_ns, Some(cost.cap_bytes_per_s))
    }
}

/// Wraps an app's program with the runtime's system buffers for `preset` (by reference:
/// the app's program is shared by every run of it).
pub fn with_runtime(app: &Program, preset: &Preset) -> Program {
    let mut program = Program {
        buffers: Vec::new(),
        ops: Vec::new(),
    };
    let stack = program.buffer_of_kind(
        "runtime_stack",
        preset.runtime_stack_bytes,
        BufferKind::System(SystemBuffer::Stack),
    );
    let code = program.buffer_of_kind(
        "runtime_code",
        preset.runtime_code_bytes,
        BufferKind::System(SystemBuffer::Code),
    );
    let constant = program.buffer_of_kind(
        "runtime_constant",
        preset.runtime_constant_bytes,
        BufferKind::System(SystemBuffer::Constant),
    );
    let base = program.buffers.len();
    program.buffers.extend_from_slice(&app.buffers);
    let sms = u64::from(preset.sms);
    let system_accesses = [
        Access::uniform(stack, STACK_BYTES_PER_SM * sms, STACK_BYTES_PER_SM * sms),
        Access::uniform(code, CODE_FETCH_BYTES_PER_SM * sms, 0),
        Access::uniform(constant, CONSTANT_BYTES_PER_SM * sms, 0),
    ];
    program.ops = [stack, code, constant].map(Op::Alloc).into();
    program
        .ops
        .extend(app.ops.iter().map(|op| shift(op, base, &system_accesses)));
    program.ops.extend([stack, code, constant].map(Op::Free));
    program
}

/// Moves an app op's slots past the system buffers and adds the system accesses to
/// kernels.
fn shift(op: &Op, base: usize, system: &[Access]) -> Op {
    match op {
        Op::Alloc(s) => Op::Alloc(s + base),
        Op::Free(s) => Op::Free(s + base),
        Op::Copy {
            slot,
            direction,
            bytes,
        } => Op::Copy {
            slot: slot + base,
            direction: *direction,
            bytes: *bytes,
        },
        Op::Launch(kernel) => {
            let mut accesses = Vec::with_capacity(kernel.accesses.len() + system.len());
            accesses.extend(kernel.accesses.iter().map(|a| Access {
                slot: a.slot + base,
                ..a.clone()
            }));
            accesses.extend_from_slice(system);
            Op::Launch(Kernel {
                name: kernel.name.clone(),
                ops: kernel.ops,
                accesses,
                phases: kernel.phases.clone(),
                outer_loop: kernel.outer_loop,
            })
        }
        Op::Repeat { times, body } => Op::Repeat {
            times: *times,
            body: body.iter().map(|o| shift(o, base, system)).collect(),
        },
        other @ (Op::Sync | Op::Cpu { .. } | Op::PhaseStart | Op::PhaseEnd) => other.clone(),
    }
}

/// A program flattened for execution: loops become jumps, kernels are shared.
#[derive(Clone, Debug)]
pub enum Instr {
    /// See [`Op::Alloc`].
    Alloc(usize),
    /// See [`Op::Free`].
    Free(usize),
    /// See [`Op::Copy`].
    Copy {
        /// Buffer slot.
        slot: usize,
        /// Direction.
        direction: crate::program::CopyDirection,
        /// Bytes.
        bytes: u64,
    },
    /// See [`Op::Launch`].
    Launch(Rc<Kernel>),
    /// See [`Op::Sync`].
    Sync,
    /// See [`Op::Cpu`].
    Cpu(u64),
    /// Start of a loop body run `times` times; `end` is the index of its `LoopEnd`.
    LoopStart {
        /// Repetitions.
        times: u32,
        /// Index of the matching `LoopEnd`.
        end: usize,
    },
    /// End of a loop body; `start` is the index of its `LoopStart`.
    LoopEnd {
        /// Index of the matching `LoopStart`.
        start: usize,
    },
    /// See [`Op::PhaseStart`].
    PhaseStart,
    /// See [`Op::PhaseEnd`].
    PhaseEnd,
}

/// Flattens nested ops into instructions, taking the ops so that their kernels move
/// into the instructions rather than being copied.
pub fn flatten(ops: Vec<Op>) -> Vec<Instr> {
    let mut out = Vec::new();
    flatten_into(ops, &mut out);
    out
}

fn flatten_into(ops: Vec<Op>, out: &mut Vec<Instr>) {
    for op in ops {
        match op {
            Op::Alloc(s) => out.push(Instr::Alloc(s)),
            Op::Free(s) => out.push(Instr::Free(s)),
            Op::Copy {
                slot,
                direction,
                bytes,
            } => out.push(Instr::Copy {
                slot,
                direction,
                bytes,
            }),
            Op::Launch(k) => out.push(Instr::Launch(Rc::new(k))),
            Op::Sync => out.push(Instr::Sync),
            Op::Cpu { ns } => out.push(Instr::Cpu(ns)),
            Op::PhaseStart => out.push(Instr::PhaseStart),
            Op::PhaseEnd => out.push(Instr::PhaseEnd),
            Op::Repeat { times, body } => {
                let start = out.len();
                out.push(Instr::LoopStart { times, end: 0 });
                flatten_into(body, out);
                let end = out.len();
                out.push(Instr::LoopEnd { start });
                out[start] = Instr::LoopStart { times, end };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preset;

    fn app() -> Program {
        let mut p = Program::default();
        let a = p.buffer("a", 1 << 20);
        p.ops = vec![
            Op::Alloc(a),
            Op::Repeat {
                times: 3,
                body: vec![Op::Launch(Kernel {
                    name: "k".into(),
                    ops: 1,
                    accesses: vec![Access::uniform(a, 10, 0)],
                    phases: Vec::new(),
                    outer_loop: Default::default(),
                })],
            },
            Op::Free(a),
        ];
        p
    }

    #[test]
    fn runtime_buffers_wrap_the_app() {
        let p = preset::find("gtx480").unwrap();
        let wrapped = with_runtime(&app(), &p);
        assert_eq!(wrapped.buffers.len(), 4);
        assert_eq!(wrapped.buffers[0].bytes, p.runtime_stack_bytes);
        assert_eq!(wrapped.ops.first(), Some(&Op::Alloc(0)));
        assert_eq!(wrapped.ops.last(), Some(&Op::Free(2)));
        assert_eq!(wrapped.ops[3], Op::Alloc(3));
        let Op::Repeat { body, .. } = &wrapped.ops[4] else {
            panic!("loop kept")
        };
        let Op::Launch(k) = &body[0] else {
            panic!("kernel kept")
        };
        let slots: Vec<_> = k.accesses.iter().map(|a| a.slot).collect();
        assert_eq!(slots, vec![3, 0, 1, 2]);
        assert_eq!(
            wrapped.peak_allocated_bytes(),
            (1 << 20) + p.runtime_bytes()
        );
    }

    #[test]
    fn loops_become_matched_jumps() {
        let instrs = flatten(app().ops);
        assert_eq!(instrs.len(), 5);
        assert!(matches!(instrs[1], Instr::LoopStart { times: 3, end: 3 }));
        assert!(matches!(instrs[3], Instr::LoopEnd { start: 1 }));
    }
}
