//! What a client may claim: the sizes in its hello and its allocations are checked
//! here before they reach the manager. A client is a process of the daemon's own user,
//! but a buggy or hostile one must not abort the daemon every tenant shares, nor make
//! it lay out a table larger than memory.

/// The largest device a hello may report: 16 TiB. The largest GPUs sold hold 192 GiB
/// (B200) to 288 GiB (MI355X) of memory, so this is about 60 times any real device, far
/// beyond what the next generations will hold, while the chunk table for it (8 Mi
/// chunks of 2 MiB) still fits a daemon's memory.
pub const MAX_DEVICE_BYTES: u64 = 16 << 40;

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

/// Checks an allocation of `bytes`: refused when it is more than the daemon manages in
/// all (`most_bytes`, VRAM and host memory) or more chunks of `chunk_bytes` than a
/// buffer's chunk table numbers, before the manager lays out any chunk.
pub fn check_request(bytes: u64, chunk_bytes: u64, most_bytes: u64) -> Result<u64, String> {
    let placed = Some(bytes).filter(|p| *p <= most_bytes).ok_or_else(|| {
        format!(
            "{bytes} bytes asked; the daemon manages {most_bytes} bytes of VRAM and host \
                 memory in all"
        )
    })?;
    let chunks = placed.div_ceil(chunk_bytes);
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
    fn requests_are_bounded() {
        assert_eq!(check_request(2 * MIB, 2 * MIB, 2 * MIB), Ok(2 * MIB));
        let error = check_request(2 * MIB + 1, 2 * MIB, 2 * MIB).unwrap_err();
        assert!(error.contains("bytes asked"), "{error}");
        // More chunks than a buffer numbers: 16 TiB of 4 KiB chunks.
        let error = check_request(16 << 40, 4096, u64::MAX).unwrap_err();
        assert!(error.contains("at most 4294967295 chunks"), "{error}");
    }
}
