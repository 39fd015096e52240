//! Chunk moves, one or many at a time. A move copies a chunk into new memory at its
//! destination and maps that memory at the chunk's unchanged address, so the program's
//! pointers stay valid. The daemon's per-chunk `Relocate` is a batch of one; its
//! `RelocateBatch` runs the same steps with every move's copy in flight together.
//!
//! Host memory stays mapped at a window of its own (`host_pool::HostChunk`), so no move
//! maps anything but the chunk's address. A pass of moves to host memory:
//!
//! 1. **create**: each destination (host memory from the pool when it has some ready);
//! 2. **copy**: every copy from the chunk's address to its destination's window queued
//!    on the context's stream, one synchronization for the lot;
//! 3. **remap**: each chunk's address unmapped and mapped to its new memory;
//! 4. **release**: the VRAM released.
//!
//! A pass of moves to VRAM remaps first and copies after, from the host memory's window
//! to the chunk's address (now the new VRAM); a copy that fails puts the host memory
//! back at the chunk's address, where its data still is. The host memory left behind is
//! kept for the next eviction while the pool has room.
//!
//! A move that fails leaves its chunk where it was and lets go of what it made; the
//! others go on. Moves to host memory run before moves to VRAM, each direction a pass
//! of its own: the VRAM that the first frees is there for the second. A pass creates
//! all its destinations before it releases anything.

use std::sync::Mutex;
use std::time::Instant;

use gpuswap_wire::{ChunkMove, Location};

use crate::diag;
use crate::ffi::{self, DevPtr, Handle, driver};
use crate::host_pool::{self, HostChunk};

/// The memory behind a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Memory {
    /// A VRAM handle.
    Vram(u64),
    /// Host memory, mapped at its window too.
    Host(HostChunk),
    /// Memory re-created exportable for an IPC export (`ipc`, [`Mover::re_create`]),
    /// where the chunk was, mapped at a window too as host memory is. Released when let
    /// go, never kept for other data: another process may still map it.
    Exportable {
        handle: u64,
        window: DevPtr,
        len: u64,
        location: Location,
    },
}

impl Memory {
    /// New memory of `len` bytes at `location` for a buffer of context `ctx` (current):
    /// host memory from the pool when it has some. `eviction`: a move's.
    pub fn take(len: u64, location: Location, ctx: usize, eviction: bool) -> Result<Self, String> {
        match location {
            Location::Host => host_pool::take(len, ctx, eviction).map(Memory::Host),
            Location::Vram => driver::create(len, ffi::LOCATION_DEVICE)
                .map(Memory::Vram)
                .map_err(|rc| {
                    format!("cuMemCreate of {len} bytes in Vram failed with CUDA error {rc}")
                }),
        }
    }

    pub fn location(&self) -> Location {
        match self {
            Memory::Vram(_) => Location::Vram,
            Memory::Host(_) => Location::Host,
            Memory::Exportable { location, .. } => *location,
        }
    }

    /// New memory of `len` bytes where `like` is, exportable, mapped at its window.
    fn exportable(len: u64, like: Memory) -> Result<Self, String> {
        let handle = driver::create_exportable(like.handle(), len)?;
        match driver::map_window(handle, len) {
            Ok(window) => Ok(Memory::Exportable {
                handle,
                window,
                len,
                location: like.location(),
            }),
            Err(e) => {
                let _ = driver::release(handle);
                Err(e)
            }
        }
    }

    /// The handle to map at a chunk's address.
    pub fn handle(&self) -> u64 {
        match self {
            Memory::Vram(handle) => *handle,
            Memory::Host(host) => host.handle,
            Memory::Exportable { handle, .. } => *handle,
        }
    }

    /// Where the moves' copies reach it: host memory's window (VRAM has none).
    fn window(&self) -> Option<DevPtr> {
        match self {
            Memory::Vram(_) => None,
            Memory::Host(host) => Some(host.window),
            Memory::Exportable { window, .. } => Some(*window),
        }
    }

    /// Lets go of memory that no chunk holds now (and that is not mapped at a chunk's
    /// address): VRAM released, host memory kept for the next eviction or released.
    pub fn let_go(self) -> Result<(), String> {
        match self {
            Memory::Vram(handle) => driver::release(handle),
            Memory::Host(host) => {
                host_pool::give(host);
                Ok(())
            }
            Memory::Exportable {
                handle,
                window,
                len,
                ..
            } => driver::unmap_window(window, len).and(driver::release(handle)),
        }
    }
}

/// Where a chunk to move lives now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Site {
    /// Its buffer's context.
    pub ctx: usize,
    /// Its address.
    pub at: DevPtr,
    /// Its length (whole granules).
    pub len: u64,
    /// The memory mapped there now.
    pub memory: Memory,
}

/// One move of a batch, resolved to its chunk's site.
#[derive(Debug)]
pub(crate) struct Move {
    /// Its index in the daemon's command.
    pub index: u32,
    /// The buffer and chunk, as the daemon named them.
    pub buffer: u64,
    pub chunk: u32,
    pub to: Location,
    pub site: Site,
    /// Its destination, once created.
    new: Option<Memory>,
    /// Whether its copy was queued (then it waits for the pass's synchronization).
    queued: bool,
    /// Whether the destination is mapped at the chunk's address.
    remapped: bool,
    /// The first error; `None` while the move goes on (and once it is done).
    error: Option<String>,
}

impl Move {
    /// The new memory now mapped at the chunk's address, if the move succeeded.
    pub fn moved_to(&self) -> Option<Memory> {
        self.new.filter(|_| self.error.is_none())
    }

    /// Why the move failed, if it did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn live(&self) -> bool {
        self.error.is_none()
    }

    fn fail(&mut self, error: String) {
        self.error.get_or_insert(error);
    }
}

/// A batch's moves in passes, and the moves refused before any started.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// One pass per direction, moves to host memory first.
    pub passes: Vec<Vec<Move>>,
    /// (index, why) of the moves refused: no such chunk, or a chunk named twice.
    pub refused: Vec<(u32, String)>,
}

/// Splits a batch into passes: each move resolved by `site`, the second move of one
/// chunk refused, a move to where the chunk already is left out (it is done).
pub(crate) fn plan(
    moves: &[ChunkMove],
    mut site: impl FnMut(u64, u32) -> Result<Site, String>,
) -> Plan {
    let mut plan = Plan::default();
    let mut seen = std::collections::BTreeSet::new();
    let mut passes: [Vec<Move>; 2] = [Vec::new(), Vec::new()];
    for (index, m) in (0u32..).zip(moves) {
        if !seen.insert((m.buffer, m.chunk)) {
            let why = format!(
                "chunk {} of buffer {} is moved twice in one batch",
                m.chunk, m.buffer
            );
            plan.refused.push((index, why));
            continue;
        }
        match site(m.buffer, m.chunk) {
            Err(why) => plan.refused.push((index, why)),
            Ok(site) if site.memory.location() == m.to => {}
            Ok(site) => passes[usize::from(m.to == Location::Vram)].push(Move {
                index,
                buffer: m.buffer,
                chunk: m.chunk,
                to: m.to,
                site,
                new: None,
                queued: false,
                remapped: false,
                error: None,
            }),
        }
    }
    plan.passes = passes.into_iter().filter(|p| !p.is_empty()).collect();
    plan
}

/// What the process keeps between moves: a stream per context.
#[derive(Default)]
pub(crate) struct Mover {
    /// (context, stream) pairs: the moves' copies run on their own streams.
    streams: Mutex<Vec<(usize, usize)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Mover {
    /// Runs one pass (every move to one location), timed from `start`; `batch`: a
    /// `RelocateBatch`'s pass, reported as such in the trace. Each move ends moved
    /// (`Move::moved_to`) or failed with its chunk where it was (`Move::error`).
    /// Returns when its last remap and copy were over (before the releases).
    pub fn run(&self, pass: &mut [Move], start: Instant, batch: bool) -> Instant {
        let Some(to) = pass.first().map(|m| m.to) else {
            return start;
        };
        let mut clock = PhaseClock::start();
        for m in pass.iter_mut() {
            create(m);
        }
        clock.lap(Phase::Create);
        if to == Location::Host {
            self.copy(pass);
            clock.lap(Phase::Copy);
            remap(pass);
            clock.lap(Phase::Remap);
        } else {
            remap(pass);
            clock.lap(Phase::Remap);
            self.copy(pass);
            pass.iter_mut().filter(|m| !m.live()).for_each(unremap);
            clock.lap(Phase::Copy);
        }
        let moved_at = Instant::now();
        for m in pass.iter_mut() {
            release(m);
        }
        clock.lap(Phase::Release);
        let moved: Vec<u64> = pass
            .iter()
            .filter(|m| m.moved_to().is_some())
            .map(|m| m.site.len)
            .collect();
        let bytes = moved.iter().sum();
        if !moved.is_empty() {
            lock(&MOVES).record(to, moved.len() as u64, bytes, &clock.ns);
        }
        if batch && bytes > 0 {
            let elapsed_ns = moved_at.duration_since(start).as_nanos() as u64;
            lock(&BATCHES).record(to, bytes, elapsed_ns);
        }
        moved_at
    }

    /// Queues every live move's copy (into host memory's window, or out of it into the
    /// chunk's address, remapped to VRAM) and waits once per stream.
    fn copy(&self, pass: &mut [Move]) {
        let mut used: Vec<(usize, Handle)> = Vec::new();
        for m in pass.iter_mut().filter(|m| m.live()) {
            // Into the destination's window before the remap, else out of the old
            // memory's window after it.
            let (dst, src) = match (m.new.and_then(|new| new.window()), m.site.memory.window()) {
                (Some(window), _) => (window, m.site.at),
                (None, Some(window)) => (m.site.at, window),
                (None, None) => {
                    m.fail("a move from VRAM to VRAM".into());
                    continue;
                }
            };
            let queued = driver::set_context(m.site.ctx as Handle)
                .and_then(|()| self.stream(m.site.ctx))
                .and_then(|stream| {
                    driver::copy_async(dst, src, m.site.len, stream)?;
                    Ok(stream)
                });
            match queued {
                Ok(stream) => {
                    m.queued = true;
                    if !used.iter().any(|&(ctx, _)| ctx == m.site.ctx) {
                        used.push((m.site.ctx, stream));
                    }
                }
                Err(e) => m.fail(e),
            }
        }
        for (ctx, stream) in used {
            let synced = driver::set_context(ctx as Handle)
                .and_then(|()| driver::synchronize_stream(stream));
            if let Err(e) = synced {
                let on_it = pass.iter_mut().filter(|m| m.queued && m.site.ctx == ctx);
                on_it.for_each(|m| m.fail(e.clone()));
            }
        }
    }

    /// Re-creates the chunk at `site` in exportable memory where it is (an IPC export,
    /// `ipc`): the new memory is copied into through its window and mapped at the
    /// chunk's address as a move's is, then the old memory let go. Returns the new
    /// memory; on failure the chunk keeps its old memory. The process must run nothing
    /// on the GPU meanwhile, as for a move.
    pub fn re_create(&self, site: Site) -> Result<Memory, String> {
        let mut pass = [Move {
            index: 0,
            buffer: 0,
            chunk: 0,
            to: site.memory.location(),
            site,
            new: None,
            queued: false,
            remapped: false,
            error: None,
        }];
        pass[0].new = Some(
            driver::set_context(site.ctx as Handle)
                .and_then(|()| Memory::exportable(site.len, site.memory))?,
        );
        self.copy(&mut pass);
        remap(&mut pass);
        let [mut m] = pass;
        release(&mut m);
        m.moved_to()
            .ok_or_else(|| m.error().unwrap_or("?").to_owned())
    }

    /// The moves' stream in `ctx` (current), created at its first move.
    fn stream(&self, ctx: usize) -> Result<Handle, String> {
        let mut streams = lock(&self.streams);
        if let Some(&(_, stream)) = streams.iter().find(|(c, _)| *c == ctx) {
            return Ok(stream as Handle);
        }
        let stream = driver::stream_create()?;
        streams.push((ctx, stream as usize));
        Ok(stream)
    }
}

/// The move's destination: host memory the pool kept ready, or new memory.
fn create(m: &mut Move) {
    let created = driver::set_context(m.site.ctx as Handle)
        .and_then(|()| Memory::take(m.site.len, m.to, m.site.ctx, true));
    match created {
        Ok(memory) => m.new = Some(memory),
        Err(e) => m.fail(e),
    }
}

/// Maps `to` at the chunk's address in place of `from`; on failure `from` goes back.
fn swap_mapping(m: &Move, from: Memory, to: Memory) -> Result<(), String> {
    let (at, len) = (m.site.at, m.site.len);
    driver::unmap(at, len)?;
    driver::map(at, len, to.handle()).inspect_err(|_| {
        let _ = driver::map(at, len, from.handle());
    })
}

/// Every live move's chunk address mapped to its new memory: an unmap and a map per
/// chunk, the access granted once per run of adjacent chunks of a buffer. A move whose
/// mapping fails gets its old memory back.
fn remap(pass: &mut [Move]) {
    let mut mapped = Vec::new();
    for (i, m) in pass.iter_mut().enumerate() {
        let Some(new) = m.new.filter(|_| m.live()) else {
            continue;
        };
        let (at, len, old) = (m.site.at, m.site.len, m.site.memory);
        let swapped = driver::unmap(at, len).and_then(|()| {
            driver::map_only(at, len, new.handle()).inspect_err(|_| {
                let _ = driver::map(at, len, old.handle());
            })
        });
        match swapped {
            Ok(()) => {
                m.remapped = true;
                mapped.push(i);
            }
            Err(e) => m.fail(e),
        }
    }
    let mut spans: Vec<Span> = mapped
        .into_iter()
        .map(|i| Span {
            index: i,
            buffer: pass[i].buffer,
            at: pass[i].site.at,
            len: pass[i].site.len,
        })
        .collect();
    spans.sort_by_key(|s| s.at);
    for run in adjacent_runs(&spans) {
        let (first, last) = (run[0], run[run.len() - 1]);
        if let Err(e) = driver::set_access(first.at, last.at + last.len - first.at) {
            for s in run {
                pass[s.index].fail(e.clone());
                unremap(&mut pass[s.index]);
            }
        }
    }
}

/// A remapped chunk: its move's index in the pass, its buffer, address and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    index: usize,
    buffer: u64,
    at: DevPtr,
    len: u64,
}

/// `spans`, sorted by address, cut where the buffer changes or the next chunk does not
/// start where the last ends.
fn adjacent_runs(spans: &[Span]) -> impl Iterator<Item = &[Span]> {
    spans.chunk_by(|a, b| a.buffer == b.buffer && a.at + a.len == b.at)
}

/// A failed move to VRAM that was remapped: its host memory, which still has the data,
/// back at the chunk's address.
fn unremap(m: &mut Move) {
    let Some(new) = m.new.filter(|_| m.remapped) else {
        return;
    };
    match swap_mapping(m, new, m.site.memory) {
        Ok(()) => m.remapped = false,
        Err(e) => diag::die(&format!(
            "a chunk's data could not be mapped back at its address after a failed move \
             ({e}); the program cannot go on"
        )),
    }
}

/// Lets go of what the move no longer maps: the old memory of a move that succeeded, the
/// new memory of one that failed.
fn release(m: &mut Move) {
    let done = match m.moved_to() {
        Some(_) => m.site.memory,
        None => match m.new.take() {
            Some(new) => new,
            None => return,
        },
    };
    if let Err(e) = done.let_go() {
        // The chunk lives where the move left it, whatever the release says.
        diag::warn(&format!("releasing a moved chunk's memory: {e}"));
    }
}

/// The steps of a pass, in order.
#[derive(Clone, Copy)]
enum Phase {
    /// Making the buffers' contexts current, then `cuMemCreate` of the new memory (for
    /// host memory, mapped at its window; or memory the pool kept ready).
    Create,
    /// Queueing the copies and waiting for them (and, moving to VRAM, putting the host
    /// memory of failed copies back).
    Copy,
    /// The chunks' addresses unmapped and mapped to the new memory.
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

/// Times the phases of one pass.
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
/// (`GPUSWAP_TRACE=1`). A pass's phase is shared by its chunks.
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
    fn record(&mut self, to: Location, chunks: u64, bytes: u64, phase_ns: &PhaseNs) {
        diag::add_report(diag::Report::Moves, move_report);
        let d = to as usize;
        self.chunks[d] += chunks;
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

/// The bulk moves' passes, per direction: (bytes, ns from the command's arrival, or the
/// pass's start for a batch's second pass, to its last remap).
struct BatchTimes {
    passes: [Vec<(u64, u64)>; 2],
}

static BATCHES: Mutex<BatchTimes> = Mutex::new(BatchTimes {
    passes: [Vec::new(), Vec::new()],
});

impl BatchTimes {
    fn record(&mut self, to: Location, bytes: u64, elapsed_ns: u64) {
        diag::add_report(diag::Report::Batches, batch_report);
        self.passes[to as usize].push((bytes, elapsed_ns.max(1)));
    }
}

/// Count, bytes and GB/s (min, median, max) of the bulk moves per direction, for the
/// trace; `None` before any.
fn batch_report() -> Option<String> {
    let batches = lock(&BATCHES);
    let lines: Vec<String> = [Location::Vram, Location::Host]
        .into_iter()
        .filter_map(|to| summary(to, &batches.passes[to as usize]))
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// One direction's line of the batch report.
fn summary(to: Location, passes: &[(u64, u64)]) -> Option<String> {
    let mut gb_per_s: Vec<f64> = passes
        .iter()
        .map(|&(bytes, ns)| bytes as f64 / ns as f64)
        .collect();
    gb_per_s.sort_by(f64::total_cmp);
    let (min, max) = (*gb_per_s.first()?, *gb_per_s.last()?);
    let n = gb_per_s.len();
    let median = if n % 2 == 1 {
        gb_per_s[n / 2]
    } else {
        (gb_per_s[n / 2 - 1] + gb_per_s[n / 2]) / 2.0
    };
    let bytes: u64 = passes.iter().map(|p| p.0).sum();
    Some(format!(
        "batches to {to:?}: {n}, {bytes} bytes; GB/s per batch: min {min:.2}, median \
         {median:.2}, max {max:.2}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn mv(buffer: u64, chunk: u32, to: Location) -> ChunkMove {
        ChunkMove { buffer, chunk, to }
    }

    /// Buffers 1 and 2 of four 2 MiB chunks each, the last of buffer 2 shorter; chunks
    /// 0 and 1 in VRAM, 2 and 3 in host memory.
    fn site(buffer: u64, chunk: u32) -> Result<Site, String> {
        if !(1..=2).contains(&buffer) || chunk >= 4 {
            return Err(format!("buffer {buffer} has no chunk {chunk}"));
        }
        let len = if buffer == 2 && chunk == 3 {
            MIB
        } else {
            2 * MIB
        };
        let at = (buffer << 32) | (u64::from(chunk) * 2 * MIB);
        let handle = buffer * 100 + u64::from(chunk);
        let memory = if chunk < 2 {
            Memory::Vram(handle)
        } else {
            Memory::Host(HostChunk {
                handle,
                window: at + (1 << 40),
                len,
                device: 0,
            })
        };
        Ok(Site {
            ctx: 7,
            at,
            len,
            memory,
        })
    }

    fn indices(pass: &[Move]) -> Vec<u32> {
        pass.iter().map(|m| m.index).collect()
    }

    #[test]
    fn moves_to_host_go_first_and_moves_to_where_a_chunk_is_are_done() {
        let moves = [
            mv(1, 2, Location::Vram),
            mv(2, 0, Location::Host),
            mv(1, 1, Location::Host),
            mv(2, 3, Location::Vram),
            mv(1, 0, Location::Vram),
            mv(2, 2, Location::Host),
        ];
        let plan = plan(&moves, site);
        assert!(plan.refused.is_empty());
        let passes: Vec<Vec<u32>> = plan.passes.iter().map(|p| indices(p)).collect();
        // 4 and 5 are where the daemon wants them already: nothing to do, nothing failed.
        assert_eq!(passes, [vec![1, 2], vec![0, 3]]);
        assert!(plan.passes[0].iter().all(|m| m.to == Location::Host));
        let first = &plan.passes[0][0];
        assert_eq!((first.buffer, first.chunk), (2, 0));
        assert_eq!(first.site, site(2, 0).unwrap());
    }

    #[test]
    fn unknown_chunks_and_second_moves_of_a_chunk_are_refused_and_the_rest_planned() {
        let moves = [
            mv(1, 0, Location::Host),
            mv(9, 0, Location::Host),
            mv(1, 0, Location::Vram),
            mv(1, 4, Location::Host),
            mv(2, 1, Location::Host),
        ];
        let plan = plan(&moves, site);
        let refused: Vec<u32> = plan.refused.iter().map(|r| r.0).collect();
        assert_eq!(refused, [1, 2, 3]);
        assert!(
            plan.refused[1].1.contains("moved twice"),
            "{:?}",
            plan.refused
        );
        assert!(plan.refused[0].1.contains("buffer 9"), "{:?}", plan.refused);
        assert_eq!(plan.passes.len(), 1);
        assert_eq!(indices(&plan.passes[0]), [0, 4]);
        assert!(
            plan.passes[0]
                .iter()
                .all(|m| m.moved_to().is_none() && m.error().is_none())
        );
    }

    #[test]
    fn an_empty_batch_has_no_pass() {
        let plan = plan(&[], site);
        assert!(plan.passes.is_empty() && plan.refused.is_empty());
    }

    #[test]
    fn a_failed_move_keeps_its_first_error() {
        let mut plan = plan(&[mv(1, 0, Location::Host)], site);
        let m = &mut plan.passes[0][0];
        let host = site(1, 2).unwrap().memory;
        m.new = Some(host);
        assert_eq!(m.moved_to(), Some(host));
        m.fail("first".into());
        m.fail("second".into());
        assert_eq!((m.moved_to(), m.error()), (None, Some("first")));
    }

    #[test]
    fn access_is_granted_per_run_of_adjacent_chunks_of_one_buffer() {
        let span = |index, buffer, at, len| Span {
            index,
            buffer,
            at,
            len,
        };
        // Chunks 0-1 of buffer 1, then a gap, chunk 3; buffer 2 starts where buffer 1's
        // chunk 3 ends but is another reservation.
        let spans = [
            span(4, 1, 0, 2 * MIB),
            span(0, 1, 2 * MIB, 2 * MIB),
            span(1, 1, 6 * MIB, 2 * MIB),
            span(2, 2, 8 * MIB, MIB),
            span(3, 2, 9 * MIB, 2 * MIB),
        ];
        let runs: Vec<Vec<usize>> = adjacent_runs(&spans)
            .map(|run| run.iter().map(|s| s.index).collect())
            .collect();
        assert_eq!(runs, [vec![4, 0], vec![1], vec![2, 3]]);
    }

    #[test]
    fn only_host_memory_has_a_window() {
        let host = site(2, 3).unwrap();
        assert_eq!(host.memory.window(), Some(host.at + (1 << 40)));
        assert_eq!(host.memory.location(), Location::Host);
        let vram = site(2, 0).unwrap().memory;
        assert_eq!((vram.window(), vram.handle()), (None, 200));
    }

    #[test]
    fn the_batch_summary_gives_min_median_and_max_per_batch() {
        // 2 GB in 1 s, 1 GB in 1 s, 3 GB in 0.5 s: 2, 1 and 6 GB/s.
        let passes = [
            (2_000_000_000, 1_000_000_000),
            (1_000_000_000, 1_000_000_000),
            (3_000_000_000, 500_000_000),
        ];
        assert_eq!(
            summary(Location::Host, &passes).unwrap(),
            "batches to Host: 3, 6000000000 bytes; GB/s per batch: min 1.00, median 2.00, \
             max 6.00"
        );
        let even = summary(Location::Vram, &passes[..2]).unwrap();
        assert!(even.contains("median 1.50"), "{even}");
        assert_eq!(summary(Location::Vram, &[]), None);
    }
}
