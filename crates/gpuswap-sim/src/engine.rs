//! The discrete-event engine: runs tenants' programs on the simulated device around the
//! memory manager.
//!
//! Time is integer nanoseconds. Events sit in a binary heap ordered by (time, sequence
//! number), so ties resolve in scheduling order and a scenario always runs the same way.
//! The engine owns the device state (compute engine, copy engines, link, content
//! versions) and the [`Manager`]; it feeds the manager events and carries out its actions.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::rc::Rc;

use gpuswap_core::{
    Action, AllocRequest, BufferId, ChunkPolicy, ChunkRef, CopyId, DEFAULT_CHUNK_BYTES,
    DEFAULT_RETURN_INTERVAL_NS, KernelStats, Location, Manager, ManagerConfig, Mode, RequestId,
    TenantId, VictimPolicy,
};
use thiserror::Error;

use crate::link::{Direction, FlowId, Link, size_curve_bytes_per_s};
use crate::preset::Preset;
use crate::program::{BufferSpec, CopyDirection, Kernel, Program};
use crate::runtime::{Instr, flatten, with_runtime};
use crate::timing::{self, READ_TRANSACTION_BYTES, Traffic};

/// One tenant of a simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantSpec {
    /// Name in reports.
    pub name: String,
    /// The app it runs (for reports).
    pub app: String,
    /// What it does (the app's program, without the runtime's system buffers).
    pub program: Program,
    /// When it starts.
    pub start_ns: u64,
    /// Buffer priorities by label; unlisted buffers get the manager's default rule.
    pub priorities: BTreeMap<String, i32>,
    /// Per-chunk priorities by buffer label (the `priority-chunk` policy).
    pub chunk_priorities: BTreeMap<String, Vec<i32>>,
}

impl TenantSpec {
    /// A tenant without priorities.
    pub fn new(name: impl Into<String>, app: impl Into<String>, program: Program) -> Self {
        Self {
            name: name.into(),
            app: app.into(),
            program,
            start_ns: 0,
            priorities: BTreeMap::new(),
            chunk_priorities: BTreeMap::new(),
        }
    }
}

/// Everything a simulation needs.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The device.
    pub preset: Preset,
    /// The memory manager (its `vram_bytes` is the VRAM available to tenants).
    pub manager: ManagerConfig,
    /// The tenants.
    pub tenants: Vec<TenantSpec>,
    /// Check the manager's accounting after every event (tests; costs time).
    pub check_invariants: bool,
    /// Answer suspensions without suspending: only for the test that shows why
    /// relocation needs suspension (a write during a copy is lost).
    pub unsafe_skip_suspend: bool,
}

impl SimConfig {
    /// A configuration with the manager's default chunk size, policies and return
    /// interval, host memory from the preset, seed 0 and no checks.
    pub fn new(preset: Preset, vram_bytes: u64, mode: Mode, tenants: Vec<TenantSpec>) -> Self {
        Self {
            manager: ManagerConfig {
                vram_bytes,
                host_bytes: preset.host_memory_bytes,
                chunk_bytes: DEFAULT_CHUNK_BYTES,
                mode,
                victim: VictimPolicy::default(),
                chunk_policy: ChunkPolicy::default(),
                return_interval_ns: DEFAULT_RETURN_INTERVAL_NS,
                seed: 0,
            },
            preset,
            tenants,
            check_invariants: false,
            unsafe_skip_suspend: false,
        }
    }
}

/// One eviction as seen by the tenant whose allocation caused it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EvictionLatency {
    /// From the allocation call to its return.
    pub total_ns: u64,
    /// Policy run time.
    pub policy_ns: u64,
    /// DMA setup of the chunk copies.
    pub dma_setup_ns: u64,
    /// DMA transfers.
    pub dma_ns: u64,
    /// The rest: victims draining, queueing behind other relocations and copies.
    pub waiting_ns: u64,
}

/// One suspension of a tenant whose data was relocated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VictimPause {
    /// From the suspension request until queued work drained.
    pub drain_ns: u64,
    /// From drained until resumed (the copies).
    pub pause_ns: u64,
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
    /// VRAM accounted to it over time: (time, bytes) at every change.
    pub vram_timeline: Vec<(u64, u64)>,
    /// Highest VRAM held.
    pub vram_peak_bytes: u64,
    /// Kernel bytes served from VRAM.
    pub local_bytes: f64,
    /// Kernel bytes served from host memory.
    pub remote_bytes: f64,
    /// Bytes relocated to host memory.
    pub bytes_evicted: u64,
    /// Bytes relocated back to VRAM.
    pub bytes_returned: u64,
    /// Latency of each allocation call.
    pub alloc_latencies_ns: Vec<u64>,
    /// Allocations that had to evict, with their latency split.
    pub evictions: Vec<EvictionLatency>,
    /// Suspensions as a victim (or winner of a return).
    pub pauses: Vec<VictimPause>,
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
            area += (next.min(self.end_ns) - (*t).min(self.end_ns)) as f64 * *bytes as f64;
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
    /// The eviction policy finished running; the manager's next actions may proceed.
    PolicyDone,
    /// The manager's timer (return check).
    ManagerTimer,
    /// Gdev's scheduler lets the held kernel start.
    GdevLaunch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A `Step` event is scheduled.
    Scheduled,
    /// Waits until its channel is empty (sync, free, exit, or a copy behind kernels),
    /// or, for a copy, until it is resumed.
    WaitingChannel,
    WaitingCopy,
    WaitingAlloc,
    /// A launch waits for room in the tenant's launch queue.
    WaitingQueueSpace,
    Done,
}

/// An allocation call in progress.
struct PendingAlloc {
    request: RequestId,
    slot: usize,
    asked_ns: u64,
    eviction: Option<EvictionLatency>,
}

struct Tenant {
    id: TenantId,
    name: String,
    app: String,
    priorities: BTreeMap<String, i32>,
    chunk_priorities: BTreeMap<String, Vec<i32>>,
    buffers: Vec<BufferSpec>,
    instrs: Vec<Instr>,
    pc: usize,
    loops: Vec<u32>,
    slots: Vec<Option<BufferId>>,
    /// Kernels the GPU may run.
    channel: VecDeque<Rc<Kernel>>,
    /// Kernels launched while suspended: they reach the GPU on resume.
    held: VecDeque<Rc<Kernel>>,
    /// Kernels queued, held or running.
    in_flight: usize,
    /// Memcpys queued or running.
    copies_in_flight: usize,
    suspended: bool,
    /// Suspension requested, not yet drained: (requested at).
    draining_since: Option<u64>,
    drained_at: u64,
    state: State,
    pending_alloc: Option<PendingAlloc>,
    start_ns: u64,
    end_ns: u64,
    phase_start_ns: Option<u64>,
    phase_end_ns: Option<u64>,
    vram_timeline: Vec<(u64, u64)>,
    local_bytes: f64,
    remote_bytes: f64,
    alloc_latencies_ns: Vec<u64>,
    evictions: Vec<EvictionLatency>,
    pauses: Vec<VictimPause>,
    error: Option<String>,
}

impl Tenant {
    fn drained(&self, running: Option<usize>, me: usize) -> bool {
        self.channel.is_empty() && running != Some(me) && self.copies_in_flight == 0
    }
}

struct RunningKernel {
    tenant: usize,
    started_ns: u64,
    ideal_ns: u64,
    accesses: u64,
    fixed_done: bool,
    flows_left: u32,
    written: Rc<[BufferId]>,
    referenced: Vec<ChunkRef>,
}

enum CopyKind {
    Memcpy {
        buffer: BufferId,
        writes_device: bool,
    },
    Relocation {
        copy: CopyId,
        chunk: ChunkRef,
        epoch: u64,
    },
}

struct CopyJob {
    tenant: usize,
    kind: CopyKind,
    direction: Direction,
    link_bytes: u64,
    transfer_started_ns: u64,
    setup_started_ns: u64,
}

/// The cost of one kernel launch given the placement of its buffers.
#[derive(Clone, Debug)]
struct KernelCost {
    traffic: Traffic,
    fixed_ns: u64,
    ideal_ns: u64,
    accesses: u64,
    written: Rc<[BufferId]>,
}

/// Writes to one buffer: bumped when a write starts or ends, and how many run now.
#[derive(Clone, Copy, Debug, Default)]
struct WriteState {
    epoch: u64,
    writers: u32,
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
    unsafe_skip_suspend: bool,
    next_request: u64,
    link: Link,
    link_generation: u64,
    /// When the live link wake-up fires.
    link_wake_at: Option<u64>,
    /// Who started each flow in progress (a handful at a time).
    flow_owners: Vec<(FlowId, FlowOwner)>,
    running: Option<RunningKernel>,
    round_robin_next: usize,
    copy_engines: Vec<Option<CopyJob>>,
    copy_queue: VecDeque<CopyJob>,
    /// The manager's actions wait while its policy runs.
    policy_running: bool,
    timer_at: Option<u64>,
    /// The tenant whose allocation the current relocation serves.
    evicting_for: Option<usize>,
    /// Write epochs of buffers: bumped when a write to the buffer starts or ends.
    /// Indexed by buffer id (the manager numbers buffers densely from 0).
    writes: Vec<WriteState>,
    /// The first invariant broken; the run stops after the event that broke it.
    failure: Option<InvariantError>,
    /// Kernel costs by launch site (the kernel's address) and the placement epoch they
    /// were computed at.
    cost_cache: HashMap<usize, (u64, KernelCost)>,
    /// Gdev: the kernel the scheduler holds until its tenant's buffers are resident.
    gdev_launch: Option<(usize, Rc<Kernel>)>,
}

impl Engine {
    /// Builds the simulation; nothing runs until [`Engine::run`].
    pub fn new(config: SimConfig) -> Self {
        let manager = Manager::new(config.manager);
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
                    priorities: spec.priorities,
                    chunk_priorities: spec.chunk_priorities,
                    slots: vec![None; program.buffers.len()],
                    instrs: flatten(&program.ops),
                    buffers: program.buffers,
                    pc: 0,
                    loops: Vec::new(),
                    channel: VecDeque::new(),
                    held: VecDeque::new(),
                    in_flight: 0,
                    copies_in_flight: 0,
                    suspended: false,
                    draining_since: None,
                    drained_at: 0,
                    state: State::Scheduled,
                    pending_alloc: None,
                    start_ns: spec.start_ns,
                    end_ns: spec.start_ns,
                    phase_start_ns: None,
                    phase_end_ns: None,
                    vram_timeline: vec![(spec.start_ns, 0)],
                    local_bytes: 0.0,
                    remote_bytes: 0.0,
                    alloc_latencies_ns: Vec::new(),
                    evictions: Vec::new(),
                    pauses: Vec::new(),
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
            unsafe_skip_suspend: config.unsafe_skip_suspend,
            next_request: 0,
            link,
            link_generation: 0,
            link_wake_at: None,
            flow_owners: Vec::new(),
            running: None,
            round_robin_next: 0,
            copy_engines,
            copy_queue: VecDeque::new(),
            policy_running: false,
            timer_at: None,
            evicting_for: None,
            writes: Vec::new(),
            failure: None,
            gdev_launch: None,
            cost_cache: HashMap::new(),
        }
    }

    /// Runs every tenant to its end and reports what happened.
    pub fn run(mut self) -> Result<Outcome, InvariantError> {
        for t in 0..self.tenants.len() {
            let start = self.tenants[t].start_ns;
            self.schedule(start, Event::Step(t));
        }
        while let Some(Reverse((time_ns, _, event))) = self.queue.pop() {
            if time_ns < self.now_ns {
                return Err(self.broken(format!("event at {time_ns} ns after {} ns", self.now_ns)));
            }
            self.now_ns = time_ns;
            self.events += 1;
            match event {
                // A tenant that failed after this step was scheduled has nothing left
                // to run.
                Event::Step(t) if self.tenants[t].state == State::Done => {}
                Event::Step(t) => self.step(t),
                Event::KernelFixedDone => {
                    let running = self.running.as_mut().expect("a kernel is running");
                    running.fixed_done = true;
                    self.maybe_finish_kernel();
                }
                Event::LinkWake(generation) if generation == self.link_generation => {
                    self.link_wake_at = None;
                    self.advance_link();
                }
                Event::LinkWake(_) => {}
                Event::CopySetupDone(engine) => self.start_copy_transfer(engine),
                Event::PolicyDone => {
                    self.policy_running = false;
                    self.apply_actions();
                }
                Event::ManagerTimer if self.timer_at == Some(time_ns) => {
                    self.timer_at = None;
                    self.manager.handle_timeout(time_ns);
                    self.apply_actions();
                }
                Event::ManagerTimer => {}
                Event::GdevLaunch => {
                    let (t, kernel) = self.gdev_launch.take().expect("a launch is held");
                    self.run_kernel(t, kernel);
                }
            }
            if let Some(failure) = self.failure.take() {
                return Err(failure);
            }
            if self.check_invariants {
                self.manager
                    .check_invariants()
                    .map_err(|m| self.broken(m))?;
            }
            self.arm_timer();
        }
        if let Some(t) = self.tenants.iter().find(|t| t.state != State::Done) {
            return Err(self.broken(format!(
                "{} never finished (stuck in {:?})",
                t.name, t.state
            )));
        }
        Ok(self.into_outcome())
    }

    fn into_outcome(self) -> Outcome {
        let makespan_ns = self.tenants.iter().map(|t| t.end_ns).max().unwrap_or(0);
        let manager = &self.manager;
        let tenants = self
            .tenants
            .into_iter()
            .map(|t| {
                let usage = manager.usage(t.id);
                TenantOutcome {
                    vram_peak_bytes: usage.vram_peak_bytes,
                    bytes_evicted: usage.bytes_evicted,
                    bytes_returned: usage.bytes_returned,
                    name: t.name,
                    app: t.app,
                    start_ns: t.start_ns,
                    end_ns: t.end_ns,
                    phase_ns: t.phase_start_ns.zip(t.phase_end_ns),
                    vram_timeline: t.vram_timeline,
                    local_bytes: t.local_bytes,
                    remote_bytes: t.remote_bytes,
                    alloc_latencies_ns: t.alloc_latencies_ns,
                    evictions: t.evictions,
                    pauses: t.pauses,
                    error: t.error,
                }
            })
            .collect();
        Outcome {
            tenants,
            makespan_ns,
            events: self.events,
        }
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
        // A tenant that ended stays ended, whatever it was still waiting for.
        if self.tenants[t].state == State::Done {
            return;
        }
        self.tenants[t].state = State::Scheduled;
        self.schedule(self.now_ns + delay_ns, Event::Step(t));
    }

    /// Keeps one timer event for the manager's next wanted timeout while anybody runs.
    fn arm_timer(&mut self) {
        if self.tenants.iter().all(|t| t.state == State::Done) {
            return;
        }
        if let Some(at) = self.manager.poll_timeout().map(|t| t.max(self.now_ns))
            && self.timer_at != Some(at)
        {
            self.timer_at = Some(at);
            self.schedule(at, Event::ManagerTimer);
        }
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
                    self.record_vram_all();
                    return self.schedule_step(t, self.preset.driver_call_ns);
                }
                Instr::Copy {
                    slot,
                    direction,
                    bytes,
                } => {
                    // Stream order: behind the tenant's kernels; and nothing of a
                    // suspended tenant reaches the GPU.
                    if tenant.in_flight > 0 || tenant.suspended {
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
                    let b = self.manager.buffer(buffer).expect("live buffer");
                    let vram_fraction = b.vram_bytes() as f64 / b.bytes as f64;
                    let link_bytes = (bytes as f64 * vram_fraction).round() as u64;
                    tenant.state = State::WaitingCopy;
                    tenant.copies_in_flight += 1;
                    let writes_device = direction == CopyDirection::HostToDevice;
                    if writes_device {
                        self.begin_write(buffer);
                    }
                    self.copy_queue.push_back(CopyJob {
                        tenant: t,
                        kind: CopyKind::Memcpy {
                            buffer,
                            writes_device,
                        },
                        direction: match direction {
                            CopyDirection::HostToDevice => Direction::ToDevice,
                            CopyDirection::DeviceToHost => Direction::ToHost,
                        },
                        link_bytes,
                        transfer_started_ns: 0,
                        setup_started_ns: 0,
                    });
                    return self.start_copies();
                }
                Instr::Launch(kernel) => {
                    if tenant.in_flight >= self.preset.launch_queue_depth {
                        tenant.state = State::WaitingQueueSpace;
                        return;
                    }
                    tenant.pc += 1;
                    if tenant.suspended {
                        tenant.held.push_back(kernel);
                    } else {
                        tenant.channel.push_back(kernel);
                    }
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

    /// Carries out the manager's actions, pausing while its policy runs.
    fn apply_actions(&mut self) {
        while !self.policy_running {
            let Some(action) = self.manager.poll_action() else {
                break;
            };
            match action {
                Action::Grant {
                    request,
                    tenant,
                    buffer,
                } => {
                    let t = tenant.0 as usize;
                    let Some(pending) = self.tenants[t].pending_alloc.take() else {
                        continue;
                    };
                    debug_assert_eq!(pending.request, request, "one allocation per tenant");
                    if self.evicting_for == Some(t) {
                        self.evicting_for = None;
                    }
                    let done_ns = self.now_ns + self.preset.driver_call_ns;
                    let latency = done_ns - pending.asked_ns;
                    let tenant = &mut self.tenants[t];
                    tenant.alloc_latencies_ns.push(latency);
                    if let Some(mut e) = pending.eviction {
                        e.total_ns = latency;
                        e.waiting_ns = latency - e.policy_ns - e.dma_setup_ns - e.dma_ns;
                        tenant.evictions.push(e);
                    }
                    tenant.slots[pending.slot] = Some(buffer);
                    self.record_vram_all();
                    self.schedule_step(t, self.preset.driver_call_ns);
                }
                Action::Fail {
                    request,
                    tenant,
                    error,
                } => {
                    let t = tenant.0 as usize;
                    let Some(pending) = self.tenants[t].pending_alloc.take() else {
                        continue;
                    };
                    debug_assert_eq!(pending.request, request, "one allocation per tenant");
                    let done_ns = self.now_ns + self.preset.driver_call_ns;
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
                Action::PolicyRan { tenant, chunks } => {
                    let t = tenant.0 as usize;
                    let policy_ns = u64::from(chunks) * self.preset.policy_ns_per_chunk;
                    if let Some(pending) = &mut self.tenants[t].pending_alloc {
                        pending.eviction.get_or_insert_default().policy_ns += policy_ns;
                    }
                    self.evicting_for = Some(t);
                    self.record_vram_all();
                    self.policy_running = true;
                    self.schedule(self.now_ns + policy_ns, Event::PolicyDone);
                }
                Action::Suspend { tenant, .. } => {
                    let t = tenant.0 as usize;
                    if self.unsafe_skip_suspend {
                        self.manager.handle_suspended(tenant);
                        continue;
                    }
                    self.tenants[t].suspended = true;
                    self.tenants[t].draining_since = Some(self.now_ns);
                    self.check_drained(t);
                }
                Action::Copy {
                    copy,
                    tenant,
                    chunk,
                    bytes,
                    to,
                } => {
                    let t = tenant.0 as usize;
                    let writes = self.write_state(chunk.buffer);
                    if writes.writers > 0 {
                        return self.lost_write(t, chunk);
                    }
                    let epoch = writes.epoch;
                    self.copy_queue.push_back(CopyJob {
                        tenant: t,
                        kind: CopyKind::Relocation { copy, chunk, epoch },
                        direction: match to {
                            Location::Host => Direction::ToHost,
                            Location::Vram => Direction::ToDevice,
                        },
                        link_bytes: bytes,
                        transfer_started_ns: 0,
                        setup_started_ns: 0,
                    });
                    self.start_copies();
                }
                Action::Remap { .. } => self.record_vram_all(),
                Action::Resume { tenant } => self.resume(tenant.0 as usize),
                Action::LaunchReady { .. } => {
                    self.schedule(self.now_ns + self.preset.gdev_launch_ns, Event::GdevLaunch);
                }
                Action::LaunchFail { tenant, error } => {
                    let t = tenant.0 as usize;
                    self.gdev_launch = None;
                    self.tenants[t].in_flight -= 1;
                    let message = format!(
                        "gdev cannot launch: the tenant's buffers do not fit in VRAM ({error})"
                    );
                    self.finish_tenant(t, Some(message));
                    self.start_kernel();
                }
            }
        }
    }

    /// Records that a relocation copied a chunk its tenant was writing: the copy in the
    /// new location misses the write.
    fn lost_write(&mut self, t: usize, chunk: ChunkRef) {
        let failure = self.broken(format!(
            "lost write: {} wrote {:?} while it was being relocated",
            self.tenants[t].name, chunk
        ));
        self.failure.get_or_insert(failure);
    }

    /// Reports a suspension to the manager once the tenant's queued work is done.
    fn check_drained(&mut self, t: usize) {
        let running = self.running.as_ref().map(|r| r.tenant);
        let tenant = &mut self.tenants[t];
        if let Some(since) = tenant.draining_since
            && tenant.drained(running, t)
        {
            tenant.draining_since = None;
            tenant.drained_at = self.now_ns;
            tenant.pauses.push(VictimPause {
                drain_ns: self.now_ns - since,
                pause_ns: 0,
            });
            self.manager.handle_suspended(tenant.id);
            self.apply_actions();
        }
    }

    fn resume(&mut self, t: usize) {
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
        if tenant.state == State::WaitingChannel && tenant.in_flight == 0 {
            self.schedule_step(t, 0);
        }
        self.start_kernel();
    }

    /// Records every tenant's accounted VRAM where it changed.
    fn record_vram_all(&mut self) {
        for t in &mut self.tenants {
            let bytes = self.manager.usage(t.id).vram_bytes;
            if t.vram_timeline.last().map(|l| l.1) != Some(bytes) {
                t.vram_timeline.push((self.now_ns, bytes));
            }
        }
    }

    /// Ends a tenant: it finished its program (`error` = None) or failed.
    fn finish_tenant(&mut self, t: usize, error: Option<String>) {
        let tenant = &mut self.tenants[t];
        tenant.state = State::Done;
        tenant.end_ns = self.now_ns;
        tenant.error = error;
        // Queued kernels of a failed tenant never run; a running one completes.
        let dropped = tenant.channel.len() + tenant.held.len();
        tenant.channel.clear();
        tenant.held.clear();
        tenant.in_flight -= dropped;
        self.manager.handle_tenant_exit(tenant.id);
        self.record_vram_all();
        self.check_drained(t);
        self.apply_actions();
    }

    /// Starts the next kernel if the compute engine is idle: round-robin over tenants'
    /// channels at kernel granularity.
    fn start_kernel(&mut self) {
        if self.running.is_some() || self.gdev_launch.is_some() {
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
        if self.manager.config().mode == Mode::Gdev {
            self.gdev_launch = Some((t, kernel));
            self.manager.handle_launch(self.tenants[t].id);
            return self.apply_actions();
        }
        self.run_kernel(t, kernel);
    }

    /// Runs a kernel on the compute engine with its data where it is now.
    fn run_kernel(&mut self, t: usize, kernel: Rc<Kernel>) {
        let want_references = self.preset.features.reference_bits
            && self.manager.config().chunk_policy == ChunkPolicy::ReverseSwap;
        let cost = self.kernel_cost(t, &kernel);
        let mut referenced = Vec::new();
        if want_references {
            for access in &kernel.accesses {
                if let Some(b) =
                    self.tenants[t].slots[access.slot].and_then(|id| self.manager.buffer(id))
                {
                    referenced.extend(timing::touched_host_chunks(&access.distribution, b));
                }
            }
        }
        for id in cost.written.iter() {
            self.begin_write(*id);
        }
        let traffic = cost.traffic;
        let tenant = &mut self.tenants[t];
        tenant.local_bytes += traffic.local_bytes;
        tenant.remote_bytes += traffic.remote_bytes();
        let fixed_ns = cost.fixed_ns;
        let mut flows_left = 0;
        for (direction, bytes) in [
            (Direction::ToDevice, traffic.link_bytes_to_device()),
            (Direction::ToHost, traffic.link_bytes_to_host()),
        ] {
            if bytes > 0.0 {
                let id = self.link.start(self.now_ns, direction, bytes, None);
                self.flow_owners.push((id, FlowOwner::Kernel));
                flows_left += 1;
            }
        }
        self.running = Some(RunningKernel {
            tenant: t,
            ideal_ns: cost.ideal_ns,
            started_ns: self.now_ns,
            accesses: cost.accesses,
            fixed_done: false,
            flows_left,
            written: cost.written,
            referenced,
        });
        self.schedule(self.now_ns + fixed_ns, Event::KernelFixedDone);
        if flows_left > 0 {
            self.rearm_link();
        }
    }

    /// What a launch of `kernel` by tenant `t` costs with the data where it is now.
    /// Cached per launch site while the manager's placement epoch stays the same: a
    /// program relaunches the same kernels many times between placement changes, and
    /// some touch hundreds of buffers (heartwall).
    fn kernel_cost(&mut self, t: usize, kernel: &Rc<Kernel>) -> KernelCost {
        let epoch = self.manager.placement_epoch();
        let key = Rc::as_ptr(kernel) as usize;
        if let Some((cached_epoch, cost)) = self.cost_cache.get(&key)
            && *cached_epoch == epoch
        {
            return cost.clone();
        }
        let mut traffic = Traffic::default();
        let mut ideal = Traffic::default();
        let mut written = Vec::new();
        for access in &kernel.accesses {
            let id = self.tenants[t].slots[access.slot];
            let buffer = id.and_then(|id| self.manager.buffer(id));
            // An access to a buffer the program has not allocated is a program bug that
            // the validator rejects; count it as local to stay total.
            let fraction = buffer.map_or(1.0, |b| timing::local_fraction(&access.distribution, b));
            traffic.add(access.read_bytes, access.write_bytes, fraction);
            ideal.add(access.read_bytes, access.write_bytes, 1.0);
            if let (Some(id), true) = (id, access.write_bytes > 0) {
                written.push(id);
            }
        }
        let cost = KernelCost {
            traffic,
            fixed_ns: timing::fixed_ns(&self.preset, kernel.ops, &traffic),
            ideal_ns: timing::fixed_ns(&self.preset, kernel.ops, &ideal),
            accesses: (ideal.local_bytes / READ_TRANSACTION_BYTES as f64).round() as u64,
            written: written.into(),
        };
        self.cost_cache.insert(key, (epoch, cost.clone()));
        cost
    }

    fn write_state(&self, buffer: BufferId) -> WriteState {
        self.writes
            .get(buffer.0 as usize)
            .copied()
            .unwrap_or_default()
    }

    fn begin_write(&mut self, buffer: BufferId) {
        let i = buffer.0 as usize;
        if i >= self.writes.len() {
            self.writes.resize(i + 1, WriteState::default());
        }
        self.writes[i].epoch += 1;
        self.writes[i].writers += 1;
    }

    fn end_write(&mut self, buffer: BufferId) {
        let state = &mut self.writes[buffer.0 as usize];
        state.epoch += 1;
        state.writers -= 1;
    }

    fn maybe_finish_kernel(&mut self) {
        let Some(running) = &self.running else {
            return;
        };
        if !running.fixed_done || running.flows_left > 0 {
            return;
        }
        let running = self.running.take().expect("checked");
        for id in running.written.iter() {
            self.end_write(*id);
        }
        let t = running.tenant;
        let stats = KernelStats {
            accesses: running.accesses,
            ns: self.now_ns - running.started_ns,
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
            self.schedule_step(t, 0);
        }
        self.check_drained(t);
        self.start_kernel();
        self.apply_actions();
    }

    /// Hands queued copies to idle copy engines.
    fn start_copies(&mut self) {
        for engine in 0..self.copy_engines.len() {
            if self.copy_engines[engine].is_none() {
                let Some(mut job) = self.copy_queue.pop_front() else {
                    return;
                };
                job.setup_started_ns = self.now_ns;
                let setup_ns = match job.kind {
                    // Gdev's runtime submits copies through its scheduler too.
                    CopyKind::Memcpy { .. } if self.manager.config().mode == Mode::Gdev => {
                        self.preset.copy_setup_ns + self.preset.gdev_launch_ns
                    }
                    CopyKind::Memcpy { .. } => self.preset.copy_setup_ns,
                    CopyKind::Relocation { .. } => self.preset.relocation_setup_ns,
                };
                self.copy_engines[engine] = Some(job);
                self.schedule(self.now_ns + setup_ns, Event::CopySetupDone(engine));
            }
        }
    }

    fn start_copy_transfer(&mut self, engine: usize) {
        let job = self.copy_engines[engine].as_mut().expect("engine busy");
        job.transfer_started_ns = self.now_ns;
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
        self.flow_owners.push((id, FlowOwner::CopyEngine(engine)));
        self.rearm_link();
    }

    fn finish_copy(&mut self, engine: usize) {
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
                let tenant = &mut self.tenants[job.tenant];
                tenant.copies_in_flight -= 1;
                self.schedule_step(job.tenant, 0);
                self.check_drained(job.tenant);
            }
            CopyKind::Relocation { copy, chunk, epoch } => {
                let now = self.write_state(chunk.buffer);
                if now.epoch != epoch || now.writers > 0 {
                    return self.lost_write(job.tenant, chunk);
                }
                if let Some(requester) = self.evicting_for
                    && let Some(pending) = &mut self.tenants[requester].pending_alloc
                {
                    let e = pending.eviction.get_or_insert_default();
                    e.dma_setup_ns += job.transfer_started_ns - job.setup_started_ns;
                    e.dma_ns += self.now_ns - job.transfer_started_ns;
                }
                self.manager.handle_copy_done(copy);
                self.apply_actions();
            }
        }
    }

    /// Schedules a wake-up for the link's next completion; older wake-ups go stale.
    /// Keeps one live wake-up at the link's next completion: an unchanged time keeps the
    /// scheduled event; a new time makes older ones stale.
    fn rearm_link(&mut self) {
        let next = self.link.next_completion_ns();
        if next == self.link_wake_at {
            return;
        }
        self.link_generation += 1;
        self.link_wake_at = next;
        if let Some(t) = next {
            self.schedule(t, Event::LinkWake(self.link_generation));
        }
    }

    fn advance_link(&mut self) {
        self.link.advance(self.now_ns);
        while let Some(id) = self.link.pop_finished() {
            let at = self
                .flow_owners
                .iter()
                .position(|(f, _)| *f == id)
                .expect("every flow has an owner");
            match self.flow_owners.remove(at).1 {
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
