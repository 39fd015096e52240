//! The copy engines and the link: memcpys and relocation copies get a copy engine,
//! pay its setup, then run as link flows next to the kernels' remote accesses.

use super::*;

impl Engine {
    /// Hands queued copies to idle copy engines.
    pub(super) fn start_copies(&mut self) {
        for engine in 0..self.copy_engines.len() {
            if self.copy_engines[engine].is_none() {
                let Some(mut job) = self.copy_queue.pop_front() else {
                    return;
                };
                job.setup_started_ns = self.now_ns;
                let setup_ns = job.setup_ns;
                self.copy_engines[engine] = Some(job);
                self.schedule(
                    self.now_ns.saturating_add(setup_ns),
                    Event::CopySetupDone(engine),
                );
            }
        }
    }

    pub(super) fn start_copy_transfer(&mut self, engine: usize) {
        let job = self.copy_engines[engine].as_mut().expect("engine busy");
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
            let id = self
                .link
                .start(self.now_ns, direction, bytes as f64, cap, weight);
            self.flow_owners.push((id, FlowOwner::CopyEngine(engine)));
            self.copy_engines[engine]
                .as_mut()
                .expect("engine busy")
                .flows_left += 1;
        }
        if self.copy_engines[engine]
            .as_ref()
            .expect("engine busy")
            .flows_left
            == 0
        {
            return self.finish_copy(engine);
        }
        self.rearm_link();
    }

    pub(super) fn finish_copy(&mut self, engine: usize) {
        let job = self.copy_engines[engine].take().expect("engine busy");
        self.start_copies();
        match job.kind {
            CopyKind::Memcpy {
                buffer,
                writes_device,
            } => {
                if writes_device {
                    self.end_write(buffer);
                }
                if self.device_lock == Some(job.tenant) {
                    self.release_device();
                }
                let tenant = &mut self.tenants[job.tenant];
                tenant.copies_in_flight -= 1;
                self.schedule_step(job.tenant, 0);
                self.check_drained(job.tenant);
            }
            // Withdrawn by the manager: the transfer ran out, its result is dropped.
            CopyKind::Cancelled => {}
            CopyKind::Relocation { copy, chunk, epoch } => {
                // No state: the buffer has not been written (or was freed meanwhile).
                if let Some(now) = self.write_state(chunk.buffer)
                    && (now.epoch != epoch || self.being_written(chunk.buffer))
                {
                    return self.lost_write(job.tenant, chunk);
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

    /// Keeps one wake-up at the link's next completion: an unchanged time keeps it, a
    /// new time replaces it.
    pub(super) fn rearm_link(&mut self) {
        let next = self.link.next_completion_ns();
        if next == self.link_wake.map(|w| w.0) {
            return;
        }
        self.link_wake = next.map(|t| (t, self.next_seq()));
    }

    /// The link's wake-up: hands the finished flows to their owners. `Partial::Yes`
    /// when none of them was the last part its kernel or copy waited for.
    pub(super) fn advance_link(&mut self) -> Partial {
        self.link.advance(self.now_ns);
        let mut partial = Partial::Yes;
        while let Some(id) = self.link.pop_finished() {
            let at = self
                .flow_owners
                .iter()
                .position(|(f, _)| *f == id)
                .expect("every flow has an owner");
            match self.flow_owners.remove(at).1 {
                FlowOwner::Kernel(launch) => {
                    if self.kernel_flow_done(launch) == Partial::No {
                        partial = Partial::No;
                    }
                }
                FlowOwner::CopyEngine(engine) => {
                    let job = self.copy_engines[engine]
                        .as_mut()
                        .expect("a flow's copy runs");
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
    /// Whether a copy runs on an engine or waits for one.
    pub(super) fn copies_in_progress(&self) -> bool {
        !self.copy_queue.is_empty() || self.copy_engines.iter().any(Option::is_some)
    }

    /// Takes the device for tenant `t`'s Gdev memcpy if it holds it already or nobody
    /// uses it; otherwise queues `t` for it and says no.
    pub(super) fn take_device(&mut self, t: usize) -> bool {
        if self.device_lock == Some(t) {
            return true;
        }
        if self.device_lock.is_none() && self.running.is_empty() && self.held_launch.is_none() {
            self.device_lock = Some(t);
            return true;
        }
        if !self.device_waiters.contains(&t) {
            self.device_waiters.push_back(t);
        }
        false
    }

    /// Ends a Gdev memcpy's hold on the device and hands it on.
    pub(super) fn release_device(&mut self) {
        self.device_lock = None;
        self.hand_on_device();
        self.start_kernel();
    }

    /// When the device is free, gives it to the first tenant whose copy waits for it (the
    /// one queue of Gdev's scheduler serves waiting copies before further kernels).
    pub(super) fn hand_on_device(&mut self) {
        if self.device_lock.is_some() || !self.running.is_empty() || self.held_launch.is_some() {
            return;
        }
        while let Some(t) = self.device_waiters.pop_front() {
            if self.tenants[t].state == State::WaitingDevice {
                self.device_lock = Some(t);
                return self.schedule_step(t, 0);
            }
        }
    }
}
