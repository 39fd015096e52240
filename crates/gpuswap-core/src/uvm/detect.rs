//! Online detection of each managed allocation's migration pattern, the first half of
//! the adaptive runtime (`../shared/spec/uvm-adaptive.md`, "Migration patterns"; issue
//! 9). The paging machine reports every 64 KiB big page that faults (and so migrates),
//! in fault order, and every kernel boundary; per allocation, each kernel's migrations
//! become one observation, and a small state machine turns observations into a pattern.
//!
//! **Observation of a kernel** (per allocation, at least [`MIN_MIGRATIONS`] big pages
//! migrated, else none). A kernel's end closes the observations of its tenant's
//! allocations; the first time memory is oversubscribed closes every open one early
//! ([`Detector::checkpoint`]), so that the runtime decides before its first eviction, as
//! the paper's runtime does.
//! - *intra-kernel, linear or random:* the fraction of migrations whose big page lies
//!   above the one migrated just before it. In a random order each step ascends with
//!   probability 1/2; a linear sweep ascends at every step except where it wraps to a
//!   new pass or where a wavefront's pages of several buffers interleave, which leaves it
//!   close to 1. Linear when the fraction is at least [`LINEAR_ASCENDING`] (3/4, midway).
//! - *inter-kernel, re-referenced or not:* the fraction of the kernel's migrated big
//!   pages that an earlier kernel migrated too; re-referenced when at least
//!   [`REUSED`] (1/2). (Migrations, not accesses: a page reused in VRAM leaves no trace,
//!   as in the research simulator's runtime.)
//!
//! **State table.** The last [`WINDOW`] observations vote; with `l` linear and `r` random
//! ones among `n`:
//!
//! | votes | pattern |
//! |---|---|
//! | `n = 1`, nothing decided yet | the observation's own class (a first guess; a linear one is `Streaming`, as nothing earlier can be re-referenced) |
//! | `n = 1`, decided | unchanged |
//! | `l >= 2` and `r >= 2` | `Mixed` |
//! | all linear (from `n = 3`, all but one) | `Regular` if most linear ones that could re-reference did, else `Streaming` |
//! | all random (from `n = 3`, all but one) | `Random` |
//! | otherwise | unchanged |
//!
//! So one kernel gives a first guess, two agreeing kernels overrule it, and one odd kernel
//! among four does not flip a decided pattern (hysteresis).
//!
//! **The log is a per-kernel summary**, not a list of migrations: per allocation, counts
//! for the open kernel and two bitmaps of big pages (migrated by this kernel, by earlier
//! ones), so its memory follows the allocations' sizes, never the run's length. What a
//! run reports is the bounded [`Detector::history`]: every observation and the pattern it
//! led to, the last [`HISTORY`] per allocation.

use std::collections::VecDeque;

/// Big pages a kernel must migrate in an allocation to say anything about it.
pub const MIN_MIGRATIONS: u64 = 8;
/// Ascending steps, out of all, from which a kernel's migrations are linear.
pub const LINEAR_ASCENDING: f64 = 0.75;
/// Migrated big pages an earlier kernel migrated too, out of all, from which a kernel
/// re-references the allocation.
pub const REUSED: f64 = 0.5;
/// Observations that vote.
pub const WINDOW: usize = 4;
/// Observations each allocation's history keeps (the oldest go first).
pub const HISTORY: usize = 256;

/// An allocation's migration pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Not enough evidence yet.
    Undecided,
    /// Linear, not re-referenced.
    Streaming,
    /// Linear and re-referenced (cyclic).
    Regular,
    /// Random order.
    Random,
    /// Kernels of both kinds.
    Mixed,
}

impl Pattern {
    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Undecided => "undecided",
            Self::Streaming => "streaming",
            Self::Regular => "regular",
            Self::Random => "random",
            Self::Mixed => "mixed",
        }
    }
}

/// One kernel's verdict on one allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Observation {
    linear: bool,
    /// `None` for an allocation's first observed kernel: nothing earlier to re-reference.
    reused: Option<bool>,
}

/// One observation of an allocation and what it led to: an entry of the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    /// When the observation closed (the kernel's end, or the first oversubscription).
    pub ns: u64,
    /// 64 KiB big pages that faulted in the allocation since the last observation.
    pub migrated: u64,
    /// Whether they faulted in ascending order (the intra-kernel test).
    pub linear: bool,
    /// Whether an earlier kernel migrated most of them (`None`: no earlier kernel did
    /// anything in the allocation).
    pub reused: Option<bool>,
    /// The allocation's pattern after the vote.
    pub pattern: Pattern,
}

/// What one allocation's migrations showed so far.
#[derive(Debug, Default)]
struct Track {
    /// Big pages migrated by an earlier kernel, and by this one (bitmaps).
    earlier: Vec<u64>,
    now: Vec<u64>,
    migrated: u64,
    ascending: u64,
    reused: u64,
    last: Option<u32>,
    /// Whether an earlier kernel migrated any of its pages.
    seen_before: bool,
    window: VecDeque<Observation>,
    pattern: Option<Pattern>,
    /// The last [`HISTORY`] observations.
    history: VecDeque<Observed>,
}

impl Track {
    /// Closes the open observation at `now_ns`; returns whether it made one (enough
    /// migrations).
    fn observe(&mut self, now_ns: u64) -> bool {
        let observed = self.migrated >= MIN_MIGRATIONS;
        if observed {
            let steps = (self.migrated - 1) as f64;
            let observation = Observation {
                linear: self.ascending as f64 >= LINEAR_ASCENDING * steps,
                reused: self
                    .seen_before
                    .then_some(self.reused as f64 >= REUSED * self.migrated as f64),
            };
            self.window.push_back(observation);
            if self.window.len() > WINDOW {
                self.window.pop_front();
            }
            if let Some(p) = vote(&self.window, self.pattern.is_some())
                && self.pattern != Some(p)
            {
                self.pattern = Some(p);
            }
            if self.history.len() == HISTORY {
                self.history.pop_front();
            }
            self.history.push_back(Observed {
                ns: now_ns,
                migrated: self.migrated,
                linear: observation.linear,
                reused: observation.reused,
                pattern: self.pattern.unwrap_or(Pattern::Undecided),
            });
        }
        for (e, n) in self.earlier.iter_mut().zip(&mut self.now) {
            *e |= std::mem::take(n);
        }
        self.seen_before = true;
        (self.migrated, self.ascending, self.reused, self.last) = (0, 0, 0, None);
        observed
    }
}

/// Per-allocation pattern detection, dense by allocation number.
#[derive(Debug, Default)]
pub struct Detector {
    tracks: Vec<Track>,
    /// Allocations with migrations since their last observation.
    active: Vec<u32>,
}

impl Detector {
    /// A page of big page `big` (numbered from the allocation's start) of allocation
    /// `alloc` faulted, to be migrated with what the prefetcher adds. Logged in fault
    /// order, the kernel's access order (a batch is serviced in address order, which would
    /// make any order look linear); further faults in the same big page are one entry.
    pub fn faulted(&mut self, alloc: u32, big: u32) {
        let a = alloc as usize;
        if self.tracks.len() <= a {
            self.tracks.resize_with(a + 1, Track::default);
        }
        let t = &mut self.tracks[a];
        if t.last == Some(big) {
            return;
        }
        if t.migrated == 0 {
            self.active.push(alloc);
        }
        let (word, bit) = (big as usize / 64, 1u64 << (big % 64));
        if t.now.len() <= word {
            t.now.resize(word + 1, 0);
            t.earlier.resize(word + 1, 0);
        }
        t.migrated += 1;
        t.ascending += u64::from(t.last.is_some_and(|l| big > l));
        t.reused += u64::from(t.earlier[word] & bit != 0);
        t.now[word] |= bit;
        t.last = Some(big);
    }

    /// A kernel ended at `now_ns`: each allocation `closes` says it owned that migrated
    /// pages since its last observation gets one. Returns the allocations observed (a
    /// new entry ends their history).
    pub fn kernel_finished(&mut self, now_ns: u64, closes: impl Fn(u32) -> bool) -> Vec<u32> {
        let (closed, open) = std::mem::take(&mut self.active)
            .into_iter()
            .partition(|a| closes(*a));
        self.active = open;
        closed
            .into_iter()
            .filter(|a| self.tracks[*a as usize].observe(now_ns))
            .collect()
    }

    /// Memory became oversubscribed at `now_ns`: every open observation closes now, so
    /// that the runtime chooses before the first eviction. Returns the allocations
    /// observed.
    pub fn checkpoint(&mut self, now_ns: u64) -> Vec<u32> {
        self.kernel_finished(now_ns, |_| true)
    }

    /// Allocation `alloc`'s pattern now.
    pub fn pattern(&self, alloc: u32) -> Pattern {
        self.tracks
            .get(alloc as usize)
            .and_then(|t| t.pattern)
            .unwrap_or(Pattern::Undecided)
    }

    /// Allocation `alloc`'s last [`HISTORY`] observations, oldest first.
    pub fn history(&self, alloc: u32) -> impl Iterator<Item = &Observed> {
        self.tracks
            .get(alloc as usize)
            .into_iter()
            .flat_map(|t| &t.history)
    }
}

/// The state table of the module doc; `decided`: a pattern was chosen before.
fn vote(window: &VecDeque<Observation>, decided: bool) -> Option<Pattern> {
    let n = window.len();
    if n < 2 && decided {
        return None;
    }
    let linear = window.iter().filter(|o| o.linear).count();
    let random = n - linear;
    // One observation guesses, two must agree; from three on, one may dissent.
    let dissent = usize::from(n >= 3);
    if linear >= 2 && random >= 2 {
        Some(Pattern::Mixed)
    } else if linear + dissent >= n {
        let known: Vec<bool> = window
            .iter()
            .filter(|o| o.linear)
            .filter_map(|o| o.reused)
            .collect();
        let reused = known.iter().filter(|r| **r).count();
        Some(if 2 * reused > known.len() {
            Pattern::Regular
        } else {
            Pattern::Streaming
        })
    } else if random + dissent >= n {
        Some(Pattern::Random)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs kernels over allocation 0, each migrating the big pages `kernel(k)` gives
    /// and ending at `k + 1` ns.
    fn detect(kernels: usize, kernel: impl Fn(usize) -> Vec<u32>) -> Detector {
        let mut d = Detector::default();
        for k in 0..kernels {
            for big in kernel(k) {
                d.faulted(0, big);
            }
            d.kernel_finished(k as u64 + 1, |_| true);
        }
        d
    }

    /// (ns, pattern) at every change of allocation 0's pattern.
    fn changes(d: &Detector) -> Vec<(u64, Pattern)> {
        let mut last = Pattern::Undecided;
        d.history(0)
            .filter(|o| std::mem::replace(&mut last, o.pattern) != o.pattern)
            .map(|o| (o.ns, o.pattern))
            .collect()
    }

    /// A SplitMix64 permutation-free random sequence of `n` big pages below `range`.
    fn random(seed: u64, n: usize, range: u32) -> Vec<u32> {
        let mut state = seed;
        (0..n)
            .map(|_| (crate::mix::next(&mut state) % u64::from(range)) as u32)
            .collect()
    }

    #[test]
    fn synthetic_streams_are_classified_within_two_kernels() {
        // A cyclic linear sweep: the same 256 big pages, in order, every kernel.
        let cyclic = detect(3, |_| (0..256).collect());
        assert_eq!(cyclic.pattern(0), Pattern::Regular);
        // The first kernel can only guess streaming: nothing earlier to re-reference.
        assert_eq!(
            changes(&cyclic),
            [(1, Pattern::Streaming), (2, Pattern::Regular)]
        );
        // Streaming: each kernel sweeps new pages.
        let streaming = detect(2, |k| (k as u32 * 256..(k as u32 + 1) * 256).collect());
        assert_eq!(streaming.pattern(0), Pattern::Streaming);
        // Uniform random.
        let uniform = detect(2, |k| random(k as u64, 256, 4096));
        assert_eq!(uniform.pattern(0), Pattern::Random);
        // Kernels re-reading a linear range alternate with kernels of sparse random touches.
        let mixed = detect(4, |k| {
            if k % 2 == 0 {
                (0..128).collect()
            } else {
                random(k as u64, 32, 4096)
            }
        });
        assert_eq!(mixed.pattern(0), Pattern::Mixed);
    }

    #[test]
    fn one_random_kernel_in_a_long_regular_run_does_not_flip_the_pattern() {
        let d = detect(12, |k| {
            if k == 7 {
                random(7, 256, 256)
            } else {
                (0..256).collect()
            }
        });
        assert_eq!(d.pattern(0), Pattern::Regular);
        assert_eq!(changes(&d).len(), 2, "{:?}", changes(&d));
    }

    #[test]
    fn kernels_migrating_too_little_say_nothing() {
        let d = detect(5, |_| vec![3, 1, 2]);
        assert_eq!(d.pattern(0), Pattern::Undecided);
        assert_eq!(d.history(0).count(), 0);
    }

    #[test]
    fn a_kernel_closes_only_the_allocations_it_names_and_a_checkpoint_closes_all() {
        let mut d = Detector::default();
        for big in 0..16 {
            d.faulted(0, big);
            d.faulted(1, 100 - big);
        }
        assert_eq!(d.kernel_finished(5, |a| a == 0), [0]);
        assert_eq!(d.pattern(0), Pattern::Streaming);
        assert_eq!(d.pattern(1), Pattern::Undecided);
        assert_eq!(d.checkpoint(7), [1]);
        assert_eq!(d.pattern(1), Pattern::Random);
        let observed = d.history(1).next().copied().unwrap();
        assert_eq!((observed.ns, observed.migrated), (7, 16));
        assert_eq!(observed.reused, None);
    }

    #[test]
    fn the_history_is_bounded() {
        let d = detect(HISTORY + 10, |_| (0..16).collect());
        assert_eq!(d.history(0).count(), HISTORY);
        assert_eq!(d.history(0).next().unwrap().ns, 11);
    }
}
