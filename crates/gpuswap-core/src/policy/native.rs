//! `native`: a stock driver. Allocations come from VRAM while it lasts (less what is
//! guaranteed to other tenants and not yet theirs), then fail.

use super::hooks::{Ctx, MemoryPolicy, Placed, place_split};
use crate::protocol::{AllocError, AllocRequest};

/// The stock driver's policy.
#[derive(Debug)]
pub(crate) struct Native;

impl MemoryPolicy for Native {
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError> {
        let (free_bytes, room_bytes) = (
            ctx.books.vram_free_bytes(),
            ctx.books.vram_free_for(req.tenant),
        );
        if req.bytes > room_bytes {
            return Err(if room_bytes == free_bytes {
                AllocError::OutOfMemory {
                    requested_bytes: req.bytes,
                    free_bytes,
                }
            } else {
                AllocError::OutOfUnpromisedMemory {
                    requested_bytes: req.bytes,
                    free_bytes,
                    promised_bytes: free_bytes - room_bytes,
                }
            });
        }
        place_split(ctx.books, req, req.bytes)
    }
}
