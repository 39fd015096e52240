//! The endpoint without sockets: inputs in on a fake clock, transmits, closes and log
//! lines out.

use gpuswap_core::gpu_time::{AutoSettings, GpuTime};
use gpuswap_core::{MIB, PolicySettings};
use gpuswap_wire::{ClientMsg, DaemonMsg, HeldBuffer, Location, PROTOCOL_VERSION, Placement, runs};

use super::{ConnId, Endpoint, EndpointEvent, Input};
use crate::config::DaemonConfig;

const UID: u32 = 1000;
const MS: u64 = 1_000_000;

/// An endpoint managing `vram_mib` of VRAM that returns evicted data every
/// `return_interval_ns`, logging.
fn endpoint(vram_mib: u64, return_interval_ns: u64) -> Endpoint {
    endpoint_timed(vram_mib, return_interval_ns, GpuTime::default())
}

/// [`endpoint`] with `gpu_time`.
fn endpoint_timed(vram_mib: u64, return_interval_ns: u64, gpu_time: GpuTime) -> Endpoint {
    let config = DaemonConfig {
        socket: "unused.sock".into(),
        vram_bytes: Some(vram_mib * MIB),
        host_bytes: 1 << 40,
        chunk_bytes: 2 * MIB,
        policy: PolicySettings::named("gpuswap"),
        return_interval_ns,
        verbose: true,
        contracts: Default::default(),
        gpu_time,
        idle: Default::default(),
        socket_group: None,
        metrics_listen: None,
        max_connections: crate::config::DEFAULT_MAX_CONNECTIONS,
        probe_remote: false,
        device_uuid: None,
    };
    Endpoint::new(config, UID)
}

fn transmits(e: &mut Endpoint) -> Vec<(ConnId, DaemonMsg)> {
    std::iter::from_fn(|| e.poll_transmit()).collect()
}

/// The one message sent, which must go to `conn`.
fn only(e: &mut Endpoint, conn: ConnId) -> DaemonMsg {
    match transmits(e).as_slice() {
        [(c, msg)] if *c == conn => msg.clone(),
        other => panic!("not one message to {conn}: {other:?}"),
    }
}

fn closes(e: &mut Endpoint) -> Vec<ConnId> {
    std::iter::from_fn(|| e.poll_close()).collect()
}

fn logs(e: &mut Endpoint) -> Vec<String> {
    std::iter::from_fn(|| e.poll_event())
        .map(|EndpointEvent::Log(_, line)| line)
        .collect()
}

/// Connection `conn` connects and says hello at `now_ns`; returns its tenant number.
fn hello(e: &mut Endpoint, now_ns: u64, conn: ConnId, name: &str) -> u32 {
    hello_as(e, now_ns, conn, 100 + conn as u32, name)
}

/// [`hello`] from process `pid`.
fn hello_as(e: &mut Endpoint, now_ns: u64, conn: ConnId, pid: u32, name: &str) -> u32 {
    match welcome(e, now_ns, conn, pid, name) {
        DaemonMsg::Welcome { tenant, .. } => tenant,
        other => panic!("not welcomed: {other:?}"),
    }
}

/// [`hello_as`]'s answer, whatever it is.
fn welcome(e: &mut Endpoint, now_ns: u64, conn: ConnId, pid: u32, name: &str) -> DaemonMsg {
    e.handle(
        now_ns,
        Input::Accepted {
            conn,
            pid,
            uid: UID,
            cgroups: Vec::new(),
        },
    );
    let hello = ClientMsg::Hello {
        protocol: PROTOCOL_VERSION,
        pid,
        name: name.into(),
        device_total_bytes: 1 << 30,
        granularity_bytes: 2 * MIB,
        memory_limit_bytes: 0,
        device_uuid: String::new(),
    };
    e.handle(now_ns, Input::Frame(conn, hello));
    only(e, conn)
}

fn alloc(e: &mut Endpoint, now_ns: u64, conn: ConnId, request: u64, bytes: u64) {
    e.handle(
        now_ns,
        Input::Frame(conn, ClientMsg::Alloc { request, bytes }),
    );
}

#[test]
fn a_hello_is_welcomed_and_an_allocation_granted() {
    let mut e = endpoint(16, 50 * MS);
    let tenant = hello(&mut e, 0, 3, "a");
    assert_eq!(
        logs(&mut e),
        [format!(
            "tenant {tenant} connected: pid 103, \"a\"; no contracts"
        )]
    );
    alloc(&mut e, MS, 3, 7, 4 * MIB);
    match transmits(&mut e).as_slice() {
        [
            (
                3,
                DaemonMsg::Granted {
                    request: 7, bytes, ..
                },
            ),
        ] => assert_eq!(*bytes, 4 * MIB),
        other => panic!("not granted: {other:?}"),
    }
    assert!(closes(&mut e).is_empty());
    e.check_invariants().unwrap();
}

/// Issue 42, item 2: a contract bound to a uid or a cgroup goes only to the processes
/// the kernel says are in them; another that claims its name runs without it, and the
/// log says why.
#[test]
fn a_contract_goes_only_to_the_peers_it_is_bound_to() {
    let mut e = endpoint(64, 50 * MS);
    let guarantee = gpuswap_core::Contract {
        vram_guarantee_bytes: 8 * MIB,
        ..gpuswap_core::Contract::default()
    };
    let job = "/system.slice/slurmstepd.scope/job_42";
    e.config.contracts.fixed = vec![crate::identity::ProcessContract {
        name: "job".into(),
        contract: guarantee,
        uids: vec![UID],
        cgroup: Some(job.into()),
        source: "job_42.toml".into(),
    }];
    let connect = |e: &mut Endpoint, conn: ConnId, cgroup: &str| {
        e.handle(
            0,
            Input::Accepted {
                conn,
                pid: 100 + conn as u32,
                uid: UID,
                cgroups: vec![cgroup.to_owned()],
            },
        );
        let hello = ClientMsg::Hello {
            protocol: PROTOCOL_VERSION,
            pid: 100 + conn as u32,
            name: "job".into(),
            device_total_bytes: 1 << 30,
            granularity_bytes: 2 * MIB,
            memory_limit_bytes: 0,
            device_uuid: String::new(),
        };
        e.handle(0, Input::Frame(conn, hello));
        transmits(e);
        logs(e)
    };
    let inside = connect(&mut e, 1, &format!("{job}/step_0/user/task_0"));
    assert!(inside[0].contains("matched (job_42.toml)"), "{inside:?}");
    let outside = connect(&mut e, 2, "/user.slice/user-1000.slice/session-1.scope");
    assert!(
        outside[0].contains("is not its to take: the process is in cgroup /user.slice")
            && outside[0].contains(&format!("not under {job} (job_42.toml); the default")),
        "{outside:?}"
    );
    let snap = e.snapshot();
    let guarantees: Vec<u64> = snap
        .tenants
        .iter()
        .map(|t| t.contract.vram_guarantee_bytes)
        .collect();
    assert_eq!(guarantees, [8 * MIB, 0]);
    // Counted for the operator's metrics: the matching claim is not, the refused one is.
    assert_eq!(snap.claims_refused, 1);
    e.check_invariants().unwrap();
}

/// Connection 1 (A) holds 12 MiB of 16 when connection 2 (B) asks for 12 MiB more at
/// 10 ms: A has just been asked to suspend, and the logs are read.
fn crowded(return_interval_ns: u64) -> Endpoint {
    let mut e = endpoint(16, return_interval_ns);
    hello(&mut e, 0, 1, "a");
    alloc(&mut e, 0, 1, 0, 12 * MIB);
    transmits(&mut e);
    hello(&mut e, 0, 2, "b");
    alloc(&mut e, 10 * MS, 2, 0, 12 * MIB);
    assert_eq!(transmits(&mut e), [(1, DaemonMsg::Suspend)]);
    logs(&mut e);
    e
}

/// An allocation that must wait for room is logged as it begins to wait; one granted at
/// once is not.
#[test]
fn a_wait_is_logged_as_it_begins() {
    let mut e = endpoint(16, 50 * MS);
    hello(&mut e, 0, 1, "a");
    alloc(&mut e, 0, 1, 0, 12 * MIB);
    transmits(&mut e);
    let said = logs(&mut e).join("\n");
    assert!(!said.contains("waits for room"), "{said}");
    hello(&mut e, 0, 2, "b");
    logs(&mut e);
    alloc(&mut e, 10 * MS, 2, 0, 12 * MIB);
    assert_eq!(transmits(&mut e), [(1, DaemonMsg::Suspend)]);
    let said = logs(&mut e);
    let begun: Vec<&String> = said
        .iter()
        .filter(|l| l.contains("waits for room"))
        .collect();
    assert_eq!(begun.len(), 1, "{said:?}");
    assert!(
        begun[0].ends_with("an allocation of 12.0 MiB waits for room"),
        "{said:?}"
    );
}

/// B's allocation needs A's VRAM: A is suspended, moves chunks one relocation at a time,
/// B is granted and A resumed; the snapshot counts the times on the endpoint's clock.
#[test]
fn a_suspension_and_relocations_make_room_then_the_victim_resumes() {
    let mut e = crowded(50 * MS);
    let mut now = 12 * MS;
    let mut input = ClientMsg::Suspended;
    let mut moves = 0;
    let granted = loop {
        e.handle(now, Input::Frame(1, input));
        e.check_invariants().unwrap();
        let out = transmits(&mut e);
        if out.iter().any(|(c, _)| *c == 2) {
            break out;
        }
        let [(1, DaemonMsg::Relocate { copy, .. })] = out.as_slice() else {
            panic!("not a relocation: {out:?}")
        };
        moves += 1;
        input = ClientMsg::Relocated { copy: *copy };
        now += MS;
    };
    assert!(
        granted
            .iter()
            .any(|m| matches!(m, (2, DaemonMsg::Granted { request: 0, .. }))),
        "{granted:?}"
    );
    assert!(granted.contains(&(1, DaemonMsg::Resume)), "{granted:?}");
    let snap = e.snapshot();
    let row = |t: usize| &snap.tenants[t];
    // Two chunks at least made room; A drained in 2 ms, each move took 1 ms, and B
    // waited from 10 ms until the last answer.
    assert!(moves >= 2, "{moves}");
    assert_eq!(row(0).relocations, moves);
    assert_eq!(row(0).evicted_bytes, moves * 2 * MIB);
    assert_eq!(row(0).drain_ns, 2 * MS);
    assert_eq!(row(0).relocation_ns, moves * MS);
    assert_eq!(row(1).wait_ns, now - 10 * MS);
    assert!(!row(0).suspended);
    assert!(closes(&mut e).is_empty());
}

/// A victim that never answers its suspension is closed at the answer deadline, which
/// the endpoint reports as its timeout, and its exit lets the waiting allocation through.
#[test]
fn a_victim_that_does_not_answer_is_closed_at_the_deadline() {
    let hour = 3_600_000 * MS;
    let mut e = crowded(hour);
    let deadline = 10 * MS + 30_000 * MS;
    assert_eq!(e.poll_timeout(), Some(deadline));
    e.handle_timeout(deadline - MS);
    assert!(closes(&mut e).is_empty());
    e.handle_timeout(deadline);
    assert_eq!(closes(&mut e), [1]);
    let gone = logs(&mut e);
    assert!(
        gone[0].starts_with("tenant 0 (pid 101) gone: no answer within 30 s; "),
        "{gone:?}"
    );
    assert!(matches!(
        transmits(&mut e).as_slice(),
        [(2, DaemonMsg::Granted { .. })]
    ));
    e.check_invariants().unwrap();
}

/// A connection's end is its tenant's exit: closed, logged with its figures, its
/// memory released, and anything it still sends ignored.
#[test]
fn a_gone_connection_is_closed_and_its_tenant_released() {
    let mut e = endpoint(16, 50 * MS);
    hello(&mut e, 0, 4, "a");
    alloc(&mut e, 0, 4, 0, 8 * MIB);
    transmits(&mut e);
    logs(&mut e);
    e.handle(5 * MS, Input::Gone(4, "disconnected".into()));
    assert_eq!(closes(&mut e), [4]);
    assert_eq!(
        logs(&mut e),
        [
            "tenant 0 (pid 104) gone: disconnected; 0 bytes evicted, 0 returned, 0 chunk moves \
          taking 0.0 ms (0 us each from command to answer), 0 suspensions drained in 0.0 ms, \
          0 allocations waited 0.0 ms"
        ]
    );
    alloc(&mut e, 6 * MS, 4, 1, 2 * MIB);
    assert!(transmits(&mut e).is_empty());
    let snap = e.snapshot();
    assert_eq!((snap.tenants.len(), snap.vram_used_bytes), (0, 0));
}

/// Refusals are sent before the close they come with: another user's peer, a frame
/// before the hello; an observer gets the snapshot, at the endpoint's time, then the
/// close.
#[test]
fn refusals_and_observations_come_before_their_close() {
    let mut e = endpoint(16, 50 * MS);
    e.handle(
        0,
        Input::Accepted {
            conn: 1,
            pid: 9,
            uid: UID + 1,
            cgroups: Vec::new(),
        },
    );
    let DaemonMsg::Refused { reason } = only(&mut e, 1) else {
        panic!("not refused")
    };
    assert_eq!(
        reason,
        format!("uid {} may not use the daemon of uid {UID}", UID + 1)
    );
    assert_eq!(closes(&mut e), [1]);
    // A daemon that serves a group (`--socket-group`) admits whom the socket's mode
    // let connect, of any uid.
    let mut shared = endpoint(16, 50 * MS);
    shared.config.socket_group = Some(4242);
    shared.handle(
        0,
        Input::Accepted {
            conn: 1,
            pid: 9,
            uid: UID + 1,
            cgroups: Vec::new(),
        },
    );
    assert!(transmits(&mut shared).is_empty() && closes(&mut shared).is_empty());
    e.handle(
        0,
        Input::Accepted {
            conn: 2,
            pid: 9,
            uid: UID,
            cgroups: Vec::new(),
        },
    );
    alloc(&mut e, 0, 2, 0, MIB);
    let DaemonMsg::Refused { reason } = only(&mut e, 2) else {
        panic!("not refused")
    };
    assert!(reason.contains("before its hello"), "{reason}");
    assert_eq!(closes(&mut e), [2]);
    e.handle(
        0,
        Input::Accepted {
            conn: 3,
            pid: 9,
            uid: UID,
            cgroups: Vec::new(),
        },
    );
    let observe = ClientMsg::Observe {
        protocol: PROTOCOL_VERSION,
    };
    e.handle(1_500 * MS, Input::Frame(3, observe));
    let DaemonMsg::Snapshot(snap) = only(&mut e, 3) else {
        panic!("no snapshot")
    };
    assert_eq!(snap.uptime_s, 1.5);
    assert_eq!(closes(&mut e), [3]);
}

/// Says hello on a new connection `conn` from a device of `granularity_bytes`, and
/// returns the daemon's answer.
fn hello_granular(e: &mut Endpoint, conn: ConnId, granularity_bytes: u64) -> DaemonMsg {
    e.handle(
        0,
        Input::Accepted {
            conn,
            pid: 9,
            uid: UID,
            cgroups: Vec::new(),
        },
    );
    let hello = ClientMsg::Hello {
        protocol: PROTOCOL_VERSION,
        pid: 9,
        name: "g".into(),
        device_total_bytes: 1 << 30,
        granularity_bytes,
        memory_limit_bytes: 0,
        device_uuid: String::new(),
    };
    e.handle(0, Input::Frame(conn, hello));
    only(e, conn)
}

/// A granularity of 1 (or any that is not a power of two of a page or more) is
/// refused with a message; the daemon counts what a process maps, its allocations
/// rounded up to its granularity: six 1-byte allocations are six granules, not 6 bytes.
#[test]
fn granularities_are_checked_and_allocations_rounded_to_them() {
    let mut e = endpoint(64, 50 * MS);
    for (conn, bad) in [(1, 1), (2, 3 * 4096), (3, 2048)] {
        let DaemonMsg::Refused { reason } = hello_granular(&mut e, conn, bad) else {
            panic!("granularity {bad} welcomed")
        };
        assert!(reason.contains("not a power of two"), "{reason}");
        assert_eq!(closes(&mut e), [conn]);
    }
    for (conn, granularity) in [(4, 2 * MIB), (5, 4096)] {
        let welcome = hello_granular(&mut e, conn, granularity);
        assert!(matches!(welcome, DaemonMsg::Welcome { .. }), "{welcome:?}");
        for request in 0..6 {
            alloc(&mut e, MS, conn, request, 1);
            let DaemonMsg::Granted { bytes, .. } = only(&mut e, conn) else {
                panic!("not granted")
            };
            assert_eq!(bytes, granularity);
        }
    }
    let snap = e.snapshot();
    let used: Vec<u64> = snap.tenants.iter().map(|t| t.vram_bytes).collect();
    assert_eq!(used, [6 * 2 * MIB, 6 * 4096]);
    assert_eq!(snap.vram_used_bytes, 6 * 2 * MIB + 6 * 4096);
    e.check_invariants().unwrap();
}

fn accept(e: &mut Endpoint, now_ns: u64, conn: ConnId) {
    e.handle(
        now_ns,
        Input::Accepted {
            conn,
            pid: 9,
            uid: UID,
            cgroups: Vec::new(),
        },
    );
}

/// A connection that sends no first frame within 10 s is refused and closed at that
/// deadline, which the endpoint's timer asks for; one that said hello in time stays.
#[test]
fn a_connection_without_a_hello_is_closed_at_the_hello_deadline() {
    let mut e = endpoint(16, 3_600_000 * MS);
    accept(&mut e, 5 * MS, 1);
    hello(&mut e, 6 * MS, 2, "b");
    let deadline = 5 * MS + 10_000 * MS;
    assert_eq!(e.poll_timeout(), Some(deadline));
    e.handle_timeout(deadline - 1);
    assert!(closes(&mut e).is_empty());
    e.handle_timeout(deadline);
    let DaemonMsg::Refused { reason } = only(&mut e, 1) else {
        panic!("not refused")
    };
    assert_eq!(reason, "no hello within 10 s");
    assert_eq!(closes(&mut e), [1]);
    e.handle_timeout(20_000 * MS);
    assert!(closes(&mut e).is_empty(), "the tenant stays");
    assert_eq!(e.poll_timeout(), None);
    e.check_invariants().unwrap();
}

/// Beyond `max_connections` a connection is refused with a message that says so, and
/// closed; once one ends, a new one is served.
#[test]
fn connections_beyond_the_cap_are_refused_clearly() {
    let mut e = endpoint(16, 50 * MS);
    e.config.max_connections = 2;
    hello(&mut e, 0, 1, "a");
    accept(&mut e, 0, 2);
    accept(&mut e, 0, 3);
    let DaemonMsg::Refused { reason } = only(&mut e, 3) else {
        panic!("not refused")
    };
    assert_eq!(
        reason,
        "the daemon serves at most 2 connections at once (--max-connections)"
    );
    assert_eq!(closes(&mut e), [3]);
    e.handle(MS, Input::Gone(2, "disconnected".into()));
    assert_eq!(closes(&mut e), [2]);
    hello(&mut e, MS, 4, "d");
    e.check_invariants().unwrap();
}

/// A victim that never answers its suspension holds up only what needs its VRAM: an
/// allocation that fits in free VRAM, of a tenant the relocation does not move, is
/// granted at once, not after the 30 s answer deadline; the victim's own waits.
#[test]
fn an_allocation_that_fits_is_served_while_a_relocation_waits() {
    let mut e = endpoint(32, 3_600_000 * MS);
    hello(&mut e, 0, 1, "a");
    alloc(&mut e, 0, 1, 0, 16 * MIB);
    transmits(&mut e);
    hello(&mut e, 0, 3, "d");
    alloc(&mut e, 0, 3, 0, 8 * MIB);
    let DaemonMsg::Granted {
        buffer: d_buffer, ..
    } = only(&mut e, 3)
    else {
        panic!("not granted")
    };
    hello(&mut e, 0, 2, "b");
    hello(&mut e, 0, 4, "c");
    // B needs 4 MiB of A's (the largest share): A is asked to suspend and never answers.
    alloc(&mut e, MS, 2, 0, 12 * MIB);
    assert_eq!(transmits(&mut e), [(1, DaemonMsg::Suspend)]);
    // D frees 8 MiB meanwhile: C's 4 MiB and D's 2 MiB fit, and are granted at once.
    e.handle(
        2 * MS,
        Input::Frame(3, ClientMsg::Free { buffer: d_buffer }),
    );
    alloc(&mut e, 3 * MS, 4, 0, 4 * MIB);
    assert!(
        matches!(only(&mut e, 4), DaemonMsg::Granted { request: 0, .. }),
        "C waits for A"
    );
    alloc(&mut e, 3 * MS, 3, 1, 2 * MIB);
    assert!(matches!(
        only(&mut e, 3),
        DaemonMsg::Granted { request: 1, .. }
    ));
    e.check_invariants().unwrap();
    // A's own allocation waits for its relocation, and so does what needs eviction.
    alloc(&mut e, 4 * MS, 1, 1, 2 * MIB);
    alloc(&mut e, 4 * MS, 4, 1, 8 * MIB);
    assert!(transmits(&mut e).is_empty());
    e.check_invariants().unwrap();
    let snap = e.snapshot();
    assert_eq!(snap.tenants[3].waits, 0, "C never waited");
}

/// An allocation waiting at its tenant's memory_limit (`at_limit = "wait"`) fails as
/// out of memory once its `wait_timeout` has run out: a single-threaded program used to
/// wait for ever, with nothing to free while it waits.
#[test]
fn a_wait_at_the_limit_fails_as_out_of_memory_after_its_wait_timeout() {
    let mut e = endpoint(64, 50 * MS);
    let contract = gpuswap_core::Contract {
        memory_limit_bytes: Some(4 * MIB),
        at_limit: gpuswap_core::AtLimit::Wait,
        wait_timeout_ns: Some(1_000 * MS),
        ..Default::default()
    };
    e.config.contracts = [("waiter".to_owned(), contract)].into_iter().collect();
    hello(&mut e, 0, 1, "waiter");
    alloc(&mut e, MS, 1, 1, 4 * MIB);
    assert!(matches!(only(&mut e, 1), DaemonMsg::Granted { .. }));
    alloc(&mut e, 2 * MS, 1, 2, 2 * MIB);
    assert!(transmits(&mut e).is_empty(), "it waits for its own frees");
    assert_eq!(e.poll_timeout(), Some(1_002 * MS), "the wait's deadline");
    e.handle_timeout(1_001 * MS);
    assert!(transmits(&mut e).is_empty(), "not yet");
    // top shows the wait and how long it has lasted.
    assert_eq!(e.snapshot().tenants[0].waiting_ns, 999 * MS);
    e.handle_timeout(1_002 * MS);
    match only(&mut e, 1) {
        DaemonMsg::AllocFailed {
            request: 2,
            out_of_memory: true,
            error,
        } => assert!(error.contains("wait_timeout"), "{error}"),
        other => panic!("not failed as out of memory: {other:?}"),
    }
    assert!(
        logs(&mut e)
            .iter()
            .any(|l| l.contains("past its wait_timeout"))
    );
    e.check_invariants().unwrap();
}

// ---- memory held outside the books: dropped processes, declarations, device reports ----

/// The VRAM and host bytes of a grant's placement, in 2 MiB chunks.
fn split(placement: &[Placement]) -> (u64, u64) {
    let at = |l| {
        placement
            .iter()
            .filter(|r| r.location == l)
            .map(|r| u64::from(r.chunks) * 2 * MIB)
            .sum()
    };
    (at(Location::Vram), at(Location::Host))
}

/// A frozen victim is dropped at the deadline but its process lives: its 12 MiB stay
/// counted, so the allocation that waited for them lands in the 4 MiB left and in host
/// memory, not in VRAM the process still holds; once it exits, its VRAM is free again.
/// (Before, the allocation was placed in VRAM the process still held: on a GPU, out
/// of memory.)
#[test]
fn a_dropped_process_holds_its_vram_until_it_exits() {
    let mut e = crowded(3_600_000 * MS);
    e.hold_until_exit();
    let deadline = 10 * MS + 30_000 * MS;
    e.handle_timeout(deadline);
    assert_eq!(closes(&mut e), [1]);
    let granted = transmits(&mut e);
    let [(2, DaemonMsg::Granted { placement, .. })] = granted.as_slice() else {
        panic!("not granted: {granted:?}")
    };
    assert_eq!(split(placement), (4 * MIB, 8 * MIB));
    let log = logs(&mut e).join("\n");
    assert!(
        log.contains("pid 101 may still hold 12582912 bytes"),
        "{log}"
    );
    e.check_invariants().unwrap();
    let snap = e.snapshot();
    assert_eq!(snap.held_by_gone_bytes, 12 * MIB);
    assert_eq!(snap.vram_budget_bytes, 4 * MIB);
    assert_eq!(e.held_pids().collect::<Vec<_>>(), [101]);
    e.handle(deadline + MS, Input::Exited(101));
    let snap = e.snapshot();
    assert_eq!(
        (snap.held_by_gone_bytes, snap.vram_budget_bytes),
        (0, 16 * MIB)
    );
    assert!(e.held_pids().next().is_none());
    e.check_invariants().unwrap();
}

/// A dropped process that reconnects says hello under its pid: its VRAM is no longer
/// counted as held, for it declares what it holds, which is adopted.
#[test]
fn a_dropped_process_that_reconnects_declares_instead() {
    let mut e = crowded(3_600_000 * MS);
    e.hold_until_exit();
    let deadline = 10 * MS + 30_000 * MS;
    e.handle_timeout(deadline);
    transmits(&mut e);
    assert_eq!(e.snapshot().held_by_gone_bytes, 12 * MIB);
    let conn = 9;
    hello_as(&mut e, deadline, conn, 101, "a");
    assert_eq!(e.snapshot().held_by_gone_bytes, 0);
    let buffers = vec![held(12 * MIB, 2 * MIB, &[Location::Vram; 6])];
    e.handle(deadline, Input::Frame(conn, ClientMsg::Held { buffers }));
    let out = transmits(&mut e);
    assert!(
        out.iter().any(|(c, m)| *c == conn
            && matches!(m, DaemonMsg::Adopted { buffers } if buffers[0].is_some())),
        "{out:?}"
    );
    // B's 4 MiB and A's 12 MiB: the budget is the VRAM.
    assert_eq!(e.snapshot().vram_used_bytes, 16 * MIB);
    e.check_invariants().unwrap();
}

/// Without a driver that watches processes, a closed tenant's memory is free at once
/// (the memory would otherwise stay counted for ever).
#[test]
fn without_a_watch_a_closed_tenants_memory_is_free_at_once() {
    let mut e = crowded(3_600_000 * MS);
    e.handle_timeout(10 * MS + 30_000 * MS);
    let snap = e.snapshot();
    assert_eq!(
        (snap.held_by_gone_bytes, snap.vram_budget_bytes),
        (0, 16 * MIB)
    );
}

fn held(bytes: u64, chunk_bytes: u64, locations: &[Location]) -> HeldBuffer {
    HeldBuffer {
        bytes,
        chunk_bytes,
        placement: runs(locations.iter().copied()),
    }
}

/// A reconnecting process declares its buffers: each is booked where it is, over the
/// budget too, and answered with an id its frees use; a buffer of another chunk size
/// is not adopted and its VRAM is counted as held by the process until it exits.
#[test]
fn declared_buffers_are_adopted_where_they_are() {
    let mut e = endpoint(16, 3_600_000 * MS);
    e.hold_until_exit();
    hello(&mut e, 0, 1, "a");
    let (v, h) = (Location::Vram, Location::Host);
    let buffers = vec![
        held(6 * MIB, 2 * MIB, &[v, h, v]),
        held(16 * MIB, 2 * MIB, &[v; 8]),
        held(4 * MIB, 4 * MIB, &[v]),
        held(4 * MIB, 2 * MIB, &[v; 3]),
    ];
    e.handle(MS, Input::Frame(1, ClientMsg::Held { buffers }));
    let out = transmits(&mut e);
    let [(1, DaemonMsg::Adopted { buffers })] = out.as_slice() else {
        panic!("not answered: {out:?}")
    };
    assert!(matches!(buffers.as_slice(), [Some(_), Some(_), None, None]));
    e.check_invariants().unwrap();
    let snap = e.snapshot();
    assert_eq!(
        (snap.tenants[0].vram_bytes, snap.tenants[0].host_bytes),
        (20 * MIB, 2 * MIB)
    );
    assert_eq!(snap.held_by_gone_bytes, 8 * MIB);
    assert_eq!(snap.vram_used_bytes, 20 * MIB);
    // The adopted buffer's new id frees it.
    let buffer = buffers[0].unwrap();
    e.handle(3 * MS, Input::Frame(1, ClientMsg::Free { buffer }));
    assert!(closes(&mut e).is_empty());
    assert_eq!(e.snapshot().tenants[0].host_bytes, 0);
    e.check_invariants().unwrap();
}

/// The device's own free memory bounds the budget: what processes outside the daemon
/// use is not given out, and an allocation beyond it starts partly in host memory.
#[test]
fn the_device_report_bounds_the_budget() {
    let mut e = endpoint(16, 3_600_000 * MS);
    hello(&mut e, 0, 1, "a");
    let report = ClientMsg::DeviceMemory {
        free_bytes: 6 * MIB,
        total_bytes: 16 * MIB,
    };
    e.handle(MS, Input::Frame(1, report));
    assert_eq!(e.snapshot().vram_budget_bytes, 6 * MIB);
    alloc(&mut e, 2 * MS, 1, 1, 10 * MIB);
    let out = transmits(&mut e);
    let [(1, DaemonMsg::Granted { placement, .. })] = out.as_slice() else {
        panic!("not granted: {out:?}")
    };
    assert_eq!(split(placement), (6 * MIB, 4 * MIB));
    e.check_invariants().unwrap();
}

/// A tenant's progress report of `blocks` completed blocks over `window_ns`.
fn progress(e: &mut Endpoint, now_ns: u64, conn: ConnId, window_ns: u64, blocks: u64) {
    let p = gpuswap_wire::Progress {
        window_ns,
        launches: blocks,
        blocks,
        completed: blocks,
        completed_blocks: blocks,
        ..Default::default()
    };
    e.handle(now_ns, Input::Frame(conn, ClientMsg::Progress(p)));
}

#[test]
fn the_idle_time_before_a_tenants_work_is_no_slowness_of_its() {
    let auto = GpuTime::Auto(AutoSettings {
        turns: Default::default(),
        share_first: true,
    });
    let mut e = endpoint_timed(64, 50 * MS, auto);
    hello(&mut e, 0, 1, "a");
    e.handle(0, Input::Frame(1, ClientMsg::Busy));
    for i in 1..=3 {
        progress(&mut e, i * 100 * MS, 1, 100 * MS, 1000);
    }
    e.handle(400 * MS, Input::Frame(1, ClientMsg::Idle));
    // Idle 2 s, then busy for 100 ms: the window since its last report is 2.1 s long,
    // and the interposer claims all of it.
    e.handle(2300 * MS, Input::Frame(1, ClientMsg::Busy));
    progress(&mut e, 2400 * MS, 1, 2100 * MS, 1000);
    let slowdown = e.snapshot().tenants[0].slowdown;
    assert!((1.0..1.1).contains(&slowdown), "slowdown {slowdown}");
}

/// Whether connection `conn`'s hello at `now_ns` is welcomed with a request to measure
/// the link.
fn asked_to_probe(e: &mut Endpoint, now_ns: u64, conn: ConnId) -> bool {
    match welcome(e, now_ns, conn, 100 + conn as u32, "t") {
        DaemonMsg::Welcome { probe_remote, .. } => probe_remote,
        other => panic!("not welcomed: {other:?}"),
    }
}

#[test]
fn the_first_measured_link_sets_where_auto_starts_and_nothing_else_is_taken() {
    let auto = GpuTime::Auto(AutoSettings {
        turns: Default::default(),
        share_first: false,
    });
    let mut e = endpoint_timed(64, 50 * MS, auto);
    e.config.probe_remote = true;
    e.probe_remote = true;
    assert!(asked_to_probe(&mut e, 0, 1));
    assert!(asked_to_probe(&mut e, 0, 2));
    assert_eq!(e.snapshot().choice, "turns");
    logs(&mut e);
    // A Grace-Hopper-like link: share first.
    let cheap = ClientMsg::RemoteCost { remote_cost: 9.0 };
    e.handle(MS, Input::Frame(1, cheap));
    assert_eq!(e.snapshot().choice, "share");
    let said = logs(&mut e).join("\n");
    assert!(
        said.contains("a remote read takes 9.0 local reads' time"),
        "{said}"
    );
    assert!(said.contains("share first"), "{said}");
    // The other tenant, asked before the answer came, answers too: dropped.
    e.handle(
        2 * MS,
        Input::Frame(2, ClientMsg::RemoteCost { remote_cost: 240.0 }),
    );
    assert_eq!(e.snapshot().choice, "share");
    assert!(closes(&mut e).is_empty());
    // Nobody later is asked.
    assert!(!asked_to_probe(&mut e, 3 * MS, 3));
    // Nonsense is a protocol error.
    for (conn, remote_cost) in [(1, 0.5), (2, f64::NAN)] {
        e.handle(
            4 * MS,
            Input::Frame(conn, ClientMsg::RemoteCost { remote_cost }),
        );
        assert_eq!(closes(&mut e), [conn]);
    }
    e.check_invariants().unwrap();
}

#[test]
fn a_measured_link_nobody_asked_for_is_a_protocol_error() {
    let mut e = endpoint(64, 50 * MS);
    assert!(!asked_to_probe(&mut e, 0, 1));
    e.handle(
        MS,
        Input::Frame(1, ClientMsg::RemoteCost { remote_cost: 9.0 }),
    );
    assert_eq!(closes(&mut e), [1]);
}
