//! The geometry of managed memory (`../shared/spec/uvm-driver.md`: 4 KiB pages, 64 KiB
//! big pages, 2 MiB VA blocks) and the per-block page bitmap everything else is built on.
//! Its operations are `#[inline]`: the device's MMU in gpuswap-sim calls them on every
//! touch, across the crate boundary.

/// Bytes of a page.
pub const PAGE_BYTES: u64 = 4096;
/// Pages of a 64 KiB big page, the prefetch unit.
pub const PAGES_PER_BIG_PAGE: usize = 16;
/// Pages of a 2 MiB VA block.
pub const PAGES_PER_BLOCK: usize = 512;
/// 64-bit words of a block's bitmap (64 pages each).
pub const WORDS_PER_BLOCK: usize = PAGES_PER_BLOCK / 64;

/// (VA block, page in the block) of a page number (page `b * 512 + i` is page `i` of
/// block `b`, the numbering the manager and the device share).
#[inline]
pub fn split(page: u64) -> (u32, usize) {
    (
        (page / PAGES_PER_BLOCK as u64) as u32,
        (page % PAGES_PER_BLOCK as u64) as usize,
    )
}

/// A set of pages of one VA block, as a bitmap: set operations and counts cost a few
/// word operations, not one per page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pages([u64; WORDS_PER_BLOCK]);

impl Pages {
    /// No page.
    pub const EMPTY: Self = Self([0; WORDS_PER_BLOCK]);
    /// Every page of a block.
    pub const FULL: Self = Self([u64::MAX; WORDS_PER_BLOCK]);

    /// Pages `start..end` of the block.
    #[inline]
    pub fn range(start: usize, end: usize) -> Self {
        let mut p = Self::EMPTY;
        p.insert_range(start, end);
        p
    }

    /// Pages `0..n` of the block (all of them from 512 on): a word at a time, with no
    /// loop for a whole block, what most blocks are.
    #[inline]
    pub fn prefix(n: usize) -> Self {
        if n >= PAGES_PER_BLOCK {
            return Self::FULL;
        }
        let mut p = Self::EMPTY;
        let full = n / 64;
        p.0[..full].fill(u64::MAX);
        if !n.is_multiple_of(64) {
            p.0[full] = (1u64 << (n % 64)) - 1;
        }
        p
    }

    /// One page: each word computed, not one stored into a set in memory (whose wider
    /// loads after a narrow store would wait for it to reach the cache). A page past the
    /// block would match no word and give the empty set: debug builds refuse it.
    #[inline]
    pub fn single(page: usize) -> Self {
        debug_assert!(page < PAGES_PER_BLOCK, "page {page} is past the block");
        Self(std::array::from_fn(|w| {
            u64::from(w == page / 64) << (page % 64)
        }))
    }

    /// Adds a page.
    #[inline]
    pub fn insert(&mut self, page: usize) {
        self.0[page / 64] |= 1 << (page % 64);
    }

    /// Removes a page.
    #[inline]
    pub fn remove(&mut self, page: usize) {
        self.0[page / 64] &= !(1 << (page % 64));
    }

    /// Adds pages `start..end`, a word at a time.
    #[inline]
    pub fn insert_range(&mut self, start: usize, end: usize) {
        for (word, mask) in word_masks(start, end) {
            self.0[word] |= mask;
        }
    }

    /// Whether the page is in the set.
    #[inline]
    pub fn contains(&self, page: usize) -> bool {
        self.0[page / 64] & (1 << (page % 64)) != 0
    }

    /// Pages in the set.
    #[inline]
    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Pages of the set in `start..end`, a word at a time (the tree eviction's
    /// pre-eviction asks this for every node above each victim big page).
    #[inline]
    pub fn count_range(&self, start: usize, end: usize) -> usize {
        word_masks(start, end)
            .map(|(word, mask)| (self.0[word] & mask).count_ones() as usize)
            .sum()
    }

    /// Whether the set is empty: the words folded together, with no branch per word.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.iter().fold(0, |acc, w| acc | w) == 0
    }

    /// The pages, in increasing order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(i, w)| {
            let mut w = *w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(i * 64 + bit)
            })
        })
    }

    /// The bitmap's words, 64 pages each in address order.
    #[inline]
    pub fn words(&self) -> [u64; WORDS_PER_BLOCK] {
        self.0
    }

    /// The set whose words, 64 pages each in address order, are `words` (the inverse of
    /// [`Pages::words`], for state kept word by word).
    #[inline]
    pub fn from_words(words: [u64; WORDS_PER_BLOCK]) -> Self {
        Self(words)
    }

    /// The position of the set's `k`-th page (0-based), a word at a time.
    #[inline]
    pub fn nth(&self, mut k: usize) -> Option<usize> {
        for (i, w) in self.0.iter().enumerate() {
            let n = w.count_ones() as usize;
            if k < n {
                let mut w = *w;
                for _ in 0..k {
                    w &= w - 1;
                }
                return Some(i * 64 + w.trailing_zeros() as usize);
            }
            k -= n;
        }
        None
    }

    /// The set's first `n` pages (all of them when it has fewer).
    #[inline]
    pub fn first(&self, n: usize) -> Self {
        match self.nth(n) {
            Some(end) => *self & Self::range(0, end),
            None => *self,
        }
    }

    /// The pages of the set not in `other`.
    #[inline]
    pub fn without(self, other: Self) -> Self {
        self & !other
    }

    /// Every 64 KiB big page with a page in the set, whole: per word, each 16-bit lane
    /// folds onto its lowest bit, which then fills the lane (no loop over big pages).
    #[inline]
    pub fn widened_to_big_pages(&self) -> Self {
        const _: () = assert!(PAGES_PER_BIG_PAGE == 16, "lanes of 16 bits");
        const LANE_LOW_BITS: u64 = 0x0001_0001_0001_0001;
        let mut out = *self;
        for w in &mut out.0 {
            // Shifts of 15 bits in all: a lane's lowest bit gathers only its own lane.
            let mut x = *w;
            x |= x >> 8;
            x |= x >> 4;
            x |= x >> 2;
            x |= x >> 1;
            *w = (x & LANE_LOW_BITS) * 0xFFFF;
        }
        out
    }
}

/// The words of pages `start..end` and the mask of the range's bits in each.
#[inline]
fn word_masks(start: usize, end: usize) -> impl Iterator<Item = (usize, u64)> {
    let mut page = start;
    std::iter::from_fn(move || {
        if page >= end {
            return None;
        }
        let (word, bit) = (page / 64, page % 64);
        let len = (64 - bit).min(end - page);
        let mask = if len == 64 {
            u64::MAX
        } else {
            ((1u64 << len) - 1) << bit
        };
        page += len;
        Some((word, mask))
    })
}

impl std::ops::BitOr for Pages {
    type Output = Self;
    #[inline]
    fn bitor(mut self, rhs: Self) -> Self {
        for (a, b) in self.0.iter_mut().zip(rhs.0) {
            *a |= b;
        }
        self
    }
}

impl std::ops::BitAnd for Pages {
    type Output = Self;
    #[inline]
    fn bitand(mut self, rhs: Self) -> Self {
        for (a, b) in self.0.iter_mut().zip(rhs.0) {
            *a &= b;
        }
        self
    }
}

impl std::ops::Not for Pages {
    type Output = Self;
    #[inline]
    fn not(mut self) -> Self {
        for a in &mut self.0 {
            *a = !*a;
        }
        self
    }
}

impl std::ops::BitOrAssign for Pages {
    #[inline]
    fn bitor_assign(&mut self, rhs: Self) {
        *self = *self | rhs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn widening_covers_whole_big_pages() {
        let p = Pages::single(17) | Pages::single(100);
        let w = p.widened_to_big_pages();
        assert_eq!(w, Pages::range(16, 32) | Pages::range(96, 112));
        assert_eq!(w.count(), 32);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "past the block")]
    fn a_single_page_past_the_block_is_refused() {
        Pages::single(PAGES_PER_BLOCK);
    }

    proptest! {
        /// Ranges and counts agree with a page-by-page model.
        #[test]
        fn ranges_match_a_model(start in 0usize..512, len in 0usize..512, probe in 0usize..512) {
            let end = (start + len).min(PAGES_PER_BLOCK);
            let p = Pages::range(start, end);
            prop_assert_eq!(p.count(), end - start);
            prop_assert_eq!(p.contains(probe), (start..end).contains(&probe));
            prop_assert_eq!(p.iter().collect::<Vec<_>>(), (start..end).collect::<Vec<_>>());
            prop_assert_eq!(p.count_range(0, probe), (start..end).filter(|x| *x < probe).count());
            let k = probe % (end - start + 1);
            prop_assert_eq!(p.nth(k), (start..end).nth(k));
            prop_assert_eq!(p.first(k).count(), k);
            // A prefix is the range from page 0.
            prop_assert_eq!(Pages::prefix(end), Pages::range(0, end));
        }
    }
}
