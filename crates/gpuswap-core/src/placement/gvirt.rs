//! `gvirt`: gVirt's static partitions (`../shared/spec/dymgpu.md`): every vGPU gets slots
//! of its own, the first free run in order of arrival; one that finds no free run is
//! refused, since gVirt cannot share graphics memory.

use super::slots::{Demand, PlaceError, Placement, Space};

/// gVirt's placement.
#[derive(Debug)]
pub(super) struct Gvirt;

impl Placement for Gvirt {
    fn arrive(&mut self, space: Space<'_>, new: Demand) -> Result<Vec<u32>, PlaceError> {
        let at = space.first_free_run(new)?.ok_or(PlaceError::NoRoom {
            algorithm: "gvirt",
            slots: new.slots,
        })?;
        Ok(space.with_newcomer(at))
    }
}
