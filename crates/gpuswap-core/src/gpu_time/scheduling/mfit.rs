//! MFit (memory fit): a kernel starts only when free VRAM holds its allocation
//! footprint, or when nothing else runs; a kernel that has waited `max_wait` gets room
//! by preempting running kernels, largest footprint first, until it fits.

use super::contract::{Decisions, KernelState, SchedulingPolicy, View};

/// The MFit policy.
#[derive(Debug)]
pub(super) struct MFit {
    max_wait_ns: u64,
}

impl MFit {
    pub(super) fn new(max_wait_ns: u64) -> Self {
        Self { max_wait_ns }
    }
}

/// VRAM the running kernels' footprints leave: with `stopping` those asked to stop
/// still count (they hold it until their next check), without they count as gone.
fn free_bytes(view: &View, stopping: bool) -> u64 {
    let held: u64 = view
        .running()
        .filter(|(_, t)| stopping || t.state == KernelState::Running)
        .map(|(_, t)| t.footprint_bytes)
        .sum();
    view.capacity_bytes.saturating_sub(held)
}

impl SchedulingPolicy for MFit {
    fn admit(&mut self, view: &View, tenant: usize) -> bool {
        // Those who waited longer go first.
        let first = view.waiting().first().map(|w| w.0);
        view.running().next().is_none()
            || (first == Some(tenant)
                && view.tenants[tenant].footprint_bytes <= free_bytes(view, true))
    }

    fn decide(&mut self, view: &View, out: &mut Decisions) {
        let Some((tenant, since_ns)) = view.waiting().first().copied() else {
            return;
        };
        let need = view.tenants[tenant].footprint_bytes;
        if view.running().next().is_none() || need <= free_bytes(view, true) {
            return out.start.push(tenant);
        }
        if view.now_ns.saturating_sub(since_ns) < self.max_wait_ns {
            return;
        }
        // Waited its cap: stop running kernels, largest footprint first, until it fits.
        let mut running: Vec<(u64, usize)> = view
            .preemptible()
            .map(|(i, t)| (t.footprint_bytes, i))
            .collect();
        running.sort_by(|a, b| b.cmp(a));
        let mut free = free_bytes(view, false);
        for (bytes, i) in running {
            if need <= free {
                break;
            }
            out.preempt.push(i);
            free += bytes;
        }
    }

    fn next_timeout(&self, view: &View) -> Option<u64> {
        view.waiting()
            .first()
            .map(|w| w.1.saturating_add(self.max_wait_ns))
    }
}
