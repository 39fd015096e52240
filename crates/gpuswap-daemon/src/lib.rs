//! gpuswapd: GPUswap for real processes. One daemon per GPU listens on a Unix socket;
//! every process that runs under the CUDA interposer (`libgpuswap_cuda.so`) connects
//! and becomes a tenant of one `gpuswap_core::Manager`. The daemon never touches the GPU:
//! the manager decides, and each process carries out what concerns its own memory
//! (suspend, relocate a chunk, resume), as the simulator's engine does for its tenants.
//!
//! The manager lives in a sans-IO [`endpoint::Endpoint`] (time in, messages, closes and
//! log lines out); [`serve`] wraps it in the socket's threads and the wall clock. A
//! connection that ends for any reason (exit, crash, `kill -9`, a bad frame, a write
//! that times out) is its tenant's exit: the core's crash semantics apply and its memory
//! is released.

mod backend;
pub mod check;
mod claims;
mod config;
pub mod endpoint;
mod serve;
mod socket;

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuswap_wire::{self as wire, ClientMsg, DaemonMsg, PROTOCOL_VERSION};
use thiserror::Error;

pub use backend::{SUPPLIES, check_policy};
pub use config::{DEFAULT_MAX_CONNECTIONS, DaemonConfig};
pub use serve::{DaemonError, serve};

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
