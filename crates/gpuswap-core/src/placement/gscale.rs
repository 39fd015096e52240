//! `gscale`: gScale's placement at VM creation (`../shared/spec/dymgpu.md`): score each
//! slot (free 0, occupied a very large weight), take the contiguous run with the lowest
//! total, ties to the left. Nothing moves afterwards.
//!
//! The spec gives an occupied slot one weight whatever the number of vGPUs on it; read
//! literally, once every slot is occupied all runs tie and newcomers stack at the left.
//! That reading is kept (an occupancy-weighted score would spread them; unconfirmed
//! which gScale's code does).

use super::slots::{Demand, PlaceError, Placement, occupancy, place_in_turn, with_newcomer};

/// gScale's placement.
#[derive(Debug)]
pub(super) struct Gscale;

impl Placement for Gscale {
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
        let occupied: Vec<u32> = users.iter().map(|u| u32::from(*u > 0)).collect();
        // Sliding sums of occupied slots over every run of the newcomer's length; the
        // first minimum is the leftmost.
        let len = new.slots as usize;
        let mut score: u32 = occupied[..len].iter().sum();
        let (mut best, mut best_score) = (0, score);
        for start in 1..=occupied.len() - len {
            score = score + occupied[start + len - 1] - occupied[start - 1];
            if score < best_score {
                (best, best_score) = (start, score);
            }
        }
        Ok(with_newcomer(positions, best as u32))
    }
}
