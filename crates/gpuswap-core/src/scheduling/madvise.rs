//! MAdvise (throttling by hints, no preemption): each tenant has a VRAM quota; when
//! its running kernel's active memory exceeds it, its further memory is advised to the
//! host (accessed remotely; what is in VRAM stays until evicted, lazily). The advice is
//! lifted once its kernel has finished and VRAM beside the running kernels' active
//! memory holds a quota again.

use super::{Decisions, KernelState, SchedulingPolicy, View};

/// The MAdvise policy.
#[derive(Debug)]
pub(super) struct MAdvise {
    /// `None`: an even share of VRAM per tenant known.
    quota_bytes: Option<u64>,
}

impl MAdvise {
    pub(super) fn new(quota_bytes: Option<u64>) -> Self {
        Self { quota_bytes }
    }
}

impl SchedulingPolicy for MAdvise {
    fn admit(&mut self, _: &View, _: usize) -> bool {
        true
    }

    fn decide(&mut self, view: &View, out: &mut Decisions) {
        let quota = self
            .quota_bytes
            .unwrap_or(view.capacity_bytes / view.tenants.len().max(1) as u64);
        let active: u64 = view.running().map(|(_, t)| t.active_bytes).sum();
        for (i, t) in view.tenants.iter().enumerate() {
            let running = matches!(t.state, KernelState::Running | KernelState::Stopping);
            if running && !t.advised && t.active_bytes > quota {
                out.advise.push((i, true));
            } else if !running && t.advised && active.saturating_add(quota) <= view.capacity_bytes {
                out.advise.push((i, false));
            }
        }
    }
}
