//! How much of VRAM managed memory may fill and who holds it: the paging machine's
//! counts of resident pages, overall and per owner (tenant), with the owners ordered by
//! what they hold for the largest-share victim, and what each owner's contract asks of
//! its pages (a guarantee, a cap, a weight, a class). A leaf: the machine reports every
//! page that enters or leaves VRAM here, and nothing here knows of blocks or policies.

use std::collections::BTreeSet;

use super::pages::PAGE_BYTES;
use crate::contract::{Contract, keeps_guarantee};

/// What an owner's contract asks of its pages, with the VRAM its runtime's buffers
/// hold outside them (those count against its guarantee and cap first).
#[derive(Clone, Copy, Debug)]
struct OwnerTerms {
    guarantee_bytes: u64,
    cap_bytes: u64,
    weight: u32,
    class: u8,
    reserved_bytes: u64,
}

impl Default for OwnerTerms {
    fn default() -> Self {
        Self {
            guarantee_bytes: 0,
            cap_bytes: u64::MAX,
            weight: 1,
            class: 0,
            reserved_bytes: 0,
        }
    }
}

impl OwnerTerms {
    /// Pages of VRAM the owner keeps.
    fn guarantee_pages(&self) -> u64 {
        self.guarantee_bytes
            .saturating_sub(self.reserved_bytes)
            .div_ceil(PAGE_BYTES)
    }

    /// The most pages of VRAM the owner may hold.
    fn cap_pages(&self) -> u64 {
        self.cap_bytes.saturating_sub(self.reserved_bytes) / PAGE_BYTES
    }
}

/// Where an owner holding `held` pages stands in the largest-share order: the lowest
/// class first, then the most pages per weight (exact: pages scaled by 2^64 over the
/// weight), then the highest number.
type ShareKey = (u8, u128, u32);

/// The room for managed pages and its holders.
#[derive(Debug)]
pub(super) struct Room {
    /// Whole pages of VRAM (the room before reservations).
    vram_pages: u64,
    /// Bytes of VRAM reserved for other things (the runtime's buffers).
    reserved_bytes: u64,
    /// Pages managed memory may fill: VRAM less the reservations, rounded up once (a
    /// running sum of rounded reservations would drift).
    capacity_pages: u64,
    resident_pages: u64,
    /// Pages in VRAM per owner, and, where the largest-share victim reads it, the
    /// owners by [`ShareKey`] (the first victim last): kept only then, since every
    /// migration moves it.
    by_owner: Vec<u64>,
    by_share: Option<BTreeSet<ShareKey>>,
    /// Per owner: its contract's terms.
    terms: Vec<OwnerTerms>,
    /// The most pages each owner had in VRAM at once.
    peak_by_owner: Vec<u64>,
    /// Owners whose pages in VRAM changed since the driver last asked, and a flag per
    /// owner for whether it is listed.
    changed_owners: Vec<u32>,
    listed: Vec<bool>,
}

impl Room {
    /// Room for `capacity_bytes` of VRAM (whole pages of it), nothing resident; with
    /// `by_share`, the owners ordered by what they hold ([`Room::largest_first`]).
    pub(super) fn new(capacity_bytes: u64, by_share: bool) -> Self {
        Self {
            vram_pages: capacity_bytes / PAGE_BYTES,
            reserved_bytes: 0,
            capacity_pages: capacity_bytes / PAGE_BYTES,
            resident_pages: 0,
            by_owner: Vec::new(),
            by_share: by_share.then(BTreeSet::new),
            terms: Vec::new(),
            peak_by_owner: Vec::new(),
            changed_owners: Vec::new(),
            listed: Vec::new(),
        }
    }

    /// Makes room in the per-owner counts for `owner`.
    pub(super) fn add_owner(&mut self, owner: u32) {
        let n = owner as usize + 1;
        if self.by_owner.len() < n {
            self.by_owner.resize(n, 0);
            self.terms.resize(n, OwnerTerms::default());
            self.peak_by_owner.resize(n, 0);
            self.listed.resize(n, false);
        }
    }

    /// `delta` pages of `owner` entered (or left) VRAM.
    ///
    /// # Panics
    /// If more pages leave than are resident.
    pub(super) fn count(&mut self, owner: u32, delta: i64) {
        let before = self.by_owner[owner as usize];
        let after = before
            .checked_add_signed(delta)
            .expect("resident pages never go negative");
        self.by_owner[owner as usize] = after;
        self.rekey(owner, before, after);
        let peak = &mut self.peak_by_owner[owner as usize];
        *peak = (*peak).max(after);
        if !std::mem::replace(&mut self.listed[owner as usize], true) {
            self.changed_owners.push(owner);
        }
        self.resident_pages = self
            .resident_pages
            .checked_add_signed(delta)
            .expect("resident pages never go negative");
    }

    /// Moves `owner` in the largest-share order from `before` pages to `after` (or
    /// from its old terms to new ones: the caller changes them between two calls).
    fn rekey(&mut self, owner: u32, before: u64, after: u64) {
        if let Some(by_share) = &mut self.by_share {
            let (weight, class) = {
                let terms = &self.terms[owner as usize];
                (u128::from(terms.weight), terms.class)
            };
            // Every migration moves an owner: no 128-bit division at the usual weight.
            let key = |held: u64| {
                let scaled = u128::from(held) << 64;
                let share = if weight == 1 { scaled } else { scaled / weight };
                (u8::MAX - class, share, owner)
            };
            by_share.remove(&key(before));
            if after > 0 {
                by_share.insert(key(after));
            }
        }
    }

    /// Gives `owner` its contract's terms.
    pub(super) fn set_contract(&mut self, owner: u32, contract: &Contract) {
        self.add_owner(owner);
        let held = self.by_owner[owner as usize];
        self.rekey(owner, held, 0);
        let terms = &mut self.terms[owner as usize];
        *terms = OwnerTerms {
            guarantee_bytes: contract.vram_guarantee_bytes,
            cap_bytes: contract.vram_cap_bytes(),
            weight: contract.weight,
            class: contract.priority_class,
            reserved_bytes: terms.reserved_bytes,
        };
        self.rekey(owner, 0, held);
    }

    /// Whether `owner` may give pages: it has no guarantee, or holds at least `margin`
    /// pages more than it.
    pub(super) fn may_give(&self, owner: u32, margin: u64) -> bool {
        let held = self.by_owner[owner as usize];
        keeps_guarantee(held, self.terms[owner as usize].guarantee_pages(), margin)
    }

    /// Pages `owner` may still take under its cap.
    pub(super) fn room_under_cap(&self, owner: u32) -> u64 {
        self.terms[owner as usize]
            .cap_pages()
            .saturating_sub(self.by_owner[owner as usize])
    }

    /// Pages `owner` holds beyond its cap (a reservation of its lowered the cap).
    pub(super) fn over_cap(&self, owner: u32) -> u64 {
        self.by_owner[owner as usize].saturating_sub(self.terms[owner as usize].cap_pages())
    }

    /// `bytes` of VRAM go to `owner`'s runtime buffers (outside the pages), or come
    /// back (`reserve = false`).
    pub(super) fn reserve(&mut self, owner: u32, bytes: u64, reserve: bool) {
        self.add_owner(owner);
        let owned = &mut self.terms[owner as usize].reserved_bytes;
        if reserve {
            self.reserved_bytes += bytes;
            *owned += bytes;
        } else {
            self.reserved_bytes = self.reserved_bytes.saturating_sub(bytes);
            *owned = owned.saturating_sub(bytes);
        }
        self.recompute_capacity();
    }

    fn recompute_capacity(&mut self) {
        self.capacity_pages = self
            .vram_pages
            .saturating_sub(self.reserved_bytes.div_ceil(PAGE_BYTES));
    }

    /// Pages managed memory may fill.
    pub(super) fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }

    /// Pages in VRAM.
    pub(super) fn resident_pages(&self) -> u64 {
        self.resident_pages
    }

    /// Whether more is resident than fits (a reservation shrank the room).
    pub(super) fn over_full(&self) -> bool {
        self.resident_pages > self.capacity_pages
    }

    /// The owners holding pages, largest holder first (none unless kept by share).
    pub(super) fn largest_first(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_share
            .iter()
            .flat_map(|set| set.iter().rev().map(|(_, _, owner)| *owner))
    }

    /// `owner`'s pages in VRAM now and at most so far.
    pub(super) fn owner_pages(&self, owner: u32) -> (u64, u64) {
        let get = |v: &Vec<u64>| v.get(owner as usize).copied().unwrap_or(0);
        (get(&self.by_owner), get(&self.peak_by_owner))
    }

    /// An owner whose pages in VRAM changed since it was last returned.
    pub(super) fn pop_changed_owner(&mut self) -> Option<u32> {
        let owner = self.changed_owners.pop()?;
        self.listed[owner as usize] = false;
        Some(owner)
    }

    /// Checks the counts against `counted`, the pages resident in the blocks: the
    /// overall count equals it and the per-owner counts' sum, and it fits the room.
    pub(super) fn check(&self, counted: u64) -> Result<(), String> {
        if counted != self.resident_pages {
            return Err(format!(
                "{counted} pages resident in the blocks, {} counted",
                self.resident_pages
            ));
        }
        let by_owner: u64 = self.by_owner.iter().sum();
        if by_owner != self.resident_pages {
            return Err(format!(
                "{by_owner} pages resident by owner, {} counted",
                self.resident_pages
            ));
        }
        if self.over_full() {
            return Err(format!(
                "{} pages resident, capacity {}",
                self.resident_pages, self.capacity_pages
            ));
        }
        if let Some(owner) = (0..self.by_owner.len() as u32).find(|o| self.over_cap(*o) > 0) {
            return Err(format!(
                "owner {owner} holds {} pages, beyond its cap of {}",
                self.by_owner[owner as usize],
                self.terms[owner as usize].cap_pages()
            ));
        }
        Ok(())
    }
}
