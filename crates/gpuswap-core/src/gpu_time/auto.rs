//! The automatic choice between sharing and turns (issue 40, `gpu_time = "auto"`).
//!
//! The question only arises while the demanding tenants' memory does not fit in VRAM:
//! sharing then leaves some of it remote, turns serialize the tenants. The measure is
//! the GPU's useful work: the sum of the demanding tenants' speeds (each its rate over
//! its own best, [`super::progress`]). Turns give about 1 (one tenant at its best at a
//! time, less the handovers); sharing gives the sum of what each tenant does beside the
//! others with part of its memory remote. So the choice shares while that sum stays
//! within [`SLOWDOWN_BOUND`] of 1 (a cold overflow: the tenants slow only by sharing the
//! SMs, as they would with enough VRAM), and takes turns once it falls below (a hot
//! overflow: every tenant waits on the link).
//!
//! Why the sum and not each tenant's own estimate: a tenant that shares the SMs with
//! another runs slower than at its best even with all its memory local, so each
//! estimate alone cannot tell remote memory from a busy GPU; turns slow each tenant as
//! much (it waits for the others' turns), and only the sum compares the two.
//!
//! Turns never see what sharing would do, so the choice *probes*: it shares for at most
//! [`PROBE_MAX_NS`] and keeps sharing if the sum holds. A failed probe waits
//! [`PROBE_GAP_FACTOR`] times its length (doubling after each failure, up to
//! [`MAX_BACKOFF`]) before the next: failed probes cost at most 2 % of the wall time.

use std::collections::VecDeque;

use super::settings::shares_first;

/// How far below 1 the demanding tenants' summed speed may fall while they share: the
/// sharing then does at least 1 / 1.05 of the work turns would (issue 40: "shares while
/// every busy tenant's estimate stays within 1.05").
pub const SLOWDOWN_BOUND: f64 = 1.05;

/// The longest probe of sharing: enough for a turn's job to end and two report windows
/// of 100 ms to come from every demanding tenant. A design choice.
pub const PROBE_MAX_NS: u64 = 2_000_000_000;

/// A failed probe of length L waits this many L before the next: L / (L + 49 L) = 2 %
/// of the wall time (issue 40's bound).
pub const PROBE_GAP_FACTOR: u64 = 49;

/// The most a probe's gap doubles to, after failures in a row. A design choice: a
/// workload whose phases change is probed again within minutes.
pub const MAX_BACKOFF: u64 = 16;

/// How long sharing may go on without a measured best for every demanding tenant before
/// it takes turns to measure them (a holder runs with the least remote memory it may).
/// A design choice: ten report windows.
pub const UNMEASURED_NS: u64 = 1_000_000_000;

/// The two ways of sharing the GPU's time under memory overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Everyone runs, with the overflow remote.
    Share,
    /// One tenant at a time holds the GPU with its memory local.
    Turns,
}

impl Choice {
    /// Its name, for logs and `gpuswap top`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Share => "share",
            Self::Turns => "turns",
        }
    }
}

/// A change of the automatic choice, for the driver's log.
#[derive(Clone, Debug, PartialEq)]
pub struct Switch {
    /// The new choice.
    pub to: Choice,
    /// When.
    pub at_ns: u64,
    /// Why, in words.
    pub reason: String,
}

/// What the review of one moment sees.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Review {
    pub now_ns: u64,
    /// The demanding tenants' memory does not fit in VRAM.
    pub overflow: bool,
    /// Demanding tenants.
    pub demanding: usize,
    /// The sum of their speeds, if every one has a fresh speed.
    pub summed_speed: Option<f64>,
    /// Whether every one has a measured best.
    pub measured: bool,
}

/// The automatic choice's state.
#[derive(Debug)]
pub(crate) struct Auto {
    choice: Choice,
    /// A running probe of sharing: since when.
    probe_since_ns: Option<u64>,
    /// Sharing under overflow without a measured best for everyone: since when.
    unmeasured_since_ns: Option<u64>,
    next_probe_ns: u64,
    /// A failed probe's start, until the job that brings turns back ends: its cost runs
    /// to then (a kernel that reads remote memory may take long to drain).
    restoring_since_ns: Option<u64>,
    /// The gap factor of the last failure (the backoff it took).
    restoring_backoff: u64,
    backoff: u64,
    switches: VecDeque<Switch>,
    count: u64,
}

impl Auto {
    pub(crate) fn new(share_first: bool) -> Self {
        Self {
            choice: if share_first {
                Choice::Share
            } else {
                Choice::Turns
            },
            probe_since_ns: None,
            unmeasured_since_ns: None,
            next_probe_ns: 0,
            restoring_since_ns: None,
            restoring_backoff: 1,
            backoff: 1,
            switches: VecDeque::new(),
            count: 0,
        }
    }

    pub(crate) fn choice(&self) -> Choice {
        self.choice
    }

    /// Times the choice changed.
    pub(crate) fn switches(&self) -> u64 {
        self.count
    }

    /// The next change not yet taken by the driver.
    pub(crate) fn pop_switch(&mut self) -> Option<Switch> {
        self.switches.pop_front()
    }

    /// The link's remote-read cost was measured at `remote_cost` (a remote read takes
    /// that many local reads' time): a choice that measurement has not yet moved starts
    /// again from it, as [`AutoSettings::from_remote_cost`] would have started.
    ///
    /// [`AutoSettings::from_remote_cost`]: super::AutoSettings::from_remote_cost
    pub(crate) fn measured_link(&mut self, remote_cost: f64, now_ns: u64) {
        let start = if shares_first(remote_cost) {
            Choice::Share
        } else {
            Choice::Turns
        };
        let reason = format!(
            "remote reads measured at {remote_cost:.1} times a local read: {} first",
            start.name()
        );
        if self.count > 0 {
            let kept = format!("{reason}, but the tenants' speeds already chose");
            self.note(self.choice, now_ns, kept);
        } else if start == self.choice {
            self.note(start, now_ns, reason);
        } else {
            self.switch(start, now_ns, reason);
        }
    }

    /// When the choice wants to look again, if the moment may change it.
    pub(crate) fn next_timeout(&self, overflow: bool) -> Option<u64> {
        if !overflow {
            return None;
        }
        match self.choice {
            Choice::Turns => Some(self.next_probe_ns),
            Choice::Share => self
                .probe_since_ns
                .map(|s| s.saturating_add(PROBE_MAX_NS))
                .or(self
                    .unmeasured_since_ns
                    .map(|s| s.saturating_add(UNMEASURED_NS))),
        }
    }

    /// Looks at the moment and changes the choice if it says so.
    pub(crate) fn review(&mut self, r: Review) {
        if !r.overflow || r.demanding < 2 {
            // Nothing to choose between: a probe without a verdict ends as it is.
            self.probe_since_ns = None;
            self.unmeasured_since_ns = None;
            return;
        }
        let bound = 1.0 / SLOWDOWN_BOUND;
        match self.choice {
            Choice::Turns if r.measured && r.now_ns >= self.next_probe_ns => {
                self.probe_since_ns = Some(r.now_ns);
                self.switch(Choice::Share, r.now_ns, "probing sharing".to_string());
            }
            Choice::Turns => {}
            Choice::Share => {
                match (r.summed_speed, self.probe_since_ns) {
                    (Some(sum), probe) if sum < bound => {
                        let reason = format!(
                            "sharing does {sum:.2} of one tenant's work at its best (below 1/{SLOWDOWN_BOUND})"
                        );
                        self.fail(probe, r.now_ns);
                        self.switch(Choice::Turns, r.now_ns, reason);
                    }
                    (Some(sum), Some(_)) => {
                        self.probe_since_ns = None;
                        self.backoff = 1;
                        self.note(
                        Choice::Share,
                        r.now_ns,
                        format!("probe kept sharing: it does {sum:.2} of one tenant's work at its best"),
                    );
                    }
                    (None, Some(since)) if r.now_ns >= since.saturating_add(PROBE_MAX_NS) => {
                        self.fail(Some(since), r.now_ns);
                        self.switch(
                            Choice::Turns,
                            r.now_ns,
                            "probe measured nothing in time".to_string(),
                        );
                    }
                    (_, None) if !r.measured => {
                        let since = *self.unmeasured_since_ns.get_or_insert(r.now_ns);
                        if r.now_ns >= since.saturating_add(UNMEASURED_NS) {
                            self.unmeasured_since_ns = None;
                            self.switch(
                                Choice::Turns,
                                r.now_ns,
                                "to measure each tenant at its best".to_string(),
                            );
                        }
                    }
                    _ => self.unmeasured_since_ns = None,
                }
            }
        }
    }

    /// Sharing failed (a probe, when `probe` says since when): the next probe waits, at
    /// least until [`Auto::turns_back`] says what the probe cost in all.
    fn fail(&mut self, probe: Option<u64>, now_ns: u64) {
        let since = probe.unwrap_or(now_ns.saturating_sub(PROBE_MAX_NS));
        self.restoring_since_ns = Some(since);
        self.restoring_backoff = self.backoff;
        self.turns_back(now_ns);
        if probe.is_some() {
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        }
        self.probe_since_ns = None;
    }

    /// A turn's job ended at `now_ns`: after a failed probe, the next probe waits
    /// [`PROBE_GAP_FACTOR`] times (and the backoff) all the probe took, from its start
    /// to the end of the job that brought turns back.
    pub(crate) fn turns_back(&mut self, now_ns: u64) {
        let Some(since) = self.restoring_since_ns else {
            return;
        };
        let length_ns = now_ns.saturating_sub(since).max(1);
        self.next_probe_ns = now_ns.saturating_add(
            length_ns
                .saturating_mul(PROBE_GAP_FACTOR)
                .saturating_mul(self.restoring_backoff),
        );
    }

    /// The probe's failure is over: turns run again.
    pub(crate) fn settled(&mut self) {
        self.restoring_since_ns = None;
    }

    fn switch(&mut self, to: Choice, at_ns: u64, reason: String) {
        self.choice = to;
        self.count += 1;
        self.note(to, at_ns, reason);
    }

    fn note(&mut self, to: Choice, at_ns: u64, reason: String) {
        // A driver that never reads the log keeps a bounded one.
        if self.switches.len() >= 64 {
            self.switches.pop_front();
        }
        self.switches.push_back(Switch { to, at_ns, reason });
    }
}
