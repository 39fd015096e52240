//! The daemon's sockets, threads and clock around the sans-IO [`Endpoint`]: one thread
//! accepts connections, one per connection reads frames, one per connection writes them
//! from its outbox, and the one deciding thread owns the endpoint, gives it the time and
//! carries out what it polls out. The deciding thread never writes to a socket, so a
//! slow or frozen peer fills only its own outbox; a peer whose frame cannot be written
//! within [`WRITE_TIMEOUT`] is closed.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpuswap_wire::{self as wire, ClientMsg, DaemonMsg};
use thiserror::Error;

use crate::backend::check_policy;
use crate::config::DaemonConfig;
use crate::contracts_dir::Watcher;
use crate::endpoint::{ConnId, Endpoint, EndpointEvent, Input, Level};
use crate::{identity, metrics, notify, socket};

/// How long the daemon waits for a process to take a message before it counts the
/// process as gone: a process stuck in its own code still reads (its reader thread is
/// the interposer's), so only a dead or frozen one reaches it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The first pause of the accept loop after a failed `accept` (at the file limit,
/// EMFILE or ENFILE, it fails at once for as long as the limit lasts); each further
/// failure doubles it up to [`ACCEPT_PAUSE_MAX`]. Connections meanwhile wait in the
/// socket's backlog, and a connection that ends frees a file.
const ACCEPT_PAUSE_FIRST: Duration = Duration::from_millis(10);

/// The longest pause of the accept loop: a waiting process is served within a second
/// of a file becoming free.
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

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
    /// Something that is not a socket is at the socket's path: it is left alone.
    #[error(
        "{0} exists and is not a socket; the daemon will not delete it: remove it, or choose another path with --socket"
    )]
    NotASocket(PathBuf),
    /// The `--contracts-dir` cannot be used.
    #[error("{0}")]
    Contracts(String),
    /// The metrics address could not be listened on.
    #[error("--metrics-listen {addr}: {why}")]
    Metrics {
        /// The address.
        addr: String,
        /// Why.
        why: String,
    },
}

/// What the socket threads hand the deciding thread.
enum Arrival {
    /// A new connection and the outbox its writer thread sends from.
    Accepted {
        /// The endpoint's [`Input::Accepted`].
        input: Input,
        /// The connection's outbox.
        outbox: mpsc::Sender<DaemonMsg>,
    },
    /// Anything else for the endpoint.
    Input(Input),
    /// A metrics scrape waits for the current snapshot's text.
    Metrics(mpsc::Sender<String>),
}

/// Runs the daemon until `stop` says so (never, for the command line).
pub fn serve(mut config: DaemonConfig, stop: &dyn Fn() -> bool) -> Result<(), DaemonError> {
    check_policy(&config.policy).map_err(DaemonError::Policy)?;
    // The contracts' folder before the socket: a daemon that would hand out contracts
    // whoever may write leaves no socket.
    let mut contracts_dir = match config.contracts.dir.clone() {
        None => None,
        Some(dir) => {
            let mut watcher = Watcher::open(dir, socket::euid()).map_err(DaemonError::Contracts)?;
            let (tables, lines) = watcher.refresh(true).expect("a first read always reads");
            config.contracts.set_dir_tables(tables);
            write_log(config.verbose, lines);
            Some((watcher, socket::read_again_on_hangup()))
        }
    };
    let path = config.socket.clone();
    wire::prepare_socket_dir(&path, socket::euid()).map_err(DaemonError::Policy)?;
    // Each connection takes one of the daemon's files; the soft limit is often 1024
    // where the hard one is far higher.
    socket::raise_file_limit();
    // The metrics' address first: a daemon that cannot serve them leaves no socket.
    let (tx, rx) = mpsc::channel::<Arrival>();
    if let Some(addr) = &config.metrics_listen {
        serve_metrics(addr, tx.clone())?;
    }
    let listener = listen(&path)?;
    if let Some(gid) = config.socket_group {
        socket::share_with_group(&path, gid).map_err(|source| DaemonError::Bind {
            path: path.clone(),
            source,
        })?;
    }
    let verbose = config.verbose;
    std::thread::Builder::new()
        .name("gpuswapd-accept".into())
        .spawn(move || accept_loop(listener, tx, verbose))
        .map_err(|source| DaemonError::Bind {
            path: path.clone(),
            source,
        })?;
    let start = Instant::now();
    let now_ns = || start.elapsed().as_nanos() as u64;
    if verbose {
        tracing::info!(
            "listening on {} (mode {})",
            path.display(),
            config.policy.name()
        );
    }
    if let Err(e) = notify::notify("READY=1") {
        tracing::warn!("could not tell systemd it is ready: {e}");
    }
    let mut endpoint = Endpoint::new(config, socket::euid());
    endpoint.hold_until_exit();
    let mut watched = BTreeMap::<u32, socket::Watched>::new();
    let mut outboxes = BTreeMap::<ConnId, mpsc::Sender<DaemonMsg>>::new();
    // Wake at least this often to look at `stop`.
    let tick = Duration::from_millis(200);
    while !stop() {
        let wait = endpoint.poll_timeout().map_or(tick, |at| {
            Duration::from_nanos(at.saturating_sub(now_ns())).min(tick)
        });
        match rx.recv_timeout(wait) {
            Ok(Arrival::Accepted { input, outbox }) => {
                if let Input::Accepted { conn, .. } = input {
                    outboxes.insert(conn, outbox);
                }
                endpoint.handle(now_ns(), input);
            }
            Ok(Arrival::Input(input)) => {
                // A process's hello after its job's prolog wrote the contract: the
                // folder is looked at first, so the contract is there.
                if let (Some((watcher, _)), Input::Frame(_, ClientMsg::Hello { .. })) =
                    (&mut contracts_dir, &input)
                {
                    read_contracts(watcher, false, &mut endpoint, verbose);
                }
                endpoint.handle(now_ns(), input);
            }
            Ok(Arrival::Metrics(reply)) => {
                let _ = reply.send(metrics::encode_snapshot(&endpoint.snapshot()));
            }
            // A due timer is handled below, after an input or a timeout alike.
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if let Some((watcher, hangup)) = &mut contracts_dir {
            let hung_up = hangup();
            if hung_up || watcher.due() {
                read_contracts(watcher, hung_up, &mut endpoint, verbose);
            }
        }
        endpoint.handle_timeout(now_ns());
        carry_out(&mut endpoint, &mut outboxes);
        if watch_exits(&mut endpoint, &mut watched, now_ns()) {
            carry_out(&mut endpoint, &mut outboxes);
        }
    }
    // Best effort: systemd learns of the stop from the exit too.
    let _ = notify::notify("STOPPING=1");
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// Hands what the endpoint polls out to the connections' outboxes and the log. A
/// closed connection's outbox is dropped after its last messages: its writer thread
/// writes them, then shuts the socket.
fn carry_out(endpoint: &mut Endpoint, outboxes: &mut BTreeMap<ConnId, mpsc::Sender<DaemonMsg>>) {
    while let Some((conn, msg)) = endpoint.poll_transmit() {
        if let Some(outbox) = outboxes.get(&conn) {
            // A writer that ended has reported its connection gone.
            let _ = outbox.send(msg);
        }
    }
    while let Some(conn) = endpoint.poll_close() {
        outboxes.remove(&conn);
    }
    while let Some(EndpointEvent::Log(level, line)) = endpoint.poll_event() {
        write_line(level, &line);
    }
}

/// Writes one line of the daemon's log at its level.
fn write_line(level: Level, line: &str) {
    match level {
        Level::Info => tracing::info!("{line}"),
        Level::Warn => tracing::warn!("{line}"),
    }
}

/// Writes the serve loop's own `lines` when the daemon is verbose.
fn write_log(verbose: bool, lines: Vec<(Level, String)>) {
    if verbose {
        for (level, line) in lines {
            write_line(level, &line);
        }
    }
}

/// Reads the contracts' folder again if its files changed (or `always`: SIGHUP) and
/// hands its tables to the endpoint.
fn read_contracts(watcher: &mut Watcher, always: bool, endpoint: &mut Endpoint, verbose: bool) {
    if let Some((tables, lines)) = watcher.refresh(always) {
        endpoint.set_dir_contracts(tables);
        write_log(verbose, lines);
    }
}

/// Watches the processes whose memory the endpoint counts as held, and tells it of
/// those that exited; returns whether any did. Looked at after every input and at
/// least every tick: a process's memory is free for others within a tick of its exit.
fn watch_exits(
    endpoint: &mut Endpoint,
    watched: &mut BTreeMap<u32, socket::Watched>,
    now_ns: u64,
) -> bool {
    let held: Vec<u32> = endpoint.held_pids().collect();
    watched.retain(|pid, _| held.contains(pid));
    let mut any = false;
    for pid in held {
        if watched
            .entry(pid)
            .or_insert_with(|| socket::Watched::new(pid))
            .exited()
        {
            watched.remove(&pid);
            endpoint.handle(now_ns, Input::Exited(pid));
            any = true;
        }
    }
    any
}

/// How long a scrape waits for the deciding thread: it answers between inputs, so
/// within a few milliseconds unless the daemon is stopping.
const SCRAPE_WAIT: Duration = Duration::from_secs(5);

/// Serves `GET /metrics` on `addr` (HTTP, OpenMetrics text; `tiny_http`, a small
/// blocking HTTP server: a scrape a few times a minute needs no async runtime) from a
/// thread of its own, each scrape a snapshot the deciding thread takes between inputs.
fn serve_metrics(addr: &str, tx: mpsc::Sender<Arrival>) -> Result<(), DaemonError> {
    let error = |why: String| DaemonError::Metrics {
        addr: addr.to_owned(),
        why,
    };
    let server = tiny_http::Server::http(addr).map_err(|e| error(e.to_string()))?;
    std::thread::Builder::new()
        .name("gpuswapd-metrics".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let (status, body) = if request.url() != "/metrics" {
                    (404, "not found: the metrics are at /metrics\n".to_owned())
                } else {
                    let (reply, text) = mpsc::channel();
                    let _ = tx.send(Arrival::Metrics(reply));
                    match text.recv_timeout(SCRAPE_WAIT) {
                        Ok(text) => (200, text),
                        Err(_) => (503, "the daemon is stopping\n".to_owned()),
                    }
                };
                let header = tiny_http::Header::from_bytes("Content-Type", metrics::CONTENT_TYPE)
                    .expect("a valid header");
                let response = tiny_http::Response::from_string(body)
                    .with_status_code(status)
                    .with_header(header);
                let _ = request.respond(response);
            }
        })
        .map_err(|e| error(e.to_string()))?;
    Ok(())
}

/// Binds the socket, taking over a stale socket file but never a live daemon's.
fn listen(path: &Path) -> Result<UnixListener, DaemonError> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        // Only a socket a daemon left behind is replaced, never a user's file.
        if !std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) {
            return Err(DaemonError::NotASocket(path.to_owned()));
        }
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

/// Accepts connections and starts their threads. A failed accept (at the file limit,
/// EMFILE or ENFILE) pauses the loop, longer at each failure in a row, instead of
/// retrying at once for as long as the limit lasts.
fn accept_loop(listener: UnixListener, tx: mpsc::Sender<Arrival>, verbose: bool) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut pause = ACCEPT_PAUSE_FIRST;
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) => {
                back_off(&mut pause, &e, verbose);
                continue;
            }
        };
        let conn = NEXT.fetch_add(1, Ordering::Relaxed);
        let Ok((pid, uid)) = wire::peer_credentials(&stream) else {
            continue;
        };
        // Read right as the connection comes, while its process almost surely lives: what a
        // contract bound to a cgroup asks for.
        let cgroups = identity::cgroups_of(pid);
        pause = ACCEPT_PAUSE_FIRST;
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        // One file for both threads (`&UnixStream` reads and writes): a connection takes
        // one of the daemon's files, never a second that may be lacking.
        let stream = Arc::new(stream);
        let out = Arc::clone(&stream);
        let (outbox, queued) = mpsc::channel();
        let accepted = Arrival::Accepted {
            input: Input::Accepted {
                conn,
                pid,
                uid,
                cgroups,
            },
            outbox,
        };
        if tx.send(accepted).is_err() {
            return;
        }
        let writer_tx = tx.clone();
        let _ = std::thread::Builder::new()
            .name(format!("gpuswapd-out-{conn}"))
            .spawn(move || write_loop(conn, out, queued, writer_tx));
        let tx = tx.clone();
        let _ = std::thread::Builder::new()
            .name(format!("gpuswapd-conn-{conn}"))
            .spawn(move || read_loop(conn, stream, tx));
    }
}

/// Pauses the accept loop after `e` (not after an interrupted call), for `pause`,
/// then doubles it up to [`ACCEPT_PAUSE_MAX`]; the first of a row of failures is
/// logged.
fn back_off(pause: &mut Duration, e: &io::Error, verbose: bool) {
    if e.kind() == io::ErrorKind::Interrupted {
        return;
    }
    if verbose && *pause == ACCEPT_PAUSE_FIRST {
        tracing::warn!("cannot accept a connection: {e}; pausing");
    }
    std::thread::sleep(*pause);
    *pause = (*pause * 2).min(ACCEPT_PAUSE_MAX);
}

fn read_loop(conn: ConnId, stream: Arc<UnixStream>, tx: mpsc::Sender<Arrival>) {
    loop {
        let input = match wire::read_frame::<ClientMsg>(&mut &*stream) {
            Ok(msg) => Input::Frame(conn, msg),
            Err(wire::FrameError::Closed) => Input::Gone(conn, "disconnected".into()),
            Err(e @ (wire::FrameError::Malformed(_) | wire::FrameError::TooLong(_))) => {
                Input::Unreadable(conn, e.to_string())
            }
            Err(e) => Input::Gone(conn, e.to_string()),
        };
        // After a bad frame the stream's frames are lost: nothing more is read.
        let last = matches!(input, Input::Gone(..) | Input::Unreadable(..));
        if tx.send(Arrival::Input(input)).is_err() || last {
            return;
        }
    }
}

/// Writes a connection's outbox until the endpoint closes it (the outbox's sender is
/// dropped) or a write fails, then shuts both halves: the reader thread ends too, and
/// the process sees the end.
fn write_loop(
    conn: ConnId,
    out: Arc<UnixStream>,
    queued: mpsc::Receiver<DaemonMsg>,
    tx: mpsc::Sender<Arrival>,
) {
    for msg in queued {
        // Unbuffered: the frame is written whole or not at all.
        if let Err(e) = wire::write_frame(&mut &*out, &msg) {
            // Reported before the shutdown, so that it comes before the reader's end.
            let _ = tx.send(Arrival::Input(Input::Gone(
                conn,
                format!("write failed: {e}"),
            )));
            break;
        }
    }
    let _ = out.shutdown(std::net::Shutdown::Both);
}
