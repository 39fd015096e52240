//! Whom a client (the interposer, `gpuswap top`) takes for its daemon. Before the
//! process says who it is, the socket's folder must be one only trusted users can put
//! a socket in
//! (`super::socket::socket_dir_checked`), and the process answering on the socket must
//! run as this user, as root, or as the daemon user an operator names in
//! `GPUSWAP_DAEMON_USER` (a name or a uid): a socket of another user's would learn the
//! process's name and pid, and could suspend or kill it.

use std::ffi::{CString, c_char};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The environment variable naming the daemon's user when it is neither the process's
/// user nor root.
const DAEMON_USER_ENV: &str = "GPUSWAP_DAEMON_USER";

/// The process listening on the daemon's socket, as the kernel recorded it when it
/// listened (`SO_PEERCRED`, which a process cannot forge).
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// Its process.
    pub pid: u32,
    /// Its user.
    pub uid: u32,
}

/// Checks the folder of the socket at `path` and the process answering on `stream`;
/// returns that process, the daemon.
pub fn trusted_daemon(stream: &UnixStream, path: &Path) -> Result<Peer, String> {
    // SAFETY: geteuid has no preconditions.
    let own = unsafe { libc::geteuid() };
    let named = daemon_user()?;
    let trusted: Vec<u32> = std::iter::once(own).chain(named).collect();
    super::socket::socket_dir_checked(path, &trusted)?;
    let (pid, uid) = super::socket::peer_credentials(stream)
        .map_err(|e| format!("cannot learn who answers on {}: {e}", path.display()))?;
    let peer = Peer { pid, uid };
    check_daemon_uid(peer, own, named).map_err(|why| format!("{} {why}", path.display()))?;
    Ok(peer)
}

/// Whether a daemon of `peer.uid` is trusted by a process of `own` uid, given the
/// `named` daemon user; the error completes a sentence that starts with the socket.
fn check_daemon_uid(peer: Peer, own: u32, named: Option<u32>) -> Result<(), String> {
    if peer.uid == own || peer.uid == 0 || named == Some(peer.uid) {
        return Ok(());
    }
    Err(format!(
        "is answered by a process of uid {} (pid {}), neither you (uid {own}), root nor \
         {DAEMON_USER_ENV}: it may be another user's, who took the socket's name; \
         refusing to tell it anything. Start your own daemon, name its user in \
         {DAEMON_USER_ENV}, or set GPUSWAP_PASSTHROUGH=1 to run without it",
        peer.uid, peer.pid
    ))
}

/// `GPUSWAP_DAEMON_USER` as a uid; `None` when unset or empty.
fn daemon_user() -> Result<Option<u32>, String> {
    match std::env::var(DAEMON_USER_ENV) {
        Ok(text) if !text.is_empty() => parse_user(&text, uid_of).map(Some),
        _ => Ok(None),
    }
}

/// A uid, or a user's name that `lookup` finds.
fn parse_user(text: &str, lookup: impl Fn(&str) -> Option<u32>) -> Result<u32, String> {
    text.parse()
        .ok()
        .or_else(|| lookup(text))
        .ok_or_else(|| format!("{DAEMON_USER_ENV}={text:?} is neither a uid nor a user's name"))
}

/// The uid of the user called `name` (the password database: /etc/passwd, NSS).
fn uid_of(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    // SAFETY: an all-zero passwd is a valid value for getpwnam_r to fill.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut text = vec![0 as c_char; 16 << 10];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the sizes given; `entry` points into `text`,
    // which lives until the uid is read.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut entry,
            text.as_mut_ptr(),
            text.len(),
            &mut found,
        )
    };
    (rc == 0 && !found.is_null()).then_some(entry.pw_uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_user_root_or_the_named_daemon_user_is_trusted() {
        let peer = |uid| Peer { pid: 42, uid };
        assert!(check_daemon_uid(peer(1000), 1000, None).is_ok());
        assert!(check_daemon_uid(peer(0), 1000, None).is_ok());
        assert!(check_daemon_uid(peer(999), 1000, Some(999)).is_ok());
        let refused = check_daemon_uid(peer(1001), 1000, Some(999)).unwrap_err();
        assert!(
            refused.contains("uid 1001 (pid 42)") && refused.contains(DAEMON_USER_ENV),
            "{refused}"
        );
        assert!(check_daemon_uid(peer(1001), 1000, None).is_err());
    }

    #[test]
    fn the_daemon_user_is_a_uid_or_a_name() {
        let lookup = |name: &str| (name == "gpuswap").then_some(990);
        assert_eq!(parse_user("1234", lookup), Ok(1234));
        assert_eq!(parse_user("gpuswap", lookup), Ok(990));
        let unknown = parse_user("nobody-here", lookup).unwrap_err();
        assert!(
            unknown.contains("GPUSWAP_DAEMON_USER=\"nobody-here\""),
            "{unknown}"
        );
        assert_eq!(uid_of("root"), Some(0));
        assert_eq!(uid_of("no-such-user-of-gpuswap"), None);
    }
}
