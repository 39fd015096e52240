//! `fcfs`: first come, first served. Chunks beyond free VRAM go straight to host
//! memory and stay there.

use super::hooks::{Ctx, MemoryPolicy, Placed, place_split};
use crate::protocol::{AllocError, AllocRequest};

/// First come, first served.
#[derive(Debug)]
pub(crate) struct Fcfs;

impl MemoryPolicy for Fcfs {
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError> {
        let free = ctx.books.vram_free_for(req.tenant);
        place_split(ctx.books, req, free)
    }
}
