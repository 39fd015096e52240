//! The daemon's Unix socket: created with mode 0600, and each peer's credentials read
//! with `SO_PEERCRED`. The only module of the daemon that talks to C.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
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

/// The peer's process and user ids, as the kernel recorded them at `connect`.
pub fn peer(stream: &UnixStream) -> io::Result<(u32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given; the fd is open
    // for the lifetime of `stream`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cred.pid as u32, cred.uid))
}
