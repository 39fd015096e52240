//! Belady's optimal replacement (evict the page used furthest in the future) on a
//! recorded stream of page touches: the fewest page migrations any policy could make
//! at the same VRAM when each fault is served before the next touch, prefetching
//! policies included (one can be turned into a demand policy that migrates no more
//! pages). A batching driver coalesces repeated touches of a page still waiting in its
//! batch, so it can beat the bound when one batch's distinct pages exceed VRAM.

use std::collections::{BTreeSet, HashMap};

/// Pages Belady's policy migrates for `stream` with room for `capacity_pages` pages.
pub fn belady_pages_in(stream: &[u64], capacity_pages: u64) -> u64 {
    // Next use of the page touched at each position (usize::MAX: never again).
    let mut next = vec![usize::MAX; stream.len()];
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (i, page) in stream.iter().enumerate().rev() {
        if let Some(j) = seen.insert(*page, i) {
            next[i] = j;
        }
    }
    // Resident pages by their next use, furthest last.
    let mut resident: BTreeSet<(usize, u64)> = BTreeSet::new();
    let mut next_use: HashMap<u64, usize> = HashMap::new();
    let mut migrated = 0;
    for (i, page) in stream.iter().enumerate() {
        match next_use.get(page) {
            Some(&when) => {
                resident.remove(&(when, *page));
            }
            None => {
                migrated += 1;
                if resident.len() as u64 >= capacity_pages.max(1)
                    && let Some(&(when, victim)) = resident.iter().next_back()
                {
                    resident.remove(&(when, victim));
                    next_use.remove(&victim);
                }
            }
        }
        resident.insert((next[i], *page));
        next_use.insert(*page, next[i]);
    }
    migrated
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn belady_keeps_what_comes_back_soonest() {
        // Room for 2: 1 2 3 1 2: when 3 comes, 2 is needed later than 1, so 2 goes and
        // misses again: 4 migrations.
        assert_eq!(belady_pages_in(&[1, 2, 3, 1, 2], 2), 4);
        // A cyclic sweep of 3 pages through room for 2: LRU misses every time (9); Belady
        // misses 3 + about half of the rest.
        let cyclic: Vec<u64> = (0..9).map(|i| i % 3).collect();
        assert_eq!(belady_pages_in(&cyclic, 2), 6);
        // Ample room: every page once.
        assert_eq!(belady_pages_in(&cyclic, 3), 3);
    }
}
