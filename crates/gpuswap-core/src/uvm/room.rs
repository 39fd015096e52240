//! How much of VRAM managed memory may fill and who holds it: the paging machine's
//! counts of resident pages, overall and per owner (tenant), with the owners ordered by
//! what they hold for the largest-share victim. A leaf: the machine reports every page
//! that enters or leaves VRAM here, and nothing here knows of blocks or policies.

use std::collections::BTreeSet;

use super::pages::PAGE_BYTES;

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
    /// owners by them (largest last): kept only then, since every migration moves it.
    by_owner: Vec<u64>,
    by_share: Option<BTreeSet<(u64, u32)>>,
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
            self.peak_by_owner.resize(n, 0);
            self.listed.resize(n, false);
        }
    }

    /// `delta` pages of `owner` entered (or left) VRAM.
    ///
    /// # Panics
    /// If more pages leave than are resident.
    pub(super) fn count(&mut self, owner: u32, delta: i64) {
        let held = &mut self.by_owner[owner as usize];
        let before = *held;
        *held = held
            .checked_add_signed(delta)
            .expect("resident pages never go negative");
        if let Some(by_share) = &mut self.by_share {
            by_share.remove(&(before, owner));
            if *held > 0 {
                by_share.insert((*held, owner));
            }
        }
        let peak = &mut self.peak_by_owner[owner as usize];
        *peak = (*peak).max(*held);
        if !std::mem::replace(&mut self.listed[owner as usize], true) {
            self.changed_owners.push(owner);
        }
        self.resident_pages = self
            .resident_pages
            .checked_add_signed(delta)
            .expect("resident pages never go negative");
    }

    /// `bytes` of VRAM go to something else (the runtime's buffers), or come back.
    pub(super) fn reserve(&mut self, bytes: u64) {
        self.reserved_bytes += bytes;
        self.recompute_capacity();
    }

    /// `bytes` reserved before are managed memory's again.
    pub(super) fn unreserve(&mut self, bytes: u64) {
        self.reserved_bytes = self.reserved_bytes.saturating_sub(bytes);
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
            .flat_map(|set| set.iter().rev().map(|(_, owner)| *owner))
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
        Ok(())
    }
}
