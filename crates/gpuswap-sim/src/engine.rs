//! The discrete-event engine: runs tenants' programs on the simulated device around the
//! memory manager.
//!
//! Time is integer nanoseconds. Events sit in a binary heap ordered by (time, sequence
//! number), so ties resolve in scheduling order and a scenario always runs the same way.
//! The engine owns the device state (compute engine, copy engines, link) and the
//! [`Manager`]; it feeds the manager events and carries out its actions.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::rc::Rc;

use gpuswap_core::{
    Action, AllocRequest, BufferId, Manager, ManagerConfig, Mode, RequestId, TenantId,
};
use thiserror::Error;

use crate::link::{Direction, FlowId, Link, size_curve_bytes_per_s};
use crate::preset::Preset;
use crate::program::{BufferSpec, CopyDirection, Kernel, Program};
use crate::runtime::{Instr, flatten, with_runtime};
use crate::timing::{self, Traffic};

/// One tenant of a simulation.
#[derive(Clone, Debug)]
pub struct TenantSpec {
    /// Name in reports.
    pub name: String,
    /// The app it runs (for reports).
    pub app: String,
    /// What it does (the app's program, without the runtime's system buffers).
    pub program: Program,
    /// When it starts.
    pub start_ns: u64,
}

/// Everything a simulation needs.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The device.
    pub preset: Preset,
    /// VRAM available to tenants.
    pub tenant_vram_bytes: u64,
    /// Chunk size of the manager.
    pub chunk_bytes: u64,
    /// Manager mode.
    pub mode: Mode,
    /// The tenants.
    pub tenants: Vec<TenantSpec>,
    /// Check the manager's accounting after every event (tests; costs time).
    pub check_invariants: bool,
}

/// What happened to one tenant.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantOutcome {
    /// Name.
    pub name: String,
    /// App.
    pub app: String,
    /// When it started.
    pub start_ns: u64,
    /// When it ended (finished or failed).
    pub end_ns: u64,
    /// The measured phase, when the program reached both markers.
    pub phase_ns: Option<(u64, u64)>,
    /// VRAM held over time: (time, bytes) at every change.
    pub vram_timeline: Vec<(u64, u64)>,
    /// Highest VRAM held.
    pub vram_peak_bytes: u64,
    /// Kernel bytes served from VRAM.
    pub local_bytes: f64,
    /// Kernel bytes served from host memory.
    pub remote_bytes: f64,
    /// Latency of each allocation call.
    pub alloc_latencies_ns: Vec<u64>,
    /// Why the tenant stopped early.
    pub error: Option<String>,
}

impl TenantOutcome {
    /// Time from start to end.
    pub fn total_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// VRAM held on average over the tenant's life.
    pub fn mean_vram_bytes(&self) -> f64 {
        let total = self.total_ns();
        if total == 0 {
            return self.vram_peak_bytes as f64;
        }
        let mut area = 0.0;
        for (i, (t, bytes)) in self.vram_timeline.iter().enumerate() {
            let next = self.vram_timeline.get(i + 1).map_or(self.end_ns, |n| n.0);
            area += (next.min(self.end_ns) - t.min(&self.end_ns)) as f64 * *bytes as f64;
        }
        area / total as f64
    }
}

/// What happened in a simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// One per tenant, in scenario order.
    pub tenants: Vec<TenantOutcome>,
    /// When the last tenant ended.
    pub makespan_ns: u64,
    /// Events processed.
    pub events: u64,
}

/// A simulation that broke an invariant (a bug, never bad input).
#[derive(Clone, Debug, Error, PartialEq)]
#[error("invariant broken at {time_ns} ns: {message}")]
pub struct InvariantError {
    /// When.
    pub time_ns: u64,
    /// What.
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Continue the tenant's program.
    Step(usize),
    /// The running kernel's fixed part (compute, VRAM, latency) is over.
    KernelFixedDone,
    /// A link flow may have finished; stale when the generation moved on.
    LinkWake(u64),
    /// A copy engine finished setting up its transfer.
    CopySetupDone(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    NotStarted,
    /// A `Step` event is scheduled.
    Scheduled,
    /// Waits until its channel is empty (sync, or a copy behind kernels).
    WaitingChannel,
    WaitingCopy,
    WaitingAlloc,
    Done,
}

struct Tenant {
    id: TenantId,
    name: String,
    app: String,
    buffers: Vec<BufferSpec>,
    instrs: Vec<Instr>,
    pc: usize,
    loops: Vec<u32>,
    slots: Vec<Option<BufferId>>,
    channel: VecDeque<Rc<Kernel>>,
    /// Kernels queued or running.
    in_flight: usize,
    state: State,
    pending_alloc: Option<(RequestId, usize, u64)>,
    start_ns: u64,
    end_ns: u64,
    phase_start_ns: Option<u64>,
    phase_end_ns: Option<u64>,
    vram_timeline: Vec<(u64, u64)>,
    local_bytes: f64,
    remote_bytes: f64,
    alloc_latencies_ns: Vec<u64>,
    error: Option<String>,
}

struct RunningKernel {
    tenant: usize,
    fixed_done: bool,
    flows_left: u32,
}

struct CopyJob {
    tenant: usize,
    direction: Direction,
    link_bytes: u64,
}

#[derive(Clone, Copy)]
enum FlowOwner {
    Kernel,
    CopyEngine(usize),
}

/// The simulation.
pub struct Engine {
    preset: Preset,
    manager: Manager,
    tenants: Vec<Tenant>,
    queue: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    now_ns: u64,
    events: u64,
    check_invariants: bool,
    next_request: u64,
    link: Link,
    link_generation: u64,
    flow_owners: BTreeMap<FlowId, FlowOwner>,
    running: Option<RunningKernel>,
    round_robin_next: usize,
    copy_engines: Vec<Option<CopyJob>>,
    copy_queue: VecDeque<CopyJob>,
}

impl Engine {
    /// Builds the simulation; nothing runs until [`Engine::run`].
    pub fn new(config: SimConfig) -> Self {
        let manager = Manager::new(ManagerConfig {
            vram_bytes: config.tenant_vram_bytes,
            chunk_bytes: config.chunk_bytes,
            mode: config.mode,
        });
        let preset = config.preset;
        let tenants = config
            .tenants
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let program = with_runtime(spec.program, &preset);
                Tenant {
                    id: TenantId(i as u32),
                    name: spec.name,
                    app: spec.app,
                    slots: vec![None; program.buffers.len()],
                    instrs: flatten(&program.ops),
                    buffers: program.buffers,
                    pc: 0,
                    loops: Vec::new(),
                    channel: VecDeque::new(),
                    in_flight: 0,
                    state: State::NotStarted,
                    pending_alloc: None,
                    start_ns: spec.start_ns,
                    end_ns: spec.start_ns,
                    phase_start_ns: None,
                    phase_end_ns: None,
                    vram_timeline: vec![(spec.start_ns, 0)],
                    local_bytes: 0.0,
                    remote_bytes: 0.0,
                    alloc_latencies_ns: Vec::new(),
                    error: None,
                }
            })
            .collect();
        let link = Link::new(preset.link.h2d_bytes_per_s, preset.link.d2h_bytes_per_s);
        let copy_engines = (0..preset.copy_engines).map(|_| None).collect();
        Self {
            preset,
            manager,
            tenants,
            queue: BinaryHeap::new(),
            seq: 0,
            now_ns: 0,
            events: 0,
            check_invariants: config.check_invariants,
            next_request: 0,
            link,
            link_generation: 0,
            flow_owners: BTreeMap::new(),
            running: None,
            round_robin_next: 0,
            copy_engines,
            copy_queue: VecDeque::new(),
        }
    }

    /// Runs every tenant to its end and reports what happened.
    pub fn run(mut self) -> Result<Outcome, InvariantError> {
        for t in 0..self.tenants.len() {
            let start = self.tenants[t].start_ns;
            self.tenants[t].state = State::Scheduled;
            self.schedule(start, Event::Step(t));
        }
        while let Some(Reverse((time_ns, _, event))) = self.queue.pop() {
            if time_ns < self.now_ns {
                return Err(self.broken(format!("event at {time_ns} ns after {} ns", self.now_ns)));
            }
            self.now_ns = time_ns;
            self.events += 1;
            match event {
                Event::Step(t) => self.step(t),
                Event::KernelFixedDone => {
                    let running = self.running.as_mut().expect("a kernel is running");
                    running.fixed_done = true;
                    self.maybe_finish_kernel();
                }
                Event::LinkWake(generation) if generation == self.link_generation => {
                    self.advance_link();
                }
                Event::LinkWake(_) => {}
                Event::CopySetupDone(engine) => self.start_copy_transfer(engine),
            }
            if self.check_invariants {
                self.manager
                    .check_invariants()
                    .map_err(|m| self.broken(m))?;
            }
        }
        if let Some(t) = self.tenants.iter().find(|t| t.state != State::Done) {
            return Err(self.broken(format!(
                "{} never finished (stuck in {:?})",
                t.name, t.state
            )));
        }
        let makespan_ns = self.tenants.iter().map(|t| t.end_ns).max().unwrap_or(0);
        let manager = &self.manager;
        let tenants = self
            .tenants
            .into_iter()
            .map(|t| TenantOutcome {
                vram_peak_bytes: manager.usage(t.id).vram_peak_bytes,
                name: t.name,
                app: t.app,
                start_ns: t.start_ns,
                end_ns: t.end_ns,
                phase_ns: t.phase_start_ns.zip(t.phase_end_ns),
                vram_timeline: t.vram_timeline,
                local_bytes: t.local_bytes,
                remote_bytes: t.remote_bytes,
                alloc_latencies_ns: t.alloc_latencies_ns,
                error: t.error,
            })
            .collect();
        Ok(Outcome {
            tenants,
            makespan_ns,
            events: self.events,
        })
    }

    fn broken(&self, message: String) -> InvariantError {
        InvariantError {
            time_ns: self.now_ns,
            message,
        }
    }

    fn schedule(&mut self, time_ns: u64, event: Event) {
        self.queue.push(Reverse((time_ns, self.seq, event)));
        self.seq += 1;
    }

    fn schedule_step(&mut self, t: usize, delay_ns: u64) {
        self.tenants[t].state = State::Scheduled;
        self.schedule(self.now_ns + delay_ns, Event::Step(t));
    }

    /// Runs the tenant's program until it blocks or waits for time to pass.
    fn step(&mut self, t: usize) {
        loop {
            let tenant = &mut self.tenants[t];
            let Some(instr) = tenant.instrs.get(tenant.pc).cloned() else {
                // Process exit waits for the GPU work the tenant queued.
                if tenant.in_flight > 0 {
                    tenant.state = State::WaitingChannel;
                    return;
                }
                return self.finish_tenant(t, None);
            };
            match instr {
                Instr::Alloc(slot) => {
                    tenant.pc += 1;
                    tenant.state = State::WaitingAlloc;
                    let request = RequestId(self.next_request);
                    self.next_request += 1;
                    tenant.pending_alloc = Some((request, slot, self.now_ns));
                    let spec = &tenant.buffers[slot];
                    self.manager.handle_alloc(AllocRequest {
                        request,
                        tenant: tenant.id,
                        bytes: spec.bytes,
                        kind: spec.kind,
                    });
                    return self.apply_actions();
                }
                Instr::Free(slot) => {
                    // cudaFree synchronizes with the device.
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
                    self.record_vram(t);
                    return self.schedule_step(t, self.preset.driver_call_ns);
                }
                Instr::Copy {
                    slot,
                    direction,
                    bytes,
                } => {
                    if tenant.in_flight > 0 {
                        tenant.state = State::WaitingChannel;
                        return;
                    }
                    tenant.pc += 1;
                    let Some(buffer) = tenant.slots[slot] else {
                        let label = &tenant.buffers[slot].label;
                        let message = format!("copy to buffer {label:?}, which is not allocated");
                        return self.finish_tenant(t, Some(message));
                    };
                    // Only the part of the buffer in VRAM crosses the link; a copy into
                    // host-resident chunks is a host memcpy, which is not modelled.
                    let buffer = self.manager.buffer(buffer).expect("live buffer");
                    let vram_fraction = buffer.vram_bytes() as f64 / buffer.bytes as f64;
                    let link_bytes = (bytes as f64 * vram_fraction).round() as u64;
                    tenant.state = State::WaitingCopy;
                    let direction = match direction {
                        CopyDirection::HostToDevice => Direction::ToDevice,
                        CopyDirection::DeviceToHost => Direction::ToHost,
                    };
                    self.copy_queue.push_back(CopyJob {
                        tenant: t,
                        direction,
                        link_bytes,
                    });
                    return self.start_copies();
                }
                Instr::Launch(kernel) => {
                    tenant.pc += 1;
                    tenant.channel.push_back(kernel);
                    tenant.in_flight += 1;
                    self.start_kernel();
                    return self.schedule_step(t, self.preset.launch_enqueue_ns);
                }
                Instr::Sync => {
                    if tenant.in_flight > 0 {
                        tenant.state = State::WaitingChannel;
                        return;
                    }
                    tenant.pc += 1;
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
                    tenant.phase_start_ns = Some(self.now_ns);
                    tenant.pc += 1;
                }
                Instr::PhaseEnd => {
                    tenant.phase_end_ns = Some(self.now_ns);
                    tenant.pc += 1;
                }
            }
        }
    }

    /// Carries out the manager's actions.
    fn apply_actions(&mut self) {
        while let Some(action) = self.manager.poll_action() {
            let (request, tenant) = match &action {
                Action::Grant {
                    request, tenant, ..
                }
                | Action::Fail {
                    request, tenant, ..
                } => (*request, tenant.0 as usize),
            };
            let Some((pending, slot, asked_ns)) = self.tenants[tenant].pending_alloc else {
                continue;
            };
            debug_assert_eq!(pending, request, "one allocation in flight per tenant");
            self.tenants[tenant].pending_alloc = None;
            let done_ns = self.now_ns + self.preset.driver_call_ns;
            self.tenants[tenant]
                .alloc_latencies_ns
                .push(done_ns - asked_ns);
            match action {
                Action::Grant { buffer, .. } => {
                    self.tenants[tenant].slots[slot] = Some(buffer);
                    self.record_vram(tenant);
                    self.schedule_step(tenant, self.preset.driver_call_ns);
                }
                Action::Fail { error, .. } => {
                    let spec = &self.tenants[tenant].buffers[slot];
                    let message = format!(
                        "allocation of {:?} ({} bytes) failed: {error}",
                        spec.label, spec.bytes
                    );
                    self.finish_tenant(tenant, Some(message));
                }
            }
        }
    }

    fn record_vram(&mut self, t: usize) {
        let bytes = self.manager.usage(self.tenants[t].id).vram_bytes;
        let timeline = &mut self.tenants[t].vram_timeline;
        if timeline.last().map(|l| l.1) != Some(bytes) {
            timeline.push((self.now_ns, bytes));
        }
    }

    /// Ends a tenant: it finished its program (`error` = None) or failed.
    fn finish_tenant(&mut self, t: usize, error: Option<String>) {
        let tenant = &mut self.tenants[t];
        tenant.state = State::Done;
        tenant.end_ns = self.now_ns;
        tenant.error = error;
        // Queued kernels of a failed tenant never run; a running one completes.
        let queued = tenant.channel.len();
        tenant.channel.clear();
        tenant.in_flight -= queued;
        self.manager.handle_tenant_exit(tenant.id);
        self.record_vram(t);
    }

    /// Starts the next kernel if the compute engine is idle: round-robin over tenants'
    /// channels at kernel granularity.
    fn start_kernel(&mut self) {
        if self.running.is_some() {
            return;
        }
        let n = self.tenants.len();
        let Some(t) = (0..n)
            .map(|i| (self.round_robin_next + i) % n)
            .find(|&t| !self.tenants[t].channel.is_empty())
        else {
            return;
        };
        self.round_robin_next = (t + 1) % n;
        let kernel = self.tenants[t].channel.pop_front().expect("non-empty");
        let mut traffic = Traffic::default();
        for access in &kernel.accesses {
            let buffer = self.tenants[t].slots[access.slot].and_then(|id| self.manager.buffer(id));
            // An access to a buffer the program has not allocated is a program bug; the
            // validator rejects such programs, so count it as local to stay total.
            let fraction = buffer.map_or(1.0, |b| timing::local_fraction(&access.distribution, b));
            traffic.add(access.read_bytes, access.write_bytes, fraction);
        }
        let tenant = &mut self.tenants[t];
        tenant.local_bytes += traffic.local_bytes;
        tenant.remote_bytes += traffic.remote_bytes();
        let fixed_ns = timing::fixed_ns(&self.preset, kernel.ops, &traffic);
        let mut flows_left = 0;
        for (direction, bytes) in [
            (Direction::ToDevice, traffic.link_bytes_to_device()),
            (Direction::ToHost, traffic.link_bytes_to_host()),
        ] {
            if bytes > 0.0 {
                let id = self.link.start(self.now_ns, direction, bytes, None);
                self.flow_owners.insert(id, FlowOwner::Kernel);
                flows_left += 1;
            }
        }
        self.running = Some(RunningKernel {
            tenant: t,
            fixed_done: false,
            flows_left,
        });
        self.schedule(self.now_ns + fixed_ns, Event::KernelFixedDone);
        if flows_left > 0 {
            self.rearm_link();
        }
    }

    fn maybe_finish_kernel(&mut self) {
        let Some(running) = &self.running else { return };
        if !running.fixed_done || running.flows_left > 0 {
            return;
        }
        let t = running.tenant;
        self.running = None;
        let tenant = &mut self.tenants[t];
        tenant.in_flight -= 1;
        if tenant.in_flight == 0 && tenant.state == State::WaitingChannel {
            self.schedule_step(t, 0);
        }
        self.start_kernel();
    }

    /// Hands queued copies to idle copy engines.
    fn start_copies(&mut self) {
        for engine in 0..self.copy_engines.len() {
            if self.copy_engines[engine].is_none() {
                let Some(job) = self.copy_queue.pop_front() else {
                    return;
                };
                self.copy_engines[engine] = Some(job);
                self.schedule(
                    self.now_ns + self.preset.copy_setup_ns,
                    Event::CopySetupDone(engine),
                );
            }
        }
    }

    fn start_copy_transfer(&mut self, engine: usize) {
        let job = self.copy_engines[engine].as_ref().expect("engine busy");
        if job.link_bytes == 0 {
            return self.finish_copy(engine);
        }
        let peak = match job.direction {
            Direction::ToDevice => self.preset.link.h2d_bytes_per_s,
            Direction::ToHost => self.preset.link.d2h_bytes_per_s,
        };
        let cap = self
            .preset
            .link
            .size_curve_k_per_kib
            .map(|k| size_curve_bytes_per_s(peak, k, job.link_bytes));
        let id = self
            .link
            .start(self.now_ns, job.direction, job.link_bytes as f64, cap);
        self.flow_owners.insert(id, FlowOwner::CopyEngine(engine));
        self.rearm_link();
    }

    fn finish_copy(&mut self, engine: usize) {
        let job = self.copy_engines[engine].take().expect("engine busy");
        self.schedule_step(job.tenant, 0);
        self.start_copies();
    }

    /// Schedules a wake-up for the link's next completion; older wake-ups go stale.
    fn rearm_link(&mut self) {
        self.link_generation += 1;
        if let Some(t) = self.link.next_completion_ns() {
            self.schedule(t, Event::LinkWake(self.link_generation));
        }
    }

    fn advance_link(&mut self) {
        for id in self.link.advance(self.now_ns) {
            match self
                .flow_owners
                .remove(&id)
                .expect("every flow has an owner")
            {
                FlowOwner::Kernel => {
                    self.running.as_mut().expect("kernel running").flows_left -= 1;
                    self.maybe_finish_kernel();
                }
                FlowOwner::CopyEngine(engine) => self.finish_copy(engine),
            }
        }
        self.rearm_link();
    }
}

/// Runs a configuration to its end.
pub fn simulate(config: SimConfig) -> Result<Outcome, InvariantError> {
    Engine::new(config).run()
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
