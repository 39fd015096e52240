//! `uvm`: unified memory. Managed allocations start in host memory; kernels touch their
//! pages and the manager's paging machine ([`crate::uvm::Paging`]) migrates them on
//! faults, with the prefetcher and the eviction policy the scenario names.

use super::{Ctx, MemoryPolicy, Placed, place_split};
use crate::protocol::{AllocError, AllocRequest};

/// Unified memory's allocation side: every buffer is placed in host memory; the
/// manager's paging machine decides residency page by page.
#[derive(Debug)]
pub(crate) struct Uvm;

impl MemoryPolicy for Uvm {
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError> {
        place_split(ctx.books, req, 0)
    }
}
