//! The link's flows and who started each: kernels' remote accesses and fault migrations,
//! and copy engines' transfers share the link, and a finished flow is handed back to
//! its owner.

use gpuswap_core::LaunchId;

use crate::link::{Direction, FlowId, Link, LinkSample};

/// Who started a flow.
#[derive(Clone, Copy)]
pub(super) enum FlowOwner {
    Kernel(LaunchId),
    CopyEngine(usize),
}

/// The link and the owners of its flows in progress (a handful at a time).
pub(super) struct Flows {
    link: Link,
    owners: Vec<(FlowId, FlowOwner)>,
}

impl Flows {
    /// An idle link of these peak rates.
    pub(super) fn new(to_device_bytes_per_s: f64, to_host_bytes_per_s: f64) -> Self {
        Flows {
            link: Link::new(to_device_bytes_per_s, to_host_bytes_per_s),
            owners: Vec::new(),
        }
    }

    /// Starts a flow of `owner`'s at `at_ns`: `bytes` toward `toward`, shared by
    /// `weight` and at most `cap` fast (see [`Link::start`]).
    #[inline]
    pub(super) fn start(
        &mut self,
        owner: FlowOwner,
        at_ns: u64,
        (toward, bytes): (Direction, f64),
        cap: Option<f64>,
        weight: f64,
    ) {
        let id = self.link.start(at_ns, toward, bytes, cap, weight);
        self.owners.push((id, owner));
    }

    /// When the next flow finishes (see [`Link::next_completion_ns`]).
    #[inline]
    pub(super) fn next_completion_ns(&self) -> Option<u64> {
        self.link.next_completion_ns()
    }

    /// Moves the link's time to `now_ns`; the flows finished by then are
    /// [`Flows::pop_finished`]'s to give.
    #[inline]
    pub(super) fn advance(&mut self, now_ns: u64) {
        self.link.advance(now_ns);
    }

    /// The owner of the next finished flow the last advance found.
    #[inline]
    pub(super) fn pop_finished(&mut self) -> Option<FlowOwner> {
        let id = self.link.pop_finished()?;
        let at = self
            .owners
            .iter()
            .position(|(f, _)| *f == id)
            .expect("every flow has an owner");
        Some(self.owners.remove(at).1)
    }

    /// The link's busy share each way, (to the device, to the host), from the start to
    /// `now_ns`.
    pub(super) fn utilization(&self, now_ns: u64) -> (f64, f64) {
        let end = self.link.sample(now_ns);
        let busy = |direction| {
            let start = LinkSample::default();
            self.link.utilization(direction, start, end).unwrap_or(0.0)
        };
        (busy(Direction::ToDevice), busy(Direction::ToHost))
    }
}
