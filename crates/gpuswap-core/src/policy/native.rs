//! `native`: a stock driver. Allocations come from VRAM while it lasts, then fail.

use super::hooks::{Ctx, MemoryPolicy, Placed, place_split};
use crate::protocol::{AllocError, AllocRequest};

/// The stock driver's policy.
#[derive(Debug)]
pub(crate) struct Native;

impl MemoryPolicy for Native {
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError> {
        let free_bytes = ctx.books.vram_free_for(req.tenant);
        if req.bytes > free_bytes {
            return Err(AllocError::OutOfMemory {
                requested_bytes: req.bytes,
                free_bytes,
            });
        }
        place_split(ctx.books, req, req.bytes)
    }
}
