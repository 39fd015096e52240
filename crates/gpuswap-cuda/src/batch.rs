//! Chunk moves, one or many at a time. A move copies a chunk into new memory at its
//! destination and maps that memory at the chunk's unchanged address, so the program's
//! pointers stay valid. The daemon's per-chunk `Relocate` is a batch of one; its
//! `RelocateBatch` runs the same steps with every move's copy in flight together:
//!
//! 1. **create**: the destination of every move (host memory from the pool when it has
//!    some ready);
//! 2. **copy**: each destination mapped at its own place in one scratch range, every copy
//!    queued on the context's stream, one synchronization for the lot, the scratch
//!    unmapped;
//! 3. **remap**: each chunk's address unmapped and mapped to its new memory;
//! 4. **release**: the old memory released, or kept for the next eviction when it is host
//!    memory and the pool has room.
//!
//! A move that fails leaves its chunk where it was and releases what it made; the others
//! go on. Moves to host memory run before moves to VRAM, each direction a pass of its
//! own: the VRAM that the first frees is there for the second.

use std::sync::Mutex;
use std::time::Instant;

use gpuswap_wire::{ChunkMove, Location};

use crate::diag;
use crate::ffi::{self, DevPtr, Handle, driver};
use crate::host_pool;

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
    pub handle: u64,
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
    /// Where its destination is mapped in the pass's scratch range.
    scratch_offset: u64,
    /// Its destination, once created.
    new: Option<u64>,
    /// Whether its copy was queued (then it waits for the pass's synchronization).
    queued: bool,
    /// The first error; `None` while the move goes on (and once it is done).
    error: Option<String>,
}

impl Move {
    /// The new memory now mapped at the chunk's address, if the move succeeded.
    pub fn moved_to(&self) -> Option<u64> {
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
/// chunk refused, the passes' scratch offsets laid out end to end.
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
            Ok(site) => {
                let pass = &mut passes[usize::from(m.to == Location::Vram)];
                let scratch_offset = pass
                    .last()
                    .map_or(0, |p: &Move| p.scratch_offset + p.site.len);
                pass.push(Move {
                    index,
                    buffer: m.buffer,
                    chunk: m.chunk,
                    to: m.to,
                    site,
                    scratch_offset,
                    new: None,
                    queued: false,
                    error: None,
                });
            }
        }
    }
    plan.passes = passes.into_iter().filter(|p| !p.is_empty()).collect();
    plan
}

/// The driver's kind of memory for a location.
pub(crate) fn memory_kind(location: Location) -> std::ffi::c_int {
    match location {
        Location::Vram => ffi::LOCATION_DEVICE,
        Location::Host => ffi::LOCATION_HOST,
    }
}

/// What the process keeps between moves: a scratch range and a stream per context.
pub(crate) struct Mover {
    granularity: u64,
    /// A scratch reservation, grown to the largest pass.
    scratch: Mutex<Option<(DevPtr, u64)>>,
    /// (context, stream) pairs: the moves' copies run on their own streams.
    streams: Mutex<Vec<(usize, usize)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Mover {
    pub fn new(granularity: u64) -> Self {
        Self {
            granularity,
            scratch: Mutex::new(None),
            streams: Mutex::new(Vec::new()),
        }
    }

    /// Runs one pass (every move to one location), timed from `start`; `batch`: a
    /// `RelocateBatch`'s pass, reported as such in the trace. Each move ends moved
    /// (`Move::moved_to`) or failed with its chunk where it was (`Move::error`).
    pub fn run(&self, pass: &mut [Move], start: Instant, batch: bool) {
        let Some(to) = pass.first().map(|m| m.to) else {
            return;
        };
        let mut clock = PhaseClock::start();
        for m in pass.iter_mut() {
            create(m);
        }
        clock.lap(Phase::Create);
        self.copy(pass);
        clock.lap(Phase::Copy);
        for m in pass.iter_mut().filter(|m| m.live()) {
            remap(m);
        }
        clock.lap(Phase::Remap);
        let elapsed_ns = start.elapsed().as_nanos() as u64;
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
            lock(&BATCHES).record(to, bytes, elapsed_ns);
        }
    }

    /// Maps every destination in the scratch range, queues the copies, waits once per
    /// stream, unmaps the scratch.
    fn copy(&self, pass: &mut [Move]) {
        let total = pass.iter().map(|m| m.scratch_offset + m.site.len).max();
        let scratch = match total.map(|bytes| self.scratch(bytes)) {
            Some(Ok(va)) => va,
            Some(Err(e)) => {
                pass.iter_mut().for_each(|m| m.fail(e.clone()));
                return;
            }
            None => return,
        };
        let mut mapped = Vec::new();
        for (i, m) in pass.iter_mut().enumerate() {
            let Some(new) = m.new.filter(|_| m.live()) else {
                continue;
            };
            match driver::map(scratch + m.scratch_offset, m.site.len, new) {
                Ok(()) => mapped.push(i),
                Err(e) => m.fail(e),
            }
        }
        let mut used: Vec<(usize, Handle)> = Vec::new();
        for &i in &mapped {
            let m = &mut pass[i];
            let queued = driver::set_context(m.site.ctx as Handle)
                .and_then(|()| self.stream(m.site.ctx))
                .and_then(|stream| {
                    driver::copy_async(scratch + m.scratch_offset, m.site.at, m.site.len, stream)?;
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
        for i in mapped {
            let m = &mut pass[i];
            if let Err(e) = driver::unmap(scratch + m.scratch_offset, m.site.len) {
                m.fail(e);
            }
        }
    }

    /// The scratch range, at least `bytes` long.
    fn scratch(&self, bytes: u64) -> Result<DevPtr, String> {
        let mut scratch = lock(&self.scratch);
        match *scratch {
            Some((va, len)) if len >= bytes => Ok(va),
            other => {
                if let Some((va, len)) = other {
                    driver::unreserve(va, len)?;
                    *scratch = None;
                }
                let va = driver::reserve(bytes, self.granularity)?;
                *scratch = Some((va, bytes));
                Ok(va)
            }
        }
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
    let len = m.site.len;
    let created = driver::set_context(m.site.ctx as Handle).and_then(|()| {
        let ready = match m.to {
            Location::Host => host_pool::take(len, m.site.ctx),
            Location::Vram => None,
        };
        match ready {
            Some(handle) => Ok(handle),
            None => driver::create(len, memory_kind(m.to)).map_err(|rc| {
                format!(
                    "cuMemCreate of {len} bytes in {:?} failed with CUDA error {rc}",
                    m.to
                )
            }),
        }
    });
    match created {
        Ok(handle) => m.new = Some(handle),
        Err(e) => m.fail(e),
    }
}

/// The chunk's address unmapped and mapped to the new memory; on failure the old memory
/// goes back (its data is still there).
fn remap(m: &mut Move) {
    let (at, len) = (m.site.at, m.site.len);
    let Some(new) = m.new else { return };
    let remapped = driver::unmap(at, len).and_then(|()| {
        driver::map(at, len, new).inspect_err(|_| {
            let _ = driver::map(at, len, m.site.handle);
        })
    });
    if let Err(e) = remapped {
        m.fail(e);
    }
}

/// Lets go of what the move no longer maps: the old memory of a move that succeeded, the
/// new memory of one that failed. Host memory is kept for the next eviction while the
/// pool has room.
fn release(m: &mut Move) {
    let (handle, location) = match m.moved_to() {
        Some(_) => (m.site.handle, other(m.to)),
        None => match m.new.take() {
            Some(new) => (new, m.to),
            None => return,
        },
    };
    let kept = location == Location::Host && host_pool::give(m.site.len, handle);
    if !kept && let Err(e) = driver::release(handle) {
        // The chunk lives where the move left it, whatever the release says.
        diag::warn(&format!("releasing a moved chunk's memory: {e}"));
    }
}

fn other(location: Location) -> Location {
    match location {
        Location::Vram => Location::Host,
        Location::Host => Location::Vram,
    }
}

/// The steps of a pass, in order.
#[derive(Clone, Copy)]
enum Phase {
    /// Making the buffers' contexts current, then `cuMemCreate` of the new memory (or,
    /// for host memory, a handle the pool kept ready).
    Create,
    /// Taking the scratch range (reserving it on the first move or a longer pass),
    /// mapping the new memory there, queueing the copies and waiting for them, the
    /// scratch unmapped.
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

    /// Buffers 1 and 2 of four 2 MiB chunks each, the last of buffer 2 shorter.
    fn site(buffer: u64, chunk: u32) -> Result<Site, String> {
        if !(1..=2).contains(&buffer) || chunk >= 4 {
            return Err(format!("buffer {buffer} has no chunk {chunk}"));
        }
        let len = if buffer == 2 && chunk == 3 {
            MIB
        } else {
            2 * MIB
        };
        Ok(Site {
            ctx: 7,
            at: (buffer << 32) | (u64::from(chunk) * 2 * MIB),
            len,
            handle: buffer * 100 + u64::from(chunk),
        })
    }

    #[test]
    fn moves_to_host_go_first_and_each_pass_lays_out_its_scratch_end_to_end() {
        let moves = [
            mv(1, 0, Location::Vram),
            mv(2, 3, Location::Host),
            mv(1, 1, Location::Host),
            mv(2, 0, Location::Vram),
        ];
        let plan = plan(&moves, site);
        assert!(plan.refused.is_empty());
        let shape: Vec<Vec<(u32, Location, u64)>> = plan
            .passes
            .iter()
            .map(|p| {
                p.iter()
                    .map(|m| (m.index, m.to, m.scratch_offset))
                    .collect()
            })
            .collect();
        assert_eq!(
            shape,
            [
                vec![(1, Location::Host, 0), (2, Location::Host, MIB)],
                vec![(0, Location::Vram, 0), (3, Location::Vram, 2 * MIB)],
            ]
        );
        let first = &plan.passes[0][0];
        assert_eq!((first.buffer, first.chunk), (2, 3));
        assert_eq!(first.site, site(2, 3).unwrap());
    }

    #[test]
    fn unknown_chunks_and_second_moves_of_a_chunk_are_refused_and_the_rest_planned() {
        let moves = [
            mv(1, 2, Location::Host),
            mv(9, 0, Location::Host),
            mv(1, 2, Location::Vram),
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
        let planned: Vec<u32> = plan.passes[0].iter().map(|m| m.index).collect();
        assert_eq!(planned, [0, 4]);
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
        m.new = Some(5);
        assert_eq!(m.moved_to(), Some(5));
        m.fail("first".into());
        m.fail("second".into());
        assert_eq!((m.moved_to(), m.error()), (None, Some("first")));
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
