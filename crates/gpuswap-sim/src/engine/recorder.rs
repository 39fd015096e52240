//! The recorder: what the report is built from, apart from the devices' state. It
//! counts the run's events and the pages unified-memory kernels touched (both bounded by
//! the run's limits), and keeps each tenant's statistics (its VRAM timeline, traffic,
//! allocation latencies, pauses, paging and scheduling figures) as the engine notes
//! them, so that the tenants' state holds only what their programs run on.

use super::{EvictionLatency, VictimPause};

/// The run's counters and every tenant's statistics.
pub(super) struct Recorder {
    /// Events handled (a wake-up that passes only part of a kernel's end is none).
    pub(super) events: u64,
    /// Pages unified-memory kernels' walks touched so far.
    page_touches: u64,
    /// By tenant index.
    pub(super) tenants: Vec<TenantRecord>,
}

impl Recorder {
    /// A recorder for tenants starting at `starts_ns`, keeping their page touches for
    /// Belady's bound up to `optimum_max_touches` each when it is asked for.
    pub(super) fn new(
        starts_ns: impl Iterator<Item = u64>,
        optimum_max_touches: Option<usize>,
    ) -> Self {
        Recorder {
            events: 0,
            page_touches: 0,
            tenants: starts_ns
                .map(|start_ns| TenantRecord::new(start_ns, optimum_max_touches))
                .collect(),
        }
    }

    /// Tenant `t`'s statistics.
    #[inline]
    pub(super) fn tenant(&mut self, t: usize) -> &mut TenantRecord {
        &mut self.tenants[t]
    }

    /// Counts an event: the count so far.
    #[inline]
    pub(super) fn count_event(&mut self) -> u64 {
        self.events += 1;
        self.events
    }

    /// Counts `pages` page touches: the count so far.
    #[inline]
    pub(super) fn count_page_touches(&mut self, pages: u64) -> u64 {
        self.page_touches = self.page_touches.saturating_add(pages);
        self.page_touches
    }
}

/// One tenant's statistics, as the report shows them.
pub(super) struct TenantRecord {
    pub(super) phase_start_ns: Option<u64>,
    pub(super) phase_end_ns: Option<u64>,
    /// Its accounted VRAM over time, as (time, bytes) at each change.
    pub(super) vram_timeline: Vec<(u64, u64)>,
    pub(super) local_bytes: f64,
    pub(super) remote_bytes: f64,
    pub(super) alloc_latencies_ns: Vec<u64>,
    pub(super) evictions: Vec<EvictionLatency>,
    pub(super) pauses: Vec<VictimPause>,
    /// Unified memory: time its kernels stalled on fault batches.
    pub(super) fault_stall_ns: u64,
    /// Unified memory: entry n counts its fault batches of n faults.
    pub(super) faults_per_batch: Vec<u64>,
    /// Unified memory with `optimum = true`: every page it touched, in order, and the
    /// most VRAM managed memory had during its kernels (the bound's capacity).
    pub(super) page_stream: Option<PageStream>,
    pub(super) optimum_capacity_pages: u64,
    /// Its kernels the scheduling policy preempted, the time they had run when they
    /// stopped (lost: they run again from their start), and its time held.
    pub(super) preemptions: u32,
    pub(super) wasted_ns: u64,
    pub(super) wait_ns: u64,
    /// Its longest single hold, and its longest kernel (start to end).
    pub(super) longest_wait_ns: u64,
    pub(super) longest_kernel_ns: u64,
}

impl TenantRecord {
    fn new(start_ns: u64, optimum_max_touches: Option<usize>) -> Self {
        TenantRecord {
            phase_start_ns: None,
            phase_end_ns: None,
            vram_timeline: vec![(start_ns, 0)],
            local_bytes: 0.0,
            remote_bytes: 0.0,
            alloc_latencies_ns: Vec::new(),
            evictions: Vec::new(),
            pauses: Vec::new(),
            fault_stall_ns: 0,
            faults_per_batch: Vec::new(),
            page_stream: optimum_max_touches.map(PageStream::new),
            optimum_capacity_pages: 1,
            preemptions: 0,
            wasted_ns: 0,
            wait_ns: 0,
            longest_wait_ns: 0,
            longest_kernel_ns: 0,
        }
    }

    /// The scheduling policy held one of its kernels this long.
    pub(super) fn record_wait(&mut self, ns: u64) {
        self.wait_ns += ns;
        self.longest_wait_ns = self.longest_wait_ns.max(ns);
    }

    /// Its accounted VRAM is `bytes` at `now_ns` (noted when it changed).
    pub(super) fn note_vram(&mut self, now_ns: u64, bytes: u64) {
        if self.vram_timeline.last().map(|l| l.1) != Some(bytes) {
            self.vram_timeline.push((now_ns, bytes));
        }
    }

    /// Its kernel moved `local_bytes` in VRAM and `remote_bytes` over the link.
    #[inline]
    pub(super) fn add_traffic(&mut self, local_bytes: f64, remote_bytes: f64) {
        self.local_bytes += local_bytes;
        self.remote_bytes += remote_bytes;
    }
}

/// A tenant's page touches in order, kept for Belady's bound (`optimum = true`) up to
/// `limit` touches: the stream costs 8 bytes a touch (and as much again to compute the
/// bound), so past the limit it is dropped and the bound is not computed.
pub(super) struct PageStream {
    touches: Vec<u64>,
    pub(super) limit: usize,
    pub(super) over: bool,
}

impl PageStream {
    fn new(limit: usize) -> Self {
        PageStream {
            touches: Vec::new(),
            limit,
            over: false,
        }
    }

    /// Records the touches of pages `pages`, in order.
    pub(super) fn extend(&mut self, pages: std::ops::Range<u64>) {
        if self.over {
            return;
        }
        let n = usize::try_from(pages.end - pages.start).unwrap_or(usize::MAX);
        if self.touches.len().saturating_add(n) > self.limit {
            self.over = true;
            self.touches = Vec::new();
            return;
        }
        self.touches.extend(pages);
    }

    /// Belady's bound at `capacity_pages`, unless the stream passed its limit.
    pub(super) fn bound(&self, capacity_pages: u64) -> Option<u64> {
        (!self.over)
            .then(|| gpuswap_core::uvm::optimum::belady_pages_in(&self.touches, capacity_pages))
    }
}
