//! The daemon's Unix socket: created with mode 0600, and each peer's credentials read
//! with `SO_PEERCRED`. The only module of the daemon that talks to C.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Opens the socket at `path` to the group `gid` (mode 0660, the group its owner): a
/// system daemon serving other users. The connect permission is the kernel's check;
/// the endpoint then admits peers of any uid.
pub fn share_with_group(path: &Path, gid: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, None, Some(gid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
}

/// The group id of `group`: a number, or a name looked up in /etc/group (the daemon
/// links no NSS: a group served only by LDAP or sssd is given by number).
pub fn group_id(group: &str) -> Result<u32, String> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let table = std::fs::read_to_string("/etc/group")
        .map_err(|e| format!("cannot read /etc/group to find group {group:?}: {e}"))?;
    table
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let gid = fields.nth(1)?.parse::<u32>().ok()?;
            (name == group).then_some(gid)
        })
        .next()
        .ok_or_else(|| format!("no group {group:?} in /etc/group (give its number instead)"))
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

/// Set by SIGTERM or SIGINT once [`stop_on_signals`] has installed their handler.
static STOP: AtomicBool = AtomicBool::new(false);

/// The handler: only an atomic store, which is async-signal-safe (and cannot panic).
extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Makes SIGTERM and SIGINT ask the daemon to stop, cleanly, instead of ending it
/// where it stands: returns what the serve loop asks (`serve`'s `stop`), which then
/// closes every connection (each process carries on unmanaged) and removes the socket.
pub fn stop_on_signals() -> fn() -> bool {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic; installing it has no other
        // precondition.
        unsafe { libc::signal(signal, on_stop_signal as *const () as libc::sighandler_t) };
    }
    || STOP.load(Ordering::SeqCst)
}

/// Set by SIGHUP once [`read_again_on_hangup`] has installed its handler.
static HANGUP: AtomicBool = AtomicBool::new(false);

/// The handler: only an atomic store, as [`on_stop_signal`].
extern "C" fn on_hangup(_: libc::c_int) {
    HANGUP.store(true, Ordering::SeqCst);
}

/// Makes SIGHUP ask the daemon to read its `--contracts-dir` again (instead of ending
/// it, SIGHUP's default): returns whether one came since it was last asked.
pub fn read_again_on_hangup() -> fn() -> bool {
    // SAFETY: as in `stop_on_signals`.
    unsafe { libc::signal(libc::SIGHUP, on_hangup as *const () as libc::sighandler_t) };
    || HANGUP.swap(false, Ordering::SeqCst)
}

/// A process the daemon waits to see exit: by a pidfd where the kernel has them (Linux
/// 5.3), which a pid reused by another process cannot fool, else by its pid.
pub struct Watched {
    pid: u32,
    fd: Option<OwnedFd>,
}

impl Watched {
    /// Starts watching process `pid` (one that has exited already is seen so at once).
    pub fn new(pid: u32) -> Self {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let fd = (fd >= 0).then(|| {
            // SAFETY: a descriptor the call just opened, owned by nobody else.
            unsafe { OwnedFd::from_raw_fd(fd as i32) }
        });
        Self { pid, fd }
    }

    /// Whether the process has exited (a zombie has: its memory is released).
    pub fn exited(&self) -> bool {
        match &self.fd {
            Some(fd) => {
                let mut poll = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; a zero timeout does not block.
                let ready = unsafe { libc::poll(&mut poll, 1, 0) };
                ready > 0 && poll.revents & libc::POLLIN != 0
            }
            None => {
                // SAFETY: signal 0 only checks that the process exists.
                let rc = unsafe { libc::kill(self.pid as libc::pid_t, 0) };
                rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            }
        }
    }
}
