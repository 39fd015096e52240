//! What the app models know of the GPU they run on, and the estimates of isolated
//! accesses that depend on its L2 cache.
//!
//! The traffic of a kernel is counted per thread block with no cache between blocks
//! (see the conventions in [`crate::apps`]) except in three places where the L2 decides how
//! often a line moves: random-order re-reads of a region ([`DeviceShape::random_bytes`]),
//! small buffers that every block re-reads ([`DeviceShape::l2_resident_reads`]) and
//! regions that blocks re-read in order with a known reuse distance
//! ([`DeviceShape::reused_reads`]). Both take
//! the L2 of the device the scenario names, so a model written against the GTX 480 moves
//! fewer bytes on a GPU with a larger cache, as the real kernel would.
//!
//! It is a module of its own, not part of `apps` or `preset`, because both need it:
//! presets make a shape ([`Preset::shape`](crate::preset::Preset::shape)) and apps take
//! one, and neither should have to import the other for it.

/// The figures of a device that an app's program may depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceShape {
    /// L2 cache shared by the SMs.
    pub l2_bytes: u64,
    /// Streaming multiprocessors. No app's traffic or instruction count depends on it
    /// yet: the timing model spreads a kernel's instructions over the whole device, so a
    /// launch with fewer blocks than SMs (lud's diagonal tile, heartwall's 51 points on a
    /// large GPU) is modelled as if it filled the GPU. Models of occupancy need it.
    pub sm_count: u32,
}

/// The share of the L2 that a buffer re-read by every block may take and still stay
/// in it while the launch's streaming traffic passes beside it: unconfirmed, a twelfth
/// (64 KiB of the GTX 480's 768 KiB, the figure the app models were written with).
const L2_RESIDENT_SHARE: u64 = 12;

impl DeviceShape {
    /// Buffers up to this size stay in the L2 while a launch re-reads them.
    pub fn l2_resident_bytes(self) -> u64 {
        self.l2_bytes / L2_RESIDENT_SHARE
    }

    /// Expected bytes moved by `accesses` isolated accesses to uniformly random places
    /// of a region of `region_bytes`, made in random order: the first touch of a granule
    /// moves it, a later one moves it again unless the L2 still holds it, which it does
    /// with probability `l2_bytes / region_bytes` (a random-replacement estimate; always
    /// for a region that fits).
    pub fn random_bytes(self, region_bytes: u64, accesses: f64, granule_bytes: u64) -> u64 {
        let first = distinct_granules(region_bytes, accesses, granule_bytes);
        let miss = 1.0 - (self.l2_bytes as f64 / region_bytes as f64).min(1.0);
        let again = (accesses.max(0.0) - first) * miss;
        ((first + again) * granule_bytes as f64).round() as u64
    }

    /// Bytes a launch reads from a buffer of `buffer_bytes` that its blocks read
    /// `streamed_bytes` from in all: once per launch for a buffer that stays in L2
    /// ([`Self::l2_resident_bytes`]), every time otherwise.
    pub fn l2_resident_reads(self, buffer_bytes: u64, streamed_bytes: u64) -> u64 {
        if buffer_bytes <= self.l2_resident_bytes() {
            streamed_bytes.min(buffer_bytes)
        } else {
            streamed_bytes
        }
    }

    /// Bytes a launch reads from a region of `region_bytes` that its blocks read
    /// `streamed_bytes` from in all, where between two reads of the same place the other
    /// blocks bring `between_bytes` of other data through the L2: the region once when
    /// it and that other data fit in the L2 together (an LRU cache keeps a line whose
    /// reuse distance is below its capacity), every time otherwise.
    pub fn reused_reads(self, region_bytes: u64, streamed_bytes: u64, between_bytes: u64) -> u64 {
        if region_bytes + between_bytes <= self.l2_bytes {
            streamed_bytes.min(region_bytes)
        } else {
            streamed_bytes
        }
    }
}

/// Expected granules of `granule_bytes` that `accesses` isolated accesses at uniformly
/// random places of a region of `region_bytes` touch: `G (1 - (1 - 1/G)^a)` of `G`.
fn distinct_granules(region_bytes: u64, accesses: f64, granule_bytes: u64) -> f64 {
    if region_bytes == 0 || accesses <= 0.0 {
        return 0.0;
    }
    let granules = region_bytes.div_ceil(granule_bytes) as f64;
    granules * (1.0 - (accesses * (-1.0 / granules).ln_1p()).exp())
}

/// Expected bytes moved by `accesses` isolated accesses to uniformly random places of a
/// region of `region_bytes`, made in address order (threads in index order reaching
/// sparse elements), each moving one `granule_bytes` transaction: a granule touched
/// twice is touched twice in a row and moves once, whatever the cache.
pub(crate) fn scattered_bytes(region_bytes: u64, accesses: f64, granule_bytes: u64) -> u64 {
    (distinct_granules(region_bytes, accesses, granule_bytes) * granule_bytes as f64).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::gtx480;
    use crate::preset;

    #[test]
    fn scattered_accesses_saturate_at_the_region() {
        // One access moves one granule; a few accesses rarely collide.
        assert_eq!(scattered_bytes(1 << 20, 1.0, 128), 128);
        let few = scattered_bytes(1 << 30, 1000.0, 128);
        assert!((127_900..=128_000).contains(&few), "{few}");
        // Far more accesses than granules touch every granule once.
        assert_eq!(scattered_bytes(4096, 1e6, 128), 4096);
        assert_eq!(scattered_bytes(4096, 0.0, 128), 0);
        // Accesses equal to granules touch 1 - 1/e of them.
        let e = scattered_bytes(128 << 10, 1024.0, 128) as f64 / f64::from(128 << 10);
        assert!((e - (1.0 - (-1.0f64).exp())).abs() < 1e-3, "{e}");
    }

    #[test]
    fn random_accesses_miss_again_in_regions_larger_than_l2() {
        let device = gtx480();
        // In a region that fits in L2, random order moves each granule once, like
        // address order.
        assert_eq!(
            device.random_bytes(4096, 1e6, 128),
            scattered_bytes(4096, 1e6, 128)
        );
        // In a region 1024 times the L2, nearly every access moves a line.
        let region = 1024 * device.l2_bytes;
        let moved = device.random_bytes(region, 1e6, 128) as f64 / 128.0;
        assert!((moved / 1e6 - 1.0).abs() < 1e-3, "{moved}");
        assert!(scattered_bytes(region, 1e6, 128) < device.random_bytes(region, 1e6, 128));
        // The same region on a device whose L2 holds half of it: half the re-reads hit.
        let half = DeviceShape {
            l2_bytes: region / 2,
            ..device
        };
        let first = scattered_bytes(region, 1e6, 128) as f64;
        let again = device.random_bytes(region, 1e6, 128) as f64 - first;
        let again_half = half.random_bytes(region, 1e6, 128) as f64 - first;
        assert!(
            (again_half / again - 0.5).abs() < 1e-3,
            "{again_half} {again}"
        );
    }

    #[test]
    fn small_buffers_are_read_once_per_launch() {
        let device = gtx480();
        assert_eq!(device.l2_resident_bytes(), 64 << 10);
        assert_eq!(device.l2_resident_reads(8 << 10, 1 << 20), 8 << 10);
        assert_eq!(device.l2_resident_reads(8 << 10, 100), 100);
        assert_eq!(device.l2_resident_reads(1 << 20, 5 << 20), 5 << 20);
        // A 1 MiB buffer stays in the 40 MiB L2 of an A100.
        let a100 = preset::find("a100-80gb").unwrap().shape();
        assert_eq!(a100.l2_resident_reads(1 << 20, 5 << 20), 1 << 20);
    }
}
