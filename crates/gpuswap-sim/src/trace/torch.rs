//! PyTorch CUDA caching-allocator snapshots (`torch.cuda.memory._dump_snapshot`) as
//! tenant programs.
//!
//! A snapshot is a pickle of plain Python types: a dict with `segments` (the memory the
//! allocator holds at the dump, each with its `blocks`) and `device_traces` (per device,
//! the allocator's recorded events: `alloc`, `free_requested`, `free_completed`,
//! `segment_alloc`, `segment_free`, `segment_map`, `segment_unmap`, `oom`, `snapshot`,
//! each with `addr`, `size`, `stream` and, since PyTorch 2.1, `time_us`). It is read as
//! data: a pickle that names any Python global (a class, a function: code to run) is
//! refused.
//!
//! How a trace becomes a program (the assumptions, each a choice of ours):
//! - The driver sees segments, not blocks: a `segment_alloc` (or `segment_map`) is a
//!   `cudaMalloc` of its size, a `segment_free` (`segment_unmap`) its `cudaFree`.
//!   Segments the dump holds that the trace never allocated, and segments the trace
//!   frees without having allocated them, existed before recording began: they are
//!   allocated at the start.
//! - Blocks (`alloc` to `free_requested`) are the tensors in use. Between two events the
//!   program does the GPU work of that interval: one kernel, launched asynchronously,
//!   reading the live blocks (in proportion to their bytes, one instruction per 4
//!   bytes), then the host waits the interval (`time_us`). The snapshot does not record
//!   how much the kernels read; the kernel reads what `bytes_per_us` (a share of the
//!   device's VRAM bandwidth, chosen by the scenario) gives over the interval, so that
//!   alone the program takes the recorded time, and only a slower memory (faults,
//!   remote reads, evictions) makes it slower. Without `time_us`, each event is
//!   followed by a kernel reading every live block once, and no wait.
//! - `oom`, `snapshot` and unknown actions change nothing; frames are ignored. Of several
//!   devices, the first whose trace has events is replayed.
//! - A snapshot without trace events is a static footprint: its segments are allocated,
//!   one kernel reads their allocated blocks, and they are freed.

use std::collections::{BTreeMap, HashMap};

use serde_pickle::{DeOptions, HashableValue, Value};
use thiserror::Error;

use crate::program::{Access, Kernel, Op, Program, Slot};

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Its address.
    pub address: u64,
    /// Its size in bytes.
    pub total_size: u64,
    /// Bytes of its blocks in use by tensors.
    pub allocated_size: u64,
}

/// A parsed snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The segments at the dump (of every device).
    pub segments: Vec<Segment>,
    /// The replayed device's index in `device_traces`.
    pub device: usize,
    /// Its events, in order.
    pub trace: Vec<TraceEvent>,
}

/// The `key` entry of a pickled dict.
fn get<'a>(dict: &'a BTreeMap<HashableValue, Value>, key: &str) -> Option<&'a Value> {
    dict.get(&HashableValue::String(key.into()))
        .or_else(|| dict.get(&HashableValue::Bytes(key.as_bytes().to_vec())))
}

fn field(path: &str, expected: &str) -> SnapshotError {
    SnapshotError::Field {
        path: path.into(),
        expected: expected.into(),
    }
}

fn as_dict<'a>(
    v: &'a Value,
    path: &str,
) -> Result<&'a BTreeMap<HashableValue, Value>, SnapshotError> {
    match v {
        Value::Dict(d) => Ok(d),
        _ => Err(field(path, "a dict")),
    }
}

fn as_list<'a>(v: &'a Value, path: &str) -> Result<&'a [Value], SnapshotError> {
    match v {
        Value::List(l) | Value::Tuple(l) => Ok(l),
        _ => Err(field(path, "a list")),
    }
}

fn as_u64(v: &Value, path: &str) -> Result<u64, SnapshotError> {
    match v {
        Value::I64(n) => u64::try_from(*n).map_err(|_| field(path, "a non-negative integer")),
        Value::Int(n) => u64::try_from(n).map_err(|_| field(path, "an integer below 2^64")),
        _ => Err(field(path, "an integer")),
    }
}

fn as_str<'a>(v: &'a Value, path: &str) -> Result<&'a str, SnapshotError> {
    match v {
        Value::String(s) => Ok(s),
        Value::Bytes(b) => std::str::from_utf8(b).map_err(|_| field(path, "a UTF-8 string")),
        _ => Err(field(path, "a string")),
    }
}

/// The `key` entry of `dict` at `path`, required.
fn required<'a>(
    dict: &'a BTreeMap<HashableValue, Value>,
    path: &str,
    key: &str,
) -> Result<&'a Value, SnapshotError> {
    get(dict, key).ok_or_else(|| field(&format!("{path}.{key}"), "a value (the key is missing)"))
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
    /// Reads a pickled snapshot. Globals (code references) are refused.
    pub fn parse(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let value = serde_pickle::value_from_slice(bytes, DeOptions::new()).map_err(|e| {
            let text = e.to_string();
            SnapshotError::Pickle(if text.contains("unresolved global") {
                format!(
                    "{text}: the pickle names Python code (a class or function); a memory snapshot holds plain data only"
                )
            } else {
                text
            })
        })?;
        let top = as_dict(&value, "snapshot")?;
        let mut segments = Vec::new();
        if let Some(list) = get(top, "segments") {
            for (i, s) in as_list(list, "segments")?.iter().enumerate() {
                let path = format!("segments[{i}]");
                let d = as_dict(s, &path)?;
                segments.push(Segment {
                    address: as_u64(required(d, &path, "address")?, &format!("{path}.address"))?,
                    total_size: as_u64(
                        required(d, &path, "total_size")?,
                        &format!("{path}.total_size"),
                    )?,
                    allocated_size: match get(d, "allocated_size") {
                        Some(v) => as_u64(v, &format!("{path}.allocated_size"))?,
                        None => 0,
                    },
                });
            }
        }
        let mut device = 0;
        let mut trace = Vec::new();
        if let Some(traces) = get(top, "device_traces") {
            let traces = as_list(traces, "device_traces")?;
            let chosen = traces
                .iter()
                .position(|t| matches!(t, Value::List(l) if !l.is_empty()));
            if let Some(d) = chosen {
                device = d;
                for (i, e) in as_list(&traces[d], &format!("device_traces[{d}]"))?
                    .iter()
                    .enumerate()
                {
                    let path = format!("device_traces[{d}][{i}]");
                    let e = as_dict(e, &path)?;
                    let action = as_str(required(e, &path, "action")?, &format!("{path}.action"))?;
                    trace.push(TraceEvent {
                        action: Action::parse(action),
                        addr: as_u64(required(e, &path, "addr")?, &format!("{path}.addr"))?,
                        size: as_u64(required(e, &path, "size")?, &format!("{path}.size"))?,
                        time_us: match get(e, "time_us") {
                            Some(v) => Some(as_u64(v, &format!("{path}.time_us"))?),
                            None => None,
                        },
                    });
                }
            }
        }
        if get(top, "segments").is_none() && get(top, "device_traces").is_none() {
            return Err(field(
                "snapshot",
                "a dict with segments or device_traces (torch.cuda.memory._snapshot())",
            ));
        }
        Ok(Self {
            segments,
            device,
            trace,
        })
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
    /// Bytes of its blocks in use by tensors.
    used_bytes: u64,
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
    /// Live blocks by address: size, segment address, in use by a tensor.
    blocks: HashMap<u64, (u64, u64, bool)>,
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
            blocks: HashMap::new(),
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
                used_bytes: 0,
            },
        );
        if early {
            self.setup.push(Op::Alloc(slot));
        }
        Op::Alloc(slot)
    }

    /// The live segment holding `[addr, addr + size)`.
    fn segment_of(&self, addr: u64, size: u64) -> Option<u64> {
        let (&start, s) = self.segments.range(..=addr).next_back()?;
        (addr.saturating_add(size) <= s.end).then_some(start)
    }

    /// The GPU work of an interval of `interval_us` (unknown: `None`): one kernel
    /// reading the live blocks.
    fn step(&mut self, interval_us: Option<u64>, ops: &mut Vec<Op>) {
        let live: u64 = self.segments.values().map(|s| s.used_bytes).sum();
        // Each live byte is read `passes` times: once without a recorded interval.
        let passes = match interval_us {
            Some(us) if live > 0 => self.bytes_per_us * us as f64 / live as f64,
            _ => 1.0,
        };
        let accesses: Vec<Access> = self
            .segments
            .values()
            .filter(|s| s.used_bytes > 0)
            .map(|s| {
                let bytes = (s.used_bytes as f64 * passes).round() as u64;
                Access::uniform(s.slot, bytes, 0)
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
        }));
    }

    fn run(mut self) -> Result<Program, SnapshotError> {
        let trace = &self.snapshot.trace;
        let mut ops = Vec::new();
        if trace.is_empty() {
            // A static footprint: the dump's segments, read once.
            for s in &self.snapshot.segments {
                let op = self.add_segment(s.address, s.total_size, false);
                ops.push(op);
                let seg = self.segments.get_mut(&s.address).expect("just added");
                seg.used_bytes = s.allocated_size.min(s.total_size);
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
                        self.add_segment(e.addr, e.size, true);
                    }
                    _ => {}
                }
            }
            for s in &self.snapshot.segments {
                if !allocated.contains(&s.address) && !self.segments.contains_key(&s.address) {
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
                    // No time passed: no work.
                    (Some(_), Some(_)) => {}
                    _ if i > 0 => self.step(None, &mut ops),
                    _ => {}
                }
                last_us = e.time_us.or(last_us);
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
                if self.segment_of(e.addr, 1).is_some() {
                    return Err(self.error(
                        i,
                        format!("segment at {:#x} overlaps a live segment", e.addr),
                    ));
                }
                let op = self.add_segment(e.addr, e.size, false);
                ops.push(op);
            }
            Action::SegmentFree => {
                let Some(s) = self.segments.remove(&e.addr) else {
                    return Err(self.error(
                        i,
                        format!(
                            "segment_free at {:#x}: no live segment starts there",
                            e.addr
                        ),
                    ));
                };
                self.blocks.retain(|_, b| b.1 != e.addr);
                ops.push(Op::Free(s.slot));
            }
            Action::Alloc => {
                let Some(seg) = self.segment_of(e.addr, e.size) else {
                    return Err(self.error(
                        i,
                        format!(
                            "alloc of {} bytes at {:#x} lies in no live segment (did recording start after the segment was allocated?)",
                            e.size, e.addr
                        ),
                    ));
                };
                self.blocks.insert(e.addr, (e.size, seg, true));
                self.segments.get_mut(&seg).expect("live").used_bytes += e.size;
            }
            Action::FreeRequested | Action::FreeCompleted => {
                let done = e.action == Action::FreeCompleted;
                if let Some(block) = self.blocks.get_mut(&e.addr) {
                    let (size, seg, used) = *block;
                    block.2 = false;
                    if used && let Some(s) = self.segments.get_mut(&seg) {
                        s.used_bytes -= size;
                    }
                    if done {
                        self.blocks.remove(&e.addr);
                    }
                }
            }
            Action::Other => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
