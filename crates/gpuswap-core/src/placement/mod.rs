//! Placement of virtual GPUs in the high graphics memory of a virtualised integrated GPU
//! (`../shared/spec/dymgpu.md`): the space is `total` slots of 64 MB, each vGPU needs a
//! contiguous run of slots, and slots shared by several vGPUs cost a copy of private
//! translation entries whenever one of them is switched in after another used them.
//!
//! Each algorithm is a [`Placement`] in its own file, registered once in [`PLACEMENTS`]:
//! `gvirt` (static partitions), `gscale` (lowest-score run at creation), `dymgpu-size`
//! and `dymgpu-util` (DymGPU's greedy algorithms with their dynamic rules). They are pure
//! functions of their inputs and their own small state: no clock, the driver says when
//! a vGPU arrives, leaves or when a period has passed.

mod dymgpu_size;
mod dymgpu_util;
mod gscale;
mod gvirt;
mod slots;

pub use slots::{Demand, PlaceError, Placement, Space, shared_slots};

/// A registered placement algorithm.
pub struct PlacementEntry {
    /// The name scenarios and the calculator use.
    pub name: &'static str,
    /// One line saying what it does.
    pub description: &'static str,
    /// Whether a vGPU's low graphics memory is its own (gVirt's static partitions)
    /// rather than one slot shared by all and copied at every switch (gScale, DymGPU).
    pub partitions_low_memory: bool,
    /// Whether it runs DymGPU's monitor: an idle vGPU holding slots alone is treated as
    /// terminated for placement until it has work again.
    pub releases_idle: bool,
    build: fn() -> Box<dyn Placement>,
}

impl std::fmt::Debug for PlacementEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PlacementEntry {
    /// A fresh instance (dynamic algorithms keep state between calls).
    pub fn build(&self) -> Box<dyn Placement> {
        (self.build)()
    }
}

/// Every placement algorithm, in the order listings show them.
pub static PLACEMENTS: &[PlacementEntry] = &[
    PlacementEntry {
        name: "gvirt",
        description: "gVirt: static partitions, no sharing; a vGPU that does not fit is refused",
        partitions_low_memory: true,
        releases_idle: false,
        build: || Box::new(gvirt::Gvirt),
    },
    PlacementEntry {
        name: "gscale",
        description: "gScale: at creation, the contiguous run with the lowest score (occupied slots weigh), ties to the left",
        partitions_low_memory: false,
        releases_idle: false,
        build: || Box::new(gscale::Gscale),
    },
    PlacementEntry {
        name: "dymgpu-size",
        description: "DymGPU size-based: largest first packed left, the first that does not fit right-aligned, the rest stacked on it; newcomers at the overlap, reallocation when a vGPU with slots of its own leaves",
        partitions_low_memory: false,
        releases_idle: true,
        build: || Box::<dymgpu_size::DymgpuSize>::default(),
    },
    PlacementEntry {
        name: "dymgpu-util",
        description: "DymGPU utilization-based: busiest first packed left, the rest right-aligned sharing the right end; re-placed every 20 s on averaged utilization",
        partitions_low_memory: false,
        releases_idle: true,
        build: || Box::new(dymgpu_util::DymgpuUtil),
    },
];

/// The placement algorithm called `name`.
pub fn find_placement(name: &str) -> Option<&'static PlacementEntry> {
    PLACEMENTS.iter().find(|p| p.name == name)
}

/// Slot copies of `rounds` round-robin rounds in input order, each vGPU switched in
/// once per round: at a switch-in, every slot of the vGPU whose physical translation
/// entries belong to another vGPU (or to nobody, at the start) is copied.
pub fn round_robin_copies(total: u32, demands: &[Demand], positions: &[u32], rounds: u32) -> u64 {
    let mut holder: Vec<Option<usize>> = vec![None; total as usize];
    let mut copies = 0u64;
    for _ in 0..rounds {
        for (v, (d, p)) in demands.iter().zip(positions).enumerate() {
            let end = (*p + d.slots).min(total);
            for h in &mut holder[*p as usize..end as usize] {
                if *h != Some(v) {
                    *h = Some(v);
                    copies += 1;
                }
            }
        }
    }
    copies
}

#[cfg(test)]
mod tests;
