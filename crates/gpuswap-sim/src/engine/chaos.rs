//! Fault injection and schedule perturbation for deterministic simulation testing: one
//! seeded generator decides which same-time event runs first, how late the driver
//! answers, which copies fail and when tenants crash (see [`Faults`]). Without faults the
//! engine never builds one and runs exactly as before.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::config::{CrashPoint, Faults};

/// A point in a tenant's life where a crash can be due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Trigger {
    Alloc,
    Suspend,
    Copy,
}

/// The faults of one run and the state they need.
pub(super) struct Chaos {
    faults: Faults,
    rng: ChaCha8Rng,
    /// Per tenant: allocation requests, suspensions and relocation copies so far.
    seen: Vec<[u32; 3]>,
}

impl Chaos {
    /// The faults' state for `tenants` tenants, or `None` when nothing is injected.
    pub(super) fn new(faults: Faults, tenants: usize) -> Option<Self> {
        faults.any().then(|| Self {
            rng: ChaCha8Rng::seed_from_u64(faults.seed),
            faults,
            seen: vec![[0; 3]; tenants],
        })
    }

    /// Tenants that crash at a fixed time, with the time.
    pub(super) fn timed_crashes(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.faults.crashes.iter().filter_map(|c| match c.at {
            CrashPoint::Time(at) => Some((c.tenant, at)),
            _ => None,
        })
    }

    /// Counts a `trigger` of tenant `t`; whether a crash is due there.
    pub(super) fn crash_due(&mut self, t: usize, trigger: Trigger) -> bool {
        let Some(seen) = self.seen.get_mut(t) else {
            return false;
        };
        let n = &mut seen[trigger as usize];
        *n += 1;
        let n = *n;
        self.faults.crashes.iter().any(|c| {
            c.tenant == t
                && match (c.at, trigger) {
                    (CrashPoint::Alloc(k), Trigger::Alloc)
                    | (CrashPoint::Suspend(k), Trigger::Suspend)
                    | (CrashPoint::Copy(k), Trigger::Copy) => k == n,
                    _ => false,
                }
        })
    }

    /// Whether this attempt of a relocation copy fails.
    pub(super) fn copy_fails(&mut self) -> bool {
        self.faults.copy_failure > 0.0 && self.rng.random_bool(self.faults.copy_failure.min(1.0))
    }

    /// How late the driver answers this time.
    pub(super) fn answer_delay_ns(&mut self) -> u64 {
        self.up_to(self.faults.max_answer_delay_ns)
    }

    /// How late the return timer fires this time.
    pub(super) fn timer_lateness_ns(&mut self) -> u64 {
        self.up_to(self.faults.max_timer_lateness_ns)
    }

    /// The sequence key of the next scheduled event when ties are shuffled: random high
    /// bits order same-time events at random; the counter keeps keys unique.
    pub(super) fn sequence(&mut self, counter: u64) -> u64 {
        (u64::from(self.rng.random::<u32>()) << 32) | (counter & 0xFFFF_FFFF)
    }

    /// Whether same-time events are shuffled (they then all go through the heap).
    pub(super) fn shuffles(&self) -> bool {
        self.faults.shuffle_ties
    }

    fn up_to(&mut self, max: u64) -> u64 {
        if max == 0 {
            0
        } else {
            self.rng.random_range(0..=max)
        }
    }
}
