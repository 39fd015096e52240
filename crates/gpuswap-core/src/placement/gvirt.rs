//! `gvirt`: gVirt's static partitions (`../shared/spec/dymgpu.md`): every vGPU gets slots
//! of its own, the first free run in order of arrival; one that finds no free run is
//! refused, since gVirt cannot share graphics memory.

use super::slots::{
    Demand, PlaceError, Placement, first_free_run, occupancy, place_in_turn, with_newcomer,
};

/// gVirt's placement.
#[derive(Debug)]
pub(super) struct Gvirt;

impl Placement for Gvirt {
    fn place(&mut self, total: u32, demands: &[Demand]) -> Result<Vec<u32>, PlaceError> {
        place_in_turn(self, total, demands)
    }

    fn arrive(
        &mut self,
        total: u32,
        residents: &[Demand],
        positions: &[u32],
        new: Demand,
    ) -> Result<Vec<u32>, PlaceError> {
        let users = occupancy(total, residents, positions, new)?;
        let at = first_free_run(&users, new.slots).ok_or(PlaceError::NoRoom {
            algorithm: "gvirt",
            slots: new.slots,
        })?;
        Ok(with_newcomer(positions, at))
    }
}
