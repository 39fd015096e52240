//! The table of wake-ups kept out of the event queue: the link's next completion and
//! the running kernels' fixed-part ends. Both move often (the link's whenever a flow
//! starts or ends, under MPS a kernel's whenever the sharing changes), and superseded
//! wake-ups in the heap were a third of the events of link-heavy runs; a short table
//! beats two heap operations per change. The event loop asks it for its earliest.

use gpuswap_core::LaunchId;

use super::Event;

/// Which wake-up of the table: the link's, or a kernel's at this index.
#[derive(Clone, Copy)]
pub(super) enum Wake {
    Link,
    Kernel(usize),
}

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

    /// The earliest wake-up's key, and which one it is (`None`: the table is empty, and
    /// the key is `(u64::MAX, u64::MAX)`, after every real event's).
    #[inline]
    pub(super) fn earliest(&self) -> ((u64, u64), Option<Wake>) {
        let mut first = self
            .link
            .map_or(((u64::MAX, u64::MAX), None), |w| (w, Some(Wake::Link)));
        for (i, w) in self.kernels.iter().enumerate() {
            if (w.0, w.1) < first.0 {
                first = ((w.0, w.1), Some(Wake::Kernel(i)));
            }
        }
        first
    }

    /// Takes the wake-up `earliest` named, as its event.
    #[inline]
    pub(super) fn take(&mut self, wake: Wake) -> Event {
        match wake {
            Wake::Link => {
                self.link = None;
                Event::LinkWake
            }
            Wake::Kernel(i) => Event::KernelFixedDone(self.kernels.swap_remove(i).2),
        }
    }
}
