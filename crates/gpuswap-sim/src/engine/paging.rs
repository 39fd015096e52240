//! Unified memory on the simulated device: a kernel's accesses become streams of page
//! touches the MMU serves, far faults are gathered in batches the manager services
//! (its page actions, carried out by the MMU, say what moves), and the kernel stalls
//! for each batch's service.
//!
//! The kernel advances in wavefronts: thread blocks are issued in order and a warp stalls
//! at its first far fault, so the faults that reach the driver together are those of the
//! threads resident at once, over every buffer the kernel touches. A wavefront moves one
//! 4-byte element per resident thread (`sms x resident_threads_per_sm x 4` bytes), and
//! every access of the kernel advances by its share of it; a wavefront's faults are
//! serviced before the next one starts (in batches of at most `fault_batch_pages`),
//! which is what gives the prefetcher something to do: the pages it brings are touched
//! by later wavefronts without faulting. First order: a kernel (or each of its segments,
//! where it runs in segments) walks and services its faults first, then takes its
//! all-in-VRAM time plus every batch's stall and its remote accesses' time (plus a
//! preemption check under a scheduling policy); computation does not overlap fault
//! service. A batch's stall is the fixed
//! service cost plus the transfers it caused (evictions to the host, then migrations to
//! the device), each at the link's rate for its transfer size (one transfer per VA
//! block).

use gpuswap_core::protocol::{AccessKind, Fault};
use gpuswap_core::uvm::Paging;
use gpuswap_core::uvm::pages::PAGE_BYTES;

use super::*;
use crate::mmu::Touched;
use crate::program::{Access, AccessOrder, Distribution};
use crate::timing::{ISOLATED_WRITE_BYTES, READ_TRANSACTION_BYTES, Traffic};

/// Bytes of one eviction transfer: the driver evicts a VA block at a time.
const EVICTION_TRANSFER_BYTES: u64 = 2 << 20;

/// What a kernel's page touches cost beyond its all-in-VRAM time.
pub(super) struct FaultIn {
    /// The batches' service time: fixed latency and throttling naps.
    pub service_ns: u64,
    /// The batches' evictions written back and migrations, as time on the link alone
    /// (each at the rate of its transfer size): toward the host, toward the device.
    pub transfer_ns: (f64, f64),
    /// The accesses served remotely from host memory (delayed or zero-copy migration,
    /// pinned pages), in the timing model's terms.
    pub remote: Traffic,
    /// The share of the walked bytes whose touches waited for a fault batch: the work
    /// of the warps that stalled ([`crate::timing::paged_fixed_ns`]).
    pub stalled_share: f64,
}

/// A walk's fault batch being gathered, and what its serviced batches cost so far.
struct Batch {
    /// The far faults gathered, serviced once there are `pages` of them.
    faults: Vec<Fault>,
    pages: usize,
    /// The serviced batches' stalls since the walk resumed: the thrashing detector's
    /// clock runs on by them.
    stall_ns: u64,
    cost: FaultIn,
}

impl Engine {
    /// The start of tenant `t`'s walk through `kernel`'s page touches (`seed` draws its
    /// random touches).
    pub(super) fn start_walk(&self, t: usize, kernel: &Rc<Kernel>, seed: u64) -> Walk {
        let cursors: Vec<Cursor> = kernel
            .accesses
            .iter()
            .enumerate()
            .filter_map(|(i, access)| {
                let buffer = self.tenants[t].slots[access.slot]?;
                let (first, pages) = self.mmu.managed_pages(buffer)?;
                let stream = TouchStream::new(access, pages, seed);
                Some(Cursor {
                    access: i,
                    kind: if access.write_bytes > 0 {
                        AccessKind::Write
                    } else {
                        AccessKind::Read
                    },
                    first,
                    count: stream.count,
                    runs: stream.runs(),
                    carry: None,
                    taken: 0,
                    remote: 0,
                    remote_charged: 0,
                    stalled: 0,
                    taken_charged: 0,
                })
            })
            .collect();
        let bytes: u64 = cursors
            .iter()
            .map(|c| {
                let access = &kernel.accesses[c.access];
                access.read_bytes + access.write_bytes
            })
            .sum();
        Walk {
            kernel: Rc::clone(kernel),
            cursors,
            steps: bytes.div_ceil(wavefront_bytes(&self.preset)).max(1),
            done: 0,
        }
    }

    /// Touches the pages of tenant `t`'s walk in order up to the end of wavefront
    /// `to_step`, servicing far faults batch by batch; returns what it costs besides
    /// the kernel's all-in-VRAM time.
    pub(super) fn fault_in(&mut self, t: usize, walk: &mut Walk, to_step: u64) -> FaultIn {
        if self.recorder.tenant(t).page_stream.is_some() {
            let capacity = self.manager.paging().map_or(1, Paging::capacity_pages);
            let record = self.recorder.tenant(t);
            record.optimum_capacity_pages = record.optimum_capacity_pages.max(capacity);
        }
        // Rules the manager changed since the last walk hold from its first touch.
        self.apply_page_actions();
        // Far faults the driver gathers in a batch before it services them.
        let batch_pages = self.preset.fault_batch_pages.max(1) as usize;
        let mut batch = Batch {
            faults: Vec::with_capacity(batch_pages),
            pages: batch_pages,
            stall_ns: 0,
            cost: FaultIn {
                service_ns: 0,
                transfer_ns: (0.0, 0.0),
                remote: Traffic::default(),
                stalled_share: 0.0,
            },
        };
        let steps = walk.steps;
        let to_step = to_step.min(steps);
        for step in walk.done + 1..=to_step {
            if self.stopped.is_some() {
                break;
            }
            let mut step_touches = 0u64;
            for c in &mut walk.cursors {
                // The touches this access has made by the end of the wavefront.
                let target = (u128::from(c.count) * u128::from(step)).div_ceil(u128::from(steps));
                let mut left = target as u64 - c.taken;
                // A page stream records every run, which the general loop does.
                if c.runs.random_order() && self.recorder.tenant(t).page_stream.is_none() {
                    step_touches += self.touch_pages(t, c, left, &mut batch);
                    continue;
                }
                while left > 0 {
                    let mmu = &self.mmu;
                    let warm = |page| mmu.warm(c.first + page);
                    let Some((start, len)) = c.carry.take().or_else(|| c.runs.next_warmed(warm))
                    else {
                        break;
                    };
                    let n = len.min(left);
                    if n < len {
                        c.carry = Some((start + n, len - n));
                    }
                    left -= n;
                    c.taken += n;
                    step_touches += n;
                    let (mut at, end) = (c.first + start, c.first + start + n);
                    if let Some(stream) = &mut self.recorder.tenant(t).page_stream {
                        stream.extend(at..end);
                    }
                    while at < end {
                        let now_ns = self.walk_now_ns(&batch);
                        let run = self.mmu.touch_run(
                            at,
                            end - at,
                            c.kind,
                            now_ns,
                            &mut batch.faults,
                            batch_pages,
                        );
                        at += run.pages;
                        self.after_touch(t, c, run, now_ns, &mut batch);
                    }
                }
            }
            // The wavefront's faults are serviced before it moves on.
            if !batch.faults.is_empty() {
                let now_ns = self.walk_now_ns(&batch);
                self.service_batch(t, &mut batch, now_ns);
            }
            // The work inside this one event is bounded too: a walk of terabytes (a
            // recorded interval of days) stops at the run's limits, not at its end.
            let page_touches = self.recorder.count_page_touches(step_touches);
            let now_ns = self.walk_now_ns(&batch);
            if page_touches > self.limits.max_page_touches {
                self.stopped = Some((Limit::PageTouches, now_ns));
            } else if now_ns > self.limits.max_sim_ns {
                self.stopped = Some((Limit::SimTime, now_ns));
            }
        }
        self.send_notes();
        walk.done = walk.done.max(to_step);
        let mut cost = batch.cost;
        // The kernel's threads bound the remote reads it keeps in flight.
        cost.remote.threads = walk.kernel.outer_loop.threads;
        let (mut walked_bytes, mut stalled_bytes) = (0.0, 0.0);
        for c in &mut walk.cursors {
            // The access's bytes spread evenly over its touches.
            let access = &walk.kernel.accesses[c.access];
            let bytes_per_touch =
                (access.read_bytes + access.write_bytes) as f64 / c.count.max(1) as f64;
            walked_bytes += (c.taken - c.taken_charged) as f64 * bytes_per_touch;
            stalled_bytes += c.stalled as f64 * bytes_per_touch;
            c.taken_charged = c.taken;
            c.stalled = 0;
            let remote = c.remote - c.remote_charged;
            if remote > 0 {
                let share = remote as f64 / c.count.max(1) as f64;
                cost.remote.add_remote_share(access, share);
                c.remote_charged = c.remote;
            }
        }
        if walked_bytes > 0.0 {
            cost.stalled_share = (stalled_bytes / walked_bytes).min(1.0);
        }
        cost
    }

    /// The time a walk has reached: its start plus the stalls of the batches it had
    /// serviced.
    #[inline]
    fn walk_now_ns(&self, batch: &Batch) -> u64 {
        self.now_ns.saturating_add(batch.stall_ns)
    }

    /// [`Engine::fault_in`]'s walk of up to `left` touches of cursor `c` when it draws a
    /// random order (and its tenant records no page stream): the general walk's per-run
    /// bookkeeping (carry, run splitting, the page stream) costs more than such a touch
    /// itself, so each page goes to the MMU's one-page touch inline, in the same order
    /// against the same state, servicing the batch whenever it fills. Returns the touches
    /// taken.
    #[inline(never)]
    fn touch_pages(&mut self, t: usize, c: &mut Cursor, left: u64, batch: &mut Batch) -> u64 {
        let batch_pages = batch.pages;
        let (first, kind) = (c.first, c.kind);
        let mut taken = 0;
        while taken < left {
            let mmu = &self.mmu;
            let Some((page, _)) = c.runs.next_warmed(|page| mmu.warm(first + page)) else {
                break;
            };
            let page = first + page;
            let now_ns = self.walk_now_ns(batch);
            // The batch has room (it is serviced as it fills), so the page is touched.
            let run = match self.mmu.touch_page(page, kind, &mut batch.faults) {
                Some(run) => run,
                None => {
                    self.mmu
                        .touch_blocks(page, 1, kind, now_ns, &mut batch.faults, batch_pages)
                }
            };
            taken += 1;
            self.after_touch(t, c, run, now_ns, batch);
        }
        c.taken += taken;
        taken
    }

    /// What follows each touch of [`Engine::fault_in`]'s walk, made by cursor `c` at
    /// `now_ns` and done as `run` says: the cursor counts its remote and stalled touches,
    /// the notes go to the manager once enough wait, and a full batch is serviced.
    #[inline]
    fn after_touch(
        &mut self,
        t: usize,
        c: &mut Cursor,
        run: Touched,
        now_ns: u64,
        batch: &mut Batch,
    ) {
        c.remote += run.remote;
        c.stalled += run.stalled;
        if self.mmu.notes_full() {
            self.send_notes();
        }
        if batch.faults.len() == batch.pages {
            self.service_batch(t, batch, now_ns);
        }
    }

    /// Hands the access notes gathered so far to the manager (its eviction orders see
    /// the touches before anything that follows them).
    fn send_notes(&mut self) {
        let notes = self.mmu.take_notes();
        if !notes.is_empty() {
            self.manager
                .handle_access_notes(&notes)
                .expect("notes are taken only where the policy pages");
        }
    }

    /// Carries out the manager's page actions on the MMU and reports the migrations
    /// done; what they cost. A batch's caller charges it as the batch's stall; the
    /// evictions a runtime buffer's reservation causes outside a batch cost nothing.
    pub(super) fn apply_page_actions(&mut self) -> PageWork {
        let mut work = PageWork::default();
        // Each as it comes: gathering a batch's actions to ask for their lines ahead cost
        // more than the cache misses it hid (issue 28, item 2).
        while let Some(action) = self.manager.poll_page_action() {
            self.mmu.apply(action, &mut work);
        }
        if work.migrated {
            self.manager
                .handle_migrations_done()
                .expect("only a paging policy migrates");
        }
        work
    }

    /// Services `batch`'s far faults of tenant `t` at `now_ns` and empties it, adding
    /// its costs to the batch's and its stall alone on the link to the walk's stalls.
    fn service_batch(&mut self, t: usize, batch: &mut Batch, now_ns: u64) {
        let faults = &batch.faults;
        let sizes = &mut self.recorder.tenant(t).faults_per_batch;
        if sizes.len() <= faults.len() {
            sizes.resize(faults.len() + 1, 0);
        }
        sizes[faults.len()] += 1;
        self.send_notes();
        self.manager
            .handle_fault_batch(faults, now_ns)
            .expect("a walk faults only where the policy pages");
        let PageWork {
            pages_in,
            pages_written_back,
            blocks_in,
            nap_ns,
            replayed,
            ..
        } = self.apply_page_actions();
        assert!(replayed, "the manager serviced the batch without a replay");
        let link = &self.preset.link;
        let rate = |peak: f64, transfer_bytes: u64| match link.size_curve_k_per_kib {
            Some(k) => crate::link::size_curve_bytes_per_s(peak, k, transfer_bytes),
            None => peak,
        };
        // Dropped clean pages cost nothing on the link.
        let out_bytes = pages_written_back * PAGE_BYTES;
        let out_ns = if out_bytes > 0 {
            out_bytes as f64 / rate(link.d2h_bytes_per_s, out_bytes.min(EVICTION_TRANSFER_BYTES))
                * 1e9
        } else {
            0.0
        };
        let in_bytes = pages_in * PAGE_BYTES;
        let in_ns = if in_bytes > 0 {
            in_bytes as f64 / rate(link.h2d_bytes_per_s, in_bytes / blocks_in.max(1)) * 1e9
        } else {
            0.0
        };
        let service_ns = self.preset.fault_service_ns + nap_ns;
        let cost = &mut batch.cost;
        cost.service_ns += service_ns;
        cost.transfer_ns.0 += out_ns;
        cost.transfer_ns.1 += in_ns;
        let stall_ns = (service_ns as f64 + out_ns + in_ns).round() as u64;
        batch.stall_ns = batch.stall_ns.saturating_add(stall_ns);
        batch.faults.clear();
    }
}

/// Bytes a kernel moves per wavefront: one 4-byte element (a float or an int, what the
/// workloads' threads mostly load) per thread resident on the device at once.
fn wavefront_bytes(preset: &Preset) -> u64 {
    const ELEMENT_BYTES: u64 = 4;
    (u64::from(preset.sms) * u64::from(preset.resident_threads_per_sm) * ELEMENT_BYTES).max(1)
}

/// A kernel's progress through its page touches: the wavefronts walked of all, and
/// each access's cursor. A kernel that runs in segments keeps it between them.
pub(super) struct Walk {
    kernel: Rc<Kernel>,
    cursors: Vec<Cursor>,
    /// Wavefronts in all, and walked so far.
    pub(super) steps: u64,
    pub(super) done: u64,
}

/// One access's progress through its touch stream.
struct Cursor {
    /// The access's index in the kernel.
    access: usize,
    /// Whether it writes what it touches (writes are never served remotely under
    /// delayed migration).
    kind: AccessKind,
    /// The buffer's first page in the paging machine's numbering.
    first: u64,
    /// Touches in all, taken so far, served remotely so far, and of those already
    /// charged to an earlier segment.
    count: u64,
    taken: u64,
    remote: u64,
    remote_charged: u64,
    /// Touches taken by the end of the last walk, and of those since then the ones that
    /// waited for a fault batch.
    taken_charged: u64,
    stalled: u64,
    runs: Runs,
    /// The rest of a run a wavefront ended in.
    carry: Option<(u64, u64)>,
}

/// The pages (0-based in the buffer) an access touches, in its order, as runs of
/// consecutive pages: one touch per page of bytes it moves in address order, over the
/// pages its distribution reaches. Moving more than those pages hold makes passes over
/// them (the last one partial); less, one sparse pass over evenly spaced pages (a kernel
/// touching 1 MiB of a 56 MiB stack touches 256 of its pages, not all). Linear passes go
/// in address order (one run per reached range), strided ones by their stride, random
/// ones are draws of a seeded SplitMix64 sequence, one per isolated transaction (a
/// 128-byte line read or a 32-byte sector written, the timing model's transactions):
/// random accesses reach a new page each, where accesses in address order share it.
struct TouchStream {
    /// The reached pages as ranges in address order, with the index of each range's
    /// first page among all reached pages.
    ranges: Vec<(u64, u64, u64)>,
    /// Pages reached.
    reached: u64,
    /// Touches.
    count: u64,
    order: AccessOrder,
    state: u64,
}

impl TouchStream {
    fn new(access: &Access, pages: u64, seed: u64) -> Self {
        let mut ranges = Vec::new();
        let mut reached = 0;
        for (start, end) in reached_ranges(&access.distribution, pages) {
            ranges.push((start, end, reached));
            reached += end - start;
        }
        let count = match access.order {
            AccessOrder::Random => {
                access.read_bytes.div_ceil(READ_TRANSACTION_BYTES)
                    + access.write_bytes.div_ceil(ISOLATED_WRITE_BYTES)
            }
            AccessOrder::Linear | AccessOrder::Strided { .. } => {
                (access.read_bytes + access.write_bytes).div_ceil(PAGE_BYTES)
            }
        }
        .clamp(1, u64::MAX / 2);
        Self {
            ranges,
            reached,
            count,
            order: access.order,
            state: seed ^ (access.slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        }
    }

    /// The touches as runs `(first page, pages)`.
    fn runs(self) -> Runs {
        let Self {
            ranges,
            reached: n,
            count,
            order,
            state,
        } = self;
        let passes = count.div_ceil(n.max(1));
        // In a sparse pass, touch k of the n pages, evenly spaced.
        let sparse = count < n;
        let spread = move |k: u64| if sparse { k * n / count } else { k };
        let per_pass = if sparse { count } else { n };
        // Runs of indices into the reached pages, `count` touches in all.
        let indices = match order {
            AccessOrder::Linear if !sparse => Indices::Other(Box::new((0..passes).map(move |p| {
                let done = p * n;
                (0, n.min(count - done))
            }))),
            AccessOrder::Linear => {
                Indices::Other(Box::new((0..count).map(move |k| (spread(k), 1))))
            }
            AccessOrder::Strided { stride_bytes } => {
                // A strided pass visits every stride-th touch, then the next offset.
                let stride = (stride_bytes / PAGE_BYTES).max(1);
                Indices::Other(Box::new(
                    (0..passes)
                        .flat_map(move |_| {
                            (0..stride.min(per_pass.max(1)))
                                .flat_map(move |o| (o..per_pass).step_by(stride as usize))
                                .map(move |k| (spread(k), 1))
                        })
                        .take(count as usize),
                ))
            }
            AccessOrder::Random => {
                let n = n.max(1);
                Indices::Random {
                    left: count,
                    state,
                    n,
                    // Reached pages in a power of two (a buffer of whole VA blocks,
                    // reached whole) take the draw's low bits with a mask: the same page
                    // as the division, which costs tens of cycles a touch.
                    mask: n.is_power_of_two().then_some(n - 1),
                }
            }
        };
        Runs {
            ranges,
            indices,
            left: (0, 0, 0),
            ahead: [(0, 0); LOOKAHEAD_RUNS],
            ahead_at: 0,
            ahead_len: 0,
        }
    }
}

/// Runs drawn ahead of the one handed out, each warmed as it is drawn so that the MMU
/// has its touch's state on the way by the time it comes ([`crate::mmu::Mmu::warm`]):
/// random touches miss the cache, and misses asked for this far ahead overlap with the
/// touches in between where a miss asked for at its touch would wait alone.
const LOOKAHEAD_RUNS: usize = 16;

/// Runs of indices into the reached pages. A random order draws one index a touch, so
/// its draw is inline rather than behind a boxed iterator's call; the other orders
/// hand out whole runs or stride through, and stay boxed.
enum Indices {
    /// `left` draws of one page each, from the SplitMix64 `state`, among `n` pages
    /// (masked with `mask` where `n` is a power of two).
    Random {
        left: u64,
        state: u64,
        n: u64,
        mask: Option<u64>,
    },
    Other(Box<dyn Iterator<Item = (u64, u64)>>),
}

impl Indices {
    /// The next index run, if any is left.
    #[inline]
    fn next(&mut self) -> Option<(u64, u64)> {
        match self {
            Self::Random {
                left,
                state,
                n,
                mask,
            } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                let draw = gpuswap_core::mix::next(state);
                Some((mask.map_or_else(|| draw % *n, |mask| draw & mask), 1))
            }
            Self::Other(runs) => runs.next(),
        }
    }
}

/// Index runs into the reached pages, turned into page runs split where the reached
/// ranges have gaps, drawn [`LOOKAHEAD_RUNS`] ahead.
struct Runs {
    ranges: Vec<(u64, u64, u64)>,
    indices: Indices,
    /// The index run being split: (next index, indices left, its range).
    left: (u64, u64, usize),
    /// The page runs drawn ahead, a ring: the next to hand out is at `ahead_at`, and
    /// `ahead_len` follow it (fewer at the end).
    ahead: [(u64, u64); LOOKAHEAD_RUNS],
    ahead_at: usize,
    ahead_len: usize,
}

impl Runs {
    /// Whether the runs are a random order's draws, one page each (sparse linear and
    /// strided passes have one-page runs too, but not drawn inline).
    fn random_order(&self) -> bool {
        matches!(self.indices, Indices::Random { .. })
    }

    /// The position in `ranges` of the reached range holding index `k` among the
    /// reached pages; `None` where nothing is reached.
    #[inline]
    fn range_of(&self, k: u64) -> Option<usize> {
        self.ranges
            .partition_point(|(_, _, index)| *index <= k)
            .checked_sub(1)
    }

    /// The next page run; draws the runs ahead of it that are missing first (one, but
    /// for the first call), handing each one's first page to `warm` as it is drawn.
    #[inline]
    fn next_warmed(&mut self, warm: impl Fn(u64)) -> Option<(u64, u64)> {
        while self.ahead_len < LOOKAHEAD_RUNS {
            let Some(run) = self.draw() else { break };
            self.ahead[(self.ahead_at + self.ahead_len) % LOOKAHEAD_RUNS] = run;
            self.ahead_len += 1;
            warm(run.0);
        }
        if self.ahead_len == 0 {
            return None;
        }
        let run = self.ahead[self.ahead_at];
        self.ahead_at = (self.ahead_at + 1) % LOOKAHEAD_RUNS;
        self.ahead_len -= 1;
        Some(run)
    }

    /// The next page run in order, before any lookahead. Inline for a random order,
    /// whose every touch draws one (called out of line, a run comes back through memory
    /// and costs more than the draw).
    #[inline(always)]
    fn draw(&mut self) -> Option<(u64, u64)> {
        if self.random_order() {
            // A one-page index run is one page of its range: nothing left to split.
            let (k, len) = self.indices.next()?;
            debug_assert_eq!(len, 1, "a random order draws one page at a time");
            let (start, _, index) = self.ranges[self.range_of(k)?];
            return Some((start + (k - index), 1));
        }
        self.split()
    }

    /// [`Runs::draw`] for index runs of any length: the next piece of the index run
    /// being split, up to the end of its reached range.
    #[inline(never)]
    fn split(&mut self) -> Option<(u64, u64)> {
        if self.left.1 == 0 {
            let (k, len) = self.indices.next()?;
            self.left = (k, len, self.range_of(k)?);
        }
        let (k, left, i) = self.left;
        let (start, end, index) = *self.ranges.get(i)?;
        let first = start + (k - index);
        let n = left.min(end - first);
        self.left = (k + n, left - n, i + 1);
        Some((first, n))
    }
}

/// The runs one by one, unwarmed: what the tests compare the walk against.
#[cfg(test)]
impl Iterator for Runs {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        self.next_warmed(|_| {})
    }
}

/// The page ranges a distribution reaches, in address order, merged where they touch.
fn reached_ranges(distribution: &Distribution, pages: u64) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = match distribution {
        Distribution::Uniform => vec![(0, pages)],
        Distribution::Ranges(ranges) => ranges
            .iter()
            .filter(|r| r.weight > 0.0 && r.bytes > 0)
            .map(|r| {
                let start = r.offset_bytes / PAGE_BYTES;
                let end = (r.offset_bytes + r.bytes).div_ceil(PAGE_BYTES).min(pages);
                (start, end)
            })
            .collect(),
        Distribution::Profile {
            page_bytes,
            weights,
        } => weights
            .iter()
            .enumerate()
            .filter(|(_, w)| **w > 0.0)
            .map(|(i, _)| {
                let start = i as u64 * page_bytes / PAGE_BYTES;
                let end = ((i as u64 + 1) * page_bytes)
                    .div_ceil(PAGE_BYTES)
                    .min(pages);
                (start, end)
            })
            .collect(),
    };
    ranges.retain(|(start, end)| start < end);
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(order: AccessOrder, bytes: u64) -> Access {
        Access {
            order,
            ..Access::uniform(0, bytes, 0)
        }
    }

    /// The stream's touches, page by page.
    fn touches(access: &Access, pages: u64, seed: u64) -> impl Iterator<Item = u64> {
        TouchStream::new(access, pages, seed)
            .runs()
            .flat_map(|(first, len)| first..first + len)
    }

    #[test]
    fn linear_and_strided_streams_visit_every_reached_page_per_pass() {
        let linear: Vec<u64> =
            touches(&access(AccessOrder::Linear, 8 * PAGE_BYTES), 4, 1).collect();
        assert_eq!(linear, [0, 1, 2, 3, 0, 1, 2, 3]);
        let strided: Vec<u64> = touches(
            &access(
                AccessOrder::Strided {
                    stride_bytes: 2 * PAGE_BYTES,
                },
                4 * PAGE_BYTES,
            ),
            4,
            1,
        )
        .collect();
        assert_eq!(strided, [0, 2, 1, 3]);
        // Random: one touch per 128-byte line read.
        let random: Vec<u64> =
            touches(&access(AccessOrder::Random, 64 * PAGE_BYTES), 64, 7).collect();
        assert_eq!(random.len(), 64 * 32);
        assert!(random.iter().all(|p| *p < 64));
        assert_ne!(random[..64], (0..64).collect::<Vec<_>>());
        // 1.25 passes over 4 pages: 5 touches, not two whole passes.
        let partial: Vec<u64> =
            touches(&access(AccessOrder::Linear, 5 * PAGE_BYTES), 4, 1).collect();
        assert_eq!(partial, [0, 1, 2, 3, 0]);
        // Moving less than the buffer: that many pages, evenly spread.
        let sparse: Vec<u64> =
            touches(&access(AccessOrder::Linear, 4 * PAGE_BYTES), 16, 1).collect();
        assert_eq!(sparse, [0, 4, 8, 12]);
    }
}
