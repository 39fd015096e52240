//! PyTorch CUDA caching-allocator snapshots (`torch.cuda.memory._dump_snapshot`) as
//! tenant programs.
//!
//! A snapshot is a pickle of plain Python types: a dict with `segments` (the memory the
//! allocator holds at the dump, each with its `blocks`) and `device_traces` (per device,
//! the allocator's recorded events: `alloc`, `free_requested`, `free_completed`,
//! `segment_alloc`, `segment_free`, `segment_map`, `segment_unmap`, `oom`, `snapshot`,
//! each with `addr`, `size`, `stream` and, since PyTorch 2.1, `time_us`). It is read as
//! data: a pickle that names any Python global (a class, a function: code to run) is
//! refused ([`super::pickle_scan`]).
//!
//! How a trace becomes a program (the assumptions, each a choice of ours):
//! - The driver sees segments, not blocks: a `segment_alloc` (or `segment_map`) is a
//!   `cudaMalloc` of its size, a `segment_free` (`segment_unmap`) its `cudaFree`.
//!   Segments the dump holds that the trace never allocated, and segments the trace
//!   frees without having allocated them, existed before recording began: they are
//!   allocated at the start.
//! - Blocks (`alloc` to `free_requested`) are the tensors in use. Between two events the
//!   program does the GPU work of that interval: one kernel, launched asynchronously,
//!   reading the live blocks' byte ranges (in proportion to their bytes, one instruction per 4
//!   bytes), then the host waits the interval (`time_us`). The snapshot does not record
//!   how much the kernels read; the kernel reads what `bytes_per_us` (a share of the
//!   device's VRAM bandwidth, chosen by the scenario) gives over the interval, so that
//!   alone the program takes the recorded time, and only a slower memory (faults,
//!   remote reads, evictions) makes it slower. Without `time_us`, each event is
//!   followed by a kernel reading every live block once, and no wait.
//! - `oom`, `snapshot` and unknown actions change nothing; frames are ignored. Of several
//!   devices, the first whose trace has events is replayed, with its segments only.
//! - A snapshot without trace events is a static footprint: its segments are allocated,
//!   one kernel reads their active blocks, and they are freed.
//! - With expandable segments, a block may lie across adjacent mappings and an unmap may
//!   span several; an unmap that cuts a mapping in two is refused.

use std::collections::BTreeMap;

use thiserror::Error;

use super::pickle_scan::{self, ContainerId, Pickle, Refusal, Value};
use crate::program::{Access, Distribution, Kernel, Op, Program, Slot, WeightedRange};

/// A pickle that names Python code is refused with this.
const CODE: &str = "the pickle names Python code (a class, a function or a call); a memory snapshot holds plain data only";

/// The most bytes one replayed kernel reads: an interval of about 13 days at 1 TB/s.
/// A longer recorded interval (a clock jump, a process left idle) still waits its time,
/// but the sums of bytes the simulator takes over a kernel's accesses must not overflow.
const MAX_KERNEL_BYTES: u64 = 1 << 60;

/// What is wrong with a snapshot.
#[derive(Debug, Error, PartialEq)]
pub enum SnapshotError {
    /// Not a pickle this reader accepts (malformed, truncated, or with code references).
    #[error("not a readable pickle: {0}")]
    Pickle(String),
    /// A field is missing or of the wrong type.
    #[error("{path}: expected {expected}")]
    Field {
        /// Where, as a Python subscript path (`device_traces[0][3].size`).
        path: String,
        /// What was expected there.
        expected: String,
    },
    /// The events do not describe memory the allocator could have held.
    #[error("device_traces[{device}][{event}]: {message}")]
    Inconsistent {
        /// The device replayed.
        device: usize,
        /// The event's index in that device's trace.
        event: usize,
        /// What is wrong.
        message: String,
    },
}

/// One allocator event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// What happened.
    pub action: Action,
    /// The block's or segment's address.
    pub addr: u64,
    /// Its size in bytes.
    pub size: u64,
    /// When, in microseconds, if recorded.
    pub time_us: Option<u64>,
}

/// The allocator actions a replay distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A block is handed to a tensor.
    Alloc,
    /// The tensor is freed; its stream work may still use the block.
    FreeRequested,
    /// The block is back in the allocator's cache.
    FreeCompleted,
    /// A segment is allocated from the driver (`segment_alloc`, `segment_map`).
    SegmentAlloc,
    /// A segment is returned to the driver (`segment_free`, `segment_unmap`).
    SegmentFree,
    /// Anything else (`oom`, `snapshot`, actions of later PyTorch versions).
    Other,
}

/// A segment the allocator held at the dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The device it is on.
    pub device: u64,
    /// Its address.
    pub address: u64,
    /// Its size in bytes.
    pub total_size: u64,
    /// Its blocks in use by tensors at the dump: offset in the segment and length.
    pub active: Vec<(u64, u64)>,
}

/// A parsed snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The replayed device's segments at the dump.
    pub segments: Vec<Segment>,
    /// The replayed device: its index in `device_traces`, or, with no events, the device
    /// of the dump's first segment.
    pub device: usize,
    /// Its events, in order.
    pub trace: Vec<TraceEvent>,
}

fn field(path: &str, expected: &str) -> SnapshotError {
    SnapshotError::Field {
        path: path.into(),
        expected: expected.into(),
    }
}

/// A dict of the pickle, for reading its entries with their paths.
#[derive(Clone, Copy)]
struct Dict<'a> {
    pickle: &'a Pickle,
    id: ContainerId,
}

/// Reads values of a pickle, naming each by its path when it is not what it should be.
#[derive(Clone, Copy)]
struct Reader<'a> {
    pickle: &'a Pickle,
}

impl<'a> Reader<'a> {
    fn dict(self, v: &Value, path: &str) -> Result<Dict<'a>, SnapshotError> {
        match v {
            Value::Dict(id) => Ok(Dict {
                pickle: self.pickle,
                id: *id,
            }),
            _ => Err(field(path, "a dict")),
        }
    }

    fn list(self, v: &Value, path: &str) -> Result<&'a [Value], SnapshotError> {
        match v {
            Value::List(id) => Ok(self.pickle.list(*id)),
            _ => Err(field(path, "a list")),
        }
    }
}

fn as_u64(v: &Value, path: &str) -> Result<u64, SnapshotError> {
    match v {
        Value::Int(n) => u64::try_from(*n).map_err(|_| {
            field(
                path,
                if *n < 0 {
                    "a non-negative integer"
                } else {
                    "an integer below 2^64"
                },
            )
        }),
        Value::BigInt => Err(field(path, "an integer below 2^64")),
        _ => Err(field(path, "an integer")),
    }
}

fn as_str<'v>(v: &'v Value, path: &str) -> Result<&'v str, SnapshotError> {
    match v {
        Value::Str(s) => Ok(s),
        Value::Bytes(b) => std::str::from_utf8(b).map_err(|_| field(path, "a UTF-8 string")),
        _ => Err(field(path, "a string")),
    }
}

impl<'a> Dict<'a> {
    /// The `key` entry, if there.
    fn get(self, key: &str) -> Option<&'a Value> {
        self.pickle.get(self.id, key)
    }

    /// The `key` entry of this dict at `path`, required.
    fn required(self, path: &str, key: &str) -> Result<&'a Value, SnapshotError> {
        self.get(key)
            .ok_or_else(|| field(&format!("{path}.{key}"), "a value (the key is missing)"))
    }

    /// The whole number `key` of this dict at `path`, required.
    fn required_u64(self, path: &str, key: &str) -> Result<u64, SnapshotError> {
        as_u64(self.required(path, key)?, &format!("{path}.{key}"))
    }

    /// The whole number `key` of this dict at `path`, if there.
    fn optional_u64(self, path: &str, key: &str) -> Result<Option<u64>, SnapshotError> {
        self.get(key)
            .map(|v| as_u64(v, &format!("{path}.{key}")))
            .transpose()
    }
}

/// A dumped segment's blocks in use (`active_allocated`, `active_pending_free`), as
/// offsets and lengths: blocks follow each other from the segment's start (their
/// `address`, where given, says so too). Without `blocks`, `allocated_size` from the
/// start.
fn active_blocks(
    reader: Reader,
    segment: Dict,
    path: &str,
    address: u64,
    total_size: u64,
) -> Result<Vec<(u64, u64)>, SnapshotError> {
    let Some(blocks) = segment.get("blocks") else {
        let allocated = segment.optional_u64(path, "allocated_size")?.unwrap_or(0);
        return Ok(vec![(0, allocated.min(total_size))]);
    };
    let mut active = Vec::new();
    let mut offset = 0u64;
    for (j, b) in reader
        .list(blocks, &format!("{path}.blocks"))?
        .iter()
        .enumerate()
    {
        let bpath = format!("{path}.blocks[{j}]");
        let b = reader.dict(b, &bpath)?;
        let size = b.required_u64(&bpath, "size")?;
        if let Some(a) = b.optional_u64(&bpath, "address")? {
            offset = a.saturating_sub(address);
        }
        let state = match b.get("state") {
            Some(v) => as_str(v, &format!("{bpath}.state"))?,
            None => "active_allocated",
        };
        let len = size.min(total_size.saturating_sub(offset));
        if state.starts_with("active") && len > 0 {
            active.push((offset, len));
        }
        offset = offset.saturating_add(size);
    }
    Ok(active)
}

impl Action {
    fn parse(name: &str) -> Self {
        match name {
            "alloc" => Self::Alloc,
            "free_requested" => Self::FreeRequested,
            "free_completed" => Self::FreeCompleted,
            "segment_alloc" | "segment_map" => Self::SegmentAlloc,
            "segment_free" | "segment_unmap" => Self::SegmentFree,
            _ => Self::Other,
        }
    }
}

impl Snapshot {
    /// Reads a pickled snapshot. A pickle that names Python code is refused before
    /// anything is read ([`pickle_scan`]); objects the pickle shares (PyTorch shares
    /// stack frames between events) are read once, not copied.
    pub fn parse(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let pickle = pickle_scan::read(bytes).map_err(|refusal| {
            SnapshotError::Pickle(match refusal {
                Refusal::Code => CODE.into(),
                Refusal::Malformed { at, message } => format!("byte {at}: {message}"),
            })
        })?;
        let reader = Reader { pickle: &pickle };
        let top = reader.dict(&pickle.root, "snapshot")?;
        let mut segments = Vec::new();
        if let Some(list) = top.get("segments") {
            for (i, s) in reader.list(list, "segments")?.iter().enumerate() {
                let path = format!("segments[{i}]");
                let d = reader.dict(s, &path)?;
                let device = d.optional_u64(&path, "device")?.unwrap_or(0);
                let address = d.required_u64(&path, "address")?;
                let total_size = d.required_u64(&path, "total_size")?;
                segments.push(Segment {
                    device,
                    address,
                    total_size,
                    active: active_blocks(reader, d, &path, address, total_size)?,
                });
            }
        }
        let mut device = 0;
        let mut trace = Vec::new();
        if let Some(traces) = top.get("device_traces") {
            let traces = reader.list(traces, "device_traces")?;
            let chosen = traces
                .iter()
                .position(|t| matches!(t, Value::List(l) if !pickle.list(*l).is_empty()));
            if let Some(d) = chosen {
                device = d;
                for (i, e) in reader
                    .list(&traces[d], &format!("device_traces[{d}]"))?
                    .iter()
                    .enumerate()
                {
                    let path = format!("device_traces[{d}][{i}]");
                    let e = reader.dict(e, &path)?;
                    let action = as_str(e.required(&path, "action")?, &format!("{path}.action"))?;
                    trace.push(TraceEvent {
                        action: Action::parse(action),
                        addr: e.required_u64(&path, "addr")?,
                        size: e.required_u64(&path, "size")?,
                        time_us: e.optional_u64(&path, "time_us")?,
                    });
                }
            }
        }
        // Only the replayed device's memory: a device without events has its segments.
        if trace.is_empty() {
            device = segments.first().map_or(0, |s| s.device as usize);
        }
        segments.retain(|s| s.device == device as u64);
        if segments.is_empty() && trace.is_empty() {
            return Err(field(
                "snapshot",
                "a dict with segments or device_traces holding memory (torch.cuda.memory._snapshot()); this one records none",
            ));
        }
        Ok(Self {
            segments,
            device,
            trace,
        })
    }

    /// How the replay is timed: `"recorded"` when every event has its `time_us`, else
    /// `"invented: "` and why (a report says it, and a run warns).
    pub fn timing(&self) -> String {
        let untimed = self.trace.iter().filter(|e| e.time_us.is_none()).count();
        if self.trace.is_empty() {
            "invented: the snapshot has no trace events (a static footprint), so one kernel reads its active blocks once".into()
        } else if untimed == 0 {
            "recorded".into()
        } else {
            format!(
                "invented: {untimed} of {} events have no time_us (PyTorch before 2.1 records none), and each is followed by a kernel reading every live block once, with no wait",
                self.trace.len()
            )
        }
    }

    /// The first and last `time_us` of the trace, if any event has one.
    pub fn time_span_us(&self) -> Option<(u64, u64)> {
        let times = self.trace.iter().filter_map(|e| e.time_us);
        Some((times.clone().min()?, times.max()?))
    }

    /// The most memory the allocator held from the driver at once: over the trace when
    /// there is one (segments held before it began included), else at the dump.
    pub fn peak_reserved_bytes(&self) -> Result<u64, SnapshotError> {
        Ok(self.program(0.0)?.peak_allocated_bytes())
    }

    /// The program replaying the trace (or the static footprint), its kernels reading
    /// `bytes_per_us` of the live blocks over each recorded interval (see the module
    /// documentation).
    pub fn program(&self, bytes_per_us: f64) -> Result<Program, SnapshotError> {
        Replay::new(self, bytes_per_us).run()
    }
}

/// A segment live during the replay.
struct LiveSegment {
    end: u64,
    slot: Slot,
    /// Its bytes in use by tensors: offset in the segment to length.
    used: BTreeMap<u64, u64>,
    used_bytes: u64,
}

/// A live block: the pieces of segments it lies in (one, unless expandable segments'
/// adjacent mappings hold it), and whether a tensor uses it (until `free_requested`).
struct Block {
    /// Segment address, offset in it, length.
    pieces: Vec<(u64, u64, u64)>,
    used: bool,
}

/// The replay's state.
struct Replay<'a> {
    snapshot: &'a Snapshot,
    bytes_per_us: f64,
    program: Program,
    /// Before the measured phase: segments held before the trace began.
    setup: Vec<Op>,
    /// Live segments by address.
    segments: BTreeMap<u64, LiveSegment>,
    /// Live blocks by address.
    blocks: BTreeMap<u64, Block>,
    steps: usize,
}

impl<'a> Replay<'a> {
    fn new(snapshot: &'a Snapshot, bytes_per_us: f64) -> Self {
        Self {
            snapshot,
            bytes_per_us,
            program: Program::default(),
            setup: Vec::new(),
            segments: BTreeMap::new(),
            blocks: BTreeMap::new(),
            steps: 0,
        }
    }

    fn error(&self, event: usize, message: String) -> SnapshotError {
        SnapshotError::Inconsistent {
            device: self.snapshot.device,
            event,
            message,
        }
    }

    /// Adds a segment at `addr`; `early`: held before the trace began.
    fn add_segment(&mut self, addr: u64, size: u64, early: bool) -> Op {
        let label = format!("segment@{addr:#x}");
        let slot = self.program.buffer(label, size.max(1));
        self.segments.insert(
            addr,
            LiveSegment {
                end: addr.saturating_add(size),
                slot,
                used: BTreeMap::new(),
                used_bytes: 0,
            },
        );
        if early {
            self.setup.push(Op::Alloc(slot));
        }
        Op::Alloc(slot)
    }

    /// The live segment holding byte `addr`.
    fn segment_at(&self, addr: u64) -> Option<u64> {
        let (&start, s) = self.segments.range(..=addr).next_back()?;
        (addr < s.end).then_some(start)
    }

    /// Whether `[addr, addr + size)` overlaps a live segment.
    fn overlaps(&self, addr: u64, size: u64) -> bool {
        self.segments
            .range(..addr.saturating_add(size.max(1)))
            .next_back()
            .is_some_and(|(_, s)| s.end > addr)
    }

    /// Marks a block's pieces used (`true`) or free in their segments.
    fn mark(&mut self, pieces: &[(u64, u64, u64)], used: bool) {
        for &(seg, offset, len) in pieces {
            if let Some(s) = self.segments.get_mut(&seg) {
                if used {
                    s.used.insert(offset, len);
                    s.used_bytes += len;
                } else if s.used.remove(&offset).is_some() {
                    s.used_bytes -= len;
                }
            }
        }
    }

    /// The GPU work of an interval of `interval_us` (unknown: `None`): one kernel
    /// reading the live blocks, each in proportion to its bytes.
    fn step(&mut self, interval_us: Option<u64>, ops: &mut Vec<Op>) {
        let live: u64 = self.segments.values().map(|s| s.used_bytes).sum();
        // Each live byte is read `passes` times: once without a recorded interval.
        let passes = match interval_us {
            Some(us) if live > 0 => {
                (self.bytes_per_us * us as f64).min(MAX_KERNEL_BYTES as f64) / live as f64
            }
            _ => 1.0,
        };
        let accesses: Vec<Access> = self
            .segments
            .values()
            .filter(|s| s.used_bytes > 0)
            .map(|s| {
                // Adjacent blocks read as one range (each byte weighs the same): a
                // trace's kernels hold one range per run of live blocks, not per block.
                let mut ranges: Vec<WeightedRange> = Vec::new();
                for (&offset_bytes, &bytes) in &s.used {
                    match ranges.last_mut() {
                        Some(r) if r.offset_bytes + r.bytes == offset_bytes => {
                            r.bytes += bytes;
                            r.weight = r.bytes as f64;
                        }
                        _ => ranges.push(WeightedRange {
                            offset_bytes,
                            bytes,
                            weight: bytes as f64,
                        }),
                    }
                }
                Access {
                    distribution: Distribution::Ranges(ranges),
                    ..Access::uniform(s.slot, (s.used_bytes as f64 * passes).round() as u64, 0)
                }
            })
            .filter(|a| a.read_bytes > 0)
            .collect();
        if accesses.is_empty() {
            return;
        }
        let bytes: u64 = accesses.iter().map(|a| a.read_bytes).sum();
        self.steps += 1;
        ops.push(Op::Launch(Kernel {
            name: format!("step{}", self.steps),
            ops: bytes / 4,
            accesses,
            phases: Vec::new(),
            outer_loop: Default::default(),
        }));
    }

    fn run(mut self) -> Result<Program, SnapshotError> {
        let trace = &self.snapshot.trace;
        let mut ops = Vec::new();
        if trace.is_empty() {
            // A static footprint: the dump's segments, their active blocks read once.
            for s in &self.snapshot.segments {
                let op = self.add_segment(s.address, s.total_size, false);
                ops.push(op);
                let pieces: Vec<_> = s.active.iter().map(|&(o, l)| (s.address, o, l)).collect();
                self.mark(&pieces, true);
            }
            self.step(None, &mut ops);
        } else {
            // Segments held before recording began: at the dump and never allocated in the
            // trace, or freed by the trace before it allocates them.
            let mut allocated = std::collections::HashSet::new();
            for e in trace {
                match e.action {
                    Action::SegmentAlloc => {
                        allocated.insert(e.addr);
                    }
                    Action::SegmentFree if !allocated.contains(&e.addr) => {
                        allocated.insert(e.addr);
                        if !self.overlaps(e.addr, e.size) {
                            self.add_segment(e.addr, e.size, true);
                        }
                    }
                    _ => {}
                }
            }
            for s in &self.snapshot.segments {
                if !allocated.contains(&s.address) && !self.overlaps(s.address, s.total_size) {
                    self.add_segment(s.address, s.total_size, true);
                }
            }
            let mut last_us: Option<u64> = None;
            for (i, e) in trace.iter().enumerate() {
                match (last_us, e.time_us) {
                    (Some(last), Some(now)) if now > last => {
                        self.step(Some(now - last), &mut ops);
                        ops.push(Op::Cpu {
                            ns: (now - last).saturating_mul(1000),
                        });
                    }
                    // No time passed (or the clock went back): no work.
                    (Some(_), Some(_)) => {}
                    _ if i > 0 => self.step(None, &mut ops),
                    _ => {}
                }
                last_us = match (last_us, e.time_us) {
                    (Some(last), Some(now)) => Some(last.max(now)),
                    (last, now) => now.or(last),
                };
                self.event(i, e, &mut ops)?;
            }
        }
        ops.push(Op::Sync);
        ops.push(Op::PhaseEnd);
        let left: Vec<Slot> = self.segments.values().map(|s| s.slot).collect();
        ops.extend(left.into_iter().map(Op::Free));
        let mut all = std::mem::take(&mut self.setup);
        all.push(Op::PhaseStart);
        all.append(&mut ops);
        self.program.ops = all;
        Ok(self.program)
    }

    fn event(&mut self, i: usize, e: &TraceEvent, ops: &mut Vec<Op>) -> Result<(), SnapshotError> {
        match e.action {
            Action::SegmentAlloc => {
                if self.overlaps(e.addr, e.size) {
                    return Err(self.error(
                        i,
                        format!(
                            "segment of {} bytes at {:#x} overlaps a live segment",
                            e.size, e.addr
                        ),
                    ));
                }
                let op = self.add_segment(e.addr, e.size, false);
                ops.push(op);
            }
            Action::SegmentFree => self.free_segments(i, e, ops)?,
            Action::Alloc => {
                // Expandable segments map adjacent ranges: a block may span several.
                let end = e.addr.saturating_add(e.size);
                let mut pieces = Vec::new();
                let mut at = e.addr;
                while at < end {
                    let Some(seg) = self.segment_at(at) else {
                        return Err(self.error(
                            i,
                            format!(
                                "alloc of {} bytes at {:#x} lies in no live segment at {at:#x} (did recording start after the segment was allocated?)",
                                e.size, e.addr
                            ),
                        ));
                    };
                    let len = self.segments[&seg].end.min(end) - at;
                    pieces.push((seg, at - seg, len));
                    at += len;
                }
                self.mark(&pieces, true);
                if let Some(old) = self.blocks.insert(e.addr, Block { pieces, used: true })
                    && old.used
                {
                    self.mark(&old.pieces, false);
                }
            }
            Action::FreeRequested | Action::FreeCompleted => {
                let pieces = match self.blocks.get_mut(&e.addr) {
                    Some(b) if b.used => {
                        b.used = false;
                        Some(b.pieces.clone())
                    }
                    _ => None,
                };
                if let Some(pieces) = pieces {
                    self.mark(&pieces, false);
                }
                if e.action == Action::FreeCompleted {
                    self.blocks.remove(&e.addr);
                }
            }
            Action::Other => {}
        }
        Ok(())
    }

    /// `segment_free` (or `segment_unmap`, which may span several adjacent mappings):
    /// the segments wholly inside `[addr, addr + size)` go; one cut in two is refused.
    fn free_segments(
        &mut self,
        i: usize,
        e: &TraceEvent,
        ops: &mut Vec<Op>,
    ) -> Result<(), SnapshotError> {
        let end = e.addr.saturating_add(e.size.max(1));
        let freed: Vec<u64> = self
            .segments
            .range(e.addr..end)
            .map(|(&start, _)| start)
            .collect();
        if freed.first() != Some(&e.addr) {
            return Err(self.error(
                i,
                format!(
                    "segment_free at {:#x}: no live segment starts there",
                    e.addr
                ),
            ));
        }
        if let Some(cut) = self
            .segment_at(end - 1)
            .filter(|&s| self.segments[&s].end > end && e.size > 0)
        {
            return Err(self.error(
                i,
                format!(
                    "unmap of [{:#x}, {end:#x}) cuts the mapping at {cut:#x} in two; partial unmaps are not replayed",
                    e.addr
                ),
            ));
        }
        for start in freed {
            let s = self.segments.remove(&start).expect("listed");
            ops.push(Op::Free(s.slot));
        }
        // Blocks in freed segments lose those pieces; a block with none left is gone.
        let segments = &self.segments;
        self.blocks.retain(|_, b| {
            b.pieces.retain(|p| segments.contains_key(&p.0));
            !b.pieces.is_empty()
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
