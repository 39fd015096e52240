//! The host link as a fluid model: concurrent flows (DMA copies, kernels' remote
//! accesses) share each direction's bandwidth max-min fairly in proportion to their
//! weights, each flow limited by its own cap. Rates are recomputed whenever a flow starts
//! or ends.
//!
//! A flow's weight is what its source keeps pending on the link (requests times bytes
//! per request, [`crate::timing::kernel_pending_bytes`] and
//! [`crate::timing::dma_pending_bytes`]): requests are served in arrival order, so a
//! source's share of the bytes in flight, and so of the bandwidth, follows its share of
//! the pending requests' bytes. A kernel's many pending cache-line requests therefore
//! crowd out one copy engine's stream, as the dissertation measured (single chunk copies
//! up to 10x slower under remote traffic).
//!
//! The link never schedules anything itself: the engine asks [`Link::next_completion_ns`]
//! after every change, calls [`Link::advance`] when that time comes and takes the
//! finished flows from [`Link::pop_finished`].

use std::collections::VecDeque;

/// Identifies a flow on the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u64);

/// A link direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Host memory to GPU (H2D copies, remote reads).
    ToDevice,
    /// GPU to host memory (D2H copies, remote writes).
    ToHost,
}

#[derive(Clone, Copy, Debug)]
struct Flow {
    remaining_bytes: f64,
    cap_bytes_per_ns: f64,
    /// Its share of the bandwidth relative to the other flows (bytes it keeps pending).
    weight: f64,
    rate_bytes_per_ns: f64,
}

impl Flow {
    /// Bytes it moves in `elapsed_ns` at its current rate.
    fn bytes_in(&self, elapsed_ns: f64) -> f64 {
        (self.rate_bytes_per_ns * elapsed_ns).min(self.remaining_bytes)
    }

    /// Time until it ends at its current rate; `None` while it does not move.
    fn left_ns(&self) -> Option<f64> {
        (self.rate_bytes_per_ns > 0.0).then(|| self.remaining_bytes / self.rate_bytes_per_ns)
    }
}

/// The earlier of two times left, either of them possibly absent.
fn earlier(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One direction's flows and when the first of them ends. A direction's rates depend on
/// its own flows only, so resharing one never walks the other's.
#[derive(Clone, Debug, Default)]
struct Lane {
    /// In id order; tens at a time with many tenants, so a vector beats a map.
    flows: Vec<(FlowId, Flow)>,
    /// The least [`Flow::left_ns`] at the link's current time, kept by every move and
    /// reshare (which walk the flows anyway) so that the engine's query after each
    /// change costs no walk of its own.
    next_left_ns: Option<f64>,
}

/// The link's byte counters at one moment; two of them give the utilization between
/// them ([`Link::utilization`]). The default is the start of a run: time 0, no bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkSample {
    at_ns: u64,
    /// Per direction, indexed by `Direction as usize`.
    bytes_moved: [f64; 2],
}

impl LinkSample {
    /// When it was taken.
    pub fn at_ns(&self) -> u64 {
        self.at_ns
    }
}

/// The shared link.
#[derive(Clone, Debug)]
pub struct Link {
    /// Bandwidth per direction, indexed by `Direction as usize`.
    capacity_bytes_per_ns: [f64; 2],
    /// Indexed by `Direction as usize`.
    lanes: [Lane; 2],
    /// Scratch for [`Link::reshare`]: one direction's capped flows as (cap per unit of
    /// weight, index in its lane), by cap; the key is computed once a flow, not once a
    /// comparison.
    /// Kept between calls so that resharing never allocates (it runs on every start and
    /// completion, a large part of a simulation's time).
    by_cap: Vec<(f64, usize)>,
    /// Finished flows not yet handed out, in the order they finished. The first
    /// `reportable` are what the last [`Link::advance`] found; the rest a [`Link::start`]
    /// found after it. Dropping those lost their completions when a flow ended in the
    /// nanosecond another began.
    finished: VecDeque<FlowId>,
    reportable: usize,
    /// A flow of (nearly) no bytes started since the last move: it is finished at the
    /// next move, even one that moves no time forward.
    empty_started: bool,
    now_ns: u64,
    next_id: u64,
    bytes_moved: [f64; 2],
}

/// Bytes below which a flow counts as finished: float rounding must never leave a flow
/// that needs less than a nanosecond of transfer.
const DONE_EPSILON_BYTES: f64 = 1e-3;

impl Link {
    /// A link with the given bandwidth per direction (bytes per second).
    pub fn new(to_device_bytes_per_s: f64, to_host_bytes_per_s: f64) -> Self {
        Self {
            capacity_bytes_per_ns: [to_device_bytes_per_s / 1e9, to_host_bytes_per_s / 1e9],
            lanes: Default::default(),
            by_cap: Vec::new(),
            finished: VecDeque::new(),
            reportable: 0,
            empty_started: false,
            now_ns: 0,
            next_id: 0,
            bytes_moved: [0.0; 2],
        }
    }

    /// Starts a flow of `bytes` at `now_ns` that shares the direction's bandwidth with the
    /// others in proportion to `weight` (positive), at most `cap_bytes_per_s` fast (`None`:
    /// only its share limits it).
    /// Flows that finish by `now_ns` are kept for the next [`Link::advance`], so calling
    /// it up to `now_ns` first is not required.
    pub fn start(
        &mut self,
        now_ns: u64,
        direction: Direction,
        bytes: f64,
        cap_bytes_per_s: Option<f64>,
        weight: f64,
    ) -> FlowId {
        debug_assert!(
            weight > 0.0 && weight.is_finite(),
            "a flow's weight is positive and finite"
        );
        let cap_bytes_per_ns = cap_bytes_per_s.map_or(f64::INFINITY, |c| c / 1e9);
        // `reshare` puts the uncapped flows last by their infinite key: a capped one must
        // not have one too.
        debug_assert!(
            cap_bytes_per_ns == f64::INFINITY || (cap_bytes_per_ns / weight).is_finite(),
            "a capped flow's cap per unit of weight is finite"
        );
        debug_assert!(now_ns >= self.now_ns, "time went backwards on the link");
        self.move_to(now_ns);
        let id = FlowId(self.next_id);
        self.next_id += 1;
        self.empty_started |= bytes <= DONE_EPSILON_BYTES;
        self.lanes[direction as usize].flows.push((
            id,
            Flow {
                remaining_bytes: bytes.max(0.0),
                cap_bytes_per_ns,
                weight,
                rate_bytes_per_ns: 0.0,
            },
        ));
        self.reshare(direction as usize);
        id
    }

    /// Moves time forward to `now_ns`; the flows finished by then and not yet handed out
    /// are [`Link::pop_finished`]'s to give: first those a [`Link::start`] found
    /// finished, then the others in id order.
    pub fn advance(&mut self, now_ns: u64) {
        self.move_to(now_ns);
        self.reportable = self.finished.len();
    }

    /// The next finished flow the last [`Link::advance`] found. A flow that a start
    /// finishes meanwhile waits for the next advance: [`Link::next_completion_ns`] says
    /// it is due, so its owner hears of it through the same path as every completion.
    pub fn pop_finished(&mut self) -> Option<FlowId> {
        if self.reportable == 0 {
            return None;
        }
        self.reportable -= 1;
        self.finished.pop_front()
    }

    /// When the next flow finishes at the current rates (rounded up to whole ns); now
    /// when a flow finished since the last [`Link::advance`].
    pub fn next_completion_ns(&self) -> Option<u64> {
        if self.finished.len() > self.reportable {
            return Some(self.now_ns);
        }
        self.next_flow_end_ns()
    }

    /// When the next flow in progress ends at the current rates.
    fn next_flow_end_ns(&self) -> Option<u64> {
        // `ceil_ns` and the addition never decrease, so the earliest end is that of the
        // least time left: one conversion a call instead of one a flow.
        earlier(self.lanes[0].next_left_ns, self.lanes[1].next_left_ns)
            // Saturating: a flow too slow to end within u64 nanoseconds ends never.
            .map(|left_ns| self.now_ns.saturating_add(ceil_ns(left_ns)))
    }

    /// The byte counters at `at_ns`, which must lie between the last start or advance
    /// and the next flow's end: the flows move at their current rates until then, so
    /// the sample needs no [`Link::advance`] and changes nothing (a report may take one
    /// at any event). The engine advances the link at every completion, so its current
    /// time always qualifies.
    pub fn sample(&self, at_ns: u64) -> LinkSample {
        debug_assert!(at_ns >= self.now_ns, "sample before the link's time");
        debug_assert!(
            self.next_flow_end_ns().is_none_or(|end| at_ns <= end),
            "sample past a flow's end: the rates change there"
        );
        let elapsed_ns = at_ns.saturating_sub(self.now_ns) as f64;
        let mut bytes_moved = self.bytes_moved;
        for (moved, lane) in bytes_moved.iter_mut().zip(&self.lanes) {
            for (_, flow) in &lane.flows {
                *moved += flow.bytes_in(elapsed_ns);
            }
        }
        LinkSample { at_ns, bytes_moved }
    }

    /// How busy `direction` was from `from` to `to`: the bytes it moved divided by what
    /// its bandwidth could have moved in that time (0 idle, 1 saturated). `None` when
    /// no time passed between the samples or `to` comes before `from`.
    pub fn utilization(
        &self,
        direction: Direction,
        from: LinkSample,
        to: LinkSample,
    ) -> Option<f64> {
        let elapsed_ns = to.at_ns.checked_sub(from.at_ns).filter(|&ns| ns > 0)? as f64;
        let d = direction as usize;
        let moved = to.bytes_moved[d] - from.bytes_moved[d];
        Some(moved / (self.capacity_bytes_per_ns[d] * elapsed_ns))
    }

    /// Flows in progress.
    pub fn active_flows(&self) -> usize {
        self.lanes.iter().map(|lane| lane.flows.len()).sum()
    }

    /// Bytes moved so far per direction: (to device, to host).
    pub fn bytes_moved(&self) -> (f64, f64) {
        (self.bytes_moved[0], self.bytes_moved[1])
    }

    /// The current rate of a flow, in bytes per second.
    pub fn rate_bytes_per_s(&self, id: FlowId) -> Option<f64> {
        self.lanes
            .iter()
            .flat_map(|lane| &lane.flows)
            .find(|(i, _)| *i == id)
            .map(|(_, f)| f.rate_bytes_per_ns * 1e9)
    }

    /// Moves the flows at their rates up to `now_ns` and queues those that finish.
    fn move_to(&mut self, now_ns: u64) {
        // No time passed: nothing moved and nothing finished, unless a flow started
        // empty since the last move.
        if now_ns <= self.now_ns && !self.empty_started {
            return;
        }
        self.empty_started = false;
        let elapsed_ns = now_ns.saturating_sub(self.now_ns) as f64;
        self.now_ns = self.now_ns.max(now_ns);
        let first_finished = self.finished.len();
        for d in 0..2 {
            let lane = &mut self.lanes[d];
            // In place, keeping id order: removing each finished flow shifted the rest.
            let mut kept = 0;
            let mut next_left_ns = None;
            for i in 0..lane.flows.len() {
                let (id, mut flow) = lane.flows[i];
                let moved = flow.bytes_in(elapsed_ns);
                flow.remaining_bytes -= moved;
                self.bytes_moved[d] += moved;
                if flow.remaining_bytes <= DONE_EPSILON_BYTES {
                    self.finished.push_back(id);
                } else {
                    lane.flows[kept] = (id, flow);
                    kept += 1;
                    next_left_ns = earlier(next_left_ns, flow.left_ns());
                }
            }
            if kept < lane.flows.len() {
                lane.flows.truncate(kept);
                self.reshare(d);
            } else {
                lane.next_left_ns = next_left_ns;
            }
        }
        // Handed out in id order across both directions.
        if self.finished.len() > first_finished + 1 {
            self.finished.make_contiguous()[first_finished..].sort_unstable();
        }
    }

    /// Max-min fair shares with per-flow caps (water filling) in the direction indexed
    /// `d`.
    fn reshare(&mut self, d: usize) {
        let capacity = self.capacity_bytes_per_ns[d];
        let lane = &mut self.lanes[d];
        let flows = &mut lane.flows;
        // One flow in the direction, the usual case: it gets the whole capacity up to its
        // cap, which is what the water filling below gives for one flow.
        if let [(_, only)] = flows.as_mut_slice() {
            only.rate_bytes_per_ns = only.cap_bytes_per_ns.min(capacity);
            lane.next_left_ns = only.left_ns();
            return;
        }
        // Smallest caps per unit of weight first: they take less than their weighted
        // share and leave the rest. Equal keys keep id order (the index breaks ties), so
        // the shares, and the float rounding of what is left, never depend on the sort.
        // Uncapped flows have the largest key, infinity, so they come last in id order
        // without a key or a place in the sort (most flows, a kernel's, are uncapped).
        // One predicate and its negation, so that every flow is filled exactly once.
        let uncapped = |f: &Flow| f.cap_bytes_per_ns == f64::INFINITY;
        self.by_cap.clear();
        self.by_cap.extend(
            flows
                .iter()
                .enumerate()
                .filter(|(_, (_, f))| !uncapped(f))
                .map(|(i, (_, f))| (f.cap_bytes_per_ns / f.weight, i)),
        );
        self.by_cap
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut left = capacity;
        let mut weight_left: f64 = (self.by_cap.iter().map(|&(_, i)| flows[i].1.weight))
            .chain(
                flows
                    .iter()
                    .filter(|(_, f)| uncapped(f))
                    .map(|(_, f)| f.weight),
            )
            .sum();
        let mut next_left_ns = None;
        let mut fill = |flow: &mut Flow| {
            let share = left * flow.weight / weight_left;
            flow.rate_bytes_per_ns = flow.cap_bytes_per_ns.min(share);
            left -= flow.rate_bytes_per_ns;
            weight_left -= flow.weight;
            next_left_ns = earlier(next_left_ns, flow.left_ns());
        };
        for &(_, at) in &self.by_cap {
            fill(&mut flows[at].1);
        }
        for (_, flow) in flows.iter_mut().filter(|(_, f)| uncapped(f)) {
            fill(flow);
        }
        lane.next_left_ns = next_left_ns;
    }
}

/// `x.ceil().max(1.0) as u64` for a non-negative `x`, without the software `ceil` the
/// baseline x86-64 target calls (a measurable share of every link change).
fn ceil_ns(x: f64) -> u64 {
    let whole = x as u64;
    let up = if (whole as f64) < x {
        whole.saturating_add(1)
    } else {
        whole
    };
    up.max(1)
}

/// Effective bandwidth of one DMA transfer of `bytes` under the research simulator's
/// arctan transfer-size curve: `peak * (2/pi) * atan(k * bytes / 1 KiB)`.
pub fn size_curve_bytes_per_s(peak_bytes_per_s: f64, k_per_kib: f64, bytes: u64) -> f64 {
    peak_bytes_per_s * std::f64::consts::FRAC_2_PI * (k_per_kib * bytes as f64 / 1024.0).atan()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Advances to `now_ns` and hands out what finished, as the engine does.
    fn advance(link: &mut Link, now_ns: u64) -> Vec<FlowId> {
        link.advance(now_ns);
        std::iter::from_fn(|| link.pop_finished()).collect()
    }

    fn finish_all(link: &mut Link) -> Vec<(FlowId, u64)> {
        let mut finished = Vec::new();
        while let Some(t) = link.next_completion_ns() {
            for id in advance(link, t) {
                finished.push((id, t));
            }
        }
        finished
    }

    #[test]
    fn single_flow_runs_at_full_bandwidth() {
        let mut link = Link::new(1e9, 1e9); // 1 byte per ns
        link.start(0, Direction::ToDevice, 1000.0, None, 1.0);
        assert_eq!(finish_all(&mut link), vec![(FlowId(0), 1000)]);
    }

    #[test]
    fn two_flows_share_then_the_survivor_speeds_up() {
        let mut link = Link::new(1e9, 1e9);
        let a = link.start(0, Direction::ToDevice, 1000.0, None, 1.0);
        let b = link.start(0, Direction::ToDevice, 3000.0, None, 1.0);
        // Both at 0.5 B/ns until a is done at 2000 ns; b has 2000 left, then 1 B/ns.
        assert_eq!(finish_all(&mut link), vec![(a, 2000), (b, 4000)]);
    }

    #[test]
    fn directions_are_independent() {
        let mut link = Link::new(1e9, 1e9);
        let a = link.start(0, Direction::ToDevice, 1000.0, None, 1.0);
        let b = link.start(0, Direction::ToHost, 1000.0, None, 1.0);
        assert_eq!(finish_all(&mut link), vec![(a, 1000), (b, 1000)]);
    }

    #[test]
    fn capped_flow_leaves_bandwidth_to_others() {
        let mut link = Link::new(1e9, 1e9);
        let slow = link.start(0, Direction::ToDevice, 250.0, Some(0.25e9), 1.0);
        let fast = link.start(0, Direction::ToDevice, 750.0, None, 1.0);
        assert_eq!(link.rate_bytes_per_s(fast), Some(0.75e9));
        assert_eq!(finish_all(&mut link), vec![(slow, 1000), (fast, 1000)]);
    }

    #[test]
    fn flows_share_in_proportion_to_their_weights() {
        let mut link = Link::new(1e9, 1e9);
        // A copy engine's stream against a kernel keeping 15x its pending bytes.
        let copy = link.start(0, Direction::ToDevice, 1000.0, None, 4096.0);
        let kernel = link.start(0, Direction::ToDevice, 1e6, None, 61440.0);
        assert_eq!(link.rate_bytes_per_s(copy), Some(1e9 / 16.0));
        assert_eq!(link.rate_bytes_per_s(kernel), Some(1e9 * 15.0 / 16.0));
        // A capped heavy flow leaves what it cannot use to the light one.
        let mut link = Link::new(1e9, 1e9);
        let light = link.start(0, Direction::ToHost, 1000.0, None, 1.0);
        let heavy = link.start(0, Direction::ToHost, 1000.0, Some(0.5e9), 9.0);
        assert_eq!(link.rate_bytes_per_s(heavy), Some(0.5e9));
        assert_eq!(link.rate_bytes_per_s(light), Some(0.5e9));
        // The other direction is untouched.
        let other = link.start(0, Direction::ToDevice, 1000.0, None, 1.0);
        assert_eq!(link.rate_bytes_per_s(other), Some(1e9));
    }

    #[test]
    fn a_flow_finishing_as_another_starts_is_still_reported() {
        let mut link = Link::new(1e9, 1e9);
        let a = link.start(0, Direction::ToDevice, 1000.0, None, 1.0);
        assert_eq!(link.next_completion_ns(), Some(1000));
        // The engine may start a flow at 1000 ns before it handles a's completion.
        let b = link.start(1000, Direction::ToDevice, 500.0, None, 1.0);
        assert_eq!(link.next_completion_ns(), Some(1000), "a is due now");
        assert_eq!(advance(&mut link, 1000), vec![a]);
        assert_eq!(link.next_completion_ns(), Some(1500));
        assert_eq!(finish_all(&mut link), vec![(b, 1500)]);
    }

    #[test]
    fn a_flow_finished_while_handing_out_waits_for_the_next_advance() {
        let mut link = Link::new(1e9, 1e9);
        let a = link.start(0, Direction::ToDevice, 1000.0, None, 1.0);
        link.advance(1000);
        assert_eq!(link.pop_finished(), Some(a));
        // Handling a's completion starts an empty flow and then another: the second
        // start finds the empty one finished.
        let empty = link.start(1000, Direction::ToHost, 0.0, None, 1.0);
        link.start(1000, Direction::ToHost, 1000.0, None, 1.0);
        assert_eq!(link.pop_finished(), None, "not found by the last advance");
        assert_eq!(link.next_completion_ns(), Some(1000), "but due now");
        assert_eq!(advance(&mut link, 1000), vec![empty]);
    }

    #[test]
    fn utilization_is_bytes_moved_over_what_the_bandwidth_allows() {
        let mut link = Link::new(1e9, 2e9);
        let start = LinkSample::default();
        // 1000 B to the device at 1 B/ns in 0..1000 ns; 1000 B to the host capped at a
        // quarter of its 2 B/ns, in 500..2500 ns.
        link.start(0, Direction::ToDevice, 1000.0, None, 1.0);
        link.start(500, Direction::ToHost, 1000.0, Some(0.5e9), 1.0);
        // Mid-flow, without advancing: the flows count at their current rates (to the
        // host 150 B of the 1600 B that 800 ns allow).
        let mid = link.sample(800);
        assert_eq!(mid.at_ns(), 800);
        assert_eq!(link.utilization(Direction::ToDevice, start, mid), Some(1.0));
        assert_eq!(
            link.utilization(Direction::ToHost, start, mid),
            Some(150.0 / 1600.0)
        );
        finish_all(&mut link);
        let end = link.sample(4000);
        assert_eq!(
            link.utilization(Direction::ToDevice, start, end),
            Some(0.25)
        );
        assert_eq!(
            link.utilization(Direction::ToDevice, mid, end),
            Some(200.0 / 3200.0)
        );
        assert_eq!(link.utilization(Direction::ToHost, start, end), Some(0.125));
        assert_eq!(
            link.utilization(Direction::ToHost, end, end),
            None,
            "no time"
        );
        assert_eq!(
            link.utilization(Direction::ToHost, end, start),
            None,
            "backwards"
        );
    }

    #[test]
    fn size_curve_matches_the_calibration_points() {
        // calibration.md: about 2.2 GB/s at 4 KB, 10.4 GB/s at 64 KB, 12 GB/s at the top.
        let bw = |kib: u64| size_curve_bytes_per_s(12e9, 0.07292, kib * 1024) / 1e9;
        assert!((bw(4) - 2.2).abs() < 0.1, "{}", bw(4));
        assert!((bw(64) - 10.4).abs() < 0.1, "{}", bw(64));
        assert!(bw(1 << 20) > 11.9);
    }

    proptest! {
        /// The integer ceiling is the float one, whatever the magnitude.
        #[test]
        fn ceil_ns_is_ceil(x in prop_oneof![0.0f64..4.0, 0.0f64..1e12, 1e18f64..1e21]) {
            prop_assert_eq!(ceil_ns(x), x.ceil().max(1.0) as u64);
        }

        /// Every byte started is delivered, never faster than the link allows, and
        /// completion times never go backwards.
        #[test]
        fn bytes_are_conserved(flows in proptest::collection::vec((0u64..10_000, 1u64..100_000, any::<bool>()), 1..20)) {
            let mut link = Link::new(2e9, 1e9);
            let mut starts = flows.clone();
            starts.sort_by_key(|f| f.0);
            let mut now = 0;
            let mut last_finish = 0;
            let mut finished = 0;
            for (start, bytes, to_device) in &starts {
                while let Some(t) = link.next_completion_ns().filter(|t| t <= start) {
                    prop_assert!(t >= last_finish);
                    last_finish = t;
                    finished += advance(&mut link, t).len();
                }
                now = now.max(*start);
                let dir = if *to_device { Direction::ToDevice } else { Direction::ToHost };
                link.start(now, dir, *bytes as f64, None, 1.0);
            }
            for (_, t) in finish_all(&mut link) {
                prop_assert!(t >= last_finish);
                last_finish = t;
                finished += 1;
            }
            prop_assert_eq!(finished, starts.len());
            let (to_device, to_host) = link.bytes_moved();
            let want_device: u64 = starts.iter().filter(|f| f.2).map(|f| f.1).sum();
            let want_host: u64 = starts.iter().filter(|f| !f.2).map(|f| f.1).sum();
            prop_assert!((to_device - want_device as f64).abs() < 1.0);
            prop_assert!((to_host - want_host as f64).abs() < 1.0);
            // At most the bandwidth of each direction: 2 B/ns and 1 B/ns.
            prop_assert!(last_finish as f64 + 1.0 >= want_device as f64 / 2.0);
            prop_assert!(last_finish as f64 + 1.0 >= want_host as f64);
            // So neither direction is ever more than fully used.
            let end = link.sample(last_finish);
            for dir in [Direction::ToDevice, Direction::ToHost] {
                let used = link.utilization(dir, LinkSample::default(), end);
                prop_assert!(used.is_none_or(|u| u <= 1.0 + 1e-9), "{dir:?}: {used:?}");
            }
        }
    }
}
