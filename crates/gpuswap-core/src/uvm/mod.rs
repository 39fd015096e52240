//! Unified-memory demand paging decisions (`../shared/spec/uvm-adaptive.md`,
//! `../shared/spec/uvm-driver.md`): which pages a fault batch migrates (a
//! [`prefetch::Prefetch`]), what leaves VRAM to make room (an [`evict::Eviction`]), and
//! the residency of every page as per-block bitmaps, never per-page objects.
//!
//! Sans-IO like the rest of the core, and through the protocol like a real driver: the
//! device serves touches from its own page state and hands over each batch of faults
//! ([`Paging::fault_batch`]); the machine decides which pages migrate, leave, are
//! pinned remotely or are served by another rule, as [`PageAction`]s the device carries
//! out (and charges the time of). Its residency is the planned one: it equals the
//! device's whenever no migration is in flight (between the actions' queuing and the
//! device's `migrations_done`). Pages are numbered densely: page
//! `b * 512 + i` is page `i` of VA block `b`; each allocation gets blocks of its own
//! ([`Paging::add_allocation`]).

pub mod detect;
pub mod evict;
pub mod optimum;
pub mod pages;
pub mod policy;
pub mod prefetch;
mod room;
mod runtime;
pub mod thrash;
pub mod trial;

use std::collections::VecDeque;

use crate::cache_hint::load_soon;
use crate::contract::Contract;
use crate::ids::{BufferId, TenantId};
use crate::protocol::{Fault, PageAction, ServeRule};
use evict::Eviction;
use pages::{PAGE_BYTES, PAGES_PER_BIG_PAGE, PAGES_PER_BLOCK, Pages, split};
use policy::{Plan, Runtime};
use prefetch::Prefetch;
use room::Room;
pub use runtime::AllocationPaging;
use runtime::{Adaptive, PlanChange};
use thrash::{BlockThrash, ThrashingParams};

/// When a touched page not in VRAM migrates (`migration = ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Migration {
    /// On its first far fault (the driver's default).
    OnFault,
    /// Read remotely until its 2 MiB block's access counter reaches `threshold` reads;
    /// writes migrate at once (soft pinning). With `adaptive`, once memory is
    /// oversubscribed the threshold is `threshold x 2 x (round trips + 1)`, the research
    /// simulator's dynamic threshold (`multiply_dma_penalty` 2; round trips: the block's
    /// evictions).
    Delayed {
        /// Remote reads of a block before it migrates.
        threshold: u32,
        /// Whether the threshold grows with the block's evictions.
        adaptive: bool,
    },
    /// Never: host memory mapped for the GPU, every access remote (hard pinning).
    ZeroCopy,
}

/// How the paging machine behaves: the prefetcher, the eviction policy, when pages
/// migrate and whether the driver's thrashing mitigation runs.
#[derive(Debug)]
pub struct PagingConfig {
    /// What a fault batch migrates besides the faulted pages.
    pub prefetch: Box<dyn Prefetch>,
    /// Builds the eviction policy (what leaves VRAM when a migration needs room): one for the machine, or one per tenant under
    /// [`Victim::LargestShare`].
    pub eviction: fn() -> Box<dyn Eviction>,
    /// When a page migrates.
    pub migration: Migration,
    /// The driver's thrashing detection (`None`: off).
    pub thrashing: Option<ThrashingParams>,
    /// Evicted pages no kernel wrote since they arrived are dropped, not copied back
    /// (the host's copy is still good); `false`: every evicted page is copied back, as the
    /// driver does.
    pub invalidate_clean: bool,
    /// Whose pages make room: anybody's in the eviction policy's order (the driver has
    /// no notion of tenants), or the largest holder's first.
    pub victim: Victim,
    /// Who chooses each allocation's plan: the configuration, or the adaptive runtime.
    pub runtime: Runtime,
    /// The run's seed, where the random prefetcher and eviction policy start.
    pub seed: u64,
}

/// Whose pages an eviction takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Victim {
    /// The eviction policy's choice among all resident pages (the driver's behaviour).
    Any,
    /// The tenant (allocation owner) with the most pages in VRAM, then the eviction
    /// policy's order within its pages: a fairness no driver has today.
    LargestShare,
}

impl PagingConfig {
    /// [`PagingConfig::new`] with the prefetcher and the eviction policy registered
    /// under these names, if both are.
    pub fn named(prefetch: &str, eviction: &str) -> Option<Self> {
        let prefetch = prefetch::find_prefetch(prefetch)?;
        let eviction = evict::find_eviction(eviction)?;
        Some(Self::new((prefetch.build)(), eviction.build))
    }

    /// These settings with pages migrating as `migration` says.
    pub fn migrating(self, migration: Migration) -> Self {
        Self { migration, ..self }
    }

    /// These settings with the driver's thrashing detection on (its defaults) or off.
    pub fn thrashing(self, on: bool) -> Self {
        Self {
            thrashing: on.then(ThrashingParams::default),
            ..self
        }
    }

    /// On-fault migration with the driver's thrashing detection.
    pub fn new(prefetch: Box<dyn Prefetch>, eviction: fn() -> Box<dyn Eviction>) -> Self {
        Self {
            prefetch,
            eviction,
            migration: Migration::OnFault,
            thrashing: Some(ThrashingParams::default()),
            invalidate_clean: false,
            victim: Victim::Any,
            runtime: Runtime::Fixed,
            seed: 0,
        }
    }
}

/// What the paging machine decided, counted per tenant (what the device measured, such
/// as touches, is the device's to count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PagingStats {
    /// Pages in the fault batches (a page waiting in a batch faults once).
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
    /// Fault batches that waited a nap for thrashing pages.
    pub throttles: u64,
    /// Pages the thrashing mitigation pinned in host memory.
    pub pins: u64,
    /// Times the adaptive runtime changed the plan of one of its allocations.
    pub plan_switches: u64,
}

/// Where a VA block belongs: read for every fault of a batch, before anything else of
/// the block, so kept apart in a dense array of 16-byte entries that stays in cache.
#[derive(Clone, Copy, Debug, Default)]
struct Home {
    /// Whose allocation it belongs to (stats are per owner).
    owner: u32,
    /// Its allocation's number, and its place in the allocation (blocks).
    alloc: u32,
    alloc_index: u32,
    /// Pages that exist: `0..valid_pages` (the allocation's last block may be partial;
    /// none once it is freed).
    valid_pages: u16,
}

impl Home {
    /// Pages that exist.
    fn valid(&self) -> Pages {
        Pages::prefix(usize::from(self.valid_pages))
    }

    /// The big page holding page `i`, numbered from its allocation's start.
    fn big_page(&self, i: usize) -> u32 {
        self.alloc_index * BIG_PAGES_PER_BLOCK + (i / PAGES_PER_BIG_PAGE) as u32
    }
}

/// A block's state besides its bitmaps, in a dense array of 32-byte entries apart from
/// them: a fault reads it for the faulting block and the victim, and in random order
/// over a working set of many GiB these entries stay in cache where the bitmaps cannot.
#[derive(Debug, Default)]
struct Block {
    /// The rule the device was last told for the block's pages away from VRAM.
    published: ServeRule,
    /// Times pages of the block were evicted (delayed migration's round trips).
    round_trips: u32,
    /// When pages last migrated into it ([`Bitmaps::last_arrivals`] says which).
    last_in_ns: u64,
    /// Per-page thrashing state, once the block shows any.
    thrash: Option<Box<BlockThrash>>,
    /// Whether the tree order holds it (its allocation's plan), not the configured one.
    tree_order: bool,
}

// The dense array's point: a block's state on half a cache line, its bitmaps on three.
const _: () = assert!(size_of::<Block>() == 32 && size_of::<Bitmaps>() == 192);

impl Block {
    /// Pages mapped remotely: pinned by the thrashing mitigation.
    fn pinned(&self) -> Pages {
        self.thrash.as_ref().map_or(Pages::EMPTY, |t| t.pinned)
    }
}

/// A block's page bitmaps, each on a cache line of its own (aligned): a migration reads
/// and writes all three, an eviction the first two, so a fault costs three lines, where
/// bitmaps straddling lines cost more.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct Bitmaps {
    /// Pages in VRAM as planned (the device's, once the migrations asked are done).
    resident: Pages,
    /// Pages evicted at least once (for the thrashing count).
    evicted: Pages,
    /// The pages that migrated in last, at [`Block::last_in_ns`] (their arrival is the
    /// thrashing detector's first event; earlier arrivals are older than that).
    last_arrivals: Pages,
}

/// The residency of managed memory and the policies that change it.
#[derive(Debug)]
pub struct Paging {
    /// The room and who holds it.
    room: Room,
    /// Per VA block, dense by block number: where it belongs, its state and its pages.
    homes: Vec<Home>,
    blocks: Vec<Block>,
    bitmaps: Vec<Bitmaps>,
    prefetch: Box<dyn Prefetch>,
    /// The tree prefetcher, for allocations whose plan asks for it.
    tree_prefetch: Box<dyn Prefetch>,
    build_eviction: fn() -> Box<dyn Eviction>,
    /// The run's seed, for the eviction orders built later (one per owner).
    seed: u64,
    /// The eviction policies, two per slot: the configured one, then the tree order for
    /// blocks whose plan asks for it (victims come from it first). One slot orders every
    /// block, or
    /// under [`Victim::LargestShare`] one per owner orders its blocks (dense by owner).
    evictions: Vec<Box<dyn Eviction>>,
    migration: Migration,
    thrashing: Option<ThrashingParams>,
    invalidate_clean: bool,
    victim: Victim,
    /// Decisions for the device, in order.
    actions: VecDeque<PageAction>,
    /// Whether migrations or evictions were asked that the device has not reported done.
    migrating: bool,
    /// Whether anything was evicted yet (the adaptive threshold applies from then).
    oversubscribed: bool,
    /// Whether the configured eviction order wants touches of resident pages (the tree
    /// order does); asked once, not on the hottest path.
    configured_observes: bool,
    /// The allocations and the adaptive runtime's choice of their plans.
    adaptive: Adaptive,
    seq: u64,
    /// Per owner (tenant), dense by owner number.
    stats: Vec<PagingStats>,
    /// Per owner: its memory is advised to the host (PILOT's MAdvise), so what of it is
    /// not in VRAM is accessed remotely.
    advised: Vec<bool>,
    /// The first time a fault batch took a victim's pages below its guarantee (for
    /// [`Paging::check_invariants`]).
    breach: Option<String>,
    /// A fault batch's pages in address order, kept between batches so that sorting one
    /// allocates nothing (empty outside [`Paging::fault_batch`]).
    batch_pages: Vec<u64>,
    /// A fault batch's owners, kept for the same reason (empty outside
    /// [`Paging::fault_batch`]).
    batch_owners: Vec<u32>,
}

impl Paging {
    /// A machine for `capacity_bytes` of VRAM (whole pages of it) behaving as `config`
    /// says. With no page of room, faults migrate nothing.
    pub fn new(capacity_bytes: u64, config: PagingConfig) -> Self {
        let evictions: Vec<Box<dyn Eviction>> = eviction_slot(config.eviction, config.seed).into();
        let mut prefetch = config.prefetch;
        prefetch.reseed(config.seed);
        Self {
            room: Room::new(capacity_bytes, config.victim == Victim::LargestShare),
            homes: Vec::new(),
            blocks: Vec::new(),
            bitmaps: Vec::new(),
            prefetch,
            tree_prefetch: (prefetch::find_prefetch("tree").expect("registered").build)(),
            build_eviction: config.eviction,
            seed: config.seed,
            migration: config.migration,
            thrashing: config.thrashing,
            invalidate_clean: config.invalidate_clean,
            victim: config.victim,
            actions: VecDeque::new(),
            migrating: false,
            oversubscribed: false,
            configured_observes: evictions[0].observes_touches(),
            evictions,
            adaptive: Adaptive::new(config.runtime),
            seq: 0,
            stats: Vec::new(),
            advised: Vec::new(),
            batch_pages: Vec::new(),
            batch_owners: Vec::new(),
            breach: None,
        }
    }

    /// Gives `owner` its contract: under [`Victim::LargestShare`] its guarantee (its
    /// pages are never a victim for another owner's faults unless it holds a whole
    /// block more), its VRAM cap (its own pages make room beyond it), its weight and its
    /// class order the victims. Its runtime's buffers count against the guarantee and
    /// the cap first.
    pub fn set_contract(&mut self, owner: u32, contract: &Contract) {
        self.room.set_contract(owner, contract);
    }

    /// Advises `owner`'s memory to the host (`true`: pages not in VRAM are accessed
    /// remotely from their next touch; those in VRAM stay until evicted) or lifts it.
    pub fn set_advised(&mut self, owner: u32, advised: bool) {
        let o = owner as usize;
        if o >= self.advised.len() {
            self.advised.resize(o + 1, false);
        }
        if std::mem::replace(&mut self.advised[o], advised) != advised {
            let owned: Vec<u32> = self.adaptive.of(owner).collect();
            for a in owned {
                self.publish_allocation(a);
            }
        }
    }

    /// The next decision for the device, in order.
    pub fn poll_action(&mut self) -> Option<PageAction> {
        self.actions.pop_front()
    }

    /// The device finished every migration and eviction asked so far.
    pub fn migrations_done(&mut self) {
        self.migrating = false;
    }

    /// Whether migrations or evictions are in flight (asked, not yet reported done).
    pub fn migrating(&self) -> bool {
        self.migrating
    }

    /// VA blocks numbered so far (freed ones included).
    pub fn blocks(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Block `b`'s pages in VRAM as planned.
    pub fn planned_resident(&self, b: u32) -> Pages {
        self.bitmaps
            .get(b as usize)
            .map_or(Pages::EMPTY, |b| b.resident)
    }

    /// Registers managed `buffer` of `bytes` of `owner` (all in host memory); returns
    /// its first page number. The device hears of it (`Manage`), and of its blocks' rule
    /// where touches of them do not simply fault.
    pub fn add_allocation(&mut self, owner: u32, buffer: BufferId, bytes: u64) -> u64 {
        let first_block = self.blocks.len() as u32;
        let first = u64::from(first_block) * PAGES_PER_BLOCK as u64;
        let alloc = self.adaptive.allocs.len() as u32;
        let mut pages = bytes.div_ceil(PAGE_BYTES) as usize;
        let mut alloc_index = 0;
        while pages > 0 {
            let n = pages.min(PAGES_PER_BLOCK);
            self.homes.push(Home {
                owner,
                alloc,
                alloc_index,
                valid_pages: n as u16,
            });
            self.blocks.push(Block::default());
            self.bitmaps.push(Bitmaps::default());
            pages -= n;
            alloc_index += 1;
        }
        self.adaptive.add(owner, first_block, alloc_index);
        if self.stats.len() <= owner as usize {
            self.stats
                .resize(owner as usize + 1, PagingStats::default());
            self.room.add_owner(owner);
            if self.victim == Victim::LargestShare {
                while self.evictions.len() < 2 * (owner as usize + 1) {
                    self.evictions
                        .extend(eviction_slot(self.build_eviction, self.seed));
                }
            }
        }
        self.actions.push_back(PageAction::Manage {
            tenant: TenantId(owner),
            buffer,
            first_page: first,
            pages: bytes.div_ceil(PAGE_BYTES),
        });
        self.publish_allocation(alloc);
        first
    }

    /// The allocation starting at `first` page, of `bytes`, was freed: its pages leave
    /// VRAM (not counted as evicted) and can no longer be touched.
    pub fn free_allocation(&mut self, first: u64, bytes: u64) {
        self.actions.push_back(PageAction::Release {
            first_page: first,
            pages: bytes.div_ceil(PAGE_BYTES),
        });
        let blocks = bytes.div_ceil(PAGE_BYTES).div_ceil(PAGES_PER_BLOCK as u64);
        let start = split(first).0;
        let alloc = self.homes[start as usize].alloc;
        self.adaptive.free(alloc);
        for b in start..start + blocks as u32 {
            let home = &mut self.homes[b as usize];
            home.valid_pages = 0;
            let owner = home.owner;
            let bitmaps = &mut self.bitmaps[b as usize];
            let pages = bitmaps.resident;
            *bitmaps = Bitmaps::default();
            let block = &mut self.blocks[b as usize];
            // Its order stays: the pages leave the order that holds them.
            *block = Block {
                tree_order: block.tree_order,
                ..Block::default()
            };
            self.room.count(owner, -(pages.count() as i64));
            if !pages.is_empty() {
                self.eviction_of(b).left(b, pages, true);
            }
        }
    }

    /// `bytes` of VRAM go to something else (the runtime's buffers): the machine's room
    /// shrinks, evicting what no longer fits.
    pub fn reserve(&mut self, owner: u32, bytes: u64) {
        self.room.reserve(owner, bytes, true);
        // The runtime's buffers are real VRAM: guarantees give way when nothing else can.
        self.evict_while(Room::over_full, |p| {
            p.choose_victim(u32::MAX, Some(owner))
                .or_else(|| p.choose_victim(u32::MAX, None))
        });
        // The owner's cap shrank by as much: its own pages beyond it go.
        self.evict_while(
            |room| room.over_cap(owner) > 0,
            |p| p.victim_of(owner, u32::MAX),
        );
    }

    /// Evicts the victims `choose` names, for a reservation, while `short` says the
    /// room lacks pages and victims still make some.
    fn evict_while(
        &mut self,
        short: impl Fn(&Room) -> bool,
        mut choose: impl FnMut(&mut Self) -> Option<(u32, Pages)>,
    ) {
        while short(&self.room) {
            let Some((v, pages)) = choose(self) else {
                break;
            };
            if self.evict(v, pages, None) == 0 {
                break;
            }
        }
    }

    /// `bytes` reserved before for `owner` are the machine's again.
    pub fn unreserve(&mut self, owner: u32, bytes: u64) {
        self.room.reserve(owner, bytes, false);
    }

    /// What it counted for `owner` so far.
    pub fn stats(&self, owner: u32) -> PagingStats {
        self.stats.get(owner as usize).copied().unwrap_or_default()
    }

    /// Pages of VRAM the machine may fill (after reservations).
    pub fn capacity_pages(&self) -> u64 {
        self.room.capacity_pages()
    }

    /// Pages in VRAM.
    pub fn resident_pages(&self) -> u64 {
        self.room.resident_pages()
    }

    /// A kernel of `owner` ended at `now_ns` after running `ns` (`ideal_ns` with its
    /// data in VRAM): the adaptive runtime observes it and may change plans.
    pub fn kernel_finished(&mut self, owner: u32, now_ns: u64, ns: u64, ideal_ns: u64) {
        for change in self.adaptive.kernel_finished(owner, now_ns, ns, ideal_ns) {
            self.carry_out(change);
        }
    }

    /// What the runtime knows of each of `owner`'s allocations, in the order they were
    /// made.
    pub fn allocations(&self, owner: u32) -> Vec<AllocationPaging> {
        self.adaptive.allocations(owner)
    }

    /// Carries out a plan change: the allocation's resident pages move to the other
    /// eviction order when the plan's differs (in address order, as if they had just
    /// arrived: the old order's history does not carry over), and the device hears of
    /// the blocks' new rule.
    fn carry_out(&mut self, (a, old, plan): PlanChange) {
        let alloc = self.adaptive.allocation(a);
        let (first, blocks, owner) = (alloc.first_block, alloc.blocks, alloc.owner);
        self.stats[owner as usize].plan_switches += 1;
        if old.tree_eviction() != plan.tree_eviction() {
            for b in first..first + blocks {
                let resident = self.bitmaps[b as usize].resident;
                if !resident.is_empty() {
                    self.eviction_of(b).left(b, resident, true);
                }
                self.blocks[b as usize].tree_order = plan.tree_eviction();
                if !resident.is_empty() {
                    self.seq += 1;
                    let seq = self.seq;
                    self.eviction_of(b).resident(b, resident, true, seq);
                }
            }
        }
        self.publish_allocation(a);
    }

    /// An owner whose pages in VRAM changed since it was last returned.
    pub fn pop_changed_owner(&mut self) -> Option<u32> {
        self.room.pop_changed_owner()
    }

    /// `owner`'s pages in VRAM now and at most so far.
    pub fn owner_pages(&self, owner: u32) -> (u64, u64) {
        self.room.owner_pages(owner)
    }

    /// Resident pages kernels touched, in touch order (access-counter notes): the
    /// eviction orders that observe touches see them. The device sends them before the
    /// batch that follows them, so the orders see touches and arrivals as they happened.
    pub fn access_notes(&mut self, notes: &[(u32, Pages)]) {
        for &(b, pages) in notes {
            let (Some(block), Some(bitmaps)) =
                (self.blocks.get(b as usize), self.bitmaps.get(b as usize))
            else {
                continue;
            };
            let pages = pages & bitmaps.resident;
            if !pages.is_empty() && (block.tree_order || self.configured_observes) {
                self.seq += 1;
                let seq = self.seq;
                self.eviction_of(b).touched(b, pages, seq);
            }
        }
    }

    /// How the device should serve touches of block `b`'s pages away from VRAM now.
    fn serve_rule(&self, b: u32) -> ServeRule {
        let alloc = self.adaptive.allocation(self.homes[b as usize].alloc);
        let advised = self
            .advised
            .get(alloc.owner as usize)
            .copied()
            .unwrap_or(false);
        let migration = match (alloc.plan, self.adaptive.runtime()) {
            _ if advised => Migration::ZeroCopy,
            (Plan::HostPinned, _) if self.oversubscribed => Migration::ZeroCopy,
            (
                Plan::HotInVram,
                Runtime::Adaptive { migrate_threshold }
                | Runtime::AdaptiveCoarse { migrate_threshold },
            ) => Migration::Delayed {
                threshold: migrate_threshold,
                adaptive: true,
            },
            _ => self.migration,
        };
        match migration {
            Migration::OnFault => ServeRule::Fault,
            Migration::ZeroCopy => ServeRule::Remote,
            Migration::Delayed {
                threshold,
                adaptive,
            } => ServeRule::Counter(if adaptive && self.oversubscribed {
                let trips = self.blocks[b as usize].round_trips.saturating_add(1);
                threshold.saturating_mul(2).saturating_mul(trips)
            } else {
                threshold
            }),
        }
    }

    /// Tells the device block `b`'s rule if it changed since it was last told.
    fn publish(&mut self, b: u32) {
        let rule = self.serve_rule(b);
        let block = &mut self.blocks[b as usize];
        if block.published != rule {
            block.published = rule;
            self.actions.push_back(PageAction::Serve { block: b, rule });
        }
    }

    /// [`Paging::publish`] for every block of allocation `a`.
    fn publish_allocation(&mut self, a: u32) {
        let alloc = self.adaptive.allocation(a);
        if alloc.freed {
            return;
        }
        for b in alloc.first_block..alloc.first_block + alloc.blocks {
            self.publish(b);
        }
    }

    /// Services a batch of faulted pages (in the order they faulted; each once) at
    /// `now_ns`: per block, in address order, the prefetcher's region is migrated,
    /// evicting other blocks' pages first when VRAM is short. When one block's region
    /// alone exceeds VRAM, its faulted pages come first and the rest of the region is
    /// dropped. Pages the thrashing mitigation pins stay in host memory, mapped remotely.
    /// The decisions queue for [`Paging::poll_action`], ending with `Replay`.
    ///
    /// # Panics
    /// If a page belongs to no allocation (the device numbers pages from `Manage`).
    pub fn fault_batch(&mut self, faults: &[Fault], now_ns: u64) {
        // A batch counts for every owner with a fault in it: gathered as the faults are
        // read, a run of one owner's faults once.
        let mut owners = std::mem::take(&mut self.batch_owners);
        for (k, f) in faults.iter().enumerate() {
            // A hint never fails: a page of no allocation is the assertion's, below.
            if let Some(home) = faults
                .get(k + LOAD_AHEAD)
                .and_then(|ahead| self.homes.get(split(ahead.page).0 as usize))
            {
                load_soon(home);
            }
            let (b, i) = split(f.page);
            let home = &self.homes[b as usize];
            assert!(
                i < usize::from(home.valid_pages),
                "page {} belongs to no allocation",
                f.page
            );
            self.stats[home.owner as usize].far_faults += 1;
            if owners.last() != Some(&home.owner) {
                owners.push(home.owner);
            }
            self.adaptive.faulted(home.alloc, home.big_page(i));
        }
        // Sorted as page numbers, which order as (block, page) do and sort quicker.
        let mut by_page = std::mem::take(&mut self.batch_pages);
        by_page.extend(faults.iter().map(|f| f.page));
        by_page.sort_unstable();
        by_page.dedup();
        owners.sort_unstable();
        owners.dedup();
        for &o in &owners {
            self.stats[o as usize].fault_batches += 1;
        }
        owners.clear();
        self.batch_owners = owners;
        let (mut at, mut asked) = (0, 0);
        let mut nap_ns = 0;
        // Owners with a throttled page in the batch: it waits one nap for all of them.
        let mut throttled_owners: Vec<u32> = Vec::new();
        while at < by_page.len() {
            let ask_to = (at + LOAD_AHEAD).min(by_page.len());
            for page in &by_page[asked.max(at)..ask_to] {
                self.load_block_soon(split(*page).0);
            }
            asked = ask_to;
            let b = split(by_page[at]).0;
            let mut faulted = Pages::EMPTY;
            while let Some((_, i)) = by_page
                .get(at)
                .map(|p| split(*p))
                .filter(|(pb, _)| *pb == b)
            {
                faulted |= Pages::single(i);
                at += 1;
            }
            if self.migrate_block(b, faulted, now_ns) {
                nap_ns = self.thrashing.map_or(0, |t| t.nap_ns);
                throttled_owners.push(self.homes[b as usize].owner);
            }
        }
        by_page.clear();
        self.batch_pages = by_page;
        throttled_owners.sort_unstable();
        throttled_owners.dedup();
        for owner in throttled_owners {
            self.stats[owner as usize].throttles += 1;
        }
        if nap_ns > 0 {
            self.actions.push_back(PageAction::Throttle { nap_ns });
        }
        self.actions.push_back(PageAction::Replay);
    }

    /// Asks for the state of block `b` that servicing its faults reads first
    /// ([`load_soon`]): its home, its `Block` and its bitmaps.
    fn load_block_soon(&self, b: u32) {
        let b = b as usize;
        load_soon(&self.homes[b]);
        load_soon(&self.blocks[b]);
        let bitmaps = &self.bitmaps[b];
        for pages in [&bitmaps.resident, &bitmaps.evicted, &bitmaps.last_arrivals] {
            load_soon(pages);
        }
    }

    /// Migrates what faulting `faulted` pages of block `b` brings, evicting for it;
    /// returns whether the thrashing detector throttles any of them. The detector records
    /// the faulted pages' migration first and pins those it says to (they stay away).
    fn migrate_block(&mut self, b: u32, faulted: Pages, now_ns: u64) -> bool {
        let home = self.homes[b as usize];
        let resident = self.bitmaps[b as usize].resident;
        let faulted = faulted & home.valid() & !resident;
        let (faulted, pinned, throttled) = self.thrash_hints(b, home.owner, faulted, now_ns);
        if faulted.is_empty() {
            return throttled;
        }
        let resident_before = self.room.resident_pages();
        let prefetch = if self.adaptive.allocation(home.alloc).plan.tree_prefetch() {
            &mut self.tree_prefetch
        } else {
            &mut self.prefetch
        };
        let region = prefetch
            .region(resident, home.valid(), faulted)
            .without(pinned);
        let wanted = (region | faulted).without(resident);
        let (wanted, evicted) = self.make_room(b, home.owner, wanted, faulted, now_ns);
        if wanted.is_empty() {
            return throttled;
        }
        self.bring_in(b, wanted, faulted, now_ns);
        debug_assert_eq!(
            self.room.resident_pages() + evicted,
            resident_before + wanted.count() as u64
        );
        throttled
    }

    /// The thrashing detector's say on faulting `faulted` pages of block `b` (of
    /// `owner`) at `now_ns`: it records their migration and pins those it says to (they
    /// stay away). Returns the faulted pages that still come, the block's pinned pages,
    /// and whether it throttles any.
    fn thrash_hints(
        &mut self,
        b: u32,
        owner: u32,
        faulted: Pages,
        now_ns: u64,
    ) -> (Pages, Pages, bool) {
        let Some(params) = self.thrashing else {
            return (faulted, Pages::EMPTY, false);
        };
        let Some(thrash) = self.blocks[b as usize].thrash.as_mut() else {
            return (faulted, Pages::EMPTY, false);
        };
        // Pins that ended by now ended on the device too (it serves them remotely until
        // then, and faults them after).
        thrash.unpin_expired(now_ns);
        thrash.record(faulted, now_ns, &params);
        let (new_pins, throttled) = thrash.hints(faulted, now_ns, &params);
        let pinned = thrash.pinned;
        if new_pins.is_empty() {
            return (faulted, pinned, throttled);
        }
        self.stats[owner as usize].pins += new_pins.count() as u64;
        self.actions.push_back(PageAction::Pin {
            block: b,
            pages: new_pins,
            until_ns: now_ns + params.pin_ns,
        });
        (faulted.without(new_pins), pinned, throttled)
    }

    /// Makes room for the pages `wanted` in block `b` (of `owner`, faulting `faulted`)
    /// at `now_ns`. Returns what comes and the pages evicted for it.
    fn make_room(
        &mut self,
        b: u32,
        owner: u32,
        mut wanted: Pages,
        faulted: Pages,
        now_ns: u64,
    ) -> (Pages, u64) {
        // The owner's cap first: beyond it the prefetched pages are dropped, then the
        // owner's own pages in other blocks make room, then fewer pages come.
        let mut evicted = 0;
        if wanted.count() as u64 > self.room.room_under_cap(owner) {
            wanted = wanted & faulted;
            loop {
                let cap_room = self.room.room_under_cap(owner);
                if wanted.count() as u64 <= cap_room {
                    break;
                }
                match self.victim_of(owner, b) {
                    Some((v, pages)) => evicted += self.evict(v, pages, Some(now_ns)),
                    // The block's own other pages make room, then what fits comes.
                    None => {
                        let short = wanted.count() - cap_room as usize;
                        let own = self.bitmaps[b as usize].resident.first(short);
                        evicted += self.evict(b, own, Some(now_ns));
                        wanted = wanted.first(self.room.room_under_cap(owner) as usize);
                        break;
                    }
                }
            }
        }
        // Room for it: evict other blocks' pages as the policy orders them. When nothing
        // else is left (VRAM smaller than the region), the region shrinks to the faulted
        // pages, this block's other pages make room for them, and a batch with more
        // faulted pages than VRAM holds brings what fits (the rest fault again).
        loop {
            let room = self.room.capacity_pages() - self.room.resident_pages();
            if wanted.count() as u64 <= room {
                break;
            }
            // VRAM is full (for the first time, the runtime decides before evicting).
            for change in self.adaptive.vram_full(now_ns) {
                self.carry_out(change);
            }
            match self.choose_victim(b, Some(owner)) {
                Some((v, pages)) => {
                    evicted += self.evict(v, pages, Some(now_ns));
                    let victim = self.homes[v as usize].owner;
                    if victim != owner && !self.room.may_give(victim, 0) && self.breach.is_none() {
                        self.breach = Some(format!(
                            "owner {victim} was a victim of owner {owner}'s faults below its guarantee"
                        ));
                    }
                }
                None => {
                    wanted = (wanted & faulted).first(self.room.capacity_pages() as usize);
                    let own = self.bitmaps[b as usize].resident;
                    let short = (wanted.count() as u64).saturating_sub(room) as usize;
                    evicted += self.evict(b, own.first(short), Some(now_ns));
                    // Victims kept by their guarantees may leave less room than the
                    // block's own pages gave: what fits comes.
                    let room = self.room.capacity_pages() - self.room.resident_pages();
                    wanted = wanted.first(room as usize);
                    break;
                }
            }
        }
        (wanted, evicted)
    }

    /// Brings the pages `wanted` of block `b` (faulting `faulted`) into VRAM at
    /// `now_ns`: the bitmaps, the migration, the counts and the eviction order.
    fn bring_in(&mut self, b: u32, wanted: Pages, faulted: Pages, now_ns: u64) {
        self.seq += 1;
        self.blocks[b as usize].last_in_ns = now_ns;
        let bitmaps = &mut self.bitmaps[b as usize];
        let first = bitmaps.resident.is_empty();
        bitmaps.resident |= wanted;
        bitmaps.last_arrivals = wanted;
        let thrashed = (wanted & faulted & bitmaps.evicted).count() as u64;
        bitmaps.evicted = bitmaps.evicted.without(wanted & faulted);
        let prefetched = wanted.without(faulted);
        let owner = self.homes[b as usize].owner;
        self.migrating = true;
        self.actions.push_back(PageAction::MigrateIn {
            block: b,
            pages: wanted,
        });
        self.room.count(owner, wanted.count() as i64);
        let stats = &mut self.stats[owner as usize];
        stats.pages_in += wanted.count() as u64;
        stats.pages_thrashed += thrashed;
        stats.pages_prefetched += prefetched.count() as u64;
        let seq = self.seq;
        self.eviction_of(b).resident(b, wanted, first, seq);
    }

    /// Evicts the resident ones of `pages` of block `v` (for a fault batch at `now_ns`,
    /// or `None` for a reservation); returns how many. Victims name pages by the
    /// eviction orders' view, which may include some already gone.
    fn evict(&mut self, v: u32, pages: Pages, now_ns: Option<u64>) -> u64 {
        let bitmaps = &mut self.bitmaps[v as usize];
        let pages = pages & bitmaps.resident;
        if pages.is_empty() {
            return 0;
        }
        let n = pages.count() as u64;
        bitmaps.resident = bitmaps.resident.without(pages);
        bitmaps.evicted |= pages;
        let (emptied, last_arrivals) = (bitmaps.resident.is_empty(), bitmaps.last_arrivals);
        let thrashing = self.thrashing;
        let block = &mut self.blocks[v as usize];
        block.round_trips = block.round_trips.saturating_add(1);
        // Pages leaving within a lapse of their arrival are the detector's business:
        // the block gets per-page state, and their arrival and the eviction are events.
        // In a watched block, faulted arrivals were recorded when they were serviced.
        if let (Some(params), Some(now)) = (thrashing, now_ns) {
            let recent = pages & last_arrivals;
            match block.thrash.as_mut() {
                Some(thrash) => thrash.record(pages, now, &params),
                None if !recent.is_empty()
                    && now.saturating_sub(block.last_in_ns) <= params.lapse_ns =>
                {
                    let mut thrash = Box::new(BlockThrash::new(now));
                    thrash.record(recent, block.last_in_ns.min(now), &params);
                    thrash.record(pages, now, &params);
                    block.thrash = Some(thrash);
                }
                None => {}
            }
        }
        let owner = self.homes[v as usize].owner;
        self.migrating = true;
        self.actions.push_back(PageAction::Evict {
            block: v,
            pages,
            drop_clean: self.invalidate_clean,
        });
        self.room.count(owner, -(n as i64));
        self.stats[owner as usize].pages_out += n;
        self.eviction_of(v).left(v, pages, emptied);
        // The block's access counter restarts on the device; its threshold may grow with
        // the round trip, and the first eviction changes every block's rule.
        if std::mem::replace(&mut self.oversubscribed, true) {
            self.publish(v);
        } else {
            for b in 0..self.blocks.len() as u32 {
                if !self.adaptive.allocation(self.homes[b as usize].alloc).freed {
                    self.publish(b);
                }
            }
        }
        n
    }

    /// The eviction policy's next victim (never block `protect` whole): from the largest
    /// holder's pages first under [`Victim::LargestShare`] (the lowest class, then the
    /// most pages per weight), then the next largest's; for a fault batch of `faulting`,
    /// never from another owner less than a block over its guarantee. `None` when
    /// nothing resident is left to take.
    fn choose_victim(&mut self, protect: u32, faulting: Option<u32>) -> Option<(u32, Pages)> {
        let (room, bitmaps, evictions) = (&self.room, &self.bitmaps, &mut self.evictions);
        match self.victim {
            Victim::Any => slot_victim(bitmaps, evictions, 0, protect),
            Victim::LargestShare => {
                let kept = |o: u32| {
                    faulting.is_some_and(|f| f != o) && !room.may_give(o, PAGES_PER_BLOCK as u64)
                };
                room.largest_first()
                    .filter(|o| !kept(*o))
                    .find_map(|owner| slot_victim(bitmaps, evictions, owner as usize, protect))
            }
        }
    }

    /// The next victim among `owner`'s own pages (under [`Victim::LargestShare`], where
    /// each owner's pages have their own order; `None` otherwise).
    fn victim_of(&mut self, owner: u32, protect: u32) -> Option<(u32, Pages)> {
        match self.victim {
            Victim::Any => None,
            Victim::LargestShare => {
                slot_victim(&self.bitmaps, &mut self.evictions, owner as usize, protect)
            }
        }
    }

    /// The eviction policy instance that orders block `b`.
    fn eviction_of(&mut self, b: u32) -> &mut Box<dyn Eviction> {
        let block = &self.blocks[b as usize];
        let slot = match self.victim {
            Victim::Any => 0,
            Victim::LargestShare => self.homes[b as usize].owner as usize,
        };
        &mut self.evictions[2 * slot + usize::from(block.tree_order)]
    }

    /// Checks the residency accounting: the resident count is the sum of the blocks'
    /// bitmaps, within VRAM, and only valid pages are resident; no page is both resident
    /// and pinned in host memory.
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(breach) = &self.breach {
            return Err(breach.clone());
        }
        let counted: u64 = self.bitmaps.iter().map(|b| b.resident.count() as u64).sum();
        self.room.check(counted)?;
        for (i, (b, bitmaps)) in self.blocks.iter().zip(&self.bitmaps).enumerate() {
            if !bitmaps.resident.without(self.homes[i].valid()).is_empty() {
                return Err(format!("block {i} has resident pages it does not have"));
            }
            if !(bitmaps.resident & b.pinned()).is_empty() {
                return Err(format!(
                    "block {i} has resident pages pinned in host memory"
                ));
            }
        }
        Ok(())
    }
}

/// The next victim in `slot`'s orders: the tree order first, then the configured one;
/// one with nothing resident left would never make room, so it is none.
fn slot_victim(
    bitmaps: &[Bitmaps],
    evictions: &mut [Box<dyn Eviction>],
    slot: usize,
    protect: u32,
) -> Option<(u32, Pages)> {
    let resident = |v: u32| bitmaps[v as usize].resident;
    let useful = |(v, pages): &(u32, Pages)| !(*pages & bitmaps[*v as usize].resident).is_empty();
    let [configured, tree] = &mut evictions[2 * slot..2 * slot + 2] else {
        unreachable!("two orders per slot")
    };
    tree.victim(&resident, protect)
        .filter(useful)
        .or_else(|| configured.victim(&resident, protect).filter(useful))
}

/// A slot's eviction orders: the configured policy's, then the tree order.
fn eviction_slot(configured: fn() -> Box<dyn Eviction>, seed: u64) -> [Box<dyn Eviction>; 2] {
    let tree = evict::find_eviction("tree").expect("registered").build;
    let mut slot = [configured(), tree()];
    for order in &mut slot {
        order.reseed(seed);
    }
    slot
}

/// How far ahead a fault batch asks for the state of the blocks it services, in faults
/// ([`load_soon`]): in random order each block misses the cache, and misses asked for
/// this far ahead overlap with the service of the blocks in between, where one block
/// after another would wait for each in turn. Far enough for a miss to arrive, near
/// enough that the misses in flight stay within what the core tracks (asked for all at
/// once, a batch's 256 blocks' lines gained little).
const LOAD_AHEAD: usize = 8;

/// Big pages of a VA block.
const BIG_PAGES_PER_BLOCK: u32 = (PAGES_PER_BLOCK / PAGES_PER_BIG_PAGE) as u32;

#[cfg(test)]
mod tests;
