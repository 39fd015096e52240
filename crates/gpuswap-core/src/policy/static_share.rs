//! `static`: static partitioning. VRAM is cut into n equal parts (n known in advance:
//! by default the tenants' total weight) and a tenant may hold as many parts as its
//! weight (or its guarantee, if larger); the rest of its allocations go to host memory.

use super::hooks::{Ctx, MemoryPolicy, Placed, place_split};
use crate::protocol::{AllocError, AllocRequest};

/// Static partitioning into `tenants` equal parts, `weight` parts per tenant.
#[derive(Debug)]
pub(crate) struct StaticShare {
    pub(crate) tenants: u64,
}

impl MemoryPolicy for StaticShare {
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError> {
        // A guarantee larger than the tenant's parts is its share.
        let contract = ctx.books.contract(req.tenant);
        let share = (ctx.books.vram_capacity_bytes / self.tenants.max(1)
            * u64::from(contract.weight))
        .max(contract.vram_guarantee_bytes);
        let vram_share = share
            .saturating_sub(ctx.books.usage(req.tenant).vram_bytes)
            .min(ctx.books.vram_free_for(req.tenant));
        place_split(ctx.books, req, vram_share)
    }
}
