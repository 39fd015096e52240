//! What tenants do on the GPU (issue 40): their progress per report window, each
//! tenant's slowdown estimate from it, and the touch marks of its buffers.
//!
//! A tenant's *rate* is the work its launches completed (grid blocks, or launches where
//! the driver counts no blocks) per nanosecond of a report window. Its *best* rate is
//! the highest it reached while none of its memory was remote (no chunk in host memory,
//! or it held the GPU under turns, which gives it all the VRAM it may have). Its
//! *speed* is its latest rate over its best (at most 1), its *estimate* the inverse: how
//! many times slower than its best it runs now.
//!
//! The estimate measures a tenant against itself, so a tenant cannot make another look
//! slow; one that lies about its own progress only moves its own speed (up to 1, as a
//! speed never counts above its best), and the choice it can sway is only between two
//! fair ways of sharing (turns keep a quantum for everyone).

use std::collections::HashMap;

use crate::ids::{BufferId, TenantId};

/// A tenant's GPU work over one report window, as its driver counted it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The window's length.
    pub window_ns: u64,
    /// Kernel launches started in the window.
    pub launches: u64,
    /// Their grid blocks.
    pub blocks: u64,
    /// Launches known complete in the window.
    pub completed: u64,
    /// Grid blocks of the launches known complete.
    pub completed_blocks: u64,
    /// Time the program waited in synchronizations in the window.
    pub sync_wait_ns: u64,
    /// Whether it had nothing running or queued at the window's end.
    pub idle: bool,
}

impl Progress {
    /// The window's work: its completed blocks, or its completed launches where the
    /// driver counts no blocks.
    fn work(&self) -> u64 {
        if self.completed_blocks > 0 {
            self.completed_blocks
        } else {
            self.completed
        }
    }
}

/// The shortest window a rate is taken from: shorter ones (a report right after a
/// connection, a late report's remainder) say more about timing noise than about work.
/// A design choice: a tenth of the interposer's 100 ms report period.
pub const MIN_WINDOW_NS: u64 = 10_000_000;

/// How old a tenant's latest rate may be and still speak for it: two and a half report
/// periods of 100 ms, so one late or lost report does not blind the choice. A design
/// choice.
pub const FRESH_NS: u64 = 250_000_000;

/// The largest estimate shown or used: a tenant that completes nothing is "at least this
/// much slower" (a number, where its true slowdown is unbounded).
pub const MAX_ESTIMATE: f64 = 1000.0;

/// How much recent time a rate averages over: windows are summed until they pass this,
/// then the sums halve, so a rate speaks for about the last 400-800 ms. One window of
/// 100 ms says little where a kernel runs longer than it (a window that completes none
/// reads as no progress). A design choice.
pub const SMOOTH_NS: f64 = 800_000_000.0;

/// One tenant's rates.
#[derive(Clone, Copy, Debug, Default)]
struct Rates {
    /// Work per ns at its best (0: not yet measured).
    best: f64,
    /// Its latest rate and when that window ended.
    latest: Option<(f64, u64)>,
    /// Recent work and time, decaying ([`SMOOTH_NS`]), and whether they were taken with
    /// the least remote memory.
    work: f64,
    window_ns: f64,
    least_remote: bool,
}

/// Every tenant's rates, touch marks, and since when the GPU's arrangement has been
/// settled (windows that overlap a turn's job measure the job, not the arrangement).
#[derive(Debug, Default)]
pub(crate) struct Estimates {
    rates: Vec<Rates>,
    /// When each buffer was last named by a launch (absent: never).
    touched_ns: HashMap<BufferId, u64>,
    /// Windows that start before this count for nothing.
    settled_since_ns: u64,
}

impl Estimates {
    /// `tenant`'s window ending at `now_ns`; `least_remote`: none of its memory was
    /// remote, or as little as it may have (it holds the GPU).
    pub(crate) fn record(
        &mut self,
        tenant: TenantId,
        progress: &Progress,
        now_ns: u64,
        least_remote: bool,
    ) {
        let start_ns = now_ns.saturating_sub(progress.window_ns);
        if progress.window_ns < MIN_WINDOW_NS || start_ns < self.settled_since_ns {
            return;
        }
        let i = tenant.0 as usize;
        if self.rates.len() <= i {
            self.rates.resize(i + 1, Rates::default());
        }
        let r = &mut self.rates[i];
        if r.least_remote != least_remote {
            (r.work, r.window_ns, r.least_remote) = (0.0, 0.0, least_remote);
        }
        r.work += progress.work() as f64;
        r.window_ns += progress.window_ns as f64;
        let rate = r.work / r.window_ns;
        if r.window_ns > SMOOTH_NS {
            r.work /= 2.0;
            r.window_ns /= 2.0;
        }
        r.latest = Some((rate, now_ns));
        if least_remote && rate > r.best {
            r.best = rate;
        }
    }

    /// `buffers` were named by `tenant`'s launches in a window ending at `now_ns`.
    pub(crate) fn touch(&mut self, buffers: &[BufferId], now_ns: u64) {
        for b in buffers {
            self.touched_ns.insert(*b, now_ns);
        }
    }

    /// When `buffer` was last touched (`None`: never).
    pub(crate) fn touched_ns(&self, buffer: BufferId) -> Option<u64> {
        self.touched_ns.get(&buffer).copied()
    }

    /// Whether any touch marks came in: the driver supplies them.
    pub(crate) fn has_touch_marks(&self) -> bool {
        !self.touched_ns.is_empty()
    }

    /// `buffer` is gone.
    pub(crate) fn forget_buffer(&mut self, buffer: BufferId) {
        self.touched_ns.remove(&buffer);
    }

    /// `tenant` exited: its rates go (its number is recycled).
    pub(crate) fn forget(&mut self, tenant: TenantId) {
        if let Some(r) = self.rates.get_mut(tenant.0 as usize) {
            *r = Rates::default();
        }
    }

    /// The arrangement changed at `now_ns` (a turn's job ended): earlier windows no
    /// longer speak for it.
    pub(crate) fn unsettle(&mut self, now_ns: u64) {
        self.settled_since_ns = self.settled_since_ns.max(now_ns);
        for r in &mut self.rates {
            (r.latest, r.work, r.window_ns) = (None, 0.0, 0.0);
        }
    }

    /// `tenant`'s speed at `now_ns`: its latest rate over its best, at most 1; `None`
    /// without a best or a fresh rate.
    pub(crate) fn speed(&self, tenant: TenantId, now_ns: u64) -> Option<f64> {
        let r = self.rates.get(tenant.0 as usize)?;
        let (rate, at_ns) = r.latest?;
        (r.best > 0.0 && now_ns.saturating_sub(at_ns) <= FRESH_NS).then(|| (rate / r.best).min(1.0))
    }

    /// Whether `tenant`'s best rate is measured.
    pub(crate) fn measured(&self, tenant: TenantId) -> bool {
        self.rates
            .get(tenant.0 as usize)
            .is_some_and(|r| r.best > 0.0)
    }

    /// `tenant`'s slowdown estimate: its best rate over its latest, from 1 up to
    /// [`MAX_ESTIMATE`]; `None` before it has both.
    pub(crate) fn estimate(&self, tenant: TenantId) -> Option<f64> {
        let r = self.rates.get(tenant.0 as usize)?;
        let (rate, _) = r.latest?;
        if r.best <= 0.0 {
            return None;
        }
        Some(if rate <= 0.0 {
            MAX_ESTIMATE
        } else {
            (r.best / rate).clamp(1.0, MAX_ESTIMATE)
        })
    }
}
