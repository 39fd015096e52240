//! The adaptive runtime's policy engine (`policy = ...`; issue 9): from each
//! allocation's detected [`Pattern`], the paging [`Plan`] its pages follow. The plans are
//! the adaptive paper's table (`../shared/spec/uvm-adaptive.md`, "Policy per category"):
//!
//! | pattern | plan | what changes for the allocation's pages |
//! |---|---|---|
//! | undecided, streaming | [`Plan::Configured`] | nothing: `prefetch`, `eviction`, `migration` as set (the driver's by default: tree prefetch, 2 MiB FIFO) |
//! | regular | [`Plan::Tree`] | tree prefetch; the tree eviction order with pre-eviction |
//! | random | [`Plan::HostPinned`] | once memory is oversubscribed, pages not in VRAM stay in host memory and every access to them is remote (hard pinning); what is in VRAM stays |
//! | mixed | [`Plan::HotInVram`] | reads of pages away are remote until their block's access counter reaches the dynamic threshold (hot blocks migrate, cold ones stay on the host); tree prefetch and tree eviction |
//!
//! Eviction takes from the tree order first (the least recently used 64 KiB big pages
//! of regular and mixed allocations, then what pre-eviction drains), and from the
//! configured order only when that is empty. The other way round, allocations the
//! detector never decides (small ones, resident from the start and hot: pathfinder's
//! result rows) went first, and pathfinder at 125 % took 1.8 times the default's time.
//! Mixed allocations keep their hot blocks in VRAM through delayed migration: cold
//! random blocks stay on the host, so what is resident is what reached the threshold.
//!
//! **Switches are on trial** ([`super::trial`]): a tenant's switches are undone for
//! good when its kernels run more than 10 % slower under them (time over time with the
//! data in VRAM, over four kernels). The detector says what the paper's table would do;
//! the trial whether it pays for this program. The coarse runtime has no trial, as in
//! the research code.
//!
//! `adaptive-coarse` is the research simulator's code (`uvm-driver.md`): one switch for
//! every allocation of every tenant. Any random or mixed allocation puts all of them on
//! [`Plan::HotInVram`] (remote access plus tree eviction); else any regular one puts all on
//! [`Plan::Tree`]; else nothing changes.
//!
//! A switch costs nothing by itself: no page moves when a plan changes (the driver only
//! changes how it services the next faults), and it takes effect from the next touch or
//! batch. Its effects are charged as they happen: remote accesses at the link's remote
//! cost, migrations as transfers.

use super::detect::Pattern;

/// Who chooses each allocation's plan (`policy = ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// Every allocation follows the configuration (`policy = "fixed"`, the default).
    Fixed,
    /// Each allocation's plan follows its own pattern (`policy = "adaptive"`).
    Adaptive {
        /// Remote reads of a block before it migrates under [`Plan::HotInVram`], before
        /// the dynamic threshold's growth (`migrate_threshold`).
        migrate_threshold: u32,
    },
    /// One plan for all, from every allocation's pattern (`policy = "adaptive-coarse"`).
    AdaptiveCoarse {
        /// As for [`Runtime::Adaptive`].
        migrate_threshold: u32,
    },
}

/// How an allocation's pages are paged now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Plan {
    /// As configured.
    #[default]
    Configured,
    /// Tree prefetch and tree eviction (regular).
    Tree,
    /// Remote access to whatever is not in VRAM once memory is oversubscribed (random).
    HostPinned,
    /// Delayed migration with the dynamic threshold, tree prefetch and tree eviction
    /// (mixed).
    HotInVram,
}

impl Plan {
    /// The per-allocation table of the module doc.
    pub fn for_pattern(pattern: Pattern) -> Self {
        match pattern {
            Pattern::Undecided | Pattern::Streaming => Self::Configured,
            Pattern::Regular => Self::Tree,
            Pattern::Random => Self::HostPinned,
            Pattern::Mixed => Self::HotInVram,
        }
    }

    /// The coarse runtime's one plan for every allocation, given all their patterns.
    pub fn coarse(patterns: impl IntoIterator<Item = Pattern>) -> Self {
        let mut plan = Self::Configured;
        for p in patterns {
            match p {
                Pattern::Random | Pattern::Mixed => return Self::HotInVram,
                Pattern::Regular => plan = Self::Tree,
                Pattern::Undecided | Pattern::Streaming => {}
            }
        }
        plan
    }

    /// Whether its blocks are ordered by the tree eviction policy, after the others.
    pub fn tree_eviction(self) -> bool {
        matches!(self, Self::Tree | Self::HotInVram)
    }

    /// Whether its faults are widened by the tree prefetcher whatever `prefetch` says.
    pub fn tree_prefetch(self) -> bool {
        self.tree_eviction()
    }

    /// Its bit in a set of plans.
    pub fn bit(self) -> u8 {
        1 << self as u8
    }

    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::Tree => "tree",
            Self::HostPinned => "host-pinned",
            Self::HotInVram => "hot-in-vram",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_plan_follows_the_research_code_order() {
        use Pattern::*;
        assert_eq!(Plan::coarse([Streaming, Undecided]), Plan::Configured);
        assert_eq!(Plan::coarse([Streaming, Regular]), Plan::Tree);
        assert_eq!(Plan::coarse([Regular, Random, Streaming]), Plan::HotInVram);
        assert_eq!(Plan::coarse([Mixed]), Plan::HotInVram);
    }
}
