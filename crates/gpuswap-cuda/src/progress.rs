//! Progress reports (`Welcome::progress_report_ns` not zero, issue 40): what the
//! process's GPU work did in each report window, aggregated, one message a window.
//!
//! - Launches and grid blocks: every launch hook adds to two counters (a graph launch
//!   counts once, with no blocks); launches into a stream being captured into a graph
//!   run nothing and are not counted.
//! - Completions: every [`EVENT_EVERY`]th launch records an event without timing on its
//!   stream, noting the launch and block counts; the reporter thread polls the events in
//!   order with `cuEventQuery`, and each complete one says every launch counted before
//!   it is done (exact for a program on one stream, a lower bound across streams, since
//!   an event covers its own stream's work). When the launches stop, the reporter
//!   records a closing event on the legacy default stream, which waits for every
//!   blocking stream, so the count catches up (launches on non-blocking streams are
//!   then taken as complete too); a `cuCtxSynchronize` that returns
//!   catches it up at once.
//! - Synchronization waits: `cuStreamSynchronize`, `cuEventSynchronize` and
//!   `cuCtxSynchronize` are timed with the monotonic clock.
//! - Idleness: no launch or copy during a whole window, and every launch counted
//!   complete.
//!
//! While a stream is being captured, no event is recorded or queried: CUDA's global
//! capture mode forbids such calls from any thread, and an event in a capturing stream
//! would become a node of the graph. The capture hooks count captures under the
//! events' lock, so a capture never begins while the reporter queries.
//!
//! The launch path costs two atomic additions, plus, every
//! [`EVENT_EVERY`] launches, a `try_lock` and an event record; it never waits for the
//! reporter (a launch that finds the events' lock held records no event).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use gpuswap_wire::{ClientMsg, Progress};

use crate::demand::{Outbox, now_ns};
use crate::ffi::{self, CuResult, Handle, driver};
use crate::{diag, touch};

/// Launches between two completion events. The measured PyTorch tenant launches about
/// 46,000 kernels a second: 64 makes some 720 events a second (72 in a 100 ms window),
/// so a completion count lags at most 64 launches (about 1.4 ms of that tenant's
/// launching), while the lock and `cuEventRecord` (a microsecond or two on a GPU's
/// driver) spread over 64 launches cost some 30 ns each, well under 1 % of the 22 us
/// between its launches.
pub(crate) const EVENT_EVERY: u64 = 64;

/// Events in flight at most: more than a window's worth at that rate. A GPU that lags
/// further behind its launches gets no new events until it catches up (the next one
/// covers the launches between).
const EVENTS_IN_FLIGHT_MAX: usize = 128;

/// An event recorded after a launch, and the counts it covers.
struct Recorded {
    ctx: usize,
    event: usize,
    launches: u64,
    blocks: u64,
}

/// The events, under a lock that launches only try.
#[derive(Default)]
struct Events {
    /// Recorded, oldest first.
    in_flight: VecDeque<Recorded>,
    /// Complete, for reuse: (context, event).
    free: Vec<(usize, usize)>,
    /// The launches the newest recorded event covers.
    covered: u64,
    /// The context of the newest launch that recorded an event.
    ctx: usize,
}

/// The process's counts since it connected; the reporter sends their differences.
pub(crate) struct Meter {
    report_ns: u64,
    /// Whether launches' parameters are scanned for buffers (`GPUSWAP_TOUCH`).
    scan: bool,
    launches: AtomicU64,
    blocks: AtomicU64,
    /// Copies, memsets and other work that is not a launch: idleness only.
    other_work: AtomicU64,
    completed: AtomicU64,
    completed_blocks: AtomicU64,
    sync_wait_ns: AtomicU64,
    /// Streams being captured into graphs (begun, not ended), counted under the
    /// events' lock.
    captures: AtomicU32,
    events: Mutex<Events>,
}

static METER: OnceLock<Meter> = OnceLock::new();

/// The meter, once the daemon asked for progress.
pub(crate) fn meter() -> Option<&'static Meter> {
    METER.get()
}

/// Starts counting and the reporter thread that sends a `Progress` every `report_ns`.
pub(crate) fn start(report_ns: u64, outbox: &'static dyn Outbox) -> Result<(), String> {
    let scan = std::env::var("GPUSWAP_TOUCH").map_or(true, |v| v != "0");
    let meter = METER.get_or_init(|| Meter {
        report_ns,
        scan,
        launches: AtomicU64::new(0),
        blocks: AtomicU64::new(0),
        other_work: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        completed_blocks: AtomicU64::new(0),
        sync_wait_ns: AtomicU64::new(0),
        captures: AtomicU32::new(0),
        events: Mutex::new(Events::default()),
    });
    touch::enable();
    if driver::events().is_none() {
        diag::trace_note("the driver has no events: progress reports count no completions");
    }
    std::thread::Builder::new()
        .name("gpuswap-progress".into())
        .spawn(move || meter.report(outbox))
        .map(drop)
        .map_err(|e| format!("cannot start the interposer's progress reporter: {e}"))
}

/// A launch as the hooks see it.
pub(crate) struct Launch {
    pub func: Handle,
    pub stream: Handle,
    /// Grid blocks (gridDimX * gridDimY * gridDimZ); 0 for a graph.
    pub blocks: u64,
    pub params: *mut Handle,
    pub extra: *mut Handle,
}

impl Meter {
    /// A launch was queued (the driver returned success).
    ///
    /// # Safety
    /// `launch`'s parameters are the launch call's, still valid.
    pub unsafe fn launched(&self, launch: &Launch) {
        if self.captures.load(Relaxed) > 0
            && driver::events().is_none_or(|e| e.capturing(launch.stream))
        {
            return;
        }
        if self.scan && !launch.func.is_null() {
            // SAFETY: the caller's contract.
            unsafe { touch::scan(launch.func, launch.params, launch.extra) };
        }
        let blocks = self.blocks.fetch_add(launch.blocks, Relaxed) + launch.blocks;
        let launches = self.launches.fetch_add(1, Relaxed) + 1;
        if launches % EVENT_EVERY == 1 {
            self.record(launch.stream, launches, blocks, true);
        }
    }

    /// A copy, memset or other work that is not a launch was started.
    pub fn worked(&self) {
        self.other_work.fetch_add(1, Relaxed);
    }

    /// Runs a synchronization `wait`, timed; `whole_context`: it waits for all the
    /// context's work (`cuCtxSynchronize`), so every launch before it is complete once
    /// it returns.
    pub fn synchronize(&self, whole_context: bool, wait: impl FnOnce() -> CuResult) -> CuResult {
        let (launches, blocks) = (self.launches.load(SeqCst), self.blocks.load(SeqCst));
        let started_ns = now_ns();
        let rc = wait();
        self.sync_wait_ns
            .fetch_add(now_ns().saturating_sub(started_ns), Relaxed);
        if whole_context && rc == ffi::CUDA_SUCCESS {
            self.completed.fetch_max(launches, SeqCst);
            self.completed_blocks.fetch_max(blocks, SeqCst);
        }
        rc
    }

    /// Runs `begin` (a capture's start), counted first under the events' lock, so the
    /// reporter is not querying when it begins.
    pub fn begin_capture(&self, begin: impl FnOnce() -> CuResult) -> CuResult {
        let _events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        self.captures.fetch_add(1, SeqCst);
        let rc = begin();
        if rc != ffi::CUDA_SUCCESS {
            self.captures.fetch_sub(1, SeqCst);
        }
        rc
    }

    /// A capture ended (successfully or not: either way the stream captures no more).
    pub fn end_capture(&self) {
        let _ = self
            .captures
            .fetch_update(SeqCst, SeqCst, |n| Some(n.saturating_sub(1)));
    }

    /// Records an event on `stream` covering `launches` and `blocks`; `launching`: from
    /// the launch path, which never waits for the lock. The context is the calling
    /// thread's (the reporter's closing event sets the last one's first).
    fn record(&self, stream: Handle, launches: u64, blocks: u64, launching: bool) {
        let Some(api) = driver::events() else { return };
        let mut events = if launching {
            match self.events.try_lock() {
                Ok(events) => events,
                Err(_) => return,
            }
        } else {
            self.events.lock().unwrap_or_else(PoisonError::into_inner)
        };
        if self.captures.load(SeqCst) > 0
            || events.in_flight.len() >= EVENTS_IN_FLIGHT_MAX
            || api.capturing(stream)
        {
            return;
        }
        let ctx = driver::current_context() as usize;
        if ctx == 0 {
            return;
        }
        let reuse = events.free.iter().position(|(c, _)| *c == ctx);
        let event = match reuse.map(|i| events.free.swap_remove(i).1) {
            Some(event) => event as Handle,
            None => match api.create() {
                Some(event) => event,
                None => return,
            },
        };
        if !api.record(event, stream) {
            events.free.push((ctx, event as usize));
            return;
        }
        events.in_flight.push_back(Recorded {
            ctx,
            event: event as usize,
            launches,
            blocks,
        });
        events.covered = events.covered.max(launches);
        events.ctx = ctx;
    }

    /// The reporter: polls the events and sends a report every window, until the
    /// daemon is lost.
    fn report(&self, outbox: &dyn Outbox) {
        let mut window = Window::new(now_ns());
        while !outbox.is_lost() {
            std::thread::sleep(Duration::from_nanos(self.report_ns.max(1_000_000)));
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let now = self.counts();
                if now.launches == window.seen.launches && now.launches > self.covered() {
                    self.close();
                }
                self.poll();
                window.next(self.counts(), now_ns())
            }));
            match result {
                Ok(Some(progress)) => {
                    let mut msg = Some(ClientMsg::Progress(progress));
                    let _ = outbox.send_if(&mut || msg.take());
                }
                Ok(None) => {}
                Err(_) => {
                    diag::warn("internal error (a panic) in the progress reporter; it stopped");
                    return;
                }
            }
        }
    }

    fn covered(&self) -> u64 {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .covered
    }

    /// The launches stopped with some not covered by an event: a closing event on the
    /// legacy default stream of the last recording launch's context.
    fn close(&self) {
        let ctx = self
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ctx;
        if ctx == 0 || driver::set_context(ctx as Handle).is_err() {
            return;
        }
        let (launches, blocks) = (self.launches.load(SeqCst), self.blocks.load(SeqCst));
        self.record(std::ptr::null_mut(), launches, blocks, false);
    }

    /// Takes the complete events, oldest first, up to the first one not yet complete.
    fn poll(&self) {
        let Some(api) = driver::events() else { return };
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if self.captures.load(SeqCst) > 0 {
            return;
        }
        let mut current = 0;
        while let Some(front) = events.in_flight.front() {
            if front.ctx != current {
                if driver::set_context(front.ctx as Handle).is_err() {
                    // Its context is gone, and its events with it.
                    events.in_flight.pop_front();
                    continue;
                }
                current = front.ctx;
            }
            let rc = api.query(front.event as Handle);
            if rc == ffi::CUDA_ERROR_NOT_READY {
                break;
            }
            let Some(done) = events.in_flight.pop_front() else {
                break;
            };
            if rc == ffi::CUDA_SUCCESS {
                self.completed.fetch_max(done.launches, SeqCst);
                self.completed_blocks.fetch_max(done.blocks, SeqCst);
                events.free.push((done.ctx, done.event));
            } else {
                // A destroyed context's event, or one the driver lost: let it go.
                api.destroy(done.event as Handle);
            }
        }
    }

    fn counts(&self) -> Counts {
        Counts {
            launches: self.launches.load(SeqCst),
            blocks: self.blocks.load(SeqCst),
            other_work: self.other_work.load(SeqCst),
            completed: self.completed.load(SeqCst),
            completed_blocks: self.completed_blocks.load(SeqCst),
            sync_wait_ns: self.sync_wait_ns.load(SeqCst),
        }
    }
}

/// The meter's counts at one moment.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Counts {
    launches: u64,
    blocks: u64,
    other_work: u64,
    completed: u64,
    completed_blocks: u64,
    sync_wait_ns: u64,
}

/// The reporter's memory between windows.
struct Window {
    /// The counts at the last window's end.
    seen: Counts,
    start_ns: u64,
    /// Whether the last report said idle (a process is idle until its first work): an
    /// idle process sends nothing until it works again.
    idle_said: bool,
}

impl Window {
    fn new(start_ns: u64) -> Self {
        Window {
            seen: Counts::default(),
            start_ns,
            idle_said: true,
        }
    }

    /// The report of the window ending at `end_ns` with counts `now`; `None` when the
    /// process stayed idle.
    fn next(&mut self, now: Counts, end_ns: u64) -> Option<Progress> {
        let quiet = now.launches == self.seen.launches && now.other_work == self.seen.other_work;
        let idle = quiet && now.completed >= now.launches;
        let touched = touch::take_touched();
        if idle && self.idle_said && now == self.seen && touched.is_empty() {
            // The next window still starts at the last report, as the protocol says.
            return None;
        }
        let progress = Progress {
            window_ns: end_ns.saturating_sub(self.start_ns),
            launches: now.launches - self.seen.launches,
            blocks: now.blocks - self.seen.blocks,
            completed: now.completed - self.seen.completed,
            completed_blocks: now.completed_blocks - self.seen.completed_blocks,
            sync_wait_ns: now.sync_wait_ns - self.seen.sync_wait_ns,
            idle,
            touched,
        };
        self.seen = now;
        self.start_ns = end_ns;
        self.idle_said = idle;
        Some(progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_reports_differences_and_an_idle_process_falls_silent() {
        let mut w = Window::new(0);
        // Nothing done yet: silent.
        assert_eq!(w.next(Counts::default(), 100), None);
        let busy = Counts {
            launches: 10,
            blocks: 2560,
            completed: 4,
            completed_blocks: 1024,
            ..Counts::default()
        };
        let p = w.next(busy, 200).unwrap();
        assert_eq!(
            (p.window_ns, p.launches, p.blocks, p.completed),
            (200, 10, 2560, 4)
        );
        assert!(!p.idle);
        // Quiet, but 6 launches not known complete: not idle.
        let p = w.next(busy, 300).unwrap();
        assert_eq!((p.launches, p.completed, p.idle), (0, 0, false));
        let caught_up = Counts {
            completed: 10,
            completed_blocks: 2560,
            sync_wait_ns: 5,
            ..busy
        };
        let p = w.next(caught_up, 400).unwrap();
        assert_eq!(
            (p.completed, p.completed_blocks, p.sync_wait_ns),
            (6, 1536, 5)
        );
        assert!(p.idle);
        // Said idle once, then nothing until work starts again.
        assert_eq!(w.next(caught_up, 500), None);
        let copying = Counts {
            other_work: 1,
            ..caught_up
        };
        let p = w.next(copying, 600).unwrap();
        assert_eq!((p.window_ns, p.launches, p.idle), (200, 0, false));
    }
}
