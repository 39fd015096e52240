//! Turns (issue 38, after nvshare's lock): when the demanding tenants' memory does not
//! fit in VRAM, one tenant, the holder, has the GPU and its footprint in VRAM (up to
//! VRAM less the others' guarantees); the others are parked (suspended) and keep what
//! fits. At a handover only the overflow moves: out of the old holder (and, if that is
//! not enough, the other parked tenants), into the new one, in one planned job of bulk
//! moves.
//!
//! A tenant *demands* the GPU while the driver says it is busy, and a holder for
//! [`TurnSettings::handover_after_ns`] after it went idle. The holder hands over when its
//! quantum (times its weight) is over and another tenant demands, or when it no longer
//! demands and another does; the next holder is the demanding tenant of the highest
//! `priority_class` that has waited longest. When the demanding tenants fit together
//! (and turns are not [`TurnSettings::always`]), turns end: every parked tenant runs.

use super::settings::{AUTO_QUANTUM_HANDOVERS, MIN_AUTO_QUANTUM_NS, Quantum, TurnSettings};
use crate::accounting::Books;
use crate::buffer::Location;
use crate::ids::TenantId;
use crate::lists::ChunkRef;
use crate::relocation::{After, Move};

/// One batch of a turn's job: a tenant, its moves, and what becomes of it.
pub(crate) type Step = (TenantId, Vec<Move>, After);

/// Who holds the GPU.
#[derive(Clone, Copy, Debug)]
struct Holding {
    tenant: TenantId,
    since_ns: u64,
    /// Since when it has had no work (`None`: busy).
    idle_since_ns: Option<u64>,
}

/// A tenant's demand as the driver reported it.
#[derive(Clone, Copy, Debug, Default)]
struct Demand {
    busy: bool,
    /// When it last became busy: who waited longest goes first.
    since_ns: u64,
}

/// What the GPU's time should look like now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// The holder keeps the GPU (tenants that became busy meanwhile are parked).
    Stay,
    /// The GPU passes to this tenant.
    HandTo(TenantId),
    /// No turns now: everyone runs.
    End,
}

/// The turns machine: demand in, holder and parked tenants out.
#[derive(Debug)]
pub(crate) struct Turns {
    settings: TurnSettings,
    demand: Vec<Demand>,
    holder: Option<Holding>,
    /// The latest time an event carried.
    now_ns: u64,
    /// A handover's job runs since then.
    handover_since_ns: Option<u64>,
    /// How long the last handover's job took.
    last_handover_ns: u64,
    handovers: u64,
}

impl Turns {
    pub(crate) fn new(settings: TurnSettings) -> Self {
        Self {
            settings,
            demand: Vec::new(),
            holder: None,
            now_ns: 0,
            handover_since_ns: None,
            last_handover_ns: 0,
            handovers: 0,
        }
    }

    /// The tenant holding the GPU, if turns are on.
    pub(crate) fn holder(&self) -> Option<TenantId> {
        self.holder.map(|h| h.tenant)
    }

    /// Times the GPU passed from one tenant to another.
    pub(crate) fn handovers(&self) -> u64 {
        self.handovers
    }

    /// Whether the driver last said `tenant` is busy.
    pub(crate) fn is_busy(&self, tenant: TenantId) -> bool {
        self.demand.get(tenant.0 as usize).is_some_and(|d| d.busy)
    }

    /// Whether `tenant` should leave the VRAM others hold alone when it allocates: it is
    /// parked, or it does not demand the GPU while another does. What it allocates
    /// beyond free VRAM then starts in host memory, and comes in at its turn.
    pub(crate) fn yields(&self, tenant: TenantId, parked: bool) -> bool {
        parked || (!self.demands(tenant) && self.demanding().any(|t| t != tenant))
    }

    /// Time passed to `now_ns` (events carry it; the machine never goes back).
    pub(crate) fn tick(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
    }

    /// `tenant` has GPU work (`busy`) or none.
    pub(crate) fn set_busy(&mut self, tenant: TenantId, busy: bool, now_ns: u64) {
        self.tick(now_ns);
        let i = tenant.0 as usize;
        if self.demand.len() <= i {
            self.demand.resize(i + 1, Demand::default());
        }
        let d = &mut self.demand[i];
        if busy && !d.busy {
            d.since_ns = self.now_ns;
        }
        d.busy = busy;
        if let Some(h) = self.holder.as_mut().filter(|h| h.tenant == tenant) {
            h.idle_since_ns = match (busy, h.idle_since_ns) {
                (true, _) => None,
                (false, since) => Some(since.unwrap_or(self.now_ns)),
            };
        }
    }

    /// `tenant` exited.
    pub(crate) fn forget(&mut self, tenant: TenantId) {
        if let Some(d) = self.demand.get_mut(tenant.0 as usize) {
            *d = Demand::default();
        }
        if self.holder.is_some_and(|h| h.tenant == tenant) {
            self.holder = None;
        }
    }

    /// A turn's job ended: its length is the handover time the automatic quantum
    /// follows, and the holder's turn starts now that it runs (a handover longer than
    /// a quantum must not end the turn before it began).
    pub(crate) fn job_done(&mut self) {
        if let Some(since) = self.handover_since_ns.take() {
            self.last_handover_ns = self.now_ns.saturating_sub(since);
            if let Some(h) = self.holder.as_mut() {
                h.since_ns = self.now_ns;
            }
        }
    }

    /// When the holder's turn ends, if another tenant demands the GPU then.
    pub(crate) fn next_timeout(&self, books: &Books) -> Option<u64> {
        let h = self.holder?;
        if !self.demanding().any(|t| t != h.tenant) {
            return None;
        }
        let end = h.since_ns.saturating_add(self.quantum_ns(books, h.tenant));
        let idle = h
            .idle_since_ns
            .map(|s| s.saturating_add(self.settings.handover_after_ns));
        Some(idle.map_or(end, |i| i.min(end)))
    }

    /// The holder's quantum: the setting (or the automatic one) times its weight.
    fn quantum_ns(&self, books: &Books, tenant: TenantId) -> u64 {
        let base = match self.settings.quantum {
            Quantum::Fixed { ns } => ns,
            Quantum::Auto => MIN_AUTO_QUANTUM_NS
                .max(AUTO_QUANTUM_HANDOVERS.saturating_mul(self.last_handover_ns)),
        };
        base.saturating_mul(u64::from(books.contract(tenant).weight.max(1)))
    }

    /// Whether `tenant` demands the GPU now.
    fn demands(&self, tenant: TenantId) -> bool {
        if self.is_busy(tenant) {
            return true;
        }
        self.holder.is_some_and(|h| {
            h.tenant == tenant
                && h.idle_since_ns.is_some_and(|since| {
                    self.now_ns < since.saturating_add(self.settings.handover_after_ns)
                })
        })
    }

    /// The tenants that demand the GPU, by number. The holder is among the numbers:
    /// it became holder busy, so its demand is recorded.
    fn demanding(&self) -> impl Iterator<Item = TenantId> + '_ {
        (0..self.demand.len())
            .map(|i| TenantId(i as u32))
            .filter(|t| self.demands(*t))
    }

    /// Whether the demanding tenants need turns: their memory does not fit in VRAM
    /// (or, with `always`, two of them demand at all).
    fn over(&self, books: &Books, incoming: Option<(TenantId, u64)>) -> bool {
        let tenants: Vec<TenantId> = self.demanding().collect();
        if self.settings.always {
            return tenants.len() >= 2;
        }
        let footprint_bytes: u64 = tenants
            .iter()
            .map(|t| {
                let u = books.usage(*t);
                let coming = incoming.filter(|(i, _)| i == t).map_or(0, |(_, b)| b);
                u.vram_bytes + u.host_bytes + coming
            })
            .sum();
        footprint_bytes > books.vram_capacity_bytes
    }

    /// The demanding tenant (other than `except`) that goes next: the highest
    /// `priority_class`, then the longest waiting, then the lowest number.
    fn next_holder(&self, books: &Books, except: Option<TenantId>) -> Option<TenantId> {
        self.demanding()
            .filter(|t| Some(*t) != except && self.is_busy(*t))
            .min_by_key(|t| {
                let since = self.demand[t.0 as usize].since_ns;
                (
                    std::cmp::Reverse(books.contract(*t).priority_class),
                    since,
                    *t,
                )
            })
    }

    fn decide(&self, books: &Books, incoming: Option<(TenantId, u64)>) -> Decision {
        let over = self.over(books, incoming);
        let Some(h) = self.holder else {
            return match self.next_holder(books, None) {
                Some(t) if over => Decision::HandTo(t),
                _ => Decision::End,
            };
        };
        let next = self.next_holder(books, Some(h.tenant));
        if !self.demands(h.tenant) {
            return next.map_or(Decision::Stay, Decision::HandTo);
        }
        let expired = self.now_ns >= h.since_ns.saturating_add(self.quantum_ns(books, h.tenant));
        match next {
            Some(t) if expired && over => Decision::HandTo(t),
            _ if !over => Decision::End,
            _ => Decision::Stay,
        }
    }

    /// The job that brings the GPU where it should be now, if any: parks the busy
    /// tenants that run beside the holder, hands over (moving memory when `moves`:
    /// the mode relocates chunks), or ends turns. `parked` says who is parked now;
    /// `incoming` is an allocation about to be placed, counted in its tenant's
    /// footprint.
    pub(crate) fn plan(
        &mut self,
        books: &mut Books,
        parked: &dyn Fn(TenantId) -> bool,
        moves: bool,
        incoming: Option<(TenantId, u64)>,
    ) -> Vec<Step> {
        let mut steps: Vec<Step> = Vec::new();
        match self.decide(books, incoming) {
            // An allocation may start turns, never end them: it may yet fail.
            Decision::End if incoming.is_some() => {}
            Decision::End => {
                // Everyone who demands fits: the parked tenants run again, with their
                // data back in free VRAM in bulk rather than by the mode's slow return.
                self.holder = None;
                for t in 0..self.demand.len() {
                    let t = TenantId(t as u32);
                    if parked(t) {
                        let ins = if moves {
                            bring_in(books, t)
                        } else {
                            Vec::new()
                        };
                        steps.push((t, ins, After::Unpark));
                    }
                }
            }
            Decision::Stay => {
                let holder = self.holder();
                for t in self.demanding().collect::<Vec<_>>() {
                    if Some(t) != holder && !parked(t) && !steps.iter().any(|s| s.0 == t) {
                        steps.push((t, Vec::new(), After::Park));
                    }
                }
            }
            Decision::HandTo(next) => {
                let old = self.holder().filter(|t| *t != next);
                // The old holder first (its data is the coldest now), then everyone else
                // who demands, parked or to be parked.
                let mut held: Vec<TenantId> = old.into_iter().collect();
                for t in self
                    .demanding()
                    .chain((0..self.demand.len()).map(|i| TenantId(i as u32)))
                {
                    if t != next && !held.contains(&t) && (parked(t) || self.demands(t)) {
                        held.push(t);
                    }
                }
                let (outs, ins) = if moves {
                    overflow(books, next, &held)
                } else {
                    (vec![Vec::new(); held.len()], Vec::new())
                };
                for (t, out) in held.into_iter().zip(outs) {
                    if !parked(t) || !out.is_empty() {
                        steps.push((t, out, After::Park));
                    }
                }
                // A holder already running with nothing to bring in is left running.
                if parked(next) || !ins.is_empty() {
                    steps.push((next, ins, After::Unpark));
                }
                if old.is_some() {
                    self.handovers += 1;
                }
                self.handover_since_ns = Some(self.now_ns);
                self.holder = Some(Holding {
                    tenant: next,
                    since_ns: self.now_ns,
                    idle_since_ns: (!self.is_busy(next)).then_some(self.now_ns),
                });
            }
        }
        steps
    }
}

/// The overflow's moves for `next` to hold the GPU: its chunks in host memory in (as
/// many as its VRAM cap allows), and to make room the chunks of `held`, in order, out
/// (each keeping its guarantee and within its host limit and the host memory free).
/// Plans each move in the books. Returns the moves out per held tenant and the moves in.
fn overflow(books: &mut Books, next: TenantId, held: &[TenantId]) -> (Vec<Vec<Move>>, Vec<Move>) {
    let mut need_bytes = 0u64;
    let cap_bytes = books.vram_room_under_cap(next);
    for r in chunks_at(books, next, Location::Host) {
        let bytes = books.chunk(r).expect("listed").bytes;
        if need_bytes + bytes > cap_bytes {
            break;
        }
        need_bytes += bytes;
    }
    let outs = held
        .iter()
        .map(|&t| make_room(books, t, need_bytes))
        .collect();
    (outs, bring_in(books, next))
}

/// Moves of `tenant`'s chunks out of VRAM until `need_bytes` are free (or it may give
/// no more: its guarantee, its host limit, the host memory free), planned in the books.
fn make_room(books: &mut Books, tenant: TenantId, need_bytes: u64) -> Vec<Move> {
    let mut out = Vec::new();
    for r in chunks_at(books, tenant, Location::Vram) {
        if books.vram_free_bytes() >= need_bytes {
            break;
        }
        let bytes = books.chunk(r).expect("listed").bytes;
        if !books.may_give(tenant, bytes) {
            break;
        }
        books.plan_move(r, Location::Host);
        out.push(Move {
            chunk: r,
            to: Location::Host,
        });
    }
    out
}

/// Moves of `tenant`'s chunks in host memory into free VRAM, as many as fit and its cap
/// allows, planned in the books.
fn bring_in(books: &mut Books, tenant: TenantId) -> Vec<Move> {
    let mut ins = Vec::new();
    for r in chunks_at(books, tenant, Location::Host) {
        let bytes = books.chunk(r).expect("listed").bytes;
        if bytes > books.vram_free_bytes() || bytes > books.vram_room_under_cap(tenant) {
            break;
        }
        books.plan_move(r, Location::Vram);
        ins.push(Move {
            chunk: r,
            to: Location::Vram,
        });
    }
    books.note_peak(tenant);
    ins
}

/// `tenant`'s chunks accounted at `location`, buffer by buffer.
fn chunks_at(books: &Books, tenant: TenantId, location: Location) -> Vec<ChunkRef> {
    let buffers: Vec<_> = books.buffers_of(tenant).map(|b| b.id).collect();
    buffers
        .into_iter()
        .flat_map(|b| books.chunk_refs(b, location))
        .collect()
}
