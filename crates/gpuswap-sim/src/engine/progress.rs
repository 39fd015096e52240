//! The device's progress reports (issue 40): what each tenant's kernels completed in a
//! report window and which buffers they touched, told to the manager every
//! [`PROGRESS_REPORT_NS`] as the interposer tells the daemon, where the manager wants
//! them (`Needs::progress`: `gpu_time = "auto"`). So one policy reads the same kind of
//! input from both drivers.

use gpuswap_core::BufferId;
use gpuswap_core::gpu_time::Progress;

use super::{Engine, Event};

/// How often busy tenants report: the daemon's 100 ms (its `PROGRESS_REPORT_NS`).
pub(super) const PROGRESS_REPORT_NS: u64 = 100_000_000;

/// Threads a grid block holds, to count a kernel's blocks from its threads: 256, a
/// common block size (NVIDIA's CUDA C++ Best Practices Guide suggests 128-256). Only a
/// unit: each tenant's rate is compared with its own.
const THREADS_PER_BLOCK: u64 = 256;

/// What one tenant's kernels did since its last report.
#[derive(Debug, Default)]
pub(super) struct Tally {
    completed: u64,
    blocks: u64,
    touched: Vec<BufferId>,
    since_ns: u64,
}

impl Engine {
    /// Tenant `t`'s kernel launched at `site` completed: its blocks and buffers count in
    /// the tenant's window.
    pub(super) fn tally_kernel(&mut self, t: usize, site: usize) {
        let kernel = std::rc::Rc::clone(self.tenants[t].kernel_at(site));
        let slots = &self.tenants[t].slots;
        let tally = &mut self.tallies[t];
        tally.completed += 1;
        tally.blocks += kernel.outer_loop.threads.div_ceil(THREADS_PER_BLOCK).max(1);
        for access in &kernel.accesses {
            if let Some(b) = slots[access.slot]
                && !tally.touched.contains(&b)
            {
                tally.touched.push(b);
            }
        }
    }

    /// Every tenant with GPU work, or work completed, reports its window; the next
    /// reports are due while any tenant runs.
    pub(super) fn report_progress(&mut self) {
        for t in 0..self.tenants.len() {
            let tally = &mut self.tallies[t];
            if tally.completed == 0 && !self.tenants[t].busy_said {
                tally.since_ns = self.now_ns;
                continue;
            }
            let tally = std::mem::take(tally);
            let progress = Progress {
                window_ns: self.now_ns - tally.since_ns,
                launches: tally.completed,
                blocks: tally.blocks,
                completed: tally.completed,
                completed_blocks: tally.blocks,
                sync_wait_ns: 0,
                idle: !self.tenants[t].busy_said,
            };
            self.tallies[t].since_ns = self.now_ns;
            let id = self.tenants[t].id;
            self.manager
                .handle_progress(id, &progress, &tally.touched, self.now_ns);
            self.apply_actions();
        }
        if self.done < self.tenants.len() {
            self.schedule(self.now_ns + PROGRESS_REPORT_NS, Event::ProgressReport);
        }
    }
}
