//! The discrete-event simulation of VMs sharing a virtualised integrated GPU.
//!
//! VMs arrive and leave; a placement algorithm of the core puts each vGPU's slots in
//! high graphics memory. The GPU runs one vGPU at a time, round robin over those with
//! queued work (`Sim::next_with_work`), in slices of at most 16 ms of execution (charged
//! by execution time, switch time excluded). Switching to another vGPU costs a fixed
//! part, the copy of the shared low memory slot (unless low memory is partitioned, as
//! under gVirt), and the copy of every slot of the incoming vGPU whose physical
//! translation entries belong to another vGPU.
//! DymGPU's monitor samples each vGPU's utilization every second, averages it over 20 s,
//! and marks a vGPU idle after 20 s without GPU work; under DymGPU's placements an idle
//! vGPU holding slots alone is treated as terminated for placement until it has work
//! again. Between frames the VMs compute on the host's CPU, shared by processor sharing
//! of its hardware threads with the mediator, which holds one while it switches ([`cpu`]).

mod cpu;

use std::collections::VecDeque;

use gpuswap_core::placement::{Demand, Placement, PlacementEntry, Space};
use gpuswap_sim::queue::EventQueue;
use serde::Serialize;
use thiserror::Error;

use crate::preset::VgpuPreset;
use crate::workload::{Kind, Workload};
use cpu::HostCpu;

/// The monitor's sampling period: DymGPU samples utilization every second.
const SAMPLE_NS: u64 = 1_000_000_000;
/// Samples averaged: DymGPU averages utilization over 20 s.
const WINDOW_SAMPLES: usize = 20;
/// DymGPU's default idle threshold: unused for more than 20 s.
const IDLE_NS: u64 = 20_000_000_000;

/// One VM of a scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct VmSpec {
    /// Name in reports.
    pub name: String,
    /// What it runs.
    pub workload: &'static Workload,
    /// Its high graphics memory.
    pub high_memory_bytes: u64,
    /// When it arrives.
    pub start_ns: u64,
    /// How long a frame workload runs (jobs end when done).
    pub duration_ns: Option<u64>,
}

/// Everything a simulation needs.
#[derive(Clone, Debug)]
pub struct VgpuConfig {
    /// The device.
    pub preset: VgpuPreset,
    /// The placement algorithm.
    pub placement: &'static PlacementEntry,
    /// The VMs.
    pub vms: Vec<VmSpec>,
    /// Simulated time at most.
    pub max_sim_ns: u64,
    /// Events at most: a VM's frames are events, so a long life at a high frame rate is
    /// bounded by this as well as by the time.
    pub max_events: u64,
}

/// A run that could not end.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum VgpuError {
    /// A frame workload without a duration would run for ever.
    #[error("{vm}: {workload} runs frames until the VM leaves: it needs a duration")]
    NoDuration {
        /// The VM.
        vm: String,
        /// Its workload.
        workload: &'static str,
    },
    /// The run reached its time limit.
    #[error(
        "the run stopped at its limit of {limit_ns} ns of simulated time; raise it with --max-sim-time DURATION"
    )]
    Limit {
        /// The limit.
        limit_ns: u64,
    },
    /// The run reached its limit of events.
    #[error(
        "the run stopped at its limit of {limit} events ({now_ns} ns simulated); raise it with --max-events N"
    )]
    EventLimit {
        /// The limit.
        limit: u64,
        /// Simulated time when it stopped.
        now_ns: u64,
    },
}

/// What happened to one VM.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VmOutcome {
    /// Name.
    pub name: String,
    /// Workload.
    pub workload: &'static str,
    /// Slots of high graphics memory it needed.
    pub slots: u32,
    /// Arrival and departure.
    pub start_ns: u64,
    /// When it left (or was refused).
    pub end_ns: u64,
    /// Frames completed (frame workloads).
    pub frames: u64,
    /// GPU execution time it received.
    pub gpu_ns: u64,
    /// Times its context was switched in.
    pub switch_ins: u64,
    /// Times it was moved by a reallocation.
    pub moves: u32,
    /// Why it could not run, if it could not.
    pub error: Option<String>,
}

impl VmOutcome {
    /// Frames per second over its life (0 for jobs and refused VMs).
    pub fn fps(&self) -> f64 {
        let life_ns = self.end_ns.saturating_sub(self.start_ns);
        if life_ns == 0 {
            return 0.0;
        }
        self.frames as f64 * 1e9 / life_ns as f64
    }
}

/// What happened in a simulation.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct VgpuOutcome {
    /// One per VM, in scenario order.
    pub vms: Vec<VmOutcome>,
    /// Context switches (to another vGPU).
    pub switches: u64,
    /// Private-table slot copies into the physical table (high memory).
    pub slot_copies: u64,
    /// Translation entries copied, the low memory slot's included.
    pub entries_copied: u64,
    /// Cycles spent switching, copies included.
    pub switch_cycles: u64,
    /// Reallocations that moved at least one vGPU.
    pub reallocations: u64,
    /// Times DymGPU's monitor took an idle vGPU holding slots alone out of the placement.
    pub idle_releases: u64,
    /// When the last VM left.
    pub makespan_ns: u64,
}

impl VgpuOutcome {
    /// Mean cycles per context switch.
    pub fn cycles_per_switch(&self) -> f64 {
        if self.switches == 0 {
            0.0
        } else {
            self.switch_cycles as f64 / self.switches as f64
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    Leave(usize),
    /// The VM's CPU work for a frame is done: its next frame's GPU work is submitted
    /// (tagged with the VM's CPU generation: an end re-timed by the host's sharing voids
    /// the earlier one).
    FrameReady(usize, u64),
    /// The running slice ends (tagged with the GPU's generation, so that a slice cut
    /// short by its VM leaving is ignored).
    SliceEnd(u64),
    /// The mediator's switch is done and its host thread free again (tagged with the
    /// switch's number: a later switch keeps the thread).
    SwitchDone(u64),
    /// The monitor's sample.
    Sample,
    /// The placement's period.
    Periodic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    NotArrived,
    Running,
    Done,
}

struct Vm {
    spec: VmSpec,
    slots: u32,
    state: State,
    /// Start slot while placed (an idle vGPU treated as terminated is not).
    position: Option<u32>,
    /// GPU work submitted and not yet executed.
    pending_ns: u64,
    outcome: VmOutcome,
    busy_in_sample_ns: u64,
    samples: VecDeque<f64>,
    last_busy_ns: u64,
    idle: bool,
    /// The generation of this VM's valid `FrameReady`.
    cpu_generation: u64,
}

struct Slice {
    vm: usize,
    starts_ns: u64,
    run_ns: u64,
}

struct Sim {
    preset: VgpuPreset,
    entry: &'static PlacementEntry,
    placement: Box<dyn Placement>,
    total_slots: u32,
    vms: Vec<Vm>,
    /// Placed vGPUs, in order of (re)arrival.
    residents: Vec<usize>,
    queue: EventQueue<Event>,
    now_ns: u64,
    /// Whose translation entries each physical slot holds.
    holder: Vec<Option<usize>>,
    /// Whose context the GPU has loaded.
    loaded: Option<usize>,
    slice: Option<Slice>,
    generation: u64,
    /// Where the round robin looks first: the VM after the last one run.
    round_robin_next: usize,
    live: usize,
    host: HostCpu,
    /// CPU-phase ends to schedule, filled by `host` (kept for its room).
    cpu_ends: Vec<(usize, u64)>,
    out: VgpuOutcome,
}

/// Runs a configuration to its end.
pub fn simulate(config: VgpuConfig) -> Result<VgpuOutcome, VgpuError> {
    for vm in &config.vms {
        if matches!(vm.workload.kind, Kind::Frames { .. }) && vm.duration_ns.is_none() {
            return Err(VgpuError::NoDuration {
                vm: vm.name.clone(),
                workload: vm.workload.name,
            });
        }
    }
    let total_slots = config.preset.total_slots();
    let mut sim = Sim {
        placement: config.placement.build(),
        entry: config.placement,
        total_slots,
        holder: vec![None; total_slots as usize],
        vms: config
            .vms
            .into_iter()
            .map(|spec| Vm {
                slots: config.preset.slots_for(spec.high_memory_bytes),
                state: State::NotArrived,
                position: None,
                pending_ns: 0,
                outcome: VmOutcome {
                    name: spec.name.clone(),
                    workload: spec.workload.name,
                    slots: config.preset.slots_for(spec.high_memory_bytes),
                    start_ns: spec.start_ns,
                    end_ns: spec.start_ns,
                    frames: 0,
                    gpu_ns: 0,
                    switch_ins: 0,
                    moves: 0,
                    error: None,
                },
                spec,
                busy_in_sample_ns: 0,
                samples: VecDeque::new(),
                last_busy_ns: 0,
                idle: false,
                cpu_generation: 0,
            })
            .collect(),
        host: HostCpu::new(config.preset.host_threads),
        cpu_ends: Vec::new(),
        preset: config.preset,
        residents: Vec::new(),
        queue: EventQueue::default(),
        now_ns: 0,
        loaded: None,
        slice: None,
        generation: 0,
        round_robin_next: 0,
        live: 0,
        out: VgpuOutcome::default(),
    };
    for (v, vm) in sim.vms.iter().enumerate() {
        sim.queue.push(vm.spec.start_ns, Event::Arrive(v));
    }
    sim.queue.push(SAMPLE_NS, Event::Sample);
    if let Some(period) = sim.placement.period_ns() {
        sim.queue.push(period, Event::Periodic);
    }
    let mut events = 0u64;
    while let Some((time_ns, event)) = sim.queue.pop() {
        if time_ns > config.max_sim_ns {
            return Err(VgpuError::Limit {
                limit_ns: config.max_sim_ns,
            });
        }
        events += 1;
        if events > config.max_events {
            return Err(VgpuError::EventLimit {
                limit: config.max_events,
                now_ns: sim.now_ns,
            });
        }
        sim.now_ns = time_ns;
        match event {
            Event::Arrive(v) => sim.arrive(v),
            Event::Leave(v) => sim.leave(v),
            Event::FrameReady(v, g) if g == sim.vms[v].cpu_generation => sim.frame_ready(v),
            Event::FrameReady(..) => {}
            Event::SliceEnd(g) if g == sim.generation => sim.slice_end(),
            Event::SliceEnd(_) => {}
            Event::SwitchDone(n) if n == sim.out.switches => sim.switch_done(),
            Event::SwitchDone(_) => {}
            Event::Sample => sim.sample(),
            Event::Periodic => sim.periodic(),
        }
        sim.schedule_gpu();
    }
    sim.out.makespan_ns = sim.vms.iter().map(|v| v.outcome.end_ns).max().unwrap_or(0);
    sim.out.vms = sim.vms.into_iter().map(|v| v.outcome).collect();
    Ok(sim.out)
}

impl Sim {
    /// Whether any VM has arrived or is still to arrive: the periodic events stop after
    /// the last one leaves.
    fn anyone_left(&self) -> bool {
        self.vms.iter().any(|v| v.state != State::Done)
    }

    /// The space as `demands` at `positions` hold it.
    fn space<'a>(&self, demands: &'a [Demand], positions: &'a [u32]) -> Space<'a> {
        Space {
            total: self.total_slots,
            residents: demands,
            positions,
        }
    }

    fn demands(&self, vms: &[usize]) -> (Vec<Demand>, Vec<u32>) {
        vms.iter()
            .map(|&v| {
                let vm = &self.vms[v];
                let utilization = if vm.samples.is_empty() {
                    0.0
                } else {
                    vm.samples.iter().sum::<f64>() / vm.samples.len() as f64
                };
                (
                    Demand {
                        slots: vm.slots,
                        utilization,
                    },
                    vm.position.unwrap_or(0),
                )
            })
            .unzip()
    }

    /// Places `v` among the residents; false if the algorithm (or gVirt's partitioned
    /// low memory) refuses it.
    fn place(&mut self, v: usize) -> Result<(), String> {
        if self.entry.partitions_low_memory
            && self.residents.len() as u32 >= self.preset.partitioned_vgpus_max
        {
            return Err(format!(
                "{}: low graphics memory is partitioned, and {} vGPUs already hold it",
                self.entry.name, self.preset.partitioned_vgpus_max
            ));
        }
        let (demands, positions) = self.demands(&self.residents.clone());
        let new = Demand {
            slots: self.vms[v].slots,
            utilization: 0.0,
        };
        let space = self.space(&demands, &positions);
        let next = self
            .placement
            .arrive(space, new)
            .map_err(|e| format!("{}: {e}", self.entry.name))?;
        self.residents.push(v);
        self.apply(&next);
        Ok(())
    }

    /// Gives the residents the positions `next` (in residents' order), counting moves:
    /// a moved vGPU's old slots no longer hold its entries.
    fn apply(&mut self, next: &[u32]) {
        let mut moved = false;
        for (i, &v) in self.residents.clone().iter().enumerate() {
            let old = self.vms[v].position;
            if old.is_some() && old != Some(next[i]) {
                moved = true;
                self.vms[v].outcome.moves += 1;
                self.forget_slots(v);
            }
            self.vms[v].position = Some(next[i]);
        }
        self.out.reallocations += u64::from(moved);
    }

    /// `v`'s translation entries are no longer where they were: the physical slots it
    /// held hold nobody's, and its context must be switched in again (with its copies)
    /// even if it was the one loaded.
    fn forget_slots(&mut self, v: usize) {
        for h in self.holder.iter_mut().filter(|h| **h == Some(v)) {
            *h = None;
        }
        if self.loaded == Some(v) {
            self.loaded = None;
        }
    }

    /// Takes `v` out of the placement (it left, or went idle holding slots alone).
    fn unplace(&mut self, v: usize) {
        let Some(at) = self.residents.iter().position(|r| *r == v) else {
            return;
        };
        let held_alone = self.holds_alone(v);
        self.residents.remove(at);
        self.vms[v].position = None;
        self.forget_slots(v);
        let (demands, positions) = self.demands(&self.residents.clone());
        let space = self.space(&demands, &positions);
        if let Some(next) = self.placement.depart(space, held_alone) {
            self.apply(&next);
        }
    }

    /// Whether some slot of `v` is used by no other resident.
    fn holds_alone(&self, v: usize) -> bool {
        let Some(p) = self.vms[v].position else {
            return false;
        };
        (p..p + self.vms[v].slots).any(|slot| {
            !self.residents.iter().any(|&o| {
                o != v
                    && self.vms[o]
                        .position
                        .is_some_and(|q| (q..q + self.vms[o].slots).contains(&slot))
            })
        })
    }

    fn arrive(&mut self, v: usize) {
        self.vms[v].state = State::Running;
        self.vms[v].last_busy_ns = self.now_ns;
        self.live += 1;
        if let Err(e) = self.place(v) {
            self.vms[v].outcome.error = Some(e);
            return self.finish(v);
        }
        let vm = &mut self.vms[v];
        vm.pending_ns = match vm.spec.workload.kind {
            Kind::Frames { gpu_ns, .. } => gpu_ns,
            Kind::Job { gpu_ns } => gpu_ns,
        };
        if let Some(d) = vm.spec.duration_ns {
            self.queue
                .push(self.now_ns.saturating_add(d), Event::Leave(v));
        }
    }

    fn leave(&mut self, v: usize) {
        if self.vms[v].state == State::Running {
            self.finish(v);
        }
    }

    /// Ends `v`: a slice of it in progress is cut short, its slots leave the placement.
    fn finish(&mut self, v: usize) {
        if let Some(slice) = self.slice.take_if(|s| s.vm == v) {
            let ran = self
                .now_ns
                .saturating_sub(slice.starts_ns)
                .min(slice.run_ns);
            self.account(v, ran);
            self.generation += 1;
        }
        self.unplace(v);
        self.host.stop(self.now_ns, v, &mut self.cpu_ends);
        self.schedule_cpu_ends();
        let vm = &mut self.vms[v];
        vm.state = State::Done;
        vm.pending_ns = 0;
        vm.outcome.end_ns = self.now_ns;
        self.live -= 1;
    }

    fn frame_ready(&mut self, v: usize) {
        self.host.stop(self.now_ns, v, &mut self.cpu_ends);
        self.schedule_cpu_ends();
        let vm = &mut self.vms[v];
        if vm.state != State::Running {
            return;
        }
        if let Kind::Frames { gpu_ns, .. } = vm.spec.workload.kind {
            vm.pending_ns += gpu_ns;
        }
        if vm.idle {
            vm.idle = false;
            if vm.position.is_none()
                && let Err(e) = self.place(v)
            {
                self.vms[v].outcome.error = Some(e);
                self.finish(v);
            }
        }
    }

    /// Schedules the CPU-phase ends the host asked for, voiding earlier ones of the
    /// same VMs.
    fn schedule_cpu_ends(&mut self) {
        for (v, end_ns) in self.cpu_ends.drain(..) {
            let vm = &mut self.vms[v];
            vm.cpu_generation += 1;
            self.queue
                .push(end_ns, Event::FrameReady(v, vm.cpu_generation));
        }
    }

    fn account(&mut self, v: usize, ran_ns: u64) {
        let vm = &mut self.vms[v];
        vm.pending_ns -= ran_ns.min(vm.pending_ns);
        vm.outcome.gpu_ns += ran_ns;
        vm.busy_in_sample_ns += ran_ns;
        vm.last_busy_ns = self.now_ns;
    }

    fn slice_end(&mut self) {
        let slice = self.slice.take().expect("a slice runs");
        let v = slice.vm;
        self.account(v, slice.run_ns);
        self.round_robin_next = (v + 1) % self.vms.len();
        if self.vms[v].pending_ns > 0 {
            return;
        }
        match self.vms[v].spec.workload.kind {
            Kind::Frames { cpu_ns, .. } => {
                self.vms[v].outcome.frames += 1;
                self.host.start(self.now_ns, v, cpu_ns, &mut self.cpu_ends);
                self.schedule_cpu_ends();
            }
            Kind::Job { .. } => self.finish(v),
        }
    }

    /// The monitor: a utilization sample per live vGPU; idle detection.
    fn sample(&mut self) {
        for v in 0..self.vms.len() {
            let vm = &mut self.vms[v];
            if vm.state != State::Running {
                continue;
            }
            vm.samples
                .push_back(vm.busy_in_sample_ns as f64 / SAMPLE_NS as f64);
            if vm.samples.len() > WINDOW_SAMPLES {
                vm.samples.pop_front();
            }
            vm.busy_in_sample_ns = 0;
            let unused_ns = self.now_ns.saturating_sub(vm.last_busy_ns);
            let running_now = self.slice.as_ref().is_some_and(|s| s.vm == v);
            if !vm.idle && unused_ns > IDLE_NS && !running_now {
                vm.idle = true;
                // An idle vGPU holding slots alone wastes them: DymGPU's monitor treats
                // it as terminated.
                if self.entry.releases_idle && self.holds_alone(v) {
                    self.unplace(v);
                    self.out.idle_releases += 1;
                }
            }
        }
        if self.anyone_left() {
            self.queue
                .push(self.now_ns.saturating_add(SAMPLE_NS), Event::Sample);
        }
    }

    fn periodic(&mut self) {
        let (demands, positions) = self.demands(&self.residents.clone());
        let space = self.space(&demands, &positions);
        if let Some(next) = self.placement.periodic(space) {
            self.apply(&next);
        }
        if let Some(period) = self.placement.period_ns()
            && self.anyone_left()
        {
            self.queue
                .push(self.now_ns.saturating_add(period), Event::Periodic);
        }
    }

    /// Whether `v` has queued work the GPU may run (XenGT's and gScale's
    /// `vgt_vrings_empty` is false for it, `vgt/render.c`) and is placed.
    fn has_queued_work(&self, v: usize) -> bool {
        let vm = &self.vms[v];
        vm.state == State::Running && vm.pending_ns > 0 && vm.position.is_some()
    }

    /// The next vGPU to run: the first with queued work after the last one run. This is
    /// the choice of the schedulers DymGPU's testbed descends from: XenGT's
    /// `tbs_next_vgt` (`drivers/gpu/drm/i915/vgt/sched.c`, in Intel's XenGT and in
    /// gScale, github.com/mjc0608/gscale) walks the run queue from the current owner to
    /// the next vGPU whose rings are not empty, and GVT-g's `find_busy_vgpu`
    /// (`drivers/gpu/drm/i915/gvt/sched_policy.c`) skips a vGPU without
    /// `vgpu_has_pending_workload`; a guest's work is queued when it writes its ring tail
    /// or ELSP, a trapped MMIO write (`ring_mmio_write_in_rb_mode`, `vgt/render.c`). Two
    /// refinements of those sources are left out, and why is on the DymGPU page:
    /// gScale's round lists (`rebuild_slot_aware_sched_list`: work queued mid-round
    /// waits for the next round) and GVT-g's weighted budgets per 100 ms
    /// (`gvt_balance_timeslice`).
    fn next_with_work(&self) -> Option<usize> {
        let n = self.vms.len();
        (0..n)
            .map(|i| (self.round_robin_next + i) % n)
            .find(|&v| self.has_queued_work(v))
    }

    /// When the GPU is free, switches to the next vGPU with queued work and runs it for
    /// a slice.
    fn schedule_gpu(&mut self) {
        if self.slice.is_some() || self.live == 0 {
            return;
        }
        let Some(v) = self.next_with_work() else {
            return;
        };
        let switch_ns = if self.loaded == Some(v) {
            0
        } else {
            self.switch_to(v)
        };
        let run_ns = self.vms[v].pending_ns.min(self.preset.slice_ns);
        let starts_ns = self.now_ns.saturating_add(switch_ns);
        self.slice = Some(Slice {
            vm: v,
            starts_ns,
            run_ns,
        });
        self.queue.push(
            starts_ns.saturating_add(run_ns),
            Event::SliceEnd(self.generation),
        );
    }

    /// Loads `v`'s context: the fixed cost, the shared low memory slot, and every slot
    /// of `v` whose physical entries are another vGPU's. Returns the time it takes.
    fn switch_to(&mut self, v: usize) -> u64 {
        let entries = self.preset.entries_per_slot();
        let mut copied_entries = if self.entry.partitions_low_memory {
            0
        } else {
            self.preset.low_memory_bytes / self.preset.page_bytes
        };
        let p = self.vms[v].position.expect("a scheduled vGPU is placed");
        for h in &mut self.holder[p as usize..(p + self.vms[v].slots) as usize] {
            if *h != Some(v) {
                *h = Some(v);
                self.out.slot_copies += 1;
                copied_entries += entries;
            }
        }
        let cycles =
            self.preset.switch_fixed_cycles + copied_entries * self.preset.copy_cycles_per_entry;
        self.out.switches += 1;
        self.out.entries_copied += copied_entries;
        self.out.switch_cycles += cycles;
        self.vms[v].outcome.switch_ins += 1;
        self.loaded = Some(v);
        let switch_ns = (cycles as f64 / self.preset.cpu_hz * 1e9).round() as u64;
        // The mediator's thread is busy for the whole switch (see `cpu`).
        self.host.mediate(self.now_ns, true, &mut self.cpu_ends);
        self.schedule_cpu_ends();
        self.queue.push(
            self.now_ns.saturating_add(switch_ns),
            Event::SwitchDone(self.out.switches),
        );
        switch_ns
    }

    /// The mediator's switch is done: its thread goes back to the VMs.
    fn switch_done(&mut self) {
        self.host.mediate(self.now_ns, false, &mut self.cpu_ends);
        self.schedule_cpu_ends();
    }
}

#[cfg(test)]
mod tests;
