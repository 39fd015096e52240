//! Buffers and their chunks: the units the manager accounts, places and (later) relocates.

use crate::ids::{BufferId, TenantId};

/// Priority of buffers that have none: the middle of the scale.
pub const PRIORITY_DEFAULT: i32 = 50;
/// Priority of the runtime's stack buffer: large and nearly never touched.
pub const PRIORITY_STACK: i32 = 0;
/// Priority of the runtime's other system buffers (code, constants): always needed.
pub const PRIORITY_SYSTEM: i32 = 100;

/// Where the bytes of a chunk live now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Location {
    /// Device memory.
    Vram,
    /// Host memory mapped into the GPU address space (reached over the link).
    Host,
}

impl Location {
    /// The other place.
    pub fn other(self) -> Self {
        match self {
            Self::Vram => Self::Host,
            Self::Host => Self::Vram,
        }
    }
}

/// A buffer the CUDA runtime allocates for each tenant on its own behalf.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SystemBuffer {
    /// The per-thread stack (local memory): large and rarely touched.
    Stack,
    /// Kernel code.
    Code,
    /// Constant data.
    Constant,
}

/// What a buffer is for; policies treat the kinds differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferKind {
    /// Memory the application asked for.
    Device,
    /// Memory the runtime allocated for the tenant.
    System(SystemBuffer),
}

/// GPUswap's unit of accounting and relocation. A buffer's last chunk may be shorter
/// (a remainder chunk); a chunk never spans two buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Offset of the chunk inside its buffer.
    pub offset_bytes: u64,
    /// Length of the chunk.
    pub bytes: u64,
    /// Where the chunk's data lives now (what kernels reach).
    pub location: Location,
    /// Where a planned relocation will put it; accounting already counts it there.
    pub moving_to: Option<Location>,
    /// The priority that orders the chunk in its tenant's lists.
    pub priority: i32,
    /// Seeded pseudo-random rank: random choices take the smallest.
    pub rank: u64,
}

impl Chunk {
    /// Where the accounting counts the chunk: its destination while it moves.
    pub fn planned_location(&self) -> Location {
        self.moving_to.unwrap_or(self.location)
    }
}

/// One allocation of a tenant, split into chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// The manager's handle.
    pub id: BufferId,
    /// The owning tenant.
    pub tenant: TenantId,
    /// What the buffer is for.
    pub kind: BufferKind,
    /// Size as requested.
    pub bytes: u64,
    /// The chunks in address order; their lengths sum to `bytes`.
    pub chunks: Vec<Chunk>,
}

impl Buffer {
    /// Bytes of this buffer whose data is in VRAM now.
    pub fn vram_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .filter(|c| c.location == Location::Vram)
            .map(|c| c.bytes)
            .sum()
    }

    /// Bytes of this buffer the accounting counts at `location`.
    pub fn planned_bytes_at(&self, location: Location) -> u64 {
        self.chunks
            .iter()
            .filter(|c| c.planned_location() == location)
            .map(|c| c.bytes)
            .sum()
    }
}

/// The live buffers, indexed by id. The manager numbers buffers densely from 0 and never
/// reuses a number, so a vector of slots gives constant-time lookups.
#[derive(Clone, Debug, Default)]
pub(crate) struct BufferTable {
    slots: Vec<Option<Buffer>>,
    /// Slots of freed buffers, reused last-freed first.
    vacant: Vec<usize>,
}

impl BufferTable {
    pub(crate) fn get(&self, id: &BufferId) -> Option<&Buffer> {
        self.slots.get(id.slot())?.as_ref().filter(|b| b.id == *id)
    }

    pub(crate) fn get_mut(&mut self, id: &BufferId) -> Option<&mut Buffer> {
        self.slots
            .get_mut(id.slot())?
            .as_mut()
            .filter(|b| b.id == *id)
    }

    pub(crate) fn contains_key(&self, id: &BufferId) -> bool {
        self.get(id).is_some()
    }

    /// The id the next [`BufferTable::insert`] takes for allocation `serial`.
    pub(crate) fn vacant_id(&self, serial: u64) -> BufferId {
        BufferId::new(
            serial,
            self.vacant.last().copied().unwrap_or(self.slots.len()),
        )
    }

    /// Stores `buffer` under its id, which [`BufferTable::vacant_id`] gave.
    pub(crate) fn insert(&mut self, buffer: Buffer) {
        let slot = buffer.id.slot();
        if self.vacant.last() == Some(&slot) {
            self.vacant.pop();
        } else {
            assert_eq!(slot, self.slots.len(), "ids come from vacant_id");
            self.slots.push(None);
        }
        self.slots[slot] = Some(buffer);
    }

    pub(crate) fn remove(&mut self, id: &BufferId) -> Option<Buffer> {
        self.get(id)?;
        self.vacant.push(id.slot());
        self.slots[id.slot()].take()
    }

    /// Live buffers in slot order (allocation order only while no slot was reused).
    pub(crate) fn values(&self) -> impl Iterator<Item = &Buffer> {
        self.slots.iter().flatten()
    }

    /// Slots held, live or vacant: the table's size, which follows the most buffers
    /// ever live at once, never the number of allocations served.
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }
}

impl std::ops::Index<&BufferId> for BufferTable {
    type Output = Buffer;

    fn index(&self, id: &BufferId) -> &Buffer {
        self.get(id).expect("live buffer")
    }
}

/// Splits a buffer of `bytes` into `(offset, length)` chunks of `chunk_bytes`, the last one
/// a remainder chunk when `bytes` is not a multiple of `chunk_bytes`.
///
/// A zero-byte buffer has no chunks. `chunk_bytes` must be positive.
pub fn chunk_layout(bytes: u64, chunk_bytes: u64) -> impl Iterator<Item = (u64, u64)> {
    assert!(chunk_bytes > 0, "chunk size must be positive");
    (0..bytes.div_ceil(chunk_bytes)).map(move |i| {
        let offset = i * chunk_bytes;
        (offset, chunk_bytes.min(bytes - offset))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn remainder_chunk_is_last_and_short() {
        let chunks: Vec<_> = chunk_layout(10, 4).collect();
        assert_eq!(chunks, vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(chunk_layout(0, 4).count(), 0);
        assert_eq!(chunk_layout(8, 4).collect::<Vec<_>>(), vec![(0, 4), (4, 4)]);
    }

    proptest! {
        #[test]
        fn chunks_tile_the_buffer(bytes in 0u64..1 << 40, chunk in 1u64..1 << 30) {
            let mut next = 0;
            for (offset, len) in chunk_layout(bytes, chunk) {
                prop_assert_eq!(offset, next);
                prop_assert!(len > 0 && len <= chunk);
                next = offset + len;
            }
            prop_assert_eq!(next, bytes);
        }
    }
}
