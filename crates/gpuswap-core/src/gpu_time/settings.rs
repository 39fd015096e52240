//! The settings of GPU time: everyone at once, or turns and how they go.

/// How tenants share the GPU's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuTime {
    /// Every tenant runs when it has work; memory that does not fit is reached
    /// remotely (the mode's own way).
    #[default]
    Concurrent,
    /// When the busy tenants' memory does not fit in VRAM, one holds the GPU with its
    /// memory in VRAM while the others wait, parked.
    Turns(TurnSettings),
    /// Chosen by measurement (issue 40): share while the busy tenants' progress says
    /// sharing does as much work as turns would, take turns otherwise, and probe the
    /// other way now and then.
    Auto(AutoSettings),
}

impl GpuTime {
    /// The names scenario files and `--set gpu_time=` use, in the order help lists them.
    pub const NAMES: [&'static str; 3] = ["concurrent", "turns", "auto"];

    /// The name scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Concurrent => Self::NAMES[0],
            Self::Turns(_) => Self::NAMES[1],
            Self::Auto(_) => Self::NAMES[2],
        }
    }

    /// How turns go when they are taken (`None`: never).
    pub fn turn_settings(self) -> Option<TurnSettings> {
        match self {
            Self::Concurrent => None,
            Self::Turns(t) => Some(t),
            Self::Auto(a) => Some(a.turns),
        }
    }
}

/// How the automatic choice goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoSettings {
    /// How turns go when it takes them.
    pub turns: TurnSettings,
    /// Whether it shares before it has measured anything: a link whose remote reads
    /// cost little against VRAM's ([`AutoSettings::from_remote_cost`]).
    pub share_first: bool,
}

/// The largest remote-read cost (a remote read against a local one) at which the
/// automatic choice shares first. A design choice: a link within 16x of VRAM (NVLink-C2C
/// on Grace Hopper, 450 GB/s a direction against HBM3's 4 TB/s, about 9x) leaves a cold
/// overflow cheap; PCIe (about 27 GB/s against 2-4.8 TB/s, 74-180x) does not.
pub const SHARE_FIRST_MAX_REMOTE_COST: f64 = 16.0;

impl AutoSettings {
    /// The automatic choice for a link whose remote reads cost `remote_cost` times a
    /// local one: turns first on PCIe, sharing first on a Grace-Hopper-like link.
    pub fn from_remote_cost(turns: TurnSettings, remote_cost: f64) -> Self {
        Self {
            turns,
            share_first: shares_first(remote_cost),
        }
    }
}

/// Whether the automatic choice shares first on a link whose remote reads cost
/// `remote_cost` times a local one.
pub(crate) fn shares_first(remote_cost: f64) -> bool {
    remote_cost <= SHARE_FIRST_MAX_REMOTE_COST
}

/// What becomes of an idle tenant's memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Idle {
    /// It keeps its VRAM.
    #[default]
    Keep,
    /// Under memory pressure (another tenant demands the GPU with chunks in host memory,
    /// or an allocation waits), a tenant idle this long gives its VRAM back above its
    /// guarantee, in bulk, and is parked: its next GPU work waits until its memory is
    /// back, the chunks it touched last first.
    Demote {
        /// How long idle before it gives memory back.
        after_ns: u64,
    },
}

impl Idle {
    /// The names scenario files and `--set idle=` use.
    pub const NAMES: [&'static str; 2] = ["keep", "demote"];

    /// The name scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Keep => Self::NAMES[0],
            Self::Demote { .. } => Self::NAMES[1],
        }
    }
}

/// How long a tenant is idle before it gives memory back under pressure: 5 s (issue 40:
/// a notebook between cells, a server between bursts; long against a training step's
/// CPU gaps). A design choice.
pub const DEFAULT_DEMOTE_AFTER_NS: u64 = 5_000_000_000;

/// How turns go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnSettings {
    /// How long a holder keeps the GPU while others wait (times its contract's weight).
    pub quantum: Quantum,
    /// A holder with no GPU work this long hands over early to a waiting tenant.
    pub handover_after_ns: u64,
    /// Take turns whenever two tenants are busy, whether their memory fits or not
    /// (nvshare's lock: the simulator's `sharing = "exclusive-quantum"`).
    pub always: bool,
}

impl Default for TurnSettings {
    fn default() -> Self {
        Self {
            quantum: Quantum::Auto,
            handover_after_ns: DEFAULT_HANDOVER_AFTER_NS,
            always: false,
        }
    }
}

/// A turn's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantum {
    /// [`AUTO_QUANTUM_HANDOVERS`] times the handover last measured, within
    /// [`MIN_AUTO_QUANTUM_NS`] and [`MAX_AUTO_QUANTUM_NS`]: a handover then costs at most
    /// 5 % of a turn, and nobody waits longer than nvshare's quantum.
    Auto,
    /// A fixed length.
    Fixed {
        /// The length.
        ns: u64,
    },
}

/// The shortest automatic quantum: 2 s (issue 38: long against a training step of the
/// measured PyTorch jobs, short against their runs, so that a pair's slowdowns stay
/// even). A design choice.
pub const MIN_AUTO_QUANTUM_NS: u64 = 2_000_000_000;

/// The longest automatic quantum: nvshare's default, 30 s ([`NVSHARE_QUANTUM_NS`]). One
/// slow handover (a victim that drains a kernel reading remote memory for seconds) must
/// not make the others wait minutes.
pub const MAX_AUTO_QUANTUM_NS: u64 = NVSHARE_QUANTUM_NS;

/// An automatic quantum is this many handovers long. A design choice: 5 % overhead.
pub const AUTO_QUANTUM_HANDOVERS: u64 = 20;

/// A holder idle this long hands over early: 2 s by default (issue 38), long against
/// the CPU gaps between a program's launches (data loading, logging), short against a
/// turn. A design choice.
pub const DEFAULT_HANDOVER_AFTER_NS: u64 = 2_000_000_000;

/// nvshare's default time quantum: 30 s (its README, `NVSHARE_DEFAULT_TQ`).
pub const NVSHARE_QUANTUM_NS: u64 = 30_000_000_000;

/// How long an nvshare holder may go without a kernel before it lets go of the GPU.
/// Unconfirmed: nvshare releases the lock early when its client has been idle; we take
/// 100 ms, long against the CPU gaps between a program's launches, short against a
/// quantum.
pub const NVSHARE_IDLE_RELEASE_NS: u64 = 100_000_000;

impl TurnSettings {
    /// nvshare's lock (the simulator's `sharing = "exclusive-quantum"`): turns whenever
    /// two tenants are busy, `quantum_ns` long, released after
    /// [`NVSHARE_IDLE_RELEASE_NS`] without work.
    pub fn exclusive(quantum_ns: u64) -> Self {
        Self {
            quantum: Quantum::Fixed { ns: quantum_ns },
            handover_after_ns: NVSHARE_IDLE_RELEASE_NS,
            always: true,
        }
    }
}
