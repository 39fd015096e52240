//! SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators",
//! OOPSLA 2014): the core's one source of reproducible pseudo-random numbers, so that
//! every choice follows from the seed without a generator crate in the core.

/// The SplitMix64 finalizer: a well-mixed 64-bit value of `z`.
pub fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The next value of the SplitMix64 sequence whose state is `state`.
pub fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    finalize(*state)
}
