//! The discrete-event engine: runs tenants' programs on the simulated device around the
//! memory manager.
//!
//! Time is integer nanoseconds. Events sit in a binary heap ordered by (time, sequence
//! number), so ties resolve in scheduling order and a scenario always runs the same way.
//! The engine owns the device's components and the [`Manager`], feeds the manager
//! events and carries out its actions. Each component keeps its own state behind a small
//! interface: the compute engine (`ComputeEngine`), the copy engines and Gdev's device
//! lock (`CopyEngines`, `DeviceLock`), the link's flows (`Flows`), the MMU (`Mmu`), the
//! runtime's kind (`RuntimeKind`) and the recorder the report is built from
//! (`Recorder`). The devices' wake-ups that move too often for the queue sit in one
//! table (`Wakes`), which the event loop asks with the queue for the next event.

use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use gpuswap_core::{
    Action, AllocRequest, BufferId, ChunkRef, Contract, CopyId, Dma, Execution, KernelStats,
    LaunchId, Location, Manager, Needs, Reply, RequestId, TenantId,
};

use crate::link::{Direction, size_curve_bytes_per_s};
use crate::mmu::{Mmu, PageWork};
use crate::preset::Preset;
use crate::program::{BufferSpec, CopyDirection, Kernel};
use crate::queue::EventQueue;
use crate::runtime::{Instr, RuntimeKind, flatten, with_runtime};
use crate::timing::{self, READ_TRANSACTION_BYTES, Traffic};

mod actions;
mod chaos;
mod compute;
mod compute_engine;
mod config;
mod copies;
mod copy_engines;
mod flows;
mod interpreter;
mod paging;
mod progress;
mod ready;
mod recorder;
mod slices;
mod wakes;

pub use config::{
    Crash, CrashPoint, DEFAULT_MAX_PAGE_TOUCHES, EvictionLatency, Faults, IdleBetween,
    InvariantError, Limit, LimitReached, Outcome, PagingOutcome, RunLimits, Sharing, SimConfig,
    SimError, TenantOutcome, TenantSpec, VictimPause,
};

use chaos::{Chaos, Trigger};
use compute_engine::{ComputeEngine, RunningKernel};
use copy_engines::{CopyEngines, CopyJob, CopyKind, DeviceLock};
use flows::{FlowOwner, Flows};
use recorder::Recorder;
use wakes::Wakes;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Continue the tenant's program.
    Step(usize),
    /// A running kernel's fixed part (compute, VRAM, latency) is over (never in the
    /// queue: see `Wakes`).
    KernelFixedDone(LaunchId),
    /// A link flow may have finished (never in the queue: see `Wakes`).
    LinkWake,
    /// A copy engine finished setting up its transfer.
    CopySetupDone(usize),
    /// The eviction policy finished running; the manager's next actions may proceed.
    PolicyDone,
    /// The manager's timer (return check).
    ManagerTimer,
    /// The software scheduler lets the held (gated) launch start.
    GatedLaunch(LaunchId),
    /// An injected crash of the tenant (see `Faults`).
    Crash(usize),
    /// The driver reports the tenant drained, late (see `Faults`).
    ReportDrained(usize),
    /// Busy tenants report their progress (`Needs::progress`).
    ProgressReport,
}

/// Whether a kernel's fixed-part end or a link wake-up only passed one part of what its
/// kernels and copies wait for (a kernel ends when its fixed part and its link flows
/// have, a copy when its flows have). Such a wake-up tells nobody anything: it is no
/// event of its own, so a kernel costs one completion event, at the later of its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Partial {
    Yes,
    No,
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
    /// A Gdev memcpy waits for the device (`DeviceLock`).
    WaitingDevice,
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
    channel: VecDeque<Launch>,
    /// Kernels launched while suspended: they reach the GPU on resume.
    held: VecDeque<Launch>,
    /// Kernel costs by launch site (instruction index) with the page-table epoch of the
    /// tenant they were computed at: programs relaunch the same kernels many times
    /// between placement changes.
    cost_cache: Vec<Option<SiteCost>>,
    /// Kernels queued, held or running.
    in_flight: usize,
    /// Memcpys queued or running.
    copies_in_flight: usize,
    suspended: bool,
    /// Suspension requested, not yet drained: (requested at).
    draining_since: Option<u64>,
    /// The (time, sequence number) of a `Step` that was due after a launch but not put in
    /// the queue, because it would only have found the launch queue full (see
    /// `Engine::defer_step`).
    deferred_step: Option<(u64, u64)>,
    drained_at: u64,
    state: State,
    /// Its memory contract, and whether the manager admitted it yet (at its first step).
    contract: Contract,
    admitted: bool,
    pending_alloc: Option<PendingAlloc>,
    start_ns: u64,
    end_ns: u64,
    error: Option<String>,
    /// The share of the SMs its kernels ask (`TenantSpec::sm_share`).
    sm_share: f64,
    /// It ends when every other tenant has (`TenantSpec::endless`).
    endless: bool,
    /// Since when the scheduling policy holds its next kernel.
    held_since: Option<u64>,
    /// Whether the manager was last told it has GPU work (under turns).
    busy_said: bool,
    /// Its idle times between repeats, when it has any (`TenantSpec::idle_between`).
    idle: Option<interpreter::IdleGaps>,
}

impl Tenant {
    /// Tenant number `i`, from its specification, its program wrapped with `preset`'s
    /// runtime.
    fn new(i: usize, spec: TenantSpec, preset: &Preset) -> Self {
        let program = with_runtime(&spec.program, preset);
        Tenant {
            id: TenantId(i as u32),
            name: spec.name,
            app: spec.app,
            priorities: spec.priorities,
            chunk_priorities: spec.chunk_priorities,
            slots: vec![None; program.buffers.len()],
            instrs: flatten(program.ops),
            buffers: program.buffers,
            pc: 0,
            loops: Vec::new(),
            channel: VecDeque::new(),
            held: VecDeque::new(),
            cost_cache: Vec::new(),
            in_flight: 0,
            copies_in_flight: 0,
            suspended: false,
            draining_since: None,
            deferred_step: None,
            drained_at: 0,
            state: State::Scheduled,
            contract: spec.contract,
            admitted: false,
            pending_alloc: None,
            start_ns: spec.start_ns,
            end_ns: spec.start_ns,
            error: None,
            sm_share: spec.sm_share,
            endless: spec.endless,
            held_since: None,
            busy_said: false,
            idle: interpreter::IdleGaps::new(spec.idle_between),
        }
    }

    fn drained(&self, running_here: bool) -> bool {
        self.channel.is_empty() && !running_here && self.copies_in_flight == 0
    }

    /// The kernel launched at instruction `site`.
    fn kernel_at(&self, site: usize) -> &Rc<Kernel> {
        match &self.instrs[site] {
            Instr::Launch(kernel) => kernel,
            _ => unreachable!("a launch site holds a launch"),
        }
    }
}

/// One kernel launch on its way to the GPU. It runs the kernel of its launch site
/// (`Tenant::kernel_at`), so a launch moves no reference count.
#[derive(Clone, Copy)]
struct Launch {
    id: LaunchId,
    /// Where in the tenant's program it was launched (the cost cache's key).
    site: usize,
}

/// A unified-memory kernel's paging state, boxed apart from `RunningKernel` (only such
/// kernels have it).
struct PagedRun {
    /// The kernel's fault migrations still to put on the link, one flow after another
    /// (last first), and the fixed time to run once they are done.
    migrations: Vec<(Direction, f64)>,
    fixed_after_migrations_ns: Option<u64>,
    /// The batches' service time (latency and naps, not transfers).
    fault_service_ns: u64,
    /// The kernel's page walk, its segments (one unless kernels run in segments) and the
    /// one running, and when that one started.
    walk: Option<Box<paging::Walk>>,
    segments: u32,
    segment: u32,
    started_segment_ns: u64,
    /// The bytes its accesses move in all, wherever their pages are (re-reads of host
    /// memory aside: in VRAM the L2 serves them).
    all_bytes: f64,
}

/// A launch site's cached cost: valid while the tenant's page-table epoch is `epoch`;
/// when it is not, only the accesses whose buffer's epoch moved are recomputed.
#[derive(Clone, Debug)]
struct SiteCost {
    epoch: u64,
    cost: KernelCost,
    /// Per access: the buffer epoch its VRAM fraction was computed at, and the fraction.
    fractions: Vec<Option<(u64, f64)>>,
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

/// Writes to one buffer: bumped when a write starts or ends (a kernel's only while a
/// copy is in progress, see `Engine::kernel_writes_moved`), and how many memcpys write
/// it now (running kernels are read from `ComputeEngine::running`). Kept per buffer
/// slot, so it names the buffer it belongs to: a freed buffer's slot is reused.
#[derive(Clone, Copy, Debug, Default)]
struct WriteState {
    buffer: Option<BufferId>,
    epoch: u64,
    writers: u32,
}

/// Whether a write to a buffer starts or ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    Starts,
    Ends,
}

/// The simulation.
pub struct Engine {
    preset: Preset,
    /// What each forwarded launch and synchronization adds to a tenant's wait: PILOT's
    /// socket round trip where its runtime carries the calls, 0 elsewhere.
    forward_ns: u64,
    manager: Manager,
    tenants: Vec<Tenant>,
    queue: EventQueue<Event>,
    /// Events scheduled for the current time, in scheduling order: they need no heap
    /// (`(sequence number, event)`; their time is `now_ns`).
    now_queue: VecDeque<(u64, Event)>,
    seq: u64,
    /// The (time, sequence number) of the event being handled.
    current: (u64, u64),
    now_ns: u64,
    check_invariants: bool,
    limits: RunLimits,
    unsafe_skip_suspend: bool,
    next_request: u64,
    /// The link and who started each of its flows.
    flows: Flows,
    /// The link's and the kernels' wake-ups, kept out of the queue.
    wakes: Wakes,
    /// Tenants that ended.
    done: usize,
    /// The kernels on the compute engine and those on their way to it.
    compute: ComputeEngine,
    copies: CopyEngines,
    /// The manager's actions wait while its policy runs.
    policy_running: bool,
    /// The manager's timer: (the time it asked for, when the event fires).
    timer: Option<(u64, u64)>,
    /// The tenant whose allocation the current relocation serves.
    evicting_for: Option<usize>,
    /// Write epochs of buffers: bumped when a write to the buffer starts or ends (see
    /// `WriteState`).
    /// Indexed by buffer id (the manager numbers buffers densely from 0).
    writes: Vec<WriteState>,
    /// What the report is built from: the event count and each tenant's statistics.
    recorder: Recorder,
    /// The first invariant broken; the run stops after the event that broke it.
    failure: Option<InvariantError>,
    /// A limit reached inside an event (a kernel's page walk), with when the kernel
    /// would have ended at the earliest; the run stops after that event.
    stopped: Option<(Limit, u64)>,
    /// The device's MMU (chunk mappings and managed pages), changed only by the
    /// manager's actions and the device's own touches.
    mmu: Mmu,
    /// What the manager's policy needs from the device.
    needs: Needs,
    /// The runtime the tenants' calls go through.
    runtime: RuntimeKind,
    next_launch: u64,
    /// Under Gdev's runtime: the memcpy that holds the device, and those waiting for it.
    device_lock: DeviceLock,
    /// Injected faults, when the configuration asks for any.
    chaos: Option<Box<Chaos>>,
    /// Whether same-time events run in a shuffled order (`Faults::shuffle_ties`), kept
    /// apart from `chaos` because every scheduled event asks.
    shuffles_ties: bool,
    /// Each tenant's progress since its last report (`Needs::progress`; else empty).
    tallies: Vec<progress::Tally>,
}

impl Engine {
    /// Builds the simulation; nothing runs until [`Engine::run`].
    pub fn new(config: SimConfig) -> Self {
        let optimum = config.optimum;
        let optimum_max_touches = config.optimum_max_touches;
        let manager = Manager::new(config.manager);
        let needs = manager.needs();
        let access_counters = config.preset.features.access_counters;
        let schedules_kernels = manager.schedules_kernels();
        let tenant_count = config.tenants.len();
        let preset = config.preset;
        let tenants: Vec<Tenant> = config
            .tenants
            .into_iter()
            .enumerate()
            .map(|(i, spec)| Tenant::new(i, spec, &preset))
            .collect();
        let runtime = RuntimeKind::of(&preset, needs.launch_gating);
        let recorder = Recorder::new(
            tenants.iter().map(|t| t.start_ns),
            optimum.then_some(optimum_max_touches),
        );
        let chaos = Chaos::new(config.faults, tenants.len()).map(Box::new);
        let flows = Flows::new(preset.link.h2d_bytes_per_s, preset.link.d2h_bytes_per_s);
        let copies = CopyEngines::new(preset.copy_engines);
        // One tenant has nothing to interleave with or stop for: its kernels run whole,
        // as under time slicing.
        let segmented = (config.sharing.concurrent() || schedules_kernels) && tenant_count > 1;
        Self {
            preset,
            forward_ns: crate::forwarding::call_ns(schedules_kernels),
            manager,
            tenants,
            queue: EventQueue::default(),
            now_queue: VecDeque::new(),
            seq: 0,
            current: (0, 0),
            now_ns: 0,
            check_invariants: config.check_invariants,
            limits: config.limits,
            unsafe_skip_suspend: config.unsafe_skip_suspend,
            next_request: 0,
            flows,
            wakes: Wakes::default(),
            done: 0,
            compute: ComputeEngine::new(config.sharing, segmented),
            copies,
            policy_running: false,
            timer: None,
            evicting_for: None,
            writes: Vec::new(),
            recorder,
            failure: None,
            stopped: None,
            // Access notes only where the device has access counters to take them.
            mmu: Mmu::new(needs.access_counts && access_counters),
            needs,
            runtime,
            next_launch: 0,
            device_lock: DeviceLock::default(),
            shuffles_ties: chaos.as_ref().is_some_and(|c| c.shuffles()),
            chaos,
            tallies: if needs.progress {
                (0..tenant_count)
                    .map(|_| progress::Tally::default())
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// The error of a run that reached `limit`, its next event due at `next_ns`.
    fn limit_reached(&self, limit: Limit, next_ns: u64) -> SimError {
        let what = match limit {
            Limit::Events => format!("{} events", self.limits.max_events),
            Limit::SimTime => format!(
                "{} of simulated time",
                gpuswap_units::format_ns(self.limits.max_sim_ns)
            ),
            Limit::PageTouches => format!("{} page touches", self.limits.max_page_touches),
        };
        SimError::Limit(LimitReached {
            what,
            events: self.recorder.events,
            time_ns: self.now_ns,
            next_ns,
            limit,
        })
    }

    /// Runs every tenant to its end and reports what happened.
    pub fn run(self) -> Result<Outcome, SimError> {
        self.run_with_progress(&mut |_, _| {})
    }

    /// [`Engine::run`], calling `progress(simulated ns, events)` every 2^20 events (so
    /// a long run can show that it moves).
    pub fn run_with_progress(
        mut self,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Outcome, SimError> {
        const PROGRESS_EVERY: u64 = (1 << 20) - 1;
        self.schedule_starts();
        while let Some((time_ns, event)) = self.next_event() {
            if time_ns < self.now_ns {
                return Err(self
                    .broken(format!("event at {time_ns} ns after {} ns", self.now_ns))
                    .into());
            }
            if time_ns > self.limits.max_sim_ns {
                return Err(self.limit_reached(Limit::SimTime, time_ns));
            }
            if self.recorder.events >= self.limits.max_events {
                return Err(self.limit_reached(Limit::Events, time_ns));
            }
            self.now_ns = time_ns;
            // Whether the event only passed one part of a kernel's end (see `Partial`).
            let partial = self.handle(time_ns, event)?;
            if partial == Partial::No {
                let events = self.recorder.count_event();
                if events & PROGRESS_EVERY == 0 {
                    progress(self.now_ns, events);
                }
            }
            if let Some(failure) = self.failure.take() {
                return Err(failure.into());
            }
            if let Some((limit, next_ns)) = self.stopped {
                return Err(self.limit_reached(limit, next_ns));
            }
            if partial == Partial::Yes {
                // The manager heard nothing, so its timeout stands; only a late timer's
                // re-arming (injected faults) depends on the time of every wake-up.
                if self.chaos.is_some() {
                    self.arm_timer();
                }
                continue;
            }
            if self.check_invariants {
                self.manager
                    .check_invariants()
                    .and_then(|()| self.mmu.audit(self.manager.paging()))
                    .and_then(|()| self.check_device_invariants())
                    .map_err(|m| self.broken(m))?;
            }
            self.arm_timer();
        }
        if let Some(t) = self.tenants.iter().find(|t| t.state != State::Done) {
            return Err(self
                .broken(format!(
                    "{} never finished (stuck in {:?})",
                    t.name, t.state
                ))
                .into());
        }
        if self.check_invariants {
            self.check_end().map_err(|m| self.broken(m))?;
        }
        Ok(self.into_outcome())
    }

    /// Schedules every tenant's first step, and the injected crashes due at fixed times.
    fn schedule_starts(&mut self) {
        for t in 0..self.tenants.len() {
            let start = self.tenants[t].start_ns;
            self.schedule(start, Event::Step(t));
        }
        if self.needs.progress {
            self.schedule(progress::PROGRESS_REPORT_NS, Event::ProgressReport);
        }
        let crashes: Vec<(usize, u64)> = self
            .chaos
            .as_ref()
            .map(|c| c.timed_crashes().collect())
            .unwrap_or_default();
        // A tenant cannot crash before it starts.
        for (t, at) in crashes {
            if let Some(tenant) = self.tenants.get(t) {
                self.schedule(at.max(tenant.start_ns), Event::Crash(t));
            }
        }
    }

    /// Handles `event`, due at `time_ns` (now): `Partial::Yes` when it only passed one
    /// part of a kernel's end.
    fn handle(&mut self, time_ns: u64, event: Event) -> Result<Partial, InvariantError> {
        let mut partial = Partial::No;
        match event {
            // A tenant that failed after this step was scheduled has nothing left
            // to run.
            Event::Step(t) if self.tenants[t].state == State::Done => {}
            Event::Step(t) => self.step(t),
            Event::KernelFixedDone(launch) => match self.compute.kernel_mut(launch) {
                Some(_) => partial = self.fixed_done(launch),
                None => return Err(self.broken(format!("{launch} is not running"))),
            },
            Event::LinkWake => partial = self.advance_link(),
            Event::CopySetupDone(engine) => self.start_copy_transfer(engine),
            Event::PolicyDone => {
                self.policy_running = false;
                self.apply_actions();
            }
            Event::ManagerTimer if self.timer.map(|t| t.1) == Some(time_ns) => {
                self.timer = None;
                self.manager.handle_timeout(time_ns);
                self.apply_actions();
            }
            Event::ManagerTimer => {}
            // The launch may have gone with its crashed tenant.
            Event::GatedLaunch(id)
                if self.compute.held_launch.as_ref().map(|h| h.1.id) == Some(id) =>
            {
                let (t, launch) = self.compute.held_launch.take().expect("a launch is held");
                self.gated_launch(t, launch);
            }
            Event::GatedLaunch(_) => {}
            Event::Crash(t) => self.crash(t),
            Event::ReportDrained(t) => self.report_drained(t),
            Event::ProgressReport => self.report_progress(),
        }
        Ok(partial)
    }

    fn into_outcome(self) -> Outcome {
        let makespan_ns = self.tenants.iter().map(|t| t.end_ns).max().unwrap_or(0);
        let link_utilization = self.flows.utilization(self.now_ns);
        let manager = &self.manager;
        let mmu = &self.mmu;
        let tenants = self
            .tenants
            .into_iter()
            .zip(self.recorder.tenants)
            .map(|(t, r)| {
                let usage = manager.usage(t.id);
                TenantOutcome {
                    vram_peak_bytes: usage.vram_peak_bytes,
                    bytes_evicted: usage.bytes_evicted,
                    bytes_returned: usage.bytes_returned,
                    name: t.name,
                    app: t.app,
                    start_ns: t.start_ns,
                    end_ns: t.end_ns,
                    phase_ns: r.phase_start_ns.zip(r.phase_end_ns),
                    vram_timeline: r.vram_timeline,
                    local_bytes: r.local_bytes,
                    remote_bytes: r.remote_bytes,
                    alloc_latencies_ns: r.alloc_latencies_ns,
                    evictions: r.evictions,
                    pauses: r.pauses,
                    error: t.error,
                    contract: t.contract,
                    allocations: manager
                        .paging()
                        .map(|p| p.allocations(t.id.0))
                        .unwrap_or_default(),
                    faults_per_batch: r.faults_per_batch,
                    preemptions: r.preemptions,
                    wasted_ns: r.wasted_ns,
                    wait_ns: r.wait_ns,
                    longest_wait_ns: r.longest_wait_ns,
                    longest_kernel_ns: r.longest_kernel_ns,
                    paging: manager.paging().map(|p| PagingOutcome {
                        stats: p.stats(t.id.0),
                        device: mmu.counts(t.id),
                        fault_stall_ns: r.fault_stall_ns,
                        optimum_pages_in: r
                            .page_stream
                            .as_ref()
                            .and_then(|s| s.bound(r.optimum_capacity_pages)),
                        optimum_skipped_touches: r
                            .page_stream
                            .as_ref()
                            .filter(|s| s.over)
                            .map(|s| s.limit as u64),
                    }),
                }
            })
            .collect();
        Outcome {
            tenants,
            makespan_ns,
            events: self.recorder.events,
            link_utilization,
        }
    }

    fn broken(&self, message: String) -> InvariantError {
        InvariantError {
            time_ns: self.now_ns,
            message,
        }
    }

    /// The next event in (time, sequence) order: the earliest of the queue, the events
    /// for the current time and the devices' wake-ups.
    fn next_event(&mut self) -> Option<(u64, Event)> {
        // (time, sequence) keys; u64::MAX stands for an empty source (no real event
        // gets that sequence number).
        const NONE: (u64, u64) = (u64::MAX, u64::MAX);
        let queued = self.queue.peek_key().unwrap_or(NONE);
        let now = self
            .now_queue
            .front()
            .map_or(NONE, |(seq, _)| (self.now_ns, *seq));
        // The event is built in each branch, not handed back in an `Option` from the
        // table: a returned (key, event) went through the stack, and reading it back
        // whole stalled on the parts just written, on every event.
        let (wake_key, wake) = self.wakes.earliest();
        let (key, event) = if let Some(wake) = wake.filter(|_| wake_key < queued && wake_key < now)
        {
            (wake_key, self.wakes.take(wake))
        } else if now < queued {
            let (_, event) = self.now_queue.pop_front()?;
            (now, event)
        } else {
            let (_, event) = self.queue.pop()?;
            (queued, event)
        };
        self.current = key;
        Some((key.0, event))
    }

    fn schedule(&mut self, time_ns: u64, event: Event) {
        let seq = self.next_seq();
        // The current-time FIFO needs increasing keys; shuffled keys go to the heap.
        if time_ns == self.now_ns && !self.shuffles_ties {
            self.now_queue.push_back((seq, event));
        } else {
            self.queue.push_keyed(time_ns, seq, event);
        }
    }

    /// The sequence number of the next scheduled event (its place among events due at
    /// the same time: scheduling order, or a seeded shuffle under `Faults`).
    fn next_seq(&mut self) -> u64 {
        let counter = self.seq;
        self.seq += 1;
        match &mut self.chaos {
            Some(chaos) if self.shuffles_ties => chaos.sequence(counter),
            _ => counter,
        }
    }

    fn schedule_step(&mut self, t: usize, delay_ns: u64) {
        // A tenant that ended stays ended, whatever it was still waiting for.
        if self.tenants[t].state == State::Done {
            return;
        }
        self.tenants[t].state = State::Scheduled;
        self.schedule(self.now_ns.saturating_add(delay_ns), Event::Step(t));
    }

    /// Schedules tenant `t`'s next step after a launch's enqueue time, unless that step
    /// could only find the launch queue full (the queue is full now and the next
    /// instruction is another launch): then the step keeps its time and sequence number
    /// but stays out of the queue until a kernel finishes (`wake_for_queue_space`). A
    /// program that queues thousands of launches (lud) otherwise pays an event per launch
    /// that does nothing.
    fn defer_step(&mut self, t: usize) {
        let tenant = &self.tenants[t];
        let full = tenant.in_flight >= self.preset.launch_queue_depth;
        let launch_next = matches!(tenant.instrs.get(tenant.pc), Some(Instr::Launch(_)));
        let call_ns = self.preset.launch_enqueue_ns + self.forward_ns;
        if tenant.state == State::Done || !full || !launch_next {
            return self.schedule_step(t, call_ns);
        }
        let seq = self.next_seq();
        let tenant = &mut self.tenants[t];
        tenant.deferred_step = Some((self.now_ns.saturating_add(call_ns), seq));
        tenant.state = State::WaitingQueueSpace;
    }

    /// Tenant `t` waits for room in its launch queue and a kernel of it finished: its
    /// next step runs now, or, if a deferred step is still to come, then.
    fn wake_for_queue_space(&mut self, t: usize) {
        match self.tenants[t].deferred_step.take() {
            Some((at, seq)) if (at, seq) > self.current => {
                self.tenants[t].state = State::Scheduled;
                self.queue.push_keyed(at, seq, Event::Step(t));
            }
            _ => self.schedule_step(t, 0),
        }
    }

    /// Keeps one timer event for the manager's next wanted timeout while anybody runs.
    fn arm_timer(&mut self) {
        if self.done == self.tenants.len() {
            return;
        }
        if let Some(at) = self.manager.poll_timeout().map(|t| t.max(self.now_ns))
            && self.timer.map(|t| t.0) != Some(at)
        {
            let late = self.chaos.as_mut().map_or(0, |c| c.timer_lateness_ns());
            let fire = at.saturating_add(late);
            self.timer = Some((at, fire));
            self.schedule(fire, Event::ManagerTimer);
        }
    }
}

/// Runs a configuration to its end.
pub fn simulate(config: SimConfig) -> Result<Outcome, SimError> {
    Engine::new(config).run()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod sharing_tests;
