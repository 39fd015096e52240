//! `static`: static partitioning. Each of n tenants (known in advance) may hold 1/n of
//! VRAM; the rest of its allocations go to host memory.

use super::hooks::{Ctx, MemoryPolicy, Placed, place_split};
use crate::protocol::{AllocError, AllocRequest};

/// Static partitioning into `tenants` equal shares.
#[derive(Debug)]
pub(crate) struct StaticShare {
    pub(crate) tenants: u64,
}

impl MemoryPolicy for StaticShare {
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError> {
        let share = ctx.books.vram_capacity_bytes / self.tenants.max(1);
        let vram_share = share
            .saturating_sub(ctx.books.usage(req.tenant).vram_bytes)
            .min(ctx.books.vram_free_bytes());
        place_split(ctx.books, req, vram_share)
    }
}
