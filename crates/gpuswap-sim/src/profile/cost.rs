//! The simulated profiling time: a repetition's kernel run with one unit remote, the
//! unit's relocation to host memory and back, and restoring what the kernel overwrote.

use gpuswap_core::BufferKind;

use super::counts::accessed_slots;
use crate::link::size_curve_bytes_per_s;
use crate::preset::Preset;
use crate::program::{Kernel, Program};
use crate::serial_loop;
use crate::timing::{self, Traffic};

/// A kernel's run time alone on the device: its fixed part (at least the trips of a loop
/// one thread runs alone, [`serial_loop::floor_ns`]) and its remote flows run side by
/// side, as the engine runs them, each flow with its link direction to itself.
pub(super) fn kernel_ns(preset: &Preset, kernel: &Kernel, traffic: &Traffic) -> u64 {
    let flow_ns = |bytes: f64, bytes_per_s: f64| (bytes / bytes_per_s * 1e9).ceil() as u64;
    timing::fixed_ns(preset, kernel.ops, traffic)
        .max(serial_loop::floor_ns(preset, kernel.outer_loop))
        .max(flow_ns(
            traffic.link_bytes_to_device(),
            preset.link.h2d_bytes_per_s,
        ))
        .max(flow_ns(
            traffic.link_bytes_to_host(),
            preset.link.d2h_bytes_per_s,
        ))
}

/// Relocating a unit of `bytes` to host memory and back: two DMA copies, each with the
/// driver's relocation cost, at the transfer-size curve's bandwidth where the preset has
/// one (as the engine's copies run).
pub(super) fn relocation_ns(preset: &Preset, bytes: u64) -> u64 {
    [preset.link.d2h_bytes_per_s, preset.link.h2d_bytes_per_s]
        .into_iter()
        .map(|peak| {
            let bytes_per_s = preset
                .link
                .size_curve_k_per_kib
                .map_or(peak, |k| size_curve_bytes_per_s(peak, k, bytes));
            preset.relocation_setup_ns(bytes) + (bytes as f64 / bytes_per_s * 1e9).ceil() as u64
        })
        .sum()
}

/// Restoring what a kernel overwrites before its next repetition: one device-to-device
/// copy of every application buffer it writes, each byte read and written once in VRAM,
/// plus a copy's fixed cost. The runtime's buffers need no restore: the stack is scratch
/// space between launches, code and constants are only read.
pub(super) fn restore_ns(preset: &Preset, program: &Program, kernel: &Kernel) -> u64 {
    let written_bytes: u64 = accessed_slots(kernel)
        .into_iter()
        .filter(|&slot| {
            program.buffers[slot].kind == BufferKind::Device
                && kernel
                    .accesses
                    .iter()
                    .any(|a| a.slot == slot && a.write_bytes > 0)
        })
        .map(|slot| program.buffers[slot].bytes)
        .sum();
    if written_bytes == 0 {
        return 0;
    }
    preset.copy_setup_ns
        + (2.0 * written_bytes as f64 / preset.vram_bytes_per_s * 1e9).ceil() as u64
}

#[cfg(test)]
mod tests {
    use crate::profile::test_support::*;
    use crate::profile::{Granularity, PAGE_BYTES, profile};
    use crate::program::Access;

    #[test]
    fn profiling_time_adds_repetitions_relocations_and_restores() {
        let preset = gtx480();
        // Two pages read and written in place by a kernel of negligible compute.
        let program = one_kernel(2 * PAGE_BYTES, vec![Access::uniform(0, 8192, 8192)]);
        let p = profile(&program, &preset, Granularity::Page, 4 << 20);
        let ns = |bytes: f64, bytes_per_s: f64| (bytes / bytes_per_s * 1e9).ceil() as u64;
        // All local: launch plus 16 KiB at VRAM bandwidth.
        let normal = preset.kernel_launch_ns + ns(16384.0, preset.vram_bytes_per_s);
        assert_eq!(p.normal_ns, normal);
        // One page remote: 4096 B read as 32 lines, 32 round trips with 32 in flight, one
        // link latency; the flows (writes with their packet overhead the longer one) end
        // before that.
        let remote_ns = preset.kernel_launch_ns + preset.link.latency_ns;
        assert!(ns(4096.0 * 56.0 / 32.0, preset.link.d2h_bytes_per_s) < remote_ns);
        let relocation = 2 * (preset.relocation_setup_ns(4096) + ns(4096.0, 5.7e9));
        let restore = preset.copy_setup_ns + ns(2.0 * 8192.0, preset.vram_bytes_per_s);
        assert_eq!(p.repetitions, 4);
        assert_eq!(p.profiling_ns, 4 * (remote_ns + relocation + restore));
        assert!((p.slowdown - p.profiling_ns as f64 / normal as f64).abs() < 1e-12);
    }

    #[test]
    fn a_loop_one_thread_runs_alone_sets_the_kernels_least_time() {
        // As in the engine: 1000 trips of one thread wait for an L2 read each, however
        // little the kernel reads and computes.
        let preset = gtx480();
        let mut program = one_kernel(2 * PAGE_BYTES, vec![Access::uniform(0, 8192, 0)]);
        if let crate::program::Op::Launch(kernel) = &mut program.ops[1] {
            kernel.outer_loop = crate::program::OuterLoop::uniform(1, 1000);
        }
        let p = profile(&program, &preset, Granularity::Page, 4 << 20);
        let floor =
            crate::serial_loop::floor_ns(&preset, crate::program::OuterLoop::uniform(1, 1000));
        assert_eq!(p.normal_ns, floor);
        assert!(floor > 100_000);
    }
}
