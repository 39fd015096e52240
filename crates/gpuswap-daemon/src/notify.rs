//! Readiness for systemd (`Type=notify`): once the socket listens, the daemon says
//! `READY=1` on the datagram socket systemd names in `NOTIFY_SOCKET` (sd_notify(3)'s
//! protocol), and `STOPPING=1` when it stops. Without the variable nothing is sent; a
//! failure to send is logged, never fatal (the service then times out as systemd
//! decides, with the daemon serving).

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// systemd's variable naming its notification socket (sd_notify(3)).
const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Sends `state` (`READY=1`, `STOPPING=1`) to systemd, if it waits for one. `Err` says
/// why it could not, for the log.
pub(crate) fn notify(state: &str) -> Result<(), String> {
    match std::env::var_os(NOTIFY_SOCKET) {
        Some(path) => notify_to(&path, state),
        None => Ok(()),
    }
}

/// Sends `state` to the notification socket `path`.
fn notify_to(path: &std::ffi::OsStr, state: &str) -> Result<(), String> {
    let address = address(path.as_encoded_bytes())
        .map_err(|e| format!("{NOTIFY_SOCKET}={}: {e}", path.to_string_lossy()))?;
    let socket = UnixDatagram::unbound().map_err(|e| e.to_string())?;
    socket
        .send_to_addr(state.as_bytes(), &address)
        .map(drop)
        .map_err(|e| format!("{NOTIFY_SOCKET}={}: {e}", path.to_string_lossy()))
}

/// The socket's address: a path, or an abstract name written with a leading `@`
/// (sd_notify(3)).
fn address(name: &[u8]) -> std::io::Result<SocketAddr> {
    match name.strip_prefix(b"@") {
        Some(abstract_name) => {
            <SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(abstract_name)
        }
        None => SocketAddr::from_pathname(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_reaches_the_socket_systemd_names() {
        let dir = std::env::temp_dir().join(format!("gpuswap-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let systemd = UnixDatagram::bind(&path).unwrap();
        notify_to(path.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = systemd.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let gone = dir.join("nobody.sock");
        assert!(
            notify_to(gone.as_os_str(), "READY=1")
                .unwrap_err()
                .contains("nobody.sock")
        );
        let name = format!("@gpuswap-notify-{}", std::process::id());
        let abstract_systemd = UnixDatagram::bind_addr(&address(name.as_bytes()).unwrap()).unwrap();
        notify_to(std::ffi::OsStr::new(&name), "STOPPING=1").unwrap();
        let n = abstract_systemd.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
