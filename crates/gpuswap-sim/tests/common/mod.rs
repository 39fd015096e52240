//! What the integration tests share.

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
