//! The wire protocol between `gpuswap daemon` and its clients: the CUDA interposer
//! (`libgpuswap_cuda.so`, one connection per process, the process is a tenant) and
//! `gpuswap top` (an observer). docs/protocol.md documents every message.
//!
//! A frame is a 4-byte little-endian length followed by that many bytes of JSON (serde),
//! at most [`MAX_FRAME_BYTES`]. The first frame of a connection is the client's
//! [`ClientMsg::Hello`] or [`ClientMsg::Observe`], carrying [`PROTOCOL_VERSION`]; the
//! daemon answers [`DaemonMsg::Welcome`] (or [`DaemonMsg::Snapshot`]) or
//! [`DaemonMsg::Refused`] and closes. Everything else follows the core's protocol
//! (`gpuswap_core::protocol`): the daemon turns the manager's actions for a tenant into
//! messages to its process and the process's answers into the manager's events.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

mod devices;
mod socket;
mod trust;
pub use devices::{device_socket, device_sockets, every_device_socket, parse_uuid, uuid_text};
pub use socket::{
    SOCKET_ENV, peer_credentials, prepare_socket_dir, socket_dir_checked, socket_path,
};
use thiserror::Error;
pub use trust::{Peer, trusted_daemon};

/// The protocol's version; a client of another version is refused with a message that
/// names both. Version 2 added turns (`Busy`, `Idle`, `Welcome::idle_report_ns`) and bulk
/// moves (`RelocateBatch`, `RelocatedBatch`). Version 3 added progress telemetry
/// (`Progress`, `Welcome::progress_report_ns`) and what a surviving process declares and
/// reports of the device (issue 39, item 5). Version 4 added the remote-read probe
/// (`Welcome::probe_remote`, `RemoteCost`) and memory the daemon cannot move
/// (`Unmovable`, `TenantRow::managed_bytes` and `pinned_bytes`; issue 41).
pub const PROTOCOL_VERSION: u32 = 4;

/// The most moves one [`DaemonMsg::RelocateBatch`] carries: 1024 chunks of 2 MiB are
/// 2 GiB, long enough to run the copy engines at full speed, and the frame (about 60
/// bytes of JSON per move) stays far below [`MAX_FRAME_BYTES`].
pub const MAX_BATCH_MOVES: usize = 1024;

/// The longest frame either side accepts: far above any real message (a grant carries
/// its placement as runs, [`Placement`], so its size does not follow the buffer's),
/// small enough that a bad length cannot make the reader allocate much.
pub const MAX_FRAME_BYTES: u32 = 1 << 20;

/// Where a chunk's data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Location {
    /// Device memory.
    Vram,
    /// Host memory mapped into the device's address space.
    Host,
}

/// A run of `chunks` consecutive chunks in one location: a buffer's placement is a list
/// of runs, so a grant's size does not grow with the buffer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Chunks in the run.
    pub chunks: u32,
    /// Where they live.
    pub location: Location,
}

/// Messages from a client to the daemon.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientMsg {
    /// First frame of a tenant: who it is and what its device offers.
    Hello {
        /// [`PROTOCOL_VERSION`] of the client.
        protocol: u32,
        /// Its process id, as it sees it (the daemon shows the pid the kernel gives for
        /// the socket's peer, `SO_PEERCRED`, which a process cannot forge).
        pid: u32,
        /// A name for reports (`GPUSWAP_TENANT_NAME`, else the program's name).
        name: String,
        /// The device's memory as the driver reports it (`cuDeviceTotalMem`).
        device_total_bytes: u64,
        /// The driver's allocation granularity (`cuMemGetAllocationGranularity`).
        granularity_bytes: u64,
        /// A memory limit the process's environment sets (HAMi-core's
        /// `CUDA_DEVICE_MEMORY_LIMIT`); 0: none. The daemon applies the smaller of it and
        /// the contract's `memory_limit`.
        #[serde(default)]
        memory_limit_bytes: u64,
        /// The device's UUID (`cuDeviceGetUuid`, as [`uuid_text`] writes it; empty when
        /// the driver gives none): a daemon bound to one GPU (`--device`) refuses a
        /// process of another.
        #[serde(default)]
        device_uuid: String,
    },
    /// First frame of an observer (`gpuswap top`): answered with one
    /// [`DaemonMsg::Snapshot`], then the daemon closes.
    Observe {
        /// [`PROTOCOL_VERSION`] of the client.
        protocol: u32,
    },
    /// The tenant allocates `bytes` (request numbers are the client's).
    Alloc {
        /// The client's number for the request, echoed in the answer.
        request: u64,
        /// How much.
        bytes: u64,
    },
    /// The tenant freed a buffer (its memory is already released on its side).
    Free {
        /// The buffer.
        buffer: u64,
    },
    /// Answer to [`DaemonMsg::Suspend`]: nothing of the tenant runs on the GPU, and
    /// nothing new starts until [`DaemonMsg::Resume`].
    Suspended,
    /// Answer to [`DaemonMsg::Relocate`]: the chunk's data is at its new location,
    /// mapped at its unchanged address, and its old memory released.
    Relocated {
        /// The relocation's number.
        copy: u64,
    },
    /// Answer to [`DaemonMsg::Relocate`]: the chunk could not be moved; its data is
    /// still where it was.
    RelocateFailed {
        /// The relocation's number.
        copy: u64,
        /// What the driver said.
        error: String,
    },
    /// Answer to [`DaemonMsg::RelocateBatch`], once every move of it is over: the moves
    /// not listed in `failed` are at their new location, mapped at their unchanged
    /// address, their old memory released; the failed ones are still where they were.
    RelocatedBatch {
        /// The batch's number.
        batch: u64,
        /// Indices into the batch's `moves` that failed (empty: all moved).
        failed: Vec<u32>,
        /// What the driver said of the first failure (empty when none failed).
        error: String,
        /// From the command's arrival to the last remap, for bytes-per-second figures.
        elapsed_ns: u64,
    },
    /// The tenant has GPU work to start (a launch or a copy) after it said [`ClientMsg::Idle`],
    /// or waits at its gate for such work. Sent only when `Welcome::idle_report_ns` is
    /// not zero, once per change.
    Busy,
    /// The tenant has started no GPU work for `Welcome::idle_report_ns`, no call that
    /// starts work is still running, and it waits for the GPU in no synchronization
    /// (a slow kernel it waits for is work). Sent only when
    /// that is not zero, once per change.
    Idle,
    /// What the tenant did on the GPU since its last report, aggregated: sent every
    /// `Welcome::progress_report_ns` while it has GPU work (never a message per launch).
    Progress(Progress),
    /// The buffers the process holds under a previous daemon, declared at once after the
    /// [`DaemonMsg::Welcome`] of a reconnection (the daemon restarted, or dropped the
    /// process): the daemon books each where it is and answers [`DaemonMsg::Adopted`],
    /// one answer per message. Several messages when one frame cannot hold them all.
    Held {
        /// The buffers, each as the process has it mapped.
        buffers: Vec<HeldBuffer>,
    },
    /// The device's memory as the driver itself reports it (`cuMemGetInfo` of the real
    /// driver, not the interposer's view): sent right after the [`DaemonMsg::Welcome`]
    /// and then about every second. The daemon's budget is at most what is free plus what
    /// its tenants hold, so memory that processes outside the daemon use is not promised.
    DeviceMemory {
        /// Free bytes on the device.
        free_bytes: u64,
        /// The device's memory.
        total_bytes: u64,
    },
    /// Answer to `Welcome::probe_remote`: how many times longer the device's kernels
    /// took to read host memory mapped into the device than its own memory, measured
    /// once by the process before its first allocation. The daemon's automatic choice
    /// starts from it (share first on a link whose remote reads cost little).
    RemoteCost {
        /// The ratio of a remote to a local read's time, at least 1.
        remote_cost: f64,
    },
    /// The memory of the tenant that the daemon cannot move, in all, sent whenever it
    /// changes (and after a reconnection): managed memory (`cuMemAllocManaged`, which
    /// the driver's own paging moves) and managed buffers pinned in place because
    /// another process maps them (`cuIpcGetMemHandle`; the process sends this before the
    /// pinned buffer's [`ClientMsg::Free`], which takes it out of the daemon's movable
    /// books). The daemon counts both against the tenant and its contract, and gives out
    /// that much less VRAM.
    Unmovable {
        /// Managed memory, at its allocated size.
        managed_bytes: u64,
        /// Buffers pinned for IPC, at their size.
        pinned_bytes: u64,
    },
}

/// One buffer of a [`ClientMsg::Held`] declaration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBuffer {
    /// Its size (whole granules, as it was granted).
    pub bytes: u64,
    /// The chunk size it was cut into (the daemon adopts it only with its own).
    pub chunk_bytes: u64,
    /// Where its chunks are now, in runs.
    pub placement: Vec<Placement>,
}

/// A tenant's GPU work over one report window ([`ClientMsg::Progress`]): what the daemon
/// estimates each tenant's slowdown from (issue 40).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// The window's length, from the previous report (or the connection) to this one.
    pub window_ns: u64,
    /// Kernel launches started in the window (a graph launch counts once).
    pub launches: u64,
    /// Their grid blocks.
    pub blocks: u64,
    /// Launches known complete in the window (from events recorded every so many
    /// launches: a lower bound that catches up at the next recorded event).
    pub completed: u64,
    /// Grid blocks of the launches known complete.
    pub completed_blocks: u64,
    /// Time the program waited in synchronizations (stream, event, context) in the window.
    pub sync_wait_ns: u64,
    /// Whether, at the window's end, nothing was launched or copied for a while and all
    /// recorded work had completed.
    pub idle: bool,
    /// The managed buffers the window's launches named in their parameters (a
    /// pointer into the buffer among a launch's arguments), each once: the touch marks
    /// the chunk policy keeps hot data local by. Empty where the interposer does not
    /// scan.
    #[serde(default)]
    pub touched: Vec<u64>,
}

/// Messages from the daemon to a client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum DaemonMsg {
    /// The tenant is admitted.
    Welcome {
        /// [`PROTOCOL_VERSION`] of the daemon.
        protocol: u32,
        /// The tenant's number (recycled after it exits).
        tenant: u32,
        /// The chunk size: buffers are mapped chunk by chunk, chunks relocate whole.
        chunk_bytes: u64,
        /// The VRAM the daemon manages: the tenant's view of the device's memory.
        vram_bytes: u64,
        /// How long without starting GPU work before the tenant says [`ClientMsg::Idle`]
        /// (and says [`ClientMsg::Busy`] at its next work); 0: never say either (the
        /// daemon's `gpu_time` does not take turns).
        #[serde(default)]
        idle_report_ns: u64,
        /// How often the tenant sends [`ClientMsg::Progress`] while it has GPU work; 0:
        /// never (the daemon does not use it).
        #[serde(default)]
        progress_report_ns: u64,
        /// The tenant's contract's `vram_limit` (0: none): its view of the device's
        /// memory is the smaller of this and `vram_bytes` (issue 41, item 5).
        #[serde(default)]
        vram_limit_bytes: u64,
        /// Measure the device's remote-read cost before the first allocation and send
        /// [`ClientMsg::RemoteCost`]: the daemon asks until one process has answered,
        /// unless its operator gave the cost (`--set remote_cost=`).
        #[serde(default)]
        probe_remote: bool,
    },
    /// The connection is refused (bad version, another user, a bad frame); the daemon
    /// closes it.
    Refused {
        /// Why, in words.
        reason: String,
    },
    /// An allocation is granted: back a reservation of `bytes` chunk by chunk as
    /// `placement` says, then hand the address to the program.
    Granted {
        /// The request answered.
        request: u64,
        /// The buffer's id (generation-tagged, recycled).
        buffer: u64,
        /// Its size.
        bytes: u64,
        /// Chunk size (the last chunk may be shorter).
        chunk_bytes: u64,
        /// Where its chunks live, in runs.
        placement: Vec<Placement>,
    },
    /// An allocation cannot be served.
    AllocFailed {
        /// The request answered.
        request: u64,
        /// Whether it is out of memory (`CUDA_ERROR_OUT_OF_MEMORY`).
        out_of_memory: bool,
        /// Why, in words.
        error: String,
    },
    /// Stop starting new GPU work (launches, copies, frees), drain what runs, and
    /// answer [`ClientMsg::Suspended`].
    Suspend,
    /// Lift the suspension.
    Resume,
    /// Move one chunk (the tenant is suspended): copy it to `to`, map the copy at the
    /// chunk's address, release the old memory, answer [`ClientMsg::Relocated`].
    Relocate {
        /// The relocation's number.
        copy: u64,
        /// The buffer.
        buffer: u64,
        /// The chunk's index in the buffer.
        chunk: u32,
        /// The destination.
        to: Location,
    },
    /// Move many chunks (the tenant is suspended) with their copies in flight together:
    /// for each move, copy the chunk to `to`, map the copy at the chunk's address and
    /// release the old memory; answer [`ClientMsg::RelocatedBatch`] once, when all are
    /// over. At most [`MAX_BATCH_MOVES`] moves.
    RelocateBatch {
        /// The batch's number.
        batch: u64,
        /// The moves.
        moves: Vec<ChunkMove>,
    },
    /// The daemon ends the tenant (its data could not be kept).
    Kill {
        /// Why.
        reason: String,
    },
    /// The daemon's state, for observers.
    Snapshot(Box<Snapshot>),
    /// Answer to [`ClientMsg::Held`]: the new id of each declared buffer, in order, for
    /// its later frees and moves; `None`: not adopted (another chunk size, or beyond what
    /// the tenant may hold), so the process keeps it unmanaged and never names it, and
    /// the daemon counts its VRAM as held by the process until the process exits.
    Adopted {
        /// One entry per declared buffer.
        buffers: Vec<Option<u64>>,
    },
}

/// One move of a [`DaemonMsg::RelocateBatch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkMove {
    /// The buffer.
    pub buffer: u64,
    /// The chunk's index in the buffer.
    pub chunk: u32,
    /// The destination.
    pub to: Location,
}

/// The upper bounds of [`LatencyHistogram`]'s buckets, ns: 100 us to 10 s in steps of
/// about the square root of 10, from a single 2 MiB chunk's move to a bulk move of
/// gigabytes over PCIe.
pub const MOVE_LATENCY_BOUNDS_NS: [u64; 11] = [
    100_000,
    316_228,
    1_000_000,
    3_162_278,
    10_000_000,
    31_622_777,
    100_000_000,
    316_227_766,
    1_000_000_000,
    3_162_277_660,
    10_000_000_000,
];

/// How long the daemon's moves took, each from its command (`Relocate` or
/// `RelocateBatch`) to the process's answer, by the daemon's clock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyHistogram {
    /// Moves per bucket of [`MOVE_LATENCY_BOUNDS_NS`] (not cumulative), and one more for
    /// those beyond the last bound; empty before the first move.
    pub counts: Vec<u64>,
    /// The moves' times, in all.
    pub sum_ns: u64,
}

impl LatencyHistogram {
    /// Counts a move of `ns`.
    pub fn record(&mut self, ns: u64) {
        self.counts.resize(MOVE_LATENCY_BOUNDS_NS.len() + 1, 0);
        let bucket = MOVE_LATENCY_BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.counts[bucket] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Moves counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// What `gpuswap top` shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// How long moves took (daemon-wide).
    #[serde(default)]
    pub move_latency: LatencyHistogram,
    /// The GPU the daemon is bound to (`--device`), empty when it serves whichever
    /// device its processes use.
    #[serde(default)]
    pub device_uuid: String,
    /// The manager's mode (`gpuswap`, ...).
    pub mode: String,
    /// VRAM the daemon manages.
    pub vram_bytes: u64,
    /// Of it, accounted to tenants.
    pub vram_used_bytes: u64,
    /// Host memory the daemon may fill with evicted chunks.
    pub host_bytes: u64,
    /// Of it, holding evicted chunks.
    pub host_used_bytes: u64,
    /// Chunk size.
    pub chunk_bytes: u64,
    /// Seconds since the daemon started.
    pub uptime_s: f64,
    /// Tenants served since the start, the connected ones included.
    pub tenants_served: u64,
    /// How tenants share GPU time: `concurrent` or `turns`.
    #[serde(default)]
    pub gpu_time: String,
    /// Under turns or auto: how GPU time is taken now, `share` or `turns` (empty under
    /// concurrent time).
    #[serde(default)]
    pub choice: String,
    /// Under auto: times the choice changed.
    #[serde(default)]
    pub switches: u64,
    /// The books' version: it moves with tenants' messages, ends and the manager's
    /// timeouts, not with observers, so a metrics scrape and a `top` of the same state
    /// carry the same number.
    #[serde(default)]
    pub generation: u64,
    /// Connections refused so far, by the kind of reason: `user`, `connections`,
    /// `no_hello`, `hello` (version, device claims), `contract`, `protocol`.
    #[serde(default)]
    pub refusals: std::collections::BTreeMap<String, u64>,
    /// Allocations answered `AllocFailed` so far.
    #[serde(default)]
    pub allocations_failed: u64,
    /// Contract claims refused so far: processes that named a contract not theirs to
    /// take (another user's, or one bound to another job's cgroup) and run under the
    /// default.
    #[serde(default)]
    pub claims_refused: u64,
    /// Under turns: the tenant holding the GPU, if one does.
    #[serde(default)]
    pub holder: Option<u32>,
    /// Under turns: times the GPU passed from one tenant to another.
    #[serde(default)]
    pub handovers: u64,
    /// Bytes moved by bulk moves ([`DaemonMsg::RelocateBatch`]) so far.
    #[serde(default)]
    pub batch_moved_bytes: u64,
    /// The latest bulk moves, oldest first (at most 16).
    #[serde(default)]
    pub batches: Vec<BatchRow>,
    /// The connected tenants, by tenant number.
    pub tenants: Vec<TenantRow>,
    /// VRAM still held by processes the daemon no longer serves (dropped, or holding
    /// buffers it could not adopt), counted until each exits: given to nobody.
    #[serde(default)]
    pub held_by_gone_bytes: u64,
    /// The VRAM the daemon gives out now: the smaller of `vram_bytes` less
    /// `held_by_gone_bytes` and what the device really has free plus what the tenants
    /// hold; 0 from a daemon that does not say.
    #[serde(default)]
    pub vram_budget_bytes: u64,
}

/// One connected tenant in a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TenantRow {
    /// Its number.
    pub tenant: u32,
    /// Its process.
    pub pid: u32,
    /// Its name.
    pub name: String,
    /// Buffers it holds.
    pub buffers: u64,
    /// Bytes of them in VRAM.
    pub vram_bytes: u64,
    /// Bytes of them in host memory.
    pub host_bytes: u64,
    /// Bytes relocated from VRAM to host memory so far.
    pub evicted_bytes: u64,
    /// Bytes relocated back.
    pub returned_bytes: u64,
    /// Chunks it relocated.
    pub relocations: u64,
    /// Allocations that waited for a relocation.
    pub waits: u64,
    /// Time they waited, in all.
    pub wait_ns: u64,
    /// Time its chunk moves that succeeded took, each from the daemon's command to the
    /// process's answer, in all.
    #[serde(default)]
    pub relocation_ns: u64,
    /// Time its suspensions took to drain, each from the daemon's command to the
    /// process's answer, in all.
    #[serde(default)]
    pub drain_ns: u64,
    /// Whether it is suspended now.
    pub suspended: bool,
    /// Under turns: `holder` (it has the GPU), `held` (parked while another holds it),
    /// `running` (everyone's memory fits: no turns now), `demoted` (idle, it gave its
    /// VRAM back and waits for its next work); empty under concurrent time.
    #[serde(default)]
    pub turn: String,
    /// Whether it has GPU work (as it last said, under turns).
    #[serde(default)]
    pub busy: bool,
    /// Under auto: its slowdown estimate from its progress (how many times slower than
    /// its best it runs now); 0 until measured.
    #[serde(default)]
    pub slowdown: f64,
    /// How long its oldest unanswered allocation has waited (0: none waits).
    #[serde(default)]
    pub waiting_ns: u64,
    /// Its memory contract (all defaults: none).
    #[serde(default)]
    pub contract: ContractRow,
    /// Its managed memory (`cuMemAllocManaged`): paged by the driver, never moved by
    /// the daemon, counted at its allocated size.
    #[serde(default)]
    pub managed_bytes: u64,
    /// Its buffers pinned in place because another process maps them (IPC).
    #[serde(default)]
    pub pinned_bytes: u64,
}

/// One bulk move in a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchRow {
    /// The tenant whose chunks moved.
    pub tenant: u32,
    /// Chunks moved to host memory.
    pub to_host_chunks: u32,
    /// Chunks moved to VRAM.
    pub to_vram_chunks: u32,
    /// Bytes moved.
    pub bytes: u64,
    /// From the command's arrival at the process to its last remap.
    pub elapsed_ns: u64,
    /// `bytes` per second of `elapsed_ns`, in GB/s (10^9 bytes).
    pub gb_per_s: f64,
}

/// A tenant's memory contract in a [`Snapshot`], as the daemon's configuration gave it
/// for the process's name (the core's `Contract`, field for field).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContractRow {
    /// VRAM it keeps.
    pub vram_guarantee_bytes: u64,
    /// The most VRAM it may hold.
    pub vram_limit_bytes: Option<u64>,
    /// The most it may allocate in all.
    pub memory_limit_bytes: Option<u64>,
    /// What happens beyond `memory_limit`: `fail`, `wait` or `spill`.
    pub at_limit: String,
    /// The most host memory its data may take.
    pub host_limit_bytes: Option<u64>,
    /// Its share under pressure relative to others.
    pub weight: u32,
    /// Higher: evicted last.
    pub priority_class: u8,
    /// With `at_limit = "wait"`: how long an allocation may wait.
    pub wait_timeout_ns: Option<u64>,
}

impl Default for ContractRow {
    fn default() -> Self {
        Self {
            vram_guarantee_bytes: 0,
            vram_limit_bytes: None,
            memory_limit_bytes: None,
            at_limit: "fail".into(),
            host_limit_bytes: None,
            weight: 1,
            priority_class: 0,
            wait_timeout_ns: None,
        }
    }
}

/// A frame that could not be read.
#[derive(Debug, Error)]
pub enum FrameError {
    /// The peer closed the connection at a frame boundary.
    #[error("connection closed")]
    Closed,
    /// Reading or writing failed (a timeout included).
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A length beyond [`MAX_FRAME_BYTES`].
    #[error("frame of {0} bytes (at most {MAX_FRAME_BYTES})")]
    TooLong(u32),
    /// The bytes are not a message of this protocol.
    #[error("bad message: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Writes one message as a frame.
pub fn write_frame<T: Serialize>(out: &mut impl Write, msg: &T) -> Result<(), FrameError> {
    let body = serde_json::to_vec(msg)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|n| *n <= MAX_FRAME_BYTES)
        .ok_or(FrameError::TooLong(u32::MAX))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    out.write_all(&frame)?;
    Ok(())
}

/// Reads one frame and decodes its message.
pub fn read_frame<T: for<'de> Deserialize<'de>>(input: &mut impl Read) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        other => other?,
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLong(len));
    }
    let mut body = vec![0u8; len as usize];
    input.read_exact(&mut body)?;
    Ok(serde_json::from_slice(&body)?)
}

/// How many chunks a buffer of `bytes` has when cut into chunks of `chunk_bytes` (the
/// last may be shorter): the daemon and the interposer cut buffers alike, as the core
/// does (`gpuswap_core::chunk_layout`, which the wire cannot import).
pub fn chunk_count(bytes: u64, chunk_bytes: u64) -> u64 {
    bytes.div_ceil(chunk_bytes)
}

/// Chunk `index` of a buffer of `bytes` cut into chunks of `chunk_bytes`: its offset in
/// the buffer and its length (the last chunk may be shorter).
pub fn chunk_span(bytes: u64, chunk_bytes: u64, index: u64) -> (u64, u64) {
    let offset = index * chunk_bytes;
    (offset, chunk_bytes.min(bytes - offset))
}

/// A buffer's placement as runs, from one location per chunk.
pub fn runs(locations: impl IntoIterator<Item = Location>) -> Vec<Placement> {
    let mut out: Vec<Placement> = Vec::new();
    for location in locations {
        match out.last_mut() {
            Some(run) if run.location == location => run.chunks += 1,
            _ => out.push(Placement {
                chunks: 1,
                location,
            }),
        }
    }
    out
}

/// One location per chunk, from runs.
pub fn chunks_of(placement: &[Placement]) -> impl Iterator<Item = Location> + '_ {
    placement
        .iter()
        .flat_map(|run| std::iter::repeat_n(run.location, run.chunks as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn loc() -> impl Strategy<Value = Location> {
        prop_oneof![Just(Location::Vram), Just(Location::Host)]
    }

    proptest! {
        #[test]
        fn runs_round_trip(locations in proptest::collection::vec(loc(), 0..300)) {
            let placement = runs(locations.iter().copied());
            prop_assert_eq!(chunks_of(&placement).collect::<Vec<_>>(), locations);
            // Runs are maximal: neighbours differ.
            for pair in placement.windows(2) {
                prop_assert_ne!(pair[0].location, pair[1].location);
            }
        }

        #[test]
        fn frames_round_trip(request in any::<u64>(), bytes in any::<u64>(), name in ".{0,40}") {
            let msgs = vec![
                ClientMsg::Alloc { request, bytes },
                ClientMsg::Hello { protocol: 1, pid: 7, name, device_total_bytes: bytes, granularity_bytes: 2 << 20, memory_limit_bytes: 0, device_uuid: String::new() },
            ];
            let mut wire = Vec::new();
            for m in &msgs {
                write_frame(&mut wire, m).unwrap();
            }
            let mut input = wire.as_slice();
            for m in &msgs {
                prop_assert_eq!(&read_frame::<ClientMsg>(&mut input).unwrap(), m);
            }
            prop_assert!(matches!(read_frame::<ClientMsg>(&mut input), Err(FrameError::Closed)));
        }

        /// Any bytes are refused or decoded, never a panic or a huge allocation.
        #[test]
        fn garbage_is_refused(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut input = bytes.as_slice();
            let _ = read_frame::<ClientMsg>(&mut input);
        }
    }

    #[test]
    fn chunks_cover_a_buffer_whole_and_only_the_last_is_shorter() {
        assert_eq!(chunk_count(10, 4), 3);
        assert_eq!(chunk_count(8, 4), 2);
        assert_eq!(chunk_count(0, 4), 0);
        let spans: Vec<_> = (0..3).map(|i| chunk_span(10, 4, i)).collect();
        assert_eq!(spans, [(0, 4), (4, 4), (8, 2)]);
    }

    #[test]
    fn long_and_truncated_frames_are_errors() {
        let mut long = (MAX_FRAME_BYTES + 1).to_le_bytes().to_vec();
        long.extend_from_slice(b"{}");
        assert!(matches!(
            read_frame::<ClientMsg>(&mut long.as_slice()),
            Err(FrameError::TooLong(_))
        ));
        let mut short = 10u32.to_le_bytes().to_vec();
        short.extend_from_slice(b"{\"Su");
        assert!(matches!(
            read_frame::<ClientMsg>(&mut short.as_slice()),
            Err(FrameError::Io(_))
        ));
        let mut bad = 3u32.to_le_bytes().to_vec();
        bad.extend_from_slice(b"{x}");
        assert!(matches!(
            read_frame::<ClientMsg>(&mut bad.as_slice()),
            Err(FrameError::Malformed(_))
        ));
    }
}
