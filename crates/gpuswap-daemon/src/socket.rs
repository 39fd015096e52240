//! The daemon's Unix socket: created with mode 0600, and each peer's credentials read
//! with `SO_PEERCRED`. The only module of the daemon that talks to C.

use std::io;
use std::os::unix::net::UnixListener;
use std::path::Path;

/// The effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Binds `path` so that the socket file is created with mode 0600: the umask is set to
/// 0177 around the bind (the daemon is single-threaded while it binds), so there is no
/// moment at which others may connect.
pub fn bind_private(path: &Path) -> io::Result<UnixListener> {
    // SAFETY: umask only swaps the process's file creation mask.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above; restores the mask.
    unsafe { libc::umask(old) };
    bound
}

/// Raises this process's soft limit of open files to its hard limit, as far as the
/// kernel allows; the limit stays as it was if that fails.
pub fn raise_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given; setrlimit reads it.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
