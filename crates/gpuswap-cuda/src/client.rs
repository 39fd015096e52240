//! The process's side of gpuswapd: the connection, the buffers the daemon placed, and
//! the thread that carries out the daemon's commands (suspend, relocate, resume) on the
//! real driver. Commands are carried out in the order they arrive, on that one thread,
//! so a buffer is mapped before any command can move one of its chunks.

use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::sync::{Condvar, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use gpuswap_wire::{self as wire, ClientMsg, DaemonMsg, Location, PROTOCOL_VERSION};

use crate::diag;
use crate::ffi::{self, CuResult, DevPtr, Handle, driver};
use crate::host_pool;

/// One chunk as mapped now.
struct Chunk {
    handle: u64,
}

/// A buffer the daemon placed.
struct Buffer {
    id: u64,
    va: DevPtr,
    /// Bytes reserved (whole granules).
    bytes: u64,
    chunk_bytes: u64,
    chunks: Vec<Chunk>,
    ctx: usize,
}

impl Buffer {
    /// The chunk's address and length (whole granules; the last may be shorter).
    fn span(&self, index: usize) -> (DevPtr, u64) {
        let offset = index as u64 * self.chunk_bytes;
        (self.va + offset, self.chunk_bytes.min(self.bytes - offset))
    }
}

/// What an allocation waits for.
enum Answer {
    Waiting { ctx: usize },
    Done(Result<DevPtr, (CuResult, String)>),
}

/// The connection and everything it manages.
pub struct Client {
    out: Mutex<UnixStream>,
    pub vram_bytes: u64,
    granularity: u64,
    /// Buffers by address.
    buffers: Mutex<BTreeMap<DevPtr, Buffer>>,
    answers: Mutex<BTreeMap<u64, Answer>>,
    answered: Condvar,
    next_request: std::sync::atomic::AtomicU64,
    /// Launches, copies and frees take it shared; a suspension holds it exclusively.
    pub gate: RwLock<()>,
    /// Set once, when the connection to the daemon is lost: every launch asks, so a read
    /// takes no lock.
    lost: OnceLock<String>,
    contexts: Mutex<Vec<usize>>,
    /// A scratch reservation of one chunk for relocations.
    scratch: Mutex<Option<(DevPtr, u64)>>,
}

/// Connects and introduces the process. Called after the real `cuInit` succeeded.
pub fn connect() -> Result<&'static Client, String> {
    // SAFETY: geteuid has no preconditions.
    let path = wire::socket_path(None, unsafe { libc::geteuid() });
    let shown = path.display();
    let mut stream = UnixStream::connect(&path).map_err(|e| {
        format!(
            "no gpuswap daemon at {shown}: {e}. Start one with `gpuswap daemon --socket {shown}`, \
             point GPUSWAP_SOCKET at a running one, or set GPUSWAP_PASSTHROUGH=1 to run \
             without it"
        )
    })?;
    let talk = |e: wire::FrameError| format!("talking to the gpuswap daemon at {shown}: {e}");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| talk(e.into()))?;
    let granularity = driver::granularity()?;
    let hello = ClientMsg::Hello {
        protocol: PROTOCOL_VERSION,
        pid: std::process::id(),
        name: std::env::var("GPUSWAP_TENANT_NAME").unwrap_or_else(|_| program_name()),
        device_total_bytes: driver::total_memory()?,
        granularity_bytes: granularity,
    };
    wire::write_frame(&mut stream, &hello).map_err(talk)?;
    let vram_bytes = match wire::read_frame(&mut stream).map_err(talk)? {
        DaemonMsg::Welcome { vram_bytes, .. } => vram_bytes,
        DaemonMsg::Refused { reason } => {
            return Err(format!("the gpuswap daemon at {shown} refused: {reason}"));
        }
        other => return Err(format!("unexpected answer from {shown}: {other:?}")),
    };
    stream.set_read_timeout(None).map_err(|e| talk(e.into()))?;
    let reader = stream.try_clone().map_err(|e| talk(e.into()))?;
    let client: &'static Client = Box::leak(Box::new(Client {
        out: Mutex::new(stream),
        vram_bytes,
        granularity: granularity.max(1),
        buffers: Mutex::new(BTreeMap::new()),
        answers: Mutex::new(BTreeMap::new()),
        answered: Condvar::new(),
        next_request: std::sync::atomic::AtomicU64::new(1),
        gate: RwLock::new(()),
        lost: OnceLock::new(),
        contexts: Mutex::new(Vec::new()),
        scratch: Mutex::new(None),
    }));
    std::thread::Builder::new()
        .name("gpuswap-client".into())
        .spawn(move || client.serve(reader))
        .map_err(|e| format!("cannot start the interposer's thread: {e}"))?;
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

    /// Why the daemon is gone, if it is: then allocations pass through unmanaged.
    pub fn lost(&self) -> Option<&str> {
        self.lost.get().map(String::as_str)
    }

    /// Allocates `bytes` through the daemon; returns the device address.
    pub fn alloc(&self, bytes: u64) -> Result<DevPtr, (CuResult, String)> {
        let ctx = driver::current_context();
        if ctx.is_null() {
            return Err((ffi::CUDA_ERROR_INVALID_CONTEXT, "no current context".into()));
        }
        {
            let mut contexts = lock(&self.contexts);
            if !contexts.contains(&(ctx as usize)) {
                contexts.push(ctx as usize);
            }
        }
        let request = self
            .next_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(bytes) = bytes
            .div_ceil(self.granularity)
            .checked_mul(self.granularity)
        else {
            return Err((
                ffi::CUDA_ERROR_OUT_OF_MEMORY,
                format!("{bytes} bytes cannot be"),
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

    /// Frees a buffer of ours; `None` if `va` is not one.
    pub fn free(&self, va: DevPtr) -> Option<Result<(), String>> {
        let buffer = lock(&self.buffers).remove(&va)?;
        let result = unmap_buffer(&buffer);
        // The daemon's books follow even if the driver complained; a lost daemon has
        // no books to tell.
        let told = self.send(&ClientMsg::Free { buffer: buffer.id });
        Some(result.and(if self.lost().is_some() { Ok(()) } else { told }))
    }

    /// Whether `va` is the start of a buffer of ours.
    pub fn holds(&self, va: DevPtr) -> bool {
        lock(&self.buffers).contains_key(&va)
    }

    /// Bytes of the process's buffers, wherever they are.
    pub fn held_bytes(&self) -> u64 {
        lock(&self.buffers).values().map(|b| b.bytes).sum()
    }

    /// The reader thread: carries out the daemon's commands in order until the
    /// connection ends, then fails what waits and lets the program go on unmanaged.
    fn serve(&'static self, input: UnixStream) {
        let why = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.serve_until_lost(input)
        })) {
            Ok(why) => why,
            Err(_) => "internal error (a panic) in the interposer's thread".to_owned(),
        };
        let why = format!("lost the gpuswap daemon ({why}); new allocations are unmanaged");
        diag::warn(&why);
        let _ = lock(&self.out).shutdown(std::net::Shutdown::Both);
        // Allocations waiting for an answer get none: fail them, under the lock that
        // `alloc` checks the loss under.
        let mut answers = lock(&self.answers);
        let _ = self.lost.set(why.clone());
        for answer in answers.values_mut() {
            if matches!(answer, Answer::Waiting { .. }) {
                *answer = Answer::Done(Err((ffi::CUDA_ERROR_UNKNOWN, why.clone())));
            }
        }
        self.answered.notify_all();
    }

    /// Carries out the daemon's messages until the connection ends; returns why.
    fn serve_until_lost(&'static self, mut input: UnixStream) -> String {
        // Held from `Suspend` to `Resume`; dropped when the daemon is lost.
        let mut suspended: Option<std::sync::RwLockWriteGuard<'_, ()>> = None;
        loop {
            let msg = match wire::read_frame::<DaemonMsg>(&mut input) {
                Ok(msg) => msg,
                Err(e) => return e.to_string(),
            };
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
                            self.gate
                                .write()
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
                } => Some(match self.relocate(buffer, chunk as usize, to) {
                    Ok(()) => ClientMsg::Relocated { copy },
                    Err(error) => ClientMsg::RelocateFailed { copy, error },
                }),
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
            va,
            bytes,
            chunk_bytes,
            chunks: Vec::new(),
            ctx,
        };
        for (index, location) in wire::chunks_of(placement).enumerate() {
            let (at, len) = buffer.span(index);
            let mapped = driver::create(len, memory_kind(location))
                .map_err(|rc| format!("cuMemCreate of {len} bytes failed with CUDA error {rc}"))
                .and_then(|handle| match driver::map(at, len, handle) {
                    Ok(()) => Ok(handle),
                    Err(e) => {
                        let _ = driver::release(handle);
                        Err(e)
                    }
                });
            match mapped {
                Ok(handle) => buffer.chunks.push(Chunk { handle }),
                Err(e) => {
                    let _ = unmap_buffer(&buffer);
                    return Err(e);
                }
            }
        }
        lock(&self.buffers).insert(va, buffer);
        Ok(va)
    }

    /// Waits for everything the process started on the GPU.
    fn drain(&self) -> Result<(), String> {
        let mut result = Ok(());
        // Every context, even after one fails (a destroyed context has nothing running).
        for ctx in lock(&self.contexts).iter() {
            let synced = driver::set_context(*ctx as Handle).and_then(|()| driver::synchronize());
            result = result.and(synced);
        }
        result
    }

    /// Moves one chunk: new memory at `to`, mapped at a scratch range, the copy, then
    /// the new memory mapped at the chunk's own address and the old released. The
    /// address never changes, so the program's pointers stay valid.
    fn relocate(&self, id: u64, index: usize, to: Location) -> Result<(), String> {
        let mut buffers = lock(&self.buffers);
        let buffer = buffers
            .values_mut()
            .find(|b| b.id == id)
            .ok_or_else(|| format!("no buffer {id} here"))?;
        let old = buffer
            .chunks
            .get(index)
            .map(|c| c.handle)
            .ok_or_else(|| format!("buffer {id} has no chunk {index}"))?;
        let (at, len) = buffer.span(index);
        let mut clock = PhaseClock::start();
        driver::set_context(buffer.ctx as Handle)?;
        let ready = match to {
            Location::Host => host_pool::take(len, buffer.ctx),
            Location::Vram => None,
        };
        let new = match ready {
            Some(handle) => handle,
            None => driver::create(len, memory_kind(to)).map_err(|rc| {
                format!("cuMemCreate of {len} bytes in {to:?} failed with CUDA error {rc}")
            })?,
        };
        clock.lap(Phase::Create);
        let copied = self.with_scratch(len, |scratch| {
            driver::map(scratch, len, new)?;
            let copied = driver::copy(scratch, at, len);
            driver::unmap(scratch, len).and(copied)
        });
        if let Err(e) = copied {
            let _ = driver::release(new);
            return Err(e);
        }
        clock.lap(Phase::Copy);
        if let Err(e) = driver::unmap(at, len) {
            let _ = driver::release(new);
            return Err(e);
        }
        if let Err(e) = driver::map(at, len, new) {
            // Put the old memory back: the data is still there.
            let _ = driver::map(at, len, old);
            let _ = driver::release(new);
            return Err(e);
        }
        clock.lap(Phase::Remap);
        // The chunk lives in the new memory now, whatever the release of the old says.
        // Host memory left behind is kept for the next eviction while the pool has room.
        buffer.chunks[index] = Chunk { handle: new };
        let kept = to == Location::Vram && host_pool::give(len, old);
        if !kept && let Err(e) = driver::release(old) {
            diag::warn(&format!("releasing a moved chunk's old memory: {e}"));
        }
        clock.lap(Phase::Release);
        lock(&MOVES).record(to, len, &clock.ns);
        Ok(())
    }

    fn with_scratch(
        &self,
        len: u64,
        f: impl FnOnce(DevPtr) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut scratch = lock(&self.scratch);
        let va = match *scratch {
            Some((va, bytes)) if bytes >= len => va,
            other => {
                if let Some((va, bytes)) = other {
                    driver::unreserve(va, bytes)?;
                    *scratch = None;
                }
                let va = driver::reserve(len, self.granularity)?;
                *scratch = Some((va, len));
                va
            }
        };
        f(va)
    }
}

/// The steps of one chunk's move, in order.
#[derive(Clone, Copy)]
enum Phase {
    /// Making the buffer's context current, then `cuMemCreate` of the new memory (or, for
    /// host memory, a handle the pool kept ready).
    Create,
    /// Taking the scratch range (reserving it on the first move or a longer chunk),
    /// mapping the new memory there, the copy and its wait, the scratch unmapped.
    Copy,
    /// The chunk's address unmapped and mapped to the new memory.
    Remap,
    /// `cuMemRelease` of the old memory (or, for host memory, handing it to the pool).
    Release,
}

impl Phase {
    const ALL: [Phase; 4] = [Phase::Create, Phase::Copy, Phase::Remap, Phase::Release];

    fn name(self) -> &'static str {
        match self {
            Phase::Create => "create",
            Phase::Copy => "copy",
            Phase::Remap => "remap",
            Phase::Release => "release",
        }
    }
}

/// Nanoseconds per phase, indexed by `Phase as usize`.
type PhaseNs = [u64; Phase::ALL.len()];

/// Times the phases of one move.
struct PhaseClock {
    last: Instant,
    ns: PhaseNs,
}

impl PhaseClock {
    fn start() -> Self {
        Self {
            last: Instant::now(),
            ns: [0; Phase::ALL.len()],
        }
    }

    /// Ends `phase` now.
    fn lap(&mut self, phase: Phase) {
        let now = Instant::now();
        self.ns[phase as usize] = now.duration_since(self.last).as_nanos() as u64;
        self.last = now;
    }
}

/// Where the process's chunk moves that succeeded spent their time, per direction (to
/// VRAM, to host memory): the real-GPU check reads it to find a move's cost
/// (`GPUSWAP_TRACE=1`).
struct MoveTimes {
    chunks: [u64; 2],
    bytes: [u64; 2],
    phase_ns: [PhaseNs; 2],
}

static MOVES: Mutex<MoveTimes> = Mutex::new(MoveTimes {
    chunks: [0; 2],
    bytes: [0; 2],
    phase_ns: [[0; Phase::ALL.len()]; 2],
});

impl MoveTimes {
    fn record(&mut self, to: Location, bytes: u64, phase_ns: &PhaseNs) {
        diag::add_report(diag::Report::Moves, move_report);
        let d = to as usize;
        self.chunks[d] += 1;
        self.bytes[d] += bytes;
        for (sum, ns) in self.phase_ns[d].iter_mut().zip(phase_ns) {
            *sum += ns;
        }
    }
}

/// The moves' times per chunk and phase, for the trace; `None` before any move.
fn move_report() -> Option<String> {
    let moves = lock(&MOVES);
    let lines: Vec<String> = [Location::Vram, Location::Host]
        .into_iter()
        .filter(|&to| moves.chunks[to as usize] > 0)
        .map(|to| {
            let d = to as usize;
            let n = moves.chunks[d];
            let phases: Vec<String> = Phase::ALL
                .iter()
                .zip(moves.phase_ns[d])
                .map(|(phase, ns)| format!("{} {:.1}", phase.name(), ns as f64 / 1e3 / n as f64))
                .collect();
            format!(
                "moves to {to:?}: {n} chunks, {} bytes; us per chunk: {}",
                moves.bytes[d],
                phases.join(", ")
            )
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

fn memory_kind(location: Location) -> std::ffi::c_int {
    match location {
        Location::Vram => ffi::LOCATION_DEVICE,
        Location::Host => ffi::LOCATION_HOST,
    }
}

/// Unmaps and releases every chunk, then the reservation.
fn unmap_buffer(buffer: &Buffer) -> Result<(), String> {
    let mut result = Ok(());
    for (index, chunk) in buffer.chunks.iter().enumerate() {
        let (at, len) = buffer.span(index);
        result = result
            .and(driver::unmap(at, len))
            .and(driver::release(chunk.handle));
    }
    result.and(driver::unreserve(buffer.va, buffer.bytes))
}
