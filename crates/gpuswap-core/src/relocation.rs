//! The relocation state machine: a job moves chunks, one tenant (batch) at a time:
//! suspend the tenant, copy its chunks one by one, remap each, resume. Allocation
//! requests and gated launches arriving meanwhile wait for the job to end.
//!
//! ```text
//! start ──> [batch: Suspending] ──handle_suspended──> [Copying c1] ──copy_done──> Remap,
//!           [Copying c2] ... ──> Resume ──> next batch ... ──> Finished(then)
//! ```
//! Gdev's launch jobs skip the suspension: its scheduler already holds every tenant.

use std::collections::VecDeque;

use crate::accounting::Books;
use crate::buffer::Location;
use crate::ids::{BufferId, CopyId, LaunchId, RequestId, TenantId};
use crate::lists::ChunkRef;
use crate::protocol::{Action, Dma, Execution, Mapping, ProtocolError, Purpose};

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
    Copying { copy: CopyId, mv: Move },
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
    batches: VecDeque<Batch>,
    current: Option<(Batch, Step)>,
}

/// At most one relocation job at a time.
#[derive(Debug, Default)]
pub(crate) struct Relocation {
    job: Option<Job>,
    next_copy: u64,
}

impl Relocation {
    pub(crate) fn running(&self) -> bool {
        self.job.is_some()
    }

    /// Starts a relocation of `moves`, one tenant at a time in order of first appearance.
    /// Returns what to answer when it is already over (nothing to move).
    pub(crate) fn start(
        &mut self,
        purpose: Purpose,
        then: Then,
        moves: Vec<(TenantId, Move)>,
        books: &Books,
        out: &mut VecDeque<Action>,
    ) -> Option<Then> {
        debug_assert!(self.job.is_none(), "one relocation at a time");
        let mut batches: Vec<Batch> = Vec::new();
        for (tenant, mv) in moves {
            match batches.iter_mut().find(|b| b.tenant == tenant) {
                Some(batch) => batch.moves.push_back(mv),
                None => batches.push(Batch {
                    tenant,
                    moves: VecDeque::from([mv]),
                }),
            }
        }
        self.job = Some(Job {
            purpose,
            then,
            batches: batches.into(),
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
        let outstanding = match self.job.as_ref().and_then(|j| j.current.as_ref()) {
            Some((batch, Step::Copying { copy: c, mv })) => Some((batch.tenant, *c, *mv)),
            _ => None,
        };
        let Some((tenant, _, mv)) = outstanding.filter(|o| o.1 == copy) else {
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

    fn next_batch(&mut self, books: &Books, out: &mut VecDeque<Action>) -> Option<Then> {
        let job = self.job.as_mut().expect("job running");
        match job.batches.pop_front() {
            // Gdev's scheduler runs one kernel at a time and is holding the launch:
            // nobody runs, nobody needs suspending.
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
            let (batch, step) = job.current.as_mut().expect("batch running");
            let Some(mv) = batch.moves.pop_front() else {
                let tenant = batch.tenant;
                job.current = None;
                if job.purpose != Purpose::Launch {
                    out.push_back(Action::Execution(Execution::Resume { tenant }));
                }
                return self.next_batch(books, out);
            };
            let tenant = batch.tenant;
            let Some(bytes) = books.chunk(mv.chunk).map(|c| c.bytes) else {
                continue;
            };
            let copy = CopyId(self.next_copy);
            self.next_copy += 1;
            *step = Step::Copying { copy, mv };
            out.push_back(Action::Dma(Dma::Copy {
                copy,
                tenant,
                chunk: mv.chunk,
                bytes,
                to: mv.to,
            }));
            return None;
        }
    }
}
