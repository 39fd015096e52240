//! The compute engine: which launches run when, under the device's sharing model, each
//! identified by its launch id.
//!
//! - Time slicing: one kernel at a time, round-robin over tenants' channels at kernel
//!   granularity. Under Gdev (gated launches) the running context's next launches go
//!   through the gate while its kernel runs, up to Gdev's launch limit, and run back to
//!   back; the others wait until it has nothing in flight.
//! - MPS: one kernel per tenant at a time (its channel is one stream), kernels of
//!   different tenants at once. Their fixed parts share the SMs by demand and VRAM
//!   bandwidth max-min fairly ([`water_fill`]); their migrations share the link as every
//!   flow does. A unified-memory kernel runs in [`SEGMENTS`] segments, each walking its
//!   share of the kernel's page touches when it starts, so that concurrent kernels'
//!   faults interleave (and evict each other's pages) at that granularity.
//!
//! Turns (nvshare's exclusive quantum among them) are the manager's: it parks the
//! tenants that wait, and the device runs what is not suspended.

use super::*;
use crate::preemption;
use crate::serial_loop;

/// Segments of a unified-memory kernel that runs in segments: the granularity at which
/// concurrent kernels' page touches interleave and at which a scheduler's preemption
/// takes effect (PILOT's instrumented check before the outermost loop's back-edge stops
/// a kernel at once; the model stops it at the next of 16 evenly spread points). What
/// the checks cost follows the kernel's own loop: [`crate::preemption`].
pub(super) const SEGMENTS: u64 = 16;

/// A running kernel's fixed part under MPS: what is left of it at the full device, the
/// rate it progresses at, and since when.
#[derive(Clone, Copy, Debug)]
pub(super) struct FixedShare {
    left_ns: f64,
    rate: f64,
    since_ns: u64,
}

/// Max-min fair shares of a capacity of 1 among demands (water filling): a demand
/// below its fair share gets all it asks, the rest split what is left.
pub(super) fn water_fill(demands: &[f64]) -> Vec<f64> {
    if demands.iter().sum::<f64>() <= 1.0 {
        return demands.to_vec();
    }
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|&a, &b| demands[a].total_cmp(&demands[b]).then(a.cmp(&b)));
    let mut given = vec![0.0; demands.len()];
    let mut left = 1.0;
    for (k, &i) in order.iter().enumerate() {
        given[i] = demands[i].min(left / (order.len() - k) as f64);
        left -= given[i];
    }
    given
}

impl Engine {
    /// Starts what the sharing model lets start now. Starting a kernel can bring the
    /// scheduling policy's decisions (another tenant's held kernel may start): a call
    /// made meanwhile is made again once the first is done, never nested in it.
    pub(super) fn start_kernel(&mut self) {
        if !self.compute.enter_start() {
            return;
        }
        loop {
            self.start_now();
            if !self.compute.go_round_again() {
                break;
            }
        }
    }

    fn start_now(&mut self) {
        if self.compute.held_launch.is_some() || self.device_lock.is_held() {
            return;
        }
        match self.compute.sharing {
            Sharing::Preemptive(slicing) if !self.needs.launch_gating => {
                if self.compute.running.is_empty() {
                    self.start_sliced(slicing);
                }
            }
            // Gdev's software scheduler takes whole kernels in turn on every device.
            Sharing::TimeSlice | Sharing::Preemptive(_) => {
                if let Some(running) = self.compute.running.first() {
                    // Gdev's current context launches on while its kernel runs, as
                    // long as its scheduler admits it (its launch limit); the others
                    // wait (`gdev_schedule_compute`, `common/gdev_sched.c`). A launch
                    // refused at the limit sleeps in the queue, and Gdev wakes the
                    // queue's head only when the context's count is back at zero
                    // (`gdev_select_next_compute`), so the context launches nothing
                    // more until then; the other contexts go first, in the time
                    // slicing's round robin. The refused launch stays in the engine's
                    // queue, not the scheduler's (which would make it current again
                    // at once: the others have not asked yet), so the engine notes the
                    // refusal itself (`gdev_at_limit`).
                    let t = running.tenant;
                    if self.needs.launch_gating
                        && self.compute.ready.contains(t)
                        && self.compute.gdev_at_limit != Some(t)
                    {
                        if self.manager.would_admit_launch(self.tenants[t].id) {
                            self.launch_next(t);
                        } else {
                            self.compute.gdev_at_limit = Some(t);
                        }
                    }
                    return;
                }
                // Nothing in flight: Gdev's count is zero.
                self.compute.gdev_at_limit = None;
                // The first tenant with queued kernels at or after the round-robin
                // position, wrapping around.
                if let Some(t) = self.compute.ready.next_from(self.compute.round_robin_next) {
                    self.launch_next(t);
                }
            }
            Sharing::Mps => {
                // Every tenant with a queued kernel and none running starts one.
                while let Some(t) = self.compute.ready.next_from(self.compute.round_robin_next) {
                    if self.compute.runs_kernel_of(t) {
                        // It comes back when its kernel ends.
                        self.compute.ready.remove(t);
                        continue;
                    }
                    self.launch_next(t);
                    if self.compute.held_launch.is_some() {
                        return;
                    }
                }
            }
        }
    }

    /// Takes tenant `t`'s next queued launch to the device (through the software
    /// scheduler's gate where launches are gated).
    pub(super) fn launch_next(&mut self, t: usize) {
        self.compute.round_robin_next = t + 1;
        if self.manager.schedules_kernels() && !self.admitted(t) {
            return;
        }
        let launch = self.tenants[t].channel.pop_front().expect("ready");
        if self.tenants[t].channel.is_empty() {
            self.compute.ready.remove(t);
        }
        if self.needs.launch_gating {
            let id = launch.id;
            self.compute.held_launch = Some((t, launch));
            let answer = self.manager.handle_launch(self.tenants[t].id, id);
            self.protocol(answer);
            return self.apply_actions();
        }
        self.run_kernel(t, launch);
    }

    /// A gated launch is through the scheduler: it runs now, or behind its context's
    /// running kernel, back to back; the context's next launch goes to the scheduler
    /// (`start_now`: admitted below the launch limit, else the context waits).
    /// Only time slicing gates launches ahead of a running kernel: under the other
    /// sharing models a gated launch runs as it comes, as it always has.
    pub(super) fn gated_launch(&mut self, t: usize, launch: Launch) {
        if self.compute.sharing.concurrent() {
            return self.run_kernel(t, launch);
        }
        if self.compute.running.is_empty() {
            self.run_kernel(t, launch);
        } else {
            self.compute.gated.push_back((t, launch));
        }
        self.start_kernel();
    }

    /// Asks the scheduling policy whether tenant `t`'s next kernel may start; if not, the
    /// tenant is held (out of the ready set) until an `Execution::Start` names it.
    fn admitted(&mut self, t: usize) -> bool {
        let tenant = &self.tenants[t];
        let launch = tenant.channel.front().expect("ready");
        let kernel = tenant.kernel_at(launch.site);
        let mut slots: Vec<usize> = kernel.accesses.iter().map(|a| a.slot).collect();
        slots.sort_unstable();
        slots.dedup();
        let buffers: Vec<BufferId> = slots
            .iter()
            .filter_map(|s| self.tenants[t].slots[*s])
            .collect();
        // An endless tenant's launches are one endless kernel's sweeps.
        let admitted = self.manager.handle_kernel_ready(
            self.tenants[t].id,
            &buffers,
            self.tenants[t].endless,
            self.now_ns,
        );
        if !admitted {
            self.compute.ready.remove(t);
            let tenant = &mut self.tenants[t];
            tenant.held_since.get_or_insert(self.now_ns);
        }
        self.apply_actions();
        admitted && self.tenants[t].state != State::Done && !self.tenants[t].channel.is_empty()
    }

    /// The scheduling policy lets tenant `t`'s held kernel start.
    pub(super) fn unhold(&mut self, t: usize) {
        let tenant = &mut self.tenants[t];
        let Some(since) = tenant.held_since.take() else {
            return;
        };
        self.recorder.tenant(t).record_wait(self.now_ns - since);
        if !tenant.channel.is_empty() {
            self.compute.ready.insert(t);
        }
        self.start_kernel();
    }

    /// Stops the kernel running at `at` after a preemption: its work is lost, and it
    /// goes back to the head of its tenant's channel to run again from its start.
    fn preempt_kernel(&mut self, at: usize) {
        let running = self.compute.running.swap_remove(at);
        self.kernel_writes_moved(&running.written, Write::Ends);
        let t = running.tenant;
        let tenant = &mut self.tenants[t];
        let record = self.recorder.tenant(t);
        record.preemptions += 1;
        record.wasted_ns += self.now_ns - running.started_ns;
        tenant.channel.push_front(Launch {
            id: running.launch,
            site: running.site,
        });
        self.compute.ready.insert(t);
        let id = tenant.id;
        self.manager.handle_kernel_preempted(id, self.now_ns);
        self.apply_actions();
        self.start_kernel();
    }

    /// Runs a kernel on the compute engine with its data where it is now.
    pub(super) fn run_kernel(&mut self, t: usize, launch: Launch) {
        let want_references = self.preset.features.reference_bits && self.needs.reference_bits;
        let cost = self.kernel_cost(t, &launch);
        let mut referenced = Vec::new();
        if want_references {
            for access in &self.tenants[t].kernel_at(launch.site).accesses {
                if let Some(b) =
                    self.tenants[t].slots[access.slot].and_then(|id| self.mmu.table.get(id))
                {
                    referenced.extend(timing::touched_host_chunks(&access.distribution, b));
                }
            }
        }
        self.kernel_writes_moved(&cost.written, Write::Starts);
        let traffic = cost.traffic;
        // Unified memory (the device serves page faults, as the policy needs): every
        // access to a managed buffer is served from VRAM once its faults are, or from
        // host memory where the MMU maps it remotely. The kernel first moves
        // its batches' evictions and migrations over the link (flows shared with every
        // other user of the link, one after the other), then takes what
        // `timing::paged_fixed_ns` gives: its all-in-VRAM work, overlapped with the
        // batches' service except for the share of it that waited for a fault, then the
        // remote accesses' time. Where kernels of several tenants run at once, or a
        // scheduler may stop one, it does so segment by segment.
        let (mut paged, mut flows_left, mut sliced) = (None, 0, None);
        if self.needs.page_faults {
            let kernel = Rc::clone(self.tenants[t].kernel_at(launch.site));
            let started = self.start_walk(t, &kernel, launch.id.0);
            let segments = if self.compute.segmented {
                started.steps.min(SEGMENTS) as u32
            } else {
                1
            };
            paged = Some(Box::new(PagedRun {
                migrations: Vec::new(),
                fixed_after_migrations_ns: None,
                fault_service_ns: 0,
                walk: Some(Box::new(started)),
                segments,
                segment: 0,
                started_segment_ns: self.now_ns,
                all_bytes: traffic.local_bytes + traffic.remote_bytes_vram_would_move(),
            }));
        } else {
            self.recorder
                .tenant(t)
                .add_traffic(traffic.local_bytes, traffic.remote_bytes());
            sliced = self.sliced_run(cost.fixed_ns, &traffic);
            let weight = timing::kernel_pending_bytes(&self.preset);
            let flows = if sliced.is_some() {
                // Its pieces start their own shares of its link bytes.
                [(Direction::ToDevice, 0.0), (Direction::ToHost, 0.0)]
            } else {
                [
                    (Direction::ToDevice, traffic.link_bytes_to_device()),
                    (Direction::ToHost, traffic.link_bytes_to_host()),
                ]
            };
            for (direction, bytes) in flows {
                if bytes > 0.0 {
                    let owner = FlowOwner::Kernel(launch.id);
                    let flow = (direction, bytes);
                    self.flows.start(owner, self.now_ns, flow, None, weight);
                    flows_left += 1;
                }
            }
        }
        // Built in its place in `running`: the struct is large, and building it aside
        // and moving it in was a measurable share of every launch.
        self.compute.running.push(RunningKernel {
            launch: launch.id,
            tenant: t,
            ideal_ns: cost.ideal_ns,
            started_ns: self.now_ns,
            accesses: cost.accesses,
            fixed_done: false,
            flows_left,
            written: cost.written,
            referenced: referenced.into_boxed_slice(),
            paged,
            share: None,
            preempt: false,
            site: launch.site,
        });
        if self.needs.page_faults {
            return self.start_segment(launch.id);
        }
        if let Some(run) = sliced {
            self.compute.slices.runs.push((launch.id, run));
            return self.start_piece(launch.id);
        }
        self.enter_fixed(launch.id, cost.fixed_ns);
        if flows_left > 0 {
            self.rearm_link();
        }
    }

    /// Runs the next segment of a unified-memory kernel: walks its page touches up to
    /// the segment's end, then moves its migrations and takes its share of the kernel's
    /// time.
    fn start_segment(&mut self, launch: LaunchId) {
        let at = self
            .compute
            .running
            .iter()
            .position(|r| r.launch == launch)
            .expect("the kernel runs");
        let (t, segment, segments) = {
            let r = &self.compute.running[at];
            let p = r.paged.as_ref().expect("a paging kernel");
            (r.tenant, u64::from(p.segment), u64::from(p.segments))
        };
        // The segment's even share of the kernel's all-in-VRAM time.
        let whole_ns = self.compute.running[at].ideal_ns;
        let ideal_ns = whole_ns * (segment + 1) / segments - whole_ns * segment / segments;
        // A segment that cannot end within the time limit stops the run before its walk,
        // which may be terabytes of touches for nothing.
        let earliest_end_ns = self.now_ns.saturating_add(ideal_ns);
        if earliest_end_ns > self.limits.max_sim_ns {
            self.stopped = Some((Limit::SimTime, earliest_end_ns));
            return;
        }
        let mut walk = self.compute.running[at]
            .paged
            .as_mut()
            .and_then(|p| p.walk.take())
            .expect("a paging kernel walks");
        let to_step = (walk.steps * (segment + 1)).div_ceil(segments);
        let paging = self.fault_in(t, &mut walk, to_step);
        // Its faults moved pages in and out of VRAM, its own and others'.
        self.record_usage_changes();
        // The segment's even share of the kernel's bytes.
        let part = |whole: f64| {
            whole * (segment + 1) as f64 / segments as f64
                - whole * segment as f64 / segments as f64
        };
        // The segment's share of the time the instrumentation's flag reads add.
        let check_ns = if self.manager.schedules_kernels() {
            let kernel = self.tenants[t].kernel_at(self.compute.running[at].site);
            let whole = preemption::exposed_ns(&self.preset, kernel.ops, kernel.outer_loop);
            part(whole).ceil() as u64
        } else {
            0
        };
        let paged = self.compute.running[at]
            .paged
            .as_mut()
            .expect("a paging kernel");
        paged.walk = Some(walk);
        let remote = paging.remote.remote_bytes();
        let local = part(paged.all_bytes) - paging.remote.remote_bytes_vram_would_move();
        self.recorder.tenant(t).add_traffic(local.max(0.0), remote);
        let remote_ns = timing::remote_ns(&self.preset, &paging.remote);
        let fixed_ns = timing::paged_fixed_ns(
            ideal_ns,
            paging.service_ns,
            paging.transfer_ns.0 + paging.transfer_ns.1,
            paging.stalled_share,
            remote_ns,
        )
        .saturating_add(check_ns);
        // Migrations as copy-engine flows: their time alone at the link's peak is what
        // they take at their transfer size's rate, so sharing stretches them in proportion.
        let link = &self.preset.link;
        paged.migrations = [
            (
                Direction::ToDevice,
                paging.transfer_ns.1 * link.h2d_bytes_per_s / 1e9,
            ),
            (
                Direction::ToHost,
                paging.transfer_ns.0 * link.d2h_bytes_per_s / 1e9,
            ),
        ]
        .into_iter()
        .filter(|(_, bytes)| *bytes > 0.0)
        .collect();
        paged.fault_service_ns = paging.service_ns;
        paged.started_segment_ns = self.now_ns;
        match paged.migrations.pop() {
            Some((direction, bytes)) => {
                paged.fixed_after_migrations_ns = Some(fixed_ns);
                self.start_migration(launch, direction, bytes);
                self.rearm_link();
            }
            None => {
                self.recorder.tenant(t).fault_stall_ns += paging.service_ns;
                self.enter_fixed(launch, fixed_ns);
            }
        }
        // The kernel reached an instrumented check: the policy sees its active memory.
        if self.manager.schedules_kernels() {
            self.manager
                .handle_kernel_segment(self.tenants[t].id, self.now_ns);
            self.apply_actions();
        }
    }

    /// A running kernel's fixed part (compute, VRAM, latency) of `fixed_ns` at the full
    /// device begins: it ends then, or, where kernels share the SMs, when its share of
    /// them has done that much.
    pub(super) fn enter_fixed(&mut self, launch: LaunchId, fixed_ns: u64) {
        if self.compute.sharing.concurrent() {
            let now_ns = self.now_ns;
            let running = self.compute.kernel_mut(launch).expect("the kernel runs");
            running.share = Some(FixedShare {
                left_ns: fixed_ns as f64,
                rate: 1.0,
                since_ns: now_ns,
            });
            return self.reshare();
        }
        let seq = self.next_seq();
        self.wakes
            .add_kernel(self.now_ns.saturating_add(fixed_ns), seq, launch);
    }

    /// A running kernel's fixed part is over: `Partial::Yes` while its flows still run.
    pub(super) fn fixed_done(&mut self, launch: LaunchId) -> Partial {
        let running = self.compute.kernel_mut(launch).expect("the kernel runs");
        running.fixed_done = true;
        let partial = if running.flows_left > 0 {
            Partial::Yes
        } else {
            Partial::No
        };
        if running.share.take().is_some() {
            self.reshare();
        }
        self.maybe_finish_kernel(launch);
        partial
    }

    /// Kernels in their fixed parts share the SMs by their demand and VRAM bandwidth
    /// max-min fairly. Each is slowed as the roofline its timing follows says
    /// (`max(C, L/B)`, Williams, Waterman and Patterson, CACM 2009, applied to the
    /// shares it gets): its arithmetic by its SM share over its demand, its VRAM time by
    /// its bandwidth share over its demand, and it takes the longer of the two, so a
    /// memory-bound kernel loses nothing to fewer SMs until its arithmetic catches up
    /// with its memory time. Called whenever a fixed part begins or ends (MPS only): the
    /// rates hold until then.
    fn reshare(&mut self) {
        let now = self.now_ns;
        let mut sm = Vec::new();
        let mut bandwidth = Vec::new();
        let mut compute = Vec::new();
        let instrumented = self.manager.schedules_kernels();
        for r in &mut self.compute.running {
            if let Some(share) = &mut r.share {
                share.left_ns -= (now - share.since_ns) as f64 * share.rate;
                share.left_ns = share.left_ns.max(0.0);
                share.since_ns = now;
                sm.push(self.tenants[r.tenant].sm_share);
                bandwidth.push(r.bandwidth_share(self.preset.vram_bytes_per_s));
                let kernel = self.tenants[r.tenant].kernel_at(r.site);
                let ops = kernel.ops.saturating_add(check_ops(kernel, instrumented));
                compute.push(r.compute_share(timing::compute_ns(&self.preset, ops)));
            }
        }
        let sm_given = water_fill(&sm);
        let bandwidth_given = water_fill(&bandwidth);
        let rate = |given: f64, asked: f64| if asked > 0.0 { given / asked } else { 1.0 };
        let mut wakes = Vec::new();
        let mut i = 0;
        for r in &mut self.compute.running {
            if let Some(share) = &mut r.share {
                // Alone its arithmetic takes `compute[i]` of its time and its VRAM
                // traffic `bandwidth[i]`; the rest (launch, latency) is not shared.
                let (c, m) = (compute[i], bandwidth[i]);
                let shared = (c / rate(sm_given[i], sm[i]).max(1e-9))
                    .max(m / rate(bandwidth_given[i], m).max(1e-9));
                share.rate = (1.0 / (1.0 - c.max(m) + shared)).clamp(1e-9, 1.0);
                wakes.push((
                    now.saturating_add((share.left_ns / share.rate).ceil() as u64),
                    r.launch,
                ));
                i += 1;
            }
        }
        for (at, launch) in wakes {
            let seq = self.next_seq();
            self.wakes.move_kernel(at, seq, launch);
        }
    }

    /// Puts one of a kernel's fault migrations on the link.
    fn start_migration(&mut self, launch: LaunchId, direction: Direction, bytes: f64) {
        let weight = timing::dma_pending_bytes(&self.preset);
        let owner = FlowOwner::Kernel(launch);
        self.flows
            .start(owner, self.now_ns, (direction, bytes), None, weight);
        self.compute
            .kernel_mut(launch)
            .expect("the kernel runs")
            .flows_left += 1;
    }

    /// A flow of a running kernel ended: the next of its migrations starts, or, after
    /// the last, its fixed time. `Partial::Yes` unless it was the last part the kernel
    /// (or its segment) waited for.
    pub(super) fn kernel_flow_done(&mut self, launch: LaunchId) -> Partial {
        let running = self
            .compute
            .kernel_mut(launch)
            .expect("a flow's kernel is running");
        running.flows_left -= 1;
        if running.flows_left > 0 {
            return Partial::Yes;
        }
        if let Some(paged) = running.paged.as_mut() {
            if let Some((direction, bytes)) = paged.migrations.pop() {
                self.start_migration(launch, direction, bytes);
                return Partial::Yes;
            }
            if let Some(fixed_ns) = paged.fixed_after_migrations_ns.take() {
                let (t, started_ns, service_ns) = (
                    running.tenant,
                    paged.started_segment_ns,
                    paged.fault_service_ns,
                );
                self.recorder.tenant(t).fault_stall_ns += self.now_ns - started_ns + service_ns;
                self.enter_fixed(launch, fixed_ns);
                return Partial::Yes;
            }
        }
        if !running.fixed_done {
            return Partial::Yes;
        }
        self.maybe_finish_kernel(launch);
        Partial::No
    }

    /// What `launch` by tenant `t` costs with the data where the page table says it is.
    /// Cached per launch site while the tenant's page-table epoch stays the same: a
    /// program relaunches the same kernels many times between placement changes, and
    /// some touch hundreds of buffers (heartwall).
    pub(super) fn kernel_cost(&mut self, t: usize, launch: &Launch) -> KernelCost {
        let epoch = self.mmu.table.epoch(self.tenants[t].id);
        let cache = &mut self.tenants[t].cost_cache;
        if let Some(Some(site)) = cache.get(launch.site)
            && site.epoch == epoch
        {
            return site.cost.clone();
        }
        let cached = cache.get_mut(launch.site).and_then(Option::take);
        // A reference count only on a miss: the cache answers most launches.
        let kernel = Rc::clone(self.tenants[t].kernel_at(launch.site));
        let kernel = &*kernel;
        let mut fractions = cached.map_or_else(Vec::new, |site| site.fractions);
        fractions.resize(kernel.accesses.len(), None);
        // The kernel's threads bound the remote reads it keeps in flight.
        let threads = kernel.outer_loop.threads;
        let mut traffic = Traffic {
            threads,
            ..Traffic::default()
        };
        let mut ideal = traffic;
        let mut written = Vec::new();
        for (access, known) in kernel.accesses.iter().zip(&mut fractions) {
            let id = self.tenants[t].slots[access.slot];
            // An access to a buffer the program has not allocated is a program bug that
            // the validator rejects; count it as local to stay total.
            let fraction = match id.and_then(|id| self.mmu.table.get(id)) {
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
        let checks = check_ops(kernel, self.manager.schedules_kernels());
        let ops = kernel.ops.saturating_add(checks);
        let phase_ops = |phase_ops: u64| match kernel.ops {
            0 => phase_ops,
            all => {
                let share = u128::from(checks) * u128::from(phase_ops) / u128::from(all);
                phase_ops.saturating_add(u64::try_from(share).unwrap_or(u64::MAX))
            }
        };
        // A kernel with barriers: each phase's own traffic, at the same local fractions.
        let fractions_now = &fractions;
        let phase_traffic = |local: bool| {
            let mut start = 0;
            kernel.phases.iter().map(move |phase| {
                let mut t = Traffic {
                    threads,
                    ..Traffic::default()
                };
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
                (phase_ops(phase.ops), t)
            })
        };
        let (fixed_ns, ideal_ns) = if kernel.phases.is_empty() {
            (
                timing::fixed_ns(&self.preset, ops, &traffic),
                timing::fixed_ns(&self.preset, ops, &ideal),
            )
        } else {
            (
                timing::phased_fixed_ns(&self.preset, phase_traffic(false)),
                timing::phased_fixed_ns(&self.preset, phase_traffic(true)),
            )
        };
        // A loop one thread runs alone takes its trips in a row, whatever the device.
        let floor_ns = serial_loop::floor_ns(&self.preset, kernel.outer_loop);
        let (fixed_ns, ideal_ns) = (fixed_ns.max(floor_ns), ideal_ns.max(floor_ns));
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

    /// The writes to `buffer`; `None` if it has not been written since its slot was
    /// last taken (it may have been freed and its slot reused).
    pub(super) fn write_state(&self, buffer: BufferId) -> Option<WriteState> {
        self.writes
            .get(buffer.slot())
            .copied()
            .filter(|w| w.buffer == Some(buffer))
    }

    /// A memcpy to the device starts writing `buffer`.
    pub(super) fn begin_write(&mut self, buffer: BufferId) {
        self.move_write_epoch(buffer, Write::Starts).writers += 1;
    }

    /// A memcpy to the device stops writing `buffer` (it ended or was dropped).
    pub(super) fn end_write(&mut self, buffer: BufferId) {
        let state = self.move_write_epoch(buffer, Write::Ends);
        if state.buffer == Some(buffer) {
            state.writers -= 1;
        }
    }

    /// A kernel writing `written` starts or ends. Only a relocation copy compares write
    /// epochs, over its life from its job's creation to its end, and a copy of a buffer
    /// that a running kernel writes is never created (`being_written`): so with no copy
    /// in progress the epochs need not move, and the loop over the kernel's buffers
    /// (hundreds for heartwall, a tenth of every kernel's cost) is skipped.
    fn kernel_writes_moved(&mut self, written: &[BufferId], write: Write) {
        if !self.copies.busy() {
            return;
        }
        for &id in written {
            self.move_write_epoch(id, write);
        }
    }

    /// Bumps `buffer`'s write epoch: a write that starts takes over the slot's state from
    /// a freed buffer; one that ends leaves another buffer's state alone.
    fn move_write_epoch(&mut self, buffer: BufferId, write: Write) -> &mut WriteState {
        let i = buffer.slot();
        if i >= self.writes.len() {
            self.writes.resize(i + 1, WriteState::default());
        }
        let state = &mut self.writes[i];
        match write {
            Write::Starts if state.buffer != Some(buffer) => {
                *state = WriteState {
                    buffer: Some(buffer),
                    ..WriteState::default()
                };
            }
            Write::Ends if state.buffer != Some(buffer) => return state,
            _ => {}
        }
        state.epoch += 1;
        state
    }

    /// Whether a memcpy or a running kernel writes `buffer` now.
    pub(super) fn being_written(&self, buffer: BufferId) -> bool {
        self.write_state(buffer).is_some_and(|w| w.writers > 0)
            || self
                .compute
                .running
                .iter()
                .chain(&self.compute.slices.parked)
                .any(|r| r.written.contains(&buffer))
    }

    /// Ends `launch` once its fixed part and its link flows are done.
    pub(super) fn maybe_finish_kernel(&mut self, launch: LaunchId) {
        let Some(at) = self.compute.running.iter().position(|r| r.launch == launch) else {
            return;
        };
        let running = &mut self.compute.running[at];
        if !running.fixed_done || running.flows_left > 0 {
            return;
        }
        // A kernel whose tenant ended stops at its segment's end: its buffers are gone.
        let gone = self.tenants[running.tenant].state == State::Done;
        if let Some(paged) = running
            .paged
            .as_mut()
            .filter(|p| p.segment + 1 < p.segments && !gone)
        {
            paged.segment += 1;
            running.fixed_done = false;
            if running.preempt {
                return self.preempt_kernel(at);
            }
            return self.start_segment(launch);
        }
        if self.compute.slices.is_sliced(launch) && self.piece_done(at) {
            return;
        }
        let running = &mut self.compute.running[at];
        // What the end needs is taken out and the kernel dropped where it lies: moving
        // the large struct out of `running` was a measurable share of every kernel.
        let stats = KernelStats {
            launch: Some(running.launch),
            accesses: running.accesses,
            ns: self.now_ns - running.started_ns,
            finished_ns: self.now_ns,
            ideal_ns: running.ideal_ns,
            referenced: std::mem::take(&mut running.referenced).into_vec(),
        };
        let (t, written, site) = (running.tenant, Rc::clone(&running.written), running.site);
        let last = self.compute.running.len() - 1;
        if at != last {
            self.compute.running.swap(at, last);
        }
        self.compute.running.truncate(last);
        self.kernel_writes_moved(&written, Write::Ends);
        self.manager
            .handle_kernel_finished(self.tenants[t].id, &stats);
        if self.needs.progress {
            self.tally_kernel(t, site);
        }
        let record = self.recorder.tenant(t);
        record.longest_kernel_ns = record.longest_kernel_ns.max(stats.ns);
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
        if !self.tenants[t].channel.is_empty() {
            self.compute.ready.insert(t);
        }
        self.check_drained(t);
        // The actions it brings are applied below.
        self.demand_ends(t);
        if let Some((next, launch)) = self.compute.gated.pop_front() {
            self.run_kernel(next, launch);
        }
        self.hand_on_device();
        self.start_kernel();
        self.apply_actions();
    }
}

/// The instructions PILOT's instrumentation adds to `kernel` (its preemption checks)
/// where a scheduler preempts kernels (`instrumented`), none elsewhere: its arithmetic is
/// the kernel's own plus these, both for its time alone and for its share of the SMs.
fn check_ops(kernel: &Kernel, instrumented: bool) -> u64 {
    if instrumented {
        preemption::check_ops(kernel.outer_loop)
    } else {
        0
    }
}
