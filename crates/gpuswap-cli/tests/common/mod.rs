//! What the end-to-end tests share: a world of one daemon, its socket and the stand-in's
//! accounting, the stand-in's client under the interposer, and what the client says.

// Each test file uses a part of this.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpuswap_daemon::observe;
pub use gpuswap_standin::verified;

pub const MIB: u64 = 1 << 20;

/// The interposer beside the test's gpuswap binary (both in the profile's folder).
pub fn interposer() -> PathBuf {
    gpuswap_standin::interposer(Path::new(env!("CARGO_BIN_EXE_gpuswap")).parent().unwrap())
}

/// One test's world: its socket, its stand-in accounting, its daemon.
pub struct World {
    pub dir: PathBuf,
    pub shm: String,
    pub daemon: Child,
}

impl World {
    pub fn new(name: &str, vram_mib: u64) -> World {
        Self::with_contracts(name, vram_mib, None)
    }

    /// A world whose daemon reads `contracts` (a `--contracts` file's text).
    pub fn with_contracts(name: &str, vram_mib: u64, contracts: Option<&str>) -> World {
        Self::with_daemon_args(name, vram_mib, contracts, &[])
    }

    /// A world whose daemon reads `contracts` and takes the `extra` arguments.
    pub fn with_daemon_args(
        name: &str,
        vram_mib: u64,
        contracts: Option<&str>,
        extra: &[&str],
    ) -> World {
        Self::start(name, vram_mib, contracts, extra, true)
    }

    /// A world whose daemon takes the `extra` arguments and logs what it does (not
    /// `--quiet`) into a file, read by [`World::log`].
    pub fn logged(name: &str, vram_mib: u64, extra: &[&str]) -> World {
        Self::start(name, vram_mib, None, extra, false)
    }

    /// The daemon's log so far (a world made by [`World::logged`]).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    fn start(
        name: &str,
        vram_mib: u64,
        contracts: Option<&str>,
        extra: &[&str],
        quiet: bool,
    ) -> World {
        let dir = std::env::temp_dir().join(format!("gpuswap-e2e-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("d.sock");
        let mut daemon = Command::new(env!("CARGO_BIN_EXE_gpuswap"));
        daemon
            .args(["daemon", "--vram", &format!("{vram_mib}MiB"), "--socket"])
            .arg(&socket);
        if quiet {
            daemon.arg("--quiet");
        } else {
            daemon.stderr(std::fs::File::create(dir.join("daemon.log")).unwrap());
        }
        if let Some(text) = contracts {
            let file = dir.join("contracts.toml");
            std::fs::write(&file, text).unwrap();
            daemon.arg("--contracts").arg(file);
        }
        let daemon = daemon.args(extra).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while observe(&socket).is_err() {
            assert!(Instant::now() < deadline, "the daemon did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        World {
            dir,
            shm: format!("/gpuswap-e2e-{}-{name}", std::process::id()),
            daemon,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("d.sock")
    }

    /// The stand-in's client under the interposer, with the stand-in's VRAM the size the
    /// daemon manages.
    pub fn client(&self, vram_mib: u64, args: &[&str]) -> Command {
        let mut c = Command::new(gpuswap_standin::client());
        c.args(args)
            .env("LD_LIBRARY_PATH", gpuswap_standin::dir())
            .env("LD_PRELOAD", interposer())
            .env("GPUSWAP_SOCKET", self.socket())
            .env("GPUSWAP_STANDIN_VRAM", format!("{vram_mib}MiB"))
            .env("GPUSWAP_STANDIN_SHM", &self.shm)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Polls the daemon until `done`, keeping each tenant's largest figures.
    pub fn watch(&self, mut done: impl FnMut() -> bool) -> BTreeMap<String, (u64, u64)> {
        let mut seen: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while !done() {
            assert!(Instant::now() < deadline, "clients did not finish");
            if let Ok(snap) = observe(&self.socket()) {
                for t in snap.tenants {
                    let e = seen.entry(t.name).or_default();
                    e.0 = e.0.max(t.evicted_bytes);
                    e.1 = e.1.max(t.returned_bytes);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        seen
    }

    /// The daemon holds nothing once every client is gone.
    pub fn assert_empty(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let snap = observe(&self.socket()).unwrap();
            if snap.tenants.is_empty() && snap.vram_used_bytes == 0 && snap.host_used_bytes == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon still holds memory: {snap:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the tenants hold `n` buffers in all.
    pub fn wait_buffers(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let snap = observe(&self.socket()).unwrap();
            if snap.tenants.iter().map(|t| t.buffers).sum::<u64>() >= n {
                return;
            }
            assert!(Instant::now() < deadline, "no {n} buffers: {snap:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until `name` is suspended by the daemon.
    pub fn wait_suspended(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let snap = observe(&self.socket()).unwrap();
            if snap.tenants.iter().any(|t| t.name == name && t.suspended) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} was never suspended: {snap:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        let _ = std::fs::remove_file(format!("/dev/shm{}", self.shm));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
