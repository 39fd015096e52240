//! The daemon end to end over its socket, with tenants played by this test speaking the
//! wire protocol (the interposer's side is tested in gpuswap-cli's tests/real_gpu.rs).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use gpuswap_core::{Contract, MIB, PolicySettings};
use gpuswap_daemon::{DaemonConfig, observe, serve};
use gpuswap_wire::{self as wire, ClientMsg, DaemonMsg, Location, PROTOCOL_VERSION};
use proptest::prelude::*;

mod common;
use common::config;
#[path = "common/serving.rs"]
mod serving;
use serving::{Daemon, start};

fn daemon(name: &str, vram_mib: u64) -> Daemon {
    daemon_with(name, vram_mib, BTreeMap::new())
}

/// A daemon whose processes get `contracts` by name.
fn daemon_with(name: &str, vram_mib: u64, contracts: BTreeMap<String, Contract>) -> Daemon {
    let mut config = config(name);
    config.vram_bytes = Some(vram_mib * MIB);
    config.contracts = contracts.into_iter().collect();
    start(config)
}

/// A tenant that does what the interposer does, after `delay` for each drain and
/// each move (none unless a test sets it), and counts its bytes by location as the
/// daemon's messages place and move them.
struct Tenant {
    stream: UnixStream,
    tenant: u32,
    next: u64,
    /// (buffer, chunk locations)
    buffers: Vec<(u64, Vec<Location>)>,
    suspended: bool,
    delay: Duration,
}

impl Tenant {
    fn connect(socket: &Path, name: &str) -> Tenant {
        let mut stream = UnixStream::connect(socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let hello = ClientMsg::Hello {
            protocol: PROTOCOL_VERSION,
            pid: std::process::id(),
            name: name.into(),
            device_total_bytes: 1 << 30,
            granularity_bytes: 2 * MIB,
            memory_limit_bytes: 0,
            device_uuid: String::new(),
        };
        wire::write_frame(&mut stream, &hello).unwrap();
        let DaemonMsg::Welcome {
            tenant,
            chunk_bytes,
            ..
        } = wire::read_frame(&mut stream).unwrap()
        else {
            panic!("not welcomed")
        };
        assert_eq!(chunk_bytes, 2 * MIB);
        Tenant {
            stream,
            tenant,
            next: 0,
            buffers: Vec::new(),
            suspended: false,
            delay: Duration::ZERO,
        }
    }

    fn send(&mut self, msg: &ClientMsg) {
        wire::write_frame(&mut self.stream, msg).unwrap();
    }

    /// Plays a peer that stops reading: requests beyond everything the daemon has are
    /// refused at once, and thousands of refusals fill its socket, which it never reads.
    fn fill_unread(&mut self) {
        for request in 0..20_000 {
            self.send(&ClientMsg::Alloc {
                request,
                bytes: u64::MAX,
            });
        }
    }

    /// Serves the daemon's commands until the answer to an allocation comes.
    fn alloc(&mut self, bytes: u64) -> Result<u64, String> {
        let request = self.next;
        self.next += 1;
        self.send(&ClientMsg::Alloc { request, bytes });
        loop {
            match self.serve_one() {
                Some(DaemonMsg::Granted {
                    request: r,
                    buffer,
                    placement,
                    ..
                }) => {
                    assert_eq!(r, request);
                    self.buffers
                        .push((buffer, wire::chunks_of(&placement).collect()));
                    return Ok(buffer);
                }
                Some(DaemonMsg::AllocFailed { error, .. }) => return Err(error),
                _ => {}
            }
        }
    }

    /// Reads one message, carrying out suspensions and relocations.
    fn serve_one(&mut self) -> Option<DaemonMsg> {
        let msg: DaemonMsg = wire::read_frame(&mut self.stream).unwrap();
        self.carry_out(msg)
    }

    fn carry_out(&mut self, msg: DaemonMsg) -> Option<DaemonMsg> {
        match &msg {
            DaemonMsg::Suspend => {
                self.suspended = true;
                std::thread::sleep(self.delay);
                self.send(&ClientMsg::Suspended);
            }
            DaemonMsg::Resume => self.suspended = false,
            DaemonMsg::Relocate {
                copy,
                buffer,
                chunk,
                to,
            } => {
                assert!(self.suspended, "relocations come while suspended");
                let b = self
                    .buffers
                    .iter_mut()
                    .find(|b| b.0 == *buffer)
                    .expect("own buffer");
                assert_ne!(b.1[*chunk as usize], *to, "a move goes somewhere else");
                b.1[*chunk as usize] = *to;
                std::thread::sleep(self.delay);
                self.send(&ClientMsg::Relocated { copy: *copy });
            }
            _ => return Some(msg),
        }
        None
    }

    /// Serves commands for a while (returns come with the timer).
    fn serve_for(&mut self, d: Duration) {
        let end = std::time::Instant::now() + d;
        while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            match wire::read_frame::<DaemonMsg>(&mut self.stream) {
                Ok(msg) => {
                    self.carry_out(msg);
                }
                Err(wire::FrameError::Io(_)) => break,
                Err(e) => panic!("{e}"),
            }
        }
        self.stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
    }

    fn bytes_at(&self, at: Location) -> u64 {
        self.buffers
            .iter()
            .flat_map(|b| b.1.iter())
            .filter(|l| **l == at)
            .count() as u64
            * 2
            * MIB
    }
}

#[test]
fn oversubscription_evicts_and_returns_and_a_crash_frees_everything() {
    let d = daemon("evict", 16);
    let mut a = Tenant::connect(&d.socket, "a");
    let mut b = Tenant::connect(&d.socket, "b");
    assert_ne!(a.tenant, b.tenant);
    a.alloc(12 * MIB).unwrap();
    // B's request needs room: A is suspended and relocates while B waits, served by a
    // thread of its own as a process would be.
    let a_thread = std::thread::spawn(move || {
        a.serve_for(Duration::from_millis(500));
        a
    });
    b.alloc(12 * MIB).unwrap();
    let mut a = a_thread.join().unwrap();
    let snap = observe(&d.socket).unwrap();
    assert_eq!(snap.vram_used_bytes, 16 * MIB);
    assert_eq!(snap.tenants.len(), 2);
    let vram: u64 = snap.tenants.iter().map(|t| t.vram_bytes).sum();
    let host: u64 = snap.tenants.iter().map(|t| t.host_bytes).sum();
    assert_eq!((vram, host), (16 * MIB, 8 * MIB));
    // The daemon's books and the tenants' own view of their chunks agree.
    assert_eq!(
        a.bytes_at(Location::Vram) + b.bytes_at(Location::Vram),
        16 * MIB
    );
    assert_eq!(
        a.bytes_at(Location::Host) + b.bytes_at(Location::Host),
        8 * MIB
    );
    let row_a = snap.tenants.iter().find(|t| t.tenant == a.tenant).unwrap();
    assert_eq!(row_a.host_bytes, a.bytes_at(Location::Host));
    // Every chunk evicted was relocated by its process, and A gave some up.
    let evicted: u64 = snap.tenants.iter().map(|t| t.evicted_bytes).sum();
    let relocations: u64 = snap.tenants.iter().map(|t| t.relocations).sum();
    assert_eq!(relocations * 2 * MIB, evicted);
    assert!(row_a.evicted_bytes > 0, "{snap:?}");

    // B crashes: its memory is released, and A's evicted chunks come back with the
    // return timer.
    drop(b);
    a.serve_for(Duration::from_millis(800));
    let snap = observe(&d.socket).unwrap();
    assert_eq!(snap.tenants.len(), 1);
    assert_eq!(snap.tenants[0].vram_bytes, 12 * MIB, "{snap:?}");
    assert_eq!(a.bytes_at(Location::Vram), 12 * MIB);
    assert_eq!(snap.host_used_bytes, 0);
}

#[test]
fn the_snapshot_counts_the_time_moves_and_drains_take() {
    let d = daemon("times", 8);
    let mut a = Tenant::connect(&d.socket, "a");
    a.delay = Duration::from_millis(3);
    let mut b = Tenant::connect(&d.socket, "b");
    a.alloc(8 * MIB).unwrap();
    let a_thread = std::thread::spawn(move || {
        a.serve_for(Duration::from_millis(300));
        a
    });
    b.alloc(4 * MIB).unwrap();
    let a = a_thread.join().unwrap();
    let snap = observe(&d.socket).unwrap();
    let row = |t: u32| snap.tenants.iter().find(|r| r.tenant == t).unwrap();
    let (row_a, row_b) = (row(a.tenant), row(b.tenant));
    // Two chunks made room for B, each answered after A's delay, after one drain.
    assert_eq!(row_a.relocations, 2, "{snap:?}");
    assert!(row_a.relocation_ns >= 2 * 3_000_000, "{snap:?}");
    assert!(row_a.drain_ns >= 3_000_000, "{snap:?}");
    // B's answers were instant, and B waited for A's at least.
    assert_eq!((row_b.relocations, row_b.drain_ns), (0, 0));
    assert!(
        row_b.wait_ns >= row_a.relocation_ns + row_a.drain_ns,
        "{snap:?}"
    );
}

#[test]
fn contracts_follow_the_process_name() {
    let guarded = Contract {
        vram_guarantee_bytes: 8 * MIB,
        priority_class: 1,
        ..Contract::default()
    };
    let greedy = Contract {
        vram_guarantee_bytes: 12 * MIB,
        ..Contract::default()
    };
    let contracts = BTreeMap::from([
        ("server".to_owned(), guarded),
        ("greedy".to_owned(), greedy),
    ]);
    let d = daemon_with("contracts", 16, contracts);
    let mut server = Tenant::connect(&d.socket, "server");
    server.alloc(8 * MIB).unwrap();
    // A batch job without a contract fills VRAM and beyond: only its own data goes to
    // host memory, the server keeps its guarantee.
    let mut batch = Tenant::connect(&d.socket, "batch");
    let server_thread = std::thread::spawn(move || {
        server.serve_for(Duration::from_millis(300));
        server
    });
    batch.alloc(8 * MIB).unwrap();
    batch.alloc(4 * MIB).unwrap();
    let server = server_thread.join().unwrap();
    assert_eq!(server.bytes_at(Location::Vram), 8 * MIB);
    let snap = observe(&d.socket).unwrap();
    let row = snap.tenants.iter().find(|t| t.name == "server").unwrap();
    assert_eq!(row.evicted_bytes, 0);
    assert_eq!(row.contract.vram_guarantee_bytes, 8 * MIB);
    assert_eq!(row.contract.priority_class, 1);
    let batch_row = snap.tenants.iter().find(|t| t.name == "batch").unwrap();
    assert_eq!(batch_row.contract, wire::ContractRow::default());
    assert_eq!(batch_row.host_bytes, 4 * MIB);
    // A process whose guarantee does not fit beside the server's is refused, and says
    // why.
    let reason = refused_hello(&d.socket, PROTOCOL_VERSION, "greedy", 2 * MIB);
    assert!(
        reason.contains("\"greedy\"") && reason.contains("vram_guarantee"),
        "{reason}"
    );
    drop(batch);
}

#[test]
fn tenant_numbers_and_buffer_ids_are_recycled() {
    let d = daemon("recycle", 64);
    let first = Tenant::connect(&d.socket, "first").tenant;
    // The connection is closed when the value drops; once the daemon has seen it go,
    // the next tenant takes the number (connecting before that raced the daemon's read
    // of the closed socket on a loaded machine).
    let gone = || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !observe(&d.socket).unwrap().tenants.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the tenant never left"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    };
    let mut ids = Vec::new();
    for _ in 0..20 {
        gone();
        let mut t = Tenant::connect(&d.socket, "again");
        let id = t.alloc(2 * MIB).unwrap();
        ids.push(id);
        t.send(&ClientMsg::Free { buffer: id });
        assert_eq!(t.tenant, first, "the exited tenant's number is reused");
    }
    ids.dedup();
    assert_eq!(ids.len(), 20, "every allocation has its own id");
    assert_eq!(observe(&d.socket).unwrap().tenants_served, 21);
}

/// Says hello as a process named `name` would and returns why the daemon refused it.
fn refused_hello(socket: &Path, protocol: u32, name: &str, granularity_bytes: u64) -> String {
    let mut s = UnixStream::connect(socket).unwrap();
    let hello = ClientMsg::Hello {
        protocol,
        pid: 1,
        name: name.into(),
        device_total_bytes: 1 << 30,
        granularity_bytes,
        memory_limit_bytes: 0,
        device_uuid: String::new(),
    };
    wire::write_frame(&mut s, &hello).unwrap();
    let DaemonMsg::Refused { reason } = wire::read_frame(&mut s).unwrap() else {
        panic!("accepted")
    };
    reason
}

#[test]
fn refusals_are_clear() {
    let d = daemon("refuse", 16);
    let reason = refused_hello(&d.socket, 99, "old", 2 * MIB);
    assert!(reason.contains("protocol version 99"), "{reason}");
    let mut s = UnixStream::connect(&d.socket).unwrap();
    wire::write_frame(
        &mut s,
        &ClientMsg::Alloc {
            request: 0,
            bytes: 1,
        },
    )
    .unwrap();
    let DaemonMsg::Refused { reason } = wire::read_frame(&mut s).unwrap() else {
        panic!("accepted")
    };
    assert!(reason.contains("before its hello"), "{reason}");
    // A granularity that does not divide the chunk size.
    let reason = refused_hello(&d.socket, PROTOCOL_VERSION, "odd", 3 * MIB);
    assert!(reason.contains("granularity"), "{reason}");
    // The socket is private to its user.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // A second daemon on the same socket is refused.
    let config = DaemonConfig {
        socket: d.socket.clone(),
        vram_bytes: Some(MIB),
        host_bytes: MIB,
        chunk_bytes: 2 * MIB,
        policy: PolicySettings::named("gpuswap"),
        return_interval_ns: 1,
        verbose: false,
        contracts: Default::default(),
        gpu_time: Default::default(),
        idle: Default::default(),
        socket_group: None,
        metrics_listen: None,
        max_connections: gpuswap_daemon::DEFAULT_MAX_CONNECTIONS,
        probe_remote: false,
        device_uuid: None,
    };
    let err = serve(config, &|| true).unwrap_err();
    assert!(err.to_string().contains("already listens"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Bad frames (random bytes, lengths, truncated or valid-looking JSON) never crash
    /// the daemon: afterwards it still serves a tenant and an observer, with consistent
    /// books.
    #[test]
    fn bad_frames_never_crash_the_daemon(
        frames in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40),
                ".{0,30}".prop_map(|s| {
                    let mut v = (s.len() as u32).to_le_bytes().to_vec();
                    v.extend_from_slice(s.as_bytes());
                    v
                }),
                Just(br#"{"Alloc":{"request":1,"bytes":18446744073709551615}}"#.to_vec()).prop_map(|b| {
                    let mut v = (b.len() as u32).to_le_bytes().to_vec();
                    v.extend(b);
                    v
                }),
            ],
            1..6,
        )
    ) {
        let d = shared();
        for frame in frames {
            if let Ok(mut s) = UnixStream::connect(&d.socket) {
                let _ = s.write_all(&frame);
            }
        }
        let mut t = Tenant::connect(&d.socket, "after");
        let id = t.alloc(2 * MIB).unwrap();
        t.send(&ClientMsg::Free { buffer: id });
        prop_assert!(observe(&d.socket).is_ok());
    }
}

fn shared() -> &'static Daemon {
    static D: std::sync::OnceLock<Daemon> = std::sync::OnceLock::new();
    D.get_or_init(|| daemon("fuzz", 64))
}

/// A tenant may answer only its own relocation, a request beyond everything the daemon
/// has is refused at once, and a refused connection is closed.
#[test]
fn forged_answers_and_huge_requests_are_refused() {
    let d = daemon("forge", 16);
    let mut a = Tenant::connect(&d.socket, "a");
    let mut b = Tenant::connect(&d.socket, "b");
    assert!(
        b.alloc(u64::MAX).unwrap_err().contains("bytes asked"),
        "refused before any layout"
    );
    a.alloc(12 * MIB).unwrap();
    // B's request makes A relocate; B forges A's answer before A gives it.
    b.send(&ClientMsg::Alloc {
        request: 9,
        bytes: 12 * MIB,
    });
    let msg: DaemonMsg = wire::read_frame(&mut a.stream).unwrap();
    assert_eq!(msg, DaemonMsg::Suspend);
    a.suspended = true;
    a.send(&ClientMsg::Suspended);
    let relocate: DaemonMsg = wire::read_frame(&mut a.stream).unwrap();
    let DaemonMsg::Relocate { copy, .. } = relocate else {
        panic!("no relocation")
    };
    b.send(&ClientMsg::RelocateFailed {
        copy,
        error: "forged".into(),
    });
    let DaemonMsg::Refused { reason } = wire::read_frame(&mut b.stream).unwrap() else {
        panic!("the forger was not refused")
    };
    assert!(reason.contains("not its own"), "{reason}");
    // The forger's connection is closed by the daemon.
    assert!(matches!(
        wire::read_frame::<DaemonMsg>(&mut b.stream),
        Err(wire::FrameError::Closed | wire::FrameError::Io(_))
    ));
    // A is not harmed: its copy is still awaited, and once B is gone it carries on.
    a.carry_out(relocate);
    a.serve_for(Duration::from_millis(300));
    let snap = observe(&d.socket).unwrap();
    assert_eq!(snap.tenants.len(), 1);
    assert_eq!(snap.tenants[0].name, "a");
}

#[test]
fn policies_needing_what_a_real_gpu_does_not_report_are_refused() {
    let gpuswap = || PolicySettings::named("gpuswap");
    assert_eq!(gpuswap_daemon::check_policy(&gpuswap()), Ok(()));
    // Refusals follow what the backend is declared to supply: gpuswap's return timer is
    // needed and supplied, so nothing is lacking.
    let supplied = gpuswap_daemon::SUPPLIES;
    assert!(gpuswap().needs().timers && supplied.timers);
    assert_eq!(
        gpuswap().needs().lacking(supplied),
        gpuswap_core::Needs::NONE
    );
    for (victim, lacking) in [
        ("performance", "hardware counters of each kernel"),
        ("access-rate", "hardware counters of each kernel"),
    ] {
        let policy = gpuswap().set("victim", victim).unwrap();
        let error = gpuswap_daemon::check_policy(&policy).unwrap_err();
        assert!(error.contains(lacking), "{victim}: {error}");
    }
    let error = gpuswap_daemon::check_policy(&PolicySettings::named("uvm")).unwrap_err();
    assert!(error.contains("page faults"), "{error}");
}

/// Sends `hello` on a new connection and returns the daemon's answer and the stream.
fn say_hello(
    socket: &Path,
    device_total_bytes: u64,
    granularity_bytes: u64,
) -> (DaemonMsg, UnixStream) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = ClientMsg::Hello {
        protocol: PROTOCOL_VERSION,
        pid: 1,
        name: "claims".into(),
        device_total_bytes,
        granularity_bytes,
        memory_limit_bytes: 0,
        device_uuid: String::new(),
    };
    wire::write_frame(&mut s, &hello).unwrap();
    (wire::read_frame(&mut s).unwrap(), s)
}

/// One hello claiming a 2^64-byte device once set the budget of a daemon started
/// without --vram, and a 1 PiB allocation then laid out 2^29 chunks: the daemon
/// aborted. The claim is refused at the hello now, and the daemon serves on.
#[test]
fn a_hello_claiming_an_impossible_device_is_refused_and_the_daemon_lives() {
    let d = start(config("claims"));
    let (answer, mut s) = say_hello(&d.socket, u64::MAX, 2 * MIB);
    let DaemonMsg::Refused { reason } = answer else {
        // The old daemon welcomed it: the allocation that follows aborts it.
        wire::write_frame(
            &mut s,
            &ClientMsg::Alloc {
                request: 0,
                bytes: 1 << 50,
            },
        )
        .unwrap();
        let _ = wire::read_frame::<DaemonMsg>(&mut s);
        panic!("welcomed: {answer:?}")
    };
    assert!(reason.contains("more than any GPU"), "{reason}");
    // A real device's hello is welcomed, and a 1 PiB request refused before any layout.
    let mut t = Tenant::connect(&d.socket, "real");
    let error = t.alloc(1 << 50).unwrap_err();
    assert!(error.contains("bytes asked"), "{error}");
    t.alloc(2 * MIB).unwrap();
    assert_eq!(observe(&d.socket).unwrap().tenants.len(), 1);
}

/// A frame the daemon cannot read (its length is fine, its message is not one of the
/// protocol's) is answered with the `Refused` the protocol promises, then closed.
#[test]
fn an_unreadable_frame_is_refused_before_the_close() {
    let d = daemon("unreadable", 16);
    for body in [&b"{\"Alloc\":"[..], b"not json", b"{\"Launch\":{}}"] {
        let mut s = UnixStream::connect(&d.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
        s.write_all(body).unwrap();
        match wire::read_frame::<DaemonMsg>(&mut s) {
            Ok(DaemonMsg::Refused { reason }) => {
                assert!(
                    reason.starts_with("protocol error: bad message"),
                    "{reason}"
                )
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(body)),
        }
        assert!(matches!(
            wire::read_frame::<DaemonMsg>(&mut s),
            Err(wire::FrameError::Closed)
        ));
    }
    // Beyond the longest frame, too.
    let mut s = UnixStream::connect(&d.socket).unwrap();
    s.write_all(&u32::MAX.to_le_bytes()).unwrap();
    let DaemonMsg::Refused { reason } = wire::read_frame(&mut s).unwrap() else {
        panic!("not refused")
    };
    assert!(reason.contains("at most"), "{reason}");
}

/// Five tenants that stop reading (frozen, or slow consumers) delay no one: their
/// answers queue in their own outboxes, and `gpuswap top` and another tenant's
/// allocation are answered at once, not after the write timeout (10 s) per message
/// that once held the deciding thread for each of them in turn.
#[test]
fn frozen_peers_do_not_delay_top_or_another_peers_allocation() {
    let d = daemon("frozen-top", 64);
    let frozen: Vec<Tenant> = (0..5)
        .map(|i| {
            let mut t = Tenant::connect(&d.socket, &format!("frozen-{i}"));
            t.fill_unread();
            t
        })
        .collect();
    let asked = std::time::Instant::now();
    let snap = observe(&d.socket).unwrap();
    let top = asked.elapsed();
    assert_eq!(snap.tenants.len(), 5);
    let mut other = Tenant::connect(&d.socket, "other");
    other.alloc(2 * MIB).unwrap();
    let both = asked.elapsed();
    eprintln!("top answered in {top:?}, top and the allocation in {both:?}");
    assert!(both < Duration::from_secs(2), "answered after {both:?}");
    drop(frozen);
}

/// A victim that never answers its suspension (stopped, say) once held up every
/// allocation until its 30 s answer deadline, even one that fits in free VRAM; such
/// an allocation is granted at once now.
#[test]
fn a_silent_victim_does_not_delay_an_allocation_that_fits() {
    let d = daemon("silent-victim", 32);
    let mut victim = Tenant::connect(&d.socket, "victim");
    victim.alloc(16 * MIB).unwrap();
    let mut freer = Tenant::connect(&d.socket, "freer");
    let freed = freer.alloc(8 * MIB).unwrap();
    // B's 12 MiB need 4 MiB of the victim's: it is asked to suspend, and stays silent.
    let mut b = Tenant::connect(&d.socket, "b");
    b.send(&ClientMsg::Alloc {
        request: 0,
        bytes: 12 * MIB,
    });
    let msg: DaemonMsg = wire::read_frame(&mut victim.stream).unwrap();
    assert_eq!(msg, DaemonMsg::Suspend);
    freer.send(&ClientMsg::Free { buffer: freed });
    let asked = std::time::Instant::now();
    let mut c = Tenant::connect(&d.socket, "c");
    c.alloc(4 * MIB).unwrap();
    let waited = asked.elapsed();
    eprintln!("an allocation that fits was answered in {waited:?}");
    assert!(waited < Duration::from_secs(2), "answered after {waited:?}");
}

/// A regular file at the socket's path is a user's, not a daemon's leftover: the daemon
/// refuses to start and leaves it (it used to delete it).
#[test]
fn a_socket_group_opens_the_socket_to_its_members_only() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut config = common::config("group");
    config.vram_bytes = Some(64 << 20);
    // Our own primary group: a group we may give the socket to.
    let gid = std::fs::metadata(config.socket.parent().unwrap())
        .unwrap()
        .gid();
    config.socket_group = Some(gid);
    let socket = config.socket.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = std::sync::Arc::clone(&stop);
    let daemon = std::thread::spawn(move || {
        gpuswap_daemon::serve(config, &|| {
            stopped.load(std::sync::atomic::Ordering::SeqCst)
        })
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !socket.exists() {
        assert!(std::time::Instant::now() < deadline, "no socket");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The mode is set right after the bind: wait for it.
    let meta = loop {
        let meta = std::fs::metadata(&socket).unwrap();
        if meta.permissions().mode() & 0o777 == 0o660 || std::time::Instant::now() > deadline {
            break meta;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(meta.gid(), gid);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    daemon.join().unwrap().unwrap();
    assert!(!socket.exists(), "the socket is removed at the stop");
    assert_eq!(gpuswap_daemon::group_id("4242"), Ok(4242));
    assert_eq!(gpuswap_daemon::group_id("root"), Ok(0));
    assert!(
        gpuswap_daemon::group_id("no-such-group-here")
            .unwrap_err()
            .contains("no group \"no-such-group-here\" in /etc/group")
    );
}

#[test]
fn a_metrics_address_that_cannot_be_served_stops_the_daemon_before_its_socket() {
    let mut config = common::config("bad-metrics");
    config.metrics_listen = Some("not an address".into());
    let socket = config.socket.clone();
    let error = gpuswap_daemon::serve(config, &|| true).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("--metrics-listen not an address: "),
        "{error}"
    );
    assert!(!socket.exists(), "no socket is left behind");
}

#[test]
fn a_file_at_the_socket_path_is_left_alone_and_refused() {
    let mut config = common::config("not-a-socket");
    std::fs::write(&config.socket, "a user's notes").unwrap();
    config.vram_bytes = Some(64 << 20);
    let error = gpuswap_daemon::serve(config.clone(), &|| true).unwrap_err();
    assert!(error.to_string().contains("is not a socket"), "{error}");
    assert_eq!(
        std::fs::read_to_string(&config.socket).unwrap(),
        "a user's notes"
    );
}
