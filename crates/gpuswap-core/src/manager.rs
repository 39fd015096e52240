//! The memory manager: the books, the relocation state machine, a memory policy and a
//! launch scheduler behind one sans-IO interface.
//!
//! Events come in through `handle_*`; the answers the driver must carry out come out of
//! [`Manager::poll_action`] in the order they were decided (see [`crate::protocol`] for
//! what must follow each action). The shape follows `quinn-proto`: getters, `handle_*`
//! for events, `poll_*` for actions and timers.

use std::collections::VecDeque;

use crate::accounting::Books;
use crate::buffer::{Buffer, BufferKind};
use crate::contract::{AtLimit, Contract};
use crate::gpu_time::launch_gate::Scheduler;
use crate::gpu_time::scheduling::{Decisions, Scheduling, SchedulingConfig, TenantSched};
use crate::gpu_time::turns::Turns;
use crate::gpu_time::{Choice, GpuTime, Idle, Progress, Switch};
use crate::held::Held;
use crate::ids::{BufferId, CopyId, LaunchId, RequestId, TenantId};
use crate::params::Needs;
use crate::policy::{Ctx, LaunchPrep, MemoryPolicy, Placed};
use crate::protocol::{
    Action, AdmitError, AllocError, AllocRequest, Dma, Execution, Fault, FreeError, KernelStats,
    KillReason, Mapping, PageAction, ProtocolError, Reply, TenantUsage,
};
use crate::registry::{Budget, PolicySettings};
pub use crate::relocation::MAX_COPY_ATTEMPTS;
use crate::relocation::{CopyFailure, Relocation, Then};
use crate::uvm::Paging;
use crate::uvm::pages::{PAGE_BYTES, Pages};

/// Fixed settings of a manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagerConfig {
    /// VRAM the manager may hand to tenants (driver-reserved memory is not part of it).
    pub vram_bytes: u64,
    /// Host memory that can back evicted or host-placed chunks.
    pub host_bytes: u64,
    /// Size of a chunk, the unit of accounting and relocation.
    pub chunk_bytes: u64,
    /// The memory policy and its parameters.
    pub policy: PolicySettings,
    /// Period of the return check and of access-rate measurements.
    pub return_interval_ns: u64,
    /// Seed of the policies' random choices.
    pub seed: u64,
    /// The kernel scheduling policy (`[scheduler]`).
    pub scheduling: SchedulingConfig,
    /// How tenants share the GPU's time (`[manager] gpu_time`).
    pub gpu_time: GpuTime,
    /// What becomes of an idle tenant's memory (`[manager] idle`); with concurrent GPU
    /// time and `Keep`, the driver reports no demand at all.
    pub idle: Idle,
}

/// The memory manager.
#[derive(Debug)]
pub struct Manager {
    config: ManagerConfig,
    books: Books,
    relocation: Relocation,
    policy: Box<dyn MemoryPolicy>,
    scheduler: Box<dyn Scheduler>,
    needs: Needs,
    actions: VecDeque<Action>,
    /// Allocation requests that arrived while a relocation ran.
    waiting: VecDeque<AllocRequest>,
    /// Allocation requests waiting at their tenant's `memory_limit` (`at_limit =
    /// "wait"`) for its own frees.
    at_limit: VecDeque<AllocRequest>,
    /// Admitted launches that arrived while a relocation ran.
    waiting_launches: VecDeque<(TenantId, LaunchId)>,
    /// Memory-aware kernel scheduling, when a policy other than `none` is chosen.
    scheduling: Option<Scheduling>,
    /// Turns, when `gpu_time` takes them.
    turns: Option<Turns>,
    /// Whether an allocation that needs no relocation is served while one runs
    /// ([`Manager::set_serve_during_relocation`]); off unless a driver turns it on.
    serve_during_relocation: bool,
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
        let policy = config.policy.build(Budget {
            vram_bytes: config.vram_bytes,
            return_interval_ns: config.return_interval_ns,
            seed: config.seed,
        });
        let scheduler = crate::registry::build_scheduler(&config.policy);
        let turns = Turns::new(config.gpu_time, config.idle);
        let needs = config.policy.needs().union(Needs {
            gpu_demand: turns.is_some(),
            timers: turns.is_some(),
            progress: turns.as_ref().is_some_and(Turns::wants_progress),
            ..Needs::NONE
        });
        let scheduling = config
            .scheduling
            .runs()
            .then(|| Scheduling::new(&config.scheduling, config.vram_bytes));
        let mut relocation = Relocation::default();
        relocation.bulk = turns.is_some();
        Self {
            books: Books::new(
                config.vram_bytes,
                config.host_bytes,
                config.chunk_bytes,
                config.seed,
            ),
            config,
            relocation,
            policy,
            scheduler,
            needs,
            actions: VecDeque::new(),
            waiting: VecDeque::new(),
            at_limit: VecDeque::new(),
            waiting_launches: VecDeque::new(),
            scheduling,
            turns,
            serve_during_relocation: false,
        }
    }

    /// Serves an allocation that fits in free VRAM at once while a relocation runs,
    /// instead of queueing it behind the relocation: its tenant must be none whose
    /// chunks the relocation moves, nor have a request of its own waiting, and tenants
    /// must share the GPU concurrently (turns' jobs evict to park, so free VRAM in the
    /// books is not yet free on the device). The daemon turns it on: on a real GPU a
    /// victim may take up to its answer deadline to drain, and the allocations that need
    /// none of its memory should not wait for it. The simulator leaves it off, and its
    /// results stay those of a manager that queues every request.
    pub fn set_serve_during_relocation(&mut self, on: bool) {
        self.serve_during_relocation = on;
    }

    // ---- getters ----

    /// The configuration the manager was built with.
    pub fn config(&self) -> &ManagerConfig {
        &self.config
    }

    /// Under turns: the tenant holding the GPU, if one does.
    pub fn holder(&self) -> Option<TenantId> {
        self.turns.as_ref().and_then(Turns::holder)
    }

    /// Under turns: times the GPU passed from one tenant to another.
    pub fn handovers(&self) -> u64 {
        self.turns.as_ref().map_or(0, Turns::handovers)
    }

    /// Under turns: whether the driver last said `tenant` has GPU work.
    pub fn busy(&self, tenant: TenantId) -> bool {
        self.turns.as_ref().is_some_and(|t| t.is_busy(tenant))
    }

    /// How turns are taken now: `None` without a turns machine (concurrent GPU time,
    /// idle tenants keep their memory), else the fixed way or the automatic choice's.
    pub fn gpu_time_choice(&self) -> Option<Choice> {
        self.turns.as_ref().map(Turns::choice)
    }

    /// Times the automatic choice changed.
    pub fn gpu_time_switches(&self) -> u64 {
        self.turns.as_ref().map_or(0, Turns::switches)
    }

    /// The next change of the automatic choice, with its reason, for the driver's log.
    pub fn poll_switch(&mut self) -> Option<Switch> {
        self.turns.as_mut().and_then(Turns::pop_switch)
    }

    /// `tenant`'s slowdown estimate from its progress reports (how many times slower
    /// than its best it runs now), once measured.
    pub fn slowdown_estimate(&self, tenant: TenantId) -> Option<f64> {
        self.turns.as_ref().and_then(|t| t.estimate(tenant))
    }

    /// Whether `tenant` gave its memory back idle and waits for its next work.
    pub fn demoted(&self, tenant: TenantId) -> bool {
        self.turns.as_ref().is_some_and(|t| t.is_demoted(tenant))
    }

    /// Whether `tenant` is parked: held suspended between relocation jobs (under turns,
    /// while another tenant holds the GPU).
    pub fn parked(&self, tenant: TenantId) -> bool {
        self.relocation.is_parked(tenant)
    }

    /// What the configured policy needs from the device and the driver.
    pub fn needs(&self) -> Needs {
        self.needs
    }

    /// VRAM accounted to tenants' buffers (ahead of reality while a relocation runs).
    pub fn vram_used_bytes(&self) -> u64 {
        self.books.vram_used_bytes
    }

    /// Host memory accounted to tenants' buffers (evicted or host-placed chunks).
    pub fn host_used_bytes(&self) -> u64 {
        self.books.host_used_bytes
    }

    /// VRAM not accounted to anybody.
    pub fn vram_free_bytes(&self) -> u64 {
        self.books.vram_free_bytes()
    }

    /// A live buffer.
    pub fn buffer(&self, id: BufferId) -> Option<&Buffer> {
        self.books.buffer(id)
    }

    /// The live buffers of a tenant, in allocation order.
    pub fn buffers_of(&self, tenant: TenantId) -> impl Iterator<Item = &Buffer> {
        self.books.buffers_of(tenant)
    }

    /// Memory figures of a tenant (zero for a tenant the manager has not seen).
    pub fn usage(&self, tenant: TenantId) -> TenantUsage {
        let usage = self.books.usage(tenant);
        // What the policy holds outside the books (unified memory's pages: the books keep
        // managed buffers in host memory) adds to VRAM held.
        let (now, peak) = self.policy.vram_outside_books(tenant);
        TenantUsage {
            vram_bytes: usage.vram_bytes + now,
            vram_peak_bytes: usage.vram_peak_bytes + peak,
            ..usage
        }
    }

    /// A tenant's contract (the default for one not seen or ended).
    pub fn contract(&self, tenant: TenantId) -> Contract {
        self.books.contract(tenant)
    }

    /// Whether a relocation is in progress (allocation requests wait for it).
    pub fn relocating(&self) -> bool {
        self.relocation.running()
    }

    /// Checks the accounting invariants (see [`crate`] docs): chunks tile their buffers,
    /// every chunk is listed at its planned location, per-chunk figures sum to per-tenant
    /// and global figures, and VRAM is never over-committed; then the policy's own
    /// (the paging machine's residency accounting).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.books.check_invariants()?;
        self.policy.check_invariants()
    }

    /// The policy's paging machine (unified memory), for reports and the device's
    /// auditor.
    pub fn paging(&self) -> Option<&Paging> {
        self.policy.paging()
    }

    // ---- events ----

    /// The device's batch of page faults at `now_ns` (each page once, in the order they
    /// faulted). The decisions follow from [`Manager::poll_page_action`], ending with
    /// `Replay`.
    pub fn handle_fault_batch(
        &mut self,
        faults: &[Fault],
        now_ns: u64,
    ) -> Result<(), ProtocolError> {
        self.paging_event(|p| p.on_fault_batch(faults, now_ns))
    }

    /// Access-counter notes: resident pages kernels touched, in touch order, since the
    /// last notes (the device sends them before the batch that follows them).
    pub fn handle_access_notes(&mut self, notes: &[(u32, Pages)]) -> Result<(), ProtocolError> {
        self.paging_event(|p| p.on_access_notes(notes))
    }

    /// The device finished every migration and eviction asked so far.
    pub fn handle_migrations_done(&mut self) -> Result<(), ProtocolError> {
        self.paging_event(|p| p.on_migrations_done())
    }

    fn paging_event(
        &mut self,
        event: impl FnOnce(&mut dyn MemoryPolicy) -> bool,
    ) -> Result<(), ProtocolError> {
        if event(self.policy.as_mut()) {
            Ok(())
        } else {
            Err(ProtocolError::NotPaging {
                mode: self.config.policy.name(),
            })
        }
    }

    /// A tenant asks for memory. The answer is queued for [`Manager::poll_action`]; while
    /// a relocation runs, the request waits for it.
    pub fn handle_alloc(&mut self, req: AllocRequest) {
        // Turns first: an allocation that makes the demanding tenants' memory overflow
        // is placed once the GPU has a holder, so that it takes no running tenant's
        // VRAM on its way.
        self.take_turns(Some((req.tenant, req.bytes)));
        if self.relocation.running() && !self.fits_beside_relocation(&req) {
            self.waiting.push_back(req);
        } else {
            self.serve(req);
        }
    }

    /// A tenant frees a buffer; its memory is available again at once (an `Unmap`
    /// follows). Evicted data comes back at the next return check, not now. Its
    /// requests waiting at its `memory_limit` are asked again, in order.
    pub fn handle_free(&mut self, tenant: TenantId, buffer: BufferId) -> Result<(), FreeError> {
        self.release(tenant, buffer, true)?;
        if self.at_limit.iter().any(|r| r.tenant == tenant) {
            let (again, others) = std::mem::take(&mut self.at_limit)
                .into_iter()
                .partition(|r| r.tenant == tenant);
            self.at_limit = others;
            for req in Vec::from(again) {
                self.handle_alloc(req);
            }
        }
        Ok(())
    }

    /// A tenant ended, crashed or was killed: everything it held is released at once,
    /// whatever it was doing. Its buffers are freed (an `Unmap` each; frames of chunks
    /// in flight are freed with them); its waiting requests and launches are dropped;
    /// the scheduler forgets its launches (an admission it held passes on); a relocation
    /// batch of it is dropped, its outstanding copy cancelled (`Dma::Cancel`), and the
    /// job goes on with the other tenants, answering nothing to the exited one. Calling
    /// it again for the same tenant changes nothing.
    pub fn handle_tenant_exit(&mut self, tenant: TenantId) {
        // A buffer placed for a request that waits for the relocation was never mapped.
        let unmapped = self.relocation.pending_grant(tenant);
        let owned: Vec<BufferId> = self.books.buffers_of(tenant).map(|b| b.id).collect();
        for id in owned {
            self.release(tenant, id, Some(id) != unmapped)
                .expect("the tenant owns every buffer listed");
        }
        self.waiting.retain(|r| r.tenant != tenant);
        self.at_limit.retain(|r| r.tenant != tenant);
        self.books.set_unmovable(tenant, 0);
        self.set_contract(tenant, Contract::default());
        let dropped: Vec<LaunchId> = self
            .waiting_launches
            .iter()
            .filter(|(t, _)| *t == tenant)
            .map(|(_, l)| *l)
            .collect();
        self.waiting_launches.retain(|(t, _)| *t != tenant);
        for launch in dropped {
            self.release_launch(launch);
        }
        if let Some((next_tenant, next)) = self.scheduler.forget(tenant) {
            self.prepare_launch(next_tenant, next);
        }
        if let Some(turns) = &mut self.turns {
            turns.forget(tenant);
        }
        let finished = self
            .relocation
            .forget(tenant, &self.books, &mut self.actions);
        self.finish(finished);
        self.schedule(|s, out| s.exited(tenant.0 as usize, out));
        self.withdraw_unsent(tenant);
        self.take_turns(None);
    }

    /// A tenant starts under `contract`. A driver that serves tenants for a long time
    /// (the daemon) recycles a number once its previous tenant has exited: the books'
    /// record of the number starts afresh (usage, lists, counters), so the manager's state
    /// follows the tenants alive, not the tenants ever served. Refused, changing nothing,
    /// while the number still holds a buffer or a waiting request; when the contract
    /// contradicts itself or sets a term the mode does not honour; and when its
    /// `vram_guarantee` does not fit beside the other tenants' (a mode that evicts
    /// admits guarantees up to VRAM in all; one that cannot evict only into VRAM that is
    /// neither held nor promised now). A tenant that never started has the default
    /// contract.
    pub fn handle_tenant_start(
        &mut self,
        tenant: TenantId,
        contract: Contract,
    ) -> Result<(), AdmitError> {
        let waits = self.waiting.iter().any(|r| r.tenant == tenant)
            || self.at_limit.iter().any(|r| r.tenant == tenant)
            || self.waiting_launches.iter().any(|(t, _)| *t == tenant);
        if waits || self.books.buffers_of(tenant).next().is_some() {
            return Err(AdmitError::InUse { tenant });
        }
        contract.check()?;
        let entry = self.config.policy.entry();
        let honoured = self.config.policy.honours();
        let unhonoured = contract.unhonoured(honoured);
        if unhonoured != crate::contract::Terms::NONE {
            return Err(AdmitError::Unhonoured {
                mode: entry.choice.name,
                terms: unhonoured,
                honoured,
            });
        }
        let own = self.books.contract(tenant).vram_guarantee_bytes;
        let room_bytes = if entry.reclaims {
            self.books.vram_capacity_bytes - (self.books.guaranteed_bytes() - own)
        } else {
            self.books.vram_free_for(tenant)
        };
        if contract.vram_guarantee_bytes > room_bytes {
            return Err(AdmitError::GuaranteeDoesNotFit {
                guarantee_bytes: contract.vram_guarantee_bytes,
                room_bytes,
                reclaims: entry.reclaims,
            });
        }
        self.books.restart_tenant(tenant);
        self.set_contract(tenant, contract);
        Ok(())
    }

    /// Slots of the buffer table, live or vacant: the most buffers ever live at once,
    /// never the number of allocations served (ids are recycled, see [`BufferId`]).
    pub fn buffer_slots(&self) -> usize {
        self.books.buffer_slots()
    }

    /// Whether a launch of `tenant` would be admitted now rather than queued behind
    /// another's (the scheduler's rule; always true where launches are not gated).
    pub fn would_admit_launch(&self, tenant: TenantId) -> bool {
        self.scheduler.would_admit(tenant)
    }

    /// A tenant wants to launch and the policy gates launches
    /// ([`Needs::launch_gating`]): answered with `LaunchReady` once its data is where the
    /// policy wants it, or `LaunchFail`.
    pub fn handle_launch(
        &mut self,
        tenant: TenantId,
        launch: LaunchId,
    ) -> Result<(), ProtocolError> {
        if !self.scheduler.gates() {
            return Err(ProtocolError::LaunchNotGated { launch, tenant });
        }
        if self.scheduler.admit(tenant, launch) {
            self.prepare_launch(tenant, launch);
        }
        Ok(())
    }

    /// The tenant asked to suspend has drained its queued work.
    pub fn handle_suspended(&mut self, tenant: TenantId) -> Result<(), ProtocolError> {
        let finished = self
            .relocation
            .suspended(tenant, &self.books, &mut self.actions)?;
        self.finish(finished);
        Ok(())
    }

    /// A copy the manager asked for has finished.
    pub fn handle_copy_done(&mut self, copy: CopyId) -> Result<(), ProtocolError> {
        let finished = self
            .relocation
            .copy_done(copy, &mut self.books, &mut self.actions)?;
        self.finish(finished);
        Ok(())
    }

    /// The outstanding copy failed. It is asked again (a new `Copy`) up to
    /// [`MAX_COPY_ATTEMPTS`] attempts in all; then the chunk's tenant is ended: an
    /// `Execution::Kill` with the reason, then everything [`Manager::handle_tenant_exit`]
    /// does.
    pub fn handle_copy_failed(&mut self, copy: CopyId) -> Result<(), ProtocolError> {
        let outcome = self
            .relocation
            .copy_failed(copy, &self.books, &mut self.actions)?;
        self.copy_outcome(outcome);
        Ok(())
    }

    /// What a failed copy or bulk move leads to: the job goes on, or the tenant ends.
    fn copy_outcome(&mut self, outcome: CopyFailure) {
        match outcome {
            CopyFailure::Retried(finished) => self.finish(finished),
            CopyFailure::GaveUp {
                tenant,
                chunk,
                attempts,
            } => {
                self.actions.push_back(Action::Execution(Execution::Kill {
                    tenant,
                    reason: KillReason::CopyFailed { chunk, attempts },
                }));
                self.handle_tenant_exit(tenant);
            }
        }
    }

    /// The outstanding bulk move ([`Dma::Batch`]) is over at `now_ns`: the moves at
    /// the indices in `failed` did not happen (their chunks are where they were), the
    /// others did. Each moved chunk is remapped; the failed ones are asked again as a
    /// new batch, up to [`MAX_COPY_ATTEMPTS`] in all, after which the tenant is ended as
    /// for [`Manager::handle_copy_failed`].
    pub fn handle_batch_done(
        &mut self,
        copy: CopyId,
        failed: &[u32],
        now_ns: u64,
    ) -> Result<(), ProtocolError> {
        if let Some(turns) = &mut self.turns {
            turns.tick(now_ns);
        }
        let outcome =
            self.relocation
                .batch_done(copy, failed, &mut self.books, &mut self.actions)?;
        self.copy_outcome(outcome);
        Ok(())
    }

    /// `tenant` has work for the GPU at `now_ns` (a launch or a copy queued, or waiting
    /// at its suspension): under turns it demands the GPU. Ignored without turns.
    pub fn handle_gpu_busy(&mut self, tenant: TenantId, now_ns: u64) {
        self.set_busy(tenant, true, now_ns);
    }

    /// `tenant` has no work for the GPU since `now_ns`. Ignored without turns.
    pub fn handle_gpu_idle(&mut self, tenant: TenantId, now_ns: u64) {
        self.set_busy(tenant, false, now_ns);
    }

    fn set_busy(&mut self, tenant: TenantId, busy: bool, now_ns: u64) {
        let Some(turns) = &mut self.turns else { return };
        if turns.is_busy(tenant) == busy {
            turns.tick(now_ns);
            return;
        }
        turns.set_busy(tenant, busy, now_ns);
        self.take_turns(None);
    }

    /// `tenant`'s GPU work over a report window ending at `now_ns`, and the buffers its
    /// launches named (ids the manager does not know are ignored): its slowdown
    /// estimate and the touch marks hot data stays local by. Ignored unless the
    /// manager wants progress (`Needs::progress`).
    pub fn handle_progress(
        &mut self,
        tenant: TenantId,
        progress: &Progress,
        touched: &[BufferId],
        now_ns: u64,
    ) {
        let Some(turns) = &mut self.turns else { return };
        if !turns.wants_progress() {
            return;
        }
        let known: Vec<BufferId> = touched
            .iter()
            .copied()
            .filter(|b| self.books.buffer(*b).is_some_and(|b| b.tenant == tenant))
            .collect();
        turns.progress(&self.books, tenant, progress, &known, now_ns);
        self.take_turns(None);
    }

    /// The link's remote-read cost, measured at `now_ns` by a tenant's driver (a remote
    /// read takes `remote_cost` local reads' time): under `gpu_time = "auto"`, a choice
    /// that the tenants' speeds have not yet moved starts again from it (the switch, or
    /// the choice kept, comes out of [`Manager::poll_switch`] with the figure). Ignored
    /// otherwise.
    pub fn handle_remote_cost(&mut self, remote_cost: f64, now_ns: u64) {
        let Some(turns) = &mut self.turns else { return };
        if !turns.wants_progress() {
            return;
        }
        turns.measured_link(remote_cost, now_ns);
        self.take_turns(None);
    }

    /// The requests of `tenant` waiting at its `memory_limit` for its own frees
    /// (`at_limit = "wait"`), in arrival order.
    pub fn waiting_at_limit(&self, tenant: TenantId) -> impl Iterator<Item = RequestId> + '_ {
        self.at_limit
            .iter()
            .filter(move |r| r.tenant == tenant)
            .map(|r| r.request)
    }

    /// `tenant`'s `request`, waiting at its `memory_limit`, waited past its contract's
    /// `wait_timeout` (the driver keeps the time): it fails as out of memory
    /// ([`AllocError::WaitTimedOut`]). False, changing nothing, when that request does
    /// not wait at the limit (answered, or waiting for a relocation instead).
    pub fn handle_wait_expired(&mut self, tenant: TenantId, request: RequestId) -> bool {
        let Some(at) = self
            .at_limit
            .iter()
            .position(|r| r.tenant == tenant && r.request == request)
        else {
            return false;
        };
        let req = self.at_limit.remove(at).expect("found");
        self.actions.push_back(Action::Reply(Reply::Fail {
            request,
            tenant,
            error: AllocError::WaitTimedOut {
                requested_bytes: req.bytes,
            },
        }));
        true
    }

    /// Time passed to `now_ns` (the time [`Manager::poll_timeout`] named, or later).
    pub fn handle_timeout(&mut self, now_ns: u64) {
        self.schedule(|s, out| s.timeout(now_ns, out));
        self.run_policy(|policy, ctx| policy.on_timeout(ctx, now_ns));
        if let Some(turns) = &mut self.turns {
            turns.tick(now_ns);
            self.take_turns(None);
        }
    }

    /// Under turns, and while no relocation runs: starts the job that parks, hands
    /// over or ends turns as the turns machine decides now, counting an `incoming`
    /// allocation (its tenant and bytes) in the tenant's footprint.
    fn take_turns(&mut self, incoming: Option<(TenantId, u64)>) {
        let Some(turns) = &mut self.turns else { return };
        if self.relocation.running() {
            return;
        }
        let relocation = &self.relocation;
        let moves = self.policy.moves_chunks();
        let steps = turns.plan(
            &mut self.books,
            &|t| relocation.is_parked(t),
            moves,
            incoming,
        );
        if steps.is_empty() {
            return;
        }
        let finished = self
            .relocation
            .start_turn(steps, &self.books, &mut self.actions);
        self.finish(finished);
    }

    /// Whether kernels go through a scheduling policy: the driver then reports each
    /// kernel as ready ([`Manager::handle_kernel_ready`]), after each segment it runs
    /// ([`Manager::handle_kernel_segment`]) and when it stops
    /// ([`Manager::handle_kernel_preempted`]).
    pub fn schedules_kernels(&self) -> bool {
        self.scheduling.is_some()
    }

    /// `tenant`'s next kernel, accessing `buffers` (each once), asks to start at
    /// `now_ns` (`continues`: it goes on with the last one's work, as the launches of
    /// an endless kernel do): `true` starts it now; `false` holds it until an
    /// [`Execution::Start`] names the tenant. Always `true` without a scheduling policy.
    pub fn handle_kernel_ready(
        &mut self,
        tenant: TenantId,
        buffers: &[BufferId],
        continues: bool,
        now_ns: u64,
    ) -> bool {
        // Its footprint is its managed memory: the runtime's buffers hold their VRAM
        // whether it runs or not, outside what the policies share.
        let footprint_bytes = buffers
            .iter()
            .filter_map(|id| self.books.buffer(*id))
            .filter(|b| b.kind == BufferKind::Device)
            .map(|b| b.bytes)
            .sum();
        let pages_in = self.pages_in(tenant);
        self.schedule(|s, out| {
            s.ready(
                tenant.0 as usize,
                footprint_bytes,
                pages_in,
                continues,
                now_ns,
                out,
            )
        })
        .unwrap_or(true)
    }

    /// `tenant`'s running kernel ran a segment (reached an instrumented check) at
    /// `now_ns`: the policy sees its active memory and may preempt or throttle.
    pub fn handle_kernel_segment(&mut self, tenant: TenantId, now_ns: u64) {
        let pages_in = self.pages_in(tenant);
        self.schedule(|s, out| {
            s.progress(tenant.0 as usize, pages_in, PAGE_BYTES, now_ns, out);
        });
    }

    /// `tenant`'s kernel stopped at a check after an [`Execution::Preempt`]; the driver
    /// runs it again from its start when it is ready again.
    pub fn handle_kernel_preempted(&mut self, tenant: TenantId, now_ns: u64) {
        self.schedule(|s, out| s.preempted(tenant.0 as usize, now_ns, out));
    }

    /// Pages migrated in for `tenant` so far, as the policy counts them.
    fn pages_in(&self, tenant: TenantId) -> u64 {
        self.policy.pages_migrated_in(tenant)
    }

    /// Runs `event` on the scheduling machine, if any, and carries out its decisions.
    fn schedule<R>(
        &mut self,
        event: impl FnOnce(&mut Scheduling, &mut Decisions) -> R,
    ) -> Option<R> {
        let scheduling = self.scheduling.as_mut()?;
        // What the policies share is what the memory policy shares (unified memory's:
        // VRAM less the runtime's buffers, which come and go with tenants).
        if let Some(bytes) = self.policy.shared_capacity_bytes() {
            scheduling.set_capacity(bytes);
        }
        let mut out = Decisions::default();
        let result = event(scheduling, &mut out);
        for tenant in out.preempt {
            self.actions
                .push_back(Action::Execution(Execution::Preempt {
                    tenant: TenantId(tenant as u32),
                }));
        }
        for tenant in out.start {
            self.actions.push_back(Action::Execution(Execution::Start {
                tenant: TenantId(tenant as u32),
            }));
        }
        for (tenant, advised) in out.advise {
            self.policy.on_advise(TenantId(tenant as u32), advised);
        }
        Some(result)
    }

    /// What the scheduling policy knows of `tenant`, when one is chosen.
    pub fn scheduling_state(&self, tenant: TenantId) -> Option<TenantSched> {
        self.scheduling
            .as_ref()
            .map(|s| s.tenant(tenant.0 as usize))
    }

    /// A kernel of `tenant` finished: feeds the slowdown and access-rate estimates, ends
    /// its launch's admission and tells the policy.
    pub fn handle_kernel_finished(&mut self, tenant: TenantId, stats: &KernelStats) {
        if self.books.tenant(tenant).is_none() {
            return;
        }
        let state = self.books.tenant_mut(tenant);
        state.kernel_ns += stats.ns;
        state.ideal_ns += stats.ideal_ns;
        state.accesses_in_period += stats.accesses;
        if let Some(launch) = stats.launch {
            self.release_launch(launch);
        }
        self.schedule(|s, out| s.finished(tenant.0 as usize, stats.finished_ns, out));
        self.run_policy(|policy, ctx| policy.on_kernel_finished(ctx, tenant, stats));
    }

    // ---- actions ----

    /// The next action the driver must carry out, in decision order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next page-state change the device's MMU must make (unified memory), in
    /// decision order; apart from [`Manager::poll_action`] because nothing else waits on
    /// them: the device applies them before its next touch.
    pub fn poll_page_action(&mut self) -> Option<PageAction> {
        self.policy.poll_page_action()
    }

    /// When the manager next wants [`Manager::handle_timeout`], if at all. Constant time.
    pub fn poll_timeout(&self) -> Option<u64> {
        let scheduling = self.scheduling.as_ref().and_then(Scheduling::next_timeout);
        let policy = self.policy.next_timeout(&self.books);
        // A turn's decision waits for the running job's end, which takes it anyway.
        let turns = self
            .turns
            .as_ref()
            .filter(|_| !self.relocation.running())
            .and_then(|t| t.next_timeout(&self.books));
        policy.into_iter().chain(scheduling).chain(turns).min()
    }

    /// A tenant whose VRAM figure changed since it was last returned here (each change
    /// is reported once, whatever the number of chunks that moved).
    pub fn poll_usage_change(&mut self) -> Option<TenantId> {
        self.books
            .pop_usage_change()
            .or_else(|| self.policy.pop_usage_change())
    }

    // ---- internals ----

    /// Takes back the actions for an exited tenant that the driver has not polled yet
    /// (it may hold them back while a policy runs): a suspension, a resumption, a copy
    /// (with its cancellation). The driver never hears of them.
    fn withdraw_unsent(&mut self, tenant: TenantId) {
        let mut withdrawn = Vec::new();
        self.actions.retain(|action| match action {
            Action::Execution(Execution::Suspend { tenant: t, .. })
            | Action::Execution(Execution::Resume { tenant: t })
            | Action::Execution(Execution::Preempt { tenant: t })
            | Action::Execution(Execution::Start { tenant: t }) => *t != tenant,
            Action::Dma(Dma::Copy {
                copy, tenant: t, ..
            })
            | Action::Dma(Dma::Batch {
                copy, tenant: t, ..
            }) if *t == tenant => {
                withdrawn.push(*copy);
                false
            }
            _ => true,
        });
        self.actions.retain(
            |action| !matches!(action, Action::Dma(Dma::Cancel { copy }) if withdrawn.contains(copy)),
        );
    }

    /// Frees a buffer in the books (and tells the device to unmap it if it was mapped).
    fn release(
        &mut self,
        tenant: TenantId,
        buffer: BufferId,
        mapped: bool,
    ) -> Result<(), FreeError> {
        self.books.free(tenant, buffer)?;
        if let Some(turns) = &mut self.turns {
            turns.forget_buffer(buffer);
        }
        if mapped {
            self.actions
                .push_back(Action::Mapping(Mapping::Unmap { tenant, buffer }));
        }
        self.run_policy(|policy, ctx| policy.on_free(ctx, tenant, buffer));
        Ok(())
    }

    /// Runs a policy hook with access to the books, the relocation machine and the
    /// outgoing actions; a relocation it started that ended at once is finished here.
    fn run_policy<R>(&mut self, hook: impl FnOnce(&mut dyn MemoryPolicy, &mut Ctx) -> R) -> R {
        let mut ctx = Ctx {
            books: &mut self.books,
            relocation: &mut self.relocation,
            out: &mut self.actions,
            finished: None,
            turns: self.turns.as_ref(),
        };
        let result = hook(self.policy.as_mut(), &mut ctx);
        // Matched in place: most hooks (every kernel's end) end no relocation, and moving
        // the empty `Option` out first was a stall on every kernel (a wide load of the
        // narrower stores that had just written it).
        if let Some(then) = ctx.finished {
            self.finish(Some(then));
        }
        result
    }

    /// Gives `tenant` its contract, in the books and in the policy's own terms.
    fn set_contract(&mut self, tenant: TenantId, contract: Contract) {
        self.books.set_contract(tenant, contract);
        self.policy.on_contract(tenant, &contract);
    }

    /// Serves a request under its tenant's `memory_limit`: beyond it the request fails
    /// or waits for the tenant's frees (one larger than the limit never fits: it fails).
    fn serve(&mut self, req: AllocRequest) {
        let contract = self.books.contract(req.tenant);
        let usage = self.books.usage(req.tenant);
        let unmovable = self
            .books
            .tenant(req.tenant)
            .map_or(0, |t| t.unmovable_bytes);
        let allocated_bytes = usage.vram_bytes + usage.host_bytes + unmovable;
        let over = contract
            .allocation_cap_bytes()
            .filter(|limit| allocated_bytes.saturating_add(req.bytes) > *limit);
        let placed = match over {
            Some(limit) if contract.at_limit == AtLimit::Wait && req.bytes <= limit => {
                self.at_limit.push_back(req);
                return;
            }
            Some(limit_bytes) => Err(AllocError::OverMemoryLimit {
                requested_bytes: req.bytes,
                allocated_bytes,
                limit_bytes,
            }),
            None => self.run_policy(|policy, ctx| policy.on_alloc(ctx, &req)),
        };
        match placed {
            Ok(Placed::Now(buffer)) => self.grant(req.request, req.tenant, buffer),
            // A relocation runs; the grant comes when it ends.
            Ok(Placed::AfterRelocation) => {}
            Err(error) => self.actions.push_back(Action::Reply(Reply::Fail {
                request: req.request,
                tenant: req.tenant,
                error,
            })),
        }
    }

    /// Whether `req` may be served while a relocation runs
    /// ([`Manager::set_serve_during_relocation`]): it fits in VRAM that is free in the
    /// books and under its tenant's cap, so no policy evicts for it. Free VRAM in the
    /// books is free on the device too: chunks leaving VRAM make room for the buffer
    /// that waits for them, which is not mapped yet, and chunks coming back are booked
    /// before they arrive.
    fn fits_beside_relocation(&self, req: &AllocRequest) -> bool {
        let moving = |b: &Buffer| b.chunks.iter().any(|c| c.moving_to.is_some());
        self.serve_during_relocation
            && self.turns.is_none()
            && req.bytes > 0
            && req.bytes <= self.books.vram_free_bytes()
            && req.bytes <= self.books.vram_room_under_cap(req.tenant)
            && self.relocation.pending_grant(req.tenant).is_none()
            && !self.waiting.iter().any(|r| r.tenant == req.tenant)
            && !self.books.buffers_of(req.tenant).any(moving)
    }

    /// Maps the buffer where its chunks are, then grants it; a managed buffer gets its
    /// pages.
    fn grant(&mut self, request: crate::ids::RequestId, tenant: TenantId, buffer: BufferId) {
        let b = self.books.buffer(buffer).expect("granted buffers are live");
        self.policy.on_granted(tenant, b);
        self.actions.push_back(Action::Mapping(Mapping::Map {
            tenant,
            buffer,
            bytes: b.bytes,
            chunk_bytes: self.books.chunk_bytes,
            locations: b.chunks.iter().map(|c| c.location).collect(),
        }));
        self.actions.push_back(Action::Reply(Reply::Grant {
            request,
            tenant,
            buffer,
        }));
    }

    fn prepare_launch(&mut self, tenant: TenantId, launch: LaunchId) {
        if self.relocation.running() {
            self.waiting_launches.push_back((tenant, launch));
            return;
        }
        match self.run_policy(|policy, ctx| policy.on_launch(ctx, tenant, launch)) {
            LaunchPrep::Ready => self
                .actions
                .push_back(Action::Reply(Reply::LaunchReady { tenant, launch })),
            LaunchPrep::AfterRelocation => {}
            LaunchPrep::Fail(error) => {
                self.actions.push_back(Action::Reply(Reply::LaunchFail {
                    tenant,
                    launch,
                    error,
                }));
                self.release_launch(launch);
            }
        }
    }

    /// Ends a launch's admission; the scheduler may admit the next one.
    fn release_launch(&mut self, launch: LaunchId) {
        if let Some((tenant, next)) = self.scheduler.release(launch) {
            self.prepare_launch(tenant, next);
        }
    }

    /// A relocation ended: answer what it was for, then serve what waited for it.
    fn finish(&mut self, finished: Option<Then>) {
        let Some(then) = finished else { return };
        if let Some(turns) = &mut self.turns {
            turns.job_done();
        }
        match then {
            Then::Nothing => {}
            // The requester may have been killed while it waited.
            Then::Grant(request, tenant, buffer) if self.books.contains_buffer(buffer) => {
                self.grant(request, tenant, buffer);
            }
            Then::Grant(..) => {}
            Then::LaunchReady(tenant, launch) => self
                .actions
                .push_back(Action::Reply(Reply::LaunchReady { tenant, launch })),
        }
        while !self.relocation.running() {
            if let Some((tenant, launch)) = self.waiting_launches.pop_front() {
                self.prepare_launch(tenant, launch);
            } else if let Some(req) = self.waiting.pop_front() {
                // Its turns were taken when it came: served now, whatever they say.
                self.serve(req);
            } else {
                break;
            }
        }
        self.take_turns(None);
    }

    /// What `tenant` holds that the manager cannot move ([`Held::set_unmovable`]).
    pub fn unmovable_bytes(&self, tenant: TenantId) -> u64 {
        self.books.tenant(tenant).map_or(0, |t| t.unmovable_bytes)
    }

    /// Memory held whatever the manager decides: buffers booked where they already are,
    /// the VRAM budget and memory that cannot move ([`Held`]).
    pub fn held(&mut self) -> Held<'_> {
        Held::new(
            &mut self.books,
            self.config.vram_bytes,
            self.config.host_bytes,
        )
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
