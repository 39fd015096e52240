//! The adaptive runtime's state and decisions (`policy = ...`): every managed allocation
//! with the plan its pages follow, the pattern detector, and the trials that undo
//! switches which slow a tenant down ([`super::policy`] says which plan each pattern
//! gets). It decides plan changes and returns them; the paging machine carries them out
//! (eviction orders, serve rules), so this module holds no page state: of blocks it
//! knows only each allocation's range, of pages only the big pages the detector sees.

use std::collections::VecDeque;

use super::detect::{self, Detector, Observed, Pattern};
use super::policy::{Plan, Runtime};
use super::trial::{Switch, TenantTrials, Verdict};

/// A plan change for the machine to carry out: (allocation, old plan, new plan).
pub(super) type PlanChange = (u32, Plan, Plan);

/// What the adaptive runtime knows of one managed allocation, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocationPaging {
    /// Its migration pattern as detected so far.
    pub pattern: Pattern,
    /// The plan its pages follow now.
    pub plan: Plan,
    /// The detector's observations of it (the last [`detect::HISTORY`]), oldest first:
    /// the pattern's timeline.
    pub timeline: Vec<Observed>,
    /// (when, new plan) of its plan switches (the last [`detect::HISTORY`]), oldest
    /// first.
    pub switches: Vec<(u64, Plan)>,
    /// The plan in force before the first of `switches` (older ones were dropped).
    pub plan_before_switches: Plan,
}

/// A managed allocation.
#[derive(Debug)]
pub(super) struct Allocation {
    pub(super) owner: u32,
    /// Its VA blocks: `first_block..first_block + blocks`.
    pub(super) first_block: u32,
    pub(super) blocks: u32,
    pub(super) plan: Plan,
    /// Plans trials rejected for it ([`Plan::bit`]s): never tried again.
    pub(super) rejected: u8,
    /// Whether it was freed: the runtime leaves it alone.
    pub(super) freed: bool,
    /// (when, new plan) of its last [`detect::HISTORY`] switches, and the plan in force
    /// before the oldest of them.
    switches: VecDeque<(u64, Plan)>,
    plan_before_switches: Plan,
}

/// The allocations, their patterns and plans, and the tenants' trials.
#[derive(Debug)]
pub(super) struct Adaptive {
    runtime: Runtime,
    /// Dense by allocation number.
    pub(super) allocs: Vec<Allocation>,
    pub(super) detector: Detector,
    /// The trials, dense by owner.
    pub(super) trials: Vec<TenantTrials>,
    /// When a batch first found VRAM full (the detector's checkpoint, once).
    pub(super) checkpoint_ns: Option<u64>,
}

impl Adaptive {
    /// Nothing allocated yet; plans chosen as `runtime` says.
    pub(super) fn new(runtime: Runtime) -> Self {
        Self {
            runtime,
            allocs: Vec::new(),
            detector: Detector::default(),
            trials: Vec::new(),
            checkpoint_ns: None,
        }
    }

    /// Who chooses the plans.
    pub(super) fn runtime(&self) -> Runtime {
        self.runtime
    }

    /// A new allocation of `owner` on blocks `first_block..first_block + blocks`, as
    /// configured; its number.
    pub(super) fn add(&mut self, owner: u32, first_block: u32, blocks: u32) -> u32 {
        let a = self.allocs.len() as u32;
        self.allocs.push(Allocation {
            owner,
            first_block,
            blocks,
            plan: Plan::Configured,
            rejected: 0,
            freed: false,
            switches: VecDeque::new(),
            plan_before_switches: Plan::Configured,
        });
        if self.trials.len() <= owner as usize {
            self.trials
                .resize_with(owner as usize + 1, TenantTrials::default);
        }
        a
    }

    /// Allocation `a`.
    pub(super) fn allocation(&self, a: u32) -> &Allocation {
        &self.allocs[a as usize]
    }

    /// `owner`'s allocations, in the order they were made.
    pub(super) fn of(&self, owner: u32) -> impl Iterator<Item = u32> + '_ {
        (0..self.allocs.len() as u32).filter(move |a| self.allocs[*a as usize].owner == owner)
    }

    /// Allocation `a` was freed: the runtime leaves it alone from now on.
    pub(super) fn free(&mut self, a: u32) {
        self.allocs[a as usize].freed = true;
    }

    /// A page of big page `big` of allocation `alloc` faulted.
    pub(super) fn faulted(&mut self, alloc: u32, big: u32) {
        self.detector.faulted(alloc, big);
    }

    /// A batch found VRAM full at `now_ns`: the first time, the detector takes its
    /// checkpoint and every allocation with a pattern gets its plan now, not at its next
    /// observation (the paper's runtime decides when memory first becomes
    /// oversubscribed). The changes to carry out.
    pub(super) fn vram_full(&mut self, now_ns: u64) -> Vec<PlanChange> {
        let mut changes = Vec::new();
        if self.checkpoint_ns.is_none() {
            self.checkpoint_ns = Some(now_ns);
            self.detector.checkpoint(now_ns);
            let all: Vec<u32> = (0..self.allocs.len() as u32).collect();
            self.replan(&all, now_ns, &mut changes);
        }
        changes
    }

    /// A kernel of `owner` ended at `now_ns` after running `ns` (`ideal_ns` with its
    /// data in VRAM): the pattern detector takes its observations of the owner's
    /// allocations, the owner's running trial its time, and the runtime replans the
    /// allocations observed. The changes to carry out, in order.
    pub(super) fn kernel_finished(
        &mut self,
        owner: u32,
        now_ns: u64,
        ns: u64,
        ideal_ns: u64,
    ) -> Vec<PlanChange> {
        let mut changes = Vec::new();
        let allocs = &self.allocs;
        let observed = self
            .detector
            .kernel_finished(now_ns, |a| allocs[a as usize].owner == owner);
        if let Runtime::Adaptive { .. } = self.runtime
            && let Some(trials) = self.trials.get_mut(owner as usize)
        {
            let started_ns = now_ns.saturating_sub(ns);
            let oversubscribed = self.checkpoint_ns.is_some_and(|c| started_ns >= c);
            let verdict = trials.kernel(ns, ideal_ns, oversubscribed);
            let (switched, undo) = match &verdict {
                Verdict::Wait => (&[][..], false),
                Verdict::MeasureOld(s) | Verdict::Undo(s) => (&s[..], true),
                Verdict::Keep(s) => (&s[..], false),
            };
            for &(a, old, new) in switched {
                if self.allocs[a as usize].freed {
                    continue;
                }
                self.switch(a, if undo { old } else { new }, now_ns, &mut changes);
                if let Verdict::Undo(_) = verdict {
                    self.allocs[a as usize].rejected |= new.bit();
                }
            }
            if let Verdict::Keep(_) | Verdict::Undo(_) = verdict {
                // Switches held back while the trial ran are due now.
                let mut due = observed;
                due.extend(self.of(owner));
                due.sort_unstable();
                due.dedup();
                self.replan(&due, now_ns, &mut changes);
                return changes;
            }
        }
        self.replan(&observed, now_ns, &mut changes);
        changes
    }

    /// What the runtime knows of each of `owner`'s allocations, in the order they were
    /// made.
    pub(super) fn allocations(&self, owner: u32) -> Vec<AllocationPaging> {
        self.of(owner)
            .map(|a| {
                let alloc = &self.allocs[a as usize];
                AllocationPaging {
                    pattern: self.detector.pattern(a),
                    plan: alloc.plan,
                    timeline: self.detector.history(a).copied().collect(),
                    switches: alloc.switches.iter().copied().collect(),
                    plan_before_switches: alloc.plan_before_switches,
                }
            })
            .collect()
    }

    /// Gives the allocations just observed the plan the runtime chooses for them, from
    /// the first full VRAM on (before it no plan has anything to act on). Under
    /// `adaptive`, a tenant's switches go on trial together, and none is made while one
    /// of its trials runs.
    fn replan(&mut self, observed: &[u32], now_ns: u64, changes: &mut Vec<PlanChange>) {
        if observed.is_empty() || self.checkpoint_ns.is_none() {
            return;
        }
        match self.runtime {
            Runtime::Fixed => {}
            Runtime::Adaptive { .. } => {
                let mut switches: Vec<(u32, Switch)> = observed
                    .iter()
                    .filter_map(|&a| {
                        let alloc = &self.allocs[a as usize];
                        let plan = Plan::for_pattern(self.detector.pattern(a));
                        let idle = !self.trials[alloc.owner as usize].busy();
                        let allowed = !alloc.freed && alloc.rejected & plan.bit() == 0;
                        (idle && allowed && plan != alloc.plan)
                            .then_some((alloc.owner, (a, alloc.plan, plan)))
                    })
                    .collect();
                switches.sort_unstable_by_key(|(owner, (a, _, _))| (*owner, *a));
                for group in switches.chunk_by(|x, y| x.0 == y.0) {
                    let owner = group[0].0;
                    let switched: Vec<Switch> = group.iter().map(|(_, s)| *s).collect();
                    for (a, _, new) in &switched {
                        self.switch(*a, *new, now_ns, changes);
                    }
                    self.trials[owner as usize].start(switched);
                }
            }
            Runtime::AdaptiveCoarse { .. } => {
                let live: Vec<u32> = (0..self.allocs.len() as u32)
                    .filter(|a| !self.allocs[*a as usize].freed)
                    .collect();
                let plan = Plan::coarse(live.iter().map(|a| self.detector.pattern(*a)));
                for a in live {
                    self.switch(a, plan, now_ns, changes);
                }
            }
        }
    }

    /// Allocation `a` follows `plan` from `now_ns` on (nothing changes if it does
    /// already): recorded here, and added to `changes` for the machine.
    pub(super) fn switch(
        &mut self,
        a: u32,
        plan: Plan,
        now_ns: u64,
        changes: &mut Vec<PlanChange>,
    ) {
        let alloc = &mut self.allocs[a as usize];
        let old = alloc.plan;
        if old == plan {
            return;
        }
        if alloc.switches.len() == detect::HISTORY
            && let Some((_, dropped)) = alloc.switches.pop_front()
        {
            alloc.plan_before_switches = dropped;
        }
        alloc.switches.push_back((now_ns, plan));
        alloc.plan = plan;
        changes.push((a, old, plan));
    }
}
