//! What the daemon's test binaries share.

use gpuswap_core::{MIB, PolicySettings};
use gpuswap_daemon::DaemonConfig;

/// The configuration of a test daemon named `name`: 1 TiB of host memory, 2 MiB
/// chunks, and VRAM taken from the first tenant's device.
pub fn config(name: &str) -> DaemonConfig {
    let dir = std::env::temp_dir().join(format!("gpuswapd-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    DaemonConfig {
        socket: dir.join("d.sock"),
        vram_bytes: None,
        host_bytes: 1 << 40,
        chunk_bytes: 2 * MIB,
        policy: PolicySettings::named("gpuswap"),
        return_interval_ns: 50_000_000,
        verbose: false,
        contracts: Default::default(),
        gpu_time: Default::default(),
        idle: Default::default(),
        socket_group: None,
        metrics_listen: None,
        max_connections: gpuswap_daemon::DEFAULT_MAX_CONNECTIONS,
        probe_remote: false,
        device_uuid: None,
    }
}
