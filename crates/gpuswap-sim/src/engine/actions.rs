//! Carrying out the manager's actions: replies to tenants, suspension and resumption,
//! mapping changes, and the end of a tenant.

use std::ops::ControlFlow;

use super::copies::one_way;
use super::copy_engines::BulkProgress;
use super::*;
use gpuswap_core::BatchMove;

/// One relocation copy the manager asked for, alone or as a part of a bulk move.
struct ChunkCopy {
    copy: CopyId,
    chunk: ChunkRef,
    bytes: u64,
    to: Location,
    /// Its index in its bulk move.
    part: Option<u32>,
}

impl Engine {
    /// Carries out the manager's actions, pausing while its policy runs.
    pub(super) fn apply_actions(&mut self) {
        // Page-state changes wait for nothing: the MMU takes them at once. Only a policy
        // that needs page faults makes any, so no other polls for them.
        if self.needs.page_faults {
            self.apply_page_actions();
        }
        while !self.policy_running {
            let Some(action) = self.manager.poll_action() else {
                break;
            };
            if self.apply_action(action).is_break() {
                return;
            }
        }
    }

    /// Carries out one action of the manager's; `Break` when the run broke and the
    /// actions after it must wait.
    fn apply_action(&mut self, action: Action) -> ControlFlow<()> {
        match action {
            Action::Reply(Reply::Grant {
                request,
                tenant,
                buffer,
            }) => self.grant(request, tenant.0 as usize, buffer),
            Action::Reply(Reply::Fail {
                request,
                tenant,
                error,
            }) => self.allocation_failed(request, tenant.0 as usize, error),
            Action::Execution(Execution::PolicyRan {
                tenant,
                entries_walked,
                ..
            }) => self.policy_ran(tenant.0 as usize, entries_walked),
            Action::Execution(Execution::Suspend { tenant, .. }) => self.suspend(tenant),
            Action::Dma(Dma::Copy {
                copy,
                tenant,
                chunk,
                bytes,
                to,
            }) => {
                let setup_ns = self.preset.relocation_setup_ns(bytes);
                let relocation = ChunkCopy {
                    copy,
                    chunk,
                    bytes,
                    to,
                    part: None,
                };
                return self.queue_relocation(tenant.0 as usize, relocation, setup_ns);
            }
            Action::Dma(Dma::Batch {
                copy,
                tenant,
                moves,
            }) => return self.queue_bulk(copy, tenant.0 as usize, &moves),
            Action::Mapping(mapping) => {
                let remap = matches!(mapping, gpuswap_core::Mapping::Remap { .. });
                self.mmu.apply_mapping(mapping);
                if remap {
                    self.record_usage_changes();
                }
            }
            Action::Execution(Execution::Resume { tenant }) => self.resume(tenant.0 as usize),
            Action::Execution(Execution::Preempt { tenant }) => {
                let t = tenant.0 as usize;
                if let Some(running) = self.compute.running.iter_mut().find(|r| r.tenant == t) {
                    running.preempt = true;
                }
            }
            Action::Execution(Execution::Start { tenant }) => self.unhold(tenant.0 as usize),
            Action::Execution(Execution::Kill { tenant, reason }) => {
                let message = format!("killed by the memory manager: {reason}");
                self.finish_tenant(tenant.0 as usize, Some(message));
            }
            Action::Dma(Dma::Cancel { copy }) => self.cancel_copy(copy),
            Action::Reply(Reply::LaunchReady { launch, .. }) => {
                if self.compute.held_launch.as_ref().map(|h| h.1.id) != Some(launch) {
                    let failure = self.broken(format!("{launch} admitted but not held"));
                    self.failure.get_or_insert(failure);
                    return ControlFlow::Break(());
                }
                self.schedule(
                    self.now_ns.saturating_add(self.preset.gdev_launch_ns),
                    Event::GatedLaunch(launch),
                );
            }
            Action::Reply(Reply::LaunchFail { tenant, error, .. }) => {
                self.launch_failed(tenant.0 as usize, error)
            }
        }
        ControlFlow::Continue(())
    }

    /// The manager granted tenant `t`'s allocation `request` as `buffer`: the tenant
    /// goes on after the driver call (an answer to no pending call is dropped).
    fn grant(&mut self, request: RequestId, t: usize, buffer: BufferId) {
        let Some(pending) = self.tenants[t].pending_alloc.take() else {
            return;
        };
        debug_assert_eq!(pending.request, request, "one allocation per tenant");
        if self.evicting_for == Some(t) {
            self.evicting_for = None;
        }
        let done_ns = self.now_ns.saturating_add(self.preset.driver_call_ns);
        let latency = done_ns - pending.asked_ns;
        let record = self.recorder.tenant(t);
        record.alloc_latencies_ns.push(latency);
        if let Some(mut e) = pending.eviction {
            e.total_ns = latency;
            e.waiting_ns = latency - e.policy_ns - e.dma_setup_ns - e.dma_ns;
            record.evictions.push(e);
        }
        self.tenants[t].slots[pending.slot] = Some(buffer);
        self.record_usage_changes();
        self.schedule_step(t, self.preset.driver_call_ns);
    }

    /// The manager refused tenant `t`'s allocation `request`: the tenant fails.
    fn allocation_failed(&mut self, request: RequestId, t: usize, error: gpuswap_core::AllocError) {
        let Some(pending) = self.tenants[t].pending_alloc.take() else {
            return;
        };
        debug_assert_eq!(pending.request, request, "one allocation per tenant");
        let done_ns = self.now_ns.saturating_add(self.preset.driver_call_ns);
        self.recorder
            .tenant(t)
            .alloc_latencies_ns
            .push(done_ns - pending.asked_ns);
        let spec = &self.tenants[t].buffers[pending.slot];
        let message = format!(
            "allocation of {:?} ({} bytes) failed: {error}",
            spec.label, spec.bytes
        );
        self.finish_tenant(t, Some(message));
    }

    /// The manager's policy walked `entries_walked` entries for tenant `t`: its actions
    /// wait for the policy's time.
    fn policy_ran(&mut self, t: usize, entries_walked: u64) {
        let policy_ns = entries_walked * self.preset.policy_ns_per_entry;
        if let Some(pending) = &mut self.tenants[t].pending_alloc {
            pending.eviction.get_or_insert_default().policy_ns += policy_ns;
        }
        self.evicting_for = Some(t);
        self.record_usage_changes();
        self.policy_running = true;
        self.schedule(self.now_ns.saturating_add(policy_ns), Event::PolicyDone);
    }

    /// The manager suspends `tenant`: it drains (or, unsafely, is reported suspended at
    /// once).
    fn suspend(&mut self, tenant: TenantId) {
        let t = tenant.0 as usize;
        if self.crash_due(t, Trigger::Suspend) {
            self.schedule(self.now_ns, Event::Crash(t));
        }
        if self.unsafe_skip_suspend {
            let answer = self.manager.handle_suspended(tenant);
            return self.protocol(answer);
        }
        self.tenants[t].suspended = true;
        self.tenants[t].draining_since = Some(self.now_ns);
        self.check_drained(t);
    }

    /// The manager moves many of tenant `t`'s chunks in one bulk move: every part
    /// queues for the copy engines at once and the manager hears once, when all are
    /// over. The driver's fixed cost of a move is paid once per bulk move (one command
    /// and one synchronization), each part paying the copy engine's setup and its
    /// per-page mapping work. Unconfirmed: bulk moves are not yet measured on a GPU.
    fn queue_bulk(&mut self, copy: CopyId, t: usize, moves: &[BatchMove]) -> ControlFlow<()> {
        self.copies.bulk = Some(BulkProgress {
            copy,
            parts_left: moves.len(),
            failed: Vec::new(),
        });
        for (i, mv) in moves.iter().enumerate() {
            let per_page_ns = mv.bytes.div_ceil(4096) * self.preset.relocation_ns_per_page;
            let fixed_ns = if i == 0 {
                self.preset.relocation_fixed_ns
            } else {
                self.preset.copy_setup_ns
            };
            let relocation = ChunkCopy {
                copy,
                chunk: mv.chunk,
                bytes: mv.bytes,
                to: mv.to,
                part: Some(i as u32),
            };
            self.queue_relocation(t, relocation, fixed_ns + per_page_ns)?;
        }
        ControlFlow::Continue(())
    }

    /// The manager relocates one of tenant `t`'s chunks: the copy queues for a copy
    /// engine after `setup_ns` of the driver's work. `Break` when the chunk is being
    /// written (a lost write).
    fn queue_relocation(
        &mut self,
        t: usize,
        relocation: ChunkCopy,
        setup_ns: u64,
    ) -> ControlFlow<()> {
        let ChunkCopy {
            copy,
            chunk,
            bytes,
            to,
            part,
        } = relocation;
        if self.being_written(chunk.buffer) {
            self.lost_write(t, chunk);
            return ControlFlow::Break(());
        }
        let epoch = self.write_state(chunk.buffer).unwrap_or_default().epoch;
        if self.crash_due(t, Trigger::Copy) {
            self.schedule(self.now_ns, Event::Crash(t));
        }
        let delay_ns = self.chaos.as_mut().map_or(0, |c| c.answer_delay_ns());
        let direction = match to {
            Location::Host => Direction::ToHost,
            Location::Vram => Direction::ToDevice,
        };
        self.copies.push(CopyJob::new(
            t,
            CopyKind::Relocation {
                copy,
                chunk,
                epoch,
                part,
            },
            one_way(direction, bytes),
            setup_ns.saturating_add(delay_ns),
            None,
        ));
        self.start_copies();
        ControlFlow::Continue(())
    }

    /// Gdev's scheduler cannot launch tenant `t`'s held kernel: the tenant fails and the
    /// device goes on.
    fn launch_failed(&mut self, t: usize, error: gpuswap_core::AllocError) {
        self.compute.held_launch = None;
        self.tenants[t].in_flight -= 1;
        let why = match error {
            gpuswap_core::AllocError::OutOfHostMemory { .. } => {
                "host memory cannot take the buffers it would swap out"
            }
            _ => "the tenant's buffers do not fit in VRAM",
        };
        let message = format!("gdev cannot launch: {why} ({error})");
        self.finish_tenant(t, Some(message));
        self.hand_on_device();
        self.start_kernel();
    }

    /// Records that a relocation copied a chunk its tenant was writing: the copy in the
    /// new location misses the write.
    pub(super) fn lost_write(&mut self, t: usize, chunk: ChunkRef) {
        let failure = self.broken(format!(
            "lost write: {} wrote {:?} while it was being relocated",
            self.tenants[t].name, chunk
        ));
        self.failure.get_or_insert(failure);
    }

    /// Records a protocol error of the manager's (a bug of the engine's): the run stops.
    pub(super) fn protocol(&mut self, answer: Result<(), gpuswap_core::ProtocolError>) {
        if let Err(e) = answer {
            let failure = self.broken(format!("protocol error: {e}"));
            self.failure.get_or_insert(failure);
        }
    }

    /// Reports a suspension to the manager once the tenant's queued work is done.
    pub(super) fn check_drained(&mut self, t: usize) {
        let running_here = self.compute.runs_kernel_of(t);
        let tenant = &mut self.tenants[t];
        if let Some(since) = tenant.draining_since
            && tenant.drained(running_here)
        {
            tenant.draining_since = None;
            tenant.drained_at = self.now_ns;
            // Suspended for the eviction its own allocation asked for (one eviction runs
            // at a time, so the requester is the same from the suspension to here).
            let own_allocation = self.evicting_for == Some(t);
            self.recorder.tenant(t).pauses.push(VictimPause {
                drain_ns: self.now_ns - since,
                pause_ns: 0,
                own_allocation,
            });
            match self.chaos.as_mut().map_or(0, |c| c.answer_delay_ns()) {
                0 => self.report_drained(t),
                delay_ns => self.schedule(
                    self.now_ns.saturating_add(delay_ns),
                    Event::ReportDrained(t),
                ),
            }
        }
    }

    /// Tells the manager that tenant `t` drained (unless it ended meanwhile: the manager
    /// then no longer waits for it).
    pub(super) fn report_drained(&mut self, t: usize) {
        if self.tenants[t].state == State::Done {
            return;
        }
        let answer = self.manager.handle_suspended(self.tenants[t].id);
        self.protocol(answer);
        self.apply_actions();
    }

    /// Counts a point of tenant `t`'s life where an injected crash may be due.
    pub(super) fn crash_due(&mut self, t: usize, trigger: Trigger) -> bool {
        self.chaos.as_mut().is_some_and(|c| c.crash_due(t, trigger))
    }

    /// An injected crash: the tenant dies now, whatever it is doing.
    pub(super) fn crash(&mut self, t: usize) {
        if self.tenants[t].state != State::Done {
            let message = format!("crashed at {} ns (injected fault)", self.now_ns);
            self.finish_tenant(t, Some(message));
        }
    }

    /// The manager withdrew a relocation copy (its tenant exited): a queued one is
    /// dropped, one on a copy engine runs out and its result is dropped.
    fn cancel_copy(&mut self, copy: CopyId) {
        if !self.copies.cancel(copy) {
            let failure = self.broken(format!("copy {} cancelled but not in progress", copy.0));
            self.failure.get_or_insert(failure);
        }
    }

    pub(super) fn resume(&mut self, t: usize) {
        let tenant = &mut self.tenants[t];
        if !tenant.suspended {
            return;
        }
        tenant.suspended = false;
        if let Some(pause) = self.recorder.tenant(t).pauses.last_mut() {
            pause.pause_ns = self.now_ns - tenant.drained_at;
        }
        let held: Vec<_> = tenant.held.drain(..).collect();
        tenant.channel.extend(held);
        if !tenant.channel.is_empty() {
            self.compute.ready.insert(t);
        }
        if tenant.state == State::WaitingChannel && tenant.in_flight == 0 {
            self.schedule_step(t, 0);
        }
        self.start_kernel();
    }

    /// Records the accounted VRAM of every tenant whose figure changed.
    pub(super) fn record_usage_changes(&mut self) {
        while let Some(id) = self.manager.poll_usage_change() {
            let bytes = self.manager.usage(id).vram_bytes;
            let record = self.recorder.tenant(id.0 as usize);
            record.note_vram(self.now_ns, bytes);
        }
    }

    /// Ends a tenant: it finished its program (`error` = None), failed, crashed or was
    /// killed. What it had on the GPU already (a running kernel, a memcpy on a copy
    /// engine) runs out; nothing of it that was queued starts; the manager releases
    /// everything it held and stops waiting for it.
    pub(super) fn finish_tenant(&mut self, t: usize, error: Option<String>) {
        let tenant = &mut self.tenants[t];
        if tenant.state != State::Done {
            self.done += 1;
        }
        tenant.state = State::Done;
        // A kernel it had preempted runs out as a running one does.
        if !self.compute.slices.has_parked(t) {
            self.compute.ready.remove(t);
        }
        tenant.end_ns = self.now_ns;
        tenant.error = error;
        let dropped = tenant.channel.len() + tenant.held.len();
        tenant.channel.clear();
        tenant.held.clear();
        tenant.in_flight -= dropped;
        tenant.pending_alloc = None;
        tenant.deferred_step = None;
        if let Some(since) = tenant.held_since.take() {
            self.recorder.tenant(t).record_wait(self.now_ns - since);
        }
        tenant.draining_since = None;
        tenant.suspended = false;
        if self.evicting_for == Some(t) {
            self.evicting_for = None;
        }
        let held = self.compute.held_launch.as_ref().is_some_and(|h| h.0 == t);
        if held {
            self.compute.held_launch = None;
            self.tenants[t].in_flight -= 1;
        }
        let gated = self.compute.gated.len();
        self.compute.gated.retain(|(g, _)| *g != t);
        self.tenants[t].in_flight -= gated - self.compute.gated.len();
        let had_device = self.device_lock.held_by(t);
        self.drop_queued_memcpys(t);
        self.device_lock.forget(t);
        self.manager.handle_tenant_exit(self.tenants[t].id);
        self.record_usage_changes();
        self.apply_actions();
        // Only a crash mid-way leaves the device to hand on.
        if held || (had_device && !self.device_lock.is_held()) {
            self.hand_on_device();
            self.start_kernel();
        }
        // Endless tenants end with the last of the others.
        let others_left = self
            .tenants
            .iter()
            .any(|o| !o.endless && o.state != State::Done);
        if !self.tenants[t].endless && !others_left {
            for e in 0..self.tenants.len() {
                if self.tenants[e].state != State::Done {
                    self.finish_tenant(e, None);
                }
            }
        }
    }

    /// Drops tenant `t`'s memcpys that wait for a copy engine, and its hold on the
    /// device if no memcpy of it runs.
    fn drop_queued_memcpys(&mut self, t: usize) {
        let mut unwritten = Vec::new();
        let dropped = self.copies.drop_queued_memcpys(t, &mut unwritten);
        self.tenants[t].copies_in_flight -= dropped;
        for buffer in unwritten {
            self.end_write(buffer);
        }
        if self.device_lock.held_by(t) && !self.copies.runs_memcpy_of(t) {
            self.device_lock.release();
        }
    }

    /// What the device must look like after every event (checked with the manager's
    /// invariants): an ended tenant holds nothing in the manager's books and is not
    /// suspended, and nobody is suspended unless a relocation runs or turns park it.
    pub(super) fn check_device_invariants(&self) -> Result<(), String> {
        let relocating = self.manager.relocating();
        for tenant in &self.tenants {
            if tenant.state == State::Done && self.manager.buffers_of(tenant.id).next().is_some() {
                return Err(format!("{} ended but still owns buffers", tenant.name));
            }
            // While the policy's time runs, the manager's later actions (a resumption
            // among them) wait to be carried out.
            let parked = self.manager.parked(tenant.id) || self.policy_running;
            if tenant.suspended && (tenant.state == State::Done || !(relocating || parked)) {
                return Err(format!(
                    "{} is left suspended ({}; no relocation runs: {})",
                    tenant.name,
                    if tenant.state == State::Done {
                        "ended"
                    } else {
                        "running"
                    },
                    !relocating
                ));
            }
        }
        Ok(())
    }

    /// What must hold when every tenant ended: nothing allocated, mapped, moving or
    /// waiting anywhere.
    pub(super) fn check_end(&self) -> Result<(), String> {
        let leftovers = [
            (self.manager.vram_used_bytes() != 0, "VRAM still accounted"),
            (
                self.manager.host_used_bytes() != 0,
                "host memory still accounted",
            ),
            (self.manager.relocating(), "a relocation still runs"),
            (
                !self.mmu.table.is_empty(),
                "the page table still maps buffers",
            ),
            (self.copies.busy(), "copies still in progress"),
            (
                !self.compute.running.is_empty()
                    || !self.compute.gated.is_empty()
                    || !self.compute.slices.parked.is_empty(),
                "kernels still running",
            ),
            (
                self.device_lock.is_held() || self.compute.held_launch.is_some(),
                "the device still held",
            ),
        ];
        match leftovers.iter().find(|(left, _)| *left) {
            Some((_, what)) => Err(format!("every tenant ended, but {what}")),
            None => Ok(()),
        }
    }
}
