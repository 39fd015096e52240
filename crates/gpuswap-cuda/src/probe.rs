//! The link's remote-read cost, measured for the daemon's automatic choice (issue 40,
//! item 2): how many times longer the device's kernels take to read host memory mapped
//! into the device than to read VRAM. The daemon asks the first process of a device
//! (`Welcome::probe_remote`); the process measures once, before its first allocation,
//! and answers `ClientMsg::RemoteCost`.
//!
//! The probe reads with the GPU's own kernel (`probe.ptx`, the stand-in's built-in
//! `gpuswap_read_probe`), not the copy engines: the choice weighs kernels that read
//! chunks left in host memory. The same size is read from a VRAM handle and from a
//! pinned host handle, each three times (the least kept); the time of an empty launch
//! is taken off both, so the launch's fixed cost does not pull the ratio towards 1. The
//! size grows fourfold from [`FIRST_BYTES`] until the VRAM read takes
//! [`ENOUGH_LOCAL_NS`] beyond the launch, the host read [`ENOUGH_REMOTE_NS`], or the
//! size reaches [`MOST_BYTES`] (or a quarter of the free VRAM): on an H200 (20 GB/s
//! remote, 4.8 TB/s local) that is 64 MiB, 3.3 ms of host reads.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use crate::ffi::{DevPtr, Handle, LOCATION_DEVICE, LOCATION_HOST, driver};

/// The kernel, NUL-terminated for `cuModuleLoadData`.
const PTX: &str = concat!(include_str!("probe.ptx"), "\0");

/// The first size read.
const FIRST_BYTES: u64 = 4 << 10;

/// The largest size read, in VRAM and in pinned host memory each, for a few milliseconds.
const MOST_BYTES: u64 = 64 << 20;

/// A VRAM read this long beyond the launch's own time measures VRAM's speed, not the
/// timer's grain or the launch's jitter (a few microseconds).
const ENOUGH_LOCAL_NS: u64 = 20_000;

/// A host read this long is enough, whatever VRAM's: the ratio is then far above any
/// threshold the choice uses.
const ENOUGH_REMOTE_NS: u64 = 20_000_000;

/// Threads per block: a multiple of the warp, the usual choice for a streaming kernel.
const THREADS: u32 = 256;

/// Blocks per multiprocessor: enough warps in flight to keep the reads outstanding.
const BLOCKS_PER_SM: u32 = 4;

/// Reads of each kind at each size; the least counts.
const REPEATS: usize = 3;

/// Memory the probe maps, released on drop.
struct Region {
    va: DevPtr,
    bytes: u64,
    mapped: Vec<(DevPtr, u64, u64)>,
}

impl Region {
    /// A reservation of `bytes` with `parts` handles mapped back to back, each at its
    /// location and size.
    fn new(parts: &[(i32, u64)]) -> Result<Self, String> {
        let bytes = parts.iter().map(|p| p.1).sum();
        let va = driver::reserve(bytes, 0)?;
        let mut region = Self {
            va,
            bytes,
            mapped: Vec::new(),
        };
        let mut at = va;
        for &(location, len) in parts {
            let handle = driver::create(len, location)
                .map_err(|rc| format!("cuMemCreate of {len} bytes: error {rc}"))?;
            if let Err(e) = driver::map(at, len, handle) {
                let _ = driver::release(handle);
                return Err(e);
            }
            region.mapped.push((at, len, handle));
            at += len;
        }
        Ok(region)
    }

    /// Where part `i` is mapped.
    fn part(&self, i: usize) -> DevPtr {
        self.mapped[i].0
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        for &(at, len, handle) in &self.mapped {
            let _ = driver::unmap(at, len);
            let _ = driver::release(handle);
        }
        let _ = driver::unreserve(self.va, self.bytes);
    }
}

/// The probe's kernel and stream, unloaded and destroyed on drop.
struct Kernel {
    module: Handle,
    func: Handle,
    stream: Handle,
    blocks: u32,
}

impl Kernel {
    fn load() -> Result<Self, String> {
        let image = std::ffi::CStr::from_bytes_with_nul(PTX.as_bytes())
            .map_err(|e| format!("the probe's kernel: {e}"))?;
        let (module, func) = driver::load_kernel(image, c"gpuswap_read_probe")?;
        // Built at once, so that a failure below unloads the module.
        let mut kernel = Self {
            module,
            func,
            stream: std::ptr::null_mut(),
            blocks: 1,
        };
        kernel.stream = driver::stream_create()?;
        kernel.blocks = driver::multiprocessors()?.saturating_mul(BLOCKS_PER_SM);
        Ok(kernel)
    }

    /// The least time of [`REPEATS`] reads of `bytes` at `src`, launch to completion.
    fn read_ns(&self, src: DevPtr, bytes: u64, out: DevPtr) -> Result<u64, String> {
        let mut least = u64::MAX;
        for _ in 0..REPEATS {
            let (mut src, mut words, mut out) = (src, bytes / 4, out);
            let mut params: [*mut c_void; 3] = [
                (&raw mut src).cast(),
                (&raw mut words).cast(),
                (&raw mut out).cast(),
            ];
            let start = Instant::now();
            driver::launch(self.func, self.blocks, THREADS, self.stream, &mut params)?;
            driver::synchronize_stream(self.stream)?;
            least = least.min(duration_ns(start.elapsed()));
        }
        Ok(least)
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if !self.stream.is_null() {
            let _ = driver::stream_destroy(self.stream);
        }
        let _ = driver::unload(self.module);
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One size's reads: the times of an empty launch, of the VRAM read and of the host read.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Reads {
    empty_ns: u64,
    local_ns: u64,
    remote_ns: u64,
}

impl Reads {
    /// Whether these reads are long enough to trust their ratio.
    fn enough(self) -> bool {
        self.local_ns.saturating_sub(self.empty_ns) >= ENOUGH_LOCAL_NS
            || self.remote_ns >= ENOUGH_REMOTE_NS
    }

    /// A remote read's time over a local one's, beyond the launch's own time; at least
    /// 1 (a remote read is never cheaper: below is the timer's noise).
    fn remote_cost(self) -> f64 {
        let local = self.local_ns.saturating_sub(self.empty_ns).max(1);
        let remote = self.remote_ns.saturating_sub(self.empty_ns);
        (remote as f64 / local as f64).max(1.0)
    }
}

/// Measures the remote-read cost in the current context (the program's, before its
/// first allocation). `granularity`: the driver's allocation granularity.
pub(crate) fn remote_cost(granularity: u64) -> Result<f64, String> {
    let (free, _) = driver::memory_info().ok_or("cuMemGetInfo failed")?;
    let most = round_up(MOST_BYTES.min(free / 4), granularity);
    let kernel = Kernel::load()?;
    let region = Region::new(&[
        (LOCATION_DEVICE, most),
        (LOCATION_HOST, most),
        (LOCATION_DEVICE, granularity),
    ])?;
    let (local, remote, out) = (region.part(0), region.part(1), region.part(2));
    let mut bytes = FIRST_BYTES.min(most);
    loop {
        let reads = Reads {
            empty_ns: kernel.read_ns(local, 0, out)?,
            local_ns: kernel.read_ns(local, bytes, out)?,
            remote_ns: kernel.read_ns(remote, bytes, out)?,
        };
        if reads.enough() || bytes >= most {
            return Ok(reads.remote_cost());
        }
        bytes = (bytes * 4).min(most);
    }
}

fn round_up(bytes: u64, granularity: u64) -> u64 {
    bytes.div_ceil(granularity).max(1) * granularity
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launchs_own_time_is_taken_off_both_reads() {
        let r = Reads {
            empty_ns: 8_000,
            local_ns: 30_000,
            remote_ns: 3_308_000,
        };
        assert!(r.enough());
        assert_eq!(r.remote_cost(), 3_300_000.0 / 22_000.0);
        // VRAM read in less time than counts, host memory long enough.
        let slow_link = Reads {
            local_ns: 9_000,
            remote_ns: 21_000_000,
            ..r
        };
        assert!(slow_link.enough());
    }

    #[test]
    fn noise_never_makes_remote_reads_cheaper_than_local_ones() {
        let r = Reads {
            empty_ns: 5_000,
            local_ns: 40_000,
            remote_ns: 30_000,
        };
        assert_eq!(r.remote_cost(), 1.0);
        let empty_only = Reads {
            empty_ns: 5_000,
            local_ns: 4_000,
            remote_ns: 4_000,
        };
        assert_eq!(empty_only.remote_cost(), 1.0);
        assert!(!empty_only.enough());
    }

    #[test]
    fn sizes_are_whole_granules() {
        assert_eq!(round_up(64 << 20, 2 << 20), 64 << 20);
        assert_eq!(round_up(1, 2 << 20), 2 << 20);
        assert_eq!(round_up(0, 2 << 20), 2 << 20);
    }
}
