//! The memory manager: accounting of VRAM per tenant and the allocation flow.
//!
//! Events come in through `handle_*`; the answers the driver must carry out come out of
//! [`Manager::poll_action`] in the order they were decided.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;
use thiserror::Error;

use crate::buffer::{Buffer, BufferKind, Chunk, Location, chunk_layout};
use crate::ids::{BufferId, RequestId, TenantId};

/// How the manager treats allocations that do not fit in VRAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// A stock driver: allocations come from VRAM while it lasts, then fail.
    Native,
}

/// Fixed settings of a manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagerConfig {
    /// VRAM the manager may hand to tenants (driver-reserved memory is not part of it).
    pub vram_bytes: u64,
    /// Size of a chunk, the unit of accounting and relocation.
    pub chunk_bytes: u64,
    /// What happens when VRAM runs out.
    pub mode: Mode,
}

/// An allocation request of a tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocRequest {
    /// The caller's number for the request, echoed in the answer.
    pub request: RequestId,
    /// Who asks.
    pub tenant: TenantId,
    /// How much.
    pub bytes: u64,
    /// What for.
    pub kind: BufferKind,
}

/// Why an allocation failed.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize)]
pub enum AllocError {
    /// VRAM cannot hold the request and the mode does not extend it.
    #[error("out of memory: requested {requested_bytes} bytes, {free_bytes} bytes of VRAM free")]
    OutOfMemory {
        /// Size of the failed request.
        requested_bytes: u64,
        /// VRAM that was free when it failed.
        free_bytes: u64,
    },
    /// A zero-byte allocation (CUDA returns an error for it too).
    #[error("zero-byte allocation")]
    ZeroBytes,
}

/// Why a free failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FreeError {
    /// The buffer does not exist (never allocated or already freed).
    #[error("{0} does not exist")]
    Unknown(BufferId),
    /// The buffer belongs to somebody else.
    #[error("{buffer} belongs to {owner}, not to {caller}")]
    NotOwner {
        /// The buffer.
        buffer: BufferId,
        /// Its owner.
        owner: TenantId,
        /// Who tried to free it.
        caller: TenantId,
    },
}

/// What the driver must carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The request is served by this buffer; its chunks say where each part lives.
    Grant {
        /// The request answered.
        request: RequestId,
        /// Who asked.
        tenant: TenantId,
        /// The new buffer.
        buffer: BufferId,
    },
    /// The request cannot be served.
    Fail {
        /// The request answered.
        request: RequestId,
        /// Who asked.
        tenant: TenantId,
        /// Why.
        error: AllocError,
    },
}

/// Memory figures of one tenant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TenantUsage {
    /// Bytes of the tenant's buffers in VRAM now.
    pub vram_bytes: u64,
    /// Bytes of the tenant's buffers in host memory now.
    pub host_bytes: u64,
    /// Highest `vram_bytes` so far.
    pub vram_peak_bytes: u64,
}

/// The memory manager.
#[derive(Debug)]
pub struct Manager {
    config: ManagerConfig,
    buffers: BTreeMap<BufferId, Buffer>,
    usage: BTreeMap<TenantId, TenantUsage>,
    vram_used_bytes: u64,
    next_buffer: u64,
    actions: VecDeque<Action>,
}

impl Manager {
    /// A manager with nothing allocated.
    ///
    /// # Panics
    /// If `config.chunk_bytes` is zero: callers validate configuration before this.
    pub fn new(config: ManagerConfig) -> Self {
        assert!(config.chunk_bytes > 0, "chunk size must be positive");
        Self {
            config,
            buffers: BTreeMap::new(),
            usage: BTreeMap::new(),
            vram_used_bytes: 0,
            next_buffer: 0,
            actions: VecDeque::new(),
        }
    }

    // ---- getters ----

    /// The configuration the manager was built with.
    pub fn config(&self) -> &ManagerConfig {
        &self.config
    }

    /// VRAM held by tenants' buffers.
    pub fn vram_used_bytes(&self) -> u64 {
        self.vram_used_bytes
    }

    /// VRAM not held by anybody.
    pub fn vram_free_bytes(&self) -> u64 {
        self.config.vram_bytes - self.vram_used_bytes
    }

    /// A live buffer.
    pub fn buffer(&self, id: BufferId) -> Option<&Buffer> {
        self.buffers.get(&id)
    }

    /// Memory figures of a tenant (zero for a tenant the manager has not seen).
    pub fn usage(&self, tenant: TenantId) -> TenantUsage {
        self.usage.get(&tenant).copied().unwrap_or_default()
    }

    /// Checks the accounting invariants: per-chunk locations sum to the per-tenant
    /// figures, those sum to the global figure, and VRAM is never over-committed.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut per_tenant: BTreeMap<TenantId, (u64, u64)> = BTreeMap::new();
        for buffer in self.buffers.values() {
            let chunk_sum: u64 = buffer.chunks.iter().map(|c| c.bytes).sum();
            if chunk_sum != buffer.bytes {
                return Err(format!(
                    "{}: chunks hold {chunk_sum} of {} bytes",
                    buffer.id, buffer.bytes
                ));
            }
            let entry = per_tenant.entry(buffer.tenant).or_default();
            entry.0 += buffer.vram_bytes();
            entry.1 += buffer.bytes_at(Location::Host);
        }
        let mut total = 0;
        for (tenant, usage) in &self.usage {
            let (vram, host) = per_tenant.get(tenant).copied().unwrap_or_default();
            if (vram, host) != (usage.vram_bytes, usage.host_bytes) {
                return Err(format!(
                    "{tenant}: accounted {}/{} bytes VRAM/host, chunks say {vram}/{host}",
                    usage.vram_bytes, usage.host_bytes
                ));
            }
            total += vram;
        }
        if total != self.vram_used_bytes {
            return Err(format!(
                "tenants hold {total} bytes of VRAM, global figure says {}",
                self.vram_used_bytes
            ));
        }
        if self.vram_used_bytes > self.config.vram_bytes {
            return Err(format!(
                "{} bytes of VRAM in use, capacity {}",
                self.vram_used_bytes, self.config.vram_bytes
            ));
        }
        Ok(())
    }

    // ---- events ----

    /// A tenant asks for memory. The answer is queued for [`Manager::poll_action`].
    pub fn handle_alloc(&mut self, req: AllocRequest) {
        let action = match self.try_alloc(req) {
            Ok(buffer) => Action::Grant {
                request: req.request,
                tenant: req.tenant,
                buffer,
            },
            Err(error) => Action::Fail {
                request: req.request,
                tenant: req.tenant,
                error,
            },
        };
        self.actions.push_back(action);
    }

    /// A tenant frees a buffer; its memory is available again at once.
    pub fn handle_free(&mut self, tenant: TenantId, buffer: BufferId) -> Result<(), FreeError> {
        let owner = self
            .buffers
            .get(&buffer)
            .ok_or(FreeError::Unknown(buffer))?
            .tenant;
        if owner != tenant {
            return Err(FreeError::NotOwner {
                buffer,
                owner,
                caller: tenant,
            });
        }
        let removed = self.buffers.remove(&buffer).expect("checked above");
        let vram = removed.vram_bytes();
        let usage = self.usage.entry(tenant).or_default();
        usage.vram_bytes -= vram;
        usage.host_bytes -= removed.bytes - vram;
        self.vram_used_bytes -= vram;
        Ok(())
    }

    /// A tenant ended (or was killed): everything it held is freed.
    pub fn handle_tenant_exit(&mut self, tenant: TenantId) {
        let owned: Vec<BufferId> = self
            .buffers
            .values()
            .filter(|b| b.tenant == tenant)
            .map(|b| b.id)
            .collect();
        for id in owned {
            self.handle_free(tenant, id)
                .expect("the tenant owns every buffer listed");
        }
    }

    // ---- actions ----

    /// The next action the driver must carry out, in decision order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn try_alloc(&mut self, req: AllocRequest) -> Result<BufferId, AllocError> {
        if req.bytes == 0 {
            return Err(AllocError::ZeroBytes);
        }
        let free_bytes = self.vram_free_bytes();
        match self.config.mode {
            Mode::Native if req.bytes > free_bytes => {
                return Err(AllocError::OutOfMemory {
                    requested_bytes: req.bytes,
                    free_bytes,
                });
            }
            Mode::Native => {}
        }
        let id = BufferId(self.next_buffer);
        self.next_buffer += 1;
        let chunks = chunk_layout(req.bytes, self.config.chunk_bytes)
            .map(|(offset_bytes, bytes)| Chunk {
                offset_bytes,
                bytes,
                location: Location::Vram,
            })
            .collect();
        let buffer = Buffer {
            id,
            tenant: req.tenant,
            kind: req.kind,
            bytes: req.bytes,
            chunks,
        };
        self.vram_used_bytes += req.bytes;
        let usage = self.usage.entry(req.tenant).or_default();
        usage.vram_bytes += req.bytes;
        usage.vram_peak_bytes = usage.vram_peak_bytes.max(usage.vram_bytes);
        self.buffers.insert(id, buffer);
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MIB;
    use proptest::prelude::*;

    fn native(vram_mib: u64) -> Manager {
        Manager::new(ManagerConfig {
            vram_bytes: vram_mib * MIB,
            chunk_bytes: 4 * MIB,
            mode: Mode::Native,
        })
    }

    fn alloc(m: &mut Manager, request: u64, tenant: u32, bytes: u64) -> Action {
        m.handle_alloc(AllocRequest {
            request: RequestId(request),
            tenant: TenantId(tenant),
            bytes,
            kind: BufferKind::Device,
        });
        m.poll_action().expect("every request is answered")
    }

    #[test]
    fn native_serves_from_vram_then_fails() {
        let mut m = native(10);
        let Action::Grant { buffer, .. } = alloc(&mut m, 0, 0, 6 * MIB) else {
            panic!("first request fits")
        };
        assert_eq!(m.buffer(buffer).unwrap().chunks.len(), 2);
        assert_eq!(m.vram_free_bytes(), 4 * MIB);
        assert_eq!(
            alloc(&mut m, 1, 1, 5 * MIB),
            Action::Fail {
                request: RequestId(1),
                tenant: TenantId(1),
                error: AllocError::OutOfMemory {
                    requested_bytes: 5 * MIB,
                    free_bytes: 4 * MIB
                }
            }
        );
        assert!(matches!(alloc(&mut m, 2, 1, 4 * MIB), Action::Grant { .. }));
        assert_eq!(m.vram_free_bytes(), 0);
        assert_eq!(m.usage(TenantId(1)).vram_peak_bytes, 4 * MIB);
    }

    #[test]
    fn free_checks_ownership_and_existence() {
        let mut m = native(10);
        let Action::Grant { buffer, .. } = alloc(&mut m, 0, 0, MIB) else {
            panic!("fits")
        };
        assert_eq!(
            m.handle_free(TenantId(1), buffer),
            Err(FreeError::NotOwner {
                buffer,
                owner: TenantId(0),
                caller: TenantId(1)
            })
        );
        assert_eq!(m.handle_free(TenantId(0), buffer), Ok(()));
        assert_eq!(
            m.handle_free(TenantId(0), buffer),
            Err(FreeError::Unknown(buffer))
        );
        assert_eq!(m.vram_used_bytes(), 0);
    }

    #[test]
    fn zero_byte_allocation_fails() {
        let mut m = native(10);
        assert!(matches!(
            alloc(&mut m, 0, 0, 0),
            Action::Fail {
                error: AllocError::ZeroBytes,
                ..
            }
        ));
    }

    #[test]
    fn tenant_exit_releases_everything() {
        let mut m = native(100);
        for i in 0..5 {
            alloc(&mut m, i, 0, 3 * MIB);
        }
        alloc(&mut m, 9, 1, 7 * MIB);
        m.handle_tenant_exit(TenantId(0));
        assert_eq!(m.usage(TenantId(0)).vram_bytes, 0);
        assert_eq!(m.usage(TenantId(0)).vram_peak_bytes, 15 * MIB);
        assert_eq!(m.vram_used_bytes(), 7 * MIB);
        m.check_invariants().unwrap();
    }

    proptest! {
        /// Any sequence of allocations and frees keeps VRAM accounting conserved.
        #[test]
        fn accounting_is_conserved(ops in proptest::collection::vec((0u32..3, 0u64..20 * MIB, any::<bool>()), 1..60)) {
            let mut m = native(64);
            let mut live: Vec<(TenantId, BufferId)> = Vec::new();
            for (i, (tenant, bytes, free)) in ops.into_iter().enumerate() {
                if free && !live.is_empty() {
                    let (t, b) = live.remove(i % live.len());
                    prop_assert_eq!(m.handle_free(t, b), Ok(()));
                } else if let Action::Grant { tenant, buffer, .. } = alloc(&mut m, i as u64, tenant, bytes) {
                    live.push((tenant, buffer));
                }
                prop_assert_eq!(m.check_invariants(), Ok(()));
                let held: u64 = live.iter().map(|(_, b)| m.buffer(*b).unwrap().bytes).sum();
                prop_assert_eq!(held, m.vram_used_bytes());
            }
        }
    }
}
