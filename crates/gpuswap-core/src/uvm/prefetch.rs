//! What a fault batch migrates besides the faulted pages (`prefetch = ...`).

use super::pages::{PAGES_PER_BLOCK, Pages, WORDS_PER_BLOCK};
use crate::params::{Choice, Registered};

/// Chooses, per VA block, the pages a batch migrates.
pub trait Prefetch: std::fmt::Debug + Send {
    /// The pages to make resident in a block with `resident` pages (of `valid` ones)
    /// when `faulted` pages faulted; always includes the faulted ones.
    fn region(&mut self, resident: Pages, valid: Pages, faulted: Pages) -> Pages;

    /// Starts its random choices from the run's `seed` (a prefetcher that makes none
    /// ignores it).
    fn reseed(&mut self, _seed: u64) {}
}

/// A registered prefetcher.
pub type PrefetchEntry = Registered<fn() -> Box<dyn Prefetch>>;

/// Every prefetcher; `tree` is the driver's.
pub static PREFETCHERS: &[PrefetchEntry] = &[
    PrefetchEntry {
        choice: Choice::new("none", "only the faulted 4 KiB pages"),
        build: || Box::new(NoPrefetch),
    },
    PrefetchEntry {
        choice: Choice::new(
            "tree",
            "the driver's: faults widened to 64 KiB, then the highest node of a bitmap tree over the 2 MiB block that is more than 51 % populated",
        ),
        build: || {
            Box::new(Tree {
                threshold_percent: TREE_THRESHOLD_PERCENT,
            })
        },
    },
    PrefetchEntry {
        choice: Choice::new(
            "sequential-64k",
            "the faulted pages' whole 64 KiB big pages",
        ),
        build: || Box::new(Sequential64k),
    },
    PrefetchEntry {
        choice: Choice::new(
            "random-4k",
            "the faulted pages and, per fault, one other page of the block chosen at random",
        ),
        build: || {
            Box::new(Random4k {
                state: RANDOM_4K_START,
            })
        },
    },
];

/// The prefetcher called `name`.
pub fn find_prefetch(name: &str) -> Option<&'static PrefetchEntry> {
    Registered::find(PREFETCHERS, name)
}

/// uvm-driver.md: uvm_perf_prefetch_threshold = 51 %.
pub const TREE_THRESHOLD_PERCENT: usize = 51;

#[derive(Debug)]
struct NoPrefetch;

impl Prefetch for NoPrefetch {
    fn region(&mut self, _: Pages, valid: Pages, faulted: Pages) -> Pages {
        faulted & valid
    }
}

#[derive(Debug)]
struct Sequential64k;

impl Prefetch for Sequential64k {
    fn region(&mut self, _: Pages, valid: Pages, faulted: Pages) -> Pages {
        faulted.widened_to_big_pages() & valid
    }
}

/// The driver's tree prefetcher (uvm-driver.md, "Prefetcher"): leaves are the pages
/// resident or faulted now, faults first widened to whole 64 KiB big pages; from each
/// faulted page the walk to the root keeps the highest node whose populated pages x 100
/// exceed its pages x the threshold, and that node's pages are migrated. A node's pages
/// are those that exist (a partial last block's nodes are smaller). The driver's rule
/// for a block resident nowhere (a first touch prefetches the whole region) does not
/// apply: managed pages here always start resident in host memory.
#[derive(Debug)]
pub(super) struct Tree {
    pub(super) threshold_percent: usize,
}

impl Prefetch for Tree {
    fn region(&mut self, resident: Pages, valid: Pages, faulted: Pages) -> Pages {
        let widened = faulted.widened_to_big_pages() & valid;
        // Nodes of a big page or less are covered by the widened faults already; the
        // larger ones are half-words (32 pages) or runs of whole words, whose counts are
        // differences of running sums over the words, counted once per block rather
        // than once per node per fault. A whole block's valid pages need no counting.
        let full = (!valid).is_empty();
        let populated_words = (resident | widened).words();
        let populated_sums = word_sums(populated_words);
        let valid_words = valid.words();
        let valid_sums = if full {
            [0; WORDS_PER_BLOCK + 1]
        } else {
            word_sums(valid_words)
        };
        let over = |filled: u32, pages: u32| {
            filled as usize * 100 > pages as usize * self.threshold_percent
        };
        let mut region = widened.words();
        // The half-words with a faulted page, one bit each (a random fault sets one of
        // 16): faults in the same half-word walk the same nodes.
        let mut faulted_halves: u32 = 0;
        for (k, w) in region.into_iter().enumerate() {
            faulted_halves |= (u32::from(w as u32 != 0) | u32::from(w >> 32 != 0) << 1) << (2 * k);
        }
        while faulted_halves != 0 {
            let half = faulted_halves.trailing_zeros() as usize;
            let word = half / 2;
            // From the root down: the highest node over the threshold is the one kept,
            // so the walk stops at the first.
            let mut words = WORDS_PER_BLOCK;
            let node_halves = loop {
                if words == 0 {
                    // A half-word node (a partial block's counts only the pages it has).
                    let shift = 32 * (half % 2);
                    let half_count = |w: u64| ((w >> shift) as u32).count_ones();
                    let pages = if full {
                        HALF_WORD_PAGES
                    } else {
                        half_count(valid_words[word])
                    };
                    if over(half_count(populated_words[word]), pages) {
                        region[word] |= u64::from(u32::MAX) << shift;
                    }
                    break 1 << half;
                }
                let start = word & !(words - 1);
                let end = start + words;
                let pages = if full {
                    words as u32 * 64
                } else {
                    u32::from(valid_sums[end] - valid_sums[start])
                };
                if over(
                    u32::from(populated_sums[end] - populated_sums[start]),
                    pages,
                ) {
                    region[start..end].fill(u64::MAX);
                    break (u32::MAX >> (32 - 2 * words)) << (2 * start);
                }
                words /= 2;
            };
            // The faulted half-words inside the node walk down the same nodes to it.
            faulted_halves &= !node_halves;
        }
        Pages::from_words(region) & valid
    }
}

/// Pages of a half-word, the tree's smallest node above a big page.
const HALF_WORD_PAGES: u32 = 32;

/// Running sums of a block's pages given as its `words`: entry `k` counts the pages of
/// words `0..k`.
fn word_sums(words: [u64; WORDS_PER_BLOCK]) -> [u16; WORDS_PER_BLOCK + 1] {
    let mut sums = [0; WORDS_PER_BLOCK + 1];
    for (k, w) in words.into_iter().enumerate() {
        sums[k + 1] = sums[k] + w.count_ones() as u16;
    }
    sums
}

/// Faults plus one pseudo-random page of the block per fault (a SplitMix64 sequence,
/// so runs repeat exactly).
/// Where `random-4k`'s sequence starts at seed 0.
const RANDOM_4K_START: u64 = 0x9E37_79B9_7F4A_7C15;

#[derive(Debug)]
struct Random4k {
    state: u64,
}

impl Prefetch for Random4k {
    fn reseed(&mut self, seed: u64) {
        // Seed 0 keeps the sequence the prefetcher always had.
        self.state = RANDOM_4K_START ^ crate::mix::finalize(seed);
    }

    fn region(&mut self, _: Pages, valid: Pages, faulted: Pages) -> Pages {
        let mut region = faulted;
        for _ in 0..faulted.count() {
            region.insert((crate::mix::next(&mut self.state) % PAGES_PER_BLOCK as u64) as usize);
        }
        region & valid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(resident: Pages, faulted: Pages) -> Pages {
        Tree {
            threshold_percent: TREE_THRESHOLD_PERCENT,
        }
        .region(resident, Pages::FULL, faulted)
    }

    #[test]
    fn the_tree_prefetches_the_highest_node_over_half_populated() {
        // Pages 0..64 resident; a fault at page 70 is widened to 64..80. Populated: 80
        // pages. Nodes over page 70: 64..80 (16/16), 64..96 (16/32 = 50 %, not > 51 %),
        // 64..128 (16/64), 0..128 (80/128 = 62.5 %: yes), 0..256 (80/256), 0..512: the
        // highest over 51 % is 0..128.
        assert_eq!(
            tree(Pages::range(0, 64), Pages::single(70)),
            Pages::range(0, 128)
        );
        // Alone on an empty block, a fault brings its 64 KiB big page only: 16 of 32 pages
        // is not more than 51 %.
        assert_eq!(tree(Pages::EMPTY, Pages::single(3)), Pages::range(0, 16));
        // Two faults in neighbouring big pages fill their 32-page node: above it, 32 of
        // 64 pages is 50 %.
        assert_eq!(
            tree(Pages::EMPTY, Pages::single(3) | Pages::single(20)),
            Pages::range(0, 32)
        );
        // 256 of 512 populated (50 %) is not enough for the whole block: only the faulted
        // big page comes; 266 (52 %) is.
        assert_eq!(
            tree(Pages::range(0, 240), Pages::single(300)),
            Pages::range(288, 304)
        );
        assert_eq!(tree(Pages::range(0, 250), Pages::single(300)), Pages::FULL);
    }

    #[test]
    fn nodes_of_a_partial_block_count_only_the_pages_it_has() {
        // 40 pages; 0..16 resident; a fault at 35 widens to 32..40. Node 0..64 has 40
        // pages, 24 populated (60 % > 51 %): 16..32 comes too.
        let valid = Pages::range(0, 40);
        let mut t = Tree {
            threshold_percent: TREE_THRESHOLD_PERCENT,
        };
        assert_eq!(
            t.region(Pages::range(0, 16), valid, Pages::single(35)),
            Pages::range(0, 40)
        );
    }

    /// The tree's definition page by page: every faulted page's big page, then from
    /// each faulted page the highest node over the threshold, counted page by page.
    fn tree_model(resident: Pages, valid: Pages, faulted: Pages) -> Pages {
        let has = |p: Pages, i: usize| p.contains(i);
        let mut widened = Pages::EMPTY;
        for i in (0..PAGES_PER_BLOCK).filter(|i| has(faulted, *i)) {
            let big = i / 16 * 16;
            widened.insert_range(big, big + 16);
        }
        let widened = widened & valid;
        let mut region = widened;
        // Every page of a big page walks the same nodes: its first one stands for all.
        for i in (0..PAGES_PER_BLOCK)
            .step_by(16)
            .filter(|i| !(widened & Pages::range(*i, i + 16)).is_empty())
        {
            let mut best = None;
            for size in [32, 64, 128, 256, 512] {
                let start = i / size * size;
                let pages = (start..start + size).filter(|p| has(valid, *p)).count();
                let filled = (start..start + size)
                    .filter(|p| has(resident | widened, *p))
                    .count();
                if filled * 100 > pages * TREE_THRESHOLD_PERCENT {
                    best = Some(start..start + size);
                }
            }
            if let Some(node) = best {
                region.insert_range(node.start, node.end);
            }
        }
        region & valid
    }

    fn pages_of(words: [u64; WORDS_PER_BLOCK]) -> Pages {
        Pages::from_words(words)
    }

    proptest::proptest! {
        /// The word-at-a-time tree equals its page-by-page definition, on whole and
        /// partial blocks; widening equals its definition too.
        #[test]
        fn the_tree_matches_its_definition(
            resident in proptest::array::uniform8(proptest::num::u64::ANY),
            sparse in proptest::array::uniform8(proptest::num::u64::ANY),
            faulted in proptest::array::uniform8(proptest::num::u64::ANY),
            valid_pages in 1usize..=512,
        ) {
            // Sparse faults, as a batch has, besides dense ones.
            let resident = pages_of(resident) & pages_of(sparse);
            let faulted = pages_of(faulted) & pages_of(sparse.map(|w| w.rotate_left(7)));
            let valid = Pages::prefix(valid_pages);
            let resident = resident & valid;
            let faulted = faulted.without(resident) & valid;
            let mut t = Tree { threshold_percent: TREE_THRESHOLD_PERCENT };
            proptest::prop_assert_eq!(
                t.region(resident, valid, faulted),
                tree_model(resident, valid, faulted)
            );
            let mut widened = Pages::EMPTY;
            for i in faulted.iter() {
                widened.insert_range(i / 16 * 16, i / 16 * 16 + 16);
            }
            proptest::prop_assert_eq!(faulted.widened_to_big_pages(), widened);
        }
    }

    #[test]
    fn the_other_prefetchers_stay_inside_the_valid_pages() {
        let valid = Pages::range(0, 20);
        let faulted = Pages::single(18);
        let mut seq = Sequential64k;
        assert_eq!(
            seq.region(Pages::EMPTY, valid, faulted),
            Pages::range(16, 20)
        );
        let mut none = NoPrefetch;
        assert_eq!(none.region(Pages::EMPTY, valid, faulted), faulted);
        let mut random = Random4k { state: 1 };
        let r = random.region(Pages::EMPTY, Pages::FULL, faulted);
        assert!(r.contains(18) && (1..=2).contains(&r.count()));
    }
}
