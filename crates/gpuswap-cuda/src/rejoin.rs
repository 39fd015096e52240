//! What lets a process outlive its daemon without holding memory the next daemon does
//! not know of: the connection's state as the hooks read it (connected, or lost and
//! why), the pace of reconnection after a loss, the declaration of the buffers the
//! process holds (cut into frames), and the device's real free memory, which the
//! daemon bounds its budget by.

use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use gpuswap_wire::{ClientMsg, HeldBuffer};

/// Why the daemon is lost, while it is: set at each loss, cleared at each reconnection.
/// Every launch asks, so a read takes no lock: the reason is a leaked string, one per
/// loss (a process loses its daemon a few times at most).
pub(crate) struct Lost(AtomicPtr<String>);

impl Lost {
    pub const fn new() -> Self {
        Self(AtomicPtr::new(null_mut()))
    }

    /// Why the daemon is lost, if it is.
    pub fn get(&self) -> Option<&'static str> {
        let why = self.0.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a leaked `String`, never freed.
        (!why.is_null()).then(|| unsafe { (*why).as_str() })
    }

    /// The daemon is lost for `why`.
    pub fn set(&self, why: String) {
        self.0
            .store(Box::into_raw(Box::new(why)), Ordering::Release);
    }

    /// A daemon is connected again.
    pub fn clear(&self) {
        self.0.store(null_mut(), Ordering::Release);
    }
}

/// The pause before the first reconnection attempt after a loss; each failed attempt
/// doubles it up to [`RETRY_MAX`]. A restarted daemon is usually listening again
/// within a second.
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between two attempts.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// How long after a loss the process keeps trying: then it gives up cleanly and stays
/// unmanaged (its buffers stay where they are).
pub(crate) const RETRY_FOR: Duration = Duration::from_secs(60);

/// The pauses before each reconnection attempt after a loss, until [`RETRY_FOR`] has
/// passed.
pub(crate) fn retry_pauses() -> impl Iterator<Item = Duration> {
    let mut next = RETRY_FIRST;
    let mut total = Duration::ZERO;
    std::iter::from_fn(move || {
        let pause = next;
        total += pause;
        next = (next * 2).min(RETRY_MAX);
        (total <= RETRY_FOR).then_some(pause)
    })
}

/// The most placement runs and buffers one [`ClientMsg::Held`] carries: about 40 bytes
/// of JSON each, far below the frame limit.
const RUNS_PER_FRAME: usize = 8192;

/// The declaration of `buffers`, cut into messages that each fit a frame.
pub(crate) fn declarations(buffers: Vec<HeldBuffer>) -> Vec<ClientMsg> {
    let mut out = Vec::new();
    let mut frame: Vec<HeldBuffer> = Vec::new();
    let mut runs = 0;
    for b in buffers {
        let cost = b.placement.len() + 1;
        if !frame.is_empty() && runs + cost > RUNS_PER_FRAME {
            out.push(ClientMsg::Held {
                buffers: std::mem::take(&mut frame),
            });
            runs = 0;
        }
        runs += cost;
        frame.push(b);
    }
    if !frame.is_empty() {
        out.push(ClientMsg::Held { buffers: frame });
    }
    out
}

/// How often the device's free memory is reported.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(1);

/// The device's free and total memory as the real driver reports them
/// (`cuMemGetInfo`, not the interposer's view), in the calling thread's current
/// context; `None` without one.
pub(crate) fn device_memory() -> Option<ClientMsg> {
    let (free_bytes, total_bytes) = crate::ffi::driver::memory_info()?;
    Some(ClientMsg::DeviceMemory {
        free_bytes,
        total_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuswap_wire::{Location, Placement};

    #[test]
    fn reconnection_pauses_grow_and_end() {
        let pauses: Vec<Duration> = retry_pauses().collect();
        assert_eq!(pauses[0], RETRY_FIRST);
        assert_eq!(pauses[1], RETRY_FIRST * 2);
        assert!(pauses.iter().all(|p| *p <= RETRY_MAX));
        let total: Duration = pauses.iter().sum();
        assert!(
            total <= RETRY_FOR && total > RETRY_FOR - RETRY_MAX,
            "{total:?}"
        );
    }

    #[test]
    fn declarations_fit_their_frames() {
        let run = Placement {
            chunks: 1,
            location: Location::Vram,
        };
        let buffer = |runs: usize| HeldBuffer {
            bytes: runs as u64 * 2,
            chunk_bytes: 2,
            placement: vec![run; runs],
        };
        assert!(declarations(Vec::new()).is_empty());
        let many: Vec<HeldBuffer> = (0..3).map(|_| buffer(5000)).collect();
        let msgs = declarations(many);
        assert_eq!(msgs.len(), 3);
        for m in &msgs {
            let mut frame = Vec::new();
            gpuswap_wire::write_frame(&mut frame, m).unwrap();
        }
        let few: Vec<HeldBuffer> = (0..100).map(|_| buffer(3)).collect();
        assert_eq!(declarations(few).len(), 1);
    }

    #[test]
    fn the_lost_flag_is_set_and_cleared() {
        let lost = Lost::new();
        assert_eq!(lost.get(), None);
        lost.set("gone".into());
        assert_eq!(lost.get(), Some("gone"));
        lost.clear();
        assert_eq!(lost.get(), None);
    }
}
