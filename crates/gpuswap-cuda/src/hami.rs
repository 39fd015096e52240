//! Standing in for HAMi-core (issue 42, item 7): its per-container memory limit
//! variables become the process's `memory_limit`, and a process that also loads
//! HAMi-core's own interposer is refused, since two interposers would each manage the
//! same memory.
//!
//! HAMi-core (Project-HAMi/HAMi-core, its README) reads `CUDA_DEVICE_MEMORY_LIMIT` (every
//! device) and `CUDA_DEVICE_MEMORY_LIMIT_<i>` (device i), a number with an optional unit
//! `k`, `m` or `g` (powers of 1024; bytes without one), and is loaded as `libvgpu.so`.

/// HAMi-core's library, as its containers preload it.
const HAMI_LIBRARY: &str = "libvgpu.so";

/// The memory limit HAMi-core's variables set for device `device` (an ordinal, whose
/// daemon is told it): `CUDA_DEVICE_MEMORY_LIMIT_<device>`, else
/// `CUDA_DEVICE_MEMORY_LIMIT`; `Ok(None)` without either, `Err` naming the variable for
/// a value that is no limit.
pub(crate) fn memory_limit(device: std::ffi::c_int) -> Result<Option<u64>, String> {
    let own = format!("CUDA_DEVICE_MEMORY_LIMIT_{device}");
    for name in [own.as_str(), "CUDA_DEVICE_MEMORY_LIMIT"] {
        if let Ok(text) = std::env::var(name) {
            return parse_limit(&text).map(Some).ok_or_else(|| {
                format!(
                    "{name}={text:?} is no memory limit (HAMi-core's form: a number \
                         with k, m or g, such as 4096m)"
                )
            });
        }
    }
    Ok(None)
}

/// `4096m`, `4g`, `512k` or bytes, as HAMi-core reads them; `None` for anything else,
/// zero included.
fn parse_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = match text.chars().last()?.to_ascii_lowercase() {
        'k' => (&text[..text.len() - 1], 10),
        'm' => (&text[..text.len() - 1], 20),
        'g' => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift).filter(|b| *b > 0)
}

/// `Err` with a message when HAMi-core's library is loaded in this process too (as
/// /proc/self/maps lists the mapped files).
pub(crate) fn refuse_if_chained() -> Result<(), String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    if maps_name_hami(&maps) {
        return Err(format!(
            "HAMi-core's {HAMI_LIBRARY} is loaded in this process too: two interposers \
             would both manage its memory; preload only one of them (gpuswap honours \
             CUDA_DEVICE_MEMORY_LIMIT as the process's memory limit)"
        ));
    }
    Ok(())
}

/// Whether a maps listing names HAMi-core's library.
fn maps_name_hami(maps: &str) -> bool {
    maps.lines().any(|line| {
        line.rsplit('/')
            .next()
            .is_some_and(|file| file == HAMI_LIBRARY || file.starts_with("libvgpu.so."))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hami_limits_read_as_hami_core_reads_them() {
        assert_eq!(parse_limit("4096m"), Some(4096 << 20));
        assert_eq!(parse_limit("4G"), Some(4 << 30));
        assert_eq!(parse_limit("512k"), Some(512 << 10));
        assert_eq!(parse_limit("1048576"), Some(1 << 20));
        for bad in ["", "m", "0", "0m", "-1g", "4gb", "1e9", "99999999999999g"] {
            assert_eq!(parse_limit(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn hami_cores_library_is_found_in_a_maps_listing() {
        let ours = "7f00-7f01 r-xp 0 08:01 1 /usr/lib/libgpuswap_cuda.so\n";
        let theirs = "7f00-7f01 r-xp 0 08:01 2 /usr/local/vgpu/libvgpu.so\n";
        assert!(!maps_name_hami(ours));
        assert!(maps_name_hami(&format!("{ours}{theirs}")));
        assert!(maps_name_hami(
            "7f00-7f01 r-xp 0 08:01 2 /opt/libvgpu.so.1\n"
        ));
        assert!(!maps_name_hami(
            "7f00-7f01 r-xp 0 08:01 2 /opt/libvgpu.sox\n"
        ));
    }
}
