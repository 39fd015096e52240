//! A daemon serving on a thread of the test (for the test binaries that run one).

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gpuswap_daemon::{DaemonConfig, serve};

/// A daemon serving on a thread of this test, stopped when dropped.
pub struct Daemon {
    pub socket: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// Starts a daemon on its own thread and waits for its socket.
pub fn start(config: DaemonConfig) -> Daemon {
    let socket = config.socket.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread =
        std::thread::spawn(move || serve(config, &|| flag.load(Ordering::Relaxed)).unwrap());
    for _ in 0..200 {
        if UnixStream::connect(&socket).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Daemon {
        socket,
        stop,
        thread: Some(thread),
    }
}
