//! `gscale`: gScale's placement at VM creation (`../shared/spec/dymgpu.md`): score each
//! slot (free 0, occupied a very large weight), take the contiguous run with the lowest
//! total, ties to the left. Nothing moves afterwards.
//!
//! An occupied slot's score counts the vGPUs on it. The spec's worked example settles
//! it: four vGPUs of six slots in twelve cost gVirt/gScale 24 + 24(n-1) copies over n
//! rounds, the layout in which the third and fourth vGPUs each share with one of the
//! first two. One weight per occupied slot whatever its occupants (the reading kept
//! until 2026-11) makes every run tie once all slots are held and stacks newcomers at
//! the left: the 24 + 18(n-1) layout the paper offers as the better one, which left
//! DymGPU nothing to gain over gScale.

use super::slots::{Demand, PlaceError, Placement, Space};

/// gScale's placement.
#[derive(Debug)]
pub(super) struct Gscale;

impl Placement for Gscale {
    fn arrive(&mut self, space: Space<'_>, new: Demand) -> Result<Vec<u32>, PlaceError> {
        let occupied = space.occupancy(new)?;
        // Sliding sums of the slots' occupants over every run of the newcomer's length;
        // the first minimum is the leftmost.
        let len = new.slots as usize;
        let mut score: u32 = occupied[..len].iter().sum();
        let (mut best, mut best_score) = (0, score);
        for start in 1..=occupied.len() - len {
            score = score + occupied[start + len - 1] - occupied[start - 1];
            if score < best_score {
                (best, best_score) = (start, score);
            }
        }
        Ok(space.with_newcomer(best as u32))
    }
}
