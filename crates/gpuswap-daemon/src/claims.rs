//! What a client may claim: the sizes in its hello and its allocations are checked
//! here before they reach the manager. A client is a process of the daemon's own user,
//! but a buggy or hostile one must not abort the daemon every tenant shares, nor make
//! it lay out a table larger than memory.

/// The largest device a hello may report: 16 TiB. The largest GPUs sold hold 192 GiB
/// (B200) to 288 GiB (MI355X) of memory, so this is about 60 times any real device, far
/// beyond what the next generations will hold, while the chunk table for it (8 Mi
/// chunks of 2 MiB) still fits a daemon's memory.
pub const MAX_DEVICE_BYTES: u64 = 16 << 40;

/// The smallest allocation granularity accepted: 4 KiB, the host's page, below which
/// no device maps memory (CUDA's is 2 MiB on current GPUs).
pub const MIN_GRANULARITY_BYTES: u64 = 4 << 10;

/// Checks a hello's device size: refused beyond [`MAX_DEVICE_BYTES`].
pub fn check_device(device_total_bytes: u64) -> Result<(), String> {
    if device_total_bytes > MAX_DEVICE_BYTES {
        return Err(format!(
            "the device reports {device_total_bytes} bytes of memory, more than any GPU \
             (at most {MAX_DEVICE_BYTES} bytes are believed)"
        ));
    }
    Ok(())
}

/// Checks a hello's allocation granularity: a power of two of at least
/// [`MIN_GRANULARITY_BYTES`] that divides the daemon's chunk size.
pub fn check_granularity(granularity_bytes: u64, chunk_bytes: u64) -> Result<(), String> {
    if !granularity_bytes.is_power_of_two() || granularity_bytes < MIN_GRANULARITY_BYTES {
        return Err(format!(
            "the device's allocation granularity ({granularity_bytes} bytes) is not a power \
             of two of at least {MIN_GRANULARITY_BYTES} bytes"
        ));
    }
    if !chunk_bytes.is_multiple_of(granularity_bytes) {
        return Err(format!(
            "the daemon's chunk size ({chunk_bytes} bytes) is not a multiple of the device's \
             allocation granularity ({granularity_bytes} bytes): restart it with \
             --chunk-size a multiple of it"
        ));
    }
    Ok(())
}

/// What an allocation of `bytes` takes: its size rounded up to the tenant's
/// `granularity_bytes`, as the process maps it (the daemon counts what it places, not
/// what the client says). Refused when it is more than the daemon manages in all
/// (`most_bytes`, VRAM and host memory) or more chunks of `chunk_bytes` than a
/// buffer's chunk table numbers, before the manager lays out any chunk.
pub fn check_request(
    bytes: u64,
    granularity_bytes: u64,
    chunk_bytes: u64,
    most_bytes: u64,
) -> Result<u64, String> {
    let placed = bytes
        .checked_next_multiple_of(granularity_bytes)
        .filter(|p| *p <= most_bytes)
        .ok_or_else(|| {
            format!(
                "{bytes} bytes asked; the daemon manages {most_bytes} bytes of VRAM and host \
                 memory in all"
            )
        })?;
    let chunks = gpuswap_wire::chunk_count(placed, chunk_bytes);
    if chunks > u64::from(u32::MAX) {
        return Err(format!(
            "{bytes} bytes asked take {chunks} chunks of {chunk_bytes} bytes; a buffer has \
             at most {} chunks",
            u32::MAX
        ));
    }
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn devices_beyond_any_gpu_are_refused() {
        assert_eq!(check_device(MAX_DEVICE_BYTES), Ok(()));
        assert_eq!(check_device(141 << 30), Ok(()));
        let error = check_device(u64::MAX).unwrap_err();
        assert!(error.contains("more than any GPU"), "{error}");
    }

    #[test]
    fn granularities_are_powers_of_two_of_a_page_or_more() {
        assert_eq!(check_granularity(2 * MIB, 2 * MIB), Ok(()));
        assert_eq!(check_granularity(4096, 2 * MIB), Ok(()));
        for bad in [0, 1, 2048, 3 * 4096, u64::MAX] {
            let error = check_granularity(bad, 2 * MIB).unwrap_err();
            assert!(error.contains("power of two"), "{bad}: {error}");
        }
        let error = check_granularity(4 * MIB, 2 * MIB).unwrap_err();
        assert!(error.contains("--chunk-size"), "{error}");
    }

    #[test]
    fn requests_are_rounded_to_the_granularity_and_bounded() {
        assert_eq!(check_request(1, 2 * MIB, 2 * MIB, 1 << 40), Ok(2 * MIB));
        assert_eq!(check_request(1, 4096, 2 * MIB, 1 << 40), Ok(4096));
        assert_eq!(check_request(0, 4096, 2 * MIB, 1 << 40), Ok(0));
        assert_eq!(
            check_request(2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB),
            Ok(2 * MIB)
        );
        // Rounding past what the daemon has, or past u64, is refused.
        assert!(check_request(2 * MIB + 1, 2 * MIB, 2 * MIB, 3 * MIB).is_err());
        let error = check_request(u64::MAX, 4096, 2 * MIB, u64::MAX).unwrap_err();
        assert!(error.contains("bytes asked"), "{error}");
        // More chunks than a buffer numbers: 16 TiB of 4 KiB chunks.
        let error = check_request(16 << 40, 4096, 4096, u64::MAX).unwrap_err();
        assert!(error.contains("at most 4294967295 chunks"), "{error}");
    }
}
