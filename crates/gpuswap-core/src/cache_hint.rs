//! Hints to the CPU's caches: the one place in the core that speaks to the processor
//! directly (an intrinsic), so that its `unsafe` stays out of the decision code.

/// Asks the CPU to bring `value`'s cache line in, without waiting for it: random page
/// touches and fault batches miss the cache on every block's state, and hints issued
/// well before the state is needed let those misses overlap with each other and with
/// the work in between (where a plain load, even one whose value goes unread, holds up
/// retirement until it arrives, so the core soon stalls behind it). A hint only: it
/// changes no state, and without one for the target it does nothing.
#[inline(always)]
pub fn load_soon<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 target has. Beyond that, a
    // prefetch reads nothing the program sees and never faults, even on an address
    // that is not mapped (and `value` is a live reference).
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
