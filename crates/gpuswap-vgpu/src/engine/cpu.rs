//! The host's CPU, shared by the VMs' CPU work between frames.
//!
//! DymGPU's testbed runs up to 15 VMs on one i7-6700 (4 cores, 8 hardware threads):
//! while more VMs compute between frames than the host has threads, each gets a share of
//! a thread and submits its next frame later. The host is modelled as processor sharing:
//! with `k` VMs computing on `t` threads, each progresses at `min(1, t / k)` of full
//! speed. A VM that submits less often is switched in less often, which is what makes
//! utilization-based placement pay (`../shared/spec/dymgpu.md`: "copy frequency depends
//! on how often a vGPU is switched in, which follows its utilization").
//!
//! Cost follows events: while no more VMs compute than there are threads, a VM's CPU
//! phase ends `cpu_ns` after it starts and nothing else is touched; only a change of the
//! shared rate re-times the computing VMs' ends.
//!
//! The mediator runs on the same host. XenGT (and gScale on it) switches vGPUs in Dom0's
//! `vgt_thread` (`drivers/gpu/drm/i915/vgt/vgt.c`), and `vgt_do_render_context_switch`
//! (`vgt/render.c`) does the whole switch, ring idle waits and register save and
//! restore, on that CPU under `vgt_lock_dev` (a spinlock taken with interrupts off),
//! timing it in TSC cycles; gScale's copies of the private tables at the switch (its
//! paper's design; their code was not among the files read) are counted with it. So while a switch is in progress one
//! hardware thread is the mediator's, not the VMs' ([`HostCpu::mediate`]). The
//! mediator's other work, emulating each trapped MMIO access (a guest's ring tail write
//! is one per submission, `ring_mmio_write_in_rb_mode`, which also scans the new
//! commands), is not charged: XenGT counts its cycles (`ring_tail_mmio_wcycles`) but no
//! source read gives a figure.

/// Processor sharing of the host's hardware threads among computing VMs.
#[derive(Debug)]
pub(super) struct HostCpu {
    threads: u32,
    /// Whether the mediator holds a thread for a vGPU switch.
    mediating: bool,
    /// CPU time each computing VM has received since the simulation began (every
    /// computing VM receives the same): advances at the shared rate.
    received_ns: f64,
    /// When `received_ns` was last brought up to date.
    at_ns: u64,
    /// Computing VMs and the value of `received_ns` at which each is done.
    computing: Vec<(usize, f64)>,
}

impl HostCpu {
    /// A host with `threads` hardware threads and nobody computing.
    pub(super) fn new(threads: u32) -> Self {
        Self {
            threads: threads.max(1),
            mediating: false,
            received_ns: 0.0,
            at_ns: 0,
            computing: Vec::new(),
        }
    }

    /// The share of a thread each of `k` computing VMs gets. A switching mediator
    /// holds one of the threads; a one-thread host keeps its thread for the VMs (the
    /// model has no rate of zero).
    fn rate(&self, k: usize) -> f64 {
        let threads = if self.mediating {
            (self.threads - 1).max(1)
        } else {
            self.threads
        };
        if k <= threads as usize {
            1.0
        } else {
            f64::from(threads) / k as f64
        }
    }

    fn advance(&mut self, now_ns: u64) {
        let rate = self.rate(self.computing.len());
        self.received_ns += now_ns.saturating_sub(self.at_ns) as f64 * rate;
        self.at_ns = now_ns;
    }

    /// When the VM that is done at `done_at` finishes at the current rate.
    fn end_ns(&self, done_at: f64) -> u64 {
        let left = (done_at - self.received_ns).max(0.0);
        self.at_ns
            .saturating_add((left / self.rate(self.computing.len())).round() as u64)
    }

    /// Re-times every computing VM's end into `ends` if the rate changed from `before`.
    fn retime(&self, before: f64, ends: &mut Vec<(usize, u64)>) {
        if self.rate(self.computing.len()) != before {
            ends.extend(self.computing.iter().map(|&(v, at)| (v, self.end_ns(at))));
        }
    }

    /// `v` starts `cpu_ns` of CPU work at `now_ns`. Pushes into `ends` the (VM, end
    /// time) pairs to schedule: `v`'s, and every other computing VM's if the shared rate
    /// changed. An end scheduled earlier for a VM in `ends` is void.
    pub(super) fn start(
        &mut self,
        now_ns: u64,
        v: usize,
        cpu_ns: u64,
        ends: &mut Vec<(usize, u64)>,
    ) {
        self.advance(now_ns);
        let before = self.rate(self.computing.len());
        let done_at = self.received_ns + cpu_ns as f64;
        self.computing.push((v, done_at));
        if self.rate(self.computing.len()) == before {
            ends.push((v, self.end_ns(done_at)));
        } else {
            self.retime(before, ends);
        }
    }

    /// The mediator starts (`true`) or ends (`false`) a vGPU switch at `now_ns`, taking
    /// one hardware thread from the VMs meanwhile. Pushes into `ends` the new end times
    /// of the computing VMs if the shared rate changed.
    pub(super) fn mediate(&mut self, now_ns: u64, switching: bool, ends: &mut Vec<(usize, u64)>) {
        if self.mediating == switching {
            return;
        }
        self.advance(now_ns);
        let before = self.rate(self.computing.len());
        self.mediating = switching;
        self.retime(before, ends);
    }

    /// `v` stops computing at `now_ns` (its work is done, or it left). Pushes into `ends`
    /// the new end times of the others if the shared rate changed.
    pub(super) fn stop(&mut self, now_ns: u64, v: usize, ends: &mut Vec<(usize, u64)>) {
        let Some(i) = self.computing.iter().position(|&(c, _)| c == v) else {
            return;
        };
        self.advance(now_ns);
        let before = self.rate(self.computing.len());
        self.computing.swap_remove(i);
        self.retime(before, ends);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs starts and stops in time order; returns each VM's end as last scheduled.
    fn ends_of(cpu: &mut HostCpu, starts: &[(u64, usize, u64)]) -> Vec<u64> {
        let mut last = vec![0; starts.len()];
        let mut ends = Vec::new();
        for &(at, v, work) in starts {
            cpu.start(at, v, work, &mut ends);
            for (v, end) in ends.drain(..) {
                last[v] = end;
            }
        }
        last
    }

    #[test]
    fn within_the_threads_nobody_slows() {
        let mut cpu = HostCpu::new(8);
        let starts: Vec<_> = (0..8).map(|v| (v as u64 * 10, v, 1_000)).collect();
        let ends = ends_of(&mut cpu, &starts);
        assert_eq!(ends, (0..8).map(|v| v * 10 + 1_000).collect::<Vec<u64>>());
    }

    #[test]
    fn sixteen_vms_on_eight_threads_take_twice_as_long() {
        let mut cpu = HostCpu::new(8);
        let starts: Vec<_> = (0..16).map(|v| (0, v, 1_000)).collect();
        let ends = ends_of(&mut cpu, &starts);
        assert!(ends.iter().all(|&e| e == 2_000), "{ends:?}");
    }

    #[test]
    fn a_vm_that_stops_speeds_the_others_up() {
        // Three VMs on two threads: each at 2/3. At 300 ns one stops; the other two have
        // 800 ns of work left, now at full speed: done at 1100 ns.
        let mut cpu = HostCpu::new(2);
        let mut ends = Vec::new();
        for v in 0..3 {
            cpu.start(0, v, 1_000, &mut ends);
        }
        ends.clear();
        cpu.stop(300, 2, &mut ends);
        ends.sort();
        assert_eq!(ends, [(0, 1_100), (1, 1_100)]);
    }

    #[test]
    fn a_switch_takes_a_thread_from_the_vms() {
        // Two VMs on two threads at full speed until the mediator switches at 400 ns:
        // then they share one thread (half speed) until it is done at 600 ns. Each has
        // 1000 - 400 - 100 = 500 ns left then: done at 1100 ns.
        let mut cpu = HostCpu::new(2);
        let mut ends = Vec::new();
        cpu.start(0, 0, 1_000, &mut ends);
        cpu.start(0, 1, 1_000, &mut ends);
        ends.clear();
        cpu.mediate(400, true, &mut ends);
        assert_eq!(ends, [(0, 1_600), (1, 1_600)]);
        ends.clear();
        cpu.mediate(600, false, &mut ends);
        assert_eq!(ends, [(0, 1_100), (1, 1_100)]);
    }

    #[test]
    fn a_stop_within_the_threads_re_times_nobody() {
        let mut cpu = HostCpu::new(8);
        let mut ends = Vec::new();
        cpu.start(0, 0, 1_000, &mut ends);
        cpu.start(0, 1, 1_000, &mut ends);
        ends.clear();
        cpu.stop(500, 0, &mut ends);
        assert!(ends.is_empty());
    }
}
