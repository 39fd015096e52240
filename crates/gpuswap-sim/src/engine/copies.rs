//! The copy engines and the link: memcpys and relocation copies get a copy engine,
//! pay its setup, then run as link flows next to the kernels' remote accesses.

use super::*;

impl Engine {
    /// Hands queued copies to idle copy engines.
    pub(super) fn start_copies(&mut self) {
        while let Some((engine, setup_ns)) = self.copies.start_next(self.now_ns) {
            self.schedule(
                self.now_ns.saturating_add(setup_ns),
                Event::CopySetupDone(engine),
            );
        }
    }

    pub(super) fn start_copy_transfer(&mut self, engine: usize) {
        let job = self.copies.job_mut(engine);
        job.transfer_started_ns = self.now_ns;
        let (link_bytes, job_cap) = (job.link_bytes, job.cap_bytes_per_s);
        for direction in [Direction::ToDevice, Direction::ToHost] {
            let bytes = link_bytes[direction as usize];
            if bytes == 0 {
                continue;
            }
            let peak = match direction {
                Direction::ToDevice => self.preset.link.h2d_bytes_per_s,
                Direction::ToHost => self.preset.link.d2h_bytes_per_s,
            };
            let curve = self
                .preset
                .link
                .size_curve_k_per_kib
                .map(|k| size_curve_bytes_per_s(peak, k, bytes));
            let cap = match (curve, job_cap) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let weight = timing::dma_pending_bytes(&self.preset);
            let owner = FlowOwner::CopyEngine(engine);
            let flow = (direction, bytes as f64);
            self.flows.start(owner, self.now_ns, flow, cap, weight);
            self.copies.job_mut(engine).flows_left += 1;
        }
        if self.copies.job_mut(engine).flows_left == 0 {
            return self.finish_copy(engine);
        }
        self.rearm_link();
    }

    pub(super) fn finish_copy(&mut self, engine: usize) {
        let job = self.copies.finish(engine);
        self.start_copies();
        match job.kind {
            CopyKind::Memcpy {
                buffer,
                writes_device,
            } => {
                if writes_device {
                    self.end_write(buffer);
                }
                if self.device_lock.held_by(job.tenant) {
                    self.release_device();
                }
                let tenant = &mut self.tenants[job.tenant];
                tenant.copies_in_flight -= 1;
                self.schedule_step(job.tenant, 0);
                self.check_drained(job.tenant);
                if self.demand_ends(job.tenant) {
                    self.apply_actions();
                }
            }
            // Withdrawn by the manager: the transfer ran out, its result is dropped.
            CopyKind::Cancelled => {}
            CopyKind::Relocation {
                copy,
                chunk,
                epoch,
                part,
            } => {
                // No state: the buffer has not been written (or was freed meanwhile).
                if let Some(now) = self.write_state(chunk.buffer)
                    && (now.epoch != epoch || self.being_written(chunk.buffer))
                {
                    return self.lost_write(job.tenant, chunk);
                }
                if let Some(part) = part {
                    return self.finish_bulk_part(part);
                }
                if self.chaos.as_mut().is_some_and(|c| c.copy_fails()) {
                    let answer = self.manager.handle_copy_failed(copy);
                    self.protocol(answer);
                    return self.apply_actions();
                }
                if let Some(requester) = self.evicting_for
                    && let Some(pending) = &mut self.tenants[requester].pending_alloc
                {
                    let e = pending.eviction.get_or_insert_default();
                    e.dma_setup_ns += job.transfer_started_ns - job.setup_started_ns;
                    e.dma_ns += self.now_ns - job.transfer_started_ns;
                }
                let answer = self.manager.handle_copy_done(copy);
                self.protocol(answer);
                self.apply_actions();
            }
        }
    }

    /// A part of the outstanding bulk move is over (or failed, by chaos): the manager
    /// hears once the last part is.
    fn finish_bulk_part(&mut self, part: u32) {
        let failed = self.chaos.as_mut().is_some_and(|c| c.copy_fails());
        let bulk = self
            .copies
            .bulk
            .as_mut()
            .expect("a part belongs to a bulk move");
        if failed {
            bulk.failed.push(part);
        }
        bulk.parts_left -= 1;
        if bulk.parts_left > 0 {
            return;
        }
        let bulk = self.copies.bulk.take().expect("checked");
        let answer = self
            .manager
            .handle_batch_done(bulk.copy, &bulk.failed, self.now_ns);
        self.protocol(answer);
        self.apply_actions();
    }

    /// Keeps one wake-up at the link's next completion: an unchanged time keeps it, a
    /// new time replaces it.
    pub(super) fn rearm_link(&mut self) {
        let next = self.flows.next_completion_ns();
        if next == self.wakes.link_ns() {
            return;
        }
        let wake = next.map(|t| (t, self.next_seq()));
        self.wakes.set_link(wake);
    }

    /// The link's wake-up: hands the finished flows to their owners. `Partial::Yes`
    /// when none of them was the last part its kernel or copy waited for.
    pub(super) fn advance_link(&mut self) -> Partial {
        self.flows.advance(self.now_ns);
        let mut partial = Partial::Yes;
        while let Some(owner) = self.flows.pop_finished() {
            match owner {
                FlowOwner::Kernel(launch) => {
                    if self.kernel_flow_done(launch) == Partial::No {
                        partial = Partial::No;
                    }
                }
                FlowOwner::CopyEngine(engine) => {
                    let job = self.copies.job_mut(engine);
                    job.flows_left -= 1;
                    if job.flows_left == 0 {
                        partial = Partial::No;
                        self.finish_copy(engine);
                    }
                }
            }
        }
        self.rearm_link();
        partial
    }
}

/// Link bytes of a copy that moves `bytes` one way.
pub(super) fn one_way(direction: Direction, bytes: u64) -> [u64; 2] {
    let mut link_bytes = [0; 2];
    link_bytes[direction as usize] = bytes;
    link_bytes
}

/// Link bytes of a memcpy of `bytes` between host memory and a buffer of which
/// `host_fraction` lives in host memory. The runtime does not know a buffer moved, so the
/// copy engine still moves every byte through the GPU: the host side of the copy crosses
/// the link as always, and the buffer's host-resident part crosses it too, the other way
/// (an upload's evicted part is written back to host memory, a download's is read from
/// it first). GPUswap's copies into evicted chunks thus cost link time in both
/// directions (gpuswap.md: remote mapping; issue 12, item 1).
pub(super) fn memcpy_link_bytes(
    direction: CopyDirection,
    bytes: u64,
    host_fraction: f64,
) -> [u64; 2] {
    let host_part = (bytes as f64 * host_fraction).round() as u64;
    match direction {
        CopyDirection::HostToDevice => [bytes, host_part],
        CopyDirection::DeviceToHost => [host_part, bytes],
    }
}

impl Engine {
    /// Takes the device for tenant `t`'s Gdev memcpy if it holds it already or nobody
    /// uses it; otherwise queues `t` for it and says no.
    pub(super) fn take_device(&mut self, t: usize) -> bool {
        if self.device_lock.held_by(t) {
            return true;
        }
        if !self.device_lock.is_held() && self.compute.idle() {
            self.device_lock.take(t);
            return true;
        }
        self.device_lock.wait(t);
        false
    }

    /// Ends a Gdev memcpy's hold on the device and hands it on.
    pub(super) fn release_device(&mut self) {
        self.device_lock.release();
        self.hand_on_device();
        self.start_kernel();
    }

    /// When the device is free, gives it to the first tenant whose copy waits for it (the
    /// one queue of Gdev's scheduler serves waiting copies before further kernels).
    pub(super) fn hand_on_device(&mut self) {
        if self.device_lock.is_held() || !self.compute.idle() {
            return;
        }
        while let Some(t) = self.device_lock.next_waiter() {
            if self.tenants[t].state == State::WaitingDevice {
                self.device_lock.take(t);
                return self.schedule_step(t, 0);
            }
        }
    }
}
