//! What a scheduling policy sees and answers: per tenant a [`TenantSched`] (its next
//! kernel's [`KernelState`], footprint, active memory, advice), the [`View`] over them,
//! the [`Decisions`] it returns, and the [`SchedulingPolicy`] trait itself. A leaf apart
//! from `mod.rs`, so that the policies, which `mod.rs` declares, import it without
//! importing their parent.

/// Where a tenant's next kernel stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelState {
    /// No kernel asks to run.
    #[default]
    Idle,
    /// Its kernel asked to run and is held (`since_ns`: when it asked, or stopped).
    Waiting {
        /// Since when.
        since_ns: u64,
        /// It was preempted (and waits to run again from its start).
        preempted: bool,
    },
    /// Its kernel runs.
    Running,
    /// Its kernel runs but was asked to stop at its next check.
    Stopping,
}

/// What the scheduler knows of one tenant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantSched {
    /// Its next kernel's state.
    pub state: KernelState,
    /// The bytes of the buffers its (running or waiting) kernel accesses.
    pub footprint_bytes: u64,
    /// Bytes its running kernel migrated to VRAM since it started, at most its
    /// footprint (or, waiting after a preemption or granted to start again, had migrated
    /// when it stopped: what it will want back).
    pub active_bytes: u64,
    /// Its further memory is advised to the host (MAdvise).
    pub advised: bool,
    /// The policy let its held kernel start; it starts when the driver takes it.
    pub granted: bool,
    /// Its kernel runs again after a preemption: it is not preempted again, so that
    /// every kernel ends (PILOT does not say how it avoids livelock; this is ours).
    pub rerun: bool,
    /// Its count of pages migrated in when its kernel started.
    pub(super) base_pages_in: u64,
    /// When its last kernel finished.
    pub(super) finished_ns: Option<u64>,
}

/// What a policy sees when it decides.
#[derive(Debug)]
pub struct View<'a> {
    /// Per tenant, dense by tenant number.
    pub tenants: &'a [TenantSched],
    /// VRAM the paging machine manages.
    pub capacity_bytes: u64,
    /// Now.
    pub now_ns: u64,
}

impl View<'_> {
    /// The tenants whose kernels run (stopping ones included).
    pub fn running(&self) -> impl Iterator<Item = (usize, &TenantSched)> {
        self.tenants
            .iter()
            .enumerate()
            .filter(|(_, t)| matches!(t.state, KernelState::Running | KernelState::Stopping))
    }

    /// The running kernels a policy may preempt: not stopping already, not re-runs, not
    /// granted and yet to start (there is nothing to stop yet).
    pub fn preemptible(&self) -> impl Iterator<Item = (usize, &TenantSched)> {
        self.running()
            .filter(|(_, t)| t.state == KernelState::Running && !t.rerun && !t.granted)
    }

    /// The tenants whose kernels wait and are not granted yet, longest waiting first.
    pub fn waiting(&self) -> Vec<(usize, u64)> {
        let mut waiting: Vec<(usize, u64)> = self
            .tenants
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.granted)
            .filter_map(|(i, t)| match t.state {
                KernelState::Waiting { since_ns, .. } => Some((i, since_ns)),
                _ => None,
            })
            .collect();
        waiting.sort_by_key(|&(i, since)| (since, i));
        waiting
    }
}

/// What a policy asks of the driver and the paging machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decisions {
    /// Tenants whose running kernels must stop at their next check.
    pub preempt: Vec<usize>,
    /// Tenants whose held kernels may start now.
    pub start: Vec<usize>,
    /// Tenants whose advice to the host is set (`true`) or lifted.
    pub advise: Vec<(usize, bool)>,
}

/// One scheduling policy.
pub trait SchedulingPolicy: std::fmt::Debug + Send {
    /// Tenant `tenant`'s kernel asks to start (for the first time, or again after a
    /// preemption): `true` starts it now, `false` holds it.
    fn admit(&mut self, view: &View, tenant: usize) -> bool;
    /// Something changed (a kernel started, ran a segment, stopped or finished, or a
    /// timeout came): what to do now.
    fn decide(&mut self, view: &View, out: &mut Decisions);
    /// When it next wants [`SchedulingPolicy::decide`] called without an event.
    fn next_timeout(&self, _view: &View) -> Option<u64> {
        None
    }
}
