//! Virtualised integrated GPUs, every number with its source (`../shared/spec/dymgpu.md`
//! unless said otherwise) or marked unconfirmed.

use gpuswap_core::MIB;
use serde::Serialize;

/// A virtualised integrated GPU and its host.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VgpuPreset {
    /// Name in scenarios.
    pub name: &'static str,
    /// One line.
    pub description: &'static str,
    /// The host CPU's clock, for switch costs in cycles.
    pub cpu_hz: f64,
    /// The host CPU's hardware threads, shared by the VMs' CPU work between frames.
    pub host_threads: u32,
    /// A slot of high graphics memory.
    pub slot_bytes: u64,
    /// High graphics memory the DomUs share.
    pub high_memory_bytes: u64,
    /// Low graphics memory per vGPU: one slot, shared by all and copied at every switch
    /// (gScale, DymGPU), or a partition of its own (gVirt).
    pub low_memory_bytes: u64,
    /// vGPUs gVirt's static partitions of low graphics memory hold.
    pub partitioned_vgpus_max: u32,
    /// Memory one translation-table entry maps.
    pub page_bytes: u64,
    /// A vGPU's round-robin time slice.
    pub slice_ns: u64,
    /// A context switch without copies: save and restore render context and ring
    /// buffers, switch page tables.
    pub switch_fixed_cycles: u64,
    /// Copying one private translation entry into the physical table.
    pub copy_cycles_per_entry: u64,
}

impl VgpuPreset {
    /// Slots of high graphics memory.
    pub fn total_slots(&self) -> u32 {
        (self.high_memory_bytes / self.slot_bytes) as u32
    }

    /// Translation entries of one slot.
    pub fn entries_per_slot(&self) -> u64 {
        self.slot_bytes / self.page_bytes
    }

    /// Slots a vGPU with `bytes` of high graphics memory needs.
    pub fn slots_for(&self, bytes: u64) -> u32 {
        bytes.div_ceil(self.slot_bytes) as u32
    }
}

/// Every virtualised GPU preset.
pub fn all() -> Vec<VgpuPreset> {
    vec![VgpuPreset {
        name: "hd530",
        description: "Intel HD Graphics 530 (Skylake GT2) under GVT-g on an i7-6700, DymGPU's testbed",
        // Intel ARK: i7-6700 base clock 3.4 GHz (the spec's host).
        cpu_hz: 3.4e9,
        // Intel ARK: the i7-6700 has 4 cores and 8 threads (Hyper-Threading). Counting a
        // hyper-thread as a whole thread is generous to the VMs; Dom0's mediator work
        // on the same host is left out.
        host_threads: 8,
        slot_bytes: 64 * MIB,
        // 3456 MB of high graphics memory shared by the DomUs: 54 slots.
        high_memory_bytes: 3456 * MIB,
        // DomUs get 64 MB of low graphics memory.
        low_memory_bytes: 64 * MIB,
        // gVirt partitions graphics memory statically: at most 3 vGPUs.
        partitioned_vgpus_max: 3,
        // The graphics translation table maps 4 KiB pages (Intel PRM, GTT).
        page_bytes: 4096,
        // Round-robin slices of 16 ms.
        slice_ns: 16_000_000,
        // unconfirmed: about 0.3 ms for a render context switch without copies.
        switch_fixed_cycles: 1_000_000,
        // unconfirmed: an uncached 8-byte entry write through the aperture, about 15 ns.
        copy_cycles_per_entry: 50,
    }]
}

/// The preset called `name`.
pub fn find(name: &str) -> Option<VgpuPreset> {
    all().into_iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_device_has_54_slots_of_16384_entries() {
        let p = find("hd530").unwrap();
        assert_eq!(p.total_slots(), 54);
        assert_eq!(p.entries_per_slot(), 16_384);
        // 384 MB per VM: 6 slots, so overlap starts beyond 9 VMs (54 / 6).
        assert_eq!(p.slots_for(384 * MIB), 6);
        assert_eq!(p.slots_for(385 * MIB), 7);
    }
}
