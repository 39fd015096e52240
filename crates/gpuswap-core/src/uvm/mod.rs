//! Unified-memory demand paging decisions (`../shared/spec/uvm-adaptive.md`,
//! `../shared/spec/uvm-driver.md`): which pages a fault batch migrates (a
//! [`prefetch::Prefetch`]), what leaves VRAM to make room (an [`evict::Eviction`]), and
//! the residency of every page as per-block bitmaps, never per-page objects.
//!
//! Sans-IO like the rest of the core: the driver says which pages were touched
//! ([`Paging::touch`]: resident or a far fault) and hands over each batch of faults
//! ([`Paging::service`]); the machine decides and counts, and the driver charges the
//! time (fault latency, transfers). Pages are numbered densely: page `b * 512 + i` is
//! page `i` of VA block `b`; each allocation gets blocks of its own
//! ([`Paging::add_allocation`]).
//!
//! Not yet here (issue 8 goes on): thrashing detection, access counters and pinning,
//! tree pre-eviction, the engine's page-touch streams and timing.

pub mod evict;
pub mod optimum;
pub mod pages;
pub mod prefetch;

use evict::Eviction;
use pages::{PAGE_BYTES, PAGES_PER_BLOCK, Pages};
use prefetch::Prefetch;

/// What one fault batch moved, for the driver to charge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Serviced {
    /// Pages migrated to VRAM.
    pub pages_in: u64,
    /// Pages evicted to host memory.
    pub pages_out: u64,
    /// VA blocks pages were migrated into (one transfer each).
    pub blocks_in: u64,
}

/// What the paging machine counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PagingStats {
    /// Page touches that reached the machine, resident or not (the simulator's unit of
    /// work; repeated touches of a page already waiting in the driver's batch are
    /// coalesced before).
    pub touches: u64,
    /// Touches of pages not in VRAM.
    pub far_faults: u64,
    /// Fault batches serviced.
    pub fault_batches: u64,
    /// Pages migrated to VRAM.
    pub pages_in: u64,
    /// Pages evicted to host memory.
    pub pages_out: u64,
    /// Faulted pages that had been evicted before (evicted, then needed again).
    pub pages_thrashed: u64,
    /// Pages migrated without being faulted (the prefetcher's choice).
    pub pages_prefetched: u64,
    /// Prefetched pages evicted before anybody touched them.
    pub prefetched_unused: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Block {
    /// Whose allocation it belongs to (stats are per owner).
    owner: u32,
    /// Pages that exist (the allocation's last block may be partial).
    valid: Pages,
    resident: Pages,
    /// Pages evicted at least once (for the thrashing count).
    evicted: Pages,
    /// Prefetched pages not touched since.
    prefetched: Pages,
}

/// The residency of managed memory and the policies that change it.
#[derive(Debug)]
pub struct Paging {
    /// Whole pages of VRAM (the machine's room before reservations).
    vram_pages: u64,
    /// Bytes of VRAM reserved for other things (the runtime's buffers).
    reserved_bytes: u64,
    /// Pages the machine may fill: VRAM less the reservations, rounded up once (a
    /// running sum of rounded reservations would drift).
    capacity_pages: u64,
    resident_pages: u64,
    blocks: Vec<Block>,
    prefetch: Box<dyn Prefetch>,
    eviction: Box<dyn Eviction>,
    seq: u64,
    /// Per owner (tenant), dense by owner number.
    stats: Vec<PagingStats>,
}

impl Paging {
    /// A machine for `capacity_bytes` of VRAM (whole pages of it) with the prefetcher and
    /// the eviction policy given. With no page of room, faults migrate nothing.
    pub fn new(
        capacity_bytes: u64,
        prefetch: Box<dyn Prefetch>,
        eviction: Box<dyn Eviction>,
    ) -> Self {
        Self {
            vram_pages: capacity_bytes / PAGE_BYTES,
            reserved_bytes: 0,
            capacity_pages: capacity_bytes / PAGE_BYTES,
            resident_pages: 0,
            blocks: Vec::new(),
            prefetch,
            eviction,
            seq: 0,
            stats: Vec::new(),
        }
    }

    /// Registers a managed allocation of `bytes` of `owner` (all in host memory); returns
    /// its first page number.
    pub fn add_allocation(&mut self, owner: u32, bytes: u64) -> u64 {
        let first = self.blocks.len() as u64 * PAGES_PER_BLOCK as u64;
        let mut pages = bytes.div_ceil(PAGE_BYTES) as usize;
        while pages > 0 {
            let n = pages.min(PAGES_PER_BLOCK);
            self.blocks.push(Block {
                owner,
                valid: Pages::range(0, n),
                ..Block::default()
            });
            pages -= n;
        }
        if self.stats.len() <= owner as usize {
            self.stats
                .resize(owner as usize + 1, PagingStats::default());
        }
        first
    }

    /// The allocation starting at `first` page, of `bytes`, was freed: its pages leave
    /// VRAM (not counted as evicted) and can no longer be touched.
    pub fn free_allocation(&mut self, first: u64, bytes: u64) {
        let blocks = bytes.div_ceil(PAGE_BYTES).div_ceil(PAGES_PER_BLOCK as u64);
        let start = split(first).0;
        for b in start..start + blocks as u32 {
            let block = &mut self.blocks[b as usize];
            let pages = block.resident;
            self.resident_pages -= pages.count() as u64;
            *block = Block {
                owner: block.owner,
                ..Block::default()
            };
            if !pages.is_empty() {
                self.eviction.left(b, pages, true);
            }
        }
    }

    /// `bytes` of VRAM go to something else (the runtime's buffers): the machine's room
    /// shrinks, evicting what no longer fits.
    pub fn reserve(&mut self, bytes: u64) {
        self.reserved_bytes += bytes;
        self.recompute_capacity();
        while self.resident_pages > self.capacity_pages {
            let blocks = &self.blocks;
            let victim = self
                .eviction
                .victim(&|v| blocks[v as usize].resident, u32::MAX);
            let Some((v, pages)) = victim else { break };
            if self.evict(v, pages & self.blocks[v as usize].resident) == 0 {
                break;
            }
        }
    }

    /// `bytes` reserved before are the machine's again.
    pub fn unreserve(&mut self, bytes: u64) {
        self.reserved_bytes = self.reserved_bytes.saturating_sub(bytes);
        self.recompute_capacity();
    }

    fn recompute_capacity(&mut self) {
        self.capacity_pages = self
            .vram_pages
            .saturating_sub(self.reserved_bytes.div_ceil(PAGE_BYTES));
    }

    /// What it counted for `owner` so far.
    pub fn stats(&self, owner: u32) -> PagingStats {
        self.stats.get(owner as usize).copied().unwrap_or_default()
    }

    /// Pages of VRAM the machine may fill (after reservations).
    pub fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }

    /// Pages in VRAM.
    pub fn resident_pages(&self) -> u64 {
        self.resident_pages
    }

    /// A page was touched: `true` if it is in VRAM (the touch is recorded for the
    /// eviction order), `false` for a far fault (counted; the driver batches it).
    ///
    /// # Panics
    /// If `page` belongs to no allocation: the driver numbers pages from
    /// [`Paging::add_allocation`].
    pub fn touch(&mut self, page: u64) -> bool {
        let (b, i) = split(page);
        let block = &mut self.blocks[b as usize];
        assert!(
            block.valid.contains(i),
            "page {page} belongs to no allocation"
        );
        self.seq += 1;
        self.stats[block.owner as usize].touches += 1;
        if block.resident.contains(i) {
            block.prefetched.remove(i);
            self.eviction.touched(b, i, self.seq);
            return true;
        }
        self.stats[block.owner as usize].far_faults += 1;
        false
    }

    /// Services a batch of faulted pages (duplicates are merged): per block, in address
    /// order, the prefetcher's region is migrated, evicting other blocks' pages first when
    /// VRAM is short. When one block's region alone exceeds VRAM, its faulted pages come
    /// first and the rest of the region is dropped.
    pub fn service(&mut self, faults: &[u64]) -> Serviced {
        let mut by_block: Vec<(u32, usize)> = faults.iter().map(|p| split(*p)).collect();
        by_block.sort_unstable();
        by_block.dedup();
        // A batch counts for every owner with a fault in it.
        let mut owners: Vec<u32> = by_block
            .iter()
            .map(|(b, _)| self.blocks[*b as usize].owner)
            .collect();
        owners.dedup();
        for o in owners {
            self.stats[o as usize].fault_batches += 1;
        }
        let mut at = 0;
        let mut serviced = Serviced::default();
        while at < by_block.len() {
            let b = by_block[at].0;
            let mut faulted = Pages::EMPTY;
            while at < by_block.len() && by_block[at].0 == b {
                faulted.insert(by_block[at].1);
                at += 1;
            }
            let (pages_in, pages_out) = self.migrate_block(b, faulted);
            serviced.pages_in += pages_in;
            serviced.pages_out += pages_out;
            serviced.blocks_in += u64::from(pages_in > 0);
        }
        serviced
    }

    /// Migrates what faulting `faulted` pages of block `b` brings: (pages in, pages
    /// evicted for it).
    fn migrate_block(&mut self, b: u32, faulted: Pages) -> (u64, u64) {
        let block = self.blocks[b as usize];
        let faulted = faulted & block.valid & !block.resident;
        if faulted.is_empty() {
            return (0, 0);
        }
        let resident_before = self.resident_pages;
        let mut evicted = 0;
        let region = self.prefetch.region(block.resident, block.valid, faulted);
        let mut wanted = (region | faulted) & !block.resident;
        // Room for it: evict other blocks' pages as the policy orders them. When nothing
        // else is left (VRAM smaller than the region), the region shrinks to the faulted
        // pages, this block's other pages make room for them, and a batch with more
        // faulted pages than VRAM holds brings what fits (the rest fault again).
        loop {
            let room = self.capacity_pages - self.resident_pages;
            if wanted.count() as u64 <= room {
                break;
            }
            let blocks = &self.blocks;
            // A victim with nothing resident left would never make room: as no victim.
            let victim = self
                .eviction
                .victim(&|v| blocks[v as usize].resident, b)
                .filter(|(v, pages)| !(*pages & blocks[*v as usize].resident).is_empty());
            match victim {
                Some((v, pages)) => {
                    evicted += self.evict(v, pages & self.blocks[v as usize].resident);
                }
                None => {
                    wanted = first_pages(faulted, self.capacity_pages as usize);
                    let own = self.blocks[b as usize].resident;
                    let short = (wanted.count() as u64).saturating_sub(room) as usize;
                    evicted += self.evict(b, first_pages(own, short));
                    break;
                }
            }
        }
        if wanted.is_empty() {
            return (0, evicted);
        }
        self.seq += 1;
        let block = &mut self.blocks[b as usize];
        let first = block.resident.is_empty();
        block.resident |= wanted;
        let thrashed = (wanted & faulted & block.evicted).count() as u64;
        block.evicted = block.evicted & !(wanted & faulted);
        let prefetched = wanted & !faulted;
        block.prefetched |= prefetched;
        self.resident_pages += wanted.count() as u64;
        let stats = &mut self.stats[block.owner as usize];
        stats.pages_in += wanted.count() as u64;
        stats.pages_thrashed += thrashed;
        stats.pages_prefetched += prefetched.count() as u64;
        self.eviction.resident(b, wanted, first, self.seq);
        debug_assert_eq!(
            self.resident_pages + evicted,
            resident_before + wanted.count() as u64
        );
        (wanted.count() as u64, evicted)
    }

    /// Evicts `pages` of block `v`; returns how many.
    fn evict(&mut self, v: u32, pages: Pages) -> u64 {
        let block = &mut self.blocks[v as usize];
        let n = pages.count() as u64;
        block.resident = block.resident & !pages;
        block.evicted |= pages;
        let unused = (block.prefetched & pages).count() as u64;
        block.prefetched = block.prefetched & !pages;
        let emptied = block.resident.is_empty();
        self.resident_pages -= n;
        let stats = &mut self.stats[block.owner as usize];
        stats.pages_out += n;
        stats.prefetched_unused += unused;
        self.eviction.left(v, pages, emptied);
        n
    }

    /// Checks the residency accounting: the resident count is the sum of the blocks'
    /// bitmaps, within VRAM, and only valid pages are resident.
    pub fn check_invariants(&self) -> Result<(), String> {
        let counted: u64 = self.blocks.iter().map(|b| b.resident.count() as u64).sum();
        if counted != self.resident_pages {
            return Err(format!(
                "{counted} pages resident in the blocks, {} counted",
                self.resident_pages
            ));
        }
        if self.resident_pages > self.capacity_pages {
            return Err(format!(
                "{} pages resident, capacity {}",
                self.resident_pages, self.capacity_pages
            ));
        }
        if let Some(b) = self
            .blocks
            .iter()
            .position(|b| !(b.resident & !b.valid).is_empty())
        {
            return Err(format!("block {b} has resident pages it does not have"));
        }
        Ok(())
    }
}

/// The first `n` pages of a set.
fn first_pages(pages: Pages, n: usize) -> Pages {
    pages.iter().take(n).fold(Pages::EMPTY, |mut p, i| {
        p.insert(i);
        p
    })
}

/// (block, page in block) of a page number.
fn split(page: u64) -> (u32, usize) {
    (
        (page / PAGES_PER_BLOCK as u64) as u32,
        (page % PAGES_PER_BLOCK as u64) as usize,
    )
}

#[cfg(test)]
mod tests;
