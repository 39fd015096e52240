//! Online detection of each managed allocation's migration pattern, the first half of
//! the adaptive runtime (`../shared/spec/uvm-adaptive.md`, "Migration patterns"; issue
//! 9). The paging machine reports every 64 KiB big page that faults (and so migrates),
//! in fault order, and every kernel boundary; per allocation, each kernel's migrations
//! become one observation, and a small state machine turns observations into a pattern.
//!
//! **Observation of a kernel** (per allocation, at least [`MIN_MIGRATIONS`] big pages
//! migrated, else none):
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
//! | `n < 2` | unchanged (`Undecided` at first) |
//! | `l >= 2` and `r >= 2` | `Mixed` |
//! | all linear (from `n = 3`, all but one) | `Regular` if most linear ones that could re-reference did, else `Streaming` |
//! | all random (from `n = 3`, all but one) | `Random` |
//! | otherwise | unchanged |
//!
//! So two agreeing kernels decide, and one odd kernel among four does not flip a decided
//! pattern (hysteresis).

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
    /// (kernel boundary, pattern) at every change.
    changes: Vec<(u64, Pattern)>,
}

/// Per-allocation pattern detection, dense by allocation number.
#[derive(Debug, Default)]
pub struct Detector {
    tracks: Vec<Track>,
    /// Allocations with migrations in the current kernel.
    active: Vec<u32>,
    /// Kernel boundaries seen.
    kernels: u64,
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

    /// A kernel ended: every allocation it migrated pages of gets an observation.
    pub fn kernel_finished(&mut self) {
        self.kernels += 1;
        for alloc in std::mem::take(&mut self.active) {
            let t = &mut self.tracks[alloc as usize];
            if t.migrated >= MIN_MIGRATIONS {
                let steps = (t.migrated - 1) as f64;
                let observation = Observation {
                    linear: t.ascending as f64 >= LINEAR_ASCENDING * steps,
                    reused: t
                        .seen_before
                        .then_some(t.reused as f64 >= REUSED * t.migrated as f64),
                };
                t.window.push_back(observation);
                if t.window.len() > WINDOW {
                    t.window.pop_front();
                }
                if let Some(p) = vote(&t.window)
                    && t.pattern != Some(p)
                {
                    t.pattern = Some(p);
                    t.changes.push((self.kernels, p));
                }
            }
            for (e, n) in t.earlier.iter_mut().zip(&mut t.now) {
                *e |= std::mem::take(n);
            }
            t.seen_before = true;
            (t.migrated, t.ascending, t.reused, t.last) = (0, 0, 0, None);
        }
    }

    /// Allocation `alloc`'s pattern now.
    pub fn pattern(&self, alloc: u32) -> Pattern {
        self.tracks
            .get(alloc as usize)
            .and_then(|t| t.pattern)
            .unwrap_or(Pattern::Undecided)
    }

    /// Allocation `alloc`'s pattern changes: (kernels seen then, new pattern).
    pub fn changes(&self, alloc: u32) -> &[(u64, Pattern)] {
        self.tracks
            .get(alloc as usize)
            .map_or(&[], |t| t.changes.as_slice())
    }
}

/// The state table of the module doc.
fn vote(window: &VecDeque<Observation>) -> Option<Pattern> {
    let n = window.len();
    if n < 2 {
        return None;
    }
    let linear = window.iter().filter(|o| o.linear).count();
    let random = n - linear;
    // Two observations must agree; from three on, one may dissent.
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

    /// Runs kernels over allocation 0, each migrating the big pages `kernel(k)` gives.
    fn detect(kernels: usize, kernel: impl Fn(usize) -> Vec<u32>) -> Detector {
        let mut d = Detector::default();
        for k in 0..kernels {
            for big in kernel(k) {
                d.faulted(0, big);
            }
            d.kernel_finished();
        }
        d
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
        assert_eq!(cyclic.changes(0), [(2, Pattern::Regular)]);
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
        assert_eq!(d.changes(0).len(), 1, "{:?}", d.changes(0));
    }

    #[test]
    fn kernels_migrating_too_little_say_nothing() {
        let d = detect(5, |_| vec![3, 1, 2]);
        assert_eq!(d.pattern(0), Pattern::Undecided);
        assert!(d.changes(0).is_empty());
    }
}
