//! Thrashing detection and mitigation as NVIDIA's open UVM driver does it
//! (`uvm_perf_thrashing.c`; defaults in `../shared/spec/uvm-driver.md`): a page that
//! migrates again and again within a short lapse is throttled (its faults wait a nap),
//! and after enough throttles pinned in host memory and mapped remotely, so the GPU
//! reads it over the link instead of bouncing it, until the pin period ends.
//!
//! The driver keeps this state per page of a VA block once the block shows thrashing;
//! so does this module ([`BlockThrash`], made when a block first loses pages it had
//! migrated within a lapse). Simplifications, each small against the mechanism:
//! - a migration's event time is the batch's service time, and an eviction's is the
//!   time of the batch that needed the room;
//! - the lapse does not adapt by votes (the driver's shrink test repeats its grow
//!   condition, so in practice it only grows from 500 us, its maximum's start);
//! - a throttled fault waits one nap and is then serviced in the same batch (the
//!   driver replays it after the nap).

use super::pages::{PAGES_PER_BLOCK, Pages};

/// The driver's thrashing parameters (`uvm_perf_thrashing_*` module parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThrashingParams {
    /// Events closer than this count toward thrashing (`lapse_usec`, 500 us).
    pub lapse_ns: u64,
    /// Events in a row, each within a lapse of the last, that make a page thrashing
    /// (`threshold`, 3).
    pub threshold: u8,
    /// How long a throttled fault waits (`nap`, 1 lapse).
    pub nap_ns: u64,
    /// Throttles after which the page is pinned instead (`pin_threshold`, 10).
    pub pin_threshold: u8,
    /// How long a pin lasts (`pin`, 300 lapses = 150 ms).
    pub pin_ns: u64,
    /// A block with no thrashing for this long is reset (`epoch`, 2000 lapses = 1 s).
    pub epoch_ns: u64,
    /// Resets per block before its detection stops (`max_resets`, 4).
    pub max_resets: u8,
}

impl Default for ThrashingParams {
    /// The driver's defaults (`uvm_perf_thrashing.c`, `../shared/spec/uvm-driver.md`).
    fn default() -> Self {
        const LAPSE_NS: u64 = 500_000;
        Self {
            lapse_ns: LAPSE_NS,
            threshold: 3,
            nap_ns: LAPSE_NS,
            pin_threshold: 10,
            pin_ns: 300 * LAPSE_NS,
            epoch_ns: 2000 * LAPSE_NS,
            max_resets: 4,
        }
    }
}

/// The block's per-page state, a field to an array (dense by page): an eviction records
/// hundreds of pages' events, and reads and writes only their times and counts.
#[derive(Debug)]
struct PageStates {
    /// When each page's last migration event was.
    last_event_ns: [u64; PAGES_PER_BLOCK],
    /// Each page's events in a row, each within a lapse of the last.
    events: [u8; PAGES_PER_BLOCK],
    /// Each page's throttles since it was last pinned.
    throttles: [u8; PAGES_PER_BLOCK],
    /// When each page's pin ends (read only for pinned pages).
    pinned_until_ns: [u64; PAGES_PER_BLOCK],
}

/// Per-page thrashing state of one VA block.
#[derive(Debug)]
pub struct BlockThrash {
    pages: Box<PageStates>,
    /// Pages pinned in host memory (mapped remotely for the GPU).
    pub pinned: Pages,
    /// When the earliest pin ends (none: `u64::MAX`).
    earliest_unpin_ns: u64,
    last_thrash_ns: u64,
    resets: u8,
}

impl BlockThrash {
    /// State for a block that starts being watched at `now_ns`.
    pub fn new(now_ns: u64) -> Self {
        Self {
            pages: Box::new(PageStates {
                last_event_ns: [0; PAGES_PER_BLOCK],
                events: [0; PAGES_PER_BLOCK],
                throttles: [0; PAGES_PER_BLOCK],
                pinned_until_ns: [0; PAGES_PER_BLOCK],
            }),
            pinned: Pages::EMPTY,
            earliest_unpin_ns: u64::MAX,
            last_thrash_ns: now_ns,
            resets: 0,
        }
    }

    /// Records a migration of `pages` (either way) at `now_ns`.
    pub fn record(&mut self, pages: Pages, now_ns: u64, params: &ThrashingParams) {
        self.maybe_reset(now_ns, params);
        if self.resets > params.max_resets {
            return;
        }
        let states = &mut *self.pages;
        for i in pages.iter() {
            let events = &mut states.events[i];
            *events = if *events > 0
                && now_ns.saturating_sub(states.last_event_ns[i]) <= params.lapse_ns
            {
                events.saturating_add(1)
            } else {
                1
            };
            states.last_event_ns[i] = now_ns;
        }
    }

    /// The hint for faulted `pages` at `now_ns` (after [`BlockThrash::record`]): the
    /// pages to pin and whether any is throttled. Pinned pages are marked here.
    pub fn hints(&mut self, pages: Pages, now_ns: u64, params: &ThrashingParams) -> (Pages, bool) {
        let mut pin = Pages::EMPTY;
        let mut throttled = false;
        if self.resets > params.max_resets {
            return (pin, throttled);
        }
        let states = &mut *self.pages;
        for i in pages.iter() {
            if states.events[i] < params.threshold {
                continue;
            }
            self.last_thrash_ns = now_ns;
            if states.throttles[i] < params.pin_threshold {
                states.throttles[i] += 1;
                throttled = true;
            } else {
                // A pinned page starts over.
                states.last_event_ns[i] = 0;
                states.events[i] = 0;
                states.throttles[i] = 0;
                states.pinned_until_ns[i] = now_ns + params.pin_ns;
                pin.insert(i);
                self.earliest_unpin_ns = self.earliest_unpin_ns.min(now_ns + params.pin_ns);
            }
        }
        self.pinned |= pin;
        (pin, throttled)
    }

    /// Ends the pins that are over at `now_ns`.
    pub fn unpin_expired(&mut self, now_ns: u64) {
        if now_ns < self.earliest_unpin_ns {
            return;
        }
        let mut earliest = u64::MAX;
        let pinned = self.pinned;
        for i in pinned.iter() {
            let until = self.pages.pinned_until_ns[i];
            if until <= now_ns {
                self.pinned.remove(i);
            } else {
                earliest = earliest.min(until);
            }
        }
        self.earliest_unpin_ns = earliest;
    }

    /// Forgets the counts of a block quiet for an epoch (pins run out on their own).
    fn maybe_reset(&mut self, now_ns: u64, params: &ThrashingParams) {
        if now_ns.saturating_sub(self.last_thrash_ns) <= params.epoch_ns {
            return;
        }
        self.last_thrash_ns = now_ns;
        self.resets = self.resets.saturating_add(1);
        let states = &mut *self.pages;
        states.last_event_ns.fill(0);
        states.events.fill(0);
        states.throttles.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_quick_events_throttle_and_ten_throttles_pin() {
        let params = ThrashingParams::default();
        let mut b = BlockThrash::new(0);
        let page = Pages::single(5);
        let mut t = 0;
        // Two events: not yet thrashing.
        for _ in 0..2 {
            t += 100_000;
            b.record(page, t, &params);
            assert_eq!(b.hints(page, t, &params), (Pages::EMPTY, false));
        }
        // Events three to twelve throttle; the thirteenth pins.
        for _ in 0..10 {
            t += 100_000;
            b.record(page, t, &params);
            assert_eq!(b.hints(page, t, &params), (Pages::EMPTY, true));
        }
        t += 100_000;
        b.record(page, t, &params);
        assert_eq!(b.hints(page, t, &params), (page, false));
        assert!(b.pinned.contains(5));
        // The pin lasts 150 ms.
        b.unpin_expired(t + params.pin_ns - 1);
        assert!(b.pinned.contains(5));
        b.unpin_expired(t + params.pin_ns);
        assert!(b.pinned.is_empty());
    }

    #[test]
    fn events_further_apart_than_a_lapse_start_over() {
        let params = ThrashingParams::default();
        let mut b = BlockThrash::new(0);
        let page = Pages::single(0);
        for i in 1..=5 {
            let t = i * (params.lapse_ns + 1);
            b.record(page, t, &params);
            assert_eq!(b.hints(page, t, &params), (Pages::EMPTY, false));
        }
    }
}
