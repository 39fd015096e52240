//! The device's page table: where each chunk of each mapped buffer lives, as the GPU's
//! MMU sees it. Owned by the device and changed only by the manager's mapping actions
//! (`Map`, `Remap`, `Unmap`); kernels and copies read it, never the manager's books.

use gpuswap_core::{BufferId, Location, Mapping, TenantId};

/// The mapping of one buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferMap {
    /// The buffer.
    pub buffer: BufferId,
    /// Its owner.
    pub tenant: TenantId,
    /// Its size.
    pub bytes: u64,
    /// Chunk size; chunk `i` starts at `i * chunk_bytes`, the last may be shorter.
    pub chunk_bytes: u64,
    /// Where each chunk lives.
    pub locations: Vec<Location>,
    /// Bytes mapped to VRAM.
    pub vram_bytes: u64,
    /// Changes whenever this buffer's mapping changes (unique across buffers): what a
    /// caller derives from one buffer's placement stays valid while it stays the same.
    pub epoch: u64,
}

impl BufferMap {
    /// `(offset, bytes, location)` of every chunk in address order.
    pub fn chunks(&self) -> impl Iterator<Item = (u64, u64, Location)> + '_ {
        self.chunks_from(0)
    }

    /// [`BufferMap::chunks`] from chunk `first` on, in constant time to the first.
    pub fn chunks_from(&self, first: usize) -> impl Iterator<Item = (u64, u64, Location)> + '_ {
        let rest = self.locations.get(first..).unwrap_or(&[]);
        rest.iter().enumerate().map(move |(i, l)| {
            let index = first + i;
            (index as u64 * self.chunk_bytes, self.chunk_len(index), *l)
        })
    }

    fn chunk_len(&self, index: usize) -> u64 {
        let offset = index as u64 * self.chunk_bytes;
        self.chunk_bytes.min(self.bytes - offset)
    }
}

/// Every mapped buffer, indexed by buffer id (the manager numbers buffers densely), and
/// a per-tenant epoch that changes whenever one of the tenant's mappings changes.
#[derive(Debug, Default)]
pub struct PageTable {
    buffers: Vec<Option<BufferMap>>,
    epochs: Vec<u64>,
    /// Mapping changes so far: the source of the buffers' epochs.
    changes: u64,
}

impl PageTable {
    /// Carries out a mapping action.
    pub fn apply(&mut self, action: Mapping) {
        match action {
            Mapping::Map {
                tenant,
                buffer,
                bytes,
                chunk_bytes,
                locations,
            } => {
                let mut map = BufferMap {
                    buffer,
                    tenant,
                    bytes,
                    chunk_bytes,
                    locations,
                    vram_bytes: 0,
                    epoch: self.changes,
                };
                map.vram_bytes = map
                    .chunks()
                    .filter(|c| c.2 == Location::Vram)
                    .map(|c| c.1)
                    .sum();
                let i = buffer.slot();
                if i >= self.buffers.len() {
                    self.buffers.resize_with(i + 1, || None);
                }
                self.buffers[i] = Some(map);
                self.bump(tenant);
            }
            Mapping::Remap { tenant, chunk, to } => {
                if let Some(map) = self
                    .buffers
                    .get_mut(chunk.buffer.slot())
                    .and_then(Option::as_mut)
                {
                    let index = chunk.index as usize;
                    let len = map.chunk_len(index);
                    map.epoch = self.changes;
                    if map.locations[index] != to {
                        map.locations[index] = to;
                        match to {
                            Location::Vram => map.vram_bytes += len,
                            Location::Host => map.vram_bytes -= len,
                        }
                    }
                    self.bump(tenant);
                }
            }
            Mapping::Unmap { tenant, buffer } => {
                if let Some(slot) = self.buffers.get_mut(buffer.slot()) {
                    *slot = None;
                }
                self.bump(tenant);
            }
        }
    }

    /// Whether no buffer is mapped.
    pub fn is_empty(&self) -> bool {
        self.buffers.iter().all(Option::is_none)
    }

    /// The map of a buffer, if it is mapped.
    pub fn get(&self, buffer: BufferId) -> Option<&BufferMap> {
        self.buffers.get(buffer.slot())?.as_ref()
    }

    /// A number that changes whenever one of `tenant`'s mappings changes: what a caller
    /// derives from them stays valid while it stays the same.
    pub fn epoch(&self, tenant: TenantId) -> u64 {
        self.epochs.get(tenant.0 as usize).copied().unwrap_or(0)
    }

    fn bump(&mut self, tenant: TenantId) {
        self.changes += 1;
        let i = tenant.0 as usize;
        if i >= self.epochs.len() {
            self.epochs.resize(i + 1, 0);
        }
        self.epochs[i] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuswap_core::ChunkRef;

    #[test]
    fn mapping_actions_change_locations_and_epochs() {
        let mut table = PageTable::default();
        let (a, b) = (TenantId(0), TenantId(1));
        table.apply(Mapping::Map {
            tenant: a,
            buffer: BufferId(2),
            bytes: 10,
            chunk_bytes: 4,
            locations: vec![Location::Vram, Location::Host, Location::Vram],
        });
        let map = table.get(BufferId(2)).unwrap();
        assert_eq!(map.vram_bytes, 6, "4 + the 2-byte remainder");
        let buffer_epoch = map.epoch;
        let (epoch_a, epoch_b) = (table.epoch(a), table.epoch(b));
        let chunk = ChunkRef {
            buffer: BufferId(2),
            index: 2,
        };
        table.apply(Mapping::Remap {
            tenant: a,
            chunk,
            to: Location::Host,
        });
        assert_eq!(table.get(BufferId(2)).unwrap().vram_bytes, 4);
        assert_ne!(table.get(BufferId(2)).unwrap().epoch, buffer_epoch);
        assert!(table.epoch(a) > epoch_a);
        assert_eq!(table.epoch(b), epoch_b, "other tenants' epochs stay");
        table.apply(Mapping::Unmap {
            tenant: a,
            buffer: BufferId(2),
        });
        assert!(table.get(BufferId(2)).is_none());
        assert!(table.get(BufferId(0)).is_none());
    }
}
