//! The table of wake-ups kept out of the event queue: the link's next completion and
//! the running kernels' fixed-part ends. Both move often (the link's whenever a flow
//! starts or ends, under MPS a kernel's whenever the sharing changes), and superseded
//! wake-ups in the heap were a third of the events of link-heavy runs; a short table
//! beats two heap operations per change. The event loop asks it for its earliest.

use gpuswap_core::LaunchId;

use super::Event;

/// The devices' wake-ups, as (time, sequence number) keys in the event queue's order.
#[derive(Default)]
pub(super) struct Wakes {
    /// The link's wake-up at its next completion.
    link: Option<(u64, u64)>,
    /// When running kernels' fixed parts end: one per kernel in its fixed part.
    kernels: Vec<(u64, u64, LaunchId)>,
}

impl Wakes {
    /// When the link's wake-up is due.
    #[inline]
    pub(super) fn link_ns(&self) -> Option<u64> {
        self.link.map(|w| w.0)
    }

    /// Sets (or clears) the link's wake-up.
    #[inline]
    pub(super) fn set_link(&mut self, wake: Option<(u64, u64)>) {
        self.link = wake;
    }

    /// Adds a wake-up at the end of `launch`'s fixed part.
    #[inline]
    pub(super) fn add_kernel(&mut self, at_ns: u64, seq: u64, launch: LaunchId) {
        self.kernels.push((at_ns, seq, launch));
    }

    /// Moves `launch`'s fixed-part wake-up to `at_ns` (a later sequence number).
    pub(super) fn move_kernel(&mut self, at_ns: u64, seq: u64, launch: LaunchId) {
        self.kernels.retain(|w| w.2 != launch);
        self.kernels.push((at_ns, seq, launch));
    }

    /// Takes the earliest wake-up if it comes before both `queued` and `now` (the keys
    /// of the queue's and the current time's next events), as its key and event.
    #[inline]
    pub(super) fn take_before(
        &mut self,
        queued: (u64, u64),
        now: (u64, u64),
    ) -> Option<((u64, u64), Event)> {
        // u64::MAX stands for an empty source (no real event gets that sequence number).
        const NONE: (u64, u64) = (u64::MAX, u64::MAX);
        let link = self.link.unwrap_or(NONE);
        let kernel = self
            .kernels
            .iter()
            .enumerate()
            .min_by_key(|(_, w)| (w.0, w.1))
            .map_or((NONE, 0), |(i, w)| ((w.0, w.1), i));
        // Compared one by one: the tuples' `min` costs more, on every event.
        if kernel.0 < queued && kernel.0 < now && kernel.0 < link {
            let (_, _, launch) = self.kernels.swap_remove(kernel.1);
            Some((kernel.0, Event::KernelFixedDone(launch)))
        } else if link < queued && link < now {
            self.link = None;
            Some((link, Event::LinkWake))
        } else {
            None
        }
    }
}
