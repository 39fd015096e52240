use super::*;
use proptest::prelude::*;

const MIB: u64 = 1 << 20;
const PAGE: u64 = 4096;

fn config(policy: &'static str) -> SchedulingConfig {
    SchedulingConfig {
        policy,
        max_wait_ns: 1_000,
        instrumented: true,
        quota_bytes: Some(100 * MIB),
    }
}

/// What a driver does, as a property test drives it.
#[derive(Clone, Debug)]
enum Op {
    /// Tenant's next kernel, accessing this many MiB, asks to start.
    Ready(usize, u64),
    /// Tenant's running kernel ran a segment that migrated this many pages.
    Segment(usize, u64),
    /// Tenant's kernel reaches its next check (stops there if asked to) or ends.
    Check(usize, bool),
    /// Time passes.
    Wait(u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            (0usize..3, 1u64..300).prop_map(|(t, m)| Op::Ready(t, m)),
            (0usize..3, 0u64..40_000).prop_map(|(t, p)| Op::Segment(t, p)),
            (0usize..3, any::<bool>()).prop_map(|(t, end)| Op::Check(t, end)),
            (1u64..2_000).prop_map(Op::Wait),
        ],
        1..80,
    )
}

/// The driver's side: per tenant, whether a kernel is held, runs or must stop, and the
/// tenant's pages migrated in.
#[derive(Default)]
struct Driver {
    now_ns: u64,
    held: [bool; 3],
    running: [bool; 3],
    stop: [bool; 3],
    pages_in: [u64; 3],
    footprint: [u64; 3],
    /// Per tenant: when its kernel first asked to run, while it waits.
    asked_ns: [Option<u64>; 3],
}

impl Driver {
    /// Carries out decisions, checking they make sense; held kernels named start.
    fn apply(
        &mut self,
        s: &mut Scheduling,
        out: Decisions,
        check: &mut dyn FnMut(&Scheduling, usize),
    ) {
        for t in out.preempt {
            assert!(self.running[t], "preempts a kernel that does not run");
            self.stop[t] = true;
        }
        for t in out.start {
            assert!(self.held[t], "starts a kernel that is not held");
            let mut next = Decisions::default();
            let started = s.ready(
                t,
                self.footprint[t],
                self.pages_in[t],
                false,
                self.now_ns,
                &mut next,
            );
            assert!(started, "a granted kernel starts");
            check(s, t);
            self.held[t] = false;
            self.running[t] = true;
            self.asked_ns[t] = None;
            self.apply(s, next, check);
        }
    }

    fn run(&mut self, s: &mut Scheduling, op: Op, check: &mut dyn FnMut(&Scheduling, usize)) {
        let mut out = Decisions::default();
        match op {
            Op::Ready(t, mib) if !self.held[t] && !self.running[t] => {
                self.footprint[t] = mib * MIB;
                self.asked_ns[t] = Some(self.now_ns);
                if s.ready(t, mib * MIB, self.pages_in[t], false, self.now_ns, &mut out) {
                    check(s, t);
                    self.running[t] = true;
                    self.asked_ns[t] = None;
                } else {
                    self.held[t] = true;
                }
            }
            Op::Segment(t, pages) if self.running[t] => {
                self.pages_in[t] += pages;
                s.progress(t, self.pages_in[t], PAGE, self.now_ns, &mut out);
            }
            Op::Check(t, _) if self.running[t] && self.stop[t] => {
                self.running[t] = false;
                self.stop[t] = false;
                self.held[t] = true;
                self.asked_ns[t] = Some(self.now_ns);
                s.preempted(t, self.now_ns, &mut out);
                self.apply(s, std::mem::take(&mut out), check);
                // Ready again at once, unless the policy started it already: held or
                // run again.
                if self.held[t]
                    && s.ready(
                        t,
                        self.footprint[t],
                        self.pages_in[t],
                        false,
                        self.now_ns,
                        &mut out,
                    )
                {
                    check(s, t);
                    self.held[t] = false;
                    self.running[t] = true;
                    self.asked_ns[t] = None;
                }
            }
            Op::Check(t, true) if self.running[t] => {
                self.running[t] = false;
                s.finished(t, self.now_ns, &mut out);
            }
            Op::Wait(ns) => {
                self.now_ns += ns;
                if s.next_timeout().is_some_and(|at| at <= self.now_ns) {
                    s.timeout(self.now_ns, &mut out);
                }
            }
            _ => {}
        }
        self.apply(s, out, check);
    }
}

/// Footprints of the running kernels other than `t`.
fn others_footprint(s: &Scheduling, t: usize) -> (usize, u64) {
    let view = View {
        tenants: &s.tenants,
        capacity_bytes: s.capacity_bytes,
        now_ns: 0,
    };
    let others: Vec<_> = view.running().filter(|(i, _)| *i != t).collect();
    (
        others.len(),
        others.iter().map(|(_, o)| o.footprint_bytes).sum(),
    )
}

proptest! {
    /// MFit never starts a kernel whose footprint does not fit beside the running
    /// kernels' (stopping ones included), except alone; a kernel that waited its cap
    /// gets room made for it, unless everything running is a protected re-run.
    #[test]
    fn mfit_starts_only_what_fits(ops in ops()) {
        let capacity = 400 * MIB;
        let mut s = Scheduling::new(&config("mfit"), capacity);
        let mut d = Driver::default();
        let mut check = |s: &Scheduling, t: usize| {
            let (others, held) = others_footprint(s, t);
            let fits = held + s.tenants[t].footprint_bytes <= capacity;
            assert!(others == 0 || fits, "started {t} beside {held} bytes");
        };
        for op in ops {
            d.run(&mut s, op, &mut check);
            let waited_cap = (0..3).any(|t| {
                d.held[t] && d.asked_ns[t].is_some_and(|a| d.now_ns >= a + 1_000)
            });
            // Room is made (kernels asked to stop) or can be.
            let making_room = (0..3).any(|t| d.stop[t]);
            let can_make_room = !making_room
                && (0..3).any(|t| d.running[t] && !s.tenants[t].rerun);
            if waited_cap && can_make_room && s.next_timeout().is_some_and(|at| at <= d.now_ns) {
                let mut out = Decisions::default();
                s.timeout(d.now_ns, &mut out);
                prop_assert!(!out.preempt.is_empty() || !out.start.is_empty(),
                    "a kernel waited its cap and nothing was done");
                d.apply(&mut s, out, &mut check);
            }
        }
    }

    /// AMFit never leaves VRAM oversubscribed by the running kernels' active memory
    /// after it decides, unless no running kernel may be preempted: it stops one each
    /// time.
    #[test]
    fn amfit_stops_a_kernel_when_active_memory_oversubscribes(ops in ops()) {
        let capacity = 200 * MIB;
        let mut s = Scheduling::new(&config("amfit"), capacity);
        let mut d = Driver::default();
        for op in ops {
            let segment = matches!(op, Op::Segment(t, _) if d.running[t]);
            d.run(&mut s, op, &mut |_, _| {});
            if segment {
                let view = View { tenants: &s.tenants, capacity_bytes: capacity, now_ns: 0 };
                let running: Vec<_> = view
                    .running()
                    .filter(|(_, t)| t.state == KernelState::Running)
                    .collect();
                let active: u64 = running.iter().map(|(_, t)| t.active_bytes).sum();
                let preemptible = view.preemptible().count();
                prop_assert!(
                    running.len() < 2 || active <= capacity || preemptible == 0,
                    "{} kernels hold {active} active bytes of {capacity}", running.len()
                );
            }
        }
    }
}

#[test]
fn none_starts_everything_at_once() {
    let mut s = Scheduling::new(&config("none"), MIB);
    let mut out = Decisions::default();
    assert!(s.ready(0, 10 * MIB, 0, false, 0, &mut out));
    assert!(s.ready(1, 10 * MIB, 0, false, 0, &mut out));
    s.progress(0, 100_000, PAGE, 5, &mut out);
    assert_eq!(out, Decisions::default());
}

#[test]
fn mfit_holds_what_does_not_fit_then_preempts_the_largest_after_its_cap() {
    let mut s = Scheduling::new(&config("mfit"), 100 * MIB);
    let mut out = Decisions::default();
    assert!(s.ready(0, 60 * MIB, 0, false, 0, &mut out), "alone");
    assert!(s.ready(1, 30 * MIB, 0, false, 0, &mut out), "fits");
    assert!(
        !s.ready(2, 50 * MIB, 0, false, 10, &mut out),
        "does not fit"
    );
    assert_eq!(s.next_timeout(), Some(1_010));
    s.timeout(500, &mut out);
    assert_eq!(out, Decisions::default(), "waits under its cap");
    s.timeout(1_010, &mut out);
    assert_eq!(out.preempt, vec![0], "the largest footprint makes room");
    out = Decisions::default();
    // Not before the stopped kernel is gone: it still holds its VRAM.
    s.progress(1, 0, PAGE, 1_020, &mut out);
    assert!(out.start.is_empty());
    s.preempted(0, 1_030, &mut out);
    assert_eq!(out.start, vec![2]);
    assert!(s.ready(2, 50 * MIB, 0, false, 1_030, &mut Decisions::default()));
}

#[test]
fn amfit_preempts_the_most_active_and_holds_it_until_it_fits() {
    let mut s = Scheduling::new(&config("amfit"), 100 * MIB);
    let mut out = Decisions::default();
    assert!(s.ready(0, 500 * MIB, 0, false, 0, &mut out));
    assert!(
        s.ready(1, 500 * MIB, 0, false, 0, &mut out),
        "starts at once"
    );
    s.progress(0, 70 * MIB / PAGE, PAGE, 10, &mut out);
    assert!(out.preempt.is_empty(), "70 MiB active fits");
    s.progress(1, 40 * MIB / PAGE, PAGE, 20, &mut out);
    assert_eq!(
        out.preempt,
        vec![0],
        "110 MiB active: the most active stops"
    );
    out = Decisions::default();
    s.preempted(0, 30, &mut out);
    assert!(
        !s.ready(0, 500 * MIB, 70 * MIB / PAGE, false, 30, &mut out),
        "held: 40 + 70 > 100"
    );
    s.finished(1, 40, &mut out);
    assert_eq!(out.start, vec![0], "runs again once the other is done");
    assert!(s.tenant(0).rerun);
}

#[test]
fn amfit_grants_held_kernels_only_as_many_as_fit_and_never_stops_one_yet_to_start() {
    let mut s = Scheduling::new(&config("amfit"), 100 * MIB);
    let mut out = Decisions::default();
    for t in 0..3 {
        assert!(s.ready(t, 500 * MIB, 0, false, 0, &mut out));
    }
    s.progress(0, 70 * MIB / PAGE, PAGE, 10, &mut out);
    s.progress(1, 60 * MIB / PAGE, PAGE, 10, &mut out);
    assert_eq!(
        out.preempt,
        vec![0],
        "130 MiB active: the most active stops"
    );
    out = Decisions::default();
    s.preempted(0, 20, &mut out);
    s.progress(2, 50 * MIB / PAGE, PAGE, 20, &mut out);
    assert_eq!(
        out.preempt,
        vec![1],
        "110 MiB active: the most active stops"
    );
    out = Decisions::default();
    s.preempted(1, 30, &mut out);
    assert!(!s.ready(0, 500 * MIB, 70 * MIB / PAGE, false, 30, &mut out));
    assert!(!s.ready(1, 500 * MIB, 60 * MIB / PAGE, false, 30, &mut out));
    s.finished(2, 40, &mut out);
    assert_eq!(out.start, vec![0], "70 + 60 MiB do not fit together");
}

#[test]
fn a_kernel_granted_and_yet_to_start_is_not_preempted() {
    let mut s = Scheduling::new(&config("mfit"), 100 * MIB);
    let mut out = Decisions::default();
    assert!(s.ready(0, 60 * MIB, 0, false, 0, &mut out));
    assert!(
        !s.ready(1, 50 * MIB, 0, false, 10, &mut out),
        "does not fit"
    );
    s.finished(0, 20, &mut out);
    assert_eq!(out.start, vec![1]);
    // Kernel 2 waits past its cap while 1 is granted but not started.
    out = Decisions::default();
    assert!(!s.ready(2, 60 * MIB, 0, false, 20, &mut out));
    s.timeout(2_000, &mut out);
    assert_eq!(out, Decisions::default(), "nothing of 1 runs to stop");
}

#[test]
fn madvise_advises_beyond_the_quota_and_lifts_when_room_returns() {
    let mut s = Scheduling::new(&config("madvise"), 300 * MIB);
    let mut out = Decisions::default();
    assert!(s.ready(0, 500 * MIB, 0, false, 0, &mut out));
    assert!(s.ready(1, 500 * MIB, 0, false, 0, &mut out));
    s.progress(0, 120 * MIB / PAGE, PAGE, 10, &mut out);
    assert_eq!(out.advise, vec![(0, true)]);
    assert!(s.tenant(0).advised);
    out = Decisions::default();
    s.progress(1, 250 * MIB / PAGE, PAGE, 20, &mut out);
    assert_eq!(out.advise, vec![(1, true)]);
    out = Decisions::default();
    s.finished(0, 30, &mut out);
    assert!(
        out.advise.is_empty(),
        "250 MiB active + a 100 MiB quota > 300 MiB"
    );
    s.finished(1, 40, &mut out);
    assert_eq!(out.advise, vec![(0, false), (1, false)]);
}

#[test]
fn madvise_without_a_quota_throttles_the_most_active_only_when_vram_is_oversubscribed() {
    let mut s = Scheduling::new(
        &SchedulingConfig {
            quota_bytes: None,
            ..config("madvise")
        },
        300 * MIB,
    );
    let mut out = Decisions::default();
    assert!(s.ready(0, 500 * MIB, 0, false, 0, &mut out));
    assert!(s.ready(1, 500 * MIB, 0, false, 0, &mut out));
    s.progress(0, 200 * MIB / PAGE, PAGE, 10, &mut out);
    assert!(out.advise.is_empty(), "200 MiB of 300: room enough");
    s.progress(1, 150 * MIB / PAGE, PAGE, 20, &mut out);
    assert_eq!(out.advise, vec![(0, true)], "350 of 300: the most active");
    out = Decisions::default();
    s.progress(1, 160 * MIB / PAGE, PAGE, 25, &mut out);
    assert!(
        out.advise.is_empty(),
        "the advised tenant's pages do not contend: no cascade"
    );
    s.finished(0, 30, &mut out);
    assert_eq!(out.advise, vec![(0, false)], "150 MiB active leaves room");
}

#[test]
fn a_queued_kernel_continues_its_streams_active_memory() {
    let mut s = Scheduling::new(&config("amfit"), 100 * MIB);
    let mut out = Decisions::default();
    assert!(s.ready(0, MIB, 0, true, 0, &mut out));
    s.progress(0, 10, PAGE, 5, &mut out);
    s.finished(0, 10, &mut out);
    assert!(
        s.ready(0, MIB, 10, true, 10, &mut out),
        "the next sweep, queued"
    );
    s.progress(0, 20, PAGE, 15, &mut out);
    assert_eq!(s.tenant(0).active_bytes, 20 * PAGE);
    // Re-migrations of its evicted pages do not count twice.
    s.progress(0, 1_000, PAGE, 16, &mut out);
    assert_eq!(s.tenant(0).active_bytes, MIB);
    s.finished(0, 20, &mut out);
    assert!(s.ready(0, MIB, 1_000, true, 30, &mut out), "after a gap");
    s.progress(0, 1_005, PAGE, 35, &mut out);
    assert_eq!(s.tenant(0).active_bytes, 5 * PAGE);
    // Another tenant's kernel queued behind its last one starts afresh.
    assert!(s.ready(1, MIB, 0, false, 0, &mut out));
    s.progress(1, 10, PAGE, 5, &mut out);
    s.finished(1, 10, &mut out);
    assert!(s.ready(1, MIB, 10, false, 10, &mut out));
    s.progress(1, 12, PAGE, 12, &mut out);
    assert_eq!(s.tenant(1).active_bytes, 2 * PAGE);
}
