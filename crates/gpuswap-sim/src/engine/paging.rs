//! Unified memory on the simulated device: a kernel's accesses become a stream of page
//! touches, far faults are fetched in batches and serviced by the manager's paging
//! machine, and the kernel stalls for each batch's service.
//!
//! The model, first order (issue 8 goes on): the kernel's faults are serviced in stream
//! order when it starts, one batch after another, and the kernel then takes its
//! all-in-VRAM time plus every batch's stall; computation does not overlap fault
//! service. A batch's stall is the fixed service cost plus the transfers it caused
//! (evictions to the host, then migrations to the device), each at the link's rate for
//! its transfer size (one transfer per VA block).

use gpuswap_core::uvm::Serviced;
use gpuswap_core::uvm::pages::PAGE_BYTES;

use super::*;
use crate::program::{Access, AccessOrder, Distribution};

/// Bytes of one eviction transfer: the driver evicts a VA block at a time.
const EVICTION_TRANSFER_BYTES: u64 = 2 << 20;

impl Engine {
    /// Touches the pages of tenant `t`'s `kernel` in order, servicing far faults batch by
    /// batch; returns the time the kernel stalls on them.
    pub(super) fn fault_in(&mut self, t: usize, kernel: &Kernel, seed: u64) -> u64 {
        let batch_pages = self.preset.fault_batch_pages.max(1) as usize;
        if self.tenants[t].page_stream.is_some() {
            let capacity = self.manager.paging_capacity_pages().unwrap_or(1);
            let tenant = &mut self.tenants[t];
            tenant.optimum_capacity_pages = tenant.optimum_capacity_pages.max(capacity);
        }
        let mut pending: Vec<u64> = Vec::with_capacity(batch_pages);
        // Pages already in the batch: a second touch of one is the same fault (the
        // driver coalesces them), looked up in constant time.
        let mut in_batch: std::collections::HashSet<u64> =
            std::collections::HashSet::with_capacity(batch_pages);
        let mut stall_ns = 0u64;
        for access in &kernel.accesses {
            let Some(buffer) = self.tenants[t].slots[access.slot] else {
                continue;
            };
            let (Some(first), Some(map)) =
                (self.manager.first_page(buffer), self.page_table.get(buffer))
            else {
                continue;
            };
            let pages = map.bytes.div_ceil(PAGE_BYTES);
            for page in touches(access, pages, seed) {
                let page = first + page;
                if let Some(stream) = &mut self.tenants[t].page_stream {
                    stream.push(page);
                }
                if in_batch.contains(&page) || self.manager.handle_touch(page) {
                    continue;
                }
                pending.push(page);
                in_batch.insert(page);
                if pending.len() == batch_pages {
                    stall_ns = stall_ns.saturating_add(self.service_batch(&pending));
                    pending.clear();
                    in_batch.clear();
                }
            }
        }
        if !pending.is_empty() {
            stall_ns = stall_ns.saturating_add(self.service_batch(&pending));
        }
        stall_ns
    }

    /// Services one batch of far faults; returns its stall.
    fn service_batch(&mut self, faults: &[u64]) -> u64 {
        let Serviced {
            pages_in,
            pages_out,
            blocks_in,
        } = self.manager.handle_faults(faults);
        let link = &self.preset.link;
        let rate = |peak: f64, transfer_bytes: u64| match link.size_curve_k_per_kib {
            Some(k) => crate::link::size_curve_bytes_per_s(peak, k, transfer_bytes),
            None => peak,
        };
        let mut ns = self.preset.fault_service_ns as f64;
        if pages_out > 0 {
            let bytes = pages_out * PAGE_BYTES;
            ns +=
                bytes as f64 / rate(link.d2h_bytes_per_s, bytes.min(EVICTION_TRANSFER_BYTES)) * 1e9;
        }
        if pages_in > 0 {
            let bytes = pages_in * PAGE_BYTES;
            ns += bytes as f64 / rate(link.h2d_bytes_per_s, bytes / blocks_in.max(1)) * 1e9;
        }
        ns.round() as u64
    }
}

/// The pages (0-based in the buffer) an access touches, in its order: one touch per page
/// of bytes it moves, over the pages its distribution reaches. Moving more than those
/// pages hold makes passes over them (the last one partial); less, one sparse pass over
/// evenly spaced pages (a kernel touching 1 MiB of a 56 MiB stack touches 256 of its pages, not all).
/// Linear passes go in address order, strided ones by their stride, random ones are draws
/// of a seeded SplitMix64 sequence.
fn touches(access: &Access, pages: u64, seed: u64) -> impl Iterator<Item = u64> + '_ {
    let reached = reached_pages(&access.distribution, pages);
    let n = reached.len() as u64;
    let count = (access.read_bytes + access.write_bytes)
        .div_ceil(PAGE_BYTES)
        .clamp(1, u64::MAX / 2);
    let passes = count.div_ceil(n.max(1));
    // In a sparse pass, touch k of the n pages, evenly spaced.
    let sparse = count < n;
    let spread = move |k: u64| if sparse { k * n / count } else { k };
    let per_pass = if sparse { count } else { n };
    let mut state = seed ^ (access.slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut draw = move || gpuswap_core::mix::next(&mut state) % n.max(1);
    let indices: Box<dyn Iterator<Item = u64>> = match access.order {
        AccessOrder::Linear => Box::new((0..passes).flat_map(move |_| (0..per_pass).map(spread))),
        AccessOrder::Strided { stride_bytes } => {
            // A strided pass visits every stride-th touch, then the next offset.
            let stride = (stride_bytes / PAGE_BYTES).max(1);
            Box::new((0..passes).flat_map(move |_| {
                (0..stride.min(per_pass.max(1)))
                    .flat_map(move |o| (o..per_pass).step_by(stride as usize))
                    .map(spread)
            }))
        }
        AccessOrder::Random => Box::new((0..count).map(move |_| draw())),
    };
    // The last pass stops where the bytes moved end.
    indices
        .take(count as usize)
        .filter_map(move |k| reached.get(k as usize).copied())
}

/// The pages a distribution reaches, in address order.
fn reached_pages(distribution: &Distribution, pages: u64) -> Vec<u64> {
    match distribution {
        Distribution::Uniform => (0..pages).collect(),
        Distribution::Ranges(ranges) => {
            let mut out: Vec<u64> = ranges
                .iter()
                .filter(|r| r.weight > 0.0 && r.bytes > 0)
                .flat_map(|r| {
                    let start = r.offset_bytes / PAGE_BYTES;
                    let end = (r.offset_bytes + r.bytes).div_ceil(PAGE_BYTES).min(pages);
                    start..end
                })
                .collect();
            out.sort_unstable();
            out.dedup();
            out
        }
        Distribution::Profile {
            page_bytes,
            weights,
        } => {
            let mut out: Vec<u64> = weights
                .iter()
                .enumerate()
                .filter(|(_, w)| **w > 0.0)
                .flat_map(|(i, _)| {
                    let start = i as u64 * page_bytes / PAGE_BYTES;
                    let end = ((i as u64 + 1) * page_bytes)
                        .div_ceil(PAGE_BYTES)
                        .min(pages);
                    start..end
                })
                .collect();
            out.sort_unstable();
            out.dedup();
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(order: AccessOrder, bytes: u64) -> Access {
        Access {
            order,
            ..Access::uniform(0, bytes, 0)
        }
    }

    #[test]
    fn linear_and_strided_streams_visit_every_reached_page_per_pass() {
        let linear: Vec<u64> =
            touches(&access(AccessOrder::Linear, 8 * PAGE_BYTES), 4, 1).collect();
        assert_eq!(linear, [0, 1, 2, 3, 0, 1, 2, 3]);
        let strided: Vec<u64> = touches(
            &access(
                AccessOrder::Strided {
                    stride_bytes: 2 * PAGE_BYTES,
                },
                4 * PAGE_BYTES,
            ),
            4,
            1,
        )
        .collect();
        assert_eq!(strided, [0, 2, 1, 3]);
        let random: Vec<u64> =
            touches(&access(AccessOrder::Random, 64 * PAGE_BYTES), 64, 7).collect();
        assert_eq!(random.len(), 64);
        assert!(random.iter().all(|p| *p < 64));
        assert_ne!(random, (0..64).collect::<Vec<_>>());
        // 1.25 passes over 4 pages: 5 touches, not two whole passes.
        let partial: Vec<u64> =
            touches(&access(AccessOrder::Linear, 5 * PAGE_BYTES), 4, 1).collect();
        assert_eq!(partial, [0, 1, 2, 3, 0]);
        // Moving less than the buffer: that many pages, evenly spread.
        let sparse: Vec<u64> =
            touches(&access(AccessOrder::Linear, 4 * PAGE_BYTES), 16, 1).collect();
        assert_eq!(sparse, [0, 4, 8, 12]);
    }
}
