//! Priorities from counts: buffers and chunks ranked by accesses per page.

use std::collections::BTreeMap;

use gpuswap_core::chunk_layout;

use super::counts::transactions;
use crate::program::{Program, Slot};
use crate::timing::Traffic;

/// The GTX 480's small page (gpuswap.md): the unit of page granularity and the page of
/// "accesses per page". Defined here, where "per page" is computed, and re-exported
/// by [`super`], so that this module needs nothing of its parent.
pub const PAGE_BYTES: u64 = 4 << 10;

/// Accesses per 4 KiB page of a region of `bytes` (a partial page counts as one).
pub(super) fn per_page(accesses: f64, bytes: u64) -> f64 {
    accesses / bytes.div_ceil(PAGE_BYTES).max(1) as f64
}

/// Priorities `1..=n` for `n` items by accesses per page: the most accessed item gets
/// `n`, and ties keep the items' order (the earlier item gets the higher priority).
pub(super) fn rank(accesses_per_page: &[f64]) -> Vec<i32> {
    let mut by_accesses: Vec<usize> = (0..accesses_per_page.len()).collect();
    // Stable: equal values keep index order.
    by_accesses.sort_by(|&a, &b| accesses_per_page[b].total_cmp(&accesses_per_page[a]));
    let mut priorities = vec![0; accesses_per_page.len()];
    for (position, &item) in by_accesses.iter().enumerate() {
        priorities[item] = i32::try_from(accesses_per_page.len() - position)
            .expect("fewer than 2^31 buffers or chunks");
    }
    priorities
}

/// Ranks every chunk of `chunk_bytes` of every buffer in `order` by its accesses per page;
/// `moved` holds each slot's bytes moved per chunk.
pub(super) fn chunk_priorities(
    program: &Program,
    order: &[Slot],
    moved: &[Vec<Traffic>],
    chunk_bytes: u64,
) -> BTreeMap<String, Vec<i32>> {
    let per_chunk: Vec<f64> = order
        .iter()
        .flat_map(|&slot| {
            chunk_layout(program.buffers[slot].bytes, chunk_bytes)
                .zip(&moved[slot])
                .map(|((_, bytes), chunk)| {
                    let (reads, writes) = transactions(chunk);
                    per_page(reads + writes, bytes)
                })
        })
        .collect();
    let mut priorities = rank(&per_chunk).into_iter();
    order
        .iter()
        .map(|&slot| {
            let chunks = moved[slot].len();
            (
                program.buffers[slot].label.clone(),
                priorities.by_ref().take(chunks).collect(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::profile::test_support::*;
    use crate::profile::{Granularity, Profile, profile};

    /// `app`'s default-size program profiled by 4 MiB chunk on the testbed.
    fn chunk_profile(app: &str) -> Profile {
        profile(
            &app_program(app, "default"),
            &gtx480(),
            Granularity::Chunk,
            4 << 20,
        )
    }

    #[test]
    fn backprop_stack_lowest_of_used_buffers_and_weights_above_previous_weights() {
        let p = chunk_profile("backprop");
        // Lowest but for `output_hidden`, which the kernels are passed and never use:
        // nothing ranks below no access at all.
        assert_eq!(buffer(&p, "output_hidden").accesses_per_page, 0.0);
        assert_eq!(p.priorities["output_hidden"], 1);
        assert_eq!(p.priorities["runtime_stack"], 2);
        let weights = buffer(&p, "input_hidden_weights");
        let previous = buffer(&p, "input_prev_weights");
        assert!(weights.priority > previous.priority);
        // The dissertation's profile: about twice the accesses per page.
        let ratio = weights.accesses_per_page / previous.accesses_per_page;
        assert!((1.8..=2.2).contains(&ratio), "{ratio}");
        assert!(p.slowdown > 1.0);
    }

    #[test]
    fn nn_input_and_output_have_equal_accesses_per_page() {
        let p = chunk_profile("nn");
        let (input, output) = (buffer(&p, "locations"), buffer(&p, "distances"));
        assert_eq!((input.writes, output.reads), (0.0, 0.0));
        // One byte per byte each, read and written in linear order, so in whole lines
        // both ways: equal accesses per page, as the dissertation's profiles found. The
        // tie ranks them adjacently, the input (allocated first) above the output.
        assert!(close(input.accesses_per_page, 32.0));
        assert!(close(output.accesses_per_page, 32.0));
        assert_eq!(input.priority, output.priority + 1);
    }
}
