//! The compute engine's state: the kernels on the device and the launches on their way
//! to it (the ready tenants, the round robin's place, Gdev's gate and queue), and how
//! kernels share it. What starts when is the
//! engine's orchestration (`compute.rs`), which asks the manager and the tenants; this
//! owns what the compute engine itself holds.

use std::collections::VecDeque;
use std::rc::Rc;

use gpuswap_core::{BufferId, ChunkRef, LaunchId};

use super::compute::FixedShare;
use super::ready::ReadySet;
use super::slices::Slices;
use super::{Launch, PagedRun, Sharing};
use crate::timing::READ_TRANSACTION_BYTES;

/// The compute engine and the launches on their way to it.
pub(super) struct ComputeEngine {
    /// Kernels on the GPU (one at a time under time slicing, one per tenant under MPS).
    pub(super) running: Vec<RunningKernel>,
    /// Where the round robin looks for the next tenant with a kernel: after the last one
    /// that launched. It may be the tenant count, which stands for 0 because
    /// `ReadySet::next_from` wraps around: no division on every launch.
    pub(super) round_robin_next: usize,
    /// Tenants whose channel holds kernels, so that choosing the next one costs a lookup,
    /// not a scan of every tenant.
    pub(super) ready: ReadySet,
    /// A gated launch the software scheduler holds until the manager admits it.
    pub(super) held_launch: Option<(usize, Launch)>,
    /// Gated launches past the scheduler that wait for the compute engine, behind their
    /// context's running kernel: Gdev's current context may have several launches in
    /// flight (`launch_limit`; see `Engine::start_now`).
    pub(super) gated: VecDeque<(usize, Launch)>,
    /// The running context whose next launch found it at its launch limit: it launches
    /// nothing more until it has nothing in flight.
    pub(super) gdev_at_limit: Option<usize>,
    /// How kernels share the compute engine.
    pub(super) sharing: Sharing,
    /// Whether unified-memory kernels run in segments (see `compute::SEGMENTS`).
    pub(super) segmented: bool,
    /// Preemptive time slicing: whose slice runs, and the kernels it preempted.
    pub(super) slices: Slices,
    /// `Engine::start_kernel` runs, and was called again meanwhile.
    starting: bool,
    start_again: bool,
}

impl ComputeEngine {
    /// An idle compute engine that kernels share by `sharing`, unified-memory kernels
    /// running in segments if `segmented`.
    pub(super) fn new(sharing: Sharing, segmented: bool) -> Self {
        ComputeEngine {
            running: Vec::new(),
            round_robin_next: 0,
            ready: ReadySet::default(),
            held_launch: None,
            gated: VecDeque::new(),
            gdev_at_limit: None,
            sharing,
            segmented,
            slices: Slices::default(),
            starting: false,
            start_again: false,
        }
    }

    /// The running kernel of launch `launch`.
    #[inline]
    pub(super) fn kernel_mut(&mut self, launch: LaunchId) -> Option<&mut RunningKernel> {
        self.running.iter_mut().find(|r| r.launch == launch)
    }

    /// Whether a kernel of tenant `t`'s runs.
    #[inline]
    pub(super) fn runs_kernel_of(&self, t: usize) -> bool {
        self.running.iter().any(|r| r.tenant == t)
    }

    /// Whether no kernel runs and no launch waits at the gate: a Gdev memcpy may take
    /// the device.
    pub(super) fn idle(&self) -> bool {
        self.running.is_empty() && self.held_launch.is_none()
    }

    /// Enters a round of starting kernels: false when one runs already (it is then
    /// asked to go round again: starting a kernel can bring the scheduling policy's
    /// decisions, and a start is never nested in another).
    #[inline]
    pub(super) fn enter_start(&mut self) -> bool {
        if self.starting {
            self.start_again = true;
            return false;
        }
        self.starting = true;
        self.start_again = false;
        true
    }

    /// Whether the round of starts must go round again (a start was asked meanwhile);
    /// when not, the round is over.
    #[inline]
    pub(super) fn go_round_again(&mut self) -> bool {
        let again = std::mem::take(&mut self.start_again);
        if !again {
            self.starting = false;
        }
        again
    }
}

/// A kernel on the device. Every launch copies one into `ComputeEngine::running`, and
/// past 128 bytes the copy is a call to `memmove` (a twentieth of every kernel's cost):
/// state only some kernels have is boxed (`PagedRun`) or derived
/// (`RunningKernel::bandwidth_share`).
pub(super) struct RunningKernel {
    pub(super) launch: LaunchId,
    pub(super) tenant: usize,
    pub(super) started_ns: u64,
    pub(super) ideal_ns: u64,
    pub(super) accesses: u64,
    pub(super) fixed_done: bool,
    pub(super) flows_left: u32,
    pub(super) written: Rc<[BufferId]>,
    pub(super) referenced: Box<[ChunkRef]>,
    /// Unified memory: its paging state (`None` for other kernels).
    pub(super) paged: Option<Box<PagedRun>>,
    /// Under MPS: its fixed part's progress while it runs.
    pub(super) share: Option<FixedShare>,
    /// A scheduler asked it to stop at its next segment's end.
    pub(super) preempt: bool,
    /// Where it was launched, to run it again from its start after a preemption.
    pub(super) site: usize,
}

const _: () = assert!(std::mem::size_of::<RunningKernel>() <= 128);

impl RunningKernel {
    /// The share of VRAM bandwidth it asks alone: what it moves over its all-in-VRAM
    /// time (derived where kernels share the device, not stored: see the struct).
    pub(super) fn bandwidth_share(&self, vram_bytes_per_s: f64) -> f64 {
        if self.ideal_ns == 0 {
            return 0.0;
        }
        let bytes = self.accesses as f64 * READ_TRANSACTION_BYTES as f64;
        (bytes / (self.ideal_ns as f64 * 1e-9) / vram_bytes_per_s).min(1.0)
    }

    /// The share of its all-in-VRAM time its arithmetic (`compute_ns` of its `ops`)
    /// takes alone: what fewer SMs slow (derived like the bandwidth share).
    pub(super) fn compute_share(&self, compute_ns: f64) -> f64 {
        if self.ideal_ns == 0 {
            return 0.0;
        }
        (compute_ns / self.ideal_ns as f64).min(1.0)
    }
}
