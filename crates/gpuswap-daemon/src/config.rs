//! What the daemon is started with: a leaf the serve loop and the endpoint both read.

use std::path::PathBuf;

use gpuswap_core::PolicySettings;
use gpuswap_core::gpu_time::{GpuTime, Idle};

use crate::identity::Contracts;

/// The connections a daemon serves at once unless told otherwise: far more processes
/// than share one GPU, few enough that their threads (two each) and files (one each)
/// stay well inside a user's limits.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// What the daemon is started with.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// The socket's path.
    pub socket: PathBuf,
    /// VRAM to manage; `None`: nine tenths of what the first tenant's device reports.
    pub vram_bytes: Option<u64>,
    /// Host memory evicted chunks may fill.
    pub host_bytes: u64,
    /// Chunk size: a multiple of the device's allocation granularity (2 MiB today).
    pub chunk_bytes: u64,
    /// The manager's mode and parameters (checked by [`crate::check_policy`]).
    pub policy: PolicySettings,
    /// Period of the return check.
    pub return_interval_ns: u64,
    /// Log connections and refusals to standard error.
    pub verbose: bool,
    /// Memory contracts by process name (the name a process gives in its hello:
    /// `GPUSWAP_TENANT_NAME`, else its program's name), each given only to the
    /// processes its `uids` and `cgroup` admit, and the `--contracts-dir` they are
    /// read from again; other processes get the default contract.
    pub contracts: Contracts,
    /// How tenants share the GPU's time (`--set gpu_time=turns`).
    pub gpu_time: GpuTime,
    /// What becomes of an idle tenant's memory (`--set idle=`, `--set demote_after=`).
    pub idle: Idle,
    /// The group whose members may connect (`--socket-group`: the socket is 0660 and
    /// peers of any uid are admitted); `None`: the daemon's own user only (0600).
    pub socket_group: Option<u32>,
    /// Where to serve the metrics over HTTP (`--metrics-listen`, `127.0.0.1:9402`);
    /// `None`: not at all.
    pub metrics_listen: Option<String>,
    /// The GPU the daemon is bound to (`--device`, as `gpuswap_wire::uuid_text` writes
    /// it): processes of another device are refused. `None`: whichever device its
    /// processes use.
    pub device_uuid: Option<String>,
    /// Ask the first tenants to measure the link's remote-read cost, which the automatic
    /// choice then starts from (`Welcome::probe_remote`): under `gpu_time = "auto"`
    /// unless the operator gave the cost (`--set remote_cost=`).
    pub probe_remote: bool,
    /// The most connections served at once (tenants, observers and connections yet to
    /// say hello); one more is refused with a message and closed.
    pub max_connections: usize,
}
