//! Tenants kept in the orders the victim and return choices compare them by, so that a
//! choice reads the first entry of a tree instead of a view of every tenant: its cost
//! follows the tenants that changed since the last choice, not the number of tenants.
//!
//! The books mark a tenant stale whenever a figure its place depends on changes (its
//! VRAM or host bytes, whether its lists are empty, its contract); `Books::sort_tenants`
//! re-places the stale ones before a policy reads the orders, as `Books::flush` fills the
//! chunk trees before a policy reads the chunk lists.

use std::cmp::{Ordering, Reverse};
use std::collections::BTreeSet;

use crate::ids::TenantId;

/// A tenant's place among those that may give a chunk: the lowest priority class first,
/// then the largest share, then the lowest id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct GiveKey {
    pub(crate) class: u8,
    /// VRAM over weight, as the `f64` the largest-share victim compares, by its bits:
    /// shares are never negative, and the bits of non-negative floats order as the
    /// floats do (`f64::total_cmp`).
    share_bits: Reverse<u64>,
    pub(crate) id: TenantId,
}

impl GiveKey {
    /// The key of tenant `id` holding `vram_bytes` under `weight` and `class`.
    pub(crate) fn new(id: TenantId, vram_bytes: u64, weight: u32, class: u8) -> Self {
        Self {
            class,
            share_bits: Reverse((vram_bytes as f64 / f64::from(weight)).to_bits()),
            id,
        }
    }

    /// Whether `self` and `other` tie on everything but the id.
    pub(crate) fn ties(&self, other: &GiveKey) -> bool {
        (self.class, self.share_bits) == (other.class, other.share_bits)
    }
}

/// A tenant's place among those that may take a chunk back: the highest priority class
/// first, then the least VRAM for its weight (compared exactly, cross-multiplied), then
/// the lowest id.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TakeKey {
    pub(crate) class: u8,
    pub(crate) vram_bytes: u64,
    pub(crate) weight: u32,
    pub(crate) id: TenantId,
}

impl TakeKey {
    /// Every field, for comparisons by value rather than by place.
    fn figures(self) -> (u8, u64, u32, TenantId) {
        (self.class, self.vram_bytes, self.weight, self.id)
    }
}

impl Ord for TakeKey {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .class
            .cmp(&self.class)
            .then_with(|| {
                (u128::from(self.vram_bytes) * u128::from(other.weight))
                    .cmp(&(u128::from(other.vram_bytes) * u128::from(self.weight)))
            })
            .then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for TakeKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

// Equal exactly when the order says so: two keys of one tenant with the same share in
// other figures are one place.
impl PartialEq for TakeKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for TakeKey {}

/// Where one tenant stands in the orders.
#[derive(Clone, Copy, Debug, Default)]
struct Place {
    give: Option<GiveKey>,
    take: Option<TakeKey>,
    stale: bool,
}

/// The tenants that may give a chunk and those that may take one back, each in its order.
#[derive(Debug, Default)]
pub(crate) struct TenantOrder {
    give: BTreeSet<GiveKey>,
    take: BTreeSet<TakeKey>,
    /// Indexed by tenant number: the keys under which it is in the trees (to find its
    /// entries when it changes).
    places: Vec<Place>,
    /// Tenants marked stale since the last re-placing, each once.
    stale: Vec<TenantId>,
}

impl TenantOrder {
    /// Notes that a figure `tenant`'s place depends on changed.
    pub(crate) fn mark(&mut self, tenant: TenantId) {
        let i = tenant.0 as usize;
        if i >= self.places.len() {
            self.places.resize_with(i + 1, Place::default);
        }
        if !self.places[i].stale {
            self.places[i].stale = true;
            self.stale.push(tenant);
        }
    }

    /// The next stale tenant, no longer marked; the caller re-places it.
    pub(crate) fn pop_stale(&mut self) -> Option<TenantId> {
        let tenant = self.stale.pop()?;
        self.places[tenant.0 as usize].stale = false;
        Some(tenant)
    }

    /// Puts `tenant` at its new places (`None`: it may not give, or not take).
    pub(crate) fn place(&mut self, tenant: TenantId, give: Option<GiveKey>, take: Option<TakeKey>) {
        let place = &mut self.places[tenant.0 as usize];
        if place.give != give {
            if let Some(old) = place.give.take() {
                self.give.remove(&old);
            }
            if let Some(new) = give {
                self.give.insert(new);
            }
            place.give = give;
        }
        // Compared by figures, not by order: a tenant whose figures changed but not its
        // share must still hold its current figures.
        if place.take.map(TakeKey::figures) != take.map(TakeKey::figures) {
            if let Some(old) = place.take.take() {
                self.take.remove(&old);
            }
            if let Some(new) = take {
                self.take.insert(new);
            }
            place.take = take;
        }
    }

    /// Whether no tenant awaits re-placing (policies read the orders only then).
    pub(crate) fn is_sorted(&self) -> bool {
        self.stale.is_empty()
    }

    /// The first tenant that may give: of the lowest class, the largest share, the lowest
    /// id.
    pub(crate) fn first_giver(&self) -> Option<&GiveKey> {
        debug_assert!(self.is_sorted(), "tenants sorted before choices");
        self.give.first()
    }

    /// `tenant`'s place among those that may give (`None` if it may not).
    pub(crate) fn give_key(&self, tenant: TenantId) -> Option<&GiveKey> {
        debug_assert!(self.is_sorted(), "tenants sorted before choices");
        self.places.get(tenant.0 as usize)?.give.as_ref()
    }

    /// The first tenant that may take a chunk back.
    pub(crate) fn first_taker(&self) -> Option<&TakeKey> {
        debug_assert!(self.is_sorted(), "tenants sorted before choices");
        self.take.first()
    }

    /// Checks that the trees hold exactly the places of the tenants not stale and the
    /// places `expected` gives for them (each tenant's give and take key).
    pub(crate) fn check(
        &self,
        expected: impl Iterator<Item = (Option<GiveKey>, Option<TakeKey>)>,
    ) -> Result<(), String> {
        let (mut gives, mut takes) = (0, 0);
        for (i, (give, take)) in expected.enumerate() {
            let place = self.places.get(i).copied().unwrap_or_default();
            gives += usize::from(place.give.is_some());
            takes += usize::from(place.take.is_some());
            if place.give.is_some_and(|k| !self.give.contains(&k))
                || place.take.is_some_and(|k| !self.take.contains(&k))
            {
                return Err(format!("tenant {i}'s place is missing from the orders"));
            }
            let take_matches = place.take.map(TakeKey::figures) == take.map(TakeKey::figures);
            if !place.stale && (place.give != give || !take_matches) {
                return Err(format!(
                    "tenant {i} is placed at {:?}/{:?}, its figures say {give:?}/{take:?}",
                    place.give, place.take
                ));
            }
        }
        if (gives, takes) != (self.give.len(), self.take.len()) {
            return Err(format!(
                "{gives}/{takes} tenants placed to give/take, the orders hold {}/{}",
                self.give.len(),
                self.take.len()
            ));
        }
        Ok(())
    }
}
