//! Launch gating: which launches may be prepared and started when. Pass-through (no
//! gating: the device runs what it is given) and Gdev's one context at a time; PILOT's
//! memory-aware schedulers are the next implementations of [`Scheduler`].

use std::collections::VecDeque;

use crate::ids::{LaunchId, TenantId};
use crate::params::{Choice, Registered};

/// Decides when gated launches may be prepared.
pub(crate) trait Scheduler: std::fmt::Debug + Send {
    /// Whether launches wait for the manager's answer at all.
    fn gates(&self) -> bool;

    /// A launch asks to start: `true` if it may be prepared now, `false` if it queues
    /// (it comes back from [`Scheduler::release`]).
    fn admit(&mut self, tenant: TenantId, launch: LaunchId) -> bool;

    /// Whether a launch of `tenant` would be admitted now, not queued.
    fn would_admit(&self, tenant: TenantId) -> bool;

    /// A launch ended (its kernel finished or it failed): the next queued launch to
    /// prepare, if any.
    fn release(&mut self, launch: LaunchId) -> Option<(TenantId, LaunchId)>;

    /// `tenant` exited: its queued launches are dropped and its admitted one, whose
    /// kernel will never report, released. The next queued launch to prepare, if any.
    fn forget(&mut self, tenant: TenantId) -> Option<(TenantId, LaunchId)>;
}

/// What a scheduler is built from: the settings of the mode that runs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SchedulerSettings {
    /// Gdev's launch limit (mode `gdev`'s `launch_limit`; 1 for the other modes).
    pub(crate) launch_limit: u64,
}

/// A registered scheduler.
pub(crate) type SchedulerEntry = Registered<fn(SchedulerSettings) -> Box<dyn Scheduler>>;

/// Every scheduler; the first is the default.
pub(crate) static SCHEDULERS: &[SchedulerEntry] = &[
    SchedulerEntry {
        choice: Choice::new(
            "pass-through",
            "no gating: launches go to the device at once",
        ),
        build: |_| Box::new(PassThrough),
    },
    SchedulerEntry {
        choice: Choice::new(
            "gdev",
            "Gdev's: one context's launches at a time, at most its launch_limit in flight; the others queue",
        ),
        build: |settings| Box::new(GdevCompute::new(settings.launch_limit)),
    },
];

/// No gating.
#[derive(Debug)]
pub(crate) struct PassThrough;

impl Scheduler for PassThrough {
    fn gates(&self) -> bool {
        false
    }

    fn would_admit(&self, _: TenantId) -> bool {
        true
    }

    fn admit(&mut self, _: TenantId, _: LaunchId) -> bool {
        true
    }

    fn release(&mut self, _: LaunchId) -> Option<(TenantId, LaunchId)> {
        None
    }

    fn forget(&mut self, _: TenantId) -> Option<(TenantId, LaunchId)> {
        None
    }
}

/// Gdev's compute scheduler (`gdev_schedule_compute` and `gdev_select_next_compute`,
/// `common/gdev_sched.c`, `shinpei0208/gdev`): one context, the current one, has the
/// device; a launch of another context waits, and so does one of the current context
/// that already has `limit` launches in flight (`launch_instances >=
/// GDEV_INSTANCES_LIMIT`). A launch's end takes one from its context's count; the count
/// at zero makes the head of the waiting queue current (`NULL` when none waits), and
/// only then; a context waiting at its own limit waits for its count to reach zero too,
/// behind any context that queued before it. Equal priorities queue in arrival order
/// (`__gdev_enqueue_compute` inserts before the first of lower priority).
#[derive(Debug)]
pub(crate) struct GdevCompute {
    /// `GDEV_INSTANCES_LIMIT`: 32 in mainline (`common/gdev_sched.h`), 1 in some forks.
    limit: u64,
    /// The current context and its admitted launches, not yet ended.
    current: Option<(TenantId, Vec<LaunchId>)>,
    /// A launch of the current context was refused at its limit: it admits none until
    /// its count is back at zero.
    draining: bool,
    queue: VecDeque<(TenantId, LaunchId)>,
}

impl GdevCompute {
    /// Gdev's scheduler with at most `limit` launches of the current context in flight.
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            limit,
            current: None,
            draining: false,
            queue: VecDeque::new(),
        }
    }

    /// The head of the queue becomes current with its one launch admitted.
    fn next_current(&mut self) -> Option<(TenantId, LaunchId)> {
        self.current = None;
        self.draining = false;
        let next = self.queue.pop_front()?;
        self.current = Some((next.0, vec![next.1]));
        Some(next)
    }
}

impl Scheduler for GdevCompute {
    fn gates(&self) -> bool {
        true
    }

    fn would_admit(&self, tenant: TenantId) -> bool {
        match &self.current {
            None => true,
            Some((t, launches)) => {
                *t == tenant && !self.draining && (launches.len() as u64) < self.limit
            }
        }
    }

    fn admit(&mut self, tenant: TenantId, launch: LaunchId) -> bool {
        if !self.would_admit(tenant) {
            self.draining |= self.current.as_ref().is_some_and(|(t, _)| *t == tenant);
            self.queue.push_back((tenant, launch));
            return false;
        }
        let (_, launches) = self.current.get_or_insert_with(|| (tenant, Vec::new()));
        launches.push(launch);
        true
    }

    fn release(&mut self, launch: LaunchId) -> Option<(TenantId, LaunchId)> {
        let (_, launches) = self.current.as_mut()?;
        let at = launches.iter().position(|l| *l == launch)?;
        launches.remove(at);
        if !launches.is_empty() {
            return None;
        }
        self.next_current()
    }

    fn forget(&mut self, tenant: TenantId) -> Option<(TenantId, LaunchId)> {
        self.queue.retain(|(t, _)| *t != tenant);
        match &self.current {
            Some((t, _)) if *t == tenant => self.next_current(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_a_limit_of_one_launches_queue_in_arrival_order() {
        let mut s = GdevCompute::new(1);
        let (a, b, c) = (LaunchId(0), LaunchId(1), LaunchId(2));
        assert!(s.admit(TenantId(0), a));
        assert!(!s.admit(TenantId(1), b));
        assert!(!s.admit(TenantId(0), c));
        // Releasing a launch that is not admitted changes nothing.
        assert_eq!(s.release(b), None);
        assert_eq!(s.release(a), Some((TenantId(1), b)));
        assert_eq!(s.release(b), Some((TenantId(0), c)));
        assert_eq!(s.release(c), None);
        assert!(s.admit(TenantId(1), LaunchId(3)));
    }

    #[test]
    fn a_context_refused_at_its_limit_admits_nothing_until_its_count_is_zero() {
        let mut s = GdevCompute::new(2);
        let (l0, l1, l2, l3) = (LaunchId(0), LaunchId(1), LaunchId(2), LaunchId(3));
        assert!(s.admit(TenantId(0), l0));
        assert!(s.admit(TenantId(0), l1));
        assert!(!s.admit(TenantId(1), l2));
        assert!(!s.admit(TenantId(0), l3));
        // One of its launches ends: below its limit again, but it waits for zero.
        assert_eq!(s.release(l0), None);
        assert!(!s.would_admit(TenantId(0)));
        // At zero the context that queued first goes first, then the refused launch.
        assert_eq!(s.release(l1), Some((TenantId(1), l2)));
        assert_eq!(s.release(l2), Some((TenantId(0), l3)));
        assert!(s.would_admit(TenantId(0)));
    }

    #[test]
    fn forgetting_a_tenant_drops_its_launches_and_hands_its_admission_on() {
        let mut s = GdevCompute::new(1);
        let (a, b, c, d) = (LaunchId(0), LaunchId(1), LaunchId(2), LaunchId(3));
        assert!(s.admit(TenantId(0), a));
        assert!(!s.admit(TenantId(0), b));
        assert!(!s.admit(TenantId(1), c));
        assert!(!s.admit(TenantId(0), d));
        // Tenant 0 held the admission: it passes to tenant 1's launch, skipping 0's.
        assert_eq!(s.forget(TenantId(0)), Some((TenantId(1), c)));
        assert_eq!(s.release(c), None);
        // Forgetting a tenant that holds nothing changes nothing.
        assert!(s.admit(TenantId(1), a));
        assert_eq!(s.forget(TenantId(0)), None);
        assert!(!s.admit(TenantId(2), b));
        assert_eq!(s.release(a), Some((TenantId(2), b)));
    }

    #[test]
    fn the_current_context_keeps_the_device_up_to_its_limit_then_drains() {
        let mut s = GdevCompute::new(2);
        let l = |i| LaunchId(i);
        assert!(s.admit(TenantId(0), l(0)));
        // The current context launches again while its first runs; another waits.
        assert!(s.would_admit(TenantId(0)));
        assert!(!s.would_admit(TenantId(1)));
        assert!(s.admit(TenantId(0), l(1)));
        assert!(!s.admit(TenantId(1), l(2)));
        // At its limit it queues too, behind the context that came first.
        assert!(!s.would_admit(TenantId(0)));
        assert!(!s.admit(TenantId(0), l(3)));
        // One end leaves a launch in flight: nobody is woken.
        assert_eq!(s.release(l(0)), None);
        // The count at zero hands the device to the head of the queue.
        assert_eq!(s.release(l(1)), Some((TenantId(1), l(2))));
        assert!(!s.would_admit(TenantId(0)));
        assert_eq!(s.release(l(2)), Some((TenantId(0), l(3))));
        // Forgetting the current context hands on too.
        assert!(!s.admit(TenantId(1), l(4)));
        assert_eq!(s.forget(TenantId(0)), Some((TenantId(1), l(4))));
        assert_eq!(s.release(l(4)), None);
        assert!(s.would_admit(TenantId(2)));
    }
}
