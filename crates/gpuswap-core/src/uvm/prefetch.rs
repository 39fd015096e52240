//! What a fault batch migrates besides the faulted pages (`prefetch = ...`).

use super::pages::{PAGES_PER_BIG_PAGE, PAGES_PER_BLOCK, Pages};

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
pub struct PrefetchEntry {
    /// The name scenarios use.
    pub name: &'static str,
    /// One line.
    pub description: &'static str,
    /// A fresh instance.
    pub build: fn() -> Box<dyn Prefetch>,
}

/// Every prefetcher; `tree` is the driver's.
pub static PREFETCHERS: &[PrefetchEntry] = &[
    PrefetchEntry {
        name: "none",
        description: "only the faulted 4 KiB pages",
        build: || Box::new(NoPrefetch),
    },
    PrefetchEntry {
        name: "tree",
        description: "the driver's: faults widened to 64 KiB, then the highest node of a bitmap tree over the 2 MiB block that is more than 51 % populated",
        build: || {
            Box::new(Tree {
                threshold_percent: TREE_THRESHOLD_PERCENT,
            })
        },
    },
    PrefetchEntry {
        name: "sequential-64k",
        description: "the faulted pages' whole 64 KiB big pages",
        build: || Box::new(Sequential64k),
    },
    PrefetchEntry {
        name: "random-4k",
        description: "the faulted pages and, per fault, one other page of the block chosen at random",
        build: || {
            Box::new(Random4k {
                state: RANDOM_4K_START,
            })
        },
    },
];

/// The prefetcher called `name`.
pub fn find_prefetch(name: &str) -> Option<&'static PrefetchEntry> {
    PREFETCHERS.iter().find(|p| p.name == name)
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
        let populated = resident | widened;
        // Nodes of a big page or less are covered by the widened faults already; the
        // larger ones are made of whole half-words (32 pages) and words: count those once.
        let (populated, valid_words) = (populated.words(), valid.words());
        let count = |words: &[u64; 8], start: usize, size: usize| -> usize {
            if size < 64 {
                let mask = ((1u64 << size) - 1) << (start % 64);
                (words[start / 64] & mask).count_ones() as usize
            } else {
                words[start / 64..(start + size) / 64]
                    .iter()
                    .map(|w| w.count_ones() as usize)
                    .sum()
            }
        };
        let mut region = widened;
        // The faulted big pages as one bit each (a random fault sets one of 32).
        let mut faulted_big: u32 = 0;
        for (i, w) in widened.words().iter().enumerate() {
            for j in 0..64 / PAGES_PER_BIG_PAGE {
                if (w >> (j * PAGES_PER_BIG_PAGE)) & 0xFFFF != 0 {
                    faulted_big |= 1 << (i * 4 + j);
                }
            }
        }
        while faulted_big != 0 {
            let big = faulted_big.trailing_zeros() as usize;
            faulted_big &= faulted_big - 1;
            let page = big * PAGES_PER_BIG_PAGE;
            let mut size = 2 * PAGES_PER_BIG_PAGE;
            let mut best = None;
            while size <= PAGES_PER_BLOCK {
                let start = page / size * size;
                // A node past the end of a partial block counts only the pages that exist.
                let pages = count(&valid_words, start, size);
                if count(&populated, start, size) * 100 > pages * self.threshold_percent {
                    best = Some((start, size));
                }
                size *= 2;
            }
            if let Some((start, size)) = best {
                region |= Pages::range(start, start + size);
            }
        }
        region & valid
    }
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
