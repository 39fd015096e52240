//! Launch gating: which launches may be prepared and started when. Pass-through (no
//! gating: the device runs what it is given) and Gdev's one kernel at a time; PILOT's
//! memory-aware schedulers are the next implementations of [`Scheduler`].

use std::collections::VecDeque;

use crate::ids::{LaunchId, TenantId};
use crate::params::Choice;

/// Decides when gated launches may be prepared.
pub(crate) trait Scheduler: std::fmt::Debug + Send {
    /// Whether launches wait for the manager's answer at all.
    fn gates(&self) -> bool;

    /// A launch asks to start: `true` if it may be prepared now, `false` if it queues
    /// (it comes back from [`Scheduler::release`]).
    fn admit(&mut self, tenant: TenantId, launch: LaunchId) -> bool;

    /// A launch ended (its kernel finished or it failed): the next queued launch to
    /// prepare, if any.
    fn release(&mut self, launch: LaunchId) -> Option<(TenantId, LaunchId)>;

    /// `tenant` exited: its queued launches are dropped and its admitted one, whose
    /// kernel will never report, released. The next queued launch to prepare, if any.
    fn forget(&mut self, tenant: TenantId) -> Option<(TenantId, LaunchId)>;
}

/// A registered scheduler.
pub(crate) struct SchedulerEntry {
    pub(crate) choice: Choice,
    pub(crate) build: fn() -> Box<dyn Scheduler>,
}

/// Every scheduler; the first is the default.
pub(crate) static SCHEDULERS: &[SchedulerEntry] = &[
    SchedulerEntry {
        choice: Choice::new(
            "pass-through",
            "no gating: launches go to the device at once",
        ),
        build: || Box::new(PassThrough),
    },
    SchedulerEntry {
        choice: Choice::new(
            "one-at-a-time",
            "Gdev's: one kernel of any tenant admitted at a time, the others queue",
        ),
        build: || Box::<OneAtATime>::default(),
    },
];

/// No gating.
#[derive(Debug)]
pub(crate) struct PassThrough;

impl Scheduler for PassThrough {
    fn gates(&self) -> bool {
        false
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

/// Gdev's scheduler: one admitted launch at a time, the rest in arrival order.
#[derive(Debug, Default)]
pub(crate) struct OneAtATime {
    admitted: Option<(TenantId, LaunchId)>,
    queue: VecDeque<(TenantId, LaunchId)>,
}

impl Scheduler for OneAtATime {
    fn gates(&self) -> bool {
        true
    }

    fn admit(&mut self, tenant: TenantId, launch: LaunchId) -> bool {
        if self.admitted.is_none() {
            self.admitted = Some((tenant, launch));
            true
        } else {
            self.queue.push_back((tenant, launch));
            false
        }
    }

    fn release(&mut self, launch: LaunchId) -> Option<(TenantId, LaunchId)> {
        if self.admitted.map(|a| a.1) != Some(launch) {
            return None;
        }
        self.admitted = None;
        let next = self.queue.pop_front()?;
        self.admitted = Some(next);
        Some(next)
    }

    fn forget(&mut self, tenant: TenantId) -> Option<(TenantId, LaunchId)> {
        self.queue.retain(|(t, _)| *t != tenant);
        match self.admitted {
            Some((t, launch)) if t == tenant => self.release(launch),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_at_a_time_queues_in_arrival_order() {
        let mut s = OneAtATime::default();
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
    fn forgetting_a_tenant_drops_its_launches_and_hands_its_admission_on() {
        let mut s = OneAtATime::default();
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
}
