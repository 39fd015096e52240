//! Carrying out the manager's actions: replies to tenants, suspension and resumption,
//! mapping changes, and the end of a tenant.

use super::copies::one_way;
use super::*;

impl Engine {
    /// Carries out the manager's actions, pausing while its policy runs.
    pub(super) fn apply_actions(&mut self) {
        while !self.policy_running {
            let Some(action) = self.manager.poll_action() else {
                break;
            };
            match action {
                Action::Reply(Reply::Grant {
                    request,
                    tenant,
                    buffer,
                }) => {
                    let t = tenant.0 as usize;
                    let Some(pending) = self.tenants[t].pending_alloc.take() else {
                        continue;
                    };
                    debug_assert_eq!(pending.request, request, "one allocation per tenant");
                    if self.evicting_for == Some(t) {
                        self.evicting_for = None;
                    }
                    let done_ns = self.now_ns.saturating_add(self.preset.driver_call_ns);
                    let latency = done_ns - pending.asked_ns;
                    let tenant = &mut self.tenants[t];
                    tenant.alloc_latencies_ns.push(latency);
                    if let Some(mut e) = pending.eviction {
                        e.total_ns = latency;
                        e.waiting_ns = latency - e.policy_ns - e.dma_setup_ns - e.dma_ns;
                        tenant.evictions.push(e);
                    }
                    tenant.slots[pending.slot] = Some(buffer);
                    self.record_usage_changes();
                    self.schedule_step(t, self.preset.driver_call_ns);
                }
                Action::Reply(Reply::Fail {
                    request,
                    tenant,
                    error,
                }) => {
                    let t = tenant.0 as usize;
                    let Some(pending) = self.tenants[t].pending_alloc.take() else {
                        continue;
                    };
                    debug_assert_eq!(pending.request, request, "one allocation per tenant");
                    let done_ns = self.now_ns.saturating_add(self.preset.driver_call_ns);
                    self.tenants[t]
                        .alloc_latencies_ns
                        .push(done_ns - pending.asked_ns);
                    let spec = &self.tenants[t].buffers[pending.slot];
                    let message = format!(
                        "allocation of {:?} ({} bytes) failed: {error}",
                        spec.label, spec.bytes
                    );
                    self.finish_tenant(t, Some(message));
                }
                Action::Execution(Execution::PolicyRan {
                    tenant,
                    entries_walked,
                    ..
                }) => {
                    let t = tenant.0 as usize;
                    let policy_ns = entries_walked * self.preset.policy_ns_per_entry;
                    if let Some(pending) = &mut self.tenants[t].pending_alloc {
                        pending.eviction.get_or_insert_default().policy_ns += policy_ns;
                    }
                    self.evicting_for = Some(t);
                    self.record_usage_changes();
                    self.policy_running = true;
                    self.schedule(self.now_ns.saturating_add(policy_ns), Event::PolicyDone);
                }
                Action::Execution(Execution::Suspend { tenant, .. }) => {
                    let t = tenant.0 as usize;
                    if self.unsafe_skip_suspend {
                        let answer = self.manager.handle_suspended(tenant);
                        self.protocol(answer);
                        continue;
                    }
                    self.tenants[t].suspended = true;
                    self.tenants[t].draining_since = Some(self.now_ns);
                    self.check_drained(t);
                }
                Action::Dma(Dma::Copy {
                    copy,
                    tenant,
                    chunk,
                    bytes,
                    to,
                }) => {
                    let t = tenant.0 as usize;
                    let writes = self.write_state(chunk.buffer);
                    if writes.writers > 0 {
                        return self.lost_write(t, chunk);
                    }
                    let epoch = writes.epoch;
                    self.copy_queue.push_back(CopyJob {
                        tenant: t,
                        kind: CopyKind::Relocation { copy, chunk, epoch },
                        link_bytes: one_way(
                            match to {
                                Location::Host => Direction::ToHost,
                                Location::Vram => Direction::ToDevice,
                            },
                            bytes,
                        ),
                        flows_left: 0,
                        setup_ns: self.preset.relocation_setup_ns(bytes),
                        cap_bytes_per_s: None,
                        transfer_started_ns: 0,
                        setup_started_ns: 0,
                    });
                    self.start_copies();
                }
                Action::Mapping(mapping) => {
                    let remap = matches!(mapping, gpuswap_core::Mapping::Remap { .. });
                    self.page_table.apply(mapping);
                    if remap {
                        self.record_usage_changes();
                    }
                }
                Action::Execution(Execution::Resume { tenant }) => self.resume(tenant.0 as usize),
                Action::Reply(Reply::LaunchReady { launch, .. }) => {
                    if self.held_launch.as_ref().map(|h| h.1.id) != Some(launch) {
                        let failure = self.broken(format!("{launch} admitted but not held"));
                        self.failure.get_or_insert(failure);
                        return;
                    }
                    self.schedule(
                        self.now_ns.saturating_add(self.preset.gdev_launch_ns),
                        Event::GatedLaunch,
                    );
                }
                Action::Reply(Reply::LaunchFail { tenant, error, .. }) => {
                    let t = tenant.0 as usize;
                    self.held_launch = None;
                    self.tenants[t].in_flight -= 1;
                    let message = format!(
                        "gdev cannot launch: the tenant's buffers do not fit in VRAM ({error})"
                    );
                    self.finish_tenant(t, Some(message));
                    self.hand_on_device();
                    self.start_kernel();
                }
            }
        }
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
        let running_here = self.running.iter().any(|r| r.tenant == t);
        let tenant = &mut self.tenants[t];
        if let Some(since) = tenant.draining_since
            && tenant.drained(running_here)
        {
            tenant.draining_since = None;
            tenant.drained_at = self.now_ns;
            tenant.pauses.push(VictimPause {
                drain_ns: self.now_ns - since,
                pause_ns: 0,
            });
            let answer = self.manager.handle_suspended(tenant.id);
            self.protocol(answer);
            self.apply_actions();
        }
    }

    pub(super) fn resume(&mut self, t: usize) {
        let tenant = &mut self.tenants[t];
        if !tenant.suspended {
            return;
        }
        tenant.suspended = false;
        if let Some(pause) = tenant.pauses.last_mut() {
            pause.pause_ns = self.now_ns - tenant.drained_at;
        }
        let held: Vec<_> = tenant.held.drain(..).collect();
        tenant.channel.extend(held);
        if !tenant.channel.is_empty() {
            self.ready.insert(t);
        }
        if tenant.state == State::WaitingChannel && tenant.in_flight == 0 {
            self.schedule_step(t, 0);
        }
        self.start_kernel();
    }

    /// Records the accounted VRAM of every tenant whose figure changed.
    pub(super) fn record_usage_changes(&mut self) {
        while let Some(id) = self.manager.poll_usage_change() {
            let t = &mut self.tenants[id.0 as usize];
            let bytes = self.manager.usage(id).vram_bytes;
            if t.vram_timeline.last().map(|l| l.1) != Some(bytes) {
                t.vram_timeline.push((self.now_ns, bytes));
            }
        }
    }

    /// Ends a tenant: it finished its program (`error` = None) or failed.
    pub(super) fn finish_tenant(&mut self, t: usize, error: Option<String>) {
        let tenant = &mut self.tenants[t];
        if tenant.state != State::Done {
            self.done += 1;
        }
        tenant.state = State::Done;
        self.ready.remove(t);
        tenant.end_ns = self.now_ns;
        tenant.error = error;
        // Queued kernels of a failed tenant never run; a running one completes.
        let dropped = tenant.channel.len() + tenant.held.len();
        tenant.channel.clear();
        tenant.held.clear();
        tenant.in_flight -= dropped;
        self.manager.handle_tenant_exit(tenant.id);
        self.record_usage_changes();
        self.check_drained(t);
        self.apply_actions();
    }
}
