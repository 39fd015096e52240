//! The process's side of one device's gpuswapd: the connection, the buffers the daemon
//! placed, and the thread that carries out the daemon's commands (suspend, relocate,
//! resume) on the real driver. Commands are carried out in the order they arrive, on
//! that one thread, so a buffer is mapped before any command can move one of its chunks.
//! A process has one client per device it allocates on (`clients`).
//!
//! A suspension by any device's daemon holds every launch, copy and free of the whole
//! process ([`GATE`]) and drains every context the process allocated in, on every
//! device: a launch or copy on one device can reach another device's memory
//! (`cuMemcpyPeer`, peer access, a kernel given a pointer of another device), and
//! nothing in a launch says which memory it touches (touch hints are hints). The cost
//! is that a move on one device pauses the process's work on the others for as long.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_int;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use gpuswap_wire::{self as wire, ChunkMove, ClientMsg, DaemonMsg, HeldBuffer, PROTOCOL_VERSION};

use crate::batch::{self, Memory};
use crate::demand::{Demand, InCall, Outbox};
use crate::diag;
use crate::ffi::{self, CuResult, DevPtr, Handle, driver};
use crate::host_pool;
use crate::liveness;

use crate::rejoin::{self, Lost};

/// A buffer the daemon placed.
struct Buffer {
    /// The daemon's id of it, on connection `connection`.
    id: u64,
    /// The connection (its number) whose daemon knows the buffer as `id`; 0: none (a
    /// daemon after a reconnection did not adopt it), so the daemon is never told of it.
    connection: u64,
    va: DevPtr,
    /// Bytes reserved (whole granules).
    bytes: u64,
    chunk_bytes: u64,
    /// The memory mapped at each chunk now.
    chunks: Vec<Memory>,
    ctx: usize,
    /// Pinned where it is for an IPC export: the daemon no longer books it (its id and
    /// connection are 0), it is never declared again, and `managed` counts it.
    pinned: bool,
}

impl Buffer {
    /// The chunk's address and length (whole granules; the last may be shorter).
    fn span(&self, index: usize) -> (DevPtr, u64) {
        let (offset, len) = wire::chunk_span(self.bytes, self.chunk_bytes, index as u64);
        (self.va + offset, len)
    }
}

/// What an allocation waits for.
enum Answer {
    Waiting { ctx: usize },
    Done(Result<DevPtr, (CuResult, String)>),
}

/// Launches, copies and frees of the whole process take it shared; a suspension, by
/// any device's daemon, holds it exclusively (see the module's documentation).
static GATE: RwLock<()> = RwLock::new(());

/// Every context the process allocated in, on any device: what a suspension drains.
static CONTEXTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Holds [`GATE`] shared: a call that must not start while the process is suspended.
pub fn gate() -> std::sync::RwLockReadGuard<'static, ()> {
    GATE.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The connection to one device's daemon and everything it manages.
pub struct Client {
    /// The device (an ordinal) whose daemon this is: 0 for the first device (the one
    /// connected at `cuInit`, the one `GPUSWAP_SOCKET` names, the one progress reports
    /// go to).
    pub device: c_int,
    out: Mutex<UnixStream>,
    /// The process's view of the device's memory (`cuMemGetInfo`'s total): the smaller
    /// of the daemon's VRAM and its contract's `vram_limit`.
    pub view_bytes: u64,
    granularity: u64,
    /// Buffers by address.
    buffers: Mutex<BTreeMap<DevPtr, Buffer>>,
    answers: Mutex<BTreeMap<u64, Answer>>,
    answered: Condvar,
    next_request: std::sync::atomic::AtomicU64,
    /// Set while the connection to the daemon is lost: every launch asks, so a read
    /// takes no lock.
    lost: Lost,
    /// Set once the interposer stopped trying to reconnect: nothing more is said.
    lost_for_good: AtomicBool,
    /// The connection's number: 1, and one more at each reconnection. Buffers, the
    /// daemon's watch and the reports name the connection they belong to.
    connection: AtomicU64,
    /// The connection, to shut from any thread without waiting for a writer.
    control: Mutex<UnixStream>,
    /// Every descriptor of the connection (the writer's, the reader's, `control`), for a
    /// forked child to close without taking a lock.
    fds: [AtomicI32; 3],
    /// Why the interposer gave the connection up itself (the daemon showed no sign of
    /// life).
    gave_up: Mutex<Option<String>>,
    /// The connection on which the device's memory was last reported, and when.
    reported: Mutex<(u64, Option<Instant>)>,
    /// The contexts the program allocated in on this device.
    contexts: Mutex<Vec<usize>>,
    /// What chunk moves keep between them.
    mover: batch::Mover,
    /// Busy and idle reports, when the daemon asked for them.
    demand: Option<Demand>,
    /// The daemon asked for the link's remote-read cost and it is not measured yet:
    /// the first allocation measures it, in the program's context.
    probe_remote: AtomicBool,
}

/// A call's hold on the gate for GPU work ([`start_work`]), work until it goes.
pub struct Work<'a> {
    _call: Option<InCall<'a>>,
    _gate: std::sync::RwLockReadGuard<'static, ()>,
}

/// Holds the gate for a call that starts GPU work (a launch, copy or memset): it waits
/// while the process is suspended, and says the process is busy first to `client`'s
/// daemon (the current device's) when it asked (`Demand`); the call is work until the
/// hold goes.
pub fn start_work(client: Option<&Client>) -> Work<'_> {
    let demand = client.and_then(|c| c.demand.as_ref().map(|d| (c, d)));
    let call = demand.map(|(c, d)| d.before_gate(c));
    let gate = gate();
    if let Some((_, d)) = demand {
        d.after_gate();
    }
    Work {
        _call: call,
        _gate: gate,
    }
}

/// A connection to the daemon, trusted, introduced and welcomed (its read timeout still
/// set for the rest of the introduction).
struct Joined {
    stream: UnixStream,
    /// The daemon's process, as the kernel names the socket's peer.
    daemon_pid: u32,
    vram_bytes: u64,
    /// The contract's `vram_limit` (0: none).
    vram_limit_bytes: u64,
    idle_report_ns: u64,
    progress_report_ns: u64,
    probe_remote: bool,
}

/// Connects to device `device`'s daemon at its socket, checks whom it trusts, says
/// hello and reads the welcome.
fn join(granularity: u64, device: c_int) -> Result<Joined, String> {
    let uuid = driver::device_uuid(device).map(|b| wire::uuid_text(&b));
    let path = daemon_socket(device, uuid.as_deref())?;
    let shown = path.display();
    let mut stream = UnixStream::connect(&path).map_err(|e| {
        format!(
            "no gpuswap daemon at {shown}: {e}. Start one with `gpuswap daemon --socket {shown}`, \
             point GPUSWAP_SOCKET at a running one, or set GPUSWAP_PASSTHROUGH=1 to run \
             without it"
        )
    })?;
    let daemon = wire::trusted_daemon(&stream, &path)?;
    let talk = |e: wire::FrameError| format!("talking to the gpuswap daemon at {shown}: {e}");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| talk(e.into()))?;
    let hello = ClientMsg::Hello {
        protocol: PROTOCOL_VERSION,
        pid: std::process::id(),
        name: std::env::var("GPUSWAP_TENANT_NAME").unwrap_or_else(|_| program_name()),
        device_total_bytes: driver::total_memory(device)?,
        granularity_bytes: granularity,
        memory_limit_bytes: crate::hami::memory_limit(device)?.unwrap_or(0),
        device_uuid: uuid.unwrap_or_default(),
    };
    // A daemon that refuses a connection as it arrives (the connection cap) writes its
    // reason and closes: the hello's write may then fail, but the reason can be read.
    let written = wire::write_frame(&mut stream, &hello);
    let answer = wire::read_frame(&mut stream);
    let answer = match (written, answer) {
        (_, Ok(msg @ DaemonMsg::Refused { .. })) | (Ok(()), Ok(msg)) => msg,
        (Err(e), _) | (Ok(()), Err(e)) => return Err(talk(e)),
    };
    match answer {
        DaemonMsg::Welcome {
            vram_bytes,
            idle_report_ns,
            progress_report_ns,
            vram_limit_bytes,
            probe_remote,
            ..
        } => Ok(Joined {
            stream,
            daemon_pid: daemon.pid,
            vram_bytes,
            vram_limit_bytes,
            idle_report_ns,
            progress_report_ns,
            probe_remote,
        }),
        DaemonMsg::Refused { reason } => {
            Err(format!("the gpuswap daemon at {shown} refused: {reason}"))
        }
        other => Err(format!("unexpected answer from {shown}: {other:?}")),
    }
}

/// The daemon's socket for device `device`, of UUID `uuid`. The first device (0):
/// `GPUSWAP_SOCKET` if set; else the first per-GPU socket of the device that exists
/// (the user's daemon, then the system's); else the default socket (a daemon serving
/// whichever device). Another device: its per-GPU socket only, since a daemon of the
/// default socket or of `GPUSWAP_SOCKET` serves the first device.
fn daemon_socket(device: c_int, uuid: Option<&str>) -> Result<std::path::PathBuf, String> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let first = device == 0;
    let per_gpu = match uuid {
        Some(uuid) if !first || std::env::var_os(wire::SOCKET_ENV).is_none() => {
            wire::device_sockets(uuid, uid)
                .into_iter()
                .find(|p| p.exists())
        }
        _ => None,
    };
    match (per_gpu, uuid) {
        (Some(path), _) => Ok(path),
        _ if first => Ok(wire::socket_path(None, uid)),
        (None, Some(uuid)) => Err(format!(
            "no gpuswap daemon for device {device} ({uuid}) at {}. Start one with \
             `gpuswap daemon --device {uuid}`",
            wire::device_sockets(uuid, uid)
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        )),
        (None, None) => Err(format!(
            "the driver tells no UUID of device {device}, so its gpuswap daemon cannot be found"
        )),
    }
}

/// Connects device `device`'s client and introduces the process, the first device's
/// at `cuInit` (after the real one succeeded), another's at its first managed call
/// (`clients`).
pub fn connect(device: c_int) -> Result<&'static Client, String> {
    crate::hami::refuse_if_chained()?;
    let granularity = driver::granularity(device)?;
    let Joined {
        stream,
        daemon_pid,
        vram_bytes,
        vram_limit_bytes,
        idle_report_ns,
        progress_report_ns,
        probe_remote,
    } = join(granularity, device)?;
    let talk = |e: std::io::Error| format!("talking to the gpuswap daemon: {e}");
    stream.set_read_timeout(None).map_err(talk)?;
    host_pool::add_bound(vram_bytes);
    let reader = stream.try_clone().map_err(talk)?;
    let control = stream.try_clone().map_err(talk)?;
    let fds = [&stream, &reader, &control].map(|s| AtomicI32::new(s.as_raw_fd()));
    let client: &'static Client = Box::leak(Box::new(Client {
        device,
        out: Mutex::new(stream),
        view_bytes: match vram_limit_bytes {
            0 => vram_bytes,
            limit => limit.min(vram_bytes),
        },
        granularity: granularity.max(1),
        buffers: Mutex::new(BTreeMap::new()),
        answers: Mutex::new(BTreeMap::new()),
        answered: Condvar::new(),
        next_request: AtomicU64::new(1),
        lost: Lost::new(),
        lost_for_good: AtomicBool::new(false),
        connection: AtomicU64::new(1),
        control: Mutex::new(control),
        fds,
        gave_up: Mutex::new(None),
        reported: Mutex::new((0, None)),
        contexts: Mutex::new(Vec::new()),
        mover: batch::Mover::default(),
        demand: (idle_report_ns > 0).then(|| Demand::new(idle_report_ns)),
        probe_remote: AtomicBool::new(probe_remote),
    }));
    std::thread::Builder::new()
        .name("gpuswap-client".into())
        .spawn(move || client.serve(reader))
        .map_err(|e| format!("cannot start the interposer's thread: {e}"))?;
    if let Some(demand) = &client.demand {
        demand.start_timer(client)?;
    }
    // The process's launches, on every device, are one count: reported to the first
    // device's daemon only, so that no daemon is told another's buffers (touch hints).
    if progress_report_ns > 0 && device == 0 {
        crate::progress::start(progress_report_ns, client)?;
    }
    client.watch(daemon_pid, 1)?;
    Ok(client)
}

fn program_name() -> String {
    std::env::args()
        .next()
        .and_then(|a| a.rsplit('/').next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Client {
    fn send(&self, msg: &ClientMsg) -> Result<(), String> {
        wire::write_frame(&mut *lock(&self.out), msg).map_err(|e| e.to_string())
    }

    /// Sends `msg` only on connection `connection` (a message about a buffer of one
    /// connection means nothing to the daemon of another).
    fn send_on(&self, connection: u64, msg: &ClientMsg) -> Result<(), String> {
        let mut out = lock(&self.out);
        if connection == 0 || self.connection() != connection {
            return Ok(());
        }
        wire::write_frame(&mut *out, msg).map_err(|e| e.to_string())
    }

    /// The current connection's number.
    fn connection(&self) -> u64 {
        self.connection.load(Ordering::SeqCst)
    }

    /// Watches the daemon of connection `connection`, process `pid`, until that
    /// connection is lost, reporting the device's memory on the way.
    fn watch(&'static self, pid: u32, connection: u64) -> Result<(), String> {
        liveness::watch(
            pid,
            move || self.lost().is_some() || self.connection() != connection,
            move |why| self.give_up(connection, why),
            move || self.report_device(connection, false),
        )
    }

    /// A synchronization's wait for the GPU, work for the busy and idle reports while
    /// the returned guard lives.
    pub fn waits(&self) -> Option<InCall<'_>> {
        self.demand.as_ref().map(Demand::waits)
    }

    /// Gives connection `connection` up for `why`: it is shut, and the reader thread
    /// takes the "daemon lost" path (it fails what waits and lifts a suspension).
    fn give_up(&self, connection: u64, why: String) {
        let control = lock(&self.control);
        if self.connection() == connection {
            *lock(&self.gave_up) = Some(why);
            let _ = control.shutdown(std::net::Shutdown::Both);
        }
    }

    /// In a child after `fork`, closes the child's copies of the connection (never
    /// shuts it: the connection is the parent's). Only `close`: a thread of the parent
    /// may have held any lock at the fork.
    pub fn close_in_child(&self) {
        for fd in &self.fds {
            let fd = fd.load(Ordering::Relaxed);
            // SAFETY: the child's copies of descriptors it never uses again (a forked
            // child manages nothing); close is async-signal-safe.
            unsafe { libc::close(fd) };
        }
    }

    /// Why the daemon is gone, if it is: then allocations pass through unmanaged.
    pub fn lost(&self) -> Option<&str> {
        self.lost.get()
    }

    /// Allocates `bytes` through the daemon; returns the device address.
    pub fn alloc(&self, bytes: u64) -> Result<DevPtr, (CuResult, String)> {
        let ctx = driver::current_context();
        if ctx.is_null() {
            return Err((ffi::CUDA_ERROR_INVALID_CONTEXT, "no current context".into()));
        }
        for contexts in [&self.contexts, &CONTEXTS] {
            let mut contexts = lock(contexts);
            if !contexts.contains(&(ctx as usize)) {
                contexts.push(ctx as usize);
            }
        }
        let request = self.next_request.fetch_add(1, Ordering::Relaxed);
        let Some(bytes) = bytes
            .div_ceil(self.granularity)
            .checked_mul(self.granularity)
        else {
            return Err((
                ffi::CUDA_ERROR_OUT_OF_MEMORY,
                format!(
                    "{bytes} bytes cannot be rounded up to the allocation granularity of {} \
                     bytes",
                    self.granularity
                ),
            ));
        };
        {
            // Under the answers lock, where the reader thread marks the daemon lost:
            // either it sees this request and fails it, or this sees the loss.
            let mut answers = lock(&self.answers);
            if let Some(why) = self.lost() {
                return Err((ffi::CUDA_ERROR_UNKNOWN, why.to_owned()));
            }
            answers.insert(request, Answer::Waiting { ctx: ctx as usize });
        }
        self.report_device(self.connection(), true);
        if self.probe_remote.swap(false, Ordering::Relaxed) {
            self.measure_link();
        }
        if let Err(e) = self.send(&ClientMsg::Alloc { request, bytes }) {
            lock(&self.answers).remove(&request);
            return Err((ffi::CUDA_ERROR_UNKNOWN, e));
        }
        let mut answers = lock(&self.answers);
        loop {
            if let Some(Answer::Done(_)) = answers.get(&request) {
                let Some(Answer::Done(result)) = answers.remove(&request) else {
                    unreachable!("just matched")
                };
                return result;
            }
            answers = self
                .answered
                .wait(answers)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Measures the link's remote-read cost for the daemon (in the current context,
    /// before the program's first allocation), or says why not: the daemon then asks
    /// the next process.
    fn measure_link(&self) {
        let started = Instant::now();
        match crate::probe::remote_cost(self.granularity) {
            Ok(remote_cost) => {
                diag::trace_note("the link's remote-read cost was measured");
                let _ = self.send(&ClientMsg::RemoteCost { remote_cost });
            }
            Err(e) => diag::warn(&format!(
                "could not measure the link's remote-read cost in {:?}: {e}; the daemon \
                 starts its automatic choice from its assumed figure",
                started.elapsed()
            )),
        }
    }

    /// Frees a buffer of ours; `None` if `va` is not one.
    pub fn free(&self, va: DevPtr) -> Option<Result<(), String>> {
        let buffer = lock(&self.buffers).remove(&va)?;
        crate::touch::removed(va);
        let result = unmap_buffer(&buffer);
        // The daemon's books follow even if the driver complained; a lost daemon has
        // no books to tell.
        let told = self.send_on(buffer.connection, &ClientMsg::Free { buffer: buffer.id });
        Some(result.and(if self.lost().is_some() { Ok(()) } else { told }))
    }

    /// `bytes` rounded up to whole granules, as allocations are.
    pub fn granules(&self, bytes: u64) -> u64 {
        bytes
            .div_ceil(self.granularity)
            .saturating_mul(self.granularity)
    }

    /// Tells the daemon what the process holds that it cannot move (`managed`'s books).
    pub fn report_unmovable(&self) {
        let (managed_bytes, pinned_bytes) = crate::managed::totals(self.device);
        if self.lost().is_none() {
            let _ = self.send(&ClientMsg::Unmovable {
                managed_bytes,
                pinned_bytes,
            });
        }
    }

    /// Pins the buffer holding `va` where it is for an IPC export (`ipc`), its chunks
    /// first re-created in exportable memory at their addresses
    /// ([`batch::Mover::re_create`]: memory that is never exported is created as
    /// before): counted as pinned, then freed from the daemon's movable books, never
    /// named to the daemon again. The process's GPU work is drained and held off
    /// meanwhile, as for a move. Returns the buffer's address and bytes (a pinned buffer
    /// exported again pins nothing more); `None` if `va` is in no buffer of ours. A chunk that cannot be re-created leaves the
    /// buffer movable (with the chunks re-created so far, which move as others do).
    pub fn pin(&self, va: DevPtr) -> Option<Result<(DevPtr, u64), String>> {
        let _held_off = GATE
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut buffers = lock(&self.buffers);
        let buffer = buffers
            .range_mut(..=va)
            .next_back()
            .map(|(_, b)| b)
            .filter(|b| va < b.va + b.bytes)?;
        if buffer.pinned {
            return Some(Ok((buffer.va, buffer.bytes)));
        }
        let current = driver::current_context();
        let exportable = self.drain().and_then(|()| self.make_exportable(buffer));
        // The program's thread: its context as it was (the drain and the copies set
        // the buffers' own).
        let _ = driver::set_context(current);
        if let Err(e) = exportable {
            return Some(Err(e));
        }
        buffer.pinned = true;
        let (id, connection) = (buffer.id, buffer.connection);
        (buffer.id, buffer.connection) = (0, 0);
        let (base, bytes) = (buffer.va, buffer.bytes);
        drop(buffers);
        // Touch hints name buffers by the daemon's ids: a pinned buffer has none.
        crate::touch::removed(base);
        crate::managed::pinned(base, self.device, bytes);
        self.report_unmovable();
        let _ = self.send_on(connection, &ClientMsg::Free { buffer: id });
        Some(Ok((base, bytes)))
    }

    /// Re-creates each chunk of `buffer` not yet so in exportable memory where it is.
    fn make_exportable(&self, buffer: &mut Buffer) -> Result<(), String> {
        for index in 0..buffer.chunks.len() {
            let memory = buffer.chunks[index];
            if matches!(memory, Memory::Exportable { .. }) {
                continue;
            }
            let (at, len) = buffer.span(index);
            let site = batch::Site {
                ctx: buffer.ctx,
                at,
                len,
                memory,
            };
            let new = self.mover.re_create(site)?;
            buffer.chunks[index] = new;
            // A program's own mappings of the chunk follow it (`vmm`).
            crate::vmm::moved(at, len, new.handle());
        }
        Ok(())
    }

    /// Chunk `index` of the pinned buffer at `base` of `bytes`, for an IPC import
    /// (`ipc`): its offset in the buffer, its length and a descriptor of its memory;
    /// `Ok(None)` past the last chunk. Looked up and exported under the buffers' lock,
    /// so that a buffer freed meanwhile is never exported; an error when no such
    /// pinned buffer is here.
    pub fn exported_chunk(
        &self,
        base: DevPtr,
        bytes: u64,
        index: usize,
    ) -> Result<Option<(u64, u64, std::os::fd::OwnedFd)>, String> {
        let buffers = lock(&self.buffers);
        let buffer = buffers
            .get(&base)
            .filter(|b| b.pinned && b.bytes == bytes)
            .ok_or("no such exported buffer here (it was freed)")?;
        let Some(memory) = buffer.chunks.get(index) else {
            return Ok(None);
        };
        let (at, len) = buffer.span(index);
        driver::set_context(buffer.ctx as Handle)?;
        let fd = driver::export_fd(memory.handle())?;
        Ok(Some((at - base, len, fd)))
    }

    /// Whether `va` is the start of a buffer of ours.
    pub fn holds(&self, va: DevPtr) -> bool {
        lock(&self.buffers).contains_key(&va)
    }

    /// Whether `va` lies in a buffer of ours.
    pub fn contains(&self, va: DevPtr) -> bool {
        let buffers = lock(&self.buffers);
        buffers
            .range(..=va)
            .next_back()
            .is_some_and(|(_, b)| va < b.va + b.bytes)
    }

    /// Bytes of the process's buffers in VRAM now (what its view's free memory is
    /// less of; the rest is in host memory).
    pub fn vram_held_bytes(&self) -> u64 {
        lock(&self.buffers)
            .values()
            .flat_map(|b| {
                b.chunks
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.location() == wire::Location::Vram)
                    .map(|(i, _)| b.span(i).1)
            })
            .sum()
    }

    /// The reader thread: carries out the daemon's commands in order until the
    /// connection ends, then fails what waits and lets the program go on unmanaged
    /// while it reconnects; a new connection is served the same way.
    fn serve(&'static self, mut input: UnixStream) {
        let mut early = VecDeque::new();
        loop {
            let why = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.serve_until_lost(input, early)
            })) {
                Ok(why) => why,
                Err(_) => "internal error (a panic) in the interposer's thread".to_owned(),
            };
            let why = lock(&self.gave_up).take().unwrap_or(why);
            let why = format!("lost the gpuswap daemon ({why}); new allocations are unmanaged");
            diag::warn(&why);
            let _ = lock(&self.out).shutdown(std::net::Shutdown::Both);
            // Allocations waiting for an answer get none: fail them, under the lock that
            // `alloc` checks the loss under.
            let mut answers = lock(&self.answers);
            self.lost.set(why.clone());
            for answer in answers.values_mut() {
                if matches!(answer, Answer::Waiting { .. }) {
                    *answer = Answer::Done(Err((ffi::CUDA_ERROR_UNKNOWN, why.clone())));
                }
            }
            self.answered.notify_all();
            drop(answers);
            match self.rejoin() {
                Some((reader, messages)) => (input, early) = (reader, messages),
                None => {
                    self.lost_for_good.store(true, Ordering::SeqCst);
                    return;
                }
            }
        }
    }

    /// Carries out the daemon's messages, `early` ones first (read before the
    /// connection was served), until the connection ends; returns why.
    fn serve_until_lost(
        &'static self,
        mut input: UnixStream,
        mut early: VecDeque<DaemonMsg>,
    ) -> String {
        // Held from `Suspend` to `Resume`; dropped when the daemon is lost.
        let mut suspended: Option<std::sync::RwLockWriteGuard<'_, ()>> = None;
        loop {
            let msg = match early
                .pop_front()
                .map(Ok)
                .unwrap_or_else(|| wire::read_frame::<DaemonMsg>(&mut input))
            {
                Ok(msg) => msg,
                Err(e) => return e.to_string(),
            };
            let arrival = Instant::now();
            let reply = match msg {
                DaemonMsg::Granted {
                    request,
                    buffer,
                    bytes,
                    chunk_bytes,
                    placement,
                } => {
                    self.granted(request, buffer, bytes, chunk_bytes, &placement);
                    None
                }
                DaemonMsg::AllocFailed {
                    request,
                    out_of_memory,
                    error,
                } => {
                    let code = if out_of_memory {
                        ffi::CUDA_ERROR_OUT_OF_MEMORY
                    } else {
                        ffi::CUDA_ERROR_INVALID_VALUE
                    };
                    self.answer(request, Err((code, error)));
                    None
                }
                DaemonMsg::Suspend => {
                    if suspended.is_none() {
                        suspended = Some(
                            GATE.write()
                                .unwrap_or_else(std::sync::PoisonError::into_inner),
                        );
                    }
                    if let Err(e) = self.drain() {
                        diag::warn(&format!("draining for a suspension: {e}"));
                    }
                    Some(ClientMsg::Suspended)
                }
                DaemonMsg::Resume => {
                    suspended = None;
                    None
                }
                DaemonMsg::Relocate {
                    copy,
                    buffer,
                    chunk,
                    to,
                } => {
                    let moves = [ChunkMove { buffer, chunk, to }];
                    let (mut failed, _) = self.relocate(&moves, arrival, false);
                    Some(match failed.pop() {
                        None => ClientMsg::Relocated { copy },
                        Some((_, error)) => ClientMsg::RelocateFailed { copy, error },
                    })
                }
                DaemonMsg::RelocateBatch { batch, moves } => {
                    let (failed, elapsed_ns) = self.relocate(&moves, arrival, true);
                    Some(ClientMsg::RelocatedBatch {
                        batch,
                        error: failed.first().map(|f| f.1.clone()).unwrap_or_default(),
                        failed: failed.into_iter().map(|f| f.0).collect(),
                        elapsed_ns,
                    })
                }
                DaemonMsg::Kill { reason } => {
                    diag::die(&format!("the gpuswap daemon ended this process: {reason}"))
                }
                DaemonMsg::Refused { reason } => return format!("it refused: {reason}"),
                other => {
                    diag::warn(&format!("ignored an unexpected message: {other:?}"));
                    None
                }
            };
            if let Some(reply) = reply
                && let Err(e) = self.send(&reply)
            {
                diag::warn(&format!("answering the daemon: {e}"));
            }
        }
    }

    fn answer(&self, request: u64, result: Result<DevPtr, (CuResult, String)>) {
        lock(&self.answers).insert(request, Answer::Done(result));
        self.answered.notify_all();
    }

    /// Backs a reservation chunk by chunk as the daemon placed it.
    fn granted(
        &self,
        request: u64,
        id: u64,
        bytes: u64,
        chunk_bytes: u64,
        placement: &[wire::Placement],
    ) {
        let ctx = match lock(&self.answers).get(&request) {
            Some(Answer::Waiting { ctx }) => *ctx,
            _ => {
                diag::warn(&format!("a grant for unknown request {request}"));
                return;
            }
        };
        let result = self.map_new(id, bytes, chunk_bytes, placement, ctx);
        if result.is_err() {
            // The daemon counted it: give it back.
            let _ = self.send(&ClientMsg::Free { buffer: id });
        }
        self.answer(
            request,
            result.map_err(|e| (ffi::CUDA_ERROR_OUT_OF_MEMORY, e)),
        );
    }

    fn map_new(
        &self,
        id: u64,
        bytes: u64,
        chunk_bytes: u64,
        placement: &[wire::Placement],
        ctx: usize,
    ) -> Result<DevPtr, String> {
        driver::set_context(ctx as Handle)?;
        let va = driver::reserve(bytes, self.granularity)?;
        let mut buffer = Buffer {
            id,
            connection: self.connection(),
            va,
            bytes,
            chunk_bytes,
            chunks: Vec::new(),
            ctx,
            pinned: false,
        };
        for (index, location) in wire::chunks_of(placement).enumerate() {
            let (at, len) = buffer.span(index);
            let mapped =
                Memory::take(len, location, ctx, false).and_then(|memory| {
                    match driver::map(at, len, memory.handle()) {
                        Ok(()) => Ok(memory),
                        Err(e) => {
                            let _ = memory.let_go();
                            Err(e)
                        }
                    }
                });
            match mapped {
                Ok(memory) => buffer.chunks.push(memory),
                Err(e) => {
                    let _ = unmap_buffer(&buffer);
                    return Err(e);
                }
            }
        }
        lock(&self.buffers).insert(va, buffer);
        self.touch_added(id, va, bytes);
        Ok(va)
    }

    /// The buffer `id` is mapped at `[va, va + bytes)`: touch hints name it, when this
    /// is the first device's client (the one progress reports, which carry the hints,
    /// go to).
    fn touch_added(&self, id: u64, va: DevPtr, bytes: u64) {
        if self.device == 0 {
            crate::touch::added(id, va, bytes);
        }
    }

    /// Waits for everything the process started on any GPU (see the module's
    /// documentation).
    fn drain(&self) -> Result<(), String> {
        let mut result = Ok(());
        // Every context, even after one fails (a destroyed context has nothing running).
        for ctx in lock(&CONTEXTS).iter() {
            let synced = driver::set_context(*ctx as Handle).and_then(|()| driver::synchronize());
            result = result.and(synced);
        }
        result
    }

    /// Carries out the daemon's moves (the process is suspended), timed from the
    /// command's `arrival`; `batch`: a `RelocateBatch`, reported as such in the trace.
    /// Returns each failed move's index with its error, by index, and the time from
    /// `arrival` to the last remap.
    fn relocate(
        &self,
        moves: &[ChunkMove],
        arrival: Instant,
        batch: bool,
    ) -> (Vec<(u32, String)>, u64) {
        let mut buffers = lock(&self.buffers);
        let connection = self.connection();
        let plan = batch::plan(moves, |id, chunk| {
            let buffer = buffers
                .values()
                .find(|b| b.id == id && b.connection == connection)
                .ok_or_else(|| format!("no buffer {id} here"))?;
            let memory = *buffer
                .chunks
                .get(chunk as usize)
                .ok_or_else(|| format!("buffer {id} has no chunk {chunk}"))?;
            let (at, len) = buffer.span(chunk as usize);
            Ok(batch::Site {
                ctx: buffer.ctx,
                at,
                len,
                memory,
            })
        });
        let mut failed = plan.refused;
        let (mut start, mut moved_at) = (arrival, arrival);
        for mut pass in plan.passes {
            moved_at = self.mover.run(&mut pass, start, batch);
            start = Instant::now();
            for m in &pass {
                match (m.moved_to(), m.error()) {
                    (Some(new), _) => {
                        let buffer = buffers
                            .values_mut()
                            .find(|b| b.id == m.buffer && b.connection == connection);
                        let chunk = buffer.and_then(|b| b.chunks.get_mut(m.chunk as usize));
                        if let Some(chunk) = chunk {
                            *chunk = new;
                        }
                        // A program's own mappings of the chunk follow it (`vmm`).
                        crate::vmm::moved(m.site.at, m.site.len, new.handle());
                    }
                    (None, error) => failed.push((m.index, error.unwrap_or("?").to_owned())),
                }
            }
        }
        let elapsed_ns = moved_at.duration_since(arrival).as_nanos() as u64;
        failed.sort_by_key(|f| f.0);
        (failed, elapsed_ns)
    }
}

/// Reconnection and the device's reports.
impl Client {
    /// After a loss, tries to reconnect at [`rejoin::retry_pauses`]; returns the new
    /// connection's reader and the messages read before it is served, or `None` once it
    /// gave up (said once).
    fn rejoin(&'static self) -> Option<(UnixStream, VecDeque<DaemonMsg>)> {
        let mut last = String::new();
        for pause in rejoin::retry_pauses() {
            std::thread::sleep(pause);
            match self.rejoin_once() {
                Ok(joined) => return Some(joined),
                Err(e) => last = e,
            }
        }
        diag::warn(&format!(
            "gave up reconnecting to the gpuswap daemon after {} s ({last}); allocations \
             stay unmanaged",
            rejoin::RETRY_FOR.as_secs()
        ));
        None
    }

    /// One reconnection: a daemon is joined, the buffers the process holds are declared
    /// and take the ids it answers (those it does not adopt are never named to it), and
    /// the connection replaces the lost one. The buffers stay locked meanwhile, so that
    /// none is freed between its declaration and its new id.
    fn rejoin_once(&'static self) -> Result<(UnixStream, VecDeque<DaemonMsg>), String> {
        let Joined {
            mut stream,
            daemon_pid,
            ..
        } = join(self.granularity, self.device)?;
        let connection = self.connection() + 1;
        let mut buffers = lock(&self.buffers);
        // Pinned buffers are no longer the daemon's to book: `managed` reports them.
        let vas: Vec<u64> = buffers
            .iter()
            .filter(|(_, b)| !b.pinned)
            .map(|(va, _)| *va)
            .collect();
        let held = vas
            .iter()
            .map(|va| &buffers[va])
            .map(|b| HeldBuffer {
                bytes: b.bytes,
                chunk_bytes: b.chunk_bytes,
                placement: wire::runs(b.chunks.iter().map(Memory::location)),
            })
            .collect();
        let talk = |e: wire::FrameError| format!("declaring the buffers held: {e}");
        let declarations = rejoin::declarations(held);
        for msg in &declarations {
            wire::write_frame(&mut stream, msg).map_err(talk)?;
        }
        let (mut ids, mut early) = (Vec::new(), VecDeque::new());
        while ids.len() < vas.len() {
            match wire::read_frame(&mut stream).map_err(talk)? {
                DaemonMsg::Adopted { buffers } => ids.extend(buffers),
                DaemonMsg::Refused { reason } => return Err(format!("refused: {reason}")),
                other => early.push_back(other),
            }
        }
        let adopted = ids.iter().flatten().count();
        for (va, id) in vas.iter().zip(ids) {
            let b = buffers.get_mut(va).expect("locked since declared");
            (b.id, b.connection) = (id.unwrap_or(0), id.map_or(0, |_| connection));
            // Touch hints name buffers by the daemon's ids: the new ones, or none.
            crate::touch::removed(*va);
            if let Some(id) = id {
                self.touch_added(id, *va, b.bytes);
            }
        }
        let io = |e: std::io::Error| format!("reconnecting: {e}");
        stream.set_read_timeout(None).map_err(io)?;
        let reader = stream.try_clone().map_err(io)?;
        let control = stream.try_clone().map_err(io)?;
        {
            let mut out = lock(&self.out);
            let mut old_control = lock(&self.control);
            for (fd, s) in self.fds.iter().zip([&stream, &reader, &control]) {
                fd.store(s.as_raw_fd(), Ordering::Relaxed);
            }
            *old_control = control;
            *out = stream;
            self.connection.store(connection, Ordering::SeqCst);
        }
        drop(buffers);
        self.lost.clear();
        diag::warn(&format!(
            "reconnected to the gpuswap daemon: {} buffers declared, {adopted} adopted",
            vas.len()
        ));
        self.watch(daemon_pid, connection)?;
        self.report_device(connection, false);
        self.report_unmovable();
        Ok((reader, early))
    }

    /// Reports the device's memory, as the real driver says, on connection
    /// `connection`, at most every [`rejoin::REPORT_EVERY`] (and at once on a new connection).
    /// `current`: the calling thread's context is the program's; else the first live
    /// context the program allocated in is made current (nothing is said before one).
    fn report_device(&self, connection: u64, current: bool) {
        let recent = |r: &(u64, Option<Instant>)| {
            r.0 == connection && r.1.is_some_and(|at| at.elapsed() < rejoin::REPORT_EVERY)
        };
        if recent(&lock(&self.reported)) {
            return;
        }
        // The first context the program allocated in that is still alive.
        let contexts = || lock(&self.contexts).clone();
        if !current
            && !contexts()
                .into_iter()
                .any(|ctx| driver::set_context(ctx as Handle).is_ok())
        {
            return;
        }
        let Some(msg) = rejoin::device_memory() else {
            return;
        };
        let mut reported = lock(&self.reported);
        if !recent(&reported) {
            *reported = (connection, Some(Instant::now()));
            let _ = self.send_on(connection, &msg);
        }
    }
}

impl crate::vmm::Buffers for Client {
    fn alloc(&self, bytes: u64) -> Result<DevPtr, (CuResult, String)> {
        Client::alloc(self, bytes)
    }

    fn free(&self, va: DevPtr) -> Option<Result<(), String>> {
        Client::free(self, va)
    }

    fn chunk_handles(&self, va: DevPtr) -> Option<(u64, u64, Vec<u64>)> {
        let buffers = lock(&self.buffers);
        let b = buffers.get(&va)?;
        let handles = b.chunks.iter().map(Memory::handle).collect();
        Some((b.id, b.chunk_bytes, handles))
    }
}

impl Outbox for Client {
    /// Decides under the connection's lock: messages that report a state (busy, idle)
    /// leave in the order the state changed.
    fn send_if(&self, decide: &mut dyn FnMut() -> Option<ClientMsg>) -> Result<(), String> {
        let mut out = lock(&self.out);
        match decide() {
            Some(msg) => wire::write_frame(&mut *out, &msg).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// Lost for good only: while the interposer reconnects, what it says is lost with
    /// the connection, and the timer goes on for the next one.
    fn is_lost(&self) -> bool {
        self.lost_for_good.load(Ordering::SeqCst)
    }
}

/// Unmaps and releases every chunk, then the reservation.
fn unmap_buffer(buffer: &Buffer) -> Result<(), String> {
    let mut result = Ok(());
    for (index, memory) in buffer.chunks.iter().enumerate() {
        let (at, len) = buffer.span(index);
        result = result.and(driver::unmap(at, len)).and(memory.let_go());
    }
    result.and(driver::unreserve(buffer.va, buffer.bytes))
}
