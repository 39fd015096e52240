//! `dymgpu-util`: DymGPU's utilization-based placement (`../shared/spec/dymgpu.md`):
//! busiest first, packed left to right while they fit with room to spare; all the rest
//! right-aligned, sharing the right end. Re-placed every 20 s on the utilization the
//! monitor averaged (a long interval limits the cost of moving vGPUs).
//!
//! Decided here where the spec is silent: a newcomer (no utilization measured yet) takes
//! the first free run if there is one, else it is right-aligned like the least busy; the
//! periodic re-placement is skipped while no slot is shared (it could only cost copies).

use super::slots::{Demand, PlaceError, Placement, Space, check_demands, order_by, pack};

/// The re-placement period: DymGPU's 20 s.
pub(super) const PERIOD_NS: u64 = 20_000_000_000;

/// Utilization-based placement.
#[derive(Debug)]
pub(super) struct DymgpuUtil;

impl Placement for DymgpuUtil {
    fn place(&mut self, total: u32, demands: &[Demand]) -> Result<Vec<u32>, PlaceError> {
        check_demands(total, demands)?;
        let order = order_by(demands, |d| d.utilization);
        let (positions, _, _) = pack(total, demands, &order);
        Ok(positions
            .iter()
            .zip(demands)
            .map(|(p, d)| p.unwrap_or(total - d.slots))
            .collect())
    }

    fn arrive(&mut self, space: Space<'_>, new: Demand) -> Result<Vec<u32>, PlaceError> {
        let at = space
            .first_free_run(new)?
            .unwrap_or(space.total - new.slots);
        Ok(space.with_newcomer(at))
    }

    fn period_ns(&self) -> Option<u64> {
        Some(PERIOD_NS)
    }

    fn periodic(&mut self, space: Space<'_>) -> Option<Vec<u32>> {
        // Nothing shared, nothing to gain: moving would only cost copies.
        if space.shared_slots() == 0 {
            return None;
        }
        self.place(space.total, space.residents).ok()
    }
}
