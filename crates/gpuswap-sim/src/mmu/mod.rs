//! The device's MMU: what hardware owns of where memory is. Two parts, both changed only
//! by the manager's actions (and, for pages, by the device's own touches): the [`page_table::PageTable`] of chunk mappings (GPUswap and the other
//! chunked modes), and the page state of managed buffers (unified memory), per 2 MiB VA
//! block as bitmaps: in VRAM, waiting in the fault batch, pinned in host memory and
//! mapped remotely, written, prefetched and not yet touched, plus each block's rule for
//! pages away from VRAM and its access counter.
//!
//! A kernel's page walk asks the MMU ([`Mmu::touch_run`]): resident pages are local,
//! host-mapped ones remote, the others fault into the batch, which the engine hands to
//! the manager. The MMU counts what it saw (touches, remote touches, prefetched pages
//! evicted unused, clean pages dropped) and, where the policy needs access counts, notes
//! the resident pages touched for the manager's eviction orders.

pub mod page_table;

use gpuswap_core::cache_hint::load_soon;
use gpuswap_core::protocol::{AccessKind, Fault, PageAction, ServeRule};
use gpuswap_core::uvm::Paging;
use gpuswap_core::uvm::pages::{PAGES_PER_BLOCK, Pages, WORDS_PER_BLOCK, split};
use gpuswap_core::{BufferId, TenantId};

use page_table::PageTable;

/// Access notes kept before they go to the manager in one call: bounds their memory on
/// a long walk with no fault; sending early changes nothing, since they stay in order.
const NOTES_PER_CALL: usize = 4096;

/// What a run of touches did ([`Mmu::touch_run`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Touched {
    /// Pages of the run touched (the rest wait for the batch to be serviced).
    pub pages: u64,
    /// Of those, pages accessed remotely (mapped in host memory) instead of faulting.
    pub remote: u64,
    /// Of those, pages whose touches wait for a fault batch: faulted now, or already
    /// waiting in the batch. Their warps stall; the others' go on.
    pub stalled: u64,
}

/// What the MMU counted for one tenant's managed pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCounts {
    /// Page touches, resident or not (the simulator's unit of work), including touches
    /// of pages already waiting in the batch.
    pub touches: u64,
    /// Touches served from host memory over the link (remote rule, delayed migration
    /// below its counter, pinned pages).
    pub remote_touches: u64,
    /// Prefetched pages evicted before anybody touched them.
    pub prefetched_unused: u64,
    /// Evicted pages dropped because they were clean (`drop_clean`).
    pub pages_dropped: u64,
}

/// What carrying out a run of page actions costs the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageWork {
    /// Pages migrated to VRAM, and the transfers (one per block) they took.
    pub pages_in: u64,
    pub blocks_in: u64,
    /// Pages evicted, and of those the ones copied back to the host (dropped clean ones
    /// cost nothing).
    pub pages_out: u64,
    pub pages_written_back: u64,
    /// The batch's throttling nap.
    pub nap_ns: u64,
    /// Whether the manager said the batch may be replayed.
    pub replayed: bool,
    /// Whether any migration or eviction was carried out.
    pub migrated: bool,
}

/// A VA block's header: what every touch reads before any page bit (owner, rule,
/// whether anything is pinned or waits in the batch). Dense apart from the bitmaps, 20
/// bytes a block, so the headers of a working set of many GiB stay in cache and a touch
/// of a random page misses at most the one line of bits it needs ([`Bits`]).
#[derive(Clone, Copy, Debug, Default)]
struct Head {
    owner: u32,
    /// Remote reads and faults since the block last lost pages (delayed migration's
    /// access counter).
    counter: u32,
    rule: ServeRule,
    /// Pages that exist: `0..valid_pages` (only a buffer's last block is partial).
    valid_pages: u16,
    /// Whether its pins ([`Mmu::pins`]) hold any page.
    has_pins: bool,
    /// The words of its waiting bitmap with a page, one bit each (the block is listed
    /// in [`Mmu::waiting`] while any is set): a fault need not read every word to know
    /// whether to list it, and the replay clears only these words' cache lines.
    waiting_words: u8,
}

impl Head {
    /// Its pages that exist.
    fn valid(&self) -> Pages {
        Pages::prefix(usize::from(self.valid_pages))
    }
}

/// A block's page bitmaps, interleaved word by word: the words of every [`Bitmap`] for
/// pages `64 w..64 w + 64` lie side by side in 32 bytes, so a touch of one page (a
/// random stream's every touch) reads and writes one cache line, where four separate
/// bitmaps would take four.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Bits([[u64; BITMAPS]; WORDS_PER_BLOCK]);

/// The page bitmaps of a block, by their index in each word group of [`Bits`].
#[derive(Clone, Copy, Debug)]
enum Bitmap {
    /// In VRAM.
    Resident,
    /// Faulted, waiting in the batch.
    InFlight,
    /// Written since they arrived in VRAM (or while waiting to).
    Dirty,
    /// Prefetched, and nobody touched them since they arrived.
    Prefetched,
}
const BITMAPS: usize = 4;

impl Bits {
    /// One bitmap, gathered from its words.
    fn get(&self, bitmap: Bitmap) -> Pages {
        Pages::from_words(std::array::from_fn(|w| self.0[w][bitmap as usize]))
    }

    /// Replaces one bitmap.
    fn set(&mut self, bitmap: Bitmap, pages: Pages) {
        for (group, word) in self.0.iter_mut().zip(pages.words()) {
            group[bitmap as usize] = word;
        }
    }
}

/// A block's pins: pages pinned in host memory and mapped remotely, and until when.
#[derive(Debug)]
struct Pins {
    pinned: Pages,
    until_ns: [u64; PAGES_PER_BLOCK],
    earliest_unpin_ns: u64,
}

/// The pages of `range` served remotely and those that fault now (away from VRAM and
/// not waiting in the batch), by a block's rule (`head`), its pins and its bitmaps.
fn classify(
    head: &Head,
    bits: &Bits,
    pinned: Pages,
    range: Pages,
    kind: AccessKind,
) -> (Pages, Pages) {
    let pinned = range & pinned;
    let away = range.without(bits.get(Bitmap::Resident) | bits.get(Bitmap::InFlight) | pinned);
    let (remote, faults) = match head.rule {
        ServeRule::Fault => (Pages::EMPTY, away),
        ServeRule::Remote => (away, Pages::EMPTY),
        // Reads below the counter's threshold are served remotely: the first
        // `threshold - counter - 1` of them; the next one reaches it and faults.
        ServeRule::Counter(t) if kind == AccessKind::Read && head.counter < t => {
            let remote = away.first((t - head.counter - 1) as usize);
            (remote, away.without(remote))
        }
        ServeRule::Counter(_) => (Pages::EMPTY, away),
    };
    (remote | pinned, faults)
}

/// The device's MMU.
#[derive(Debug, Default)]
pub struct Mmu {
    /// The chunk mappings.
    pub table: PageTable,
    /// Per VA block, dense by block number: its header, its page bitmaps, and its
    /// pins once it has had one (rare: a touch of a block with none never reads them).
    heads: Vec<Head>,
    bits: Vec<Bits>,
    pins: Vec<Option<Box<Pins>>>,
    /// Managed buffers by buffer slot: (buffer, first page, pages).
    managed: Vec<Option<(BufferId, u64, u64)>>,
    /// Blocks with pages waiting in the batch.
    waiting: Vec<u32>,
    counts: Vec<PageCounts>,
    /// Whether the manager wants access notes, and those not sent yet.
    wants_notes: bool,
    notes: Vec<(u32, Pages)>,
}

impl Mmu {
    /// An MMU that notes resident touches for the manager when `wants_notes` (the
    /// policy needs access counts).
    pub fn new(wants_notes: bool) -> Self {
        Self {
            wants_notes,
            ..Self::default()
        }
    }

    /// The pages of managed `buffer` (first page, pages), if it is one.
    pub fn managed_pages(&self, buffer: BufferId) -> Option<(u64, u64)> {
        match self.managed.get(buffer.slot()).copied().flatten() {
            Some((id, first, pages)) if id == buffer => Some((first, pages)),
            _ => None,
        }
    }

    /// What it counted for `tenant`.
    pub fn counts(&self, tenant: TenantId) -> PageCounts {
        self.counts
            .get(tenant.0 as usize)
            .copied()
            .unwrap_or_default()
    }

    /// Carries out a mapping action on the page table; an `Unmap` ends the buffer's
    /// managed pages' name (the manager releases the pages themselves).
    pub fn apply_mapping(&mut self, action: gpuswap_core::Mapping) {
        if let gpuswap_core::Mapping::Unmap { buffer, .. } = &action
            && let Some(slot) = self.managed.get_mut(buffer.slot())
            && slot.is_some_and(|(id, ..)| id == *buffer)
        {
            *slot = None;
        }
        self.table.apply(action);
    }

    /// Carries out a page action, adding what it costs to `work`.
    pub fn apply(&mut self, action: PageAction, work: &mut PageWork) {
        match action {
            PageAction::Manage {
                tenant,
                buffer,
                first_page,
                pages,
            } => {
                let slot = buffer.slot();
                if self.managed.len() <= slot {
                    self.managed.resize(slot + 1, None);
                }
                self.managed[slot] = Some((buffer, first_page, pages));
                let owner = tenant.0;
                if self.counts.len() <= owner as usize {
                    self.counts
                        .resize(owner as usize + 1, PageCounts::default());
                }
                let (first_block, _) = split(first_page);
                let mut left = pages as usize;
                let mut b = first_block as usize;
                while left > 0 {
                    if self.heads.len() <= b {
                        self.heads.resize(b + 1, Head::default());
                        self.bits.resize(b + 1, Bits::default());
                        self.pins.resize_with(b + 1, || None);
                    }
                    let n = left.min(PAGES_PER_BLOCK);
                    self.reset_block(
                        b,
                        Head {
                            owner,
                            valid_pages: n as u16,
                            ..Head::default()
                        },
                    );
                    left -= n;
                    b += 1;
                }
            }
            PageAction::Release { first_page, pages } => {
                let (first_block, _) = split(first_page);
                let blocks = pages.div_ceil(PAGES_PER_BLOCK as u64) as u32;
                for b in first_block as usize..(first_block + blocks) as usize {
                    let owner = self.heads[b].owner;
                    self.reset_block(
                        b,
                        Head {
                            owner,
                            ..Head::default()
                        },
                    );
                }
            }
            PageAction::Serve { block, rule } => self.heads[block as usize].rule = rule,
            PageAction::MigrateIn { block, pages } => {
                let bits = &mut self.bits[block as usize];
                debug_assert!(
                    (pages & bits.get(Bitmap::Resident)).is_empty(),
                    "migrated twice"
                );
                // Only the words that migrate: the block's other cache lines stay unread.
                for (group, word) in bits.0.iter_mut().zip(pages.words()) {
                    if word == 0 {
                        continue;
                    }
                    group[Bitmap::Resident as usize] |= word;
                    // What did not fault came with the prefetcher's region.
                    group[Bitmap::Prefetched as usize] |= word & !group[Bitmap::InFlight as usize];
                }
                work.pages_in += pages.count() as u64;
                work.blocks_in += 1;
                work.migrated = true;
            }
            PageAction::Evict {
                block,
                pages,
                drop_clean,
            } => {
                let bits = &mut self.bits[block as usize];
                let n = pages.count() as u64;
                let (mut written, mut unused) = (0, 0);
                for (group, word) in bits.0.iter_mut().zip(pages.words()) {
                    if word == 0 {
                        continue;
                    }
                    written += (group[Bitmap::Dirty as usize] & word).count_ones();
                    unused += (group[Bitmap::Prefetched as usize] & word).count_ones();
                    for bitmap in [Bitmap::Resident, Bitmap::Dirty, Bitmap::Prefetched] {
                        group[bitmap as usize] &= !word;
                    }
                }
                let written = if drop_clean { u64::from(written) } else { n };
                let head = &mut self.heads[block as usize];
                head.counter = 0;
                let counts = &mut self.counts[head.owner as usize];
                let unused = u64::from(unused);
                counts.prefetched_unused += unused;
                counts.pages_dropped += n - written;
                work.pages_out += n;
                work.pages_written_back += written;
                work.migrated = true;
            }
            PageAction::Pin {
                block,
                pages,
                until_ns,
            } => {
                let pins = self.pins[block as usize].get_or_insert_with(|| {
                    Box::new(Pins {
                        pinned: Pages::EMPTY,
                        until_ns: [0; PAGES_PER_BLOCK],
                        earliest_unpin_ns: u64::MAX,
                    })
                });
                for i in pages.iter() {
                    pins.until_ns[i] = until_ns;
                }
                pins.pinned |= pages;
                pins.earliest_unpin_ns = pins.earliest_unpin_ns.min(until_ns);
                self.heads[block as usize].has_pins = !pins.pinned.is_empty();
            }
            PageAction::Throttle { nap_ns } => work.nap_ns = nap_ns,
            PageAction::Replay => {
                // The batch's pages arrived or stay away; written ones that did not
                // arrive were written where they are.
                // Only words with waiting pages can hold written pages away from VRAM.
                for b in self.waiting.drain(..) {
                    let mut words = std::mem::take(&mut self.heads[b as usize].waiting_words);
                    while words != 0 {
                        let group = &mut self.bits[b as usize].0[words.trailing_zeros() as usize];
                        words &= words - 1;
                        group[Bitmap::InFlight as usize] = 0;
                        group[Bitmap::Dirty as usize] &= group[Bitmap::Resident as usize];
                    }
                }
                work.replayed = true;
            }
        }
    }

    /// A kernel touches pages `first..first + len` in address order at `now_ns`.
    /// Resident pages are local (and noted for the manager where it wants notes); pages
    /// mapped from host memory are remote; the others fault and join `faults`, the
    /// batch, unless they wait there already. Stops after the touch that brings `faults`
    /// to `batch_pages` (the batch must be serviced before the kernel goes on), so it
    /// may touch fewer than `len` pages. Costs a few word operations per VA block plus
    /// one per fault, never one per resident page.
    ///
    /// # Panics
    /// If a page belongs to no managed buffer, or `faults` is full already.
    pub fn touch_run(
        &mut self,
        first: u64,
        len: u64,
        kind: AccessKind,
        now_ns: u64,
        faults: &mut Vec<Fault>,
        batch_pages: usize,
    ) -> Touched {
        // A full batch is left to the general path's assertion.
        if len == 1
            && faults.len() < batch_pages
            && let Some(touched) = self.touch_page(first, kind, faults)
        {
            return touched;
        }
        self.touch_blocks(first, len, kind, now_ns, faults, batch_pages)
    }

    /// [`Mmu::touch_run`] without its fast path for a single page, block by block: for
    /// a walk that asked [`Mmu::touch_page`] first and was answered `None`.
    ///
    /// # Panics
    /// As `touch_run`.
    pub fn touch_blocks(
        &mut self,
        first: u64,
        len: u64,
        kind: AccessKind,
        now_ns: u64,
        faults: &mut Vec<Fault>,
        batch_pages: usize,
    ) -> Touched {
        assert!(faults.len() < batch_pages, "the fault batch is full");
        let mut done = Touched::default();
        while done.pages < len && faults.len() < batch_pages {
            let (b, i) = split(first + done.pages);
            let end = (i as u64 + len - done.pages).min(PAGES_PER_BLOCK as u64) as usize;
            let room = batch_pages - faults.len();
            let run = self.touch_in_block(b, Pages::range(i, end), kind, now_ns, room, faults);
            done.pages += run.pages;
            done.remote += run.remote;
            done.stalled += run.stalled;
        }
        done
    }

    /// Asks for what a touch of `page` reads first (its block's header and the page's
    /// word of every bitmap, one cache line each) and changes nothing: a walk warms each
    /// touch some touches before it comes, so the cache misses of random touches
    /// overlap instead of following one another ([`gpuswap_core::cache_hint::load_soon`]). A
    /// page of no managed buffer is ignored.
    #[inline]
    pub fn warm(&self, page: u64) {
        let (b, i) = split(page);
        if let (Some(head), Some(bits)) = (self.heads.get(b as usize), self.bits.get(b as usize)) {
            load_soon(head);
            load_soon(&bits.0[i / 64]);
        }
    }

    /// [`Mmu::touch_run`] of the one page `page` of a block with no pin (most touches of
    /// a random stream), where no bitmap need be built: `None` for the other cases,
    /// which `touch_run` serves. `faults` must have room for one more.
    #[inline]
    pub fn touch_page(
        &mut self,
        page: u64,
        kind: AccessKind,
        faults: &mut Vec<Fault>,
    ) -> Option<Touched> {
        let (b, i) = split(page);
        let head = &mut self.heads[b as usize];
        if head.has_pins {
            return None;
        }
        // The page's word of every bitmap: one cache line.
        let group = &mut self.bits[b as usize].0[i / 64];
        let bit = 1u64 << (i % 64);
        let counts = &mut self.counts[head.owner as usize];
        if group[Bitmap::Resident as usize] & bit != 0 {
            group[Bitmap::Prefetched as usize] &= !bit;
            if kind == AccessKind::Write {
                group[Bitmap::Dirty as usize] |= bit;
            }
            counts.touches += 1;
            if self.wants_notes {
                self.notes.push((b, Pages::single(i)));
            }
            return Some(Touched {
                pages: 1,
                remote: 0,
                stalled: 0,
            });
        }
        assert!(
            i < usize::from(head.valid_pages),
            "page {page} belongs to no managed buffer"
        );
        let waiting = group[Bitmap::InFlight as usize] & bit != 0;
        match head.rule {
            ServeRule::Remote if !waiting => {
                counts.touches += 1;
                counts.remote_touches += 1;
                Some(Touched {
                    pages: 1,
                    remote: 1,
                    stalled: 0,
                })
            }
            ServeRule::Fault => {
                counts.touches += 1;
                if !waiting {
                    if head.waiting_words == 0 {
                        self.waiting.push(b);
                    }
                    head.waiting_words |= 1 << (i / 64);
                    group[Bitmap::InFlight as usize] |= bit;
                    faults.push(Fault { page, kind });
                }
                if kind == AccessKind::Write {
                    group[Bitmap::Dirty as usize] |= bit;
                }
                Some(Touched {
                    pages: 1,
                    remote: 0,
                    stalled: 1,
                })
            }
            _ => None,
        }
    }

    /// [`Mmu::touch_run`] within one block: touches `range` (up to the page that brings
    /// the new faults to `room`).
    fn touch_in_block(
        &mut self,
        b: u32,
        mut range: Pages,
        kind: AccessKind,
        now_ns: u64,
        room: usize,
        faults: &mut Vec<Fault>,
    ) -> Touched {
        let bu = b as usize;
        assert!(
            range.without(self.heads[bu].valid()).is_empty(),
            "pages of block {b} touched beyond its managed buffer"
        );
        self.unpin_expired(bu, now_ns);
        let pinned = self.pinned(bu);
        let (head, bits) = (&mut self.heads[bu], &mut self.bits[bu]);
        let (mut remote, mut faulted) = classify(head, bits, pinned, range, kind);
        if faulted.count() > room {
            let end = faulted.nth(room - 1).expect("more faults than room") + 1;
            range = range & Pages::range(0, end);
            (remote, faulted) = classify(head, bits, pinned, range, kind);
        }
        let resident = range & bits.get(Bitmap::Resident);
        bits.set(
            Bitmap::Prefetched,
            bits.get(Bitmap::Prefetched).without(resident),
        );
        let faulted_words = faulted
            .words()
            .iter()
            .enumerate()
            .fold(0u8, |words, (w, word)| words | u8::from(*word != 0) << w);
        if faulted_words != 0 && head.waiting_words == 0 {
            self.waiting.push(b);
        }
        head.waiting_words |= faulted_words;
        let in_flight = bits.get(Bitmap::InFlight) | faulted;
        bits.set(Bitmap::InFlight, in_flight);
        // A written page is dirty in VRAM (one waiting in the batch, once it arrives).
        if kind == AccessKind::Write {
            let dirty = bits.get(Bitmap::Dirty) | range & (bits.get(Bitmap::Resident) | in_flight);
            bits.set(Bitmap::Dirty, dirty);
        }
        if let ServeRule::Counter(threshold) = head.rule {
            let away = remote.without(pinned) | faulted;
            head.counter = head
                .counter
                .saturating_add(away.count() as u32)
                .min(threshold);
        }
        let counts = &mut self.counts[head.owner as usize];
        counts.touches += range.count() as u64;
        counts.remote_touches += remote.count() as u64;
        if self.wants_notes && !resident.is_empty() {
            self.notes.push((b, resident));
        }
        let base = u64::from(b) * PAGES_PER_BLOCK as u64;
        faults.extend(faulted.iter().map(|i| Fault {
            page: base + i as u64,
            kind,
        }));
        Touched {
            pages: range.count() as u64,
            remote: remote.count() as u64,
            stalled: (range & in_flight).count() as u64,
        }
    }

    /// Block `b`'s pinned pages.
    fn pinned(&self, b: usize) -> Pages {
        // The flag first: a block with nothing pinned never reads its pins.
        match &self.pins[b] {
            Some(pins) if self.heads[b].has_pins => pins.pinned,
            _ => Pages::EMPTY,
        }
    }

    /// Ends block `b`'s pins due by `now_ns`.
    fn unpin_expired(&mut self, b: usize, now_ns: u64) {
        let head = &mut self.heads[b];
        if !head.has_pins {
            return;
        }
        let pins = self.pins[b]
            .as_mut()
            .expect("a block with pins has their state");
        if now_ns < pins.earliest_unpin_ns {
            return;
        }
        let mut earliest = u64::MAX;
        let pinned = pins.pinned;
        for i in pinned.iter() {
            if pins.until_ns[i] <= now_ns {
                pins.pinned.remove(i);
            } else {
                earliest = earliest.min(pins.until_ns[i]);
            }
        }
        pins.earliest_unpin_ns = earliest;
        head.has_pins = !pins.pinned.is_empty();
    }

    /// Block `b` starts over as `head` says: nothing resident, waiting, written,
    /// prefetched or pinned.
    fn reset_block(&mut self, b: usize, head: Head) {
        self.heads[b] = head;
        self.bits[b] = Bits::default();
        self.pins[b] = None;
    }

    /// Whether enough notes wait that they should go to the manager now.
    pub fn notes_full(&self) -> bool {
        self.notes.len() >= NOTES_PER_CALL
    }

    /// The access notes not sent yet, in touch order; empties them.
    pub fn take_notes(&mut self) -> Vec<(u32, Pages)> {
        std::mem::take(&mut self.notes)
    }

    /// The auditor: only pages that exist are resident, no page is both resident and
    /// waiting in the batch or pinned in host memory, and, when no migration is in
    /// flight at all, the manager's planned residency equals the MMU's in every block.
    pub fn audit(&self, paging: Option<&Paging>) -> Result<(), String> {
        for (b, (head, bits)) in self.heads.iter().zip(&self.bits).enumerate() {
            let resident = bits.get(Bitmap::Resident);
            if !resident.without(head.valid()).is_empty() {
                return Err(format!(
                    "MMU: block {b} has resident pages it does not have"
                ));
            }
            if !(resident & (bits.get(Bitmap::InFlight) | self.pinned(b))).is_empty() {
                return Err(format!(
                    "MMU: block {b} has resident pages waiting in the batch or pinned in host memory"
                ));
            }
        }
        let Some(paging) = paging else {
            return if self.heads.is_empty() {
                Ok(())
            } else {
                Err("MMU: managed pages under a mode that does not page".to_owned())
            };
        };
        if paging.migrating() {
            return Ok(());
        }
        if paging.blocks() as usize != self.heads.len() {
            return Err(format!(
                "MMU has {} VA blocks, the manager numbered {}",
                self.heads.len(),
                paging.blocks()
            ));
        }
        for (b, bits) in self.bits.iter().enumerate() {
            let planned = paging.planned_resident(b as u32);
            let resident = bits.get(Bitmap::Resident);
            if planned != resident {
                return Err(format!(
                    "block {b}: the manager planned {} pages resident, the MMU has {} ({} differ)",
                    planned.count(),
                    resident.count(),
                    (planned.without(resident) | resident.without(planned)).count()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
