//! The kernel timing model.
//!
//! With placement fixed for the kernel's whole run (GPUswap never moves a running
//! tenant's data), a kernel takes
//!
//! ```text
//! T = launch + max(C, D_vram, R / B_link_share, n_remote * latency_link / MLP)
//! ```
//!
//! - `C`: pure compute, the kernel's instruction count over the device's throughput;
//! - `D_vram`: the time VRAM takes to serve the local accesses ([`vram_ns`]): their
//!   bytes over VRAM bandwidth, an access in random order costing at least the channel
//!   time of a row activation ([`crate::preset::DramSpec`]), and no less than the reads'
//!   lines over the loads the SMs keep pending per DRAM latency;
//! - `R / B_link_share`: bytes served from host memory over the link share the kernel
//!   gets; the engine runs `R` as flows on the shared [`crate::link::Link`], so this term
//!   is the time those flows take, not a formula here;
//! - `n_remote * latency / MLP`: remote reads are round trips; at most MLP of them are
//!   in flight, so latency bounds throughput. MLP is the lesser of the link's
//!   outstanding-read limit and the SMs' pending-line registers, and for isolated reads
//!   also what the kernel's own threads keep in flight ([`remote_latency_ns`]): a
//!   kernel of few threads hides little of the latency.
//!
//! Each term is a separate function, so a better model can replace one at a time.

use gpuswap_core::{ChunkRef, Location};

use crate::mmu::page_table::BufferMap;

use crate::preset::Preset;
use crate::program::{Access, AccessOrder, Distribution};

/// Remote reads move whole cache lines: Fermi's 128-byte L1 line (coalesced reads).
pub const READ_TRANSACTION_BYTES: u64 = 128;
/// A warp's writes to consecutive addresses coalesce into whole 128-byte lines (Fermi
/// coalesces a warp's stores per 128-byte segment: CUDA C Programming Guide 3.2,
/// appendix G.4.2, compute capability 2.x global memory).
pub const COALESCED_WRITE_BYTES: u64 = 128;
/// An isolated write (random, or strided by a line or more) is write-through and not
/// coalesced with its neighbours: one 32-byte L2 sector (gpuswap.md: "writes are
/// write-through (not coalesced)"; the same guide, G.4.2: stores are cached in L2 only,
/// in 32-byte segments).
pub const ISOLATED_WRITE_BYTES: u64 = 32;
/// Per-transaction overhead on PCIe: 12-16 B TLP header, 2 B sequence number, 4 B LCRC
/// and framing, about 24 B (PCI Express Base Specification, TLP format).
pub const TLP_OVERHEAD_BYTES: u64 = 24;

/// Bytes one write transaction carries for writes in `order`: neighbouring threads'
/// writes in address order fill whole lines; random ones, or ones a line or more apart,
/// go one sector each.
pub fn write_transaction_bytes(order: AccessOrder) -> u64 {
    match order {
        AccessOrder::Linear => COALESCED_WRITE_BYTES,
        AccessOrder::Strided { stride_bytes } if stride_bytes < COALESCED_WRITE_BYTES => {
            COALESCED_WRITE_BYTES
        }
        AccessOrder::Strided { .. } | AccessOrder::Random => ISOLATED_WRITE_BYTES,
    }
}

/// Where one kernel's bytes come from (or, in the profiler, what one unit alone in host
/// memory makes remote).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Traffic {
    /// Bytes read or written in VRAM.
    pub local_bytes: f64,
    /// Of those, bytes read.
    pub local_read_bytes: f64,
    /// Of those, bytes read or written in random order (each access opens a row).
    pub local_random_bytes: f64,
    /// The reads those random bytes take, a line each as the apps count them.
    pub local_random_reads: f64,
    /// The writes those random bytes take, a sector each.
    pub local_random_writes: f64,
    /// Bytes read from host memory.
    pub remote_read_bytes: f64,
    /// Bytes written to host memory.
    pub remote_write_bytes: f64,
    /// The transactions those writes take ([`write_transaction_bytes`]).
    pub remote_write_transactions: f64,
    /// Of the remote reads ([`Traffic::remote_reads`]), those made in isolated order
    /// (random, or strided by a line or more): each thread's load is a line of its own,
    /// where a warp's loads of consecutive elements share one.
    pub remote_isolated_reads: f64,
    /// Of the remote bytes, those that cross the link again where the L2 would have
    /// served them in VRAM (re-reads and rewrites, [`Traffic::add_remote_share`]): in
    /// VRAM they move nothing.
    pub remote_again_bytes: f64,
    /// The kernel's threads, which bound the isolated reads it keeps in flight, in VRAM
    /// and in host memory ([`isolated_in_flight`]); 0 where its app does not model
    /// them: as many as the device holds.
    pub threads: u64,
}

impl Traffic {
    /// Adds `access`, `local_fraction` of it served from VRAM.
    pub fn add(&mut self, access: &Access, local_fraction: f64) {
        let (read_bytes, write_bytes) = (access.read_bytes as f64, access.write_bytes as f64);
        self.add_part(access.order, read_bytes, write_bytes, local_fraction);
        self.add_l2_bypass(access, 1.0 - local_fraction);
    }

    /// Adds `share` of `access` as made in host memory: its reads and writes, and its
    /// re-reads and rewrites, which cross the link again there.
    pub fn add_remote_share(&mut self, access: &Access, share: f64) {
        let (read_bytes, write_bytes) = (access.read_bytes as f64, access.write_bytes as f64);
        self.add_part(access.order, read_bytes * share, write_bytes * share, 0.0);
        self.add_l2_bypass(access, share);
    }

    /// Adds `remote_share` of `access`'s re-reads and rewrites
    /// ([`Access::reread_bytes`], [`Access::rewrite_bytes`]): in host memory they cross
    /// the link again, where in VRAM the L2 served them (counted in neither traffic
    /// then).
    fn add_l2_bypass(&mut self, access: &Access, remote_share: f64) {
        let (reread, rewrite) = (
            access.reread_bytes as f64 * remote_share,
            access.rewrite_bytes as f64 * remote_share,
        );
        self.add_remote(access.order, reread, rewrite);
        self.remote_again_bytes += reread + rewrite;
    }

    /// Adds `read_bytes` and `write_bytes` made in `order` (a part of an access),
    /// `local_fraction` of them served from VRAM.
    pub fn add_part(
        &mut self,
        order: AccessOrder,
        read_bytes: f64,
        write_bytes: f64,
        local_fraction: f64,
    ) {
        let remote = 1.0 - local_fraction;
        let local = (read_bytes + write_bytes) * local_fraction;
        self.local_bytes += local;
        self.local_read_bytes += read_bytes * local_fraction;
        if order == AccessOrder::Random {
            self.local_random_bytes += local;
            self.local_random_reads += read_bytes * local_fraction / READ_TRANSACTION_BYTES as f64;
            self.local_random_writes += write_bytes * local_fraction / ISOLATED_WRITE_BYTES as f64;
        }
        self.add_remote(order, read_bytes * remote, write_bytes * remote);
    }

    /// Adds `read_bytes` and `write_bytes` made in `order` in host memory.
    fn add_remote(&mut self, order: AccessOrder, read_bytes: f64, write_bytes: f64) {
        self.remote_read_bytes += read_bytes;
        if write_transaction_bytes(order) == ISOLATED_WRITE_BYTES {
            self.remote_isolated_reads += read_bytes / READ_TRANSACTION_BYTES as f64;
        }
        self.remote_write_bytes += write_bytes;
        self.remote_write_transactions += write_bytes / write_transaction_bytes(order) as f64;
    }

    /// Adds `times` times `other`.
    pub fn add_scaled(&mut self, other: &Traffic, times: f64) {
        self.local_bytes += other.local_bytes * times;
        self.local_read_bytes += other.local_read_bytes * times;
        self.local_random_bytes += other.local_random_bytes * times;
        self.local_random_reads += other.local_random_reads * times;
        self.local_random_writes += other.local_random_writes * times;
        self.remote_read_bytes += other.remote_read_bytes * times;
        self.remote_write_bytes += other.remote_write_bytes * times;
        self.remote_write_transactions += other.remote_write_transactions * times;
        self.remote_isolated_reads += other.remote_isolated_reads * times;
        self.remote_again_bytes += other.remote_again_bytes * times;
    }

    /// All bytes served remotely.
    pub fn remote_bytes(&self) -> f64 {
        self.remote_read_bytes + self.remote_write_bytes
    }

    /// The remote bytes that VRAM would have served too (all but the re-reads and
    /// rewrites, which the L2 serves there).
    pub fn remote_bytes_vram_would_move(&self) -> f64 {
        self.remote_bytes() - self.remote_again_bytes
    }

    /// Bytes the remote reads put on the link toward the device, with packet overhead.
    pub fn link_bytes_to_device(&self) -> f64 {
        self.remote_read_bytes * overhead_factor(READ_TRANSACTION_BYTES)
    }

    /// Bytes the remote writes put on the link toward the host, with packet overhead.
    pub fn link_bytes_to_host(&self) -> f64 {
        self.remote_write_bytes + self.remote_write_transactions * TLP_OVERHEAD_BYTES as f64
    }

    /// Remote read round trips.
    pub fn remote_reads(&self) -> f64 {
        self.remote_read_bytes / READ_TRANSACTION_BYTES as f64
    }
}

fn overhead_factor(transaction_bytes: u64) -> f64 {
    (transaction_bytes + TLP_OVERHEAD_BYTES) as f64 / transaction_bytes as f64
}

/// PCIe's default maximum read request size: a DMA engine's reads of host memory go in
/// requests of this size (PCI Express Base Specification, Device Control register,
/// Max_Read_Request_Size, default 512 bytes).
pub const DMA_REQUEST_BYTES: u64 = 512;

/// The link weight of a running kernel's remote accesses: the cache-line requests its
/// SMs can keep pending (every SM's L1 miss-status registers full), in bytes.
pub fn kernel_pending_bytes(preset: &Preset) -> f64 {
    f64::from(preset.sms) * f64::from(preset.pending_reads_per_sm) * READ_TRANSACTION_BYTES as f64
}

/// The link weight of a copy engine's stream: the requests it needs pending to reach the
/// link's peak alone, bandwidth x latency in whole requests (derived: a copy engine that
/// kept fewer could not reach the measured copy bandwidth; one that kept more would gain
/// nothing alone).
pub fn dma_pending_bytes(preset: &Preset) -> f64 {
    let in_flight = preset.link.h2d_bytes_per_s * preset.link.latency_ns as f64 / 1e9;
    (in_flight / DMA_REQUEST_BYTES as f64).ceil().max(1.0) * DMA_REQUEST_BYTES as f64
}

/// `C`: compute time of `ops` instructions.
pub fn compute_ns(preset: &Preset, ops: u64) -> f64 {
    ops as f64 / preset.ops_per_s * 1e9
}

/// `D_vram`: time to serve the local accesses from VRAM, the larger of two bounds.
///
/// - Channel time: bytes in address order stream at VRAM bandwidth; an access in random
///   order opens a row of its own and holds its channel for the larger of what it moves
///   (a read one sector, [`DramSpec::read_sector_bytes`], whatever line the app
///   counted; a write its sector) and a row switch ([`DramSpec::row_switch_bytes`]).
/// - Latency (Little's law): a read holds one of the SMs' pending-line registers for the
///   DRAM latency, so the kernel's read lines take at least `lines x latency / (SMs x
///   pending lines per SM)`; its random reads are bounded by its threads too
///   ([`isolated_in_flight`]), as isolated reads in host memory are: a chain one thread
///   follows pays the whole latency per read. (Reads strided by a line or more count
///   as isolated in host memory only; in VRAM the model counts them with the streams.)
///
/// [`DramSpec::read_sector_bytes`]: crate::preset::DramSpec::read_sector_bytes
/// [`DramSpec::row_switch_bytes`]: crate::preset::DramSpec::row_switch_bytes
pub fn vram_ns(preset: &Preset, traffic: &Traffic) -> f64 {
    let dram = &preset.dram;
    let streamed = (traffic.local_bytes - traffic.local_random_bytes).max(0.0);
    let row = dram.row_switch_bytes as f64;
    let channel_bytes = streamed
        + traffic.local_random_reads * row.max(dram.read_sector_bytes as f64)
        + traffic.local_random_writes * row.max(ISOLATED_WRITE_BYTES as f64);
    let channel_ns = channel_bytes / preset.vram_bytes_per_s * 1e9;
    channel_ns.max(dram_latency_ns(preset, traffic))
}

/// The latency bound of [`vram_ns`]: the local reads' lines, each holding a pending-line
/// register for the DRAM latency, over the registers of every SM (a random read
/// weighing more where the kernel's threads keep fewer in flight).
fn dram_latency_ns(preset: &Preset, traffic: &Traffic) -> f64 {
    let lines = traffic.local_read_bytes / READ_TRANSACTION_BYTES as f64;
    // Exact: the product of small integers over a power of two.
    let pending = kernel_pending_bytes(preset) / READ_TRANSACTION_BYTES as f64;
    let isolated = isolated_in_flight(preset, traffic, pending);
    let reads = lines + traffic.local_random_reads * (pending / isolated - 1.0);
    reads * preset.dram.latency_ns as f64 / pending
}

/// The isolated reads (random: a line per thread) a kernel keeps in flight: one per
/// thread resident at once (at most `resident_threads_per_sm` x SMs), and at most
/// `hardware`, what the SMs or the link allow. A thread waits for its load before it
/// uses it, and the app models give no count of independent loads a thread issues ahead
/// (assumed: one; Volkov, "Understanding Latency Hiding on GPUs", UC Berkeley 2016, ch.
/// 4: a kernel's memory throughput is its loads in flight over the latency).
fn isolated_in_flight(preset: &Preset, traffic: &Traffic, hardware: f64) -> f64 {
    let device = f64::from(preset.sms) * f64::from(preset.resident_threads_per_sm);
    let resident = match traffic.threads {
        0 => device,
        threads => (threads as f64).min(device),
    };
    hardware.min(resident).max(1.0)
}

/// `n_remote * latency / MLP`: time the remote round trips take at the parallelism the
/// kernel and the link allow (Little's law: reads in flight = throughput x latency).
///
/// The reads in flight are bounded by the link's outstanding non-posted requests
/// (`LinkSpec::outstanding_reads`, the PCIe tags) and the SMs' pending-line registers
/// (`Preset::pending_reads_per_sm` x SMs). Isolated reads (random, or strided by a line
/// or more: a line per thread) are bounded by the kernel's threads as well
/// ([`isolated_in_flight`]). Reads of consecutive elements keep the
/// hardware's bound: the app models' thread counts are those of the launch or of its
/// looping warps (bfs), not those that stream a buffer, and a warp's coalesced loads
/// share a line, so few threads fill many tags.
///
/// A dependent chain of one thread therefore pays the full latency per read, as the
/// calibration kit's pointer chase measures it.
pub fn remote_latency_ns(preset: &Preset, traffic: &Traffic) -> f64 {
    let hardware = f64::from(preset.link.outstanding_reads)
        .min(f64::from(preset.sms) * f64::from(preset.pending_reads_per_sm));
    let isolated = isolated_in_flight(preset, traffic, hardware);
    // An isolated read weighs `hardware / isolated` coalesced ones (at least one): with
    // both at the hardware's bound the sum is the reads.
    let reads =
        traffic.remote_reads() + traffic.remote_isolated_reads * (hardware / isolated - 1.0);
    reads * preset.link.latency_ns as f64 / hardware
}

/// The part of a kernel's time that does not depend on link sharing: launch cost plus the
/// largest of compute, VRAM and remote-latency terms, rounded up to whole ns.
pub fn fixed_ns(preset: &Preset, ops: u64, traffic: &Traffic) -> u64 {
    let body = compute_ns(preset, ops)
        .max(vram_ns(preset, traffic))
        .max(remote_latency_ns(preset, traffic));
    preset.kernel_launch_ns + body.ceil() as u64
}

/// The least time `traffic`'s remote accesses take alone: the largest of their
/// latency-bound term and their bytes at the link's peak each way.
pub fn remote_ns(preset: &Preset, traffic: &Traffic) -> f64 {
    let to_device = traffic.link_bytes_to_device() / preset.link.h2d_bytes_per_s * 1e9;
    let to_host = traffic.link_bytes_to_host() / preset.link.d2h_bytes_per_s * 1e9;
    remote_latency_ns(preset, traffic)
        .max(to_device)
        .max(to_host)
}

/// The fixed part of one walked segment of a unified-memory kernel, which the engine
/// runs after the segment's migrations have crossed the link.
///
/// A far fault stalls only the warps that made it (`shared/spec/uvm-adaptive.md`: "the
/// faulting warps stall, other warps go on until they fault too"): of the segment's
/// all-in-VRAM work `ideal_ns`, the share `stalled_share` (the walked bytes whose
/// touches waited for a batch) waits for the batches' service (`service_ns`) and their
/// transfers (`transfer_ns`, alone on the link), and the rest runs meanwhile. So the
/// segment takes the longer of its work and the stall followed by the stalled work:
/// `max(ideal, service + transfers + stalled x ideal)`, of which the migrations' flows
/// take the transfers first; then its remote accesses (`remote_ns`, no overlap: first
/// order). With every touch stalled this is the serial sum; with none, the work alone.
pub fn paged_fixed_ns(
    ideal_ns: u64,
    service_ns: u64,
    transfer_ns: f64,
    stalled_share: f64,
    remote_ns: f64,
) -> u64 {
    let ideal = ideal_ns as f64;
    let stalled = stalled_share.clamp(0.0, 1.0);
    let after_transfers = (ideal - transfer_ns).max(service_ns as f64 + stalled * ideal);
    (after_transfers + remote_ns).ceil() as u64
}

/// The fixed part of a kernel of barrier-separated phases, given each phase's
/// instructions and traffic: launch cost plus, phase after phase, the largest of its
/// compute, VRAM, remote-latency and remote-bandwidth terms (its remote bytes at the
/// link's peak, the least time they take), rounded up to whole ns. The threads of a
/// phase wait at its barrier, so one phase's memory traffic cannot hide under another's
/// arithmetic. The link flows still carry the kernel's remote bytes, so contention on
/// the link lengthens the kernel beyond this.
pub fn phased_fixed_ns(preset: &Preset, phases: impl Iterator<Item = (u64, Traffic)>) -> u64 {
    let body: f64 = phases
        .map(|(ops, traffic)| {
            compute_ns(preset, ops)
                .max(vram_ns(preset, &traffic))
                .max(remote_ns(preset, &traffic))
        })
        .sum();
    preset.kernel_launch_ns + body.ceil() as u64
}

/// Fraction of a kernel's accesses to `buffer` that hit chunks in VRAM, given how the
/// accesses spread over the buffer.
pub fn local_fraction(distribution: &Distribution, buffer: &BufferMap) -> f64 {
    let vram = buffer.vram_bytes;
    if vram == buffer.bytes {
        return 1.0;
    }
    if vram == 0 {
        return 0.0;
    }
    weighted_fraction(buffer, weighted_ranges(distribution, buffer.bytes))
}

/// The accesses of `distribution` over a buffer of `buffer_bytes` as `(offset_bytes,
/// bytes, weight)` ranges, each range's weight spread evenly over its bytes: the one form
/// every share computation works on (here the VRAM share of a buffer's accesses, in
/// `profile` the share of each profiling unit). `Uniform` is one range of weight 1; a
/// profile's last page ends at the buffer's end. Ranges that carry no accesses (empty or
/// weightless) are left out.
pub fn weighted_ranges(
    distribution: &Distribution,
    buffer_bytes: u64,
) -> impl Iterator<Item = (u64, u64, f64)> + '_ {
    // One chain of the three variants' iterators, two of them empty, keeps this free of
    // allocation and boxing: the engine calls it for every access of every kernel.
    let uniform = matches!(distribution, Distribution::Uniform).then_some((0, buffer_bytes, 1.0));
    let ranges = match distribution {
        Distribution::Ranges(ranges) => ranges.as_slice(),
        _ => &[],
    };
    let (page_bytes, weights) = match distribution {
        Distribution::Profile {
            page_bytes,
            weights,
        } => (*page_bytes, weights.as_slice()),
        _ => (0, &[][..]),
    };
    uniform
        .into_iter()
        .chain(ranges.iter().map(|r| (r.offset_bytes, r.bytes, r.weight)))
        .chain(weights.iter().enumerate().map(move |(i, w)| {
            let offset = i as u64 * page_bytes;
            (
                offset,
                page_bytes.min(buffer_bytes.saturating_sub(offset)),
                *w,
            )
        }))
        .filter(|&(_, bytes, weight)| bytes > 0 && weight > 0.0)
}

/// Chunks of `buffer` in host memory that accesses spread by `distribution` touch: the
/// referenced bits a kernel would set on them.
pub fn touched_host_chunks(distribution: &Distribution, buffer: &BufferMap) -> Vec<ChunkRef> {
    // The same accessed ranges the timing model uses: a chunk is touched when one overlaps it.
    let touched = |start: u64, end: u64| {
        weighted_ranges(distribution, buffer.bytes)
            .any(|(offset, bytes, _)| offset < end && start < offset + bytes)
    };
    buffer
        .chunks()
        .enumerate()
        .filter(|(_, (offset, bytes, location))| {
            *location == Location::Host && touched(*offset, offset + bytes)
        })
        .map(|(index, _)| ChunkRef {
            buffer: buffer.buffer,
            index: index as u32,
        })
        .collect()
}

/// Sum of weight x (VRAM bytes in range / range bytes) over sum of weights, for ranges from
/// [`weighted_ranges`].
fn weighted_fraction(buffer: &BufferMap, ranges: impl Iterator<Item = (u64, u64, f64)>) -> f64 {
    let (mut local, mut total) = (0.0, 0.0);
    for (offset, bytes, weight) in ranges {
        total += weight;
        local += weight * vram_bytes_in(buffer, offset, offset + bytes) as f64 / bytes as f64;
    }
    if total > 0.0 { local / total } else { 1.0 }
}

/// VRAM bytes of `buffer` within `[start, end)`. Chunks are in address order.
fn vram_bytes_in(buffer: &BufferMap, start: u64, end: u64) -> u64 {
    // Uniform accesses cover the whole buffer: the page table keeps that sum.
    if start == 0 && end >= buffer.bytes {
        return buffer.vram_bytes;
    }
    let first = (start / buffer.chunk_bytes) as usize;
    buffer
        .chunks_from(first)
        .take_while(|c| c.0 < end)
        .filter(|c| c.2 == Location::Vram)
        .map(|(offset, bytes, _)| (offset + bytes).min(end) - offset.max(start))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preset;
    use crate::program::WeightedRange;
    use gpuswap_core::{BufferId, TenantId};

    fn gtx480() -> Preset {
        preset::find("gtx480").unwrap()
    }

    /// A 4-chunk buffer of 400 bytes with the given chunk locations.
    fn buffer(locations: [Location; 4]) -> BufferMap {
        BufferMap {
            buffer: BufferId(0),
            tenant: TenantId(0),
            bytes: 400,
            chunk_bytes: 100,
            locations: locations.to_vec(),
            vram_bytes: 100 * locations.iter().filter(|l| **l == Location::Vram).count() as u64,
            epoch: 0,
        }
    }

    const V: Location = Location::Vram;
    const H: Location = Location::Host;

    #[test]
    fn compute_term_is_ops_over_throughput() {
        let p = gtx480();
        // 480 cores x 1.401 GHz = 672.48e9 ops/s: 672480 ops take 1 us.
        assert!((compute_ns(&p, 672_480) - 1000.0).abs() < 1e-6);
    }

    #[test]
    fn vram_term_is_bytes_over_bandwidth() {
        let p = gtx480();
        let mut t = Traffic::default();
        t.add_part(AccessOrder::Linear, 0.0, 177_400_000.0, 1.0); // 1 ms at 177.4 GB/s
        assert!((vram_ns(&p, &t) - 1e6).abs() < 1.0);
    }

    #[test]
    fn random_accesses_pay_a_row_switch_each() {
        // The GTX 480's channel moves a 64-byte atom per 2 command cycles and activates a
        // row at most every 6 (GPGPU-Sim's Hynix GDDR5 timing): a random 128-byte line
        // holds it for 3 atoms' time, 1.5 times its bytes; a random 32-byte write 6.
        let p = gtx480();
        let ns = |order, read: f64, write: f64| {
            let mut t = Traffic::default();
            t.add_part(order, read, write, 1.0);
            vram_ns(&p, &t)
        };
        let bytes = 128e6;
        let row = p.dram.row_switch_bytes as f64;
        assert!(ns(AccessOrder::Random, 0.0, bytes) > ns(AccessOrder::Linear, 0.0, bytes));
        let read_ratio = ns(AccessOrder::Random, bytes, 0.0) / ns(AccessOrder::Linear, bytes, 0.0);
        let write_ratio = ns(AccessOrder::Random, 0.0, bytes) / ns(AccessOrder::Linear, 0.0, bytes);
        // Linear reads are latency bound on this GPU; writes are posted, so compare those
        // with bytes at peak.
        let peak_ns = bytes / p.vram_bytes_per_s * 1e9;
        assert!((ns(AccessOrder::Random, bytes, 0.0) / peak_ns - row / 128.0).abs() < 1e-9);
        assert!((write_ratio - row / 32.0).abs() < 1e-9, "{write_ratio}");
        assert!(read_ratio > 1.0, "{read_ratio}");
        // Strided accesses keep their rows open: no row switch is charged.
        assert_eq!(
            ns(AccessOrder::Strided { stride_bytes: 4096 }, 0.0, bytes),
            ns(AccessOrder::Linear, 0.0, bytes)
        );
    }

    #[test]
    fn a_sectored_gpu_moves_a_sector_per_random_read() {
        // A V100 reads one 32-byte sector where the app counted a 128-byte line, but
        // the row switch (96 bytes of channel time) is the larger: 3/4 of the line's time.
        let p = preset::find("v100-pcie-32gb").unwrap();
        assert_eq!(
            (p.dram.read_sector_bytes, p.dram.row_switch_bytes),
            (32, 96)
        );
        let mut random = Traffic::default();
        random.add_part(AccessOrder::Random, 128e6, 0.0, 1.0);
        let peak_ns = 128e6 / p.vram_bytes_per_s * 1e9;
        assert!((vram_ns(&p, &random) / peak_ns - 0.75).abs() < 1e-9);
        // Remote shares of the same access pay nothing in VRAM.
        let mut half = Traffic::default();
        half.add_part(AccessOrder::Random, 128e6, 0.0, 0.5);
        assert!((vram_ns(&p, &half) / vram_ns(&p, &random) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn reads_are_bounded_by_the_loads_the_sms_keep_pending() {
        // Little's law: 15 SMs x 32 pending lines of 128 bytes per 428 ns is 143.5 GB/s,
        // below the GTX 480's 177.4 GB/s peak, so a read stream is latency bound and a
        // write stream (posted) is not.
        let p = gtx480();
        let bytes = 128e6;
        let mut reads = Traffic::default();
        reads.add_part(AccessOrder::Linear, bytes, 0.0, 1.0);
        let mut writes = Traffic::default();
        writes.add_part(AccessOrder::Linear, 0.0, bytes, 1.0);
        let lines = bytes / 128.0;
        let bound = lines * p.dram.latency_ns as f64 / f64::from(p.sms * p.pending_reads_per_sm);
        assert!((vram_ns(&p, &reads) - bound).abs() < 1e-6);
        assert!(vram_ns(&p, &reads) > vram_ns(&p, &writes));
        // On an A100, 108 SMs x 512 pending lines hide the latency: bandwidth bounds.
        let a100 = preset::find("a100-80gb").unwrap();
        let peak_ns = bytes / a100.vram_bytes_per_s * 1e9;
        assert!((vram_ns(&a100, &reads) - peak_ns).abs() < 1e-6);
    }

    #[test]
    fn latency_term_counts_round_trips_over_parallelism() {
        let p = gtx480();
        let mut t = Traffic::default();
        t.add_part(AccessOrder::Linear, 4096.0, 0.0, 0.0); // 32 remote reads, 32 in flight: one latency
        assert!((remote_latency_ns(&p, &t) - 700.0).abs() < 1e-9);
        // Writes are posted: no round trips.
        let mut w = Traffic::default();
        w.add_part(AccessOrder::Linear, 0.0, 1_048_576.0, 0.0);
        assert_eq!(remote_latency_ns(&p, &w), 0.0);
    }

    #[test]
    fn a_chain_one_thread_follows_in_vram_pays_the_dram_latency_per_read() {
        // The calibration kit's chase in device memory: each read waits for the last.
        let p = preset::find("h200").unwrap();
        let chain = |threads| {
            let mut t = Traffic {
                threads,
                ..Traffic::default()
            };
            t.add_part(AccessOrder::Random, 1000.0 * 128.0, 0.0, 1.0);
            vram_ns(&p, &t)
        };
        let latency = p.dram.latency_ns as f64;
        assert!((chain(1) - 1000.0 * latency).abs() < 1e-6);
        // Threads not modelled, or a full device: every pending-line register busy, so
        // the same reads take a ten-thousandth of that, as before.
        assert!(chain(0) < chain(1) / 10_000.0);
        assert_eq!(chain(1 << 20), chain(0));
    }

    #[test]
    fn the_research_simulators_gpu_serves_remote_reads_one_at_a_time() {
        // UVM Smart's GMMU takes one remote read at a time, 200 cycles each: a kernel's
        // reads cost 135 ns apiece however many threads or tags it has, streamed or
        // scattered.
        let p = preset::find("gtx1080ti-uvmsmart").unwrap();
        for order in [AccessOrder::Linear, AccessOrder::Random] {
            let mut t = Traffic {
                threads: 1 << 20,
                ..Traffic::default()
            };
            t.add_part(order, 1000.0 * 128.0, 0.0, 0.0);
            assert!(
                (remote_latency_ns(&p, &t) - 1000.0 * 135.0).abs() < 1e-6,
                "{order:?}"
            );
        }
        // 128 KiB read remotely take 135 us: about 1 GB/s, a twelfth of its link's copies.
        let mut t = Traffic::default();
        t.add_part(AccessOrder::Linear, 131_072.0, 0.0, 0.0);
        assert!(remote_latency_ns(&p, &t) > 131_072.0 / p.link.h2d_bytes_per_s * 1e9 * 10.0);
    }

    #[test]
    fn a_kernel_of_few_threads_hides_little_of_the_remote_latency() {
        // The calibration kit's pointer chase: one thread, each read waiting for the
        // last, pays the link's whole latency per read (1199 ns measured on the H100).
        let p = preset::find("h100-sxm").unwrap();
        let mut chase = Traffic {
            threads: 1,
            ..Traffic::default()
        };
        chase.add_part(AccessOrder::Random, 1000.0 * 128.0, 0.0, 0.0);
        assert!((remote_latency_ns(&p, &chase) - 1000.0 * 1199.0).abs() < 1e-6);
        // 32 threads reading isolated lines keep 32 in flight.
        let mut scattered = Traffic {
            threads: 32,
            ..Traffic::default()
        };
        scattered.add_part(AccessOrder::Random, 1000.0 * 128.0, 0.0, 0.0);
        assert!((remote_latency_ns(&p, &scattered) - 1000.0 * 1199.0 / 32.0).abs() < 1e-6);
        // Reads of consecutive elements keep the link's bound whatever the threads.
        let mut warp = Traffic {
            threads: 32,
            ..Traffic::default()
        };
        warp.add_part(AccessOrder::Linear, 1000.0 * 128.0, 0.0, 0.0);
        assert_eq!(remote_latency_ns(&p, &warp), 1000.0 * 1199.0 / 256.0);
        // Enough threads, or threads not modelled: the link's 256 tags bound, as before
        // (the streaming bound of docs/real-gpu.md, 256 x 128 B / 1.2 us = 27 GB/s).
        for threads in [0, 1 << 20] {
            let mut stream = Traffic {
                threads,
                ..Traffic::default()
            };
            stream.add_part(AccessOrder::Linear, 1000.0 * 128.0, 0.0, 0.0);
            let mut random = stream;
            random.add_part(AccessOrder::Random, 1000.0 * 128.0, 0.0, 0.0);
            assert_eq!(remote_latency_ns(&p, &stream), 1000.0 * 1199.0 / 256.0);
            assert_eq!(remote_latency_ns(&p, &random), 2000.0 * 1199.0 / 256.0);
        }
        // Mixed: 64 threads' isolated lines 64 at a time, their streamed ones 256.
        let mut mixed = Traffic {
            threads: 64,
            ..Traffic::default()
        };
        mixed.add_part(AccessOrder::Linear, 640.0 * 128.0, 0.0, 0.0);
        mixed.add_part(AccessOrder::Random, 640.0 * 128.0, 0.0, 0.0);
        let want = 640.0 * 1199.0 / 256.0 + 640.0 * 1199.0 / 64.0;
        assert!((remote_latency_ns(&p, &mixed) - want).abs() < 1e-6);
    }

    #[test]
    fn fixed_part_takes_the_largest_term_plus_launch() {
        let p = gtx480();
        let mut t = Traffic::default();
        t.add_part(AccessOrder::Linear, 0.0, 177_400.0, 1.0); // 1 us written to VRAM
        assert_eq!(fixed_ns(&p, 0, &t), p.kernel_launch_ns + 1000);
        // 2 us of compute dominates
        assert_eq!(fixed_ns(&p, 2 * 672_480, &t), p.kernel_launch_ns + 2000);
    }

    #[test]
    fn coalesced_writes_cost_what_reads_cost_and_isolated_writes_more() {
        let mut t = Traffic::default();
        t.add_part(AccessOrder::Linear, 1000.0, 1000.0, 0.0);
        // A warp's linear writes fill lines as its reads do: the same overhead per byte.
        assert!((t.link_bytes_to_device() - 1000.0 * 152.0 / 128.0).abs() < 1e-9);
        assert!((t.link_bytes_to_host() - 1000.0 * 152.0 / 128.0).abs() < 1e-9);
        assert_eq!(t.remote_bytes(), 2000.0);
        // Random writes and writes a line apart go one sector each.
        for order in [
            AccessOrder::Random,
            AccessOrder::Strided { stride_bytes: 128 },
        ] {
            let mut t = Traffic::default();
            t.add_part(order, 0.0, 1000.0, 0.0);
            assert!(
                (t.link_bytes_to_host() - 1000.0 * 56.0 / 32.0).abs() < 1e-9,
                "{order:?}"
            );
            assert!((t.remote_write_transactions - 1000.0 / 32.0).abs() < 1e-9);
        }
        // Writes 8 bytes apart still share lines.
        let mut t = Traffic::default();
        t.add_part(AccessOrder::Strided { stride_bytes: 8 }, 0.0, 1280.0, 0.5);
        assert!((t.remote_write_transactions - 5.0).abs() < 1e-9);
        assert!((t.local_bytes - 640.0).abs() < 1e-9);
    }

    #[test]
    fn phases_add_their_slowest_terms_where_one_phase_overlaps_them() {
        let p = gtx480();
        // A compute phase (2 us) and a memory phase (1 us from VRAM, 1 us remote at the
        // link's peak of 5.7 GB/s, written in lines).
        let mut memory = Traffic::default();
        memory.add_part(AccessOrder::Linear, 0.0, 177_400.0, 1.0);
        let mut remote = Traffic::default();
        remote.add_part(AccessOrder::Linear, 0.0, 5_700.0 * 128.0 / 152.0, 0.0);
        let mut both = memory;
        both.add_scaled(&remote, 1.0);
        let compute_ops = 2 * 672_480;
        // One phase: the terms overlap, compute (2 us) wins.
        assert_eq!(fixed_ns(&p, compute_ops, &both), p.kernel_launch_ns + 2000);
        // Two phases: 2 us, then max(1 us VRAM, 1 us link) = 3 us.
        let phased = phased_fixed_ns(
            &p,
            [(compute_ops, Traffic::default()), (0, both)].into_iter(),
        );
        assert_eq!(phased, p.kernel_launch_ns + 3000);
    }

    #[test]
    fn a_fault_batch_stalls_only_the_warps_that_faulted() {
        // Every touch stalled: the serial sum of stall and work, as before the overlap.
        assert_eq!(paged_fixed_ns(1000, 300, 200.0, 1.0, 50.0), 1000 + 300 + 50);
        // A tenth of the work waits for a 300 ns service with its 200 ns of transfers:
        // the other nine tenths run meanwhile, so the work alone sets the time (the
        // engine runs the 200 ns of migrations first, then the rest).
        assert_eq!(paged_fixed_ns(1000, 300, 200.0, 0.1, 50.0), 800 + 50);
        // A stall longer than the other warps' work shows: service plus stalled work.
        assert_eq!(paged_fixed_ns(1000, 950, 0.0, 0.1, 0.0), 950 + 100);
        // The more of the work stalls, the longer the segment, never shorter than the
        // work and never longer than the serial sum.
        let mut last = 0;
        for tenths in 0..=10 {
            let ns = paged_fixed_ns(1000, 600, 0.0, f64::from(tenths) / 10.0, 0.0);
            assert!(ns >= last && (1000..=1600).contains(&ns), "{tenths}: {ns}");
            last = ns;
        }
    }

    #[test]
    fn weighted_ranges_cover_each_distribution_and_drop_empty_ranges() {
        let ranges = |d: &Distribution, bytes| weighted_ranges(d, bytes).collect::<Vec<_>>();
        assert_eq!(ranges(&Distribution::Uniform, 400), [(0, 400, 1.0)]);
        let banded = Distribution::Ranges(vec![
            WeightedRange {
                offset_bytes: 10,
                bytes: 20,
                weight: 2.0,
            },
            WeightedRange {
                offset_bytes: 50,
                bytes: 5,
                weight: 0.0,
            },
        ]);
        assert_eq!(ranges(&banded, 400), [(10, 20, 2.0)]);
        // 250 bytes in pages of 100: the last page holds the 50 bytes left.
        let profile = Distribution::Profile {
            page_bytes: 100,
            weights: vec![1.0, 0.0, 3.0],
        };
        assert_eq!(ranges(&profile, 250), [(0, 100, 1.0), (200, 50, 3.0)]);
    }

    #[test]
    fn local_fraction_follows_the_distribution() {
        let b = buffer([V, H, V, H]);
        assert_eq!(local_fraction(&Distribution::Uniform, &b), 0.5);
        let hot_first = Distribution::Ranges(vec![
            WeightedRange {
                offset_bytes: 0,
                bytes: 100,
                weight: 3.0,
            },
            WeightedRange {
                offset_bytes: 100,
                bytes: 300,
                weight: 1.0,
            },
        ]);
        // 3/4 of accesses in chunk 0 (VRAM) + 1/4 spread over chunks 1..4 (1/3 VRAM).
        assert!((local_fraction(&hot_first, &b) - (0.75 + 0.25 / 3.0)).abs() < 1e-12);
        let profile = Distribution::Profile {
            page_bytes: 200,
            weights: vec![0.0, 1.0],
        };
        assert_eq!(local_fraction(&profile, &b), 0.5);
        assert_eq!(local_fraction(&Distribution::Uniform, &buffer([V; 4])), 1.0);
        assert_eq!(local_fraction(&hot_first, &buffer([H; 4])), 0.0);
    }

    #[test]
    fn re_reads_and_rewrites_cross_the_link_only_from_host_memory() {
        // A small vector every block reads: 16 KiB from memory once the L2 served the
        // rest of the 4 MiB its threads read; stored 1 MiB times, combined to 16 KiB.
        let vector = Access::uniform(0, 16 << 10, 16 << 10)
            .read_before_l2(4 << 20)
            .written_before_l2(1 << 20);
        assert_eq!(vector.reread_bytes, (4 << 20) - (16 << 10));
        assert_eq!(vector.rewrite_bytes, (1 << 20) - (16 << 10));
        let plain = Access::uniform(0, 16 << 10, 16 << 10);
        let traffic = |access: &Access, local_fraction: f64| {
            let mut t = Traffic::default();
            t.add(access, local_fraction);
            t
        };
        // In VRAM the L2 serves them: nothing changes.
        assert_eq!(traffic(&vector, 1.0), traffic(&plain, 1.0));
        // In host memory every read and store crosses the link.
        let remote = traffic(&vector, 0.0);
        assert_eq!(remote.remote_read_bytes, (4 << 20) as f64);
        assert_eq!(remote.remote_write_bytes, (1 << 20) as f64);
        // Half remote: half of them.
        let half = traffic(&vector, 0.5);
        assert_eq!(half.remote_read_bytes, (2 << 20) as f64);
        assert_eq!(half.local_read_bytes, (8 << 10) as f64);
    }
}
