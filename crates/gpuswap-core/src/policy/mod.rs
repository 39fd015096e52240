//! Memory policies: what a manager does when memory runs short. Each mode is one
//! [`MemoryPolicy`] in its own file, registered once in [`crate::registry`]; the manager
//! calls its hooks and carries out what it decides through a [`Ctx`].

use std::collections::VecDeque;

use crate::accounting::Books;
use crate::ids::{BufferId, LaunchId, TenantId};
use crate::protocol::{Action, AllocError, AllocRequest, KernelStats, Purpose};
use crate::relocation::{Move, Relocation, Then};

pub(crate) mod fcfs;
pub(crate) mod gdev;
pub(crate) mod gpuswap;
pub(crate) mod native;
pub(crate) mod static_share;
pub(crate) mod uvm;

/// Priority of buffers that have none: the middle of the scale.
pub const PRIORITY_DEFAULT: i32 = 50;
/// Priority of the runtime's stack buffer: large and nearly never touched.
pub const PRIORITY_STACK: i32 = 0;
/// Priority of the runtime's other system buffers (code, constants): always needed.
pub const PRIORITY_SYSTEM: i32 = 100;

/// What a policy needs from the device and the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Reference bits in the GPU's view of host pages (reported in
    /// [`KernelStats::referenced`]).
    pub reference_bits: bool,
    /// Launches wait for the manager's `LaunchReady` (call `handle_launch` first), and
    /// launches and memcpys pass through a software scheduler.
    pub launch_gating: bool,
    /// The manager wants `handle_timeout` at the times `poll_timeout` names.
    pub timers: bool,
    /// Replayable page faults: kernels touch managed pages and the manager pages them
    /// (unified memory).
    pub page_faults: bool,
}

impl Needs {
    /// Nothing special (usable in constants, unlike `Default`).
    pub const NONE: Needs = Needs {
        reference_bits: false,
        launch_gating: false,
        timers: false,
        page_faults: false,
    };

    /// Both sets of needs.
    pub const fn union(self, other: Needs) -> Needs {
        Needs {
            reference_bits: self.reference_bits || other.reference_bits,
            launch_gating: self.launch_gating || other.launch_gating,
            timers: self.timers || other.timers,
            page_faults: self.page_faults || other.page_faults,
        }
    }

    /// The names of what is needed, for listings.
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.reference_bits, "reference bits"),
            (self.launch_gating, "launch gating"),
            (self.timers, "timers"),
            (self.page_faults, "page faults"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// What victim and return policies know about one tenant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TenantView {
    pub id: TenantId,
    /// VRAM held, counting chunks already chosen as gone and the request as held.
    pub vram_bytes: u64,
    /// Whether the tenant has a chunk left to give (or to get back).
    pub can_give: bool,
    /// Estimated slowdown (1 when unknown).
    pub slowdown: f64,
    /// Memory accesses per second in the last measurement period.
    pub access_rate: f64,
}

/// How an allocation was placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// The buffer is ready.
    Now(BufferId),
    /// A relocation runs first; its end grants the buffer.
    AfterRelocation,
}

/// How a gated launch is prepared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LaunchPrep {
    /// It may start now.
    Ready,
    /// A relocation runs first; its end answers.
    AfterRelocation,
    /// It can never run.
    Fail(AllocError),
}

/// What a policy may touch while it decides: the books, the relocation machine and the
/// outgoing actions.
pub(crate) struct Ctx<'a> {
    pub(crate) books: &'a mut Books,
    pub(crate) relocation: &'a mut Relocation,
    pub(crate) out: &'a mut VecDeque<Action>,
    /// Set when a relocation started by the policy ended at once (nothing to move).
    pub(crate) finished: Option<Then>,
}

impl Ctx<'_> {
    /// Starts a relocation; a relocation with nothing to move ends at once.
    pub(crate) fn relocate(&mut self, purpose: Purpose, then: Then, moves: Vec<(TenantId, Move)>) {
        self.finished = self
            .relocation
            .start(purpose, then, moves, self.books, self.out);
    }
}

/// A memory policy. Hooks default to doing nothing; a policy overrides what it reacts
/// to. What it needs from the device is declared in its registry entry, not here, so
/// listings and the manager read one source. `on_alloc` and `on_launch` are only called while no relocation runs; the other
/// hooks must check [`Relocation::running`] before they start one.
pub(crate) trait MemoryPolicy: std::fmt::Debug + Send {
    /// Places a new buffer, or refuses it.
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError>;

    /// A tenant freed a buffer (the books already dropped it).
    fn on_free(&mut self, _ctx: &mut Ctx, _tenant: TenantId, _buffer: BufferId) {}

    /// When the policy next wants [`MemoryPolicy::on_timeout`], if at all.
    fn next_timeout(&self, _books: &Books) -> Option<u64> {
        None
    }

    /// Time passed to `now_ns`.
    fn on_timeout(&mut self, _ctx: &mut Ctx, _now_ns: u64) {}

    /// A kernel of `tenant` finished (the books already hold its statistics).
    fn on_kernel_finished(&mut self, _ctx: &mut Ctx, _tenant: TenantId, _stats: &KernelStats) {}

    /// A gated launch of `tenant` was admitted by the scheduler: prepare its memory.
    fn on_launch(&mut self, _ctx: &mut Ctx, _tenant: TenantId, _launch: LaunchId) -> LaunchPrep {
        LaunchPrep::Ready
    }
}

/// Checks that host memory can take `host_bytes_needed` of a request.
pub(crate) fn check_host_room(
    books: &Books,
    req: &AllocRequest,
    host_bytes_needed: u64,
) -> Result<(), AllocError> {
    let free_bytes = books.host_free_bytes();
    if host_bytes_needed > free_bytes {
        return Err(AllocError::OutOfHostMemory {
            requested_bytes: req.bytes,
            free_bytes,
        });
    }
    Ok(())
}

/// The common placement of the modes that split a buffer at a byte offset: the first
/// `vram_share_bytes` in whole chunks go to VRAM, the rest to host memory.
pub(crate) fn place_split(
    books: &mut Books,
    req: &AllocRequest,
    vram_share_bytes: u64,
) -> Result<Placed, AllocError> {
    if req.bytes == 0 {
        return Err(AllocError::ZeroBytes);
    }
    let host_bytes_needed = crate::buffer::chunk_layout(req.bytes, books.chunk_bytes)
        .filter(|(offset, len)| offset + len > vram_share_bytes)
        .map(|(_, len)| len)
        .sum();
    check_host_room(books, req, host_bytes_needed)?;
    let id = books.create_buffer(req, vram_share_bytes, false);
    books.note_peak(req.tenant);
    Ok(Placed::Now(id))
}
