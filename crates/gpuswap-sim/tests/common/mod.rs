//! What the integration tests share.

// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

/// The Rodinia apps of the GPUswap evaluation.
pub const RODINIA: [&str; 8] = [
    "backprop",
    "bfs",
    "heartwall",
    "hotspot",
    "lud",
    "nn",
    "srad_v1",
    "srad_v2",
];

/// VRAM held at `time_ns` by a tenant's timeline.
pub fn vram_at(timeline: &[(u64, u64)], time_ns: u64) -> u64 {
    timeline
        .iter()
        .take_while(|(t, _)| *t <= time_ns)
        .last()
        .map_or(0, |(_, bytes)| *bytes)
}
