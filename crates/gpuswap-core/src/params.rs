//! The vocabulary every policy and the registry share, at the bottom of the core's
//! imports: named choices, typed parameter specifications, and what a choice needs from
//! the device and the driver. Leaf policies import it, never the registry.

/// A named option: a policy, or a value of a choice parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The name scenarios and reports use.
    pub name: &'static str,
    /// One line saying what it does.
    pub description: &'static str,
    /// What it needs from the device.
    pub needs: Needs,
}

impl Choice {
    /// A choice that needs nothing special.
    pub const fn new(name: &'static str, description: &'static str) -> Self {
        Self {
            name,
            description,
            needs: Needs::NONE,
        }
    }

    /// The same choice needing `needs`.
    pub const fn needing(self, needs: Needs) -> Self {
        Self { needs, ..self }
    }
}

/// One implementation in a registry of choices (victims, chunk policies, schedulers,
/// prefetchers, eviction policies): the choice listings show, and `build`, the function
/// that makes a fresh instance.
#[derive(Debug)]
pub struct Registered<B> {
    /// Its name and line, and what it needs.
    pub choice: Choice,
    /// A fresh instance.
    pub build: B,
}

impl<B> Registered<B> {
    /// The implementation called `name` in `registry`.
    pub fn find(registry: &'static [Self], name: &str) -> Option<&'static Self> {
        registry.iter().find(|r| r.choice.name == name)
    }
}

/// What kind of value a parameter takes.
#[derive(Clone, Copy, Debug)]
pub enum ParamKind {
    /// One of a registered list.
    Choice(fn() -> Vec<Choice>),
    /// A positive whole number.
    Count,
}

/// A parameter's default.
#[derive(Clone, Copy, Debug)]
pub enum ParamDefault {
    /// This choice.
    Choice(&'static str),
    /// The number of tenants of the scenario.
    TenantCount,
    /// This count.
    Count(u64),
}

/// One typed parameter of a policy.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    /// Its key in the scenario's `[manager]` table.
    pub key: &'static str,
    /// What it sets.
    pub help: &'static str,
    /// The values it takes.
    pub kind: ParamKind,
    /// Its value when not set.
    pub default: ParamDefault,
}

/// A parameter's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamValue {
    /// A registered choice, by name.
    Choice(&'static str),
    /// A count.
    Count(u64),
}

/// What a policy needs from the device and the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Reference bits in the GPU's view of host pages (reported in
    /// [`crate::KernelStats::referenced`]).
    pub reference_bits: bool,
    /// Launches wait for the manager's `LaunchReady` (call `handle_launch` first), and
    /// launches and memcpys pass through a software scheduler.
    pub launch_gating: bool,
    /// The manager wants `handle_timeout` at the times `poll_timeout` names.
    pub timers: bool,
    /// Replayable page faults: kernels touch managed pages and the manager pages them
    /// (unified memory).
    pub page_faults: bool,
    /// The device's access counters (unified memory): notes of the resident pages kernels
    /// touch (`handle_access_notes`), and remote reads counted per VA block against a
    /// threshold (delayed migration's `ServeRule::Counter`).
    pub access_counts: bool,
    /// Hardware-counter figures of each finished kernel: its all-in-VRAM time
    /// ([`crate::KernelStats::ideal_ns`]) and its memory accesses
    /// ([`crate::KernelStats::accesses`]).
    pub kernel_estimates: bool,
    /// The driver reports when each tenant becomes busy and idle on the GPU
    /// (`handle_gpu_busy`, `handle_gpu_idle`) and keeps a tenant suspended between
    /// relocation jobs (parked): what turns need.
    pub gpu_demand: bool,
    /// The driver reports each tenant's progress per window and the buffers its
    /// launches touched (`handle_progress`): what the automatic choice of GPU time
    /// measures.
    pub progress: bool,
}

impl Needs {
    /// Nothing special (usable in constants, unlike `Default`).
    pub const NONE: Needs = Needs {
        reference_bits: false,
        launch_gating: false,
        timers: false,
        page_faults: false,
        access_counts: false,
        kernel_estimates: false,
        gpu_demand: false,
        progress: false,
    };

    /// Both sets of needs.
    pub const fn union(self, other: Needs) -> Needs {
        Needs {
            reference_bits: self.reference_bits || other.reference_bits,
            launch_gating: self.launch_gating || other.launch_gating,
            timers: self.timers || other.timers,
            page_faults: self.page_faults || other.page_faults,
            access_counts: self.access_counts || other.access_counts,
            kernel_estimates: self.kernel_estimates || other.kernel_estimates,
            gpu_demand: self.gpu_demand || other.gpu_demand,
            progress: self.progress || other.progress,
        }
    }

    /// What these needs ask for and `supplied` (a backend's capabilities, declared as
    /// needs it meets) does not give.
    pub const fn lacking(self, supplied: Needs) -> Needs {
        Needs {
            reference_bits: self.reference_bits && !supplied.reference_bits,
            launch_gating: self.launch_gating && !supplied.launch_gating,
            timers: self.timers && !supplied.timers,
            page_faults: self.page_faults && !supplied.page_faults,
            access_counts: self.access_counts && !supplied.access_counts,
            kernel_estimates: self.kernel_estimates && !supplied.kernel_estimates,
            gpu_demand: self.gpu_demand && !supplied.gpu_demand,
            progress: self.progress && !supplied.progress,
        }
    }

    /// The names of what is needed, for listings.
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.reference_bits, "reference bits"),
            (self.launch_gating, "launch gating"),
            (self.timers, "timers"),
            (self.page_faults, "page faults"),
            (self.access_counts, "access counts"),
            (self.kernel_estimates, "kernel estimates"),
            (self.gpu_demand, "GPU demand"),
            (self.progress, "progress reports"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// What a choice needs that orders pages by use or counts remote reads: the device's
/// access counters.
pub const ACCESS_COUNTS: Needs = Needs {
    access_counts: true,
    ..Needs::NONE
};

/// What a choice needs that reads kernels' hardware counters (all-in-VRAM time, accesses).
pub const KERNEL_ESTIMATES: Needs = Needs {
    kernel_estimates: true,
    ..Needs::NONE
};
