//! The slot space every algorithm works in: what a vGPU asks of it ([`Demand`]), why a
//! placement fails ([`PlaceError`]), the [`Placement`] trait, and the slot arithmetic
//! the algorithms share (DymGPU's packing loop, slot users, free runs, the [`Space`] the
//! residents hold). A leaf apart from `mod.rs`, so that the algorithms, which `mod.rs`
//! declares, import it without importing their parent.

use thiserror::Error;

/// What one vGPU asks of the space.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Demand {
    /// Slots it needs (its high graphics memory over the slot size).
    pub slots: u32,
    /// Its GPU utilization, 0 to 1 (averaged by the monitor; used by `dymgpu-util`).
    pub utilization: f64,
}

impl Demand {
    /// A demand of `slots` slots with no utilization known.
    pub fn of(slots: u32) -> Self {
        Self {
            slots,
            utilization: 0.0,
        }
    }
}

/// Why a placement cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlaceError {
    /// A vGPU needs more slots than the space has.
    #[error("a vGPU needs {slots} slots, but the space has {total}")]
    TooLarge {
        /// What it needs.
        slots: u32,
        /// What there is.
        total: u32,
    },
    /// A vGPU needs no slot at all.
    #[error("a vGPU needs at least one slot")]
    Empty,
    /// The algorithm does not share slots and no free run is long enough (gVirt).
    #[error("no free run of {slots} slots: {algorithm} does not share slots")]
    NoRoom {
        /// The algorithm.
        algorithm: &'static str,
        /// What the vGPU needs.
        slots: u32,
    },
}

/// The space as its residents hold it: its size in slots, the residents, and their
/// start slots (in the same order). What an algorithm is told at every event after the
/// first placement.
#[derive(Clone, Copy, Debug)]
pub struct Space<'a> {
    /// Slots in the space.
    pub total: u32,
    /// The vGPUs placed in it.
    pub residents: &'a [Demand],
    /// Their start slots.
    pub positions: &'a [u32],
}

impl Space<'_> {
    /// Checks a newcomer's demand and counts who uses each slot among the residents:
    /// where every arrival starts.
    pub(super) fn occupancy(&self, new: Demand) -> Result<Vec<u32>, PlaceError> {
        check_demands(self.total, &[new])?;
        Ok(users_per_slot(self.total, self.residents, self.positions))
    }

    /// The first run of free slots that fits a newcomer, after checking its demand.
    pub(super) fn first_free_run(&self, new: Demand) -> Result<Option<u32>, PlaceError> {
        Ok(first_free_run(&self.occupancy(new)?, new.slots))
    }

    /// The residents' positions, unchanged, and the newcomer's at `at`.
    pub(super) fn with_newcomer(&self, at: u32) -> Vec<u32> {
        self.positions.iter().copied().chain([at]).collect()
    }

    /// Slots used by two or more residents.
    pub(super) fn shared_slots(&self) -> u32 {
        shared_slots(self.total, self.residents, self.positions)
    }
}

/// Where vGPUs go. Positions are start slots, 0-indexed, in the order the vGPUs were
/// given.
pub trait Placement: std::fmt::Debug + Send {
    /// Places a whole set at once: the calculator's question, and a full reallocation.
    /// By default, as arrivals one after the other in input order: the algorithms that
    /// decide only at creation.
    fn place(&mut self, total: u32, demands: &[Demand]) -> Result<Vec<u32>, PlaceError> {
        let mut positions = Vec::with_capacity(demands.len());
        for (i, d) in demands.iter().enumerate() {
            let space = Space {
                total,
                residents: &demands[..i],
                positions: &positions,
            };
            let next = self.arrive(space, *d)?;
            positions.push(*next.last().expect("the newcomer's position"));
        }
        Ok(positions)
    }

    /// A vGPU arrives while the residents hold `space`: the positions of every vGPU
    /// after it, the residents' first (a resident whose position changes is moved), the
    /// newcomer's last.
    fn arrive(&mut self, space: Space<'_>, new: Demand) -> Result<Vec<u32>, PlaceError>;

    /// A vGPU left (ended, or idle and treated as ended); `held_alone` says whether it
    /// held slots nobody else used. New positions for the residents if they move.
    fn depart(&mut self, space: Space<'_>, held_alone: bool) -> Option<Vec<u32>> {
        let _ = (space, held_alone);
        None
    }

    /// How often the driver calls [`Placement::periodic`], if at all (ns).
    fn period_ns(&self) -> Option<u64> {
        None
    }

    /// A period passed: new positions for the residents if they move.
    fn periodic(&mut self, space: Space<'_>) -> Option<Vec<u32>> {
        let _ = space;
        None
    }
}

/// Checks that every demand fits the space at all.
pub(super) fn check_demands(total: u32, demands: &[Demand]) -> Result<(), PlaceError> {
    for d in demands {
        if d.slots == 0 {
            return Err(PlaceError::Empty);
        }
        if d.slots > total {
            return Err(PlaceError::TooLarge {
                slots: d.slots,
                total,
            });
        }
    }
    Ok(())
}

/// Indices of `demands` sorted by `key` descending; ties keep the input order.
pub(super) fn order_by(demands: &[Demand], key: impl Fn(&Demand) -> f64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|a, b| key(&demands[*b]).total_cmp(&key(&demands[*a])));
    order
}

/// DymGPU's packing loop over `order` (`../shared/spec/dymgpu.md`): pack left to right
/// while the next vGPU fits with room to spare; the first that does not is right-aligned
/// and recorded as K. Two edge cases the printed loop leaves open are decided here: the
/// loop stops when every vGPU is placed (the printed loop has no `i < N` guard), and an
/// exact fit (`sum + S == M`) takes the right-align branch, as printed (its position is
/// the same either way, but it becomes K). Returns the positions of the placed vGPUs
/// (in input order, `None` for the rest), the index in `order` where placing stopped,
/// and K as an index into `order`.
pub(super) fn pack(
    total: u32,
    demands: &[Demand],
    order: &[usize],
) -> (Vec<Option<u32>>, usize, Option<usize>) {
    let mut positions = vec![None; demands.len()];
    let (mut sum, mut i, mut k) = (0u64, 0, None);
    while sum < u64::from(total) && i < order.len() {
        let s = demands[order[i]].slots;
        if sum + u64::from(s) < u64::from(total) {
            positions[order[i]] = Some(sum as u32);
        } else {
            positions[order[i]] = Some(total - s);
            k = Some(i);
        }
        sum += u64::from(s);
        i += 1;
    }
    (positions, i, k)
}

/// Slots used by two or more vGPUs.
pub fn shared_slots(total: u32, demands: &[Demand], positions: &[u32]) -> u32 {
    let users = users_per_slot(total, demands, positions);
    users.iter().filter(|n| **n >= 2).count() as u32
}

/// How many vGPUs use each slot.
fn users_per_slot(total: u32, demands: &[Demand], positions: &[u32]) -> Vec<u32> {
    let mut users = vec![0u32; total as usize];
    for (d, p) in demands.iter().zip(positions) {
        let end = (*p + d.slots).min(total);
        for u in &mut users[*p as usize..end as usize] {
            *u += 1;
        }
    }
    users
}

/// The first free run of `slots` slots, given who uses each slot.
fn first_free_run(users: &[u32], slots: u32) -> Option<u32> {
    let mut run = 0u32;
    for (i, u) in users.iter().enumerate() {
        run = if *u == 0 { run + 1 } else { 0 };
        if run == slots {
            return Some(i as u32 + 1 - slots);
        }
    }
    None
}
