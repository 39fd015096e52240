//! IPC of managed buffers (issue 41, item 4), by descriptor passing, the way CUDA's own
//! virtual memory IPC works: a real driver exports with `cuIpcGetMemHandle` only
//! `cuMemAlloc`'s own memory, and a managed buffer is a reserved range mapped chunk by
//! chunk with the interposer's `cuMemCreate` handles.
//!
//! **Exporter** (`cuIpcGetMemHandle` of an address in a managed buffer): the buffer is
//! pinned where it is (`Client::pin`: its chunks re-created in memory that exports as
//! a POSIX file descriptor, at their addresses; the daemon no longer moves it, and the
//! process counts it as pinned, which `top` shows), and the program gets a gpuswap
//! handle in its 64 bytes: a magic, the exporter's pid, the buffer's address and size,
//! and a random token, the capability to open it. A thread of the interposer serves
//! the exports on an abstract unix socket named by the pid (`\0gpuswap-ipc-PID`, a
//! sequenced-packet socket: no file, gone with the process): to a peer that presents a
//! valid handle it sends, chunk by chunk, the chunk's offset and length with a
//! descriptor of its memory (`SCM_RIGHTS`).
//!
//! **Importer** (`cuIpcOpenMemHandle_v2` of a gpuswap handle, in a process under
//! gpuswap too): it connects, reserves a range of the buffer's size, imports each
//! descriptor (`cuMemImportFromShareableHandle`), maps it at its offset, releases the
//! handle (the mapping keeps the memory) and closes the descriptor, then grants the
//! device access to the whole range. The importer counts nothing with its daemon: the
//! memory is the exporter's, counted there once. Opening a handle again returns the
//! same range, one more reference; `cuIpcCloseMemHandle` of the last unmaps and frees
//! the range. Other handles (the driver's own) go to the driver unchanged, both ways.
//!
//! **Freeing an exported buffer while imported**: legacy CUDA IPC calls it undefined;
//! here, as with CUDA's virtual memory IPC, the importer's mapping keeps the memory
//! alive until it closes the handle, while the exporter's books (and so the daemon's)
//! drop the buffer at its `cuMemFree`: that memory is then counted nowhere. A handle
//! opened after the free, or after the exporter ended, fails with
//! `CUDA_ERROR_INVALID_HANDLE` and a warning.
//!
//! Both processes must share a network namespace (abstract sockets live there), as
//! CUDA's legacy IPC wants them to share the IPC and pid namespaces.

use std::collections::BTreeMap;
use std::ffi::c_uint;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::socket::{
    AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
    UnixAddr, accept4, bind, connect, listen, recv, recvmsg, send, sendmsg, setsockopt, socket,
    sockopt,
};
use nix::sys::time::{TimeVal, TimeValLike};

use crate::client::Client;
use crate::diag;
use crate::ffi::{self, CuResult, DevPtr, driver};

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcMemHandle {
    pub reserved: [u8; 64],
}

/// The first bytes of a gpuswap handle (a driver's own handle is opaque; the
/// stand-in's starts with a 4-byte magic of its own).
const MAGIC: [u8; 8] = *b"gpuswIPC";

/// What a gpuswap handle says: whose export, of which buffer, and the capability to
/// open it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    pid: u32,
    base: DevPtr,
    bytes: u64,
    token: [u8; 16],
}

impl Ticket {
    /// The handle's 64 bytes: the magic, the pid at 8, the address at 16, the size at
    /// 24, the token at 32 (little-endian), zeros after.
    fn handle(&self) -> IpcMemHandle {
        let mut reserved = [0u8; 64];
        reserved[..8].copy_from_slice(&MAGIC);
        reserved[8..12].copy_from_slice(&self.pid.to_le_bytes());
        reserved[16..24].copy_from_slice(&self.base.to_le_bytes());
        reserved[24..32].copy_from_slice(&self.bytes.to_le_bytes());
        reserved[32..48].copy_from_slice(&self.token);
        IpcMemHandle { reserved }
    }

    /// The ticket in `handle`, if it is a gpuswap handle.
    pub fn read(handle: &IpcMemHandle) -> Option<Ticket> {
        let r = &handle.reserved;
        let word = |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().expect("8 bytes"));
        (r[..8] == MAGIC).then(|| Ticket {
            pid: u32::from_le_bytes(r[8..12].try_into().expect("4 bytes")),
            base: word(16),
            bytes: word(24),
            token: r[32..48].try_into().expect("16 bytes"),
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The abstract socket's name for the exports of process `pid`.
fn address(pid: u32) -> nix::Result<UnixAddr> {
    UnixAddr::new_abstract(format!("gpuswap-ipc-{pid}").as_bytes())
}

/// A unix socket of sequenced packets: each message arrives whole, with its
/// descriptor.
fn seqpacket() -> nix::Result<OwnedFd> {
    socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
}

/// How long either side waits for the other before it gives the exchange up.
const PATIENCE_S: i64 = 10;

fn be_patient(socket: &OwnedFd) -> nix::Result<()> {
    let patience = TimeVal::seconds(PATIENCE_S);
    setsockopt(socket, sockopt::ReceiveTimeout, &patience)?;
    setsockopt(socket, sockopt::SendTimeout, &patience)
}

// ------------------------------------------------------------------ the exporter

/// An exported buffer: its size, its token and the client that holds it.
struct Export {
    bytes: u64,
    token: [u8; 16],
    client: &'static Client,
}

/// Exports by buffer address.
static EXPORTS: Mutex<BTreeMap<DevPtr, Export>> = Mutex::new(BTreeMap::new());

/// The buffer at `base` was freed: its export, if any, is gone, so a handle of it opens
/// nothing and a new buffer at that address gets a token of its own.
pub fn forget(base: DevPtr) {
    lock(&EXPORTS).remove(&base);
}

/// `cuIpcGetMemHandle` of `dptr`: the handle of the managed buffer holding it, pinned
/// for the export; `None` if `dptr` is in no buffer of `client`'s; else the CUDA error
/// and why. A buffer exported again, or by two threads at once, keeps one handle; a
/// freed buffer's export is forgotten ([`forget`]), so a new buffer at its address gets
/// a new token and a handle of the freed one opens nothing.
pub fn export(
    client: &'static Client,
    dptr: DevPtr,
) -> Option<Result<IpcMemHandle, (CuResult, String)>> {
    if let Err(e) = listening() {
        return Some(Err((ffi::CUDA_ERROR_MAP_FAILED, e)));
    }
    let (base, bytes) = match client.pin(dptr)? {
        Ok(pinned) => pinned,
        Err(e) => return Some(Err((ffi::CUDA_ERROR_OUT_OF_MEMORY, e))),
    };
    let mut exports = lock(&EXPORTS);
    let token = match exports.get(&base) {
        Some(e) if e.bytes == bytes => e.token,
        _ => {
            let token = match new_token() {
                Ok(token) => token,
                Err(e) => return Some(Err((ffi::CUDA_ERROR_MAP_FAILED, e))),
            };
            let export = Export {
                bytes,
                token,
                client,
            };
            exports.insert(base, export);
            token
        }
    };
    let pid = std::process::id();
    Some(Ok(Ticket {
        pid,
        base,
        bytes,
        token,
    }
    .handle()))
}

/// 16 random bytes from the kernel.
fn new_token() -> Result<[u8; 16], String> {
    let mut token = [0u8; 16];
    // SAFETY: `token` is valid for 16 bytes' write.
    let n = unsafe { libc::getrandom(token.as_mut_ptr().cast(), token.len(), 0) };
    if n == token.len() as isize {
        Ok(token)
    } else {
        Err(format!(
            "no random token: {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// The exports' listening socket once its thread serves it (-1 before): whether exports
/// are served, and the descriptor a forked child closes.
static LISTENER: AtomicI32 = AtomicI32::new(-1);

/// In a child after `fork`, closes its copy of the exports' socket: the exports are the
/// parent's, and a copy held open would keep the parent's name bound after the parent
/// ended, so that an importer of a stale handle would wait for an answer nobody gives
/// instead of being refused at once. Only `close`, which is async-signal-safe.
pub fn close_in_child() {
    let fd = LISTENER.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the child's copy of a descriptor no thread of the child uses (the
        // serving thread is the parent's and did not survive the fork).
        unsafe { libc::close(fd) };
    }
}

/// Binds the exports' socket and starts the thread that serves it, once it works; says
/// why not (a later export tries again: the failure may pass).
fn listening() -> Result<(), String> {
    static STARTING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = lock(&STARTING);
    if LISTENER.load(Ordering::Relaxed) >= 0 {
        return Ok(());
    }
    let io = |e: nix::Error| format!("the IPC exports' socket: {e}");
    let listener = seqpacket().map_err(io)?;
    bind(
        listener.as_raw_fd(),
        &address(std::process::id()).map_err(io)?,
    )
    .map_err(io)?;
    listen(&listener, Backlog::new(16).map_err(io)?).map_err(io)?;
    let fd = listener.as_raw_fd();
    // Stored only once the thread owns the socket: a failed spawn drops (closes) it, and
    // the number may be reused.
    std::thread::Builder::new()
        .name("gpuswap-ipc".into())
        .spawn(move || serve(listener))
        .map_err(|e| format!("the IPC exports' thread: {e}"))?;
    LISTENER.store(fd, Ordering::Relaxed);
    Ok(())
}

/// The exports' thread: answers one importer at a time.
fn serve(listener: OwnedFd) {
    loop {
        match accept4(listener.as_fd(), SockFlag::SOCK_CLOEXEC) {
            Ok(peer) => {
                let answered =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| answer(&peer)));
                match answered {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => diag::warn(&format!("an IPC import was refused: {e}")),
                    Err(_) => diag::warn("internal error (a panic) answering an IPC import"),
                }
            }
            Err(nix::Error::EINTR | nix::Error::ECONNABORTED) => {}
            // Out of descriptors or memory for a moment: the handles given out stay
            // valid, so wait and serve on.
            Err(
                e @ (nix::Error::EMFILE
                | nix::Error::ENFILE
                | nix::Error::ENOBUFS
                | nix::Error::ENOMEM),
            ) => {
                diag::warn(&format!("an IPC import waits: {e}"));
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => {
                diag::warn(&format!("IPC exports are no longer served: {e}"));
                return;
            }
        }
    }
}

/// One exporter's message: (status: a CUDA error, 0 for none; offset; length), the
/// chunk's descriptor attached; a length of 0 ends the chunks.
const MESSAGE_BYTES: usize = 24;

fn message(status: CuResult, offset: u64, len: u64) -> [u8; MESSAGE_BYTES] {
    let mut m = [0u8; MESSAGE_BYTES];
    m[..4].copy_from_slice(&status.to_le_bytes());
    m[8..16].copy_from_slice(&offset.to_le_bytes());
    m[16..].copy_from_slice(&len.to_le_bytes());
    m
}

/// Sends one message, with `fd` if given.
fn send_message(
    peer: &OwnedFd,
    m: [u8; MESSAGE_BYTES],
    fd: Option<&OwnedFd>,
) -> Result<(), String> {
    let fds: Vec<RawFd> = fd.iter().map(|fd| fd.as_raw_fd()).collect();
    let rights = [ControlMessage::ScmRights(&fds)];
    let cmsgs = if fds.is_empty() { &[][..] } else { &rights[..] };
    sendmsg::<()>(
        peer.as_raw_fd(),
        &[IoSlice::new(&m)],
        cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map(drop)
    .map_err(|e| format!("sending to the importer: {e}"))
}

/// Reads the importer's handle and sends the buffer's chunks, or why not.
fn answer(peer: &OwnedFd) -> Result<(), String> {
    be_patient(peer).map_err(|e| e.to_string())?;
    let mut handle = IpcMemHandle { reserved: [0; 64] };
    let n = recv(peer.as_raw_fd(), &mut handle.reserved, MsgFlags::empty())
        .map_err(|e| format!("reading the handle: {e}"))?;
    let export = Ticket::read(&handle).filter(|_| n == handle.reserved.len());
    let found = export.and_then(|t| {
        let exports = lock(&EXPORTS);
        let e = exports.get(&t.base)?;
        (e.token == t.token && e.bytes == t.bytes).then_some((e.client, t.base, t.bytes))
    });
    let Some((client, base, bytes)) = found else {
        send_message(peer, message(ffi::CUDA_ERROR_INVALID_HANDLE, 0, 0), None)?;
        return Err("an unknown handle".into());
    };
    for index in 0.. {
        match client.exported_chunk(base, bytes, index) {
            Ok(Some((offset, len, fd))) => send_message(peer, message(0, offset, len), Some(&fd))?,
            Ok(None) => return send_message(peer, message(0, 0, 0), None),
            Err(e) => {
                send_message(peer, message(ffi::CUDA_ERROR_INVALID_HANDLE, 0, 0), None)?;
                return Err(e);
            }
        }
    }
    unreachable!("a buffer has fewer than usize::MAX chunks")
}

// ------------------------------------------------------------------ the importer

/// An opened gpuswap handle: its ticket, how many opens it answered, and the spans
/// (offset, length) mapped in its range.
struct Import {
    ticket: Ticket,
    refs: u32,
    spans: Vec<(u64, u64)>,
}

/// Imports by the address they are mapped at.
static IMPORTS: Mutex<BTreeMap<DevPtr, Import>> = Mutex::new(BTreeMap::new());

/// `cuIpcOpenMemHandle_v2` of a gpuswap handle: the address of the exported buffer
/// mapped here, or the CUDA error the driver would give (said in a warning).
pub fn open(ticket: Ticket, flags: c_uint) -> Result<DevPtr, CuResult> {
    // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, the only flag, concerns other devices: the
    // buffer is on this one.
    if flags & !1 != 0 {
        return Err(ffi::CUDA_ERROR_INVALID_VALUE);
    }
    // As CUDA: a process cannot open its own export.
    if ticket.pid == std::process::id() || driver::current_context().is_null() {
        return Err(ffi::CUDA_ERROR_INVALID_CONTEXT);
    }
    let mut imports = lock(&IMPORTS);
    if let Some((va, import)) = imports.iter_mut().find(|(_, i)| i.ticket == ticket) {
        import.refs += 1;
        return Ok(*va);
    }
    let warn = |rc: CuResult, why: String| {
        diag::warn(&format!(
            "cuIpcOpenMemHandle of process {}'s buffer failed (CUDA error {rc}): {why}",
            ticket.pid
        ));
        rc
    };
    let peer = ask(&ticket).map_err(|e| {
        warn(
            ffi::CUDA_ERROR_INVALID_HANDLE,
            format!("{e} (its exporter ended?)"),
        )
    })?;
    let va =
        driver::reserve(ticket.bytes, 0).map_err(|e| warn(ffi::CUDA_ERROR_OUT_OF_MEMORY, e))?;
    let mut spans = Vec::new();
    let mapped = map_chunks(&peer, va, ticket.bytes, &mut spans).and_then(|()| {
        driver::set_access(va, ticket.bytes).map_err(|e| (ffi::CUDA_ERROR_MAP_FAILED, e))
    });
    if let Err((rc, why)) = mapped {
        if let Err(e) = unmap(va, ticket.bytes, &spans) {
            diag::warn(&format!("undoing a failed IPC import: {e}"));
        }
        return Err(warn(rc, why));
    }
    let import = Import {
        ticket,
        refs: 1,
        spans,
    };
    imports.insert(va, import);
    Ok(va)
}

/// Connects to the exporter and presents the handle.
fn ask(ticket: &Ticket) -> Result<OwnedFd, String> {
    let io = |e: nix::Error| format!("its export socket: {e}");
    let peer = seqpacket().map_err(io)?;
    be_patient(&peer).map_err(io)?;
    connect(peer.as_raw_fd(), &address(ticket.pid).map_err(io)?).map_err(io)?;
    send(
        peer.as_raw_fd(),
        &ticket.handle().reserved,
        MsgFlags::MSG_NOSIGNAL,
    )
    .map_err(io)?;
    Ok(peer)
}

/// Receives one message of the exporter: (status, offset, length, descriptor).
fn receive(peer: &OwnedFd) -> Result<(CuResult, u64, u64, Option<OwnedFd>), String> {
    let mut m = [0u8; MESSAGE_BYTES];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [IoSliceMut::new(&mut m)];
    let msg = recvmsg::<()>(
        peer.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| format!("reading from the exporter: {e}"))?;
    let n = msg.bytes;
    let mut fds = Vec::new();
    for c in msg
        .cmsgs()
        .map_err(|e| format!("reading a descriptor: {e}"))?
    {
        if let ControlMessageOwned::ScmRights(received) = c {
            // SAFETY: the kernel made these descriptors for this process.
            fds.extend(
                received
                    .into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if n != MESSAGE_BYTES || fds.len() > 1 {
        return Err(format!(
            "a message of {n} bytes and {} descriptors",
            fds.len()
        ));
    }
    let (status, offset, len) = parse(&m);
    Ok((status, offset, len, fds.pop()))
}

/// A message's (status, offset, length), as [`message`] wrote them.
fn parse(m: &[u8; MESSAGE_BYTES]) -> (CuResult, u64, u64) {
    let word = |at: usize| u64::from_le_bytes(m[at..at + 8].try_into().expect("8 bytes"));
    let status = CuResult::from_le_bytes(m[..4].try_into().expect("4 bytes"));
    (status, word(8), word(16))
}

/// Maps the exporter's chunks in `[va, va + bytes)` as they come, each span mapped
/// pushed to `spans`; they must tile the range.
fn map_chunks(
    peer: &OwnedFd,
    va: DevPtr,
    bytes: u64,
    spans: &mut Vec<(u64, u64)>,
) -> Result<(), (CuResult, String)> {
    let failed = |why: String| (ffi::CUDA_ERROR_MAP_FAILED, why);
    loop {
        let (status, offset, len, fd) = receive(peer).map_err(failed)?;
        if status != ffi::CUDA_SUCCESS {
            return Err((
                status,
                "the exporter refused the handle (its buffer was freed?)".into(),
            ));
        }
        let end = spans.last().map_or(0, |&(at, len)| at + len);
        if len == 0 {
            return if end == bytes {
                Ok(())
            } else {
                Err(failed(format!("the exporter sent {end} of {bytes} bytes")))
            };
        }
        let Some(fd) = fd.filter(|_| offset == end && len <= bytes - end) else {
            return Err(failed(format!(
                "a chunk of {len} bytes at {offset} out of place"
            )));
        };
        let handle = driver::import_fd(fd.as_fd()).map_err(|rc| {
            failed(format!(
                "cuMemImportFromShareableHandle failed with CUDA error {rc}"
            ))
        })?;
        let mapped = driver::map_only(va + offset, len, handle);
        if mapped.is_ok() {
            // Mapped: the undo must unmap it, whatever follows.
            spans.push((offset, len));
        }
        // The mapping keeps the memory; the descriptor closes as `fd` goes.
        let released = driver::release(handle);
        mapped.and(released).map_err(failed)?;
    }
}

/// Unmaps the spans mapped in the range at `va` and gives the range back.
fn unmap(va: DevPtr, bytes: u64, spans: &[(u64, u64)]) -> Result<(), String> {
    let mut result = Ok(());
    for &(offset, len) in spans {
        result = result.and(driver::unmap(va + offset, len));
    }
    result.and(driver::unreserve(va, bytes))
}

/// `cuIpcCloseMemHandle` of `va`: `None` when it is no gpuswap import (the driver's);
/// else one reference fewer, the range unmapped and freed with the last.
pub fn close(va: DevPtr) -> Option<CuResult> {
    let mut imports = lock(&IMPORTS);
    let import = imports.get_mut(&va)?;
    import.refs -= 1;
    if import.refs > 0 {
        return Some(ffi::CUDA_SUCCESS);
    }
    let import = imports.remove(&va).expect("just found");
    Some(match unmap(va, import.ticket.bytes, &import.spans) {
        Ok(()) => ffi::CUDA_SUCCESS,
        Err(e) => {
            diag::warn(&format!("cuIpcCloseMemHandle: {e}"));
            ffi::CUDA_ERROR_INVALID_VALUE
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_reads_back_from_its_handle_and_other_handles_are_not_ours() {
        let ticket = Ticket {
            pid: 4242,
            base: 0x7f00_0020_0000,
            bytes: 8 << 20,
            token: *b"0123456789abcdef",
        };
        let handle = ticket.handle();
        assert_eq!(Ticket::read(&handle), Some(ticket));
        assert!(handle.reserved[48..].iter().all(|&b| b == 0));
        // The stand-in's own handles, and a driver's, start otherwise.
        let mut other = handle;
        other.reserved[..4].copy_from_slice(&0x4753_4950u32.to_ne_bytes());
        assert_eq!(Ticket::read(&other), None);
        assert_eq!(Ticket::read(&IpcMemHandle { reserved: [0; 64] }), None);
    }

    #[test]
    fn messages_carry_status_offset_and_length() {
        let m = message(ffi::CUDA_ERROR_INVALID_HANDLE, 2 << 20, 4 << 20);
        assert_eq!(parse(&m), (400, 2 << 20, 4 << 20));
        assert_eq!(parse(&message(0, 0, 0)), (0, 0, 0));
    }
}
