//! What leaves VRAM when a migration needs room (`eviction = ...`). Each policy keeps
//! its own order of what is resident, updated by the paging machine's notifications.

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::pages::{PAGES_PER_BIG_PAGE, PAGES_PER_BLOCK, Pages};
use crate::params::{Choice, Registered};

/// Chooses eviction victims.
pub trait Eviction: std::fmt::Debug + Send {
    /// Pages of `block` became resident at time `seq` (`first`: the block had none).
    fn resident(&mut self, block: u32, pages: Pages, first: bool, seq: u64);
    /// Resident pages of `block` were touched at time `seq` (a run, in address order).
    fn touched(&mut self, block: u32, pages: Pages, seq: u64);
    /// Whether [`Eviction::touched`] matters to it: the paging machine skips the call on
    /// its hottest path for policies that order by residency alone.
    fn observes_touches(&self) -> bool {
        true
    }
    /// Pages of `block` left VRAM (`emptied`: none is left).
    fn left(&mut self, block: u32, pages: Pages, emptied: bool);
    /// What to evict next: a block and its pages to evict (resident ones). Whole-block
    /// policies never choose `protect`, the block being serviced (its pages are the ones
    /// wanted); single-page ones may take its other pages. `resident` gives each block's
    /// resident pages.
    fn victim(&mut self, resident: &dyn Fn(u32) -> Pages, protect: u32) -> Option<(u32, Pages)>;
    /// Starts its random choices from the run's `seed` (a policy that makes none
    /// ignores it).
    fn reseed(&mut self, _seed: u64) {}
}

/// A registered eviction policy.
pub type EvictionEntry = Registered<fn() -> Box<dyn Eviction>>;

/// Every eviction policy; `fifo-2mb` is what the driver does.
pub static EVICTIONS: &[EvictionEntry] = &[
    EvictionEntry {
        choice: Choice::new(
            "fifo-2mb",
            "the driver's: whole 2 MiB blocks in the order they became resident; accesses do not refresh them",
        ),
        build: || {
            Box::new(BlockOrder {
                refresh: false,
                queue: SeqQueue::default(),
            })
        },
    },
    EvictionEntry {
        choice: Choice::new(
            "lru-2mb",
            "whole 2 MiB blocks, least recently touched first",
        ),
        build: || {
            Box::new(BlockOrder {
                refresh: true,
                queue: SeqQueue::default(),
            })
        },
    },
    EvictionEntry {
        choice: Choice::new("lfu-2mb", "whole 2 MiB blocks, least often touched first"),
        build: || Box::<BlockTouches>::default(),
    },
    EvictionEntry {
        choice: Choice::new("lru-4k", "single 4 KiB pages, least recently touched first"),
        build: || Box::<PageLru>::default(),
    },
    EvictionEntry {
        choice: Choice::new(
            "random-4k",
            "a single 4 KiB page chosen at random (a seeded sequence)",
        ),
        build: || Box::new(RandomPage::default()),
    },
    EvictionEntry {
        choice: Choice::new(
            "sequential-64k",
            "whole 64 KiB big pages in the order they became resident",
        ),
        build: || Box::<BigPageOrder>::default(),
    },
    EvictionEntry {
        choice: Choice::new(
            "tree",
            "least recently touched 64 KiB big page, then every node of its 2 MiB block's tree left less than half resident (the research simulator's pre-eviction)",
        ),
        build: || {
            Box::new(BigPageOrder {
                refresh: true,
                drain_tree: true,
                ..BigPageOrder::default()
            })
        },
    },
];

/// The eviction policy called `name`.
pub fn find_eviction(name: &str) -> Option<&'static EvictionEntry> {
    Registered::find(EVICTIONS, name)
}

/// Keys (blocks, or big pages) in the order they were last placed in, the oldest first.
///
/// Every placement comes with a `seq` no smaller than the last (the big pages of one
/// arrival share theirs), so appending keeps the queue in seq order; a replaced or
/// removed key leaves its old entry behind, dropped when it reaches the front or when
/// stale entries outnumber live ones. That makes a placement an append, not a
/// search-tree update: the block orders place a block on every first residency (and
/// `lru-2mb` on every touch), the tree order a big page on every touch of a resident run.
/// A key is placed at most once per seq (the paging machine draws a new one for each
/// notification): placed again at the seq of a stale entry of its own, that entry
/// would look live again.
#[derive(Debug, Default)]
struct SeqQueue {
    /// (seq, key), oldest first; an entry is live while `since` holds its seq for its key.
    order: VecDeque<(u64, usize)>,
    /// Each key's place, dense by key.
    since: Vec<Option<u64>>,
    /// Keys with a place.
    live: usize,
    /// The last placement's seq: a smaller one would break the queue's order, which
    /// nothing else checks (compaction and stale fronts may have dropped every entry).
    last_seq: u64,
}

impl SeqQueue {
    /// Whether `key` has a place.
    fn contains(&self, key: usize) -> bool {
        self.since.get(key).is_some_and(Option::is_some)
    }

    /// Places `key` last, at `seq` (no smaller than any before), leaving its old place.
    fn place(&mut self, key: usize, seq: u64) {
        debug_assert!(
            seq >= self.last_seq,
            "seq {seq} placed after {}",
            self.last_seq
        );
        self.last_seq = seq;
        if self.since.len() <= key {
            self.since.resize(key + 1, None);
        }
        if self.since[key].replace(seq).is_none() {
            self.live += 1;
        }
        self.order.push_back((seq, key));
        if self.order.len() > 2 * self.live + 64 {
            let since = &self.since;
            self.order.retain(|&(seq, key)| since[key] == Some(seq));
        }
    }

    /// Takes `key`'s place away, if it has one.
    fn remove(&mut self, key: usize) {
        if let Some(since) = self.since.get_mut(key)
            && since.take().is_some()
        {
            self.live -= 1;
        }
    }

    /// The keys with a place, oldest first (stale entries at the front are dropped).
    fn live(&mut self) -> impl Iterator<Item = usize> + '_ {
        while let Some(&(seq, key)) = self.order.front()
            && self.since[key] != Some(seq)
        {
            self.order.pop_front();
        }
        let since = &self.since;
        self.order
            .iter()
            .filter(|&&(seq, key)| since[key] == Some(seq))
            .map(|&(_, key)| key)
    }
}

/// Whole blocks in the order they became resident (`fifo-2mb`) or, with `refresh`, were
/// last touched (`lru-2mb`).
#[derive(Debug)]
struct BlockOrder {
    /// Touches and later arrivals refresh a block's place (least recently used first).
    refresh: bool,
    /// The blocks with resident pages.
    queue: SeqQueue,
}

impl Eviction for BlockOrder {
    fn resident(&mut self, block: u32, _: Pages, first: bool, seq: u64) {
        if first || self.refresh {
            self.queue.place(block as usize, seq);
        }
    }

    fn observes_touches(&self) -> bool {
        self.refresh
    }

    fn touched(&mut self, block: u32, _: Pages, seq: u64) {
        if self.refresh {
            self.queue.place(block as usize, seq);
        }
    }

    fn left(&mut self, block: u32, _: Pages, emptied: bool) {
        if emptied {
            self.queue.remove(block as usize);
        }
    }

    fn victim(&mut self, resident: &dyn Fn(u32) -> Pages, protect: u32) -> Option<(u32, Pages)> {
        let protect = protect as usize;
        let block = self.queue.live().find(|b| *b != protect)? as u32;
        Some((block, resident(block)))
    }
}

/// Whole blocks, least often touched first (`lfu-2mb`): counts go up and down the
/// order, so it is a search tree.
#[derive(Debug, Default)]
struct BlockTouches {
    /// (touched pages, block), the fewest first.
    order: BTreeSet<(u64, u32)>,
    /// Each block's count in `order`, dense by block (`None`: not ordered).
    counts: Vec<Option<u64>>,
}

impl BlockTouches {
    fn set(&mut self, block: u32, count: u64) {
        let b = block as usize;
        if self.counts.len() <= b {
            self.counts.resize(b + 1, None);
        }
        if let Some(old) = self.counts[b].replace(count) {
            self.order.remove(&(old, block));
        }
        self.order.insert((count, block));
    }
}

impl Eviction for BlockTouches {
    fn resident(&mut self, block: u32, _: Pages, first: bool, _: u64) {
        if first {
            self.set(block, 0);
        }
    }

    fn touched(&mut self, block: u32, pages: Pages, _: u64) {
        let n = self
            .counts
            .get(block as usize)
            .copied()
            .flatten()
            .unwrap_or(0);
        self.set(block, n + pages.count() as u64);
    }

    fn left(&mut self, block: u32, _: Pages, emptied: bool) {
        if emptied && let Some(count) = self.counts.get_mut(block as usize).and_then(Option::take) {
            self.order.remove(&(count, block));
        }
    }

    fn victim(&mut self, resident: &dyn Fn(u32) -> Pages, protect: u32) -> Option<(u32, Pages)> {
        self.order
            .iter()
            .map(|(_, b)| *b)
            .find(|b| *b != protect)
            .map(|b| (b, resident(b)))
    }
}

/// Single pages, least recently touched first.
#[derive(Debug, Default)]
struct PageLru {
    order: BTreeSet<(u64, u32, u16)>,
    last: HashMap<(u32, u16), u64>,
}

impl PageLru {
    fn set(&mut self, block: u32, page: usize, seq: u64) {
        let key = (block, page as u16);
        if let Some(old) = self.last.insert(key, seq) {
            self.order.remove(&(old, block, page as u16));
        }
        self.order.insert((seq, block, page as u16));
    }
}

impl Eviction for PageLru {
    fn resident(&mut self, block: u32, pages: Pages, _: bool, seq: u64) {
        for page in pages.iter() {
            self.set(block, page, seq);
        }
    }

    fn touched(&mut self, block: u32, pages: Pages, seq: u64) {
        for page in pages.iter() {
            self.set(block, page, seq);
        }
    }

    fn left(&mut self, block: u32, pages: Pages, _: bool) {
        for page in pages.iter() {
            if let Some(old) = self.last.remove(&(block, page as u16)) {
                self.order.remove(&(old, block, page as u16));
            }
        }
    }

    fn victim(&mut self, _: &dyn Fn(u32) -> Pages, _: u32) -> Option<(u32, Pages)> {
        self.order
            .iter()
            .next()
            .map(|(_, b, p)| (*b, Pages::single(usize::from(*p))))
    }
}

/// A random resident page: a block drawn among those with resident pages, then one of
/// its pages, from a SplitMix64 sequence (so runs repeat exactly).
#[derive(Debug, Default)]
struct RandomPage {
    blocks: BTreeSet<u32>,
    state: u64,
}

impl RandomPage {
    fn draw(&mut self, n: usize) -> usize {
        (crate::mix::next(&mut self.state) % n.max(1) as u64) as usize
    }
}

impl Eviction for RandomPage {
    fn reseed(&mut self, seed: u64) {
        // Seed 0 keeps the sequence the policy always had.
        self.state = crate::mix::finalize(seed);
    }

    fn resident(&mut self, block: u32, _: Pages, _: bool, _: u64) {
        self.blocks.insert(block);
    }

    fn observes_touches(&self) -> bool {
        false
    }

    fn touched(&mut self, _: u32, _: Pages, _: u64) {}

    fn left(&mut self, block: u32, _: Pages, emptied: bool) {
        if emptied {
            self.blocks.remove(&block);
        }
    }

    fn victim(&mut self, resident: &dyn Fn(u32) -> Pages, _: u32) -> Option<(u32, Pages)> {
        let n = self.blocks.len();
        if n == 0 {
            return None;
        }
        let i = self.draw(n);
        let block = *self.blocks.iter().nth(i)?;
        let pages = resident(block);
        let k = self.draw(pages.count());
        pages.iter().nth(k).map(|p| (block, Pages::single(p)))
    }
}

/// 64 KiB big pages in the order they became resident (`sequential-64k`) or were last
/// touched (`tree`), with the research simulator's tree-based pre-eviction for `tree`.
#[derive(Debug, Default)]
struct BigPageOrder {
    /// Touches refresh a big page's place (least recently used first).
    refresh: bool,
    /// After a victim big page, every node of the block's tree above it left less than
    /// half resident is drained too (the inverse of the tree prefetcher).
    drain_tree: bool,
    /// The resident big pages, keyed `block * 32 + big page`.
    queue: SeqQueue,
}

/// Big pages of a VA block.
const BIG_PAGES: usize = PAGES_PER_BLOCK / PAGES_PER_BIG_PAGE;

impl BigPageOrder {
    fn set(&mut self, block: u32, pages: Pages, seq: u64, refresh: bool) {
        let base = block as usize * BIG_PAGES;
        for big in big_pages(pages) {
            let key = base + usize::from(big);
            if refresh || !self.queue.contains(key) {
                self.queue.place(key, seq);
            }
        }
    }
}

impl Eviction for BigPageOrder {
    fn resident(&mut self, block: u32, pages: Pages, _: bool, seq: u64) {
        self.set(block, pages, seq, self.refresh);
    }

    fn observes_touches(&self) -> bool {
        self.refresh
    }

    fn touched(&mut self, block: u32, pages: Pages, seq: u64) {
        if self.refresh {
            self.set(block, pages, seq, true);
        }
    }

    fn left(&mut self, block: u32, pages: Pages, _: bool) {
        // A big page leaves the order when a page of it leaves: its pages go together.
        let base = block as usize * BIG_PAGES;
        for big in big_pages(pages) {
            self.queue.remove(base + usize::from(big));
        }
    }

    fn victim(&mut self, resident: &dyn Fn(u32) -> Pages, _: u32) -> Option<(u32, Pages)> {
        let key = self.queue.live().next()?;
        let (block, big) = ((key / BIG_PAGES) as u32, key % BIG_PAGES);
        let resident = resident(block);
        let start = big * PAGES_PER_BIG_PAGE;
        let mut victim = Pages::range(start, start + PAGES_PER_BIG_PAGE) & resident;
        if self.drain_tree {
            // Walk up from the big page: a node whose pages left in VRAM fall below half
            // of it goes whole (UVM Smart's tree-based neighbourhood eviction).
            let mut size = 2 * PAGES_PER_BIG_PAGE;
            while size <= PAGES_PER_BLOCK {
                let node = start / size * size;
                let left = resident.without(victim).count_range(node, node + size);
                if left * 2 < size {
                    victim |= resident & Pages::range(node, node + size);
                }
                size *= 2;
            }
        }
        Some((block, victim))
    }
}

/// The 64 KiB big pages with a page in `pages`.
fn big_pages(pages: Pages) -> impl Iterator<Item = u8> {
    let widened = pages.widened_to_big_pages();
    (0..(PAGES_PER_BLOCK / PAGES_PER_BIG_PAGE) as u8)
        .filter(move |b| widened.contains(usize::from(*b) * PAGES_PER_BIG_PAGE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a test does to a [`SeqQueue`] and to its model.
    #[derive(Clone, Debug)]
    enum Op {
        /// Places these keys (placed or not) at one new seq, in increasing key order, as
        /// the big pages of one arrival are.
        Place(BTreeSet<usize>),
        /// Removes a key (placed or not).
        Remove(usize),
        /// Compares the live keys, which drops the stale entries at the front.
        Check,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few keys, so that most placements replace one and stale entries pile up past
        // the compaction threshold between checks.
        prop_oneof![
            6 => proptest::collection::btree_set(0usize..12, 1..4).prop_map(Op::Place),
            2 => (0usize..12).prop_map(Op::Remove),
            1 => Just(Op::Check),
        ]
    }

    proptest! {
        /// The queue keeps the order a search tree of (seq, key) would, across re-placed,
        /// removed and shared seqs, its stale entries and its compactions; and after a
        /// placement its stale entries stay bounded.
        #[test]
        fn seq_queue_matches_a_search_tree(
            ops in proptest::collection::vec(op(), 1..600),
            gaps in proptest::collection::vec(1u64..4, 600),
        ) {
            let mut queue = SeqQueue::default();
            let mut model: BTreeSet<(u64, usize)> = BTreeSet::new();
            let mut since: HashMap<usize, u64> = HashMap::new();
            let mut seq = 0;
            for (op, gap) in ops.iter().zip(&gaps) {
                match op {
                    Op::Place(keys) => {
                        seq += gap;
                        for &key in keys {
                            if let Some(old) = since.insert(key, seq) {
                                model.remove(&(old, key));
                            }
                            model.insert((seq, key));
                            queue.place(key, seq);
                        }
                        prop_assert!(queue.order.len() <= 2 * queue.live + 64);
                    }
                    Op::Remove(key) => {
                        if let Some(old) = since.remove(key) {
                            model.remove(&(old, *key));
                        }
                        queue.remove(*key);
                    }
                    Op::Check => {
                        let live: Vec<usize> = queue.live().collect();
                        let want: Vec<usize> = model.iter().map(|&(_, key)| key).collect();
                        prop_assert_eq!(live, want);
                    }
                }
                prop_assert_eq!(queue.live, since.len());
                for key in 0..12 {
                    prop_assert_eq!(queue.contains(key), since.contains_key(&key));
                }
            }
            let live: Vec<usize> = queue.live().collect();
            prop_assert_eq!(live, model.iter().map(|&(_, key)| key).collect::<Vec<_>>());
        }
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "placed after")]
    fn a_seq_smaller_than_the_last_is_refused() {
        let mut queue = SeqQueue::default();
        queue.place(0, 5);
        queue.place(1, 4);
    }
}
