//! The relocation state machine: a job moves chunks, one tenant (batch) at a time:
//! suspend the tenant, copy its chunks one by one, remap each, resume. Allocation
//! requests and gated launches arriving meanwhile wait for the job to end.
//!
//! ```text
//! start ──> [batch: Suspending] ──handle_suspended──> [Copying c1] ──copy_done──> Remap,
//!           [Copying c2] ... ──> Resume ──> next batch ... ──> Finished(then)
//! ```
//! Gdev's launch jobs skip the suspension: its scheduler holds the launch, no other
//! context runs, and the launcher's own kernels in flight use none of what moves.
//!
//! A failed copy is asked again, up to [`MAX_COPY_ATTEMPTS`] times; then the batch is
//! abandoned and the manager ends the chunk's tenant. A tenant that exits loses its
//! batches: the current one is dropped (its outstanding copy cancelled) and the job goes
//! on with the next tenant's.
//!
//! Turns add two things. A tenant may be *parked*: a batch that ends with [`After::Park`]
//! leaves it suspended after the job, held while another tenant has the GPU; any later
//! batch of a parked tenant needs no suspension and leaves it parked unless it ends
//! with [`After::Unpark`]. And a turn's job moves in *bulk*: each batch's chunks go out
//! as one [`Dma::Batch`] of up to [`MAX_BATCH_MOVES`] moves with their copies in flight
//! together, answered once; its failed moves are asked again as a smaller batch. Under
//! turns every job moves in bulk ([`Relocation::bulk`]); otherwise only turns' jobs do,
//! and the others chunk by chunk.

use std::collections::VecDeque;

use crate::accounting::Books;
use crate::buffer::Location;
use crate::ids::{BufferId, CopyId, LaunchId, RequestId, TenantId};
use crate::lists::ChunkRef;
use crate::protocol::{Action, BatchMove, Dma, Execution, Mapping, ProtocolError, Purpose};

/// Attempts at one chunk's copy before its tenant is given up: a transient DMA error
/// (a timeout under load) is worth retrying; one that repeats three times is taken to be
/// persistent. A design choice, not a measured figure.
pub const MAX_COPY_ATTEMPTS: u32 = 3;

/// The most moves in one [`Dma::Batch`]: the daemon's wire protocol carries at most this
/// many in one command (`gpuswap_wire::MAX_BATCH_MOVES`, 2 GiB of 2 MiB chunks).
pub const MAX_BATCH_MOVES: usize = 1024;

/// What becomes of a batch's tenant when its moves are over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum After {
    /// As it was before the job: resumed, or still parked.
    Keep,
    /// Parked: suspended until a later batch unparks it (turns: held).
    Park,
    /// Resumed, parked or not (turns: it holds the GPU now).
    Unpark,
}

/// What a failed copy leads to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CopyFailure {
    /// The copy was asked again (a new `Copy` is out), or, if its chunk was freed
    /// meanwhile, the batch went on; the job's answer if that ended it.
    Retried(Option<Then>),
    /// Every attempt failed: the batch is abandoned and its tenant must be ended.
    GaveUp {
        tenant: TenantId,
        chunk: ChunkRef,
        attempts: u32,
    },
}

/// One planned chunk move.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Move {
    pub(crate) chunk: ChunkRef,
    pub(crate) to: Location,
}

#[derive(Debug)]
struct Batch {
    tenant: TenantId,
    moves: VecDeque<Move>,
    after: After,
}

#[derive(Debug)]
enum Step {
    Suspending,
    Copying {
        copy: CopyId,
        mv: Move,
        attempts: u32,
    },
    /// A bulk move is out: all of `moves` in one command.
    Bulk {
        copy: CopyId,
        moves: Vec<Move>,
        attempts: u32,
    },
}

/// What a relocation job answers when it ends.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Then {
    Nothing,
    Grant(RequestId, TenantId, BufferId),
    LaunchReady(TenantId, LaunchId),
}

#[derive(Debug)]
struct Job {
    purpose: Purpose,
    then: Then,
    current: Option<(Batch, Step)>,
}

impl Job {
    /// Turns' jobs move in bulk, and so does every job where `bulk` is on.
    fn bulk(&self, bulk: bool) -> bool {
        bulk || self.purpose == Purpose::Turn
    }
}

/// At most one relocation job at a time.
///
/// The daemon's steady path allocates nothing (issue 28, item 5): the plan a policy
/// fills, the batches and their move queues are kept when a job ends and reused by the
/// next one.
#[derive(Debug, Default)]
pub(crate) struct Relocation {
    job: Option<Job>,
    /// The running job's batches after the current one, in order.
    batches: VecDeque<Batch>,
    /// Finished batches, emptied, whose queues the next job reuses.
    spare: Vec<Batch>,
    /// An empty plan with room, for [`Relocation::take_plan`].
    plan: Vec<(TenantId, Move)>,
    next_copy: u64,
    /// Parked tenants, by number: suspended between jobs.
    parked: Vec<bool>,
    /// Every job moves in bulk (under turns), not only turns' own.
    pub(crate) bulk: bool,
}

impl Relocation {
    pub(crate) fn running(&self) -> bool {
        self.job.is_some()
    }

    /// An empty plan for [`Relocation::start`], with the room earlier plans grew.
    pub(crate) fn take_plan(&mut self) -> Vec<(TenantId, Move)> {
        std::mem::take(&mut self.plan)
    }

    /// Starts a relocation of `moves`, one tenant at a time in order of first appearance.
    /// Returns what to answer when it is already over (nothing to move).
    pub(crate) fn start(
        &mut self,
        purpose: Purpose,
        then: Then,
        mut moves: Vec<(TenantId, Move)>,
        books: &Books,
        out: &mut VecDeque<Action>,
    ) -> Option<Then> {
        debug_assert!(self.job.is_none(), "one relocation at a time");
        debug_assert!(self.batches.is_empty(), "no batches outlive their job");
        for (tenant, mv) in moves.drain(..) {
            match self.batches.iter_mut().find(|b| b.tenant == tenant) {
                Some(batch) => batch.moves.push_back(mv),
                None => {
                    let mut batch = self.spare_batch(tenant, After::Keep);
                    batch.moves.push_back(mv);
                    self.batches.push_back(batch);
                }
            }
        }
        self.plan = moves;
        self.job = Some(Job {
            purpose,
            then,
            current: None,
        });
        self.next_batch(books, out)
    }

    /// Starts a turn's job: one batch per step, in order, each with its moves (maybe
    /// none: a tenant parked or unparked without moving anything) and what becomes of
    /// its tenant. Returns what to answer when it is already over.
    pub(crate) fn start_turn(
        &mut self,
        steps: Vec<(TenantId, Vec<Move>, After)>,
        books: &Books,
        out: &mut VecDeque<Action>,
    ) -> Option<Then> {
        debug_assert!(self.job.is_none(), "one relocation at a time");
        for (tenant, moves, after) in steps {
            let mut batch = self.spare_batch(tenant, after);
            batch.moves.extend(moves);
            self.batches.push_back(batch);
        }
        self.job = Some(Job {
            purpose: Purpose::Turn,
            then: Then::Nothing,
            current: None,
        });
        self.next_batch(books, out)
    }

    /// A batch for `tenant`, its queue reused from a finished one.
    fn spare_batch(&mut self, tenant: TenantId, after: After) -> Batch {
        let mut batch = self.spare.pop().unwrap_or_else(|| Batch {
            tenant,
            moves: VecDeque::new(),
            after,
        });
        batch.tenant = tenant;
        batch.after = after;
        batch
    }

    /// Whether `tenant` is parked (suspended between jobs).
    pub(crate) fn is_parked(&self, tenant: TenantId) -> bool {
        self.parked.get(tenant.0 as usize).copied().unwrap_or(false)
    }

    /// The parked tenants.
    pub(crate) fn parked(&self) -> impl Iterator<Item = TenantId> + '_ {
        self.parked
            .iter()
            .enumerate()
            .filter(|(_, p)| **p)
            .map(|(i, _)| TenantId(i as u32))
    }

    fn set_parked(&mut self, tenant: TenantId, parked: bool) {
        let i = tenant.0 as usize;
        if self.parked.len() <= i {
            self.parked.resize(i + 1, false);
        }
        self.parked[i] = parked;
    }

    /// The tenant asked to suspend has drained.
    pub(crate) fn suspended(
        &mut self,
        tenant: TenantId,
        books: &Books,
        out: &mut VecDeque<Action>,
    ) -> Result<Option<Then>, ProtocolError> {
        match self.job.as_ref().and_then(|j| j.current.as_ref()) {
            Some((batch, Step::Suspending)) if batch.tenant == tenant => {
                Ok(self.next_copy(books, out))
            }
            _ => Err(ProtocolError::UnexpectedSuspended { tenant }),
        }
    }

    /// The outstanding copy finished: the chunk is where it was sent.
    pub(crate) fn copy_done(
        &mut self,
        copy: CopyId,
        books: &mut Books,
        out: &mut VecDeque<Action>,
    ) -> Result<Option<Then>, ProtocolError> {
        let outstanding = self.outstanding();
        let Some((tenant, _, mv, _)) = outstanding.filter(|o| o.1 == copy) else {
            return Err(ProtocolError::UnexpectedCopyDone {
                copy,
                outstanding: self.outstanding_id(),
            });
        };
        if books.finish_move(tenant, mv.chunk, mv.to).is_some() {
            out.push_back(Action::Mapping(Mapping::Remap {
                tenant,
                chunk: mv.chunk,
                to: mv.to,
            }));
        }
        Ok(self.next_copy(books, out))
    }

    /// The outstanding copy failed: ask it again, or give the batch up.
    pub(crate) fn copy_failed(
        &mut self,
        copy: CopyId,
        books: &Books,
        out: &mut VecDeque<Action>,
    ) -> Result<CopyFailure, ProtocolError> {
        let outstanding = self.outstanding();
        let Some((tenant, _, mv, attempts)) = outstanding.filter(|o| o.1 == copy) else {
            return Err(ProtocolError::UnexpectedCopyFailed {
                copy,
                outstanding: self.outstanding_id(),
            });
        };
        if attempts >= MAX_COPY_ATTEMPTS {
            // The caller ends the tenant, which drops the rest of the job's batches of
            // it ([`Relocation::forget`]).
            let job = self.job.as_mut().expect("a copy is outstanding");
            job.current = None;
            return Ok(CopyFailure::GaveUp {
                tenant,
                chunk: mv.chunk,
                attempts,
            });
        }
        if books.chunk(mv.chunk).is_none() {
            return Ok(CopyFailure::Retried(self.next_copy(books, out)));
        }
        self.ask_copy(tenant, mv, attempts + 1, books, out);
        Ok(CopyFailure::Retried(None))
    }

    /// The outstanding bulk move is over: the moves not in `failed` (indices into its
    /// moves) are where they were sent and are remapped; the failed ones are asked again
    /// as a new batch, or after [`MAX_COPY_ATTEMPTS`] the batch is given up.
    pub(crate) fn batch_done(
        &mut self,
        copy: CopyId,
        failed: &[u32],
        books: &mut Books,
        out: &mut VecDeque<Action>,
    ) -> Result<CopyFailure, ProtocolError> {
        let current = self.job.as_mut().and_then(|j| j.current.as_mut());
        let Some((
            batch,
            Step::Bulk {
                copy: c,
                moves,
                attempts,
            },
        )) = current
        else {
            return Err(ProtocolError::UnexpectedBatchDone {
                copy,
                outstanding: self.outstanding_id(),
            });
        };
        if *c != copy || failed.iter().any(|i| *i as usize >= moves.len()) {
            return Err(ProtocolError::UnexpectedBatchDone {
                copy,
                outstanding: Some(*c),
            });
        }
        let (tenant, attempts) = (batch.tenant, *attempts);
        let mut retry = Vec::new();
        for (i, mv) in moves.drain(..).enumerate() {
            if failed.contains(&(i as u32)) {
                retry.push(mv);
            } else if books.finish_move(tenant, mv.chunk, mv.to).is_some() {
                out.push_back(Action::Mapping(Mapping::Remap {
                    tenant,
                    chunk: mv.chunk,
                    to: mv.to,
                }));
            }
        }
        retry.retain(|mv| books.chunk(mv.chunk).is_some());
        let Some(first) = retry.first() else {
            return Ok(CopyFailure::Retried(self.next_copy(books, out)));
        };
        if attempts >= MAX_COPY_ATTEMPTS {
            let chunk = first.chunk;
            self.job.as_mut().expect("a batch is outstanding").current = None;
            return Ok(CopyFailure::GaveUp {
                tenant,
                chunk,
                attempts,
            });
        }
        self.ask_batch(tenant, retry, attempts + 1, books, out);
        Ok(CopyFailure::Retried(None))
    }

    /// `tenant` exited: its batches are dropped (an outstanding copy of it is
    /// cancelled) and what the job was to answer it is not answered. Returns what to
    /// answer if that ended the job.
    pub(crate) fn forget(
        &mut self,
        tenant: TenantId,
        books: &Books,
        out: &mut VecDeque<Action>,
    ) -> Option<Then> {
        self.set_parked(tenant, false);
        let job = self.job.as_mut()?;
        self.batches.retain(|b| b.tenant != tenant);
        match job.then {
            Then::Grant(_, t, _) | Then::LaunchReady(t, _) if t == tenant => {
                job.then = Then::Nothing;
            }
            _ => {}
        }
        if let Some((batch, step)) = &job.current
            && batch.tenant == tenant
        {
            if let Step::Copying { copy, .. } | Step::Bulk { copy, .. } = step {
                out.push_back(Action::Dma(Dma::Cancel { copy: *copy }));
            }
            job.current = None;
        }
        if job.current.is_none() {
            return self.next_batch(books, out);
        }
        None
    }

    /// The buffer the running job will grant to `tenant` when it ends (placed, not yet
    /// mapped).
    pub(crate) fn pending_grant(&self, tenant: TenantId) -> Option<BufferId> {
        match self.job.as_ref()?.then {
            Then::Grant(_, t, buffer) if t == tenant => Some(buffer),
            _ => None,
        }
    }

    /// The outstanding copy: (tenant, copy, move, attempts so far).
    fn outstanding(&self) -> Option<(TenantId, CopyId, Move, u32)> {
        match self.job.as_ref().and_then(|j| j.current.as_ref()) {
            Some((batch, Step::Copying { copy, mv, attempts })) => {
                Some((batch.tenant, *copy, *mv, *attempts))
            }
            _ => None,
        }
    }

    /// The number of the outstanding copy or bulk move, if any.
    fn outstanding_id(&self) -> Option<CopyId> {
        match self.job.as_ref().and_then(|j| j.current.as_ref()) {
            Some((_, Step::Copying { copy, .. } | Step::Bulk { copy, .. })) => Some(*copy),
            _ => None,
        }
    }

    /// A new copy number.
    fn number(&mut self) -> CopyId {
        let copy = CopyId(self.next_copy);
        self.next_copy += 1;
        copy
    }

    /// Asks for `moves` in one bulk move under a new number (attempt `attempts`).
    fn ask_batch(
        &mut self,
        tenant: TenantId,
        moves: Vec<Move>,
        attempts: u32,
        books: &Books,
        out: &mut VecDeque<Action>,
    ) {
        let copy = self.number();
        let batch = moves
            .iter()
            .map(|mv| BatchMove {
                chunk: mv.chunk,
                bytes: books
                    .chunk(mv.chunk)
                    .expect("asked only for live chunks")
                    .bytes,
                to: mv.to,
            })
            .collect();
        let job = self.job.as_mut().expect("job running");
        let (_, step) = job.current.as_mut().expect("batch running");
        *step = Step::Bulk {
            copy,
            moves,
            attempts,
        };
        out.push_back(Action::Dma(Dma::Batch {
            copy,
            tenant,
            moves: batch,
        }));
    }

    /// Asks for `mv`'s copy under a new number (attempt `attempts`).
    fn ask_copy(
        &mut self,
        tenant: TenantId,
        mv: Move,
        attempts: u32,
        books: &Books,
        out: &mut VecDeque<Action>,
    ) {
        let bytes = books
            .chunk(mv.chunk)
            .expect("asked only for live chunks")
            .bytes;
        let copy = self.number();
        let job = self.job.as_mut().expect("job running");
        let (_, step) = job.current.as_mut().expect("batch running");
        *step = Step::Copying { copy, mv, attempts };
        out.push_back(Action::Dma(Dma::Copy {
            copy,
            tenant,
            chunk: mv.chunk,
            bytes,
            to: mv.to,
        }));
    }

    fn next_batch(&mut self, books: &Books, out: &mut VecDeque<Action>) -> Option<Then> {
        let next = self.batches.pop_front();
        let next = next.map(|b| (self.is_parked(b.tenant), b));
        let job = self.job.as_mut().expect("job running");
        match next {
            // Gdev's scheduler holds the launch: no other context runs, and the
            // launcher's own kernels in flight (its launch limit above one) use none of
            // what moves (the others' buffers out, its own not yet resident in):
            // nobody needs suspending. A parked tenant is suspended already.
            Some((parked, batch)) if job.purpose == Purpose::Launch || parked => {
                job.current = Some((batch, Step::Suspending));
                self.next_copy(books, out)
            }
            Some((_, batch)) => {
                out.push_back(Action::Execution(Execution::Suspend {
                    tenant: batch.tenant,
                    purpose: job.purpose,
                }));
                job.current = Some((batch, Step::Suspending));
                None
            }
            None => Some(self.job.take().expect("job running").then),
        }
    }

    /// Asks for the current batch's next copy (or bulk move), skipping chunks freed
    /// meanwhile; after its last, resumes or parks the tenant.
    fn next_copy(&mut self, books: &Books, out: &mut VecDeque<Action>) -> Option<Then> {
        loop {
            let job = self.job.as_mut().expect("job running");
            let bulk = job.bulk(self.bulk);
            let (batch, _) = job.current.as_mut().expect("batch running");
            let tenant = batch.tenant;
            if bulk {
                let mut moves = Vec::new();
                while moves.len() < MAX_BATCH_MOVES
                    && let Some(mv) = batch.moves.pop_front()
                {
                    if books.chunk(mv.chunk).is_some() {
                        moves.push(mv);
                    }
                }
                if !moves.is_empty() {
                    self.ask_batch(tenant, moves, 1, books, out);
                    return None;
                }
            }
            let Some(mv) = batch.moves.pop_front() else {
                return self.end_batch(books, out);
            };
            if books.chunk(mv.chunk).is_none() {
                continue;
            }
            self.ask_copy(tenant, mv, 1, books, out);
            return None;
        }
    }

    /// The current batch's moves are over: its tenant is resumed, parked or left parked,
    /// and the next batch starts.
    fn end_batch(&mut self, books: &Books, out: &mut VecDeque<Action>) -> Option<Then> {
        let job = self.job.as_mut().expect("job running");
        let launch = job.purpose == Purpose::Launch;
        let (batch, _) = job.current.take().expect("batch running");
        let (tenant, after) = (batch.tenant, batch.after);
        self.spare.push(batch);
        let resume = match after {
            After::Keep => !launch && !self.is_parked(tenant),
            After::Park => {
                self.set_parked(tenant, true);
                false
            }
            After::Unpark => {
                self.set_parked(tenant, false);
                true
            }
        };
        if resume {
            out.push_back(Action::Execution(Execution::Resume { tenant }));
        }
        self.next_batch(books, out)
    }
}
