//! Per-address-space chunk lists: unordered lists of chunk references, bucketed by
//! priority, with constant-time insert and remove.

use std::collections::{BTreeMap, HashMap};

use crate::ids::BufferId;

/// One chunk of one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkRef {
    /// The buffer.
    pub buffer: BufferId,
    /// Index of the chunk in the buffer.
    pub index: u32,
}

/// Chunks bucketed by priority. Order inside a bucket is arbitrary but deterministic.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChunkLists {
    buckets: BTreeMap<i32, Vec<ChunkRef>>,
    positions: HashMap<ChunkRef, usize>,
}

impl ChunkLists {
    pub(crate) fn insert(&mut self, priority: i32, chunk: ChunkRef) {
        let bucket = self.buckets.entry(priority).or_default();
        let previous = self.positions.insert(chunk, bucket.len());
        debug_assert!(previous.is_none(), "{chunk:?} listed twice");
        bucket.push(chunk);
    }

    pub(crate) fn remove(&mut self, priority: i32, chunk: ChunkRef) {
        let position = self.positions.remove(&chunk).expect("chunk is listed");
        let bucket = self.buckets.get_mut(&priority).expect("bucket exists");
        bucket.swap_remove(position);
        if let Some(moved) = bucket.get(position) {
            self.positions.insert(*moved, position);
        }
        if bucket.is_empty() {
            self.buckets.remove(&priority);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.positions.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    pub(crate) fn contains(&self, chunk: ChunkRef) -> bool {
        self.positions.contains_key(&chunk)
    }

    /// The chunks of the lowest priority present.
    pub(crate) fn lowest(&self) -> Option<&[ChunkRef]> {
        self.buckets.values().next().map(Vec::as_slice)
    }

    /// The chunks of the highest priority present.
    pub(crate) fn highest(&self) -> Option<&[ChunkRef]> {
        self.buckets.values().next_back().map(Vec::as_slice)
    }

    /// The `n`-th chunk counting through the buckets in priority order.
    pub(crate) fn nth(&self, mut n: usize) -> Option<ChunkRef> {
        for bucket in self.buckets.values() {
            if n < bucket.len() {
                return Some(bucket[n]);
            }
            n -= bucket.len();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(buffer: u64, index: u32) -> ChunkRef {
        ChunkRef {
            buffer: BufferId(buffer),
            index,
        }
    }

    #[test]
    fn buckets_order_by_priority() {
        let mut l = ChunkLists::default();
        l.insert(5, c(0, 0));
        l.insert(1, c(1, 0));
        l.insert(5, c(0, 1));
        assert_eq!(l.lowest(), Some(&[c(1, 0)][..]));
        assert_eq!(l.highest().map(<[_]>::len), Some(2));
        assert_eq!(l.nth(0), Some(c(1, 0)));
        assert_eq!(l.nth(3), None);
        l.remove(1, c(1, 0));
        assert_eq!(l.lowest().map(<[_]>::len), Some(2));
        assert!(!l.contains(c(1, 0)));
    }

    proptest! {
        #[test]
        fn insert_remove_keeps_membership(ops in proptest::collection::vec((0u64..20, 0i32..4, any::<bool>()), 0..200)) {
            let mut l = ChunkLists::default();
            let mut model: BTreeMap<ChunkRef, i32> = BTreeMap::new();
            for (b, p, remove) in ops {
                let chunk = c(b, 0);
                match model.get(&chunk).copied() {
                    Some(prio) if remove => { l.remove(prio, chunk); model.remove(&chunk); }
                    None if !remove => { l.insert(p, chunk); model.insert(chunk, p); }
                    _ => {}
                }
                prop_assert_eq!(l.len(), model.len());
                let mut listed: Vec<ChunkRef> = (0..l.len()).map(|i| l.nth(i).unwrap()).collect();
                listed.sort();
                prop_assert_eq!(listed, model.keys().copied().collect::<Vec<_>>());
            }
        }
    }
}
