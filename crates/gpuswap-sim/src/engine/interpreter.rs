//! The tenant interpreter: runs a tenant's program until it blocks or waits for time.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::config::IdleBetween;
use super::copies::memcpy_link_bytes;
use super::*;

/// Mixed into the run's seed for the idle times' generator ("IDLEGAPS"), so that they
/// draw apart from the other seeded choices of the run.
const IDLE_SEED_TAG: u64 = 0x4944_4c45_4741_5053;

/// A tenant's idle times between repeats, drawn in order.
pub(super) struct IdleGaps {
    /// The fixed time, or the mean of the drawn ones.
    ns: u64,
    /// The generator of exponential times (`IdleBetween::Exponential`); none for fixed
    /// times.
    rng: Option<ChaCha8Rng>,
}

impl IdleGaps {
    /// The idle times `between` asks for; `None` when the tenant does not idle.
    pub(super) fn new(between: IdleBetween) -> Option<Self> {
        match between {
            IdleBetween::None => None,
            IdleBetween::Fixed { ns } => Some(Self { ns, rng: None }),
            IdleBetween::Exponential {
                mean_ns,
                seed,
                stream,
            } => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ IDLE_SEED_TAG);
                rng.set_stream(stream);
                Some(Self {
                    ns: mean_ns,
                    rng: Some(rng),
                })
            }
        }
    }

    /// The next idle time.
    fn next_ns(&mut self) -> u64 {
        match &mut self.rng {
            None => self.ns,
            // Inverse transform sampling: -mean x ln(1 - u) for u uniform in [0, 1).
            Some(rng) => {
                let u: f64 = rng.random();
                (-(1.0 - u).ln() * self.ns as f64).round() as u64
            }
        }
    }
}

impl Engine {
    /// Runs the tenant's program until it blocks or waits for time to pass.
    pub(super) fn step(&mut self, t: usize) {
        // The manager admits a tenant (and its contract) when it starts.
        if !std::mem::replace(&mut self.tenants[t].admitted, true) {
            let tenant = &self.tenants[t];
            if let Err(e) = self.manager.handle_tenant_start(tenant.id, tenant.contract) {
                return self.finish_tenant(t, Some(format!("not admitted: {e}")));
            }
        }
        loop {
            let tenant = &mut self.tenants[t];
            // Matched in place: cloning the instruction cost a kernel's reference count
            // on every launch.
            let Some(instr) = tenant.instrs.get(tenant.pc) else {
                // Process exit waits for the GPU work the tenant queued.
                if tenant.in_flight > 0 {
                    tenant.state = State::WaitingChannel;
                    return;
                }
                return self.finish_tenant(t, None);
            };
            match *instr {
                Instr::Alloc(slot) => return self.step_alloc(t, slot),
                Instr::Free(slot) => return self.step_free(t, slot),
                Instr::Copy {
                    slot,
                    direction,
                    bytes,
                } => return self.step_copy(t, slot, direction, bytes),
                Instr::Launch(_) => return self.step_launch(t),
                Instr::Sync => {
                    if tenant.in_flight > 0 {
                        tenant.state = State::WaitingChannel;
                        return;
                    }
                    tenant.pc += 1;
                    if self.forward_ns > 0 {
                        return self.schedule_step(t, self.forward_ns);
                    }
                }
                Instr::Cpu(ns) => {
                    tenant.pc += 1;
                    return self.schedule_step(t, ns);
                }
                Instr::LoopStart { times, end } => {
                    if times == 0 {
                        tenant.pc = end + 1;
                    } else {
                        tenant.loops.push(times);
                        tenant.pc += 1;
                    }
                }
                Instr::LoopEnd { start } => {
                    if tenant.idle.is_some()
                        && tenant.loops.last().is_some_and(|left| *left > 1)
                        && start
                            .checked_sub(1)
                            .is_some_and(|i| matches!(tenant.instrs[i], Instr::PhaseStart))
                    {
                        return self.idle_between_repeats(t, start);
                    }
                    let left = tenant.loops.last_mut().expect("loop started");
                    *left -= 1;
                    if *left == 0 {
                        tenant.loops.pop();
                        tenant.pc += 1;
                    } else {
                        tenant.pc = start + 1;
                    }
                }
                Instr::PhaseStart => {
                    self.recorder.tenant(t).phase_start_ns = Some(self.now_ns);
                    tenant.pc += 1;
                }
                Instr::PhaseEnd => {
                    self.recorder.tenant(t).phase_end_ns = Some(self.now_ns);
                    tenant.pc += 1;
                }
            }
        }
    }

    /// The end of a repeat of the measured phase (the loop that opens it, as every app
    /// writes it) that more repeats follow, for a tenant that idles between them: it
    /// waits for its GPU work (a cell ends when its results are back), tells the manager
    /// it has none, then steps again after its idle time.
    fn idle_between_repeats(&mut self, t: usize, start: usize) {
        let tenant = &mut self.tenants[t];
        if tenant.in_flight > 0 {
            tenant.state = State::WaitingChannel;
            return;
        }
        *tenant.loops.last_mut().expect("loop started") -= 1;
        tenant.pc = start + 1;
        let idle_ns = tenant.idle.as_mut().expect("the tenant idles").next_ns();
        if self.demand_ends(t) {
            self.apply_actions();
        }
        self.schedule_step(t, idle_ns)
    }

    /// An allocation call: asks the manager for the buffer of slot `slot`; the tenant
    /// waits for its answer.
    fn step_alloc(&mut self, t: usize, slot: usize) {
        // An allocation is GPU work to come: programs fill what they allocate on the
        // GPU (PyTorch's `randn`, `zeros`), fills the app models leave out.
        if self.demand_starts(t) {
            return;
        }
        let tenant = &mut self.tenants[t];
        tenant.pc += 1;
        tenant.state = State::WaitingAlloc;
        let request = RequestId(self.next_request);
        self.next_request += 1;
        tenant.pending_alloc = Some(PendingAlloc {
            request,
            slot,
            asked_ns: self.now_ns,
            eviction: None,
        });
        let spec = &tenant.buffers[slot];
        self.manager.handle_alloc(AllocRequest {
            request,
            tenant: tenant.id,
            bytes: spec.bytes,
            kind: spec.kind,
            priority: tenant.priorities.get(&spec.label).copied(),
            chunk_priorities: tenant
                .chunk_priorities
                .get(&spec.label)
                .cloned()
                .unwrap_or_default(),
        });
        if self.crash_due(t, Trigger::Alloc) {
            self.schedule(self.now_ns, Event::Crash(t));
        }
        self.apply_actions()
    }

    /// A free call: waits for the tenant's kernels (cudaFree synchronizes), then frees
    /// the buffer of slot `slot`.
    fn step_free(&mut self, t: usize, slot: usize) {
        let tenant = &mut self.tenants[t];
        if tenant.in_flight > 0 {
            tenant.state = State::WaitingChannel;
            return;
        }
        tenant.pc += 1;
        let label = &tenant.buffers[slot].label;
        let Some(buffer) = tenant.slots[slot].take() else {
            let message = format!("free of buffer {label:?}, which is not allocated");
            return self.finish_tenant(t, Some(message));
        };
        if let Err(e) = self.manager.handle_free(tenant.id, buffer) {
            let message = format!("free of buffer {label:?}: {e}");
            return self.finish_tenant(t, Some(message));
        }
        self.record_usage_changes();
        self.apply_actions();
        self.schedule_step(t, self.preset.driver_call_ns)
    }

    /// A memcpy of `bytes` to or from the buffer of slot `slot`: waits for the tenant's
    /// kernels, then queues the copy for a copy engine.
    fn step_copy(&mut self, t: usize, slot: usize, direction: CopyDirection, bytes: u64) {
        if self.demand_starts(t) {
            return;
        }
        let tenant = &mut self.tenants[t];
        // Stream order: behind the tenant's kernels; and nothing of a
        // suspended tenant reaches the GPU.
        if tenant.in_flight > 0 || tenant.suspended {
            tenant.state = State::WaitingChannel;
            return;
        }
        let Some(buffer) = tenant.slots[slot] else {
            let label = &tenant.buffers[slot].label;
            let message = format!("copy to buffer {label:?}, which is not allocated");
            return self.finish_tenant(t, Some(message));
        };
        // Gdev's runtime takes the device for the copy, as for a kernel.
        if self.runtime.copies_take_device() && !self.take_device(t) {
            self.tenants[t].state = State::WaitingDevice;
            return;
        }
        let b = self
            .mmu
            .table
            .get(buffer)
            .expect("granted buffers are mapped");
        let host_fraction = 1.0 - b.vram_bytes as f64 / b.bytes as f64;
        let link_bytes = memcpy_link_bytes(direction, bytes, host_fraction);
        let (setup_ns, cap_bytes_per_s) =
            self.runtime
                .memcpy_setup(&self.preset, direction, bytes, b.bytes);
        let tenant = &mut self.tenants[t];
        tenant.pc += 1;
        tenant.state = State::WaitingCopy;
        tenant.copies_in_flight += 1;
        let writes_device = direction == CopyDirection::HostToDevice;
        if writes_device {
            self.begin_write(buffer);
        }
        let kind = CopyKind::Memcpy {
            buffer,
            writes_device,
        };
        let job = CopyJob::new(t, kind, link_bytes, setup_ns, cap_bytes_per_s);
        self.copies.push(job);
        self.start_copies()
    }

    /// A kernel launch: into the tenant's channel (or held while it is suspended), unless
    /// its launch queue is full.
    fn step_launch(&mut self, t: usize) {
        if self.demand_starts(t) {
            return;
        }
        let tenant = &mut self.tenants[t];
        if tenant.in_flight >= self.preset.launch_queue_depth {
            tenant.state = State::WaitingQueueSpace;
            return;
        }
        tenant.pc += 1;
        let launch = Launch {
            id: LaunchId(self.next_launch),
            site: tenant.pc - 1,
        };
        self.next_launch += 1;
        if tenant.suspended {
            tenant.held.push_back(launch);
        } else {
            tenant.channel.push_back(launch);
            self.compute.ready.insert(t);
        }
        tenant.in_flight += 1;
        self.start_kernel();
        self.defer_step(t)
    }

    /// Tenant `t` is about to give the GPU work: under turns the manager hears first
    /// that it is busy, so that a tenant it parks has its work held. True when that
    /// ended the tenant.
    #[inline]
    fn demand_starts(&mut self, t: usize) -> bool {
        if !self.needs.gpu_demand || self.tenants[t].busy_said {
            return false;
        }
        self.tell_busy(t)
    }

    /// [`Engine::demand_starts`]'s telling, out of the hot path.
    #[cold]
    fn tell_busy(&mut self, t: usize) -> bool {
        self.tenants[t].busy_said = true;
        self.manager
            .handle_gpu_busy(self.tenants[t].id, self.now_ns);
        self.apply_actions();
        self.tenants[t].state == State::Done
    }

    /// Under turns, tells the manager when tenant `t` has no GPU work left: no kernel
    /// queued, held or running and no memcpy. True when it told (actions may follow).
    #[inline]
    pub(super) fn demand_ends(&mut self, t: usize) -> bool {
        self.needs.gpu_demand && self.tell_idle(t)
    }

    /// [`Engine::demand_ends`]'s check and telling, out of the hot path.
    #[cold]
    fn tell_idle(&mut self, t: usize) -> bool {
        let tenant = &mut self.tenants[t];
        if !tenant.busy_said || tenant.in_flight > 0 || tenant.copies_in_flight > 0 {
            return false;
        }
        tenant.busy_said = false;
        self.manager.handle_gpu_idle(tenant.id, self.now_ns);
        true
    }
}
