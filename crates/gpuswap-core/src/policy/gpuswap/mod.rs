//! `gpuswap`: GPUswap (Kehne et al., VEE 2015). Every allocation is served; when VRAM
//! runs short, chunks of a victim are relocated to host memory and remapped there; a
//! periodic return check brings evicted data back into free VRAM, poorest tenant first.
//! Victim and chunk choice are smaller policies ([`victim`], [`chunk`]).

pub(crate) mod chunk;
pub(crate) mod victim;

use super::hooks::{Ctx, MemoryPolicy, Placed, check_host_limit, check_host_room, host_part_bytes};
use crate::buffer::Location;
use crate::ids::{BufferId, TenantId};
use crate::lists::ChunkRef;
use crate::protocol::{Action, AllocError, AllocRequest, Execution, KernelStats, Purpose};
use crate::relocation::{Move, Then};
use chunk::ChunkChoice;
use victim::VictimChoice;

/// GPUswap with its victim and chunk policies.
#[derive(Debug)]
pub(crate) struct Gpuswap {
    pub(crate) victim: Box<dyn VictimChoice>,
    pub(crate) chunk: Box<dyn ChunkChoice>,
    /// The victim policy's [`VictimChoice::wants_access_rates`], asked once: the driver
    /// polls the timeout after every event.
    pub(crate) wants_access_rates: bool,
    pub(crate) return_interval_ns: u64,
    pub(crate) last_check_ns: u64,
}

impl MemoryPolicy for Gpuswap {
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError> {
        if req.bytes == 0 {
            return Err(AllocError::ZeroBytes);
        }
        // The part of the buffer beyond the tenant's VRAM cap starts in host memory.
        let vram_share_bytes = ctx.books.vram_room_under_cap(req.tenant).min(req.bytes);
        let spilled_bytes = host_part_bytes(ctx.books, req, vram_share_bytes);
        check_host_limit(ctx.books, req, spilled_bytes)?;
        // What does not fit in free VRAM goes to host memory, as chunks of victims or
        // of the new buffer; whole chunks overshoot by less than one chunk, so that much
        // host memory must be free too (the check found evictions over-committing it).
        let over_bytes = (req.bytes - spilled_bytes).saturating_sub(ctx.books.vram_free_bytes());
        let host_bytes_needed = match over_bytes {
            0 => spilled_bytes,
            over => spilled_bytes + over.saturating_add(ctx.books.chunk_bytes - 1),
        };
        check_host_room(ctx.books, req, host_bytes_needed)?;
        let id = ctx
            .books
            .create_buffer(req, vram_share_bytes, self.chunk.per_chunk_priorities());
        if !ctx.books.over_committed() {
            ctx.books.note_peak(req.tenant);
            return Ok(Placed::Now(id));
        }
        // The grant comes from the relocation job when it ends (at once if only chunks of
        // the new buffer were chosen).
        self.evict_for(ctx, req, id)?;
        ctx.books.note_peak(req.tenant);
        Ok(Placed::AfterRelocation)
    }

    fn next_timeout(&self, books: &crate::accounting::Books) -> Option<u64> {
        (self.wants_access_rates || books.any_evicted())
            .then_some(self.last_check_ns + self.return_interval_ns)
    }

    fn on_timeout(&mut self, ctx: &mut Ctx, now_ns: u64) {
        let period_s = now_ns.saturating_sub(self.last_check_ns).max(1) as f64 / 1e9;
        self.last_check_ns = now_ns;
        // Only the access-rate victim reads the rates: the others' timeouts skip the
        // scan of every tenant.
        if self.wants_access_rates {
            for state in ctx.books.tenants_mut() {
                state.access_rate = state.accesses_in_period as f64 / period_s;
                state.accesses_in_period = 0;
            }
        }
        if !ctx.relocation.running() {
            self.plan_return(ctx);
        }
    }

    fn moves_chunks(&self) -> bool {
        true
    }

    fn on_kernel_finished(&mut self, ctx: &mut Ctx, tenant: TenantId, stats: &KernelStats) {
        if self.chunk.swaps_referenced() && !ctx.relocation.running() {
            self.plan_swap(ctx, tenant, &stats.referenced);
        }
    }
}

impl Gpuswap {
    /// The policy loop: choose victims and chunks until the request fits; chunks of the
    /// new buffer go to host memory directly, the others are relocated before the grant.
    fn evict_for(
        &mut self,
        ctx: &mut Ctx,
        req: &AllocRequest,
        new_buffer: BufferId,
    ) -> Result<(), AllocError> {
        let mut moves = ctx.plan();
        let mut chosen = 0;
        let mut entries_walked = 0u64;
        // Under turns a tenant that does not run while others do spills its own new
        // chunks first: their hot VRAM stays theirs.
        let yields = ctx
            .turns
            .is_some_and(|t| t.yields(req.tenant, ctx.relocation.is_parked(req.tenant)));
        // And the holder takes from the parked tenants first: their data is cold.
        let parked: Vec<TenantId> = match ctx.turns.and_then(|t| t.holder()) {
            Some(holder) if holder == req.tenant => ctx.relocation.parked().collect(),
            _ => Vec::new(),
        };
        let books = &mut *ctx.books;
        while books.over_committed() {
            books.sort_tenants();
            let own_first = yields
                .then(|| own_new_chunk(books, req, new_buffer))
                .flatten();
            let chosen_victim = match own_first {
                Some(_) => None,
                None => {
                    parked_giver(books, &parked).or_else(|| self.victim.choose(books, req.tenant))
                }
            };
            let (victim, chunk) = match chosen_victim {
                Some(victim) => {
                    books.flush(victim, Location::Vram);
                    let resident = &books.tenant(victim).expect("a victim is known").resident;
                    // The prototype's walk visits every tenant, whatever our order saves.
                    entries_walked += (books.tenant_slots() + resident.len()) as u64;
                    let chunk = self
                        .chunk
                        .evict(resident)
                        .expect("the victim has resident chunks");
                    (victim, chunk)
                }
                // Nobody may give without going under a guarantee or over a host limit
                // (without contracts the requester always may). The new buffer's own
                // chunks may still start in host memory: that takes nothing the
                // requester held.
                None => match own_first.or_else(|| own_new_chunk(books, req, new_buffer)) {
                    Some(chunk) => (req.tenant, chunk),
                    None => {
                        for (_, m) in moves {
                            books.unplan_move(m.chunk);
                        }
                        books
                            .free(req.tenant, new_buffer)
                            .expect("the new buffer is the requester's");
                        return Err(AllocError::NoVictim {
                            requested_bytes: req.bytes,
                        });
                    }
                },
            };
            chosen += 1;
            if chunk.buffer == new_buffer {
                // Nothing to copy: the chunk starts its life in host memory.
                books.place_in_host(chunk);
            } else {
                books.plan_move(chunk, Location::Host);
                moves.push((
                    victim,
                    Move {
                        chunk,
                        to: Location::Host,
                    },
                ));
            }
            if chosen_victim.is_some() {
                books.note_victim(victim);
            }
        }
        ctx.out.push_back(Action::Execution(Execution::PolicyRan {
            tenant: req.tenant,
            chunks: chosen,
            entries_walked,
        }));
        ctx.relocate(
            Purpose::Evict,
            Then::Grant(req.request, req.tenant, new_buffer),
            moves,
        );
        Ok(())
    }

    /// The return path: winners (least VRAM first) get their highest-priority evicted
    /// chunks back while they fit in free VRAM.
    fn plan_return(&mut self, ctx: &mut Ctx) {
        let mut moves = ctx.plan();
        let books = &mut *ctx.books;
        loop {
            books.sort_tenants();
            let Some(winner) = victim::select_winner(books) else {
                break;
            };
            books.flush(winner, Location::Host);
            let evicted = &books.tenant(winner).expect("a winner is known").evicted;
            let chunk = chunk::select_chunk_to_return(evicted).expect("has evicted");
            let bytes = books.chunk(chunk).expect("listed").bytes;
            if bytes > books.vram_free_bytes() {
                break;
            }
            books.plan_move(chunk, Location::Vram);
            books.note_peak(winner);
            moves.push((
                winner,
                Move {
                    chunk,
                    to: Location::Vram,
                },
            ));
        }
        ctx.relocate(Purpose::Return, Then::Nothing, moves);
    }

    /// Reverse swapping: each referenced evicted chunk comes back in exchange for a
    /// random resident chunk at least as large.
    fn plan_swap(&mut self, ctx: &mut Ctx, tenant: TenantId, referenced: &[ChunkRef]) {
        let mut moves = ctx.plan();
        let books = &mut *ctx.books;
        for &hot in referenced {
            let Some(chunk) = books.chunk(hot) else {
                continue;
            };
            if chunk.planned_location() != Location::Host || chunk.moving_to.is_some() {
                continue;
            }
            let bytes = chunk.bytes;
            // The random resident chunk is the first in rank order that can take the hot
            // chunk's place: a shorter remainder chunk or another hot chunk is passed
            // over, not a reason to give up the swap.
            books.flush(tenant, Location::Vram);
            let Some(state) = books.tenant(tenant) else {
                break;
            };
            let Some(cold) = state.resident.by_rank().find(|c| {
                !referenced.contains(c) && books.chunk(*c).is_some_and(|c| c.bytes >= bytes)
            }) else {
                continue;
            };
            // A longer cold chunk takes more host memory than the hot one gives back.
            // Nor below the tenant's guarantee.
            let cold_bytes = books.chunk(cold).expect("listed").bytes;
            if !books.may_give(tenant, cold_bytes - bytes) {
                continue;
            }
            books.plan_move(cold, Location::Host);
            books.plan_move(hot, Location::Vram);
            books.note_peak(tenant);
            moves.push((
                tenant,
                Move {
                    chunk: cold,
                    to: Location::Host,
                },
            ));
            moves.push((
                tenant,
                Move {
                    chunk: hot,
                    to: Location::Vram,
                },
            ));
        }
        ctx.relocate(Purpose::Swap, Then::Nothing, moves);
    }
}

/// Of `parked`, the tenant holding the most VRAM that may give a chunk.
fn parked_giver(books: &crate::accounting::Books, parked: &[TenantId]) -> Option<TenantId> {
    parked
        .iter()
        .filter_map(|t| books.tenant(*t).map(|b| (*t, b)))
        .filter(|(_, b)| b.can_give(books.chunk_bytes))
        .max_by_key(|(t, b)| (b.usage.vram_bytes, std::cmp::Reverse(*t)))
        .map(|(t, _)| t)
}

/// A chunk of the requester's new buffer still planned in VRAM, when its host limit has
/// room for a whole chunk.
fn own_new_chunk(
    books: &crate::accounting::Books,
    req: &AllocRequest,
    new_buffer: BufferId,
) -> Option<crate::lists::ChunkRef> {
    if books.host_room_under_limit(req.tenant) < books.chunk_bytes {
        return None;
    }
    books.chunk_refs(new_buffer, Location::Vram).last().copied()
}
