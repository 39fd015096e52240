//! The protocol between the manager and whoever drives it: the requests that come in,
//! the actions that go out (grouped by who carries them out), and the errors a driver
//! gets when it breaks the protocol.
//!
//! What must follow each action:
//! - [`Reply`]: answers to the tenant; nothing comes back.
//! - [`Execution::Suspend`]: the driver stops the tenant's GPU work from starting and
//!   calls [`crate::Manager::handle_suspended`] once its queued work has drained.
//!   [`Execution::Resume`] lifts it. [`Execution::PolicyRan`] lets the driver charge the
//!   policy's run time; it may hold back the following actions meanwhile.
//! - [`Dma::Copy`]: the driver copies the chunk and calls
//!   [`crate::Manager::handle_copy_done`] (or [`crate::Manager::handle_copy_failed`]);
//!   exactly one copy is outstanding at a time. [`Dma::Cancel`] withdraws it: the
//!   driver reports nothing more about that copy.
//! - [`Execution::Kill`]: the driver ends the tenant; the manager has already released
//!   everything it held (its `Unmap`s follow).
//! - [`Mapping`]: the driver changes its page table; nothing comes back. `Map` comes
//!   before the `Grant` of the buffer, `Remap` after each finished copy, `Unmap` after a
//!   free or a tenant's exit.
//! - [`PageAction`] (unified memory, polled apart with
//!   [`crate::Manager::poll_page_action`]): the device changes its MMU's page state.
//!   Pages are numbered densely by the manager: page `b * 512 + i` is page `i` of VA
//!   block `b`, and `Manage` says which pages a buffer has. The device serves touches
//!   from its own page state (resident: local; mapped from host: remote; otherwise a
//!   fault into its batch) and reports each batch with
//!   [`crate::Manager::handle_fault_batch`]; the manager answers with migrations,
//!   evictions, pins and `Replay`, after which the device replays the batch. Once the
//!   migrations and evictions it was asked for have completed, the device calls
//!   [`crate::Manager::handle_migrations_done`]. Where the policy needs access counts,
//!   the device reports the resident pages kernels touch, in touch order, with
//!   [`crate::Manager::handle_access_notes`] (before the batch that follows them).

use thiserror::Error;

use crate::contract::{ContractError, Terms};

use crate::buffer::{BufferKind, Location};
use crate::ids::{BufferId, CopyId, LaunchId, RequestId, TenantId};
use crate::lists::ChunkRef;
use crate::uvm::pages::Pages;

/// An allocation request of a tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocRequest {
    /// The caller's number for the request, echoed in the answer.
    pub request: RequestId,
    /// Who asks.
    pub tenant: TenantId,
    /// How much.
    pub bytes: u64,
    /// What for.
    pub kind: BufferKind,
    /// The buffer's priority; `None` applies the default rule (stack lowest, other
    /// system buffers highest, everything else medium).
    pub priority: Option<i32>,
    /// Per-chunk priorities (one per chunk) for the `priority-chunk` policy; missing
    /// entries take the buffer's priority.
    pub chunk_priorities: Vec<i32>,
}

/// Why an allocation failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AllocError {
    /// VRAM cannot hold the request and the mode does not extend it.
    #[error("out of memory: requested {requested_bytes} bytes, {free_bytes} bytes of VRAM free")]
    OutOfMemory {
        /// Size of the failed request.
        requested_bytes: u64,
        /// VRAM that was free when it failed.
        free_bytes: u64,
    },
    /// Free VRAM could hold it, but not beside the other tenants' guarantees that a
    /// mode unable to evict keeps free for them.
    #[error(
        "out of memory: requested {requested_bytes} bytes, {free_bytes} bytes of VRAM free, {promised_bytes} of them guaranteed to other tenants"
    )]
    OutOfUnpromisedMemory {
        /// Size of the failed request.
        requested_bytes: u64,
        /// VRAM that was free when it failed.
        free_bytes: u64,
        /// Of it, guaranteed to other tenants and not yet held by them.
        promised_bytes: u64,
    },
    /// VRAM and host memory together cannot hold it.
    #[error(
        "out of host memory: requested {requested_bytes} bytes, {free_bytes} bytes of host memory free"
    )]
    OutOfHostMemory {
        /// Size of the failed request.
        requested_bytes: u64,
        /// Host memory that was free.
        free_bytes: u64,
    },
    /// A zero-byte allocation (CUDA returns an error for it too).
    #[error("zero-byte allocation")]
    ZeroBytes,
    /// The part of it that must go to host memory does not fit under the tenant's
    /// `host_limit`.
    #[error(
        "over the host_limit: requested {requested_bytes} bytes, {host_bytes_needed} of them for host memory, {room_bytes} bytes left under the limit"
    )]
    OverHostLimit {
        /// Size of the failed request.
        requested_bytes: u64,
        /// What it would place in host memory.
        host_bytes_needed: u64,
        /// Host memory left under the tenant's limit.
        room_bytes: u64,
    },
    /// It would take the tenant beyond its `memory_limit` (with `at_limit = "fail"`,
    /// or a request that could never fit under it).
    #[error(
        "over the memory_limit: requested {requested_bytes} bytes with {allocated_bytes} allocated, limit {limit_bytes} bytes"
    )]
    OverMemoryLimit {
        /// Size of the failed request.
        requested_bytes: u64,
        /// What the tenant had allocated.
        allocated_bytes: u64,
        /// Its limit.
        limit_bytes: u64,
    },
    /// It waited at the tenant's `memory_limit` (`at_limit = "wait"`) for the tenant's
    /// own frees longer than its `wait_timeout`.
    #[error(
        "over the memory_limit: requested {requested_bytes} bytes, and the tenant's own frees made no room for it within its wait_timeout"
    )]
    WaitTimedOut {
        /// Size of the request.
        requested_bytes: u64,
    },
    /// VRAM is short and the tenants holding it cannot give enough without going under
    /// their guarantees or over their host limits.
    #[error(
        "out of memory within the contracts: requested {requested_bytes} bytes; the tenants holding VRAM cannot give enough without going under their vram_guarantee or over their host_limit"
    )]
    NoVictim {
        /// Size of the failed request.
        requested_bytes: u64,
    },
}

/// Why a free failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FreeError {
    /// The buffer does not exist (never allocated or already freed).
    #[error("{0} does not exist")]
    Unknown(BufferId),
    /// The buffer belongs to somebody else.
    #[error("{buffer} belongs to {owner}, not to {caller}")]
    NotOwner {
        /// The buffer.
        buffer: BufferId,
        /// Its owner.
        owner: TenantId,
        /// Who tried to free it.
        caller: TenantId,
    },
}

/// A driver broke the protocol: it answered something the manager did not ask, or asked
/// for something the configuration does not offer. The manager's state is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProtocolError {
    /// `handle_suspended` for a tenant the manager is not waiting on.
    #[error("{tenant} reported drained, but no suspension of it is outstanding")]
    UnexpectedSuspended {
        /// Who was reported.
        tenant: TenantId,
    },
    /// `handle_copy_done` for a copy that is not the outstanding one.
    #[error("copy {} reported done, but the outstanding copy is {}", .copy.0, .outstanding.map_or("none".to_owned(), |c| c.0.to_string()))]
    UnexpectedCopyDone {
        /// The copy reported.
        copy: CopyId,
        /// The copy the manager waits for, if any.
        outstanding: Option<CopyId>,
    },
    /// `handle_copy_failed` for a copy that is not the outstanding one.
    #[error("copy {} reported failed, but the outstanding copy is {}", .copy.0, .outstanding.map_or("none".to_owned(), |c| c.0.to_string()))]
    UnexpectedCopyFailed {
        /// The copy reported.
        copy: CopyId,
        /// The copy the manager waits for, if any.
        outstanding: Option<CopyId>,
    },
    /// A paging event (`handle_fault_batch`, `handle_access_notes`,
    /// `handle_migrations_done`) under a policy that does not page.
    #[error("a paging event reached mode {mode}, which does not page (it needs no page faults)")]
    NotPaging {
        /// The mode.
        mode: &'static str,
    },
    /// `handle_batch_done` for a batch that is not the outstanding one, or naming a move
    /// the batch does not have.
    #[error("batch {} reported done, but the outstanding batch is {}", .copy.0, .outstanding.map_or("none".to_owned(), |c| c.0.to_string()))]
    UnexpectedBatchDone {
        /// The batch reported.
        copy: CopyId,
        /// The batch the manager waits for, if any.
        outstanding: Option<CopyId>,
    },
    /// `handle_launch` although the configuration's scheduler does not gate launches.
    #[error("{launch} of {tenant} asked for admission, but launches are not gated")]
    LaunchNotGated {
        /// The launch.
        launch: LaunchId,
        /// Its tenant.
        tenant: TenantId,
    },
}

/// Why a tenant was not admitted (`Manager::handle_tenant_start`); nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AdmitError {
    /// The number's previous tenant still holds buffers or waits.
    #[error("{tenant} still holds buffers or waits: it cannot start afresh")]
    InUse {
        /// The number.
        tenant: TenantId,
    },
    /// The contract contradicts itself.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// The contract sets terms the mode has no meaning for.
    #[error("mode {mode} does not honour {terms} (it honours {honoured})")]
    Unhonoured {
        /// The mode.
        mode: &'static str,
        /// The terms it would ignore.
        terms: Terms,
        /// The terms it honours.
        honoured: Terms,
    },
    /// The guarantee does not fit beside the other tenants'.
    #[error(
        "vram_guarantee of {guarantee_bytes} bytes does not fit: {room_bytes} bytes of VRAM are {}",
        if *.reclaims { "not guaranteed to other tenants" } else { "neither held by nor promised to other tenants (this mode cannot take VRAM back)" }
    )]
    GuaranteeDoesNotFit {
        /// The guarantee asked.
        guarantee_bytes: u64,
        /// VRAM it could have.
        room_bytes: u64,
        /// Whether the mode can take VRAM back from tenants (then only guarantees
        /// count).
        reclaims: bool,
    },
}

/// Why a relocation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// To make room for an allocation request.
    Evict,
    /// To bring evicted data back into free VRAM.
    Return,
    /// Reverse swapping: hot evicted chunks in, random resident ones out.
    Swap,
    /// Gdev: the launching tenant's buffers in, other tenants' buffers out.
    Launch,
    /// Turns: the GPU passes to another tenant; the held tenants' overflow out, the new
    /// holder's in, in bulk ([`Dma::Batch`]).
    Turn,
}

/// What the driver must carry out, grouped by who performs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// An answer to a tenant's request.
    Reply(Reply),
    /// Control of tenants' GPU execution.
    Execution(Execution),
    /// Work for the copy engines.
    Dma(Dma),
    /// Changes of the GPU page table.
    Mapping(Mapping),
}

/// Answers to tenants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The request is served by this buffer (its `Map` came first).
    Grant {
        /// The request answered.
        request: RequestId,
        /// Who asked.
        tenant: TenantId,
        /// The new buffer.
        buffer: BufferId,
    },
    /// The request cannot be served.
    Fail {
        /// The request answered.
        request: RequestId,
        /// Who asked.
        tenant: TenantId,
        /// Why.
        error: AllocError,
    },
    /// A gated launch may start: its tenant's data is where the policy wants it.
    LaunchReady {
        /// The tenant.
        tenant: TenantId,
        /// The launch.
        launch: LaunchId,
    },
    /// A gated launch can never run (Gdev: the tenant's buffers exceed VRAM).
    LaunchFail {
        /// The tenant.
        tenant: TenantId,
        /// The launch.
        launch: LaunchId,
        /// Why.
        error: AllocError,
    },
}

/// Execution control.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Execution {
    /// The eviction policy ran for `tenant`'s request and chose `chunks` chunks.
    PolicyRan {
        /// Whose request.
        tenant: TenantId,
        /// Chunks chosen.
        chunks: u32,
        /// The work it took as the prototype does it: list entries walked (per chosen
        /// chunk, every tenant for the victim and the victim's whole resident list for
        /// the chunk; the prototype keeps unordered lists). The driver charges time for it.
        entries_walked: u64,
    },
    /// Stop `tenant`'s GPU access: new work queues, nothing new starts; answer with
    /// [`crate::Manager::handle_suspended`] when its queued work has drained.
    Suspend {
        /// The tenant.
        tenant: TenantId,
        /// Why.
        purpose: Purpose,
    },
    /// Restore `tenant`'s GPU access.
    Resume {
        /// The tenant.
        tenant: TenantId,
    },
    /// Stop `tenant`'s running kernel at its next instrumented check (PILOT's software
    /// preemption); report it with [`crate::Manager::handle_kernel_preempted`] and run it
    /// again from its start when it is ready again. Nothing if no kernel of it runs.
    Preempt {
        /// The tenant.
        tenant: TenantId,
    },
    /// `tenant`'s kernel that [`crate::Manager::handle_kernel_ready`] held may start now.
    Start {
        /// The tenant.
        tenant: TenantId,
    },
    /// End `tenant`: its data cannot be kept. The manager has released everything the
    /// tenant held as for [`crate::Manager::handle_tenant_exit`] (the `Unmap`s follow);
    /// the driver tears down its context and reports the reason.
    Kill {
        /// The tenant.
        tenant: TenantId,
        /// Why.
        reason: KillReason,
    },
}

/// Why the manager ends a tenant.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum KillReason {
    /// A relocation copy of one of its chunks failed every attempt: the chunk's data
    /// is in neither place for sure, so the tenant cannot go on (a real driver marks the
    /// context lost the same way after an unrecoverable DMA error).
    #[error("relocation copy of {chunk:?} failed {attempts} times")]
    CopyFailed {
        /// The chunk.
        chunk: ChunkRef,
        /// Attempts made.
        attempts: u32,
    },
}

/// Copy-engine work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dma {
    /// Copy one chunk; answer with [`crate::Manager::handle_copy_done`].
    Copy {
        /// The copy's number.
        copy: CopyId,
        /// Owner of the chunk.
        tenant: TenantId,
        /// The chunk.
        chunk: ChunkRef,
        /// Its length.
        bytes: u64,
        /// Destination.
        to: Location,
    },
    /// Copy many chunks of one tenant, their copies in flight together, and remap each
    /// once copied; answer once with [`crate::Manager::handle_batch_done`], naming the
    /// moves that failed. Only turns' handovers ask for it; it counts as the one
    /// outstanding copy.
    Batch {
        /// The batch's number (from the copies' numbering).
        copy: CopyId,
        /// Owner of the chunks.
        tenant: TenantId,
        /// The moves, at most [`crate::MAX_BATCH_MOVES`].
        moves: Vec<BatchMove>,
    },
    /// Withdraw the outstanding copy: its tenant exited. A transfer already on the copy
    /// engine may run out, but its result is dropped and never reported.
    Cancel {
        /// The copy.
        copy: CopyId,
    },
}

/// One move of a [`Dma::Batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchMove {
    /// The chunk.
    pub chunk: ChunkRef,
    /// Its length.
    pub bytes: u64,
    /// Destination.
    pub to: Location,
}

/// Page-table changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// Map a new buffer: chunk `i` covers bytes `[i * chunk_bytes, ...)` and lives at
    /// `locations[i]`.
    Map {
        /// Owner.
        tenant: TenantId,
        /// The buffer.
        buffer: BufferId,
        /// Its size.
        bytes: u64,
        /// Chunk size (the last chunk may be shorter).
        chunk_bytes: u64,
        /// Where each chunk lives.
        locations: Vec<Location>,
    },
    /// Point a chunk's entries at its new location and free the old frames.
    Remap {
        /// Owner.
        tenant: TenantId,
        /// The chunk.
        chunk: ChunkRef,
        /// Where it lives now.
        to: Location,
    },
    /// Drop a freed buffer's entries.
    Unmap {
        /// Owner.
        tenant: TenantId,
        /// The buffer.
        buffer: BufferId,
    },
}

/// Whether a kernel reads or writes what it touches (writes are never served remotely
/// under delayed migration, and make pages dirty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    /// Only reads.
    Read,
    /// Writes (perhaps reads too).
    Write,
}

/// One page of a fault batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The page, in the manager's numbering.
    pub page: u64,
    /// The access that faulted.
    pub kind: AccessKind,
}

/// How the device serves touches of a VA block's pages that are neither in VRAM nor
/// waiting in a batch (until the manager says otherwise; `Fault` before it says
/// anything).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServeRule {
    /// They fault.
    #[default]
    Fault,
    /// They are read and written remotely, mapped from host memory (zero-copy, a
    /// host-pinned allocation, PILOT's advice).
    Remote,
    /// Reads are served remotely while the block's access counter (remote reads and
    /// faults since it last lost pages) stays below this; the read that reaches it, and
    /// every write, faults (delayed migration).
    Counter(u32),
}

/// Unified memory's page-state changes, for the device's MMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageAction {
    /// A managed buffer's pages `first_page..first_page + pages` exist, all in host
    /// memory and unmapped (touches fault).
    Manage {
        /// Owner.
        tenant: TenantId,
        /// The buffer.
        buffer: BufferId,
        /// Its first page.
        first_page: u64,
        /// Its pages.
        pages: u64,
    },
    /// A freed managed buffer's pages are gone: whatever of them is in VRAM is dropped,
    /// not copied back.
    Release {
        /// Its first page.
        first_page: u64,
        /// Its pages.
        pages: u64,
    },
    /// How touches of `block`'s pages away from VRAM are served from now on.
    Serve {
        /// The VA block.
        block: u32,
        /// The rule.
        rule: ServeRule,
    },
    /// Migrate `pages` of `block` to VRAM (one transfer). Those not waiting in the
    /// batch are the prefetcher's: the device knows which pages faulted.
    MigrateIn {
        /// The VA block.
        block: u32,
        /// The pages.
        pages: Pages,
    },
    /// Evict `pages` of `block` to host memory: copied back, or with `drop_clean`, only
    /// those written since they arrived (the host's copy of the others is still good).
    Evict {
        /// The VA block.
        block: u32,
        /// The pages.
        pages: Pages,
        /// Whether clean pages are dropped instead of copied.
        drop_clean: bool,
    },
    /// Pin `pages` of `block` in host memory, mapped remotely, until `until_ns`
    /// (thrashing mitigation); they are served remotely whatever the block's rule.
    Pin {
        /// The VA block.
        block: u32,
        /// The pages.
        pages: Pages,
        /// When the pin ends.
        until_ns: u64,
    },
    /// The batch waits `nap_ns` before its replay (thrashing throttle).
    Throttle {
        /// The nap.
        nap_ns: u64,
    },
    /// The batch is serviced: the device replays its faults.
    Replay,
}

/// What the driver observed about one finished kernel of a tenant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelStats {
    /// The launch that finished.
    pub launch: Option<LaunchId>,
    /// Memory accesses (transactions) the kernel made.
    pub accesses: u64,
    /// How long it ran.
    pub ns: u64,
    /// When it finished.
    pub finished_ns: u64,
    /// How long it would have run with all its data in VRAM (hardware-counter estimate).
    pub ideal_ns: u64,
    /// Evicted chunks whose reference bits the kernel set.
    pub referenced: Vec<ChunkRef>,
}

/// Memory figures of one tenant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantUsage {
    /// Bytes of the tenant's buffers accounted in VRAM.
    pub vram_bytes: u64,
    /// Bytes of the tenant's buffers accounted in host memory.
    pub host_bytes: u64,
    /// Highest `vram_bytes` so far.
    pub vram_peak_bytes: u64,
    /// Bytes relocated from VRAM to host memory.
    pub bytes_evicted: u64,
    /// Bytes relocated from host memory back to VRAM.
    pub bytes_returned: u64,
}
