//! Launch gating: which launches may be prepared and started when. Pass-through (no
//! gating: the device runs what it is given) and Gdev's one kernel at a time; PILOT's
//! memory-aware schedulers are the next implementations of [`Scheduler`].

use std::collections::VecDeque;

use crate::ids::{LaunchId, TenantId};
use crate::registry::Choice;

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
}

/// Gdev's scheduler: one admitted launch at a time, the rest in arrival order.
#[derive(Debug, Default)]
pub(crate) struct OneAtATime {
    admitted: Option<LaunchId>,
    queue: VecDeque<(TenantId, LaunchId)>,
}

impl Scheduler for OneAtATime {
    fn gates(&self) -> bool {
        true
    }

    fn admit(&mut self, tenant: TenantId, launch: LaunchId) -> bool {
        if self.admitted.is_none() {
            self.admitted = Some(launch);
            true
        } else {
            self.queue.push_back((tenant, launch));
            false
        }
    }

    fn release(&mut self, launch: LaunchId) -> Option<(TenantId, LaunchId)> {
        if self.admitted != Some(launch) {
            return None;
        }
        self.admitted = None;
        let next = self.queue.pop_front()?;
        self.admitted = Some(next.1);
        Some(next)
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
}
