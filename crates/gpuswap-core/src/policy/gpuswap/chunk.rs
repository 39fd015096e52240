//! Which chunk a victim gives up (dissertation section 5.2.2) and which one a winner
//! gets back. Each chunk policy is a small [`ChunkChoice`] registered in [`CHUNKS`].

use crate::lists::{ChunkLists, ChunkRef};
use crate::params::{Choice, Needs, Registered};

/// Chooses the chunk a victim gives up.
pub(crate) trait ChunkChoice: std::fmt::Debug + Send {
    /// The chunk to evict among the victim's resident chunks.
    fn evict(&self, resident: &ChunkLists) -> Option<ChunkRef>;

    /// Whether chunks take per-chunk priorities instead of their buffer's.
    fn per_chunk_priorities(&self) -> bool {
        false
    }

    /// Whether referenced evicted chunks are swapped back after each kernel.
    fn swaps_referenced(&self) -> bool {
        false
    }
}

/// A registered chunk policy.
pub(crate) type ChunkEntry = Registered<fn() -> Box<dyn ChunkChoice>>;

/// Every chunk policy; the default is `priority-buffer` (the prototype's).
pub(crate) static CHUNKS: &[ChunkEntry] = &[
    ChunkEntry {
        choice: Choice::new("random", "any chunk of the victim"),
        build: || Box::new(Random),
    },
    ChunkEntry {
        choice: Choice::new(
            "priority-buffer",
            "a random chunk of the victim's lowest-priority buffers (the prototype's)",
        ),
        build: || Box::new(PriorityBuffer),
    },
    ChunkEntry {
        choice: Choice::new(
            "priority-chunk",
            "the victim's lowest-priority chunk, random among equals; priorities per chunk",
        ),
        build: || Box::new(PriorityChunk),
    },
    ChunkEntry {
        choice: Choice::new(
            "reverse-swap",
            "random eviction; evicted chunks a kernel references are swapped back for random resident ones",
        )
        .needing(Needs {
            reference_bits: true,
            ..Needs::NONE
        }),
        build: || Box::new(ReverseSwap),
    },
];

/// Any chunk (the smallest rank).
#[derive(Debug)]
struct Random;

impl ChunkChoice for Random {
    fn evict(&self, resident: &ChunkLists) -> Option<ChunkRef> {
        resident.random()
    }
}

/// A random chunk of the lowest-priority buffers.
#[derive(Debug)]
struct PriorityBuffer;

impl ChunkChoice for PriorityBuffer {
    fn evict(&self, resident: &ChunkLists) -> Option<ChunkRef> {
        resident.random_lowest()
    }
}

/// The lowest-priority chunk, with priorities per chunk.
#[derive(Debug)]
struct PriorityChunk;

impl ChunkChoice for PriorityChunk {
    fn evict(&self, resident: &ChunkLists) -> Option<ChunkRef> {
        resident.random_lowest()
    }

    fn per_chunk_priorities(&self) -> bool {
        true
    }
}

/// Random eviction plus swapping referenced chunks back.
#[derive(Debug)]
struct ReverseSwap;

impl ChunkChoice for ReverseSwap {
    fn evict(&self, resident: &ChunkLists) -> Option<ChunkRef> {
        resident.random()
    }

    fn swaps_referenced(&self) -> bool {
        true
    }
}

/// Chooses the chunk a winner gets back: its highest-priority evicted chunk, random
/// among equals.
pub(crate) fn select_chunk_to_return(evicted: &ChunkLists) -> Option<ChunkRef> {
    evicted.random_highest()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BufferId;
    use crate::lists::rank;

    fn chunk(b: u64, i: u32) -> ChunkRef {
        ChunkRef {
            buffer: BufferId(b),
            index: i,
        }
    }

    fn evict(name: &str, lists: &ChunkLists) -> Option<ChunkRef> {
        let entry = CHUNKS.iter().find(|c| c.choice.name == name).unwrap();
        (entry.build)().evict(lists)
    }

    #[test]
    fn priority_policies_take_from_the_lowest_priority_only() {
        let mut lists = ChunkLists::default();
        for (priority, b) in [(50, 0), (0, 1), (100, 2)] {
            for i in 0..2 {
                lists.insert(priority, rank(7, 0, b, i), chunk(b, i));
            }
        }
        assert_eq!(
            evict("priority-buffer", &lists).unwrap().buffer,
            BufferId(1)
        );
        assert_eq!(evict("priority-chunk", &lists).unwrap().buffer, BufferId(1));
        assert_eq!(select_chunk_to_return(&lists).unwrap().buffer, BufferId(2));
        // Random ignores priorities: over many rankings every buffer gets chosen.
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..50 {
            let mut l = ChunkLists::default();
            for (priority, b) in [(50, 0), (0, 1), (100, 2)] {
                l.insert(priority, rank(seed, 0, b, 0), chunk(b, 0));
            }
            seen.insert(evict("random", &l).unwrap().buffer);
        }
        assert_eq!(seen.len(), 3);
    }
}
