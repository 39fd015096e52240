//! The tenants with kernels queued, as a bitmap: the round robin asks for the first one
//! at or after a position, wrapping around, in a word scan instead of a tree walk.

/// A set of tenant indices.
#[derive(Debug, Default)]
pub(super) struct ReadySet {
    words: Vec<u64>,
}

impl ReadySet {
    pub(super) fn insert(&mut self, t: usize) {
        let word = t / 64;
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << (t % 64);
    }

    pub(super) fn remove(&mut self, t: usize) {
        if let Some(word) = self.words.get_mut(t / 64) {
            *word &= !(1 << (t % 64));
        }
    }

    /// Whether `t` is a member.
    pub(super) fn contains(&self, t: usize) -> bool {
        self.words
            .get(t / 64)
            .is_some_and(|w| w & (1 << (t % 64)) != 0)
    }

    /// The first member at or after `start`, else the first member at all.
    pub(super) fn next_from(&self, start: usize) -> Option<usize> {
        self.first_from(start).or_else(|| self.first_from(0))
    }

    fn first_from(&self, start: usize) -> Option<usize> {
        let mut word = start / 64;
        let mut bits = self.words.get(word)? & (u64::MAX << (start % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            bits = *self.words.get(word)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// The bitmap answers as an ordered set with wrap-around would.
        #[test]
        fn next_from_matches_an_ordered_set(
            ops in proptest::collection::vec((0usize..200, any::<bool>()), 0..100),
            start in 0usize..220,
        ) {
            let (mut set, mut model) = (ReadySet::default(), BTreeSet::new());
            for (t, insert) in ops {
                if insert {
                    set.insert(t);
                    model.insert(t);
                } else {
                    set.remove(t);
                    model.remove(&t);
                }
            }
            let want = model.range(start..).next().or_else(|| model.first()).copied();
            prop_assert_eq!(set.next_from(start), want);
        }
    }
}
