//! Busy and idle reports for the daemon's turns (`Welcome::idle_report_ns` not zero).
//!
//! Every call that starts GPU work (a launch, copy or memset) notes the time, and the
//! first one after the process said idle (or since it connected: a tenant counts as idle
//! until its first `Busy`) sends `Busy`, before it waits at the suspension gate, so that
//! a tenant held at its gate is known to want the GPU. A timer thread sends `Idle` once
//! no work started or ended for `idle_report_ns` and no such call is in progress, nor a
//! synchronization waiting for the GPU: a launch that blocks (the stand-in runs its
//! kernels in the call; a real driver's launch queue fills) or a wait for a long kernel
//! (one slowed by remote memory) is work, and a tenant in it must not lose its turn or
//! its memory as idle. The launch path costs three clock reads (vDSO) and four atomic
//! operations; the connection's lock is taken only to change the state.
//!
//! The state changes under the connection's lock, where the message is written, so the
//! daemon reads them in the order they happened. A start racing the timer's decision is
//! seen by one of the two (each writes its own atomic before reading the other's): the
//! timer takes its `Idle` back, or the start sends `Busy` after it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use gpuswap_wire::ClientMsg;

/// Where the reports go: the daemon's connection.
pub(crate) trait Outbox: Sync {
    /// Sends what `decide` says, deciding under the connection's lock.
    fn send_if(&self, decide: &mut dyn FnMut() -> Option<ClientMsg>) -> Result<(), String>;

    /// Whether the daemon is gone (then nothing more is said).
    fn is_lost(&self) -> bool;
}

/// What the process said last and when its work last started.
pub(crate) struct Demand {
    idle_after_ns: u64,
    /// Monotonic nanoseconds of the latest start or end of GPU work.
    last_work_ns: AtomicU64,
    /// Calls in progress that count as work: those that start GPU work, from before
    /// their gate until they return, and synchronizations while they wait.
    in_calls: AtomicU32,
    /// Whether the daemon was last told `Busy`.
    busy: AtomicBool,
    /// The timer thread, woken when the process becomes busy.
    timer: OnceLock<std::thread::Thread>,
}

/// A call in progress that counts as work ([`Demand::before_gate`], [`Demand::waits`]):
/// when it goes, the call returned, and the quiet time starts.
pub(crate) struct InCall<'a>(&'a Demand);

impl Drop for InCall<'_> {
    fn drop(&mut self) {
        self.0.last_work_ns.store(now_ns(), SeqCst);
        self.0.in_calls.fetch_sub(1, SeqCst);
    }
}

/// CLOCK_MONOTONIC in nanoseconds (a vDSO call, no system call).
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for a write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Demand {
    pub fn new(idle_after_ns: u64) -> Self {
        Self {
            idle_after_ns,
            last_work_ns: AtomicU64::new(now_ns()),
            in_calls: AtomicU32::new(0),
            busy: AtomicBool::new(false),
            timer: OnceLock::new(),
        }
    }

    /// Starts the thread that says `Idle`.
    pub fn start_timer(&'static self, client: &'static dyn Outbox) -> Result<(), String> {
        let thread = std::thread::Builder::new()
            .name("gpuswap-idle".into())
            .spawn(move || self.watch(client))
            .map_err(|e| format!("cannot start the interposer's idle timer: {e}"))?;
        let _ = self.timer.set(thread.thread().clone());
        Ok(())
    }

    /// A call is about to start GPU work: noted, and `Busy` said if the process was idle.
    /// It counts as work until the returned guard goes, when the call returns.
    pub fn before_gate(&self, client: &dyn Outbox) -> InCall<'_> {
        let call = self.waits();
        if self.busy.load(SeqCst) {
            return call;
        }
        // A lost daemon hears nothing more; the reader thread says so.
        let _ = client.send_if(&mut || (!self.busy.swap(true, SeqCst)).then_some(ClientMsg::Busy));
        if let Some(timer) = self.timer.get() {
            timer.unpark();
        }
        call
    }

    /// The call passed the gate: its work starts now.
    pub fn after_gate(&self) {
        self.last_work_ns.store(now_ns(), SeqCst);
    }

    /// A synchronization waits for the GPU: work until the returned guard goes. It
    /// starts none, so an idle process stays idle.
    pub fn waits(&self) -> InCall<'_> {
        self.in_calls.fetch_add(1, SeqCst);
        self.last_work_ns.store(now_ns(), SeqCst);
        InCall(self)
    }

    /// How long until the process may be said idle; `None`: now.
    fn busy_for(&self, now_ns: u64) -> Option<u64> {
        if self.in_calls.load(SeqCst) > 0 {
            return Some(self.idle_after_ns);
        }
        let quiet_ns = now_ns.saturating_sub(self.last_work_ns.load(SeqCst));
        (quiet_ns < self.idle_after_ns).then(|| self.idle_after_ns - quiet_ns)
    }

    /// The timer thread: says `Idle` when the process has been quiet long enough, until
    /// the daemon is lost.
    fn watch(&self, client: &dyn Outbox) {
        while !client.is_lost() {
            if !self.busy.load(SeqCst) {
                std::thread::park();
                continue;
            }
            if let Some(wait_ns) = self.busy_for(now_ns()) {
                // At least a millisecond: a tiny `idle_report_ns` must not spin.
                std::thread::park_timeout(Duration::from_nanos(wait_ns.max(1_000_000)));
                continue;
            }
            let _ = client.send_if(&mut || self.say_idle());
        }
    }

    /// Under the connection's lock: `Idle` if still quiet, else the state stays busy.
    fn say_idle(&self) -> Option<ClientMsg> {
        let seen_ns = self.last_work_ns.load(SeqCst);
        if !self.busy.swap(false, SeqCst) {
            return None;
        }
        // A start since the decision either sees `busy` false (and says `Busy` after
        // this) or is seen here (and the process stays busy).
        let started =
            self.last_work_ns.load(SeqCst) != seen_ns || self.busy_for(now_ns()).is_some();
        if started {
            self.busy.store(true, SeqCst);
            return None;
        }
        Some(ClientMsg::Idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_quiet_only_after_the_delay_and_never_while_a_call_waits_at_the_gate() {
        let d = Demand::new(1_000_000);
        let start = d.last_work_ns.load(SeqCst);
        assert_eq!(d.busy_for(start + 400_000), Some(600_000));
        assert_eq!(d.busy_for(start + 1_000_000), None);
        d.in_calls.fetch_add(1, SeqCst);
        assert_eq!(d.busy_for(start + 5_000_000), Some(1_000_000));
    }

    #[test]
    fn idle_is_said_once_and_taken_back_when_work_started_meanwhile() {
        let d = Demand::new(1);
        // Never busy: nothing to say.
        assert_eq!(d.say_idle(), None);
        d.busy.store(true, SeqCst);
        d.last_work_ns.store(0, SeqCst);
        assert_eq!(d.say_idle(), Some(ClientMsg::Idle));
        assert!(!d.busy.load(SeqCst));
        assert_eq!(d.say_idle(), None);
        // Busy again, with a call at the gate: the timer's decision is taken back.
        d.busy.store(true, SeqCst);
        d.in_calls.fetch_add(1, SeqCst);
        assert_eq!(d.say_idle(), None);
        assert!(d.busy.load(SeqCst));
    }

    #[test]
    fn a_call_that_runs_long_or_a_wait_for_the_gpu_is_work_until_it_returns() {
        let d = Demand::new(1_000_000);
        let call = d.waits();
        let entered = d.last_work_ns.load(SeqCst);
        // A kernel run in the call (the stand-in's) or waited for, past the delay.
        assert_eq!(d.busy_for(entered + 5_000_000), Some(1_000_000));
        drop(call);
        // Quiet from the call's return, not from its start.
        let returned = d.last_work_ns.load(SeqCst);
        assert!(returned >= entered);
        assert_eq!(d.busy_for(returned + 400_000), Some(600_000));
        assert_eq!(d.busy_for(returned + 1_000_000), None);
    }
}
