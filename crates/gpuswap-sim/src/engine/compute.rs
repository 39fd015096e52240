//! The compute engine: launches run one at a time, round-robin over tenants' channels
//! at kernel granularity (exclusive time slicing), each identified by its launch id.

/// Kernels the compute engine runs at once in the exclusive model: one, as time slicing
/// at kernel granularity does (concurrent models such as MPS will raise it).
pub(super) const EXCLUSIVE_SLOTS: usize = 1;

use super::*;

impl Engine {
    /// Starts the next kernel if the compute engine is idle: round-robin over tenants'
    /// channels at kernel granularity.
    pub(super) fn start_kernel(&mut self) {
        if self.running.len() >= EXCLUSIVE_SLOTS
            || self.held_launch.is_some()
            || self.device_lock.is_some()
        {
            return;
        }
        let n = self.tenants.len();
        // The first tenant with queued kernels at or after the round-robin position,
        // wrapping around.
        let Some(t) = self.ready.next_from(self.round_robin_next) else {
            return;
        };
        self.round_robin_next = (t + 1) % n;
        let launch = self.tenants[t].channel.pop_front().expect("ready");
        if self.tenants[t].channel.is_empty() {
            self.ready.remove(t);
        }
        if self.needs.launch_gating {
            let id = launch.id;
            self.held_launch = Some((t, launch));
            let answer = self.manager.handle_launch(self.tenants[t].id, id);
            self.protocol(answer);
            return self.apply_actions();
        }
        self.run_kernel(t, launch);
    }

    /// Runs a kernel on the compute engine with its data where it is now.
    pub(super) fn run_kernel(&mut self, t: usize, launch: Launch) {
        let want_references = self.preset.features.reference_bits && self.needs.reference_bits;
        let cost = self.kernel_cost(t, &launch);
        let kernel = launch.kernel;
        let mut referenced = Vec::new();
        if want_references {
            for access in &kernel.accesses {
                if let Some(b) =
                    self.tenants[t].slots[access.slot].and_then(|id| self.page_table.get(id))
                {
                    referenced.extend(timing::touched_host_chunks(&access.distribution, b));
                }
            }
        }
        for id in cost.written.iter() {
            self.begin_write(*id);
        }
        let traffic = cost.traffic;
        // Unified memory: every access is served from VRAM once its faults are, or from
        // host memory where the paging machine maps it remotely. The kernel first moves
        // its batches' evictions and migrations over the link (flows shared with every
        // other user of the link, one after the other), then takes its all-in-VRAM time
        // plus the batches' service time and the remote accesses' time (first order:
        // none of it overlaps its computation).
        let paging = self.needs.page_faults.then(|| {
            let paging = self.fault_in(t, &kernel, launch.id.0);
            // Its faults moved pages in and out of VRAM, its own and others'.
            self.record_usage_changes();
            paging
        });
        let tenant = &mut self.tenants[t];
        let fixed_ns = match &paging {
            Some(paging) => {
                let remote = paging.remote.remote_bytes();
                let all = traffic.local_bytes + traffic.remote_bytes();
                tenant.local_bytes += (all - remote).max(0.0);
                tenant.remote_bytes += remote;
                let remote_ns = timing::remote_ns(&self.preset, &paging.remote);
                cost.ideal_ns
                    .saturating_add(paging.service_ns)
                    .saturating_add(remote_ns.ceil() as u64)
            }
            None => {
                tenant.local_bytes += traffic.local_bytes;
                tenant.remote_bytes += traffic.remote_bytes();
                cost.fixed_ns
            }
        };
        let mut flows_left = 0;
        let weight = timing::kernel_pending_bytes(&self.preset);
        for (direction, bytes) in [
            (Direction::ToDevice, traffic.link_bytes_to_device()),
            (Direction::ToHost, traffic.link_bytes_to_host()),
        ] {
            if bytes > 0.0 && paging.is_none() {
                let id = self.link.start(self.now_ns, direction, bytes, None, weight);
                self.flow_owners.push((id, FlowOwner::Kernel(launch.id)));
                flows_left += 1;
            }
        }
        // Migrations as copy-engine flows: their time alone at the link's peak is what
        // they take at their transfer size's rate, so sharing stretches them in proportion.
        let mut migrations: Vec<(Direction, f64)> = paging.as_ref().map_or_else(Vec::new, |p| {
            let link = &self.preset.link;
            [
                (
                    Direction::ToDevice,
                    p.transfer_ns.1 * link.h2d_bytes_per_s / 1e9,
                ),
                (
                    Direction::ToHost,
                    p.transfer_ns.0 * link.d2h_bytes_per_s / 1e9,
                ),
            ]
            .into_iter()
            .filter(|(_, bytes)| *bytes > 0.0)
            .collect()
        });
        let fault_service_ns = paging.as_ref().map_or(0, |p| p.service_ns);
        let first_migration = migrations.pop();
        let fixed_after_migrations_ns = first_migration.is_some().then_some(fixed_ns);
        if first_migration.is_none() {
            self.tenants[t].fault_stall_ns += fault_service_ns;
        }
        self.running.push(RunningKernel {
            launch: launch.id,
            tenant: t,
            ideal_ns: cost.ideal_ns,
            started_ns: self.now_ns,
            accesses: cost.accesses,
            fixed_done: false,
            flows_left,
            written: cost.written,
            referenced,
            migrations,
            fixed_after_migrations_ns,
            fault_service_ns,
        });
        match first_migration {
            Some((direction, bytes)) => self.start_migration(launch.id, direction, bytes),
            None => {
                let seq = self.next_seq();
                self.kernel_wakes
                    .push((self.now_ns.saturating_add(fixed_ns), seq, launch.id));
            }
        }
        if flows_left > 0 || fixed_after_migrations_ns.is_some() {
            self.rearm_link();
        }
    }

    /// Puts one of a kernel's fault migrations on the link.
    fn start_migration(&mut self, launch: LaunchId, direction: Direction, bytes: f64) {
        let weight = timing::dma_pending_bytes(&self.preset);
        let id = self.link.start(self.now_ns, direction, bytes, None, weight);
        self.flow_owners.push((id, FlowOwner::Kernel(launch)));
        self.running_kernel(launch)
            .expect("the kernel runs")
            .flows_left += 1;
    }

    /// A flow of a running kernel ended: the next of its migrations starts, or, after
    /// the last, its fixed time.
    pub(super) fn kernel_flow_done(&mut self, launch: LaunchId) {
        let running = self
            .running_kernel(launch)
            .expect("a flow's kernel is running");
        running.flows_left -= 1;
        if running.flows_left == 0 {
            if let Some((direction, bytes)) = running.migrations.pop() {
                self.start_migration(launch, direction, bytes);
                return;
            }
            if let Some(fixed_ns) = running.fixed_after_migrations_ns.take() {
                let (t, started_ns, service_ns) =
                    (running.tenant, running.started_ns, running.fault_service_ns);
                self.tenants[t].fault_stall_ns += self.now_ns - started_ns + service_ns;
                let seq = self.next_seq();
                self.kernel_wakes
                    .push((self.now_ns.saturating_add(fixed_ns), seq, launch));
                return;
            }
        }
        self.maybe_finish_kernel(launch);
    }

    /// What `launch` by tenant `t` costs with the data where the page table says it is.
    /// Cached per launch site while the tenant's page-table epoch stays the same: a
    /// program relaunches the same kernels many times between placement changes, and
    /// some touch hundreds of buffers (heartwall).
    pub(super) fn kernel_cost(&mut self, t: usize, launch: &Launch) -> KernelCost {
        let epoch = self.page_table.epoch(self.tenants[t].id);
        let cache = &mut self.tenants[t].cost_cache;
        if let Some(Some(site)) = cache.get(launch.site)
            && site.epoch == epoch
        {
            return site.cost.clone();
        }
        let cached = cache.get_mut(launch.site).and_then(Option::take);
        let kernel = &launch.kernel;
        let mut fractions = cached.map_or_else(Vec::new, |site| site.fractions);
        fractions.resize(kernel.accesses.len(), None);
        let mut traffic = Traffic::default();
        let mut ideal = Traffic::default();
        let mut written = Vec::new();
        for (access, known) in kernel.accesses.iter().zip(&mut fractions) {
            let id = self.tenants[t].slots[access.slot];
            // An access to a buffer the program has not allocated is a program bug that
            // the validator rejects; count it as local to stay total.
            let fraction = match id.and_then(|id| self.page_table.get(id)) {
                None => 1.0,
                Some(b) => match *known {
                    // Placements of other buffers moved, not this one's.
                    Some((buffer_epoch, fraction)) if buffer_epoch == b.epoch => fraction,
                    _ => {
                        let fraction = timing::local_fraction(&access.distribution, b);
                        *known = Some((b.epoch, fraction));
                        fraction
                    }
                },
            };
            traffic.add(access, fraction);
            ideal.add(access, 1.0);
            if let (Some(id), true) = (id, access.write_bytes > 0) {
                written.push(id);
            }
        }
        // A kernel with barriers: each phase's own traffic, at the same local fractions.
        let fractions_now = &fractions;
        let phase_traffic = |local: bool| {
            let mut start = 0;
            kernel.phases.iter().map(move |phase| {
                let mut t = Traffic::default();
                let end = start + phase.accesses;
                for (access, known) in kernel.accesses[start..end]
                    .iter()
                    .zip(&fractions_now[start..end])
                {
                    let fraction = if local {
                        1.0
                    } else {
                        known.map_or(1.0, |k| k.1)
                    };
                    t.add(access, fraction);
                }
                start = end;
                (phase.ops, t)
            })
        };
        let (fixed_ns, ideal_ns) = if kernel.phases.is_empty() {
            (
                timing::fixed_ns(&self.preset, kernel.ops, &traffic),
                timing::fixed_ns(&self.preset, kernel.ops, &ideal),
            )
        } else {
            (
                timing::phased_fixed_ns(&self.preset, phase_traffic(false)),
                timing::phased_fixed_ns(&self.preset, phase_traffic(true)),
            )
        };
        let cost = KernelCost {
            traffic,
            fixed_ns,
            ideal_ns,
            accesses: (ideal.local_bytes / READ_TRANSACTION_BYTES as f64).round() as u64,
            written: written.into(),
        };
        let cache = &mut self.tenants[t].cost_cache;
        if launch.site >= cache.len() {
            cache.resize(launch.site + 1, None);
        }
        cache[launch.site] = Some(SiteCost {
            epoch,
            cost: cost.clone(),
            fractions,
        });
        cost
    }

    pub(super) fn write_state(&self, buffer: BufferId) -> WriteState {
        self.writes
            .get(buffer.0 as usize)
            .copied()
            .unwrap_or_default()
    }

    pub(super) fn begin_write(&mut self, buffer: BufferId) {
        let i = buffer.0 as usize;
        if i >= self.writes.len() {
            self.writes.resize(i + 1, WriteState::default());
        }
        self.writes[i].epoch += 1;
        self.writes[i].writers += 1;
    }

    pub(super) fn end_write(&mut self, buffer: BufferId) {
        let state = &mut self.writes[buffer.0 as usize];
        state.epoch += 1;
        state.writers -= 1;
    }

    /// Ends `launch` once its fixed part and its link flows are done.
    pub(super) fn maybe_finish_kernel(&mut self, launch: LaunchId) {
        let Some(at) = self.running.iter().position(|r| r.launch == launch) else {
            return;
        };
        let running = &self.running[at];
        if !running.fixed_done || running.flows_left > 0 {
            return;
        }
        let running = self.running.swap_remove(at);
        for id in running.written.iter() {
            self.end_write(*id);
        }
        let t = running.tenant;
        let stats = KernelStats {
            launch: Some(running.launch),
            accesses: running.accesses,
            ns: self.now_ns - running.started_ns,
            finished_ns: self.now_ns,
            ideal_ns: running.ideal_ns,
            referenced: running.referenced,
        };
        self.manager
            .handle_kernel_finished(self.tenants[t].id, &stats);
        let tenant = &mut self.tenants[t];
        tenant.in_flight -= 1;
        let wake = match tenant.state {
            State::WaitingChannel => tenant.in_flight == 0,
            State::WaitingQueueSpace => true,
            _ => false,
        };
        if wake {
            self.wake_for_queue_space(t);
        }
        self.check_drained(t);
        self.hand_on_device();
        self.start_kernel();
        self.apply_actions();
    }

    /// The running kernel of `launch`.
    pub(super) fn running_kernel(&mut self, launch: LaunchId) -> Option<&mut RunningKernel> {
        self.running.iter_mut().find(|r| r.launch == launch)
    }
}
