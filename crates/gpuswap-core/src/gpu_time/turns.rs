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

use super::auto::{Auto, Choice, Review, Switch};
use super::progress::{Estimates, Progress};
use super::settings::{
    AUTO_QUANTUM_HANDOVERS, GpuTime, Idle, MAX_AUTO_QUANTUM_NS, MIN_AUTO_QUANTUM_NS, Quantum,
    TurnSettings,
};
use crate::accounting::Books;
use crate::buffer::Location;
use crate::ids::{BufferId, TenantId};
use crate::lists::ChunkRef;
use crate::relocation::{After, MAX_BATCH_MOVES, Move};

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
    /// When it last became busy (who waited longest goes first), or idle.
    since_ns: u64,
    /// It gave its memory back idle and is parked until its next work.
    demoted: bool,
}

/// Whether turns are taken: always the same way, or chosen by measurement.
#[derive(Debug)]
enum Mode {
    Fixed(Choice),
    Auto(Auto),
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
    mode: Mode,
    idle: Idle,
    estimates: Estimates,
    /// Touch marks came in since the last rebalance.
    touch_news: bool,
    /// The running relocation job is a turn's (its end changes who runs).
    turn_job: bool,
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
    /// The machine for `gpu_time` and `idle`; `None` where neither needs one (concurrent
    /// time, idle tenants keep their memory).
    pub(crate) fn new(gpu_time: GpuTime, idle: Idle) -> Option<Self> {
        let mode = match gpu_time {
            GpuTime::Concurrent if idle == Idle::Keep => return None,
            GpuTime::Concurrent => Mode::Fixed(Choice::Share),
            GpuTime::Turns(_) => Mode::Fixed(Choice::Turns),
            GpuTime::Auto(a) => Mode::Auto(Auto::new(a.share_first)),
        };
        Some(Self {
            settings: gpu_time.turn_settings().unwrap_or_default(),
            mode,
            idle,
            estimates: Estimates::default(),
            touch_news: false,
            turn_job: false,
            demand: Vec::new(),
            holder: None,
            now_ns: 0,
            handover_since_ns: None,
            last_handover_ns: 0,
            handovers: 0,
        })
    }

    /// Whether progress reports are wanted: the automatic choice measures them.
    pub(crate) fn wants_progress(&self) -> bool {
        matches!(self.mode, Mode::Auto(_))
    }

    /// How turns are taken now: the fixed way, or the automatic choice's.
    pub(crate) fn choice(&self) -> Choice {
        match &self.mode {
            Mode::Fixed(c) => *c,
            Mode::Auto(a) => a.choice(),
        }
    }

    /// Times the automatic choice changed.
    pub(crate) fn switches(&self) -> u64 {
        match &self.mode {
            Mode::Fixed(_) => 0,
            Mode::Auto(a) => a.switches(),
        }
    }

    /// The next change of the automatic choice not yet taken by the driver.
    pub(crate) fn pop_switch(&mut self) -> Option<Switch> {
        match &mut self.mode {
            Mode::Fixed(_) => None,
            Mode::Auto(a) => a.pop_switch(),
        }
    }

    /// `tenant`'s slowdown estimate, once measured.
    pub(crate) fn estimate(&self, tenant: TenantId) -> Option<f64> {
        self.estimates.estimate(tenant)
    }

    /// Whether `tenant` gave its memory back idle and waits for its next work.
    pub(crate) fn is_demoted(&self, tenant: TenantId) -> bool {
        self.demand
            .get(tenant.0 as usize)
            .is_some_and(|d| d.demoted)
    }

    /// The link's remote-read cost was measured: the automatic choice starts from it.
    pub(crate) fn measured_link(&mut self, remote_cost: f64, now_ns: u64) {
        self.tick(now_ns);
        if let Mode::Auto(auto) = &mut self.mode {
            auto.measured_link(remote_cost, self.now_ns);
        }
    }

    /// `tenant`'s progress over a window ending at `now_ns`, and the buffers its
    /// launches named.
    pub(crate) fn progress(
        &mut self,
        books: &Books,
        tenant: TenantId,
        progress: &Progress,
        touched: &[BufferId],
        now_ns: u64,
    ) {
        self.tick(now_ns);
        let least_remote = books.usage(tenant).host_bytes == 0 || self.holder() == Some(tenant);
        self.estimates
            .record(tenant, progress, self.now_ns, least_remote);
        self.estimates.touch(touched, self.now_ns);
        self.touch_news |= !touched.is_empty();
    }

    /// `buffer` was freed.
    pub(crate) fn forget_buffer(&mut self, buffer: BufferId) {
        self.estimates.forget_buffer(buffer);
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
        if busy != d.busy {
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
        self.estimates.forget(tenant);
        if self.holder.is_some_and(|h| h.tenant == tenant) {
            self.holder = None;
        }
    }

    /// A turn's job ended: its length is the handover time the automatic quantum
    /// follows, and the holder's turn starts now that it runs (a handover longer than
    /// a quantum must not end the turn before it began).
    pub(crate) fn job_done(&mut self) {
        if std::mem::take(&mut self.turn_job) {
            self.estimates.unsettle(self.now_ns);
            if let Mode::Auto(auto) = &mut self.mode {
                auto.turns_back(self.now_ns);
            }
        }
        if let Some(since) = self.handover_since_ns.take() {
            self.last_handover_ns = self.now_ns.saturating_sub(since);
            if let Some(h) = self.holder.as_mut() {
                h.since_ns = self.now_ns;
            }
        }
    }

    /// When the machine next wants to look: the holder's turn's end (if another
    /// tenant demands the GPU then), the automatic choice's next probe or verdict, an
    /// idle tenant's demotion.
    pub(crate) fn next_timeout(&self, books: &Books) -> Option<u64> {
        let auto = match &self.mode {
            Mode::Auto(a) => a.next_timeout(self.overflows(books, None)),
            Mode::Fixed(_) => None,
        };
        // Later moments only: one that passed without a change waits for an event.
        let later = auto
            .into_iter()
            .chain(self.next_demotion_ns())
            .filter(|t| *t > self.now_ns)
            .min();
        later.into_iter().chain(self.turn_end_ns(books)).min()
    }

    /// When the holder's turn ends, if another tenant demands the GPU then.
    fn turn_end_ns(&self, books: &Books) -> Option<u64> {
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

    /// When the next idle tenant may give its memory back.
    fn next_demotion_ns(&self) -> Option<u64> {
        let Idle::Demote { after_ns } = self.idle else {
            return None;
        };
        self.demand
            .iter()
            .filter(|d| !d.busy && !d.demoted)
            .map(|d| d.since_ns.saturating_add(after_ns))
            .min()
    }

    /// The holder's quantum: the setting (or the automatic one) times its weight.
    fn quantum_ns(&self, books: &Books, tenant: TenantId) -> u64 {
        let base = match self.settings.quantum {
            Quantum::Fixed { ns } => ns,
            Quantum::Auto => AUTO_QUANTUM_HANDOVERS
                .saturating_mul(self.last_handover_ns)
                .clamp(MIN_AUTO_QUANTUM_NS, MAX_AUTO_QUANTUM_NS),
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
    /// (or, with `always`, two of them demand at all), and the choice takes turns.
    fn over(&self, books: &Books, incoming: Option<(TenantId, u64)>) -> bool {
        if self.choice() == Choice::Share {
            return false;
        }
        if self.settings.always {
            return self.demanding().nth(1).is_some();
        }
        self.overflows(books, incoming)
    }

    /// Whether the demanding tenants' memory (with an `incoming` allocation) does not
    /// fit in VRAM. The VRAM is already less what every tenant, demanding or not, holds
    /// that cannot move (`Held::set_unmovable`): that memory stays where it is through
    /// handovers and idle demotion, and turns plan the movable chunks around it.
    fn overflows(&self, books: &Books, incoming: Option<(TenantId, u64)>) -> bool {
        let footprint_bytes: u64 = self
            .demanding()
            .map(|t| {
                let u = books.usage(t);
                let coming = incoming.filter(|(i, _)| *i == t).map_or(0, |(_, b)| b);
                u.vram_bytes + u.host_bytes + coming
            })
            .sum();
        footprint_bytes > books.vram_capacity_bytes
    }

    /// The automatic choice looks at the moment.
    fn review(&mut self, books: &Books, incoming: Option<(TenantId, u64)>) {
        let overflow = self.overflows(books, incoming);
        let now_ns = self.now_ns;
        let demanding: Vec<TenantId> = self.demanding().collect();
        let Mode::Auto(auto) = &mut self.mode else {
            return;
        };
        // Reviews run between jobs: a failed probe's turns are back by now.
        auto.settled();
        let speeds = demanding.iter().map(|t| self.estimates.speed(*t, now_ns));
        auto.review(Review {
            now_ns,
            overflow,
            demanding: demanding.len(),
            summed_speed: speeds.clone().sum::<Option<f64>>(),
            measured: demanding.iter().all(|t| self.estimates.measured(*t)),
        });
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

    /// The job that brings the GPU where it should be now, if any: gives an idle
    /// tenant's memory back under pressure, wakes a demoted one, swaps hot chunks in
    /// for cold ones under sharing, parks the busy tenants that run beside the holder,
    /// hands over (moving memory when `moves`: the mode relocates chunks), or ends
    /// turns. `parked` says who is parked now; `incoming` is an allocation about to be
    /// placed, counted in its tenant's footprint.
    pub(crate) fn plan(
        &mut self,
        books: &mut Books,
        parked: &dyn Fn(TenantId) -> bool,
        moves: bool,
        incoming: Option<(TenantId, u64)>,
    ) -> Vec<Step> {
        self.review(books, incoming);
        let mut steps = Vec::new();
        if moves {
            steps = self.demote(books, parked, incoming);
            if steps.is_empty() && incoming.is_none() {
                steps = self.wake(books, parked);
            }
            if steps.is_empty() && incoming.is_none() {
                steps = self.rebalance(books, parked);
            }
        }
        if steps.is_empty() {
            steps = self.turn(books, parked, moves, incoming);
        }
        self.turn_job |= !steps.is_empty();
        steps
    }

    /// Parks, hands over or ends turns as [`Turns::decide`] says.
    fn turn(
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
                // A demoted tenant stays parked until it has work.
                self.holder = None;
                for t in 0..self.demand.len() {
                    let t = TenantId(t as u32);
                    if parked(t) && (!self.is_demoted(t) || self.demands(t)) {
                        self.demand[t.0 as usize].demoted = false;
                        let ins = if moves {
                            bring_in(books, &self.estimates, t)
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
                    overflow(books, &self.estimates, next, &held)
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
                self.demand[next.0 as usize].demoted = false;
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

    /// Whether memory is short for those who want it: a demanding tenant has chunks in
    /// host memory, or an allocation does not fit in free VRAM.
    fn pressure(&self, books: &Books, incoming: Option<(TenantId, u64)>) -> bool {
        incoming.is_some_and(|(_, bytes)| bytes > books.vram_free_bytes())
            || self.demanding().any(|t| books.usage(t).host_bytes > 0)
    }

    /// Under pressure, the tenants idle for `demote_after` (the holder aside) give their
    /// VRAM back above their guarantees and are parked; the running tenants bring in
    /// what then fits, hottest first.
    fn demote(
        &mut self,
        books: &mut Books,
        parked: &dyn Fn(TenantId) -> bool,
        incoming: Option<(TenantId, u64)>,
    ) -> Vec<Step> {
        let Idle::Demote { after_ns } = self.idle else {
            return Vec::new();
        };
        if !self.pressure(books, incoming) {
            return Vec::new();
        }
        let mut steps = Vec::new();
        for i in 0..self.demand.len() {
            let t = TenantId(i as u32);
            let d = self.demand[i];
            if d.busy
                || d.demoted
                || parked(t)
                || self.holder() == Some(t)
                || self.now_ns < d.since_ns.saturating_add(after_ns)
                || books.usage(t).vram_bytes == 0
            {
                continue;
            }
            let out = make_room(books, &self.estimates, t, u64::MAX);
            self.demand[i].demoted = true;
            steps.push((t, out, After::Park));
        }
        if steps.is_empty() || incoming.is_some() {
            return steps;
        }
        let runners: Vec<TenantId> = match self.holder() {
            Some(h) => vec![h],
            None => self.demanding().filter(|t| !parked(*t)).collect(),
        };
        for t in runners {
            let ins = bring_in(books, &self.estimates, t);
            if !ins.is_empty() {
                steps.push((t, ins, After::Keep));
            }
        }
        steps
    }

    /// A demoted tenant with work again gets its memory back, hottest first, from the
    /// others (idle ones first) before it runs, unless turns decide who runs now.
    fn wake(&mut self, books: &mut Books, parked: &dyn Fn(TenantId) -> bool) -> Vec<Step> {
        let Some(woken) = (0..self.demand.len())
            .map(|i| TenantId(i as u32))
            .find(|t| self.is_demoted(*t) && self.is_busy(*t) && parked(*t))
        else {
            return Vec::new();
        };
        if self.choice() == Choice::Turns && self.overflows(books, None) {
            // Turns decide: it is parked and demands, so it waits for its turn.
            self.demand[woken.0 as usize].demoted = false;
            return Vec::new();
        }
        self.demand[woken.0 as usize].demoted = false;
        let mut others: Vec<TenantId> = (0..self.demand.len())
            .map(|i| TenantId(i as u32))
            .filter(|t| *t != woken)
            .collect();
        others.sort_by_key(|t| self.demands(*t));
        let (outs, ins) = overflow(books, &self.estimates, woken, &others);
        let mut steps: Vec<Step> = others
            .into_iter()
            .zip(outs)
            .filter(|(_, out)| !out.is_empty())
            .map(|(t, out)| (t, out, After::Keep))
            .collect();
        steps.push((woken, ins, After::Unpark));
        steps
    }

    /// Under sharing, with touch marks from the driver: the running tenants' chunks
    /// touched lately that sit in host memory come in, in place of chunks in VRAM not
    /// touched for [`COLD_NS`] (any tenant's, within its guarantee): hot data local,
    /// the cold overflow remote.
    fn rebalance(&mut self, books: &mut Books, parked: &dyn Fn(TenantId) -> bool) -> Vec<Step> {
        if self.choice() != Choice::Share || !std::mem::take(&mut self.touch_news) {
            return Vec::new();
        }
        let hot_since = self.now_ns.saturating_sub(HOT_NS);
        let cold_before = self.now_ns.saturating_sub(COLD_NS);
        let est = &self.estimates;
        let runners: Vec<TenantId> = self.demanding().filter(|t| !parked(*t)).collect();
        let mut steps = Vec::new();
        for taker in runners {
            let hot: Vec<ChunkRef> = chunks_at(books, est, taker, Location::Host, true)
                .into_iter()
                .filter(|r| est.touched_ns(r.buffer).is_some_and(|t| t >= hot_since))
                .take(MAX_BATCH_MOVES)
                .collect();
            if hot.is_empty() {
                continue;
            }
            let need_bytes: u64 = hot
                .iter()
                .map(|r| books.chunk(*r).expect("listed").bytes)
                .sum();
            for giver in 0..self.demand.len() {
                let giver = TenantId(giver as u32);
                let out = make_room_where(books, est, giver, need_bytes, &|b| {
                    est.touched_ns(b).is_none_or(|t| t < cold_before)
                });
                if !out.is_empty() {
                    steps.push((giver, out, After::Keep));
                }
            }
            let ins = bring_in_of(books, taker, hot);
            if !ins.is_empty() {
                steps.push((taker, ins, After::Keep));
            }
        }
        steps
    }
}

/// A chunk counts as hot under sharing when its buffer was touched within this: ten
/// report windows. A design choice.
pub const HOT_NS: u64 = 1_000_000_000;

/// A chunk in VRAM counts as cold when its buffer was not touched within this: twice
/// [`HOT_NS`], so that no chunk is both and nothing swaps back and forth. A design choice.
pub const COLD_NS: u64 = 2_000_000_000;

/// The overflow's moves for `next` to hold the GPU: its chunks in host memory in (as
/// many as its VRAM cap allows, hottest first), and to make room the chunks of `held`,
/// in order, out (coldest first, each keeping its guarantee and within its host limit
/// and the host memory free). Plans each move in the books. Returns the moves out per
/// held tenant and the moves in.
fn overflow(
    books: &mut Books,
    est: &Estimates,
    next: TenantId,
    held: &[TenantId],
) -> (Vec<Vec<Move>>, Vec<Move>) {
    let mut need_bytes = 0u64;
    let cap_bytes = books.vram_room_under_cap(next);
    for r in chunks_at(books, est, next, Location::Host, true) {
        let bytes = books.chunk(r).expect("listed").bytes;
        if need_bytes + bytes > cap_bytes {
            break;
        }
        need_bytes += bytes;
    }
    let outs = held
        .iter()
        .map(|&t| make_room(books, est, t, need_bytes))
        .collect();
    (outs, bring_in(books, est, next))
}

/// Moves of `tenant`'s chunks out of VRAM, coldest first, until `need_bytes` are free
/// (or it may give no more: its guarantee, its host limit, the host memory free),
/// planned in the books.
fn make_room(books: &mut Books, est: &Estimates, tenant: TenantId, need_bytes: u64) -> Vec<Move> {
    make_room_where(books, est, tenant, need_bytes, &|_| true)
}

/// [`make_room`] with only the chunks of the buffers `give` accepts.
fn make_room_where(
    books: &mut Books,
    est: &Estimates,
    tenant: TenantId,
    need_bytes: u64,
    give: &dyn Fn(BufferId) -> bool,
) -> Vec<Move> {
    let mut out = Vec::new();
    for r in chunks_at(books, est, tenant, Location::Vram, false) {
        if books.vram_free_bytes() >= need_bytes {
            break;
        }
        if !give(r.buffer) {
            continue;
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

/// Moves of `tenant`'s chunks in host memory into free VRAM, hottest first, as many as
/// fit and its cap allows, planned in the books.
fn bring_in(books: &mut Books, est: &Estimates, tenant: TenantId) -> Vec<Move> {
    let chunks = chunks_at(books, est, tenant, Location::Host, true);
    bring_in_of(books, tenant, chunks)
}

/// Moves of `chunks` (`tenant`'s, in host memory) into free VRAM, in order, as many as
/// fit and its cap allows, planned in the books.
fn bring_in_of(books: &mut Books, tenant: TenantId, chunks: Vec<ChunkRef>) -> Vec<Move> {
    let mut ins = Vec::new();
    for r in chunks {
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

/// `tenant`'s chunks accounted at `location`, buffer by buffer: the buffers touched
/// last first (`hottest_first`) or last, in the books' order among equals (all equal
/// without touch marks).
fn chunks_at(
    books: &Books,
    est: &Estimates,
    tenant: TenantId,
    location: Location,
    hottest_first: bool,
) -> Vec<ChunkRef> {
    let mut buffers: Vec<_> = books.buffers_of(tenant).map(|b| b.id).collect();
    if est.has_touch_marks() {
        // Never touched sorts as the coldest; the sorts are stable.
        let heat = |b: &BufferId| est.touched_ns(*b).map_or(0, |t| t.saturating_add(1));
        if hottest_first {
            buffers.sort_by_key(|b| std::cmp::Reverse(heat(b)));
        } else {
            buffers.sort_by_key(heat);
        }
    }
    buffers
        .into_iter()
        .flat_map(|b| books.chunk_refs(b, location))
        .collect()
}
