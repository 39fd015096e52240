//! Eviction and return policies: who gives up memory (victim), who gets it back (winner),
//! and which chunk moves. Small pure functions over a view of the tenants, so each can be
//! tested alone.

use serde::Serialize;

use crate::ids::TenantId;
use crate::lists::{ChunkLists, ChunkRef};

/// How the victim of an eviction is chosen (dissertation section 5.2.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VictimPolicy {
    /// The tenant holding the most VRAM (counting the request). Converges to equal
    /// shares; a tenant under its fair share never loses memory.
    #[default]
    LargestShare,
    /// The tenant with the smallest slowdown per byte of VRAM; tenants holding less than
    /// 1/n of VRAM are left alone. Needs per-tenant slowdown estimates.
    Performance,
    /// The tenant with the most memory accesses per unit time, measured periodically.
    AccessRate,
}

/// How the chunk a victim loses is chosen (dissertation section 5.2.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChunkPolicy {
    /// Any chunk of the victim.
    Random,
    /// A random chunk of the victim's lowest-priority buffers (the prototype's).
    #[default]
    PriorityBuffer,
    /// The victim's lowest-priority chunk (random among equals); priorities per chunk.
    PriorityChunk,
    /// Random eviction, then evicted chunks that show reference bits are swapped back for
    /// random resident ones when a kernel of the tenant finishes.
    ReverseSwap,
}

/// Priority of buffers that have none: the middle of the scale.
pub const PRIORITY_DEFAULT: i32 = 50;
/// Priority of the runtime's stack buffer: large and nearly never touched.
pub const PRIORITY_STACK: i32 = 0;
/// Priority of the runtime's other system buffers (code, constants): always needed.
pub const PRIORITY_SYSTEM: i32 = 100;

/// What a victim policy knows about one tenant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TenantView {
    pub id: TenantId,
    /// VRAM held, counting chunks already chosen as gone and the request as held.
    pub vram_bytes: u64,
    /// Whether the tenant has a chunk left to give.
    pub can_give: bool,
    /// Estimated slowdown (1 when unknown).
    pub slowdown: f64,
    /// Memory accesses per second in the last measurement period.
    pub access_rate: f64,
}

/// Chooses the tenant that gives up a chunk; `requester` wins ties so that nobody else
/// loses memory to a tie.
pub(crate) fn select_victim(
    policy: VictimPolicy,
    tenants: &[TenantView],
    requester: TenantId,
    vram_capacity_bytes: u64,
) -> Option<TenantId> {
    let candidates = tenants.iter().filter(|t| t.can_give);
    // Larger key wins; ties go to the requester, then to the lowest id.
    let pick = |key: &dyn Fn(&TenantView) -> f64, pool: &mut dyn Iterator<Item = &TenantView>| {
        pool.max_by(|a, b| {
            key(a)
                .total_cmp(&key(b))
                .then((a.id == requester).cmp(&(b.id == requester)))
                .then(b.id.cmp(&a.id))
        })
        .map(|t| t.id)
    };
    match policy {
        VictimPolicy::LargestShare => pick(&|t| t.vram_bytes as f64, &mut candidates.clone()),
        VictimPolicy::AccessRate => pick(&|t| t.access_rate, &mut candidates.clone()),
        VictimPolicy::Performance => {
            let active = tenants.iter().filter(|t| t.vram_bytes > 0).count().max(1) as u64;
            let min_share = vram_capacity_bytes / active;
            let key = |t: &TenantView| -(t.slowdown / t.vram_bytes.max(1) as f64);
            pick(
                &key,
                &mut candidates.clone().filter(|t| t.vram_bytes >= min_share),
            )
            .or_else(|| pick(&key, &mut candidates.clone()))
        }
    }
}

/// Chooses the winner of a return: the tenant with the least VRAM (counting chunks
/// already chosen to return) among those with something to get back.
pub(crate) fn select_winner(tenants: &[TenantView]) -> Option<TenantId> {
    tenants
        .iter()
        .filter(|t| t.can_give)
        .min_by_key(|t| (t.vram_bytes, t.id))
        .map(|t| t.id)
}

/// Chooses the chunk a victim gives up: random, or random among the lowest priority.
pub(crate) fn select_chunk_to_evict(
    policy: ChunkPolicy,
    resident: &ChunkLists,
) -> Option<ChunkRef> {
    match policy {
        ChunkPolicy::Random | ChunkPolicy::ReverseSwap => resident.random(),
        ChunkPolicy::PriorityBuffer | ChunkPolicy::PriorityChunk => resident.random_lowest(),
    }
}

/// Chooses the chunk a winner gets back: its highest-priority evicted chunk, random
/// among equals.
pub(crate) fn select_chunk_to_return(evicted: &ChunkLists) -> Option<ChunkRef> {
    evicted.random_highest()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BufferId;

    fn view(id: u32, vram_mib: u64) -> TenantView {
        TenantView {
            id: TenantId(id),
            vram_bytes: vram_mib << 20,
            can_give: true,
            slowdown: 1.0,
            access_rate: 0.0,
        }
    }

    #[test]
    fn largest_share_picks_the_biggest_and_ties_go_to_the_requester() {
        let tenants = [view(0, 100), view(1, 300), view(2, 300)];
        let v = |req| select_victim(VictimPolicy::LargestShare, &tenants, TenantId(req), 1 << 30);
        assert_eq!(v(0), Some(TenantId(1)));
        assert_eq!(v(2), Some(TenantId(2)));
        let mut empty = tenants;
        empty[1].can_give = false;
        assert_eq!(v(0), Some(TenantId(1)));
        assert_eq!(
            select_victim(VictimPolicy::LargestShare, &empty, TenantId(0), 1 << 30),
            Some(TenantId(2))
        );
    }

    #[test]
    fn performance_picks_smallest_slowdown_per_byte_above_min_share() {
        let mut tenants = [view(0, 50), view(1, 500), view(2, 450)];
        tenants[0].slowdown = 1.0; // below 1/3 of 1 GiB: ignored
        tenants[1].slowdown = 3.0; // 3 / 500
        tenants[2].slowdown = 1.2; // 1.2 / 450: smaller
        let v = select_victim(VictimPolicy::Performance, &tenants, TenantId(1), 1 << 30);
        assert_eq!(v, Some(TenantId(2)));
        // Nobody above the minimum share: fall back to everyone.
        let small = [view(0, 10), view(1, 20)];
        let v = select_victim(VictimPolicy::Performance, &small, TenantId(0), 1 << 30);
        assert_eq!(v, Some(TenantId(1)));
    }

    #[test]
    fn access_rate_picks_the_busiest() {
        let mut tenants = [view(0, 500), view(1, 100)];
        tenants[1].access_rate = 10.0;
        let v = select_victim(VictimPolicy::AccessRate, &tenants, TenantId(0), 1 << 30);
        assert_eq!(v, Some(TenantId(1)));
    }

    #[test]
    fn winner_is_the_poorest_with_something_evicted() {
        let mut tenants = [view(0, 100), view(1, 50), view(2, 10)];
        tenants[2].can_give = false;
        assert_eq!(select_winner(&tenants), Some(TenantId(1)));
    }

    #[test]
    fn priority_policies_take_from_the_lowest_priority_only() {
        let mut lists = ChunkLists::default();
        let chunk = |b, i| ChunkRef {
            buffer: BufferId(b),
            index: i,
        };
        for (priority, b) in [(50, 0), (0, 1), (100, 2)] {
            for i in 0..2 {
                lists.insert(priority, crate::lists::rank(7, 0, b, i), chunk(b, i));
            }
        }
        let evict = select_chunk_to_evict(ChunkPolicy::PriorityBuffer, &lists).unwrap();
        assert_eq!(evict.buffer, BufferId(1));
        assert_eq!(select_chunk_to_return(&lists).unwrap().buffer, BufferId(2));
        // Random ignores priorities: over many rankings every buffer gets chosen.
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..50 {
            let mut l = ChunkLists::default();
            for (priority, b) in [(50, 0), (0, 1), (100, 2)] {
                l.insert(priority, crate::lists::rank(seed, 0, b, 0), chunk(b, 0));
            }
            seen.insert(
                select_chunk_to_evict(ChunkPolicy::Random, &l)
                    .unwrap()
                    .buffer,
            );
        }
        assert_eq!(seen.len(), 3);
    }
}
