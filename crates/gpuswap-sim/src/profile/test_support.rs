//! Programs, presets and comparisons shared by the profiler's tests.

use super::{BufferProfile, Profile};
use crate::preset::{self, Preset};
use crate::program::{Access, Kernel, Op, Program};
use crate::timing::{READ_TRANSACTION_BYTES, write_transaction_bytes};
use crate::{apps, runtime};

pub(super) fn gtx480() -> Preset {
    preset::find("gtx480").unwrap()
}

/// An app's program at `size` with one phase iteration, wrapped with the runtime.
pub(super) fn app_program(app: &str, size: &str) -> Program {
    let gtx480 = gtx480();
    let program = apps::find(app)
        .unwrap()
        .program(size, 1, gtx480.shape())
        .unwrap();
    runtime::with_runtime(&program, &gtx480)
}

pub(super) fn buffer<'a>(profile: &'a Profile, label: &str) -> &'a BufferProfile {
    profile
        .buffers
        .iter()
        .find(|b| b.label == label)
        .unwrap_or_else(|| panic!("buffer {label}"))
}

/// Read and write transactions per slot of all launches of `ops`, loops unrolled: the
/// app model's own traffic in host memory, computed without the profiler's walk.
pub(super) fn model_traffic(ops: &[Op], sums: &mut [(f64, f64)], times: f64) {
    for op in ops {
        match op {
            Op::Launch(kernel) => {
                for a in &kernel.accesses {
                    // In host memory every read and store crosses the link, those the
                    // L2 would have served included.
                    let (reads, writes) = (
                        a.read_bytes + a.reread_bytes,
                        a.write_bytes + a.rewrite_bytes,
                    );
                    sums[a.slot].0 += times * reads as f64 / READ_TRANSACTION_BYTES as f64;
                    sums[a.slot].1 +=
                        times * writes as f64 / write_transaction_bytes(a.order) as f64;
                }
            }
            Op::Repeat { times: t, body } => model_traffic(body, sums, times * f64::from(*t)),
            _ => {}
        }
    }
}

pub(super) fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) + 1e-9
}

/// A program with one buffer of `bytes` and one kernel accessing it with `access`.
pub(super) fn one_kernel(bytes: u64, accesses: Vec<Access>) -> Program {
    let mut p = Program::default();
    let a = p.buffer("a", bytes);
    p.ops = vec![
        Op::Alloc(a),
        Op::Launch(Kernel::simple(accesses)),
        Op::Free(a),
    ];
    p.validate().unwrap();
    p
}

pub(super) fn reads(profile: &Profile) -> Vec<f64> {
    profile.units.iter().map(|u| u.reads).collect()
}

pub(super) fn all_close(found: &[f64], expected: &[f64]) {
    assert!(
        found.len() == expected.len() && found.iter().zip(expected).all(|(a, b)| close(*a, *b)),
        "{found:?} vs {expected:?}"
    );
}
