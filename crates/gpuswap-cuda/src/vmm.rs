//! A program's own virtual memory management (`cuMemCreate`, `cuMemMap`, ...; issue 41,
//! item 1), as PyTorch's expandable segments, vLLM's sleep mode and torch_memory_saver
//! use it. A handle the program creates frees no VRAM until it is unmapped everywhere
//! and released, so the program gets a *virtual handle* instead: an opaque value of
//! ours, backed by a managed buffer of the handle's size (the daemon's chunks, each a
//! handle of ours, the last one shorter; all counted in bytes). The buffer stays mapped
//! at its own reservation (its *home*, where moves copy from and to); each of the
//! program's mappings of the virtual handle maps the same chunk handles again at the
//! program's addresses, piece by piece, so its bytes are the same at every address.
//! When the daemon moves a chunk, [`moved`] remaps every piece of it and grants the
//! program's access there again. Each mapping is a range of the buffer for the touch
//! hints too (after a reconnection, until it is unmapped, its marks name the buffer's
//! id of the lost connection: a hint the new daemon does not know).
//!
//! Lock order: the client's buffers, then [`TABLE`]; nothing here calls the client while
//! it holds [`TABLE`]. The hooks hold the process's gate (as `cuMemFree` does), and
//! moves run while it is held for a suspension, so no move runs while a mapping changes.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use crate::diag;
use crate::ffi::{self, Access, CuResult, DevPtr, ProgramProp, driver, vmm_driver};

/// What these books need of the daemon's connection. The client implements it, so this
/// module imports no client (which calls [`moved`] after each move).
pub trait Buffers {
    /// A managed buffer of `bytes`, mapped at the address returned.
    fn alloc(&self, bytes: u64) -> Result<DevPtr, (CuResult, String)>;
    /// Frees the managed buffer at `va`; `None` if it is not one.
    fn free(&self, va: DevPtr) -> Option<Result<(), String>>;
    /// The buffer at `va`: its id, chunk size and chunk handles.
    fn chunk_handles(&self, va: DevPtr) -> Option<(u64, u64, Vec<u64>)>;
}

/// Set in every virtual handle: a real handle is a pointer of the driver's, whose top bit
/// is clear in a user-space process.
const VIRTUAL_TAG: u64 = 1 << 63;

/// One mapping of a virtual handle by the program.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mapping {
    va: DevPtr,
    bytes: u64,
    /// Where in the handle it starts.
    offset: u64,
    /// What the program granted on it (`cuMemSetAccess`), granted again after a move.
    access: Option<Access>,
}

/// A virtual handle: the program's `cuMemCreate`.
struct Virtual {
    /// The managed buffer behind it, by its address.
    home: DevPtr,
    bytes: u64,
    prop: ProgramProp,
    /// References not released: one from `cuMemCreate`, one per retain.
    refs: u32,
    mappings: Vec<Mapping>,
}

impl Virtual {
    /// Whether its memory goes: released and mapped nowhere, as the driver frees it.
    fn gone(&self) -> bool {
        self.refs == 0 && self.mappings.is_empty()
    }
}

/// Every live virtual handle.
struct Table {
    next: u64,
    handles: BTreeMap<u64, Virtual>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    next: 0,
    handles: BTreeMap::new(),
});

fn table() -> std::sync::MutexGuard<'static, Table> {
    TABLE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether `handle` is one of ours.
pub fn is_virtual(handle: u64) -> bool {
    handle & VIRTUAL_TAG != 0 && table().handles.contains_key(&handle)
}

/// Device 0's allocation granularity, asked once (0 if the driver will not say): every
/// GPU the VMM API runs on has the same minimum (2 MiB).
fn granularity() -> u64 {
    static BYTES: OnceLock<u64> = OnceLock::new();
    *BYTES.get_or_init(|| driver::granularity(0).unwrap_or(0))
}

fn aligned(bytes: u64) -> bool {
    let g = granularity();
    g > 0 && bytes.is_multiple_of(g)
}

/// A managed `cuMemCreate` of `bytes` with `prop`: a buffer of the daemon's, and the
/// virtual handle that stands for it.
pub fn create(client: &impl Buffers, bytes: u64, prop: ProgramProp) -> Result<u64, CuResult> {
    if bytes == 0 || !aligned(bytes) {
        // As the driver answers a size that is not a multiple of the granularity.
        return Err(ffi::CUDA_ERROR_INVALID_VALUE);
    }
    let home = client.alloc(bytes).map_err(|(rc, why)| {
        diag::warn(&format!("a cuMemCreate of {bytes} bytes failed: {why}"));
        rc
    })?;
    let mut t = table();
    t.next += 1;
    let handle = VIRTUAL_TAG | t.next;
    let v = Virtual {
        home,
        bytes,
        prop,
        refs: 1,
        mappings: Vec::new(),
    };
    t.handles.insert(handle, v);
    Ok(handle)
}

/// Frees the buffer behind a virtual handle that is gone (taken out of the table).
fn free(client: &impl Buffers, v: &Virtual) -> CuResult {
    match client.free(v.home) {
        Some(Ok(())) => ffi::CUDA_SUCCESS,
        Some(Err(e)) => {
            diag::warn(&format!("freeing a released handle's memory: {e}"));
            ffi::CUDA_ERROR_UNKNOWN
        }
        None => ffi::CUDA_ERROR_UNKNOWN,
    }
}

/// `cuMemRelease` of a virtual handle: its memory goes once it is mapped nowhere too.
pub fn release(client: &impl Buffers, handle: u64) -> CuResult {
    let gone = {
        let mut t = table();
        let Some(v) = t.handles.get_mut(&handle).filter(|v| v.refs > 0) else {
            return ffi::CUDA_ERROR_INVALID_VALUE;
        };
        v.refs -= 1;
        if !v.gone() {
            return ffi::CUDA_SUCCESS;
        }
        t.handles.remove(&handle)
    };
    gone.map_or(ffi::CUDA_SUCCESS, |v| free(client, &v))
}

/// One piece of a mapping: the part of it that one chunk backs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    chunk: usize,
    /// Its address.
    va: DevPtr,
    /// Where in the chunk it starts.
    chunk_offset: u64,
    bytes: u64,
}

/// The pieces of `m`, a mapping of a handle of `handle_bytes` in chunks of
/// `chunk_bytes` (the last one shorter).
fn pieces(m: &Mapping, handle_bytes: u64, chunk_bytes: u64) -> Vec<Piece> {
    let end = (m.offset + m.bytes).min(handle_bytes);
    (m.offset / chunk_bytes..end.div_ceil(chunk_bytes))
        .filter_map(|c| {
            let chunk_start = c * chunk_bytes;
            let len = chunk_bytes.min(handle_bytes - chunk_start);
            let piece = piece_in(m, chunk_start, len)?;
            Some(Piece {
                chunk: c as usize,
                ..piece
            })
        })
        .collect()
}

/// `cuMemMap` of `bytes` of a virtual handle from `offset` at `va`: each piece mapped
/// to its chunk's handle (all of them undone if one fails).
pub fn map(client: &impl Buffers, va: DevPtr, bytes: u64, offset: u64, handle: u64) -> CuResult {
    let Some((home, handle_bytes)) = table()
        .handles
        .get(&handle)
        .filter(|v| v.refs > 0)
        .map(|v| (v.home, v.bytes))
    else {
        return ffi::CUDA_ERROR_INVALID_HANDLE;
    };
    let fits = offset.checked_add(bytes).is_some_and(|e| e <= handle_bytes);
    if bytes == 0 || !fits || !aligned(va | bytes | offset) {
        return ffi::CUDA_ERROR_INVALID_VALUE;
    }
    let Some((id, chunk_bytes, chunks)) = client.chunk_handles(home) else {
        return ffi::CUDA_ERROR_INVALID_HANDLE;
    };
    let mapping = Mapping {
        va,
        bytes,
        offset,
        access: None,
    };
    let mut t = table();
    let Some(v) = t.handles.get_mut(&handle) else {
        return ffi::CUDA_ERROR_INVALID_HANDLE;
    };
    let mut done: Vec<Piece> = Vec::new();
    for p in pieces(&mapping, handle_bytes, chunk_bytes) {
        if let Err(rc) = vmm_driver::map_part(p.va, p.bytes, p.chunk_offset, chunks[p.chunk]) {
            for d in done {
                let _ = vmm_driver::unmap(d.va, d.bytes);
            }
            return rc;
        }
        done.push(p);
    }
    v.mappings.push(mapping);
    // A launch that names an address of the mapping touches the buffer.
    crate::touch::added(id, va, bytes);
    ffi::CUDA_SUCCESS
}

/// `cuMemUnmap` of `[va, va + bytes)`: `None` when no mapping of ours lies in it (the
/// driver's call); else our mappings in it are unmapped (each whole, or the call fails
/// as the driver's would) and the rest of the range is handed to the driver. A handle
/// released and now mapped nowhere frees its memory.
pub fn unmap(client: &impl Buffers, va: DevPtr, bytes: u64) -> Option<CuResult> {
    let end = va.checked_add(bytes)?;
    let mut t = table();
    let mut ours: Vec<(u64, DevPtr, u64)> = t
        .handles
        .iter()
        .flat_map(|(h, v)| v.mappings.iter().map(move |m| (*h, m.va, m.bytes)))
        .filter(|&(_, at, len)| at < end && va < at + len)
        .collect();
    if ours.is_empty() {
        return None;
    }
    if ours.iter().any(|&(_, at, len)| at < va || at + len > end) {
        // A part of a mapping cannot be unmapped.
        return Some(ffi::CUDA_ERROR_INVALID_VALUE);
    }
    ours.sort_by_key(|o| o.1);
    let mut rc = ffi::CUDA_SUCCESS;
    let mut cursor = va;
    for &(handle, at, len) in &ours {
        let gap = (cursor < at).then(|| vmm_driver::unmap(cursor, at - cursor));
        let ours_gone = vmm_driver::unmap(at, len);
        for r in [gap.unwrap_or(Ok(())), ours_gone] {
            if let Err(e) = r {
                rc = e;
            }
        }
        if let Some(v) = t.handles.get_mut(&handle) {
            v.mappings.retain(|m| m.va != at);
        }
        crate::touch::removed(at);
        cursor = at + len;
    }
    if cursor < end
        && let Err(e) = vmm_driver::unmap(cursor, end - cursor)
    {
        rc = e;
    }
    let gone: Vec<u64> = t
        .handles
        .iter()
        .filter(|(_, v)| v.gone())
        .map(|(h, _)| *h)
        .collect();
    let gone: Vec<Virtual> = gone.iter().filter_map(|h| t.handles.remove(h)).collect();
    drop(t);
    for v in &gone {
        let freed = free(client, v);
        if rc == ffi::CUDA_SUCCESS {
            rc = freed;
        }
    }
    Some(rc)
}

/// After the driver granted `access` on `[va, va + bytes)`: our mappings in that range
/// keep it, to have it again after a move.
pub fn granted(va: DevPtr, bytes: u64, access: Access) {
    let end = va.saturating_add(bytes);
    for v in table().handles.values_mut() {
        for m in v.mappings.iter_mut() {
            if m.va < end && va < m.va + m.bytes {
                m.access = Some(access.clone());
            }
        }
    }
}

/// `cuMemRetainAllocationHandle`: the virtual handle mapped at `addr`, one reference
/// more, or `None` when `addr` is in no mapping of ours.
pub fn retain(addr: DevPtr) -> Option<u64> {
    let mut t = table();
    let (handle, v) = t.handles.iter_mut().find(|(_, v)| {
        v.mappings
            .iter()
            .any(|m| m.va <= addr && addr < m.va + m.bytes)
    })?;
    v.refs += 1;
    Some(*handle)
}

/// The properties a virtual handle was created with (`None`: not ours, or released).
pub fn properties(handle: u64) -> Option<ProgramProp> {
    table()
        .handles
        .get(&handle)
        .filter(|v| v.refs > 0)
        .map(|v| v.prop)
}

/// A chunk of a buffer, at `at` for `bytes` in its home, now backed by `handle`: every
/// piece of a program's mapping of it is mapped there again, with the program's access.
/// A mapping that cannot be restored ends the process, as its data is out of reach.
pub fn moved(at: DevPtr, bytes: u64, handle: u64) {
    let t = table();
    let Some(v) = t
        .handles
        .values()
        .find(|v| v.home <= at && at < v.home + v.bytes)
    else {
        return;
    };
    let chunk_offset = at - v.home;
    for m in &v.mappings {
        let piece = piece_in(m, chunk_offset, bytes);
        let Some(p) = piece else { continue };
        let remapped = vmm_driver::unmap(p.va, p.bytes)
            .and_then(|()| vmm_driver::map_part(p.va, p.bytes, p.chunk_offset, handle))
            .and_then(|()| match &m.access {
                Some(access) => vmm_driver::grant(p.va, p.bytes, access),
                None => Ok(()),
            });
        if let Err(rc) = remapped {
            diag::die(&format!(
                "a program's mapping at {:#x} could not follow its moved memory (CUDA error \
                 {rc}); the program cannot go on",
                p.va
            ));
        }
    }
}

/// The piece of mapping `m` in the chunk at `chunk_offset` of its handle, `bytes` long
/// (numbered 0: the caller knows which chunk it is).
fn piece_in(m: &Mapping, chunk_offset: u64, bytes: u64) -> Option<Piece> {
    let start = m.offset.max(chunk_offset);
    let stop = (m.offset + m.bytes).min(chunk_offset + bytes);
    (start < stop).then(|| Piece {
        chunk: 0,
        va: m.va + (start - m.offset),
        chunk_offset: start - chunk_offset,
        bytes: stop - start,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn mapping(va: DevPtr, bytes: u64, offset: u64) -> Mapping {
        Mapping {
            va,
            bytes,
            offset,
            access: None,
        }
    }

    fn piece(chunk: usize, va: DevPtr, chunk_offset: u64, bytes: u64) -> Piece {
        Piece {
            chunk,
            va,
            chunk_offset,
            bytes,
        }
    }

    #[test]
    fn a_whole_mapping_has_a_piece_per_chunk_the_last_one_shorter() {
        // A 6 MiB handle in 4 MiB chunks: 4 + 2.
        let got = pieces(&mapping(0x1000_0000, 6 * MIB, 0), 6 * MIB, 4 * MIB);
        let want = vec![
            piece(0, 0x1000_0000, 0, 4 * MIB),
            piece(1, 0x1000_0000 + 4 * MIB, 0, 2 * MIB),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_mapping_from_an_offset_starts_inside_a_chunk() {
        // The handle's last 4 MiB of 6: the first chunk from 2 MiB on, then the second.
        let got = pieces(&mapping(0x2000_0000, 4 * MIB, 2 * MIB), 6 * MIB, 4 * MIB);
        let want = vec![
            piece(0, 0x2000_0000, 2 * MIB, 2 * MIB),
            piece(1, 0x2000_0000 + 2 * MIB, 0, 2 * MIB),
        ];
        assert_eq!(got, want);
        // A part inside one chunk is one piece.
        let inside = pieces(&mapping(0x3000_0000, 2 * MIB, 4 * MIB), 8 * MIB, 8 * MIB);
        assert_eq!(inside, vec![piece(0, 0x3000_0000, 4 * MIB, 2 * MIB)]);
    }

    #[test]
    fn a_moved_chunk_finds_only_the_mappings_it_backs() {
        let m = mapping(0x4000_0000, 4 * MIB, 2 * MIB);
        assert_eq!(
            piece_in(&m, 4 * MIB, 2 * MIB),
            Some(piece(0, 0x4000_0000 + 2 * MIB, 0, 2 * MIB))
        );
        assert_eq!(piece_in(&mapping(0, 2 * MIB, 0), 4 * MIB, 2 * MIB), None);
    }
}
