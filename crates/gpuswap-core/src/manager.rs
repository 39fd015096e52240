//! The memory manager: accounting of VRAM per tenant, the allocation flow with eviction,
//! the relocation state machine and the return path.
//!
//! Events come in through `handle_*`; the answers the driver must carry out come out of
//! [`Manager::poll_action`] in the order they were decided. A relocation is a conversation:
//! the manager asks to `Suspend` a tenant, the driver answers
//! [`Manager::handle_suspended`] once the tenant's queued work drained; the manager asks
//! for one `Copy` at a time, the driver answers [`Manager::handle_copy_done`]; the
//! manager then says `Remap` and, after the tenant's last chunk, `Resume`.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;
use thiserror::Error;

use crate::buffer::{Buffer, BufferKind, BufferTable, Chunk, Location, SystemBuffer, chunk_layout};
use crate::ids::{BufferId, RequestId, TenantId};
use crate::lists::{ChunkLists, ChunkRef, rank};
use crate::policy::{
    self, ChunkPolicy, PRIORITY_DEFAULT, PRIORITY_STACK, PRIORITY_SYSTEM, TenantView, VictimPolicy,
};

/// How the manager treats allocations that do not fit in VRAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// A stock driver: allocations come from VRAM while it lasts, then fail.
    Native,
    /// GPUswap: evict chunks of a victim to host memory and remap them.
    Gpuswap,
    /// First come, first served: chunks beyond free VRAM go straight to host memory.
    Fcfs,
    /// Static partitioning: each of `tenants` tenants may hold 1/n of VRAM; the rest of
    /// its allocations go to host memory.
    Static {
        /// The n of 1/n, known in advance.
        tenants: u32,
    },
    /// Gdev-style software scheduling: allocations take whole buffers from VRAM while it
    /// lasts, then from host memory; before each launch the launching tenant's buffers
    /// are copied into VRAM whole, evicting other tenants' buffers whole (least recently
    /// launched first). A tenant whose buffers do not fit in VRAM cannot launch.
    Gdev,
}

/// Fixed settings of a manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagerConfig {
    /// VRAM the manager may hand to tenants (driver-reserved memory is not part of it).
    pub vram_bytes: u64,
    /// Host memory that can back evicted or host-placed chunks.
    pub host_bytes: u64,
    /// Size of a chunk, the unit of accounting and relocation.
    pub chunk_bytes: u64,
    /// What happens when VRAM runs out.
    pub mode: Mode,
    /// Who gives up memory (gpuswap mode).
    pub victim: VictimPolicy,
    /// Which chunk moves (gpuswap mode).
    pub chunk_policy: ChunkPolicy,
    /// Period of the return check and of access-rate measurements.
    pub return_interval_ns: u64,
    /// Seed of the policies' random choices.
    pub seed: u64,
}

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
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize)]
pub enum AllocError {
    /// VRAM cannot hold the request and the mode does not extend it.
    #[error("out of memory: requested {requested_bytes} bytes, {free_bytes} bytes of VRAM free")]
    OutOfMemory {
        /// Size of the failed request.
        requested_bytes: u64,
        /// VRAM that was free when it failed.
        free_bytes: u64,
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

/// Identifies one chunk copy the manager asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct CopyId(pub u64);

/// Why a relocation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Purpose {
    /// To make room for an allocation request.
    Evict,
    /// To bring evicted data back into free VRAM.
    Return,
    /// Reverse swapping: hot evicted chunks in, random resident ones out.
    Swap,
    /// Gdev: the launching tenant's buffers in, other tenants' buffers out.
    Launch,
}

/// What the driver must carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The request is served by this buffer; its chunks say where each part lives.
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
    /// The eviction policy ran for `tenant`'s request and chose `chunks` chunks
    /// (the caller may account the policy's run time).
    PolicyRan {
        /// Whose request.
        tenant: TenantId,
        /// Chunks chosen.
        chunks: u32,
    },
    /// Stop `tenant`'s GPU access: new launches queue, nothing new starts; answer with
    /// [`Manager::handle_suspended`] when its queued work has drained.
    Suspend {
        /// The tenant.
        tenant: TenantId,
        /// Why.
        purpose: Purpose,
    },
    /// Copy one chunk with the copy engine; answer with [`Manager::handle_copy_done`].
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
    /// Point the chunk's page-table entries at its new location and free the old frames.
    Remap {
        /// Owner.
        tenant: TenantId,
        /// The chunk.
        chunk: ChunkRef,
        /// Where it lives now.
        to: Location,
    },
    /// Restore `tenant`'s GPU access.
    Resume {
        /// The tenant.
        tenant: TenantId,
    },
    /// Gdev: `tenant`'s buffers are in VRAM; its kernel may start.
    LaunchReady {
        /// The tenant.
        tenant: TenantId,
    },
    /// Gdev: `tenant`'s buffers cannot all fit in VRAM; its kernel cannot run.
    LaunchFail {
        /// The tenant.
        tenant: TenantId,
        /// Why.
        error: AllocError,
    },
}

/// What the driver observed about one finished kernel of a tenant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelStats {
    /// Memory accesses (transactions) the kernel made.
    pub accesses: u64,
    /// How long it ran.
    pub ns: u64,
    /// How long it would have run with all its data in VRAM (hardware-counter estimate).
    pub ideal_ns: u64,
    /// Evicted chunks whose reference bits the kernel set.
    pub referenced: Vec<ChunkRef>,
}

/// Memory figures of one tenant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
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

#[derive(Debug, Default)]
struct TenantState {
    usage: TenantUsage,
    /// Chunks accounted in VRAM, by priority.
    resident: ChunkLists,
    /// Chunks accounted in host memory, by priority.
    evicted: ChunkLists,
    /// Allocations so far: numbers buffers for the chunks' random ranks.
    allocations: u64,
    kernel_ns: u64,
    ideal_ns: u64,
    accesses_in_period: u64,
    access_rate: f64,
}

#[derive(Clone, Copy, Debug)]
struct Move {
    chunk: ChunkRef,
    to: Location,
}

#[derive(Debug)]
struct Batch {
    tenant: TenantId,
    moves: VecDeque<Move>,
}

#[derive(Debug)]
enum Step {
    Suspending,
    Copying { copy: CopyId, mv: Move },
}

/// What a relocation job answers when it ends.
#[derive(Clone, Copy, Debug)]
enum Then {
    Nothing,
    Grant(RequestId, TenantId, BufferId),
    LaunchReady(TenantId),
}

#[derive(Debug)]
struct Job {
    purpose: Purpose,
    then: Then,
    batches: VecDeque<Batch>,
    current: Option<(Batch, Step)>,
}

/// The memory manager.
#[derive(Debug)]
pub struct Manager {
    config: ManagerConfig,
    buffers: BufferTable,
    tenants: BTreeMap<TenantId, TenantState>,
    vram_used_bytes: u64,
    host_used_bytes: u64,
    next_buffer: u64,
    next_copy: u64,
    actions: VecDeque<Action>,
    job: Option<Job>,
    waiting: VecDeque<AllocRequest>,
    waiting_launches: VecDeque<TenantId>,
    last_check_ns: u64,
    /// Gdev: when each tenant last launched (a launch counter), for LRU eviction.
    last_launch: BTreeMap<TenantId, u64>,
    launches: u64,
}

impl Manager {
    /// A manager with nothing allocated.
    ///
    /// # Panics
    /// If `config.chunk_bytes` or `config.return_interval_ns` is zero: callers validate
    /// configuration before this.
    pub fn new(config: ManagerConfig) -> Self {
        assert!(config.chunk_bytes > 0, "chunk size must be positive");
        assert!(
            config.return_interval_ns > 0,
            "return interval must be positive"
        );
        Self {
            config,
            buffers: BufferTable::default(),
            tenants: BTreeMap::new(),
            vram_used_bytes: 0,
            host_used_bytes: 0,
            next_buffer: 0,
            next_copy: 0,
            actions: VecDeque::new(),
            job: None,
            waiting: VecDeque::new(),
            waiting_launches: VecDeque::new(),
            last_check_ns: 0,
            last_launch: BTreeMap::new(),
            launches: 0,
        }
    }

    // ---- getters ----

    /// The configuration the manager was built with.
    pub fn config(&self) -> &ManagerConfig {
        &self.config
    }

    /// VRAM accounted to tenants' buffers (ahead of reality while a relocation runs).
    pub fn vram_used_bytes(&self) -> u64 {
        self.vram_used_bytes
    }

    /// VRAM not accounted to anybody.
    pub fn vram_free_bytes(&self) -> u64 {
        self.config.vram_bytes - self.vram_used_bytes
    }

    /// A number that changes whenever any buffer or chunk placement may have changed:
    /// what a caller derives from placements stays valid while it stays the same.
    pub fn placement_epoch(&self) -> u64 {
        self.buffers.epoch()
    }

    /// A live buffer.
    pub fn buffer(&self, id: BufferId) -> Option<&Buffer> {
        self.buffers.get(&id)
    }

    /// The live buffers of a tenant, in allocation order.
    pub fn buffers_of(&self, tenant: TenantId) -> impl Iterator<Item = &Buffer> {
        self.buffers.values().filter(move |b| b.tenant == tenant)
    }

    /// Memory figures of a tenant (zero for a tenant the manager has not seen).
    pub fn usage(&self, tenant: TenantId) -> TenantUsage {
        self.tenants
            .get(&tenant)
            .map(|t| t.usage)
            .unwrap_or_default()
    }

    /// Whether a relocation is in progress (allocation requests wait for it).
    pub fn relocating(&self) -> bool {
        self.job.is_some()
    }

    /// Checks the accounting invariants: chunks tile their buffers, every chunk is in
    /// exactly the list of its planned location, per-chunk locations sum to the
    /// per-tenant figures, those sum to the global figures, and VRAM is never
    /// over-committed.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut per_tenant: BTreeMap<TenantId, (u64, u64)> = BTreeMap::new();
        for buffer in self.buffers.values() {
            let chunk_sum: u64 = buffer.chunks.iter().map(|c| c.bytes).sum();
            if chunk_sum != buffer.bytes {
                return Err(format!(
                    "{}: chunks hold {chunk_sum} of {} bytes",
                    buffer.id, buffer.bytes
                ));
            }
            let state = &self.tenants[&buffer.tenant];
            for (index, chunk) in buffer.chunks.iter().enumerate() {
                let r = ChunkRef {
                    buffer: buffer.id,
                    index: index as u32,
                };
                let (resident, evicted) = (state.resident.contains(r), state.evicted.contains(r));
                let expected = chunk.planned_location() == Location::Vram;
                if resident != expected || evicted == expected {
                    return Err(format!(
                        "{r:?} planned in {:?} but listed resident={resident} evicted={evicted}",
                        chunk.planned_location()
                    ));
                }
            }
            let entry = per_tenant.entry(buffer.tenant).or_default();
            entry.0 += buffer.planned_bytes_at(Location::Vram);
            entry.1 += buffer.planned_bytes_at(Location::Host);
        }
        let (mut vram, mut host) = (0, 0);
        for (tenant, state) in &self.tenants {
            let (v, h) = per_tenant.get(tenant).copied().unwrap_or_default();
            let usage = state.usage;
            if (v, h) != (usage.vram_bytes, usage.host_bytes) {
                return Err(format!(
                    "{tenant}: accounted {}/{} bytes VRAM/host, chunks say {v}/{h}",
                    usage.vram_bytes, usage.host_bytes
                ));
            }
            vram += v;
            host += h;
        }
        if (vram, host) != (self.vram_used_bytes, self.host_used_bytes) {
            return Err(format!(
                "tenants hold {vram}/{host} bytes VRAM/host, global figures say {}/{}",
                self.vram_used_bytes, self.host_used_bytes
            ));
        }
        if self.vram_used_bytes > self.config.vram_bytes {
            return Err(format!(
                "{} bytes of VRAM in use, capacity {}",
                self.vram_used_bytes, self.config.vram_bytes
            ));
        }
        Ok(())
    }

    // ---- events ----

    /// A tenant asks for memory. The answer is queued for [`Manager::poll_action`]; while
    /// a relocation runs, the request waits for it.
    pub fn handle_alloc(&mut self, req: AllocRequest) {
        if self.job.is_some() {
            self.waiting.push_back(req);
        } else {
            self.serve(req);
        }
    }

    /// A tenant frees a buffer; its memory is available again at once. Evicted data
    /// comes back at the next return check, not now.
    pub fn handle_free(&mut self, tenant: TenantId, buffer: BufferId) -> Result<(), FreeError> {
        let owner = self
            .buffers
            .get(&buffer)
            .ok_or(FreeError::Unknown(buffer))?
            .tenant;
        if owner != tenant {
            return Err(FreeError::NotOwner {
                buffer,
                owner,
                caller: tenant,
            });
        }
        let removed = self.buffers.remove(&buffer).expect("checked above");
        for (index, chunk) in removed.chunks.iter().enumerate() {
            let r = ChunkRef {
                buffer,
                index: index as u32,
            };
            self.unlist(tenant, chunk.planned_location(), r, chunk.bytes);
        }
        Ok(())
    }

    /// A tenant ended (or was killed): everything it held is freed, its waiting requests
    /// are dropped.
    pub fn handle_tenant_exit(&mut self, tenant: TenantId) {
        let owned: Vec<BufferId> = self.buffers_of(tenant).map(|b| b.id).collect();
        for id in owned {
            self.handle_free(tenant, id)
                .expect("the tenant owns every buffer listed");
        }
        self.waiting.retain(|r| r.tenant != tenant);
        self.waiting_launches.retain(|t| *t != tenant);
    }

    /// Gdev mode: `tenant` wants to launch a kernel. Answered with `LaunchReady` once its
    /// buffers are in VRAM, or `LaunchFail`.
    pub fn handle_launch(&mut self, tenant: TenantId) {
        if self.job.is_some() {
            self.waiting_launches.push_back(tenant);
        } else {
            self.make_resident(tenant);
        }
    }

    /// The tenant asked to suspend has drained its queued work.
    pub fn handle_suspended(&mut self, tenant: TenantId) {
        let Some(job) = &mut self.job else { return };
        match &job.current {
            Some((batch, Step::Suspending)) if batch.tenant == tenant => self.next_copy(),
            _ => debug_assert!(false, "{tenant} was not being suspended"),
        }
    }

    /// A copy the manager asked for has finished.
    pub fn handle_copy_done(&mut self, copy: CopyId) {
        let Some(job) = &mut self.job else { return };
        let Some((batch, Step::Copying { copy: current, mv })) = &job.current else {
            debug_assert!(false, "no copy in progress");
            return;
        };
        debug_assert_eq!(*current, copy, "copies finish in order");
        let (tenant, mv) = (batch.tenant, *mv);
        if let Some(chunk) = self.chunk_mut(mv.chunk) {
            chunk.location = mv.to;
            chunk.moving_to = None;
            let bytes = chunk.bytes;
            let usage = &mut self.tenants.get_mut(&tenant).expect("known").usage;
            match mv.to {
                Location::Host => usage.bytes_evicted += bytes,
                Location::Vram => usage.bytes_returned += bytes,
            }
            self.actions.push_back(Action::Remap {
                tenant,
                chunk: mv.chunk,
                to: mv.to,
            });
        }
        self.next_copy();
    }

    /// Time passed to `now_ns`: the periodic return check and access-rate measurement.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        let period_s = now_ns.saturating_sub(self.last_check_ns).max(1) as f64 / 1e9;
        self.last_check_ns = now_ns;
        for state in self.tenants.values_mut() {
            state.access_rate = state.accesses_in_period as f64 / period_s;
            state.accesses_in_period = 0;
        }
        if self.config.mode == Mode::Gpuswap && self.job.is_none() {
            self.plan_return();
        }
    }

    /// A kernel of `tenant` finished; feeds the performance and access-rate estimates,
    /// and reverse swapping.
    pub fn handle_kernel_finished(&mut self, tenant: TenantId, stats: &KernelStats) {
        let Some(state) = self.tenants.get_mut(&tenant) else {
            return;
        };
        state.kernel_ns += stats.ns;
        state.ideal_ns += stats.ideal_ns;
        state.accesses_in_period += stats.accesses;
        if self.config.mode == Mode::Gpuswap
            && self.config.chunk_policy == ChunkPolicy::ReverseSwap
            && self.job.is_none()
        {
            self.plan_swap(tenant, &stats.referenced);
        }
    }

    // ---- actions ----

    /// The next action the driver must carry out, in decision order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When the manager next wants [`Manager::handle_timeout`], if at all.
    pub fn poll_timeout(&self) -> Option<u64> {
        let wants = self.config.mode == Mode::Gpuswap
            && (self.config.victim == VictimPolicy::AccessRate
                || self.tenants.values().any(|t| !t.evicted.is_empty()));
        wants.then_some(self.last_check_ns + self.config.return_interval_ns)
    }

    // ---- allocation ----

    fn serve(&mut self, req: AllocRequest) {
        match self.place(&req) {
            Ok(Some(buffer)) => self.actions.push_back(Action::Grant {
                request: req.request,
                tenant: req.tenant,
                buffer,
            }),
            // A relocation runs; the grant comes when it ends.
            Ok(None) => {}
            Err(error) => self.actions.push_back(Action::Fail {
                request: req.request,
                tenant: req.tenant,
                error,
            }),
        }
    }

    /// Creates the buffer and places its chunks; `None` when a relocation must run first.
    fn place(&mut self, req: &AllocRequest) -> Result<Option<BufferId>, AllocError> {
        if req.bytes == 0 {
            return Err(AllocError::ZeroBytes);
        }
        let free = self.vram_free_bytes();
        let host_free = self.config.host_bytes - self.host_used_bytes;
        // How much of the request may go to VRAM; the rest goes to host memory.
        let vram_share = match self.config.mode {
            Mode::Native if req.bytes > free => {
                return Err(AllocError::OutOfMemory {
                    requested_bytes: req.bytes,
                    free_bytes: free,
                });
            }
            Mode::Native | Mode::Gpuswap => req.bytes,
            Mode::Fcfs => free,
            // Whole buffers: all in VRAM or all in host memory.
            Mode::Gdev if req.bytes <= free => req.bytes,
            Mode::Gdev => 0,
            Mode::Static { tenants } => {
                let share = self.config.vram_bytes / u64::from(tenants.max(1));
                share
                    .saturating_sub(self.usage(req.tenant).vram_bytes)
                    .min(free)
            }
        };
        // Whole chunks only: a chunk is in one place.
        let host_bytes_needed = match self.config.mode {
            Mode::Gpuswap => req.bytes.saturating_sub(free),
            _ => chunk_layout(req.bytes, self.config.chunk_bytes)
                .filter(|(offset, len)| offset + len > vram_share)
                .map(|(_, len)| len)
                .sum(),
        };
        if host_bytes_needed > host_free {
            return Err(AllocError::OutOfHostMemory {
                requested_bytes: req.bytes,
                free_bytes: host_free,
            });
        }
        let id = BufferId(self.next_buffer);
        self.next_buffer += 1;
        let buffer_priority = req.priority.unwrap_or(match req.kind {
            BufferKind::System(SystemBuffer::Stack) => PRIORITY_STACK,
            BufferKind::System(_) => PRIORITY_SYSTEM,
            BufferKind::Device => PRIORITY_DEFAULT,
        });
        let chunk_priority = |index: usize| match self.config.chunk_policy {
            ChunkPolicy::PriorityChunk => req
                .chunk_priorities
                .get(index)
                .copied()
                .unwrap_or(buffer_priority),
            _ => buffer_priority,
        };
        let allocation = {
            let state = self.tenants.entry(req.tenant).or_default();
            state.allocations += 1;
            state.allocations
        };
        let seed = self.config.seed;
        let chunks: Vec<Chunk> = chunk_layout(req.bytes, self.config.chunk_bytes)
            .enumerate()
            .map(|(index, (offset_bytes, bytes))| Chunk {
                offset_bytes,
                bytes,
                location: if offset_bytes + bytes <= vram_share {
                    Location::Vram
                } else {
                    Location::Host
                },
                moving_to: None,
                priority: chunk_priority(index),
                rank: rank(seed, req.tenant.0, allocation, index as u32),
            })
            .collect();
        self.buffers.insert(
            id,
            Buffer {
                id,
                tenant: req.tenant,
                kind: req.kind,
                bytes: req.bytes,
                chunks: Vec::new(),
            },
        );
        for (index, chunk) in chunks.into_iter().enumerate() {
            self.add_chunk(id, index as u32, chunk);
        }
        if self.vram_used_bytes <= self.config.vram_bytes {
            self.note_peak(req.tenant);
            return Ok(Some(id));
        }
        // The grant comes from the relocation job when it ends (at once if only chunks of
        // the new buffer were chosen).
        self.evict_for(req, id);
        self.note_peak(req.tenant);
        Ok(None)
    }

    fn add_chunk(&mut self, buffer: BufferId, index: u32, chunk: Chunk) {
        let tenant = self.buffers[&buffer].tenant;
        let r = ChunkRef { buffer, index };
        self.list(
            tenant,
            chunk.location,
            r,
            (chunk.priority, chunk.rank),
            chunk.bytes,
        );
        self.buffers
            .get_mut(&buffer)
            .expect("inserted")
            .chunks
            .push(chunk);
    }

    /// Lists a chunk at `location` and counts its bytes there, for its tenant and in the
    /// global figures.
    fn list(
        &mut self,
        tenant: TenantId,
        location: Location,
        r: ChunkRef,
        key: (i32, u64),
        bytes: u64,
    ) {
        let (lists, tenant_bytes, global_bytes) = self.books(tenant, location);
        lists.insert(key.0, key.1, r);
        *tenant_bytes += bytes;
        *global_bytes += bytes;
    }

    /// Undoes [`Manager::list`].
    fn unlist(&mut self, tenant: TenantId, location: Location, r: ChunkRef, bytes: u64) {
        let (lists, tenant_bytes, global_bytes) = self.books(tenant, location);
        lists.remove(r);
        *tenant_bytes -= bytes;
        *global_bytes -= bytes;
    }

    /// Where a tenant's chunks at `location` are listed and counted.
    fn books(
        &mut self,
        tenant: TenantId,
        location: Location,
    ) -> (&mut ChunkLists, &mut u64, &mut u64) {
        let state = self.tenants.entry(tenant).or_default();
        match location {
            Location::Vram => (
                &mut state.resident,
                &mut state.usage.vram_bytes,
                &mut self.vram_used_bytes,
            ),
            Location::Host => (
                &mut state.evicted,
                &mut state.usage.host_bytes,
                &mut self.host_used_bytes,
            ),
        }
    }

    /// The policy loop: choose victims and chunks until the request fits; chunks of the
    /// new buffer go to host memory directly, the others are relocated before the grant.
    fn evict_for(&mut self, req: &AllocRequest, new_buffer: BufferId) {
        let mut moves: Vec<(TenantId, Move)> = Vec::new();
        let mut chosen = 0;
        while self.vram_used_bytes > self.config.vram_bytes {
            let views = self.views(|s| !s.resident.is_empty());
            let victim = policy::select_victim(
                self.config.victim,
                &views,
                req.tenant,
                self.config.vram_bytes,
            )
            .expect("the new buffer's own chunks can always go");
            let resident = &self.tenants[&victim].resident;
            let chunk = policy::select_chunk_to_evict(self.config.chunk_policy, resident)
                .expect("the victim has resident chunks");
            chosen += 1;
            if chunk.buffer == new_buffer {
                // Nothing to copy: the chunk starts its life in host memory.
                self.plan_move(chunk, Location::Host);
                let c = self.chunk_mut(chunk).expect("new chunk");
                c.location = Location::Host;
                c.moving_to = None;
            } else {
                self.plan_move(chunk, Location::Host);
                moves.push((
                    victim,
                    Move {
                        chunk,
                        to: Location::Host,
                    },
                ));
            }
        }
        self.actions.push_back(Action::PolicyRan {
            tenant: req.tenant,
            chunks: chosen,
        });
        self.start_job(
            Purpose::Evict,
            Then::Grant(req.request, req.tenant, new_buffer),
            moves,
        );
    }

    /// The return path: winners (least VRAM first) get their highest-priority evicted
    /// chunks back while they fit in free VRAM.
    fn plan_return(&mut self) {
        let mut moves = Vec::new();
        loop {
            let views = self.views(|s| !s.evicted.is_empty());
            let Some(winner) = policy::select_winner(&views) else {
                break;
            };
            let evicted = &self.tenants[&winner].evicted;
            let chunk = policy::select_chunk_to_return(evicted).expect("has evicted");
            let bytes = self.buffers[&chunk.buffer].chunks[chunk.index as usize].bytes;
            if bytes > self.vram_free_bytes() {
                break;
            }
            self.plan_move(chunk, Location::Vram);
            self.note_peak(winner);
            moves.push((
                winner,
                Move {
                    chunk,
                    to: Location::Vram,
                },
            ));
        }
        self.start_job(Purpose::Return, Then::Nothing, moves);
    }

    /// Reverse swapping: each referenced evicted chunk comes back in exchange for a
    /// random resident chunk at least as large.
    fn plan_swap(&mut self, tenant: TenantId, referenced: &[ChunkRef]) {
        let mut moves = Vec::new();
        for &hot in referenced {
            let Some(chunk) = self.chunk(hot) else {
                continue;
            };
            if chunk.planned_location() != Location::Host || chunk.moving_to.is_some() {
                continue;
            }
            let bytes = chunk.bytes;
            // The random resident chunk is the first in rank order that can take the hot
            // chunk's place: a shorter remainder chunk or another hot chunk is passed
            // over, not a reason to give up the swap.
            let Some(cold) = self.tenants[&tenant].resident.by_rank().find(|c| {
                !referenced.contains(c) && self.chunk(*c).is_some_and(|c| c.bytes >= bytes)
            }) else {
                continue;
            };
            self.plan_move(cold, Location::Host);
            self.plan_move(hot, Location::Vram);
            self.note_peak(tenant);
            moves.push((
                tenant,
                Move {
                    chunk: cold,
                    to: Location::Host,
                },
            ));
            moves.push((
                tenant,
                Move {
                    chunk: hot,
                    to: Location::Vram,
                },
            ));
        }
        self.start_job(Purpose::Swap, Then::Nothing, moves);
    }

    /// Accounts a chunk at `to` at once and moves it between its tenant's lists.
    fn plan_move(&mut self, r: ChunkRef, to: Location) {
        let buffer = self.buffers.get_mut(&r.buffer).expect("live buffer");
        let tenant = buffer.tenant;
        let chunk = &mut buffer.chunks[r.index as usize];
        debug_assert_ne!(chunk.planned_location(), to, "{r:?} already planned there");
        chunk.moving_to = Some(to);
        let (bytes, key, from) = (chunk.bytes, (chunk.priority, chunk.rank), to.other());
        self.unlist(tenant, from, r, bytes);
        self.list(tenant, to, r, key, bytes);
    }

    /// Raises the tenant's peak to its VRAM figure; called once a decision is complete,
    /// so the transient over-commitment inside the policy loop never counts.
    fn note_peak(&mut self, tenant: TenantId) {
        if let Some(state) = self.tenants.get_mut(&tenant) {
            state.usage.vram_peak_bytes = state.usage.vram_peak_bytes.max(state.usage.vram_bytes);
        }
    }

    fn views(&self, can_give: impl Fn(&TenantState) -> bool) -> Vec<TenantView> {
        self.tenants
            .iter()
            .map(|(id, s)| TenantView {
                id: *id,
                vram_bytes: s.usage.vram_bytes,
                can_give: can_give(s),
                slowdown: if s.ideal_ns == 0 {
                    1.0
                } else {
                    s.kernel_ns as f64 / s.ideal_ns as f64
                },
                access_rate: s.access_rate,
            })
            .collect()
    }

    fn chunk(&self, r: ChunkRef) -> Option<&Chunk> {
        self.buffers.get(&r.buffer)?.chunks.get(r.index as usize)
    }

    fn chunk_mut(&mut self, r: ChunkRef) -> Option<&mut Chunk> {
        self.buffers
            .get_mut(&r.buffer)?
            .chunks
            .get_mut(r.index as usize)
    }

    // ---- relocation ----

    /// Starts a relocation of `moves`, one tenant at a time in order of first appearance;
    /// with nothing to move, finishes at once.
    fn start_job(&mut self, purpose: Purpose, then: Then, moves: Vec<(TenantId, Move)>) {
        let mut batches: Vec<Batch> = Vec::new();
        for (tenant, mv) in moves {
            match batches.iter_mut().find(|b| b.tenant == tenant) {
                Some(batch) => batch.moves.push_back(mv),
                None => batches.push(Batch {
                    tenant,
                    moves: VecDeque::from([mv]),
                }),
            }
        }
        self.job = Some(Job {
            purpose,
            then,
            batches: batches.into(),
            current: None,
        });
        self.next_batch();
    }

    fn next_batch(&mut self) {
        let job = self.job.as_mut().expect("job running");
        match job.batches.pop_front() {
            // Gdev's scheduler runs one kernel at a time and is holding the launch:
            // nobody runs, nobody needs suspending.
            Some(batch) if job.purpose == Purpose::Launch => {
                job.current = Some((batch, Step::Suspending));
                self.next_copy();
            }
            Some(batch) => {
                self.actions.push_back(Action::Suspend {
                    tenant: batch.tenant,
                    purpose: job.purpose,
                });
                job.current = Some((batch, Step::Suspending));
            }
            None => self.finish_job(),
        }
    }

    /// Asks for the current batch's next copy, skipping chunks freed meanwhile; resumes
    /// the tenant after its last one.
    fn next_copy(&mut self) {
        loop {
            let job = self.job.as_mut().expect("job running");
            let (batch, step) = job.current.as_mut().expect("batch running");
            let Some(mv) = batch.moves.pop_front() else {
                let tenant = batch.tenant;
                job.current = None;
                if job.purpose != Purpose::Launch {
                    self.actions.push_back(Action::Resume { tenant });
                }
                return self.next_batch();
            };
            let tenant = batch.tenant;
            let Some(bytes) = self
                .buffers
                .get(&mv.chunk.buffer)
                .map(|b| b.chunks[mv.chunk.index as usize].bytes)
            else {
                continue;
            };
            let copy = CopyId(self.next_copy);
            self.next_copy += 1;
            *step = Step::Copying { copy, mv };
            self.actions.push_back(Action::Copy {
                copy,
                tenant,
                chunk: mv.chunk,
                bytes,
                to: mv.to,
            });
            return;
        }
    }

    fn finish_job(&mut self) {
        let job = self.job.take().expect("job running");
        match job.then {
            Then::Nothing => {}
            // The requester may have been killed while it waited.
            Then::Grant(request, tenant, buffer) if self.buffers.contains_key(&buffer) => {
                self.actions.push_back(Action::Grant {
                    request,
                    tenant,
                    buffer,
                });
            }
            Then::Grant(..) => {}
            Then::LaunchReady(tenant) => self.actions.push_back(Action::LaunchReady { tenant }),
        }
        while self.job.is_none() {
            if let Some(tenant) = self.waiting_launches.pop_front() {
                self.make_resident(tenant);
            } else if let Some(req) = self.waiting.pop_front() {
                self.serve(req);
            } else {
                break;
            }
        }
    }

    /// Gdev: brings all of `tenant`'s buffers into VRAM, evicting other tenants' buffers
    /// whole, least recently launched tenant first.
    fn make_resident(&mut self, tenant: TenantId) {
        self.launches += 1;
        self.last_launch.insert(tenant, self.launches);
        let total: u64 = self.buffers_of(tenant).map(|b| b.bytes).sum();
        if total > self.config.vram_bytes {
            self.actions.push_back(Action::LaunchFail {
                tenant,
                error: AllocError::OutOfMemory {
                    requested_bytes: total,
                    free_bytes: self.config.vram_bytes,
                },
            });
            return;
        }
        let needed = self.usage(tenant).host_bytes;
        let mut victims: Vec<(u64, BufferId)> = self
            .buffers
            .values()
            .filter(|b| b.tenant != tenant && b.planned_bytes_at(Location::Vram) > 0)
            .map(|b| (self.last_launch.get(&b.tenant).copied().unwrap_or(0), b.id))
            .collect();
        victims.sort_unstable();
        let mut moves = Vec::new();
        let mut victims = victims.into_iter();
        while self.vram_free_bytes() < needed {
            let (_, id) = victims.next().expect("others hold what this tenant lacks");
            let owner = self.buffers[&id].tenant;
            for chunk in self.chunk_refs(id, Location::Vram) {
                self.plan_move(chunk, Location::Host);
                moves.push((
                    owner,
                    Move {
                        chunk,
                        to: Location::Host,
                    },
                ));
            }
        }
        let own: Vec<BufferId> = self.buffers_of(tenant).map(|b| b.id).collect();
        for id in own {
            for chunk in self.chunk_refs(id, Location::Host) {
                self.plan_move(chunk, Location::Vram);
                moves.push((
                    tenant,
                    Move {
                        chunk,
                        to: Location::Vram,
                    },
                ));
            }
        }
        self.note_peak(tenant);
        self.start_job(Purpose::Launch, Then::LaunchReady(tenant), moves);
    }

    /// The chunks of a buffer accounted at `location`.
    fn chunk_refs(&self, buffer: BufferId, location: Location) -> Vec<ChunkRef> {
        self.buffers[&buffer]
            .chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.planned_location() == location)
            .map(|(index, _)| ChunkRef {
                buffer,
                index: index as u32,
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
