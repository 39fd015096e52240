//! The copy engines: each runs one copy (a memcpy or a relocation) at a time, and copies
//! wait for an idle one in order. They own their jobs, from the queue to the end of the
//! transfer; the engine carries out what a finished copy means (replies, write epochs).

use std::collections::VecDeque;

use gpuswap_core::{BufferId, ChunkRef, CopyId};

/// What a copy is for.
pub(super) enum CopyKind {
    Memcpy {
        buffer: BufferId,
        writes_device: bool,
    },
    Relocation {
        copy: CopyId,
        chunk: ChunkRef,
        epoch: u64,
        /// Its index in a bulk move ([`BulkProgress`]); `None`: a move of its own.
        part: Option<u32>,
    },
    /// A relocation copy the manager withdrew while it ran.
    Cancelled,
}

/// One copy on its way through a copy engine.
pub(super) struct CopyJob {
    pub(super) tenant: usize,
    pub(super) kind: CopyKind,
    /// Bytes the copy engine moves over the link each way, indexed by `Direction as
    /// usize`: a relocation moves its chunk one way; a memcpy also moves the part of its
    /// buffer that lives in host memory, host to host through the GPU's mapping.
    pub(super) link_bytes: [u64; 2],
    /// Link flows of the transfer still running.
    pub(super) flows_left: u32,
    /// Before its bytes move: the copy engine's setup, or the runtime's copy path.
    pub(super) setup_ns: u64,
    /// The most its bytes move per second besides the link's share (Gdev's staging).
    pub(super) cap_bytes_per_s: Option<f64>,
    pub(super) transfer_started_ns: u64,
    pub(super) setup_started_ns: u64,
}

impl CopyJob {
    /// A copy for tenant `t` that has not started: it waits for a copy engine.
    pub(super) fn new(
        tenant: usize,
        kind: CopyKind,
        link_bytes: [u64; 2],
        setup_ns: u64,
        cap_bytes_per_s: Option<f64>,
    ) -> Self {
        CopyJob {
            tenant,
            kind,
            link_bytes,
            flows_left: 0,
            setup_ns,
            cap_bytes_per_s,
            transfer_started_ns: 0,
            setup_started_ns: 0,
        }
    }

    fn is_memcpy_of(&self, t: usize) -> bool {
        self.tenant == t && matches!(self.kind, CopyKind::Memcpy { .. })
    }
}

/// The outstanding bulk move: its parts not yet over and those that failed.
#[derive(Debug)]
pub(super) struct BulkProgress {
    pub(super) copy: CopyId,
    pub(super) parts_left: usize,
    pub(super) failed: Vec<u32>,
}

/// The device's copy engines and the copies waiting for them.
pub(super) struct CopyEngines {
    /// The copy each engine runs, by engine.
    engines: Vec<Option<CopyJob>>,
    /// Copies waiting for an idle engine, first come first served.
    queue: VecDeque<CopyJob>,
    /// The manager's outstanding bulk move, whose parts are among the copies.
    pub(super) bulk: Option<BulkProgress>,
}

impl CopyEngines {
    /// `count` idle copy engines.
    pub(super) fn new(count: u32) -> Self {
        CopyEngines {
            engines: (0..count).map(|_| None).collect(),
            queue: VecDeque::new(),
            bulk: None,
        }
    }

    /// Queues a copy for the next idle engine.
    #[inline]
    pub(super) fn push(&mut self, job: CopyJob) {
        self.queue.push_back(job);
    }

    /// Hands the first queued copy to the first idle engine, its setup starting at
    /// `now_ns`: the engine and the setup's length, or `None` when no copy can start.
    #[inline]
    pub(super) fn start_next(&mut self, now_ns: u64) -> Option<(usize, u64)> {
        // Mostly nothing waits: asked first, that spares the look at every engine.
        if self.queue.is_empty() {
            return None;
        }
        let engine = self.engines.iter().position(Option::is_none)?;
        let mut job = self.queue.pop_front()?;
        job.setup_started_ns = now_ns;
        let setup_ns = job.setup_ns;
        self.engines[engine] = Some(job);
        Some((engine, setup_ns))
    }

    /// The copy engine `engine` runs.
    #[inline]
    pub(super) fn job_mut(&mut self, engine: usize) -> &mut CopyJob {
        self.engines[engine].as_mut().expect("engine busy")
    }

    /// Frees engine `engine`: its copy is over.
    #[inline]
    pub(super) fn finish(&mut self, engine: usize) -> CopyJob {
        self.engines[engine].take().expect("engine busy")
    }

    /// Whether a copy runs on an engine or waits for one.
    #[inline]
    pub(super) fn busy(&self) -> bool {
        !self.queue.is_empty() || self.engines.iter().any(Option::is_some)
    }

    /// Withdraws relocation copy `copy`: a queued one is dropped, one on an engine runs
    /// out and its result is dropped. False when it is not in progress.
    pub(super) fn cancel(&mut self, copy: CopyId) -> bool {
        let is_it =
            |job: &CopyJob| matches!(job.kind, CopyKind::Relocation { copy: c, .. } if c == copy);
        let queued = self.queue.len();
        self.queue.retain(|job| !is_it(job));
        let mut found = self.queue.len() != queued;
        // Every part of a bulk move goes with it.
        for job in self.engines.iter_mut().flatten().filter(|j| is_it(j)) {
            job.kind = CopyKind::Cancelled;
            found = true;
        }
        if self.bulk.as_ref().is_some_and(|b| b.copy == copy) {
            self.bulk = None;
        }
        found
    }

    /// Drops tenant `t`'s queued memcpys, adding the buffers those that write the device
    /// would have written to `unwritten`: how many it dropped.
    pub(super) fn drop_queued_memcpys(&mut self, t: usize, unwritten: &mut Vec<BufferId>) -> usize {
        let before = self.queue.len();
        self.queue.retain(|job| {
            let mine = job.is_memcpy_of(t);
            if let (
                true,
                CopyKind::Memcpy {
                    buffer,
                    writes_device: true,
                },
            ) = (mine, &job.kind)
            {
                unwritten.push(*buffer);
            }
            !mine
        });
        before - self.queue.len()
    }

    /// Whether a memcpy of tenant `t`'s runs on an engine.
    pub(super) fn runs_memcpy_of(&self, t: usize) -> bool {
        self.engines.iter().flatten().any(|j| j.is_memcpy_of(t))
    }
}

/// Under Gdev's runtime a memcpy holds the device as a kernel does (its scheduler runs
/// copies and launches through one queue): the tenant whose copy holds it now, and the
/// tenants whose copies wait for it, in order.
#[derive(Default)]
pub(super) struct DeviceLock {
    holder: Option<usize>,
    waiters: VecDeque<usize>,
}

impl DeviceLock {
    /// Whether a copy of tenant `t`'s holds the device.
    pub(super) fn held_by(&self, t: usize) -> bool {
        self.holder == Some(t)
    }

    /// Whether a copy holds the device.
    pub(super) fn is_held(&self) -> bool {
        self.holder.is_some()
    }

    /// Tenant `t`'s copy takes the device.
    pub(super) fn take(&mut self, t: usize) {
        self.holder = Some(t);
    }

    /// The copy that held the device ended.
    pub(super) fn release(&mut self) {
        self.holder = None;
    }

    /// Tenant `t`'s copy waits for the device (once however often it asks).
    pub(super) fn wait(&mut self, t: usize) {
        if !self.waiters.contains(&t) {
            self.waiters.push_back(t);
        }
    }

    /// The tenant that waited longest for the device, no longer waiting.
    pub(super) fn next_waiter(&mut self) -> Option<usize> {
        self.waiters.pop_front()
    }

    /// Tenant `t` ended: it waits for nothing.
    pub(super) fn forget(&mut self, t: usize) {
        self.waiters.retain(|w| *w != t);
    }
}
