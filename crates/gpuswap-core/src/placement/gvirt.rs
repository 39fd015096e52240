//! `gvirt`: gVirt's static partitions (`../shared/spec/dymgpu.md`): every vGPU gets slots
//! of its own, the first free run in order of arrival; one that finds no free run is
//! refused, since gVirt cannot share graphics memory.

use super::{Demand, PlaceError, Placement, check_demands, first_free_run, users_per_slot};

/// gVirt's placement.
#[derive(Debug)]
pub(super) struct Gvirt;

impl Placement for Gvirt {
    fn place(&mut self, total: u32, demands: &[Demand]) -> Result<Vec<u32>, PlaceError> {
        let mut positions = Vec::with_capacity(demands.len());
        for (i, d) in demands.iter().enumerate() {
            let next = self.arrive(total, &demands[..i], &positions, *d)?;
            positions.push(*next.last().expect("the newcomer's position"));
        }
        Ok(positions)
    }

    fn arrive(
        &mut self,
        total: u32,
        residents: &[Demand],
        positions: &[u32],
        new: Demand,
    ) -> Result<Vec<u32>, PlaceError> {
        check_demands(total, &[new])?;
        let users = users_per_slot(total, residents, positions);
        let at = first_free_run(&users, new.slots).ok_or(PlaceError::NoRoom {
            algorithm: "gvirt",
            slots: new.slots,
        })?;
        Ok(positions.iter().copied().chain([at]).collect())
    }
}
