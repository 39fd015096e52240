//! Device presets: named parameter sets of real GPUs, every number with its source.
//!
//! Sources (short names as in `shared/spec/calibration.md`): uvmsmart (GPGPU-Sim UVM
//! Smart configs), superbench (microsoft/superbenchmark logs), nvbandwidth (NVIDIA
//! nvbandwidth issues), gh200-icpp24 (Schieffer et al., ICPP'24), deviceQuery dumps,
//! NVIDIA product datasheets, the GPUswap dissertation (Kehne 2019), the dated runs of
//! `gpuswap daemon` in docs/real-gpu/ (each figure names its file). "unconfirmed" marks a
//! value nobody was found measuring: chosen, said so, and easy to change here.

use crate::device::DeviceShape;
use serde::Serialize;

/// GiB in bytes.
const GIB: u64 = 1 << 30;
/// MiB in bytes.
const MIB: u64 = 1 << 20;
/// KiB in bytes.
const KIB: u64 = 1 << 10;

/// Hardware features that later manager modes depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Features {
    /// Replayable GPU page faults (demand paging).
    pub page_faults: bool,
    /// Hardware access counters (per-region access notifications).
    pub access_counters: bool,
    /// Referenced bits in the GPU's view of host pages (a wish-list feature, simulated).
    pub reference_bits: bool,
    /// Compute preemption (stop a running kernel instead of draining).
    pub preemption: bool,
}

/// The interconnect between GPU and host memory, one figure per direction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LinkSpec {
    /// What the link is.
    pub name: &'static str,
    /// Sustained host-to-device bandwidth of pinned DMA copies.
    pub h2d_bytes_per_s: f64,
    /// Sustained device-to-host bandwidth of pinned DMA copies.
    pub d2h_bytes_per_s: f64,
    /// Latency of one GPU read of host memory.
    pub latency_ns: u64,
    /// Transfer-size curve `bw(s) = peak * (2/pi) * atan(k * s / 1 KiB)` (the research
    /// simulator's fit); `None` when the preset models small transfers by the copy engine's
    /// setup cost alone.
    pub size_curve_k_per_kib: Option<f64>,
    /// Non-posted requests (reads) the GPU can keep in flight on the link: the MLP of the
    /// remote-latency term. PCIe tags: 32 without extended tags, 256 with; 1 where the
    /// GPU's memory unit serves remote reads one at a time (`gtx1080ti-uvmsmart`).
    pub outstanding_reads: u32,
}

impl LinkSpec {
    /// The same link with `factor` times its bandwidth in each direction, its latency
    /// and outstanding reads unchanged: the adaptive-runtime paper's interconnect study
    /// halves and doubles bandwidth alone (`device.link_scale`).
    pub fn scaled(self, factor: f64) -> Self {
        LinkSpec {
            h2d_bytes_per_s: self.h2d_bytes_per_s * factor,
            d2h_bytes_per_s: self.d2h_bytes_per_s * factor,
            ..self
        }
    }
}

/// Device memory (DRAM) behind the L2: what makes an access cost more than its bytes
/// at peak bandwidth.
///
/// A DRAM channel streams its peak only while its accesses hit the open row; an access
/// to another row must wait for an activation, and a channel can activate rows only so
/// often (tRRD between two activations, over the banks). `row_switch_bytes` is what
/// the channel would have streamed in that interval: its atom (bus width x burst
/// length) times tRRD over tCCD, the interval between two column commands. An access
/// in random order opens a row of its own, so it costs at least that much channel time.
/// And a load waits the DRAM's latency while its miss-status register is held, so the
/// loads the SMs keep pending bound the rate of reads (Little's law).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DramSpec {
    /// Latency of a load that misses the L2, unloaded.
    pub latency_ns: u64,
    /// Bytes a channel streams between two row activations (atom x tRRD / tCCD): the
    /// least channel time an access that opens a row takes.
    pub row_switch_bytes: u64,
    /// Bytes one isolated read moves from DRAM: the L1's line where the L1 caches global
    /// loads in whole lines (Fermi), one 32-byte sector where the caches are sectored.
    pub read_sector_bytes: u64,
}

/// The CUDA runtime a testbed's programs link: it decides how a memcpy reaches the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CudaRuntime {
    /// NVIDIA's runtime: one DMA per memcpy, after its setup.
    Nvidia,
    /// Gdev's runtime (`crate::gdev`): BAR writes and reads for small copies, staged
    /// pieces through bounce buffers for the rest, in every mode; its scheduler (the
    /// device lock, the per-call cost) only in mode `gdev`.
    Gdev,
}

/// One GPU model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Preset {
    /// Name used in scenario files.
    pub name: &'static str,
    /// One line for `gpuswap presets`.
    pub description: &'static str,
    /// Installed VRAM.
    pub vram_bytes: u64,
    /// VRAM bandwidth.
    pub vram_bytes_per_s: f64,
    /// VRAM's row and latency behaviour.
    pub dram: DramSpec,
    /// The CUDA runtime the testbed's programs link, whose memcpy path they take.
    pub runtime: CudaRuntime,
    /// VRAM the driver keeps for itself (channels, push buffers, page tables); never
    /// available to tenants.
    pub driver_reserved_bytes: u64,
    /// Host memory of the testbed machine.
    pub host_memory_bytes: u64,
    /// Host link.
    pub link: LinkSpec,
    /// DMA copy engines usable for memcpy.
    pub copy_engines: u32,
    /// Fixed cost of one DMA copy (setup, descriptor, completion).
    pub copy_setup_ns: u64,
    /// Driver cost of relocating one chunk besides its DMA, the part that does not grow
    /// with the chunk: set up the copy, flush the GPU's TLB.
    pub relocation_fixed_ns: u64,
    /// The part that grows with the chunk, per 4 KiB page: allocate and map the
    /// destination's page, rewrite its page-table entry, free the source's.
    pub relocation_ns_per_page: u64,
    /// Driver CPU time the eviction policy spends per list entry it walks.
    pub policy_ns_per_entry: u64,
    /// Gdev mode: the software scheduler's cost per kernel launch and per memcpy.
    pub gdev_launch_ns: u64,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Cache-line reads one SM can keep pending (its L1 miss-status holding registers):
    /// with [`Preset::sms`], a kernel's weight against copies on the link.
    pub pending_reads_per_sm: u32,
    /// Threads one SM holds at once (the architecture's occupancy limit): with
    /// [`Preset::sms`], how far ahead of its slowest warp a kernel reaches, the wavefront
    /// whose far faults arrive together in unified memory.
    pub resident_threads_per_sm: u32,
    /// L2 cache shared by the SMs: how much of a randomly accessed buffer a kernel
    /// re-reads without going to VRAM.
    pub l2_bytes: u64,
    /// Arithmetic throughput: cores x clock (instructions per second).
    pub ops_per_s: f64,
    /// GPU-side cost of one kernel launch and completion.
    pub kernel_launch_ns: u64,
    /// CPU time to enqueue one launch (the call returns after it).
    pub launch_enqueue_ns: u64,
    /// Launches a tenant may have pending before a launch call blocks.
    pub launch_queue_depth: usize,
    /// CPU time of one driver allocation or free call.
    pub driver_call_ns: u64,
    /// Unified memory: far faults fetched and serviced per batch.
    pub fault_batch_pages: u64,
    /// Unified memory: the fixed cost of servicing one fault batch (interrupt, fetch,
    /// page-table updates, replay), besides the migration's transfer.
    pub fault_service_ns: u64,
    /// The CUDA runtime's per-tenant stack (local memory) buffer.
    pub runtime_stack_bytes: u64,
    /// The runtime's code buffer per tenant.
    pub runtime_code_bytes: u64,
    /// The runtime's constant buffer per tenant.
    pub runtime_constant_bytes: u64,
    /// Features.
    pub features: Features,
    /// How the GPU time-slices between processes without MPS: with compute preemption
    /// (`Some`: a context runs for its slice, then is preempted even mid-kernel), or
    /// one whole kernel per turn (`None`: Fermi, which has no compute preemption).
    pub time_slicing: Option<TimeSlicing>,
}

/// Time slicing with compute preemption between processes (Pascal and later): each
/// context with work runs for up to `slice_ns`, then the GPU saves its state, even in
/// the middle of a kernel, and runs the next context's for theirs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TimeSlicing {
    /// How long a context runs before the GPU preempts it for another with work.
    pub slice_ns: u64,
    /// The device time a preemption takes (saving the preempted context's state), in
    /// which no context runs.
    pub preemption_cost_ns: u64,
}

/// Common small costs measured on recent GPUs, used where a preset has nothing better.
mod common {
    /// Fixed cost of one async memcpy: about 2-2.5 us (calibration.md: V100 small copies,
    /// Titan V 4 KB copy).
    pub const COPY_SETUP_NS: u64 = 2_500;
    /// Kernel launch plus completion: 5-9 us (calibration.md, desktop and test baselines);
    /// the low end, since back-to-back launches overlap part of it.
    pub const KERNEL_LAUNCH_NS: u64 = 5_000;
    /// Enqueueing a launch: about 2.5-3 us (calibration.md).
    pub const LAUNCH_ENQUEUE_NS: u64 = 2_500;
    /// Pending launches before cudaLaunchKernel blocks: unconfirmed, 1024, the depth
    /// commonly reported for NVIDIA drivers' launch queues.
    pub const LAUNCH_QUEUE_DEPTH: usize = 1024;
    /// Pending launches on the GPUswap testbed (Gdev's runtime over pscnv): a channel's
    /// indirect-buffer ring has 2^9 = 512 entries (`ib_order = 9`, "hardcoded", in
    /// Gdev's `gdev_raw_ctx_new` for pscnv), and a launch takes one, its commands and
    /// fence fired together (`gdev_launch`); the ring holds one less than its size. Its
    /// 1 MiB push buffer (`pb_order = 20`) holds more launches than that.
    pub const GDEV_PSCNV_LAUNCH_QUEUE_DEPTH: usize = 511;
    /// One cudaMalloc/cudaFree on a stock driver: unconfirmed; 10 us, the order of the
    /// VMM API's map+set-access costs per 2 MB (kvcached) without physical allocation.
    pub const DRIVER_CALL_NS: u64 = 10_000;
    /// uvm-driver.md: uvm_perf_fault_batch_count = 256, the driver's default.
    pub const FAULT_BATCH_PAGES: u64 = 256;
    /// uvm-driver.md: the research simulator's far-fault latency, 66 645 cycles at
    /// 1481 MHz = 45 us (GTX 1080 Ti configuration); unconfirmed for other GPUs.
    pub const FAULT_SERVICE_NS: u64 = 45_000;
    /// Fixed part of a relocation on the GPUswap prototype: unconfirmed, 10 us (the DMA
    /// setup of about 2.5 us plus a TLB flush and the driver's bookkeeping).
    pub const GTX480_RELOCATION_FIXED_NS: u64 = 10_000;
    /// Per-page part on the prototype, derived: DMA setup was about 13-14 % of the
    /// eviction latency with 4 MiB chunks whose DMA takes 736 us at 5.7 GB/s
    /// (gpuswap.md), so setup = 0.135 / 0.865 x 736 us = 115 us per 1024 pages; less the
    /// fixed part, (115 - 10) us / 1024 = 103 ns per page (a page allocation, its DMA
    /// mapping and a page-table entry).
    pub const GTX480_RELOCATION_NS_PER_PAGE: u64 = 103;
    /// Per-page relocation cost through the CUDA VMM API on recent GPUs: cuMemMap
    /// 1.45 us + cuMemSetAccess 36 us + cuMemUnmap 25.6 us per 2 MB (kvcached, A100),
    /// about 65 us per 512 pages, 127 ns each; the host backing comes from a
    /// preallocated pool. The fixed part is the DMA setup, `COPY_SETUP_NS`.
    pub const VMM_RELOCATION_NS_PER_PAGE: u64 = 127;
    /// Fixed part of a relocation through the VMM API on an H100, measured: gpuswapd and
    /// its interposer moving chunks of 2 to 64 MiB to host memory on an H100 SXM 80GB
    /// (driver 580.159.04, 2026-11-26, docs/real-gpu.md, `scripts/gpu-check.sh`'s chunks
    /// step). A least-squares line over the chunk sizes gives, per chunk, the copy phase
    /// (a scratch mapping, the copy, its wait, the unmapping) 167 us + 32.9 us/MiB, the
    /// remap 86 us + 9.9 us/MiB, the old memory's release 19 us + 0.8 us/MiB: 271 us
    /// fixed (a relocation's copy pays no other setup). The host memory's creation (187
    /// us/MiB, pinning on demand) is left out: the model takes host backing from a
    /// pool. The line is the evictions'; the model charges it both ways, where moves
    /// back to VRAM measured about 200 us + 63 us/MiB with the host memory's release
    /// (1.4x cheaper than the model at 2 MiB, 0.7x at 64 MiB).
    pub const H100_RELOCATION_FIXED_NS: u64 = 271_000;
    /// Per-page part of the same measurement: 43.6 us/MiB, less the DMA at the preset's
    /// 52.8 GB/s (19.9 us/MiB), over 256 pages: 93 ns.
    pub const H100_RELOCATION_NS_PER_PAGE: u64 = 93;
    /// Policy time per list entry walked: unconfirmed, 50 ns, about one cache miss per
    /// entry of a kernel linked list (the dissertation reports that many small chunks
    /// cost policy time: the walks grow with the chunks per tenant).
    pub const POLICY_NS_PER_ENTRY: u64 = 50;
    /// Gdev's per-launch scheduling cost: unconfirmed, 40 us (a launch goes through an
    /// ioctl into Gdev's kernel-space scheduler and a wake-up of the launching thread).
    /// The GPUswap paper measured 4.6-95 % slowdown from Gdev's scheduler alone; apps with
    /// many short kernels are the ones that suffer.
    pub const GDEV_LAUNCH_NS: u64 = 40_000;
    /// Time slice between processes under compute preemption: assumed 2 ms until a
    /// lent GPU measures it (two processes, one with long kernels). NVIDIA publishes
    /// no default; 2 ms is the short setting of `nvidia-smi compute-policy
    /// --set-timeslice` (Red Hat's "GPU Timeslicing" guide: short 2 ms, medium 10 ms,
    /// long 30 ms) and the timeslice NVIDIA DRIVE OS recommends at most for
    /// medium-priority contexts ("Setting the Timeslice", DRIVE OS 6.0 Linux SDK).
    pub const TIME_SLICE_NS: u64 = 2_000_000;
    /// Device time of one compute preemption (the context's registers and shared
    /// memory saved to VRAM at instruction level, NVIDIA Pascal GP100 whitepaper):
    /// assumed 40 us, the preemption latency GPreempt measured for context-switch
    /// preemption (Fan et al., USENIX ATC'25: "within 40 us"), until a lent GPU
    /// measures it.
    pub const PREEMPTION_COST_NS: u64 = 40_000;
    /// Code buffer per tenant: unconfirmed, 1 MiB (Gdev allocates code per module).
    pub const CODE_BYTES: u64 = super::MIB;
    /// Constant buffer per tenant: 64 KiB, the size of CUDA constant memory.
    pub const CONSTANT_BYTES: u64 = 64 << 10;
    /// Per-thread stack: 1 KiB, the default cudaLimitStackSize.
    pub const STACK_BYTES_PER_THREAD: u64 = 1 << 10;
}

/// Every preset, in the order `gpuswap presets` lists them.
pub fn all() -> Vec<Preset> {
    vec![
        gtx480(),
        gtx480_refbits(),
        gtx1080ti(),
        gtx1080ti_uvmsmart(),
        v100_pcie_32gb(),
        a100_80gb(),
        h100_pcie_80gb(),
        h100_sxm(),
        h200(),
        gh200(),
    ]
}

/// The GPUswap testbed, the base of the GTX 480 family.
fn gtx480() -> Preset {
    use common::*;
    Preset {
        name: "gtx480",
        description: "GeForce GTX 480 (Fermi), the GPUswap testbed: 1.5 GB GDDR5, PCIe 2.0 x16",
        // calibration.md: 1536 MB GDDR5.
        vram_bytes: 1536 * MIB,
        // calibration.md: 1848 MHz x 2 x 384 bit = 177.4 GB/s.
        vram_bytes_per_s: 177.4e9,
        // spec gpuswap.md, the testbed: "pscnv driver, Gdev CUDA runtime". Native,
        // GPUswap and Gdev runs all went through its copy path.
        runtime: CudaRuntime::Gdev,
        dram: DramSpec {
            // CUDA C Programming Guide (4.x-5.x, 5.2.3 "Multiprocessor Level"): an
            // operand in off-chip memory costs "400 to 800 clock cycles" on compute
            // capability 1.x and 2.x; the midpoint, 600 cycles at the 1.401 GHz
            // shader clock, 428 ns.
            latency_ns: 428,
            // GPGPU-Sim's GTX 480 configuration (configs/tested-cfgs/SM2_GTX480):
            // 64-bit partitions of two 32-bit chips, burst 8 (a 64-byte atom),
            // "GDDR5 timing from hynix H5GQ1H24AFR": tCCD 2, tRRD 6 command cycles;
            // 64 x 6 / 2 = 192 bytes.
            row_switch_bytes: 192,
            // Fermi's L1 caches global loads in 128-byte lines (CUDA C Programming
            // Guide G.4.2; the same configuration's L1 is not sectored).
            read_sector_bytes: 128,
        },
        // gpuswap.md: the prototype kept about 20 MiB of driver structures in VRAM.
        driver_reserved_bytes: 20 * MIB,
        // gpuswap.md: testbed with 16 GiB RAM.
        host_memory_bytes: 16 * GIB,
        link: LinkSpec {
            name: "PCIe 2.0 x16",
            // calibration.md: 5.7 GB/s pinned copies measured on a GTX 580 (NVIDIA FAQ
            // says up to 6.0); no direction split known, same both ways.
            h2d_bytes_per_s: 5.7e9,
            d2h_bytes_per_s: 5.7e9,
            // unconfirmed: "several hundred ns" (dissertation); 700 ns chosen.
            latency_ns: 700,
            size_curve_k_per_kib: None,
            // PCIe 2.0 default: 5-bit tag field, 32 outstanding reads.
            outstanding_reads: 32,
        },
        // calibration.md: 1 copy engine on GeForce Fermi (unconfirmed).
        copy_engines: 1,
        copy_setup_ns: COPY_SETUP_NS,
        relocation_fixed_ns: GTX480_RELOCATION_FIXED_NS,
        relocation_ns_per_page: GTX480_RELOCATION_NS_PER_PAGE,
        policy_ns_per_entry: POLICY_NS_PER_ENTRY,
        gdev_launch_ns: GDEV_LAUNCH_NS,
        // uvmsmart GTX480 config: 15 SMs; 32 cores each at 1401 MHz (shader clock,
        // NVIDIA specification).
        sms: 15,
        // GPGPU-Sim's GTX 480 configuration (configs/GTX480/gpgpusim.config, L1D
        // "A:32:8"): 32 miss-status registers per SM (its newer SM2_GTX480 config
        // says 64).
        pending_reads_per_sm: 32,
        // CUDA C Programming Guide, table of compute capabilities: 1536 resident
        // threads per SM on compute capability 2.x (Fermi).
        resident_threads_per_sm: 1536,
        // NVIDIA Fermi compute architecture whitepaper (GF100, 2009): 768 KB unified
        // L2 shared by all SMs, in six memory partitions; the GTX 480's 384-bit bus
        // keeps all six (it disables one of GF100's 16 SMs, not a partition).
        l2_bytes: 768 * KIB,
        ops_per_s: 480.0 * 1.401e9,
        kernel_launch_ns: KERNEL_LAUNCH_NS,
        launch_enqueue_ns: LAUNCH_ENQUEUE_NS,
        launch_queue_depth: GDEV_PSCNV_LAUNCH_QUEUE_DEPTH,
        driver_call_ns: DRIVER_CALL_NS,
        fault_batch_pages: FAULT_BATCH_PAGES,
        fault_service_ns: FAULT_SERVICE_NS,
        // apps.md: the stack buffers of two instances take about 100 MiB together on
        // the GPUswap testbed (Gdev runtime); 48 MiB each leaves room for code and
        // constants.
        runtime_stack_bytes: 48 * MIB,
        runtime_code_bytes: CODE_BYTES,
        runtime_constant_bytes: CONSTANT_BYTES,
        // calibration.md: no replayable faults, no access counters, no preemption.
        features: Features {
            page_faults: false,
            access_counters: false,
            reference_bits: false,
            preemption: false,
        },
        // Fermi has no compute preemption: contexts take whole kernels in turn.
        time_slicing: None,
    }
}

/// The hardware wish-list of the dissertation: the GPUswap testbed with referenced bits
/// on the GPU's view of host pages, for the reverse-swapping chunk policy. Simulated; no
/// such GPU exists.
fn gtx480_refbits() -> Preset {
    let testbed = gtx480();
    Preset {
        name: "gtx480-refbits",
        description: "GTX 480 with simulated reference bits (a hardware wish-list feature)",
        features: Features {
            reference_bits: true,
            ..testbed.features
        },
        ..testbed
    }
}

/// The base of the unified-memory GPUs (Pascal, Volta, Ampere, Hopper) on NVIDIA's
/// runtime: the figures they share, each with its source. A member sets what is its own
/// (zero here): its name and description, VRAM, the DRAM's row switch, host memory, the
/// link's name, bandwidths and latency, copy engines, SMs and their pending reads, L2,
/// arithmetic; then [`Preset::with_full_stack`] sizes its stack.
fn unified_memory_gpu() -> Preset {
    use common::*;
    Preset {
        name: "",
        description: "",
        vram_bytes: 0,
        vram_bytes_per_s: 0.0,
        runtime: CudaRuntime::Nvidia,
        dram: DramSpec {
            // unconfirmed: 500 ns, the order of pointer-chase measurements of recent
            // NVIDIA GPUs; with 28 SMs x 256 pending lines (the GTX 1080 Ti, the
            // smallest member) it never bounds a kernel below 1.8 TB/s, so it does not
            // matter here.
            latency_ns: 500,
            row_switch_bytes: 0,
            // One 32-byte sector a miss: Pascal's L1 does not cache global loads by
            // default (GPGPU-Sim SM6_GTX1080Ti, gmem_skip_L1D 1), so a miss moves one
            // L2 sector; from Volta on the L1 and L2 are sectored (GPGPU-Sim
            // SM7_QV100, Accel-Sim SM80_A100 and SM90_H100; the GH200 as the H100).
            read_sector_bytes: 32,
        },
        // unconfirmed: 64 MiB for channels, push buffers and page tables.
        driver_reserved_bytes: 64 * MIB,
        host_memory_bytes: 0,
        link: LinkSpec {
            name: "",
            h2d_bytes_per_s: 0.0,
            d2h_bytes_per_s: 0.0,
            latency_ns: 0,
            // Small copies are explained by the 2.5 us setup (calibration.md,
            // superbench on a V100: 1 KB at 0.4 GB/s).
            size_curve_k_per_kib: None,
            // PCIe 3.0 and later with extended tags: 256 outstanding reads.
            outstanding_reads: 256,
        },
        copy_engines: 0,
        copy_setup_ns: COPY_SETUP_NS,
        relocation_fixed_ns: COPY_SETUP_NS,
        relocation_ns_per_page: VMM_RELOCATION_NS_PER_PAGE,
        policy_ns_per_entry: POLICY_NS_PER_ENTRY,
        gdev_launch_ns: GDEV_LAUNCH_NS,
        sms: 0,
        pending_reads_per_sm: 0,
        // CUDA C Programming Guide, table of compute capabilities: 2048 resident
        // threads per SM on compute capabilities 6.x to 9.0.
        resident_threads_per_sm: 2048,
        l2_bytes: 0,
        ops_per_s: 0.0,
        kernel_launch_ns: KERNEL_LAUNCH_NS,
        launch_enqueue_ns: LAUNCH_ENQUEUE_NS,
        launch_queue_depth: LAUNCH_QUEUE_DEPTH,
        driver_call_ns: DRIVER_CALL_NS,
        fault_batch_pages: FAULT_BATCH_PAGES,
        fault_service_ns: FAULT_SERVICE_NS,
        runtime_stack_bytes: 0,
        runtime_code_bytes: CODE_BYTES,
        runtime_constant_bytes: CONSTANT_BYTES,
        // calibration.md: replayable faults and access counters, compute preemption
        // since Pascal. The GTX 1080 Ti has no access counters (calibration.md), but the
        // research simulator it stands for models them (delayed migration counts remote
        // reads per 2 MiB block, `uvm-driver.md`), so its simulated device has them.
        features: Features {
            page_faults: true,
            access_counters: true,
            reference_bits: false,
            preemption: true,
        },
        // Compute preemption since Pascal (NVIDIA Pascal GP100 whitepaper, "Compute
        // Preemption"): contexts are time-sliced even mid-kernel.
        time_slicing: Some(TimeSlicing {
            slice_ns: TIME_SLICE_NS,
            preemption_cost_ns: PREEMPTION_COST_NS,
        }),
    }
}

impl Preset {
    /// What a remote read costs against a local one, as bandwidths: VRAM's over the
    /// link's host-to-device rate. What the automatic choice of GPU time starts from
    /// (`[manager] remote_cost` overrides it).
    pub fn remote_cost(&self) -> f64 {
        self.vram_bytes_per_s / self.link.h2d_bytes_per_s
    }

    /// This preset with the default stack for every thread its SMs hold at once: SMs x
    /// resident threads x 1 KiB (the default cudaLimitStackSize) per thread.
    fn with_full_stack(self) -> Self {
        Preset {
            runtime_stack_bytes: u64::from(self.sms)
                * u64::from(self.resident_threads_per_sm)
                * common::STACK_BYTES_PER_THREAD,
            ..self
        }
    }
}

/// The unified-memory papers' simulated GPU.
fn gtx1080ti() -> Preset {
    let base = unified_memory_gpu();
    Preset {
        name: "gtx1080ti",
        description: "GeForce GTX 1080 Ti (Pascal), the unified-memory papers' simulated GPU: 11 GB, PCIe 3.0 x16",
        // calibration.md: 11 GB GDDR5X (11264 MiB installed).
        vram_bytes: 11264 * MIB,
        // calibration.md: 5505 MHz x 2 x 352 bit = 484 GB/s.
        vram_bytes_per_s: 484e9,
        dram: DramSpec {
            // GPGPU-Sim SM6_GTX1080Ti configuration: one 32-bit GDDR5X chip per
            // channel, burst 8 ("the atom size of GDDR5X ... is 32 bytes"), the
            // Hynix H5GQ1H24AFR timing (tCCD 2, tRRD 6): 32 x 6 / 2 = 96 bytes.
            row_switch_bytes: 96,
            ..base.dram
        },
        // unconfirmed: 32 GiB host.
        host_memory_bytes: 32 * GIB,
        link: LinkSpec {
            name: "PCIe 3.0 x16",
            // calibration.md (uvmsmart fit): 12 GB/s at the top of the curve.
            h2d_bytes_per_s: 12e9,
            d2h_bytes_per_s: 12e9,
            // unconfirmed: 1 us, between the dissertation's "several hundred ns" and
            // the 1.2 us measured on an H200 (`gtx1080ti-uvmsmart` has the research
            // simulator's remote reads instead).
            latency_ns: 1_000,
            // calibration.md: uvmsmart's fit k = 0.07292 per KB; the fit includes the
            // fixed cost of small transfers, hence copy_setup_ns = 0 below.
            size_curve_k_per_kib: Some(0.07292),
            ..base.link
        },
        // calibration.md: 2 copy engines.
        copy_engines: 2,
        // The link's size curve holds the fixed cost of small transfers.
        copy_setup_ns: 0,
        // calibration.md: 28 SMs; 128 cores each, 1481 MHz (uvmsmart clock).
        sms: 28,
        // GPGPU-Sim SM6_GTX1080Ti configuration, L1D "A:256:8": 256 per SM.
        pending_reads_per_sm: 256,
        // NVIDIA GTX 1080 Ti specification (reviewer's guide, quoted by vortez.net's
        // review): L2 2816 KB, 11 of GP102's 12 memory controllers with 256 KB each.
        l2_bytes: 2816 * KIB,
        ops_per_s: 3584.0 * 1.481e9,
        ..base
    }
    .with_full_stack()
}

/// The GTX 1080 Ti as GPGPU-Sim UVM Smart simulates it, whose figures the adaptive
/// paper gives: its GMMU serves the kernels' reads of host memory one at a time.
fn gtx1080ti_uvmsmart() -> Preset {
    let card = gtx1080ti();
    Preset {
        name: "gtx1080ti-uvmsmart",
        description: "GeForce GTX 1080 Ti as GPGPU-Sim UVM Smart simulates it (the adaptive paper): remote reads one at a time",
        link: LinkSpec {
            // uvmsmart (`src/gpgpu-sim/gpu-sim.cc`, `gmmu_t::get_ready_cycle_dma`): a
            // kernel's read of host memory is a DMA request of one memory fetch, 200
            // core cycles long, 135 ns at 1481 MHz...
            latency_ns: 135,
            // ...through a PCIe read queue that holds one transfer at a time
            // (`pcie_read_latency_queue`; remote reads go before page migrations), so
            // reads do not overlap each other.
            outstanding_reads: 1,
            ..card.link
        },
        ..card
    }
}

/// PILOT's GPU.
fn v100_pcie_32gb() -> Preset {
    let base = unified_memory_gpu();
    Preset {
        name: "v100-pcie-32gb",
        description: "Tesla V100 PCIe 32 GB (Volta), PILOT's GPU: HBM2, PCIe 3.0 x16",
        vram_bytes: 32 * GIB,
        // calibration.md: 898 GB/s.
        vram_bytes_per_s: 898e9,
        dram: DramSpec {
            // GPGPU-Sim SM7_QV100 configuration: 128-bit HBM2 channels, burst 2 (a
            // 32-byte atom), JESD235 timing at 850 MHz (tCCD 1, tRRD 3):
            // 32 x 3 / 1 = 96 bytes.
            row_switch_bytes: 96,
            ..base.dram
        },
        // unconfirmed: 128 GiB host.
        host_memory_bytes: 128 * GIB,
        link: LinkSpec {
            name: "PCIe 3.0 x16",
            // calibration.md (superbench): pinned H2D 12.4 GB/s, D2H 13.0 GB/s.
            h2d_bytes_per_s: 12.4e9,
            d2h_bytes_per_s: 13.0e9,
            // unconfirmed: 1 us.
            latency_ns: 1_000,
            ..base.link
        },
        // calibration.md: 7 copy engines.
        copy_engines: 7,
        // calibration.md: 80 SMs; 64 FP32 cores each at 1380 MHz boost (NVIDIA V100
        // PCIe datasheet).
        sms: 80,
        // GPGPU-Sim SM7_QV100 configuration, L1D "A:256:8": 256 per SM.
        pending_reads_per_sm: 256,
        // NVIDIA Tesla V100 GPU architecture whitepaper (2017), table 1: L2 cache size
        // 6144 KB (6 MB, OLCF's Summit V100 guide).
        l2_bytes: 6 * MIB,
        ops_per_s: 5120.0 * 1.38e9,
        ..base
    }
    .with_full_stack()
}

/// The A100 80 GB PCIe.
fn a100_80gb() -> Preset {
    let base = unified_memory_gpu();
    Preset {
        name: "a100-80gb",
        description: "A100 80 GB PCIe (Ampere): HBM2e, PCIe 4.0 x16",
        vram_bytes: 80 * GIB,
        // calibration.md: 1935 GB/s (PCIe version).
        vram_bytes_per_s: 1935e9,
        dram: DramSpec {
            // Accel-Sim's SM80_A100 configuration: 16-byte HBM2e channels, burst 2
            // (32-byte atom), tCCD 1, tRRD 7: 32 x 7 / 1 = 224 bytes.
            row_switch_bytes: 224,
            ..base.dram
        },
        // unconfirmed: 512 GiB host.
        host_memory_bytes: 512 * GIB,
        link: LinkSpec {
            name: "PCIe 4.0 x16",
            // calibration.md (nvbandwidth 53): pinned H2D 25 GB/s, D2H about 25.
            h2d_bytes_per_s: 25e9,
            d2h_bytes_per_s: 25e9,
            // unconfirmed: 1.2 us, as measured on an H200 (calibration.md).
            latency_ns: 1_200,
            ..base.link
        },
        // calibration.md: 3 copy engines.
        copy_engines: 3,
        // calibration.md: 108 SMs; 64 FP32 cores each at 1410 MHz boost (NVIDIA A100
        // datasheet).
        sms: 108,
        // GPGPU-Sim SM80_A100 configuration, L1D "A:512:64": 512 per SM.
        pending_reads_per_sm: 512,
        // NVIDIA A100 Tensor Core GPU architecture whitepaper (2020): 40 MB L2;
        // deviceQuery on an A100 80GB PCIe reports 41943040 bytes (40 MiB) too.
        l2_bytes: 40 * MIB,
        ops_per_s: 6912.0 * 1.41e9,
        ..base
    }
    .with_full_stack()
}

/// The H100 PCIe 80 GB, the GPU the real backend was measured on.
fn h100_pcie_80gb() -> Preset {
    use common::*;
    let base = unified_memory_gpu();
    Preset {
        name: "h100-pcie-80gb",
        description: "H100 PCIe 80 GB (Hopper): HBM2e, PCIe 5.0 x16",
        vram_bytes: 80 * GIB,
        // calibration.md: 2039 GB/s.
        vram_bytes_per_s: 2039e9,
        dram: DramSpec {
            // Accel-Sim's SM90_H100 configuration: 8-byte HBM channels, burst 4
            // (32-byte atom), its HBM3 timing tCCD 1, tRRD 6: 32 x 6 / 1 = 192
            // bytes.
            row_switch_bytes: 192,
            ..base.dram
        },
        // unconfirmed: 512 GiB host.
        host_memory_bytes: 512 * GIB,
        link: LinkSpec {
            name: "PCIe 5.0 x16",
            // calibration.md: about 57 GB/s pinned H2D seen on H100 systems; D2H
            // 52.8 GB/s (SM-driven, nvbandwidth 24; form factor unconfirmed).
            h2d_bytes_per_s: 57e9,
            d2h_bytes_per_s: 52.8e9,
            // calibration.md: GPU read of host memory about 1.2 us (H200 SXM);
            // 1199 ns measured with shared/calibration-kit on an H100 SXM 80GB,
            // 2026-11-26 (its pinned copies: 55.0 GB/s H2D, 54.8 GB/s D2H).
            latency_ns: 1_200,
            ..base.link
        },
        // calibration.md: 3 copy engines.
        copy_engines: 3,
        relocation_fixed_ns: H100_RELOCATION_FIXED_NS,
        relocation_ns_per_page: H100_RELOCATION_NS_PER_PAGE,
        // calibration.md: 114 SMs; 128 FP32 cores each at 1755 MHz boost (NVIDIA H100
        // PCIe datasheet).
        sms: 114,
        // GPGPU-Sim SM90_H100 configuration, L1D "A:512:64": 512 per SM.
        pending_reads_per_sm: 512,
        // NVIDIA H100 Tensor Core GPU architecture whitepaper (2022): H100 PCIe, 114
        // SMs, L2 cache size 50 MB; nvaccelinfo on an H100 PCIe reports 52428800
        // bytes (50 MiB).
        l2_bytes: 50 * MIB,
        ops_per_s: 14592.0 * 1.755e9,
        ..base
    }
    .with_full_stack()
}

/// The H100 SXM5 80 GB of the dated H100 runs in docs/real-gpu.md (2026-11-26): the
/// GH100 with five HBM3 stacks, on PCIe to an x86 host. Figures from those runs cite
/// their file (`docs/real-gpu/2026-11-26-h100-moves/`).
fn h100_sxm() -> Preset {
    use common::*;
    let base = unified_memory_gpu();
    Preset {
        name: "h100-sxm",
        description: "H100 SXM5 80 GB (Hopper): HBM3, PCIe 5.0 x16",
        // docs/real-gpu/2026-11-26-h100-moves/summary.jsonl: "NVIDIA H100 80GB HBM3,
        // 81559 MiB" (nvidia-smi's total).
        vram_bytes: 81_559 * MIB,
        // NVIDIA H100 datasheet, SXM5: 3.35 TB/s (peak; no run measured it).
        vram_bytes_per_s: 3.35e12,
        dram: DramSpec {
            // Accel-Sim's SM90_H100 configuration: 8-byte HBM channels, burst 4
            // (32-byte atom), its HBM3 timing tCCD 1, tRRD 6: 32 x 6 / 1 = 192 bytes.
            row_switch_bytes: 192,
            ..base.dram
        },
        // docs/real-gpu/2026-11-26-h100-moves/calib.jsonl: CUDA's totalGlobalMem
        // 85017493504 bytes (81079.9 MiB) of nvidia-smi's 81559 MiB: 479 MiB the driver
        // keeps.
        driver_reserved_bytes: 479 * MIB,
        // unconfirmed: the H200 machine's 128 GiB (docs/real-gpu.md, "How it was run");
        // the H100 runs did not record theirs.
        host_memory_bytes: 128 * GIB,
        link: LinkSpec {
            name: "PCIe 5.0 x16",
            // docs/real-gpu/2026-11-26-h100-moves/calib.jsonl: pinned copies of 256 MiB,
            // H2D 54.97 GB/s, D2H 54.84 GB/s.
            h2d_bytes_per_s: 54.97e9,
            d2h_bytes_per_s: 54.84e9,
            // docs/real-gpu/2026-11-26-h100-moves/calib.jsonl: dependent reads of mapped
            // host memory, 1198.6 ns each.
            latency_ns: 1_199,
            ..base.link
        },
        // docs/real-gpu/2026-11-26-h100-moves/calib.jsonl: 3 copy engines.
        copy_engines: 3,
        // docs/real-gpu/2026-11-26-h100-moves/calib.jsonl: pinned copies of 4 KiB took
        // 5.02 us H2D and 3.87 us D2H, 0.07 us of it the bytes at the peaks above: about
        // 4.4 us of fixed cost per copy, the mean of the two directions.
        copy_setup_ns: 4_400,
        // Measured on this GPU by its daemon (`H100_RELOCATION_FIXED_NS`).
        relocation_fixed_ns: H100_RELOCATION_FIXED_NS,
        relocation_ns_per_page: H100_RELOCATION_NS_PER_PAGE,
        // docs/real-gpu/2026-11-26-h100-moves/calib.jsonl: 132 SMs; 128 FP32 cores each
        // at 1980 MHz boost (NVIDIA H100 datasheet, SXM5: FP32 67 TFLOPS).
        sms: 132,
        // GPGPU-Sim SM90_H100 configuration, L1D "A:512:64": 512 per SM.
        pending_reads_per_sm: 512,
        // docs/real-gpu/2026-11-26-h100-moves/calib.jsonl: l2_bytes 52428800 = 50 MiB.
        l2_bytes: 50 * MIB,
        ops_per_s: 16896.0 * 1.98e9,
        ..base
    }
    .with_full_stack()
}

/// The H200 SXM, the GPU of the dated runs in docs/real-gpu.md: the H100 SXM5's GH100
/// with HBM3e, on PCIe to an x86 host. Figures from those runs cite their file.
fn h200() -> Preset {
    use common::*;
    let base = unified_memory_gpu();
    Preset {
        name: "h200",
        description: "H200 SXM 141 GB (Hopper): HBM3e, PCIe 5.0 x16",
        // docs/real-gpu/2026-11-26-h200/gpu.txt: "NVIDIA H200, 143771 MiB" (nvidia-smi's
        // total; NVIDIA H200 datasheet: 141 GB HBM3e usable).
        vram_bytes: 143_771 * MIB,
        // NVIDIA H200 datasheet: 4.8 TB/s (peak; no run measured it).
        vram_bytes_per_s: 4.8e12,
        dram: DramSpec {
            // unconfirmed: the H100's HBM3 figure (Accel-Sim SM90_H100), the HBM3e
            // stacks' timing not being published. The calibration kit's 146.8 ns
            // dependent read (calib.jsonl) walks an 8 MiB chain inside the 60 MiB L2,
            // so it is the L2's latency, not the DRAM's: the base's stays.
            row_switch_bytes: 192,
            ..base.dram
        },
        // docs/real-gpu/2026-11-26-h200/calib.jsonl: CUDA's totalGlobalMem 150109880320
        // bytes (143155.9 MiB) of gpu.txt's 143771 MiB: 615 MiB the driver keeps.
        driver_reserved_bytes: 615 * MIB,
        // docs/real-gpu.md ("How it was run"): the H200 machine had 128 GiB of host
        // memory.
        host_memory_bytes: 128 * GIB,
        link: LinkSpec {
            name: "PCIe 5.0 x16",
            // docs/real-gpu/2026-11-26-h200/calib.jsonl: pinned copies of 256 MiB,
            // H2D 55.4 GB/s, D2H 55.3 GB/s (16 MiB and up within 1.3 % of it).
            h2d_bytes_per_s: 55.4e9,
            d2h_bytes_per_s: 55.3e9,
            // docs/real-gpu/2026-11-26-h200/calib.jsonl: dependent reads of mapped host
            // memory, 1187.2 ns each.
            latency_ns: 1_187,
            ..base.link
        },
        // docs/real-gpu/2026-11-26-h200/calib.jsonl: 3 copy engines (asyncEngineCount).
        copy_engines: 3,
        // docs/real-gpu/2026-11-26-h200/calib.jsonl: pinned copies of 4 KiB took 4.48 us
        // H2D and 3.39 us D2H, 0.07 us of it the bytes at the peaks above: about 3.9
        // us of fixed cost per copy, the mean of the two directions.
        copy_setup_ns: 3_900,
        // The H100's relocation as its daemon measured it (`H100_RELOCATION_FIXED_NS`):
        // the same driver (580.159.04, gpu.txt), daemon and interposer, and the H200
        // runs timed no move's phases. Their VMM primitives were faster on the H200
        // (calib.jsonl: map 18.7 us and unmap 12.8 us per 2 MiB, against 26.8 and 17.8
        // us in 2026-11-26-h100-moves/calib.jsonl), a small part of a move.
        relocation_fixed_ns: H100_RELOCATION_FIXED_NS,
        relocation_ns_per_page: H100_RELOCATION_NS_PER_PAGE,
        // docs/real-gpu/2026-11-26-h200/calib.jsonl: 132 SMs (multiProcessorCount), as
        // the H100 SXM5; 128 FP32 cores each at 1980 MHz boost (NVIDIA H200 datasheet:
        // FP32 67 TFLOPS = 16896 cores x 2 x 1.98 GHz).
        sms: 132,
        // unconfirmed: the H100's figure (GPGPU-Sim SM90_H100, L1D "A:512:64"), the
        // same GH100 SMs.
        pending_reads_per_sm: 512,
        // docs/real-gpu/2026-11-26-h200/calib.jsonl: l2CacheSize 62914560 bytes =
        // 60 MiB, the full GH100's L2 as on the GH200.
        l2_bytes: 60 * MIB,
        ops_per_s: 16896.0 * 1.98e9,
        ..base
    }
    .with_full_stack()
}

/// Grace Hopper: the H100's SMs and HBM3 behind NVLink-C2C.
fn gh200() -> Preset {
    let base = unified_memory_gpu();
    Preset {
        name: "gh200",
        description: "GH200 Grace Hopper: 96 GB HBM3, NVLink-C2C to 480 GB LPDDR5X",
        // calibration.md: 96 GB HBM3.
        vram_bytes: 96 * GIB,
        // calibration.md: 3.4 TB/s measured (STREAM), of about 4 TB/s peak.
        vram_bytes_per_s: 3.4e12,
        dram: DramSpec {
            // unconfirmed: the H100's HBM3 figure (Accel-Sim SM90_H100), the same
            // memory generation.
            row_switch_bytes: 192,
            ..base.dram
        },
        // calibration.md: 480 GB LPDDR5X.
        host_memory_bytes: 480_000_000_000,
        link: LinkSpec {
            name: "NVLink-C2C",
            // calibration.md (gh200-icpp24): copy-engine H2D 335-375 GB/s, D2H
            // 292-297 GB/s; midpoints.
            h2d_bytes_per_s: 355e9,
            d2h_bytes_per_s: 295e9,
            // calibration.md: GPU-to-CPU-memory latency about 770 ns.
            latency_ns: 770,
            // unconfirmed: C2C is not PCIe; 2048 keeps the latency term below the
            // 372 GB/s SM-driven bandwidth (2048 x 128 B / 770 ns = 340 GB/s).
            outstanding_reads: 2048,
            ..base.link
        },
        // calibration.md: 2 copy engines.
        copy_engines: 2,
        // calibration.md: 132 SMs; 128 FP32 cores each at 1980 MHz boost (NVIDIA
        // GH200 datasheet).
        sms: 132,
        // unconfirmed: the H100's figure (GPGPU-Sim SM90_H100, L1D "A:512:64"), the
        // same SM generation.
        pending_reads_per_sm: 512,
        // deviceQuery on a GH200 480GB (github.com/slitvinov/grace, README.md; CUDA
        // 12.4): L2 Cache Size 62914560 bytes = 60 MiB, 132 multiprocessors. The
        // GH200's H100 has all six HBM3 stacks and their L2 slices enabled (6144-bit
        // bus), where the 80 GB H100 boards have five (50 MB).
        l2_bytes: 60 * MIB,
        ops_per_s: 16896.0 * 1.98e9,
        ..base
    }
    .with_full_stack()
}

/// The preset called `name`.
pub fn find(name: &str) -> Option<Preset> {
    all().into_iter().find(|p| p.name == name)
}

impl Preset {
    /// Driver cost of relocating a chunk of `bytes` besides its DMA: the fixed part plus
    /// the part per 4 KiB page (a partial page counts whole).
    pub fn relocation_setup_ns(&self, bytes: u64) -> u64 {
        self.relocation_fixed_ns + bytes.div_ceil(4096) * self.relocation_ns_per_page
    }

    /// VRAM the CUDA runtime's own buffers (stack, code, constants) take per tenant.
    pub fn runtime_bytes(&self) -> u64 {
        self.runtime_stack_bytes + self.runtime_code_bytes + self.runtime_constant_bytes
    }

    /// VRAM tenants can use at most: installed minus driver-reserved.
    pub fn tenant_vram_bytes(&self) -> u64 {
        self.vram_bytes - self.driver_reserved_bytes
    }

    /// What the app models need to know of this device.
    pub fn shape(&self) -> DeviceShape {
        DeviceShape {
            l2_bytes: self.l2_bytes,
            sm_count: self.sms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_findable() {
        let presets = all();
        for p in &presets {
            assert_eq!(find(p.name).as_ref(), Some(p));
        }
        let mut names: Vec<_> = presets.iter().map(|p| p.name).collect();
        names.dedup();
        assert_eq!(names.len(), presets.len());
        for required in [
            "gtx480",
            "gtx1080ti",
            "v100-pcie-32gb",
            "a100-80gb",
            "h100-pcie-80gb",
            "h100-sxm",
            "h200",
            "gh200",
        ] {
            assert!(find(required).is_some(), "{required} missing");
        }
    }

    #[test]
    fn relocation_setup_is_a_fixed_part_plus_a_part_per_page() {
        let p = find("gtx480").unwrap();
        // The published point: about 115 us for a 4 MiB chunk.
        assert!(p.relocation_setup_ns(4 << 20).abs_diff(115_000) < 1_000);
        // A 128 KiB chunk pays the fixed part and 32 pages; 128 MiB pays 32768 pages.
        assert_eq!(p.relocation_setup_ns(128 << 10), 10_000 + 32 * 103);
        assert_eq!(p.relocation_setup_ns(128 << 20), 10_000 + 32_768 * 103);
        // A partial page counts whole.
        assert_eq!(p.relocation_setup_ns(1), 10_000 + 103);
    }

    #[test]
    fn the_h100s_relocation_is_what_its_daemon_measured() {
        let p = find("h100-pcie-80gb").unwrap();
        // A move to host memory: setup plus the DMA at the preset's D2H rate, against
        // the measured client time less the host memory's creation (docs/real-gpu.md).
        let move_us = |mib: u64| {
            let bytes = mib << 20;
            let dma_ns = bytes as f64 / p.link.d2h_bytes_per_s * 1e9;
            (p.relocation_setup_ns(bytes) as f64 + dma_ns) / 1e3
        };
        let measured_us = [
            (2, 352.0),
            (4, 433.0),
            (8, 548.0),
            (16, 1122.0),
            (32, 1533.0),
            (64, 3055.0),
        ];
        for (mib, measured_us) in measured_us {
            let ratio = move_us(mib) / measured_us;
            assert!((0.85..1.15).contains(&ratio), "{mib} MiB: {ratio}");
        }
    }

    #[test]
    fn figures_are_plausible() {
        for p in all() {
            assert!(p.driver_reserved_bytes < p.vram_bytes / 10, "{}", p.name);
            assert!(p.runtime_stack_bytes < p.tenant_vram_bytes(), "{}", p.name);
            // VRAM is always faster than the host link, which is the point of the problem.
            assert!(
                p.vram_bytes_per_s > 4.0 * p.link.h2d_bytes_per_s,
                "{}",
                p.name
            );
            assert!(
                p.copy_engines >= 1 && p.sms >= 1 && p.ops_per_s > 1e11,
                "{}",
                p.name
            );
            assert!(p.link.outstanding_reads >= 1, "{}", p.name);
        }
    }

    #[test]
    fn every_preset_has_an_l2_and_sms() {
        for p in all() {
            assert!(p.sms >= 1 && p.l2_bytes > 0, "{}", p.name);
            // A cache in front of VRAM, three orders of magnitude smaller on every GPU.
            assert!(p.l2_bytes < p.vram_bytes / 1000, "{}", p.name);
        }
        // The refbits preset is the testbed with one feature more, nothing else.
        let (testbed, refbits) = (find("gtx480").unwrap(), find("gtx480-refbits").unwrap());
        assert_eq!(
            (refbits.l2_bytes, refbits.sms),
            (testbed.l2_bytes, testbed.sms)
        );
    }

    #[test]
    fn gpus_with_compute_preemption_time_slice_preemptively() {
        for p in all() {
            assert_eq!(
                p.time_slicing.is_some(),
                p.features.preemption,
                "{}",
                p.name
            );
            if let Some(slicing) = p.time_slicing {
                // A preemption costs far less than the slice it ends.
                assert!(
                    slicing.preemption_cost_ns * 10 < slicing.slice_ns,
                    "{}",
                    p.name
                );
            }
        }
    }

    #[test]
    fn testbed_matches_the_gpuswap_prototype() {
        let p = find("gtx480").unwrap();
        assert_eq!(p.tenant_vram_bytes(), 1516 * MIB);
        assert_eq!((p.l2_bytes, p.sms), (768 * KIB, 15));
        assert!(!p.features.page_faults && !p.features.preemption);
        assert_eq!(p.copy_engines, 1);
    }
}
