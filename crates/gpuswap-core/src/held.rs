//! Memory that is held whatever the manager decides: buffers a process already holds
//! when the manager first hears of them (it served them under a predecessor, the
//! daemon that restarted) are booked where they are, and the VRAM the manager may give
//! out shrinks below its configured size when memory it does not book is held (by
//! processes it no longer serves, or outside it). The daemon drives both.

use crate::accounting::Books;
use crate::buffer::{BufferKind, Location, chunk_layout};
use crate::ids::{BufferId, RequestId, TenantId};
use crate::protocol::AllocRequest;

/// The manager's books as the driver of held memory sees them
/// ([`Manager::held`](crate::Manager::held)).
pub struct Held<'a> {
    books: &'a mut Books,
    /// The configured VRAM and host memory.
    vram_bytes: u64,
    host_bytes: u64,
}

impl<'a> Held<'a> {
    pub(crate) fn new(books: &'a mut Books, vram_bytes: u64, host_bytes: u64) -> Self {
        Self {
            books,
            vram_bytes,
            host_bytes,
        }
    }

    /// Books a buffer of `tenant` of `bytes` whose chunks (as the manager's chunk size
    /// cuts it) already are where `locations` says, one per chunk: nothing moves and no
    /// action follows. Placements over the budget are booked as they are (the budget
    /// then has less room, or none). Refused, booking nothing, when `locations` does
    /// not match the buffer's chunks or the buffer does not fit the tenant's contract
    /// (its VRAM cap, its host limit).
    pub fn adopt_buffer(
        &mut self,
        tenant: TenantId,
        bytes: u64,
        locations: &[Location],
    ) -> Result<BufferId, String> {
        let chunk_bytes = self.books.chunk_bytes;
        let chunks = bytes.div_ceil(chunk_bytes);
        if bytes == 0 || chunks != locations.len() as u64 {
            return Err(format!(
                "a buffer of {bytes} bytes has {chunks} chunks of {chunk_bytes} bytes, not {}",
                locations.len()
            ));
        }
        let (mut vram, mut host) = (0u64, 0u64);
        for ((_, len), location) in chunk_layout(bytes, chunk_bytes).zip(locations) {
            match location {
                Location::Vram => vram += len,
                Location::Host => host += len,
            }
        }
        let vram_room = self.books.vram_room_under_cap(tenant);
        let host_room = self.books.host_room_under_limit(tenant);
        if vram > vram_room || host > host_room {
            return Err(format!(
                "{vram} bytes in VRAM and {host} in host memory are beyond what the \
                 tenant's contract lets it hold ({vram_room} and {host_room} more)"
            ));
        }
        let req = AllocRequest {
            request: RequestId(u64::MAX),
            tenant,
            bytes,
            kind: BufferKind::Device,
            priority: None,
            chunk_priorities: Vec::new(),
        };
        let id = self.books.adopt_buffer(&req, locations);
        self.books.note_peak(tenant);
        Ok(id)
    }

    /// Gives the policies `budget_bytes` of VRAM to fill (at most the configured
    /// `vram_bytes`): less when memory the manager does not book is held. The VRAM
    /// booked now and the guarantees admitted stay, so the budget may have no room at
    /// all; a later call with a larger budget gives the room back. Nothing moves: what
    /// is over the budget is taken back only as tenants free it or are evicted for
    /// others' allocations. The budget in force is the VRAM used plus the VRAM free.
    pub fn set_vram_budget(&mut self, budget_bytes: u64) {
        let budget = budget_bytes.min(self.vram_bytes);
        self.books.set_budget(budget, self.host_bytes);
    }

    /// `tenant` holds `bytes` the manager cannot move (issue 41): managed memory, which
    /// the driver's own paging moves, and buffers pinned in VRAM because another
    /// process maps them. They stay where they are whatever the policies, turns and
    /// idle demotion decide (nothing of them is a chunk), count against the tenant's
    /// share (victim and return order), its VRAM cap and its memory limit, and the VRAM
    /// the policies fill is that much less, so turns and placements plan around them.
    /// A later call replaces the figure; the tenant's end clears it.
    pub fn set_unmovable(&mut self, tenant: TenantId, bytes: u64) {
        self.books.set_unmovable(tenant, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MIB, Manager, ManagerConfig, PolicySettings};

    fn manager(vram_mib: u64) -> Manager {
        Manager::new(ManagerConfig {
            vram_bytes: vram_mib * MIB,
            host_bytes: 64 * MIB,
            chunk_bytes: 2 * MIB,
            policy: PolicySettings::named("gpuswap"),
            return_interval_ns: 50_000_000,
            seed: 1,
            scheduling: Default::default(),
            gpu_time: Default::default(),
            idle: Default::default(),
        })
    }

    #[test]
    fn adopted_buffers_are_booked_where_they_are_even_over_the_budget() {
        let mut m = manager(8);
        let t = TenantId(0);
        m.handle_tenant_start(t, Default::default()).unwrap();
        let (v, h) = (Location::Vram, Location::Host);
        let id = m.held().adopt_buffer(t, 5 * MIB, &[v, h, v]).unwrap();
        assert_eq!(m.buffer(id).unwrap().bytes, 5 * MIB);
        assert_eq!(m.usage(t).vram_bytes, 3 * MIB);
        assert_eq!(m.usage(t).host_bytes, 2 * MIB);
        // 6 MiB more in VRAM than the 8 MiB there are: booked as they are.
        m.held().adopt_buffer(t, 8 * MIB, &[v; 4]).unwrap();
        assert_eq!(m.vram_used_bytes(), 11 * MIB);
        assert_eq!(m.vram_free_bytes(), 0);
        m.check_invariants().unwrap();
        let error = m.held().adopt_buffer(t, 4 * MIB, &[v]).unwrap_err();
        assert!(error.contains("has 2 chunks"), "{error}");
        // Freed, the budget is the configured VRAM again.
        m.handle_free(t, id).unwrap();
        m.held().set_vram_budget(u64::MAX);
        assert_eq!(m.vram_used_bytes() + m.vram_free_bytes(), 8 * MIB);
        m.check_invariants().unwrap();
    }

    fn request(t: TenantId, n: u64, bytes: u64) -> AllocRequest {
        AllocRequest {
            request: RequestId(n),
            tenant: t,
            bytes,
            kind: BufferKind::Device,
            priority: None,
            chunk_priorities: Vec::new(),
        }
    }

    /// Memory that cannot move shrinks the VRAM to fill, by the change at once and from
    /// any later budget, counts against the memory limit, and goes with its tenant.
    #[test]
    fn unmovable_memory_shrinks_the_budget_and_counts_against_the_limit() {
        let mut m = manager(8);
        let (t, u) = (TenantId(0), TenantId(1));
        m.handle_tenant_start(t, Default::default()).unwrap();
        let limited = crate::Contract {
            memory_limit_bytes: Some(8 * MIB),
            ..Default::default()
        };
        m.handle_tenant_start(u, limited).unwrap();
        m.held().set_unmovable(u, 4 * MIB);
        assert_eq!(m.vram_used_bytes() + m.vram_free_bytes(), 4 * MIB);
        m.held().set_vram_budget(u64::MAX);
        assert_eq!(m.vram_used_bytes() + m.vram_free_bytes(), 4 * MIB);
        m.handle_alloc(request(t, 0, 6 * MIB));
        while m.poll_action().is_some() {}
        assert_eq!(
            (m.usage(t).vram_bytes, m.usage(t).host_bytes),
            (4 * MIB, 2 * MIB)
        );
        // 4 MiB of managed memory and 6 more are over u's limit of 8.
        m.handle_alloc(request(u, 1, 6 * MIB));
        let refused = std::iter::from_fn(|| m.poll_action()).any(|a| {
            matches!(
                a,
                crate::Action::Reply(crate::Reply::Fail {
                    error: crate::AllocError::OverMemoryLimit { .. },
                    ..
                })
            )
        });
        assert!(refused);
        assert_eq!(m.unmovable_bytes(u), 4 * MIB);
        m.handle_tenant_exit(u);
        assert_eq!(m.unmovable_bytes(u), 0);
        m.held().set_vram_budget(u64::MAX);
        assert_eq!(m.vram_used_bytes() + m.vram_free_bytes(), 8 * MIB);
        m.check_invariants().unwrap();
    }

    #[test]
    fn a_smaller_budget_places_a_newcomer_in_host_memory() {
        let mut m = manager(8);
        let t = TenantId(0);
        m.handle_tenant_start(t, Default::default()).unwrap();
        m.held().set_vram_budget(2 * MIB);
        assert_eq!(m.vram_used_bytes() + m.vram_free_bytes(), 2 * MIB);
        m.handle_alloc(AllocRequest {
            request: RequestId(0),
            tenant: t,
            bytes: 6 * MIB,
            kind: BufferKind::Device,
            priority: None,
            chunk_priorities: Vec::new(),
        });
        while m.poll_action().is_some() {}
        assert_eq!(m.usage(t).vram_bytes, 2 * MIB);
        assert_eq!(m.usage(t).host_bytes, 4 * MIB);
        m.check_invariants().unwrap();
    }
}
