//! Who gives up memory (the victim, dissertation section 5.2.1) and who gets it back
//! (the winner of a return). Each victim policy is a small [`VictimChoice`] registered
//! in [`VICTIMS`].

use crate::accounting::TenantView;
use crate::ids::TenantId;
use crate::params::{Choice, KERNEL_ESTIMATES};

/// Chooses the tenant that gives up a chunk.
pub(crate) trait VictimChoice: std::fmt::Debug + Send {
    /// The victim among `tenants` (those with `can_give`); `requester` wins ties so that
    /// nobody else loses memory to a tie.
    fn choose(
        &self,
        tenants: &[TenantView],
        requester: TenantId,
        vram_capacity_bytes: u64,
    ) -> Option<TenantId>;

    /// Whether it needs the periodic access-rate measurement (a timer even when nothing
    /// is evicted).
    fn wants_access_rates(&self) -> bool {
        false
    }
}

/// A registered victim policy.
pub(crate) struct VictimEntry {
    pub(crate) choice: Choice,
    pub(crate) build: fn() -> Box<dyn VictimChoice>,
}

/// Every victim policy; the first is the default.
pub(crate) static VICTIMS: &[VictimEntry] = &[
    VictimEntry {
        choice: Choice::new(
            "largest-share",
            "the tenant holding the most VRAM (counting the request); converges to equal shares",
        ),
        build: || Box::new(LargestShare),
    },
    VictimEntry {
        choice: Choice::new(
            "performance",
            "the smallest slowdown per byte of VRAM among tenants above 1/n of VRAM",
        )
        .needing(KERNEL_ESTIMATES),
        build: || Box::new(Performance),
    },
    VictimEntry {
        choice: Choice::new(
            "access-rate",
            "the most memory accesses per second, measured every return interval",
        )
        .needing(KERNEL_ESTIMATES),
        build: || Box::new(AccessRate),
    },
];

/// Larger key wins; ties go to the requester, then to the lowest id.
fn pick<'a>(
    key: impl Fn(&TenantView) -> f64,
    pool: impl Iterator<Item = &'a TenantView>,
    requester: TenantId,
) -> Option<TenantId> {
    pool.max_by(|a, b| {
        key(a)
            .total_cmp(&key(b))
            .then((a.id == requester).cmp(&(b.id == requester)))
            .then(b.id.cmp(&a.id))
    })
    .map(|t| t.id)
}

/// The tenants that may give, of the lowest priority class among them: a higher class
/// is evicted only when no lower one can give, whichever victim policy chooses.
fn candidates(tenants: &[TenantView]) -> impl Iterator<Item = &TenantView> + Clone {
    let lowest = tenants
        .iter()
        .filter(|t| t.can_give)
        .map(|t| t.priority_class)
        .min();
    tenants
        .iter()
        .filter(move |t| t.can_give && Some(t.priority_class) == lowest)
}

/// The tenant holding the most VRAM for its weight. A tenant under its weighted fair
/// share never loses memory.
#[derive(Debug)]
struct LargestShare;

impl VictimChoice for LargestShare {
    fn choose(&self, tenants: &[TenantView], requester: TenantId, _: u64) -> Option<TenantId> {
        pick(
            |t| t.vram_bytes as f64 / f64::from(t.weight),
            candidates(tenants),
            requester,
        )
    }
}

/// The tenant with the smallest slowdown per byte of VRAM; tenants holding less than 1/n
/// of VRAM are left alone while others qualify.
#[derive(Debug)]
struct Performance;

impl VictimChoice for Performance {
    fn choose(
        &self,
        tenants: &[TenantView],
        requester: TenantId,
        vram_capacity_bytes: u64,
    ) -> Option<TenantId> {
        let active = tenants.iter().filter(|t| t.vram_bytes > 0).count().max(1) as u64;
        let min_share = vram_capacity_bytes / active;
        let key = |t: &TenantView| -(t.slowdown / t.vram_bytes.max(1) as f64);
        let pool = candidates(tenants);
        pick(
            key,
            pool.clone().filter(|t| t.vram_bytes >= min_share),
            requester,
        )
        .or_else(|| pick(key, pool, requester))
    }
}

/// The tenant with the most memory accesses per unit time.
#[derive(Debug)]
struct AccessRate;

impl VictimChoice for AccessRate {
    fn choose(&self, tenants: &[TenantView], requester: TenantId, _: u64) -> Option<TenantId> {
        pick(|t| t.access_rate, candidates(tenants), requester)
    }

    fn wants_access_rates(&self) -> bool {
        true
    }
}

/// Chooses the winner of a return: among those with something to get back, of the
/// highest priority class, the tenant with the least VRAM for its weight (counting
/// chunks already chosen to return).
pub(crate) fn select_winner(tenants: &[TenantView]) -> Option<TenantId> {
    // Shares compared exactly: VRAM over weight, cross-multiplied.
    let share = |a: &TenantView, b: &TenantView| {
        (u128::from(a.vram_bytes) * u128::from(b.weight))
            .cmp(&(u128::from(b.vram_bytes) * u128::from(a.weight)))
    };
    tenants
        .iter()
        .filter(|t| t.can_give)
        .min_by(|a, b| {
            b.priority_class
                .cmp(&a.priority_class)
                .then_with(|| share(a, b))
                .then(a.id.cmp(&b.id))
        })
        .map(|t| t.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: u32, vram_mib: u64) -> TenantView {
        TenantView {
            id: TenantId(id),
            vram_bytes: vram_mib << 20,
            can_give: true,
            slowdown: 1.0,
            access_rate: 0.0,
            weight: 1,
            priority_class: 0,
        }
    }

    fn victim(name: &str, tenants: &[TenantView], requester: u32) -> Option<TenantId> {
        let entry = VICTIMS.iter().find(|v| v.choice.name == name).unwrap();
        (entry.build)().choose(tenants, TenantId(requester), 1 << 30)
    }

    #[test]
    fn largest_share_picks_the_biggest_and_ties_go_to_the_requester() {
        let tenants = [view(0, 100), view(1, 300), view(2, 300)];
        assert_eq!(victim("largest-share", &tenants, 0), Some(TenantId(1)));
        assert_eq!(victim("largest-share", &tenants, 2), Some(TenantId(2)));
        let mut empty = tenants;
        empty[1].can_give = false;
        assert_eq!(victim("largest-share", &empty, 0), Some(TenantId(2)));
    }

    #[test]
    fn performance_picks_smallest_slowdown_per_byte_above_min_share() {
        let mut tenants = [view(0, 50), view(1, 500), view(2, 450)];
        tenants[0].slowdown = 1.0; // below 1/3 of 1 GiB: ignored
        tenants[1].slowdown = 3.0; // 3 / 500
        tenants[2].slowdown = 1.2; // 1.2 / 450: smaller
        assert_eq!(victim("performance", &tenants, 1), Some(TenantId(2)));
        // Nobody above the minimum share: fall back to everyone.
        let small = [view(0, 10), view(1, 20)];
        assert_eq!(victim("performance", &small, 0), Some(TenantId(1)));
    }

    #[test]
    fn access_rate_picks_the_busiest() {
        let mut tenants = [view(0, 500), view(1, 100)];
        tenants[1].access_rate = 10.0;
        assert_eq!(victim("access-rate", &tenants, 0), Some(TenantId(1)));
    }

    #[test]
    fn weights_and_classes_order_victims_and_winners() {
        // 300 MiB at weight 3 is a smaller share than 150 MiB at weight 1.
        let mut tenants = [view(0, 300), view(1, 150), view(2, 100)];
        tenants[0].weight = 3;
        assert_eq!(victim("largest-share", &tenants, 2), Some(TenantId(1)));
        assert_eq!(select_winner(&tenants), Some(TenantId(0)));
        // A higher class gives only when no lower one can; it gets back first.
        tenants[1].priority_class = 1;
        assert_eq!(victim("largest-share", &tenants, 2), Some(TenantId(2)));
        tenants[0].access_rate = 5.0;
        assert_eq!(victim("access-rate", &tenants, 2), Some(TenantId(0)));
        assert_eq!(select_winner(&tenants), Some(TenantId(1)));
        tenants[0].can_give = false;
        tenants[2].can_give = false;
        assert_eq!(victim("largest-share", &tenants, 2), Some(TenantId(1)));
    }

    #[test]
    fn winner_is_the_poorest_with_something_evicted() {
        let mut tenants = [view(0, 100), view(1, 50), view(2, 10)];
        tenants[2].can_give = false;
        assert_eq!(select_winner(&tenants), Some(TenantId(1)));
    }
}
