//! `gdev`: Gdev-style software scheduling. Allocations take whole buffers from VRAM
//! while it lasts, then from host memory; before each launch the launching tenant's
//! buffers are copied into VRAM whole, evicting other tenants' buffers whole (least
//! recently launched tenant of the lowest priority class first). A tenant whose buffers
//! do not fit cannot launch.

use std::collections::BTreeMap;

use super::hooks::{Ctx, LaunchPrep, MemoryPolicy, Placed, place_split};
use crate::buffer::Location;
use crate::ids::{LaunchId, TenantId};
use crate::protocol::{AllocError, AllocRequest, Purpose};
use crate::relocation::{Move, Then};

/// Gdev's memory side (its compute scheduler, one context at a time, is
/// [`crate::gpu_time::launch_gate::GdevCompute`]).
#[derive(Debug, Default)]
pub(crate) struct Gdev {
    /// When each tenant last launched (a launch counter), for LRU eviction.
    last_launch: BTreeMap<TenantId, u64>,
    launches: u64,
}

impl MemoryPolicy for Gdev {
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError> {
        // Whole buffers: all in VRAM or all in host memory.
        let share = if req.bytes <= ctx.books.vram_free_for(req.tenant) {
            req.bytes
        } else {
            0
        };
        place_split(ctx.books, req, share)
    }

    fn on_launch(&mut self, ctx: &mut Ctx, tenant: TenantId, launch: LaunchId) -> LaunchPrep {
        self.launches += 1;
        self.last_launch.insert(tenant, self.launches);
        let books = &mut *ctx.books;
        let total: u64 = books.buffers_of(tenant).map(|b| b.bytes).sum();
        if total > books.vram_capacity_bytes {
            return LaunchPrep::Fail(AllocError::OutOfMemory {
                requested_bytes: total,
                free_bytes: books.vram_capacity_bytes,
            });
        }
        let needed = books.usage(tenant).host_bytes;
        let mut victims: Vec<(u8, u64, crate::ids::BufferId)> = books
            .all_buffers()
            .filter(|b| b.tenant != tenant && b.planned_bytes_at(Location::Vram) > 0)
            .map(|b| {
                let class = books.contract(b.tenant).priority_class;
                let launched = self.last_launch.get(&b.tenant).copied().unwrap_or(0);
                (class, launched, b.id)
            })
            .collect();
        victims.sort_unstable();
        // Whole buffers out, lowest priority class and then least recently launched
        // first, until the launcher's fit.
        let mut out_bytes = 0;
        let chosen: Vec<_> = victims
            .into_iter()
            .map(|(_, _, id)| id)
            .take_while(|id| {
                let more = books.vram_free_bytes() + out_bytes < needed;
                if more {
                    out_bytes += books
                        .buffer(*id)
                        .expect("live")
                        .planned_bytes_at(Location::Vram);
                }
                more
            })
            .collect();
        // Host memory takes the victims' buffers before it gives back the launcher's.
        let host_free_bytes = books.host_free_bytes();
        if out_bytes > host_free_bytes + needed {
            return LaunchPrep::Fail(AllocError::OutOfHostMemory {
                requested_bytes: total,
                free_bytes: host_free_bytes,
            });
        }
        let mut moves = ctx.relocation.take_plan();
        for id in chosen {
            plan_whole(books, id, Location::Host, &mut moves);
        }
        let own: Vec<_> = books.buffers_of(tenant).map(|b| b.id).collect();
        for id in own {
            plan_whole(books, id, Location::Vram, &mut moves);
        }
        books.note_peak(tenant);
        ctx.relocate(Purpose::Launch, Then::LaunchReady(tenant, launch), moves);
        LaunchPrep::AfterRelocation
    }
}

/// Plans the move of every chunk of `buffer` that is not yet at `to`.
fn plan_whole(
    books: &mut crate::accounting::Books,
    buffer: crate::ids::BufferId,
    to: Location,
    moves: &mut Vec<(TenantId, Move)>,
) {
    let owner = books.buffer(buffer).expect("live").tenant;
    for chunk in books.chunk_refs(buffer, to.other()) {
        books.plan_move(chunk, to);
        moves.push((owner, Move { chunk, to }));
    }
}
