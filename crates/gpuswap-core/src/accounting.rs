//! The books: every buffer and chunk, where each is planned to be, and the per-tenant
//! and global byte counts that follow from it. Policies decide; the books only record,
//! and [`Books::check_invariants`] re-derives every figure from the chunks.

use std::collections::BTreeSet;

use crate::buffer::{
    Buffer, BufferKind, BufferTable, Chunk, Location, PRIORITY_DEFAULT, PRIORITY_STACK,
    PRIORITY_SYSTEM, SystemBuffer, chunk_layout,
};
use crate::contract::{Contract, keeps_guarantee};
use crate::ids::{BufferId, TenantId};
use crate::lists::{ChunkLists, ChunkRef, rank};
use crate::order::{GiveKey, TakeKey, TenantOrder};
use crate::protocol::{AllocRequest, FreeError, TenantUsage};

/// What the victim policies that scan every tenant (performance, access-rate) know about
/// one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TenantView {
    pub id: TenantId,
    /// VRAM held, counting chunks already chosen as gone and the request as held.
    pub vram_bytes: u64,
    /// Whether the tenant may give a chunk ([`TenantBooks::can_give`]).
    pub can_give: bool,
    /// Estimated slowdown (1 when unknown).
    pub slowdown: f64,
    /// Memory accesses per second in the last measurement period.
    pub access_rate: f64,
    /// Its contract's weight (shares under pressure are proportional to it).
    pub weight: u32,
    /// Its contract's priority class (higher: evicted last, returned to first).
    pub priority_class: u8,
}

/// What the books know about one tenant.
#[derive(Debug, Default)]
pub(crate) struct TenantBooks {
    pub(crate) usage: TenantUsage,
    /// Chunks accounted in VRAM, by priority.
    pub(crate) resident: ChunkLists,
    /// Chunks accounted in host memory, by priority.
    pub(crate) evicted: ChunkLists,
    /// Live buffers, in allocation order.
    pub(crate) buffers: BTreeSet<BufferId>,
    /// Allocations so far: numbers buffers for the chunks' random ranks.
    allocations: u64,
    /// Kernel time and its all-in-VRAM estimate, for slowdown estimates.
    pub(crate) kernel_ns: u64,
    pub(crate) ideal_ns: u64,
    /// Accesses since the last rate measurement, and the last measured rate.
    pub(crate) accesses_in_period: u64,
    pub(crate) access_rate: f64,
    /// Whether `usage.vram_bytes` changed since the driver last asked.
    usage_changed: bool,
    /// What it is promised and limited to.
    pub(crate) contract: Contract,
    /// Memory it holds that the manager cannot move (managed memory the driver pages,
    /// buffers pinned for IPC): outside the chunks, counted against its share, its VRAM
    /// cap and its memory limit ([`Held::set_unmovable`](crate::Held::set_unmovable)).
    pub(crate) unmovable_bytes: u64,
}

impl TenantBooks {
    /// The VRAM it counts as holding: its chunks in VRAM and what cannot move.
    pub(crate) fn vram_share_bytes(&self) -> u64 {
        self.usage.vram_bytes.saturating_add(self.unmovable_bytes)
    }

    /// Guaranteed VRAM it does not hold yet.
    fn unfilled_guarantee_bytes(&self) -> u64 {
        self.contract
            .vram_guarantee_bytes
            .saturating_sub(self.usage.vram_bytes)
    }

    /// Whether it may give a resident chunk up: it has one, holds a whole chunk more than
    /// its guarantee (if it has one), so any chunk it gives leaves it at or over the
    /// guarantee, and has host memory left under its host limit for a whole chunk.
    pub(crate) fn can_give(&self, chunk_bytes: u64) -> bool {
        let (usage, contract) = (self.usage, self.contract);
        !self.resident.is_empty()
            && keeps_guarantee(usage.vram_bytes, contract.vram_guarantee_bytes, chunk_bytes)
            && usage.host_bytes.saturating_add(chunk_bytes) <= contract.host_cap_bytes()
    }

    /// Whether it may get an evicted chunk back: it has one and VRAM left under its cap
    /// for a whole chunk.
    pub(crate) fn can_take(&self, chunk_bytes: u64) -> bool {
        !self.evicted.is_empty()
            && self.vram_share_bytes().saturating_add(chunk_bytes) <= self.contract.vram_cap_bytes()
    }

    /// Its places in the [`TenantOrder`] as tenant `id`.
    fn order_keys(&self, id: TenantId, chunk_bytes: u64) -> (Option<GiveKey>, Option<TakeKey>) {
        let (vram_bytes, weight, class) = (
            self.vram_share_bytes(),
            self.contract.weight,
            self.contract.priority_class,
        );
        let give = self
            .can_give(chunk_bytes)
            .then(|| GiveKey::new(id, vram_bytes, weight, class));
        let take = self.can_take(chunk_bytes).then_some(TakeKey {
            class,
            vram_bytes,
            weight,
            id,
        });
        (give, take)
    }
}

/// Buffers, chunks and byte counts of every tenant.
#[derive(Debug)]
pub(crate) struct Books {
    pub(crate) vram_capacity_bytes: u64,
    pub(crate) host_capacity_bytes: u64,
    pub(crate) chunk_bytes: u64,
    seed: u64,
    buffers: BufferTable,
    /// Indexed by tenant number: drivers number tenants densely.
    tenants: Vec<TenantBooks>,
    pub(crate) vram_used_bytes: u64,
    pub(crate) host_used_bytes: u64,
    next_buffer: u64,
    /// Tenants with at least one chunk accounted in host memory: the return path's timer
    /// needs this without a scan of every tenant after every event.
    tenants_with_evicted: usize,
    /// Tenants whose VRAM figure changed since the driver last asked, in order of change.
    usage_changes: Vec<TenantId>,
    /// The guarantees of the tenants with a contract, and the part of them not yet held:
    /// admission and the modes that reserve read them without a scan of every tenant.
    guaranteed_bytes: u64,
    unfilled_guarantee_bytes: u64,
    /// The first time a policy chose a victim its contract protects (for
    /// [`Books::check_invariants`]).
    breach: Option<String>,
    /// The tenants that may give or take a chunk, in the orders victim and return
    /// choices compare them by; re-placed by [`Books::sort_tenants`].
    order: TenantOrder,
}

impl Books {
    pub(crate) fn new(vram_bytes: u64, host_bytes: u64, chunk_bytes: u64, seed: u64) -> Self {
        Self {
            vram_capacity_bytes: vram_bytes,
            host_capacity_bytes: host_bytes,
            chunk_bytes,
            seed,
            buffers: BufferTable::default(),
            tenants: Vec::new(),
            vram_used_bytes: 0,
            host_used_bytes: 0,
            next_buffer: 0,
            tenants_with_evicted: 0,
            usage_changes: Vec::new(),
            guaranteed_bytes: 0,
            unfilled_guarantee_bytes: 0,
            breach: None,
            order: TenantOrder::default(),
        }
    }

    /// VRAM that `tenant` may take: free VRAM less what is guaranteed to others and not
    /// yet held by them (the reservation of the modes that cannot evict).
    pub(crate) fn vram_free_for(&self, tenant: TenantId) -> u64 {
        let own = self
            .tenant(tenant)
            .map_or(0, TenantBooks::unfilled_guarantee_bytes);
        self.vram_free_bytes()
            .saturating_sub(self.unfilled_guarantee_bytes - own)
    }

    /// The guarantees of every tenant with a contract.
    pub(crate) fn guaranteed_bytes(&self) -> u64 {
        self.guaranteed_bytes
    }

    /// A tenant's contract (the default for one not seen).
    pub(crate) fn contract(&self, tenant: TenantId) -> Contract {
        self.tenant(tenant).map(|t| t.contract).unwrap_or_default()
    }

    /// VRAM `tenant` may still take under its cap (`vram_limit`, or `memory_limit` under
    /// `spill`).
    pub(crate) fn vram_room_under_cap(&self, tenant: TenantId) -> u64 {
        self.tenant(tenant).map_or(u64::MAX, |t| {
            t.contract
                .vram_cap_bytes()
                .saturating_sub(t.vram_share_bytes())
        })
    }

    /// Whether `tenant` may move `giving_bytes` more of its VRAM to host memory: the
    /// host memory free and its `host_limit` have room, and it keeps its guarantee.
    pub(crate) fn may_give(&self, tenant: TenantId, giving_bytes: u64) -> bool {
        let host_room = self
            .host_free_bytes()
            .min(self.host_room_under_limit(tenant));
        giving_bytes <= host_room
            && keeps_guarantee(
                self.usage(tenant).vram_bytes,
                self.contract(tenant).vram_guarantee_bytes,
                giving_bytes,
            )
    }

    /// Host memory `tenant`'s data may still take under its `host_limit`.
    pub(crate) fn host_room_under_limit(&self, tenant: TenantId) -> u64 {
        self.tenant(tenant).map_or(u64::MAX, |t| {
            t.contract
                .host_cap_bytes()
                .saturating_sub(t.usage.host_bytes)
        })
    }

    /// Gives `tenant` its contract (the default when it ends).
    pub(crate) fn set_contract(&mut self, tenant: TenantId, contract: Contract) {
        let state = self.tenant_mut(tenant);
        let (old_guarantee, old_unfilled) = (
            state.contract.vram_guarantee_bytes,
            state.unfilled_guarantee_bytes(),
        );
        state.contract = contract;
        let unfilled = state.unfilled_guarantee_bytes();
        self.guaranteed_bytes =
            self.guaranteed_bytes - old_guarantee + contract.vram_guarantee_bytes;
        self.unfilled_guarantee_bytes = self.unfilled_guarantee_bytes - old_unfilled + unfilled;
        self.order.mark(tenant);
    }

    /// A policy took a chunk of `tenant` from VRAM: recorded as a breach when it now
    /// holds less than its guarantee, for [`Books::check_invariants`].
    pub(crate) fn note_victim(&mut self, tenant: TenantId) {
        let Some(state) = self.tenant(tenant) else {
            return;
        };
        let (held, guarantee) = (state.usage.vram_bytes, state.contract.vram_guarantee_bytes);
        if held < guarantee && self.breach.is_none() {
            self.breach = Some(format!(
                "{tenant} was a victim and holds {held} bytes of VRAM, less than its guarantee of {guarantee}"
            ));
        }
    }

    pub(crate) fn vram_free_bytes(&self) -> u64 {
        self.vram_capacity_bytes
            .saturating_sub(self.vram_used_bytes)
    }

    pub(crate) fn host_free_bytes(&self) -> u64 {
        self.host_capacity_bytes - self.host_used_bytes
    }

    pub(crate) fn over_committed(&self) -> bool {
        self.vram_used_bytes > self.vram_capacity_bytes
    }

    pub(crate) fn any_evicted(&self) -> bool {
        self.tenants_with_evicted > 0
    }

    pub(crate) fn tenant(&self, id: TenantId) -> Option<&TenantBooks> {
        self.tenants.get(id.0 as usize)
    }

    pub(crate) fn tenant_mut(&mut self, id: TenantId) -> &mut TenantBooks {
        let i = id.0 as usize;
        if i >= self.tenants.len() {
            self.tenants.resize_with(i + 1, TenantBooks::default);
        }
        &mut self.tenants[i]
    }

    /// Clears the record of `tenant`, which owns nothing, for a new tenant of that
    /// number.
    pub(crate) fn restart_tenant(&mut self, tenant: TenantId) {
        let state = self.tenant_mut(tenant);
        debug_assert!(state.buffers.is_empty());
        if !state.evicted.is_empty() {
            self.tenants_with_evicted -= 1;
        }
        self.set_contract(tenant, Contract::default());
        *self.tenant_mut(tenant) = TenantBooks::default();
        self.usage_changes.retain(|t| *t != tenant);
    }

    pub(crate) fn buffer_slots(&self) -> usize {
        self.buffers.slots()
    }

    /// Tenant numbers in use so far (every tenant seen, and the gaps below them).
    pub(crate) fn tenant_slots(&self) -> usize {
        self.tenants.len()
    }

    /// Re-places every tenant whose figures changed since the last call: policies call it
    /// before they read [`Books::tenant_order`]. Costs a tree update per changed tenant.
    pub(crate) fn sort_tenants(&mut self) {
        while let Some(tenant) = self.order.pop_stale() {
            let (give, take) = self.tenants[tenant.0 as usize].order_keys(tenant, self.chunk_bytes);
            self.order.place(tenant, give, take);
        }
    }

    /// The tenants that may give or take a chunk, in order (after [`Books::sort_tenants`]).
    pub(crate) fn tenant_order(&self) -> &TenantOrder {
        &self.order
    }

    pub(crate) fn tenants_mut(&mut self) -> impl Iterator<Item = &mut TenantBooks> {
        self.tenants.iter_mut()
    }

    pub(crate) fn usage(&self, id: TenantId) -> TenantUsage {
        self.tenant(id).map(|t| t.usage).unwrap_or_default()
    }

    /// A tenant whose VRAM figure changed since it was last returned here.
    pub(crate) fn pop_usage_change(&mut self) -> Option<TenantId> {
        let id = self.usage_changes.pop()?;
        self.tenants[id.0 as usize].usage_changed = false;
        Some(id)
    }

    pub(crate) fn buffer(&self, id: BufferId) -> Option<&Buffer> {
        self.buffers.get(&id)
    }

    pub(crate) fn contains_buffer(&self, id: BufferId) -> bool {
        self.buffers.contains_key(&id)
    }

    /// A tenant's live buffers in allocation order.
    pub(crate) fn buffers_of(&self, tenant: TenantId) -> impl Iterator<Item = &Buffer> {
        self.tenant(tenant)
            .into_iter()
            .flat_map(|t| t.buffers.iter())
            .map(|id| &self.buffers[id])
    }

    /// Every live buffer in allocation order.
    pub(crate) fn all_buffers(&self) -> impl Iterator<Item = &Buffer> {
        let mut live: Vec<&Buffer> = self.buffers.values().collect();
        live.sort_unstable_by_key(|b| b.id);
        live.into_iter()
    }

    pub(crate) fn chunk(&self, r: ChunkRef) -> Option<&Chunk> {
        self.buffers.get(&r.buffer)?.chunks.get(r.index as usize)
    }

    fn chunk_mut(&mut self, r: ChunkRef) -> Option<&mut Chunk> {
        self.buffers
            .get_mut(&r.buffer)?
            .chunks
            .get_mut(r.index as usize)
    }

    /// Creates a buffer for `req` whose first `vram_share_bytes` (in whole chunks) are
    /// placed in VRAM and the rest in host memory. With `per_chunk_priorities`, chunks take
    /// the request's per-chunk priorities.
    pub(crate) fn create_buffer(
        &mut self,
        req: &AllocRequest,
        vram_share_bytes: u64,
        per_chunk_priorities: bool,
    ) -> BufferId {
        let id = self.buffers.vacant_id(self.next_buffer);
        self.next_buffer += 1;
        let buffer_priority = req.priority.unwrap_or(match req.kind {
            BufferKind::System(SystemBuffer::Stack) => PRIORITY_STACK,
            BufferKind::System(_) => PRIORITY_SYSTEM,
            BufferKind::Device => PRIORITY_DEFAULT,
        });
        let allocation = {
            let state = self.tenant_mut(req.tenant);
            state.allocations += 1;
            state.buffers.insert(id);
            state.allocations
        };
        let seed = self.seed;
        let chunks: Vec<Chunk> = chunk_layout(req.bytes, self.chunk_bytes)
            .enumerate()
            .map(|(index, (offset_bytes, bytes))| Chunk {
                offset_bytes,
                bytes,
                location: if offset_bytes + bytes <= vram_share_bytes {
                    Location::Vram
                } else {
                    Location::Host
                },
                moving_to: None,
                priority: match req.chunk_priorities.get(index) {
                    Some(p) if per_chunk_priorities => *p,
                    _ => buffer_priority,
                },
                rank: rank(seed, req.tenant.0, allocation, index as u32),
            })
            .collect();
        let first = chunks.first().map(|c| c.location);
        if let Some(location) = first.filter(|l| chunks.iter().all(|c| c.location == *l)) {
            // The usual case, a buffer in one place: listed whole, its chunks enter the
            // trees only if a policy looks at this tenant's lists.
            self.change(req.tenant, location, req.bytes, true, |lists| {
                lists.add_pending(id)
            });
        } else {
            for (index, chunk) in chunks.iter().enumerate() {
                let r = ChunkRef {
                    buffer: id,
                    index: index as u32,
                };
                self.list(req.tenant, chunk.location, r, chunk);
            }
        }
        self.buffers.insert(Buffer {
            id,
            tenant: req.tenant,
            kind: req.kind,
            bytes: req.bytes,
            chunks,
        });
        id
    }

    /// Books a buffer of `req.tenant` whose chunks already are where `locations` says,
    /// one per chunk as [`chunk_layout`] cuts `req.bytes` (memory a process held under a
    /// previous daemon): nothing is copied, and the capacities grow to what is booked if
    /// it is more (the memory is held, whatever the budget says).
    pub(crate) fn adopt_buffer(&mut self, req: &AllocRequest, locations: &[Location]) -> BufferId {
        let id = self.create_buffer(req, req.bytes, false);
        for (index, location) in locations.iter().enumerate() {
            if *location == Location::Host {
                self.place_in_host(ChunkRef {
                    buffer: id,
                    index: index as u32,
                });
            }
        }
        self.vram_capacity_bytes = self.vram_capacity_bytes.max(self.vram_used_bytes);
        self.host_capacity_bytes = self.host_capacity_bytes.max(self.host_used_bytes);
        id
    }

    /// Sets the VRAM the policies may fill to `budget_bytes`, but never below what is
    /// booked in VRAM (booked memory is held; the budget then only has no room) nor
    /// below the guarantees admitted (promises are kept); host memory back to
    /// `host_bytes` where adoption grew it and nothing holds it any more.
    /// Memory that cannot move is held outside the chunks: the budget is that much less.
    pub(crate) fn set_budget(&mut self, budget_bytes: u64, host_bytes: u64) {
        self.vram_capacity_bytes = budget_bytes
            .saturating_sub(self.unmovable_bytes())
            .max(self.vram_used_bytes)
            .max(self.guaranteed_bytes);
        self.host_capacity_bytes = host_bytes.max(self.host_used_bytes);
    }

    /// What every tenant holds that cannot move.
    pub(crate) fn unmovable_bytes(&self) -> u64 {
        self.tenants.iter().map(|t| t.unmovable_bytes).sum()
    }

    /// Sets what `tenant` holds that cannot move; the VRAM to fill follows at once (by
    /// the change; [`Books::set_budget`] recomputes it from the budget).
    pub(crate) fn set_unmovable(&mut self, tenant: TenantId, bytes: u64) {
        let old = self.tenant(tenant).map_or(0, |t| t.unmovable_bytes);
        if old == bytes {
            return;
        }
        self.tenant_mut(tenant).unmovable_bytes = bytes;
        self.vram_capacity_bytes = (self.vram_capacity_bytes.saturating_add(old))
            .saturating_sub(bytes)
            .max(self.vram_used_bytes)
            .max(self.guaranteed_bytes);
        self.order.mark(tenant);
    }

    /// Removes a buffer of `tenant` with every chunk of it.
    pub(crate) fn free(&mut self, tenant: TenantId, buffer: BufferId) -> Result<(), FreeError> {
        let owner = self
            .buffers
            .get(&buffer)
            .ok_or(FreeError::Unknown(buffer))?
            .tenant;
        if owner != tenant {
            return Err(FreeError::NotOwner {
                buffer,
                owner,
                caller: tenant,
            });
        }
        let removed = self.buffers.remove(&buffer).expect("checked above");
        self.tenant_mut(tenant).buffers.remove(&buffer);
        for location in [Location::Vram, Location::Host] {
            if self.books_at(tenant, location).0.is_pending(buffer) {
                self.change(tenant, location, removed.bytes, false, |lists| {
                    lists.remove_pending(buffer);
                });
                return Ok(());
            }
        }
        for (index, chunk) in removed.chunks.iter().enumerate() {
            let r = ChunkRef {
                buffer,
                index: index as u32,
            };
            self.unlist(tenant, chunk.planned_location(), r, chunk);
        }
        Ok(())
    }

    /// Lists a chunk at `location` and counts its bytes there, for its tenant and in the
    /// global figures.
    fn list(&mut self, tenant: TenantId, location: Location, r: ChunkRef, chunk: &Chunk) {
        self.change(tenant, location, chunk.bytes, true, |lists| {
            lists.insert(chunk.priority, chunk.rank, r)
        });
    }

    /// Undoes [`Books::list`].
    fn unlist(&mut self, tenant: TenantId, location: Location, r: ChunkRef, chunk: &Chunk) {
        self.change(tenant, location, chunk.bytes, false, |lists| {
            lists.remove(chunk.priority, chunk.rank, r)
        });
    }

    /// Changes a tenant's lists at `location` with `edit`, then adds `bytes` to (`add`)
    /// or takes them from its and the global count there.
    fn change(
        &mut self,
        tenant: TenantId,
        location: Location,
        bytes: u64,
        add: bool,
        edit: impl FnOnce(&mut ChunkLists),
    ) {
        let state = self.tenant_mut(tenant);
        let was_empty = state.evicted.is_empty();
        let unfilled_before = state.unfilled_guarantee_bytes();
        let (lists, tenant_bytes, global_bytes) = self.books_at(tenant, location);
        edit(lists);
        if add {
            *tenant_bytes += bytes;
            *global_bytes += bytes;
        } else {
            *tenant_bytes -= bytes;
            *global_bytes -= bytes;
        }
        let unfilled_after = self.tenants[tenant.0 as usize].unfilled_guarantee_bytes();
        self.unfilled_guarantee_bytes =
            self.unfilled_guarantee_bytes - unfilled_before + unfilled_after;
        self.after_change(tenant, location, was_empty);
    }

    /// Puts the chunks of every buffer listed whole at `location` into the tenant's trees:
    /// policies call it before they choose from the lists.
    pub(crate) fn flush(&mut self, tenant: TenantId, location: Location) {
        let Some(state) = self.tenants.get_mut(tenant.0 as usize) else {
            return;
        };
        let lists = match location {
            Location::Vram => &mut state.resident,
            Location::Host => &mut state.evicted,
        };
        while let Some(buffer) = lists.pop_pending() {
            let chunks = &self.buffers[&buffer].chunks;
            for (index, chunk) in chunks.iter().enumerate() {
                let r = ChunkRef {
                    buffer,
                    index: index as u32,
                };
                lists.insert(chunk.priority, chunk.rank, r);
            }
        }
    }

    /// Keeps the count of tenants with evicted chunks, the list of changed VRAM figures
    /// and the tenant order up to date after a chunk was listed or unlisted at `location`.
    fn after_change(&mut self, tenant: TenantId, location: Location, evicted_was_empty: bool) {
        self.order.mark(tenant);
        let state = &mut self.tenants[tenant.0 as usize];
        match location {
            Location::Host => match (evicted_was_empty, state.evicted.is_empty()) {
                (true, false) => self.tenants_with_evicted += 1,
                (false, true) => self.tenants_with_evicted -= 1,
                _ => {}
            },
            Location::Vram if !state.usage_changed => {
                state.usage_changed = true;
                self.usage_changes.push(tenant);
            }
            Location::Vram => {}
        }
    }

    /// Where a tenant's chunks at `location` are listed and counted.
    fn books_at(
        &mut self,
        tenant: TenantId,
        location: Location,
    ) -> (&mut ChunkLists, &mut u64, &mut u64) {
        let i = tenant.0 as usize;
        let state = &mut self.tenants[i];
        match location {
            Location::Vram => (
                &mut state.resident,
                &mut state.usage.vram_bytes,
                &mut self.vram_used_bytes,
            ),
            Location::Host => (
                &mut state.evicted,
                &mut state.usage.host_bytes,
                &mut self.host_used_bytes,
            ),
        }
    }

    /// Accounts a chunk at `to` at once and moves it between its tenant's lists; the data
    /// follows when the copy is done ([`Books::finish_move`]).
    pub(crate) fn plan_move(&mut self, r: ChunkRef, to: Location) {
        let tenant = self.buffers[&r.buffer].tenant;
        if self.books_at(tenant, to.other()).0.is_pending(r.buffer) {
            self.flush(tenant, to.other());
        }
        let buffer = self.buffers.get_mut(&r.buffer).expect("live buffer");
        let chunk = &mut buffer.chunks[r.index as usize];
        debug_assert_ne!(chunk.planned_location(), to, "{r:?} already planned there");
        chunk.moving_to = Some(to);
        let chunk = chunk.clone();
        self.unlist(tenant, to.other(), r, &chunk);
        self.list(tenant, to, r, &chunk);
    }

    /// Takes back a move planned in the same decision, before any copy was asked: the
    /// chunk is accounted where its data is again.
    pub(crate) fn unplan_move(&mut self, r: ChunkRef) {
        let tenant = self.buffers[&r.buffer].tenant;
        let chunk = self.chunk_mut(r).expect("live chunk");
        let planned = chunk.moving_to.take().expect("a move was planned");
        let chunk = chunk.clone();
        self.unlist(tenant, planned, r, &chunk);
        self.list(tenant, chunk.location, r, &chunk);
    }

    /// Places a chunk of a buffer not yet granted in host memory without a copy (nothing
    /// is in it yet).
    pub(crate) fn place_in_host(&mut self, r: ChunkRef) {
        self.plan_move(r, Location::Host);
        let chunk = self.chunk_mut(r).expect("new chunk");
        chunk.location = Location::Host;
        chunk.moving_to = None;
    }

    /// Records that a planned move's copy finished; `None` when the chunk was freed
    /// meanwhile.
    pub(crate) fn finish_move(
        &mut self,
        tenant: TenantId,
        r: ChunkRef,
        to: Location,
    ) -> Option<()> {
        let chunk = self.chunk_mut(r)?;
        chunk.location = to;
        chunk.moving_to = None;
        let bytes = chunk.bytes;
        let usage = &mut self.tenant_mut(tenant).usage;
        match to {
            Location::Host => usage.bytes_evicted += bytes,
            Location::Vram => usage.bytes_returned += bytes,
        }
        Some(())
    }

    /// Raises the tenant's peak to its VRAM figure; called once a decision is complete,
    /// so the transient over-commitment inside a policy loop never counts.
    pub(crate) fn note_peak(&mut self, tenant: TenantId) {
        if let Some(state) = self.tenants.get_mut(tenant.0 as usize) {
            state.usage.vram_peak_bytes = state.usage.vram_peak_bytes.max(state.usage.vram_bytes);
        }
    }

    /// What the scanning victim policies see of every tenant, computed as they walk
    /// (a choice allocates nothing).
    pub(crate) fn views(&self) -> impl Iterator<Item = TenantView> + Clone + '_ {
        let chunk_bytes = self.chunk_bytes;
        self.tenants.iter().enumerate().map(move |(id, s)| {
            let contract = s.contract;
            TenantView {
                id: TenantId(id as u32),
                vram_bytes: s.vram_share_bytes(),
                can_give: s.can_give(chunk_bytes),
                slowdown: if s.ideal_ns == 0 {
                    1.0
                } else {
                    s.kernel_ns as f64 / s.ideal_ns as f64
                },
                access_rate: s.access_rate,
                weight: contract.weight,
                priority_class: contract.priority_class,
            }
        })
    }

    /// The chunks of a buffer accounted at `location`.
    pub(crate) fn chunk_refs(&self, buffer: BufferId, location: Location) -> Vec<ChunkRef> {
        self.buffers[&buffer]
            .chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.planned_location() == location)
            .map(|(index, _)| ChunkRef {
                buffer,
                index: index as u32,
            })
            .collect()
    }

    /// Checks that every tenant not awaiting [`Books::sort_tenants`] stands in the tenant
    /// order where its figures place it.
    pub(crate) fn check_order(&self) -> Result<(), String> {
        let chunk_bytes = self.chunk_bytes;
        self.order.check(
            self.tenants
                .iter()
                .enumerate()
                .map(|(i, s)| s.order_keys(TenantId(i as u32), chunk_bytes)),
        )
    }

    /// Re-derives every figure: chunks tile their buffers, every chunk is in exactly the
    /// list of its planned location, per-chunk locations sum to the per-tenant figures,
    /// those sum to the global figures, and VRAM is never over-committed.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let planned = self.check_buffers()?;
        let sums = self.check_tenants(&planned)?;
        let (vram, host) = (sums.vram_bytes, sums.host_bytes);
        if (vram, host) != (self.vram_used_bytes, self.host_used_bytes) {
            return Err(format!(
                "tenants hold {vram}/{host} bytes VRAM/host, global figures say {}/{}",
                self.vram_used_bytes, self.host_used_bytes
            ));
        }
        let (guaranteed, unfilled) = (sums.guaranteed_bytes, sums.unfilled_guarantee_bytes);
        if (guaranteed, unfilled) != (self.guaranteed_bytes, self.unfilled_guarantee_bytes) {
            return Err(format!(
                "contracts guarantee {guaranteed} bytes, {unfilled} not held; the sums say {}/{}",
                self.guaranteed_bytes, self.unfilled_guarantee_bytes
            ));
        }
        if let Some(breach) = &self.breach {
            return Err(breach.clone());
        }
        self.check_order()?;
        if sums.with_evicted != self.tenants_with_evicted {
            return Err(format!(
                "{} tenants have evicted chunks, the count says {}",
                sums.with_evicted, self.tenants_with_evicted
            ));
        }
        if self.over_committed() {
            return Err(format!(
                "{} bytes of VRAM in use, capacity {}",
                self.vram_used_bytes, self.vram_capacity_bytes
            ));
        }
        if self.host_used_bytes > self.host_capacity_bytes {
            return Err(format!(
                "{} bytes of host memory in use, capacity {}",
                self.host_used_bytes, self.host_capacity_bytes
            ));
        }
        Ok(())
    }

    /// Checks that every buffer's chunks tile it, that it is in its tenant's list, and
    /// that each of its chunks is listed where it is planned; returns each tenant's
    /// planned VRAM and host bytes.
    fn check_buffers(&self) -> Result<Vec<(u64, u64)>, String> {
        let mut per_tenant = vec![(0u64, 0u64); self.tenants.len()];
        for buffer in self.buffers.values() {
            let chunk_sum: u64 = buffer.chunks.iter().map(|c| c.bytes).sum();
            if chunk_sum != buffer.bytes {
                return Err(format!(
                    "{}: chunks hold {chunk_sum} of {} bytes",
                    buffer.id, buffer.bytes
                ));
            }
            let state = &self.tenants[buffer.tenant.0 as usize];
            if !state.buffers.contains(&buffer.id) {
                return Err(format!(
                    "{} missing from {}'s list",
                    buffer.id, buffer.tenant
                ));
            }
            for (index, chunk) in buffer.chunks.iter().enumerate() {
                let r = ChunkRef {
                    buffer: buffer.id,
                    index: index as u32,
                };
                let resident = state.resident.contains(chunk.rank, r);
                let evicted = state.evicted.contains(chunk.rank, r);
                let expected = chunk.planned_location() == Location::Vram;
                if resident != expected || evicted == expected {
                    return Err(format!(
                        "{r:?} planned in {:?} but listed resident={resident} evicted={evicted}",
                        chunk.planned_location()
                    ));
                }
            }
            let entry = &mut per_tenant[buffer.tenant.0 as usize];
            entry.0 += buffer.planned_bytes_at(Location::Vram);
            entry.1 += buffer.planned_bytes_at(Location::Host);
        }
        Ok(per_tenant)
    }

    /// Checks that every tenant's figures are what its chunks (`planned`, from
    /// [`Books::check_buffers`]) say and within its contract's caps; returns the sums
    /// over the tenants.
    fn check_tenants(&self, planned: &[(u64, u64)]) -> Result<TenantSums, String> {
        let mut sums = TenantSums::default();
        for (i, state) in self.tenants.iter().enumerate() {
            let (v, h) = planned[i];
            let usage = state.usage;
            if (v, h) != (usage.vram_bytes, usage.host_bytes) {
                return Err(format!(
                    "tenant {i}: accounted {}/{} bytes VRAM/host, chunks say {v}/{h}",
                    usage.vram_bytes, usage.host_bytes
                ));
            }
            let contract = state.contract;
            if v > contract.vram_cap_bytes() {
                return Err(format!(
                    "tenant {i} holds {v} bytes of VRAM, beyond its cap of {}",
                    contract.vram_cap_bytes()
                ));
            }
            if h > contract.host_cap_bytes() {
                return Err(format!(
                    "tenant {i} holds {h} bytes of host memory, beyond its host_limit of {}",
                    contract.host_cap_bytes()
                ));
            }
            sums.guaranteed_bytes += contract.vram_guarantee_bytes;
            sums.unfilled_guarantee_bytes += state.unfilled_guarantee_bytes();
            sums.vram_bytes += v;
            sums.host_bytes += h;
            sums.with_evicted += usize::from(!state.evicted.is_empty());
        }
        Ok(sums)
    }
}

/// The tenants' figures summed, for [`Books::check_invariants`] to hold against the
/// global ones.
#[derive(Default)]
struct TenantSums {
    vram_bytes: u64,
    host_bytes: u64,
    with_evicted: usize,
    guaranteed_bytes: u64,
    unfilled_guarantee_bytes: u64,
}
