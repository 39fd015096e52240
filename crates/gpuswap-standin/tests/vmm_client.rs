//! The VMM client on the stand-in alone: the stand-in's virtual memory management
//! (partial mappings, a handle at two addresses, retained handles, properties, exports)
//! keeps every byte, and an export gives a file descriptor.

use std::process::Command;

#[test]
fn the_vmm_client_verifies_every_byte_on_the_stand_in() {
    let shm = format!("/gpuswap-standin-vmm-{}", std::process::id());
    let out = Command::new(gpuswap_standin::vmm_client())
        .args(["--rounds", "3", "--pause-resume", "--export"])
        .env("LD_LIBRARY_PATH", gpuswap_standin::dir())
        .env("GPUSWAP_STANDIN_SHM", &shm)
        .env("GPUSWAP_STANDIN_VRAM", "128MiB")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(format!("/dev/shm{shm}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("export answered 0"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("{\"ok\":true"), "{stdout}");
}
