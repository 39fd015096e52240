//! The daemon's decisions under arbitrary client input: bytes become connections,
//! frames, closes and clock ticks (`gpuswap_daemon::fuzz::drive`); a panic or a broken
//! invariant is a finding. Add a finding's input to `fuzz/corpus/endpoint/` once fixed:
//! the stable test replays it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(finding) = gpuswap_daemon::fuzz::drive(data) {
        panic!("{finding}");
    }
});
