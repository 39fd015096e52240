//! Who gives up memory (the victim, dissertation section 5.2.1) and who gets it back
//! (the winner of a return). Each victim policy is a small [`VictimChoice`] registered
//! in [`VICTIMS`].

use crate::accounting::{Books, TenantView};
use crate::ids::TenantId;
use crate::params::{Choice, KERNEL_ESTIMATES, Registered};

/// Chooses the tenant that gives up a chunk.
pub(crate) trait VictimChoice: std::fmt::Debug + Send {
    /// The victim among the tenants that may give (`TenantBooks::can_give`); `requester` wins
    /// ties so that nobody else loses memory to a tie. The tenant order is sorted
    /// ([`Books::sort_tenants`]).
    fn choose(&self, books: &Books, requester: TenantId) -> Option<TenantId>;

    /// Whether it needs the periodic access-rate measurement (a timer even when nothing
    /// is evicted).
    fn wants_access_rates(&self) -> bool {
        false
    }
}

/// A registered victim policy.
pub(crate) type VictimEntry = Registered<fn() -> Box<dyn VictimChoice>>;

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
fn pick(
    key: impl Fn(&TenantView) -> f64,
    pool: impl Iterator<Item = TenantView>,
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
fn candidates(
    tenants: impl Iterator<Item = TenantView> + Clone,
) -> impl Iterator<Item = TenantView> + Clone {
    let lowest = tenants
        .clone()
        .filter(|t| t.can_give)
        .map(|t| t.priority_class)
        .min();
    tenants.filter(move |t| t.can_give && Some(t.priority_class) == lowest)
}

/// The tenant holding the most VRAM for its weight. A tenant under its weighted fair
/// share never loses memory. Read from the tenant order, whose first giver is of the
/// lowest class the largest share and the lowest id: the cost of a choice does not grow
/// with the number of tenants.
#[derive(Debug)]
struct LargestShare;

impl VictimChoice for LargestShare {
    fn choose(&self, books: &Books, requester: TenantId) -> Option<TenantId> {
        let order = books.tenant_order();
        let first = order.first_giver()?;
        match order.give_key(requester) {
            Some(own) if own.ties(first) => Some(requester),
            _ => Some(first.id),
        }
    }
}

/// The tenant with the smallest slowdown per byte of VRAM; tenants holding less than 1/n
/// of VRAM are left alone while others qualify.
#[derive(Debug)]
struct Performance;

impl VictimChoice for Performance {
    fn choose(&self, books: &Books, requester: TenantId) -> Option<TenantId> {
        let active = books.views().filter(|t| t.vram_bytes > 0).count().max(1) as u64;
        let min_share = books.vram_capacity_bytes / active;
        let key = |t: &TenantView| -(t.slowdown / t.vram_bytes.max(1) as f64);
        let pool = candidates(books.views());
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
    fn choose(&self, books: &Books, requester: TenantId) -> Option<TenantId> {
        pick(|t| t.access_rate, candidates(books.views()), requester)
    }

    fn wants_access_rates(&self) -> bool {
        true
    }
}

/// Chooses the winner of a return: among those with something to get back
/// (`TenantBooks::can_take`), of the highest priority class, the tenant with the least VRAM for
/// its weight (counting chunks already chosen to return), then the lowest id: the first
/// taker of the sorted tenant order.
pub(crate) fn select_winner(books: &Books) -> Option<TenantId> {
    books.tenant_order().first_taker().map(|k| k.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{BufferKind, Location};
    use crate::contract::Contract;
    use crate::ids::RequestId;
    use crate::protocol::AllocRequest;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    /// Books in 1 MiB chunks with a tenant per `(MiB in VRAM, MiB evicted, contract)`.
    fn books(tenants: &[(u64, u64, Contract)]) -> Books {
        let mut books = Books::new(1 << 30, 1 << 40, MIB, 1);
        for (i, &(vram_mib, host_mib, contract)) in tenants.iter().enumerate() {
            let tenant = TenantId(i as u32);
            books.set_contract(tenant, contract);
            let bytes = (vram_mib + host_mib) * MIB;
            if bytes > 0 {
                let req = AllocRequest {
                    request: RequestId(i as u64),
                    tenant,
                    bytes,
                    kind: BufferKind::Device,
                    priority: None,
                    chunk_priorities: Vec::new(),
                };
                books.create_buffer(&req, vram_mib * MIB, false);
            }
        }
        books.sort_tenants();
        books
    }

    /// Tenants holding these MiB of VRAM and one evicted MiB each, under the default
    /// contract.
    fn plain(vram_mib: &[u64]) -> Vec<(u64, u64, Contract)> {
        vram_mib
            .iter()
            .map(|&v| (v, 1, Contract::default()))
            .collect()
    }

    /// A contract whose host limit is full: its tenant may not give.
    fn full_host() -> Contract {
        Contract {
            host_limit_bytes: Some(MIB),
            ..Contract::default()
        }
    }

    fn victim(name: &str, books: &Books, requester: u32) -> Option<TenantId> {
        let entry = VICTIMS.iter().find(|v| v.choice.name == name).unwrap();
        (entry.build)().choose(books, TenantId(requester))
    }

    #[test]
    fn largest_share_picks_the_biggest_and_ties_go_to_the_requester() {
        let mut tenants = plain(&[100, 300, 300]);
        let b = books(&tenants);
        assert_eq!(victim("largest-share", &b, 0), Some(TenantId(1)));
        assert_eq!(victim("largest-share", &b, 2), Some(TenantId(2)));
        tenants[1].2 = full_host();
        assert_eq!(
            victim("largest-share", &books(&tenants), 0),
            Some(TenantId(2))
        );
    }

    #[test]
    fn performance_picks_smallest_slowdown_per_byte_above_min_share() {
        let mut b = books(&plain(&[50, 500, 450]));
        // Tenant 0 is below 1/3 of 1 GiB: ignored.
        (
            b.tenant_mut(TenantId(1)).kernel_ns,
            b.tenant_mut(TenantId(1)).ideal_ns,
        ) = (3, 1);
        // 1.2 / 450 is smaller than 3 / 500.
        (
            b.tenant_mut(TenantId(2)).kernel_ns,
            b.tenant_mut(TenantId(2)).ideal_ns,
        ) = (6, 5);
        assert_eq!(victim("performance", &b, 1), Some(TenantId(2)));
        // Nobody above the minimum share: fall back to everyone.
        assert_eq!(
            victim("performance", &books(&plain(&[10, 20])), 0),
            Some(TenantId(1))
        );
    }

    #[test]
    fn access_rate_picks_the_busiest() {
        let mut b = books(&plain(&[500, 100]));
        b.tenant_mut(TenantId(1)).access_rate = 10.0;
        assert_eq!(victim("access-rate", &b, 0), Some(TenantId(1)));
    }

    #[test]
    fn weights_and_classes_order_victims_and_winners() {
        // 300 MiB at weight 3 is a smaller share than 150 MiB at weight 1.
        let mut tenants = plain(&[300, 150, 100]);
        tenants[0].2.weight = 3;
        let b = books(&tenants);
        assert_eq!(victim("largest-share", &b, 2), Some(TenantId(1)));
        assert_eq!(select_winner(&b), Some(TenantId(0)));
        // A higher class gives only when no lower one can; it gets back first.
        tenants[1].2.priority_class = 1;
        let mut b = books(&tenants);
        assert_eq!(victim("largest-share", &b, 2), Some(TenantId(2)));
        b.tenant_mut(TenantId(0)).access_rate = 5.0;
        assert_eq!(victim("access-rate", &b, 2), Some(TenantId(0)));
        assert_eq!(select_winner(&b), Some(TenantId(1)));
        for t in [0, 2] {
            tenants[t].2.host_limit_bytes = Some(MIB);
        }
        assert_eq!(
            victim("largest-share", &books(&tenants), 2),
            Some(TenantId(1))
        );
    }

    #[test]
    fn winner_is_the_poorest_with_something_evicted() {
        let mut tenants = plain(&[100, 50, 10]);
        tenants[2].1 = 0;
        assert_eq!(select_winner(&books(&tenants)), Some(TenantId(1)));
    }

    /// The largest-share victim as a scan of every tenant's view: what the tenant order
    /// must answer.
    fn largest_share_by_scan(books: &Books, requester: TenantId) -> Option<TenantId> {
        pick(
            |t| t.vram_bytes as f64 / f64::from(t.weight),
            candidates(books.views()),
            requester,
        )
    }

    /// The return's winner as a scan of every tenant.
    fn winner_by_scan(books: &Books) -> Option<TenantId> {
        let takers = (0..books.tenant_slots() as u32).filter_map(|i| {
            let t = books.tenant(TenantId(i)).unwrap();
            let (c, v) = (t.contract, t.usage.vram_bytes);
            t.can_take(books.chunk_bytes)
                .then_some((TenantId(i), v, c.weight, c.priority_class))
        });
        // Shares compared exactly: VRAM over weight, cross-multiplied.
        takers
            .min_by(|(a, va, wa, ca), (b, vb, wb, cb)| {
                cb.cmp(ca)
                    .then_with(|| {
                        (u128::from(*va) * u128::from(*wb))
                            .cmp(&(u128::from(*vb) * u128::from(*wa)))
                    })
                    .then(a.cmp(b))
            })
            .map(|t| t.0)
    }

    fn contract() -> impl Strategy<Value = Contract> {
        (
            1u32..4,
            0u8..3,
            prop_oneof![Just(0u64), 1u64..6],
            prop::option::of(4u64..12),
        )
            .prop_map(
                |(weight, priority_class, guarantee_mib, limit_mib)| Contract {
                    weight,
                    priority_class,
                    vram_guarantee_bytes: guarantee_mib * MIB,
                    vram_limit_bytes: limit_mib.map(|m| m * MIB),
                    ..Contract::default()
                },
            )
    }

    proptest! {
        /// Through moves both ways and frees, the orders answer what a scan of every
        /// tenant answers, ties included (small shares tie often).
        #[test]
        fn the_orders_answer_what_a_scan_answers(
            tenants in prop::collection::vec((0u64..8, 0u64..4, contract()), 1..12),
            steps in prop::collection::vec((0usize..12, any::<bool>(), 0u32..12), 0..40),
        ) {
            let mut b = books(&tenants);
            for (tenant, to_host, requester) in steps {
                let tenant = TenantId((tenant % tenants.len()) as u32);
                let (from, to) = if to_host {
                    (Location::Vram, Location::Host)
                } else {
                    (Location::Host, Location::Vram)
                };
                let buffer = b.tenant(tenant).and_then(|t| t.buffers.first().copied());
                if let Some(buffer) = buffer {
                    match b.chunk_refs(buffer, from).first() {
                        Some(&chunk) => b.plan_move(chunk, to),
                        None => b.free(tenant, buffer).unwrap(),
                    }
                }
                b.sort_tenants();
                prop_assert_eq!(b.check_order(), Ok(()));
                let requester = TenantId(requester);
                prop_assert_eq!(
                    victim("largest-share", &b, requester.0),
                    largest_share_by_scan(&b, requester)
                );
                prop_assert_eq!(select_winner(&b), winner_by_scan(&b));
            }
        }
    }
}
