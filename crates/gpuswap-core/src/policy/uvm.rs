//! `uvm`: unified memory. Managed allocations start in host memory; kernels touch their
//! pages and the manager's paging machine ([`crate::uvm::Paging`]) migrates them on
//! faults, with the prefetcher and the eviction policy the scenario names.

use super::{Ctx, MemoryPolicy, Placed, place_split};
use crate::buffer::BufferKind;
use crate::protocol::{AllocError, AllocRequest};

/// Unified memory's allocation side: the application's buffers are managed, placed in
/// host memory, and the manager's paging machine decides their residency page by page;
/// the runtime's own buffers (stack, code, constants) are ordinary device memory, in VRAM
/// while it lasts, and the paging machine gets what they leave.
#[derive(Debug)]
pub(crate) struct Uvm;

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
}
