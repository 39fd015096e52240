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

use std::collections::VecDeque;

use crate::accounting::Books;
use crate::buffer::Location;
use crate::ids::{BufferId, CopyId, LaunchId, RequestId, TenantId};
use crate::lists::ChunkRef;
use crate::protocol::{Action, Dma, Execution, Mapping, ProtocolError, Purpose};

/// Attempts at one chunk's copy before its tenant is given up: a transient DMA error
/// (a timeout under load) is worth retrying; one that repeats three times is taken to be
/// persistent. A design choice, not a measured figure.
pub const MAX_COPY_ATTEMPTS: u32 = 3;

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
}

#[derive(Debug)]
enum Step {
    Suspending,
    Copying {
        copy: CopyId,
        mv: Move,
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
                    let mut batch = self.spare.pop().unwrap_or_else(|| Batch {
                        tenant,
                        moves: VecDeque::new(),
                    });
                    batch.tenant = tenant;
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
                outstanding: outstanding.map(|o| o.1),
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
                outstanding: outstanding.map(|o| o.1),
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

    /// `tenant` exited: its batches are dropped (an outstanding copy of it is
    /// cancelled) and what the job was to answer it is not answered. Returns what to
    /// answer if that ended the job.
    pub(crate) fn forget(
        &mut self,
        tenant: TenantId,
        books: &Books,
        out: &mut VecDeque<Action>,
    ) -> Option<Then> {
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
            if let Step::Copying { copy, .. } = step {
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
        let copy = CopyId(self.next_copy);
        self.next_copy += 1;
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
        let job = self.job.as_mut().expect("job running");
        match self.batches.pop_front() {
            // Gdev's scheduler holds the launch: no other context runs, and the
            // launcher's own kernels in flight (its launch limit above one) use none of
            // what moves (the others' buffers out, its own not yet resident in):
            // nobody needs suspending.
            Some(batch) if job.purpose == Purpose::Launch => {
                job.current = Some((batch, Step::Suspending));
                self.next_copy(books, out)
            }
            Some(batch) => {
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

    /// Asks for the current batch's next copy, skipping chunks freed meanwhile; resumes
    /// the tenant after its last one.
    fn next_copy(&mut self, books: &Books, out: &mut VecDeque<Action>) -> Option<Then> {
        loop {
            let job = self.job.as_mut().expect("job running");
            let (batch, _) = job.current.as_mut().expect("batch running");
            let Some(mv) = batch.moves.pop_front() else {
                let tenant = batch.tenant;
                let (batch, _) = job.current.take().expect("batch running");
                self.spare.push(batch);
                if job.purpose != Purpose::Launch {
                    out.push_back(Action::Execution(Execution::Resume { tenant }));
                }
                return self.next_batch(books, out);
            };
            let tenant = batch.tenant;
            if books.chunk(mv.chunk).is_none() {
                continue;
            }
            self.ask_copy(tenant, mv, 1, books, out);
            return None;
        }
    }
}
