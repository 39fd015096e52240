//! Time slicing with compute preemption between contexts (`Sharing::Preemptive`), as
//! GPUs do since Pascal: one context at a time runs its kernels back to back for up
//! to a slice while it has work; when its slice ends and another context waits, the
//! GPU preempts it, even in the middle of a kernel, saves its state
//! ([`TimeSlicing::preemption_cost_ns`] of device time in which nothing runs) and runs
//! the next context's for theirs. The preempted kernel resumes where it stopped when
//! its context's turn comes again (nothing is lost, unlike PILOT's preemption).
//!
//! A kernel that cannot end within what is left of its context's slice (its time
//! alone: its fixed part, or its link bytes at the link's peak, whichever is longer)
//! runs in pieces, each its even share of the fixed part and of the link bytes over
//! the slice's rest; a slow remote-reading kernel so holds the GPU for a slice at a
//! time, not for its whole length. Not modelled: unified-memory kernels (their fault
//! batches) and kernels behind Gdev's software scheduler run whole, as under
//! `Sharing::TimeSlice`; a piece whose link share is slowed by other flows runs past
//! its slice's end.

use super::*;
use crate::preset::TimeSlicing;

/// The slices' state: whose slice runs, until when, and the kernels preempted mid-way.
#[derive(Default)]
pub(super) struct Slices {
    /// The context whose slice runs, and when the slice ends.
    holder: Option<(usize, u64)>,
    /// Kernels preempted mid-way, at most one per context: they resume where they
    /// stopped, before their context's queued launches.
    pub(super) parked: Vec<RunningKernel>,
    /// The kernels that run in pieces (running or parked), at most one per context:
    /// kept here, not in `RunningKernel`, which must stay small.
    pub(super) runs: Vec<(LaunchId, SlicedRun)>,
}

impl Slices {
    /// Whether tenant `t` has a preempted kernel waiting to resume.
    pub(super) fn has_parked(&self, t: usize) -> bool {
        self.parked.iter().any(|k| k.tenant == t)
    }

    /// Whether `launch` runs in pieces.
    pub(super) fn is_sliced(&self, launch: LaunchId) -> bool {
        !self.runs.is_empty() && self.runs.iter().any(|r| r.0 == launch)
    }

    /// The pieces of `launch`.
    fn run_mut(&mut self, launch: LaunchId) -> &mut SlicedRun {
        let run = self.runs.iter_mut().find(|r| r.0 == launch);
        &mut run.expect("a sliced kernel").1
    }
}

/// A kernel that runs in pieces of at most a slice: what the whole takes alone, and
/// how much of it is done.
pub(super) struct SlicedRun {
    /// The whole kernel's fixed part at the full device.
    fixed_ns: f64,
    /// The whole kernel's link bytes, each way.
    to_device_bytes: f64,
    to_host_bytes: f64,
    /// The whole kernel's time alone: its fixed part or its link bytes at the link's
    /// peak, whichever is longer.
    alone_ns: f64,
    /// The share done before the current piece.
    done: f64,
    /// The current piece's share.
    piece: f64,
    /// The kernel was preempted: the fixed part running now is its state's save.
    saving: bool,
}

/// Shares below this are rounding: the kernel is done.
const DONE_SLACK: f64 = 1e-9;

impl Engine {
    /// The device's time slicing, where it shares by preemptive slices outside Gdev's
    /// software scheduler (which takes whole kernels in turn).
    fn time_slicing(&self) -> Option<TimeSlicing> {
        match self.compute.sharing {
            Sharing::Preemptive(slicing) if !self.needs.launch_gating => Some(slicing),
            _ => None,
        }
    }

    /// Nothing runs: the slice's holder goes on while its slice lasts and it has
    /// work; else the next context with work in the round robin gets a new slice. A
    /// context's preempted kernel resumes before its queued launches.
    pub(super) fn start_sliced(&mut self, slicing: TimeSlicing) {
        let now = self.now_ns;
        let t = match self.compute.slices.holder {
            Some((h, end_ns)) if now < end_ns && self.compute.ready.contains(h) => h,
            _ => {
                let Some(t) = self.compute.ready.next_from(self.compute.round_robin_next) else {
                    return;
                };
                self.compute.slices.holder = Some((t, now.saturating_add(slicing.slice_ns)));
                t
            }
        };
        let parked = &mut self.compute.slices.parked;
        let Some(at) = parked.iter().position(|k| k.tenant == t) else {
            return self.launch_next(t);
        };
        let kernel = parked.swap_remove(at);
        let launch = kernel.launch;
        self.compute.round_robin_next = t + 1;
        if self.tenants[t].channel.is_empty() {
            self.compute.ready.remove(t);
        }
        self.compute.running.push(kernel);
        self.start_piece(launch);
    }

    /// The pieces a kernel of tenant `t` runs in, of `fixed_ns` and `traffic`: `None`
    /// (whole) unless the device slices preemptively, another tenant may want the GPU
    /// and the kernel alone outlasts its context's slice.
    pub(super) fn sliced_run(&self, fixed_ns: u64, traffic: &Traffic) -> Option<SlicedRun> {
        self.time_slicing()?;
        if self.done + 1 >= self.tenants.len() {
            return None;
        }
        let link = &self.preset.link;
        let (to_device_bytes, to_host_bytes) =
            (traffic.link_bytes_to_device(), traffic.link_bytes_to_host());
        let alone_ns = (fixed_ns as f64)
            .max(to_device_bytes / link.h2d_bytes_per_s * 1e9)
            .max(to_host_bytes / link.d2h_bytes_per_s * 1e9);
        if alone_ns <= self.slice_left_ns() as f64 {
            return None;
        }
        Some(SlicedRun {
            fixed_ns: fixed_ns as f64,
            to_device_bytes,
            to_host_bytes,
            alone_ns,
            done: 0.0,
            piece: 0.0,
            saving: false,
        })
    }

    /// What is left of the running slice (at least 1 ns: a piece always moves on).
    fn slice_left_ns(&self) -> u64 {
        let end_ns = self.compute.slices.holder.map_or(0, |h| h.1);
        end_ns.saturating_sub(self.now_ns).max(1)
    }

    /// Runs the next piece of the sliced kernel `launch`: its share of the kernel that
    /// fits in what is left of the slice, its link bytes as flows beside its fixed part.
    pub(super) fn start_piece(&mut self, launch: LaunchId) {
        let left_ns = self.slice_left_ns() as f64;
        let weight = timing::kernel_pending_bytes(&self.preset);
        let now_ns = self.now_ns;
        let run = self.compute.slices.run_mut(launch);
        let rest = 1.0 - run.done;
        let mut piece = (left_ns / run.alone_ns).min(rest);
        if rest - piece < DONE_SLACK {
            piece = rest;
        }
        run.piece = piece;
        let fixed_ns = (run.fixed_ns * piece).ceil() as u64;
        let flows = [
            (Direction::ToDevice, run.to_device_bytes * piece),
            (Direction::ToHost, run.to_host_bytes * piece),
        ];
        let running = self.compute.kernel_mut(launch).expect("the kernel runs");
        running.fixed_done = false;
        let mut started = false;
        for (direction, bytes) in flows {
            if bytes > 0.0 {
                let owner = FlowOwner::Kernel(launch);
                self.flows
                    .start(owner, now_ns, (direction, bytes), None, weight);
                self.compute
                    .kernel_mut(launch)
                    .expect("the kernel runs")
                    .flows_left += 1;
                started = true;
            }
        }
        self.enter_fixed(launch, fixed_ns);
        if started {
            self.rearm_link();
        }
    }

    /// The running kernel at `at`, sliced, ended its piece (or its state's save):
    /// false when the whole kernel is done and ends as any other; else it went on
    /// with its next piece, began its preemption (another context waits and its slice
    /// is over), or was parked after it.
    pub(super) fn piece_done(&mut self, at: usize) -> bool {
        let Some(slicing) = self.time_slicing() else {
            return false;
        };
        let running = &mut self.compute.running[at];
        let (t, launch) = (running.tenant, running.launch);
        running.fixed_done = false;
        let slices = &mut self.compute.slices;
        let slice_over = slices
            .holder
            .is_none_or(|(h, end_ns)| h != t || self.now_ns >= end_ns);
        let run = slices.run_mut(launch);
        if run.saving {
            run.saving = false;
            let kernel = self.compute.running.swap_remove(at);
            self.compute.slices.parked.push(kernel);
            self.compute.ready.insert(t);
            self.start_kernel();
            return true;
        }
        run.done += run.piece;
        run.piece = 0.0;
        if run.done >= 1.0 - DONE_SLACK {
            slices.runs.retain(|r| r.0 != launch);
            self.compute.running[at].fixed_done = true;
            return false;
        }
        let another_waits = self.compute.ready.next_from(t + 1).is_some_and(|u| u != t);
        if slice_over && another_waits {
            run.saving = true;
            self.enter_fixed(launch, slicing.preemption_cost_ns);
            return true;
        }
        if slice_over {
            // Nobody waits: the GPU gives the context a new slice, without a switch.
            let end_ns = self.now_ns.saturating_add(slicing.slice_ns);
            self.compute.slices.holder = Some((t, end_ns));
        }
        self.start_piece(launch);
        true
    }
}
