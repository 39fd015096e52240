//! Memory-aware kernel scheduling: PILOT's policies (`../shared/spec/pilot.md`) deciding
//! which tenants' kernels run, wait, stop or are throttled, from what each kernel has
//! allocated and what it has actually migrated.
//!
//! [`Scheduling`] is the state machine the manager owns when `[scheduler] policy` is not
//! `none`: per tenant whether its next kernel is idle, waiting, running or stopping,
//! with the kernel's allocation footprint and its active memory (pages it migrated to
//! VRAM since it started: PILOT infers them from the CPU page table's dirty bits; the
//! paging machine counts them). The policy ([`SchedulingPolicy`], one file each) sees
//! a [`View`] of that and answers with [`Decisions`]: preemptions to request, held
//! kernels to start, advice to set or lift. The driver carries them out as
//! `Execution::Preempt`, `Execution::Start` (and the paging machine takes the advice
//! itself), and reports back when a kernel is ready, has run a segment, stopped or
//! finished.
//!
//! The capacity the policies share is what the paging machine may fill: VRAM less the
//! runtime's own buffers (the manager keeps it current), and a kernel's footprint is
//! its managed buffers. Free VRAM, as the policies see it, is what the running kernels
//! do not hold: the pages of a kernel that is not running are reclaimable by demand
//! paging, so MFit's "free VRAM holds the footprint" is `capacity - footprints of
//! running kernels`, and AMFit's oversubscription is `sum of running kernels' active
//! memory > capacity`, a kernel's active memory being the distinct bytes it could have
//! migrated: pages migrated since it started, at most its footprint.

mod amfit;
mod contract;
mod madvise;
mod mfit;

use crate::params::Choice;

pub use contract::{Decisions, KernelState, SchedulingPolicy, TenantSched, View};

/// The default cap on a kernel's wait under MFit and AMFit. PILOT leaves it to the user
/// (no value given); 2 s is ours, the example, unconfirmed.
pub const DEFAULT_MAX_WAIT_NS: u64 = 2_000_000_000;

/// `[scheduler]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulingConfig {
    /// The policy's name in [`POLICIES`].
    pub policy: &'static str,
    /// MFit and AMFit: the most a kernel waits before the policy makes room for it.
    pub max_wait_ns: u64,
    /// Kernels are instrumented with PILOT's preemption checks even under `none` (PILOT
    /// without mitigation): they run in segments and pay the checks. Every other
    /// policy instruments them.
    pub instrumented: bool,
    /// MAdvise: the active memory a tenant may have before its further memory is
    /// advised to the host; `None` is what the other running kernels leave (see
    /// `madvise.rs`).
    pub quota_bytes: Option<u64>,
}

impl Default for SchedulingConfig {
    fn default() -> Self {
        Self {
            policy: POLICIES[0].choice.name,
            max_wait_ns: DEFAULT_MAX_WAIT_NS,
            instrumented: false,
            quota_bytes: None,
        }
    }
}

impl SchedulingConfig {
    /// Whether a policy other than `none` is chosen.
    pub fn active(&self) -> bool {
        self.policy != POLICIES[0].choice.name
    }

    /// Whether kernels go through the scheduling machine: a policy is chosen, or PILOT's
    /// runtime runs without one.
    pub fn runs(&self) -> bool {
        self.active() || self.instrumented
    }
}

/// A registered scheduling policy.
pub struct PolicyEntry {
    /// Name and description.
    pub choice: Choice,
    /// Which settings besides `policy` it reads (`max_wait`, `quota`).
    pub settings: &'static [&'static str],
    /// Its constructor.
    pub build: fn(&SchedulingConfig) -> Box<dyn SchedulingPolicy>,
}

/// Every scheduling policy; the first is the default.
pub static POLICIES: &[PolicyEntry] = &[
    PolicyEntry {
        choice: Choice::new("none", "MPS's: every kernel starts at once, nothing stops"),
        settings: &[],
        build: |_| Box::new(NoPolicy),
    },
    PolicyEntry {
        choice: Choice::new(
            "mfit",
            "PILOT's MFit: start a kernel when free VRAM holds its buffers; past max_wait, preempt the largest",
        ),
        settings: &["max_wait"],
        build: |c| Box::new(mfit::MFit::new(c.max_wait_ns)),
    },
    PolicyEntry {
        choice: Choice::new(
            "amfit",
            "PILOT's AMFit: start at once; when active memory exceeds VRAM, preempt the most active and hold it",
        ),
        settings: &["max_wait"],
        build: |c| Box::new(amfit::AMFit::new(c.max_wait_ns)),
    },
    PolicyEntry {
        choice: Choice::new(
            "madvise",
            "PILOT's MAdvise: beyond its quota, a tenant's further memory is advised to the host (remote)",
        ),
        settings: &["quota"],
        build: |c| Box::new(madvise::MAdvise::new(c.quota_bytes)),
    },
];

/// The policy called `name`.
pub fn find(name: &str) -> Option<&'static PolicyEntry> {
    POLICIES.iter().find(|p| p.choice.name == name)
}

/// `none`: nothing is held.
#[derive(Debug)]
struct NoPolicy;

impl SchedulingPolicy for NoPolicy {
    fn admit(&mut self, _: &View, _: usize) -> bool {
        true
    }

    fn decide(&mut self, _: &View, _: &mut Decisions) {}
}

/// The scheduling state machine: events from the driver in, [`Decisions`] out.
#[derive(Debug)]
pub struct Scheduling {
    policy: Box<dyn SchedulingPolicy>,
    tenants: Vec<TenantSched>,
    capacity_bytes: u64,
    /// The latest time an event brought.
    now_ns: u64,
}

impl Scheduling {
    /// A machine running `config`'s policy over `capacity_bytes` of VRAM.
    pub fn new(config: &SchedulingConfig, capacity_bytes: u64) -> Self {
        let entry = find(config.policy).unwrap_or(&POLICIES[0]);
        Self {
            policy: (entry.build)(config),
            tenants: Vec::new(),
            capacity_bytes,
            now_ns: 0,
        }
    }

    /// The VRAM the policies share is now `capacity_bytes`.
    pub fn set_capacity(&mut self, capacity_bytes: u64) {
        self.capacity_bytes = capacity_bytes;
    }

    /// What it knows of `tenant`.
    pub fn tenant(&self, tenant: usize) -> TenantSched {
        self.tenants.get(tenant).copied().unwrap_or_default()
    }

    fn slot(&mut self, tenant: usize) -> &mut TenantSched {
        if tenant >= self.tenants.len() {
            self.tenants.resize(tenant + 1, TenantSched::default());
        }
        &mut self.tenants[tenant]
    }

    /// `tenant`'s next kernel, accessing `footprint_bytes` of buffers, asks to start;
    /// `pages_in` is the tenant's count of pages migrated in so far; `continues`: the
    /// launch goes on with the work of the tenant's last kernel (one endless kernel that
    /// the driver runs as a stream of launches). `true`: it starts now; `false`: it is
    /// held until a [`Decisions::start`] names it.
    pub fn ready(
        &mut self,
        tenant: usize,
        footprint_bytes: u64,
        pages_in: u64,
        continues: bool,
        now_ns: u64,
        out: &mut Decisions,
    ) -> bool {
        let t = self.slot(tenant);
        t.footprint_bytes = footprint_bytes;
        let granted = std::mem::take(&mut t.granted);
        if granted {
            t.state = KernelState::Waiting {
                since_ns: now_ns,
                preempted: false,
            };
        }
        // Queued behind the kernel it continues, without a gap (pageDoS's endless
        // kernel is such a stream of sweeps): its active memory goes on from the last
        // launch's. After a preemption or a gap it starts afresh.
        let continues = continues && t.state == KernelState::Idle && t.finished_ns == Some(now_ns);
        if !matches!(t.state, KernelState::Waiting { .. }) {
            t.state = KernelState::Waiting {
                since_ns: now_ns,
                preempted: false,
            };
        }
        let admitted = granted || {
            let view = View {
                tenants: &self.tenants,
                capacity_bytes: self.capacity_bytes,
                now_ns,
            };
            self.policy.admit(&view, tenant)
        };
        if admitted {
            let t = &mut self.tenants[tenant];
            t.state = KernelState::Running;
            if !continues {
                t.active_bytes = 0;
                t.base_pages_in = pages_in;
            }
        }
        self.decide(now_ns, out);
        admitted
    }

    /// `tenant`'s running kernel has migrated up to `pages_in` (the tenant's count) of
    /// `page_bytes` each: its active memory is updated and the policy decides.
    pub fn progress(
        &mut self,
        tenant: usize,
        pages_in: u64,
        page_bytes: u64,
        now_ns: u64,
        out: &mut Decisions,
    ) {
        let t = self.slot(tenant);
        // Pages evicted and migrated again count once: the kernel never has more
        // active memory than its buffers.
        if matches!(t.state, KernelState::Running | KernelState::Stopping) {
            t.active_bytes =
                (pages_in.saturating_sub(t.base_pages_in) * page_bytes).min(t.footprint_bytes);
        }
        self.decide(now_ns, out);
    }

    /// `tenant`'s kernel stopped at a check after a preemption; it waits to run again.
    pub fn preempted(&mut self, tenant: usize, now_ns: u64, out: &mut Decisions) {
        let t = self.slot(tenant);
        t.state = KernelState::Waiting {
            since_ns: now_ns,
            preempted: true,
        };
        t.granted = false;
        t.rerun = true;
        self.decide(now_ns, out);
    }

    /// `tenant`'s kernel finished (or the tenant ended).
    pub fn finished(&mut self, tenant: usize, now_ns: u64, out: &mut Decisions) {
        let t = self.slot(tenant);
        t.state = KernelState::Idle;
        t.granted = false;
        t.rerun = false;
        t.finished_ns = Some(now_ns);
        self.decide(now_ns, out);
    }

    /// Time passed to `now_ns`.
    pub fn timeout(&mut self, now_ns: u64, out: &mut Decisions) {
        self.decide(now_ns, out);
    }

    /// `tenant` ended: whatever it ran or waited for is gone.
    pub fn exited(&mut self, tenant: usize, out: &mut Decisions) {
        self.finished(tenant, self.now_ns, out);
        // Its advice goes with it: the paging machine hears so like any lifting.
        if std::mem::take(&mut self.slot(tenant).advised) {
            out.advise.push((tenant, false));
        }
        out.preempt.retain(|t| *t != tenant);
        out.start.retain(|t| *t != tenant);
    }

    /// When the policy next wants to decide without an event: only ever later than the
    /// latest event (a deadline it has passed without acting, for want of a kernel it
    /// may stop, it meets at the next event instead).
    pub fn next_timeout(&self) -> Option<u64> {
        self.policy
            .next_timeout(&View {
                tenants: &self.tenants,
                capacity_bytes: self.capacity_bytes,
                now_ns: self.now_ns,
            })
            .filter(|at| *at > self.now_ns)
    }

    /// Asks the policy and records what it decided.
    fn decide(&mut self, now_ns: u64, out: &mut Decisions) {
        self.now_ns = self.now_ns.max(now_ns);
        let now_ns = self.now_ns;
        let start = (out.preempt.len(), out.start.len(), out.advise.len());
        let view = View {
            tenants: &self.tenants,
            capacity_bytes: self.capacity_bytes,
            now_ns,
        };
        self.policy.decide(&view, out);
        for &t in &out.preempt[start.0..] {
            if self.tenants[t].state == KernelState::Running {
                self.tenants[t].state = KernelState::Stopping;
            }
        }
        // A granted kernel counts as running from now: the driver starts it next.
        for &t in &out.start[start.1..] {
            self.tenants[t].granted = true;
            self.tenants[t].state = KernelState::Running;
        }
        for &(t, advised) in &out.advise[start.2..] {
            self.tenants[t].advised = advised;
        }
    }
}

#[cfg(test)]
mod tests;
