//! `uvm`: unified memory as a memory policy. Managed allocations start in host memory;
//! the device's kernels fault their pages and the policy's paging machine
//! ([`crate::uvm::Paging`]) decides, batch by batch, what migrates, what leaves and what
//! is served remotely, with the prefetcher and the eviction policy the scenario names.
//! The registry parses its configuration once, into a typed [`PagingConfig`].

use super::hooks::{Ctx, MemoryPolicy, Placed, place_split};
use crate::buffer::{Buffer, BufferKind};
use crate::contract::Contract;
use crate::ids::{BufferId, TenantId};
use crate::protocol::{AllocError, AllocRequest, Fault, KernelStats, PageAction};
use crate::uvm::pages::{PAGE_BYTES, Pages};
use crate::uvm::{Paging, PagingConfig};

/// Unified memory's allocation side: the application's buffers are managed, placed in
/// host memory, and the paging machine decides their residency page by page; the
/// runtime's own buffers (stack, code, constants) are ordinary device memory, in VRAM
/// while it lasts, and the paging machine gets what they leave.
#[derive(Debug)]
pub(crate) struct Uvm {
    paging: Paging,
    /// What each live buffer is to the paging machine, by buffer slot.
    managed: Vec<Option<Managed>>,
}

/// A buffer under unified memory.
#[derive(Clone, Copy, Debug)]
enum Managed {
    /// Managed memory of this many bytes starting at this page.
    Pages { first: u64, bytes: u64 },
    /// A runtime buffer of `owner` holding this much VRAM outside the paging machine.
    Reserved { owner: u32, bytes: u64 },
}

impl Uvm {
    /// The policy for `vram_bytes` of VRAM, configured as `config` says.
    pub(crate) fn new(config: PagingConfig, vram_bytes: u64) -> Self {
        Self {
            paging: Paging::new(vram_bytes, config),
            managed: Vec::new(),
        }
    }
}

impl MemoryPolicy for Uvm {
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError> {
        match req.kind {
            BufferKind::Device => place_split(ctx.books, req, 0),
            BufferKind::System(_) => {
                let free = ctx.books.vram_free_bytes();
                place_split(ctx.books, req, free)
            }
        }
    }

    fn on_granted(&mut self, tenant: TenantId, buffer: &Buffer) {
        let i = buffer.id.slot();
        if self.managed.len() <= i {
            self.managed.resize(i + 1, None);
        }
        self.managed[i] = Some(match buffer.kind {
            BufferKind::Device => Managed::Pages {
                first: self
                    .paging
                    .add_allocation(tenant.0, buffer.id, buffer.bytes),
                bytes: buffer.bytes,
            },
            // The runtime's buffers take VRAM from the paging machine.
            BufferKind::System(_) => {
                let bytes = buffer.vram_bytes();
                self.paging.reserve(tenant.0, bytes);
                Managed::Reserved {
                    owner: tenant.0,
                    bytes,
                }
            }
        });
    }

    fn on_free(&mut self, _ctx: &mut Ctx, _tenant: TenantId, buffer: BufferId) {
        match self.managed.get_mut(buffer.slot()).and_then(Option::take) {
            Some(Managed::Pages { first, bytes }) => self.paging.free_allocation(first, bytes),
            Some(Managed::Reserved { owner, bytes }) => self.paging.unreserve(owner, bytes),
            None => {}
        }
    }

    fn on_contract(&mut self, tenant: TenantId, contract: &Contract) {
        self.paging.set_contract(tenant.0, contract);
    }

    fn on_kernel_finished(&mut self, _ctx: &mut Ctx, tenant: TenantId, stats: &KernelStats) {
        self.paging
            .kernel_finished(tenant.0, stats.finished_ns, stats.ns, stats.ideal_ns);
    }

    fn on_fault_batch(&mut self, faults: &[Fault], now_ns: u64) -> bool {
        self.paging.fault_batch(faults, now_ns);
        true
    }

    fn on_access_notes(&mut self, notes: &[(u32, Pages)]) -> bool {
        self.paging.access_notes(notes);
        true
    }

    fn on_migrations_done(&mut self) -> bool {
        self.paging.migrations_done();
        true
    }

    fn on_advise(&mut self, tenant: TenantId, advised: bool) {
        self.paging.set_advised(tenant.0, advised);
    }

    fn poll_page_action(&mut self) -> Option<PageAction> {
        self.paging.poll_action()
    }

    fn vram_outside_books(&self, tenant: TenantId) -> (u64, u64) {
        let (now, peak) = self.paging.owner_pages(tenant.0);
        (now * PAGE_BYTES, peak * PAGE_BYTES)
    }

    fn pop_usage_change(&mut self) -> Option<TenantId> {
        self.paging.pop_changed_owner().map(TenantId)
    }

    fn shared_capacity_bytes(&self) -> Option<u64> {
        Some(self.paging.capacity_pages() * PAGE_BYTES)
    }

    fn pages_migrated_in(&self, tenant: TenantId) -> u64 {
        self.paging.stats(tenant.0).pages_in
    }

    fn paging(&self) -> Option<&Paging> {
        Some(&self.paging)
    }

    fn check_invariants(&self) -> Result<(), String> {
        self.paging.check_invariants()
    }
}
