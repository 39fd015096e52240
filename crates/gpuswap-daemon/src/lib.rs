//! gpuswapd: GPUswap for real processes. One daemon per GPU listens on a Unix socket;
//! every process that runs under the CUDA interposer (`libgpuswap_cuda.so`) connects
//! and becomes a tenant of one `gpuswap_core::Manager`. The daemon never touches the GPU:
//! the manager decides, and each process carries out what concerns its own memory
//! (suspend, relocate a chunk, resume), as the simulator's engine does for its tenants.
//!
//! Threads: one accepts connections, one per connection reads frames; all of them hand
//! [`driver::Input`]s to the one thread that owns the manager ([`driver::Driver`]), which
//! also keeps the manager's timer with the wall clock. A connection that ends for any
//! reason (exit, crash, `kill -9`, a bad frame) is its tenant's exit: the core's crash
//! semantics apply and its memory is released.

mod config;
pub mod driver;
mod log;
mod socket;

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use gpuswap_core::PolicySettings;
use gpuswap_wire::{self as wire, ClientMsg, DaemonMsg, PROTOCOL_VERSION};
use thiserror::Error;

pub use config::DaemonConfig;
use driver::{Driver, Input};
use log::log;

/// How long the daemon waits for a process to take a message before it counts the
/// process as gone: a process stuck in its own code still reads (its reader thread is
/// the interposer's), so only a dead or frozen one reaches it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the daemon cannot start or stopped.
#[derive(Debug, Error)]
pub enum DaemonError {
    /// Another daemon answers on the socket.
    #[error("a daemon already listens on {0}")]
    InUse(PathBuf),
    /// The socket could not be created.
    #[error("cannot listen on {path}: {source}")]
    Bind {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The mode needs what the daemon cannot provide.
    #[error("{0}")]
    Policy(String),
}

/// Refuses modes whose needs the daemon cannot meet: it sees allocations, frees and the
/// wall clock, not kernels, page faults, reference bits or access counts.
pub fn check_policy(policy: &PolicySettings) -> Result<(), String> {
    let needs = policy.needs();
    let lacking = [
        (needs.page_faults, "replayable page faults (unified memory)"),
        (needs.launch_gating, "launch gating"),
        (needs.reference_bits, "reference bits of host pages"),
        (
            needs.kernel_estimates,
            "hardware counters of each kernel (all-in-VRAM time, accesses)",
        ),
        (needs.access_counts, "access counters"),
    ];
    match lacking.iter().find(|(needed, _)| *needed) {
        Some((_, what)) => Err(format!(
            "mode {} needs {what}, which the daemon cannot provide on a real GPU; \
             use mode gpuswap (victim largest-share; a chunk policy without reference bits), \
             fcfs, static or native",
            policy.name()
        )),
        None => Ok(()),
    }
}

/// Runs the daemon until `stop` says so (never, for the command line).
pub fn serve(config: DaemonConfig, stop: &dyn Fn() -> bool) -> Result<(), DaemonError> {
    check_policy(&config.policy).map_err(DaemonError::Policy)?;
    let path = config.socket.clone();
    let listener = listen(&path)?;
    let (tx, rx) = mpsc::channel::<Input>();
    let accept_tx = tx.clone();
    std::thread::Builder::new()
        .name("gpuswapd-accept".into())
        .spawn(move || accept_loop(listener, accept_tx))
        .map_err(|source| DaemonError::Bind {
            path: path.clone(),
            source,
        })?;
    drop(tx);
    let mut driver = Driver::new(config.clone());
    if config.verbose {
        log(format_args!(
            "listening on {} (mode {})",
            path.display(),
            config.policy.name()
        ));
    }
    // Wake at least this often to look at `stop`.
    let tick = Duration::from_millis(200);
    while !stop() {
        let wait = driver.next_timeout().map_or(tick, |t| t.min(tick));
        match rx.recv_timeout(wait) {
            Ok(input) => driver.handle(input),
            // A due timer is handled below, after an input or a timeout alike.
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if driver.next_timeout() == Some(Duration::ZERO) {
            driver.handle_timer();
        }
        driver.check_deadlines();
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// Binds the socket, taking over a stale socket file but never a live daemon's.
fn listen(path: &Path) -> Result<std::os::unix::net::UnixListener, DaemonError> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(DaemonError::InUse(path.to_owned()));
        }
        let _ = std::fs::remove_file(path);
    }
    socket::bind_private(path).map_err(|source| DaemonError::Bind {
        path: path.to_owned(),
        source,
    })
}

fn accept_loop(listener: std::os::unix::net::UnixListener, tx: mpsc::Sender<Input>) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let conn = NEXT.fetch_add(1, Ordering::Relaxed);
        let Ok((pid, uid)) = socket::peer(&stream) else {
            continue;
        };
        let Ok(out) = stream.try_clone() else {
            continue;
        };
        let _ = out.set_write_timeout(Some(WRITE_TIMEOUT));
        if tx
            .send(Input::Accepted {
                conn,
                pid,
                uid,
                out,
            })
            .is_err()
        {
            return;
        }
        let tx = tx.clone();
        let _ = std::thread::Builder::new()
            .name(format!("gpuswapd-conn-{conn}"))
            .spawn(move || read_loop(conn, stream, tx));
    }
}

fn read_loop(conn: driver::ConnId, mut stream: UnixStream, tx: mpsc::Sender<Input>) {
    loop {
        let input = match wire::read_frame::<ClientMsg>(&mut stream) {
            Ok(msg) => Input::Frame(conn, msg),
            Err(wire::FrameError::Closed) => Input::Gone(conn, "disconnected".into()),
            Err(e) => Input::Gone(conn, e.to_string()),
        };
        let last = matches!(input, Input::Gone(..));
        if tx.send(input).is_err() || last {
            return;
        }
    }
}

/// Why a client could not talk to the daemon.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Nobody listens on the socket.
    #[error(
        "no gpuswap daemon at {path}: {source} (start one with `gpuswap daemon --socket {path}`, \
         or set GPUSWAP_SOCKET to the socket of a running one)"
    )]
    Unreachable {
        /// The socket's path.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The conversation failed.
    #[error("talking to the daemon at {path}: {message}")]
    Failed {
        /// The socket's path.
        path: String,
        /// Why.
        message: String,
    },
}

/// Asks the daemon at `socket` for its state (what `gpuswap top` shows).
pub fn observe(socket: &Path) -> Result<wire::Snapshot, ClientError> {
    let path = socket.display().to_string();
    let failed = |message: String| ClientError::Failed {
        path: path.clone(),
        message,
    };
    let mut stream = UnixStream::connect(socket).map_err(|source| ClientError::Unreachable {
        path: path.clone(),
        source,
    })?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    wire::write_frame(
        &mut stream,
        &ClientMsg::Observe {
            protocol: PROTOCOL_VERSION,
        },
    )
    .map_err(|e| failed(e.to_string()))?;
    match wire::read_frame::<DaemonMsg>(&mut stream).map_err(|e| failed(e.to_string()))? {
        DaemonMsg::Snapshot(s) => Ok(s),
        DaemonMsg::Refused { reason } => Err(failed(reason)),
        other => Err(failed(format!("unexpected answer {other:?}"))),
    }
}

/// The socket to use: the flag's, else `GPUSWAP_SOCKET`, else the default.
pub fn socket_path(flag: Option<PathBuf>) -> PathBuf {
    wire::socket_path(flag, socket::euid())
}
