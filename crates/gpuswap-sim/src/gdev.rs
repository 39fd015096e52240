//! How Gdev's CUDA runtime moves a memcpy to or from the GPU (the runtime every
//! configuration of the GPUswap evaluation ran on, its Gdev baseline with Gdev's
//! scheduler, native and GPUswap without; facts from its code, `shinpei0208/gdev`, the
//! kernel-module build). A preset whose `runtime` is Gdev's takes this path in every
//! mode.
//!
//! - A memcpy takes the device like a kernel: Gdev's scheduler runs copies and launches
//!   through one queue (`GDEV_SCHED_SDQ`, `common/gdev_sched.h`; the memory hooks call the
//!   compute ones, `common/gdev_sched.c`), and hands the GPU to another context only when
//!   the current one has nothing in flight. The engine models that as a device lock
//!   (`DeviceLock` in `engine/copy_engines.rs`); this module gives what one copy costs.
//! - Small uploads into small buffers are written by the CPU through the GPU's BAR
//!   mapping (`GDEV_MEMCPY_IOWRITE_LIMIT`, 4 MiB, for buffers mappable at all,
//!   `GDEV_MEM_MAPPABLE_LIMIT`, 4 MiB); tiny downloads are read the same way
//!   (`GDEV_MEMCPY_IOREAD_LIMIT`, 4 KiB).
//! - Everything else goes through two pinned bounce buffers in 256 KiB pieces
//!   (`GDEV_CHUNK_DEFAULT_SIZE`, `GDEV_PIPELINE_DEFAULT_COUNT` = 2,
//!   `mod/gdev/gdev_conf.h`): the CPU copies piece k + 1 while the DMA engine moves piece
//!   k (`__gmemcpy_to_device_p`, `common/gdev_api.c`), each piece its own DMA with its own
//!   setup and fence. The stream runs at one piece per the slower of the two stages; the
//!   first (upload) or last (download) piece's CPU copy does not overlap.
//!
//! What a staged piece costs, and what of it is the scheduler's (issue 43, item 3;
//! `shinpei0208/gdev` at e328438, read for this, nothing copied):
//! - Per piece, in every mode: the CPU copy into its bounce buffer, one `gdev_memcpy`
//!   and one `gdev_poll` (`common/gdev_api.c` 115-156 up, 311-367 down). `gdev_memcpy`
//!   (`common/gdev_nvidia_compute.c` 104-131) emits a memory barrier on the compute
//!   subchannel (`nvc0_membar`, `common/gdev_nvidia_nvc0.c` 379-387), a fence and, on
//!   Fermi, an M2MF copy (`.memcpy = nvc0_memcpy_m2mf`, same file 286-332 and 500):
//!   the graphics engine's copy, not the separate copy engine (PCOPY serves only the
//!   asynchronous path). `gdev_poll` spins on the fence (`gdev_nvidia_compute.c`
//!   187-213). The model's per-piece DMA setup (`Preset::copy_setup_ns`) stands for the
//!   barrier, fence and poll.
//! - Per call, with the scheduler only: `gdev_schedule_memory` before the copy and
//!   `gdev_select_next_memory` after it (`common/gdev_api.c` 287-302 up, 497-513
//!   down; both reach the compute hooks under `GDEV_SCHED_SDQ`, `common/gdev_sched.c`
//!   324-330 and 368-377, the hooks 203-311). Nothing in the piece loop calls the
//!   scheduler, so what grows with the bytes under it is the device held for the whole
//!   call, CPU copies and polls included: the engine's device lock over the copy's
//!   setup and flow.
//! - Not modelled: that the M2MF copy runs on the graphics engine means a staged piece
//!   cannot overlap another context's kernel without the scheduler either (the engine
//!   runs those copies beside kernels, as on a separate copy engine).

use crate::preset::Preset;
use crate::program::CopyDirection;

/// Bytes of one staged piece: `GDEV_CHUNK_DEFAULT_SIZE` = 0x40000 (kernel-module build).
pub const PIECE_BYTES: u64 = 256 << 10;
/// Largest upload the CPU writes through the BAR: `GDEV_MEMCPY_IOWRITE_LIMIT` = 4 MiB.
pub const IOWRITE_LIMIT_BYTES: u64 = 4 << 20;
/// Largest download the CPU reads through the BAR: `GDEV_MEMCPY_IOREAD_LIMIT` = 4 KiB.
pub const IOREAD_LIMIT_BYTES: u64 = 4 << 10;
/// Largest buffer the BAR maps: `GDEV_MEM_MAPPABLE_LIMIT` = 4 MiB
/// (`common/gdev_nvidia.h`); a small copy into a larger buffer goes by DMA. Another
/// revision of the same file sets 0x1000 (4 KiB, "small page size"); which one the
/// GPUswap testbed ran is unconfirmed.
pub const MAPPABLE_LIMIT_BYTES: u64 = 4 << 20;
/// unconfirmed: the testbed CPU's (Core i7-4770) single-thread copy into pinned memory,
/// about 6 GB/s.
pub const HOST_COPY_BYTES_PER_S: f64 = 6e9;
/// unconfirmed: CPU stores through a write-combined BAR mapping, about 1 GB/s.
pub const BAR_WRITE_BYTES_PER_S: f64 = 1e9;
/// A BAR read is one uncached 4-byte load, a round trip over the link each.
pub const BAR_READ_BYTES: u64 = 4;

/// What one Gdev memcpy costs: a fixed part before its bytes move, and the rate its
/// bytes can move at most (the link may give less).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CopyCost {
    /// Before the first byte crosses the link: the runtime's call, and the CPU copy of
    /// the piece that does not overlap.
    pub setup_ns: u64,
    /// The most the copy's bytes move per second.
    pub cap_bytes_per_s: f64,
}

/// The cost of a memcpy of `bytes` between host memory and a buffer of `buffer_bytes`,
/// the runtime's call costing `call_ns` (with Gdev's scheduler, its per-call cost).
pub fn copy_cost(
    preset: &Preset,
    direction: CopyDirection,
    bytes: u64,
    buffer_bytes: u64,
    call_ns: u64,
) -> CopyCost {
    let mappable = buffer_bytes <= MAPPABLE_LIMIT_BYTES;
    match direction {
        CopyDirection::HostToDevice if mappable && bytes <= IOWRITE_LIMIT_BYTES => CopyCost {
            setup_ns: call_ns,
            cap_bytes_per_s: BAR_WRITE_BYTES_PER_S,
        },
        CopyDirection::DeviceToHost if mappable && bytes <= IOREAD_LIMIT_BYTES => CopyCost {
            setup_ns: call_ns,
            // One round trip per load, one load at a time.
            cap_bytes_per_s: BAR_READ_BYTES as f64 / (preset.link.latency_ns as f64 / 1e9),
        },
        _ => {
            let piece = bytes.min(PIECE_BYTES) as f64;
            let link_bytes_per_s = match direction {
                CopyDirection::HostToDevice => preset.link.h2d_bytes_per_s,
                CopyDirection::DeviceToHost => preset.link.d2h_bytes_per_s,
            };
            let host_ns = piece / HOST_COPY_BYTES_PER_S * 1e9;
            let dma_ns = preset.copy_setup_ns as f64 + piece / link_bytes_per_s * 1e9;
            CopyCost {
                setup_ns: call_ns + host_ns.ceil() as u64,
                cap_bytes_per_s: piece / (host_ns.max(dma_ns) / 1e9),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preset;

    fn gtx480() -> Preset {
        preset::find("gtx480").unwrap()
    }

    /// Copying `bytes` in `direction` to or from a buffer of `buffer_bytes` on the
    /// testbed, at Gdev's per-call cost.
    fn testbed_cost(direction: CopyDirection, bytes: u64, buffer_bytes: u64) -> CopyCost {
        let p = gtx480();
        copy_cost(&p, direction, bytes, buffer_bytes, p.gdev_launch_ns)
    }

    #[test]
    fn large_copies_are_staged_at_the_slower_stage_per_piece() {
        let p = gtx480();
        let c = testbed_cost(CopyDirection::HostToDevice, 64 << 20, 64 << 20);
        // A 256 KiB piece: 43.7 us of CPU copy, 2.5 + 46.0 us of DMA; the DMA is slower.
        let dma_s = (p.copy_setup_ns as f64 + 262_144.0 / 5.7e9 * 1e9) / 1e9;
        assert!((c.cap_bytes_per_s - 262_144.0 / dma_s).abs() < 1.0);
        assert!(c.cap_bytes_per_s < p.link.h2d_bytes_per_s);
        assert_eq!(c.setup_ns, p.gdev_launch_ns + 43_691);
    }

    #[test]
    fn small_copies_into_small_buffers_go_through_the_bar() {
        let up = testbed_cost(CopyDirection::HostToDevice, 1 << 20, 1 << 20);
        assert_eq!(up.cap_bytes_per_s, BAR_WRITE_BYTES_PER_S);
        // Into a buffer too large to map: staged.
        let staged = testbed_cost(CopyDirection::HostToDevice, 1 << 20, 8 << 20);
        assert!(staged.cap_bytes_per_s > BAR_WRITE_BYTES_PER_S);
        // A 4-byte flag read back: one round trip of 700 ns.
        let flag = testbed_cost(CopyDirection::DeviceToHost, 4, 4);
        assert!((4.0 / flag.cap_bytes_per_s * 1e9 - 700.0).abs() < 1e-6);
        // 8 KiB back is above the read limit: staged.
        let back = testbed_cost(CopyDirection::DeviceToHost, 8 << 10, 8 << 10);
        assert!(back.cap_bytes_per_s > 1e9);
    }
}
