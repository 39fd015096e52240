//! Where the daemon's socket lives and who may be trusted there: the path, its
//! folder's checks, the peer's credentials. A leaf: the protocol's messages know
//! nothing of it.

use std::io;
use std::path::{Path, PathBuf};

/// The environment variable naming the daemon's socket, read by the daemon, the
/// interposer and `gpuswap top`.
pub const SOCKET_ENV: &str = "GPUSWAP_SOCKET";

/// The daemon's socket: `flag` if given, else [`SOCKET_ENV`], else
/// `$XDG_RUNTIME_DIR/gpuswap.sock`, else `/tmp/gpuswap-<uid>/gpuswap.sock` (`uid`: the
/// caller's effective uid). The last is in a folder of the user's own, made 0700 by the
/// daemon ([`prepare_socket_dir`]): in the shared temporary folder itself, another user
/// could bind the name first.
pub fn socket_path(flag: Option<PathBuf>, uid: u32) -> PathBuf {
    flag.or_else(|| std::env::var_os(SOCKET_ENV).map(Into::into))
        .unwrap_or_else(|| match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(dir) if !dir.is_empty() => Path::new(&dir).join("gpuswap.sock"),
            _ => format!("/tmp/gpuswap-{uid}/gpuswap.sock").into(),
        })
}

/// For the daemon of user `uid`, before it binds `socket`: creates the socket's folder
/// with mode 0700 if it is missing, then checks it as [`socket_dir_checked`] does.
pub fn prepare_socket_dir(socket: &Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = socket_dir(socket);
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(format!(
            "cannot create the socket's folder {}: {e}",
            dir.display()
        )),
        _ => socket_dir_checked(socket, &[uid]),
    }
}

/// Whether only trusted users can create or replace a socket in `socket`'s folder: it
/// belongs to root or to one of `trusted_uids`, and neither its group nor others may
/// write in it, unless it has the sticky bit (as `/tmp` has: others may add names there
/// but not replace the daemon's; a client checks who answers, `SO_PEERCRED`, too).
pub fn socket_dir_checked(socket: &Path, trusted_uids: &[u32]) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let dir = socket_dir(socket);
    let meta = std::fs::metadata(dir)
        .map_err(|e| format!("cannot read the socket's folder {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "the socket's folder {} is not a folder",
            dir.display()
        ));
    }
    judge_socket_dir(dir, meta.uid(), meta.mode(), trusted_uids)
}

/// The process and user ids of the process at the other end of `stream`, as the kernel
/// recorded them (`SO_PEERCRED`: at its `connect` for the daemon's side, at the
/// daemon's `listen` for a client's), which a process cannot forge.
pub fn peer_credentials(stream: &std::os::unix::net::UnixStream) -> io::Result<(u32, u32)> {
    use std::os::fd::AsRawFd;
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

/// The folder `socket` is in (`.` for a bare name).
fn socket_dir(socket: &Path) -> &Path {
    match socket.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// [`socket_dir_checked`]'s verdict on a folder of owner `owner` and mode `mode`.
fn judge_socket_dir(dir: &Path, owner: u32, mode: u32, trusted_uids: &[u32]) -> Result<(), String> {
    /// Others may remove or rename only their own names in such a folder.
    const STICKY: u32 = 0o1000;
    let shown = dir.display();
    if owner != 0 && !trusted_uids.contains(&owner) {
        return Err(format!(
            "the socket's folder {shown} belongs to uid {owner}, not to you or root: its \
             owner could put a socket of theirs there; remove it, or choose another socket \
             with GPUSWAP_SOCKET or --socket"
        ));
    }
    if mode & 0o022 != 0 && mode & STICKY == 0 {
        return Err(format!(
            "the socket's folder {shown} is writable by others (mode {:o}): another user \
             could put a socket of theirs there; `chmod go-w {shown}`, or choose another \
             socket with GPUSWAP_SOCKET or --socket",
            mode & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_socket_is_in_a_folder_of_the_users_own() {
        let (socket, xdg) = (
            std::env::var_os(SOCKET_ENV),
            std::env::var_os("XDG_RUNTIME_DIR"),
        );
        // SAFETY: no other test of this crate reads the environment.
        unsafe {
            std::env::remove_var(SOCKET_ENV);
            std::env::remove_var("XDG_RUNTIME_DIR");
        }
        let path = socket_path(None, 1234);
        // SAFETY: as above.
        unsafe {
            if let Some(v) = socket {
                std::env::set_var(SOCKET_ENV, v);
            }
            if let Some(v) = xdg {
                std::env::set_var("XDG_RUNTIME_DIR", v);
            }
        }
        assert_eq!(path, Path::new("/tmp/gpuswap-1234/gpuswap.sock"));
    }

    #[test]
    fn socket_folders_others_may_write_in_or_own_are_refused() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = |dir: &Path, mode: u32| {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        let base = std::env::temp_dir().join(format!("gpuswap-wire-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let uid = std::fs::metadata(&base).unwrap().uid();
        // The daemon makes a missing folder 0700 and takes it.
        let socket = base.join("mine").join("gpuswap.sock");
        prepare_socket_dir(&socket, uid).unwrap();
        let made = std::fs::metadata(base.join("mine")).unwrap();
        assert_eq!(made.mode() & 0o777, 0o700);
        socket_dir_checked(&socket, &[uid]).unwrap();
        // Writable by everyone: refused by clients and the daemon alike.
        let open = base.join("open");
        std::fs::create_dir(&open).unwrap();
        mode(&open, 0o777);
        let socket = open.join("gpuswap.sock");
        let refused = socket_dir_checked(&socket, &[uid]).unwrap_err();
        assert!(
            refused.contains("writable by others (mode 777)"),
            "{refused}"
        );
        assert_eq!(prepare_socket_dir(&socket, uid).unwrap_err(), refused);
        // Group-writable too; sticky, as /tmp, is not (who answers is checked then).
        mode(&open, 0o770);
        assert!(socket_dir_checked(&socket, &[uid]).is_err());
        mode(&open, 0o1777);
        socket_dir_checked(&socket, &[uid]).unwrap();
        // Someone else's folder, even 0700 (its owner may replace the socket).
        let theirs = judge_socket_dir(Path::new("/tmp/gpuswap-1000"), 1001, 0o40700, &[1000]);
        assert!(theirs.unwrap_err().contains("belongs to uid 1001"));
        judge_socket_dir(Path::new("/run/gpuswap"), 0, 0o40755, &[1000]).unwrap();
        judge_socket_dir(Path::new("/run/gpuswap"), 999, 0o40755, &[1000, 999]).unwrap();
        assert!(socket_dir_checked(&base.join("missing/x.sock"), &[uid]).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
