//! MAdvise (throttling by hints, no preemption): when a tenant's running kernel has
//! more active memory than its quota, its further memory is advised to the host
//! (accessed remotely; what is in VRAM stays until evicted, lazily). The advice is
//! lifted once its kernel has finished and the running kernels' active memory leaves
//! room for the quota again.
//!
//! PILOT leaves the quota to the user. Given one (`quota`), it is a fixed size per
//! tenant. Without one, the quota is what VRAM the other running kernels' active memory
//! leaves: a tenant is throttled only when its kernel is the most active one and the
//! running kernels not yet advised together oversubscribe VRAM (an advised tenant's
//! pages are evicted without coming back, so they do not count). An even split of VRAM would throttle a
//! tenant that needs more than its split even when the device has room (at 75 %
//! subscription, say), where throttling only costs.

use super::contract::{Decisions, KernelState, SchedulingPolicy, TenantSched, View};

/// The MAdvise policy.
#[derive(Debug)]
pub(super) struct MAdvise {
    /// `None`: what the other running kernels leave.
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
        let active: u64 = view.running().map(|(_, t)| t.active_bytes).sum();
        let running =
            |t: &TenantSched| matches!(t.state, KernelState::Running | KernelState::Stopping);
        match self.quota_bytes {
            Some(quota) => {
                for (i, t) in view.tenants.iter().enumerate() {
                    if running(t) && !t.advised && t.active_bytes > quota {
                        out.advise.push((i, true));
                    }
                }
            }
            None => {
                // An advised tenant's pages in VRAM do not contend: evicted, they are
                // read remotely, never faulted back. The others oversubscribe or not.
                let contending = || view.running().filter(|(_, t)| !t.advised);
                let active: u64 = contending().map(|(_, t)| t.active_bytes).sum();
                let most =
                    contending().max_by_key(|&(i, t)| (t.active_bytes, std::cmp::Reverse(i)));
                if let (Some((i, _)), true) = (most, active > view.capacity_bytes) {
                    out.advise.push((i, true));
                }
            }
        }
        let quota = self.quota_bytes.unwrap_or(0);
        for (i, t) in view.tenants.iter().enumerate() {
            if !running(t) && t.advised && active.saturating_add(quota) <= view.capacity_bytes {
                out.advise.push((i, false));
            }
        }
    }
}
