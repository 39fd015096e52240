//! The adaptive runtime's trials: a tenant's plan switches are kept only if its kernels
//! do not get slower. The detector says what the adaptive paper's table would do; the
//! trial checks whether it pays here, with the figure the paper evaluates, kernel time.
//!
//! A kernel's slowdown is its time over its time with all data in VRAM (`ideal_ns`, the
//! hardware-counter estimate every driver event already carries), which removes the
//! differences between a program's kernels: over [`KERNELS`] kernels the ratio of the
//! sums compares two plans even when the kernels differ. Only kernels that started after
//! VRAM was first full count, since before that no plan has anything to act on.
//!
//! A trial covers every switch the runtime makes for one tenant at one time, and no
//! other switch of that tenant happens while it runs:
//! 1. the new plans run for [`KERNELS`] kernels;
//! 2. if the [`KERNELS`] kernels before the switch ran oversubscribed under the old plans,
//!    they are the baseline; otherwise (the switches made when VRAM was first full) the
//!    old plans run again for [`KERNELS`] kernels to measure it;
//! 3. the new plans stay unless their slowdown exceeds the baseline's by more than
//!    [`MARGIN`]; if they lose, the old plans come back and each allocation never
//!    switches to the rejected plan again. The next trial's baseline is the four kernels
//!    measured under the plans then in force.
//!
//! A switch gives the allocation's resident blocks a fresh place in their eviction
//! order, so measuring the old plans again measures them from that state, not from the
//! one they were in before the switch.
//!
//! A program with fewer kernels keeps the detector's choice untested.

use std::collections::VecDeque;

use super::policy::Plan;

/// Kernels a measurement spans.
pub const KERNELS: usize = 4;
/// How much slower the new plans may be before they are undone (run-to-run differences
/// in fault batching are a few percent).
pub const MARGIN: f64 = 0.1;

/// A switch of one allocation: (allocation, plan before, plan tried).
pub type Switch = (u32, Plan, Plan);

/// What the paging machine must do after a kernel.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Nothing.
    Wait,
    /// Put these allocations back on their old plans, to measure them.
    MeasureOld(Vec<Switch>),
    /// The new plans won: put them (back) in place.
    Keep(Vec<Switch>),
    /// The new plans lost: the old ones stay (or come back); never try these again.
    Undo(Vec<Switch>),
}

/// One tenant's recent kernels and running trial.
#[derive(Debug, Default)]
pub struct TenantTrials {
    /// (ns, ideal ns) of its last [`KERNELS`] kernels that ran oversubscribed.
    recent: VecDeque<(u64, u64)>,
    trial: Option<Trial>,
}

#[derive(Debug)]
struct Trial {
    switched: Vec<Switch>,
    /// The old plans' slowdown and kernels, when known.
    before: Option<(f64, VecDeque<(u64, u64)>)>,
    /// The new plans' slowdown and kernels, once measured.
    tried: Option<(f64, VecDeque<(u64, u64)>)>,
    ns: u64,
    ideal_ns: u64,
    kernels: usize,
}

impl TenantTrials {
    /// Whether a trial runs (no other switch may start).
    pub fn busy(&self) -> bool {
        self.trial.is_some()
    }

    /// Starts a trial of `switched`, already applied.
    pub fn start(&mut self, switched: Vec<Switch>) {
        let before = (self.recent.len() == KERNELS)
            .then(|| (slowdown(self.recent.iter().copied()), self.recent.clone()));
        self.trial = Some(Trial {
            switched,
            before,
            tried: None,
            ns: 0,
            ideal_ns: 0,
            kernels: 0,
        });
    }

    /// A kernel of the tenant ran `ns` (`ideal_ns` with its data in VRAM);
    /// `oversubscribed`: it started after VRAM was first full.
    pub fn kernel(&mut self, ns: u64, ideal_ns: u64, oversubscribed: bool) -> Verdict {
        if !oversubscribed || ideal_ns == 0 {
            return Verdict::Wait;
        }
        if self.recent.len() == KERNELS {
            self.recent.pop_front();
        }
        self.recent.push_back((ns, ideal_ns));
        let Some(trial) = self.trial.as_mut() else {
            return Verdict::Wait;
        };
        trial.ns += ns;
        trial.ideal_ns += ideal_ns;
        trial.kernels += 1;
        if trial.kernels < KERNELS {
            return Verdict::Wait;
        }
        let measured = (trial.ns as f64 / trial.ideal_ns as f64, self.recent.clone());
        (trial.ns, trial.ideal_ns, trial.kernels) = (0, 0, 0);
        let (before, tried) = match (trial.before.take(), trial.tried.take()) {
            (Some(before), None) => (before, measured),
            (None, None) => {
                trial.tried = Some(measured);
                return Verdict::MeasureOld(trial.switched.clone());
            }
            (_, Some(tried)) => (measured, tried),
        };
        let switched = self.trial.take().expect("a trial runs").switched;
        // The next trial's baseline is the plans in force: their own last kernels.
        if tried.0 > before.0 * (1.0 + MARGIN) {
            self.recent = before.1;
            Verdict::Undo(switched)
        } else {
            self.recent = tried.1;
            Verdict::Keep(switched)
        }
    }
}

/// The ratio of the sums of (ns, ideal ns).
fn slowdown(kernels: impl Iterator<Item = (u64, u64)>) -> f64 {
    let (ns, ideal) = kernels.fold((0, 0), |(n, i), (kn, ki)| (n + kn, i + ki));
    ns as f64 / ideal as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: Switch = (0, Plan::Configured, Plan::Tree);

    /// Feeds `n` oversubscribed kernels of slowdown `s` (ideal 100 ns each).
    fn kernels(t: &mut TenantTrials, n: usize, s: u64) -> Vec<Verdict> {
        (0..n).map(|_| t.kernel(100 * s, 100, true)).collect()
    }

    #[test]
    fn with_a_baseline_the_new_plans_are_judged_after_four_kernels() {
        let mut t = TenantTrials::default();
        kernels(&mut t, 4, 2);
        t.start(vec![SWITCH]);
        let v = kernels(&mut t, 4, 3);
        assert_eq!(v[..3], [Verdict::Wait, Verdict::Wait, Verdict::Wait]);
        assert_eq!(v[3], Verdict::Undo(vec![SWITCH]));
        assert!(!t.busy());
        // The undone plans' kernels are not the next baseline: the restored plans' are
        // (2). A tie (or a loss within the margin) keeps the new plans.
        t.start(vec![SWITCH]);
        assert_eq!(kernels(&mut t, 4, 2)[3], Verdict::Keep(vec![SWITCH]));
    }

    #[test]
    fn without_a_baseline_the_old_plans_are_measured_after_the_new() {
        let mut t = TenantTrials::default();
        // Kernels before VRAM was full do not count.
        t.kernel(100, 100, false);
        t.start(vec![SWITCH]);
        assert_eq!(kernels(&mut t, 4, 2)[3], Verdict::MeasureOld(vec![SWITCH]));
        assert!(t.busy());
        assert_eq!(kernels(&mut t, 4, 4)[3], Verdict::Keep(vec![SWITCH]));
        // The kept plans' four kernels are the next trial's baseline.
        t.start(vec![SWITCH]);
        assert_eq!(kernels(&mut t, 4, 5)[3], Verdict::Undo(vec![SWITCH]));
    }
}
