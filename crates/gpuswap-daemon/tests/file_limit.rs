//! The daemon at its file limit: a test binary of its own, for it lowers the limit of
//! the whole process.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpuswap_core::MIB;
use gpuswap_daemon::{DaemonConfig, observe, serve};

mod common;
use common::config;

/// This process's CPU time, user and system, so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let of = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    of(usage.ru_utime) + of(usage.ru_stime)
}

/// How many files this process has open (numbered below 1024).
fn open_files() -> u64 {
    // SAFETY: F_GETFD only reads the descriptor's flags, or fails on a closed one.
    (0..1024)
        .filter(|fd| unsafe { libc::fcntl(*fd, libc::F_GETFD) } >= 0)
        .count() as u64
}

/// Lowers this process's limit of open files, soft and hard (so that the daemon cannot
/// raise it back), to `n`.
fn limit_files(n: u64) {
    let limit = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: setrlimit reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
}

/// Set in the child process that plays the clients.
const CLIENT_ENV: &str = "GPUSWAP_TEST_NOFILE_CLIENT";

/// The child's part: connect to the socket 60 times, and after 3 s exit with
/// success only if the daemon has closed none of the connections (past the harness,
/// which would report a second run of the test).
fn play_clients(socket: &str) -> ! {
    let end = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(socket).is_err() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    let held: Vec<UnixStream> = (0..60)
        .filter_map(|_| UnixStream::connect(socket).ok())
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    // A connection the daemon closed reads its end; one it keeps, or has yet to
    // accept, has nothing to read.
    let closed = held
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).unwrap();
            matches!((&**s).read(&mut [0]), Ok(0))
        })
        .count();
    eprintln!("{} connections, {closed} closed by the daemon", held.len());
    std::process::exit(i32::from(held.len() < 60 || closed > 0))
}

/// When every file the daemon may open holds a connection, `accept` fails with EMFILE
/// at once, however many connections wait: the accept loop once retried at full
/// speed, a core busy; with one file left, the accepted connection's second file
/// failed and the waiting connections were closed one after the other. It backs off
/// now, closes none, and serves again once a connection ends. The clients are another
/// process (this test binary again), as they are for a daemon.
#[test]
fn at_the_file_limit_the_accept_loop_backs_off_and_recovers() {
    if let Ok(socket) = std::env::var(CLIENT_ENV) {
        play_clients(&socket);
    }
    let config = DaemonConfig {
        vram_bytes: Some(64 * MIB),
        ..config("nofile")
    };
    let socket = config.socket.clone();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "--nocapture",
            "at_the_file_limit_the_accept_loop_backs_off_and_recovers",
        ])
        .env(CLIENT_ENV, &socket)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Twenty connections take every file the daemon may open, beside those open now
    // and its listening socket.
    limit_files(open_files() + 1 + 20);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let daemon =
        std::thread::spawn(move || serve(config, &|| flag.load(Ordering::Relaxed)).unwrap());
    // The child connects within milliseconds of the daemon's start, and holds its
    // connections for 3 s.
    std::thread::sleep(Duration::from_millis(1500));
    let (cpu, wall) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let busy = cpu_time() - cpu;
    eprintln!(
        "at the limit the daemon used {busy:?} of CPU in {:?}",
        wall.elapsed()
    );
    assert!(
        busy < Duration::from_millis(300),
        "spinning: {busy:?} of CPU"
    );
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "the clients saw connections closed: {status}"
    );
    let end = Instant::now() + Duration::from_secs(10);
    let snapshot = loop {
        match observe(&socket) {
            Ok(s) => break s,
            Err(e) if Instant::now() > end => panic!("the daemon does not answer: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    assert_eq!(snapshot.tenants.len(), 0);
    stop.store(true, Ordering::Relaxed);
    daemon.join().unwrap();
}
