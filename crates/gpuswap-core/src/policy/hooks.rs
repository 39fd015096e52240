//! What a memory policy is: the [`MemoryPolicy`] hooks the manager calls, the [`Ctx`]
//! they act through, what they answer ([`Placed`], [`LaunchPrep`]) and the placement
//! helpers several modes share. A leaf apart from `mod.rs`, so that the modes, which
//! `mod.rs` declares, import it without importing their parent.

use std::collections::VecDeque;

use crate::accounting::Books;
use crate::buffer::Buffer;
use crate::contract::Contract;
use crate::gpu_time::turns::Turns;
use crate::ids::{BufferId, LaunchId, TenantId};
use crate::protocol::{Action, AllocError, AllocRequest, Fault, KernelStats, PageAction, Purpose};
use crate::relocation::{Move, Relocation, Then};
use crate::uvm::Paging;
use crate::uvm::pages::Pages;

/// How an allocation was placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// The buffer is ready.
    Now(BufferId),
    /// A relocation runs first; its end grants the buffer.
    AfterRelocation,
}

/// How a gated launch is prepared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LaunchPrep {
    /// It may start now.
    Ready,
    /// A relocation runs first; its end answers.
    AfterRelocation,
    /// It can never run.
    Fail(AllocError),
}

/// What a policy may touch while it decides: the books, the relocation machine and the
/// outgoing actions.
pub(crate) struct Ctx<'a> {
    pub(crate) books: &'a mut Books,
    pub(crate) relocation: &'a mut Relocation,
    pub(crate) out: &'a mut VecDeque<Action>,
    /// Set when a relocation started by the policy ended at once (nothing to move).
    pub(crate) finished: Option<Then>,
    /// The manager's turns, when it takes them.
    pub(crate) turns: Option<&'a Turns>,
}

impl Ctx<'_> {
    /// An empty plan to fill and hand to [`Ctx::relocate`] (reused storage: planning
    /// allocates nothing once plans have reached their working size).
    pub(crate) fn plan(&mut self) -> Vec<(TenantId, Move)> {
        self.relocation.take_plan()
    }

    /// Starts a relocation; a relocation with nothing to move ends at once.
    pub(crate) fn relocate(&mut self, purpose: Purpose, then: Then, moves: Vec<(TenantId, Move)>) {
        self.finished = self
            .relocation
            .start(purpose, then, moves, self.books, self.out);
    }
}

/// A memory policy. Hooks default to doing nothing; a policy overrides what it reacts
/// to. What it needs from the device is declared in its registry entry, not here, so
/// listings and the manager read one source. `on_alloc` and `on_launch` are only called while no relocation runs; the other
/// hooks must check [`Relocation::running`] before they start one.
pub(crate) trait MemoryPolicy: std::fmt::Debug + Send {
    /// Places a new buffer, or refuses it.
    fn on_alloc(&mut self, ctx: &mut Ctx, req: &AllocRequest) -> Result<Placed, AllocError>;

    /// A tenant freed a buffer (the books already dropped it).
    fn on_free(&mut self, _ctx: &mut Ctx, _tenant: TenantId, _buffer: BufferId) {}

    /// When the policy next wants [`MemoryPolicy::on_timeout`], if at all.
    fn next_timeout(&self, _books: &Books) -> Option<u64> {
        None
    }

    /// Time passed to `now_ns`.
    fn on_timeout(&mut self, _ctx: &mut Ctx, _now_ns: u64) {}

    /// A kernel of `tenant` finished (the books already hold its statistics).
    fn on_kernel_finished(&mut self, _ctx: &mut Ctx, _tenant: TenantId, _stats: &KernelStats) {}

    /// A gated launch of `tenant` was admitted by the scheduler: prepare its memory.
    fn on_launch(&mut self, _ctx: &mut Ctx, _tenant: TenantId, _launch: LaunchId) -> LaunchPrep {
        LaunchPrep::Ready
    }

    /// `tenant` started under `contract` (the books hold it already), or ended (the
    /// default contract): for a policy that keeps terms of its own (unified memory's
    /// pages).
    fn on_contract(&mut self, _tenant: TenantId, _contract: &Contract) {}

    /// `buffer` of `tenant` is granted (just before its `Map`).
    fn on_granted(&mut self, _tenant: TenantId, _buffer: &Buffer) {}

    /// A batch of page faults at `now_ns` (see [`crate::protocol`]); `false`: the policy
    /// does not page.
    fn on_fault_batch(&mut self, _faults: &[Fault], _now_ns: u64) -> bool {
        false
    }

    /// Access-counter notes of resident pages touched, in order; `false`: the policy
    /// does not page.
    fn on_access_notes(&mut self, _notes: &[(u32, Pages)]) -> bool {
        false
    }

    /// The device finished the migrations asked; `false`: the policy does not page.
    fn on_migrations_done(&mut self) -> bool {
        false
    }

    /// The kernel scheduler advises `tenant`'s memory to the host (PILOT's MAdvise) or
    /// lifts the advice: what is not in VRAM is then mapped remotely.
    fn on_advise(&mut self, _tenant: TenantId, _advised: bool) {}

    /// The next page-state change for the device.
    fn poll_page_action(&mut self) -> Option<PageAction> {
        None
    }

    /// VRAM `tenant` holds outside the books (now, at most so far): managed pages.
    fn vram_outside_books(&self, _tenant: TenantId) -> (u64, u64) {
        (0, 0)
    }

    /// A tenant whose VRAM outside the books changed since it was last returned.
    fn pop_usage_change(&mut self) -> Option<TenantId> {
        None
    }

    /// Whether its tenants' data lives in chunks the relocation moves: turns then move a
    /// holder's overflow in and the others' out at each handover; otherwise turns only
    /// share the GPU's time.
    fn moves_chunks(&self) -> bool {
        false
    }

    /// VRAM the policy shares among kernels' working sets when less than all of it
    /// (the kernel scheduler's capacity).
    fn shared_capacity_bytes(&self) -> Option<u64> {
        None
    }

    /// Pages migrated in for `tenant` so far (the kernel scheduler's view of its active
    /// memory).
    fn pages_migrated_in(&self, _tenant: TenantId) -> u64 {
        0
    }

    /// The paging machine, for reports and the device's auditor.
    fn paging(&self) -> Option<&Paging> {
        None
    }

    /// The policy's own invariants, beyond the books'.
    fn check_invariants(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Checks that host memory can take `host_bytes_needed` of a request.
pub(crate) fn check_host_room(
    books: &Books,
    req: &AllocRequest,
    host_bytes_needed: u64,
) -> Result<(), AllocError> {
    let free_bytes = books.host_free_bytes();
    if host_bytes_needed > free_bytes {
        return Err(AllocError::OutOfHostMemory {
            requested_bytes: req.bytes,
            free_bytes,
        });
    }
    Ok(())
}

/// Bytes of a request's chunks beyond its first `vram_share_bytes`: the part that
/// starts in host memory when the chunks that end within `vram_share_bytes` go to VRAM.
/// Computed, not summed chunk by chunk: a request of exabytes must be refused at once.
pub(crate) fn host_part_bytes(books: &Books, req: &AllocRequest, vram_share_bytes: u64) -> u64 {
    if req.bytes <= vram_share_bytes {
        return 0;
    }
    // Every chunk that ends within the share is whole; the one across its end and the
    // rest start in host memory.
    let chunk = books.chunk_bytes;
    req.bytes - vram_share_bytes / chunk * chunk
}

/// Checks that the requester's `host_limit` can take `host_bytes_needed` of a request.
pub(crate) fn check_host_limit(
    books: &Books,
    req: &AllocRequest,
    host_bytes_needed: u64,
) -> Result<(), AllocError> {
    let room_bytes = books.host_room_under_limit(req.tenant);
    if host_bytes_needed > room_bytes {
        return Err(AllocError::OverHostLimit {
            requested_bytes: req.bytes,
            host_bytes_needed,
            room_bytes,
        });
    }
    Ok(())
}

/// The common placement of the modes that split a buffer at a byte offset: the first
/// `vram_share_bytes` in whole chunks go to VRAM (never beyond the tenant's VRAM cap),
/// the rest to host memory (never beyond its host limit).
pub(crate) fn place_split(
    books: &mut Books,
    req: &AllocRequest,
    vram_share_bytes: u64,
) -> Result<Placed, AllocError> {
    if req.bytes == 0 {
        return Err(AllocError::ZeroBytes);
    }
    let vram_share_bytes = vram_share_bytes.min(books.vram_room_under_cap(req.tenant));
    let host_bytes_needed = host_part_bytes(books, req, vram_share_bytes);
    check_host_limit(books, req, host_bytes_needed)?;
    check_host_room(books, req, host_bytes_needed)?;
    let id = books.create_buffer(req, vram_share_bytes, false);
    books.note_peak(req.tenant);
    Ok(Placed::Now(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{BufferKind, chunk_layout};
    use crate::ids::RequestId;
    use proptest::prelude::*;

    proptest! {
        /// The computed host part equals the sum over the chunks that do not end within
        /// the VRAM share.
        #[test]
        fn host_part_is_the_chunks_beyond_the_share(
            bytes in 1u64..1 << 32,
            chunk in 4096u64..1 << 24,
            share in 0u64..1 << 33,
        ) {
            let books = Books::new(1 << 30, 1 << 40, chunk, 0);
            let req = AllocRequest {
                request: RequestId(0),
                tenant: TenantId(0),
                bytes,
                kind: BufferKind::Device,
                priority: None,
                chunk_priorities: Vec::new(),
            };
            let summed: u64 = chunk_layout(bytes, chunk)
                .filter(|(offset, len)| offset + len > share)
                .map(|(_, len)| len)
                .sum();
            prop_assert_eq!(host_part_bytes(&books, &req, share), summed);
        }
    }
}
