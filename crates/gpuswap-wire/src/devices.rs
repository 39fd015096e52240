//! One daemon per GPU, found by the GPU's UUID (issue 42, item 1): the UUID's text as
//! `nvidia-smi -L` prints it, and the sockets a daemon of one GPU listens at, so that a
//! process finds the daemon of its device with nothing set but `CUDA_VISIBLE_DEVICES`.

use std::path::{Path, PathBuf};

/// The folder of per-GPU sockets under `$XDG_RUNTIME_DIR` (a user's daemons) and under
/// `/run` (a system daemon's, shared with other users through `--socket-group`).
const FOLDER: &str = "gpuswap";

/// The system daemons' folder.
const SYSTEM_DIR: &str = "/run/gpuswap";

/// A GPU's UUID as NVIDIA's tools print it: `GPU-` and 32 hex digits in groups of
/// 8-4-4-4-12 (`cuDeviceGetUuid`'s 16 bytes, in order).
pub fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// `text` as [`uuid_text`] writes it (the `GPU-` prefix optional, any case), or what is
/// wrong with it.
pub fn parse_uuid(text: &str) -> Result<String, String> {
    let bare = text
        .strip_prefix("GPU-")
        .or_else(|| text.strip_prefix("gpu-"))
        .unwrap_or(text);
    let groups: Vec<&str> = bare.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    let hex_only = groups
        .iter()
        .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()));
    if lengths != [8, 4, 4, 4, 12] || !hex_only {
        return Err(format!(
            "{text:?} is not a GPU UUID: expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx \
             (32 hex digits, as `nvidia-smi -L` prints them)"
        ));
    }
    Ok(format!("GPU-{}", bare.to_ascii_lowercase()))
}

/// Where the daemon of the GPU `uuid` may listen, in the order a process looks: the
/// user's own (`$XDG_RUNTIME_DIR/gpuswap/`, else `/tmp/gpuswap-<uid>/`), then a system
/// daemon's (`/run/gpuswap/`).
pub fn device_sockets(uuid: &str, uid: u32) -> [PathBuf; 2] {
    let name = format!("{uuid}.sock");
    [user_dir(uid).join(&name), Path::new(SYSTEM_DIR).join(name)]
}

/// The socket a daemon of GPU `uuid` run by `uid` listens at by default: the user's
/// own folder under `$XDG_RUNTIME_DIR`; without one, the system folder for root (a
/// service's daemon) and `/tmp/gpuswap-<uid>/` for others.
pub fn device_socket(uuid: &str, uid: u32) -> PathBuf {
    let [user, system] = device_sockets(uuid, uid);
    if uid == 0 && xdg_runtime_dir().is_none() {
        system
    } else {
        user
    }
}

/// Every per-GPU socket there is, the user's first, each folder's in name order: what
/// `gpuswap top` shows without `--socket`.
pub fn every_device_socket(uid: u32) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in [user_dir(uid), PathBuf::from(SYSTEM_DIR)] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut here: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".sock"))
                    .is_some_and(|n| parse_uuid(n).is_ok())
            })
            .collect();
        here.sort();
        found.extend(here);
    }
    found
}

/// The user's folder of per-GPU sockets.
fn user_dir(uid: u32) -> PathBuf {
    match xdg_runtime_dir() {
        Some(dir) => dir.join(FOLDER),
        None => format!("/tmp/gpuswap-{uid}").into(),
    }
}

/// `$XDG_RUNTIME_DIR`, if set and not empty.
fn xdg_runtime_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_reads_back_as_it_was_written() {
        let bytes: [u8; 16] = std::array::from_fn(|i| (i * 17) as u8);
        let text = uuid_text(&bytes);
        assert_eq!(text, "GPU-00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(parse_uuid(&text).unwrap(), text);
        assert_eq!(
            parse_uuid("00112233-4455-6677-8899-AABBCCDDEEFF").unwrap(),
            text
        );
    }

    #[test]
    fn what_is_not_a_uuid_is_named() {
        for bad in [
            "0",
            "GPU-0011223-4455-6677-8899-aabbccddeeff",
            "GPU-zz112233-4455-6677-8899-aabbccddeeff",
            "",
        ] {
            let e = parse_uuid(bad).unwrap_err();
            assert!(e.contains("not a GPU UUID"), "{e}");
        }
    }

    #[test]
    fn a_user_listens_in_their_own_folder_and_looks_in_the_systems_after() {
        let uuid = "GPU-00112233-4455-6677-8899-aabbccddeeff";
        let [user, system] = device_sockets(uuid, 1000);
        assert_eq!(device_socket(uuid, 1000), user);
        assert_eq!(
            system,
            Path::new("/run/gpuswap").join(format!("{uuid}.sock"))
        );
        assert!(user.ends_with(format!("{uuid}.sock")));
        assert_ne!(user, system);
    }
}
