//! `dymgpu-size`: DymGPU's size-based placement (`../shared/spec/dymgpu.md`): largest
//! first, packed left to right; the first that does not fit is right-aligned (V_K) and
//! the rest stack on its start. A newcomer no larger than the overlap L between V(K-1)
//! and V_K goes to P_K; a larger one goes to P_K or into a full reallocation, whichever
//! shares fewer slots. A vGPU leaving slots it held alone triggers a reallocation.
//!
//! Decided here where the spec is silent: a newcomer that fits in a free run takes the
//! first one (no sharing, nobody moves); a tie between P_K and a reallocation keeps
//! P_K (nobody moves); a departure reallocates only if that shares fewer slots than
//! staying put (moving costs copies and cannot help when nothing is shared).

use super::slots::{
    Demand, PlaceError, Placement, Space, check_demands, order_by, pack, shared_slots,
};

/// Size-based placement and what it remembers of its last full placement.
#[derive(Debug, Default)]
pub(super) struct DymgpuSize {
    /// P_K and the overlap L of the last full placement, when one vGPU had to be
    /// right-aligned.
    anchor: Option<(u32, u32)>,
}

impl Placement for DymgpuSize {
    fn place(&mut self, total: u32, demands: &[Demand]) -> Result<Vec<u32>, PlaceError> {
        check_demands(total, demands)?;
        let order = order_by(demands, |d| f64::from(d.slots));
        let (mut positions, placed, k) = pack(total, demands, &order);
        self.anchor = k.map(|k| {
            let p_k = positions[order[k]].expect("V_K is placed");
            // The overlap between V(K-1) and V_K (none when V_K is the first).
            let overlap = k.checked_sub(1).map_or(0, |j| {
                let end = positions[order[j]].expect("placed") + demands[order[j]].slots;
                end.saturating_sub(p_k)
            });
            (p_k, overlap)
        });
        let p_k = self.anchor.map(|a| a.0);
        for &v in &order[placed..] {
            // Every vGPU after the loop follows a right-aligned V_K (the loop only stops
            // early after one).
            positions[v] = Some(p_k.expect("the loop stopped at a right-aligned V_K"));
        }
        Ok(positions
            .into_iter()
            .map(|p| p.expect("every vGPU placed"))
            .collect())
    }

    fn arrive(&mut self, space: Space<'_>, new: Demand) -> Result<Vec<u32>, PlaceError> {
        if let Some(at) = space.first_free_run(new)? {
            return Ok(space.with_newcomer(at));
        }
        let total = space.total;
        let mut all = space.residents.to_vec();
        all.push(new);
        match self.anchor {
            Some((p_k, overlap)) if new.slots <= overlap => Ok(space.with_newcomer(p_k)),
            Some((p_k, _)) if p_k + new.slots <= total => {
                let at_anchor = space.with_newcomer(p_k);
                let anchor = self.anchor;
                let realloc = self.place(total, &all)?;
                if shared_slots(total, &all, &at_anchor) <= shared_slots(total, &all, &realloc) {
                    self.anchor = anchor;
                    Ok(at_anchor)
                } else {
                    Ok(realloc)
                }
            }
            _ => self.place(total, &all),
        }
    }

    fn depart(&mut self, space: Space<'_>, held_alone: bool) -> Option<Vec<u32>> {
        if !held_alone || space.residents.is_empty() {
            return None;
        }
        // Moving vGPUs costs copies: reallocate only when it shares fewer slots.
        let anchor = self.anchor;
        let next = self.place(space.total, space.residents).ok()?;
        if shared_slots(space.total, space.residents, &next) < space.shared_slots() {
            Some(next)
        } else {
            self.anchor = anchor;
            None
        }
    }
}
