//! What lets a process outlive its daemon without holding memory the next daemon does
//! not know of: the connection's state as the hooks read it (connected, or lost and
//! why), the pace of reconnection after a loss, the declaration of the buffers the
//! process holds (cut into frames), and the device's real free memory, which the
//! daemon bounds its budget by.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::{Duration, Instant};

use gpuswap_wire::{self as wire, ClientMsg, DaemonMsg, HeldBuffer};

use super::{Client, Joined, join, lock};
use crate::batch::Memory;
use crate::diag;
use crate::ffi::{CUDA_SUCCESS, CuResult, Handle, driver, real};

/// Why the daemon is lost, while it is: set at each loss, cleared at each reconnection.
/// Every launch asks, so a read takes no lock: the reason is a leaked string, one per
/// loss (a process loses its daemon a few times at most).
pub(crate) struct Lost(AtomicPtr<String>);

impl Lost {
    pub const fn new() -> Self {
        Self(AtomicPtr::new(null_mut()))
    }

    /// Why the daemon is lost, if it is.
    pub fn get(&self) -> Option<&'static str> {
        let why = self.0.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a leaked `String`, never freed.
        (!why.is_null()).then(|| unsafe { (*why).as_str() })
    }

    /// The daemon is lost for `why`.
    pub fn set(&self, why: String) {
        self.0
            .store(Box::into_raw(Box::new(why)), Ordering::Release);
    }

    /// A daemon is connected again.
    pub fn clear(&self) {
        self.0.store(null_mut(), Ordering::Release);
    }
}

/// The pause before the first reconnection attempt after a loss; each failed attempt
/// doubles it up to [`RETRY_MAX`]. A restarted daemon is usually listening again
/// within a second.
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between two attempts.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// How long after a loss the process keeps trying: then it gives up cleanly and stays
/// unmanaged (its buffers stay where they are).
const RETRY_FOR: Duration = Duration::from_secs(60);

/// The pauses before each reconnection attempt after a loss, until [`RETRY_FOR`] has
/// passed.
pub(crate) fn retry_pauses() -> impl Iterator<Item = Duration> {
    let mut next = RETRY_FIRST;
    let mut total = Duration::ZERO;
    std::iter::from_fn(move || {
        let pause = next;
        total += pause;
        next = (next * 2).min(RETRY_MAX);
        (total <= RETRY_FOR).then_some(pause)
    })
}

/// The most placement runs and buffers one [`ClientMsg::Held`] carries: about 40 bytes
/// of JSON each, far below the frame limit.
const RUNS_PER_FRAME: usize = 8192;

/// The declaration of `buffers`, cut into messages that each fit a frame.
pub(crate) fn declarations(buffers: Vec<HeldBuffer>) -> Vec<ClientMsg> {
    let mut out = Vec::new();
    let mut frame: Vec<HeldBuffer> = Vec::new();
    let mut runs = 0;
    for b in buffers {
        let cost = b.placement.len() + 1;
        if !frame.is_empty() && runs + cost > RUNS_PER_FRAME {
            out.push(ClientMsg::Held {
                buffers: std::mem::take(&mut frame),
            });
            runs = 0;
        }
        runs += cost;
        frame.push(b);
    }
    if !frame.is_empty() {
        out.push(ClientMsg::Held { buffers: frame });
    }
    out
}

/// How often the device's free memory is reported.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(1);

/// The device's free and total memory as the real driver reports them
/// (`cuMemGetInfo`, not the interposer's view), in the calling thread's current
/// context; `None` without one.
pub(crate) fn device_memory() -> Option<ClientMsg> {
    let f = real!(c"cuMemGetInfo_v2"; fn(*mut usize, *mut usize) -> CuResult);
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both pointers are valid for a write.
    let rc = unsafe { f(&mut free, &mut total) };
    (rc == CUDA_SUCCESS).then_some(ClientMsg::DeviceMemory {
        free_bytes: free as u64,
        total_bytes: total as u64,
    })
}

impl Client {
    /// After a loss, tries to reconnect at [`retry_pauses`]; returns the new
    /// connection's reader and the messages read before it is served, or `None` once it
    /// gave up (said once).
    pub(super) fn rejoin(&'static self) -> Option<(UnixStream, VecDeque<DaemonMsg>)> {
        let mut last = String::new();
        for pause in retry_pauses() {
            std::thread::sleep(pause);
            match self.rejoin_once() {
                Ok(joined) => return Some(joined),
                Err(e) => last = e,
            }
        }
        diag::warn(&format!(
            "gave up reconnecting to the gpuswap daemon after {} s ({last}); allocations \
             stay unmanaged",
            RETRY_FOR.as_secs()
        ));
        None
    }

    /// One reconnection: a daemon is joined, the buffers the process holds are declared
    /// and take the ids it answers (those it does not adopt are never named to it), and
    /// the connection replaces the lost one. The buffers stay locked meanwhile, so that
    /// none is freed between its declaration and its new id.
    fn rejoin_once(&'static self) -> Result<(UnixStream, VecDeque<DaemonMsg>), String> {
        let Joined {
            mut stream,
            daemon_pid,
            ..
        } = join(self.granularity)?;
        let connection = self.connection() + 1;
        let mut buffers = lock(&self.buffers);
        let vas: Vec<u64> = buffers.keys().copied().collect();
        let held = buffers
            .values()
            .map(|b| HeldBuffer {
                bytes: b.bytes,
                chunk_bytes: b.chunk_bytes,
                placement: wire::runs(b.chunks.iter().map(Memory::location)),
            })
            .collect();
        let talk = |e: wire::FrameError| format!("declaring the buffers held: {e}");
        let declarations = declarations(held);
        for msg in &declarations {
            wire::write_frame(&mut stream, msg).map_err(talk)?;
        }
        let (mut ids, mut early) = (Vec::new(), VecDeque::new());
        while ids.len() < vas.len() {
            match wire::read_frame(&mut stream).map_err(talk)? {
                DaemonMsg::Adopted { buffers } => ids.extend(buffers),
                DaemonMsg::Refused { reason } => return Err(format!("refused: {reason}")),
                other => early.push_back(other),
            }
        }
        let adopted = ids.iter().flatten().count();
        for (va, id) in vas.iter().zip(ids) {
            let b = buffers.get_mut(va).expect("locked since declared");
            (b.id, b.connection) = (id.unwrap_or(0), id.map_or(0, |_| connection));
        }
        let io = |e: std::io::Error| format!("reconnecting: {e}");
        stream.set_read_timeout(None).map_err(io)?;
        let reader = stream.try_clone().map_err(io)?;
        let control = stream.try_clone().map_err(io)?;
        {
            let mut out = lock(&self.out);
            let mut old_control = lock(&self.control);
            for (fd, s) in self.fds.iter().zip([&stream, &reader, &control]) {
                fd.store(s.as_raw_fd(), Ordering::Relaxed);
            }
            *old_control = control;
            *out = stream;
            self.connection.store(connection, Ordering::SeqCst);
        }
        drop(buffers);
        self.lost.clear();
        diag::warn(&format!(
            "reconnected to the gpuswap daemon: {} buffers declared, {adopted} adopted",
            vas.len()
        ));
        self.watch(daemon_pid, connection)?;
        self.report_device(connection, false);
        Ok((reader, early))
    }

    /// Reports the device's memory, as the real driver says, on connection
    /// `connection`, at most every [`REPORT_EVERY`] (and at once on a new connection).
    /// `current`: the calling thread's context is the program's; else the first
    /// context the program allocated in is made current (nothing is said before one).
    pub(super) fn report_device(&self, connection: u64, current: bool) {
        let recent = |r: &(u64, Option<Instant>)| {
            r.0 == connection && r.1.is_some_and(|at| at.elapsed() < REPORT_EVERY)
        };
        if recent(&lock(&self.reported)) {
            return;
        }
        if !current {
            let Some(ctx) = lock(&self.contexts).first().copied() else {
                return;
            };
            if driver::set_context(ctx as Handle).is_err() {
                return;
            }
        }
        let Some(msg) = device_memory() else {
            return;
        };
        let mut reported = lock(&self.reported);
        if !recent(&reported) {
            *reported = (connection, Some(Instant::now()));
            let _ = self.send_on(connection, &msg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuswap_wire::{Location, Placement};

    #[test]
    fn reconnection_pauses_grow_and_end() {
        let pauses: Vec<Duration> = retry_pauses().collect();
        assert_eq!(pauses[0], RETRY_FIRST);
        assert_eq!(pauses[1], RETRY_FIRST * 2);
        assert!(pauses.iter().all(|p| *p <= RETRY_MAX));
        let total: Duration = pauses.iter().sum();
        assert!(
            total <= RETRY_FOR && total > RETRY_FOR - RETRY_MAX,
            "{total:?}"
        );
    }

    #[test]
    fn declarations_fit_their_frames() {
        let run = Placement {
            chunks: 1,
            location: Location::Vram,
        };
        let buffer = |runs: usize| HeldBuffer {
            bytes: runs as u64 * 2,
            chunk_bytes: 2,
            placement: vec![run; runs],
        };
        assert!(declarations(Vec::new()).is_empty());
        let many: Vec<HeldBuffer> = (0..3).map(|_| buffer(5000)).collect();
        let msgs = declarations(many);
        assert_eq!(msgs.len(), 3);
        for m in &msgs {
            let mut frame = Vec::new();
            gpuswap_wire::write_frame(&mut frame, m).unwrap();
        }
        let few: Vec<HeldBuffer> = (0..100).map(|_| buffer(3)).collect();
        assert_eq!(declarations(few).len(), 1);
    }

    #[test]
    fn the_lost_flag_is_set_and_cleared() {
        let lost = Lost::new();
        assert_eq!(lost.get(), None);
        lost.set("gone".into());
        assert_eq!(lost.get(), Some("gone"));
        lost.clear();
        assert_eq!(lost.get(), None);
    }
}
