//! AMFit (active memory fit): kernels start at once; when the running kernels' active
//! memory (pages they migrated) exceeds VRAM, those with the most are preempted until
//! the rest fits, and a preempted kernel runs again only when VRAM it had fits beside
//! the running kernels' active memory, or once it has waited `max_wait` (against
//! starvation).

use super::contract::{Decisions, KernelState, SchedulingPolicy, View};

/// The AMFit policy.
#[derive(Debug)]
pub(super) struct AMFit {
    max_wait_ns: u64,
}

impl AMFit {
    pub(super) fn new(max_wait_ns: u64) -> Self {
        Self { max_wait_ns }
    }
}

/// The running kernels' active memory, stopping ones counted as gone.
fn active_bytes(view: &View) -> u64 {
    view.running()
        .filter(|(_, t)| t.state == KernelState::Running)
        .map(|(_, t)| t.active_bytes)
        .sum()
}

/// Whether a waiting kernel may run now, beside kernels just granted `granted_bytes` of
/// active memory.
fn may_run(
    view: &View,
    tenant: usize,
    since_ns: u64,
    max_wait_ns: u64,
    granted_bytes: u64,
) -> bool {
    let t = &view.tenants[tenant];
    let preempted = matches!(
        t.state,
        KernelState::Waiting {
            preempted: true,
            ..
        }
    );
    !preempted
        || (view.running().next().is_none() && granted_bytes == 0)
        || active_bytes(view)
            .saturating_add(granted_bytes)
            .saturating_add(t.active_bytes)
            <= view.capacity_bytes
        || view.now_ns.saturating_sub(since_ns) >= max_wait_ns
}

impl SchedulingPolicy for AMFit {
    fn admit(&mut self, view: &View, tenant: usize) -> bool {
        match view.tenants[tenant].state {
            KernelState::Waiting { since_ns, .. } => {
                may_run(view, tenant, since_ns, self.max_wait_ns, 0)
            }
            _ => true,
        }
    }

    fn decide(&mut self, view: &View, out: &mut Decisions) {
        // Oversubscribed by active memory: stop the most active until the rest fits (a
        // kernel alone is left to its own oversubscription; re-runs are not stopped).
        let mut running = view
            .running()
            .filter(|(_, t)| t.state == KernelState::Running)
            .count();
        let mut active = active_bytes(view);
        if running > 1 && active > view.capacity_bytes {
            let mut victims: Vec<(u64, usize)> = view
                .preemptible()
                .map(|(i, t)| (t.active_bytes, i))
                .collect();
            victims.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            for (bytes, i) in victims {
                if running < 2 || active <= view.capacity_bytes {
                    break;
                }
                out.preempt.push(i);
                active -= bytes;
                running -= 1;
            }
            return;
        }
        // Those granted here count against the room of those after them.
        let mut granted_bytes = 0;
        for (tenant, since_ns) in view.waiting() {
            if may_run(view, tenant, since_ns, self.max_wait_ns, granted_bytes) {
                out.start.push(tenant);
                granted_bytes += view.tenants[tenant].active_bytes;
            }
        }
    }

    fn next_timeout(&self, view: &View) -> Option<u64> {
        view.waiting()
            .iter()
            .map(|w| w.1.saturating_add(self.max_wait_ns))
            .min()
    }
}
