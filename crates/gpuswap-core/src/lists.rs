//! Per-address-space chunk lists, ordered by priority and by a seeded random rank.
//!
//! "Random" choices take the chunk with the smallest rank, a pseudo-random number fixed
//! per chunk by the seed, the tenant, the tenant's allocation number and the chunk's
//! index. Each choice is uniformly random among the candidates, as the spec asks, and a
//! given seed ranks a program's chunks the same way whatever else happens: with more
//! VRAM, the chunks a tenant loses are a subset of those it loses with less. Runtime
//! against memory curves stay smooth per seed; the spread across seeds remains.

use std::collections::BTreeSet;

use crate::ids::BufferId;

/// One chunk of one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkRef {
    /// The buffer.
    pub buffer: BufferId,
    /// Index of the chunk in the buffer.
    pub index: u32,
}

/// A chunk's pseudo-random rank: the SplitMix64 finalizer ([`crate::mix`]) over its
/// identity.
pub(crate) fn rank(seed: u64, tenant: u32, allocation: u64, index: u32) -> u64 {
    crate::mix::finalize(
        seed ^ u64::from(tenant).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ allocation.wrapping_mul(0xBF58_476D_1CE4_E5B9)
            ^ u64::from(index).wrapping_mul(0x94D0_49BB_1331_11EB),
    )
}

/// A set of chunks ordered two ways: by (priority, rank) and by rank alone. The caller
/// knows each chunk's priority and rank (the chunk carries them), so no map from chunk
/// to key is kept: two tree entries per chunk are the whole cost.
///
/// Whole buffers can be listed lazily (`pending`): their chunks enter the trees only when
/// a policy first looks at the lists (see `Books::flush`), so a tenant that never gives
/// or gets memory back never pays per chunk.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChunkLists {
    by_priority: BTreeSet<(i32, u64, ChunkRef)>,
    by_rank: BTreeSet<(u64, ChunkRef)>,
    /// Buffers all of whose chunks belong here but are not in the trees yet.
    pending: BTreeSet<BufferId>,
}

impl ChunkLists {
    /// Lists every chunk of `buffer` without putting them in the trees yet.
    pub(crate) fn add_pending(&mut self, buffer: BufferId) {
        self.pending.insert(buffer);
    }

    /// Unlists a pending buffer; false if it was not pending.
    pub(crate) fn remove_pending(&mut self, buffer: BufferId) -> bool {
        self.pending.remove(&buffer)
    }

    /// Whether `buffer` is pending.
    pub(crate) fn is_pending(&self, buffer: BufferId) -> bool {
        self.pending.contains(&buffer)
    }

    /// Unlists the first pending buffer, for insertion into the trees. Popping (not
    /// taking the whole set) keeps the set's node for the next pending buffer.
    pub(crate) fn pop_pending(&mut self) -> Option<BufferId> {
        self.pending.pop_first()
    }

    pub(crate) fn insert(&mut self, priority: i32, rank: u64, chunk: ChunkRef) {
        let fresh = self.by_rank.insert((rank, chunk));
        debug_assert!(fresh, "{chunk:?} listed twice");
        self.by_priority.insert((priority, rank, chunk));
    }

    /// Removes a chunk listed with this priority and rank.
    pub(crate) fn remove(&mut self, priority: i32, rank: u64, chunk: ChunkRef) {
        let listed = self.by_rank.remove(&(rank, chunk));
        debug_assert!(listed, "{chunk:?} is not listed");
        self.by_priority.remove(&(priority, rank, chunk));
    }

    /// Chunks in the trees (all of them once `Books::flush` has run).
    pub(crate) fn len(&self) -> usize {
        self.by_rank.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_rank.is_empty() && self.pending.is_empty()
    }

    pub(crate) fn contains(&self, rank: u64, chunk: ChunkRef) -> bool {
        self.by_rank.contains(&(rank, chunk)) || self.pending.contains(&chunk.buffer)
    }

    /// A random chunk (the smallest rank).
    pub(crate) fn random(&self) -> Option<ChunkRef> {
        debug_assert!(self.pending.is_empty(), "lists flushed before choices");
        self.by_rank.first().map(|(_, c)| *c)
    }

    /// Every chunk in random (rank) order.
    pub(crate) fn by_rank(&self) -> impl Iterator<Item = ChunkRef> + '_ {
        debug_assert!(self.pending.is_empty(), "lists flushed before choices");
        self.by_rank.iter().map(|(_, c)| *c)
    }

    /// A random chunk of the lowest priority present.
    pub(crate) fn random_lowest(&self) -> Option<ChunkRef> {
        debug_assert!(self.pending.is_empty(), "lists flushed before choices");
        self.by_priority.first().map(|(_, _, c)| *c)
    }

    /// A random chunk of the highest priority present.
    pub(crate) fn random_highest(&self) -> Option<ChunkRef> {
        debug_assert!(self.pending.is_empty(), "lists flushed before choices");
        let (top, _, _) = *self.by_priority.last()?;
        self.by_priority
            .range(
                (
                    top,
                    0,
                    ChunkRef {
                        buffer: BufferId(0),
                        index: 0,
                    },
                )..,
            )
            .next()
            .map(|(_, _, c)| *c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn c(buffer: u64, index: u32) -> ChunkRef {
        ChunkRef {
            buffer: BufferId(buffer),
            index,
        }
    }

    #[test]
    fn choices_follow_priority_then_rank() {
        let mut l = ChunkLists::default();
        l.insert(5, 30, c(0, 0));
        l.insert(1, 20, c(1, 0));
        l.insert(5, 10, c(0, 1));
        l.insert(1, 40, c(1, 1));
        assert_eq!(l.random(), Some(c(0, 1)));
        assert_eq!(l.random_lowest(), Some(c(1, 0)));
        assert_eq!(l.random_highest(), Some(c(0, 1)));
        l.remove(1, 20, c(1, 0));
        assert_eq!(l.random_lowest(), Some(c(1, 1)));
        assert!(!l.contains(20, c(1, 0)));
        assert!(l.contains(40, c(1, 1)));
        assert_eq!(l.len(), 3);
    }

    #[test]
    fn ranks_spread_and_depend_on_every_input() {
        let base = rank(1, 0, 0, 0);
        assert_ne!(base, rank(2, 0, 0, 0));
        assert_ne!(base, rank(1, 1, 0, 0));
        assert_ne!(base, rank(1, 0, 1, 0));
        assert_ne!(base, rank(1, 0, 0, 1));
        // Smallest-rank choice among 4 chunks is roughly uniform over 4000 seeds.
        let mut wins = [0u32; 4];
        for seed in 0..4000 {
            let winner = (0..4).min_by_key(|i| rank(seed, 0, 0, *i)).unwrap();
            wins[winner as usize] += 1;
        }
        assert!(wins.iter().all(|w| (850..1150).contains(w)), "{wins:?}");
    }

    proptest! {
        #[test]
        fn insert_remove_keeps_membership(ops in proptest::collection::vec((0u64..20, 0i32..4, any::<bool>()), 0..200)) {
            let mut l = ChunkLists::default();
            let mut model: BTreeMap<ChunkRef, i32> = BTreeMap::new();
            for (b, p, remove) in ops {
                let chunk = c(b, 0);
                match model.get(&chunk) {
                    Some(p) if remove => { l.remove(*p, rank(0, 0, b, 0), chunk); model.remove(&chunk); }
                    None if !remove => { l.insert(p, rank(0, 0, b, 0), chunk); model.insert(chunk, p); }
                    _ => {}
                }
                prop_assert_eq!(l.len(), model.len());
                let lowest = model.values().min().copied();
                prop_assert_eq!(l.random_lowest().map(|c| model[&c]), lowest);
                let highest = model.values().max().copied();
                prop_assert_eq!(l.random_highest().map(|c| model[&c]), highest);
            }
        }
    }
}
