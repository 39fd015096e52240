//! `dymgpu-util`: DymGPU's utilization-based placement (`../shared/spec/dymgpu.md`):
//! busiest first, packed left to right while they fit with room to spare; all the rest
//! right-aligned, sharing the right end. Re-placed every 20 s on the utilization the
//! monitor averaged (a long interval limits the cost of moving vGPUs).
//!
//! Decided here where the spec is silent: a newcomer (no utilization measured yet) takes
//! the first free run if there is one, else it is right-aligned like the least busy; the
//! periodic re-placement is skipped while no slot is shared (it could only cost copies).

use super::slots::{
    Demand, PlaceError, Placement, check_demands, first_free_run, occupancy, order_by, pack,
    shared_slots, with_newcomer,
};

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

    fn arrive(
        &mut self,
        total: u32,
        residents: &[Demand],
        positions: &[u32],
        new: Demand,
    ) -> Result<Vec<u32>, PlaceError> {
        let users = occupancy(total, residents, positions, new)?;
        let at = first_free_run(&users, new.slots).unwrap_or(total - new.slots);
        Ok(with_newcomer(positions, at))
    }

    fn period_ns(&self) -> Option<u64> {
        Some(PERIOD_NS)
    }

    fn periodic(
        &mut self,
        total: u32,
        residents: &[Demand],
        positions: &[u32],
    ) -> Option<Vec<u32>> {
        // Nothing shared, nothing to gain: moving would only cost copies.
        if shared_slots(total, residents, positions) == 0 {
            return None;
        }
        self.place(total, residents).ok()
    }
}
