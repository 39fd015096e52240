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
mod contracts_dir;
pub mod endpoint;
pub mod fuzz;
mod held;
pub mod identity;
pub mod metrics;
mod notify;
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
pub use socket::{euid, group_id, stop_on_signals};

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
    let stream = UnixStream::connect(socket).map_err(|source| ClientError::Unreachable {
        path: path.clone(),
        source,
    })?;
    // Another user's socket could show anything: trusted as the interposer trusts it.
    wire::trusted_daemon(&stream, socket).map_err(|message| ClientError::Failed {
        path: path.clone(),
        message,
    })?;
    observe_on(stream, &path)
}

/// Asks for the daemon's state on a connection to the socket at `path`.
fn observe_on(mut stream: UnixStream, path: &str) -> Result<wire::Snapshot, ClientError> {
    let failed = |message: String| ClientError::Failed {
        path: path.to_owned(),
        message,
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let written = wire::write_frame(
        &mut stream,
        &ClientMsg::Observe {
            protocol: PROTOCOL_VERSION,
        },
    );
    // A daemon that refuses a connection as it comes (another user's, or one serving
    // all it may) writes why and closes, often before the request is written: its
    // reason says more than the write's "Broken pipe".
    match (written, wire::read_frame::<DaemonMsg>(&mut stream)) {
        (_, Ok(DaemonMsg::Refused { reason })) => Err(failed(reason)),
        (Err(e), _) | (Ok(()), Err(e)) => Err(failed(e.to_string())),
        (Ok(()), Ok(DaemonMsg::Snapshot(s))) => Ok(*s),
        (Ok(()), Ok(other)) => Err(failed(format!("unexpected answer {other:?}"))),
    }
}

/// The socket to use: the flag's, else `GPUSWAP_SOCKET`, else the default.
pub fn socket_path(flag: Option<PathBuf>) -> PathBuf {
    wire::socket_path(flag, socket::euid())
}

/// The socket of GPU `uuid`'s daemon, for this user (root: the system's).
pub fn device_socket(uuid: &str) -> PathBuf {
    wire::device_socket(uuid, socket::euid())
}

/// Every per-GPU daemon's socket this user can see, then the default socket's if it
/// exists: whom `gpuswap top` shows without `--socket`.
pub fn local_sockets() -> Vec<PathBuf> {
    let mut found = wire::every_device_socket(socket::euid());
    let default = socket_path(None);
    if default.exists() && !found.contains(&default) {
        found.push(default);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daemon that refuses a connection (another user's `gpuswap top`) writes why and
    /// closes at once, often before the observer's request is written: the observer
    /// shows the refusal, not the write's "Broken pipe".
    #[test]
    fn an_observer_refused_at_once_shows_why() {
        let (client, mut daemon) = UnixStream::pair().unwrap();
        let reason = "uid 1001 may not use the daemon of uid 1000".to_owned();
        wire::write_frame(&mut daemon, &DaemonMsg::Refused { reason }).unwrap();
        drop(daemon);
        let error = observe_on(client, "d.sock").unwrap_err().to_string();
        assert_eq!(
            error,
            "talking to the daemon at d.sock: uid 1001 may not use the daemon of uid 1000"
        );
    }
}
